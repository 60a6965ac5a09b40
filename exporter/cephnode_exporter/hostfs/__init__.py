"""The parsing layer: typed views of procfs, sysfs and the root filesystem.

Everything that touches a file of the host goes through :class:`HostFS`, which is built
from the three mount points given on the command line, so tests point it at a fixture
tree. Modules in this package read and parse; they know nothing about Prometheus.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

# sysfs attributes are at most one page; /proc/cmdline is capped by the kernel at
# COMMAND_LINE_SIZE (2048 on x86, 4096 on some arches). 64 KiB bounds a garbage file.
MAX_READ_BYTES = 64 * 1024


class ParseError(ValueError):
    """A file was read but its content is not what the kernel ABI promises."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


@dataclass
class ReadErrors:
    """Per-item failures of one collection: the item is skipped, the error is counted.

    A collector keeps going when one CPU's file is unreadable; the count is exported so
    a skipped value is visible rather than silently missing.
    """

    items: list[str] = field(default_factory=list)

    def add(self, exc: BaseException) -> None:
        self.items.append(str(exc))

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class HostFS:
    """The host's procfs, sysfs and root filesystem mount points."""

    procfs: str = "/proc"
    sysfs: str = "/sys"
    rootfs: str = "/"

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs, *parts)

    def root(self, *parts: str) -> str:
        return os.path.join(self.rootfs, *parts)


def read_bytes(path: str) -> bytes:
    """Read a whole small file with raw syscalls (half the cost of ``open()``)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, MAX_READ_BYTES)
        if len(data) == MAX_READ_BYTES:
            raise ParseError(path, f"larger than {MAX_READ_BYTES} bytes")
        return data
    finally:
        os.close(fd)


def read_text(path: str) -> str:
    """Read a sysfs/procfs attribute and strip the trailing newline."""
    try:
        return read_bytes(path).decode("utf-8", "replace").strip()
    except OSError as exc:
        # Keep the path in the message: EIO from a driver says nothing by itself.
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "error")
        raise OSError(exc.errno, reason, path) from None


def read_int(path: str) -> int:
    text = read_text(path)
    try:
        return int(text)
    except ValueError:
        raise ParseError(path, f"not an integer: {text[:40]!r}") from None


def read_optional_text(path: str) -> str | None:
    """Like :func:`read_text`, but an absent file (older kernel, other driver) is None."""
    try:
        return read_text(path)
    except FileNotFoundError:
        return None


def list_dir(path: str) -> list[str]:
    """Sorted directory entries; an absent directory is empty."""
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def parse_cpulist(text: str) -> list[int]:
    """Parse the kernel's cpulist format ("0-3,8,10-11").

    See Documentation/admin-guide/cputopology.rst.
    """
    cpus: list[int] = []
    text = text.strip()
    if not text:
        return cpus
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                first, last = int(lo), int(hi)
                if last < first or last - first > 65536:
                    raise ValueError
                cpus.extend(range(first, last + 1))
            else:
                cpus.append(int(lo))
        except ValueError:
            raise ValueError(f"bad cpulist element {part!r}") from None
    return cpus


def file_exists(path: str) -> bool:
    return os.path.exists(path)


def is_dir(path: str) -> bool:
    return Path(path).is_dir()
