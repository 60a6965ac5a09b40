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
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cephnode_exporter.hostfs.batch import kernel_int_bytes, pread_bytes, pread_ints
from cephnode_exporter.hostfs.mounts import PROCFS, SYSFS, MountTable

# sysfs attributes are at most one page; /proc/cmdline is capped by the kernel at
# COMMAND_LINE_SIZE (2048 on x86, 4096 on some arches). 64 KiB bounds a garbage file.
MAX_READ_BYTES = 64 * 1024

# The largest NR_CPUS any architecture allows (arch/x86/Kconfig NR_CPUS_RANGE_END with
# MAXSMP, arch/powerpc/platforms/Kconfig.cputype): no cpulist names CPU 8192 or above.
# The bound when the kernel's own ``possible`` set is unreadable.
NR_CPUS_MAX = 8192


class ParseError(ValueError):
    """A file was read but its content is not what the kernel ABI promises."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class NotRegularFileError(OSError):
    """A path that should be a kernel attribute file is something else (a FIFO, a
    socket, a directory, a device): refused before any read, which could block forever.

    Its errno is ENXIO, not EINVAL: callers take EINVAL from an attribute as the kernel's
    own answer ("not supported": net speed, wbt_lat_usec, cpuinfo_avg_freq), and a refused
    file must be a counted read error instead (read_text keeps only the errno)."""

    def __init__(self, path: str, mode: int) -> None:
        super().__init__(errno.ENXIO, f"not a regular file ({file_kind(mode)})", path)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for an error message."""
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return f"mode {stat.S_IFMT(mode):o}"


def open_regular(path: str, *, char_device: bool = False) -> int:
    """Open a file for reading and refuse it unless it is a regular file.

    sysfs and procfs attributes are regular files (kernfs and procfs give them S_IFREG).
    Anything else where one should be (a FIFO in a copied tree or a bad bind mount) could
    block the open or the read until a writer comes, holding a collector thread forever.
    O_NONBLOCK makes the open of a FIFO return at once, and fstat refuses it before any
    read; for a regular file O_NONBLOCK changes nothing. ``char_device`` also admits a
    character device, for ``/dev/cpu_dma_latency`` (whose read returns at once).
    Raises :class:`NotRegularFileError`, or IsADirectoryError for a directory (both
    OSErrors, so callers count them per item).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISREG(mode) or (char_device and stat.S_ISCHR(mode)):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):  # what read() would have said: callers may tell it apart
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    raise NotRegularFileError(path, mode)


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


class SharedReads:
    """Small files that several collectors read in the same scrape, read once for all.

    ``/proc/cmdline`` (cpuidle, kernel, iommu) and the CPU ``online`` and ``possible``
    lists (cpuidle, cpufreq, cpuhw, firmware) were opened three and four times a scrape.
    Within a :meth:`scope` (the scraper opens one around each collection) the first read
    of a path is kept, its text or its error, and every later one gets the same; outside
    a scope every read goes to the file, so a collector used on its own (tests, one-shot
    commands) always sees the file as it is now.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes = 0
        self._texts: dict[str, str | OSError | ParseError] = {}

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        with self._lock:
            self._scopes += 1
        try:
            yield
        finally:
            with self._lock:
                self._scopes -= 1
                if not self._scopes:
                    self._texts = {}

    def text(self, path: str) -> str:
        """:func:`read_text` of ``path``, once per scope."""
        if not self._scopes:
            return read_text(path)
        hit = self._texts.get(path)
        if hit is None:
            try:
                hit = read_text(path)
            except (OSError, ParseError) as exc:
                hit = exc
            self._texts[path] = hit
        if isinstance(hit, str):
            return hit
        raise hit.with_traceback(None)


@dataclass(frozen=True)
class HostFS:
    """The host's procfs, sysfs and root filesystem mount points, the reads that the
    collectors of one scrape share, and the exporter's mount table, which tells a
    directory hidden from the exporter from one the kernel does not have."""

    procfs: str = "/proc"
    sysfs: str = "/sys"
    rootfs: str = "/"
    shared: SharedReads = field(default_factory=SharedReads, compare=False, hash=False, repr=False)
    mounts: MountTable = field(default_factory=MountTable, compare=False, hash=False, repr=False)

    def sys(self, *parts: str) -> str:
        return _joined(self.sysfs, parts)

    def proc(self, *parts: str) -> str:
        return _joined(self.procfs, parts)

    def sys_hidden(self, *parts: str) -> str | None:
        """Why sysfs path ``parts`` is hidden from the exporter (a mask mounted over it,
        or a partial sysfs), or None: not hidden, or it cannot be told (mounts.py).
        For the path where a directory reads empty or missing, never per item."""
        return self.mounts.hidden(self.sysfs, parts, SYSFS)

    def proc_hidden(self, *parts: str) -> str | None:
        """:meth:`sys_hidden` for a procfs path."""
        return self.mounts.hidden(self.procfs, parts, PROCFS)

    def root(self, *parts: str) -> str:
        return _joined(self.rootfs, parts)


