"""The `iommu` collector and its check `iommu.nvme`.

Layers: pure parsers (domain types, including ones the kernel may add later; boot
parameters); the collector on both reference nodes (passthrough vs. DMA-FQ) and on an
IOMMU-off variant (exact values and a golden exposition); the check through the real
entry point; bad input (missing or dangling group links, unknown and garbage types, a
kernel without the type file); and this machine.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors import REGISTRY
from cephnode_exporter.hostfs import HostFS, ParseError
from cephnode_exporter.hostfs.cmdline import parse_cmdline
from cephnode_exporter.hostfs.iommu import (
    dma_translated,
    iommu_params,
    parse_domain_type,
    read_group_type,
    read_units,
)
from cephnode_exporter.hostfs.pci import read_iommu_group

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

CONTROLLERS = [f"nvme{i}" for i in range(10)]
GROUPS = {f"nvme{i}": str(20 + i) for i in range(10)}
NVME0_PCI = "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0"
GROUP0 = "sys/kernel/iommu_groups/20"
ONLY_IOMMU = [f"--no-collector.{n}" for n in sorted(REGISTRY) if n != "iommu"]
NO_PARAMS = dict.fromkeys(
    ("iommu", "iommu_passthrough", "iommu_strict", "amd_iommu", "intel_iommu"), ""
)


def small(node: str, **changes: Any) -> dict[str, Any]:
    """A reference node's device sections on a 2-CPU topology (fast to build)."""
    desc = copy.deepcopy(load_node(node))
    for section in ("cpuidle", "cpufreq", "vulnerabilities", "sysctl", "net"):
        desc.pop(section, None)
    desc["cpus"] = {"cores_per_socket": 2}
    desc.update(changes)
    return desc


def check_json(tree: Tree, *extra: str) -> tuple[int, dict[str, dict[str, str]]]:
    """The iommu.nvme results by subject."""
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    results = json.loads(proc.stdout)["results"]
    return proc.returncode, {r["subject"]: r for r in results if r["check"] == "iommu.nvme"}


def ok(result: Collection, errors: int = 0) -> None:
    assert value(result, "cephnode_scrape_collector_success", collector="iommu") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="iommu") == errors


def translated(result: Collection) -> dict[str, float]:
    return {
        dict(labels)["controller"]: v
        for (n, labels), v in samples(result).items()
        if n == "cephnode_iommu_dma_translated"
    }


# --- parsers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "result"),
    [
        # drivers/iommu/iommu.c iommu_group_show_type()
        ("DMA\n", True),
        ("DMA-FQ\n", True),
        ("identity\n", False),
        ("blocked\n", None),
        ("unmanaged\n", None),
        ("unknown\n", None),
        # Linux 5.2 printed "DMA" without the newline (fixed in 24f307d8abf7)
        ("DMA", True),
        # a type a future kernel might add: reported as is, translation unknown
        ("DMA-SVA\n", None),
    ],
)
def test_domain_types(text: str, result: bool | None) -> None:
    assert dma_translated(parse_domain_type(text)) is result


@pytest.mark.parametrize("text", ["", "?garbage@value!", "DMA FQ", "x" * 40, "-DMA"])
def test_garbage_domain_types(text: str) -> None:
    with pytest.raises(ParseError, match="not an IOMMU domain type"):
        parse_domain_type(text)


def test_iommu_params() -> None:
    cmdline = parse_cmdline("ro iommu=pt amd_iommu=on iommu.strict=0 intel_iommu")
    assert iommu_params(cmdline) == {
        "iommu": "pt",
        "iommu.passthrough": "",
        "iommu.strict": "0",
        "amd_iommu": "on",
        "intel_iommu": "1",  # given without a value
    }


