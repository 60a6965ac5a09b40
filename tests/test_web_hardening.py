"""Faults a hostile or broken peer, or a broken log sink, can cause; each against the real
server (the web package in-process over real sockets, or the daemon as a subprocess for signals and
logging)."""

from __future__ import annotations

import http.client
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import bcrypt
import pytest
from cephnode_exporter.web import HANDSHAKE_TIMEOUT, HEADER_TIMEOUT, IDLE_GRACE, make_server
from cephnode_exporter.webconfig import MAX_BCRYPT_COST, WebConfigError, load_web_config

from tests import test_web
from tests.conftest import Tree, run_cli
from tests.test_web import (
    PASSWORD,
    TLS_CONFIG,
    Render,
    basic,
    client_context,
    request,
    serve,
    wait_for,
    write_config,
)

certs = test_web.certs  # the TLS test certificates fixture, shared with tests/test_web.py

LISTENING = re.compile(r"msg=listening address=\S+:(\d+)")
LOOPBACK = ("--web.listen-address=127.0.0.1:0",)


def idle_peers(address: tuple[str, int], n: int, first_bytes: bytes = b"") -> list[socket.socket]:
    socks = []
    for _ in range(n):
        sock = socket.create_connection(address, timeout=10)
        if first_bytes:
            sock.sendall(first_bytes)
        socks.append(sock)
    return socks


def get_from(
    address: tuple[str, int], source: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], float]:
    """One GET /metrics from the given loopback source address: status, headers, seconds."""
    conn = http.client.HTTPConnection(*address, timeout=10, source_address=(source, 0))
    start = time.monotonic()
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status, dict(resp.headers), time.monotonic() - start
    finally:
        conn.close()


def closed_after(sock: socket.socket, start: float, trickle: bytes = b"") -> float:
    """Seconds from ``start`` until the server closes ``sock``; sends ``trickle`` a byte at a
    time, one every 0.5 s, meanwhile (slowloris)."""
    sock.settimeout(None)
    for byte in trickle or b"\0" * 1000:
        readable, _, _ = select.select([sock], [], [], 0.5)
        if readable:
            try:
                if sock.recv(1) == b"":
                    return time.monotonic() - start
            except OSError:
                return time.monotonic() - start
        elif trickle:
            try:
                sock.send(bytes([byte]))
            except OSError:
                return time.monotonic() - start
        if time.monotonic() - start > 12:
            break
    return time.monotonic() - start


# --- 1. idle and slow peers ----------------------------------------------------------------


