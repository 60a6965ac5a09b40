"""Collector ``osd``: what every OSD on this node experiences, from its admin socket.

Ceph's own ceph-exporter exports no histograms, no RocksDB or sub-op counters and
nothing about the host; this collector exports the op latency as real Prometheus
histograms (so ``histogram_quantile`` gives a true p99 per OSD, host or fleet), the
BlueStore/RocksDB stage latencies, the ops in flight and the configuration that detunes
an OSD, all labelled ``ceph_daemon="osd.N"`` so they join with the host facts.

Why this shape:

- Sockets are discovered on every scrape (one ``scandir``): OSDs come, go and restart.
- All OSDs are queried in parallel on a persistent, bounded :class:`QueryPool` within one
  budget (``--collector.osd.timeout``, kept below ``--collector.timeout``), so a stopped
  OSD (which accepts connections and never answers) costs the scrape at most the budget
  and is reported as itself: ``cephnode_osd_scrape_success{ceph_daemon} 0``.
- A failing OSD is logged when its failure starts or changes and when it recovers, not on
  every scrape (like the scraper's own collector log).
- A node without OSDs (no socket directory, or no OSD sockets) is a success with no OSD
  series: the collector is on by default and the exporter also runs on other nodes.
- Host facts per OSD: its pid comes from the admin socket's peer credentials
  (``SO_PEERCRED``, fetched in the same parallel task as the commands), its process is
  read from ``--path.procfs`` in that task too (procfs per pid, not sysfs: the thread
  statuses are about 1 ms per OSD, so ten OSDs overlap their kernel time instead of
  adding it up; hostfs/process.py says why not psutil). The ``block`` link of its data
  directory is followed to its disks in the collector's own thread (sysfs is read
  serially, as node_exporter learned to). A pid we cannot see (the OSD in another pid
  namespace), an OSD without a block device (memstore, a file-backed BlueStore) or an
  unreadable file leaves those series out with a logged reason; the OSD's own series and
  ``scrape_success`` do not depend on them.
- RocksDB compaction totals (``dump_objectstore_kv_stats``) only from an OSD whose
  ``config show`` says it keeps them (``rocksdb_perf`` and a ``rocksdb_collect_*`` option,
  all off by default): at Ceph's defaults the command is never sent.
- Latency computed here rather than in Prometheus (ceph/latency.py): each OSD's p99 over
  a sliding window of its own reads, and one histogram per op type and media pooling the
  node's OSDs. At 630 OSDs the rules that computed both from the 36,000 bucket series
  dominated Prometheus' evaluation (docs/performance.md); the exporter has the histograms
  in hand every scrape. The same for the means the rules took as ``rate(x_sum) /
  rate(x_count)`` of two raw counters per OSD (BlueStore commit, RocksDB stages, CPU per
  op): each OSD's over the same window, and the node's CPU per op. The state lives
  between scrapes under a lock, never held across socket I/O. The per-OSD histograms and
  counters stay exported, except the RocksDB stage summaries, whose series pay for the
  means.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from cephnode_exporter.ceph import counters as ceph_counters
from cephnode_exporter.ceph import kvstats, perf
from cephnode_exporter.ceph.asok import AdminSocket, AsokError, AsokStale, QueryPool
from cephnode_exporter.ceph.discovery import (
    DEFAULT_SOCKET_DIR,
    DUPLICATE,
    STALE,
    Answer,
    DiscoveryError,
    Dropped,
    OSDSocket,
    choose_sockets,
    discover_osd_sockets,
    limit_sockets,
)
from cephnode_exporter.ceph.latency import CounterWindow, LatencyWindow, PooledHistogram
from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    ItemLimit,
    bounded,
    metric_name,
    register,
)
from cephnode_exporter.collectors.osd_encryption import encryption_metrics, read_encryption
from cephnode_exporter.facts.osd import (
    DEFAULT_LATENCY_WINDOW,
    HostHistograms,
    OSDCollectorFacts,
    OSDFacts,
    PooledLatency,
)
from cephnode_exporter.hostfs import AttrFiles, HostFS, ParseError, ReadErrors, fd_budget
from cephnode_exporter.hostfs.blockdev import NoDevice, block_media, find_osd_block
from cephnode_exporter.hostfs.numa import cpus_per_node, read_node_cpus
from cephnode_exporter.hostfs.process import (
    THREAD_FD_SHARE,
    ProcessGone,
    ProcessSample,
    ProcessState,
    read_process,
)
from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

# Seconds all OSDs together may take. Healthy OSDs answer the five commands in about
# 5 ms (docs/ceph.md); the budget only matters for a stopped or overloaded OSD.
DEFAULT_TIMEOUT = 2.0
# Seconds a config show and version reply is reused (0: fetched every scrape). They change
# on `ceph config set` and restarts, and config show is the largest JSON of a scrape
# (68 KB, 0.7 ms to decode and parse per OSD): refetched at once when the OSD's pid
# changes (a restart), so a new version or object store is never stale.
DEFAULT_CONFIG_INTERVAL = 60.0
# Share of --collector.timeout the OSD queries may use, leaving time to parse and
# build metrics before the scraper abandons the collector.
TIMEOUT_SHARE = 0.8
# OSD sockets queried per scrape: a dense node runs 24 to 36 OSDs (a few dozen more with
# several OSDs per NVMe); about 120 series each.
DEFAULT_MAX_SOCKETS = 128
# The quantile exported per OSD, and the op rate below which it is left out: a p99 of
# fewer than 60 ops a minute is one slow op's latency, not a distribution's tail.
LATENCY_QUANTILE = 0.99
LATENCY_MIN_RATE = 1.0
# ... and per op type and media over the node's pooled OSDs: the median too, for the
# host's typical op, as no per-OSD p50 is exported (series budget).
HOST_LATENCY_QUANTILES = (0.5, 0.99)
# The perf dump time averages whose mean over the latency window is exported, in the
# order of one OSD's CounterWindow (a sum and a count each): the BlueStore commit, then
# the RocksDB stages (stage label, the metric's). Below MEAN_MIN_RATE events per second
# in the window a mean is left out, as the p99 is.
COMMIT_AVG = "bluestore.commit_lat"
ROCKSDB_STAGE_AVGS: tuple[tuple[str, str], ...] = (
    ("get", "rocksdb.get_latency"),
    ("submit", "rocksdb.submit_latency"),
    ("submit_sync", "rocksdb.submit_sync_latency"),
)
MEAN_AVGS: tuple[str, ...] = (COMMIT_AVG, *(key for _, key in ROCKSDB_STAGE_AVGS))
MEAN_MIN_RATE = 1.0
# The counter behind cephnode_osd_ops_total, the denominator of the CPU per op.
OPS_COUNTER = "osd.op"

# (perf dump section.counter, metric name suffix, help) of the time averages exported as
# summaries with only _sum and _count (a Prometheus summary without quantiles: the mean
# is rate(_sum) / rate(_count)). The op_r/op_w/op_rw averages give the histograms' _sum.
SUMMARIES: tuple[tuple[str, str, str], ...] = (
    (
        "osd.op_process_latency",
        "op_process_latency_seconds",
        "Client op latency from dequeue to completion (op_process_latency).",
    ),
    (
        "osd.op_prepare_latency",
        "op_prepare_latency_seconds",
        "Client op latency from receipt to start of processing (op_prepare_latency).",
    ),
    (
        "osd.op_before_dequeue_op_lat",
        "op_queue_wait_seconds",
        "Time client ops waited in the op queue before a shard thread took them "
        "(op_before_dequeue_op_lat).",
    ),
    (
        "osd.subop_w_latency",
        "subop_write_latency_seconds",
        "Replica write (sub-op) latency on this OSD as a replica (subop_w_latency).",
    ),
    ("bluestore.commit_lat", "bluestore_commit_latency_seconds", "BlueStore commit latency."),
    (
        "bluestore.kv_sync_lat",
        "bluestore_kv_sync_latency_seconds",
        "BlueStore kv_sync thread: flush plus commit of one batch (kv_sync_lat).",
    ),
    (
        "bluestore.kv_flush_lat",
        "bluestore_kv_flush_latency_seconds",
        "BlueStore device flush before a kv commit (kv_flush_lat).",
    ),
    (
        "bluestore.kv_commit_lat",
        "bluestore_kv_commit_latency_seconds",
        "BlueStore RocksDB commit of one batch (kv_commit_lat).",
    ),
    ("bluestore.read_lat", "bluestore_read_latency_seconds", "BlueStore read latency."),
    (
        "bluestore.throttle_lat",
        "bluestore_throttle_latency_seconds",
        "Time transactions waited on BlueStore's submission throttle (throttle_lat).",
    ),
    (
        "bluestore.allocator_lat",
        "bluestore_allocator_latency_seconds",
        "Time BlueStore's allocator took per allocation (allocator_lat; Reef and later): "
        "a fragmented or contended allocator shows here before it shows in the commit "
        "latency.",
    ),
    # The RocksDB stages (rocksdb.get_latency, submit_latency, submit_sync_latency) are
    # exported as their means over the window only (ROCKSDB_STAGE_AVGS): six series per
    # OSD fewer, which pay for the mean gauges (docs/metrics.md, "Series per OSD").
)
# (perf dump section.counter, metric name suffix without _total, help)
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("osd.op", "ops", "Client ops the OSD handled as primary (op)."),
    ("osd.op_in_bytes", "op_in_bytes", "Bytes clients wrote to the OSD (op_in_bytes)."),
    ("osd.op_out_bytes", "op_out_bytes", "Bytes clients read from the OSD (op_out_bytes)."),
    (
        "rocksdb.compact",
        "rocksdb_compact",
        "Full RocksDB compactions Ceph requested (compact); RocksDB's own background "
        "compactions are not counted here.",
    ),
    (
        "rocksdb.compact_range",
        "rocksdb_compact_range",
        "RocksDB range compactions Ceph requested (compact_range).",
    ),
    (
        "trackedop.slow_ops_count",
        "tracked_slow_ops",
        "Ops the OSD completed that took longer than osd_op_history_slow_op_threshold "
        "(10 s by default), since it started (trackedop.slow_ops_count; Reef and later). "
        "A running total: the ops slow now are cephnode_osd_slow_ops.",
    ),
    (
        "bluestore.slow_aio_wait_count",
        "bluestore_slow_aio_wait",
        "BlueStore transactions whose wait for their data writes (aio) took longer than "
        "bluestore_log_op_age (5 s by default) (slow_aio_wait_count; Reef and later).",
    ),
    (
        "bluestore.slow_committed_kv_count",
        "bluestore_slow_committed_kv",
        "BlueStore transactions whose RocksDB commit took longer than bluestore_log_op_age "
        "(slow_committed_kv_count; Reef and later).",
    ),
    (
        "bluestore.slow_read_onode_meta_count",
        "bluestore_slow_read_onode_meta",
        "BlueStore reads whose object metadata (onode) lookup took longer than "
        "bluestore_log_op_age (slow_read_onode_meta_count; Reef and later).",
    ),
    (
        "bluestore.slow_read_wait_aio_count",
        "bluestore_slow_read_wait_aio",
        "BlueStore reads whose wait for the device read (aio) took longer than "
        "bluestore_log_op_age (slow_read_wait_aio_count; Reef and later).",
    ),
)
# (perf dump section.counter, metric name suffix, help)
GAUGES: tuple[tuple[str, str, str], ...] = (
    ("osd.numpg", "pgs", "Placement groups on the OSD, primary or replica (numpg)."),
    ("osd.op_wip", "ops_in_progress", "Replication ops currently being processed (op_wip)."),
    (
        "rocksdb.compact_queue_len",
        "rocksdb_compact_queue_length",
        "RocksDB compaction ranges waiting (compact_queue_len).",
    ),
)
# (KVStats.db attribute, metric name suffix without _total, help) of the whole-DB RocksDB
# statistics (rocksdb_perf when the OSD started and rocksdb_collect_extended_stats).
_DB_ONLY = (
    " From RocksDB's statistics (every column family, exact), offered only with "
    "rocksdb_perf true when the OSD started and rocksdb_collect_extended_stats; kept "
    "since the OSD started."
)
KV_DB_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (
        "read_bytes",
        "rocksdb_compaction_read_bytes",
        "Bytes RocksDB compactions read (rocksdb.compact.read.bytes)." + _DB_ONLY,
    ),
    (
        "write_bytes",
        "rocksdb_compaction_write_bytes",
        "Bytes RocksDB compactions wrote (rocksdb.compact.write.bytes)." + _DB_ONLY,
    ),
    (
        "seconds",
        "rocksdb_compaction_seconds",
        "Wall time of RocksDB compaction jobs (rocksdb.compaction.times.micros sum); "
        "compaction throughput is rate(read+write bytes) / rate(this)." + _DB_ONLY,
    ),
    (
        "count",
        "rocksdb_compactions",
        "RocksDB compaction jobs, background and manual (rocksdb.compaction.times.micros "
        "count)." + _DB_ONLY,
    ),
    (
        "cpu_seconds",
        "rocksdb_compaction_cpu_seconds",
        "CPU time of RocksDB compaction jobs (rocksdb.compaction.times.cpu_micros sum)." + _DB_ONLY,
    ),
    (
        "flush_write_bytes",
        "rocksdb_flush_write_bytes",
        "Bytes RocksDB memtable flushes wrote to L0 (rocksdb.flush.write.bytes): what "
        "compaction rewrites; write amplification is rate(compaction + flush bytes "
        "written) / rate(this)." + _DB_ONLY,
    ),
)
# The same from one column family's rocksdb.stats table (Sum row), which Pacific and
# Reef dump for the default column family only and Tentacle for every column family
# (ceph/kvstats.py, measured on 16.2.15, 18.2.7 and 20.2.4).
_CF_ONLY = (
    " From the column family's rocksdb.stats table (rocksdb_perf and "
    "rocksdb_collect_compaction_stats): Pacific and Reef dump the default column family "
    "only, which on an OSD created sharded (Pacific and later) holds a small part of the "
    "data, Tentacle every column family; flushes count as compactions into L0; kept "
    "since the OSD started."
)
KV_CF_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (
        "read_bytes",
        "rocksdb_cf_compaction_read_bytes",
        "Bytes compactions of the column family read, in steps of 0.01 GiB (the "
        "Cumulative compaction line; 0.1 GiB from the table without it)." + _CF_ONLY,
    ),
    (
        "write_bytes",
        "rocksdb_cf_compaction_write_bytes",
        "Bytes compactions of the column family wrote, in steps of 0.01 GiB (0.1 GiB "
        "from the table)." + _CF_ONLY,
    ),
    (
        "seconds",
        "rocksdb_cf_compaction_seconds",
        "Time compactions of the column family took, in steps of 0.01 s (Comp(sec))." + _CF_ONLY,
    ),
    (
        "count",
        "rocksdb_cf_compactions",
        "Compactions of the column family (Comp(cnt))." + _CF_ONLY,
    ),
)
# Where cephadm keeps an OSD's data directory on the host (cephadm's get_data_dir():
# <data_dir>/<fsid>/<type>.<id>, data_dir /var/lib/ceph); inside the container, where
# config show's osd_data points, it is mounted as /var/lib/ceph/osd/ceph-<id>.
CEPHADM_DATA_DIR = "/var/lib/ceph/{fsid}/osd.{id}"


@dataclass
class _LatencyState:
    """One OSD's latency state between scrapes: its pid (a new one is a restart), the
    media pool it feeds, a window per op type, one for the sums and counts of the
    MEAN_AVGS it has (``mean_mask``: bit i for MEAN_AVGS[i]; pairs in that order) and
    one for its process's CPU seconds and its ops."""

    pid: int | None
    media: str
    windows: dict[str, LatencyWindow] = field(default_factory=dict)
    means: CounterWindow | None = None
    mean_mask: int = 0
    cpu: CounterWindow | None = None

    def restart(self) -> None:
        """The OSD restarted: every window starts over."""
        self.windows.clear()
        self.means = self.cpu = None
        self.mean_mask = 0


