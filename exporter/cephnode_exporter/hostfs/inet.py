"""Where this node's Ceph daemons listen, and which interface each of those addresses is on.

Read from procfs only: no privilege, no subprocess, no pid mapping. The files show the
network namespace of the process that reads them (``/proc/net`` is ``/proc/self/net``),
whatever ``--path.procfs`` says, as the ring ioctl does: in a container the exporter
needs the host network. Formats (torvalds/linux):

  - ``net/tcp`` and ``net/tcp6`` (net/ipv4/tcp_ipv4.c ``tcp4_seq_show``/``get_tcp4_sock``,
    net/ipv6/tcp_ipv6.c ``get_tcp6_sock``; Documentation/networking/proc_net_tcp.rst):
    a header, then ``sl: local rem st ...`` per socket; an address is ``%08X`` of each
    __be32 word (so the bytes of a word appear in host order), a port ``%04X``, ``st``
    the TCP state (include/net/tcp_states.h: TCP_LISTEN 10, TCP_SYN_RECV 3). The
    iterator (``tcp_get_idx``) walks the listening hash before the established one, so
    the listening sockets come first and the read stops at the first other socket: a node
    with 100,000 connections costs the read of its few hundred listeners. Before Linux 4.4
    a listener's pending requests (SYN_RECV) followed it; those lines are passed over.
  - ``net/route`` (net/ipv4/fib_trie.c ``fib_route_seq_show``): the main table, one tab-
    separated line per route, ``Iface Destination Gateway Flags RefCnt Use Metric Mask
    MTU Window IRTT``, addresses as above, flags of include/uapi/linux/route.h (RTF_UP 1,
    RTF_GATEWAY 2, RTF_REJECT 0x200). An IPv4 address's interface is the one of the
    connected (gateway-less) route that covers it, the longest prefix first: the kernel
    adds that route with the address, and ``/proc/net/fib_trie`` lists local addresses
    without naming an interface.
  - ``net/if_inet6`` (net/ipv6/addrconf.c ``if6_seq_show``): ``address ifindex plen scope
    flags name``, the address as 32 hex digits in network order. Absent, like ``tcp6``,
    when IPv6 is disabled (``ipv6.disable=1``).

Ceph's ports: the daemons' messengers bind in ``ms_bind_port_min``..``ms_bind_port_max``
(6800-7568 by default, src/common/options/global.yaml.in; 7300 in older releases), the
monitors on 3300 (msgr2, IANA) and 6789 (msgr1) (src/include/msgr.h CEPH_MON_PORT_IANA,
CEPH_MON_PORT_LEGACY). A daemon binds the address it picked from ``public_network`` /
``cluster_network`` (or ``public_addr`` / ``cluster_addr``); with neither set it binds the
wildcard address (src/common/pick_address.cc), which names no interface. Another service
listening in that range counts as Ceph too; loopback addresses never do.

Every input can be wrong: a file that is unreadable, malformed or beyond the bounds below
makes the result unknown (``error``), never empty.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from cephnode_exporter.hostfs import HostFS, ParseError, ReadErrors, open_regular

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ByteOrder = Literal["little", "big"]

# include/net/tcp_states.h
TCP_LISTEN = 0x0A
TCP_SYN_RECV = 0x03
# include/uapi/linux/route.h
RTF_UP = 0x0001
RTF_GATEWAY = 0x0002
RTF_REJECT = 0x0200

# ms_bind_port_min/max defaults and the monitors' ports (module docstring).
CEPH_BIND_PORTS = range(6800, 7568 + 1)
CEPH_MON_PORTS = frozenset({3300, 6789})

# Bounds on what is read: lines are at most 150 bytes in all four files; a storage node
# has dozens to hundreds of listeners, routes and addresses. Beyond these the file is
# not what the kernel writes for such a node, and the result is unknown.
MAX_LINE_BYTES = 512
MAX_LINES = 65536


def is_ceph_port(port: int) -> bool:
    return port in CEPH_BIND_PORTS or port in CEPH_MON_PORTS


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket."""

    address: IPAddress  # an IPv4-mapped IPv6 address is given as the IPv4 one
    port: int

    @property
    def wildcard(self) -> bool:
        return self.address.is_unspecified

    def __str__(self) -> str:
        if self.address.version == 6:
            return f"[{self.address}]:{self.port}"
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class CephAddresses:
    """The sockets Ceph's daemons listen on and the interfaces their addresses are on."""

    # Listening sockets on Ceph's ports, loopback left out, sorted.
    listeners: tuple[Listener, ...] = ()
    # Each specific (not wildcard) address of ``listeners`` -> the interfaces it is on
    # (IPv6: holding it; IPv4: whose connected route covers it); () when none is.
    interfaces: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Set when a source was unreadable or malformed: which ports carry Ceph is unknown.
    error: str | None = None

    @property
    def wildcard(self) -> list[Listener]:
        return [lst for lst in self.listeners if lst.wildcard]


