"""The server: a thread per connection, bounded in number, with optional TLS, over
http.server/socketserver; :func:`make_server` builds it.

Size: the connection accounting (slots, overflow, which idle connection gives way to a
request) is one piece under one lock, and reads best whole; the request handling and
the listening sockets are in their own modules already.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import select
import selectors
import socket
import socketserver
import threading
import time
from collections.abc import Sequence
from typing import Any

from cephnode_exporter.web.auth import _BasicAuth
from cephnode_exporter.web.handler import _EVICTED, _OVERLOADED, _STOPPING, _Conn, _Handler
from cephnode_exporter.web.listen import (
    _REQUEST_QUEUE_SIZE,
    _format_address,
    _listen,
    _sock_address,
    format_address,
    parse_listen_address,
)
from cephnode_exporter.web.request import (
    HANDSHAKE_TIMEOUT,
    HEADER_TIMEOUT,
    HEALTHY_PATH,
    IDLE_GRACE,
    READY_PATH,
    SILENT_GRACE,
    WRITE_TIMEOUT,
    Render,
    RenderFor,
    _landing_page,
)
from cephnode_exporter.webconfig import WebConfig

log = logging.getLogger("cephnode_exporter.web")

_LINGER = 0.5  # seconds to drain a client's unread input before closing (see _close)
_LINGER_BYTES = 256 * 1024
# Connections beyond max_connections only read their request (to claim a slot or get a
# 503), so they get less time still.
_OVERFLOW_TIMEOUT = 2.0
# socketserver's choice: poll() where it exists; epoll gains nothing for a few listeners.
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)
_ACCEPT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


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
    write_timeout: float = WRITE_TIMEOUT,
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
    ``handshake_timeout`` the TLS handshake, ``write_timeout`` writing one response;
    all three are capped at ``request_timeout``.
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
    problem = telemetry_path_problem(telemetry_path)
    if problem is not None:
        raise ValueError(f"invalid telemetry path {telemetry_path!r}: {problem}")
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    for name, value in (
        ("request_timeout", request_timeout),
        ("header_timeout", header_timeout),
        ("handshake_timeout", handshake_timeout),
        ("write_timeout", write_timeout),
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
            write_timeout=min(write_timeout, request_timeout),
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


def telemetry_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be the metrics path, or None."""
    # '?' and '#' start the query and the fragment: no request's path could match.
    if not path.startswith("/") or any(c.isspace() or ord(c) < 32 or c in "?#" for c in path):
        return "must start with '/' and contain no spaces, control characters, '?' or '#'"
    if path in (HEALTHY_PATH, READY_PATH):
        return "reserved for probes"
    return None


