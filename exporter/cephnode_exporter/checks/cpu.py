"""Checks ``cpu.cstates`` and ``cpu.governor``."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.cpuidle import CPUIdleFacts
from cephnode_exporter.hostfs.cpufreq import CPUFreq

CSTATE_HINT = (
    "set the BIOS power profile to maximum performance (AMD: Global C-State Control "
    "disabled), or boot with processor.max_cstate=1 (intel_idle.max_cstate=1 on Intel), "
    "or at runtime: cpupower idle-set -D {limit}"
)


def _validate_cstates(params: dict[str, Any]) -> None:
    if params["max_exit_latency_us"] < 0:
        raise ValueError("max_exit_latency_us must be >= 0")


def _unread_text(unread: dict[int, str], what: str) -> str:
    cpu, reason = min(unread.items())
    return f"{what} of {len(unread)} CPUs unreadable (cpu{cpu}: {reason})"


@check("cpu.cstates", "cpuidle", validate=_validate_cstates, max_exit_latency_us=int)
def cstates(facts: CPUIdleFacts, params: dict[str, Any]) -> list[Finding]:
    """Deep idle states must be disabled: their exit latency lands on every I/O wake-up.

    One deep state enabled on one CPU fails, whatever else was unreadable; a pass needs
    every online CPU's states read, and the ``disable`` flag of every deep one.
    """
    limit = params["max_exit_latency_us"]
    expected = f"no idle state with exit latency > {limit} us enabled"
    idle = facts.idle
    if not idle.cpus and not idle.unread:
        if idle.driver is None or idle.driver == "none":
            driver = idle.driver or "no cpuidle framework"
            return [Finding("", None, f"no idle states exposed ({driver})", expected)]
        why = f"cpuidle driver {idle.driver} registered, but no CPU exposes idle states"
        return [Finding.cannot_judge("", why, expected)]
    deep: dict[str, tuple[int, int]] = {}  # state -> (latency, CPUs with it enabled)
    unsure: dict[int, str] = dict(idle.unread)  # CPU -> why its deep states are not known
    for cpu, samples in idle.cpus.items():
        for s in samples:
            if s.info.exit_latency_us <= limit:
                continue
            if s.disabled is False:
                _, count = deep.get(s.info.name, (0, 0))
                deep[s.info.name] = (s.info.exit_latency_us, count + 1)
            elif s.disabled is None:
                unsure.setdefault(cpu, f"{s.info.name}: disable flag unreadable")
    total = len(idle.cpus.keys() | idle.unread.keys())
    if not deep and unsure:
        return [Finding.cannot_judge("", _unread_text(unsure, "idle states"), expected)]
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


def _validate_allowed(params: dict[str, Any]) -> None:
    allowed = params["allowed"]
    if not allowed or not all(g.strip() for g in allowed):
        raise ValueError("allowed must be a non-empty list of governor names")


@check("cpu.governor", "cpufreq", validate=_validate_allowed, allowed=list[str])
def governor(facts: CPUFreq, params: dict[str, Any]) -> list[Finding]:
    """A governor other than ``performance`` lowers clocks between bursts of I/O.

    A CPU on another governor fails; a pass needs every CPU's governor read.
    """
    allowed = list(params["allowed"])
    expected = f"scaling governor {' or '.join(allowed)} on every CPU"
    if not facts.cpus and not facts.unread:
        return [Finding("", None, "no cpufreq on this node", expected)]
    counts: dict[str, int] = {}
    for policy in facts.cpus.values():
        counts[policy.governor] = counts.get(policy.governor, 0) + 1
    total = len(facts.cpus) + len(facts.unread)
    observed = ", ".join(f"{g} on {n}/{total} CPUs" for g, n in sorted(counts.items()))
    bad = sorted(g for g in counts if g not in allowed)
    if not bad and facts.unread:
        why = _unread_text(facts.unread, "the scaling governor")
        return [Finding.cannot_judge("", f"{observed}; {why}" if observed else why, expected)]
    if not bad:
        return [Finding("", False, observed, expected)]
    hint = (
        f"cpupower frequency-set -g {allowed[0]} (persist with tuned profile "
        "throughput-performance or a systemd unit); BIOS: OS-controlled power management"
    )
    return [Finding("", True, observed, expected, hint)]
