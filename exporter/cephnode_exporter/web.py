"""The exporter's HTTP(S) server: landing page, telemetry endpoint, basic auth and TLS.

Built on http.server/socketserver so the exporter needs no web framework. What those modules
lack for a daemon reachable from a storage network is added here: a cap on concurrent
connections (with a quick 503 beyond it), short deadlines for the TLS handshake and the
request head so slow or silent clients cannot pin threads, idle connections that give way
to a complete request when every slot is taken, TLS handshakes done in each connection's
own thread (never in the accept loop), basic auth that a flood of wrong passwords cannot
turn into a denial of service, a graceful stop, and logging through :mod:`logging`
instead of stderr.

Beyond the telemetry path it behaves as node_exporter does with prometheus/exporter-toolkit
(web/tls_config.go: ``ListenAndServe``, ``ServeMultiple``): it listens on every address
given, or on the sockets systemd passes (socket activation), answers ``/-/healthy`` and
``/-/ready`` as Prometheus' own web/web.go does, and applies basic auth to every path,
as exporter-toolkit's ``webHandler`` does.
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
import math
import os
import selectors
import socket
import socketserver
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import bcrypt

from cephnode_exporter.webconfig import WebConfig

__all__ = [
    "CONTENT_TYPE",
    "OPENMETRICS_CONTENT_TYPE",
    "SCRAPE_TIMEOUT_HEADER",
    "ExporterServer",
    "FilterError",
    "ScrapeOptions",
    "make_server",
]

log = logging.getLogger("cephnode_exporter.web")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# prometheus_client.openmetrics.exposition.CONTENT_TYPE_LATEST, the encoder used for it.
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Prometheus' own liveness and readiness paths (prometheus/prometheus web/web.go).
HEALTHY_PATH = "/-/healthy"
READY_PATH = "/-/ready"
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
REALM = "cephnode-exporter"

Render = Callable[[float | None], bytes]


@dataclass(frozen=True)
class ScrapeOptions:
    """What a scrape asked for beyond the plain text of every collector.

    ``collectors``: the ``collect[]`` query parameters, sorted and without repeats
    (node_exporter's NewNodeCollector, collector/collector.go, keeps them in a set: order
    and repeats mean nothing), or None for every enabled collector.
    ``openmetrics``: the client negotiated ``application/openmetrics-text``.
    """

    timeout: float | None
    collectors: tuple[str, ...] | None = None
    openmetrics: bool = False


# Called instead of Render when a scrape has collect[] parameters or wants OpenMetrics;
# the plain scrape keeps the one-argument path and its fast text encoder.
RenderFor = Callable[[ScrapeOptions], bytes]


class FilterError(ValueError):
    """A collect[] parameter names no enabled collector: the client's mistake (400)."""


