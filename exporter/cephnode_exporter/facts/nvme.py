"""Facts of the ``nvme`` collector, judged by checks/nvme.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from cephnode_exporter.hostfs import ReadErrors
from cephnode_exporter.hostfs.nvme import BlockQueue, ControllerIdentity
from cephnode_exporter.hostfs.pci import LinkState


@dataclass(frozen=True)
class ControllerFacts:
    name: str
    pci: str | None  # PCI function, None for fabrics controllers
    identity: ControllerIdentity
    queue_count: int | None
    link: LinkState | None  # the trained link; None without a PCI function
    max_link: LinkState | None
    temperature_celsius: float | None = None


@dataclass(frozen=True)
class PathFacts:
    """A hidden path disk of a native multipath head (nvme2c2n1) and its request queue."""

    name: str
    controller: str
    queue: BlockQueue
    # The path's ANA state (hostfs/nvme_multipath.py ANA_STATES); None when the
    # controller does not use ANA (no attribute) or it was unreadable (counted).
    ana_state: str | None = None


@dataclass(frozen=True)
class SubsystemFacts:
    """An NVMe subsystem with a native multipath head (nvme-subsys2) and its I/O policy
    (numa, round-robin, queue-depth; None when not shown, or unreadable: counted)."""

    name: str
    iopolicy: str | None


@dataclass(frozen=True)
class NamespaceFacts:
    """A visible namespace. Without multipath ``queue`` holds every setting; for a
    multipath head (``multipath``) it holds the disk's (read-ahead, request size,
    in-flight) and each of ``paths`` its request queue's (scheduler, nr_requests, ...):
    devices/model.py NvmeNamespace, hostfs/nvme.py REQUEST_COUNTS."""

    name: str
    controllers: tuple[str, ...]
    queue: BlockQueue
    paths: tuple[PathFacts, ...] = ()
    multipath: bool = False


@dataclass
class NvmeFacts:
    controllers: list[ControllerFacts] = field(default_factory=list)
    namespaces: list[NamespaceFacts] = field(default_factory=list)
    # The subsystems of the multipath heads read, each once.
    subsystems: list[SubsystemFacts] = field(default_factory=list)
    generation: int = 0
    errors: ReadErrors = field(default_factory=ReadErrors)
    # Controllers plus namespaces left out by --collector.nvme.max-devices.
    items_dropped: int = 0
    # Why no controller (namespace) was found although the node may have some: its
    # class directory is hidden from the exporter (hostfs/nvme.py controllers_hidden,
    # namespaces_hidden). None when some were found, or when none exist.
    controllers_hidden: str | None = None
    namespaces_hidden: str | None = None
