"""The newer releases' OSD signals, from replies recorded on real daemons of each release.

``slow/`` beside each release's recorded replies (tests/fixtures/ceph/slow for Pacific,
releases/reef/slow, releases/tentacle/slow; provenance in releases/README.md) holds a
memstore and the BlueStore OSD's ``perf dump`` once the slow-op counters moved (their
thresholds lowered), ``dump_ops_in_flight`` and ``dump_blocked_ops_count`` taken back to
back under a stopped replica, ``counter dump`` and ``get_command_descriptions``: what
docs/ceph.md ("Newer releases' signals") evaluates. Here: the parsers and the collector
export Reef's and Tentacle's tracked-op slow-op total, BlueStore's slow-op counters and
allocator latency, the mClock queue lengths and the op queue, and Pacific has none of
them and misses nothing; the evaluated command ``dump_blocked_ops_count`` counts what
``dump_ops_in_flight`` already gives; Tentacle's plain-text refusal of
``dump_objectstore_kv_stats`` is a note, not an error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import counters, kvstats, perf
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors import osd_catalogue
from cephnode_exporter.exposition import encode

from tests.conftest import Tree, collect, samples, value
from tests.test_asok import reply
from tests.test_counters import RELEASE_DIRS, VERSIONS, recorded
from tests.test_osd import (
    COMMAND_FILES,
    KV_OPTIONS,
    ONLY_OSD,
    FakeNode,
    kv_requests,
    network_reply,
)

RELEASES = ("pacific", "reef", "tentacle")
NEWER = ("reef", "tentacle")
KINDS = ("memstore", "bluestore")
# The BlueStore slow-op counters (perf dump name -> metric), Reef and later.
BLUESTORE_SLOW = {
    "slow_aio_wait_count": "cephnode_osd_bluestore_slow_aio_wait_total",
    "slow_committed_kv_count": "cephnode_osd_bluestore_slow_committed_kv_total",
    "slow_read_onode_meta_count": "cephnode_osd_bluestore_slow_read_onode_meta_total",
    "slow_read_wait_aio_count": "cephnode_osd_bluestore_slow_read_wait_aio_total",
}
# The RocksDB statistics families (dump_objectstore_kv_stats).
KV_NAMES = frozenset(
    f"cephnode_osd_{suffix}_total"
    for _, suffix, _ in osd_catalogue.KV_DB_COUNTERS + osd_catalogue.KV_CF_COUNTERS
)
# Every family this module's signals add (for the absence checks on Pacific).
NEW_FAMILIES = (
    "cephnode_osd_tracked_slow_ops_total",
    *BLUESTORE_SLOW.values(),
    "cephnode_osd_bluestore_allocator_latency_seconds_count",
    "cephnode_osd_bluestore_allocator_latency_seconds_sum",
    "cephnode_osd_mclock_queue_length",
)


def slow_dir(release: str) -> Path:
    return RELEASE_DIRS[release] / "slow"


def slow(release: str, kind: str, command: str) -> Any:
    name = command.replace(" ", "_")
    return json.loads((slow_dir(release) / f"{kind}.{name}.json").read_bytes())


def major(release: str) -> int:
    return int(VERSIONS[release].split(".")[0])


def test_slow_fixtures_are_of_the_release_they_claim() -> None:
    for release in RELEASES:
        manifest = json.loads((slow_dir(release) / "manifest.json").read_text())
        assert manifest["ceph_version"] == VERSIONS[release]
        assert manifest["release"] == release
        for kind in KINDS:
            assert perf.parse_version(slow(release, kind, "version")) == VERSIONS[release]
            assert (slow_dir(release) / f"{kind}.perf_dump.json").exists()


# ----------------------------------------------------------------------------- parsers


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("kind", KINDS)
def test_slow_op_signals_by_release(release: str, kind: str) -> None:
    """Reef and Tentacle: the tracked-op total and (BlueStore) the slow-op counters and
    allocator latency, read under their stable keys with the recorded values, which
    moved (their thresholds were lowered); Pacific has none and misses none."""
    dump = slow(release, kind, "perf dump")
    config = perf.parse_config(slow(release, kind, "config show"))
    got = perf.parse_perf_dump(dump, major(release), kind, config.op_queue)
    assert got.missing == ()
    tracked = got.integers.get("trackedop.slow_ops_count")
    store_keys = {f"bluestore.{n}" for n in BLUESTORE_SLOW} | {"bluestore.allocator_lat"}
    if release == "pacific":
        assert tracked is None and "trackedop" not in dump
        assert not store_keys & (set(got.integers) | set(got.avgs))
        return
    assert tracked == dump["trackedop"]["slow_ops_count"] > 0
    if kind == "memstore":
        assert not store_keys & (set(got.integers) | set(got.avgs))
        return
    raw = dump["bluestore"]
    for name in BLUESTORE_SLOW:
        assert got.integers[f"bluestore.{name}"] == raw[name]
    assert raw["slow_committed_kv_count"] > 0  # bluestore_log_op_age 0.5 ms
    alloc = raw["allocator_lat"]
    assert got.avgs["bluestore.allocator_lat"] == perf.TimeAvg(alloc["avgcount"], alloc["sum"])
    assert alloc["avgcount"] > 0


@pytest.mark.parametrize("release", RELEASES)
def test_op_queue_and_mclock_queues_by_release(release: str) -> None:
    """Pacific runs wpq (its mClock profile option is set but means nothing there, so it
    reads as empty) and has no queue sections; Reef and Tentacle run mclock_scheduler
    with the balanced profile and one mclock-shard-queue section per op shard, whose
    class lengths are summed (all_type is their sum, not a class)."""
    for kind in KINDS:
        config = perf.parse_config(slow(release, kind, "config show"))
        dump = slow(release, kind, "perf dump")
        got = perf.parse_perf_dump(dump, major(release), kind, config.op_queue)
        shards = [v for k, v in dump.items() if k.startswith(counters.MCLOCK_SECTION_PREFIX)]
        if release == "pacific":
            assert (config.op_queue, config.mclock_profile) == ("wpq", "")
            assert got.mclock == {} and shards == []
            continue
        assert (config.op_queue, config.mclock_profile) == ("mclock_scheduler", "balanced")
        assert shards and set(got.mclock) == set(counters.MCLOCK_QUEUES)
        for cls, name in counters.MCLOCK_QUEUES.items():
            assert got.mclock[cls] == sum(s[name] for s in shards)


def test_mclock_queue_sums_over_shards_and_a_missing_section_is_reported() -> None:
    """Two shards add up; an mClock OSD of Reef without any shard section is missing
    counters.MCLOCK_KEY; under wpq, or on Pacific, nothing is expected."""
    dump = slow("reef", "memstore", "perf dump")
    shard = dict(dump["mclock-shard-queue-0"], mclock_client_queue_len=3)
    dump["mclock-shard-queue-0"] = shard
    dump["mclock-shard-queue-1"] = dict(shard, mclock_client_queue_len=4)
    dump["mclock-shard-queue-x"] = {"mclock_client_queue_len": 100}  # not a shard
    got = perf.parse_perf_dump(dump, 18, "memstore", "mclock_scheduler")
    assert got.mclock["client"] == 7 and got.missing == ()
    for name in [k for k in dump if k.startswith(counters.MCLOCK_SECTION_PREFIX)]:
        del dump[name]
    got = perf.parse_perf_dump(dump, 18, "memstore", "mclock_scheduler")
    assert got.mclock == {} and got.missing == (counters.MCLOCK_KEY,)
    assert perf.parse_perf_dump(dump, 18, "memstore", "wpq").missing == ()
    assert perf.parse_perf_dump(dump, 16, "memstore", "mclock_scheduler").missing == ()
    dump["mclock-shard-queue-0"] = {"mclock_client_queue_len": "many"}
    with pytest.raises(perf.PerfParseError, match="mclock_client_queue_len"):
        perf.parse_perf_dump(dump, 18, "memstore")


@pytest.mark.parametrize("release", RELEASES)
def test_blocked_ops_count_adds_nothing_to_ops_in_flight(release: str) -> None:
    """dump_blocked_ops_count (Quincy and later; Pacific's command table lacks it) is the
    number of ops in flight older than osd_op_complaint_time: taken back to back with
    dump_ops_in_flight under a stopped replica, it equals the slow count the collector
    already derives from dump_ops_in_flight, so it is not worth a round trip."""
    for kind in KINDS:
        table = command_table(release, kind)
        if release == "pacific":
            assert "dump_blocked_ops_count" not in table
            assert not (slow_dir(release) / f"{kind}.dump_blocked_ops_count.json").exists()
            continue
        assert table["dump_blocked_ops_count"] == frozenset({"filterstr"})
        config = perf.parse_config(slow(release, kind, "config show"))
        ops = perf.parse_ops_in_flight(slow(release, kind, "dump_ops_in_flight"), 2.0)
        blocked = slow(release, kind, "dump_blocked_ops_count")
        assert blocked["complaint_time"] == config.complaint_time == 2.0
        assert ops.slow == blocked["num_blocked_ops"] > 0


@pytest.mark.parametrize("release", NEWER)
def test_counter_dump_adds_nothing_the_collector_reads(release: str) -> None:
    """counter dump (Reef and later) repeats perf dump's counters and adds labelled
    ones only for the messenger workers (connection timeouts) and, on Tentacle, the
    scrubber (osd_scrub_*): nothing about op, BlueStore or RocksDB latency, so the
    collector does not send it (docs/ceph.md)."""
    for kind in KINDS:
        dump = slow(release, kind, "counter dump")
        labelled = {
            name
            for name, entries in dump.items()
            if any(isinstance(e, dict) and e.get("labels") for e in entries)
        }
        assert labelled, (release, kind)
        assert all(n.startswith(("AsyncMessenger::Worker", "osd_scrub_")) for n in labelled)
        for section in ("osd", "trackedop", "mclock-shard-queue-0"):
            (entry,) = dump[section]
            assert entry["labels"] == {}
            assert set(entry["counters"]) == set(slow(release, kind, "perf dump")[section])


# ----------------------------------------------------------------------------- collector


class SlowOSD:
    """A fake admin socket answering with one release's ``slow/`` replies (perf dump,
    ops in flight, config show, version) and its other recorded replies (perf histogram
    dump); ``kv`` answers dump_objectstore_kv_stats with the statistics options on."""

    def __init__(self, release: str, kind: str, kv: bytes | None = None) -> None:
        self.replies: dict[str, bytes] = {}
        for command in COMMAND_FILES:
            path = slow_dir(release) / f"{kind}.{command.replace(' ', '_')}.json"
            data = slow(release, kind, command) if path.exists() else None
            if data is None:
                data = recorded(release, kind, command)
            if command == "config show":
                data.update(KV_OPTIONS if kv is not None else {"rocksdb_perf": "false"})
            self.replies[command] = json.dumps(data).encode()
        self.replies["dump_osd_network"] = network_reply(kind, release_dir=RELEASE_DIRS[release])
        if kv is not None:
            self.replies["dump_objectstore_kv_stats"] = kv

    def __call__(self, conn: Any, request: bytes, stop: Any) -> None:
        if not request:
            return
        prefix = json.loads(request.rstrip(b"\0"))["prefix"]
        data = self.replies.get(prefix)
        conn.sendall(reply(data if data is not None else b"ERROR: (22) Invalid argument\n"))


def release_collection(tree: Tree, release: str) -> Collection:
    """One scrape of a memstore (osd.0) and the BlueStore OSD (osd.3) of ``release``'s
    slow-op recording (used by tests/test_metrics_doc.py too)."""
    node = FakeNode()
    try:
        node.add(0, SlowOSD(release, "memstore"))
        node.add(3, SlowOSD(release, "bluestore"))
        return collect([*tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD])
    finally:
        node.close()


@pytest.mark.parametrize("release", RELEASES)
def test_collector_exports_the_newer_signals_where_the_release_has_them(
    release: str, node_trees: dict[str, Tree]
) -> None:
    """Through fake sockets replaying each release: Reef and Tentacle export the recorded
    values under the documented names (the allocator latency as a summary, the slow-op
    totals as counters, the queue lengths per scheduler class); Pacific exports none of
    them and misses nothing; every release has its op queue."""
    c = release_collection(node_trees["epyc9454p-tuned"], release)
    assert value(c, "cephnode_osd_counters_missing") == 0
    names = {name for name, _ in samples(c)}
    for osd, kind in ((0, "memstore"), (3, "bluestore")):
        d = {"ceph_daemon": f"osd.{osd}"}
        assert value(c, "cephnode_osd_scrape_success", **d) == 1
        config = slow(release, kind, "config show")
        queue = {"op_queue": config["osd_op_queue"]}
        if release == "pacific":
            assert value(c, "cephnode_osd_op_queue_info", **d, **queue, mclock_profile="") == 1
            continue
        profile = {"mclock_profile": config["osd_mclock_profile"]}
        assert value(c, "cephnode_osd_op_queue_info", **d, **queue, **profile) == 1
        dump = slow(release, kind, "perf dump")
        tracked = value(c, "cephnode_osd_tracked_slow_ops_total", **d)
        assert tracked == dump["trackedop"]["slow_ops_count"]
        for cls, name in counters.MCLOCK_QUEUES.items():
            got = value(c, "cephnode_osd_mclock_queue_length", **d, scheduler_class=cls)
            assert got == dump["mclock-shard-queue-0"][name]
        if kind == "bluestore":
            for name, metric in BLUESTORE_SLOW.items():
                assert value(c, metric, **d) == dump["bluestore"][name]
            alloc = dump["bluestore"]["allocator_lat"]
            count = value(c, "cephnode_osd_bluestore_allocator_latency_seconds_count", **d)
            total = value(c, "cephnode_osd_bluestore_allocator_latency_seconds_sum", **d)
            assert (count, total) == (alloc["avgcount"], alloc["sum"])
    if release == "pacific":
        assert not names & set(NEW_FAMILIES)
    else:
        # The memstore OSD has no BlueStore series.
        o0 = {("ceph_daemon", "osd.0")}
        store = [k for k in samples(c) if "bluestore" in k[0] and o0 <= k[1]]
        assert store == []


def per_osd_series(c: Collection, daemon: str) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    """The OSD's series, without those that follow its state rather than its release
    (debug levels, flag points) and without the version label."""
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k != "version"))
        for family in c.families()
        for s in family.samples
        if s.labels.get("ceph_daemon") == daemon
        and "debug_level_info" not in s.name
        and "by_flag_point" not in s.name
    }


@pytest.mark.parametrize("release", NEWER)
def test_series_the_newer_releases_add_per_osd(release: str, node_trees: dict[str, Tree]) -> None:
    """The counts docs/metrics.md gives ("Series per OSD"): against Pacific, a memstore
    OSD adds the tracked-op total and 4 mClock queues (+5), a BlueStore OSD also the 4
    BlueStore slow-op counters and the allocator summary's 2 and loses compact_range
    (+10); the op queue series changes its labels only."""
    tree = node_trees["epyc9454p-tuned"]
    old, new = release_collection(tree, "pacific"), release_collection(tree, release)
    added = {f"cephnode_osd_mclock_queue_length:{c}" for c in counters.MCLOCK_QUEUES}
    added |= {"cephnode_osd_tracked_slow_ops_total", "cephnode_osd_op_queue_info"}
    store = {*BLUESTORE_SLOW.values(), *NEW_FAMILIES[-3:-1]}
    for daemon, more, fewer in (
        ("osd.0", added, {"cephnode_osd_op_queue_info"}),
        (
            "osd.3",
            added | store,
            {"cephnode_osd_op_queue_info", "cephnode_osd_rocksdb_compact_range_total"},
        ),
    ):
        before, after = per_osd_series(old, daemon), per_osd_series(new, daemon)

        def names(series: set[tuple[str, frozenset[tuple[str, str]]]]) -> set[str]:
            return {
                n + (f":{dict(labels)['scheduler_class']}" if "mclock" in n else "")
                for n, labels in series
            }

        assert names(after - before) == more, daemon
        assert names(before - after) == fewer, daemon
        assert (
            len(after) - len(before) == len(more) - len(fewer) == (5 if daemon == "osd.0" else 10)
        )


@pytest.mark.parametrize("release", NEWER)
def test_the_newer_families_pass_promtool(release: str, node_trees: dict[str, Tree]) -> None:
    """Names, types and HELP of the new families satisfy Prometheus' own linter."""
    from tests.test_golden import promtool_check_metrics

    text = encode(release_collection(node_trees["epyc9454p-tuned"], release).families()).decode()
    for family in ("tracked_slow_ops_total", "mclock_queue_length", "op_queue_info"):
        assert f"cephnode_osd_{family}{{" in text
    promtool_check_metrics(text)


