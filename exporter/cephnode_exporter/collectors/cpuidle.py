"""Collector ``cpuidle``: C-state residency, wake-up cost and which states are enabled.

Deep C-states left enabled by the BIOS cost the reference cluster 10-20 % of its
throughput; node_exporter has no C-state metrics at all. Series are summed over CPUs by
default (a 96-thread node would otherwise export thousands); ``--collector.cpuidle.per-cpu``
keeps a ``cpu`` label instead.
"""

from __future__ import annotations

import argparse
import operator
from collections.abc import Iterable
from itertools import chain
from operator import attrgetter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import Collector, CollectorContext, metric_name, register
from cephnode_exporter.facts.cpuidle import CPUIdleFacts
from cephnode_exporter.hostfs import ParseError
from cephnode_exporter.hostfs.cmdline import read_cmdline
from cephnode_exporter.hostfs.cpuidle import CPUIdle, CPUIdleReader, IdleStateSample
from cephnode_exporter.hostfs.pmqos import read_cpu_latency_limit_us

# Microseconds per second: divide (400 / 1e6 prints 0.0004; 400 * 1e-6 does not).
US_PER_S = 1e6

# Kernel parameters that limit or replace C-states (Documentation/admin-guide/
# kernel-parameters.txt); exported as labels of one info series, empty when absent.
CMDLINE_PARAMS = (
    "processor.max_cstate",
    "intel_idle.max_cstate",
    "idle",
    "cpuidle.off",
    "cpuidle.governor",
)


# (attribute of IdleStateSample, metric suffix, help, divisor to base units)
_COUNTERS = (
    ("time_us", "time_seconds", "Time CPUs spent in the idle state.", US_PER_S),
    ("usage", "entries", "Times CPUs entered the idle state.", 1),
    (
        "above",
        "above",
        "Entries whose actual idle time was shorter than the state's target residency "
        "(the state was too deep).",
        1,
    ),
    (
        "below",
        "below",
        "Entries whose idle time would have allowed a deeper state (the state was too shallow).",
        1,
    ),
    ("rejected", "rejected", "Requests to enter the state that the driver refused.", 1),
)


