"""The host rows of ``cephnode-node.json``: the tuning report, CPU (C-states, governors),
IOMMU and kernel spin locks, NVMe queues and PCIe links, NICs.
"""

from __future__ import annotations

from board import CHECK_STATUS, STATUS_MAP
from grafana import (
    PLUMBING,
    Panel,
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
    value_map,
)


def report_row() -> Row:
    return Row(
        "Tuning report",
        [
            table(
                "Tuning report",
                "Every tuning check of the node with its status: a row per failing or "
                "warning subject, and one pass row for a check none of whose subjects "
                "fails or warns. The same results as `cephnode-exporter check`, which also "
                "prints what was observed and the fix. Skipped checks and those whose "
                "collector failed have no row.",
                [
                    table_target(
                        CHECK_STATUS.replace("<SEL>", "<NODE>")
                        + " or label_replace(cephnode_tuning_check_hash{<NODE>} unless on "
                        "(check) (cephnode_tuning_check_failed{<NODE>} or "
                        'cephnode_tuning_check_warning{<NODE>}), "status", "pass", "", "")'
                    )
                ],
                [organize([*PLUMBING, "instance", "Value"], order=["check", "subject", "status"])],
                w=16,
                h=10,
                sort=[{"displayName": "status", "desc": False}],
                overrides=[
                    override(
                        "status",
                        mappings=STATUS_MAP,
                        custom__cellOptions={"type": "color-background"},
                    ),
                ],
            ),
            stat(
                "Failing checks",
                "Check results that fail on this node (one per subject). Each is a "
                "detuning to fix: the report beside it names it.",
                [target("count(cephnode_tuning_check_failed{<NODE>}) or vector(0)")],
                w=4,
                h=5,
                defaults={"thresholds": thresholds((None, "green"), (1, "red"))},
            ),
            stat(
                "Warning checks",
                "Check results that warn on this node (sysctls, tuned profile, NIC rings "
                "and MTU, PGs per OSD, NUMA placement).",
                [target("count(cephnode_tuning_check_warning{<NODE>}) or vector(0)")],
                w=4,
                h=5,
                defaults={"thresholds": thresholds((None, "green"), (1, "orange"))},
            ),
            _profile_stat(),
            stat(
                "Collectors failing",
                "Collectors of this exporter that failed in the latest scrape; their checks "
                "are unknown and absent from the report.",
                [target("count(cephnode_scrape_collector_success{<NODE>} == 0) or vector(0)")],
                w=4,
                h=5,
                defaults={"thresholds": thresholds((None, "green"), (1, "orange"))},
            ),
        ],
    )


