"""The ``firmware``, ``thp`` and ``cpuhw`` collectors: the reference nodes, variants built
from the kernel ABI, broken files, this machine's own files, and the change tracking."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
from cephnode_exporter.hostfs import HostFS, ParseError, ReadErrors
from cephnode_exporter.hostfs.firmware import parse_cpuinfo_microcode, parse_revision
from cephnode_exporter.hostfs.thp import parse_selected

from tests.conftest import MakeTree, Tree, collect, samples, value
from tests.fixtures.sysfsgen import load_node

THP_INFO = "cephnode_transparent_hugepage_info"


def labels_of(collection, name: str) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return [dict(k[1]) for k in samples(collection) if k[0] == name]


def fact_hash(collection, fact: str) -> float | None:  # type: ignore[no-untyped-def]
    return value(collection, "cephnode_tuning_fact_hash", fact=fact)


# ----------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never", "madvise"),
        ("[always] madvise never", "always"),
        ("always defer defer+madvise [madvise] never", "madvise"),
        ("always defer [defer+madvise] madvise never", "defer+madvise"),
        ("always within_size advise [never] deny force", "never"),
    ],
)
def test_thp_selected(text: str, mode: str) -> None:
    assert parse_selected(text, "enabled") == mode


@pytest.mark.parametrize(
    "text", ["", "always madvise never", "[always] [never]", "?garbage@value!", "[Always!]"]
)
def test_thp_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_selected(text, "enabled")


def test_microcode_revision_forms() -> None:
    assert parse_revision("0xa101148\n", "v") == "0xa101148"
    assert parse_revision("0x0A101148", "v") == "0xa101148"
    assert parse_revision("0x00000000", "v") == "0x0"
    for bad in ("a101148", "0x", "0xg1", "12"):
        with pytest.raises(ParseError):
            parse_revision(bad, "v")


def test_cpuinfo_microcode_first_cpu_only() -> None:
    head = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmicrocode\t: 0x1000065\n\nprocessor\t: 1\n"
    assert parse_cpuinfo_microcode(head, "cpuinfo") == "0x1000065"
    assert parse_cpuinfo_microcode("processor\t: 0\n\nmicrocode\t: 0x1\n", "cpuinfo") is None
    with pytest.raises(ParseError):
        parse_cpuinfo_microcode("microcode\t: garbage\n", "cpuinfo")


# ----------------------------------------------------------------------------- reference nodes


def test_detuned_node_firmware_and_facts(node_trees: dict[str, Tree]) -> None:
    result = collect(node_trees["epyc9454p-detuned"].flags)
    assert labels_of(result, "cephnode_bios_info") == [
        {"vendor": "Dell Inc.", "version": "1.3.8", "date": "05/10/2023"}
    ]
    assert labels_of(result, "cephnode_system_info") == [
        {"vendor": "Dell Inc.", "product": "PowerEdge R6615"}
    ]
    assert labels_of(result, "cephnode_cpu_microcode_info") == [
        {"revision": "0xa10113e", "source": "sysfs"}
    ]
    assert labels_of(result, "cephnode_kernel_release_info") == [{"release": "5.15.0-67-generic"}]
    assert labels_of(result, "cephnode_transparent_hugepage_info") == [
        {"enabled": "madvise", "defrag": "madvise"}
    ]
    for fact in ("bios_info", "cpu_microcode_info", "kernel_release_info"):
        assert fact_hash(result, fact) is not None, fact
    assert fact_hash(result, "transparent_hugepage_info") is not None
    assert value(result, "cephnode_scrape_collector_read_errors", collector="firmware") == 0


def test_bios_and_microcode_updates_change_their_own_hashes(make_tree: MakeTree) -> None:
    """What CephNodeTuningChanged reads: a BIOS update changes bios_info's hash and no
    other; a microcode update changes cpu_microcode_info's; the serials never count."""
    before = collect(make_tree("epyc9454p-detuned").flags)
    desc = copy.deepcopy(load_node("epyc9454p-detuned"))
    desc["dmi"].update({"bios_version": "1.6.10", "bios_date": "02/26/2024"})
    desc["dmi"]["product_serial"] = "CHANGED"
    bios = collect(make_tree(desc).flags)
    desc["microcode"] = "0xa101148"
    both = collect(make_tree(desc).flags)
    assert fact_hash(bios, "bios_info") != fact_hash(before, "bios_info")
    assert fact_hash(bios, "cpu_microcode_info") == fact_hash(before, "cpu_microcode_info")
    assert fact_hash(bios, "kernel_release_info") == fact_hash(before, "kernel_release_info")
    assert fact_hash(both, "cpu_microcode_info") != fact_hash(bios, "cpu_microcode_info")
    assert fact_hash(both, "bios_info") == fact_hash(bios, "bios_info")