# ----------------------------------------------------------------------------- kv stats


def kv_off(release: str) -> bytes:
    return (RELEASE_DIRS[release] / "kvstats" / "off.json").read_bytes()


def test_kv_stats_off_reply_by_release() -> None:
    """With rocksdb_perf off Pacific and Reef answer nothing (None), Tentacle one line
    of text: declined, with the OSD's reason, not a parse error; other text still is."""
    assert kvstats.parse_kv_stats(kv_off("pacific")) is None
    assert kvstats.parse_kv_stats(kv_off("reef")) is None
    with pytest.raises(kvstats.KVStatsDeclined) as declined:
        kvstats.parse_kv_stats(kv_off("tentacle"))
    assert str(declined.value) == "RocksDB perf is disabled, can't probe for stats."
    assert not isinstance(declined.value, perf.PerfParseError)
    for garbage in (b"RocksDB perf is disabled", b"error: {oops}", b"error:\n\nx"):
        with pytest.raises(kvstats.KVStatsParseError):
            kvstats.parse_kv_stats(garbage)


def test_kv_stats_of_tentacle_cover_every_column_family() -> None:
    """Why the HELP text says so: Tentacle's table lists every column family, Reef's the
    default one only."""
    reef = kvstats.parse_kv_stats((RELEASE_DIRS["reef"] / "kvstats" / "both.json").read_bytes())
    tentacle = kvstats.parse_kv_stats(
        (RELEASE_DIRS["tentacle"] / "kvstats" / "both.json").read_bytes()
    )
    assert reef is not None and tentacle is not None
    assert set(reef.column_families) == {"default"}
    assert "default" in tentacle.column_families and len(tentacle.column_families) > 1


