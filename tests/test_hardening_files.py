"""Bad files where the exporter reads: FIFOs and devices instead of attributes, CPU lists
beyond the kernel's possible set, impossible cpuidle counters, and configuration files
that are not small regular files (docs/limits.md)."""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection, Outcome
from cephnode_exporter.hostfs import (
    NR_CPUS_MAX,
    AttrFiles,
    HostFS,
    ParseError,
    ReadErrors,
    parse_cpulist,
    read_small_int,
    read_text,
)
from cephnode_exporter.hostfs.cpu import online_cpus
from cephnode_exporter.hostfs.cpuidle import CPUIdleReader
from cephnode_exporter.hostfs.process import parse_stat, parse_status, read_allocator
from cephnode_exporter.safeio import MAX_CONFIG_BYTES, ConfigFileError, read_config_text

from tests.conftest import MakeTree, Tree, collect, run_cli, value
from tests.fixtures.sysfsgen import load_node

CPU = "sys/devices/system/cpu"
ONLY_CPU = (
    "--no-collector.iommu",
    "--no-collector.nvme",
    "--no-collector.net",
    "--no-collector.osd",
    "--no-collector.kernel",
)


def cpu_node(node: str = "epyc9454p-detuned", cores: int = 4) -> dict[str, Any]:
    """A reference node cut to a few CPUs and its CPU and kernel sections (fast to build)."""
    desc = copy.deepcopy(load_node(node))
    desc["cpus"] = {"cores_per_socket": cores}
    for section in ("nvme", "block", "pci", "osds", "net", "iommu"):
        desc.pop(section, None)
    return desc


def outcome(result: Collection, name: str) -> Outcome:
    (found,) = [o for o in result.outcomes if o.name == name]
    return found


def finishes(fn: Callable[[], object], timeout: float = 5.0) -> object:
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) when it blocks."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"blocked for more than {timeout} s"
    return box.get("error", box.get("value"))


# --- a FIFO (or a device) where an attribute should be ---------------------------------


def test_attribute_readers_refuse_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "usage"
    os.mkfifo(fifo)
    files = AttrFiles(budget=4)
    for read in (
        lambda: read_text(str(fifo)),
        lambda: read_small_int(str(fifo)),
        lambda: files.read_int(str(fifo)),
    ):
        error = finishes(read)
        assert isinstance(error, OSError), error
        assert "not a regular file (FIFO)" in str(error) and str(fifo) in str(error)
    assert len(files) == 0  # nothing kept open for a refused file
    # A device is refused too: /dev/zero would read as 64 KiB of NULs.
    error = finishes(lambda: read_text("/dev/zero"))
    assert isinstance(error, OSError) and "character device" in str(error)


def test_a_fifo_counter_is_one_read_error_not_a_stalled_scrape(make_tree: MakeTree) -> None:
    tree = make_tree(
        cpu_node(),
        faults={
            f"{CPU}/cpu3/cpuidle/state2/time": "fifo",
            f"{CPU}/cpufreq/policy2/scaling_governor": "fifo",
        },
    )
    started = time.monotonic()
    result = finishes(lambda: collect([*tree.flags, *ONLY_CPU]), timeout=20)
    assert isinstance(result, Collection), result
    assert time.monotonic() - started < 4  # the collector timeout (5 s) was never reached
    for name in ("cpuidle", "cpufreq"):
        assert value(result, "cephnode_scrape_collector_success", collector=name) == 1
        assert value(result, "cephnode_scrape_collector_read_errors", collector=name) == 1
        assert "not a regular file (FIFO)" in outcome(result, name).facts.errors.items[0]
    # The C2 time sum would be partial and is left out; the other series stay.
    assert value(result, "cephnode_cpu_idle_state_time_seconds_total", state="C2") is None
    assert value(result, "cephnode_cpu_idle_state_entries_total", state="C2") is not None


def test_a_fifo_as_the_cpu_list_fails_the_collector_at_once(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node(), faults={f"{CPU}/online": "fifo"})
    result = finishes(lambda: collect([*tree.flags, *ONLY_CPU]), timeout=20)
    assert isinstance(result, Collection), result
    failed = outcome(result, "cpuidle")
    assert not failed.success and failed.duration < 1
    assert "not a regular file (FIFO)" in (failed.error or "")


