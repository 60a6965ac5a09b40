"""The background thread that samples one window every interval.

It keeps one ``perf record`` running between windows (:mod:`.recorder`) and falls back
to starting perf for each window (:mod:`.runner`) when this perf cannot be controlled.

Scrapes never wait for a window: they take :meth:`Sampler.snapshot`, a copy of the
latest results made under a lock. The thread starts the first window at once and then
one every ``interval`` seconds (a window that overruns its slot moves the next one to the
following slot; windows never overlap). Whatever a window's fault, the next one starts
normally; a perf that is missing or lacks permission is retried every interval too, so
installing perf or granting the capability needs no restart.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from cephnode_exporter.kprofile.classify import CLASSES
from cephnode_exporter.kprofile.perf import (
    COUNTED,
    OPTIONAL_RECORD_FLAGS,
    Observer,
    Outcome,
    PerfConfig,
    Report,
    SpawnHook,
    Window,
)
from cephnode_exporter.kprofile.recorder import Recorder, run_recorded_window
from cephnode_exporter.kprofile.runner import run_window
from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

JOIN_SECONDS = 10.0


@dataclass(frozen=True)
class SamplerState:
    """What scrapes see: totals over every completed window and the latest results."""

    totals: Mapping[str, int]  # samples per class, all completed windows
    sampled_seconds: float  # seconds sampled by completed windows
    windows: Mapping[str, int]  # windows per outcome (COUNTED)
    last: Window | None  # the latest completed window
    last_report: Report | None  # the latest attempt, whatever its outcome
    unavailable: str | None  # why sampling cannot work, while it cannot
    started: float  # Unix time the sampler started
    interval: float
    attempts: int = 0


@dataclass
class _Totals:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(map(str, CLASSES), 0))
    seconds: float = 0.0
    windows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(map(str, COUNTED), 0))


class Sampler:
    """Runs windows in a daemon thread; :meth:`close` stops it and kills a running perf."""

    def __init__(
        self,
        config: PerfConfig,
        interval: float,
        observe: Observer | None = None,
        on_spawn: SpawnHook | None = None,
        recorded: bool = True,
    ) -> None:
        self.config = config
        self.interval = interval
        self._observe = observe
        self._on_spawn = on_spawn
        self.recorded = recorded  # False: one-shot mode, perf started for each window
        self._recorder = Recorder(config)
        self._flags = dict(OPTIONAL_RECORD_FLAGS)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._totals = _Totals()
        self._state = SamplerState(
            totals=dict(self._totals.counts),
            sampled_seconds=0.0,
            windows=dict(self._totals.windows),
            last=None,
            last_report=None,
            unavailable=None,
            started=time.time(),
            interval=interval,
        )
        self._logged: str | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kprofile-sampler", daemon=True)
            self._thread.start()
            log.info(
                "kprofile sampler started",
                extra=kv(
                    frequency=self.config.frequency,
                    duration=self.config.duration,
                    interval=self.interval,
                ),
            )

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_SECONDS)
        self._recorder.close()

    def snapshot(self) -> SamplerState:
        with self._lock:
            return self._state

    def run_once(self) -> Report:
        """One window now, in the caller's thread (tests, the bench)."""
        report = self._window()
        self._record(report)
        return report

    # --- the thread ------------------------------------------------------------------------

    def _loop(self) -> None:
        next_start = time.monotonic()
        while not self._stop.is_set():
            report = self._window()
            if report.outcome == Outcome.STOPPED:
                return
            self._record(report)
            now = time.monotonic()
            next_start += self.interval
            if next_start < now:  # overran its slot: skip to the next one
                next_start += math.ceil((now - next_start) / self.interval) * self.interval
            self._stop.wait(next_start - now)

    def _window(self) -> Report:
        """One window. An optional flag this perf rejects is dropped and the window
        retried; a perf record that cannot be started under control (perf before 5.10)
        switches to one-shot mode for good."""
        while True:
            flags = tuple(self._flags.values())
            at_start = False
            try:
                if self.recorded:
                    report, at_start = run_recorded_window(
                        self._recorder,
                        self.config,
                        flags,
                        self._stop,
                        self._observe,
                        self._on_spawn,
                    )
                else:
                    report = run_window(
                        self.config, flags, self._stop, self._observe, self._on_spawn
                    )
            except Exception as exc:  # a bug of ours must not end sampling for good
                log.exception("kprofile window raised")
                self._recorder.close()
                return Report(Outcome.FAILED, f"internal error: {type(exc).__name__}: {exc}")
            option = report.unsupported_option
            if option is not None and option in self._flags:
                log.info(
                    "perf does not support an optional flag; sampling without it",
                    extra=kv(flag=self._flags.pop(option)),
                )
                continue
            if at_start and report.outcome == Outcome.FAILED:
                log.info(
                    "perf record cannot be kept running between windows; starting it for "
                    "each window instead",
                    extra=kv(err=report.reason),
                )
                self.recorded = False
                continue
            return report

    def _record(self, report: Report) -> None:
        t = self._totals
        with self._lock:
            if report.outcome in COUNTED:
                t.windows[report.outcome] += 1
            last = self._state.last
            if report.outcome == Outcome.OK and report.window is not None:
                for cls, n in report.window.counts.items():
                    t.counts[cls] = t.counts.get(cls, 0) + n
                t.seconds += report.window.duration
                last = report.window
            unavailable = report.reason if report.outcome == Outcome.UNAVAILABLE else None
            self._state = replace(
                self._state,
                totals=dict(t.counts),
                sampled_seconds=t.seconds,
                windows=dict(t.windows),
                last=last,
                last_report=report,
                unavailable=unavailable,
                attempts=self._state.attempts + 1,
            )
        self._log(report)

    def _log(self, report: Report) -> None:
        """Log a transient failure when it starts or changes, and the recovery.

        Unavailability (no perf, no permission, no symbols) is not logged here: the
        collector fails with the reason, and the scrape logs that once.
        """
        if report.outcome in (Outcome.OK, Outcome.UNAVAILABLE):
            if self._logged is not None and report.outcome == Outcome.OK:
                log.info("kprofile windows complete again")
            self._logged = None
            return
        shape = f"{report.outcome}:{re.sub(r'[0-9.]+', '#', report.reason)}"
        if shape != self._logged:
            log.warning(
                "kprofile window failed; the next one starts as scheduled",
                extra=kv(result=str(report.outcome), err=report.reason),
            )
        self._logged = shape
