"""The pgs collector against the real test clusters (tests/cephcluster.py): the listing
tests on every release (Pacific from the host, Reef and Tentacle from chroots,
tests/chroots.py; ``-k reef`` selects one), the mgr and key tests on Pacific.

Healthy: an empty listing, no per-OSD series. One replica of a size-2 pool stopped under
write load: the PGs it serves as a replica turn ``laggy`` (their primary's read lease
runs out), and the collector names the stopped OSD as the replica and the live primaries
as primaries, in agreement with ``ceph pg ls laggy wait`` run through the CLI; after
``kill -CONT`` the series vanish. A stopped mgr, a missing key and an unreadable keyring
fail the collector with Ceph's own reason. Shares the session's cluster with
tests/test_cephcluster.py and tests/test_osd_cluster.py.

Also the recorder of tests/fixtures/ceph/pgs (docs/ceph.md, "The pgs collector")::

    .venv/bin/python -m tests.test_pgs_cluster record tests/fixtures/ceph/pgs
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph.librados import ClientSettings, MonCommandClient
from cephnode_exporter.ceph.pgs import COMMAND
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection

from tests.cephcluster import CephCluster, ClusterError, shared_cluster
from tests.conftest import Tree, collect, samples, value
from tests.test_pgs import ONLY_PGS, need_rados

# Seconds between two fresh writers while waiting for a PG to turn laggy; see Stall.kick.
KICK_EVERY = 2.0
# The laggy state needs the lease to run out (0.8 x osd_heartbeat_grace 8 s = 6.4 s), a
# new op to arrive, and the primary's next stats report to the mgr (every 5 s): 8-14 s
# measured on the 2-core VM.
LAGGY_WITHIN = 40.0
RECOVERED_WITHIN = 30.0


@pytest.fixture(scope="session")
def pgs_cluster(request: pytest.FixtureRequest) -> CephCluster:
    need_rados()
    return shared_cluster(request.config)


# The listing tests run on every release the tests start (tests/chroots.py): the host's
# librados (Pacific) asks each release's mgr (the chroots' mgrs serve pg ls though their
# Python modules may not load); the mgr and key tests below stay on Pacific.
@pytest.fixture(scope="session", params=["pacific", "reef", "tentacle"])
def release_cluster(request: pytest.FixtureRequest) -> CephCluster:
    need_rados()
    return shared_cluster(request.config, request.param)


def pgs_flags(cluster: CephCluster, tree: Tree, *extra: str) -> list[str]:
    return [*tree.flags, *ONLY_PGS, f"--collector.pgs.conf={cluster.conf}", *extra]


def outcome_error(c: Collection, name: str = "pgs") -> str | None:
    return next(o.error for o in c.outcomes if o.name == name)


def laggy_series(c: Collection) -> dict[tuple[str, str, str], float]:
    """(ceph_daemon, role, state) -> PGs, from cephnode_osd_laggy_pgs."""
    out = {}
    for (name, labels), v in samples(c).items():
        if name == "cephnode_osd_laggy_pgs":
            d = dict(labels)
            out[(d["ceph_daemon"], d["role"], d["state"])] = v
    return out


def cli_listing(cluster: CephCluster) -> list[dict[str, Any]]:
    """``ceph pg ls laggy wait`` through the CLI: the independent view."""
    data = cluster.ceph_json("pg", "ls", "laggy", "wait")
    return data.get("pg_stats", []) if isinstance(data, dict) else data


def expected_series(entries: list[dict[str, Any]]) -> dict[tuple[str, str, str], float]:
    """What the collector should export for these CLI entries, counted here by hand."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for e in entries:
        words = e["state"].split("+")
        for state in ("laggy", "wait"):
            if state not in words:
                continue
            counts[(f"osd.{e['acting_primary']}", "primary", state)] += 1
            for osd in e["acting"]:
                if osd != e["acting_primary"]:
                    counts[(f"osd.{osd}", "replica", state)] += 1
    return {k: float(v) for k, v in counts.items()}


# ----------------------------------------------------------------------------- the stall