class ExporterServer(socketserver.TCPServer):
    """A TCP server with a thread per connection, bounded in number, and optional TLS.

    Use :func:`make_server` rather than this constructor. ``server_address`` is the bound
    (host, port); ``serve_forever()`` runs the accept loop, ``shutdown()`` stops it from
    another thread, ``drain()`` lets requests in progress finish, and ``server_close()``
    closes the listener and open connections.

    Connections take one of ``max_connections`` slots when accepted. Beyond those, a few
    overflow connections read their request: it takes a slot freed meanwhile, or the slot
    of an idle connection (a silent one, that has sent no byte for SILENT_GRACE, first;
    then the longest idle of those kept alive between requests or idle for at least
    IDLE_GRACE), or gets a quick 503. So peers that connect and send nothing, or trickle,
    cannot keep a scraper out for longer than IDLE_GRACE, nor can keep-alive clients that
    send a request now and then; requests in progress are never cut.

    A flood of peers that connect, send nothing and reconnect when closed (hundreds of
    them) must not delay a scraper, which sends its request as soon as it connects. So
    (listen.py) silent connections wait in the kernel until they speak or a second has
    passed (TCP_DEFER_ACCEPT), and the accept queue is large, as a full one drops the
    scraper's SYN and costs it a 1 s retransmit (tcp(7)). A silent peer accepted after
    its second finds the overflow full and is closed at once, without a thread, so the
    accept loop keeps the queue short. Elsewhere, each new connection closes the longest
    waiting silent one, never one whose request has begun to arrive (the scraper's own
    overflow connection, until it claims a slot), and a request takes the slot of a
    silent peer before that of a kept-alive client (which would reconnect through the
    flood).
    Victims are not chosen by address: many legitimate clients may share one (a proxy).
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
        write_timeout: float = WRITE_TIMEOUT,
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
        self.write_timeout = write_timeout
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
        # Listeners that accept a connection only once it sends (listen.py), or after it
        # has been silent for a second: one accepted without input is a silent peer.
        self._deferred = {sock.fileno() for sock in self.listeners if _defers_accept(sock)}
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
        silent = listener.fileno() in self._deferred and not _readable(request)
        try:
            self.process_request(request, client_address, silent)
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

    def process_request(self, request: Any, client_address: Any, silent: bool = False) -> None:
        """Hand the connection to its own thread; never block the accept loop.

        ``silent``: it has been silent for a second already (TCP_DEFER_ACCEPT); when the
        overflow is full it is closed at once, without a thread, rather than take the
        place of another: a flood of such peers then costs an accept and a close each.
        """
        now = time.monotonic()
        conn: _Conn | None = None
        with self._lock:
            if self._slots_used < self.max_connections:
                self._slots_used += 1
                conn = _Conn(request, client_address, True, now)
            else:
                if self._overflow_used >= self.max_overflow and not silent:
                    # Overflow connections that still have no request have had their
                    # chance; the longest waiting silent one makes room, or else the
                    # longest waiting one (a trickle).
                    victim = self._victim(slot=False, now=now)
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
                victim = self._victim(slot=True, now=time.monotonic())
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
            conn.between_requests = True
            self._changed.notify_all()

    def _victim(self, slot: bool, now: float) -> _Conn | None:
        """Under the lock: the connection of the kind to close for another, or None.

        Silent ones first (no byte yet, the cheapest to lose), the longest waiting of
        them. Then, of slot holders, the longest idle of those kept alive between
        requests (RFC 9112 section 9.5 lets a server close those at any time) or idle
        for IDLE_GRACE; of overflow connections, the longest waiting one. Silent slot
        holders must have been silent for SILENT_GRACE; silent overflow connections are
        taken at any age, as the new connection they make room for gets the same chance.

        Runs only when every slot (or all the overflow) is taken, over at most
        max_connections + max_overflow connections, and polls only the silent-looking
        ones, in order, until one is silent indeed.
        """
        waiting = sorted(
            (c for c in self._conns if c.slot == slot and c.counted and c.idle_since is not None),
            key=lambda c: c.idle_since or 0.0,
        )
        silent_before = now - SILENT_GRACE if slot else math.inf
        for c in waiting:
            if c.idle_since is not None and c.idle_since > silent_before:
                break
            if _silent(c):
                return c
        idle_before = now - IDLE_GRACE if slot else math.inf
        for c in waiting:
            if c.between_requests or (c.idle_since is not None and c.idle_since <= idle_before):
                return c
        return None

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
                conn.heard = True
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


def _silent(conn: _Conn) -> bool:
    """Whether ``conn`` has sent no byte: none read by its thread, and none waiting."""
    return not conn.heard and not _readable(conn.sock)


def _readable(sock: socket.socket) -> bool:
    """Whether input (data, or its end) waits on ``sock``; True if it is closed already."""
    poller = select.poll()  # not select(): fds may exceed FD_SETSIZE (select(2))
    try:
        poller.register(sock, select.POLLIN)
    except (OSError, ValueError):  # closed meanwhile: it is ending anyway
        return True
    return bool(poller.poll(0))


def _defers_accept(listener: socket.socket) -> bool:
    """Whether ``listener`` has TCP_DEFER_ACCEPT (listen.py sets it; systemd sockets
    have it with DeferAcceptSec=)."""
    try:
        return listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT) > 0
    except (OSError, AttributeError):  # a Unix socket, or not Linux
        return False


def _shut(sock: socket.socket) -> None:
    """Shut a socket down both ways so the thread blocked on it wakes up; TLS included."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
