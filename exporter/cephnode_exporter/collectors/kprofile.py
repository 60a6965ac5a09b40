"""Collector ``kprofile``: where the CPUs spend their time, from sampled kernel stacks.

The reference cluster lost most of its CPU time to one spin lock in the IOMMU's IOVA
allocator (77 % of samples spinning, 61 % under ``alloc_iova``, drivers/iommu/iova.c),
and no counter showed it. This collector samples every CPU's kernel stack with ``perf``
for a few seconds a minute (49 Hz for 2 s every 60 s by default) in a background thread,
classifies every sample (idle, user, kernel, spinlock, spinlock_iommu, iommu; see
kprofile/classify.py) and exports the counts, the latest window's spinlock_iommu share
and its top spin-lock callers. A scrape only copies the latest results; it never waits
for a window.

Default off: it needs root, or CAP_PERFMON and CAP_SYSLOG (deploy/cephnode-exporter-
kprofile.conf). Without them, or without perf, the collector fails with the reason
(``cephnode_scrape_collector_success`` 0, logged once) and the others are unaffected.
The trade-offs are in docs/kprofile.md, the cost in docs/performance.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    bounded,
    metric_name,
    register,
)
from cephnode_exporter.facts.kprofile import KprofileFacts
from cephnode_exporter.kprofile.classify import CLASSES, SampleClass
from cephnode_exporter.kprofile.perf import COUNTED, PerfConfig
from cephnode_exporter.kprofile.sampler import Sampler

# A window older than this many intervals means later windows keep failing: its results
# are no longer "the latest" and the collector fails instead of repeating them.
STALE_INTERVALS = 3


class KprofileUnavailable(RuntimeError):
    """No current window: sampling cannot work, has not finished a window yet, or keeps
    failing. The message is the reason; the scrape reports the collector failed."""


@register
class KprofileCollector(Collector):
    name = "kprofile"
    default_enabled = False
    help = (
        "Sampled kernel stacks with perf: idle/user/kernel/spin-lock/IOMMU shares and the "
        "top spin-lock callers (needs root or CAP_PERFMON+CAP_SYSLOG, and linux-perf)"
    )

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        o = ctx.options
        self.config = PerfConfig(
            perf=o.collector_kprofile_perf,
            frequency=o.collector_kprofile_frequency,
            duration=o.collector_kprofile_duration,
            grace=o.collector_kprofile_grace,
            max_rss_bytes=int(o.collector_kprofile_max_rss) << 20,
            procfs=ctx.fs.procfs,
            top=o.collector_kprofile_top,
        )
        self.interval = float(o.collector_kprofile_interval)
        self.sampler = Sampler(self.config, self.interval)
        self.sampler.start()

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--collector.kprofile.perf",
            dest="collector_kprofile_perf",
            default="perf",
            metavar="PATH",
            help="perf binary, a name looked up in PATH or a path (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.kprofile.frequency",
            dest="collector_kprofile_frequency",
            type=bounded(int, 1, 1000),
            default=49,
            metavar="HZ",
            help="samples per second on each CPU while a window runs (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.kprofile.duration",
            dest="collector_kprofile_duration",
            type=bounded(float, 0.01, 600),
            # 2 s: 96 CPUs x 49 Hz x 2 s fit the 0.5 %-of-a-core budget at the cost per
            # sample measured (docs/performance.md, "kprofile sampling overhead").
            default=2.0,
            metavar="SECONDS",
            help="length of a sampling window (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.kprofile.interval",
            dest="collector_kprofile_interval",
            type=bounded(float, 0.01, 86400),
            default=60.0,
            metavar="SECONDS",
            help="a window starts every this many seconds (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.kprofile.grace",
            dest="collector_kprofile_grace",
            type=bounded(float, 0.1, 600),
            default=15.0,
            metavar="SECONDS",
            help="time a window may take beyond its duration before perf is killed "
            "(default: %(default)s)",
        )
        parser.add_argument(
            "--collector.kprofile.max-rss",
            dest="collector_kprofile_max_rss",
            type=bounded(int, 16, 65536),
            default=128,
            metavar="MIB",
            help="resident memory each perf process may use before it is killed "
            "(default: %(default)s)",
        )
        parser.add_argument(
            "--collector.kprofile.top",
            dest="collector_kprofile_top",
            type=bounded(int, 0, 50),
            default=5,
            metavar="N",
            help="spin-lock caller functions exported per window (default: %(default)s)",
        )

    def close(self) -> None:
        self.sampler.close()

    def read(self) -> KprofileFacts:
        state = self.sampler.snapshot()
        if state.unavailable is not None:
            raise KprofileUnavailable(f"sampling unavailable: {state.unavailable}")
        last = state.last
        failure = state.last_report
        if last is None:
            why = "no sampling window completed yet"
            if failure is not None and failure.reason:
                why += f"; the last one: {failure.outcome}: {failure.reason}"
            raise KprofileUnavailable(why)
        age = time.time() - last.ended
        if age > STALE_INTERVALS * max(self.interval, last.duration):
            why = f"the latest completed window ended {age:.0f} s ago"
            if failure is not None and failure.reason:
                why += f"; the last one: {failure.outcome}: {failure.reason}"
            raise KprofileUnavailable(why)
        return KprofileFacts(state.totals, state.sampled_seconds, state.windows, last)

    def metrics(self, facts: KprofileFacts) -> Iterable[Metric]:
        samples = CounterMetricFamily(
            metric_name("kprofile_samples"),
            "Sampled CPU stacks per class (idle, user, kernel, spinlock, spinlock_iommu, "
            "iommu), over all completed windows.",
            labels=["class"],
        )
        for cls in CLASSES:
            samples.add_metric([str(cls)], float(facts.totals.get(cls, 0)))
        yield samples
        yield CounterMetricFamily(
            metric_name("kprofile_sampled_seconds"),
            "Seconds sampled by completed windows (each window samples every CPU).",
            value=facts.sampled_seconds,
        )
        windows = CounterMetricFamily(
            metric_name("kprofile_windows"),
            "Sampling windows by result: ok, failed (perf exited non-zero or was killed), "
            "timeout, memory (perf killed at its memory bound), garbage (bad output).",
            labels=["result"],
        )
        for result in COUNTED:
            windows.add_metric([str(result)], float(facts.windows.get(result, 0)))
        yield windows
        w = facts.window
        yield GaugeMetricFamily(
            metric_name("kprofile_last_window_end_timestamp_seconds"),
            "Unix time the latest completed sampling window ended.",
            value=w.ended,
        )
        yield GaugeMetricFamily(
            metric_name("kprofile_last_window_non_idle_samples"),
            "Non-idle samples in the latest window: the denominator of the ratios below.",
            value=float(w.non_idle),
        )
        yield GaugeMetricFamily(
            metric_name("kprofile_spinlock_iommu_ratio"),
            "Share of the latest window's non-idle samples spinning on a lock taken by "
            "IOMMU/IOVA code (0 when every sample was idle).",
            value=w.share(SampleClass.SPINLOCK_IOMMU),
        )
        callers = GaugeMetricFamily(
            metric_name("kprofile_spinlock_caller_ratio"),
            "Share of the latest window's non-idle samples spinning on a lock taken by this "
            "function; only the top callers (--collector.kprofile.top).",
            labels=["function"],
        )
        busy = w.non_idle
        for function, count in w.top_callers:
            callers.add_metric([function], count / busy if busy else 0.0)
        yield callers
