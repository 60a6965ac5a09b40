"""Sampling windows with the perf tool, bounded in time and memory: the shared parts and
the one-shot mode.

Two modes produce the same :class:`Report`:

- **recorded** (:mod:`.recorder`, the default): one ``perf record`` stays up with its
  events disabled and is switched on for each window through its control descriptor; a
  fresh ``perf script`` decodes each window. perf record's start-up (it reads all of
  ``/proc/kallsyms`` four times, about 140 ms of CPU here) is paid once, not per window.
- **one-shot** (:func:`run_window`, the fallback for a perf without ``--control``, which
  came with perf 5.10): ``perf record ... -- sleep D | perf script`` per window.

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

Bounds: a window, perf script included, must end within ``duration + grace`` seconds;
each perf process's resident memory is checked four times a second. On a breach, or when
the exporter stops, the process groups (``perf record`` runs ``sleep`` in one-shot mode)
are killed with SIGKILL and reaped before the window returns.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from cephnode_exporter.kprofile.classify import CLASSES, MAX_CALLERS, SampleClass, Tally
from cephnode_exporter.kprofile.perfscript import PerfScriptParser

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
POLL_SECONDS = 0.25
STDERR_KEEP = 16 * 1024
KILL_WAIT_SECONDS = 5.0
# How long stderr may stay open after perf script's output ended.
STDERR_GRACE_SECONDS = 0.5
# A window is garbage when more than 1 % of its lines (and more than 10) are not perf's.
MALFORMED_MIN = 10
# Kernel symbols are missing when most kernel samples have no name at all.
UNRESOLVED_MIN_SAMPLES = 10

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
    duration: float = 5.0  # seconds sampled per window
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


# --- processes ----------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    # Our own children: this process's /proc (--path.procfs may be a host's /proc in
    # another PID namespace).
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def over_memory(named: Sequence[tuple[str, subprocess.Popen]], limit: int) -> str | None:
    for name, p in named:
        rss = rss_bytes(p.pid)
        if rss > limit:
            return f"{name} used {rss >> 20} MiB, more than the {limit >> 20} MiB bound"
    return None


def kill_groups(procs: Sequence[subprocess.Popen]) -> None:
    """SIGKILL the process group of every process not yet reaped.

    Signalling a group is safe only while its leader is unreaped: until then its PID
    (the group ID) cannot be reused by an unrelated process.
    """
    for p in procs:
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)


# Processes that survived SIGKILL plus KILL_WAIT_SECONDS (stuck in the kernel): reaped
# at the start of a later window so none stays a zombie.
_unreaped: list[subprocess.Popen] = []
_unreaped_lock = threading.Lock()


def reap_leftovers() -> int:
    """Reap processes an earlier window could not; returns how many are still running."""
    with _unreaped_lock:
        _unreaped[:] = [p for p in _unreaped if p.poll() is None]
        return len(_unreaped)


def kill_and_reap(procs: Sequence[subprocess.Popen]) -> None:
    kill_groups(procs)
    for p in procs:
        try:
            p.wait(timeout=KILL_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            with _unreaped_lock:
                _unreaped.append(p)
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def exited_unreaped(
    procs: Sequence[subprocess.Popen], deadline: float, stop: threading.Event
) -> bool:
    """Wait until every process has exited, without reaping them (WNOWAIT)."""
    waiting = list(procs)
    while waiting:
        waiting = [
            p
            for p in waiting
            if p.returncode is None
            and os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        ]
        if not waiting:
            return True
        if time.monotonic() >= deadline or stop.wait(0.02):
            return False
    return True


def overran(config: PerfConfig) -> str:
    limit = config.duration + config.grace
    return f"the window did not finish within {limit:g} s (duration + grace)"


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


class Decoder:
    """perf script's text for one window, parsed and classified as it arrives."""

    def __init__(self, config: PerfConfig, observe: Observer | None) -> None:
        self.config = config
        self.tally = Tally(max_callers=config.max_callers)
        self._observe = observe
        self.parser = PerfScriptParser(self._sink)

    def _sink(self, tid: int, frames: list[str | None]) -> None:
        cls = self.tally.add(tid, frames)
        if self._observe is not None:
            self._observe(tid, cls)

    def judge(self, stderr: str, started: float, ended: float) -> Report:
        """The window's report, once perf script has exited 0."""
        parser, tally, config = self.parser, self.tally, self.config
        parser.close()
        if parser.truncated:
            return Report(Outcome.GARBAGE, "perf script output ended inside a sample")
        if parser.malformed > max(MALFORMED_MIN, parser.lines // 100):
            return Report(
                Outcome.GARBAGE,
                f"{parser.malformed} of {parser.lines} lines of perf script output "
                "were not in its format",
            )
        if parser.samples == 0:
            why = "perf script printed no samples"
            if stderr.strip():
                why += f" ({first_error_line(stderr)})"
            return Report(Outcome.GARBAGE, why)
        if (
            tally.kernel_samples >= UNRESOLVED_MIN_SAMPLES
            and tally.unresolved_samples * 2 > tally.kernel_samples
        ):
            return Report(
                Outcome.UNAVAILABLE,
                f"perf could not name kernel functions in {tally.unresolved_samples} of "
                f"{tally.kernel_samples} kernel samples: grant CAP_SYSLOG "
                "(deploy/cephnode-exporter-kprofile.conf) or run as root",
            )
        window = Window(
            started=started,
            ended=ended,
            duration=config.duration,
            counts={str(cls): tally.counts[cls] for cls in CLASSES},
            top_callers=tuple(tally.top_callers(config.top)),
            callers_dropped=tally.callers_dropped,
            malformed_lines=parser.malformed,
        )
        return Report(Outcome.OK, window=window)


# --- one-shot mode ------------------------------------------------------------------------


@dataclass
class _OneShot:
    config: PerfConfig
    record_flags: Sequence[str]
    stop: threading.Event
    observe: Observer | None
    on_spawn: SpawnHook | None
    procs: list[subprocess.Popen] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    err_fd: int = -1

    def run(self) -> Report:
        c = self.config
        reap_leftovers()
        perf, unavailable = preflight(c)
        if unavailable is not None:
            return unavailable
        assert perf is not None
        decoder = Decoder(c, self.observe)
        started = time.time()
        deadline = time.monotonic() + c.duration + c.grace
        record = [*record_command(perf, c, self.record_flags), "--", "sleep", f"{c.duration:g}"]
        try:
            spawned = self._spawn(record, script_command(perf, c))
            if spawned is not None:
                return spawned
            if self.on_spawn is not None:
                self.on_spawn([p.pid for p in self.procs])
            ended, breach = self._pump(decoder.parser, deadline)
            if breach is not None:
                return breach
            if not exited_unreaped(self.procs, deadline, self.stop):
                if self.stop.is_set():
                    return self._abort(Outcome.STOPPED, "the exporter is stopping")
                return self._abort(Outcome.TIMEOUT, overran(c))
            # Both have exited and are not reaped yet, so their process groups are still
            # ours: kill what is left in them (the "sleep" of a perf record that was
            # killed holds our stderr pipe), then reap.
            kill_groups(self.procs)
            for p in self.procs:
                p.wait()
        finally:
            self._abort(Outcome.STOPPED, "")  # closes what is left; no-op when reaped
        stderr = self.stderr.decode("utf-8", "replace")
        rec, scr = self.procs
        if rec.returncode or scr.returncode:
            exits = [("perf record", rec.returncode), ("perf script", scr.returncode)]
            return diagnose(exits, stderr, c.procfs)
        return decoder.judge(stderr, started, ended)

    def _spawn(self, record: list[str], script: list[str]) -> Report | None:
        env = perf_env()
        err_r, err_w = os.pipe()
        self.err_fd = err_r
        try:
            rec = subprocess.Popen(
                record,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err_w,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(err_w)
            return Report(Outcome.UNAVAILABLE, f"cannot run {record[0]}: {exc.strerror}")
        self.procs.append(rec)
        assert rec.stdout is not None
        try:
            scr = subprocess.Popen(
                script,
                stdin=rec.stdout,
                stdout=subprocess.PIPE,
                stderr=err_w,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return self._abort(Outcome.FAILED, f"cannot run perf script: {exc.strerror}")
        finally:
            rec.stdout.close()  # perf script holds the pipe now: EOF when record exits
            os.close(err_w)
        self.procs.append(scr)
        return None

    def _pump(self, parser: PerfScriptParser, deadline: float) -> tuple[float, Report | None]:
        """Read perf script's output and stderr until both close; enforce the bounds."""
        scr = self.procs[1]
        assert scr.stdout is not None
        out_fd = scr.stdout.fileno()
        ended = time.time()
        named = list(zip(("perf record", "perf script"), self.procs, strict=True))
        with selectors.DefaultSelector() as sel:
            for fd in (out_fd, self.err_fd):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            open_fds = 2
            next_rss = 0.0
            stderr_until = deadline
            while open_fds:
                now = time.monotonic()
                if now >= stderr_until:
                    break  # stdout ended long ago; an orphan holds stderr open
                if self.stop.is_set():
                    return ended, self._abort(Outcome.STOPPED, "the exporter is stopping")
                if now >= deadline:
                    return ended, self._abort(Outcome.TIMEOUT, overran(self.config))
                if now >= next_rss:
                    next_rss = now + POLL_SECONDS
                    why = over_memory(named, self.config.max_rss_bytes)
                    if why is not None:
                        return ended, self._abort(Outcome.MEMORY, why)
                for key, _ in sel.select(min(deadline - now, POLL_SECONDS)):
                    try:
                        data = os.read(key.fd, CHUNK)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(key.fd)
                        open_fds -= 1
                        if key.fd == out_fd:
                            ended = time.time()
                            stderr_until = min(deadline, now + STDERR_GRACE_SECONDS)
                    elif key.fd == out_fd:
                        parser.feed(data)
                    elif len(self.stderr) < STDERR_KEEP:
                        self.stderr += data[: STDERR_KEEP - len(self.stderr)]
        return ended, None

    def _abort(self, outcome: Outcome, reason: str) -> Report:
        """Kill and reap whatever still runs, close our pipe ends."""
        kill_and_reap(self.procs)
        fd, self.err_fd = self.err_fd, -1
        if fd >= 0:
            os.close(fd)
        return Report(outcome, reason)


def run_window(
    config: PerfConfig,
    record_flags: Sequence[str] = tuple(OPTIONAL_RECORD_FLAGS.values()),
    stop: threading.Event | None = None,
    observe: Observer | None = None,
    on_spawn: SpawnHook | None = None,
) -> Report:
    """Sample one window in one-shot mode and classify it; never raises for perf's faults.

    ``observe(tid, cls)`` sees every classified sample (tests compare it with the
    kernel's own per-process accounting); ``on_spawn(pids)`` gets the PIDs of perf record
    and perf script once both run.
    """
    run = _OneShot(config, record_flags, stop or threading.Event(), observe, on_spawn)
    return run.run()
