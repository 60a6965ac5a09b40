"""The Intel reference nodes: 2x Xeon Platinum 8480+ (Sapphire Rapids, 224 CPUs on two
NUMA nodes, intel_idle, intel_pstate with HWP, VT-d), tuned and detuned.

The EPYC reference nodes exercise one vendor's drivers on one NUMA node; these prove the
checks and metrics on the other vendor's: intel_idle's C1E is shallow and C6 deep, the
VT-d units are parentless class devices (dmar<N>), turbo is intel_pstate's no_turbo, and
every device's interrupts and OSDs have a node to be local to. Every check's outcome is
asserted per subject, so a result that changes on Intel fails here, and so are the
generator's Intel and two-node layouts the results rest on (VT-d units, intel_pstate,
interrupts placed per node). Both trees are built once for the module (about 34,000
files each: most of this module's time).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from cephnode_exporter.checks import Result, Status
from cephnode_exporter.collection import Collection

from tests.conftest import Tree, collect, samples
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_osd import ONLY_OSD, FakeNode, impersonate, recorded_osd

NODE_TUNED, NODE_DETUNED = "xeon8480-tuned", "xeon8480-detuned"
CPUS = 224
NVME = tuple(f"nvme{i}" for i in range(10))
NAMESPACES = tuple(f"{c}n1" for c in NVME)
PORTS = ("ens1f0np0", "ens1f1np1")
NODE0 = set(range(0, 56)) | set(range(112, 168))
NODE1 = set(range(56, 112)) | set(range(168, 224))
# Each controller's NUMA node in the description (nvme0-4 behind socket 0).
NVME_NODE = {c: 0 if i < 5 else 1 for i, c in enumerate(NVME)}
# The checks that skip on both nodes, and why: nothing on these trees for them to judge.
SKIPPED = {
    "kernel.spinlock_iommu": "collector kprofile is disabled",
    "osd.debug_levels": "no OSD on this node",
    "osd.numa": "no OSD on this node",
    "osd.pg_count": "no OSD on this node",
    "osd.rocksdb_build": "no OSD on this node",
    "sysctl.net.ipv4.tcp_low_latency": "disabled in the profile",
}


@dataclass
class Node:
    """A built tree and one in-process collection of it with the check results."""

    tree: Tree
    collection: Collection
    values: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float | None:
        return self.values.get((name, frozenset(labels.items())))

    def results(self, check: str) -> dict[str, Result]:
        return {r.subject: r for r in self.collection.results if r.check == check}

    def statuses(self) -> dict[tuple[str, str], Status]:
        return {(r.check, r.subject): r.status for r in self.collection.results}


def _node(tmp_path_factory: pytest.TempPathFactory, name: str) -> Node:
    dest = tmp_path_factory.mktemp(name)
    build_tree(load_node(name), dest)
    tree = Tree(dest)
    collection = collect(tree.flags, "check")
    return Node(tree, collection, samples(collection))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return _node(tmp_path_factory, NODE_TUNED)


@pytest.fixture(scope="module")
def detuned(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return _node(tmp_path_factory, NODE_DETUNED)


def _expected_tuned() -> dict[tuple[str, str], Status]:
    """Every result of the tuned node: all pass, but the checks of SKIPPED."""
    per_subject = {
        "iommu.nvme": NVME,
        "irq.affinity": (*PORTS, *NVME),
        "net.mtu": PORTS,
        "net.rings": PORTS,
        "nvme.pcie_link": NVME,
        "nvme.scheduler": NAMESPACES,
    }
    out = {(check, s): Status.PASS for check, subjects in per_subject.items() for s in subjects}
    for check in (
        "cpu.cstates",
        "cpu.governor",
        "kernel.mitigations",
        "tuned.profile",
        *(
            f"sysctl.net.{name}"
            for name in (
                "core.netdev_max_backlog",
                "core.rmem_max",
                "core.somaxconn",
                "core.wmem_max",
                "ipv4.tcp_rmem",
                "ipv4.tcp_sack",
                "ipv4.tcp_timestamps",
                "ipv4.tcp_wmem",
            )
        ),
    ):
        out[(check, "")] = Status.PASS
    out.update({(check, ""): Status.SKIP for check in SKIPPED})
    return out


# ----------------------------------------------------------------------------- tuned


def test_tuned_node_every_check_passes_or_skips_for_its_reason(tuned: Node) -> None:
    assert tuned.statuses() == _expected_tuned()
    for r in tuned.collection.results:
        if r.status == Status.SKIP:
            assert r.observed == SKIPPED[r.check], r
        assert r.hint == "", r
    for outcome in tuned.collection.outcomes:
        assert outcome.success, outcome.error
        assert outcome.read_errors == 0, outcome.name


def test_tuned_cstates_c6_off_and_c1e_shallow(tuned: Node) -> None:
    """intel_idle's SPR table: C1E (2 us) is shallow, C6 the deep state, off by the
    BIOS (CPUIDLE_FLAG_OFF: disable 1 from boot) with the core-C6 numbers of a package
    C-state limit below PC6 (190/600 us)."""
    (r,) = tuned.results("cpu.cstates").values()
    assert r.observed == f"no deep state enabled on {CPUS} CPUs (states: C1, C1E, C6, POLL)"
    v = tuned.value
    assert v("cephnode_cpu_idle_driver_info", driver="intel_idle", governor="menu") == 1
    latency = {"POLL": 0.0, "C1": 1e-06, "C1E": 2e-06, "C6": 0.00019}
    residency = {"POLL": 0.0, "C1": 1e-06, "C1E": 4e-06, "C6": 0.0006}
    for state, seconds in latency.items():
        assert v("cephnode_cpu_idle_state_exit_latency_seconds", state=state) == seconds
        assert (
            v("cephnode_cpu_idle_state_target_residency_seconds", state=state) == (residency[state])
        )
        enabled = 0 if state == "C6" else CPUS
        assert v("cephnode_cpu_idle_state_enabled_cpus", state=state) == enabled
    assert v("cephnode_cpu_idle_state_info", state="C6", description="MWAIT 0x20") == 1
    assert v("cephnode_cpu_idle_state_time_seconds_total", state="C6") == 0
    assert v("cephnode_cpu_idle_state_entries_total", state="C6") == 0
    assert v("cephnode_cpu_idle_state_time_seconds_total", state="C1E") > 0  # type: ignore[operator]
    state3 = tuned.tree.sys / "devices/system/cpu/cpu223/cpuidle/state3"
    assert (state3 / "default_status").read_text() == "disabled\n"
    assert (state3 / "s2idle" / "usage").read_text() == "0\n"


def test_tuned_frequency_metrics(tuned: Node) -> None:
    v = tuned.value
    assert v("cephnode_cpu_scaling_driver_cpus", driver="intel_pstate") == CPUS
    assert v("cephnode_cpu_scaling_governor_cpus", governor="performance") == CPUS
    assert v("cephnode_cpu_energy_performance_preference_cpus", preference="performance") == CPUS
    assert v("cephnode_cpu_boost_enabled") == 1  # intel_pstate/no_turbo 0
    assert not [k for k in tuned.values if k[0] == "cephnode_cpu_amd_pstate_info"]
    sampled = {"source": "scaling_cur_freq", "state": "sampled"}
    assert v("cephnode_cpu_achieved_frequency_cpus", **sampled) == CPUS


def test_tuned_iommu_is_vtd_in_passthrough(tuned: Node) -> None:
    v = tuned.value
    assert v("cephnode_iommu_units") == 12
    params = {"amd_iommu": "", "intel_iommu": "on", "iommu": "pt"}
    params |= {"iommu_passthrough": "", "iommu_strict": ""}
    assert v("cephnode_iommu_kernel_params_info", **params) == 1
    for i, c in enumerate(NVME):
        assert v("cephnode_iommu_group_info", controller=c, group=str(40 + i), type="identity") == 1
        assert v("cephnode_iommu_dma_translated", controller=c) == 0


def test_tuned_devices_and_interrupts_are_node_local(tuned: Node) -> None:
    """Five drives per socket; every device's interrupts the kernel does not manage are
    served on its own node, and the 128 managed queue vectors of a drive on 128 CPUs."""
    v = tuned.value
    for c in NVME:
        assert v("cephnode_nvme_numa_node", controller=c) == NVME_NODE[c]
        assert v("cephnode_nvme_queues", controller=c) == 129
        assert v("cephnode_nvme_pcie_current_link_transfers_per_second", controller=c) == 32e9
        assert v("cephnode_device_irqs", device=c, kind="nvme") == 129
        assert v("cephnode_device_irqs_managed", device=c, kind="nvme") == 128
        assert v("cephnode_device_irqs_remote_numa", device=c, kind="nvme") == 0
        assert v("cephnode_device_irq_cpus", device=c, kind="nvme") == 128
    for port in PORTS:
        assert v("cephnode_device_irqs", device=port, kind="net") == 113
        assert v("cephnode_device_irqs_remote_numa", device=port, kind="net") == 0
        assert v("cephnode_device_irq_cpus", device=port, kind="net") == 112
        assert v("cephnode_network_numa_node", device=port) == 0


def test_tuned_firmware_and_pmus(tuned: Node) -> None:
    v = tuned.value
    assert v("cephnode_bios_info", vendor="Dell Inc.", version="1.6.6", date="01/18/2024") == 1
    assert v("cephnode_system_info", vendor="Dell Inc.", product="PowerEdge R760") == 1
    assert v("cephnode_cpu_microcode_info", revision="0x2b000590", source="sysfs") == 1
    assert v("cephnode_kernel_release_info", release="6.5.0-35-generic") == 1
    assert v("cephnode_perf_event_paranoid") == 4
    for pmu, event in (
        ("cstate_core", "c6-residency"),
        ("cstate_pkg", "c6-residency"),
        ("msr", "pperf"),
    ):
        assert v("cephnode_perf_pmu_event_info", pmu=pmu, event=event) == 1
    assert v("cephnode_kernel_cpu_vulnerabilities", state="mitigated") == 3
    assert v("cephnode_kernel_cpu_vulnerabilities", state="not_affected") == 10


def test_osd_numa_judges_each_osd_against_its_drive_node(tuned: Node) -> None:
    """Two NUMA nodes make osd.numa judge something: the recorded BlueStore OSD behind
    the sockets of osd.40 (nvme0, node 0) and osd.45 (nvme5, node 1), both served by
    this process, which stands in for osd.40's process, pinned to node 0. osd.40
    passes; osd.45, whose threads may only run on node 0, warns with its own subject."""
    impersonate(tuned.tree)
    node = FakeNode()
    try:
        for osd in (40, 45):
            node.add(osd, recorded_osd("bluestore", osd_data=f"/var/lib/ceph/osd/ceph-{osd}"))
        c = collect([*tuned.tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD], "check")
    finally:
        node.close()
    found = {r.subject: r for r in c.results if r.check == "osd.numa"}
    assert found["osd.40"].status == Status.PASS, found["osd.40"]
    assert found["osd.40"].observed == "allowed on node 0 (112 CPUs); nvme0n1 (nvme0) on node 0"
    assert found["osd.45"].status == Status.WARN, found["osd.45"]
    assert found["osd.45"].observed == "allowed on node 0 (112 CPUs); nvme5n1 (nvme5) on node 1"
    assert "ceph config set osd.45 osd_numa_node 1" in found["osd.45"].hint
    v = samples(c)
    for osd in ("osd.40", "osd.45"):
        key = ("cephnode_osd_allowed_cpus", frozenset({("ceph_daemon", osd), ("numa_node", "0")}))
        assert v[key] == 112


# ----------------------------------------------------------------------------- detuned


def test_detuned_node_reports_each_fault_with_its_subject(detuned: Node) -> None:
    """Exactly the description's faults deviate, each on its own subject; everything
    else is as on the tuned node."""
    expected = _expected_tuned()
    faults = {
        ("cpu.cstates", ""): Status.FAIL,
        ("cpu.governor", ""): Status.FAIL,
        ("nvme.scheduler", "nvme3n1"): Status.FAIL,
        ("nvme.pcie_link", "nvme7"): Status.FAIL,
        ("tuned.profile", ""): Status.WARN,
        **{("iommu.nvme", c): Status.FAIL for c in NVME},
    }
    expected.update(faults)
    assert detuned.statuses() == expected
    for r in detuned.collection.results:
        assert (r.hint != "") == ((r.check, r.subject) in faults), r


def test_detuned_c6_is_the_deep_state_that_fails(detuned: Node) -> None:
    (r,) = detuned.results("cpu.cstates").values()
    assert r.observed == f"C6 (exit latency 290 us) enabled on {CPUS}/{CPUS} CPUs"
    assert "intel_idle.max_cstate=1" in r.hint
    v = detuned.value
    assert v("cephnode_cpu_idle_state_exit_latency_seconds", state="C6") == 0.00029
    assert v("cephnode_cpu_idle_state_target_residency_seconds", state="C6") == 0.0008
    assert v("cephnode_cpu_idle_state_enabled_cpus", state="C6") == CPUS
    # C1E stays shallow even enabled: only C6 is named.
    assert "C1E" not in r.observed
    time = {
        s: v("cephnode_cpu_idle_state_time_seconds_total", state=s) or 0.0
        for s in ("POLL", "C1", "C1E", "C6")
    }
    assert time["C6"] / sum(time.values()) > 0.7


def test_detuned_powersave_and_turbo_off(detuned: Node) -> None:
    (r,) = detuned.results("cpu.governor").values()
    assert f"powersave on {CPUS}/{CPUS} CPUs" in r.observed
    assert "no_turbo" in r.observed and "no_turbo" in r.hint
    assert "cpupower frequency-set -g performance" in r.hint
    v = detuned.value
    assert v("cephnode_cpu_scaling_governor_cpus", governor="powersave") == CPUS
    assert v("cephnode_cpu_boost_enabled") == 0
    pref = "balance_performance"
    assert v("cephnode_cpu_energy_performance_preference_cpus", preference=pref) == CPUS
    # no_turbo lowers the policy's limit to the non-turbo top, not cpuinfo_max_freq.
    policy = detuned.tree.sys / "devices/system/cpu/cpufreq/policy100"
    assert (policy / "scaling_max_freq").read_text() == "2000000\n"
    assert (policy / "cpuinfo_max_freq").read_text() == "3800000\n"
    assert (policy / "base_frequency").read_text() == "2000000\n"


def test_detuned_strict_iommu_translates_with_an_intel_hint(detuned: Node) -> None:
    found = detuned.results("iommu.nvme")
    for i, c in enumerate(NVME):
        assert found[c].observed == f"IOMMU group {40 + i}, default domain DMA (translated)"
        assert "intel_iommu=off" in found[c].hint and "amd_iommu" not in found[c].hint
        assert detuned.value("cephnode_iommu_dma_translated", controller=c) == 1
    params = {"amd_iommu": "", "intel_iommu": "on", "iommu": ""}
    params |= {"iommu_passthrough": "", "iommu_strict": "1"}
    assert detuned.value("cephnode_iommu_kernel_params_info", **params) == 1


def test_detuned_scheduler_and_link(detuned: Node) -> None:
    r = detuned.results("nvme.scheduler")["nvme3n1"]
    assert r.observed == "mq-deadline"
    assert "echo none > /sys/block/nvme3n1/queue/scheduler" in r.hint
    link = detuned.results("nvme.pcie_link")["nvme7"]
    assert link.observed == "x4 at 16 GT/s (maximum x4 at 32 GT/s)"
    assert "0000:b8:00.0" in link.hint
    v = detuned.value
    assert v("cephnode_nvme_scheduler_info", device="nvme3n1", scheduler="mq-deadline") == 1
    assert v("cephnode_nvme_queue_requests", device="nvme3n1") == 256
    assert v("cephnode_nvme_pcie_current_link_transfers_per_second", controller="nvme7") == 16e9
    assert v("cephnode_nvme_pcie_max_link_transfers_per_second", controller="nvme7") == 32e9
    assert v("cephnode_nvme_pcie_current_link_width", controller="nvme7") == 4


# ----------------------------------------------------------------------------- the tree


def _cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _vectors(tree: Tree, device: Path) -> list[tuple[set[int], set[int], bool]]:
    """(allowed, effective, managed) of each vector of a device's PCI function."""
    pci = device.resolve()
    out = []
    for n in sorted(os.listdir(pci / "msi_irqs"), key=int):
        irq = tree.proc / "irq" / n
        allowed = _cpulist((irq / "smp_affinity_list").read_text())
        effective = _cpulist((irq / "effective_affinity_list").read_text())
        managed = not os.stat(irq / "smp_affinity_list").st_mode & 0o200
        out.append((allowed, effective, managed))
    return out


