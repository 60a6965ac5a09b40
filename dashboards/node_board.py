"""``cephnode-node.json``: one Ceph storage node, its tuning report and every host and OSD
fact behind it; the rows are in :mod:`node_host` and :mod:`node_osd`.
"""

from __future__ import annotations

from typing import Any

from board import CLUSTER_VAR, OP_VAR, dashboard, link_to, query_variable
from grafana import FLEET_UID, NODE_UID
from node_host import cpu_row, iommu_row, net_row, nvme_row, report_row
from node_osd import osd_latency_row, osd_quantiles_row, osd_state_row
from node_signals import signals_row


def node() -> dict[str, Any]:
    report = report_row()
    cpu = cpu_row()
    iommu = iommu_row()
    nvme = nvme_row()
    net = net_row()
    signals = signals_row()
    osd_latency = osd_latency_row()
    osd_quantiles = osd_quantiles_row()
    osd_state = osd_state_row()
    variables = [
        CLUSTER_VAR,
        query_variable(
            "instance",
            "Node",
            'label_values(cephnode_exporter_build_info{cluster="$cluster"}, instance)',
            "The node's cephnode-exporter target.",
        ),
        query_variable(
            "host",
            "Host",
            'label_values(cephnode_exporter_build_info{cluster="$cluster", '
            'instance="$instance"}, instance)',
            "The node's host name (instance without the port), to find its node_exporter series.",
            regex="/^(.*?)(?::[0-9]+)?$/",
            hide=2,
        ),
        query_variable(
            "ceph_daemon",
            "OSD",
            'label_values(cephnode_osd_scrape_success{cluster="$cluster", '
            'instance="$instance"}, ceph_daemon)',
            "OSDs of the node.",
            multi=True,
            include_all=True,
        ),
        OP_VAR,
    ]
    return dashboard(
        NODE_UID,
        "Ceph nodes: node",
        "One Ceph storage node: its tuning report, and the host and OSD facts behind it "
        "(C-states, governors, IOMMU and kernel spin locks, NVMe queues and PCIe links, "
        "NICs, firmware and interrupts, OSD latency and its stages, ops in flight, debug "
        "levels).",
        [report, cpu, iommu, nvme, net, signals, osd_latency, osd_quantiles, osd_state],
        variables,
        [link_to("Fleet", FLEET_UID, "All nodes of the cluster against the fleet")],
    )
