"""A directory hidden from the exporter is `unknown`, never `skip` (hostfs/mounts.py).

Container runtimes mount an empty tmpfs over paths of /sys and /proc (runc maskPath);
a hidden ``class/nvme`` or ``devices/system/cpu/cpuidle`` must not read as a node without
NVMe or C-states. Three layers: the mountinfo parser and the hiding rule on text; fixture
trees whose masked directory is emptied and named in a mountinfo file given with
``--path.mountinfo`` (or left without one, where other sysfs entries give the mask away);
and, as root, real tmpfs mounts over a fixture tree's directories, seen through the
exporter's own /proc/self/mountinfo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cephnode_exporter.checks.base import Result
from cephnode_exporter.hostfs import mounts
from cephnode_exporter.hostfs.mounts import MountTable, judge, parse_mount, parse_mountinfo

from tests.conftest import MakeTree, Tree, collect, need_root, need_tool, run_cli, value
from tests.fixtures.sysfsgen import load_node

# ----------------------------------------------------------------------------- helpers

CPUIDLE = "sys/devices/system/cpu/cpuidle"
UNKNOWN = "cephnode_tuning_check_unknown"


def small_node(**drop: bool) -> dict:
    """The detuned reference node cut down to 6 CPUs, 2 NVMe drives and 4 vectors per
    port (a tenth of the inodes); ``drop`` removes hardware: cpuidle, nvme, net, iommu."""
    desc = load_node("epyc9454p-detuned")
    desc["cpus"].update(cores_per_socket=6, threads_per_core=1)
    desc["nvme"]["controllers"] = desc["nvme"]["controllers"][:2]
    desc["block"]["devices"] = {}
    del desc["pci"]  # nvme7's trained-down link: that controller is gone
    desc["osds"]["daemons"] = desc["osds"]["daemons"][:2]
    desc["irqs"]["net_vectors"] = 4
    if drop.get("cpuidle"):
        del desc["cpuidle"]
    if drop.get("nvme"):
        for key in ("nvme", "block", "osds"):
            del desc[key]
    if drop.get("net"):
        del desc["net"]
    if drop.get("iommu"):
        desc["iommu"] = {"units": {}}  # IOMMU off: an empty class/iommu, no groups
    return desc


def empty(directory: Path) -> None:
    """What a tmpfs mask shows: the directory is there, empty."""
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def escape(path: str) -> str:
    """show_mountinfo()'s escapes (fs/proc_namespace.c: seq_path with " \\t\\n\\\\")."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def mountinfo_line(mount_id: int, parent: int, point: str, fstype: str, root: str = "/") -> str:
    # Documentation/filesystems/proc.rst 3.5: ID, parent, major:minor, root, mount point,
    # options, optional fields, "-", type, source, super options.
    return (
        f"{mount_id} {parent} 0:{mount_id} {escape(root)} {escape(point)} ro,nosuid,nodev "
        f"shared:{mount_id} - {fstype} {fstype} ro,size=0k"
    )


ROOT_LINE = "1 0 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard"


def write_mountinfo(tree: Tree, masked: list[str]) -> Path:
    """A mountinfo naming an ext4 root and a tmpfs over each tree-relative path."""
    lines = [ROOT_LINE]
    for i, rel in enumerate(masked):
        point = os.path.realpath(tree.root / rel)
        lines.append(mountinfo_line(100 + i, 1, point, "tmpfs"))
    path = tree.root / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def mask(tree: Tree, *rels: str) -> list[str]:
    """Mask tree-relative directories as a container runtime would (emptied, and a
    tmpfs over each in a mountinfo); the flags to run the exporter with."""
    for rel in rels:
        empty(tree.root / rel)
    return [*tree.flags, f"--path.mountinfo={write_mountinfo(tree, list(rels))}"]