# --- parsers ---------------------------------------------------------------------------


_HEX = frozenset("0123456789abcdefABCDEF")


def _hex(text: str) -> int:
    """A hex number as the kernel prints it (int() would also take "0x", "_" and a sign)."""
    if not text or not _HEX.issuperset(text):
        raise ValueError(f"not hex: {text[:40]!r}")
    return int(text, 16)


def _word_bytes(hex8: str, byteorder: ByteOrder) -> bytes:
    """The bytes of a __be32 printed with %08X on a host of ``byteorder``."""
    if len(hex8) != 8:
        raise ValueError(f"not a 32-bit word: {hex8[:40]!r}")
    return _hex(hex8).to_bytes(4, byteorder)


def parse_endpoint(
    text: str, family: int, path: str = "tcp", byteorder: ByteOrder = sys.byteorder
) -> Listener:
    """``0100007F:1A90`` (tcp) or 32 hex digits and a port (tcp6): the address words are
    ``%08X`` of __be32 values, so each word's bytes are in host order."""
    addr, sep, port = text.partition(":")
    width = 8 if family == socket.AF_INET else 32
    if not sep or len(addr) != width or len(port) != 4:
        raise ParseError(path, f"bad address {text[:60]!r}")
    try:
        raw = b"".join(_word_bytes(addr[i : i + 8], byteorder) for i in range(0, width, 8))
        number = _hex(port)
    except ValueError:
        raise ParseError(path, f"bad address {text[:60]!r}") from None
    ip: IPAddress = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return Listener(ip, number)


def parse_tcp_listeners(
    lines: Iterable[str], family: int, path: str = "tcp", byteorder: ByteOrder = sys.byteorder
) -> list[Listener]:
    """The listening sockets of ``/proc/net/tcp`` or ``tcp6``; stops at the first
    established (or other) socket, after which no listener follows."""
    it = iter(lines)
    header = next(it, "").split()
    if header[:2] != ["sl", "local_address"]:
        raise ParseError(path, f"no header: {' '.join(header)[:60]!r}")
    out = []
    for line in it:
        fields = line.split()
        if len(fields) < 4 or not fields[0].endswith(":"):
            raise ParseError(path, f"malformed line {line.strip()[:60]!r}")
        try:
            state = _hex(fields[3])
        except ValueError:
            raise ParseError(path, f"bad state {fields[3][:10]!r}") from None
        if state == TCP_SYN_RECV:
            continue
        if state != TCP_LISTEN:
            break
        out.append(parse_endpoint(fields[1], family, path, byteorder))
    return out


def parse_route(
    lines: Iterable[str], path: str = "route", byteorder: ByteOrder = sys.byteorder
) -> list[tuple[str, ipaddress.IPv4Network]]:
    """The connected routes of ``/proc/net/route`` (up, no gateway, not reject, not the
    default): (interface, network)."""
    it = iter(lines)
    header = next(it, "").split()
    if header[:1] != ["Iface"] or len(header) < 8:
        raise ParseError(path, f"no header: {' '.join(header)[:60]!r}")
    out = []
    for line in it:
        fields = line.split()
        if len(fields) < 8:
            raise ParseError(path, f"malformed line {line.strip()[:60]!r}")
        try:
            dest = ipaddress.IPv4Address(_word_bytes(fields[1], byteorder))
            flags = _hex(fields[3])
            mask = ipaddress.IPv4Address(_word_bytes(fields[7], byteorder))
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            raise ParseError(path, f"malformed line {line.strip()[:60]!r}") from None
        if not flags & RTF_UP or flags & (RTF_GATEWAY | RTF_REJECT) or fields[0] == "*":
            continue
        if net.prefixlen:
            out.append((fields[0], net))
    return out


