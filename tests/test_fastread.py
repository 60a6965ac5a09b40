"""The compiled batched reader gives what the pure-Python one gives, and hands over faults.

``hostfs/batch.py`` serves the hot loops' kept-open reads from ``_fastread.c`` when it
is built, from Python otherwise. These tests read real files (a fixture tree, a file
rewritten with garbage, a closed descriptor, ``/proc/self/mem``, whose read at address 0
fails with EIO: fs/proc/base.c ``mem_rw``) through both, and check that a reader built
on either gives the same facts and names the same errors.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.hostfs import AttrFiles, HostFS, batch, process
from cephnode_exporter.hostfs import cpuidle as cpuidle_mod
from cephnode_exporter.hostfs.cpuidle import CPUIdleReader

from tests.conftest import MakeTree, Tree, need

CPU = "devices/system/cpu"
Reader = Callable[[Sequence[int], int], list[Any]]


def _compiled() -> Any:
    need(
        batch.IMPLEMENTATION == "compiled",
        f"the compiled reader is not built ({batch.UNAVAILABLE}); `make venv` builds it "
        "with gcc and the Python headers (tests/setup-debian.sh gcc python3-dev)",
    )
    from cephnode_exporter.hostfs import _fastread  # type: ignore[attr-defined]

    return _fastread


@pytest.fixture
def fds(tmp_path: Path) -> Iterator[dict[str, int]]:
    """Descriptors of files with the contents the kernel writes and some it never does."""
    texts = {
        "zero": "0\n",
        "counter": "123456789\n",
        "u64max": f"{2**64 - 1}\n",
        "beyond": f"{2**64}\n",
        "negative": "-5\n",
        "spaces": "  42 \n",
        "empty": "",
        "garbage": "12ab\n",
        "inner-space": "1 2\n",
        "sign-only": "-\n",
        "nul": "7\x00\n",
    }
    out = {}
    for name, text in texts.items():
        path = tmp_path / name
        path.write_text(text)
        out[name] = os.open(path, os.O_RDONLY)
    out["eio"] = os.open("/proc/self/mem", os.O_RDONLY)
    out["directory"] = os.open(tmp_path, os.O_RDONLY)
    closed = os.open(tmp_path / "zero", os.O_RDONLY)
    os.close(closed)
    out["closed"] = closed
    try:
        yield out
    finally:
        for name, fd in out.items():
            if name != "closed":
                os.close(fd)


EXPECTED = {
    "zero": 0,
    "counter": 123456789,
    "u64max": 2**64 - 1,
    "negative": -5,
    "spaces": 42,
}


def test_pread_ints_compiled_and_python_agree(fds: dict[str, int]) -> None:
    fast = _compiled()
    names = list(fds)
    order = [fds[n] for n in names]
    compiled = dict(zip(names, fast.pread_ints(order, 64), strict=True))
    python = dict(zip(names, batch.pread_ints_python(order, 64), strict=True))
    for name in names:
        want = EXPECTED.get(name)
        assert compiled[name] == want, name
        if name != "beyond":  # Python's int() takes 2**64; the compiled one hands it over
            assert python[name] == want, name
    assert python["beyond"] == 2**64 and compiled["beyond"] is None
    # Every failure is a None, never an exception or a wrong value, in both.
    for name in ("eio", "directory", "closed", "empty", "garbage", "inner-space", "nul"):
        assert compiled[name] is None and python[name] is None, name


def test_pread_counters_give_only_u64_values(fds: dict[str, int]) -> None:
    fast = _compiled()
    names = list(fds)
    order = [fds[n] for n in names]
    compiled = dict(zip(names, fast.pread_counters(order, 64), strict=True))
    python = dict(zip(names, batch.pread_counters_python(order, 64), strict=True))
    assert compiled == python
    assert compiled["negative"] is None and compiled["beyond"] is None
    assert compiled["u64max"] == 2**64 - 1 and compiled["zero"] == 0
    assert compiled["counter"] == 123456789 and compiled["eio"] is None


def test_pread_bytes_compiled_and_python_agree(fds: dict[str, int]) -> None:
    fast = _compiled()
    order = list(fds.values())
    for size in (1, 4, 64):
        assert fast.pread_bytes(order, size) == batch.pread_bytes_python(order, size)
    assert fast.pread_bytes([fds["counter"]], 4) == [b"1234"]


def test_pread_refuses_bad_arguments() -> None:
    fast = _compiled()
    for bad in ([-2], ["3"], [2**40]):
        with pytest.raises((ValueError, TypeError, OverflowError)):
            fast.pread_ints(bad, 64)
    # -1 is "no descriptor kept" (AttrFiles.read_many): None, never a read.
    assert fast.pread_ints([-1], 64) == batch.pread_ints_python([-1], 64) == [None]
    assert fast.pread_bytes([-1], 64) == batch.pread_bytes_python([-1], 64) == [None]
    for size in (0, 4097):
        with pytest.raises(ValueError):
            fast.pread_ints([0], size)
    assert fast.pread_ints([], 64) == []


def _reader_on(tree: Tree, impl: Reader, monkeypatch: pytest.MonkeyPatch) -> CPUIdleReader:
    monkeypatch.setattr(cpuidle_mod, "pread_counters", impl)
    return CPUIdleReader(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs)))


def _facts(idle: Any) -> tuple[Any, ...]:
    per_state = {
        (cpu, s.info.name): (s.time_us, s.usage, s.above, s.below, s.rejected, s.disabled)
        for cpu, samples in idle.cpus.items()
        for s in samples
    }
    return per_state, sorted(idle.errors.items), idle.unread


def test_cpuidle_on_either_reader_gives_the_same_facts_and_errors(
    make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    _compiled()
    tree = make_tree("epyc9454p-detuned")
    fast = _reader_on(tree, batch.pread_counters, monkeypatch)
    slow = CPUIdleReader(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs)))
    slow_read = batch.pread_counters_python

    def both() -> tuple[Any, Any]:
        a = fast.read()
        monkeypatch.setattr(cpuidle_mod, "pread_counters", slow_read)
        b = slow.read()
        monkeypatch.setattr(cpuidle_mod, "pread_counters", batch.pread_counters)
        return _facts(a), _facts(b)

    for _ in range(2):  # the first read is file by file, the second batched
        a, b = both()
        assert a == b and not a[1]
    assert len(fast._fast) == len(slow._fast) == 96 * 3
    state = tree.sys / CPU / "cpu7/cpuidle/state2"
    usage = int((state / "usage").read_text())
    # Garbage in one counter, a fallen one in another: the batched path hands both
    # states to the file-by-file read, which names the errors alike on both readers.
    (state / "usage").write_text("12ab\n")
    (tree.sys / CPU / "cpu9/cpuidle/state1/above").write_text("0\n")
    a, b = both()
    assert a == b
    assert any("cpu7/cpuidle/state2/usage: not an integer" in e for e in a[1]), a[1]
    assert any("cpu9/cpuidle/state1/above: counter fell" in e for e in a[1]), a[1]
    assert a[0][(7, "C2")][1] is None and a[0][(7, "C2")][0] is not None
    # Repaired, both read it again (and batched once clean).
    (state / "usage").write_text(f"{usage + 1}\n")
    a, b = both()
    assert a == b and a[0][(7, "C2")][1] == usage + 1


def test_cpuidle_batched_read_hands_eio_to_the_named_read(
    make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An EIO on a kept-open descriptor (the descriptor swapped for one of
    /proc/self/mem) and a file that is no longer one (swapped for a directory: EISDIR)
    leave their states to the file-by-file read, which names the error, on either
    reader; the states' other counters stay."""
    tree = make_tree("epyc9454p-detuned")
    for impl in (batch.pread_counters, batch.pread_counters_python):
        reader = _reader_on(tree, impl, monkeypatch)
        reader.read()
        reader.read()
        mem = os.open("/proc/self/mem", os.O_RDONLY)
        folder = os.open(tree.sys, os.O_RDONLY)
        try:
            os.dup2(mem, reader._fast[(4, 1)].fds[0])  # time
            os.dup2(folder, reader._fast[(6, 2)].fds[1])  # usage
            idle = reader.read()
        finally:
            os.close(mem)
            os.close(folder)
        errors = idle.errors.items
        assert len(errors) == 2, errors
        assert any("cpu4/cpuidle/state1/time" in e and "Input/output error" in e for e in errors)
        assert any("cpu6/cpuidle/state2/usage" in e and "Is a directory" in e for e in errors)
        assert idle.cpus[4][1].time_us is None and idle.cpus[4][1].usage is not None
        assert idle.cpus[6][2].usage is None and idle.cpus[6][2].time_us is not None
        assert (4, 1) not in reader._fast and (6, 2) not in reader._fast
        # The failed descriptors were closed; the next read opens the paths afresh.
        again = reader.read()
        assert not again.errors.items
        assert again.cpus[4][1].time_us is not None and again.cpus[6][2].usage is not None
        reader.close()


