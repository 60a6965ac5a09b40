"""The `net` collector and its checks `net.mtu` and `net.rings`.

Layers: pure parsers (sysfs attributes, the ethtool struct and its fixture stand-in); the
ioctl reader against an injected ioctl (request layout, garbage replies, errno mapping)
and against the real kernel of this machine (eth0, lo, a veth, a missing name, an
unprivileged caller); the collector on both reference nodes (exact values, golden
exposition); the checks through the real entry point (`check --format json`); bonds,
VLANs, link-down ports and profile selection; bad input (garbage, EIO, missing files,
ioctl errors, interfaces vanishing mid-scrape); and this machine's /sys end to end.
"""

from __future__ import annotations

import copy
import ctypes
import errno
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.checks import load_all
from cephnode_exporter.cli import exposition
from cephnode_exporter.collection import Collection, state_hash
from cephnode_exporter.collectors import REGISTRY
from cephnode_exporter.devices import NetInterface, SysfsDevices
from cephnode_exporter.exposition import encode
from cephnode_exporter.hostfs import HostFS, ParseError, ReadErrors, inet
from cephnode_exporter.hostfs import net as hostnet
from cephnode_exporter.hostfs.ethtool import (
    ETHTOOL_GRINGPARAM,
    RINGPARAM,
    SIOCETHTOOL,
    EthtoolRingReader,
    FixtureRingReader,
    Ifreq,
    RingParam,
    RingReader,
    ifname,
    pack_request,
    parse_fixture,
    ring_reader_for,
    unpack_reply,
)
from cephnode_exporter.hostfs.net import (
    RINGS_ERROR,
    RINGS_OK,
    RINGS_UNSUPPORTED,
    Interface,
    Vanished,
    parse_mtu,
    parse_numa_node,
    parse_operstate,
    parse_speed,
    read_interface,
)
from cephnode_exporter.profile import ProfileError, load_profile
from prometheus_client.core import GaugeMetricFamily

from tests.conftest import (
    GOLDEN,
    NODES,
    MakeTree,
    Tree,
    collect,
    collector_exposition,
    compare_golden,
    need,
    need_root,
    need_tool,
    run_cli,
    samples,
    value,
)
from tests.fixtures.sysfsgen import ETHTOOL_FIXTURE_DIR, load_node

PORTS = ("ens1f0np0", "ens1f1np1")
FULL = {"rx": 8192, "tx": 8192, "rx_max": 8192, "tx_max": 8192}
STOCK = {"rx": 1024, "tx": 1024, "rx_max": 8192, "tx_max": 8192}
NETDIR = "sys/devices/pci0000:40/0000:40:01.1/0000:41:00.{fn}/net/{name}"


def only_net() -> list[str]:
    return [f"--no-collector.{name}" for name in sorted(REGISTRY) if name != "net"]


def port(name: str, fn: int, **extra: Any) -> dict[str, Any]:
    spec = {
        "name": name,
        "pci": f"pci0000:40/0000:40:01.1/0000:41:00.{fn}",
        "driver": "mlx5_core",
        "numa_node": 0,
        "mtu": 9000,
        "speed": 100000,
        "operstate": "up",
        "rings": dict(FULL),
    }
    spec.update(extra)
    return spec


def small(node: str = "epyc9454p-detuned", interfaces: list | None = None) -> dict[str, Any]:
    """A reference node on 2 CPUs without idle/frequency data: a tree of a few dozen files."""
    desc = copy.deepcopy(load_node(node))
    for section in ("cpuidle", "cpufreq"):
        desc.pop(section, None)
    desc["cpus"] = {"cores_per_socket": 2}
    if interfaces is not None:
        desc["net"] = {"interfaces": interfaces}
    return desc


def check_results(tree: Tree, *extra: str) -> tuple[int, dict[tuple[str, str], dict[str, str]]]:
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    results = json.loads(proc.stdout)["results"]
    return proc.returncode, {(r["check"], r["subject"]): r for r in results}


def net_outcome(collection: Collection) -> Any:
    (outcome,) = [o for o in collection.outcomes if o.name == "net"]
    return outcome


def ring(collection: Collection, device: str, name: str, kind: str = "entries") -> float | None:
    return value(collection, f"cephnode_network_ring_{kind}", device=device, ring=name)


def devices_seen(collection: Collection) -> set[str]:
    return {
        dict(labels)["device"]
        for (name, labels) in samples(collection)
        if name.startswith("cephnode_network_")
    }


def fs_of(tree: Tree) -> HostFS:
    return HostFS(procfs=str(tree.proc), sysfs=str(tree.sys), rootfs=str(tree.rootfs))


def write_profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return str(path)


# --- parsers --------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "mtu"), [("9000\n", 9000), ("1500", 1500), ("0\n", 0)])
def test_parse_mtu(text: str, mtu: int) -> None:
    assert parse_mtu(text) == mtu


@pytest.mark.parametrize("text", ["", "?garbage@value!", "9000 bytes", "-1", "1e4"])
def test_parse_mtu_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_mtu(text, "/sys/class/net/x/mtu")


@pytest.mark.parametrize(
    ("text", "speed"),
    # net-sysfs.c prints SPEED_UNKNOWN (u32 -1) with "%d": -1 means unknown
    [("100000\n", 100000), ("25000", 25000), ("-1\n", None), ("0\n", 0)],
)
def test_parse_speed(text: str, speed: int | None) -> None:
    assert parse_speed(text) == speed


@pytest.mark.parametrize("text", ["", "fast", "-2", "4294967295x"])
def test_parse_speed_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_speed(text)


def test_parse_operstate_and_numa_node() -> None:
    for state in ("up", "down", "unknown", "lowerlayerdown", "dormant", "testing", "notpresent"):
        assert parse_operstate(state + "\n") == state
    with pytest.raises(ParseError):
        parse_operstate("UP")
    assert parse_numa_node("-1\n") == -1
    assert parse_numa_node("3") == 3
    for bad in ("-2", "x", ""):
        with pytest.raises(ParseError):
            parse_numa_node(bad)


@pytest.mark.parametrize("name", ["eth0", "ens1f0np0", "bond0.100", "a" * 15, "enx0c42a13c8e40"])
def test_ifname_accepts_kernel_names(name: str) -> None:
    assert ifname(name) == name.encode()


@pytest.mark.parametrize("name", ["", "a" * 16, ".", "..", "a/b", "a:1", "a b", "a\0b", "\t"])
def test_ifname_rejects_names_the_kernel_cannot_make(name: str) -> None:
    with pytest.raises(ValueError, match="not a valid interface name"):
        ifname(name)


# --- the ethtool struct -----------------------------------------------------------------


def reply(*values: int, cmd: int = ETHTOOL_GRINGPARAM) -> bytes:
    return RINGPARAM.pack(cmd, *values)


def test_struct_layout_matches_the_uapi_headers() -> None:
    # include/uapi/linux/ethtool.h: nine __u32; include/uapi/linux/if.h: ifreq is
    # IFNAMSIZ (16) + a union of at most struct ifmap (24 on LP64, 16 on ILP32)
    assert RINGPARAM.size == 36
    assert SIOCETHTOOL == 0x8946 and ETHTOOL_GRINGPARAM == 0x10
    request = pack_request()
    assert len(request) == 36
    assert request[:4] == (0x10).to_bytes(4, sys.byteorder) and set(request[4:]) == {0}
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert ctypes.sizeof(Ifreq) == (40 if pointer == 8 else 32)
    assert Ifreq.ifr_ifru.offset == 16


