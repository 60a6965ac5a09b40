"""A hardened client for Ceph's admin socket (``/var/run/ceph/<cluster>-osd.<id>.asok``).

The wire protocol, from Ceph's own server and client (ceph/ceph
src/common/admin_socket.cc ``AdminSocket::do_accept`` and
src/common/admin_socket_client.cc ``AdminSocketClient::do_request``):

- AF_UNIX stream; one request per connection, and the daemon serves one connection at a
  time (a single thread polls the listening socket, ``listen(fd, 5)``).
- The request is a JSON object (``{"prefix": "perf dump", "format": "json"}``) terminated
  by ``\\0`` (or ``\\n``). The server reads it byte by byte into ``char cmd[1024]`` and drops
  the connection when no terminator arrives within those 1024 bytes, so a request is at
  most 1023 bytes plus the terminator. Arguments it does not know are silently ignored;
  without ``format`` it answers ``json-pretty`` (about 7x larger for histograms).
- The reply is a 4-byte big-endian length, then that many bytes. When the command failed,
  the payload is ``ERROR: <strerror>\\n<message>\\n`` followed by any output
  (``execute_command`` returns a negative code and ``do_accept`` prepends the text; seen
  on Pacific). The server closes the connection after the reply.

Why so defensive: the exporter runs next to production OSDs. A stopped OSD (SIGSTOP, a
hung process) still *accepts* connections (the kernel queues them in the backlog) and
never answers; a confused or hostile peer can announce 4 GiB or send garbage. Every
exchange therefore has a total deadline, the announced length is checked against a cap
before anything is read, and JSON errors (including excessive nesting) surface as
:class:`AsokDecodeError`. And because the admin socket also takes commands that change a
running OSD (``config set``, ``compact``, ``bench``, ``injectargs``, ...), the client
refuses everything but an allowlist of read-only commands before it opens a socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar

# Seconds for one whole exchange (connect, send, reply). perf histogram dump, the slowest
# command we send, takes 2-4 ms on a healthy OSD (docs/ceph.md); 5 s is the margin for a
# busy one, and also the SO_RCVTIMEO Ceph's own client uses (admin_socket_client.cc).
DEFAULT_TIMEOUT = 5.0
# Connecting to a live daemon is immediate; it only waits when the backlog is full.
DEFAULT_CONNECT_TIMEOUT = 1.0
# Largest reply accepted. Measured on Ceph 16.2.15 with format=json: perf schema 90 KB,
# config show 65 KB, perf histogram dump 18 KB, perf dump 18 KB (docs/ceph.md).
# dump_ops_in_flight grows with the ops in flight (about 1-2 KB each); 16 MiB leaves
# room for thousands of stuck ops while bounding what a hostile peer can make us hold.
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
# char cmd[1024] in AdminSocket::do_accept, terminator included.
MAX_REQUEST_BYTES = 1023
# The reply length prefix: a big-endian uint32 (htonl in do_accept).
_LENGTH = struct.Struct(">I")
# struct ucred {pid_t pid; uid_t uid; gid_t gid;} from <sys/socket.h>, for SO_PEERCRED.
_UCRED = struct.Struct("iII")
_CONNECT_RETRY_S = 0.01
# Threads of a QueryPool: one per OSD of a dense node (24 NVMe) and some to spare, so
# that a few hung OSDs cannot starve the others of a worker. Idle threads cost little.
DEFAULT_WORKERS = 32


@dataclass(frozen=True)
class Allowed:
    """An allowlisted command: the arguments it may carry and whether it answers text."""

    args: frozenset[str] = frozenset()
    text: bool = False


# Read-only commands. Each exists on a Pacific 16.2.15 OSD with exactly these arguments
# (compared with its `get_command_descriptions` in tests/test_cephcluster.py) and is still
# registered in later sources (docs/ceph.md); none changes state. Anything else is
# refused, notably an `output-file` argument, which newer releases honour for every
# command (admin_socket.cc, execute_command) and which makes the daemon write a file.
# `perf reset`, `config set/unset`, `injectargs`, `compact`, `bench`, `cache drop`,
# `flush_*`, `heap`, `bluefs debug_inject_read_zeros`, ... are deliberately absent.
ALLOWED_COMMANDS: Mapping[str, Allowed] = MappingProxyType(
    {
        # common/ceph_context.cc: "perf dump name=logger,... name=counter,..."
        "perf dump": Allowed(frozenset({"logger", "counter"})),
        "perf schema": Allowed(),
        "perf histogram dump": Allowed(frozenset({"logger", "counter"})),
        "perf histogram schema": Allowed(),
        # osd/OSD.cc: "dump_ops_in_flight name=filterstr,type=CephString,n=N,req=false"
        "dump_ops_in_flight": Allowed(frozenset({"filterstr"})),
        "dump_historic_slow_ops": Allowed(frozenset({"filterstr"})),
        # common/ceph_context.cc: "config show", "config get name=var,type=CephString"
        "config show": Allowed(),
        "config get": Allowed(frozenset({"var"})),
        "status": Allowed(),
        "version": Allowed(),
        # Empty unless rocksdb_perf and a rocksdb_collect_* option are true; then several
        # JSON objects back to back with repeated keys: read it with raw() (ceph/kvstats.py).
        "dump_objectstore_kv_stats": Allowed(),
        # os/bluestore/BlueFS.cc SocketHook: plain text, BlueStore OSDs only.
        "bluefs stats": Allowed(text=True),
    }
)


# ----------------------------------------------------------------------------- errors


class AsokError(Exception):
    """A command did not produce a usable reply. ``reason`` is a short, stable label."""

    reason = "error"

    def __init__(self, path: str, prefix: str, message: str) -> None:
        super().__init__(f"{path}: {prefix!r}: {message}" if prefix else f"{path}: {message}")
        self.path = path
        self.prefix = prefix
        self.message = message


class AsokRefused(AsokError):
    """Not sent: the command is not allowlisted, has other arguments or is too long."""

    reason = "refused"


class AsokConnectError(AsokError):
    """The socket could not be connected (gone, stale, permission, backlog full)."""

    reason = "connect"


class AsokTimeout(AsokError):
    """The deadline passed (the daemon is stopped, hung or too slow)."""

    reason = "timeout"


class AsokTruncated(AsokError):
    """The daemon closed the connection before the announced reply was complete."""

    reason = "truncated"


class AsokReplyTooLarge(AsokError):
    """The announced reply length is above the cap; nothing of it was read."""

    reason = "too_large"


class AsokDecodeError(AsokError):
    """The reply is not valid UTF-8 or JSON, or is nested too deeply to parse."""

    reason = "decode"


class AsokCommandError(AsokError):
    """The daemon answered ``ERROR: ...`` (unknown command, bad argument, ...)."""

    reason = "command"


# ----------------------------------------------------------------------------- request


def encode_request(prefix: str, args: Mapping[str, object], path: str = "") -> bytes:
    """The request bytes for an allowlisted command, or :class:`AsokRefused` (no I/O)."""
    spec = ALLOWED_COMMANDS.get(prefix) if isinstance(prefix, str) else None
    if spec is None:
        raise AsokRefused(path, str(prefix), "not an allowlisted read-only command")
    bad = sorted(set(args) - spec.args)
    if bad:
        raise AsokRefused(path, prefix, f"argument(s) not allowed: {', '.join(bad)}")
    for key, value in args.items():
        ok = isinstance(value, str | int | float | bool) or (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        )
        if not ok:
            raise AsokRefused(path, prefix, f"argument {key}: unsupported type {type(value)}")
    # ensure_ascii: the server terminates requests at a raw \0 or \n, and json.dumps
    # escapes both (and every other control character) inside strings.
    # format json: the default, json-pretty, is up to 7x larger.
    body = {"prefix": prefix, **args, "format": "json"}
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if len(data) > MAX_REQUEST_BYTES:
        raise AsokRefused(
            path, prefix, f"request is {len(data)} bytes, the daemon takes {MAX_REQUEST_BYTES}"
        )
    return data + b"\0"


def parse_json(payload: bytes, path: str = "", prefix: str = "") -> Any:
    """Parse a JSON reply; every failure is an :class:`AsokDecodeError`."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AsokDecodeError(path, prefix, f"reply is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        # json's C scanner counts nesting against the recursion limit (about 1000):
        # "[" * 100000 ends here, cleanly, long before the stack is at risk.
        raise AsokDecodeError(path, prefix, "reply JSON is nested too deeply") from None
    except ValueError as exc:
        raise AsokDecodeError(path, prefix, f"reply is not valid JSON: {exc}") from None


