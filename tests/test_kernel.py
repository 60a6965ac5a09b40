"""The `kernel` collector and its checks: sysctl.<name>, tuned.profile, kernel.mitigations.

Layers: pure parsers on real kernel strings; the collector on both reference nodes
(exact values and a golden exposition); the checks through the real entry point
(`check --format json`); profile overrides, including the check family extension that
makes one `sysctl.<name>` check per profile entry; bad input; and this machine.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.checks import load_all, resolve
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors import REGISTRY
from cephnode_exporter.hostfs import HostFS, ParseError, ReadErrors
from cephnode_exporter.hostfs.kernel import (
    VulnState,
    classify_vulnerability,
    parse_active_profile,
    read_tuned,
    read_vulnerabilities,
)
from cephnode_exporter.hostfs.sysctl import parse_sysctl, read_sysctl, sysctl_path_parts
from cephnode_exporter.profile import ProfileError, load_profile

from tests.conftest import (
    GOLDEN,
    NODES,
    MakeTree,
    Tree,
    collect,
    collector_exposition,
    compare_golden,
    run_cli,
    samples,
    value,
)
from tests.fixtures.sysfsgen import load_node

KERNEL_CHECKS = ("kernel.mitigations", "tuned.profile")
IO500_SYSCTLS = (
    "net.core.netdev_max_backlog",
    "net.core.rmem_max",
    "net.core.somaxconn",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_wmem",
)
SOMAXCONN = "proc/sys/net/core/somaxconn"


def only_kernel() -> list[str]:
    """Flags that leave only the kernel collector on (fast, and blind to other checks)."""
    return [f"--no-collector.{name}" for name in sorted(REGISTRY) if name != "kernel"]


def small(node: str, **changes: Any) -> dict[str, Any]:
    """A reference node's kernel data on a 2-CPU topology: a tree of a few dozen files."""
    desc = copy.deepcopy(load_node(node))
    for section in ("cpuidle", "cpufreq"):
        desc.pop(section, None)
    desc["cpus"] = {"cores_per_socket": 2}
    desc.update(changes)
    return desc


def check_json(tree: Tree, *extra: str) -> tuple[int, dict[str, dict[str, str]]]:
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, {r["check"]: r for r in json.loads(proc.stdout)["results"]}


def sysctl_value(collection: Collection, name: str, index: int | None = None) -> float | None:
    """cephnode_sysctl_value{name=...} (conftest.value cannot take a label called name)."""
    labels = {"name": name} if index is None else {"name": name, "index": str(index)}
    return samples(collection).get(("cephnode_sysctl_value", frozenset(labels.items())))


def write_profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return str(path)


# --- parsers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ints", "normal"),
    [
        ("1\n", (1,), "1"),
        ("-1\n", (-1,), "-1"),
        # proc_dointvec separates vector elements with a tab (kernel/sysctl.c)
        ("4096\t131072\t6291456\n", (4096, 131072, 6291456), "4096 131072 6291456"),
        ("10240 87380 2147483647", (10240, 87380, 2147483647), "10240 87380 2147483647"),
        ("18446744073709551615\n", (18446744073709551615,), "18446744073709551615"),
        ("cubic\n", None, "cubic"),
        ("reno cubic bbr\n", None, "reno cubic bbr"),
        ("4096 abc\n", None, "4096 abc"),
        ("\n", None, ""),
    ],
)
def test_parse_sysctl(text: str, ints: tuple[int, ...] | None, normal: str) -> None:
    value = parse_sysctl(text)
    assert value.ints == ints
    assert value.text == normal


def test_parse_sysctl_rejects_control_characters() -> None:
    with pytest.raises(ParseError, match="control characters"):
        parse_sysctl("1\x002\n", "/proc/sys/x")


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("net.core.somaxconn", ["net", "core", "somaxconn"]),
        # sysctl.d(5): the first separator decides; with dots, a slash stands for a dot
        ("net.ipv4.conf.eth0/100.rp_filter", ["net", "ipv4", "conf", "eth0.100", "rp_filter"]),
        ("net/ipv4/conf/eth0.100/rp_filter", ["net", "ipv4", "conf", "eth0.100", "rp_filter"]),
        ("vm.swappiness", ["vm", "swappiness"]),
        ("kernel", ["kernel"]),
    ],
)
def test_sysctl_path_parts(name: str, parts: list[str]) -> None:
    assert sysctl_path_parts(name) == parts


@pytest.mark.parametrize(
    "name",
    ["", "net..core", "../etc/passwd", "/abs/path", "net.core.some thing", "net.", "a" * 300],
)
def test_sysctl_path_parts_rejects_bad_names(name: str) -> None:
    with pytest.raises(ValueError, match="bad sysctl name"):
        sysctl_path_parts(name)


