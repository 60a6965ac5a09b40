"""Grafana's classic dashboard JSON model, as the dashboards use it: queries with the
selector placeholders, panel kinds, rows and their layout on the 24-column grid.

Standard library only; :mod:`board` adds variables, links and the dashboard itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
