"""``irq.affinity`` for a device whose ``msi_irqs`` lists no vector: legacy INTx is a
finding, a listing that was not seen is unknown, and neither passes or skips silently.

Documentation/ABI/testing/sysfs-bus-pci (msi_irqs, irq), Documentation/ABI/testing/
sysfs-kernel-irq (actions, chip_name); hostfs/irqline.py says how the two are told apart.
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest
from cephnode_exporter.checks import Status
from cephnode_exporter.checks.base import Result
from cephnode_exporter.hostfs.irqline import LegacyLine, names_device

from tests.conftest import MakeTree, Tree, collect, value
from tests.fixtures.sysfsgen import load_node

CHECK = "irq.affinity"
# The sections the irq collector reads; idle states and OSDs only slow the build, and so
# do a thousand vectors: four NVMe controllers and the two ports, 9 vectors each.
IRQ_SECTIONS = ("meta", "seed", "uptime_s", "hostname", "cpus", "nvme", "net", "irqs")
# INTx lines from irqs.intx_first (24): nvme0-nvme3 24-27, the two ports 28 and 29.
NVME3_LINE = 27
PORT0_LINE = 28
PORT1_LINE = 29


def node(*legacy: str, **irqs: Any) -> dict[str, Any]:
    """The tuned reference node's CPUs, NVMe, ports and interrupts; ``legacy`` devices on
    their INTx line instead of MSI-X."""
    desc = copy.deepcopy(
        {k: v for k, v in load_node("epyc9454p-tuned").items() if k in IRQ_SECTIONS}
    )
    desc["nvme"]["controllers"] = desc["nvme"]["controllers"][:4]
    desc["nvme"]["controller"]["queue_count"] = 9
    desc["irqs"]["net_vectors"] = 9
    if legacy:
        desc["irqs"]["legacy"] = list(legacy)
    desc["irqs"].update(irqs)
    return desc


def results(tree: Tree) -> tuple[dict[str, Result], Any]:
    collection = collect(tree.flags)
    return {r.subject: r for r in collection.results if r.check == CHECK}, collection


def pci_dir(tree: Tree, cls: str, name: str) -> Any:
    return (tree.sys / "class" / cls / name / "device").resolve()


# ----------------------------------------------------------------------------- legacy INTx


def test_an_nvme_on_legacy_intx_fails(make_tree: MakeTree) -> None:
    tree = make_tree(node("nvme3"))
    assert not (pci_dir(tree, "nvme", "nvme3") / "msi_irqs").exists()
    found, collection = results(tree)
    r = found["nvme3"]
    assert r.status == Status.FAIL, r
    assert r.observed == (
        f"legacy INTx: no MSI/MSI-X vectors (msi_irqs missing), all its queues on IRQ "
        f"{NVME3_LINE} (IR-IO-APIC), served by cpu0 (irqbalance running)"
    )
    assert "pci=nomsi" in r.hint and "lspci -vv -s 0000:" in r.hint
    assert "start irqbalance" not in r.hint  # placement is not what is wrong
    assert value(collection, "cephnode_device_irqs", device="nvme3", kind="nvme") == 1
    assert value(collection, "cephnode_tuning_check_failed", check=CHECK, subject="nvme3") == 1
    # The others keep their MSI-X vectors and pass.
    assert {s for s, r in found.items() if r.status != Status.PASS} == {"nvme3"}
    assert value(collection, "cephnode_scrape_collector_read_errors", collector="irq") == 0


def test_a_port_on_legacy_intx_fails(make_tree: MakeTree) -> None:
    found, _ = results(make_tree(node("ens1f1np1")))
    r = found["ens1f1np1"]
    assert r.status == Status.FAIL, r
    assert (
        f"legacy INTx: no MSI/MSI-X vectors (msi_irqs missing), all its queues on IRQ {PORT1_LINE}"
        in r.observed
    )


def test_a_shared_legacy_line_names_the_other_handlers(make_tree: MakeTree) -> None:
    tree = make_tree(node("nvme3"))
    (tree.sys / f"kernel/irq/{NVME3_LINE}/actions").write_text(
        "nvme3q0,nvme3q1,ahci[0000:02:00.0]\n"
    )
    (tree.proc / f"irq/{NVME3_LINE}/ahci[0000:02:00.0]").mkdir()
    r = results(tree)[0]["nvme3"]
    assert r.status == Status.FAIL, r
    assert "(IR-IO-APIC, shared with ahci[0000:02:00.0])" in r.observed


# ----------------------------------------------------------------------------- not seen


def test_a_missing_msi_irqs_of_a_live_controller_is_unknown(make_tree: MakeTree) -> None:
    """nvme0 runs on MSI-X (its INTx line 24 carries no handler): a listing that is
    gone is a masked or partial sysfs, not legacy INTx and not "no interrupts"."""
    tree = make_tree(node())
    shutil.rmtree(pci_dir(tree, "nvme", "nvme0") / "msi_irqs")
    found, collection = results(tree)
    r = found["nvme0"]
    assert r.status == Status.UNKNOWN, r
    assert r.observed == (
        "nvme0 is live with msi_irqs missing and no handler of it on IRQ 24: its interrupts "
        "are not visible (masked or partial sysfs?)"
    )
    assert value(collection, "cephnode_device_irqs", device="nvme0", kind="nvme") is None
    assert value(collection, "cephnode_scrape_collector_read_errors", collector="irq") == 1
    assert value(collection, "cephnode_tuning_check_unknown", check=CHECK, subject="nvme0") == 1


def test_an_empty_msi_irqs_of_an_up_port_is_unknown(make_tree: MakeTree) -> None:
    """An empty directory is what a tmpfs mask over msi_irqs shows."""
    tree = make_tree(node())
    msi = pci_dir(tree, "net", "ens1f0np0") / "msi_irqs"
    shutil.rmtree(msi)
    msi.mkdir()
    r = results(tree)[0]["ens1f0np0"]
    assert r.status == Status.UNKNOWN, r
    assert (
        f"ens1f0np0 is up with msi_irqs empty and no handler of it on IRQ {PORT0_LINE}"
        in r.observed
    )


def test_an_unreadable_irq_attribute_is_unknown(make_tree: MakeTree) -> None:
    faults = {"sys/class/nvme/nvme0/device/irq": "eio"}
    tree = make_tree(node(), faults=faults)
    shutil.rmtree(pci_dir(tree, "nvme", "nvme0") / "msi_irqs")
    r = results(tree)[0]["nvme0"]
    assert r.status == Status.UNKNOWN, r
    assert "msi_irqs lists no vector and the legacy line is unreadable:" in r.observed
    assert "/irq" in r.observed


def test_an_unreadable_msi_irqs_is_unknown(make_tree: MakeTree) -> None:
    tree = make_tree(node(), faults={"sys/class/nvme/nvme0/device/msi_irqs": "eio"})
    r = results(tree)[0]["nvme0"]
    assert r.status == Status.UNKNOWN, r
    assert "msi_irqs" in r.observed


def test_the_devices_handler_on_an_msi_vector_is_unknown(make_tree: MakeTree) -> None:
    """With MSI (not MSI-X) ``irq`` shows the first vector: the device's handler on a
    line of an MSI chip means the listing is hidden, not legacy INTx."""
    tree = make_tree(node("nvme3"))
    (tree.sys / f"kernel/irq/{NVME3_LINE}/chip_name").write_text("IR-PCI-MSI\n")
    r = results(tree)[0]["nvme3"]
    assert r.status == Status.UNKNOWN, r
    assert "is an MSI vector (chip IR-PCI-MSI)" in r.observed


def test_without_sys_kernel_irq_legacy_cannot_be_told(make_tree: MakeTree) -> None:
    """A kernel without CONFIG_SPARSE_IRQ: the handlers from /proc/irq/<N>, no chip."""
    tree = make_tree(node("nvme3"))
    shutil.rmtree(tree.sys / "kernel/irq")
    r = results(tree)[0]["nvme3"]
    assert r.status == Status.UNKNOWN, r
    assert f"IRQ {NVME3_LINE} has nvme3's handler but its controller is not shown" in r.observed


# ----------------------------------------------------------------------------- down


def test_a_controller_not_live_without_vectors_is_skipped(make_tree: MakeTree) -> None:
    tree = make_tree(node())
    shutil.rmtree(pci_dir(tree, "nvme", "nvme0") / "msi_irqs")
    (tree.sys / "class/nvme/nvme0/state").write_text("resetting\n")
    r = results(tree)[0]["nvme0"]
    assert r.status == Status.SKIP, r
    assert (
        r.observed
        == "no interrupts requested: no MSI vectors (msi_irqs missing) and nvme0 is resetting"
    )


def test_a_port_down_without_vectors_is_skipped(make_tree: MakeTree) -> None:
    desc = node()
    desc["net"]["interfaces"][1]["operstate"] = "down"
    tree = make_tree(desc)
    shutil.rmtree(pci_dir(tree, "net", "ens1f1np1") / "msi_irqs")
    r = results(tree)[0]["ens1f1np1"]
    assert r.status == Status.SKIP, r
    assert "ens1f1np1 is down" in r.observed


def test_an_unreadable_state_is_unknown(make_tree: MakeTree) -> None:
    tree = make_tree(node(), faults={"sys/class/nvme/nvme0/state": "eio"})
    shutil.rmtree(pci_dir(tree, "nvme", "nvme0") / "msi_irqs")
    r = results(tree)[0]["nvme0"]
    assert r.status == Status.UNKNOWN, r
    assert "nvme0/state" in r.observed


# ----------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("handler", "device", "kind", "driver", "mine"),
    [
        ("nvme3q0", "nvme3", "nvme", "nvme", True),
        ("nvme3q12", "nvme3", "nvme", "nvme", True),
        ("nvme31q0", "nvme3", "nvme", "nvme", False),
        ("nvme", "nvme3", "nvme", "nvme", False),  # the driver's name is no NVMe handler
        ("eth0", "eth0", "net", "igb", True),
        ("eth0-TxRx-0", "eth0", "net", "igb", True),
        ("eth01", "eth0", "net", "igb", False),
        ("mlx5_comp0@pci:0000:41:00.0", "ens1f0np0", "net", "mlx5_core", True),
        ("igb", "eth0", "net", "igb", True),
        ("ahci", "eth0", "net", "igb", False),
    ],
)
def test_handler_names(handler: str, device: str, kind: str, driver: str, mine: bool) -> None:
    bdf = "0000:41:00.0" if kind == "net" and device.startswith("ens") else "0000:03:00.0"
    assert names_device(handler, device, kind, bdf, driver) is mine


def test_what_each_line_says() -> None:
    legacy = LegacyLine("missing", 27, ("nvme3q0",), "IO-APIC", own=True)
    assert legacy.legacy and not legacy.down and legacy.unknown("nvme3") is None
    down = LegacyLine("missing", 24, (), "IO-APIC", own=False, state="dead")
    assert down.down and down.unknown("nvme0") is None
    hidden = LegacyLine("empty", 0, (), None, own=False, state="live")
    assert hidden.unknown("nvme0") == (
        "nvme0 is live with msi_irqs empty and no legacy line (irq 0): its interrupts are "
        "not visible (masked or partial sysfs?)"
    )


def test_the_generator_refuses_an_unknown_legacy_device(tmp_path: Any) -> None:
    from tests.fixtures.sysfsgen import build_tree

    with pytest.raises(ValueError, match=r"irqs\.legacy: no NVMe controller or physical port"):
        build_tree(node("nvme99"), tmp_path / "t")