def test_fallback_when_the_compiled_reader_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "cephnode_exporter.hostfs._fastread", None)
    ints, counters, raw, why = batch._load()
    assert ints is batch.pread_ints_python and raw is batch.pread_bytes_python
    assert counters is batch.pread_counters_python
    assert why and "_fastread" in why
    monkeypatch.setattr(batch, "UNAVAILABLE", why)
    with caplog.at_level(logging.DEBUG, logger="cephnode_exporter"):
        batch.log_implementation()
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "pure-Python" in caplog.records[0].getMessage()


# --- the other batched readers: AttrFiles.read_many and its users --------------------------


@pytest.mark.parametrize("same", [False, True])
def test_attr_files_read_many(tmp_path: Path, same: bool) -> None:
    """With ``same`` the descriptors of the list are looked up once per change of the
    table: every open, close and reopen below must still show in the next batch."""
    from cephnode_exporter.hostfs import BATCH_PAGE, AttrFiles

    small, page, other = tmp_path / "small", tmp_path / "page", tmp_path / "other"
    small.write_text("performance\n")
    page.write_bytes(b"x" * BATCH_PAGE)
    other.write_text("7\n")
    files = AttrFiles(16, recheck=True)
    paths = [str(small), str(page), str(other)]
    # Nothing kept yet: every entry is for the plain read, which keeps the file.
    assert files.read_many(paths, BATCH_PAGE, same=same) == [None, None, None]
    for p in paths:
        files.read_bytes(p, 64)
    # A page-long read goes to the plain path, which bounds it and names the error.
    assert files.read_many(paths, BATCH_PAGE, same=same) == [b"performance\n", None, b"7\n"]
    assert files.read_many_ints(paths, same=same) == [None, None, 7]
    # recheck: a file replaced in the tree is not read through the old descriptor.
    other.unlink()
    other.write_text("8\n")
    assert files.read_many_ints(paths, same=same)[2] is None
    assert files.read_int(str(other)) == 8
    assert files.read_many_ints(paths, same=same)[2] == 8
    files.close(str(small))
    assert files.read_many(paths, BATCH_PAGE, same=same) == [None, None, b"8\n"]
    files.close_all()
    assert files.read_many_ints(paths, same=same) == [None, None, None]


