"""The osd collector against real Ceph clusters of every release the tests run
(tests/cephcluster.py): Pacific from the host's Debian 12, Reef and Tentacle from Debian
chroots (tests/chroots.py). Each test runs once per release (``-k pacific``, ``-k reef``,
``-k tentacle`` selects one).

Write load grows the histograms, which agree with perf dump, and the pooled per-host
histogram by as much as the OSDs' together; the exported means over the window (BlueStore
commit, RocksDB stages, CPU per op, per OSD and for the node) are the increases of the
raw counters exported at both reads; BlueStore and RocksDB
series exist for the BlueStore OSD only; a stopped replica under write load is reported
as itself within the budget while the primary's stuck ops show; a restarted OSD is found
again; each OSD's process (through the real /proc) and its lack of a block device (memstore,
BlueStore on a file) are reported. Shares the session's cluster with
tests/test_cephcluster.py.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from cephnode_exporter.ceph.asok import AdminSocket
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection

from tests.cephcluster import CephCluster, shared_cluster
from tests.conftest import Tree, collect, samples, value
from tests.test_osd import ONLY_OSD

# What differs between the releases' Debian packages, as the exporter sees it: the malloc
# ceph-osd links (Debian 12's uses glibc's; trixie's and sid's link libtcmalloc.so.4, per
# ldd) and the ceph PR that put the RocksDB build fix into the release
# (checks/osd.py ROCKSDB_FIX_PRS).
ALLOCATOR = {"pacific": "libc", "reef": "tcmalloc", "tentacle": "tcmalloc"}
ROCKSDB_FIX_PR = {"pacific": "#55500", "reef": "#55502", "tentacle": "#54918"}
CLUSTER_RELEASES = ("pacific", "reef", "tentacle")


@pytest.fixture(scope="session", params=CLUSTER_RELEASES)
def osd_cluster(request: pytest.FixtureRequest) -> CephCluster:
    return shared_cluster(request.config, request.param)


def scrape(cluster: CephCluster, tree: Tree, *extra: str) -> tuple[Collection, float]:
    start = time.monotonic()
    c = collect([*tree.flags, f"--ceph.socket-dir={cluster.socket_dir}", *ONLY_OSD, *extra])
    return c, time.monotonic() - start


def buckets(c: Collection, daemon: str, op: str) -> list[tuple[float, float]]:
    out = []
    for family in c.families():
        if family.name != "cephnode_osd_op_latency_seconds":
            continue
        for s in family.samples:
            labels = s.labels
            if s.name.endswith("_bucket") and (labels["ceph_daemon"], labels["op"]) == (daemon, op):
                out.append((float(labels["le"]), s.value))
    return sorted(out)


def op_w(cluster: CephCluster, osd_id: int) -> dict[str, Any]:
    return AdminSocket(cluster.asok(f"osd.{osd_id}")).command("perf dump", logger="osd")["osd"][
        "op_w_latency"
    ]


def test_histograms_grow_under_load_and_agree_with_perf_dump(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    tree = node_trees["epyc9454p-tuned"]
    osd_cluster.create_pool("osdhist", size=1, pg_num=32)
    # One exporter across the load, for the pooled per-host histogram and the means (their
    # state lives between scrapes), reading the real OSD processes for the CPU per op;
    # the other scrapes are fresh exporters.
    flags = [*tree.flags, "--path.procfs=/proc", f"--ceph.socket-dir={osd_cluster.socket_dir}",
             *ONLY_OSD]  # fmt: skip
    exporter = build_scraper(parse_args(["dump", *flags]))
    try:
        t0 = time.monotonic()
        before = exporter.collect(10.0)
        t1 = time.monotonic()
        osd_cluster.rados_bench("osdhist", 3, mode="write", block=65536)
        _check_histograms(osd_cluster, tree, before)
        t2 = time.monotonic()
        last = exporter.collect(10.0)
        t3 = time.monotonic()
    finally:
        exporter.close()
    # The exporter's two reads were taken inside [t0, t1] and [t2, t3].
    _check_means(osd_cluster, before, last, (t2 - t1, t3 - t0))
    # The pool grew by what the OSDs' histograms grew between the exporter's two reads.
    grown = {
        d: (value(last, "cephnode_osd_op_latency_seconds_count", ceph_daemon=d, op="write") or 0)
        - (value(before, "cephnode_osd_op_latency_seconds_count", ceph_daemon=d, op="write") or 0)
        for d in (f"osd.{i}" for i in osd_cluster.osds)
    }
    assert all(g > 0 for g in grown.values()), grown
    assert pooled_writes(last) - pooled_writes(before) == sum(grown.values())


def _check_means(
    cluster: CephCluster, before: Collection, last: Collection, elapsed: tuple[float, float]
) -> None:
    """The mean gauges of the exporter's second read against the increases of the raw
    counters it exported at both reads: present and equal when the events were at least
    1/s even over the longest time the reads can be apart, absent when below 1/s even
    over the shortest. The BlueStore OSD's commits and the node's ops are well above."""
    shortest, longest = elapsed

    def grew(metric: str, **labels: str) -> float:
        new, old = value(last, metric, **labels), value(before, metric, **labels)
        assert new is not None and old is not None, (metric, labels)
        return new - old

    def check(mean: float | None, total: float, events: float, what: object) -> None:
        if events / longest >= 1:
            assert mean == pytest.approx(total / events, rel=1e-9, abs=1e-12), what
        elif events / shortest < 1:
            assert mean is None, what
        else:  # the rate is 1/s within the clocks' uncertainty
            assert mean is None or mean == pytest.approx(total / events, rel=1e-9), what

    host_cpu = host_ops = 0.0
    for osd_id in cluster.osds:
        d = {"ceph_daemon": f"osd.{osd_id}"}
        cpu = sum(
            grew("cephnode_osd_cpu_seconds_total", mode=mode, **d) for mode in ("user", "system")
        )
        ops = grew("cephnode_osd_ops_total", **d)
        host_cpu, host_ops = host_cpu + cpu, host_ops + ops
        check(value(last, "cephnode_osd_cpu_seconds_per_op", **d), cpu, ops, (d, cpu, ops))
        commit = value(last, "cephnode_osd_bluestore_commit_latency_mean_seconds", **d)
        stages = {
            stage: value(last, "cephnode_osd_rocksdb_latency_mean_seconds", stage=stage, **d)
            for stage in ("get", "submit", "submit_sync")
        }
        if osd_id not in cluster.bluestore_ids:
            assert commit is None and set(stages.values()) == {None}, d
            continue
        base = "cephnode_osd_bluestore_commit_latency_seconds"
        commits = grew(f"{base}_count", **d)
        assert commits / longest >= 1, (d, commits, longest)  # the bench wrote to it
        check(commit, grew(f"{base}_sum", **d), commits, (d, "commit"))
        # The RocksDB stages are exported as means only: their raw perf dump averages
        # are the collector's reads, in the collection's facts.
        for stage, mean in stages.items():
            new, old = (raw_avg(c, osd_id, f"rocksdb.{stage}_latency") for c in (last, before))
            n = new.count - old.count
            check(mean, new.sum - old.sum, n, (d, stage, n))
    # Every OSD's process was read at both scrapes: the node's is all of them together.
    assert host_ops / longest >= 1, host_ops
    host = value(last, "cephnode_osd_host_cpu_seconds_per_op")
    assert host == pytest.approx(host_cpu / host_ops, rel=1e-9)


def raw_avg(c: Collection, osd_id: int, key: str) -> Any:
    """The perf dump time average ``key`` of the OSD as the collector read it."""
    (outcome,) = [o for o in c.outcomes if o.name == "osd"]
    (osd,) = [o for o in outcome.facts.osds if o.ceph_daemon == f"osd.{osd_id}"]
    return osd.counters.avgs[key]


def pooled_writes(c: Collection) -> float:
    """The +Inf count of the pooled write histograms, every media together."""
    return sum(
        v
        for (name, labels), v in samples(c).items()
        if name == "cephnode_osd_host_op_latency_seconds_bucket"
        and ("op", "write") in labels
        and ("le", "+Inf") in labels
    )


def _check_histograms(osd_cluster: CephCluster, tree: Tree, before: Collection) -> None:
    for osd_id in osd_cluster.osds:
        d = f"osd.{osd_id}"
        # Two commands are not atomic: bracket the scrape between two perf dumps and
        # retry until nothing completed meanwhile (the mgr writes now and then).
        for _ in range(20):
            first = op_w(osd_cluster, osd_id)
            after, took = scrape(osd_cluster, tree)
            if op_w(osd_cluster, osd_id) == first:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"{d}: op_w_latency never stable")
        count = value(after, "cephnode_osd_op_latency_seconds_count", ceph_daemon=d, op="write")
        total = value(after, "cephnode_osd_op_latency_seconds_sum", ceph_daemon=d, op="write")
        old = value(before, "cephnode_osd_op_latency_seconds_count", ceph_daemon=d, op="write")
        assert count is not None and total is not None and old is not None
        assert count > old, d
        assert count == first["avgcount"], d
        assert total == pytest.approx(first["sum"]), d
        # Seconds, not micro- or nanoseconds: the mean lies between the bucket edges
        # of the ops (lower edge of each op's bucket <= its latency < upper edge).
        bs = buckets(after, d, "write")
        assert bs[-1] == (math.inf, count)
        low = high = 0.0
        prev_edge, prev_n = 0.0, 0.0
        for edge, n in bs:
            if n > prev_n:
                low += (n - prev_n) * prev_edge
                high += (n - prev_n) * edge
            prev_edge, prev_n = edge, n
        assert low <= total <= high, (d, low, total, high)
        assert took < 2.0
        store = value(after, "cephnode_osd_bluestore_commit_latency_seconds_count", ceph_daemon=d)
        rocks = value(after, "cephnode_osd_rocksdb_compact_queue_length", ceph_daemon=d)
        objectstore = "bluestore" if osd_id in osd_cluster.bluestore_ids else "memstore"
        # allocator "": the fixture's procfs does not hold the real OSD's process.
        assert value(after, "cephnode_osd_info", ceph_daemon=d, version=osd_cluster.version,
                     objectstore=objectstore, allocator="") == 1  # fmt: skip
        if osd_id in osd_cluster.bluestore_ids:
            assert store and store > 0 and rocks is not None, d
        else:
            assert store is None and rocks is None, d


def test_stopped_replica_under_write_load(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    tree = node_trees["epyc9454p-tuned"]
    osd_cluster.ceph("config", "set", "osd", "osd_op_complaint_time", "2")
    try:
        pool_id = osd_cluster.create_pool("osdstall", size=2, pg_num=16)
        pgs = osd_cluster.pgs(pool_id)
        # A memstore replica of some PG whose primary is another OSD.
        victim = next(
            p["acting"][1]
            for p in pgs
            if len(p["acting"]) == 2 and p["acting"][1] in osd_cluster.memstore_ids
        )
        # The bench keeps 16 ops in flight: once all are stuck on PGs the victim
        # replicates, which of those PGs' primaries hold them is chance.
        primaries = {p["acting_primary"] for p in pgs if p["acting"][1:] == [victim]}
        bench = osd_cluster.bench_background("osdstall", 20, mode="write", block=4096)
        try:
            time.sleep(1.5)
            with osd_cluster.stopped(victim):
                time.sleep(3.5)
                c, took = scrape(osd_cluster, tree, "--collector.osd.timeout=1.0")
            assert took < 1.0 + 0.8, took
            assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1
            for osd_id in osd_cluster.osds:
                expected = 0 if osd_id == victim else 1
                got = value(c, "cephnode_osd_scrape_success", ceph_daemon=f"osd.{osd_id}")
                assert got == expected, (osd_id, victim)
            stuck_on = {
                i: value(c, "cephnode_osd_ops_in_flight_by_flag_point",
                         ceph_daemon=f"osd.{i}", flag_point="waiting for sub ops") or 0
                for i in primaries
            }  # fmt: skip
            primary = max(stuck_on, key=lambda i: stuck_on[i])
            p = f"osd.{primary}"
            waiting = stuck_on[primary]
            assert waiting > 0, (stuck_on, victim)
            assert (value(c, "cephnode_osd_slow_ops", ceph_daemon=p) or 0) > 0
            assert (value(c, "cephnode_osd_oldest_op_age_seconds", ceph_daemon=p) or 0) > 2
            assert value(c, "cephnode_osd_config_value", ceph_daemon=p,
                         option="osd_op_complaint_time") == 2  # fmt: skip
        finally:
            bench.kill()
            bench.wait()
        # After SIGCONT the OSD first serves the connections abandoned meanwhile.
        deadline = time.monotonic() + 20
        while True:
            c, _ = scrape(osd_cluster, tree)
            ok = [
                value(c, "cephnode_osd_scrape_success", ceph_daemon=f"osd.{i}")
                for i in osd_cluster.osds
            ]
            stuck = value(c, "cephnode_osd_ops_in_flight", ceph_daemon=f"osd.{primary}")
            if all(v == 1 for v in ok) and stuck == 0:
                break
            assert time.monotonic() < deadline, (ok, stuck)
            time.sleep(0.5)
    finally:
        osd_cluster.ceph("config", "rm", "osd", "osd_op_complaint_time")


def test_restarted_osd_is_rediscovered(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    tree = node_trees["epyc9454p-tuned"]
    osd_id = osd_cluster.memstore_ids[-1]
    d = f"osd.{osd_id}"
    before, _ = scrape(osd_cluster, tree)
    assert value(before, "cephnode_osd_scrape_success", ceph_daemon=d) == 1
    osd_cluster.restart_osd(osd_id)
    after, _ = scrape(osd_cluster, tree)
    assert value(after, "cephnode_osd_scrape_success", ceph_daemon=d) == 1
    ops_before = value(before, "cephnode_osd_ops_total", ceph_daemon=d) or 0
    ops_after = value(after, "cephnode_osd_ops_total", ceph_daemon=d)
    assert ops_after is not None and ops_after <= ops_before  # counters restarted


HOST = ["--path.procfs=/proc", "--path.sysfs=/sys", "--path.rootfs=/"]


def test_process_and_disks_of_the_real_osds(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    """The real daemons through the real /proc and /sys: the pid from SO_PEERCRED is the
    one each OSD wrote to its pid file (psutil, an independent reader, agrees on its
    numbers); Debian 12's ceph-osd uses glibc malloc, trixie's and sid's tcmalloc; the
    BlueStore OSD's block is a plain file and the memstore OSDs have none: no
    device_info, no error."""
    import psutil

    tree = node_trees["epyc9454p-tuned"]
    before = {i: psutil.Process(osd_cluster.osd_pid(i)).cpu_times() for i in osd_cluster.osds}
    c, _ = scrape(osd_cluster, tree, *HOST)
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0
    for osd_id in osd_cluster.osds:
        d = {"ceph_daemon": f"osd.{osd_id}"}
        proc = psutil.Process(osd_cluster.osd_pid(osd_id))
        with proc.oneshot():
            times, rss, ctx = proc.cpu_times(), proc.memory_info().rss, proc.num_ctx_switches()
            nthreads = proc.num_threads()
        user = value(c, "cephnode_osd_cpu_seconds_total", mode="user", **d)
        system = value(c, "cephnode_osd_cpu_seconds_total", mode="system", **d)
        assert user is not None and system is not None, d
        # Between psutil's reads before and after the scrape (the same process), and
        # not nothing. One of the two may be 0: a memstore OSD can idle without a
        # single tick of system time.
        assert before[osd_id].user <= user <= times.user + 0.05, (d, before[osd_id], user)
        assert before[osd_id].system <= system <= times.system + 0.05, (d, system)
        assert user + system > 0, d
        got_rss = value(c, "cephnode_osd_resident_memory_bytes", **d)
        assert got_rss is not None and 10 << 20 < got_rss < 4 << 30, d  # MiB, not pages
        assert abs(got_rss - rss) < 64 << 20, d
        threads = value(c, "cephnode_osd_threads", **d)
        assert threads is not None and threads > 20 and abs(threads - nthreads) <= 3, d
        vol = value(c, "cephnode_osd_context_switches_total", kind="voluntary", **d)
        invol = value(c, "cephnode_osd_context_switches_total", kind="involuntary", **d)
        # Summed over the threads: far above what the main thread alone (psutil) shows.
        assert vol is not None and invol is not None and vol > 2 * ctx.voluntary, (d, vol, ctx)
        objectstore = "bluestore" if osd_id in osd_cluster.bluestore_ids else "memstore"
        assert value(c, "cephnode_osd_info", version=osd_cluster.version,
                     objectstore=objectstore, allocator=ALLOCATOR[osd_cluster.release],
                     **d) == 1  # fmt: skip
        cpus = len(proc.cpu_affinity())
        assert value(c, "cephnode_osd_allowed_cpus", numa_node="0", **d) == cpus, d
    assert not [k for k in samples(c) if k[0] == "cephnode_osd_device_info"]
    assert osd_cluster.bluestore_block(osd_cluster.bluestore_ids[0]).is_file()
    results = {(r.check, r.subject): r for r in c.results if r.check.startswith("osd.")}
    for osd_id in osd_cluster.osds:
        d = f"osd.{osd_id}"
        numa = results[("osd.numa", d)]
        assert numa.status == "skip" and "no device" in numa.observed, numa
        rocks = results[("osd.rocksdb_build", d)]
        if osd_id in osd_cluster.bluestore_ids:
            pr = ROCKSDB_FIX_PR[osd_cluster.release]
            assert (rocks.status, rocks.observed) == (
                "pass",
                f"{osd_cluster.version}: has the fix (PR {pr})",
            )
            assert "is not a block device" in numa.observed
        else:
            assert rocks.status == "skip" and "memstore" in rocks.observed
        pgs = results[("osd.pg_count", d)]
        n = value(c, "cephnode_osd_pgs", ceph_daemon=d)
        assert pgs.observed == f"{int(n or 0)} PGs"
        assert pgs.status == ("pass" if 50 <= (n or 0) <= 200 else "warn")


def test_every_counter_of_the_release_is_read_and_none_missing(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    """The counter table (ceph/counters.py) matches the real daemons of each release:
    nothing is reported missing, and every summary, counter and gauge family the table
    expects for the OSD's release and object store is exported, under the same metric
    name on every release (Reef's txc_commit_lat is still
    cephnode_osd_bluestore_commit_latency_seconds); the ones it does not expect (Reef's
    dropped compact_range) are absent."""
    from cephnode_exporter.ceph import counters
    from cephnode_exporter.collectors import osd_catalogue

    tree = node_trees["epyc9454p-tuned"]
    c, _ = scrape(osd_cluster, tree)
    assert value(c, "cephnode_osd_counters_missing") == 0
    major = int(osd_cluster.version.split(".")[0])
    families = [
        *((k, f"cephnode_osd_{m}_count") for k, m, _ in osd_catalogue.SUMMARIES),
        *((k, f"cephnode_osd_{m}_total") for k, m, _ in osd_catalogue.COUNTERS),
        *((k, f"cephnode_osd_{m}") for k, m, _ in osd_catalogue.GAUGES),
    ]
    for osd_id in osd_cluster.osds:
        d = f"osd.{osd_id}"
        store = "bluestore" if osd_id in osd_cluster.bluestore_ids else "memstore"
        (outcome,) = [o for o in c.outcomes if o.name == "osd"]
        (facts,) = [o for o in outcome.facts.osds if o.ceph_daemon == d]
        assert facts.counters.missing == (), (d, facts.counters.missing)
        for key, metric in families:
            expected = counters.BY_KEY[key].expected(major, store)
            got = value(c, metric, ceph_daemon=d)
            assert (got is not None) == expected, (d, key, metric, got)


def test_newer_signals_where_the_release_has_them(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    """Every OSD's op queue (and mClock profile) as its config says; the mClock queue
    lengths of every class where the release has them (Reef and later under
    mclock_scheduler); and with the slow-op thresholds lowered, a write load moves the
    tracked-op total of the OSDs and the BlueStore OSD's slow-commit counter, which
    Pacific does not have at all (tests/test_osd_releases.py has the recorded replies)."""
    tree = node_trees["epyc9454p-tuned"]
    major = int(osd_cluster.version.split(".")[0])
    before, _ = scrape(osd_cluster, tree)
    for osd_id in osd_cluster.osds:
        d = {"ceph_daemon": f"osd.{osd_id}"}
        sock = AdminSocket(osd_cluster.asok(f"osd.{osd_id}"))
        queue = sock.command("config get", var="osd_op_queue")["osd_op_queue"]
        profile = sock.command("config get", var="osd_mclock_profile")["osd_mclock_profile"]
        mclock = queue == "mclock_scheduler"
        assert mclock == (major >= 18), (d, queue)  # Ceph's defaults, measured
        labels = {"op_queue": queue, "mclock_profile": profile if mclock else ""}
        assert value(before, "cephnode_osd_op_queue_info", **labels, **d) == 1
        for cls in ("immediate", "client", "background_recovery", "background_best_effort"):
            got = value(before, "cephnode_osd_mclock_queue_length", scheduler_class=cls, **d)
            assert (got is not None) == mclock, (d, cls, got)
    osd_cluster.ceph("config", "set", "osd", "osd_op_history_slow_op_threshold", "0.005")
    osd_cluster.ceph("config", "set", "osd", "bluestore_log_op_age", "0.0005")
    try:
        osd_cluster.create_pool("osdslow", size=1, pg_num=16)
        osd_cluster.rados_bench("osdslow", 2, mode="write", block=4096, threads=32)
        after, _ = scrape(osd_cluster, tree)
    finally:
        osd_cluster.ceph("config", "rm", "osd", "osd_op_history_slow_op_threshold")
        osd_cluster.ceph("config", "rm", "osd", "bluestore_log_op_age")

    def grown(metric: str, osd_id: int) -> float | None:
        new = value(after, metric, ceph_daemon=f"osd.{osd_id}")
        old = value(before, metric, ceph_daemon=f"osd.{osd_id}")
        return None if new is None or old is None else new - old

    tracked = {i: grown("cephnode_osd_tracked_slow_ops_total", i) for i in osd_cluster.osds}
    (blue,) = osd_cluster.bluestore_ids
    commits = grown("cephnode_osd_bluestore_slow_committed_kv_total", blue)
    if major < 18:
        assert set(tracked.values()) == {None} and commits is None
        return
    assert all(g is not None and g >= 0 for g in tracked.values()), tracked
    assert sum(g or 0 for g in tracked.values()) > 0, tracked
    assert commits is not None and commits > 0


# The OSD checks' verdicts under load at Ceph's defaults, the same on every release:
# debug levels at their defaults (mostly 1/5) fail, the RocksDB build check passes the
# BlueStore OSD (each release's packages carry the fix) and skips memstore ones, the NUMA
# check skips every OSD (no block device).
VERDICTS = {
    ("osd.debug_levels", "memstore"): "fail",
    ("osd.debug_levels", "bluestore"): "fail",
    ("osd.rocksdb_build", "memstore"): "skip",
    ("osd.rocksdb_build", "bluestore"): "pass",
    ("osd.numa", "memstore"): "skip",
    ("osd.numa", "bluestore"): "skip",
}


def debug_list() -> list[str]:
    """The subsystems the default profile's osd.debug_levels judges."""
    from cephnode_exporter.checks import load_all
    from cephnode_exporter.profile import load_profile

    subs = load_profile(None, load_all()).checks["osd.debug_levels"].params["subsystems"]
    return [str(s).removeprefix("debug_") for s in subs]


