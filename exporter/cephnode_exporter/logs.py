"""Logging in logfmt or JSON, the two formats log pipelines of Prometheus exporters expect.

Logging never blocks the caller. A StreamHandler writes to stderr in the calling thread,
so a stderr pipe that nobody reads (a stuck journald, a wrapper script that stopped
reading) would stop every thread that logs, HTTP handlers included, once the pipe buffer
(64 KiB on Linux, pipe(7)) is full. Here callers only queue the formatted line; one writer
thread does the blocking writes, and lines that do not fit in the bounded queue are
dropped and counted (``cephnode_exporter_log_messages_dropped_total``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections import deque
from typing import TextIO

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_NAMES = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
}


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, str]:
    fields = {
        "ts": _timestamp(record),
        "level": _NAMES.get(record.levelno, record.levelname.lower()),
        "caller": f"{record.module}:{record.lineno}",
        "msg": record.getMessage(),
    }
    for key, value in getattr(record, "kv", {}).items():
        fields[key] = str(value)
    if record.exc_info:
        fields["err"] = logging.Formatter().formatException(record.exc_info).replace("\n", " | ")
    return fields


def _quote(value: str) -> str:
    if value and not any(c in value for c in ' "=\n\t\\'):
        return value
    return json.dumps(value)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_quote(v)}" for k, v in _fields(record).items())


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record))


# Lines waiting for the writer thread; beyond this a new line is dropped. At a few hundred
# bytes a line this is well under a megabyte, and it absorbs any burst a healthy sink has.
MAX_QUEUED = 1000
# How long the exit path waits for queued lines to reach a sink that stopped taking them.
FLUSH_TIMEOUT = 1.0

_dropped = 0


def dropped_messages() -> int:
    """Log lines dropped so far because the sink would have blocked (or failed)."""
    return _dropped


class NonBlockingHandler(logging.Handler):
    """Queues formatted lines for a writer thread; drops and counts what does not fit.

    The writer uses ``os.write`` on the file descriptor, not ``sys.stderr``: a thread
    blocked inside a buffered stream holds that stream's lock, and CPython aborts at exit
    when another thread then needs it ("could not acquire lock ... at interpreter
    shutdown", cpython Modules/_io/bufferedio.c). A stream without a descriptor (a test
    harness's capture) is written through instead.
    """

    def __init__(self, stream: TextIO, max_queued: int = MAX_QUEUED) -> None:
        super().__init__()
        self._stream = stream
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            self._fd = None
        self._max = max_queued
        self._lines: deque[bytes] = deque()
        self._busy = False
        # Re-entrant: a signal handler runs in the main thread and may log while that
        # thread is inside emit().
        self._cond = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        global _dropped
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            # Handler.handleError would print a traceback to stderr, the very sink that may
            # be blocked; a line that cannot be formatted is counted as dropped instead.
            with self._cond:
                _dropped += 1
            return
        with self._cond:
            if len(self._lines) >= self._max:
                _dropped += 1
                return
            self._lines.append(line)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        global _dropped
        while True:
            with self._cond:
                while not self._lines:
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                batch = list(self._lines)
                self._lines.clear()
                self._busy = True
            try:
                self._write(b"".join(batch))
            except (OSError, ValueError):  # stderr closed: EPIPE, EBADF, closed stream
                with self._cond:
                    _dropped += len(batch)

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._stream.write(data.decode("utf-8", "replace"))
            self._stream.flush()
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Wait, at most ``timeout`` seconds, for queued lines to be written.

        logging.shutdown() calls this at exit, so the last lines (why the exporter stopped)
        reach a working sink, and a blocked sink delays the exit by no more than this.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._lines or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)


def setup(level: str, fmt: str) -> None:
    """Configure the root logger on stderr (journald picks it up under systemd)."""
    handler = NonBlockingHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])


def kv(**fields: object) -> dict[str, dict[str, object]]:
    """Structured fields for one log call: ``log.info("msg", extra=kv(collector="x"))``."""
    return {"kv": fields}