# HostFS paths by mount point and parts: the collectors ask for the same few dozen on
# every scrape. Emptied past the bound (a path per process or device churns it).
_JOINED: dict[tuple[str, tuple[str, ...]], str] = {}
_JOINED_MAX = 4096


def _joined(base: str, parts: tuple[str, ...]) -> str:
    key = (base, parts)
    path = _JOINED.get(key)
    if path is None:
        if len(_JOINED) >= _JOINED_MAX:
            _JOINED.clear()
        path = _JOINED[key] = os.path.join(base, *parts)
    return path


def read_bytes(path: str, *, char_device: bool = False) -> bytes:
    """Read a whole small file with raw syscalls (half the cost of ``open()``); only a
    regular file (or with ``char_device`` a character device), see :func:`open_regular`."""
    fd = open_regular(path, char_device=char_device)
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


# Integers as the kernel prints them (lib/vsprintf.c, %d %u %lld %llu): ASCII digits after
# an optional '-', at most 20. int() alone also takes Unicode digits ("٩٠٠٠"), "_"
# separators ("9_000") and any length (a ValueError past 4300 digits), none of which the
# kernel writes. The same text as _fastread.c parse_int accepts, so the batched and the
# per-file reads agree: surrounding ASCII whitespace and a sign. The range (s64..u64 by
# default) is parse_kernel_int's, or the caller's, which names it.
S64_MIN = -(2**63)
U64_MAX = 2**64 - 1


def kernel_int(text: str) -> int | None:
    """The integer ``text`` holds as the kernel prints it (at most 20 digits, the range
    is the caller's); None for anything else. One rule with the bytes reads
    (batch.kernel_int_bytes): a str that is not ASCII is no kernel number."""
    return kernel_int_bytes(text.encode("ascii")) if text.isascii() else None


def parse_kernel_int(
    text: str, path: str, lo: int = S64_MIN, hi: int = U64_MAX, what: str = "an integer"
) -> int:
    """:func:`kernel_int` within ``lo``..``hi`` (the attribute's type), else ParseError:
    a value the kernel never prints is a read error, not a value."""
    value = kernel_int(text)
    if value is None:
        raise ParseError(path, f"not {what}: {text[:40]!r}")
    if not lo <= value <= hi:
        raise ParseError(path, f"{what} out of range {lo}..{hi}: {value}")
    return value


def read_int(path: str) -> int:
    return parse_kernel_int(read_text(path), path)


def _read_once(path: str, size: int) -> bytes:
    """Up to ``size`` bytes with open/read/close; errors name the path."""
    fd = open_regular(path)
    try:
        return os.read(fd, size)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        os.close(fd)