def plain(tree: Tree) -> list[str]:
    """The flags for a tree with no mount over it (a mountinfo of the root alone)."""
    return [*tree.flags, f"--path.mountinfo={write_mountinfo(tree, [])}"]


def results(flags: list[str], check: str) -> list[Result]:
    collection = collect(flags)
    found = [r for r in collection.results if r.check == check]
    for r in found:  # the metric says the same as the report
        expected = 1 if r.status == "unknown" else None
        assert value(collection, UNKNOWN, check=check, subject=r.subject) == expected, r
    return found


def only(flags: list[str], check: str) -> Result:
    (result,) = results(flags, check)
    return result


def hidden_by_tmpfs(tree: Tree, rel: str) -> str:
    return f"{tree.root / rel} is hidden: a tmpfs is mounted over it (container mask)"


# ----------------------------------------------------------------------------- parsing


def test_a_mountinfo_line_is_parsed_with_escapes_and_optional_fields() -> None:
    line = (
        r"36 35 98:0 /mnt\0401 /host\040sys/class rw,noatime shared:1 master:2 - tmpfs "
        r"tmp\040fs rw,size=0k"
    )
    m = parse_mount(line)
    assert m is not None
    assert (m.mount_id, m.parent_id, m.root, m.mount_point, m.fstype) == (
        36,
        35,
        "/mnt 1",
        "/host sys/class",
        "tmpfs",
    )
    # no optional fields at all: the separator is the 7th field
    m = parse_mount("22 27 0:21 / /proc rw,relatime - proc proc rw")
    assert m is not None and m.fstype == "proc"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "garbage",
        "22 27 0:21 / /proc rw,relatime proc proc rw",  # no separator
        "22 27 0:21 / /proc rw,relatime -",  # no type
        "x 27 0:21 / /proc rw - proc proc rw",  # not an ID
        "22 27 0:21 / proc rw - proc proc rw",  # a relative mount point
        "٢٢ 27 0:21 / /proc rw - proc proc rw",  # Unicode digits
    ],
)
def test_a_bad_line_is_none(line: str) -> None:
    assert parse_mount(line) is None


def test_bad_lines_are_skipped_and_counted() -> None:
    text = f"{ROOT_LINE}\nnot a mount\n\x00\xff\n22 1 0:21 / /proc rw - proc proc rw\n"
    found, bad = parse_mountinfo(text)
    assert [m.mount_point for m in found] == ["/", "/proc"]
    assert bad == 2


# ----------------------------------------------------------------------------- the rule

SYS = [
    parse_mount(ROOT_LINE),
    parse_mount("23 1 0:22 / /sys rw - sysfs sysfs rw"),
    parse_mount("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw"),
    parse_mount("40 23 0:40 / /sys/firmware ro - tmpfs tmpfs ro,size=0k"),
    parse_mount(
        "41 23 0:6 /null /sys/devices/system/cpu/cpu0/cpuidle/state2/disable rw - "
        "devtmpfs devtmpfs rw"
    ),
]


def rule(table: list, path: str, root: str = "/sys") -> str | None:
    return judge([m for m in table if m is not None], root, path, "sysfs", path)


def test_a_tmpfs_over_a_path_or_above_it_hides_it() -> None:
    assert rule(SYS, "/sys/firmware") == (
        "/sys/firmware is hidden: a tmpfs is mounted over it (container mask)"
    )
    assert rule(SYS, "/sys/firmware/dmi/tables") == (
        "/sys/firmware/dmi/tables is hidden: a tmpfs is mounted over /sys/firmware (container mask)"
    )
    file = "/sys/devices/system/cpu/cpu0/cpuidle/state2/disable"
    assert (
        rule(SYS, file)
        == f"{file} is hidden: a bind mount of /dev/null is mounted over it (container mask)"
    )


def test_the_kernel_s_own_tree_and_its_neighbours_are_not_hidden() -> None:
    assert rule(SYS, "/sys/class/nvme") is None
    assert rule(SYS, "/sys/devices/system/cpu/cpuidle") is None
    assert rule(SYS, "/sys/firmwarex") is None  # a sibling that shares a prefix


