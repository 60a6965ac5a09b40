"""OSD network health: ``dump_osd_network`` parsed (ceph/network.py) and exported per OSD
by the ``osd`` collector (collectors/osd_network.py).

The replies were recorded from the real Pacific, Reef and Tentacle clusters
(``network/`` beside each release's recorded replies, ``tests/cephcluster.py
record-network``; provenance in tests/fixtures/ceph/releases/README.md): a memstore and
the BlueStore OSD at rest, and again once a peer stopped for 3 s under a write load had
its 1-minute interval closed. The expected values are computed here from the JSON
independently of the parser; the garbage cases are what a broken or hostile peer could
send; the last test asks the live clusters.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import asok
from cephnode_exporter.ceph.network import (
    MAX_ENTRIES,
    NetworkParseError,
    parse_osd_network,
)

from tests.cephcluster import CephCluster, shared_cluster
from tests.conftest import Tree, collect, value
from tests.test_counters import RELEASE_DIRS
from tests.test_osd import ONLY_OSD, FakeNode, recorded_osd

RELEASES = ("pacific", "reef", "tentacle")
KINDS = ("memstore", "bluestore")
STATES = ("rest", "stalled")


def network_dir(release: str) -> Path:
    return RELEASE_DIRS[release] / "network"


def recorded(release: str, kind: str, state: str) -> Any:
    return json.loads((network_dir(release) / f"{kind}.dump_osd_network.{state}.json").read_bytes())


def manifest(release: str) -> Any:
    return json.loads((network_dir(release) / "manifest.json").read_text())


def expected(reply: Any, interface: str) -> tuple[int, float, float, float]:
    """(peers, worst, mean, median) in seconds of the current peers' 1-minute averages."""
    times = sorted(
        e["average"]["1min"] / 1000
        for e in reply["entries"]
        if e["interface"] == interface and not e["stale"]
    )
    n = len(times)
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    return n, times[-1], sum(times) / n, median


# ----------------------------------------------------------------------------- recorded


def test_recordings_are_of_the_release_they_claim() -> None:
    for release, version in (("pacific", "16."), ("reef", "18."), ("tentacle", "20.")):
        m = manifest(release)
        assert m["ceph_version"].startswith(version), release
        assert set(m["files"]) == {
            f"{k}.dump_osd_network.{s}.json" for k in KINDS for s in STATES
        }, release


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("state", STATES)
def test_recorded_replies(release: str, kind: str, state: str) -> None:
    reply = recorded(release, kind, state)
    # The shape the parser relies on, as the daemon sent it: the outer section's name is
    # dropped by the JSON formatter, value 0 lists every peer.
    assert reply["threshold"] == 0
    assert {e["interface"] for e in reply["entries"]} == {"back", "front"}
    pings = parse_osd_network(reply)
    assert pings.entries_dropped == 0
    for interface in ("back", "front"):
        got = pings.interfaces[interface]
        peers, worst, mean, median = expected(reply, interface)
        assert (got.peers, got.stale) == (peers, 0)
        # Three peers of a four-OSD cluster, on both networks.
        assert peers == 3
        assert got.max_seconds == pytest.approx(worst, rel=1e-12)
        assert got.mean_seconds == pytest.approx(mean, rel=1e-12)
        assert got.median_seconds == pytest.approx(median, rel=1e-12)
        assert 0 < got.mean_seconds <= got.max_seconds
        assert 0 < got.median_seconds <= got.max_seconds


