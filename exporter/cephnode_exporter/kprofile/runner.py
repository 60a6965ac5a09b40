"""One sampling window in one-shot mode: ``perf record ... -- sleep D | perf script``, both
started for the window and bounded in time and memory.

The fallback for a perf without ``--control`` (which came with perf 5.10); the default
mode, one ``perf record`` kept up between windows, is :mod:`.recorder`. Both produce the
same :class:`~.perf.Report`. The perf command lines and what their failures mean are in
:mod:`.perf`, the process bounds in :mod:`.procs`, the decoding in :mod:`.decoder`.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from cephnode_exporter.kprofile.decoder import Decoder
from cephnode_exporter.kprofile.perf import (
    CHUNK,
    OPTIONAL_RECORD_FLAGS,
    Observer,
    Outcome,
    PerfConfig,
    Report,
    SpawnHook,
    diagnose,
    perf_env,
    preflight,
    record_command,
    script_command,
)
from cephnode_exporter.kprofile.perfscript import PerfScriptParser
from cephnode_exporter.kprofile.procs import (
    POLL_SECONDS,
    STDERR_GRACE_SECONDS,
    STDERR_KEEP,
    exited_unreaped,
    kill_and_reap,
    kill_groups,
    over_memory,
    overran,
    reap_leftovers,
)


@dataclass
class _OneShot:
    config: PerfConfig
    record_flags: Sequence[str]
    stop: threading.Event
    observe: Observer | None
    on_spawn: SpawnHook | None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
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