def test_a_sysfs_mounted_over_a_mask_shows_the_kernel_again() -> None:
    over = [*SYS, parse_mount("50 40 0:22 /firmware /sys/firmware ro - sysfs sysfs ro")]
    assert rule(over, "/sys/firmware/efi") is None
    deeper = [*SYS, parse_mount("51 40 0:22 /firmware/acpi /sys/firmware/acpi ro - sysfs sysfs ro")]
    assert rule(deeper, "/sys/firmware/acpi/tables") is None
    assert rule(deeper, "/sys/firmware/efi") is not None


def test_a_partial_bind_hides_what_it_leaves_out() -> None:
    table = [
        parse_mount(ROOT_LINE),
        parse_mount("60 1 0:50 / /host rw - overlay overlay rw"),
        parse_mount(
            "61 60 0:22 /devices/system/cpu /host/sys/devices/system/cpu ro - sysfs sysfs ro"
        ),
        parse_mount("62 60 0:22 /class/net /host/sys/class/net ro - sysfs sysfs ro"),
    ]
    why = rule(table, "/host/sys/class/nvme", root="/host/sys")
    assert why == (
        "/host/sys/class/nvme is hidden: only parts of the host's sysfs are mounted under "
        "/host/sys (/host/sys/class/net, /host/sys/devices/system/cpu), and none of them "
        "covers it (partial bind)"
    )
    assert rule(table, "/host/sys/devices/system/cpu/cpuidle", root="/host/sys") is None


def test_a_plain_directory_tree_tells_nothing() -> None:
    """A fixture tree or a copy: no sysfs at or below its root, so nothing is hidden."""
    table = [parse_mount(ROOT_LINE), parse_mount("70 1 0:30 / /tmp rw - tmpfs tmpfs rw")]
    assert rule(table, "/tmp/tree/sys/class/nvme", root="/tmp/tree/sys") is None


# ----------------------------------------------------------------------------- the table


def test_an_unreadable_mountinfo_means_cannot_tell(tmp_path: Path) -> None:
    table = MountTable(str(tmp_path / "nonexistent"))
    assert table.hidden(str(tmp_path), ("class", "nvme"), "sysfs") is None
    assert table.mounts() is None
    assert table.error is not None and "nonexistent" in table.error
    os.mkfifo(tmp_path / "fifo")  # refused without blocking
    table = MountTable(str(tmp_path / "fifo"))
    assert table.hidden(str(tmp_path), ("class",), "sysfs") is None
    assert table.error is not None and "not a regular file" in table.error


def test_the_table_is_read_once_and_again_when_old(tmp_path: Path) -> None:
    now = [0.0]
    info = tmp_path / "mountinfo"
    sys_dir = tmp_path / "sys"
    (sys_dir / "class" / "nvme").mkdir(parents=True)
    info.write_text(ROOT_LINE + "\n")
    table = MountTable(str(info), clock=lambda: now[0])
    for _ in range(3):
        assert table.hidden(str(sys_dir), ("class", "nvme"), "sysfs") is None
    assert table.reads == 1
    info.write_text(ROOT_LINE + "\n" + mountinfo_line(9, 1, str(sys_dir / "class"), "tmpfs") + "\n")
    now[0] = mounts.MAX_AGE_SECONDS - 1  # a file cannot say it changed: kept until old
    assert table.hidden(str(sys_dir), ("class", "nvme"), "sysfs") is None
    now[0] = mounts.MAX_AGE_SECONDS + 1
    assert table.hidden(str(sys_dir), ("class", "nvme"), "sysfs") == (
        f"{sys_dir}/class/nvme is hidden: a tmpfs is mounted over {sys_dir}/class (container mask)"
    )
    assert table.reads == 2