# ----------------------------------------------------------------------------- client

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(path: str) -> threading.Lock:
    """One lock per socket path: the daemon serves one connection at a time anyway, and a
    second request queued behind a stuck one would only wait for the same deadline.
    The dict grows with the distinct paths seen (the OSDs of one node)."""
    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = threading.Lock()
        return lock


class AdminSocket:
    """One daemon's admin socket. Cheap to create; each command is one connection.

    ``timeout`` bounds a whole exchange (connect, send, read the reply) and
    ``connect_timeout`` the connect alone; a call may pass an absolute
    ``time.monotonic()`` deadline instead (:class:`QueryPool` does).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_reply_bytes = max_reply_bytes
        # SO_PEERCRED of the last command's connection: the pid without a connection of
        # its own (see peer_pid()). None until a command connected, or when unreadable.
        self.last_peer: tuple[int | None] | None = None

    def __repr__(self) -> str:
        return f"AdminSocket({self.path!r})"

    # ------------------------------------------------------------------ public API

    def command(self, prefix: str, *, deadline: float | None = None, **args: object) -> Any:
        """Run an allowlisted command and parse the reply.

        JSON commands return the parsed value (None for an empty reply, which some
        commands give when there is nothing to report); text commands return a str.
        """
        payload = self.raw(prefix, deadline=deadline, **args)
        if ALLOWED_COMMANDS[prefix].text:
            try:
                return payload.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AsokDecodeError(self.path, prefix, f"not UTF-8 (byte {exc.start})") from None
        if not payload.strip():
            return None
        return parse_json(payload, self.path, prefix)

    def raw(self, prefix: str, *, deadline: float | None = None, **args: object) -> bytes:
        """Run an allowlisted command; the reply payload as bytes (``ERROR:`` raises)."""
        request = encode_request(prefix, args, self.path)
        payload = self._exchange(prefix, request, self._deadline(deadline))
        if payload.startswith(b"ERROR:"):
            text = payload.decode("utf-8", "replace").strip().replace("\n", " | ")
            raise AsokCommandError(self.path, prefix, text[:300])
        return payload

    def peer_pid(self, *, deadline: float | None = None) -> int | None:
        """The pid of the process that listens on the socket (SO_PEERCRED), or None.

        The kernel answers, not the daemon, so this works on a stopped daemon too (until
        its listen backlog is full). None when the daemon's pid is not visible in our pid
        namespace (the kernel reports 0). No request is sent: the daemon accepts the
        empty connection later and closes it.
        """
        end = self._deadline(deadline)
        with self._locked("peer_pid", end):
            sock = self._connect("peer_pid", end)
            try:
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            except OSError as exc:
                raise AsokConnectError(self.path, "peer_pid", f"SO_PEERCRED: {exc}") from None
            finally:
                sock.close()
        pid, _uid, _gid = _UCRED.unpack(creds)
        return pid if pid > 0 else None

    def seen_peer_pid(self, *, deadline: float | None = None) -> int | None:
        """:meth:`peer_pid`, taken from the last command's connection when there was one
        (one connection fewer per scrape), else asked on a connection of its own."""
        if self.last_peer is not None:
            return self.last_peer[0]
        return self.peer_pid(deadline=deadline)

    # ------------------------------------------------------------------ internals

    def _deadline(self, deadline: float | None) -> float:
        return time.monotonic() + self.timeout if deadline is None else deadline

    @contextlib.contextmanager
    def _locked(self, prefix: str, deadline: float) -> Iterator[None]:
        lock = _lock_for(self.path)
        if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise AsokTimeout(
                self.path, prefix, "an earlier request to this socket is still running"
            )
        try:
            yield
        finally:
            lock.release()

    def _exchange(self, prefix: str, request: bytes, deadline: float) -> bytes:
        start = time.monotonic()
        with self._locked(prefix, deadline):
            sock = self._connect(prefix, deadline)
            try:
                try:
                    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
                except OSError:
                    self.last_peer = None
                else:
                    pid = _UCRED.unpack(creds)[0]
                    self.last_peer = (pid if pid > 0 else None,)
                self._send(sock, prefix, request, deadline)
                header = self._recv_exact(
                    sock, prefix, _LENGTH.size, deadline, "reply length", start
                )
                (length,) = _LENGTH.unpack(header)
                if length > self.max_reply_bytes:
                    raise AsokReplyTooLarge(
                        self.path,
                        prefix,
                        f"daemon announced {length} bytes, the cap is {self.max_reply_bytes}",
                    )
                return bytes(self._recv_exact(sock, prefix, length, deadline, "reply", start))
            finally:
                sock.close()

    def _connect(self, prefix: str, deadline: float) -> socket.socket:
        end = min(deadline, time.monotonic() + self.connect_timeout)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        while True:
            try:
                sock.connect(self.path)
                return sock
            except BlockingIOError:
                # EAGAIN on a non-blocking AF_UNIX connect: the listen backlog is full,
                # i.e. the daemon has not accepted for a while (stopped or stuck).
                if time.monotonic() + _CONNECT_RETRY_S > end:
                    sock.close()
                    raise AsokTimeout(
                        self.path,
                        prefix,
                        "connect: backlog full, the daemon is not accepting connections",
                    ) from None
                time.sleep(_CONNECT_RETRY_S)
            except OSError as exc:
                sock.close()
                raise AsokConnectError(self.path, prefix, _connect_reason(exc)) from None

    def _send(self, sock: socket.socket, prefix: str, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AsokTimeout(self.path, prefix, "deadline passed while sending the request")
            sock.settimeout(remaining)
            try:
                sent = sock.send(view)
            except TimeoutError:
                continue
            except OSError as exc:
                raise AsokConnectError(self.path, prefix, f"send: {exc.strerror or exc}") from None
            view = view[sent:]

    def _recv_exact(
        self,
        sock: socket.socket,
        prefix: str,
        size: int,
        deadline: float,
        what: str,
        start: float,
    ) -> bytearray:
        """Read exactly ``size`` bytes before ``deadline`` (a total, not per read: a peer
        dripping one byte a second still ends at the deadline)."""
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AsokTimeout(
                    self.path,
                    prefix,
                    f"no complete {what} after {time.monotonic() - start:.3g} s "
                    f"({got} of {size} bytes)",
                )
            sock.settimeout(remaining)
            try:
                n = sock.recv_into(view[got:], size - got)
            except TimeoutError:
                continue
            except OSError as exc:
                raise AsokTruncated(
                    self.path, prefix, f"{what}: {exc.strerror or exc} after {got} of {size} bytes"
                ) from None
            if n == 0:
                raise AsokTruncated(
                    self.path, prefix, f"connection closed after {got} of {size} {what} bytes"
                )
            got += n
        return buf


def _connect_reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "connect: no such socket (the daemon is gone or the path is wrong)"
    if isinstance(exc, ConnectionRefusedError):
        return "connect: refused (a stale socket file: no daemon listens on it)"
    if isinstance(exc, PermissionError):
        return (
            "connect: permission denied (connecting needs write permission on the socket: "
            "run in group ceph with admin_socket_mode 0770 or 0775, docs/ceph.md)"
        )
    return f"connect: {exc.strerror or exc}"


# ----------------------------------------------------------------------------- parallel

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
