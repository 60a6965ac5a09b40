"""Device names as the kernel makes them: PCI functions and NVMe devices, and their order.

Shared by the parsing layer (hostfs/blockdev.py) and device discovery
(:mod:`cephnode_exporter.devices`), which sit above it.
"""

from __future__ import annotations

import re

# PCI function names: drivers/pci/probe.c (pci_setup_device) names every function
# "%04x:%02x:%02x.%d" (domain, bus, slot, function). The domain may be wider than four
# digits: Intel VMD puts its NVMe behind domains like 10000 (drivers/pci/controller/vmd.c).
BDF_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

# NVMe names, drivers/nvme/host/core.c (nvme_alloc_ns) and multipath.c:
#   controller            "nvme%d"        ctrl->instance            (class nvme)
#   namespace, no mpath   "nvme%dn%d"     ctrl->instance, head id   (parent: the controller)
#   mpath head (visible)  "nvme%dn%d"     subsys->instance, head id (parent: nvme-subsysN)
#   mpath path (hidden)   "nvme%dc%dn%d"  subsys, ctrl->instance, head id (parent: controller)
# With multipath compiled in but a namespace not shared, the visible name also uses the
# *subsystem* instance while the disk sits under the controller, so "nvme0n1" may belong
# to nvme1: the controller always comes from sysfs, never from the name.
CONTROLLER_RE = re.compile(r"^nvme(\d+)$")
NAMESPACE_RE = re.compile(r"^nvme(\d+)n(\d+)$")
PATH_RE = re.compile(r"^nvme(\d+)c(\d+)n(\d+)$")


def natural_key(name: str) -> tuple[object, ...]:
    """Sort key that puts nvme2 before nvme10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
