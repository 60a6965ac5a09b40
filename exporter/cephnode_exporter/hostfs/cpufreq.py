"""CPU frequency scaling policy from sysfs.

ABI: Documentation/ABI/testing/sysfs-devices-system-cpu and
Documentation/admin-guide/pm/cpufreq.rst. ``cpuN/cpufreq`` links to the CPU's
``cpufreq/policyM`` directory; ``energy_performance_preference`` exists only with
drivers that have EPP (amd-pstate-epp, intel_pstate active). Boost is global:
``cpufreq/boost`` (acpi-cpufreq, amd-pstate) or the inverse ``intel_pstate/no_turbo``.
``amd_pstate/status`` (Documentation/admin-guide/pm/amd-pstate.rst) is one of
"active", "passive", "guided" or "disable".

Clock limits (cpufreq.rst, "Policy Interface in sysfs"): ``cpuinfo_max_freq`` is the
highest frequency the policy's CPUs can run at, ``scaling_max_freq`` the highest the
governor may pick, which the cpufreq core resolves from every PM QoS request on the
policy: the user's (``cpupower frequency-set -u``), a firmware limit (ACPI ``_PPC``, which
a BMC power cap lowers), and thermal cooling. Both are attributes of every policy
(cpufreq.c ``cpufreq_attrs``), in kHz. They are read every scrape: a power-capping daemon
or the BMC changes ``scaling_max_freq`` at run time, and drivers that list boost
frequencies lower ``cpuinfo_max_freq`` when boost is switched off.
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
    read_int,
    read_optional_text,
    read_text,
)
from cephnode_exporter.hostfs.cpu import CPU_DIR, cpu_paths, online_cpus
from cephnode_exporter.hostfs.cpuhw import MAX_KHZ

# The per-policy clock limits, in the order CPUPolicy holds them (kHz).
LIMIT_FILES = ("scaling_max_freq", "cpuinfo_max_freq")
# The global boost files below devices/system/cpu (CPUFreq.boost_file).
BOOST = "cpufreq/boost"
NO_TURBO = "intel_pstate/no_turbo"


@dataclass(frozen=True)
class CPUPolicy:
    """The scaling policy one CPU runs under."""

    driver: str
    governor: str
    energy_performance_preference: str | None
    # policy->max after every limit (user, firmware _PPC, thermal) and the highest
    # frequency the CPU can run at, kHz; None when unreadable (CPUFreq.limits_unread).
    scaling_max_khz: int | None = None
    cpuinfo_max_khz: int | None = None


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
    # The CPUs of ``cpus`` whose clock limits could not be read: CPU -> the error.
    limits_unread: dict[int, str] = field(default_factory=dict)
    # With intel_pstate's turbo off only: each CPU's highest non-turbo frequency
    # (``base_frequency``, kHz, HWP only). no_turbo lowers the policy's limit, not
    # cpuinfo_max_freq (intel_pstate.rst, no_turbo), so a cap is judged against this.
    base_khz: dict[int, int] = field(default_factory=dict)
    boost: bool | None = None
    # The file boost was read from ("cpufreq/boost", "intel_pstate/no_turbo"); None
    # without one. ``boost_error``: why a boost file that exists could not be read.
    boost_file: str | None = None
    boost_error: str | None = None
    amd_pstate_status: str | None = None
    # intel_pstate's mode (``intel_pstate/status``: active, passive, off) and its global
    # limit on the highest P-state, in percent of the highest turbo P-state
    # (``max_perf_pct``, 0 to 100): every CPU is held below it whatever its own
    # scaling_max_freq says (Documentation/admin-guide/pm/intel_pstate.rst, "User Space
    # Interface in sysfs"). None where the files do not exist (another driver, or
    # intel_pstate=per_cpu_perf_limits) or were unreadable (``errors``).
    intel_pstate_status: str | None = None
    max_perf_pct: int | None = None
    # Why a max_perf_pct that exists could not be read: the cap cannot be judged.
    max_perf_error: str | None = None
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
    # The kept files in four batched reads (AttrFiles.read_many, read_many_ints); a file
    # they could not read, or that reads empty, is read below the plain way, which names
    # the error.
    nothing: list[bytes | None] = [None] * len(bases)
    governors, epps = nothing, nothing
    no_ints: list[int | None] = [None] * len(bases)
    limits = [no_ints for _ in LIMIT_FILES]
    if files is not None:
        governors = files.read_many(
            cpu_paths(fs, cpus, "cpufreq", "scaling_governor"), BATCH_PAGE, same=True
        )
        epps = files.read_many(
            cpu_paths(fs, cpus, "cpufreq", "energy_performance_preference"), BATCH_PAGE, same=True
        )
        limits = [
            files.read_many_ints(cpu_paths(fs, cpus, "cpufreq", name), same=True)
            for name in LIMIT_FILES
        ]
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
        khz: list[int | None] = []
        for name, batch in zip(LIMIT_FILES, limits, strict=True):
            try:
                khz.append(_khz(f"{base}/{name}", batch[i], files))
            except (OSError, ParseError) as exc:
                result.errors.add(exc)
                result.limits_unread.setdefault(cpu, str(exc))
                khz.append(None)
        result.cpus[cpu] = CPUPolicy(driver, governor, epp, khz[0], khz[1])
    if absent and (result.cpus or result.unread):
        for cpu, path in absent:
            lost = ParseError(path, "missing, though other online CPUs have cpufreq")
            result.errors.add(lost)
            result.unread[cpu] = str(lost)
    _read_boost(fs, result)
    if result.boost is False and result.boost_file == NO_TURBO:
        _read_base_frequencies(result, dict(zip(cpus, bases, strict=True)))
    try:
        result.amd_pstate_status = read_optional_text(fs.sys(*CPU_DIR, "amd_pstate", "status"))
    except (OSError, ParseError) as exc:
        result.errors.add(exc)
    _read_intel_pstate(fs, result)
    return result


def _read_intel_pstate(fs: HostFS, result: CPUFreq) -> None:
    """intel_pstate's mode and global max_perf_pct; not per CPU, two small reads."""
    try:
        status = read_optional_text(fs.sys(*CPU_DIR, "intel_pstate", "status"))
    except (OSError, ParseError) as exc:
        result.errors.add(exc)
        status = None
    if status is not None and not status.isalpha():
        result.errors.add(ParseError(fs.sys(*CPU_DIR, "intel_pstate", "status"), "not a mode"))
        status = None
    result.intel_pstate_status = status
    if status == "off":
        return  # another driver runs the CPUs; the global limits do not apply
    path = fs.sys(*CPU_DIR, "intel_pstate", "max_perf_pct")
    try:
        text = read_optional_text(path)
    except (OSError, ParseError) as exc:
        result.errors.add(exc)
        result.max_perf_error = str(exc)
        return
    if text is None:
        return
    if not (text.isdigit() and len(text) <= 3 and int(text) <= 100):
        bad = ParseError(path, f"not a percentage: {text[:20]!r}")
        result.errors.add(bad)
        result.max_perf_error = str(bad)
        return
    result.max_perf_pct = int(text)