def test_vectors_the_kernel_places_are_on_the_device_node(tuned: Node) -> None:
    """An unmanaged vector is routed to a CPU of the device's node when its mask has one
    (arch/x86/kernel/apic/vector.c assign_irq_vector_any_locked()): the NVMe admin
    vector of a drive on node 1 is served on node 1, not on cpu5-9."""
    for c in NVME:
        device = tuned.tree.sys / "class" / "nvme" / c / "device"
        admin = [v for v in _vectors(tuned.tree, device) if not v[2]]
        assert len(admin) == 1
        allowed, effective, _ = admin[0]
        assert allowed == NODE0 | NODE1
        assert effective <= (NODE0 if NVME_NODE[c] == 0 else NODE1), (c, effective)


def test_managed_vectors_are_shared_out_per_node(tuned: Node) -> None:
    """lib/group_cpus.c: 128 vectors on two nodes of 112 CPUs are 64 per node, 48 with a
    core's two threads and 16 with one CPU; none spans both nodes."""
    device = tuned.tree.sys / "class" / "nvme" / "nvme0" / "device"
    managed = [allowed for allowed, _, m in _vectors(tuned.tree, device) if m]
    assert len(managed) == 128
    assert sum(1 for a in managed if a <= NODE0) == 64
    assert sum(1 for a in managed if a <= NODE1) == 64
    assert sorted(len(a) for a in managed) == [1] * 32 + [2] * 96
    assert set().union(*managed) == NODE0 | NODE1


