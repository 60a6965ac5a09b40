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
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Grafana's classic JSON model as of Grafana 10.4 / 11 (kinds/dashboard in grafana/grafana).
SCHEMA_VERSION = 39
GRAFANA_VERSION = "10.4.0"
GRID_COLUMNS = 24
# Every query goes through this variable; "Import dashboard" fills DS_PROMETHEUS in as the
# variable's initial value (the import replaces every "${DS_PROMETHEUS}" in the file).
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DS_INPUT = "DS_PROMETHEUS"
TAGS = ["ceph", "cephnode-exporter"]
FLEET_UID = "cephnode-fleet"
NODE_UID = "cephnode-node"

# ----------------------------------------------------------------------------- selectors

# Fleet: every series of the cluster. Node: one exporter target. OSD: its selected OSDs.
FLEET = 'cluster="$cluster"'
NODE = 'cluster="$cluster", instance="$instance"'
OSDS = 'cluster="$cluster", instance="$instance", ceph_daemon=~"$ceph_daemon"'
# node_exporter is another scrape target of the same host (another port, maybe another
# job without the cluster label): match its instance on the host name alone.
NODE_EXPORTER = 'instance=~"$host(:[0-9]+)?"'


def q(expr: str) -> str:
    """An expression with the selector placeholders filled in. PromQL is full of braces,
    so placeholders are <FLEET>, <NODE>, <OSDS> and <NODE_EXPORTER> rather than format()."""
    for key, value in (
        ("<FLEET>", FLEET),
        ("<NODE>", NODE),
        ("<OSDS>", OSDS),
        ("<NODE_EXPORTER>", NODE_EXPORTER),
    ):
        expr = expr.replace(key, value)
    return " ".join(expr.split())


# ----------------------------------------------------------------------------- building blocks


def target(
    expr: str, legend: str = "", fmt: str = "time_series", instant: bool = False
) -> dict[str, Any]:
    """A Prometheus query (grafana/grafana public/app/plugins/datasource/prometheus
    dataquery: expr, legendFormat, format, instant, range); refId is set by the panel."""
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": q(expr),
        "format": fmt,
        "instant": instant,
        "legendFormat": legend or "__auto",
        "range": not instant,
    }


def table_target(expr: str) -> dict[str, Any]:
    """An instant query shown as a table: one row per series, its labels as columns."""
    return target(expr, fmt="table", instant=True)


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for value, color in steps],
    }


GREEN_ONLY = thresholds((None, "green"))


