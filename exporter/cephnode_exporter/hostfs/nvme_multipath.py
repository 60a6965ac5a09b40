"""Native NVMe multipath: the ANA state of each path and the I/O policy of each subsystem.

Formats (drivers/nvme/host/multipath.c):
  - ``<path disk>/ana_state`` (``nvme2c2n1/ana_state``): ``nvme_ana_state_names[]`` of the
    namespace's ANA group as the controller last reported it (the Asymmetric Namespace
    Access log page of the NVMe Base Specification): "optimized", "non-optimized",
    "inaccessible", "persistent-loss", "change", and "invalid state" before the first
    log was read. Shown only on path disks, and only for controllers that use ANA
    (drivers/nvme/host/sysfs.c ``nvme_ns_attrs_are_visible``, in core.c before the
    split; ``nvme_ctrl_use_ana``): a PCIe drive without ANA reporting, or a controller whose
    ANA setup failed ("disabling ANA support" in the kernel log), has none. The path
    selector uses only optimized paths, non-optimized ones when no optimized path is
    left, and never the others (``__nvme_find_path``).
  - ``/sys/class/nvme-subsystem/nvme-subsysN/iopolicy``: ``nvme_iopolicy_names[]``, how
    the head spreads I/O over its usable paths: "numa" (the nearest optimized path,
    the default: the iopolicy module parameter), "round-robin", "queue-depth" (6.11 on).
    Writable at runtime, so read every scrape. Other names may come (proposals add
    "latency", "service-time"), so any lower-case name is taken as it is.

A missing ``ana_state`` is the kernel's way of saying "no ANA" and is not an error, except
where a sibling path of the same head shows one: then it is a fault of that controller
(or of the tree) and counted. A missing ``iopolicy`` is an older kernel, unless another
subsystem of the same tree has one.
"""

from __future__ import annotations

import os
import re

from cephnode_exporter.hostfs import ParseError
from cephnode_exporter.hostfs.pci import DeviceAttrs

# drivers/nvme/host/multipath.c nvme_ana_state_names[], indexed by enum nvme_ana_state
# (include/linux/nvme.h: NVME_ANA_OPTIMIZED 0x01 ... NVME_ANA_CHANGE 0x0f); entry 0 is
# shown until the controller's first ANA log page is read. States 5-14 have no name
# (the kernel would print "(null)"): not a state, a read error.
ANA_STATES = (
    "optimized",
    "non-optimized",
    "inaccessible",
    "persistent-loss",
    "change",
    "invalid state",
)
# nvme_iopolicy_names[] entries are short lower-case words joined by dashes.
_IOPOLICY_RE = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_MAX_IOPOLICY = 32
# The directory of a subsystem: nvme-subsys%d (drivers/nvme/host/core.c
# nvme_init_subsystem, dev_set_name(&subsys->dev, "nvme-subsys%d", ...)).
SUBSYSTEM_RE = re.compile(r"nvme-subsys[0-9]+")


def parse_ana_state(text: str, path: str = "ana_state") -> str:
    state = text.strip()
    if state not in ANA_STATES:
        raise ParseError(path, f"not an ANA state: {state[:40]!r}")
    return state


def parse_iopolicy(text: str, path: str = "iopolicy") -> str:
    policy = text.strip()
    if len(policy) > _MAX_IOPOLICY or not _IOPOLICY_RE.fullmatch(policy):
        raise ParseError(path, f"not an I/O policy: {policy[:40]!r}")
    return policy


def read_ana_state(attrs: DeviceAttrs) -> tuple[str | None, bool]:
    """The ANA state of a path disk (``attrs`` is its directory) and whether the kernel
    showed the attribute at all: (None, False) for a controller without ANA; (None,
    True) when it was unreadable or not a state (counted in ``attrs.errors``)."""
    before = len(attrs.errors)
    state = attrs.get("ana_state", parse_ana_state)
    absent = state is None and len(attrs.errors) == before
    return state, not absent


def subsystem_dir(head_syspath: str) -> tuple[str, str] | None:
    """The name and directory of the subsystem a multipath head belongs to: the head is
    added under the subsystem device (multipath.c nvme_mpath_set_live,
    ``device_add_disk(&head->subsys->dev, ...)``), so it is the head's parent. None
    when the parent is not one (a head discovery found elsewhere)."""
    parent = os.path.dirname(head_syspath)
    name = os.path.basename(parent)
    return (name, parent) if SUBSYSTEM_RE.fullmatch(name) else None


def read_iopolicy(attrs: DeviceAttrs) -> tuple[str | None, bool]:
    """The I/O policy of a subsystem (``attrs`` is its directory) and whether the kernel
    showed it, as :func:`read_ana_state`."""
    before = len(attrs.errors)
    policy = attrs.get("iopolicy", parse_iopolicy)
    absent = policy is None and len(attrs.errors) == before
    return policy, not absent


def missing_among_siblings(what: str, absent: list[str], shown: list[str], why: str) -> str:
    """The error text for an attribute missing on some items while their siblings show
    it: the kernel shows it on all of them or on none (``why``)."""
    more = " and more" if len(shown) > 3 else ""
    verb = "shows" if len(shown) == 1 else "show"
    others = ", ".join(shown[:3]) + more
    return f"{what} missing on {', '.join(absent)} while {others} {verb} it ({why})"