def _nonempty(path: str, read: Callable[[str], str] = read_text) -> str:
    """A name attribute; the kernel never prints an empty driver or governor name."""
    text = read(path)
    if not text:
        raise ParseError(path, "empty")
    return text


def _khz(path: str, batched: int | None, files: AttrFiles | None) -> int:
    """A clock limit in kHz: the batched value, else the file read the plain way, which
    names the error. Missing is an error too: every policy has both limits."""
    if batched is not None and 0 < batched <= MAX_KHZ:
        return batched
    value = files.read_int(path) if files is not None else read_int(path)
    if not 0 < value <= MAX_KHZ:
        raise ParseError(path, f"not a frequency in kHz: {value}")
    return value


def _read_base_frequencies(result: CPUFreq, bases: dict[int, str]) -> None:
    """``base_frequency`` of every CPU read (intel_pstate with HWP; absent without HWP,
    which leaves the CPU out). Read only while turbo is off, so plainly: no descriptor
    is kept for a file that most scrapes never read."""
    for cpu in result.cpus:
        try:
            result.base_khz[cpu] = _khz(f"{bases[cpu]}/base_frequency", None, None)
        except FileNotFoundError:
            continue
        except (OSError, ParseError) as exc:
            result.errors.add(exc)
            result.limits_unread.setdefault(cpu, str(exc))


def _read_boost(fs: HostFS, result: CPUFreq) -> None:
    """Global boost: ``cpufreq/boost`` (1 = on; acpi-cpufreq, amd-pstate, drivers with
    boost frequencies), else ``intel_pstate/no_turbo`` (1 = off; intel_pstate.rst). The
    first that exists decides; an unreadable one is kept in ``boost_error``."""
    for name, inverted in ((BOOST, False), (NO_TURBO, True)):
        path = fs.sys(*CPU_DIR, *name.split("/"))
        try:
            text = read_optional_text(path)
        except (OSError, ParseError) as exc:
            result.errors.add(exc)
            result.boost_error = result.boost_error or str(exc)
            continue
        if text is None:
            continue
        if text not in ("0", "1"):
            bad = ParseError(path, f"expected 0 or 1, got {text[:20]!r}")
            result.errors.add(bad)
            result.boost_error = result.boost_error or str(bad)
            continue
        result.boost, result.boost_file, result.boost_error = (text == "1") != inverted, name, None
        return
