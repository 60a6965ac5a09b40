"""Work reused between scrapes when a collector's facts did not change.

A host collector marked ``reuse_unchanged`` hands on the last scrape's facts and
families when it reads equal facts; the checks then give the results they gave those
facts, and the encoder the text it wrote for those families (scrape.py,
checks/evaluate.py, exposition.py). What must hold: a changed file shows in the very
next scrape exactly as a fresh exporter shows it, and nothing is reused for facts that
changed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cephnode_exporter.checks.base import concrete
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors.base import REGISTRY
from cephnode_exporter.exposition import encode
from cephnode_exporter.scrape import Scraper
from prometheus_client.core import GaugeMetricFamily

from tests.conftest import MakeTree, Tree

CPU = "sys/devices/system/cpu"
# Host collectors whose facts are the node's settings and counters, all from files.
REUSING = {
    "cpufreq",
    "cpuhw",
    "cpuidle",
    "firmware",
    "iommu",
    "irq",
    "kernel",
    "net",
    "nvme",
    "thp",
}


def _body(collection: Collection) -> list[str]:
    """The exposition without the lines that differ between any two scrapes."""
    return [
        line
        for line in encode(collection.families()).decode().splitlines()
        if not line.startswith("cephnode_scrape_collector_duration_seconds{")
    ]


def _scraper(tree: Tree) -> Scraper:
    return build_scraper(parse_args(["dump", *tree.flags]))


def _fresh(tree: Tree) -> list[str]:
    scraper = _scraper(tree)
    try:
        return _body(scraper.collect(10.0))
    finally:
        scraper.close()


def test_the_host_collectors_reuse_and_the_ceph_ones_do_not() -> None:
    reusing = {name for name, cls in REGISTRY.items() if cls.reuse_unchanged}
    assert reusing == REUSING
    # An OSD's counters change every scrape; comparing them would cost and never pay.
    assert not {"osd", "pgs", "kprofile"} & reusing


def test_unchanged_facts_give_the_same_families_results_and_text(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    scraper = _scraper(tree)
    try:
        first = scraper.collect(10.0)
        text = encode(first.families())
        second = scraper.collect(10.0)
    finally:
        scraper.close()
    before = {o.name: o for o in first.outcomes}
    for outcome in second.outcomes:
        if outcome.name in REUSING:
            assert outcome.success, outcome.error
            assert outcome.facts is before[outcome.name].facts, outcome.name
            assert outcome.families is before[outcome.name].families, outcome.name
    # Every result of a check on a reused collector is the object of the last scrape.
    old = {(r.check, r.subject): r for r in first.results}
    judged = [r for r in second.results if r.status.value in ("fail", "warn")]
    assert judged, "the detuned node has failing checks"
    assert all(old[(r.check, r.subject)] is r for r in judged if not r.check.startswith("osd"))
    assert second.results == first.results
    # The encoder gives the text it wrote: the same bytes, durations apart.
    assert _body(second) == [
        line
        for line in text.decode().splitlines()
        if not line.startswith("cephnode_scrape_collector_duration_seconds{")
    ]


def _edit(path: Path, text: str) -> Callable[[Tree], None]:
    def apply(tree: Tree) -> None:
        (tree.root / path).write_text(text)

    return apply


# One settings change per reusing collector, each one a check or a label would show.
CHANGES = {
    "cpufreq governor": (f"{CPU}/cpu7/cpufreq/scaling_governor", "performance\n"),
    "cpuidle state disabled": (f"{CPU}/cpu3/cpuidle/state2/disable", "1\n"),
    "cpuidle counter": (f"{CPU}/cpu3/cpuidle/state2/usage", "999999999999\n"),
    "achieved frequency": (f"{CPU}/cpu5/cpufreq/scaling_cur_freq", "3700000\n"),
    "microcode": (f"{CPU}/cpu0/microcode/version", "0xa10113f\n"),
    "nvme scheduler": ("sys/block/nvme0n1/queue/scheduler", "none [mq-deadline]\n"),
    "nvme in flight": ("sys/block/nvme0n1/inflight", "       3        1\n"),
    "transparent huge pages": (
        "sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    ),
    "sysctl": ("proc/sys/net/core/somaxconn", "65535\n"),
    # A NIC vector (mlx5_comp46 of ens1f1np1): NVMe vectors are kernel-managed, fixed.
    "interrupt affinity": ("proc/irq/1224/effective_affinity_list", "95\n"),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_changed_file_shows_in_the_next_scrape_as_a_fresh_exporter_shows_it(
    make_tree: MakeTree, what: str
) -> None:
    tree = make_tree("epyc9454p-detuned")
    path, text = CHANGES[what]
    assert (tree.root / path).is_file(), path
    scraper = _scraper(tree)
    try:
        scraper.collect(10.0)
        before = _body(scraper.collect(10.0))  # the second one reuses
        _edit(Path(path), text)(tree)
        after = _body(scraper.collect(10.0))
    finally:
        scraper.close()
    assert after != before, f"{what}: the change did not show"
    assert after == _fresh(tree)


def test_a_collector_that_fails_and_recovers_is_rebuilt(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    scraper = _scraper(tree)
    governor = tree.root / CPU / "cpu7/cpufreq/scaling_governor"
    try:
        scraper.collect(10.0)
        governor.write_text("\x00garbage\n")
        bad = _body(scraper.collect(10.0))
        assert bad == _fresh(tree)
        governor.write_text("powersave\n")
        assert _body(scraper.collect(10.0)) == _fresh(tree)
    finally:
        scraper.close()


def test_the_encoder_writes_a_new_family_even_where_an_old_one_was() -> None:
    def family(value: float) -> GaugeMetricFamily:
        f = GaugeMetricFamily("cephnode_test_value", "A value.", labels=["k"])
        f.add_metric(["a"], value)
        return f

    one = family(1.0)
    assert b'cephnode_test_value{k="a"} 1.0' in encode([one])
    assert encode([one]) == encode([one])
    for value in (2.0, 3.0, 4.0):  # new objects, ids free to be reused
        assert f'cephnode_test_value{{k="a"}} {value}'.encode() in encode([family(value)])


def test_when_facts_change_the_families_that_did_not_are_kept(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    scraper = _scraper(tree)
    usage = tree.root / CPU / "cpu3/cpuidle/state2/usage"
    inflight = tree.sys / "block/nvme0n1/inflight"
    try:
        first = {o.name: o for o in scraper.collect(10.0).outcomes}
        usage.write_text(f"{int(usage.read_text()) + 5}\n")
        inflight.write_text("       4        2\n")
        second = {o.name: o for o in scraper.collect(10.0).outcomes}
        fresh = _fresh(tree)
        assert _body(scraper.collect(10.0)) == fresh
    finally:
        scraper.close()
    # The wake-up cost is entries times the state's exit latency: it moves with them.
    for name, moved in (
        ("cpuidle", {"cephnode_cpu_idle_state_entries", "cephnode_cpu_idle_state_wakeup_seconds"}),
        ("nvme", {"cephnode_nvme_inflight_requests"}),
    ):
        assert second[name].facts is not first[name].facts
        old = {f.name: f for f in first[name].families}
        new = {f.name: f for f in second[name].families}
        assert new.keys() == old.keys()
        assert {n for n in new if new[n] is not old[n]} == moved, name


def test_check_results_are_kept_only_for_reusing_collectors(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    scraper = _scraper(tree)
    try:
        scraper.collect(10.0)
        checks = {**concrete(scraper._specs), **scraper.profile.instances}
        kept = {checks[name].collector for name in scraper._checks_memo}
        judged = {checks[r.check].collector for r in scraper.collect(10.0).results}
    finally:
        scraper.close()
    assert kept and kept <= REUSING
    # The OSD collector's checks were judged (no socket: unknown or skipped), not kept:
    # its facts are new every scrape, and keeping them would only hold them longer.
    assert "osd" in judged and "osd" not in kept
