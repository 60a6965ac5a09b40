"""Hardening of the admin socket path and of the per-collector cardinality.

- One OSD seen through two sockets (a stale package-layout file left by ``cephadm
  adopt``, a symlink) is reported once; two clusters with the same OSD id stay apart.
- Replies are bounded per command, in bytes before reading and in JSON items before
  parsing: a hostile 12 MB reply of a million keys no longer takes the exporter's memory
  to a gigabyte. The caps keep a wide margin over what real OSDs answer.
- An NVMe attribute file larger than any the kernel writes skips that attribute only.
- ``--collector.nvme.max-devices``, ``--collector.net.max-interfaces`` and
  ``--collector.osd.max-sockets`` bound the series of each collector.

Hostile peers are real AF_UNIX sockets served by threads (tests/test_asok.py), host trees
are generated fixtures (tests/fixtures/sysfsgen.py); nothing is mocked.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import asok, perf
from cephnode_exporter.ceph.asok import AdminSocket, AsokReplyTooLarge, json_items
from cephnode_exporter.ceph.discovery import (
    Answer,
    OSDSocket,
    choose_sockets,
    discover_osd_sockets,
    limit_sockets,
)
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors.base import ItemLimit
from cephnode_exporter.hostfs.names import natural_key

from tests.conftest import REPO, MakeTree, Tree, collect, samples, value
from tests.test_asok import FakeServer, hang, reply
from tests.test_net import only_net, port
from tests.test_net import small as small_net
from tests.test_nvme import NVME0, NVME0_PCI, ONLY_NVME
from tests.test_nvme import small as small_nvme
from tests.test_osd import ONLY_OSD, RecordedOSD, payload, recorded_osd

FIXTURES = REPO / "tests" / "fixtures" / "ceph"
FSID_A = "2fa54258-9a6e-40c6-9c75-7f2a8c8a3440"
FSID_B = "8110b811-229a-4333-88ae-f75e82aa38ff"


# -------------------------------------------------------------------------------- helpers


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A socket directory under /tmp (sun_path is 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="hs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def servers() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.close()


def osd_of(fsid: str, kind: str = "memstore") -> RecordedOSD:
    """A recorded OSD whose config show reports ``fsid``."""
    handler = recorded_osd(kind)
    config = json.loads(handler.replies["config show"])
    config["fsid"] = fsid
    handler.set("config show", config)
    return handler


def listen(servers: list[FakeServer], path: Path, handler: Any) -> FakeServer:
    path.parent.mkdir(parents=True, exist_ok=True)
    server = FakeServer(path, handler)
    servers.append(server)
    return server


def stale(path: Path) -> None:
    """A socket file nobody listens on: what a killed daemon leaves behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


def osd_flags(tree: Tree, sock_dir: Path, *extra: str) -> list[str]:
    return [*tree.flags, f"--ceph.socket-dir={sock_dir}", *ONLY_OSD, *extra]


