"""One collection of every enabled collector, within a time budget, whatever goes wrong.

Three rules shape this module:

- **Serial sysfs reads.** Collectors run one after another on a single worker thread:
  parallel sysfs reads on many-core machines hit kernel lock contention and races
  (node_exporter runs with GOMAXPROCS=1 for the same reason, its issues #1880, #2966).
- **Nothing stalls a scrape.** Each collector call has a deadline. A call that overruns
  (a driver blocking in a sysfs read) is abandoned: the scrape reports the collector
  failed and moves on with a fresh worker; the collector is not called again until the
  stuck call returns, so hung threads never pile up.
- **Concurrent scrapes share work.** A scrape that arrives while a collection runs waits
  for the next one to start and shares it with every other waiter, so 20 parallel
  scrapes cost at most two collections and all of them see values read after they asked.
  Scrapes of a subset of the collectors (``collect[]``, node_exporter's handler.go) share
  only with scrapes of the same subset, and still run one collection at a time.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from cephnode_exporter.checks.base import CheckSpec, Result
from cephnode_exporter.checks.evaluate import CollectorFacts, evaluate
from cephnode_exporter.collection import Collection, Outcome
from cephnode_exporter.collectors.base import DEFAULT_COLLECTOR_TIMEOUT, Collector
from cephnode_exporter.logs import kv
from cephnode_exporter.profile import Profile

log = logging.getLogger(__name__)


class _Call:
    """One function call handed to a worker, with its outcome."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: Any = None
        self.exc: BaseException | None = None
        self.started = time.monotonic()
        self.finished: float | None = None


