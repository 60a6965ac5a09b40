"""Facts of the ``kprofile`` collector, judged by checks/kprofile.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cephnode_exporter.kprofile.perf import Window


@dataclass(frozen=True)
class KprofileFacts:
    totals: Mapping[str, int]  # samples per class over all completed windows
    sampled_seconds: float
    windows: Mapping[str, int]  # windows per result
    window: Window  # the latest completed window
