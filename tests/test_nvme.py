"""The `nvme` collector and its checks `nvme.scheduler` and `nvme.pcie_link`.

Layers: pure parsers on the strings real kernels print (both PCIe speed spellings, both
scheduler layouts); the collector on both reference nodes (exact values and a golden
exposition); the checks through the real entry point (`check --format json`); bad input
(EIO, garbage, missing files, a controller that vanishes between discovery and read);
hot-plug through the discovery layer's fixture events; and this machine.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter import devices
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors import REGISTRY
from cephnode_exporter.devices import DeviceDiscovery, FixtureEvents, NvmeController, SysfsDevices
from cephnode_exporter.hostfs import HostFS, ParseError
from cephnode_exporter.hostfs.nvme import (
    parse_count,
    parse_id_string,
    parse_inflight,
    parse_scheduler,
    read_wbt_lat_usec,
)
from cephnode_exporter.hostfs.pci import (
    DeviceAttrs,
    format_speed,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
    pci_function_dir,
)
from cephnode_exporter.scrape import Scraper

from tests.conftest import (
    GOLDEN,
    NODES,
    MakeTree,
    Tree,
    collect,
    collector_exposition,
    compare_golden,
    run_cli,
    samples,
    value,
)
from tests.fixtures.sysfsgen import load_node

MODEL = "Dell Ent NVMe CM6 RI 15.36TB"
SERIALS = [
    "Y3B0A011TB1R",
    "Y3B0A014TB1R",
    "Y3B0A02ATB1R",
    "Y3B0A02CTB1R",
    "Y3B0A031TB1R",
    "Y3B0A037TB1R",
    "Y3B0A03FTB1R",
    "Y3B0A045TB1R",
    "Y3B0A04BTB1R",
    "Y3B0A050TB1R",
]
CONTROLLERS = [f"nvme{i}" for i in range(10)]
NAMESPACES = [f"nvme{i}n1" for i in range(10)]
# The detuned node's faults (tests/fixtures/nodes/epyc9454p-detuned.yaml).
DEADLINE = {"nvme2n1", "nvme5n1"}
DOWN = "nvme7"
NVME0_PCI = "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0"
NVME0 = f"{NVME0_PCI}/nvme/nvme0"
NVME1_PCI = "sys/devices/pci0000:00/0000:00:01.2/0000:02:00.0"


def only(*names: str) -> list[str]:
    """Flags that leave only the named collectors on."""
    return [f"--no-collector.{n}" for n in sorted(REGISTRY) if n not in names]


ONLY_NVME = only("nvme")


def small(node: str, **changes: Any) -> dict[str, Any]:
    """A reference node's device sections on a 2-CPU topology (fast to build)."""
    desc = copy.deepcopy(load_node(node))
    for section in ("cpuidle", "cpufreq", "vulnerabilities", "sysctl", "net"):
        desc.pop(section, None)
    desc["cpus"] = {"cores_per_socket": 2}
    desc.update(changes)
    return desc


def check_json(tree: Tree, *extra: str) -> tuple[int, list[dict[str, str]]]:
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["results"]


def results_of(results: list[dict[str, str]], check: str) -> dict[str, dict[str, str]]:
    return {r["subject"]: r for r in results if r["check"] == check}


def ok(result: Collection, collector: str = "nvme", errors: int = 0) -> None:
    assert value(result, "cephnode_scrape_collector_success", collector=collector) == 1
    got = value(result, "cephnode_scrape_collector_read_errors", collector=collector)
    assert got == errors


# --- parsers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        # drivers/pci/probe.c pci_speed_string(), Linux 5.7 and later
        ("2.5 GT/s PCIe\n", 2.5e9),
        ("5.0 GT/s PCIe", 5e9),
        ("8.0 GT/s PCIe", 8e9),
        ("16.0 GT/s PCIe\n", 16e9),
        ("32.0 GT/s PCIe", 32e9),
        ("64.0 GT/s PCIe", 64e9),
        # drivers/pci/pci-sysfs.c before 5.7
        ("2.5 GT/s\n", 2.5e9),
        ("5 GT/s", 5e9),
        ("8 GT/s", 8e9),
        ("16 GT/s", 16e9),
        ("32 GT/s", 32e9),
        # the kernel could not decode the field: unknown, not an error
        ("Unknown\n", None),
        ("Unknown speed\n", None),
    ],
)
def test_parse_link_speed(text: str, rate: float | None) -> None:
    assert parse_link_speed(text) == rate


