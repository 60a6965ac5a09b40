"""Check ``osd.debug_levels`` (per OSD)."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks import Finding, check
from cephnode_exporter.collectors.osd import OSDCollectorFacts


def _validate(params: dict[str, Any]) -> None:
    subs = params["subsystems"]
    if not subs or not all(isinstance(s, str) and s.strip() for s in subs):
        raise ValueError("subsystems must be a non-empty list of debug subsystem names")
    if params["max_level"] < 0:
        raise ValueError("max_level must be >= 0")


@check("osd.debug_levels", "osd", validate=_validate, subsystems=list, max_level=int)
def debug_levels(facts: OSDCollectorFacts, params: dict[str, Any]) -> list[Finding]:
    """Debug logging costs CPU on the I/O path even when nothing reaches the log file:
    every message up to the gather level is formatted into the in-memory ring. The SUSE
    IO500 run set every debug_* level to 0 (seed 004); Ceph's defaults are mostly 1/5."""
    subsystems = [s.removeprefix("debug_") for s in params["subsystems"]]
    limit = params["max_level"]
    expected = f"debug level (log/gather) <= {limit}/{limit} for {', '.join(subsystems)}"
    if not facts.osds:
        return [Finding("", None, "no OSD on this node", expected)]
    out = []
    for osd in facts.osds:
        if osd.config is None:
            out.append(Finding(osd.ceph_daemon, None, f"no answer: {osd.reason}", expected))
            continue
        high = {
            sub: level
            for sub in subsystems
            if (level := osd.config.debug.get(sub)) is not None
            and max(level.log, level.gather) > limit
        }
        others = sorted(
            sub
            for sub, level in osd.config.debug.items()
            if sub not in subsystems and max(level.log, level.gather) > limit
        )
        tail = f"; also non-zero, not judged: {len(others)}" if others else ""
        if not high:
            out.append(
                Finding(osd.ceph_daemon, False, f"all listed at most {limit}{tail}", expected)
            )
            continue
        observed = ", ".join(f"debug_{s}={lv.log}/{lv.gather}" for s, lv in sorted(high.items()))
        zero = f"{limit}/{limit}"
        hint = (
            "at runtime for all OSDs: "
            + "; ".join(f"ceph config set osd debug_{s} {zero}" for s in sorted(high))
            + "; or in ceph.conf [osd]: "
            + ", ".join(f"debug_{s} = {zero}" for s in sorted(high))
        )
        out.append(Finding(osd.ceph_daemon, True, observed + tail, expected, hint))
    return out