def test_the_table_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "mountinfo"
    lines = [ROOT_LINE] + [mountinfo_line(10 + i, 1, f"/mnt/{i}", "tmpfs") for i in range(200)]
    info.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(mounts, "MAX_BYTES", 4096)
    table = MountTable(str(info))
    found = table.mounts()
    assert found is not None and 10 < len(found) < 100
    assert not table.complete and table.bad_lines == 0  # whole lines only


def test_the_exporter_s_own_table_is_read(tmp_path: Path) -> None:
    table = MountTable()
    found = table.mounts()
    assert found is not None and any(m.mount_point == "/" for m in found)
    assert table.hidden(str(tmp_path), ("sys",), "sysfs") is None
    table.close()


# ----------------------------------------------------------------------------- the checks


def test_hidden_cpuidle_is_unknown_and_absent_cpuidle_skips(make_tree: MakeTree) -> None:
    tree = make_tree(small_node())
    r = only(mask(tree, CPUIDLE), "cpu.cstates")
    assert (r.status, r.observed) == ("unknown", hidden_by_tmpfs(tree, CPUIDLE))

    # No mountinfo entry, but the CPUs' own cpuidle directories give the mask away.
    tree = make_tree(small_node())
    shutil.rmtree(tree.root / CPUIDLE)
    r = only(plain(tree), "cpu.cstates")
    assert r.status == "unknown"
    assert r.observed == (
        f"{tree.root / CPUIDLE} is hidden: missing, but "
        f"{tree.sys}/devices/system/cpu/cpu0/cpuidle exists (a mask or a partial sysfs, "
        "not a kernel without cpuidle)"
    )

    absent = make_tree(small_node(cpuidle=True))
    r = only(plain(absent), "cpu.cstates")
    assert (r.status, r.observed) == ("skip", "no idle states exposed (no cpuidle framework)")


def test_hidden_nvme_class_is_unknown_for_every_nvme_check(make_tree: MakeTree) -> None:
    tree = make_tree(small_node())
    flags = mask(tree, "sys/class/nvme")
    collection = collect(flags)
    why = hidden_by_tmpfs(tree, "sys/class/nvme")
    by = {(r.check, r.subject): r for r in collection.results}
    for check in ("nvme.pcie_link", "iommu.nvme", "irq.affinity"):
        r = by[(check, "")]
        assert r.status == "unknown", r
        assert why in r.observed
        assert value(collection, UNKNOWN, check=check, subject="") == 1
    assert by[("irq.affinity", "")].observed == f"interrupts not judged: {why}"
    # The ports are still judged beside it; the namespaces, in class/block, too.
    assert by[("irq.affinity", "ens1f0np0")].status == "fail"
    assert by[("nvme.scheduler", "nvme0n1")].status == "pass"


def test_an_empty_nvme_class_beside_nvme_disks_is_hidden(make_tree: MakeTree) -> None:
    """No mount in the table (a partial tree, a mask the table misses): the NVMe disks in
    class/block exist only below a controller, so the empty class/nvme is hidden."""
    tree = make_tree(small_node())
    empty(tree.sys / "class/nvme")
    for check in ("nvme.pcie_link", "iommu.nvme"):
        r = only(plain(tree), check)
        assert r.status == "unknown"
        assert r.observed == (
            f"{tree.sys}/class/nvme is hidden: it lists no controller, but NVMe disks "
            "exist (nvme0n1, nvme1n1); a mask or a partial sysfs, not a node without NVMe"
        )


def test_hidden_block_class_is_unknown_for_the_scheduler(make_tree: MakeTree) -> None:
    tree = make_tree(small_node())
    r = only(mask(tree, "sys/class/block"), "nvme.scheduler")
    assert (r.status, r.observed) == ("unknown", hidden_by_tmpfs(tree, "sys/class/block"))

    tree = make_tree(small_node())
    empty(tree.sys / "class/block")  # the controllers still hold their namespaces
    r = only(plain(tree), "nvme.scheduler")
    assert r.status == "unknown"
    assert r.observed.startswith(f"{tree.sys}/class/block is hidden: it lists no NVMe disk, but ")
    assert r.observed.endswith("/nvme/nvme0 has nvme0n1; a mask or a partial sysfs")