@pytest.mark.parametrize("release", RELEASES)
def test_a_stalled_peer_is_the_worst_afterwards(release: str) -> None:
    """The pings held by the stopped peer are answered when it continues: its 1-minute
    average carries the stall, it heads the list, and the OSD's worst ping rises several
    times above anything at rest, while its median stays a healthy peer's."""
    victim = int(manifest(release)["stalled_peer"].split(".")[1])
    for kind in KINDS:
        rest, stalled = recorded(release, kind, "rest"), recorded(release, kind, "stalled")
        assert stalled["entries"][0]["to osd"] == victim, (release, kind)
        before = parse_osd_network(rest).interfaces
        after = parse_osd_network(stalled).interfaces
        worst_after = max(after[i].max_seconds or 0 for i in ("back", "front"))
        worst_before = max(before[i].max_seconds or 0 for i in ("back", "front"))
        # The held pings among a minute's: 6-150 ms in the recordings, at least three
        # times anything at rest (0.6-2 ms on the recording machine's loopback).
        assert worst_after > 3 * worst_before, (release, kind, worst_before, worst_after)
        assert worst_before < 0.005, (release, kind, worst_before)
        # One slow peer of three: the median stays a healthy peer's.
        for i in ("back", "front"):
            assert (after[i].median_seconds or 0) < 0.005, (release, kind, i)


# ----------------------------------------------------------------------------- garbage


def entry(interface: str = "back", avg: Any = 0.5, stale: bool = False, to: int = 1) -> Any:
    return {
        "last update": "Fri Nov 27 22:21:16 2026",
        "stale": stale,
        "from osd": 0,
        "to osd": to,
        "interface": interface,
        "average": {"1min": avg, "5min": avg, "15min": avg},
        "min": {"1min": avg, "5min": avg, "15min": avg},
        "max": {"1min": avg, "5min": avg, "15min": avg},
        "last": avg,
    }


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (None, "no entries list"),
        ([], "no entries list"),
        ({"threshold": 0}, "no entries list"),
        ({"network_ping_times": {"entries": []}}, "no entries list"),
        ({"entries": {"0": entry()}}, "no entries list"),
        ({"entries": ["x"]}, "entry 0 is not an object"),
        ({"entries": [entry(), entry("cluster")]}, "entry 1 has interface 'cluster'"),
        ({"entries": [{**entry(), "average": {"5min": 1}}]}, r"entry 0 has no average\.1min"),
        ({"entries": [{**entry(), "average": 3}]}, r"entry 0 has no average\.1min"),
        ({"entries": [entry(avg="0.5")]}, "not a number"),
        ({"entries": [entry(avg=True)]}, "not a number"),
        ({"entries": [entry(avg=None)]}, "not a number"),
        ({"entries": [entry(avg=-1)]}, "out of range"),
        ({"entries": [entry(avg=math.nan)]}, "out of range"),
        ({"entries": [entry(avg=math.inf)]}, "out of range"),
        ({"entries": [entry(avg=5e6)]}, "out of range"),
    ],
)
def test_garbage_is_a_clear_error(reply: Any, message: str) -> None:
    with pytest.raises(NetworkParseError, match=message):
        parse_osd_network(reply)


def test_no_peers_yet_has_counts_and_no_times() -> None:
    """An OSD that shares no PG with another lists nobody (seen on the test clusters
    before their first pool): zero peers, no worst or mean."""
    pings = parse_osd_network({"threshold": 0, "entries": []})
    for interface in ("back", "front"):
        got = pings.interfaces[interface]
        assert (got.peers, got.stale, got.max_seconds, got.mean_seconds) == (0, 0, None, None)
        assert got.median_seconds is None


def test_stale_peers_are_counted_and_left_out() -> None:
    reply = {"entries": [entry(avg=9000.0, stale=True, to=7), entry(avg=2.0), entry(avg=1.0)]}
    back = parse_osd_network(reply).interfaces["back"]
    assert (back.peers, back.stale) == (2, 1)
    assert back.max_seconds == pytest.approx(0.002)
    assert back.mean_seconds == pytest.approx(0.0015)
    assert back.median_seconds == pytest.approx(0.0015)
    # One slow peer among three: the mean follows it, the median does not.
    three = {"entries": [entry(avg=2000.0), entry(avg=1.0), entry(avg=1.2)]}
    back = parse_osd_network(three).interfaces["back"]
    assert back.mean_seconds == pytest.approx(0.6674)
    assert back.median_seconds == pytest.approx(0.0012)
    # Only stale peers: counted, no times.
    only = parse_osd_network({"entries": [entry(stale=True)]}).interfaces["back"]
    assert (only.peers, only.stale, only.max_seconds) == (0, 1, None)


