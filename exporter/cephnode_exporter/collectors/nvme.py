"""Collector ``nvme``: NVMe controllers, their PCIe links, and their namespaces' queues.

A controller that trained its link down (x2 instead of x4, 8 instead of 16 GT/s) halves
or quarters one OSD's bandwidth without any error; a namespace left on ``mq-deadline``
adds a lock and sorting to every I/O. Neither shows up in node_exporter, whose diskstats
this collector does not repeat: its ``device`` label is the same block device name
(``nvme0n1``), so the two join in PromQL. Under native NVMe multipath the visible
namespace is a bio-based head: its request-queue settings (the scheduler above all) are
read from, and exported under, its hidden path disks (``nvme2c2n1``), and the head keeps
the disk's own (hostfs/nvme.py REQUEST_COUNTS).

Devices come from the shared discovery (:mod:`cephnode_exporter.devices`), so a drive that
is hot-plugged appears on the next scrape and a removed one disappears. What cannot
change while a controller exists (identify strings, NUMA node, maximum link, where its
hwmon lives) is read once and kept until the device set changes; the link state, queue
settings and in-flight counts are read on every scrape. At most
``--collector.nvme.max-devices`` controllers and as many namespaces are read, the first
by name, so that a fault showing thousands of devices cannot flood Prometheus.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter import devices
from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    ItemLimit,
    bounded,
    metric_name,
    register,
)
from cephnode_exporter.devices import DeviceClass, NvmeController, NvmeNamespace
from cephnode_exporter.facts.nvme import (
    ControllerFacts,
    NamespaceFacts,
    NvmeFacts,
    PathFacts,
    SubsystemFacts,
)
from cephnode_exporter.hostfs import AttrFiles, ReadErrors, fd_budget
from cephnode_exporter.hostfs.nvme import (
    ControllerIdentity,
    controllers_hidden,
    find_hwmon,
    namespaces_hidden,
    parse_count,
    parse_millicelsius,
    read_block_queue,
    read_identity,
)
from cephnode_exporter.hostfs.nvme_multipath import (
    missing_among_siblings,
    read_ana_state,
    read_iopolicy,
    subsystem_dir,
)
from cephnode_exporter.hostfs.pci import DeviceAttrs, LinkState, pci_function_dir, read_link

US_PER_S = 1e6
KIB = 1024
# Controllers, and namespaces, read per scrape. A dense node has 24 to 36 NVMe drives
# (E3.S chassis: up to 40), each with one namespace; about 14 series each.
DEFAULT_MAX_DEVICES = 256
# Discovery errors that concern this collector: NVMe and block class entries.
_MY_CLASSES = frozenset({DeviceClass.NVME, DeviceClass.BLOCK})


@dataclass(frozen=True)
class _Static:
    """The cached part of a controller."""

    identity: ControllerIdentity
    pci_dir: str | None
    max_link: LinkState | None
    hwmon: str | None


@register
class NvmeCollector(Collector):
    name = "nvme"
    help = "NVMe controllers (identity, NUMA node, queues, PCIe link) and namespace block queues"
    reuse_unchanged = True

    # Share of the descriptor limit (cpuidle keeps 0.5, OSD threads 0.25, irq 0.1).
    FD_SHARE = 0.05

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._temperature = bool(ctx.options.collector_nvme_temperature)
        self._discovery: devices.DeviceDiscovery | None = devices.acquire(ctx.fs)
        self._generation = -1
        self._static: dict[str, _Static] = {}
        # The attributes read every scrape, kept open and re-read with pread (one
        # syscall instead of open, fstat, read, close); recheck: a file replaced in a
        # copied tree is opened afresh. Closed when the device set changes.
        self._files = AttrFiles(fd_budget(self.FD_SHARE), recheck=True)
        limit = int(ctx.options.collector_nvme_max_devices)
        flag = "--collector.nvme.max-devices"
        self._controller_limit = ItemLimit(self.name, "controllers", flag, limit)
        self._namespace_limit = ItemLimit(self.name, "namespaces", flag, limit)

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--collector.nvme.temperature",
            dest="collector_nvme_temperature",
            action="store_true",
            help="export the drives' composite temperature; every read sends a SMART log "
            "admin command to the drive (default: off)",
        )
        parser.add_argument(
            "--collector.nvme.max-devices",
            dest="collector_nvme_max_devices",
            type=bounded(int, 1, 65536),
            default=DEFAULT_MAX_DEVICES,
            metavar="N",
            help="read and export at most this many NVMe controllers, and as many "
            "namespaces, the first by name; the others are counted in "
            "cephnode_scrape_collector_items_dropped (default: %(default)s)",
        )

    def close(self) -> None:
        self._files.close_all()
        if self._discovery is not None:
            devices.release(self._discovery)
            self._discovery = None

    def read(self) -> NvmeFacts:
        if self._discovery is None:
            raise RuntimeError("collector closed")
        snap = self._discovery.devices()
        facts = NvmeFacts(generation=snap.generation)
        facts.errors.items.extend(e.message for e in snap.errors if e.device_class in _MY_CLASSES)
        if snap.generation != self._generation:
            self._static.clear()  # the device set changed: re-read what was cached
            self._files.close_all()  # and open the attributes of the devices found now
            self._generation = snap.generation
        controllers, dropped = self._controller_limit.keep(snap.nvme_controllers)
        namespaces, dropped_namespaces = self._namespace_limit.keep(snap.nvme_namespaces)
        facts.items_dropped = dropped + dropped_namespaces
        for ctrl in controllers:
            c = self._controller(ctrl, facts.errors)
            if c is not None:
                facts.controllers.append(c)
        for ns in namespaces:
            n = self._namespace(ns, facts.errors)
            if n is not None:
                facts.namespaces.append(n)
        facts.subsystems = self._subsystems(namespaces, facts.errors)
        # Only when a class came out empty: a hidden class must not read as no NVMe.
        fs = self.ctx.fs
        if not snap.nvme_controllers:
            disks = [ns.name for ns in snap.nvme_namespaces]
            facts.controllers_hidden = controllers_hidden(fs, disks)
        if not snap.nvme_namespaces:
            dirs = [c.syspath for c in snap.nvme_controllers]
            facts.namespaces_hidden = namespaces_hidden(fs, dirs)
        return facts

    def _namespace(self, ns: NvmeNamespace, errors: ReadErrors) -> NamespaceFacts | None:
        """A plain namespace's queue; for a multipath head the head's disk settings and
        each path's request queue (hostfs/nvme.py REQUEST_COUNTS says which is where)."""
        attrs = DeviceAttrs(ns.syspath, self._files)
        queue = read_block_queue(attrs, request=not ns.multipath)
        if attrs.gone():
            return None  # removed since discovery listed it: not an error
        errors.items.extend(attrs.errors.items)
        paths = []
        no_ana = []
        for p in ns.paths:
            path_attrs = DeviceAttrs(p.syspath, self._files)
            path_queue = read_block_queue(path_attrs, disk=False)
            ana, shown = read_ana_state(path_attrs)
            if path_attrs.gone():
                continue  # that controller went away: the other paths still count
            errors.items.extend(path_attrs.errors.items)
            paths.append(PathFacts(p.name, p.controller, path_queue, ana))
            if not shown:
                no_ana.append(p.name)
        if no_ana and len(no_ana) < len(paths):
            shown_on = [p.name for p in paths if p.name not in no_ana]
            why = "ANA is off on that controller only: 'disabling ANA support' in the kernel log?"
            errors.items.append(missing_among_siblings("ana_state", no_ana, shown_on, why))
        return NamespaceFacts(ns.name, ns.controllers, queue, tuple(paths), ns.multipath)

    def _subsystems(
        self, namespaces: Iterable[NvmeNamespace], errors: ReadErrors
    ) -> list[SubsystemFacts]:
        """The I/O policy of each subsystem with a multipath head, once per subsystem
        (every head of a subsystem sits in its directory: hostfs/nvme_multipath.py)."""
        seen: dict[str, str] = {}
        for ns in namespaces:
            if not ns.multipath:
                continue
            found = subsystem_dir(ns.syspath)
            if found is None:
                errors.items.append(f"{ns.syspath}: a multipath head outside nvme-subsys<N>")
                continue
            seen.setdefault(*found)
        out = []
        absent = []
        for name, sdir in seen.items():
            attrs = DeviceAttrs(sdir, self._files)
            policy, shown = read_iopolicy(attrs)
            if attrs.gone():
                continue  # removed since discovery listed its head: not an error
            errors.items.extend(attrs.errors.items)
            out.append(SubsystemFacts(name, policy))
            if not shown:
                absent.append(name)
        if absent and len(absent) < len(out):
            shown_on = [s.name for s in out if s.name not in absent]
            why = "one kernel shows it on every subsystem or on none"
            errors.items.append(missing_among_siblings("iopolicy", absent, shown_on, why))
        return out

    def _controller(self, ctrl: NvmeController, errors: ReadErrors) -> ControllerFacts | None:
        attrs = DeviceAttrs(ctrl.syspath, self._files)
        static = self._static.get(ctrl.syspath)
        pci_dir = static.pci_dir if static is not None else None
        if static is None and ctrl.pci:
            pci_dir = pci_function_dir(ctrl.syspath, ctrl.pci)
        pci_attrs = DeviceAttrs(pci_dir, self._files) if pci_dir else None
        fresh = static is None
        if static is None:
            static = _Static(
                identity=read_identity(attrs),
                pci_dir=pci_dir,
                max_link=read_link(pci_attrs, "max") if pci_attrs else None,
                hwmon=find_hwmon(ctrl.syspath, pci_dir) if self._temperature else None,
            )
        link = read_link(pci_attrs, "current") if pci_attrs else None
        queue_count = attrs.get("queue_count", parse_count)
        temperature = None
        hwmon = DeviceAttrs(static.hwmon) if static.hwmon else None
        if hwmon is not None:
            temperature = hwmon.get("temp1_input", parse_millicelsius)
        if attrs.gone() or (pci_attrs is not None and pci_attrs.gone()):
            self._static.pop(ctrl.syspath, None)
            return None  # hot-unplugged between discovery and this read: not an error
        for part in (attrs, pci_attrs, hwmon):
            if part is not None:
                errors.items.extend(part.errors.items)
        if fresh and _cacheable(static):
            self._static[ctrl.syspath] = static
        return ControllerFacts(
            ctrl.name, ctrl.pci, static.identity, queue_count, link, static.max_link, temperature
        )

    def metrics(self, facts: NvmeFacts) -> Iterable[Metric]:
        yield from _controller_metrics(facts.controllers)
        yield from _namespace_metrics(facts.namespaces)
        yield from _multipath_metrics(facts)


