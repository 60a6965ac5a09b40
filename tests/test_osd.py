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
import os
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import counters, perf
from cephnode_exporter.ceph.asok import AsokIdentityError
from cephnode_exporter.ceph.discovery import Answer, OSDSocket, choose_sockets
from cephnode_exporter.checks import load_all
from cephnode_exporter.checks.osd import debug_levels, pg_count, rocksdb_build
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors import osd as osd_collector
from cephnode_exporter.collectors import osd_catalogue, osd_query
from cephnode_exporter.collectors.osd import OSDCollectorFacts, OSDFacts
from cephnode_exporter.hostfs import AttrFiles, HostFS, ParseError, blockdev, numa, process
from cephnode_exporter.profile import load_profile

from tests.conftest import REPO, Tree, collect, need, need_root, need_tool, samples, value
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_asok import FakeServer, hang, reply
from tests.test_asokloop import run_blocking

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


def network_reply(kind: str, state: str = "rest", release_dir: Path = FIXTURES) -> bytes:
    """The recorded dump_osd_network reply (network/ of each release's fixtures, written by
    tests/cephcluster.py record-network): ``rest`` or ``stalled`` (a peer stopped 3 s)."""
    return (release_dir / "network" / f"{kind}.dump_osd_network.{state}.json").read_bytes()


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
        assert edges[-2] == pytest.approx(100e-6 * 2**16)  # 6.55 s, the last kept edge
        assert edges[-1] == math.inf and counts[-1] == h.count
        assert len(h.buckets) == 18
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
        (_set(("values", 31, 31), -2), "non-negative"),
        (_set(("values", 7), [1, None]), "non-negative"),
        (_set(("axes", 0, "min"), False), "axis min"),
        (_set(("axes", 0, "buckets"), 32.0), "axis buckets"),
        (_set(("axes", 0, "ranges", 1), {"min": 0, "max": 100000}), "range 1"),
    ],
)
def test_histogram_garbage_is_a_parse_error(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    """Each fault after a good histogram of the same axes was parsed: the axes checked
    before (perf.py keeps them) do not let a changed axis through."""
    assert perf.parse_latency_histogram(good_hist()).count > 0
    h = good_hist()
    mutate(h)
    with pytest.raises(perf.PerfParseError, match=message):
        perf.parse_latency_histogram(h)


def test_histogram_whole_matrix_path_agrees_with_the_row_checks() -> None:
    """The three whole-matrix passes and the row-by-row check give the same sums, on
    the recorded matrix and on random ones; an empty axis row sums to zero."""
    rng = random.Random(7)
    for trial in range(20):
        h = good_hist()
        if trial:
            h["values"] = [[rng.choice([0, 0, 1, 7, 10**12]) for _ in row] for row in h["values"]]
        if trial == 1:
            h["values"][3] = []
        fast = perf.parse_latency_histogram(h)
        sums = perf._checked_rows(h["values"], "x")
        assert fast.count == sum(sums)
        edges = [edge for edge, _ in fast.buckets]
        # Every kept edge's cumulative count is the sum of the rows up to it.
        all_edges = perf._latency_edges(h["axes"][0], len(h["values"]), "x")
        for edge, cumulative in fast.buckets:
            assert cumulative == sum(sums[: all_edges.index(edge) + 1])
        assert edges[-1] == math.inf


def test_histogram_axes_of_another_shape_are_checked_and_kept_apart() -> None:
    """Two axis shapes (the recorded 32-bucket one, a 5-bucket one) parse in turn; the
    5-bucket axis with one range changed is refused after both were kept."""
    small = {
        "axes": [
            {"min": 0, "quant_size": 100, "buckets": 5, "scale_type": "log2",
             "ranges": [{"max": -1}, {"max": 99}, {"max": 199}, {"max": 399}, {}]},
            {"buckets": 1},
        ],
        "values": [[0], [1], [2], [3], [4]],
    }  # fmt: skip
    for _ in range(2):
        assert perf.parse_latency_histogram(good_hist()).buckets[0][0] == 1e-4
        assert perf.parse_latency_histogram(copy.deepcopy(small)).count == 10
    bad = copy.deepcopy(small)
    bad["axes"][0]["ranges"][2] = {"max": 198}
    with pytest.raises(perf.PerfParseError, match="range 2"):
        perf.parse_latency_histogram(bad)
    bad = copy.deepcopy(small)
    bad["axes"][0]["scale_type"] = "linear"
    with pytest.raises(perf.PerfParseError, match="not log2"):
        perf.parse_latency_histogram(bad)


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
    # Every counter Pacific's BlueStore OSD has (the table's Reef-and-later ones not).
    pacific = {c.key for c in counters.COUNTERS if c.expected(16, "bluestore")}
    assert set(blue.avgs) == pacific & {f"{s}.{n}" for s, n in perf.TIME_AVGS}
    assert set(blue.integers) == pacific & {f"{s}.{n}" for s, n in perf.INTEGERS}
    assert {"bluestore.allocator_lat", "trackedop.slow_ops_count"} - pacific == {
        "bluestore.allocator_lat",
        "trackedop.slow_ops_count",
    }


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
        # A time average's sum is uint64 nanoseconds printed as seconds: never negative,
        # never above 2^64 ns.
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": -0.002}}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": -1}}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": float("-inf")}}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": 1.9e10}}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": 2**64}}},
        {"osd": {"op_w_latency": {"avgcount": 1, "sum": True}}},
        {"osd": {"op_w_latency": {"avgcount": 1}}},
        {"bluestore": {"commit_lat": {"avgcount": 1, "sum": -3.5}}, "osd": {}},
    ],
)
def test_perf_dump_garbage(dump: Any) -> None:
    with pytest.raises(perf.PerfParseError):
        perf.parse_perf_dump(dump)


def test_time_average_sums_at_their_bounds() -> None:
    """0 and the largest sum a uint64 of nanoseconds prints are sums; so is an integer."""
    top = perf.MAX_TIME_SUM_SECONDS
    dump = {"osd": {"op_r_latency": {"avgcount": 0, "sum": 0.0},
                    "op_w_latency": {"avgcount": 2**64 - 1, "sum": top},
                    "op_rw_latency": {"avgcount": 3, "sum": 7}}}  # fmt: skip
    avgs = perf.parse_perf_dump(dump).avgs
    assert avgs["osd.op_r_latency"] == perf.TimeAvg(0, 0.0)
    assert avgs["osd.op_w_latency"].sum == top
    assert avgs["osd.op_rw_latency"] == perf.TimeAvg(3, 7.0)
    assert 1.8446744073e10 < top < 1.8446744074e10


# ----------------------------------------------------------------------------- ops, config


def test_ops_in_flight_of_the_recorded_stall() -> None:
    ops = perf.parse_ops_in_flight(payload("bluestore", "dump_ops_in_flight"), 2.0)
    assert ops.num_ops == 7 and ops.slow == 7
    assert ops.by_flag_point == {"waiting for sub ops": 7}
    assert ops.slow_by_flag_point == {"waiting for sub ops": 7}
    assert 3.9 < ops.oldest_age < 4.1
    at_default = perf.parse_ops_in_flight(payload("bluestore", "dump_ops_in_flight"), 30.0)
    assert at_default.slow == 0 and at_default.slow_by_flag_point == {}


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
    assert result.slow_by_flag_point == {"other": 1}
    # Slow ones by where they wait: only those past the complaint time.
    two = perf.parse_ops_in_flight({"ops": ops, "num_ops": 5}, 1.5)
    assert two.slow == 4 and two.slow_by_flag_point == {"other": 4}
    one = perf.parse_ops_in_flight({"ops": ops, "num_ops": 5}, 0.5)
    assert one.slow_by_flag_point == {"started": 1, "other": 4}
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
    assert cfg.name == "osd.3"  # Ceph's option `name`, the daemon's own


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
    cfg = perf.parse_config({"debug_osd": 5, "osd_memory_target": "lots", "osd_objectstore": 1,
                             "name": 5})  # fmt: skip
    assert cfg.debug == {} and cfg.options == {} and cfg.objectstore == ""
    assert cfg.name == ""  # not a name: unknown, as when config show lacks it
    assert cfg.complaint_time == perf.DEFAULT_COMPLAINT_TIME


def test_version() -> None:
    assert perf.parse_version(payload("memstore", "version")) == "16.2.15"
    with pytest.raises(perf.PerfParseError):
        perf.parse_version({"version": 16})


# ----------------------------------------------------------------------------- fake OSDs


