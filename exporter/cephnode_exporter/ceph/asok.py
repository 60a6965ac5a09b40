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
exchange therefore has a total deadline, the announced length is checked against the
command's own cap before anything is read, a reply's JSON items are counted before it is
parsed (parsed JSON takes 10 to 100 times its size in memory), and JSON errors (including
excessive nesting) surface as :class:`AsokDecodeError`. And because the admin socket also
takes commands that change a running OSD (``config set``, ``compact``, ``bench``,
``injectargs``, ...), the client refuses everything but an allowlist of read-only
commands before it opens a socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# Seconds for one whole exchange (connect, send, reply). perf histogram dump, the slowest
# command we send, takes 2-4 ms on a healthy OSD (docs/ceph.md); 5 s is the margin for a
# busy one, and also the SO_RCVTIMEO Ceph's own client uses (admin_socket_client.cc).
DEFAULT_TIMEOUT = 5.0
# Connecting to a live daemon is immediate; it only waits when the backlog is full.
DEFAULT_CONNECT_TIMEOUT = 1.0
# Largest reply accepted from any command, whatever its own cap (Allowed.max_bytes) says:
# the ceiling of a caller's max_reply_bytes.
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
KIB = 1024
MIB = 1024 * KIB
# char cmd[1024] in AdminSocket::do_accept, terminator included.
MAX_REQUEST_BYTES = 1023
# The reply length prefix: a big-endian uint32 (htonl in do_accept).
_LENGTH = struct.Struct(">I")
# struct ucred {pid_t pid; uid_t uid; gid_t gid;} from <sys/socket.h>, for SO_PEERCRED.
_UCRED = struct.Struct("iII")
_CONNECT_RETRY_S = 0.01


@dataclass(frozen=True)
class Allowed:
    """An allowlisted command: the arguments it may carry, whether it answers text, and
    the largest reply accepted from it: ``max_bytes`` announced, ``max_items`` JSON items.

    Why per command: bytes alone do not bound memory. ``json.loads`` of a 12 MB object of
    a million small keys takes about 200 MB, and an OSD's round holds five
    replies at once; the real replies are tens of KB (docs/limits.md has the sizes
    measured on the Pacific test cluster and the margins). ``max_items`` bounds the
    values a parse creates (see :func:`json_items`), each 60 to 150 bytes in memory
    beside the text it holds: 16,000 items are at most about 2 MB.
    """

    args: frozenset[str] = frozenset()
    text: bool = False
    max_bytes: int = 64 * KIB
    max_items: int = 16_000