@pytest.mark.parametrize(
    "text",
    ["8GT/s", "8.0 GT/s PCIe x4", "16.0 Gb/s", "PCIe 4.0", "-8 GT/s", "", "?garbage@value!"],
)
def test_parse_link_speed_rejects_unknown_formats(text: str) -> None:
    with pytest.raises(ParseError, match="not a PCIe link speed"):
        parse_link_speed(text, "/sys/x/current_link_speed")


def test_format_speed() -> None:
    assert [format_speed(r) for r in (2.5e9, 8e9, 16e9)] == ["2.5 GT/s", "8 GT/s", "16 GT/s"]


@pytest.mark.parametrize(("text", "width"), [("4\n", 4), ("16", 16), ("0", 0), ("32", 32)])
def test_parse_link_width(text: str, width: int) -> None:
    assert parse_link_width(text) == width


@pytest.mark.parametrize("text", ["x4", "-1", "33", "", "four"])
def test_parse_link_width_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_link_width(text)


@pytest.mark.parametrize(("text", "node"), [("0\n", 0), ("3", 3), ("-1\n", -1)])
def test_parse_numa_node(text: str, node: int) -> None:
    assert parse_numa_node(text) == node


@pytest.mark.parametrize("text", ["-2", "", "zero"])
def test_parse_numa_node_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_numa_node(text)


@pytest.mark.parametrize(
    ("text", "active"),
    [
        # block/elevator.c elv_iosched_show(), 5.0 and later: none first, trailing space
        ("[none] mq-deadline \n", "none"),
        ("none [mq-deadline] \n", "mq-deadline"),
        ("none mq-deadline kyber [bfq] \n", "bfq"),
        # before 5.0, blk-mq listed none last
        ("mq-deadline kyber [none]\n", "none"),
        # a queue that cannot have a scheduler prints "none" without brackets
        ("none\n", "none"),
    ],
)
def test_parse_scheduler(text: str, active: str) -> None:
    assert parse_scheduler(text) == active


@pytest.mark.parametrize(
    "text", ["none mq-deadline\n", "[none] [mq-deadline]", "", "[]", "[mq-deadline!] none"]
)
def test_parse_scheduler_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError, match="scheduler"):
        parse_scheduler(text)


def test_parse_inflight_and_counts() -> None:
    # block/genhd.c part_inflight_show: "%8u %8u\n"
    assert parse_inflight("       2        4\n") == (2, 4)
    for bad in ("1", "a b", "1 2 3", "-1 2"):
        with pytest.raises(ParseError):
            parse_inflight(bad)
    assert parse_count("1023\n") == 1023
    for bad in ("-1", "1.5", "", "1" * 20):
        with pytest.raises(ParseError):
            parse_count(bad)


def test_parse_id_string_strips_the_padding() -> None:
    # drivers/nvme/host/core.c prints the whole Identify field: "%.*s\n", space-padded
    assert parse_id_string(MODEL.ljust(40) + "\n") == MODEL
    assert parse_id_string("2.2.1   \n") == "2.2.1"
    for bad in ("bad\x01model", "x" * 65):
        with pytest.raises(ParseError):
            parse_id_string(bad)


def test_pci_function_dir() -> None:
    path = "/s/devices/pci0000:60/0000:60:01.2/0000:62:00.0/nvme/nvme7"
    assert (
        pci_function_dir(path, "0000:62:00.0") == "/s/devices/pci0000:60/0000:60:01.2/0000:62:00.0"
    )
    assert pci_function_dir(path, "0000:60:01.2") == "/s/devices/pci0000:60/0000:60:01.2"
    assert pci_function_dir(path, "0000:99:00.0") is None


def test_wbt_einval_means_no_throttling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """block/blk-sysfs.c queue_wb_lat_show() answers EINVAL when the queue has no
    writeback throttling: absent, not an error. Other errors count."""
    import cephnode_exporter.hostfs.nvme as nvme

    (tmp_path / "queue").mkdir()
    (tmp_path / "queue" / "wbt_lat_usec").write_text("2000\n")
    attrs = DeviceAttrs(str(tmp_path))
    assert read_wbt_lat_usec(attrs) == 2000
    (tmp_path / "queue" / "wbt_lat_usec").write_text("0\n")  # disabled (e.g. under bfq)
    assert read_wbt_lat_usec(attrs) == 0
    (tmp_path / "queue" / "wbt_lat_usec").write_text("-1\n")
    assert read_wbt_lat_usec(attrs) is None
    assert len(attrs.errors) == 0

    def fail(code: int) -> Callable[[str], str]:
        def read_text(path: str) -> str:
            raise OSError(code, os.strerror(code), path)

        return read_text

    monkeypatch.setattr(nvme, "read_text", fail(errno.EINVAL))
    assert read_wbt_lat_usec(attrs) is None
    assert len(attrs.errors) == 0
    monkeypatch.setattr(nvme, "read_text", fail(errno.EIO))
    assert read_wbt_lat_usec(attrs) is None
    assert len(attrs.errors) == 1


