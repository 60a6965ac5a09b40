"""Checks fail closed and bad settings stop the start: unreadable or nonsensical facts give
``unknown`` with the reason (never ``pass`` or ``skip``), a profile of the wrong shape and
a numeric flag out of range are exit 2 with one line (docs/limits.md)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
from cephnode_exporter.checks import CheckSpec, Finding, Status, load_all
from cephnode_exporter.checks.evaluate import CollectorFacts, evaluate
from cephnode_exporter.cli import build_parser, parse_args
from cephnode_exporter.profile import CheckSettings, Profile, ProfileError, load_profile

from tests.conftest import MakeTree, Tree, collect, run_cli, value
from tests.test_hardening_files import CPU, ONLY_CPU, cpu_node

ONLY_KERNEL = (
    "--no-collector.cpuidle",
    "--no-collector.cpufreq",
    "--no-collector.iommu",
    "--no-collector.nvme",
    "--no-collector.net",
    "--no-collector.osd",
)


def report(tree: Tree, *extra: str) -> tuple[int, dict[str, dict], str]:
    """``check --format json``: exit code, results by check (one subject each), stderr."""
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    results = {r["check"]: r for r in json.loads(proc.stdout)["results"]}
    return proc.returncode, results, proc.stderr


# --- a way for a check to say "cannot judge" --------------------------------------------


def test_a_finding_that_cannot_judge_is_unknown_with_its_reason() -> None:
    def judge(facts: object, params: dict) -> list[Finding]:
        return [
            Finding.cannot_judge("a", "input unreadable: EIO", "x"),
            Finding("b", None, "does not apply", "x"),
            Finding("c", False, "fine", "x"),
        ]

    spec = CheckSpec("t.check", "t", judge)
    profile = Profile("t", "t", {"t.check": CheckSettings(enabled=True, severity=Status.FAIL)})
    results = evaluate(profile, {"t.check": spec}, {"t": CollectorFacts(True, facts=object())})
    got = {r.subject: (r.status, r.observed) for r in results}
    assert got == {
        "a": (Status.UNKNOWN, "input unreadable: EIO"),
        "b": (Status.SKIP, "does not apply"),
        "c": (Status.PASS, "fine"),
    }
    with pytest.raises(ValueError):
        Finding("d", True, "x", "x", unknown=True)  # unknown and deviating cannot both hold


# --- the CPU checks -------------------------------------------------------------------


def test_an_empty_cpu_list_makes_the_cpu_checks_unknown(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node(), faults={f"{CPU}/online": "empty"})
    code, results, _ = report(tree, *ONLY_CPU)
    for check in ("cpu.cstates", "cpu.governor"):
        assert results[check]["status"] == "unknown", results[check]
        assert "online: empty" in results[check]["observed"]
    assert code == 0  # unknown is not a failure: the exit code stays 0/1 for judged checks
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_success", collector="cpuidle") == 0
    assert value(result, "cephnode_cpu_scaling_online_cpus") is None  # not "0 CPUs"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        # the deep state's disable flag of one CPU: it may be enabled there
        (f"{CPU}/cpu3/cpuidle/state2/disable", "cpu3: C2: disable flag unreadable"),
        # the deep state's exit latency of one CPU: the state is not even known there
        (f"{CPU}/cpu1/cpuidle/state2/latency", "cpu1: "),
    ],
)
def test_a_clean_looking_node_with_unreadable_idle_states_is_unknown(
    make_tree: MakeTree, fault: str, reason: str
) -> None:
    tree = make_tree(cpu_node("epyc9454p-tuned"), faults={fault: "eio"})
    _, results, _ = report(tree, *ONLY_CPU)
    cstates = results["cpu.cstates"]
    assert cstates["status"] == "unknown", cstates
    assert "idle states of 1 CPUs unreadable" in cstates["observed"]
    assert reason in cstates["observed"]
    # A deep state seen enabled on the other CPUs still fails: unknown never hides that.
    tree = make_tree(cpu_node("epyc9454p-detuned"), faults={fault: "eio"})
    code, results, _ = report(tree, *ONLY_CPU)
    assert results["cpu.cstates"]["status"] == "fail"
    assert "enabled on 3/4 CPUs" in results["cpu.cstates"]["observed"]
    assert code == 1


def test_an_unreadable_governor_is_unknown_not_a_pass(make_tree: MakeTree) -> None:
    tree = make_tree(
        cpu_node("epyc9454p-tuned"), faults={f"{CPU}/cpufreq/policy2/scaling_governor": "eio"}
    )
    _, results, _ = report(tree, *ONLY_CPU)
    governor = results["cpu.governor"]
    assert governor["status"] == "unknown", governor
    assert "performance on 3/4 CPUs" in governor["observed"]
    assert "the scaling governor of 1 CPUs unreadable (cpu2:" in governor["observed"]


def test_an_empty_governor_is_a_read_error(make_tree: MakeTree) -> None:
    tree = make_tree(
        cpu_node("epyc9454p-tuned"), faults={f"{CPU}/cpufreq/policy1/scaling_governor": "empty"}
    )
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpufreq") == 1
    assert value(result, "cephnode_cpu_scaling_governor_cpus", governor="") is None
    assert value(result, "cephnode_cpu_scaling_governor_cpus", governor="performance") == 3


def _lose_cpuidle(cpu0: Path, how: str) -> None:
    if how == "missing":
        (cpu0 / "cpuidle").rename(cpu0 / "cpuidle.x")
    elif how == "link to /":
        (cpu0 / "cpuidle").rename(cpu0 / "cpuidle.x")
        (cpu0 / "cpuidle").symlink_to("/")
    else:  # its deepest state directory
        shutil.rmtree(cpu0 / "cpuidle" / "state2")


@pytest.mark.parametrize("how", ["missing", "link to /", "last state missing"])
def test_an_online_cpu_that_lost_its_idle_states_is_unknown_not_a_pass(
    make_tree: MakeTree, how: str
) -> None:
    """The cpuidle driver registers every CPU it covers (cpuidle_register()), with the
    same states: an online CPU without its directory, or with fewer states, hides what
    it would show (here the only CPU with C2 enabled), so the node cannot pass."""
    tree = make_tree(cpu_node("epyc9454p-tuned"))
    cpu0 = tree.root / CPU / "cpu0"
    (cpu0 / "cpuidle/state2/disable").write_text("0\n")
    _lose_cpuidle(cpu0, how)
    _, results, _ = report(tree, *ONLY_CPU)
    cstates = results["cpu.cstates"]
    assert cstates["status"] == "unknown", cstates
    assert "idle states of 1 CPUs unreadable (cpu0: " in cstates["observed"]
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 1


def test_an_online_cpu_without_its_cpufreq_directory_is_unknown_not_a_pass(
    make_tree: MakeTree,
) -> None:
    """cpufreq adds a policy for every CPU its one driver drives: an online CPU whose
    ``cpufreq`` link is gone (here the only CPU on powersave) is unread, not a CPU
    without cpufreq, and the governor check cannot pass on the others."""
    tree = make_tree(cpu_node("epyc9454p-tuned"))
    (tree.root / CPU / "cpufreq/policy0/scaling_governor").write_text("powersave\n")
    (tree.root / CPU / "cpu0/cpufreq").unlink()
    _, results, _ = report(tree, *ONLY_CPU)
    governor = results["cpu.governor"]
    assert governor["status"] == "unknown", governor
    assert "performance on 3/4 CPUs" in governor["observed"]
    assert (
        "cpu0: " in governor["observed"]
        and "other online CPUs have cpufreq" in (governor["observed"])
    )
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpufreq") == 1


def test_a_node_without_cpufreq_or_a_cpuidle_driver_is_still_skipped(make_tree: MakeTree) -> None:
    """No CPU with cpufreq, or no cpuidle driver, is a node without them (a VM): the
    checks do not apply, and nothing is a read error."""
    desc = cpu_node("epyc9454p-tuned")
    desc.pop("cpufreq")
    desc["cpuidle"]["driver"] = "none"
    tree = make_tree(desc)
    _, results, _ = report(tree, *ONLY_CPU)
    assert results["cpu.governor"]["status"] == "skip", results["cpu.governor"]
    assert results["cpu.cstates"]["status"] == "skip", results["cpu.cstates"]
    result = collect([*tree.flags, *ONLY_CPU])
    for collector in ("cpufreq", "cpuidle"):
        assert value(result, "cephnode_scrape_collector_read_errors", collector=collector) == 0


# --- sysctls --------------------------------------------------------------------------


def test_a_hex_sysctl_is_unknown_and_logged(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node("epyc9454p-tuned"))
    (tree.proc / "sys/net/core/somaxconn").write_text("0x10\n")
    _, results, stderr = report(tree, *ONLY_KERNEL)
    r = results["sysctl.net.core.somaxconn"]
    assert r["status"] == "unknown", r
    assert "not decimal integers: '0x10'" in r["observed"]
    # the log names the file, and the metric counts it
    assert "collector skipped unreadable items" in stderr and "somaxconn" in stderr
    result = collect([*tree.flags, *ONLY_KERNEL])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == 1


def test_a_string_sysctl_stays_a_string(make_tree: MakeTree, tmp_path: Path) -> None:
    """Only the sysctls the profile compares as numbers must read as numbers."""
    tree = make_tree(cpu_node("epyc9454p-tuned"))
    (tree.proc / "sys/net/ipv4/tcp_congestion_control").write_text("0x10\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "checks:\n  sysctl.net.ipv4.tcp_congestion_control: {value: bbr, compare: equal}\n"
        "  sysctl.net.core.somaxconn: {value: 1_000}\n"
    )
    (tree.proc / "sys/net/core/somaxconn").write_text("1_000\n")  # int() takes it; no kernel
    _, results, _ = report(tree, *ONLY_KERNEL, f"--profile={profile}")
    assert results["sysctl.net.ipv4.tcp_congestion_control"]["status"] == "fail"
    assert results["sysctl.net.core.somaxconn"]["status"] == "unknown"


# --- profiles -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ("checks:\n  cpu.governor: {allowed: [[performance]]}\n", "checks.cpu.governor.allowed"),
        ("checks:\n  tuned.profile: {allowed: [1]}\n", "checks.tuned.profile.allowed"),
        ("checks:\n  nvme.scheduler: {allowed: [{a: b}]}\n", "checks.nvme.scheduler.allowed"),
        (
            "checks:\n  osd.debug_levels: {subsystems: [osd, [ms]]}\n",
            "checks.osd.debug_levels.subsystems",
        ),
        ("checks:\n  cpu.governor: {allowed: []}\n", "checks.cpu.governor"),
        ("checks:\n  cpu.cstates: {max_exit_latency_us: -1}\n", "checks.cpu.cstates"),
        ("name: [a]\n", "name"),
    ],
)
def test_a_profile_of_the_wrong_shape_is_refused_at_load(
    tmp_path: Path, content: str, key: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(content)
    with pytest.raises(ProfileError, match=key.replace(".", r"\.")) as caught:
        load_profile(str(path), load_all())
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_wrongly_typed_profile_exits_2_with_one_line(
    tmp_path: Path, node_trees: dict[str, Tree], command: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("checks:\n  cpu.governor: {allowed: [[performance]]}\n")
    extra = ["--web.listen-address=127.0.0.1:0"] if command == "serve" else []
    proc = run_cli(command, *node_trees["epyc9454p-detuned"].flags, *extra, f"--profile={path}")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "checks.cpu.governor.allowed: must be of type list[str]" in lines[0]


@pytest.mark.parametrize("depth", [40, 5000])
def test_a_deeply_nested_profile_exits_2_with_one_line(
    tmp_path: Path, node_trees: dict[str, Tree], depth: int
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("checks:\n  cpu.governor:\n    allowed: " + "[" * depth + "]" * depth + "\n")
    proc = run_cli("check", *node_trees["epyc9454p-tuned"].flags, f"--profile={path}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "invalid profile" in lines[0] and "nest" in lines[0] and str(path) in lines[0]
    assert proc.stdout == ""


# --- numeric flags --------------------------------------------------------------------


def _numeric_flags() -> list[tuple[str, str]]:
    """(command, option) of every flag whose value is a number, found from the parser."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for command, sub in subparsers.choices.items():
        for action in sub._actions:
            if not action.option_strings or action.type is None:
                continue
            try:
                sample = action.type("1")
            except (argparse.ArgumentTypeError, ValueError):
                sample = action.type("60")  # a range that starts above 1
            if isinstance(sample, int | float):
                found.append((command, action.option_strings[0]))
    return found


