"""Listening sockets: ``--web.listen-address`` parsed and bound (IPv6 with an IPv4
fallback), or the sockets systemd passes (socket activation, sd_listen_fds(3)).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
from typing import Any

log = logging.getLogger("cephnode_exporter.web")

_FALLBACK_ERRNOS = {errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT}
# The accept queue: as large as the kernel allows (listen(2) caps it at
# net.core.somaxconn, 4096 since Linux 5.4). When it is full, Linux drops SYNs (tcp(7),
# tcp_abort_on_overflow) and the client retries after 1 s, then 3 s: hundreds of peers
# that connect and reconnect at once kept a 128-connection queue full, and scrapes took
# seconds (docs/limits.md). A queued connection costs the kernel a socket, not a thread.
_REQUEST_QUEUE_SIZE = socket.SOMAXCONN
# TCP_DEFER_ACCEPT, tcp(7): a connection is queued for accept() only once its first
# data arrives, or after about this many seconds (one SYN-ACK retransmit) without. An
# HTTP client sends its request, a TLS client its ClientHello, as soon as it connects,
# so it is accepted at once; a silent peer waits in the kernel, not in the queue ahead
# of a scraper, nor in a connection thread. nginx's "deferred", HAProxy's defer-accept.
_DEFER_ACCEPT = 1


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
            if hasattr(socket, "TCP_DEFER_ACCEPT"):  # Linux only
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, _DEFER_ACCEPT)
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