# --- the generated tree is laid out like the kernel's --------------------------------


def test_fixture_layout(node_trees: dict[str, Tree]) -> None:
    sys_ = node_trees["epyc9454p-detuned"].sys
    assert os.readlink(sys_ / "class/nvme/nvme0") == (
        "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0"
    )
    assert os.readlink(sys_ / "class/block/nvme0n1") == (
        "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme0n1"
    )
    assert os.readlink(sys_ / "block/nvme0n1").startswith("../devices/pci0000:00/")
    pci = sys_ / "devices/pci0000:00/0000:00:01.1/0000:01:00.0"
    assert os.readlink(pci / "iommu_group") == "../../../../kernel/iommu_groups/20"
    assert os.readlink(pci / "nvme/nvme0/device") == "../../../0000:01:00.0"
    assert (pci / "nvme/nvme0/model").read_text() == MODEL.ljust(40) + "\n"
    assert (pci / "nvme/nvme0/serial").read_text() == SERIALS[0].ljust(20) + "\n"
    assert (pci / "nvme/nvme0/firmware_rev").read_text() == "2.2.1   \n"
    assert (pci / "current_link_speed").read_text() == "16.0 GT/s PCIe\n"
    assert (pci / "nvme/nvme0/nvme0n1/queue/scheduler").read_text() == "[none] mq-deadline \n"
    assert (sys_ / "block/nvme2n1/queue/scheduler").read_text() == "none [mq-deadline] \n"
    # the discovery layer finds exactly the ten controllers and namespaces
    snap = SysfsDevices(HostFS(sysfs=str(sys_))).enumerate()
    ctrls = [d for d in snap.devices if isinstance(d, NvmeController)]
    assert [c.name for c in ctrls] == CONTROLLERS
    assert ctrls[7].pci == "0000:62:00.0"
    assert snap.errors == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pci": {"0000:99:00.0": {"current_link_width": 2}}}, "no section creates"),
        ({"pci": {"99:00.0": {}}}, "not a PCI function name"),
        ({"block": {"devices": {"nvme42n1": {"scheduler": "none"}}}}, "no such disk"),
        ({"block": {"queue": {"scheduler": "cfq"}}}, "not in"),
        ({"block": {"queue": {"schedular": "none"}}}, "unknown keys"),
        ({"iommu": {"type": "DMA"}}, "without iommu.units"),
        ({"iommu": {"units": {"ivhd0": "pci0000:00/0000:00:00.2"}}}, "without iommu.type"),
    ],
)
def test_generator_rejects_inconsistent_descriptions(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    from tests.fixtures.sysfsgen import build_tree

    desc = small("epyc9454p-detuned")
    for key, value_ in change.items():
        if key == "block" and "queue" in value_:
            desc["block"]["queue"].update(value_["queue"])
        else:
            desc[key] = value_
    with pytest.raises(ValueError, match=message):
        build_tree(desc, tmp_path / "t")


@pytest.mark.parametrize(
    "entry",
    [
        {"pci": "pci0000:00/0000:00:01.1/0000:01:00.0"},  # no serial
        {"pci": "0000:01:00.0", "serial": "X"},  # no root bus
        {"pci": "pci0000:00/../0000:01:00.0", "serial": "X"},
    ],
)
def test_generator_rejects_bad_controllers(tmp_path: Path, entry: dict[str, str]) -> None:
    from tests.fixtures.sysfsgen import build_tree

    desc = small("epyc9454p-tuned")
    desc["nvme"]["controllers"] = [entry]
    with pytest.raises(ValueError):
        build_tree(desc, tmp_path / "t")


# --- the collector on the reference nodes ---------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_nvme_exposition(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str
) -> None:
    compare_golden(
        request,
        GOLDEN / node / "nvme.prom",
        collector_exposition(collect(node_trees[node].flags), "nvme"),
    )


