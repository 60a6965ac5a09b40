"""The pgs collector's key on a cluster with cephx: ``mon 'allow r'`` is enough, and is all.

README.md and docs/ceph.md ("The pgs collector") tell operators to create the key with
exactly ``ceph auth get-or-create client.cephnode-exporter mon 'allow r'``: the collector
sends ``pg ls`` to the monitors, which check it against the mon caps and forward it to the
mgr. The shared test cluster runs ``auth none``, where any key works, so this module starts
its own: one mon and one mgr with cephx required everywhere, no OSDs (a few seconds; a
healthy ``pg ls`` needs no PGs). Against it, the real collector succeeds with that key,
and fails with the reason for a key without caps and for a wrong secret; the same key
cannot create a pool (it is read-only), and the ``ceph`` CLI, which sends ``pg ls`` to the
mgr directly, is refused without mgr caps (why the collector goes through the mons).
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cephnode_exporter.ceph.librados import ClientSettings, MonCommandClient
from cephnode_exporter.ceph.pgs import COMMAND
from cephnode_exporter.collection import Collection

from tests.cephcluster import TOOLS, CephCluster, ClusterError
from tests.conftest import Tree, collect, need_root, need_tool, value
from tests.test_pgs import ONLY_PGS, need_rados

NAME = "client.cephnode-exporter"
# The mgr registers with the mon a second or two after it starts (measured here: 2-4 s).
MGR_WITHIN = 60.0


@pytest.fixture(scope="module")
def cephx_cluster() -> Iterator[CephCluster]:
    """A mon and a mgr with ``auth_*_required = cephx``, killed after the module."""
    need_root("starts Ceph daemons (mon, mgr)")
    for tool, package in TOOLS.items():
        need_tool(tool, package)
    need_rados()
    cluster = CephCluster(memstore_osds=0, bluestore_osds=0, auth="cephx")
    try:
        cluster.start()
        wait_mgr(cluster)
        yield cluster
    finally:
        cluster.stop()


def wait_mgr(cluster: CephCluster) -> None:
    """Until the mons forward ``pg ls`` to an active mgr (client.admin's key)."""
    admin = MonCommandClient(ClientSettings(str(cluster.conf), "client.admin", None, 5))
    deadline = time.monotonic() + MGR_WITHIN
    try:
        while True:
            try:
                admin.command(COMMAND)
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"no mgr answers `pg ls`: {exc}\n{cluster.logs()}") from exc
            time.sleep(0.3)
    finally:
        admin.close()


def create_key(cluster: CephCluster, dest: Path, entity: str, *caps: str) -> Path:
    """``ceph auth get-or-create ENTITY CAPS -o DEST`` with the admin key, as documented."""
    cluster.ceph("auth", "get-or-create", entity, *caps, "-o", str(dest))
    return dest


def collect_as(cluster: CephCluster, tree: Tree, name: str, keyring: Path) -> Collection:
    """One collection with only the pgs collector, authenticating as ``name``."""
    return collect(
        [
            *tree.flags, *ONLY_PGS, f"--collector.pgs.conf={cluster.conf}",
            f"--collector.pgs.name={name}", f"--collector.pgs.keyring={keyring}",
        ]
    )  # fmt: skip


def pgs_error(c: Collection) -> str:
    return next(o.error for o in c.outcomes if o.name == "pgs") or ""