def test_idle_peers_holding_every_slot_do_not_keep_a_scraper_out() -> None:
    with serve(max_connections=8) as server:
        # 8 silent peers take every slot, 3 more trickled half a head into overflow.
        held = idle_peers(server.server_address, 8)
        held += idle_peers(server.server_address, 3, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        try:
            wait_for(lambda: server.active_connections == 11)
            time.sleep(IDLE_GRACE + 0.2)
            for _ in range(3):
                start = time.monotonic()
                assert request(server)[0] == 200
                assert time.monotonic() - start < 1
            # Each request took the slot of a silent peer, or one a previous request freed.
            closed = [s for s in held[:8] if select.select([s], [], [], 0)[0]]
            assert 1 <= len(closed) <= 3
            assert all(s.recv(1) == b"" for s in closed)
        finally:
            for s in held:
                s.close()


def test_idle_flood_beyond_the_overflow_does_not_shut_a_scraper_out() -> None:
    with serve(max_connections=4) as server:
        held = idle_peers(server.server_address, 30)
        try:
            wait_for(lambda: server.active_connections == 4 + server.max_overflow)
            time.sleep(IDLE_GRACE + 0.2)
            assert request(server)[0] == 200
            # The thread count stays bounded whatever the flood.
            assert server.active_connections <= 4 + server.max_overflow
        finally:
            for s in held:
                s.close()


HEALTHY = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"


def read_answer(sock: socket.socket, end: bytes = b"Healthy.\n") -> bytes:
    """What the server sent on ``sock`` up to and including ``end``."""
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def test_kept_alive_connections_between_requests_give_their_slot_to_a_request() -> None:
    """Keep-alive clients that send a request more often than IDLE_GRACE must not pin every
    slot: one answered and waiting for its next request is closed at once for a request that
    finds no slot (RFC 9112 section 9.5; HTTP clients retry a GET on a reused connection
    closed before any response byte)."""
    with serve(max_connections=2) as server:
        kept = [socket.create_connection(server.server_address, timeout=5) for _ in range(2)]
        try:
            for _ in range(3):  # busy: a request every few ms
                for sock in kept:
                    sock.sendall(HEALTHY)
                    assert read_answer(sock).startswith(b"HTTP/1.1 200 ")
            answered = time.monotonic()
            status, _, _ = request(server)
            assert status == 200
            assert time.monotonic() - answered < IDLE_GRACE / 2  # not the grace's doing
            closed = select.select(kept, [], [], 2)[0]
            assert len(closed) == 1
            assert closed[0].recv(1) == b""  # closed without an answer
        finally:
            for sock in kept:
                sock.close()


def test_a_client_that_does_not_read_gets_no_more_scrapes_and_keeps_no_slot() -> None:
    """A client that pipelines scrapes and never reads (its receive window closed) must
    neither have more of them rendered nor hold its slot for the whole write timeout: its
    next request waits until the previous response has left the send queue, and meanwhile
    the connection is between requests, so a scraper may take its slot."""
    renders: list[float | None] = []
    body = b"x" * 8192 + b"\n"

    def render(timeout: float | None) -> bytes:
        renders.append(timeout)
        return body

    with serve(render=render, max_connections=1) as server:
        hog = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
            hog.settimeout(5)
            hog.connect(server.server_address)
            hog.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            time.sleep(1)
            assert len(renders) == 1  # then the unread response stalled the rest
            start = time.monotonic()
            status, _, answer = request(server)
            assert (status, answer) == (200, body)
            assert time.monotonic() - start < 1
            assert len(renders) == 2
        finally:
            hog.close()


def test_a_response_read_slowly_is_cut_at_the_write_timeout() -> None:
    """One response's write is bounded as a whole (WRITE_TIMEOUT, 10 s by default), not
    per send: a client reading a little now and then held its slot for the whole request
    timeout (30 s), as long as each send made progress."""
    body = b"x" * (8 << 20)
    with (
        serve(render=lambda _: body, request_timeout=30, write_timeout=1) as server,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as slow,
    ):
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.settimeout(5)
        slow.connect(server.server_address)
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        start = time.monotonic()
        received = len(slow.recv(4096))  # the response has begun: the connection counts
        # About 40 KB/s, so every send makes progress; 8 MiB would take minutes.
        while server.active_connections:
            received += len(slow.recv(4096))
            time.sleep(0.1)
            assert time.monotonic() - start < 5, "still writing"
        # Then closed, after what the kernel had queued already.
        assert 0.9 < time.monotonic() - start < 4
        assert 0 < received < len(body)


def test_stalled_tls_handshakes_do_not_keep_a_scraper_out(certs: Path) -> None:
    cfg = load_web_config(write_config(certs, TLS_CONFIG, "tls.yml"))
    with serve(cfg, max_connections=4) as server:
        held = idle_peers(server.server_address, 4 + server.max_overflow, b"\x16\x03\x01")
        try:
            wait_for(lambda: server.active_connections == 4 + server.max_overflow)
            time.sleep(IDLE_GRACE + 0.2)
            start = time.monotonic()
            assert request(server, context=client_context(certs))[0] == 200
            assert time.monotonic() - start < 1
        finally:
            for s in held:
                s.close()


def test_header_and_handshake_deadlines_are_seconds_not_the_request_timeout(
    certs: Path,
) -> None:
    assert HEADER_TIMEOUT <= 5 and HANDSHAKE_TIMEOUT <= 5
    tls = load_web_config(write_config(certs, TLS_CONFIG, "tls.yml"))
    with ExitStack() as stack:
        plain = stack.enter_context(serve())  # request timeout: the default 30 s
        secure = stack.enter_context(serve(tls))
        assert plain.request_timeout == 30
        silent = stack.enter_context(socket.create_connection(plain.server_address))
        slow = stack.enter_context(socket.create_connection(plain.server_address))
        stalled = stack.enter_context(socket.create_connection(secure.server_address))
        stalled.sendall(b"\x16\x03\x01")
        start = time.monotonic()
        with ThreadPoolExecutor(3) as pool:
            times = list(
                pool.map(
                    lambda args: closed_after(*args),
                    [
                        (silent, start, b""),
                        (slow, start, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"x" * 99),
                        (stalled, start, b""),
                    ],
                )
            )
    assert all(4 < t < 7 for t in times), times


# --- 4. HTTP/0.9 ----------------------------------------------------------------------------


def test_http09_request_is_answered_at_once() -> None:
    with serve() as server, socket.create_connection(server.server_address, timeout=3) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /metrics\r\n")  # and then nothing: no headers will ever come
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert time.monotonic() - start < 1
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert b"HTTP/0.9 requests are not supported" in answer
        wait_for(lambda: server.active_connections == 0, timeout=1)


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_empty_lines_before_a_request_line_are_skipped() -> None:
    """RFC 9112 section 2.2: a server SHOULD ignore at least one empty line before the
    request line (some clients send a CRLF after a body); http.server closed without a word."""
    with serve() as server, socket.create_connection(server.server_address, timeout=3) as sock:
        sock.sendall(b"\r\n\r\n" + HEALTHY)
        assert read_answer(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"\n" + HEALTHY)  # on a kept-alive connection too
        assert read_answer(sock).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("line", [b"   \r\n", b"\t\r\n" + HEALTHY, b"\r\n" * 50 + HEALTHY])
def test_whitespace_or_endless_empty_lines_instead_of_a_request_line_get_400(
    line: bytes,
) -> None:
    """Not a request line, so a 400 that says so rather than a silent close."""
    with serve() as server, socket.create_connection(server.server_address, timeout=3) as sock:
        sock.sendall(line)
        answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        assert b"Connection: close" in answer


def test_request_head_cut_off_by_eof_is_not_served() -> None:
    """http.client.parse_headers takes EOF for the end of the head; an incomplete message
    must not be processed (RFC 9112 section 8), so a half-closed partial head gets no scrape
    (each one would otherwise cost a full render)."""
    render = Render()
    with serve(render=render) as server:
        for head in (b"GET /metrics HTTP/1.1\r\nHost: x", b"GET /metrics HTTP/1.1\r\n"):
            with socket.create_connection(server.server_address, timeout=3) as sock:
                sock.sendall(head)
                sock.shutdown(socket.SHUT_WR)
                answer = read_all(sock)
                assert answer.startswith(b"HTTP/1.1 400 "), answer
                assert b"Incomplete request head" in answer
        assert render.timeouts == []
        # A complete head followed by EOF (nc -N, printf | nc) is still answered.
        with socket.create_connection(server.server_address, timeout=3) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock).startswith(b"HTTP/1.1 200 ")
        assert len(render.timeouts) == 1


