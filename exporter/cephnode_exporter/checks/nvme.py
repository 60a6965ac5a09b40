"""Checks ``nvme.scheduler`` (per namespace) and ``nvme.pcie_link`` (per controller)."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.nvme import ControllerFacts, NamespaceFacts, NvmeFacts
from cephnode_exporter.hostfs.pci import LinkState, format_speed

# A udev rule applies the scheduler to every NVMe namespace when it appears (boot,
# hot-plug, rescan); the kernel names namespaces nvme<ctrl>n<ns> (docs/devices.md).
UDEV_RULE_FILE = "/etc/udev/rules.d/60-nvme-scheduler.rules"
UDEV_RULE = 'ACTION=="add|change", KERNEL=="nvme[0-9]*n[0-9]*", ATTR{{queue/scheduler}}="{name}"'


def _validate_allowed(params: dict[str, Any]) -> None:
    allowed = params["allowed"]
    if not allowed or not all(isinstance(s, str) and s.strip() for s in allowed):
        raise ValueError("allowed must be a non-empty list of scheduler names")


@check("nvme.scheduler", "nvme", validate=_validate_allowed, allowed=list[str])
def scheduler(facts: NvmeFacts, params: dict[str, Any]) -> list[Finding]:
    """An NVMe namespace should run no I/O scheduler: the drive has deep queues of its
    own, and mq-deadline or bfq add a lock and request sorting to every I/O
    (Documentation/block/switching-sched.rst lists the schedulers).

    Under native NVMe multipath the namespace's visible disk is a bio-based head with no
    scheduler; the I/O is queued on its hidden path disks (one per controller), so those
    are judged, every one: a namespace fails when any path runs another scheduler, since
    any path may carry its I/O (after a failover, or always with round-robin). The
    subject stays the namespace, the name the OSD, node_exporter and the alerts know; the
    paths are named in ``observed`` and the hint."""
    allowed = list(params["allowed"])
    expected = f"I/O scheduler {' or '.join(allowed)}"
    if not facts.namespaces:
        if facts.namespaces_hidden is not None:
            return [Finding.cannot_judge("", facts.namespaces_hidden, expected)]
        return [Finding("", None, "no NVMe namespaces on this node", expected)]
    return [
        _multipath_scheduler(ns, allowed, expected)
        if ns.multipath
        else _scheduler(ns, allowed, expected)
        for ns in facts.namespaces
    ]


def _scheduler(ns: NamespaceFacts, allowed: list[str], expected: str) -> Finding:
    active = ns.queue.scheduler
    if active is None:
        return Finding.cannot_judge(ns.name, "queue/scheduler unreadable", expected)
    if active in allowed:
        return Finding(ns.name, False, active, expected)
    want = allowed[0]
    hint = (
        f"echo {want} > /sys/block/{ns.name}/queue/scheduler; to keep it across reboots "
        f"and hot-plugs, put this line in {UDEV_RULE_FILE}: {UDEV_RULE.format(name=want)}"
    )
    return Finding(ns.name, True, active, expected, hint)


def _multipath_scheduler(ns: NamespaceFacts, allowed: list[str], expected: str) -> Finding:
    if not ns.paths:
        reason = (
            "native multipath head without a path disk: no request queue to judge "
            "(all paths removed, or an unreadable sysfs)"
        )
        return Finding.cannot_judge(ns.name, reason, expected)
    observed = ", ".join(f"{p.queue.scheduler or 'unreadable'} on {p.name}" for p in ns.paths)
    bad = [p for p in ns.paths if p.queue.scheduler not in (None, *allowed)]
    if bad:
        want = allowed[0]
        echo = "; ".join(f"echo {want} > /sys/block/{p.name}/queue/scheduler" for p in bad)
        hint = (
            f"{echo}: under native NVMe multipath the hidden path disk queues the I/O of "
            f"{ns.name}, which is bio-based and has no scheduler. Then remove what set it: "
            "the kernel picks mq-deadline itself only for a queue with one hardware queue, "
            "and hidden disks get no uevents since Linux 5.15 (before, only udevadm "
            "trigger's at boot, when the rule of the plain namespaces reaches them too: "
            f"{UDEV_RULE.format(name=want)} in {UDEV_RULE_FILE}), so look for a tuned "
            "[disk] elevator= or a script writing /sys/block/nvme*/queue/scheduler"
        )
        return Finding(ns.name, True, observed, expected, hint)
    if any(p.queue.scheduler is None for p in ns.paths):
        return Finding.cannot_judge(ns.name, f"queue/scheduler unreadable: {observed}", expected)
    return Finding(ns.name, False, observed, expected)


def _describe(state: LinkState) -> str:
    width = f"x{state.width}" if state.width is not None else "x?"
    speed = format_speed(state.speed) if state.speed is not None else "unknown speed"
    return f"{width} at {speed}"


def _link_finding(c: ControllerFacts) -> Finding:
    if c.pci is None or c.link is None or c.max_link is None:
        transport = c.identity.transport or "not PCIe"
        return Finding(c.name, None, f"no PCIe link ({transport})", "link at its maximum")
    cur, top = c.link, c.max_link
    expected = f"link at its maximum, {_describe(top)}"
    lost = []
    if cur.width is not None and top.width is not None and cur.width < top.width:
        lost.append(f"{cur.width} of {top.width} lanes")
    if cur.speed is not None and top.speed is not None and cur.speed < top.speed:
        lost.append(f"{format_speed(cur.speed)} of {format_speed(top.speed)}")
    if lost:
        observed = f"{_describe(cur)} (maximum {_describe(top)})"
        hint = (
            f"the link trained down ({', '.join(lost)}): check with "
            f"lspci -vv -s {c.pci} (LnkSta against LnkCap); reseat the drive or check its "
            "backplane, riser and cable; check the BIOS PCIe link speed setting of the slot "
            "(Auto or the drive's generation)"
        )
        return Finding(c.name, True, observed, expected, hint)
    if None in (cur.speed, cur.width, top.speed, top.width):
        # Unreadable, or "Unknown" from the kernel: the link cannot be judged, and a link
        # that trained down must not pass for want of its speed.
        observed = f"{_describe(cur)} (maximum {_describe(top)})"
        return Finding.cannot_judge(c.name, f"link state not fully known: {observed}", expected)
    return Finding(c.name, False, f"{_describe(cur)}, the maximum", expected)


@check("nvme.pcie_link", "nvme")
def pcie_link(facts: NvmeFacts, params: dict[str, Any]) -> list[Finding]:
    """A controller whose PCIe link trained below its maximum speed or width loses
    bandwidth silently: x4 at 16 GT/s carries about 7.9 GB/s, x2 at 8 GT/s a quarter of
    that. PCIe link power management (ASPM) changes link states, not the speed or width
    reported here; a device that lowers its speed when idle (some GPUs do) would need the
    check disabled in the profile."""
    if not facts.controllers:
        if facts.controllers_hidden is not None:
            return [Finding.cannot_judge("", facts.controllers_hidden, "link at its maximum")]
        return [Finding("", None, "no NVMe controllers on this node", "link at its maximum")]
    return [_link_finding(c) for c in facts.controllers]
