"""Many admin-socket rounds in one thread: non-blocking sockets, one poll, one deadline.

A round is what one daemon is asked in a scrape, written as a generator that yields
each request (:class:`Ask`) and receives its checked reply payload, so that the order
and the conditions stay plain code (collectors/osd_query.py). :func:`run_rounds` runs
every daemon's round at once: each exchange is a non-blocking AF_UNIX connection, and
the thread waits in one ``poll`` for whichever socket is ready, until one deadline for
all. A stopped OSD (ceph/asok.py says why it accepts and never answers) costs its own
round the deadline and nobody else anything.

Why not a pool of threads, one per socket: the threads take the interpreter lock in
turns after each of their socket calls, and the handoffs cost more CPU than the
exchanges: ten OSDs' three commands took 1.4-5.9 ms of CPU on a pool of threads against
1.3-1.5 ms in one thread, on 2 cores (docs/performance.md, "OSD collector").

Each exchange keeps the blocking client's rules (:class:`~cephnode_exporter.ceph.asok.AdminSocket`):
the request allowlisted and encoded before a socket is opened, the per-socket lock, the
connect retried while the daemon's backlog is full, the announced length checked against
the command's cap before anything is read, ``ERROR:`` replies and too many JSON items
raised, and the same errors and messages.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Generator, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cephnode_exporter.ceph.asok import (
    _CONNECT_RETRY_S,
    _LENGTH,
    AdminSocket,
    AsokConnectError,
    AsokError,
    AsokReplyTooLarge,
    AsokStale,
    AsokTimeout,
    AsokTruncated,
    _connect_reason,
    _lock_for,
    encode_request,
)
from cephnode_exporter.ceph.asok import MIB as _MIB

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass
class QueryResult(Generic[T]):
    """What one round produced: a value, or the error that ended it; and how long."""

    value: T | None = None
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Ask:
    """One request of a round: an allowlisted command and its arguments; the round
    receives the reply payload as :meth:`AdminSocket.raw` returns it. ``prefix`` empty
    (:data:`PEER`) asks only for the socket's peer pid (:meth:`AdminSocket.peer_pid`)."""

    prefix: str
    args: Mapping[str, object] = field(default_factory=dict)


PEER = Ask("")

Round = Generator[Ask, Any, T]

# After the deadline, a round that catches the timeout and asks again is given the
# timeout this many times before it is closed.
_MAX_LATE_ASKS = 8
# Reply bytes all the rounds of one run may receive together. Each command's cap bounds
# one reply; this bounds their sum, which the rounds hold until parsed (collectors/
# osd_query.py), so that 128 OSDs answering near their caps cannot take the exporter
# past the unit's MemoryMax (deploy/cephnode-exporter.service, 256 MiB): raw replies up
# to this much plus one OSD's decoded replies at a time. Real OSDs answer about 150 KB a
# scrape each (20 MB at 128 OSDs); a stall's 2,000 ops in flight are 2.8 MB an OSD.
MAX_RUN_REPLY_BYTES = 96 * _MIB


