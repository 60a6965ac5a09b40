"""Facts of the ``kernel`` collector, judged by checks/kernel.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from cephnode_exporter.hostfs import ReadErrors
from cephnode_exporter.hostfs.kernel import Tuned, Vulnerability
from cephnode_exporter.hostfs.sysctl import SysctlValue


@dataclass(frozen=True)
class SysctlReading:
    """One sysctl of the profile: its value, None when its file is missing (the kernel
    lacks it, or the exporter's view of /proc/sys does not show it), or an error."""

    value: SysctlValue | None = None
    error: str | None = None


@dataclass
class KernelFacts:
    cmdline: dict[str, str] | None  # None: /proc/cmdline unreadable
    vulnerabilities: dict[str, Vulnerability] | None  # None: no vulnerabilities directory
    tuned: Tuned | None  # None: unreadable, see tuned_error
    tuned_error: str | None
    # Whether a process named tuned runs; None when not looked for (tuned not installed,
    # its selection unreadable) or /proc could not be searched (tuned_running_error).
    tuned_running: bool | None = None
    tuned_running_error: str | None = None
    sysctls: dict[str, SysctlReading] = field(default_factory=dict)
    errors: ReadErrors = field(default_factory=ReadErrors)
    # Vulnerability files that exist but could not be read (their errors): the state
    # read from the others is incomplete.
    vulnerability_errors: list[str] = field(default_factory=list)
