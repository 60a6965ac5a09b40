"""Device discovery: the sysfs enumerator on kernel-shaped trees, the pyudev enumerator on
this machine, and hot-plug with fixture events and with real uevents (veth, loop, a
``uevent`` write, a udevd-format broadcast), unprivileged and under the unit's seccomp
policy.
"""

from __future__ import annotations

import ctypes.util
import errno
import gc
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cephnode_exporter import devices
from cephnode_exporter.devices import (
    DeviceClass,
    DeviceDiscovery,
    DeviceSource,
    DiscoveryError,
    Enumeration,
    FixtureEvents,
    NetInterface,
    NvmeController,
    NvmeNamespace,
    NvmePath,
    SysfsDevices,
    UdevDevices,
    UdevEvents,
    choose_event_source,
)
from cephnode_exporter.devices import discovery as discovery_mod
from cephnode_exporter.hostfs import HostFS

from tests.conftest import REPO, need, need_root, need_tool

# --- a kernel-shaped sysfs tree ------------------------------------------------------


class SysTree:
    """Builds the parts of /sys the enumerator reads, with the kernel's link layout:
    class/<c>/<dev> -> ../../devices/<path>, block/<disk> -> ../devices/<path>."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    @property
    def fs(self) -> HostFS:
        return HostFS(sysfs=str(self.root))

    def device(self, path: str) -> Path:
        d = self.root / "devices" / path
        d.mkdir(parents=True, exist_ok=True)
        (d / "uevent").write_text("")
        return d

    def link(self, link: str, target: Path) -> None:
        where = self.root / link
        where.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(target, where.parent), where)

    def disk(self, path: str) -> Path:
        """A whole disk at devices/<path>, in class/block and the legacy block/."""
        d = self.device(path)
        (d / "queue").mkdir(exist_ok=True)
        self.link(f"class/block/{d.name}", d)
        self.link(f"block/{d.name}", d)
        return d

    def nvme(
        self, ctrl: str, parent: str, namespaces: tuple[str, ...] = (), glue: str = "nvme/"
    ) -> Path:
        """A controller under its parent device: <pci function>/nvme/nvmeX for PCIe
        (class devices sit in a directory named after the class), but
        virtual/nvme-fabrics/ctl/nvmeX (glue "") for fabrics."""
        base = f"{parent}/{glue}{ctrl}"
        c = self.device(base)
        self.link(f"class/nvme/{ctrl}", c)
        for ns in namespaces:
            self.disk(f"{base}/{ns}")
            part = self.device(f"{base}/{ns}/{ns}p1")
            (part / "partition").write_text("1\n")
            self.link(f"class/block/{ns}p1", part)
        return c

    def net(self, name: str, pci: str | None = None) -> Path:
        if pci is None:
            d = self.device(f"virtual/net/{name}")
        else:
            d = self.device(f"{pci}/net/{name}")
            os.symlink("../../../" + pci.rsplit("/", 1)[-1], d / "device")
        self.link(f"class/net/{name}", d)
        return d

    def remove_net(self, name: str) -> None:
        link = self.root / "class/net" / name
        shutil.rmtree(os.path.realpath(link))
        link.unlink()

    def resolved(self, path: str) -> str:
        return os.path.realpath(self.root / "devices" / path)


PCI0 = "pci0000:00/0000:00:01.1/0000:01:00.0"
PCI1 = "pci0000:00/0000:00:01.2/0000:02:00.0"
NIC0 = "pci0000:40/0000:40:01.1/0000:41:00.0"
NIC1 = "pci0000:40/0000:40:01.1/0000:41:00.1"


def standard_tree(root: Path) -> SysTree:
    """Two NVMe controllers (one and two namespaces, each with a partition), two NIC
    ports, a bridge, a veth, lo, and the bonding module's class attribute file."""
    t = SysTree(root)
    t.nvme("nvme0", PCI0, ("nvme0n1",))
    t.nvme("nvme1", PCI1, ("nvme1n1", "nvme1n2"))
    t.net("eth0", NIC0)
    t.net("eth1", NIC1)
    for name in ("br0", "veth0", "lo"):
        t.net(name)
    (t.root / "class/net/bonding_masters").write_text("\n")
    return t


@pytest.fixture
def tree(tmp_path: Path) -> SysTree:
    return standard_tree(tmp_path / "sys")


def names(enum: Enumeration | devices.Snapshot, cls: type) -> list[str]:
    return [d.name for d in enum.devices if isinstance(d, cls)]


def wait_for(pred: Callable[[], object], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return bool(pred())


def monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("cephnode-devices-")]


def open_fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


# --- the fixture tree is laid out like the kernel's -------------------------------------


