"""The admin socket client against fake, hostile servers (no Ceph needed).

Each fake server is a thread listening on an AF_UNIX socket in a temporary directory and
playing one part: a healthy OSD, a stopped one, a liar about lengths, a dripper, ...
Every failure must end within the client's timeout with its own exception type.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cephnode_exporter.ceph import asok, discovery
from cephnode_exporter.ceph.asok import (
    AdminSocket,
    AsokCommandError,
    AsokConnectError,
    AsokDecodeError,
    AsokRefused,
    AsokReplyTooLarge,
    AsokTimeout,
    AsokTruncated,
)
from cephnode_exporter.ceph.asokloop import query_all
from cephnode_exporter.ceph.discovery import (
    DiscoveryError,
    NoSocketDirectory,
    discover_osd_sockets,
)
from cephnode_exporter.hostfs import ReadErrors

PERF_DUMP = {"osd": {"op_w": 7, "op_w_latency": {"avgcount": 7, "sum": 0.07, "avgtime": 0.01}}}
TIMEOUT = 0.5
# Slack for thread scheduling on a loaded 2-core CI machine.
SLACK = 0.4

Handler = Callable[[socket.socket, bytes, threading.Event], None]


def reply(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


class FakeServer:
    """A listening AF_UNIX socket served by one thread (a daemon serves one at a time,
    like Ceph's admin socket thread). ``handler(conn, request, stop)`` plays the part."""

    def __init__(self, path: Path, handler: Handler | None, backlog: int = 5) -> None:
        self.path = str(path)
        self.handler = handler
        self.requests: list[bytes] = []
        self.accepted = 0
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(backlog)
        self.sock.settimeout(0.05)
        self.thread: threading.Thread | None = None
        if handler is not None:  # None: listen, never accept (a SIGSTOPped daemon)
            self.thread = threading.Thread(target=self._loop, name="fake-asok", daemon=True)
            self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(conn,), name="fake-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        self.accepted += 1
        try:
            conn.settimeout(5)
            request = b""
            while not request.endswith(b"\0") and len(request) < 4096:
                chunk = conn.recv(1024)
                if not chunk:
                    break
                request += chunk
            self.requests.append(request)
            assert self.handler is not None
            self.handler(conn, request, self.stop)
        except OSError:
            pass  # the client gave up and closed: expected in the hostile cases
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        if self.thread is not None:
            self.thread.join(timeout=2)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory under /tmp: AF_UNIX paths must fit in 108 bytes (sun_path), which a
    deep --basetemp would not leave room for."""
    path = Path(tempfile.mkdtemp(prefix="asok-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def serve(short_dir: Path) -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []
    counter = iter(range(10_000))

    def start(handler: Handler | None, **kwargs: object) -> FakeServer:
        server = FakeServer(short_dir / f"s{next(counter)}.asok", handler, **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def answer(payload: bytes) -> Handler:
    def handler(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(reply(payload))

    return handler


def hang(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    stop.wait(30)


def timed(fn: Callable[[], object]) -> tuple[BaseException | None, float]:
    start = time.monotonic()
    try:
        fn()
    except Exception as exc:
        return exc, time.monotonic() - start
    return None, time.monotonic() - start


# ----------------------------------------------------------------------------- happy path


def test_answers_and_sends_the_exact_protocol(serve: Callable[..., FakeServer]) -> None:
    server = serve(answer(json.dumps(PERF_DUMP).encode()))
    sock = AdminSocket(server.path, timeout=TIMEOUT)
    assert sock.command("perf dump") == PERF_DUMP
    assert sock.command("perf dump", logger="osd") == PERF_DUMP
    # JSON with the prefix, compact format forced, NUL-terminated (admin_socket.cc).
    assert server.requests[0] == b'{"prefix":"perf dump","format":"json"}\0'
    assert json.loads(server.requests[1][:-1]) == {
        "prefix": "perf dump",
        "logger": "osd",
        "format": "json",
    }
    assert sock.raw("perf dump") == json.dumps(PERF_DUMP).encode()


def test_empty_reply_is_none_and_text_commands_return_text(
    serve: Callable[..., FakeServer],
) -> None:
    assert AdminSocket(serve(answer(b"")).path).command("dump_objectstore_kv_stats") is None
    text = b"1 : device size 0x80000000 : using 0x1223a000(290 MiB)\n"
    assert AdminSocket(serve(answer(text)).path).command("bluefs stats") == text.decode()


def test_error_reply(serve: Callable[..., FakeServer]) -> None:
    # What Pacific sends for `config get` of an unknown option (recorded, docs/ceph.md).
    payload = b"ERROR: (2) No such file or directory\nerror getting 'nosuch': (2) No such file\n"
    sock = AdminSocket(serve(answer(payload)).path, timeout=TIMEOUT)
    with pytest.raises(AsokCommandError, match=r"ERROR: \(2\) No such file or directory") as err:
        sock.command("config get", var="nosuch")
    assert err.value.reason == "command"
    with pytest.raises(AsokCommandError):
        sock.raw("config get", var="nosuch")


# ----------------------------------------------------------------------------- hostile peers


def test_hang_after_accept_ends_at_the_timeout(serve: Callable[..., FakeServer]) -> None:
    sock = AdminSocket(serve(hang).path, timeout=TIMEOUT)
    err, took = timed(lambda: sock.command("perf dump"))
    assert isinstance(err, AsokTimeout), err
    assert "no complete reply length" in str(err) and "0 of 4 bytes" in str(err)
    assert TIMEOUT <= took < TIMEOUT + SLACK


def test_never_accepting_like_a_stopped_osd(serve: Callable[..., FakeServer]) -> None:
    """A SIGSTOPped OSD: the kernel queues connections in the backlog, nobody answers.
    Once the backlog is full, connect itself would block: that is a timeout too."""
    server = serve(None, backlog=1)
    sock = AdminSocket(server.path, timeout=TIMEOUT, connect_timeout=0.2)
    messages = []
    for _ in range(4):
        err, took = timed(lambda: sock.command("perf dump"))
        assert isinstance(err, AsokTimeout), err
        assert took < TIMEOUT + SLACK
        messages.append(str(err))
    assert "no complete reply length" in messages[0]
    assert "backlog full" in messages[-1]


def test_close_before_reply(serve: Callable[..., FakeServer]) -> None:
    def close(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(b"\x00\x00")  # half a length, then gone

    err, took = timed(lambda: AdminSocket(serve(close).path, timeout=TIMEOUT).raw("version"))
    assert isinstance(err, AsokTruncated), err
    assert "closed after 2 of 4 reply length bytes" in str(err)
    assert took < SLACK


def test_truncated_payload(serve: Callable[..., FakeServer]) -> None:
    def short(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(struct.pack(">I", 100) + b'{"osd": {')

    err, took = timed(lambda: AdminSocket(serve(short).path, timeout=TIMEOUT).raw("perf dump"))
    assert isinstance(err, AsokTruncated), err
    assert err.reason == "truncated"
    assert "closed after 9 of 100 reply bytes" in str(err)
    assert took < SLACK


def test_4gib_length_fails_at_once_without_allocating(serve: Callable[..., FakeServer]) -> None:
    def liar(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(struct.pack(">I", 0xFFFFFFFF))
        stop.wait(30)  # and then nothing: the client must not wait for it

    sock = AdminSocket(serve(liar).path, timeout=5.0)
    tracemalloc.start()
    try:
        err, took = timed(lambda: sock.raw("perf dump"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(err, AsokReplyTooLarge), err
    assert "announced 4294967295 bytes, the cap is 16777216" in str(err)
    assert took < SLACK
    assert peak < 1024 * 1024


def test_reply_cap_is_a_parameter(serve: Callable[..., FakeServer]) -> None:
    server = serve(answer(b"x" * 2000))
    with pytest.raises(AsokReplyTooLarge, match="announced 2000 bytes, the cap is 1000"):
        AdminSocket(server.path, max_reply_bytes=1000).raw("version")
    assert len(AdminSocket(server.path, max_reply_bytes=2000).raw("version")) == 2000


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"osd": {"op_w": 7,', "not valid JSON"),
        (b"perf dump output", "not valid JSON"),
        (b'{"osd": "\xff\xfe"}', r"not UTF-8 \(byte 9\)"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
    ],
    ids=["truncated-json", "not-json", "invalid-utf8", "deep-array", "deep-object"],
)
def test_bad_json(serve: Callable[..., FakeServer], payload: bytes, message: str) -> None:
    sock = AdminSocket(serve(answer(payload)).path, timeout=TIMEOUT)
    err, took = timed(lambda: sock.command("perf dump"))
    assert isinstance(err, AsokDecodeError), err
    assert err.reason == "decode"
    assert took < TIMEOUT + SLACK
    with pytest.raises(AsokDecodeError, match=message):
        sock.command("perf dump")


def test_drip_one_byte_per_second_ends_at_the_deadline(serve: Callable[..., FakeServer]) -> None:
    """A per-read timeout would wait forever here: every read gets a byte within 1 s."""

    def drip(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        for byte in reply(json.dumps(PERF_DUMP).encode()):
            conn.sendall(bytes([byte]))
            if stop.wait(1.0):
                return

    sock = AdminSocket(serve(drip).path, timeout=2.5)
    err, took = timed(lambda: sock.command("perf dump"))
    assert isinstance(err, AsokTimeout), err
    assert "of 4 bytes" in str(err)  # still in the length: 3 bytes in 2.5 s
    assert 2.5 <= took < 2.5 + SLACK


def test_every_failure_has_its_own_type_and_reason() -> None:
    kinds = [
        asok.AsokRefused,
        asok.AsokConnectError,
        asok.AsokTimeout,
        asok.AsokTruncated,
        asok.AsokReplyTooLarge,
        asok.AsokDecodeError,
        asok.AsokCommandError,
    ]
    assert all(issubclass(k, asok.AsokError) for k in kinds)
    assert len({k.reason for k in kinds}) == len(kinds)


# ----------------------------------------------------------------------------- connecting


def test_missing_and_stale_sockets(short_dir: Path) -> None:
    with pytest.raises(AsokConnectError, match="no such socket"):
        AdminSocket(short_dir / "gone.asok", timeout=TIMEOUT).command("version")
    # A socket file whose daemon died: still a socket, nobody listens.
    stale = short_dir / "stale.asok"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    err, took = timed(lambda: AdminSocket(stale, timeout=TIMEOUT).command("version"))
    assert isinstance(err, AsokConnectError), err
    assert "refused (a stale socket file" in str(err)
    assert took < SLACK


def test_peer_pid_is_the_listening_process(short_dir: Path) -> None:
    path = short_dir / "child.asok"
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.bind({str(path)!r}); s.listen(5)\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert AdminSocket(path, timeout=TIMEOUT).peer_pid() == child.pid
        assert child.pid != os.getpid()
    finally:
        child.kill()
        child.wait()


def test_a_command_records_its_peer_pid(short_dir: Path) -> None:
    """The pid of a command's peer is kept, so the collector needs no connection of its
    own for it; a child process answering one command is the peer."""
    path = short_dir / "child.asok"
    code = (
        "import socket, struct\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.bind({str(path)!r}); s.listen(5)\n"
        "print('ready', flush=True)\n"
        "c, _ = s.accept(); c.recv(1024)\n"
        "c.sendall(struct.pack('>I', 2) + b'{}'); c.close()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        sock = AdminSocket(path, timeout=TIMEOUT)
        assert sock.last_peer is None
        assert sock.command("version") == {}
        assert sock.last_peer == (child.pid,)
    finally:
        child.kill()
        child.wait()


def test_one_request_at_a_time_per_socket(serve: Callable[..., FakeServer]) -> None:
    # Requests in the handler at once, counted between reading a request and sending its
    # reply: the server's own count ends after the reply, when the next client may
    # already be connected.
    busy = [0, 0]  # now, most
    guard = threading.Lock()

    def slow(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        with guard:
            busy[0] += 1
            busy[1] = max(busy[1], busy[0])
        time.sleep(0.1)
        with guard:
            busy[0] -= 1
        conn.sendall(reply(b"{}"))

    server = serve(slow)
    results: list[object] = []

    def worker() -> None:
        results.append(AdminSocket(server.path, timeout=3).command("version"))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [{}] * 4
    assert server.accepted == 4
    assert busy[1] == 1


def test_the_per_socket_locks_do_not_outlive_their_exchanges(short_dir: Path) -> None:
    """A socket directory whose OSD names churn (a test rig, a host of short-lived
    daemons) must not grow the per-path lock table: 2,000 paths asked once each leave
    none behind, through the blocking client and the many-sockets loop alike."""
    paths = [str(short_dir / f"ceph-osd.{i}.asok") for i in range(2000)]
    for path in paths[:1000]:
        with pytest.raises(asok.AsokError):
            AdminSocket(path, timeout=1).command("version")
    query_all({p: AdminSocket(p, timeout=1) for p in paths[1000:]}, "version", 5)
    assert not any(p in asok._locks for p in paths)


def test_a_request_queued_behind_a_hung_one_keeps_its_own_deadline(
    serve: Callable[..., FakeServer],
) -> None:
    server = serve(hang)
    first = threading.Thread(
        target=lambda: timed(lambda: AdminSocket(server.path, timeout=1.0).raw("version"))
    )
    first.start()
    time.sleep(0.1)
    err, took = timed(lambda: AdminSocket(server.path, timeout=0.3).raw("version"))
    first.join()
    assert isinstance(err, AsokTimeout)
    assert "an earlier request to this socket is still running" in str(err)
    assert took < 0.3 + SLACK


# ----------------------------------------------------------------------------- allowlist


@pytest.mark.parametrize(
    ("prefix", "args", "message"),
    [
        ("config set", {"var": "debug_osd", "val": "20"}, "not an allowlisted"),
        ("compact", {}, "not an allowlisted"),
        ("bench", {}, "not an allowlisted"),
        ("injectargs", {}, "not an allowlisted"),
        ("perf reset", {"var": "all"}, "not an allowlisted"),
        ("no such command", {}, "not an allowlisted"),
        ("perf dump ", {}, "not an allowlisted"),  # no prefix games
        ("perf dump", {"output-file": "/etc/passwd"}, "not allowed: output-file"),
        ("perf dump", {"format": "xml"}, "not allowed: format"),
        ("perf dump", {"logger": {"a": 1}}, "unsupported type"),
        ("perf dump", {"logger": "x" * 2000}, "request is 2050 bytes, the daemon takes 1023"),
    ],
)
def test_refused_before_any_io(
    serve: Callable[..., FakeServer],
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    args: dict[str, object],
    message: str,
) -> None:
    server = serve(answer(b"{}"))

    def no_sockets(*a: object, **k: object) -> None:
        raise AssertionError("a socket was created for a refused command")

    monkeypatch.setattr(asok.socket, "socket", no_sockets)
    sock = AdminSocket(server.path, timeout=TIMEOUT)
    for call in (sock.command, sock.raw):
        with pytest.raises(AsokRefused, match=message) as err:
            call(prefix, **args)
        assert err.value.reason == "refused"
    with pytest.raises(AsokRefused):
        query_all({"osd.0": sock}, prefix, TIMEOUT, **args)
    monkeypatch.undo()
    time.sleep(0.05)
    assert server.accepted == 0
    assert server.requests == []


def test_request_size_limit_is_cephs() -> None:
    # 1023 bytes of JSON plus the NUL fill char cmd[1024] exactly: accepted.
    base = len(asok.encode_request("perf dump", {"logger": ""})) - 1
    fits = asok.encode_request("perf dump", {"logger": "x" * (1023 - base)})
    assert len(fits) == 1024 and fits.endswith(b"\0")
    with pytest.raises(AsokRefused):
        asok.encode_request("perf dump", {"logger": "x" * (1024 - base)})


def test_no_raw_terminators_inside_a_request() -> None:
    data = asok.encode_request("config get", {"var": "a\nb\0c\u00e9"})
    assert data.count(b"\0") == 1 and b"\n" not in data
    assert json.loads(data[:-1])["var"] == "a\nb\0c\u00e9"


# ----------------------------------------------------------------------------- parallel


def test_parallel_query_returns_by_the_deadline_with_one_hung_socket(
    serve: Callable[..., FakeServer],
) -> None:
    sockets = {}
    for i in range(10):
        handler = hang if i == 3 else answer(json.dumps({"id": i}).encode())
        sockets[f"osd.{i}"] = AdminSocket(serve(handler).path, timeout=30)
    start = time.monotonic()
    results = query_all(sockets, "version", timeout=1.0)
    took = time.monotonic() - start
    assert took < 1.0 + 0.15
    assert set(results) == set(sockets)
    for i in range(10):
        r = results[f"osd.{i}"]
        if i == 3:
            assert not r.ok and isinstance(r.error, AsokTimeout), r
            assert "no complete reply length" in str(r.error)  # the client's own deadline
        else:
            assert r.ok and r.value == {"id": i}, r
            assert r.seconds < 0.5


# ----------------------------------------------------------------------------- recorded payloads

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ceph"


def recorded(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_recorded_payloads_are_listed_and_parse() -> None:
    """tests/fixtures/ceph: real replies of Ceph 16.2.15 (docs/ceph.md), as the client
    receives them. Later parser tests and the benchmark replay them."""
    manifest = json.loads(recorded("manifest.json"))
    assert manifest["ceph_version"] == "16.2.15"
    files = {p.name for p in FIXTURES.iterdir() if p.is_file()} - {"manifest.json"}
    assert files == set(manifest["files"])
    assert sum(len(recorded(f)) for f in files) < 1024 * 1024
    for name, meta in manifest["files"].items():
        payload = recorded(name)
        assert len(payload) == meta["bytes"]
        assert meta["command"] in asok.ALLOWED_COMMANDS
        assert isinstance(asok.parse_json(payload), dict), name


def test_recorded_payloads_are_consistent() -> None:
    bluestore = json.loads(recorded("bluestore.perf_dump.json"))
    assert {"bluestore", "rocksdb", "bluefs", "osd"} <= set(bluestore)
    assert not {"bluestore", "rocksdb", "bluefs"} & set(
        json.loads(recorded("memstore.perf_dump.json"))
    )
    for kind in ("memstore", "bluestore"):
        dump = json.loads(recorded(f"{kind}.perf_dump.json"))["osd"]
        hists = json.loads(recorded(f"{kind}.perf_histogram_dump.json"))["osd"]
        # Recorded at rest after the load: histogram totals equal perf dump's avgcount.
        for op, hist in (
            ("op_r", "op_r_latency_out_bytes_histogram"),
            ("op_w", "op_w_latency_in_bytes_histogram"),
        ):
            total = sum(map(sum, hists[hist]["values"]))
            assert total == dump[f"{op}_latency"]["avgcount"] > 0, (kind, op)
        ops = json.loads(recorded(f"{kind}.dump_ops_in_flight.json"))
        assert ops["num_ops"] == len(ops["ops"]) > 0
        assert {o["type_data"]["flag_point"] for o in ops["ops"]} == {"waiting for sub ops"}
        slow = json.loads(recorded(f"{kind}.dump_historic_slow_ops.json"))
        assert slow["Ops"] and all(o["duration"] > slow["threshold to keep"] for o in slow["Ops"])


def test_recorded_payloads_replayed(serve: Callable[..., FakeServer]) -> None:
    for name in ("bluestore.perf_schema.json", "bluestore.perf_histogram_dump.json"):
        payload = recorded(name)
        sock = AdminSocket(serve(answer(payload)).path, timeout=TIMEOUT)
        assert sock.command("perf schema") == json.loads(payload)


# ----------------------------------------------------------------------------- discovery


def bind(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    return s


FSID = "8110b811-229a-4333-88ae-f75e82aa38ff"


def test_discovery_of_both_layouts(short_dir: Path) -> None:
    keep = []
    for name in (
        "ceph-osd.0.asok",
        "ceph-osd.12.asok",
        "backup-cluster-osd.5.asok",  # a second cluster; names may contain dashes
        "ceph-mon.a.asok",
        "ceph-mgr.x.asok",
        "ceph-mds.a.asok",
        "ceph-client.admin.1234.94203.asok",
        "ceph-client.rgw.node1.asok",
        "ceph-client.rgw-osd.3.asok",
        "ceph-osd.x.asok",
        "ceph-osd.007.asok",
        "ceph-osd.-1.asok",
    ):
        keep.append(bind(short_dir / name))
    (short_dir / "ceph-osd.3.asok").write_text("stale: a regular file, not a socket")
    (short_dir / "ceph-osd.9.asok").symlink_to(short_dir / "nowhere")
    (short_dir / "ceph-osd.4.asok").mkdir()
    cephadm = short_dir / FSID
    cephadm.mkdir()
    keep += [bind(cephadm / "ceph-osd.1.asok"), bind(cephadm / "ceph-mon.a.asok")]
    (short_dir / "not-a-fsid").mkdir()
    keep.append(bind(short_dir / "not-a-fsid" / "ceph-osd.2.asok"))
    (short_dir / "3f9ad3a4-0000-4000-8000-000000000000").write_text("a file named like a fsid")

    found = discover_osd_sockets(str(short_dir))
    assert [(s.cluster, s.ceph_daemon, s.layout) for s in found] == [
        (FSID, "osd.1", "cephadm"),
        ("backup-cluster", "osd.5", "package"),
        ("ceph", "osd.0", "package"),
        ("ceph", "osd.12", "package"),
    ]
    assert found[0].path == str(cephadm / "ceph-osd.1.asok")
    assert found[0].osd_id == 1
    for s in keep:
        s.close()


def test_discovery_follows_sockets_coming_and_going(short_dir: Path) -> None:
    a = bind(short_dir / "ceph-osd.0.asok")
    assert [s.ceph_daemon for s in discover_osd_sockets(str(short_dir))] == ["osd.0"]
    b = bind(short_dir / "ceph-osd.1.asok")
    os.unlink(short_dir / "ceph-osd.0.asok")
    assert [s.ceph_daemon for s in discover_osd_sockets(str(short_dir))] == ["osd.1"]
    os.unlink(short_dir / "ceph-osd.1.asok")
    assert discover_osd_sockets(str(short_dir)) == []
    a.close()
    b.close()


def test_discovery_errors(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(NoSocketDirectory, match="no such directory"):
        discover_osd_sockets(str(short_dir / "missing"))
    assert issubclass(NoSocketDirectory, DiscoveryError)
    (short_dir / "file").write_text("")
    with pytest.raises(DiscoveryError, match="not a directory") as not_dir:
        discover_osd_sockets(str(short_dir / "file"))
    # Only a missing directory is "no Ceph here" (the osd collector's success).
    assert not isinstance(not_dir.value, NoSocketDirectory)

    # Root ignores directory permissions, so EACCES is injected.
    fsid_dir = short_dir / FSID
    fsid_dir.mkdir()
    keep = bind(short_dir / "ceph-osd.0.asok")
    real_scan = discovery._scan

    def scan(path: str) -> list[os.DirEntry[str]]:
        if path in (str(fsid_dir), "/denied"):
            raise PermissionError(13, "Permission denied")
        return real_scan(path)

    monkeypatch.setattr(discovery, "_scan", scan)
    errors = ReadErrors()
    found = discover_osd_sockets(str(short_dir), errors)
    assert [s.ceph_daemon for s in found] == ["osd.0"]
    assert len(errors) == 1 and str(fsid_dir) in errors.items[0]
    assert discover_osd_sockets(str(short_dir)) == found  # no errors object: just skipped
    with pytest.raises(DiscoveryError, match=r"permission denied .*group ceph") as denied:
        discover_osd_sockets("/denied")
    assert not isinstance(denied.value, NoSocketDirectory)
    keep.close()


def test_item_cap_is_counted_only_above_its_own_length() -> None:
    """Each JSON item counted is at least one byte, so a reply no longer than its
    command's item cap is within it uncounted; one byte more is counted and refused when
    it is all items (the cap is exact, not rounded by the shortcut)."""
    cap = asok.ALLOWED_COMMANDS["perf dump"].max_items
    at_cap = b"[" * cap
    asok.check_items(at_cap, "/x", "perf dump")  # cap items: allowed
    with pytest.raises(AsokReplyTooLarge, match=f"holds {cap + 1} JSON items"):
        asok.check_items(at_cap + b"[", "/x", "perf dump")
    short = b"[" + b"0," * 10 + b"0]"
    asok.check_items(short, "/x", "perf dump")
    assert asok.json_items(short) <= len(short)