@pytest.mark.parametrize(
    ("text", "state"),
    [
        # arch/x86/kernel/cpu/bugs.c and Documentation/ABI/testing/sysfs-devices-system-cpu
        ("Not affected", VulnState.NOT_AFFECTED),
        ("Mitigation: PTI", VulnState.MITIGATED),
        ("Mitigation: PTE Inversion; VMX: conditional cache flushes, SMT vulnerable", "mitigated"),
        (
            "Mitigation: Retpolines, IBPB: conditional, IBRS_FW, STIBP: always-on, RSB filling, "
            "PBRSB-eIBRS: Not affected",
            VulnState.MITIGATED,
        ),
        ("Mitigation: Clear CPU buffers; SMT vulnerable", VulnState.MITIGATED),
        ("Mitigation: Speculative Store Bypass disabled via prctl and seccomp", "mitigated"),
        ("KVM: Mitigation: Split huge pages", VulnState.MITIGATED),
        ("KVM: Mitigation: VMX disabled", VulnState.MITIGATED),
        ("Vulnerable", VulnState.VULNERABLE),
        ("Vulnerable: No microcode", VulnState.VULNERABLE),
        ("Vulnerable: Safe RET, no microcode", VulnState.VULNERABLE),
        ("Vulnerable; SMT vulnerable", VulnState.VULNERABLE),
        ("Vulnerable: Clear CPU buffers attempted, no microcode; SMT vulnerable", "vulnerable"),
        ("KVM: Vulnerable", VulnState.VULNERABLE),
        ("Processor vulnerable", VulnState.VULNERABLE),
        ("Unknown: Dependent on hypervisor status", VulnState.UNKNOWN),
        ("Unknown: No mitigations", VulnState.UNKNOWN),
        ("Vulnerabler", VulnState.UNKNOWN),
        ("mitigation: lowercase", VulnState.UNKNOWN),
        ("?garbage@value!", VulnState.UNKNOWN),
    ],
)
def test_classify_vulnerability(text: str, state: str) -> None:
    assert classify_vulnerability(text + "\n") == state


@pytest.mark.parametrize(
    ("text", "profile"),
    [
        ("throughput-performance\n", "throughput-performance"),
        ("throughput-performance  site-overrides\n", "throughput-performance site-overrides"),
        ("", ""),
        ("\n", ""),
    ],
)
def test_parse_active_profile(text: str, profile: str) -> None:
    assert parse_active_profile(text) == profile


@pytest.mark.parametrize("text", ["balanced\nextra\n", "bal\x01anced", "x" * 300])
def test_parse_active_profile_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_active_profile(text)


def test_readers_on_a_tree(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"))
    fs = HostFS(procfs=str(tree.proc), sysfs=str(tree.sys), rootfs=str(tree.rootfs))
    rmem = read_sysctl(fs, "net.ipv4.tcp_rmem")
    assert rmem is not None and rmem.ints == (4096, 131072, 6291456)
    assert (tree.proc / "sys/net/ipv4/tcp_rmem").read_text() == "4096\t131072\t6291456\n"
    assert read_sysctl(fs, "net.ipv4.no_such_sysctl") is None
    assert read_sysctl(fs, "net.core.somaxconn.below_a_file") is None
    with pytest.raises(IsADirectoryError):
        read_sysctl(fs, "net.core")
    errors = ReadErrors()
    vulns = read_vulnerabilities(fs, errors)
    assert vulns is not None and len(vulns) == 11 and len(errors) == 0
    assert vulns["spectre_v2"].state == VulnState.MITIGATED
    assert vulns["spectre_v2"].text.startswith("Mitigation: Retpolines")
    tuned = read_tuned(fs)
    assert (tuned.installed, tuned.profile) == (True, "balanced")


# --- the registry extension: check families --------------------------------------------


def test_default_profile_makes_one_check_per_sysctl() -> None:
    specs = load_all()
    assert specs["sysctl"].family
    profile = load_profile(None, specs)
    names = sorted(n for n in profile.checks if n.startswith("sysctl."))
    assert names == sorted(
        [f"sysctl.{s}" for s in IO500_SYSCTLS] + ["sysctl.net.ipv4.tcp_low_latency"]
    )
    assert "sysctl" not in profile.checks  # the family itself has no result
    # tcp_low_latency is a no-op since 4.14: in the profile, off, so not read
    assert not profile.checks["sysctl.net.ipv4.tcp_low_latency"].enabled
    assert profile.members("sysctl") == sorted(IO500_SYSCTLS)
    somaxconn = profile.checks["sysctl.net.core.somaxconn"]
    # optional: not in the profile, the family's default
    assert somaxconn.params == {"value": 2048, "compare": "at_least", "optional": False}
    assert str(somaxconn.severity) == "warn"
    spec = resolve(specs, "sysctl.net.core.somaxconn")
    assert spec is not None and (spec.parent, spec.member) == ("sysctl", "net.core.somaxconn")
    assert resolve(specs, "sysctl") is None
    assert resolve(specs, "nosuch.check") is None


# --- collector on the reference nodes -----------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_kernel_exposition(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str
) -> None:
    compare_golden(
        request,
        GOLDEN / node / "kernel.prom",
        collector_exposition(collect(node_trees[node].flags), "kernel"),
    )


