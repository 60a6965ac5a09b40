"""Checks ``sysctl.<name>``, ``tuned.profile`` and ``kernel.mitigations``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cephnode_exporter.checks.base import Finding, check, check_family
from cephnode_exporter.facts.kernel import KernelFacts
from cephnode_exporter.hostfs.kernel import VulnState
from cephnode_exporter.hostfs.sysctl import sysctl_path_parts, sysctl_target

# How a sysctl is compared with the profile's value; vectors element by element.
COMPARISONS: dict[str, tuple[Callable[[int, int], bool], str]] = {
    "at_least": (lambda observed, want: observed >= want, "at least"),
    "at_most": (lambda observed, want: observed <= want, "at most"),
    "equal": (lambda observed, want: observed == want, "equal to"),
}
# The check family whose profile entries name the sysctls; the kernel collector reads
# exactly those (Profile.reads).
SYSCTL_FAMILY = "sysctl"
SYSCTL_D_FILE = "/etc/sysctl.d/90-ceph-tuning.conf"


def _validate_sysctl(params: dict[str, Any]) -> None:
    compare = params["compare"]
    if compare not in COMPARISONS:
        raise ValueError(f"compare must be one of {', '.join(COMPARISONS)}, not {compare!r}")
    if isinstance(sysctl_target(params["value"]), str) and compare != "equal":
        raise ValueError(f"value {params['value']!r} is not numeric: only compare: equal works")


def _validate_member(name: str) -> None:
    sysctl_path_parts(name)


def _text(value: tuple[int, ...] | str) -> str:
    return value if isinstance(value, str) else " ".join(str(v) for v in value)


def _not_found(member: str) -> str:
    """Why a sysctl file may be missing while the kernel has the sysctl: the exporter's
    view of /proc/sys, far more often than the kernel, on the nodes this runs on.

    Network sysctls are per network namespace and /proc/sys/net shows the reader's
    (hostfs/sysctl.py); net_core_table (rmem_max, wmem_max, netdev_max_backlog, ...) is
    registered for init_net only (net/core/sysctl_net_core.c, sysctl_core_init), so an
    exporter in its own namespace does not see them at all. A container runtime may
    mask /proc/sys or parts of it, and --path.procfs may point at something that is not
    the host's procfs.
    """
    causes = []
    if sysctl_path_parts(member)[0] == "net":
        causes.append("the exporter may run in another network namespace than the host's")
    causes.append("/proc/sys may be masked")
    causes.append("--path.procfs may not point at the host's procfs")
    return (
        f"not found in /proc/sys: {', '.join(causes[:-1])} or {causes[-1]}; if this "
        "kernel lacks the sysctl, set optional: true for it in the profile"
    )


def _sysctl_hint(name: str, target: tuple[int, ...] | str) -> str:
    text = _text(target)
    arg = f'"{text}"' if " " in text else text
    return (
        f"sysctl -w {name}={arg}; to keep it across reboots, add the line "
        f"'{name} = {text}' to {SYSCTL_D_FILE}"
    )


@check_family(
    SYSCTL_FAMILY,
    "kernel",
    validate_member=_validate_member,
    validate=_validate_sysctl,
    defaults={"optional": False},
    value=(int, str, list),
    compare=str,
    optional=bool,
)
def sysctl(facts: KernelFacts, params: dict[str, Any], member: str) -> list[Finding]:
    """A sysctl against the profile's value: at least, at most or equal, element-wise.

    A larger buffer or backlog than the profile's passes ``at_least``, and the fix never
    lowers an element that is already past the profile's value. A sysctl whose file is
    missing is ``unknown`` with the likely causes (another network namespace, a masked
    /proc/sys, a wrong --path.procfs: the exporter cannot tell those from a kernel
    without the sysctl), unless the profile marks it ``optional: true`` (one that some of
    the fleet's kernels lack, such as net.ipv4.tcp_tw_recycle, removed in Linux 4.12):
    then it is skipped. One that is unreadable, not decimal integers where the profile
    has numbers, or a vector of another length is ``unknown``.
    """
    want = sysctl_target(params["value"])
    test, words = COMPARISONS[params["compare"]]
    expected = f"{words} {_text(want)}"
    if not isinstance(want, str) and len(want) > 1:
        expected += " (element-wise)"
    reading = facts.sysctls.get(member)
    if reading is None:
        return [Finding.cannot_judge("", "not read by the collector", expected)]
    if reading.error is not None:
        return [Finding.cannot_judge("", f"unreadable: {reading.error}", expected)]
    if reading.value is None:
        if params["optional"]:
            return [Finding("", None, "not present on this kernel (optional)", expected)]
        return [Finding.cannot_judge("", _not_found(member), expected)]
    observed = reading.value
    if isinstance(want, str):
        deviates = " ".join(observed.text.split()) != want
        hint = _sysctl_hint(member, want) if deviates else ""
        return [Finding("", deviates, observed.text, expected, hint)]
    if observed.ints is None:
        why = f"not a number: {observed.text[:60]!r}"
        return [Finding.cannot_judge("", why, expected)]
    if len(observed.ints) != len(want):
        why = f"{observed.text} ({len(observed.ints)} values, the profile has {len(want)})"
        return [Finding.cannot_judge("", why, expected)]
    ok = [test(o, w) for o, w in zip(observed.ints, want, strict=True)]
    if all(ok):
        return [Finding("", False, observed.text, expected)]
    target = tuple(o if good else w for o, w, good in zip(observed.ints, want, ok, strict=True))
    return [Finding("", True, observed.text, expected, _sysctl_hint(member, target))]


def _validate_allowed(params: dict[str, Any]) -> None:
    allowed = params["allowed"]
    if not allowed or not all(isinstance(p, str) and p.strip() for p in allowed):
        raise ValueError("allowed must be a non-empty list of profile names")


@check("tuned.profile", "kernel", validate=_validate_allowed, allowed=list[str])
def tuned_profile(facts: KernelFacts, params: dict[str, Any]) -> list[Finding]:
    """tuned applies a whole set of settings at once; a node without the right profile is
    missing all of them. A merged profile passes when every part is allowed, and only
    while tuned runs: a stopped tuned rolls its settings back and leaves active_profile
    behind, so a selection without a tuned process deviates. Whether it runs is unknown
    when /proc could not be searched."""
    allowed = list(params["allowed"])
    expected = f"tuned profile {' or '.join(allowed)}"
    set_it = f"tuned-adm profile {allowed[0]}"
    if facts.tuned is None:
        return [Finding.cannot_judge("", f"unreadable: {facts.tuned_error}", expected)]
    tuned = facts.tuned
    if not tuned.installed:
        hint = f"install tuned (apt install tuned), then: systemctl enable --now tuned; {set_it}"
        return [Finding("", True, "tuned is not installed", expected, hint)]
    if tuned.profile is None:
        observed = "tuned is installed but never selected a profile (no active_profile)"
        return [Finding("", True, observed, expected, f"systemctl enable --now tuned; {set_it}")]
    if tuned.profile == "":
        return [Finding("", True, "no profile active (tuned-adm off)", expected, set_it)]
    deviates = any(p not in allowed for p in tuned.profiles)
    if facts.tuned_running is False:
        observed = f"tuned not running; active_profile says {tuned.profile}"
        start = "systemctl enable --now tuned"
        hint = f"{start}; {set_it}" if deviates else start
        return [Finding("", True, observed, expected, hint)]
    if facts.tuned_running is None and not deviates:
        why = f"profile {tuned.profile}; whether tuned runs is unknown: {facts.tuned_running_error}"
        return [Finding.cannot_judge("", why, expected)]
    return [Finding("", deviates, f"profile {tuned.profile}", expected, set_it if deviates else "")]


@check("kernel.mitigations", "kernel", warn_when_mitigated=bool, warn_when_vulnerable=bool)
def mitigations(facts: KernelFacts, params: dict[str, Any]) -> list[Finding]:
    """Report the CPU vulnerability mitigation state; by default it never deviates.

    Mitigations cost syscall and context-switch time (benchmark runs boot with them off), but
    turning them off is a security decision the exporter cannot make: the profile opts in
    with ``warn_when_mitigated`` (performance view) or ``warn_when_vulnerable`` (security).
    """
    on_mitigated = bool(params["warn_when_mitigated"])
    on_vulnerable = bool(params["warn_when_vulnerable"])
    wants = []
    if on_mitigated:
        wants.append("no mitigation in effect")
    if on_vulnerable:
        wants.append("no vulnerable state")
    expected = " and ".join(wants) if wants else "informational: the mitigation state"
    vulns = facts.vulnerabilities
    if vulns is None:
        return [Finding("", None, "the kernel exposes no CPU vulnerability files", expected)]
    if facts.cmdline is None:
        mode = "mitigations=? (/proc/cmdline unreadable)"
    elif "mitigations" in facts.cmdline:
        mode = f"mitigations={facts.cmdline['mitigations']}"
    else:
        mode = "mitigations not set (kernel default)"
    by_state: dict[VulnState, list[str]] = {s: [] for s in VulnState}
    for v in vulns.values():
        by_state[v.state].append(v.name)
    parts = [mode]
    words = {
        VulnState.MITIGATED: "mitigated",
        VulnState.VULNERABLE: "vulnerable",
        VulnState.UNKNOWN: "unknown",
        VulnState.NOT_AFFECTED: "not affected",
    }
    for state, word in words.items():
        names = by_state[state]
        if names:
            listed = f" ({', '.join(names)})" if state != VulnState.NOT_AFFECTED else ""
            parts.append(f"{len(names)} {word}{listed}")
    observed = "; ".join(parts)
    hints = []
    if on_mitigated and by_state[VulnState.MITIGATED]:
        hints.append(
            "if the node's threat model allows it, boot with mitigations=off (add it to "
            "GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, run update-grub, reboot)"
        )
    if on_vulnerable and by_state[VulnState.VULNERABLE]:
        hints.append(
            "update the kernel and the CPU microcode (BIOS or the intel-/amd64-microcode "
            "package) and drop mitigations=off from the kernel command line"
        )
    if hints:
        return [Finding("", True, observed, expected, "; ".join(hints))]
    if facts.vulnerability_errors:
        unread = facts.vulnerability_errors
        why = f"{observed}; {len(unread)} vulnerability files unreadable ({unread[0]})"
        return [Finding.cannot_judge("", why, expected)]
    return [Finding("", False, observed, expected)]