class _Exchange:
    """One round and its exchange in progress: which request, on which connection, how
    much of the reply has arrived."""

    __slots__ = (
        "ask",
        "body",
        "conn",
        "connect_end",
        "got",
        "header",
        "key",
        "late",
        "lock",
        "out",
        "request",
        "result",
        "retry_at",
        "round_start",
        "sock",
        "start",
        "steps",
    )

    def __init__(self, key: Any, sock: AdminSocket, steps: Round[Any], start: float) -> None:
        self.key = key
        self.sock = sock
        self.steps = steps
        self.round_start = start
        self.ask = PEER
        self.request = b""
        self.conn: socket.socket | None = None
        self.lock: Any = None
        self.out = memoryview(b"")
        self.header = bytearray(_LENGTH.size)
        self.body: bytearray | None = None
        self.got = 0
        self.start = start
        self.connect_end = 0.0
        self.retry_at: float | None = None
        self.late = 0
        self.result: QueryResult[Any] | None = None

    def error(self, cls: type[AsokError], message: str) -> AsokError:
        return cls(self.sock.path, self.ask.prefix or "peer_pid", message)

    def release(self) -> None:
        """Close the connection and free the socket's lock (idempotent)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None


class _Loop:
    def __init__(self, deadline: float, max_bytes: int = MAX_RUN_REPLY_BYTES) -> None:
        self.deadline = deadline
        self.bytes_left = max_bytes  # of the run's reply budget
        self.selector = selectors.DefaultSelector()
        self.waiting: list[_Exchange] = []  # connect or lock to try again at retry_at
        self.running = 0  # rounds without a result

    def finish(self, ex: _Exchange, value: Any = None, error: BaseException | None = None) -> None:
        """The round's result; only its first counts, so that ``running`` stays the
        number of rounds without one (an event for a round already over, or an error
        thrown into its closed generator, must not end the loop early or keep it)."""
        if ex.result is not None:
            return
        ex.result = QueryResult(value, error, time.monotonic() - ex.round_start)
        self.running -= 1

    # ------------------------------------------------------------------ the round

    def advance(self, ex: _Exchange, reply: Any = None, error: BaseException | None = None) -> None:
        """Give the round its reply (or error) and start its next request, until one is
        under way or the round has ended."""
        while True:
            ex.release()
            try:
                ask = ex.steps.throw(error) if error is not None else ex.steps.send(reply)
            except StopIteration as stop:
                self.finish(ex, value=stop.value)
                return
            except Exception as exc:  # every failure, even a bug, is this round's result
                self.finish(ex, error=exc)
                return
            reply, error = None, None
            ex.ask, ex.start, ex.retry_at = ask, time.monotonic(), None
            if ex.start >= self.deadline:
                ex.late += 1
                if ex.late > _MAX_LATE_ASKS:
                    ex.steps.close()
                    self.finish(ex, error=ex.error(AsokTimeout, "deadline passed"))
                    return
                error = ex.error(AsokTimeout, "deadline passed before the request was sent")
                continue
            try:
                path = ex.sock.path
                ex.request = encode_request(ask.prefix, ask.args, path) if ask.prefix else b""
            except AsokError as exc:
                error = exc
                continue
            ex.connect_end = min(self.deadline, ex.start + ex.sock.connect_timeout)
            started = self.start(ex)
            if started is None:
                return  # under way: the poll carries it on
            reply, error = started

    def start(self, ex: _Exchange) -> tuple[Any, BaseException | None] | None:
        """Take the socket's lock and connect. None when the exchange is under way (or
        waits to try again); else the round's (reply, error) right away: a peer pid
        asked alone, or the connect failed."""
        now = time.monotonic()
        if ex.lock is None:
            lock = _lock_for(ex.sock.path)
            if not lock.acquire(blocking=False):
                if now + _CONNECT_RETRY_S > self.deadline:
                    return None, ex.error(
                        AsokTimeout, "an earlier request to this socket is still running"
                    )
                self.later(ex, now)
                return None
            ex.lock = lock
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        except OSError as exc:  # EMFILE, ENOBUFS: this round's error, not the others'
            return None, ex.error(AsokConnectError, f"socket: {exc.strerror or exc}")
        conn.setblocking(False)
        try:
            conn.connect(ex.sock.path)
        except BlockingIOError:
            # EAGAIN on a non-blocking AF_UNIX connect: the listen backlog is full.
            conn.close()
            if now + _CONNECT_RETRY_S > ex.connect_end:
                return None, ex.error(
                    AsokTimeout, "connect: backlog full, the daemon is not accepting connections"
                )
            self.later(ex, now)
            return None
        except OSError as exc:
            conn.close()
            kind = AsokStale if isinstance(exc, ConnectionRefusedError) else AsokConnectError
            return None, ex.error(kind, _connect_reason(exc))
        ex.conn = conn
        if not ex.ask.prefix:
            try:
                pid = ex.sock.note_peer(conn, strict=True)
            except AsokError as exc:
                return None, exc
            return pid, None
        ex.sock.note_peer(conn)
        ex.out = memoryview(ex.request)
        ex.got, ex.body = 0, None
        try:
            self.selector.register(conn, selectors.EVENT_WRITE, ex)
        except (OSError, ValueError) as exc:
            return None, ex.error(AsokConnectError, f"poll: {exc}")
        return None

    def later(self, ex: _Exchange, now: float) -> None:
        ex.retry_at = now + _CONNECT_RETRY_S
        self.waiting.append(ex)

    # ------------------------------------------------------------------ the poll

    def ready(self, ex: _Exchange) -> None:
        """Carry an exchange on after the poll said its socket is ready."""
        conn = ex.conn
        assert conn is not None
        try:
            if ex.out:
                try:
                    sent = conn.send(ex.out)
                except BlockingIOError:
                    return
                except OSError as exc:
                    raise ex.error(AsokConnectError, f"send: {exc.strerror or exc}") from None
                ex.out = ex.out[sent:]
                if not ex.out:
                    self.selector.modify(conn, selectors.EVENT_READ, ex)
                return
            payload = self.receive(ex, conn)
        except AsokError as exc:
            self.forget(ex)
            self.advance(ex, error=exc)
            return
        if payload is not None:
            self.forget(ex)
            try:
                checked = ex.sock.checked(ex.ask.prefix, payload)
            except AsokError as exc:
                self.advance(ex, error=exc)
                return
            self.advance(ex, reply=checked)

    def receive(self, ex: _Exchange, conn: socket.socket) -> bytes | None:
        """Read what has arrived; the whole payload once complete, else None."""
        if ex.body is None:
            want, buf, what = _LENGTH.size, ex.header, "reply length"
        else:
            want, buf, what = len(ex.body), ex.body, "reply"
        try:
            n = conn.recv_into(memoryview(buf)[ex.got :], want - ex.got)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise ex.error(
                AsokTruncated, f"{what}: {exc.strerror or exc} after {ex.got} of {want} bytes"
            ) from None
        if n == 0:
            raise ex.error(
                AsokTruncated, f"connection closed after {ex.got} of {want} {what} bytes"
            )
        ex.got += n
        if ex.got < want:
            return None
        if ex.body is not None:
            body, ex.body, ex.got = ex.body, None, 0  # the buffer goes with its copy
            return bytes(body)
        (length,) = _LENGTH.unpack(ex.header)
        ex.sock.check_length(ex.ask.prefix, length)
        if length > self.bytes_left:
            raise ex.error(
                AsokReplyTooLarge,
                f"daemon announced {length} bytes, past what this scrape's replies may "
                f"hold together ({MAX_RUN_REPLY_BYTES // _MIB} MiB, docs/limits.md)",
            )
        self.bytes_left -= length
        ex.body, ex.got = bytearray(length), 0
        if length == 0:
            return b""
        # The daemon sends the length and the payload together (admin_socket.cc
        # do_accept): read on now rather than after another poll.
        return self.receive(ex, conn)

    def forget(self, ex: _Exchange) -> None:
        """Stop polling the exchange's connection, if it is polled."""
        if ex.conn is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(ex.conn)

    def expire(self, ex: _Exchange, now: float) -> None:
        """The deadline passed with this exchange under way: the blocking client's error."""
        self.forget(ex)
        elapsed = now - ex.start
        if ex.lock is None:
            exc = ex.error(AsokTimeout, "an earlier request to this socket is still running")
        elif ex.conn is None:
            exc = ex.error(
                AsokTimeout, "connect: backlog full, the daemon is not accepting connections"
            )
        elif ex.out:
            exc = ex.error(AsokTimeout, "deadline passed while sending the request")
        elif ex.body is None:
            exc = ex.error(
                AsokTimeout,
                f"no complete reply length after {elapsed:.3g} s "
                f"({ex.got} of {_LENGTH.size} bytes)",
            )
        else:
            exc = ex.error(
                AsokTimeout,
                f"no complete reply after {elapsed:.3g} s ({ex.got} of {len(ex.body)} bytes)",
            )
        self.advance(ex, error=exc)

    def run(self, exchanges: list[_Exchange]) -> None:
        self.running = len(exchanges)
        try:
            for ex in exchanges:
                self.advance(ex)
            while self.running:
                now = time.monotonic()
                if self.waiting:
                    due = [e for e in self.waiting if e.retry_at is not None and e.retry_at <= now]
                    if due:
                        self.waiting = [e for e in self.waiting if e not in due]
                        for ex in due:
                            self.retry(ex)
                        continue
                if now >= self.deadline:
                    self.waiting = []
                    for ex in exchanges:
                        if ex.result is None:
                            self.expire(ex, now)
                    continue
                until = self.deadline
                for ex in self.waiting:
                    if ex.retry_at is not None:
                        until = min(until, ex.retry_at)
                if not self.selector.get_map():
                    time.sleep(max(0.0, until - now))
                    continue
                for key, _ in self.selector.select(max(0.0, until - now)):
                    ex = key.data
                    try:
                        self.ready(ex)
                    except Exception as exc:  # a bug stays this round's
                        self.forget(ex)
                        self.advance(ex, error=exc)
        finally:
            for ex in exchanges:
                ex.release()
            self.selector.close()

    def retry(self, ex: _Exchange) -> None:
        started = self.start(ex)
        if started is not None:
            self.advance(ex, reply=started[0], error=started[1])


