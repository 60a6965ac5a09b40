"""The OSD rows of ``cephnode-node.json``: latency and its stages, quantiles, ops in
flight, state and configuration of the node's OSDs.
"""

from __future__ import annotations

from grafana import (
    DASHED,
    FLEET_MEDIAN_LINE,
    P50_LINE,
    PLUMBING,
    Panel,
    Row,
    heatmap,
    organize,
    override_regexp,
    state_timeline,
    table,
    table_target,
    target,
    timeseries,
    value_map,
)


def stage_mean(metric: str) -> str:
    """Mean of a summary over the selected OSDs: rate of _sum over rate of _count."""
    return (
        f"sum(rate({metric}_sum{{<OSDS>}}[$__rate_interval])) / "
        f"sum(rate({metric}_count{{<OSDS>}}[$__rate_interval]))"
    )


def osd_latency_row() -> Row:
    return Row(
        "OSD latency",
        [
            table(
                "dm-crypt under the OSDs",
                "Whether each OSD's data device goes through dm-crypt (from the mappings' "
                "device-mapper uuids; format: the cryptsetup type). An encrypted OSD reads "
                "about 25 % slower (the reference cluster: 1 TiB/s, about 750 GiB/s "
                "encrypted): the fleet comparisons put it with the other encrypted OSDs. "
                "unknown: no block device of its own, or a mapping the exporter cannot tell.",
                [table_target("cephnode_osd_encryption_info{<OSDS>}")],
                [
                    organize(
                        [*PLUMBING, "instance", "Value"],
                        order=["ceph_daemon", "encryption", "format"],
                    )
                ],
                w=8,
                sort=[{"displayName": "ceph_daemon", "desc": False}],
            ),
            heatmap(
                "Op latency of $ceph_daemon ($op)",
                "Distribution of client op latency of the OSD over time, from its "
                "histogram buckets (log2 edges from 100 us). A band moving up at one load "
                "is the OSD getting slower; a second band well above the first is a "
                "subset of ops waiting (replicas, a laggy PG, deep C-state wake-ups). One "
                "panel per selected OSD.",
                [
                    target(
                        "sum by (le) (rate(cephnode_osd_op_latency_seconds_bucket{<OSDS>, "
                        'op="$op"}[$__rate_interval]))',
                        "{{le}}",
                        fmt="heatmap",
                    )
                ],
                w=8,
                h=8,
                extra={"repeat": "ceph_daemon", "repeatDirection": "h", "maxPerRow": 3},
            ),
        ],
    )