def parse_if_inet6(
    lines: Iterable[str], path: str = "if_inet6"
) -> list[tuple[str, ipaddress.IPv6Interface]]:
    """``/proc/net/if_inet6``: (interface, address/prefix) per address."""
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) != 6 or len(fields[0]) != 32:
            raise ParseError(path, f"malformed line {line.strip()[:60]!r}")
        try:
            _hex(fields[0])
            addr = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            plen = _hex(fields[2])
            out.append((fields[5], ipaddress.IPv6Interface(f"{addr}/{plen}")))
        except ValueError:
            raise ParseError(path, f"malformed line {line.strip()[:60]!r}") from None
    return out


def interfaces_of(
    ip: IPAddress,
    routes: list[tuple[str, ipaddress.IPv4Network]],
    inet6: list[tuple[str, ipaddress.IPv6Interface]],
) -> tuple[str, ...]:
    """The interfaces an address is on: an IPv6 address on those that hold it, else (and
    for IPv4) on those whose connected prefix covers it, the longest prefix only."""
    if ip.version == 6:
        exact = sorted({name for name, iface in inet6 if iface.ip == ip})
        if exact:
            return tuple(exact)
        nets: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = [
            (name, iface.network) for name, iface in inet6
        ]
    else:
        nets = list(routes)
    covering = [(net.prefixlen, name) for name, net in nets if ip in net]
    if not covering:
        return ()
    longest = max(length for length, _ in covering)
    return tuple(sorted({name for length, name in covering if length == longest}))


# --- reading ---------------------------------------------------------------------------


def read_lines(path: str, max_lines: int = MAX_LINES) -> Iterator[str]:
    """The lines of a procfs file, lazily (a caller that stops early reads no further);
    OSError names the path, a line or line count beyond the bounds is a ParseError."""
    try:
        # open_regular: a FIFO here would block open() until a writer came.
        with os.fdopen(open_regular(path), "rb") as fh:
            for count in range(max_lines + 2):
                line = fh.readline(MAX_LINE_BYTES)
                if not line:
                    return
                if count > max_lines:  # the header plus max_lines entries
                    raise ParseError(path, f"more than {max_lines} entries")
                if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
                    raise ParseError(path, f"a line longer than {MAX_LINE_BYTES} bytes")
                yield line.decode("ascii", "replace")
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, path) from None


def describe(exc: BaseException) -> str:
    """``/proc/net/tcp: Permission denied`` rather than ``[Errno 13] ...``."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


def read_ceph_addresses(fs: HostFS, errors: ReadErrors) -> CephAddresses:
    """The Ceph listeners of ``fs``'s procfs and the interfaces of their addresses. An
    unreadable or malformed source is added to ``errors`` and sets ``error``."""
    try:
        return _read(fs)
    except (OSError, ParseError) as exc:
        errors.add(exc)
        return CephAddresses(error=describe(exc))


def _read(fs: HostFS) -> CephAddresses:
    tcp = fs.proc("net", "tcp")
    listeners = parse_tcp_listeners(read_lines(tcp), socket.AF_INET, tcp)
    tcp6 = fs.proc("net", "tcp6")
    with contextlib.suppress(FileNotFoundError):  # IPv6 disabled: no tcp6
        listeners += parse_tcp_listeners(read_lines(tcp6), socket.AF_INET6, tcp6)
    ceph = sorted(
        {lst for lst in listeners if is_ceph_port(lst.port) and not lst.address.is_loopback},
        key=lambda lst: (lst.address.version, lst.address, lst.port),
    )
    specific = sorted(
        {lst.address for lst in ceph if not lst.wildcard}, key=lambda a: (a.version, a)
    )
    routes: list[tuple[str, ipaddress.IPv4Network]] = []
    inet6: list[tuple[str, ipaddress.IPv6Interface]] = []
    if any(a.version == 4 for a in specific):
        path = fs.proc("net", "route")
        routes = parse_route(read_lines(path), path)
    if any(a.version == 6 for a in specific):
        path = fs.proc("net", "if_inet6")
        inet6 = parse_if_inet6(read_lines(path), path)
    where = {str(a): interfaces_of(a, routes, inet6) for a in specific}
    return CephAddresses(tuple(ceph), where)
