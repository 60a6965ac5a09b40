"""ceph/asokloop.py: many admin-socket rounds in one thread, against hostile peers.

The same peers as tests/test_asok.py (a daemon that hangs, never accepts, drips, lies
about the length, closes early, answers ERROR), each driven by a round through both
drivers: run_rounds (non-blocking, one poll) and run_blocking below (the blocking client). Both
must give the same errors and messages, and run_rounds must end every round by one
deadline without a thread of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cephnode_exporter.ceph import asok
from cephnode_exporter.ceph.asok import (
    AdminSocket,
    AsokCommandError,
    AsokConnectError,
    AsokError,
    AsokRefused,
    AsokReplyTooLarge,
    AsokTimeout,
    AsokTruncated,
)
from cephnode_exporter.ceph.asokloop import PEER, Ask, Round, run_rounds

from tests.test_asok import SLACK, FakeServer, answer, hang, reply, timed

TIMEOUT = 0.5
DRIVERS = ["loop", "blocking"]
T = TypeVar("T")


@pytest.fixture
def peer() -> Iterator[Callable[..., FakeServer]]:
    """Starts fake daemons (tests/test_asok.py's FakeServer) under a short /tmp path
    (sun_path holds 108 bytes); closes them after the test."""
    where = Path(tempfile.mkdtemp(prefix="asokloop-", dir="/tmp"))
    servers: list[FakeServer] = []

    def start(handler: Any, **kwargs: Any) -> FakeServer:
        servers.append(FakeServer(where / f"s{len(servers)}.asok", handler, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
    shutil.rmtree(where, ignore_errors=True)


def run_blocking(sock: Any, steps: Round[T], deadline: float) -> T:
    """A round on one socket with the blocking client (:meth:`AdminSocket.raw`, or
    :meth:`AdminSocket.peer_pid` for PEER), each error thrown in at its yield as the
    loop does: the reference the loop is held to, and the driver of rounds against a
    scripted socket (tests/test_osd.py)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            ask = steps.throw(error) if error is not None else steps.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            if ask.prefix:
                reply = sock.raw(ask.prefix, deadline=deadline, **ask.args)
            else:
                reply = sock.peer_pid(deadline=deadline)
        except AsokError as exc:
            error = exc


def one(prefix: str, **args: object) -> Round[Any]:
    """A round of one request; returns its payload."""
    payload = yield Ask(prefix, args)
    return payload


def drive(driver: str, sock: AdminSocket, steps: Round[Any], timeout: float = TIMEOUT) -> Any:
    """The round's value, or raises its error; through either driver."""
    if driver == "blocking":
        sock.timeout = timeout
        return run_blocking(sock, steps, time.monotonic() + timeout)
    result = run_rounds({"x": (sock, steps)}, timeout)["x"]
    if result.error is not None:
        raise result.error
    return result.value


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_round_of_several_requests_in_order(peer: Callable[..., FakeServer], driver: str) -> None:
    """Each request on a connection of its own, in the round's order, the protocol
    exact; the peer pid from the last connection, or asked alone (PEER)."""
    server = peer(answer(b'{"ok":1}'))
    sock = AdminSocket(server.path)

    def steps() -> Round[list[Any]]:
        got = [(yield Ask("perf histogram dump", {"logger": "osd"}))]
        got.append(sock.last_peer)
        got.append((yield Ask("version")))
        got.append((yield PEER))
        return got

    got = drive(driver, sock, steps())
    assert got == [b'{"ok":1}', (os.getpid(),), b'{"ok":1}', os.getpid()]
    # PEER's connection sends nothing: the fake daemon, which may not have accepted it
    # yet, then records an empty request.
    assert [r for r in server.requests if r] == [
        b'{"prefix":"perf histogram dump","logger":"osd","format":"json"}\0',
        b'{"prefix":"version","format":"json"}\0',
    ]
    assert set(server.requests[2:]) <= {b""}


@pytest.mark.parametrize("driver", DRIVERS)
def test_hang_after_accept_ends_at_the_deadline(
    peer: Callable[..., FakeServer], driver: str
) -> None:
    sock = AdminSocket(peer(hang).path)
    err, took = timed(lambda: drive(driver, sock, one("perf dump")))
    assert isinstance(err, AsokTimeout), err
    assert "no complete reply length" in str(err) and "0 of 4 bytes" in str(err)
    assert took < TIMEOUT + SLACK


@pytest.mark.parametrize("driver", DRIVERS)
def test_never_accepting_like_a_stopped_osd(peer: Callable[..., FakeServer], driver: str) -> None:
    """The backlog fills, then connect itself would wait: a timeout too, by the deadline."""
    server = peer(None, backlog=1)
    sock = AdminSocket(server.path, connect_timeout=0.2)
    messages = []
    for _ in range(4):
        err, took = timed(lambda: drive(driver, sock, one("perf dump")))
        assert isinstance(err, AsokTimeout), err
        assert took < TIMEOUT + SLACK
        messages.append(str(err))
    assert "no complete reply length" in messages[0]
    assert "backlog full" in messages[-1]


@pytest.mark.parametrize("driver", DRIVERS)
def test_closed_early_and_truncated(peer: Callable[..., FakeServer], driver: str) -> None:
    def half_length(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(b"\x00\x00")

    def short(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(struct.pack(">I", 100) + b'{"osd": {')

    with pytest.raises(AsokTruncated, match="closed after 2 of 4 reply length bytes"):
        drive(driver, AdminSocket(peer(half_length).path), one("version"))
    with pytest.raises(AsokTruncated, match="closed after 9 of 100 reply bytes"):
        drive(driver, AdminSocket(peer(short).path), one("perf dump"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_4gib_length_fails_at_once_without_allocating(
    peer: Callable[..., FakeServer], driver: str
) -> None:
    def liar(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(struct.pack(">I", 0xFFFFFFFF))
        stop.wait(30)

    sock = AdminSocket(peer(liar).path)
    tracemalloc.start()
    try:
        err, took = timed(lambda: drive(driver, sock, one("perf dump"), timeout=5.0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(err, AsokReplyTooLarge), err
    assert "announced 4294967295 bytes, the cap is 16777216" in str(err)
    assert took < SLACK and peak < 1024 * 1024
    # The command's own cap (version: 64 KiB) before the client's.
    big = peer(answer(b"x" * (65 * 1024)))
    with pytest.raises(AsokReplyTooLarge, match="the cap for this command is 65536"):
        drive(driver, AdminSocket(big.path), one("version"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_error_replies_and_too_many_items(peer: Callable[..., FakeServer], driver: str) -> None:
    error = b"ERROR: (22) Invalid argument\n"
    with pytest.raises(AsokCommandError, match=r"ERROR: \(22\) Invalid argument"):
        drive(driver, AdminSocket(peer(answer(error)).path), one("version"))
    items = b"[" + b"1," * 20_000 + b"1]"  # 40 KB, under version's 64 KiB, 20,001 items
    with pytest.raises(AsokReplyTooLarge, match="JSON items"):
        drive(driver, AdminSocket(peer(answer(items)).path), one("version"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_drip_one_byte_per_second_ends_at_the_deadline(
    peer: Callable[..., FakeServer], driver: str
) -> None:
    def drip(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        for byte in reply(b'{"osd": {}}'):
            conn.sendall(bytes([byte]))
            if stop.wait(1.0):
                return

    sock = AdminSocket(peer(drip).path)
    err, took = timed(lambda: drive(driver, sock, one("perf dump"), timeout=2.5))
    assert isinstance(err, AsokTimeout), err
    assert "of 4 bytes" in str(err)
    assert 2.3 <= took < 2.5 + SLACK


@pytest.mark.parametrize("driver", DRIVERS)
def test_refused_and_missing_sockets(
    peer: Callable[..., FakeServer], driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = peer(answer(b"{}"))
    short_dir = Path(server.path).parent
    real_socket = socket.socket

    def counting(*args: Any, **kwargs: Any) -> socket.socket:
        raise AssertionError("a socket was created for a refused command")

    monkeypatch.setattr(socket, "socket", counting)
    for prefix, args in [("config set", {"var": "debug_osd"}), ("perf dump", {"format": "x"})]:
        with pytest.raises(AsokRefused):
            drive(driver, AdminSocket(server.path), one(prefix, **args))
    monkeypatch.setattr(socket, "socket", real_socket)
    assert server.accepted == 0
    with pytest.raises(AsokConnectError, match="no such socket"):
        drive(driver, AdminSocket(short_dir / "gone.asok"), one("version"))
    stale = short_dir / "stale.asok"
    s = real_socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    with pytest.raises(asok.AsokStale, match="refused"):
        drive(driver, AdminSocket(stale), one("version"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_round_that_catches_an_error_goes_on(
    peer: Callable[..., FakeServer], driver: str
) -> None:
    """An error is thrown into the round at its yield: the round may catch it and ask
    again, as the OSD round does for the peer pid."""
    sock = AdminSocket(peer(answer(b"ERROR: (2) No such file\n")).path)

    def steps() -> Round[list[tuple[str, str]]]:
        seen = []
        for ask in (Ask("config get", {"var": "nosuch"}), Ask("version")):
            try:
                yield ask
            except AsokError as exc:
                seen.append((ask.prefix, exc.reason))
        return seen

    assert drive(driver, sock, steps()) == [("config get", "command"), ("version", "command")]


def test_ten_rounds_one_hung_end_by_one_deadline_in_this_thread(
    peer: Callable[..., FakeServer],
) -> None:
    """Ten sockets, one hangs: every other round's value is back, the hung one's is the
    client's timeout, all within the timeout, and no thread was started."""
    me = threading.get_ident()
    threads: set[int] = set()

    def watched(sock: AdminSocket) -> Round[bytes]:
        threads.add(threading.get_ident())
        payload = yield Ask("version")
        threads.add(threading.get_ident())
        return payload  # type: ignore[no-any-return]

    rounds = {}
    for i in range(10):
        handler = hang if i == 3 else answer(json.dumps({"id": i}).encode())
        sock = AdminSocket(peer(handler).path)
        rounds[f"osd.{i}"] = (sock, watched(sock))
    start = time.monotonic()
    results = run_rounds(rounds, timeout=1.0)
    took = time.monotonic() - start
    assert threads == {me}  # every round ran in the calling thread
    assert not [t for t in threading.enumerate() if t.name.startswith("asok")]
    assert took < 1.0 + 0.15
    for i in range(10):
        r = results[f"osd.{i}"]
        if i == 3:
            assert isinstance(r.error, AsokTimeout) and "no complete reply length" in str(r.error)
            assert 0.9 <= r.seconds < 1.0 + 0.15
        else:
            assert r.ok and json.loads(r.value) == {"id": i}, r
            assert r.seconds < 0.5


def test_a_socket_busy_with_another_threads_request_waits_for_it(
    peer: Callable[..., FakeServer],
) -> None:
    """The per-socket lock of the blocking client holds here too: while another thread's
    request to the socket hangs, the round waits for it, then reports it by the deadline;
    a free socket is served meanwhile."""
    hung = peer(hang)
    free = AdminSocket(peer(answer(b"{}")).path)
    other = threading.Thread(
        target=lambda: timed(lambda: AdminSocket(hung.path, timeout=1.0).raw("version"))
    )
    other.start()
    time.sleep(0.1)
    try:
        start = time.monotonic()
        results = run_rounds(
            {"hung": (AdminSocket(hung.path), one("version")), "free": (free, one("version"))},
            timeout=0.4,
        )
        assert time.monotonic() - start < 0.4 + SLACK
    finally:
        other.join()
    assert isinstance(results["hung"].error, AsokTimeout)
    assert "an earlier request to this socket is still running" in str(results["hung"].error)
    assert results["free"].value == b"{}"
    assert hung.accepted == 1  # only the other thread's request reached the daemon


def test_a_bug_in_a_round_is_that_rounds_result(peer: Callable[..., FakeServer]) -> None:
    def broken() -> Round[None]:
        yield Ask("version")
        raise ValueError("a bug in a round")

    ok = AdminSocket(peer(answer(b"{}")).path)
    results = run_rounds({"a": (ok, broken()), "b": (ok, one("version"))}, timeout=1.0)
    assert isinstance(results["a"].error, ValueError)
    assert results["b"].value == b"{}"


def test_a_round_that_keeps_asking_after_the_deadline_is_closed(
    peer: Callable[..., FakeServer],
) -> None:
    closed = []

    def stubborn() -> Round[None]:
        try:
            while True:
                with contextlib.suppress(AsokTimeout):
                    yield Ask("version")
        finally:
            closed.append(True)

    start = time.monotonic()
    results = run_rounds({"a": (AdminSocket(peer(hang).path), stubborn())}, timeout=0.3)
    assert time.monotonic() - start < 0.3 + SLACK
    assert isinstance(results["a"].error, AsokTimeout) and closed == [True]


def test_no_descriptor_left_fails_only_that_round(
    peer: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """socket() failing (EMFILE: the descriptor limit reached) is the error of the round
    that asked, not of the others, and the lock it took is free again."""
    import errno as errno_mod

    from cephnode_exporter.ceph import asokloop

    real = socket.socket
    calls = []

    def first_fails(*args: Any, **kwargs: Any) -> socket.socket:
        calls.append(args)
        if len(calls) == 1:
            raise OSError(errno_mod.EMFILE, os.strerror(errno_mod.EMFILE))
        return real(*args, **kwargs)

    a = AdminSocket(peer(answer(b"{}")).path)
    b = AdminSocket(peer(answer(b"{}")).path)
    monkeypatch.setattr(asokloop.socket, "socket", first_fails)
    results = run_rounds({"a": (a, one("version")), "b": (b, one("version"))}, timeout=1.0)
    assert isinstance(results["a"].error, AsokConnectError)
    assert "socket: Too many open files" in str(results["a"].error)
    assert results["b"].value == b"{}"
    monkeypatch.setattr(asokloop.socket, "socket", real)
    assert run_rounds({"a": (a, one("version"))}, timeout=1.0)["a"].value == b"{}"


def test_only_a_rounds_first_result_counts() -> None:
    """A second result for a round (an event for a round already over, or an error
    thrown into its closed generator) neither replaces the first nor counts again: the
    loop ends when every round has one, not before or never."""
    from cephnode_exporter.ceph.asokloop import _Exchange, _Loop

    def done() -> Round[int]:
        return 7
        yield Ask("version")  # a generator that ends at once

    loop = _Loop(time.monotonic() + 5)
    exchanges = [_Exchange(k, asok.AdminSocket(f"/nonexistent/{k}"), done(), 0.0) for k in "ab"]
    loop.running = 2
    loop.finish(exchanges[0], value=1)
    loop.finish(exchanges[0], error=RuntimeError("late"))
    assert loop.running == 1
    assert exchanges[0].result is not None and exchanges[0].result.value == 1
    assert exchanges[0].result.error is None
    loop.selector.close()


def test_the_runs_replies_together_are_bounded(peer: Callable[..., FakeServer]) -> None:
    """Each command's cap bounds one reply; ``max_bytes`` bounds what every round of a
    run receives together (the rounds hold their replies until parsed): three OSDs
    answering 300 KB each against 700 KB leave the third refused at its announced
    length, reason too_large, while the first two and a small reply after them pass."""
    big = json.dumps({"x": "y" * 300_000}).encode()
    rounds = {}
    for i in range(3):
        sock = AdminSocket(peer(answer(big)).path)
        rounds[i] = (sock, one("perf dump"))
    results = run_rounds(rounds, timeout=2.0, max_bytes=700_000)
    refused = [r for r in results.values() if not r.ok]
    assert len(refused) == 1 and sum(r.ok for r in results.values()) == 2
    (error,) = [r.error for r in refused]
    assert isinstance(error, AsokReplyTooLarge) and error.reason == "too_large"
    assert "past what this scrape's replies may hold together" in str(error)
    small = AdminSocket(peer(answer(b"{}")).path)
    assert run_rounds({"s": (small, one("version"))}, 2.0, max_bytes=700_000)["s"].ok
