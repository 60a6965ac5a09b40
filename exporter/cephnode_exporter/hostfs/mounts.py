"""The exporter's own mount table: is a directory of the host's sysfs or procfs hidden?

A directory can be hidden from the exporter while the kernel has it. A container
runtime masks paths with an empty read-only tmpfs (a directory) or a bind mount of
/dev/null (a file): runc's ``maskPath`` (libcontainer/rootfs_linux.go), applied to
Docker's default masked paths (moby oci/defaults.go: ``/sys/firmware``,
``/sys/devices/virtual/powercap``, ``/proc/acpi``, ``/proc/scsi``, ...) and to any an
operator adds. A container given only parts of the host's sysfs (bind mounts of a few
subdirectories under an ordinary directory) lacks the rest. Either way the directory
reads as empty or missing, which a collector would take for "no such hardware" and a
check for ``skip``: a detuned node would look clean. The mount table tells the two apart.

Source: ``/proc/self/mountinfo`` of the exporter process (Documentation/filesystems/
proc.rst, section 3.5 "/proc/<pid>/mountinfo"): its own mount namespace, which is where
``--path.sysfs`` and ``--path.procfs`` are looked up, whatever ``--path.procfs`` says.
One line per mount::

    36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    (1)(2) (3)  (4)   (5)     (6)      (7)   (8) (9)    (10)        (11)

mount ID, parent ID, major:minor, root (the part of its filesystem the mount shows: "/"
for a whole filesystem, "/null" for a bind of a device node), mount point, mount
options, optional fields up to the separator "-", filesystem type, source, super
options. show_mountinfo() (fs/proc_namespace.c) escapes space, tab, newline and
backslash in the paths as octal (``\\040``), and separates fields by single spaces.

The rule (:meth:`MountTable.hidden`): the mount that shows a path is the one with the
deepest mount point at or above it (the topmost of a stack at that point). The path is
hidden when that mount lies inside the sysfs (procfs) tree and is of another type (a
tmpfs mask, a /dev/null bind); or when the tree's own root is no sysfs but some sysfs
is mounted below it and this path is under none of them (a partial bind). A tree that
has no sysfs mount at or below its root at all is a plain directory, such as a test's
fixture tree or a copy: nothing can be told from mounts, and nothing is hidden.
"""

from __future__ import annotations

import os
import select
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"
# The filesystem types of the trees the exporter reads (fs/sysfs/mount.c, fs/proc/root.c).
SYSFS = "sysfs"
PROCFS = "proc"

# A mountinfo line is about 100 to 200 bytes; a Kubernetes node with thousands of pod
# volumes has a few thousand lines. 4 MiB bounds a runaway table (tens of thousands of
# mounts); the lines beyond it are not read, which the table notes (``complete``).
MAX_BYTES = 4 * 1024 * 1024
# Seconds a table is used without asking whether it changed (no syscall at all).
CHECK_SECONDS = 1.0
# Seconds after which a table is read again even if nothing said it changed: a procfs
# mountinfo reports every change by poll() (below), a test's file cannot.
MAX_AGE_SECONDS = 300.0
# Seconds before an unreadable mountinfo is tried again.
RETRY_SECONDS = 60.0
# Answers kept per table (a few paths per collector); emptied past the bound.
MEMO_MAX = 256


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo, the fields the rule needs."""

    mount_id: int
    parent_id: int
    root: str  # the part of the filesystem shown: "/" whole, "/null" a device's bind
    mount_point: str
    fstype: str


def unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040``) decoded; an escape the kernel
    does not write is kept as it is."""
    if "\\" not in field:
        return field
    out: list[str] = []
    i = 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mount(line: str) -> Mount | None:
    """One mountinfo line; None for a line that is not one (garbage is skipped, never
    fatal: a table with one bad line still says where everything else is)."""
    fields = line.split(" ")
    try:
        sep = fields.index("-", 6)
    except ValueError:
        return None
    if len(fields) < sep + 2 or not fields[sep + 1]:
        return None
    ids = fields[0], fields[1]
    if not all(f.isascii() and f.isdigit() and len(f) < 20 for f in ids):
        return None
    root, point = unescape(fields[3]), unescape(fields[4])
    if not (root.startswith("/") and point.startswith("/")):
        return None
    return Mount(int(ids[0]), int(ids[1]), root, point, unescape(fields[sep + 1]))


def parse_mountinfo(text: str) -> tuple[list[Mount], int]:
    """The mounts of a mountinfo text, in its order, and the count of lines skipped."""
    mounts: list[Mount] = []
    bad = 0
    for line in text.split("\n"):
        if not line:
            continue
        mount = parse_mount(line)
        if mount is None:
            bad += 1
        else:
            mounts.append(mount)
    return mounts, bad


def _under(path: str, point: str) -> bool:
    """Whether ``path`` is ``point`` or below it (both absolute and normalised)."""
    return path == point or point == "/" or path.startswith(point + "/")


def _article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def covering(mounts: Sequence[Mount], path: str) -> Mount | None:
    """The mount that shows ``path``: the deepest mount point at or above it, and of a
    stack of mounts at that point the top one (the one no other there is mounted on;
    mount order decides when the IDs do not)."""
    best: list[Mount] = []
    for m in mounts:
        if not _under(path, m.mount_point):
            continue
        if not best or len(m.mount_point) > len(best[0].mount_point):
            best = [m]
        elif m.mount_point == best[0].mount_point:
            best.append(m)
    if not best:
        return None
    below = {m.parent_id for m in best}
    tops = [m for m in best if m.mount_id not in below]
    return (tops or best)[-1]