@pytest.mark.parametrize("node", NODES)
def test_nvme_values_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    tree = node_trees[node]
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result)
    detuned = node.endswith("detuned")
    for name, serial in zip(CONTROLLERS, SERIALS, strict=True):
        labels = {"model": MODEL, "serial": serial, "firmware": "2.2.1", "transport": "pcie"}
        assert value(result, "cephnode_nvme_controller_info", controller=name, **labels) == 1
        assert value(result, "cephnode_nvme_numa_node", controller=name) == 0
        assert value(result, "cephnode_nvme_queues", controller=name) == 97
        down = detuned and name == DOWN
        cur = "cephnode_nvme_pcie_current_link"
        top = "cephnode_nvme_pcie_max_link"
        assert value(result, f"{cur}_transfers_per_second", controller=name) == (
            8e9 if down else 16e9
        )
        assert value(result, f"{cur}_width", controller=name) == (2 if down else 4)
        assert value(result, f"{top}_transfers_per_second", controller=name) == 16e9
        assert value(result, f"{top}_width", controller=name) == 4
        # temperature only behind the flag
        assert value(result, "cephnode_nvme_temperature_celsius", controller=name) is None
    for ns, ctrl in zip(NAMESPACES, CONTROLLERS, strict=True):
        deadline = detuned and ns in DEADLINE
        assert value(result, "cephnode_nvme_namespace_info", device=ns, controller=ctrl) == 1
        sched = "mq-deadline" if deadline else "none"
        assert value(result, "cephnode_nvme_scheduler_info", device=ns, scheduler=sched) == 1
        expect = {
            "queue_requests": 256 if deadline else 1023,
            "queue_rq_affinity": 1,
            "queue_nomerges": 0,
            "queue_io_poll": 0,
            "queue_read_ahead_bytes": 128 * 1024,
            "queue_max_request_bytes": 128 * 1024,
            "hw_queues": 96,
            "queue_wbt_latency_seconds": 0.002,
        }
        for suffix, want in expect.items():
            assert value(result, f"cephnode_nvme_{suffix}", device=ns) == want, (ns, suffix)
        reads, writes = (int(v) for v in (tree.sys / "block" / ns / "inflight").read_text().split())
        assert value(result, "cephnode_nvme_inflight_requests", device=ns, op="read") == reads
        assert value(result, "cephnode_nvme_inflight_requests", device=ns, op="write") == writes
    assert len([k for k in samples(result) if k[0] == "cephnode_nvme_controller_info"]) == 10


def test_temperature_behind_the_flag(node_trees: dict[str, Tree]) -> None:
    tree = node_trees["epyc9454p-tuned"]
    result = collect([*tree.flags, *ONLY_NVME, "--collector.nvme.temperature"])
    ok(result)
    # hwmon reports K * 1000 - 273150 of the drive's Kelvin reading: 36 C -> 35.85
    want = {"nvme2": 36.85, "nvme5": 37.85, "nvme8": 36.85}
    for name in CONTROLLERS:
        got = value(result, "cephnode_nvme_temperature_celsius", controller=name)
        assert got == want.get(name, 35.85), name


def test_temperature_under_the_pci_function(make_tree: MakeTree) -> None:
    """Older kernels registered the hwmon device under the PCI function (hwmon/hwmonN)."""
    tree = make_tree(small("epyc9454p-tuned"))
    ctrl = tree.sys / NVME0.removeprefix("sys/")
    pci = ctrl.parent.parent
    (pci / "hwmon").mkdir()
    shutil.move(ctrl / "hwmon1", pci / "hwmon" / "hwmon1")
    result = collect([*tree.flags, *ONLY_NVME, "--collector.nvme.temperature"])
    ok(result)
    assert value(result, "cephnode_nvme_temperature_celsius", controller="nvme0") == 35.85


# --- checks through the real entry point ---------------------------------------------


@pytest.mark.parametrize("node", NODES)
def test_checks_on_the_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    detuned = node.endswith("detuned")
    _, results = check_json(node_trees[node])
    sched = results_of(results, "nvme.scheduler")
    assert sorted(sched, key=lambda s: int(s[4:-2])) == NAMESPACES
    for ns, r in sched.items():
        bad = detuned and ns in DEADLINE
        assert r["status"] == ("fail" if bad else "pass"), ns
        assert r["observed"] == ("mq-deadline" if bad else "none")
        assert r["expected"] == "I/O scheduler none"
        if bad:
            assert r["hint"].startswith(f"echo none > /sys/block/{ns}/queue/scheduler;")
            assert (
                'ACTION=="add|change", KERNEL=="nvme[0-9]*n[0-9]*", '
                'ATTR{queue/scheduler}="none"' in r["hint"]
            )
        else:
            assert r["hint"] == ""
    link = results_of(results, "nvme.pcie_link")
    assert sorted(link, key=lambda s: int(s[4:])) == CONTROLLERS
    for name, r in link.items():
        bad = detuned and name == DOWN
        assert r["status"] == ("fail" if bad else "pass"), name
        assert r["expected"] == "link at its maximum, x4 at 16 GT/s"
        if bad:
            assert r["observed"] == "x2 at 8 GT/s (maximum x4 at 16 GT/s)"
            assert "2 of 4 lanes, 8 GT/s of 16 GT/s" in r["hint"]
            assert "lspci -vv -s 0000:62:00.0" in r["hint"]
            assert "LnkSta" in r["hint"] and "BIOS" in r["hint"] and "reseat" in r["hint"]
        else:
            assert r["observed"] == "x4 at 16 GT/s, the maximum"


