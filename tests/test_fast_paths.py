"""The scrape's fast paths give what the plain paths give, and fall back to them.

Each fast path (docs/performance.md, "What made it fast") skips work the plain path
does: the cpuidle counters read in one pass of ``pread``, the reads several collectors
share in one scrape, the thread statuses searched as bytes, the exporter's own
``process_*`` without listing ``/proc/self/fd``, the collectors run as one batch on the
worker. These tests compare each with the plain path on real files and make the fast
path meet what it must hand back: a falling counter, a bad ``disable``, a hotplug, a
malformed status, a collector that hangs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter import hostfs
from cephnode_exporter.checks import load_all
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collectors.base import Collector, CollectorContext
from cephnode_exporter.hostfs import HostFS, SharedReads
from cephnode_exporter.hostfs.cpuidle import CPUIdleReader
from cephnode_exporter.hostfs.nvme import count_hw_queues
from cephnode_exporter.hostfs.pci import DeviceAttrs
from cephnode_exporter.hostfs.process import _thread_counts, parse_status
from cephnode_exporter.process_metrics import ProcessMetrics
from cephnode_exporter.profile import load_profile
from cephnode_exporter.scrape import Scraper
from prometheus_client import ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric

from tests.conftest import MakeTree, Tree, value

CPU = "devices/system/cpu"


def _fs(tree: Tree) -> HostFS:
    return HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))


def _plain(idle: Any) -> dict[tuple[int, str], tuple[Any, ...]]:
    return {
        (cpu, s.info.name): (s.time_us, s.usage, s.above, s.below, s.rejected, s.disabled)
        for cpu, samples in idle.cpus.items()
        for s in samples
    }


# --- cpuidle: one pass of pread per state ------------------------------------------------


def test_cpuidle_fast_reads_equal_a_fresh_reader(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    reader = CPUIdleReader(_fs(tree))
    reader.read()  # file by file: every clean state gets its descriptors kept
    assert len(reader._fast) == 96 * 3
    usage = tree.sys / CPU / "cpu5/cpuidle/state2/usage"
    usage.write_text(f"{int(usage.read_text()) + 7}\n")
    fast = reader.read()
    assert not fast.errors
    assert _plain(fast) == _plain(CPUIdleReader(_fs(tree)).read())
    assert fast.cpus[5][2].usage == int(usage.read_text())


def test_cpuidle_fast_path_hands_faults_to_the_plain_read(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    reader = CPUIdleReader(_fs(tree))
    reader.read()
    reader.read()  # now through the fast path
    state = tree.sys / CPU / "cpu3/cpuidle/state1"
    before = int((state / "time").read_text())
    (state / "time").write_text(f"{before - 1}\n")
    (state / "disable").write_text("2\n")
    idle = reader.read()
    assert len(idle.errors) == 2, idle.errors.items
    assert any(f"counter fell from {before} to {before - 1}" in e for e in idle.errors.items)
    assert any("expected 0 or 1, got 2" in e for e in idle.errors.items)
    assert idle.cpus[3][1].time_us is None and idle.cpus[3][1].disabled is None
    assert idle.cpus[3][1].usage is not None  # the state's other counters stay
    # The lower value is the new baseline, and the state is read fast again once clean.
    (state / "disable").write_text("1\n")
    again = reader.read()
    assert not again.errors
    assert again.cpus[3][1].time_us == before - 1 and again.cpus[3][1].disabled is True
    assert (3, 1) in reader._fast
    assert not reader.read().errors


def test_cpuidle_fast_path_forgets_descriptors_on_hotplug(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    reader = CPUIdleReader(_fs(tree))
    reader.read()
    (tree.sys / CPU / "online").write_text("0-3\n")
    idle = reader.read()
    assert sorted(idle.cpus) == [0, 1, 2, 3]
    assert {cpu for cpu, _ in reader._fast} <= {0, 1, 2, 3}
    # Descriptors closed with the old set are never read: a new file at a reused
    # descriptor number would be another file.
    extra = [os.open(os.devnull, os.O_RDONLY) for _ in range(64)]
    try:
        assert _plain(reader.read()) == _plain(CPUIdleReader(_fs(tree)).read())
    finally:
        for fd in extra:
            os.close(fd)
    reader.close()
    assert not reader._fast


# --- reads shared by the collectors of one scrape -----------------------------------------


def test_shared_reads_once_per_scope_and_fresh_outside(tmp_path: Path) -> None:
    path = tmp_path / "cmdline"
    path.write_text("ro quiet\n")
    shared = SharedReads()
    assert shared.text(str(path)) == "ro quiet"
    with shared.scope():
        assert shared.text(str(path)) == "ro quiet"
        path.write_text("ro\n")
        assert shared.text(str(path)) == "ro quiet"  # the first read of the scope
        missing = str(tmp_path / "absent")
        for _ in range(2):
            with pytest.raises(FileNotFoundError, match="absent"):
                shared.text(missing)
    assert shared.text(str(path)) == "ro"  # outside a scope: the file as it is now


def test_one_collection_reads_cmdline_and_cpu_lists_once(
    make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = make_tree("epyc9454p-detuned")
    scraper = build_scraper(parse_args(["dump", *tree.flags]))
    reads: list[str] = []
    real = hostfs.read_text

    def counting(path: str) -> str:
        reads.append(path)
        return real(path)

    try:
        scraper.collect(10.0)  # build the collectors' caches first
        monkeypatch.setattr(hostfs, "read_text", counting)
        collection = scraper.collect(10.0)
    finally:
        scraper.close()
    for name in ("cmdline", "online", "possible"):
        assert sum(1 for p in reads if os.path.basename(p) == name) == 1, (name, reads)
    assert all(o.success for o in collection.outcomes), [o.error for o in collection.outcomes]


# --- thread statuses as bytes ---------------------------------------------------------------


def test_thread_counts_agree_with_parse_status() -> None:
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        task = Path("/proc/self/task")
        for tid in os.listdir(task):
            data = (task / tid / "status").read_bytes()
            fast = _thread_counts(data)
            slow = parse_status(data.decode())
            assert fast == (slow.voluntary, slow.involuntary, slow.cpus_allowed)
    finally:
        stop.set()
        for w in workers:
            w.join()


def test_thread_counts_of_a_status_in_another_order() -> None:
    """The one search expects the lines in fs/proc/array.c's order; a status printed in
    another order (switches before the allowed CPUs) gives the same values through the
    separate searches."""
    data = Path("/proc/self/status").read_bytes()
    lines = data.split(b"\n")
    switches = [ln for ln in lines if b"voluntary_ctxt_switches:" in ln]
    others = [ln for ln in lines if b"voluntary_ctxt_switches:" not in ln]
    moved = b"\n".join([others[0], *switches, *others[1:]])
    slow = parse_status(moved.decode())
    assert _thread_counts(moved) == (slow.voluntary, slow.involuntary, slow.cpus_allowed)
    assert _thread_counts(moved) == _thread_counts(data)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.replace(b"\nvoluntary_ctxt_switches:", b"\nvoluntary_switches:"),
        lambda d: d.replace(b"nonvoluntary_ctxt_switches:\t", b"nonvoluntary_ctxt_switches:\t-"),
        lambda d: d.replace(b"\nCpus_allowed_list:\t", b"\nCpus_allowed_list:\tx"),
        lambda d: d.replace(b"\nCpus_allowed_list:\t", b"\nCpus_allowed_list:\t\xff"),
    ],
)
def test_thread_counts_leave_a_malformed_status_to_parse_status(edit: Any) -> None:
    data = edit(Path("/proc/self/status").read_bytes())
    assert _thread_counts(data) is None
    with pytest.raises(ValueError):
        parse_status(data.decode("utf-8", "replace"))


# --- the exporter's own process_* ---------------------------------------------------------


def _by_name(families: Iterable[Metric]) -> dict[str, tuple[str, str, float]]:
    return {f.name: (f.documentation, f.type, f.samples[0].value) for f in families}


def test_process_metrics_match_client_python() -> None:
    ours = _by_name(ProcessMetrics().families())
    theirs = _by_name(ProcessCollector(registry=None).collect())
    listed = len(os.listdir("/proc/self/fd"))  # counts the listing's own descriptor
    assert set(ours) == {*theirs, "process_threads"}
    for name in ("process_max_fds", "process_start_time_seconds"):
        assert ours[name] == theirs[name]
    for name, (doc, kind, _) in theirs.items():
        assert ours[name][:2] == (doc, kind)
    assert ours["process_open_fds"][2] == listed
    assert ours["process_threads"][2] == len(os.listdir("/proc/self/task"))
    assert (
        abs(
            ours["process_resident_memory_bytes"][2] / theirs["process_resident_memory_bytes"][2]
            - 1
        )
        < 0.2
    )


def test_process_metrics_without_proc(tmp_path: Path) -> None:
    assert ProcessMetrics(str(tmp_path)).families() == []


# --- the collectors of a collection as one batch -------------------------------------------


class Timed(Collector):
    """A collector that sleeps ``seconds`` (or until ``gate``) and records its thread."""

    name = "timed"

    def __init__(self, name: str, seconds: float, gate: threading.Event | None = None):
        super().__init__(CollectorContext(HostFS(), argparse.Namespace()))
        self.name = name  # type: ignore[misc]
        self.seconds = seconds
        self.gate = gate
        self.threads: list[str] = []
        self.when: list[tuple[float, float]] = []

    def read(self) -> Any:
        start = time.monotonic()
        self.threads.append(threading.current_thread().name)
        if self.gate is not None:
            self.gate.wait(30)
        else:
            time.sleep(self.seconds)
        self.when.append((start, time.monotonic()))
        return None

    def metrics(self, facts: Any) -> Iterable[Metric]:
        yield GaugeMetricFamily(f"test_{self.name}", "a value", value=1.0)


def _scraper(*collectors: Collector, timeout: float) -> Scraper:
    specs = load_all()
    return Scraper(list(collectors), [], load_profile(None, specs), specs, timeout)


def test_batch_durations_are_each_collectors_own() -> None:
    slow, quick = Timed("slow", 0.2), Timed("quick", 0.0)
    result = _scraper(slow, quick, timeout=5).collect(5)
    slow_s = value(result, "cephnode_scrape_collector_duration_seconds", collector="slow")
    quick_s = value(result, "cephnode_scrape_collector_duration_seconds", collector="quick")
    assert slow_s is not None and quick_s is not None
    assert slow_s >= 0.2 and quick_s < 0.1


def test_batch_after_an_overrun_runs_the_rest_on_a_fresh_worker_one_at_a_time() -> None:
    gate = threading.Event()
    first, hung = Timed("first", 0.01), Timed("hung", 0, gate)
    rest = [Timed(f"after{i}", 0.02) for i in range(3)]
    s = _scraper(first, hung, *rest, timeout=0.3)
    try:
        start = time.monotonic()
        result = s.collect(5)
        assert time.monotonic() - start < 1.5
        assert value(result, "cephnode_scrape_collector_success", collector="first") == 1
        assert value(result, "cephnode_scrape_collector_success", collector="hung") == 0
        for c in rest:
            assert value(result, "cephnode_scrape_collector_success", collector=c.name) == 1
            assert len(c.when) == 1
        assert first.threads[0] == rest[0].threads[0] == "collector-worker"
        # Never two at once: each started after the one before it ended.
        spans = sorted(w for c in (first, *rest) for w in c.when)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    finally:
        gate.set()
    time.sleep(0.05)
    assert len(hung.when) == 1  # returned, and not started again by the abandoned batch
    for c in rest:
        assert len(c.when) == 1


# --- the OSD latency histograms' samples ---------------------------------------------------


@pytest.mark.parametrize("kind", [float, int])
def test_latency_histogram_family_gives_add_metrics_samples(kind: type) -> None:
    """add_buckets is add_metric with the le text made here: the same samples (names,
    labels in order, values and their types), on the OSDs' axis and on edges it has
    not seen, and nothing but the buckets for a negative first edge or no sum."""
    from cephnode_exporter.collectors.osd_metrics import LatencyHistogramFamily, _le
    from prometheus_client.core import HistogramMetricFamily

    axis = [0.0001 * 2**i for i in range(17)] + [float("inf")]
    cases = [
        (axis, 0.25),
        ([0.3333, 1e-9, float("inf")], 1.0),
        ([-1.0, 2.0, float("inf")], 3.0),
        (axis, None),
    ]
    for edges, total in cases:
        buckets = [(e, kind(n * 3)) for n, e in enumerate(edges)]
        fast = LatencyHistogramFamily("x_seconds", "doc", labels=["ceph_daemon", "op"])
        fast.add_buckets(["osd.7", "read"], buckets, total)  # type: ignore[arg-type]
        plain = HistogramMetricFamily("x_seconds", "doc", labels=["ceph_daemon", "op"])
        plain.add_metric(["osd.7", "read"], [(_le(e), n) for e, n in buckets], total)
        assert fast.samples == plain.samples
        for a, b in zip(fast.samples, plain.samples, strict=True):
            assert list(a.labels) == list(b.labels)
            assert type(a.value) is type(b.value)
        assert len(fast.samples) == len(edges) + (2 if edges[0] >= 0 and total is not None else 0)


# --- NVMe hardware queues from the link count -------------------------------------------


def test_hw_queues_from_the_link_count_equal_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = tmp_path / "nvme0n1"
    for h in range(37):
        (disk / "mq" / str(h)).mkdir(parents=True)
    assert count_hw_queues(DeviceAttrs(str(disk))) == 37
    # A file system that does not count subdirectories in the link count (btrfs gives
    # every directory one link): the listing counts them.
    real = os.stat

    def one_link(path: Any, *args: Any, **kwargs: Any) -> Any:
        st = real(path, *args, **kwargs)
        if str(path).endswith("/mq"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, 1, *tuple(st)[4:10]))
        return st

    monkeypatch.setattr(os, "stat", one_link)
    (disk / "mq" / "not-a-queue").write_text("")
    assert count_hw_queues(DeviceAttrs(str(disk))) == 37
    monkeypatch.undo()
    # Not a directory: the listing's error is the one recorded.
    other = tmp_path / "nvme1n1"
    other.mkdir()
    (other / "mq").write_text("")
    attrs = DeviceAttrs(str(other))
    assert count_hw_queues(attrs) is None
    assert len(attrs.errors) == 1 and "mq" in attrs.errors.items[0]


def test_cpuidle_whole_batch_reads_equal_a_fresh_reader_and_hand_faults_back(
    make_tree: MakeTree,
) -> None:
    tree = make_tree("epyc9454p-detuned")
    reader = CPUIdleReader(_fs(tree))
    reader.read()  # file by file
    state = tree.sys / CPU / "cpu9/cpuidle/state1"
    usage = state / "usage"
    for step in range(3):
        usage.write_text(f"{int(usage.read_text()) + 11}\n")
        idle = reader.read()
        assert reader._whole_last is not None, step  # every state from the one batch
        assert not idle.errors
        assert _plain(idle) == _plain(CPUIdleReader(_fs(tree)).read())
    # A state enabled again (its flag falls from 1 to 0) is read state by state, then
    # the whole batch again.
    disable = tree.sys / CPU / "cpu2/cpuidle/state2/disable"
    disable.write_text("1\n")
    assert reader.read().cpus[2][2].disabled is True
    disable.write_text("0\n")
    idle = reader.read()
    assert reader._whole_last is None and not idle.errors
    assert idle.cpus[2][2].disabled is False
    assert reader.read() and reader._whole_last is not None
    # A counter lower than at the last scrape, read by the whole batch: named against
    # that scrape's value.
    before = int(usage.read_text())
    usage.write_text(f"{before - 3}\n")
    idle = reader.read()
    assert len(idle.errors) == 1
    assert f"counter fell from {before} to {before - 3}" in idle.errors.items[0]
    assert idle.cpus[9][1].usage is None and idle.cpus[9][1].time_us is not None
    assert not reader.read().errors  # the lower value is the new baseline


def test_cpuidle_cpu_cached_late_is_read_whole_again(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    name = tree.sys / CPU / "cpu40/cpuidle/state1/name"
    good = name.read_text()
    name.write_text("")  # an empty name: the CPU's states are not cached, retried
    reader = CPUIdleReader(_fs(tree))
    for _ in range(3):
        idle = reader.read()
        assert 40 in idle.unread and reader._whole_last is None
    name.write_text(good)
    reader.read()  # cached now, read state by state once
    idle = reader.read()
    assert reader._whole_last is not None and not idle.errors and not idle.unread
    assert _plain(idle) == _plain(CPUIdleReader(_fs(tree)).read())


@pytest.mark.parametrize(
    "layout",
    [
        [["C1", "C2", "C6"]] * 4,  # every CPU alike: the slices
        [["C1", "C2", "C6"], ["C1", "C2"], ["C1", "C2", "C6"]],  # a state missing
        [["C1", "C6"], ["C1", "C6", "C10"], ["C6", "C1"]],  # hybrid cores, other order
        [["C1", "C1"], ["C1", "C1"]],  # one name twice (a driver's duplicate)
        [],
    ],
)
def test_cpuidle_grouping_by_state_equals_the_plain_loop(layout: list[list[str]]) -> None:
    """The collector's grouping of samples by state name takes slices when every CPU
    lists the same states; any other layout gives what a plain loop gives."""
    from cephnode_exporter.collectors.cpuidle import _by_name
    from cephnode_exporter.hostfs.cpuidle import CPUIdle, IdleStateInfo, IdleStateSample

    idle = CPUIdle("acpi_idle", "menu")
    for cpu, names in enumerate(layout):
        idle.cpus[cpu] = [
            IdleStateSample(IdleStateInfo(i, name, "", 10 * i, 20 * i), time_us=cpu, usage=i)
            for i, name in enumerate(names)
        ]
    plain: dict[str, list[IdleStateSample]] = {}
    for samples in idle.cpus.values():
        for s in samples:
            plain.setdefault(s.info.name, []).append(s)
    got = _by_name(idle)
    assert list(got) == list(plain)
    assert all(a is b for name in plain for a, b in zip(got[name], plain[name], strict=True))
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in plain.items()}
