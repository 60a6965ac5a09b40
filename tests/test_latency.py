"""ceph/latency.py: PromQL's histogram_quantile in Python, the per-OSD latency window, the
pooled per-host histogram and the counter window behind the means; and the quantile and
a mean against Prometheus' own, through ``promtool test rules``."""

from __future__ import annotations

import itertools
import logging
import math
import subprocess
from pathlib import Path

import pytest
import yaml
from cephnode_exporter.ceph.latency import (
    WINDOW_SLOTS,
    CounterWindow,
    LatencyWindow,
    PooledHistogram,
    histogram_quantile,
)

from tests.conftest import need_tool

INF = math.inf
# 10 ops up to 0.1 s, 20 more up to 0.2 s, 60 up to 0.4 s, 10 slower.
HAND = [(0.1, 10.0), (0.2, 30.0), (0.4, 90.0), (INF, 100.0)]


def promtool_test(promtool: str, doc: dict, path: Path) -> None:
    """Run ``promtool test rules`` on the test file ``doc``; every case must pass."""
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


# ----------------------------------------------------------------------------- quantile


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.05, 0.1 * 5 / 10),  # rank 5 in the first bucket: from 0 to 0.1
        (0.1, 0.1),  # rank 10: the first bucket's edge
        (0.5, 0.2 + 0.2 * (50 - 30) / 60),  # rank 50, 20th of the 60 in (0.2, 0.4]
        (0.9, 0.4),  # rank 90: the last finite bucket's edge
        (0.95, 0.4),  # rank 95 is in +Inf: the highest finite edge
        (1.0, 0.4),
        (0.0, 0.0),  # rank 0 in the first bucket
    ],
)
def test_quantile_by_hand(q: float, expected: float) -> None:
    assert histogram_quantile(q, HAND) == pytest.approx(expected, rel=1e-15)


def test_quantile_of_nothing_is_none() -> None:
    assert histogram_quantile(0.99, [(0.1, 0.0), (0.2, 0.0), (INF, 0.0)]) is None
    assert histogram_quantile(0.99, []) is None
    assert histogram_quantile(0.99, [(INF, 5.0)]) is None  # one bucket
    assert histogram_quantile(0.99, [(0.1, 5.0), (0.2, 5.0)]) is None  # no +Inf
    assert histogram_quantile(math.nan, HAND) is None
    # q = 0 with an empty first bucket: 0/0 in PromQL (NaN).
    assert histogram_quantile(0.0, [(0.1, 0.0), (INF, 5.0)]) is None


def test_quantile_outside_0_1_is_infinite() -> None:
    assert histogram_quantile(-0.5, HAND) == -INF
    assert histogram_quantile(1.5, HAND) == INF


def test_non_monotonic_counts_take_the_envelope() -> None:
    """A bucket below its predecessor (a torn read) counts as the predecessor, as PromQL's
    ensureMonotonic does: [10, 5, 20, 20] is read as [10, 10, 20, 20]."""
    torn = [(0.1, 10.0), (0.2, 5.0), (0.4, 20.0), (INF, 20.0)]
    assert histogram_quantile(0.5, torn) == pytest.approx(0.1)  # rank 10: the first edge
    assert histogram_quantile(0.75, torn) == pytest.approx(0.2 + 0.2 * 5 / 10)
    # Without the envelope, rank 15 would interpolate over a negative bucket.
    assert histogram_quantile(0.75, torn) != histogram_quantile(0.75, torn[:1] + torn[2:])


def test_unsorted_and_repeated_edges() -> None:
    """Buckets are sorted by edge and equal edges merged (le="0.1" and le="0.10")."""
    shuffled = [(0.2, 30.0), (0.1, 4.0), (INF, 100.0), (0.1, 6.0), (0.4, 90.0)]
    for q in (0.05, 0.5, 0.99):
        assert histogram_quantile(q, shuffled) == histogram_quantile(q, HAND)


def test_a_first_edge_at_or_below_zero_is_returned_as_is() -> None:
    assert histogram_quantile(0.2, [(0.0, 5.0), (1.0, 10.0), (INF, 10.0)]) == 0.0
    assert histogram_quantile(0.7, [(0.0, 5.0), (1.0, 10.0), (INF, 10.0)]) == pytest.approx(0.4)