@dataclass
class ConfigCache:
    """One OSD's last ``config show`` and ``version``, reused for ``interval`` seconds.

    The task thread decides and fetches; the collector thread parses a fresh reply and
    stores the result (or clears the cache when it does not parse, so the next scrape
    asks again). A pid of None (not visible) relies on the interval alone.
    """

    pid: int | None = None
    fetched: float = float("-inf")
    config: perf.OSDConfig | None = None
    version: str | None = None
    kv_wanted: bool = False
    # The cluster fsid config show reported: tells a second socket of the same daemon
    # from another cluster's OSD with the same id (discovery.choose_sockets).
    fsid: str | None = None

    def fresh(self, pid: int | None, now: float, interval: float) -> bool:
        return (
            self.config is not None
            and self.version is not None
            and pid == self.pid
            and now - self.fetched < interval
        )


@dataclass
class _Replies:
    """The raw JSON replies of one OSD, gathered within the deadline."""

    histograms: Any = None
    perf: Any = None
    ops: Any = None
    config: Any = None
    version: Any = None
    kv_stats: bytes | None = None  # raw: the reply repeats keys and is several objects
    cache: ConfigCache | None = None  # config and version, unless fetched in this scrape
    fetched: bool = True  # config and version are in this reply (then parsed into cache)
    pid: int | None = None
    process: ProcessSample | None = None
    process_note: str | None = None
    process_error: str | None = None


