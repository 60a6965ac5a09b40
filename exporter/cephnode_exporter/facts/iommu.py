"""Facts of the ``iommu`` collector, judged by checks/iommu.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from cephnode_exporter.hostfs import ReadErrors

# Why sysfs does not show the DMA path of a controller that an active IOMMU may cover
# (ControllerIommu.undecided); the check then asks the kernel command line.
NO_TYPE_FILE = "no_type_file"  # a group, but no iommu_groups/<N>/type (before Linux 5.2)
NO_GROUP = "no_group"  # IOMMU units active, but no iommu_group link on the PCI function


@dataclass(frozen=True)
class ControllerIommu:
    """How one NVMe controller's DMA reaches memory.

    ``translated`` is None when it cannot be told (see ``why``): a fabrics controller, an
    unreadable link or type, a kernel without the type file, a type such as "blocked".
    """

    controller: str
    group: str | None
    domain_type: str | None
    translated: bool | None
    why: str
    # True when ``translated`` is None because a file was unreadable (the check says
    # unknown), not because the kernel's state cannot tell (the check skips).
    unreadable: bool = False
    # NO_TYPE_FILE or NO_GROUP when ``translated`` is None because sysfs does not show
    # the mode of an IOMMU that is active: the kernel command line may tell, else the
    # check says unknown. "" otherwise.
    undecided: str = ""


@dataclass
class IommuFacts:
    units: list[str] | None  # None: /sys/class/iommu unreadable or hidden
    params: dict[str, str] | None  # None: /proc/cmdline unreadable
    controllers: list[ControllerIommu] = field(default_factory=list)
    errors: ReadErrors = field(default_factory=ReadErrors)
    # Controllers left out by --collector.nvme.max-devices.
    items_dropped: int = 0
    # Why no NVMe controller was found although the node may have some (hostfs/nvme.py
    # controllers_hidden); why ``units`` is None though class/iommu could be listed: it
    # is hidden from the exporter (hostfs/iommu.py units_hidden), not empty.
    controllers_hidden: str | None = None
    units_hidden: str | None = None

    @property
    def active(self) -> bool | None:
        return None if self.units is None else bool(self.units)
