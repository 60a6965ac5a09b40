"""alerts/alertmanager.yml beside Ceph's own alerts (ceph/ceph monitoring/ceph-mixin).

- the mixin's ``CephNode*`` alerts (same prefix as ours) route by severity, not into
  the detuned-node digest (``amtool check-config`` is tests/test_alerts.py's);
- on a real Alertmanager, every inhibition between a mixin alert and ours holds back the
  alert it should for the same subject (cluster, OSD) and nothing for another subject,
  and the pairs alerts/README.md leaves alone ("Beside ceph-mixin") stay apart;
- that README table names every mixin alert of alertmanager.yml, with the direction and
  ``equal`` labels of its inhibition.

The mixin's alerts are posted with the labels its rules give them: the expression's
surviving series labels plus the rule's (ceph/ceph monitoring/ceph-mixin/
prometheus_alerts.libsonnet @034ad76b, prometheus_alerts.yml @7c1cf228; exp_labels of
tests_alerts/test_alerts.yml @dd3da4eb), plus ``cluster`` as the ``ceph`` job's target
label of alerts/prometheus.yml adds it.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from tests.conftest import need_tool
from tests.test_alerts import (  # noqa: F401 (alertmanager: the fixture)
    ALERTS,
    AM_CONFIG,
    README,
    RULE_FILES,
    _get,
    _post,
    alertmanager,
    route,
)

# Where the mixin's alerts come from: the active mgr's prometheus module, or node_exporter.
MGR = {"instance": "mgr-a:9283", "job": "ceph"}
NODE_A = {"instance": "osd-a:9100", "job": "node"}
CEPH = {"type": "ceph_default"}

# Every mixin alert alerts/README.md examines, as its rule fires it (without cluster and
# the per-subject labels a case adds). oid values: the rule's MIB entry.
MIXIN: dict[str, dict[str, str]] = {
    # ceph_daemon_health_metrics{type="SLOW_OPS"} > 0: keeps ceph_daemon; the rule's
    # type=ceph_default replaces the series' type="SLOW_OPS".
    "CephDaemonSlowOps": {"severity": "warning", **CEPH, **MGR},
    # ceph_healthcheck_slow_ops > 0
    "CephSlowOps": {"severity": "warning", **CEPH, **MGR},
    # ceph_health_detail{name="OSD_DOWN"} == 1 (the rule's severity replaces the series')
    "CephOSDDown": {
        "name": "OSD_DOWN", "severity": "warning", "oid": "1.3.6.1.4.1.50495.1.2.1.4.2",
        **CEPH, **MGR,
    },
    # count by (cluster) (ceph_osd_up == 0) / count by (cluster) (ceph_osd_up) * 100 >= 10
    "CephOSDDownHigh": {"severity": "critical", "oid": "1.3.6.1.4.1.50495.1.2.1.4.1", **CEPH},
    "CephOSDHostDown": {
        "name": "OSD_HOST_DOWN", "severity": "warning", "oid": "1.3.6.1.4.1.50495.1.2.1.4.8",
        **CEPH, **MGR,
    },
    # rate(ceph_osd_up[5m]) * on(ceph_daemon) group_left(hostname) ceph_osd_metadata ...
    "CephOSDFlapping": {"severity": "warning", "oid": "1.3.6.1.4.1.50495.1.2.1.4.4", **CEPH, **MGR},
    # node_network_mtu_bytes * (node_network_up > 0) == scalar(...): device, instance, job
    "CephNodeInconsistentMTU": {"severity": "warning", **CEPH, **NODE_A},
    "CephNodeNetworkPacketDrops": {
        "severity": "warning", "oid": "1.3.6.1.4.1.50495.1.2.1.8.2", **CEPH, **NODE_A,
    },
    "CephNodeNetworkPacketErrors": {
        "severity": "warning", "oid": "1.3.6.1.4.1.50495.1.2.1.8.3", **CEPH, **NODE_A,
    },
    # ceph_pool_metadata * on(pool_id, instance) group_left() (total - active) > 0
    "CephPGsInactive": {
        "name": "rbd", "pool_id": "2", "severity": "critical",
        "oid": "1.3.6.1.4.1.50495.1.2.1.7.1", **CEPH, **MGR,
    },
    # The name up to 7c1cf228; 034ad76b spells it CephPGUnavailableBlockingIO.
    "CephPGUnavilableBlockingIO": {
        "name": "PG_AVAILABILITY", "severity": "critical",
        "oid": "1.3.6.1.4.1.50495.1.2.1.7.3", **CEPH, **MGR,
    },
    "CephPGUnavailableBlockingIO": {
        "name": "PG_AVAILABILITY", "severity": "critical",
        "oid": "1.3.6.1.4.1.50495.1.2.1.7.3", **CEPH, **MGR,
    },
}  # fmt: skip


def mixin(name: str, cluster: str | None = "c1", **labels: str) -> dict[str, str]:
    """A mixin alert as Alertmanager receives it; ``cluster=None``: a Prometheus whose
    ``ceph`` job has no cluster label."""
    out = {"alertname": name, **MIXIN[name], **labels}
    if cluster is not None:
        out["cluster"] = cluster
    return out


def ours(name: str, host: str | None, cluster: str = "c1", **labels: str) -> dict[str, str]:
    """One of our alerts: cluster, the exporter's instance for per-host ones."""
    out = {"alertname": name, "cluster": cluster, "severity": "warning", **labels}
    if host is not None:
        out["instance"] = f"{host}:10060"
    return out


