"""The ``irq`` collector and the ``irq.affinity`` check: the reference nodes, a two-node
variant, broken files, and this machine's own /proc/irq."""

from __future__ import annotations

import contextlib
import copy
import errno
import os
from pathlib import Path

import pytest
from cephnode_exporter.checks import Status
from cephnode_exporter.hostfs import HostFS, ParseError
from cephnode_exporter.hostfs.irq import (
    IRQReader,
    format_cpulist,
    irqbalance_running,
    parse_affinity,
    pci_devices,
    unreadable_reason,
)

from tests.conftest import (
    GOLDEN,
    NODES,
    MakeTree,
    Tree,
    collect,
    collector_exposition,
    compare_golden,
    value,
)
from tests.fixtures.sysfsgen import load_node

PORTS = ("ens1f0np0", "ens1f1np1")
NVME = tuple(f"nvme{i}" for i in range(10))


def results(collection, check: str = "irq.affinity") -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {r.subject: r for r in collection.results if r.check == check}


def _irq_dirs(tree: Tree, device_link: Path) -> list[int]:
    """The requested vectors of a device, straight from the tree: msi_irqs entries
    that have a /proc/irq directory."""
    pci = device_link.resolve()
    return [
        int(n)
        for n in os.listdir(pci / "msi_irqs")
        if (tree.proc / "irq" / n / "smp_affinity_list").exists()
    ]


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8", {0, 1, 2, 3, 8}), ("", set()), ("95", {95}), ("0-1,48-49", {0, 1, 48, 49})],
)
def test_affinity_round_trip(text: str, cpus: set[int]) -> None:
    assert parse_affinity(text, "x") == frozenset(cpus)
    assert format_cpulist(frozenset(cpus)) == text


@pytest.mark.parametrize("text", ["?garbage@value!", "3-1", "0-3,2", "1,,2", "0-99999"])
def test_affinity_garbage_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_affinity(text, "smp_affinity_list")


def test_permission_errors_say_they_need_privileges() -> None:
    exc = PermissionError(errno.EACCES, "Permission denied", "/proc/irq/7/smp_affinity_list")
    assert "needs root" in unreadable_reason(exc)
    assert "/proc/irq/7" in unreadable_reason(exc)


# ----------------------------------------------------------------------------- reference nodes


@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("collector", ["irq", "firmware", "thp", "cpuhw"])
def test_collector_exposition(
    request: pytest.FixtureRequest, node_trees: dict[str, Tree], node: str, collector: str
) -> None:
    result = collect(node_trees[node].flags)
    compare_golden(
        request,
        GOLDEN / node / f"{collector}.prom",
        collector_exposition(result, collector, clean=False),
    )


@pytest.mark.parametrize("node", NODES)
def test_counts_match_the_files(node_trees: dict[str, Tree], node: str) -> None:
    tree = node_trees[node]
    result = collect(tree.flags)
    for name, kind in [*((n, "nvme") for n in NVME), *((p, "net") for p in PORTS)]:
        link = tree.sys / "class" / kind / name / "device"
        vectors = _irq_dirs(tree, link)
        assert len(vectors) == 97
        got = value(result, "cephnode_device_irqs", device=name, kind=kind)
        assert got == len(vectors)
        managed = [
            n
            for n in vectors
            if not os.stat(tree.proc / "irq" / str(n) / "smp_affinity_list").st_mode & 0o200
        ]
        assert value(result, "cephnode_device_irqs_managed", device=name, kind=kind) == len(managed)
        cpus = set()
        for n in vectors:
            text = (tree.proc / "irq" / str(n) / "effective_affinity_list").read_text().strip()
            cpus |= set(parse_affinity(text, "x"))
        assert value(result, "cephnode_device_irq_cpus", device=name, kind=kind) == len(cpus)
        # One NUMA node: nothing can be off-node.
        assert value(result, "cephnode_device_irqs_remote_numa", device=name, kind=kind) == 0


