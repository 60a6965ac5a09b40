"""Alerting end to end, with real processes only: the exporter, Prometheus, Alertmanager,
a Ceph cluster, and a webhook receiver inside the test.

The exporter serves the detuned reference node (a private copy of the fixture tree: its
NVMe controllers' IOMMU groups are DMA-FQ, so the ``iommu.nvme`` check fails) together
with the admin sockets of the session's real Ceph cluster (tests/cephcluster.py), so that
the host runs OSDs, which the detuned-node alerts require. Prometheus scrapes it and the
real mgr's prometheus module with the production rule files, and sends alerts to an
Alertmanager whose receivers all post to the test. The scenario:

1. CephNodeIOMMUTranslatingNVMe arrives at the ``ticket-digest`` receiver, one alert per
   translating controller (read from the fixture tree, not from the exporter), with the
   exporter's instance, the cluster and rendered annotations.
2. Under a size-2 pool's write load, one replica OSD gets ``kill -STOP``;
   CephNodeLaggyPGs arrives at the ``pager`` receiver with exactly the labels the rule
   produces (it sums by cluster: no pool_id) and stays firing while the OSD is stopped.
3. ``kill -CONT``: Alertmanager sends the laggy alert as resolved. At the same time the
   IOMMU groups' default domains are switched to ``identity`` by writing their ``type``
   files, which is what ``echo identity > /sys/kernel/iommu_groups/<N>/type`` does on a
   running kernel (Linux 5.11+, sysfs-kernel-iommu_groups ABI). The exporter reads the
   type in every scrape, so the check passes and the IOMMU alert resolves *because the
   fact changed*: the exporter is never restarted or stopped, the test proves that every
   scrape succeeded, and no CephNodeExporterDown (which would also inhibit the IOMMU
   alert) is ever sent. Restarting the exporter on the tuned tree would resolve the alert
   by staleness first (a failed scrape marks every series stale), which proves nothing
   about the rule.

Timing transform (tests/alerts/e2e_support.py), mechanical and checked by the test:

- Rule files: each group's ``interval: 1m`` becomes ``1s`` and every ``for:`` is divided
  by 60 (15m -> 15s, 1m -> 1s, 5m -> 5s): rule time runs 60 times faster, so the
  relations between alerts (CephNodeExporterDown's 5 minutes against the 15 of the
  detuned alerts) stay, and so are the windows of max_, last_, min_ and count_over_time
  (at least four test scrapes), which carry states over missed scrapes or count
  evaluations in a row. Rate windows, labels and annotations are untouched:
  the asserted alerts read instant gauges, and a ``rate(...[5m])`` elsewhere needs only
  two samples in its window, which a 2 s scrape gives within seconds.
- Alertmanager: every route's group_wait and group_interval become 1s and
  repeat_interval 1h (longer than the test); each receiver that notifies is replaced by
  a webhook to ``<test server>/<receiver name>``. Routes and inhibitions unchanged.
- Prometheus: alerts/prometheus.yml with one target per job, the test cluster's name as
  the ``cluster`` target label, and 2 s scrapes. The exporter's OSD budget
  (``--collector.osd.timeout=0.5``) stays well inside the 1.5 s a 2 s scrape timeout
  leaves it, as the production 2 s inside 19.5 s: a stopped OSD must cost its own series,
  not the whole osd collector (the detuned alerts need its OSD series).

What the cluster contributes and how fast: the mgr module refreshes its cached metrics
every 15 s (``mgr/prometheus/scrape_interval``, read only when the module starts;
restarting the module respawns the whole Pacific mgr, about 20 s, under every test of
the session). A PG only turns ``laggy`` when an op arrives after its read lease expired
(0.8 x osd_heartbeat_grace of 8 s; PG::check_laggy runs on op arrival): the load started
before the stop is stuck waiting for the replica, so a fresh writer is started every 2 s
from 6.5 s after the stop until the mgr's PG map shows laggy PGs in the pool.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.alerts.e2e_support import (
    ALERTMANAGER_TIMERS,
    RULE_INTERVAL,
    TIME_SCALE,
    Daemon,
    Notification,
    Webhook,
    alertmanager_for_test,
    format_duration_ms,
    http_get,
    parse_duration_ms,
    prom_alerts,
    prom_query,
    prometheus_for_test,
    spawn,
    speed_up_rules,
    wait_until,
    without,
)
from tests.cephcluster import CephCluster, free_port, shared_cluster
from tests.conftest import REPO, MakeTree, need_tool

ALERTS_DIR = REPO / "alerts"
IOMMU_ALERT = "CephNodeIOMMUTranslatingNVMe"
LAGGY_ALERT = "CephNodeLaggyPGs"
EXPORTER_DOWN = "CephNodeExporterDown"
# Receivers of alerts/alertmanager.yml: detuned-node warnings go to the digest, critical
# alerts page.
IOMMU_RECEIVER = "ticket-digest"
LAGGY_RECEIVER = "pager"
# Default-domain types whose DMA is translated (sysfs-kernel-iommu_groups ABI).
TRANSLATED_TYPES = {"DMA", "DMA-FQ"}
LISTENING = re.compile(r"msg=listening address=(\S+):(\d+)")
POOL = "e2elaggy"
# Fresh writers while the replica is stopped: the first after the lease can have expired.
PROBE_START, PROBE_EVERY, PROBE_MAX = 6.5, 2.0, 12


@pytest.fixture(scope="session")
def osd_cluster(request: pytest.FixtureRequest) -> CephCluster:
    return shared_cluster(request.config)


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((ALERTS_DIR / name).read_text())


def alert_rule(rule_docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    rules = [
        r for d in rule_docs for g in d["groups"] for r in g["rules"] if r.get("alert") == name
    ]
    assert len(rules) == 1, f"{name}: {len(rules)} rules"
    return rules[0]


def iommu_type_files(sysfs: Path) -> dict[str, Path]:
    """NVMe controller -> its IOMMU group's ``type`` file, read from the tree itself."""
    out = {}
    for ctrl in sorted((sysfs / "class" / "nvme").iterdir()):
        group = (ctrl / "device" / "iommu_group").resolve()
        out[ctrl.name] = group / "type"
    return out


