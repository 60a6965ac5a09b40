"""``cpu.governor`` on capped clocks: a ``performance`` node whose CPUs may not reach their
full clock (scaling_max_freq below cpuinfo_max_freq, boost off) must not pass.

Documentation/admin-guide/pm/cpufreq.rst: scaling_max_freq is the policy's limit after
every request (user, firmware _PPC, thermal); intel_pstate.rst: no_turbo lowers that
limit, not cpuinfo_max_freq.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.checks import Status, load_all
from cephnode_exporter.checks.base import Result
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.hostfs import HostFS
from cephnode_exporter.hostfs.cpufreq import read_cpufreq
from cephnode_exporter.profile import ProfileError, load_profile

from tests.conftest import MakeTree, Tree, collect, value
from tests.fixtures.sysfsgen import load_node

CHECK = "cpu.governor"
POLICY = "sys/devices/system/cpu/cpufreq/policy{}/{}"


def governor(tree: Tree, *extra: str) -> Result:
    (result,) = [r for r in collect([*tree.flags, *extra]).results if r.check == CHECK]
    return result


# The sections the cpufreq collector reads; the rest of the node (idle states, NVMe, OSDs,
# interrupts) only makes the tree slower to build.
CPU_SECTIONS = ("meta", "seed", "uptime_s", "hostname", "cpus", "cpufreq")


def tuned(**cpufreq: Any) -> dict[str, Any]:
    """The tuned reference node's CPUs with its cpufreq section changed."""
    node = load_node("epyc9454p-tuned")
    desc = copy.deepcopy({k: v for k, v in node.items() if k in CPU_SECTIONS})
    desc["cpufreq"].update(cpufreq)
    return desc


def intel(**intel_pstate: Any) -> dict[str, Any]:
    """The tuned node on intel_pstate (active, HWP): turbo 3.90 GHz, base 2.60 GHz."""
    desc = tuned()
    desc["cpufreq"] = {
        "driver": "intel_pstate",
        "governor": "performance",
        "cpuinfo_min_freq": 800000,
        "cpuinfo_max_freq": 3900000,
        "base_frequency": 2600000,
        "intel_pstate": {"status": "active", **intel_pstate},
    }
    return desc


def profile(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "site.yaml"
    path.write_text(f"checks:\n  cpu.governor: {text}\n")
    return ["--profile", str(path)]


# ----------------------------------------------------------------------------- the reference


def test_the_tuned_reference_node_passes(node_trees: dict[str, Tree]) -> None:
    r = governor(node_trees["epyc9454p-tuned"])
    assert r.status == Status.PASS, r
    assert r.observed == (
        "performance on 96/96 CPUs; no clock cap (scaling_max_freq = cpuinfo_max_freq, "
        "3.80 GHz); boost on"
    )
    assert "boost on" in r.expected and "scaling_max_freq at cpuinfo_max_freq" in r.expected


def test_the_reader_gives_each_cpus_limits(node_trees: dict[str, Tree]) -> None:
    tree = node_trees["epyc9454p-tuned"]
    freq = read_cpufreq(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs)))
    assert {(p.scaling_max_khz, p.cpuinfo_max_khz) for p in freq.cpus.values()} == {
        (3800000, 3800000)
    }
    assert freq.boost is True and freq.boost_file == "cpufreq/boost"
    assert not freq.limits_unread and not freq.errors


# ----------------------------------------------------------------------------- capped clocks


def test_a_cap_on_some_cpus_fails_naming_the_cap(make_tree: MakeTree) -> None:
    """cpupower frequency-set -u 2GHz on one socket's half, as a power-capping daemon
    or a BMC limit through ACPI _PPC leaves it: still the performance governor."""
    tree = make_tree(tuned(overrides=[{"cpus": "0-47", "scaling_max_freq": 2000000}]))
    r = governor(tree)
    assert r.status == Status.FAIL, r
    assert "performance on 96/96 CPUs" in r.observed
    assert "clocks capped on 48/96 CPUs (scaling_max_freq 2.00 GHz of 3.80 GHz on cpu0-47)" in (
        r.observed
    )
    assert "cpupower frequency-set -u 3800000" in r.hint
    assert "cpupower frequency-set -g" not in r.hint  # the governor is fine
    assert value(collect(tree.flags), "cephnode_tuning_check_failed", check=CHECK, subject="") == 1


