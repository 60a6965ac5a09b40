"""Facts of the ``cpuidle`` collector, judged by checks/cpu.py."""

from __future__ import annotations

from dataclasses import dataclass

from cephnode_exporter.hostfs import ReadErrors
from cephnode_exporter.hostfs.cpuidle import CPUIdle


@dataclass
class CPUIdleFacts:
    idle: CPUIdle
    cmdline: dict[str, str] | None
    latency_limit_us: int | None
    errors: ReadErrors
