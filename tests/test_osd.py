"""The osd collector: parsers on the payloads recorded from a real Pacific cluster, and the
collector against fake admin sockets replaying them (no Ceph needed).

tests/fixtures/ceph holds replies of a memstore OSD (osd.0) and the BlueStore OSD (osd.3)
recorded by ``tests/cephcluster.py record`` (docs/ceph.md): histograms and counters at
rest after a write and read bench, ops in flight while a replica was stopped (with
osd_op_complaint_time set to 2 s during the recording).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import math
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import perf
from cephnode_exporter.checks import load_all
from cephnode_exporter.checks.osd import debug_levels
from cephnode_exporter.collectors.osd import OSDCollectorFacts, OSDFacts
from cephnode_exporter.profile import load_profile
from cephnode_exporter.scrape import Collection

from tests.conftest import REPO, Tree, collect, samples, value
from tests.test_asok import FakeServer, hang, reply

FIXTURES = REPO / "tests" / "fixtures" / "ceph"
KINDS = ("memstore", "bluestore")
COMMAND_FILES = {
    "perf dump": "perf_dump",
    "perf histogram dump": "perf_histogram_dump",
    "dump_ops_in_flight": "dump_ops_in_flight",
    "config show": "config_show",
    "version": "version",
}


def payload(kind: str, command: str) -> Any:
    return json.loads((FIXTURES / f"{kind}.{COMMAND_FILES[command]}.json").read_bytes())


# ----------------------------------------------------------------------------- histograms


@pytest.mark.parametrize("kind", KINDS)
def test_histograms_of_the_recorded_payloads(kind: str) -> None:
    hists = perf.parse_op_histograms(payload(kind, "perf histogram dump"))
    counters = perf.parse_perf_dump(payload(kind, "perf dump"))
    raw = payload(kind, "perf histogram dump")["osd"]
    assert set(hists) == {"read", "write", "readwrite"}
    for op, h in hists.items():
        avg = counters.avgs[f"osd.{perf.OP_LATENCY_AVGS[op]}"]
        # At rest the histogram's total is perf dump's avgcount (log_op_stats bumps both).
        assert h.count == avg.count, (kind, op)
        edges = [e for e, _ in h.buckets]
        counts = [n for _, n in h.buckets]
        assert edges[0] == pytest.approx(100e-6) and edges[1] == pytest.approx(200e-6)
        assert edges[-2] == pytest.approx(100e-6 * 2**17)  # 13.1 s, the last kept edge
        assert edges[-1] == math.inf and counts[-1] == h.count
        assert len(h.buckets) == 19
        assert counts == sorted(counts)  # cumulative
        assert all(b > a for a, b in itertools.pairwise(edges))
        # The edges are nanoseconds, not the axis' "usec": perf dump's sum (seconds) lies
        # between the sums of each op's bucket's lower and upper edge.
        matrix = raw[perf.OP_HISTOGRAMS[op]]
        ranges = matrix["axes"][0]["ranges"]
        per = [sum(row) for row in matrix["values"]]
        low = sum(n * r.get("min", 0) for n, r in zip(per, ranges, strict=True)) / 1e9
        high = sum(n * (r["max"] + 1) for n, r in zip(per, ranges, strict=True) if n) / 1e9
        assert low <= avg.sum <= high, (kind, op, low, avg.sum, high)


def test_histogram_values_by_hand() -> None:
    """A small 5-bucket axis: underflow, [0,100), [100,200), [200,400), overflow."""
    axis = {
        "name": "Latency (usec)",
        "min": 0,
        "quant_size": 100,
        "buckets": 5,
        "scale_type": "log2",
        "ranges": [{"max": -1}, {"min": 0, "max": 99}, {"min": 100, "max": 199},
                   {"min": 200, "max": 399}, {"min": 400}],
    }  # fmt: skip
    size = {"name": "Request size (bytes)", "buckets": 2}
    values = [[0, 0], [1, 2], [0, 3], [4, 0], [0, 5]]
    h = perf.parse_latency_histogram({"axes": [axis, size], "values": values})
    assert h.count == 15
    assert h.buckets == ((1e-7, 3), (2e-7, 6), (4e-7, 10), (math.inf, 15))


def good_hist() -> dict[str, Any]:
    return copy.deepcopy(
        payload("bluestore", "perf histogram dump")["osd"][perf.OP_HISTOGRAMS["write"]]
    )


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(h: dict[str, Any]) -> None:
        target: Any = h
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return apply


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_set(("axes",), KeyError), "two axes"),
        (_set(("axes",), [{}]), "two axes"),
        (_set(("axes", 0, "scale_type"), "linear"), "not log2"),
        (_set(("axes", 0, "quant_size"), 0), "implausible"),
        (_set(("axes", 0, "quant_size"), "x"), "quant_size"),
        (_set(("axes", 0, "buckets"), 31), "values has 32 rows"),
        (_set(("axes", 0, "ranges", 3), {"min": 1, "max": 2}), "range 3"),
        (_set(("axes", 0, "ranges"), [{}]), "do not match"),
        (_set(("values",), KeyError), "no values"),
        (_set(("values", 4), "garbage"), "row 4"),
        (_set(("values", 4, 0), -1), "non-negative"),
        (_set(("values", 4, 0), 1.5), "non-negative"),
        (_set(("values", 4, 0), True), "non-negative"),
    ],
)
def test_histogram_garbage_is_a_parse_error(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    h = good_hist()
    mutate(h)
    with pytest.raises(perf.PerfParseError, match=message):
        perf.parse_latency_histogram(h)


@pytest.mark.parametrize("dump", [None, [], {}, {"osd": []}, {"osd": {}}])
def test_missing_histograms(dump: Any) -> None:
    with pytest.raises(perf.PerfParseError):
        perf.parse_op_histograms(dump)


# ----------------------------------------------------------------------------- perf dump


def test_perf_dump_of_memstore_and_bluestore() -> None:
    mem = perf.parse_perf_dump(payload("memstore", "perf dump"))
    blue = perf.parse_perf_dump(payload("bluestore", "perf dump"))
    assert "bluestore.commit_lat" not in mem.avgs and "rocksdb.compact" not in mem.integers
    assert mem.integers["osd.op"] == 2848 and mem.integers["osd.numpg"] == 6
    assert blue.avgs["bluestore.kv_sync_lat"] == perf.TimeAvg(435, 3.061553092)
    assert blue.avgs["rocksdb.submit_sync_latency"].count == 435
    assert blue.integers["rocksdb.compact_queue_len"] == 0
    every = {f"{s}.{n}" for s, n in perf.TIME_AVGS}
    assert set(blue.avgs) == every
    assert set(blue.integers) == {f"{s}.{n}" for s, n in perf.INTEGERS}


@pytest.mark.parametrize(
    "dump",
    [
        None,
        {"bluestore": {}},
        {"osd": {"op": -1}},
        {"osd": {"op": "7"}},
        {"osd": {"op_w_latency": 3}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": "NaN"}}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": float("inf")}}},
    ],
)
def test_perf_dump_garbage(dump: Any) -> None:
    with pytest.raises(perf.PerfParseError):
        perf.parse_perf_dump(dump)


# ----------------------------------------------------------------------------- ops, config


def test_ops_in_flight_of_the_recorded_stall() -> None:
    ops = perf.parse_ops_in_flight(payload("bluestore", "dump_ops_in_flight"), 2.0)
    assert ops.num_ops == 7 and ops.slow == 7
    assert ops.by_flag_point == {"waiting for sub ops": 7}
    assert 3.9 < ops.oldest_age < 4.1
    at_default = perf.parse_ops_in_flight(payload("bluestore", "dump_ops_in_flight"), 30.0)
    assert at_default.slow == 0


def test_ops_in_flight_flag_points_are_bounded() -> None:
    ops = [
        {"age": 1.0, "type_data": {"flag_point": "started"}},
        {"age": 2.0, "type_data": {"flag_point": "waiting for readable"}},  # Quincy detail
        {"age": 3.0, "type_data": {"flag_point": "x" * 500}},
        {"age": 4.0, "type_data": "not a dict"},
        {"age": 40.0},
    ]
    result = perf.parse_ops_in_flight({"ops": ops, "num_ops": 5}, 30.0)
    assert result.by_flag_point == {"started": 1, "other": 4}
    assert result.slow == 1 and result.oldest_age == 40.0
    assert perf.parse_ops_in_flight({"ops": [], "num_ops": 0}, 30.0).oldest_age == 0.0


@pytest.mark.parametrize(
    "reply_", [None, {"ops": 3}, {"ops": [1]}, {"ops": [{"age": "x"}]}, {"ops": [], "num_ops": -1}]
)
def test_ops_in_flight_garbage(reply_: Any) -> None:
    with pytest.raises(perf.PerfParseError):
        perf.parse_ops_in_flight(reply_, 30.0)


def test_config_of_the_recorded_osd() -> None:
    cfg = perf.parse_config(payload("bluestore", "config show"))
    assert cfg.objectstore == "bluestore"
    assert cfg.complaint_time == 30.0
    assert cfg.debug["osd"] == perf.DebugLevel(1, 5)
    assert cfg.debug["ms"] == perf.DebugLevel(0, 0)
    assert cfg.debug["rocksdb"] == perf.DebugLevel(4, 5)
    assert "heartbeat_testing_span" not in cfg.debug  # a number, not a level
    assert "asok_assert_abort" not in cfg.debug  # a boolean
    assert len(cfg.debug) == 64
    assert cfg.options["osd_op_num_shards_ssd"] == 8.0
    assert cfg.options["osd_memory_target"] == 4294967296.0
    assert set(cfg.options) == set(perf.CONFIG_OPTIONS)


@pytest.mark.parametrize(
    ("text", "level"),
    [("1/5", (1, 5)), ("0", (0, 0)), (" 20 / 20 ", (20, 20)), ("0/10", (0, 10)),
     ("x", None), ("1/", None), ("1/5/7", None), ("-1", None), ("", None), ("9999", None)],
)  # fmt: skip
def test_debug_level_syntax(text: str, level: tuple[int, int] | None) -> None:
    parsed = perf.parse_debug_level(text)
    assert (None if parsed is None else (parsed.log, parsed.gather)) == level


def test_config_garbage() -> None:
    with pytest.raises(perf.PerfParseError):
        perf.parse_config([])
    cfg = perf.parse_config({"debug_osd": 5, "osd_memory_target": "lots", "osd_objectstore": 1})
    assert cfg.debug == {} and cfg.options == {} and cfg.objectstore == ""
    assert cfg.complaint_time == perf.DEFAULT_COMPLAINT_TIME


def test_version() -> None:
    assert perf.parse_version(payload("memstore", "version")) == "16.2.15"
    with pytest.raises(perf.PerfParseError):
        perf.parse_version({"version": 16})


# ----------------------------------------------------------------------------- fake OSDs


def recorded_osd(kind: str, overrides: dict[str, Any] | None = None) -> Callable[..., None]:
    """A handler answering like the recorded OSD. The config reply carries the 2 s
    complaint time that was in effect when the ops in flight were recorded."""
    replies = {}
    for command in COMMAND_FILES:
        data = payload(kind, command)
        if command == "config show":
            data["osd_op_complaint_time"] = "2.000000"
        replies[command] = json.dumps(data).encode()
    for command, data in (overrides or {}).items():
        replies[command] = data if isinstance(data, bytes) else json.dumps(data).encode()

    def handler(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        prefix = json.loads(request.rstrip(b"\0"))["prefix"]
        data = replies.get(prefix)
        conn.sendall(reply(data if data is not None else b"ERROR: (22) Invalid argument\n"))

    return handler


class FakeNode:
    """A socket directory with fake OSD sockets (under /tmp: sun_path is 108 bytes)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="osd-", dir="/tmp"))
        self.servers: dict[int, FakeServer] = {}

    def add(self, osd_id: int, handler: Callable[..., None] | None, cluster: str = "ceph") -> None:
        path = self.dir / f"{cluster}-osd.{osd_id}.asok"
        self.servers[osd_id] = FakeServer(path, handler)

    def remove(self, osd_id: int) -> None:
        server = self.servers.pop(osd_id)
        server.close()
        Path(server.path).unlink()

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def fake_node() -> Iterator[FakeNode]:
    node = FakeNode()
    yield node
    node.close()


