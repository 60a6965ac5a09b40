"""Alert proof harness: a generated 630-OSD fleet and a replay of the alert rules over it.

``fleet`` models the reference cluster (68 OSD nodes, 630 NVMe OSDs, plus three MON
nodes) with noise, a fleet-wide load swing and injected faults, and writes every series
the rules read as OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``.
``replay`` runs a real Prometheus on those blocks and evaluates the rule files over
simulated time. Used by tests/test_alerts_scale.py and tests/bench/bench_rules.py.
"""