def value_map(mapping: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """A value mapping: raw value -> (display text, color)."""
    return [
        {
            "type": "value",
            "options": {
                raw: {"text": text, "color": color, "index": i}
                for i, (raw, (text, color)) in enumerate(mapping.items())
            },
        }
    ]


def override(name: str, **properties: Any) -> dict[str, Any]:
    """Field override by column or series name; ``custom__x`` stands for ``custom.x``."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": key.replace("__", "."), "value": value} for key, value in properties.items()
        ],
    }


def override_regexp(pattern: str, **properties: Any) -> dict[str, Any]:
    """Field override by a regular expression on the series name."""
    return {**override(pattern, **properties), "matcher": {"id": "byRegexp", "options": pattern}}


# The fleet's reference series beside a node's or an OSD's: white, dashed, thicker.
DASHED = {"fill": "dash", "dash": [10, 10]}
FLEET_MEDIAN_LINE = override_regexp(
    "fleet median.*",
    color={"mode": "fixed", "fixedColor": "white"},
    custom__lineStyle=DASHED,
    custom__lineWidth=2,
)
P50_LINE = override_regexp(".* p50", custom__lineStyle=DASHED)


def organize(
    hide: list[str], rename: dict[str, str] | None = None, order: list[str] | None = None
) -> dict[str, Any]:
    """The "organize fields" transformation: hide columns, rename them, order them."""
    return {
        "id": "organize",
        "options": {
            "excludeByName": {name: True for name in hide},
            "indexByName": {name: i for i, name in enumerate(order or [])},
            "renameByName": rename or {},
        },
    }


# Columns a table never needs: the sample time and the target labels.
PLUMBING = ["Time", "__name__", "job", "cluster"]


@dataclass
class Panel:
    """One panel; ``w`` and ``h`` are its size on the grid, the layout places it."""

    type: str
    title: str
    description: str
    targets: list[dict[str, Any]]
    w: int = 12
    h: int = 8
    unit: str = "short"
    options: dict[str, Any] = field(default_factory=dict)
    custom: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    overrides: list[dict[str, Any]] = field(default_factory=list)
    transformations: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def render(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        targets = []
        for i, t in enumerate(self.targets):
            targets.append({**t, "refId": chr(ord("A") + i)})
        defaults: dict[str, Any] = {
            "unit": self.unit,
            "color": {"mode": "palette-classic"},
            "custom": self.custom,
            "mappings": [],
            "thresholds": GREEN_ONLY,
        }
        defaults.update(self.defaults)
        return {
            "id": panel_id,
            "type": self.type,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.h, "w": self.w, "x": x, "y": y},
            "fieldConfig": {"defaults": defaults, "overrides": self.overrides},
            "options": self.options,
            "targets": targets,
            "transformations": self.transformations,
            **self.extra,
        }


def timeseries(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str = "short",
    stack: bool = False,
    w: int = 12,
    h: int = 8,
    **kwargs: Any,
) -> Panel:
    custom = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 30 if stack else 0,
        "showPoints": "never",
        "spanNulls": False,
        "axisSoftMin": 0,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
    }
    options = {
        "legend": {
            "showLegend": True,
            "displayMode": "table",
            "placement": "bottom",
            "calcs": ["lastNotNull", "max"],
            "sortBy": "Last *",
            "sortDesc": True,
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return Panel("timeseries", title, description, targets, w, h, unit, options, custom, **kwargs)


def table(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    transformations: list[dict[str, Any]],
    unit: str = "short",
    w: int = 12,
    h: int = 8,
    sort: list[dict[str, Any]] | None = None,
    **kwargs: Any,
) -> Panel:
    if len(targets) > 1:
        # One row per label set: the queries' values side by side as "Value #A", "#B", ...
        transformations = [{"id": "merge", "options": {}}, *transformations]
    options = {
        "showHeader": True,
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
        "sortBy": sort or [],
    }
    custom = {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False}
    return Panel(
        "table",
        title,
        description,
        targets,
        w,
        h,
        unit,
        options,
        custom,
        transformations=transformations,
        **kwargs,
    )


def reduce_options() -> dict[str, Any]:
    return {"calcs": ["lastNotNull"], "fields": "", "values": False}


def stat(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str = "short",
    w: int = 4,
    h: int = 4,
    **kwargs: Any,
) -> Panel:
    options = {
        "reduceOptions": reduce_options(),
        "colorMode": "value",
        "graphMode": "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "auto",
        "wideLayout": True,
        "showPercentChange": False,
    }
    return Panel("stat", title, description, targets, w, h, unit, options, **kwargs)


def bargauge(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str = "short",
    w: int = 12,
    h: int = 8,
    **kwargs: Any,
) -> Panel:
    options = {
        "reduceOptions": reduce_options(),
        "orientation": "horizontal",
        "displayMode": "gradient",
        "valueMode": "color",
        "showUnfilled": True,
        "namePlacement": "auto",
        "sizing": "auto",
        "minVizHeight": 16,
        "minVizWidth": 8,
        "maxVizHeight": 300,
    }
    return Panel("bargauge", title, description, targets, w, h, unit, options, **kwargs)


def heatmap(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    w: int = 12,
    h: int = 8,
    **kwargs: Any,
) -> Panel:
    """Prometheus buckets (format heatmap: Grafana de-accumulates the ``le`` series), not
    a heatmap Grafana calculates itself."""
    options = {
        "calculate": False,
        "cellGap": 1,
        "color": {
            "mode": "scheme",
            "scheme": "Oranges",
            "fill": "dark-orange",
            "scale": "exponential",
            "exponent": 0.5,
            "steps": 64,
            "reverse": False,
        },
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "legend": {"show": True},
        "rowsFrame": {"layout": "auto"},
        "showValue": "never",
        "tooltip": {"mode": "single", "show": True, "yHistogram": False},
        "yAxis": {"axisPlacement": "left", "unit": "s", "reverse": False},
    }
    custom = {
        "scaleDistribution": {"type": "linear"},
        "hideFrom": {"legend": False, "tooltip": False, "viz": False},
    }
    return Panel("heatmap", title, description, targets, w, h, "short", options, custom, **kwargs)


def state_timeline(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    mappings: list[Any],
    w: int = 12,
    h: int = 8,
) -> Panel:
    options = {
        "mergeValues": True,
        "showValue": "never",
        "alignValue": "left",
        "rowHeight": 0.9,
        "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    custom = {"lineWidth": 0, "fillOpacity": 80}
    return Panel(
        "state-timeline",
        title,
        description,
        targets,
        w,
        h,
        "short",
        options,
        custom,
        defaults={"mappings": mappings, "color": {"mode": "thresholds"}},
    )


@dataclass
class Row:
    title: str
    panels: list[Panel]


def layout(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows top to bottom; in a row, panels left to right, wrapping at 24 columns. Ids
    are sequential from 1 in that order."""
    out: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row in rows:
        out.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in row.panels:
            if x + panel.w > GRID_COLUMNS:
                y += line_height
                x, line_height = 0, 0
            out.append(panel.render(next_id, x, y))
            next_id += 1
            x += panel.w
            line_height = max(line_height, panel.h)
        y += line_height
    return out


# ----------------------------------------------------------------------------- variables


def datasource_variable() -> dict[str, Any]:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "description": "The Prometheus that scrapes cephnode-exporter (and the Ceph mgr and "
        "node_exporter) and evaluates alerts/cephnode-rules.yml.",
        "query": "prometheus",
        "current": {"selected": False, "text": f"${{{DS_INPUT}}}", "value": f"${{{DS_INPUT}}}"},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_variable(
    name: str,
    label: str,
    query: str,
    description: str,
    *,
    regex: str = "",
    hide: int = 0,
    multi: bool = False,
    include_all: bool = False,
) -> dict[str, Any]:
    """A variable filled from label values (``label_values(selector, label)``), refreshed
    when the time range changes, since nodes and OSDs come and go."""
    var: dict[str, Any] = {
        "type": "query",
        "name": name,
        "label": label,
        "description": description,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query,
        "current": {},
        "hide": hide,
        "includeAll": include_all,
        "multi": multi,
        "options": [],
        "refresh": 2,
        "regex": regex,
        "skipUrlSync": False,
        "sort": 1,
    }
    if include_all:
        var["allValue"] = ".*"
    return var


def custom_variable(name: str, label: str, values: list[str], description: str) -> dict[str, Any]:
    return {
        "type": "custom",
        "name": name,
        "label": label,
        "description": description,
        "query": ",".join(values),
        "current": {"selected": True, "text": values[0], "value": values[0]},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [{"selected": i == 0, "text": v, "value": v} for i, v in enumerate(values)],
        "skipUrlSync": False,
    }


CLUSTER_VAR = query_variable(
    "cluster",
    "Cluster",
    "label_values(cephnode_exporter_build_info, cluster)",
    "The cluster label both scrape jobs set (alerts/prometheus.yml).",
)
OP_VAR = custom_variable(
    "op",
    "Op type",
    ["write", "read", "readwrite"],
    "Client op type of the OSD latency histograms.",
)
# The fleet compares OSDs on reads and writes only (alerts/cephnode-rules.yml: an OSD's
# read-modify-write p99 says where the object-class targets are placed).
FLEET_OP_VAR = custom_variable(
    "op",
    "Op type",
    ["write", "read"],
    "Client op type the fleet compares OSDs on (read-modify-write ops: node dashboard).",
)


# ----------------------------------------------------------------------------- dashboard


def dashboard(
    uid: str,
    title: str,
    description: str,
    rows: list[Row],
    variables: list[dict[str, Any]],
    links: list[dict[str, Any]],
) -> dict[str, Any]:
    panels = layout(rows)
    used = sorted({p["type"] for p in panels if p["type"] != "row"})
    names = {
        "bargauge": "Bar gauge",
        "heatmap": "Heatmap",
        "stat": "Stat",
        "state-timeline": "State timeline",
        "table": "Table",
        "timeseries": "Time series",
    }
    requires = [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
    ] + [{"type": "panel", "id": t, "name": names[t], "version": ""} for t in used]
    return {
        "__inputs": [
            {
                "name": DS_INPUT,
                "label": "Prometheus",
                "description": "The Prometheus that scrapes cephnode-exporter and evaluates "
                "alerts/cephnode-rules.yml",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": requires,
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": links,
        "liveNow": False,
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "tags": TAGS,
        "templating": {"list": [datasource_variable(), *variables]},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def link_to(title: str, uid: str, tooltip: str) -> dict[str, Any]:
    return {
        "title": title,
        "type": "link",
        "url": f"/d/{uid}",
        "tooltip": tooltip,
        "icon": "dashboard",
        "tags": [],
        "asDropdown": False,
        "includeVars": True,
        "keepTime": True,
        "targetBlank": False,
    }


# A cell of a fleet table that opens the node dashboard on its instance.
NODE_LINK = [
    {
        "title": "Open the node dashboard",
        "url": f"/d/{NODE_UID}?var-cluster=${{cluster}}&var-instance=${{__value.raw}}"
        "&${__url_time_range}",
    }
]
STATUS_MAP = value_map(
    {"fail": ("FAIL", "red"), "warn": ("WARN", "orange"), "pass": ("pass", "green")}
)

# Each failing or warning check result, labelled with its status (the exporter writes a
# series of 1 for those only).
CHECK_STATUS = (
    'label_replace(cephnode_tuning_check_failed{<SEL>} == 1, "status", "fail", "", "")'
    ' or label_replace(cephnode_tuning_check_warning{<SEL>} == 1, "status", "warn", "", "")'
)

# ----------------------------------------------------------------------------- fleet

# The exporter's p99 of each OSD of one op type, with the mgr's device class joined, and
# the fleet median of the same class, computed when a panel asks: no rule records them
# (writing 1,260 p99 series a minute only for dashboards cost the rules about 25 ms per
# evaluation at 630 OSDs, docs/performance.md).
P99_OSD = (
    'cephnode_osd_op_latency_quantile_seconds{<FLEET>, op="$op", phi="0.99"}'
    " * on (cluster, ceph_daemon) group_left (device_class)"
    ' ceph_daemon_device_class:ceph_osd_metadata:group{<FLEET>, device_class=~"$device_class"}'
)
FLEET_MEDIAN_OF_OSD_P99 = f"quantile by (cluster, device_class, op) (0.5, {P99_OSD})"


def fleet() -> dict[str, Any]:
    detuned = Row(
        "Detuned nodes",
        [
            stat(
                "OSD hosts",
                "Hosts whose exporter found OSD admin sockets (answering or not). Fewer "
                "than the cluster's OSD hosts: an exporter is down or cannot see "
                "/var/run/ceph (see Scrape health).",
                [target("count(instance:cephnode_osd_sockets:max1h{<FLEET>})")],
            ),
            stat(
                "Nodes failing a check",
                "Exporters with at least one failing tuning check: each is a detuned "
                "node until the table below is empty. Warnings are not counted here.",
                [
                    target(
                        "count(count by (instance) (cephnode_tuning_check_failed{<FLEET>} == 1))"
                        " or vector(0)"
                    )
                ],
                defaults={"thresholds": thresholds((None, "green"), (1, "red"))},
            ),
            stat(
                "Collectors failing",
                "Collector runs that failed in the latest scrape, over all exporters. A "
                "failed collector has no series and its checks are unknown: a detuned "
                "node can hide behind it.",
                [target("count(cephnode_scrape_collector_success{<FLEET>} == 0) or vector(0)")],
                defaults={"thresholds": thresholds((None, "green"), (1, "orange"))},
            ),
            stat(
                "OSDs not answering",
                "OSD admin sockets that did not answer the exporter in time (stopped or "
                "hung OSD, stale socket): their latency is missing from every panel below.",
                [target("count(cephnode_osd_scrape_success{<FLEET>} == 0) or vector(0)")],
                defaults={"thresholds": thresholds((None, "green"), (1, "red"))},
            ),
            bargauge(
                "Nodes per failing check",
                "How many nodes fail each tuning check. A check failing on a few nodes "
                "only is a node drifting from the fleet (a BIOS reset re-enabling C-states, "
                "a reinstall without iommu=pt); one failing everywhere is a fleet-wide "
                "setting or a profile that does not fit.",
                [
                    target(
                        "count by (check) (count by (check, instance) "
                        "(cephnode_tuning_check_failed{<FLEET>} == 1))",
                        "{{check}}",
                        instant=True,
                    )
                ],
                w=8,
                h=8,
                defaults={"thresholds": thresholds((None, "red")), "min": 0},
            ),
            table(
                "Detuned nodes: failing and warning checks",
                "Every failing and warning tuning check by node, check and subject (the "
                "NVMe controller, namespace, interface or OSD it concerns). The same results "
                "as `cephnode-exporter check` on the node, which prints the fix. Click an "
                "instance to open its node dashboard.",
                [table_target(CHECK_STATUS.replace("<SEL>", "<FLEET>"))],
                [organize([*PLUMBING, "Value"], order=["instance", "check", "subject", "status"])],
                w=16,
                h=8,
                sort=[{"displayName": "instance", "desc": False}],
                overrides=[
                    override(
                        "status",
                        mappings=STATUS_MAP,
                        custom__cellOptions={"type": "color-background"},
                    ),
                    override("instance", links=NODE_LINK),
                ],
            ),
        ],
    )
    latency = Row(
        "OSD latency: hosts and OSDs against the fleet",
        [
            timeseries(
                "p99 $op latency per host vs the fleet median",
                "Each host's p99 over all its OSDs' ops (the histogram its exporter pools "
                "per disk media), against the median of the hosts' p99 of the same media "
                "(white, dashed). A detuned node (deep "
                "C-states, IOMMU lock contention, powersave governor) lifts all its OSDs "
                "together: its line "
                "stays above the median at every load, while a load swing moves the median "
                "with it. Recorded series; only hosts with at least 1 op/s.",
                [
                    # Per media, not per $device_class: media is the exporter's view of
                    # the disks (nvme, ssd, hdd), which the mgr's classes may rename.
                    target(
                        "instance_media_op:cephnode_osd_host_op_latency_quantile_seconds:p99"
                        '{<FLEET>, op="$op"}',
                        "{{instance}} {{media}}",
                    ),
                    target(
                        "quantile by (cluster, media, op) (0.5, "
                        "instance_media_op:cephnode_osd_host_op_latency_quantile_seconds:p99"
                        '{<FLEET>, op="$op"})',
                        "fleet median ({{media}})",
                    ),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[FLEET_MEDIAN_LINE],
            ),
            bargauge(
                "Hosts whose typical OSD is slow",
                "The median of a host's own OSDs' mean latency over the last 2 minutes, "
                "over the fleet median of all OSDs' (same device class and op type), top "
                "15: what CephNodeHostLatencyOutlier reads. One bad OSD cannot move a "
                "host's median: a ratio well above 1 means the whole host is slow, the "
                "signature of a detuned node rather than of a failing drive.",
                [
                    target(
                        "topk(15, max without (quantile) (instance_device_class_op:"
                        "cephnode_osd_op_latency_seconds:"
                        "quantile_ceph_daemon_mean_rate2m_over_fleet_median"
                        '{<FLEET>, op="$op", device_class=~"$device_class"}))',
                        "{{instance}}",
                        instant=True,
                    )
                ],
                unit="none",
                w=12,
                h=9,
                defaults={
                    "thresholds": thresholds((None, "green"), (1.25, "orange"), (1.5, "red")),
                    "decimals": 2,
                    "min": 0,
                },
            ),
            table(
                "Top 10 OSD outliers: p99 over the fleet median",
                "The OSDs whose p99 is furthest above the fleet median of their device "
                "class. An OSD alone here is the drive, its PCIe link or its shard threads "
                "(check the node dashboard); several OSDs of one host point at the host.",
                [
                    table_target(
                        f"topk(10, {P99_OSD} / on (cluster, device_class, op) group_left "
                        f"{FLEET_MEDIAN_OF_OSD_P99})"
                    ),
                    table_target(
                        f"{P99_OSD} and on (cluster, ceph_daemon) topk(10, {P99_OSD} / on "
                        f"(cluster, device_class, op) group_left {FLEET_MEDIAN_OF_OSD_P99})"
                    ),
                ],
                [
                    organize(
                        [*PLUMBING, "op", "phi"],
                        rename={"Value #A": "p99 / fleet median", "Value #B": "p99"},
                        order=["instance", "ceph_daemon", "device_class", "Value #A", "Value #B"],
                    )
                ],
                w=12,
                h=9,
                sort=[{"displayName": "p99 / fleet median", "desc": True}],
                overrides=[
                    override("Value #B", unit="s"),
                    override("p99", unit="s"),
                    override("instance", links=NODE_LINK),
                ],
            ),
            timeseries(
                "p99 $op latency of the 10 slowest OSDs",
                "The absolute p99 of the slowest OSDs with the fleet median of the OSDs' "
                "p99 (white, dashed). A line that stays on top for hours is chronic, one that "
                "jumps with a laggy PG or a scrub is transient.",
                [
                    target(f"topk(10, {P99_OSD})", "{{ceph_daemon}} ({{instance}})"),
                    target(FLEET_MEDIAN_OF_OSD_P99, "fleet median ({{device_class}})"),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[FLEET_MEDIAN_LINE],
            ),
            timeseries(
                "OSD CPU per op, per host",
                "CPU seconds the host's OSD processes spend per client op they serve, "
                "against the fleet median per OSD (white, dashed). Higher than the fleet on the "
                "same load: debug logging left on, a RocksDB built without optimisation "
                "(osd.rocksdb_build), or spin-lock contention burning cycles.",
                [
                    target("cephnode_osd_host_cpu_seconds_per_op{<FLEET>}", "{{instance}}"),
                    target(
                        "cluster_device_class:cephnode_osd_cpu_seconds_per_op:"
                        'quantile_ceph_daemon_rate5m{<FLEET>, device_class=~"$device_class",'
                        ' quantile="0.5"}',
                        "fleet median per OSD ({{device_class}})",
                    ),
                ],
                unit="s",
                overrides=[FLEET_MEDIAN_LINE],
            ),
            bargauge(
                "BlueStore commit latency: slowest OSDs over the fleet median",
                "Mean BlueStore commit latency of each OSD over the fleet median of its "
                "device class, top 10. High with a normal CPU per op: the drive, its "
                "queue (scheduler, PCIe link) or the IOMMU in the I/O path.",
                [
                    target(
                        "topk(10, ceph_daemon:cephnode_osd_bluestore_commit_latency_seconds:mean5m"
                        '{<FLEET>, device_class=~"$device_class"} / on (cluster, device_class) '
                        "group_left cluster_device_class:cephnode_osd_bluestore_commit_latency_"
                        'seconds:quantile_ceph_daemon_mean5m{<FLEET>, quantile="0.5"})',
                        "{{ceph_daemon}} ({{instance}})",
                        instant=True,
                    )
                ],
                unit="none",
                defaults={
                    "thresholds": thresholds((None, "green"), (1.5, "orange"), (2, "red")),
                    "decimals": 2,
                    "min": 0,
                },
            ),
        ],
    )
    pgs = Row(
        "Laggy and waiting PGs",
        [
            timeseries(
                "Laggy and waiting PGs (mgr)",
                "PGs in state laggy (the primary's read lease ran out because a replica "
                "did not renew it) and wait (after peering, waiting for old leases): both "
                "block client I/O. From the mgr's ceph_pg_laggy and ceph_pg_wait; the "
                "reference cluster had 1,651 laggy PGs when throughput collapsed.",
                [target("cluster_state:ceph_pg_laggy_wait:sum{<FLEET>}", "{{state}}")],
                w=8,
            ),
            bargauge(
                "Hosts in the most laggy or waiting PGs",
                "Laggy or waiting PGs with at least one OSD on the host (the pgs collector, "
                "`pg ls laggy wait`), over the cluster's total. The stalled host is the one "
                "common to most of them: check its network, CPU and OSD logs.",
                [
                    target(
                        "topk(10, instance:cephnode_osd_laggy_pgs:sum{<FLEET>})",
                        "{{instance}}",
                        instant=True,
                    )
                ],
                w=8,
                defaults={"thresholds": thresholds((None, "orange")), "min": 0},
            ),
            table(
                "OSDs in the most laggy or waiting PGs",
                "Per OSD, the laggy or waiting PGs it is in (any role), with the "
                "cluster's total as the pgs collector listed it. The OSD that is a replica "
                "of most of them is the one not renewing leases.",
                [
                    table_target("topk(10, ceph_daemon:cephnode_osd_laggy_pgs:sum{<FLEET>})"),
                ],
                [organize(PLUMBING, rename={"Value": "laggy or waiting PGs"})],
                w=8,
                sort=[{"displayName": "laggy or waiting PGs", "desc": True}],
            ),
        ],
    )
    host = Row(
        "Host tuning: C-states, IOMMU, governors",
        [
            timeseries(
                "Deep C-state residency per host",
                "Share of CPU time in idle states whose exit latency is above 10 us (ACPI "
                "C2 on EPYC, C6 on Xeon). A tuned node has none; the detuned reference node "
                "spends about 60 % there, and every I/O completion that wakes such a CPU "
                "pays the exit latency (cpu.cstates).",
                [
                    target(
                        "instance:cephnode_cpu_idle_deep_residency:ratio_rate5m{<FLEET>}",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            timeseries(
                "Wake-up cost from deep C-states per host",
                "Estimated share of CPU time spent waking up from the deep states (entries "
                "x exit latency per second, per CPU). This time sits on the critical path "
                "of interrupts and I/O completions: the latency a BIOS not in maximum "
                "performance mode adds.",
                [
                    target(
                        "instance:cephnode_cpu_idle_deep_wakeup_seconds:ratio_rate5m{<FLEET>}",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            timeseries(
                "IOMMU spin-lock share of busy CPU per host",
                "Share of non-idle CPU samples spinning on a lock under IOMMU/IOVA code "
                "(kprofile collector, over 10 minutes of windows). Above a few % the NVMe "
                "DMA mappings serialise on the IOVA allocator: boot with iommu=pt. The "
                "reference cluster's detuned nodes showed 61 %. Hosts without kprofile "
                "enabled have no line.",
                [
                    target(
                        "instance:cephnode_kprofile_spinlock_iommu:ratio_rate10m{<FLEET>}",
                        "{{instance}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            bargauge(
                "NVMe controllers with translated DMA per host",
                "NVMe controllers whose IOMMU group translates DMA (DMA or DMA-FQ default "
                "domain) per host: each I/O then allocates an IOVA under a lock "
                "(iommu.nvme). 0 on a node booted with iommu=pt.",
                [
                    target(
                        "sort_desc(sum by (instance) (cephnode_iommu_dma_translated{<FLEET>}) > 0)",
                        "{{instance}}",
                        instant=True,
                    )
                ],
                w=12,
                defaults={"thresholds": thresholds((None, "red")), "min": 0},
            ),
            bargauge(
                "CPUs not on the performance governor per host",
                "Online CPUs whose frequency governor is not performance (powersave, "
                "ondemand, schedutil): they ramp up late after an idle period, adding "
                "latency to every burst (cpu.governor).",
                [
                    target(
                        "sort_desc(sum by (instance) (cephnode_cpu_scaling_governor_cpus{<FLEET>,"
                        ' governor!="performance"}) > 0)',
                        "{{instance}}",
                        instant=True,
                    )
                ],
                w=12,
                defaults={"thresholds": thresholds((None, "orange")), "min": 0},
            ),
        ],
    )
    health = Row(
        "Scrape health",
        [
            table(
                "Failing collectors",
                "Collectors that failed or timed out in the latest scrape, by node. Their "
                "series are missing and their checks unknown; the exporter's log says why "
                "(kprofile without perf or CAP_PERFMON, an unreadable socket directory, "
                "...).",
                [table_target("cephnode_scrape_collector_success{<FLEET>} == 0")],
                [organize([*PLUMBING, "Value"], order=["instance", "collector"])],
                w=8,
                overrides=[override("instance", links=NODE_LINK)],
            ),
            table(
                "OSD sockets not answering",
                "OSDs whose admin socket did not answer within --collector.osd.timeout: a "
                "stopped or hung OSD, or a stale socket. A stopped OSD still accepts "
                "connections and never replies; the OSD's own log and `ceph osd tree` say "
                "whether it is down.",
                [table_target("cephnode_osd_scrape_success{<FLEET>} == 0")],
                [organize([*PLUMBING, "Value"], order=["instance", "ceph_daemon"])],
                w=8,
                overrides=[override("instance", links=NODE_LINK)],
            ),
            timeseries(
                "Slowest collectors",
                "The longest time each collector took in a scrape over all nodes. One "
                "approaching --collector.timeout (5 s) is about to fail: a hung OSD socket, "
                "a slow sysfs read on a many-core node.",
                [
                    target(
                        "max by (collector) (cephnode_scrape_collector_duration_seconds{<FLEET>})",
                        "{{collector}}",
                    )
                ],
                unit="s",
                w=8,
            ),
        ],
    )
    variables = [
        CLUSTER_VAR,
        FLEET_OP_VAR,
        query_variable(
            "device_class",
            "Device class",
            "label_values(ceph_daemon_device_class:ceph_osd_metadata:group"
            '{cluster="$cluster"}, device_class)',
            "CRUSH device class from the mgr's ceph_osd_metadata; 'unknown' for OSDs "
            "the mgr has no metadata for.",
            multi=True,
            include_all=True,
        ),
    ]
    return dashboard(
        FLEET_UID,
        "Ceph nodes: fleet",
        "Which Ceph storage nodes are detuned (deep C-states, IOMMU translation, governors, "
        "NVMe and NIC settings, debug logging) and what it costs in OSD latency, against "
        "the fleet's medians. Reads the recording rules of alerts/cephnode-rules.yml.",
        [detuned, latency, pgs, host, health],
        variables,
        [link_to("Node", NODE_UID, "One node's tuning report and the facts behind it")],
    )


# ----------------------------------------------------------------------------- node


def stage_mean(metric: str) -> str:
    """Mean of a summary over the selected OSDs: rate of _sum over rate of _count."""
    return (
        f"sum(rate({metric}_sum{{<OSDS>}}[$__rate_interval])) / "
        f"sum(rate({metric}_count{{<OSDS>}}[$__rate_interval]))"
    )


def node() -> dict[str, Any]:
    report = Row(
        "Tuning report",
        [
            table(
                "Tuning report",
                "Every tuning check of the node with its status: a row per failing or "
                "warning subject, and one pass row for a check none of whose subjects "
                "fails or warns. The same results as `cephnode-exporter check`, which also "
                "prints what was observed and the fix. Skipped checks and those whose "
                "collector failed have no row.",
                [
                    table_target(
                        CHECK_STATUS.replace("<SEL>", "<NODE>")
                        + " or label_replace(cephnode_tuning_check_hash{<NODE>} unless on "
                        "(check) (cephnode_tuning_check_failed{<NODE>} or "
                        'cephnode_tuning_check_warning{<NODE>}), "status", "pass", "", "")'
                    )
                ],
                [organize([*PLUMBING, "instance", "Value"], order=["check", "subject", "status"])],
                w=16,
                h=10,
                sort=[{"displayName": "status", "desc": False}],
                overrides=[
                    override(
                        "status",
                        mappings=STATUS_MAP,
                        custom__cellOptions={"type": "color-background"},
                    ),
                ],
            ),
            stat(
                "Failing checks",
                "Check results that fail on this node (one per subject). Each is a "
                "detuning to fix: the report beside it names it.",
                [target("count(cephnode_tuning_check_failed{<NODE>}) or vector(0)")],
                w=4,
                h=5,
                defaults={"thresholds": thresholds((None, "green"), (1, "red"))},
            ),
            stat(
                "Warning checks",
                "Check results that warn on this node (sysctls, tuned profile, NIC rings "
                "and MTU, PGs per OSD, NUMA placement).",
                [target("count(cephnode_tuning_check_warning{<NODE>}) or vector(0)")],
                w=4,
                h=5,
                defaults={"thresholds": thresholds((None, "green"), (1, "orange"))},
            ),
            _profile_stat(),
            stat(
                "Collectors failing",
                "Collectors of this exporter that failed in the latest scrape; their checks "
                "are unknown and absent from the report.",
                [target("count(cephnode_scrape_collector_success{<NODE>} == 0) or vector(0)")],
                w=4,
                h=5,
                defaults={"thresholds": thresholds((None, "green"), (1, "orange"))},
            ),
        ],
    )
    cpu = Row(
        "CPU: C-states and frequency",
        [
            timeseries(
                "C-state residency per state",
                "Share of CPU time in each idle state (stacked; the rest is busy). On a "
                "tuned node only POLL and C1 (exit latency 1-2 us) hold time; residency in "
                "C2/C6 means the BIOS or the kernel lets CPUs sleep deeply, and I/O "
                "completions wait for them to wake (cpu.cstates).",
                [
                    target(
                        "sum by (state) (rate(cephnode_cpu_idle_state_time_seconds_total{<NODE>}"
                        "[$__rate_interval])) / scalar(sum(cephnode_cpu_idle_cpus{<NODE>}))",
                        "{{state}}",
                    )
                ],
                unit="percentunit",
                stack=True,
                w=8,
            ),
            timeseries(
                "Wake-up cost per state",
                "Estimated share of CPU time spent waking up from each state (entries x "
                "exit latency, per CPU). Deep states cost most per wake-up; a high value "
                "next to many entries is latency on every interrupt.",
                [
                    target(
                        "sum by (state) (rate(cephnode_cpu_idle_state_wakeup_seconds_total{<NODE>}"
                        "[$__rate_interval])) / scalar(sum(cephnode_cpu_idle_cpus{<NODE>}))",
                        "{{state}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            timeseries(
                "Entries too deep for the wake-up pattern",
                "Share of each state's entries whose idle period was shorter than its "
                "target residency (above): the governor keeps choosing a state the "
                "workload interrupts too soon, paying the exit latency for nothing.",
                [
                    target(
                        "sum by (state) (rate(cephnode_cpu_idle_state_above_total{<NODE>}"
                        "[$__rate_interval])) / sum by (state) (rate("
                        "cephnode_cpu_idle_state_entries_total{<NODE>}[$__rate_interval]))",
                        "{{state}}",
                    )
                ],
                unit="percentunit",
                w=8,
            ),
            table(
                "Idle states",
                "Each idle state's exit latency, target residency and the CPUs it is "
                "enabled on. A state with exit latency above 10 us enabled on any CPU "
                "fails cpu.cstates: disable it (BIOS maximum performance, "
                "processor.max_cstate=1, or cpupower idle-set -D 11).",
                [
                    table_target("cephnode_cpu_idle_state_exit_latency_seconds{<NODE>}"),
                    table_target("cephnode_cpu_idle_state_target_residency_seconds{<NODE>}"),
                    table_target("cephnode_cpu_idle_state_enabled_cpus{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={
                            "Value #A": "exit latency",
                            "Value #B": "target residency",
                            "Value #C": "enabled on CPUs",
                        },
                        order=["state", "Value #A", "Value #B", "Value #C"],
                    )
                ],
                w=8,
                sort=[{"displayName": "exit latency", "desc": False}],
                overrides=[
                    override("exit latency", unit="s"),
                    override("target residency", unit="s"),
                ],
            ),
            bargauge(
                "CPUs per frequency governor",
                "Online CPUs per scaling governor. Anything but performance (powersave, "
                "ondemand, schedutil) lets cores drop their clock when idle and ramp up late "
                "(cpu.governor).",
                [
                    target(
                        "cephnode_cpu_scaling_governor_cpus{<NODE>}", "{{governor}}", instant=True
                    )
                ],
                w=8,
                defaults={"min": 0},
                overrides=[override("performance", color={"mode": "fixed", "fixedColor": "green"})],
            ),
            bargauge(
                "CPUs per scaling driver, and boost",
                "Online CPUs per cpufreq scaling driver, and whether boost (turbo) is on "
                "(1). A driver change after a BIOS update (acpi-cpufreq to amd-pstate) "
                "changes which governors and preferences apply.",
                [
                    target("cephnode_cpu_scaling_driver_cpus{<NODE>}", "{{driver}}", instant=True),
                    target("cephnode_cpu_boost_enabled{<NODE>}", "boost enabled", instant=True),
                ],
                w=8,
                defaults={"min": 0},
            ),
        ],
    )
    iommu = Row(
        "IOMMU and kernel profile",
        [
            table(
                "IOMMU translation per NVMe controller",
                "Per NVMe controller its IOMMU group and the group's default domain. "
                "'translated' (DMA or DMA-FQ) makes every I/O allocate an IOVA under a "
                "spin lock: the reference cluster's bottleneck 2 (iommu.nvme). Boot with "
                "iommu=pt to get 'identity'.",
                [
                    table_target(
                        "cephnode_iommu_dma_translated{<NODE>} * on (cluster, instance, "
                        "controller) group_left (group, type) cephnode_iommu_group_info{<NODE>}"
                    )
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={"Value": "DMA"},
                        order=["controller", "group", "type", "Value"],
                    )
                ],
                w=8,
                h=9,
                sort=[{"displayName": "controller", "desc": False}],
                overrides=[
                    override(
                        "DMA",
                        mappings=value_map(
                            {"1": ("translated", "red"), "0": ("passthrough", "green")}
                        ),
                        custom__cellOptions={"type": "color-background"},
                    )
                ],
            ),
            table(
                "IOMMU units and boot parameters",
                "IOMMU units the kernel drives (0: no IOMMU, nothing translated) and the "
                "IOMMU parameters on the kernel command line. Without iommu=pt (or "
                "iommu.passthrough=1) an active IOMMU translates NVMe DMA.",
                [
                    table_target(
                        "cephnode_iommu_kernel_params_info{<NODE>} * on (cluster, instance) "
                        "group_left cephnode_iommu_units{<NODE>}"
                    )
                ],
                [organize([*PLUMBING, "instance"], rename={"Value": "IOMMU units"})],
                w=8,
                h=9,
            ),
            timeseries(
                "Busy CPU samples per class (kprofile)",
                "What the non-idle CPU samples of the kprofile collector did, over 10 "
                "minutes of windows: spinlock_iommu (spinning under IOMMU/IOVA code), "
                "spinlock (other contended locks), iommu, kernel, user. A large spin-lock "
                "share is CPU burnt waiting, not working.",
                [
                    target(
                        "sum by (class) (rate(cephnode_kprofile_samples_total"
                        '{<NODE>, class!="idle"}[10m])) / scalar(sum(rate('
                        'cephnode_kprofile_samples_total{<NODE>, class!="idle"}[10m])))',
                        "{{class}}",
                    )
                ],
                unit="percentunit",
                stack=True,
                w=8,
                h=9,
            ),
            timeseries(
                "IOMMU spin-lock share",
                "Share of busy CPU samples spinning on a lock under IOMMU/IOVA code: the "
                "latest window (what kernel.spinlock_iommu judges, 5 % by default) and "
                "smoothed over 10 minutes, with all spin locks for comparison.",
                [
                    target("cephnode_kprofile_spinlock_iommu_ratio{<NODE>}", "latest window"),
                    target(
                        "instance:cephnode_kprofile_spinlock_iommu:ratio_rate10m{<NODE>}",
                        "IOMMU spin locks, 10 min",
                    ),
                    target(
                        "instance:cephnode_kprofile_spinlock:ratio_rate10m{<NODE>}",
                        "all spin locks, 10 min",
                    ),
                ],
                unit="percentunit",
                w=12,
            ),
            bargauge(
                "Top spin-lock callers",
                "The functions taking the contended spin locks in the latest kprofile "
                "window, as a share of busy samples. alloc_iova / iommu_dma_alloc_iova at "
                "the top is IOMMU translation (boot with iommu=pt); other callers point at "
                "other contention (the block layer, the network stack).",
                [
                    target(
                        "sort_desc(cephnode_kprofile_spinlock_caller_ratio{<NODE>})",
                        "{{function}}",
                        instant=True,
                    )
                ],
                unit="percentunit",
                w=12,
                defaults={
                    "min": 0,
                    "max": 1,
                    "thresholds": thresholds((None, "orange"), (0.05, "red")),
                },
            ),
        ],
    )
    nvme = Row(
        "NVMe",
        [
            table(
                "NVMe controllers: queues and PCIe link",
                "Per controller: I/O queues (queue_count, admin queue included), NUMA node "
                "and the PCIe link, trained against maximum. A link below its maximum speed "
                "or width caps the drive's bandwidth (nvme.pcie_link): reseat the drive, "
                "check the backplane, riser and the slot's BIOS link speed.",
                [
                    table_target("cephnode_nvme_queues{<NODE>}"),
                    table_target("cephnode_nvme_numa_node{<NODE>}"),
                    table_target("cephnode_nvme_pcie_current_link_transfers_per_second{<NODE>}"),
                    table_target("cephnode_nvme_pcie_max_link_transfers_per_second{<NODE>}"),
                    table_target("cephnode_nvme_pcie_current_link_width{<NODE>}"),
                    table_target("cephnode_nvme_pcie_max_link_width{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={
                            "Value #A": "queues",
                            "Value #B": "NUMA node",
                            "Value #C": "link speed",
                            "Value #D": "max speed",
                            "Value #E": "link width",
                            "Value #F": "max width",
                        },
                        order=[
                            "controller",
                            "Value #A",
                            "Value #B",
                            "Value #C",
                            "Value #D",
                            "Value #E",
                            "Value #F",
                        ],
                    )
                ],
                w=12,
                h=9,
                sort=[{"displayName": "controller", "desc": False}],
            ),
            table(
                "PCIe links trained below their maximum",
                "Controllers whose link trained slower or narrower than the controller "
                "supports (value: the trained speed or width). Empty on a healthy node.",
                [
                    table_target(
                        "cephnode_nvme_pcie_current_link_width{<NODE>} < "
                        "cephnode_nvme_pcie_max_link_width{<NODE>} or "
                        "cephnode_nvme_pcie_current_link_transfers_per_second{<NODE>} < "
                        "cephnode_nvme_pcie_max_link_transfers_per_second{<NODE>}"
                    )
                ],
                [
                    organize(
                        ["Time", "job", "cluster", "instance"],
                        rename={"__name__": "metric", "Value": "trained"},
                    )
                ],
                w=12,
                h=9,
            ),
            table(
                "Namespaces: scheduler and queue settings",
                "Per NVMe namespace: the I/O scheduler (anything but none adds a lock and "
                "a sort on every request: nvme.scheduler), hardware queues, nr_requests, "
                "rq_affinity, nomerges, polling, writeback throttling and read-ahead.",
                [
                    table_target("cephnode_nvme_scheduler_info{<NODE>}"),
                    table_target("cephnode_nvme_hw_queues{<NODE>}"),
                    table_target("cephnode_nvme_queue_requests{<NODE>}"),
                    table_target("cephnode_nvme_queue_rq_affinity{<NODE>}"),
                    table_target("cephnode_nvme_queue_nomerges{<NODE>}"),
                    table_target("cephnode_nvme_queue_io_poll{<NODE>}"),
                    table_target("cephnode_nvme_queue_wbt_latency_seconds{<NODE>}"),
                    table_target("cephnode_nvme_queue_read_ahead_bytes{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance", "Value #A"],
                        rename={
                            "Value #B": "hw queues",
                            "Value #C": "nr_requests",
                            "Value #D": "rq_affinity",
                            "Value #E": "nomerges",
                            "Value #F": "io_poll",
                            "Value #G": "wbt latency",
                            "Value #H": "read-ahead",
                        },
                        order=[
                            "device",
                            "scheduler",
                            "Value #B",
                            "Value #C",
                            "Value #D",
                            "Value #E",
                            "Value #F",
                            "Value #G",
                            "Value #H",
                        ],
                    )
                ],
                w=16,
                h=9,
                sort=[{"displayName": "device", "desc": False}],
                overrides=[
                    override("wbt latency", unit="s"),
                    override("read-ahead", unit="bytes"),
                    override(
                        "scheduler",
                        mappings=[
                            {
                                "type": "regex",
                                "options": {
                                    "pattern": "^(?!none$).*",
                                    "result": {"color": "red", "index": 0},
                                },
                            }
                        ],
                        custom__cellOptions={"type": "color-text"},
                    ),
                ],
            ),
            timeseries(
                "Requests in flight per namespace",
                "Requests issued to each NVMe namespace and not completed. Uneven across "
                "namespaces of equal OSDs: one drive (or its link) is slower and its OSD "
                "queues up.",
                [target("sum by (device) (cephnode_nvme_inflight_requests{<NODE>})", "{{device}}")],
                w=8,
                h=9,
            ),
        ],
    )
    net = Row(
        "Network",
        [
            table(
                "Ports: driver, bond, NUMA node, MTU and speed",
                "Each physical port with its driver, PCI function, bond and NUMA node, "
                "and node_exporter's MTU and link speed (node_network_mtu_bytes, "
                "node_network_speed_bytes of the same host). An MTU below 9000 on a Ceph "
                "network fragments every large message (net.mtu); a port on another NUMA "
                "node than the OSDs' crosses the interconnect.",
                [
                    table_target("cephnode_network_device_info{<NODE>}"),
                    table_target("cephnode_network_numa_node{<NODE>}"),
                    table_target(
                        "max by (device) (node_network_mtu_bytes{<NODE_EXPORTER>}) and on "
                        "(device) max by (device) (cephnode_network_device_info{<NODE>})"
                    ),
                    table_target(
                        "max by (device) (node_network_speed_bytes{<NODE_EXPORTER>}) and on "
                        "(device) max by (device) (cephnode_network_device_info{<NODE>})"
                    ),
                ],
                [
                    organize(
                        [*PLUMBING, "instance", "Value #A"],
                        rename={"Value #B": "NUMA node", "Value #C": "MTU", "Value #D": "speed"},
                        order=[
                            "device",
                            "driver",
                            "pci",
                            "master",
                            "Value #B",
                            "Value #C",
                            "Value #D",
                        ],
                    )
                ],
                w=12,
                h=7,
                overrides=[
                    override("speed", unit="Bps"),
                    override(
                        "MTU",
                        thresholds=thresholds((None, "red"), (9000, "green")),
                        custom__cellOptions={"type": "color-text"},
                    ),
                ],
            ),
            table(
                "NIC rings: current against the driver maximum",
                "RX and TX descriptor rings per port and the largest the driver accepts "
                "(ethtool -g). Rings below the maximum drop packets in bursts at 100 GbE "
                "(net.rings): ethtool -G <dev> rx <max> tx <max>.",
                [
                    table_target("cephnode_network_ring_entries{<NODE>}"),
                    table_target("cephnode_network_ring_max_entries{<NODE>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance"],
                        rename={"Value #A": "entries", "Value #B": "maximum"},
                        order=["device", "ring", "Value #A", "Value #B"],
                    )
                ],
                w=12,
                h=7,
            ),
        ],
    )
    osd_latency = Row(
        "OSD latency",
        [
            heatmap(
                "Op latency of $ceph_daemon ($op)",
                "Distribution of client op latency of the OSD over time, from its "
                "histogram buckets (log2 edges from 100 us). A band moving up at one load "
                "is the OSD getting slower; a second band well above the first is a "
                "subset of ops waiting (replicas, a laggy PG, deep C-state wake-ups). One "
                "panel per selected OSD.",
                [
                    target(
                        "sum by (le) (rate(cephnode_osd_op_latency_seconds_bucket{<OSDS>, "
                        'op="$op"}[$__rate_interval]))',
                        "{{le}}",
                        fmt="heatmap",
                    )
                ],
                w=8,
                h=8,
                extra={"repeat": "ceph_daemon", "repeatDirection": "h", "maxPerRow": 3},
            ),
        ],
    )
    osd_quantiles = Row(
        "OSD latency quantiles and stages",
        [
            timeseries(
                "p99 and p50 $op latency per OSD",
                "Each OSD's p99 (the exporter's) and p50 (dashed, computed here from the "
                "node's own buckets: no alert needs it fleet-wide), against the fleet median "
                "of the OSDs' p99 (white, dashed; reads and writes only: the fleet does not "
                "compare read-modify-write ops). All OSDs of the node above the fleet: the host "
                "is detuned; one OSD above: its drive, link or shard threads.",
                [
                    # The exporter's p99: read-modify-write ops too, which the fleet
                    # rules leave out.
                    target(
                        'cephnode_osd_op_latency_quantile_seconds{<OSDS>, op="$op", phi="0.99"}',
                        "{{ceph_daemon}} p99",
                    ),
                    # Where the p99 exists: at least 1 op/s, as for the p99.
                    target(
                        "histogram_quantile(0.5, sum by (ceph_daemon, le) (rate("
                        'cephnode_osd_op_latency_seconds_bucket{<OSDS>, op="$op"}[5m])))'
                        " and on (ceph_daemon) "
                        'cephnode_osd_op_latency_quantile_seconds{<OSDS>, op="$op", '
                        'phi="0.99"}',
                        "{{ceph_daemon}} p50",
                    ),
                    target(
                        "quantile by (device_class) (0.5, "
                        'cephnode_osd_op_latency_quantile_seconds{cluster="$cluster", '
                        'op="$op", phi="0.99"} * on (cluster, ceph_daemon) group_left '
                        "(device_class) ceph_daemon_device_class:ceph_osd_metadata:group"
                        '{cluster="$cluster"})',
                        "fleet median p99 ({{device_class}})",
                    ),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[P50_LINE, FLEET_MEDIAN_LINE],
            ),
            timeseries(
                "Op pipeline stages (mean over the selected OSDs)",
                "Where a client op's time goes: queue wait before a shard thread takes it "
                "(high: too few shards/threads or starved cores), prepare, process, and "
                "the replica writes this OSD serves. Rate of _sum over rate of _count.",
                [
                    target(stage_mean("cephnode_osd_op_queue_wait_seconds"), "queue wait"),
                    target(stage_mean("cephnode_osd_op_prepare_latency_seconds"), "prepare"),
                    target(stage_mean("cephnode_osd_op_process_latency_seconds"), "process"),
                    target(stage_mean("cephnode_osd_subop_write_latency_seconds"), "sub-op write"),
                ],
                unit="s",
                w=12,
                h=9,
            ),
            timeseries(
                "BlueStore stages (mean over the selected OSDs)",
                "BlueStore commit, kv_sync (flush + commit of a batch), kv_flush (the "
                "device flush), kv_commit (RocksDB), read and the submission throttle. "
                "kv_flush up: the drive or its queue; kv_commit up: RocksDB (an "
                "unoptimised build, compaction); throttle up: more I/O than BlueStore "
                "admits.",
                [
                    target(stage_mean("cephnode_osd_bluestore_commit_latency_seconds"), "commit"),
                    target(stage_mean("cephnode_osd_bluestore_kv_sync_latency_seconds"), "kv_sync"),
                    target(
                        stage_mean("cephnode_osd_bluestore_kv_flush_latency_seconds"), "kv_flush"
                    ),
                    target(
                        stage_mean("cephnode_osd_bluestore_kv_commit_latency_seconds"), "kv_commit"
                    ),
                    target(stage_mean("cephnode_osd_bluestore_read_latency_seconds"), "read"),
                    target(
                        stage_mean("cephnode_osd_bluestore_throttle_latency_seconds"), "throttle"
                    ),
                ],
                unit="s",
                w=12,
                h=9,
            ),
            timeseries(
                "RocksDB call latency per OSD",
                "Mean RocksDB get, submit and submit_sync (WAL-synced) latency per OSD "
                "(the exporter's), against the fleet median of get and submit (white, "
                "dashed; submit_sync waits for the DB device, which the commit latency "
                "compares). get and submit slower than the fleet on every OSD: the RocksDB "
                "build (osd.rocksdb_build, bottleneck 3 of the reference cluster).",
                [
                    target(
                        "cephnode_osd_rocksdb_latency_mean_seconds{<OSDS>}",
                        "{{ceph_daemon}} {{stage}}",
                    ),
                    target(
                        "cluster_device_class_stage:cephnode_osd_rocksdb_latency_seconds:"
                        'quantile_ceph_daemon_mean5m{cluster="$cluster", quantile="0.5"}',
                        "fleet median {{stage}} ({{device_class}})",
                    ),
                ],
                unit="s",
                w=12,
                h=9,
                overrides=[FLEET_MEDIAN_LINE],
            ),
        ],
    )
    osd_state = Row(
        "OSD ops in flight, CPU and configuration",
        [
            timeseries(
                "Ops in flight by flag point",
                "Ops in flight on the selected OSDs by the last step they reached. "
                "'waiting for sub ops' growing: a replica on another host is slow (see "
                "the fleet's laggy PGs); 'queued for pg' or 'delayed': this OSD is "
                "behind.",
                [
                    target(
                        "sum by (flag_point) (cephnode_osd_ops_in_flight_by_flag_point{<OSDS>})",
                        "{{flag_point}}",
                    )
                ],
                stack=True,
                w=8,
            ),
            timeseries(
                "Slow ops per OSD",
                "Ops in flight longer than osd_op_complaint_time (30 s by default): what "
                "Ceph reports as slow ops. Blocked clients; check the flag points.",
                [target("cephnode_osd_slow_ops{<OSDS>}", "{{ceph_daemon}}")],
                w=8,
            ),
            timeseries(
                "Oldest op in flight per OSD",
                "Age of each OSD's oldest op in flight. Seconds here without slow ops yet "
                "is a stall building up (a stopped replica, a lease running out).",
                [target("cephnode_osd_oldest_op_age_seconds{<OSDS>}", "{{ceph_daemon}}")],
                unit="s",
                w=8,
            ),
            timeseries(
                "OSD CPU per op",
                "CPU seconds each OSD process spends per client op it serves (recorded), "
                "against the fleet median (white, dashed). Higher than the fleet: debug logging "
                "(see the table beside), an unoptimised RocksDB, or spin-lock contention.",
                [
                    target(
                        "ceph_daemon:cephnode_osd_cpu_seconds_per_op:rate5m{<OSDS>}",
                        "{{ceph_daemon}}",
                    ),
                    target(
                        "cluster_device_class:cephnode_osd_cpu_seconds_per_op:"
                        'quantile_ceph_daemon_rate5m{cluster="$cluster", quantile="0.5"}',
                        "fleet median ({{device_class}})",
                    ),
                ],
                unit="s",
                w=8,
                overrides=[FLEET_MEDIAN_LINE],
            ),
            table(
                "Debug levels on",
                "Debug subsystems of the profile's list whose log or gather level is not "
                "0 (osd.debug_levels). Messages up to the gather level are formatted on "
                "the I/O path even when not written: set debug_<subsystem> = 0/0.",
                [table_target("cephnode_osd_debug_level_info{<OSDS>}")],
                [
                    organize(
                        [*PLUMBING, "instance", "Value"],
                        order=["ceph_daemon", "subsystem", "log_level", "gather_level"],
                    )
                ],
                w=8,
                sort=[{"displayName": "ceph_daemon", "desc": False}],
            ),
            state_timeline(
                "OSD admin sockets answering",
                "Whether each OSD's admin socket answered the exporter. Not answering: "
                "the OSD is stopped or hung (a stopped OSD still accepts connections), or "
                "the socket is stale; its other panels have gaps then.",
                [target("cephnode_osd_scrape_success{<OSDS>}", "{{ceph_daemon}}")],
                value_map({"1": ("answering", "green"), "0": ("not answering", "red")}),
                w=8,
            ),
            table(
                "OSDs: version, object store, allocator and disks",
                "Ceph version, object store and the malloc the process linked, with the "
                "NVMe namespace and controller under each OSD (to match with the NVMe "
                "and IOMMU panels).",
                [
                    table_target("cephnode_osd_info{<OSDS>}"),
                    table_target("cephnode_osd_device_info{<OSDS>}"),
                ],
                [
                    organize(
                        [*PLUMBING, "instance", "Value #A", "Value #B"],
                        order=[
                            "ceph_daemon",
                            "version",
                            "objectstore",
                            "allocator",
                            "device",
                            "controller",
                        ],
                    )
                ],
                w=16,
                sort=[{"displayName": "ceph_daemon", "desc": False}],
            ),
        ],
    )
    variables = [
        CLUSTER_VAR,
        query_variable(
            "instance",
            "Node",
            'label_values(cephnode_exporter_build_info{cluster="$cluster"}, instance)',
            "The node's cephnode-exporter target.",
        ),
        query_variable(
            "host",
            "Host",
            'label_values(cephnode_exporter_build_info{cluster="$cluster", '
            'instance="$instance"}, instance)',
            "The node's host name (instance without the port), to find its node_exporter series.",
            regex="/^(.*?)(?::[0-9]+)?$/",
            hide=2,
        ),
        query_variable(
            "ceph_daemon",
            "OSD",
            'label_values(cephnode_osd_scrape_success{cluster="$cluster", '
            'instance="$instance"}, ceph_daemon)',
            "OSDs of the node.",
            multi=True,
            include_all=True,
        ),
        OP_VAR,
    ]
    return dashboard(
        NODE_UID,
        "Ceph nodes: node",
        "One Ceph storage node: its tuning report, and the host and OSD facts behind it "
        "(C-states, governors, IOMMU and kernel spin locks, NVMe queues and PCIe links, "
        "NICs, OSD latency and its stages, ops in flight, debug levels).",
        [report, cpu, iommu, nvme, net, osd_latency, osd_quantiles, osd_state],
        variables,
        [link_to("Fleet", FLEET_UID, "All nodes of the cluster against the fleet")],
    )


def _profile_stat() -> Panel:
    panel = stat(
        "Tuning profile",
        "The profile the checks compare against (--profile; 'default' is the built-in one).",
        [target("cephnode_tuning_profile_info{<NODE>}", "{{profile}}", instant=True)],
        w=4,
        h=5,
    )
    panel.options["textMode"] = "name"
    return panel


# ----------------------------------------------------------------------------- output


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
