"""NIC ring sizes through the ethtool ioctl, and its fixture stand-in.

Ring sizes are not in sysfs: the kernel hands them out only through the ethtool
interface, either the SIOCETHTOOL ioctl (include/uapi/linux/ethtool.h) or ethtool netlink
(Documentation/networking/ethtool-netlink.rst). This module speaks the ioctl from Python
(no ``ethtool`` subprocess): a socket, a ``struct ifreq`` whose ``ifr_data`` points at a
``struct ethtool_ringparam``, and ``fcntl.ioctl``.

Kernel sources (torvalds/linux):
  - include/uapi/linux/sockios.h: ``SIOCETHTOOL 0x8946``.
  - include/uapi/linux/ethtool.h: ``ETHTOOL_GRINGPARAM 0x00000010`` and
    ``struct ethtool_ringparam`` (nine __u32: cmd, rx_max_pending, rx_mini_max_pending,
    rx_jumbo_max_pending, tx_max_pending, rx_pending, rx_mini_pending, rx_jumbo_pending,
    tx_pending).
  - include/uapi/linux/if.h: ``struct ifreq`` = ``char ifr_name[IFNAMSIZ]`` (16) and a
    union whose largest member is ``struct ifmap`` (24 bytes on LP64, 16 on ILP32).
  - net/ethtool/ioctl.c: ``__dev_ethtool`` returns ENODEV for an unknown name, lets
    anyone run ETHTOOL_GRINGPARAM (no CAP_NET_ADMIN), takes RTNL, and
    ``ethtool_get_ringparam`` returns EOPNOTSUPP when the driver has no
    ``get_ringparam`` (lo, veth, bridges, bonds on 6.18, checked on the test machine).

The ioctl resolves the name in the network namespace of the socket, i.e. of the exporter
process: in a container the exporter needs the host's network namespace.

Tests cannot fake an ioctl with a file tree, so :class:`RingReader` has a second
implementation, :class:`FixtureRingReader`, that reads a small text file the fixture
generator places under ``<sysfs>/.fixture/ethtool/<interface>``. That file does not exist
in any real sysfs (nobody can create files there); it only stands in for the ioctl.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cephnode_exporter.hostfs import HostFS, ParseError, kernel_int, read_text

SIOCETHTOOL = 0x8946  # include/uapi/linux/sockios.h
ETHTOOL_GRINGPARAM = 0x00000010  # include/uapi/linux/ethtool.h
IFNAMSIZ = 16  # include/uapi/linux/if.h

# struct ethtool_ringparam: nine native-endian __u32 (36 bytes, no padding).
RINGPARAM = struct.Struct("=9I")
RING_FIELDS = (
    "rx_max_pending",
    "rx_mini_max_pending",
    "rx_jumbo_max_pending",
    "tx_max_pending",
    "rx_pending",
    "rx_mini_pending",
    "rx_jumbo_pending",
    "tx_pending",
)

# Where the fixture generator puts the ioctl stand-ins, relative to the sysfs root.
FIXTURE_DIR = (".fixture", "ethtool")


@dataclass(frozen=True)
class Ring:
    """One ring as ethtool reports it: descriptors in use and the driver's maximum."""

    name: str  # rx, rx_mini, rx_jumbo, tx
    current: int
    maximum: int


@dataclass(frozen=True)
class RingParam:
    """``struct ethtool_ringparam`` without ``cmd``; sizes are descriptor counts."""

    rx_max_pending: int
    rx_mini_max_pending: int
    rx_jumbo_max_pending: int
    tx_max_pending: int
    rx_pending: int
    rx_mini_pending: int
    rx_jumbo_pending: int
    tx_pending: int

    def rings(self) -> list[Ring]:
        """rx and tx always; mini and jumbo only when the driver has them (maximum > 0:
        old Broadcom and 3Com NICs). A maximum of 0 for rx or tx means "not reported"."""
        out = [Ring("rx", self.rx_pending, self.rx_max_pending)]
        if self.rx_mini_max_pending:
            out.append(Ring("rx_mini", self.rx_mini_pending, self.rx_mini_max_pending))
        if self.rx_jumbo_max_pending:
            out.append(Ring("rx_jumbo", self.rx_jumbo_pending, self.rx_jumbo_max_pending))
        out.append(Ring("tx", self.tx_pending, self.tx_max_pending))
        return out

    def ring(self, name: str) -> Ring | None:
        return next((r for r in self.rings() if r.name == name), None)


def pack_request() -> bytes:
    """The request the kernel expects in ``ifr_data``: cmd set, everything else zero."""
    return RINGPARAM.pack(ETHTOOL_GRINGPARAM, *([0] * len(RING_FIELDS)))


def unpack_reply(data: bytes, where: str = "ETHTOOL_GRINGPARAM") -> RingParam:
    """Decode the struct the kernel wrote back; ParseError for a short or foreign reply.

    ``ethtool_get_ringparam`` copies the whole struct with ``cmd`` set to
    ETHTOOL_GRINGPARAM, so any other length or command word is not a ring reply.
    """
    if len(data) != RINGPARAM.size:
        raise ParseError(where, f"reply is {len(data)} bytes, expected {RINGPARAM.size}")
    cmd, *values = RINGPARAM.unpack(data)
    if cmd != ETHTOOL_GRINGPARAM:
        raise ParseError(where, f"reply has command {cmd:#x}, expected {ETHTOOL_GRINGPARAM:#x}")
    return RingParam(*values)