def recorded_node(node: FakeNode) -> FakeNode:
    """osd.0 memstore and osd.3 BlueStore, as recorded."""
    node.add(0, recorded_osd("memstore"))
    node.add(3, recorded_osd("bluestore"))
    return node


def osd_collection(tree: Tree, extra: list[str] | None = None) -> Collection:
    """A collection of the reference tree with the recorded OSDs behind fake sockets (used
    by tests/test_metrics_doc.py too)."""
    node = recorded_node(FakeNode())
    try:
        return collect([*tree.flags, f"--ceph.socket-dir={node.dir}", *(extra or [])])
    finally:
        node.close()


def osd_series(collection: Collection, daemon: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (s.name, s.labels)
        for family in collection.families()
        for s in family.samples
        if s.labels.get("ceph_daemon") == daemon
    ]


ONLY_OSD = ["--no-collector.cpuidle", "--no-collector.cpufreq", "--no-collector.kernel",
            "--no-collector.nvme", "--no-collector.net", "--no-collector.iommu"]  # fmt: skip


def test_collector_on_recorded_osds(node_trees: dict[str, Tree], fake_node: FakeNode) -> None:
    recorded_node(fake_node)
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    for d in ("osd.0", "osd.3"):
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon=d) == 1.0
    assert value(c, "cephnode_osd_info", ceph_daemon="osd.3", version="16.2.15",
                 objectstore="bluestore") == 1.0  # fmt: skip
    # The histogram: _count from the matrix, _sum from perf dump, buckets in seconds.
    w = {"ceph_daemon": "osd.3", "op": "write"}
    assert value(c, "cephnode_osd_op_latency_seconds_count", **w) == 2298
    assert value(c, "cephnode_osd_op_latency_seconds_sum", **w) == pytest.approx(35.093693269)
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="+Inf", **w) == 2298
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="0.0001", **w) is not None
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="13.1072", **w) is not None
    assert value(c, "cephnode_osd_op_latency_seconds_count", ceph_daemon="osd.0", op="read") == 2011
    # BlueStore and RocksDB series for the BlueStore OSD only.
    blue = "cephnode_osd_bluestore_kv_sync_latency_seconds_count"
    assert value(c, blue, ceph_daemon="osd.3") == 435
    assert value(c, blue, ceph_daemon="osd.0") is None
    assert value(c, "cephnode_osd_rocksdb_compact_total", ceph_daemon="osd.3") == 0
    assert value(c, "cephnode_osd_rocksdb_compact_total", ceph_daemon="osd.0") is None
    assert value(c, "cephnode_osd_op_queue_wait_seconds_count", ceph_daemon="osd.0") == 2848
    assert value(c, "cephnode_osd_ops_by_type_total", ceph_daemon="osd.0", op="write") == 837
    assert value(c, "cephnode_osd_op_in_bytes_total", ceph_daemon="osd.3") == 150601728
    assert value(c, "cephnode_osd_pgs", ceph_daemon="osd.3") == 17
    # The stall: 7 ops waiting for the stopped replica, older than the 2 s complaint time.
    assert value(c, "cephnode_osd_ops_in_flight", ceph_daemon="osd.3") == 7
    assert value(c, "cephnode_osd_slow_ops", ceph_daemon="osd.3") == 7
    assert value(c, "cephnode_osd_ops_in_flight_by_flag_point", ceph_daemon="osd.3",
                 flag_point="waiting for sub ops") == 7  # fmt: skip
    assert (value(c, "cephnode_osd_oldest_op_age_seconds", ceph_daemon="osd.3") or 0) > 3.9
    assert value(c, "cephnode_osd_debug_nonzero_subsystems", ceph_daemon="osd.3") == 62
    assert value(c, "cephnode_osd_debug_level_info", ceph_daemon="osd.3", subsystem="osd",
                 log_level="1", gather_level="5") == 1.0  # fmt: skip
    assert value(c, "cephnode_osd_config_value", ceph_daemon="osd.3",
                 option="osd_op_num_threads_per_shard_ssd") == 2  # fmt: skip
    # The check judges the same facts.
    failed = {r.subject: r.status for r in c.results if r.check == "osd.debug_levels"}
    assert failed == {"osd.0": "fail", "osd.3": "fail"}


