"""The parsing layer: typed views of procfs, sysfs and the root filesystem.

Everything that touches a file of the host goes through :class:`HostFS`, which is built
from the three mount points given on the command line, so tests point it at a fixture
tree. Modules in this package read and parse; they know nothing about Prometheus.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
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


def _read_once(path: str, size: int) -> bytes:
    """Up to ``size`` bytes with open/read/close; errors name the path."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        os.close(fd)


def read_small_int(path: str) -> int:
    """Read an integer attribute: the fast path for per-CPU counters read thousands of
    times a scrape (no decoding, no strip; ``int()`` takes bytes and ignores the newline)."""
    data = _read_once(path, 64)
    try:
        return int(data)
    except ValueError:
        raise ParseError(path, f"not an integer: {data[:40]!r}") from None


class AttrFiles:
    """sysfs and procfs files kept open and re-read with ``pread(fd, n, 0)``.

    sysfs regenerates an attribute on every read from offset 0 (kernfs seq_file; see
    Documentation/filesystems/sysfs.rst on re-reading), and so does a procfs seq_file
    such as ``/proc/<pid>/task/<tid>/status``: one syscall replaces open/read/close
    (measured 1.0 us against 7.7 us per cpuidle file, 0.8 ms against 2.1 ms for 100
    thread statuses). The price is a descriptor and about a page of kernel memory per
    file, so at most ``budget`` files are kept (a few more while several threads open at
    once); reads beyond it take the open/read/close path. A kept file whose object went
    (a CPU offlined: ENODEV; a thread exited: ESRCH) is closed and reads as
    FileNotFoundError, like a fresh open would; the next read opens the path afresh.
    With ``recheck`` a kept file that was unlinked (a copied tree rewritten under
    ``--path.procfs``) is reopened, at one fstat per read.

    Several threads may read through one instance, each its own paths: the table of
    kept files is under a lock, no open or read is.
    """

    def __init__(self, budget: int, recheck: bool = False) -> None:
        self._fds: dict[str, int] = {}
        self._budget = budget
        self._recheck = recheck
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._fds)

    def read_bytes(self, path: str, size: int = 64) -> bytes:
        """Up to ``size`` bytes of the file from offset 0."""
        fd = self._fds.get(path)
        if fd is not None and self._recheck:
            try:
                if not os.fstat(fd).st_nlink:
                    self.close(path)
                    fd = None
            except OSError:
                pass  # the pread below answers for the descriptor
        if fd is None:
            with self._lock:
                full = len(self._fds) >= self._budget
            if full:
                return _read_once(path, size)
            # Opened outside the lock: an open can block (a FIFO where an attribute
            # should be), and a stuck reader must not stall close_all().
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            with self._lock:
                self._fds[path] = fd
        try:
            return os.pread(fd, size, 0)
        except OSError as exc:
            self.close(path)
            gone = exc.errno in (errno.ENODEV, errno.ESRCH)
            code = errno.ENOENT if gone else exc.errno
            raise OSError(code, os.strerror(code) if gone else exc.strerror, path) from None

    def read_int(self, path: str) -> int:
        data = self.read_bytes(path, 64)
        try:
            return int(data)
        except ValueError:
            raise ParseError(path, f"not an integer: {data[:40]!r}") from None

    def close(self, path: str) -> None:
        with self._lock:
            fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close_under(self, prefix: str, keep: frozenset[str] | set[str] = frozenset()) -> None:
        """Close the files under ``prefix`` except those in ``keep``."""
        with self._lock:  # another thread's open may add to the table meanwhile
            paths = [p for p in self._fds if p.startswith(prefix) and p not in keep]
        for path in paths:
            self.close(path)

    def close_all(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close_all()


def fd_budget(share: float) -> int:
    """Descriptors a collector may keep open: ``share`` of the soft RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(0, int(soft * share))


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one (allowed unprivileged).

    systemd starts services with a soft limit of 1024 and a hard one of 524288 (systemd
    240+, "File Descriptor Limits" in systemd.exec(5)) and expects programs that need more
    to raise it themselves. Capped at 65536: no collector needs more.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


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