class RecordedOSD:
    """A handler answering like the recorded OSD. The config reply carries the 2 s
    complaint time that was in effect when the ops in flight were recorded, and
    ``osd_data`` (an OSD directory of the fixture tree) when given; :meth:`set` changes a
    reply between scrapes (an OSD under load, a restart). Like a real daemon, it names
    itself (config show's ``name``) after the socket it serves: the path its server
    bound, which a link to that socket does not change (a reply without ``name`` is
    left without)."""

    def __init__(
        self, kind: str, overrides: dict[str, Any] | None = None, osd_data: str | None = None
    ) -> None:
        self.kind = kind
        self.replies: dict[str, bytes] = {}
        for command in COMMAND_FILES:
            data = payload(kind, command)
            if command == "config show":
                data["osd_op_complaint_time"] = "2.000000"
                if osd_data is not None:
                    data["osd_data"] = osd_data
            self.set(command, data)
        self.set("dump_osd_network", network_reply(kind))
        for command, data in (overrides or {}).items():
            self.set(command, data)

    def set(self, command: str, data: Any) -> None:
        self.replies[command] = data if isinstance(data, bytes) else json.dumps(data).encode()

    def __call__(self, conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        if not request:
            return  # peer_pid(): connect and close, as the daemon sees it
        prefix = json.loads(request.rstrip(b"\0"))["prefix"]
        data = self.replies.get(prefix)
        if prefix == "config show" and data is not None:
            data = named_after(data, conn.getsockname())
        conn.sendall(reply(data if data is not None else b"ERROR: (22) Invalid argument\n"))


_SERVED_OSD = re.compile(r"-(osd\.(?:0|[1-9][0-9]*))\.asok$")


def named_after(config: bytes, bound: str) -> bytes:
    """A config show reply whose ``name`` is the OSD of the socket path ``bound``; as
    it was when the path names no OSD, or the reply has no name or is no JSON object."""
    m = _SERVED_OSD.search(bound)
    try:
        data = json.loads(config)
    except ValueError:
        return config
    if m is None or not isinstance(data, dict) or "name" not in data or data["name"] == m[1]:
        return config
    data["name"] = m[1]
    return json.dumps(data).encode()


def recorded_osd(
    kind: str, overrides: dict[str, Any] | None = None, osd_data: str | None = None
) -> RecordedOSD:
    return RecordedOSD(kind, overrides, osd_data)


# Latency row 6 of the OSD's axis is [1.6 ms, 3.2 ms) (docs/metrics.md); ops added there
# by the tests take 2.4 ms each.
BUSY_ROW, BUSY_LOW, BUSY_HIGH = 6, 0.0016, 0.0032
BUSY_LATENCY = 0.0024


# The stage latencies of the events busier() adds with each op: one BlueStore commit and
# one of each RocksDB stage per op (an OSD with those sections), seconds each.
BUSY_STAGES = {
    "bluestore.commit_lat": 0.0011,
    "rocksdb.get_latency": 0.00004,
    "rocksdb.submit_latency": 0.00009,
    "rocksdb.submit_sync_latency": 0.0007,
}


def busier(osd: RecordedOSD, ops: int, restarted: bool = False) -> None:
    """Make ``osd`` answer with ``ops`` more ops of every type in :data:`BUSY_ROW`, in its
    histograms and in perf dump's avgcount and sum, in ``osd.op`` (all three types) and,
    when it has the sections, ``ops`` events of each :data:`BUSY_STAGES` stage.
    ``restarted``: a fresh process that did only those ops since the last call (every
    count back to 0 first)."""
    hist = json.loads(osd.replies["perf histogram dump"])
    dump = json.loads(osd.replies["perf dump"])
    for op, name in perf.OP_HISTOGRAMS.items():
        values = hist["osd"][name]["values"]
        avg = dump["osd"][perf.OP_LATENCY_AVGS[op]]
        if restarted:
            for row in values:
                row[:] = [0] * len(row)
            avg["avgcount"], avg["sum"] = 0, 0.0
        values[BUSY_ROW][0] += ops
        avg["avgcount"] += ops
        avg["sum"] += ops * BUSY_LATENCY
    osd.set("perf histogram dump", hist)
    osd.set("perf dump", dump)
    add_ops(osd, len(perf.OP_HISTOGRAMS) * ops, restarted)
    for key, latency in BUSY_STAGES.items():
        if key.split(".")[0] in dump:
            add_events(osd, key, ops, latency, restarted)


def add_events(osd: RecordedOSD, key: str, n: int, latency: float, restarted: bool = False) -> None:
    """``n`` more events of ``latency`` seconds each in the perf dump time average
    ``key`` (``section.counter``); ``restarted``: from 0."""
    dump = json.loads(osd.replies["perf dump"])
    section, name = key.split(".")
    avg = dump[section][name]
    if restarted:
        avg["avgcount"], avg["sum"] = 0, 0.0
    avg["avgcount"] += n
    avg["sum"] += n * latency
    osd.set("perf dump", dump)


def add_ops(osd: RecordedOSD, n: int, restarted: bool = False) -> None:
    """``n`` more client ops in ``osd.op`` (cephnode_osd_ops_total)."""
    dump = json.loads(osd.replies["perf dump"])
    dump["osd"]["op"] = (0 if restarted else dump["osd"]["op"]) + n
    osd.set("perf dump", dump)


class Clock:
    """The osd collector's clock, stepped by the test (latency windows of minutes)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def osd_scraper(flags: list[str]) -> tuple[Any, Clock]:
    """A scraper as the CLI builds it whose osd collector reads the returned clock."""
    from cephnode_exporter.cli import build_scraper, parse_args

    scraper = build_scraper(parse_args(["dump", *flags]))
    clock = Clock()
    osd = next(c for c in scraper._collectors if c.name == "osd")
    osd.clock = clock  # type: ignore[attr-defined]
    return scraper, clock


def busy_collection(flags: list[str], node: FakeNode, ops: int = 600) -> Collection:
    """Two scrapes a minute apart with ``ops`` more ops of each type (10 op/s at 600) on
    every OSD of ``node`` in between: the second, with the p99 series."""
    scraper, clock = osd_scraper(flags)
    try:
        scraper.collect(10.0)
        for server in node.servers.values():
            assert isinstance(server.handler, RecordedOSD)
            busier(server.handler, ops)
        clock.now += 60
        return scraper.collect(10.0)
    finally:
        scraper.close()


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


def recorded_node(node: FakeNode, tree: Tree | None = None, kv: bool = False) -> FakeNode:
    """osd.0 memstore and osd.3 BlueStore, as recorded; with ``tree``, osd.3's data
    directory is the tree's first OSD (block on device-mapper on an NVMe namespace); with
    ``kv``, osd.3 keeps RocksDB statistics and replays the recorded kv stats (both
    sections, :func:`kv_osd`)."""
    node.add(0, recorded_osd("memstore"))
    osd_data = fixture_osd(tree)[1] if tree else None
    if kv:
        node.add(3, kv_osd(kv_reply("both"), osd_data))
    else:
        node.add(3, recorded_osd("bluestore", osd_data=osd_data))
    return node


def fixture_osd(tree: Tree) -> tuple[int, str, int]:
    """The first OSD of a generated tree: (id, data directory, pid). The pid comes from
    the process's cmdline (``ceph-osd -f --cluster ceph --id <id> ...``)."""
    osd_id = min(int(p.name.split("-")[1]) for p in (tree.rootfs / "var/lib/ceph/osd").iterdir())
    for cmdline in tree.proc.glob("*/cmdline"):
        args = cmdline.read_bytes().split(b"\0")
        if args[0].endswith(b"ceph-osd") and args[args.index(b"--id") + 1] == str(osd_id).encode():
            return osd_id, f"/var/lib/ceph/osd/ceph-{osd_id}", int(cmdline.parent.name)
    raise AssertionError(f"no process of osd.{osd_id} in {tree.proc}")


def impersonate(tree: Tree) -> int:
    """Make this test process look like the tree's first OSD process: the fake admin
    sockets are served by this process, so SO_PEERCRED reports its pid, and
    proc/<our pid> becomes a link to the fixture OSD's directory (like /proc/self).
    Returns the fixture pid."""
    _, _, pid = fixture_osd(tree)
    link = tree.proc / str(os.getpid())
    assert not link.exists() or link.is_symlink(), "our pid is a fixture pid: rebuild"
    if not link.is_symlink():
        link.symlink_to(str(pid))
    return pid


def osd_collection(tree: Tree, extra: list[str] | None = None) -> Collection:
    """A collection of the reference tree with the recorded OSDs behind fake sockets, the
    BlueStore one with the tree's first OSD's disks and process and its RocksDB
    statistics on, after a minute of 10 op/s per op type (so the p99 series are there;
    used by tests/test_metrics_doc.py too; the tree gets the link of :func:`impersonate`)."""
    impersonate(tree)
    node = recorded_node(FakeNode(), tree, kv=True)
    try:
        return busy_collection([*tree.flags, f"--ceph.socket-dir={node.dir}", *(extra or [])], node)
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


@pytest.fixture(scope="module")
def osd_tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """The tuned reference node, its first OSD's process standing in for this process
    (:func:`impersonate`); a tree of this module's own, so the shared ones stay as built."""
    dest = tmp_path_factory.mktemp("osd-tree")
    build_tree(load_node("epyc9454p-tuned"), dest)
    tree = Tree(dest)
    impersonate(tree)
    return tree


def test_collector_on_recorded_osds(osd_tree: Tree, fake_node: FakeNode) -> None:
    recorded_node(fake_node, osd_tree)
    tree = osd_tree
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0.0
    for d in ("osd.0", "osd.3"):
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon=d) == 1.0
    assert value(c, "cephnode_osd_info", ceph_daemon="osd.3", version="16.2.15",
                 objectstore="bluestore", allocator="tcmalloc") == 1.0  # fmt: skip
    # Host facts, from the fixture's osd.0 process (proc/3311, docs/fixtures.md) that the
    # fake sockets' pid stands for: the numbers are what the generator wrote.
    fixture = osd_tree.proc / str(fixture_osd(osd_tree)[2])
    stat = (fixture / "stat").read_text().rsplit(")", 1)[1].split()
    o3 = {"ceph_daemon": "osd.3"}
    assert value(c, "cephnode_osd_cpu_seconds_total", mode="user", **o3) == int(stat[11]) / 100
    assert value(c, "cephnode_osd_cpu_seconds_total", mode="system", **o3) == int(stat[12]) / 100
    assert value(c, "cephnode_osd_threads", **o3) == 70
    statuses = [t.read_text() for t in fixture.glob("task/*/status")]
    assert len(statuses) == 70
    rss_kib = next(int(line.split()[1]) for line in statuses[0].splitlines()
                   if line.startswith("VmRSS:"))  # fmt: skip
    assert value(c, "cephnode_osd_resident_memory_bytes", **o3) == rss_kib * 1024
    for kind, key in (("voluntary", "voluntary_ctxt_switches:"),
                      ("involuntary", "nonvoluntary_ctxt_switches:")):  # fmt: skip
        total = sum(int(line.split()[1]) for text in statuses for line in text.splitlines()
                    if line.startswith(key))  # fmt: skip
        assert value(c, "cephnode_osd_context_switches_total", kind=kind, **o3) == total
    assert value(c, "cephnode_osd_allowed_cpus", numa_node="0", **o3) == 96
    assert value(c, "cephnode_osd_device_info", device="nvme0n1", controller="nvme0", **o3) == 1
    # osd.0 (memstore, recorded osd_data not in the tree): the same process, no device.
    assert value(c, "cephnode_osd_threads", ceph_daemon="osd.0") == 70
    assert not [k for k in samples(c) if k[0] == "cephnode_osd_device_info"
                and ("ceph_daemon", "osd.0") in k[1]]  # fmt: skip
    # The histogram: _count from the matrix, _sum from perf dump, buckets in seconds.
    w = {"ceph_daemon": "osd.3", "op": "write"}
    assert value(c, "cephnode_osd_op_latency_seconds_count", **w) == 2298
    assert value(c, "cephnode_osd_op_latency_seconds_sum", **w) == pytest.approx(35.093693269)
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="+Inf", **w) == 2298
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="0.0001", **w) is not None
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="6.5536", **w) is not None
    assert value(c, "cephnode_osd_op_latency_seconds_bucket", le="13.1072", **w) is None
    assert value(c, "cephnode_osd_op_latency_seconds_count", ceph_daemon="osd.0", op="read") == 2011
    # BlueStore and RocksDB series for the BlueStore OSD only.
    blue = "cephnode_osd_bluestore_kv_sync_latency_seconds_count"
    assert value(c, blue, ceph_daemon="osd.3") == 435
    assert value(c, blue, ceph_daemon="osd.0") is None
    assert value(c, "cephnode_osd_rocksdb_compact_total", ceph_daemon="osd.3") == 0
    assert value(c, "cephnode_osd_rocksdb_compact_total", ceph_daemon="osd.0") is None
    assert value(c, "cephnode_osd_op_queue_wait_seconds_count", ceph_daemon="osd.0") == 2848
    assert value(c, "cephnode_osd_op_latency_seconds_count", ceph_daemon="osd.0", op="write") == 837
    assert value(c, "cephnode_osd_op_in_bytes_total", ceph_daemon="osd.3") == 150601728
    assert value(c, "cephnode_osd_pgs", ceph_daemon="osd.3") == 17
    # The stall: 7 ops waiting for the stopped replica, older than the 2 s complaint time.
    assert value(c, "cephnode_osd_ops_in_flight", ceph_daemon="osd.3") == 7
    assert value(c, "cephnode_osd_slow_ops", ceph_daemon="osd.3") == 7
    assert value(c, "cephnode_osd_ops_in_flight_by_flag_point", ceph_daemon="osd.3",
                 flag_point="waiting for sub ops") == 7  # fmt: skip
    assert value(c, "cephnode_osd_slow_ops_by_flag_point", ceph_daemon="osd.3",
                 flag_point="waiting for sub ops") == 7  # fmt: skip
    # Per OSD, the slow ops by flag point add up to its slow ops, and only flag points
    # with some have a series.
    by_point: dict[str, list[float]] = {}
    for (name, labels), v in samples(c).items():
        if name == "cephnode_osd_slow_ops_by_flag_point":
            by_point.setdefault(dict(labels)["ceph_daemon"], []).append(v)
    for daemon in ("osd.0", "osd.3"):
        slow = value(c, "cephnode_osd_slow_ops", ceph_daemon=daemon)
        assert sum(by_point.get(daemon, [])) == slow, daemon
        assert all(v > 0 for v in by_point.get(daemon, []))
    assert (value(c, "cephnode_osd_oldest_op_age_seconds", ceph_daemon="osd.3") or 0) > 3.9
    assert value(c, "cephnode_osd_debug_nonzero_subsystems", ceph_daemon="osd.3") == 62
    assert value(c, "cephnode_osd_debug_level_info", ceph_daemon="osd.3", subsystem="osd",
                 log_level="1", gather_level="5") == 1.0  # fmt: skip
    assert value(c, "cephnode_osd_config_value", ceph_daemon="osd.3",
                 option="osd_op_num_threads_per_shard_ssd") == 2  # fmt: skip
    # The check judges the same facts.
    failed = {r.subject: r.status for r in c.results if r.check == "osd.debug_levels"}
    assert failed == {"osd.0": "fail", "osd.3": "fail"}


def test_series_per_osd_stay_under_budget(osd_tree: Tree, fake_node: FakeNode) -> None:
    """125 series per OSD with every debug level 0 (a tuned OSD), no ops in flight and
    at least 1 op/s of each type and of each mean's events (so each has its p99 and its
    means); each non-zero debug subsystem adds one, each busy flag point one.

    The BlueStore OSD's 125: 3 x 20 op latency histogram series (17 finite edges up to
    6.5536 s, +Inf, _sum, _count) and 3 p99 gauges; 10 stage summaries x 2; the means
    over the window of the BlueStore commit, the 3 RocksDB stages and the CPU per op (5;
    the RocksDB stages have no summary, their six series paid for these);
    counters ops, in/out bytes, compact, compact_range (5); gauges pgs, ops_in_progress,
    compact_queue_length, ops_in_flight, slow_ops, oldest_op_age, debug_nonzero (7);
    config_value x 6 (the _hdd/_ssd shard and thread options, memory target, complaint
    time; the plain shard/thread options are 0 = unset); scrape success and duration,
    info, op_queue_info (4); the process: cpu user/system, RSS, threads, two
    context-switch kinds (6), allowed_cpus of the one NUMA node (1), device_info (1),
    encryption_info (1);
    the heartbeat pings' worst, mean and median on both networks (6).
    The room for the process came from ops_by_type (3 series equal to the histograms'
    _count), compact_queue_merge and the two unset options (dropped), and the allocator,
    a label of info; the p99 gauges' from the histograms' 13.1 s edge. The memstore
    OSD's 105: no BlueStore summaries (-10) or means (-4), RocksDB counters and queue
    gauge (-3), device (-1).
    The pooled per-host histograms (cephnode_osd_host_op_latency_seconds) carry no
    ceph_daemon: they are series per host, per op type and media (20 each), however
    many OSDs the host has, and not in these counts."""
    tuned = {}
    for kind in KINDS:
        tuned[kind] = payload(kind, "config show")
        for key, val in tuned[kind].items():
            if key.startswith("debug_") and "/" in val:
                tuned[kind][key] = "0/0"
    tuned["bluestore"]["osd_data"] = fixture_osd(osd_tree)[1]
    idle = {"ops": [], "num_ops": 0}
    for osd_id, kind in ((3, "bluestore"), (0, "memstore")):
        replies = {"config show": tuned[kind], "dump_ops_in_flight": idle}
        fake_node.add(osd_id, recorded_osd(kind, replies))
    c = busy_collection([*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD],
                        fake_node)  # fmt: skip
    quantiles = [k for k in osd_series(c, "osd.3") if k[0].endswith("_quantile_seconds")]
    assert len(quantiles) == 3
    # The exporter's means over its window (the heartbeat pings' mean is Ceph's own).
    means = [
        k
        for k in osd_series(c, "osd.3")
        if ("_mean_seconds" in k[0] or "per_op" in k[0]) and "_heartbeat_ping_" not in k[0]
    ]
    assert len(means) == 5
    heartbeat = [k for k in osd_series(c, "osd.3") if "_heartbeat_" in k[0]]
    assert len(heartbeat) == 6
    # cephnode_osd_encryption_info included (none for osd.3's LV, unknown for memstore).
    assert len(osd_series(c, "osd.3")) == 125
    assert len(osd_series(c, "osd.0")) == 105
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


def failed_reasons(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """(ceph_daemon, reason) of each "query failed" line logged."""
    return [
        (r.kv["ceph_daemon"], r.kv["reason"])  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "OSD admin socket query failed"
    ]


def only_failure_series(c: Collection, daemon: str) -> None:
    """``daemon`` has scrape_success 0 and nothing of another OSD's under its name."""
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon=daemon) == 0
    assert {name for name, _ in osd_series(c, daemon)} == {
        "cephnode_osd_scrape_success",
        "cephnode_osd_scrape_duration_seconds",
    }