def test_every_numeric_flag_refuses_non_finite_and_negative_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every flag whose value is a number, found from the parser (a flag added later is
    covered too), refuses NaN, infinities and negative numbers as a usage error (exit 2)."""
    flags = _numeric_flags()
    expected = {
        "--collector.osd.timeout",
        "--collector.timeout",
        "--scrape.timeout",
        "--web.max-connections",
        "--collector.kprofile.frequency",
    }
    assert expected <= {flag for _, flag in flags}
    accepted = []
    for command, flag in flags:
        for bad in ("nan", "NaN", "inf", "-inf", "1e400", "-1"):
            try:
                parse_args([command, f"{flag}={bad}"])
            except SystemExit as exc:
                if exc.code == 2 and flag in capsys.readouterr().err:
                    continue
            accepted.append(f"{command} {flag}={bad}")
    assert accepted == []


@pytest.mark.parametrize("bad", ["nan", "-1", "0"])
def test_the_osd_timeout_is_refused_at_start(node_trees: dict[str, Tree], bad: str) -> None:
    proc = run_cli("dump", *node_trees["epyc9454p-tuned"].flags, f"--collector.osd.timeout={bad}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert "--collector.osd.timeout: must be in [0.01, 3600]" in lines[-1]
    assert proc.stdout == ""


def test_web_max_connections_has_an_upper_bound(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["serve", "--web.max-connections=1000000"])
    assert "--web.max-connections" in capsys.readouterr().err
