"""Where each ``perf dump`` counter the ``osd`` collector reads lives, per Ceph release.

Why a table: Ceph renames and drops perf counters between releases (Reef renamed
BlueStore's ``commit_lat`` to ``txc_commit_lat`` and ``throttle_lat`` to
``txc_throttle_lat`` and dropped RocksDB's ``compact_range``), and an exporter that reads
one fixed name loses those series on the newer release without a word. Every counter is
known here by a stable key (its ``section.counter`` name in Pacific, the release the
exporter was first written against) that the collectors and the metric names use; this
table maps the key to the name the daemon's release gives it, or to None when that
release has no such counter. A rename is a new entry in ``names``, not a code path.

The table is also what "expected" means for the missing-counter report: a counter whose
name for the daemon's release is not None, for the daemon's object store, must be in its
``perf dump`` (which lists exactly the counters of its ``perf schema``: both walk the
daemon's PerfCountersCollection, ceph/ceph src/common/perf_counters_collection.cc).

Sources, by release (``BlueStore::_init_logger`` in ceph/ceph src/os/bluestore/BlueStore.cc,
``RocksDBStore::init`` perf counters in src/kv/RocksDBStore.cc, ``build_osd_logger`` in
src/osd/osd_perf_counters.cc), checked against the ``perf schema`` of real daemons where
the release runs in the tests (docs/ceph.md, "Releases"): Pacific 16.2.15 (Debian 12),
Reef 18.2.7 (Debian 13), Tentacle 20.2 (Debian unstable). Quincy and Squid are not run
here; their rows follow the branch sources (Quincy has Pacific's BlueStore names, Squid
Reef's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Ceph's major version of each named release (ceph/ceph doc/releases/index.rst).
RELEASES: Mapping[int, str] = {
    16: "pacific",
    17: "quincy",
    18: "reef",
    19: "squid",
    20: "tentacle",
}
OLDEST, NEWEST = min(RELEASES), max(RELEASES)

AVG = "avg"  # a time average {avgcount, sum, avgtime}
INT = "int"  # a plain counter or gauge

BLUESTORE = frozenset({"bluestore"})


@dataclass(frozen=True)
class Counter:
    """One counter: its stable key, its kind, the object stores that have it (None:
    every OSD) and its name from each release on (``(first major, name or None)``,
    ascending; a release uses the last entry at or below its major)."""

    key: str
    kind: str
    stores: frozenset[str] | None
    names: tuple[tuple[int, str | None], ...]

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    def name_for(self, major: int) -> str | None:
        """The counter's name in release ``major`` (None: the release has none).

        A release older than the table reads as its oldest, a newer one as its newest:
        the nearest known layout is the best guess, and the missing-counter report says
        when it is wrong.
        """
        name = self.names[0][1]
        for since, value in self.names:
            if since <= major:
                name = value
        return name

    def candidates(self, major: int | None) -> tuple[str, ...]:
        """The names to look for in a daemon of release ``major``: its one name, or for
        an unknown release (None) every name the counter ever had, newest first."""
        if major is not None:
            name = self.name_for(major)
            return () if name is None else (name,)
        names = [n for _, n in reversed(self.names) if n is not None]
        return tuple(dict.fromkeys(names))

    def expected(self, major: int | None, objectstore: str) -> bool:
        """Whether an OSD of release ``major`` on ``objectstore`` should have it."""
        if self.stores is not None and objectstore not in self.stores:
            return False
        return bool(self.candidates(major))


def _same(key: str, kind: str, stores: frozenset[str] | None = None) -> Counter:
    """A counter with one name in every release: its key's."""
    return Counter(key, kind, stores, ((OLDEST, key.split(".", 1)[1]),))