def test_readers_on_a_tree(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"))
    fs = HostFS(procfs=str(tree.proc), sysfs=str(tree.sys), rootfs=str(tree.rootfs))
    assert read_units(fs) == ["ivhd0", "ivhd1", "ivhd2", "ivhd3"]
    assert read_iommu_group(str(tree.root / NVME0_PCI)) == "20"
    assert read_group_type(fs, "20") == "DMA-FQ"
    # the group lists its device and the IOMMU unit of the root complex lists it too
    assert os.readlink(tree.root / GROUP0 / "devices/0000:01:00.0") == (
        "../../../../devices/pci0000:00/0000:00:01.1/0000:01:00.0"
    )
    unit = tree.sys / "class/iommu/ivhd0/devices/0000:01:00.0"
    assert os.path.realpath(unit) == str(tree.root / NVME0_PCI)


# --- the collector on the reference nodes ---------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_iommu_exposition(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str
) -> None:
    compare_golden(
        request,
        GOLDEN / node / "iommu.prom",
        collector_exposition(collect(node_trees[node].flags), "iommu"),
    )


@pytest.mark.parametrize(
    ("node", "domain", "bit", "params"),
    [
        ("epyc9454p-tuned", "identity", 0, {**NO_PARAMS, "iommu": "pt"}),
        ("epyc9454p-detuned", "DMA-FQ", 1, NO_PARAMS),
    ],
)
def test_iommu_values_on_the_reference_nodes(
    node_trees: dict[str, Tree], node: str, domain: str, bit: int, params: dict[str, str]
) -> None:
    result = collect([*node_trees[node].flags, *ONLY_IOMMU])
    ok(result)
    assert value(result, "cephnode_iommu_units") == 4
    assert value(result, "cephnode_iommu_kernel_params_info", **params) == 1
    for name in CONTROLLERS:
        info = "cephnode_iommu_group_info"
        assert value(result, info, controller=name, group=GROUPS[name], type=domain) == 1
    assert translated(result) == dict.fromkeys(CONTROLLERS, bit)


def test_iommu_off(make_tree: MakeTree) -> None:
    """amd_iommu=off: the class directory is empty, no device has a group, nothing is
    translated, and the check passes."""
    desc = small(
        "epyc9454p-detuned",
        cmdline="BOOT_IMAGE=/vmlinuz-5.15.0-67-generic ro amd_iommu=off",
        iommu={},
    )
    tree = make_tree(desc)
    assert os.listdir(tree.sys / "class/iommu") == []
    assert not (tree.root / NVME0_PCI / "iommu_group").exists()
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result)
    assert value(result, "cephnode_iommu_units") == 0
    params = {**NO_PARAMS, "amd_iommu": "off"}
    assert value(result, "cephnode_iommu_kernel_params_info", **params) == 1
    assert not any(n == "cephnode_iommu_group_info" for n, _ in samples(result))
    assert translated(result) == dict.fromkeys(CONTROLLERS, 0)
    code, results = check_json(tree, *ONLY_IOMMU)
    assert code == 0
    assert {r["status"] for r in results.values()} == {"pass"}
    assert results["nvme0"]["observed"] == "no IOMMU active"


def test_kernel_without_iommu_support(make_tree: MakeTree) -> None:
    """No iommu section: not even /sys/class/iommu exists."""
    desc = small("epyc9454p-detuned")
    del desc["iommu"]
    tree = make_tree(desc)
    assert not (tree.sys / "class/iommu").exists()
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result)
    assert value(result, "cephnode_iommu_units") == 0
    assert translated(result) == dict.fromkeys(CONTROLLERS, 0)


# --- the check through the real entry point ---------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_check_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    _, results = check_json(node_trees[node])
    assert sorted(results, key=lambda s: int(s[4:])) == CONTROLLERS
    detuned = node.endswith("detuned")
    for name, r in results.items():
        group = GROUPS[name]
        assert r["expected"] == "DMA not translated (group type identity, or no IOMMU)"
        if detuned:
            assert r["status"] == "fail"
            assert r["observed"] == f"IOMMU group {group}, default domain DMA-FQ (translated)"
            assert r["hint"].startswith("boot with iommu=pt (passthrough; or amd_iommu=off")
            assert "BIOS" in r["hint"] and "update-grub" in r["hint"]
            assert "77 %" in r["hint"] and "alloc_iova" in r["hint"]
            assert "native_queued_spin_lock_slowpath" in r["hint"]
        else:
            assert r["status"] == "pass" and r["hint"] == ""
            assert r["observed"] == f"IOMMU group {group}, default domain identity (passthrough)"