EXPECTED_SYSCTLS = {
    "epyc9454p-tuned": {
        "net.ipv4.tcp_timestamps": [0],
        "net.ipv4.tcp_sack": [0],
        "net.core.netdev_max_backlog": [250000],
        "net.core.somaxconn": [2048],
        "net.ipv4.tcp_rmem": [10240, 87380, 2147483647],
        "net.ipv4.tcp_wmem": [10240, 87380, 2147483647],
        "net.core.rmem_max": [2147483647],
        "net.core.wmem_max": [2147483647],
    },
    "epyc9454p-detuned": {
        "net.ipv4.tcp_timestamps": [1],
        "net.ipv4.tcp_sack": [1],
        "net.core.netdev_max_backlog": [1000],
        "net.core.somaxconn": [4096],
        "net.ipv4.tcp_rmem": [4096, 131072, 6291456],
        "net.ipv4.tcp_wmem": [4096, 16384, 4194304],
        "net.core.rmem_max": [212992],
        "net.core.wmem_max": [212992],
    },
}


@pytest.mark.parametrize("node", NODES)
def test_kernel_values_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    result = collect(node_trees[node].flags)
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == 0
    for name, values in EXPECTED_SYSCTLS[node].items():
        if len(values) == 1:
            assert sysctl_value(result, name) == values[0], name
        else:
            assert sysctl_value(result, name) is None
            for i, v in enumerate(values):
                got = sysctl_value(result, name, i)
                assert got == v, (name, i)
    # in the fixture, but off in the default profile: not read, not exported
    assert sysctl_value(result, "net.ipv4.tcp_low_latency") is None
    # both nodes boot the same 5.15 kernel on the same Zen 4 CPU
    counts = {"not_affected": 8, "mitigated": 3, "vulnerable": 0, "unknown": 0}
    for state, count in counts.items():
        assert value(result, "cephnode_kernel_cpu_vulnerabilities", state=state) == count
    for name, state in (("spectre_v2", "mitigated"), ("meltdown", "not_affected")):
        got = value(
            result, "cephnode_kernel_cpu_vulnerability_info", vulnerability=name, state=state
        )
        assert got == 1
    empty = dict.fromkeys(
        ("mitigations", "nosmt", "isolcpus", "nohz_full", "nohz", "rcu_nocbs"), ""
    )
    empty.update(irqaffinity="", preempt="", pcie_aspm="")
    assert value(result, "cephnode_kernel_cmdline_info", **empty) == 1
    assert value(result, "cephnode_tuned_installed") == 1
    profile = "throughput-performance" if node == "epyc9454p-tuned" else "balanced"
    assert value(result, "cephnode_tuned_profile_info", profile=profile) == 1


def test_cmdline_flags(make_tree: MakeTree) -> None:
    cmdline = (
        "BOOT_IMAGE=/vmlinuz ro mitigations=off nosmt isolcpus=managed_irq,domain,2-5 "
        'nohz_full=2-5 rcu_nocbs=2-5 nohz=on irqaffinity=0-1 preempt=none pcie_aspm=off "x=a b"'
    )
    tree = make_tree(small("epyc9454p-tuned", cmdline=cmdline))
    result = collect([*tree.flags, *only_kernel()])
    labels = {
        "mitigations": "off",
        "nosmt": "1",  # given without a value
        "isolcpus": "managed_irq,domain,2-5",
        "nohz_full": "2-5",
        "nohz": "on",
        "rcu_nocbs": "2-5",
        "irqaffinity": "0-1",
        "preempt": "none",
        "pcie_aspm": "off",
    }
    assert value(result, "cephnode_kernel_cmdline_info", **labels) == 1


# --- checks through the real entry point ---------------------------------------------

EXPECTED_STATUS = {
    "epyc9454p-tuned": {
        **{f"sysctl.{s}": "pass" for s in IO500_SYSCTLS},
        "sysctl.net.ipv4.tcp_low_latency": "skip",
        "tuned.profile": "pass",
        "kernel.mitigations": "pass",
    },
    "epyc9454p-detuned": {
        **{f"sysctl.{s}": "warn" for s in IO500_SYSCTLS},
        "sysctl.net.core.somaxconn": "pass",  # 4096 since Linux 5.4 is above the IO500 run's 2048
        "sysctl.net.ipv4.tcp_low_latency": "skip",
        "tuned.profile": "warn",
        "kernel.mitigations": "pass",
    },
}


@pytest.mark.parametrize("node", NODES)
def test_checks_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    _, results = check_json(node_trees[node])
    mine = {n: r["status"] for n, r in results.items() if n in EXPECTED_STATUS[node]}
    assert mine == EXPECTED_STATUS[node]
    for name in EXPECTED_STATUS[node]:
        r = results[name]
        assert r["subject"] == ""
        assert (r["hint"] != "") == (r["status"] in ("warn", "fail")), name
    mitigations = results["kernel.mitigations"]
    assert mitigations["observed"] == (
        "mitigations not set (kernel default); "
        "3 mitigated (spec_store_bypass, spectre_v1, spectre_v2); 8 not affected"
    )
    assert results["sysctl.net.ipv4.tcp_low_latency"]["observed"] == "disabled in the profile"


