"""The dashboard around the rows: template variables, links, ``__inputs``, and what the
two dashboards share (the cluster and op variables, the check-status query).
"""

from __future__ import annotations

from typing import Any

from grafana import (
    DATASOURCE,
    DS_INPUT,
    GRAFANA_VERSION,
    NODE_UID,
    SCHEMA_VERSION,
    TAGS,
    Row,
    layout,
    value_map,
)

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