def test_series_per_osd_stay_under_budget(node_trees: dict[str, Tree], fake_node: FakeNode) -> None:
    """Under 120 series per OSD with every debug level 0 (a tuned OSD) and no ops in
    flight; each non-zero debug subsystem adds one, each busy flag point one."""
    config = payload("bluestore", "config show")
    for key, val in config.items():
        if key.startswith("debug_") and "/" in val:
            config[key] = "0/0"
    idle = {"ops": [], "num_ops": 0}
    fake_node.add(3, recorded_osd("bluestore", {"config show": config, "dump_ops_in_flight": idle}))
    fake_node.add(0, recorded_osd("memstore", {"config show": config, "dump_ops_in_flight": idle}))
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert len(osd_series(c, "osd.3")) == 116
    assert len(osd_series(c, "osd.0")) == 94  # no BlueStore or RocksDB series
    results = {r.subject: r.status for r in c.results if r.check == "osd.debug_levels"}
    assert results == {"osd.0": "pass", "osd.3": "pass"}


def test_hung_and_broken_osds_are_reported_as_themselves(
    node_trees: dict[str, Tree], fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopped OSD (never accepts), one that hangs after accepting, one whose perf dump
    is garbage, a stale socket file: the scrape ends within the OSD budget, each reports
    scrape_success 0, the healthy one 1, and each failure is logged once."""
    fake_node.add(0, recorded_osd("memstore"))
    fake_node.add(1, None)  # listens, never accepts: a SIGSTOPped OSD
    fake_node.add(2, hang)
    fake_node.add(4, recorded_osd("bluestore", {"perf dump": {"osd": {"op": "many"}}}))
    stale = fake_node.dir / "ceph-osd.5.asok"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # a socket file nobody listens on
    tree = node_trees["epyc9454p-tuned"]
    flags = [*tree.flags, f"--ceph.socket-dir={fake_node.dir}", "--collector.osd.timeout=0.6",
             *ONLY_OSD]  # fmt: skip
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    from cephnode_exporter.cli import build_scraper, parse_args

    scraper = build_scraper(parse_args(["dump", *flags]))
    try:
        for _ in range(2):
            start = time.monotonic()
            c = scraper.collect(10.0)
            took = time.monotonic() - start
            assert took < 0.6 + 0.5, took
            assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
            states = {
                d: value(c, "cephnode_osd_scrape_success", ceph_daemon=d)
                for d in ("osd.0", "osd.1", "osd.2", "osd.4", "osd.5")
            }
            assert states == {"osd.0": 1, "osd.1": 0, "osd.2": 0, "osd.4": 0, "osd.5": 0}
            assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 4
            assert value(c, "cephnode_osd_op_latency_seconds_count", ceph_daemon="osd.2",
                         op="read") is None  # fmt: skip
            for d in ("osd.1", "osd.2"):
                took_osd = value(c, "cephnode_osd_scrape_duration_seconds", ceph_daemon=d)
                assert (took_osd or 0) > 0.4
        failures = [r for r in caplog.records if r.getMessage() == "OSD admin socket query failed"]
        reasons = sorted((r.kv["ceph_daemon"], r.kv["reason"]) for r in failures)  # type: ignore[attr-defined]
        assert reasons == [("osd.1", "timeout"), ("osd.2", "timeout"), ("osd.4", "parse"),
                           ("osd.5", "connect")]  # fmt: skip
        # The broken OSD is fixed: one recovery line.
        fake_node.remove(4)
        fake_node.add(4, recorded_osd("bluestore"))
        c = scraper.collect(10.0)
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.4") == 1
        assert [
            r.kv["ceph_daemon"] for r in caplog.records if r.getMessage() == "OSD answers again"
        ] == ["osd.4"]  # type: ignore[attr-defined]
    finally:
        scraper.close()


def test_sockets_come_and_go(node_trees: dict[str, Tree], fake_node: FakeNode) -> None:
    tree = node_trees["epyc9454p-tuned"]
    flags = [*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    c = collect(flags)
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    assert not any(k[0].startswith("cephnode_osd_") for k in samples(c))
    fake_node.add(7, recorded_osd("memstore"))
    assert value(collect(flags), "cephnode_osd_scrape_success", ceph_daemon="osd.7") == 1
    fake_node.remove(7)
    fake_node.add(8, recorded_osd("memstore"))
    c = collect(flags)
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.7") is None
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.8") == 1


def test_node_without_ceph(node_trees: dict[str, Tree], tmp_path: Path) -> None:
    """No socket directory: a success without OSD series, and the check skips."""
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={tmp_path / 'none'}", *ONLY_OSD])
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    assert not any(k[0].startswith("cephnode_osd_") for k in samples(c))
    results = [r for r in c.results if r.check == "osd.debug_levels"]
    assert [(r.status, r.observed) for r in results] == [("skip", "no OSD on this node")]


def test_unreadable_socket_dir_fails_the_collector(
    node_trees: dict[str, Tree], tmp_path: Path
) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={afile}", *ONLY_OSD])
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 0.0
    results = [r for r in c.results if r.check == "osd.debug_levels"]
    assert results[0].status == "unknown" and "not a directory" in results[0].observed


# ----------------------------------------------------------------------------- check


def _facts(configs: dict[str, Any]) -> OSDCollectorFacts:
    from cephnode_exporter.ceph.discovery import OSDSocket

    osds = []
    for daemon, config in configs.items():
        osd_id = int(daemon.split(".")[1])
        o = OSDFacts(OSDSocket("ceph", osd_id, f"/x/ceph-{daemon}.asok", "package"), 0.0)
        if config is None:
            o.error, o.reason = "timed out", "timeout"
        else:
            o.config = perf.parse_config(config)
        osds.append(o)
    from cephnode_exporter.hostfs import ReadErrors

    return OSDCollectorFacts("/x", osds, ReadErrors())


def test_debug_levels_check() -> None:
    params = load_profile(None, load_all()).checks["osd.debug_levels"].params
    recorded = payload("bluestore", "config show")
    tuned = {k: ("0/0" if k.startswith("debug_") and "/" in v else v) for k, v in recorded.items()}
    tuned_but_mgr = {**tuned, "debug_mgr": "2/5"}
    one_bad = {**tuned, "debug_optracker": "0/5"}
    found = debug_levels(
        _facts(
            {
                "osd.0": recorded,
                "osd.1": tuned,
                "osd.2": tuned_but_mgr,
                "osd.3": one_bad,
                "osd.4": None,
            }
        ),
        params,
    )
    by = {f.subject: f for f in found}
    assert by["osd.0"].deviates is True
    assert "debug_osd=1/5" in by["osd.0"].observed and "debug_ms" not in by["osd.0"].observed
    assert by["osd.1"].deviates is False
    assert by["osd.2"].deviates is False and "not judged: 1" in by["osd.2"].observed
    assert by["osd.3"].deviates is True and by["osd.3"].observed == "debug_optracker=0/5"
    assert by["osd.3"].hint == (
        "at runtime for all OSDs: ceph config set osd debug_optracker 0/0; "
        "or in ceph.conf [osd]: debug_optracker = 0/0"
    )
    assert by["osd.4"].deviates is None
    assert debug_levels(_facts({}), params)[0].deviates is None


def test_debug_series_follow_the_profile_unless_all_are_asked_for(
    node_trees: dict[str, Tree], fake_node: FakeNode
) -> None:
    """At Ceph's defaults (62 non-zero subsystems) only the profile's list gets series."""
    config = payload("bluestore", "config show")
    fake_node.add(3, recorded_osd("bluestore", {"config show": config}))
    tree = node_trees["epyc9454p-tuned"]
    base = [*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    listed = set(load_profile(None, load_all()).checks["osd.debug_levels"].params["subsystems"])
    nonzero = {
        key.removeprefix("debug_")
        for key, val in config.items()
        # subsystem levels are "log/gather"; other debug_* options are flags
        if key.startswith("debug_") and "/" in val and val != "0/0"
    }
    assert len(nonzero) == 62 and "mon" in nonzero and "mon" not in listed

    def exported(c: Collection) -> set[str]:
        return {
            s.labels["subsystem"]
            for f in c.families()
            if f.name == "cephnode_osd_debug_level_info"
            for s in f.samples
        }

    assert exported(collect(base)) == nonzero & listed
    assert exported(collect([*base, "--collector.osd.all-debug-levels"])) == nonzero