def test_fixture_links_have_the_kernel_layout(tree: SysTree) -> None:
    r = tree.root
    assert os.readlink(r / "class/nvme/nvme0") == f"../../devices/{PCI0}/nvme/nvme0"
    assert os.readlink(r / "block/nvme0n1") == f"../devices/{PCI0}/nvme/nvme0/nvme0n1"
    assert os.readlink(r / "class/block/nvme0n1") == f"../../devices/{PCI0}/nvme/nvme0/nvme0n1"
    assert os.readlink(r / "class/net/eth0") == f"../../devices/{NIC0}/net/eth0"
    assert os.readlink(r / "class/net/br0") == "../../devices/virtual/net/br0"
    assert os.readlink(r / f"devices/{NIC0}/net/eth0/device") == "../../../0000:41:00.0"


# --- SysfsDevices ------------------------------------------------------------------------


def test_sysfs_enumeration(tree: SysTree) -> None:
    enum = SysfsDevices(tree.fs).enumerate()
    assert enum.errors == ()
    assert enum.devices == (
        NvmeController("nvme0", tree.resolved(f"{PCI0}/nvme/nvme0"), "0000:01:00.0"),
        NvmeController("nvme1", tree.resolved(f"{PCI1}/nvme/nvme1"), "0000:02:00.0"),
        NvmeNamespace(
            "nvme0n1", tree.resolved(f"{PCI0}/nvme/nvme0/nvme0n1"), "0000:01:00.0", ("nvme0",)
        ),
        NvmeNamespace(
            "nvme1n1", tree.resolved(f"{PCI1}/nvme/nvme1/nvme1n1"), "0000:02:00.0", ("nvme1",)
        ),
        NvmeNamespace(
            "nvme1n2", tree.resolved(f"{PCI1}/nvme/nvme1/nvme1n2"), "0000:02:00.0", ("nvme1",)
        ),
        NetInterface("br0", tree.resolved("virtual/net/br0"), None, True),
        NetInterface("eth0", tree.resolved(f"{NIC0}/net/eth0"), "0000:41:00.0", False),
        NetInterface("eth1", tree.resolved(f"{NIC1}/net/eth1"), "0000:41:00.1", False),
        NetInterface("lo", tree.resolved("virtual/net/lo"), None, True),
        NetInterface("veth0", tree.resolved("virtual/net/veth0"), None, True),
    )
    ns = enum.devices[2]
    assert isinstance(ns, NvmeNamespace)
    assert ns.kind == "nvme_namespace"
    assert ns.controller == "nvme0"
    assert ns.paths == ()


def test_sysfs_nvme_corner_cases(tmp_path: Path) -> None:
    """Native multipath, a namespace named after the subsystem rather than its
    controller, a fabrics controller, a VMD domain, and natural ordering."""
    t = SysTree(tmp_path / "sys")
    # Shared namespace: head nvme2n1 under nvme-subsys2, hidden paths under nvme2 and nvme3.
    a = t.nvme("nvme2", "pci0000:00/0000:00:03.1/0000:03:00.0")
    b = t.nvme("nvme3", "pci0000:00/0000:00:03.2/0000:04:00.0")
    for ctrl in (a, b):
        t.disk(os.path.relpath(ctrl / f"nvme2c{ctrl.name[4:]}n1", t.root / "devices"))
    t.disk("virtual/nvme-subsystem/nvme-subsys2/nvme2n1")
    # multipath compiled in, namespace not shared: subsystem number in the name (nvme4n1)
    # while the disk sits under controller nvme10.
    t.nvme("nvme10", "pci0000:00/0000:00:04.1/0000:05:00.0", ("nvme4n1",))
    # NVMe over TCP: under devices/virtual/nvme-fabrics/ctl, no PCI function.
    t.nvme("nvme5", "virtual/nvme-fabrics/ctl", ("nvme5n1",), glue="")
    # Intel VMD: a five-digit PCI domain.
    vmd = "pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0"
    t.nvme("nvme6", vmd, ("nvme6n1",))
    # Not NVMe, not namespaces: ignored.
    t.disk("pci0000:00/0000:00:02.0/virtio1/block/vda")
    t.device("virtual/nvme-subsystem/nvme-subsys2")

    snap = SysfsDevices(t.fs).enumerate()
    assert snap.errors == ()
    assert names(snap, NvmeController) == ["nvme2", "nvme3", "nvme5", "nvme6", "nvme10"]
    assert names(snap, NvmeNamespace) == ["nvme2n1", "nvme4n1", "nvme5n1", "nvme6n1"]
    by = {d.name: d for d in snap.devices}
    head = by["nvme2n1"]
    assert isinstance(head, NvmeNamespace)
    assert head.controllers == ("nvme2", "nvme3")
    assert head.multipath
    assert head.paths == tuple(
        NvmePath(f"nvme2c{c.name[4:]}n1", c.name, os.path.realpath(c / f"nvme2c{c.name[4:]}n1"))
        for c in (a, b)
    )
    assert head.controller == "nvme2"
    assert head.pci is None  # the head is virtual: look its controllers up
    assert not by["nvme4n1"].multipath  # type: ignore[attr-defined]
    assert by["nvme4n1"].paths == ()  # type: ignore[attr-defined]
    assert by["nvme4n1"].controllers == ("nvme10",)  # type: ignore[attr-defined]
    assert by["nvme5"].pci is None
    assert by["nvme5n1"].controllers == ("nvme5",)  # type: ignore[attr-defined]
    assert by["nvme6"].pci == "10000:e1:00.0"
    assert by["nvme6n1"].pci == "10000:e1:00.0"


