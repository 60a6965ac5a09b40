"""The perf tool as the sampler drives it: its command lines and environment, what it needs
of the kernel, the window and report types, and what a failed run's exits and stderr
mean (:func:`diagnose`).

``perf record -a -g --kernel-callchains -F 49 -e cpu-clock -o -`` samples every CPU's
kernel call chain 49 times a second and writes the pipe format (tools/perf/Documentation/
perf.data-file-format.txt); ``perf script -i -`` decodes it, names kernel addresses from
kallsyms and prints text, which :class:`~.perfscript.PerfScriptParser` reads as it
arrives. Why each flag:

- ``-e cpu-clock``: the software timer event works on every machine, VMs included
  (hardware cycle counters often are not virtualised), and samples idle CPUs too, which
  gives the idle share. 49 Hz avoids lock-step with 50/100 Hz timers.
- ``--kernel-callchains``: only kernel stacks are unwound; user stacks (frame-pointer
  walks through code built without frame pointers) are large and useless here.
- ``--synth=no``: no pass over every process's ``/proc/<pid>/maps`` at start (thousands
  of threads on an OSD node); user-space symbols are not needed.
- ``-B -N``: no build-id collection at the end and no writes to ``~/.debug``.
- ``--no-bpf-event``: no BPF program events.
- ``perf script --symfs /dev/null --kallsyms <procfs>/kallsyms``: kernel names from
  kallsyms only; every other symbol lookup fails at once (nothing can exist below
  ``/dev/null``), so perf never loads a program's or a debug vmlinux's symbol tables.
- ``PERF_CONFIG=/dev/null`` and ``PERF_CONFIG_NOSYSTEM``/``NOGLOBAL`` (tools/perf/util/
  config.c): a site's ``/etc/perfconfig`` cannot turn on DWARF unwinding or a pager.

The three record options newer than some distributions' perf are dropped for good when
perf rejects them (:attr:`Report.unsupported_option`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from cephnode_exporter.kprofile.classify import MAX_CALLERS, SampleClass

PERF_PACKAGE = "linux-perf"  # Debian's package of /usr/bin/perf

# Record options newer than some perf builds; perf's own name for each (its "unknown
# option" message) -> what we pass. The rest of the command line is in every perf.
OPTIONAL_RECORD_FLAGS: Mapping[str, str] = {
    "kernel-callchains": "--kernel-callchains",
    "synth": "--synth=no",
    "no-bpf-event": "--no-bpf-event",
}
SCRIPT_FIELDS = "comm,tid,cpu,ip,sym,dso"
# A path below which nothing can exist: every symbol file lookup fails with ENOTDIR.
NO_SYMFS = os.devnull

CHUNK = 64 * 1024

PERMISSION_MARKERS = (
    "Access to performance monitoring and observability operations is limited",
    "perf_event_paranoid setting is",
    "No permission",
    "Permission denied",
    "Operation not permitted",
)
_UNKNOWN_OPTION = re.compile(r"unknown (?:option|switch) [`'\"]?([A-Za-z][\w-]*)")

# Capability bits (include/uapi/linux/capability.h).
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # perf exited non-zero or was killed by a signal
    TIMEOUT = "timeout"  # the window overran duration + grace and was killed
    MEMORY = "memory"  # a perf process grew past the memory bound and was killed
    GARBAGE = "garbage"  # the output was truncated, malformed or empty
    UNAVAILABLE = "unavailable"  # no perf, no permission, or no kernel symbols
    STOPPED = "stopped"  # the exporter is shutting down


# Outcomes counted per window (cephnode_kprofile_windows_total{result}); unavailable is
# reported as a failed collector instead.
COUNTED = (Outcome.OK, Outcome.FAILED, Outcome.TIMEOUT, Outcome.MEMORY, Outcome.GARBAGE)


@dataclass(frozen=True)
class PerfConfig:
    perf: str = "perf"  # a name looked up in PATH, or a path
    frequency: int = 49  # samples per second per CPU
    duration: float = 2.0  # seconds sampled per window (the collector's default)
    grace: float = 15.0  # seconds a window may take beyond its duration
    max_rss_bytes: int = 128 << 20  # per perf process
    procfs: str = "/proc"  # where kallsyms is read (--path.procfs)
    top: int = 5  # spin-lock callers kept per window
    max_callers: int = MAX_CALLERS


@dataclass(frozen=True)
class Window:
    """The classified samples of one completed window."""

    started: float  # Unix time sampling was started
    ended: float  # Unix time the sample stream ended
    duration: float  # seconds sampled
    counts: Mapping[str, int]
    top_callers: tuple[tuple[str, int], ...] = ()
    callers_dropped: int = 0
    malformed_lines: int = 0

    @property
    def samples(self) -> int:
        return sum(self.counts.values())

    @property
    def non_idle(self) -> int:
        return self.samples - self.counts.get(SampleClass.IDLE, 0)

    def share(self, cls: str) -> float:
        """Share of the non-idle samples in ``cls`` (0 when every sample was idle)."""
        busy = self.non_idle
        return self.counts.get(cls, 0) / busy if busy else 0.0


@dataclass(frozen=True)
class Report:
    outcome: Outcome
    reason: str = ""
    window: Window | None = None
    unsupported_option: str | None = None  # perf's name of a record option it rejected


Observer = Callable[[int, SampleClass], object]
SpawnHook = Callable[[list[int]], object]


# --- before a window ----------------------------------------------------------------------


def find_perf(name: str) -> str | None:
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name)


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(64).strip()
    except OSError:
        return "?"


def kernel_symbols_problem(procfs: str) -> str | None:
    """Why perf would not name kernel functions, or None when kallsyms shows addresses.

    The kernel shows real addresses in /proc/kallsyms only to readers it trusts
    (kallsyms_show_value() in kernel/ksyms_common.c): kptr_restrict=0 with
    perf_event_paranoid <= 1, or CAP_SYSLOG with kptr_restrict <= 1; to anyone else every
    address reads as zero. Percpu symbols at the start have small offsets, so the first
    64 KiB hold non-zero addresses whenever they are shown.
    """
    path = os.path.join(procfs, "kallsyms")
    try:
        with open(path, "rb") as f:
            head = f.read(CHUNK)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if not head.strip():
        return f"{path} is empty (a kernel without CONFIG_KALLSYMS)"
    lines = head.splitlines()
    if not head.endswith(b"\n") and len(lines) > 1:
        lines.pop()  # cut by the read
    for line in lines:
        address = line.split(b" ", 1)[0]
        try:
            if int(address, 16):
                return None
        except ValueError:
            return f"{path} is not in the kallsyms format"
    sysctl = os.path.join(procfs, "sys", "kernel")
    paranoid = _read_small(os.path.join(sysctl, "perf_event_paranoid"))
    also = ""
    if not _may_sample_everything(paranoid):
        also = " and CAP_PERFMON"  # system-wide sampling is refused too
    return (
        f"kernel symbol addresses are hidden (kptr_restrict="
        f"{_read_small(os.path.join(sysctl, 'kptr_restrict'))}, perf_event_paranoid="
        f"{paranoid}): grant CAP_SYSLOG{also} (deploy/cephnode-exporter-kprofile.conf) "
        "or run as root"
    )


def _may_sample_everything(paranoid: str) -> bool:
    """Whether this process may open system-wide perf events: root, CAP_PERFMON or
    CAP_SYS_ADMIN, or perf_event_paranoid <= 0 (kernel/events/core.c perf_allow_cpu)."""
    if os.geteuid() == 0:
        return True
    with contextlib.suppress(ValueError):
        if int(paranoid) <= 0:
            return True
    try:
        # Our own credentials: this process's /proc, whatever --path.procfs says.
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    eff = int(line.split()[1], 16)
                    return bool(eff & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN))
    except (OSError, ValueError):
        pass
    return False


def preflight(config: PerfConfig) -> tuple[str | None, Report | None]:
    """The perf binary to run, or why sampling is impossible right now."""
    perf = find_perf(config.perf)
    if perf is None:
        why = f"perf not found ({config.perf!r}; Debian package {PERF_PACKAGE})"
        return None, Report(Outcome.UNAVAILABLE, why)
    problem = kernel_symbols_problem(config.procfs)
    if problem is not None:
        return None, Report(Outcome.UNAVAILABLE, problem)
    return perf, None


def perf_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERF_", "DEBUGINFOD"))}
    env.update(
        LC_ALL="C", PERF_CONFIG=os.devnull, PERF_CONFIG_NOSYSTEM="1", PERF_CONFIG_NOGLOBAL="1"
    )
    return env


def record_command(perf: str, config: PerfConfig, flags: Sequence[str]) -> list[str]:
    """perf record up to, not including, how it ends (a workload, or a control fd)."""
    record = [perf, "record", "-a", "-g", "-F", str(config.frequency), "-e", "cpu-clock"]
    return [*record, "-B", "-N", *flags, "-o", "-"]


def script_command(perf: str, config: PerfConfig) -> list[str]:
    kallsyms = os.path.join(config.procfs, "kallsyms")
    script = [perf, "script", "-i", "-", "-F", SCRIPT_FIELDS]
    return [*script, "--symfs", NO_SYMFS, "--kallsyms", kallsyms]


# --- after a window -----------------------------------------------------------------------


def first_error_line(stderr: str) -> str:
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip()
        and not line.startswith("[ perf record:")
        and not line.startswith("Events ")  # --control's "Events enabled/disabled"
    ]
    for line in lines:
        if "rror" in line or "failed" in line.lower():
            return line[:200]
    return lines[-1][:200] if lines else "no message"


def permission_reason(procfs: str) -> str:
    paranoid = _read_small(os.path.join(procfs, "sys", "kernel", "perf_event_paranoid"))
    return (
        f"perf has no permission to sample the whole system (perf_event_paranoid={paranoid}): "
        "run as root or grant CAP_PERFMON and allow perf_event_open "
        "(deploy/cephnode-exporter-kprofile.conf)"
    )


def diagnose(exits: Sequence[tuple[str, int | None]], stderr: str, procfs: str) -> Report:
    """Why perf failed, from the exit statuses and what it printed."""
    unknown = _UNKNOWN_OPTION.search(stderr)
    if unknown is not None:
        option = unknown[1]
        return Report(Outcome.FAILED, f"perf does not know the option --{option}", None, option)
    if any(marker in stderr for marker in PERMISSION_MARKERS):
        return Report(Outcome.UNAVAILABLE, permission_reason(procfs))
    for name, rc in exits:
        if rc is not None and rc < 0:
            return Report(Outcome.FAILED, f"{name} was killed by {signal.Signals(-rc).name}")
    for name, rc in exits:
        if rc:
            why = f"{name} exited with status {rc}: {first_error_line(stderr)}"
            return Report(Outcome.FAILED, why)
    return Report(Outcome.FAILED, f"perf failed: {first_error_line(stderr)}")
