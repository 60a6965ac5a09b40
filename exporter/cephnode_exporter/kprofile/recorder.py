"""The recorded mode: one ``perf record`` stays up between windows, its events disabled.

perf record's start-up reads all of ``/proc/kallsyms`` four times (about 140 ms of CPU on
the development VM, more with more modules); at one window a minute that alone was 0.25 %
of a core. So it is started once, with its events disabled (``-D -1``) and a control
descriptor (``--control fd:CTL,ACK``, perf 5.10+; tools/perf/Documentation/perf-record.txt),
and each window is::

    enable  -> ack        sampling starts
    ... duration ...      records flow from perf record's stdout to a fresh perf script
    disable -> ack        sampling stops
    disable -> ack        a marker: perf record reads its ring buffers in every loop
                          iteration before it handles the next command, so by the second
                          ack every sample of the window is in our pipe
    drain, close perf script's stdin, read its text to the end

perf script needs the stream's header (the pipe header, the event attributes, the
synthesized kernel maps) before any sample; perf record writes that once at start, so it
is kept (``preamble``) and sent ahead of each window's records. Between windows nothing
is written: disabled events produce neither samples nor side-band records.

Any fault inside a window (a timeout, memory, a dead perf script, a dead or silent perf
record) kills both; the next window starts a new perf record. A perf that rejects the
control options makes the sampler fall back to the one-shot mode (:mod:`.runner`).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Sequence
from enum import Enum, auto

from cephnode_exporter.kprofile.decoder import Decoder
from cephnode_exporter.kprofile.perf import (
    CHUNK,
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
from cephnode_exporter.kprofile.procs import (
    POLL_SECONDS,
    STDERR_GRACE_SECONDS,
    STDERR_KEEP,
    exited_unreaped,
    kill_and_reap,
    over_memory,
    overran,
    reap_leftovers,
)

# Ring buffer pages per CPU (-m, a power of two): 64 KiB. At 49 Hz and a few hundred
# bytes per kernel call chain a CPU fills it in about 4 s, and perf record is woken at half.
RING_PAGES = 16
# The stream header: attributes, features, kernel maps; a few KiB (4.3 KiB here).
MAX_PREAMBLE = 8 << 20
# Records read from perf record but not yet taken by perf script.
MAX_PENDING = 64 << 20
ACK = b"ack\n"
STDERR_TAIL = 4096


class Recorder:
    """A perf record process with its events disabled, switched on per window."""

    def __init__(self, config: PerfConfig) -> None:
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None
        self.preamble = b""
        self.stderr = bytearray()  # its last STDERR_TAIL bytes
        self._ctl = self._ack = self._err = self._data = -1
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else -1

    def start(
        self, perf: str, flags: Sequence[str], deadline: float, stop: threading.Event
    ) -> Report | None:
        """Start perf record and read its stream header; None when it is ready."""
        self.close()
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        self._err, err_w = os.pipe()
        control = ["-m", str(RING_PAGES), "-D", "-1", "--control", f"fd:{ctl_r},{ack_w}"]
        command = [*record_command(perf, self.config, flags), *control]
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err_w,
                pass_fds=(ctl_r, ack_w),
                env=perf_env(),
                start_new_session=True,
            )
        except OSError as exc:
            self.close()
            return Report(Outcome.UNAVAILABLE, f"cannot run {perf}: {exc.strerror}")
        finally:
            for fd in (ctl_r, ack_w, err_w):
                os.close(fd)
        self.starts += 1
        assert self.proc.stdout is not None
        self._data = self.proc.stdout.fileno()
        for fd in (self._data, self._ack, self._err):
            os.set_blocking(fd, False)
        # A no-op command: its ack comes from perf record's main loop, which it enters
        # after writing the stream header.
        preamble = bytearray()
        failure = self._handshake(preamble, deadline, stop)
        if failure is not None:
            self.close()
            return failure
        self.preamble = bytes(preamble)
        return None

    def _handshake(
        self, preamble: bytearray, deadline: float, stop: threading.Event
    ) -> Report | None:
        if not self.send("disable"):
            return self._died()
        with selectors.DefaultSelector() as sel:
            for fd in (self._data, self._ack, self._err):
                sel.register(fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if stop.is_set():
                    return Report(Outcome.STOPPED, "the exporter is stopping")
                if now >= deadline:
                    return Report(Outcome.TIMEOUT, "perf record did not start in time")
                for key, _ in sel.select(min(deadline - now, POLL_SECONDS)):
                    if key.fd == self._err:
                        self.read_stderr()
                        continue
                    if key.fd == self._ack:
                        acks = self.read_acks()
                        if acks is None:
                            return self._died()
                        if acks:
                            data = self.drain()
                            if data is None:
                                return self._died()
                            preamble += data
                            return None
                        continue
                    data = self.drain()
                    if data is None:
                        return self._died()
                    preamble += data
                    if len(preamble) > MAX_PREAMBLE:
                        return Report(Outcome.GARBAGE, "perf record's stream header is too large")

    def _died(self) -> Report:
        """perf record closed a pipe: wait briefly for its status and say why."""
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2.0)
        self.read_stderr()
        stderr = self.stderr.decode("utf-8", "replace")
        report = diagnose([("perf record", self.proc.returncode)], stderr, self.config.procfs)
        if self.proc.returncode == 0 and report.outcome == Outcome.FAILED:
            report = Report(Outcome.FAILED, "perf record exited unexpectedly")
        return report

    def send(self, word: str) -> bool:
        try:
            os.write(self._ctl, word.encode() + b"\n")
            return True
        except OSError:  # EPIPE: perf record is gone
            return False

    def read_acks(self) -> int | None:
        """Acks received (perf writes "ack\\n\\0"); None when the pipe closed."""
        try:
            data = os.read(self._ack, 4096)
        except BlockingIOError:
            return 0
        except OSError:
            return None
        if not data:
            return None
        return data.count(ACK)

    def drain(self, limit: int = MAX_PENDING) -> bytes | None:
        """Everything perf record has written so far; None at EOF (it exited)."""
        out = bytearray()
        while len(out) < limit:
            try:
                chunk = os.read(self._data, CHUNK)
            except BlockingIOError:
                break
            except OSError:
                return None
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def read_stderr(self) -> None:
        try:
            while data := os.read(self._err, CHUNK):
                self.stderr += data
                del self.stderr[:-STDERR_TAIL]
        except OSError:  # BlockingIOError: nothing more now
            pass

    def close(self) -> None:
        """Kill perf record (a new one starts with the next window) and close our ends."""
        if self.proc is not None:
            kill_and_reap([self.proc])
        for name in ("_ctl", "_ack", "_err"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
            setattr(self, name, -1)
        self.proc = None
        self._data = -1
        self.preamble = b""


class _Phase(Enum):
    ENABLE = auto()  # "enable" sent, waiting for its ack
    SAMPLE = auto()  # events on until the window's end
    DISABLE = auto()  # "disable" sent
    FLUSH = auto()  # the marker "disable" sent
    FORWARD = auto()  # every record read; feeding perf script the rest
    FINISH = auto()  # perf script's stdin closed; reading its output to the end


def run_recorded_window(
    recorder: Recorder,
    config: PerfConfig,
    record_flags: Sequence[str],
    stop: threading.Event,
    observe: Observer | None = None,
    on_spawn: SpawnHook | None = None,
) -> tuple[Report, bool]:
    """One window in recorded mode; returns the report and whether the failure (if any)
    was perf record failing to start (the caller may fall back to one-shot mode)."""
    reap_leftovers()
    perf, unavailable = preflight(config)
    if unavailable is not None:
        recorder.close()
        return unavailable, False
    assert perf is not None
    deadline = time.monotonic() + config.duration + config.grace
    if recorder.config != config or not recorder.running:
        recorder.config = config
        failure = recorder.start(perf, record_flags, deadline, stop)
        if failure is not None:
            return failure, True
    return _Window(recorder, config, stop, observe, on_spawn, perf, deadline).run(), False


class _Window:
    def __init__(
        self,
        recorder: Recorder,
        config: PerfConfig,
        stop: threading.Event,
        observe: Observer | None,
        on_spawn: SpawnHook | None,
        perf: str,
        deadline: float,
    ) -> None:
        self.rec = recorder
        self.config = config
        self.stop = stop
        self.on_spawn = on_spawn
        self.perf = perf
        self.deadline = deadline
        self.decoder = Decoder(config, observe)
        self.script: subprocess.Popen[bytes] | None = None
        self.script_err = bytearray()
        self.pending = bytearray()
        self.phase = _Phase.ENABLE
        self.started = self.ended = time.time()
        self.sample_until = 0.0

    def run(self) -> Report:
        rec = self.rec
        stray = rec.drain()  # nothing is written between windows; keep it if anything was
        rec.read_stderr()
        if stray is None:
            report = rec._died()
            rec.close()
            return report
        try:
            self.script = subprocess.Popen(
                script_command(self.perf, self.config),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=perf_env(),
                start_new_session=True,
            )
        except OSError as exc:
            return Report(Outcome.FAILED, f"cannot run perf script: {exc.strerror}")
        if self.on_spawn is not None:
            self.on_spawn([rec.pid, self.script.pid])
        self.pending += rec.preamble
        self.pending += stray
        try:
            failure = self._pump()
        except BaseException:
            self._abort(Outcome.FAILED, "")
            raise
        if failure is not None:
            return failure
        return self._finish()

    # --- the loop ---------------------------------------------------------------------

    def _pump(self) -> Report | None:
        rec, script = self.rec, self.script
        assert script is not None and script.stdin and script.stdout and script.stderr
        out_fd, err_fd, in_fd = (
            script.stdout.fileno(),
            script.stderr.fileno(),
            script.stdin.fileno(),
        )
        for fd in (out_fd, err_fd, in_fd):
            os.set_blocking(fd, False)
        named = [("perf record", rec.proc), ("perf script", script)]
        if not rec.send("enable"):
            return self._recorder_died()
        with selectors.DefaultSelector() as sel:
            reading = {rec._data, rec._ack, rec._err, out_fd, err_fd}
            for fd in reading:
                sel.register(fd, selectors.EVENT_READ)
            writing = False
            next_rss = 0.0
            stderr_until = self.deadline
            while out_fd in reading or err_fd in reading:
                now = time.monotonic()
                if self.stop.is_set():
                    return self._abort(Outcome.STOPPED, "the exporter is stopping")
                if now >= self.deadline:
                    return self._abort(Outcome.TIMEOUT, overran(self.config))
                if now >= stderr_until:
                    break  # perf script's output ended; something else holds its stderr
                if now >= next_rss:
                    next_rss = now + POLL_SECONDS
                    why = over_memory(named, self.config.max_rss_bytes)  # type: ignore[arg-type]
                    if why is not None:
                        return self._abort(Outcome.MEMORY, why)
                if self.phase == _Phase.SAMPLE and now >= self.sample_until:
                    if not rec.send("disable"):
                        return self._recorder_died()
                    self.phase = _Phase.DISABLE
                if self.phase == _Phase.FORWARD and not self.pending:
                    if writing:
                        sel.unregister(in_fd)
                        writing = False
                    script.stdin.close()
                    self.phase = _Phase.FINISH
                want = bool(self.pending) and self.phase != _Phase.FINISH
                if want != writing:
                    if want:
                        sel.register(in_fd, selectors.EVENT_WRITE)
                    else:
                        sel.unregister(in_fd)
                    writing = want
                timeout = min(self.deadline - now, POLL_SECONDS)
                if self.phase == _Phase.SAMPLE:
                    timeout = max(0.0, min(timeout, self.sample_until - now))
                for key, _ in sel.select(timeout):
                    fd = key.fd
                    if fd == in_fd:
                        if not self._feed_script(in_fd):
                            return self._script_died()
                    elif fd == rec._data:
                        data = rec.drain()
                        if data is None:
                            return self._recorder_died()
                        self.pending += data
                        if len(self.pending) > MAX_PENDING:
                            why = f"perf script fell {len(self.pending) >> 20} MiB behind"
                            return self._abort(Outcome.MEMORY, why)
                    elif fd == rec._ack:
                        acks = rec.read_acks()
                        if acks is None:
                            return self._recorder_died()
                        for _ in range(acks):
                            failure = self._acked()
                            if failure is not None:
                                return failure
                    elif fd == rec._err:
                        rec.read_stderr()
                    elif fd == out_fd:
                        if not self._read_script(out_fd):
                            sel.unregister(out_fd)
                            reading.discard(out_fd)
                            if self.phase != _Phase.FINISH:
                                return self._script_died()
                            self.ended = time.time()
                            stderr_until = min(self.deadline, now + STDERR_GRACE_SECONDS)
                    elif fd == err_fd and not self._read_script_err(err_fd):
                        sel.unregister(err_fd)
                        reading.discard(err_fd)
        return None

    def _acked(self) -> Report | None:
        rec = self.rec
        if self.phase == _Phase.ENABLE:
            self.started = time.time()
            self.sample_until = time.monotonic() + self.config.duration
            self.phase = _Phase.SAMPLE
        elif self.phase == _Phase.DISABLE:
            if not rec.send("disable"):
                return self._recorder_died()
            self.phase = _Phase.FLUSH
        elif self.phase == _Phase.FLUSH:
            data = rec.drain()
            if data is None:
                return self._recorder_died()
            self.pending += data
            self.phase = _Phase.FORWARD
        return None

    def _feed_script(self, fd: int) -> bool:
        try:
            written = os.write(fd, self.pending[:CHUNK])
        except BlockingIOError:
            return True
        except OSError:  # EPIPE: perf script is gone
            return False
        del self.pending[:written]
        return True

    def _read_script(self, fd: int) -> bool:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            return False
        self.decoder.parser.feed(data)
        return True

    def _read_script_err(self, fd: int) -> bool:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if data and len(self.script_err) < STDERR_KEEP:
            self.script_err += data[: STDERR_KEEP - len(self.script_err)]
        return bool(data)

    # --- endings ----------------------------------------------------------------------

    def _finish(self) -> Report:
        script = self.script
        assert script is not None
        if not exited_unreaped([script], self.deadline, self.stop):
            if self.stop.is_set():
                return self._abort(Outcome.STOPPED, "the exporter is stopping")
            return self._abort(Outcome.TIMEOUT, overran(self.config))
        kill_and_reap([script])  # its group is still ours while it is unreaped
        stderr = self.script_err.decode("utf-8", "replace")
        if script.returncode:
            return diagnose([("perf script", script.returncode)], stderr, self.config.procfs)
        return self.decoder.judge(stderr, self.started, self.ended)

    def _abort(self, outcome: Outcome, reason: str) -> Report:
        """Kill perf script and perf record (events may still be on); reap both."""
        if self.script is not None:
            kill_and_reap([self.script])
        self.rec.close()
        return Report(outcome, reason)

    def _recorder_died(self) -> Report:
        report = self.rec._died()
        if self.script is not None:
            kill_and_reap([self.script])
        self.rec.close()
        return report

    def _script_died(self) -> Report:
        script = self.script
        assert script is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            script.wait(timeout=2.0)
        rc = script.returncode
        with contextlib.suppress(OSError):
            assert script.stderr is not None
            self._read_script_err(script.stderr.fileno())
        self._abort(Outcome.FAILED, "")
        stderr = self.script_err.decode("utf-8", "replace")
        if rc == 0:
            return Report(Outcome.GARBAGE, "perf script stopped before the window's end")
        return diagnose([("perf script", rc)], stderr, self.config.procfs)