def test_check_results_are_metrics(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-detuned"].flags)
    failed = "cephnode_tuning_check_failed"
    assert value(result, failed, check="nvme.scheduler", subject="nvme2n1") == 1
    assert value(result, failed, check="nvme.scheduler", subject="nvme0n1") is None  # passes
    assert value(result, failed, check="nvme.pcie_link", subject="nvme7") == 1
    assert value(result, failed, check="nvme.pcie_link", subject="nvme6") is None


def test_scheduler_profile_allows_others(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(small("epyc9454p-detuned"))
    profile = tmp_path / "site.yaml"
    profile.write_text("checks:\n  nvme.scheduler: {allowed: [none, mq-deadline]}\n")
    _, results = check_json(tree, *ONLY_NVME, "--profile", str(profile))
    assert {r["status"] for r in results_of(results, "nvme.scheduler").values()} == {"pass"}
    profile.write_text("checks:\n  nvme.scheduler: {allowed: []}\n")
    proc = run_cli("check", *tree.flags, "--profile", str(profile))
    assert proc.returncode == 2 and "non-empty list" in proc.stderr


# --- bad input ----------------------------------------------------------------------


def test_unknown_and_garbage_link_speeds(make_tree: MakeTree) -> None:
    pci = NVME0_PCI
    tree = make_tree(
        small("epyc9454p-tuned"),
        faults={f"{pci}/current_link_speed": "garbage", f"{pci}/max_link_width": "eio"},
    )
    (tree.root / NVME1_PCI / "current_link_speed").write_text("Unknown\n")
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result, errors=2)  # garbage speed and EIO width count; "Unknown" does not
    speed = "cephnode_nvme_pcie_current_link_transfers_per_second"
    assert value(result, speed, controller="nvme0") is None
    assert value(result, speed, controller="nvme1") is None
    assert value(result, "cephnode_nvme_pcie_max_link_width", controller="nvme0") is None
    assert value(result, "cephnode_nvme_pcie_current_link_width", controller="nvme0") == 4
    assert value(result, speed, controller="nvme2") == 16e9
    _, results = check_json(tree, *ONLY_NVME)
    link = results_of(results, "nvme.pcie_link")
    for name in ("nvme0", "nvme1"):
        assert link[name]["status"] == "unknown"  # cannot be judged: never skip or pass
        assert link[name]["observed"].startswith("link state not fully known")
    assert link["nvme2"]["status"] == "pass"


def test_a_narrow_link_fails_even_with_an_unknown_speed(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-tuned"))
    pci = tree.root / NVME0_PCI
    (pci / "current_link_speed").write_text("Unknown speed\n")
    (pci / "current_link_width").write_text("1\n")
    _, results = check_json(tree, *ONLY_NVME)
    r = results_of(results, "nvme.pcie_link")["nvme0"]
    assert r["status"] == "fail"
    assert r["observed"] == "x1 at unknown speed (maximum x4 at 16 GT/s)"


@pytest.mark.parametrize(
    ("rel", "kind", "errors", "absent"),
    [
        ("queue/nr_requests", "eio", 1, "cephnode_nvme_queue_requests"),
        ("queue/nr_requests", "garbage", 1, "cephnode_nvme_queue_requests"),
        ("queue/nomerges", "empty", 1, "cephnode_nvme_queue_nomerges"),
        ("queue/io_poll", "missing", 0, "cephnode_nvme_queue_io_poll"),  # an older kernel
        ("queue/wbt_lat_usec", "eio", 1, "cephnode_nvme_queue_wbt_latency_seconds"),
        ("inflight", "garbage", 1, "cephnode_nvme_inflight_requests"),
        ("mq", "missing", 0, "cephnode_nvme_hw_queues"),
    ],
)
def test_a_bad_namespace_attribute_is_skipped(
    make_tree: MakeTree, rel: str, kind: str, errors: int, absent: str
) -> None:
    tree = make_tree(small("epyc9454p-detuned"), faults={f"{NVME0}/nvme0n1/{rel}": kind})
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result, errors=errors)
    got = samples(result)
    assert not any(n == absent and ("device", "nvme0n1") in labels for n, labels in got)
    # everything else of the namespace and the other namespaces are still there
    assert value(result, "cephnode_nvme_scheduler_info", device="nvme0n1", scheduler="none") == 1
    assert any(n == absent and ("device", "nvme1n1") in labels for n, labels in got)


def test_an_unreadable_scheduler_makes_the_check_unknown(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-detuned"), faults={f"{NVME0}/nvme0n1/queue/scheduler": "eio"})
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result, errors=1)
    assert not any(
        n == "cephnode_nvme_scheduler_info" and ("device", "nvme0n1") in labels
        for n, labels in samples(result)
    )
    _, results = check_json(tree, *ONLY_NVME)
    sched = results_of(results, "nvme.scheduler")
    assert sched["nvme0n1"]["status"] == "unknown"
    assert sched["nvme0n1"]["observed"] == "queue/scheduler unreadable"
    assert sched["nvme2n1"]["status"] == "fail"


@pytest.mark.parametrize(("rel", "kind"), [("model", "eio"), ("serial", "empty")])
def test_bad_identify_strings(make_tree: MakeTree, rel: str, kind: str) -> None:
    tree = make_tree(small("epyc9454p-tuned"), faults={f"{NVME0}/{rel}": kind})
    result = collect([*tree.flags, *ONLY_NVME])
    if kind == "eio":
        ok(result, errors=1)
        info = [k for k in samples(result) if k[0] == "cephnode_nvme_controller_info"]
        assert len(info) == 9  # nvme0's info needs all four strings
    else:  # an empty serial is what the drive reported: exported as such
        ok(result)
        labels = {"model": MODEL, "serial": "", "firmware": "2.2.1", "transport": "pcie"}
        assert value(result, "cephnode_nvme_controller_info", controller="nvme0", **labels) == 1
    assert value(result, "cephnode_nvme_queues", controller="nvme0") == 97


def test_control_characters_in_a_model(make_tree: MakeTree) -> None:
    tree = make_tree(small("epyc9454p-tuned"))
    (tree.root / NVME0 / "model").write_text("Dell\x07Ent\n")
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result, errors=1)