def test_check_results_are_metrics(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-detuned"].flags)
    for name in CONTROLLERS:
        got = value(result, "cephnode_tuning_check_failed", check="iommu.nvme", subject=name)
        assert got == 1


def test_intel_hint(make_tree: MakeTree) -> None:
    desc = small("epyc9454p-detuned")
    desc["iommu"]["units"] = {"dmar0": "pci0000:00/0000:00:00.0"}
    tree = make_tree(desc)
    _, results = check_json(tree, *ONLY_IOMMU)
    assert "intel_iommu=off" in results["nvme0"]["hint"]
    assert "amd_iommu" not in results["nvme0"]["hint"]


# --- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "errors", "series", "observed"),
    [
        ("blocked\n", 0, "blocked", "this type does not tell whether DMA is translated"),
        ("unmanaged\n", 0, "unmanaged", "this type does not tell"),
        ("DMA-SVA\n", 0, "DMA-SVA", "this type does not tell"),
        ("?garbage@value!\n", 1, "", "unreadable: "),
    ],
)
def test_unknown_domain_types(
    make_tree: MakeTree, text: str, errors: int, series: str, observed: str
) -> None:
    tree = make_tree(small("epyc9454p-detuned", files={f"{GROUP0}/type": text}))
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result, errors=errors)
    info = "cephnode_iommu_group_info"
    assert value(result, info, controller="nvme0", group="20", type=series) == 1
    assert "nvme0" not in translated(result)
    assert translated(result)["nvme1"] == 1
    _, results = check_json(tree, *ONLY_IOMMU)
    # a type that does not tell is skip; an unreadable one is unknown, never skip
    assert results["nvme0"]["status"] == ("unknown" if errors else "skip")
    assert observed in results["nvme0"]["observed"]
    assert results["nvme1"]["status"] == "fail"


def test_type_eio(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"), faults={f"{GROUP0}/type": "eio"})
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result, errors=1)
    assert "nvme0" not in translated(result)


@pytest.mark.parametrize(
    ("args", "status", "observed"),
    [
        # no parameter: the default domain is the kernel's build default
        # (CONFIG_IOMMU_DEFAULT_PASSTHROUGH), which sysfs does not show: cannot judge
        ("", "unknown", "the kernel command line does not say"),
        ("iommu=pt", "pass", "passthrough by the kernel command line (iommu=pt)"),
        ("iommu=soft,pt", "pass", "passthrough by the kernel command line (iommu=soft,pt)"),
        ("iommu.passthrough=1", "pass", "(iommu.passthrough=1)"),
        ("iommu.passthrough=on", "pass", "(iommu.passthrough=on)"),
        ("iommu=nopt", "fail", "translated by the kernel command line (iommu=nopt)"),
        ("iommu.passthrough=0", "fail", "(iommu.passthrough=0)"),
        # the two say the opposite: the kernel's parsing order decides, not the exporter
        ("iommu=pt iommu.passthrough=0", "unknown", "contradict"),
    ],
)
def test_kernel_without_the_type_file(
    make_tree: MakeTree, args: str, status: str, observed: str
) -> None:
    """Before Linux 5.2 a group had no type file: the group is known, the mode is not,
    unless the command line sets it. Never skip: the IOMMU is active and covers the NVMe."""
    desc = small("epyc9454p-detuned")
    desc["cmdline"] += f" {args}" if args else ""
    tree = make_tree(desc, faults={f"{GROUP0}/type": "missing"})
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result)
    assert value(result, "cephnode_iommu_group_info", controller="nvme0", group="20", type="")
    assert "nvme0" not in translated(result)
    _, results = check_json(tree, *ONLY_IOMMU)
    r = results["nvme0"]
    assert r["status"] == status, r
    assert "before Linux 5.2" in r["observed"] and observed in r["observed"], r["observed"]
    assert ("iommu=pt" in r["hint"]) == (status == "fail")


