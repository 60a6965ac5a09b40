"""The admin socket client and discovery against a real Ceph cluster (tests/cephcluster.py).

One cluster per session (Debian's Pacific packages, started as root in about 10 s): a mon,
a mgr with the prometheus module, three memstore OSDs and one BlueStore OSD on a file.
Tests that change the cluster (stopping, restarting an OSD) restore it before they end.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest
from cephnode_exporter.ceph.asok import (
    ALLOWED_COMMANDS,
    AdminSocket,
    AsokCommandError,
    AsokTimeout,
)
from cephnode_exporter.ceph.asokloop import query_all
from cephnode_exporter.ceph.discovery import discover_osd_sockets

from tests.cephcluster import MODE_0770_OSD, CephCluster, shared_cluster
from tests.conftest import REPO, need

OSD_HISTOGRAMS = (
    "op_r_latency_out_bytes_histogram",
    "op_w_latency_in_bytes_histogram",
    "op_rw_latency_in_bytes_histogram",
    "op_rw_latency_out_bytes_histogram",
)


@pytest.fixture(scope="session")
def ceph_cluster(request: pytest.FixtureRequest) -> CephCluster:
    return shared_cluster(request.config)


@pytest.fixture(scope="module")
def bench_pool(ceph_cluster: CephCluster) -> tuple[str, int]:
    """A size-1 pool with PGs on every OSD; its name and id."""
    return "bench", ceph_cluster.create_pool("bench", size=1, pg_num=32)


def sockets(cluster: CephCluster, timeout: float = 5.0) -> dict[int, AdminSocket]:
    return {i: AdminSocket(cluster.asok(f"osd.{i}"), timeout=timeout) for i in cluster.osds}


def test_discovery_finds_the_osd_sockets(ceph_cluster: CephCluster) -> None:
    found = discover_osd_sockets(str(ceph_cluster.socket_dir))
    assert [s.ceph_daemon for s in found] == ["osd.0", "osd.1", "osd.2", "osd.3"]
    assert {(s.cluster, s.layout) for s in found} == {(ceph_cluster.name, "package")}
    assert [s.path for s in found] == [str(ceph_cluster.asok(f"osd.{i}")) for i in range(4)]
    # The mon's and mgr's sockets are in the same directory and not taken for OSDs.
    assert ceph_cluster.asok("mon.a").exists() and ceph_cluster.asok("mgr.x").exists()


def test_discovery_of_the_cephadm_layout_with_real_sockets(ceph_cluster: CephCluster) -> None:
    """cephadm: <dir>/<fsid>/ceph-osd.<id>.asok (here links to the real sockets)."""
    top = ceph_cluster.root / "cephadm"
    fsid_dir = top / ceph_cluster.fsid
    fsid_dir.mkdir(parents=True)
    for i in (1, 3):
        (fsid_dir / f"ceph-osd.{i}.asok").symlink_to(ceph_cluster.asok(f"osd.{i}"))
    (fsid_dir / "ceph-mon.a.asok").symlink_to(ceph_cluster.asok("mon.a"))
    found = discover_osd_sockets(str(top))
    assert [(s.ceph_daemon, s.cluster, s.layout) for s in found] == [
        ("osd.1", ceph_cluster.fsid, "cephadm"),
        ("osd.3", ceph_cluster.fsid, "cephadm"),
    ]
    assert AdminSocket(found[1].path).peer_pid() == ceph_cluster.osd_pid(3)


def command_descriptions(path: Path) -> dict[str, frozenset[str]]:
    """The daemon's own command table (via the ceph CLI, independent of our client)."""
    out = subprocess.run(
        ["ceph", "--admin-daemon", str(path), "get_command_descriptions"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    table = {}
    for desc in json.loads(out).values():
        words = " ".join(w for w in desc["sig"] if isinstance(w, str))
        table[words] = frozenset(a["name"] for a in desc["sig"] if isinstance(a, dict))
    return table


def test_allowlist_matches_the_daemons_commands(ceph_cluster: CephCluster) -> None:
    """Every allowlisted command exists, with exactly the arguments the daemon declares
    (the server ignores unknown arguments, so the client is the only check)."""
    for osd_id in (ceph_cluster.memstore_ids[0], ceph_cluster.bluestore_ids[0]):
        table = command_descriptions(ceph_cluster.asok(f"osd.{osd_id}"))
        for prefix, spec in ALLOWED_COMMANDS.items():
            if prefix == "bluefs stats" and osd_id in ceph_cluster.memstore_ids:
                assert prefix not in table  # BlueStore only
                continue
            assert prefix in table, (osd_id, prefix)
            assert spec.args == table[prefix], (osd_id, prefix, table[prefix])


def test_perf_dump_from_every_osd(ceph_cluster: CephCluster) -> None:
    results = query_all(sockets(ceph_cluster), "perf dump", timeout=5.0)
    assert all(r.ok for r in results.values()), results
    for osd_id, result in results.items():
        dump = result.value
        assert "op_w_latency" in dump["osd"]
        assert set(dump["osd"]["op_w_latency"]) == {"avgcount", "sum", "avgtime"}
        store_sections = {"bluestore", "rocksdb", "bluefs"} & set(dump)
        if osd_id in ceph_cluster.bluestore_ids:
            assert store_sections == {"bluestore", "rocksdb", "bluefs"}
            for counter in ("commit_lat", "kv_sync_lat", "kv_flush_lat", "kv_commit_lat"):
                assert set(dump["bluestore"][counter]) == {"avgcount", "sum", "avgtime"}
            for counter in ("get_latency", "submit_latency", "submit_sync_latency"):
                assert counter in dump["rocksdb"]
        else:
            assert store_sections == set()
    # The text command, on the BlueStore OSD only.
    bluefs = sockets(ceph_cluster)[ceph_cluster.bluestore_ids[0]].command("bluefs stats")
    assert "device size" in bluefs


def test_histogram_axes(ceph_cluster: CephCluster) -> None:
    """The layout docs/ceph.md describes: latency in *nanoseconds* (the axis says usec),
    log2 from 100 us; request size in bytes, log2 from 512; first bucket an underflow."""
    for osd_id, sock in sockets(ceph_cluster).items():
        hists = sock.command("perf histogram dump", logger="osd")["osd"]
        assert set(OSD_HISTOGRAMS) <= set(hists), osd_id
        for name in OSD_HISTOGRAMS:
            latency, size = hists[name]["axes"]
            assert {k: v for k, v in latency.items() if k != "ranges"} == {
                "name": "Latency (usec)",
                "min": 0,
                "quant_size": 100000,
                "buckets": 32,
                "scale_type": "log2",
            }
            assert latency["ranges"][:4] == [
                {"max": -1},
                {"min": 0, "max": 99999},
                {"min": 100000, "max": 199999},
                {"min": 200000, "max": 399999},
            ]
            assert latency["ranges"][-1] == {"min": 100000 * 2**29}
            assert size["name"] == "Request size (bytes)" and size["quant_size"] == 512
            assert size["ranges"][1] == {"min": 0, "max": 511}
            assert len(hists[name]["values"]) == 32
            assert all(len(row) == 32 for row in hists[name]["values"])


def op_w(sock: AdminSocket) -> tuple[dict, dict]:
    """``op_w_latency`` and its histogram from one moment: two commands are not atomic, so
    retry until perf dump reads the same before and after (the mgr writes now and then)."""
    for _ in range(20):
        dump = sock.command("perf dump", logger="osd")["osd"]["op_w_latency"]
        hist = sock.command("perf histogram dump", logger="osd")["osd"]
        if sock.command("perf dump", logger="osd")["osd"]["op_w_latency"] == dump:
            return dump, hist["op_w_latency_in_bytes_histogram"]
        time.sleep(0.1)
    raise AssertionError(f"{sock.path}: op_w_latency never stable")


def test_write_load_grows_op_w_and_histograms_agree(
    ceph_cluster: CephCluster, bench_pool: tuple[str, int]
) -> None:
    pool, pool_id = bench_pool
    socks = sockets(ceph_cluster)
    before = {i: op_w(s) for i, s in socks.items()}
    ceph_cluster.rados_bench(pool, 3, mode="write", block=65536)
    primaries = {pg["acting_primary"] for pg in ceph_cluster.pgs(pool_id)}
    assert primaries == set(ceph_cluster.osds)  # 32 PGs: every OSD leads some
    for osd_id, sock in socks.items():
        dump, hist = op_w(sock)
        grown = dump["avgcount"] - before[osd_id][0]["avgcount"]
        assert grown > 0, osd_id
        # Collapse the size axis: values[latency][size].
        per_latency = [sum(row) for row in hist["values"]]
        assert sum(per_latency) == dump["avgcount"], osd_id
        assert per_latency[0] == 0  # the underflow bucket
        ranges = hist["axes"][0]["ranges"]
        low = sum(n * r["min"] for n, r in zip(per_latency, ranges, strict=True) if n)
        high = sum(n * (r["max"] + 1) for n, r in zip(per_latency, ranges, strict=True) if n)
        # perf dump's sum is seconds; the histogram's edges are nanoseconds.
        assert low <= dump["sum"] * 1e9 <= high, (osd_id, low, dump["sum"], high)
        # The bench's 64 KiB writes land in size bucket 9, [65536, 131071] (a stray
        # small write of the mgr may land elsewhere).
        assert hist["axes"][1]["ranges"][9] == {"min": 65536, "max": 131071}
        in_64k = sum(row[9] for row in hist["values"])
        in_64k_before = sum(row[9] for row in before[osd_id][1]["values"])
        assert grown - 5 <= in_64k - in_64k_before <= grown, osd_id


def test_peer_pid_is_the_osd_pid(ceph_cluster: CephCluster) -> None:
    for osd_id, sock in sockets(ceph_cluster).items():
        assert sock.peer_pid() == ceph_cluster.osd_pid(osd_id)


def test_error_reply_from_the_daemon(ceph_cluster: CephCluster) -> None:
    sock = sockets(ceph_cluster)[0]
    assert sock.command("config get", var="osd_op_complaint_time") == {
        "osd_op_complaint_time": "30.000000"
    }
    with pytest.raises(AsokCommandError, match=r"ERROR: \(2\) No such file or directory"):
        sock.command("config get", var="no_such_option")


def test_stopped_osd_times_out_while_the_others_answer(ceph_cluster: CephCluster) -> None:
    victim = ceph_cluster.memstore_ids[0]
    socks = sockets(ceph_cluster, timeout=30)
    with ceph_cluster.stopped(victim):
        # The kernel answers SO_PEERCRED for a stopped process too.
        assert socks[victim].peer_pid() == ceph_cluster.osd_pid(victim)
        start = time.monotonic()
        results = query_all(socks, "perf dump", timeout=1.0)
        took = time.monotonic() - start
        assert took < 1.2
        assert isinstance(results[victim].error, AsokTimeout), results[victim]
        assert "no complete reply length" in str(results[victim].error)
        for osd_id, result in results.items():
            if osd_id != victim:
                assert result.ok, (osd_id, result)
                assert result.seconds < 0.5
    # After SIGCONT the OSD first serves the connections we abandoned, then ours.
    deadline = time.monotonic() + 15
    while True:
        try:
            assert "osd" in socks[victim].command("perf dump", deadline=time.monotonic() + 2)
            break
        except AsokTimeout:
            if time.monotonic() > deadline:
                raise


def test_mgr_prometheus_module(ceph_cluster: CephCluster, bench_pool: tuple[str, int]) -> None:
    def metadata(text: str) -> set[str]:
        found = re.findall(r'^ceph_osd_metadata\{.*ceph_daemon="(osd\.\d+)"', text, re.M)
        return set(found)

    expected = {f"osd.{i}" for i in ceph_cluster.osds}
    text = ceph_cluster.wait_prometheus(
        f'ceph_pg_active{{pool_id="{bench_pool[1]}"}}',
        check=lambda text: metadata(text) == expected,
    )
    assert "ceph_pg_laggy{" in text and "ceph_pg_wait{" in text
    assert 'objectstore="bluestore"' in text
    assert ceph_cluster.prometheus_url.startswith("http://127.0.0.1:")


def test_socket_permissions(ceph_cluster: CephCluster) -> None:
    """Connecting needs write permission on the socket: group ceph is enough only with
    admin_socket_mode 0770 (docs/ceph.md). Emulates the packaged layout: /run/ceph is
    ceph:ceph 0770 and the daemons (root here) run with group ceph."""
    # Debian's interpreter: the venv's may live where nobody cannot reach (/root/.pyenv).
    python3 = "/usr/bin/python3"
    need(os.access(python3, os.X_OK), f"{python3} missing (Debian package python3)")
    try:
        ceph_gid = grp.getgrnam("ceph").gr_gid
        nobody = pwd.getpwnam("nobody")
    except KeyError as exc:
        need(False, f"no {exc} account (created by the ceph-common package)")
        return
    run = ceph_cluster.socket_dir
    default = ceph_cluster.asok(f"osd.{ceph_cluster.bluestore_ids[0]}")
    mode770 = ceph_cluster.asok(f"osd.{MODE_0770_OSD}")
    assert stat.S_IMODE(os.stat(default).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(mode770).st_mode) == 0o770  # admin_socket_mode = 0770
    code = (
        "import json, sys\n"
        "from cephnode_exporter.ceph.asok import AdminSocket, AsokError\n"
        "from cephnode_exporter.ceph.discovery import DiscoveryError, discover_osd_sockets\n"
        "out = {}\n"
        "try:\n"
        "    out['found'] = [s.ceph_daemon for s in discover_osd_sockets(sys.argv[1])]\n"
        "except DiscoveryError as e:\n"
        "    out['found'] = str(e)\n"
        "for p in sys.argv[2:]:\n"
        "    try:\n"
        "        out[p] = AdminSocket(p).command('version')['version']\n"
        "    except AsokError as e:\n"
        "        out[p] = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps(out))\n"
    )

    def as_nobody(groups: list[int]) -> dict[str, object]:
        res = subprocess.run(
            [python3, "-c", code, str(run), str(default), str(mode770)],
            user=nobody.pw_uid,
            group=nobody.pw_gid,
            extra_groups=groups,
            env={"PYTHONPATH": str(REPO / "exporter"), "PATH": "/usr/bin:/bin"},
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    saved = {p: os.stat(p) for p in (run, default, mode770)}
    try:
        os.chmod(run, 0o770)
        for path in saved:
            os.chown(path, 0, ceph_gid)
        member = as_nobody([ceph_gid])
        outsider = as_nobody([])
    finally:
        for path, st in saved.items():
            os.chown(path, st.st_uid, st.st_gid)
            os.chmod(path, stat.S_IMODE(st.st_mode))
    assert member["found"] == ["osd.0", "osd.1", "osd.2", "osd.3"]
    version = AdminSocket(mode770).command("version")["version"]
    assert member[str(mode770)] == version
    assert str(member[str(default)]).startswith("AsokConnectError:")
    assert "permission denied" in str(member[str(default)])
    assert "permission denied" in str(outsider["found"])
    assert "group ceph" in str(outsider["found"])


def test_restarted_osd_is_rediscovered(ceph_cluster: CephCluster) -> None:
    osd_id = ceph_cluster.memstore_ids[1]
    old_pid = ceph_cluster.osd_pid(osd_id)
    ceph_cluster.restart_osd(osd_id)
    new_pid = ceph_cluster.osd_pid(osd_id)
    assert new_pid != old_pid
    found = {s.ceph_daemon: s for s in discover_osd_sockets(str(ceph_cluster.socket_dir))}
    assert set(found) == {f"osd.{i}" for i in ceph_cluster.osds}
    sock = AdminSocket(found[f"osd.{osd_id}"].path)
    assert sock.peer_pid() == new_pid
    assert "osd" in sock.command("perf dump")