def ceph_as(
    cluster: CephCluster, name: str, keyring: Path, *args: str
) -> subprocess.CompletedProcess:
    """The ``ceph`` CLI authenticating as ``name`` with ``keyring`` (not client.admin)."""
    return subprocess.run(
        ["ceph", "-c", str(cluster.conf), "--cluster", cluster.name, "--connect-timeout", "15",
         "-n", name, "--keyring", str(keyring), *args],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_read_only_key_runs_the_collector(
    cephx_cluster: CephCluster, node_trees: dict[str, Tree], tmp_path: Path
) -> None:
    keyring = create_key(cephx_cluster, tmp_path / "ro.keyring", NAME, "mon", "allow r")
    # The key holds that one cap and nothing else.
    [entry] = cephx_cluster.ceph_json("auth", "get", NAME)
    assert entry["caps"] == {"mon": "allow r"}
    c = collect_as(cephx_cluster, node_trees["epyc9454p-tuned"], NAME, keyring)
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 1, pgs_error(c)
    assert value(c, "cephnode_pgs_listed", state="laggy") == 0
    assert value(c, "cephnode_pgs_listed", state="wait") == 0
    # The mgr answered: the reply carries its pg_ready flag.
    assert value(c, "cephnode_pgs_pgmap_ready") in (0.0, 1.0)


def test_key_without_caps_is_refused_and_named(
    cephx_cluster: CephCluster,
    node_trees: dict[str, Tree],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A key without mon caps cannot even authenticate: the mons refuse it (EACCES), and
    the error says the key needs ``mon 'allow r'``."""
    caplog.set_level(logging.INFO, logger="cephnode_exporter.scrape")
    keyring = create_key(cephx_cluster, tmp_path / "nocaps.keyring", "client.nocaps")
    [entry] = cephx_cluster.ceph_json("auth", "get", "client.nocaps")
    assert entry["caps"] == {}
    c = collect_as(cephx_cluster, node_trees["epyc9454p-tuned"], "client.nocaps", keyring)
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
    assert value(c, "cephnode_pgs_listed", state="laggy") is None
    error = pgs_error(c)
    assert error.startswith("CephError: the monitors refused client.nocaps: "), error
    assert "a key without mon caps (it needs mon 'allow r')" in error, error
    assert "permission denied" in error, error
    failed = [r for r in caplog.records if r.getMessage() == "collector failed"]
    assert [r.kv["err"] for r in failed] == [error]  # type: ignore[attr-defined]


def test_wrong_secret_is_refused(
    cephx_cluster: CephCluster, node_trees: dict[str, Tree], tmp_path: Path
) -> None:
    """The right name with a fresh random secret: refused at authentication."""
    keyring = tmp_path / "wrong.keyring"
    subprocess.run(
        ["ceph-authtool", "--create-keyring", "--gen-key", "-n", NAME, str(keyring)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    create_key(cephx_cluster, tmp_path / "ro.keyring", NAME, "mon", "allow r")
    [entry] = cephx_cluster.ceph_json("auth", "get", NAME)
    assert entry["key"] not in keyring.read_text()
    c = collect_as(cephx_cluster, node_trees["epyc9454p-tuned"], NAME, keyring)
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
    error = pgs_error(c)
    assert error.startswith(f"CephError: the monitors refused {NAME}: a wrong key"), error
    assert "permission denied" in error, error


def test_read_only_key_cannot_mutate(cephx_cluster: CephCluster, tmp_path: Path) -> None:
    """The documented key may read but not change the cluster; and the CLI's ``pg ls``,
    sent to the mgr rather than through the mons, needs mgr caps it does not have."""
    keyring = create_key(cephx_cluster, tmp_path / "ro.keyring", NAME, "mon", "allow r")
    # Reads through the mons work with the key (the CLI sends `status` to a mon).
    res = ceph_as(cephx_cluster, NAME, keyring, "status", "--format=json")
    assert res.returncode == 0, res.stderr
    res = ceph_as(cephx_cluster, NAME, keyring, "osd", "pool", "create", "cephxro")
    assert res.returncode == 13 and "EACCES" in res.stderr, (res.returncode, res.stderr)
    assert "cephxro" not in cephx_cluster.ceph("osd", "pool", "ls").split()
    res = ceph_as(cephx_cluster, NAME, keyring, "pg", "ls", "laggy", "wait")
    assert res.returncode == 13 and "mgr caps" in res.stderr, (res.returncode, res.stderr)
    # Through the mons (what the collector does), the same key may run it.
    client = MonCommandClient(ClientSettings(str(cephx_cluster.conf), NAME, str(keyring), 5))
    try:
        assert client.command(COMMAND).startswith(b'{"pg_ready"')
    finally:
        client.close()
