"""Native NVMe multipath: `nvme.scheduler` and the nvme collector judge the path disks.

With CONFIG_NVME_MULTIPATH=y and nvme_core.multipath=Y (the default of Debian, Ubuntu and
RHEL kernels), a drive whose controller advertises multi-controller support (CMIC bit 1:
dual-port U.2 drives such as the reference nodes' CM6, even with one port connected)
gets a visible head nvme2n1 under /sys/devices/virtual/nvme-subsystem/nvme-subsys2, a
bio-based disk whose queue/scheduler prints "none", and one hidden path disk per
controller, nvme2c2n1 under the controller, whose blk-mq queue holds the real scheduler.
The fixture's `nvme.multipath` option lays the reference node out that way
(tests/fixtures/sysfsgen.py _build_mpath_namespace, docs/fixtures.md).

Before the fix the check read the head and printed `nvme.scheduler nvme2n1 pass none`
while the path ran mq-deadline; every test of the check and the metrics below fails on
that code.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.devices import NvmeNamespace, NvmePath, SysfsDevices
from cephnode_exporter.hostfs import HostFS

from tests.conftest import MakeTree, Tree, collect, run_cli, samples, value
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_nvme import ONLY_NVME
from tests.test_serve import get, start

NODE = "epyc9454p-detuned"
SUBSYS2 = "devices/virtual/nvme-subsystem/nvme-subsys2"
NVME2 = "devices/pci0000:00/0000:00:01.3/0000:03:00.0/nvme/nvme2"
# A second port of the drive behind nvme2, on its own PCI function (a dual-port U.2 drive
# with both ports cabled to this host): controller nvme10 joins nvme-subsys2.
PORT_B = {
    "pci": "pci0000:00/0000:00:03.1/0000:04:00.0",
    "serial": "Y3B0A02ATB1R",  # the same drive: the subsystem's serial
    "subsystem": "nvme2",
}


def multipath(*, detuned: tuple[str, ...] = (), second_port: bool = False) -> dict[str, Any]:
    """The detuned reference node's devices on a 2-CPU topology, under native multipath,
    with ``detuned`` path disks on mq-deadline (nr_requests 256, as the node's own)."""
    desc = copy.deepcopy(load_node(NODE))
    for section in ("cpuidle", "cpufreq", "vulnerabilities", "sysctl", "net"):
        desc.pop(section, None)
    desc["cpus"] = {"cores_per_socket": 2}
    desc["nvme"]["multipath"] = True
    if second_port:
        desc["nvme"]["controllers"].append(dict(PORT_B))
    desc["block"]["devices"] = {
        path: {"scheduler": "mq-deadline", "nr_requests": 256} for path in detuned
    }
    return desc


def check_json(tree: Tree, *extra: str) -> list[dict[str, str]]:
    proc = run_cli("check", "--format", "json", *tree.flags, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["results"]


def scheduler_results(tree: Tree) -> dict[str, dict[str, str]]:
    return {r["subject"]: r for r in check_json(tree) if r["check"] == "nvme.scheduler"}


# --- the fixture is laid out like the kernel's -------------------------------------------


def test_fixture_layout_of_a_multipath_node(make_tree: MakeTree) -> None:
    sys_ = make_tree(multipath(detuned=("nvme2c2n1",))).sys
    head = sys_ / SUBSYS2 / "nvme2n1"
    path = sys_ / NVME2 / "nvme2c2n1"
    assert os.readlink(sys_ / "block/nvme2n1") == f"../{SUBSYS2}/nvme2n1"
    assert os.readlink(sys_ / "class/block/nvme2c2n1") == f"../../{NVME2}/nvme2c2n1"
    assert os.readlink(sys_ / "block/nvme2c2n1") == f"../{NVME2}/nvme2c2n1"
    assert os.readlink(sys_ / SUBSYS2 / "nvme2") == "../../../" + NVME2.removeprefix("devices/")
    assert os.readlink(sys_ / "class/nvme-subsystem/nvme-subsys2") == f"../../{SUBSYS2}"
    assert (sys_ / SUBSYS2 / "iopolicy").read_text() == "numa\n"
    assert (
        (sys_ / SUBSYS2 / "subsysnqn")
        .read_text()
        .startswith("nqn.2014.08.org.nvmexpress:1e0f1028Y3B0A02ATB1R        Dell Ent NVMe CM6")
    )
    # the head: bio-based, no scheduler to choose, no hardware contexts
    assert (head / "queue/scheduler").read_text() == "none\n"
    assert (head / "queue/nr_requests").read_text() == "128\n"
    assert not (head / "mq").exists()
    assert (head / "dev").is_file()
    # the path: the blk-mq queue, hidden (no dev_t)
    assert (path / "queue/scheduler").read_text() == "none [mq-deadline] \n"
    assert len(list((path / "mq").iterdir())) == 96
    assert not (path / "dev").exists()
    # the OSD on nvme2n1 is stacked on the head, as ceph-volume's LV would be
    slaves = [p for p in sys_.glob("devices/virtual/block/dm-*/slaves/nvme2n1")]
    assert len(slaves) == 1 and os.path.realpath(slaves[0]) == str(head)
    snap = SysfsDevices(HostFS(sysfs=str(sys_))).enumerate()
    ns = {d.name: d for d in snap.devices if isinstance(d, NvmeNamespace)}
    assert sorted(ns, key=lambda n: int(n[4:-2])) == [f"nvme{i}n1" for i in range(10)]
    assert ns["nvme2n1"].multipath
    assert ns["nvme2n1"].paths == (NvmePath("nvme2c2n1", "nvme2", str(path)),)
    assert snap.errors == ()


def test_fixture_layout_of_a_second_port(make_tree: MakeTree) -> None:
    sys_ = make_tree(multipath(second_port=True)).sys
    snap = SysfsDevices(HostFS(sysfs=str(sys_))).enumerate()
    head = {d.name: d for d in snap.devices if isinstance(d, NvmeNamespace)}["nvme2n1"]
    assert head.controllers == ("nvme2", "nvme10")
    assert [p.name for p in head.paths] == ["nvme2c2n1", "nvme2c10n1"]
    assert not (sys_ / "devices/virtual/nvme-subsystem/nvme-subsys10").exists()
    assert os.path.realpath(sys_ / SUBSYS2 / "nvme10") == os.path.realpath(
        sys_ / "class/nvme/nvme10"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # a head's request-queue settings are its paths'
        ({"block": {"devices": {"nvme2n1": {"scheduler": "mq-deadline"}}}}, "bio-based"),
        ({"block": {"devices": {"nvme2c3n1": {"scheduler": "none"}}}}, "no such disk"),
        ({"subsystem": "nvme9"}, "no earlier controller"),
    ],
)
def test_generator_rejects_inconsistent_multipath(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    desc = multipath()
    if "subsystem" in change:
        desc["nvme"]["controllers"].append({**PORT_B, **change})
        desc["nvme"]["controllers"][1]["subsystem"] = "nvme9"  # nvme9 comes later
    else:
        desc.update(change)
    with pytest.raises(ValueError, match=message):
        build_tree(desc, tmp_path / "t")


def test_generator_refuses_a_subsystem_without_multipath(tmp_path: Path) -> None:
    desc = multipath(second_port=True)
    desc["nvme"]["multipath"] = False
    with pytest.raises(ValueError, match=r"needs nvme\.multipath"):
        build_tree(desc, tmp_path / "t")


# --- nvme.scheduler through the real entry point -------------------------------------


def test_a_detuned_path_fails_its_namespace(make_tree: MakeTree) -> None:
    sched = scheduler_results(make_tree(multipath(detuned=("nvme2c2n1",))))
    assert sorted(sched, key=lambda n: int(n[4:-2])) == [f"nvme{i}n1" for i in range(10)]
    r = sched["nvme2n1"]
    assert r["status"] == "fail"
    assert r["observed"] == "mq-deadline on nvme2c2n1"
    assert r["expected"] == "I/O scheduler none"
    assert r["hint"].startswith("echo none > /sys/block/nvme2c2n1/queue/scheduler:")
    assert "bio-based" in r["hint"] and "tuned" in r["hint"]
    for ns in (f"nvme{i}n1" for i in range(10) if i != 2):
        assert sched[ns]["status"] == "pass", ns
        assert sched[ns]["observed"] == f"none on nvme{ns[4:-2]}c{ns[4:-2]}n1"
        assert sched[ns]["hint"] == ""


def test_a_path_on_none_passes(make_tree: MakeTree) -> None:
    """The head prints "none" whatever its paths run; the path's none is what passes."""
    tree = make_tree(multipath())
    assert (tree.sys / "block/nvme2c2n1/queue/scheduler").read_text() == "[none] mq-deadline \n"
    sched = scheduler_results(tree)
    assert {r["status"] for r in sched.values()} == {"pass"}
    assert sched["nvme2n1"]["observed"] == "none on nvme2c2n1"


def test_two_paths_one_detuned_fails(make_tree: MakeTree) -> None:
    tree = make_tree(multipath(detuned=("nvme2c10n1",), second_port=True))
    r = scheduler_results(tree)["nvme2n1"]
    assert r["status"] == "fail"
    assert r["observed"] == "none on nvme2c2n1, mq-deadline on nvme2c10n1"
    assert r["hint"].startswith("echo none > /sys/block/nvme2c10n1/queue/scheduler:")
    assert "nvme2c2n1" not in r["hint"]


def test_an_unreadable_path_is_unknown_unless_another_fails(make_tree: MakeTree) -> None:
    fault = {f"sys/{NVME2}/nvme2c2n1/queue/scheduler": "eio"}
    r = scheduler_results(make_tree(multipath(second_port=True), faults=fault))["nvme2n1"]
    assert r["status"] == "unknown"
    assert r["observed"] == (
        "queue/scheduler unreadable: unreadable on nvme2c2n1, none on nvme2c10n1"
    )
    desc = multipath(detuned=("nvme2c10n1",), second_port=True)
    r = scheduler_results(make_tree(desc, faults=fault))["nvme2n1"]
    assert r["status"] == "fail"  # one detuned path is enough


def test_a_head_without_paths_cannot_be_judged(make_tree: MakeTree) -> None:
    tree = make_tree(multipath())
    for link in ("class/block/nvme2c2n1", "block/nvme2c2n1"):
        (tree.sys / link).unlink()
    r = scheduler_results(tree)["nvme2n1"]
    assert r["status"] == "unknown"
    assert r["observed"].startswith("native multipath head without a path disk")


def test_the_check_result_metric_names_the_namespace(make_tree: MakeTree) -> None:
    result = collect(make_tree(multipath(detuned=("nvme2c2n1",))).flags)
    failed = "cephnode_tuning_check_failed"
    assert value(result, failed, check="nvme.scheduler", subject="nvme2n1") == 1
    assert value(result, failed, check="nvme.scheduler", subject="nvme0n1") is None
    assert not any(
        ("subject", "nvme2c2n1") in labels for name, labels in samples(result) if name == failed
    )


# --- metrics --------------------------------------------------------------------------


def device_series(result: Any, device: str) -> set[str]:
    return {n for n, labels in samples(result) if ("device", device) in labels}


def test_metrics_of_the_head_and_its_paths(make_tree: MakeTree) -> None:
    tree = make_tree(multipath(detuned=("nvme2c10n1",), second_port=True))
    result = collect([*tree.flags, *ONLY_NVME])
    assert value(result, "cephnode_scrape_collector_success", collector="nvme") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="nvme") == 0
    info = "cephnode_nvme_namespace_info"
    assert value(result, info, device="nvme2n1", controller="nvme2") == 1
    assert value(result, info, device="nvme2n1", controller="nvme10") == 1
    sched = "cephnode_nvme_scheduler_info"
    assert value(result, sched, device="nvme2c2n1", scheduler="none") == 1
    assert value(result, sched, device="nvme2c10n1", scheduler="mq-deadline") == 1
    for path, requests in (("nvme2c2n1", 1023), ("nvme2c10n1", 256)):
        assert value(result, "cephnode_nvme_queue_requests", device=path) == requests
        assert value(result, "cephnode_nvme_queue_rq_affinity", device=path) == 1
        assert value(result, "cephnode_nvme_queue_nomerges", device=path) == 0
        assert value(result, "cephnode_nvme_queue_io_poll", device=path) == 0
        assert value(result, "cephnode_nvme_hw_queues", device=path) == 96
        assert value(result, "cephnode_nvme_queue_wbt_latency_seconds", device=path) == 0.002
    # the head keeps the disk's own settings and none of the request queue's
    assert value(result, "cephnode_nvme_queue_read_ahead_bytes", device="nvme2n1") == 128 * 1024
    assert value(result, "cephnode_nvme_queue_max_request_bytes", device="nvme2n1") == 128 * 1024
    reads, writes = (int(v) for v in (tree.sys / "block/nvme2n1/inflight").read_text().split())
    assert value(result, "cephnode_nvme_inflight_requests", device="nvme2n1", op="read") == reads
    assert value(result, "cephnode_nvme_inflight_requests", device="nvme2n1", op="write") == writes
    assert device_series(result, "nvme2n1") == {
        "cephnode_nvme_namespace_info",
        "cephnode_nvme_queue_read_ahead_bytes",
        "cephnode_nvme_queue_max_request_bytes",
        "cephnode_nvme_inflight_requests",
    }
    assert device_series(result, "nvme2c2n1") == {
        "cephnode_nvme_scheduler_info",
        "cephnode_nvme_queue_requests",
        "cephnode_nvme_queue_rq_affinity",
        "cephnode_nvme_queue_nomerges",
        "cephnode_nvme_queue_io_poll",
        "cephnode_nvme_hw_queues",
        "cephnode_nvme_queue_wbt_latency_seconds",
    }


def test_a_bad_path_attribute_is_counted(make_tree: MakeTree) -> None:
    fault = {f"sys/{NVME2}/nvme2c2n1/queue/nr_requests": "garbage"}
    result = collect([*make_tree(multipath(), faults=fault).flags, *ONLY_NVME])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="nvme") == 1
    assert value(result, "cephnode_nvme_queue_requests", device="nvme2c2n1") is None
    assert value(result, "cephnode_nvme_scheduler_info", device="nvme2c2n1", scheduler="none") == 1