def ifname(name: str) -> bytes:
    """The interface name as ``ifr_name`` takes it; ValueError for a name the kernel
    could never have made (dev_valid_name() in net/core/dev.c: 1-15 bytes, not "." or
    "..", no "/", ":" or whitespace), so a bad name never reaches the ioctl truncated."""
    raw = name.encode("utf-8", "surrogateescape")
    if (
        not raw
        or len(raw) >= IFNAMSIZ
        or name in (".", "..")
        or any(c in name for c in "/:\0")
        or any(c.isspace() for c in name)
    ):
        raise ValueError(f"not a valid interface name: {name!r}")
    return raw


class _Ifmap(ctypes.Structure):
    # include/uapi/linux/if.h struct ifmap: the largest member of the ifreq union.
    _fields_ = (
        ("mem_start", ctypes.c_ulong),
        ("mem_end", ctypes.c_ulong),
        ("base_addr", ctypes.c_ushort),
        ("irq", ctypes.c_ubyte),
        ("dma", ctypes.c_ubyte),
        ("port", ctypes.c_ubyte),
    )


class _IfreqUnion(ctypes.Union):
    _fields_ = (
        ("ifr_data", ctypes.c_void_p),
        ("ifr_map", _Ifmap),
        ("ifr_newname", ctypes.c_char * IFNAMSIZ),
    )


class Ifreq(ctypes.Structure):
    """``struct ifreq`` with the native layout (40 bytes on x86_64): the kernel copies
    sizeof(struct ifreq) from user space, so a shorter buffer would be an EFAULT."""

    _fields_ = (("ifr_name", ctypes.c_char * IFNAMSIZ), ("ifr_ifru", _IfreqUnion))


class RingReader(Protocol):
    """Where ring sizes come from: the ioctl on a host, a stand-in file in fixtures.

    ``read`` returns None when the interface has no ring parameters (EOPNOTSUPP: not an
    error) and raises OSError (ENODEV: gone; EPERM: blocked; ...) or ParseError otherwise.
    """

    source: str

    def read(self, name: str) -> RingParam | None: ...

    def close(self) -> None: ...


IoctlFunc = Callable[[int, int, ctypes.Structure], object]


class EthtoolRingReader:
    """ETHTOOL_GRINGPARAM through SIOCETHTOOL on one datagram socket, opened on first use
    and kept until :meth:`close`.

    AF_INET first, as ethtool(8) does; AF_UNIX when the address family is not allowed
    (the ioctl is generic: sock_do_ioctl() in net/socket.c hands commands the family does
    not know to dev_ioctl() for any family). ``ioctl`` is injectable for tests.
    """

    source = "ioctl"

    def __init__(self, ioctl: IoctlFunc | None = None) -> None:
        self._ioctl: IoctlFunc = ioctl if ioctl is not None else fcntl.ioctl
        self._sock: socket.socket | None = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            try:
                self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            except OSError:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        return self._sock

    def read(self, name: str) -> RingParam | None:
        raw_name = ifname(name)
        reply = (ctypes.c_char * RINGPARAM.size).from_buffer_copy(pack_request())
        req = Ifreq()
        req.ifr_name = raw_name
        # The kernel writes the reply straight into ``reply`` (copy_to_user to
        # ifr_data); ``reply`` stays referenced here until the call returns.
        req.ifr_ifru.ifr_data = ctypes.addressof(reply)
        try:
            self._ioctl(self._socket().fileno(), SIOCETHTOOL, req)
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                return None
            raise OSError(exc.errno, exc.strerror, f"SIOCETHTOOL {name}") from None
        return unpack_reply(bytes(reply), f"SIOCETHTOOL {name}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def parse_fixture(text: str, where: str) -> RingParam | None:
    """Parse a stand-in file: ``<field> <value>`` lines named like the struct fields
    (absent fields are 0, as the kernel zero-fills the struct), or a single line
    ``errno <NAME>`` for the error the ioctl would return (EOPNOTSUPP gives None)."""
    values = dict.fromkeys(RING_FIELDS, 0)
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        value = value.strip()
        if key == "errno":
            code = getattr(errno, value, None)
            if not isinstance(code, int):
                raise ParseError(where, f"line {number}: unknown errno {value!r}")
            if code == errno.EOPNOTSUPP:
                return None
            raise OSError(code, os.strerror(code), where)
        if key not in values:
            raise ParseError(where, f"line {number}: unknown field {key!r}")
        number_value = kernel_int(value)  # int() would also take "٣" and "1_0"
        if number_value is None:
            raise ParseError(where, f"line {number}: not an integer: {value[:40]!r}")
        if not 0 <= number_value <= 0xFFFFFFFF:
            raise ParseError(where, f"line {number}: {number_value} is not a __u32")
        values[key] = number_value
    return RingParam(**values)


class FixtureRingReader:
    """Ring sizes from ``<sysfs>/.fixture/ethtool/<name>``, written by the fixture
    generator. An interface without a file answers like a driver without rings."""

    source = "fixture"

    def __init__(self, fs: HostFS) -> None:
        self.directory = fs.sys(*FIXTURE_DIR)

    def read(self, name: str) -> RingParam | None:
        ifname(name)  # rejects "../x" and friends before they become a path
        path = os.path.join(self.directory, name)
        try:
            text = read_text(path)
        except FileNotFoundError:
            return None
        return parse_fixture(text, path)

    def close(self) -> None:
        return None


def ring_reader_for(fs: HostFS) -> RingReader:
    """The stand-in reader when the sysfs root is a fixture tree (it has the
    ``.fixture/ethtool`` directory, which a real sysfs cannot have), else the ioctl."""
    if os.path.isdir(fs.sys(*FIXTURE_DIR)):
        return FixtureRingReader(fs)
    return EthtoolRingReader()
