"""Collector ``thp``: the transparent huge page mode.

Exported, not judged: Ceph daemons turn THP off for themselves at start-up unless the
``thp`` option is true (its default is false; ceph/ceph src/common/options/global.yaml.in:
"Ceph is known to suffer from memory fragmentation due to THP use. This is indicated by
RSS usage above configured memory targets"), so the system-wide mode does not reach the
OSDs on a default configuration. The mode is still a tuning fact: other processes on the
node (and OSDs with ``thp = true``) follow it, and a change is reported with the others.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import Collector, metric_name, register
from cephnode_exporter.hostfs.thp import THPFacts, read_thp


@register
class THPCollector(Collector):
    name = "thp"
    help = "Transparent huge page mode (enabled, defrag)"

    def read(self) -> THPFacts:
        return read_thp(self.ctx.fs)

    def metrics(self, facts: THPFacts) -> Iterable[Metric]:
        if facts.enabled is None or facts.defrag is None:
            return
        family = GaugeMetricFamily(
            metric_name("transparent_hugepage_info"),
            "The transparent huge page mode: enabled (always, madvise, never) and defrag "
            "(always, defer, defer+madvise, madvise, never).",
            labels=["enabled", "defrag"],
        )
        family.add_metric([facts.enabled, facts.defrag], 1.0)
        yield family
