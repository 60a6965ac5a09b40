"""Parsing-layer tests: pure parsers on strings, readers on generated trees."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cephnode_exporter.hostfs import (
    AttrFiles,
    HostFS,
    NotRegularFileError,
    ParseError,
    batch,
    parse_cpulist,
    read_int,
    read_small_int,
    read_text,
)
from cephnode_exporter.hostfs.cmdline import parse_cmdline
from cephnode_exporter.hostfs.cpufreq import read_cpufreq
from cephnode_exporter.hostfs.cpuidle import CPUIdleReader
from cephnode_exporter.hostfs.names import natural_key
from cephnode_exporter.hostfs.pmqos import read_cpu_latency_limit_us

from tests.conftest import MakeTree, Tree, need_root, need_tool

# --- pure parsers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("0", [0]),
        ("", []),
        ("\n", []),
        ("0-95\n", list(range(96))),
    ],
)
def test_parse_cpulist(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "1,,2", "0-9999999", "-"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="cpulist"):
        parse_cpulist(text)


def test_parse_cmdline_quotes_flags_and_init_args() -> None:
    params = parse_cmdline(
        "BOOT_IMAGE=/vmlinuz-5.15.0-91-generic root=UUID=ab ro quiet splash "
        'dyndbg="file x.c +p" processor.max-cstate=1 idle=poll iommu=pt -- single iommu=off'
    )
    assert params["BOOT_IMAGE"] == "/vmlinuz-5.15.0-91-generic"
    assert params["ro"] == ""
    assert params["dyndbg"] == "file x.c +p"
    # '-' and '_' are the same in kernel parameter names
    assert params["processor.max_cstate"] == "1"
    assert params["idle"] == "poll"
    # after "--" the words belong to init
    assert params["iommu"] == "pt"
    assert "single" not in params


def test_parse_cmdline_last_wins_and_empty() -> None:
    assert parse_cmdline("a=1 a=2")["a"] == "2"
    assert parse_cmdline("") == {}
    assert parse_cmdline("   \n") == {}


def test_read_cmdline_follows_the_file_and_hands_out_copies(tmp_path: Path) -> None:
    """read_cmdline keeps the last parse: a changed file is parsed again, and a caller
    changing its dict changes nobody else's."""
    from cephnode_exporter.hostfs.cmdline import read_cmdline

    (tmp_path / "cmdline").write_text("iommu=pt quiet\n")
    fs = HostFS(procfs=str(tmp_path))
    first = read_cmdline(fs)
    assert first == {"iommu": "pt", "quiet": ""}
    first["iommu"] = "changed by a caller"
    assert read_cmdline(fs) == {"iommu": "pt", "quiet": ""}
    (tmp_path / "cmdline").write_text("intel_iommu=on iommu=nopt\n")
    assert read_cmdline(fs) == {"intel_iommu": "on", "iommu": "nopt"}


# --- readers on files ---------------------------------------------------------------


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "garbage").write_text("abc\n")
    with pytest.raises(ParseError, match="garbage: not an integer"):
        read_int(str(tmp_path / "garbage"))
    with pytest.raises(FileNotFoundError, match="missing"):
        read_text(str(tmp_path / "missing"))
    os.symlink("/proc/self/mem", tmp_path / "eio")
    with pytest.raises(OSError, match="eio") as info:
        read_text(str(tmp_path / "eio"))
    assert info.value.errno == errno.EIO


def test_read_text_bounds_a_huge_file(tmp_path: Path) -> None:
    (tmp_path / "huge").write_bytes(b"1" * (1 << 20))
    with pytest.raises(ParseError, match="larger than"):
        read_text(str(tmp_path / "huge"))


def _fs(tree: Tree) -> HostFS:
    return HostFS(procfs=str(tree.proc), sysfs=str(tree.sys), rootfs=str(tree.rootfs))


def _sum_files(tree: Tree, pattern: str) -> int:
    return sum(int(p.read_text()) for p in tree.sys.glob(pattern))


def test_cpuidle_reader_on_detuned_node(node_trees: dict[str, Tree]) -> None:
    tree = node_trees["epyc9454p-detuned"]
    idle = CPUIdleReader(_fs(tree)).read()
    assert idle.driver == "acpi_idle"
    assert idle.governor == "menu"
    assert len(idle.cpus) == 96
    assert not idle.errors
    names = [s.info.name for s in idle.cpus[0]]
    assert names == ["POLL", "C1", "C2"]
    # The reader's totals agree with a plain glob over the same files.
    c2_time = sum(
        s.time_us for samples in idle.cpus.values() for s in samples if s.info.name == "C2"
    )
    assert c2_time == _sum_files(tree, "devices/system/cpu/cpu*/cpuidle/state2/time")
    assert all(s.disabled is False for samples in idle.cpus.values() for s in samples)