def test_kernel_without_the_type_file_and_no_cmdline(make_tree: MakeTree) -> None:
    tree = make_tree(
        small("epyc9454p-detuned"),
        faults={f"{GROUP0}/type": "missing", "proc/cmdline": "eio"},
    )
    _, results = check_json(tree, *ONLY_IOMMU)
    r = results["nvme0"]
    assert r["status"] == "unknown" and "/proc/cmdline unreadable" in r["observed"]


@pytest.mark.parametrize(
    ("args", "status"),
    [
        ("", "unknown"),
        # passthrough either way: the IOMMU does not cover the device, or it passes through
        ("iommu=pt", "pass"),
        # not a device the IOMMU covers, or a lost link to a translated group: no telling
        ("iommu=nopt", "unknown"),
    ],
)
def test_a_missing_group_link_with_an_active_iommu(
    make_tree: MakeTree, args: str, status: str
) -> None:
    desc = small("epyc9454p-detuned")
    desc["cmdline"] += f" {args}" if args else ""
    tree = make_tree(desc, faults={f"{NVME0_PCI}/iommu_group": "missing"})
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result)
    assert "nvme0" not in translated(result)
    assert not any(
        n == "cephnode_iommu_group_info" and ("controller", "nvme0") in labels
        for n, labels in samples(result)
    )
    _, results = check_json(tree, *ONLY_IOMMU)
    r = results["nvme0"]
    assert r["status"] == status, r
    assert r["observed"].startswith("no IOMMU group although 4 IOMMU unit(s) are active")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("../../../../kernel/iommu_groups/99", "points to no group"),  # dangling
        ("../../../../kernel/iommu_groups/abc", "not an IOMMU group link"),
    ],
)
def test_a_bad_group_link(make_tree: MakeTree, target: str, message: str) -> None:
    tree = make_tree(small("epyc9454p-detuned"))
    link = tree.root / NVME0_PCI / "iommu_group"
    link.unlink()
    os.symlink(target, link)
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result, errors=1)
    assert "nvme0" not in translated(result)
    (outcome,) = [o for o in result.outcomes if o.name == "iommu"]
    assert any(message in e for e in outcome.facts.errors.items)


def test_unreadable_cmdline(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"), faults={"proc/cmdline": "eio"})
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result, errors=1)
    assert not any(n == "cephnode_iommu_kernel_params_info" for n, _ in samples(result))
    assert translated(result)["nvme0"] == 1


def test_no_nvme_at_all(make_tree: MakeTree) -> None:
    desc = small("epyc9454p-detuned")
    del desc["nvme"], desc["block"], desc["pci"]
    desc.pop("osds", None)  # their LVs sit on the NVMe namespaces
    tree = make_tree(desc)
    result = collect([*tree.flags, *ONLY_IOMMU])
    ok(result)
    assert value(result, "cephnode_iommu_units") == 4
    assert translated(result) == {}
    _, results = check_json(tree, *ONLY_IOMMU)
    assert results[""]["status"] == "skip"
    assert results[""]["observed"] == "no NVMe controllers on this node (IOMMU active)"


# --- this machine ---------------------------------------------------------------------


def test_real_host() -> None:
    """This machine: the units it has, its command line, no errors."""
    result = collect(ONLY_IOMMU)
    ok(result)
    units = os.listdir("/sys/class/iommu") if os.path.isdir("/sys/class/iommu") else []
    assert value(result, "cephnode_iommu_units") == len(units)
    with open("/proc/cmdline", encoding="utf-8") as f:
        params = iommu_params(parse_cmdline(f.read()))
    labels = {k.replace(".", "_"): v for k, v in params.items()}
    assert value(result, "cephnode_iommu_kernel_params_info", **labels) == 1
    nvme = os.listdir("/sys/class/nvme") if os.path.isdir("/sys/class/nvme") else []
    assert len(translated(result)) <= len(nvme)
    proc = run_cli("check", "--format", "json", *ONLY_IOMMU)
    assert proc.returncode in (0, 1), proc.stderr
    mine = [r for r in json.loads(proc.stdout)["results"] if r["check"] == "iommu.nvme"]
    if not nvme:
        assert [r["status"] for r in mine] == ["skip"]