def _cpu_facts(fs: HostFS, files: Any) -> tuple[Any, ...]:
    from cephnode_exporter.hostfs import ReadErrors
    from cephnode_exporter.hostfs.cpufreq import read_cpufreq
    from cephnode_exporter.hostfs.cpuhw import read_frequencies
    from cephnode_exporter.hostfs.firmware import read_microcode
    from cephnode_exporter.hostfs.nvme import read_block_queue
    from cephnode_exporter.hostfs.pci import DeviceAttrs

    freq = read_cpufreq(fs, files[0])
    errors = ReadErrors()
    hertz = read_frequencies(fs, errors, files[1])
    micro = read_microcode(fs, errors, files[2])
    attrs = DeviceAttrs(fs.sys("block", "nvme0n1"), files[3])
    queue = read_block_queue(attrs)
    return (
        freq.cpus,
        freq.unread,
        sorted(freq.errors.items),
        hertz,
        micro,
        sorted(errors.items),
        queue,
        attrs.errors.items,
    )


@pytest.mark.parametrize("impl", ["compiled", "python"])
def test_batched_readers_give_the_plain_reads_and_name_the_same_errors(
    make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch, impl: str
) -> None:
    """cpufreq, the achieved frequencies, the microcode and an NVMe namespace's queue
    read through kept files (batched from the second read on) give what reads without
    kept files give, on either reader, also when a file turns bad."""
    from cephnode_exporter import hostfs
    from cephnode_exporter.hostfs import AttrFiles

    if impl == "compiled":
        _compiled()
    else:
        monkeypatch.setattr(hostfs, "pread_bytes", batch.pread_bytes_python)
        monkeypatch.setattr(hostfs, "pread_ints", batch.pread_ints_python)
    tree = make_tree("epyc9454p-detuned")
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))
    kept = [AttrFiles(4096, recheck=True), AttrFiles(4096), AttrFiles(4096)]
    kept.append(AttrFiles(4096, recheck=True))
    plain = [None, None, None, None]
    first = _cpu_facts(fs, kept)
    assert first == _cpu_facts(fs, kept) == _cpu_facts(fs, plain)
    assert not first[2] and not first[5] and not first[7]
    cpu = tree.sys / "devices/system/cpu"
    (cpu / "cpu3/cpufreq/scaling_governor").write_text("\n")  # empty: an error
    (cpu / "cpu4/cpufreq/scaling_governor").write_text("performance\n")
    (cpu / "cpu5/cpufreq/scaling_cur_freq").write_text("fast\n")
    (cpu / "cpu6/cpufreq/scaling_cur_freq").write_text("2000000\n")
    (cpu / "cpu7/microcode/version").write_text("0xZZ\n")
    queue = tree.sys / "block/nvme0n1/queue"
    (queue / "nr_requests").write_text("lots\n")
    (queue / "scheduler").write_text("[mq-deadline] none\n")
    again = _cpu_facts(fs, kept)
    assert again == _cpu_facts(fs, plain)
    assert again[0][4].governor == "performance" and 3 not in again[0]
    assert any("cpu3/cpufreq/scaling_governor: empty" in e for e in again[2])
    assert 2e9 in again[3].hertz
    assert any("cpu5/cpufreq/scaling_cur_freq" in e for e in again[5])
    assert again[4] == (None, "sysfs")
    assert any("cpu7/microcode/version" in e for e in again[5])
    assert again[6].nr_requests is None and again[6].scheduler == "mq-deadline"
    assert any("nr_requests" in e for e in again[7])
    for files in kept:
        files.close_all()