def _cacheable(static: _Static) -> bool:
    """Only complete reads are cached; a failed one is retried next scrape."""
    link_ok = static.max_link is None or (
        static.max_link.speed is not None and static.max_link.width is not None
    )
    return static.identity.complete and static.identity.numa_node is not None and link_ok


def _controller_metrics(controllers: list[ControllerFacts]) -> Iterable[Metric]:
    info = GaugeMetricFamily(
        metric_name("nvme_controller_info"),
        "NVMe controller identity from /sys/class/nvme/<controller> (padding stripped).",
        labels=["controller", "model", "serial", "firmware", "transport"],
    )
    numa = GaugeMetricFamily(
        metric_name("nvme_numa_node"),
        "NUMA node of the controller; -1 when the platform does not say.",
        labels=["controller"],
    )
    queues = GaugeMetricFamily(
        metric_name("nvme_queues"),
        "Queues the NVMe driver set up on the controller (queue_count), the admin queue included.",
        labels=["controller"],
    )
    speed = GaugeMetricFamily(
        metric_name("nvme_pcie_current_link_transfers_per_second"),
        "Speed the controller's PCIe link trained to, in transfers per second per lane.",
        labels=["controller"],
    )
    max_speed = GaugeMetricFamily(
        metric_name("nvme_pcie_max_link_transfers_per_second"),
        "Fastest PCIe link speed the controller supports, in transfers per second per lane.",
        labels=["controller"],
    )
    width = GaugeMetricFamily(
        metric_name("nvme_pcie_current_link_width"),
        "Lanes of the controller's trained PCIe link.",
        labels=["controller"],
    )
    max_width = GaugeMetricFamily(
        metric_name("nvme_pcie_max_link_width"),
        "Lanes the controller supports.",
        labels=["controller"],
    )
    temperature = GaugeMetricFamily(
        metric_name("nvme_temperature_celsius"),
        "Composite temperature of the drive (hwmon temp1_input); only with "
        "--collector.nvme.temperature, each read is an admin command to the drive.",
        labels=["controller"],
    )
    for c in controllers:
        ident = c.identity
        if ident.complete:
            labels = [ident.model, ident.serial, ident.firmware, ident.transport]
            info.add_metric([c.name, *(v or "" for v in labels)], 1.0)
        if ident.numa_node is not None:
            numa.add_metric([c.name], float(ident.numa_node))
        if c.queue_count is not None:
            queues.add_metric([c.name], float(c.queue_count))
        for state, s_family, w_family in (
            (c.link, speed, width),
            (c.max_link, max_speed, max_width),
        ):
            if state is None:
                continue
            if state.speed is not None:
                s_family.add_metric([c.name], state.speed)
            if state.width is not None:
                w_family.add_metric([c.name], float(state.width))
        if c.temperature_celsius is not None:
            temperature.add_metric([c.name], c.temperature_celsius)
    yield from (info, numa, queues, speed, max_speed, width, max_width, temperature)


