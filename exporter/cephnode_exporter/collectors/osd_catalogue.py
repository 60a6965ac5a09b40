"""The ``osd`` collector's catalogue: the counters it exports one to one.

Part of the ``osd`` collector (collectors/osd.py): each table maps a ``perf dump``
counter, or a RocksDB statistic of ``dump_objectstore_kv_stats`` (ceph/kvstats.py), to a
metric name suffix (after ``cephnode_osd_``) and its HELP text; collectors/osd_metrics.py
builds the families from them. Counter names by Ceph release are in ceph/counters.py.
"""

from __future__ import annotations

# (perf dump section.counter, metric name suffix, help) of the time averages exported as
# summaries with only _sum and _count (a Prometheus summary without quantiles: the mean
# is rate(_sum) / rate(_count)). The op_r/op_w/op_rw averages give the histograms' _sum.
SUMMARIES: tuple[tuple[str, str, str], ...] = (
    (
        "osd.op_process_latency",
        "op_process_latency_seconds",
        "Client op latency from dequeue to completion (op_process_latency).",
    ),
    (
        "osd.op_prepare_latency",
        "op_prepare_latency_seconds",
        "Client op latency from receipt to start of processing (op_prepare_latency).",
    ),
    (
        "osd.op_before_dequeue_op_lat",
        "op_queue_wait_seconds",
        "Time client ops waited in the op queue before a shard thread took them "
        "(op_before_dequeue_op_lat).",
    ),
    (
        "osd.subop_w_latency",
        "subop_write_latency_seconds",
        "Replica write (sub-op) latency on this OSD as a replica (subop_w_latency).",
    ),
    ("bluestore.commit_lat", "bluestore_commit_latency_seconds", "BlueStore commit latency."),
    (
        "bluestore.kv_sync_lat",
        "bluestore_kv_sync_latency_seconds",
        "BlueStore kv_sync thread: flush plus commit of one batch (kv_sync_lat).",
    ),
    (
        "bluestore.kv_flush_lat",
        "bluestore_kv_flush_latency_seconds",
        "BlueStore device flush before a kv commit (kv_flush_lat).",
    ),
    (
        "bluestore.kv_commit_lat",
        "bluestore_kv_commit_latency_seconds",
        "BlueStore RocksDB commit of one batch (kv_commit_lat).",
    ),
    ("bluestore.read_lat", "bluestore_read_latency_seconds", "BlueStore read latency."),
    (
        "bluestore.throttle_lat",
        "bluestore_throttle_latency_seconds",
        "Time transactions waited on BlueStore's submission throttle (throttle_lat).",
    ),
    (
        "bluestore.allocator_lat",
        "bluestore_allocator_latency_seconds",
        "Time BlueStore's allocator took per allocation (allocator_lat; Reef and later): "
        "a fragmented or contended allocator shows here before it shows in the commit "
        "latency.",
    ),
    # The RocksDB stages (rocksdb.get_latency, submit_latency, submit_sync_latency) are
    # exported as their means over the window only (ROCKSDB_STAGE_AVGS): six series per
    # OSD fewer, which pay for the mean gauges (docs/metrics.md, "Series per OSD").
)
# (perf dump section.counter, metric name suffix without _total, help)
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("osd.op", "ops", "Client ops the OSD handled as primary (op)."),
    ("osd.op_in_bytes", "op_in_bytes", "Bytes clients wrote to the OSD (op_in_bytes)."),
    ("osd.op_out_bytes", "op_out_bytes", "Bytes clients read from the OSD (op_out_bytes)."),
    (
        "rocksdb.compact",
        "rocksdb_compact",
        "Full RocksDB compactions Ceph requested (compact); RocksDB's own background "
        "compactions are not counted here.",
    ),
    (
        "rocksdb.compact_range",
        "rocksdb_compact_range",
        "RocksDB range compactions Ceph requested (compact_range).",
    ),
    (
        "trackedop.slow_ops_count",
        "tracked_slow_ops",
        "Ops the OSD completed that took longer than osd_op_history_slow_op_threshold "
        "(10 s by default), since it started (trackedop.slow_ops_count; Reef and later). "
        "A running total: the ops slow now are cephnode_osd_slow_ops.",
    ),
    (
        "bluestore.slow_aio_wait_count",
        "bluestore_slow_aio_wait",
        "BlueStore transactions whose wait for their data writes (aio) took longer than "
        "bluestore_log_op_age (5 s by default) (slow_aio_wait_count; Reef and later).",
    ),
    (
        "bluestore.slow_committed_kv_count",
        "bluestore_slow_committed_kv",
        "BlueStore transactions whose RocksDB commit took longer than bluestore_log_op_age "
        "(slow_committed_kv_count; Reef and later).",
    ),
    (
        "bluestore.slow_read_onode_meta_count",
        "bluestore_slow_read_onode_meta",
        "BlueStore reads whose object metadata (onode) lookup took longer than "
        "bluestore_log_op_age (slow_read_onode_meta_count; Reef and later).",
    ),
    (
        "bluestore.slow_read_wait_aio_count",
        "bluestore_slow_read_wait_aio",
        "BlueStore reads whose wait for the device read (aio) took longer than "
        "bluestore_log_op_age (slow_read_wait_aio_count; Reef and later).",
    ),
)
# (perf dump section.counter, metric name suffix, help)
GAUGES: tuple[tuple[str, str, str], ...] = (
    ("osd.numpg", "pgs", "Placement groups on the OSD, primary or replica (numpg)."),
    ("osd.op_wip", "ops_in_progress", "Replication ops currently being processed (op_wip)."),
    (
        "rocksdb.compact_queue_len",
        "rocksdb_compact_queue_length",
        "RocksDB compaction ranges waiting (compact_queue_len).",
    ),
)
# (KVStats.db attribute, metric name suffix without _total, help) of the whole-DB RocksDB
# statistics (rocksdb_perf when the OSD started and rocksdb_collect_extended_stats).
_DB_ONLY = (
    " From RocksDB's statistics (every column family, exact), offered only with "
    "rocksdb_perf true when the OSD started and rocksdb_collect_extended_stats; kept "
    "since the OSD started."
)
KV_DB_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (
        "read_bytes",
        "rocksdb_compaction_read_bytes",
        "Bytes RocksDB compactions read (rocksdb.compact.read.bytes)." + _DB_ONLY,
    ),
    (
        "write_bytes",
        "rocksdb_compaction_write_bytes",
        "Bytes RocksDB compactions wrote (rocksdb.compact.write.bytes)." + _DB_ONLY,
    ),
    (
        "seconds",
        "rocksdb_compaction_seconds",
        "Wall time of RocksDB compaction jobs (rocksdb.compaction.times.micros sum); "
        "compaction throughput is rate(read+write bytes) / rate(this)." + _DB_ONLY,
    ),
    (
        "count",
        "rocksdb_compactions",
        "RocksDB compaction jobs, background and manual (rocksdb.compaction.times.micros "
        "count)." + _DB_ONLY,
    ),
    (
        "cpu_seconds",
        "rocksdb_compaction_cpu_seconds",
        "CPU time of RocksDB compaction jobs (rocksdb.compaction.times.cpu_micros sum)." + _DB_ONLY,
    ),
    (
        "flush_write_bytes",
        "rocksdb_flush_write_bytes",
        "Bytes RocksDB memtable flushes wrote to L0 (rocksdb.flush.write.bytes): what "
        "compaction rewrites; write amplification is rate(compaction + flush bytes "
        "written) / rate(this)." + _DB_ONLY,
    ),
)
# The same from one column family's rocksdb.stats table (Sum row), which Pacific and
# Reef dump for the default column family only and Tentacle for every column family
# (ceph/kvstats.py, measured on 16.2.15, 18.2.7 and 20.2.4).
_CF_ONLY = (
    " From the column family's rocksdb.stats table (rocksdb_perf and "
    "rocksdb_collect_compaction_stats): Pacific and Reef dump the default column family "
    "only, which on an OSD created sharded (Pacific and later) holds a small part of the "
    "data, Tentacle every column family; flushes count as compactions into L0; kept "
    "since the OSD started."
)
KV_CF_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (
        "read_bytes",
        "rocksdb_cf_compaction_read_bytes",
        "Bytes compactions of the column family read, in steps of 0.01 GiB (the "
        "Cumulative compaction line; 0.1 GiB from the table without it)." + _CF_ONLY,
    ),
    (
        "write_bytes",
        "rocksdb_cf_compaction_write_bytes",
        "Bytes compactions of the column family wrote, in steps of 0.01 GiB (0.1 GiB "
        "from the table)." + _CF_ONLY,
    ),
    (
        "seconds",
        "rocksdb_cf_compaction_seconds",
        "Time compactions of the column family took, in steps of 0.01 s (Comp(sec))." + _CF_ONLY,
    ),
    (
        "count",
        "rocksdb_cf_compactions",
        "Compactions of the column family (Comp(cnt))." + _CF_ONLY,
    ),
)