def test_tuned_node_passes_with_irqbalance(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-tuned"].flags)
    assert value(result, "cephnode_irqbalance_running") == 1
    found = results(result)
    assert set(found) == {*NVME, *PORTS}
    for r in found.values():
        assert r.status == Status.PASS, r  # type: ignore[attr-defined]
    assert "96 kernel-managed" in found["nvme3"].observed  # type: ignore[attr-defined]


def test_detuned_node_fails_on_the_ports_only(node_trees: dict[str, Tree]) -> None:
    """The script that pinned every interrupt to cpu0 moved both ports' vectors; the
    kernel refused to move the managed NVMe queue vectors, so the drives pass."""
    result = collect(node_trees["epyc9454p-detuned"].flags)
    assert value(result, "cephnode_irqbalance_running") == 0
    found = results(result)
    for port in PORTS:
        r = found[port]
        assert r.status == Status.FAIL  # type: ignore[attr-defined]
        assert r.observed == "all 97 interrupts on cpu0 (irqbalance not running)"  # type: ignore[attr-defined]
        assert "start irqbalance" in r.hint  # type: ignore[attr-defined]
        assert value(result, "cephnode_device_irq_cpus", device=port, kind="net") == 1
    for nvme in NVME:
        assert found[nvme].status == Status.PASS  # type: ignore[attr-defined]
    assert (
        value(result, "cephnode_tuning_check_failed", check="irq.affinity", subject=PORTS[0]) == 1
    )


# ----------------------------------------------------------------------------- two NUMA nodes


def _two_nodes(affinity: str | None) -> dict:
    """The tuned node in NPS2 (cores 0-23 and their siblings 48-71 on node 0, 24-47 and
    72-95 on node 1), NVMe and ports on node 0, every settable vector written to
    ``affinity`` when given."""
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    desc["cpus"]["numa_nodes"] = 2
    desc["irqs"].pop("irqbalance_pid")
    if affinity is not None:
        desc["irqs"]["user_affinity"] = affinity
    return desc


def test_vectors_on_the_other_node_fail(make_tree: MakeTree) -> None:
    result = collect(make_tree(_two_nodes("24-47")).flags)
    found = results(result)
    for port in PORTS:
        assert value(result, "cephnode_device_irqs_remote_numa", device=port, kind="net") == 97
        r = found[port]
        assert r.status == Status.FAIL  # type: ignore[attr-defined]
        assert r.observed.startswith("97 of 97 interrupts served off node 0 (on node 1)")  # type: ignore[attr-defined]
        assert "0-23,48-71, node 0" in r.hint  # type: ignore[attr-defined]
    # The NVMe admin vector moved too; the 96 managed queue vectors span both nodes by
    # design and are not counted.
    for nvme in NVME:
        assert value(result, "cephnode_device_irqs_remote_numa", device=nvme, kind="nvme") == 1
        assert found[nvme].status == Status.FAIL  # type: ignore[attr-defined]


def test_managed_spread_passes_and_local_spread_beyond_the_node_fails(
    make_tree: MakeTree,
) -> None:
    """Without any user setting: the managed NVMe queue vectors span both nodes by
    design and pass; the ports' 96 completion vectors follow cpumask_local_spread(),
    which runs out of node-0 CPUs after 48 and puts the rest on node 1: half the
    port's receive queues are then served off its node, which fails."""
    tree = make_tree(_two_nodes(None))
    result = collect(tree.flags)
    found = results(result)
    for nvme in NVME:
        assert found[nvme].status == Status.PASS, found[nvme]  # type: ignore[attr-defined]
        assert value(result, "cephnode_device_irqs_remote_numa", device=nvme, kind="nvme") == 0
    # The managed NVMe vectors really are on both nodes (else the test proves nothing).
    link = tree.sys / "class" / "nvme" / "nvme0" / "device"
    effective = set()
    for n in _irq_dirs(tree, link):
        text = (tree.proc / "irq" / str(n) / "effective_affinity_list").read_text()
        effective |= set(parse_affinity(text.strip(), "x"))
    assert effective & set(range(24, 48)) and effective & set(range(0, 24))
    for port in PORTS:
        assert value(result, "cephnode_device_irqs_remote_numa", device=port, kind="net") == 48
        r = found[port]
        assert r.status == Status.FAIL  # type: ignore[attr-defined]
        assert r.observed.startswith("48 of 97 interrupts served off node 0 (on node 1)")  # type: ignore[attr-defined]
        assert "ethtool -L" in r.hint  # type: ignore[attr-defined]


def test_unknown_device_node_is_not_judged_for_locality(make_tree: MakeTree) -> None:
    desc = _two_nodes(None)
    for iface in desc["net"]["interfaces"]:
        if not iface.get("virtual"):
            iface["numa_node"] = -1
    result = collect(make_tree(desc).flags)
    assert value(result, "cephnode_device_irqs_remote_numa", device=PORTS[0], kind="net") is None
    r = results(result)[PORTS[0]]
    assert r.status == Status.PASS  # type: ignore[attr-defined]
    assert "NUMA locality not judged" in r.observed  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- broken files

# nvme0's vectors are 110 (admin) to 206; the first port's start at 1080.
ADMIN = "proc/irq/110"


@pytest.mark.parametrize("kind", ["eio", "garbage", "fifo"])
def test_unreadable_affinity_is_unknown_not_pass(make_tree: MakeTree, kind: str) -> None:
    tree = make_tree("epyc9454p-tuned", faults={f"{ADMIN}/effective_affinity_list": kind})
    result = collect(tree.flags)
    r = results(result)["nvme0"]
    assert r.status == Status.UNKNOWN  # type: ignore[attr-defined]
    assert "affinity of 1 interrupts unreadable" in r.observed  # type: ignore[attr-defined]
    assert value(result, "cephnode_device_irqs", device="nvme0", kind="nvme") is None
    assert value(result, "cephnode_device_irqs", device="nvme1", kind="nvme") == 97
    assert value(result, "cephnode_scrape_collector_read_errors", collector="irq") == 1
    assert value(result, "cephnode_scrape_collector_success", collector="irq") == 1


def test_unreadable_vector_does_not_hide_a_deviation(make_tree: MakeTree) -> None:
    first_port = 110 + 10 * 97
    tree = make_tree(
        "epyc9454p-detuned", faults={f"proc/irq/{first_port + 5}/effective_affinity_list": "eio"}
    )
    r = results(collect(tree.flags))[PORTS[0]]
    assert r.status == Status.FAIL  # type: ignore[attr-defined]
    assert "all 96 interrupts on cpu0" in r.observed  # type: ignore[attr-defined]


def test_missing_effective_list_falls_back_to_allowed(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned", faults={f"{ADMIN}/effective_affinity_list": "missing"})
    irq = IRQReader(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))).read(110)
    assert irq is not None and irq.effective == irq.allowed == frozenset(range(96))
    assert not irq.managed