def test_irq_batched_effective_lists_follow_changes_and_name_errors(
    make_tree: MakeTree,
) -> None:
    from cephnode_exporter.hostfs.irq import IRQReader, pci_devices, read_device

    tree = make_tree("epyc9454p-detuned")
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))

    def scrape(reader: IRQReader) -> dict[str, tuple[Any, Any]]:
        seen: set[int] = set()
        out = {}
        for name, kind, bdf, pci_dir in pci_devices(fs):
            dev = read_device(reader, name, kind, bdf, pci_dir, seen)
            out[name] = (dev.irqs, dict(dev.unread))
        return out

    kept = IRQReader(fs)
    first = scrape(kept)
    assert scrape(kept) == first == scrape(IRQReader(fs))
    batched = sorted(kept._last)  # read through the batch on the second scrape
    assert batched, "no vector was read through the batch"
    moved, bad = batched[0], batched[-1]
    (tree.proc / "irq" / str(moved) / "effective_affinity_list").write_text("17\n")
    (tree.proc / "irq" / str(bad) / "effective_affinity_list").write_text("1-x\n")
    again = scrape(kept)
    assert again == scrape(IRQReader(fs))
    irqs = {i.number: i for irqs, _ in again.values() for i in irqs}
    assert irqs[moved].effective == frozenset({17})
    unread = {n: e for _, u in again.values() for n, e in u.items()}
    assert bad not in irqs and f"/irq/{bad}/effective_affinity_list" in unread[bad]
    kept.close()


# ----------------------------------------------------------------------------- statuses