def verdicts(c: Collection) -> dict[tuple[str, str], Any]:
    return {(r.check, r.subject): r for r in c.results if r.check.startswith("osd.")}


def test_check_verdicts_under_load_are_the_same_on_every_release(
    osd_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    """Under a write load, every OSD check gives the verdict of VERDICTS (the table is
    the same for every release, so Reef and Tentacle judge as Pacific does), the PG count
    check follows the OSD's PG count; and injecting debug levels into one OSD flips its
    debug-level verdict: pass with the listed subsystems at 0/0, fail with debug_osd 20,
    named in the observation."""
    tree = node_trees["epyc9454p-tuned"]
    osd_cluster.create_pool("osdcheck", size=1, pg_num=16)
    bench = osd_cluster.bench_background("osdcheck", 30, mode="write", block=4096)
    osd_id = osd_cluster.memstore_ids[0]
    d = f"osd.{osd_id}"
    sock = AdminSocket(osd_cluster.asok(d))
    config = sock.command("config show")
    listed = debug_list()
    saved = {sub: config[f"debug_{sub}"] for sub in listed}
    try:
        time.sleep(1.0)
        c, _ = scrape(osd_cluster, tree, *HOST)
        results = verdicts(c)
        for i in osd_cluster.osds:
            kind = "bluestore" if i in osd_cluster.bluestore_ids else "memstore"
            for (check, k), status in VERDICTS.items():
                if k == kind:
                    assert results[(check, f"osd.{i}")].status == status, (check, i)
            n = value(c, "cephnode_osd_pgs", ceph_daemon=f"osd.{i}") or 0
            pg = results[("osd.pg_count", f"osd.{i}")]
            assert pg.status == ("pass" if 50 <= n <= 200 else "warn"), (i, n, pg)
        quiet = " ".join(f"--debug_{sub}=0/0" for sub in listed)
        osd_cluster.ceph("tell", d, "injectargs", quiet)
        c, _ = scrape(osd_cluster, tree, *HOST)
        assert verdicts(c)[("osd.debug_levels", d)].status == "pass"
        osd_cluster.ceph("tell", d, "config", "set", "debug_osd", "20")
        c, _ = scrape(osd_cluster, tree, *HOST)
        flipped = verdicts(c)[("osd.debug_levels", d)]
        assert flipped.status == "fail" and flipped.observed.startswith("debug_osd=20/20")
        info = {"subsystem": "osd", "log_level": "20", "gather_level": "20"}
        assert value(c, "cephnode_osd_debug_level_info", ceph_daemon=d, **info) == 1
    finally:
        bench.kill()
        bench.wait()
        osd_cluster.ceph(
            "tell", d, "injectargs", " ".join(f"--debug_{s}={v}" for s, v in saved.items())
        )


def test_kv_stats_switched_off_at_runtime_is_no_error(
    osd_cluster: CephCluster, node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    """The BlueStore OSD with rocksdb_perf and the compaction table on: one exporter
    reads its column-family series; rocksdb_perf then goes off while the exporter keeps
    the config show that said on. The next scrape still asks: Pacific and Reef answer
    nothing, Tentacle a line of text; on every release the OSD scrapes fine with no
    RocksDB statistics series and no failure logged, and Tentacle's refusal is logged once
    with its reason."""
    import logging

    tree = node_trees["epyc9454p-tuned"]
    (blue,) = osd_cluster.bluestore_ids
    d = f"osd.{blue}"

    def option(name: str, val: str) -> None:
        osd_cluster.ceph("tell", d, "config", "set", name, val)

    def cf_series(c: Collection) -> list[Any]:
        return [
            k
            for k in samples(c)
            if k[0].startswith("cephnode_osd_rocksdb_cf_") and ("ceph_daemon", d) in k[1]
        ]

    flags = [*tree.flags, f"--ceph.socket-dir={osd_cluster.socket_dir}", *ONLY_OSD]
    option("rocksdb_perf", "true")
    option("rocksdb_collect_compaction_stats", "true")
    exporter = build_scraper(parse_args(["dump", *flags]))
    try:
        on = exporter.collect(10.0)
        assert value(on, "cephnode_osd_scrape_success", ceph_daemon=d) == 1
        assert cf_series(on), "the compaction table's series while rocksdb_perf is on"
        option("rocksdb_perf", "false")
        with caplog.at_level(logging.INFO, logger="cephnode_exporter"):
            off = [exporter.collect(10.0) for _ in range(2)]
    finally:
        exporter.close()
        option("rocksdb_perf", "false")
        option("rocksdb_collect_compaction_stats", "false")
    for c in off:
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon=d) == 1
        assert cf_series(c) == []
    messages = [r.getMessage() for r in caplog.records]
    assert "OSD admin socket query failed" not in messages
    declined = [m for m in messages if "declined dump_objectstore_kv_stats" in m]
    assert len(declined) == (1 if osd_cluster.release == "tentacle" else 0), messages
