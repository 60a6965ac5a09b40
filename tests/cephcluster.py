"""A real single-host Ceph cluster for the integration tests, started from Debian's packages.

Why a real cluster: the admin socket protocol, the perf counter layout, what a stopped OSD
does to its socket and what the mgr exports can only be trusted when they come from the
daemons themselves. The cluster is small and private: one mon, one mgr (prometheus module
on a free loopback port), memstore OSDs (no disk) and one BlueStore OSD on a sparse file
(the only way to get ``bluestore``, ``rocksdb`` and ``bluefs`` counters). Everything lives in
one temporary directory, under a unique cluster name and fsid, with ``auth none`` (or cephx,
``auth="cephx"``, for tests of keys and caps) and every address on 127.0.0.1, so it never
touches a system cluster or the network.

Daemons run in the foreground (``-f``) as children of this process, with
``PR_SET_PDEATHSIG`` so that they die with it even if pytest is killed; :meth:`stop` kills
them all (also when a test failed) and removes the directory (kept when
``CEPHNODE_KEEP_CLUSTER=1``, for debugging).

A cluster of a newer release runs from a Debian chroot (tests/chroots.py: Reef from
trixie, Tentacle from sid) with ``chroot=DIR``: every daemon and CLI tool is started
through ``chroot DIR``, and the cluster directory lives inside the chroot's /tmp with a
symlink of the same name in the host's /tmp, so that every path (ceph.conf, the admin
sockets, the BlueStore block file) is spelled the same on both sides and the host's
exporter and librados use the very paths the daemons were given.

In tests, :func:`shared_cluster` starts one cluster per release and pytest session,
whichever module asks first (see ``ceph_cluster`` in tests/test_cephcluster.py). From the
shell::

    python tests/cephcluster.py up          # start, print the paths, wait for Ctrl-C
    python tests/cephcluster.py record DIR  # record admin socket payloads (docs/ceph.md)
    CEPHNODE_RELEASE=reef python tests/cephcluster.py record DIR  # ... of a chroot's release
    python tests/cephcluster.py record-kvstats DIR  # dump_objectstore_kv_stats replies
    python tests/cephcluster.py record-slow DIR  # the slow-op signals (record_slow)
    python tests/cephcluster.py record-network DIR  # dump_osd_network (record_network)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# The daemons and tools the harness drives, with the Debian package that ships each.
TOOLS = {
    "ceph-mon": "ceph-mon",
    "ceph-mgr": "ceph-mgr",
    "ceph-osd": "ceph-osd",
    "ceph": "ceph-common",
    "rados": "ceph-common",
    "monmaptool": "ceph-base",
    "ceph-authtool": "ceph-common",
}

# BlueStore needs a block device or a file; a sparse file costs no disk until written.
BLUESTORE_BLOCK_BYTES = 2 * 1024**3
# memstore keeps objects in RAM; this caps what a runaway `rados bench` can take.
MEMSTORE_DEVICE_BYTES = 1024**3
# This OSD's socket is created with admin_socket_mode 0770, as docs/ceph.md recommends.
MODE_0770_OSD = 2
# AF_UNIX paths are limited to 108 bytes (sun_path in <sys/un.h>), so the cluster lives in
# a short directory under /tmp rather than under pytest's deep tmp_path.
SUN_PATH_MAX = 107

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ClusterError(RuntimeError):
    """The cluster did not reach the expected state; the message carries the daemon logs."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child must not dlopen


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the parent dies (no orphaned OSDs).
    "Parent" is the forking thread: start clusters from the main thread."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"({path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class OSD:
    """One OSD: its id, objectstore and the process running it (None before start)."""

    id: int
    objectstore: str
    uuid: str
    proc: subprocess.Popen | None = None

    @property
    def name(self) -> str:
        return f"osd.{self.id}"


@dataclass
class CephCluster:
    """A private Ceph cluster in ``base`` (a fresh short temp dir when not given).

    ``start()`` builds and starts it and waits until every OSD is up and in; ``stop()``
    kills every daemon and removes the directory. Also a context manager.
    """

    memstore_osds: int = 3
    bluestore_osds: int = 1
    # "none", or "cephx": every daemon and client authenticates; the CLI (ceph_cmd) uses
    # client.admin's key (admin_keyring), daemons their own keys in their data dirs.
    auth: str = "none"
    base: Path | None = None
    # A Debian chroot holding the Ceph packages to run (tests/chroots.py); None: the host's.
    chroot: Path | None = None
    # The Ceph release (tests/chroots.py RELEASES) and, once started, the daemons' version
    # ("16.2.15", from ceph-osd --version).
    release: str = "pacific"
    version: str = ""
    keep: bool = field(default_factory=lambda: os.environ.get("CEPHNODE_KEEP_CLUSTER") == "1")
    name: str = field(default_factory=lambda: "cnx" + secrets.token_hex(3))
    fsid: str = field(default_factory=lambda: str(uuid.uuid4()))
    osds: dict[int, OSD] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.auth not in ("none", "cephx"):
            raise ValueError(f"auth must be none or cephx, not {self.auth!r}")
        self._inner: Path | None = None  # the real directory inside the chroot
        if self.base is None and self.chroot is not None:
            self._inner = Path(tempfile.mkdtemp(prefix="cephnode-", dir=self.chroot / "tmp"))
            self._inner.chmod(0o711)
            self.base = Path("/tmp") / self._inner.name
            self.base.symlink_to(self._inner)
        if self.base is None:
            self.base = Path(tempfile.mkdtemp(prefix="cephnode-", dir="/tmp"))
            # Traversable by others, for the permission tests (with cephx its keyrings
            # are here too: throwaway keys of a private cluster).
            self.base.chmod(0o711)
        self.base.mkdir(parents=True, exist_ok=True)
        self.mon_port = free_port()
        self.prometheus_port = free_port()
        if len(str(self.asok("osd.999"))) > SUN_PATH_MAX:
            raise ClusterError(f"{self.base} is too deep for AF_UNIX socket paths")

    # ------------------------------------------------------------------ paths

    @property
    def root(self) -> Path:
        assert self.base is not None
        return self.base

    @property
    def conf(self) -> Path:
        return self.root / "ceph.conf"

    @property
    def socket_dir(self) -> Path:
        """The run_dir: admin sockets (``<cluster>-osd.N.asok``) and pid files."""
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    def asok(self, daemon: str) -> Path:
        return self.socket_dir / f"{self.name}-{daemon}.asok"

    def pid_file(self, daemon: str) -> Path:
        return self.socket_dir / f"{daemon}.pid"

    def osd_pid(self, osd_id: int) -> int:
        """The OSD's pid from its pid file (what the daemon itself wrote)."""
        return int(self.pid_file(f"osd.{osd_id}").read_text().strip())

    def bluestore_block(self, osd_id: int) -> Path:
        return self.root / f"osd.{osd_id}.block"

    @property
    def admin_keyring(self) -> Path:
        """client.admin's keyring (cephx only): every cap on mon, mgr, osd and mds."""
        return self.root / "client.admin.keyring"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}/metrics"

    @property
    def ceph_cmd(self) -> list[str]:
        """The ``ceph`` CLI bound to this cluster; append the command words."""
        return ["ceph", *self._common_args(), "--connect-timeout", "15"]

    @property
    def memstore_ids(self) -> list[int]:
        return [i for i, o in self.osds.items() if o.objectstore == "memstore"]

    @property
    def bluestore_ids(self) -> list[int]:
        return [i for i, o in self.osds.items() if o.objectstore == "bluestore"]

    # ------------------------------------------------------------------ config

    def _write_conf(self) -> None:
        b = self.root
        sections = []
        for osd in self.osds.values():
            lines = []
            if osd.objectstore == "bluestore":
                lines += [
                    "osd_objectstore = bluestore",
                    f"bluestore_block_path = {self.bluestore_block(osd.id)}",
                    "bluestore_block_create = true",
                    f"bluestore_block_size = {BLUESTORE_BLOCK_BYTES}",
                    # A fixed, small cache keeps the test OSD's memory modest.
                    "bluestore_cache_autotune = false",
                    "bluestore_cache_size = 134217728",
                    # RocksDB's compaction statistics for dump_objectstore_kv_stats
                    # (off by default; rocksdb_perf is read when the DB opens).
                    "rocksdb_perf = true",
                    "rocksdb_collect_compaction_stats = true",
                    "rocksdb_collect_extended_stats = true",
                ]
            if osd.id == MODE_0770_OSD:
                lines.append("admin_socket_mode = 0770")
            if lines:
                sections.append(f"[osd.{osd.id}]\n" + "\n".join(lines) + "\n")
        self.conf.write_text(
            "[global]\n"
            f"fsid = {self.fsid}\n"
            f"mon_host = [v2:127.0.0.1:{self.mon_port}]\n"
            "ms_bind_msgr1 = false\n"
            "ms_bind_ipv6 = false\n"
            "public_addr = 127.0.0.1\n"
            "cluster_addr = 127.0.0.1\n"
            f"auth_cluster_required = {self.auth}\n"
            f"auth_service_required = {self.auth}\n"
            f"auth_client_required = {self.auth}\n"
            f"run_dir = {b}/run\n"
            f"log_file = {b}/log/$name.log\n"
            f"pid_file = {b}/run/$name.pid\n"
            f"crash_dir = {b}/crash\n"
            "log_to_stderr = false\n"
            "err_to_stderr = false\n"
            "osd_pool_default_size = 1\n"
            "osd_pool_default_min_size = 1\n"
            "osd_pool_default_pg_num = 8\n"
            "osd_pool_default_pgp_num = 8\n"
            "osd_pool_default_pg_autoscale_mode = off\n"
            "mon_allow_pool_size_one = true\n"
            "mon_allow_pool_delete = true\n"
            "mon_warn_on_pool_no_redundancy = false\n"
            "osd_crush_chooseleaf_type = 0\n"
            # A grace of 8 s makes a stopped replica's PGs laggy fast: the read lease is
            # osd_pool_default_read_lease_ratio (0.8) x osd_heartbeat_grace
            # (PrimaryLogPG::check_laggy, ceph/ceph src/osd/PrimaryLogPG.cc).
            "osd_heartbeat_grace = 8\n"
            # Clients (the CLI) find client.admin's key here; the daemons default to
            # $<type>_data/keyring, so this is the client section's alone.
            + (f"\n[client]\nkeyring = {self.admin_keyring}\n" if self.auth == "cephx" else "")
            + "\n[mon]\n"
            f"mon_data = {b}/mon/$cluster-$id\n"
            f"admin_socket = {b}/run/$cluster-$name.asok\n"
            f"mon_cluster_log_file = {b}/log/cluster.log\n"
            "mgr_initial_modules = prometheus\n"
            "\n[mgr]\n"
            f"mgr_data = {b}/mgr/$cluster-$id\n"
            f"admin_socket = {b}/run/$cluster-$name.asok\n"
            "\n[osd]\n"
            f"osd_data = {b}/osd/$cluster-$id\n"
            f"admin_socket = {b}/run/$cluster-$name.asok\n"
            "osd_objectstore = memstore\n"
            f"memstore_device_bytes = {MEMSTORE_DEVICE_BYTES}\n"
            "\n" + "\n".join(sections)
        )

    # ------------------------------------------------------------------ processes

    def _common_args(self) -> list[str]:
        return ["-c", str(self.conf), "--cluster", self.name]

    def _in_root(self, argv: list[str]) -> list[str]:
        """``argv`` run from the cluster's Ceph installation: through ``chroot`` (which
        execs it, so the process is the daemon itself) or as is on the host."""
        return argv if self.chroot is None else ["chroot", str(self.chroot), *argv]

    def _spawn(self, key: str, argv: list[str]) -> subprocess.Popen:
        with open(self.log_dir / f"{key}.out", "ab") as out:
            proc = subprocess.Popen(
                self._in_root(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                cwd=self.root,
            )
        self.procs.append(proc)
        return proc

    def _run(self, argv: list[str], timeout: float = 60, what: str = "") -> str:
        what = what or " ".join(argv[:3])
        try:
            res = subprocess.run(
                self._in_root(argv),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{what}: timed out after {timeout} s\n{self.logs()}") from exc
        if res.returncode != 0:
            raise ClusterError(
                f"{what} failed (exit {res.returncode}):\n"
                f"{(res.stdout + res.stderr).strip()[-2000:]}\n{self.logs()}"
            )
        return res.stdout

    def ceph(self, *args: str, timeout: float = 60) -> str:
        """Run a ``ceph`` CLI command against this cluster; its stdout."""
        return self._run([*self.ceph_cmd, *args], timeout=timeout, what="ceph " + " ".join(args))

    def ceph_json(self, *args: str, timeout: float = 60) -> Any:
        return json.loads(self.ceph(*args, "--format=json", timeout=timeout))

    def logs(self, lines: int = 20) -> str:
        """The tail of every daemon log, for error messages."""
        if not self.log_dir.is_dir():
            return ""
        parts = []
        for path in sorted(self.log_dir.iterdir()):
            if path.suffix in (".log", ".out") and path.stat().st_size:
                parts.append(f"--- {path.name} (last {lines} lines)\n{_tail(path, lines)}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 90) -> CephCluster:
        """Create and start the cluster; returns when every OSD is up and in."""
        t0 = time.monotonic()
        for d in ("run", "log", "mon", "mgr", "osd", "crash"):
            (self.root / d).mkdir(exist_ok=True)
        for i in range(self.memstore_osds + self.bluestore_osds):
            store = "memstore" if i < self.memstore_osds else "bluestore"
            self.osds[i] = OSD(i, store, str(uuid.uuid4()))
        self._write_conf()
        try:
            self._start(t0, t0 + timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        # "ceph version 18.2.7 (<sha1>) reef (stable)"
        self.version = self._run(["ceph-osd", "--version"], what="ceph-osd --version").split()[2]
        return self

    def _start(self, t0: float, deadline: float) -> None:
        monmap = self.root / "monmap"
        self._run(
            [
                "monmaptool", "--create", "--clobber", "--fsid", self.fsid,
                "--addv", "a", f"[v2:127.0.0.1:{self.mon_port}]", str(monmap),
            ],
            what="monmaptool",
        )  # fmt: skip
        self._run(
            [
                "ceph-mon", *self._common_args(), "--mkfs", "-i", "a", "--monmap", str(monmap),
                *self._mon_keyring_args(),
            ],
            what="ceph-mon --mkfs",
        )  # fmt: skip
        self.daemons["mon.a"] = self._spawn(
            "mon.a", ["ceph-mon", *self._common_args(), "-f", "-i", "a"]
        )
        self._wait_mon(deadline)
        self.timings["mon"] = time.monotonic() - t0
        # Module options live in the mon's config database: set them before the mgr starts,
        # so that the prometheus module never binds its default *:9283. --force: the mon
        # knows module options only once a mgr has reported them.
        self.ceph("config", "set", "mgr", "mgr/prometheus/server_addr", "127.0.0.1", "--force")
        self.ceph(
            "config", "set", "mgr", "mgr/prometheus/server_port", str(self.prometheus_port),
            "--force",
        )  # fmt: skip
        if self.auth == "cephx":
            mgr_data = self.root / "mgr" / f"{self.name}-x"
            mgr_data.mkdir()
            self._daemon_key("mgr.x", mgr_data, "mon", "allow profile mgr", "osd", "allow *",
                             "mds", "allow *")  # fmt: skip
        self.daemons["mgr.x"] = self._spawn(
            "mgr.x", ["ceph-mgr", *self._common_args(), "-f", "-i", "x"]
        )
        # `ceph osd new` allocates ids in order; with auth none it needs no keys.
        for osd in self.osds.values():
            got = int(self.ceph("osd", "new", osd.uuid).strip())
            if got != osd.id:
                raise ClusterError(f"ceph osd new gave id {got}, expected {osd.id}")
            osd_data = self.root / "osd" / f"{self.name}-{osd.id}"
            osd_data.mkdir()
            if self.auth == "cephx":
                self._daemon_key(osd.name, osd_data, "mon", "allow profile osd", "mgr",
                                 "allow profile osd", "osd", "allow *")  # fmt: skip
        # mkfs in parallel: the BlueStore one (RocksDB on a fresh file) takes seconds.
        mkfs = {
            osd.id: subprocess.Popen(
                self._in_root([
                    "ceph-osd", *self._common_args(), "--mkfs", "-i", str(osd.id),
                    "--osd-uuid", osd.uuid,
                ]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            for osd in self.osds.values()
        }  # fmt: skip
        self.procs.extend(mkfs.values())
        for osd_id, proc in mkfs.items():
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise ClusterError(
                    f"ceph-osd --mkfs osd.{osd_id} timed out\n{self.logs()}"
                ) from exc
            if proc.returncode != 0:
                raise ClusterError(
                    f"ceph-osd --mkfs osd.{osd_id} failed ({proc.returncode}):\n"
                    f"{out.decode(errors='replace')[-2000:]}\n{self.logs()}"
                )
        self.timings["mkfs"] = time.monotonic() - t0
        for osd in self.osds.values():
            self._start_osd(osd)
        self.wait_osds_up(deadline=deadline)
        self.timings["osds_up"] = time.monotonic() - t0

    def _mon_keyring_args(self) -> list[str]:
        """With cephx: the mon. key and client.admin's for ``ceph-mon --mkfs --keyring``,
        client.admin's also in :attr:`admin_keyring` for the CLI."""
        if self.auth != "cephx":
            return []
        mon_keyring = self.root / "mon.keyring"
        authtool = ["ceph-authtool", "--create-keyring", "--gen-key"]
        self._run([*authtool, "-n", "mon.", "--cap", "mon", "allow *", str(mon_keyring)])
        self._run(
            [
                *authtool, "-n", "client.admin", "--cap", "mon", "allow *", "--cap", "mgr",
                "allow *", "--cap", "osd", "allow *", "--cap", "mds", "allow *",
                str(self.admin_keyring),
            ]
        )  # fmt: skip
        self._run(["ceph-authtool", str(mon_keyring), "--import-keyring", str(self.admin_keyring)])
        return ["--keyring", str(mon_keyring)]

    def _daemon_key(self, entity: str, data_dir: Path, *caps: str) -> None:
        """Create the daemon's key with ``caps`` into ``data_dir/keyring``, where the
        daemon looks by default."""
        self.ceph("auth", "get-or-create", entity, *caps, "-o", str(data_dir / "keyring"))

    def _start_osd(self, osd: OSD) -> None:
        osd.proc = self._spawn(
            osd.name, ["ceph-osd", *self._common_args(), "-f", "-i", str(osd.id)]
        )
        self.daemons[osd.name] = osd.proc

    def _wait_mon(self, deadline: float) -> None:
        while True:
            self._check_alive()
            res = subprocess.run(
                self._in_root([*self.ceph_cmd, "mon", "stat"]),
                capture_output=True,
                timeout=30,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            if res.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"the mon did not answer in time\n{self.logs()}")
            time.sleep(0.2)

    def _check_alive(self) -> None:
        for key, proc in self.daemons.items():
            if proc.poll() is not None:
                raise ClusterError(f"{key} exited with {proc.returncode}\n{self.logs()}")

    def osd_dump(self) -> dict[str, Any]:
        return self.ceph_json("osd", "dump")

    def osd_states(self) -> dict[int, dict[str, Any]]:
        """``ceph osd dump``'s per-OSD entries (up, in, up_from, ...) by id."""
        return {o["osd"]: o for o in self.osd_dump()["osds"]}

    def wait_osds_up(
        self, ids: list[int] | None = None, deadline: float | None = None, newer_than: int = 0
    ) -> None:
        """Wait until the OSDs are up and in (and booted after epoch ``newer_than``) and
        their admin sockets exist."""
        ids = list(self.osds) if ids is None else ids
        deadline = deadline if deadline is not None else time.monotonic() + 60
        while True:
            self._check_alive()
            state = self.osd_states()
            if all(
                state.get(i, {}).get("up") == 1
                and state.get(i, {}).get("in") == 1
                and state.get(i, {}).get("up_from", 0) > newer_than
                and self.asok(f"osd.{i}").exists()
                for i in ids
            ):
                return
            if time.monotonic() > deadline:
                summary = {i: {k: state.get(i, {}).get(k) for k in ("up", "in")} for i in ids}
                raise ClusterError(f"OSDs not up and in: {summary}\n{self.logs()}")
            time.sleep(0.25)

    def stop(self) -> None:
        """Kill every process started (also SIGSTOPped ones) and remove the directory."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()  # SIGKILL ends a stopped process too
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if self.keep:
            return
        if self._inner is not None:
            shutil.rmtree(self._inner, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                assert self.base is not None
                self.base.unlink()
        elif self.base is not None and self.base.exists():
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> CephCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ test helpers

    def create_pool(self, pool: str, size: int = 1, pg_num: int = 32, timeout: float = 60) -> int:
        """Create a replicated pool (size 1, or 2 for fault tests: min_size 1 either way)
        and wait until its PGs are active+clean; its id."""
        self.ceph("osd", "pool", "create", pool, str(pg_num), str(pg_num), "--size", str(size))
        if size == 1:
            self.ceph("osd", "pool", "set", pool, "size", "1", "--yes-i-really-mean-it")
        self.ceph("osd", "pool", "set", pool, "min_size", "1")
        self.ceph("osd", "pool", "application", "enable", pool, "rados")
        pool_id = next(p["pool"] for p in self.osd_dump()["pools"] if p["pool_name"] == pool)
        self.wait_pgs_clean(pool_id, timeout=timeout)
        return pool_id

    def pgs(self, pool_id: int | None = None) -> list[dict[str, Any]]:
        """``ceph pg dump pgs_brief`` entries (pgid, state, up, acting, acting_primary)."""
        data = self.ceph_json("pg", "dump", "pgs_brief")
        entries = data["pg_stats"] if isinstance(data, dict) else data
        if pool_id is None:
            return entries
        return [e for e in entries if e["pgid"].split(".")[0] == str(pool_id)]

    def wait_pgs_clean(self, pool_id: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            pgs = self.pgs(pool_id)
            if pgs and all(p["state"] == "active+clean" for p in pgs):
                return
            if time.monotonic() > deadline:
                states = sorted({p["state"] for p in pgs})
                raise ClusterError(f"pool {pool_id} PGs not active+clean: {states}\n{self.logs()}")
            time.sleep(0.25)

    def rados_bench_cmd(
        self,
        pool: str,
        seconds: float,
        mode: str = "write",
        block: int = 65536,
        threads: int = 16,
    ) -> list[str]:
        cmd = [
            "rados", *self._common_args(), "-p", pool, "bench", str(max(1, round(seconds))), mode,
            "-t", str(threads),
        ]  # fmt: skip
        if mode == "write":
            cmd += ["-b", str(block), "--no-cleanup"]  # seq/rand read what write left
        return cmd

    def rados_bench(self, pool: str, seconds: float, **kwargs: Any) -> str:
        """Run ``rados bench`` to completion; its report."""
        cmd = self.rados_bench_cmd(pool, seconds, **kwargs)
        return self._run(cmd, timeout=seconds + 60, what="rados bench")

    def bench_background(self, pool: str, seconds: float, **kwargs: Any) -> subprocess.Popen:
        """Start ``rados bench`` and return; the caller waits (stop() kills it anyway)."""
        key = f"bench-{len(self.procs)}"
        return self._spawn(key, self.rados_bench_cmd(pool, seconds, **kwargs))

    def signal_osd(self, osd_id: int, sig: int) -> None:
        proc = self.osds[osd_id].proc
        if proc is None or proc.poll() is not None:
            raise ClusterError(f"osd.{osd_id} is not running")
        os.kill(proc.pid, sig)

    @contextlib.contextmanager
    def stopped(self, osd_id: int) -> Iterator[None]:
        """``kill -STOP`` the OSD for the block; ``kill -CONT`` afterwards, whatever happens."""
        self.signal_osd(osd_id, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ClusterError, ProcessLookupError):
                self.signal_osd(osd_id, signal.SIGCONT)

    def restart_osd(self, osd_id: int, timeout: float = 60) -> None:
        """Stop the OSD (SIGTERM, then SIGKILL), start it again, wait until it is up."""
        osd = self.osds[osd_id]
        before = self.osd_states().get(osd_id, {}).get("up_from", 0)
        if osd.proc is not None and osd.proc.poll() is None:
            osd.proc.send_signal(signal.SIGCONT)
            osd.proc.terminate()
            try:
                osd.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                osd.proc.kill()
                osd.proc.wait(timeout=10)
        self._start_osd(osd)
        self.wait_osds_up([osd_id], deadline=time.monotonic() + timeout, newer_than=before)

    def prometheus_metrics(self, timeout: float = 5) -> str:
        with urllib.request.urlopen(self.prometheus_url, timeout=timeout) as resp:
            return resp.read().decode()

    def wait_prometheus(
        self,
        *needles: str,
        check: Callable[[str], bool] | None = None,
        timeout: float = 60,
    ) -> str:
        """Wait until the mgr's prometheus endpoint answers, contains every needle and
        passes ``check`` (the mgr learns PG states and OSD metadata some seconds after
        the OSDs boot); the exposition text."""
        needles = needles or ("ceph_pg_",)
        deadline = time.monotonic() + timeout
        err: Exception | None = None
        while time.monotonic() < deadline:
            try:
                text = self.prometheus_metrics()
                missing = [n for n in needles if n not in text]
                if not missing and (check is None or check(text)):
                    return text
                err = ClusterError(f"{missing or 'the check'} not satisfied yet")
            except OSError as exc:
                err = exc
            time.sleep(0.5)
        raise ClusterError(f"mgr prometheus at {self.prometheus_url}: {err}\n{self.logs()}")


# ----------------------------------------------------------------------------- pytest

_shared: dict[str, CephCluster] = {}
_shared_error: dict[str, BaseException] = {}


def shared_cluster(config: pytest.Config, release: str = "pacific") -> CephCluster:
    """The session's cluster of ``release`` (tests/chroots.py: pacific on the host, reef
    and tentacle from chroots), started on first use and stopped when pytest ends.

    Any test module may define a session fixture that returns this: they all get the
    same cluster (a fixture imported into several modules would start one per module).
    A failed start is remembered, so the next tests fail at once instead of retrying.
    A chroot that cannot be built is a missing prerequisite: a skip with the reason, a
    failure under CI=true.
    """
    from tests.chroots import RELEASES, ChrootError, ensure_chroot
    from tests.conftest import need, need_root, need_tool

    need_root("starts Ceph daemons (mon, mgr, OSDs)")
    spec = RELEASES[release]
    if spec.suite is None:
        for tool, package in TOOLS.items():
            need_tool(tool, package)
    if release in _shared_error:
        raise ClusterError(
            f"the {release} test cluster failed to start earlier: {_shared_error[release]}"
        )
    if release not in _shared:
        root: Path | None = None
        if spec.suite is not None:
            try:
                root = ensure_chroot(spec)
            except ChrootError as exc:
                _shared_error[release] = exc
                need(False, f"the {spec.suite} chroot for {release} could not be built: {exc}")
        cluster = CephCluster(chroot=root, release=release)
        try:
            cluster.start()
        except BaseException as exc:
            _shared_error[release] = exc
            raise
        config.add_cleanup(cluster.stop)
        _shared[release] = cluster
    return _shared[release]


# ----------------------------------------------------------------------------- recording


def record(cluster: CephCluster, dest: Path) -> dict[str, Any]:
    """Record admin socket payloads from a memstore and the BlueStore OSD into ``dest``.

    The bytes are the replies exactly as the exporter receives them (``format: json``),
    after a short write and read load (so histograms are populated) and, for
    ``dump_ops_in_flight`` and ``dump_historic_slow_ops``, with a replica stopped under a
    size-2 pool's write load (ops stuck in "waiting for sub ops"). docs/ceph.md.
    """
    from cephnode_exporter.ceph.asok import AdminSocket

    memstore, bluestore = cluster.memstore_ids[0], cluster.bluestore_ids[0]
    targets = {"memstore": memstore, "bluestore": bluestore}
    sockets = {kind: AdminSocket(cluster.asok(f"osd.{i}")) for kind, i in targets.items()}
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}

    def save(kind: str, prefix: str) -> None:
        payload = sockets[kind].raw(prefix)
        name = f"{kind}.{prefix.replace(' ', '_')}.json"
        (dest / name).write_bytes(payload)
        files[name] = {"osd": f"osd.{targets[kind]}", "command": prefix, "bytes": len(payload)}

    cluster.create_pool("rec", size=1)
    cluster.rados_bench("rec", 3, mode="write")
    cluster.rados_bench("rec", 2, mode="rand")
    for kind in targets:
        for prefix in ("perf dump", "perf schema", "perf histogram dump", "config show", "version"):
            save(kind, prefix)

    # Stall: a replica of both recorded OSDs' PGs stops under write load. Ops count as
    # slow after osd_op_complaint_time (30 s) and are kept as historic slow ops when they
    # took longer than osd_op_history_slow_op_threshold (10 s): 2 s each, to keep it short.
    cluster.ceph("config", "set", "osd", "osd_op_complaint_time", "2")
    cluster.ceph("config", "set", "osd", "osd_op_history_slow_op_threshold", "2")
    pool_id = cluster.create_pool("stall", size=2, pg_num=16)
    pgs = cluster.pgs(pool_id)
    others = [i for i in cluster.osds if i not in targets.values()]

    def replica_of_both(victim: int) -> bool:
        return all(
            any(p["acting_primary"] == t and victim in p["acting"] for p in pgs)
            for t in targets.values()
        )

    victim = next((i for i in others if replica_of_both(i)), others[0])
    bench = cluster.bench_background("stall", 30, mode="write", block=4096)
    time.sleep(1.5)
    with cluster.stopped(victim):
        time.sleep(4)
        for kind in targets:
            save(kind, "dump_ops_in_flight")
    time.sleep(2)  # the stuck ops complete after SIGCONT and become historic slow ops
    for kind in targets:
        save(kind, "dump_historic_slow_ops")
    bench.kill()
    bench.wait()
    version = json.loads((dest / "bluestore.version.json").read_bytes())
    env = f"CEPHNODE_RELEASE={os.environ.get('CEPHNODE_RELEASE', '?')} " if cluster.chroot else ""
    manifest = {
        "ceph_version": version.get("version"),
        "release": version.get("release"),
        "recorded_with": f"{env}python tests/cephcluster.py record {_repo_relative(dest)}",
        "recorded_on": time.strftime("%Y-%m-%d", time.gmtime()),
        "packages": "Debian "
        + ("bookworm (host)" if cluster.chroot is None else f"chroot {cluster.chroot.name}"),
        "stalled_replica": f"osd.{victim}",
        "files": files,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _repo_relative(path: Path) -> str:
    """``path`` as given on the command line from the repository root, for manifests."""
    try:
        return str(path.resolve().relative_to(Path(__file__).resolve().parent.parent))
    except ValueError:
        return str(path)


def record_kv_stats(cluster: CephCluster, dest: Path) -> dict[str, Any]:
    """Record ``dump_objectstore_kv_stats`` of the BlueStore OSD into ``dest``: with both
    statistics sections after a small-object write load and a compaction, then with
    only the compaction table, then with neither (an empty reply; the options changed
    at runtime and restored). Not in :func:`record`: that would re-record every payload
    the other tests' numbers come from. docs/ceph.md."""
    from cephnode_exporter.ceph.asok import AdminSocket

    osd_id = cluster.bluestore_ids[0]
    sock = AdminSocket(cluster.asok(f"osd.{osd_id}"))
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}

    def save(name: str) -> None:
        payload = sock.raw("dump_objectstore_kv_stats")
        (dest / name).write_bytes(payload)
        files[name] = {"osd": f"osd.{osd_id}", "command": "dump_objectstore_kv_stats",
                       "bytes": len(payload)}  # fmt: skip

    def option(name: str, value: str) -> None:
        cluster.ceph("tell", f"osd.{osd_id}", "config", "set", name, value)

    cluster.create_pool("reckv", size=1)
    cluster.rados_bench("reckv", 5, mode="write", block=4096)
    cluster.ceph("tell", f"osd.{osd_id}", "compact", timeout=120)
    save("both.json")
    option("rocksdb_collect_extended_stats", "false")
    try:
        save("compaction.json")
        option("rocksdb_perf", "false")
        save("off.json")
    finally:
        option("rocksdb_perf", "true")
        option("rocksdb_collect_extended_stats", "true")
    version = AdminSocket(cluster.asok(f"osd.{osd_id}")).command("version")
    manifest = {
        "ceph_version": version.get("version"),
        "recorded_with": (
            (
                f"CEPHNODE_RELEASE={os.environ.get('CEPHNODE_RELEASE', '?')} "
                if cluster.chroot
                else ""
            )
            + f"python tests/cephcluster.py record-kvstats {_repo_relative(dest)}"
        ),
        "recorded_on": time.strftime("%Y-%m-%d", time.gmtime()),
        "files": files,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def record_slow(cluster: CephCluster, dest: Path) -> dict[str, Any]:
    """Record the replies that carry the newer releases' slow-op signals into ``dest``:
    ``perf dump`` of a memstore and the BlueStore OSD once the slow-op counters moved,
    and, with a replica stopped under a size-2 pool's write load, ``dump_ops_in_flight``
    and ``dump_blocked_ops_count`` back to back (the current count two ways). Also the
    replies the exporter does not read but docs/ceph.md evaluates: ``counter dump``
    (Reef and later) and each OSD's ``get_command_descriptions`` (the allowlist test).

    The counters move only past their thresholds, so these are lowered first:
    ``osd_op_history_slow_op_threshold`` (trackedop.slow_ops_count counts completed ops
    slower than it, 10 s by default), ``bluestore_log_op_age`` (BlueStore's slow_*_count,
    5 s by default) and ``osd_op_complaint_time`` (the blocked count, 30 s). Not in
    :func:`record`: that would re-record every payload the other tests' numbers come from.
    The commands outside the allowlist go through the ``ceph --admin-daemon`` CLI.
    """
    from cephnode_exporter.ceph.asok import AdminSocket

    memstore, bluestore = cluster.memstore_ids[0], cluster.bluestore_ids[0]
    targets = {"memstore": memstore, "bluestore": bluestore}
    sockets = {kind: AdminSocket(cluster.asok(f"osd.{i}")) for kind, i in targets.items()}
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}

    def keep(kind: str, prefix: str, payload: bytes) -> None:
        name = f"{kind}.{prefix.replace(' ', '_')}.json"
        (dest / name).write_bytes(payload)
        files[name] = {"osd": f"osd.{targets[kind]}", "command": prefix, "bytes": len(payload)}

    def save(kind: str, prefix: str) -> None:
        keep(kind, prefix, sockets[kind].raw(prefix))

    def cli(kind: str, prefix: str) -> None:
        argv = ["ceph", "--admin-daemon", str(cluster.asok(f"osd.{targets[kind]}"))]
        proc = subprocess.run(
            [*argv, *prefix.split(), "--format", "json"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if proc.returncode == 0:  # counter dump: not on Pacific
            keep(kind, prefix, proc.stdout)

    cluster.ceph("config", "set", "osd", "osd_op_complaint_time", "2")
    cluster.ceph("config", "set", "osd", "osd_op_history_slow_op_threshold", "0.005")
    cluster.ceph("config", "set", "osd", "bluestore_log_op_age", "0.0005")
    pool_id = cluster.create_pool("slow", size=2, pg_num=16)
    pgs = cluster.pgs(pool_id)
    others = [i for i in cluster.osds if i not in targets.values()]

    def replica_of_both(victim: int) -> bool:
        return all(
            any(p["acting_primary"] == t and victim in p["acting"] for p in pgs)
            for t in targets.values()
        )

    victim = next((i for i in others if replica_of_both(i)), others[0])
    bench = cluster.bench_background("slow", 30, mode="write", block=4096, threads=64)
    time.sleep(3)
    for kind in targets:
        save(kind, "perf dump")
    with cluster.stopped(victim):
        time.sleep(4)
        for kind in targets:
            save(kind, "dump_ops_in_flight")
            cli(kind, "dump_blocked_ops_count")
    bench.kill()
    bench.wait()
    for kind in targets:
        cli(kind, "counter dump")
        cli(kind, "get_command_descriptions")
        save(kind, "config show")
        save(kind, "version")
    version = json.loads((dest / "bluestore.version.json").read_bytes())
    env = f"CEPHNODE_RELEASE={os.environ.get('CEPHNODE_RELEASE', '?')} " if cluster.chroot else ""
    manifest = {
        "ceph_version": version.get("version"),
        "release": version.get("release"),
        "recorded_with": f"{env}python tests/cephcluster.py record-slow {_repo_relative(dest)}",
        "recorded_on": time.strftime("%Y-%m-%d", time.gmtime()),
        "stalled_replica": f"osd.{victim}",
        "files": files,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def record_network(cluster: CephCluster, dest: Path) -> dict[str, Any]:
    """Record ``dump_osd_network`` (every peer: ``value`` 0) of a memstore and the
    BlueStore OSD into ``dest``: at rest once each OSD has pinged its peers for a while
    (``rest``), then after one peer was stopped for ``STALL_S`` seconds under a write load
    and both OSDs closed a 1-minute interval for it (``stalled``): the pings sent to it
    are answered when it continues, so their round trip, and that peer's 1-minute average,
    carry the stall, as a peer behind a slow link would. A stopped process, not a delay on
    the loopback interface: ``tc netem`` on ``lo`` would slow everything else on the
    machine. Not in :func:`record`: that would
    re-record every payload the other tests' numbers come from. docs/ceph.md.
    """
    from cephnode_exporter.ceph.asok import AdminSocket

    memstore, bluestore = cluster.memstore_ids[0], cluster.bluestore_ids[0]
    targets = {"memstore": memstore, "bluestore": bluestore}
    sockets = {kind: AdminSocket(cluster.asok(f"osd.{i}")) for kind, i in targets.items()}
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    timings: dict[str, float] = {}

    def save(kind: str, state: str) -> None:
        t0 = time.perf_counter()
        payload = sockets[kind].raw("dump_osd_network", value=0)
        timings[f"{kind}.{state}"] = round(time.perf_counter() - t0, 6)
        name = f"{kind}.dump_osd_network.{state}.json"
        (dest / name).write_bytes(payload)
        files[name] = {"osd": f"osd.{targets[kind]}", "command": "dump_osd_network",
                       "args": {"value": 0}, "bytes": len(payload)}  # fmt: skip

    # An OSD lists a peer once they share a PG and a ping came back (every
    # osd_heartbeat_interval, 6 s, jittered): a size-2 pool, then wait until both
    # recorded OSDs list a peer on both interfaces.
    pool_id = cluster.create_pool("net", size=2, pg_num=16)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        replies = [s.command("dump_osd_network", value=0) for s in sockets.values()]
        if all({e.get("interface") for e in r["entries"]} == {"back", "front"} for r in replies):
            break
        time.sleep(2)
    time.sleep(NETWORK_SETTLE_S)
    for kind in targets:
        save(kind, "rest")
    pgs = cluster.pgs(pool_id)
    others = [i for i in cluster.osds if i not in targets.values()]
    victim = next(
        (i for i in others if all(any(i in p["acting"] and t in p["acting"] for p in pgs)
                                  for t in targets.values())),
        others[0],
    )  # fmt: skip
    bench = cluster.bench_background("net", 120, mode="write", block=4096)
    time.sleep(1.5)

    def updated(kind: str) -> list[float]:
        """When the recorded OSD last closed an interval for the stopped peer (the entry's
        "last update", a ctime(3) string in the daemon's local time), per interface."""
        reply = sockets[kind].command("dump_osd_network", value=0)
        return [
            time.mktime(time.strptime(e["last update"], "%a %b %d %H:%M:%S %Y"))
            for e in reply["entries"]
            if e["to osd"] == victim
        ]

    with cluster.stopped(victim):
        time.sleep(STALL_S)
    resumed = time.time()
    # A peer's averages are computed when its 1-minute interval closes (OSD.cc
    # handle_osd_ping; ceph/ceph qa/standalone/misc/network-ping.sh waits for "1 cycle"):
    # wait until both recorded OSDs closed one for the stopped peer, on both interfaces,
    # after the held pings were answered.
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        times = [updated(kind) for kind in targets]
        if all(len(t) == 2 and min(t) >= resumed + 2 for t in times):
            break
        time.sleep(2)
    for kind in targets:
        save(kind, "stalled")
    bench.kill()
    bench.wait()
    version = AdminSocket(cluster.asok(f"osd.{bluestore}")).command("version")
    env = f"CEPHNODE_RELEASE={os.environ.get('CEPHNODE_RELEASE', '?')} " if cluster.chroot else ""
    manifest = {
        "ceph_version": version.get("version"),
        "release": version.get("release"),
        "recorded_with": f"{env}python tests/cephcluster.py record-network {_repo_relative(dest)}",
        "recorded_on": time.strftime("%Y-%m-%d", time.gmtime()),
        "packages": "Debian "
        + ("bookworm (host)" if cluster.chroot is None else f"chroot {cluster.chroot.name}"),
        "stalled_peer": f"osd.{victim}",
        "stall_seconds": STALL_S,
        "seconds_per_command": timings,
        "files": files,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


# record_network: seconds the recorded OSDs keep pinging before the reply at rest, and
# the peer's stop.
NETWORK_SETTLE_S = 10.0
STALL_S = 3.0


def main(argv: list[str]) -> int:
    commands = ("up", "record", "record-kvstats", "record-slow", "record-network")
    if not argv or argv[0] not in commands or (argv[0] != "up" and len(argv) != 2):
        print(__doc__, file=sys.stderr)
        return 2
    # A background job of a non-interactive shell ignores SIGINT: make both signals end
    # the block below, so that stop() runs.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    release = os.environ.get("CEPHNODE_RELEASE", "pacific")
    from tests.chroots import RELEASES, ensure_chroot

    suite = RELEASES[release].suite
    root = ensure_chroot(RELEASES[release]) if suite is not None else None
    with CephCluster(chroot=root, release=release) as cluster:
        print(f"cluster {cluster.name} up in {cluster.timings['start']:.1f} s: {cluster.timings}")
        print(f"conf: {cluster.conf}\nsockets: {cluster.socket_dir}")
        print(f"ceph: {' '.join(cluster.ceph_cmd)}", flush=True)
        if argv[0] != "up":
            recorders = {
                "record": record,
                "record-kvstats": record_kv_stats,
                "record-network": record_network,
            }
            recorder = recorders.get(argv[0], record_slow)
            manifest = recorder(cluster, Path(argv[1]))
            print(json.dumps(manifest, indent=2))
            return 0
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main(sys.argv[1:]))