# (BlockQueue field, metric suffix, help, scale to base units)
_QUEUE_GAUGES = (
    (
        "nr_requests",
        "queue_requests",
        "Requests the block queue may allocate per hardware queue (queue/nr_requests).",
        1,
    ),
    (
        "rq_affinity",
        "queue_rq_affinity",
        "Where completions run (queue/rq_affinity): 0 any CPU, 1 the submitting CPU's "
        "group, 2 the submitting CPU.",
        1,
    ),
    (
        "nomerges",
        "queue_nomerges",
        "Request merging (queue/nomerges): 0 all merges, 1 simple one-hit merges only, 2 none.",
        1,
    ),
    ("io_poll", "queue_io_poll", "1 when polled I/O is enabled on the queue (queue/io_poll).", 1),
    (
        "read_ahead_kb",
        "queue_read_ahead_bytes",
        "Read-ahead of the block device (queue/read_ahead_kb).",
        KIB,
    ),
    (
        "max_sectors_kb",
        "queue_max_request_bytes",
        "Largest request the block layer sends to the device (queue/max_sectors_kb).",
        KIB,
    ),
    (
        "hw_queues",
        "hw_queues",
        "blk-mq hardware queues of the namespace (directories mq/<N>).",
        1,
    ),
)


def _namespace_metrics(namespaces: list[NamespaceFacts]) -> Iterable[Metric]:
    info = GaugeMetricFamily(
        metric_name("nvme_namespace_info"),
        "An NVMe namespace (block device) and the controller that serves it; a namespace "
        "shared through native multipath has one series per path's controller.",
        labels=["device", "controller"],
    )
    scheduler = GaugeMetricFamily(
        metric_name("nvme_scheduler_info"),
        "The active I/O scheduler of the namespace (queue/scheduler).",
        labels=["device", "scheduler"],
    )
    gauges = [
        (attr, scale, GaugeMetricFamily(metric_name("nvme", suffix), doc, labels=["device"]))
        for attr, suffix, doc, scale in _QUEUE_GAUGES
    ]
    wbt = GaugeMetricFamily(
        metric_name("nvme_queue_wbt_latency_seconds"),
        "Writeback throttling target latency (queue/wbt_lat_usec); 0 when disabled, absent "
        "when the queue has no writeback throttling.",
        labels=["device"],
    )
    inflight = GaugeMetricFamily(
        metric_name("nvme_inflight_requests"),
        "Requests issued to the device and not yet completed (inflight), by direction.",
        labels=["device", "op"],
    )
    for ns in namespaces:
        for ctrl in ns.controllers:
            info.add_metric([ns.name, ctrl], 1.0)
        # A multipath head's queue carries the disk's settings, each path's the request
        # queue's: each under its own block device name, as node_exporter's diskstats
        # (which lists the hidden nvme2c2n1 too) names them. What was not read is None.
        for device, q in ((ns.name, ns.queue), *((p.name, p.queue) for p in ns.paths)):
            if q.scheduler is not None:
                scheduler.add_metric([device, q.scheduler], 1.0)
            for attr, scale, family in gauges:
                value = getattr(q, attr)
                if value is not None:
                    family.add_metric([device], float(value * scale))
            if q.wbt_lat_usec is not None:
                wbt.add_metric([device], q.wbt_lat_usec / US_PER_S)
            if q.inflight_reads is not None and q.inflight_writes is not None:
                inflight.add_metric([device, "read"], float(q.inflight_reads))
                inflight.add_metric([device, "write"], float(q.inflight_writes))
    yield info
    yield scheduler
    for _, _, family in gauges:
        yield family
    yield wbt
    yield inflight


def _multipath_metrics(facts: NvmeFacts) -> Iterable[Metric]:
    """Native multipath: one series per path with its ANA state, one per subsystem with
    its I/O policy; states as labels of _info series, as the scheduler's."""
    ana = GaugeMetricFamily(
        metric_name("nvme_ana_state_info"),
        "ANA state of a native multipath path disk (ana_state): optimized, non-optimized, "
        "inaccessible, persistent-loss, change; absent when its controller does not use ANA.",
        labels=["device", "state"],
    )
    iopolicy = GaugeMetricFamily(
        metric_name("nvme_iopolicy_info"),
        "I/O policy of an NVMe subsystem with a native multipath head (iopolicy): numa, "
        "round-robin, queue-depth.",
        labels=["subsystem", "iopolicy"],
    )
    for ns in facts.namespaces:
        for p in ns.paths:
            if p.ana_state is not None:
                ana.add_metric([p.name, p.ana_state], 1.0)
    for sub in facts.subsystems:
        if sub.iopolicy is not None:
            iopolicy.add_metric([sub.name, sub.iopolicy], 1.0)
    yield ana
    yield iopolicy
