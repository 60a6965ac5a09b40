"""Scale proof of CephNodeFactDrift: the reference fleet's facts replayed on a real
Prometheus (tests/alerts/drift.py generates them, tests/alerts/replay.py backfills the
recording rules and evaluates the alert every 5 minutes, as its group runs).

SLOW TEST (a minute or two on 2 cores): 68 OSD hosts (630 OSDs) and 3 MON hosts, every
60 s for five hours, twice:

- with drift and an upgrade: one host reboots without ``iommu=pt`` and another gets a
  namespace back on mq-deadline at minute 10, while from minute 30 every OSD host in turn
  (one every 3 minutes, two scrapes missed each) reboots into a new kernel and BIOS.
  Exactly the facts in which each faulty host differs from the others (computed from the
  exporter's expositions, not from the rules) fire, on that host, naming the majority's
  value, after the settle hour and the hold; the rolling update names nobody, neither its
  first hosts nor its last, nor does any uniform fact or a MON host;
- uniform: nothing fires at any evaluation.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.alerts import drift as D
from tests.alerts import fleet as F
from tests.alerts import replay as R
from tests.conftest import REPO, need_tool

RULE_FILES = [REPO / "alerts" / "cephnode-rules.yml", REPO / "alerts" / "cephnode-alerts.yml"]
START = 1_700_000_000 // 7200 * 7200
ALERT = "CephNodeFactDrift"
END = 300


@dataclass
class Run:
    fleet: F.Fleet
    drift: D.Drift
    timeline: R.Timeline
    # The hosts holding each value of kernel_release at the end (from Prometheus).
    releases_at_end: dict[str, int]
    # Evaluations at which the new kernel was held by at most 10 % of the hosts while the
    # old one had a majority: a drift but for its motion.
    upgrade_minority_evals: int


@pytest.fixture(scope="module")
def rules() -> list[R.Rule]:
    everything = R.load_rules(RULE_FILES)
    alert = [r for r in everything if r.kind == "alert" and r.name == ALERT]
    assert alert, f"no {ALERT} in the rule files"
    wanted = R.needed_recordings(everything, alert)
    return [r for r in everything if r.kind == "record" and r.name in wanted] + alert


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, F.Snapshot]:
    return F.collect_snapshots(tmp_path_factory.mktemp("drift-nodes"))


def replay(
    drift: D.Drift, snapshots: dict[str, F.Snapshot], rules: list[R.Rule], workdir: Path
) -> Run:
    need_tool("promtool", "prometheus")
    need_tool("prometheus", "prometheus")
    fleet = F.Fleet.build(mode="clean")
    needed, missing = R.needed_metrics(rules, F.known_names(snapshots))
    assert not missing, f"the drift rules read series the generator cannot make: {missing}"
    files = D.generate(fleet, drift, START, snapshots, needed, workdir / "om")
    data = workdir / "data"
    R.backfill_openmetrics(files, data)
    shutil.rmtree(workdir / "om")
    end = START + 60 * drift.end
    with R.Prometheus(data) as prom:
        R.backfill_recording_rules(prom, rules, [(START, end)], workdir)
        timeline = R.evaluate_alerts(prom, rules, START, end)
        result = prom.query(
            'count by (value) (instance_fact:cephnode_fact_value:group{fact="kernel_release"})',
            end,
        )
        ratio = "cluster_fact_value:cephnode_fact_nodes:ratio"
        minority = prom.query(
            f'count_over_time(({ratio}{{fact="kernel_release",value="{D.NEW_RELEASE}"}} <= 0.1'
            f' and on (cluster) ({ratio}{{fact="kernel_release"}} >= 0.75))'
            f"[{60 * drift.end}s:300s])",
            end,
        )
    releases = {r["metric"]["value"]: int(float(r["value"][1])) for r in result}
    n = int(float(minority[0]["value"][1])) if minority else 0
    return Run(fleet, drift, timeline, releases, n)


@pytest.fixture(scope="module")
def drifted(
    snapshots: dict[str, F.Snapshot], rules: list[R.Rule], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("drift-faulted")
    yield replay(D.Drift(end=END), snapshots, rules, workdir)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def uniform(
    snapshots: dict[str, F.Snapshot], rules: list[R.Rule], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("drift-uniform")
    yield replay(D.Drift.uniform(), snapshots, rules, workdir)
    shutil.rmtree(workdir, ignore_errors=True)


def _minute(t: float) -> float:
    return (t - START) / 60


def test_drift_names_the_host_the_fact_and_the_majority(
    drifted: Run, snapshots: dict[str, F.Snapshot], rules: list[R.Rule]
) -> None:
    d = drifted.drift
    expected = {
        (F.Host(d.iommu_host, "").instance, fact) for fact in D.drifted_facts(snapshots, "iommu")
    } | {
        (F.Host(d.scheduler_host, "").instance, fact)
        for fact in D.drifted_facts(snapshots, "scheduler")
    }
    # The faults differ in what they should: the IOMMU parameters of the kernel command
    # line and the groups' domain type, and the namespace's scheduler.
    assert (F.Host(d.iommu_host, "").instance, "iommu_kernel_params_info") in expected
    assert (F.Host(d.iommu_host, "").instance, "iommu_group_info") in expected
    assert (F.Host(d.scheduler_host, "").instance, "nvme_scheduler:nvme3n1") in expected
    healthy = D.host_facts(snapshots["healthy"])
    hold = next(r.for_s for r in rules if r.name == ALERT) / 60
    # Named after the settle hour and the hold (and up to two 5-minute evaluations).
    due = d.fault_at + 60 + hold + 10
    problems = []
    for t in drifted.timeline.times:
        minute = _minute(t)
        firing = {
            (lb["instance"], lb["fact"]): lb
            for name, lb in drifted.timeline.firing[t]
            if name == ALERT
        }
        unexpected = set(firing) - expected
        if unexpected:
            problems.append(f"minute {minute:g}: unexpected {sorted(unexpected)}")
        if minute >= due and set(firing) != expected:
            problems.append(f"minute {minute:g}: missing {sorted(expected - set(firing))}")
        if minute < d.fault_at + 60 + hold and firing:
            problems.append(f"minute {minute:g}: fired before the settle hour and hold")
        for (_, fact), lb in firing.items():
            # The majority's value is the healthy hosts' (for the upgraded facts: the new).
            assert {lb["majority_value"]} == healthy[fact], (fact, lb)
            assert lb["value"] not in healthy[fact], (fact, lb)
    assert not problems, "\n".join(problems[:40])
    # The rolling update happened in the data: every OSD host runs the new kernel, and for
    # its first 20 minutes (7 hosts of 68) the new kernel was a minority under a majority:
    # only its motion kept its hosts from being named.
    assert drifted.releases_at_end == {D.NEW_RELEASE: F.OSD_NODES}
    assert drifted.upgrade_minority_evals >= 3, drifted.upgrade_minority_evals


def test_uniform_fleet_names_nobody(uniform: Run) -> None:
    fired = [
        (_minute(t), lb["instance"], lb["fact"])
        for t in uniform.timeline.times
        for name, lb in uniform.timeline.firing[t] + uniform.timeline.pending[t]
        if name == ALERT
    ]
    assert not fired, fired[:20]
    assert len(uniform.releases_at_end) == 1 and sum(uniform.releases_at_end.values()) == 68
