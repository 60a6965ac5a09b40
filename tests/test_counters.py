"""The per-release counter table (ceph/counters.py) against the replies recorded from real
daemons of each release (tests/fixtures/ceph: Pacific at its top, releases/reef/ and
releases/tentacle/ below, provenance in releases/README.md), and the missing-counter
report on a reply with a counter removed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import counters, perf

from tests.conftest import REPO, Tree, collect, value
from tests.test_asok import reply
from tests.test_osd import COMMAND_FILES, ONLY_OSD, FakeNode

FIXTURES = REPO / "tests" / "fixtures" / "ceph"
# release -> the directory of its recorded replies, and the Ceph version recorded there.
RELEASE_DIRS = {
    "pacific": FIXTURES,
    "reef": FIXTURES / "releases" / "reef",
    "tentacle": FIXTURES / "releases" / "tentacle",
}
VERSIONS = {"pacific": "16.2.15", "reef": "18.2.7", "tentacle": "20.2.4"}


def recorded(release: str, kind: str, command: str) -> Any:
    name = command.replace(" ", "_")
    return json.loads((RELEASE_DIRS[release] / f"{kind}.{name}.json").read_bytes())


def test_fixtures_are_of_the_release_they_claim() -> None:
    for release, directory in RELEASE_DIRS.items():
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["ceph_version"] == VERSIONS[release]
        assert manifest["release"] == release
        for kind in ("memstore", "bluestore"):
            assert perf.parse_version(recorded(release, kind, "version")) == VERSIONS[release]


@pytest.mark.parametrize("release", sorted(RELEASE_DIRS))
@pytest.mark.parametrize("kind", ["memstore", "bluestore"])
def test_table_matches_the_perf_schema_of_each_release(release: str, kind: str) -> None:
    """Every counter the table expects for the release and object store is in the
    daemon's perf schema under the table's name; one it does not expect is absent under
    every name it ever had (compact_range in Reef and later); a renamed counter's old
    name is gone from the newer release (so reading it would have lost the series)."""
    schema = recorded(release, kind, "perf schema")
    major = int(VERSIONS[release].split(".")[0])
    for c in counters.COUNTERS:
        section = schema.get(c.section, {})
        if c.expected(major, kind):
            name = c.name_for(major)
            assert name in section, (release, kind, c.key, name)
        else:
            assert not any(n in section for _, n in c.names if n), (release, kind, c.key)
        older = {n for _, n in c.names if n} - {c.name_for(major)}
        assert not older & set(section), (release, c.key, older & set(section))


def test_renames_keep_the_stable_key() -> None:
    commit = counters.BY_KEY["bluestore.commit_lat"]
    assert [commit.name_for(m) for m in (16, 17, 18, 19, 20)] == [
        "commit_lat", "commit_lat", "txc_commit_lat", "txc_commit_lat", "txc_commit_lat",
    ]  # fmt: skip
    assert counters.BY_KEY["bluestore.throttle_lat"].name_for(18) == "txc_throttle_lat"
    assert counters.BY_KEY["rocksdb.compact_range"].name_for(20) is None
    # Releases outside the table read as the nearest one.
    assert commit.name_for(15) == "commit_lat" and commit.name_for(21) == "txc_commit_lat"
    # An unknown release: every name, newest first.
    assert commit.candidates(None) == ("txc_commit_lat", "commit_lat")
    assert counters.BY_KEY["osd.op"].expected(18, "memstore")
    assert not counters.BY_KEY["bluestore.read_lat"].expected(18, "memstore")


@pytest.mark.parametrize("release", sorted(RELEASE_DIRS))
def test_every_release_reads_the_same_keys(release: str) -> None:
    """The BlueStore OSD of each release yields every key the table expects, under the
    same stable key (Reef's txc_commit_lat as bluestore.commit_lat); nothing missing."""
    major = int(VERSIONS[release].split(".")[0])
    for kind in ("memstore", "bluestore"):
        got = perf.parse_perf_dump(recorded(release, kind, "perf dump"), major, kind)
        assert got.missing == (), (release, kind)
        expected = {c.key for c in counters.COUNTERS if c.expected(major, kind)}
        assert set(got.avgs) | set(got.integers) == expected, (release, kind)
    blue = perf.parse_perf_dump(recorded(release, "bluestore", "perf dump"), major, "bluestore")
    raw = recorded(release, "bluestore", "perf dump")["bluestore"]
    commit = raw["commit_lat" if major < 18 else "txc_commit_lat"]
    assert blue.avgs["bluestore.commit_lat"] == perf.TimeAvg(commit["avgcount"], commit["sum"])
    # Without a version (an unparsable one): whichever name the dump has.
    assert perf.parse_perf_dump(recorded(release, "bluestore", "perf dump")).avgs == blue.avgs


@pytest.mark.parametrize("release", ["pacific", "reef", "tentacle"])
def test_a_removed_counter_is_reported_missing(release: str) -> None:
    major = int(VERSIONS[release].split(".")[0])
    dump = recorded(release, "bluestore", "perf dump")
    name = counters.BY_KEY["bluestore.commit_lat"].name_for(major)
    assert name is not None
    del dump["bluestore"][name]
    del dump["rocksdb"]["get_latency"]
    got = perf.parse_perf_dump(dump, major, "bluestore")
    assert got.missing == ("bluestore.commit_lat", "rocksdb.get_latency")
    assert "bluestore.commit_lat" not in got.avgs
    # Without the object store nothing is judged (the caller could not tell).
    assert perf.parse_perf_dump(dump, major).missing == ()
    # A memstore OSD lacks the bluestore section by design: nothing missing.
    memstore = perf.parse_perf_dump(recorded(release, "memstore", "perf dump"), major, "memstore")
    assert memstore.missing == ()


class ReleaseOSD:
    """A fake admin socket answering with one release's recorded replies."""

    def __init__(self, release: str, kind: str, drop: tuple[str, str] | None = None) -> None:
        self.replies: dict[str, bytes] = {}
        for command in COMMAND_FILES:
            data = recorded(release, kind, command)
            if command == "perf dump" and drop is not None:
                del data[drop[0]][drop[1]]
            if command == "config show":
                # Keep the scrape to the replies recorded here (no kv stats).
                data["rocksdb_perf"] = "false"
            self.replies[command] = json.dumps(data).encode()
        # The heartbeat pings, recorded apart (network/): the OSD at rest.
        network = RELEASE_DIRS[release] / "network" / f"{kind}.dump_osd_network.rest.json"
        self.replies["dump_osd_network"] = network.read_bytes()

    def __call__(self, conn: Any, request: bytes, stop: Any) -> None:
        if not request:
            return
        prefix = json.loads(request.rstrip(b"\0"))["prefix"]
        data = self.replies.get(prefix)
        conn.sendall(reply(data if data is not None else b"ERROR: (22) Invalid argument\n"))


def _scrape(tree: Tree, node_dir: Path) -> Any:
    return collect([*tree.flags, f"--ceph.socket-dir={node_dir}", *ONLY_OSD])


@pytest.mark.parametrize("release", ["pacific", "reef", "tentacle"])
def test_missing_counter_metric_and_log_through_the_collector(
    release: str, node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    """The recorded BlueStore OSD of each release, once whole and once with its commit
    latency removed from perf dump: 0 missing and every family, then 1 missing with the
    commit latency series gone and one log line naming the daemon and the counter."""
    tree = node_trees["epyc9454p-tuned"]
    major = int(VERSIONS[release].split(".")[0])
    name = counters.BY_KEY["bluestore.commit_lat"].name_for(major)
    assert name is not None
    node = FakeNode()
    try:
        node.add(0, ReleaseOSD(release, "memstore"))
        node.add(3, ReleaseOSD(release, "bluestore"))
        c = _scrape(tree, node.dir)
        assert value(c, "cephnode_osd_counters_missing") == 0
        d = {"ceph_daemon": "osd.3"}
        assert value(c, "cephnode_osd_bluestore_commit_latency_seconds_count", **d)
        assert value(c, "cephnode_osd_bluestore_throttle_latency_seconds_count", **d) is not None
        compact_range = value(c, "cephnode_osd_rocksdb_compact_range_total", **d)
        assert (compact_range is not None) == (major < 18)
        node.remove(3)
        node.add(3, ReleaseOSD(release, "bluestore", drop=("bluestore", name)))
        with caplog.at_level(logging.WARNING, logger="cephnode_exporter"):
            c = _scrape(tree, node.dir)
        assert value(c, "cephnode_osd_counters_missing") == 1
        assert value(c, "cephnode_osd_scrape_success", **d) == 1
        assert value(c, "cephnode_osd_bluestore_commit_latency_seconds_count", **d) is None
        lines = [r for r in caplog.records if "lacks a perf counter" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in lines]
        text = lines[0].getMessage() + repr(lines[0].__dict__)
        assert "osd.3" in text and "bluestore.commit_lat" in text
    finally:
        node.close()


def test_missing_counter_is_logged_once_per_daemon_and_counter(
    node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    """One exporter, three scrapes of a Reef OSD without txc_commit_lat: one log line;
    the metric says 1 every time."""
    from cephnode_exporter.cli import build_scraper, parse_args

    tree = node_trees["epyc9454p-tuned"]
    node = FakeNode()
    node.add(3, ReleaseOSD("reef", "bluestore", drop=("bluestore", "txc_commit_lat")))
    scraper = build_scraper(
        parse_args(["dump", *tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD])
    )
    try:
        with caplog.at_level(logging.WARNING, logger="cephnode_exporter"):
            for _ in range(3):
                c = scraper.collect(10.0)
                assert value(c, "cephnode_osd_counters_missing") == 1
    finally:
        scraper.close()
        node.close()
    lines = [r for r in caplog.records if "lacks a perf counter" in r.getMessage()]
    assert len(lines) == 1