def test_sysfs_root_behind_a_symlink(tree: SysTree, tmp_path: Path) -> None:
    """--path.sysfs may name a symlink (a bind-mount path); records carry resolved paths."""
    os.symlink(tree.root, tmp_path / "hostsys")
    via_link = SysfsDevices(HostFS(sysfs=str(tmp_path / "hostsys"))).enumerate()
    assert via_link == SysfsDevices(tree.fs).enumerate()
    assert via_link.devices[0].syspath.startswith(os.path.realpath(tree.root))


def test_sysfs_legacy_block_dir_only(tree: SysTree) -> None:
    shutil.rmtree(tree.root / "class/block")
    assert names(SysfsDevices(tree.fs).enumerate(), NvmeNamespace) == [
        "nvme0n1",
        "nvme1n1",
        "nvme1n2",
    ]


def test_sysfs_empty_and_missing_tree(tmp_path: Path) -> None:
    """No class directories (no NVMe driver, a bare container) is no devices, no error."""
    assert SysfsDevices(HostFS(sysfs=str(tmp_path / "nothing"))).enumerate() == Enumeration(())
    (tmp_path / "sys/class").mkdir(parents=True)
    assert SysfsDevices(HostFS(sysfs=str(tmp_path / "sys"))).enumerate() == Enumeration(())


def test_sysfs_dangling_and_missing_links(tree: SysTree) -> None:
    r = tree.root
    os.symlink("../../devices/virtual/net/gone0", r / "class/net/gone0")  # dangling
    os.symlink("../../devices/pci0000:00/x/nvme/nvme9", r / "class/nvme/nvme9")
    os.symlink("../devices/nowhere/nvme8n1", r / "block/nvme8n1")
    os.unlink(r / f"devices/{NIC1}/net/eth1/device")  # eth1 without its device link
    enum = SysfsDevices(tree.fs).enumerate()
    assert enum.errors == ()
    assert "gone0" not in names(enum, NetInterface)
    assert names(enum, NvmeController) == ["nvme0", "nvme1"]
    eth1 = next(d for d in enum.devices if d.name == "eth1")
    # The sysfs location decides: eth1 still sits under its PCI function.
    assert eth1 == NetInterface("eth1", tree.resolved(f"{NIC1}/net/eth1"), "0000:41:00.1", False)


def test_sysfs_link_loop_is_a_counted_error(tree: SysTree) -> None:
    os.symlink("loop0", tree.root / "class/net/loop0")
    enum = SysfsDevices(tree.fs).enumerate()
    assert len(enum.errors) == 1
    assert "class/net/loop0" in enum.errors[0].message
    assert enum.errors[0].device_class is DeviceClass.NET
    assert len(names(enum, NetInterface)) == 5