def test_root_only_dmi_files_are_never_opened(make_tree: MakeTree) -> None:
    """A FIFO in place of the 0400 serial would hang a reader that opened it, and EIO
    would be counted: neither happens, because the collector never touches them."""
    tree = make_tree(
        "epyc9454p-tuned",
        faults={
            "sys/devices/virtual/dmi/id/product_serial": "fifo",
            "sys/devices/virtual/dmi/id/product_uuid": "eio",
        },
    )
    result = collect(tree.flags)
    assert value(result, "cephnode_scrape_collector_read_errors", collector="firmware") == 0
    assert value(result, "cephnode_scrape_collector_success", collector="firmware") == 1
    mode = os.stat(tree.sys / "devices/virtual/dmi/id/board_serial").st_mode & 0o777
    assert mode == 0o400


def test_mixed_microcode_lists_both_revisions(make_tree: MakeTree) -> None:
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    desc["microcode"] = {"0-47": "0xa101148", "48-95": "0xa10113e"}
    result = collect(make_tree(desc).flags)
    assert labels_of(result, "cephnode_cpu_microcode_info") == [
        {"revision": "0xa10113e,0xa101148", "source": "sysfs"}
    ]


def test_microcode_from_cpuinfo_without_the_sysfs_driver(make_tree: MakeTree) -> None:
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    del desc["microcode"]
    block = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmicrocode\t: 0xa101148\n\n"
    desc["files"]["proc/cpuinfo"] = block + block.replace(": 0\n", ": 1\n", 1)
    result = collect(make_tree(desc).flags)
    assert labels_of(result, "cephnode_cpu_microcode_info") == [
        {"revision": "0xa101148", "source": "cpuinfo"}
    ]


@pytest.mark.parametrize(
    ("path", "kind", "family"),
    [
        ("sys/devices/system/cpu/cpu7/microcode/version", "garbage", "cephnode_cpu_microcode_info"),
        ("sys/devices/system/cpu/cpu7/microcode/version", "eio", "cephnode_cpu_microcode_info"),
        ("proc/sys/kernel/osrelease", "empty", "cephnode_kernel_release_info"),
        ("sys/kernel/mm/transparent_hugepage/enabled", "garbage", THP_INFO),
        ("sys/kernel/mm/transparent_hugepage/defrag", "fifo", THP_INFO),
    ],
)  # fmt: skip
def test_broken_files_drop_the_fact_and_count(
    make_tree: MakeTree, path: str, kind: str, family: str
) -> None:
    """A fact read wrong must be missing (no hash: no false change), never half-read."""
    result = collect(make_tree("epyc9454p-tuned", faults={path: kind}).flags)
    assert labels_of(result, family) == []
    collector = "thp" if "hugepage" in family else "firmware"
    assert value(result, "cephnode_scrape_collector_read_errors", collector=collector) == 1
    assert fact_hash(result, family.removeprefix("cephnode_")) is None


def test_garbage_dmi_field_is_empty_and_counted(make_tree: MakeTree) -> None:
    big = "x" * 300 + "\n"
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    desc["files"]["sys/devices/virtual/dmi/id/bios_version"] = big
    result = collect(make_tree(desc).flags)
    assert labels_of(result, "cephnode_bios_info")[0]["version"] == ""
    assert value(result, "cephnode_scrape_collector_read_errors", collector="firmware") == 1


def test_no_dmi_no_thp_no_cpufreq_is_no_error(make_tree: MakeTree) -> None:
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    for section in ("dmi", "thp", "cpufreq", "perf_pmus", "microcode"):
        del desc[section]
    result = collect(make_tree(desc).flags)
    for family in (
        "cephnode_bios_info",
        "cephnode_transparent_hugepage_info",
        "cephnode_cpu_achieved_frequency_mean_hertz",
        "cephnode_perf_pmu_event_info",
        "cephnode_cpu_microcode_info",
    ):
        assert labels_of(result, family) == [], family
    for collector in ("firmware", "thp", "cpuhw"):
        assert value(result, "cephnode_scrape_collector_read_errors", collector=collector) == 0
        assert value(result, "cephnode_scrape_collector_success", collector=collector) == 1


# ----------------------------------------------------------------------------- cpuhw


@pytest.mark.parametrize("node", ["epyc9454p-tuned", "epyc9454p-detuned"])
def test_achieved_frequency_matches_the_files(node_trees: dict[str, Tree], node: str) -> None:
    tree = node_trees[node]
    result = collect(tree.flags)
    khz = [
        int(p.read_text())
        for p in tree.sys.glob("devices/system/cpu/cpufreq/policy*/scaling_cur_freq")
    ]
    assert len(khz) == 96
    src = {"source": "scaling_cur_freq"}
    mean = value(result, "cephnode_cpu_achieved_frequency_mean_hertz", **src)
    assert mean == pytest.approx(sum(khz) / len(khz) * 1000)
    assert value(result, "cephnode_cpu_achieved_frequency_min_hertz", **src) == min(khz) * 1000
    assert value(result, "cephnode_cpu_achieved_frequency_max_hertz", **src) == max(khz) * 1000
    assert value(result, "cephnode_cpu_achieved_frequency_cpus", state="sampled", **src) == 96
    assert value(result, "cephnode_perf_pmu_event_info", pmu="msr", event="aperf") == 1
    assert value(result, "cephnode_perf_event_paranoid") == 2


