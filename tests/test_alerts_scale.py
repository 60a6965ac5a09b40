"""Scale proof of the alert rules: a 630-OSD fleet replayed on a real Prometheus.

SLOW TEST (a few minutes on 2 cores; most of the suite's alerting time): it generates
the reference fleet twice (tests/alerts/fleet.py: 68 OSD nodes, 630 OSDs, 3 MON nodes,
noise and a fleet-wide load swing), once with the injected faults and once clean, turns
each into TSDB blocks with promtool, backfills the recording rules and evaluates every
alert rule at every minute of the main window (tests/alerts/replay.py).

What it shows: with faults, exactly the alerts the faults must raise fire, on the right
host, OSD, controller or check, and nothing else fires at any evaluation, the load swing
included; a clean fleet fires nothing. Which alert each fault raises, and when, comes
from the scenario (``fleet.expected_alerts``: which host or OSD got which fault), with
the `for` durations read from the rule files.

The simulated windows are shorter than fleet.py's default timeline (65 minutes, plus the
same clock times a week earlier from 10 minutes before) to keep the run short; the load
swing still ramps for 10 minutes and holds its peak for 20, longer than the latency
alerts' 15-minute `for` plus their 5-minute rate window, the laggy episode and the blip
fall in the peak, and the scrape interval stays 60 s.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.alerts import fleet as F
from tests.alerts import replay as R
from tests.conftest import REPO, need_tool
from tests.test_metrics_doc import documented

RULE_FILES = [REPO / "alerts" / "cephnode-rules.yml", REPO / "alerts" / "cephnode-alerts.yml"]
# A fixed instant on a 2-hour boundary (TSDB block ranges): the data never depends on
# the wall clock.
MAIN_START = 1_700_000_000 // 7200 * 7200
TIMELINE = F.Timeline(
    end=65,
    debug_on=10,
    swing=(25, 35, 55, 60),
    laggy=(40, 47),
    blip=45,
    baseline_lead=10,
    iommu_reboot=(3, 6),
    cstates_reboot=(5, 8),
    governor=15,
    scheduler=18,
    latency=22,
    stalled=(28, 32),
    network=(10, 26),
)
JOBS = 2


@dataclass
class Replayed:
    fleet: F.Fleet
    scenario: F.Scenario
    timeline: R.Timeline
    # Fleet op rate at the swing's peak over the rate before it (from the data).
    swing_ratio: float
    written: set[str]
    # Minutes of the main window with a latency context from the mgr, and exporters that
    # missed at least one scrape (from the data).
    context_minutes: int
    exporter_down: int
    # Per dashboard file, its panels' queries over the main window (faulted fleet only).
    dashboards: dict[str, R.Refresh] = field(default_factory=dict)
    # The encrypted hosts' median read mean over the plain OSDs' median, before the faults:
    # what the outlier alerts would see without comparing encrypted OSDs among themselves.
    encrypted_ratio: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def rules() -> list[R.Rule]:
    return R.load_rules(RULE_FILES)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, F.Snapshot]:
    return F.collect_snapshots(tmp_path_factory.mktemp("fleet-nodes"))


def replay(
    fleet: F.Fleet,
    snapshots: dict[str, F.Snapshot],
    rules: list[R.Rule],
    workdir: Path,
    dashboards: bool = False,
) -> Replayed:
    """Generate, backfill and evaluate one fleet; Prometheus is stopped on return. With
    ``dashboards``, the series the dashboards read are generated too and every panel's
    query runs over the main window."""
    need_tool("promtool", "prometheus")
    need_tool("prometheus", "prometheus")
    needed, missing = R.needed_metrics(rules, F.known_names(snapshots))
    assert not missing, f"the rules read series the fleet generator cannot make: {missing}"
    if dashboards:
        needed |= R.dashboard_metrics() & F.known_names(snapshots)
    scenario = F.Scenario(fleet, MAIN_START)
    files, stats = F.generate(fleet, scenario, workdir / "om", needed, snapshots, jobs=JOBS)
    data = workdir / "data"
    R.backfill_openmetrics(files, data, jobs=JOBS)
    shutil.rmtree(workdir / "om")
    windows = [(w.start, w.start + (w.steps - 1) * w.step_s) for w in scenario.windows]
    alerts = [r for r in rules if r.kind == "alert"]
    # The baseline week is read only through `offset`: only those alerts' inputs are
    # recorded there.
    offset_alerts = [r for r in alerts if " offset " in r.expr]
    wanted = [
        R.needed_recordings(rules, offset_alerts if w.week else alerts) for w in scenario.windows
    ]
    if dashboards:
        wanted[-1] |= R.dashboard_recordings(rules)
    with R.Prometheus(data) as prom:
        R.backfill_recording_rules(prom, rules, windows, workdir, window_rules=wanted, jobs=JOBS)
        main = scenario.windows[-1]
        timeline = R.evaluate_alerts(prom, rules, *windows[-1], jobs=JOBS)
        a, b, _, _ = fleet.timeline.swing
        # Client ops of the whole fleet, from the hosts' pooled histograms (a series the
        # rules read, so the generator writes it).
        ops = "sum(rate(cephnode_osd_host_op_latency_seconds_count[5m]))"
        before = float(prom.query(ops, main.start + (a - 5) * 60)[0]["value"][1])
        peak = float(prom.query(ops, main.start + (b + 10) * 60)[0]["value"][1])
        end = main.start + (main.steps - 1) * main.step_s
        span = f"{(main.steps - 1) * main.step_s}s"

        def scalar(q: str) -> int:
            result = prom.query(q, end)
            return int(float(result[0]["value"][1])) if result else 0

        context = scalar(f"sum(count_over_time(cluster:ceph_latency_context:max10m[{span}]))")
        down = scalar(f'count(min_over_time(up{{job="{F.EXPORTER_JOB}"}}[{span}]) == 0)')
        hours = (main.steps - 1) * main.step_s / 3600
        boards = R.dashboard_refresh(prom, fleet, end, hours, all_range=True) if dashboards else {}
        encrypted = encrypted_ratio(prom, main.start + (fleet.timeline.latency - 2) * 60)
    return Replayed(
        fleet,
        scenario,
        timeline,
        peak / before,
        set(stats["names"]),
        context,
        down,
        boards,
        encrypted_ratio=encrypted,
    )


def encrypted_ratio(prom: R.Prometheus, at: float) -> dict[str, float]:
    """Per encrypted host: the median of its OSDs' read means over the median of the
    plain OSDs' (recorded ceph_daemon_op:...:mean_rate2m, at ``at``)."""
    mean = "ceph_daemon_op:cephnode_osd_op_latency_seconds:mean_rate2m"
    query = (
        f'quantile by (instance) (0.5, {mean}{{op="read", encrypted="true"}}) / scalar('
        f'quantile(0.5, {mean}{{op="read", encrypted="false"}}))'
    )
    return {r["metric"]["instance"]: float(r["value"][1]) for r in prom.query(query, at)}


