"""``cephnode-fleet.json``: which of the nodes and OSDs are detuned and what it costs, from
the recorded series of ``alerts/cephnode-rules.yml``.
"""

from __future__ import annotations

from typing import Any

from board import (
    CHECK_STATUS,
    CLUSTER_VAR,
    FLEET_OP_VAR,
    NODE_LINK,
    STATUS_MAP,
    dashboard,
    link_to,
    query_variable,
)
from grafana import (
    FLEET_MEDIAN_LINE,
    FLEET_UID,
    NODE_UID,
    PLUMBING,
    Row,
    bargauge,
    organize,
    override,
    stat,
    table,
    table_target,
    target,
    thresholds,
    timeseries,
)

# The exporter's p99 of each OSD of one op type, with the mgr's device class joined, and
# the fleet median of the same class, computed when a panel asks: no rule records them
# (writing 1,260 p99 series a minute only for dashboards cost the rules about 25 ms per
# evaluation at 630 OSDs, docs/performance.md).
P99_OSD = (
    'cephnode_osd_op_latency_quantile_seconds{<FLEET>, op="$op", phi="0.99"}'
    " * on (cluster, ceph_daemon) group_left (device_class)"
    ' ceph_daemon_device_class:ceph_osd_metadata:group{<FLEET>, device_class=~"$device_class"}'
)
FLEET_MEDIAN_OF_OSD_P99 = f"quantile by (cluster, device_class, op) (0.5, {P99_OSD})"