class _Worker:
    """A daemon thread that runs calls one at a time, in order."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        thread = threading.Thread(target=self._loop, name="collector-worker", daemon=True)
        thread.start()

    def submit(self, fn: Callable[[], Any]) -> _Call:
        call = _Call(fn)
        self._queue.put(call)
        return call

    def retire(self) -> None:
        """Let the thread exit once its current (stuck) call returns."""
        self._queue.put(None)

    def _loop(self) -> None:
        while (call := self._queue.get()) is not None:
            call.started = time.monotonic()
            try:
                call.value = call.fn()
            except BaseException as exc:  # handed to the scrape, which logs it
                call.exc = exc
            # Drop the closure (and the collector it holds) before waiting for more work.
            call.fn = _done
            call.done.set()
            del call


def _done() -> None:
    return None


class _Batch:
    """The collectors of one collection, run one after another by one worker call.

    Handing each collector to the worker on its own cost two thread switches per
    collector (the scrape waking the worker, the worker waking the scrape): about 20 us
    of CPU and, on a busy node, 80 us of waiting each. Here the worker runs them in a
    row and wakes the scrape once; the scrape sleeps until the batch is done or the
    running collector's time is up. Under ``lock``, the worker starts a collector only
    while the scrape has not given up on the batch (``stop``), so that once it has, the
    collector found running is the only one left on the old worker and the rest can go
    to a fresh one without two collectors ever reading at once.
    """

    def __init__(self, work: list[Callable[[], Any]], deadline: float) -> None:
        self.calls = [_Call(fn) for fn in work]
        self.deadline = deadline
        self.lock = threading.Lock()
        self.stop = False
        # Index of the call started last (-1: none yet), set under lock.
        self.running = -1
        self.done = threading.Event()
        self.submitted = time.monotonic()

    def __call__(self) -> None:
        try:
            for i, call in enumerate(self.calls):
                with self.lock:
                    now = time.monotonic()
                    if self.stop or now >= self.deadline:
                        self.stop = True
                        return
                    call.started = now
                    self.running = i
                try:
                    call.value = call.fn()
                except BaseException as exc:  # handed to the scrape, which logs it
                    call.exc = exc
                call.fn = _done
                call.finished = time.monotonic()
                call.done.set()
        finally:
            self.done.set()


class _Round:
    """A collection that scrapes can wait on and share.

    ``deadlines`` holds the deadline of every scrape still waiting for it; the round runs
    until the earliest, so no waiter is answered late.
    """

    def __init__(self) -> None:
        self.deadlines: list[float] = []
        self.collection: Collection | None = None


class Scraper:
    """Runs collections of the enabled collectors and evaluates the tuning checks."""

    def __init__(
        self,
        collectors: list[Collector],
        disabled: Iterable[str],
        profile: Profile,
        specs: dict[str, CheckSpec],
        collector_timeout: float = DEFAULT_COLLECTOR_TIMEOUT,
    ) -> None:
        self._collectors = collectors
        self._disabled = set(disabled)
        self._profile = profile
        self._specs = specs
        self._collector_timeout = collector_timeout
        # The collectors' shared reads (HostFS.shared), one scope per collection.
        shared = [c.ctx.fs.shared for c in collectors]
        self._shared = list({id(s): s for s in shared}.values())
        self._worker = _Worker()
        # A collector's last facts and families (reuse_unchanged), and the check
        # results of the last evaluation (evaluate's memo).
        self._last: dict[str, tuple[Any, list[Metric]]] = {}
        self._checks_memo: dict[str, tuple[Any, list[Result]]] = {}
        self._stuck: dict[str, _Call] = {}
        self._last_error: dict[str, str | None] = {}
        self._last_skips: dict[str, int] = {}
        self._cond = threading.Condition()
        self._running: _Round | None = None
        # The next round per subset of collectors (None: all of them).
        self._pending: dict[frozenset[str] | None, _Round] = {}

    def close(self) -> None:
        """Stop the worker and release what collectors hold open (descriptors)."""
        self._worker.retire()
        for collector in self._collectors:
            try:
                collector.close()
            except Exception:
                log.exception("closing collector failed", extra=kv(collector=collector.name))

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def collector_names(self) -> list[str]:
        return [c.name for c in self._collectors]

    def collect(self, budget: float, only: frozenset[str] | None = None) -> Collection:
        """Collect, sharing the work with concurrent callers; returns within ``budget``.

        ``only``: run just these of the enabled collectors (names the caller checked);
        the others are left out of the collection, as node_exporter's filtered handler
        leaves them out, and the checks that need them are skipped.
        """
        deadline = time.monotonic() + budget
        key = None if only is None or only >= set(self.collector_names) else only
        with self._cond:
            mine = self._pending.get(key)
            if mine is None:
                mine = self._pending[key] = _Round()
            mine.deadlines.append(deadline)
            # Wait for the collection in progress: its reads may predate this request.
            while self._running is not None and self._pending.get(key) is mine:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(timeout=remaining)
            if self._pending.get(key) is mine and self._running is not None:
                # Gave up before our round could start; leave it to the others.
                mine.deadlines.remove(deadline)
                if not mine.deadlines:
                    del self._pending[key]
                return self._timed_out(key)
            drive = self._pending.get(key) is mine
            if drive:
                del self._pending[key]
                self._running = mine
        if drive:
            try:
                mine.collection = self._run(min(mine.deadlines), key)
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()
            return mine.collection
        with self._cond:
            while mine.collection is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(timeout=remaining)
            if mine.collection is not None:
                return mine.collection
        return self._timed_out(key)

    def _selected(self, only: frozenset[str] | None) -> list[Collector]:
        return [c for c in self._collectors if only is None or c.name in only]

    def _timed_out(self, only: frozenset[str] | None = None) -> Collection:
        """A valid answer for a caller whose budget ran out while waiting for others."""
        msg = "scrape budget ran out while waiting for a concurrent collection"
        log.warning(msg)
        outcomes = [Outcome(c.name, False, 0.0, error=msg) for c in self._selected(only)]
        return Collection(outcomes, [], self._profile.name)

    def _run(self, deadline: float, only: frozenset[str] | None = None) -> Collection:
        collectors = self._selected(only)
        with contextlib.ExitStack() as scopes:
            for shared in self._shared:
                scopes.enter_context(shared.scope())
            outcomes = self._run_all(collectors, deadline)
        # Collectors left out of a filtered scrape count as disabled for the checks.
        left_out = {c.name for c in self._collectors} - {c.name for c in collectors}
        states = {name: CollectorFacts(enabled=False) for name in self._disabled | left_out}
        stable = {c.name for c in collectors if c.reuse_unchanged}
        for o in outcomes:
            states[o.name] = CollectorFacts(
                enabled=True, facts=o.facts, error=o.error, stable=o.name in stable
            )
        results = evaluate(self._profile, self._specs, states, self._checks_memo)
        return Collection(outcomes, results, self._profile.name)

    def _run_all(self, collectors: list[Collector], deadline: float) -> list[Outcome]:
        """Each collector's outcome, in order: the runnable ones in one worker batch."""
        outcomes: dict[str, Outcome] = {}
        runnable: list[Collector] = []
        for collector in collectors:
            name = collector.name
            stuck = self._stuck.get(name)
            if stuck is not None:
                if not stuck.done.is_set():
                    age = time.monotonic() - stuck.started
                    outcomes[name] = self._fail(
                        name, 0.0, f"still blocked in a call started {age:.1f}s ago"
                    )
                    continue
                del self._stuck[name]
            runnable.append(collector)
        while runnable:
            if deadline - time.monotonic() <= 0:
                for collector in runnable:
                    outcomes[collector.name] = self._fail(
                        collector.name, 0.0, "scrape budget exhausted before the collector ran"
                    )
                break
            runnable = self._run_batch(runnable, deadline, outcomes)
        return [outcomes[c.name] for c in collectors]

    def _run_batch(
        self, collectors: list[Collector], deadline: float, outcomes: dict[str, Outcome]
    ) -> list[Collector]:
        """Run ``collectors`` in one batch; fills ``outcomes`` and returns the collectors
        not started because one overran its time (to run on a fresh worker)."""
        limit = self._collector_timeout
        batch = _Batch([_work(c, self._last, limit, deadline) for c in collectors], deadline)
        self._worker.submit(batch)
        while True:
            with batch.lock:
                i = batch.running
                started = batch.submitted if i < 0 else batch.calls[i].started
            # The running collector's time: --collector.timeout from its start, within
            # the scrape's budget (before it starts, counted from the hand-off).
            until = min(started + limit, deadline)
            if batch.done.wait(max(0.0, until - time.monotonic())):
                break
            with batch.lock:
                if batch.running != i or (i >= 0 and batch.calls[i].done.is_set()):
                    continue  # it moved on meanwhile: time the next one
                batch.stop = True
            break
        stuck = batch.calls[batch.running] if batch.running >= 0 else None
        if batch.running < 0 and not batch.done.is_set():
            # The worker has not started the batch (still busy): leave it to itself.
            self._worker.retire()
            self._worker = _Worker()
        rest: list[Collector] = []
        for collector, call in zip(collectors, batch.calls, strict=True):
            name = collector.name
            if call.finished is not None:
                outcomes[name] = self._outcome(collector, call)
            elif call is stuck:
                # Abandon the worker; the stuck call keeps its thread until it returns.
                timeout = min(limit, deadline - call.started)
                self._stuck[name] = call
                self._worker.retire()
                self._worker = _Worker()
                outcomes[name] = self._fail(
                    name, time.monotonic() - call.started, f"timed out after {timeout:.2f}s"
                )
            else:
                rest.append(collector)
        return rest

    def _outcome(self, collector: Collector, call: _Call) -> Outcome:
        name = collector.name
        duration = (call.finished or call.started) - call.started
        if call.exc is not None:
            return self._fail(name, duration, f"{type(call.exc).__name__}: {call.exc}")
        facts, families = call.value
        outcome = Outcome(
            name,
            True,
            duration,
            facts,
            families,
            read_errors=collector.read_errors(facts),
            items_dropped=collector.items_dropped(facts),
        )
        self._note(name, None)
        self._note_skips(name, outcome.read_errors, lambda: collector.first_errors(facts))
        return outcome

    def _note_skips(self, name: str, count: int, first: Callable[[], list[str]]) -> None:
        """Warn when a collector starts skipping unreadable files, note when it stops."""
        previous = self._last_skips.get(name, 0)
        self._last_skips[name] = count
        if count and not previous:
            log.warning(
                "collector skipped unreadable items",
                extra=kv(collector=name, count=count, first=first()),
            )
        elif count:
            log.debug("collector skipped unreadable items", extra=kv(collector=name, count=count))
        elif previous:
            log.info("collector reads every item again", extra=kv(collector=name))

    def _fail(self, name: str, duration: float, error: str) -> Outcome:
        self._note(name, error)
        return Outcome(name, False, duration, error=error)

    def _note(self, name: str, error: str | None) -> None:
        """Log a failure when it starts or changes and the recovery, not every scrape."""
        previous = self._last_error.get(name)
        self._last_error[name] = error
        if error is not None and _shape(error) != _shape(previous):
            log.error("collector failed", extra=kv(collector=name, err=error))
        elif error is None and previous is not None:
            log.info("collector recovered", extra=kv(collector=name))