@pytest.fixture(scope="module")
def faulted(
    snapshots: dict[str, F.Snapshot], rules: list[R.Rule], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replayed]:
    workdir = tmp_path_factory.mktemp("fleet-faulted")
    yield replay(F.Fleet.build(timeline=TIMELINE), snapshots, rules, workdir, dashboards=True)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def operations(
    snapshots: dict[str, F.Snapshot], rules: list[R.Rule], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replayed]:
    workdir = tmp_path_factory.mktemp("fleet-operations")
    fleet = F.Fleet.build(timeline=TIMELINE, mode="operations")
    yield replay(fleet, snapshots, rules, workdir)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def clean(
    snapshots: dict[str, F.Snapshot], rules: list[R.Rule], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replayed]:
    workdir = tmp_path_factory.mktemp("fleet-clean")
    yield replay(F.Fleet.build(timeline=TIMELINE, mode="clean"), snapshots, rules, workdir)
    shutil.rmtree(workdir, ignore_errors=True)


def for_minutes(rules: list[R.Rule]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rules:
        if r.kind == "alert":
            out[r.name] = max(out.get(r.name, 0.0), r.for_s / 60)
    return out


def ident(name: str, labels: dict[str, str]) -> str:
    """An alert as a reader identifies it: its name and the labels that name a thing."""
    keys = (
        "instance",
        "hostname",
        "ceph_daemon",
        "controller",
        "device",
        "op",
        "check",
        "context",
        "severity",
    )
    return name + "{" + ",".join(f"{k}={labels[k]}" for k in keys if k in labels) + "}"


def violations(run: Replayed, expected: list[F.Expect]) -> list[str]:
    """Every evaluation at which a firing alert is not expected, or an expected one is
    not firing (or fires more than ``count`` times)."""
    problems = []
    for t in run.timeline.times:
        minute = run.scenario.minute(int(t))
        firing = run.timeline.firing[t]
        for name, labels in firing:
            if not any(e.matches(name, labels) and e.state(minute) != "no" for e in expected):
                problems.append(f"minute {minute:g}: unexpected {ident(name, labels)}")
        for e in expected:
            if e.state(minute) != "yes":
                continue
            n = sum(1 for name, labels in firing if e.matches(name, labels))
            if n != e.count:
                problems.append(
                    f"minute {minute:g}: {e.alertname}{dict(e.labels)} fires {n} times,"
                    f" expected {e.count}"
                )
    return problems


def test_faulted_fleet_fires_exactly_the_injected_faults(
    faulted: Replayed, rules: list[R.Rule], snapshots: dict[str, F.Snapshot]
) -> None:
    expected = F.expected_alerts(faulted.fleet, for_minutes(rules).__getitem__, snapshots)
    end = faulted.fleet.timeline.end
    # Every fault's alert must be firing at some point of the window (the scenario is
    # long enough for every `for`).
    assert all(e.by < end for e in expected)
    problems = violations(faulted, expected)
    assert not problems, f"{len(problems)} deviations:\n" + "\n".join(problems[:60])
    # Each fault is seen, named with its subject, at some evaluation.
    fired = {ident(n, lb) for t in faulted.timeline.times for n, lb in faulted.timeline.firing[t]}
    f = faulted.fleet.faults
    slow, failing, stalled = (
        faulted.fleet.osd(x) for x in (f.slow_osd, f.failing_osd, f.stalled_osd)
    )
    debug = faulted.fleet.osd(f.debug[-1])
    network_osd = faulted.fleet.osd(f.network_osd)
    port = F.EXPORTER_PORT
    for needle in (
        f"CephNodeDeepCStatesEnabled{{instance={f.cstates}:",
        f"CephNodeIOMMUTranslatingNVMe{{instance={f.iommu}:",
        f"CephNodeCPUGovernor{{instance={f.governor}:",
        f"CephNodeNVMeScheduler{{instance={f.scheduler}:{port},device=nvme3n1,",
        f"CephNodePCIeLinkDegraded{{instance={f.pcie}:{port},controller=nvme5,",
        f"CephNodeRocksDBUnoptimised{{instance={f.rocksdb}:",
        f"CephNodeOSDLatencyOutlier{{instance={slow.host}:{port},ceph_daemon={slow.ceph_daemon},",
        f"CephNodeBlueStoreCommitOutlier{{instance={failing.host}:{port},"
        f"ceph_daemon={failing.ceph_daemon},",
        f"CephNodeHostLatencyOutlier{{instance={f.slow_host}:{port},",
        f"CephNodeLaggyPGsAttributed{{hostname={f.laggy},",
        f"CephNodeLaggyPGsAttributed{{hostname={stalled.host},ceph_daemon={stalled.ceph_daemon},",
        f"CephNodeOSDDebugLogging{{instance={debug.host}:{port},ceph_daemon={debug.ceph_daemon},",
        f"CephNodeHeartbeatPingOutlier{{instance={f.network_host}:{port},severity=",
        f"CephNodeHeartbeatPingOutlier{{instance={network_osd.host}:{port},"
        f"ceph_daemon={network_osd.ceph_daemon},",
    ):
        assert any(a.startswith(needle) for a in fired), f"{needle} never fired: {sorted(fired)}"
    # No slow-ops alert: the ops of the laggy PGs' primaries wait for the PG or a replica.
    assert not any(a.startswith("CephNodeSlowOps") for a in fired)


def test_operations_page_nobody(operations: Replayed, rules: list[R.Rule]) -> None:
    """Rolling exporter restarts, an OSD and then its exporter restarting, a host drained
    and purged, one failed mgr scrape, a host rebooted, planned maintenance with noout and
    the recovery after it slowing OSDs elsewhere, and a management port at MTU 1500 on
    every node: no alert but the latency alerts' info form, naming the context."""
    expected = F.expected_alerts(operations.fleet, for_minutes(rules).__getitem__)
    problems = violations(operations, expected)
    assert not problems, f"{len(problems)} deviations:\n" + "\n".join(problems[:60])
    # The operations are in the data the rules saw.
    assert operations.context_minutes >= 20, operations.context_minutes
    assert operations.exporter_down >= F.OSD_NODES, operations.exporter_down


# Detection deadlines in minutes from the moment a fault shows in the node's metrics
# (alerts/README.md, "Detection delays"): configuration detuning 5, latency outliers 10,
# laggy PGs 2, their attribution to an OSD or host 5.
DEADLINES = {
    **dict.fromkeys(
        (
            "CephNodeDeepCStatesEnabled",
            "CephNodeIOMMUTranslatingNVMe",
            "CephNodeCPUGovernor",
            "CephNodeNVMeScheduler",
            "CephNodePCIeLinkDegraded",
            "CephNodeNetworkMTU",
            "CephNodeOSDDebugLogging",
            "CephNodeRocksDBUnoptimised",
            "CephNodeTuningCheckFailed",
        ),
        5.0,
    ),
    **dict.fromkeys(
        (
            "CephNodeOSDLatencyOutlier",
            "CephNodeHostLatencyOutlier",
            "CephNodeBlueStoreCommitOutlier",
            "CephNodeRocksDBLatencyOutlier",
        ),
        10.0,
    ),
    "CephNodeLaggyPGs": 2.0,
    "CephNodeLaggyPGsAttributed": 5.0,
    "CephNodeHeartbeatPingOutlier": 10.0,
}


def detection_delays(run: Replayed, expected: list[F.Expect]) -> list[tuple[str, float, float]]:
    """(alert and subject, minutes from the fault showing to the alert firing, deadline)
    for every expected alert that has a deadline."""
    out = []
    for e in expected:
        if e.alertname not in DEADLINES:
            continue
        first = next(
            (
                run.scenario.minute(int(t))
                for t in run.timeline.times
                if run.scenario.minute(int(t)) >= e.since
                and any(e.matches(n, lb) for n, lb in run.timeline.firing[t])
            ),
            None,
        )
        subject = ",".join(f"{k}={v}" for k, v in e.labels)
        delay = math.inf if first is None else first - e.since
        out.append((f"{e.alertname}{{{subject}}}", delay, DEADLINES[e.alertname]))
    return out


def test_every_fault_is_named_inside_its_deadline(
    faulted: Replayed, rules: list[R.Rule], snapshots: dict[str, F.Snapshot]
) -> None:
    expected = F.expected_alerts(faulted.fleet, for_minutes(rules).__getitem__, snapshots)
    delays = detection_delays(faulted, expected)
    assert {d[0].split("{")[0] for d in delays} >= {
        "CephNodeDeepCStatesEnabled",
        "CephNodeIOMMUTranslatingNVMe",
        "CephNodeOSDLatencyOutlier",
        "CephNodeLaggyPGs",
        "CephNodeLaggyPGsAttributed",
        "CephNodeOSDDebugLogging",
    }
    print("\ndetection delays (minutes from the fault showing in the node's metrics):")
    for subject, delay, deadline in delays:
        print(f"  {delay:5.1f} (deadline {deadline:g})  {subject}")
    late = [d for d in delays if d[1] > d[2]]
    assert not late, f"detected after the deadline: {late}"


def test_load_swing_is_in_the_data(faulted: Replayed, clean: Replayed) -> None:
    # The swing multiplies every OSD's op rate by 2.5 at its peak; measured through
    # Prometheus, so "nothing else fires during the swing" is about a real swing.
    for run in (faulted, clean):
        assert run.swing_ratio > 2.0, run.swing_ratio


def test_encrypted_hosts_are_compared_with_each_other(faulted: Replayed, clean: Replayed) -> None:
    """The encrypted hosts' OSDs are 1.25x slower than the plain ones: against the plain
    median they would be host outliers (ratio 1.2); compared with each other (the
    `encrypted` grouping), no latency alert names them, in either fleet."""
    hosts = {F.Host(h, "").instance for h in F.ENCRYPTED_HOSTS}
    for run in (faulted, clean):
        print(f"\nencrypted hosts over the plain median: {run.encrypted_ratio}")
        assert set(run.encrypted_ratio) == hosts
        assert max(run.encrypted_ratio.values()) >= 1.2, run.encrypted_ratio
        assert min(run.encrypted_ratio.values()) >= 1.1, run.encrypted_ratio
        named = {
            lb["instance"]
            for t in run.timeline.times
            for name, lb in run.timeline.firing[t] + run.timeline.pending[t]
            if "Latency" in name or "Outlier" in name
        }
        assert not named & hosts, sorted(named & hosts)


def test_clean_fleet_fires_nothing(clean: Replayed) -> None:
    problems = violations(clean, [])
    assert not problems, f"{len(problems)} alerts on a clean fleet:\n" + "\n".join(problems[:60])


def test_generated_series_are_documented(
    faulted: Replayed, snapshots: dict[str, F.Snapshot]
) -> None:
    docs = documented()
    families = {
        name: kind for name, (kind, _, _) in docs.items() if kind in ("histogram", "summary")
    }

    def is_documented(name: str) -> bool:
        if name in docs:
            return True
        base, _, suffix = name.rpartition("_")
        return base in families and suffix in ("bucket", "count", "sum")

    names = {n for n in F.known_names(snapshots) | faulted.written if n.startswith("cephnode_")}
    assert faulted.written & names, "the replay wrote no cephnode_ series"
    undocumented = sorted(n for n in names if not is_documented(n))
    assert not undocumented, f"generated series missing from docs/metrics.md: {undocumented}"


# Dashboard targets the faulted fleet has no data for, and why: the generator makes the
# series the rules and these panels read from the reference nodes' real exposition, except
# those below. tests/test_dashboards.py runs each of them on real exporter output.
NO_FLEET_DATA = {
    ("cephnode-node.json", "Op pipeline stages (mean over the selected OSDs)"): (
        "the generator makes no pipeline-stage counters (queue wait, prepare, process)"
    ),
    ("cephnode-node.json", "BlueStore stages (mean over the selected OSDs)"): (
        "the generator makes no BlueStore stage counters besides the commit latency"
    ),
    ("cephnode-node.json", "Debug levels on"): "the fleet's first host has none on",
    ("cephnode-node.json", "PCIe links trained below their maximum"): (
        "the fleet's first host's links are at full width"
    ),
    ("cephnode-node.json", "Ports: driver, bond, NUMA node, MTU and speed"): (
        "node_exporter's series (another job) are not generated"
    ),
    ("cephnode-node.json", "OSD resident memory against osd_memory_target"): (
        "the generator makes no OSD memory or config option series"
    ),
    ("cephnode-node.json", "Top spin-lock callers"): ("the fleet's first host runs no kprofile"),
    ("cephnode-fleet.json", "Failing collectors"): "no collector fails in the fleet",
    ("cephnode-fleet.json", "OSD sockets not answering"): "every socket answers",
}


def test_dashboards_query_the_fleet(faulted: Replayed) -> None:
    """Every panel query of both dashboards runs on the 630-OSD fleet without an error,
    and returns series wherever the fleet has the data (the refresh cost is
    docs/performance.md's, from tests/bench/bench_rules.py)."""
    assert set(faulted.dashboards) == {"cephnode-fleet.json", "cephnode-node.json"}
    errors = {n: r.errors for n, r in faulted.dashboards.items() if r.errors}
    assert not errors, errors
    empty = {(n, title) for n, r in faulted.dashboards.items() for title, _ in r.empty}
    assert empty - set(NO_FLEET_DATA) == set(), "panels without data at 630 OSDs"
    assert set(NO_FLEET_DATA) - empty == set(), "NO_FLEET_DATA lists panels with data now"
    assert sum(r.queried for r in faulted.dashboards.values()) > 80
