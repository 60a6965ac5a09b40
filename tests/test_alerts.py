"""The alerting files of ``alerts/``, proven with the real tools.

- ``promtool check rules`` on both rule files and ``promtool test rules`` on every file of
  ``alerts/tests/``;
- a lint, pure Python over the YAML, that fails when an alert lacks a promtool case where
  it fires (exact labels and annotations), one where it stays silent, one where it is
  pending before its ``for:``, a severity, a summary, a description or a runbook page in
  ``docs/runbooks/``; alert and recording-rule names follow the conventions. The lint is
  itself tested on tampered copies: a lint that cannot fail proves nothing;
- ``amtool check-config`` and ``amtool config routes test`` on ``alerts/alertmanager.yml``,
  and its inhibitions and the detuned-node digest on a real Alertmanager;
- ``promtool check config`` on ``alerts/prometheus.yml`` (which also checks the rule files
  it loads, by their paths relative to it).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cephcluster import free_port
from tests.conftest import REPO, need, need_root, need_tool

ALERTS = REPO / "alerts"
RULE_FILES = ("cephnode-rules.yml", "cephnode-alerts.yml")
TEST_FILES = sorted((ALERTS / "tests").glob("*.yml"))
RUNBOOKS = REPO / "docs" / "runbooks"
README = ALERTS / "README.md"

PREFIX = "CephNode"
SEVERITIES = ("critical", "warning", "info")
# CamelCase after the common prefix: letters and digits, no separators.
ALERT_NAME = re.compile(rf"{PREFIX}[A-Z][A-Za-z0-9]*")
# level:metric:operations (Prometheus docs, "Recording rules"), on our own metrics or the
# mgr's ceph_* series.
RECORD_NAME = re.compile(r"[a-z][a-z0-9_]*:(?:cephnode|ceph)_[a-z0-9_]+:[a-z0-9_]+")
RUNBOOK_URL = re.compile(r"(?P<base>.*)docs/runbooks/(?P<page>[^/]+)\.md")
# An aggregation operator directly followed by its argument: no `by`/`without` in front.
BARE_AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|group|stddev|stdvar|count|count_values|bottomk|topk|quantile)\s*\("
)
# A 0/1 state (`== 1` of a check, `== 0` of a success gauge): $value says nothing there.
STATE_TEST = re.compile(r"==\s*[01]\b")


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules_of(docs: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    """Every rule of the given kind ("alert" or "record") of the rule files."""
    for doc in docs:
        for group in doc["groups"]:
            for rule in group["rules"]:
                if kind in rule:
                    yield rule


# --------------------------------------------------------------------------------------
# The lint: pure functions of the parsed YAML, so that tampered copies can be fed to it.


@dataclass
class Coverage:
    """What the promtool test files assert about one alert."""

    fires: set[str]  # severities seen in firing cases with full labels and annotations
    silent: bool  # evaluated with an empty exp_alerts (before `for:` or healthy)
    pending: bool  # ALERTS{alertstate="pending"} asserted in a promql_expr_test


def coverage(tests: dict[str, dict[str, Any]], alert: str, keys: set[str]) -> Coverage:
    """Read the test files for ``alert``; a firing case counts only when it states the
    severity and every annotation key (``keys``) of the rule, as promtool then compares
    them exactly."""
    cov = Coverage(set(), False, False)
    for doc in tests.values():
        for case in doc.get("tests") or []:
            for item in case.get("alert_rule_test") or []:
                if item.get("alertname") != alert:
                    continue
                exp = item.get("exp_alerts") or []
                if not exp:
                    cov.silent = True
                for a in exp:
                    labels = a.get("exp_labels") or {}
                    annotations = a.get("exp_annotations") or {}
                    if "severity" in labels and keys <= set(annotations):
                        cov.fires.add(str(labels["severity"]))
            for item in case.get("promql_expr_test") or []:
                if f'alertname="{alert}"' not in item.get("expr", ""):
                    continue
                for s in item.get("exp_samples") or []:
                    text = s.get("labels", "")
                    if f'alertname="{alert}"' in text and 'alertstate="pending"' in text:
                        cov.pending = True
    return cov


def lint(
    rule_docs: list[dict[str, Any]],
    tests: dict[str, dict[str, Any]],
    runbooks: Path,
    readme: str,
) -> list[str]:
    """Problems of the rule files against their tests, runbooks and README; [] when none."""
    problems: list[str] = []
    bases: set[str] = set()
    severities: dict[str, set[str]] = {}
    keys: dict[str, set[str]] = {}
    with_for: set[str] = set()

    for rule in rules_of(rule_docs, "alert"):
        name = str(rule["alert"])
        where = f"alert {name}"
        if not ALERT_NAME.fullmatch(name):
            problems.append(f"{where}: name is not CamelCase with prefix {PREFIX}")
        severity = (rule.get("labels") or {}).get("severity")
        if severity not in SEVERITIES:
            problems.append(f"{where}: severity {severity!r} is not one of {SEVERITIES}")
        severities.setdefault(name, set()).add(str(severity))
        annotations = rule.get("annotations") or {}
        keys.setdefault(name, set()).update(annotations)
        if rule.get("for"):
            with_for.add(name)
        for key in ("summary", "description", "runbook_url"):
            if not str(annotations.get(key) or "").strip():
                problems.append(f"{where}: no {key} annotation")
        description = str(annotations.get("description") or "")
        if description and "$labels." not in description:
            problems.append(f"{where}: description names no label (host, device, OSD)")
        if description and "$value" not in description and not STATE_TEST.search(rule["expr"]):
            problems.append(f"{where}: description does not give the value")
        url = str(annotations.get("runbook_url") or "")
        if url:
            m = RUNBOOK_URL.fullmatch(url)
            if m is None or m["page"] != name:
                problems.append(f"{where}: runbook_url {url} is not <base>docs/runbooks/{name}.md")
            else:
                bases.add(m["base"])
                if not (runbooks / f"{name}.md").is_file():
                    problems.append(f"{where}: runbook docs/runbooks/{name}.md does not exist")

    if len(bases) > 1:
        problems.append(f"runbook_url: more than one base: {sorted(bases)}")
    for base in bases:
        if base not in readme:
            problems.append(f"runbook_url: base {base} is not in the README's settings table")

    for name, sevs in severities.items():
        cov = coverage(tests, name, keys[name])
        for sev in sorted(sevs - cov.fires):
            problems.append(
                f"alert {name}: no promtool case where it fires with severity {sev}"
                " and all its labels and annotations"
            )
        if not cov.silent:
            problems.append(f"alert {name}: no promtool case with an empty exp_alerts")
        if name in with_for and not cov.pending:
            problems.append(f"alert {name}: no promtool case where it is pending before for:")

    known = set(severities)
    for file, doc in tests.items():
        for case in doc.get("tests") or []:
            for item in case.get("alert_rule_test") or []:
                if item.get("alertname") not in known:
                    problems.append(f"{file}: tests unknown alert {item.get('alertname')}")

    for rule in rules_of(rule_docs, "record"):
        name = str(rule["record"])
        if not RECORD_NAME.fullmatch(name):
            problems.append(f"record {name}: name is not level:metric:operations")
    for rule in [*rules_of(rule_docs, "record"), *rules_of(rule_docs, "alert")]:
        bare = BARE_AGGREGATION.search(rule["expr"])
        if bare:
            who = rule.get("record") or rule.get("alert")
            problems.append(f"{who}: aggregation {bare[1]}() without by or without")
    return problems


# --------------------------------------------------------------------------------------
# The lint on the real files, and on tampered copies.


@pytest.fixture(scope="module")
def rule_docs() -> list[dict[str, Any]]:
    return [load(ALERTS / f) for f in RULE_FILES]


@pytest.fixture(scope="module")
def promtool_tests() -> dict[str, dict[str, Any]]:
    return {p.name: load(p) for p in TEST_FILES}


def test_lint_passes_on_the_rule_files(
    rule_docs: list[dict[str, Any]], promtool_tests: dict[str, dict[str, Any]]
) -> None:
    assert lint(rule_docs, promtool_tests, RUNBOOKS, README.read_text()) == []


def test_lint_walks_every_rule(rule_docs: list[dict[str, Any]]) -> None:
    """The lint walks every group: count what it sees against a plain text scan, so that a
    rule the walker skips cannot pass unnoticed."""
    alerts = [r["alert"] for r in rules_of(rule_docs, "alert")]
    records = [r["record"] for r in rules_of(rule_docs, "record")]
    text = "".join((ALERTS / f).read_text() for f in RULE_FILES)
    assert len(alerts) == len(re.findall(r"^\s*- alert: ", text, re.M))
    assert len(records) == len(re.findall(r"^\s*- record: ", text, re.M))
    assert alerts and records


def _alert(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(r for r in rules_of(docs, "alert") if r["alert"] == name)


def _drop_cases(tests: dict[str, dict[str, Any]], keep: Callable[[dict[str, Any]], bool]) -> None:
    for doc in tests.values():
        for case in doc.get("tests") or []:
            items = case.get("alert_rule_test") or []
            case["alert_rule_test"] = [i for i in items if keep(i)]


def _drop_pending(tests: dict[str, dict[str, Any]], alert: str) -> None:
    for doc in tests.values():
        for case in doc.get("tests") or []:
            items = case.get("promql_expr_test") or []
            case["promql_expr_test"] = [i for i in items if alert not in i["expr"]]


VICTIM = "CephNodeSlowOps"

# name -> (tamper the copies, a piece of the problem the lint must report)
TAMPERS: dict[str, tuple[Callable[[list[dict], dict, Path], None], str]] = {
    "no runbook_url": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].pop("runbook_url"),
        f"alert {VICTIM}: no runbook_url",
    ),
    "no summary": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].pop("summary"),
        f"alert {VICTIM}: no summary",
    ),
    "empty description": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].update(description=" "),
        f"alert {VICTIM}: no description",
    ),
    "description without a label": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].update(description="{{ $value }} ops"),
        f"alert {VICTIM}: description names no label",
    ),
    "description without the value": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].update(
            description="{{ $labels.ceph_daemon }} is slow"
        ),
        f"alert {VICTIM}: description does not give the value",
    ),
    "no severity": (
        lambda r, t, b: _alert(r, VICTIM)["labels"].pop("severity"),
        f"alert {VICTIM}: severity None",
    ),
    "unknown severity": (
        lambda r, t, b: _alert(r, VICTIM)["labels"].update(severity="page"),
        f"alert {VICTIM}: severity 'page'",
    ),
    "runbook page missing": (
        lambda r, t, b: (b / f"{VICTIM}.md").unlink(),
        f"docs/runbooks/{VICTIM}.md does not exist",
    ),
    "runbook of another alert": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].update(
            runbook_url=_alert(r, "CephNodeLaggyPGs")["annotations"]["runbook_url"]
        ),
        f"alert {VICTIM}: runbook_url",
    ),
    "second runbook base": (
        lambda r, t, b: _alert(r, VICTIM)["annotations"].update(
            runbook_url=f"https://elsewhere.example/docs/runbooks/{VICTIM}.md"
        ),
        "more than one base",
    ),
    "name not CamelCase": (
        lambda r, t, b: _alert(r, VICTIM).update(alert="CephNode_slow_ops"),
        "alert CephNode_slow_ops: name is not CamelCase",
    ),
    "name without the prefix": (
        lambda r, t, b: _alert(r, VICTIM).update(alert="SlowOps"),
        "alert SlowOps: name is not CamelCase with prefix CephNode",
    ),
    "no firing case": (
        lambda r, t, b: _drop_cases(t, lambda i: i["alertname"] != VICTIM or not i["exp_alerts"]),
        f"alert {VICTIM}: no promtool case where it fires",
    ),
    "firing case without annotations": (
        lambda r, t, b: [
            a.pop("exp_annotations")
            for d in t.values()
            for c in d["tests"]
            for i in c.get("alert_rule_test") or []
            if i["alertname"] == VICTIM
            for a in i["exp_alerts"] or []
        ],
        f"alert {VICTIM}: no promtool case where it fires",
    ),
    "no silent case": (
        lambda r, t, b: _drop_cases(t, lambda i: i["alertname"] != VICTIM or i["exp_alerts"]),
        f"alert {VICTIM}: no promtool case with an empty exp_alerts",
    ),
    "no pending case": (
        lambda r, t, b: _drop_pending(t, VICTIM),
        f"alert {VICTIM}: no promtool case where it is pending",
    ),
    "critical variant untested": (
        lambda r, t, b: r[1]["groups"][0]["rules"].append(
            {**copy.deepcopy(_alert(r, VICTIM)), "labels": {"severity": "critical"}}
        ),
        f"alert {VICTIM}: no promtool case where it fires with severity critical",
    ),
    "recording rule name": (
        lambda r, t, b: next(rules_of(r, "record")).update(record="cephnode_osd_p99"),
        "record cephnode_osd_p99: name is not level:metric:operations",
    ),
    "aggregation without by": (
        lambda r, t, b: next(rules_of(r, "record")).update(expr="sum(up)"),
        "aggregation sum() without by or without",
    ),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_lint_catches_a_tampered_copy(
    tamper: str,
    rule_docs: list[dict[str, Any]],
    promtool_tests: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    rules, tests = copy.deepcopy(rule_docs), copy.deepcopy(promtool_tests)
    runbooks = tmp_path / "runbooks"
    shutil.copytree(RUNBOOKS, runbooks)
    change, expected = TAMPERS[tamper]
    change(rules, tests, runbooks)
    problems = lint(rules, tests, runbooks, README.read_text())
    assert any(expected in p for p in problems), problems


def test_runbook_base_missing_from_readme(
    rule_docs: list[dict[str, Any]], promtool_tests: dict[str, dict[str, Any]]
) -> None:
    problems = lint(rule_docs, promtool_tests, RUNBOOKS, "no settings table")
    assert problems and all("is not in the README" in p for p in problems), problems


def test_every_runbook_page_belongs_to_an_alert(rule_docs: list[dict[str, Any]]) -> None:
    """No stale page for a renamed alert; the index lists every page."""
    names = {r["alert"] for r in rules_of(rule_docs, "alert")}
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages == names
    index = (RUNBOOKS / "README.md").read_text()
    missing = [n for n in sorted(names) if f"({n}.md)" not in index]
    assert missing == []


def test_test_files_load_the_production_rules(promtool_tests: dict[str, dict[str, Any]]) -> None:
    """Every promtool test file reads alerts/*.yml themselves, not a copy."""
    for name, doc in promtool_tests.items():
        files = doc.get("rule_files") or []
        assert files, name
        for f in files:
            path = (ALERTS / "tests" / f).resolve()
            assert path.parent == ALERTS and path.name in RULE_FILES, (name, f)


# A comparison with a number in an alert expression: its threshold.
THRESHOLD = re.compile(r"(?:[<>]=?|==|!=)\s*(-?[0-9][0-9.eE+-]*)\b")


def readme_alert_rows(text: str) -> list[list[str]]:
    """The cells of the rows of the README's alert table (section "### Alerts")."""
    section = text.split("### Alerts", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| CephNode")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_readme_alert_table_matches_the_rules(rule_docs: list[dict[str, Any]]) -> None:
    """One row per alert rule with its severity, its `for:` and every number it compares
    with (0 and 1 of state tests aside), so the table cannot drift from the rules."""
    rows = readme_alert_rows(README.read_text())
    rules = list(rules_of(rule_docs, "alert"))
    assert len(rows) == len(rules)
    for rule in rules:
        name, sev = rule["alert"], rule["labels"]["severity"]
        row = next((r for r in rows if r[0] == name and r[1] == sev), None)
        assert row, f"{name} ({sev}) has no row in the alert table of alerts/README.md"
        assert row[3] == str(rule.get("for", "none")), (name, sev, row[3])
        numbers = {n for n in THRESHOLD.findall(rule["expr"]) if n not in ("0", "1")}
        missing = sorted(
            n for n in numbers if not re.search(rf"(?<![0-9.]){re.escape(n)}(?![0-9])", row[2])
        )
        assert missing == [], f"{name} ({sev}): thresholds {missing} not in its README row"


# --------------------------------------------------------------------------------------
# promtool


# The Prometheus releases the rules must hold on: Debian 12's (the host), trixie's 2.53
# and sid's 3.x, whose range selectors leave out the sample exactly at the range's start
# (https://prometheus.io/docs/prometheus/latest/migration/, "Range selectors"): a
# `[30m]` window holds one sample fewer there.
PROMETHEUS = ("bookworm", "trixie", "sid")


def promtool_cmd(suite: str) -> list[str]:
    """The command line of ``suite``'s promtool: the host's, or a chroot's run with the
    chroot's own libraries (tests/chroots.py builds the chroot and installs it)."""
    if suite == "bookworm":
        return [need_tool("promtool", "prometheus")]
    from tests.chroots import RELEASES, ChrootError, ensure_packages, run_in

    need_root(f"builds the {suite} chroot that holds its promtool")
    release = next(r for r in RELEASES.values() if r.suite == suite)
    try:
        root = ensure_packages(release, ("prometheus",))
    except ChrootError as exc:
        need(False, f"the {suite} chroot with prometheus could not be built: {exc}")
        raise
    return run_in(root, "/usr/bin/promtool")


@pytest.mark.parametrize(
    ("suite", "version"), [("bookworm", "2.42."), ("trixie", "2.53."), ("sid", "3.")]
)
def test_promtool_of_each_suite_is_the_release_it_stands_for(suite: str, version: str) -> None:
    """The parametrised tests below run three different Prometheus releases, not one
    binary three times."""
    out = subprocess.run(
        [*promtool_cmd(suite), "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert re.match(rf"promtool, version {re.escape(version)}", out.stdout), out.stdout


@pytest.mark.parametrize("suite", PROMETHEUS)
def test_promtool_check_rules(rule_docs: list[dict[str, Any]], suite: str) -> None:
    out = subprocess.run(
        [*promtool_cmd(suite), "check", "rules", *RULE_FILES],
        cwd=ALERTS, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    found = [int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", out.stdout)]
    assert found == [sum(len(g["rules"]) for g in d["groups"]) for d in rule_docs]


@pytest.mark.parametrize("suite", PROMETHEUS)
@pytest.mark.parametrize("test_file", [p.name for p in TEST_FILES])
def test_promtool_test_rules(test_file: str, suite: str) -> None:
    out = subprocess.run(
        [*promtool_cmd(suite), "test", "rules", f"tests/{test_file}"],
        cwd=ALERTS, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    """promtool compares labels and annotations exactly: one changed word fails the file."""
    promtool = need_tool("promtool", "prometheus")
    doc = load(ALERTS / "tests" / "exporter.yml")
    doc["rule_files"] = [str(ALERTS / f) for f in RULE_FILES]
    case = doc["tests"][0]["alert_rule_test"]
    firing = next(i for i in case if i["exp_alerts"])
    firing["exp_alerts"][0]["exp_labels"]["instance"] = "osd-z:10060"
    (tmp_path / "wrong.yml").write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "wrong.yml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1 and "osd-z:10060" in out.stderr, out.stdout + out.stderr


# --------------------------------------------------------------------------------------
# Prometheus configuration


def test_promtool_check_config() -> None:
    """Run on the file in place: its rule_files are relative to it and must resolve."""
    promtool = need_tool("promtool", "prometheus")
    out = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"],
        cwd=ALERTS, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    for f in RULE_FILES:
        assert f"Checking {f}" in out.stdout, out.stdout


def test_prometheus_config_scrapes_exporters_and_mgr_with_a_cluster_label() -> None:
    doc = load(ALERTS / "prometheus.yml")
    assert sorted(doc["rule_files"]) == sorted(RULE_FILES)
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    # The rules read up{job="cephnode"}; both jobs join on (cluster, ...).
    assert {"cephnode", "ceph"} <= set(jobs)
    for job in ("cephnode", "ceph"):
        for sc in jobs[job]["static_configs"]:
            assert sc["labels"].get("cluster"), job
    assert all(t.endswith(":10060") for sc in jobs["cephnode"]["static_configs"]
               for t in sc["targets"])  # fmt: skip
    assert all(t.endswith(":9283") for sc in jobs["ceph"]["static_configs"] for t in sc["targets"])


# --------------------------------------------------------------------------------------
# Alertmanager configuration

AM_CONFIG = ALERTS / "alertmanager.yml"


def test_amtool_check_config() -> None:
    amtool = need_tool("amtool", "prometheus-alertmanager")
    out = subprocess.run(
        [amtool, "check-config", str(AM_CONFIG)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def route(amtool: str, labels: dict[str, str]) -> str:
    """The receiver(s) ``amtool config routes test`` picks for a label set."""
    out = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}",
         *(f"{k}={v}" for k, v in labels.items())],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


ROUTE_CASES = [
    ({"alertname": "CephNodeLaggyPGs", "severity": "critical"}, "pager"),
    ({"alertname": "CephNodeIOMMUSpinlockContention", "severity": "critical"}, "pager"),
    ({"alertname": "CephNodeSlowOps", "severity": "warning"}, "ticket"),
    ({"alertname": "CephNodeExporterDown", "severity": "warning"}, "ticket"),
    # The digest: detuned-node warnings.
    ({"alertname": "CephNodeIOMMUTranslatingNVMe", "severity": "warning"}, "ticket-digest"),
    ({"alertname": "CephNodeDeepCStatesEnabled", "severity": "warning"}, "ticket-digest"),
    ({"alertname": "CephNodeIOMMUSpinlockContention", "severity": "warning"}, "ticket-digest"),
    ({"alertname": "CephNodeTuningChanged", "severity": "info"}, "blackhole"),
    # A severity nobody routes still makes a ticket rather than vanishing.
    ({"alertname": "CephNodeSlowOps", "severity": "urgent"}, "ticket"),
    ({"alertname": "CephNodeSlowOps"}, "ticket"),
]


@pytest.mark.parametrize(("labels", "receiver"), ROUTE_CASES)
def test_amtool_routes(labels: dict[str, str], receiver: str) -> None:
    amtool = need_tool("amtool", "prometheus-alertmanager")
    assert route(amtool, {"cluster": "c1", "instance": "osd-a:10060", **labels}) == receiver


def test_every_alert_routes_by_its_severity_and_group(rule_docs: list[dict[str, Any]]) -> None:
    """Each alert of the rule files, with its own severity: critical pages, info is not
    routed, the warnings of cephnode.detuned go to the digest and every other warning to a
    ticket. An alert added to the rules without its place in the config fails here."""
    amtool = need_tool("amtool", "prometheus-alertmanager")
    alerts_doc = rule_docs[RULE_FILES.index("cephnode-alerts.yml")]
    for group in alerts_doc["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue  # a group's candidate recording, read by its alerts
            sev = rule["labels"]["severity"]
            expected = {"critical": "pager", "info": "blackhole"}.get(sev) or (
                "ticket-digest" if group["name"] == "cephnode.detuned" else "ticket"
            )
            labels = {"alertname": rule["alert"], "severity": sev, "cluster": "c1"}
            assert route(amtool, labels) == expected, (rule["alert"], sev)


def _matcher_regex(matchers: list[str], label: str) -> re.Pattern[str]:
    for m in matchers:
        parsed = re.fullmatch(r'(\w+)(=~|=|!=|!~)"(.*)"', m)
        assert parsed, f"matcher {m} not in the quoted form"
        name, op, value = parsed.groups()
        if name == label and op == "=~":
            # Alertmanager anchors regex matchers; these are plain alternations (RE2 = re).
            return re.compile(value.replace("\\\\", "\\"))
    raise AssertionError(f"no {label}=~ matcher in {matchers}")


def test_exporter_down_inhibits_every_host_alert_of_detuned_and_regressions(
    rule_docs: list[dict[str, Any]],
) -> None:
    """The inhibition list names every per-host alert of the detuned and latency groups,
    so a new one cannot be forgotten. Cluster-level alerts (no instance) and the laggy-PG
    attribution, which names the host that is down, stay."""
    am = load(AM_CONFIG)
    rule = next(r for r in am["inhibit_rules"]
                if 'alertname="CephNodeExporterDown"' in r["source_matchers"])  # fmt: skip
    assert set(rule["equal"]) == {"cluster", "instance"}
    pattern = _matcher_regex(rule["target_matchers"], "alertname")
    kept = {"CephNodeLaggyPGs", "CephNodeLaggyPGsAttributed", "CephNodeTuningChanged"}
    alerts_doc = rule_docs[RULE_FILES.index("cephnode-alerts.yml")]
    for group in alerts_doc["groups"]:
        for r in group["rules"]:
            if "alert" not in r:
                continue  # a group's candidate recording
            name = r["alert"]
            if name == "CephNodeExporterDown":
                assert not pattern.fullmatch(name)
            elif group["name"] in ("cephnode.detuned", "cephnode.regressions"):
                assert bool(pattern.fullmatch(name)) == (name not in kept), name


# A real Alertmanager: inhibitions and the digest are behaviour, not syntax.


def _post(url: str, body: object) -> None:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def alertmanager(tmp_path: Path, processes: list[subprocess.Popen]) -> str:
    """alerts/alertmanager.yml unchanged on a free port, without clustering; its webhook
    receivers are never reached within the test (group_wait is 30 s at least)."""
    binary = need_tool("prometheus-alertmanager", "prometheus-alertmanager")
    port = free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={AM_CONFIG}", f"--storage.path={tmp_path}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    processes.append(proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                return url
        except OSError:
            assert time.monotonic() < deadline, "alertmanager not ready in 30 s"
            time.sleep(0.1)


def _alert_body(labels: dict[str, str]) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": {"severity": "warning", "cluster": "c1", **labels},
        "annotations": {"summary": "test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }


def _key(labels: dict[str, str]) -> tuple[str, ...]:
    return (
        labels["alertname"], labels.get("cluster", ""), labels.get("instance", ""),
        labels.get("severity", ""), labels.get("ceph_daemon", ""), labels.get("op", ""),
    )  # fmt: skip


def test_alertmanager_inhibitions(alertmanager: str) -> None:
    a, b, c = "osd-a:10060", "osd-b:10060", "osd-c:10060"

    def alert(name: str, instance: str, **labels: str) -> dict[str, str]:
        return {"alertname": f"CephNode{name}", "instance": instance, **labels}

    ssd = {"device_class": "ssd"}
    # labels -> inhibited?
    cases: list[tuple[dict[str, str], bool]] = [
        (alert("ExporterDown", a, job="cephnode"), False),
        # The host whose exporter is down: its detuned and latency alerts wait.
        (alert("DeepCStatesEnabled", a), True),
        (alert("SlowOps", a, ceph_daemon="osd.1"), True),
        (alert("HostLatencyOutlier", a, op="write"), True),
        # Another host, or the same host name in another cluster: not inhibited.
        (alert("DeepCStatesEnabled", b), False),
        (alert("DeepCStatesEnabled", a, cluster="c2"), False),
        # The laggy-PG attribution names the host that is down: kept.
        (alert("LaggyPGsAttributed", a), False),
        # The critical IOMMU spin-lock alert replaces the warning one of the same host.
        (alert("IOMMUSpinlockContention", b, severity="critical"), False),
        (alert("IOMMUSpinlockContention", b), True),
        # A slow host hides its OSDs' outliers of the same op, not of another op.
        (alert("HostLatencyOutlier", c, op="write", **ssd), False),
        (alert("OSDLatencyOutlier", c, op="write", ceph_daemon="osd.7", **ssd), True),
        (alert("OSDLatencyOutlier", c, op="read", ceph_daemon="osd.7", **ssd), False),
    ]
    _post(f"{alertmanager}/api/v2/alerts", [_alert_body(labels) for labels, _ in cases])
    expected = {_key(_alert_body(labels)["labels"]): inh for labels, inh in cases}
    deadline = time.monotonic() + 10
    while True:
        alerts = _get(f"{alertmanager}/api/v2/alerts")
        got = {_key(x["labels"]): bool(x["status"]["inhibitedBy"]) for x in alerts}
        if got == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got == expected


def test_alertmanager_digest_groups_detuned_hosts(alertmanager: str) -> None:
    """Detuned hosts make one group per cluster and alert at the digest receiver (one
    notification listing them all), not one notification per host."""
    hosts = [f"osd-{i:02d}:10060" for i in range(10)]
    iommu = {"alertname": "CephNodeIOMMUTranslatingNVMe", "controller": "nvme0"}
    cstates = {"alertname": "CephNodeDeepCStatesEnabled"}
    body = [_alert_body({**iommu, "instance": h}) for h in hosts]
    body += [_alert_body({**cstates, "instance": h}) for h in hosts[:3]]
    body += [_alert_body({**iommu, "instance": hosts[0], "cluster": "c2"})]
    _post(f"{alertmanager}/api/v2/alerts", body)
    deadline = time.monotonic() + 10
    while True:
        groups = _get(f"{alertmanager}/api/v2/alerts/groups")
        got = sorted(
            (
                g["receiver"]["name"],
                g["labels"]["cluster"],
                g["labels"]["alertname"],
                len(g["alerts"]),
            )
            for g in groups
        )
        if sum(n for *_, n in got) == len(body) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got == [
        ("ticket-digest", "c1", "CephNodeDeepCStatesEnabled", 3),
        ("ticket-digest", "c1", "CephNodeIOMMUTranslatingNVMe", 10),
        ("ticket-digest", "c2", "CephNodeIOMMUTranslatingNVMe", 1),
    ]


# --------------------------------------------------------------------------------------
# Runbook links

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize(
    "page", [p.relative_to(REPO).as_posix() for p in [README, *sorted(RUNBOOKS.glob("*.md"))]]
)
def test_relative_links_resolve(page: str) -> None:
    """A runbook read at 3 a.m. must not send its reader to a missing page or section."""
    source = REPO / page
    broken = []
    for target in LINK.findall(source.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            if anchor not in {slug(h) for h in headings}:
                broken.append(target)
    assert broken == []
