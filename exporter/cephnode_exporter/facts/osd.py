"""Facts of the ``osd`` collector, judged by checks/osd.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from cephnode_exporter.ceph import kvstats, perf
from cephnode_exporter.ceph.discovery import LIMIT, Dropped, OSDSocket
from cephnode_exporter.ceph.network import NetworkPings
from cephnode_exporter.hostfs import ReadErrors
from cephnode_exporter.hostfs.blockdev import OSDBlock
from cephnode_exporter.hostfs.dmcrypt import Encryption
from cephnode_exporter.hostfs.process import ProcessSample

# Seconds of reads behind each OSD's exported p99: 300 s is the rate(...[5m]) the
# rules used. The flag's minimum, 60 s, holds two reads of a 1 min scrape interval only
# while they are at most 60.0 s apart (a read exactly the window old is kept).
DEFAULT_LATENCY_WINDOW = 300.0


@dataclass
class OSDFacts:
    """One OSD in one scrape: what it answered, or why it did not."""

    socket: OSDSocket
    seconds: float
    error: str | None = None
    reason: str | None = None
    histograms: dict[str, perf.LatencyHistogram] = field(default_factory=dict)
    counters: perf.PerfCounters | None = None
    ops: perf.OpsInFlight | None = None
    config: perf.OSDConfig | None = None
    version: str | None = None
    kv: kvstats.KVStats | None = None  # None: the OSD keeps no RocksDB statistics
    # The OSD's own words when it declined dump_objectstore_kv_stats (Tentacle with
    # rocksdb_perf off since config show was read); logged once per change.
    kv_note: str | None = None
    network: NetworkPings | None = None  # heartbeat ping times (dump_osd_network)
    # Host facts; None with the reason in *_note (a fact: no pid visible, no block
    # device) or *_error (a read error, counted).
    pid: int | None = None
    process: ProcessSample | None = None
    process_note: str | None = None
    process_error: str | None = None
    allowed_cpus: dict[int, int] | None = None  # NUMA node -> CPUs the OSD may run on
    block: OSDBlock | None = None
    block_note: str | None = None
    block_error: str | None = None
    media: str = "unknown"  # the data disk's kind (hostfs/blockdev.py block_media)
    encryption: Encryption | None = None  # dm-crypt under the block (hostfs/dmcrypt.py)
    # op -> its LATENCY_QUANTILE over the window; only ops with enough ops per second.
    latency_quantiles: dict[str, float] = field(default_factory=dict)
    # MEAN_AVGS key -> its mean over the window; only those with enough events per second.
    latency_means: dict[str, float] = field(default_factory=dict)
    # CPU seconds of the process per osd.op over the window; None below MEAN_MIN_RATE
    # ops per second, before the second read or when the process was not read.
    cpu_per_op: float | None = None

    @property
    def ceph_daemon(self) -> str:
        return self.socket.ceph_daemon

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class PooledLatency:
    """One pooled histogram at a scrape: cumulative (edge, count) buckets, the sum, and
    its HOST_LATENCY_QUANTILES over the window (only those with enough ops)."""

    buckets: list[tuple[float, float]]
    sum: float
    quantiles: dict[float, float] = field(default_factory=dict)


# (op, media) -> the node's OSDs pooled.
HostHistograms = dict[tuple[str, str], PooledLatency]


@dataclass
class OSDCollectorFacts:
    socket_dir: str
    osds: list[OSDFacts]
    errors: ReadErrors
    # NUMA node -> its CPUs; None when the kernel has no NUMA (or it was unreadable).
    numa_nodes: dict[int, frozenset[int]] | None = None
    # (op, media) -> the node's OSDs pooled: cumulative (edge, count) buckets and sum.
    host_histograms: HostHistograms = field(default_factory=dict)
    latency_window: float = DEFAULT_LATENCY_WINDOW
    # The node's OSDs' CPU seconds per op over the window; None below MEAN_MIN_RATE ops
    # per second summed over them.
    host_cpu_per_op: float | None = None
    # Sockets found but not reported (discovery.choose_sockets, --collector.osd.max-sockets).
    dropped: list[Dropped] = field(default_factory=list)

    @property
    def items_dropped(self) -> int:
        """Sockets beyond --collector.osd.max-sockets (cephnode_scrape_collector_items_dropped)."""
        return sum(1 for d in self.dropped if d.reason == LIMIT)