_MAX_LINE = 65536  # request line limit, as http.server's own handler uses
_LINGER = 0.5  # seconds to drain a client's unread input before closing (see _close)
_LINGER_BYTES = 256 * 1024
# A client on a LAN sends its request head, and completes a TLS handshake, within
# milliseconds; a few seconds covers slow links and loaded hosts while keeping a silent
# or trickling peer (slowloris) from holding a connection slot for long.
HEADER_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 5.0
# Connections beyond max_connections only read their request (to claim a slot or get a
# 503), so they get less time still.
_OVERFLOW_TIMEOUT = 2.0
# A slot holder that has sent no complete request for this long is idle: a complete
# request that finds every slot taken closes the longest idle one and takes its slot.
# Keep-alive connections may be closed when idle (RFC 9112, section 9.5), and a new one
# has had ample time to send its request.
IDLE_GRACE = 1.0
_AUTH_CACHE_SIZE = 256
# Failed password checks per peer address and window before its unverified credentials
# get 429: each check costs the exporter one bcrypt run (up to about 1 s of CPU).
AUTH_MAX_FAILURES = 10
AUTH_WINDOW = 60.0
_AUTH_PEERS = 4096  # peer addresses remembered for the failure limit (LRU)
# bcrypt checks running at once, across all peers; bcrypt releases the GIL, so this many
# cores at most go to password checks and the rest stay with scrapes and the OSDs.
_AUTH_CONCURRENCY = 4
_AUTH_LOG_EVERY = 10.0  # seconds between "basic auth failed" log lines under a flood
_BCRYPT_MAX = 72  # bcrypt only ever used the first 72 bytes; bcrypt>=5 refuses longer input
_LOG_MAX = 300  # characters of client-supplied text in one debug log line
_LOG_USER = 64  # characters of a client-supplied user name in a log line
_GZIP_LEVEL = 1  # exposition text compresses well even at the cheapest level; CPU matters more
_FALLBACK_ERRNOS = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}
# socketserver's choice: poll() where it exists; epoll gains nothing for a few listeners.
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)
_REQUEST_QUEUE_SIZE = 128  # a burst of scrapes and probes should queue, not be refused
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
    listen_address: str | Sequence[str],
    telemetry_path: str,
    render: Render,
    web_config: WebConfig | None = None,
    max_connections: int = 64,
    request_timeout: float = 30.0,
    header_timeout: float = HEADER_TIMEOUT,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    render_for: RenderFor | None = None,
    listeners: Sequence[socket.socket] | None = None,
) -> ExporterServer:
    """Bind the listening sockets and return a server ready for ``serve_forever()``.

    ``listen_address`` is one address or several: the server listens on each, sharing one
    connection limit, as exporter-toolkit's ``ListenAndServe`` serves every
    ``--web.listen-address`` (web/tls_config.go). ``listeners``, when given, are
    listening sockets made elsewhere (systemd socket activation) and the addresses are
    not bound. ``render(scrape_timeout)`` is called once per plain scrape, possibly from
    several threads at once (two Prometheus servers scraping together), with the scrape
    timeout Prometheus announced or None; ``render_for(ScrapeOptions)`` for a scrape
    with ``collect[]`` parameters or one that negotiated OpenMetrics (without it,
    ``collect[]`` gets a 400 and OpenMetrics falls back to the text format).
    ``request_timeout`` bounds writing a response and a keep-alive connection's wait for
    its next request; ``header_timeout`` the arrival of a request head (from the
    connection's start, or from the first byte on a kept-alive one) and
    ``handshake_timeout`` the TLS handshake; both are capped at ``request_timeout``.
    Raises ValueError for a bad address or argument; bind errors (address in use,
    permission denied) propagate as OSError, and no socket stays bound then.
    """
    addresses = [listen_address] if isinstance(listen_address, str) else list(listen_address)
    if listeners is None:
        if not addresses:
            raise ValueError("no listen address")
        # Every address is checked before any is bound: a typo in the second one must not
        # leave the first bound by a process that is about to exit.
        parsed = [(address, *parse_listen_address(address)) for address in addresses]
    if not telemetry_path.startswith("/") or any(
        c.isspace() or ord(c) < 32 for c in telemetry_path
    ):
        raise ValueError(
            f"invalid telemetry path {telemetry_path!r}: "
            "must start with '/' and contain no spaces or control characters"
        )
    if telemetry_path in (HEALTHY_PATH, READY_PATH):
        raise ValueError(f"invalid telemetry path {telemetry_path!r}: reserved for probes")
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    for name, value in (
        ("request_timeout", request_timeout),
        ("header_timeout", header_timeout),
        ("handshake_timeout", handshake_timeout),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be positive")

    if listeners is not None:
        if not listeners:
            raise ValueError("no listening sockets")
        socks = list(listeners)
    else:
        socks = []
        try:
            for address, host, port in parsed:
                socks.append(_listen(host, port, address))
        except BaseException:
            for sock in socks:
                sock.close()
            raise
    try:
        server = ExporterServer(
            socks,
            telemetry_path=telemetry_path,
            render=render,
            render_for=render_for,
            web_config=web_config,
            max_connections=max_connections,
            request_timeout=request_timeout,
            header_timeout=min(header_timeout, request_timeout),
            handshake_timeout=min(handshake_timeout, request_timeout),
        )
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    cfg = web_config
    for bound in server.server_addresses:
        # Debug only: the caller logs "listening" with its own context at info.
        log.debug(
            "socket bound",
            extra={
                "kv": {
                    "address": format_address(bound),
                    "tls": bool(cfg and cfg.tls_enabled),
                    "basic_auth": bool(cfg and cfg.basic_auth_enabled),
                    "client_auth": cfg.client_auth_type if cfg and cfg.tls_enabled else "none",
                }
            },
        )
    return server


def _listen(host: str, port: int, address: str) -> socket.socket:
    """A listening TCP socket for one parsed address (the IPv6 wildcard falls back to IPv4)."""
    candidates = _bind_candidates(host, port, address)
    for i, (family, sockaddr, dual_stack) in enumerate(candidates):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            # Restart without waiting for TIME_WAIT to clear, as socketserver's
            # allow_reuse_address does.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if dual_stack:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
            sock.listen(_REQUEST_QUEUE_SIZE)
        except OSError as e:
            sock.close()
            # Only "this host has no IPv6" moves on to the IPv4 wildcard; "address in use"
            # and friends are real errors.
            if i + 1 < len(candidates) and e.errno in _FALLBACK_ERRNOS:
                log.debug("IPv6 wildcard unavailable, using IPv4", extra={"kv": {"err": e}})
                continue
            raise
        except BaseException:
            sock.close()
            raise
        return sock
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


def _sock_address(sock: socket.socket) -> tuple[Any, ...]:
    """(host, port) of a listening socket; (path, 0) for a Unix socket systemd passed."""
    name = sock.getsockname()
    if isinstance(name, tuple):
        return tuple(name[:2])
    if isinstance(name, bytes):  # an abstract Unix socket
        name = name.decode("utf-8", "replace")
    return (name, 0)


def format_address(addr: tuple[Any, ...]) -> str:
    """``host:port``, ``[v6]:port``, or the path of a Unix socket."""
    if addr[1] == 0 and "/" in str(addr[0]):
        return str(addr[0])
    return _format_address(addr)


def _format_address(addr: tuple[Any, ...]) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


AUTH_OK, AUTH_DENIED, AUTH_THROTTLED = "ok", "denied", "throttled"


class _Peer:
    """Failed checks of one peer address, for the failure limit."""

    __slots__ = ("checking", "failures", "warned")

    def __init__(self, max_failures: int) -> None:
        self.checking = False  # a bcrypt check for this peer is running
        self.failures: deque[float] = deque(maxlen=max_failures)  # monotonic times
        self.warned = False  # the current lock-out was logged


class _BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    bcrypt is slow on purpose (tens of ms at cost 10, about 1 s at 14), too slow to pay on
    every scrape and an amplifier for anyone who can reach the port. So:

    * Verified (user, sha256(password)) pairs are remembered in a small LRU and answered
      without bcrypt and without waiting for anything. Only successes are cached, so
      failed guesses cannot evict the scraper's entry.
    * Checks run in parallel (bcrypt releases the GIL), at most ``_AUTH_CONCURRENCY`` at
      once, and at most one per peer address: a flood from one address costs one core,
      and never queues a different client's check behind it.
    * A peer with ``max_failures`` failed checks within ``window`` seconds gets 429 for
      unverified credentials until the oldest failure leaves the window; cached ones still
      pass. Failed checks are logged at most once per ``_AUTH_LOG_EVERY`` seconds.
    * Unknown users are checked against the costliest configured hash (and refused), so
      the response time does not reveal whether a user exists. No hash is made at start:
      at a high cost that alone took hours.
    """

    def __init__(
        self,
        users: dict[str, bytes],
        max_failures: int = AUTH_MAX_FAILURES,
        window: float = AUTH_WINDOW,
    ) -> None:
        self._users = users
        self._decoy = max(users.values(), key=lambda h: int(h[4:6]))
        self._max_failures = max_failures
        self._window = window
        self._cache: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._peers: OrderedDict[str, _Peer] = OrderedDict()
        self._lock = threading.Lock()  # cache, peers and log state; never held over bcrypt
        self._checks = threading.BoundedSemaphore(_AUTH_CONCURRENCY)
        self._logged_at = -math.inf
        self._unlogged = 0

    def check(self, header: str | None, client: str) -> tuple[str, float]:
        """(AUTH_OK | AUTH_DENIED | AUTH_THROTTLED, seconds to wait when throttled)."""
        creds = _parse_basic(header)
        if creds is None:
            return AUTH_DENIED, 0.0  # no bcrypt run: not counted as a failed check
        user, password = creds
        key = (user, hashlib.sha256(password).digest())
        now = time.monotonic()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return AUTH_OK, 0.0
            peer = self._peer(_peer_key(client))
            wait = self._lockout(peer, now)
            if wait > 0:
                warn, peer.warned = not peer.warned, True
            elif peer.checking:
                # One check per address at a time: a second request from it is told to
                # come back in a second instead of holding a connection slot here.
                return AUTH_THROTTLED, 1.0
            else:
                peer.checking = True
        if wait > 0:
            if warn:
                log.warning(
                    "too many failed logins, answering 429",
                    extra={"kv": {"client": client, "retry_after": math.ceil(wait)}},
                )
            return AUTH_THROTTLED, wait
        return self._verify(user, password, key, peer, client)

    def _verify(
        self, user: str, password: bytes, key: tuple[str, bytes], peer: _Peer, client: str
    ) -> tuple[str, float]:
        hashed = self._users.get(user)
        ok = False
        try:
            with self._checks:
                ok = bcrypt.checkpw(password[:_BCRYPT_MAX], hashed or self._decoy)
            ok = ok and hashed is not None
        finally:
            now = time.monotonic()
            with self._lock:
                peer.checking = False
                if ok:
                    self._cache[key] = None
                    while len(self._cache) > _AUTH_CACHE_SIZE:
                        self._cache.popitem(last=False)
                else:
                    peer.failures.append(now)
                    self._unlogged += 1
                    due = now - self._logged_at >= _AUTH_LOG_EVERY
                    if due:
                        failures, self._unlogged, self._logged_at = self._unlogged, 0, now
        if ok:
            return AUTH_OK, 0.0
        if due:
            # One line per interval under a flood; "failures" counts every failed check
            # since the previous line, this one included.
            log.warning(
                "basic auth failed",
                extra={"kv": {"user": user[:_LOG_USER], "client": client, "failures": failures}},
            )
        return AUTH_DENIED, 0.0

    def _peer(self, key: str) -> _Peer:
        """The peer's entry, created if new; the least recently used idle one makes room."""
        peer = self._peers.get(key)
        if peer is not None:
            self._peers.move_to_end(key)
            return peer
        if len(self._peers) >= _AUTH_PEERS:
            for old_key, old in self._peers.items():
                if not old.checking:
                    del self._peers[old_key]
                    break
        peer = self._peers[key] = _Peer(self._max_failures)
        return peer

    def _lockout(self, peer: _Peer, now: float) -> float:
        """Seconds until the peer may have its credentials checked again; 0 if it may now."""
        if len(peer.failures) < self._max_failures:
            return 0.0
        wait = self._window - (now - peer.failures[0])
        if wait <= 0:
            peer.warned = False
            return 0.0
        return wait


def _peer_key(host: str) -> str:
    """The unit the failure limit counts: an IPv4 address, or an IPv6 /64.

    One IPv6 host usually has a whole /64 to pick source addresses from; IPv4-mapped
    addresses (a dual-stack listener) count as the IPv4 address.
    """
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


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


def _weighted(values: list[str] | None) -> list[tuple[str, float]]:
    """The items of Accept-style headers, lower-cased, with their q value (RFC 9110
    section 12.4.2: 1 when absent; an unreadable q counts as 0, not acceptable)."""
    out: list[tuple[str, float]] = []
    for value in values or ():
        for item in value.split(","):
            name, _, params = item.partition(";")
            q = 1.0
            for param in params.split(";"):
                k, _, v = param.partition("=")
                if k.strip().lower() == "q":
                    try:
                        q = float(v)
                    except ValueError:
                        q = 0.0
            out.append((name.strip().lower(), q))
    return out


def _accepts_gzip(values: list[str] | None) -> bool:
    return any(name == "gzip" and q > 0 for name, q in _weighted(values))


def _wants_openmetrics(values: list[str] | None) -> bool:
    """Whether the Accept header prefers OpenMetrics to the text format.

    Like prometheus/common's expfmt.Negotiate: the acceptable types in order of their
    q value (the header's order among equals), and the first one known wins; q=0 means
    "not acceptable". Prometheus sends ``application/openmetrics-text;version=1.0.0,
    ...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1``; curl sends ``*/*`` (text).
    """
    if not values:
        return False
    ranked = [(-q, i, media) for i, (media, q) in enumerate(_weighted(values)) if q > 0]
    for _, _, media in sorted(ranked):
        if media == "application/openmetrics-text":
            return True
        if media in ("text/plain", "*/*", "text/*"):
            return False
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
        conn: _Conn,
        head_deadline: float,
    ) -> None:
        self.conn = conn
        self.request_timeout = server.request_timeout
        # The first request's head is due by head_deadline (counted from the accept or
        # the end of the TLS handshake); later ones get their own (handle_one_request).
        self.read_deadline = head_deadline
        self.first_request = True
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.connection = self.request
        # Headers and body go out in separate writes; with Nagle's algorithm the body would
        # wait for the client's delayed ACK (40 ms) on every keep-alive response.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = io.BufferedReader(_DeadlineReader(self), _MAX_LINE)
        self.rfile = self.reader
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
        # Same steps as http.server's version, plus the deadlines, the slot accounting and
        # our own dispatch (so every method reaches _dispatch and gets a 405, not 501).
        server = self.server
        try:
            if self.first_request:
                self.first_request = False
            else:
                # Keep-alive: wait for the next request as long as the request timeout;
                # from its first byte, its head has header_timeout to arrive.
                self.read_deadline = time.monotonic() + self.request_timeout
                if not self.reader.peek(1):
                    self.close_connection = True
                    return
                self.read_deadline = time.monotonic() + server.header_timeout
            self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
            if len(self.raw_requestline) > _MAX_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline.split()) == 2:
                self._refuse_http09()
                return
            if not self.parse_request():  # sends 400/414/431 itself on bad input
                return
            # The request head is in; the response gets the full timeout to be written.
            self.connection.settimeout(self.request_timeout)
            refusal = server.begin_request(self.conn)
            try:
                if refusal is None:
                    self._dispatch()
                elif refusal != _EVICTED:  # an evicted connection's socket is shut already
                    server.warn_throttled(f"{refusal}, answering 503")
                    self._respond(
                        HTTPStatus.SERVICE_UNAVAILABLE,
                        f"{refusal.capitalize()}, try again later.\n".encode(),
                        headers={"Retry-After": "1"},
                        close=True,
                    )
                else:
                    self.close_connection = True
                self.wfile.flush()
            finally:
                server.end_request(self.conn)
        except TimeoutError:
            log.debug("request timed out", extra={"kv": {"client": self.address_string()}})
            self.close_connection = True

    def _refuse_http09(self) -> None:
        """Answer a request line without a version (HTTP/0.9) at once, and close.

        http.server would go on to read headers, which an HTTP/0.9 client never sends,
        so the connection sat in its slot until the deadline. HTTP/0.9 has no status line
        or headers; the 400 is for a person typing into telnet or nc.
        """
        line = self.raw_requestline.decode("latin-1").rstrip("\r\n")
        self.requestline, self.request_version, self.command = line, "", ""
        self._respond(
            HTTPStatus.BAD_REQUEST,
            b"HTTP/0.9 requests are not supported; send the version too, "
            b"e.g. GET /metrics HTTP/1.1\n",
            close=True,
        )

    def _dispatch(self) -> None:
        # Bodies are never read, so the connection cannot be reused after one.
        if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get(
            "Transfer-Encoding"
        ):
            self.close_connection = True
        auth = self.server.auth
        if auth is not None:
            result, wait = auth.check(self.headers.get("Authorization"), self.client_address[0])
            if result == AUTH_THROTTLED:
                self._respond(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    b"Too many failed logins from this address, try again later.\n",
                    headers={"Retry-After": str(max(1, math.ceil(wait)))},
                    close=True,
                )
                return
            if result != AUTH_OK:
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
        url = urlsplit(self.path)
        path = url.path
        if path == self.server.telemetry_path:
            self._metrics(url.query)
        elif path == HEALTHY_PATH:
            # Alive as long as it answers; what Prometheus' web/web.go answers, by name.
            self._respond(HTTPStatus.OK, b"cephnode-exporter is Healthy.\n")
        elif path == READY_PATH:
            if self.server.ready and not self.server.stopping:
                self._respond(HTTPStatus.OK, b"cephnode-exporter is Ready.\n")
            else:
                self._respond(HTTPStatus.SERVICE_UNAVAILABLE, b"Service Unavailable\n")
        elif path == "/":
            self._respond(
                HTTPStatus.OK, self.server.landing_page, content_type="text/html; charset=utf-8"
            )
        else:
            self._respond(HTTPStatus.NOT_FOUND, b"Not found\n")

    def _metrics(self, query: str) -> None:
        render_for = self.server.render_for
        openmetrics = render_for is not None and _wants_openmetrics(self.headers.get_all("Accept"))
        content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else CONTENT_TYPE
        collectors: tuple[str, ...] | None = None
        if query:  # the plain scrape has none and skips this
            names = parse_qs(query, keep_blank_values=True).get("collect[]")
            if names:
                # A set, as node_exporter's NewNodeCollector makes of them; sorted so that
                # the same subset always shares the same collection round (scrape.py).
                collectors = tuple(sorted(set(names)))
        if self.command == "HEAD":
            # No scrape for HEAD: it is for liveness checks, and scrapes are expensive.
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            return
        timeout = _parse_scrape_timeout(self.headers.get(SCRAPE_TIMEOUT_HEADER))
        try:
            if collectors is None and not openmetrics:
                body = self.server.render(timeout)
            elif render_for is None:
                raise FilterError("collect[] is not supported here")
            else:
                body = render_for(ScrapeOptions(timeout, collectors, openmetrics))
            if not isinstance(body, bytes | bytearray | memoryview):
                raise TypeError(f"render() returned {type(body).__name__}, not bytes")
            body = bytes(body)
        except FilterError as exc:
            # node_exporter's handler.go: 400 and the reason, logged at warning level.
            message = f"Couldn't create filtered metrics handler: {exc}"
            log.warning(
                "couldn't create filtered metrics handler",
                extra={"kv": {"client": self.address_string(), "err": str(exc)[:_LOG_MAX]}},
            )
            self._respond(
                HTTPStatus.BAD_REQUEST,
                message.encode("utf-8", "replace") + b"\n",
                headers={"X-Content-Type-Options": "nosniff"},
            )
            return
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
        if render_for is not None:
            headers["Vary"] = "Accept, Accept-Encoding"
        self._respond(HTTPStatus.OK, body, content_type=content_type, headers=headers)

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
        if close or self.server.stopping:
            self.send_header("Connection", "close")  # also sets close_connection
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