def test_vector_without_handler_is_not_counted(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned", faults={ADMIN: "missing"})
    result = collect(tree.flags)
    assert value(result, "cephnode_device_irqs", device="nvme0", kind="nvme") == 96
    assert value(result, "cephnode_scrape_collector_read_errors", collector="irq") == 0


def test_device_limit_keeps_nvme_first(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned")
    result = collect([*tree.flags, "--collector.irq.max-devices=3"])
    assert value(result, "cephnode_scrape_collector_items_dropped", collector="irq") == 9
    assert {r for r in results(result)} == {"nvme0", "nvme1", "nvme2"}


def test_irqbalance_found_by_socket_hint_and_by_scan(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned")
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))
    assert irqbalance_running(fs) == (True, 1874)
    assert irqbalance_running(fs, hint=1874) == (True, 1874)
    assert irqbalance_running(fs, hint=3311) == (True, 1874)  # a ceph-osd pid now
    (tree.proc / "1874" / "comm").write_text("bash\n")  # irqbalance gone, pid reused
    assert irqbalance_running(fs, hint=1874) == (False, None)


def test_proc_is_scanned_for_irqbalance_once_a_minute_while_it_is_not_found(
    make_tree: MakeTree,
) -> None:
    """A node without irqbalance has its processes' comm read by one scrape a minute,
    not by every scrape; irqbalance's socket is looked for on every scrape, and a
    running irqbalance that stops is seen at once."""
    from cephnode_exporter.cli import parse_args
    from cephnode_exporter.collectors.base import CollectorContext
    from cephnode_exporter.collectors.irq import IRQBALANCE_RESCAN_SECONDS, IRQCollector

    tree = make_tree("epyc9454p-tuned")
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))
    collector = IRQCollector(CollectorContext(fs, parse_args(["dump", *tree.flags]), None))
    comm = tree.proc / "1874" / "comm"
    try:
        assert collector.read().irqbalance is True
        comm.write_text("bash\n")  # stopped: the pid seen last says so at once
        assert collector.read().irqbalance is False
        comm.write_text("irqbalance\n")  # an irqbalance without a socket started
        assert collector.read().irqbalance is False  # no scan within the minute
        assert collector._scanned_at is not None
        collector._scanned_at -= IRQBALANCE_RESCAN_SECONDS  # a minute later
        assert collector.read().irqbalance is True
        comm.write_text("bash\n")
        assert collector.read().irqbalance is False
        # irqbalance 1.8+ names its pid in its socket: found on the next scrape.
        run = tree.rootfs / "run" / "irqbalance"
        run.mkdir(parents=True, exist_ok=True)
        (tree.proc / "4242").mkdir()
        (tree.proc / "4242" / "comm").write_text("irqbalance\n")
        (run / "irqbalance4242.sock").write_text("")
        assert collector.read().irqbalance is True
    finally:
        collector.close()