def test_a_fabrics_controller_has_no_pcie_link(make_tree: MakeTree) -> None:
    """NVMe over TCP: the controller lives under devices/virtual/nvme-fabrics/ctl."""
    ctl = "sys/devices/virtual/nvme-fabrics/ctl/nvme10"
    files = {
        f"{ctl}/model": "Linux".ljust(40) + "\n",
        f"{ctl}/serial": "6a9f3e1d0c2b".ljust(20) + "\n",
        f"{ctl}/firmware_rev": "6.1.0   \n",
        f"{ctl}/transport": "tcp\n",
        f"{ctl}/numa_node": "-1\n",
        f"{ctl}/queue_count": "3\n",
        f"{ctl}/nvme10n1/queue/scheduler": "[none] mq-deadline \n",
        f"{ctl}/nvme10n1/inflight": "       0        0\n",
    }
    symlinks = {
        "sys/class/nvme/nvme10": "../../devices/virtual/nvme-fabrics/ctl/nvme10",
        "sys/class/block/nvme10n1": "../../devices/virtual/nvme-fabrics/ctl/nvme10/nvme10n1",
    }
    tree = make_tree(small("epyc9454p-tuned", files=files, symlinks=symlinks))
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result)
    labels = {"model": "Linux", "serial": "6a9f3e1d0c2b", "firmware": "6.1.0", "transport": "tcp"}
    assert value(result, "cephnode_nvme_controller_info", controller="nvme10", **labels) == 1
    assert value(result, "cephnode_nvme_numa_node", controller="nvme10") == -1
    speed = "cephnode_nvme_pcie_current_link_transfers_per_second"
    assert value(result, speed, controller="nvme10") is None
    _, results = check_json(tree, *ONLY_NVME)
    r = results_of(results, "nvme.pcie_link")["nvme10"]
    assert (r["status"], r["observed"]) == ("skip", "no PCIe link (tcp)")
    assert results_of(results, "nvme.scheduler")["nvme10n1"]["status"] == "pass"


def test_an_empty_host_succeeds_with_nothing(tmp_path: Path) -> None:
    for d in ("proc", "sys", "root"):
        (tmp_path / d).mkdir()
    flags = [f"--path.procfs={tmp_path}/proc", f"--path.sysfs={tmp_path}/sys"]
    result = collect([*flags, f"--path.rootfs={tmp_path}/root", *ONLY_NVME])
    ok(result)
    assert not any(k[0].startswith("cephnode_nvme_") for k in samples(result))
    proc = run_cli("check", "--format", "json", *flags, f"--path.rootfs={tmp_path}/root")
    results = json.loads(proc.stdout)["results"]
    for check in ("nvme.scheduler", "nvme.pcie_link"):
        (r,) = results_of(results, check).values()
        assert r["status"] == "skip" and r["observed"].startswith("no NVMe")


