"""Collector ``net``: what node_exporter does not say about the NICs an OSD talks through.

node_exporter's ``netclass`` collector already exports MTU (``node_network_mtu_bytes``),
link speed (``node_network_speed_bytes``), operstate and carrier per ``device``; they are
read here for the ``net.mtu`` and ``net.rings`` checks but not exported again (join on
``device`` in PromQL, see docs/metrics.md). Exported: the NUMA node of each NIC, its
driver, PCI function and bond, and its RX/TX ring sizes with their maxima, which need
the ethtool ioctl and so are in no sysfs-based exporter.

Which interfaces: discovery (:mod:`cephnode_exporter.devices`) lists them; names matching
``--collector.net.exclude`` are ignored outright. Of the rest, physical ports get the full
read and metrics; virtual interfaces (bonds, VLANs, bridges: under /sys/devices/virtual)
get a light read (MTU, operstate, lower and upper devices) so that the ``net.mtu`` check
can judge a bond or a VLAN holding a Ceph address or named by the profile, on its path
down to the ports, and no metrics: rings, NUMA node and driver belong to
the ports. At most ``--collector.net.max-interfaces`` are read, physical ports first (they
carry the series), each kind by name: thousands of VFs or VLANs cannot flood Prometheus.

Which ports carry Ceph: the checks judge only those (a 1 GbE management port at MTU 1500
is no fault). They are found from the host, not from the OSDs' ``config show``, so that
this collector needs neither the osd collector nor an admin socket: the addresses that
sockets listen on in Ceph's port range (``/proc/net/tcp``, ``tcp6``) and the interface
each address is on (``/proc/net/route``, ``if_inet6``), in :mod:`~.hostfs.inet`; the
checks follow a VLAN or bond down to its ports through ``lower_*``. No metric is
exported for it: the check report says which ports were judged and why.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Iterable

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
from cephnode_exporter.devices import DeviceClass
from cephnode_exporter.facts.net import NetFacts
from cephnode_exporter.hostfs.ethtool import RingReader, ring_reader_for
from cephnode_exporter.hostfs.inet import read_ceph_addresses
from cephnode_exporter.hostfs.names import natural_key
from cephnode_exporter.hostfs.net import RINGS_OK, read_interface
from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

# Names of interfaces that are never storage ports, matched in full. Most are also
# virtual by sysfs location; the pattern keeps them out even where a container runtime
# or CNI plugin gives them a parent device. Operators add their management ports here.
DEFAULT_EXCLUDE = (
    r"lo|veth.*|docker.*|br-.*|virbr.*|vnet.*|tap.*|tun.*|cni.*|cali.*|flannel.*|cilium_.*"
    r"|lxc.*|kube-.*|vxlan.*|genev_sys_.*|ifb.*|dummy.*|wg.*"
)
# Interfaces read per scrape, excluded ones not counted. A Ceph node has a few dozen ports,
# VFs and VLANs; four series per port.
DEFAULT_MAX_INTERFACES = 256


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None


@register
class NetCollector(Collector):
    name = "net"
    help = "NIC NUMA node, driver, bond and RX/TX ring sizes (ethtool ioctl) per physical port"
    reuse_unchanged = True

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--collector.net.exclude",
            dest="collector_net_exclude",
            type=_regex,
            default=_regex(DEFAULT_EXCLUDE),
            metavar="REGEX",
            help="interfaces to ignore, matched against the whole name; virtual interfaces "
            "(bonds, VLANs, bridges) are never exported either (default: lo, veth, docker, "
            "bridges, tunnels and CNI devices)",
        )
        parser.add_argument(
            "--collector.net.max-interfaces",
            dest="collector_net_max_interfaces",
            type=bounded(int, 1, 65536),
            default=DEFAULT_MAX_INTERFACES,
            metavar="N",
            help="read at most this many interfaces not excluded, physical ports first, "
            "each kind by name; the others are counted in "
            "cephnode_scrape_collector_items_dropped (default: %(default)s)",
        )

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._exclude: re.Pattern[str] = ctx.options.collector_net_exclude or _regex(
            DEFAULT_EXCLUDE
        )
        self._limit = ItemLimit(
            self.name,
            "interfaces",
            "--collector.net.max-interfaces",
            int(ctx.options.collector_net_max_interfaces),
        )
        self._rings: RingReader = ring_reader_for(ctx.fs)
        self._discovery = devices.acquire(ctx.fs)
        log.debug("net collector ring source", extra=kv(source=self._rings.source))

    def close(self) -> None:
        self._rings.close()
        devices.release(self._discovery)

    def read(self) -> NetFacts:
        snap = self._discovery.devices()
        facts = NetFacts(ring_source=self._rings.source)
        # Discovery errors of network class entries only; NVMe ones belong to nvme.
        facts.errors.items.extend(
            e.message for e in snap.errors if e.device_class is DeviceClass.NET
        )
        wanted = []
        for dev in snap.net_interfaces:
            if self._exclude.fullmatch(dev.name):
                facts.excluded.append(dev.name)
            else:
                wanted.append(dev)
        # Physical ports first: they have the series; virtual ones only feed the checks.
        kept, facts.items_dropped = self._limit.keep(
            wanted, lambda d: (d.virtual, natural_key(d.name))
        )
        for dev in kept:
            rings = None if dev.virtual else self._rings
            iface = read_interface(
                dev.syspath, dev.name, rings, facts.errors, pci=dev.pci, virtual=dev.virtual
            )
            if iface is not None:
                facts.interfaces[dev.name] = iface
        facts.ceph = read_ceph_addresses(self.ctx.fs, facts.errors)
        return facts

    def metrics(self, facts: NetFacts) -> Iterable[Metric]:
        numa = GaugeMetricFamily(
            metric_name("network_numa_node"),
            "NUMA node of the NIC's PCI function (-1: the firmware gives none). Ceph "
            "daemons serving this port run best on the same node.",
            labels=["device"],
        )
        info = GaugeMetricFamily(
            metric_name("network_device_info"),
            "A physical network port: its driver, PCI function and the bond or bridge it "
            "is enslaved to (empty when none or unknown).",
            labels=["device", "driver", "pci", "master"],
        )
        entries = GaugeMetricFamily(
            metric_name("network_ring_entries"),
            "Descriptors in the NIC ring (ethtool -g current value): rx, tx, and rx_mini "
            "or rx_jumbo where the driver has them.",
            labels=["device", "ring"],
        )
        maximum = GaugeMetricFamily(
            metric_name("network_ring_max_entries"),
            "Largest ring the driver accepts (ethtool -g pre-set maximum).",
            labels=["device", "ring"],
        )
        for iface in facts.physical:
            info.add_metric(
                [iface.name, iface.driver or "", iface.pci or "", iface.master or ""], 1.0
            )
            if iface.numa_node is not None:
                numa.add_metric([iface.name], float(iface.numa_node))
            if iface.rings_state != RINGS_OK or iface.rings is None:
                continue
            for ring in iface.rings.rings():
                entries.add_metric([iface.name, ring.name], float(ring.current))
                if ring.maximum:
                    maximum.add_metric([iface.name, ring.name], float(ring.maximum))
        yield info
        yield numa
        yield entries
        yield maximum
