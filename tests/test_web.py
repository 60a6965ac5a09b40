"""The HTTP server (the web package) and the web config file (webconfig.py), over real sockets.

A fixed render function stands in for the scrape engine, which has its own tests. TLS
certificates are made with the openssl CLI at test time, so no key material is committed.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import os
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from cephnode_exporter.web import CONTENT_TYPE, ExporterServer, make_server
from cephnode_exporter.webconfig import WebConfig, WebConfigError, load_web_config

EXPOSITION = b"# HELP up Whether the exporter is up.\n# TYPE up gauge\nup 1\n"
PASSWORD = "s3cret pass"


def need_openssl() -> str:
    """The openssl CLI; without it TLS tests skip, except under CI=true where they fail."""
    path = shutil.which("openssl")
    if path is None:
        reason = "openssl CLI not found (Debian package openssl; `make deps` installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and a prerequisite is missing: {reason}")
        pytest.skip(reason)
    return path


class Render:
    """A render function that records the scrape timeouts it was given."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []
        self.fail = False

    def __call__(self, timeout: float | None) -> bytes:
        self.timeouts.append(timeout)
        if self.fail:
            raise RuntimeError("collector exploded")
        return EXPOSITION


@contextmanager
def serve(
    web_config: WebConfig | None = None,
    render: Callable[[float | None], bytes] | None = None,
    telemetry_path: str = "/metrics",
    **kwargs: Any,
) -> Iterator[ExporterServer]:
    server = make_server("127.0.0.1:0", telemetry_path, render or Render(), web_config, **kwargs)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def request(
    server: ExporterServer,
    path: str = "/metrics",
    method: str = "GET",
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    host, port = server.server_address
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection(host, port, context=context, timeout=5)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def raw(server: ExporterServer, data: bytes) -> bytes:
    """Send bytes as-is and read the answer until the server closes."""
    with socket.create_connection(server.server_address, timeout=5) as sock:
        # The server may answer and close before taking it all.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def write_config(directory: Path, text: str, name: str = "web.yml") -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


def wait_for(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def bcrypt_hash() -> str:
    # Cost 4 keeps the suite fast; production hashes use 10 or more.
    return bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed server cert for 127.0.0.1, and a CA with one client cert."""
    exe = need_openssl()
    d = tmp_path_factory.mktemp("certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]

    def openssl(*args: str) -> None:
        subprocess.run([exe, *args], cwd=d, check=True, capture_output=True)

    openssl(
        "req", "-x509", *ec, "-keyout", "server.key", "-out", "server.crt",
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    )  # fmt: skip
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test CA")
    openssl("req", "-new", *ec, "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=prom")
    (d / "client.ext").write_text(
        "subjectAltName=DNS:prometheus.example\nextendedKeyUsage=clientAuth\n"
    )
    openssl(
        "x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-set_serial", "2", "-days", "2", "-out", "client.crt", "-extfile", "client.ext",
    )  # fmt: skip
    return d


def client_context(certs: Path, cert: str | None = None) -> ssl.SSLContext:
    """A client that trusts the test server certificate, optionally with a client cert."""
    ctx = ssl.create_default_context(cafile=str(certs / "server.crt"))
    if cert is not None:
        ctx.load_cert_chain(str(certs / f"{cert}.crt"), str(certs / f"{cert}.key"))
    return ctx


TLS_CONFIG = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


# --- plain HTTP ----------------------------------------------------------------------------


def test_landing_page_links_the_telemetry_path() -> None:
    with serve() as server:
        status, headers, body = request(server, "/")
        assert status == 200
        assert headers["Content-Type"].startswith("text/html")
        assert b"<title>cephnode-exporter</title>" in body
        assert b'href="/metrics"' in body
        status, _, body = request(server, "/", method="HEAD")
        assert (status, body) == (200, b"")


def test_landing_page_escapes_the_path() -> None:
    with serve(telemetry_path='/m"<x>&') as server:
        _, _, body = request(server, "/")
        assert b'href="/m&quot;&lt;x&gt;&amp;"' in body
        assert b"<x>" not in body


def test_metrics() -> None:
    render = Render()
    with serve(render=render) as server:
        status, headers, body = request(server, "/metrics?name[]=ignored")
        assert status == 200
        assert headers["Content-Type"] == CONTENT_TYPE
        assert headers.get("Content-Encoding") is None
        assert body == EXPOSITION
        assert headers["Server"] == "cephnode-exporter"
    assert render.timeouts == [None]


def test_metrics_gzip() -> None:
    with serve() as server:
        status, headers, body = request(server, headers={"Accept-Encoding": "gzip"})
        assert status == 200
        assert headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == EXPOSITION
        _, headers, body = request(server, headers={"Accept-Encoding": "gzip;q=0, identity"})
        assert headers.get("Content-Encoding") is None
        assert body == EXPOSITION


def test_head_metrics_does_not_scrape() -> None:
    render = Render()
    with serve(render=render) as server:
        status, headers, body = request(server, method="HEAD")
        assert (status, body) == (200, b"")
        assert headers["Content-Type"] == CONTENT_TYPE
    assert render.timeouts == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [("4.5", 4.5), ("10", 10.0), ("garbage", None), ("", None), ("nan", None), ("-1", None)],
)
def test_scrape_timeout_header(value: str, expected: float | None) -> None:
    render = Render()
    with serve(render=render) as server:
        status, _, _ = request(server, headers={"X-Prometheus-Scrape-Timeout-Seconds": value})
        assert status == 200
    assert render.timeouts == [expected]


def test_not_found_and_method_not_allowed() -> None:
    with serve() as server:
        assert request(server, "/nope")[0] == 404
        assert request(server, "/metrics/extra")[0] == 404
        for method, path in (("POST", "/metrics"), ("DELETE", "/"), ("BREW", "/metrics")):
            status, headers, _ = request(server, path, method=method)
            assert status == 405
            assert headers["Allow"] == "GET, HEAD"


def test_render_failure_is_500_and_server_survives(caplog: pytest.LogCaptureFixture) -> None:
    render = Render()
    with serve(render=render) as server:
        render.fail = True
        status, _, body = request(server)
        assert status == 500
        assert b"exploded" not in body  # details go to the log, not to the client
        assert "scrape failed" in caplog.text
        render.fail = False
        status, _, body = request(server)
        assert (status, body) == (200, EXPOSITION)


def test_keep_alive_serves_several_requests() -> None:
    with serve() as server:
        conn = http.client.HTTPConnection(*server.server_address, timeout=5)
        try:
            for path in ("/metrics", "/", "/nope", "/metrics"):
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                assert resp.status in (200, 404)
        finally:
            conn.close()


def test_oversized_requests_get_4xx() -> None:
    with serve() as server:
        assert raw(server, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n").startswith(
            b"HTTP/1.1 414"
        )
        long_header = b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n"
        assert raw(server, long_header).startswith(b"HTTP/1.1 431")
        many = b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n"
        assert raw(server, many).startswith(b"HTTP/1.1 431")
        assert raw(server, b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert request(server)[0] == 200


def test_silent_client_does_not_block_others() -> None:
    with serve(request_timeout=0.5) as server:
        silent = socket.create_connection(server.server_address, timeout=5)
        try:
            start = time.monotonic()
            assert request(server)[0] == 200
            assert time.monotonic() - start < 0.4
            # ... and the silent one is dropped once its time is up.
            assert silent.recv(1) == b""
            assert time.monotonic() - start < 2.5
        finally:
            silent.close()


def test_slowloris_is_dropped_at_the_deadline() -> None:
    # A byte every 50 ms would reset a per-recv timeout forever; the deadline is per request.
    with (
        serve(request_timeout=0.5) as server,
        socket.create_connection(server.server_address, timeout=5) as sock,
    ):
        start = time.monotonic()
        closed_after = None
        for byte in b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: " + b"x" * 100:
            try:
                sock.send(bytes([byte]))
                if select.select([sock], [], [], 0.05)[0] and sock.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except OSError:  # reset: closed as well
                closed_after = time.monotonic() - start
                break
        assert closed_after is not None, "the trickling client was never dropped"
        assert 0.4 < closed_after < 2


def test_thirty_concurrent_requests() -> None:
    with serve() as server, ThreadPoolExecutor(30) as pool:
        results = list(pool.map(lambda _: request(server), range(30)))
    assert [r[0] for r in results] == [200] * 30
    assert all(r[2] == EXPOSITION for r in results)


def test_max_connections_exceeded_is_503() -> None:
    with serve(max_connections=2, request_timeout=5) as server:
        held = [socket.create_connection(server.server_address, timeout=5) for _ in range(2)]
        try:
            wait_for(lambda: server.active_connections == 2)
            start = time.monotonic()
            status, headers, _ = request(server)
            assert status == 503
            assert headers["Retry-After"] == "1"
            assert time.monotonic() - start < 1
        finally:
            for sock in held:
                sock.close()
        wait_for(lambda: server.active_connections == 0)
        assert request(server)[0] == 200


def test_shutdown_is_prompt() -> None:
    server = make_server("127.0.0.1:0", "/metrics", Render())
    server.shutdown()  # never served: must not hang
    server.server_close()
    with serve() as server:
        assert request(server)[0] == 200
        start = time.monotonic()
        server.shutdown()
        assert time.monotonic() - start < 1


@pytest.mark.parametrize(
    "address", ["10060", "::1:10060", "[::1]10060", "127.0.0.1:70000", "127.0.0.1:http", "[x]:1"]
)
def test_bad_listen_address(address: str) -> None:
    with pytest.raises(ValueError, match="listen address"):
        make_server(address, "/metrics", Render())


def test_bind_errors_propagate() -> None:
    with serve() as server:
        port = server.server_address[1]
        with pytest.raises(OSError):
            make_server(f"127.0.0.1:{port}", "/metrics", Render())


def test_wildcard_and_ipv6_addresses() -> None:
    server = make_server(":0", "/metrics", Render())
    try:
        assert server.server_address[1] > 0
        if server.socket.family == socket.AF_INET6:
            assert server.server_address[0] == "::"
    finally:
        server.server_close()


# --- web config: basic auth, headers, errors -----------------------------------------------


def auth_config(tmp_path: Path, bcrypt_hash: str) -> WebConfig:
    return load_web_config(write_config(tmp_path, f"basic_auth_users:\n  alice: '{bcrypt_hash}'\n"))


def test_basic_auth(tmp_path: Path, bcrypt_hash: str) -> None:
    with serve(auth_config(tmp_path, bcrypt_hash)) as server:
        assert request(server, headers=basic("alice", PASSWORD))[0] == 200
        assert request(server, headers=basic("alice", PASSWORD))[0] == 200  # cached now
        assert request(server, "/", headers=basic("alice", PASSWORD))[0] == 200
        for headers in (basic("alice", "wrong"), basic("mallory", PASSWORD), {}):
            status, resp_headers, _ = request(server, headers=headers)
            assert status == 401
            assert resp_headers["WWW-Authenticate"] == 'Basic realm="cephnode-exporter"'
        # The landing page is protected too, and so are unknown paths and methods.
        assert request(server, "/")[0] == 401
        assert request(server, "/nope")[0] == 401
        assert request(server, method="POST")[0] == 401


@pytest.mark.parametrize(
    "header",
    [
        "Basic",
        "Basic !!!not base64!!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),
        "Basic \u00e9\u00e9\u00e9",
        "Bearer abc",
        "",
    ],
)
def test_basic_auth_malformed_header_is_401(tmp_path: Path, bcrypt_hash: str, header: str) -> None:
    with serve(auth_config(tmp_path, bcrypt_hash)) as server:
        assert request(server, headers={"Authorization": header})[0] == 401
        assert request(server, headers=basic("alice", PASSWORD))[0] == 200


def test_extra_headers(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "http_server_config:\n  http2: false\n  headers:\n"
        "    X-Frame-Options: deny\n    Content-Security-Policy: default-src 'self'\n"
        "    X-XSS-Protection: ''\n",
    )
    cfg = load_web_config(path)
    assert cfg.headers == {
        "X-Frame-Options": "deny",
        "Content-Security-Policy": "default-src 'self'",
    }
    with serve(cfg) as server:
        for path in ("/metrics", "/nope"):
            _, headers, _ = request(server, path)
            assert headers["X-Frame-Options"] == "deny"
            assert headers["Content-Security-Policy"] == "default-src 'self'"
            assert "X-XSS-Protection" not in headers


@pytest.mark.parametrize(
    "value",
    ["default-src \u2018self\u2019", "deny\u00a0", "a\x01b", "a\x7fb"],
    ids=["curly-quotes", "nbsp", "control", "delete"],
)
def test_a_header_value_outside_visible_ascii_is_refused_at_start(
    tmp_path: Path, value: str
) -> None:
    """http.server writes headers in Latin-1: a pasted curly quote failed every response
    of a server that looked healthy. RFC 9110 field values are visible ASCII, space and
    tab: anything else is refused when the file is loaded."""
    text = yaml.safe_dump({"http_server_config": {"headers": {"Content-Security-Policy": value}}})
    with pytest.raises(WebConfigError, match="Content-Security-Policy: must be printable ASCII"):
        load_web_config(write_config(tmp_path, text))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_config_means_no_tls_no_auth(tmp_path: Path, text: str) -> None:
    cfg = load_web_config(write_config(tmp_path, text))
    assert cfg.ssl_context is None
    assert cfg.basic_auth_users == {}
    assert cfg.headers == {}


TLS_MINIMAL = "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus: 1\n", "bogus: unknown key"),
        (TLS_MINIMAL + "  bogus: 1\n", "tls_server_config.bogus: unknown key"),
        ("http_server_config:\n  headerz: {}\n", "http_server_config.headerz"),
        ("tls_server_config:\n  cert_file: s.crt\n", "tls_server_config.key_file: required"),
        ("tls_server_config:\n", "tls_server_config.cert_file: required"),
        (TLS_MINIMAL, "tls_server_config.cert_file: cannot read"),
        ("tls_server_config: [\n", "invalid YAML"),
        ("basic_auth_users:\n  a: x\n  a: y\n", "duplicate key"),
        ("- just\n- a list\n", "must be a mapping"),
        (TLS_MINIMAL + "  client_auth_type: Sometimes\n", "tls_server_config.client_auth_type"),
        (
            TLS_MINIMAL + "  client_auth_type: RequireAndVerifyClientCert\n",
            "tls_server_config.client_ca_file: required",
        ),
        (TLS_MINIMAL + "  min_version: TLS14\n", "tls_server_config.min_version"),
        (
            TLS_MINIMAL + "  min_version: TLS13\n  max_version: TLS12\n",
            "min_version: is higher than max_version",
        ),
        (TLS_MINIMAL + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "not supported"),
        (TLS_MINIMAL + "  curve_preferences: [X25519]\n", "not supported"),
        (TLS_MINIMAL + "  cert: inline\n", "tls_server_config.cert: not supported"),
        ("rate_limit:\n  burst: 1\n", "rate_limit: not supported"),
        ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice: is not a bcrypt"),
        ("basic_auth_users: [alice]\n", "basic_auth_users: must be a mapping"),
        ("http_server_config:\n  headers:\n    Content-Type: x\n", "headers.Content-Type"),
        ("http_server_config:\n  headers:\n    Authorization: x\n", "headers.Authorization"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "X-Frame-Options"),
        ("http_server_config:\n  http2: maybe\n", "http_server_config.http2"),
    ],
)
def test_config_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(WebConfigError, match=r"web config .*") as err:
        load_web_config(path)
    assert path in str(err.value)
    assert expected in str(err.value)


def test_config_file_missing(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.yml")
    with pytest.raises(WebConfigError, match=r"absent\.yml: cannot read"):
        load_web_config(path)


def test_config_garbage_cert_and_key(tmp_path: Path) -> None:
    (tmp_path / "s.crt").write_text("not a certificate\n")
    (tmp_path / "s.key").write_text("not a key\n")
    with pytest.raises(WebConfigError, match=r"cert_file: .*s\.crt holds no PEM certificate"):
        load_web_config(write_config(tmp_path, TLS_MINIMAL))


# --- TLS -----------------------------------------------------------------------------------


def test_tls(certs: Path) -> None:
    # Relative paths resolve against the config file's directory, not the working directory.
    cfg = load_web_config(write_config(certs, TLS_CONFIG, "tls.yml"))
    assert cfg.tls_enabled
    with serve(cfg) as server:
        status, headers, body = request(server, context=client_context(certs))
        assert (status, body) == (200, EXPOSITION)
        assert headers["Content-Type"] == CONTENT_TYPE
        # Plain HTTP to the TLS port fails for that client only, with a readable answer.
        answer = raw(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.0 400")
        assert b"HTTPS" in answer
        assert raw(server, b"\x00garbage") == b""
        assert request(server, context=client_context(certs))[0] == 200


def test_tls_silent_client_does_not_block_handshakes(certs: Path) -> None:
    cfg = load_web_config(write_config(certs, TLS_CONFIG, "tls.yml"))
    with serve(cfg, request_timeout=0.5) as server:
        silent = socket.create_connection(server.server_address, timeout=5)
        # Started a handshake but never finished it.
        half = socket.create_connection(server.server_address, timeout=5)
        half.sendall(b"\x16\x03\x01")
        try:
            start = time.monotonic()
            assert request(server, context=client_context(certs))[0] == 200
            assert time.monotonic() - start < 0.4
            assert silent.recv(1) == b""
            assert half.recv(1) == b""
        finally:
            silent.close()
            half.close()


def test_tls_version_limits(certs: Path) -> None:
    cfg = load_web_config(write_config(certs, TLS_CONFIG + "  min_version: TLS13\n", "v13.yml"))
    old_client = client_context(certs)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with serve(cfg) as server:
        with pytest.raises(ssl.SSLError):
            request(server, context=old_client)
        assert request(server, context=client_context(certs))[0] == 200


def test_tls_with_basic_auth(certs: Path, bcrypt_hash: str) -> None:
    text = TLS_CONFIG + f"basic_auth_users:\n  alice: '{bcrypt_hash}'\n"
    cfg = load_web_config(write_config(certs, text, "tls-auth.yml"))
    ctx = client_context(certs)
    with serve(cfg) as server:
        assert request(server, headers=basic("alice", PASSWORD), context=ctx)[0] == 200
        assert request(server, headers=basic("alice", "nope"), context=ctx)[0] == 401
        assert request(server, context=ctx)[0] == 401


def refused(server: ExporterServer, context: ssl.SSLContext) -> bool:
    """Whether the server refuses this client during or right after the TLS handshake."""
    try:
        request(server, context=context)
    except (ssl.SSLError, ConnectionError):
        return True
    return False


def test_mutual_tls(certs: Path) -> None:
    text = TLS_CONFIG + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    cfg = load_web_config(write_config(certs, text, "mtls.yml"))
    with serve(cfg) as server:
        assert request(server, context=client_context(certs, "client"))[0] == 200
        assert refused(server, client_context(certs))  # no client certificate
        assert refused(server, client_context(certs, "server"))  # not signed by the CA
        assert request(server, context=client_context(certs, "client"))[0] == 200


def test_client_allowed_sans(certs: Path) -> None:
    base = TLS_CONFIG + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    good = load_web_config(
        write_config(certs, base + "  client_allowed_sans: [prometheus.example]\n", "san1.yml")
    )
    bad = load_web_config(
        write_config(certs, base + "  client_allowed_sans: [other.example]\n", "san2.yml")
    )
    with serve(good) as server:
        assert request(server, context=client_context(certs, "client"))[0] == 200
    with serve(bad) as server:
        assert refused(server, client_context(certs, "client"))


def test_tls_config_errors(certs: Path) -> None:
    mismatch = "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n"
    with pytest.raises(WebConfigError, match="cert_file/key_file: cannot load"):
        load_web_config(write_config(certs, mismatch, "bad1.yml"))
    no_ca = TLS_CONFIG + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: nope.crt\n"
    with pytest.raises(WebConfigError, match=r"client_ca_file: cannot read .*nope\.crt"):
        load_web_config(write_config(certs, no_ca, "bad2.yml"))
    ca_without_auth = TLS_CONFIG + "  client_ca_file: ca.crt\n"
    with pytest.raises(WebConfigError, match="client_auth_type"):
        load_web_config(write_config(certs, ca_without_auth, "bad3.yml"))
    sans_without_certs = TLS_CONFIG + "  client_allowed_sans: [x]\n"
    with pytest.raises(WebConfigError, match="client_allowed_sans: requires"):
        load_web_config(write_config(certs, sans_without_certs, "bad4.yml"))