def _query(
    sock: AdminSocket,
    deadline: float,
    fs: HostFS,
    state: ProcessState,
    cache: ConfigCache,
    interval: float,
    files: AttrFiles | None = None,
) -> _Replies:
    # perf histogram dump just before perf dump: the histogram's _count and perf
    # dump's _sum are then at most a few milliseconds apart (docs/metrics.md).
    r = _Replies()
    r.histograms = sock.command("perf histogram dump", logger="osd", deadline=deadline)
    # The pid of that connection's peer tells a restarted OSD from the cached one.
    seen = sock.last_peer
    r.perf = sock.command("perf dump", deadline=deadline)
    r.ops = sock.command("dump_ops_in_flight", deadline=deadline)
    now = time.monotonic()
    r.cache = cache
    if seen is not None and cache.fresh(seen[0], now, interval):
        r.fetched = False
    else:
        r.config = sock.command("config show", deadline=deadline)
        r.version = sock.command("version", deadline=deadline)
        cache.config, cache.version = None, None  # until the collector parsed them
        cache.pid = seen[0] if seen is not None else None
        cache.fetched = now
        cache.kv_wanted = kvstats.wanted(r.config)
        fsid = r.config.get("fsid") if isinstance(r.config, dict) else None
        cache.fsid = fsid if isinstance(fsid, str) else None
    if cache.kv_wanted:
        r.kv_stats = sock.raw("dump_objectstore_kv_stats", deadline=deadline)
    # The process after the commands: a failure here must not fail the OSD.
    try:
        r.pid = sock.seen_peer_pid(deadline=deadline)
    except AsokError as exc:
        r.process_error = f"peer pid: {exc}"
        return r
    if r.pid is None:
        r.process_note = (
            "the socket's peer pid is 0: the OSD runs in a pid namespace the exporter cannot see"
        )
        return r
    try:
        r.process = read_process(fs, r.pid, state, files=files)
    except ProcessGone as exc:
        r.process_note = str(exc)
    except (OSError, ParseError) as exc:
        r.process_error = str(exc)
    return r


