"""CPU frequency scaling policy from sysfs.

ABI: Documentation/ABI/testing/sysfs-devices-system-cpu and
Documentation/admin-guide/pm/cpufreq.rst. ``cpuN/cpufreq`` links to the CPU's
``cpufreq/policyM`` directory; ``energy_performance_preference`` exists only with
drivers that have EPP (amd-pstate-epp, intel_pstate active). Boost is global:
``cpufreq/boost`` (acpi-cpufreq, amd-pstate) or the inverse ``intel_pstate/no_turbo``.
``amd_pstate/status`` (Documentation/admin-guide/pm/amd-pstate.rst) is one of
"active", "passive", "guided" or "disable".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cephnode_exporter.hostfs import (
    BATCH_PAGE,
    AttrFiles,
    HostFS,
    ParseError,
    ReadErrors,
    read_optional_text,
    read_text,
)
from cephnode_exporter.hostfs.cpu import CPU_DIR, cpu_paths, online_cpus


@dataclass(frozen=True)
class CPUPolicy:
    """The scaling policy one CPU runs under."""

    driver: str
    governor: str
    energy_performance_preference: str | None


@dataclass
class CPUFreq:
    """The node's frequency-scaling picture. ``cpus`` is empty without cpufreq (a VM).

    ``unread`` names the online CPUs whose policy could not be read (CPU -> the error):
    they are neither in ``cpus`` nor CPUs without cpufreq. An online CPU without a
    ``cpufreq`` directory while other CPUs have one is unread too: the one driver
    (cpufreq_register_driver) adds a policy for every CPU it can drive, so the
    directory was lost; a node where no CPU has one simply has no cpufreq.
    """

    cpus: dict[int, CPUPolicy] = field(default_factory=dict)
    unread: dict[int, str] = field(default_factory=dict)
    online_cpus: int = 0
    boost: bool | None = None
    amd_pstate_status: str | None = None
    errors: ReadErrors = field(default_factory=ReadErrors)


def read_cpufreq(fs: HostFS, files: AttrFiles | None = None) -> CPUFreq:
    """Read every online CPU's policy.

    The kernel registers one cpufreq driver for the whole system (cpufreq_register_driver
    refuses a second), so the driver and whether it has EPP are read once, not per CPU.
    With ``files`` the per-CPU attributes are kept open and re-read with pread.
    """
    text = read_text if files is None else files.read_text

    def optional(path: str) -> str | None:
        try:
            return text(path)
        except FileNotFoundError:
            return None

    result = CPUFreq()
    cpus = online_cpus(fs, result.errors)
    result.online_cpus = len(cpus)
    driver: str | None = None
    has_epp = True
    bases = cpu_paths(fs, cpus, "cpufreq")
    # The kept files in two batched reads (AttrFiles.read_many); a file they could not
    # read, or that reads empty, is read below the plain way, which names the error.
    nothing: list[bytes | None] = [None] * len(bases)
    governors, epps = nothing, nothing
    if files is not None:
        governors = files.read_many(
            cpu_paths(fs, cpus, "cpufreq", "scaling_governor"), BATCH_PAGE, same=True
        )
        epps = files.read_many(
            cpu_paths(fs, cpus, "cpufreq", "energy_performance_preference"), BATCH_PAGE, same=True
        )
    absent: list[tuple[int, str]] = []  # online CPUs without cpufreq (see CPUFreq)
    for i, cpu in enumerate(cpus):
        base = bases[i]
        try:
            if driver is None:
                driver = _nonempty(f"{base}/scaling_driver", text)
            got = governors[i]
            governor = "" if got is None else got.decode("utf-8", "replace").strip()
            if not governor:
                governor = _nonempty(f"{base}/scaling_governor", text)
        except FileNotFoundError as exc:
            absent.append((cpu, exc.filename or base))
            continue
        except (OSError, ParseError) as exc:
            result.errors.add(exc)
            result.unread[cpu] = str(exc)
            continue
        epp = None
        if has_epp:
            got = epps[i]
            if got is not None:
                epp = got.decode("utf-8", "replace").strip()
            else:
                try:
                    epp = optional(f"{base}/energy_performance_preference")
                    has_epp = epp is not None  # absent: the driver has no EPP at all
                except (OSError, ParseError) as exc:
                    result.errors.add(exc)
        result.cpus[cpu] = CPUPolicy(driver, governor, epp)
    if absent and (result.cpus or result.unread):
        for cpu, path in absent:
            lost = ParseError(path, "missing, though other online CPUs have cpufreq")
            result.errors.add(lost)
            result.unread[cpu] = str(lost)
    result.boost = _read_boost(fs, result.errors)
    try:
        result.amd_pstate_status = read_optional_text(fs.sys(*CPU_DIR, "amd_pstate", "status"))
    except (OSError, ParseError) as exc:
        result.errors.add(exc)
    return result


def _nonempty(path: str, read: Callable[[str], str] = read_text) -> str:
    """A name attribute; the kernel never prints an empty driver or governor name."""
    text = read(path)
    if not text:
        raise ParseError(path, "empty")
    return text


def _read_boost(fs: HostFS, errors: ReadErrors) -> bool | None:
    for path, inverted in (
        (fs.sys(*CPU_DIR, "cpufreq", "boost"), False),
        (fs.sys(*CPU_DIR, "intel_pstate", "no_turbo"), True),
    ):
        try:
            text = read_optional_text(path)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            continue
        if text is None:
            continue
        if text not in ("0", "1"):
            errors.add(ParseError(path, f"expected 0 or 1, got {text[:20]!r}"))
            continue
        return (text == "1") != inverted
    return None