def test_sysfs_unreadable_class_dir(tree: SysTree, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES on a class directory (chmod 000 does not stop root, so the listing is
    failed instead): that class is missing and counted, the others are enumerated."""
    real = os.listdir
    net = str(tree.root / "class/net")

    def listdir(path: str) -> list[str]:
        if str(path) == net:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    enum = SysfsDevices(tree.fs).enumerate()
    assert names(enum, NetInterface) == []
    assert names(enum, NvmeController) == ["nvme0", "nvme1"]
    assert enum.errors == (DiscoveryError(DeviceClass.NET, f"{net}: Permission denied"),)


def test_sysfs_class_dir_is_a_file(tree: SysTree) -> None:
    shutil.rmtree(tree.root / "class/nvme")
    (tree.root / "class/nvme").write_text("garbage")
    enum = SysfsDevices(tree.fs).enumerate()
    assert names(enum, NvmeController) == []
    assert len(enum.errors) == 1 and "class/nvme" in str(enum.errors[0])
    assert enum.errors[0].device_class is DeviceClass.NVME
    assert names(enum, NvmeNamespace) == ["nvme0n1", "nvme1n1", "nvme1n2"]


def test_sysfs_device_vanishing_mid_enumeration(
    tree: SysTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interface listed and then gone (hot-unplug between readdir and readlink), and
    one whose device directory goes away right after the listing: skipped, no error."""
    real = os.listdir
    net = str(tree.root / "class/net")

    def listdir(path: str) -> list[str]:
        out = real(path)
        if str(path) == net:
            shutil.rmtree(os.path.realpath(os.path.join(net, "eth1")))
            out.append("eth7")  # in the listing, never on disk
        return out

    monkeypatch.setattr(os, "listdir", listdir)
    enum = SysfsDevices(tree.fs).enumerate()
    assert enum.errors == ()
    assert names(enum, NetInterface) == ["br0", "eth0", "lo", "veth0"]


# --- UdevDevices on this machine --------------------------------------------------------


def real_net_names() -> set[str]:
    return {n for n in os.listdir("/sys/class/net") if os.path.isdir(f"/sys/class/net/{n}")}


def test_udev_enumeration_matches_sys_class_net() -> None:
    snap = UdevDevices().enumerate()
    assert snap.errors == ()
    for _ in range(3):  # another test may add a veth between the two listings
        if set(names(UdevDevices().enumerate(), NetInterface)) == real_net_names():
            break
        time.sleep(0.2)
    else:
        raise AssertionError("pyudev and /sys/class/net disagree")
    lo = next(d for d in snap.devices if d.name == "lo")
    assert lo == NetInterface("lo", "/sys/devices/virtual/net/lo", None, True)
    for d in snap.devices:
        assert os.path.realpath(d.syspath) == d.syspath
        if isinstance(d, NetInterface) and not d.virtual:
            assert os.path.exists(f"/sys/class/net/{d.name}/device")


def test_udev_and_sysfs_give_identical_records_here() -> None:
    """The adapter's promise: on the real /sys both implementations return equal records."""
    for _ in range(3):
        udev, sysfs = UdevDevices().enumerate(), SysfsDevices(HostFS()).enumerate()
        if udev == sysfs:
            return
        time.sleep(0.2)
    assert udev == sysfs


# --- hot-plug with the adapter's fixture events ---------------------------------------


class Counting(DeviceSource):
    """Wraps an enumerator: counts passes, and can hold one until ``gate`` opens."""

    backend = "sysfs"

    def __init__(self, inner: DeviceSource) -> None:
        self.inner = inner
        self.calls = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def enumerate(self) -> Enumeration:
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        return self.inner.enumerate()


@pytest.fixture
def fixture_discovery(tree: SysTree) -> Iterator[tuple[DeviceDiscovery, FixtureEvents, Counting]]:
    events = FixtureEvents()
    source = Counting(SysfsDevices(tree.fs))
    d = DeviceDiscovery(source, events, debounce=0.05, max_delay=1.0)
    d.start()
    yield d, events, source
    if source.gate is not None:
        source.gate.set()
    d.stop()


def test_fixture_events_add_and_remove(
    tree: SysTree, fixture_discovery: tuple[DeviceDiscovery, FixtureEvents, Counting]
) -> None:
    d, events, _ = fixture_discovery
    first = d.devices()
    assert first.generation == 1
    assert d.status().discovery_source == "fixture"
    assert d.status().monitor_ok

    tree.net("eth2", "pci0000:40/0000:40:01.1/0000:41:00.2")
    tree.nvme("nvme2", "pci0000:00/0000:00:01.3/0000:03:00.0", ("nvme2n1",))
    events.inject("add", "net", "eth2")
    events.inject("add", "nvme", "nvme2")
    events.inject("add", "block", "nvme2n1")
    assert wait_for(lambda: d.snapshot().find(NvmeNamespace, "nvme2n1") is not None)
    added = d.devices()
    assert added.generation == 2
    assert added.find(NetInterface, "eth2") is not None
    assert added.find(NvmeController, "nvme2") is not None

    tree.remove_net("eth0")
    events.inject("remove", "net", "eth0")
    assert wait_for(lambda: d.snapshot().find(NetInterface, "eth0") is None)
    assert d.devices().generation == 3
    assert [e.action for e in events.delivered] == ["add", "add", "add", "remove"]
    assert d.status().events == 4


def test_an_event_without_a_change_keeps_the_generation(
    fixture_discovery: tuple[DeviceDiscovery, FixtureEvents, Counting],
) -> None:
    d, events, source = fixture_discovery
    events.inject("change", "block", "nvme0n1")
    assert wait_for(lambda: source.calls == 2)
    assert d.snapshot().generation == 1


def test_a_burst_of_events_is_one_enumeration(tree: SysTree) -> None:
    events = FixtureEvents()
    source = Counting(SysfsDevices(tree.fs))
    with DeviceDiscovery(source, events, debounce=0.5, max_delay=10.0) as d:
        assert source.calls == 1
        for i in range(20):
            tree.net(f"dummy{i}")
        for i in range(20):
            events.inject("add", "net", f"dummy{i}")
        assert wait_for(lambda: d.snapshot().find(NetInterface, "dummy19") is not None)
        time.sleep(1.0)
        assert source.calls == 2
        assert d.status().events == 20
        assert d.status().refreshes == 2


def test_an_event_storm_still_refreshes_after_max_delay(tree: SysTree) -> None:
    """Events every 20 ms never leave a 0.2 s quiet window; max_delay bounds the wait."""
    events = FixtureEvents()
    source = Counting(SysfsDevices(tree.fs))
    with DeviceDiscovery(source, events, debounce=0.2, max_delay=0.4):
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            events.inject("change", "net", "eth0")
            time.sleep(0.02)
        during = source.calls
    assert during >= 3  # the initial pass and at least two during the storm


def test_plain_refresh_and_rescan_mode(tree: SysTree) -> None:
    d = DeviceDiscovery(SysfsDevices(tree.fs), events=None, rescan_interval=3600)
    d.start()
    assert d.status().discovery_source == "rescan"
    assert d.status().monitor_ok  # no monitor by choice is not a failure
    assert monitor_threads() == []
    tree.net("eth2")
    assert d.devices().find(NetInterface, "eth2") is None  # within rescan_interval
    assert d.refresh().find(NetInterface, "eth2") is not None
    d.rescan_interval = 0
    tree.remove_net("eth2")
    assert d.devices().find(NetInterface, "eth2") is None
    d.stop()


def test_a_scrape_never_waits_for_the_monitor(
    tree: SysTree, fixture_discovery: tuple[DeviceDiscovery, FixtureEvents, Counting]
) -> None:
    """While the monitor thread is stuck in an enumeration (a hung sysfs read), readers
    get the previous snapshot at once; stop() gives up on it after its timeout."""
    d, events, source = fixture_discovery
    source.gate = threading.Event()
    source.entered.clear()
    tree.net("eth2")
    events.inject("add", "net", "eth2")
    assert source.entered.wait(5)
    t0 = time.monotonic()
    for _ in range(100):
        snap = d.devices()
        d.status()
    assert time.monotonic() - t0 < 0.5
    assert snap.generation == 1 and snap.find(NetInterface, "eth2") is None
    d.stop(timeout=0.2)  # the thread is still inside enumerate()
    source.gate.set()  # the enumeration returns; the thread sees the closed pipe, exits
    assert wait_for(lambda: monitor_threads() == [], 5)


def test_monitor_error_falls_back_to_rescan(
    tree: SysTree,
    fixture_discovery: tuple[DeviceDiscovery, FixtureEvents, Counting],
    caplog: pytest.LogCaptureFixture,
) -> None:
    d, events, source = fixture_discovery
    d.rescan_interval = 3600
    with caplog.at_level(logging.WARNING, logger="cephnode_exporter.devices.discovery"):
        events.fail(OSError(errno.EIO, "injected"))
        assert wait_for(lambda: not d.status().monitor_ok)
        assert wait_for(lambda: monitor_threads() == [])
    status = d.status()
    assert status.discovery_source == "rescan"
    assert status.last_error == "OSError: [Errno 5] injected"
    failures = [r for r in caplog.records if "device monitor failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].kv["source"] == "fixture"  # type: ignore[attr-defined]

    # No event arrives any more, yet the next scrape sees the new device ...
    tree.net("eth2")
    calls = source.calls
    assert d.devices().find(NetInterface, "eth2") is not None
    # ... and the collectors of the same scrape share that pass.
    d.devices()
    d.devices()
    assert source.calls == calls + 1
    assert len([r for r in caplog.records if "device monitor failed" in r.getMessage()]) == 1

    # A restart brings the monitor back.
    d.stop()
    d.start()
    assert d.status().monitor_ok and d.status().discovery_source == "fixture"


def test_monitor_that_cannot_open_falls_back(
    tree: SysTree, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(source: str) -> UdevEvents:
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setattr(discovery_mod, "UdevEvents", refuse)
    with caplog.at_level(logging.WARNING, logger="cephnode_exporter.devices.discovery"):
        d = DeviceDiscovery(SysfsDevices(tree.fs), events="kernel", rescan_interval=0)
        d.start()
    assert monitor_threads() == []
    status = d.status()
    assert (status.monitor_ok, status.discovery_source) == (False, "rescan")
    assert "Address family" in (status.last_error or "")
    assert len(names(d.devices(), NetInterface)) == 5
    assert sum("device monitor failed" in r.getMessage() for r in caplog.records) == 1
    d.stop()


def test_enobufs_means_events_were_lost() -> None:
    """A socket overrun is reported as one event: the set is re-enumerated, not failed."""

    class Overrun:
        def __init__(self) -> None:
            self.results: list[object] = [object(), OSError(errno.ENOBUFS, "No buffer")]

        def poll(self, timeout: float) -> object:
            item = self.results.pop(0) if self.results else None
            if isinstance(item, OSError):
                raise item
            return item

    stream = UdevEvents.__new__(UdevEvents)
    stream._monitor = Overrun()  # type: ignore[assignment]
    assert stream.receive() == 2
    assert stream.receive() == 0


def test_start_stop_cycles_leak_no_threads_or_fds(tree: SysTree) -> None:
    events = FixtureEvents()
    d = DeviceDiscovery(SysfsDevices(tree.fs), events, debounce=0.01)
    d.start()
    d.stop()
    threads, fds = threading.active_count(), open_fds()
    for _ in range(25):
        d.start()
        d.start()  # idempotent
        assert len(monitor_threads()) == 1
        events.inject("add", "net", "eth0")
        d.stop()
        d.stop()
    assert monitor_threads() == []
    assert threading.active_count() == threads
    assert open_fds() == fds


def test_real_monitor_start_stop_cycles_leak_nothing(tree: SysTree) -> None:
    """The same with a real netlink socket (kernel group: no privilege needed)."""
    d = DeviceDiscovery(SysfsDevices(tree.fs), events="kernel")
    d.start()
    d.stop()
    fds = open_fds()
    for _ in range(10):
        d.start()
        assert d.status().discovery_source == "kernel"
        d.stop()
    assert monitor_threads() == []
    assert open_fds() == fds


# --- event source selection -----------------------------------------------------------


def test_choose_event_source_follows_udev_control(tmp_path: Path) -> None:
    control = tmp_path / "run/udev/control"
    assert choose_event_source(str(control)) == "kernel"
    control.parent.mkdir(parents=True)
    control.touch()
    assert choose_event_source(str(control)) == "udev"


@pytest.mark.parametrize("udevd", [True, False])
def test_auto_source_opens_that_netlink_group(tmp_path: Path, tree: SysTree, udevd: bool) -> None:
    control = tmp_path / "run/udev/control"
    if udevd:
        control.parent.mkdir(parents=True)
        control.touch()
    with DeviceDiscovery(SysfsDevices(tree.fs), "auto", udev_control=str(control)) as d:
        assert d.status().discovery_source == ("udev" if udevd else "kernel")
        assert d.status().monitor_ok


# --- hot-plug with real uevents -------------------------------------------------------


def ip(*args: str, check: bool = True) -> None:
    subprocess.run([need_tool("ip", "iproute2"), *args], check=check, capture_output=True)


@pytest.fixture
def veth_name() -> Iterator[str]:
    need_root("creates and deletes veth interfaces")
    name = f"cnxd{os.getpid() % 100000}"
    yield name
    ip("link", "del", name, check=False)


def test_real_veth_hotplug_through_the_kernel_source(veth_name: str) -> None:
    with DeviceDiscovery(UdevDevices(), "kernel", debounce=0.05) as d:
        assert d.status().discovery_source == "kernel"
        gen = d.snapshot().generation
        ip("link", "add", veth_name, "type", "veth", "peer", "name", veth_name + "p")
        assert wait_for(lambda: d.snapshot().find(NetInterface, veth_name + "p"), 5)
        added = d.snapshot().find(NetInterface, veth_name)
        assert added == NetInterface(veth_name, f"/sys/devices/virtual/net/{veth_name}", None, True)
        assert d.snapshot().generation > gen
        ip("link", "del", veth_name)  # removes the peer too
        assert wait_for(
            lambda: not {veth_name, veth_name + "p"} & set(names(d.snapshot(), NetInterface)), 5
        )
        assert d.status().monitor_ok


def test_real_uevent_write_and_loop_device(veth_name: str, tmp_path: Path) -> None:
    """A synthetic ``change`` written to a uevent file, and a loop device bound and
    unbound (``change`` events on block/disk), each reach the monitor and cause a
    re-enumeration. (No assertion on the generation: tests running in parallel on this
    machine may add their own interfaces meanwhile.)"""
    losetup = need_tool("losetup", "mount")
    ip("link", "add", veth_name, "type", "veth", "peer", "name", veth_name + "p")
    with DeviceDiscovery(UdevDevices(), "kernel", debounce=0.05) as d:
        before = d.status()
        Path(f"/sys/class/net/{veth_name}/uevent").write_text("change")
        assert wait_for(lambda: d.status().refreshes > before.refreshes, 5)
        after_write = d.status()
        assert after_write.events > before.events

        image = tmp_path / "loop.img"
        image.write_bytes(b"\0" * (1 << 20))
        dev = subprocess.run(
            [losetup, "--find", "--show", str(image)], capture_output=True, text=True, check=True
        ).stdout.strip()
        subprocess.run([losetup, "--detach", dev], check=True)
        assert wait_for(lambda: d.status().events > after_write.events, 5)
        assert wait_for(lambda: d.status().refreshes > after_write.refreshes, 5)
        assert d.status().monitor_ok


def murmur2(data: bytes) -> int:
    """MurmurHash2, 32 bit, seed 0: libudev hashes subsystem names with it for its
    in-kernel socket filter (systemd src/basic/MurmurHash2.c, device-monitor.c)."""
    m = 0x5BD1E995
    h = len(data)
    n = len(data) // 4
    for i in range(n):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[4 * n :]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def udevd_broadcast(action: str, subsystem: str, devpath: str, seqnum: int) -> None:
    """Send what udevd sends after processing an event: a "libudev" header (magic
    0xfeedcafe, subsystem hash, big-endian as the BPF filter reads them) and the
    properties, to NETLINK_KOBJECT_UEVENT group 2. Needs CAP_NET_ADMIN."""
    props = (
        f"ACTION={action}\0DEVPATH={devpath}\0SUBSYSTEM={subsystem}\0SEQNUM={seqnum}\0"
    ).encode()
    header = (
        b"libudev\0"
        + struct.pack(">I", 0xFEEDCAFE)
        + struct.pack("=III", 40, 40, len(props))  # header_size, properties_off/_len
        + struct.pack(">IIII", murmur2(subsystem.encode()), 0, 0, 0)
    )
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15) as s:  # KOBJECT_UEVENT
        s.sendto(header + props, (0, 2))


def test_udev_source_hears_udevd_not_the_kernel(veth_name: str, tmp_path: Path) -> None:
    """With source "udev" the monitor sits on group 2. Here, without udevd, a kernel
    uevent alone changes nothing; the stand-in udevd broadcast that follows it does, and a
    foreign subsystem is filtered out. On a host where udevd runs, the real udevd's
    broadcast is awaited instead: faking udev events there would reach every other
    libudev listener (NetworkManager, systemd) too."""
    real_udevd = os.path.exists(devices.udev.UDEV_CONTROL)
    control = tmp_path / "control"
    control.touch()
    with DeviceDiscovery(UdevDevices(), "auto", udev_control=str(control), debounce=0.05) as d:
        assert d.status().discovery_source == "udev"
        ip("link", "add", veth_name, "type", "veth", "peer", "name", veth_name + "p")
        if real_udevd:
            assert wait_for(lambda: d.snapshot().find(NetInterface, veth_name), 10)
            ip("link", "del", veth_name)
            assert wait_for(lambda: d.snapshot().find(NetInterface, veth_name) is None, 10)
            return
        time.sleep(0.5)
        assert d.status().events == 0
        assert d.snapshot().find(NetInterface, veth_name) is None
        udevd_broadcast("add", "tty", "/devices/virtual/tty/ttyX", 1)
        udevd_broadcast("add", "net", f"/devices/virtual/net/{veth_name}", 2)
        assert wait_for(lambda: d.snapshot().find(NetInterface, veth_name), 5)
        assert d.status().events == 1
        ip("link", "del", veth_name)
        udevd_broadcast("remove", "net", f"/devices/virtual/net/{veth_name}", 3)
        assert wait_for(lambda: d.snapshot().find(NetInterface, veth_name) is None, 5)


# --- privileges: unprivileged, and under the unit's seccomp policy -------------------

CHILD = r"""
import os, sys, time
from cephnode_exporter.devices import DeviceDiscovery, NetInterface, UdevDevices, UdevEvents
name, mode = sys.argv[1], sys.argv[2]
if mode == "nobody":
    UdevDevices().enumerate()  # every lazy import happens before the drop
    UdevEvents("kernel").close()
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
d = DeviceDiscovery(UdevDevices(), "kernel", debounce=0.05)
d.start()
s = d.status()
print("READY", os.geteuid(), s.discovery_source, s.monitor_ok, flush=True)
def wait(present):
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if (d.snapshot().find(NetInterface, name) is not None) == present:
            return True
        time.sleep(0.01)
    return False
print("APPEARED" if wait(True) else "TIMEOUT", flush=True)
print("VANISHED" if wait(False) else "TIMEOUT", flush=True)
d.stop()
"""


def run_child(argv: list[str], name: str) -> list[str]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    lines = []
    try:
        assert proc.stdout is not None
        lines.append(proc.stdout.readline().strip())
        ip("link", "add", name, "type", "veth", "peer", "name", name + "p")
        lines.append(proc.stdout.readline().strip())
        ip("link", "del", name)
        lines.append(proc.stdout.readline().strip())
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines


def test_monitor_works_unprivileged(veth_name: str) -> None:
    """The service runs as an unprivileged user: as uid 65534 the netlink socket binds
    (both groups) and the monitor sees a real veth come and go."""
    code = (
        "import os, socket\n"
        "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
        "for group in (1, 2):\n"
        "    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15)\n"
        "    s.bind((0, group)); print(os.geteuid(), s.getsockname()[1]); s.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["65534 1", "65534 2"]
    lines = run_child([sys.executable, "-c", CHILD, veth_name, "nobody"], veth_name)
    assert lines == ["READY 65534 kernel True", "APPEARED", "VANISHED"]


def test_monitor_works_under_the_unit_policy(veth_name: str) -> None:
    """The unit's SystemCallFilter=, RestrictAddressFamilies= (AF_NETLINK allowed) and
    MemoryDenyWriteExecute=, rebuilt with libseccomp as test_deploy.py does."""
    from tests.test_deploy import UNIT, confined, parse_unit, seccomp_policy

    need(ctypes.util.find_library("seccomp") is not None, "libseccomp2 not installed")
    policy = seccomp_policy(parse_unit(UNIT.read_text()))
    argv = confined(policy, sys.executable, "-c", CHILD, veth_name, "root")
    lines = run_child(argv, veth_name)
    assert lines == ["READY 0 kernel True", "APPEARED", "VANISHED"]

    # Negative control: without AF_NETLINK in RestrictAddressFamilies= the monitor cannot
    # open; discovery says so and falls back to re-enumerating on every scrape.
    policy["families"] = [f for f in policy["families"] if f != socket.AF_NETLINK]  # type: ignore[union-attr]
    code = (
        "from cephnode_exporter.devices import DeviceDiscovery, UdevDevices\n"
        "d = DeviceDiscovery(UdevDevices(), 'kernel'); d.start(); s = d.status()\n"
        "print(s.discovery_source, s.monitor_ok, len(d.devices().net_interfaces) > 0)\n"
    )
    proc = subprocess.run(
        confined(policy, sys.executable, "-c", code),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.stdout.split() == ["rescan", "False", "True"], proc.stderr
    assert "device monitor failed" in proc.stderr


# --- one shared discovery per host ----------------------------------------------------


def test_acquire_shares_and_release_stops(tree: SysTree) -> None:
    a = devices.acquire(tree.fs)
    b = devices.acquire(tree.fs)
    assert a is b
    assert a.status().backend == "sysfs"
    assert a.status().discovery_source == "rescan"  # a fixture root has no event socket
    devices.release(a)
    devices.release(b)
    assert devices.acquire(tree.fs) is not a
    devices.release(devices.acquire(tree.fs))


def test_acquire_real_sys_runs_the_monitor() -> None:
    d = devices.acquire(HostFS())
    try:
        assert d.status().backend == "udev"
        assert d.status().discovery_source == choose_event_source()
        assert d.monitoring()
        assert d.devices().find(NetInterface, "lo") is not None
    finally:
        devices.release(d)
    assert monitor_threads() == []


def test_a_class_entry_named_in_invalid_utf8_is_a_counted_error(tree: SysTree) -> None:
    """Linux allows any byte but '/' in an interface name; one that is not UTF-8 can be
    no label value, and failed the encoding of the whole exposition. Discovery leaves it
    out and counts it, naming it readably."""
    tree.net("eth\udcff2")  # the byte 0xff, as os.listdir hands it back
    tree.net("eth1\u00b2")  # valid UTF-8 (a superscript two): kept, and sorts
    enum = SysfsDevices(tree.fs).enumerate()
    assert [e.message for e in enum.errors] == [
        f"{tree.root}/class/net/eth\\xff2: name is not valid UTF-8: 'eth\\xff2'"
    ]
    assert enum.errors[0].device_class is DeviceClass.NET
    assert "eth1\u00b2" in names(enum, NetInterface)
    assert not any("\udcff" in n for n in names(enum, NetInterface))
