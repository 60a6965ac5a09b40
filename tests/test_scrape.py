"""The scrape engine: isolation, deadlines, hung collectors, concurrent scrapes."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from cephnode_exporter.checks import load_all
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors.base import Collector, CollectorContext
from cephnode_exporter.hostfs import HostFS
from cephnode_exporter.profile import load_profile
from cephnode_exporter.scrape import Scraper
from prometheus_client.core import CounterMetricFamily, Metric

from tests.conftest import MakeTree, Tree, collect, samples, value


class Probe(Collector):
    """A collector whose behaviour the test controls; counts its reads."""

    name = "probe"

    def __init__(self, name: str, behaviour: str = "ok", gate: threading.Event | None = None):
        super().__init__(CollectorContext(HostFS(), argparse.Namespace()))
        self.name = name  # type: ignore[misc]
        self.behaviour = behaviour
        self.gate = gate or threading.Event()
        self.reads = 0
        self.threads: set[str] = set()
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def read(self) -> Any:
        with self._lock:
            self.reads += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.threads.add(threading.current_thread().name)
        try:
            if self.behaviour == "raise":
                raise RuntimeError("sensor on fire")
            if self.behaviour == "hang":
                self.gate.wait(30)
            if self.behaviour == "slow":
                time.sleep(0.05)
            return self.reads
        finally:
            with self._lock:
                self.active -= 1

    def metrics(self, facts: Any) -> Iterable[Metric]:
        family = CounterMetricFamily(f"test_{self.name}_reads", "reads", labels=[])
        family.add_metric([], float(facts))
        yield family


def scraper(*collectors: Collector, timeout: float = 5.0) -> Scraper:
    specs = load_all()
    return Scraper(
        list(collectors), ["cpuidle", "cpufreq"], load_profile(None, specs), specs, timeout
    )


def success(collection: Collection, name: str) -> float | None:
    return value(collection, "cephnode_scrape_collector_success", collector=name)


def test_a_raising_collector_does_not_fail_the_scrape() -> None:
    good, bad = Probe("good"), Probe("bad", "raise")
    result = scraper(bad, good).collect(5)
    assert success(result, "bad") == 0
    assert success(result, "good") == 1
    assert value(result, "test_good_reads_total") == 1
    assert value(result, "cephnode_scrape_collector_duration_seconds", collector="bad") is not None


def test_a_hung_collector_is_abandoned_within_its_timeout(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    hung, after = Probe("hung", "hang", gate), Probe("after")
    s = scraper(hung, after, timeout=0.3)
    start = time.monotonic()
    first = s.collect(5)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0
    assert success(first, "hung") == 0
    assert success(first, "after") == 1  # ran on a fresh worker
    assert any("timed out" in str(getattr(r, "kv", {}).get("err")) for r in caplog.records)
    # While the call is still stuck, the collector is not entered again.
    start = time.monotonic()
    second = s.collect(5)
    assert time.monotonic() - start < 0.2
    assert success(second, "hung") == 0
    assert hung.reads == 1
    # Once the stuck call returns, the collector runs again.
    gate.set()
    time.sleep(0.05)
    third = s.collect(5)
    assert success(third, "hung") == 1
    assert hung.reads == 2


def test_the_budget_bounds_the_whole_scrape() -> None:
    hung1, hung2, last = Probe("h1", "hang"), Probe("h2", "hang"), Probe("last")
    s = scraper(hung1, hung2, last, timeout=5)
    start = time.monotonic()
    result = s.collect(0.5)
    assert time.monotonic() - start < 1.0
    assert success(result, "h1") == 0
    assert success(result, "h2") == 0
    assert success(result, "last") == 0  # nothing left of the budget
    hung1.gate.set()
    hung2.gate.set()


def test_collectors_run_serially_on_one_worker_thread() -> None:
    probes = [Probe(f"p{i}", "slow") for i in range(3)]
    s = scraper(*probes)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: s.collect(10), range(8)))
    threads = set().union(*(p.threads for p in probes))
    assert threads == {"collector-worker"}
    assert all(p.max_active == 1 for p in probes)


def test_twenty_parallel_scrapes_share_collections() -> None:
    probe = Probe("p", "slow")
    s = scraper(probe)
    barrier = threading.Barrier(20)

    def one(_: int) -> float:
        barrier.wait()
        return value(s.collect(10), "test_p_reads_total") or -1

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    assert all(r >= 1 for r in results)
    # 20 requests at once cost at most a few collections, not 20.
    assert probe.reads <= 3
    # A request that arrived after a collection started gets a newer one.
    assert max(results) == probe.reads


def test_a_waiter_that_gives_up_gets_a_valid_answer() -> None:
    gate = threading.Event()
    hung = Probe("hung", "hang", gate)
    s = scraper(hung, timeout=2)
    t = threading.Thread(target=s.collect, args=(2,))
    t.start()
    time.sleep(0.1)
    start = time.monotonic()
    result = s.collect(0.3)  # waits behind the running collection, then gives up
    assert time.monotonic() - start < 0.6
    assert success(result, "hung") == 0
    gate.set()
    t.join()
    # and the next scrape is normal
    assert success(s.collect(2), "hung") == 1


def test_collector_fifo_hang_on_a_real_tree(make_tree: MakeTree) -> None:
    """A FIFO where a sysfs file should be (its read would block forever) costs one item,
    not the collector nor the scrape: it is refused before it is read."""
    tree = make_tree(
        "epyc9454p-detuned", faults={"sys/devices/system/cpu/cpu2/cpuidle/state1/usage": "fifo"}
    )
    start = time.monotonic()
    result = collect([*tree.flags, "--collector.timeout=0.5"])
    assert time.monotonic() - start < 2
    assert success(result, "cpuidle") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 1
    assert success(result, "cpufreq") == 1
    # the checks still judge what was read: C2 is enabled on every CPU
    assert value(result, "cephnode_tuning_check_failed", check="cpu.cstates", subject="") == 1
    assert value(result, "cephnode_tuning_check_failed", check="cpu.governor", subject="") == 1


def test_every_collector_reports_success_and_duration(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-tuned"].flags)
    found = samples(result)
    for name in ("cpuidle", "cpufreq"):
        assert found[("cephnode_scrape_collector_success", frozenset({("collector", name)}))] == 1
        key = ("cephnode_scrape_collector_duration_seconds", frozenset({("collector", name)}))
        assert 0 <= found[key] < 5
    assert (
        value(
            result,
            "cephnode_exporter_build_info",
            version="0.1.0",
            python_version=__import__("platform").python_version(),
        )
        == 1
    )


def test_skipped_files_are_logged_once_when_they_start(
    make_tree: MakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    tree = make_tree(
        "epyc9454p-detuned", faults={"sys/devices/system/cpu/cpu3/cpuidle/state2/time": "eio"}
    )
    s = build_scraper(parse_args(["dump", *tree.flags]))
    try:
        with caplog.at_level("INFO"):
            s.collect(5)
            s.collect(5)
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1
        assert "cpu3/cpuidle/state2/time" in str(warnings[0].kv["first"])
    finally:
        s.close()
