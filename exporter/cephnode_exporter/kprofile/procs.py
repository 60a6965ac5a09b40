"""The perf processes' bounds: resident memory checked while they run, process groups
killed with SIGKILL and reaped on a breach or a stop, and no zombie left behind.

Bounds: a window, perf script included, must end within ``duration + grace`` seconds;
each perf process's resident memory is checked four times a second. On a breach, or when
the exporter stops, the process groups (``perf record`` runs ``sleep`` in one-shot mode)
are killed and reaped before the window returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from cephnode_exporter.kprofile.perf import PerfConfig

POLL_SECONDS = 0.25
STDERR_KEEP = 16 * 1024
KILL_WAIT_SECONDS = 5.0
# How long stderr may stay open after perf script's output ended.
STDERR_GRACE_SECONDS = 0.5


def rss_bytes(pid: int) -> int:
    # Our own children: this process's /proc (--path.procfs may be a host's /proc in
    # another PID namespace).
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def over_memory(named: Sequence[tuple[str, subprocess.Popen[bytes]]], limit: int) -> str | None:
    for name, p in named:
        rss = rss_bytes(p.pid)
        if rss > limit:
            return f"{name} used {rss >> 20} MiB, more than the {limit >> 20} MiB bound"
    return None


def kill_groups(procs: Sequence[subprocess.Popen[bytes]]) -> None:
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
_unreaped: list[subprocess.Popen[bytes]] = []
_unreaped_lock = threading.Lock()


def reap_leftovers() -> int:
    """Reap processes an earlier window could not; returns how many are still running."""
    with _unreaped_lock:
        _unreaped[:] = [p for p in _unreaped if p.poll() is None]
        return len(_unreaped)


def kill_and_reap(procs: Sequence[subprocess.Popen[bytes]]) -> None:
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
    procs: Sequence[subprocess.Popen[bytes]], deadline: float, stop: threading.Event
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
