"""PCI function attributes: the PCIe link, the NUMA node and the IOMMU group.

ABI: Documentation/ABI/testing/sysfs-bus-pci. Every PCI function is a directory named
like drivers/pci/probe.c names it (``0000:c1:00.0``) under ``/sys/devices/pci<domain>:<bus>/``,
with the bridges above it as parent directories. The link attributes exist only for PCI
Express functions (drivers/pci/pci-sysfs.c, ``pcie_dev_attrs``).

Link speed strings changed with Linux 5.7. Since then ``current_link_speed`` and
``max_link_speed`` print ``pci_speed_string()`` (drivers/pci/probe.c): "2.5 GT/s PCIe",
"5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe",
or "Unknown". Before, pci-sysfs.c had its own switch: "2.5 GT/s", "5 GT/s", "8 GT/s",
"16 GT/s", "32 GT/s" or "Unknown speed". Both spellings parse; the two "unknown" ones mean
the kernel could not decode the register, which is not a read error.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cephnode_exporter.hostfs import (
    BATCH_PAGE,
    AttrFiles,
    ParseError,
    ReadErrors,
    parse_kernel_int,
    read_text,
)

T = TypeVar("T")

# "16.0 GT/s PCIe" (5.7+) or "16 GT/s" (before): a decimal number of gigatransfers per second.
_SPEED_RE = re.compile(r"([0-9]{1,4}(?:\.[0-9]{1,3})?) GT/s(?: PCIe)?")
# What the kernel prints when it cannot decode the link speed field (see the module doc).
UNKNOWN_SPEEDS = frozenset({"Unknown", "Unknown speed"})
# PCIe allows x1..x32; current_link_width is 0 while a link is down.
MAX_LINK_WIDTH = 32
# MAX_NUMNODES is 1 << CONFIG_NODES_SHIFT, at most 10 bits (arch/x86/Kconfig NODES_SHIFT).
MAX_NUMNODES = 1024
# An IOMMU group is a number: iommu_group_alloc() names the kobject "%d" (drivers/iommu/iommu.c).
_GROUP_RE = re.compile(r"[0-9]{1,9}")


def parse_link_speed(text: str, path: str = "link speed") -> float | None:
    """Transfers per second of a ``*_link_speed`` attribute; None when the kernel says
    "Unknown". Anything else the kernel never printed raises ParseError."""
    text = text.strip()
    if text in UNKNOWN_SPEEDS:
        return None
    m = _SPEED_RE.fullmatch(text)
    if m is None:
        raise ParseError(path, f"not a PCIe link speed: {text[:40]!r}")
    # float("2.5") * 1e9 and float("16.0") * 1e9 are exact.
    return float(m.group(1)) * 1e9


def parse_link_width(text: str, path: str = "link width") -> int:
    """Lanes of a ``*_link_width`` attribute (pci-sysfs.c prints ``%u``)."""
    return parse_kernel_int(text, path, 0, MAX_LINK_WIDTH, "a PCIe link width")


def parse_numa_node(text: str, path: str = "numa_node") -> int:
    """A device's NUMA node; -1 (NUMA_NO_NODE) when the firmware does not say."""
    return parse_kernel_int(text, path, -1, MAX_NUMNODES - 1, "a NUMA node")


def format_speed(transfers: float) -> str:
    """16e9 -> "16 GT/s", 2.5e9 -> "2.5 GT/s", for reports."""
    return f"{transfers / 1e9:g} GT/s"


def is_gone(exc: OSError) -> bool:
    """The file or its device went away: ENOENT, or ENODEV from an attribute of a removed
    kernfs node (fs/kernfs/file.c returns it once the node is deactivated)."""
    return isinstance(exc, FileNotFoundError) or exc.errno == errno.ENODEV


# DeviceAttrs.path's joins, built once (the same few hundred every scrape).
_PATHS: dict[tuple[str, str], str] = {}
_PATHS_MAX = 65536