# Read-only commands. Each exists on a Pacific 16.2.15 OSD with exactly these arguments
# (compared with its `get_command_descriptions` in tests/test_cephcluster.py), and on
# Reef 18.2.7 and Tentacle 20.2.4 OSDs (their recorded command tables,
# tests/test_allowlist.py, which also holds the review of each as read-only); none
# changes state. Anything else is
# refused, notably an `output-file` argument, which newer releases honour for every
# command (admin_socket.cc, execute_command) and which makes the daemon write a file.
# `perf reset`, `config set/unset`, `injectargs`, `compact`, `bench`, `cache drop`,
# `flush_*`, `heap`, `bluefs debug_inject_read_zeros`, ... are deliberately absent.
#
# Reply caps: the largest reply measured on the Pacific 16.2.15 test cluster's OSDs
# (memstore and BlueStore, idle, after a bench, and with a replica stopped under a
# 128-thread write load; docs/limits.md has the table) times a margin of 11 to 28, for the
# counters and options newer releases add; replies of a few hundred bytes get the 64 KiB
# and 16,000-item floor, which costs nothing. Ops in flight take 1.4 KB and 55 items each
# (121 KB for 86 ops): that cap holds about 2,900 ops, eleven times the client ops an OSD
# admits at once (osd_client_message_cap, 256 in Pacific).
ALLOWED_COMMANDS: Mapping[str, Allowed] = MappingProxyType(
    {
        # common/ceph_context.cc: "perf dump name=logger,... name=counter,..."
        # Measured: 18.6 KB, 935 items. More room: it grows with the messenger threads
        # and op shards (a section each; Reef adds one per mclock shard queue). Items: a
        # quarter of the bytes, like the floor.
        "perf dump": Allowed(
            frozenset({"logger", "counter"}), max_bytes=512 * KIB, max_items=128_000
        ),
        # 90 KB, 4,545 items.
        "perf schema": Allowed(max_bytes=1 * MIB, max_items=64_000),
        # 18.5 KB, 5,095 items (all loggers; the collector asks for logger osd: 17.7 KB).
        "perf histogram dump": Allowed(
            frozenset({"logger", "counter"}), max_bytes=256 * KIB, max_items=64_000
        ),
        # 1.7 KB.
        "perf histogram schema": Allowed(),
        # osd/OSD.cc: "dump_ops_in_flight name=filterstr,type=CephString,n=N,req=false"
        # 121 KB, 4,732 items with 86 ops in flight (above).
        "dump_ops_in_flight": Allowed(
            frozenset({"filterstr"}), max_bytes=4 * MIB, max_items=160_000
        ),
        # At most osd_op_history_slow_op_size (20) ops: 34 KB, 1,343 items.
        "dump_historic_slow_ops": Allowed(
            frozenset({"filterstr"}), max_bytes=512 * KIB, max_items=24_000
        ),
        # common/ceph_context.cc: "config show", "config get name=var,type=CephString"
        # 64.7 KB, 1,842 items.
        "config show": Allowed(max_bytes=1 * MIB, max_items=32_000),
        "config get": Allowed(frozenset({"var"})),
        "status": Allowed(),
        "version": Allowed(),
        # Empty unless rocksdb_perf and a rocksdb_collect_* option are true; then several
        # JSON objects back to back with repeated keys: read it with raw() (ceph/kvstats.py).
        # 16.7 KB, 319 items on Pacific; 57 KB on Tentacle (every column family).
        "dump_objectstore_kv_stats": Allowed(max_bytes=1 * MIB, max_items=16_000),
        # os/bluestore/BlueFS.cc SocketHook: plain text, BlueStore OSDs only. 102 bytes.
        "bluefs stats": Allowed(text=True),
        # osd/OSD.cc: "dump_osd_network name=value,type=CephInt,req=false" (threshold in
        # ms; 0 lists every heartbeat peer). 1.6 KB, 116 items with 3 peers: 270 bytes and
        # 20 items per peer and network, so 8,192 entries (ceph/network.py MAX_ENTRIES,
        # 4,096 peers on both networks) are 2.2 MB and 160,000 items.
        "dump_osd_network": Allowed(frozenset({"value"}), max_bytes=4 * MIB, max_items=200_000),
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


class AsokStale(AsokConnectError):
    """ECONNREFUSED: a socket file nobody listens on (its daemon died or moved)."""


class AsokTimeout(AsokError):
    """The deadline passed (the daemon is stopped, hung or too slow)."""

    reason = "timeout"


class AsokTruncated(AsokError):
    """The daemon closed the connection before the announced reply was complete."""

    reason = "truncated"


class AsokReplyTooLarge(AsokError):
    """The announced reply length is above the cap (nothing of it was read), or the
    reply holds more JSON items than its command's cap (it was not parsed)."""

    reason = "too_large"


class AsokDecodeError(AsokError):
    """The reply is not valid UTF-8 or JSON, or is nested too deeply to parse."""

    reason = "decode"


class AsokCommandError(AsokError):
    """The daemon answered ``ERROR: ...`` (unknown command, bad argument, ...)."""

    reason = "command"


class AsokIdentityError(AsokError):
    """The daemon behind the socket is not the one the socket's name says: its own name
    (``config show``'s ``name``, Ceph's option of that name) is another's, as when the
    socket is a link to another OSD's or its file is bound by another daemon. Raised by
    the ``osd`` collector (collectors/osd_query.py), which checks every scrape."""

    reason = "identity"


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


def json_items(payload: bytes) -> int:
    """Commas plus opening brackets of a JSON text: what bounds the memory its parse takes.

    Every array element and object member follows a comma or is the first of a
    non-empty container, so a text holds at most this many values plus one (the root).
    Commas alone would not do: ``[[[[1]]]]`` chains cost a list per two bytes. These
    characters inside strings count too, which only errs on the safe side. ``bytes.count``
    scans at memory speed: about a millisecond for a 4 MiB reply.
    """
    return payload.count(b",") + payload.count(b"[") + payload.count(b"{")


def check_items(payload: bytes, path: str, prefix: str) -> None:
    """Raise :class:`AsokReplyTooLarge` when a JSON reply has more items than its
    command's cap, before anything parses it."""
    spec = ALLOWED_COMMANDS.get(prefix)
    # Each item counted is one byte of the reply: one no longer than the cap is within it
    # without counting (the replies asked every scrape: 10-20 KB against caps of 64,000 to
    # 160,000 items).
    if spec is None or spec.text or len(payload) <= spec.max_items:
        return
    items = json_items(payload)
    if items > spec.max_items:
        raise AsokReplyTooLarge(
            path,
            prefix,
            f"reply of {len(payload)} bytes holds {items} JSON items, the cap for this "
            f"command is {spec.max_items} (docs/limits.md); not parsed",
        )


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


def decode_reply(payload: bytes, path: str = "", prefix: str = "") -> Any:
    """A JSON command's reply as :meth:`AdminSocket.command` returns it: None when empty
    (some commands answer nothing when there is nothing to report), else the parsed
    JSON. For a caller that takes the payload raw (:meth:`AdminSocket.raw`, a round of
    ceph/asokloop.py) and decodes it later (collectors/osd_query.py)."""
    if not payload.strip():
        return None
    return parse_json(payload, path, prefix)


# ----------------------------------------------------------------------------- client

# Weak: a path's lock lives while an exchange holds or waits for it (a stuck one
# included), so a socket directory whose names churn does not grow the table.
_locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
_locks_guard = threading.Lock()


def _lock_for(path: str) -> threading.Lock:
    """One lock per socket path: the daemon serves one connection at a time anyway, and a
    second request queued behind a stuck one would only wait for the same deadline."""
    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = threading.Lock()
        return lock


class AdminSocket:
    """One daemon's admin socket. Cheap to create; each command is one connection.

    ``timeout`` bounds a whole exchange (connect, send, read the reply) and
    ``connect_timeout`` the connect alone; a call may pass an absolute
    ``time.monotonic()`` deadline instead; ceph/asokloop.py runs many sockets' exchanges
    at once in one thread.
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
        return self.parse(prefix, self.raw(prefix, deadline=deadline, **args))

    def parse(self, prefix: str, payload: bytes) -> Any:
        """A reply payload of ``prefix`` as :meth:`command` returns it."""
        if ALLOWED_COMMANDS[prefix].text:
            try:
                return payload.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AsokDecodeError(self.path, prefix, f"not UTF-8 (byte {exc.start})") from None
        return decode_reply(payload, self.path, prefix)

    def raw(self, prefix: str, *, deadline: float | None = None, **args: object) -> bytes:
        """Run an allowlisted command; the reply payload as bytes (``ERROR:`` raises)."""
        request = encode_request(prefix, args, self.path)
        return self.checked(prefix, self._exchange(prefix, request, self._deadline(deadline)))

    def checked(self, prefix: str, payload: bytes) -> bytes:
        """A complete reply payload of ``prefix``, or the error it is: ``ERROR:`` from
        the daemon, or more JSON items than the command's cap."""
        if payload.startswith(b"ERROR:"):
            text = payload.decode("utf-8", "replace").strip().replace("\n", " | ")
            raise AsokCommandError(self.path, prefix, text[:300])
        check_items(payload, self.path, prefix)
        return payload

    def check_length(self, prefix: str, length: int) -> None:
        """Raise :class:`AsokReplyTooLarge` when the announced reply length is above
        this client's cap or the command's own, before anything of it is read."""
        if length > self.max_reply_bytes:
            raise AsokReplyTooLarge(
                self.path,
                prefix,
                f"daemon announced {length} bytes, the cap is {self.max_reply_bytes}",
            )
        cap = ALLOWED_COMMANDS[prefix].max_bytes if prefix in ALLOWED_COMMANDS else 0
        if cap and length > cap:
            raise AsokReplyTooLarge(
                self.path,
                prefix,
                f"daemon announced {length} bytes, the cap for this command is {cap} "
                "(docs/limits.md); nothing read",
            )

    def note_peer(self, conn: socket.socket, *, strict: bool = False) -> int | None:
        """The connected peer's pid (SO_PEERCRED), kept in ``last_peer``; None when it is
        not in our pid namespace (the kernel reports 0) or, unless ``strict`` (then
        :class:`AsokConnectError`), when the option cannot be read."""
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        except OSError as exc:
            self.last_peer = None
            if strict:
                raise AsokConnectError(self.path, "peer_pid", f"SO_PEERCRED: {exc}") from None
            return None
        pid = _UCRED.unpack(creds)[0]
        self.last_peer = (pid if pid > 0 else None,)
        return self.last_peer[0]

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
                return self.note_peer(sock, strict=True)
            finally:
                sock.close()

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
                self.note_peer(sock)
                self._send(sock, prefix, request, deadline)
                header = self._recv_exact(
                    sock, prefix, _LENGTH.size, deadline, "reply length", start
                )
                (length,) = _LENGTH.unpack(header)
                self.check_length(prefix, length)
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
                kind = AsokStale if isinstance(exc, ConnectionRefusedError) else AsokConnectError
                raise kind(self.path, prefix, _connect_reason(exc)) from None

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
