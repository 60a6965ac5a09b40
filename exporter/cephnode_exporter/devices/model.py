"""Device records and the one rule set that turns raw sysfs entries into them.

Both enumerators (:mod:`.sysfs` on a HostFS tree, :mod:`.udev` through pyudev) reduce what
they find to :class:`RawEntry` tuples and hand them to :func:`assemble`, so the records a
collector sees cannot depend on which enumerator produced them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, TypeVar

from cephnode_exporter.hostfs.names import (
    BDF_RE,
    CONTROLLER_RE,
    NAMESPACE_RE,
    PATH_RE,
    natural_key,
)

NVME_CONTROLLER = "nvme_controller"
NVME_NAMESPACE = "nvme_namespace"
NET = "net"


@dataclass(frozen=True)
class Device:
    """What every discovered device has. ``kind`` is a class constant of each subclass."""

    kind: ClassVar[str]
    name: str
    # Resolved sysfs directory of the device (under the HostFS sysfs root).
    syspath: str
    # Nearest PCI function above the device in sysfs: the NVMe controller or NIC function
    # itself, the virtio PCI function of a virtio NIC, the host controller of a USB NIC.
    # None for virtual devices and fabrics controllers.
    pci: str | None


@dataclass(frozen=True)
class NvmeController(Device):
    """An NVMe controller, /sys/class/nvme/nvmeX (PCIe or fabrics)."""

    kind: ClassVar[str] = NVME_CONTROLLER


@dataclass(frozen=True)
class NvmePath:
    """A hidden per-path disk of native NVMe multipath, nvme{S}c{C}n{H}: the blk-mq disk
    that carries the I/O of head nvme{S}n{H} through controller ``controller``.

    drivers/nvme/host/core.c allocates it under the controller (``ctrl->device``) with
    GENHD_FL_HIDDEN, so it has no /dev node and, since Linux 5.15, never sends a uevent
    (block/genhd.c: "for hidden disks uevents remain suppressed forever"); it is still in
    /sys/class/block and /sys/block. Its ``queue/`` is the request queue: the scheduler,
    nr_requests, rq_affinity, nomerges, io_poll, wbt and the ``mq/`` hardware contexts.
    """

    name: str
    controller: str
    # Resolved sysfs directory of the path disk.
    syspath: str


@dataclass(frozen=True)
class NvmeNamespace(Device):
    """A visible NVMe block device (nvmeXnY), the name node_exporter's diskstats uses.

    ``controllers`` are the controllers that reach the namespace: one without native
    multipath; with it, one per path. ``multipath`` marks a native multipath head: a
    bio-based disk under /sys/devices/virtual/nvme-subsystem/nvme-subsysN
    (drivers/nvme/host/multipath.c ``nvme_mpath_alloc_disk``) whose bios are resubmitted
    to one of ``paths``, the hidden per-path disks, by ``nvme_ns_head_submit_bio``. The
    head's own queue has no scheduler; its request-queue settings are the paths'.
    ``pci`` is None for a multipath head (it lives under /sys/devices/virtual); look the
    controllers up instead.
    """

    kind: ClassVar[str] = NVME_NAMESPACE
    controllers: tuple[str, ...] = ()
    paths: tuple[NvmePath, ...] = ()
    multipath: bool = False

    @property
    def controller(self) -> str | None:
        """The controller of a single-path namespace; the first path's for a shared one."""
        return self.controllers[0] if self.controllers else None


@dataclass(frozen=True)
class NetInterface(Device):
    """A network interface, /sys/class/net/X; ``virtual`` when it lives under
    /sys/devices/virtual/net (lo, bridges, veth, bonds, VLANs: no ``device`` link)."""

    kind: ClassVar[str] = NET
    virtual: bool = False


D = TypeVar("D", bound=Device)


class DeviceClass(StrEnum):
    """The kernel device class (sysfs ``class/<name>``, udev subsystem) an enumeration
    error belongs to, so each collector counts the errors of its own devices."""

    NVME = "nvme"
    BLOCK = "block"
    NET = "net"