def replica_victim(cluster: CephCluster, pool_id: int) -> int:
    """The memstore OSD that is a non-primary member of the most PGs of the pool."""
    counts: dict[int, int] = {}
    for pg in cluster.pgs(pool_id):
        for osd in pg["acting"]:
            if osd != pg["acting_primary"] and osd in cluster.memstore_ids:
                counts[osd] = counts.get(osd, 0) + 1
    assert counts, f"no memstore replica in pool {pool_id}: {cluster.pgs(pool_id)}"
    return max(counts, key=lambda osd: counts[osd])


def matching(
    notes: list[Notification], alertname: str, status: str, after: float = 0.0
) -> list[tuple[Notification, dict[str, Any]]]:
    """(notification, alert) of every alert named ``alertname`` in state ``status`` that
    arrived after the monotonic time ``after``."""
    return [
        (n, a)
        for n in notes
        if n.at > after
        for a in n.alerts
        if a["labels"].get("alertname") == alertname and a["status"] == status
    ]


def check_annotations(alert: dict[str, Any], rule: dict[str, Any], *mentions: str) -> None:
    """Annotations are the rule's, every template rendered, the description naming what
    the alert is about."""
    got, want = alert["annotations"], rule["annotations"]
    assert set(got) == set(want), (got, want)
    for key, text in got.items():
        assert "{{" not in text and "<no value>" not in text, (key, text)
        if "{{" not in want[key]:
            assert text == want[key].strip(), (key, text)
    for word in mentions:
        assert word in got["description"], (word, got["description"])


def production_files() -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """alerts/prometheus.yml, the rule files it names, and alerts/alertmanager.yml."""
    prom_doc = load("prometheus.yml")
    rule_docs = {name: load(name) for name in prom_doc["rule_files"]}
    return prom_doc, rule_docs, load("alertmanager.yml")


def write_rule_files(rule_docs: dict[str, dict[str, Any]], dest: Path) -> None:
    """The sped-up copies, under the names prometheus.yml gives them; proves that only
    the groups' interval and the rules' for changed, and by the documented amounts."""
    for name, doc in rule_docs.items():
        fast = speed_up_rules(doc)
        assert without(fast, ["interval", "for", "expr"]) == without(
            doc, ["interval", "for", "expr"]
        ), name
        # Expressions differ only in their max_, last_, min_ and count_over_time windows.
        window = re.compile(r"(?<=_over_time\()([^\[]*)\[[0-9a-z]+\]")
        for fg, g in zip(fast["groups"], doc["groups"], strict=True):
            for fr, r in zip(fg["rules"], g["rules"], strict=True):
                assert window.sub(r"\1[]", fr["expr"]) == window.sub(r"\1[]", r["expr"]), name
        for group, fast_group in zip(doc["groups"], fast["groups"], strict=True):
            assert ("interval" in fast_group) == ("interval" in group), group["name"]
            assert fast_group.get("interval", RULE_INTERVAL) == RULE_INTERVAL
            for rule, fast_rule in zip(group["rules"], fast_group["rules"], strict=True):
                if "for" in rule:
                    want = parse_duration_ms(rule["for"]) // TIME_SCALE
                    assert fast_rule["for"] == format_duration_ms(want), rule
        (dest / name).write_text(yaml.safe_dump(fast, sort_keys=False))