def read_small_int(path: str) -> int:
    """Read an integer attribute: the fast path for per-CPU counters read thousands of
    times a scrape (no decoding; :func:`kernel_int_bytes` takes the newline)."""
    data = _read_once(path, 64)
    value = kernel_int_bytes(data)
    if value is None:
        raise ParseError(path, f"not an integer: {data[:40]!r}")
    return value


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
        # Bumped on every change to ``_fds``; the descriptor lists of the path lists
        # passed with ``same`` (read_many), by the list's id, with the version then.
        self._version = 0
        self._lists: dict[int, tuple[Sequence[str], int, list[int]]] = {}

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
            # Opened outside the lock; open_regular refuses a FIFO (whose open would
            # block) and anything else that is not an attribute file.
            fd = open_regular(path)
            with self._lock:
                self._fds[path] = fd
                self._version += 1
        try:
            return os.pread(fd, size, 0)
        except OSError as exc:
            self.close(path)
            gone = exc.errno in (errno.ENODEV, errno.ESRCH)
            code = errno.ENOENT if gone else exc.errno
            raise OSError(code, os.strerror(errno.ENOENT) if gone else exc.strerror, path) from None

    def read_text(self, path: str) -> str:
        """:func:`read_text` through the kept file: the same bound, decoding and errors."""
        try:
            data = self.read_bytes(path, MAX_READ_BYTES)
        except OSError as exc:
            reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "error")
            raise OSError(exc.errno, reason, path) from None
        if len(data) == MAX_READ_BYTES:
            raise ParseError(path, f"larger than {MAX_READ_BYTES} bytes")
        return data.decode("utf-8", "replace").strip()

    def read_int(self, path: str) -> int:
        data = self.read_bytes(path, 64)
        value = kernel_int_bytes(data)
        if value is None:
            raise ParseError(path, f"not an integer: {data[:40]!r}")
        return value

    def descriptor(self, path: str) -> int | None:
        """The descriptor kept open for ``path``, if any: for a caller's own loop of
        ``pread`` over files it has read through this table before. It stays valid until
        this table closes the path (a failed read, :meth:`close_under`, :meth:`close_all`),
        which the caller must track."""
        return self._fds.get(path)

    def read_many(
        self, paths: Sequence[str], size: int = 64, *, same: bool = False
    ) -> list[bytes | None]:
        """The kept files of ``paths``, up to ``size`` bytes each (at most a page), in one
        batched call (batch.py); None for a path with no kept descriptor, a failed read,
        or a page-long one, and with ``recheck`` for a file unlinked since it was opened.
        The caller reads those with :meth:`read_bytes` / :meth:`read_text`, which open
        them (kept for the next batch) and name the error. With ``same`` the caller
        passes this very list again on later scrapes, unchanged (cpu_paths): its
        descriptors are looked up once while the table of kept files is unchanged."""
        out = pread_bytes(self._descriptors(paths, same), size, self._recheck)
        if size >= BATCH_PAGE:
            return [None if b is None or len(b) >= BATCH_PAGE else b for b in out]
        return out

    def read_many_ints(self, paths: Sequence[str], *, same: bool = False) -> list[int | None]:
        """:meth:`read_many` of decimal integers (64 bytes each, as :meth:`read_int`);
        None also where the text is no plain integer."""
        return pread_ints(self._descriptors(paths, same), 64, self._recheck)

    def _descriptors(self, paths: Sequence[str], same: bool) -> list[int]:
        """The kept descriptor of each path, -1 for none."""
        if same:
            hit = self._lists.get(id(paths))
            if hit is not None and hit[0] is paths and hit[1] == self._version:
                return hit[2]
        version = self._version  # before the lookups: a change meanwhile voids them
        get = self._fds.get
        fds = [get(p, -1) for p in paths]
        if same:
            if len(self._lists) >= _LISTS_MAX:
                self._lists = {}
            self._lists[id(paths)] = (paths, version, fds)
        return fds

    def close(self, path: str) -> None:
        with self._lock:
            fd = self._fds.pop(path, None)
            self._version += 1
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
            self._version += 1
            self._lists = {}
        for fd in fds:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close_all()


# Path lists whose descriptors one AttrFiles keeps (read_many's ``same``): a few per
# collector; more means a caller builds its list anew each time.
_LISTS_MAX = 32

# The largest batched read: a sysfs attribute is at most a page (fs/sysfs/file.c
# sysfs_kf_seq_show); a read that fills it goes to the plain path, which bounds it.
BATCH_PAGE = 4096


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


def parse_cpulist(text: str, limit: int = NR_CPUS_MAX) -> list[int]:
    """Parse the kernel's cpulist format ("0-3,8,10-11"); every CPU must be below ``limit``.

    See Documentation/admin-guide/cputopology.rst. The kernel prints a cpulist from a
    bitmap (``%*pbl``, lib/bitmap-str.c), so its ranges ascend and never overlap; a list
    that repeats or reorders ranges is not one the kernel wrote, and is refused before it
    is expanded. Together with ``limit`` this bounds the result to ``limit`` CPUs whatever
    the file holds ("0-65535" repeated would otherwise be millions of entries).
    """
    cpus: list[int] = []
    text = text.strip()
    if not text:
        return cpus
    if not text.isascii():  # int() would take Unicode digits ("٣"); %*pbl prints ASCII
        raise ValueError(f"bad cpulist {text[:40]!r}")
    previous = -1
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        # Plain digits ("1_0", " 3", "+3" are not %*pbl), bounded before int().
        if not (lo.isdigit() and len(lo) < 10 and (not sep or (hi.isdigit() and len(hi) < 10))):
            raise ValueError(f"bad cpulist element {part[:40]!r}")
        first = int(lo)
        last = int(hi) if sep else first
        if first < 0 or last < first:
            raise ValueError(f"bad cpulist element {part[:40]!r}")
        if last >= limit:
            raise ValueError(f"cpulist element {part[:40]!r} beyond CPU {limit - 1}")
        if first <= previous:
            raise ValueError(f"cpulist element {part[:40]!r} not in ascending order")
        previous = last
        cpus.extend(range(first, last + 1))
    return cpus


def file_exists(path: str) -> bool:
    return os.path.exists(path)


def is_dir(path: str) -> bool:
    return Path(path).is_dir()