def test_detuned_sysctl_hints_say_the_fix(node_trees: dict[str, Tree]) -> None:
    _, results = check_json(node_trees["epyc9454p-detuned"])
    rmem = results["sysctl.net.ipv4.tcp_rmem"]
    assert rmem["observed"] == "4096 131072 6291456"
    assert rmem["expected"] == "at least 10240 87380 2147483647 (element-wise)"
    # the default element (131072) is already above the IO500 run's 87380: the fix keeps it
    assert 'sysctl -w net.ipv4.tcp_rmem="10240 131072 2147483647"' in rmem["hint"]
    assert "'net.ipv4.tcp_rmem = 10240 131072 2147483647'" in rmem["hint"]
    assert "/etc/sysctl.d/" in rmem["hint"]
    backlog = results["sysctl.net.core.netdev_max_backlog"]
    assert backlog["hint"].startswith("sysctl -w net.core.netdev_max_backlog=250000;")
    tuned = results["tuned.profile"]
    assert tuned["observed"] == "profile balanced"
    assert tuned["hint"] == "tuned-adm profile throughput-performance"


def test_check_results_are_metrics(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-detuned"].flags)
    warn = "cephnode_tuning_check_warning"
    failed = "cephnode_tuning_check_failed"
    assert value(result, warn, check="sysctl.net.ipv4.tcp_rmem", subject="") == 1
    # a pass or the other status: no series
    assert value(result, failed, check="sysctl.net.ipv4.tcp_rmem", subject="") is None
    assert value(result, warn, check="sysctl.net.core.somaxconn", subject="") is None
    assert value(result, failed, check="sysctl.net.core.somaxconn", subject="") is None
    assert value(result, warn, check="tuned.profile", subject="") == 1
    # skipped: no series
    assert value(result, warn, check="sysctl.net.ipv4.tcp_low_latency", subject="") is None


@pytest.mark.parametrize(
    ("tuned", "installed", "profile", "observed", "hint"),
    [
        (None, 0, "", "tuned is not installed", "apt install tuned"),
        ({}, 1, "", "never selected a profile", "systemctl enable --now tuned"),
        ({"profile": ""}, 1, "", "no profile active (tuned-adm off)", "tuned-adm profile"),
    ],
)
def test_tuned_absent_or_off(
    make_tree: MakeTree,
    tuned: dict | None,
    installed: int,
    profile: str,
    observed: str,
    hint: str,
) -> None:
    desc = small("epyc9454p-detuned")
    if tuned is None:
        del desc["tuned"]
    else:
        desc["tuned"] = tuned
    tree = make_tree(desc)
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_tuned_installed") == installed
    assert value(result, "cephnode_tuned_profile_info", profile=profile) == 1
    code, results = check_json(tree, *only_kernel())
    r = results["tuned.profile"]
    assert r["status"] == "warn" and observed in r["observed"] and hint in r["hint"]
    assert "tuned-adm profile throughput-performance" in r["hint"]
    assert code == 0  # warnings do not fail the report


def test_merged_tuned_profile(make_tree: MakeTree, tmp_path: Path) -> None:
    merged = {"profile": "throughput-performance site", "pid": 1702}
    tree = make_tree(small("epyc9454p-tuned", tuned=merged))
    _, results = check_json(tree, *only_kernel())
    assert results["tuned.profile"]["status"] == "warn"  # "site" is not allowed
    profile = write_profile(
        tmp_path, "checks:\n  tuned.profile: {allowed: [throughput-performance, site]}\n"
    )
    _, results = check_json(tree, *only_kernel(), "--profile", profile)
    assert results["tuned.profile"]["status"] == "pass"
    assert results["tuned.profile"]["observed"] == "profile throughput-performance site"


def _stop_tuned(desc: dict[str, Any]) -> dict[str, Any]:
    """systemctl disable --now tuned: the daemon is gone (and rolled its settings back),
    active_profile still names the profile; tuned does not remove its pid file on a
    crash, so a stale one stays."""
    desc["tuned"] = {k: v for k, v in desc["tuned"].items() if k != "pid"}
    return desc


@pytest.mark.parametrize(("severity", "status", "code"), [("warn", "warn", 0), ("fail", "fail", 1)])
def test_tuned_not_running(
    make_tree: MakeTree, tmp_path: Path, severity: str, status: str, code: int
) -> None:
    tree = make_tree(_stop_tuned(small("epyc9454p-tuned")))
    (tree.rootfs / "run/tuned").mkdir(parents=True, exist_ok=True)
    (tree.rootfs / "run/tuned/tuned.pid").write_text("1234\n")  # stale: no such process
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_tuned_running") == 0
    assert value(result, "cephnode_tuned_profile_info", profile="throughput-performance") == 1
    profile = write_profile(tmp_path, f"checks:\n  tuned.profile: {{severity: {severity}}}\n")
    rc, results = check_json(tree, *only_kernel(), "--profile", profile)
    r = results["tuned.profile"]
    assert r["status"] == status
    assert r["observed"] == "tuned not running; active_profile says throughput-performance"
    assert "systemctl enable --now tuned" in r["hint"]
    assert rc == code


def test_tuned_running_is_found_by_its_pid_file_or_a_scan(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-tuned"))
    pid = load_node("epyc9454p-tuned")["tuned"]["pid"]
    assert (tree.rootfs / "run/tuned/tuned.pid").read_text().strip() == str(pid)
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_tuned_running") == 1
    _, results = check_json(tree, *only_kernel())
    assert results["tuned.profile"]["status"] == "pass"
    # without the pid file (tuned before 2.x writes it elsewhere): the /proc scan finds it
    (tree.rootfs / "run/tuned/tuned.pid").unlink()
    assert value(collect([*tree.flags, *only_kernel()]), "cephnode_tuned_running") == 1
    # a pid file naming another process does not count
    (tree.rootfs / "run/tuned/tuned.pid").write_text("1\n")
    (tree.proc / str(pid) / "comm").write_text("bash\n")
    assert value(collect([*tree.flags, *only_kernel()]), "cephnode_tuned_running") == 0


def test_tuned_not_running_with_a_wrong_profile_says_both(make_tree: MakeTree) -> None:
    desc = _stop_tuned(small("epyc9454p-detuned"))
    _, results = check_json(make_tree(desc), *only_kernel())
    r = results["tuned.profile"]
    assert r["status"] == "warn"
    assert r["observed"] == "tuned not running; active_profile says balanced"


def test_tuned_unknown_when_procfs_cannot_be_searched(tmp_path: Path) -> None:
    """Selected and allowed, but whether tuned runs cannot be told: unknown, not pass."""
    for d in ("proc", "sys", "root/etc/tuned"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "root/etc/tuned/active_profile").write_text("throughput-performance\n")
    flags = [f"--path.procfs={tmp_path}/nosuchproc", f"--path.sysfs={tmp_path}/sys"]
    proc = run_cli(
        "check", "--format", "json", *flags, f"--path.rootfs={tmp_path}/root", *only_kernel()
    )
    r = {r["check"]: r for r in json.loads(proc.stdout)["results"]}["tuned.profile"]
    assert r["status"] == "unknown", r
    assert r["observed"].startswith("profile throughput-performance; whether tuned runs is ")


# --- profile overrides ----------------------------------------------------------------


def test_custom_sysctls_and_comparisons(make_tree: MakeTree, tmp_path: Path) -> None:
    desc = small(
        "epyc9454p-detuned",
        sysctl={
            **load_node("epyc9454p-detuned")["sysctl"],
            "vm.swappiness": 60,
            "net.ipv4.tcp_congestion_control": "cubic",
            "net.ipv4.conf.eth0/100.rp_filter": 2,
        },
    )
    tree = make_tree(desc)
    assert (tree.proc / "sys/net/ipv4/conf/eth0.100/rp_filter").read_text() == "2\n"
    profile = write_profile(
        tmp_path,
        "name: site\n"
        "checks:\n"
        "  sysctl.vm.swappiness: {severity: fail, value: 10, compare: at_most}\n"
        "  sysctl.net.ipv4.tcp_congestion_control: {severity: warn, value: bbr, compare: equal}\n"
        "  sysctl.net.ipv4.conf.eth0/100.rp_filter: {value: 2, compare: equal}\n"
        # equal, element-wise, as a list: the stock value passes
        "  sysctl.net.ipv4.tcp_rmem: {value: [4096, 131072, 6291456], compare: equal}\n"
        "  sysctl.net.ipv4.tcp_wmem: {value: '4096 16384 4194304', compare: at_most}\n"
        "  sysctl.net.core.netdev_max_backlog: {value: 1000}\n"
        "  sysctl.net.ipv4.tcp_timestamps: {enabled: false}\n",
    )
    code, results = check_json(tree, *only_kernel(), "--profile", profile)
    swappiness = results["sysctl.vm.swappiness"]
    assert swappiness["status"] == "fail"
    assert swappiness["expected"] == "at most 10"
    assert swappiness["hint"].startswith("sysctl -w vm.swappiness=10;")
    assert code == 1  # a fail severity fails the report
    cc = results["sysctl.net.ipv4.tcp_congestion_control"]
    assert (cc["status"], cc["observed"]) == ("warn", "cubic")
    assert "sysctl -w net.ipv4.tcp_congestion_control=bbr" in cc["hint"]
    assert results["sysctl.net.ipv4.conf.eth0/100.rp_filter"]["status"] == "pass"
    assert results["sysctl.net.ipv4.tcp_rmem"]["status"] == "pass"
    assert results["sysctl.net.ipv4.tcp_wmem"]["status"] == "pass"
    assert results["sysctl.net.core.netdev_max_backlog"]["status"] == "pass"
    assert results["sysctl.net.ipv4.tcp_timestamps"]["status"] == "skip"
    # the collector reads exactly the enabled sysctls of the profile
    result = collect([*tree.flags, *only_kernel(), "--profile", profile])
    assert sysctl_value(result, "vm.swappiness") == 60
    assert sysctl_value(result, "net.ipv4.conf.eth0/100.rp_filter") == 2
    assert sysctl_value(result, "net.ipv4.tcp_timestamps") is None
    # a string sysctl is judged but has no numeric series
    assert sysctl_value(result, "net.ipv4.tcp_congestion_control") is None
    assert value(result, "cephnode_tuning_check_failed", check="sysctl.vm.swappiness", subject="")


def test_equal_on_a_vector_suggests_the_exact_value(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(small("epyc9454p-tuned"))
    profile = write_profile(
        tmp_path,
        "checks:\n  sysctl.net.ipv4.tcp_rmem: {value: '4096 131072 6291456', compare: equal}\n",
    )
    _, results = check_json(tree, *only_kernel(), "--profile", profile)
    rmem = results["sysctl.net.ipv4.tcp_rmem"]
    assert rmem["status"] == "warn"
    assert rmem["expected"] == "equal to 4096 131072 6291456 (element-wise)"
    assert 'sysctl -w net.ipv4.tcp_rmem="4096 131072 6291456"' in rmem["hint"]


def test_mitigations_can_warn(make_tree: MakeTree, tmp_path: Path) -> None:
    vulns = dict(load_node("epyc9454p-detuned")["vulnerabilities"])
    vulns["spec_rstack_overflow"] = "Vulnerable: Safe RET, no microcode"
    vulns["gather_data_sampling"] = "Unknown: Dependent on hypervisor status"
    tree = make_tree(small("epyc9454p-detuned", vulnerabilities=vulns))
    _, results = check_json(tree, *only_kernel())
    r = results["kernel.mitigations"]
    assert r["status"] == "pass" and r["hint"] == ""
    assert r["observed"] == (
        "mitigations not set (kernel default); "
        "3 mitigated (spec_store_bypass, spectre_v1, spectre_v2); "
        "1 vulnerable (spec_rstack_overflow); 1 unknown (gather_data_sampling); 8 not affected"
    )
    profile = write_profile(
        tmp_path, "checks:\n  kernel.mitigations: {warn_when_mitigated: true}\n"
    )
    code, results = check_json(tree, *only_kernel(), "--profile", profile)
    r = results["kernel.mitigations"]
    assert r["status"] == "warn" and "mitigations=off" in r["hint"]
    assert r["expected"] == "no mitigation in effect"
    profile = write_profile(
        tmp_path, "checks:\n  kernel.mitigations: {severity: fail, warn_when_vulnerable: true}\n"
    )
    code, results = check_json(tree, *only_kernel(), "--profile", profile)
    r = results["kernel.mitigations"]
    assert r["status"] == "fail" and "microcode" in r["hint"]
    assert code == 1


def test_mitigations_off_on_the_command_line(make_tree: MakeTree) -> None:
    vulns = {"spectre_v1": "Vulnerable: __user pointer sanitization and usercopy barriers only"}
    tree = make_tree(small("epyc9454p-tuned", cmdline="ro mitigations=off", vulnerabilities=vulns))
    _, results = check_json(tree, *only_kernel())
    observed = results["kernel.mitigations"]["observed"]
    assert observed == "mitigations=off; 1 vulnerable (spectre_v1)"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("checks:\n  sysctl.net.core.somaxconn: {compare: bigger}\n", "compare must be one of"),
        ("checks:\n  sysctl.vm.swappiness: {value: 10}\n", "lacks compare"),
        ("checks:\n  sysctl.vm.swappiness: {value: 10, compare: more}\n", "compare must be"),
        (
            "checks:\n  sysctl.net.ipv4.tcp_congestion_control: {value: bbr, compare: at_least}\n",
            "only compare: equal",
        ),
        ("checks:\n  sysctl.net.core.somaxconn: {value: true}\n", "must be of type int or str"),
        ("checks:\n  sysctl.net.core.somaxconn: {value: [1, x]}\n", "list value must hold"),
        ("checks:\n  sysctl.net.core.somaxconn: {value: ''}\n", "value is empty"),
        ("checks:\n  sysctl.net..core: {value: 1, compare: equal}\n", "bad sysctl name"),
        ("checks:\n  sysctl.net.core.somaxconn: {limit: 5}\n", "unknown key"),
        ("checks:\n  sysctl: {value: 1, compare: equal}\n", "sysctl.<name>"),
        ("checks:\n  tuned.profile: {allowed: []}\n", "non-empty list"),
        ("checks:\n  kernel.mitigations: {warn_when_mitigated: 'yes'}\n", "of type bool"),
    ],
)
def test_bad_kernel_profiles_are_rejected(tmp_path: Path, content: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_profile(write_profile(tmp_path, content), load_all())


def test_unknown_comparison_exits_2(node_trees: dict[str, Tree], tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path, "checks:\n  sysctl.net.core.somaxconn: {value: 2048, compare: above}\n"
    )
    proc = run_cli("check", *node_trees["epyc9454p-tuned"].flags, "--profile", profile)
    assert proc.returncode == 2
    assert "compare must be one of at_least, at_most, equal" in proc.stderr
    assert "level=error" in proc.stderr


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "errors", "status", "observed"),
    [
        ("eio", 1, "unknown", "unreadable: "),
        # the exporter's view more often than the kernel: never skip (see below)
        ("missing", 0, "unknown", "not found in /proc/sys: "),
        # not decimal integers where the profile compares numbers: a read error
        ("garbage", 1, "unknown", "unreadable: "),
        ("empty", 1, "unknown", "unreadable: "),
    ],
)
def test_a_bad_sysctl_is_not_judged(
    make_tree: MakeTree, kind: str, errors: int, status: str, observed: str
) -> None:
    tree = make_tree(small("epyc9454p-detuned"), faults={SOMAXCONN: kind})
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == errors
    assert sysctl_value(result, "net.core.somaxconn") is None
    assert sysctl_value(result, "net.core.rmem_max") == 212992
    _, results = check_json(tree, *only_kernel())
    r = results["sysctl.net.core.somaxconn"]
    assert r["status"] == status and r["observed"].startswith(observed)
    assert results["sysctl.net.core.rmem_max"]["status"] == "warn"