def write_alertmanager_config(
    am_doc: dict[str, Any], webhook_url: str, dest: Path, amtool: str
) -> Path:
    test_doc = alertmanager_for_test(am_doc, webhook_url)
    same = [*ALERTMANAGER_TIMERS, "receivers"]
    assert without(test_doc, same) == without(am_doc, same)
    assert [r["name"] for r in test_doc["receivers"]] == [r["name"] for r in am_doc["receivers"]]
    path = dest / "alertmanager.yml"
    path.write_text(yaml.safe_dump(test_doc, sort_keys=False))
    res = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return path


def write_prometheus_config(
    prom_doc: dict[str, Any], dest: Path, promtool: str, **kwargs: Any
) -> Path:
    """prometheus_for_test's copy beside the rule files; ``promtool check config`` also
    checks the rule files it names."""
    test_doc = prometheus_for_test(prom_doc, **kwargs)
    changed = ["scrape_interval", "scrape_timeout", "evaluation_interval", "static_configs",
               "alerting"]  # fmt: skip
    assert without(test_doc, changed) == without(prom_doc, changed)
    path = dest / "prometheus.yml"
    path.write_text(yaml.safe_dump(test_doc, sort_keys=False))
    res = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return path


@dataclass
class Stack:
    """Alertmanager, the exporter and Prometheus of one test, and how to report on them."""

    cluster: CephCluster
    webhook: Webhook
    daemons: list[Daemon] = field(default_factory=list)
    prom_base: str = ""
    exporter_addr: str = ""
    extra: Callable[[], str] = lambda: ""

    def describe(self) -> str:
        """Everything a failure message needs: Prometheus' alerts, what the webhook got,
        the processes' logs, and whatever the scenario adds."""
        alerts = prom_alerts(self.prom_base) if self.prom_base else "(not started)"
        return "\n".join(
            [
                f"Prometheus /api/v1/alerts:\n{alerts}",
                f"webhook received:\n{self.webhook.summary()}",
                *(d.tail() for d in self.daemons),
                self.extra(),
            ]
        )

    def check_alive(self) -> None:
        for daemon in self.daemons:
            daemon.check_alive()

    def query(self, expr: str) -> list[dict[str, Any]]:
        return prom_query(self.prom_base, expr)

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()
        self.webhook.close()