def test_entries_beyond_the_cap_are_counted_not_read() -> None:
    """Ceph sorts the worst first; a reply longer than the cap keeps its head (the worst
    peers) and counts the rest, even where the rest would not parse."""
    entries = [entry(avg=3.0), entry(avg=1.0), "garbage", entry(avg=1000.0)]
    pings = parse_osd_network({"entries": entries}, max_entries=2)
    assert pings.entries_dropped == 2
    assert pings.interfaces["back"].max_seconds == pytest.approx(0.003)
    assert pings.interfaces["back"].peers == 2
    assert MAX_ENTRIES >= 2 * 4096


def test_the_allowlist_bounds_the_reply() -> None:
    """The reply cap holds the cap of entries at the recorded size per entry, and the
    parser's cap is below the items the client accepts."""
    spec = asok.ALLOWED_COMMANDS["dump_osd_network"]
    assert spec.args == frozenset({"value"})
    reply = recorded("tentacle", "bluestore", "stalled")
    raw = json.dumps(reply, separators=(",", ":")).encode()
    per_entry = len(raw) / len(reply["entries"])
    items = asok.json_items(raw) / len(reply["entries"])
    assert MAX_ENTRIES * per_entry < spec.max_bytes
    assert MAX_ENTRIES * items < spec.max_items
    # The request Ceph parses: an integer "value".
    request = asok.encode_request("dump_osd_network", {"value": 0})
    assert json.loads(request.rstrip(b"\0")) == {
        "prefix": "dump_osd_network",
        "value": 0,
        "format": "json",
    }


# ----------------------------------------------------------------------------- collector


def test_collector_exports_the_recorded_pings(node_trees: dict[str, Tree]) -> None:
    """Through fake sockets replaying the recorded OSDs: per OSD and interface the worst,
    mean and median ping in seconds, equal to the reply's own numbers, and the node's
    median of its OSDs' medians."""
    tree = node_trees["epyc9454p-tuned"]
    node = FakeNode()
    try:
        node.add(0, recorded_osd("memstore"))
        node.add(3, recorded_osd("bluestore"))
        c = collect([*tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD])
    finally:
        node.close()
    for osd, kind in ((0, "memstore"), (3, "bluestore")):
        reply = recorded("pacific", kind, "rest")
        for interface in ("back", "front"):
            d = {"ceph_daemon": f"osd.{osd}", "interface": interface}
            peers, worst, mean, median = expected(reply, interface)
            assert value(c, "cephnode_osd_heartbeat_ping_max_seconds", **d) == pytest.approx(worst)
            assert value(c, "cephnode_osd_heartbeat_ping_mean_seconds", **d) == pytest.approx(mean)
            got = value(c, "cephnode_osd_heartbeat_ping_median_seconds", **d)
            assert got == pytest.approx(median)
            assert peers == 3
    # The node's median of its two OSDs' larger medians: their mean.
    larger = [
        max(expected(recorded("pacific", kind, "rest"), i)[3] for i in ("back", "front"))
        for kind in KINDS
    ]
    host = value(c, "cephnode_osd_host_heartbeat_ping_median_seconds")
    assert host == pytest.approx(sum(larger) / 2)


def test_a_garbage_network_reply_fails_that_osd_only(node_trees: dict[str, Tree]) -> None:
    """A reply that does not parse fails the OSD's scrape like any other of its replies
    (cephnode_osd_scrape_success 0, no ping series), and the other OSD is unaffected."""
    tree = node_trees["epyc9454p-tuned"]
    node = FakeNode()
    try:
        node.add(0, recorded_osd("memstore", {"dump_osd_network": {"entries": "none"}}))
        node.add(3, recorded_osd("bluestore"))
        c = collect([*tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD])
    finally:
        node.close()
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.0") == 0
    assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
    d0 = {"ceph_daemon": "osd.0", "interface": "back"}
    assert value(c, "cephnode_osd_heartbeat_ping_max_seconds", **d0) is None
    d3 = {"ceph_daemon": "osd.3", "interface": "back"}
    assert value(c, "cephnode_osd_heartbeat_ping_max_seconds", **d3) is not None