def test_several_caps_are_named_largest_group_first(make_tree: MakeTree) -> None:
    tree = make_tree(
        tuned(
            overrides=[
                {"cpus": "0-7", "scaling_max_freq": 2200000},
                {"cpus": "48-79", "scaling_max_freq": 1500000},
            ]
        )
    )
    r = governor(tree)
    assert r.status == Status.FAIL, r
    assert (
        "clocks capped on 40/96 CPUs (scaling_max_freq 1.50 GHz of 3.80 GHz on cpu48-79; "
        "2.20 GHz of 3.80 GHz on cpu0-7)"
    ) in r.observed


def test_a_cap_and_a_governor_both_show(make_tree: MakeTree) -> None:
    desc = tuned(
        overrides=[{"cpus": "90-95", "governor": "powersave", "scaling_max_freq": 1500000}]
    )
    r = governor(make_tree(desc))
    assert r.status == Status.FAIL, r
    assert "powersave on 6/96 CPUs" in r.observed and "capped on 6/96 CPUs" in r.observed
    assert "cpupower frequency-set -g performance" in r.hint and "-u 3800000" in r.hint


def test_a_cap_set_between_scrapes_shows_in_the_next(make_tree: MakeTree) -> None:
    """The limits are read on every scrape through the kept files: a daemon that caps
    the clock at run time is seen at once, not only by a fresh exporter."""
    tree = make_tree(tuned())
    scraper = build_scraper(parse_args(["dump", *tree.flags]))
    try:
        for _ in range(2):
            first = [r for r in scraper.collect(10.0).results if r.check == CHECK]
            assert first[0].status == Status.PASS
        (tree.root / POLICY.format(17, "scaling_max_freq")).write_text("2750000\n")
        (after,) = [r for r in scraper.collect(10.0).results if r.check == CHECK]
    finally:
        scraper.close()
    assert after.status == Status.FAIL, after
    assert "2.75 GHz of 3.80 GHz on cpu17" in after.observed


# ----------------------------------------------------------------------------- boost


def test_boost_off_fails_by_default(make_tree: MakeTree) -> None:
    r = governor(make_tree(tuned(boost=0)))
    assert r.status == Status.FAIL, r
    assert r.observed.endswith("boost off (cpufreq/boost = 0)")
    assert "echo 1 > /sys/devices/system/cpu/cpufreq/boost" in r.hint
    assert "allow_boost_off: true" in r.hint


def test_boost_off_passes_when_the_profile_accepts_it(make_tree: MakeTree, tmp_path: Path) -> None:
    r = governor(make_tree(tuned(boost=0)), *profile(tmp_path, "{allow_boost_off: true}"))
    assert r.status == Status.PASS, r
    assert "boost off (cpufreq/boost = 0), accepted by the profile" in r.observed
    assert r.expected.endswith("boost on or off")


def test_accepting_boost_off_does_not_accept_a_cap(make_tree: MakeTree, tmp_path: Path) -> None:
    desc = tuned(boost=0, scaling_max_freq=2200000)
    r = governor(make_tree(desc), *profile(tmp_path, "{allow_boost_off: true}"))
    assert r.status == Status.FAIL, r
    assert "clocks capped on 96/96 CPUs" in r.observed