# --- CPU lists bounded by the possible set ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "message"),
    [
        ("0-3,2-5", 8, "ascending"),  # overlap
        ("4-7,0-3", 8, "ascending"),  # reordered
        ("0-3,3", 8, "ascending"),
        ("0-8", 8, "beyond CPU 7"),
        (f"0-{NR_CPUS_MAX}", NR_CPUS_MAX, f"beyond CPU {NR_CPUS_MAX - 1}"),
    ],
)
def test_parse_cpulist_refuses_lists_no_kernel_writes(text: str, limit: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cpulist(text, limit)


def test_a_repeated_huge_range_costs_nothing() -> None:
    text = ",".join(["0-65535"] * 57)  # 400 bytes that once expanded to 3.7 million CPUs
    tracemalloc.start()
    try:
        with pytest.raises(ValueError):
            parse_cpulist(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_online_beyond_the_possible_set_fails_fast(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node())
    (tree.root / CPU / "online").write_text(",".join(["0-65535"] * 57) + "\n")
    started = time.monotonic()
    result = collect([*tree.flags, *ONLY_CPU])
    assert time.monotonic() - started < 4
    for name in ("cpuidle", "cpufreq"):
        failed = outcome(result, name)
        assert not failed.success
        assert "beyond CPU 3" in (failed.error or ""), failed.error  # possible is 0-3


def test_online_must_be_inside_a_sparse_possible_set(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node())
    (tree.root / CPU / "possible").write_text("0-1,3\n")
    (tree.root / CPU / "online").write_text("0-2\n")
    with pytest.raises(ParseError, match="CPU 2 is not in the possible set"):
        online_cpus(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs)))


def test_without_a_usable_possible_set_the_bound_is_nr_cpus(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node())
    fs = HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))
    (tree.root / CPU / "possible").write_text("garbage\n")
    errors = ReadErrors()
    assert online_cpus(fs, errors) == [0, 1, 2, 3]
    assert len(errors) == 1 and "possible" in errors.items[0]  # counted, not silent
    (tree.root / CPU / "possible").unlink()  # absent: no error, the absolute bound
    (tree.root / CPU / "online").write_text(f"0-{NR_CPUS_MAX}\n")
    with pytest.raises(ParseError, match=f"beyond CPU {NR_CPUS_MAX - 1}"):
        online_cpus(fs, errors)


# --- cpuidle counters that no kernel writes ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [("-5", "out of the u64 range: -5"), (str(2**64), "out of the u64 range")],
)
def test_an_impossible_cpuidle_counter_is_a_read_error(
    make_tree: MakeTree, text: str, message: str
) -> None:
    tree = make_tree(cpu_node(), faults={})
    (tree.root / CPU / "cpu1/cpuidle/state2/usage").write_text(f"{text}\n")
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 1
    errors = outcome(result, "cpuidle").facts.errors.items
    assert message in errors[0] and "cpu1/cpuidle/state2/usage" in errors[0]
    assert value(result, "cephnode_cpu_idle_state_entries_total", state="C2") is None
    assert value(result, "cephnode_cpu_idle_state_entries_total", state="C1") is not None