class DeviceAttrs:
    """Reads the attributes of one device directory, one error per unreadable item.

    A missing file is not an error: older kernels lack some attributes (``transport``,
    ``io_poll``). But a device removed in the middle of a scrape also makes its files
    vanish; :meth:`gone` tells the two apart afterwards, so a hot-unplugged device is
    dropped silently instead of being counted as a burst of read errors.
    """

    def __init__(self, base: str, files: AttrFiles | None = None) -> None:
        self.base = base
        self.errors = ReadErrors()
        self.missing = False
        # Kept-open files (read with pread) for attributes read every scrape, while the
        # directory is there: a kept descriptor of a removed sysfs node fails (ENODEV),
        # but one into a tree moved away (a fixture's unplug) would read on.
        kept = files is not None and os.path.isdir(base)
        self._read = files.read_text if files is not None and kept else read_text
        self._files = files if kept else None
        # Texts of kept files read ahead in one batch (prefetch), taken by get().
        self._ahead: dict[str, bytes] = {}

    def path(self, name: str) -> str:
        key = (self.base, name)
        path = _PATHS.get(key)
        if path is None:
            if len(_PATHS) >= _PATHS_MAX:
                _PATHS.clear()
            path = _PATHS[key] = os.path.join(self.base, name)
        return path

    def prefetch(self, names: Sequence[str]) -> None:
        """Read the kept files of ``names`` in one batched call (AttrFiles.read_many);
        :meth:`get` then parses what it read. A file the batch could not read is read
        by :meth:`get` as before, which names the error."""
        if self._files is None:
            return
        paths = [self.path(n) for n in names]
        got = self._files.read_many(paths, BATCH_PAGE)
        self._ahead = {p: data for p, data in zip(paths, got, strict=True) if data is not None}

    def get(self, name: str, parse: Callable[[str, str], T]) -> T | None:
        """The parsed attribute, or None when it is missing or bad (bad is counted)."""
        path = self.path(name)
        try:
            ahead = self._ahead.pop(path, None) if self._ahead else None
            # AttrFiles.read_text's decoding of what the batch read
            text = self._read(path) if ahead is None else ahead.decode("utf-8", "replace").strip()
        except OSError as exc:
            if is_gone(exc):
                self.missing = True
            else:
                self.errors.add(exc)
            return None
        except ParseError as exc:  # read_text refuses a file above MAX_READ_BYTES
            self.errors.add(exc)
            return None
        try:
            return parse(text, path)
        except ParseError as exc:
            self.errors.add(exc)
            return None

    def gone(self) -> bool:
        """True when the device directory itself no longer exists."""
        return self.missing and not os.path.isdir(self.base)


@dataclass(frozen=True)
class LinkState:
    """One end of a PCIe link as the function sees it; None fields are unknown."""

    speed: float | None  # transfers per second
    width: int | None  # lanes


def read_link(attrs: DeviceAttrs, which: str) -> LinkState:
    """``which`` is "current" (the trained link, read every scrape) or "max" (what the
    function supports, static)."""
    return LinkState(
        speed=attrs.get(f"{which}_link_speed", parse_link_speed),
        width=attrs.get(f"{which}_link_width", parse_link_width),
    )


def pci_function_dir(syspath: str, bdf: str) -> str | None:
    """The directory of PCI function ``bdf`` above a device's resolved ``syspath``.

    Discovery names the nearest PCI function above the device; its directory is the
    ancestor with that name (``.../0000:c1:00.0/nvme/nvme3`` -> ``.../0000:c1:00.0``), so
    no extra readlink of ``device`` or ``/sys/bus/pci/devices/<bdf>`` is needed.
    """
    marker = os.sep + bdf + os.sep
    cut = (syspath + os.sep).rfind(marker)
    if cut < 0:
        return None
    return syspath[: cut + len(marker) - 1]


def read_iommu_group(pci_dir: str) -> str | None:
    """The IOMMU group number of a PCI function, from its ``iommu_group`` link
    (``-> ../../../../kernel/iommu_groups/27``); None when the function has no group
    (no IOMMU, or the IOMMU driver does not cover it). Raises OSError or ParseError."""
    path = os.path.join(pci_dir, "iommu_group")
    try:
        target = os.readlink(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "error")
        raise OSError(exc.errno, reason, path) from None
    group = os.path.basename(target.rstrip(os.sep))
    if not _GROUP_RE.fullmatch(group):
        raise ParseError(path, f"not an IOMMU group link: {target[:60]!r}")
    return group
