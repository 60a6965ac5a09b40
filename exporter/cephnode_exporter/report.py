"""The tuning report of ``cephnode-exporter check``, as a table or as JSON."""

from __future__ import annotations

import shutil
import textwrap
from collections import Counter
from typing import Any

from cephnode_exporter.checks.base import Result, Status
from cephnode_exporter.profile import Profile

_ORDER = (Status.FAIL, Status.WARN, Status.UNKNOWN, Status.PASS, Status.SKIP)


def render_json(node: str, profile: Profile, results: list[Result]) -> dict[str, Any]:
    return {
        "node": node,
        "profile": profile.name,
        "results": [r.as_dict() for r in results],
    }


def render_text(node: str, profile: Profile, results: list[Result]) -> str:
    """One row per check and subject; a failing or warning row gets a ``fix:`` line."""
    width = max(80, min(shutil.get_terminal_size((120, 24)).columns, 160))
    headers = ("CHECK", "SUBJECT", "STATUS", "OBSERVED", "EXPECTED")
    rows = [
        (r.check, r.subject or "-", str(r.status).upper(), r.observed, r.expected) for r in results
    ]
    w_check = max([len(headers[0])] + [len(r[0]) for r in rows])
    w_subject = max([len(headers[1])] + [len(r[1]) for r in rows])
    w_status = 7
    indent = w_check + w_subject + w_status + 6
    w_text = max(20, (width - indent) // 2 - 1)
    lines = [f"node {node}, profile {profile.name}", ""]

    def row(cells: tuple[str, ...]) -> list[str]:
        observed = textwrap.wrap(cells[3], w_text, break_on_hyphens=False) or [""]
        expected = textwrap.wrap(cells[4], w_text, break_on_hyphens=False) or [""]
        out = []
        for i in range(max(len(observed), len(expected))):
            left = (
                f"{cells[0]:<{w_check}}  {cells[1]:<{w_subject}}  {cells[2]:<{w_status}}  "
                if i == 0
                else " " * indent
            )
            obs = observed[i] if i < len(observed) else ""
            exp = expected[i] if i < len(expected) else ""
            out.append(f"{left}{obs:<{w_text}}  {exp}".rstrip())
        return out

    lines.extend(row(headers))
    for r, cells in zip(results, rows, strict=True):
        lines.extend(row(cells))
        if r.hint:
            for i, part in enumerate(
                textwrap.wrap(r.hint, width - indent - 5, break_on_hyphens=False)
            ):
                lines.append(" " * indent + ("fix: " if i == 0 else "     ") + part)
    counts = Counter(r.status for r in results)
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in _ORDER)
    lines.extend(["", f"summary: {summary}"])
    return "\n".join(lines)