def _work(
    collector: Collector,
    last: dict[str, tuple[Any, list[Metric]]],
    limit: float,
    deadline: float,
) -> Callable[[], tuple[Any, list[Metric]]]:
    """The collector's read and metrics, told when it will be abandoned (``limit``
    seconds from its start, or the scrape's ``deadline``, whichever comes first, as
    _run_batch times it); with ``reuse_unchanged``, facts equal to the
    last scrape's give that scrape's facts and families back (the same objects, so the
    checks and the encoder can tell by identity that nothing changed). When the facts
    changed, a family whose samples equal the last scrape's is still that family: on a
    node the cpuidle counters move every scrape, the states' settings beside them do
    not, and neither does an NVMe queue's when only its in-flight count moved."""

    def work() -> tuple[Any, list[Metric]]:
        collector.deadline = min(time.monotonic() + limit, deadline)
        facts = collector.read()
        if not collector.reuse_unchanged:
            return facts, list(collector.metrics(facts))
        before = last.get(collector.name)
        if before is not None and before[0] == facts:
            return before
        families = list(collector.metrics(facts))
        if before is not None:
            families = _same_families(families, before[1])
        out = facts, families
        last[collector.name] = out
        return out

    return work


def _same_families(families: list[Metric], previous: list[Metric]) -> list[Metric]:
    """``families``, each replaced by the previous scrape's family of its name when that
    one has equal samples, help and type. Equal samples print alike, but for a zero
    that changed sign (0.0 == -0.0), which both mean zero to Prometheus."""
    by_name = {f.name: f for f in previous}
    out = []
    for family in families:
        old = by_name.get(family.name)
        if (
            old is not None
            and old.samples == family.samples
            and old.documentation == family.documentation
            and old.type == family.type
        ):
            family = old
        out.append(family)
    return out


def _shape(error: str | None) -> str | None:
    """An error message without its numbers, so "timed out after 4.97s" repeats as one."""
    return None if error is None else re.sub(r"[0-9.]+", "#", error)
