#!/usr/bin/env python3
"""Write the Grafana dashboards of cephnode-exporter: ``python dashboards/generate.py``.

Two dashboards, both in Grafana's classic dashboard JSON model (schemaVersion 39, panels
placed with ``gridPos`` on the 24-column grid, Prometheus queries through the
``${datasource}`` variable, ``__inputs`` so that "Import dashboard" asks for the data
source):

- ``cephnode-fleet.json``: which of the 68 nodes / 630 OSDs are detuned and how much it
  costs. At that size it reads the recorded series of ``alerts/cephnode-rules.yml`` (per-OSD
  and per-host p99, fleet medians, C-state and kprofile shares) instead of re-evaluating
  40,000 histogram buckets on every refresh.
- ``cephnode-node.json``: one node (variables ``cluster``, ``instance``): its tuning report
  and every host and OSD fact behind it.

Why a generator and not hand-edited JSON: the files are long, panels share selectors and
units, and ids and grid positions must stay unique and non-overlapping. The JSON files are
committed; ``tests/test_dashboards.py`` fails when they differ from what this script writes
and runs every query against a real Prometheus. Standard library only.

The rooms: grafana.py (the JSON model: queries, panels, rows, layout), board.py
(variables, links, the dashboard), fleet_board.py, node_host.py, node_signals.py and
node_osd.py (the node dashboard's rows) and node_board.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fleet_board import fleet
from node_board import node

HERE = Path(__file__).resolve().parent


def render(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def dashboards() -> dict[str, str]:
    """File name -> contents of every dashboard."""
    return {
        "cephnode-fleet.json": render(fleet()),
        "cephnode-node.json": render(node()),
    }


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else HERE
    out.mkdir(parents=True, exist_ok=True)
    for name, text in dashboards().items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