# ----------------------------------------------------------------------------- this machine


def test_this_machines_interrupts() -> None:
    """The collector on the real /proc and /sys: every NVMe controller and network port
    on PCI with its vectors, each count recomputed from the files here."""
    fs = HostFS()
    devices = pci_devices(fs)
    result = collect([])
    assert value(result, "cephnode_scrape_collector_success", collector="irq") == 1
    running = value(result, "cephnode_irqbalance_running")
    comms = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):  # exited meanwhile
                comms.append(Path("/proc", pid, "comm").read_text().strip())
    assert running == (1.0 if "irqbalance" in comms else 0.0)
    if not devices:
        pytest.skip("no NVMe controller or network port on PCI on this machine")
    for name, kind, _bdf, pci_dir in devices:
        vectors = [
            n
            for n in os.listdir(os.path.join(pci_dir, "msi_irqs"))
            if os.path.exists(f"/proc/irq/{n}/smp_affinity_list")
        ]
        assert value(result, "cephnode_device_irqs", device=name, kind=kind) == len(vectors)
        cpus = set()
        for n in vectors:
            cpus |= set(
                parse_affinity(
                    Path(f"/proc/irq/{n}/effective_affinity_list").read_text().strip(), "x"
                )
            )
        assert value(result, "cephnode_device_irq_cpus", device=name, kind=kind) == len(cpus)
        assert results(result)[name].status in (Status.PASS, Status.FAIL)  # type: ignore[attr-defined]


def test_kept_files_follow_changes_between_scrapes(make_tree: MakeTree) -> None:
    """The reader keeps affinity files open: a moved interrupt is seen on the next
    scrape, and a vector whose handler went is no longer counted and its files closed."""
    from cephnode_exporter.cli import parse_args
    from cephnode_exporter.collectors.base import CollectorContext
    from cephnode_exporter.collectors.irq import IRQCollector

    tree = make_tree("epyc9454p-tuned")
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))
    collector = IRQCollector(CollectorContext(fs, parse_args(["dump", *tree.flags]), None))
    try:
        first = {d.device: d for d in collector.read().devices}
        assert len(first["ens1f0np0"].irqs) == 97
        port = 110 + 10 * 97
        for n in range(port, port + 97):  # a script pins the first port to cpu5
            for name in ("smp_affinity_list", "effective_affinity_list"):
                (tree.proc / "irq" / str(n) / name).write_text("5\n")
        # nvme0's last I/O queue vector (managed, cached) and the second port's last
        # vector (kept open) freed: pci_free_irq_vectors() frees the descriptor, so its
        # msi_irqs entry and its /proc/irq directory go together.
        last_port = port + 97 + 96
        assert any(f"/irq/{last_port}/" in path for path in collector._reader._files._fds)
        for link, n in (("nvme/nvme0", 206), ("net/ens1f1np1", last_port)):
            (tree.sys / "class" / link / "device" / "msi_irqs" / str(n)).unlink()
            for name in os.listdir(tree.proc / "irq" / str(n)):
                path = tree.proc / "irq" / str(n) / name
                path.rmdir() if path.is_dir() else path.unlink()
            (tree.proc / "irq" / str(n)).rmdir()
        second = {d.device: d for d in collector.read().devices}
        cpus = {c for irq in second["ens1f0np0"].irqs for c in irq.effective}
        assert cpus == {5}
        assert len(second["nvme0"].irqs) == 96 and not second["nvme0"].unread
        assert len(second["ens1f1np1"].irqs) == 96 and not second["ens1f1np1"].unread
        assert all(f"/irq/{last_port}/" not in path for path in collector._reader._files._fds)
    finally:
        collector.close()


