"""One process as procfs shows it: CPU time, memory, threads, context switches, CPU
affinity and the malloc it links. The ``osd`` collector reads its OSDs through this.

Files (Documentation/filesystems/proc.rst, fs/proc/array.c, fs/proc/task_mmu.c):

- ``/proc/<pid>/stat``: one line, ``pid (comm) state ppid ...``; ``comm`` may hold spaces
  and parentheses, so the fields are split after the *last* ``)``. utime (field 14) and
  stime (15) are clock ticks of USER_HZ (``sysconf(_SC_CLK_TCK)``, 100 on x86) summed
  over every thread, the exited ones included (``do_task_stat(..., whole=1)``);
  starttime (22) is ticks after boot and tells a reused pid from the old process.
- ``/proc/<pid>/task/<tid>/status``: ``Key:\\tvalue`` lines. ``VmRSS`` (kB) and
  ``Threads`` belong to the whole process; ``voluntary_ctxt_switches``,
  ``nonvoluntary_ctxt_switches`` and ``Cpus_allowed_list`` belong to that one thread
  (``task_context_switch_counts()`` prints ``p->nvcsw`` of the task it is given).
- ``/proc/<pid>/maps``: one mapping per line, the path last; the shared objects a process
  linked are the paths ending in ``.so`` or ``.so.N``.

Why not psutil: ``psutil.Process.num_ctx_switches()`` reads
``/proc/<pid>/status`` of the main thread only, and an OSD's main thread only waits: on
the test cluster it showed 209 voluntary switches where the sum over the OSD's 59 threads
was 2,123. ``cpu_affinity()`` calls ``sched_getaffinity(2)``, which no procfs root can
redirect, and ``psutil.PROCFS_PATH`` is one global for the whole exporter, where each
collector gets its root injected (``--path.procfs``) and tests point it at a generated
tree. The three files above have had the same format since Linux 2.6.23, so a thin
reader is less code than working around psutil; nothing here uses it.

Cost, measured on the test cluster (59 threads): 1.0 ms per OSD for the thread
statuses, 0.03 ms for ``stat``; ``maps`` (0.4 ms, 43 KB) is read once per process
because the allocator cannot change while it runs.

Size: the OSD process reader above, and :func:`find_process`, which finds a daemon
(tuned) by its ``comm`` with the same procfs conventions.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cephnode_exporter.hostfs import (
    BATCH_PAGE,
    MAX_READ_BYTES,
    AttrFiles,
    HostFS,
    ParseError,
    open_regular,
    parse_cpulist,
    read_bytes,
)
from cephnode_exporter.hostfs.blockdev import OSDBlock
from cephnode_exporter.hostfs.dmcrypt import Encryption

# Clock ticks per second of /proc/<pid>/stat's times (USER_HZ; 100 on every Linux arch
# that matters, but the kernel ABI says to ask).
USER_HZ = os.sysconf("SC_CLK_TCK")

# /proc/<pid>/stat fields counted from 1 as proc(5) numbers them; the list starts at
# field 3 (state), right after the ")" that closes comm.
_FIELD_STATE, _FIELD_UTIME, _FIELD_STIME = 3, 14, 15
_FIELD_THREADS, _FIELD_STARTTIME = 20, 22

# The shared objects that replace malloc in Ceph builds: gperftools' tcmalloc (Ceph's
# default ALLOCATOR since Hammer: libtcmalloc.so.4, or libtcmalloc_minimal.so.4) and
# jemalloc (libjemalloc.so.2); glibc's malloc lives in libc itself.
_ALLOCATOR_LIBS = (("libtcmalloc", "tcmalloc"), ("libjemalloc", "jemalloc"))
# glibc's libc: libc.so.6 (2.34 and later), libc-2.31.so (before).
_LIBC_RE = re.compile(r"libc(?:\.so\.6|-2\.\d+\.so)$")
# A maps line of a huge process is < 4 KiB (path limit); a whole maps file of an OSD is
# about 50 KB. 64 MiB bounds a garbage file without ever cutting a real one.
MAX_MAPS_BYTES = 64 << 20

# comm of the processes that may listen on an OSD admin socket (the classic OSD and
# crimson). Anything else under that pid means the pid belongs to another pid namespace
# than the procfs we were given (an exporter in a container with the host's /proc).
OSD_COMMS = frozenset({"ceph-osd", "crimson-osd"})


class ProcessGone(Exception):
    """The pid is not (or no longer) in this procfs: exited, or another pid namespace."""


@dataclass(frozen=True)
class ProcStat:
    """What the collector uses of ``/proc/<pid>/stat``."""

    comm: str
    state: str
    utime_ticks: int
    stime_ticks: int
    threads: int
    starttime: int  # clock ticks after boot


def parse_stat(text: str, path: str = "stat") -> ProcStat:
    """``/proc/<pid>/stat`` -> :class:`ProcStat`."""
    open_, close = text.find("("), text.rfind(")")
    if open_ < 0 or close < open_:
        raise ParseError(path, f"no (comm) in {text[:60]!r}")
    rest = text[close + 1 :].split()
    # rest[0] is field 3; proc(5) documents 52 fields, kernels since 2.6 print at least 44.
    if len(rest) < _FIELD_STARTTIME - 2:
        raise ParseError(path, f"{len(rest) + 2} fields, expected at least {_FIELD_STARTTIME}")

    def num(field_no: int) -> int:
        value = rest[field_no - _FIELD_STATE]
        # isdigit() alone takes "²" and "٣", which int() then refuses or misreads.
        if not (value.isascii() and value.isdigit() and len(value) <= 20):
            raise ParseError(path, f"field {field_no} is not a count: {value[:20]!r}")
        return int(value)

    return ProcStat(
        comm=text[open_ + 1 : close],
        state=rest[0],
        utime_ticks=num(_FIELD_UTIME),
        stime_ticks=num(_FIELD_STIME),
        threads=num(_FIELD_THREADS),
        starttime=num(_FIELD_STARTTIME),
    )


@dataclass(frozen=True)
class ThreadStatus:
    """What the collector uses of ``/proc/<pid>/task/<tid>/status``; None = no such line
    (``VmRSS`` is missing for a zombie or a kernel thread)."""

    name: str
    threads: int | None
    rss_bytes: int | None
    voluntary: int
    involuntary: int
    cpus_allowed: frozenset[int]


# The lines of a task's status that are used. A status has some 55 lines and an OSD some
# 100 threads, read every scrape: finding these six is a quarter of the cost of splitting
# every line (measured: 57 against 15 us per thread, 100 threads).
_STATUS_KEYS = (
    "Name",
    "Threads",
    "VmRSS",
    "Cpus_allowed_list",
    "voluntary_ctxt_switches",
    "nonvoluntary_ctxt_switches",
)


def _status_values(text: str) -> dict[str, str]:
    text = "\n" + text  # every key then follows a newline ("voluntary" is in "nonvoluntary")
    values = {}
    for key in _STATUS_KEYS:
        start = text.find(f"\n{key}:")
        if start < 0:
            continue
        start += len(key) + 2
        end = text.find("\n", start)
        values[key] = text[start : None if end < 0 else end].strip()
    return values


@functools.lru_cache(maxsize=64)
def _cpus(cpulist: str) -> frozenset[int]:
    """A task's Cpus_allowed_list, parsed once per distinct list (an OSD's threads share
    one or a few)."""
    return frozenset(parse_cpulist(cpulist))


def parse_status(text: str, path: str = "status") -> ThreadStatus:
    """``/proc/<pid>/status`` (or a task's) -> :class:`ThreadStatus`."""
    values = _status_values(text)

    def count(key: str, required: bool = True) -> int | None:
        value = values.get(key)
        if value is None:
            if required:
                raise ParseError(path, f"no {key} line")
            return None
        number = value.removesuffix(" kB").strip()
        if not (number.isascii() and number.isdigit() and len(number) <= 20):
            raise ParseError(path, f"{key} is not a count: {value[:20]!r}")
        return int(number)

    if "Cpus_allowed_list" not in values:
        raise ParseError(path, "no Cpus_allowed_list line")
    try:
        cpus = _cpus(values["Cpus_allowed_list"])
    except ValueError as exc:
        raise ParseError(path, f"Cpus_allowed_list: {exc}") from None
    rss_kib = count("VmRSS", required=False)
    return ThreadStatus(
        name=values.get("Name", ""),
        threads=count("Threads", required=False),
        rss_bytes=None if rss_kib is None else rss_kib * 1024,
        voluntary=count("voluntary_ctxt_switches") or 0,
        involuntary=count("nonvoluntary_ctxt_switches") or 0,
        cpus_allowed=cpus,
    )


# The three lines read of every thread but the leader, as bytes (see _thread_counts).
_VOLUNTARY = b"\nvoluntary_ctxt_switches:"
_INVOLUNTARY = b"\nnonvoluntary_ctxt_switches:"
_CPUS_ALLOWED = b"\nCpus_allowed_list:"


def _line(data: bytes, key: bytes) -> bytes | None:
    start = data.find(key)
    if start < 0:
        return None
    start += len(key)
    end = data.find(b"\n", start)
    return data[start : None if end < 0 else end].strip()


# The three lines in the order fs/proc/array.c proc_pid_status() prints them:
# task_cpus_allowed() (Cpus_allowed, Cpus_allowed_list), cpuset_task_status_allowed()
# (Mems_allowed, Mems_allowed_list), then task_context_switch_counts() (voluntary and
# nonvoluntary, one after the other). One match, from where the first line starts (found
# with bytes.find, faster than the regex's own scan), reads all three; a status in
# another order (another kernel) takes the three separate searches below.
_COUNTS_RE = re.compile(
    rb"\nCpus_allowed_list:[ \t]*([^\n]*?)[ \t]*\n(?:[^\n]*\n)*?"
    rb"voluntary_ctxt_switches:[ \t]*([0-9]{1,20})[ \t]*\n"
    rb"nonvoluntary_ctxt_switches:[ \t]*([0-9]{1,20})[ \t]*(?:\n|$)"
)


@functools.lru_cache(maxsize=64)
def _cpus_bytes(cpulist: bytes) -> frozenset[int]:
    """:func:`_cpus` of the raw line (no decoding for a list seen before)."""
    return _cpus(cpulist.decode("ascii"))


def _thread_counts(data: bytes) -> tuple[int, int, frozenset[int]] | None:
    """(voluntary, involuntary, allowed CPUs) of a thread's status, or None when any
    of the three lines is missing or malformed (then :func:`parse_status` reads it and
    names the fault). The fast path for the threads other than the leader, which give
    nothing else: one search of the raw bytes instead of decoding and splitting the 55
    lines an OSD's 50-100 threads each print every scrape."""
    start = data.find(_CPUS_ALLOWED)
    found = _COUNTS_RE.match(data, start) if start >= 0 else None
    if found is not None:
        allowed, vol_b, invol_b = found.groups()
        try:
            return int(vol_b), int(invol_b), _cpus_bytes(allowed)
        except ValueError:  # UnicodeDecodeError included
            return None
    vol = _line(data, _VOLUNTARY)
    invol = _line(data, _INVOLUNTARY)
    allowed = _line(data, _CPUS_ALLOWED)
    if vol is None or invol is None or allowed is None:
        return None
    if not (vol.isdigit() and invol.isdigit() and len(vol) <= 20 and len(invol) <= 20):
        return None
    try:
        cpus = _cpus(allowed.decode("ascii"))
    except ValueError:  # UnicodeDecodeError included
        return None
    return int(vol), int(invol), cpus


StatusCounts = tuple[dict[int, tuple[int, int]], set[bytes], list[int]]


def status_counts_python(tids: Sequence[int], texts: Sequence[bytes | None]) -> StatusCounts:
    """Of each thread's status text: ``{tid: (voluntary, involuntary)}``, the distinct
    ``Cpus_allowed_list`` values as printed, and the indices of the texts not read here
    (None, or not in proc_pid_status()'s order), which the caller reads one by one. The
    pure-Python twin of the compiled ``status_counts`` (hostfs/_fastread.c): the same
    results, where the compiled one may leave more to the caller, never fewer wrongly."""
    counts: dict[int, tuple[int, int]] = {}
    lists: set[bytes] = set()
    rest: list[int] = []
    for i, (tid, data) in enumerate(zip(tids, texts, strict=True)):
        start = -1 if data is None else data.find(_CPUS_ALLOWED)
        found = _COUNTS_RE.match(data, start) if data is not None and start >= 0 else None
        if found is None:
            rest.append(i)
            continue
        allowed, vol_b, invol_b = found.groups()
        counts[tid] = (int(vol_b), int(invol_b))
        lists.add(allowed)
    return counts, lists, rest


def _load_status_counts() -> Callable[[Sequence[int], Sequence[bytes | None]], StatusCounts]:
    try:
        compiled = importlib.import_module("cephnode_exporter.hostfs._fastread")
    except ImportError:  # hostfs/batch.py logs that the compiled reader is missing
        return status_counts_python
    return compiled.status_counts  # type: ignore[no-any-return]


# The compiled status_counts when the package was built with it (hostfs/batch.py says
# which at start), else the Python one.
status_counts = _load_status_counts()


def allocator_of(paths: list[str]) -> str:
    """The malloc a process uses, from the paths of its mappings: ``tcmalloc``,
    ``jemalloc``, ``libc`` (glibc's own malloc) or ``unknown`` (a static binary, or a
    libc this does not know). A statically linked tcmalloc looks like libc here."""
    has_libc = False
    for p in paths:
        base = p.rsplit("/", 1)[-1]
        for prefix, name in _ALLOCATOR_LIBS:
            if base.startswith(prefix) and ".so" in base:
                return name
        if _LIBC_RE.search(base):
            has_libc = True
    return "libc" if has_libc else "unknown"


def maps_paths(lines: list[str]) -> list[str]:
    """The file paths of ``/proc/<pid>/maps`` lines (anonymous and ``[heap]`` skipped).

    A line is ``start-end perms offset dev inode`` then, after padding, the path; the
    path itself may contain spaces, so it is everything after the fifth field.
    """
    out = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            out.append(parts[5].rstrip("\n").removesuffix(" (deleted)"))
    return out


def read_allocator(fs: HostFS, pid: int) -> str:
    """Scan ``/proc/<pid>/maps`` until a known allocator library shows up."""
    path = fs.proc(str(pid), "maps")
    paths: list[str] = []
    read = 0
    try:
        # open_regular: a FIFO here would block open() until a writer came.
        with os.fdopen(open_regular(path), "rb") as fh:
            for raw in fh:
                read += len(raw)
                if read > MAX_MAPS_BYTES:
                    raise ParseError(path, f"larger than {MAX_MAPS_BYTES} bytes")
                found = maps_paths([raw.decode("utf-8", "replace")])
                if found and allocator_of(found) in ("tcmalloc", "jemalloc"):
                    return allocator_of(found)
                paths.extend(found)
    except OSError as exc:
        _raise_gone(exc, path)
        raise OSError(exc.errno, exc.strerror, path) from None
    return allocator_of(paths)


def _raise_gone(exc: OSError, path: str) -> None:
    """ENOENT/ESRCH on a pid's file: the process is not there (any more)."""
    if exc.errno in (errno.ENOENT, errno.ESRCH):
        raise ProcessGone(f"{path}: no such process") from None


def _read_text(path: str) -> str:
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except OSError as exc:
        _raise_gone(exc, path)
        raise OSError(exc.errno, exc.strerror, path) from None


# Share of the soft descriptor limit the osd collector's kept-open thread status files
# may use, all OSD processes together (cpuidle keeps half for its attributes).
THREAD_FD_SHARE = 0.25


def _read_status(files: AttrFiles | None, path: str) -> bytes:
    """A task's status through the kept files (or open/read/close without them)."""
    if files is None:
        try:
            return read_bytes(path)
        except OSError as exc:
            _raise_gone(exc, path)
            raise OSError(exc.errno, exc.strerror, path) from None
    try:
        data = files.read_bytes(path, MAX_READ_BYTES)
    except OSError as exc:
        _raise_gone(exc, path)
        raise
    if len(data) == MAX_READ_BYTES:
        raise ParseError(path, f"larger than {MAX_READ_BYTES} bytes")
    return data


@dataclass(frozen=True)
class ProcessSample:
    """One process at one scrape, in base units."""

    pid: int
    comm: str
    cpu_user_seconds: float
    cpu_system_seconds: float
    rss_bytes: int | None
    threads: int
    voluntary_switches: int
    involuntary_switches: int
    cpus_allowed: frozenset[int]  # union over the threads
    allocator: str


@dataclass
class ProcessState:
    """What one process needs kept between scrapes, keyed by (pid, starttime).

    Context switches are summed over the live threads, and a thread that exits takes its
    count with it: summed naively, the counter would drop, which Prometheus reads as a
    reset (``rate()`` then adds the whole counter once). So each thread's last count is
    kept, and the counts of threads gone since are carried in ``retired``: the sum stays
    monotonic for the life of the process. A tid reused by a new thread between two
    scrapes shows as a count that went down and is handled the same way (the old
    thread's count retired); a reuse whose new count is already higher goes unnoticed
    and under-counts by the old thread's last count. ``allocator`` is cached: it cannot
    change while the process runs; so is ``media``, the kind of the OSD's data disk
    (hostfs/blockdev.py ``block_media``), which the ``osd`` collector sets, and
    ``block``, its data directories and what ``find_osd_block`` found under them (the
    device a running OSD has open does not change under it), and ``encryption``, the
    dm-crypt walk under that device (hostfs/dmcrypt.py; a device-mapper uuid is set
    once, when its creator makes the mapping, and an open device is not torn down).
    """

    key: tuple[int, int] | None = None
    # The (pid, tids) whose thread status files were last kept open (read_process).
    listing: tuple[int, tuple[int, ...]] | None = None
    allocator: str | None = None
    media: str | None = None
    block: tuple[tuple[str, ...], OSDBlock | None, str | None] | None = None
    encryption: Encryption | None = None
    threads: dict[int, tuple[int, int]] = field(default_factory=dict)
    retired: tuple[int, int] = (0, 0)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, key: tuple[int, int]) -> None:
        self.key, self.allocator, self.threads, self.retired = key, None, {}, (0, 0)
        self.media = None
        self.block = None
        self.encryption = None

    def switches(self, current: dict[int, tuple[int, int]]) -> tuple[int, int]:
        """Fold this scrape's per-thread counts in; returns the monotonic totals."""
        vol, invol = self.retired
        for tid, (old_v, old_i) in self.threads.items():
            new = current.get(tid)
            if new is None or new[0] < old_v or new[1] < old_i:
                vol, invol = vol + old_v, invol + old_i
        self.retired = (vol, invol)
        self.threads = dict(current)
        return (
            vol + sum(v for v, _ in current.values()),
            invol + sum(i for _, i in current.values()),
        )


