"""The ``osd`` collector's heartbeat ping series (``dump_osd_network``, ceph/network.py).

Not a collector of its own: the command is one more in each OSD's admin-socket round of
collectors/osd.py, which calls :func:`network_metrics` with the round's facts. Kept
apart so the catalogue of the OSD's other series does not grow.

Per OSD and interface (``back``: the cluster network, ``front``: the public network, as
Ceph names them in osd/OSD.cc), the worst, the mean and the median of its peers' 1-minute
average round trips: three series per OSD and interface, whatever the number of peers. A
series per peer would be an OSD's peer set (tens to hundreds) times the OSDs of the
fleet; the alert needs only the typical (ceph/network.py says why the median). One
series per node more: the median of its OSDs', for the host comparison. The peer
counts stay in the log and in the reply: six series are already above the per-OSD
budget (docs/metrics.md, "Series per OSD").
"""

from __future__ import annotations

import statistics

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.ceph.network import INTERFACES
from cephnode_exporter.collectors.base import metric_name
from cephnode_exporter.facts.osd import OSDFacts


def network_metrics(osds: list[OSDFacts]) -> list[Metric]:
    """The heartbeat families of one scrape's OSD facts (pure); none for an OSD that did
    not answer, nor for an interface without a current peer (an OSD that shares no PG
    yet, or whose peers are all stale)."""
    labels = ["ceph_daemon", "interface"]
    worst = GaugeMetricFamily(
        metric_name("osd", "heartbeat_ping_max_seconds"),
        "The largest 1-minute average heartbeat round trip from this OSD to one of its "
        "peers, per interface (back: cluster network, front: public network), from "
        "dump_osd_network; stale peers left out.",
        labels=labels,
    )
    mean = GaugeMetricFamily(
        metric_name("osd", "heartbeat_ping_mean_seconds"),
        "The mean over this OSD's heartbeat peers of their 1-minute average round trip, "
        "per interface, from dump_osd_network; stale peers left out.",
        labels=labels,
    )
    median = GaugeMetricFamily(
        metric_name("osd", "heartbeat_ping_median_seconds"),
        "The median over this OSD's heartbeat peers of their 1-minute average round trip, "
        "per interface, from dump_osd_network; stale peers left out. Rises when this OSD's "
        "own network is slow, not when a few of its peers are.",
        labels=labels,
    )
    # The node's own median of its OSDs' (larger of the two networks): what the host
    # outlier compares, one series a node instead of a quantile over every OSD in the
    # rules (docs/performance.md).
    host = GaugeMetricFamily(
        metric_name("osd", "host_heartbeat_ping_median_seconds"),
        "The median over this node's answering OSDs of each OSD's median heartbeat ping, "
        "the larger of its two networks; absent without such an OSD.",
        labels=[],
    )
    per_osd = []
    for o in osds:
        if not o.ok or o.network is None:
            continue
        larger = None
        for interface in INTERFACES:
            p = o.network.interfaces[interface]
            if p.max_seconds is None or p.mean_seconds is None or p.median_seconds is None:
                continue
            worst.add_metric([o.ceph_daemon, interface], p.max_seconds)
            mean.add_metric([o.ceph_daemon, interface], p.mean_seconds)
            median.add_metric([o.ceph_daemon, interface], p.median_seconds)
            larger = max(larger or 0.0, p.median_seconds)
        if larger is not None:
            per_osd.append(larger)
    if per_osd:
        host.add_metric([], statistics.median(per_osd))
    return [worst, mean, median, host]