def _body(labels: dict[str, str]) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": labels,
        "annotations": {"summary": "test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def post_and_wait(url: str, cases: list[tuple[dict[str, str], str | None]]) -> None:
    """Post every case's alert; each expects the alertname of the alert inhibiting it, or
    None. Waits until Alertmanager's view matches: posted alerts take a moment to reach
    its inhibitor."""
    keys = [_key(labels) for labels, _ in cases]
    assert len(set(keys)) == len(keys), "two cases post the same label set"
    _post(f"{url}/api/v2/alerts", [_body(labels) for labels, _ in cases])
    expected = {_key(labels): by for labels, by in cases}
    deadline = time.monotonic() + 10
    while True:
        alerts = _get(f"{url}/api/v2/alerts")
        names = {a["fingerprint"]: a["labels"]["alertname"] for a in alerts}
        got = {
            _key(a["labels"]): (
                "+".join(sorted(names.get(f, f) for f in a["status"]["inhibitedBy"])) or None
            )
            for a in alerts
        }
        if got == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    wrong = {
        str(dict(k)): (got.get(k, "missing"), v)
        for k, v in expected.items()
        if got.get(k, "missing") != v
    }
    assert wrong == {}, "(inhibited by, expected): " + repr(wrong)
    assert got.keys() == expected.keys()


# --------------------------------------------------------------------------------------
# amtool


@pytest.mark.parametrize("name", [n for n in MIXIN if n.startswith("CephNode")])
def test_mixin_cephnode_alerts_route_by_severity(name: str) -> None:
    """The mixin's CephNode* alerts share our prefix: they make a ticket like any warning,
    they do not join the detuned-node digest (its matcher is an anchored list of ours)."""
    amtool = need_tool("amtool", "prometheus-alertmanager")
    labels = mixin(name, device="eth4")
    assert route(amtool, labels) == {"warning": "ticket", "critical": "pager"}[labels["severity"]]


# --------------------------------------------------------------------------------------
# A real Alertmanager


def test_ours_hold_back_theirs_of_the_same_subject_only(alertmanager: str) -> None:  # noqa: F811
    """Each inhibition holds back the mixin's alert of the same cluster and OSD (or host),
    never one of another OSD, host or cluster, and never ours."""
    slow, laggy, flap = "CephNodeSlowOps", "CephNodeLaggyPGsAttributed", "CephOSDFlapping"
    cases: list[tuple[dict[str, str], str | None]] = [
        # CephNodeSlowOps (the OSD itself is slow, on this host) -> CephDaemonSlowOps.
        (ours(slow, "osd-a", ceph_daemon="osd.1"), None),
        (mixin("CephDaemonSlowOps", ceph_daemon="osd.1"), slow),
        # Another OSD (a primary waiting for osd.1), a mon: theirs alone names them.
        (mixin("CephDaemonSlowOps", ceph_daemon="osd.2"), None),
        (mixin("CephDaemonSlowOps", ceph_daemon="mon.a"), None),
        # The same OSD id in another cluster.
        (mixin("CephDaemonSlowOps", cluster="c2", ceph_daemon="osd.1"), None),
        # A Prometheus whose ceph job has no cluster label: equal cannot match (README).
        (mixin("CephDaemonSlowOps", cluster=None, ceph_daemon="osd.1"), None),
        # Ours in cluster c2 for osd.3, theirs for osd.3 in c1 and c2: only c2's waits.
        (ours(slow, "osd-b", cluster="c2", ceph_daemon="osd.3"), None),
        (mixin("CephDaemonSlowOps", cluster="c2", ceph_daemon="osd.3"), slow),
        (mixin("CephDaemonSlowOps", ceph_daemon="osd.3"), None),
        # CephNodeLaggyPGsAttributed naming an OSD -> CephOSDFlapping of that OSD only,
        # not of another OSD of its host, not in another cluster.
        (ours(laggy, None, ceph_daemon="osd.40", hostname="osd-h"), None),
        (mixin(flap, ceph_daemon="osd.40", hostname="osd-h"), laggy),
        (mixin(flap, ceph_daemon="osd.41", hostname="osd-h"), None),
        (mixin(flap, cluster="c2", ceph_daemon="osd.40", hostname="osd-h"), None),
        # CephNodeLaggyPGsAttributed naming a host -> CephOSDFlapping of that host's OSDs.
        (ours(laggy, None, hostname="osd-i"), None),
        (mixin(flap, ceph_daemon="osd.50", hostname="osd-i"), laggy),
        (mixin(flap, ceph_daemon="osd.51", hostname="osd-i"), laggy),
        (mixin(flap, ceph_daemon="osd.52", hostname="osd-j"), None),
        (mixin(flap, cluster="c2", ceph_daemon="osd.50", hostname="osd-i"), None),
    ]
    post_and_wait(alertmanager, cases)


def test_pairs_left_alone_stay_apart(alertmanager: str) -> None:  # noqa: F811
    """The README's "none" rows: both alerts of each pair notify. Each pair has hosts and
    OSDs of its own, so the existing inhibitions (CephNodeExporterDown of a host) do not
    interfere except where a case says so."""
    cases: list[tuple[dict[str, str], str | None]] = [
        # Slow ops: the cluster-level alert beside ours.
        (mixin("CephSlowOps"), None),
        (ours("CephNodeSlowOps", "osd-c", ceph_daemon="osd.10"), None),
        # OSD down, many down, host down: no OSD or host to match.
        (mixin("CephOSDDown"), None),
        (mixin("CephOSDDownHigh"), None),
        (ours("CephNodeOSDSocketUnresponsive", "osd-d", ceph_daemon="osd.20"), None),
        (mixin("CephOSDHostDown"), None),
        (ours("CephNodeExporterDown", "osd-e", job="cephnode"), None),
        # Flapping: the same OSD as a socket alert and a slow-ops alert, none held back.
        (mixin("CephOSDFlapping", ceph_daemon="osd.30", hostname="osd-f"), None),
        (ours("CephNodeOSDSocketUnresponsive", "osd-f", ceph_daemon="osd.30"), None),
        (ours("CephNodeSlowOps", "osd-f", ceph_daemon="osd.30"), None),
        # MTU and NIC counters of the same host and port: node_exporter's instance is not
        # ours. Also CephNodeExporterDown of osd-a does not reach the mixin's alerts of
        # osd-a (another instance), while it still holds back our MTU alert of osd-a.
        (mixin("CephNodeInconsistentMTU", device="eth4", instance="osd-g:9100"), None),
        (mixin("CephNodeNetworkPacketDrops", device="eth4", instance="osd-g:9100"), None),
        (mixin("CephNodeNetworkPacketErrors", device="eth4", instance="osd-g:9100"), None),
        (ours("CephNodeNetworkMTU", "osd-g", device="eth4"), None),
        (ours("CephNodeNetworkRings", "osd-g", device="eth4"), None),
        (ours("CephNodeExporterDown", "osd-a", job="cephnode"), None),
        (ours("CephNodeNetworkMTU", "osd-a", device="eth4"), "CephNodeExporterDown"),
        (mixin("CephNodeInconsistentMTU", device="eth4"), None),
        (mixin("CephNodeNetworkPacketDrops", device="eth4"), None),
        # Inactive or unavailable PGs beside laggy ones.
        (mixin("CephPGsInactive"), None),
        (mixin("CephPGUnavilableBlockingIO"), None),
        (mixin("CephPGUnavailableBlockingIO"), None),
        (ours("CephNodeLaggyPGs", None, severity="critical"), None),
    ]
    post_and_wait(alertmanager, cases)


# --------------------------------------------------------------------------------------
# The README table


def beside_mixin_rows() -> list[dict[str, str]]:
    """The rows of alerts/README.md's "Beside ceph-mixin" table, by column header."""
    section = README.read_text().split("\n## Beside ceph-mixin\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["ceph-mixin alert", "Its labels", "Our alert", "Direction", "Equal", "Why"]
    rows = []
    for line in lines[2:]:
        # A cell may hold `a|b` in code; the table has no such cell (6 cells exactly).
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


NAME = re.compile(r"\bCeph[A-Za-z]+\b")


def our_alerts() -> set[str]:
    doc = yaml.safe_load((ALERTS / RULE_FILES[1]).read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def alertnames(matchers: list[str], known: set[str]) -> set[str]:
    """The alert names a matcher list selects: its alertname="..." value, or each known
    name its alertname=~"..." matches (Alertmanager anchors regexes)."""
    out: set[str] = set()
    for m in matchers:
        parsed = re.fullmatch(r'alertname(=~|=)"(.*)"', m)
        if parsed is None:
            continue
        op, value = parsed.groups()
        if op == "=":
            out.add(value)
        else:
            out |= {n for n in known if re.fullmatch(value.replace("\\\\", "\\"), n)}
    return out


def test_readme_table_names_every_mixin_alert_of_alertmanager_yml() -> None:
    """Every mixin alert an inhibition or route of alertmanager.yml names is in the
    README table, each inhibition with its direction and equal labels; every row that
    claims an inhibition has it, every "none" row has none in either direction; every
    mixin alert this file posts is a row."""
    rows = beside_mixin_rows()
    mine = our_alerts()
    known = mine | set(MIXIN)
    am = yaml.safe_load(AM_CONFIG.read_text())

    def routes(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(r for child in node.get("routes", []) for r in routes(child))]

    used: set[str] = set()
    for r in routes(am["route"]):
        used |= alertnames(r.get("matchers", []), known)
    # (source, target, equal) of every inhibition; a pair may have several rules (an OSD
    # and a host form of one alert).
    rules: set[tuple[str, str, tuple[str, ...]]] = set()
    for rule in am["inhibit_rules"]:
        sources = alertnames(rule["source_matchers"], known)
        targets = alertnames(rule["target_matchers"], known)
        used |= sources | targets
        rules |= {(s, t, tuple(rule.get("equal", []))) for s in sources for t in targets}
    pairs = {(s, t) for s, t, _ in rules}
    mixin_used = used - mine
    assert mixin_used, "alertmanager.yml names no ceph-mixin alert"

    in_table: set[str] = set()
    claimed: set[tuple[str, str, tuple[str, ...]]] = set()
    for row in rows:
        theirs = set(NAME.findall(row["ceph-mixin alert"]))
        our = set(NAME.findall(row["Our alert"]))
        assert theirs and not theirs & mine, row["ceph-mixin alert"]
        assert our and our <= mine, row["Our alert"]
        in_table |= theirs
        equal = tuple(re.findall(r"`([a-z_]+)`", row["Equal"]))
        for t in theirs:
            for o in our:
                if row["Direction"] == "none":
                    assert (o, t) not in pairs and (t, o) not in pairs, (t, o)
                    continue
                source, target = {
                    "ours holds back theirs": (o, t),
                    "theirs holds back ours": (t, o),
                }[row["Direction"]]
                rule = (source, target, equal)
                assert rule in rules, f"README claims {rule}, alertmanager.yml lacks it"
                claimed.add(rule)

    assert mixin_used <= in_table, f"not in the README table: {sorted(mixin_used - in_table)}"
    mixin_rules = {r for r in rules if (r[0] in mixin_used) != (r[1] in mixin_used)}
    assert mixin_rules == claimed, f"inhibitions without their README row: {mixin_rules - claimed}"
    assert set(MIXIN) <= in_table, sorted(set(MIXIN) - in_table)