def cpu_row() -> Row:
    return Row(
        "CPU: C-states and frequency",
        [
            timeseries(
                "C-state residency per state",
                "Share of CPU time in each idle state (stacked; the rest is busy). On a "
                "tuned node only POLL and C1 (exit latency 1-2 us) hold time; residency in "
                "C2/C6 means the BIOS or the kernel lets CPUs sleep deeply, and I/O "
                "completions wait for them to wake (cpu.cstates).",
                [
                    target(
                        "sum by (state) (rate(cephnode_cpu_idle_state_time_seconds_total{<NODE>}"
                        "[$__rate_interval])) / scalar(sum(cephnode_cpu_idle_cpus{<NODE>}))",
                        "{{state}}",
                    )
                ],
                unit="percentunit",
                stack=True,
                w=8,
            ),
            timeseries(
                "Wake-up cost per state",
                "Estimated share of CPU time spent waking up from each state (entries x "
                "exit latency, per CPU). Deep states cost most per wake-up; a high value "
                "next to many entries is latency on every interrupt.",
                [
                    target(
                        "sum by (state) (rate(cephnode_cpu_idle_state_wakeup_seconds_total{<NODE>}"
                        "[$__rate_interval])) / scalar(sum(cephnode_cpu_idle_cpus{<NODE>}))",
                        "{{state}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            timeseries(
                "Entries too deep for the wake-up pattern",
                "Share of each state's entries whose idle period was shorter than its "
                "target residency (above): the governor keeps choosing a state the "
                "workload interrupts too soon, paying the exit latency for nothing.",
                [
                    target(
                        "sum by (state) (rate(cephnode_cpu_idle_state_above_total{<NODE>}"
                        "[$__rate_interval])) / sum by (state) (rate("
                        "cephnode_cpu_idle_state_entries_total{<NODE>}[$__rate_interval]))",
                        "{{state}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            table(
                "Idle states",
                "Each idle state's exit latency, target residency and the CPUs it is "
                "enabled on. A state with exit latency above 10 us enabled on any CPU "
                "fails cpu.cstates: disable it (BIOS maximum performance, "
                "processor.max_cstate=1, or cpupower idle-set -D 11).",
                [
                    table_target("cephnode_cpu_idle_state_exit_latency_seconds{<NODE>}"),
                    table_target("cephnode_cpu_idle_state_target_residency_seconds{<NODE>}"),
                    table_target("cephnode_cpu_idle_state_enabled_cpus{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={
                            "Value #A": "exit latency",
                            "Value #B": "target residency",
                            "Value #C": "enabled on CPUs",
                        },
                        order=["state", "Value #A", "Value #B", "Value #C"],
                    )
                ],
                w=8,
                sort=[{"displayName": "exit latency", "desc": False}],
                overrides=[
                    override("exit latency", unit="s"),
                    override("target residency", unit="s"),
                ],
            ),
            bargauge(
                "CPUs per frequency governor",
                "Online CPUs per scaling governor. Anything but performance (powersave, "
                "ondemand, schedutil) lets cores drop their clock when idle and ramp up late "
                "(cpu.governor).",
                [
                    target(
                        "cephnode_cpu_scaling_governor_cpus{<NODE>}", "{{governor}}", instant=True
                    )
                ],
                w=8,
                defaults={"min": 0},
                overrides=[override("performance", color={"mode": "fixed", "fixedColor": "green"})],
            ),
            bargauge(
                "CPUs per scaling driver, and boost",
                "Online CPUs per cpufreq scaling driver, and whether boost (turbo) is on "
                "(1). A driver change after a BIOS update (acpi-cpufreq to amd-pstate) "
                "changes which governors and preferences apply.",
                [
                    target("cephnode_cpu_scaling_driver_cpus{<NODE>}", "{{driver}}", instant=True),
                    target("cephnode_cpu_boost_enabled{<NODE>}", "boost enabled", instant=True),
                ],
                w=8,
                defaults={"min": 0},
            ),
        ],
    )


def iommu_row() -> Row:
    return Row(
        "IOMMU and kernel profile",
        [
            table(
                "IOMMU translation per NVMe controller",
                "Per NVMe controller its IOMMU group and the group's default domain. "
                "'translated' (DMA or DMA-FQ) makes every I/O allocate an IOVA under a "
                "spin lock: the reference cluster's bottleneck 2 (iommu.nvme). Boot with "
                "iommu=pt to get 'identity'.",
                [
                    table_target(
                        "cephnode_iommu_dma_translated{<NODE>} * on (cluster, instance, "
                        "controller) group_left (group, type) cephnode_iommu_group_info{<NODE>}"
                    )
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={"Value": "DMA"},
                        order=["controller", "group", "type", "Value"],
                    )
                ],
                w=8,
                h=9,
                sort=[{"displayName": "controller", "desc": False}],
                overrides=[
                    override(
                        "DMA",
                        mappings=value_map(
                            {"1": ("translated", "red"), "0": ("passthrough", "green")}
                        ),
                        custom__cellOptions={"type": "color-background"},
                    )
                ],
            ),
            table(
                "IOMMU units and boot parameters",
                "IOMMU units the kernel drives (0: no IOMMU, nothing translated) and the "
                "IOMMU parameters on the kernel command line. Without iommu=pt (or "
                "iommu.passthrough=1) an active IOMMU translates NVMe DMA.",
                [
                    table_target(
                        "cephnode_iommu_kernel_params_info{<NODE>} * on (cluster, instance) "
                        "group_left cephnode_iommu_units{<NODE>}"
                    )
                ],
                [organize([*PLUMBING, "instance"], rename={"Value": "IOMMU units"})],
                w=8,
                h=9,
            ),
            timeseries(
                "Busy CPU samples per class (kprofile)",
                "What the non-idle CPU samples of the kprofile collector did, over 10 "
                "minutes of windows: spinlock_iommu (spinning under IOMMU/IOVA code), "
                "spinlock (other contended locks), iommu, kernel, user. A large spin-lock "
                "share is CPU burnt waiting, not working.",
                [
                    target(
                        "sum by (class) (rate(cephnode_kprofile_samples_total"
                        '{<NODE>, class!="idle"}[10m])) / scalar(sum(rate('
                        'cephnode_kprofile_samples_total{<NODE>, class!="idle"}[10m])))',
                        "{{class}}",
                    )
                ],
                unit="percentunit",
                stack=True,
                w=8,
                h=9,
            ),
            timeseries(
                "IOMMU spin-lock share",
                "Share of busy CPU samples spinning on a lock under IOMMU/IOVA code: the "
                "latest window (what kernel.spinlock_iommu judges, 5 % by default) and "
                "smoothed over 10 minutes, with all spin locks for comparison.",
                [
                    target("cephnode_kprofile_spinlock_iommu_ratio{<NODE>}", "latest window"),
                    target(
                        "instance:cephnode_kprofile_spinlock_iommu:ratio_rate10m{<NODE>}",
                        "IOMMU spin locks, 10 min",
                    ),
                    target(
                        "instance:cephnode_kprofile_spinlock:ratio_rate10m{<NODE>}",
                        "all spin locks, 10 min",
                    ),
                ],
                unit="percentunit",
                w=12,
            ),
            bargauge(
                "Top spin-lock callers",
                "The functions taking the contended spin locks in the latest kprofile "
                "window, as a share of busy samples. alloc_iova / iommu_dma_alloc_iova at "
                "the top is IOMMU translation (boot with iommu=pt); other callers point at "
                "other contention (the block layer, the network stack).",
                [
                    target(
                        "sort_desc(cephnode_kprofile_spinlock_caller_ratio{<NODE>})",
                        "{{function}}",
                        instant=True,
                    )
                ],
                unit="percentunit",
                w=12,
                defaults={
                    "min": 0,
                    "max": 1,
                    "thresholds": thresholds((None, "orange"), (0.05, "red")),
                },
            ),
        ],
    )


def nvme_row() -> Row:
    return Row(
        "NVMe",
        [
            table(
                "NVMe controllers: queues and PCIe link",
                "Per controller: I/O queues (queue_count, admin queue included), NUMA node "
                "and the PCIe link, trained against maximum. A link below its maximum speed "
                "or width caps the drive's bandwidth (nvme.pcie_link): reseat the drive, "
                "check the backplane, riser and the slot's BIOS link speed.",
                [
                    table_target("cephnode_nvme_queues{<NODE>}"),
                    table_target("cephnode_nvme_numa_node{<NODE>}"),
                    table_target("cephnode_nvme_pcie_current_link_transfers_per_second{<NODE>}"),
                    table_target("cephnode_nvme_pcie_max_link_transfers_per_second{<NODE>}"),
                    table_target("cephnode_nvme_pcie_current_link_width{<NODE>}"),
                    table_target("cephnode_nvme_pcie_max_link_width{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={
                            "Value #A": "queues",
                            "Value #B": "NUMA node",
                            "Value #C": "link speed",
                            "Value #D": "max speed",
                            "Value #E": "link width",
                            "Value #F": "max width",
                        },
                        order=[
                            "controller",
                            "Value #A",
                            "Value #B",
                            "Value #C",
                            "Value #D",
                            "Value #E",
                            "Value #F",
                        ],
                    )
                ],
                w=12,
                h=9,
                sort=[{"displayName": "controller", "desc": False}],
            ),
            table(
                "PCIe links trained below their maximum",
                "Controllers whose link trained slower or narrower than the controller "
                "supports (value: the trained speed or width). Empty on a healthy node.",
                [
                    table_target(
                        "cephnode_nvme_pcie_current_link_width{<NODE>} < "
                        "cephnode_nvme_pcie_max_link_width{<NODE>} or "
                        "cephnode_nvme_pcie_current_link_transfers_per_second{<NODE>} < "
                        "cephnode_nvme_pcie_max_link_transfers_per_second{<NODE>}"
                    )
                ],
                [
                    organize(
                        ["Time", "job", "cluster", "instance"],
                        rename={"__name__": "metric", "Value": "trained"},
                    )
                ],
                w=12,
                h=9,
            ),
            table(
                "Namespaces: scheduler and queue settings",
                "Per NVMe namespace: the I/O scheduler (anything but none adds a lock and "
                "a sort on every request: nvme.scheduler), hardware queues, nr_requests, "
                "rq_affinity, nomerges, polling, writeback throttling and read-ahead.",
                [
                    table_target("cephnode_nvme_scheduler_info{<NODE>}"),
                    table_target("cephnode_nvme_hw_queues{<NODE>}"),
                    table_target("cephnode_nvme_queue_requests{<NODE>}"),
                    table_target("cephnode_nvme_queue_rq_affinity{<NODE>}"),
                    table_target("cephnode_nvme_queue_nomerges{<NODE>}"),
                    table_target("cephnode_nvme_queue_io_poll{<NODE>}"),
                    table_target("cephnode_nvme_queue_wbt_latency_seconds{<NODE>}"),
                    table_target("cephnode_nvme_queue_read_ahead_bytes{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance", "Value #A"],
                        rename={
                            "Value #B": "hw queues",
                            "Value #C": "nr_requests",
                            "Value #D": "rq_affinity",
                            "Value #E": "nomerges",
                            "Value #F": "io_poll",
                            "Value #G": "wbt latency",
                            "Value #H": "read-ahead",
                        },
                        order=[
                            "device",
                            "scheduler",
                            "Value #B",
                            "Value #C",
                            "Value #D",
                            "Value #E",
                            "Value #F",
                            "Value #G",
                            "Value #H",
                        ],
                    )
                ],
                w=16,
                h=9,
                sort=[{"displayName": "device", "desc": False}],
                overrides=[
                    override("wbt latency", unit="s"),
                    override("read-ahead", unit="bytes"),
                    override(
                        "scheduler",
                        mappings=[
                            {
                                "type": "regex",
                                "options": {
                                    "pattern": "^(?!none$).*",
                                    "result": {"color": "red", "index": 0},
                                },
                            }
                        ],
                        custom__cellOptions={"type": "color-text"},
                    ),
                ],
            ),
            timeseries(
                "Requests in flight per namespace",
                "Requests issued to each NVMe namespace and not completed. Uneven across "
                "namespaces of equal OSDs: one drive (or its link) is slower and its OSD "
                "queues up.",
                [target("sum by (device) (cephnode_nvme_inflight_requests{<NODE>})", "{{device}}")],
                w=8,
                h=9,
            ),
        ],
    )


