"""The ``osd`` collector's metric families, built from one scrape's facts (pure).

Part of the ``osd`` collector (collectors/osd.py): :func:`build_metrics` turns the
facts of every OSD (facts/osd.py) and the node's pooled latency into the
``cephnode_osd_*`` families; the one-to-one counters come from the tables in
collectors/osd_catalogue.py. Every family here is in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample

from cephnode_exporter.ceph import counters as ceph_counters
from cephnode_exporter.ceph import perf
from cephnode_exporter.ceph.discovery import DUPLICATE, STALE
from cephnode_exporter.collectors.base import metric_name
from cephnode_exporter.collectors.osd_catalogue import (
    COUNTERS,
    GAUGES,
    KV_CF_COUNTERS,
    KV_DB_COUNTERS,
    SUMMARIES,
)
from cephnode_exporter.collectors.osd_latency import (
    COMMIT_AVG,
    LATENCY_MIN_RATE,
    LATENCY_QUANTILE,
    MEAN_MIN_RATE,
    ROCKSDB_STAGE_AVGS,
)
from cephnode_exporter.collectors.osd_network import network_metrics
from cephnode_exporter.facts.osd import (
    DEFAULT_LATENCY_WINDOW,
    HostHistograms,
    OSDCollectorFacts,
    OSDFacts,
)


def dropped_metrics(facts: OSDCollectorFacts) -> list[Metric]:
    """Sockets ignored because another one serves the same OSD, by reason; none on a node
    without OSD sockets (whose only OSD series stays cephnode_osd_sockets 0)."""
    if not facts.osds and not facts.dropped:
        return []
    family = GaugeMetricFamily(
        metric_name("osd", "sockets_ignored"),
        "OSD admin sockets found in this scrape but ignored because another socket serves "
        "the same OSD, by reason: stale (nobody listens on it: a file left behind, e.g. by "
        "cephadm adoption), duplicate (a second socket of a daemon already reported: same "
        "OSD id and cluster fsid); the log names them.",
        labels=["reason"],
    )
    for reason in (STALE, DUPLICATE):
        family.add_metric([reason], float(sum(1 for d in facts.dropped if d.reason == reason)))
    return [family]


class LatencyHistogramFamily(HistogramMetricFamily):
    """A histogram family whose :meth:`add_buckets` gives exactly the samples of
    ``add_metric([*labels], [(le text, n) ...], sum)``, with fewer operations per bucket:
    the label text of each edge is kept from scrape to scrape (the edges are the OSDs'
    fixed axis), and each bucket's labels are one dict copy instead of a list of
    zipped pairs. An OSD exports three of these histograms of some 30 buckets, and the
    node's pool a few more: the most samples of any OSD family.
    """

    def add_buckets(
        self, labels: Sequence[str], buckets: Sequence[tuple[float, float]], sum_value: float
    ) -> None:
        base = dict(zip(self._labelnames, labels, strict=True))
        name = self.name + "_bucket"
        samples = self.samples
        for edge, value in buckets:
            le = _LE.get(edge)
            if le is None:
                le = _le(edge)
                if len(_LE) < _MAX_LE:
                    _LE[edge] = le
            samples.append(Sample(name, {**base, "le": le}, value, None, None))
        # As add_metric: _count (the +Inf bucket) and _sum only for a non-negative first
        # edge and a sum.
        if buckets and buckets[0][0] >= 0 and sum_value is not None:
            samples.append(Sample(self.name + "_count", dict(base), buckets[-1][1], None, None))
            samples.append(Sample(self.name + "_sum", dict(base), sum_value, None, None))


# Edge -> its le text; bounded (the OSDs' axes have some 30 edges, the same for all).
_LE: dict[float, str] = {}
_MAX_LE = 1024


def _family(kind: type, suffix: str, doc: str, labels: list[str]) -> Any:
    return kind(metric_name("osd", suffix), doc, labels=["ceph_daemon", *labels])


def build_metrics(
    osds: list[OSDFacts],
    debug_subsystems: frozenset[str] | None = None,
    host: HostHistograms | None = None,
    window: float = DEFAULT_LATENCY_WINDOW,
    host_cpu_per_op: float | None = None,
) -> list[Metric]:
    """Metric families of one scrape's OSD facts (pure); ``debug_subsystems`` None
    exports every non-zero one, ``host`` are the pooled histograms, ``window`` the
    seconds behind the quantiles and means (for their HELP), ``host_cpu_per_op`` the
    node's CPU seconds per op."""
    # One series per node: what the alerts' "this host runs OSDs" reads, instead of
    # counting every OSD's scrape_success series over an hour.
    sockets = GaugeMetricFamily(
        metric_name("osd", "sockets"),
        "OSD admin sockets found on this node in this scrape, answering or not (0 without "
        "a Ceph socket directory).",
        labels=[],
    )
    sockets.add_metric([], float(len(osds)))
    success = _family(
        GaugeMetricFamily,
        "scrape_success",
        "1 when the OSD answered every admin socket command in this scrape and the "
        "replies parsed, 0 otherwise (the log says why).",
        [],
    )
    duration = _family(
        GaugeMetricFamily,
        "scrape_duration_seconds",
        "Time the OSD's admin socket queries took in this scrape (the budget when it "
        "did not answer).",
        [],
    )
    info = _family(
        GaugeMetricFamily,
        "info",
        "The OSD's Ceph version and object store (from version and config show), and the "
        "malloc its process linked: tcmalloc, jemalloc, libc, unknown; empty when the "
        "process was not readable (from /proc/<pid>/maps, read once per process).",
        ["version", "objectstore", "allocator"],
    )
    # One series per node, not per OSD (the per-OSD series budget, docs/metrics.md); the
    # log names each daemon and counter. None on a node without OSD sockets.
    missing = GaugeMetricFamily(
        metric_name("osd", "counters_missing"),
        "Perf counters that this node's answering OSDs should have for their Ceph release "
        "and object store (the exporter's table of counter names by release) but whose "
        "perf dump lacks them, summed over the OSDs: the series read from them are absent. "
        "The log names each daemon and counter once.",
        labels=[],
    )
    if osds:
        missing.add_metric(
            [], float(sum(len(o.counters.missing) for o in osds if o.ok and o.counters))
        )
    hist = _family(
        LatencyHistogramFamily,
        "op_latency_seconds",
        "Client op latency on the OSD as primary, from perf histogram dump (size axis "
        "collapsed; _sum from perf dump's op_<type>_latency).",
        ["op"],
    )
    quantile = _family(
        GaugeMetricFamily,
        "op_latency_quantile_seconds",
        f"Client op latency phi-quantile on the OSD over the last {window:g} s "
        "(--collector.osd.latency-window) of its op latency histogram, interpolated within "
        "its buckets like PromQL's histogram_quantile of rate(); absent below "
        f"{LATENCY_MIN_RATE:g} op/s in that window and before the OSD's second read "
        "(phi, not quantile: a gauge, not a summary).",
        ["op", "phi"],
    )
    over = f"over the last {window:g} s (--collector.osd.latency-window)"
    floor = f"{MEAN_MIN_RATE:g}"
    commit_mean = _family(
        GaugeMetricFamily,
        "bluestore_commit_latency_mean_seconds",
        f"Mean BlueStore commit latency (bluestore.commit_lat) {over}: the increase of its "
        "sum over that of its count, like rate(_sum) / rate(_count) of "
        f"cephnode_osd_bluestore_commit_latency_seconds; absent below {floor} commit/s in "
        "that window and before the OSD's second read.",
        [],
    )
    rocksdb_mean = _family(
        GaugeMetricFamily,
        "rocksdb_latency_mean_seconds",
        f"Mean RocksDB latency per stage (get, submit, submit_sync: rocksdb.get_latency, "
        f"submit_latency, submit_sync_latency) {over}, like rate(_sum) / rate(_count) of "
        f"cephnode_osd_rocksdb_<stage>_latency_seconds; absent per stage below {floor} "
        "call/s in that window and before the OSD's second read.",
        ["stage"],
    )
    cpu_per_op = _family(
        GaugeMetricFamily,
        "cpu_seconds_per_op",
        f"CPU seconds of the OSD process (utime + stime) per client op (osd.op, "
        f"cephnode_osd_ops_total) {over}; absent below {floor} op/s in that window, before "
        "the second read and when the process was not read.",
        [],
    )
    host_cpu_per_op_family = GaugeMetricFamily(
        metric_name("osd", "host_cpu_seconds_per_op"),
        f"CPU seconds per client op of all OSDs of this node together {over}: the sum of "
        "their processes' CPU increases over the sum of their op increases, each OSD over "
        "its own window (those whose process was read); like sum(rate(cpu)) / "
        f"sum(rate(ops)); absent below {floor} op/s summed over the OSDs.",
        labels=[],
    )
    if host_cpu_per_op is not None:
        host_cpu_per_op_family.add_metric([], host_cpu_per_op)
    summaries = [
        (key, _family(SummaryMetricFamily, suffix, doc, [])) for key, suffix, doc in SUMMARIES
    ]
    counters = [
        (key, _family(CounterMetricFamily, suffix, doc, [])) for key, suffix, doc in COUNTERS
    ]
    gauges = [(key, _family(GaugeMetricFamily, suffix, doc, [])) for key, suffix, doc in GAUGES]
    mclock_queue = _family(
        GaugeMetricFamily,
        "mclock_queue_length",
        "Ops waiting in the OSD's mClock scheduler per scheduler class (immediate, client, "
        "background_recovery, background_best_effort), summed over its op shards (perf "
        "dump mclock-shard-queue-<n>; Reef and later, only under osd_op_queue = "
        "mclock_scheduler).",
        ["scheduler_class"],
    )
    op_queue = _family(
        GaugeMetricFamily,
        "op_queue_info",
        "The OSD's op scheduler (osd_op_queue: wpq, mclock_scheduler) and, under mClock, "
        "its profile (osd_mclock_profile: balanced, high_client_ops, high_recovery_ops, "
        "custom; empty under another scheduler), from config show.",
        ["op_queue", "mclock_profile"],
    )
    in_flight = _family(
        GaugeMetricFamily, "ops_in_flight", "Ops in flight (dump_ops_in_flight num_ops).", []
    )
    slow = _family(
        GaugeMetricFamily,
        "slow_ops",
        "Ops in flight older than the OSD's osd_op_complaint_time (Ceph's slow ops).",
        [],
    )
    slow_by_flag = _family(
        GaugeMetricFamily,
        "slow_ops_by_flag_point",
        "Slow ops (older than osd_op_complaint_time) by the last flag point they reached "
        "(as ops_in_flight_by_flag_point; only flag points with slow ops are exported).",
        ["flag_point"],
    )
    oldest = _family(
        GaugeMetricFamily,
        "oldest_op_age_seconds",
        "Age of the oldest op in flight (0 when none).",
        [],
    )
    by_flag = _family(
        GaugeMetricFamily,
        "ops_in_flight_by_flag_point",
        "Ops in flight by the last flag point they reached (a fixed set plus 'other'; "
        "only flag points with ops are exported).",
        ["flag_point"],
    )
    debug_info = _family(
        GaugeMetricFamily,
        "debug_level_info",
        "A debug subsystem of the profile's osd.debug_levels list (every one with "
        "--collector.osd.all-debug-levels) whose log or gather (in-memory) level is not 0.",
        ["subsystem", "log_level", "gather_level"],
    )
    debug_count = _family(
        GaugeMetricFamily,
        "debug_nonzero_subsystems",
        "Debug subsystems with a log or gather level above 0.",
        [],
    )
    config = _family(
        GaugeMetricFamily,
        "config_value",
        "Numeric OSD options that shape its performance (op shards, threads per shard, "
        "memory target, complaint time), from config show; osd_op_num_shards and "
        "osd_op_num_threads_per_shard only when set (non-zero).",
        ["option"],
    )
    cpu = _family(
        CounterMetricFamily,
        "cpu_seconds",
        "CPU time of the OSD process, all threads, exited ones included "
        "(/proc/<pid>/stat utime, stime).",
        ["mode"],
    )
    rss = _family(
        GaugeMetricFamily,
        "resident_memory_bytes",
        "Resident memory of the OSD process (/proc/<pid>/status VmRSS).",
        [],
    )
    threads = _family(
        GaugeMetricFamily, "threads", "Threads of the OSD process (/proc/<pid>/status).", []
    )
    switches = _family(
        CounterMetricFamily,
        "context_switches",
        "Context switches of the OSD's threads (/proc/<pid>/task/*/status), voluntary "
        "(blocked) or involuntary (preempted); exited threads keep counting.",
        ["kind"],
    )
    allowed = _family(
        GaugeMetricFamily,
        "allowed_cpus",
        "Online CPUs of each NUMA node the OSD's threads may run on (Cpus_allowed_list "
        "of /proc/<pid>/task/*/status against /sys/devices/system/node); only nodes "
        "with at least one.",
        ["numa_node"],
    )
    kv_db = [
        (attr, _family(CounterMetricFamily, suffix, doc, []))
        for attr, suffix, doc in KV_DB_COUNTERS
    ]
    kv_cf = [
        (attr, _family(CounterMetricFamily, suffix, doc, ["column_family"]))
        for attr, suffix, doc in KV_CF_COUNTERS
    ]
    device = _family(
        GaugeMetricFamily,
        "device_info",
        "A disk under the OSD's block device (the block link of osd_data followed "
        "through device-mapper and partitions), named like node_exporter's device "
        "label, and its NVMe controller (empty for other disks).",
        ["device", "controller"],
    )
    pooled = LatencyHistogramFamily(
        metric_name("osd", "host_op_latency_seconds"),
        "Client op latency of all OSDs of this node pooled per op type and data disk kind "
        "(media: nvme, hdd, ssd, unknown): each OSD's increases since the exporter "
        "started (a restarted OSD counted from 0, a new one from its first read); never "
        "goes backwards.",
        labels=["op", "media"],
    )
    pooled_quantile = GaugeMetricFamily(
        metric_name("osd", "host_op_latency_quantile_seconds"),
        f"Client op latency phi-quantile of all OSDs of this node pooled per op type and "
        f"data disk kind, over the last {window:g} s (--collector.osd.latency-window) of "
        "the pooled histogram, interpolated like PromQL's histogram_quantile of rate(); "
        f"absent below {LATENCY_MIN_RATE:g} op/s in that window.",
        labels=["op", "media", "phi"],
    )
    for (op, media), pool in sorted((host or {}).items()):
        pooled.add_buckets([op, media], pool.buckets, pool.sum)
        for q, seconds in sorted(pool.quantiles.items()):
            pooled_quantile.add_metric([op, media, repr(q)], seconds)

    for o in osds:
        d = o.ceph_daemon
        success.add_metric([d], 1.0 if o.ok else 0.0)
        duration.add_metric([d], o.seconds)
        if not o.ok:
            continue
        assert o.counters is not None and o.ops is not None and o.config is not None
        allocator = o.process.allocator if o.process is not None else ""
        info.add_metric([d, o.version or "", o.config.objectstore, allocator], 1.0)
        for op, h in o.histograms.items():
            avg = o.counters.avgs.get(f"osd.{perf.OP_LATENCY_AVGS[op]}")
            if avg is None:
                continue  # a _sum is mandatory; no OSD lacks these counters
            hist.add_buckets([d, op], [(edge, float(n)) for edge, n in h.buckets], avg.sum)
        for op, seconds in sorted(o.latency_quantiles.items()):
            quantile.add_metric([d, op, repr(LATENCY_QUANTILE)], seconds)
        means = o.latency_means
        if means:
            mean = means.get(COMMIT_AVG)
            if mean is not None:
                commit_mean.add_metric([d], mean)
            for stage, key in ROCKSDB_STAGE_AVGS:
                mean = means.get(key)
                if mean is not None:
                    rocksdb_mean.add_metric([d, stage], mean)
        if o.cpu_per_op is not None:
            cpu_per_op.add_metric([d], o.cpu_per_op)
        for key, family in summaries:
            avg = o.counters.avgs.get(key)
            if avg is not None:
                family.add_metric([d], avg.count, avg.sum)
        for key, family in counters:
            n = o.counters.integers.get(key)
            if n is not None:
                family.add_metric([d], float(n))
        for key, family in gauges:
            n = o.counters.integers.get(key)
            if n is not None:
                family.add_metric([d], float(n))
        for cls in ceph_counters.MCLOCK_QUEUES:
            n = o.counters.mclock.get(cls)
            if n is not None:
                mclock_queue.add_metric([d, cls], float(n))
        if o.config.op_queue:
            op_queue.add_metric([d, o.config.op_queue, o.config.mclock_profile], 1.0)
        in_flight.add_metric([d], float(o.ops.num_ops))
        slow.add_metric([d], float(o.ops.slow))
        oldest.add_metric([d], o.ops.oldest_age)
        for flag in (*perf.FLAG_POINTS, perf.OTHER_FLAG_POINT):
            n = o.ops.by_flag_point.get(flag, 0)
            if n:
                by_flag.add_metric([d, flag], float(n))
            n = o.ops.slow_by_flag_point.get(flag, 0)
            if n:
                slow_by_flag.add_metric([d, flag], float(n))
        nonzero = 0
        for sub, level in sorted(o.config.debug.items()):
            if level.log or level.gather:
                nonzero += 1
                if debug_subsystems is None or sub in debug_subsystems:
                    debug_info.add_metric([d, sub, str(level.log), str(level.gather)], 1.0)
        debug_count.add_metric([d], float(nonzero))
        for option in perf.CONFIG_OPTIONS:
            value = o.config.options.get(option)
            if value is None or (value == 0 and option in perf.UNSET_WHEN_ZERO):
                continue
            config.add_metric([d, option], value)
        if o.process is not None:
            p = o.process
            cpu.add_metric([d, "user"], p.cpu_user_seconds)
            cpu.add_metric([d, "system"], p.cpu_system_seconds)
            if p.rss_bytes is not None:
                rss.add_metric([d], float(p.rss_bytes))
            threads.add_metric([d], float(p.threads))
            switches.add_metric([d, "voluntary"], float(p.voluntary_switches))
            switches.add_metric([d, "involuntary"], float(p.involuntary_switches))
        for node, n in sorted((o.allowed_cpus or {}).items()):
            allowed.add_metric([d, str(node)], float(n))
        if o.kv is not None:
            if o.kv.db is not None:
                for attr, family in kv_db:
                    n = getattr(o.kv.db, attr)
                    if n is not None:
                        family.add_metric([d], float(n))
            for cf, stats in sorted(o.kv.column_families.items()):
                for attr, family in kv_cf:
                    family.add_metric([d, cf], float(getattr(stats, attr)))
        if o.block is not None:
            for disk in o.block.disks:
                for controller in disk.controllers or ("",):
                    device.add_metric([d, disk.name, controller], 1.0)

    return [
        sockets,
        success,
        duration,
        info,
        *([missing] if osds else []),
        hist,
        quantile,
        commit_mean,
        rocksdb_mean,
        cpu_per_op,
        host_cpu_per_op_family,
        *(f for _, f in summaries),
        *(f for _, f in counters),
        *(f for _, f in gauges),
        mclock_queue,
        op_queue,
        in_flight,
        slow,
        oldest,
        by_flag,
        slow_by_flag,
        debug_info,
        debug_count,
        config,
        cpu,
        rss,
        threads,
        switches,
        allowed,
        *(f for _, f in kv_db),
        *(f for _, f in kv_cf),
        device,
        pooled,
        pooled_quantile,
        *network_metrics(osds),
    ]


def _le(edge: float) -> str:
    """Prometheus ``le`` text: "+Inf" or the shortest repr (0.0001, 0.0002, ... 6.5536)."""
    return "+Inf" if edge == float("inf") else repr(edge)