def test_a_vector_of_the_wrong_length_is_unknown(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"))
    (tree.proc / "sys/net/ipv4/tcp_rmem").write_text("4096\t131072\n")
    _, results = check_json(tree, *only_kernel())
    r = results["sysctl.net.ipv4.tcp_rmem"]
    assert r["status"] == "unknown"  # nonsensical input is never skip
    assert r["observed"] == "4096 131072 (2 values, the profile has 3)"


# --- a sysctl that is not there -----------------------------------------------------

# Linux 4.12 removed net.ipv4.tcp_tw_recycle (commit 4396e46187ca, "tcp: remove
# tcp_tw_recycle"): a sysctl that a fleet's older kernels have and its newer ones lack.
TW_RECYCLE = "sysctl.net.ipv4.tcp_tw_recycle"


def _netns(tree: Tree) -> None:
    """The exporter in its own network namespace: net_core_table (rmem_max, wmem_max,
    netdev_max_backlog) is registered for init_net only (net/core/sysctl_net_core.c,
    sysctl_core_init), so /proc/sys/net/core of another namespace lacks them."""
    for name in ("rmem_max", "wmem_max", "netdev_max_backlog"):
        (tree.proc / "sys/net/core" / name).unlink()


def _masked(tree: Tree) -> None:
    """/proc/sys/net masked by an empty tmpfs."""
    net = tree.proc / "sys/net"
    for path in sorted(net.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()


@pytest.mark.parametrize(
    ("mutate", "missing", "why"),
    [
        (
            _netns,
            ("net.core.rmem_max", "net.core.wmem_max", "net.core.netdev_max_backlog"),
            "network namespace",
        ),
        (_masked, IO500_SYSCTLS, "masked"),
    ],
)
def test_a_missing_sysctl_is_unknown_not_skip(
    make_tree: MakeTree, mutate: Any, missing: tuple[str, ...], why: str
) -> None:
    """A detuned node whose sysctls the exporter cannot see must not look clean: the
    file's absence is far more often the exporter's view (another network namespace, a
    masked /proc/sys, a wrong --path.procfs) than a kernel without the sysctl."""
    tree = make_tree(small("epyc9454p-detuned"))
    mutate(tree)
    _, results = check_json(tree, *only_kernel())
    for name in missing:
        r = results[f"sysctl.{name}"]
        assert r["status"] == "unknown", (name, r)
        assert why in r["observed"] and "--path.procfs" in r["observed"], r["observed"]
        assert "optional: true" in r["observed"]
    if mutate is _netns:  # the rest of the namespace's sysctls are still judged
        assert results["sysctl.net.core.somaxconn"]["status"] == "pass"
        assert results["sysctl.net.ipv4.tcp_rmem"]["status"] == "warn"


def test_an_empty_procfs_makes_every_sysctl_unknown(tmp_path: Path) -> None:
    """--path.procfs at an empty directory (a container where /host/proc was not
    mounted): nothing is "not present on this kernel"."""
    for d in ("proc", "sys", "root"):
        (tmp_path / d).mkdir()
    flags = [f"--path.procfs={tmp_path}/proc", f"--path.sysfs={tmp_path}/sys"]
    proc = run_cli(
        "check", "--format", "json", *flags, f"--path.rootfs={tmp_path}/root", *only_kernel()
    )
    results = {r["check"]: r for r in json.loads(proc.stdout)["results"]}
    for name in IO500_SYSCTLS:
        r = results[f"sysctl.{name}"]
        assert r["status"] == "unknown" and "--path.procfs" in r["observed"], r


def test_an_optional_sysctl_the_kernel_lacks_is_skipped(
    make_tree: MakeTree, tmp_path: Path
) -> None:
    tree = make_tree(small("epyc9454p-detuned"))
    plain = write_profile(tmp_path, f"checks:\n  {TW_RECYCLE}: {{value: 0, compare: equal}}\n")
    _, results = check_json(tree, *only_kernel(), "--profile", plain)
    assert results[TW_RECYCLE]["status"] == "unknown"
    optional = tmp_path / "optional.yaml"
    optional.write_text(f"checks:\n  {TW_RECYCLE}: {{value: 0, compare: equal, optional: true}}\n")
    _, results = check_json(tree, *only_kernel(), "--profile", str(optional))
    r = results[TW_RECYCLE]
    assert (r["status"], r["observed"]) == ("skip", "not present on this kernel (optional)")
    # optional says only that the kernel may lack it: a present value is still judged
    tree2 = make_tree(small("epyc9454p-detuned", sysctl={"net.ipv4.tcp_tw_recycle": 1}))
    _, results = check_json(tree2, *only_kernel(), "--profile", str(optional))
    assert results[TW_RECYCLE]["status"] == "fail"  # severity: fail unless the entry says


def test_optional_must_be_a_boolean(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path, f"checks:\n  {TW_RECYCLE}: {{value: 0, compare: equal, optional: 1}}\n"
    )
    with pytest.raises(ProfileError, match="optional: must be of type bool"):
        load_profile(path, load_all())


@pytest.mark.parametrize(
    ("rel", "kind", "errors", "counts"),
    [
        # unrecognised text is the "unknown" class, not an error
        ("spectre_v2", "garbage", 0, {"mitigated": 2, "unknown": 1, "not_affected": 8}),
        ("spectre_v2", "empty", 1, {"mitigated": 2, "unknown": 0, "not_affected": 8}),
        ("spectre_v2", "eio", 1, {"mitigated": 2, "unknown": 0, "not_affected": 8}),
        ("meltdown", "missing", 0, {"mitigated": 3, "unknown": 0, "not_affected": 7}),
    ],
)
def test_bad_vulnerability_files(
    make_tree: MakeTree, rel: str, kind: str, errors: int, counts: dict[str, int]
) -> None:
    tree = make_tree(
        small("epyc9454p-detuned"), faults={f"sys/devices/system/cpu/vulnerabilities/{rel}": kind}
    )
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == errors
    for state, count in counts.items():
        assert value(result, "cephnode_kernel_cpu_vulnerabilities", state=state) == count


def test_no_vulnerability_files(make_tree: MakeTree) -> None:
    desc = small("epyc9454p-detuned")
    del desc["vulnerabilities"]
    tree = make_tree(desc)
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_kernel_cpu_vulnerabilities", state="mitigated") is None
    _, results = check_json(tree, *only_kernel())
    r = results["kernel.mitigations"]
    assert (r["status"], r["observed"]) == ("skip", "the kernel exposes no CPU vulnerability files")


@pytest.mark.parametrize("kind", ["eio", "garbage"])
def test_unreadable_tuned_file(make_tree: MakeTree, kind: str) -> None:
    desc = small("epyc9454p-detuned")
    tree = make_tree(desc, faults={"root/etc/tuned/active_profile": kind})
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    _, results = check_json(tree, *only_kernel())
    r = results["tuned.profile"]
    if kind == "eio":
        assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == 1
        assert value(result, "cephnode_tuned_installed") is None
        assert r["status"] == "unknown" and r["observed"].startswith("unreadable: ")
        assert "active_profile" in r["observed"]
    else:  # a name tuned does not know is still the selection, and not an allowed one
        assert value(result, "cephnode_tuned_profile_info", profile="?garbage@value!") == 1
        assert r["status"] == "warn"


def test_unreadable_cmdline(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"), faults={"proc/cmdline": "eio"})
    result = collect([*tree.flags, *only_kernel()])
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == 1
    assert not any(f.name == "cephnode_kernel_cmdline_info" for f in result.families())
    _, results = check_json(tree, *only_kernel())
    observed = results["kernel.mitigations"]["observed"]
    assert observed.startswith("mitigations=? (/proc/cmdline unreadable); 3 mitigated")


def test_an_empty_host_does_not_fail_the_collector(tmp_path: Path) -> None:
    """Nothing to read at all (wrong --path.*): read errors, never an exception."""
    for d in ("proc", "sys", "root"):
        (tmp_path / d).mkdir()
    flags = [f"--path.procfs={tmp_path}/proc", f"--path.sysfs={tmp_path}/sys"]
    result = collect([*flags, f"--path.rootfs={tmp_path}/root", *only_kernel()])
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == 1
    assert value(result, "cephnode_tuned_installed") == 0


# --- this machine ---------------------------------------------------------------------


def test_real_host() -> None:
    """The kernel collector on the machine the tests run on: no errors, sane values."""
    result = collect(only_kernel())
    assert value(result, "cephnode_scrape_collector_success", collector="kernel") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="kernel") == 0
    with open("/proc/sys/net/core/somaxconn", encoding="ascii") as f:
        somaxconn = int(f.read())
    assert sysctl_value(result, "net.core.somaxconn") == somaxconn
    with open("/proc/sys/net/ipv4/tcp_rmem", encoding="ascii") as f:
        rmem = [int(v) for v in f.read().split()]
    for i, v in enumerate(rmem):
        assert sysctl_value(result, "net.ipv4.tcp_rmem", i) == v
    vulns = "/sys/devices/system/cpu/vulnerabilities"
    if os.path.isdir(vulns):
        total = sum(
            value(result, "cephnode_kernel_cpu_vulnerabilities", state=s) or 0 for s in VulnState
        )
        assert total == len(os.listdir(vulns))
    installed = os.path.isdir("/etc/tuned")
    assert value(result, "cephnode_tuned_installed") == (1 if installed else 0)
    proc = run_cli("check", "--format", "json", *only_kernel())
    assert proc.returncode in (0, 1), proc.stderr
    statuses = {r["check"]: r["status"] for r in json.loads(proc.stdout)["results"]}
    assert statuses["sysctl.net.core.somaxconn"] in ("pass", "warn")
    assert statuses["kernel.mitigations"] in ("pass", "skip")