def net_row() -> Row:
    return Row(
        "Network",
        [
            table(
                "Ports: driver, bond, NUMA node, MTU and speed",
                "Each physical port with its driver, PCI function, bond and NUMA node, "
                "and node_exporter's MTU and link speed (node_network_mtu_bytes, "
                "node_network_speed_bytes of the same host). An MTU below 9000 on a Ceph "
                "network fragments every large message (net.mtu); a port on another NUMA "
                "node than the OSDs' crosses the interconnect.",
                [
                    table_target("cephnode_network_device_info{<NODE>}"),
                    table_target("cephnode_network_numa_node{<NODE>}"),
                    table_target(
                        "max by (device) (node_network_mtu_bytes{<NODE_EXPORTER>}) and on "
                        "(device) max by (device) (cephnode_network_device_info{<NODE>})"
                    ),
                    table_target(
                        "max by (device) (node_network_speed_bytes{<NODE_EXPORTER>}) and on "
                        "(device) max by (device) (cephnode_network_device_info{<NODE>})"
                    ),
                ],
                [
                    organize(
                        [*PLUMBING, "instance", "Value #A"],
                        rename={"Value #B": "NUMA node", "Value #C": "MTU", "Value #D": "speed"},
                        order=[
                            "device",
                            "driver",
                            "pci",
                            "master",
                            "Value #B",
                            "Value #C",
                            "Value #D",
                        ],
                    )
                ],
                w=12,
                h=7,
                overrides=[
                    override("speed", unit="Bps"),
                    override(
                        "MTU",
                        thresholds=thresholds((None, "red"), (9000, "green")),
                        custom__cellOptions={"type": "color-text"},
                    ),
                ],
            ),
            table(
                "NIC rings: current against the driver maximum",
                "RX and TX descriptor rings per port and the largest the driver accepts "
                "(ethtool -g). Rings below the maximum drop packets in bursts at 100 GbE "
                "(net.rings): ethtool -G <dev> rx <max> tx <max>.",
                [
                    table_target("cephnode_network_ring_entries{<NODE>}"),
                    table_target("cephnode_network_ring_max_entries{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={"Value #A": "entries", "Value #B": "maximum"},
                        order=["device", "ring", "Value #A", "Value #B"],
                    )
                ],
                w=12,
                h=7,
            ),
        ],
    )


def _profile_stat() -> Panel:
    panel = stat(
        "Tuning profile",
        "The profile the checks compare against (--profile; 'default' is the built-in one).",
        [target("cephnode_tuning_profile_info{<NODE>}", "{{profile}}", instant=True)],
        w=4,
        h=5,
    )
    panel.options["textMode"] = "name"
    return panel