# --- 3. basic auth --------------------------------------------------------------------------


def auth_server_config(directory: Path, users: dict[str, str], cost: int) -> str:
    lines = ["basic_auth_users:"]
    for user, password in users.items():
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode()
        lines.append(f"  {user}: '{hashed}'")
    return write_config(directory, "\n".join(lines) + "\n")


LOCKED = "too many failed logins, answering 429"


def test_wrong_password_flood_neither_delays_nor_locks_out_a_scraper(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Cost 12: about 0.2 s a check. Three scrapers, each checked for the first time while
    # 12 clients at one address send wrong passwords as fast as they are answered.
    scrapers = {f"prom{i}": f"{PASSWORD} {i}" for i in range(3)}
    cfg = load_web_config(auth_server_config(tmp_path, scrapers, cost=12))
    stop = threading.Event()
    statuses: list[int] = []

    def flood(address: tuple[str, int]) -> None:
        while not stop.is_set():
            statuses.append(get_from(address, "127.0.0.1", basic("prom0", "wrong"))[0])

    with serve(cfg) as server, ThreadPoolExecutor(12) as pool, caplog.at_level("WARNING"):
        futures = [pool.submit(flood, server.server_address) for _ in range(12)]
        try:
            time.sleep(0.3)
            for user, password in scrapers.items():
                status, _, seconds = get_from(
                    server.server_address, "127.0.0.2", basic(user, password)
                )
                assert status == 200
                assert seconds < 2, f"{user} waited {seconds:.1f} s"
            # 10 failed checks one after another, then the lock-out.
            wait_for(lambda: any(r.getMessage() == LOCKED for r in caplog.records), timeout=15)
            time.sleep(0.5)
        finally:
            stop.set()
            for f in futures:
                f.result()
        # Verified credentials are answered from memory, even from the locked-out address.
        status, _, seconds = get_from(
            server.server_address, "127.0.0.1", basic("prom1", scrapers["prom1"])
        )
        assert status == 200
        assert seconds < 0.2
    assert set(statuses) == {401, 429}
    assert statuses.count(401) == 10  # then the address was locked out
    failed = [r for r in caplog.records if r.getMessage() == "basic auth failed"]
    assert len(failed) == 1, "failed logins must be logged throttled, not once per attempt"
    assert failed[0].kv["user"] == "prom0"
    assert failed[0].kv["client"] == "127.0.0.1"
    locked = [
        r for r in caplog.records if r.getMessage() == "too many failed logins, answering 429"
    ]
    assert len(locked) == 1


def test_failed_logins_are_limited_per_address(tmp_path: Path) -> None:
    path = auth_server_config(tmp_path, {"alice": PASSWORD, "bob": PASSWORD}, cost=4)
    with serve(load_web_config(path)) as server:
        address = server.server_address
        assert get_from(address, "127.0.0.1", basic("alice", PASSWORD))[0] == 200
        for _ in range(10):
            assert get_from(address, "127.0.0.1", basic("alice", "wrong"))[0] == 401
        status, headers, _ = get_from(address, "127.0.0.1", basic("alice", "wrong"))
        assert status == 429
        assert 55 <= int(headers["Retry-After"]) <= 60
        # Unverified credentials wait, even right ones; verified ones pass.
        assert get_from(address, "127.0.0.1", basic("bob", PASSWORD))[0] == 429
        assert get_from(address, "127.0.0.1", basic("alice", PASSWORD))[0] == 200
        # Another address is not affected.
        assert get_from(address, "127.0.0.3", basic("alice", "wrong"))[0] == 401
        assert get_from(address, "127.0.0.3", basic("bob", PASSWORD))[0] == 200


def test_wrong_passwords_from_many_addresses_do_not_keep_out_cached_credentials(
    tmp_path: Path,
) -> None:
    """A request whose password needs a check while every bcrypt worker is busy gets 429 at
    once instead of waiting in its connection slot: enough waiting ones (wrong passwords
    from many addresses) would hold every slot, and a scraper whose credentials are
    verified already, needing no worker, would get 503."""
    cfg = load_web_config(auth_server_config(tmp_path, {"prom": PASSWORD}, cost=13))
    with serve(cfg, max_connections=8) as server, ThreadPoolExecutor(8) as pool:
        address = server.server_address
        assert get_from(address, "127.0.0.2", basic("prom", PASSWORD))[0] == 200  # cached
        wrong = basic("prom", "wrong")
        # Four addresses take the four workers (cost 13: about 0.5 s a check, alone)...
        checking = [pool.submit(get_from, address, f"127.0.2.{i}", wrong) for i in range(1, 5)]
        time.sleep(0.3)
        # ... and four more find none free.
        busy = [pool.submit(get_from, address, f"127.0.3.{i}", wrong) for i in range(1, 5)]
        time.sleep(0.2)
        status, _, seconds = get_from(address, "127.0.0.2", basic("prom", PASSWORD))
        assert status == 200
        assert seconds < 0.5
        for future in busy:
            status, headers, seconds = future.result()
            assert (status, headers["Retry-After"]) == (429, "1")
            assert seconds < 0.5
        assert [f.result()[0] for f in checking] == [401] * 4


def test_start_makes_no_bcrypt_hash(tmp_path: Path) -> None:
    # A valid cost-14 hash string (of no known password): checking it takes about 1 s, so
    # a server that hashed something at the configured cost would take that long to start.
    hashed = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode()
    hashed = f"{hashed[:4]}{MAX_BCRYPT_COST}{hashed[6:]}"
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  alice: '{hashed}'\n"))
    start = time.monotonic()
    server = make_server("127.0.0.1:0", "/metrics", Render(), cfg)
    server.server_close()
    assert time.monotonic() - start < 0.3


@pytest.mark.parametrize("cost", [15, 31])
def test_costly_bcrypt_hash_is_refused_at_start(tmp_path: Path, cost: int) -> None:
    hashed = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode()
    hashed = f"{hashed[:4]}{cost}{hashed[6:]}"
    path = write_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    with pytest.raises(WebConfigError, match=rf"basic_auth_users\.prometheus: bcrypt cost {cost}"):
        load_web_config(path)
    proc = run_cli(
        "serve", "--web.listen-address=127.0.0.1:0", f"--web.config.file={path}", timeout=25
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "invalid web config" in lines[0]
    assert f"basic_auth_users.prometheus: bcrypt cost {cost} is too high" in lines[0]


# --- the daemon: logging and signals --------------------------------------------------------


class Daemon:
    """`python -m cephnode_exporter serve` on an ephemeral port, with its log collected by
    a thread (or, with ``read_log=False``, left unread after the "listening" line)."""

    def __init__(self, processes: list[subprocess.Popen], *args: str, read_log: bool = True):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cephnode_exporter", "serve", *LOOPBACK, *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        processes.append(self.proc)
        assert self.proc.stderr is not None
        self.lines: list[str] = []
        deadline = time.monotonic() + 20
        port = None
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline().decode()
            if not line:
                break
            self.lines.append(line)
            match = LISTENING.search(line)
            port = int(match.group(1)) if match else None
        assert port is not None, f"daemon did not start: {self.lines}"
        self.address = ("127.0.0.1", port)
        self.url = f"http://127.0.0.1:{port}"
        if read_log:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.lines.append(raw.decode())

    def wait_log(self, pattern: str, timeout: float = 5) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no log line matching {pattern!r} in {self.lines}")


def metric(body: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", body, re.M)
    assert match, f"{name} not in the scrape"
    return float(match.group(1))


def scrape(url: str, timeout: float = 5) -> tuple[str, float]:
    start = time.monotonic()
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as r:
        assert r.status == 200
        return r.read().decode(), time.monotonic() - start


def test_unread_stderr_does_not_stop_serving(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree]
) -> None:
    # Debug level logs every request; nobody reads the pipe after the "listening" line, so
    # it fills after a few hundred lines.
    flags = node_trees["epyc9454p-tuned"].flags
    daemon = Daemon(processes, *flags, "--log.level=debug", read_log=False)
    dropped = "cephnode_exporter_log_messages_dropped_total"

    def not_found(n: int) -> None:
        conn = http.client.HTTPConnection(*daemon.address, timeout=5)
        try:
            for _ in range(n):
                conn.request("GET", "/nope")
                resp = conn.getresponse()
                resp.read()
                assert resp.status == 404
        finally:
            conn.close()

    not_found(3000)
    body, seconds = scrape(daemon.url)
    assert seconds < 2
    first = metric(body, dropped)
    assert first > 0
    not_found(500)
    body, seconds = scrape(daemon.url)
    assert seconds < 2
    assert metric(body, dropped) >= first + 500


@contextmanager
def in_background(url: str) -> Iterator[dict[str, object]]:
    """GET url in a thread; the dict gets "status" and "body", or "error"."""
    result: dict[str, object] = {}

    def get() -> None:
        try:
            with urllib.request.urlopen(url, timeout=20) as r:
                result["status"], result["body"] = r.status, r.read().decode()
        except Exception as e:  # what the test asserts on
            result["error"] = e

    thread = threading.Thread(target=get)
    thread.start()
    try:
        yield result
    finally:
        thread.join(25)


@pytest.fixture
def silent_osd() -> Iterator[str]:
    """A socket directory with one OSD admin socket that accepts and never answers, as a
    stopped (SIGSTOP) OSD does: the osd collector waits its whole timeout for it."""
    directory = tempfile.mkdtemp(prefix="osd-", dir="/tmp")  # AF_UNIX paths: 107 bytes
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(os.path.join(directory, "ceph-osd.0.asok"))
        listener.listen(8)
        yield directory
    shutil.rmtree(directory)


def test_sigterm_lets_the_scrape_in_flight_finish(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree], silent_osd: str
) -> None:
    flags = [*node_trees["epyc9454p-tuned"].flags, f"--ceph.socket-dir={silent_osd}"]
    timeouts = ["--collector.osd.timeout=2", "--collector.timeout=4", "--scrape.timeout=5"]
    daemon = Daemon(processes, *flags, *timeouts)
    with in_background(daemon.url + "/metrics") as result:
        time.sleep(0.7)
        assert "status" not in result and "error" not in result, "the scrape ended early"
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.wait_log(r'msg="shutting down" signal=SIGTERM')
        # No new connections while the last scrape finishes.
        time.sleep(0.3)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(daemon.address, timeout=2).close()
        assert daemon.proc.poll() is None
    assert result.get("status") == 200, result
    assert 'cephnode_osd_scrape_success{ceph_daemon="osd.0"} 0.0' in str(result["body"])
    assert daemon.proc.wait(timeout=10) == 0
    daemon.wait_log(r"msg=stopped signal=SIGTERM requests_cut=0")


@pytest.mark.parametrize("name", ["SIGHUP", "SIGUSR1", "SIGUSR2"])
def test_reload_and_user_signals_are_logged_and_ignored(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree], name: str
) -> None:
    sig = signal.Signals[name]
    daemon = Daemon(processes, *node_trees["epyc9454p-tuned"].flags)
    daemon.proc.send_signal(sig)
    expected = (
        "reload is not supported; restart the service"
        if sig == signal.SIGHUP
        else "signal ignored: it has no meaning here"
    )
    line = daemon.wait_log(rf"signal={sig.name}")
    assert f'msg="{expected}"' in line and "level=warn" in line
    assert daemon.proc.poll() is None
    assert scrape(daemon.url)[0]


@pytest.mark.parametrize("name", ["SIGQUIT", "SIGINT"])
def test_quit_and_interrupt_stop_cleanly(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree], name: str
) -> None:
    sig = signal.Signals[name]
    daemon = Daemon(processes, *node_trees["epyc9454p-tuned"].flags)
    assert scrape(daemon.url)[0]
    daemon.proc.send_signal(sig)
    assert daemon.proc.wait(timeout=10) == 0
    daemon.wait_log(rf'msg="shutting down" signal={sig.name}')
    daemon.wait_log(rf"msg=stopped signal={sig.name} requests_cut=0")