def parse_replies(facts: OSDFacts, replies: _Replies) -> None:
    """Fill ``facts`` from the replies; raises :class:`perf.PerfParseError`."""
    cache = replies.cache
    if not replies.fetched and cache is not None:
        facts.config, facts.version = cache.config, cache.version
    else:
        facts.config = perf.parse_config(replies.config)
        facts.version = perf.parse_version(replies.version)
    assert facts.config is not None
    facts.histograms = perf.parse_op_histograms(replies.histograms)
    # Counter names by the OSD's release, and what its release and object store should
    # have, from the table in ceph/counters.py.
    release = perf.version_tuple(facts.version) if facts.version else None
    facts.counters = perf.parse_perf_dump(
        replies.perf,
        release[0] if release is not None else None,
        facts.config.objectstore,
        facts.config.op_queue,
    )
    facts.ops = perf.parse_ops_in_flight(replies.ops, facts.config.complaint_time)
    if replies.fetched and cache is not None:
        # Kept only once everything parsed: a bad reply is asked for again next scrape.
        cache.config, cache.version = facts.config, facts.version
    try:
        facts.kv = kvstats.parse_kv_stats(replies.kv_stats)
    except kvstats.KVStatsDeclined as exc:
        # The cached config show said the statistics were on, the OSD says they are off:
        # no series (as Pacific's and Reef's empty reply), and the command is not sent
        # again until config show is read anew and says they are on.
        facts.kv, facts.kv_note = None, str(exc)
        if cache is not None:
            cache.kv_wanted = False
    facts.pid = replies.pid
    facts.process = replies.process
    facts.process_note = replies.process_note
    facts.process_error = replies.process_error


def _shape(error: str | None) -> str | None:
    """An error without its numbers, so "after 1.95 s" repeats as the same error."""
    return None if error is None else re.sub(r"[0-9.]+", "#", error)


