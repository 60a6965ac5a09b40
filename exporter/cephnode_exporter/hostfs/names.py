"""Device names as the kernel makes them: PCI functions and NVMe devices, and their order.

Shared by the parsing layer (hostfs/blockdev.py) and device discovery
(:mod:`cephnode_exporter.devices`), which sit above it.
"""

from __future__ import annotations

import re

from cephnode_exporter.hostfs import ParseError

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
# ASCII digits only ("%d"): a str pattern's \d also matches "٣" and other Unicode digits.
CONTROLLER_RE = re.compile(r"^nvme([0-9]+)$")
NAMESPACE_RE = re.compile(r"^nvme([0-9]+)n([0-9]+)$")
PATH_RE = re.compile(r"^nvme([0-9]+)c([0-9]+)n([0-9]+)$")
_DIGITS_RE = re.compile(r"([0-9]+)")


def natural_key(name: str) -> tuple[object, ...]:
    """Sort key that puts nvme2 before nvme10. Only ASCII digit runs count as numbers:
    "eth1²" is a valid interface name, and int("²") raises."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_DIGITS_RE.split(name)))


def utf8_name(name: str, path: str) -> str:
    """``name`` (from listdir or readlink: undecodable bytes become surrogates) when it
    is valid UTF-8, else ParseError. Linux names may hold any byte but '/' (net/core/
    dev.c dev_valid_name() also refuses ':' and whitespace); a Prometheus label value
    must be UTF-8, and one such name would fail the encoding of the whole exposition."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = shown_name(name)[:60]
        raise ParseError(shown_name(path), f"name is not valid UTF-8: '{shown}'") from None
    return name


def shown_name(name: str) -> str:
    """A name or path that may hold surrogate escapes as valid text ("ens\\xff1"), for
    a message that is logged."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