def test_tentacle_declining_kv_stats_is_a_note_not_an_error(
    node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    """Tentacle's BlueStore OSD whose config show (cached) says the statistics are on but
    which answers the recorded plain-text refusal: the OSD scrapes fine, has no RocksDB
    statistics series (no false zero), one log line gives its reason, and the command is
    not sent again while the cached config show is kept (one exporter, three scrapes)."""
    tree = node_trees["epyc9454p-tuned"]
    node = FakeNode()
    node.add(3, SlowOSD("tentacle", "bluestore", kv=kv_off("tentacle")))
    scraper = build_scraper(
        parse_args(["dump", *tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD])
    )
    try:
        with caplog.at_level(logging.INFO, logger="cephnode_exporter"):
            for _ in range(3):
                c = scraper.collect(10.0)
                assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
                assert not [k for k in samples(c) if k[0] in KV_NAMES]
                assert value(c, "cephnode_osd_tracked_slow_ops_total", ceph_daemon="osd.3")
        assert kv_requests(node, 3) == 1
    finally:
        scraper.close()
        node.close()
    lines = [r for r in caplog.records if "declined dump_objectstore_kv_stats" in r.getMessage()]
    assert len(lines) == 1
    assert "can't probe for stats" in repr(lines[0].__dict__)
    assert not [r for r in caplog.records if r.getMessage() == "OSD admin socket query failed"]


# ----------------------------------------------------------------------------- commands


def command_table(release: str, kind: str) -> dict[str, frozenset[str]]:
    """The OSD's own command table (get_command_descriptions): command -> argument names."""
    table = {}
    for desc in slow(release, kind, "get_command_descriptions").values():
        words = " ".join(w for w in desc["sig"] if isinstance(w, str))
        table[words] = frozenset(a["name"] for a in desc["sig"] if isinstance(a, dict))
    return table