def test_cpuidle_reader_caches_static_attributes(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned")
    reader = CPUIdleReader(_fs(tree))
    first = reader.read()
    # Change a static attribute behind the reader's back: the cache keeps the old one,
    # while counters are read fresh.
    state = tree.sys / "devices/system/cpu/cpu0/cpuidle/state2"
    (state / "latency").write_text("999\n")
    usage = (first.cpus[0][2].usage or 0) + 123  # a counter only grows
    (state / "usage").write_text(f"{usage}\n")
    second = reader.read()
    c2 = second.cpus[0][2]
    assert c2.info.exit_latency_us == first.cpus[0][2].info.exit_latency_us
    assert c2.usage == usage
    # A hotplug (online set changes) rebuilds the cache.
    (tree.sys / "devices/system/cpu/online").write_text("0-94\n")
    third = reader.read()
    assert len(third.cpus) == 95
    assert third.cpus[0][2].info.exit_latency_us == 999


@pytest.mark.parametrize("kind", ["eio", "empty", "garbage", "missing"])
def test_cpuidle_reader_skips_a_bad_counter(make_tree: MakeTree, kind: str) -> None:
    rel = "sys/devices/system/cpu/cpu3/cpuidle/state2/time"
    tree = make_tree("epyc9454p-detuned", faults={rel: kind})
    idle = CPUIdleReader(_fs(tree)).read()
    assert len(idle.cpus) == 96
    assert idle.cpus[3][2].time_us is None
    assert idle.cpus[3][2].usage is not None
    assert len(idle.errors) == 1
    assert "cpu3/cpuidle/state2/time" in idle.errors.items[0]


@pytest.mark.parametrize("kind", ["eio", "empty", "garbage", "missing"])
def test_cpuidle_reader_skips_a_bad_static_file_and_retries(make_tree: MakeTree, kind: str) -> None:
    rel = "sys/devices/system/cpu/cpu5/cpuidle/state1/latency"
    tree = make_tree("epyc9454p-detuned", faults={rel: kind})
    reader = CPUIdleReader(_fs(tree))
    idle = reader.read()
    assert [s.info.name for s in idle.cpus[5]] == ["POLL", "C2"]
    assert idle.errors
    # Repaired: the next read sees the state again (a failed CPU is not cached).
    path = tree.root / rel
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text("1\n")
    again = reader.read()
    assert [s.info.name for s in again.cpus[5]] == ["POLL", "C1", "C2"]
    assert not again.errors


def test_cpuidle_reader_drops_a_cpu_that_vanished_mid_read(make_tree: MakeTree) -> None:
    # "online" still lists cpu7, but its cpuidle directory is gone (hot-unplug race).
    tree = make_tree("epyc9454p-detuned")
    shutil.rmtree(tree.sys / "devices/system/cpu/cpu7/cpuidle")
    idle = CPUIdleReader(_fs(tree)).read()
    assert 7 not in idle.cpus
    assert len(idle.cpus) == 95


def test_cpuidle_reader_follows_a_hotplug(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-detuned")
    reader = CPUIdleReader(_fs(tree))
    assert len(reader.read().cpus) == 96
    shutil.rmtree(tree.sys / "devices/system/cpu/cpu7/cpuidle")
    (tree.sys / "devices/system/cpu/online").write_text("0-6,8-95\n")
    idle = reader.read()
    assert 7 not in idle.cpus and len(idle.cpus) == 95
    assert not idle.errors


def test_attr_files_reread_fresh_values_and_budget(tmp_path: Path) -> None:
    path = tmp_path / "usage"
    path.write_text("1\n")
    files = AttrFiles(budget=1)
    assert files.read_int(str(path)) == 1
    path.write_text("22\n")  # same inode, as sysfs regenerates in place
    assert files.read_int(str(path)) == 22
    assert len(files) == 1
    other = tmp_path / "time"
    other.write_text("5\n")
    assert files.read_int(str(other)) == 5  # over budget: plain open/read/close
    assert len(files) == 1
    files.close_all()
    assert len(files) == 0


def test_attr_files_on_a_removed_sysfs_attribute() -> None:
    """On real sysfs a kept descriptor of a removed attribute fails (ENODEV); AttrFiles
    reports it as FileNotFoundError like a fresh open. A veth pair is a removable device."""
    need_root("creates and deletes a veth interface")
    ip = need_tool("ip", "iproute2")
    name = f"cnx{os.getpid() % 100000}"
    subprocess.run(
        [ip, "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True
    )
    files = AttrFiles(budget=8)
    try:
        mtu = f"/sys/class/net/{name}/mtu"
        assert files.read_int(mtu) == 1500
        subprocess.run([ip, "link", "set", name, "mtu", "9000"], check=True)
        assert files.read_int(mtu) == 9000  # pread at 0 regenerates the value
    finally:
        subprocess.run([ip, "link", "del", name], check=False)
    with pytest.raises(FileNotFoundError, match=name):
        files.read_int(mtu)
    assert len(files) == 0


def test_cpuidle_reader_without_cpuidle(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned")
    shutil.rmtree(tree.sys / "devices/system/cpu/cpuidle")
    idle = CPUIdleReader(_fs(tree)).read()
    assert idle.driver is None
    assert idle.cpus == {}


def test_cpufreq_reader(node_trees: dict[str, Tree]) -> None:
    tuned = read_cpufreq(_fs(node_trees["epyc9454p-tuned"]))
    assert len(tuned.cpus) == 96
    assert {p.governor for p in tuned.cpus.values()} == {"performance"}
    assert {p.driver for p in tuned.cpus.values()} == {"acpi-cpufreq"}
    assert tuned.boost is True
    assert not tuned.errors
    detuned = read_cpufreq(_fs(node_trees["epyc9454p-detuned"]))
    assert "powersave" in {p.governor for p in detuned.cpus.values()}


def test_cpufreq_reader_bad_boost_and_governor(make_tree: MakeTree) -> None:
    tree = make_tree(
        "epyc9454p-tuned",
        faults={
            "sys/devices/system/cpu/cpufreq/boost": "garbage",
            "sys/devices/system/cpu/cpufreq/policy9/scaling_governor": "eio",
        },
    )
    freq = read_cpufreq(_fs(tree))
    assert freq.boost is None
    assert 9 not in freq.cpus
    assert len(freq.cpus) == 95
    assert len(freq.errors) == 2


def test_pm_qos_limit(tmp_path: Path) -> None:
    fs = HostFS(rootfs=str(tmp_path))
    assert read_cpu_latency_limit_us(fs) is None  # absent
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/cpu_dma_latency").write_bytes((20).to_bytes(4, "little", signed=True))
    assert read_cpu_latency_limit_us(fs) == 20
    (tmp_path / "dev/cpu_dma_latency").write_bytes(b"\x01\x02")
    with pytest.raises(ParseError, match="4 bytes"):
        read_cpu_latency_limit_us(fs)


# --- numbers as the kernel prints them ---------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "\u0660",  # ARABIC-INDIC DIGIT ZERO: int() reads 0
        "\u0669\u0660\u0660\u0660",  # 9000
        "\u00b2",  # SUPERSCRIPT TWO: isdigit() but not int()
        "9_000",
        "4_0_0",
        "1" * 21,  # beyond any u64
        "9" * 5000,  # int() raises past 4300 digits
        "0x10",
        "1 2",
        "",
    ],
)
def test_integer_reads_take_only_what_the_kernel_prints(tmp_path: Path, text: str) -> None:
    """int() takes Unicode digits, "_" and any length; the kernel prints ASCII digits
    (lib/vsprintf.c). Anything else is a ParseError (a counted read error), never a
    value: U+0660 as a C-state latency once made a detuned node pass."""
    path = tmp_path / "attr"
    path.write_bytes(text.encode() + b"\n")
    files = AttrFiles(budget=4)
    readers = [read_int, read_small_int, files.read_int] if len(text) < 60 else [read_int]
    for read in readers:
        with pytest.raises(ParseError, match="not an integer"):
            read(str(path))
    files.close_all()


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0\n", 0),
        (" -1\n", -1),
        ("+5", 5),
        (f"{2**64 - 1}\n", 2**64 - 1),
        (f"{-(2**63) + 1}", -(2**63) + 1),
    ],
)
def test_integer_reads_agree_with_the_compiled_parser(
    tmp_path: Path, text: str, number: int
) -> None:
    """The per-file read is the fallback of the batched one (batch.py): both take the
    same texts, so a file does not read differently on the two paths."""
    path = tmp_path / "attr"
    path.write_text(text)
    assert read_int(str(path)) == read_small_int(str(path)) == number
    fd = os.open(path, os.O_RDONLY)
    try:
        assert batch.pread_ints([fd]) == [number]
    finally:
        os.close(fd)


