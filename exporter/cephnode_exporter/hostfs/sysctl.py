"""Kernel tunables (sysctls) from ``/proc/sys``.

A sysctl ``net.core.somaxconn`` is the file ``<procfs>/sys/net/core/somaxconn``. Names
follow sysctl.d(5) (systemd, man/sysctl.d.xml): the first separator decides the form. If
it is a dot, dots and slashes swap, so an interface name with a dot is written with a
slash (``net.ipv4.conf.eth0/100.rp_filter`` is ``net/ipv4/conf/eth0.100/rp_filter``); if it
is a slash, the name is the path as given.

Integer sysctls are printed by ``proc_dointvec``/``proc_doulongvec_minmax``
(torvalds/linux kernel/sysctl.c): the values of a vector separated by a tab, then a
newline (``net.ipv4.tcp_rmem`` reads ``"4096\\t131072\\t6291456\\n"``). Others are strings
(``net.ipv4.tcp_congestion_control``). Network sysctls are per network namespace and
``/proc/sys/net`` shows the namespace of the *reading process* (net/sysctl_net.c,
``net_ctl_header_lookup`` uses ``current->nsproxy->net_ns``), whatever ``--path.procfs``
points at: an exporter in a container must share the host's network namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cephnode_exporter.hostfs import HostFS, ParseError, read_text

# One path component: what the kernel's sysctl tables and network interface names use
# (interface names may hold '.', ':', '@', '-', '+'; see dev_valid_name() in net/core/dev.c).
_COMPONENT = re.compile(r"[A-Za-z0-9_.:@+-]+")
# One field of an integer sysctl: proc_dointvec and proc_doulongvec_minmax print "%d"/"%lu".
_DECIMAL = re.compile(r"-?[0-9]{1,20}")  # at most 20 digits: the u64 range


def sysctl_path_parts(name: str) -> list[str]:
    """The path components under ``/proc/sys`` of a sysctl name; ValueError if malformed."""
    if not name or len(name) > 256:
        raise ValueError(f"bad sysctl name {name[:60]!r}")
    first = min((i for i in (name.find("."), name.find("/")) if i >= 0), default=-1)
    if first >= 0 and name[first] == "/":
        parts = name.split("/")
    else:
        parts = [p.replace("/", ".") for p in name.split(".")]
    for part in parts:
        if part in ("", ".", "..") or not _COMPONENT.fullmatch(part):
            raise ValueError(f"bad sysctl name {name!r}: component {part!r}")
    return parts


@dataclass(frozen=True)
class SysctlValue:
    """One sysctl as read: the text, and its integers when every field is one."""

    text: str
    # The values of an integer sysctl in kernel order (one for a scalar); None for a
    # string sysctl.
    ints: tuple[int, ...] | None


def parse_sysctl(text: str, path: str = "sysctl") -> SysctlValue:
    """Parse the content of a sysctl file (the trailing newline already stripped or not)."""
    text = text.strip()
    if any(ord(c) < 32 and c not in "\t " for c in text):
        raise ParseError(path, f"control characters in value: {text[:40]!r}")
    fields = text.split()
    # Decimal as the kernel prints it; int() alone would also take "1_000" or "+5".
    numeric = bool(fields) and all(_DECIMAL.fullmatch(f) for f in fields)
    ints = tuple(int(f) for f in fields) if numeric else None
    return SysctlValue(text=" ".join(fields) if ints is not None else text, ints=ints)


def sysctl_target(value: object) -> tuple[int, ...] | str:
    """A sysctl value as a profile gives it: integers (``2048``, ``"10240 87380
    2147483647"``, a list of integers) or, for a string sysctl, the text; ValueError when
    it is neither (a bool, an empty value, a list of something else)."""
    if isinstance(value, bool):
        raise ValueError("value must be an integer, a string or a list of integers")
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError("a list value must hold integers")
        return tuple(value)
    if not isinstance(value, str):
        raise ValueError("value must be an integer, a string or a list of integers")
    text = " ".join(value.split())
    if not text:
        raise ValueError("value is empty")
    try:
        return tuple(int(f) for f in text.split())
    except ValueError:
        return text


def read_sysctl(fs: HostFS, name: str, numeric: bool = False) -> SysctlValue | None:
    """Read one sysctl; None when its file is missing: the running kernel lacks it, or
    this view of /proc/sys does not show it (another network namespace, a masked
    /proc/sys, a --path.procfs that is not the host's); the caller cannot tell which.

    With ``numeric`` (the profile compares it as integers), a value that is not decimal
    integers is a ParseError: the kernel prints integer sysctls in decimal
    (``proc_dointvec``), so "0x10" or an empty file is not a value it wrote.
    Raises OSError (unreadable: EIO, EACCES for 0600 sysctls, a directory) or ParseError.
    """
    path = fs.proc("sys", *sysctl_path_parts(name))
    try:
        text = read_text(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        # A component of the name is a file ("net.core.somaxconn.x"): no such sysctl.
        return None
    value = parse_sysctl(text, path)
    if numeric and value.ints is None:
        raise ParseError(path, f"not decimal integers: {value.text[:40]!r}")
    return value
