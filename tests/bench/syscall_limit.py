"""The syscall limit of one scrape: capture the file syscalls a serving exporter makes for
one scrape, and replay exactly those in a small C program timed at bench time.

Steps (``make bench`` runs them through tests/bench/bench.py):

1. :func:`capture` attaches ``strace -f -ttt -yy -s 0 -p <pid>`` to the serving exporter
   (strace(1): ``-p`` with ``-f`` attaches every thread of the process; ``-yy`` prints
   the path, or the socket's addresses, of every descriptor argument and return value;
   ``-ttt`` the time of each call in microseconds since the epoch), scrapes it a few
   times, and detaches.
2. :func:`parse_strace` turns the log into :class:`Call` records, joining the
   ``<unfinished ...>`` and ``<... resumed>`` halves that strace prints when threads
   interleave (strace(1), "-f").
3. :func:`scrape_windows` finds each scrape: from the ``accept4`` that returned the
   connection (its TCP addresses, from ``-yy``) to the first ``sendto``/``write`` on
   that connection, which carries the response's head; the body is built before it.
   Threads that made file syscalls outside every window (background samplers) are left
   out of all windows.
4. :func:`replay_plan` keeps the file syscalls of one window and finds the descriptors
   the exporter kept open across scrapes: used in the window but not opened in it. The
   C program opens those once, before its loop, as the exporter did.
5. :func:`generate_c` writes the program: one statement per captured call, descriptors
   mapped through a table, each iteration timed with ``clock_gettime(CLOCK_MONOTONIC)``;
   ``check`` mode compares every return value with the captured one instead.

Only file syscalls are replayed (open/openat, read/pread64, close, fstat/newfstatat/
statx/stat/lstat, readlink/readlinkat, getdents64, lseek): the limit is what reading the
files costs, not Python's ``ioctl(TCGETS)`` probes, locks or the HTTP exchange; those are
counted and shown as not replayed.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The syscalls replayed, grouped into the kinds the report prints.
KINDS: dict[str, str] = {
    "open": "open",
    "openat": "open",
    "read": "read",
    "pread64": "pread",
    "close": "close",
    "fstat": "stat",
    "newfstatat": "stat",
    "statx": "stat",
    "stat": "stat",
    "lstat": "stat",
    "readlink": "readlink",
    "readlinkat": "readlink",
    "getdents64": "getdents",
    "lseek": "lseek",
}
# Calls that end a window: the response head written to the connection.
SENDS = frozenset({"sendto", "send", "write", "sendmsg", "writev"})
# Symbolic flags as strace prints them (O_*, AT_*, STATX_*, SEEK_*) and hex remainders:
# valid C once <fcntl.h>, <sys/stat.h> and <unistd.h> are included with _GNU_SOURCE.
_FLAGS_RE = re.compile(r"^[A-Za-z0-9_|]+$")
_LINE_RE = re.compile(r"^(?:(\d+)\s+)?(\d+\.\d+)\s+(.*)$")
_CALL_RE = re.compile(r"^(\w+)\((.*)\)\s+=\s+(.*)$", re.S)
_UNFINISHED = " <unfinished ...>"
_RESUMED_RE = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$", re.S)
_SOCKET_RE = re.compile(r"[A-Z0-9]+:\[")
_FD_RE = re.compile(r"^(-?\d+|AT_FDCWD)(?:<(.*)>)?$", re.S)


@dataclass(frozen=True)
class Call:
    """One completed system call from an ``strace -f -ttt -yy`` log."""

    tid: int
    entry: float  # seconds since the epoch, when the call was entered
    exit: float  # when it returned (the resumed line's time; the entry time otherwise)
    name: str
    args: tuple[str, ...]
    ret: str  # as printed: "5</path>", "0", "-1 ENOENT (No such file or directory)"

    @property
    def retval(self) -> int | None:
        m = re.match(r"^(-?\d+)", self.ret)
        return int(m.group(1)) if m else None


def split_args(text: str) -> tuple[str, ...]:
    """Split strace's argument text at top-level commas (not inside quotes, {}, [], or
    the ``<...>`` path strace appends to a descriptor with -y)."""
    args: list[str] = []
    depth, start, i, n = 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif c == "<" and i > 0 and (text[i - 1].isdigit() or text[i - 1] == "D"):
            # A -y annotation: 5</path>, AT_FDCWD</cwd> or 4<TCP:[a:p->b:q]>; the
            # path may hold commas, the socket's addresses hold "->".
            close = text.find("]>", i) if _SOCKET_RE.match(text, i + 1) else -1
            close = close + 1 if close >= 0 else text.find(">", i)
            if close >= 0:
                i = close
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail or args:
        args.append(tail)
    return tuple(args)


def parse_fd(arg: str) -> tuple[int | None, str | None]:
    """``5</path>`` -> (5, "/path"); ``AT_FDCWD</cwd>`` -> (None, "/cwd")."""
    m = _FD_RE.match(arg.strip())
    if not m:
        raise ValueError(f"not a descriptor: {arg!r}")
    fd = None if m.group(1) == "AT_FDCWD" else int(m.group(1))
    return fd, m.group(2)


def parse_strace(lines: Iterable[str]) -> list[Call]:
    """Completed calls in the order they were entered; signals, exits and calls that
    never returned (``= ?``) are dropped."""
    pending: dict[int, tuple[float, str]] = {}
    calls: list[Call] = []
    for raw in lines:
        line = raw.rstrip("\n")
        m = _LINE_RE.match(line)
        if not m:
            continue
        tid, when, rest = int(m.group(1) or 0), float(m.group(2)), m.group(3)
        entry = when
        if rest.startswith(("+++", "---")):
            continue
        if rest.endswith(_UNFINISHED):
            pending[tid] = (when, rest[: -len(_UNFINISHED)])
            continue
        r = _RESUMED_RE.match(rest)
        if r:
            started = pending.pop(tid, None)
            if started is None:
                continue  # began before strace attached
            entry, head = started
            rest = head + r.group(2)
        c = _CALL_RE.match(rest)
        if not c or c.group(3).startswith("?"):
            continue
        calls.append(Call(tid, entry, when, c.group(1), split_args(c.group(2)), c.group(3).strip()))
    calls.sort(key=lambda call: call.entry)
    return calls


@dataclass
class Window:
    """One scrape: the calls of every scrape thread from the accept to the response."""

    connection: str  # the connection's addresses, as -yy prints them
    start: float
    end: float
    calls: list[Call] = field(default_factory=list)


def _fd_path(arg: str) -> str | None:
    try:
        return parse_fd(arg)[1]
    except ValueError:
        return None


def scrape_windows(calls: Sequence[Call]) -> list[Window]:
    """The scrapes in a capture, each with the calls of the threads that served it."""
    windows: list[Window] = []
    for call in calls:
        if call.name in ("accept4", "accept") and call.retval is not None and call.retval >= 0:
            conn = _fd_path(call.ret)
            if conn:
                windows.append(Window(conn, call.exit, float("inf")))
    for w in windows:
        for call in calls:
            if (
                call.name in SENDS
                and call.entry >= w.start
                and call.args
                and _fd_path(call.args[0]) == w.connection
            ):
                w.end = call.entry
                break
    windows = [w for w in windows if w.end != float("inf")]

    def inside(call: Call) -> bool:
        return any(w.start <= call.entry <= w.end for w in windows)

    # Threads that touch files outside every scrape work on their own schedule (a
    # sampler); a connection thread's own socket calls after its response do not count.
    background = {
        c.tid for c in calls if c.name in KINDS and c.args and _touches_file(c) and not inside(c)
    }
    for w in windows:
        w.calls = [c for c in calls if w.start <= c.entry <= w.end and c.tid not in background]
    return windows


def _touches_file(call: Call) -> bool:
    """A path argument, or a descriptor argument that -yy shows as a file."""
    first = call.args[0]
    if first.startswith('"'):
        return True
    path = _fd_path(first)
    if call.name in ("openat", "newfstatat", "statx", "readlinkat") and path is not None:
        return True  # relative to a directory or the cwd: a path follows
    return _is_file(path)


def _is_file(path: str | None) -> bool:
    # -yy prints sockets as TCP:[...], UNIX:[...], pipes as pipe:[...]; files as paths.
    return path is not None and path.startswith("/")


@dataclass
class Plan:
    """What the C program replays for one window."""

    calls: list[Call]  # replayed, in order
    kept: dict[int, str]  # descriptor -> path, open before the window and used in it
    cwd: str | None
    counts: Counter[str]  # per kind
    not_replayed: Counter[str]  # calls on files not replayed, and reads/closes of sockets
    left_open: list[int]  # opened in the window and still open at its end
    reopened: list[int] = field(default_factory=list)  # kept ones the window closed


def replay_plan(window: Window) -> Plan:
    calls: list[Call] = []
    kept: dict[int, str] = {}
    open_now: set[int] = set()
    cwd: str | None = None
    not_replayed: Counter[str] = Counter()
    reopened: list[int] = []
    for call in window.calls:
        if call.name not in KINDS:
            if call.args and _touches_file(call):
                not_replayed[call.name] += 1  # e.g. Python's ioctl(TCGETS) in open()
            continue
        first = call.args[0] if call.args else ""
        if call.name in ("open", "stat", "lstat", "readlink"):
            dirfd, dirpath = None, None
        else:
            try:
                dirfd, dirpath = parse_fd(first)
            except ValueError:
                not_replayed[call.name] += 1
                continue
        if dirfd is None and dirpath is not None:
            cwd = cwd or dirpath
        if dirfd is not None:
            if not _is_file(dirpath):
                not_replayed[call.name] += 1  # a socket's read or close
                continue
            if dirfd not in open_now and dirfd not in kept:
                kept[dirfd] = dirpath or ""
        calls.append(call)
        rv = call.retval
        if call.name in ("open", "openat") and rv is not None and rv >= 0:
            open_now.add(rv)
        elif call.name == "close" and dirfd is not None:
            if dirfd in kept and dirfd not in open_now:
                reopened.append(dirfd)
            open_now.discard(dirfd)
    counts = Counter(KINDS[c.name] for c in calls)
    return Plan(calls, kept, cwd, counts, not_replayed, sorted(open_now), reopened)


def _c_string(arg: str) -> str:
    """strace prints a path as a C string literal already (escapes included)."""
    if not (arg.startswith('"') and arg.endswith('"')):
        raise ValueError(f"not a string: {arg!r}")
    return arg


def _c_path(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_flags(arg: str) -> str:
    if not _FLAGS_RE.match(arg):
        raise ValueError(f"unexpected flags: {arg!r}")
    return arg


def _c_dir(arg: str) -> str:
    fd, _ = parse_fd(arg)
    return "AT_FDCWD" if fd is None else f"f[{fd}]"


def _c_call(call: Call) -> tuple[str, str]:
    """(C expression, how its result is checked: "eq" exact, "sign" success alike)."""
    a, name = call.args, call.name
    if name == "openat":
        return f"openat({_c_dir(a[0])}, {_c_string(a[1])}, {_c_flags(a[2])})", "sign"
    if name == "open":
        return f"open({_c_string(a[0])}, {_c_flags(a[1])})", "sign"
    if name == "read":
        return f"read({_c_dir(a[0])}, buf, {int(a[2])})", "eq"
    if name == "pread64":
        return f"pread({_c_dir(a[0])}, buf, {int(a[2])}, {int(a[3])})", "eq"
    if name == "close":
        return f"close({_c_dir(a[0])})", "eq"
    if name == "fstat":
        return f"fstat({_c_dir(a[0])}, &st)", "eq"
    if name == "newfstatat":
        return f"fstatat({_c_dir(a[0])}, {_c_string(a[1])}, &st, {_c_flags(a[3])})", "eq"
    if name == "statx":
        return (
            f"statx({_c_dir(a[0])}, {_c_string(a[1])}, {_c_flags(a[2])}, {_c_flags(a[3])}, &stx)",
            "eq",
        )
    if name in ("stat", "lstat"):
        return f"{name}({_c_string(a[0])}, &st)", "eq"
    if name == "readlink":
        return f"readlink({_c_string(a[0])}, buf, {int(a[2])})", "eq"
    if name == "readlinkat":
        return f"readlinkat({_c_dir(a[0])}, {_c_string(a[1])}, buf, {int(a[3])})", "eq"
    if name == "getdents64":
        return f"syscall(SYS_getdents64, {_c_dir(a[0])}, buf, {int(a[2])})", "eq"
    if name == "lseek":
        return f"lseek({_c_dir(a[0])}, {int(a[1])}, {_c_flags(a[2])})", "eq"
    raise ValueError(f"not replayed: {name}")


def _arg_fd(call: Call) -> int | None:
    if call.name in ("open", "stat", "lstat", "readlink") or not call.args:
        return None
    try:
        return parse_fd(call.args[0])[0]
    except ValueError:
        return None


def _buf_size(call: Call) -> int:
    index = {"read": 2, "pread64": 2, "readlink": 2, "readlinkat": 3, "getdents64": 2}
    i = index.get(call.name)
    return int(call.args[i]) if i is not None else 0


def generate_c(plan: Plan) -> str:
    """A C program making ``plan``'s calls once per iteration.

    ``prog N`` prints the wall and CPU nanoseconds (clock_gettime(2): CLOCK_MONOTONIC,
    CLOCK_PROCESS_CPUTIME_ID) of each of N iterations, a line each; ``prog N
    check`` runs N iterations and prints how many calls returned other than captured
    (exit status 1 if any). Descriptors live in ``f[]`` at the exporter's numbers, so a
    call's descriptor argument is ``f[<captured number>]``.
    """
    fds = [*plan.kept]
    for call in plan.calls:
        rv = call.retval
        if call.name in ("open", "openat") and rv is not None:
            fds.append(rv)
    size = max([*fds, 0]) + 1
    bufsize = max([_buf_size(c) for c in plan.calls] + [4096])
    body: list[str] = []
    own: set[int] = set()  # descriptors of /proc/self files: the replay's own process
    for call in plan.calls:
        expr, how = _c_call(call)
        rv = call.retval if call.retval is not None else 0
        fd = _arg_fd(call)
        if call.name in ("open", "openat"):
            path = call.args[1 if call.name == "openat" else 0]
            if path.startswith(('"/proc/self/', '"/proc/thread-self/')) and rv >= 0:
                own.add(rv)
            else:
                own.discard(rv)
        if fd in own and call.name not in ("open", "openat"):
            # /proc/self/stat, fd/, task/ describe the replay, not the exporter: the
            # same calls, sizes that differ (proc(5)); made, not compared.
            body.append(f"    {expr};")
            continue
        if call.name in ("open", "openat"):
            if rv >= 0:
                body.append(f"    r = f[{rv}] = {expr}; CHECK_SIGN(r, {rv});")
            else:
                body.append(f"    r = {expr}; CHECK_SIGN(r, {rv}); if (r >= 0) close(r);")
        elif how == "eq":
            body.append(f"    r = {expr}; CHECK_EQ(r, {rv});")
    kept: list[str] = []
    for fd, path in sorted(plan.kept.items()):
        kept.append(f"    f[{fd}] = open({_c_path(path)}, O_RDONLY | O_CLOEXEC);")
        kept.append(f"    if (f[{fd}] < 0) {{ perror({_c_path(path)}); return 2; }}")
    # Descriptors the window opened and left open: closed after each iteration so the
    # loop does not run out of them; kept ones it closed: opened again for the next
    # iteration (an exporter in steady state does neither; describe() reports both).
    tail = [f"    close(f[{fd}]);" for fd in plan.left_open]
    tail += [
        f"    f[{fd}] = open({_c_path(plan.kept[fd])}, O_RDONLY | O_CLOEXEC);"
        for fd in plan.reopened
    ]
    cwd_literal = _c_path(plan.cwd or "/")
    return "\n".join(
        [
            "/* Generated by tests/bench/syscall_limit.py: one scrape's file syscalls. */",
            "#define _GNU_SOURCE",
            "#include <fcntl.h>",
            "#include <stdio.h>",
            "#include <stdlib.h>",
            "#include <string.h>",
            "#include <sys/stat.h>",
            "#include <sys/syscall.h>",
            "#include <time.h>",
            "#include <unistd.h>",
            "",
            f"static int f[{size}];",
            f"static char buf[{bufsize}];",
            "static struct stat st;",
            "static struct statx stx;",
            "static int check;",
            "static long mismatches;",
            "static void mismatch(int line, long got, long want) {",
            '    fprintf(stderr, "replay.c:%d: returned %ld, captured %ld\\n", line, got, want);',
            "    mismatches++;",
            "}",
            "#define CHECK_EQ(r, want) do { if (check && (long)(r) != (long)(want)) "
            "mismatch(__LINE__, (r), (want)); } while (0)",
            "#define CHECK_SIGN(r, want) do { if (check && (((r) < 0) != ((want) < 0))) "
            "mismatch(__LINE__, (r), (want)); } while (0)",
            "",
            "#define NS(a, b) (((b).tv_sec - (a).tv_sec) * 1000000000L + "
            "((b).tv_nsec - (a).tv_nsec))",
            "",
            "static void once(void) {",
            "    long r;",
            *body,
            *tail,
            "    (void)r;",
            "}",
            "",
            "int main(int argc, char **argv) {",
            "    long n = argc > 1 ? atol(argv[1]) : 1;",
            '    check = argc > 2 && strcmp(argv[2], "check") == 0;',
            f"    if (chdir({cwd_literal}) != 0) {{ perror({cwd_literal}); return 2; }}",
            *kept,
            "    for (long i = 0; i < n; i++) {",
            "        struct timespec t0, t1, c0, c1;",
            "        clock_gettime(CLOCK_MONOTONIC, &t0);",
            "        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);",
            "        once();",
            "        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);",
            "        clock_gettime(CLOCK_MONOTONIC, &t1);",
            "        if (!check)",
            '            printf("%ld %ld\\n", NS(t0, t1), NS(c0, c1));',
            "    }",
            "    if (check) {",
            '        printf("mismatches %ld\\n", mismatches);',
            "        return mismatches != 0;",
            "    }",
            "    return 0;",
            "}",
            "",
        ]
    )


def compile_c(source: str, workdir: Path) -> Path:
    """Compile with the system cc at -O2 into ``workdir``; returns the binary."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (Debian: build-essential)")
    src, binary = workdir / "replay.c", workdir / "replay"
    src.write_text(source)
    subprocess.run([cc, "-O2", "-o", str(binary), str(src)], check=True, capture_output=True)
    return binary


