"""End to end: the real entry point's `dump` on the detuned reference node, against a
golden file, then `promtool check metrics` on it (Prometheus' own linter)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import GOLDEN, Tree, compare_golden, need_tool, run_cli

# Values that legitimately change between runs: timings and the Python version.
_VOLATILE = (
    re.compile(r"^(cephnode_scrape_collector_duration_seconds\{[^}]*\}) .*$", re.M),
    re.compile(r'python_version="[^"]*"'),
)


def normalise(text: str) -> str:
    text = _VOLATILE[0].sub(r"\1 <duration>", text)
    return _VOLATILE[1].sub('python_version="<python>"', text)


@pytest.fixture(scope="module")
def dump(node_trees: dict[str, Tree]) -> str:
    proc = run_cli("dump", *node_trees["epyc9454p-detuned"].flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", "a clean fixture must not log anything"
    return proc.stdout


def test_dump_matches_golden(request: pytest.FixtureRequest, dump: str) -> None:
    compare_golden(request, GOLDEN / "epyc9454p-detuned.prom", normalise(dump))


def test_dump_passes_promtool(dump: str) -> None:
    promtool = need_tool("promtool", "prometheus")
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=dump, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # promtool prints lint problems even when exiting 0 on some versions
    assert proc.stdout.strip() == "" and proc.stderr.strip() == "", proc.stdout + proc.stderr


def test_dump_is_bounded_in_series(dump: str) -> None:
    series = [line for line in dump.splitlines() if line and not line.startswith("#")]
    assert 40 < len(series) < 600