def test_vtd_units_are_parentless_class_devices(tuned: Node) -> None:
    """drivers/iommu/intel: dmar<N> under devices/virtual/iommu with the intel-iommu
    attributes; a device links to the unit whose scope holds its root bus."""
    sys = tuned.tree.sys
    unit = sys / "class" / "iommu" / "dmar7"
    assert os.readlink(unit) == "../../devices/virtual/iommu/dmar7"
    attrs = unit / "intel-iommu"
    assert (attrs / "version").read_text() == "6:0\n"
    assert (attrs / "cap").read_text() == "9ed008c40780466\n"
    assert (attrs / "domains_supported").read_text() == "65536\n"  # cap_ndoms(): ND 6
    assert (attrs / "domains_used").read_text() == "2\n"  # id 0 and the identity domain
    nvme0 = (sys / "bus" / "pci" / "devices" / "0000:27:00.0").resolve()
    assert (nvme0 / "iommu").resolve() == unit.resolve()
    assert (unit / "devices" / "0000:27:00.0").resolve() == nvme0
    group = (nvme0 / "iommu_group").resolve()
    assert (group / "reserved_regions").read_text() == (
        "0x00000000fee00000 0x00000000feefffff msi\n"
    )


def test_intel_pstate_global_attributes(tuned: Node) -> None:
    base = tuned.tree.sys / "devices/system/cpu/intel_pstate"
    expected = {
        "status": "active",
        "no_turbo": "0",
        "max_perf_pct": "100",
        "min_perf_pct": "21",
        "num_pstates": "31",
        "turbo_pct": "59",
        "hwp_dynamic_boost": "0",
    }
    assert {p.name: p.read_text().strip() for p in base.iterdir()} == expected
    assert not (tuned.tree.sys / "devices/system/cpu/cpufreq/boost").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["cpufreq"].update(driver="acpi-cpufreq", base_frequency=None), "not intel"),
        (lambda d: d["cpufreq"]["intel_pstate"].update(status="passive"), "registers no"),
        (lambda d: d["cpufreq"].pop("base_frequency"), "needs base_frequency"),
        (lambda d: d["iommu"]["units"].update(dmar12="pci0000:00/0000:00:00.2"), "mixed"),
        (lambda d: d["iommu"]["units"]["dmar0"].update(scope="pci0000:80"), "scope"),
        (lambda d: d["iommu"]["units"].update(dmar12={"scope": "all"}), "scope: all"),
    ],
)
def test_generator_refuses_inconsistent_intel_descriptions(
    tmp_path: Path, change: object, message: str
) -> None:
    """The detuned node's cpufreq and IOMMU sections alone (a few CPUs), made
    inconsistent: a description the kernel could not have produced is refused."""
    full = load_node(NODE_DETUNED)
    desc = {
        "cpus": {"sockets": 1, "cores_per_socket": 2},
        "cpufreq": copy.deepcopy(full["cpufreq"]),
        "iommu": copy.deepcopy(full["iommu"]),
    }
    change(desc)  # type: ignore[operator]
    if desc["cpufreq"].get("base_frequency", 0) is None:
        del desc["cpufreq"]["base_frequency"]
    with pytest.raises(ValueError, match=message):
        build_tree(desc, tmp_path / "t")
