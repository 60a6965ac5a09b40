"""End to end: the real entry point's `dump` on the detuned reference node, against a
golden file, then `promtool check metrics` on it (Prometheus' own linter); and the linter
again on the full exposition of that node with the recorded OSDs and the pgs collector,
which the golden file (no OSD sockets, pgs off by default) cannot show."""

from __future__ import annotations

import re
import subprocess

import pytest
from cephnode_exporter.exposition import encode

from tests.conftest import GOLDEN, Tree, compare_golden, need_tool, run_cli
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_osd import osd_collection
from tests.test_pgs import fake_rados, recorded

# Values that legitimately change between runs: timings and the Python version.
_VOLATILE = (
    re.compile(r"^(cephnode_scrape_collector_duration_seconds\{[^}]*\}) .*$", re.M),
    re.compile(r'python_version="[^"]*"'),
)


def normalise(text: str) -> str:
    text = _VOLATILE[0].sub(r"\1 <duration>", text)
    return _VOLATILE[1].sub('python_version="<python>"', text)


@pytest.fixture(scope="module")
def dump(node_trees: dict[str, Tree]) -> str:
    proc = run_cli("dump", *node_trees["epyc9454p-detuned"].flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", "a clean fixture must not log anything"
    return proc.stdout


def test_dump_matches_golden(request: pytest.FixtureRequest, dump: str) -> None:
    compare_golden(request, GOLDEN / "epyc9454p-detuned.prom", normalise(dump))


def promtool_check_metrics(text: str) -> None:
    """`promtool check metrics` finds nothing at all: no error and no warning."""
    promtool = need_tool("promtool", "prometheus")
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # promtool prints lint problems even when exiting 0 on some versions
    assert proc.stdout.strip() == "" and proc.stderr.strip() == "", proc.stdout + proc.stderr


def test_dump_passes_promtool(dump: str) -> None:
    promtool_check_metrics(dump)


@pytest.fixture(scope="module")
def full_exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The detuned node's exposition with every default collector, the recorded OSDs
    (memstore and BlueStore, RocksDB statistics, ops in flight) after a busy minute, so
    the quantile gauges and means are there, and the pgs collector replaying the recorded
    laggy listing: every OSD and pgs family the exporter has."""
    dest = tmp_path_factory.mktemp("full-exposition")
    build_tree(load_node("epyc9454p-detuned"), dest)
    tree = Tree(dest)
    conf = tree.root / "ceph.conf"
    conf.write_text("[global]\nmon_host = 127.0.0.1\n")
    # Two replies: osd_collection scrapes twice, a minute apart.
    with fake_rados([(0, recorded("laggy.json"), "")] * 2):
        collection = osd_collection(tree, ["--collector.pgs", f"--collector.pgs.conf={conf}"])
    return encode(collection.families()).decode()


def test_full_exposition_has_the_osd_and_pgs_families(full_exposition: str) -> None:
    for needle in (
        'cephnode_scrape_collector_success{collector="osd"} 1.0',
        'cephnode_scrape_collector_success{collector="pgs"} 1.0',
        'cephnode_osd_op_latency_seconds_bucket{ceph_daemon="osd.3"',
        'cephnode_osd_heartbeat_ping_median_seconds{ceph_daemon="osd.3",interface="back"}',
        "cephnode_osd_op_latency_quantile_seconds{",
        "cephnode_osd_host_op_latency_quantile_seconds{",
        'cephnode_osd_laggy_pgs{ceph_daemon="osd.2",role="replica",state="laggy"} 3.0',
    ):
        assert needle in full_exposition


def test_full_exposition_passes_promtool(full_exposition: str) -> None:
    promtool_check_metrics(full_exposition)


def test_dump_is_bounded_in_series(dump: str) -> None:
    series = [line for line in dump.splitlines() if line and not line.startswith("#")]
    assert 40 < len(series) < 600