def test_intel_turbo_off_is_boost_off_not_a_cap(make_tree: MakeTree, tmp_path: Path) -> None:
    """no_turbo lowers scaling_max_freq to the base clock and leaves cpuinfo_max_freq at
    the turbo clock (intel_pstate.rst): judged as boost off, the cap against
    base_frequency."""
    tree = make_tree(intel(no_turbo=1))
    r = governor(tree)
    assert r.status == Status.FAIL, r
    assert r.observed == (
        "performance on 96/96 CPUs; no clock cap below the base clock (base_frequency "
        "2.60 GHz); boost off (intel_pstate/no_turbo = 1)"
    )
    assert "echo 0 > /sys/devices/system/cpu/intel_pstate/no_turbo" in r.hint
    accepted = governor(tree, *profile(tmp_path, "{allow_boost_off: true}"))
    assert accepted.status == Status.PASS, accepted
    on = governor(make_tree(intel(no_turbo=0)))
    assert on.status == Status.PASS, on
    assert "no clock cap (scaling_max_freq = cpuinfo_max_freq, 3.90 GHz); boost on" in on.observed


def test_intel_turbo_off_with_a_cap_below_base_fails(make_tree: MakeTree, tmp_path: Path) -> None:
    desc = intel(no_turbo=1)
    desc["cpufreq"]["overrides"] = [{"cpus": "0-3", "scaling_max_freq": 1800000}]
    r = governor(make_tree(desc), *profile(tmp_path, "{allow_boost_off: true}"))
    assert r.status == Status.FAIL, r
    assert "clocks capped on 4/96 CPUs (scaling_max_freq 1.80 GHz of 2.60 GHz on cpu0-3)" in (
        r.observed
    )


def test_intel_turbo_off_without_base_frequency_is_unknown(
    make_tree: MakeTree, tmp_path: Path
) -> None:
    """Without HWP there is no base_frequency: a limit below cpuinfo_max_freq may be
    no_turbo's own or a cap, and nothing tells which."""
    faults = {POLICY.format(cpu, "base_frequency"): "missing" for cpu in range(96)}
    tree = make_tree(intel(no_turbo=1), faults=faults)
    r = governor(tree, *profile(tmp_path, "{allow_boost_off: true}"))
    assert r.status == Status.UNKNOWN, r
    assert "no base_frequency (HWP) tells a cap from it" in r.observed


# ----------------------------------------------------------------------------- unreadable


@pytest.mark.parametrize(
    ("attr", "kind"),
    [
        ("scaling_max_freq", "eio"),
        ("scaling_max_freq", "garbage"),
        ("cpuinfo_max_freq", "missing"),
        ("cpuinfo_max_freq", "empty"),
    ],
)
def test_an_unreadable_limit_is_unknown_not_pass(make_tree: MakeTree, attr: str, kind: str) -> None:
    """Both limits are attributes of every policy (cpufreq.c cpufreq_attrs): missing is
    unreadable too, never "no cap"."""
    tree = make_tree(tuned(), faults={POLICY.format(5, attr): kind})
    result = collect(tree.flags)
    (r,) = [r for r in result.results if r.check == CHECK]
    assert r.status == Status.UNKNOWN, r
    assert "the clock limits of 1 CPUs unreadable (cpu5: " in r.observed
    assert f"cpu5/cpufreq/{attr}" in r.observed
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpufreq") == 1
    assert value(result, "cephnode_scrape_collector_success", collector="cpufreq") == 1


def test_an_unreadable_limit_does_not_hide_a_cap(make_tree: MakeTree) -> None:
    desc = tuned(overrides=[{"cpus": "8", "scaling_max_freq": 3000000}])
    tree = make_tree(desc, faults={POLICY.format(5, "scaling_max_freq"): "eio"})
    r = governor(tree)
    assert r.status == Status.FAIL, r
    assert "clocks capped on 1/96 CPUs" in r.observed and "cpu5:" in r.observed


def test_an_unreadable_boost_file_is_unknown_unless_either_state_passes(
    make_tree: MakeTree, tmp_path: Path
) -> None:
    tree = make_tree(tuned(), faults={"sys/devices/system/cpu/cpufreq/boost": "eio"})
    r = governor(tree)
    assert r.status == Status.UNKNOWN, r
    assert "boost unreadable:" in r.observed and "cpufreq/boost" in r.observed
    accepted = governor(tree, *profile(tmp_path, "{allow_boost_off: true}"))
    assert accepted.status == Status.PASS, accepted


