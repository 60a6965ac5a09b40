"""Collector ``cpufreq``: the frequency-scaling policy, counted by CPU.

A node left on ``powersave`` or ``schedutil`` answers an NVMe completion slower than one
on ``performance``. Current frequencies are node_exporter's (``node_cpu_scaling_*``) and
are not exported again; this collector says how the policy is set. The clock limits
(``scaling_max_freq``, ``cpuinfo_max_freq``) are read for the check ``cpu.governor`` and
not exported either: node_exporter has them per CPU (``node_cpu_scaling_frequency_max_hertz``,
``node_cpu_frequency_max_hertz``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import Collector, CollectorContext, metric_name, register
from cephnode_exporter.hostfs import AttrFiles, fd_budget
from cephnode_exporter.hostfs.cpufreq import CPUFreq, read_cpufreq


@register
class CPUFreqCollector(Collector):
    name = "cpufreq"
    help = "CPU frequency scaling driver, governors, energy-performance preference, boost"
    reuse_unchanged = True

    # Share of the descriptor limit for the kept-open governor, EPP and clock-limit files
    # (cpuidle keeps 0.5, OSD threads 0.25, irq 0.1, nvme 0.05).
    FD_SHARE = 0.05

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        # Re-read with pread, one syscall instead of four; recheck: a file replaced in a
        # copied tree is opened afresh. An offline CPU's files read as absent (ENODEV).
        self._files = AttrFiles(fd_budget(self.FD_SHARE), recheck=True)

    def close(self) -> None:
        self._files.close_all()

    def read(self) -> CPUFreq:
        return read_cpufreq(self.ctx.fs, self._files)

    def metrics(self, facts: CPUFreq) -> Iterable[Metric]:
        yield _counted(
            "cpu_scaling_driver_cpus",
            "Online CPUs per cpufreq scaling driver.",
            "driver",
            Counter(p.driver for p in facts.cpus.values()),
        )
        yield _counted(
            "cpu_scaling_governor_cpus",
            "Online CPUs per cpufreq scaling governor.",
            "governor",
            Counter(p.governor for p in facts.cpus.values()),
        )
        yield _counted(
            "cpu_energy_performance_preference_cpus",
            "Online CPUs per energy-performance preference (drivers with EPP only).",
            "preference",
            Counter(
                p.energy_performance_preference
                for p in facts.cpus.values()
                if p.energy_performance_preference is not None
            ),
        )
        online = GaugeMetricFamily(
            metric_name("cpu_scaling_online_cpus"),
            "Online CPUs, with or without cpufreq (the denominator of the per-CPU counts).",
        )
        online.add_metric([], float(facts.online_cpus))
        yield online
        if facts.boost is not None:
            boost = GaugeMetricFamily(
                metric_name("cpu_boost_enabled"),
                "1 when frequency boost (turbo) is enabled.",
            )
            boost.add_metric([], 1.0 if facts.boost else 0.0)
            yield boost
        if facts.amd_pstate_status is not None:
            yield _mode(
                "cpu_amd_pstate_info",
                "Operating mode of the amd-pstate driver (active, passive, guided, disable).",
                facts.amd_pstate_status,
            )
        if facts.intel_pstate_status is not None:
            yield _mode(
                "cpu_intel_pstate_info",
                "Operating mode of the intel_pstate driver (active, passive, off).",
                facts.intel_pstate_status,
            )
        if facts.max_perf_pct is not None:
            cap = GaugeMetricFamily(
                metric_name("cpu_intel_pstate_max_perf_ratio"),
                "intel_pstate's global limit on every CPU's performance, as a ratio of the "
                "highest turbo P-state (intel_pstate/max_perf_pct / 100).",
            )
            cap.add_metric([], facts.max_perf_pct / 100)
            yield cap


def _mode(name: str, doc: str, status: str) -> GaugeMetricFamily:
    """A P-state driver's operating mode, as one _info series labelled with it."""
    family = GaugeMetricFamily(metric_name(name), doc, labels=["status"])
    family.add_metric([status], 1.0)
    return family


def _counted(name: str, doc: str, label: str, counts: Counter[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(metric_name(name), doc, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], float(count))
    return family