@dataclass
class Stall:
    """A replica stopped under write load (see :func:`stalled_replica`)."""

    cluster: CephCluster
    pool: str
    victim: int
    pgs: list[dict[str, Any]]  # the pool's pgs_brief before the stop
    writers: list[subprocess.Popen] = field(default_factory=list)
    last_kick: float = 0.0

    def kick(self) -> None:
        """Start a fresh writer now and then. A PG turns laggy only when an op *arrives*
        after its read lease ran out (PrimaryLogPG::check_laggy, ceph/ceph
        src/osd/PrimaryLogPG.cc); the ops already queued behind the stopped replica
        never look again, and every thread of a running bench soon waits on one."""
        now = time.monotonic()
        if now - self.last_kick >= KICK_EVERY:
            self.last_kick = now
            self.writers.append(
                self.cluster.bench_background(self.pool, 30, mode="write", block=4096, threads=32)
            )

    def wait(self, ready: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``ready`` (kicking writers meanwhile) until it returns something true."""
        deadline = time.monotonic() + timeout
        while True:
            self.kick()
            got = ready()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not within {timeout} s (victim osd.{self.victim})")
            time.sleep(0.5)


def pick_victim(cluster: CephCluster, pgs: list[dict[str, Any]]) -> int:
    """A memstore OSD that is the replica of some PG whose primary is another OSD."""
    for p in pgs:
        acting = p["acting"]
        replica = acting[1] if len(acting) == 2 else None
        if replica != p["acting_primary"] and replica in cluster.memstore_ids:
            return replica
    raise ClusterError(f"no memstore replica in {[p['acting'] for p in pgs]}")


@contextlib.contextmanager
def stalled_replica(cluster: CephCluster, pool: str) -> Iterator[Stall]:
    """A size-2 pool under 4 KiB write load with one replica ``kill -STOP``ped for the
    block; ``kill -CONT`` and every writer killed afterwards, whatever happens."""
    pool_id = cluster.create_pool(pool, size=2, pg_num=16)
    pgs = cluster.pgs(pool_id)
    stall = Stall(cluster, pool, pick_victim(cluster, pgs), pgs)
    stall.writers.append(cluster.bench_background(pool, 60, mode="write", block=4096))
    try:
        time.sleep(1.0)  # the bench connects and has ops on every OSD
        with cluster.stopped(stall.victim):
            yield stall
    finally:
        for proc in stall.writers:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- tests


def test_healthy_cluster_lists_nothing(
    release_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    pgs_cluster = release_cluster
    tree = node_trees["epyc9454p-tuned"]
    flags = pgs_flags(pgs_cluster, tree)
    # Right after the cluster starts the mgr has not heard from every OSD (pg_ready
    # false, seen here); an earlier module's stall may linger.
    deadline = time.monotonic() + RECOVERED_WITHIN
    while True:
        c = collect(flags)
        healthy = value(c, "cephnode_pgs_listed", state="laggy") == 0
        if healthy and value(c, "cephnode_pgs_pgmap_ready") == 1:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 1, outcome_error(c)
    assert value(c, "cephnode_pgs_listed", state="laggy") == 0
    assert value(c, "cephnode_pgs_listed", state="wait") == 0
    assert laggy_series(c) == {}
    assert value(c, "cephnode_pgs_pgmap_ready") == 1
    # {"pg_ready":true}: the mgr leaves pg_stats out when nothing matches.
    assert value(c, "cephnode_pgs_reply_bytes") == len(b'{"pg_ready":true}')
    assert value(c, "cephnode_scrape_collector_read_errors", collector="pgs") == 0


def test_stopped_replica_is_named_by_the_laggy_pgs(
    release_cluster: CephCluster, node_trees: dict[str, Tree]
) -> None:
    pgs_cluster = release_cluster
    tree = node_trees["epyc9454p-tuned"]
    scraper = build_scraper(parse_args(["dump", *pgs_flags(pgs_cluster, tree)]))
    try:
        with stalled_replica(pgs_cluster, "pgslaggy") as stall:
            victim = f"osd.{stall.victim}"

            def laggy() -> Collection | None:
                c = scraper.collect(10.0)
                assert outcome_error(c) is None
                return c if (value(c, "cephnode_pgs_listed", state="laggy") or 0) > 0 else None

            stall.wait(laggy, LAGGY_WITHIN, "a laggy PG")
            # The scrape and the CLI are two requests: bracket the scrape between two CLI
            # listings and retry until the listing did not change meanwhile.
            for _ in range(20):
                before = cli_listing(pgs_cluster)
                c = scraper.collect(10.0)
                after = cli_listing(pgs_cluster)
                key = sorted((e["pgid"], e["state"]) for e in before)
                if key == sorted((e["pgid"], e["state"]) for e in after):
                    break
            else:
                raise AssertionError("the laggy listing never held still")
            assert after, "the CLI lists no laggy PG"
            got = laggy_series(c)
            assert got == expected_series(after)
            assert value(c, "cephnode_pgs_listed", state="laggy") == len(after)
            assert value(c, "cephnode_pgs_listed", state="wait") == 0
            pool_id = stall.pgs[0]["pgid"].split(".")[0]
            for e in after:
                # Only PGs the stopped OSD serves as a replica, of this pool, with a
                # live primary: the one a stalled replica makes laggy.
                assert e["pgid"].split(".")[0] == pool_id, e["pgid"]
                assert stall.victim in e["acting"], (e["pgid"], e["acting"], victim)
                assert e["acting_primary"] != stall.victim, e["pgid"]
                assert "laggy" in e["state"].split("+"), e["state"]
            assert got[(victim, "replica", "laggy")] == len(after)
            assert (victim, "primary", "laggy") not in got
            primaries = Counter(f"osd.{e['acting_primary']}" for e in after)
            for daemon, n in primaries.items():
                assert got[(daemon, "primary", "laggy")] == n
            # Before the stop, the same PGs had the same acting sets: the attribution
            # names the OSDs CRUSH put there, not an artefact of the stall.
            before_stop = {p["pgid"]: p["acting"] for p in stall.pgs}
            assert all(before_stop[e["pgid"]] == e["acting"] for e in after)
            assert value(c, "cephnode_pgs_reply_bytes") > 2000 * len(after)
        # kill -CONT: the replica renews the leases and the series vanish.
        deadline = time.monotonic() + RECOVERED_WITHIN
        while True:
            c = scraper.collect(10.0)
            if value(c, "cephnode_pgs_listed", state="laggy") == 0 and not laggy_series(c):
                break
            assert time.monotonic() < deadline, laggy_series(c)
            time.sleep(0.5)
        assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 1
        assert value(c, "cephnode_pgs_listed", state="wait") == 0
    finally:
        scraper.close()
        # The bench objects live in the memstore OSDs' RAM: give it back to later tests.
        with contextlib.suppress(ClusterError):
            pgs_cluster.ceph("osd", "pool", "rm", "pgslaggy", "pgslaggy",
                             "--yes-i-really-really-mean-it")  # fmt: skip


def test_stopped_mgr_fails_the_collector_within_its_timeout(
    pgs_cluster: CephCluster, node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    """``pg ls`` is the mgr's: the mon forwards it, and with the mgr stopped the client's
    own rados_mon_op_timeout ends the wait. The next scrape after ``kill -CONT``
    reconnects and succeeds."""
    tree = node_trees["epyc9454p-tuned"]
    caplog.set_level(logging.INFO, logger="cephnode_exporter.scrape")
    scraper = build_scraper(
        parse_args(["dump", *pgs_flags(pgs_cluster, tree, "--collector.pgs.timeout=1")])
    )
    mgr = pgs_cluster.daemons["mgr.x"]
    try:
        assert value(scraper.collect(10.0), "cephnode_pgs_listed", state="wait") == 0
        os.kill(mgr.pid, signal.SIGSTOP)
        try:
            wait_stopped(mgr.pid)
            c = scraper.collect(10.0)
        finally:
            os.kill(mgr.pid, signal.SIGCONT)
        assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
        error = outcome_error(c) or ""
        assert error.startswith("CephError: `pg ls` not answered within 1 s"), error
        took = value(c, "cephnode_scrape_collector_duration_seconds", collector="pgs")
        # Ceph's timeout ended it, not the scraper's 5 s deadline.
        assert took is not None and 1.0 <= took < 5.0, took
        deadline = time.monotonic() + RECOVERED_WITHIN
        while True:
            c = scraper.collect(10.0)
            if value(c, "cephnode_scrape_collector_success", collector="pgs") == 1:
                break
            assert time.monotonic() < deadline, outcome_error(c)
            time.sleep(0.5)
    finally:
        scraper.close()
    failed = [r for r in caplog.records if r.getMessage() == "collector failed"]
    assert [r.kv["collector"] for r in failed][:1] == ["pgs"]  # type: ignore[attr-defined]
    assert any(r.getMessage() == "collector recovered" for r in caplog.records)


def wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Until every thread of the process is stopped: kill() returns before they all are,
    and on a busy machine the mgr answered one more command meanwhile (seen here)."""
    deadline = time.monotonic() + timeout
    task = Path(f"/proc/{pid}/task")
    while True:
        states = set()
        for tid in task.iterdir():
            with contextlib.suppress(OSError):
                # The state follows the command name in parentheses (proc(5), stat).
                states.add((tid / "stat").read_text().rsplit(")", 1)[1].split()[0])
        if states <= {"T", "t"}:
            return
        assert time.monotonic() < deadline, f"pid {pid} not stopped: {states}"
        time.sleep(0.01)


def cephx_conf(cluster: CephCluster, dest: Path) -> Path:
    """The cluster's ceph.conf with the client demanding cephx (the mons offer none)."""
    text = cluster.conf.read_text()
    assert "auth_client_required = none" in text
    dest.write_text(text.replace("auth_client_required = none", "auth_client_required = cephx"))
    return dest


def test_key_problems_are_named(pgs_cluster: CephCluster, tmp_path: Path) -> None:
    """Against the real monitor: without a keyring librados fails with ENOENT and the
    message lists the files it searched (``$cluster`` is the conf file's name); with a
    key the monitor refuses; a missing keyring file fails before connecting."""
    conf = cephx_conf(pgs_cluster, tmp_path / "site.conf")
    name = "client.cephnode-exporter"
    client = MonCommandClient(ClientSettings(str(conf), name, None, 2))
    with pytest.raises(Exception, match=r"no key for client\.cephnode-exporter in ") as err:
        client.command(COMMAND)
    message = str(err.value)
    assert "/etc/ceph/site.client.cephnode-exporter.keyring, /etc/ceph/site.keyring" in message
    assert "ceph auth get-or-create client.cephnode-exporter mon 'allow r'" in message
    keyring = tmp_path / "exporter.keyring"
    keyring.write_text(f"[{name}]\n\tkey = AQBEyP5kAAAAABAAeX1s1kJq2Hn0F8Xq3qk3Yg==\n")
    client = MonCommandClient(ClientSettings(str(conf), name, str(keyring), 2))
    with pytest.raises(Exception, match=r"the monitors refused client\.cephnode-exporter"):
        client.command(COMMAND)
    client = MonCommandClient(ClientSettings(str(conf), name, str(tmp_path / "none"), 2))
    with pytest.raises(Exception, match=r"cannot read keyring .*/none: No such file"):
        client.command(COMMAND)
    assert client.connects == 0
    # The same key file with the cluster's own conf (auth none): the key is not needed.
    client = MonCommandClient(ClientSettings(str(pgs_cluster.conf), name, str(keyring), 2))
    assert json.loads(client.command(COMMAND))["pg_ready"] is True
    client.close()


# ----------------------------------------------------------------------------- recording


def record(dest: Path) -> dict[str, Any]:
    """Record ``pg ls laggy wait`` replies, byte for byte as the collector receives them,
    from a fresh cluster: healthy, then with a replica stopped under write load."""
    dest.mkdir(parents=True, exist_ok=True)
    with CephCluster() as cluster:
        client = MonCommandClient(
            ClientSettings(str(cluster.conf), "client.cephnode-exporter", None, 5)
        )
        files: dict[str, dict[str, Any]] = {}

        def save(name: str, payload: bytes, **meta: Any) -> None:
            (dest / name).write_bytes(payload)
            files[name] = {"bytes": len(payload), **meta}

        save("healthy.json", client.command(COMMAND), state="healthy")
        with stalled_replica(cluster, "rec") as stall:
            start = time.monotonic()

            def laggy() -> bytes | None:
                payload = client.command(COMMAND)
                return payload if b'"pg_stats"' in payload else None

            payload = stall.wait(laggy, LAGGY_WITHIN, "a laggy PG")
            listed = json.loads(payload)["pg_stats"]
            save(
                "laggy.json",
                payload,
                state=f"osd.{stall.victim} stopped for {time.monotonic() - start:.0f} s",
                pgs=len(listed),
                bytes_per_pg=round(len(payload) / len(listed)),
            )
        version = cluster.ceph_json("version")["version"]
        client.close()
    manifest = {
        "ceph_version": version.split()[2],
        "command": COMMAND,
        "recorded_with": "python -m tests.test_pgs_cluster record tests/fixtures/ceph/pgs",
        "stalled_replica": f"osd.{stall.victim}",
        "files": files,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "record":
        print(__doc__, file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    print(json.dumps(record(Path(argv[1])), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