def test_a_falling_cpuidle_counter_is_a_read_error_and_is_logged(
    make_tree: MakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    tree = make_tree(cpu_node())
    usage = tree.root / CPU / "cpu2/cpuidle/state1/usage"
    scraper = build_scraper(parse_args(["dump", *tree.flags, *ONLY_CPU]))
    caplog.set_level(logging.WARNING, logger="cephnode_exporter")
    try:
        first = scraper.collect(10.0)
        assert value(first, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 0
        before = value(first, "cephnode_cpu_idle_state_entries_total", state="C1")
        assert before is not None
        usage.write_text(f"{int(usage.read_text()) - 10}\n")
        second = scraper.collect(10.0)
        assert value(second, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 1
        assert "counter fell from" in outcome(second, "cpuidle").facts.errors.items[0]
        assert value(second, "cephnode_cpu_idle_state_entries_total", state="C1") is None
        [logged] = [
            r for r in caplog.records if r.getMessage() == "collector skipped unreadable items"
        ]
        assert "cpu2/cpuidle/state1/usage" in str(logged.kv["first"])  # type: ignore[attr-defined]
        # The lower value is the new baseline: the next scrape is clean again.
        third = scraper.collect(10.0)
        assert value(third, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 0
        # A hotplug re-registers the CPUs' idle devices, which zeroes the counters: no error.
        (tree.root / CPU / "online").write_text("0-2\n")
        usage.write_text("1\n")
        fourth = scraper.collect(10.0)
        assert value(fourth, "cephnode_scrape_collector_read_errors", collector="cpuidle") == 0
    finally:
        scraper.close()


def test_the_reader_reports_a_fall_per_state(make_tree: MakeTree) -> None:
    tree = make_tree(cpu_node())
    reader = CPUIdleReader(HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs)))
    time_file = tree.root / CPU / "cpu0/cpuidle/state2/time"
    assert reader.read().cpus[0][2].time_us == int(time_file.read_text())
    time_file.write_text("0\n")
    idle = reader.read()
    assert idle.cpus[0][2].time_us is None
    assert idle.cpus[0][2].usage is not None  # the state's other counters stay
    assert len(idle.errors) == 1


# --- configuration files ----------------------------------------------------------------


def test_read_config_text_bounds(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigFileError, match="larger than the limit"):
        read_config_text(str(big), "profile")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    error = finishes(lambda: read_config_text(str(fifo), "profile"))
    assert isinstance(error, ConfigFileError) and "not a regular file (FIFO)" in str(error)
    with pytest.raises(ConfigFileError, match="not UTF-8"):
        (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
        read_config_text(str(tmp_path / "latin1.yaml"), "profile")
    with pytest.raises(ConfigFileError, match="directory"):
        read_config_text(str(tmp_path), "profile")
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: site\n")
    assert read_config_text(str(ok), "profile") == "name: site\n"


def _profile_files(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Profile paths that are not a small regular file, and the text the error must say."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    # Valid YAML past 1 MiB: a profile cut at the limit would still parse (and lose the
    # second check's settings without a word).
    padded = tmp_path / "padded.yaml"
    padded.write_text("checks:\n  cpu.cstates: {severity: warn}\n" + "#\n" * MAX_CONFIG_BYTES)
    return {
        "fifo": (str(fifo), "not a regular file (FIFO)"),
        "dev-zero": ("/dev/zero", "not a regular file (character device)"),
        "too-large": (str(padded), "larger than the limit of 1048576"),
    }


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-large"])
@pytest.mark.parametrize("command", ["check", "serve"])
def test_a_profile_that_is_not_a_small_file_exits_2_with_one_line(
    tmp_path: Path, node_trees: dict[str, Tree], kind: str, command: str
) -> None:
    path, message = _profile_files(tmp_path)[kind]
    extra = ["--web.listen-address=127.0.0.1:0"] if command == "serve" else []
    proc = run_cli(
        command, *node_trees["epyc9454p-tuned"].flags, *extra, f"--profile={path}", timeout=20
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "invalid profile" in lines[0] and message in lines[0] and path in lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-large"])
def test_a_web_config_that_is_not_a_small_file_exits_2_with_one_line(
    tmp_path: Path, node_trees: dict[str, Tree], kind: str
) -> None:
    # The web config is read at start-up like the profile: a FIFO used to hang it and
    # /dev/zero to grow without bound.
    path, message = _profile_files(tmp_path)[kind]
    proc = run_cli(
        "serve",
        *node_trees["epyc9454p-tuned"].flags,
        "--web.listen-address=127.0.0.1:0",
        f"--web.config.file={path}",
        timeout=20,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "web config" in lines[0] and message in lines[0] and path in lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("depth", [40, 5000])
def test_a_deeply_nested_web_config_exits_2_with_one_line(
    tmp_path: Path, node_trees: dict[str, Tree], depth: int
) -> None:
    config = tmp_path / "web.yml"
    config.write_text("a: " + "[" * depth + "]" * depth + "\n")
    proc = run_cli(
        "serve",
        *node_trees["epyc9454p-tuned"].flags,
        "--web.listen-address=127.0.0.1:0",
        f"--web.config.file={config}",
        timeout=20,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "web config" in lines[0], proc.stderr
    # Our bound, or past a thousand levels libyaml's own: one line either way.
    assert "nested deeper than 32" in lines[0] or "nesting depth" in lines[0], proc.stderr


# --- one CPU's bad file costs one read error, not the collector ---------------------------


@pytest.mark.parametrize(
    ("rel", "collector"),
    [("cpu1/microcode/version", "firmware"), ("cpu1/cpufreq/scaling_cur_freq", "cpuhw")],
)
def test_non_utf8_bytes_in_one_cpus_file_are_one_read_error(
    make_tree: MakeTree, rel: str, collector: str
) -> None:
    """The per-file fallback decoded strictly and caught no UnicodeDecodeError: BIOS,
    product and kernel facts (or every CPU's frequency) were lost for one CPU's file."""
    tree = make_tree(cpu_node())
    (tree.root / CPU / rel).write_bytes(b"\xff\xfe\xc3\x28\x80abc\n")
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_success", collector=collector) == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector=collector) == 1
    assert rel in outcome(result, collector).facts.errors.items[0]


def test_a_fifo_as_cpuinfo_avg_freq_is_a_read_error_not_an_idle_cpu(make_tree: MakeTree) -> None:
    """cpuinfo_avg_freq fails with EINVAL for a CPU without a recent sample; the refusal
    of a FIFO carried EINVAL too and was counted as an idle CPU."""
    desc = cpu_node()
    desc["cpufreq"]["avg_freq"] = True
    tree = make_tree(desc, faults={f"{CPU}/cpufreq/policy1/cpuinfo_avg_freq": "fifo"})
    result = collect([*tree.flags, *ONLY_CPU])
    src = {"source": "cpuinfo_avg_freq"}
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuhw") == 1
    assert "not a regular file (FIFO)" in outcome(result, "cpuhw").facts.errors.items[0]
    assert value(result, "cephnode_cpu_achieved_frequency_cpus", state="idle", **src) == 0


@pytest.mark.parametrize("text", ["\u0660", "4_0_0"])
def test_a_cstate_latency_no_kernel_prints_is_unknown_not_a_pass(
    make_tree: MakeTree, text: str
) -> None:
    """The detuned node has C2 enabled (fail); a C2 exit latency int() reads as 0 or 400
    made it pass ("no deep state enabled") without a read error."""
    tree = make_tree(cpu_node())
    for latency in (tree.root / CPU).glob("cpu[0-9]*/cpuidle/state2/latency"):
        latency.write_text(f"{text}\n")
    result = collect([*tree.flags, *ONLY_CPU])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuidle") >= 1
    proc = run_cli("check", "--format", "json", *tree.flags, *ONLY_CPU)
    (cstates,) = [r for r in json.loads(proc.stdout)["results"] if r["check"] == "cpu.cstates"]
    assert cstates["status"] != "pass", cstates


# --- /proc files opened with open_regular --------------------------------------------------


def test_read_allocator_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    """/proc/<pid>/maps was opened with open(), which blocks on a FIFO until a writer
    comes; open_regular refuses it and names it."""
    (tmp_path / "42").mkdir()
    os.mkfifo(tmp_path / "42" / "maps")
    error = finishes(lambda: read_allocator(HostFS(procfs=str(tmp_path)), 42))
    assert isinstance(error, OSError) and "not a regular file (FIFO)" in str(error), error


def test_process_counts_no_kernel_prints_are_parse_errors() -> None:
    """isdigit() takes "²" (int() then raises ValueError, uncaught) and 5000 digits."""
    fields = ["S"] + ["0"] * 50
    for bad in ("\u00b2", "9" * 5000, "\u0663"):
        fields[11] = bad  # utime, field 14
        with pytest.raises(ParseError, match="field 14"):
            parse_stat("1 (ceph-osd) " + " ".join(fields))
        status = f"Name:\tx\nThreads:\t{bad}\nCpus_allowed_list:\t0-3\n"
        status += "voluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t2\n"
        with pytest.raises(ParseError, match="Threads"):
            parse_status(status)