def run_rounds(
    rounds: Mapping[K, tuple[AdminSocket, Round[T]]],
    timeout: float,
    max_bytes: int = MAX_RUN_REPLY_BYTES,
) -> dict[K, QueryResult[T]]:
    """Run every ``(socket, round)`` at once in this thread; return within ``timeout``.

    Rounds end a little before the timeout, so that a late reply is reported as the
    exchange's own timeout. A round's result is the value it returned, or the error it
    did not catch, and how long it took. A reply announced past what is left of
    ``max_bytes`` for the whole run is refused (AsokReplyTooLarge), as one past its
    command's cap.
    """
    start = time.monotonic()
    deadline = start + timeout - min(0.05, timeout * 0.1)
    exchanges = [_Exchange(key, sock, steps, start) for key, (sock, steps) in rounds.items()]
    _Loop(deadline, max_bytes).run(exchanges)
    out: dict[K, QueryResult[T]] = {}
    for ex in exchanges:
        assert ex.result is not None
        out[ex.key] = ex.result
    return out


def query_all(
    sockets: Mapping[K, AdminSocket], prefix: str, timeout: float, **args: object
) -> dict[K, QueryResult[Any]]:
    """``command(prefix, **args)`` on every socket at once, within ``timeout``.

    The request is validated first, so a refused command fails here, for all, with no
    socket opened.
    """
    encode_request(prefix, args)

    def command(sock: AdminSocket) -> Round[Any]:
        return sock.parse(prefix, (yield Ask(prefix, args)))

    return run_rounds({key: (sock, command(sock)) for key, sock in sockets.items()}, timeout)