def test_a_driver_without_boost_control_is_not_judged_on_boost(make_tree: MakeTree) -> None:
    desc = tuned()
    desc["cpufreq"].pop("boost")
    r = governor(make_tree(desc))
    assert r.status == Status.PASS, r
    assert r.observed.endswith("no boost control in sysfs")


# ----------------------------------------------------------------------------- the profile


def test_allow_boost_off_defaults_to_false() -> None:
    assert load_profile(None, load_all()).checks[CHECK].params["allow_boost_off"] is False


@pytest.mark.parametrize("bad", ["1", '"yes"', "[true]", "null"])
def test_allow_boost_off_must_be_a_boolean(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(f"checks:\n  cpu.governor: {{allow_boost_off: {bad}}}\n")
    where = re.escape("checks.cpu.governor.allow_boost_off: must be of type")
    with pytest.raises(ProfileError, match=where):
        load_profile(str(path), load_all())


# ------------------------------------------------------------- intel_pstate's global limit


def test_intel_max_perf_pct_caps_every_cpu(make_tree: MakeTree) -> None:
    """max_perf_pct holds every CPU below it while each policy's scaling_max_freq stays at
    the turbo clock (intel_pstate.rst, "User Space Interface in sysfs")."""
    tree = make_tree(intel(max_perf_pct=50, no_turbo=0))
    r = governor(tree)
    assert r.status == Status.FAIL, r
    assert r.observed == (
        "performance on 96/96 CPUs; clocks capped on every CPU at 50% of the highest turbo "
        "P-state (about 1.95 GHz) by intel_pstate/max_perf_pct = 50; boost on"
    )
    assert "echo 100 > /sys/devices/system/cpu/intel_pstate/max_perf_pct" in r.hint
    assert "cpupower frequency-set -u" not in r.hint  # no per-CPU cap to lift
    collection = collect(tree.flags)
    assert value(collection, "cephnode_cpu_intel_pstate_max_perf_ratio") == 0.5
    assert value(collection, "cephnode_cpu_intel_pstate_info", status="active") == 1

    full = make_tree(intel(max_perf_pct=100))
    assert governor(full).status == Status.PASS
    assert value(collect(full.flags), "cephnode_cpu_intel_pstate_max_perf_ratio") == 1


def test_intel_max_perf_pct_and_a_per_cpu_cap_both_show(make_tree: MakeTree) -> None:
    desc = intel(max_perf_pct=80)
    desc["cpufreq"]["overrides"] = [{"cpus": "0-3", "scaling_max_freq": 2000000}]
    r = governor(make_tree(desc))
    assert r.status == Status.FAIL, r
    assert "by intel_pstate/max_perf_pct = 80; clocks capped on 4/96 CPUs" in r.observed
    assert "max_perf_pct" in r.hint and "cpupower frequency-set -u 3900000" in r.hint


@pytest.mark.parametrize("text", ["", "abc", "101", "-5", "1000"])
def test_an_unreadable_max_perf_pct_is_unknown(make_tree: MakeTree, text: str) -> None:
    tree = make_tree(intel())
    (tree.sys / "devices/system/cpu/intel_pstate/max_perf_pct").write_text(f"{text}\n")
    r = governor(tree)
    assert r.status == Status.UNKNOWN, r
    assert "intel_pstate/max_perf_pct unreadable: " in r.observed
    assert value(collect(tree.flags), "cephnode_cpu_intel_pstate_max_perf_ratio") is None


def test_intel_pstate_off_is_not_judged_on_max_perf_pct(make_tree: MakeTree) -> None:
    """In mode off another driver runs the CPUs; intel_pstate's limits do not apply."""
    tree = make_tree(tuned())
    pstate = tree.sys / "devices/system/cpu/intel_pstate"
    pstate.mkdir()
    (pstate / "status").write_text("off\n")
    (pstate / "max_perf_pct").write_text("40\n")
    r = governor(tree)
    assert r.status == Status.PASS, r
    collection = collect(tree.flags)
    assert value(collection, "cephnode_cpu_intel_pstate_info", status="off") == 1
    assert value(collection, "cephnode_cpu_intel_pstate_max_perf_ratio") is None