# --- hot-plug and vanishing devices, through the discovery layer ---------------------


def unplug(sys_root: Path, ctrl: str) -> Callable[[], None]:
    """Remove a controller the way the kernel does (its PCI function directory and every
    class link into it); returns a function that plugs it back in."""
    func_dir = Path(os.path.realpath(sys_root / "class/nvme" / ctrl)).parent.parent
    group = Path(os.path.realpath(func_dir / "iommu_group"))
    links: dict[Path, str] = {}
    for d in ("class/nvme", "class/block", "block", "bus/pci/devices", "class/hwmon"):
        for entry in (sys_root / d).iterdir():
            target = os.path.realpath(entry)
            if target == str(func_dir) or target.startswith(f"{func_dir}/"):
                links[entry] = os.readlink(entry)
                entry.unlink()
    stash = sys_root.parent / "unplugged" / func_dir.name
    parked_group = stash.parent / f"{func_dir.name}-group"
    stash.parent.mkdir(exist_ok=True)
    shutil.move(func_dir, stash)
    if group.is_dir():  # drivers/iommu/iommu.c frees a group with its last device
        shutil.move(group, parked_group)

    def replug() -> None:
        shutil.move(stash, func_dir)
        if parked_group.is_dir():
            shutil.move(parked_group, group)
        for entry, target in links.items():
            os.symlink(target, entry)

    return replug


