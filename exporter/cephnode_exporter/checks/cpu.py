"""Checks ``cpu.cstates`` and ``cpu.governor``."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks import Finding, check
from cephnode_exporter.collectors.cpuidle import CPUIdleFacts
from cephnode_exporter.hostfs.cpufreq import CPUFreq

CSTATE_HINT = (
    "set the BIOS power profile to maximum performance (AMD: Global C-State Control "
    "disabled), or boot with processor.max_cstate=1 (intel_idle.max_cstate=1 on Intel), "
    "or at runtime: cpupower idle-set -D {limit}"
)


@check("cpu.cstates", "cpuidle", max_exit_latency_us=int)
def cstates(facts: CPUIdleFacts, params: dict[str, Any]) -> list[Finding]:
    """Deep idle states must be disabled: their exit latency lands on every I/O wake-up."""
    limit = params["max_exit_latency_us"]
    expected = f"no idle state with exit latency > {limit} us enabled"
    idle = facts.idle
    if not idle.cpus:
        driver = idle.driver or "no cpuidle framework"
        return [Finding("", None, f"no idle states exposed ({driver})", expected)]
    deep: dict[str, tuple[int, int]] = {}  # state -> (latency, CPUs with it enabled)
    for samples in idle.cpus.values():
        for s in samples:
            if s.info.exit_latency_us > limit and s.disabled is False:
                _, count = deep.get(s.info.name, (0, 0))
                deep[s.info.name] = (s.info.exit_latency_us, count + 1)
    total = len(idle.cpus)
    if not deep:
        names = sorted({s.info.name for samples in idle.cpus.values() for s in samples})
        return [
            Finding(
                "",
                False,
                f"no deep state enabled on {total} CPUs (states: {', '.join(names)})",
                expected,
            )
        ]
    observed = "; ".join(
        f"{name} (exit latency {lat} us) enabled on {count}/{total} CPUs"
        for name, (lat, count) in sorted(deep.items())
    )
    return [Finding("", True, observed, expected, CSTATE_HINT.format(limit=limit + 1))]


@check("cpu.governor", "cpufreq", allowed=list)
def governor(facts: CPUFreq, params: dict[str, Any]) -> list[Finding]:
    """A governor other than ``performance`` lowers clocks between bursts of I/O."""
    allowed = list(params["allowed"])
    expected = f"scaling governor {' or '.join(allowed)} on every CPU"
    if not facts.cpus:
        return [Finding("", None, "no cpufreq on this node", expected)]
    counts: dict[str, int] = {}
    for policy in facts.cpus.values():
        counts[policy.governor] = counts.get(policy.governor, 0) + 1
    total = len(facts.cpus)
    observed = ", ".join(f"{g} on {n}/{total} CPUs" for g, n in sorted(counts.items()))
    bad = sorted(g for g in counts if g not in allowed)
    if not bad:
        return [Finding("", False, observed, expected)]
    hint = (
        f"cpupower frequency-set -g {allowed[0]} (persist with tuned profile "
        "throughput-performance or a systemd unit); BIOS: OS-controlled power management"
    )
    return [Finding("", True, observed, expected, hint)]