def test_a_node_without_nvme_still_skips(make_tree: MakeTree) -> None:
    tree = make_tree(small_node(nvme=True, net=True))
    flags = plain(tree)
    collection = collect(flags)
    by = {(r.check, r.subject): r for r in collection.results}
    assert by[("nvme.pcie_link", "")].status == "skip"
    assert by[("nvme.pcie_link", "")].observed == "no NVMe controllers on this node"
    assert by[("nvme.scheduler", "")].observed == "no NVMe namespaces on this node"
    assert by[("nvme.scheduler", "")].status == "skip"
    assert by[("iommu.nvme", "")].status == "skip"
    assert by[("irq.affinity", "")].status == "skip"
    assert by[("irq.affinity", "")].observed == "no NVMe controllers or network ports on PCI"
    assert not [r for r in collection.results if r.status == "unknown" and "hidden" in r.observed]


def test_hidden_iommu_class_is_unknown_not_iommu_off(make_tree: MakeTree) -> None:
    """With the IOMMU off the controllers have no group, and an empty class/iommu passes
    them ("no IOMMU active"); a masked one must not."""
    absent = make_tree(small_node(iommu=True))
    for r in results(plain(absent), "iommu.nvme"):
        assert (r.status, r.observed) == ("pass", "no IOMMU active")

    tree = make_tree(small_node(iommu=True))
    found = results(mask(tree, "sys/class/iommu"), "iommu.nvme")
    assert [r.subject for r in found] == ["nvme0", "nvme1"]
    for r in found:
        assert r.status == "unknown"
        assert r.observed == f"IOMMU state unknown: {hidden_by_tmpfs(tree, 'sys/class/iommu')}"


def test_vfio_noiommu_groups_do_not_make_the_iommu_class_hidden(make_tree: MakeTree) -> None:
    """VFIO's no-IOMMU mode makes groups named vfio-noiommu with no IOMMU at all
    (drivers/vfio/group.c): the empty class/iommu still means off. A group of an IOMMU
    driver (no name) beside it gives the class away as hidden."""
    tree = make_tree(small_node(iommu=True))
    group = tree.sys / "kernel/iommu_groups/7"
    group.mkdir(parents=True)
    (group / "name").write_text("vfio-noiommu\n")
    for r in results(plain(tree), "iommu.nvme"):
        assert (r.status, r.observed) == ("pass", "no IOMMU active")

    (tree.sys / "kernel/iommu_groups/8").mkdir()
    found = results(plain(tree), "iommu.nvme")
    assert found
    for r in found:
        assert r.status == "unknown"
        assert r.observed == (
            f"IOMMU state unknown: {tree.sys}/class/iommu is hidden: it lists no IOMMU unit, "
            f"but IOMMU group 8 exists in {tree.sys}/kernel/iommu_groups; a mask or a partial "
            "sysfs"
        )


def test_hidden_iommu_groups_say_so(make_tree: MakeTree) -> None:
    tree = make_tree(small_node())
    rel = "sys/kernel/iommu_groups"
    for r in results(mask(tree, rel), "iommu.nvme"):
        assert r.status == "unknown"
        assert "is hidden: a tmpfs is mounted over" in r.observed
        assert f"{tree.root / rel}" in r.observed