@register
class OSDCollector(Collector):
    name = "osd"
    help = (
        "Ceph OSDs of this node via their admin sockets: op latency histograms, "
        "BlueStore/RocksDB latencies, ops in flight, debug levels"
    )

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        opts = ctx.options
        self._socket_dir = str(opts.ceph_socket_dir)
        limit = ctx.collector_timeout * TIMEOUT_SHARE
        self._timeout = min(float(opts.collector_osd_timeout), limit)
        self._pool: QueryPool | None = None
        self._last_error: dict[str, str | None] = {}
        self._last_host: dict[str, tuple[str | None, str | None]] = {}
        self._proc_states: dict[str, ProcessState] = {}
        # The OSD processes' thread status files, kept open between scrapes (one
        # descriptor per thread, a quarter of the descriptor limit at most).
        self._thread_files = AttrFiles(fd_budget(THREAD_FD_SHARE), recheck=True)
        self._config_caches: dict[str, ConfigCache] = {}
        self._config_interval = float(opts.collector_osd_config_interval)
        # Per-subsystem debug series: the profile's list by default (Pacific leaves 62 of 64
        # subsystems at non-zero defaults such as 1/5: all of them would be ~60 series per
        # OSD of noise); every non-zero one with --collector.osd.all-debug-levels.
        self._debug_subsystems: frozenset[str] | None = None
        if not opts.collector_osd_all_debug_levels:
            self._debug_subsystems = ctx.reads.debug_subsystems
        self._dir_missing_logged = False
        self._socket_limit = ItemLimit(
            self.name,
            "OSD sockets",
            "--collector.osd.max-sockets",
            int(opts.collector_osd_max_sockets),
        )
        self._dropped_logged: set[tuple[str, str]] = set()
        # Socket path -> the counters already logged as missing (ceph/counters.py).
        self._missing_logged: dict[str, frozenset[str]] = {}
        # Socket path -> the OSD's last refusal of dump_objectstore_kv_stats (None: none).
        self._kv_notes: dict[str, str | None] = {}
        self._latency_window = float(opts.collector_osd_latency_window)
        # The time of a read for the latency windows; tests replace it to step minutes.
        self.clock: Callable[[], float] = time.monotonic
        # Windows and pools outlive a scrape; scrapes may overlap, so they are changed
        # under this lock, which is never held across socket I/O.
        self._latency_lock = threading.Lock()
        self._latency: dict[str, _LatencyState] = {}
        self._pools: dict[tuple[str, str], PooledHistogram] = {}
        self._pool_windows: dict[tuple[str, str], LatencyWindow] = {}
        self._latency_started = False
        self._sparse_logged = False

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--ceph.socket-dir",
            dest="ceph_socket_dir",
            default=DEFAULT_SOCKET_DIR,
            metavar="PATH",
            help="directory of the Ceph admin sockets, package (<cluster>-osd.<id>.asok) "
            "or cephadm (<fsid>/ceph-osd.<id>.asok) layout (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.timeout",
            dest="collector_osd_timeout",
            type=bounded(float, 0.01, 3600, "seconds"),
            default=DEFAULT_TIMEOUT,
            metavar="SECONDS",
            help="time all OSDs together may take to answer; an OSD that does not answer "
            f"in time reports scrape_success 0 (capped at {TIMEOUT_SHARE:g} x "
            "--collector.timeout; default: %(default)s)",
        )

        parser.add_argument(
            "--collector.osd.config-interval",
            dest="collector_osd_config_interval",
            type=bounded(float, 0, 3600, "seconds"),
            default=DEFAULT_CONFIG_INTERVAL,
            metavar="SECONDS",
            help="reuse each OSD's config show and version replies this long (debug "
            "levels and options show changes after at most this; a restarted OSD is "
            "asked at once; 0: every scrape; default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.latency-window",
            dest="collector_osd_latency_window",
            type=bounded(float, 60, 3600, "seconds"),
            default=DEFAULT_LATENCY_WINDOW,
            metavar="SECONDS",
            help="the exported op latency quantiles (each OSD's p99, the node's pooled p50 "
            "and p99) and means (BlueStore commit, RocksDB stages, CPU per op) cover the "
            "reads of this many seconds, like rate() over this range (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.max-sockets",
            dest="collector_osd_max_sockets",
            type=bounded(int, 1, 65536),
            default=DEFAULT_MAX_SOCKETS,
            metavar="N",
            help="query at most this many OSD admin sockets, the first by OSD id; the "
            "others are counted in cephnode_scrape_collector_items_dropped (default: "
            "%(default)s)",
        )
        parser.add_argument(
            "--collector.osd.all-debug-levels",
            dest="collector_osd_all_debug_levels",
            action="store_true",
            help="export every non-zero debug subsystem, not only the profile's "
            "osd.debug_levels list (about 60 more series per OSD at Ceph's defaults)",
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._thread_files.close_all()

    def read(self) -> OSDCollectorFacts:
        errors = ReadErrors()
        try:
            sockets = discover_osd_sockets(self._socket_dir, errors)
        except DiscoveryError as exc:
            if "no such directory" not in str(exc):
                raise
            # No Ceph on this node (or not yet): a success; its only OSD series is sockets 0.
            if not self._dir_missing_logged:
                log.info("no Ceph socket directory", extra=kv(path=self._socket_dir))
                self._dir_missing_logged = True
            sockets = []
        else:
            self._dir_missing_logged = False
        if not sockets:
            self._socket_limit.note(0, 0)
            self._note_dropped([])
            self._forget(set())
            with self._latency_lock:
                host = self._pooled()
            return OSDCollectorFacts(self._socket_dir, [], errors, None, host, self._latency_window)
        limited = limit_sockets(sockets, self._socket_limit.limit)
        self._socket_limit.note(len(limited.dropped), len(sockets))
        sockets = limited.kept
        if self._pool is None:
            self._pool = QueryPool()
        # Keyed by path: two clusters on one node may both have an osd.0.
        tasks = {}
        for s in sockets:
            sock = AdminSocket(s.path, timeout=self._timeout, connect_timeout=self._timeout)
            state = self._proc_states.setdefault(s.path, ProcessState())
            cache = self._config_caches.setdefault(s.path, ConfigCache())
            tasks[s.path] = _task(
                sock, self.ctx.fs, state, cache, self._config_interval, self._thread_files
            )
        results = self._pool.run(tasks, self._timeout)
        # One socket per daemon: a stale or second socket of an OSD is left out here.
        choice = choose_sockets(sockets, self._answers(sockets, results))
        self._note_dropped(choice.dropped)
        now = self.clock()
        numa_nodes = self._numa_nodes(errors)
        osds = []
        for s in choice.kept:
            result = results[s.path]
            facts = OSDFacts(s, result.seconds)
            if result.error is not None:
                facts.error = str(result.error)
                facts.reason = getattr(result.error, "reason", type(result.error).__name__)
            elif result.value is None:
                facts.error = f"{s.path}: no reply"
                facts.reason = "no_reply"
            else:
                try:
                    parse_replies(facts, result.value)
                except perf.PerfParseError as exc:
                    facts.error = f"{s.path}: {exc}"
                    facts.reason = "parse"
                else:
                    self._host_facts(facts, numa_nodes, errors)
            self._note(facts)
            osds.append(facts)
        self._forget({s.path for s in sockets})
        host, host_cpu_per_op = self._update_latency(osds, now)
        return OSDCollectorFacts(
            self._socket_dir,
            osds,
            errors,
            numa_nodes,
            host,
            self._latency_window,
            host_cpu_per_op,
            dropped=[*choice.dropped, *limited.dropped],
        )

    def _answers(self, sockets: list[OSDSocket], results: dict[str, Any]) -> dict[str, Answer]:
        """What choose_sockets needs of each query: refused, and the fsid reported."""
        out = {}
        for s in sockets:
            cache = self._config_caches.get(s.path)
            refused = isinstance(results[s.path].error, AsokStale)
            out[s.path] = Answer(refused, cache.fsid if cache is not None else None)
        return out

    def _note_dropped(self, dropped: list[Dropped]) -> None:
        """Log each stale or duplicate socket once, when it starts being left out."""
        now = {(d.socket.path, d.reason) for d in dropped}
        for d in dropped:
            if (d.socket.path, d.reason) not in self._dropped_logged:
                log.warning(
                    "OSD admin socket left out: another socket serves the same OSD",
                    extra=kv(
                        ceph_daemon=d.socket.ceph_daemon,
                        reason=d.reason,
                        path=d.socket.path,
                        instead=d.instead,
                    ),
                )
        self._dropped_logged = now

    def _update_latency(
        self, osds: list[OSDFacts], now: float
    ) -> tuple[HostHistograms, float | None]:
        """Feed this scrape's histograms and counters to the windows and the pools (under
        the lock); sets each OSD's quantiles and means, and returns the pooled histograms
        and the node's CPU seconds per op."""
        # The node's OSDs' CPU and op increases over their windows, and their op rates.
        host_cpu = host_ops = host_rate = 0.0
        with self._latency_lock:
            # The exporter's first read: every OSD's is a baseline, so the pools start at
            # 0 with the exporter (ceph/latency.py PooledHistogram says why). Later, a new
            # OSD's first read is a baseline too.
            initial = not self._latency_started
            self._latency_started = True
            for o in osds:
                if not o.ok or o.counters is None:
                    continue
                path = o.socket.path
                state = self._latency.get(path)
                restarted = False
                if state is None:
                    state = self._latency[path] = _LatencyState(o.pid, o.media)
                else:
                    if o.pid is not None and state.pid is not None and o.pid != state.pid:
                        # Restarted: its counters start over (even if a long gap hid the
                        # drop), so the windows do, and the pool counts it from 0.
                        state.restart()
                        self._forget_pooled(path)
                        restarted = True
                    if o.pid is not None:
                        state.pid = o.pid
                    if o.media != state.media:
                        # Moved to another pool: a baseline there (counted from 0 after a
                        # restart), its past stays in the old one.
                        self._forget_pooled(path)
                        state.media = o.media
                for op, h in o.histograms.items():
                    avg = o.counters.avgs.get(f"osd.{perf.OP_LATENCY_AVGS[op]}")
                    if avg is None:
                        continue  # exported without it neither (build_metrics)
                    window = state.windows.get(op)
                    if window is None:
                        window = state.windows[op] = LatencyWindow(self._latency_window)
                    window.observe(now, h.buckets, avg.sum)
                    if window.gap_s and not self._sparse_logged:
                        # Else the quantiles vanish with no word: say it once.
                        self._sparse_logged = True
                        log.warning(
                            "OSD histogram reads are further apart than the latency "
                            "window: no latency quantiles until they come closer (scrape "
                            "more often or raise --collector.osd.latency-window)",
                            extra=kv(gap_s=round(window.gap_s, 1), window_s=window.window_s),
                        )
                    q = window.quantile(LATENCY_QUANTILE, LATENCY_MIN_RATE)
                    if q is not None:
                        o.latency_quantiles[op] = q
                    pool = self._pools.get((op, state.media))
                    if pool is None:
                        pool = self._pools[(op, state.media)] = PooledHistogram()
                    pool.update(path, h.buckets, avg.sum, initial=initial, restarted=restarted)
                self._update_means(o, state, now)
                increase = self._update_cpu(o, state, now)
                if increase is not None:
                    elapsed, (cpu, ops) = increase
                    host_cpu += cpu
                    host_ops += ops
                    host_rate += ops / elapsed
            # Each pool is a counter of its own: its window sees every scrape, even one
            # where none of its OSDs answered (no ops added).
            for key, pool in self._pools.items():
                buckets = pool.buckets()
                if buckets:
                    window = self._pool_windows.get(key)
                    if window is None:
                        window = self._pool_windows[key] = LatencyWindow(self._latency_window)
                    window.observe(now, buckets, pool.sum())
            host_cpu_per_op = None
            if host_ops > 0 and host_rate >= MEAN_MIN_RATE:
                host_cpu_per_op = host_cpu / host_ops
            return self._pooled(), host_cpu_per_op

    def _update_means(self, o: OSDFacts, state: _LatencyState, now: float) -> None:
        """Feed the OSD's MEAN_AVGS to its window (the caller holds the lock) and set the
        means with enough events; an OSD without them (memstore) has no window."""
        assert o.counters is not None
        avgs = o.counters.avgs
        present = 0  # bit i: MEAN_AVGS[i] is in this perf dump
        values: list[float] = []
        for i, key in enumerate(MEAN_AVGS):
            avg = avgs.get(key)
            if avg is not None:
                present |= 1 << i
                values += (avg.sum, avg.count)
        if not present:
            state.means, state.mean_mask = None, 0
            return
        window = state.means
        if window is None or present != state.mean_mask:
            # Another set of counters (a different build): the old reads do not compare.
            window = state.means = CounterWindow(self._latency_window)
            state.mean_mask = present
        window.observe(now, values)
        j = 0  # the counter pair of MEAN_AVGS[i] in the window
        for i, key in enumerate(MEAN_AVGS):
            if present & 1 << i:
                mean = window.ratio(2 * j, 2 * j + 1, MEAN_MIN_RATE)
                if mean is not None:
                    o.latency_means[key] = mean
                j += 1

    def _update_cpu(
        self, o: OSDFacts, state: _LatencyState, now: float
    ) -> tuple[float, tuple[float, ...]] | None:
        """Feed the process's CPU seconds and the OSD's ops to its window (the caller
        holds the lock), set its CPU per op, and return the window's increase; None when
        the process or the op counter was not read in this scrape, or the window has no
        increase yet."""
        assert o.counters is not None
        ops = o.counters.integers.get(OPS_COUNTER)
        if o.process is None or ops is None:
            return None
        window = state.cpu
        if window is None:
            window = state.cpu = CounterWindow(self._latency_window)
        window.observe(now, (o.process.cpu_user_seconds + o.process.cpu_system_seconds, ops))
        o.cpu_per_op = window.ratio(0, 1, MEAN_MIN_RATE)
        return window.increase()

    def _forget_pooled(self, path: str) -> None:
        for pool in self._pools.values():
            pool.forget(path)

    def _pooled(self) -> HostHistograms:
        """A copy of every pool that has buckets (the caller holds the lock)."""
        out: HostHistograms = {}
        for key, pool in sorted(self._pools.items()):
            buckets = pool.buckets()
            if not buckets:
                continue
            quantiles = {}
            window = self._pool_windows.get(key)
            for q in HOST_LATENCY_QUANTILES:
                value = None if window is None else window.quantile(q, LATENCY_MIN_RATE)
                if value is not None:
                    quantiles[q] = value
            out[key] = PooledLatency(buckets, pool.sum(), quantiles)
        return out

    def _numa_nodes(self, errors: ReadErrors) -> dict[int, frozenset[int]] | None:
        try:
            return read_node_cpus(self.ctx.fs)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            return None

    def _host_facts(
        self,
        facts: OSDFacts,
        numa_nodes: dict[int, frozenset[int]] | None,
        errors: ReadErrors,
    ) -> None:
        """The OSD's NUMA spread and its disks (sysfs, this thread)."""
        if facts.process_error is not None:
            errors.add(Exception(facts.process_error))
        if facts.process is not None and numa_nodes is not None:
            facts.allowed_cpus = cpus_per_node(facts.process.cpus_allowed, numa_nodes)
        assert facts.config is not None
        data_dirs = []
        if facts.socket.layout == "cephadm":
            data_dirs.append(
                CEPHADM_DATA_DIR.format(fsid=facts.socket.cluster, id=facts.socket.osd_id)
            )
        if facts.config.osd_data:
            data_dirs.append(facts.config.osd_data)
        if not data_dirs:
            facts.block_note = "config show has no osd_data"
        else:
            self._find_block(facts, data_dirs, errors)
        facts.media = self._media(facts, errors)
        # dm-crypt under the block device: collectors/osd_encryption.py.
        facts.encryption = read_encryption(facts, errors)

    def _find_block(self, facts: OSDFacts, data_dirs: list[str], errors: ReadErrors) -> None:
        for data_dir in data_dirs:
            try:
                facts.block = find_osd_block(self.ctx.fs, data_dir)
            except NoDevice as exc:
                facts.block_note = str(exc)
                continue
            except (OSError, ParseError) as exc:
                facts.block_error = str(exc)
                errors.add(exc)
            facts.block_note = None
            return

    def _media(self, facts: OSDFacts, errors: ReadErrors) -> str:
        """The data disk's kind, read once per OSD process (kept in its ProcessState,
        which a new pid resets); read every scrape while the process is not visible,
        and not kept after a read error, so the next scrape asks again."""
        state = self._proc_states.get(facts.socket.path) if facts.process is not None else None
        if state is not None:
            with state.lock:
                if state.media is not None:
                    return state.media
        if facts.block_error is not None:
            return "unknown"
        try:
            media = block_media(self.ctx.fs, facts.block)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            return "unknown"
        if state is not None:
            with state.lock:
                state.media = media
        return media

    def _note(self, facts: OSDFacts) -> None:
        """Log an OSD's failure when it starts or changes, and its recovery."""
        path = facts.socket.path
        previous = self._last_error.get(path)
        self._last_error[path] = facts.error
        if facts.error is not None and _shape(facts.error) != _shape(previous):
            log.warning(
                "OSD admin socket query failed",
                extra=kv(ceph_daemon=facts.ceph_daemon, reason=facts.reason, err=facts.error),
            )
        elif facts.error is None and previous is not None:
            log.info("OSD answers again", extra=kv(ceph_daemon=facts.ceph_daemon))

        self._note_host(facts)
        self._note_missing(facts)
        self._note_kv(facts)

    def _note_kv(self, facts: OSDFacts) -> None:
        """Log once per change that an OSD declined its RocksDB statistics."""
        if not facts.ok:
            return
        path = facts.socket.path
        previous = self._kv_notes.get(path)
        self._kv_notes[path] = facts.kv_note
        if facts.kv_note is not None and facts.kv_note != previous:
            log.info(
                "OSD declined dump_objectstore_kv_stats; its RocksDB statistics series are "
                "absent until config show says they are on",
                extra=kv(ceph_daemon=facts.ceph_daemon, reason=facts.kv_note),
            )

    def _note_missing(self, facts: OSDFacts) -> None:
        """Log each counter the OSD's release and object store should have but its perf
        dump lacks, once per daemon and counter (again only after it came back)."""
        if facts.counters is None:
            return
        path = facts.socket.path
        missing = frozenset(facts.counters.missing)
        for key in sorted(missing - self._missing_logged.get(path, frozenset())):
            log.warning(
                "OSD lacks a perf counter its release should have; its series are absent",
                extra=kv(ceph_daemon=facts.ceph_daemon, counter=key, version=facts.version),
            )
        self._missing_logged[path] = missing

    def _note_host(self, facts: OSDFacts) -> None:
        """Log why an answering OSD lacks process or device series, once per change."""
        if not facts.ok:
            return
        path = facts.socket.path
        process = facts.process_error or facts.process_note
        device = facts.block_error or facts.block_note
        old_process, old_device = self._last_host.get(path, (None, None))
        self._last_host[path] = (process, device)
        d = facts.ceph_daemon
        if process is not None and _shape(process) != _shape(old_process):
            level = logging.WARNING if facts.process_error else logging.INFO
            log.log(level, "OSD process not read", extra=kv(ceph_daemon=d, reason=process))
        if device is not None and _shape(device) != _shape(old_device):
            level = logging.WARNING if facts.block_error else logging.INFO
            log.log(level, "OSD has no device series", extra=kv(ceph_daemon=d, reason=device))

    def _forget(self, present: set[str]) -> None:
        for path in set(self._last_error) - present:
            del self._last_error[path]
        for path in set(self._proc_states) - present:
            key = self._proc_states[path].key
            if key is not None:  # the gone OSD's kept thread status files
                self._thread_files.close_under(self.ctx.fs.proc(str(key[0])) + os.sep)
        for cache in (
            self._last_host,
            self._proc_states,
            self._config_caches,
            self._missing_logged,
            self._kv_notes,
        ):
            for path in set(cache) - present:
                del cache[path]
        with self._latency_lock:
            for path in set(self._latency) - present:
                del self._latency[path]
                self._forget_pooled(path)  # its socket is gone; its past ops stay pooled

    def read_errors(self, facts: OSDCollectorFacts) -> int:
        """Unreadable cephadm directories and OSDs that did not answer."""
        return len(facts.errors) + sum(1 for o in facts.osds if not o.ok)

    def first_errors(self, facts: OSDCollectorFacts, limit: int = 3) -> list[str]:
        items = list(facts.errors.items) + [o.error for o in facts.osds if o.error]
        return items[:limit]

    def metrics(self, facts: OSDCollectorFacts) -> Iterable[Metric]:
        families = build_metrics(
            facts.osds,
            self._debug_subsystems,
            facts.host_histograms,
            facts.latency_window,
            facts.host_cpu_per_op,
        )
        return [*families, *_dropped_metrics(facts), *encryption_metrics(facts.osds)]


def _dropped_metrics(facts: OSDCollectorFacts) -> list[Metric]:
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


def _task(
    sock: AdminSocket,
    fs: HostFS,
    state: ProcessState,
    cache: ConfigCache,
    interval: float,
    files: AttrFiles,
) -> Any:
    return lambda deadline: _query(sock, deadline, fs, state, cache, interval, files)


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
        HistogramMetricFamily,
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
    pooled = HistogramMetricFamily(
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
        pooled.add_metric([op, media], [(_le(edge), n) for edge, n in pool.buckets], pool.sum)
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
            buckets = [(_le(edge), float(n)) for edge, n in h.buckets]
            hist.add_metric([d, op], buckets, avg.sum)
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
    ]


def _le(edge: float) -> str:
    """Prometheus ``le`` text: "+Inf" or the shortest repr (0.0001, 0.0002, ... 6.5536)."""
    return "+Inf" if edge == float("inf") else repr(edge)
