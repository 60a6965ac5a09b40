"""CPU topology basics: which CPUs exist and are online.

Source: Documentation/ABI/testing/sysfs-devices-system-cpu (``online``, ``present``).
"""

from __future__ import annotations

from cephnode_exporter.hostfs import HostFS, ParseError, parse_cpulist, read_text

CPU_DIR = ("devices", "system", "cpu")


def online_cpus(fs: HostFS) -> list[int]:
    """CPUs the scheduler may run on; offline CPUs have no cpuidle directory."""
    path = fs.sys(*CPU_DIR, "online")
    text = read_text(path)
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise ParseError(path, str(exc)) from None


def cpu_dir(fs: HostFS, cpu: int, *parts: str) -> str:
    return fs.sys(*CPU_DIR, f"cpu{cpu}", *parts)