def _list_tasks(task_dir: str) -> list[int]:
    try:
        # Thread ids are "%d" (ASCII); isdigit() alone also takes "²" and "٣".
        return sorted(int(t) for t in os.listdir(task_dir) if t.isascii() and t.isdigit())
    except OSError as exc:
        _raise_gone(exc, task_dir)
        raise OSError(exc.errno, exc.strerror, task_dir) from None


_Threads = tuple[dict[int, tuple[int, int]], set[frozenset[int]], ThreadStatus | None]


def _read_threads(
    fs: HostFS,
    pid: int,
    task_dir: str,
    tids: list[int],
    state: ProcessState,
    files: AttrFiles | None,
) -> _Threads | None:
    """Each listed thread's (voluntary, involuntary) switches, the distinct allowed-CPU
    sets (an OSD's threads share one or a few) and the leader's status. A thread that
    exited between the listing and the read is left out, or, when ``tids`` is the last
    scrape's listing (read_process), makes this return None so the caller lists anew."""
    leader: ThreadStatus | None = None
    prefix = task_dir + os.sep
    paths = [f"{prefix}{tid}{os.sep}status" for tid in tids]
    listing = (pid, tuple(tids))
    reused = listing == state.listing
    if files is not None and not reused:
        if state.key is not None and state.key[0] != pid:
            files.close_under(fs.proc(str(state.key[0])) + os.sep)  # the previous process
        # Threads gone since the last listing (the same listing has no file to close:
        # each of its files is one of its tids'); a file kept for a tid that a new thread
        # took reads as gone once (ESRCH) and is reopened at the next scrape.
        files.close_under(prefix, keep=set(paths))
        state.listing = listing
    # The kept files in one batched call (hostfs/batch.py), the three lines of each read
    # by status_counts; the loop below takes the rest (first scrape, budget full, a failed
    # or page-long read, another shape) and the leader, whose status gives more.
    batch = files.read_many(paths, BATCH_PAGE) if files is not None else [None] * len(paths)
    counts, lists, rest = status_counts(tids, batch)
    allowed: set[frozenset[int]]
    try:
        allowed = {_cpus_bytes(text) for text in lists}
    except ValueError:  # UnicodeDecodeError included: every thread the slow way, named
        counts, allowed, rest = {}, set(), list(range(len(tids)))
    slow = set(rest)
    with contextlib.suppress(ValueError):
        slow.add(tids.index(pid))
    for i in sorted(slow):
        tid, path, data = tids[i], paths[i], batch[i]
        if data is None:
            try:
                data = _read_status(files, path)
            except ProcessGone:
                if reused:
                    state.listing = None
                    return None
                continue  # the thread exited between the listing and the read
        fast = None if tid == pid else _thread_counts(data)
        if fast is not None:
            counts[tid] = (fast[0], fast[1])
            allowed.add(fast[2])
            continue
        status = parse_status(data.decode("utf-8", "replace"), path)
        counts[tid] = (status.voluntary, status.involuntary)
        allowed.add(status.cpus_allowed)
        if tid == pid:
            leader = status
    return counts, allowed, leader