@pytest.mark.parametrize("text", ["\u0660-\u0663", "1_0", "0- 3", "+1", "0-3,\u0665"])
def test_parse_cpulist_refuses_digits_no_kernel_prints(text: str) -> None:
    """%*pbl prints ASCII digits, "-" and ","; int() would take "٣", "1_0" and " 3"."""
    with pytest.raises(ValueError, match="bad cpulist"):
        parse_cpulist(text)


def test_natural_key_counts_only_ascii_digit_runs() -> None:
    """ "eth1²" is a valid interface name; isdigit() took "²" for a number and int()
    raised, failing whatever sorted the names."""
    names = ["nvme10", "eth1\u00b2", "nvme2", "eth\u0663", "eth1"]
    assert sorted(names, key=natural_key) == ["eth1", "eth1\u00b2", "eth\u0663", "nvme2", "nvme10"]


def test_a_refused_file_is_not_the_kernels_einval(tmp_path: Path) -> None:
    """Callers take EINVAL from an attribute as the kernel's answer (no speed, no
    writeback throttling, no sample): a FIFO refused with EINVAL vanished uncounted."""
    fifo = tmp_path / "speed"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file") as caught:
        read_text(str(fifo))
    assert caught.value.errno not in (errno.EINVAL, errno.EAGAIN, errno.EBUSY, errno.ENODATA)
    assert NotRegularFileError(str(fifo), 0o010644).errno == caught.value.errno
