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

EXPECTED = "interrupts served on the device's NUMA node, by more than one CPU"


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


def _judge(dev: DeviceIRQs, facts: IRQFacts) -> Finding:
    subject = dev.device
    total = len(dev.irqs)
    cpus = effective_cpus(dev)
    deviations = []
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
    balance = {True: "running", False: "not running", None: "unknown"}[facts.irqbalance]
    context = f"irqbalance {balance}"
    if deviations:
        observed = "; ".join(deviations) + f" ({context})"
        return Finding(subject, True, observed, EXPECTED, _hint(dev, facts))
    if dev.unread:
        number, reason = min(dev.unread.items())
        what = "the interrupt list" if number < 0 else f"{len(dev.unread)} interrupts"
        return Finding.cannot_judge(subject, f"affinity of {what} unreadable: {reason}", EXPECTED)
    if total == 0:
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
    and nothing deviates. Kernel-managed interrupts (NVMe I/O queues) are spread over
    every node by the kernel so that each CPU completes its own I/O: they count for the
    one-CPU test only."""
    if not facts.devices:
        return [Finding("", None, "no NVMe controllers or network ports on PCI", EXPECTED)]
    return [_judge(dev, facts) for dev in facts.devices]
