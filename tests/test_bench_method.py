"""The syscall-limit method of `make bench` (tests/bench/syscall_limit.py): the strace
parser, the scrape windows, and the generated C program, which must make the captured
calls and no others. Correctness only: nothing here is timed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.bench import syscall_limit as sl
from tests.bench.ticker import Ticker
from tests.conftest import MakeTree

TRACE = textwrap.dedent(
    """\
    100 1.000100 accept4(3<TCP:[h:9]>, {sa_family=AF_INET}, [16], 0) = 4<TCP:[h:9->h:5]>
    101 1.000200 recvfrom(4<TCP:[h:9->h:5]>, ""..., 65536, 0, NULL, NULL) = 90
    102 1.000300 pread64(7</sys/a, b/usage>, ""..., 64, 0) = 3
    102 1.000400 openat(AT_FDCWD</srv>, "/sys/x", O_RDONLY|O_CLOEXEC <unfinished ...>
    103 1.000450 futex(0x1, FUTEX_WAKE_PRIVATE, 1) = 0
    102 1.000500 <... openat resumed>) = 9</sys/x>
    102 1.000600 newfstatat(9</sys/x>, "", {st_mode=S_IFREG|0644, ...}, AT_EMPTY_PATH) = 0
    102 1.000700 read(9</sys/x>, ""..., 4096) = 5
    102 1.000800 ioctl(9</sys/x>, TCGETS, 0x7ffd) = -1 ENOTTY (Inappropriate ioctl)
    102 1.000900 close(9</sys/x>) = 0
    104 1.000950 openat(AT_FDCWD</srv>, "/sys/sampled", O_RDONLY) = 10</sys/sampled>
    102 1.001000 readlink("/sys/class/nvme/nvme0", ""..., 4096) = 61
    102 1.001100 openat(AT_FDCWD</srv>, "/sys/missing", O_RDONLY) = -1 ENOENT (No such file)
    101 1.002000 sendto(4<TCP:[h:9->h:5]>, ""..., 193, 0, NULL, 0) = 193
    101 1.002100 close(4<TCP:[h:9->h:5]>) = 0
    104 1.003000 read(10</sys/sampled>, ""..., 4096) = 2
    101 1.004000 +++ exited with 0 +++
    """
)


def test_split_args_keeps_annotations_structs_and_strings_whole() -> None:
    args = sl.split_args('7</sys/a, b/usage>, "x,y", {a=1, b=[2, 3]}, 4<TCP:[1:2->3:4]>, 0')
    assert args == ("7</sys/a, b/usage>", '"x,y"', "{a=1, b=[2, 3]}", "4<TCP:[1:2->3:4]>", "0")
    assert sl.parse_fd("7</sys/a, b/usage>") == (7, "/sys/a, b/usage")
    assert sl.parse_fd("AT_FDCWD</srv>") == (None, "/srv")


def test_parse_joins_unfinished_and_resumed_halves() -> None:
    calls = sl.parse_strace(TRACE.splitlines())
    opened = [c for c in calls if c.name == "openat" and c.args[1] == '"/sys/x"']
    assert len(opened) == 1
    assert opened[0].entry == pytest.approx(1.0004)
    assert opened[0].exit == pytest.approx(1.0005)
    assert opened[0].retval == 9
    assert opened[0].args[2] == "O_RDONLY|O_CLOEXEC"
    assert all(c.name != "exited" for c in calls)


def test_window_runs_from_accept_to_response_without_background_threads() -> None:
    windows = sl.scrape_windows(sl.parse_strace(TRACE.splitlines()))
    assert len(windows) == 1
    w = windows[0]
    assert w.connection == "TCP:[h:9->h:5]"
    # Thread 104 also read a file after the response: a sampler, not the scrape.
    assert {c.tid for c in w.calls} == {100, 101, 102, 103}
    plan = sl.replay_plan(w)
    assert plan.counts == Counter(
        {"pread": 1, "open": 2, "stat": 1, "read": 1, "close": 1, "readlink": 1}
    )
    assert plan.kept == {7: "/sys/a, b/usage"}
    assert plan.not_replayed == Counter({"ioctl": 1})
    assert plan.cwd == "/srv"
    assert plan.left_open == []


# A workload with the shapes a scrape has: a file kept open from before the window and
# read with pread, open/fstat/read/close, a failed open, stat, readlink, a directory
# listing and lseek. The window is the part between two stat() calls of paths that do not exist.
WORKLOAD = textwrap.dedent(
    """\
    import os, sys
    d = sys.argv[1]
    kept = os.open(os.path.join(d, "kept"), os.O_RDONLY)
    os.path.exists("/nonexistent-begin-window")
    os.pread(kept, 64, 0)
    with open(os.path.join(d, "plain")) as f:
        f.read()
    try:
        open(os.path.join(d, "absent"))
    except FileNotFoundError:
        pass
    os.stat(os.path.join(d, "plain"))
    os.readlink(os.path.join(d, "link"))
    os.listdir(d)
    fd = os.open(os.path.join(d, "plain"), os.O_RDONLY)
    os.lseek(fd, 1, os.SEEK_SET)
    os.read(fd, 16)
    os.close(fd)
    os.path.exists("/nonexistent-end-window")
    """
)


def _kinds(calls: list[sl.Call]) -> Counter[str]:
    return Counter(sl.KINDS[c.name] for c in calls if c.name in sl.KINDS)


@pytest.mark.skipif(
    shutil.which("strace") is None or shutil.which("cc") is None, reason="needs strace and cc"
)
def test_generated_program_makes_the_captured_calls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "kept").write_text("12345\n")
    (data / "plain").write_text("hello world\n")
    (data / "link").symlink_to("plain")
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    log = tmp_path / "workload.strace"
    try:
        sl.strace_log([sys.executable, str(script), str(data)], log)
    except subprocess.CalledProcessError as exc:
        err = exc.stderr.decode(errors="replace")
        if "ptrace" in err or "Operation not permitted" in err:
            pytest.skip(f"strace cannot trace here: {err[:200]}")
        raise
    calls = sl.parse_strace(log.read_text().splitlines())
    marks = [i for i, c in enumerate(calls) if "nonexistent-" in "".join(c.args[:2])]
    assert len(marks) == 2
    window = sl.Window("marker", calls[marks[0]].exit, calls[marks[1]].entry)
    window.calls = calls[marks[0] + 1 : marks[1]]
    plan = sl.replay_plan(window)
    assert plan.kept == {next(iter(plan.kept)): str(data / "kept")}
    assert {"pread", "open", "read", "close", "stat", "readlink", "getdents", "lseek"} <= set(
        plan.counts
    )

    binary = sl.compile_c(sl.generate_c(plan), tmp_path)
    assert sl.check_replay(binary) == 0  # every call returned what it returned captured
    assert len(sl.run_replay(binary, 3)) == 3

    # One more iteration makes exactly one window's calls more, kind by kind.
    counts = []
    for n in (1, 2):
        out = tmp_path / f"replay{n}.strace"
        sl.strace_log([str(binary), str(n)], out)
        counts.append(_kinds(sl.parse_strace(out.read_text().splitlines())))
    assert counts[1] - counts[0] == plan.counts
    assert counts[0] - counts[1] == Counter()


def test_plan_reports_kept_descriptors_closed_and_new_ones_left_open() -> None:
    trace = [
        '1 1.1 pread64(7</k>, ""..., 64, 0) = 3',
        "1 1.2 close(7</k>) = 0",
        '1 1.3 openat(AT_FDCWD</>, "/n", O_RDONLY) = 8</n>',
    ]
    window = sl.Window("c", 1.0, 2.0, sl.parse_strace(trace))
    plan = sl.replay_plan(window)
    assert plan.kept == {7: "/k"}
    assert plan.reopened == [7]
    assert plan.left_open == [8]
    source = sl.generate_c(plan)
    # After each iteration: the new descriptor closed, the kept one opened again.
    assert source.index("close(f[8]);") < source.index('f[7] = open("/k"', source.index("once"))
    assert "kept ones closed" in sl.describe(plan)


def test_repeated_opens() -> None:
    trace = [
        f'1 1.{i} openat(AT_FDCWD</>, "{path}", O_RDONLY) = 8</x>'
        for i, path in enumerate(["/a", "/b", "/a", "/a", "/b", "/c"], start=1)
    ]
    plan = sl.replay_plan(sl.Window("c", 1.0, 2.0, sl.parse_strace(trace)))
    assert sl.repeated_opens(plan) == [("/a", 3), ("/b", 2)]


# --- counters that move between scrapes (tests/bench/ticker.py) -------------------------


def test_ticker_moves_the_node_counters_and_leaves_settings(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    state = tree.sys / "devices/system/cpu/cpu7/cpuidle/state2"
    freq = tree.sys / "devices/system/cpu/cpu7/cpufreq/scaling_cur_freq"
    settings = {p: p.read_bytes() for p in (state / "disable", state / "name", state / "latency")}
    before = {name: int((state / name).read_text()) for name in ("usage", "time", "above")}
    ticker = Ticker(tree.root)
    try:
        assert ticker.files == 96 * 3 * 5 + 96 + 10  # counters, frequencies, in-flight
        seen_freqs = set()
        for _ in range(3):
            ticker.tick()
            seen_freqs.add(int(freq.read_text()))
            now = {name: int((state / name).read_text()) for name in before}
            assert all(now[n] > before[n] for n in before), (before, now)
            before = now
            # A read after the tick does not update the access time (relatime): it is
            # already later than the write.
            st = (state / "usage").stat()
            assert st.st_atime_ns > st.st_mtime_ns
        assert len(seen_freqs) == 3
        assert {p: p.read_bytes() for p in settings} == settings
        inflight = (tree.sys / "block/nvme0n1/inflight").read_text()
        assert len(inflight.split()) == 2 and inflight.endswith("\n")
    finally:
        ticker.close()