def judge(mounts: Sequence[Mount], root: str, path: str, fstype: str, shown: str) -> str | None:
    """Why ``path`` (absolute, below the real tree root ``root``) is hidden, judged from
    ``mounts``; None when it is not, or when nothing can be told. ``shown`` is the path as
    the user configured it, for the message. The pure part of :meth:`MountTable.hidden`."""
    top = covering(mounts, path)
    if top is None:
        return None
    inside = top.mount_point != root and _under(top.mount_point, root)
    if top.fstype == fstype:
        return None
    if inside:
        if top.root == "/null" or top.root.endswith("/null"):
            what = "a bind mount of /dev/null"
        else:
            what = f"{_article(top.fstype)} {top.fstype}"
        where = "it" if top.mount_point == path else top.mount_point
        return f"{shown} is hidden: {what} is mounted over {where} (container mask)"
    # The tree's root is not a kernel tree: the host's parts bound below it, if any.
    parts = [
        m.mount_point
        for m in mounts
        if m.fstype == fstype and m.mount_point != root and _under(m.mount_point, root)
    ]
    if not parts:
        return None  # a plain directory (a fixture tree, a copy): nothing to tell
    listed = ", ".join(sorted(parts)[:3]) + (", ..." if len(parts) > 3 else "")
    return (
        f"{shown} is hidden: only parts of the host's {fstype} are mounted under {root} "
        f"({listed}), and none of them covers it (partial bind)"
    )


class MountTable:
    """The exporter's mount table, read when first asked and kept.

    It is read again when it changed: a procfs mountinfo kept open reports a mount or
    unmount in its namespace as POLLPRI | POLLERR (mounts_poll(), fs/proc_namespace.c;
    proc(5)), asked at most once per ``CHECK_SECONDS``; and after ``MAX_AGE_SECONDS``
    whatever it says. Answers are kept per path until then. An unreadable mountinfo
    means "cannot tell": :meth:`hidden` says None and ``error`` says why, and it is tried
    again after ``RETRY_SECONDS``. Several collector threads may ask at once.
    """

    def __init__(self, path: str = MOUNTINFO, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._mounts: list[Mount] | None = None
        self._read_at = -float("inf")
        self._checked_at = -float("inf")
        self._memo: dict[tuple[str, tuple[str, ...], str], str | None] = {}
        self._roots: dict[str, str] = {}
        # What the last read found: lines skipped, whether the bound cut it, its error.
        self.bad_lines = 0
        self.complete = True
        self.error: str | None = None
        self.reads = 0

    def close(self) -> None:
        with self._lock:
            self._close_fd()

    def __del__(self) -> None:
        self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def mounts(self) -> list[Mount] | None:
        """The current table; None when mountinfo cannot be read."""
        with self._lock:
            return self._current()

    def hidden(self, root: str, parts: Sequence[str], fstype: str) -> str | None:
        """Why ``root``/``parts`` is hidden from the exporter (see the module's rule),
        or None: not hidden, or it cannot be told (mountinfo unreadable)."""
        key = (root, tuple(parts), fstype)
        with self._lock:
            mounts = self._current()
            if mounts is None:
                return None
            if key in self._memo:
                return self._memo[key]
            real = self._roots.get(root)
            if real is None:
                real = self._roots[root] = os.path.realpath(root)
            path = os.path.normpath(os.path.join(real, *parts))
            why = judge(mounts, real, path, fstype, os.path.join(root, *parts))
            if len(self._memo) >= MEMO_MAX:
                self._memo.clear()
            self._memo[key] = why
            return why

    def _current(self) -> list[Mount] | None:
        now = self._clock()
        if now - self._checked_at < CHECK_SECONDS:
            return self._mounts
        self._checked_at = now
        if self._fd is None:
            if self.error is None or now - self._read_at >= RETRY_SECONDS:
                self._read(now)
        elif now - self._read_at >= MAX_AGE_SECONDS or self._changed():
            self._read(now)
        return self._mounts

    def _changed(self) -> bool:
        if self._fd is None:
            return True
        poller = select.poll()
        poller.register(self._fd, select.POLLPRI)
        try:
            events = poller.poll(0)
        except OSError:
            return True
        return any(mask & (select.POLLPRI | select.POLLERR) for _, mask in events)

    def _read(self, now: float) -> None:
        """Read the table afresh; the descriptor is kept for :meth:`_changed` (its poll
        baseline is the state at the open, so a change after it is seen next time)."""
        self._close_fd()
        self._read_at = now
        self._memo = {}
        self._roots = {}
        self.reads += 1
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            self._fail(exc)
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO must not block us
                raise OSError(0, "not a regular file", self.path)
            chunks: list[bytes] = []
            size = 0
            while size < MAX_BYTES:
                chunk = os.read(fd, min(65536, MAX_BYTES - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            complete = size < MAX_BYTES or not os.read(fd, 1)
        except OSError as exc:
            os.close(fd)
            self._fail(exc)
            return
        data = b"".join(chunks)
        if not complete:
            data = data[: data.rfind(b"\n") + 1]  # whole lines only
        self._mounts, self.bad_lines = parse_mountinfo(data.decode("utf-8", "surrogateescape"))
        self.complete = complete
        self.error = None
        self._fd = fd

    def _fail(self, exc: OSError) -> None:
        self._mounts = None
        self.error = f"{self.path}: {exc.strerror or exc}"
