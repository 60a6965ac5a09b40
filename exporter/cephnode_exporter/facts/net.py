"""Facts of the ``net`` collector, judged by checks/net.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from cephnode_exporter.hostfs import ReadErrors
from cephnode_exporter.hostfs.inet import CephAddresses
from cephnode_exporter.hostfs.net import Interface


@dataclass
class NetFacts:
    # Every interface read, physical and virtual, by name (sorted as discovery sorts).
    interfaces: dict[str, Interface] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)
    ring_source: str = ""
    errors: ReadErrors = field(default_factory=ReadErrors)
    # Where Ceph's daemons listen and on which interfaces (error set when unreadable).
    ceph: CephAddresses = field(default_factory=CephAddresses)
    # Interfaces left out by --collector.net.max-interfaces.
    items_dropped: int = 0

    @property
    def physical(self) -> list[Interface]:
        return [i for i in self.interfaces.values() if not i.virtual]