def start_stack(
    stack: Stack, tmp_path: Path, exporter_flags: list[str], tools: dict[str, str]
) -> None:
    """Start Alertmanager, the exporter and Prometheus; return when Prometheus has
    scraped both targets and the exporter's OSD series."""
    prom_doc, rule_docs, am_doc = production_files()
    am_port, prom_port = free_port(), free_port()
    am_config = write_alertmanager_config(am_doc, stack.webhook.url, tmp_path, tools["amtool"])
    stack.daemons.append(
        spawn(
            "alertmanager",
            [tools["alertmanager"], f"--config.file={am_config}",
             f"--storage.path={tmp_path / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address="],  # no HA gossip port
            tmp_path,
        )
    )  # fmt: skip

    exporter = spawn(
        "exporter",
        [sys.executable, "-m", "cephnode_exporter", "serve",
         "--web.listen-address=127.0.0.1:0", *exporter_flags],
        tmp_path,
    )  # fmt: skip
    stack.daemons.append(exporter)

    def listening() -> str | None:
        exporter.check_alive()
        match = LISTENING.search(exporter.log.read_text(errors="replace"))
        return f"127.0.0.1:{match.group(2)}" if match else None

    stack.exporter_addr = wait_until("the exporter listens", listening, 30, stack.describe, 0.1)

    write_rule_files(rule_docs, tmp_path)
    prom_config = write_prometheus_config(
        prom_doc,
        tmp_path,
        tools["promtool"],
        cluster=stack.cluster.name,
        targets={
            "cephnode": stack.exporter_addr,
            "ceph": stack.cluster.prometheus_url.removeprefix("http://").removesuffix("/metrics"),
        },
        alertmanager=f"127.0.0.1:{am_port}",
    )
    stack.daemons.append(
        spawn(
            "prometheus",
            [tools["prometheus"], f"--config.file={prom_config}",
             f"--storage.tsdb.path={tmp_path / 'prom-data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            tmp_path,
        )
    )  # fmt: skip
    stack.prom_base = f"http://127.0.0.1:{prom_port}"

    def ready() -> bool:
        stack.check_alive()
        return (
            http_get(f"{stack.prom_base}/-/ready")[0] == 200
            and http_get(f"http://127.0.0.1:{am_port}/-/ready")[0] == 200
        )

    wait_until("Prometheus and Alertmanager ready", ready, 30, stack.describe)

    def scraped() -> bool:
        up = {r["metric"]["job"]: r["value"][1] for r in stack.query("up")}
        osds = stack.query(f'cephnode_osd_scrape_success{{cluster="{stack.cluster.name}"}}')
        return up == {"cephnode": "1", "ceph": "1"} and {
            r["metric"]["ceph_daemon"] for r in osds
        } == {f"osd.{i}" for i in stack.cluster.osds}

    wait_until("both targets and every OSD scraped", scraped, 30, stack.describe)


def test_iommu_and_laggy_pg_alerts_reach_the_receiver_and_resolve(
    osd_cluster: CephCluster, make_tree: MakeTree, tmp_path: Path
) -> None:
    tools = {
        "prometheus": need_tool("prometheus", "prometheus"),
        "promtool": need_tool("promtool", "prometheus"),
        "alertmanager": need_tool("prometheus-alertmanager", "prometheus-alertmanager"),
        "amtool": need_tool("amtool", "prometheus-alertmanager"),
    }
    cluster = osd_cluster
    _, rule_docs, _ = production_files()
    iommu_rule = alert_rule(list(rule_docs.values()), IOMMU_ALERT)
    laggy_rule = alert_rule(list(rule_docs.values()), LAGGY_ALERT)

    tree = make_tree("epyc9454p-detuned")
    type_files = iommu_type_files(tree.sys)
    translated = {c for c, f in type_files.items() if f.read_text().strip() in TRANSLATED_TYPES}
    assert translated, f"the detuned fixture has no translating NVMe: {type_files}"

    pool_id = cluster.create_pool(POOL, size=2, pg_num=16)
    victim = replica_victim(cluster, pool_id)
    benches: list[subprocess.Popen] = []
    stopped = False

    def pgs() -> str:
        try:
            states = sorted({p["state"] for p in cluster.pgs(pool_id)})
        except Exception as exc:
            states = [f"unavailable: {exc}"]
        return f"pool {pool_id} PG states {states}; osd.{victim} stopped: {stopped}"

    stack = Stack(cluster, Webhook(), extra=pgs)
    try:
        flags = [f for f in tree.flags if not f.startswith("--ceph.socket-dir=")]
        flags += [f"--ceph.socket-dir={cluster.socket_dir}", "--collector.osd.timeout=0.5"]
        start_stack(stack, tmp_path, flags, tools)
        webhook, instance = stack.webhook, stack.exporter_addr

        # --- write load, kill -STOP of a replica; wait for both alerts
        benches.append(cluster.bench_background(POOL, 120, mode="write", block=4096))
        time.sleep(1.5)  # the load is under way
        assert not matching(webhook.received(), LAGGY_ALERT, "firing"), webhook.summary()
        cluster.signal_osd(victim, signal.SIGSTOP)
        stopped = True
        next_probe = time.monotonic() + PROBE_START
        laggy_expr = (
            f'ceph_pg_laggy{{cluster="{cluster.name}",pool_id="{pool_id}"}}'
            f' + ceph_pg_wait{{cluster="{cluster.name}",pool_id="{pool_id}"}} > 0'
        )

        def both_firing() -> bool:
            nonlocal next_probe
            stack.check_alive()
            now = time.monotonic()
            if now >= next_probe and len(benches) <= PROBE_MAX:
                # The mgr's live PG map (not its 15 s metrics cache) says when to stop.
                if not any(
                    "laggy" in pg["state"] or "wait" in pg["state"] for pg in cluster.pgs(pool_id)
                ):
                    benches.append(
                        cluster.bench_background(POOL, 120, mode="write", block=4096, threads=4)
                    )
                next_probe = now + PROBE_EVERY
            notes = webhook.received()
            iommu = {a["labels"]["controller"] for _, a in matching(notes, IOMMU_ALERT, "firing")}
            return iommu >= translated and bool(matching(notes, LAGGY_ALERT, "firing"))

        wait_until(
            f"{IOMMU_ALERT} for {sorted(translated)} and {LAGGY_ALERT} (osd.{victim} stopped)",
            both_firing, 120, stack.describe,
        )  # fmt: skip
        notes = webhook.received()

        iommu_firing = matching(notes, IOMMU_ALERT, "firing")
        assert {a["labels"]["controller"] for _, a in iommu_firing} == translated
        for note, alert in iommu_firing:
            assert note.path == f"/{IOMMU_RECEIVER}", note.brief()
            assert note.body["receiver"] == IOMMU_RECEIVER
            assert note.body["groupLabels"] == {"alertname": IOMMU_ALERT, "cluster": cluster.name}
            ctrl = alert["labels"]["controller"]
            assert alert["labels"] == {
                "alertname": IOMMU_ALERT,
                "severity": iommu_rule["labels"]["severity"],
                "cluster": cluster.name,
                "instance": instance,
                "job": "cephnode",
                "check": "iommu.nvme",
                "subject": ctrl,
                "controller": ctrl,
            }, alert["labels"]
            check_annotations(alert, iommu_rule, ctrl, instance)
        t_iommu = min(n.at for n, _ in iommu_firing)

        laggy_firing = matching(notes, LAGGY_ALERT, "firing")
        for note, alert in laggy_firing:
            assert note.path == f"/{LAGGY_RECEIVER}", note.brief()
            assert note.body["receiver"] == LAGGY_RECEIVER
            assert alert["labels"] == {
                "alertname": LAGGY_ALERT,
                "severity": laggy_rule["labels"]["severity"],
                "cluster": cluster.name,
            }, alert["labels"]
            check_annotations(alert, laggy_rule, cluster.name)
        # The laggy PGs behind it are in the test's pool, under the target's cluster label.
        assert stack.query(f"max_over_time(({laggy_expr})[5m:1s])"), stack.describe()

        # --- kill -CONT; the IOMMU groups switched to identity at runtime
        cluster.signal_osd(victim, signal.SIGCONT)
        stopped = False
        t_fix = time.monotonic()
        for bench in benches:
            bench.kill()
            bench.wait(timeout=10)
        for ctrl in translated:
            type_files[ctrl].write_text("identity\n")

        def both_resolved() -> bool:
            stack.check_alive()
            notes = webhook.received()
            iommu = {a["labels"]["controller"] for _, a in matching(notes, IOMMU_ALERT, "resolved")}
            return iommu >= translated and bool(matching(notes, LAGGY_ALERT, "resolved"))

        wait_until(f"{IOMMU_ALERT} and {LAGGY_ALERT} resolved", both_resolved, 90, stack.describe)
        notes = webhook.received()
        # Nothing resolved either alert before the fix: not the stopped OSD's missing
        # series, not a slow scrape.
        for name, receiver in ((LAGGY_ALERT, LAGGY_RECEIVER), (IOMMU_ALERT, IOMMU_RECEIVER)):
            resolved = matching(notes, name, "resolved")
            for note, alert in resolved:
                assert note.at > t_fix and note.path == f"/{receiver}", note.brief()
                assert alert["labels"]["cluster"] == cluster.name
            assert any(note.body["status"] == "resolved" for note, _ in resolved), name

        # Resolved by the fact, not by a failed scrape: the exporter answered every scrape
        # since the alert fired and still judges iommu.nvme, and no controller fails it
        # any more (a failing subject is the only kind with a series).
        assert stack.query('cephnode_tuning_check_hash{check="iommu.nvme"}')
        failing = stack.query('cephnode_tuning_check_failed{check="iommu.nvme"}')
        assert failing == [], failing
        window = int(time.monotonic() - t_iommu) + 1
        up = stack.query(f'min_over_time(up{{job="cephnode"}}[{window}s])')
        assert [r["value"][1] for r in up] == ["1"], up
        down = [
            n.brief() for n in notes for a in n.alerts if a["labels"]["alertname"] == EXPORTER_DOWN
        ]
        assert not down, down
    finally:
        if stopped:
            with contextlib.suppress(Exception):
                cluster.signal_osd(victim, signal.SIGCONT)
        for bench in benches:
            if bench.poll() is None:
                bench.kill()
            bench.wait(timeout=10)
        stack.stop()
        with contextlib.suppress(Exception):
            cluster.ceph("osd", "pool", "rm", POOL, POOL, "--yes-i-really-really-mean-it")
