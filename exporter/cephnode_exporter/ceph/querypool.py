"""Querying many admin sockets at once: a bounded pool of threads and one deadline.

A stopped OSD accepts connections and never answers (ceph/asok.py says why), so each
socket gets a worker of its own and every run ends by its deadline, whatever the OSDs
do; the client in ceph/asok.py honours the deadline each task is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cephnode_exporter.ceph.asok import AdminSocket, AsokTimeout, encode_request

# Threads of a QueryPool: one per OSD of a dense node (24 NVMe) and some to spare, so
# that a few hung OSDs cannot starve the others of a worker. Idle threads cost little.
DEFAULT_WORKERS = 32

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass
class QueryResult(Generic[T]):
    """What one task produced: a value, or the error that stopped it; and how long."""

    value: T | None = None
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def _timed(key: object, fn: Callable[[float], T], deadline: float, workers: int) -> QueryResult[T]:
    start = time.monotonic()
    if start >= deadline:
        # Queued behind hung tasks until it was too late: say so rather than fail
        # with a confusing "deadline passed while sending".
        return QueryResult(error=AsokTimeout(str(key), "", _not_started(workers)))
    try:
        return QueryResult(value=fn(deadline), seconds=time.monotonic() - start)
    except Exception as exc:  # every failure, even a bug, is this task's result
        return QueryResult(error=exc, seconds=time.monotonic() - start)


def _not_started(workers: int) -> str:
    return f"not started (all {workers} workers busy)"


class QueryPool:
    """Query many admin sockets at once with a fixed number of threads.

    Why a persistent, bounded pool: one stopped OSD must not delay the others, so each
    socket gets its own thread; and a socket that hangs must not leave threads behind,
    so there are never more than ``max_workers`` of them. Each task receives the run's
    deadline (a little before it) and the client honours it, so a worker stuck on a hung
    OSD is free again by the end of the run; a task that ignores its deadline keeps one
    worker busy, and at worst later tasks wait in the queue and are reported as timed
    out, never more threads.
    """

    def __init__(self, max_workers: int = DEFAULT_WORKERS) -> None:
        self.max_workers = max_workers
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="asok")

    def run(
        self, tasks: Mapping[K, Callable[[float], T]], timeout: float
    ) -> dict[K, QueryResult[T]]:
        """Run ``task(deadline)`` for every key; return within ``timeout`` seconds.

        A task still running (or still queued) at the end is reported as
        :class:`AsokTimeout`; its thread finishes in the background. (Worker threads are
        joined at interpreter exit, one more reason for tasks to honour their deadline.)
        """
        start = time.monotonic()
        deadline = start + timeout
        # Tasks end a little early so that their own, more precise error is reported.
        task_deadline = deadline - min(0.05, timeout * 0.1)
        futures: dict[Future[QueryResult[T]], K] = {
            self._executor.submit(_timed, key, fn, task_deadline, self.max_workers): key
            for key, fn in tasks.items()
        }
        done, _ = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        results: dict[K, QueryResult[T]] = {}
        for fut, key in futures.items():
            if fut in done:
                results[key] = fut.result()
                continue
            started = not fut.cancel()
            why = "still running" if started else _not_started(self.max_workers)
            results[key] = QueryResult(
                error=AsokTimeout(str(key), "", f"{why} at the {timeout:.3g} s deadline"),
                seconds=time.monotonic() - start,
            )
        return results

    def close(self) -> None:
        """Stop accepting work; idle threads exit, busy ones when their task returns."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> QueryPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def query_all(
    sockets: Mapping[K, AdminSocket],
    prefix: str,
    pool: QueryPool,
    timeout: float,
    **args: object,
) -> dict[K, QueryResult[Any]]:
    """``command(prefix, **args)`` on every socket in parallel, within ``timeout``.

    The request is validated first, so a refused command fails here, for all, with no
    socket opened.
    """
    encode_request(prefix, args)

    def task(sock: AdminSocket) -> Callable[[float], Any]:
        return lambda deadline: sock.command(prefix, deadline=deadline, **args)

    return pool.run({key: task(sock) for key, sock in sockets.items()}, timeout)
