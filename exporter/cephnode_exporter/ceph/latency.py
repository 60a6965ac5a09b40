"""Latency from cumulative histograms, computed where they are read: the exporter.

Prometheus spends most of its rule evaluation at 630 OSDs reading the 36,000 per-OSD
op-latency bucket series, once for a per-OSD p99 and once for a per-host pooled histogram.
Each node's exporter reads the same histograms every scrape, so it can do both for its
own OSDs at a fraction of the cost (docs/performance.md):

- :func:`histogram_quantile` is PromQL's ``histogram_quantile`` on classic buckets, as
  Prometheus 2.42 computes it (promql/quantile.go, ``bucketQuantile``), so a value the
  exporter exports and one a rule computes from the same increases agree.
- :class:`LatencyWindow` keeps one OSD's reads of one op type for a sliding window and
  answers the quantile of the ops between its oldest and newest read: what
  ``histogram_quantile(q, rate(x_bucket[window]))`` sees when the samples are the reads.
- :class:`PooledHistogram` adds up the increases of several OSDs into one counter that
  never goes backwards, so ``rate()`` on it is right across restarts and missed scrapes.
- :class:`CounterWindow` keeps several plain counters of one OSD read together (a time
  average's sum and count, CPU seconds and ops) over the same kind of window and answers
  the ratio of two increases: what ``rate(a[window]) / rate(b[window])`` gives, so a
  rule reads one mean per OSD instead of two raw counters. LatencyWindow keeps its
  buckets and sum in one.

The windows keep at most one read per ``window_s / WINDOW_SLOTS`` seconds besides the
newest, so their memory is bounded by the window, not by how often the exporter is
scraped: a client scraping back to back no longer grows the exporter without limit.

Pure: no I/O, no clock (callers pass the time), no Prometheus code. The alert tests'
fleet generator imports this module, so its API stays as it is.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence

from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

Buckets = Sequence[tuple[float, float]]

# Reads a window keeps per window length: one per window_s / WINDOW_SLOTS seconds, plus
# the newest. 30 slots put the baseline at most 10 s inside a 300 s window (3 %) and keep
# every read of a 10 s or slower scrape interval; at most 32 reads per window, about
# 25 KB for an OSD histogram's 18 buckets and sum (measured), whatever the scrape rate.
WINDOW_SLOTS = 30


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """The ``q`` quantile of cumulative ``(upper edge, count)`` buckets, last edge +Inf.

    Follows Prometheus 2.42's bucketQuantile step by step: buckets sorted by edge, equal
    edges merged, counts made monotonic (each at least the one before: an envelope), the
    rank ``q * total`` found in the first bucket whose count reaches it, and the value
    interpolated linearly inside that bucket, the first bucket starting at 0. A rank in
    the +Inf bucket answers the highest finite edge. None where PromQL answers NaN: no
    +Inf bucket, fewer than two buckets, a total of 0, ``q`` NaN. ``q`` below 0 is -inf,
    above 1 +inf, as in PromQL.
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if not buckets:
        return None
    ordered = sorted(buckets, key=lambda b: b[0])
    if ordered[-1][0] != math.inf:
        return None
    edges: list[float] = []
    counts: list[float] = []
    for edge, count in ordered:
        if edges and edges[-1] == edge:
            counts[-1] += count
        else:
            edges.append(edge)
            counts.append(float(count))
    # The envelope: a later bucket never counts fewer than an earlier one.
    top = counts[0]
    for i in range(1, len(counts)):
        if counts[i] > top:
            top = counts[i]
        elif counts[i] < top:
            counts[i] = top
    if len(counts) < 2:
        return None
    total = counts[-1]
    if total == 0:
        return None
    rank = q * total
    # First bucket below +Inf whose count reaches the rank (Go's sort.Search over the
    # monotonic counts); the +Inf bucket when none does.
    b = next((i for i in range(len(counts) - 1) if counts[i] >= rank), len(counts) - 1)
    if b == len(counts) - 1:
        return edges[-2]
    if b == 0 and edges[0] <= 0:
        return edges[0]
    start, end, count = 0.0, edges[b], counts[b]
    if b > 0:
        start = edges[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:
        return None  # rank 0 in an empty first bucket: 0/0, NaN in PromQL
    return start + (end - start) * (rank / count)


def _reset(counts: Sequence[float], sum_s: float, old: Sequence[float], old_sum: float) -> bool:
    """A counter reset: any bucket (the total included) or the sum below its last read."""
    return sum_s < old_sum or any(c < o for c, o in zip(counts, old, strict=True))


class CounterWindow:
    """Several cumulative counters of one OSD, read together, over a sliding window.

    Like :class:`LatencyWindow` without buckets: the reads of the last ``window_s``
    seconds, the oldest kept inside the window being the baseline of every increase. The
    counters are one tuple per read, so one deque entry serves them all (the collector
    keeps the commit and RocksDB sums and counts of an OSD in one window).

    Reads closer together than ``window_s / WINDOW_SLOTS`` are thinned: each kept read
    but the newest is at least that far from the one before it, so at most
    WINDOW_SLOTS + 2 are kept however often the OSD is read. An increase only needs its
    two ends, and the thinning keeps the first read of each slot: the baseline is the
    oldest read inside the window, or one at most a slot younger once the window slides.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = float(window_s)
        # Minimum seconds between two kept reads other than the newest.
        self.spacing_s = self.window_s / WINDOW_SLOTS
        # (time, cumulative values), oldest first.
        self._reads: deque[tuple[float, tuple[float, ...]]] = deque()
        # As LatencyWindow: seconds since the previous read when older than the window.
        self.gap_s = 0.0

    def __len__(self) -> int:
        return len(self._reads)

    def observe(self, now: float, values: Sequence[float]) -> None:
        """Record one read. Any value below its previous read (a counter reset), or a
        different number of values, drops every earlier read. Reads older than the window
        (now - t > window_s) are dropped, exactly as LatencyWindow does. The previous
        newest read gives way to this one when it is less than ``spacing_s`` after the
        read before it: it was kept only as the newest."""
        current = values if isinstance(values, tuple) else tuple(values)
        reads = self._reads
        previous = None
        if reads:
            previous, last = reads[-1]
            if len(last) != len(current) or any(v < o for v, o in zip(current, last, strict=True)):
                reads.clear()
            elif len(reads) >= 2 and previous - reads[-2][0] < self.spacing_s:
                reads.pop()
        reads.append((now, current))
        while now - reads[0][0] > self.window_s:
            reads.popleft()
        gap = 0.0 if previous is None else now - previous
        self.gap_s = gap if gap > self.window_s else 0.0

    def _ends(self) -> tuple[float, Sequence[float], Sequence[float]] | None:
        """(elapsed seconds, oldest read, newest read) in the window; None with fewer than
        2 reads or no time between them."""
        if len(self._reads) < 2:
            return None
        t0, base = self._reads[0]
        t1, last = self._reads[-1]
        elapsed = t1 - t0
        return None if elapsed <= 0 else (elapsed, base, last)

    def increase(self) -> tuple[float, tuple[float, ...]] | None:
        """(elapsed seconds, per-counter increase) between the oldest read in the window
        and the newest; None with fewer than 2 reads or elapsed <= 0."""
        ends = self._ends()
        if ends is None:
            return None
        elapsed, base, last = ends
        return elapsed, tuple(float(v - b) for v, b in zip(last, base, strict=True))

    def ratio(self, num: int, den: int, min_rate: float = 1.0) -> float | None:
        """increase[num] / increase[den]; None when increase() is None or
        increase[den] / elapsed < min_rate (too few events for a mean).

        Also None when the denominator did not grow (0/0, NaN in PromQL), which only a
        ``min_rate`` of 0 or less lets through. Reads the two ends directly: called for
        every OSD every scrape, it builds no tuple of increases.
        """
        ends = self._ends()
        if ends is None:
            return None
        elapsed, base, last = ends
        events = last[den] - base[den]
        if events <= 0 or events / elapsed < min_rate:
            return None
        return float(last[num] - base[num]) / events


class LatencyWindow:
    """One OSD's cumulative histogram of one op type, read after read, over a window.

    The quantile is of the ops between the oldest read still inside the window (the
    baseline) and the newest: with one read a minute and a 300 s window that is the
    samples a PromQL ``rate(x[5m])`` works on. The buckets and the sum are the counters
    of a :class:`CounterWindow`, so a counter reset (the OSD restarted, its counts went
    down) drops every earlier read; so do bucket edges that change. Reads are thinned
    as the CounterWindow's are, so the baseline of reads taken more often than
    ``window_s / WINDOW_SLOTS`` is at most that much younger than the oldest read.
    """

    def __init__(self, window_s: float) -> None:
        self._edges: tuple[float, ...] = ()
        # One read: the cumulative bucket counts, then the sum.
        self._counters = CounterWindow(window_s)

    @property
    def window_s(self) -> float:
        return self._counters.window_s

    @property
    def gap_s(self) -> float:
        """Seconds since the previous read when it was older than the window (so the
        quantile has no baseline), else 0: reads too sparse for the window."""
        return self._counters.gap_s

    def __len__(self) -> int:
        return len(self._counters)

    def observe(self, now: float, buckets: Buckets, sum_s: float) -> None:
        """Record one read taken at ``now`` (seconds, any monotonic clock)."""
        edges = tuple(float(e) for e, _ in buckets)
        if edges != self._edges:
            self._counters = CounterWindow(self._counters.window_s)
            self._edges = edges
        self._counters.observe(now, (*(float(c) for _, c in buckets), float(sum_s)))

    def quantile(self, q: float, min_rate: float = 1.0) -> float | None:
        """The ``q`` quantile of the ops between the baseline and the newest read.

        None with a single read, no time between the two, or fewer than ``min_rate`` ops
        per second in between (a p99 of a handful of ops says nothing).
        """
        increase = self._counters.increase()
        if increase is None:
            return None
        elapsed, values = increase
        counts = values[:-1]
        if counts[-1] / elapsed < min_rate:
            return None
        return histogram_quantile(q, list(zip(self._edges, counts, strict=True)))


class PooledHistogram:
    """Several OSDs' cumulative histograms (one op type, one media) pooled into one.

    The pool starts at 0 with the exporter: its first read of every OSD (``initial``)
    is only remembered. Then each read adds the OSD's increase since its previous read;
    a counter reset, or a restart the caller saw (``restarted``: a new pid, whose counts
    may already be above the old ones), counts from 0, as ``rate()`` does. An OSD seen
    for the first time later is only a baseline too, so an OSD created, or back after a
    long outage, does not add its lifetime's ops in one scrape. A forgotten OSD's past
    ops stay. The pool only grows, so ``rate()`` of it is the sum of the OSDs' rates, and
    an exporter restart is a reset to 0, which ``rate()`` reads right. Had the pool
    started from the OSDs' lifetime counts, an exporter restart after an OSD restart
    would drop it to a smaller total, read by ``rate()`` as a reset followed by that
    whole total in one scrape (millions of ops per second).
    """

    def __init__(self) -> None:
        self._edges: tuple[float, ...] = ()
        self._counts: list[float] = []
        self._sum = 0.0
        self._last: dict[str, tuple[tuple[float, ...], float]] = {}
        self._warned: set[str] = set()
        # The OSDs read with each set of edges: the pool takes the edges most OSDs
        # have, so one OSD of another axis (another build, a hostile reply) read first
        # cannot keep every other OSD out.
        self._holders: dict[tuple[float, ...], set[str]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._last

    def update(
        self, key: str, buckets: Buckets, sum_s: float, initial: bool, restarted: bool = False
    ) -> None:
        """Fold in one read of the OSD ``key`` (its admin socket path); ``initial``: the
        exporter's first read (remember, add nothing); ``restarted``: the OSD restarted
        since its previous read (add its whole counts)."""
        edges = tuple(float(e) for e, _ in buckets)
        counts = tuple(float(c) for _, c in buckets)
        self._hold(key, edges)
        if not self._edges:
            self._edges = edges
            self._counts = [0.0] * len(edges)
        elif edges != self._edges and len(self._holders[edges]) > len(
            self._holders.get(self._edges, ())
        ):
            # More OSDs now have these edges than the pool's: start the pool anew on
            # them, a reset that rate() reads as one. The others count from their next
            # read, as a new OSD does.
            log.warning(
                "pooled OSD histogram takes the edges most OSDs have",
                extra=kv(key=key, edges=len(edges), osds=len(self._holders[edges])),
            )
            self._edges = edges
            self._counts = [0.0] * len(edges)
            self._sum = 0.0
            self._last = {}
            self._warned = set()
        if edges != self._edges:
            # Ceph's axis is fixed (docs/metrics.md), so this is a different build or a
            # parser change: skip the OSD rather than mix incompatible buckets.
            if key not in self._warned:
                self._warned.add(key)
                log.warning(
                    "OSD histogram edges differ from the pool's: not pooled",
                    extra=kv(key=key, edges=len(edges), pool_edges=len(self._edges)),
                )
            return
        previous = self._last.get(key)
        self._last[key] = (counts, float(sum_s))
        if initial:
            return
        if restarted or (previous is not None and _reset(counts, sum_s, *previous)):
            add, add_sum = counts, float(sum_s)
        elif previous is None:
            return  # an OSD new since the start: a baseline
        else:
            old, old_sum = previous
            add = tuple(c - o for c, o in zip(counts, old, strict=True))
            add_sum = float(sum_s) - old_sum
        for i, n in enumerate(add):
            self._counts[i] += n
        self._sum += add_sum

    def forget(self, key: str) -> None:
        """The OSD is gone (its socket vanished): its ops so far stay in the pool."""
        self._last.pop(key, None)
        self._warned.discard(key)
        self._hold(key, None)

    def _hold(self, key: str, edges: tuple[float, ...] | None) -> None:
        """Note that ``key`` was last read with ``edges`` (None: gone)."""
        for other, keys in list(self._holders.items()):
            if other != edges and key in keys:
                keys.discard(key)
                if not keys:
                    del self._holders[other]
        if edges is not None:
            self._holders.setdefault(edges, set()).add(key)

    def buckets(self) -> list[tuple[float, float]]:
        """The pooled cumulative ``(edge, count)`` buckets; empty before any read."""
        return list(zip(self._edges, self._counts, strict=True))

    def sum(self) -> float:
        """The pooled sum of latencies, seconds."""
        return self._sum
