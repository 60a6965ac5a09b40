"""One connection's requests: a loop of requests (keep-alive) until close, error or
deadline, reading through a deadline and routing to the telemetry path, the landing page
and the probes.

The server is seen through :class:`ConnectionServer`, what a handler needs of it, so that
this module does not import :mod:`.server` (which builds handlers).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import http.server
import io
import logging
import math
import socket
import struct
import time
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from cephnode_exporter.web.auth import AUTH_BUSY, AUTH_OK, AUTH_THROTTLED, _BasicAuth
from cephnode_exporter.web.request import (
    _LOG_MAX,
    CONTENT_TYPE,
    HEALTHY_PATH,
    OPENMETRICS_CONTENT_TYPE,
    READY_PATH,
    REALM,
    SCRAPE_TIMEOUT_HEADER,
    FilterError,
    Render,
    RenderFor,
    ScrapeOptions,
    _accepts_gzip,
    _parse_scrape_timeout,
    _wants_openmetrics,
)
from cephnode_exporter.webconfig import WebConfig

log = logging.getLogger("cephnode_exporter.web")

_MAX_LINE = 65536  # request line limit, as http.server's own handler uses
_GZIP_LEVEL = 1  # exposition text compresses well even at the cheapest level; CPU matters more
# Empty lines skipped before a request line: RFC 9112 section 2.2 says a server SHOULD
# ignore at least one (some clients send a CRLF after a request body); more get a 400.
_EMPTY_LINES = 4
_EOL = (b"\r\n", b"\n")
# Linux SIOCOUTQNSD, tcp(7): bytes in a socket's send queue not yet sent. They stay there
# while the peer's receive window is closed, i.e. while it does not read.
_SIOCOUTQNSD = 0x894B
_UNSENT_POLL = 0.02  # seconds between looks at a stalled send queue
# The 429 bodies: this address failed too often; every password check is taken.
_AUTH_429 = {
    AUTH_THROTTLED: b"Too many failed logins from this address, try again later.\n",
    AUTH_BUSY: b"Too many password checks at once, try again later.\n",
}


class ConnectionServer(Protocol):
    """What a handler needs of its server (:class:`.server.ExporterServer`)."""

    request_timeout: float
    header_timeout: float
    write_timeout: float
    web_config: WebConfig | None
    auth: _BasicAuth | None
    telemetry_path: str
    landing_page: bytes
    ready: bool
    stopping: bool
    render: Render
    render_for: RenderFor | None

    def begin_request(self, conn: _Conn) -> str | None: ...

    def end_request(self, conn: _Conn) -> None: ...

    def warn_throttled(self, message: str, every: float = 10.0) -> None: ...


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
        received: int = sock.recv_into(buffer)
        if received:
            self._handler.conn.heard = True
        return received


class _HeadReader(io.BufferedReader):
    """A buffered reader that remembers the last line read.

    http.client.parse_headers ends the header block at an empty line or at EOF alike; the
    last line tells a complete request head from one cut off by EOF.
    """

    last_line = b""

    def readline(self, size: int | None = -1, /) -> bytes:
        line = super().readline(size)
        self.last_line = line
        return line


class _SocketWriter(io.BufferedIOBase):
    """Unbuffered writes of whole buffers, bounded by the response's write deadline.

    Not sendall() with a socket timeout: that bounds each call (the headers and the body
    are two), and on a TLS socket each chunk, so a client reading a byte now and then
    could make one response last for ever.
    """

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        handler = self._handler
        deadline = handler.write_deadline
        if deadline is None:  # the response's first write
            deadline = handler.write_deadline = time.monotonic() + handler.write_timeout
        sock = handler.connection
        with memoryview(data) as view, view.cast("B") as rest:
            sent = 0
            while sent < len(rest):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("response write deadline exceeded")
                sock.settimeout(remaining)
                sent += sock.send(rest[sent:])
            return view.nbytes


def _unsent(sock: socket.socket) -> int:
    """Bytes of the socket's send queue not yet sent; 0 where that cannot be known."""
    try:
        raw = fcntl.ioctl(sock.fileno(), _SIOCOUTQNSD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    unsent: int = struct.unpack("i", raw)[0]
    return unsent


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection: a loop of requests (keep-alive) until close, error or deadline."""

    server: ConnectionServer  # type: ignore[assignment]
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
        server: ConnectionServer,
        conn: _Conn,
        head_deadline: float,
    ) -> None:
        self.conn = conn
        self.request_timeout = server.request_timeout
        # The first request's head is due by head_deadline (counted from the accept or
        # the end of the TLS handshake); later ones get their own (handle_one_request).
        self.read_deadline = head_deadline
        self.write_timeout = server.write_timeout
        self.write_deadline: float | None = None  # of the response being written, or the last
        self.first_request = True
        super().__init__(request, client_address, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.connection = self.request
        # Headers and body go out in separate writes; with Nagle's algorithm the body would
        # wait for the client's delayed ACK (40 ms) on every keep-alive response.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _HeadReader(_DeadlineReader(self), _MAX_LINE)
        self.rfile = self.reader
        self.wfile = _SocketWriter(self)

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
                if not self._delivered():
                    # Pipelined requests wait until the client takes the previous response:
                    # one that does not read must not have more rendered for it.
                    self.close_connection = True
                    return
                # The next request has begun: no longer closed at once for another.
                # (An eviction racing this is harmless: the client retries.)
                self.conn.between_requests = False
                self.read_deadline = time.monotonic() + server.header_timeout
            self.write_deadline = None
            self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
            for _ in range(_EMPTY_LINES):
                if self.raw_requestline not in _EOL:
                    break
                self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
            if len(self.raw_requestline) > _MAX_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.raw_requestline.strip():
                # Whitespace, or more empty lines than skipped: http.server would close
                # without a word.
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.BAD_REQUEST, "Bad request line")
                return
            if len(self.raw_requestline.split()) == 2:
                self._refuse_http09()
                return
            if not self.parse_request():  # sends 400/414/431 itself on bad input
                return
            if self.reader.last_line not in _EOL:
                # EOF before the empty line that ends the head: an incomplete message is
                # not processed (RFC 9112 section 8).
                self.send_error(HTTPStatus.BAD_REQUEST, "Incomplete request head")
                return
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

    def _delivered(self) -> bool:
        """Whether the previous response left the send queue before its write deadline.

        Meanwhile the connection counts as between requests: a request that needs its
        slot may close it.
        """
        deadline = self.write_deadline
        while deadline is not None and _unsent(self.connection) > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.conn.evicted:
                return False
            time.sleep(min(_UNSENT_POLL, remaining))
        return True

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
            if result in _AUTH_429:
                if result == AUTH_BUSY:
                    # Every bcrypt worker is taken: come back rather than wait in a slot.
                    self.server.warn_throttled("all password checks busy, answering 429")
                self._respond(
                    HTTPStatus.TOO_MANY_REQUESTS,
                    _AUTH_429[result],
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
    ``between_requests``: it has been answered and kept alive, and no byte of its next
    request has been read: it may be closed at once for a request that needs its slot
    (RFC 9112 section 9.5), as clients retry an idempotent request on a reused connection
    closed before any response byte. A new connection gets IDLE_GRACE instead.
    ``heard``: a byte of it has been read; until then, and while none waits unread, it
    is silent (ExporterServer._silent).
    """

    __slots__ = (
        "between_requests",
        "client",
        "counted",
        "evicted",
        "heard",
        "idle_since",
        "slot",
        "sock",
    )

    def __init__(self, sock: socket.socket, client: Any, slot: bool, now: float) -> None:
        self.sock = sock
        self.client = client
        self.slot = slot
        self.counted = True
        self.idle_since: float | None = now
        self.evicted = False
        self.between_requests = False
        self.heard = False
