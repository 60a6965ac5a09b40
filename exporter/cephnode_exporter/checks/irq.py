"""Check ``irq.affinity``: a device's interrupts on its own NUMA node, and not on one CPU."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.hostfs.irq import (
    DeviceIRQs,
    IRQFacts,
    effective_cpus,
    format_cpulist,
    remote_irqs,
)
from cephnode_exporter.hostfs.irqline import LegacyLine, names_device

EXPECTED = "interrupts served on the device's NUMA node, by more than one CPU"
LEGACY_HINT = (
    "give the device MSI-X back: look for pci=nomsi on the kernel command line, MSI "
    "turned off in the BIOS or by the hypervisor, or a driver that fell back "
    "(dmesg | grep -i -e msi -e intx); lspci -vv -s {bdf} shows 'MSI-X: Enable+' once "
    "the driver uses it, and a reload of the driver (or a reboot) requests the vectors"
)


def _hint(dev: DeviceIRQs, facts: IRQFacts) -> str:
    local = ""
    if dev.numa_node is not None and facts.node_cpus and facts.node_cpus.get(dev.numa_node):
        local = f" ({format_cpulist(facts.node_cpus[dev.numa_node])}, node {dev.numa_node})"
    balance = (
        "irqbalance runs: look for a banned-CPU or policy setting that holds them"
        if facts.irqbalance
        else "start irqbalance (systemctl enable --now irqbalance)"
    )
    return (
        f"{balance}, or write the device's local CPUs{local} to "
        "/proc/irq/<N>/smp_affinity_list for each of its interrupts (the NIC vendor's "
        "set_irq_affinity scripts do this); a port with more queues than its node has CPUs "
        "spreads the rest off the node: ethtool -L <dev> combined <local CPUs>; "
        "kernel-managed NVMe queue interrupts follow the kernel's spreading and cannot be set"
    )


def _legacy(dev: DeviceIRQs, line: LegacyLine) -> str:
    """The finding of a device on its INTx line: one interrupt for every queue."""
    chip = line.chip or "controller unknown"
    others = [
        h for h in line.handlers if not names_device(h, dev.device, dev.kind, dev.pci, line.driver)
    ]
    shared = f", shared with {', '.join(others[:3])}" if others else ""
    served = effective_cpus(dev)
    on = f", served by cpu{format_cpulist(served)}" if served else ""
    return (
        f"legacy INTx: no MSI/MSI-X vectors (msi_irqs {line.listing}), all its queues on "
        f"IRQ {line.line} ({chip}{shared}){on}"
    )


def _judge(dev: DeviceIRQs, facts: IRQFacts) -> Finding:
    subject = dev.device
    total = len(dev.irqs)
    cpus = effective_cpus(dev)
    deviations = []
    hints = []
    if dev.no_msi is not None and dev.no_msi.legacy:
        deviations.append(_legacy(dev, dev.no_msi))
        hints.append(LEGACY_HINT.format(bdf=dev.pci))
    off = remote_irqs(dev, facts.node_cpus)
    if off:
        served = sorted(
            node
            for node, node_cpus in (facts.node_cpus or {}).items()
            if node != dev.numa_node and any(i.effective & node_cpus for i in dev.irqs)
        )
        where = ", ".join(f"node {n}" for n in served)
        deviations.append(
            f"{off} of {total} interrupts served off node {dev.numa_node} (on {where})"
        )
    one_cpu = total > 1 and len(cpus) == 1
    if one_cpu:
        deviations.append(f"all {total} interrupts on cpu{min(cpus)}")
    if len(deviations) > len(hints):
        hints.append(_hint(dev, facts))
    balance = {True: "running", False: "not running", None: "unknown"}[facts.irqbalance]
    context = f"irqbalance {balance}"
    if deviations:
        observed = "; ".join(deviations) + f" ({context})"
        return Finding(subject, True, observed, EXPECTED, "; ".join(hints))
    if dev.no_msi is not None and -1 in dev.unread:
        # No vector listed, and the legacy line does not say why (irqline.py).
        return Finding.cannot_judge(subject, dev.unread[-1], EXPECTED)
    if dev.unread:
        number, reason = min(dev.unread.items())
        what = "the interrupt list" if number < 0 else f"{len(dev.unread)} interrupts"
        return Finding.cannot_judge(subject, f"affinity of {what} unreadable: {reason}", EXPECTED)
    if total == 0:
        if dev.no_msi is not None and dev.no_msi.state is not None:
            why = (
                f"no interrupts requested: no MSI vectors (msi_irqs {dev.no_msi.listing}) "
                f"and {dev.device} is {dev.no_msi.state}"
            )
            return Finding(subject, None, why, EXPECTED)
        return Finding(subject, None, "no interrupts requested (device unused or down)", EXPECTED)
    if not cpus:
        # Only kernel-managed vectors may list no CPU (all theirs offline): none of
        # them is served, so there is no placement to pass.
        why = f"no CPU serves any of its {total} interrupts (effective_affinity_list empty)"
        return Finding.cannot_judge(subject, why, EXPECTED)
    managed = sum(1 for i in dev.irqs if i.managed)
    parts = [f"{total} interrupts on {len(cpus)} CPUs"]
    if managed:
        parts.append(f"{managed} kernel-managed")
    if off is None:
        if dev.numa_error is not None:
            why = f"NUMA node unreadable: {dev.numa_error}"
            return Finding.cannot_judge(subject, "; ".join(parts) + f"; {why}", EXPECTED)
        single = facts.node_cpus is not None and len(facts.node_cpus) <= 1
        parts.append(
            "one NUMA node" if single else "NUMA locality not judged (device node unknown)"
        )
    else:
        parts.append(f"none off node {dev.numa_node}")
    return Finding(subject, False, "; ".join(parts) + f" ({context})", EXPECTED)


@check("irq.affinity", "irq")
def affinity(facts: IRQFacts, params: dict[str, Any]) -> list[Finding]:
    """One result per NVMe controller and network port on PCI: fails when interrupts the
    kernel does not manage are served only by CPUs of another NUMA node than the
    device's, or when all of a device's interrupts are served by one CPU; unknown when
    an affinity file (or the device's NUMA node, on a multi-node host) was unreadable
    and nothing deviates, and for the node when a device class directory is hidden
    from the exporter (a mask over class/nvme). Kernel-managed interrupts (NVMe I/O
    queues) are spread over every node by the kernel so that each CPU completes its own
    I/O: they count for the one-CPU test only. A device on its legacy INTx line (no
    MSI/MSI-X: one interrupt for every queue) fails; one whose msi_irqs lists nothing is
    skipped while it is down and unknown otherwise (hostfs/irqline.py)."""
    # A device class hidden from the exporter (a mask over class/nvme) is unknown, even
    # beside devices of the other class that are judged: its interrupts were not seen.
    hidden = []
    if facts.hidden:
        why = "interrupts not judged: " + "; ".join(facts.hidden)
        hidden.append(Finding.cannot_judge("", why, EXPECTED))
    if not facts.devices:
        return hidden or [
            Finding("", None, "no NVMe controllers or network ports on PCI", EXPECTED)
        ]
    return [*hidden, *(_judge(dev, facts) for dev in facts.devices)]
