"""Collector ``cpuhw``: the frequency the CPUs achieve, and which hardware-state perf
events the kernel offers.

The ``cpufreq`` and ``cpuidle`` collectors show what the OS requests; a BIOS in a power
saving mode can hold the cores below it whatever the governor says. The achieved
frequency is summarised over the online CPUs (node_exporter exports the per-CPU
``scaling_cur_freq`` as ``node_cpu_scaling_frequency_hertz``, but not the newer
``cpuinfo_avg_freq``). Hardware C-state residency needs perf counters and privileges
(docs/cpu-hardware.md): this collector lists the events that exist so a dashboard or
an operator knows what a privileged tool could count.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    metric_name,
    register,
)
from cephnode_exporter.hostfs import AttrFiles, fd_budget
from cephnode_exporter.hostfs.cpuhw import CPUHWFacts, read_cpuhw

# Share of the descriptor limit for the per-CPU frequency files (one per CPU).
FD_SHARE = 0.02


@register
class CPUHWCollector(Collector):
    name = "cpuhw"
    help = "Achieved CPU frequency (cpuinfo_avg_freq or scaling_cur_freq), perf C-state/MSR events"
    reuse_unchanged = True

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._files = AttrFiles(fd_budget(FD_SHARE))

    def close(self) -> None:
        self._files.close_all()

    def read(self) -> CPUHWFacts:
        return read_cpuhw(self.ctx.fs, self._files)

    def metrics(self, facts: CPUHWFacts) -> Iterable[Metric]:
        freq = facts.frequencies
        if freq is not None and freq.hertz:
            for stat, value, what in (
                ("mean", sum(freq.hertz) / len(freq.hertz), "Mean"),
                ("min", min(freq.hertz), "Lowest"),
                ("max", max(freq.hertz), "Highest"),
            ):
                family = GaugeMetricFamily(
                    metric_name(f"cpu_achieved_frequency_{stat}_hertz"),
                    f"{what} achieved frequency over the online CPUs with a recent sample; "
                    "source cpuinfo_avg_freq (hardware counters, Linux with commit "
                    "fbb4a4759b54) or scaling_cur_freq.",
                    labels=["source"],
                )
                family.add_metric([freq.source], value)
                yield family
        if freq is not None:
            sampled = GaugeMetricFamily(
                metric_name("cpu_achieved_frequency_cpus"),
                "Online CPUs behind the achieved frequency (sampled: had a recent sample; "
                "idle: cpuinfo_avg_freq had none, usually an idle CPU).",
                labels=["source", "state"],
            )
            sampled.add_metric([freq.source, "sampled"], float(len(freq.hertz)))
            sampled.add_metric([freq.source, "idle"], float(freq.no_sample))
            yield sampled
        events = GaugeMetricFamily(
            metric_name("perf_pmu_event_info"),
            "Hardware-state perf events the kernel offers (PMUs cstate_core, cstate_pkg, "
            "msr); counting them needs CAP_PERFMON or perf_event_paranoid <= 0.",
            labels=["pmu", "event"],
        )
        for pmu, names in sorted(facts.pmus.items()):
            for name in names:
                events.add_metric([pmu, name], 1.0)
        yield events
        if facts.perf_event_paranoid is not None:
            paranoid = GaugeMetricFamily(
                metric_name("perf_event_paranoid"),
                "kernel.perf_event_paranoid: 2 and above, only user-space profiling of "
                "own processes without CAP_PERFMON; -1, no restriction.",
            )
            paranoid.add_metric([], float(facts.perf_event_paranoid))
            yield paranoid