def run_replay(binary: Path, iterations: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each iteration."""
    out = subprocess.run(
        [str(binary), str(iterations)], check=True, capture_output=True, text=True
    ).stdout
    pairs = [line.split() for line in out.splitlines() if line.strip()]
    return [(int(wall) / 1e9, int(cpu) / 1e9) for wall, cpu in pairs]


def typical(windows: Sequence[Window]) -> Window:
    """The last window of the most common size: a scrape that also did periodic work
    (a rediscovery every few minutes) is not the one replayed."""
    sizes = Counter(sum(replay_plan(w).counts.values()) for w in windows)
    common = sizes.most_common(1)[0][0]
    return [w for w in windows if sum(replay_plan(w).counts.values()) == common][-1]


def check_replay(binary: Path) -> int:
    """Calls of one iteration that returned other than in the capture."""
    proc = subprocess.run([str(binary), "1", "check"], capture_output=True, text=True)
    m = re.search(r"mismatches (\d+)", proc.stdout)
    if m is None:
        raise RuntimeError(f"replay check failed: {proc.stderr.strip()}")
    return int(m.group(1))


def strace_log(cmd: Sequence[str], out: Path) -> None:
    """Run ``cmd`` under strace with the options :func:`parse_strace` expects."""
    subprocess.run(
        ["strace", "-f", "-ttt", "-yy", "-s", "0", "-o", str(out), *cmd],
        check=True,
        capture_output=True,
    )


def capture(pid: int, url: str, scrapes: int = 3, workdir: Path | None = None) -> list[Window]:
    """Attach strace to the serving exporter ``pid``, scrape ``url`` ``scrapes`` times
    with idle gaps (which show background threads), detach; the scrape windows."""
    if shutil.which("strace") is None:
        raise RuntimeError("strace not found (Debian: strace)")
    tmp = Path(workdir or tempfile.mkdtemp(prefix="cephnode-strace-"))
    log = tmp / "scrape.strace"
    cmd = ["strace", "-f", "-ttt", "-yy", "-s", "0", "-o", str(log), "-p", str(pid)]
    tracer = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert tracer.stderr is not None
        line = tracer.stderr.readline()  # "strace: Process N attached with K threads"
        if "attached" not in line:
            raise RuntimeError(f"strace did not attach: {line.strip()}")
        time.sleep(0.3)
        for _ in range(scrapes):
            with urllib.request.urlopen(url, timeout=30) as r:
                r.read()
            time.sleep(0.3)
    finally:
        tracer.send_signal(signal.SIGINT)  # detaches from every thread
        tracer.wait(timeout=30)
    windows = scrape_windows(parse_strace(log.read_text(errors="replace").splitlines()))
    if workdir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(windows) != scrapes:
        raise RuntimeError(f"found {len(windows)} scrape windows in the trace, not {scrapes}")
    return windows


def repeated_opens(plan: Plan) -> list[tuple[str, int]]:
    """Paths opened more than once in the window, most often first: a read the scrape
    could share between its collectors."""
    opened: Counter[str] = Counter()
    for call in plan.calls:
        if call.name in ("open", "openat"):
            opened[call.args[1 if call.name == "openat" else 0].strip('"')] += 1
    return [(path, n) for path, n in opened.most_common() if n > 1]


def describe(plan: Plan) -> str:
    kinds = ", ".join(f"{n} {k}" for k, n in plan.counts.most_common())
    other = ", ".join(f"{n} {k}" for k, n in plan.not_replayed.most_common()) or "none"
    extra = ""
    if plan.left_open or plan.reopened:
        extra = (
            f"; {len(plan.left_open)} opened and left open, {len(plan.reopened)} kept ones "
            "closed (the replay closes or reopens them after each iteration)"
        )
    return (
        f"{sum(plan.counts.values())} file syscalls ({kinds}); {len(plan.kept)} descriptors "
        f"kept open across scrapes; not replayed: {other}{extra}"
    )