def test_an_unchanged_device_gives_its_list_of_last_scrape(make_tree: MakeTree) -> None:
    """A device whose msi_irqs listing is unchanged and whose vectors that are not fixed
    read as last time gives the list of the last scrape; a moved vector, a vector whose
    facts the reader dropped, or a freed vector gives the list read afresh, equal to
    what a new reader reads."""
    from cephnode_exporter.cli import parse_args
    from cephnode_exporter.collectors.base import CollectorContext
    from cephnode_exporter.collectors.irq import IRQCollector

    tree = make_tree("epyc9454p-tuned")
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))

    def devices(c: IRQCollector) -> dict[str, list[object]]:
        return {d.device: d.irqs for d in c.read().devices}

    def fresh() -> dict[str, list[object]]:
        other = IRQCollector(CollectorContext(fs, parse_args(["dump", *tree.flags]), None))
        try:
            return devices(other)
        finally:
            other.close()

    collector = IRQCollector(CollectorContext(fs, parse_args(["dump", *tree.flags]), None))
    try:
        collector.read()  # the first read makes the managed vectors fixed
        first = devices(collector)
        second = devices(collector)
        assert all(second[d] is first[d] for d in first)
        assert second == fresh()
        # The first port's first vector moved to CPU 7.
        port = 110 + 10 * 97
        for name in ("smp_affinity_list", "effective_affinity_list"):
            (tree.proc / "irq" / str(port) / name).write_text("7\n")
        third = devices(collector)
        assert third["ens1f0np0"] is not first["ens1f0np0"]
        assert third["ens1f0np0"][0].effective == frozenset({7})
        assert third["nvme0"] is first["nvme0"]
        assert third == fresh()
        # A dropped vector's facts (as a failed read drops them) end the reuse.
        collector._reader._forget(first["nvme1"][1].number)
        fourth = devices(collector)
        assert fourth["nvme1"] is not first["nvme1"] and fourth["nvme1"] == first["nvme1"]
        # nvme0 freed its last vector: a new listing, read afresh.
        (tree.sys / "class" / "nvme" / "nvme0" / "device" / "msi_irqs" / "206").unlink()
        for name in os.listdir(tree.proc / "irq" / "206"):
            path = tree.proc / "irq" / "206" / name
            path.rmdir() if path.is_dir() else path.unlink()
        (tree.proc / "irq" / "206").rmdir()
        fifth = devices(collector)
        assert len(fifth["nvme0"]) == len(first["nvme0"]) - 1
        assert fifth == fresh()
    finally:
        collector.close()


def test_managed_vector_with_a_garbage_mask_is_unknown(make_tree: MakeTree) -> None:
    """A managed vector's mask is read (once) to know where it is served; garbage
    there makes the device unknown, not a pass."""
    tree = make_tree("epyc9454p-tuned")
    path = tree.proc / "irq" / "111" / "smp_affinity_list"
    path.chmod(0o644)
    path.write_text("?garbage@value!\n")
    path.chmod(0o444)  # still read-only: still a managed vector
    result = collect(tree.flags)
    r = results(result)["nvme0"]
    assert r.status == Status.UNKNOWN  # type: ignore[attr-defined]
    assert "garbage" in r.observed  # type: ignore[attr-defined]
    assert value(result, "cephnode_device_irqs", device="nvme0", kind="nvme") is None


# ----------------------------------------------------------------------------- hostile trees

FIRST_PORT = 110 + 10 * 97  # the first port's vectors: 1080 to 1176


def test_empty_effective_lists_of_a_port_are_unknown_not_a_pass(make_tree: MakeTree) -> None:
    """Only a kernel-managed vector whose CPUs are all offline lists no CPU; a port's
    vectors with empty lists are unreadable, not "97 interrupts on 0 CPUs" (a pass)."""
    tree = make_tree("epyc9454p-detuned")
    for n in range(FIRST_PORT, FIRST_PORT + 97):
        (tree.proc / "irq" / str(n) / "effective_affinity_list").write_text("")
    result = collect(tree.flags)
    r = results(result)[PORTS[0]]
    assert r.status == Status.UNKNOWN, r  # type: ignore[attr-defined]
    assert "effective_affinity_list: empty" in r.observed  # type: ignore[attr-defined]
    assert value(result, "cephnode_device_irq_cpus", device=PORTS[0], kind="net") is None
    assert value(result, "cephnode_scrape_collector_read_errors", collector="irq") == 97
    assert results(result)[PORTS[1]].status == Status.FAIL  # type: ignore[attr-defined]