def _statuses() -> tuple[list[int], list[bytes | None]]:
    """This process's threads' real status texts, then shapes the kernel never prints
    (or prints only in another order), each with a tid of its own."""
    tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
    real = [Path(f"/proc/self/task/{t}/status").read_bytes() for t in tids]
    good = real[0]
    cpus = good[good.index(b"\nCpus_allowed_list:") :].split(b"\n")[1]
    odd = [
        None,
        b"",
        good.replace(b"\nvoluntary_ctxt_switches:", b"\nvoluntary_ctxt_switchez:"),
        good.replace(b"\nnonvoluntary_ctxt_switches:", b"\nnonvoluntary_ctxt_switchez:"),
        good.replace(b"\nCpus_allowed_list:", b"\nCpus_allowed_lisd:"),
        good.replace(
            b"\nvoluntary_ctxt_switches:\t", b"\nvoluntary_ctxt_switches:\t99" + b"9" * 30
        ),
        good.replace(b"\nvoluntary_ctxt_switches:\t", b"\nvoluntary_ctxt_switches:\t-"),
        good.replace(b"\nvoluntary_ctxt_switches:\t", b"\nvoluntary_ctxt_switches:  \t 7"),
        good.replace(b"\nCpus_allowed_list:\t", "\nCpus_allowed_list:\t\u00e9".encode()),
        good.replace(b"\nCpus_allowed_list:\t", b"\nCpus_allowed_list:\t  "),
        good.replace(b"\n", b"\r\n"),
        good.rstrip(b"\n"),
        good.split(b"\nnonvoluntary_ctxt_switches:")[0] + b"\nnonvoluntary_ctxt_switches:",
        # The voluntary line first: another kernel's order (the caller's line-by-line path).
        b"voluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t4\n"
        b"Cpus_allowed_list:\t" + cpus + b"\n",
        # A voluntary line not followed by the involuntary one, then a good pair.
        b"Name:\tx\nCpus_allowed_list:\t0\nvoluntary_ctxt_switches:\t1\nState:\tS\n"
        b"voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t6\n",
        b"x" * 4096,
    ]
    return tids + [10_000_000 + i for i in range(len(odd))], real + odd


def test_status_counts_compiled_and_python_agree() -> None:
    """Real thread statuses and odd ones through both: the compiled one reads every real
    status, and never gives a value the Python one would not; what it leaves to the
    caller includes everything the Python one leaves."""
    fastread = _compiled()
    tids, texts = _statuses()
    real = len(os.listdir("/proc/self/task"))
    c_counts, c_lists, c_rest = fastread.status_counts(tids, texts)
    p_counts, p_lists, p_rest = process.status_counts_python(tids, texts)
    assert all(tids[i] in c_counts for i in range(real))
    for tid, value in c_counts.items():
        assert p_counts[tid] == value, tid
    assert c_lists <= p_lists and set(c_rest) >= set(p_rest)
    assert set(c_rest) | {tids.index(t) for t in c_counts} == set(range(len(tids)))
    with pytest.raises(ValueError, match="differ in length"):
        fastread.status_counts([1, 2], [b""])
    with pytest.raises(TypeError):
        fastread.status_counts(5, [])


def test_process_read_is_the_same_without_the_compiled_status_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """read_process of this very process with kept files: the compiled status_counts
    and the pure-Python one give the same threads, switches and CPUs (the threads sleep,
    so no count moves between the two reads)."""
    _compiled()
    import threading

    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(6)]
    for w in workers:
        w.start()

    def switches(tid: int) -> bytes:
        text = Path(f"/proc/self/task/{tid}/status").read_bytes()
        return text[text.index(b"\nvoluntary_ctxt_switches:") :]

    # Until every worker sleeps in wait() for good: a thread still starting switches
    # once more when it first blocks.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        before = [switches(w.native_id) for w in workers]  # type: ignore[arg-type]
        time.sleep(0.05)
        if before == [switches(w.native_id) for w in workers]:  # type: ignore[arg-type]
            break
    comm = frozenset({Path("/proc/self/comm").read_text().strip()})
    files = AttrFiles(budget=1000)
    try:
        state = process.ProcessState()
        process.read_process(HostFS(), os.getpid(), state, comm, files=files)
        compiled = dict(state.threads)
        monkeypatch.setattr(process, "status_counts", process.status_counts_python)
        other = process.ProcessState()
        process.read_process(HostFS(), os.getpid(), other, comm, files=files)
        assert set(other.threads) == set(compiled) and len(compiled) >= 7
        for w in workers:
            assert other.threads[w.native_id] == compiled[w.native_id]  # asleep: unchanged
    finally:
        stop.set()
        for w in workers:
            w.join()
        files.close_all()