def test_unpack_reply() -> None:
    param = unpack_reply(reply(8192, 0, 0, 8192, 1024, 0, 0, 512))
    assert param == RingParam(8192, 0, 0, 8192, 1024, 0, 0, 512)
    assert [(r.name, r.current, r.maximum) for r in param.rings()] == [
        ("rx", 1024, 8192),
        ("tx", 512, 8192),
    ]
    # bnx2-style jumbo ring and a mini ring appear only when the driver has them
    old = unpack_reply(reply(2040, 100, 8160, 255, 255, 50, 0, 255))
    assert [r.name for r in old.rings()] == ["rx", "rx_mini", "rx_jumbo", "tx"]
    assert old.ring("rx_jumbo") is not None and old.ring("rx_jumbo").maximum == 8160


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "reply is 0 bytes"),
        (reply(1, 2, 3, 4, 5, 6, 7, 8)[:35], "reply is 35 bytes"),
        (reply(1, 2, 3, 4, 5, 6, 7, 8) + b"\0", "reply is 37 bytes"),
        (reply(1, 2, 3, 4, 5, 6, 7, 8, cmd=0x11), "command 0x11"),  # ETHTOOL_SRINGPARAM
        (b"?garbage@value!" * 2 + b"012345", "command 0x"),
    ],
)
def test_unpack_reply_rejects_short_and_foreign_replies(data: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        unpack_reply(data)


def test_parse_fixture() -> None:
    text = "# comment\nrx_max_pending 8192\ntx_max_pending 8192\nrx_pending 1024\ntx_pending 1024\n"
    assert parse_fixture(text, "f") == RingParam(8192, 0, 0, 8192, 1024, 0, 0, 1024)
    assert parse_fixture("errno EOPNOTSUPP\n", "f") is None
    for name, code in (("ENODEV", errno.ENODEV), ("EPERM", errno.EPERM), ("EIO", errno.EIO)):
        with pytest.raises(OSError) as caught:
            parse_fixture(f"errno {name}\n", "f")
        assert caught.value.errno == code
    for bad, message in (
        ("errno ENOTANERRNO", "unknown errno"),
        ("rx_pending lots", "not an integer"),
        ("rx_pending -1", "not a __u32"),
        ("rx_pending 4294967296", "not a __u32"),
        ("rx_buf_len 4096", "unknown field"),
    ):
        with pytest.raises(ParseError, match=message):
            parse_fixture(bad, "f")


# --- the ioctl reader with an injected ioctl ------------------------------------------


FakeIoctl = Callable[[int, int, Ifreq], None]


def fake_ioctl(data: bytes | None = None, error: int | None = None) -> tuple[FakeIoctl, list]:
    """An ioctl that checks the request like the kernel would, then fails with ``error``
    or writes ``data`` where ifr_data points (copy_to_user)."""
    calls: list[tuple[int, bytes, bytes]] = []

    def ioctl(fd: int, request: int, req: Ifreq) -> None:
        assert fd >= 0
        address = req.ifr_ifru.ifr_data
        calls.append((request, req.ifr_name, ctypes.string_at(address, RINGPARAM.size)))
        if error is not None:
            raise OSError(error, os.strerror(error))
        assert data is not None
        ctypes.memmove(address, data, min(len(data), RINGPARAM.size))

    return ioctl, calls


def test_ioctl_reader_sends_the_request_and_decodes_the_reply() -> None:
    ioctl, calls = fake_ioctl(reply(8192, 0, 0, 8192, 1024, 0, 0, 1024))
    reader = EthtoolRingReader(ioctl=ioctl)
    try:
        assert reader.read("ens1f1np1") == RingParam(8192, 0, 0, 8192, 1024, 0, 0, 1024)
        assert reader.read("ens1f0np0") is not None
    finally:
        reader.close()
    request, name, sent = calls[0]
    assert (request, name, sent) == (SIOCETHTOOL, b"ens1f1np1", pack_request())
    assert len(calls) == 2  # one socket, reused


def test_ioctl_reader_rejects_a_garbage_reply() -> None:
    ioctl, _ = fake_ioctl(b"\xff" * 36)
    with pytest.raises(ParseError, match="SIOCETHTOOL eth9: reply has command 0xffffffff"):
        EthtoolRingReader(ioctl=ioctl).read("eth9")


def test_ioctl_reader_errno_mapping() -> None:
    ioctl, _ = fake_ioctl(error=errno.EOPNOTSUPP)
    assert EthtoolRingReader(ioctl=ioctl).read("lo") is None  # not an error
    for code in (errno.ENODEV, errno.EPERM, errno.EIO, errno.EBUSY):
        ioctl, _ = fake_ioctl(error=code)
        with pytest.raises(OSError) as caught:
            EthtoolRingReader(ioctl=ioctl).read("eth9")
        assert caught.value.errno == code
        assert "SIOCETHTOOL eth9" in str(caught.value)
    with pytest.raises(ValueError):
        EthtoolRingReader(ioctl=ioctl).read("../../etc")


def test_the_reader_follows_the_tree(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(small())
    assert isinstance(ring_reader_for(fs_of(tree)), FixtureRingReader)
    assert (tree.root / ETHTOOL_FIXTURE_DIR / "ens1f1np1").is_file()
    assert isinstance(ring_reader_for(HostFS()), EthtoolRingReader)
    (tmp_path / "plain").mkdir()
    assert isinstance(ring_reader_for(HostFS(sysfs=str(tmp_path / "plain"))), EthtoolRingReader)
    fixture = FixtureRingReader(fs_of(tree))
    assert fixture.read("ens1f1np1") == RingParam(8192, 0, 0, 8192, 1024, 0, 0, 1024)
    assert fixture.read("lo") is None  # no stand-in: like a driver without rings
    with pytest.raises(ValueError):
        fixture.read("../ethtool")


# --- the real ioctl on this machine ----------------------------------------------------


def physical_with_rings() -> list[str]:
    """Interfaces of this machine that are not virtual and answer the ring ioctl."""
    found = []
    reader = EthtoolRingReader()
    try:
        for name in sorted(os.listdir("/sys/class/net")):
            path = os.path.realpath(f"/sys/class/net/{name}")
            if "/virtual/" in path or not os.path.isdir(path):
                continue
            try:
                if reader.read(name) is not None:
                    found.append(name)
            except OSError:
                continue
    finally:
        reader.close()
    return found


def test_real_ioctl_on_this_machine() -> None:
    """eth0 (virtio_net has get_ringparam), lo (EOPNOTSUPP) and a name that does not exist
    (ENODEV), through the real SIOCETHTOOL."""
    need(os.path.isdir("/sys/class/net/eth0"), "this machine has no eth0")
    reader = EthtoolRingReader()
    try:
        eth0 = reader.read("eth0")
        assert eth0 is not None, "virtio_net implements get_ringparam"
        assert 0 < eth0.rx_pending <= eth0.rx_max_pending
        assert 0 < eth0.tx_pending <= eth0.tx_max_pending
        assert reader.read("lo") is None
        with pytest.raises(OSError) as caught:
            reader.read("cnxnosuch0")
        assert caught.value.errno == errno.ENODEV
    finally:
        reader.close()


def parse_ethtool_g(text: str) -> dict[str, dict[str, int]]:
    """`ethtool -g` output: {"max": {"RX": 256, ...}, "current": {...}}; "n/a" skipped."""
    out: dict[str, dict[str, int]] = {"max": {}, "current": {}}
    section = None
    for line in text.splitlines():
        if line.startswith("Pre-set maximums"):
            section = "max"
        elif line.startswith("Current hardware settings"):
            section = "current"
        elif section and ":" in line:
            key, _, val = line.partition(":")
            if val.strip().isdigit():
                out[section][key.strip()] = int(val.strip())
    return out


def test_real_ioctl_agrees_with_ethtool() -> None:
    ethtool = need_tool("ethtool", "ethtool")
    names = physical_with_rings()
    need(bool(names), "no physical interface with ring support on this machine")
    reader = EthtoolRingReader()
    try:
        for name in names:
            proc = subprocess.run([ethtool, "-g", name], capture_output=True, text=True, check=True)
            shown = parse_ethtool_g(proc.stdout)
            mine = reader.read(name)
            assert mine is not None
            assert shown["max"]["RX"] == mine.rx_max_pending
            assert shown["max"]["TX"] == mine.tx_max_pending
            assert shown["current"]["RX"] == mine.rx_pending
            assert shown["current"]["TX"] == mine.tx_pending
    finally:
        reader.close()


def ip(*args: str, check: bool = True) -> None:
    subprocess.run([need_tool("ip", "iproute2"), *args], check=check, capture_output=True)


@pytest.fixture
def veth_name() -> Iterator[str]:
    need_root("creates and deletes veth interfaces")
    name = f"cnxr{os.getpid() % 100000}"
    yield name
    ip("link", "del", name, check=False)


def test_real_ioctl_on_a_veth(veth_name: str) -> None:
    """veth has no get_ringparam (drivers/net/veth.c veth_ethtool_ops; a patch adding one
    was posted to netdev but is not in the kernel tested here, 6.18): EOPNOTSUPP, which
    the reader reports as "no rings". Once deleted, the name gives ENODEV."""
    ip("link", "add", veth_name, "type", "veth", "peer", "name", veth_name + "p")
    reader = EthtoolRingReader()
    try:
        assert reader.read(veth_name) is None
        ip("link", "set", veth_name, "up")
        assert reader.read(veth_name) is None
        ip("link", "del", veth_name)
        with pytest.raises(OSError) as caught:
            reader.read(veth_name)
        assert caught.value.errno == errno.ENODEV
    finally:
        reader.close()


def test_real_ioctl_needs_no_privilege() -> None:
    """ETHTOOL_GRINGPARAM is in __dev_ethtool's list of commands anyone may run
    (net/ethtool/ioctl.c): the unprivileged service user reads the rings."""
    need_root("drops to uid 65534 in a child")
    names = physical_with_rings()
    need(bool(names), "no physical interface with ring support on this machine")
    code = (
        "import os, sys\n"
        # import first: the interpreter's files need not be readable by uid 65534
        "from cephnode_exporter.hostfs.ethtool import EthtoolRingReader\n"
        "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
        "r = EthtoolRingReader().read(sys.argv[1])\n"
        "print(os.geteuid(), r.rx_pending, r.tx_pending)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, names[0]], capture_output=True, text=True, check=True
    )
    param = EthtoolRingReader().read(names[0])
    assert param is not None
    assert proc.stdout.split() == ["65534", str(param.rx_pending), str(param.tx_pending)]


# --- the collector on the reference nodes ------------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_net_exposition(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str
) -> None:
    compare_golden(
        request,
        GOLDEN / node / "net.prom",
        collector_exposition(collect(node_trees[node].flags), "net"),
    )


@pytest.mark.parametrize("node", NODES)
def test_net_values_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    result = collect(node_trees[node].flags)
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 0
    # lo and docker0 are virtual (and match the exclude pattern): no series
    assert devices_seen(result) == set(PORTS)
    for fn, name in enumerate(PORTS):
        labels = {"device": name, "driver": "mlx5_core", "pci": f"0000:41:00.{fn}", "master": ""}
        assert value(result, "cephnode_network_device_info", **labels) == 1
        assert value(result, "cephnode_network_numa_node", device=name) == 0
        for r in ("rx", "tx"):
            assert ring(result, name, r, "max_entries") == 8192
            detuned = node.endswith("detuned") and name == "ens1f1np1"
            assert ring(result, name, r) == (1024 if detuned else 8192)
        assert ring(result, name, "rx_jumbo") is None
    facts = net_outcome(result).facts
    assert sorted(facts.interfaces) == sorted(PORTS)  # lo/docker0 excluded by the pattern
    assert facts.excluded == ["docker0", "lo"]
    assert facts.ring_source == "fixture"
    mtus = {name: facts.interfaces[name].mtu for name in PORTS}
    want = 1500 if node.endswith("detuned") else 9000
    assert mtus == {"ens1f0np0": 9000, "ens1f1np1": want}
    assert {i.speed_mbps for i in facts.interfaces.values()} == {100000}


@pytest.mark.parametrize("node", NODES)
def test_net_checks_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    _, results = check_results(node_trees[node])
    mine = {k: r["status"] for k, r in results.items() if k[0].startswith("net.")}
    detuned = "warn" if node.endswith("detuned") else "pass"
    assert mine == {
        ("net.mtu", "ens1f0np0"): "pass",
        ("net.mtu", "ens1f1np1"): detuned,
        ("net.rings", "ens1f0np0"): "pass",
        ("net.rings", "ens1f1np1"): detuned,
    }
    host = 12 if node.endswith("detuned") else 11
    public, cluster = f"Ceph 10.10.0.{host}", f"Ceph 10.20.0.{host}"
    ok = results[("net.rings", "ens1f0np0")]
    assert ok["observed"] == f"rx 8192/8192, tx 8192/8192 (link up, 100 Gb/s; {public})"
    assert ok["expected"] == "rx and tx rings at the driver's maximum"
    assert ok["hint"] == ""
    mtu = results[("net.mtu", "ens1f0np0")]
    assert mtu["observed"] == f"MTU 9000 (link up, 100 Gb/s; {public})"
    if node.endswith("detuned"):
        mtu = results[("net.mtu", "ens1f1np1")]
        assert mtu["observed"] == f"MTU 1500 (link up, 100 Gb/s; {cluster})"
        assert mtu["expected"] == "MTU at least 9000"
        assert mtu["hint"].startswith("ip link set dev ens1f1np1 mtu 9000; to persist it:")
        assert "MTUBytes=9000" in mtu["hint"] and "802-3-ethernet.mtu 9000" in mtu["hint"]
        rings = results[("net.rings", "ens1f1np1")]
        assert rings["observed"] == f"rx 1024/8192, tx 1024/8192 (link up, 100 Gb/s; {cluster})"
        assert rings["hint"].startswith("ethtool -G ens1f1np1 rx 8192 tx 8192; to persist it:")
        assert 'RUN+="/usr/sbin/ethtool -G ens1f1np1 rx 8192 tx 8192"' in rings["hint"]
        assert "RxBufferSize=8192 / TxBufferSize=8192" in rings["hint"]
        assert "ethtool.ring-rx 8192 ethtool.ring-tx 8192" in rings["hint"]


def test_net_check_results_are_metrics(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-detuned"].flags)
    warn = "cephnode_tuning_check_warning"
    for check in ("net.mtu", "net.rings"):
        assert value(result, warn, check=check, subject="ens1f1np1") == 1
        # passing, or warning rather than failing: no series
        assert value(result, warn, check=check, subject="ens1f0np0") is None
        assert (
            value(result, "cephnode_tuning_check_failed", check=check, subject="ens1f1np1") is None
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_exporter_has_what_net_does_not_export(
    node_trees: dict[str, Tree], processes: list[subprocess.Popen]
) -> None:
    """MTU and speed are left to node_exporter's netclass collector: on the same tree it
    reports them with the same `device` label, so the two join."""
    binary = need_tool("prometheus-node-exporter", "prometheus-node-exporter")
    tree = node_trees["epyc9454p-detuned"]
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--collector.disable-defaults",
            "--collector.netclass",
            f"--path.sysfs={tree.sys}",
            f"--path.procfs={tree.proc}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    processes.append(proc)
    text = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            break
        except OSError:
            time.sleep(0.1)
    theirs = {
        (m.group(1), m.group(2)): float(m.group(3))
        for m in re.finditer(r'^(node_network_\w+)\{device="([^"]+)"\} (\S+)$', text, re.M)
    }
    assert theirs[("node_network_mtu_bytes", "ens1f1np1")] == 1500
    assert theirs[("node_network_mtu_bytes", "ens1f0np0")] == 9000
    assert theirs[("node_network_speed_bytes", "ens1f1np1")] == 100000 * 1000 * 1000 / 8
    ours = collect(tree.flags)
    for device in devices_seen(ours):
        assert ("node_network_mtu_bytes", device) in theirs
    assert not any("mtu" in name or "speed" in name for name, _ in samples(ours))


# --- bonds, VLANs, link state and selection --------------------------------------------


def bonded() -> list[dict[str, Any]]:
    """The common Ceph setup: both ports in an 802.3ad bond, a VLAN on top at MTU 1500."""
    return [
        port("ens1f0np0", 0, master="bond0"),
        port("ens1f1np1", 1, master="bond0", rings=dict(STOCK)),
        {"name": "bond0", "virtual": True, "kind": "bond", "mtu": 9000, "speed": 200000},
        {"name": "bond0.100", "virtual": True, "kind": "vlan", "link": "bond0", "mtu": 1500},
        {"name": "lo", "virtual": True, "kind": "loopback", "mtu": 65536, "operstate": "unknown"},
    ]


def test_bond_slaves_are_exported_and_the_bond_is_not(make_tree: MakeTree) -> None:
    tree = make_tree(small(interfaces=bonded()))
    assert os.readlink(tree.sys / "class/net/ens1f0np0/master").endswith("virtual/net/bond0")
    result = collect([*tree.flags, *only_net()])
    assert devices_seen(result) == set(PORTS)
    for fn, name in enumerate(PORTS):
        labels = {"device": name, "driver": "mlx5_core", "pci": f"0000:41:00.{fn}"}
        assert value(result, "cephnode_network_device_info", **labels, master="bond0") == 1
    facts = net_outcome(result).facts
    # bond and VLAN are read lightly (for net.mtu), not exported
    assert facts.interfaces["bond0"].virtual and facts.interfaces["bond0"].mtu == 9000
    assert facts.interfaces["bond0.100"].rings_state == "not_read"
    _, results = check_results(tree, *only_net())
    assert {k for k in results if k[0] == "net.mtu"} == {("net.mtu", p) for p in PORTS}
    slave = results[("net.rings", "ens1f1np1")]
    assert slave["status"] == "warn"
    assert results[("net.mtu", "ens1f1np1")]["status"] == "pass"


def test_profile_names_a_bond_and_its_vlan(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(small(interfaces=bonded()))
    profile = write_profile(
        tmp_path,
        "checks:\n"
        '  net.mtu: {interfaces: "bond0|bond0\\\\.100"}\n'
        '  net.rings: {interfaces: "bond0|ens1f1np1"}\n',
    )
    _, results = check_results(tree, *only_net(), "--profile", profile)
    mtu = {k[1]: r for k, r in results.items() if k[0] == "net.mtu"}
    assert {s: r["status"] for s, r in mtu.items()} == {"bond0": "pass", "bond0.100": "warn"}
    assert mtu["bond0.100"]["hint"].startswith("ip link set dev bond0.100 mtu 9000")
    rings = {k[1]: r for k, r in results.items() if k[0] == "net.rings"}
    assert rings["bond0"]["status"] == "skip"
    assert rings["bond0"]["observed"] == "virtual interface: rings belong to its physical ports"
    assert rings["ens1f1np1"]["status"] == "warn"


def test_a_slave_mtu_hint_points_at_the_bond(make_tree: MakeTree) -> None:
    interfaces = bonded()
    interfaces[0]["mtu"] = interfaces[1]["mtu"] = interfaces[2]["mtu"] = 1500
    tree = make_tree(small(interfaces=interfaces))
    _, results = check_results(tree, *only_net())
    hint = results[("net.mtu", "ens1f1np1")]["hint"]
    assert hint.startswith("ip link set dev bond0 mtu 9000 (set on bond0: a bond passes")


def test_a_slave_below_a_bond_that_is_right_is_raised_itself(make_tree: MakeTree) -> None:
    """Setting the bond's MTU to what it already is changes nothing (net/core/dev.c
    dev_set_mtu_ext returns at once): the slave left at 1500 is raised on its own."""
    interfaces = bonded()
    interfaces[1]["mtu"] = 1500
    tree = make_tree(small(interfaces=interfaces))
    _, results = check_results(tree, *only_net())
    hint = results[("net.mtu", "ens1f1np1")]["hint"]
    assert hint.startswith("ip link set dev ens1f1np1 mtu 9000; to persist it:")


def test_link_down_ports_are_not_judged_unless_named(make_tree: MakeTree, tmp_path: Path) -> None:
    down = port("eno1", 0, mtu=1500, speed=-1, operstate="down", rings=dict(STOCK))
    down["pci"] = "pci0000:c0/0000:c0:08.1/0000:c1:00.0"
    tree = make_tree(small(interfaces=[port("ens1f0np0", 0), down]))
    result = collect([*tree.flags, *only_net()])
    assert net_outcome(result).read_errors == 0  # speed -1 is "unknown", not an error
    assert net_outcome(result).facts.interfaces["eno1"].speed_mbps is None
    assert ring(result, "eno1", "rx") == 1024  # still exported
    _, results = check_results(tree, *only_net())
    mtu = results[("net.mtu", "eno1")]
    assert (mtu["status"], mtu["observed"]) == ("skip", "MTU 1500, link down: not judged")
    rings = results[("net.rings", "eno1")]
    assert rings["status"] == "skip"
    assert rings["observed"] == "rx 1024/8192, tx 1024/8192 (link down): not judged"
    profile = write_profile(tmp_path, 'checks:\n  net.mtu: {interfaces: "eno1"}\n')
    _, results = check_results(tree, *only_net(), "--profile", profile)
    assert results[("net.mtu", "eno1")]["status"] == "warn"
    assert results[("net.mtu", "eno1")]["observed"] == "MTU 1500 (link down)"


def test_a_larger_mtu_passes_and_the_profile_sets_the_target(
    make_tree: MakeTree, tmp_path: Path
) -> None:
    tree = make_tree(small(interfaces=[port("ens1f0np0", 0, mtu=9216), port("ens1f1np1", 1)]))
    profile = write_profile(tmp_path, "checks:\n  net.mtu: {mtu: 9100, severity: fail}\n")
    code, results = check_results(tree, *only_net(), "--profile", profile)
    assert results[("net.mtu", "ens1f0np0")]["status"] == "pass"
    assert results[("net.mtu", "ens1f1np1")]["status"] == "fail"
    assert code == 1


def test_exclude_flag(make_tree: MakeTree) -> None:
    tree = make_tree(small())
    flags = [*tree.flags, *only_net(), "--collector.net.exclude", "ens1f1.*|lo|docker0"]
    result = collect(flags)
    assert devices_seen(result) == {"ens1f0np0"}
    assert net_outcome(result).facts.excluded == ["docker0", "ens1f1np1", "lo"]
    # the pattern matches whole names only
    result = collect([*tree.flags, *only_net(), "--collector.net.exclude", "ens1"])
    assert devices_seen(result) == set(PORTS)
    proc = run_cli("dump", *tree.flags, "--collector.net.exclude", "(")
    assert proc.returncode == 2
    assert "not a regular expression" in proc.stderr


def test_no_interfaces_at_all(make_tree: MakeTree, tmp_path: Path) -> None:
    desc = small()
    del desc["net"]
    tree = make_tree(desc)
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert devices_seen(result) == set()
    _, results = check_results(tree, *only_net())
    r = results[("net.mtu", "")]
    assert (r["status"], r["observed"]) == ("skip", "no physical network interface found")
    profile = write_profile(tmp_path, 'checks:\n  net.rings: {interfaces: "bond9"}\n')
    _, results = check_results(make_tree(small()), *only_net(), "--profile", profile)
    r = results[("net.rings", "")]
    assert (
        r["observed"]
        == "no interface matches 'bond9' (excluded by --collector.net.exclude: docker0, lo)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("checks:\n  net.mtu: {interfaces: '('}\n", "interfaces is not a regular expression"),
        ("checks:\n  net.rings: {interfaces: '[a-'}\n", "interfaces is not a regular expression"),
        ("checks:\n  net.mtu: {mtu: 40}\n", "mtu must be between 68 and 65535"),
        ("checks:\n  net.mtu: {mtu: '9000'}\n", "must be of type int"),
        ("checks:\n  net.rings: {min: 4096}\n", "unknown key"),
    ],
)
def test_bad_net_profiles_are_rejected(tmp_path: Path, content: str, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        load_profile(write_profile(tmp_path, content), load_all())


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "errors", "mtu_status"),
    [
        ("garbage", 1, "unknown"),
        ("empty", 1, "unknown"),
        ("eio", 1, "unknown"),
        ("missing", 1, "unknown"),
    ],
)
def test_bad_mtu_file(make_tree: MakeTree, fault: str, errors: int, mtu_status: str) -> None:
    tree = make_tree(small(), faults={"sys/class/net/ens1f1np1/mtu": fault})
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == errors
    assert ring(result, "ens1f1np1", "rx") == 1024  # the rest of the port is still read
    _, results = check_results(tree, *only_net())
    r = results[("net.mtu", "ens1f1np1")]
    assert (r["status"], r["observed"]) == (mtu_status, "MTU unreadable (link up, 100 Gb/s)")
    assert results[("net.mtu", "ens1f0np0")]["status"] == "pass"


@pytest.mark.parametrize(
    ("path", "fault", "errors"),
    [
        ("speed", "garbage", 1),
        ("speed", "eio", 1),
        ("operstate", "garbage", 1),
        ("device/numa_node", "garbage", 1),
        ("device/numa_node", "missing", 0),  # no CONFIG_NUMA: not an error
        ("device/driver", "missing", 0),  # unbound: empty driver label
    ],
)
def test_bad_attribute_files(make_tree: MakeTree, path: str, fault: str, errors: int) -> None:
    tree = make_tree(small(), faults={f"sys/class/net/ens1f1np1/{path}": fault})
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == errors
    assert devices_seen(result) == set(PORTS)
    assert ring(result, "ens1f1np1", "tx") == 1024


@pytest.mark.parametrize(
    ("rings", "errors", "status", "observed"),
    [
        ("EOPNOTSUPP", 0, "skip", "the driver (mlx5_core) reports no ring sizes"),
        (
            "ENODEV",
            1,
            "unknown",
            "rings unreadable: no such interface in the exporter's network namespace "
            "(run it in the host network namespace)",
        ),
        ("EPERM", 1, "unknown", "rings unreadable: Operation not permitted"),
        ({"rx": 1024, "tx": 1024}, 0, "skip", "the driver reports no ring maximum"),
    ],
)
def test_ring_errors(
    make_tree: MakeTree, rings: Any, errors: int, status: str, observed: str
) -> None:
    tree = make_tree(small(interfaces=[port("ens1f0np0", 0), port("ens1f1np1", 1, rings=rings)]))
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == errors
    assert ring(result, "ens1f1np1", "rx", "max_entries") is None
    assert ring(result, "ens1f0np0", "rx") == 8192
    assert value(result, "cephnode_network_numa_node", device="ens1f1np1") == 0
    _, results = check_results(tree, *only_net())
    r = results[("net.rings", "ens1f1np1")]
    assert (r["status"], r["observed"]) == (status, observed)


def test_garbage_ring_stand_in(make_tree: MakeTree) -> None:
    tree = make_tree(small(), faults={f"{ETHTOOL_FIXTURE_DIR}/ens1f1np1": "garbage"})
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert ring(result, "ens1f1np1", "rx") is None
    _, results = check_results(tree, *only_net())
    assert results[("net.rings", "ens1f1np1")]["observed"].startswith("rings unreadable: ")


def test_an_interface_whose_directory_is_gone_is_skipped(make_tree: MakeTree) -> None:
    """The class link dangles (unplugged between two listings): discovery skips it and
    nothing is counted."""
    tree = make_tree(small(), faults={NETDIR.format(fn=1, name="ens1f1np1"): "missing"})
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 0
    assert devices_seen(result) == {"ens1f0np0"}


def _discovered(tree: Tree, name: str) -> NetInterface:
    snap = SysfsDevices(fs_of(tree)).enumerate()
    (dev,) = [d for d in snap.devices if isinstance(d, NetInterface) and d.name == name]
    return dev


def _read(dev: NetInterface, rings: RingReader | None, errors: ReadErrors) -> Interface | None:
    """read_interface of a discovered interface, as the net collector calls it."""
    return read_interface(dev.syspath, dev.name, rings, errors, pci=dev.pci, virtual=dev.virtual)


class _Rings:
    """A ring reader that runs ``action`` and then fails like the ioctl would."""

    source = "test"

    def __init__(self, action: Callable[[], None], code: int) -> None:
        self.action = action
        self.code = code

    def read(self, name: str) -> RingParam | None:
        self.action()
        raise OSError(self.code, os.strerror(self.code), f"SIOCETHTOOL {name}")

    def close(self) -> None:
        return None


def test_interface_vanishing_mid_scrape(make_tree: MakeTree) -> None:
    """Unplugged after discovery listed it: ENODEV from the ioctl with the sysfs
    directory gone is a silent skip; files gone before the read too."""
    tree = make_tree(small())
    dev = _discovered(tree, "ens1f1np1")
    errors = ReadErrors()
    rings = _Rings(lambda: shutil.rmtree(dev.syspath), errno.ENODEV)
    assert _read(dev, rings, errors) is None
    assert len(errors) == 0
    # the directory disappears before the first attribute read
    assert _read(dev, FixtureRingReader(fs_of(tree)), errors) is None
    assert len(errors) == 0


def test_enodev_with_the_interface_still_in_sysfs_is_counted(make_tree: MakeTree) -> None:
    tree = make_tree(small())
    dev = _discovered(tree, "ens1f1np1")
    errors = ReadErrors()
    iface = _read(dev, _Rings(lambda: None, errno.ENODEV), errors)
    assert iface is not None and iface.rings_state == RINGS_ERROR
    assert iface.mtu == 1500
    assert len(errors) == 1 and "network namespace" in errors.items[0]
    good = _read(dev, FixtureRingReader(fs_of(tree)), ReadErrors())
    assert good is not None and good.rings_state == RINGS_OK
    # no stand-in file: like a driver without get_ringparam
    lo = _discovered(tree, "lo")
    unsupported = _read(lo, FixtureRingReader(fs_of(tree)), ReadErrors())
    assert unsupported is not None and unsupported.rings_state == RINGS_UNSUPPORTED


def test_speed_einval_means_unknown(make_tree: MakeTree, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading speed of an interface that is not running fails with EINVAL
    (net-sysfs.c speed_show): unknown, not an error. Other errors count."""
    tree = make_tree(small())
    dev = _discovered(tree, "ens1f0np0")
    real = hostnet.read_text

    def failing(code: int) -> Callable[[str], str]:
        def read_text(path: str) -> str:
            if path.endswith("/speed"):
                raise OSError(code, os.strerror(code), path)
            return real(path)

        return read_text

    monkeypatch.setattr(hostnet, "read_text", failing(errno.EINVAL))
    errors = ReadErrors()
    iface = _read(dev, FixtureRingReader(fs_of(tree)), errors)
    assert iface is not None and iface.speed_mbps is None and len(errors) == 0
    monkeypatch.setattr(hostnet, "read_text", failing(errno.EIO))
    iface = _read(dev, FixtureRingReader(fs_of(tree)), errors)
    assert iface is not None and iface.speed_mbps is None and len(errors) == 1
    monkeypatch.setattr(hostnet, "read_text", failing(errno.ENODEV))
    shutil.rmtree(dev.syspath)
    with pytest.raises(Vanished):
        hostnet._Reader(dev.syspath, dev.name, errors).attr(dev.syspath + "/speed", parse_speed)


# --- Ceph ports: which ports the default selection judges ------------------------------

# A typical storage node: a 1 GbE management port (the board's LOM,
# tg3) at MTU 1500 with the default route, and two 100 GbE ports for the public and
# the cluster network.
PUBLIC, CLUSTER = "10.10.0.12", "10.20.0.12"
CEPH_LISTEN = [
    "0.0.0.0:22",  # sshd on every address: not a Ceph port
    "127.0.0.1:6800",  # loopback never counts
    f"{PUBLIC}:6800",
    f"{PUBLIC}:6801",
    f"{CLUSTER}:6802",
    f"{CLUSTER}:6803",
    f"{PUBLIC}:3300",  # a monitor
]
SKIPPED_MGMT = (
    "MTU 1500 (link up, 1 Gb/s): no Ceph address on this port "
    f"(Ceph: {PUBLIC} on ens1f0np0, {CLUSTER} on ens1f1np1): not judged"
)


def mgmt_port(**extra: Any) -> dict[str, Any]:
    spec = port(
        "eno1",
        0,
        driver="tg3",
        speed=1000,
        mtu=1500,
        rings={"rx": 200, "tx": 511, "rx_max": 511, "tx_max": 511},
        addresses=["192.168.10.12/24"],
        gateway="192.168.10.1",
    )
    spec["pci"] = "pci0000:c0/0000:c0:08.1/0000:c1:00.0"
    spec.update(extra)
    return spec


def ceph_node(
    listen: list[str] | None = None, ports: tuple[int, int] = (9000, 9000)
) -> dict[str, Any]:
    interfaces = [
        mgmt_port(),
        port("ens1f0np0", 0, mtu=ports[0], addresses=[f"{PUBLIC}/24"]),
        port("ens1f1np1", 1, mtu=ports[1], addresses=[f"{CLUSTER}/24"]),
        {"name": "lo", "virtual": True, "kind": "loopback", "mtu": 65536, "operstate": "unknown"},
    ]
    desc = small(interfaces=interfaces)
    desc["net"]["listen"] = CEPH_LISTEN if listen is None else listen
    return desc


def net_results(tree: Tree, *extra: str) -> tuple[int, dict[tuple[str, str], tuple[str, str]]]:
    code, results = check_results(tree, *only_net(), *extra)
    return code, {
        k: (r["status"], r["observed"]) for k, r in results.items() if k[0].startswith("net.")
    }


def test_a_management_port_without_ceph_address_is_not_judged(make_tree: MakeTree) -> None:
    tree = make_tree(ceph_node())
    result = collect([*tree.flags, *only_net()])
    assert net_outcome(result).read_errors == 0
    ceph = net_outcome(result).facts.ceph
    assert ceph.error is None
    assert [str(lst) for lst in ceph.listeners] == [
        f"{PUBLIC}:3300",
        f"{PUBLIC}:6800",
        f"{PUBLIC}:6801",
        f"{CLUSTER}:6802",
        f"{CLUSTER}:6803",
    ]
    assert ceph.interfaces == {PUBLIC: ("ens1f0np0",), CLUSTER: ("ens1f1np1",)}
    # still exported: the selection is the checks' business
    assert devices_seen(result) == {"eno1", *PORTS}
    code, results = net_results(tree)
    assert code == 0
    assert results == {
        ("net.mtu", "eno1"): ("skip", SKIPPED_MGMT),
        ("net.mtu", "ens1f0np0"): ("pass", f"MTU 9000 (link up, 100 Gb/s; Ceph {PUBLIC})"),
        ("net.mtu", "ens1f1np1"): ("pass", f"MTU 9000 (link up, 100 Gb/s; Ceph {CLUSTER})"),
        ("net.rings", "eno1"): ("skip", SKIPPED_MGMT.replace("MTU 1500", "rx 200/511, tx 511/511")),
        ("net.rings", "ens1f0np0"): (
            "pass",
            f"rx 8192/8192, tx 8192/8192 (link up, 100 Gb/s; Ceph {PUBLIC})",
        ),
        ("net.rings", "ens1f1np1"): (
            "pass",
            f"rx 8192/8192, tx 8192/8192 (link up, 100 Gb/s; Ceph {CLUSTER})",
        ),
    }
    # no series for a skipped port, so CephNodeNetworkMTU cannot fire on it
    assert value(result, "cephnode_tuning_check_warning", check="net.mtu", subject="eno1") is None


def test_a_ceph_port_at_1500_is_judged(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(ceph_node(ports=(9000, 1500)))
    _, results = net_results(tree)
    assert results[("net.mtu", "ens1f1np1")] == (
        "warn",
        f"MTU 1500 (link up, 100 Gb/s; Ceph {CLUSTER})",
    )
    assert results[("net.mtu", "eno1")][0] == "skip"
    profile = write_profile(tmp_path, "checks:\n  net.mtu: {severity: fail}\n")
    code, results = net_results(tree, "--profile", profile)
    assert code == 1
    assert {k[1]: r[0] for k, r in results.items() if k[0] == "net.mtu"} == {
        "eno1": "skip",
        "ens1f0np0": "pass",
        "ens1f1np1": "fail",
    }


def test_the_profile_still_judges_the_interfaces_it_names(
    make_tree: MakeTree, tmp_path: Path
) -> None:
    tree = make_tree(ceph_node())
    profile = write_profile(tmp_path, 'checks:\n  net.mtu: {interfaces: "eno1|ens1f0np0"}\n')
    _, results = net_results(tree, "--profile", profile)
    assert results[("net.mtu", "eno1")] == ("warn", "MTU 1500 (link up, 1 Gb/s)")
    assert results[("net.mtu", "ens1f0np0")] == ("pass", "MTU 9000 (link up, 100 Gb/s)")
    assert ("net.mtu", "ens1f1np1") not in results


def bonded_ceph(vlan_mtu: int = 9000) -> dict[str, Any]:
    """Both 100 GbE ports in bond0; the public network on the VLAN bond0.100, the
    cluster network on bond0 itself; the management port beside them."""
    interfaces = [
        mgmt_port(),
        port("ens1f0np0", 0, master="bond0"),
        port("ens1f1np1", 1, master="bond0", mtu=1500, rings=dict(STOCK)),
        {
            "name": "bond0",
            "virtual": True,
            "kind": "bond",
            "mtu": 9000,
            "speed": 200000,
            "addresses": [f"{CLUSTER}/24"],
        },
        {
            "name": "bond0.100",
            "virtual": True,
            "kind": "vlan",
            "link": "bond0",
            "mtu": vlan_mtu,
            "addresses": [f"{PUBLIC}/24"],
        },
    ]
    desc = small(interfaces=interfaces)
    desc["net"]["listen"] = CEPH_LISTEN
    return desc


def test_a_ceph_address_on_a_vlan_of_a_bond_judges_the_slaves(make_tree: MakeTree) -> None:
    tree = make_tree(bonded_ceph())
    assert os.readlink(tree.sys / "class/net/bond0.100/lower_bond0") == "../bond0"
    facts = net_outcome(collect([*tree.flags, *only_net()])).facts
    assert facts.interfaces["bond0.100"].lower == ("bond0",)
    assert facts.interfaces["bond0"].lower == PORTS
    assert facts.interfaces["ens1f0np0"].lower == ()  # not read for ports
    assert facts.ceph.interfaces == {PUBLIC: ("bond0.100",), CLUSTER: ("bond0",)}
    _, results = net_results(tree)
    carried = f"Ceph {PUBLIC} on bond0.100, {CLUSTER} on bond0"
    assert results[("net.mtu", "ens1f0np0")] == ("pass", f"MTU 9000 (link up, 100 Gb/s; {carried})")
    # the slave at 1500 is the one finding, and names what it caps
    assert results[("net.mtu", "ens1f1np1")] == (
        "warn",
        f"MTU 1500 (link up, 100 Gb/s; {carried}; limits bond0, bond0.100 above it)",
    )
    assert results[("net.rings", "ens1f1np1")][0] == "warn"
    mgmt = results[("net.mtu", "eno1")]
    assert mgmt == (
        "skip",
        "MTU 1500 (link up, 1 Gb/s): no Ceph address on this port "
        f"(Ceph: {PUBLIC} on bond0.100, {CLUSTER} on bond0): not judged",
    )
    # the bond and its VLAN hold Ceph's addresses: judged on their paths down to the
    # ports, where the slave at 1500 caps their packets, a fault its own row already
    # names: skip, saying so (tests/test_net_path.py)
    assert {k[1] for k in results if k[0] == "net.mtu"} == {"eno1", *PORTS, "bond0", "bond0.100"}
    over = "over ens1f0np0 9000, ens1f1np1 1500"
    whose = "the fault of ens1f1np1, reported on its row"
    assert results[("net.mtu", "bond0")] == (
        "skip",
        f"MTU 1500 at ens1f1np1 (link up; bond0 9000 {over}; Ceph {CLUSTER}): {whose}",
    )
    assert results[("net.mtu", "bond0.100")] == (
        "skip",
        f"MTU 1500 at ens1f1np1 (link up; bond0.100 9000 over bond0 9000 {over}; "
        f"Ceph {PUBLIC}): {whose}",
    )


def test_an_ipv6_ceph_address_and_a_vlan_on_a_port(make_tree: MakeTree) -> None:
    interfaces = [
        mgmt_port(addresses=["192.168.10.12/24", "fd00:99::12/64"]),
        port("ens1f0np0", 0, addresses=["fd00:10::12/64", "fe80::e42:a1ff:fe3c:8e50/64"]),
        port("ens1f1np1", 1, mtu=1500),
        {"name": "ens1f1np1.20", "virtual": True, "kind": "vlan", "link": "ens1f1np1",
         "mtu": 9000, "addresses": ["fd00:20::12/64"]},
    ]  # fmt: skip
    desc = small(interfaces=interfaces)
    desc["net"]["listen"] = ["[::]:22", "[fd00:10::12]:6800", "[fd00:20::12]:6801"]
    tree = make_tree(desc)
    facts = net_outcome(collect([*tree.flags, *only_net()])).facts
    assert facts.ceph.interfaces == {
        "fd00:20::12": ("ens1f1np1.20",),
        "fd00:10::12": ("ens1f0np0",),
    }
    _, results = net_results(tree)
    assert results[("net.mtu", "ens1f0np0")][0] == "pass"
    assert results[("net.mtu", "ens1f1np1")] == (
        "warn",
        "MTU 1500 (link up, 100 Gb/s; Ceph fd00:20::12 on ens1f1np1.20; "
        "limits ens1f1np1.20 above it)",
    )
    assert results[("net.mtu", "ens1f1np1.20")][0] == "skip"
    assert results[("net.mtu", "eno1")][0] == "skip"


@pytest.mark.parametrize(
    ("listen", "why"),
    [
        (["0.0.0.0:22"], "no Ceph address on this node: every port judged"),
        ([], "no Ceph address on this node: every port judged"),
        # OSDs without public_network/cluster_network bind the wildcard address
        (
            ["0.0.0.0:6800", f"{PUBLIC}:6801"],
            "Ceph listens on every address (0.0.0.0:6800): every port judged",
        ),
        (["[::]:6800"], "Ceph listens on every address ([::]:6800): every port judged"),
        (
            [f"{PUBLIC}:6800", "10.99.0.12:6802"],
            "Ceph address 10.99.0.12 is on no interface's network: every port judged",
        ),
    ],
)
def test_without_known_ceph_ports_every_up_port_is_judged(
    make_tree: MakeTree, listen: list[str], why: str
) -> None:
    tree = make_tree(ceph_node(listen=listen))
    _, results = net_results(tree)
    assert results[("net.mtu", "eno1")] == ("warn", f"MTU 1500 (link up, 1 Gb/s; {why})")
    assert results[("net.mtu", "ens1f0np0")] == ("pass", f"MTU 9000 (link up, 100 Gb/s; {why})")
    assert results[("net.rings", "eno1")] == (
        "warn",
        f"rx 200/511, tx 511/511 (link up, 1 Gb/s; {why})",
    )


def test_a_ceph_address_above_no_port_judges_every_port(make_tree: MakeTree) -> None:
    desc = ceph_node(listen=[f"{PUBLIC}:6800", "10.30.0.12:6801"])
    desc["net"]["interfaces"].append(
        {"name": "vmbr1", "virtual": True, "kind": "bridge", "addresses": ["10.30.0.12/24"]}
    )
    _, results = net_results(make_tree(desc))
    why = "Ceph address 10.30.0.12 is on vmbr1, above no port the collector read"
    assert results[("net.mtu", "eno1")] == (
        "warn",
        f"MTU 1500 (link up, 1 Gb/s; {why}: every port judged)",
    )


def test_a_link_down_port_stays_skipped(make_tree: MakeTree) -> None:
    desc = ceph_node()
    desc["net"]["interfaces"][0].update(operstate="down", speed=-1)
    _, results = net_results(make_tree(desc))
    assert results[("net.mtu", "eno1")] == ("skip", "MTU 1500, link down: not judged")


@pytest.mark.parametrize(
    ("path", "fault", "reason"),
    [
        ("proc/net/tcp", "missing", "/proc/net/tcp: No such file or directory"),
        ("proc/net/tcp", "eio", "/proc/net/tcp: Input/output error"),
        ("proc/net/tcp", "empty", "/proc/net/tcp: no header: ''"),
        ("proc/net/tcp", "garbage", "/proc/net/tcp: no header"),
        ("proc/net/tcp6", "garbage", "/proc/net/tcp6: no header"),
        ("proc/net/route", "garbage", "/proc/net/route: no header"),
        ("proc/net/route", "missing", "/proc/net/route: No such file or directory"),
    ],
)
def test_unreadable_address_sources_make_the_ceph_ports_unknown(
    make_tree: MakeTree, path: str, fault: str, reason: str
) -> None:
    tree = make_tree(ceph_node(ports=(9000, 1500)), faults={path: fault})
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert devices_seen(result) == {"eno1", *PORTS}  # the metrics do not depend on it
    _, results = net_results(tree)
    for (check, subject), (status, observed) in results.items():
        # never pass, never a warning on a port that may not carry Ceph: unknown
        assert status == "unknown", (check, subject, observed)
        assert "Ceph ports unknown (" in observed and observed.endswith("): not judged")
        assert reason.replace("/proc", str(tree.proc)) in observed
    assert results[("net.mtu", "eno1")][1].startswith("MTU 1500 (link up, 1 Gb/s): Ceph ports")


def test_if_inet6_is_read_only_for_ipv6_ceph_addresses(make_tree: MakeTree) -> None:
    # garbage in if_inet6 does not matter while Ceph listens on IPv4 only
    tree = make_tree(ceph_node(), faults={"proc/net/if_inet6": "garbage"})
    assert net_outcome(collect([*tree.flags, *only_net()])).read_errors == 0
    desc = ceph_node(listen=["[fd00:10::12]:6800"])
    desc["net"]["interfaces"][1]["addresses"] = ["fd00:10::12/64"]
    tree = make_tree(desc, faults={"proc/net/if_inet6": "garbage"})
    ceph = net_outcome(collect([*tree.flags, *only_net()])).facts.ceph
    assert ceph.error is not None and "if_inet6: malformed line" in ceph.error


def test_no_ipv6_is_no_error(make_tree: MakeTree) -> None:
    """ipv6.disable=1: no tcp6 and no if_inet6."""
    tree = make_tree(
        ceph_node(), faults={"proc/net/tcp6": "missing", "proc/net/if_inet6": "missing"}
    )
    outcome = net_outcome(collect([*tree.flags, *only_net()]))
    assert outcome.read_errors == 0
    assert outcome.facts.ceph.interfaces == {PUBLIC: ("ens1f0np0",), CLUSTER: ("ens1f1np1",)}


def test_the_read_stops_after_the_listeners(make_tree: MakeTree) -> None:
    """Listeners come first (tcp_get_idx): what follows the first established socket is
    never read, so garbage there (or 100,000 connections) costs nothing."""
    tree = make_tree(ceph_node())
    tcp = tree.proc / "net/tcp"
    tcp.write_text(tcp.read_text() + "?garbage@value!\n" * 10 + "x" * 100_000)
    result = collect([*tree.flags, *only_net()])
    assert net_outcome(result).read_errors == 0
    assert net_outcome(result).facts.ceph.interfaces[PUBLIC] == ("ens1f0np0",)


# Parsers, with the byte order given: the kernel prints each __be32 word with %08X.

TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"


def tcp_line(n: int, local: str, state: str, remote: str = "00000000:0000") -> str:
    return f"{n:4d}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000   167"


V6 = "[fdce::ff00:0:0:1200]:3300"


@pytest.mark.parametrize(
    ("text", "family", "byteorder", "expected"),
    [
        ("0C000A0A:1A90", socket.AF_INET, "little", "10.10.0.12:6800"),
        ("0A0A000C:1A90", socket.AF_INET, "big", "10.10.0.12:6800"),
        ("00000000:0016", socket.AF_INET, "little", "0.0.0.0:22"),
        ("0000CEFD00000000000000FF00120000:0CE4", socket.AF_INET6, "little", V6),
        ("FDCE000000000000FF00000000001200:0CE4", socket.AF_INET6, "big", V6),
        # an IPv4-mapped address of a dual-stack socket is the IPv4 address
        ("0000000000000000FFFF00000C000A0A:1A90", socket.AF_INET6, "little", "10.10.0.12:6800"),
    ],
)  # fmt: skip
def test_parse_endpoint(text: str, family: int, byteorder: Any, expected: str) -> None:
    assert str(inet.parse_endpoint(text, family, byteorder=byteorder)) == expected


@pytest.mark.parametrize(
    "text", ["0C000A0A", "0C000A0A:1A9", "0C000A0Z:1A90", "0x000A0A:1A90", "0C000A0A:-1A9", "1:2"]
)
def test_parse_endpoint_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError, match="bad address"):
        inet.parse_endpoint(text, socket.AF_INET)


def test_parse_tcp_listeners() -> None:
    lines = [
        TCP_HEADER,
        tcp_line(0, "0C000A0A:1A90", "0A"),
        tcp_line(1, "0C000A0A:1A90", "03", "0D000A0A:D431"),  # a request (before 4.4)
        tcp_line(2, "0C00140A:1A92", "0A"),
        tcp_line(3, "0C000A0A:1A90", "01", "0D000A0A:D431"),  # established: the end
        tcp_line(4, "0C00140A:1A94", "0A"),  # never reached
        "?garbage@value!",
    ]
    found = inet.parse_tcp_listeners(lines, socket.AF_INET, byteorder="little")
    assert [str(lst) for lst in found] == ["10.10.0.12:6800", "10.20.0.12:6802"]
    assert inet.parse_tcp_listeners([TCP_HEADER], socket.AF_INET) == []
    for bad, message in (
        ([], "no header"),
        (["?garbage@value!"], "no header"),
        ([TCP_HEADER, "?garbage@value!"], "malformed line"),
        ([TCP_HEADER, tcp_line(0, "0C000A0A:1A90", "ZZ")], "bad state"),
        ([TCP_HEADER, tcp_line(0, "0C000A0A", "0A")], "bad address"),
    ):
        with pytest.raises(ParseError, match=message):
            inet.parse_tcp_listeners(bad, socket.AF_INET)


ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def route_line(iface: str, dest: str, gw: str, flags: str, mask: str) -> str:
    return f"{iface}\t{dest}\t{gw}\t{flags}\t0\t0\t0\t{mask}\t0\t0\t0".ljust(127)


def test_parse_route_keeps_connected_routes() -> None:
    lines = [
        ROUTE_HEADER.ljust(127),
        route_line("eno1", "00000000", "010AA8C0", "0003", "00000000"),  # default via gw
        route_line("eno1", "000AA8C0", "00000000", "0001", "00FFFFFF"),
        route_line("ens1f0np0", "00000A0A", "00000000", "0001", "00FFFFFF"),
        route_line("ens1f0np0", "0000000A", "010AA8C0", "0003", "000000FF"),  # via gw
        route_line("*", "0000140A", "00000000", "0201", "0000FFFF"),  # unreachable
        route_line("ens1f1np1", "0000140A", "00000000", "0000", "00FFFFFF"),  # not up
        route_line("ens1f1np1", "0000140A", "00000000", "0001", "0000FFFF"),
    ]
    routes = inet.parse_route(lines, byteorder="little")
    assert [(name, str(net)) for name, net in routes] == [
        ("eno1", "192.168.10.0/24"),
        ("ens1f0np0", "10.10.0.0/24"),
        ("ens1f1np1", "10.20.0.0/16"),
    ]
    for bad in ([], ["?garbage@value!"], [ROUTE_HEADER, "eno1\t0000\t0"], [ROUTE_HEADER,
                route_line("eno1", "0000000G", "00000000", "0001", "00FFFFFF")]):  # fmt: skip
        with pytest.raises(ParseError):
            inet.parse_route(bad)


def test_parse_if_inet6_and_where_an_address_is() -> None:
    lines = [
        "00000000000000000000000000000001 01 80 10 80       lo",
        "fd00ce00000000000000000000000012 03 40 00 80 ens1f0np0",
        "fe800000000000000e42a1fffe3c8e50 03 40 20 80 ens1f0np0",
        "fd00c100000000000000000000000012 05 40 00 80 ens1f1np1.20",
    ]
    inet6 = inet.parse_if_inet6(lines)
    assert [(n, str(i)) for n, i in inet6][1] == ("ens1f0np0", "fd00:ce00::12/64")
    net4 = ipaddress.IPv4Network
    routes = [("a", net4("10.0.0.0/8")), ("b", net4("10.1.0.0/16")), ("c", net4("10.1.0.0/16"))]
    where = inet.interfaces_of
    assert where(ipaddress.ip_address("10.1.2.3"), routes, inet6) == ("b", "c")  # longest
    assert where(ipaddress.ip_address("10.2.2.3"), routes, inet6) == ("a",)
    assert where(ipaddress.ip_address("192.168.1.1"), routes, inet6) == ()
    assert where(ipaddress.ip_address("fd00:ce00::12"), routes, inet6) == ("ens1f0np0",)
    # not held by any interface: the one whose prefix covers it
    assert where(ipaddress.ip_address("fd00:c100::99"), routes, inet6) == ("ens1f1np1.20",)
    for bad in (
        "fd00 03 40 00 80 eth0",
        "zz00ce00000000000000000000000012 03 40 00 80 eth0",
        "fd00ce00000000000000000000000012 03 99 00 80 eth0",  # prefix 153
        "?garbage@value!",
    ):
        with pytest.raises(ParseError, match="malformed line"):
            inet.parse_if_inet6([bad])


def test_read_lines_bounds(tmp_path: Path) -> None:
    path = tmp_path / "tcp"
    path.write_text("header\n" + "line\n" * 5)
    assert len(list(inet.read_lines(str(path), max_lines=5))) == 6
    with pytest.raises(ParseError, match="more than 4 entries"):
        list(inet.read_lines(str(path), max_lines=4))
    path.write_text("x" * 10_000)
    with pytest.raises(ParseError, match="a line longer than 512 bytes"):
        list(inet.read_lines(str(path)))
    with pytest.raises(FileNotFoundError) as caught:
        list(inet.read_lines(str(tmp_path / "none")))
    assert inet.describe(caught.value) == f"{tmp_path / 'none'}: No such file or directory"


# --- this machine ----------------------------------------------------------------------


def test_net_collector_on_this_machine() -> None:
    """The real /sys through pyudev discovery and the real ioctl: no errors, and the ring
    sizes of every physical port equal what `ethtool -g` shows."""
    result = collect(only_net())
    outcome = net_outcome(result)
    assert outcome.success, outcome.error
    assert outcome.read_errors == 0, outcome.facts.errors.items
    assert outcome.facts.ring_source == "ioctl"
    names = physical_with_rings()
    need(bool(names), "no physical interface with ring support on this machine")
    ethtool = need_tool("ethtool", "ethtool")
    for name in names:
        proc = subprocess.run([ethtool, "-g", name], capture_output=True, text=True, check=True)
        shown = parse_ethtool_g(proc.stdout)
        assert ring(result, name, "rx") == shown["current"]["RX"]
        assert ring(result, name, "tx") == shown["current"]["TX"]
        assert ring(result, name, "rx", "max_entries") == shown["max"]["RX"]
        assert ring(result, name, "tx", "max_entries") == shown["max"]["TX"]
    assert "lo" not in devices_seen(result)


def test_ceph_listeners_agree_with_ss() -> None:
    """The listening sockets parsed from this machine's /proc/net/tcp{,6} (in the host's
    byte order) are those `ss -ltn` shows."""
    ss = need_tool("ss", "iproute2")
    proc = subprocess.run([ss, "-Hltn"], capture_output=True, text=True, check=True)
    shown = set()
    for line in proc.stdout.splitlines():
        local = line.split()[3]
        host, _, port = local.rpartition(":")
        host = host.strip("[]").split("%")[0]  # "[::]", "127.0.0.53%lo"
        address = ipaddress.ip_address("0.0.0.0" if host == "*" else host)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        shown.add((address, int(port)))
    mine = {
        (lst.address, lst.port)
        for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))
        if os.path.exists(path)
        for lst in inet.parse_tcp_listeners(inet.read_lines(path), family, path)
    }
    assert mine == shown


# --- numbers and names no kernel prints --------------------------------------------------


@pytest.mark.parametrize(
    "text", ["\u0669\u0660\u0660\u0660", "9_000", str(2**70), "2147483648", " +\u0663"]
)
def test_parse_mtu_refuses_numbers_the_kernel_never_prints(text: str) -> None:
    """int() takes Unicode digits, "_" and any size; dev->mtu is printed "%d" in ASCII
    and dev_validate_mtu() keeps it within INT_MAX."""
    with pytest.raises(ParseError, match="mtu"):
        parse_mtu(text, "/sys/class/net/x/mtu")


@pytest.mark.parametrize("text", ["\u0661\u0660\u0660", "100_000", str(2**70), "2147483648"])
def test_parse_speed_and_numa_node_refuse_numbers_the_kernel_never_prints(text: str) -> None:
    """The same for the speed ("%d" of a u32) and the NUMA node (below MAX_NUMNODES)."""
    with pytest.raises(ParseError):
        parse_speed(text)
    with pytest.raises(ParseError):
        parse_numa_node(text)
    with pytest.raises(ParseError):
        parse_numa_node("1024")  # MAX_NUMNODES is at most 1 << 10


def test_an_mtu_in_arabic_digits_is_unknown_not_a_pass(make_tree: MakeTree) -> None:
    """ens1f1np1 has MTU 1500 (warn); "٩٠٠٠" once read as 9000 and passed, silently."""
    tree = make_tree(small())
    (tree.root / "sys/class/net/ens1f1np1/mtu").write_text("\u0669\u0660\u0660\u0660\n")
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert "not an MTU" in net_outcome(result).facts.errors.items[0]
    _, results = check_results(tree, *only_net())
    assert results[("net.mtu", "ens1f1np1")]["status"] == "unknown"


def _rename_port(tree: Tree, new: bytes) -> None:
    """Rename ens1f1np1 in the tree to the raw bytes ``new`` (Linux allows any byte in
    a name but '/', ':' and whitespace)."""
    d = os.fsencode(tree.root / NETDIR.format(fn=1, name="")).rstrip(b"/") + b"/"
    os.rename(d + b"ens1f1np1", d + new)
    link = os.fsencode(tree.sys / "class/net") + b"/"
    os.unlink(link + b"ens1f1np1")
    os.symlink(b"../../devices/pci0000:40/0000:40:01.1/0000:41:00.1/net/" + new, link + new)
    rings = os.fsencode(tree.root / ETHTOOL_FIXTURE_DIR) + b"/"
    os.rename(rings + b"ens1f1np1", rings + new)


def test_a_port_named_in_invalid_utf8_is_a_read_error_not_a_failed_scrape(
    make_tree: MakeTree,
) -> None:
    """A name that is not UTF-8 could be no label value: the exposition failed to encode,
    and every /metrics answered 500. Discovery leaves such a port out and counts it."""
    tree = make_tree(small())
    _rename_port(tree, b"ens\xff1")
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert "ens\\xff1" in net_outcome(result).facts.errors.items[0]
    assert devices_seen(result) == {"ens1f0np0"}
    text = exposition(result).decode("utf-8")  # valid UTF-8 throughout
    assert 'device="ens1f0np0"' in text


def test_a_driver_link_to_an_invalid_utf8_name_is_a_read_error(make_tree: MakeTree) -> None:
    """The driver label came from readlink unchecked: one bad byte failed the encoding."""
    tree = make_tree(small())
    link = os.fsencode(tree.root / NETDIR.format(fn=1, name="")).rstrip(b"/")
    link = link.rsplit(b"/", 1)[0] + b"/driver"
    target = os.readlink(link)
    os.unlink(link)
    os.symlink(target + b"\xff", link)
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert "not valid UTF-8" in net_outcome(result).facts.errors.items[0]
    info = [
        dict(labels)
        for name, labels in samples(result)
        if name == "cephnode_network_device_info" and ("device", "ens1f1np1") in labels
    ]
    assert [i["driver"] for i in info] == [""]
    exposition(result).decode("utf-8")


def test_a_label_that_cannot_be_encoded_does_not_fail_the_exposition() -> None:
    """Belt and braces behind the check at the source: one bad label is escaped, not a
    failed scrape."""
    family = GaugeMetricFamily("cephnode_x", "x", labels=["device"])
    family.add_metric(["ens\udcff1"], 1.0)
    assert encode([family]) == (
        b'# HELP cephnode_x x\n# TYPE cephnode_x gauge\ncephnode_x{device="ens\\udcff1"} 1.0\n'
    )
    assert state_hash([("ens\udcff1",)]) == state_hash([("ens\udcff1",)])


@pytest.mark.parametrize("fault", ["fifo", "dev-zero"])
def test_a_speed_file_that_is_not_regular_is_a_read_error_not_unknown(
    make_tree: MakeTree, fault: str
) -> None:
    """The refusal of a FIFO or device once carried EINVAL, which speed_show() answers
    for a link without settings: the port then had no speed and nothing was counted."""
    tree = make_tree(small())
    speed = tree.sys / "class/net/ens1f0np0/speed"
    speed.unlink()
    if fault == "fifo":
        os.mkfifo(speed)
    else:
        speed.symlink_to("/dev/zero")
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert "not a regular file" in net_outcome(result).facts.errors.items[0]


@pytest.mark.parametrize("path", ["proc/net/tcp", "proc/net/tcp6", "proc/net/route"])
def test_a_fifo_as_an_address_source_is_refused_at_once(make_tree: MakeTree, path: str) -> None:
    """read_lines used open(), which blocks on a FIFO without a writer until the
    collector's timeout lost every port; open_regular refuses it and names it."""
    tree = make_tree(ceph_node(ports=(9000, 1500)), faults={path: "fifo"})
    started = time.monotonic()
    result = collect([*tree.flags, *only_net()])
    assert time.monotonic() - started < 4  # not the 5 s collector timeout
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    assert devices_seen(result) == {"eno1", *PORTS}
    assert "not a regular file (FIFO)" in net_outcome(result).facts.errors.items[0]
