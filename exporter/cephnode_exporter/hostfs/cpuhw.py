"""What the CPUs really do, as far as the kernel shows it without privileges.

The cpufreq governor and the cpuidle states say what the OS asks for; the BIOS and the
hardware decide what happens (the reference cluster's C-state fault was a BIOS setting:
ceph.io, "Ceph: A Journey to 1 TiB/s"). Two unprivileged views exist:

- The achieved frequency (Documentation/admin-guide/pm/cpufreq.rst,
  Documentation/ABI/testing/sysfs-devices-system-cpu): ``cpuinfo_avg_freq``, added by
  kernel commit fbb4a4759b54 ("cpufreq: Introduce an optional cpuinfo_avg_freq sysfs
  entry"), is the average frequency the hardware counters (APERF/MPERF on x86, AMU on
  arm64) measured over the last few milliseconds; it is optional and fails (EAGAIN or
  EINVAL) for a CPU without a recent sample, an idle one. Older kernels have only
  ``scaling_cur_freq``, which on x86 is the same APERF/MPERF estimate (arch/x86/kernel/
  cpu/aperfmperf.c) and on other architectures may be the last frequency requested.
  ``cpuinfo_cur_freq`` asks the driver for the hardware's value but is mode 0400 (root).
  kHz in all three.
- The perf PMUs the kernel registered (Documentation/ABI/testing/sysfs-bus-event_source-
  devices-events): ``cstate_core`` and ``cstate_pkg`` (arch/x86/events/intel/cstate.c:
  hardware C-state residency counters, Intel only) and ``msr`` (arch/x86/events/msr.c:
  APERF, MPERF, TSC, ... on Intel and AMD). Counting them system-wide needs
  perf_event_open(2) per CPU with CAP_PERFMON (or ``kernel.perf_event_paranoid`` <= 0),
  so this module only lists which events exist; the paranoid level says whether an
  unprivileged reader could count them.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field

from cephnode_exporter.hostfs import (
    AttrFiles,
    HostFS,
    ParseError,
    ReadErrors,
    kernel_int,
    list_dir,
    read_int,
    read_text,
)
from cephnode_exporter.hostfs.cpu import cpu_dir, cpu_paths, online_cpus

# The attribute per source, best first.
FREQ_SOURCES = ("cpuinfo_avg_freq", "scaling_cur_freq")
# What cpuinfo_avg_freq returns for a CPU without a recent hardware sample (idle).
NO_SAMPLE_ERRNOS = frozenset({errno.EAGAIN, errno.EINVAL, errno.EBUSY, errno.ENODATA})
# PMUs that show what the hardware does rather than what the OS asked.
PMU_PREFIXES = ("cstate_", "msr")
EVENT_SOURCE_DIR = ("bus", "event_source", "devices")
# A perf event name as the kernel's sysfs event attributes are named.
_EVENT_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
# Events per PMU listed at most; cstate_pkg has eleven on the newest Intel parts.
MAX_EVENTS = 64
# A frequency no CPU reaches (kHz): 100 GHz. Above it the file is garbage.
MAX_KHZ = 100_000_000


@dataclass
class Frequencies:
    """Achieved frequencies of the online CPUs that had a sample (Hz)."""

    source: str
    hertz: list[float] = field(default_factory=list)
    no_sample: int = 0  # CPUs that had no recent sample (idle)


@dataclass
class CPUHWFacts:
    frequencies: Frequencies | None = None  # None: no cpufreq on this node
    # PMU name -> its event names (the .scale/.unit companions left out).
    pmus: dict[str, list[str]] = field(default_factory=dict)
    perf_event_paranoid: int | None = None
    errors: ReadErrors = field(default_factory=ReadErrors)


def parse_khz(text: str, path: str) -> float:
    khz = kernel_int(text)
    if khz is None:
        raise ParseError(path, f"not a frequency: {text[:40]!r}")
    if not 0 < khz <= MAX_KHZ:
        raise ParseError(path, f"not a frequency in kHz: {khz}")
    return khz * 1000.0


def read_frequencies(
    fs: HostFS, errors: ReadErrors, files: AttrFiles | None = None
) -> Frequencies | None:
    """The achieved frequency of every online CPU, from the best source the first
    online CPU has; None when it has neither (no cpufreq). ``files`` keeps the per-CPU
    files open between scrapes (sysfs attributes regenerate on every pread)."""
    try:
        cpus = online_cpus(fs, errors)
    except (OSError, ParseError) as exc:
        errors.add(exc)
        return None
    source = next(
        (s for s in FREQ_SOURCES if os.path.exists(cpu_dir(fs, cpus[0], "cpufreq", s))), None
    )
    if source is None:
        return None
    out = Frequencies(source)
    paths = cpu_paths(fs, cpus, "cpufreq", source)
    # One batched read of the kept files; a file it could not read or parse is read
    # below the plain way, which names the error.
    batched = files.read_many_ints(paths, same=True) if files is not None else [None] * len(paths)
    for path, khz in zip(paths, batched, strict=True):
        if khz is not None and 0 < khz <= MAX_KHZ:
            out.hertz.append(khz * 1000.0)
            continue
        try:
            # read_text decodes with "replace": a non-UTF-8 byte is a ParseError of
            # this CPU's file, not a UnicodeDecodeError that fails the collector.
            text = files.read_text(path) if files is not None else read_text(path)
            out.hertz.append(parse_khz(text, path))
        except FileNotFoundError:
            continue  # a CPU without a policy (offlined meanwhile)
        except OSError as exc:
            if source == "cpuinfo_avg_freq" and exc.errno in NO_SAMPLE_ERRNOS:
                out.no_sample += 1
            else:
                errors.add(exc)
        except ParseError as exc:
            errors.add(exc)
    return out


def read_pmus(fs: HostFS, errors: ReadErrors) -> dict[str, list[str]]:
    """The events of the hardware-state PMUs, by PMU."""
    base = fs.sys(*EVENT_SOURCE_DIR)
    out: dict[str, list[str]] = {}
    for pmu in list_dir(base):
        # A PMU name is a label value: only names as the kernel makes them (ASCII).
        if not pmu.startswith(PMU_PREFIXES) or not _EVENT_RE.fullmatch(pmu):
            continue
        try:
            names = list_dir(os.path.join(base, pmu, "events"))
        except OSError as exc:
            errors.add(exc)
            continue
        events = [
            n
            for n in names
            if _EVENT_RE.fullmatch(n) and not n.endswith((".scale", ".unit", ".snapshot"))
        ]
        out[pmu] = events[:MAX_EVENTS]
    return out


def read_cpuhw(fs: HostFS, files: AttrFiles | None = None) -> CPUHWFacts:
    facts = CPUHWFacts()
    facts.frequencies = read_frequencies(fs, facts.errors, files)
    facts.pmus = read_pmus(fs, facts.errors)
    path = fs.proc("sys", "kernel", "perf_event_paranoid")
    try:
        facts.perf_event_paranoid = read_int(path)
    except FileNotFoundError:
        pass  # a kernel without perf events
    except (OSError, ParseError) as exc:
        facts.errors.add(exc)
    return facts
