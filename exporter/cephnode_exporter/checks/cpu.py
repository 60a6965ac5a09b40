"""Checks ``cpu.cstates`` and ``cpu.governor``."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.cpuidle import CPUIdleFacts
from cephnode_exporter.hostfs.cpufreq import BOOST, NO_TURBO, CPUFreq
from cephnode_exporter.hostfs.irq import format_cpulist

# The fix depends on the idle driver: intel_idle ignores processor.max_cstate and takes
# its own intel_idle.max_cstate (drivers/idle/intel_idle.c); acpi_idle (AMD, and Intel
# booted with intel_idle.max_cstate=0) takes processor.max_cstate
# (drivers/acpi/processor_idle.c). The runtime fix is the same for both.
CSTATE_HINTS = {
    "intel_idle": (
        "set the BIOS power profile to maximum performance (Package C-State limit C0/C1, "
        "C6 disabled), or boot with intel_idle.max_cstate=1, or at runtime: cpupower "
        "idle-set -D {limit} (tuned profiles latency-performance and network-latency hold "
        "/dev/cpu_dma_latency instead)"
    ),
    "acpi_idle": (
        "set the BIOS power profile to maximum performance (AMD: Global C-State Control "
        "disabled), or boot with processor.max_cstate=1, or at runtime: cpupower idle-set "
        "-D {limit} (tuned profiles latency-performance and network-latency hold "
        "/dev/cpu_dma_latency instead)"
    ),
}
CSTATE_HINT = (
    "set the BIOS power profile to maximum performance, or at runtime: cpupower idle-set "
    "-D {limit} (tuned profiles latency-performance and network-latency hold "
    "/dev/cpu_dma_latency instead)"
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
        if idle.driver is None and idle.hidden is not None:
            # Hidden from the exporter, not absent: a mask may hide enabled deep states.
            return [Finding.cannot_judge("", idle.hidden, expected)]
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
    qos = facts.latency_limit_us
    if qos is not None and all(lat > qos for lat, _ in deep.values()):
        # The idle governors skip every state whose exit latency is above the CPU
        # latency QoS request (menu_select(), teo_select() in drivers/cpuidle/governors/),
        # so none of these is entered while the request's holder (tuned) keeps it.
        held = f"{observed}, but never entered: the PM QoS CPU latency limit is {qos} us"
        return [Finding("", False, f"{held} (/dev/cpu_dma_latency)", expected)]
    hint = CSTATE_HINTS.get(idle.driver or "", CSTATE_HINT).format(limit=limit + 1)
    return [Finding("", True, observed, expected, hint)]


def _validate_governor(params: dict[str, Any]) -> None:
    allowed = params["allowed"]
    if not allowed or not all(g.strip() for g in allowed):
        raise ValueError("allowed must be a non-empty list of governor names")
    if not isinstance(params["allow_boost_off"], bool):
        raise ValueError("allow_boost_off must be true or false")


GOVERNOR_HINT = (
    "cpupower frequency-set -g {governor} (persist with tuned profile "
    "throughput-performance or a systemd unit); BIOS: OS-controlled power management"
)
CAP_HINT = (
    "lift the cap: cpupower frequency-set -u {max} (kHz: cpuinfo_max_freq, written to "
    "scaling_max_freq); if it comes back, find what sets it: a power-capping agent or "
    "tuned profile, a BIOS/BMC power limit (ACPI _PPC: policyN/bios_limit on "
    "acpi-cpufreq; the BMC's power cap), or thermal throttling"
)
PERF_PCT_HINT = (
    "echo 100 > /sys/devices/system/cpu/intel_pstate/max_perf_pct, and find what lowered "
    "it (a power-capping agent, a tuned profile's script)"
)
BOOST_HINT = (
    "turn boost on: {command}, and Core Performance Boost / Turbo Boost on in the BIOS; a "
    "fleet that runs without boost on purpose sets allow_boost_off: true on cpu.governor"
)
BOOST_ON = {
    BOOST: "echo 1 > /sys/devices/system/cpu/cpufreq/boost",
    NO_TURBO: "echo 0 > /sys/devices/system/cpu/intel_pstate/no_turbo",
}


def _ghz(khz: int) -> str:
    return f"{khz / 1e6:.2f} GHz"


def _ghz_range(values: set[int]) -> str:
    low, high = min(values), max(values)
    return _ghz(low) if low == high else f"{low / 1e6:.2f}-{_ghz(high)}"


def _caps(facts: CPUFreq, total: int) -> tuple[str, str | None, str | None, int]:
    """The clock-limit part of the observation: (text, deviation, unknown reason, the
    highest cpuinfo_max_freq in kHz). A CPU is capped when its scaling_max_freq is
    below the most it can run at: cpuinfo_max_freq, or while intel_pstate's turbo is off
    its base_frequency (no_turbo lowers the policy's limit, not cpuinfo_max_freq:
    intel_pstate.rst); without base_frequency such a CPU cannot be judged."""
    turbo_off = facts.boost is False and facts.boost_file == NO_TURBO
    capped: dict[tuple[int, int], list[int]] = {}
    unjudged: list[int] = []
    tops: set[int] = set()
    bases: set[int] = set()  # the base clocks CPUs were judged against (turbo off)
    for cpu, p in sorted(facts.cpus.items()):
        if p.scaling_max_khz is None or p.cpuinfo_max_khz is None:
            continue
        tops.add(p.cpuinfo_max_khz)
        top = p.cpuinfo_max_khz
        if turbo_off and p.scaling_max_khz < top:
            base = facts.base_khz.get(cpu)
            if base is None:
                unjudged.append(cpu)
                continue
            top = base
            bases.add(base)
        if p.scaling_max_khz < top:
            capped.setdefault((p.scaling_max_khz, top), []).append(cpu)
    deviation = unknown = None
    if facts.max_perf_pct is not None and facts.max_perf_pct < 100:
        # The global limit holds every CPU below it whatever scaling_max_freq says.
        pct = facts.max_perf_pct
        top_text = f" (about {_ghz(max(tops) * pct // 100)})" if tops else ""
        deviation = (
            f"clocks capped on every CPU at {pct}% of the highest turbo P-state{top_text} "
            f"by intel_pstate/max_perf_pct = {pct}"
        )
    if capped:
        count = sum(len(cpus) for cpus in capped.values())
        groups = sorted(capped.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        caps = "; ".join(
            f"{_ghz(cap)} of {_ghz(top)} on cpu{format_cpulist(set(cpus))}"
            for (cap, top), cpus in groups[:3]
        )
        more = f"; {len(groups) - 3} more caps" if len(groups) > 3 else ""
        per_cpu = f"clocks capped on {count}/{total} CPUs (scaling_max_freq {caps}{more})"
        deviation = f"{deviation}; {per_cpu}" if deviation else per_cpu
        text = deviation
    elif deviation:
        text = deviation
    elif bases:
        text = f"no clock cap below the base clock (base_frequency {_ghz_range(bases)})"
    elif tops:
        text = f"no clock cap (scaling_max_freq = cpuinfo_max_freq, {_ghz_range(tops)})"
    else:
        text = ""
    if facts.limits_unread:
        unknown = _unread_text(facts.limits_unread, "the clock limits")
    if facts.max_perf_error is not None:
        why = f"intel_pstate/max_perf_pct unreadable: {facts.max_perf_error}"
        unknown = f"{unknown}; {why}" if unknown else why
    if unjudged:
        why = (
            f"scaling_max_freq below cpuinfo_max_freq on {len(unjudged)}/{total} CPUs, as "
            "intel_pstate's no_turbo also makes it; no base_frequency (HWP) tells a cap "
            "from it"
        )
        unknown = f"{unknown}; {why}" if unknown else why
    return text, deviation, unknown, max(tops, default=0)


def _boost(facts: CPUFreq, allow_off: bool) -> tuple[str, str | None, str | None]:
    """The boost part of the observation: (text, deviation, unknown reason)."""
    if facts.boost is True:
        return "boost on", None, None
    if facts.boost is False:
        value = "1" if facts.boost_file == NO_TURBO else "0"
        text = f"boost off ({facts.boost_file} = {value})"
        return (f"{text}, accepted by the profile", None, None) if allow_off else (text, text, None)
    if facts.boost_error is not None:
        if allow_off:
            return "boost unreadable, either state accepted", None, None
        return "", None, f"boost unreadable: {facts.boost_error}"
    return "no boost control in sysfs", None, None


@check(
    "cpu.governor",
    "cpufreq",
    validate=_validate_governor,
    allowed=list[str],
    allow_boost_off=bool,
)
def governor(facts: CPUFreq, params: dict[str, Any]) -> list[Finding]:
    """A CPU that may not run at its full clock makes every OSD op wait longer.

    Three ways it may not, each a deviation: a governor other than ``performance``
    lowers clocks between bursts of I/O; a ``scaling_max_freq`` below the CPU's
    ``cpuinfo_max_freq`` caps it (``cpupower frequency-set -u``, a power-capping daemon, a
    BIOS or BMC power limit through ACPI _PPC, thermal throttling); boost switched off
    leaves the clock at base (accepted with ``allow_boost_off``: some sites turn it off
    for steadier latency). A pass needs every CPU's governor and clock limits read, and
    the boost file where the driver has one.
    """
    allowed = list(params["allowed"])
    allow_off = bool(params["allow_boost_off"])
    boost = "boost on or off" if allow_off else "boost on"
    expected = (
        f"scaling governor {' or '.join(allowed)} on every CPU, scaling_max_freq at "
        f"cpuinfo_max_freq, {boost}"
    )
    if not facts.cpus and not facts.unread:
        return [Finding("", None, "no cpufreq on this node", expected)]
    counts: dict[str, int] = {}
    for policy in facts.cpus.values():
        counts[policy.governor] = counts.get(policy.governor, 0) + 1
    total = len(facts.cpus) + len(facts.unread)
    governors = ", ".join(f"{g} on {n}/{total} CPUs" for g, n in sorted(counts.items()))
    bad = sorted(g for g in counts if g not in allowed)
    cap_text, capped, cap_unknown, top = _caps(facts, total)
    boost_text, boost_off, boost_unknown = _boost(facts, allow_off)
    hints = []
    if bad:
        hints.append(GOVERNOR_HINT.format(governor=allowed[0]))
    if facts.max_perf_pct is not None and facts.max_perf_pct < 100:
        hints.append(PERF_PCT_HINT)
    if capped and "(scaling_max_freq " in capped:
        hints.append(CAP_HINT.format(max=top))
    if boost_off:
        hints.append(BOOST_HINT.format(command=BOOST_ON[facts.boost_file or BOOST]))
    unknowns = [
        why
        for why in (
            _unread_text(facts.unread, "the scaling governor") if facts.unread else None,
            cap_unknown,
            boost_unknown,
        )
        if why
    ]
    observed = "; ".join(part for part in (governors, cap_text, boost_text, *unknowns) if part)
    if hints:
        return [Finding("", True, observed, expected, "; ".join(hints))]
    if unknowns:
        return [Finding.cannot_judge("", observed, expected)]
    return [Finding("", False, observed, expected)]
