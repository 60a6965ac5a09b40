"""README.md's Collectors and Tuning checks tables name exactly what the package registers.

They are the catalogue a user reads first, and "Adding a collector" tells a newcomer to
add a row to each: a collector or check without its row (or a row whose collector is
gone, or a default that changed) fails here instead of going unnoticed.
"""

from __future__ import annotations

import re

from cephnode_exporter.checks import load_all
from cephnode_exporter.collectors import REGISTRY

from tests.conftest import REPO

# A table row whose first cell is one code span: | `name` | ...
ROW = re.compile(r"^\| `([^`]+)` \|(.*)$")


def table(heading: str) -> dict[str, list[str]]:
    """The rows of the first table under ``heading`` (a Markdown heading line): first
    cell -> the other cells."""
    lines = (REPO / "README.md").read_text().splitlines()
    start = lines.index(heading)
    rows: dict[str, list[str]] = {}
    started = False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            started = True
            m = ROW.match(line)
            if m:
                rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
        elif started:
            break
    return rows


def test_the_table_reader_reads_rows() -> None:
    rows = table("### Collectors")
    assert rows["osd"][0] == "on" and rows["pgs"][0] == "**off**"


def test_collectors_table_names_every_collector_and_its_default() -> None:
    rows = table("### Collectors")
    documented = {name: cells[0] == "on" for name, cells in rows.items()}
    registered = {name: cls.default_enabled for name, cls in REGISTRY.items()}
    assert documented == registered


def test_checks_table_names_every_check() -> None:
    rows = table("## Tuning checks")
    # A check family (one check per profile entry) is one row: `sysctl.<name>`.
    registered = {f"{n}.<name>" if spec.family else n for n, spec in load_all().items()}
    assert set(rows) == registered