def read_process(
    fs: HostFS,
    pid: int,
    state: ProcessState,
    comms: frozenset[str] = OSD_COMMS,
    files: AttrFiles | None = None,
) -> ProcessSample:
    """Read one process; ``state`` carries what is kept between scrapes, ``files`` (when
    given) keeps its threads' status files open between scrapes (the caller closes a
    gone process's with ``files.close_under(<procfs>/<pid>/)``).

    Raises :class:`ProcessGone` when the pid is not in this procfs or is not one of
    ``comms`` (another pid namespace), :class:`OSError` or :class:`ParseError` when a
    file is unreadable or malformed.
    """
    stat_path = fs.proc(str(pid), "stat")
    stat = parse_stat(_read_text(stat_path), stat_path)
    if stat.comm not in comms:
        raise ProcessGone(
            f"pid {pid} in {fs.procfs} is {stat.comm!r}, not {'/'.join(sorted(comms))} "
            "(the admin socket's pid from another pid namespace?)"
        )
    task_dir = fs.proc(str(pid), "task")
    key = (pid, stat.starttime)
    kept = state.listing
    if (
        files is not None
        and kept is not None
        and state.key == key
        and kept[0] == pid
        and len(kept[1]) == stat.threads
    ):
        # The threads of the last listing, without listing again: a thread that exited
        # since reads as gone through its kept file (its task is no longer there), and
        # with none gone and the same thread count in stat, no thread can have started.
        threads = _read_threads(fs, pid, task_dir, list(kept[1]), state, files)
        if threads is None:  # one was gone: list and read again
            threads = _read_threads(fs, pid, task_dir, _list_tasks(task_dir), state, files)
    else:
        threads = _read_threads(fs, pid, task_dir, _list_tasks(task_dir), state, files)
    assert threads is not None
    counts, allowed, leader = threads
    cpus: set[int] = set().union(*allowed)
    if leader is None:
        # The main thread has exited (a zombie leader keeps no task entry readable):
        # the process-wide lines are in /proc/<pid>/status as well.
        path = fs.proc(str(pid), "status")
        leader = parse_status(_read_text(path), path)
    with state.lock:
        if state.key != key:
            state.reset(key)
        vol, invol = state.switches(counts)
        if state.allocator is None:
            state.allocator = read_allocator(fs, pid)
        allocator = state.allocator
    return ProcessSample(
        pid=pid,
        comm=stat.comm,
        cpu_user_seconds=stat.utime_ticks / USER_HZ,
        cpu_system_seconds=stat.stime_ticks / USER_HZ,
        rss_bytes=leader.rss_bytes,
        threads=leader.threads if leader.threads is not None else stat.threads,
        voluntary_switches=vol,
        involuntary_switches=invol,
        cpus_allowed=frozenset(cpus or leader.cpus_allowed),
        allocator=allocator,
    )