COUNTERS: tuple[Counter, ...] = (
    # src/osd/osd_perf_counters.cc: unchanged Pacific to Tentacle.
    _same("osd.op_r_latency", AVG),
    _same("osd.op_w_latency", AVG),
    _same("osd.op_rw_latency", AVG),
    _same("osd.op_process_latency", AVG),
    _same("osd.op_prepare_latency", AVG),
    _same("osd.op_before_dequeue_op_lat", AVG),
    _same("osd.subop_w_latency", AVG),
    _same("osd.op", INT),
    _same("osd.op_r", INT),
    _same("osd.op_w", INT),
    _same("osd.op_rw", INT),
    _same("osd.op_in_bytes", INT),
    _same("osd.op_out_bytes", INT),
    _same("osd.op_wip", INT),
    _same("osd.numpg", INT),
    # src/os/bluestore/BlueStore.cc: Reef prefixed the transaction latencies with txc_
    # (l_bluestore_commit_lat "txc_commit_lat", l_bluestore_throttle_lat
    # "txc_throttle_lat"); the kv_* and read latencies kept their names.
    Counter("bluestore.commit_lat", AVG, BLUESTORE, ((16, "commit_lat"), (18, "txc_commit_lat"))),
    Counter(
        "bluestore.throttle_lat", AVG, BLUESTORE, ((16, "throttle_lat"), (18, "txc_throttle_lat"))
    ),
    _same("bluestore.kv_sync_lat", AVG, BLUESTORE),
    _same("bluestore.kv_flush_lat", AVG, BLUESTORE),
    _same("bluestore.kv_commit_lat", AVG, BLUESTORE),
    _same("bluestore.read_lat", AVG, BLUESTORE),
    # src/kv/RocksDBStore.cc: Reef replaced l_rocksdb_compact_range with
    # compact_running/compact_completed/compact_lasted (manual compactions Ceph starts);
    # there is no equivalent of a count of range compactions, so the key ends there.
    _same("rocksdb.get_latency", AVG, BLUESTORE),
    _same("rocksdb.submit_latency", AVG, BLUESTORE),
    _same("rocksdb.submit_sync_latency", AVG, BLUESTORE),
    _same("rocksdb.compact", INT, BLUESTORE),
    Counter("rocksdb.compact_range", INT, BLUESTORE, ((16, "compact_range"), (18, None))),
    _same("rocksdb.compact_queue_len", INT, BLUESTORE),
    # Signals Pacific 16.2.15 lacks and Reef 18.2.7 and Tentacle 20.2.4 have (their perf
    # schema, tests/fixtures/ceph/releases/*/bluestore.perf_schema.json); Quincy is not
    # run here and is assumed to have Pacific's set. The key is the first name measured.
    # src/common/TrackedOp.h OpHistory: "slow_ops_count", a running total of completed
    # ops slower than osd_op_history_slow_op_threshold (10 s), not a current count.
    Counter("trackedop.slow_ops_count", INT, None, ((16, None), (18, "slow_ops_count"))),
    # src/os/bluestore/BlueStore.cc: l_bluestore_allocator_lat, the allocator's time per
    # allocation, and the slow-op counters BlueStore::log_latency bumps when a stage
    # took longer than bluestore_log_op_age (5 s).
    Counter("bluestore.allocator_lat", AVG, BLUESTORE, ((16, None), (18, "allocator_lat"))),
    *(
        Counter(f"bluestore.{name}", INT, BLUESTORE, ((16, None), (18, name)))
        for name in (
            "slow_aio_wait_count",
            "slow_committed_kv_count",
            "slow_read_onode_meta_count",
            "slow_read_wait_aio_count",
        )
    ),
)
BY_KEY: Mapping[str, Counter] = {c.key: c for c in COUNTERS}


# The mClock scheduler's queue lengths (src/osd/scheduler/mClockScheduler.cc, the
# "mclock-shard-queue-<shard>" logger of each op shard): Reef and later, and only while
# the OSD runs osd_op_queue = mclock_scheduler, so one section per shard rather than a
# row of the table. The counters are declared as counters but move both ways (inc when
# an op enters the class's queue, dec when it leaves): gauges. all_type is their sum.
# Scheduler class (op_scheduler_class, src/osd/scheduler/OpSchedulerItem.h) -> counter.
MCLOCK_SECTION_PREFIX = "mclock-shard-queue-"
MCLOCK_SCHEDULER = "mclock_scheduler"
MCLOCK_SINCE = 18
MCLOCK_QUEUES: Mapping[str, str] = {
    "immediate": "mclock_immediate_queue_len",
    "client": "mclock_client_queue_len",
    "background_recovery": "mclock_recovery_queue_len",
    "background_best_effort": "mclock_best_effort_queue_len",
}
# The key the missing-counter report uses when an mClock OSD of Reef or later has no
# shard queue section at all.
MCLOCK_KEY = "mclock-shard-queue.mclock_all_type_queue_len"


def mclock_expected(major: int | None, op_queue: str) -> bool:
    """Whether an OSD of release ``major`` running ``op_queue`` has mClock queue sections."""
    return major is not None and major >= MCLOCK_SINCE and op_queue == MCLOCK_SCHEDULER


def release_name(major: int | None) -> str:
    """``18`` -> ``"reef"``; ``"unknown"`` for None or a release not in the table."""
    return "unknown" if major is None else RELEASES.get(major, "unknown")
