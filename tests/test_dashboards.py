"""The Grafana dashboards (dashboards/): current, well-formed, and every query valid and
answered by a real Prometheus holding real exporter output.

No Grafana runs here (there is none to install), so what Grafana would do is checked
piece by piece: the JSON model's structure (ids, grid, data source, variables), the metric
names against docs/metrics.md and the recording rules, and every panel query and variable
query against Debian's Prometheus.

The Prometheus holds a small fleet, six nodes of one cluster, built from real output:

- Each node is a reference fixture tree (tests/fixtures/nodes: the detuned and the tuned
  EPYC node) collected by the exporter with the CLI's wiring (``dump``), with three OSD
  admin sockets replaying the payloads recorded from the real Pacific cluster (a memstore
  and two BlueStore OSDs, ops in flight of the recorded stall) as tests/test_osd.py does.
  The collection kept is the exporter's second: its first read of the OSDs, with their op
  counts at 0, is the baseline its pooled host histograms start from at 0
  (``collect_after_reads``).
- The detuned nodes run kprofile on a fake perf replaying the reference IOMMU-contention
  profile (tests/test_kprofile.py). The last node has two faults: kprofile without a perf
  binary (the collector fails) and an OSD socket that never answers.
- One node adds the pgs collector's metrics of the recorded ``pg ls laggy wait`` reply
  (tests/fixtures/ceph/pgs), through the collector's own parser and metrics step.
- node_exporter (Debian's) reads each tree's sysfs for its network series, which the node
  dashboard joins on the host name.

A collection is a snapshot, so time is made by repetition: the snapshot is the first of 11
samples 30 s apart, and every counter (counters, histogram buckets, summary sums and counts)
keeps growing at its average rate over the time it accumulated in (``counter_age``): a
host's idle-state counters over the node's uptime, the OSD process's CPU time over the
process's life, kprofile's over its one 60 s window, and the recorded OSD counters over 5
minutes (chosen: the recording does not say how long its bench ran). The same factor for
all series of a histogram keeps it cumulative, so a quantile of the rates is the
snapshot's. ``promtool tsdb create-blocks-from openmetrics`` turns that into blocks ending
just before now, and Prometheus' own rule manager evaluates alerts/cephnode-rules.yml on
them (the rule groups' intervals shortened to 1 s so that the first evaluation comes at
once; the expressions are the file's).

What the fixture cannot have is listed in ``EMPTY``, with the reason: there is no Ceph mgr
in it, so the mgr's series (ceph_pg_laggy, ceph_pg_wait) are absent.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cephnode_exporter.ceph.pgs import parse_pg_ls
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors.pgs import build_metrics
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, Tree, need_tool, value
from tests.fixtures.kprofile import fakeperf
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_asok import hang
from tests.test_kprofile import iommu_contention, kprofile_flags
from tests.test_metrics_doc import documented
from tests.test_osd import FakeNode, RecordedOSD, busier, fixture_osd, impersonate, recorded_osd

DASHBOARDS = REPO / "dashboards"
FILES = ("cephnode-fleet.json", "cephnode-node.json")
RULES = REPO / "alerts" / "cephnode-rules.yml"
GRID_COLUMNS = 24
CLUSTER = "ceph-a"

# What Grafana would put in for the variables: one concrete choice each, as a user would
# pick on the dashboard (the node is a detuned one; its BlueStore OSDs; $__rate_interval
# as Grafana computes it for a 30 s scrape interval and a 6 h range, rounded up).
VALUES = {
    "cluster": CLUSTER,
    "instance": "ceph-osd-01:10060",
    "ceph_daemon": "(osd.1|osd.2)",
    "op": "write",
    "device_class": "unknown",
    "__rate_interval": "5m",
    "__interval": "30s",
    "__range": "6h",
}
# Grafana's own variables (and those of data links), defined by Grafana, not the dashboard.
BUILTIN = re.compile(r"__\w+")

# (file, panel title, refId) -> why the fixture has no data for it. Each must come back
# empty (an entry that gets data is stale and fails the test too).
EMPTY = {
    ("cephnode-fleet.json", "Laggy and waiting PGs (mgr)", "A"): (
        "the mgr's ceph_pg_laggy and ceph_pg_wait: the fixture has no Ceph mgr"
    ),
}


# ----------------------------------------------------------------------------- the files


def load(name: str) -> dict[str, Any]:
    return json.loads((DASHBOARDS / name).read_text())


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those nested in collapsed rows included."""
    out = []
    for p in board["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in panels(board):
        for t in p.get("targets", []):
            yield p, t


def test_committed_dashboards_are_current(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(DASHBOARDS / "generate.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(FILES)
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (DASHBOARDS / name).read_bytes(), (
            f"dashboards/{name} is not what generate.py writes: run `make generate`"
        )


@pytest.mark.parametrize("name", FILES)
def test_model(name: str) -> None:
    board = load(name)
    assert board["schemaVersion"] == 39
    assert board["uid"] == name.removesuffix(".json")
    assert board["id"] is None, "an exported dashboard carries no instance-local id"
    inputs = {i["name"]: i for i in board["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(board):
        assert p.get("title"), f"panel {p['id']} has no title"
        if p["type"] == "row":
            continue
        assert len(p.get("description", "")) > 40, f"{p['title']!r}: say what to look for"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"], f"{p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"{p['title']!r}: duplicate refId"
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], f"{p['title']!r}: target data source"
            assert t.get("expr", "").strip(), f"{p['title']!r} {t['refId']}: empty expr"
            assert t["format"] in ("time_series", "table", "heatmap")
        if p["type"] == "heatmap":
            assert all(t["format"] == "heatmap" for t in p["targets"])
            assert p["options"]["calculate"] is False
        if p["type"] == "table":
            assert all(t["format"] == "table" and t["instant"] for t in p["targets"])


@pytest.mark.parametrize("name", FILES)
def test_grid(name: str) -> None:
    """Inside the 24 columns, and no two panels on the same cell (rows included)."""
    board = load(name)
    cells: dict[tuple[int, int], str] = {}
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0, p["title"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= GRID_COLUMNS, f"{p['title']!r}: {g}"
        assert g["y"] >= 0
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                other = cells.setdefault((x, y), p["title"])
                assert other == p["title"], f"{p['title']!r} overlaps {other!r} at {x},{y}"


LABEL_VALUES = re.compile(r"label_values\((?:(.*),\s*)?(\w+)\)")
VARIABLE = re.compile(r"\$\{(\w+)(?:[:.][^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")


def used_variables(value: Any) -> set[str]:
    """Variable names referenced anywhere in the JSON (strings at any depth)."""
    if isinstance(value, str):
        return {next(g for g in m.groups() if g) for m in VARIABLE.finditer(value)}
    if isinstance(value, dict):
        return set().union(*(used_variables(v) for v in value.values()), set())
    if isinstance(value, list):
        return set().union(*(used_variables(v) for v in value), set())
    return set()


@pytest.mark.parametrize("name", FILES)
def test_every_variable_is_defined(name: str) -> None:
    board = load(name)
    defined = {v["name"] for v in board["templating"]["list"]}
    inputs = {i["name"] for i in board["__inputs"]}  # replaced when imported
    used = used_variables({k: v for k, v in board.items() if k != "__inputs"})
    undefined = {u for u in used if u not in defined | inputs and not BUILTIN.fullmatch(u)}
    assert not undefined, f"undefined variables: {sorted(undefined)}"
    # A variable's query may only use variables defined before it (Grafana's order).
    seen: set[str] = set()
    for v in board["templating"]["list"]:
        refs = used_variables(v.get("query", "")) - {v["name"]}
        assert refs <= seen, f"variable {v['name']} uses {sorted(refs - seen)} before definition"
        seen.add(v["name"])
    # Every variable the panels repeat over exists and allows several values.
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for p in panels(board):
        if "repeat" in p:
            assert variables[p["repeat"]]["multi"], p["title"]


# ----------------------------------------------------------------------------- metric names

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NUMBER = re.compile(r"(?<![\w:])(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*(?:\s*\()?")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on",
            "ignoring", "group_left", "group_right", "atan2"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names of a PromQL expression: identifiers that are not functions (followed
    by a parenthesis), keywords, label names (in matchers and label lists) or numbers."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers (strings are gone)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _LABEL_LIST.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        word = m.group(0)
        if word.endswith("(") or word in KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_name_parser() -> None:
    expr = (
        'sum by (le) (rate(a_bucket{x="y{", op=~"$op"}[$__rate_interval])) / on (cluster) '
        'group_left (d) b:c:d{q="0.5"} > 10e-6 or label_replace(c_total == 1, "s", "f", '
        '"", "") unless topk(10, d) and vector(0)'
    )
    assert metric_names(expr) == {"a_bucket", "b:c:d", "c_total", "d"}


def known_names() -> set[str]:
    """docs/metrics.md (with the series of histograms and summaries), recording rules."""
    names = set()
    for name, (kind, _, _) in documented().items():
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        if kind == "summary":
            names |= {f"{name}_sum", f"{name}_count"}
    rules = yaml.safe_load(RULES.read_text())
    names |= {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    return names


@pytest.mark.parametrize("name", FILES)
def test_every_metric_exists(name: str) -> None:
    """Each name is documented, recorded, the mgr's (ceph_) or node_exporter's (node_)."""
    known = known_names()
    board = load(name)
    unknown = set()
    for p, t in targets(board):
        for metric in metric_names(t["expr"]):
            if metric not in known and not metric.startswith(("ceph_", "node_")):
                unknown.add((p["title"], metric))
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            m = LABEL_VALUES.fullmatch(v["definition"])
            assert m, f"{v['name']}: not a label_values() query: {v['definition']}"
            for metric in metric_names(m.group(1) or ""):
                if metric not in known:
                    unknown.add((v["name"], metric))
    assert not unknown, f"metric names neither documented nor recorded: {sorted(unknown)}"


# ----------------------------------------------------------------------------- the fleet

STEP_S = 30
POINTS = 11
GROWING = ("_total", "_bucket", "_count", "_sum")


@dataclass
class Host:
    name: str
    tree: str
    osd_kinds: list[str] = field(default_factory=lambda: ["memstore", "bluestore", "bluestore"])
    kprofile: bool = False
    faults: bool = False
    pgs: bool = False


HOSTS = [
    Host("ceph-osd-01", "epyc9454p-detuned", kprofile=True),
    Host("ceph-osd-02", "epyc9454p-detuned", kprofile=True),
    Host("ceph-osd-03", "epyc9454p-tuned", pgs=True),
    Host("ceph-osd-04", "epyc9454p-tuned"),
    Host("ceph-osd-05", "epyc9454p-tuned"),
    Host("ceph-osd-06", "epyc9454p-tuned", faults=True),
]

# Seconds the recorded OSD counters are taken to have accumulated in (chosen; at least
# 1 op/s of each type so that the recorded quantiles exist) and kprofile's window interval.
OSD_AGE_S = 300.0
KPROFILE_INTERVAL_S = 60.0

# name, sorted labels -> (value, seconds it accumulated in, None for a gauge)
Series = dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float | None]]


def counter_age(tree: Tree) -> Callable[[str], float]:
    """Seconds each counter of a node accumulated in: its rate is value / age."""
    uptime = float((tree.proc / "uptime").read_text().split()[0])
    pid = fixture_osd(tree)[2]  # the process every fake socket's peer stands for
    stat = (tree.proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    process_age = uptime - int(stat[19]) / 100  # starttime, field 22, in USER_HZ ticks

    def age(name: str) -> float:
        if name.startswith("cephnode_cpu_idle_"):
            return uptime
        if name.startswith(("cephnode_osd_cpu_seconds", "cephnode_osd_context_switches")):
            return process_age
        if name.startswith("cephnode_kprofile_"):
            return KPROFILE_INTERVAL_S  # one completed window
        if name.startswith(("cephnode_osd_", "cephnode_exporter_")):
            return OSD_AGE_S
        raise AssertionError(f"no age for the counter {name}: add one")

    return age


def window_quantiles(
    families: list[Any], age: Callable[[str], float], avgs: dict[str, dict[str, Any]]
) -> list[Any]:
    """The exporter's latency quantile gauges as it reads them after a window at this
    collection's rates: each OSD's p99 and each pooled histogram's p50 and p99. One
    collection has no earlier read to take them from; the series here grow linearly
    from 0 over their age, so any window holds the lifetime distribution. The exporter's
    own code computes them, with its 1 op/s floor."""
    from cephnode_exporter.ceph.latency import histogram_quantile
    from prometheus_client.core import GaugeMetricFamily

    out = []
    for source, name, keys, quantiles in (
        ("cephnode_osd_op_latency_seconds", "cephnode_osd_op_latency_quantile_seconds",
         ("ceph_daemon", "op"), (0.99,)),
        ("cephnode_osd_host_op_latency_seconds",
         "cephnode_osd_host_op_latency_quantile_seconds", ("op", "media"), (0.5, 0.99)),
    ):  # fmt: skip
        hist = next((f for f in families if f.name == source), None)
        if hist is None:
            continue
        per: dict[tuple[str, ...], list[tuple[float, float]]] = {}
        for s in hist.samples:
            if s.name.endswith("_bucket"):
                key = tuple(s.labels[k] for k in keys)
                per.setdefault(key, []).append((float(s.labels["le"]), s.value))
        gauge = GaugeMetricFamily(name, "dashboard fixture", labels=[*keys, "phi"])
        for key, buckets in sorted(per.items()):
            buckets.sort()
            if buckets[-1][1] / age(f"{source}_bucket") < 1:
                continue
            for q in quantiles:
                value = histogram_quantile(q, buckets)
                if value is not None:
                    gauge.add_metric([*key, repr(q)], value)
        out.append(gauge)
    out.extend(window_means(families, age, avgs))
    return out


def window_means(
    families: list[Any], age: Callable[[str], float], avgs: dict[str, dict[str, Any]]
) -> list[Any]:
    """The exporter's mean gauges over its window, at this collection's rates (see
    window_quantiles): each perf dump average's sum over its count (``avgs``: per OSD, as
    the collector read them), the process's CPU seconds over its client ops, per OSD and
    for the node, each with the exporter's 1/s floor."""
    from cephnode_exporter.collectors.osd_latency import MEAN_MIN_RATE
    from prometheus_client.core import GaugeMetricFamily

    def per_osd(name: str) -> dict[tuple[tuple[str, str], ...], float]:
        family = next((f for f in families if f.name == name), None)
        out: dict[tuple[tuple[str, str], ...], float] = {}
        for s in family.samples if family is not None else ():
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "mode"))
            out[key] = out.get(key, 0.0) + s.value
        return out

    commit = GaugeMetricFamily(
        "cephnode_osd_bluestore_commit_latency_mean_seconds", "fixture", labels=["ceph_daemon"]
    )
    rocksdb = GaugeMetricFamily(
        "cephnode_osd_rocksdb_latency_mean_seconds", "fixture", labels=["ceph_daemon", "stage"]
    )
    events_age = age("cephnode_osd_bluestore_commit_latency_seconds_count")
    for key, family, stage in (
        ("bluestore.commit_lat", commit, None),
        ("rocksdb.get_latency", rocksdb, "get"),
        ("rocksdb.submit_latency", rocksdb, "submit"),
        ("rocksdb.submit_sync_latency", rocksdb, "submit_sync"),
    ):
        for daemon, per in sorted(avgs.items()):
            avg = per.get(key)
            if avg is not None and avg.count / events_age >= MEAN_MIN_RATE:
                labels = [daemon] if stage is None else [daemon, stage]
                family.add_metric(labels, avg.sum / avg.count)
    cpu_age, ops_age = age("cephnode_osd_cpu_seconds_total"), age("cephnode_osd_ops_total")
    cpu, ops = per_osd("cephnode_osd_cpu_seconds"), per_osd("cephnode_osd_ops")
    per_op = GaugeMetricFamily("cephnode_osd_cpu_seconds_per_op", "fixture", labels=["ceph_daemon"])
    host_cpu = host_ops = 0.0
    for key in sorted(cpu.keys() & ops.keys()):
        cpu_rate, op_rate = cpu[key] / cpu_age, ops[key] / ops_age
        host_cpu, host_ops = host_cpu + cpu_rate, host_ops + op_rate
        if op_rate >= MEAN_MIN_RATE:
            per_op.add_metric([dict(key)["ceph_daemon"]], cpu_rate / op_rate)
    host = GaugeMetricFamily("cephnode_osd_host_cpu_seconds_per_op", "fixture")
    if host_ops >= MEAN_MIN_RATE:
        host.add_metric([], host_cpu / host_ops)
    return [commit, rocksdb, per_op, host]


def _series(
    families: list[Any], labels: dict[str, str], out: Series, age: Callable[[str], float]
) -> None:
    """Samples of metric families with target labels added, counters with their age."""
    for family in families:
        counter = family.type in ("counter", "histogram", "summary")
        for s in family.samples:
            key = (s.name, tuple(sorted({**s.labels, **labels}.items())))
            growing = counter and s.name.endswith(GROWING)
            out[key] = (s.value, age(s.name) if growing else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 30) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# The node_exporter series the node dashboard joins (netclass collector, gauges).
NODE_EXPORTER_GAUGES = {"node_network_mtu_bytes", "node_network_speed_bytes", "node_network_up"}


def node_exporter_network(tree: Tree) -> list[Any]:
    """node_exporter's network series of a fixture tree (its netclass collector on the
    tree's sysfs)."""
    binary = need_tool("prometheus-node-exporter", "prometheus-node-exporter")
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--path.sysfs={tree.sys}", f"--path.procfs={tree.proc}",
         f"--path.rootfs={tree.rootfs}", "--collector.disable-defaults",
         "--collector.netclass", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        text = wait_http(f"http://127.0.0.1:{port}/metrics", proc, "node_exporter").decode()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return [f for f in text_string_to_metric_families(text) if f.name in NODE_EXPORTER_GAUGES]


def collect_after_reads(
    flags: list[str], osds: list[RecordedOSD], kprofile: bool = False
) -> Collection:
    """A collection after a first one, with the CLI's wiring, as a running exporter
    scrapes: its pooled host histograms start at 0 with it and hold the ops between its
    reads of the OSDs. The first read finds each recorded OSD with its op counts at 0
    (started as the recorded counters' OSD_AGE_S began, the age the counters grow by
    here), the second the recording: the pools hold the recorded ops, and every per-OSD
    series is the recording's. With ``kprofile``, collections go on until kprofile has a
    window (as tests/test_kprofile.py collect_after_window)."""
    replies = [dict(osd.replies) for osd in osds]
    for osd in osds:
        busier(osd, 0, restarted=True)  # every op count, latency sum and event at 0
    scraper = build_scraper(parse_args(["dump", *flags]))
    try:
        scraper.collect(10.0)
        for osd, recorded in zip(osds, replies, strict=True):
            osd.replies.update(recorded)
        deadline = time.monotonic() + 30
        while True:
            collection = scraper.collect(10.0)
            if not kprofile or value(
                collection, "cephnode_scrape_collector_success", collector="kprofile"
            ):
                return collection
            assert time.monotonic() < deadline, "no kprofile window completed"
            time.sleep(0.05)
    finally:
        scraper.close()


def collect_host(
    host: Host, tree: Tree, first_id: int, work: Path
) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """One node's collection: the tree, its OSD sockets, kprofile and faults as set; its
    metric families and each answering OSD's perf dump averages."""
    node = FakeNode()
    recorded: list[RecordedOSD] = []
    try:
        osd_dirs = sorted((tree.rootfs / "var/lib/ceph/osd").iterdir())
        for i, kind in enumerate(host.osd_kinds):
            data = f"/var/lib/ceph/osd/{osd_dirs[i].name}"
            recorded.append(recorded_osd(kind, osd_data=data))
            node.add(first_id + i, recorded[-1])
        flags = [*tree.flags, f"--ceph.socket-dir={node.dir}"]
        if host.faults:
            node.add(first_id + len(host.osd_kinds), hang)
            flags += ["--collector.osd.timeout=0.3", "--collector.kprofile",
                      f"--collector.kprofile.perf={work / 'no-such-perf'}"]  # fmt: skip
        if host.kprofile:
            stream = work / f"{host.name}-profile.txt"
            stream.write_text(iommu_contention())
            perf = fakeperf.install(work / f"{host.name}-perf", "ok", stream)
            flags = kprofile_flags(tree, perf, *flags[len(tree.flags) :])
        collection = collect_after_reads(flags, recorded, kprofile=host.kprofile)
    finally:
        node.close()
    families = collection.families()
    if host.pgs:
        reply = (REPO / "tests/fixtures/ceph/pgs/laggy.json").read_bytes()
        families += build_metrics(parse_pg_ls(reply))
    avgs = {
        o.ceph_daemon: o.counters.avgs
        for outcome in collection.outcomes
        if outcome.name == "osd" and outcome.facts is not None
        for o in outcome.facts.osds
        if o.ok and o.counters is not None
    }
    return families, avgs


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in labels)


def write_openmetrics(series: Series, path: Path, end: int) -> None:
    times = [end - STEP_S * (POINTS - 1 - i) for i in range(POINTS)]
    with path.open("w") as f:
        for (name, labels), (value, age) in sorted(series.items()):
            prefix = f"{name}{{{_labels(labels)}}} "
            for i, t in enumerate(times):
                v = value * (1 + i * STEP_S / age) if age else value
                f.write(f"{prefix}{_fmt(v)} {t}\n")
        f.write("# EOF\n")


class Prometheus:
    """Debian's Prometheus on a backfilled TSDB, evaluating the recording rules."""

    def __init__(self, work: Path, rules: Path) -> None:
        self.port = free_port()
        config = work / "prometheus.yml"
        config.write_text(f"global: {{evaluation_interval: 1s}}\nrule_files: [{rules}]\n")
        self.log = (work / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [need_tool("prometheus", "prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=30d"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_http(f"{self.url}/-/ready", self.proc, "prometheus", timeout=60)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        """The reply's JSON, errors included (status "error" with errorType, error)."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}") or {"status": "error", "error": str(e)}

    def wait_for_rules(self, timeout: float = 30) -> list[dict[str, Any]]:
        """Every rule evaluated at least once; the rules as the API reports them."""
        deadline = time.monotonic() + timeout
        while True:
            groups = self.api("/api/v1/rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if rules and all(r["health"] != "unknown" for r in rules):
                return rules
            assert time.monotonic() < deadline, "recording rules not evaluated in time"
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    promtool = need_tool("promtool", "prometheus")
    need_tool("prometheus", "prometheus")
    work = tmp_path_factory.mktemp("dashboards")
    trees: dict[str, Tree] = {}
    networks: dict[str, list[Any]] = {}
    series: Series = {}
    for i, host in enumerate(HOSTS):
        if host.tree not in trees:
            dest = work / host.tree
            build_tree(load_node(host.tree), dest)
            trees[host.tree] = Tree(dest)
            impersonate(trees[host.tree])  # the fake sockets' peer is this process
            networks[host.tree] = node_exporter_network(trees[host.tree])
        tree = trees[host.tree]
        families, avgs = collect_host(host, tree, 3 * i, work)
        gauges = window_quantiles(families, counter_age(tree), avgs)
        families = [f for f in families if f.name not in {g.name for g in gauges}] + gauges
        target = {"cluster": CLUSTER, "instance": f"{host.name}:10060", "job": "cephnode"}
        _series(families, target, series, counter_age(tree))
        # node_exporter is another job on another port, without the cluster label.
        node_target = {"instance": f"{host.name}:9100", "job": "node"}
        _series(networks[host.tree], node_target, series, counter_age(tree))
    om = work / "fleet.om"
    write_openmetrics(series, om, end=int(time.time()) - 1)
    res = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(work / "data")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    # The rule file as it is, but evaluated every second: the first evaluation of a group
    # comes within one interval of the start (rules/manager.go, Group.run).
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    rules_path = work / "rules.yml"
    rules_path.write_text(yaml.safe_dump(rules, sort_keys=False))
    prom = Prometheus(work, rules_path)
    try:
        failed = [(r["name"], r.get("lastError")) for r in prom.wait_for_rules()
                  if r["health"] != "ok"]  # fmt: skip
        assert not failed, f"recording rules failed: {failed}"
        yield prom
    finally:
        prom.stop()
        shutil.rmtree(work / "data", ignore_errors=True)


# ----------------------------------------------------------------------------- queries


def host_of(instance: str, regex: str) -> str:
    """Apply a Grafana variable regex (``/.../``, first capture group) to a value."""
    m = re.search(regex.strip("/"), instance)
    assert m is not None, f"{regex} does not match {instance}"
    return m.group(1) if m.groups() else m.group(0)


def substitute(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        assert name in values, f"no test value for variable {name}"
        return values[name]

    return VARIABLE.sub(one, text)


def values_for(board: dict[str, Any]) -> dict[str, str]:
    values = dict(VALUES)
    for v in board["templating"]["list"]:
        if v["name"] == "host":
            values["host"] = host_of(values["instance"], v["regex"])
    return values


@pytest.mark.parametrize("name", FILES)
def test_variable_queries(prometheus: Prometheus, name: str) -> None:
    """Each variable's label_values() offers the value the panel test uses."""
    board = load(name)
    values = values_for(board)
    for v in board["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = LABEL_VALUES.fullmatch(v["definition"])
        assert m, f"{v['name']}: not a label_values() query: {v['definition']}"
        selector, label = m.groups()
        params = {"match[]": substitute(selector, values)} if selector else {}
        reply = prometheus.api(f"/api/v1/label/{label}/values", **params)
        assert reply["status"] == "success", (v["name"], reply)
        offered = reply["data"]
        if v["regex"]:
            offered = [host_of(x, v["regex"]) for x in offered]
        wanted = values[v["name"]]
        if v["name"] == "ceph_daemon":
            assert {"osd.1", "osd.2"} <= set(offered), offered
        else:
            assert wanted in offered, f"{v['name']}: {wanted!r} not in {offered}"


def test_every_query_is_valid_and_has_data(prometheus: Prometheus) -> None:
    errors, empty, stale = [], [], []
    queried = 0
    for name in FILES:
        board = load(name)
        values = values_for(board)
        for p, t in targets(board):
            expr = substitute(t["expr"], values)
            reply = prometheus.api("/api/v1/query", query=expr)
            queried += 1
            key = (name, p["title"], t["refId"])
            if reply.get("status") != "success":
                errors.append((key, reply.get("error"), expr))
                continue
            result = reply["data"]["result"]
            if key in EMPTY:
                if result:
                    stale.append(key)
                continue
            if not result:
                empty.append((key, expr))
            # The legend names labels the series have.
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")):
                missing = [r["metric"] for r in result if label not in r["metric"]]
                assert not missing, f"{key}: legend label {label} missing from {missing[:2]}"
            if t["format"] == "heatmap":
                edges = {r["metric"].get("le") for r in result}
                assert None not in edges and len(edges) > 2, f"{key}: not buckets: {edges}"
    assert queried > 60
    assert not errors, f"invalid queries: {errors}"
    assert not empty, f"queries without data (fix, or list in EMPTY with a reason): {empty}"
    assert not stale, f"EMPTY lists queries that have data now: {stale}"
    listed = {(n, p["title"], t["refId"]) for n in FILES for p, t in targets(load(n))}
    assert set(EMPTY) <= listed, f"EMPTY names missing panels: {set(EMPTY) - listed}"


def test_the_fleet_shows_the_detuned_nodes(prometheus: Prometheus) -> None:
    """The detuned table and the host comparisons name the fixture's detuned nodes."""
    board = load("cephnode-fleet.json")
    values = values_for(board)
    by_title = {p["title"]: p for p in panels(board)}

    def query(title: str, ref: int = 0) -> list[dict[str, Any]]:
        expr = substitute(by_title[title]["targets"][ref]["expr"], values)
        reply = prometheus.api("/api/v1/query", query=expr)
        assert reply["status"] == "success", reply
        return reply["data"]["result"]

    failing = {
        (r["metric"]["instance"], r["metric"]["check"])
        for r in query("Detuned nodes: failing and warning checks")
        if r["metric"]["status"] == "fail"
    }
    for host in ("ceph-osd-01:10060", "ceph-osd-02:10060"):
        assert {(host, "cpu.cstates"), (host, "cpu.governor"), (host, "iommu.nvme")} <= failing
    assert not {c for i, c in failing if i == "ceph-osd-04:10060" and c.startswith("cpu.")}
    deep = {r["metric"]["instance"]: float(r["value"][1])
            for r in query("Deep C-state residency per host")}  # fmt: skip
    # The detuned reference spends about 62 % of its CPU time in C2, the tuned one none.
    assert 0.5 < deep["ceph-osd-01:10060"] < 0.75
    assert deep["ceph-osd-04:10060"] < 0.01
    spin = {r["metric"]["instance"]: float(r["value"][1])
            for r in query("IOMMU spin-lock share of busy CPU per host")}  # fmt: skip
    assert set(spin) == {"ceph-osd-01:10060", "ceph-osd-02:10060"}
    assert all(0.5 < v < 0.7 for v in spin.values())
    failing_collectors = {(r["metric"]["instance"], r["metric"]["collector"])
                          for r in query("Failing collectors")}  # fmt: skip
    assert failing_collectors == {("ceph-osd-06:10060", "kprofile")}
    silent = {r["metric"]["ceph_daemon"] for r in query("OSD sockets not answering")}
    assert silent == {"osd.18"}
    laggy = {r["metric"]["instance"]: float(r["value"][1])
             for r in query("Hosts in the most laggy or waiting PGs")}  # fmt: skip
    # osd.2 (replica of the 3 recorded laggy PGs) is on ceph-osd-01, osd.3 on ceph-osd-02.
    assert laggy == {"ceph-osd-01:10060": 3.0, "ceph-osd-02:10060": 3.0}
