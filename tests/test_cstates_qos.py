"""``cpu.cstates`` and the PM QoS CPU latency limit, and its fix hint per idle driver.

The idle governors never pick a state whose exit latency is above the CPU latency QoS
request (menu_select(), teo_select() in drivers/cpuidle/governors/): a node whose deep
states are enabled but held off by a request (tuned's latency-performance profile holds
/dev/cpu_dma_latency at 1 us) never enters them. The request lasts while its holder keeps
the device open, so the check passes only while it reads so.
"""

from __future__ import annotations

import pytest
from cephnode_exporter.checks import Status
from cephnode_exporter.checks.base import Result

from tests.conftest import Tree, collect

# The detuned reference node: C2 (exit latency 800 us, ACPI _CST of the EPYC 9454P)
# enabled on every CPU, idle driver acpi_idle.
NODE = "epyc9454p-detuned"


def cstates(tree: Tree, limit_us: int | None) -> Result:
    dev = tree.rootfs / "dev"
    dev.mkdir(exist_ok=True)
    qos = dev / "cpu_dma_latency"
    if limit_us is None:
        qos.unlink(missing_ok=True)
    else:  # the device's read: a native-endian s32 (Documentation/power/pm_qos_interface.rst)
        qos.write_bytes(limit_us.to_bytes(4, "little", signed=True))
    (result,) = [r for r in collect(tree.flags).results if r.check == "cpu.cstates"]
    return result


@pytest.fixture
def tree(make_tree) -> Tree:  # type: ignore[no-untyped-def]
    return make_tree(NODE)


def test_a_qos_limit_below_every_deep_state_holds_them_off(tree: Tree) -> None:
    failing = cstates(tree, None)
    assert failing.status == Status.FAIL
    r = cstates(tree, 1)
    assert r.status == Status.PASS, r
    assert r.observed == (
        f"{failing.observed}, but never entered: the PM QoS CPU latency limit is 1 us "
        "(/dev/cpu_dma_latency)"
    )
    assert r.hint == ""


@pytest.mark.parametrize("limit_us", [2_000_000_000, 800, 5000])
def test_a_qos_limit_that_lets_a_deep_state_in_still_fails(tree: Tree, limit_us: int) -> None:
    """The default request (PM_QOS_CPU_LATENCY_DEFAULT_VALUE, 2,000 s) or one at or above
    the deep state's exit latency constrains nothing."""
    r = cstates(tree, limit_us)
    assert r.status == Status.FAIL, r
    assert "never entered" not in r.observed


def test_the_hint_follows_the_idle_driver(tree: Tree) -> None:
    """acpi_idle takes processor.max_cstate; intel_idle ignores it and takes its own
    intel_idle.max_cstate (drivers/idle/intel_idle.c)."""
    r = cstates(tree, None)
    assert "processor.max_cstate=1" in r.hint and "intel_idle.max_cstate" not in r.hint
    driver = tree.sys / "devices/system/cpu/cpuidle/current_driver"
    driver.write_text("intel_idle\n")
    r = cstates(tree, None)
    assert "intel_idle.max_cstate=1" in r.hint and "processor.max_cstate" not in r.hint