# ----------------------------------------------------------------------------- window

EDGES = (0.001, 0.002, 0.004, INF)


def hist(fast: float, slow: float) -> list[tuple[float, float]]:
    """``fast`` ops under 1 ms, ``slow`` ops between 2 and 4 ms, cumulative."""
    return list(zip(EDGES, (fast, fast, fast + slow, fast + slow), strict=True))


def test_window_needs_two_reads_time_and_ops() -> None:
    w = LatencyWindow(300)
    w.observe(0, hist(0, 0), 0.0)
    assert w.quantile(0.99) is None  # one read
    w.observe(0, hist(100, 0), 0.05)
    assert w.quantile(0.99) is None  # no time in between
    w.observe(60, hist(100, 0), 0.05)
    # 100 ops in 60 s, all under 1 ms: rank 99 of 100 in the first bucket.
    assert w.quantile(0.99) == pytest.approx(0.001 * 0.99)
    assert w.quantile(0.5) == pytest.approx(0.0005)


def test_window_minimum_rate() -> None:
    w = LatencyWindow(300)
    w.observe(0, hist(0, 0), 0.0)
    w.observe(60, hist(0, 59), 0.18)
    assert w.quantile(0.99) is None  # 59 ops in 60 s
    assert w.quantile(0.99, min_rate=0.5) == pytest.approx(0.002 + 0.002 * (0.99 * 59) / 59)
    w.observe(120, hist(0, 120), 0.36)
    assert w.quantile(0.99) == pytest.approx(0.002 + 0.002 * 0.99)  # 1 op/s exactly