def fleet() -> dict[str, Any]:
    detuned = Row(
        "Detuned nodes",
        [
            stat(
                "OSD hosts",
                "Hosts whose exporter found OSD admin sockets (answering or not). Fewer "
                "than the cluster's OSD hosts: an exporter is down or cannot see "
                "/var/run/ceph (see Scrape health).",
                [target("count(instance:cephnode_osd_sockets:max1h{<FLEET>})")],
            ),
            stat(
                "Nodes failing a check",
                "Exporters with at least one failing tuning check: each is a detuned "
                "node until the table below is empty. Warnings are not counted here.",
                [
                    target(
                        "count(count by (instance) (cephnode_tuning_check_failed{<FLEET>} == 1))"
                        " or vector(0)"
                    )
                ],
                defaults={"thresholds": thresholds((None, "green"), (1, "red"))},
            ),
            stat(
                "Collectors failing",
                "Collector runs that failed in the latest scrape, over all exporters. A "
                "failed collector has no series and its checks are unknown: a detuned "
                "node can hide behind it.",
                [target("count(cephnode_scrape_collector_success{<FLEET>} == 0) or vector(0)")],
                defaults={"thresholds": thresholds((None, "green"), (1, "orange"))},
            ),
            stat(
                "OSDs not answering",
                "OSD admin sockets that did not answer the exporter in time (stopped or "
                "hung OSD, stale socket): their latency is missing from every panel below.",
                [target("count(cephnode_osd_scrape_success{<FLEET>} == 0) or vector(0)")],
                defaults={"thresholds": thresholds((None, "green"), (1, "red"))},
            ),
            bargauge(
                "Nodes per failing check",
                "How many nodes fail each tuning check. A check failing on a few nodes "
                "only is a node drifting from the fleet (a BIOS reset re-enabling C-states, "
                "a reinstall without iommu=pt); one failing everywhere is a fleet-wide "
                "setting or a profile that does not fit.",
                [
                    target(
                        "count by (check) (count by (check, instance) "
                        "(cephnode_tuning_check_failed{<FLEET>} == 1))",
                        "{{check}}",
                        instant=True,
                    )
                ],
                w=8,
                h=8,
                defaults={"thresholds": thresholds((None, "red")), "min": 0},
            ),
            table(
                "Detuned nodes: failing and warning checks",
                "Every failing and warning tuning check by node, check and subject (the "
                "NVMe controller, namespace, interface or OSD it concerns). The same results "
                "as `cephnode-exporter check` on the node, which prints the fix. Click an "
                "instance to open its node dashboard.",
                [table_target(CHECK_STATUS.replace("<SEL>", "<FLEET>"))],
                [organize([*PLUMBING, "Value"], order=["instance", "check", "subject", "status"])],
                w=16,
                h=8,
                sort=[{"displayName": "instance", "desc": False}],
                overrides=[
                    override(
                        "status",
                        mappings=STATUS_MAP,
                        custom__cellOptions={"type": "color-background"},
                    ),
                    override("instance", links=NODE_LINK),
                ],
            ),
        ],
    )
    latency = Row(
        "OSD latency: hosts and OSDs against the fleet",
        [
            timeseries(
                "p99 $op latency per host vs the fleet median",
                "Each host's p99 over all its OSDs' ops (the histogram its exporter pools "
                "per disk media), against the median of the hosts' p99 of the same media "
                "(white, dashed). A detuned node (deep "
                "C-states, IOMMU lock contention, powersave governor) lifts all its OSDs "
                "together: its line "
                "stays above the median at every load, while a load swing moves the median "
                "with it. Recorded series; only hosts with at least 1 op/s.",
                [
                    # Per media, not per $device_class: media is the exporter's view of
                    # the disks (nvme, ssd, hdd), which the mgr's classes may rename.
                    target(
                        "instance_media_op:cephnode_osd_host_op_latency_quantile_seconds:p99"
                        '{<FLEET>, op="$op"}',
                        "{{instance}} {{media}}",
                    ),
                    target(
                        "quantile by (cluster, media, op) (0.5, "
                        "instance_media_op:cephnode_osd_host_op_latency_quantile_seconds:p99"
                        '{<FLEET>, op="$op"})',
                        "fleet median ({{media}})",
                    ),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[FLEET_MEDIAN_LINE],
            ),
            bargauge(
                "Hosts whose typical OSD is slow",
                "The median of a host's own OSDs' mean latency over the last 2 minutes, "
                "over the fleet median of all OSDs' (same device class and op type), top "
                "15: what CephNodeHostLatencyOutlier reads. One bad OSD cannot move a "
                "host's median: a ratio well above 1 means the whole host is slow, the "
                "signature of a detuned node rather than of a failing drive.",
                [
                    target(
                        "topk(15, max without (quantile) (instance_device_class_op:"
                        "cephnode_osd_op_latency_seconds:"
                        "quantile_ceph_daemon_mean_rate2m_over_fleet_median"
                        '{<FLEET>, op="$op", device_class=~"$device_class"}))',
                        "{{instance}}",
                        instant=True,
                    )
                ],
                unit="none",
                w=12,
                h=9,
                defaults={
                    "thresholds": thresholds((None, "green"), (1.25, "orange"), (1.5, "red")),
                    "decimals": 2,
                    "min": 0,
                },
            ),
            table(
                "Top 10 OSD outliers: p99 over the fleet median",
                "The OSDs whose p99 is furthest above the fleet median of their device "
                "class. An OSD alone here is the drive, its PCIe link or its shard threads "
                "(check the node dashboard); several OSDs of one host point at the host.",
                [
                    table_target(
                        f"topk(10, {P99_OSD} / on (cluster, device_class, op) group_left "
                        f"{FLEET_MEDIAN_OF_OSD_P99})"
                    ),
                    table_target(
                        f"{P99_OSD} and on (cluster, ceph_daemon) topk(10, {P99_OSD} / on "
                        f"(cluster, device_class, op) group_left {FLEET_MEDIAN_OF_OSD_P99})"
                    ),
                ],
                [
                    organize(
                        [*PLUMBING, "op", "phi"],
                        rename={"Value #A": "p99 / fleet median", "Value #B": "p99"},
                        order=["instance", "ceph_daemon", "device_class", "Value #A", "Value #B"],
                    )
                ],
                w=12,
                h=9,
                sort=[{"displayName": "p99 / fleet median", "desc": True}],
                overrides=[
                    override("Value #B", unit="s"),
                    override("p99", unit="s"),
                    override("instance", links=NODE_LINK),
                ],
            ),
            timeseries(
                "p99 $op latency of the 10 slowest OSDs",
                "The absolute p99 of the slowest OSDs with the fleet median of the OSDs' "
                "p99 (white, dashed). A line that stays on top for hours is chronic, one that "
                "jumps with a laggy PG or a scrub is transient.",
                [
                    target(f"topk(10, {P99_OSD})", "{{ceph_daemon}} ({{instance}})"),
                    target(FLEET_MEDIAN_OF_OSD_P99, "fleet median ({{device_class}})"),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[FLEET_MEDIAN_LINE],
            ),
            timeseries(
                "OSD CPU per op, per host",
                "CPU seconds the host's OSD processes spend per client op they serve, "
                "against the fleet median per OSD (white, dashed). Higher than the fleet on the "
                "same load: debug logging left on, a RocksDB built without optimisation "
                "(osd.rocksdb_build), or spin-lock contention burning cycles.",
                [
                    target("cephnode_osd_host_cpu_seconds_per_op{<FLEET>}", "{{instance}}"),
                    target(
                        "quantile by (cluster, device_class) (0.5, "
                        "cephnode_osd_cpu_seconds_per_op{<FLEET>} "
                        "* on (cluster, ceph_daemon) group_left (device_class) "
                        "ceph_daemon_device_class:ceph_osd_metadata:group"
                        '{<FLEET>, device_class=~"$device_class"})',
                        "fleet median per OSD ({{device_class}})",
                    ),
                ],
                unit="s",
                overrides=[FLEET_MEDIAN_LINE],
            ),
            bargauge(
                "BlueStore commit latency: slowest OSDs over the fleet median",
                "Mean BlueStore commit latency of each OSD over the fleet median of its "
                "device class, top 10. High with a normal CPU per op: the drive, its "
                "queue (scheduler, PCIe link) or the IOMMU in the I/O path.",
                [
                    target(
                        "topk(10, ceph_daemon:cephnode_osd_bluestore_commit_latency_seconds:mean5m"
                        '{<FLEET>, device_class=~"$device_class"} / on (cluster, device_class) '
                        "group_left cluster_device_class:cephnode_osd_bluestore_commit_latency_"
                        'seconds:quantile_ceph_daemon_mean5m{<FLEET>, quantile="0.5"})',
                        "{{ceph_daemon}} ({{instance}})",
                        instant=True,
                    )
                ],
                unit="none",
                defaults={
                    "thresholds": thresholds((None, "green"), (1.5, "orange"), (2, "red")),
                    "decimals": 2,
                    "min": 0,
                },
            ),
        ],
    )
    pgs = Row(
        "Laggy and waiting PGs",
        [
            timeseries(
                "Laggy and waiting PGs (mgr)",
                "PGs in state laggy (the primary's read lease ran out because a replica "
                "did not renew it) and wait (after peering, waiting for old leases): both "
                "block client I/O. From the mgr's ceph_pg_laggy and ceph_pg_wait; the "
                "reference cluster had 1,651 laggy PGs when throughput collapsed.",
                [target("cluster_state:ceph_pg_laggy_wait:sum{<FLEET>}", "{{state}}")],
                w=8,
            ),
            bargauge(
                "Hosts in the most laggy or waiting PGs",
                "Laggy or waiting PGs with at least one OSD on the host (the pgs collector, "
                "`pg ls laggy wait`), over the cluster's total. The stalled host is the one "
                "common to most of them: check its network, CPU and OSD logs.",
                [
                    target(
                        "topk(10, instance:cephnode_osd_laggy_pgs:sum{<FLEET>})",
                        "{{instance}}",
                        instant=True,
                    )
                ],
                w=8,
                defaults={"thresholds": thresholds((None, "orange")), "min": 0},
            ),
            table(
                "OSDs in the most laggy or waiting PGs",
                "Per OSD, the laggy or waiting PGs it is in (any role), with the "
                "cluster's total as the pgs collector listed it. The OSD that is a replica "
                "of most of them is the one not renewing leases.",
                [
                    table_target("topk(10, ceph_daemon:cephnode_osd_laggy_pgs:sum{<FLEET>})"),
                ],
                [organize(PLUMBING, rename={"Value": "laggy or waiting PGs"})],
                w=8,
                sort=[{"displayName": "laggy or waiting PGs", "desc": True}],
            ),
        ],
    )
    host = Row(
        "Host tuning: C-states, IOMMU, governors",
        [
            timeseries(
                "Deep C-state residency per host",
                "Share of CPU time in idle states whose exit latency is above 10 us (ACPI "
                "C2 on EPYC, C6 on Xeon). A tuned node has none; the detuned reference node "
                "spends about 60 % there, and every I/O completion that wakes such a CPU "
                "pays the exit latency (cpu.cstates).",
                [
                    target(
                        "instance:cephnode_cpu_idle_deep_residency:ratio_rate5m{<FLEET>}",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            timeseries(
                "Wake-up cost from deep C-states per host",
                "Estimated share of CPU time spent waking up from the deep states (entries "
                "x exit latency per second, per CPU). This time sits on the critical path "
                "of interrupts and I/O completions: the latency a BIOS not in maximum "
                "performance mode adds.",
                [
                    target(
                        "instance:cephnode_cpu_idle_deep_wakeup_seconds:ratio_rate5m{<FLEET>}",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            timeseries(
                "IOMMU spin-lock share of busy CPU per host",
                "Share of non-idle CPU samples spinning on a lock under IOMMU/IOVA code "
                "(kprofile collector, over 10 minutes of windows). Above a few % the NVMe "
                "DMA mappings serialise on the IOVA allocator: boot with iommu=pt. The "
                "reference cluster's detuned nodes showed 61 %. Hosts without kprofile "
                "enabled have no line.",
                [
                    target(
                        "instance:cephnode_kprofile_spinlock_iommu:ratio_rate10m{<FLEET>}",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            bargauge(
                "NVMe controllers with translated DMA per host",
                "NVMe controllers whose IOMMU group translates DMA (DMA or DMA-FQ default "
                "domain) per host: each I/O then allocates an IOVA under a lock "
                "(iommu.nvme). 0 on a node booted with iommu=pt.",
                [
                    target(
                        "sort_desc(sum by (instance) (cephnode_iommu_dma_translated{<FLEET>}) > 0)",
                        "{{instance}}",
                        instant=True,
                    )
                ],
                w=12,
                defaults={"thresholds": thresholds((None, "red")), "min": 0},
            ),
            bargauge(
                "CPUs not on the performance governor per host",
                "Online CPUs whose frequency governor is not performance (powersave, "
                "ondemand, schedutil): they ramp up late after an idle period, adding "
                "latency to every burst (cpu.governor).",
                [
                    target(
                        "sort_desc(sum by (instance) (cephnode_cpu_scaling_governor_cpus{<FLEET>,"
                        ' governor!="performance"}) > 0)',
                        "{{instance}}",
                        instant=True,
                    )
                ],
                w=12,
                defaults={"thresholds": thresholds((None, "orange")), "min": 0},
            ),
        ],
    )
    health = Row(
        "Scrape health",
        [
            table(
                "Failing collectors",
                "Collectors that failed or timed out in the latest scrape, by node. Their "
                "series are missing and their checks unknown; the exporter's log says why "
                "(kprofile without perf or CAP_PERFMON, an unreadable socket directory, "
                "...).",
                [table_target("cephnode_scrape_collector_success{<FLEET>} == 0")],
                [organize([*PLUMBING, "Value"], order=["instance", "collector"])],
                w=8,
                overrides=[override("instance", links=NODE_LINK)],
            ),
            table(
                "OSD sockets not answering",
                "OSDs whose admin socket did not answer within --collector.osd.timeout: a "
                "stopped or hung OSD, or a stale socket. A stopped OSD still accepts "
                "connections and never replies; the OSD's own log and `ceph osd tree` say "
                "whether it is down.",
                [table_target("cephnode_osd_scrape_success{<FLEET>} == 0")],
                [organize([*PLUMBING, "Value"], order=["instance", "ceph_daemon"])],
                w=8,
                overrides=[override("instance", links=NODE_LINK)],
            ),
            timeseries(
                "Slowest collectors",
                "The longest time each collector took in a scrape over all nodes. One "
                "approaching --collector.timeout (5 s) is about to fail: a hung OSD socket, "
                "a slow sysfs read on a many-core node.",
                [
                    target(
                        "max by (collector) (cephnode_scrape_collector_duration_seconds{<FLEET>})",
                        "{{collector}}",
                    )
                ],
                unit="s",
                w=8,
            ),
        ],
    )
    variables = [
        CLUSTER_VAR,
        FLEET_OP_VAR,
        query_variable(
            "device_class",
            "Device class",
            "label_values(ceph_daemon_device_class:ceph_osd_metadata:group"
            '{cluster="$cluster"}, device_class)',
            "CRUSH device class from the mgr's ceph_osd_metadata; 'unknown' for OSDs "
            "the mgr has no metadata for.",
            multi=True,
            include_all=True,
        ),
    ]
    return dashboard(
        FLEET_UID,
        "Ceph nodes: fleet",
        "Which Ceph storage nodes are detuned (deep C-states, IOMMU translation, governors, "
        "NVMe and NIC settings, debug logging) and what it costs in OSD latency, against "
        "the fleet's medians. Reads the recording rules of alerts/cephnode-rules.yml.",
        [detuned, latency, pgs, host, health],
        variables,
        [link_to("Node", NODE_UID, "One node's tuning report and the facts behind it")],
    )
