"""`cephnode-exporter check`: the tuning report, its formats, exit codes and profiles."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from cephnode_exporter.checks import CHECKS, load_all
from cephnode_exporter.cli import main
from cephnode_exporter.profile import ProfileError, load_profile

from tests.conftest import (
    GOLDEN,
    NODES,
    MakeTree,
    Tree,
    collect,
    compare_golden,
    run_cli,
    samples,
    value,
)
from tests.fixtures.sysfsgen import load_node

# The detuned node's IOMMU, NVMe and interrupt checks fail too (tests/test_iommu.py,
# test_nvme.py, test_irq.py); tests of the exit code on the CPU checks alone leave those
# collectors off.
NO_HOST_IO = ("--no-collector.iommu", "--no-collector.nvme", "--no-collector.irq")


def check_json(tree: Tree, *extra: str) -> tuple[int, dict]:
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_check(report: dict) -> dict[str, dict]:
    return {r["check"]: r for r in report["results"]}


@pytest.mark.parametrize("node", NODES)
def test_check_json_matches_expected(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str
) -> None:
    code, report = check_json(node_trees[node])
    assert report["profile"] == "default"
    # the fixture's /etc/hostname, as for a containerised exporter with --path.rootfs
    hostname = (node_trees[node].rootfs / "etc/hostname").read_text().strip()
    assert report["node"] == hostname
    # The node name is this machine's; the expected file holds the results only.
    text = json.dumps(report["results"], indent=2) + "\n"
    compare_golden(request, GOLDEN / node / "check.json", text)
    assert code == (1 if node.endswith("detuned") else 0)


def test_detuned_node_fails_both_checks_with_hints(node_trees: dict[str, Tree]) -> None:
    code, report = check_json(node_trees["epyc9454p-detuned"])
    assert code == 1
    results = by_check(report)
    cstates = results["cpu.cstates"]
    assert cstates["status"] == "fail"
    assert cstates["subject"] == ""
    assert "C2" in cstates["observed"] and "96/96 CPUs" in cstates["observed"]
    assert "processor.max_cstate=1" in cstates["hint"]
    governor = results["cpu.governor"]
    assert governor["status"] == "fail"
    assert "powersave" in governor["observed"]
    assert "cpupower frequency-set -g performance" in governor["hint"]
    for r in report["results"]:
        assert set(r) == {"check", "subject", "status", "observed", "expected", "hint"}


def test_tuned_node_passes(node_trees: dict[str, Tree]) -> None:
    code, report = check_json(node_trees["epyc9454p-tuned"])
    assert code == 0
    # Skipped by design: a no-op sysctl off in the default profile, the sampler's check
    # (its collector is off by default: it needs CAP_PERFMON), and the OSD check on a
    # fixture node without OSD sockets.
    skipped = {r["check"] for r in report["results"] if r["status"] == "skip"}
    assert skipped == {
        "sysctl.net.ipv4.tcp_low_latency",
        "kernel.spinlock_iommu",
        "osd.debug_levels",
        "osd.numa",
        "osd.pg_count",
        "osd.rocksdb_build",
    }
    assert {r["status"] for r in report["results"] if r["check"] not in skipped} == {"pass"}
    assert all(r["hint"] == "" for r in report["results"])


def test_text_report_is_a_readable_table(node_trees: dict[str, Tree]) -> None:
    proc = run_cli("check", *node_trees["epyc9454p-detuned"].flags)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("node ") and "profile default" in lines[0]
    header = next(line for line in lines if line.startswith("CHECK"))
    for column in ("SUBJECT", "STATUS", "OBSERVED", "EXPECTED"):
        assert column in header
    assert any(line.startswith("cpu.cstates") and "FAIL" in line for line in lines)
    assert any(line.strip().startswith("fix: ") for line in lines)
    _, report = check_json(node_trees["epyc9454p-detuned"])
    order = ("fail", "warn", "unknown", "pass", "skip")
    count = {s: sum(r["status"] == s for r in report["results"]) for s in order}
    failing = {r["check"] for r in report["results"] if r["status"] == "fail"}
    assert failing == {
        "cpu.cstates",
        "cpu.governor",
        "iommu.nvme",
        "nvme.scheduler",
        "nvme.pcie_link",
        "irq.affinity",
    }
    assert count["warn"] > 0
    assert lines[-1] == "summary: " + ", ".join(f"{count[s]} {s}" for s in order)
    # one table row per result
    rows = [line for line in lines if line[:1].isalpha() and "." in line.split()[0]]
    assert len(rows) == len(report["results"])


def test_metrics_and_check_agree(node_trees: dict[str, Tree]) -> None:
    tree = node_trees["epyc9454p-detuned"]
    _, report = check_json(tree)
    result = collect(tree.flags)
    for r in report["results"]:
        labels = {"check": r["check"], "subject": r["subject"]}
        failed = value(result, "cephnode_tuning_check_failed", **labels)
        warning = value(result, "cephnode_tuning_check_warning", **labels)
        # A series (of 1) only where the check fails or warns: none for a pass, a skip or
        # an unknown.
        assert failed == (1 if r["status"] == "fail" else None), r
        assert warning == (1 if r["status"] == "warn" else None), r
    # One hash per judged check, of its failing and warning subjects: checks with the
    # same deviating subjects (none, for all passing checks) share a value, others differ.
    judged = {r["check"] for r in report["results"] if r["status"] not in ("skip", "unknown")}
    deviating: dict[str, frozenset[tuple[str, str]]] = {
        check: frozenset(
            (r["subject"], r["status"])
            for r in report["results"]
            if r["check"] == check and r["status"] in ("fail", "warn")
        )
        for check in judged
    }
    hashes = {check: value(result, "cephnode_tuning_check_hash", check=check) for check in judged}
    assert None not in hashes.values()
    for a in judged:
        for b in judged:
            assert (hashes[a] == hashes[b]) == (deviating[a] == deviating[b]), (a, b)
    assert len(set(deviating.values())) > 3  # the detuned node has several distinct sets
    for check in {r["check"] for r in report["results"]} - judged:
        assert value(result, "cephnode_tuning_check_hash", check=check) is None
    # A fact hash per _info family the node has (none for OSDs: the fixture has none).
    facts = {
        labels["fact"]: v
        for (name, labels_set), v in samples(result).items()
        if name == "cephnode_tuning_fact_hash"
        for labels in [dict(labels_set)]
    }
    assert {"kernel_cmdline_info", "cpu_idle_driver_info", "tuning_profile_info"} <= set(facts)
    assert "osd_info" not in facts
    for v in [*hashes.values(), *facts.values()]:
        assert v == int(v) and 0 <= v < 2**48


def test_unknown_results_are_metrics(make_tree: MakeTree) -> None:
    """A check that cannot judge leaves a series, or it would look like a pass: the
    collectors succeed with no read error in both cases below (the audit's D3)."""
    desc = load_node("epyc9454p-detuned")
    # nvme7's link (trained down to x2 8 GT/s) reads "Unknown" speed at full width
    desc["pci"]["0000:62:00.0"] = {"current_link_speed": "Unknown", "current_link_width": 4}
    tree = make_tree(desc)
    (tree.proc / "sys/net/ipv4/tcp_rmem").write_text("4096\t131072\n")  # 2 of 3 values
    _, report = check_json(tree)
    result = collect(tree.flags)
    unknown = "cephnode_tuning_check_unknown"
    assert value(result, unknown, check="nvme.pcie_link", subject="nvme7") == 1
    assert value(result, unknown, check="sysctl.net.ipv4.tcp_rmem", subject="") == 1
    for r in report["results"]:
        labels = {"check": r["check"], "subject": r["subject"]}
        assert value(result, unknown, **labels) == (1 if r["status"] == "unknown" else None), r
    # the collectors themselves were fine: only the new series tells
    for collector in ("nvme", "kernel"):
        assert value(result, "cephnode_scrape_collector_success", collector=collector) == 1
        assert value(result, "cephnode_scrape_collector_read_errors", collector=collector) == 0
    # a check whose every result is unknown is not judged: no hash (an OSD that missed a
    # scrape must not read as a changed result)
    assert value(result, "cephnode_tuning_check_hash", check="sysctl.net.ipv4.tcp_rmem") is None


def test_a_failed_collector_s_checks_are_unknown_metrics(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned", faults={"sys/devices/system/cpu/online": "eio"})
    result = collect([*tree.flags, *NO_HOST_IO])
    for check in ("cpu.cstates", "cpu.governor"):
        assert value(result, "cephnode_tuning_check_unknown", check=check, subject="") == 1
        assert value(result, "cephnode_tuning_check_failed", check=check, subject="") is None


def test_tuning_hashes_follow_the_facts_not_the_process(node_trees: dict[str, Tree]) -> None:
    """The hashes are the same in another process for the same node and differ where the
    nodes differ: a rule reads a change of value as a changed fact."""

    def hashes(tree: Tree) -> dict[tuple[str, str], float]:
        out = {}
        for line in run_cli("dump", *tree.flags).stdout.splitlines():
            for name, label in (
                ("cephnode_tuning_check_hash", "check"),
                ("cephnode_tuning_fact_hash", "fact"),
            ):
                if line.startswith(name + "{"):
                    key = line[line.index('"') + 1 : line.index('"}')]
                    out[(label, key)] = float(line.rsplit(" ", 1)[1])
        return out

    detuned = node_trees["epyc9454p-detuned"]
    first = hashes(detuned)
    assert first and first == hashes(detuned)
    assert dict(samples_hashes(detuned)) == first
    tuned = hashes(node_trees["epyc9454p-tuned"])
    # The tuned node boots with iommu=pt (tests/fixtures/nodes/), and the detuned one
    # fails cpu.cstates where the tuned one passes.
    for key in (("fact", "iommu_kernel_params_info"), ("check", "cpu.cstates")):
        assert key in first and key in tuned
        assert first[key] != tuned[key], key
    # Otherwise the same kernel parameters, profile and cpuidle driver.
    for key in (
        ("fact", "kernel_cmdline_info"),
        ("fact", "tuning_profile_info"),
        ("fact", "cpu_idle_driver_info"),
    ):
        assert first[key] == tuned[key], key


def samples_hashes(tree: Tree) -> dict[tuple[str, str], float]:
    """The same hashes from an in-process collection."""
    out = {}
    for (name, labels), v in samples(collect(tree.flags)).items():
        if name in ("cephnode_tuning_check_hash", "cephnode_tuning_fact_hash"):
            ((label, key),) = labels
            out[(label, key)] = v
    return out


def test_profile_downgrades_and_disables(node_trees: dict[str, Tree], tmp_path: Path) -> None:
    profile = tmp_path / "site.yaml"
    profile.write_text(
        "name: site\n"
        "checks:\n"
        "  cpu.cstates: {severity: warn, max_exit_latency_us: 500}\n"
        "  cpu.governor: {enabled: false}\n"
    )
    tree = node_trees["epyc9454p-detuned"]
    code, report = check_json(tree, "--profile", str(profile), *NO_HOST_IO)
    assert report["profile"] == "site"
    results = by_check(report)
    # 400 us is now within the limit
    assert results["cpu.cstates"]["status"] == "pass"
    assert results["cpu.governor"]["status"] == "skip"
    assert code == 0
    profile.write_text("checks:\n  cpu.cstates: {severity: warn}\n")
    code, report = check_json(tree, "--profile", str(profile), *NO_HOST_IO)
    assert by_check(report)["cpu.cstates"]["status"] == "warn"
    assert code == 1  # the governor still fails
    result = collect([*tree.flags, "--profile", str(profile)])
    assert value(result, "cephnode_tuning_check_warning", check="cpu.cstates", subject="") == 1
    assert value(result, "cephnode_tuning_check_failed", check="cpu.cstates", subject="") is None


def test_disabled_collector_skips_its_check(node_trees: dict[str, Tree]) -> None:
    code, report = check_json(node_trees["epyc9454p-detuned"], "--no-collector.cpufreq")
    governor = by_check(report)["cpu.governor"]
    assert governor["status"] == "skip"
    assert code == 1  # C-states still fail
    assert "disabled" in governor["observed"]


def test_failed_collector_makes_its_check_unknown(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned", faults={"sys/devices/system/cpu/online": "eio"})
    code, report = check_json(tree, *NO_HOST_IO)
    cpu_checks = [r for r in report["results"] if r["check"].startswith("cpu.")]
    assert {r["status"] for r in cpu_checks} == {"unknown"}
    assert code == 0


def test_a_check_that_raises_exits_2_with_the_report(
    node_trees: dict[str, Tree], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A check's bug is an internal error (exit 2, as `check --help`'s man page and the
    README say), not "nothing failed": the rest of the report is still printed, the
    broken check is `unknown` with the exception."""

    def boom(facts: object, params: object) -> list:
        raise RuntimeError("a bug")

    spec = CHECKS["cpu.governor"]
    monkeypatch.setitem(CHECKS, "cpu.governor", dataclasses.replace(spec, func=boom))
    tree = node_trees["epyc9454p-tuned"]
    code = main(["check", "--format", "json", *tree.flags, *NO_HOST_IO])
    report = by_check(json.loads(capsys.readouterr().out))
    assert report["cpu.governor"]["status"] == "unknown"
    assert report["cpu.governor"]["observed"] == "check error: RuntimeError('a bug')"
    assert report["cpu.cstates"]["status"] == "pass"
    assert code == 2
    # and over a failing check: the report is incomplete, which 2 says first
    code = main(["check", "--format", "json", *node_trees["epyc9454p-detuned"].flags, *NO_HOST_IO])
    report = by_check(json.loads(capsys.readouterr().out))
    assert report["cpu.cstates"]["status"] == "fail"
    assert code == 2


def test_no_cpufreq_skips_the_governor_check(make_tree: MakeTree) -> None:
    desc = __import__("tests.fixtures.sysfsgen", fromlist=["load_node"]).load_node(
        "epyc9454p-tuned"
    )
    del desc["cpufreq"]
    tree = make_tree(desc)
    _, report = check_json(tree)
    assert by_check(report)["cpu.governor"]["status"] == "skip"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("checks: [1, 2]\n", "must be a mapping"),
        ("checks:\n  cpu.nosuch: {}\n", "unknown check 'cpu.nosuch'"),
        ("checks:\n  cpu.cstates: {max_exit_latency: 5}\n", "unknown key"),
        ("checks:\n  cpu.cstates: {max_exit_latency_us: ten}\n", "must be of type int"),
        ("checks:\n  cpu.cstates: {severity: page}\n", "severity: must be one of"),
        ("checks:\n  cpu.cstates: {enabled: 'no'}\n", "must be true or false"),
        ("checks: {\n", "not valid YAML"),
        ("nam: x\n", "unknown keys"),
    ],
)
def test_bad_profiles_are_rejected(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(content)
    with pytest.raises(ProfileError, match=message):
        load_profile(str(path), load_all())


def test_bad_profile_exits_2_with_a_clear_message(
    tmp_path: Path, node_trees: dict[str, Tree]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("checks:\n  cpu.nosuch: {}\n")
    proc = run_cli("check", *node_trees["epyc9454p-tuned"].flags, "--profile", str(path))
    assert proc.returncode == 2
    assert "unknown check" in proc.stderr and "level=error" in proc.stderr
    proc = run_cli("check", "--profile", str(tmp_path / "absent.yaml"))
    assert proc.returncode == 2
    assert "No such file" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--format", "xml"],
        ["check", "--no-such-flag"],
        ["dump", "--scrape.timeout=-1"],
        ["dump", "--collector.timeout=abc"],
        ["serve", "--web.telemetry-path=metrics"],
        # '?' and '#' start a query and a fragment: no request could reach the metrics.
        ["serve", "--web.telemetry-path=/m?x=1"],
        ["serve", "--web.telemetry-path=/m#x"],
        ["serve", "--web.telemetry-path=/-/healthy"],
        ["serve", "--log.level=loud"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr or "error" in proc.stderr


def test_version_and_help() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("cephnode-exporter ")
    proc = run_cli("serve", "--help")
    assert proc.returncode == 0
    for flag in (
        "--web.listen-address",
        "--web.telemetry-path",
        "--web.config.file",
        "--path.procfs",
        "--path.sysfs",
        "--path.rootfs",
        "--collector.cpuidle",
        "--no-collector.cpuidle",
        "--collector.cpufreq",
        "--log.level",
        "--log.format",
    ):
        assert flag in proc.stdout, flag
    assert "(default: enabled)" in proc.stdout


def test_fact_hash_counts_the_osds_as_a_set() -> None:
    """osd_info: an added OSD, one missing from a scrape or one with a value not read in
    it is no change; a new version or allocator on one OSD is (the hash leaves
    ceph_daemon out)."""
    from cephnode_exporter.collection import Collection
    from prometheus_client.core import GaugeMetricFamily

    def fact_hash(osds: dict[str, str], allocator: dict[str, str] | None = None) -> float | None:
        info = GaugeMetricFamily(
            "cephnode_osd_info",
            "",
            labels=["ceph_daemon", "version", "objectstore", "allocator"],
        )
        for daemon, version in osds.items():
            alloc = (allocator or {}).get(daemon, "tcmalloc")
            info.add_metric([daemon, version, "bluestore", alloc], 1.0)
        other = GaugeMetricFamily("cephnode_osd_slow_ops", "", labels=["ceph_daemon"])
        other.add_metric(["osd.0"], 3.0)
        hashes = Collection._fact_hashes([info, other] if osds else [other])
        return {s.labels["fact"]: s.value for s in hashes.samples}.get("osd_info")

    base = fact_hash({"osd.0": "17.2.7", "osd.1": "17.2.7"})
    assert base is not None
    assert fact_hash({"osd.0": "17.2.7", "osd.1": "17.2.7", "osd.2": "17.2.7"}) == base
    assert fact_hash({"osd.1": "17.2.7"}) == base
    assert fact_hash({"osd.0": "17.2.8", "osd.1": "17.2.7"}) != base
    assert fact_hash({}) is None  # no series, no hash: a failed read is no change
    # A value not read this scrape (process unreadable, no version yet): as if missing.
    assert fact_hash({"osd.0": "17.2.7", "osd.1": "17.2.7"}, {"osd.1": ""}) == base
    assert fact_hash({"osd.0": "17.2.7", "osd.1": ""}) == base
    # A read value that differs is a change.
    assert fact_hash({"osd.0": "17.2.7", "osd.1": "17.2.7"}, {"osd.1": "libc"}) != base
