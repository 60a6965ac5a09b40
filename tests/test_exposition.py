"""Our text encoder against prometheus_client's: byte-identical on every input."""

from __future__ import annotations

import math

import pytest
from cephnode_exporter.exposition import encode
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import generate_latest

from tests.conftest import Tree, collect
from tests.test_osd import osd_collection


class _Registry:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def reference(families: list[Metric]) -> bytes:
    return generate_latest(_Registry(families))  # type: ignore[arg-type]


@pytest.mark.parametrize("node", ["epyc9454p-tuned", "epyc9454p-detuned"])
def test_reference_nodes(node_trees: dict[str, Tree], node: str) -> None:
    families = collect(node_trees[node].flags).families()
    assert len(families) > 50
    assert encode(families) == reference(families)


def test_recorded_osds(node_trees: dict[str, Tree]) -> None:
    families = osd_collection(node_trees["epyc9454p-detuned"]).families()
    text = encode(families)
    assert b'cephnode_osd_op_latency_seconds_bucket{ceph_daemon="osd.3"' in text
    assert text == reference(families)


def test_escapes_types_and_values() -> None:
    gauge = GaugeMetricFamily("g", 'help with \\ and\nnewline "q"', labels=["a", "b"])
    for a, v in [
        ('quote " back \\ nl \n', 1.0),
        ("ünïcode", -0.0),
        ("nan", math.nan),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("big", 12345678.0),
        ("bigger", 1e22),
        ("small", 1e-7),
        ("neg", -12345678.9),
        ("int", 3),
    ]:
        gauge.add_metric([a, "x"], v)
    gauge.add_metric(["same", "x"], 2.0)  # repeats a label string: the memo's case
    counter = CounterMetricFamily("c", "a counter", labels=["k"], created=1.5)
    counter.add_metric(["v"], 7, created=1700000000.25)
    hist = HistogramMetricFamily("h_seconds", "hist", labels=["op"])
    hist.add_metric(["r"], [("0.1", 1), ("1e+07", 2), ("+Inf", 3)], 4.5)
    summary = SummaryMetricFamily("s_seconds", "sum", count_value=2, sum_value=0.5)
    info = InfoMetricFamily("i", "info", value={"version": "16.2.15"})
    ts = GaugeMetricFamily("t", "with a timestamp")
    ts.add_metric([], 1.0, timestamp=1700000000.123)
    empty = GaugeMetricFamily("e", "no samples")
    families: list[Metric] = [gauge, counter, hist, summary, info, ts, empty]
    assert encode(families) == reference(families)


def test_value_text_cache_stays_small_while_values_churn() -> None:
    """Counters and durations bring values that never repeat; the cache of value texts
    stays within its bound (it held 2.5 MB at the old bound of 16,384, which `make soak`
    saw as RSS growth), and what it prints is what prometheus_client prints."""
    from cephnode_exporter import exposition

    for scrape in range(3000):
        family = GaugeMetricFamily("cephnode_test_churn", "Values that move.", labels=["n"])
        for n in range(5):
            family.add_metric([str(n)], scrape * 5 + n + 0.25)  # never seen before
        family.add_metric(["fixed"], 1.0)  # the same every scrape
        assert encode([family]) == reference([family])
        assert len(exposition._VALUE_TEXT) <= exposition._VALUE_TEXT_MAX + 6
    assert exposition._VALUE_TEXT_MAX <= 4096