def test_avg_freq_is_preferred_and_a_bad_cpu_is_counted(make_tree: MakeTree) -> None:
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    desc["cpufreq"]["avg_freq"] = True
    path = "sys/devices/system/cpu/cpufreq/policy5/cpuinfo_avg_freq"
    result = collect(make_tree(desc, faults={path: "garbage"}).flags)
    src = {"source": "cpuinfo_avg_freq"}
    assert value(result, "cephnode_cpu_achieved_frequency_cpus", state="sampled", **src) == 95
    assert value(result, "cephnode_scrape_collector_read_errors", collector="cpuhw") == 1
    assert (
        value(result, "cephnode_cpu_achieved_frequency_mean_hertz", source="scaling_cur_freq")
        is None
    )


def test_cstate_pmu_events_without_scale_files(make_tree: MakeTree) -> None:
    desc = copy.deepcopy(load_node("epyc9454p-tuned"))
    desc["perf_pmus"] = {
        "cstate_core": ["c1-residency", "c6-residency"],
        "cstate_pkg": ["c2-residency", "c6-residency"],
        "power": ["energy-pkg"],  # not a hardware-state PMU of this collector
    }
    tree = make_tree(desc)
    (tree.sys / "devices/cstate_core/events/c6-residency.scale").write_text("1\n")
    result = collect(tree.flags)
    got = sorted((d["pmu"], d["event"]) for d in labels_of(result, "cephnode_perf_pmu_event_info"))
    assert got == [
        ("cstate_core", "c1-residency"),
        ("cstate_core", "c6-residency"),
        ("cstate_pkg", "c2-residency"),
        ("cstate_pkg", "c6-residency"),
    ]


# ----------------------------------------------------------------------------- this machine


def test_this_machines_firmware_thp_and_cpu() -> None:
    """Each value recomputed from this machine's files with other code than the parser's."""
    result = collect([])
    for collector in ("firmware", "thp", "cpuhw"):
        assert value(result, "cephnode_scrape_collector_success", collector=collector) == 1
        assert value(result, "cephnode_scrape_collector_read_errors", collector=collector) == 0
    assert labels_of(result, "cephnode_kernel_release_info") == [{"release": os.uname().release}]
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        active = re.search(r"\[(\S+)\]", thp.read_text())
        assert active is not None
        assert labels_of(result, "cephnode_transparent_hugepage_info")[0]["enabled"] == active[1]
    sysfs = Path("/sys/devices/system/cpu/cpu0/microcode/version")
    cpuinfo = re.search(r"^microcode\s*:\s*(0x[0-9a-f]+)", Path("/proc/cpuinfo").read_text(), re.M)
    got = labels_of(result, "cephnode_cpu_microcode_info")
    if sysfs.exists():
        assert int(sysfs.read_text(), 16) == int(got[0]["revision"].split(",")[0], 16)
    elif cpuinfo is not None:
        assert got == [{"revision": hex(int(cpuinfo[1], 16)), "source": "cpuinfo"}]
    else:
        assert got == []
    dmi = Path("/sys/class/dmi/id")
    bios = labels_of(result, "cephnode_bios_info")
    if dmi.exists():
        assert bios[0]["version"] == (dmi / "bios_version").read_text().strip()
    else:
        assert bios == []  # this VM (Firecracker) has no SMBIOS
    paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    assert value(result, "cephnode_perf_event_paranoid") == paranoid
    events = Path("/sys/bus/event_source/devices/msr/events")
    if events.exists():
        for event in os.listdir(events):
            if "." not in event:
                assert value(result, "cephnode_perf_pmu_event_info", pmu="msr", event=event) == 1
    if not Path("/sys/devices/system/cpu/cpu0/cpufreq").exists():
        assert labels_of(result, "cephnode_cpu_achieved_frequency_mean_hertz") == []


def test_readers_alone_on_the_real_host() -> None:
    """The parsers' entry points on the real files, without the scraper around them."""
    from cephnode_exporter.hostfs.cpuhw import read_cpuhw
    from cephnode_exporter.hostfs.firmware import read_firmware
    from cephnode_exporter.hostfs.thp import read_thp

    fs = HostFS()
    for facts in (read_firmware(fs), read_thp(fs), read_cpuhw(fs)):
        assert isinstance(facts.errors, ReadErrors)
        assert len(facts.errors) == 0, facts.errors.items
