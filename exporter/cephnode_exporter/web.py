"""The exporter's HTTP(S) server: landing page, telemetry endpoint, basic auth and TLS.

Built on http.server/socketserver so the exporter needs no web framework. What those modules
lack for a daemon reachable from a storage network is added here: a cap on concurrent
connections (with a quick 503 beyond it), a read deadline per request so slow or silent
clients cannot pin threads, TLS handshakes done in each connection's own thread (never in
the accept loop), and logging through :mod:`logging` instead of stderr.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import gzip
import hashlib
import html
import http.server
import io
import ipaddress
import logging
import socket
import socketserver
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import bcrypt

from cephnode_exporter.webconfig import WebConfig

__all__ = ["CONTENT_TYPE", "SCRAPE_TIMEOUT_HEADER", "ExporterServer", "make_server"]

log = logging.getLogger("cephnode_exporter.web")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
REALM = "cephnode-exporter"

Render = Callable[[float | None], bytes]

_MAX_LINE = 65536  # request line limit, as http.server's own handler uses
_LINGER = 0.5  # seconds to drain a client's unread input before closing (see _close)
_LINGER_BYTES = 256 * 1024
_AUTH_CACHE_SIZE = 256
_BCRYPT_MAX = 72  # bcrypt only ever used the first 72 bytes; bcrypt>=5 refuses longer input
_LOG_MAX = 300  # characters of client-supplied text in one debug log line
_GZIP_LEVEL = 1  # exposition text compresses well even at the cheapest level; CPU matters more
_FALLBACK_ERRNOS = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}
_ACCEPT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def parse_listen_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (Go's syntax: ``:9100``, ``[::1]:9100``); raise ValueError if bad.

    An empty host means all interfaces. IPv6 literals must be bracketed, as in Go, because
    ``::1:9100`` is ambiguous.
    """
    if address.startswith("["):
        end = address.find("]")
        if end < 0 or not address[end + 1 :].startswith(":"):
            raise ValueError(f"invalid listen address {address!r}: expected [ipv6]:port")
        host, port_text = address[1:end], address[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(
                f"invalid listen address {address!r}: {host!r} is not an IPv6 address"
            ) from None
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError(f"invalid listen address {address!r}: expected host:port or :port")
        if ":" in host:
            raise ValueError(
                f"invalid listen address {address!r}: put IPv6 addresses in brackets, "
                "e.g. [::1]:10060"
            )
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"invalid listen address {address!r}: port must be 0-65535")
    if any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"invalid listen address {address!r}: bad host {host!r}")
    return host, int(port_text)


def make_server(
    listen_address: str,
    telemetry_path: str,
    render: Render,
    web_config: WebConfig | None = None,
    max_connections: int = 64,
    request_timeout: float = 30.0,
) -> ExporterServer:
    """Bind the listening socket and return a server ready for ``serve_forever()``.

    ``render(scrape_timeout)`` is called once per scrape, possibly from several threads at
    once (two Prometheus servers scraping together), with the scrape timeout Prometheus
    announced or None. Raises ValueError for a bad address or argument; bind errors
    (address in use, permission denied) propagate as OSError.
    """
    host, port = parse_listen_address(listen_address)
    if not telemetry_path.startswith("/") or any(
        c.isspace() or ord(c) < 32 for c in telemetry_path
    ):
        raise ValueError(
            f"invalid telemetry path {telemetry_path!r}: "
            "must start with '/' and contain no spaces or control characters"
        )
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    if not request_timeout > 0:
        raise ValueError("request_timeout must be positive")

    candidates = _bind_candidates(host, port, listen_address)
    for i, (family, sockaddr, dual_stack) in enumerate(candidates):
        try:
            server = ExporterServer(
                family,
                sockaddr,
                dual_stack=dual_stack,
                telemetry_path=telemetry_path,
                render=render,
                web_config=web_config,
                max_connections=max_connections,
                request_timeout=request_timeout,
            )
        except OSError as e:
            # Only "this host has no IPv6" moves on to the IPv4 wildcard; "address in use"
            # and friends are real errors.
            if i + 1 < len(candidates) and e.errno in _FALLBACK_ERRNOS:
                log.debug("IPv6 wildcard unavailable, using IPv4", extra={"kv": {"err": e}})
                continue
            raise
        cfg = web_config
        # Debug only: the caller logs "listening" with its own context at info.
        log.debug(
            "socket bound",
            extra={
                "kv": {
                    "address": _format_address(server.server_address),
                    "tls": bool(cfg and cfg.tls_enabled),
                    "basic_auth": bool(cfg and cfg.basic_auth_enabled),
                    "client_auth": cfg.client_auth_type if cfg and cfg.tls_enabled else "none",
                }
            },
        )
        return server
    raise AssertionError("unreachable: no bind candidates")  # pragma: no cover