# ---------------------------------------------------------------------------------------
# A daemon by name: is it running?
# ---------------------------------------------------------------------------------------


def read_pid_file(path: str) -> int | None:
    """The pid a daemon wrote to its pid file ("1234\\n"); None when the file is missing,
    unreadable or holds no pid: the caller then looks for the process itself."""
    try:
        text = read_bytes(path).strip()
    except (OSError, ParseError):
        return None
    return int(text) if text.isdigit() and len(text) <= 9 else None


def find_process(
    fs: HostFS, comm: str, candidates: Sequence[int | None] = (), scan: bool = True
) -> int | None:
    """The pid of a process whose ``comm`` (``/proc/<pid>/comm``, the executable's or
    script's file name cut to 15 bytes) is ``comm``; None when there is none.

    Tries ``candidates`` first (the pid found last time, the daemon's pid file): one read
    when nothing changed. With ``scan``, then every process's comm, a few hundred reads,
    which the caller does at most about once a minute. Without ``scan`` a process found
    neither way is None. Raises OSError when the scan cannot list ``/proc``.
    """
    want = comm.encode() + b"\n"
    tried: set[int] = set()
    for pid in candidates:
        if pid is not None and pid not in tried:
            tried.add(pid)
            if _comm_is(fs, pid, want):
                return pid
    if not scan:
        return None
    for entry in os.listdir(fs.procfs):
        if entry.isdigit() and int(entry) not in tried and _comm_is(fs, int(entry), want):
            return int(entry)
    return None


def _comm_is(fs: HostFS, pid: int, want: bytes) -> bool:
    try:
        fd = open_regular(fs.proc(str(pid), "comm"))
    except OSError:
        return False  # gone, or not ours to read
    try:
        return os.read(fd, 32) == want
    except OSError:
        return False
    finally:
        os.close(fd)
