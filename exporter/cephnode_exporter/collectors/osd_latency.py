"""The ``osd`` collector's latency state: windows and pools that outlive a scrape.

Part of the ``osd`` collector (collectors/osd.py). Latency is computed in the exporter
rather than in Prometheus (ceph/latency.py): each OSD's p99 over a sliding window of its
own reads, one histogram per op type and media pooling the node's OSDs, and the means
the rules took as ``rate(x_sum) / rate(x_count)`` of two raw counters per OSD
(BlueStore commit, RocksDB stages, CPU per op). At 630 OSDs the rules that computed them
from the 36,000 bucket series dominated Prometheus' evaluation (docs/performance.md);
the exporter has the histograms in hand every scrape. Scrapes may overlap, so the state
is changed under one lock, which is never held across socket I/O (the collector feeds
it facts already read).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from cephnode_exporter.ceph import perf
from cephnode_exporter.ceph.latency import CounterWindow, LatencyWindow, PooledHistogram
from cephnode_exporter.facts.osd import HostHistograms, OSDFacts, PooledLatency
from cephnode_exporter.logs import kv

# The collector's logger: its records keep the name they had before the split.
log = logging.getLogger("cephnode_exporter.collectors.osd")

# The quantile exported per OSD, and the op rate below which it is left out: a p99 of
# fewer than 60 ops a minute is one slow op's latency, not a distribution's tail.
LATENCY_QUANTILE = 0.99
LATENCY_MIN_RATE = 1.0
# ... and per op type and media over the node's pooled OSDs: the median too, for the
# host's typical op, as no per-OSD p50 is exported (series budget).
HOST_LATENCY_QUANTILES = (0.5, 0.99)
# The perf dump time averages whose mean over the latency window is exported, in the
# order of one OSD's CounterWindow (a sum and a count each): the BlueStore commit, then
# the RocksDB stages (stage label, the metric's). Below MEAN_MIN_RATE events per second
# in the window a mean is left out, as the p99 is.
COMMIT_AVG = "bluestore.commit_lat"
ROCKSDB_STAGE_AVGS: tuple[tuple[str, str], ...] = (
    ("get", "rocksdb.get_latency"),
    ("submit", "rocksdb.submit_latency"),
    ("submit_sync", "rocksdb.submit_sync_latency"),
)
MEAN_AVGS: tuple[str, ...] = (COMMIT_AVG, *(key for _, key in ROCKSDB_STAGE_AVGS))
MEAN_MIN_RATE = 1.0
# The counter behind cephnode_osd_ops_total, the denominator of the CPU per op.
OPS_COUNTER = "osd.op"


@dataclass
class _LatencyState:
    """One OSD's latency state between scrapes: its pid (a new one is a restart), the
    media pool it feeds, a window per op type, one for the sums and counts of the
    MEAN_AVGS it has (``mean_mask``: bit i for MEAN_AVGS[i]; pairs in that order) and
    one for its process's CPU seconds and its ops."""

    pid: int | None
    media: str
    windows: dict[str, LatencyWindow] = field(default_factory=dict)
    means: CounterWindow | None = None
    mean_mask: int = 0
    cpu: CounterWindow | None = None

    def restart(self) -> None:
        """The OSD restarted: every window starts over."""
        self.windows.clear()
        self.means = self.cpu = None
        self.mean_mask = 0


