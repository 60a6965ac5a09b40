"""Evaluate the rule files over simulated time on a real Prometheus.

Why not ``promtool test rules``: its query engine is built with ``MaxSamples: 10000``
(prometheus/prometheus promql/test.go, ``LazyLoader``), so at 630 OSDs the first rule
(a rate over 36,000 histogram buckets) fails with "query processing would load too many
samples into memory". And the Prometheus rule manager only evaluates at wall-clock time,
so a 2-hour scenario would take 2 hours.

What runs here, in order:

1. The fleet's OpenMetrics files are turned into TSDB blocks by ``promtool tsdb
   create-blocks-from openmetrics``.
2. A real Prometheus (Debian's) serves them. The recording rules are evaluated by
   ``promtool tsdb create-blocks-from rules`` (Prometheus' own backfiller: it runs each
   rule's expression as a range query with the group's interval as the step, exactly
   the timestamps the rule manager would use, and writes the results with the rule's
   name and labels), one dependency level at a time: rules that read recorded series run
   after those are written and Prometheus has been restarted on the new blocks. What this
   cannot write: the staleness marker the rule manager writes when a recorded series
   disappears; readers of recorded series stand in for it (``staleness_expr``).
3. Each alert rule's expression is evaluated the same way (a range query over the main
   window at the group's interval), and Prometheus' alert state machine is applied to the
   result: an alert (the result's labels without ``__name__``, plus the rule's labels) is
   pending from the first evaluation it appears in, firing once it has been present for
   the rule's ``for``, and gone at the first evaluation it is absent from (rules/alerting.go,
   ``AlertingRule.Eval``; the rules use no ``keep_firing_for``). Groups of different
   intervals are each evaluated at their own.

A range query evaluates the expression at every step exactly as an instant query at that
time would (the engine's contract; promql/engine.go evaluates range queries step by step
with the same lookback and ``@``/offset handling), so step 3 computes what the rule manager
computes at those evaluation times.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# ----------------------------------------------------------------------------- rule files


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def duration_s(text: str | None) -> float:
    """A Prometheus duration ("1h30m", "15m", "30s") in seconds; None or "" is 0."""
    if not text:
        return 0.0
    text = str(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


@dataclass(frozen=True)
class Rule:
    group: str
    interval_s: float
    kind: str  # "record" or "alert"
    name: str
    expr: str
    labels: tuple[tuple[str, str], ...]
    for_s: float
    source: dict[str, Any] = field(compare=False, hash=False, repr=False)


def load_rules(paths: Iterable[Path], default_interval_s: float = 60) -> list[Rule]:
    rules = []
    for path in paths:
        doc = yaml.safe_load(Path(path).read_text())
        for group in doc.get("groups") or []:
            interval = duration_s(group.get("interval")) or default_interval_s
            for r in group.get("rules") or []:
                kind = "record" if "record" in r else "alert"
                labels = tuple(sorted((str(k), str(v)) for k, v in (r.get("labels") or {}).items()))
                if any("{{" in v for _, v in labels):
                    raise NotImplementedError(f"{r[kind]}: templated labels are not replayed")
                rules.append(
                    Rule(
                        group["name"],
                        interval,
                        kind,
                        r[kind],
                        r["expr"],
                        labels,
                        duration_s(r.get("for")),
                        r,
                    )
                )
    return rules


def staleness_expr(expr: str, rules: list[Rule]) -> str:
    """``expr`` with each instant selector of a recorded series ``X`` read as
    ``last_over_time(X[<its group's interval>])``.

    The rule manager writes a staleness marker when a recorded series disappears, so a
    reader sees it gone at the next evaluation; a backfill cannot write that marker, and
    the lookback would keep the series for 5 minutes. A range of one interval holds the
    recording group's latest evaluation (each group evaluates at its own offset in the
    interval, derived from its hash, rules/group.go EvalTimestamp, and promtool's backfill
    keeps it), so the series is there exactly while that evaluation produced it. Range
    selectors (``X[10m]``) already ignore staleness and are left alone."""
    intervals: dict[str, float] = {}
    for r in rules:
        if r.kind == "record":
            intervals[r.name] = max(intervals.get(r.name, 0.0), r.interval_s)
    if not intervals:
        return expr
    names = "|".join(re.escape(n) for n in sorted(intervals, key=len, reverse=True))
    selector = re.compile(
        rf"(?<![\w:])({names})(?![\w:])(\{{[^{{}}]*\}})?+(?!\s*\[)(\s+offset\s+-?\w+)?"
    )

    def rewrite(m: re.Match[str]) -> str:
        name, matchers, offset = m.group(1), m.group(2) or "", m.group(3) or ""
        return f"last_over_time({name}{matchers}[{int(intervals[name])}s]{offset})"

    return selector.sub(rewrite, expr)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*(=~|=)\s*"((?:[^"\\]|\\.)*)"')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_TOKEN = re.compile(r"(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "atan2",
}


def selectors(expr: str) -> tuple[set[str], list[str]]:
    """Metric names an expression selects, and the regexes of ``{__name__=~"..."}``
    selectors (anchored, as Prometheus anchors them)."""
    regexes = []
    for op, value in _NAME_MATCHER.findall(expr):
        value = value.encode().decode("unicode_escape")
        regexes.append(f"^(?:{value})$" if op == "=~" else f"^{re.escape(value)}$")
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for m in _TOKEN.finditer(text):
        token = m.group(0)
        rest = text[m.end() :].lstrip()
        if token in _KEYWORDS or rest.startswith("("):
            continue
        names.add(token)
    return names, regexes


def needed_metrics(rules: list[Rule], known: Iterable[str]) -> tuple[set[str], set[str]]:
    """Raw metric names the rules read (recorded names excluded), and those among them
    that ``known`` does not contain (the generator cannot produce them)."""
    recorded = {r.name for r in rules if r.kind == "record"}
    known = set(known)
    names: set[str] = set()
    for r in rules:
        plain, regexes = selectors(r.expr)
        names |= {n for n in plain if n not in recorded}
        for rx in regexes:
            names |= {k for k in known if re.match(rx, k)}
    if any(n.startswith("ALERTS") for n in names):
        raise NotImplementedError("rules reading ALERTS are not replayed")
    return names, names - known


def levels(rules: list[Rule]) -> list[list[Rule]]:
    """Recording rules by dependency level: level 0 reads raw series only."""
    recorded = [r for r in rules if r.kind == "record"]
    by_name: dict[str, list[Rule]] = {}
    for r in recorded:
        by_name.setdefault(r.name, []).append(r)
    level: dict[int, int] = {}

    def of(idx: int, stack: tuple[int, ...] = ()) -> int:
        if idx in level:
            return level[idx]
        if idx in stack:
            raise ValueError(
                f"recording rules depend on each other in a cycle: {recorded[idx].name}"
            )
        names, _ = selectors(recorded[idx].expr)
        deps = [i for i, r in enumerate(recorded) if r.name in names]
        level[idx] = 1 + max((of(i, (*stack, idx)) for i in deps), default=-1)
        return level[idx]

    for i in range(len(recorded)):
        of(i)
    out: list[list[Rule]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for i, r in enumerate(recorded):
        out[level[i]].append(r)
    return out


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backfill_openmetrics(files: list[Path], data_dir: Path, jobs: int = 2) -> float:
    """``promtool tsdb create-blocks-from openmetrics`` for every file (each one block
    range), ``jobs`` at a time; the seconds it took."""
    t0 = time.monotonic()
    data_dir.mkdir(parents=True, exist_ok=True)

    def one(path: Path) -> None:
        res = subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "-q",
                str(path),
                str(data_dir),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"create-blocks-from openmetrics {path.name}: {res.stderr[-2000:]}")

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, files))
    return time.monotonic() - t0


class Prometheus:
    """A real Prometheus on ``data_dir`` (loopback, ephemeral port, no scraping)."""

    def __init__(
        self,
        data_dir: Path,
        config: str = "global: {}\n",
        binary: str | Sequence[str] = "prometheus",
        extra: Iterable[str] = (),
    ) -> None:
        self.data_dir = data_dir
        # A path, or a whole command line (a chroot's binary with its own loader).
        self.binary = [binary] if isinstance(binary, str) else list(binary)
        self.extra = list(extra)
        self.config_path = data_dir.parent / f"{data_dir.name}-prometheus.yml"
        self.config_path.write_text(config)
        self.log_path = data_dir.parent / f"{data_dir.name}-prometheus.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *self.binary,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.data_dir}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=60d",
                    "--query.timeout=10m",
                    "--web.enable-lifecycle",
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def api(self, path: str, params: dict[str, Any] | None = None, timeout: float = 900) -> Any:
        data = urllib.parse.urlencode(params or {}).encode()
        try:
            with urllib.request.urlopen(self.url + path, data=data, timeout=timeout) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{path} {params}: HTTP {e.code}: {e.read()[:2000]!r}") from e
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.api(
            "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step}
        )
        return data["result"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.api("/api/v1/query", params)["result"]

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------- replay


@dataclass
class AlertState:
    """One alert (rule name + label set) over the evaluations."""

    alertname: str
    labels: dict[str, str]
    active_at: float
    fired_at: float | None = None


@dataclass
class Timeline:
    """Per evaluation time: the firing and the pending alerts, as (alertname, labels)."""

    times: list[float]
    firing: dict[float, list[tuple[str, dict[str, str]]]]
    pending: dict[float, list[tuple[str, dict[str, str]]]]


# promtool evaluates a group at the rule manager's timestamps: the interval's grid shifted
# by an offset hashed from the group's name and file path (rules/group.go, EvalTimestamp).
# Every level and window is written as the same group name in a file of the same relative
# name, so all recorded series share one offset, the same in every run: with offsets that
# differ between levels, a rule reading a recorded series of another level would read it
# one evaluation late, and alerts comparing two such series would see them skewed.
REPLAY_GROUP = "replay"
REPLAY_FILE = "rules.yml"


def _write_level_rules(rules: list[Rule], path: Path, everything: list[Rule]) -> None:
    groups: dict[float, list[dict[str, Any]]] = {}
    for r in rules:
        groups.setdefault(r.interval_s, []).append(
            {
                "record": r.name,
                "expr": staleness_expr(r.expr, everything),
                **({"labels": dict(r.labels)} if r.labels else {}),
            }
        )
    doc = {
        "groups": [
            {
                "name": f"{REPLAY_GROUP}-{int(interval)}s",
                "interval": f"{int(interval)}s",
                "rules": rs,
            }
            for interval, rs in groups.items()
        ]
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def needed_recordings(rules: list[Rule], roots: Iterable[Rule]) -> set[str]:
    """Names of the recording rules that ``roots`` read, directly or through other
    recorded series: the only ones a replay of those roots has to evaluate."""
    recorded = {r.name for r in rules if r.kind == "record"}
    by_name: dict[str, list[Rule]] = {}
    for r in rules:
        if r.kind == "record":
            by_name.setdefault(r.name, []).append(r)
    out: set[str] = set()
    todo = list(roots)
    while todo:
        names, _ = selectors(todo.pop().expr)
        for name in (names & recorded) - out:
            out.add(name)
            todo.extend(by_name[name])
    return out


def _chunks(start: float, end: float, step: float, parts: int) -> list[tuple[float, float]]:
    """[start, end] cut into up to ``parts`` ranges that start on the ``step`` grid (the
    longest interval of the rules evaluated, so every group's evaluations fall on its own
    grid in every range) and overlap by one step: no evaluation is lost at a boundary (the
    same sample written twice is one sample to the TSDB). No range is a single point
    (promtool refuses an end that is not after the start): the overlap covers it."""
    steps = int((end - start) // step) + 1
    per = -(-steps // max(1, parts))
    out = []
    for a in range(0, steps, per):
        b = min(steps - 1, a + per)
        if b > a:
            out.append((start + a * step, start + b * step))
    if not out and end > start:
        out.append((start, end))
    return out


def _promtool_rules(url: str, task: tuple[Path, float, float], out: Path) -> None:
    rule_file, start, end = task
    shutil.rmtree(out, ignore_errors=True)
    res = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "rules", "-q", f"--url={url}",
         f"--start={int(start)}", f"--end={int(end)}", f"--output-dir={out.resolve()}",
         rule_file.name],
        capture_output=True, text=True, timeout=3600, check=False, cwd=rule_file.parent,
    )  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(
            f"create-blocks-from rules {rule_file}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
        )


def backfill_recording_rules(
    prom: Prometheus,
    rules: list[Rule],
    windows: list[tuple[float, float]],
    workdir: Path,
    log: Any = None,
    window_rules: list[set[str] | None] | None = None,
    jobs: int = 2,
) -> dict[str, float]:
    """Evaluate the recording rules over ``windows`` (start, end) level by level with
    ``promtool tsdb create-blocks-from rules``, restarting Prometheus on the new blocks
    after each level. ``window_rules`` names the recording rules each window needs (None:
    all). Within a level, ``jobs`` promtool processes run at once, each on a part of a
    window (a rule's samples do not depend on each other: each evaluation is an instant
    query). Returns seconds per level."""
    timings = {}
    wanted = window_rules or [None] * len(windows)
    for n, level in enumerate(levels(rules)):
        t0 = time.monotonic()
        tasks: list[tuple[Path, float, float]] = []
        for w, (start, end) in enumerate(windows):
            subset = [r for r in level if wanted[w] is None or r.name in wanted[w]]
            if not subset:
                continue
            rule_file = workdir / f"level{n}-window{w}" / REPLAY_FILE
            _write_level_rules(subset, rule_file, rules)
            step = max(r.interval_s for r in subset)
            for a, b in _chunks(start, end, step, jobs):
                tasks.append((rule_file, a, b))
        outs = [workdir / f"level{n}-blocks-{k}" for k in range(len(tasks))]
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(_promtool_rules, [prom.url] * len(tasks), tasks, outs))
        moved = 0
        for out in outs:
            if not out.is_dir():
                continue
            for block in out.iterdir():
                if (block / "meta.json").exists():
                    shutil.move(str(block), prom.data_dir / block.name)
                    moved += 1
        if moved:
            prom.restart()
        timings[f"level{n}"] = time.monotonic() - t0
        if log:
            log(f"level {n}: {len(level)} rules, {moved} blocks, {timings[f'level{n}']:.1f} s")
    return timings


def evaluate_alerts(
    prom: Prometheus, rules: list[Rule], start: float, end: float, jobs: int = 2
) -> Timeline:
    """Apply the alert state machine to each alert rule's range query over [start, end],
    at its group's interval. The timeline's times are the finest interval's grid; at each,
    a rule of a coarser group shows its state of its latest evaluation (as ALERTS does
    between two evaluations)."""
    alerts = [r for r in rules if r.kind == "alert"]
    if not alerts:
        return Timeline([], {}, {})
    step = min(r.interval_s for r in alerts)
    times = [start + i * step for i in range(int((end - start) // step) + 1)]

    def run(rule: Rule) -> tuple[Rule, list[dict[str, Any]]]:
        expr = staleness_expr(rule.expr, rules)
        return rule, prom.query_range(expr, start, end, rule.interval_s)

    firing: dict[float, list[tuple[str, dict[str, str]]]] = {t: [] for t in times}
    pending: dict[float, list[tuple[str, dict[str, str]]]] = {t: [] for t in times}
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(run, alerts))
    for rule, result in results:
        own = [
            start + i * rule.interval_s for i in range(int((end - start) // rule.interval_s) + 1)
        ]
        present: dict[frozenset[tuple[str, str]], set[float]] = {}
        for series in result:
            labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
            labels.update(dict(rule.labels))
            key = frozenset(labels.items())
            present.setdefault(key, set()).update(float(ts) for ts, _ in series["values"])
        for key, seen in present.items():
            state: AlertState | None = None
            at: dict[float, bool] = {}  # own evaluation time -> firing (absent: inactive)
            for t in own:
                if t not in seen:
                    state = None  # a pending alert is dropped, a firing one resolves
                    continue
                if state is None:
                    state = AlertState(rule.name, dict(key), t)
                if state.fired_at is None and t - state.active_at >= rule.for_s:
                    state.fired_at = t
                at[t] = state.fired_at is not None
            for t in times:
                last = start + ((t - start) // rule.interval_s) * rule.interval_s
                if last in at:
                    (firing if at[last] else pending)[t].append((rule.name, dict(key)))
    return Timeline(times, firing, pending)


@contextlib.contextmanager
def workspace(prefix: str, keep: bool = False) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def tools_present() -> bool:
    return all(shutil.which(t) for t in ("prometheus", "promtool"))


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")


# ----------------------------------------------------------------------------- dashboards


def _dashboard_names() -> set[str]:
    """Metric names, raw and recorded, that the dashboards' targets read (dashboards/*.json)."""
    from tests import test_dashboards as D

    return {
        m for name in D.FILES for _, t in D.targets(D.load(name)) for m in D.metric_names(t["expr"])
    }


def dashboard_metrics() -> set[str]:
    """Raw metric names the dashboards' targets read."""
    return {m for m in _dashboard_names() if ":" not in m}


def dashboard_recordings(rules: list[Rule]) -> set[str]:
    """Recorded series the dashboards read, with the recordings those are made from."""
    names = _dashboard_names()
    roots = [r for r in rules if r.kind == "record" and r.name in names]
    return {r.name for r in roots} | needed_recordings(rules, roots)


@dataclass
class Refresh:
    """One refresh of one dashboard: engine seconds summed over its targets, the costliest
    target's panel and seconds, the targets queried, the (panel, refId) of those with no
    series, and the (panel, refId, error) of those Prometheus refused."""

    seconds: float = 0.0
    worst: str = ""
    worst_seconds: float = 0.0
    queried: int = 0
    empty: list[tuple[str, str]] = field(default_factory=list)
    errors: list[tuple[str, str, str]] = field(default_factory=list)


def dashboard_refresh(
    prom: Prometheus, fleet: Any, end: float, hours: float, all_range: bool = False
) -> dict[str, Refresh]:
    """Each dashboard's targets as Grafana sends them on a refresh: range queries over the
    last ``hours`` at a 30 s step, instant targets at ``end`` (``all_range``: those too
    over the range, so that a table shows whether the fleet ever had its data). The
    variables name the fleet's first host and two of its OSDs."""
    from tests import test_dashboards as D

    host = fleet.osds[0].host
    osds = [o.ceph_daemon for o in fleet.osds if o.host == host][:2]
    out = {}
    for name in D.FILES:
        board = D.load(name)
        values = D.values_for(board)
        values.update(
            instance=f"{host}:10060",
            ceph_daemon="(" + "|".join(osds) + ")",
            device_class="nvme",
            __range=f"{round(hours * 60)}m",
        )
        for v in board["templating"]["list"]:
            if v["name"] == "host":
                values["host"] = D.host_of(values["instance"], v["regex"])
        r = out[name] = Refresh()
        for panel, t in D.targets(board):
            expr = D.substitute(t["expr"], values)
            if t.get("instant") and not all_range:
                path, params = "/api/v1/query", {"query": expr, "time": end, "stats": "all"}
            else:
                path = "/api/v1/query_range"
                params = {"query": expr, "start": end - hours * 3600, "end": end, "step": 30,
                          "stats": "all"}  # fmt: skip
            r.queried += 1
            try:
                reply = prom.api(path, params)
            except RuntimeError as exc:
                r.errors.append((panel["title"], t["refId"], str(exc)[-300:]))
                continue
            took = reply["stats"]["timings"]["evalTotalTime"]
            if not reply["result"]:
                r.empty.append((panel["title"], t["refId"]))
            r.seconds += took
            if took > r.worst_seconds:
                r.worst, r.worst_seconds = panel["title"], took
    return out