# ----------------------------------------------------------------------------- real clusters


@pytest.fixture(scope="session", params=RELEASES)
def net_cluster(request: pytest.FixtureRequest) -> CephCluster:
    return shared_cluster(request.config, request.param)


def test_live_osds_report_their_peers(
    net_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    """On the real cluster of each release, once a size-2 pool makes the OSDs heartbeat
    peers: every OSD exports both interfaces with times that a loopback round trip can
    take, ordered worst >= median > 0 and worst >= mean > 0."""
    tree = node_trees["epyc9454p-tuned"]
    net_cluster.create_pool("osdnet", size=2, pg_num=16)
    ids = sorted(net_cluster.osds)
    deadline = time.monotonic() + 120
    while True:
        replies = {
            i: asok.AdminSocket(net_cluster.asok(f"osd.{i}")).command("dump_osd_network", value=0)
            for i in ids
        }
        interfaces = {i: {e["interface"] for e in r["entries"]} for i, r in replies.items()}
        if all(v == {"back", "front"} for v in interfaces.values()):
            break
        assert time.monotonic() < deadline, f"no heartbeat peers listed after 120 s: {interfaces}"
        time.sleep(3)
    c = collect([*tree.flags, f"--ceph.socket-dir={net_cluster.socket_dir}", *ONLY_OSD])
    for i in ids:
        for interface in ("back", "front"):
            d = {"ceph_daemon": f"osd.{i}", "interface": interface}
            worst = value(c, "cephnode_osd_heartbeat_ping_max_seconds", **d)
            mean = value(c, "cephnode_osd_heartbeat_ping_mean_seconds", **d)
            median = value(c, "cephnode_osd_heartbeat_ping_median_seconds", **d)
            assert worst is not None and mean is not None and median is not None
            assert 0 < mean <= worst < 8.0, (i, interface, mean, worst)  # below the grace
            assert 0 < median <= worst, (i, interface, median, worst)


# ----------------------------------------------------------------------------- reuse


def test_the_summary_is_reused_within_the_interval() -> None:
    """dump_osd_network is asked once per interval and OSD process: not again within
    the interval (the summary kept is the one parsed), again once it has passed, at once
    when the socket's peer pid changes (a restart), and every time with interval 0."""
    from cephnode_exporter.collectors import osd_query
    from cephnode_exporter.facts.osd import OSDFacts

    from tests.test_osd import _ScriptedSocket, scripted_round

    config = osd_query.ConfigCache()
    cache = osd_query.NetworkCache()

    def scrape(pid: int | None, interval: float = 60) -> tuple[bool, OSDFacts]:
        sock = _ScriptedSocket(pid)
        replies = scripted_round(sock, config, 60, cache, interval)
        facts = OSDFacts(None, 0.0)  # type: ignore[arg-type]
        osd_query.parse_replies(facts, replies)
        return "dump_osd_network" in sock.asked, facts

    reply = recorded("pacific", "bluestore", "rest")
    asked, first = scrape(100)
    assert asked and first.network == parse_osd_network(reply)
    asked, again = scrape(100)
    assert not asked and again.network is first.network
    cache.fetched -= 61  # the interval has passed
    assert scrape(100)[0]
    assert not scrape(100)[0]
    assert scrape(101)[0]  # restarted
    assert not scrape(101)[0]
    assert scrape(101, interval=0)[0]
    assert scrape(None)[0]  # the pid not visible: the interval alone
    assert not scrape(None)[0]


def test_a_reply_that_does_not_parse_is_not_kept() -> None:
    from cephnode_exporter.collectors import osd_query
    from cephnode_exporter.facts.osd import OSDFacts

    from tests.test_osd import _ScriptedSocket, scripted_round

    config, cache = osd_query.ConfigCache(), osd_query.NetworkCache()

    class Broken(_ScriptedSocket):
        def command(self, prefix: str, **args: Any) -> Any:
            got = super().command(prefix, **args)
            return {"entries": "none"} if prefix == "dump_osd_network" else got

    sock = Broken(100)
    replies = scripted_round(sock, config, 60, cache, 60)
    with pytest.raises(NetworkParseError):
        osd_query.parse_replies(OSDFacts(None, 0.0), replies)  # type: ignore[arg-type]
    assert cache.pings is None
    sock = _ScriptedSocket(100)
    scripted_round(sock, config, 60, cache, 60)
    assert "dump_osd_network" in sock.asked


def test_the_collector_reuses_the_summary(node_trees: dict[str, Tree]) -> None:
    """Through the collector: a changed reply shows only once the interval passed
    (--collector.osd.network-interval 0: at the next scrape)."""
    from cephnode_exporter.cli import build_scraper, parse_args

    tree = node_trees["epyc9454p-tuned"]
    for interval, changes in (("60", False), ("0", True)):
        node = FakeNode()
        osd = recorded_osd("bluestore")
        node.add(3, osd)
        flags = [*tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD,
                 f"--collector.osd.network-interval={interval}"]  # fmt: skip
        scraper = build_scraper(parse_args(["dump", *flags]))
        try:
            d = {"ceph_daemon": "osd.3", "interface": "back"}
            name = "cephnode_osd_heartbeat_ping_max_seconds"
            before = value(scraper.collect(10.0), name, **d)
            stalled = recorded("pacific", "bluestore", "stalled")
            osd.set("dump_osd_network", stalled)
            after = value(scraper.collect(10.0), name, **d)
        finally:
            scraper.close()
            node.close()
        assert before == pytest.approx(
            expected(recorded("pacific", "bluestore", "rest"), "back")[1]
        )
        assert (after == pytest.approx(expected(stalled, "back")[1])) is changes
        assert (after == before) is not changes


def _long_reply(entries: int) -> dict[str, Any]:
    """A reply of ``entries`` entries, the recorded one's first entry repeated."""
    first = recorded("pacific", "bluestore", "rest")["entries"][0]
    return {"threshold": 0, "entries": [{**first, "to osd": n} for n in range(entries)]}


def test_a_reply_beyond_the_cap_is_logged_once(
    node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    """An OSD listing more entries than are read is logged once while it does (not every
    scrape), again after it went back under the cap and over it once more."""
    import logging

    from cephnode_exporter.cli import build_scraper, parse_args

    caplog.set_level(logging.WARNING, logger="cephnode_exporter.collectors.osd")
    tree = node_trees["epyc9454p-tuned"]
    node = FakeNode()
    osd = recorded_osd("bluestore")
    node.add(3, osd)
    flags = [*tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD,
             "--collector.osd.network-interval=0"]  # fmt: skip
    scraper = build_scraper(parse_args(["dump", *flags]))
    long = json.dumps(_long_reply(MAX_ENTRIES + 3)).encode()

    def logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "heartbeat entries" in r.getMessage()]

    try:
        osd.set("dump_osd_network", long)
        for _ in range(3):
            c = scraper.collect(10.0)
            assert value(c, "cephnode_osd_scrape_success", ceph_daemon="osd.3") == 1
        assert len(logged()) == 1
        assert logged()[0].kv["dropped"] == 3  # type: ignore[attr-defined]
        assert logged()[0].kv["ceph_daemon"] == "osd.3"  # type: ignore[attr-defined]
        osd.set("dump_osd_network", recorded("pacific", "bluestore", "rest"))
        scraper.collect(10.0)
        osd.set("dump_osd_network", long)
        scraper.collect(10.0)
        assert len(logged()) == 2
    finally:
        scraper.close()
        node.close()
