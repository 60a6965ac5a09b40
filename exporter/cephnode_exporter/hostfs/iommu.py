"""The IOMMU: hardware units, group default-domain types and the boot parameters.

- ``/sys/class/iommu/<unit>``: one entry per IOMMU the kernel drives (``ivhd0``... for AMD,
  ``dmar0``... for Intel VT-d; ``iommu_device_sysfs_add()`` in drivers/iommu/iommu-sysfs.c).
  Empty when the IOMMU is disabled in the BIOS or with ``amd_iommu=off`` /
  ``intel_iommu=off``: then no device's DMA is translated.
- ``/sys/kernel/iommu_groups/<N>/type`` (Documentation/ABI/testing/sysfs-kernel-iommu_groups;
  readable since Linux 5.2, writable since 5.11): the group's *default* domain, printed
  by ``iommu_group_show_type()`` in drivers/iommu/iommu.c as "DMA" (every DMA mapping
  allocates an IOVA and updates the page tables), "DMA-FQ" (the same, with lazy batched
  invalidation; since 5.15), "identity" (passthrough: no translation), "blocked",
  "unmanaged", or "unknown" (no default domain). The type is the default domain, not the
  domain attached right now: a device handed to VFIO keeps showing its default.

The reference cluster's NVMe DMA went through "DMA-FQ" groups: 77 % of CPU samples spun in
``native_queued_spin_lock_slowpath`` under ``alloc_iova`` (drivers/iommu/iova.c).
"""

from __future__ import annotations

import os
import re

from cephnode_exporter.hostfs import HostFS, ParseError, list_dir, read_text

CLASS_DIR = ("class", "iommu")
GROUPS_DIR = ("kernel", "iommu_groups")

# Default-domain types whose DMA is translated (an IOVA per mapping) and the one that is not.
# Others ("blocked", "unmanaged", "unknown", or a type a future kernel adds) say nothing
# certain about the NVMe driver's DMA path, so they get no translated value.
TRANSLATED_TYPES = frozenset({"DMA", "DMA-FQ"})
UNTRANSLATED_TYPES = frozenset({"identity"})

# The IOMMU boot parameters (Documentation/admin-guide/kernel-parameters.txt), exported as
# labels of one info series. The kernel collector leaves them to this one.
CMDLINE_PARAMS = ("iommu", "iommu.passthrough", "iommu.strict", "amd_iommu", "intel_iommu")
# Label value of a parameter given without "=value", as the kernel collector writes it.
FLAG_PRESENT = "1"

# iommu_group_show_type() prints one short word; bound what becomes a label value.
_TYPE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
# Unit names are kobject names such as "ivhd0", "dmar3", "smmu3.0x0000000009050000".
_UNIT_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def dma_translated(domain_type: str | None) -> bool | None:
    """True for DMA and DMA-FQ, False for identity, None for anything else or unknown."""
    if domain_type in TRANSLATED_TYPES:
        return True
    if domain_type in UNTRANSLATED_TYPES:
        return False
    return None


def parse_domain_type(text: str, path: str = "type") -> str:
    """A group's default-domain type as the kernel prints it; an unknown but well-formed
    word is returned as is (a newer kernel's type), garbage raises ParseError."""
    text = text.strip()
    if not _TYPE_RE.fullmatch(text):
        raise ParseError(path, f"not an IOMMU domain type: {text[:40]!r}")
    return text


def read_units(fs: HostFS) -> list[str]:
    """The IOMMU units the kernel registered; [] when none (or no IOMMU support at all).

    Raises OSError when the class directory exists but cannot be listed.
    """
    return [name for name in list_dir(fs.sys(*CLASS_DIR)) if _UNIT_RE.fullmatch(name)]


def units_hidden(fs: HostFS) -> str | None:
    """Why ``class/iommu``, empty or missing to the exporter, is hidden rather than
    showing an IOMMU that is off: a mount over it (hostfs/mounts.py), or IOMMU groups,
    which the kernel makes only for devices an IOMMU driver covers
    (iommu_group_alloc(), drivers/iommu/iommu.c). Asked only when no unit is listed:
    one listing of ``kernel/iommu_groups`` beside the mount table."""
    why = fs.sys_hidden(*CLASS_DIR)
    if why is not None:
        return why
    try:
        groups = list_dir(fs.sys(*GROUPS_DIR))
    except OSError:
        return None  # cannot corroborate; the units' own listing said none
    # VFIO's no-IOMMU mode (vfio.enable_unsafe_noiommu_mode, for DPDK or SPDK) makes groups
    # without any IOMMU, named "vfio-noiommu" (vfio_noiommu_group_alloc(), drivers/vfio/
    # group.c; iommu_group_set_name() adds the `name` file): they corroborate nothing.
    # One read finds a real group on a node whose units are hidden.
    for group in groups:
        try:
            name = read_text(fs.sys(*GROUPS_DIR, group, "name"))
        except (OSError, ParseError):
            name = ""  # groups of IOMMU drivers have no name; an unreadable one counts
        if name != "vfio-noiommu":
            return (
                f"{fs.sys(*CLASS_DIR)} is hidden: it lists no IOMMU unit, but IOMMU group "
                f"{group} exists in {fs.sys(*GROUPS_DIR)}; a mask or a partial sysfs"
            )
    return None


def read_group_type(fs: HostFS, group: str) -> str | None:
    """The default-domain type of IOMMU group ``group``; None when the kernel is older
    than 5.2 and has no ``type`` file. Raises OSError or ParseError; a group directory
    that does not exist at all (a dangling ``iommu_group`` link, or ``iommu_groups``
    hidden from the exporter, which the error then says) is a ParseError."""
    base = fs.sys(*GROUPS_DIR, group)
    path = os.path.join(base, "type")
    try:
        text = read_text(path)
    except FileNotFoundError:
        if not os.path.isdir(base):
            why = fs.sys_hidden(*GROUPS_DIR, group) or "the iommu_group link points to no group"
            raise ParseError(base, why) from None
        return None
    return parse_domain_type(text, path)


def iommu_params(cmdline: dict[str, str]) -> dict[str, str]:
    """The IOMMU parameters of a parsed command line: "" when not given, "1" when given
    without a value, else the value (``iommu=pt`` -> "pt")."""
    out = {}
    for name in CMDLINE_PARAMS:
        if name not in cmdline:
            out[name] = ""
        else:
            out[name] = cmdline[name] or FLAG_PRESENT
    return out
