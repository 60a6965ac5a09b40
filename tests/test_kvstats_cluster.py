"""RocksDB compaction totals of the real BlueStore OSD (tests/cephcluster.py, Pacific).

The test cluster starts its BlueStore OSD with ``rocksdb_perf`` and both
``rocksdb_collect_*`` options (they are off by default), so ``dump_objectstore_kv_stats``
answers with RocksDB's whole-DB statistics and the default column family's table. Under a
small-object write load and a manual compaction the exported counters grow, equal the
OSD's own dump, and agree with what BlueFS wrote into SST files; memstore OSDs have none;
with the options switched off at runtime the series go and the OSD still answers.
Shares the session's cluster with tests/test_osd_cluster.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from cephnode_exporter.ceph.asok import AdminSocket
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors.osd_catalogue import KV_CF_COUNTERS, KV_DB_COUNTERS

from tests.cephcluster import CephCluster, shared_cluster
from tests.conftest import Tree, collect, samples, value
from tests.test_osd import ONLY_OSD, histogram, sum_row, ticker

KV_NAMES = {f"cephnode_osd_{suffix}_total" for _, suffix, _ in KV_DB_COUNTERS + KV_CF_COUNTERS}


@pytest.fixture(scope="session")
def kv_cluster(request: pytest.FixtureRequest) -> CephCluster:
    return shared_cluster(request.config)


def scrape(cluster: CephCluster, tree: Tree) -> Collection:
    return collect([*tree.flags, f"--ceph.socket-dir={cluster.socket_dir}", *ONLY_OSD])


def own_numbers(cluster: CephCluster, osd_id: int) -> tuple[dict[str, Any], int]:
    """The OSD's own totals, read from its raw reply without the exporter's parser, and
    the bytes BlueFS wrote to files other than the WAL (SSTs, and the small MANIFEST)."""
    sock = AdminSocket(cluster.asok(f"osd.{osd_id}"))
    kv = sock.raw("dump_objectstore_kv_stats")
    count, micros = histogram(kv, "rocksdb.compaction.times.micros")
    row = sum_row(kv)
    own = {
        "compactions": count,
        "compaction_seconds": micros / 1e6,
        "compaction_read_bytes": ticker(kv, "rocksdb.compact.read.bytes"),
        "compaction_write_bytes": ticker(kv, "rocksdb.compact.write.bytes"),
        "flush_write_bytes": ticker(kv, "rocksdb.flush.write.bytes"),
        "cf_compactions": int(row["Comp(cnt)"]),
        "cf_compaction_seconds": float(row["Comp(sec)"]),
    }
    bluefs = sock.command("perf dump", logger="bluefs")["bluefs"]
    return own, bluefs["bytes_written_sst"]


def exported(c: Collection, d: str) -> dict[str, Any]:
    db = {k: value(c, f"cephnode_osd_rocksdb_{k}_total", ceph_daemon=d) for k in (
        "compactions", "compaction_seconds", "compaction_read_bytes", "compaction_write_bytes",
        "flush_write_bytes")}  # fmt: skip
    cf = {"ceph_daemon": d, "column_family": "default"}
    db["cf_compactions"] = value(c, "cephnode_osd_rocksdb_cf_compactions_total", **cf)
    db["cf_compaction_seconds"] = value(c, "cephnode_osd_rocksdb_cf_compaction_seconds_total", **cf)
    return db


def stable_scrape(
    cluster: CephCluster, tree: Tree, osd_id: int
) -> tuple[Collection, dict[str, Any], int]:
    """A scrape between two identical readings of the OSD's own numbers (a background
    flush or compaction may run meanwhile: retry)."""
    for _ in range(20):
        first, sst = own_numbers(cluster, osd_id)
        c = scrape(cluster, tree)
        if own_numbers(cluster, osd_id) == (first, sst):
            return c, first, sst
        time.sleep(0.2)
    raise AssertionError(f"osd.{osd_id}: RocksDB statistics never stable")


def test_compaction_counters_grow_and_agree_with_the_osd(
    kv_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    tree = node_trees["epyc9454p-tuned"]
    osd_id = kv_cluster.bluestore_ids[0]
    d = f"osd.{osd_id}"
    before, own_before, sst_before = stable_scrape(kv_cluster, tree, osd_id)
    assert exported(before, d) == own_before
    kv_cluster.create_pool("kvload", size=1, pg_num=16)
    kv_cluster.rados_bench("kvload", 3, mode="write", block=4096, threads=16)
    kv_cluster.ceph("tell", d, "compact", timeout=120)
    after, own_after, sst_after = stable_scrape(kv_cluster, tree, osd_id)
    got = exported(after, d)
    assert value(after, "cephnode_osd_scrape_success", ceph_daemon=d) == 1
    assert got == own_after
    # The load was flushed and compacted: every counter grew.
    for key in ("compactions", "compaction_seconds", "compaction_read_bytes",
                "compaction_write_bytes", "flush_write_bytes", "cf_compactions"):  # fmt: skip
        assert got[key] > (exported(before, d)[key] or 0), key
    cpu = value(after, "cephnode_osd_rocksdb_compaction_cpu_seconds_total", ceph_daemon=d)
    assert cpu is not None and 0 < cpu <= got["compaction_seconds"]
    # Bytes, not kilobytes: what RocksDB says it wrote by flushes and compactions is what
    # BlueFS wrote to non-WAL files meanwhile (plus MANIFEST records, a few KiB).
    written = sum(got[k] - own_before[k] for k in ("compaction_write_bytes", "flush_write_bytes"))
    sst = sst_after - sst_before
    assert 0.9 * sst - (64 << 10) <= written <= sst, (written, sst)
    # The default column family's table: a small part of a sharded OSD's DB.
    cf_read = value(after, "cephnode_osd_rocksdb_cf_compaction_read_bytes_total",
                    ceph_daemon=d, column_family="default")  # fmt: skip
    assert cf_read is not None and cf_read <= got["compaction_read_bytes"]
    for osd in kv_cluster.memstore_ids:
        assert not [k for k in samples(after)
                    if k[0] in KV_NAMES and ("ceph_daemon", f"osd.{osd}") in k[1]]  # fmt: skip
        assert value(after, "cephnode_osd_scrape_success", ceph_daemon=f"osd.{osd}") == 1


def test_statistics_switched_off_at_runtime(
    kv_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    """The collector follows config show on every scrape: with both collect options off
    the OSD is not asked and its compaction series are gone; back on, they return."""
    tree = node_trees["epyc9454p-tuned"]
    osd_id = kv_cluster.bluestore_ids[0]
    d = f"osd.{osd_id}"
    options = ("rocksdb_collect_compaction_stats", "rocksdb_collect_extended_stats")

    def kv_series(c: Collection) -> set[str]:
        return {k[0] for k in samples(c) if k[0] in KV_NAMES and ("ceph_daemon", d) in k[1]}

    assert kv_series(scrape(kv_cluster, tree)) == KV_NAMES
    try:
        for option in options:
            kv_cluster.ceph("tell", d, "config", "set", option, "false")
        c = scrape(kv_cluster, tree)
        assert value(c, "cephnode_osd_scrape_success", ceph_daemon=d) == 1
        assert kv_series(c) == set()
        assert AdminSocket(kv_cluster.asok(d)).raw("dump_objectstore_kv_stats") == b""
    finally:
        for option in options:
            kv_cluster.ceph("tell", d, "config", "set", option, "true")
    assert kv_series(scrape(kv_cluster, tree)) == KV_NAMES