def test_metrics_endpoint_and_check_agree(
    make_tree: MakeTree, processes: list[subprocess.Popen]
) -> None:
    """The daemon's /metrics shows the path's scheduler and the failed check under the
    namespace, as `check` does."""
    tree = make_tree(multipath(detuned=("nvme2c2n1",)))
    _, base = start(processes, *tree.flags)
    status, body, _ = get(base + "/metrics")
    assert status == 200
    lines = set(body.splitlines())
    assert 'cephnode_nvme_scheduler_info{device="nvme2c2n1",scheduler="mq-deadline"} 1.0' in lines
    assert 'cephnode_nvme_queue_requests{device="nvme2c2n1"} 256.0' in lines
    assert 'cephnode_tuning_check_failed{check="nvme.scheduler",subject="nvme2n1"} 1.0' in lines
    assert not any(
        line.startswith('cephnode_nvme_scheduler_info{device="nvme2n1"') for line in lines
    )
    proc = run_cli("check", *tree.flags)
    assert proc.returncode == 1
    lines_out = proc.stdout.splitlines()
    at = next(i for i, r in enumerate(lines_out) if r.split()[:2] == ["nvme.scheduler", "nvme2n1"])
    row = lines_out[at].split()
    assert row[2] == "FAIL"
    assert row[3] == "mq-deadline"
    # the observed column wraps in the table: the path's name may be on the next line
    assert "nvme2c2n1" in lines_out[at] + lines_out[at + 1]
