"""Collector ``irq``: where the NVMe and network interrupts are served, and irqbalance.

A 100GbE port whose receive interrupts all land on one CPU, or on CPUs of another NUMA
node than the port's, caps the node's network throughput and adds cross-node memory
traffic to every packet; so does an NVMe controller whose queues were all given one
CPU. The counts are per device, not per interrupt: a 96-CPU node with ten NVMe drives
and two ports has over a thousand vectors, which as series would dwarf everything else
the node exports. The check ``irq.affinity`` judges the same facts.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    ItemLimit,
    bounded,
    metric_name,
    register,
)
from cephnode_exporter.hostfs.irq import (
    IRQFacts,
    IRQReader,
    effective_cpus,
    irqbalance_running,
    pci_devices,
    read_device,
    read_node_cpus_safe,
    remote_irqs,
)
from cephnode_exporter.hostfs.names import natural_key
from cephnode_exporter.hostfs.nvme import controllers_hidden

# NVMe controllers plus network ports: the nvme and net collectors' caps (256 each).
DEFAULT_MAX_DEVICES = 512
# Seconds between two scans of every process's comm while irqbalance is not found: a
# node that runs without it (interrupts pinned by hand, as many tuned nodes do) has
# hundreds of processes, whose comm files would be read on every scrape. Its socket
# (irqbalance 1.8+) and the pid seen last are looked for on every scrape.
IRQBALANCE_RESCAN_SECONDS = 60.0


@register
class IRQCollector(Collector):
    name = "irq"
    help = "NVMe and network interrupts per device: count, off-node count, serving CPUs; irqbalance"
    reuse_unchanged = True

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._limit = ItemLimit(
            self.name,
            "devices",
            "--collector.irq.max-devices",
            int(ctx.options.collector_irq_max_devices),
        )
        self._irqbalance_pid: int | None = None
        self._scanned_at: float | None = None  # the last /proc scan that found none
        self._reader = IRQReader(ctx.fs)

    def close(self) -> None:
        self._reader.close()

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--collector.irq.max-devices",
            dest="collector_irq_max_devices",
            type=bounded(int, 1, 65536),
            default=DEFAULT_MAX_DEVICES,
            help="NVMe controllers and network ports whose interrupts are read per scrape, "
            f"NVMe first, each by name (default: {DEFAULT_MAX_DEVICES})",
        )

    def read(self) -> IRQFacts:
        fs = self.ctx.fs
        facts = IRQFacts()
        found = pci_devices(fs, self._reader.links)
        kept, facts.items_dropped = self._limit.keep(
            found, key=lambda d: (d[1] != "nvme", natural_key(d[0]))
        )
        # A class with no device on PCI: absent, or hidden from the exporter (then the
        # check must not pass on the other class alone). Never asked per device.
        kinds = {kind for _, kind, _, _ in found}
        for why in (
            controllers_hidden(fs) if "nvme" not in kinds else None,
            fs.sys_hidden("class", "net") if "net" not in kinds else None,
        ):
            if why is not None:
                facts.hidden.append(why)
        facts.node_cpus = read_node_cpus_safe(fs, facts.errors)
        seen: set[int] = set()
        for name, kind, bdf, pci_dir in kept:
            dev = read_device(self._reader, name, kind, bdf, pci_dir, seen)
            for reason in dev.unread.values():
                facts.errors.items.append(reason)
            if dev.numa_error is not None:
                facts.errors.items.append(dev.numa_error)
            if dev.junk is not None:
                facts.errors.items.append(dev.junk)
            facts.devices.append(dev)
        self._reader.done(seen)
        now = time.monotonic()
        scan = self._scanned_at is None or now - self._scanned_at >= IRQBALANCE_RESCAN_SECONDS
        try:
            running, self._irqbalance_pid = irqbalance_running(fs, self._irqbalance_pid, scan)
            facts.irqbalance = running
            if running:
                self._scanned_at = None
            elif scan:
                self._scanned_at = now
        except OSError as exc:
            facts.errors.add(exc)
        return facts

    def metrics(self, facts: IRQFacts) -> Iterable[Metric]:
        labels = ["device", "kind"]
        irqs = GaugeMetricFamily(
            metric_name("device_irqs"),
            "Interrupts the device has requested (MSI/MSI-X vectors with a handler), with "
            "their affinity read in this scrape.",
            labels=labels,
        )
        managed = GaugeMetricFamily(
            metric_name("device_irqs_managed"),
            "Of them, kernel-managed ones (affinity not settable from user space): NVMe "
            "I/O queues, which the kernel spreads over all CPUs on purpose.",
            labels=labels,
        )
        remote = GaugeMetricFamily(
            metric_name("device_irqs_remote_numa"),
            "Interrupts not managed by the kernel whose effective CPUs are all outside the "
            "device's NUMA node; absent when the node is unknown (numa_node -1) or the "
            "host has no NUMA topology.",
            labels=labels,
        )
        cpus = GaugeMetricFamily(
            metric_name("device_irq_cpus"),
            "Distinct CPUs that serve the device's interrupts (effective affinity); 1 with "
            "several interrupts means one CPU takes them all.",
            labels=labels,
        )
        for dev in facts.devices:
            if dev.unread:
                continue  # a partial count would look like a lost queue
            key = [dev.device, dev.kind]
            irqs.add_metric(key, float(len(dev.irqs)))
            managed.add_metric(key, float(sum(1 for i in dev.irqs if i.managed)))
            cpus.add_metric(key, float(len(effective_cpus(dev))))
            off = remote_irqs(dev, facts.node_cpus)
            if off is not None:
                remote.add_metric(key, float(off))
        yield irqs
        yield managed
        yield remote
        yield cpus
        if facts.irqbalance is not None:
            running = GaugeMetricFamily(
                metric_name("irqbalance_running"),
                "1 when a process named irqbalance runs on the node, else 0.",
            )
            running.add_metric([], 1.0 if facts.irqbalance else 0.0)
            yield running
