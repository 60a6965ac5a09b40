"""Collectors against the reference node fixtures.

Two kinds of assertion: the exact exposition of each collector on each node (golden
files under tests/golden/, rewritten by `make generate` and reviewed as a diff), and values
recomputed here straight from the fixture files, so a golden file cannot bless a wrong sum.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cephnode_exporter.cli import build_scraper, parse_args

from tests.conftest import (
    GOLDEN,
    NODES,
    MakeTree,
    Tree,
    collect,
    collector_exposition,
    compare_golden,
    value,
)


@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("collector", ["cpuidle", "cpufreq"])
def test_collector_exposition(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str, collector: str
) -> None:
    result = collect(node_trees[node].flags)
    compare_golden(
        request,
        GOLDEN / node / f"{collector}.prom",
        collector_exposition(result, collector, clean=False),
    )


def _files(tree: Tree, pattern: str) -> list[Path]:
    found = sorted(tree.sys.glob(pattern))
    assert found, pattern
    return found


def _state_dirs(tree: Tree, name: str) -> list[Path]:
    return [
        d
        for d in _files(tree, "devices/system/cpu/cpu*/cpuidle/state*")
        if (d / "name").read_text().strip() == name
    ]


@pytest.mark.parametrize("node", NODES)
def test_cpuidle_sums_match_the_files(node_trees: dict[str, Tree], node: str) -> None:
    tree = node_trees[node]
    result = collect(tree.flags)
    for state in ("POLL", "C1", "C2"):
        dirs = _state_dirs(tree, state)
        assert len(dirs) == 96
        time_us = sum(int((d / "time").read_text()) for d in dirs)
        usage = sum(int((d / "usage").read_text()) for d in dirs)
        enabled = sum(1 for d in dirs if (d / "disable").read_text().strip() == "0")
        latency = int((dirs[0] / "latency").read_text())
        got = value(result, "cephnode_cpu_idle_state_time_seconds_total", state=state)
        assert got == pytest.approx(time_us / 1e6)
        assert value(result, "cephnode_cpu_idle_state_entries_total", state=state) == usage
        assert value(result, "cephnode_cpu_idle_state_enabled_cpus", state=state) == enabled
        assert value(result, "cephnode_cpu_idle_state_exit_latency_seconds", state=state) == (
            pytest.approx(latency / 1e6)
        )
        wakeup = value(result, "cephnode_cpu_idle_state_wakeup_seconds_total", state=state)
        assert wakeup == pytest.approx(usage * latency / 1e6)
    assert value(result, "cephnode_cpu_idle_cpus") == 96


def test_cpuidle_tuned_and_detuned_differ_where_they_should(node_trees: dict[str, Tree]) -> None:
    tuned = collect(node_trees["epyc9454p-tuned"].flags)
    detuned = collect(node_trees["epyc9454p-detuned"].flags)
    assert value(tuned, "cephnode_cpu_idle_state_enabled_cpus", state="C2") == 0
    assert value(detuned, "cephnode_cpu_idle_state_enabled_cpus", state="C2") == 96
    assert value(tuned, "cephnode_cpu_idle_driver_info", driver="acpi_idle", governor="menu") == 1


def test_cpuidle_per_cpu_mode(node_trees: dict[str, Tree]) -> None:
    tree = node_trees["epyc9454p-detuned"]
    result = collect([*tree.flags, "--collector.cpuidle.per-cpu"])
    c2_cpu5 = tree.sys / "devices/system/cpu/cpu5/cpuidle/state2"
    got = value(result, "cephnode_cpu_idle_state_time_seconds_total", state="C2", cpu="5")
    assert got == pytest.approx(int((c2_cpu5 / "time").read_text()) / 1e6)
    assert value(result, "cephnode_cpu_idle_state_enabled_cpus", state="C2", cpu="5") == 1
    # no summed series in per-CPU mode
    assert value(result, "cephnode_cpu_idle_state_time_seconds_total", state="C2") is None
    per_cpu = [
        s
        for f in result.families()
        if f.name == "cephnode_cpu_idle_state_entries"
        for s in f.samples
        if s.name.endswith("_total")
    ]
    assert len(per_cpu) == 96 * 3


def test_cpuidle_skips_a_sum_with_an_unreadable_cpu(make_tree: MakeTree) -> None:
    tree = make_tree(
        "epyc9454p-detuned", faults={"sys/devices/system/cpu/cpu3/cpuidle/state2/time": "eio"}
    )
    result = collect(tree.flags)
    assert value(result, "cephnode_scrape_collector_success", collector="cpuidle") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 1
    # the C2 time sum would be partial: it is left out; other series stay
    assert value(result, "cephnode_cpu_idle_state_time_seconds_total", state="C2") is None
    assert value(result, "cephnode_cpu_idle_state_time_seconds_total", state="C1") is not None
    assert value(result, "cephnode_cpu_idle_state_entries_total", state="C2") is not None


@pytest.mark.parametrize(
    ("rel", "kind"),
    [
        ("sys/devices/system/cpu/online", "eio"),
        ("sys/devices/system/cpu/online", "garbage"),
        ("sys/devices/system/cpu/online", "missing"),
    ],
)
def test_cpuidle_fails_cleanly_without_a_cpu_list(make_tree: MakeTree, rel: str, kind: str) -> None:
    tree = make_tree("epyc9454p-detuned", faults={rel: kind})
    result = collect(tree.flags)
    assert value(result, "cephnode_scrape_collector_success", collector="cpuidle") == 0
    assert value(result, "cephnode_scrape_collector_success", collector="cpufreq") == 0


def test_cpuidle_kernel_params(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned")
    (tree.proc / "cmdline").write_text("ro quiet processor.max_cstate=1 idle=halt\n")
    result = collect(tree.flags)
    assert (
        value(
            result,
            "cephnode_cpu_idle_kernel_params_info",
            processor_max_cstate="1",
            intel_idle_max_cstate="",
            idle="halt",
            cpuidle_off="",
            cpuidle_governor="",
        )
        == 1
    )


def test_cpuidle_pm_qos_when_readable(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned")
    dev = tree.rootfs / "dev"
    dev.mkdir(exist_ok=True)
    (dev / "cpu_dma_latency").write_bytes((0).to_bytes(4, "little"))
    result = collect(tree.flags)
    assert value(result, "cephnode_cpu_idle_pm_qos_latency_limit_seconds") == 0


def test_cpufreq_counts(node_trees: dict[str, Tree]) -> None:
    tree = node_trees["epyc9454p-detuned"]
    governors = [
        p.read_text().strip()
        for p in _files(tree, "devices/system/cpu/cpu*/cpufreq/scaling_governor")
    ]
    result = collect(tree.flags)
    for governor in set(governors):
        got = value(result, "cephnode_cpu_scaling_governor_cpus", governor=governor)
        assert got == governors.count(governor)
    assert value(result, "cephnode_cpu_scaling_driver_cpus", driver="acpi-cpufreq") == 96
    assert value(result, "cephnode_cpu_scaling_online_cpus") == 96
    assert value(result, "cephnode_cpu_boost_enabled") == 1


def test_real_host_tree() -> None:
    """The machine the tests run on: every collector succeeds and the numbers are sane."""
    import os

    result = collect([])
    for name in ("cpuidle", "cpufreq"):
        assert value(result, "cephnode_scrape_collector_success", collector=name) == 1
    cpus = value(result, "cephnode_cpu_idle_cpus")
    if os.path.isdir("/sys/devices/system/cpu/cpuidle") and cpus:
        assert 1 <= cpus <= (os.cpu_count() or 1)
        enabled = [
            s.value
            for f in result.families()
            if f.name == "cephnode_cpu_idle_state_enabled_cpus"
            for s in f.samples
        ]
        assert enabled and all(0 <= v <= cpus for v in enabled)
    # os.cpu_count() is sysconf(_SC_NPROCESSORS_ONLN): the same "online" list
    assert value(result, "cephnode_cpu_scaling_online_cpus") == os.cpu_count()


def test_cpuidle_on_a_kernel_without_above_below_rejected(make_tree: MakeTree) -> None:
    """Kernels before 5.6 have no above/below, before 5.10 no rejected: not an error."""
    tree = make_tree("epyc9454p-detuned")
    for name in ("above", "below", "rejected"):
        for path in tree.sys.glob(f"devices/system/cpu/cpu*/cpuidle/state*/{name}"):
            path.unlink()
    scraper = build_scraper(parse_args(["dump", *tree.flags]))
    results = [scraper.collect(10) for _ in range(2)]  # the second runs on pruned file lists
    scraper.close()
    for result in results:
        assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 0
        assert value(result, "cephnode_cpu_idle_state_above_total", state="C2") is None
        assert value(result, "cephnode_cpu_idle_state_rejected_total", state="C2") is None
        assert value(result, "cephnode_cpu_idle_state_entries_total", state="C2") is not None
        assert value(result, "cephnode_cpu_idle_state_enabled_cpus", state="C2") == 96


def test_cpuidle_states_listed_twice_are_counted_once(make_tree: MakeTree) -> None:
    """drivers/cpuidle/sysfs.c names a CPU's states state0..N-1, each state once: a
    copied state directory or "state02" beside "state2" is left out, not exported as a
    repeated series (per-CPU) or a fifth CPU of four (summed), and is a read error on
    every scrape, also once the CPU's states are cached."""
    import shutil

    from cephnode_exporter.hostfs import HostFS
    from cephnode_exporter.hostfs.cpuidle import CPUIdleReader

    from tests.test_hardening_files import ONLY_CPU, cpu_node

    tree = make_tree(cpu_node("epyc9454p-detuned"))
    cpus = tree.sys / "devices/system/cpu"
    shutil.copytree(cpus / "cpu0/cpuidle/state2", cpus / "cpu0/cpuidle/state3")
    shutil.copytree(cpus / "cpu1/cpuidle/state2", cpus / "cpu1/cpuidle/state02")
    per_cpu = collect([*tree.flags, *ONLY_CPU, "--collector.cpuidle.per-cpu"])
    keys = [
        (s.name, tuple(sorted(s.labels.items())))
        for f in per_cpu.families()
        if f.name.startswith("cephnode_cpu_idle_state")
        for s in f.samples
    ]
    assert keys and len(keys) == len(set(keys))
    assert value(per_cpu, "cephnode_cpu_idle_state_enabled_cpus", state="C2", cpu="0") == 1
    summed = collect([*tree.flags, *ONLY_CPU])
    assert value(summed, "cephnode_cpu_idle_state_enabled_cpus", state="C2") == 4
    assert value(summed, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 2
    reader = CPUIdleReader(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs)))
    try:
        for _ in range(3):  # the first read, then the cached layout, read whole
            idle = reader.read()
            assert [len(s) for s in idle.cpus.values()] == [3, 3, 3, 3]
            assert len(idle.errors) == 2 and set(idle.unread) == {0, 1}
            assert "state3: state name 'C2' seen twice" in idle.unread[0]
            assert "state02: not a state directory name" in idle.unread[1]
    finally:
        reader.close()
