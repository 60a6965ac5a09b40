"""Collector ``iommu``: is NVMe DMA translated by the IOMMU?

With the IOMMU in a translating mode (default domain ``DMA`` or ``DMA-FQ``), every NVMe
I/O maps its pages through ``iommu_dma_map_sg`` and allocates an IOVA; on the reference
cluster that allocation's spin lock (drivers/iommu/iova.c) took 77 % of CPU samples.
node_exporter says nothing about the IOMMU. This collector reports whether an IOMMU is
active, the IOMMU boot parameters, and for every NVMe controller its IOMMU group, the
group's default-domain type and whether that means translated DMA.

Controllers come from the shared device discovery; a group cannot change while its
device is bound to a driver (the ``type`` file is writable only while it is unbound,
sysfs-kernel-iommu_groups), so the group number is kept until the device set changes.
The type is read on every scrape: ten small files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter import devices
from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    ItemLimit,
    metric_name,
    register,
)
from cephnode_exporter.devices import NvmeController
from cephnode_exporter.facts.iommu import (
    NO_GROUP,
    NO_TYPE_FILE,
    ControllerIommu,
    IommuFacts,
)
from cephnode_exporter.hostfs import ParseError, ReadErrors
from cephnode_exporter.hostfs.cmdline import read_cmdline
from cephnode_exporter.hostfs.iommu import (
    CMDLINE_PARAMS,
    dma_translated,
    iommu_params,
    read_group_type,
    read_units,
    units_hidden,
)
from cephnode_exporter.hostfs.nvme import controllers_hidden
from cephnode_exporter.hostfs.pci import pci_function_dir, read_iommu_group


@register
class IommuCollector(Collector):
    name = "iommu"
    help = "IOMMU units, IOMMU boot parameters, NVMe controllers' IOMMU groups and DMA mode"
    reuse_unchanged = True

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._discovery: devices.DeviceDiscovery | None = devices.acquire(ctx.fs)
        self._generation = -1
        self._groups: dict[str, str | None] = {}  # controller syspath -> group
        # The nvme collector's cap on controllers, so that both export the same ones.
        limit = int(ctx.options.collector_nvme_max_devices)
        self._limit = ItemLimit(self.name, "controllers", "--collector.nvme.max-devices", limit)

    def close(self) -> None:
        if self._discovery is not None:
            devices.release(self._discovery)
            self._discovery = None

    def read(self) -> IommuFacts:
        if self._discovery is None:
            raise RuntimeError("collector closed")
        fs = self.ctx.fs
        errors = ReadErrors()
        units: list[str] | None = None
        hidden: str | None = None
        try:
            units = read_units(fs)
        except OSError as exc:
            errors.add(exc)
        if units == []:
            # No unit: the IOMMU is off, unless the class is hidden from the exporter;
            # then the units are unknown, not none (no "no IOMMU active" pass).
            hidden = units_hidden(fs)
            if hidden is not None:
                units = None
        params: dict[str, str] | None = None
        try:
            params = iommu_params(read_cmdline(fs))
        except (OSError, ParseError) as exc:
            errors.add(exc)
        facts = IommuFacts(units, params, errors=errors, units_hidden=hidden)
        snap = self._discovery.devices()
        if snap.generation != self._generation:
            self._groups.clear()
            self._generation = snap.generation
        controllers, facts.items_dropped = self._limit.keep(snap.nvme_controllers)
        for ctrl in controllers:
            c = self._controller(ctrl, units, errors, hidden)
            if c is not None:
                facts.controllers.append(c)
        if not snap.nvme_controllers:
            disks = [ns.name for ns in snap.nvme_namespaces]
            facts.controllers_hidden = controllers_hidden(fs, disks)
        return facts

    def _controller(
        self,
        ctrl: NvmeController,
        units: list[str] | None,
        errors: ReadErrors,
        hidden: str | None = None,
    ) -> ControllerIommu | None:
        name = ctrl.name
        if ctrl.pci is None:
            return ControllerIommu(name, None, None, None, "not a PCI device (NVMe over fabrics)")
        pci_dir = pci_function_dir(ctrl.syspath, ctrl.pci)
        if pci_dir is None:
            return ControllerIommu(name, None, None, None, f"PCI function {ctrl.pci} not found")
        cached = ctrl.syspath in self._groups
        if cached:
            group = self._groups[ctrl.syspath]
        else:
            try:
                group = read_iommu_group(pci_dir)
            except (OSError, ParseError) as exc:
                return None if _gone(pci_dir) else _unreadable(name, None, errors, exc)
        # One stat per controller and scrape: a device hot-unplugged since discovery listed
        # it is dropped, not reported with a stale group (its number may be reused).
        if _gone(pci_dir):
            self._groups.pop(ctrl.syspath, None)
            return None
        if not cached:
            self._groups[ctrl.syspath] = group
        if group is None:
            if units is None:
                why = f"IOMMU state unknown: {hidden}" if hidden else "IOMMU state unreadable"
                return ControllerIommu(name, None, None, None, why, True)
            if not units:
                return ControllerIommu(name, None, None, False, "no IOMMU active")
            # An active IOMMU that does not cover the device, or a tree that lost the link:
            # the DMA path is not certain either way.
            why = f"no IOMMU group although {len(units)} IOMMU unit(s) are active"
            return ControllerIommu(name, None, None, None, why, undecided=NO_GROUP)
        try:
            domain_type = read_group_type(self.ctx.fs, group)
        except (OSError, ParseError) as exc:
            # A removed device takes its group with it: drop it, do not count an error.
            return None if _gone(pci_dir) else _unreadable(name, group, errors, exc)
        if domain_type is None:
            why = "the kernel has no iommu_groups/<N>/type file (before Linux 5.2)"
            return ControllerIommu(name, group, None, None, why, undecided=NO_TYPE_FILE)
        translated = dma_translated(domain_type)
        why = {
            True: "translated",
            False: "passthrough",
            None: "this type does not tell whether DMA is translated",
        }[translated]
        return ControllerIommu(name, group, domain_type, translated, why)

    def metrics(self, facts: IommuFacts) -> Iterable[Metric]:
        if facts.units is not None:
            units = GaugeMetricFamily(
                metric_name("iommu_units"),
                "IOMMU hardware units the kernel drives (/sys/class/iommu); 0 means no "
                "device's DMA is translated.",
            )
            units.add_metric([], float(len(facts.units)))
            yield units
        if facts.params is not None:
            labels = [p.replace(".", "_") for p in CMDLINE_PARAMS]
            params = GaugeMetricFamily(
                metric_name("iommu_kernel_params_info"),
                "IOMMU parameters on the kernel command line (empty when not given).",
                labels=labels,
            )
            params.add_metric([facts.params[p] for p in CMDLINE_PARAMS], 1.0)
            yield params
        info = GaugeMetricFamily(
            metric_name("iommu_group_info"),
            "The IOMMU group of an NVMe controller and the group's default-domain type "
            "(DMA, DMA-FQ, identity, blocked, unmanaged, unknown; empty when unreadable or "
            "before Linux 5.2).",
            labels=["controller", "group", "type"],
        )
        translated = GaugeMetricFamily(
            metric_name("iommu_dma_translated"),
            "1 when the NVMe controller's DMA goes through IOMMU translation (group type "
            "DMA or DMA-FQ), 0 when not (identity, or no IOMMU); absent when unknown.",
            labels=["controller"],
        )
        for c in facts.controllers:
            if c.group is not None:
                info.add_metric([c.controller, c.group, c.domain_type or ""], 1.0)
            if c.translated is not None:
                translated.add_metric([c.controller], 1.0 if c.translated else 0.0)
        yield info
        yield translated


def _gone(path: str) -> bool:
    return not os.path.isdir(path)


def _unreadable(
    name: str, group: str | None, errors: ReadErrors, exc: BaseException
) -> ControllerIommu:
    errors.add(exc)
    return ControllerIommu(name, group, None, None, f"unreadable: {exc}", True)