def test_a_device_whose_interrupts_no_cpu_serves_is_unknown() -> None:
    """Managed vectors may all list no CPU (shut down): nothing is served, so the
    device's placement cannot pass."""
    from cephnode_exporter.checks.irq import affinity
    from cephnode_exporter.hostfs.irq import IRQ, DeviceIRQs, IRQFacts

    dev = DeviceIRQs("nvme0", "nvme", "0000:01:00.0", 0)
    dev.irqs = [IRQ(n, frozenset({n}), frozenset(), managed=True) for n in (1, 2)]
    (finding,) = affinity(IRQFacts(devices=[dev], node_cpus={0: frozenset({0, 1})}), {})
    assert finding.unknown and finding.deviates is None, finding
    assert "no CPU serves any of its 2 interrupts" in finding.observed


def test_a_missing_affinity_file_of_a_requested_irq_is_unknown_not_unused(
    make_tree: MakeTree,
) -> None:
    """``/proc/irq/<N>`` there means a handler was requested: a missing affinity file
    in it is a read error, not a vector the device does not use (SKIP)."""
    tree = make_tree("epyc9454p-detuned")
    for n in range(FIRST_PORT, FIRST_PORT + 97):
        (tree.proc / "irq" / str(n) / "smp_affinity_list").unlink()
    result = collect(tree.flags)
    r = results(result)[PORTS[0]]
    assert r.status == Status.UNKNOWN, r  # type: ignore[attr-defined]
    assert f"irq/{FIRST_PORT}/smp_affinity_list" in r.observed  # type: ignore[attr-defined]
    assert value(result, "cephnode_device_irqs", device=PORTS[0], kind="net") is None
    assert value(result, "cephnode_scrape_collector_read_errors", collector="irq") == 97


def test_a_missing_proc_irq_makes_every_device_unknown_once(make_tree: MakeTree) -> None:
    """procfs always has /proc/irq (kernel/irq/proc.c init_irq_proc): without it no
    device's interrupts can be placed, which is unknown with one error per device, not
    "no interrupts requested" for devices whose msi_irqs list vectors."""
    tree = make_tree("epyc9454p-detuned")
    (tree.proc / "irq").rename(tree.proc / "irq.gone")
    result = collect(tree.flags)
    found = results(result)
    assert set(found) == {*NVME, *PORTS}
    for r in found.values():
        assert r.status == Status.UNKNOWN, r  # type: ignore[attr-defined]
        assert "procfs without /proc/irq" in r.observed  # type: ignore[attr-defined]
    assert value(result, "cephnode_device_irqs", device="nvme0", kind="nvme") is None
    assert value(result, "cephnode_scrape_collector_read_errors", collector="irq") == 12


def test_msi_names_the_kernel_never_writes_are_not_counted_twice(make_tree: MakeTree) -> None:
    """msi_irqs entries are named "%d": "01080" beside "1080" is the same IRQ, not a
    98th vector; such names are left out and counted as read errors on every scrape,
    also when the listing is taken from the reader's cache."""
    from cephnode_exporter.cli import parse_args
    from cephnode_exporter.collectors.base import CollectorContext
    from cephnode_exporter.collectors.irq import IRQCollector

    tree = make_tree("epyc9454p-detuned")
    msi = tree.sys / "class" / "net" / PORTS[0] / "device" / "msi_irqs"
    for name in ("01080", "001081", "\u0661\u0660\u0668\u0662"):  # Arabic-Indic "1082"
        (msi / name).write_text("msix\n")
    result = collect(tree.flags)
    assert value(result, "cephnode_device_irqs", device=PORTS[0], kind="net") == 97
    assert value(result, "cephnode_scrape_collector_read_errors", collector="irq") == 1
    assert results(result)[PORTS[0]].status == Status.FAIL  # type: ignore[attr-defined]
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))
    collector = IRQCollector(CollectorContext(fs, parse_args(["dump", *tree.flags]), None))
    try:
        for _ in range(2):
            facts = collector.read()
            (port,) = [d for d in facts.devices if d.device == PORTS[0]]
            assert len(port.irqs) == 97
            assert len(facts.errors) == 1 and "01080" in facts.errors.items[0]
    finally:
        collector.close()