_EVICTED = "evicted"
_OVERLOADED = "too many connections"
_STOPPING = "shutting down"


class _Conn:
    """One accepted connection's place in the server's accounting.

    ``slot``: it holds one of the ``max_connections`` slots; otherwise it is an overflow
    connection that may only read its request, then claim a slot or get a 503.
    ``counted``: it still counts against its kind's cap; an evicted connection stops
    counting at once, because its slot went to the request that evicted it.
    ``idle_since``: when it last had no request in progress (its start, or the end of its
    last response); None while a request is served.
    """

    __slots__ = ("client", "counted", "evicted", "idle_since", "slot", "sock")

    def __init__(self, sock: socket.socket, client: Any, slot: bool, now: float) -> None:
        self.sock = sock
        self.client = client
        self.slot = slot
        self.counted = True
        self.idle_since: float | None = now
        self.evicted = False


class ExporterServer(socketserver.TCPServer):
    """A TCP server with a thread per connection, bounded in number, and optional TLS.

    Use :func:`make_server` rather than this constructor. ``server_address`` is the bound
    (host, port); ``serve_forever()`` runs the accept loop, ``shutdown()`` stops it from
    another thread, ``drain()`` lets requests in progress finish, and ``server_close()``
    closes the listener and open connections.

    Connections take one of ``max_connections`` slots when accepted. Beyond those, a few
    overflow connections read their request: it takes a slot freed meanwhile, or the slot
    of the longest idle connection (idle for at least IDLE_GRACE), or gets a quick 503.
    So peers that connect and send nothing, or trickle, cannot keep a scraper out for
    longer than IDLE_GRACE, while requests in progress are never cut.
    """

    allow_reuse_address = True  # restart without waiting for TIME_WAIT to clear
    request_queue_size = _REQUEST_QUEUE_SIZE

    def __init__(
        self,
        listeners: Sequence[socket.socket],
        *,
        telemetry_path: str,
        render: Render,
        web_config: WebConfig | None,
        max_connections: int,
        request_timeout: float,
        header_timeout: float = HEADER_TIMEOUT,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        render_for: RenderFor | None = None,
    ) -> None:
        if not listeners:
            raise ValueError("no listening sockets")
        self.listeners = list(listeners)
        self.address_family = self.listeners[0].family
        self.telemetry_path = telemetry_path
        self.render = render
        self.render_for = render_for
        # /-/ready answers 200 only after mark_ready(): the scraper is built and the
        # accept loop runs (cli.cmd_serve), and no longer once a stop has begun.
        self.ready = False
        self.web_config = web_config
        self.request_timeout = request_timeout
        self.header_timeout = header_timeout
        self.handshake_timeout = handshake_timeout
        self.max_connections = max_connections
        self.landing_page = _landing_page(telemetry_path)
        self.ssl_context = web_config.ssl_context if web_config else None
        self.auth = (
            _BasicAuth(web_config.basic_auth_users)
            if web_config and web_config.basic_auth_users
            else None
        )
        # Beyond max_connections a few more threads read requests (they must, and do the
        # TLS handshake, to claim a slot or answer 503 properly); beyond those, the longest
        # waiting of them is closed for a new one, or the new one is closed.
        self.max_overflow = max(4, max_connections // 4)
        self._slots_used = 0
        self._overflow_used = 0
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a request ended or a conn closed
        self._serving = False
        self._stopped = False
        self.stopping = False  # drain() started: answer what is in progress, then close
        self._abort_drain = False
        self._last_warning: dict[str, float] = {}
        self._shut_down = threading.Event()
        self._shut_down.set()
        self.server_addresses = [_sock_address(sock) for sock in self.listeners]
        # The sockets are bound and listening already (make_server, or systemd): skip
        # TCPServer.__init__, which would make and bind a socket of its own.
        socketserver.BaseServer.__init__(
            self,
            self.server_addresses[0],
            _Handler,  # type: ignore[arg-type]
        )
        self.socket = self.listeners[0]
        self.server_address = self.server_addresses[0]

    def mark_ready(self) -> None:
        """From now on /-/ready answers 200 (until a stop begins)."""
        self.ready = True

    @property
    def tls_enabled(self) -> bool:
        return self.ssl_context is not None

    @property
    def active_connections(self) -> int:
        """Connections being handled right now (including ones answered with 503).

        Not the ones closed to make room for another: their sockets are shut and their
        threads end as soon as they next run, which under load can be after the request
        that closed them has been answered.
        """
        with self._lock:
            return sum(1 for c in self._conns if not c.evicted)

    def serve_forever(self, poll_interval: float = 0.2) -> None:
        """Accept on every listener until shutdown().

        socketserver's own loop waits on one socket; this one waits on all of them, as
        exporter-toolkit's ``ServeMultiple`` serves each listener (web/tls_config.go),
        with one accept loop and one connection limit for all.
        """
        with self._lock:
            if self._stopped:
                return
            self._serving = True
            self._shut_down.clear()
        try:
            with _Selector() as selector:
                for sock in self.listeners:
                    selector.register(sock, selectors.EVENT_READ)
                while not self._stopped:
                    for key, _ in selector.select(poll_interval):
                        if self._stopped:
                            break
                        self._accept(key.fileobj)  # type: ignore[arg-type]
                    self.service_actions()
        finally:
            with self._lock:
                self._serving = False
            self._shut_down.set()

    def _accept(self, listener: socket.socket) -> None:
        """One connection from ``listener``, as socketserver's _handle_request_noblock."""
        try:
            request, client_address = self.get_request(listener)
        except OSError:
            return
        try:
            self.process_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
            self.shutdown_request(request)
        except BaseException:
            self.shutdown_request(request)
            raise

    def shutdown(self) -> None:
        """Stop serve_forever() (within poll_interval); safe if it never ran."""
        with self._lock:
            self._stopped = True
            self.ready = False
            serving = self._serving
        if serving:
            self._shut_down.wait()

    def drain(self, timeout: float) -> int:
        """Stop taking connections and requests; give those in progress ``timeout`` seconds.

        For a graceful stop (SIGTERM), after ``shutdown()``: the listener is closed, idle
        connections are closed now, requests in progress are answered (with
        ``Connection: close``), and whatever is still running after ``timeout`` is cut by
        ``server_close()``. Returns how many requests were still in progress then.
        ``abort_drain()`` (a second signal) ends the wait early.
        """
        deadline = time.monotonic() + timeout
        for sock in self.listeners:
            with contextlib.suppress(OSError):
                sock.close()  # pending connections are refused, not left in the backlog
        with self._lock:
            self.stopping = True
            self.ready = False
            for conn in self._conns:
                if conn.idle_since is not None:
                    _shut(conn.sock)
            while True:
                busy = sum(1 for c in self._conns if c.idle_since is None and c.counted)
                remaining = deadline - time.monotonic()
                if busy == 0 or remaining <= 0 or self._abort_drain:
                    return busy
                # Short waits: abort_drain() runs in a signal handler and takes no lock.
                self._changed.wait(min(remaining, 0.1))

    def abort_drain(self) -> None:
        """Make a running drain() return now (safe to call from a signal handler)."""
        self._abort_drain = True

    def server_close(self) -> None:
        """Close the listeners and cut open connections so their threads end quickly."""
        for sock in self.listeners:
            with contextlib.suppress(OSError):
                sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _shut(conn.sock)

    def get_request(self, listener: socket.socket | None = None) -> tuple[socket.socket, Any]:
        try:
            sock, client = (listener or self.socket).accept()
            if not isinstance(client, tuple):  # a Unix socket's peer has no address
                client = ("local", 0)
            return sock, client
        except OSError as e:
            if e.errno in _ACCEPT_ERRNOS:
                # Out of file descriptors or memory: the listener stays readable, so pause
                # instead of spinning on accept().
                self.warn_throttled(f"accept failed: {e}")
                time.sleep(0.1)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to its own thread; never block the accept loop."""
        now = time.monotonic()
        conn: _Conn | None = None
        with self._lock:
            if self._slots_used < self.max_connections:
                self._slots_used += 1
                conn = _Conn(request, client_address, True, now)
            else:
                if self._overflow_used >= self.max_overflow:
                    # Overflow connections that still have no request have had their
                    # chance; the longest waiting one makes room.
                    victim = self._longest_idle(slot=False, idle_before=now)
                    if victim is not None:
                        self._evict(victim)
                if self._overflow_used < self.max_overflow:
                    self._overflow_used += 1
                    conn = _Conn(request, client_address, False, now)
            if conn is not None:
                self._conns.add(conn)
        if conn is None:
            self.warn_throttled("too many connections, closing new ones")
            self.shutdown_request(request)
            return
        thread = threading.Thread(
            target=self._connection,
            args=(conn,),
            name=f"web-{_format_address(client_address)}",
            daemon=True,
        )
        try:
            thread.start()
        except RuntimeError:  # cannot start new thread
            self._release(conn)
            self.shutdown_request(request)
            self.warn_throttled("cannot start a connection thread")

    def begin_request(self, conn: _Conn) -> str | None:
        """Mark a connection busy with a complete request; None if it may be served.

        Otherwise why not: _EVICTED (its socket is shut already), _OVERLOADED (an overflow
        connection found no slot) or _STOPPING.
        """
        with self._lock:
            conn.idle_since = None
            if conn.evicted:
                return _EVICTED
            if self.stopping:
                return _STOPPING
            if conn.slot:
                return None
            if self._slots_used >= self.max_connections:
                victim = self._longest_idle(slot=True, idle_before=time.monotonic() - IDLE_GRACE)
                if victim is None:
                    return _OVERLOADED
                self._evict(victim)
                evicted = True
            else:
                evicted = False
            self._overflow_used -= 1
            self._slots_used += 1
            conn.slot = True
        if evicted:
            self.warn_throttled("all connection slots held, closing idle connections for requests")
        return None

    def end_request(self, conn: _Conn) -> None:
        with self._lock:
            conn.idle_since = time.monotonic()
            self._changed.notify_all()

    def _longest_idle(self, slot: bool, idle_before: float) -> _Conn | None:
        """The connection of the kind idle the longest, if idle since before ``idle_before``.

        A linear scan: it runs only when every slot is taken, over at most
        max_connections + max_overflow connections.
        """
        best: _Conn | None = None
        best_since = idle_before
        for c in self._conns:
            since = c.idle_since
            if c.slot == slot and c.counted and since is not None and since <= best_since:
                best, best_since = c, since
        return best

    def _evict(self, victim: _Conn) -> None:
        """Under the lock: stop counting ``victim`` and shut its socket; its thread ends."""
        victim.evicted = True
        victim.counted = False
        if victim.slot:
            self._slots_used -= 1
        else:
            self._overflow_used -= 1
        _shut(victim.sock)
        log.debug("idle connection closed for another", extra={"kv": {"client": victim.client[0]}})

    def _release(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.discard(conn)
            if conn.counted:
                conn.counted = False
                if conn.slot:
                    self._slots_used -= 1
                else:
                    self._overflow_used -= 1
            self._changed.notify_all()

    def _connection(self, conn: _Conn) -> None:
        client = conn.client
        sock = conn.sock
        start = conn.idle_since or time.monotonic()
        short = math.inf if conn.slot else _OVERFLOW_TIMEOUT
        try:
            head_start = start
            if self.ssl_context is not None:
                handshake_deadline = start + min(self.handshake_timeout, short)
                if not self._looks_like_tls(sock, client, handshake_deadline):
                    return
                tls = self.ssl_context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
                with self._lock:
                    conn.sock = sock = tls
                    if conn.evicted:  # evicted while the old socket object was detached
                        return
                # CPython's ssl applies a socket timeout to the handshake as a whole.
                tls.settimeout(max(0.001, handshake_deadline - time.monotonic()))
                tls.do_handshake()
                if self.web_config is not None and not self.web_config.client_san_allowed(
                    tls.getpeercert()
                ):
                    log.warning(
                        "client certificate has no allowed SAN",
                        extra={"kv": {"client": client[0]}},
                    )
                    return
                head_start = time.monotonic()
            head_deadline = head_start + min(self.header_timeout, short)
            _Handler(sock, client, self, conn, head_deadline)
        except OSError as e:  # resets, TLS failures, timeouts: the client's doing, not ours
            log.debug("connection ended", extra={"kv": {"client": client[0], "err": e}})
        except Exception:
            log.exception("connection handler failed", extra={"kv": {"client": client[0]}})
        finally:
            with self._lock:
                conn.idle_since = None  # lingering below: not idle, not to be evicted
            self._close(sock, linger=not conn.evicted)
            self._release(conn)

    def _looks_like_tls(self, sock: socket.socket, client: Any, deadline: float) -> bool:
        """Peek at the first byte: answer plain HTTP on the TLS port with a readable 400."""
        sock.settimeout(max(0.001, deadline - time.monotonic()))
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

    def _close(self, conn: socket.socket, linger: bool = True) -> None:
        """Close after draining what the client still sends.

        Closing with unread input makes the kernel send a reset, which can destroy our
        response (a 503, 400, 414) before the client reads it. So: end our side, read and
        discard for a moment, then close. The raw socket methods are used so this works
        the same on TLS sockets. An evicted connection got no response: no lingering.
        """
        try:
            socket.socket.shutdown(conn, socket.SHUT_WR)
            deadline = time.monotonic() + _LINGER
            drained = 0
            while linger and drained < _LINGER_BYTES:
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


def _shut(sock: socket.socket) -> None:
    """Shut a socket down both ways so the thread blocked on it wakes up; TLS included."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


# sd_listen_fds(3): systemd passes the sockets of a .socket unit from this fd on.
SD_LISTEN_FDS_START = 3
_LISTEN_ENV = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def systemd_listeners(environ: dict[str, str] | None = None) -> list[socket.socket]:
    """The listening sockets systemd passed (socket activation), as sd_listen_fds(3).

    ``LISTEN_FDS`` sockets from fd 3, when ``LISTEN_PID`` is this process; none without
    them. The variables are removed (sd_listen_fds' unset_environment, as Go's
    go-systemd activation.Files(true) that exporter-toolkit uses), so that no child
    takes the fds for its own, and the fds get FD_CLOEXEC, as sd_listen_fds sets it.
    Raises ValueError for a malformed count or an fd that is not a listening stream
    socket (exporter-toolkit would fail later, on the first accept).
    """
    env = os.environ if environ is None else environ
    pid_text, count_text = env.get("LISTEN_PID"), env.get("LISTEN_FDS")
    for name in _LISTEN_ENV:
        env.pop(name, None)
    if not pid_text or not count_text:
        return []
    try:
        pid, count = int(pid_text), int(count_text)
    except ValueError:
        raise ValueError(
            f"LISTEN_PID={pid_text!r} LISTEN_FDS={count_text!r}: not numbers"
        ) from None
    if pid != os.getpid():
        return []  # meant for another process (a parent that did not unset them)
    if not 0 <= count <= 1024:
        raise ValueError(f"LISTEN_FDS={count}: out of range")
    socks: list[socket.socket] = []
    try:
        for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count):
            os.set_inheritable(fd, False)
            try:
                sock = socket.socket(fileno=fd)
            except OSError as e:
                raise ValueError(f"fd {fd} from systemd is not a socket: {e.strerror}") from None
            socks.append(sock)
            if sock.type != socket.SOCK_STREAM or not sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                raise ValueError(
                    f"fd {fd} from systemd is not a listening stream socket "
                    "(ListenStream= in the .socket unit, Accept=no)"
                )
            sock.setblocking(True)  # NonBlocking=yes would make accept() raise in a race
    except BaseException:
        for sock in socks:
            sock.detach()  # not ours to close on a refusal: the process exits anyway
        raise
    return socks