def exposition_lines(collection: Collection) -> list[str]:
    """The sample lines as Prometheus receives them (name and labels, no value)."""
    from cephnode_exporter.exposition import encode

    text = encode(collection.families()).decode()
    return [line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")]


def assert_no_duplicate_series(collection: Collection) -> None:
    lines = exposition_lines(collection)
    dupes = sorted({line for line in lines if lines.count(line) > 1})
    assert dupes == [], dupes


def success(collection: Collection) -> dict[str, float]:
    """ceph_daemon -> cephnode_osd_scrape_success, failing on a repeated daemon."""
    out: dict[str, float] = {}
    for family in collection.families():
        if family.name != "cephnode_osd_scrape_success":
            continue
        for s in family.samples:
            d = s.labels["ceph_daemon"]
            assert d not in out, f"two series for {d}"
            out[d] = s.value
    return out


# ------------------------------------------------------------------ 5: one socket per OSD


def test_a_stale_package_socket_beside_the_cephadm_one(
    node_trees: dict[str, Tree],
    sock_dir: Path,
    servers: list[FakeServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After `cephadm adopt`: the daemon listens in <fsid>/, the package layout's file
    was left behind. One series set for osd.3, healthy; the stale file is counted and
    logged once, naming the socket that serves the OSD."""
    live = sock_dir / FSID_A / "ceph-osd.3.asok"
    listen(servers, live, osd_of(FSID_A, "bluestore"))
    stale(sock_dir / "ceph-osd.3.asok")
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.osd")
    scraper = build_scraper(
        parse_args(["dump", *osd_flags(node_trees["epyc9454p-tuned"], sock_dir)])
    )
    try:
        for _ in range(2):
            c = scraper.collect(10.0)
            assert_no_duplicate_series(c)
            assert success(c) == {"osd.3": 1.0}
            assert value(c, "cephnode_osd_sockets") == 1
            assert value(c, "cephnode_osd_sockets_ignored", reason="stale") == 1
            assert value(c, "cephnode_osd_sockets_ignored", reason="duplicate") == 0
            assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0
    finally:
        scraper.close()
    left_out = [r for r in caplog.records if "left out" in r.getMessage()]
    assert len(left_out) == 1  # once, not every scrape
    fields = left_out[0].kv  # type: ignore[attr-defined]
    assert fields["path"] == str(sock_dir / "ceph-osd.3.asok")
    assert fields["instead"] == str(live) and fields["reason"] == "stale"
    assert not [r for r in caplog.records if r.getMessage() == "OSD admin socket query failed"]


def test_a_symlink_to_the_live_socket_is_a_duplicate(
    node_trees: dict[str, Tree], sock_dir: Path, servers: list[FakeServer]
) -> None:
    """Both paths answer, with the same fsid: the one in its cluster's cephadm directory
    is kept, the other is a duplicate."""
    live = sock_dir / FSID_A / "ceph-osd.3.asok"
    listen(servers, live, osd_of(FSID_A))
    (sock_dir / "ceph-osd.3.asok").symlink_to(live)
    c = collect(osd_flags(node_trees["epyc9454p-tuned"], sock_dir))
    assert_no_duplicate_series(c)
    assert success(c) == {"osd.3": 1.0}
    assert value(c, "cephnode_osd_sockets_ignored", reason="duplicate") == 1
    assert value(c, "cephnode_osd_sockets_ignored", reason="stale") == 0


@pytest.mark.parametrize("layout", ["package", "cephadm"])
def test_two_clusters_with_the_same_osd_id_stay_apart(
    node_trees: dict[str, Tree], sock_dir: Path, servers: list[FakeServer], layout: str
) -> None:
    """Two clusters on one node, both with an osd.0 (and one with an osd.1 too): both
    osd.0 are reported, under ceph_daemon names that say their cluster; osd.1 keeps its
    plain name."""
    if layout == "package":
        paths = {"ceph": sock_dir / "ceph-osd.0.asok", "backup": sock_dir / "backup-osd.0.asok"}
    else:
        paths = {f: sock_dir / f / "ceph-osd.0.asok" for f in (FSID_A, FSID_B)}
    (first, a), (second, b) = paths.items()
    listen(servers, a, osd_of(FSID_A))
    listen(servers, b, osd_of(FSID_B, "bluestore"))
    listen(servers, a.parent / f"{a.name.split('-osd')[0]}-osd.1.asok", osd_of(FSID_A))
    c = collect(osd_flags(node_trees["epyc9454p-tuned"], sock_dir))
    assert_no_duplicate_series(c)
    assert success(c) == {f"{first}-osd.0": 1.0, f"{second}-osd.0": 1.0, "osd.1": 1.0}
    assert value(c, "cephnode_osd_sockets") == 3
    assert value(c, "cephnode_osd_sockets_ignored", reason="duplicate") == 0
    # Each series set is its own OSD's: the BlueStore one has the BlueStore counters.
    commit = "cephnode_osd_bluestore_commit_latency_seconds_count"
    assert value(c, commit, ceph_daemon=f"{second}-osd.0") is not None
    assert value(c, commit, ceph_daemon=f"{first}-osd.0") is None


def s(
    cluster: str, osd_id: int, name: str, layout: str = "package", mtime: float = 0.0
) -> OSDSocket:
    return OSDSocket(cluster, osd_id, f"/run/ceph/{name}", layout, mtime)


def test_choose_sockets_rules() -> None:
    """The decision table of choose_sockets, on the facts alone."""
    pkg = s("ceph", 3, "ceph-osd.3.asok", mtime=100)
    adm = s(FSID_A, 3, f"{FSID_A}/ceph-osd.3.asok", "cephadm", mtime=50)
    lone = s("ceph", 7, "ceph-osd.7.asok")
    # The package socket is the newer file, but the cephadm one is in its fsid's directory.
    both = {pkg.path: Answer(fsid=FSID_A), adm.path: Answer(fsid=FSID_A.upper())}
    got = choose_sockets([pkg, adm, lone], both)
    assert [k.path for k in got.kept] == [adm.path, lone.path]
    assert [(d.socket.path, d.reason, d.instead) for d in got.dropped] == [
        (pkg.path, "duplicate", adm.path)
    ]
    # Same cluster, neither at home: the newest file (the daemon that started last).
    old, new = s("ceph", 1, "ceph-osd.1.asok", mtime=1), s("ceph", 1, "link-osd.1.asok", mtime=2)
    got = choose_sockets([old, new], {old.path: Answer(fsid=FSID_A), new.path: Answer(fsid=FSID_A)})
    assert [k.path for k in got.kept] == [new.path]
    # Refused beside a live one: stale, even when the stale one is newer.
    got = choose_sockets([pkg, adm], {pkg.path: Answer(refused=True)})
    assert [k.path for k in got.kept] == [adm.path]
    assert [(d.reason, d.instead) for d in got.dropped] == [("stale", adm.path)]
    # Nobody listens on either: one is kept to report the dead OSD, the other is stale.
    got = choose_sockets([pkg, adm], {p: Answer(refused=True) for p in (pkg.path, adm.path)})
    assert [k.path for k in got.kept] == [pkg.path] and got.dropped[0].reason == "stale"
    # A lone refused socket is kept: a dead OSD must be reported, not hidden.
    got = choose_sockets([lone], {lone.path: Answer(refused=True)})
    assert got.kept == [lone] and got.dropped == []
    # Different fsids: both kept, named after their cluster; a hung one whose fsid was
    # never learnt counts as its own cluster (its name), so it is shown, not hidden.
    got = choose_sockets([pkg, adm], {pkg.path: Answer(fsid=FSID_B), adm.path: Answer(fsid=FSID_A)})
    assert sorted(k.ceph_daemon for k in got.kept) == [f"{FSID_A}-osd.3", "ceph-osd.3"]
    got = choose_sockets([pkg, adm], {adm.path: Answer(fsid=FSID_A)})
    assert sorted(k.ceph_daemon for k in got.kept) == [f"{FSID_A}-osd.3", "ceph-osd.3"]


def test_discovery_records_the_socket_time(sock_dir: Path) -> None:
    stale(sock_dir / "ceph-osd.0.asok")
    os.utime(sock_dir / "ceph-osd.0.asok", (1_000_000, 1_000_000))
    (found,) = discover_osd_sockets(str(sock_dir))
    assert found.mtime == 1_000_000
    assert found == OSDSocket("ceph", 0, str(sock_dir / "ceph-osd.0.asok"), "package")


# --------------------------------------------------------------------- 6: bounded replies


def million_keys() -> bytes:
    """A 12 MB JSON object of a million keys: under the 16 MiB ceiling."""
    body = b",".join(b'"k%07d":0' % i for i in range(1_000_000))
    return b"{" + body + b"}"


# The exporter's own entry point, reporting its peak RSS (VmHWM) on exit. Not ru_maxrss
# of the child: Linux carries that over exec() from the forked copy of this test process.
_MEASURED = """
import sys
from cephnode_exporter.cli import main
try:
    code = main(sys.argv[2:])
finally:
    status = open("/proc/self/status").read()
    hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    open(sys.argv[1], "w").write(hwm.split()[1])
sys.exit(code)
"""


def run_measured(args: list[str], timeout: float = 120) -> tuple[int, str, str, int]:
    """Run the exporter's main() in a fresh interpreter; its exit code, stdout, stderr and
    peak resident memory in bytes (VmHWM)."""
    with tempfile.NamedTemporaryFile() as hwm:
        proc = subprocess.run(
            [sys.executable, "-c", _MEASURED, hwm.name, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        kib = Path(hwm.name).read_text()
    return proc.returncode, proc.stdout, proc.stderr, int(kib) * 1024


# Peak RSS of the exporter process. Measured on the 2-core VM: 32 MiB with the caps (as
# without the hostile OSD); 591 MiB before them, when every command's 12 MB reply was
# parsed and held until the OSD's task ended.
RSS_LIMIT = 128 * 1024 * 1024


def dump_within_rss_limit(tree: Tree, sock_dir: Path) -> tuple[str, str]:
    """``dump`` of the OSDs in ``sock_dir`` in a fresh interpreter: its stdout and stderr,
    after asserting it exited 0 with a peak RSS under RSS_LIMIT."""
    code, out, err, rss = run_measured(
        ["dump", *osd_flags(tree, sock_dir), "--collector.osd.timeout=4"]
    )
    assert code == 0, err
    assert rss < RSS_LIMIT, f"peak RSS {rss >> 20} MiB"
    return out, err


def test_a_million_keys_under_16_mib_do_not_blow_up_memory(
    node_trees: dict[str, Tree], sock_dir: Path, servers: list[FakeServer]
) -> None:
    payload = reply(million_keys())
    assert len(payload) < asok.DEFAULT_MAX_REPLY_BYTES

    def hostile(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        if request:
            conn.sendall(payload)

    listen(servers, sock_dir / "ceph-osd.0.asok", hostile)
    listen(servers, sock_dir / "ceph-osd.1.asok", recorded_osd("memstore"))
    out, err = dump_within_rss_limit(node_trees["epyc9454p-tuned"], sock_dir)
    assert 'cephnode_osd_scrape_success{ceph_daemon="osd.0"} 0.0' in out
    assert 'cephnode_osd_scrape_success{ceph_daemon="osd.1"} 1.0' in out
    assert 'cephnode_scrape_collector_success{collector="osd"} 1.0' in out
    (line,) = [x for x in err.splitlines() if "OSD admin socket query failed" in x]
    assert "reason=too_large" in line and "cap for this command is 262144" in line


def test_replies_near_their_caps_from_many_osds_stay_within_the_units_memory(
    node_trees: dict[str, Tree], sock_dir: Path, servers: list[FakeServer]
) -> None:
    """Twelve OSDs answer dump_osd_network with 1.9 MB of 100,000 entries that are no
    heartbeat entries (33 MB once decoded), within its byte and item caps, beside a good
    OSD. The decoded reply is dropped as soon as the round has parsed it, the parse error
    keeps no frame holding it, and the run's replies are bounded together: the peak RSS
    stays under RSS_LIMIT. Before, each decoded reply was kept until every round ended:
    383 MiB for ten such OSDs, 857 MiB for thirty, past the unit's MemoryMax=256M."""
    entries = b",".join(b'{"a%d":%d.5}' % (i, i) for i in range(99_990))
    network = b'{"threshold":0,"entries":[' + entries + b"]}"
    spec = asok.ALLOWED_COMMANDS["dump_osd_network"]
    assert len(network) < spec.max_bytes and json_items(network) < spec.max_items
    listen(servers, sock_dir / "ceph-osd.0.asok", recorded_osd("memstore"))
    for i in range(1, 13):
        listen(
            servers,
            sock_dir / f"ceph-osd.{i}.asok",
            recorded_osd("memstore", {"dump_osd_network": network}),
        )
    out, _ = dump_within_rss_limit(node_trees["epyc9454p-tuned"], sock_dir)
    assert 'cephnode_osd_scrape_success{ceph_daemon="osd.0"} 1.0' in out
    assert 'cephnode_osd_scrape_success{ceph_daemon="osd.12"} 0.0' in out
    assert 'cephnode_scrape_collector_success{collector="osd"} 1.0' in out


@pytest.fixture
def serve_one(sock_dir: Path, servers: list[FakeServer]) -> Callable[[Any], str]:
    def start(handler: Any) -> str:
        return listen(servers, sock_dir / f"s{len(servers)}.asok", handler).path

    return start


def test_a_reply_over_its_command_cap_is_refused_before_reading(
    serve_one: Callable[[Any], str],
) -> None:
    """perf dump is about 19 KB: a daemon announcing 600 KB (far under 16 MiB) is refused
    at the length, nothing of the payload is read or waited for."""

    def announce(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall((600_000).to_bytes(4, "big"))
        stop.wait(30)

    sock = AdminSocket(serve_one(announce), timeout=5)
    start = time.monotonic()
    with pytest.raises(
        AsokReplyTooLarge, match="announced 600000 bytes, the cap for this command is 524288"
    ):
        sock.command("perf dump")
    assert time.monotonic() - start < 1.0


def test_too_many_json_items_are_refused_before_parsing_but_a_real_stall_is_read(
    serve_one: Callable[[Any], str],
    node_trees: dict[str, Tree],
    sock_dir: Path,
    servers: list[FakeServer],
) -> None:
    """200,000 empty objects are 600 KB of reply, under dump_ops_in_flight's 4 MiB, but
    13 MB once parsed (400,000 items: commas and brackets): refused on the item count,
    and never parsed. The cap must not cost
    the metrics when they matter most: 2,000 real ops in flight (the recorded stall's ops
    repeated: 2.8 MB) are read as usual."""
    payload = b"[" + b",".join([b"{}"] * 200_000) + b"]"
    assert len(payload) < asok.ALLOWED_COMMANDS["dump_ops_in_flight"].max_bytes
    data = reply(payload)  # built before tracemalloc starts: the server's, not ours
    sock = AdminSocket(serve_one(lambda conn, request, stop: conn.sendall(data)))
    tracemalloc.start()
    try:
        with pytest.raises(
            AsokReplyTooLarge, match="holds 400000 JSON items, the cap for this command is 160000"
        ) as err:
            sock.command("dump_ops_in_flight")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.reason == "too_large"
    assert peak < 4 * len(payload)  # the reply and its copy, no parsed objects

    recorded = json.loads((FIXTURES / "bluestore.dump_ops_in_flight.json").read_bytes())
    ops = [copy.deepcopy(recorded["ops"][i % len(recorded["ops"])]) for i in range(2000)]
    handler = recorded_osd("bluestore", {"dump_ops_in_flight": {"ops": ops, "num_ops": 2000}})
    assert len(handler.replies["dump_ops_in_flight"]) > 2_000_000
    listen(servers, sock_dir / "ceph-osd.3.asok", handler)
    c = collect(osd_flags(node_trees["epyc9454p-tuned"], sock_dir))
    assert success(c) == {"osd.3": 1.0}
    assert value(c, "cephnode_osd_ops_in_flight", ceph_daemon="osd.3") == 2000


def test_every_cap_keeps_a_margin_over_the_recorded_replies() -> None:
    """The replies recorded from the Pacific cluster (tests/fixtures/ceph) are at most an
    eighth of their command's caps, in bytes and in items."""
    for directory in (FIXTURES, FIXTURES / "kvstats", FIXTURES / "network"):
        manifest = json.loads((directory / "manifest.json").read_bytes())
        for name, meta in manifest["files"].items():
            payload = (directory / name).read_bytes()
            spec = asok.ALLOWED_COMMANDS[meta["command"]]
            assert len(payload) * 8 <= spec.max_bytes, name
            assert json_items(payload) * 8 <= spec.max_items, name


# ------------------------------------------------------------------------ 9: one bad file


BIG = "A" * 70_000 + "\n"  # larger than any sysfs attribute (a page) and MAX_READ_BYTES


@pytest.mark.parametrize(
    ("rel", "gone"),
    [
        (f"{NVME0}/model", ("cephnode_nvme_controller_info", "controller")),
        (f"{NVME0_PCI}/current_link_speed", (
            "cephnode_nvme_pcie_current_link_transfers_per_second", "controller")),
        (f"{NVME0}/nvme0n1/queue/scheduler", ("cephnode_nvme_scheduler_info", "device")),
        (f"{NVME0}/nvme0n1/queue/wbt_lat_usec", ("cephnode_nvme_queue_wbt_latency_seconds",
                                                 "device")),
    ],
    ids=["model", "link-speed", "scheduler", "wbt"],
)  # fmt: skip
def test_a_70_kb_attribute_skips_that_attribute_only(
    make_tree: MakeTree, rel: str, gone: tuple[str, str]
) -> None:
    tree = make_tree(small_nvme("epyc9454p-tuned"))
    (tree.root / rel).write_text(BIG)
    c = collect([*tree.flags, *ONLY_NVME])
    assert value(c, "cephnode_scrape_collector_success", collector="nvme") == 1
    assert value(c, "cephnode_scrape_collector_read_errors", collector="nvme") == 1
    name, label = gone
    subject = "nvme0" if label == "controller" else "nvme0n1"
    present = {dict(labels)[label] for n, labels in samples(c) if n == name}
    assert subject not in present
    assert len(present) == 9  # the other controllers or namespaces are all there
    # The rest of the controller and of its namespace is still exported.
    assert value(c, "cephnode_nvme_queues", controller="nvme0") == 97
    assert value(c, "cephnode_nvme_queue_requests", device="nvme0n1") is not None


# ------------------------------------------------------------------------ 11: cardinality


def test_natural_order_and_the_limit_log(caplog: pytest.LogCaptureFixture) -> None:
    names = ["nvme10", "nvme2", "nvme1", "eth0", "nvme1n2", "nvme1n10"]
    assert sorted(names, key=natural_key) == ["eth0", "nvme1", "nvme1n2", "nvme1n10", "nvme2",
                                              "nvme10"]  # fmt: skip

    class Item:
        def __init__(self, name: str) -> None:
            self.name = name

    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.base")
    limit = ItemLimit("nvme", "controllers", "--collector.nvme.max-devices", 2)
    items = [Item(n) for n in ("nvme10", "nvme2", "nvme1")]
    for _ in range(3):
        kept, dropped = limit.keep(items)
        assert [i.name for i in kept] == ["nvme2", "nvme1"]  # given order, natural choice
        assert dropped == 1
    kept, dropped = limit.keep(items[1:])
    assert dropped == 0 and len(kept) == 2
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages == [
        ("WARNING", "too many items: only the first ones are exported"),
        ("INFO", "item count back under the limit"),
    ]
    assert caplog.records[0].kv["flag"] == "--collector.nvme.max-devices=2"  # type: ignore[attr-defined]


def test_limit_sockets_keeps_the_lowest_ids_with_their_twins() -> None:
    socks = [s("ceph", i, f"ceph-osd.{i}.asok") for i in (10, 2, 11, 1)]
    twin = s(FSID_A, 2, f"{FSID_A}/ceph-osd.2.asok", "cephadm")
    got = limit_sockets([*socks, twin], 3)
    assert [(k.osd_id, k.cluster) for k in got.kept] == [(1, "ceph"), (2, FSID_A), (2, "ceph")]
    assert sorted(d.socket.osd_id for d in got.dropped) == [10, 11]
    assert {d.reason for d in got.dropped} == {"limit"}


def twelve_controllers() -> dict[str, Any]:
    """The tuned node's ten NVMe drives and two more, so that nvme10 and nvme11 exist."""
    desc = small_nvme("epyc9454p-tuned")
    extra = [{"pci": f"pci0000:80/0000:80:01.{i}/0000:8{i}:00.0", "serial": f"EXTRA{i}"}
             for i in (1, 2)]  # fmt: skip
    desc["nvme"]["controllers"] = [*desc["nvme"]["controllers"], *extra]
    return desc


def nvme_subjects(c: Collection) -> tuple[set[str], set[str]]:
    controllers = {
        dict(labels)["controller"] for n, labels in samples(c) if n == "cephnode_nvme_queues"
    }
    devices = {
        dict(labels)["device"] for n, labels in samples(c) if n == "cephnode_nvme_namespace_info"
    }
    return controllers, devices


def test_nvme_max_devices(make_tree: MakeTree, caplog: pytest.LogCaptureFixture) -> None:
    tree = make_tree(twelve_controllers())
    c = collect([*tree.flags, *ONLY_NVME])
    assert len(nvme_subjects(c)[0]) == 12  # the default (256) cuts nothing
    assert value(c, "cephnode_scrape_collector_items_dropped", collector="nvme") == 0
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.base")
    scraper = build_scraper(parse_args(["dump", *tree.flags, *ONLY_NVME,
                                        "--collector.nvme.max-devices=3"]))  # fmt: skip
    try:
        for _ in range(2):
            c = scraper.collect(10.0)
            # By name as people count: nvme2 before nvme10.
            assert nvme_subjects(c) == ({"nvme0", "nvme1", "nvme2"},
                                        {"nvme0n1", "nvme1n1", "nvme2n1"})  # fmt: skip
            assert value(c, "cephnode_scrape_collector_items_dropped", collector="nvme") == 18
            assert value(c, "cephnode_scrape_collector_success", collector="nvme") == 1
    finally:
        scraper.close()
    warnings = [r.kv for r in caplog.records if r.levelname == "WARNING"]  # type: ignore[attr-defined]
    assert sorted((w["items"], w["found"], w["dropped"]) for w in warnings) == [
        ("controllers", 12, 9),
        ("namespaces", 12, 9),
    ]


def test_iommu_follows_the_nvme_device_cap(make_tree: MakeTree) -> None:
    """The iommu collector's per-controller series are capped like the nvme collector's,
    on the same controllers."""
    tree = make_tree(twelve_controllers())
    c = collect([*tree.flags, "--collector.nvme.max-devices=3"])
    controllers = {
        dict(labels)["controller"] for n, labels in samples(c) if n == "cephnode_iommu_group_info"
    }
    assert controllers == {"nvme0", "nvme1", "nvme2"}
    assert value(c, "cephnode_scrape_collector_items_dropped", collector="iommu") == 9
    c = collect(tree.flags)
    controllers = {
        dict(labels)["controller"] for n, labels in samples(c) if n == "cephnode_iommu_group_info"
    }
    assert len(controllers) == 12
    assert value(c, "cephnode_scrape_collector_items_dropped", collector="iommu") == 0


def test_net_max_interfaces(make_tree: MakeTree) -> None:
    """Physical ports come first (they have the series), each kind in natural order."""
    ports = [port("ens10f0", 0), port("ens9f0", 1), port("ens9f1", 2)]
    bond = {"name": "bond0", "virtual": True, "kind": "bond", "mtu": 9000, "operstate": "up"}
    tree = make_tree(small_net(interfaces=[*ports, bond]))
    c = collect([*tree.flags, *only_net(), "--collector.net.max-interfaces=2"])
    devices = {
        dict(labels)["device"] for n, labels in samples(c) if n == "cephnode_network_device_info"
    }
    assert devices == {"ens9f0", "ens9f1"}
    assert value(c, "cephnode_scrape_collector_items_dropped", collector="net") == 2
    assert value(c, "cephnode_scrape_collector_read_errors", collector="net") == 0
    c = collect([*tree.flags, *only_net()])
    assert value(c, "cephnode_scrape_collector_items_dropped", collector="net") == 0


def test_osd_max_sockets_with_many_sockets(
    node_trees: dict[str, Tree],
    sock_dir: Path,
    servers: list[FakeServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """150 OSD sockets (stale files but for osd.1 and osd.2, which answer): the default
    limit queries the 128 lowest ids, in numeric order, and says so once."""
    for i in range(150):
        if i in (1, 2):
            listen(servers, sock_dir / f"ceph-osd.{i}.asok", recorded_osd("memstore"))
        else:
            stale(sock_dir / f"ceph-osd.{i}.asok")
    caplog.set_level(logging.INFO, logger="cephnode_exporter.collectors.base")
    scraper = build_scraper(
        parse_args(["dump", *osd_flags(node_trees["epyc9454p-tuned"], sock_dir)])
    )
    try:
        for _ in range(2):
            c = scraper.collect(10.0)
            states = success(c)
            assert sorted(states, key=natural_key) == [f"osd.{i}" for i in range(128)]
            assert states["osd.1"] == states["osd.2"] == 1
            assert value(c, "cephnode_osd_sockets") == 128
            assert value(c, "cephnode_scrape_collector_items_dropped", collector="osd") == 22
    finally:
        scraper.close()
    warnings = [r.kv for r in caplog.records if r.getMessage().startswith("too many items")]  # type: ignore[attr-defined]
    assert warnings == [
        {"collector": "osd", "items": "OSD sockets", "found": 150, "kept": 128, "dropped": 22,
         "flag": "--collector.osd.max-sockets=128"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    "flag",
    ["--collector.nvme.max-devices=0", "--collector.net.max-interfaces=x",
     "--collector.osd.max-sockets=-1"],
)  # fmt: skip
def test_limit_flags_are_validated(flag: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cephnode_exporter", "dump", flag],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    # A bad value of a known flag (argparse names it), not an unknown flag.
    assert f"argument {flag.split('=')[0]}: " in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- real cluster


def test_the_caps_keep_a_margin_over_a_real_cluster(request: pytest.FixtureRequest) -> None:
    """Every allowlisted command on the Pacific test cluster's OSDs (memstore and
    BlueStore) answers at most an eighth of its caps."""
    from tests.cephcluster import shared_cluster

    cluster = shared_cluster(request.config)
    for osd_id in (cluster.memstore_ids[0], cluster.bluestore_ids[0]):
        sock = AdminSocket(cluster.asok(f"osd.{osd_id}"), timeout=20)
        for prefix, spec in asok.ALLOWED_COMMANDS.items():
            args = {"var": "fsid"} if prefix == "config get" else {}
            try:
                payload = sock.raw(prefix, **args)
            except asok.AsokCommandError:
                assert prefix == "bluefs stats" and osd_id != cluster.bluestore_ids[0]
                continue
            assert len(payload) * 8 <= spec.max_bytes, (osd_id, prefix, len(payload))
            assert json_items(payload) * 8 <= spec.max_items, (osd_id, prefix)


# ------------------------------------------------------- numbers no counter can hold

HUGE = 10**400  # a valid JSON integer (up to 4,300 digits) that no float can hold


def _set(path: tuple[Any, ...], new: Any) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = new

    return change


_HIST = ("osd", "op_r_latency_out_bytes_histogram")


@pytest.mark.parametrize(
    ("command", "change"),
    [
        ("perf dump", _set(("osd", "op"), HUGE)),
        ("perf dump", _set(("osd", "op_w"), 2**64)),
        ("perf dump", _set(("osd", "op_r_latency", "sum"), HUGE)),
        ("perf dump", _set(("osd", "op_r_latency", "avgcount"), HUGE)),
        ("perf histogram dump", _set((*_HIST, "values", 3, 3), HUGE)),
        ("perf histogram dump", _set((*_HIST, "values", 3, 3), 2**64)),
        ("perf histogram dump", _set((*_HIST, "axes", 0, "min"), HUGE)),
        ("perf histogram dump", _set((*_HIST, "axes", 0, "quant_size"), HUGE)),
        ("dump_ops_in_flight", _set(("ops", 0, "age"), HUGE)),
        ("dump_ops_in_flight", _set(("num_ops",), HUGE)),
        ("dump_osd_network", _set(("entries", 0, "average", "1min"), HUGE)),
        ("version", _set(("version",), "16.2.15-" + "x" * 65_000)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_number_no_counter_can_hold_fails_only_its_osd(
    command: str,
    change: Callable[[Any], None],
    node_trees: dict[str, Tree],
    sock_dir: Path,
    servers: list[FakeServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ceph's counters are uint64 and JSON integers are not bounded: 10^400 (which no
    float holds) or 2^64 in one OSD's reply, and a 65,000-character version (a label of
    every scrape), fail that OSD's scrape (`reason` parse), not the collector and the
    other OSD's series."""
    good = recorded_osd("memstore")
    bad = recorded_osd("memstore")
    data = json.loads(bad.replies[command])
    change(data)
    bad.set(command, data)
    listen(servers, sock_dir / "ceph-osd.0.asok", good)
    listen(servers, sock_dir / "ceph-osd.1.asok", bad)
    caplog.set_level(logging.WARNING)
    c = collect(osd_flags(node_trees["epyc9454p-tuned"], sock_dir))
    assert value(c, "cephnode_scrape_collector_success", collector="osd") == 1
    assert success(c) == {"osd.0": 1.0, "osd.1": 0.0}
    assert value(c, "cephnode_osd_ops_in_flight", ceph_daemon="osd.0") is not None
    fields = [getattr(r, "kv", {}) for r in caplog.records]
    failed = [f for f in fields if f.get("ceph_daemon") == "osd.1"]
    assert [f["reason"] for f in failed] == ["parse"]
    # The error names the value without copying a 400-digit number or 65 KB into the log.
    assert len(str(failed[0]["err"])) < 1000
    assert not [f for f in fields if f.get("ceph_daemon") == "osd.0"]


def test_a_config_value_no_float_holds_is_left_out() -> None:
    """config show sends strings; a JSON number past a float's range is no value of an
    option (left out, as a missing one), not an error of the OSD."""
    config = payload("memstore", "config show")
    config["osd_memory_target"] = HUGE
    parsed = perf.parse_config(config)
    assert "osd_memory_target" not in parsed.options
    assert parsed.options  # the others are read


# ------------------------------------------------ the scrape's budget bounds the OSDs


def test_a_short_scrape_budget_with_a_stopped_osd_costs_only_that_osd(
    node_trees: dict[str, Tree], sock_dir: Path, servers: list[FakeServer]
) -> None:
    """Prometheus' scrape_timeout of 2 s leaves a budget of 1.5 s, under the OSDs' 2 s:
    a stopped OSD (accepts, never answers) fails alone, within the budget; the other
    OSD and the collectors after osd (thp) keep their series, scrape after scrape."""
    listen(servers, sock_dir / "ceph-osd.0.asok", recorded_osd("memstore"))
    listen(servers, sock_dir / "ceph-osd.1.asok", hang)
    flags = [*node_trees["epyc9454p-tuned"].flags, f"--ceph.socket-dir={sock_dir}"]
    scraper = build_scraper(parse_args(["dump", *flags, "--collector.osd.timeout=2"]))
    try:
        for _ in range(2):
            start = time.monotonic()
            c = scraper.collect(1.5)
            assert time.monotonic() - start < 1.5
            failed = {o.name: o.error for o in c.outcomes if not o.success}
            assert failed == {}
            assert success(c) == {"osd.0": 1.0, "osd.1": 0.0}
            assert value(c, "cephnode_osd_scrape_duration_seconds", ceph_daemon="osd.1") < 1.3
    finally:
        scraper.close()


def test_parsing_many_large_replies_stops_at_the_collectors_time(
    node_trees: dict[str, Tree], sock_dir: Path, servers: list[FakeServer]
) -> None:
    """100 OSDs each with 400 ops in flight (0.56 MB, about 11 ms to parse) need more
    time to parse than --collector.timeout=1 leaves: the OSDs parsed in time keep their
    series, the others fail with reason timeout, and the collector returns in time
    instead of being abandoned with every OSD's series."""
    recorded = json.loads((FIXTURES / "bluestore.dump_ops_in_flight.json").read_bytes())
    ops = [copy.deepcopy(recorded["ops"][i % len(recorded["ops"])]) for i in range(400)]
    busy = json.dumps({"ops": ops, "num_ops": 400}).encode()
    for i in range(100):
        handler = recorded_osd("bluestore")
        handler.replies["dump_ops_in_flight"] = busy  # one bytes object for all
        listen(servers, sock_dir / f"ceph-osd.{i}.asok", handler)
    c = collect(osd_flags(node_trees["epyc9454p-tuned"], sock_dir, "--collector.timeout=1"))
    (osd,) = [o for o in c.outcomes if o.name == "osd"]
    assert osd.success, osd.error
    assert osd.duration < 1.0
    answered = success(c)
    assert len(answered) == 100
    assert 0 < sum(answered.values()) < 100
    late = [o for o in osd.facts.osds if o.reason == "timeout"]
    assert late and all("ran out before its replies were parsed" in o.error for o in late)