def test_window_baseline_is_the_oldest_read_inside_it() -> None:
    """One read a minute, a 300 s window: at 360 s the read at 0 has left (360 > 300),
    the read at 60 s is the baseline (300 <= 300). All slow ops came in the first
    minute, so the p99 says whether they are still in the window."""
    w = LatencyWindow(300)
    w.observe(0, hist(0, 0), 0.0)
    w.observe(60, hist(0, 600), 1.8)  # 600 slow ops in the first minute
    for t in range(120, 361, 60):
        w.observe(t, hist(600 * (t // 60 - 1), 600), 1.8)  # then 10 fast op/s
        assert len(w) == min(t // 60 + 1, 6)
    assert len(w) == 6  # 60 ... 360
    # Baseline 60 s: only the 3,000 fast ops are in the window.
    assert w.quantile(0.99) == pytest.approx(0.001 * 0.99)
    w2 = LatencyWindow(360)  # the same reads with a window reaching back to 0
    w2.observe(0, hist(0, 0), 0.0)
    w2.observe(60, hist(0, 600), 1.8)
    for t in range(120, 361, 60):
        w2.observe(t, hist(600 * (t // 60 - 1), 600), 1.8)
    assert len(w2) == 7
    assert w2.quantile(0.99) == pytest.approx(0.002 + 0.002 * (0.99 * 3600 - 3000) / 600)


def test_window_says_when_reads_are_too_sparse() -> None:
    """Reads further apart than the window leave no baseline: gap_s says how far, so the
    collector can say why the quantile is missing; it clears once reads come closer."""
    w = LatencyWindow(60)
    w.observe(0, hist(0, 0), 0.0)
    assert w.gap_s == 0.0
    w.observe(120, hist(600, 0), 0.3)
    assert (w.gap_s, len(w), w.quantile(0.99)) == (120.0, 1, None)
    w.observe(150, hist(900, 0), 0.45)
    assert w.gap_s == 0.0
    assert w.quantile(0.99) == pytest.approx(0.001 * 0.99)


def test_window_reset_drops_the_history() -> None:
    w = LatencyWindow(300)
    w.observe(0, hist(100, 0), 0.05)
    w.observe(60, hist(200, 0), 0.1)
    assert w.quantile(0.99) is not None
    w.observe(120, hist(30, 0), 0.01)  # the OSD restarted: counts fell
    assert len(w) == 1 and w.quantile(0.99) is None
    w.observe(180, hist(30, 120), 0.4)
    assert w.quantile(0.99) == pytest.approx(0.002 + 0.002 * 0.99)
    # Only the sum fell (the counts did not move): a reset too.
    w.observe(240, hist(30, 120), 0.2)
    assert len(w) == 1
    # New edges (another axis): the old reads no longer compare.
    w.observe(300, [(0.001, 1.0), (INF, 500.0)], 0.5)
    assert len(w) == 1


def test_window_memory_is_bounded_by_the_window_not_the_scrape_rate() -> None:
    """100,000 reads 1 ms apart (a client scraping back to back) into a 300 s window: at
    most WINDOW_SLOTS + 2 reads are kept, and as all of them are inside the window the
    first read stays the baseline, so the quantile and the increases are exactly those
    of the two ends."""
    w = LatencyWindow(300)
    first = last = hist(0, 0)
    for i in range(100_000):
        last = hist(3 * i, i // 50)  # 3 fast ops a read, a slow one every 50th
        w.observe(i * 0.001, last, 0.0005 * i)
        if i == 0:
            first = last
    assert len(w) <= WINDOW_SLOTS + 2 <= 32
    ends = [(e, b - a) for (e, a), (_, b) in zip(first, last, strict=True)]
    for q in (0.5, 0.99, 0.999):
        assert w.quantile(q) == histogram_quantile(q, ends)
    c = CounterWindow(300)
    for i in range(100_000):
        c.observe(i * 0.001, (0.0005 * i, 3 * i))
    assert len(c) <= WINDOW_SLOTS + 2
    assert c.increase() == (pytest.approx(99.999, abs=1e-9), (0.0005 * 99_999, 299_997.0))
    assert c.ratio(0, 1) == pytest.approx(0.0005 / 3)


def test_sliding_window_baseline_stays_within_a_slot() -> None:
    """Reads 0.25 s apart for 20 minutes, with a rate that changes every read (so the
    baseline's time shows in the increase): after every read the window keeps at most
    WINDOW_SLOTS + 2 reads, its baseline is a real read no more than one slot
    (window / WINDOW_SLOTS) younger than the oldest read inside the window, and its
    quantile and increase are exactly those between that read and the newest."""
    window = 300.0
    slot = window / WINDOW_SLOTS
    w, c = LatencyWindow(window), CounterWindow(window)
    reads: list[tuple[float, list[tuple[float, float]], float]] = []
    for i in range(4800):
        t = i * 0.25
        fast, slow = float(i * i), float(i // 7)  # the op rate grows with time
        reads.append((t, hist(fast, slow), fast * 0.0005))
        w.observe(t, hist(fast, slow), fast * 0.0005)
        c.observe(t, (fast * 0.0005, fast))
        assert len(w) <= WINDOW_SLOTS + 2 and len(c) <= WINDOW_SLOTS + 2
        if i == 0:
            continue
        elapsed, (sum_inc, count_inc) = c.increase() or (0.0, (0.0, 0.0))
        oldest = max(0.0, t - window)  # reads every 0.25 s: the oldest inside
        base_t = t - elapsed
        assert oldest <= base_t < oldest + slot, (t, base_t)
        base = reads[int(base_t / 0.25)]
        assert base[0] == base_t
        assert (sum_inc, count_inc) == (fast * 0.0005 - base[2], fast - base[1][0][1])
        if i % 97 == 0:  # the quantile is the slower check
            ends = [(e, n - b) for (e, n), (_, b) in zip(reads[-1][1], base[1], strict=True)]
            assert w.quantile(0.99) == histogram_quantile(0.99, ends)
    assert elapsed >= window - slot


def test_thinning_keeps_every_read_of_a_slow_scrape() -> None:
    """Prometheus every 15 s, slower than a 300 s window's slot (10 s), and a second
    client scraping 1,000 times back to back after each: every 15 s read is kept and
    the baseline is the oldest read inside the window, as without the second client;
    of each burst only its newest read was kept, until the next scrape replaced it."""
    w = CounterWindow(300)
    for t in range(0, 601, 15):
        w.observe(float(t), (float(t), float(t)))
        if t < 600:
            for i in range(1, 1001):
                w.observe(t + i * 0.001, (t + i * 0.001, float(t)))
            # The scrapes at most 300 s before the burst's end, and that end.
            assert len(w) == min(t // 15 + 2, 21)
    assert len(w) == 21  # 300, 315 ... 600
    assert w.increase() == (300.0, (300.0, 300.0))


# ----------------------------------------------------------------------------- counters


def test_counter_window_needs_two_reads_and_time() -> None:
    w = CounterWindow(300)
    assert (len(w), w.increase(), w.ratio(0, 1)) == (0, None, None)
    w.observe(0, (0.5, 100))
    assert (len(w), w.increase(), w.ratio(0, 1)) == (1, None, None)
    w.observe(0, (0.75, 200))  # a second read at the same time: no elapsed time
    assert (w.increase(), w.ratio(0, 1)) == (None, None)
    w.observe(60, (1.25, 700))
    # The baseline is the first read at 0: 600 events that took 0.75 s in 60 s.
    assert w.increase() == (60, (0.75, 600.0))
    assert w.ratio(0, 1) == 0.75 / 600
    assert w.ratio(1, 0, min_rate=0) == 600 / 0.75  # any two of the counters


def test_counter_window_minimum_rate() -> None:
    """Below ``min_rate`` events per second of the denominator there is no mean; exactly
    at it there is; a denominator that did not grow never divides (0/0)."""
    w = CounterWindow(300)
    w.observe(0, (0.0, 0, 7))
    w.observe(60, (0.59, 59, 7))
    assert w.ratio(0, 1) is None  # 59 events in 60 s
    assert w.ratio(0, 1, min_rate=0.5) == pytest.approx(0.01)
    w.observe(120, (1.2, 120, 7))
    assert w.ratio(0, 1) == pytest.approx(0.01)  # 120 in 120 s: 1 per second
    assert w.ratio(0, 1, min_rate=1.01) is None
    assert w.ratio(0, 2, min_rate=0) is None  # no events at all
    assert w.ratio(0, 2, min_rate=-1) is None


def test_counter_window_edge_is_the_latency_windows() -> None:
    """Reads one a minute, a 300 s window: a read exactly 300 s old is the baseline
    (now - t > window drops it, as LatencyWindow does), one 360 s old is gone. The
    first minute's events were slow, so the mean says whether they are still in."""
    w, hist_window = CounterWindow(300), LatencyWindow(300)
    w.observe(0, (0.0, 0))
    w.observe(60, (6.0, 600))  # 600 events of 10 ms
    for t in range(120, 301, 60):
        w.observe(t, (6.0 + 0.6 * (t // 60 - 1), 600 * (t // 60)))  # then 1 ms each
    assert len(w) == 6  # 0 ... 300
    assert w.ratio(0, 1) == pytest.approx((6.0 + 2.4) / 3000)
    w.observe(360, (9.0, 3600))
    assert len(w) == 6  # 60 ... 360
    assert w.increase() == (300, pytest.approx((3.0, 3000.0)))
    assert w.ratio(0, 1) == pytest.approx(0.001)
    # The same times through a LatencyWindow keep the same reads.
    for t in range(0, 361, 60):
        hist_window.observe(t, hist(t, 0), 0.0)
    assert len(hist_window) == len(w)


def test_counter_window_gap() -> None:
    """Reads further apart than the window: gap_s says how far, as LatencyWindow's."""
    w = CounterWindow(60)
    w.observe(0, (0.0, 0))
    assert w.gap_s == 0.0
    w.observe(120, (1.0, 1000))
    assert (w.gap_s, len(w), w.ratio(0, 1)) == (120.0, 1, None)
    w.observe(150, (2.0, 2000))
    assert w.gap_s == 0.0
    assert w.ratio(0, 1) == pytest.approx(0.001)
    w.observe(210, (2.5, 2600))  # exactly the window: no gap
    assert w.gap_s == 0.0 and len(w) == 2


def test_counter_window_resets() -> None:
    """Any counter below its last read (the OSD restarted) or another number of
    counters (a section came or went) drops every earlier read."""
    w = CounterWindow(300)
    w.observe(0, (1.0, 100, 50.0))
    w.observe(60, (2.0, 200, 51.0))
    assert w.ratio(0, 1) == pytest.approx(0.01)
    w.observe(120, (2.0, 200, 3.0))  # only the third fell
    assert len(w) == 1 and w.increase() is None
    w.observe(180, (2.6, 320, 4.0))
    assert w.ratio(0, 1) == pytest.approx(0.005)
    w.observe(240, (2.6, 320, 4.0))  # equal is no reset
    assert len(w) == 3
    w.observe(300, [2.7, 330])  # two counters now (any sequence)
    assert len(w) == 1 and w.ratio(0, 1) is None
    w.observe(360, [3.3, 990])
    assert w.increase() == (60, pytest.approx((0.6, 660.0)))


# ----------------------------------------------------------------------------- pool


def counts(p: PooledHistogram) -> list[float]:
    return [n for _, n in p.buckets()]


def test_pool_adds_increases_and_counts_a_reset_from_zero() -> None:
    p = PooledHistogram()
    assert p.buckets() == [] and p.sum() == 0.0
    p.update("a", hist(10, 0), 0.01, initial=True)
    p.update("b", hist(0, 5), 0.015, initial=True)
    # The exporter's first read is remembered, not added: the pool starts at 0.
    assert p.buckets() == list(zip(EDGES, (0.0, 0.0, 0.0, 0.0), strict=True))
    assert p.sum() == 0.0
    p.update("a", hist(30, 0), 0.03, initial=False)
    p.update("b", hist(0, 8), 0.024, initial=False)
    assert counts(p) == [20, 20, 23, 23]
    # b restarts and does 2 slow ops: +2, never a drop of 6.
    p.update("b", hist(0, 2), 0.006, initial=False)
    assert counts(p) == [20, 20, 25, 25]
    assert p.sum() == pytest.approx(0.02 + 0.009 + 0.006)
    # a restarts and does 40 ops before its next read, more than it had: no count went
    # down, the caller knows from its new pid. All 40 are new.
    p.update("a", hist(40, 0), 0.04, initial=False, restarted=True)
    assert counts(p) == [60, 60, 65, 65]
    assert p.sum() == pytest.approx(0.02 + 0.009 + 0.006 + 0.04)


def test_pool_missed_scrapes_new_and_forgotten_osds() -> None:
    p = PooledHistogram()
    p.update("a", hist(10, 0), 0.01, initial=True)
    p.update("b", hist(10, 0), 0.01, initial=True)
    # b misses two scrapes; a goes on.
    p.update("a", hist(20, 0), 0.02, initial=False)
    p.update("a", hist(30, 0), 0.03, initial=False)
    assert counts(p) == [20, 20, 20, 20]
    p.update("b", hist(25, 0), 0.025, initial=False)  # back: its 15 ops since count
    assert counts(p) == [35, 35, 35, 35]
    # c appears after the start with a lifetime of ops: only a baseline.
    p.update("c", hist(1000, 1000), 5.0, initial=False)
    assert counts(p) == [35, 35, 35, 35] and "c" in p
    p.update("c", hist(1000, 1001), 5.003, initial=False)
    assert counts(p) == [35, 35, 36, 36]
    # a's socket goes: its ops stay; back later, it is a new baseline.
    p.forget("a")
    assert "a" not in p and counts(p) == [35, 35, 36, 36]
    p.update("a", hist(500, 0), 0.5, initial=False)
    assert counts(p) == [35, 35, 36, 36]
    assert p.sum() == pytest.approx(0.02 + 0.015 + 0.003)


def counter_increase(values: list[float]) -> float:
    """What Prometheus' increase() adds up over a counter's samples (without its
    extrapolation): each rise, and after a drop (a counter reset) the new value whole
    (promql/functions.go, extrapolatedRate)."""
    return sum(v - u if v >= u else v for u, v in itertools.pairwise(values))


def test_pool_across_an_osd_restart_and_an_exporter_restart() -> None:
    """The pooled _count as Prometheus scrapes it while an OSD with a million ops behind
    it does 10 ops between scrapes, restarts, and then the exporter restarts. The pool
    never goes backwards within an exporter and starts at 0 with each, so a drop is
    only ever to 0 (a clean counter reset) and increase() is the ops done, never the
    OSD's lifetime: starting from the OSDs' counts, the second exporter started at the
    OSD's count since its restart, below the first's total, and increase() counted
    that whole count once more."""
    series: list[float] = []
    ops_seen = 0.0
    osd = 1_000_000.0

    def scrape(p: PooledHistogram, initial: bool = False, restarted: bool = False) -> None:
        p.update("a", hist(osd, 0), osd * 0.001, initial=initial, restarted=restarted)
        series.append(counts(p)[-1])

    first = PooledHistogram()
    scrape(first, initial=True)
    for _ in range(3):
        osd += 10
        ops_seen += 10
        scrape(first)
    osd = 10.0  # restarted (a new pid) and did 10 ops
    ops_seen += 10
    scrape(first, restarted=True)
    osd += 10
    ops_seen += 10
    scrape(first)
    second = PooledHistogram()  # the exporter restarts; the OSD is idle meanwhile
    scrape(second, initial=True)
    for _ in range(3):
        osd += 10
        ops_seen += 10
        scrape(second)
    assert series == [0, 10, 20, 30, 40, 50, 0, 10, 20, 30]
    assert all(v >= u or v == 0 for u, v in itertools.pairwise(series))
    assert counter_increase(series) == ops_seen == 80


def test_pool_skips_other_edges_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    p = PooledHistogram()
    p.update("a", hist(10, 0), 0.01, initial=True)
    other = [(0.001, 5.0), (INF, 5.0)]
    with caplog.at_level(logging.WARNING, logger="cephnode_exporter.ceph.latency"):
        p.update("x", other, 0.1, initial=True)
        p.update("x", [(0.001, 9.0), (INF, 9.0)], 0.2, initial=False)
        p.update("a", hist(20, 0), 0.02, initial=False)
    assert counts(p) == [10, 10, 10, 10]
    assert len([r for r in caplog.records if "edges differ" in r.getMessage()]) == 1


def test_pool_takes_the_edges_most_osds_have(caplog: pytest.LogCaptureFixture) -> None:
    """An OSD of another axis read first (another build, a hostile reply) does not keep
    every other OSD out for the exporter's life: once more OSDs have other edges, the
    pool starts anew on those (a reset, as rate() reads it) and the odd one is left out."""
    p = PooledHistogram()
    other = [(0.001, 5.0), (INF, 5.0)]
    p.update("x", other, 0.1, initial=True)
    p.update("a", hist(10, 0), 0.01, initial=True)
    assert [e for e, _ in p.buckets()] == [0.001, INF]  # one against one: the first stays
    with caplog.at_level(logging.WARNING, logger="cephnode_exporter.ceph.latency"):
        p.update("b", hist(0, 5), 0.015, initial=True)
    assert [e for e, _ in p.buckets()] == list(EDGES) and counts(p) == [0, 0, 0, 0]
    assert any("edges most OSDs have" in r.getMessage() for r in caplog.records)
    for fast, slow in ((20, 5), (30, 7)):  # a's first read since the switch is its baseline
        p.update("x", [(0.001, 50.0), (INF, 50.0)], 0.5, initial=False)
        p.update("a", hist(fast, 0), 0.01 * fast, initial=False)
        p.update("b", hist(0, slow), 0.003 * slow, initial=False)
    assert counts(p) == [10, 10, 12, 12]
    # x gone, a and b stay: nothing changes back.
    p.forget("x")
    p.update("a", hist(40, 0), 0.4, initial=False)
    assert counts(p) == [20, 20, 22, 22]


# ----------------------------------------------------------------------------- PromQL

# Shapes of increases per minute, over 5 minutes of one sample a minute, checked against
# Prometheus' histogram_quantile(q, rate(x_bucket[5m])). The last uses the OSD axis
# (100 us x 2^k); "torn" has a bucket below the one before.
SHAPES: dict[str, tuple[list[float], list[float]]] = {
    "middle": ([0.001, 0.002, 0.004, INF], [30, 400, 995, 1000]),
    "first": ([0.0001, 0.0002, INF], [100, 100, 100]),
    "inf": ([0.1, 0.2, INF], [10, 20, 21]),
    "torn": ([0.1, 0.2, 0.4, INF], [50, 45, 99, 100]),
    "osd": (
        [0.0001 * 2**k for k in range(17)] + [INF],
        [0, 0, 0, 0, 0, 35, 170, 890, 1480, 1700, 1760, 1771, 1772, 1772, 1772, 1772, 1773, 1775],
    ),
}
QUANTILES = (0.5, 0.9, 0.99)
RANGE_S = 300


def _le(edge: float) -> str:
    return "+Inf" if edge == INF else repr(edge)


def test_quantile_agrees_with_promql(tmp_path: Path) -> None:
    """promtool (Prometheus 2.42) evaluates histogram_quantile(q, rate(x_bucket[5m]))
    over series that grow by the shapes' increases; the expected values are this
    module's on the same increases. Prometheus 2.42's promtool compares sample values
    exactly, so the increases go in as PromQL turns them into rates: with samples at both
    ends of the range there is no extrapolation, and rate() multiplies the increase by
    1/300 (its factor). The raw increases give the same quantile to 1e-12."""
    promtool = need_tool("promtool", "prometheus")
    series = []
    for shape, (edges, incs) in SHAPES.items():
        for edge, inc in zip(edges, incs, strict=True):
            start = 3 * inc + 7  # any start: rate() sees the increase
            series.append(
                {
                    "series": f'x_bucket{{shape="{shape}",le="{_le(edge)}"}}',
                    "values": f"{start:g}+{inc:g}x5",
                }
            )
    tests = []
    for q in QUANTILES:
        samples = []
        for shape, (edges, incs) in SHAPES.items():
            increases = [5 * n for n in incs]
            rates = [(e, n * (1 / RANGE_S)) for e, n in zip(edges, increases, strict=True)]
            got = histogram_quantile(q, rates)
            raw = histogram_quantile(q, list(zip(edges, increases, strict=True)))
            assert got is not None and raw == pytest.approx(got, rel=1e-12), shape
            samples.append({"labels": f'{{shape="{shape}"}}', "value": got})
        tests.append(
            {
                "expr": f"histogram_quantile({q}, rate(x_bucket[5m]))",
                "eval_time": "5m",
                "exp_samples": samples,
            }
        )
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
    }
    promtool_test(promtool, doc, tmp_path / "quantile.yml")


# Time averages (sum increase in seconds, count increase) per minute, one sample a minute
# for 5 minutes, checked against rate(x_sum[5m]) / rate(x_count[5m]). Binary fractions,
# so promtool's series expansion and the reads here are the same numbers exactly.
MEANS: dict[str, tuple[float, float]] = {
    "commit": (0.0625, 600),  # 10 events/s of 0.1 ms
    "rocksdb": (0.75, 61),  # just above 1 event/s
    "cpu": (1.5, 4500),  # CPU seconds per op
}


def test_ratio_agrees_with_promql(tmp_path: Path) -> None:
    """promtool evaluates rate(x_sum[5m]) / rate(x_count[5m]) over counters that grow by
    MEANS every minute; CounterWindow(300) gets the same six reads (0 to 300 s) and must
    answer what PromQL does. As in test_quantile_agrees_with_promql, the expected values
    go in as PromQL computes them (each increase times 1/300, then divided), since
    promtool compares exactly; the window's own ratio of the raw increases agrees to
    1e-12."""
    promtool = need_tool("promtool", "prometheus")
    series = []
    samples = []
    for case, (sum_inc, count_inc) in MEANS.items():
        sum_start, count_start = 2.5, 1000.0  # any start: rate() sees the increase
        for suffix, start, inc in (("sum", sum_start, sum_inc), ("count", count_start, count_inc)):
            series.append(
                {"series": f'x_{suffix}{{case="{case}"}}', "values": f"{start:g}+{inc:g}x5"}
            )
        promql = (5 * sum_inc * (1 / RANGE_S)) / (5 * count_inc * (1 / RANGE_S))
        samples.append({"labels": f'{{case="{case}"}}', "value": promql})
        w = CounterWindow(RANGE_S)
        for minute in range(6):
            w.observe(
                60.0 * minute, (sum_start + minute * sum_inc, count_start + minute * count_inc)
            )
        assert len(w) == 6, case  # the read 300 s old is inside, as in PromQL's range
        assert w.ratio(0, 1) == pytest.approx(promql, rel=1e-12), case
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": "rate(x_sum[5m]) / rate(x_count[5m])",
                        "eval_time": "5m",
                        "exp_samples": samples,
                    }
                ],
            }
        ],
    }
    promtool_test(promtool, doc, tmp_path / "ratio.yml")