@dataclass(frozen=True)
class DiscoveryError:
    """An item of one device class that could not be enumerated; ``message`` names the
    path (or the udev subsystem) and the reason."""

    device_class: DeviceClass
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Enumeration:
    """One pass over the host: the devices and the items that could not be read."""

    devices: tuple[Device, ...]
    errors: tuple[DiscoveryError, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """An immutable device set. ``generation`` grows by one whenever the set changes."""

    generation: int
    devices: tuple[Device, ...]
    errors: tuple[DiscoveryError, ...] = ()
    # time.monotonic() of the enumeration
    taken_at: float = 0.0

    def of(self, cls: type[D]) -> tuple[D, ...]:
        return tuple(d for d in self.devices if isinstance(d, cls))

    @property
    def nvme_controllers(self) -> tuple[NvmeController, ...]:
        return self.of(NvmeController)

    @property
    def nvme_namespaces(self) -> tuple[NvmeNamespace, ...]:
        return self.of(NvmeNamespace)

    @property
    def net_interfaces(self) -> tuple[NetInterface, ...]:
        return self.of(NetInterface)

    def find(self, cls: type[D], name: str) -> D | None:
        return next((d for d in self.of(cls) if d.name == name), None)


@dataclass(frozen=True)
class RawEntry:
    """One class entry as an enumerator found it, before the NVMe rules are applied."""

    name: str
    syspath: str
    # Name of the device directory above this one (the controller of a namespace).
    parent: str | None
    pci: str | None
    virtual: bool


@dataclass
class RawScan:
    controllers: list[RawEntry] = field(default_factory=list)
    disks: list[RawEntry] = field(default_factory=list)
    nets: list[RawEntry] = field(default_factory=list)
    errors: list[DiscoveryError] = field(default_factory=list)


def assemble(scan: RawScan) -> Enumeration:
    """Apply the NVMe naming rules and build sorted, immutable records."""
    devices: list[Device] = []
    for e in scan.controllers:
        if CONTROLLER_RE.match(e.name):
            devices.append(NvmeController(e.name, e.syspath, e.pci))

    # Hidden per-path disks nvme{S}c{C}n{H} belong to head nvme{S}n{H}; their parent
    # directory is controller C (drivers/nvme/host/core.c adds them under ctrl->device).
    paths: dict[str, list[NvmePath]] = {}
    for e in scan.disks:
        m = PATH_RE.match(e.name)
        if m and e.parent and CONTROLLER_RE.match(e.parent):
            head = f"nvme{m.group(1)}n{m.group(3)}"
            paths.setdefault(head, []).append(NvmePath(e.name, e.parent, e.syspath))
    for e in scan.disks:
        if not NAMESPACE_RE.match(e.name):
            continue  # partitions, hidden paths, other disks
        if e.parent and CONTROLLER_RE.match(e.parent):
            devices.append(NvmeNamespace(e.name, e.syspath, e.pci, (e.parent,)))
            continue
        # a multipath head under nvme-subsystem/nvme-subsysN
        found = tuple(sorted(paths.get(e.name, []), key=lambda p: natural_key(p.controller)))
        controllers = tuple(p.controller for p in found)
        devices.append(NvmeNamespace(e.name, e.syspath, e.pci, controllers, found, True))

    for e in scan.nets:
        devices.append(NetInterface(e.name, e.syspath, e.pci, e.virtual))

    order = {NVME_CONTROLLER: 0, NVME_NAMESPACE: 1, NET: 2}
    devices.sort(key=lambda d: (order[d.kind], natural_key(d.name)))
    return Enumeration(tuple(devices), tuple(scan.errors))


def nearest_pci(components: Iterable[str]) -> str | None:
    """The last PCI function name among path components (root first)."""
    found = None
    for part in components:
        if BDF_RE.match(part):
            found = part
    return found


class DeviceSource(ABC):
    """An enumerator: a full, fresh list of devices on every call."""

    # "sysfs" or "udev": exported later as the discovery backend
    backend: ClassVar[str]

    @abstractmethod
    def enumerate(self) -> Enumeration:
        """Read the host. Per-item failures go to ``errors``; never raises for I/O."""