class FixtureDiscovery:
    """Makes the collectors' shared discovery one built here (fixture events, or no
    monitor with a long rescan interval) instead of the default for the tree."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.made: list[DeviceDiscovery] = []

    def install(self, **kwargs: Any) -> None:
        def factory(fs: HostFS) -> DeviceDiscovery:
            d = DeviceDiscovery(SysfsDevices(fs), **kwargs)
            self.made.append(d)
            return d

        self.monkeypatch.setattr(devices.discovery, "default_discovery", factory)

    @property
    def one(self) -> DeviceDiscovery:
        (d,) = self.made  # the nvme and iommu collectors share one
        return d


@pytest.fixture
def fixture_discovery(monkeypatch: pytest.MonkeyPatch) -> FixtureDiscovery:
    return FixtureDiscovery(monkeypatch)


def wait_for(pred: Callable[[], object], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return bool(pred())


def scraper_for(tree: Tree, *flags: str) -> Scraper:
    return build_scraper(parse_args(["dump", *tree.flags, *only("nvme", "iommu"), *flags]))


def controllers_in(result: Collection) -> list[str]:
    return sorted(
        dict(labels)["controller"]
        for n, labels in samples(result)
        if n == "cephnode_nvme_controller_info"
    )


def test_hotplug_through_fixture_events(
    make_tree: MakeTree, fixture_discovery: FixtureDiscovery
) -> None:
    events = FixtureEvents()
    fixture_discovery.install(events=events, debounce=0.02, max_delay=0.5)
    tree = make_tree(small("epyc9454p-detuned"))
    replug = unplug(tree.sys, "nvme9")
    scraper = scraper_for(tree)
    try:
        discovery = fixture_discovery.one
        assert discovery.status().discovery_source == "fixture"
        first = scraper.collect(10.0)
        assert controllers_in(first) == sorted(CONTROLLERS[:9])
        assert value(first, "cephnode_iommu_dma_translated", controller="nvme9") is None

        replug()
        events.inject("add", "nvme", "nvme9")
        events.inject("add", "block", "nvme9n1")
        assert wait_for(lambda: discovery.snapshot().find(NvmeController, "nvme9"))
        added = scraper.collect(10.0)
        assert controllers_in(added) == sorted(CONTROLLERS)
        assert value(added, "cephnode_nvme_scheduler_info", device="nvme9n1", scheduler="none")
        assert value(added, "cephnode_iommu_dma_translated", controller="nvme9") == 1
        failed = "cephnode_tuning_check_failed"
        assert value(added, failed, check="iommu.nvme", subject="nvme9") == 1

        unplug(tree.sys, "nvme9")
        events.inject("remove", "block", "nvme9n1")
        events.inject("remove", "nvme", "nvme9")
        assert wait_for(lambda: discovery.snapshot().find(NvmeController, "nvme9") is None)
        removed = scraper.collect(10.0)
        assert controllers_in(removed) == sorted(CONTROLLERS[:9])
        assert value(removed, "cephnode_nvme_hw_queues", device="nvme9n1") is None
        assert value(removed, failed, check="iommu.nvme", subject="nvme9") is None
        for name in ("nvme", "iommu"):
            ok(removed, name)
    finally:
        scraper.close()
    assert not discovery.monitoring()  # the last collector released it


def test_a_controller_vanishing_between_discovery_and_read(
    make_tree: MakeTree, fixture_discovery: FixtureDiscovery
) -> None:
    """The snapshot still lists nvme3, its files are gone: dropped, not an error."""
    fixture_discovery.install(events=None, rescan_interval=3600)
    tree = make_tree(small("epyc9454p-tuned"))
    scraper = scraper_for(tree)
    try:
        before = scraper.collect(10.0)  # fills the caches of both collectors
        assert controllers_in(before) == sorted(CONTROLLERS)
        unplug(tree.sys, "nvme3")
        after = scraper.collect(10.0)
        stale = fixture_discovery.one.snapshot()
        assert stale.find(NvmeController, "nvme3") is not None
        for name in ("nvme", "iommu"):
            ok(after, name)
        assert controllers_in(after) == sorted(set(CONTROLLERS) - {"nvme3"})
        assert not any(dict(labels).get("device") == "nvme3n1" for _, labels in samples(after))
        assert value(after, "cephnode_iommu_dma_translated", controller="nvme3") is None
        assert value(after, "cephnode_iommu_dma_translated", controller="nvme4") == 0
    finally:
        scraper.close()


# --- this machine ---------------------------------------------------------------------


def test_real_host() -> None:
    """This machine's /sys, through pyudev: no errors, and exactly its NVMe devices (the
    development VM has none: the collector must succeed with zero)."""
    result = collect(ONLY_NVME)
    ok(result)
    present = sorted(os.listdir("/sys/class/nvme")) if os.path.isdir("/sys/class/nvme") else []
    assert controllers_in(result) == sorted(n for n in present if n.startswith("nvme"))
    proc = run_cli("check", "--format", "json", *ONLY_NVME)
    assert proc.returncode in (0, 1), proc.stderr
    statuses = {(r["check"], r["subject"]): r["status"] for r in json.loads(proc.stdout)["results"]}
    if not present:
        assert statuses[("nvme.scheduler", "")] == "skip"
        assert statuses[("nvme.pcie_link", "")] == "skip"


# --- numbers no kernel prints ------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "text", "absent"),
    [
        (f"{NVME0_PCI}/current_link_width", "\u00b2\n", "cephnode_nvme_pcie_current_link_width"),
        (f"{NVME0}/nvme0n1/queue/nr_requests", "9" * 5000 + "\n", "cephnode_nvme_queue_requests"),
        (f"{NVME0}/nvme0n1/inflight", "1 \u00b2\n", "cephnode_nvme_inflight_requests"),
        (f"{NVME0}/numa_node", f"{2**70}\n", "cephnode_nvme_numa_node"),
        (f"{NVME0}/nvme0n1/queue/read_ahead_kb", "1_28\n", "cephnode_nvme_queue_read_ahead_bytes"),
    ],
)
def test_one_number_no_kernel_prints_costs_only_that_value(
    make_tree: MakeTree, rel: str, text: str, absent: str
) -> None:
    """isdigit() takes "²" and 5000 digits, int() then raised a ValueError nobody caught:
    one bad file of one drive failed the whole collector. It is one read error now."""
    tree = make_tree(small("epyc9454p-detuned"))
    (tree.root / rel).write_text(text)
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result, errors=1)
    (outcome,) = [o for o in result.outcomes if o.name == "nvme"]
    assert rel.rsplit("/", 1)[1] in outcome.facts.errors.items[0]
    got = samples(result)
    mine = {("device", "nvme0n1"), ("controller", "nvme0")}
    assert not any(n == absent and mine & labels for n, labels in got)
    assert any(n == absent for n, _ in got)  # the other drives keep theirs


def test_a_fifo_as_wbt_lat_usec_is_a_read_error_not_no_throttling(make_tree: MakeTree) -> None:
    """open_regular refuses a FIFO; that refusal once carried EINVAL, the kernel's own
    "no writeback throttling" answer, and vanished without a count."""
    tree = make_tree(
        small("epyc9454p-detuned"), faults={f"{NVME0}/nvme0n1/queue/wbt_lat_usec": "fifo"}
    )
    result = collect([*tree.flags, *ONLY_NVME])
    ok(result, errors=1)
    (outcome,) = [o for o in result.outcomes if o.name == "nvme"]
    assert "wbt_lat_usec" in outcome.facts.errors.items[0]
    assert "not a regular file (FIFO)" in outcome.facts.errors.items[0]