def test_hidden_proc_irq_is_unknown_not_no_interrupts(make_tree: MakeTree) -> None:
    tree = make_tree(small_node())
    found = results(mask(tree, "proc/irq"), "irq.affinity")
    assert {r.subject for r in found} == {"ens1f0np0", "ens1f1np1", "nvme0", "nvme1"}
    for r in found:
        assert r.status == "unknown"
        assert hidden_by_tmpfs(tree, "proc/irq") in r.observed

    # An empty /proc/irq that nothing is mounted over: as before, no handler requested.
    tree = make_tree(small_node())
    empty(tree.proc / "irq")
    for r in results(plain(tree), "irq.affinity"):
        assert (r.status, r.observed) == ("skip", "no interrupts requested (device unused or down)")


# ----------------------------------------------------------------------------- real mounts


Mounter = Callable[[Path], None]


@pytest.fixture
def tmpfs_over() -> Iterator[Mounter]:
    """Mount an empty read-only tmpfs over directories, as runc's maskPath does; every
    one is unmounted at teardown, the last first."""
    need_root("mounts a tmpfs over fixture directories")
    need_tool("mount", "mount")
    done: list[Path] = []

    def mount(path: Path) -> None:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=4k,mode=755", "cephnode-mask", str(path)],
            check=True,
            capture_output=True,
        )
        done.append(path)

    yield mount
    for path in reversed(done):
        if subprocess.run(["umount", str(path)], check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], check=False)


def test_real_masks_make_every_check_unknown(make_tree: MakeTree, tmpfs_over: Mounter) -> None:
    tree = make_tree(small_node())
    rels = (CPUIDLE, "sys/class/nvme", "sys/class/block", "proc/irq")
    for rel in rels:
        tmpfs_over(tree.root / rel)
    # The real check command, reading its own /proc/self/mountinfo.
    proc = run_cli("check", "--format", "json", *tree.flags)
    assert proc.returncode == 1, proc.stderr
    by = {(r["check"], r["subject"]): r for r in json.loads(proc.stdout)["results"]}
    expected = {
        ("cpu.cstates", ""): CPUIDLE,
        ("nvme.pcie_link", ""): "sys/class/nvme",
        ("iommu.nvme", ""): "sys/class/nvme",
        ("nvme.scheduler", ""): "sys/class/block",
        ("irq.affinity", "ens1f0np0"): "proc/irq",
    }
    for key, rel in expected.items():
        assert by[key]["status"] == "unknown", by[key]
        assert hidden_by_tmpfs(tree, rel) in by[key]["observed"]
    assert by[("irq.affinity", "")]["observed"] == (
        f"interrupts not judged: {hidden_by_tmpfs(tree, 'sys/class/nvme')}"
    )
    assert not [r for r in by.values() if r["status"] == "skip" and "no NVMe" in r["observed"]]
    # The metrics say the same.
    collection = collect(tree.flags)
    for check, subject in expected:
        assert value(collection, UNKNOWN, check=check, subject=subject) == 1


def test_real_mask_of_the_iommu_class(make_tree: MakeTree, tmpfs_over: Mounter) -> None:
    tree = make_tree(small_node(iommu=True))
    tmpfs_over(tree.sys / "class/iommu")
    found = [r for r in collect(tree.flags).results if r.check == "iommu.nvme"]
    assert [r.status for r in found] == ["unknown", "unknown"]
    for r in found:
        assert r.observed == f"IOMMU state unknown: {hidden_by_tmpfs(tree, 'sys/class/iommu')}"


def test_an_unmasked_tree_still_skips_absent_hardware(
    make_tree: MakeTree, tmpfs_over: Mounter
) -> None:
    """A real mount elsewhere in the tree changes nothing for the paths it does not cover."""
    tree = make_tree(small_node(cpuidle=True, nvme=True, net=True))
    (tree.sys / "firmware").mkdir(exist_ok=True)  # Docker's default mask
    tmpfs_over(tree.sys / "firmware")
    by = {(r.check, r.subject): r for r in collect(tree.flags).results}
    for check in ("cpu.cstates", "nvme.pcie_link", "nvme.scheduler", "iommu.nvme", "irq.affinity"):
        assert by[(check, "")].status == "skip", by[(check, "")]
