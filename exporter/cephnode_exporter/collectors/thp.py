"""Collector ``thp``: the transparent huge page mode.

Exported, not judged: Ceph's ``thp`` option (default false; ceph/ceph
src/common/options/global.yaml.in: "enable transparent huge page (THP) support ... Ceph
is known to suffer from memory fragmentation due to THP use. This is indicated by RSS
usage above configured memory targets") keeps its daemons off THP by its description,
so the system-wide mode does not decide what a default OSD does; what an OSD really does
is per process (``THP_enabled`` in /proc/<pid>/status), the osd collector's to read.
The mode is still a tuning fact: other processes on the node (and OSDs with
``thp = true``) follow it, and a change is reported with the others.
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
    reuse_unchanged = True

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
