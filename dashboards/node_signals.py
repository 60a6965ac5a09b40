"""The node dashboard's row of slower-moving host facts: firmware, microcode, kernel and
THP, the frequency the CPUs achieve, where the devices' interrupts are served, and each
OSD's memory against its target. What changed here is what an operator looks at next to a
latency regression that no tuning check explains.
"""

from __future__ import annotations

from grafana import (
    PLUMBING,
    Row,
    organize,
    stat,
    table,
    table_target,
    target,
    timeseries,
    value_map,
)

# One "fact | value" row per tuning fact family: the _info series carry their values in
# labels of different names, so each is joined into one `value` label first.
_FACTS = [
    ("BIOS", "cephnode_bios_info", " ", ["vendor", "version", "date"]),
    ("System", "cephnode_system_info", " ", ["vendor", "product"]),
    ("CPU microcode", "cephnode_cpu_microcode_info", " ", ["revision"]),
    ("Kernel", "cephnode_kernel_release_info", " ", ["release"]),
    (
        "Transparent huge pages",
        "cephnode_transparent_hugepage_info",
        " defrag=",
        ["enabled", "defrag"],
    ),
]


def _facts_expr() -> str:
    parts = []
    for fact, metric, sep, labels in _FACTS:
        joined = ", ".join(f'"{label}"' for label in labels)
        parts.append(
            f'label_replace(label_join({metric}{{<NODE>}}, "value", "{sep}", {joined}), '
            f'"fact", "{fact}", "", "")'
        )
    return "max by (fact, value) (" + " or ".join(parts) + ")"


def signals_row() -> Row:
    return Row(
        "Firmware, frequency, interrupts and OSD memory",
        [
            table(
                "Firmware, microcode, kernel and THP",
                "The BIOS, system, CPU microcode revision, kernel release and transparent "
                "huge page mode of the node. A BIOS reset re-enabled deep C-states on the "
                "reference cluster: when latency moved with no failing check, see whether "
                "one of these changed (CephNodeTuningChanged names it) or differs from the "
                "rest of the fleet (CephNodeFactDrift).",
                [table_target(_facts_expr())],
                [organize(["Time", "Value"], order=["fact", "value"])],
                w=8,
                sort=[{"displayName": "fact", "desc": False}],
            ),
            timeseries(
                "Achieved CPU frequency",
                "The frequency the CPUs ran at (cpuinfo_avg_freq, from the hardware's "
                "APERF/MPERF counters, where the kernel has it; else scaling_cur_freq): "
                "mean, lowest and highest over the online CPUs. What the governor asks "
                "for is not what the BIOS and the power limits let the cores do.",
                [
                    target(
                        "cephnode_cpu_achieved_frequency_mean_hertz{<NODE>}", "mean ({{source}})"
                    ),
                    target(
                        "cephnode_cpu_achieved_frequency_min_hertz{<NODE>}", "lowest ({{source}})"
                    ),
                    target(
                        "cephnode_cpu_achieved_frequency_max_hertz{<NODE>}", "highest ({{source}})"
                    ),
                ],
                unit="hertz",
                w=8,
            ),
            timeseries(
                "OSD resident memory against osd_memory_target",
                "Each OSD's resident memory over its osd_memory_target. The OSD trims its "
                "caches to stay near the target; well above 1 it is not keeping up (or "
                "the allocator holds freed memory), far below it has room for more cache.",
                [
                    target(
                        "cephnode_osd_resident_memory_bytes{<OSDS>} / on (cluster, instance, "
                        "ceph_daemon) cephnode_osd_config_value{<OSDS>, "
                        'option="osd_memory_target"}',
                        "{{ceph_daemon}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            table(
                "Interrupts per device",
                "Per NVMe controller and network port: its interrupts, those the kernel "
                "manages (NVMe I/O queues, spread over every CPU), those whose CPUs are all "
                "on another NUMA node than the device's, and the distinct CPUs serving "
                "them. Remote interrupts, or one CPU for many, fail irq.affinity.",
                [
                    table_target("cephnode_device_irqs{<NODE>}"),
                    table_target("cephnode_device_irqs_managed{<NODE>}"),
                    table_target("cephnode_device_irqs_remote_numa{<NODE>}"),
                    table_target("cephnode_device_irq_cpus{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={
                            "Value #A": "interrupts",
                            "Value #B": "kernel-managed",
                            "Value #C": "on another NUMA node",
                            "Value #D": "CPUs serving them",
                        },
                        order=["device", "kind"],
                    )
                ],
                w=20,
                sort=[{"displayName": "device", "desc": False}],
            ),
            stat(
                "irqbalance",
                "Whether irqbalance runs: it moves interrupts that the kernel does not "
                "manage (NIC queues, the NVMe admin queue) between CPUs.",
                [target("cephnode_irqbalance_running{<NODE>}", instant=True)],
                w=4,
                h=8,
                defaults={
                    "mappings": value_map({"1": ("running", "green"), "0": ("not running", "text")})
                },
            ),
        ],
    )