@register
class CPUIdleCollector(Collector):
    name = "cpuidle"
    help = "CPU idle states (C-states): residency, entries, wake-up cost, enabled CPUs"
    reuse_unchanged = True

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._reader = CPUIdleReader(ctx.fs)
        self._per_cpu = bool(ctx.options.collector_cpuidle_per_cpu)

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--collector.cpuidle.per-cpu",
            dest="collector_cpuidle_per_cpu",
            action="store_true",
            help="export idle-state series per CPU with a cpu label (default: summed over CPUs)",
        )

    def close(self) -> None:
        self._reader.close()

    def read(self) -> CPUIdleFacts:
        idle = self._reader.read()
        errors = idle.errors
        cmdline: dict[str, str] | None = None
        try:
            cmdline = read_cmdline(self.ctx.fs)
        except (OSError, ParseError) as exc:
            errors.add(exc)
        limit: int | None = None
        try:
            limit = read_cpu_latency_limit_us(self.ctx.fs)
        except (OSError, ParseError) as exc:
            errors.add(exc)
        return CPUIdleFacts(idle, cmdline, limit, errors)

    def metrics(self, facts: CPUIdleFacts) -> Iterable[Metric]:
        idle = facts.idle
        yield _gauge(
            "driver_info",
            "The cpuidle driver and governor; driver is empty without cpuidle, "
            "'none' when no driver registered.",
            {"driver": idle.driver or "", "governor": idle.governor or ""},
            1.0,
        )
        yield _gauge("cpus", "Online CPUs with idle-state data.", {}, float(len(idle.cpus)))
        if facts.cmdline is not None:
            labels = {p.replace(".", "_"): facts.cmdline.get(p, "") for p in CMDLINE_PARAMS}
            yield _gauge(
                "kernel_params_info",
                "C-state kernel parameters from /proc/cmdline (empty when not set).",
                labels,
                1.0,
            )
        if facts.latency_limit_us is not None:
            yield _gauge(
                "pm_qos_latency_limit_seconds",
                "System-wide PM QoS CPU latency limit; states with a longer exit latency "
                "are not used (2000 s means no limit).",
                {},
                facts.latency_limit_us / US_PER_S,
            )
        yield from self._state_metrics(idle)

    def _state_metrics(self, idle: CPUIdle) -> Iterable[Metric]:
        per_cpu = self._per_cpu
        keys = ["cpu", "state"] if per_cpu else ["state"]
        info = GaugeMetricFamily(
            metric_name("cpu_idle_state_info"),
            "An idle state and the kernel's description of it.",
            labels=["state", "description"],
        )
        latency = GaugeMetricFamily(
            metric_name("cpu_idle_state_exit_latency_seconds"),
            "Worst-case time to leave the idle state (the largest over CPUs).",
            labels=["state"],
        )
        residency = GaugeMetricFamily(
            metric_name("cpu_idle_state_target_residency_seconds"),
            "Minimum idle time for which the state saves energy.",
            labels=["state"],
        )
        enabled = GaugeMetricFamily(
            metric_name("cpu_idle_state_enabled_cpus"),
            "CPUs on which the idle state is enabled (per-CPU mode: 1 or 0).",
            labels=keys,
        )
        wakeup = CounterMetricFamily(
            metric_name("cpu_idle_state_wakeup_seconds"),
            "Estimated time spent waking up from the state: entries times exit latency.",
            labels=keys,
        )
        counters = [
            (
                attr,
                scale,
                CounterMetricFamily(metric_name("cpu_idle_state", suffix), doc, labels=keys),
            )
            for attr, suffix, doc, scale in _COUNTERS
        ]

        # state name -> its samples over the CPUs, in CPU order (first seen first)
        by_name = _by_name(idle)
        for name, states in by_name.items():
            first = states[0].info
            info.add_metric([name, first.desc], 1.0)
            latencies = list(map(_LATENCY, states))
            latency.add_metric([name], max(latencies) / US_PER_S)
            residency.add_metric([name], first.target_residency_us / US_PER_S)

        if per_cpu:
            for cpu, samples in sorted(idle.cpus.items()):
                for s in samples:
                    labels = [str(cpu), s.info.name]
                    if s.disabled is not None:
                        enabled.add_metric(labels, 0.0 if s.disabled else 1.0)
                    for attr, scale, family in counters:
                        value = getattr(s, attr)
                        if value is not None:
                            family.add_metric(labels, value / scale)
                    if s.usage is not None:
                        wakeup.add_metric(labels, s.usage * s.info.exit_latency_us / US_PER_S)
        else:
            for name, states in by_name.items():
                flags = list(map(_DISABLED, states))
                if None not in flags:
                    enabled.add_metric([name], float(flags.count(False)))
                usages: list[int | None] = []
                for attr, scale, family in counters:
                    values = list(map(attrgetter(attr), states))
                    if attr == "usage":
                        usages = values
                    # A partial sum would look like a counter reset; skip the series instead
                    # (the skipped file is counted in cephnode_scrape_collector_read_errors).
                    if None not in values:
                        family.add_metric([name], sum(values) / scale)
                if None not in usages:
                    spent = sum(map(operator.mul, usages, map(_LATENCY, states)))
                    wakeup.add_metric([name], spent / US_PER_S)
        yield info
        yield latency
        yield residency
        yield enabled
        for _, _, family in counters:
            yield family
        yield wakeup


_LATENCY = attrgetter("info.exit_latency_us")
_DISABLED = attrgetter("disabled")
_NAME = attrgetter("info.name")


def _by_name(idle: CPUIdle) -> dict[str, list[IdleStateSample]]:
    """The samples of each state name over the CPUs, in CPU order, names in the order
    first seen. On the usual node every CPU lists the same states in the same order:
    then each state's samples are one slice of all of them, taken without a Python
    step per sample (288 samples a scrape on 96 CPUs with three states)."""
    flat = list(chain.from_iterable(idle.cpus.values()))
    names = list(map(_NAME, flat))
    first = next(iter(idle.cpus.values()), [])
    width = len(first)
    if width and len(set(names[:width])) == width and names == names[:width] * len(idle.cpus):
        return {names[i]: flat[i::width] for i in range(width)}
    out: dict[str, list[IdleStateSample]] = {}
    for name, s in zip(names, flat, strict=True):
        group = out.get(name)
        if group is None:
            group = out[name] = []
        group.append(s)
    return out


def _gauge(suffix: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(metric_name("cpu_idle", suffix), doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
