"""Native NVMe multipath: the ANA state of each path and the I/O policy of each subsystem.

A path whose ANA group turned inaccessible (a controller failover, a target in
maintenance) leaves the head on its other paths: I/O goes on, slower or through one port,
and nothing else on the node says so. The I/O policy decides whether the head spreads I/O
over its optimized paths (round-robin, queue-depth) or keeps to the nearest (numa).
Both are read from sysfs every scrape (hostfs/nvme_multipath.py): ``ana_state`` of each
path disk (nvme2c2n1), shown only for controllers that use ANA, and ``iopolicy`` of
``/sys/class/nvme-subsystem/nvme-subsysN``. The fixture's ``ana_state`` and ``iopolicy``
controller keys write them (tests/fixtures/sysfsgen.py, docs/fixtures.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.collection import Collection
from cephnode_exporter.hostfs import ParseError
from cephnode_exporter.hostfs.nvme_multipath import (
    ANA_STATES,
    parse_ana_state,
    parse_iopolicy,
    subsystem_dir,
)

from tests.conftest import MakeTree, collect, samples, value
from tests.fixtures.sysfsgen import build_tree
from tests.test_nvme import ONLY_NVME
from tests.test_nvme_multipath import NVME2, SUBSYS2, multipath

ANA = "cephnode_nvme_ana_state_info"
IOPOLICY = "cephnode_nvme_iopolicy_info"
ERRORS = "cephnode_scrape_collector_read_errors"
# nvme2's own path and the path through the drive's second port (nvme10)
PATH_A = "nvme2c2n1"
PATH_B = "nvme2c10n1"
NVME10 = "devices/pci0000:00/0000:00:03.1/0000:04:00.0/nvme/nvme10"


def ana_node(
    a: str | None = "optimized", b: str | None = "non-optimized", iopolicy: str | None = None
) -> dict[str, Any]:
    """The multipath node with both ports of nvme2's drive; ``a`` and ``b`` the ANA
    states of nvme2 and nvme10 (None: a controller without ANA)."""
    desc = multipath(second_port=True)
    controllers = desc["nvme"]["controllers"]
    if a is not None:
        controllers[2]["ana_state"] = a
    if b is not None:
        controllers[-1]["ana_state"] = b
    if iopolicy is not None:
        controllers[2]["iopolicy"] = iopolicy
    return desc


def series(result: Collection, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples(result).items() if n == name}


def nvme_errors(result: Collection) -> list[str]:
    (outcome,) = [o for o in result.outcomes if o.name == "nvme"]
    return list(outcome.facts.errors.items)


# --- parsers ------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ANA_STATES)
def test_parse_ana_state(state: str) -> None:
    assert parse_ana_state(f"{state}\n") == state


@pytest.mark.parametrize("text", ["", "\n", "(null)\n", "Optimized\n", "?garbage@value!\n", "1\n"])
def test_parse_ana_state_rejects(text: str) -> None:
    with pytest.raises(ParseError, match="not an ANA state"):
        parse_ana_state(text)


@pytest.mark.parametrize("policy", ["numa", "round-robin", "queue-depth", "service-time"])
def test_parse_iopolicy(policy: str) -> None:
    assert parse_iopolicy(f"{policy}\n") == policy


@pytest.mark.parametrize("text", ["", "\n", "?garbage@value!\n", "NUMA\n", "round robin\n", "-x\n"])
def test_parse_iopolicy_rejects(text: str) -> None:
    with pytest.raises(ParseError, match="not an I/O policy"):
        parse_iopolicy(text)


def test_subsystem_dir_is_the_heads_parent() -> None:
    sub = "/s/devices/virtual/nvme-subsystem/nvme-subsys2"
    assert subsystem_dir(f"{sub}/nvme2n1") == ("nvme-subsys2", sub)
    assert subsystem_dir("/s/devices/virtual/block/nvme2n1") is None


# --- the fixture --------------------------------------------------------------------------


def test_fixture_writes_ana_state_and_iopolicy(make_tree: MakeTree) -> None:
    sys_ = make_tree(ana_node(iopolicy="round-robin")).sys
    assert (sys_ / NVME2 / PATH_A / "ana_state").read_text() == "optimized\n"
    assert (sys_ / NVME2 / PATH_A / "ana_grpid").read_text() == "1\n"
    assert (sys_ / NVME10 / PATH_B / "ana_state").read_text() == "non-optimized\n"
    assert (sys_ / "class/nvme-subsystem/nvme-subsys2/iopolicy").read_text() == "round-robin\n"
    assert (sys_ / "class/nvme-subsystem/nvme-subsys0/iopolicy").read_text() == "numa\n"
    # the other controllers use no ANA: the kernel shows no attribute
    assert not (sys_ / "class/block/nvme0c0n1/ana_state").exists()
    assert not (sys_ / SUBSYS2 / "nvme2n1/ana_state").exists()  # per-path only


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ana_state": "optimized"}, r"ana_state needs nvme\.multipath"),
        ({"iopolicy": "numa"}, r"iopolicy needs nvme\.multipath"),
    ],
)
def test_generator_refuses_ana_without_multipath(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    desc = multipath()
    desc["nvme"]["multipath"] = False
    desc["nvme"]["controllers"][0].update(change)
    with pytest.raises(ValueError, match=message):
        build_tree(desc, tmp_path / "t")


def test_generator_refuses_an_iopolicy_on_a_second_port(tmp_path: Path) -> None:
    desc = ana_node()
    desc["nvme"]["controllers"][-1]["iopolicy"] = "round-robin"
    with pytest.raises(ValueError, match="iopolicy is the subsystem's: give it on nvme2"):
        build_tree(desc, tmp_path / "t")


# --- metrics ------------------------------------------------------------------------------


def test_ana_state_per_path_and_iopolicy_per_subsystem(make_tree: MakeTree) -> None:
    result = collect([*make_tree(ana_node(iopolicy="round-robin")).flags, *ONLY_NVME])
    assert value(result, "cephnode_scrape_collector_success", collector="nvme") == 1
    assert value(result, ERRORS, collector="nvme") == 0
    assert series(result, ANA) == {
        frozenset({("device", PATH_A), ("state", "optimized")}): 1.0,
        frozenset({("device", PATH_B), ("state", "non-optimized")}): 1.0,
    }
    # one series per subsystem with a multipath head, however many heads and paths
    policies = series(result, IOPOLICY)
    assert len(policies) == 10
    assert policies[frozenset({("subsystem", "nvme-subsys2"), ("iopolicy", "round-robin")})] == 1
    assert value(result, IOPOLICY, subsystem="nvme-subsys0", iopolicy="numa") == 1


@pytest.mark.parametrize("state", ["inaccessible", "persistent-loss", "change", "invalid state"])
def test_every_kernel_state_is_exported_as_it_reads(make_tree: MakeTree, state: str) -> None:
    result = collect([*make_tree(ana_node(b=state, iopolicy="queue-depth")).flags, *ONLY_NVME])
    assert value(result, ANA, device=PATH_B, state=state) == 1
    assert value(result, IOPOLICY, subsystem="nvme-subsys2", iopolicy="queue-depth") == 1
    assert value(result, ERRORS, collector="nvme") == 0


def test_controllers_without_ana_have_no_series_and_no_error(make_tree: MakeTree) -> None:
    """The reference drives use no ANA: the kernel hides ana_state, which is no fault."""
    result = collect([*make_tree(ana_node(a=None, b=None)).flags, *ONLY_NVME])
    assert series(result, ANA) == {}
    assert value(result, ERRORS, collector="nvme") == 0
    assert len(series(result, IOPOLICY)) == 10


@pytest.mark.parametrize("fault", ["eio", "empty", "garbage", "fifo", "missing"])
def test_a_bad_ana_state_is_counted_never_a_crash(make_tree: MakeTree, fault: str) -> None:
    tree = make_tree(ana_node(), faults={f"sys/{NVME2}/{PATH_A}/ana_state": fault})
    result = collect([*tree.flags, *ONLY_NVME])
    assert value(result, "cephnode_scrape_collector_success", collector="nvme") == 1
    assert value(result, ERRORS, collector="nvme") == 1
    # the path's series is gone; the other path and the rest of the path's series stay
    assert series(result, ANA) == {frozenset({("device", PATH_B), ("state", "non-optimized")}): 1}
    assert value(result, "cephnode_nvme_scheduler_info", device=PATH_A, scheduler="none") == 1
    (error,) = nvme_errors(result)
    assert "ana_state" in error
    if fault == "missing":  # its sibling shows one: not a controller without ANA
        assert error.startswith(f"ana_state missing on {PATH_A} while {PATH_B} shows it")


def test_an_unknown_ana_state_number_is_counted(make_tree: MakeTree) -> None:
    """ANA states 5-14 have no name: the kernel prints "(null)"."""
    result = collect([*make_tree(ana_node(a="(null)")).flags, *ONLY_NVME])
    assert value(result, ERRORS, collector="nvme") == 1
    assert value(result, ANA, device=PATH_A, state="(null)") is None
    assert "not an ANA state: '(null)'" in nvme_errors(result)[0]


@pytest.mark.parametrize("fault", ["eio", "empty", "garbage", "fifo", "missing"])
def test_a_bad_iopolicy_is_counted_never_a_crash(make_tree: MakeTree, fault: str) -> None:
    tree = make_tree(ana_node(), faults={f"sys/{SUBSYS2}/iopolicy": fault})
    result = collect([*tree.flags, *ONLY_NVME])
    assert value(result, "cephnode_scrape_collector_success", collector="nvme") == 1
    assert value(result, ERRORS, collector="nvme") == 1
    policies = series(result, IOPOLICY)
    assert len(policies) == 9
    assert not any(("subsystem", "nvme-subsys2") in labels for labels in policies)
    (error,) = nvme_errors(result)
    assert "iopolicy" in error
    if fault == "missing":  # the other subsystems of the same kernel have one
        assert error.startswith("iopolicy missing on nvme-subsys2 while nvme-subsys0, ")
    # the paths' ANA states are unaffected
    assert value(result, ANA, device=PATH_A, state="optimized") == 1


def test_no_iopolicy_anywhere_is_an_older_kernel(make_tree: MakeTree) -> None:
    tree = make_tree(ana_node())
    for sub in sorted((tree.sys / "devices/virtual/nvme-subsystem").iterdir()):
        (sub / "iopolicy").unlink()
    result = collect([*tree.flags, *ONLY_NVME])
    assert series(result, IOPOLICY) == {}
    assert value(result, ERRORS, collector="nvme") == 0