def osd_quantiles_row() -> Row:
    return Row(
        "OSD latency quantiles and stages",
        [
            timeseries(
                "p99 and p50 $op latency per OSD",
                "Each OSD's p99 (the exporter's) and p50 (dashed, computed here from the "
                "node's own buckets: no alert needs it fleet-wide), against the fleet median "
                "of the OSDs' p99 (white, dashed; reads and writes only: the fleet does not "
                "compare read-modify-write ops). All OSDs of the node above the fleet: the host "
                "is detuned; one OSD above: its drive, link or shard threads.",
                [
                    # The exporter's p99: read-modify-write ops too, which the fleet
                    # rules leave out.
                    target(
                        'cephnode_osd_op_latency_quantile_seconds{<OSDS>, op="$op", phi="0.99"}',
                        "{{ceph_daemon}} p99",
                    ),
                    # Where the p99 exists: at least 1 op/s, as for the p99.
                    target(
                        "histogram_quantile(0.5, sum by (ceph_daemon, le) (rate("
                        'cephnode_osd_op_latency_seconds_bucket{<OSDS>, op="$op"}[5m])))'
                        " and on (ceph_daemon) "
                        'cephnode_osd_op_latency_quantile_seconds{<OSDS>, op="$op", '
                        'phi="0.99"}',
                        "{{ceph_daemon}} p50",
                    ),
                    target(
                        "quantile by (device_class) (0.5, "
                        'cephnode_osd_op_latency_quantile_seconds{cluster="$cluster", '
                        'op="$op", phi="0.99"} * on (cluster, ceph_daemon) group_left '
                        "(device_class) ceph_daemon_device_class:ceph_osd_metadata:group"
                        '{cluster="$cluster"})',
                        "fleet median p99 ({{device_class}})",
                    ),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[P50_LINE, FLEET_MEDIAN_LINE],
            ),
            heartbeat_panel(),
            timeseries(
                "Op pipeline stages (mean over the selected OSDs)",
                "Where a client op's time goes: queue wait before a shard thread takes it "
                "(high: too few shards/threads or starved cores), prepare, process, and "
                "the replica writes this OSD serves. Rate of _sum over rate of _count.",
                [
                    target(stage_mean("cephnode_osd_op_queue_wait_seconds"), "queue wait"),
                    target(stage_mean("cephnode_osd_op_prepare_latency_seconds"), "prepare"),
                    target(stage_mean("cephnode_osd_op_process_latency_seconds"), "process"),
                    target(stage_mean("cephnode_osd_subop_write_latency_seconds"), "sub-op write"),
                ],
                unit="s",
                w=12,
                h=9,
            ),
            timeseries(
                "BlueStore stages (mean over the selected OSDs)",
                "BlueStore commit, kv_sync (flush + commit of a batch), kv_flush (the "
                "device flush), kv_commit (RocksDB), read and the submission throttle. "
                "kv_flush up: the drive or its queue; kv_commit up: RocksDB (an "
                "unoptimised build, compaction); throttle up: more I/O than BlueStore "
                "admits.",
                [
                    target(stage_mean("cephnode_osd_bluestore_commit_latency_seconds"), "commit"),
                    target(stage_mean("cephnode_osd_bluestore_kv_sync_latency_seconds"), "kv_sync"),
                    target(
                        stage_mean("cephnode_osd_bluestore_kv_flush_latency_seconds"), "kv_flush"
                    ),
                    target(
                        stage_mean("cephnode_osd_bluestore_kv_commit_latency_seconds"), "kv_commit"
                    ),
                    target(stage_mean("cephnode_osd_bluestore_read_latency_seconds"), "read"),
                    target(
                        stage_mean("cephnode_osd_bluestore_throttle_latency_seconds"), "throttle"
                    ),
                ],
                unit="s",
                w=12,
                h=9,
            ),
            timeseries(
                "RocksDB call latency per OSD",
                "Mean RocksDB get, submit and submit_sync (WAL-synced) latency per OSD "
                "(the exporter's), against the fleet median of get and submit (white, "
                "dashed; submit_sync waits for the DB device, which the commit latency "
                "compares). get and submit slower than the fleet on every OSD: the RocksDB "
                "build (osd.rocksdb_build, bottleneck 3 of the reference cluster).",
                [
                    target(
                        "cephnode_osd_rocksdb_latency_mean_seconds{<OSDS>}",
                        "{{ceph_daemon}} {{stage}}",
                    ),
                    target(
                        "cluster_device_class_stage:cephnode_osd_rocksdb_latency_seconds:"
                        'quantile_ceph_daemon_mean5m{cluster="$cluster", quantile="0.5"}',
                        "fleet median {{stage}} ({{device_class}})",
                    ),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[FLEET_MEDIAN_LINE],
            ),
        ],
    )


def heartbeat_panel() -> Panel:
    """Beside the latency: the OSDs' heartbeat pings, the network half of laggy PGs."""
    return timeseries(
        "Heartbeat pings per OSD",
        "Each OSD's median (solid) and worst (dashed) ping to its heartbeat peers, per "
        "network (back: cluster, front: public), over the peers' 1-minute averages "
        "(dump_osd_network), against the fleet median of the hosts' medians (white, dashed; "
        "CephNodeHeartbeatPingOutlier compares with it). Every OSD of the node up: its "
        "network; one OSD: its messenger or address; only the worst up: a slow peer "
        "elsewhere.",
        [
            target(
                "cephnode_osd_heartbeat_ping_median_seconds{<OSDS>}",
                "{{ceph_daemon}} {{interface}}",
            ),
            target(
                "cephnode_osd_heartbeat_ping_max_seconds{<OSDS>}",
                "{{ceph_daemon}} {{interface}} worst",
            ),
            target(
                "cluster:cephnode_osd_host_heartbeat_ping_median_seconds:quantile_instance"
                '{cluster="$cluster"}',
                "fleet median",
            ),
        ],
        unit="s",
        w=12,
        h=9,
        overrides=[WORST_LINE, FLEET_MEDIAN_LINE],
    )


# The worst peer's ping, dashed: the OSD's own median is the solid line.
WORST_LINE = override_regexp(".* worst", custom__lineStyle=DASHED)


def osd_state_row() -> Row:
    return Row(
        "OSD ops in flight, CPU and configuration",
        [
            timeseries(
                "Ops in flight by flag point",
                "Ops in flight on the selected OSDs by the last step they reached. "
                "'waiting for sub ops' growing: a replica on another host is slow (see "
                "the fleet's laggy PGs); 'queued for pg' or 'delayed': this OSD is "
                "behind.",
                [
                    target(
                        "sum by (flag_point) (cephnode_osd_ops_in_flight_by_flag_point{<OSDS>})",
                        "{{flag_point}}",
                    )
                ],
                stack=True,
                w=8,
            ),
            timeseries(
                "Slow ops per OSD",
                "Ops in flight longer than osd_op_complaint_time (30 s by default): what "
                "Ceph reports as slow ops. Blocked clients; check the flag points.",
                [target("cephnode_osd_slow_ops{<OSDS>}", "{{ceph_daemon}}")],
                w=8,
            ),
            timeseries(
                "Oldest op in flight per OSD",
                "Age of each OSD's oldest op in flight. Seconds here without slow ops yet "
                "is a stall building up (a stopped replica, a lease running out).",
                [target("cephnode_osd_oldest_op_age_seconds{<OSDS>}", "{{ceph_daemon}}")],
                unit="s",
                w=8,
            ),
            timeseries(
                "OSD CPU per op",
                "CPU seconds each OSD process spends per client op it serves (the "
                "exporter's, over its latency window), against the fleet median of its device "
                "class (white, dashed). Higher than the fleet: debug logging (see the table "
                "beside), an unoptimised RocksDB, or spin-lock contention.",
                [
                    target("cephnode_osd_cpu_seconds_per_op{<OSDS>}", "{{ceph_daemon}}"),
                    target(
                        "quantile by (device_class) (0.5, "
                        'cephnode_osd_cpu_seconds_per_op{cluster="$cluster"} '
                        "* on (cluster, ceph_daemon) group_left (device_class) "
                        'ceph_daemon_device_class:ceph_osd_metadata:group{cluster="$cluster"})',
                        "fleet median ({{device_class}})",
                    ),
                ],
                unit="s",
                w=8,
                overrides=[FLEET_MEDIAN_LINE],
            ),
            table(
                "Debug levels on",
                "Debug subsystems of the profile's list whose log or gather level is not "
                "0 (osd.debug_levels). Messages up to the gather level are formatted on "
                "the I/O path even when not written: set debug_<subsystem> = 0/0.",
                [table_target("cephnode_osd_debug_level_info{<OSDS>}")],
                [
                    organize(
                        [*PLUMBING, "instance", "Value"],
                        order=["ceph_daemon", "subsystem", "log_level", "gather_level"],
                    )
                ],
                w=8,
                sort=[{"displayName": "ceph_daemon", "desc": False}],
            ),
            state_timeline(
                "OSD admin sockets answering",
                "Whether each OSD's admin socket answered the exporter. Not answering: "
                "the OSD is stopped or hung (a stopped OSD still accepts connections), or "
                "the socket is stale; its other panels have gaps then.",
                [target("cephnode_osd_scrape_success{<OSDS>}", "{{ceph_daemon}}")],
                value_map({"1": ("answering", "green"), "0": ("not answering", "red")}),
                w=8,
            ),
            table(
                "OSDs: version, object store, allocator and disks",
                "Ceph version, object store and the malloc the process linked, with the "
                "NVMe namespace and controller under each OSD (to match with the NVMe "
                "and IOMMU panels).",
                [
                    table_target("cephnode_osd_info{<OSDS>}"),
                    table_target("cephnode_osd_device_info{<OSDS>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance", "Value #A", "Value #B"],
                        order=[
                            "ceph_daemon",
                            "version",
                            "objectstore",
                            "allocator",
                            "device",
                            "controller",
                        ],
                    )
                ],
                w=16,
                sort=[{"displayName": "ceph_daemon", "desc": False}],
            ),
        ],
    )