class OSDLatency:
    """Every OSD's latency windows and the node's pools, fed once per scrape.

    ``window`` is the seconds each quantile and mean covers
    (``--collector.osd.latency-window``).
    """

    def __init__(self, window: float) -> None:
        self._latency_window = window
        # Windows and pools outlive a scrape; scrapes may overlap, so they are changed
        # under this lock, which is never held across socket I/O.
        self._latency_lock = threading.Lock()
        self._latency: dict[str, _LatencyState] = {}
        self._pools: dict[tuple[str, str], PooledHistogram] = {}
        self._pool_windows: dict[tuple[str, str], LatencyWindow] = {}
        self._latency_started = False
        self._sparse_logged = False

    def update(self, osds: list[OSDFacts], now: float) -> tuple[HostHistograms, float | None]:
        """Feed this scrape's histograms and counters to the windows and the pools (under
        the lock); sets each OSD's quantiles and means, and returns the pooled histograms
        and the node's CPU seconds per op."""
        # The node's OSDs' CPU and op increases over their windows, and their op rates.
        host_cpu = host_ops = host_rate = 0.0
        with self._latency_lock:
            # The exporter's first read: every OSD's is a baseline, so the pools start at
            # 0 with the exporter (ceph/latency.py PooledHistogram says why). Later, a new
            # OSD's first read is a baseline too.
            initial = not self._latency_started
            self._latency_started = True
            for o in osds:
                if not o.ok or o.counters is None:
                    continue
                path = o.socket.path
                state = self._latency.get(path)
                restarted = False
                if state is None:
                    state = self._latency[path] = _LatencyState(o.pid, o.media)
                else:
                    if o.pid is not None and state.pid is not None and o.pid != state.pid:
                        # Restarted: its counters start over (even if a long gap hid the
                        # drop), so the windows do, and the pool counts it from 0.
                        state.restart()
                        self._forget_pooled(path)
                        restarted = True
                    if o.pid is not None:
                        state.pid = o.pid
                    if o.media != state.media:
                        # Moved to another pool: a baseline there (counted from 0 after a
                        # restart), its past stays in the old one.
                        self._forget_pooled(path)
                        state.media = o.media
                for op, h in o.histograms.items():
                    avg = o.counters.avgs.get(f"osd.{perf.OP_LATENCY_AVGS[op]}")
                    if avg is None:
                        continue  # exported without it neither (build_metrics)
                    window = state.windows.get(op)
                    if window is None:
                        window = state.windows[op] = LatencyWindow(self._latency_window)
                    window.observe(now, h.buckets, avg.sum)
                    if window.gap_s and not self._sparse_logged:
                        # Else the quantiles vanish with no word: say it once.
                        self._sparse_logged = True
                        log.warning(
                            "OSD histogram reads are further apart than the latency "
                            "window: no latency quantiles until they come closer (scrape "
                            "more often or raise --collector.osd.latency-window)",
                            extra=kv(gap_s=round(window.gap_s, 1), window_s=window.window_s),
                        )
                    q = window.quantile(LATENCY_QUANTILE, LATENCY_MIN_RATE)
                    if q is not None:
                        o.latency_quantiles[op] = q
                    pool = self._pools.get((op, state.media))
                    if pool is None:
                        pool = self._pools[(op, state.media)] = PooledHistogram()
                    pool.update(path, h.buckets, avg.sum, initial=initial, restarted=restarted)
                self._update_means(o, state, now)
                increase = self._update_cpu(o, state, now)
                if increase is not None:
                    elapsed, (cpu, ops) = increase
                    host_cpu += cpu
                    host_ops += ops
                    host_rate += ops / elapsed
            # Each pool is a counter of its own: its window sees every scrape, even one
            # where none of its OSDs answered (no ops added).
            for key, pool in self._pools.items():
                buckets = pool.buckets()
                if buckets:
                    window = self._pool_windows.get(key)
                    if window is None:
                        window = self._pool_windows[key] = LatencyWindow(self._latency_window)
                    window.observe(now, buckets, pool.sum())
            host_cpu_per_op = None
            if host_ops > 0 and host_rate >= MEAN_MIN_RATE:
                host_cpu_per_op = host_cpu / host_ops
            return self._pooled(), host_cpu_per_op

    def _update_means(self, o: OSDFacts, state: _LatencyState, now: float) -> None:
        """Feed the OSD's MEAN_AVGS to its window (the caller holds the lock) and set the
        means with enough events; an OSD without them (memstore) has no window."""
        assert o.counters is not None
        avgs = o.counters.avgs
        present = 0  # bit i: MEAN_AVGS[i] is in this perf dump
        values: list[float] = []
        for i, key in enumerate(MEAN_AVGS):
            avg = avgs.get(key)
            if avg is not None:
                present |= 1 << i
                values += (avg.sum, avg.count)
        if not present:
            state.means, state.mean_mask = None, 0
            return
        window = state.means
        if window is None or present != state.mean_mask:
            # Another set of counters (a different build): the old reads do not compare.
            window = state.means = CounterWindow(self._latency_window)
            state.mean_mask = present
        window.observe(now, values)
        j = 0  # the counter pair of MEAN_AVGS[i] in the window
        for i, key in enumerate(MEAN_AVGS):
            if present & 1 << i:
                mean = window.ratio(2 * j, 2 * j + 1, MEAN_MIN_RATE)
                if mean is not None:
                    o.latency_means[key] = mean
                j += 1

    def _update_cpu(
        self, o: OSDFacts, state: _LatencyState, now: float
    ) -> tuple[float, tuple[float, ...]] | None:
        """Feed the process's CPU seconds and the OSD's ops to its window (the caller
        holds the lock), set its CPU per op, and return the window's increase; None when
        the process or the op counter was not read in this scrape, or the window has no
        increase yet."""
        assert o.counters is not None
        ops = o.counters.integers.get(OPS_COUNTER)
        if o.process is None or ops is None:
            return None
        window = state.cpu
        if window is None:
            window = state.cpu = CounterWindow(self._latency_window)
        window.observe(now, (o.process.cpu_user_seconds + o.process.cpu_system_seconds, ops))
        o.cpu_per_op = window.ratio(0, 1, MEAN_MIN_RATE)
        return window.increase()

    def _forget_pooled(self, path: str) -> None:
        for pool in self._pools.values():
            pool.forget(path)

    def _pooled(self) -> HostHistograms:
        """A copy of every pool that has buckets (the caller holds the lock)."""
        out: HostHistograms = {}
        for key, pool in sorted(self._pools.items()):
            buckets = pool.buckets()
            if not buckets:
                continue
            quantiles = {}
            window = self._pool_windows.get(key)
            for q in HOST_LATENCY_QUANTILES:
                value = None if window is None else window.quantile(q, LATENCY_MIN_RATE)
                if value is not None:
                    quantiles[q] = value
            out[key] = PooledLatency(buckets, pool.sum(), quantiles)
        return out

    def pooled(self) -> HostHistograms:
        """A copy of every pool that has buckets (takes the lock)."""
        with self._latency_lock:
            return self._pooled()

    def forget(self, present: set[str]) -> None:
        """Drop the state of every OSD whose socket is not in ``present``."""
        with self._latency_lock:
            for path in set(self._latency) - present:
                del self._latency[path]
                self._forget_pooled(path)  # its socket is gone; its past ops stay pooled