def _bind_candidates(
    host: str, port: int, address: str
) -> list[tuple[socket.AddressFamily, tuple[Any, ...], bool]]:
    if host == "":
        # All interfaces: one dual-stack IPv6 socket where possible, like Go's ":port".
        out: list[tuple[socket.AddressFamily, tuple[Any, ...], bool]] = []
        if socket.has_dualstack_ipv6():
            out.append((socket.AF_INET6, ("::", port), True))
        out.append((socket.AF_INET, ("0.0.0.0", port), False))
        return out
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"invalid listen address {address!r}: cannot resolve {host!r}: {e}") from e
    family, _, _, _, sockaddr = infos[0]
    dual = family == socket.AF_INET6 and ipaddress.ip_address(sockaddr[0]).is_unspecified
    return [(family, sockaddr, dual)]


def _format_address(addr: tuple[Any, ...]) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes, with a cache.

    bcrypt is slow on purpose (tens of ms at cost 10), too slow to pay on every scrape, so
    verified (user, sha256(password)) pairs are remembered in a small LRU. Only successes
    are cached, so failed guesses cannot evict the scraper's entry. Checks run one at a time
    so a flood of bad passwords burns one core, not all of them.
    """

    def __init__(self, users: dict[str, bytes]) -> None:
        self._users = users
        # Unknown users are checked against a dummy hash of the same cost, so the response
        # time does not reveal whether a user name exists.
        cost = max(int(h[4:6]) for h in users.values())
        self._dummy = bcrypt.hashpw(b"not a password", bcrypt.gensalt(rounds=cost))
        self._cache: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        creds = _parse_basic(header)
        if creds is None:
            return False
        user, password = creds
        key = (user, hashlib.sha256(password).digest())
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True
        hashed = self._users.get(user)
        with self._bcrypt_lock:
            ok = bcrypt.checkpw(password[:_BCRYPT_MAX], hashed or self._dummy)
        if not (ok and hashed is not None):
            return False
        with self._cache_lock:
            self._cache[key] = None
            while len(self._cache) > _AUTH_CACHE_SIZE:
                self._cache.popitem(last=False)
        return True


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) from a Basic Authorization header, or None if it is not one."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        if not sep:
            return None
        return user.decode("utf-8"), password
    except (binascii.Error, ValueError):  # bad base64, non-ASCII header, non-UTF-8 user
        return None


def _parse_scrape_timeout(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    # Reject nan, inf and non-positive values: they are not usable deadlines.
    if not 0 < seconds < float("inf"):
        return None
    return seconds


def _accepts_gzip(values: list[str] | None) -> bool:
    for value in values or ():
        for item in value.split(","):
            name, _, params = item.partition(";")
            if name.strip().lower() != "gzip":
                continue
            q = 1.0
            for param in params.split(";"):
                k, _, v = param.partition("=")
                if k.strip().lower() == "q":
                    try:
                        q = float(v)
                    except ValueError:
                        q = 0.0
            if q > 0:
                return True
    return False


def _landing_page(telemetry_path: str) -> bytes:
    path = html.escape(telemetry_path, quote=True)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n'
        '<head><meta charset="utf-8"><title>cephnode-exporter</title></head>\n'
        "<body>\n"
        "<h1>cephnode-exporter</h1>\n"
        "<p>Prometheus exporter for the host side of Ceph storage nodes.</p>\n"
        f'<p><a href="{path}">Metrics</a> ({path})</p>\n'
        "</body>\n"
        "</html>\n"
    ).encode()


class _DeadlineReader(io.RawIOBase):
    """Socket reads bounded by the handler's per-request deadline, not per recv().

    A plain socket timeout restarts with every byte, so a client trickling one header byte
    every few seconds (slowloris) would never time out.
    """

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._handler.read_deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request deadline exceeded")
        sock = self._handler.connection
        sock.settimeout(remaining)
        return sock.recv_into(buffer)


class _SocketWriter(io.BufferedIOBase):
    """Unbuffered writes with sendall(): a raw socket file may write only part of the data."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        with memoryview(data) as view:
            return view.nbytes


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection: a loop of requests (keep-alive) until close, error or deadline."""

    server: ExporterServer
    protocol_version = "HTTP/1.1"
    # Answer even unparseable or HTTP/0.9-style requests with a status line and headers.
    default_request_version = "HTTP/1.0"
    server_version = "cephnode-exporter"
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s\n"

    def __init__(
        self,
        request: Any,
        client_address: Any,
        server: ExporterServer,
        overloaded: bool,
        request_timeout: float,
    ) -> None:
        self.overloaded = overloaded
        self.request_timeout = request_timeout
        self.read_deadline = 0.0
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.connection = self.request
        # Headers and body go out in separate writes; with Nagle's algorithm the body would
        # wait for the client's delayed ACK (40 ms) on every keep-alive response.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = io.BufferedReader(_DeadlineReader(self), _MAX_LINE)
        self.wfile = _SocketWriter(self.connection)

    def version_string(self) -> str:
        return self.server_version

    # http.server writes an access log and its errors to stderr; send both to logging.
    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):
            # The request line is client-controlled and can be 64 KiB of garbage: cut it.
            message = (format % args)[:_LOG_MAX]
            log.debug("%s", message, extra={"kv": {"client": self.address_string()}})

    log_error = log_message

    def end_headers(self) -> None:
        cfg = self.server.web_config
        if cfg is not None:
            for name, value in cfg.headers.items():
                self.send_header(name, value)
        super().end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The socket may still carry the nearly spent read deadline; give the write its own.
        self.connection.settimeout(self.request_timeout)
        super().send_error(code, message, explain)

    def handle_one_request(self) -> None:
        # Same steps as http.server's version, plus the deadline and our own dispatch (so
        # every method reaches _dispatch and gets a 405, not 501).
        timeout = self.request_timeout
        self.read_deadline = time.monotonic() + timeout
        try:
            self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
            if len(self.raw_requestline) > _MAX_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():  # sends 400/414/431 itself on bad input
                return
            # The request head is in; the response gets the full timeout to be written.
            self.connection.settimeout(timeout)
            self._dispatch()
            self.wfile.flush()
        except TimeoutError:
            log.debug("request timed out", extra={"kv": {"client": self.address_string()}})
            self.close_connection = True

    def _dispatch(self) -> None:
        if self.overloaded:
            self.server.warn_throttled("too many connections, answering 503")
            self._respond(
                HTTPStatus.SERVICE_UNAVAILABLE,
                b"Too many connections, try again later.\n",
                headers={"Retry-After": "1"},
                close=True,
            )
            return
        # Bodies are never read, so the connection cannot be reused after one.
        if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get(
            "Transfer-Encoding"
        ):
            self.close_connection = True
        auth = self.server.auth
        if auth is not None and not auth.check(self.headers.get("Authorization")):
            self._respond(
                HTTPStatus.UNAUTHORIZED,
                b"Unauthorized\n",
                headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
            )
            return
        if self.command not in ("GET", "HEAD"):
            self._respond(
                HTTPStatus.METHOD_NOT_ALLOWED,
                b"Method not allowed\n",
                headers={"Allow": "GET, HEAD"},
            )
            return
        path = urlsplit(self.path).path
        if path == self.server.telemetry_path:
            self._metrics()
        elif path == "/":
            self._respond(
                HTTPStatus.OK, self.server.landing_page, content_type="text/html; charset=utf-8"
            )
        else:
            self._respond(HTTPStatus.NOT_FOUND, b"Not found\n")

    def _metrics(self) -> None:
        if self.command == "HEAD":
            # No scrape for HEAD: it is for liveness checks, and scrapes are expensive.
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.end_headers()
            return
        timeout = _parse_scrape_timeout(self.headers.get(SCRAPE_TIMEOUT_HEADER))
        try:
            body = self.server.render(timeout)
            if not isinstance(body, bytes | bytearray | memoryview):
                raise TypeError(f"render() returned {type(body).__name__}, not bytes")
            body = bytes(body)
        except Exception:
            log.exception("scrape failed", extra={"kv": {"client": self.address_string()}})
            self._respond(
                HTTPStatus.INTERNAL_SERVER_ERROR, b"Scrape failed; see the exporter's log.\n"
            )
            return
        headers = {"Vary": "Accept-Encoding"}
        if _accepts_gzip(self.headers.get_all("Accept-Encoding")):
            body = gzip.compress(body, compresslevel=_GZIP_LEVEL, mtime=0)
            headers["Content-Encoding"] = "gzip"
        self._respond(HTTPStatus.OK, body, content_type=CONTENT_TYPE, headers=headers)

    def _respond(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")  # also sets close_connection
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class ExporterServer(socketserver.TCPServer):
    """A TCP server with a thread per connection, bounded in number, and optional TLS.

    Use :func:`make_server` rather than this constructor. ``server_address`` is the bound
    (host, port); ``serve_forever()`` runs the accept loop, ``shutdown()`` stops it from
    another thread and ``server_close()`` closes the listener and open connections.
    """

    allow_reuse_address = True  # restart without waiting for TIME_WAIT to clear
    request_queue_size = 128  # a burst of scrapes and probes should queue, not be refused

    def __init__(
        self,
        family: socket.AddressFamily,
        sockaddr: tuple[Any, ...],
        *,
        dual_stack: bool,
        telemetry_path: str,
        render: Render,
        web_config: WebConfig | None,
        max_connections: int,
        request_timeout: float,
    ) -> None:
        self.address_family = family
        self.telemetry_path = telemetry_path
        self.render = render
        self.web_config = web_config
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.landing_page = _landing_page(telemetry_path)
        self.ssl_context = web_config.ssl_context if web_config else None
        self.auth = (
            _BasicAuth(web_config.basic_auth_users)
            if web_config and web_config.basic_auth_users
            else None
        )
        self._slots = threading.BoundedSemaphore(max_connections)
        # Beyond max_connections a few more threads answer 503 (they must read the request,
        # and do the TLS handshake, to answer properly); beyond those, connections are closed.
        self._spare = threading.BoundedSemaphore(max(4, max_connections // 4))
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._serving = False
        self._stopped = False
        self._last_warning: dict[str, float] = {}
        super().__init__(sockaddr, _Handler, bind_and_activate=False)  # type: ignore[arg-type]
        try:
            if dual_stack:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def server_bind(self) -> None:
        super().server_bind()
        self.server_address = self.socket.getsockname()[:2]

    @property
    def tls_enabled(self) -> bool:
        return self.ssl_context is not None

    @property
    def active_connections(self) -> int:
        """Connections being handled right now (including ones answered with 503)."""
        with self._lock:
            return len(self._conns)

    def serve_forever(self, poll_interval: float = 0.2) -> None:
        with self._lock:
            if self._stopped:
                return
            self._serving = True
        try:
            super().serve_forever(poll_interval)
        finally:
            with self._lock:
                self._serving = False

    def shutdown(self) -> None:
        """Stop serve_forever() (within poll_interval); safe if it never ran."""
        with self._lock:
            self._stopped = True
            serving = self._serving
        if serving:
            super().shutdown()

    def server_close(self) -> None:
        """Close the listener and cut open connections so their threads end quickly."""
        super().server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(conn, socket.SHUT_RDWR)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return self.socket.accept()
        except OSError as e:
            if e.errno in _ACCEPT_ERRNOS:
                # Out of file descriptors or memory: the listener stays readable, so pause
                # instead of spinning on accept().
                self.warn_throttled(f"accept failed: {e}")
                time.sleep(0.1)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to its own thread; never block the accept loop."""
        if self._slots.acquire(blocking=False):
            slot, overloaded = self._slots, False
        elif self._spare.acquire(blocking=False):
            slot, overloaded = self._spare, True
        else:
            self.warn_throttled("too many connections, closing new ones")
            self.shutdown_request(request)
            return
        self._track(request)
        thread = threading.Thread(
            target=self._connection,
            args=(request, client_address, slot, overloaded),
            name=f"web-{_format_address(client_address)}",
            daemon=True,
        )
        try:
            thread.start()
        except RuntimeError:  # cannot start new thread
            self._untrack(request)
            slot.release()
            self.shutdown_request(request)
            self.warn_throttled("cannot start a connection thread")

    def _connection(
        self, sock: socket.socket, client: Any, slot: threading.BoundedSemaphore, overloaded: bool
    ) -> None:
        conn = sock
        timeout = min(self.request_timeout, 2.0) if overloaded else self.request_timeout
        try:
            conn.settimeout(timeout)
            if self.ssl_context is not None:
                start = time.monotonic()
                if not self._looks_like_tls(conn, client):
                    return
                conn = self.ssl_context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
                self._retrack(sock, conn)
                # Peek and handshake share one timeout; CPython's ssl applies a socket
                # timeout to the handshake as a whole, not per read.
                conn.settimeout(max(0.001, timeout - (time.monotonic() - start)))
                conn.do_handshake()
                if self.web_config is not None and not self.web_config.client_san_allowed(
                    conn.getpeercert()
                ):
                    log.warning(
                        "client certificate has no allowed SAN",
                        extra={"kv": {"client": client[0]}},
                    )
                    return
            _Handler(conn, client, self, overloaded, timeout)
        except OSError as e:  # resets, TLS failures, timeouts: the client's doing, not ours
            log.debug("connection ended", extra={"kv": {"client": client[0], "err": e}})
        except Exception:
            log.exception("connection handler failed", extra={"kv": {"client": client[0]}})
        finally:
            self._untrack(conn)
            self._close(conn)
            slot.release()

    def _looks_like_tls(self, sock: socket.socket, client: Any) -> bool:
        """Peek at the first byte: answer plain HTTP on the TLS port with a readable 400."""
        first = sock.recv(1, socket.MSG_PEEK)
        if not first:
            return False
        if first == b"\x16":  # TLS handshake record
            return True
        log.debug("plain HTTP on the TLS port", extra={"kv": {"client": client[0]}})
        if first.isalpha():
            body = b"Client sent an HTTP request to an HTTPS server.\n"
            sock.sendall(
                b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )
        return False

    def _close(self, conn: socket.socket) -> None:
        """Close after draining what the client still sends.

        Closing with unread input makes the kernel send a reset, which can destroy our
        response (a 503, 400, 414) before the client reads it. So: end our side, read and
        discard for a moment, then close. The raw socket methods are used so this works
        the same on TLS sockets.
        """
        try:
            socket.socket.shutdown(conn, socket.SHUT_WR)
            deadline = time.monotonic() + _LINGER
            drained = 0
            while drained < _LINGER_BYTES:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                conn.settimeout(remaining)
                data = socket.socket.recv(conn, 65536)
                if not data:
                    break
                drained += len(data)
        except OSError:
            pass
        finally:
            conn.close()

    def _track(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.add(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.discard(conn)

    def _retrack(self, old: socket.socket, new: socket.socket) -> None:
        with self._lock:
            self._conns.discard(old)
            self._conns.add(new)

    def warn_throttled(self, message: str, every: float = 10.0) -> None:
        """Log a warning at most once per ``every`` seconds, for things a flood repeats."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_warning.get(message, -every) < every:
                return
            self._last_warning[message] = now
        log.warning(message)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver's default prints a traceback to stderr.
        log.exception("error in the accept loop", extra={"kv": {"client": client_address}})