def test_a_socket_named_for_another_osd_fails_as_identity(
    node_trees: dict[str, Tree], fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """ceph-osd.5.asok is a link to osd.0's socket: the daemon answering names itself
    osd.0 in config show, so osd.5 is an error (reason identity, logged once), not
    osd.0's series under ceph_daemon="osd.5"; osd.0 itself stays healthy."""
    fake_node.add(0, recorded_osd("memstore"))
    (fake_node.dir / "ceph-osd.5.asok").symlink_to(fake_node.dir / "ceph-osd.0.asok")
    tree = node_trees["epyc9454p-tuned"]
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    from cephnode_exporter.cli import build_scraper, parse_args

    scraper = build_scraper(
        parse_args(["dump", *tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    )
    try:
        for _ in range(2):
            c = scraper.collect(10.0)
            assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1
            assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.0") == 1
            only_failure_series(c, "osd.5")
            assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 1
    finally:
        scraper.close()
    assert failed_reasons(caplog) == [("osd.5", "identity")]  # once, not every scrape
    failure = next(r for r in caplog.records if r.getMessage() == "OSD admin socket query failed")
    assert "'osd.0'" in failure.kv["err"]  # type: ignore[attr-defined]


def test_identity_holds_with_a_cached_config(
    node_trees: dict[str, Tree], fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """osd.5's config show is reused for a minute, and the fake sockets all have this
    process's pid (as OSDs in a pid namespace the exporter cannot see have none): when
    osd.5's socket becomes a link to osd.0's within that minute, the next scrape asks the
    daemon behind it anew and fails osd.5, rather than trust the name osd.5 gave before.
    Once osd.5 is back, it answers again at the next scrape."""
    fake_node.add(0, recorded_osd("memstore"))
    fake_node.add(5, recorded_osd("bluestore"))
    tree = node_trees["epyc9454p-tuned"]
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    from cephnode_exporter.cli import build_scraper, parse_args

    scraper = build_scraper(
        parse_args(["dump", *tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    )
    commit = "cephnode_osd_bluestore_commit_latency_seconds_count"
    try:
        c = scraper.collect(10.0)
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.5") == 1
        assert value(c, commit, ceph_daemon="osd.5") is not None
        fake_node.remove(5)
        (fake_node.dir / "ceph-osd.5.asok").symlink_to(fake_node.dir / "ceph-osd.0.asok")
        c = scraper.collect(10.0)
        only_failure_series(c, "osd.5")
        assert failed_reasons(caplog) == [("osd.5", "identity")]
        (fake_node.dir / "ceph-osd.5.asok").unlink()
        fake_node.add(5, recorded_osd("bluestore"))
        c = scraper.collect(10.0)
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.5") == 1
        assert value(c, commit, ceph_daemon="osd.5") is not None
    finally:
        scraper.close()
    again = [r for r in caplog.records if r.getMessage() == "OSD answers again"]
    assert [r.kv["ceph_daemon"] for r in again] == ["osd.5"]  # type: ignore[attr-defined]


def test_a_link_to_another_osds_socket_does_not_hide_the_real_one(
    node_trees: dict[str, Tree], fake_node: FakeNode
) -> None:
    """osd.3 listens in the package layout; the cephadm directory of its fsid, which
    discovery prefers, holds ceph-osd.3.asok as a link to osd.0's socket. The real
    socket is kept and healthy, the link left out as a duplicate (same fsid)."""
    fake_node.add(0, recorded_osd("memstore"))
    fake_node.add(3, recorded_osd("bluestore"))
    fsid = payload("bluestore", "config show")["fsid"]
    (fake_node.dir / fsid).mkdir()
    (fake_node.dir / fsid / "ceph-osd.3.asok").symlink_to(fake_node.dir / "ceph-osd.0.asok")
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
    assert value(c, "cephnode_osd_bluestore_commit_latency_seconds_count", ceph_daemon="osd.3")
    assert value(c, "cephnode_osd_sockets_ignored", reason="duplicate") == 1
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0


def test_choosing_puts_a_socket_of_another_osd_last() -> None:
    """Of two sockets of osd.3 with the same fsid, one whose daemon named another OSD is
    the duplicate, however preferred its place (its cluster's cephadm directory) or
    file (newer); an unknown name (None, or config show without one) is no mismatch."""
    fsid = "2fa54258-9a6e-40c6-9c75-7f2a8c8a3440"
    home = OSDSocket(fsid, 3, f"/run/ceph/{fsid}/ceph-osd.3.asok", "cephadm", mtime=200)
    pkg = OSDSocket("ceph", 3, "/run/ceph/ceph-osd.3.asok", "package", mtime=100)

    def kept(home_name: str | None, pkg_name: str | None) -> str:
        answers = {
            home.path: Answer(False, fsid, home_name),
            pkg.path: Answer(False, fsid, pkg_name),
        }
        choice = choose_sockets([home, pkg], answers)
        assert [d.reason for d in choice.dropped] == ["duplicate"]
        return choice.kept[0].path

    assert kept("osd.3", "osd.3") == home.path
    assert kept(None, None) == home.path
    assert kept("osd.0", "osd.3") == pkg.path
    assert kept("osd.0", None) == pkg.path
    assert kept("osd.3", "osd.0") == home.path


def test_a_config_without_a_name_is_no_mismatch(
    node_trees: dict[str, Tree], fake_node: FakeNode
) -> None:
    """Every release's config show has ``name``; one without says nothing of who
    answers (a daemon that leaves it out could as well print the right one), so the
    OSD is reported, not failed."""
    config = payload("memstore", "config show")
    del config["name"]
    fake_node.add(5, recorded_osd("memstore", {"config show": config}))
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.5") == 1


def test_a_negative_time_average_sum_fails_that_osd_as_parse(
    node_trees: dict[str, Tree], fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """A time average's sum below 0 (Ceph's is uint64 nanoseconds) fails that OSD with
    reason parse; its op latency histogram's _sum would otherwise go negative."""
    dump = payload("bluestore", "perf dump")
    dump["osd"]["op_w_latency"]["sum"] = -0.25
    fake_node.add(0, recorded_osd("memstore"))
    fake_node.add(3, recorded_osd("bluestore", {"perf dump": dump}))
    tree = node_trees["epyc9454p-tuned"]
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.0") == 1
    only_failure_series(c, "osd.3")
    assert failed_reasons(caplog) == [("osd.3", "parse")]


def test_processes_are_read_after_the_round_in_the_collectors_thread(
    osd_tree: Tree, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each OSD's process is read once per scrape, never in a query thread: each status
    pread releases the interpreter lock, and the query threads trading it at every one
    cost more CPU than the reads (docs/performance.md)."""
    from cephnode_exporter.collectors import osd_query

    threads: list[str] = []
    real = osd_query.read_process

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(osd_query, "read_process", spy)
    recorded_node(fake_node, osd_tree)
    c = collect([*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_threads", ceph_daemon="osd.3") == 70
    assert len(threads) == 2  # osd.0 and osd.3, both served by this process
    assert not any(name.startswith("asok") for name in threads), threads


@pytest.mark.parametrize("command", ["perf histogram dump", "perf dump", "dump_ops_in_flight"])
def test_a_reply_that_is_no_json_fails_that_osd_as_decode(
    node_trees: dict[str, Tree],
    fake_node: FakeNode,
    caplog: pytest.LogCaptureFixture,
    command: str,
) -> None:
    """The replies asked every scrape are decoded after the round, in the collector's
    thread: a reply that is no JSON still fails only its OSD, with reason decode."""
    fake_node.add(0, recorded_osd("memstore"))
    fake_node.add(4, recorded_osd("bluestore", {command: b'{"osd": [1, 2'}))
    tree = node_trees["epyc9454p-tuned"]
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.0") == 1
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.4") == 0
    failures = [r for r in caplog.records if r.getMessage() == "OSD admin socket query failed"]
    assert [(r.kv["ceph_daemon"], r.kv["reason"]) for r in failures] == [("osd.4", "decode")]  # type: ignore[attr-defined]
    assert repr(command) in failures[0].kv["err"]  # type: ignore[attr-defined]


def test_sockets_come_and_go(node_trees: dict[str, Tree], fake_node: FakeNode) -> None:
    tree = node_trees["epyc9454p-tuned"]
    flags = [*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    c = collect(flags)
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    assert [k for k in samples(c) if k[0].startswith("cephnode_osd_")] == [
        ("cephnode_osd_sockets", frozenset())
    ]
    assert value(c, "cephnode_osd_sockets") == 0
    fake_node.add(7, recorded_osd("memstore"))
    c = collect(flags)
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.7") == 1
    assert value(c, "cephnode_osd_sockets") == 1
    fake_node.remove(7)
    fake_node.add(8, recorded_osd("memstore"))
    fake_node.add(9, recorded_osd("memstore"))
    c = collect(flags)
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.7") is None
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.8") == 1
    assert value(c, "cephnode_osd_sockets") == 2


def test_node_without_ceph(node_trees: dict[str, Tree], tmp_path: Path) -> None:
    """No socket directory: a success without OSD series, and the check skips."""
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, f"--ceph.socket-dir={tmp_path / 'none'}", *ONLY_OSD])
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    osd = [(k, v) for k, v in samples(c).items() if k[0].startswith("cephnode_osd_")]
    assert osd == [(("cephnode_osd_sockets", frozenset()), 0.0)]
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


# ----------------------------------------------------------------------------- process


def test_stat_and_status_parsers() -> None:
    line = "42 (a) b) c) S 1 42 42 0 -1 4194560 " + " ".join(["7"] * 8) + " 20 0 9 0 1234 5 6 7"
    st = process.parse_stat(line)
    assert (st.comm, st.state, st.threads, st.starttime) == ("a) b) c", "S", 9, 1234)
    assert (st.utime_ticks, st.stime_ticks) == (7, 7)
    for bad in ("", "42 ceph-osd S 1", "42 (x) S 1 2", line.replace(" 9 0 1234", " x 0 1234")):
        with pytest.raises(ParseError):
            process.parse_stat(bad)
    status = "Name:\tceph-osd\nThreads:\t3\nVmRSS:\t  100 kB\nCpus_allowed_list:\t0-2,5\n"
    counts = "voluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n"
    ts = process.parse_status(status + counts)
    assert (ts.threads, ts.rss_bytes, ts.voluntary, ts.involuntary) == (3, 102400, 10, 2)
    assert ts.cpus_allowed == {0, 1, 2, 5}
    no_rss = process.parse_status(status.replace("VmRSS:\t  100 kB\n", "") + counts)
    assert no_rss.rss_bytes is None  # a zombie: no mm, no VmRSS line
    for bad in (status, counts, status.replace("0-2,5", "2-0") + counts,
                status.replace("100 kB", "many kB") + counts):  # fmt: skip
        with pytest.raises(ParseError):
            process.parse_status(bad)


@pytest.mark.parametrize(
    ("paths", "allocator"),
    [
        (["/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4.5.3", "/lib/libc-2.31.so"], "tcmalloc"),
        (["/usr/lib64/libtcmalloc_minimal.so.4"], "tcmalloc"),
        (["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/libjemalloc.so.2"], "jemalloc"),
        (["/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/ceph-osd"], "libc"),
        (["/usr/bin/ceph-osd"], "unknown"),  # static binary
        (["/opt/libtcmalloc_notes.txt", "/lib/libc.so.6"], "libc"),
    ],
)
def test_allocator_from_maps_paths(paths: list[str], allocator: str) -> None:
    assert process.allocator_of(paths) == allocator


def test_maps_paths() -> None:
    lines = [
        "7f3a00000000-7f3a00001000 ---p 00000000 00:00 0 ",
        "563eaa060000-563eab060000 rw-p 00000000 00:00 0                          [heap]",
        "7f3a00801000-7f3a00809000 r--p 00000000 fd:00 1315000 "
        "                   /usr/lib/a b/libtcmalloc.so.4 (deleted)\n",
    ]
    assert process.maps_paths(lines) == ["/usr/lib/a b/libtcmalloc.so.4"]


def test_context_switches_stay_monotonic_when_threads_exit() -> None:
    state = process.ProcessState()
    state.reset((100, 1))
    assert state.switches({100: (5, 1), 101: (50, 2), 102: (7, 0)}) == (62, 3)
    # 101 exited; 102 was reused by a new thread (its count went down).
    assert state.switches({100: (6, 1), 102: (1, 0), 103: (4, 4)}) == (68, 7)
    assert state.switches({100: (6, 1), 102: (3, 0), 103: (4, 4)}) == (70, 7)


def test_the_fixture_process_as_the_reader_sees_it(osd_tree: Tree) -> None:
    """The generated OSD process (tcmalloc, 70 threads) through the parsing layer; every
    value is recomputed from the generated files by hand."""
    fs = HostFS(str(osd_tree.proc), str(osd_tree.sys), str(osd_tree.rootfs))
    _, _, pid = fixture_osd(osd_tree)
    state = process.ProcessState()
    p = process.read_process(fs, pid, state)
    assert (p.comm, p.threads, p.allocator) == ("ceph-osd", 70, "tcmalloc")
    assert p.cpus_allowed == frozenset(range(96))
    assert p.rss_bytes is not None and 4e9 < p.rss_bytes < 5.5e9
    again = process.read_process(fs, pid, state)
    assert (again.voluntary_switches, again.involuntary_switches) == (
        p.voluntary_switches, p.involuntary_switches)  # fmt: skip
    with pytest.raises(process.ProcessGone, match="no such process"):
        process.read_process(fs, 1, process.ProcessState())
    with pytest.raises(process.ProcessGone, match="another pid namespace"):
        process.read_process(fs, pid, process.ProcessState(), comms=frozenset({"ceph-mon"}))


def test_thread_status_files_stay_open_and_fresh() -> None:
    """This process's threads through the real /proc and kept files (AttrFiles): one
    kept file per thread, each pread returns the thread's current status (a thread that
    sleeps gains voluntary switches between two reads of the same descriptor), an exited
    thread's kept file reads as gone, read_process closes the files of threads no longer
    listed (in a child process whose threads nothing else starts), and past the
    descriptor budget reads still work without keeping files."""
    stop = threading.Event()
    ticks = threading.Event()

    def sleeper() -> None:
        while not stop.is_set():
            ticks.wait(0.001)

    workers = [threading.Thread(target=sleeper, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    files = AttrFiles(budget=1000, recheck=True)
    me = os.getpid()
    task = f"/proc/{me}/task"

    def status(tid: int) -> process.ThreadStatus:
        path = f"{task}/{tid}/status"
        return process.parse_status(files.read_bytes(path, 65536).decode(), path)

    try:
        tids = {int(t) for t in os.listdir(task)}
        first = {t: status(t) for t in tids}
        assert len(files) == len(tids) >= 5
        sleeper_tid = workers[0].native_id
        assert sleeper_tid in first
        time.sleep(0.05)
        assert status(sleeper_tid).voluntary > first[sleeper_tid].voluntary  # same fd
        assert len(files) == len(tids)
        stop.set()
        for w in workers:
            w.join()
        with pytest.raises(FileNotFoundError):
            status(sleeper_tid)  # the kept file of an exited thread: gone, and closed
        assert len(files) == len(tids) - 1
        files.close_all()
        # read_process on a process whose threads nothing else starts (pytest's own may
        # gain threads from other tests): 5 threads kept, then 1 once 4 have exited.
        code = (
            "import threading, time\n"
            "ts = [threading.Thread(target=time.sleep, args=(1,)) for _ in range(4)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]; time.sleep(60)\n"
        )
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            child_task = Path(f"/proc/{child.pid}/task")
            deadline = time.monotonic() + 10
            while len(list(child_task.iterdir())) != 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            comm = frozenset({Path(f"/proc/{child.pid}/comm").read_text().strip()})
            state = process.ProcessState()
            p = process.read_process(HostFS(), child.pid, state, comm, files=files)
            assert len(files) == p.threads == 5
            while len(list(child_task.iterdir())) != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            p = process.read_process(HostFS(), child.pid, state, comm, files=files)
            assert len(files) == p.threads == 1  # the exited threads' files are closed
        finally:
            child.kill()
            child.wait()
        # The budget spent: reads go through open/read/close and keep nothing.
        files.close_all()
        files = AttrFiles(budget=0)
        assert status(me).threads is not None and len(files) == 0
    finally:
        stop.set()
        files.close_all()
    assert len(files) == 0


def test_threads_are_listed_again_only_when_one_started_or_exited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child process with three threads: read with kept files, its task directory is
    listed once, and again only when the thread count in stat changed or a kept file
    read as gone; when one thread exits and another starts between two reads (the same
    count), the new thread is read in that same scrape and the gone one retired."""
    code = (
        "import sys, threading\n"
        "held = []\n"
        "def start():\n"
        "    ev = threading.Event(); t = threading.Thread(target=ev.wait); t.start()\n"
        "    held.append((ev, t))\n"
        "start(); start(); print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    if line.strip() == 'swap':\n"
        "        ev, t = held.pop(0); ev.set(); t.join(); start()\n"
        "    else:\n"
        "        start()\n"
        "    print('done', flush=True)\n"
    )
    listings: list[str] = []
    real_listdir = os.listdir

    def counting_listdir(path: str) -> list[str]:
        listings.append(path)
        return real_listdir(path)

    monkeypatch.setattr(process.os, "listdir", counting_listdir)
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    files = AttrFiles(budget=100)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        task = f"/proc/{child.pid}/task"
        comm = frozenset({Path(f"/proc/{child.pid}/comm").read_text().strip()})
        state = process.ProcessState()

        def read() -> process.ProcessSample:
            return process.read_process(HostFS(), child.pid, state, comm, files=files)

        def command(line: str) -> None:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(line + "\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"

        assert read().threads == 3 and listings == [task]
        assert read().threads == 3 and read().threads == 3
        assert listings == [task]  # the same threads: not listed again
        before = set(state.threads)
        command("swap")
        p = read()
        now = {int(t) for t in real_listdir(task)}
        assert p.threads == 3 and set(state.threads) == now != before
        assert len(listings) == 2  # a kept file read as gone: listed again
        assert state.listing == (child.pid, tuple(sorted(now)))
        command("start")
        assert read().threads == 4 and len(listings) == 3  # stat's count changed
        assert set(state.threads) == {int(t) for t in real_listdir(task)}
        read()
        assert len(listings) == 3
    finally:
        child.kill()
        child.wait()
        files.close_all()


def test_thread_status_file_replaced_in_a_fixture_tree(tmp_path: Path) -> None:
    """A fixture tree's status file written anew (unlinked and recreated, as a test
    rewrites a thread) is read from the new file, not from the kept descriptor."""
    status = tmp_path / "status"
    text = "Name:\tceph-osd\nCpus_allowed_list:\t0-3\nvoluntary_ctxt_switches:\t{}\n"
    text += "nonvoluntary_ctxt_switches:\t1\n"
    status.write_text(text.format(5))
    files = AttrFiles(budget=8, recheck=True)

    def voluntary() -> int:
        return process.parse_status(files.read_bytes(str(status), 4096).decode()).voluntary

    try:
        assert voluntary() == 5
        status.unlink()
        status.write_text(text.format(9))
        assert voluntary() == 9
        assert len(files) == 1
        status.unlink()
        with pytest.raises(FileNotFoundError):
            voluntary()
        assert len(files) == 0
    finally:
        files.close_all()


def test_the_live_path_agrees_with_psutil() -> None:
    """This very process through the real /proc, against psutil as an independent reader:
    CPU time, threads, RSS and affinity agree; the context switches are the sum over the
    threads, at least what psutil reads from the main thread alone."""
    import psutil

    me = psutil.Process()
    started = threading.Event()
    stop = threading.Event()

    def spin() -> None:  # a second thread that switches now and then
        started.set()
        while not stop.wait(0.001):
            pass

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    started.wait()
    try:
        time.sleep(0.05)
        comm = Path("/proc/self/comm").read_text().strip()
        p = process.read_process(HostFS(), os.getpid(), process.ProcessState(), frozenset({comm}))
        times, ctx = me.cpu_times(), me.num_ctx_switches()
        assert p.threads == me.num_threads()
    finally:
        stop.set()
        worker.join()
    assert abs(p.cpu_user_seconds - times.user) < 0.1
    assert abs(p.cpu_system_seconds - times.system) < 0.1
    assert p.rss_bytes is not None and abs(p.rss_bytes - me.memory_info().rss) < 8 << 20
    assert p.cpus_allowed == frozenset(os.sched_getaffinity(0))
    assert p.voluntary_switches > ctx.voluntary  # the spinning thread's switches count
    assert p.allocator == "libc"  # CPython on Debian: glibc malloc


@pytest.mark.parametrize(
    ("fault", "path"),
    [("eio", "task/{pid}/status"), ("garbage", "stat"), ("empty", "maps")],
)
def test_unreadable_process_files_are_counted_not_fatal(
    make_tree: Any, fake_node: FakeNode, fault: str, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    first = make_tree("epyc9454p-tuned")
    _, _, pid = fixture_osd(first)
    tree = make_tree("epyc9454p-tuned", faults={f"proc/{pid}/{path.format(pid=pid)}": fault})
    impersonate(tree)
    recorded_node(fake_node, tree)
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
    assert value(c, "cephnode_osd_device_info", ceph_daemon="osd.3", device="nvme0n1",
                 controller="nvme0") == 1  # fmt: skip
    if fault == "empty":  # an empty maps file: no library at all, allocator unknown
        assert value(c, "cephnode_osd_threads", ceph_daemon="osd.3") == 70
        assert value(c, "cephnode_osd_info", ceph_daemon="osd.3", version="16.2.15",
                     objectstore="bluestore", allocator="unknown") == 1  # fmt: skip
        return
    assert value(c, "cephnode_osd_threads", ceph_daemon="osd.3") is None
    assert value(c, "cephnode_osd_info", ceph_daemon="osd.3", version="16.2.15",
                 objectstore="bluestore", allocator="") == 1  # fmt: skip
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 2  # both OSDs
    reasons = [r.kv["reason"] for r in caplog.records if r.getMessage() == "OSD process not read"]  # type: ignore[attr-defined]
    where = f"/{path.format(pid=pid)}"
    assert len(reasons) == 2 and all(where in r for r in reasons), reasons


def test_pid_not_in_procfs_leaves_process_series_out(
    node_trees: dict[str, Tree], fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """The shared tree has no proc/<our pid>: like an OSD whose pid the mounted procfs
    does not show. Its other series stay, nothing is counted as an error."""
    tree = node_trees["epyc9454p-tuned"]
    assert not (tree.proc / str(os.getpid())).exists()
    fake_node.add(3, recorded_osd("bluestore", osd_data="/var/lib/ceph/osd/ceph-2"))
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0
    assert value(c, "cephnode_osd_cpu_seconds_total", ceph_daemon="osd.3", mode="user") is None
    assert value(c, "cephnode_osd_device_info", ceph_daemon="osd.3", device="nvme2n1",
                 controller="nvme2") == 1  # fmt: skip
    [reason] = [r.kv["reason"] for r in caplog.records if r.getMessage() == "OSD process not read"]  # type: ignore[attr-defined]
    assert "no such process" in reason
    numa = {r.subject: (r.status, r.observed) for r in c.results if r.check == "osd.numa"}
    assert numa["osd.3"][0] == "skip" and "process not read" in numa["osd.3"][1]


def test_pid_from_another_pid_namespace(osd_tree: Tree, fake_node: FakeNode) -> None:
    """The exporter in a child pid namespace, the OSD (this process) outside it: the
    kernel reports peer pid 0, the exporter logs why and exports the OSD without its
    process series. Runs the real CLI under unshare(1)."""
    need_root("unshare --pid needs CAP_SYS_ADMIN")
    unshare = need_tool("unshare", "util-linux")
    recorded_node(fake_node, osd_tree)
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    out = subprocess.run(
        [unshare, "--pid", "--fork", sys.executable, "-m", "cephnode_exporter", "dump", *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert 'cephnode_osd_scrape_success{ceph_daemon="osd.3"} 1.0' in out.stdout
    assert "cephnode_osd_cpu_seconds_total" not in out.stdout
    assert 'device="nvme0n1"' in out.stdout  # the disks do not depend on the pid
    assert "pid namespace the exporter cannot see" in out.stderr


# ----------------------------------------------------------------------------- NUMA, devices


def test_numa_nodes_and_cpus() -> None:
    nodes = {0: frozenset({0, 1, 4, 5}), 1: frozenset({2, 3, 6, 7}), 2: frozenset()}
    assert numa.cpus_per_node(frozenset({1, 2, 3, 99}), nodes) == {0: 1, 1: 2}
    assert numa.read_node_cpus(HostFS(sysfs="/nonexistent")) is None


def test_numa_nodes_of_a_nps4_fixture(make_tree: Any) -> None:
    desc = load_node("epyc9454p-tuned")
    desc["cpus"]["numa_nodes"] = 4
    tree = make_tree(desc)
    nodes = numa.read_node_cpus(HostFS(sysfs=str(tree.sys)))
    assert nodes is not None and sorted(nodes) == [0, 1, 2, 3]
    assert nodes[1] == frozenset([*range(12, 24), *range(60, 72)])


def test_resolve_in_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "dev" / "vg").mkdir(parents=True)
    (root / "osd").mkdir()
    (root / "dev" / "vg" / "lv").symlink_to("../dm-4")
    (root / "osd" / "block").symlink_to("/dev/vg/lv")  # absolute: inside root, not the host's
    (root / "osd" / "rel").symlink_to("../dev/./vg/../vg/lv")
    (root / "loop").symlink_to("loop")
    assert blockdev.resolve_in_root(str(root), "/osd/block") == str(root / "dev" / "dm-4")
    assert blockdev.resolve_in_root(str(root), "/osd/rel") == str(root / "dev" / "dm-4")
    assert blockdev.resolve_in_root(str(root), "/osd/none/x") == str(root / "osd/none/x")
    with pytest.raises(OSError, match="symbolic links"):
        blockdev.resolve_in_root(str(root), "/loop")


def test_osd_block_through_device_mapper_of_the_fixture(osd_tree: Tree) -> None:
    """Every fixture OSD: block -> /dev/ceph-<vg>/osd-block-<fsid> -> ../dm-<n> -> sysfs
    dm-<n>/slaves/nvme<k>n1 under controller nvme<k> on NUMA node 0."""
    fs = HostFS(str(osd_tree.proc), str(osd_tree.sys), str(osd_tree.rootfs))
    for k in range(10):
        found = blockdev.find_osd_block(fs, f"/var/lib/ceph/osd/ceph-{k}")
        assert found.target == f"/dev/dm-{k + 1}"
        assert found.disks == (blockdev.Disk(f"nvme{k}n1", (f"nvme{k}",), (0,)),)
    with pytest.raises(blockdev.NoDevice, match="no /var/lib/ceph/osd/ceph-42/block"):
        blockdev.find_osd_block(fs, "/var/lib/ceph/osd/ceph-42")


def _disk_tree(root: Path, layout: dict[str, str]) -> HostFS:
    """A small sysfs/rootfs: ``layout`` maps tree paths to a symlink target ("->x"),
    file content, or "" for a directory."""
    for rel, what in layout.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if what.startswith("->"):
            path.symlink_to(what[2:])
        elif what == "/":
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.write_text(what)
    return HostFS(str(root / "proc"), str(root / "sys"), str(root / "root"))


def test_osd_block_on_a_partition_and_on_nvme_multipath(tmp_path: Path) -> None:
    """dm-crypt on LVM on a partition of a multipath namespace: dm-2 -> dm-1 -> nvme0n1p2
    -> nvme0n1 under nvme-subsys0, which links both controllers (nvme0, nvme1)."""
    subsys = "sys/devices/virtual/nvme-subsystem/nvme-subsys0"
    up5, part = "../../../../..", f"{subsys}/nvme0n1/nvme0n1p2".removeprefix("sys/")
    fs = _disk_tree(
        tmp_path,
        {
            "root/osd/block": "->/dev/mapper/crypt",
            "root/dev/mapper/crypt": "->../dm-2",
            "sys/class/block/dm-2": "->../../devices/virtual/block/dm-2",
            "sys/devices/virtual/block/dm-2/slaves/dm-1": "->../../dm-1",
            "sys/devices/virtual/block/dm-1/slaves/nvme0n1p2": f"->{up5}/{part}",
            f"{subsys}/nvme0n1/nvme0n1p2/partition": "2\n",
            f"{subsys}/nvme0": "->../../../pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0",
            f"{subsys}/nvme1": "->../../../pci0000:00/0000:00:01.2/0000:02:00.0/nvme/nvme1",
            "sys/class/nvme/nvme0/numa_node": "1\n",
            "sys/class/nvme/nvme1/numa_node": "-1\n",
        },
    )  # fmt: skip
    found = blockdev.find_osd_block(fs, "/osd")
    assert found.disks == (blockdev.Disk("nvme0n1", ("nvme0", "nvme1"), (1, -1)),)


def test_osd_block_on_a_file_or_a_non_nvme_disk(tmp_path: Path) -> None:
    fs = _disk_tree(
        tmp_path,
        {
            "root/osd/block": "->/srv/osd.3.block",
            "root/srv/osd.3.block": "sparse",
            "root/hdd/block": "->/dev/sdb",
            "sys/class/block/sdb": "->../../devices/pci0000:00/0000:00:17.0/ata3/host2/block/sdb",
            "sys/devices/pci0000:00/0000:00:17.0/ata3/host2/block/sdb/size": "100\n",
        },
    )  # fmt: skip
    with pytest.raises(blockdev.NoDevice, match=r"/srv/osd\.3\.block is not a block device"):
        blockdev.find_osd_block(fs, "/osd")
    assert blockdev.find_osd_block(fs, "/hdd").disks == (blockdev.Disk("sdb"),)


def test_osd_block_through_a_real_device_node(tmp_path: Path) -> None:
    """The st_rdev path on the real kernel: a block node made with the numbers of one of
    this machine's disks, looked up in the real /sys/dev/block."""
    need_root("mknod of a block device node")
    disks = sorted(p.name for p in Path("/sys/block").iterdir())
    need(bool(disks), "no block device on this machine")
    name = disks[0]
    major, minor = (int(x) for x in Path(f"/sys/block/{name}/dev").read_text().split(":"))
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "osd").mkdir()
    os.mknod(root / "dev" / "odd-name", 0o600 | stat.S_IFBLK, os.makedev(major, minor))
    (root / "osd" / "block").symlink_to("/dev/odd-name")
    found = blockdev.find_osd_block(HostFS(rootfs=str(root)), "/osd")
    assert [d.name for d in found.disks] == [name]  # by the device numbers, not the name


# ----------------------------------------------------------------------------- checks


def _pg_facts(numpgs: dict[str, int | None]) -> OSDCollectorFacts:
    facts = _facts({d: payload("bluestore", "config show") for d in numpgs})
    for o in facts.osds:
        dump = payload("bluestore", "perf dump")
        n = numpgs[o.ceph_daemon]
        if n is None:
            del dump["osd"]["numpg"]
        else:
            dump["osd"]["numpg"] = n
        o.counters = perf.parse_perf_dump(dump)
    return facts


def test_pg_count_check() -> None:
    params = load_profile(None, load_all()).checks["osd.pg_count"].params
    assert (params["min_pgs"], params["max_pgs"]) == (50, 200)
    found = {f.subject: f for f in pg_count(_pg_facts({"osd.0": 17, "osd.1": 100,
             "osd.2": 250, "osd.3": None}), params)}  # fmt: skip
    assert (found["osd.0"].deviates, found["osd.0"].observed) == (True, "17 PGs")
    assert "raise pg_num" in found["osd.0"].hint
    assert found["osd.1"].deviates is False
    assert found["osd.2"].deviates is True and "lower pg_num" in found["osd.2"].hint
    assert found["osd.3"].deviates is None
    assert pg_count(_facts({}), params)[0].deviates is None


def _rocks(version: str, objectstore: str = "bluestore", layout: str = "package") -> Any:
    from cephnode_exporter.ceph.discovery import OSDSocket
    from cephnode_exporter.hostfs import ReadErrors

    config = {**payload("bluestore", "config show"), "osd_objectstore": objectstore}
    o = OSDFacts(OSDSocket("ceph", 1, "/x/ceph-osd.1.asok", layout), 0.0)
    o.config, o.version = perf.parse_config(config), version
    [finding] = rocksdb_build(OSDCollectorFacts("/x", [o], ReadErrors()), {})
    return finding


@pytest.mark.parametrize(
    ("version", "deviates"),
    [
        ("12.2.13", True), ("14.2.22", True), ("15.2.17", True),  # no fixed release
        ("16.2.14", True), ("16.2.15", False),  # PR #55500 in v16.2.15
        ("17.2.7", True), ("17.2.8", False),  # PR #55501 in v17.2.8
        ("18.2.2", True), ("18.2.3", None), ("18.2.4", False),  # PR #55502 in v18.2.4
        ("19.2.0", False), ("20.1.0", False), ("17.2.7-123-gabcdef0", True),
        ("10.2.11", None), ("garbage", None),
    ],
)  # fmt: skip
def test_rocksdb_build_by_release(version: str, deviates: bool | None) -> None:
    f = _rocks(version)
    assert f.deviates is deviates, f.observed
    if deviates:
        assert "cannot tell the packaging" in f.observed and "dpkg-query" in f.hint


def test_rocksdb_build_packaging_and_object_store() -> None:
    assert _rocks("17.2.7", layout="cephadm").deviates is False  # container: an RPM build
    assert "container image" in _rocks("17.2.7", layout="cephadm").observed
    assert _rocks("17.2.7", objectstore="memstore").deviates is None
    assert "upgrade to 17.2.8 or later" in _rocks("17.2.7").hint
    assert "upgrade to Pacific 16.2.15" in _rocks("15.2.17").hint


def _numa_node(variant: dict[str, Any], make_tree: Any, fake_node: FakeNode, *extra: str) -> Any:
    tree = make_tree(variant)
    impersonate(tree)
    recorded_node(fake_node, tree)
    c = collect([*tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD, *extra])
    return c, {r.subject: r for r in c.results if r.check == "osd.numa"}


def test_numa_check_on_a_nps4_node(make_tree: Any, fake_node: FakeNode, tmp_path: Path) -> None:
    """NPS4: the fixture's osd.0 on nvme0 (node 0) is pinned to node 1's CPUs, so the
    fake osd.3 standing in for it warns; osd.0 (memstore) has no device: skip."""
    desc = load_node("epyc9454p-tuned")
    desc["cpus"]["numa_nodes"] = 4
    desc["osds"]["daemons"][0]["cpus_allowed"] = "12-23,60-71"
    c, found = _numa_node(desc, make_tree, fake_node)
    assert value(c, "cephnode_osd_allowed_cpus", ceph_daemon="osd.3", numa_node="1") == 24
    assert value(c, "cephnode_osd_allowed_cpus", ceph_daemon="osd.3", numa_node="0") is None
    assert found["osd.3"].status == "warn"
    assert found["osd.3"].observed == "allowed on node 1 (24 CPUs); nvme0n1 (nvme0) on node 0"
    assert "ceph config set osd.3 osd_numa_node 0" in found["osd.3"].hint
    assert found["osd.0"].status == "skip" and "no device" in found["osd.0"].observed


def test_numa_check_spanning_and_unknown(
    make_tree: Any, fake_node: FakeNode, tmp_path: Path
) -> None:
    desc = load_node("epyc9454p-tuned")
    desc["cpus"]["numa_nodes"] = 4
    desc["osds"]["daemons"][0]["cpus_allowed"] = "0-23,48-71"  # nodes 0 and 1
    _, found = _numa_node(desc, make_tree, fake_node)
    assert found["osd.3"].status == "warn"  # may run on node 1 too
    profile = tmp_path / "site.yaml"
    profile.write_text("name: site\nchecks:\n  osd.numa: {allow_spanning: true}\n")
    fake_node.close()
    other = FakeNode()
    try:
        _, found = _numa_node(desc, make_tree, other, f"--profile={profile}")
    finally:
        other.close()
    assert found["osd.3"].status == "pass"
    unknown = load_node("epyc9454p-tuned")
    unknown["nvme"]["controller"]["numa_node"] = -1
    third = FakeNode()
    try:
        _, found = _numa_node(unknown, make_tree, third)
    finally:
        third.close()
    assert found["osd.3"].status == "skip" and "unknown" in found["osd.3"].observed


def test_one_numa_node_passes(osd_tree: Tree, fake_node: FakeNode) -> None:
    recorded_node(fake_node, osd_tree)
    c = collect([*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    found = {r.subject: r for r in c.results if r.check == "osd.numa"}
    assert found["osd.3"].status == "pass" and "(one NUMA node)" in found["osd.3"].observed
    rocks = {r.subject: r.status for r in c.results if r.check == "osd.rocksdb_build"}
    assert rocks == {"osd.0": "skip", "osd.3": "pass"}  # memstore; 16.2.15 has the fix
    pgs = {r.subject: r.status for r in c.results if r.check == "osd.pg_count"}
    assert pgs == {"osd.0": "warn", "osd.3": "warn"}  # 6 and 17 PGs recorded


def test_fixture_osds_section_is_strict(tmp_path: Path) -> None:
    desc = load_node("epyc9454p-tuned")
    desc["osds"]["daemons"][0]["disk"] = "nvme42n1"
    with pytest.raises(ValueError, match="no disk 'nvme42n1'"):
        build_tree(desc, tmp_path / "a")
    desc = load_node("epyc9454p-tuned")
    desc["osds"]["process"]["alocator"] = "tcmalloc"
    with pytest.raises(ValueError, match="unknown keys"):
        build_tree(desc, tmp_path / "b")


# ----------------------------------------------------------------------------- RocksDB kv stats

# dump_objectstore_kv_stats of the test cluster's BlueStore OSD (tests/cephcluster.py
# record-kvstats): both sections after a small-object write load and a compaction, the
# compaction table alone, and the empty reply without rocksdb_perf.
KV_FIXTURES = FIXTURES / "kvstats"
KV_DB_COUNTERS = osd_catalogue.KV_DB_COUNTERS
KV_CF_COUNTERS = osd_catalogue.KV_CF_COUNTERS
KV_OPTIONS = {
    "rocksdb_perf": "true",
    "rocksdb_collect_compaction_stats": "true",
    "rocksdb_collect_extended_stats": "true",
}


def kv_reply(name: str) -> bytes:
    return (KV_FIXTURES / f"{name}.json").read_bytes()


def kv_osd(
    kv: bytes, osd_data: str | None = None, options: dict[str, str] | None = None
) -> Callable[..., None]:
    """The recorded BlueStore OSD with RocksDB statistics on (``options`` over its config
    show) answering ``dump_objectstore_kv_stats`` with ``kv``."""
    config = payload("bluestore", "config show")
    config.update(KV_OPTIONS if options is None else options)
    config["osd_op_complaint_time"] = "2.000000"
    if osd_data is not None:
        config["osd_data"] = osd_data
    return recorded_osd("bluestore", {"config show": config, "dump_objectstore_kv_stats": kv})


def raw_lines(kv: bytes) -> list[str]:
    """Every line of text in the reply, independently of the parser (a regex over the
    JSON strings; the lines hold no quotes)."""
    return re.findall(r'"[^"]*":"([^"]*)"', kv.decode())


def ticker(kv: bytes, name: str) -> int:
    return next(
        int(line.split(" COUNT : ")[1])
        for line in raw_lines(kv)
        if line.startswith(name + " COUNT : ")
    )


def histogram(kv: bytes, name: str) -> tuple[int, int]:
    line = next(line for line in raw_lines(kv) if line.startswith(name + " P50 : "))
    words = line.split()
    return int(words[words.index("COUNT") + 2]), int(words[words.index("SUM") + 2])


def sum_row(kv: bytes) -> dict[str, str]:
    lines = raw_lines(kv)
    header = next(line for line in lines if line.startswith("Level ")).split()
    row = next(line for line in lines if line.split()[:1] == ["Sum"]).split()
    size = next(i for i, w in enumerate(row) if w in ("KB", "MB", "GB", "TB"))
    row[size - 1 : size + 1] = [" ".join(row[size - 1 : size + 1])]  # "3.18 KB": one column
    return dict(zip(header, row, strict=True))


def test_kv_stats_the_recorded_replies() -> None:
    from cephnode_exporter.ceph import kvstats

    both = kv_reply("both")
    # Several objects back to back with repeated keys: json.loads cannot read it whole,
    # and would keep one line per object if it could.
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        json.loads(both)
    stats = kvstats.parse_kv_stats(both)
    assert stats is not None and stats.db is not None
    count, micros = histogram(both, "rocksdb.compaction.times.micros")
    assert stats.db.count == count > 0
    assert stats.db.seconds == pytest.approx(micros / 1e6) and micros > 0
    assert stats.db.read_bytes == ticker(both, "rocksdb.compact.read.bytes") > 0
    assert stats.db.write_bytes == ticker(both, "rocksdb.compact.write.bytes") > 0
    assert stats.db.flush_write_bytes == ticker(both, "rocksdb.flush.write.bytes") > 0
    cpu_count, cpu_micros = histogram(both, "rocksdb.compaction.times.cpu_micros")
    assert cpu_count == count
    assert stats.db.cpu_seconds == pytest.approx(cpu_micros / 1e6)
    assert stats.db.cpu_seconds is not None and stats.db.cpu_seconds <= stats.db.seconds
    # The table: the default column family only (the OSD is sharded, its data is in
    # the other column families, so the table's bytes round to 0.00 GiB).
    row = sum_row(both)
    assert set(stats.column_families) == {"default"}
    cf = stats.column_families["default"]
    assert cf.count == int(row["Comp(cnt)"]) > 0
    assert cf.seconds == float(row["Comp(sec)"])
    assert cf.read_bytes == cf.write_bytes == 0
    assert cf.read_bytes < stats.db.read_bytes
    # The compaction table alone: the same table, no statistics.
    alone = kvstats.parse_kv_stats(kv_reply("compaction"))
    assert alone is not None and alone.db is None
    assert alone.column_families == stats.column_families
    # rocksdb_perf off: an empty reply, nothing offered.
    assert kv_reply("off") == b""
    assert kvstats.parse_kv_stats(kv_reply("off")) is None
    assert kvstats.parse_kv_stats(None) is None


def kv_json(*sections: tuple[str, str, list[str]]) -> bytes:
    """A reply as Ceph writes it: one object per section, ``key`` repeated per line."""
    out = []
    for name, key, lines in sections:
        pairs = [json.dumps(name) + ':""'] + [f"{json.dumps(key)}:{json.dumps(x)}" for x in lines]
        out.append("{" + ",".join(pairs) + "}")
    return "".join(out).encode()


def cf_table(cf: str, header: str, rows: list[str], cumulative: str | None = None) -> list[str]:
    lines = ["", f"** Compaction Stats [{cf}] **", header, "-" * 40, *rows, ""]
    if cumulative is not None:
        lines.append(cumulative)
    return lines


# RocksDB 6.x as bundled with Pacific (the recorded header), an old one (Size(MB),
# Stall(cnt), whole seconds), and 7.x (blob columns at the end).
PACIFIC_HEADER = (
    "Level    Files   Size     Score Read(GB)  Rn(GB) Rnp1(GB) Write(GB) Wnew(GB) "
    "Moved(GB) W-Amp Rd(MB/s) Wr(MB/s) Comp(sec) CompMergeCPU(sec) Comp(cnt) Avg(sec) "
    "KeyIn KeyDrop"
)
PACIFIC_SUM = (
    " Sum     12/0   1.27 GB   0.0     41.3    20.1     21.2      40.8     19.6       0.0"
    "   2.1     95.2     94.0    444.12            301.55       812    0.547    312M    11M"
)
OLD_HEADER = (
    "Level    Files   Size(MB) Score Read(GB)  Rn(GB) Rnp1(GB) Write(GB) Wnew(GB) "
    "Moved(GB) W-Amp Rd(MB/s) Wr(MB/s) Comp(sec) Comp(cnt) Avg(sec) Stall(cnt)  KeyIn KeyDrop"
)
OLD_SUM = (
    " Sum     12/0   1300.55   0.0     41.3    20.1     21.2      40.8     19.6       0.0"
    "   2.1     95.2     94.0       444       812    0.547          0    312M    11M"
)
REEF_HEADER = PACIFIC_HEADER + " Rblob(GB) Wblob(GB)"
REEF_SUM = PACIFIC_SUM + "       0.0       0.0"
CUMULATIVE = (
    "Cumulative compaction: 40.83 GB write, 12.11 MB/s write, 41.29 GB read, "
    "12.24 MB/s read, 444.1 seconds"
)
GIB = 1 << 30


@pytest.mark.parametrize(
    ("header", "row", "seconds"),
    [
        (PACIFIC_HEADER, PACIFIC_SUM, 444.12),
        (OLD_HEADER, OLD_SUM, 444.0),
        (REEF_HEADER, REEF_SUM, 444.12),
    ],
    ids=["pacific", "old", "reef"],
)
def test_kv_stats_columns_by_name(header: str, row: str, seconds: float) -> None:
    """The totals come from the named columns whatever the version's column set; the
    bytes from the Cumulative line (two decimals) when there is one."""
    from cephnode_exporter.ceph import kvstats

    lines = cf_table("default", header, [row.replace("Sum", " L1"), row])
    stats = kvstats.parse_kv_stats(kv_json(("rocksdb_compaction_statistics", "", lines)))
    assert stats is not None and stats.db is None
    assert stats.column_families == {
        "default": kvstats.CFCompactionStats(round(41.3 * GIB), round(40.8 * GIB), seconds, 812)
    }
    with_line = cf_table("default", header, [row], CUMULATIVE)
    stats = kvstats.parse_kv_stats(kv_json(("rocksdb_compaction_statistics", "", with_line)))
    assert stats is not None
    cf = stats.column_families["default"]
    assert (cf.read_bytes, cf.write_bytes) == (round(41.29 * GIB), round(40.83 * GIB))


def test_kv_stats_several_column_families_and_a_wrapping_object() -> None:
    """Should a Ceph dump every column family, or wrap the sections in one object, the
    parser still finds them; the Priority table repeating the totals is not a level
    table."""
    from cephnode_exporter.ceph import kvstats

    priority = PACIFIC_HEADER.replace("Level   ", "Priority")
    lines = [
        *cf_table("default", PACIFIC_HEADER, [PACIFIC_SUM]),
        *cf_table("default", priority, [PACIFIC_SUM.replace("Sum", "Low")]),
        *cf_table("O-0", PACIFIC_HEADER, [PACIFIC_SUM.replace("812", "  7")]),
    ]
    inner = kv_json(("rocksdb_compaction_statistics", "", lines)).decode()
    wrapped = ('{"rocksdb_statistics":' + inner + ',"other":{"x":[1,2]}}').encode()
    for reply_ in (inner.encode(), wrapped):
        stats = kvstats.parse_kv_stats(reply_)
        assert stats is not None
        assert {k: v.count for k, v in stats.column_families.items()} == {"default": 812, "O-0": 7}
    # Objects without either section (the memtable usage alone) offer nothing.
    assert kvstats.parse_kv_stats(b'{"rocksdb_memtable_statistics":{"a":"1"}}') is None


STATS_LINES = [
    "rocksdb.compact.read.bytes COUNT : 1000",
    "rocksdb.compact.write.bytes COUNT : 900",
    "rocksdb.compaction.times.micros P50 : 1.000000 P95 : 2.000000 P99 : 2.000000 "
    "P100 : 2.000000 COUNT : 3 SUM : 2500000",
]


def test_kv_stats_statistics_without_optional_entries() -> None:
    """Only the read/write tickers and the time histogram are required: an older RocksDB
    without cpu_micros, or without flush bytes, leaves those None."""
    from cephnode_exporter.ceph import kvstats

    stats = kvstats.parse_kv_stats(kv_json(("rocksdb_extended_statistics", ".", STATS_LINES)))
    assert stats == kvstats.KVStats(
        {}, kvstats.DBCompactionStats(1000, 900, 2.5, 3, cpu_seconds=None, flush_write_bytes=None)
    )


def table(*rows: str, header: str = PACIFIC_HEADER) -> bytes:
    """A compaction-table reply of the default column family."""
    return kv_json(("rocksdb_compaction_statistics", "", cf_table("default", header, list(rows))))


def extended(*lines: str) -> bytes:
    return kv_json(("rocksdb_extended_statistics", ".", list(lines)))


@pytest.mark.parametrize(
    ("reply_", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"not json", "not JSON"),
        (b'{"a":1} trailing', "not JSON"),
        (b"[1, 2]", "not an object"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        (b'{"rocksdb_compaction_statistics":"","":1}', "not a line of text"),
        (kv_json(("rocksdb_compaction_statistics", "", ["garbage", "more"])), "no Compaction"),
        (table(PACIFIC_SUM.replace("Sum", " L0")), "without a Sum row"),
        (table(PACIFIC_SUM.replace("41.3", "n/a")), "'n/a' is not a number"),
        (table(PACIFIC_SUM.replace("41.3", "-1.0")), "not a non-negative number"),
        (table(PACIFIC_SUM.replace("812", "8.5")), "not a count"),
        (table(PACIFIC_SUM.replace("  0.547", "")), "columns, the header"),
        (table(PACIFIC_SUM, header=PACIFIC_HEADER.replace("Comp(cnt)", "Cnt")), "Comp(cnt)"),
        (extended(*STATS_LINES[:2]), "compaction.times"),
        (extended("nothing here"), "compact.read"),
        (extended(*STATS_LINES) + extended(*STATS_LINES), "twice"),
    ],
)
def test_kv_stats_garbage_is_a_parse_error(reply_: bytes, message: str) -> None:
    from cephnode_exporter.ceph import kvstats

    with pytest.raises(kvstats.KVStatsParseError, match=re.escape(message)):
        kvstats.parse_kv_stats(reply_)
    assert issubclass(kvstats.KVStatsParseError, perf.PerfParseError)


@pytest.mark.parametrize(
    ("options", "wanted"),
    [
        ({}, False),  # Ceph's defaults
        ({"rocksdb_perf": "true"}, False),
        ({"rocksdb_collect_compaction_stats": "true"}, False),  # empty without rocksdb_perf
        ({"rocksdb_perf": "true", "rocksdb_collect_compaction_stats": "true"}, True),
        ({"rocksdb_perf": "true", "rocksdb_collect_extended_stats": "true"}, True),
        ({"rocksdb_perf": "true", "rocksdb_collect_memory_stats": "true"}, False),
    ],
)
def test_kv_stats_are_asked_for_only_when_kept(options: dict[str, str], wanted: bool) -> None:
    from cephnode_exporter.ceph import kvstats

    config = payload("bluestore", "config show")
    config.update(options)
    assert kvstats.wanted(config) is wanted
    assert kvstats.wanted(None) is False


def kv_requests(node: FakeNode, osd_id: int) -> int:
    return sum(b'"dump_objectstore_kv_stats"' in r for r in node.servers[osd_id].requests)


def test_collector_kv_stats_of_the_recorded_osd(osd_tree: Tree, fake_node: FakeNode) -> None:
    """osd.3 with the statistics on replays the recorded reply: whole-DB counters and the
    default column family's; osd.0 (memstore, options off) is never asked and has none."""
    both = kv_reply("both")
    fake_node.add(0, recorded_osd("memstore"))
    fake_node.add(3, kv_osd(both))
    c = collect([*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    o3 = {"ceph_daemon": "osd.3"}
    assert value(c, "cephnode_osd_scrape_success", **o3) == 1
    count, micros = histogram(both, "rocksdb.compaction.times.micros")
    assert value(c, "cephnode_osd_rocksdb_compactions_total", **o3) == count
    assert value(c, "cephnode_osd_rocksdb_compaction_seconds_total", **o3) == micros / 1e6
    for metric, name in (("read", "compact.read"), ("write", "compact.write")):
        got = value(c, f"cephnode_osd_rocksdb_compaction_{metric}_bytes_total", **o3)
        assert got == ticker(both, f"rocksdb.{name}.bytes")
    flushed = value(c, "cephnode_osd_rocksdb_flush_write_bytes_total", **o3)
    assert flushed == ticker(both, "rocksdb.flush.write.bytes")
    cpu = histogram(both, "rocksdb.compaction.times.cpu_micros")[1] / 1e6
    assert value(c, "cephnode_osd_rocksdb_compaction_cpu_seconds_total", **o3) == cpu
    row = sum_row(both)
    cf = {"column_family": "default", **o3}
    assert value(c, "cephnode_osd_rocksdb_cf_compactions_total", **cf) == int(row["Comp(cnt)"])
    assert value(c, "cephnode_osd_rocksdb_cf_compaction_seconds_total", **cf) == float(
        row["Comp(sec)"]
    )
    assert value(c, "cephnode_osd_rocksdb_cf_compaction_read_bytes_total", **cf) == 0
    kv_names = {f"cephnode_osd_{suffix}_total" for _, suffix, _ in KV_DB_COUNTERS + KV_CF_COUNTERS}
    assert not [k for k in samples(c) if k[0] in kv_names and ("ceph_daemon", "osd.0") in k[1]]
    assert kv_requests(fake_node, 3) == 1 and kv_requests(fake_node, 0) == 0


def test_collector_kv_stats_off_empty_and_broken(
    osd_tree: Tree, fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """At the recorded defaults the command is never sent; with the options on but an
    empty reply (rocksdb_perf changed at runtime, say) there are no series and no error;
    the table alone gives the column family's series only; a garbled reply fails that
    OSD alone, with reason parse."""
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    caplog.set_level(logging.WARNING, logger="cephnode_exporter.collectors.osd")
    fake_node.add(1, recorded_osd("bluestore"))  # Ceph's defaults: all off
    fake_node.add(2, kv_osd(kv_reply("off")))
    fake_node.add(
        3,
        kv_osd(
            kv_reply("compaction"),
            options={"rocksdb_perf": "true", "rocksdb_collect_compaction_stats": "true"},
        ),
    )
    fake_node.add(4, kv_osd(b'{"rocksdb_compaction_statistics":"","":"garbage"}'))
    fake_node.add(5, recorded_osd("memstore"))
    c = collect(flags)
    ids = range(1, 6)
    states = {i: value(c, "cephnode_osd_scrape_success", ceph_daemon=f"osd.{i}") for i in ids}
    assert states == {1: 1, 2: 1, 3: 1, 4: 0, 5: 1}
    assert [kv_requests(fake_node, i) for i in range(1, 6)] == [0, 1, 1, 1, 0]
    kv_names = tuple(
        f"cephnode_osd_{suffix}_total" for _, suffix, _ in KV_DB_COUNTERS + KV_CF_COUNTERS
    )
    kv_series = {(k[0], dict(k[1])["ceph_daemon"]) for k in samples(c) if k[0] in kv_names}
    assert kv_series == {
        (f"cephnode_osd_rocksdb_cf_{m}_total", "osd.3")
        for m in (
            "compaction_read_bytes",
            "compaction_write_bytes",
            "compaction_seconds",
            "compactions",
        )
    }
    failures = [
        (r.kv["ceph_daemon"], r.kv["reason"])
        for r in caplog.records  # type: ignore[attr-defined]
        if r.getMessage() == "OSD admin socket query failed"
    ]
    assert failures == [("osd.4", "parse")]


def test_series_per_osd_with_rocksdb_statistics(osd_tree: Tree, fake_node: FakeNode) -> None:
    """The budget of test_series_per_osd_stay_under_budget is for Ceph's defaults. With
    both statistics on, the BlueStore OSD gets 6 whole-DB counters and 4 per column
    family Pacific dumps (the default one): 125 + 10 = 135 (docs/metrics.md)."""
    config = payload("bluestore", "config show")
    for key, val in config.items():
        if key.startswith("debug_") and "/" in val:
            config[key] = "0/0"
    config.update(KV_OPTIONS)
    config["osd_data"] = fixture_osd(osd_tree)[1]
    idle = {"ops": [], "num_ops": 0}
    replies = {
        "config show": config,
        "dump_ops_in_flight": idle,
        "dump_objectstore_kv_stats": kv_reply("both"),
    }
    fake_node.add(3, recorded_osd("bluestore", replies))
    c = busy_collection([*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD],
                        fake_node)  # fmt: skip
    assert len(osd_series(c, "osd.3")) == 125 + 10


# ----------------------------------------------------------------------------- config cache


def _prefixes(server: Any) -> list[str]:
    return [json.loads(r.rstrip(b"\0"))["prefix"] for r in server.requests if r]


def test_config_and_version_are_reused_within_the_interval(
    osd_tree: Tree, fake_node: FakeNode
) -> None:
    """One exporter, three scrapes: config show and version are asked once in the
    interval, the counters every scrape, and no extra connection is made for the pid
    (it comes from a command's connection)."""
    from cephnode_exporter.cli import build_scraper, parse_args

    fake_node.add(3, recorded_osd("bluestore"))
    server = fake_node.servers[3]
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    for interval, config_asks in (("60", 1), ("0", 3)):
        server.requests.clear()
        accepted = server.accepted
        scraper = build_scraper(
            parse_args(["dump", *flags, f"--collector.osd.config-interval={interval}"])
        )
        try:
            results = [scraper.collect(10.0) for _ in range(3)]
        finally:
            scraper.close()
        for c in results:
            assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
            info = [dict(k[1]) for k in samples(c) if k[0] == "cephnode_osd_info"]
            assert [(i["version"], i["objectstore"]) for i in info] == [("16.2.15", "bluestore")]
            assert value(c, "cephnode_osd_config_value", ceph_daemon="osd.3",
                         option="osd_op_complaint_time") == 2  # fmt: skip
        asked = _prefixes(server)
        assert asked.count("config show") == config_asks, (interval, asked)
        assert asked.count("version") == config_asks
        assert asked.count("perf dump") == asked.count("perf histogram dump") == 3
        assert server.accepted - accepted == len(asked)  # no connection without a request


def test_a_config_reply_that_does_not_parse_is_asked_again(
    osd_tree: Tree, fake_node: FakeNode
) -> None:
    from cephnode_exporter.cli import build_scraper, parse_args

    broken = {"version": {"version": 16}}  # not a version string: a parse error
    fake_node.add(3, recorded_osd("bluestore", overrides=broken))
    server = fake_node.servers[3]
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD]
    scraper = build_scraper(parse_args(["dump", *flags]))
    try:
        for _ in range(2):
            c = scraper.collect(10.0)
            assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 0
    finally:
        scraper.close()
    assert _prefixes(server).count("version") == 2


class _ScriptedSocket:
    """Stands in for AdminSocket in an OSD round (``osd_query._round``): answers from the
    recorded payloads and reports the peer pid it is told."""

    path = "/scripted/ceph-osd.3.asok"

    def __init__(self, pid: int | None) -> None:
        self.asked: list[str] = []
        self.pid = pid
        self.last_peer: tuple[int | None] | None = None

    def command(self, prefix: str, **_: Any) -> Any:
        self.asked.append(prefix)
        self.last_peer = (self.pid,)
        if prefix == "dump_osd_network":
            return json.loads(network_reply("bluestore"))
        return payload("bluestore", prefix)

    def raw(self, prefix: str, **args: Any) -> bytes:
        if prefix == "dump_objectstore_kv_stats":
            self.asked.append(prefix)
            return b""  # the statistics off
        return json.dumps(self.command(prefix, **args)).encode()


def scripted_round(sock: _ScriptedSocket, *args: Any) -> Any:
    """One OSD's round (``osd_query._round``) against a scripted socket, each request
    answered by the blocking driver of tests/test_asokloop.py."""
    return run_blocking(sock, osd_query._round(sock, *args), time.monotonic() + 5)  # type: ignore[arg-type]


def test_a_restarted_osd_is_asked_for_its_config_at_once() -> None:
    """The cache is keyed by the socket's peer pid: a new pid (restart) refetches within
    the interval; an invisible pid (None) relies on the interval alone."""
    cache = osd_query.ConfigCache()

    def scrape(pid: int | None, interval: float = 60) -> list[str]:
        sock = _ScriptedSocket(pid)
        replies = scripted_round(sock, cache, interval)
        facts = OSDFacts(None, 0.0)  # type: ignore[arg-type]
        osd_query.parse_replies(facts, replies)
        assert facts.version == "16.2.15" and facts.config is not None
        return sock.asked

    assert "config show" in scrape(100)
    assert "config show" not in scrape(100)
    assert "config show" in scrape(101)  # restarted
    assert "config show" not in scrape(101)
    assert "config show" in scrape(101, interval=0)
    assert "config show" in scrape(None)
    assert "config show" not in scrape(None)


def test_the_config_cache_holds_for_one_socket_file() -> None:
    """The cache is also keyed by the socket file (device and inode, through a link):
    a socket re-created or a link pointed at another socket asks config show again
    within the interval, whatever the pid (none visible, or one pid for all)."""
    cache = osd_query.ConfigCache()

    def asked(pid: int | None, file_id: tuple[int, int]) -> bool:
        sock = _ScriptedSocket(pid)
        osd = OSDSocket("ceph", 3, sock.path, "package", file_id=file_id)
        replies = scripted_round(sock, cache, 60, None, 0.0, osd)
        osd_query.parse_replies(OSDFacts(osd, 0.0), replies)
        return "config show" in sock.asked

    assert asked(None, (1, 10))
    assert not asked(None, (1, 10))
    assert asked(None, (1, 11))  # another socket file behind the path
    assert asked(100, (1, 11))
    assert not asked(100, (1, 11))
    assert asked(100, (2, 11))


def test_the_daemons_name_is_checked_on_every_scrape() -> None:
    """The scripted socket's daemon is osd.3 (the recorded config show): reported
    under osd.4 it is an identity error, from the fresh reply and from the cached one
    alike; under osd.3 it is not."""
    cache = osd_query.ConfigCache()

    def scrape(osd_id: int) -> list[str]:
        sock = _ScriptedSocket(100)
        osd = OSDSocket("ceph", osd_id, sock.path, "package", file_id=(1, 10))
        replies = scripted_round(sock, cache, 60, None, 0.0, osd)
        osd_query.parse_replies(OSDFacts(osd, 0.0), replies)
        return sock.asked

    assert "config show" in scrape(3)
    assert "config show" not in scrape(3)
    with pytest.raises(AsokIdentityError, match=r"'osd\.3'") as err:
        scrape(4)  # the cached config show, kept for osd.3's socket
    assert err.value.reason == "identity"
    with pytest.raises(AsokIdentityError):
        scrape(4)


@pytest.mark.parametrize("bad", ["-1", "x", "3601"])
def test_config_interval_flag_is_validated(bad: str) -> None:
    from cephnode_exporter.cli import parse_args

    with pytest.raises(SystemExit):
        parse_args(["dump", f"--collector.osd.config-interval={bad}"])


# ----------------------------------------------------------------------------- latency

P99 = "cephnode_osd_op_latency_quantile_seconds"
POOLED = "cephnode_osd_host_op_latency_seconds"
OPS = tuple(perf.OP_HISTOGRAMS)


def p99s(c: Collection) -> dict[tuple[str, str], float]:
    """(ceph_daemon, op) -> the exported p99 (each with phi="0.99")."""
    out = {}
    for (name, labels), v in samples(c).items():
        if name == P99:
            lab = dict(labels)
            assert lab["phi"] == "0.99"
            out[(lab["ceph_daemon"], lab["op"])] = v
    return out


def test_p99_needs_a_second_read_and_1_op_per_second(osd_tree: Tree, fake_node: FakeNode) -> None:
    """A 60 s window: no p99 after one read; after a minute of 10 op/s all in the
    [1.6, 3.2) ms bucket, the bucket's 99 % point; at 0.5 op/s none, at 1 op/s again (the
    read two minutes back has left the window); a restart (counts fall) starts over."""
    recorded_node(fake_node, osd_tree)
    osds = [s.handler for s in fake_node.servers.values()]
    assert all(isinstance(o, RecordedOSD) for o in osds)
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}",
             "--collector.osd.latency-window=60", *ONLY_OSD]  # fmt: skip
    scraper, clock = osd_scraper(flags)
    every = {(d, op) for d in ("osd.0", "osd.3") for op in OPS}
    # Rank 0.99 x 600 = 594 of the 600 new ops, all in one bucket: linear inside it.
    expected = BUSY_LOW + (BUSY_HIGH - BUSY_LOW) * 594 / 600

    def step(ops: int, restarted: bool = False) -> dict[tuple[str, str], float]:
        for o in osds:
            busier(o, ops, restarted)  # type: ignore[arg-type]
        clock.now += 60
        c = scraper.collect(10.0)
        assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1
        return p99s(c)

    try:
        first = scraper.collect(10.0)
        assert p99s(first) == {}
        assert value(first, "cephnode_osd_op_latency_seconds_count", ceph_daemon="osd.3",
                     op="write") == 2298  # fmt: skip
        got = step(600)
        assert set(got) == every
        assert all(v == pytest.approx(expected) for v in got.values()), got
        assert step(30) == {}  # 30 ops in the window's 60 s
        got = step(60)  # exactly 1 op/s
        assert set(got) == every
        assert all(v == pytest.approx(expected) for v in got.values()), got
        assert step(5, restarted=True) == {}  # counts fell: the window holds one read
        got = step(600)
        assert set(got) == every
        assert all(v == pytest.approx(expected) for v in got.values()), got
        help_text = next(f for f in scraper.collect(10.0).families() if f.name == P99)
        assert "60 s" in help_text.documentation
    finally:
        scraper.close()


def test_reads_sparser_than_the_window_are_logged_once(
    osd_tree: Tree, fake_node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """Scrapes two minutes apart with a 60 s window: no p99 ever, and a warning (once)
    that says why, instead of series that are silently never there."""
    recorded_node(fake_node, osd_tree)
    osds = [s.handler for s in fake_node.servers.values()]
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}",
             "--collector.osd.latency-window=60", *ONLY_OSD]  # fmt: skip
    scraper, clock = osd_scraper(flags)
    caplog.set_level(logging.WARNING, logger="cephnode_exporter.collectors.osd")
    try:
        scraper.collect(10.0)
        for _ in range(3):
            for o in osds:
                busier(o, 1200)  # type: ignore[arg-type]
            clock.now += 120
            assert p99s(scraper.collect(10.0)) == {}
    finally:
        scraper.close()
    text = "further apart than the latency window"
    warned = [r for r in caplog.records if text in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].kv == {"gap_s": 120.0, "window_s": 60.0}  # type: ignore[attr-defined]


def test_pooled_quantiles_follow_the_pool(osd_tree: Tree, fake_node: FakeNode) -> None:
    """The per-host p50 and p99 (cephnode_osd_host_op_latency_quantile_seconds) are the
    pooled histogram's quantiles over the window: none after the first read; after a
    minute of 600 ops per OSD in one bucket, that bucket's 50 % and 99 % points for each
    pool (memstore osd.0 "unknown", BlueStore osd.3 on NVMe "nvme"); none at 0.5 op/s."""
    recorded_node(fake_node, osd_tree)
    osds = [s.handler for s in fake_node.servers.values()]
    flags = [*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}",
             "--collector.osd.latency-window=60", *ONLY_OSD]  # fmt: skip
    scraper, clock = osd_scraper(flags)
    name = "cephnode_osd_host_op_latency_quantile_seconds"

    def quantiles(c: Collection) -> dict[tuple[str, str, str], float]:
        out = {}
        for (metric, labels), v in samples(c).items():
            if metric == name:
                lab = dict(labels)
                out[(lab["media"], lab["op"], lab["phi"])] = v
        return out

    def step(ops: int) -> dict[tuple[str, str, str], float]:
        for o in osds:
            busier(o, ops)  # type: ignore[arg-type]
        clock.now += 60
        return quantiles(scraper.collect(10.0))

    try:
        assert quantiles(scraper.collect(10.0)) == {}
        got = step(600)
        want = {
            (media, op, q): BUSY_LOW + (BUSY_HIGH - BUSY_LOW) * rank / 600
            for media in ("unknown", "nvme")
            for op in OPS
            for q, rank in (("0.5", 300), ("0.99", 594))
        }
        assert got == pytest.approx(want), got
        assert step(30) == {}
    finally:
        scraper.close()


COMMIT_MEAN = "cephnode_osd_bluestore_commit_latency_mean_seconds"
ROCKSDB_MEAN = "cephnode_osd_rocksdb_latency_mean_seconds"
CPU_PER_OP = "cephnode_osd_cpu_seconds_per_op"
HOST_CPU_PER_OP = "cephnode_osd_host_cpu_seconds_per_op"


def means(c: Collection) -> dict[tuple[str, ...], float]:
    """The mean gauges of a scrape: (metric, ceph_daemon[, stage]) -> value; the host's
    CPU per op as (metric,)."""
    out: dict[tuple[str, ...], float] = {}
    for (name, labels), v in samples(c).items():
        lab = dict(labels)
        if name in (COMMIT_MEAN, CPU_PER_OP):
            out[(name, lab["ceph_daemon"])] = v
        elif name == ROCKSDB_MEAN:
            out[(name, lab["ceph_daemon"], lab["stage"])] = v
        elif name == HOST_CPU_PER_OP:
            assert lab == {}
            out[(name,)] = v
    return out


def writable_process(tree: Tree, root: Path) -> tuple[Path, Path]:
    """A procfs under ``root`` holding a copy of the tree's first OSD process, with this
    process's pid linked to it (as :func:`impersonate`), so a test can change its CPU
    times; returns the procfs and the copy's stat file."""
    # fixture_osd may name our pid's link to the fixture process: copy what it points to.
    pid = Path(os.path.realpath(tree.proc / str(fixture_osd(tree)[2]))).name
    assert pid != str(os.getpid()), "our pid is a fixture pid: rebuild"
    proc = root / "proc"
    shutil.copytree(tree.proc / pid, proc / pid, symlinks=True)
    (proc / str(os.getpid())).symlink_to(pid)
    return proc, proc / pid / "stat"


def add_cpu(stat_file: Path, user_ticks: int, system_ticks: int) -> None:
    """Add clock ticks to utime and stime (fields 14 and 15, proc(5)) of a stat file."""
    head, tail = stat_file.read_text().rsplit(")", 1)
    fields = tail.split()
    fields[11] = str(int(fields[11]) + user_ticks)
    fields[12] = str(int(fields[12]) + system_ticks)
    stat_file.write_text(f"{head}) {' '.join(fields)}\n")


def test_means_over_the_window(osd_tree: Tree, fake_node: FakeNode, tmp_path: Path) -> None:
    """A 120 s window, scrapes a minute apart. Each mean is the events' latency in the
    window (the commits of 1 ms in the first minute leave it two minutes later), absent
    below 1 event/s and before the second read; the CPU per op is the CPU ticks added
    over the ops added, per OSD and for the node (both fake OSDs are served by this
    process, so both read the one process copy: the node counts its CPU twice). The
    memstore OSD has no BlueStore or RocksDB means and no error. A restart (counts
    fall) starts the window over."""
    proc, stat_file = writable_process(osd_tree, tmp_path)
    hz = os.sysconf("SC_CLK_TCK")
    recorded_node(fake_node, osd_tree)
    mem, blue = (fake_node.servers[i].handler for i in (0, 3))
    assert isinstance(mem, RecordedOSD) and isinstance(blue, RecordedOSD)
    flags = [*osd_tree.flags, f"--path.procfs={proc}", f"--ceph.socket-dir={fake_node.dir}",
             "--collector.osd.latency-window=120", *ONLY_OSD]  # fmt: skip
    scraper, clock = osd_scraper(flags)
    commit, get, submit, sync = BUSY_STAGES  # the perf dump keys
    helps: dict[str, str] = {}  # metric -> HELP, of every scrape

    def step(
        events: dict[str, tuple[int, float]],
        ops: tuple[int, int],
        ticks: tuple[int, int],
        restarted: bool = False,
    ) -> dict[tuple[str, ...], float]:
        """A minute of ``events`` (key -> (count, latency)) and (osd.0, osd.3) ``ops`` on
        the BlueStore OSD, and (user, system) CPU ``ticks``; then a scrape."""
        for key, (n, latency) in events.items():
            add_events(blue, key, n, latency, restarted)
        add_ops(mem, ops[0])
        add_ops(blue, ops[1], restarted)
        add_cpu(stat_file, *ticks)
        clock.now += 60
        c = scraper.collect(10.0)
        assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1
        assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0
        helps.update((f.name, f.documentation) for f in c.families())
        return means(c)

    m, b = "osd.0", "osd.3"
    try:
        assert means(scraper.collect(10.0)) == {}  # one read
        got = step(
            {commit: (600, 0.001), get: (600, 0.0001), submit: (120, 0.0005), sync: (30, 0.002)},
            ops=(300, 900),
            ticks=(450, 150),
        )
        assert got == pytest.approx({
            (COMMIT_MEAN, b): 0.001,
            (ROCKSDB_MEAN, b, "get"): 0.0001,
            (ROCKSDB_MEAN, b, "submit"): 0.0005,  # 2/s; submit_sync: 0.5/s, none
            (CPU_PER_OP, b): 600 / hz / 900,
            (CPU_PER_OP, m): 600 / hz / 300,
            (HOST_CPU_PER_OP,): 2 * 600 / hz / 1200,
        }, rel=1e-9)  # fmt: skip
        # Both minutes in the window: commits of 1 and 3 ms, 0.75 synced submits/s.
        got = step({commit: (600, 0.003), submit: (120, 0.0005), sync: (60, 0.002)},
                   ops=(0, 900), ticks=(300, 0))  # fmt: skip
        assert got == pytest.approx({
            (COMMIT_MEAN, b): (0.6 + 1.8) / 1200,
            (ROCKSDB_MEAN, b, "get"): 0.0001,  # 600 in 120 s
            (ROCKSDB_MEAN, b, "submit"): 0.0005,
            (CPU_PER_OP, b): 900 / hz / 1800,
            (CPU_PER_OP, m): 900 / hz / 300,  # 2.5 op/s
            (HOST_CPU_PER_OP,): 2 * 900 / hz / 2100,
        }, rel=1e-9)  # fmt: skip
        # The first minute left: 600 commits of 3 ms, no gets, 1 submit/s and 1 synced
        # submit/s exactly; osd.0 did no op in the window, its CPU still counts for the node.
        got = step({sync: (60, 0.002)}, ops=(0, 0), ticks=(0, 0))
        assert got == pytest.approx({
            (COMMIT_MEAN, b): 0.003,
            (ROCKSDB_MEAN, b, "submit"): 0.0005,
            (ROCKSDB_MEAN, b, "submit_sync"): 0.002,
            (CPU_PER_OP, b): 300 / hz / 900,
            (HOST_CPU_PER_OP,): 2 * 300 / hz / 900,
        }, rel=1e-9)  # fmt: skip
        # osd.3 restarts (every count from 0): one read in its windows, no means; osd.0
        # did no op: the node has none either.
        assert step({commit: (600, 0.001)}, ops=(0, 600), ticks=(0, 0), restarted=True) == {}
        got = step({commit: (600, 0.001)}, ops=(0, 600), ticks=(120, 0))
        assert got == pytest.approx({
            (COMMIT_MEAN, b): 0.001,
            (CPU_PER_OP, b): 120 / hz / 600,
            (HOST_CPU_PER_OP,): 2 * 120 / hz / 600,
        }, rel=1e-9)  # fmt: skip
        for name in (COMMIT_MEAN, ROCKSDB_MEAN, CPU_PER_OP, HOST_CPU_PER_OP):
            assert "120 s" in helps[name], name
    finally:
        scraper.close()


def test_means_start_over_when_the_pid_changes(osd_tree: Tree) -> None:
    """A new pid is a restart even when no counter fell (a long gap can hide the drop):
    the means and the CPU per op start over, as the p99 windows do. The collector's
    state is fed OSD facts directly, the only way to give one socket two pids."""
    scraper, _ = osd_scraper([*osd_tree.flags, *ONLY_OSD])
    collector = next(c for c in scraper._collectors if c.name == "osd")
    sock = osd_collector.OSDSocket("ceph", 3, "/nowhere/ceph-osd.3.asok", "package")
    dump = payload("bluestore", "perf dump")

    def read(now: float, pid: int, commits: int, ops: int, cpu: float) -> OSDFacts:
        dump["bluestore"]["commit_lat"]["avgcount"] += commits
        dump["bluestore"]["commit_lat"]["sum"] += commits * 0.002
        dump["osd"]["op"] += ops
        facts = OSDFacts(sock, 0.0, counters=perf.parse_perf_dump(dump), pid=pid)
        facts.process = process.ProcessSample(pid, "ceph-osd", cpu, 0.0, None, 1, 0, 0,
                                              frozenset(), "libc")  # fmt: skip
        _, host = collector._update_latency([facts], now)  # type: ignore[attr-defined]
        if facts.cpu_per_op is None:
            assert host is None
        else:
            assert host == pytest.approx(facts.cpu_per_op)  # the node's one OSD
        return facts

    try:
        assert read(0, 100, 0, 0, 10.0).latency_means == {}
        f = read(60, 100, 600, 600, 13.0)
        assert f.latency_means == {"bluestore.commit_lat": pytest.approx(0.002)}
        assert f.cpu_per_op == pytest.approx(3.0 / 600)
        f = read(120, 200, 600, 600, 16.0)  # restarted, every counter still higher
        assert (f.latency_means, f.cpu_per_op) == ({}, None)
        f = read(180, 200, 600, 600, 16.6)
        assert f.latency_means == {"bluestore.commit_lat": pytest.approx(0.002)}
        assert f.cpu_per_op == pytest.approx(0.6 / 600)  # from the read at 120 s only
    finally:
        scraper.close()


def _media_tree(root: Path) -> HostFS:
    """Disks of four kinds behind OSD data directories under ``root``: /osd/hdd1 and
    /osd/hdd2 on SATA disks with rotational 1, /osd/ssd on one with 0, /osd/nvme on an
    NVMe namespace."""
    sata = "devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block"
    nvme = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0"
    layout = {"sys/class/nvme/nvme0/numa_node": "0\n"}
    for osd, disk, parent, rotational in (("hdd1", "sdb", sata, 1), ("hdd2", "sdc", sata, 1),
                                          ("ssd", "sdd", sata, 0),
                                          ("nvme", "nvme0n1", nvme, 0)):  # fmt: skip
        layout[f"root/osd/{osd}/block"] = f"->/dev/{disk}"
        layout[f"sys/class/block/{disk}"] = f"->../../{parent}/{disk}"
        layout[f"sys/block/{disk}"] = f"->../{parent}/{disk}"
        layout[f"sys/{parent}/{disk}/queue/rotational"] = f"{rotational}\n"
    return _disk_tree(root, layout)


def pooled(c: Collection, media: str, op: str = "write") -> dict[str, float]:
    """One pooled histogram: le -> cumulative count, plus "sum" and "count"."""
    return _hist(c, POOLED, {"op": op, "media": media})


def osd_hist(c: Collection, daemon: str, op: str = "write") -> dict[str, float]:
    return _hist(c, "cephnode_osd_op_latency_seconds", {"ceph_daemon": daemon, "op": op})


def _hist(c: Collection, name: str, labels: dict[str, str]) -> dict[str, float]:
    out = {}
    for family in c.families():
        if family.name != name:
            continue
        for s in family.samples:
            rest = {k: v for k, v in s.labels.items() if k != "le"}
            if rest == labels:
                out[s.labels.get("le", s.name.rsplit("_", 1)[1])] = s.value
    return out


def exact(hist: dict[str, float]) -> Any:
    """Equal counts; sums equal but for float rounding (added in another order)."""
    return pytest.approx(hist, rel=1e-12, abs=0)


def summed(*hists: dict[str, float]) -> dict[str, float]:
    keys = set(hists[0])
    assert all(set(h) == keys for h in hists)
    return {k: sum(h[k] for h in hists) for k in keys}


def test_pooled_host_histogram(osd_tree: Tree, fake_node: FakeNode, tmp_path: Path) -> None:
    """Per op type and media (unknown: memstore, hdd, ssd, nvme as the disks say), the
    pool starts at 0 with the exporter, then grows by its OSDs' increases; an OSD that
    restarts counts from 0, one that misses a scrape adds its increase later, a new one
    is only a baseline, a gone one leaves its ops. It never goes backwards, and a disk's
    rotational flag is read once per OSD process."""
    fs = _media_tree(tmp_path)
    impersonate(osd_tree)  # the fake OSDs' pid, visible in the tree's procfs
    osds = {0: recorded_osd("memstore")}
    for osd_id, data in ((1, "/osd/hdd1"), (2, "/osd/hdd2"), (3, "/osd/nvme"), (4, "/osd/ssd")):
        osds[osd_id] = recorded_osd("bluestore", osd_data=data)
    for osd_id, handler in osds.items():
        fake_node.add(osd_id, handler)
    flags = [f"--path.procfs={osd_tree.proc}", f"--path.sysfs={fs.sysfs}",
             f"--path.rootfs={fs.rootfs}", f"--ceph.socket-dir={fake_node.dir}",
             *ONLY_OSD]  # fmt: skip
    scraper, clock = osd_scraper(flags)
    history: list[dict[str, float]] = []

    def scrape() -> Collection:
        clock.now += 60
        c = scraper.collect(10.0)
        hdd = pooled(c, "hdd")
        for before in history:  # never backwards, bucket by bucket
            assert all(hdd[k] >= before[k] for k in before), (before, hdd)
        history.append(hdd)
        return c

    try:
        c = scrape()
        labels = {tuple(sorted(k[1])) for k in samples(c) if k[0] == f"{POOLED}_count"}
        media = {(dict(lab)["op"], dict(lab)["media"]) for lab in labels}
        assert media == {(op, m) for op in OPS for m in ("unknown", "hdd", "ssd", "nvme")}
        # The exporter's first read: every OSD's is a baseline, every pool is empty
        # (while the OSDs have their recorded histories).
        assert osd_hist(c, "osd.1")["+Inf"] > 0 and osd_hist(c, "osd.3")["+Inf"] > 0
        for media, op in (("hdd", "write"), ("unknown", "read"), ("nvme", "write")):
            assert set(pooled(c, media, op).values()) == {0.0}, (media, op)
        start = pooled(c, "hdd")
        ssd_start = osd_hist(c, "osd.4")

        # Load; sdb turns "non-rotational": read once per process, osd.1 stays hdd.
        busier(osds[1], 100)
        busier(osds[2], 50)
        (Path(fs.sysfs) / "block/sdb/queue/rotational").write_text("0\n")
        c = scrape()
        assert pooled(c, "hdd")["+Inf"] == start["+Inf"] + 150
        assert pooled(c, "ssd")["+Inf"] == osd_hist(c, "osd.4")["+Inf"] - ssd_start["+Inf"]
        (Path(fs.sysfs) / "block/sdb/queue/rotational").write_text("1\n")

        # osd.2 restarts and does 7 ops; osd.1 misses the scrape (a reply that does not
        # parse) while doing 40.
        grown = pooled(c, "hdd")
        busier(osds[2], 7, restarted=True)
        idle = osds[1].replies["dump_ops_in_flight"]
        osds[1].set("dump_ops_in_flight", {"ops": "many"})
        busier(osds[1], 40)
        c = scrape()
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.1") == 0
        assert value(c, "cephnode_osd_op_latency_seconds_count", ceph_daemon="osd.2",
                     op="write") == 7  # fmt: skip
        assert pooled(c, "hdd")["+Inf"] == grown["+Inf"] + 7
        assert pooled(c, "hdd")["sum"] == pytest.approx(grown["sum"] + 7 * BUSY_LATENCY)

        # osd.1 answers again, 40 ops later: both minutes count.
        osds[1].set("dump_ops_in_flight", idle)
        busier(osds[1], 40)
        c = scrape()
        assert pooled(c, "hdd")["+Inf"] == grown["+Inf"] + 7 + 80

        # osd.1's socket goes, osd.5 (with a lifetime of ops) comes on its disk: the
        # pool keeps osd.1's ops and takes osd.5's first read as a baseline only.
        kept = pooled(c, "hdd")
        fake_node.remove(1)
        osds[5] = recorded_osd("bluestore", osd_data="/osd/hdd1")
        fake_node.add(5, osds[5])
        c = scrape()
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.5") == 1
        assert pooled(c, "hdd") == exact(kept)
        busier(osds[5], 10)
        c = scrape()
        assert pooled(c, "hdd")["+Inf"] == kept["+Inf"] + 10
        assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0
    finally:
        scraper.close()


@pytest.mark.parametrize("bad", ["59", "3601", "x"])
def test_latency_window_flag_is_validated(bad: str) -> None:
    from cephnode_exporter.cli import parse_args

    assert (
        parse_args(["dump", "--collector.osd.latency-window=60"]).collector_osd_latency_window == 60
    )
    with pytest.raises(SystemExit):
        parse_args(["dump", f"--collector.osd.latency-window={bad}"])


def test_a_failing_process_read_stays_that_osds_process_error(
    osd_tree: Tree, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read after the round, outside the pool's isolation, an unexpected failure of the
    process read is still only the OSD's process error: the OSD answers, the collector
    succeeds, the process series are left out and the read error counted."""
    from cephnode_exporter.collectors import osd_query

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(osd_query, "read_process", broken)
    recorded_node(fake_node, osd_tree)
    c = collect([*osd_tree.flags, f"--ceph.socket-dir={fake_node.dir}", *ONLY_OSD])
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1.0
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1.0
    assert value(c, "cephnode_osd_threads", ceph_daemon="osd.3") is None
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 2.0


@pytest.mark.parametrize(
    "sections",
    [
        # A 5,000-digit ticker: past Python's int() of a string, and no RocksDB uint64.
        (
            (
                "rocksdb_extended_statistics",
                ".",
                [
                    "rocksdb.compact.read.bytes COUNT : " + "9" * 5000,
                    "rocksdb.compact.write.bytes COUNT : 1",
                    "rocksdb.compaction.times.micros P50 : 1.0 P95 : 1.0 P99 : 1.0 "
                    "P100 : 1.0 COUNT : 2 SUM : 19485",
                ],
            ),
        ),
        # 1e300 GiB read: finite, but no uint64 of bytes once multiplied out.
        (
            (
                "rocksdb_compaction_statistics",
                "",
                cf_table("default", PACIFIC_HEADER, [PACIFIC_SUM.replace(" 41.3 ", " 1e300 ")]),
            ),
        ),
    ],
    ids=["ticker-5000-digits", "column-1e300-gib"],
)
def test_kv_stats_numbers_past_uint64_are_parse_errors(
    sections: tuple[tuple[str, str, list[str]], ...],
) -> None:
    """RocksDB's statistics are uint64 (include/rocksdb/statistics.h); a larger number
    is a parse error of the reply (that OSD's `reason` parse), never an OverflowError or
    ValueError that would fail the collector."""
    from cephnode_exporter.ceph import kvstats

    with pytest.raises(kvstats.KVStatsParseError):
        kvstats.parse_kv_stats(kv_json(*sections))
