"""Rule evaluation cost at 630 OSDs, per rule group, on a real Prometheus.

Why: the recording rules aggregate about 36,000 histogram bucket series every minute;
the goal (docs/performance.md) is all groups together under 200 ms per evaluation on the
test machine.

Two measurements of the same rule files on the faulted 630-OSD fleet of
tests/test_alerts_scale.py (tests/alerts/fleet.py), backfilled into a Prometheus TSDB with
``promtool tsdb create-blocks-from openmetrics`` and its recording rules with ``promtool
tsdb create-blocks-from rules`` (so that rules reading recorded series, over a range or a
week back, find them as under the rule manager):

1. Instant queries. At ``--times`` evaluation times spread over the main window (quiet
   load, the load swing's ramp and peak), every rule of every group runs in file order as
   an instant query with ``stats=all``; the engine's own ``evalTotalTime`` is summed per
   group (no HTTP, no JSON; the minimum of ``--repeat`` runs per rule and time). Not
   included: appending results and alert state. Per rule, so it says which rule costs.
2. The rule manager. The fleet is generated again with its main window ending at the
   minute the measurement starts, and Prometheus starts with the rule files (group
   intervals shortened to ``--manager-interval`` for the bench only) and runs them at wall
   clock time. Each group's ``evaluationTime`` from ``/api/v1/rules`` (what
   ``prometheus_rule_group_last_duration_seconds`` reports) is collected per evaluation:
   query, appending the recorded samples to the head, alert state; the groups run
   concurrently, as they do in production. Where the raw series are:

   - ``--head-minutes N`` (60 by default): as on a Prometheus that has scraped the fleet
     and run the rules for an hour. The main window's last N minutes are not backfilled:
     their raw samples, and the recorded series promtool computes from them on a scratch
     copy, are served over HTTP with their timestamps, and Prometheus scrapes them every
     second, one time per scrape, into its head (the head takes samples newer than the
     newest block only, and a series' in order); the later raw samples follow as they
     fall due. Then the rule files are loaded, and the evaluations count from the second
     on, for ``--manager-seconds`` (180) in one run. Every window of up to N minutes reads
     the head alone, its chunks about as full as with a 30 s scrape (a head chunk holds
     120 samples, and decoding a chunk up to the query's time is part of each read), and
     the rules run in the steady state of a running Prometheus, not while it creates the
     recorded series.
   - ``--head-minutes 0``: all in blocks, the data ending where the run begins (the head
     refuses samples older than the newest block), for ``--manager-seconds`` (55): while
     the data's last two samples, a minute apart, are both inside a 2-minute rate's range.
     That is repeated ``--manager-rounds`` times (3) on data generated afresh, each time
     from Prometheus' start. ``--live-tail`` runs once for longer while the later samples
     are scraped as they fall due; each series then lives in a block and in the head at
     once, and every selection merges the two (too high).

Both wait until Prometheus has compacted the backfilled blocks (each promtool run writes
its own, overlapping ones), as a long-running Prometheus would have.

Usage: python tests/bench/bench_rules.py [--times N] [--repeat N] [--manager-seconds S]
       [--head-minutes N] [--rule-files RULES ALERTS] [--prometheus bookworm|trixie|sid]
       [--keep]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.alerts import fleet as F  # noqa: E402
from tests.alerts import replay as R  # noqa: E402

RULE_FILES = [REPO / "alerts" / "cephnode-rules.yml", REPO / "alerts" / "cephnode-alerts.yml"]
# The Prometheus releases the rules are tested on (tests/test_alerts.py): Debian 12's 2.42
# on the host, trixie's 2.53 (the long-term-support line) and sid's 3.x in chroots.
PROMETHEUS_SUITES = ("bookworm", "trixie", "sid")


def prometheus_command(suite: str) -> list[str]:
    """The command line of ``suite``'s Prometheus: the host's, or a chroot's run with its
    own loader and libraries (built and cached on first use, which needs root)."""
    if suite == "bookworm":
        return ["prometheus"]
    from tests.chroots import RELEASES, ensure_packages, run_in

    release = next(r for r in RELEASES.values() if r.suite == suite)
    return run_in(ensure_packages(release, ("prometheus",)), "/usr/bin/prometheus")


def get(prom: R.Prometheus, path: str) -> dict:
    """A GET API call's data (/api/v1/rules takes no POST)."""
    with urllib.request.urlopen(prom.url + path, timeout=30) as r:
        return json.load(r)["data"]


def blocks_loaded(prom: R.Prometheus) -> int:
    """The TSDB's persisted block count, from Prometheus' own metrics."""
    with urllib.request.urlopen(prom.url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("prometheus_tsdb_blocks_loaded "):
                return int(float(line.split()[1]))
    raise RuntimeError("prometheus_tsdb_blocks_loaded missing")


def wait_compacted(prom: R.Prometheus, quiet_s: float = 75, timeout: float = 600) -> int:
    """Wait until the block count has not changed for ``quiet_s`` (Prometheus compacts
    once a minute; the backfill leaves dozens of overlapping blocks that every query
    would otherwise merge). Returns the block count."""
    deadline = time.monotonic() + timeout
    last, since = blocks_loaded(prom), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(5)
        n = blocks_loaded(prom)
        if n != last:
            last, since = n, time.monotonic()
    return last


def build(
    work: Path,
    fleet: F.Fleet,
    main_start: int,
    snaps: dict[str, F.Snapshot],
    rules: list[R.Rule],
    needed: set[str],
    jobs: int,
    history_only: bool = False,
    tail_s: int = 0,
    head_s: int = 0,
) -> tuple[dict[str, int], list[tuple[float, float]], dict[int, bytes]]:
    """Generate the fleet's series, backfill them and the recording rules, wait for the
    compaction. Prometheus is stopped on return. ``history_only``: in the main window,
    backfill only the recorded series some rule reads over a range or offset (what a
    rule manager starting at the window's end needs from before it); the others it
    writes itself, into the head, as a long-running Prometheus has them. ``tail_s``: the
    main window goes on for that long after its end, and those samples are not
    backfilled but returned, per time, as text exposition bodies for :class:`LiveTail`.
    ``head_s``: so are the main window's last seconds, which Prometheus then scrapes into
    its head, and with them every recorded series over those seconds
    (:func:`head_history`), as a Prometheus that has run the rules for that long has them."""
    minutes = fleet.timeline.end + -(-tail_s // 60)
    sc = F.Scenario(fleet, main_start, main_minutes=minutes if tail_s else None)
    files, stats = F.generate(fleet, sc, work / "om", needed, snaps, jobs=jobs)
    cut = main_start + fleet.timeline.end * 60 - head_s
    tail = split_tail(files, cut) if tail_s else {}
    R.backfill_openmetrics(files, work / "data", jobs=jobs)
    shutil.rmtree(work / "om")
    windows = [(w.start, min(cut, w.start + (w.steps - 1) * w.step_s)) for w in sc.windows]
    with R.Prometheus(work / "data") as prom:
        # Only the main window's recorded series are read at the bench's times (and the
        # baseline's, through offset 1w, by the regression alert).
        offset_alerts = [r for r in rules if r.kind == "alert" and " offset " in r.expr]
        main = R.needed_recordings(rules, history_readers(rules)) if history_only else None
        wanted: list[set[str] | None] = [
            R.needed_recordings(rules, offset_alerts) if w.week else main for w in sc.windows
        ]
        R.backfill_recording_rules(prom, rules, windows, work, window_rules=wanted, jobs=jobs)
        stats["blocks"] = wait_compacted(prom)
    if head_s:
        head_history(work, rules, tail, cut, cut + head_s, jobs)
    return stats, windows, tail


DUMP_LINE = re.compile(r'^\{__name__="([^"]+)"(?:, )?(.*)\} (\S+) (-?\d+)$')


def head_history(
    work: Path, rules: list[R.Rule], tail: dict[int, bytes], start: int, end: int, jobs: int
) -> None:
    """Add to ``tail`` every recorded series over (``start``, ``end``], so that the head
    holds them as it holds the raw ones (the rules then read chunks as full as a running
    Prometheus has, and the series exist before the rules run). promtool evaluates the
    rules on a scratch copy of ``work/data`` plus the tail's raw samples up to ``end``."""
    scratch = work / "scratch"
    series: dict[str, list[str]] = {}
    for t in sorted(tail):
        if t > end:
            break
        for line in tail[t].decode().splitlines():
            sample, _, ms = line.rpartition(" ")
            series.setdefault(sample.rpartition(" ")[0], []).append(f"{sample} {int(ms) // 1000}\n")
    om = work / "head.om"
    with open(om, "w") as f:
        for lines in series.values():
            f.write("".join(lines))
        f.write("# EOF\n")
    R.backfill_openmetrics([om], scratch, jobs=1)
    om.unlink()
    for block in (work / "data").iterdir():
        if (block / "meta.json").exists():
            shutil.copytree(block, scratch / block.name, copy_function=os.link)
    with R.Prometheus(scratch) as prom:
        R.backfill_recording_rules(prom, rules, [(start, end)], work / "scratch-rules", jobs=jobs)
    recorded = {r.name for r in rules if r.kind == "record"}
    extra: dict[int, list[str]] = {}
    with subprocess.Popen(
        [
            "promtool",
            "tsdb",
            "dump",
            f"--min-time={(start + 1) * 1000}",
            f"--max-time={end * 1000}",
            str(scratch),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as dump:
        assert dump.stdout is not None
        for line in dump.stdout:
            m = DUMP_LINE.match(line.rstrip("\n"))
            if m and m.group(1) in recorded:
                name, labels, value, ms = m.groups()
                extra.setdefault(int(ms) // 1000, []).append(f"{name}{{{labels}}} {value} {ms}\n")
    if dump.returncode != 0:
        raise RuntimeError(f"promtool tsdb dump {scratch}: exit {dump.returncode}")
    if not extra:
        raise RuntimeError("no recorded series in the head's minutes")
    for t, lines in extra.items():
        tail[t] = tail.get(t, b"") + "".join(lines).encode()
    shutil.rmtree(scratch)
    shutil.rmtree(work / "scratch-rules", ignore_errors=True)


def split_tail(files: list[Path], cut: int) -> dict[int, bytes]:
    """Take the samples after ``cut`` out of the OpenMetrics files (rewritten in place):
    per time, the text exposition of those samples (timestamps in milliseconds), which
    Prometheus scrapes while the rule manager runs."""
    lines: dict[int, list[str]] = {}
    for path in files:
        if int(path.stem.rpartition("-")[2]) < cut // F.Writer.BLOCK_S:
            continue  # a block range that ends before the cut (the baseline week)
        kept = []
        with open(path) as f:
            for line in f:
                head, _, stamp = line.rstrip("\n").rpartition(" ")
                if head and stamp.isdigit() and int(stamp) > cut:
                    lines.setdefault(int(stamp), []).append(f"{head} {int(stamp) * 1000}\n")
                else:
                    kept.append(line)
        path.write_text("".join(kept))
    return {t: "".join(v).encode() for t, v in sorted(lines.items())}


class LiveTail:
    """The fleet's samples after the backfilled data, served for scraping: each scrape
    gets the latest time not in the future (with its timestamps), so that the rules see
    fresh raw series in the head, as on a Prometheus that scrapes the fleet, instead of
    data that ages while they run (a 2-minute rate would find no samples after a minute
    of the run)."""

    def __init__(self, bodies: dict[int, bytes], catch_up: bool = False) -> None:
        self.times = sorted(bodies)
        self.bodies = bodies
        self.scrapes = 0
        # catch_up: each scrape gets the oldest time not served yet that is due, so that a
        # Prometheus scraping every second loads the times already past one by one (a
        # series' samples must reach the head in order), then each new one as it falls due.
        self.catch_up = catch_up
        self.served = 0
        self.caught_up_at = 0.0
        tail = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                now = time.time()
                due = [t for t in tail.times if t <= now]
                if not tail.catch_up:
                    body = tail.bodies[due[-1]] if due else b""
                elif tail.served < len(due):
                    body = tail.bodies[due[tail.served]]
                    tail.served += 1
                else:
                    body = b""
                    tail.caught_up_at = tail.caught_up_at or now
                tail.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LiveTail:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def history_readers(rules: list[R.Rule]) -> list[R.Rule]:
    """The rules that read a recorded series over a range (``x[30m]``) or at an offset."""
    recorded = {r.name for r in rules if r.kind == "record"}
    pattern = re.compile(
        "(" + "|".join(re.escape(n) for n in sorted(recorded)) + r")(\{[^}]*\})?(\[| offset )"
    )
    return [r for r in rules if pattern.search(r.expr)]


def instant_queries(
    prom: R.Prometheus, rules: list[R.Rule], times: list[float], repeat: int
) -> tuple[dict[str, list[float]], dict[int, list[float]], list[float]]:
    """Per group and per rule: seconds of evalTotalTime at each time, the minimum of
    ``repeat`` passes. A pass queries every rule at every time, so the repeats of one
    query are minutes apart: a stretch where the VM runs slow (a neighbour, the host)
    slows one pass, and the minimum is the query's own cost."""
    best: dict[tuple[int, int], float] = {}
    for _ in range(repeat):
        for k, t in enumerate(times):
            for i, r in enumerate(rules):
                took = prom.api("/api/v1/query", {"query": r.expr, "time": t, "stats": "all"})
                s = took["stats"]["timings"]["evalTotalTime"]
                best[(i, k)] = min(s, best.get((i, k), s))
    per_group: dict[str, list[float]] = {}
    per_rule: dict[int, list[float]] = {i: [] for i in range(len(rules))}
    totals = []
    for k in range(len(times)):
        group_s: dict[str, float] = {}
        for i, r in enumerate(rules):
            per_rule[i].append(best[(i, k)])
            group_s[r.group] = group_s.get(r.group, 0.0) + best[(i, k)]
        for g, s in group_s.items():
            per_group.setdefault(g, []).append(s)
        totals.append(sum(group_s.values()))
    return per_group, per_rule, totals


def rule_manager(
    work: Path,
    rule_files: list[Path],
    data_end: int,
    seconds: float,
    interval_s: int,
    profile: Path | None = None,
    binary: list[str] | None = None,
    tail: dict[int, bytes] | None = None,
    catch_up: bool = False,
) -> tuple[
    dict[str, list[float]],
    dict[tuple[str, int], list[float]],
    dict[str, int],
    int,
    int,
    dict[str, tuple[int, int]],
    tuple[float, float],
]:
    """Run the rule files in a Prometheus on ``work/data`` from ``data_end``; per group the
    evaluation times seen, the rules not healthy at the end, the per-OSD mean series the
    rule manager wrote (newer than the data), the evaluations' first delay after the
    data's end in seconds, per group its evaluations that overlapped another's, and the
    first and last start of the evaluations counted. Per rule (group, index in the group)
    too, the evaluation times seen. ``catch_up``: the tail starts in the past
    (:class:`LiveTail`); Prometheus scrapes it every second, gets the rule files once it
    has caught up, and the evaluations count from an interval after that, for
    ``seconds``."""
    paths = []
    for n, src in enumerate(rule_files):
        doc = yaml.safe_load(src.read_text())
        for g in doc["groups"]:
            g["interval"] = f"{interval_s}s"
        dst = work / f"manager-{n}-{src.name}"
        dst.write_text(yaml.safe_dump(doc, sort_keys=False))
        paths.append(str(dst))
    # Without a tail nothing is served, but the context below stays one shape.
    live = LiveTail(tail or {}, catch_up=catch_up)
    cfg: dict = {"global": {"evaluation_interval": f"{interval_s}s"}, "rule_files": paths}
    if tail:
        # Scraped as the exporters and the mgr are (every 30 s; every second while the
        # head's minutes are loaded, then empty but for each new time), keeping the
        # series' own job and instance labels.
        cfg["scrape_configs"] = [
            {
                "job_name": "fleet-tail",
                "honor_labels": True,
                "scrape_interval": "1s" if catch_up else "30s",
                "scrape_timeout": "1s" if catch_up else "25s",
                "static_configs": [{"targets": [f"127.0.0.1:{live.port}"]}],
                # A recorded series has no job or instance of its own: not the tail's.
                "metric_relabel_configs": [
                    {
                        "source_labels": ["job"],
                        "regex": "fleet-tail",
                        "target_label": "job",
                        "replacement": "",
                    },
                    {
                        "source_labels": ["instance"],
                        "regex": r"127\.0\.0\.1:[0-9]+",
                        "target_label": "instance",
                        "replacement": "",
                    },
                ],
            }
        ]
    # With catch_up the rules are loaded once the head holds the tail's past times: before,
    # they would write the recorded series the tail still brings, at newer times.
    config = yaml.safe_dump({**cfg, "rule_files": []} if catch_up else cfg)
    wait = data_end + 1 - time.time()
    if wait > 0:
        time.sleep(wait)
    late = int(time.time() - data_end)
    seen: dict[str, dict[str, float]] = {}
    rule_seen: dict[tuple[str, int], dict[str, float]] = {}
    counted_from = 0.0
    with live, R.Prometheus(work / "data", config=config, binary=binary or "prometheus") as prom:
        stop = time.monotonic() + seconds
        if catch_up:
            deadline = time.monotonic() + 300
            while not live.caught_up_at and time.monotonic() < deadline:
                time.sleep(0.5)
            if not live.caught_up_at:
                raise RuntimeError("the rule manager's Prometheus did not scrape the tail")
            prom.config_path.write_text(yaml.safe_dump(cfg))
            req = urllib.request.Request(f"{prom.url}/-/reload", method="POST")
            urllib.request.urlopen(req, timeout=60).read()
            # The first evaluation of each group counts from the second on (caches, the
            # alerts' state), for ``seconds``.
            counted_from = time.time() + interval_s
            stop = time.monotonic() + seconds + interval_s
        if profile is not None:
            # A CPU profile of the middle of the run, taken while the polling goes on.
            span = int(seconds / 2)
            url = f"{prom.url}/debug/pprof/profile?seconds={span}"
            fetch = threading.Thread(
                target=lambda: profile.write_bytes(
                    urllib.request.urlopen(url, timeout=span + 60).read()
                )
            )
            fetch.start()
        while time.monotonic() < stop:
            for g in get(prom, "/api/v1/rules")["groups"]:
                if g.get("lastEvaluation", "").startswith("0001"):
                    continue
                if catch_up and _instant(g["lastEvaluation"]) < counted_from:
                    continue
                seen.setdefault(g["name"], {})[g["lastEvaluation"]] = g["evaluationTime"]
                for i, r in enumerate(g["rules"]):
                    rule_seen.setdefault((g["name"], i), {})[r["lastEvaluation"]] = r[
                        "evaluationTime"
                    ]
            time.sleep(1)
        if profile is not None:
            fetch.join()
        groups = get(prom, "/api/v1/rules")["groups"]
        unhealthy = {g["name"]: sum(1 for r in g["rules"] if r["health"] != "ok") for g in groups}
        fresh = prom.query(
            f"count(max_over_time(timestamp(ceph_daemon_op:cephnode_osd_op_latency_seconds"
            f":mean_rate2m)[{int(seconds) + 60}s:15s]) > {data_end})"
        )
        # In how many evaluations an OSD's mean was written (without fresh raw data the
        # 2-minute rates, and all that reads them, go empty after about a minute).
        written = prom.query(
            f"max(count_over_time(ceph_daemon_op:cephnode_osd_op_latency_seconds:mean_rate2m"
            f"[{int(time.time() - data_end) + 5}s]))"
        )
        scrapes = live.scrapes
    p99 = int(float(fresh[0]["value"][1])) if fresh else 0
    with_means = int(float(written[0]["value"][1])) if written else 0
    print(
        f"rule manager: per-OSD means written in {with_means} of "
        f"{len(seen.get('cephnode.osd', {}))} evaluations of cephnode.osd seen; "
        f"{scrapes} scrapes of the fleet's samples after the backfill",
        flush=True,
    )
    per_group = {g: list(v.values()) for g, v in seen.items()}
    per_rule = {k: list(v.values()) for k, v in rule_seen.items()}
    starts = [_instant(t) for v in seen.values() for t in v] or [float(data_end)]
    span = (min(starts), max(starts))
    return per_group, per_rule, unhealthy, p99, late, overlaps(seen), span


def same_times(
    data: Path,
    rules: list[R.Rule],
    span: tuple[float, float],
    repeat: int,
    binary: list[str] | None = None,
) -> dict[int, float]:
    """Per rule: the median over 5 times spread over the counted evaluations' ``span`` of
    its instant query's cost, on the data the manager left (its recorded series are in the
    head, from the WAL). What the queries cost there without the manager around them."""
    first, last = span
    times = [first + (last - first) * (k + 0.5) / 5 for k in range(5)]
    with R.Prometheus(data, binary=binary or "prometheus") as prom:
        _, per_rule, _ = instant_queries(prom, rules, times, repeat)
    return {i: statistics.median(v) for i, v in per_rule.items()}


def _instant(stamp: str) -> float:
    """Seconds of an RFC 3339 time as Prometheus prints it (nanoseconds cut to micro)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{frac or 0}")


def overlaps(seen: dict[str, dict[str, float]]) -> dict[str, tuple[int, int]]:
    """Per group: how many of its evaluations ran while another group's did, of how many.
    Groups start at fixed offsets in their interval; two that start together contend for
    the CPUs every time."""
    spans = {g: [(_instant(t), _instant(t) + d) for t, d in v.items()] for g, v in seen.items()}
    out = {}
    for g, mine in spans.items():
        others = [span for h, v in spans.items() if h != g for span in v]
        hit = sum(1 for a, b in mine if any(c < b and a < d for c, d in others))
        out[g] = (hit, len(mine))
    return out


def table(per_group: dict[str, list[float]], sizes: dict[str, int], totals: list[float]) -> None:
    print("| group | rules | p50 ms | max ms |\n|---|---|---|---|")
    for g, vals in per_group.items():
        print(
            f"| {g} | {sizes[g]} | {statistics.median(vals) * 1000:.1f} | {max(vals) * 1000:.1f} |"
        )
    print(
        f"| all groups | {sum(sizes.values())} | {statistics.median(totals) * 1000:.1f} "
        f"| {max(totals) * 1000:.1f} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--times", type=int, default=12, help="evaluation times in the window")
    ap.add_argument(
        "--repeat", type=int, default=3, help="evaluations of each rule per time (min kept)"
    )
    ap.add_argument(
        "--manager-seconds",
        type=float,
        help="seconds of rule manager evaluations per round (0: skip; default 55, while the "
        "2-minute rates still find two samples of the backfilled data; 180 with --live-tail)",
    )
    ap.add_argument(
        "--manager-rounds",
        type=int,
        help="rule manager runs, each on data generated afresh to end at its start "
        "(default 3; 1 with --live-tail)",
    )
    ap.add_argument("--manager-interval", type=int, default=15, help="group interval there (s)")
    ap.add_argument(
        "--manager-all-recordings",
        action="store_true",
        help="backfill every recorded series up to the rule manager's start, not only those "
        "read over a range or offset (each is then read from a block and the head at once)",
    )
    ap.add_argument(
        "--live-tail",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="feed the rule manager's Prometheus the fleet's samples after the backfill by "
        "scraping them as they fall due (without: the data ends when the manager starts, "
        "and the short-window rates find no samples after about a minute)",
    )
    ap.add_argument(
        "--head-minutes",
        type=int,
        default=60,
        help="the main window's last minutes go to the head, raw and recorded series, as on "
        "a Prometheus that has scraped the fleet and run the rules, instead of a block; the "
        "later raw samples follow as they fall due (implies --live-tail; one round of 180 s "
        "by default; 0: all in blocks, rounds of 55 s)",
    )
    ap.add_argument("--rule-files", nargs=2, type=Path, default=RULE_FILES)
    ap.add_argument(
        "--dashboards",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time one refresh of each dashboard on the fleet's data",
    )
    ap.add_argument(
        "--prometheus",
        choices=PROMETHEUS_SUITES,
        default="bookworm",
        help="the Debian suite whose Prometheus evaluates the rules: bookworm's 2.42 (the "
        "host's), trixie's 2.53 or sid's 3.x (from a cached chroot, tests/chroots.py); the "
        "backfill and compaction use the host's in every case",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    ap.add_argument(
        "--manager-profile",
        type=Path,
        help="write a Go CPU profile of Prometheus during the rule manager run here "
        "(`go tool pprof -top FILE`)",
    )
    args = ap.parse_args()
    if not R.tools_present():
        print("prometheus and promtool are needed (Debian package prometheus)", file=sys.stderr)
        return 2
    binary = prometheus_command(args.prometheus)
    version = subprocess.run(
        [*binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n")[0]
    print(f"rules evaluated by: {version}", flush=True)
    # The test's compact timeline: load swing from minute 25, peak 35-55.
    from tests.test_alerts_scale import MAIN_START, TIMELINE

    rule_files = [p.resolve() for p in args.rule_files]
    rules = R.load_rules(rule_files)
    sizes: dict[str, int] = {}
    for r in rules:
        sizes[r.group] = sizes.get(r.group, 0) + 1
    jobs = min(2, F.cpu_count())
    machine = f"{os.cpu_count()} CPUs, {platform.platform()}"
    with R.workspace("bench-rules-", keep=args.keep) as work:
        t0 = time.monotonic()
        snaps = F.collect_snapshots(work / "nodes")
        fleet = F.Fleet.build(timeline=TIMELINE)
        known = F.known_names(snaps)
        needed, missing = R.needed_metrics(rules, known)
        if missing:
            print(f"rules read series the generator cannot make: {missing}", file=sys.stderr)
            return 1
        if args.dashboards:
            # What the panels read besides, so that a refresh reads what it would in
            # production (node_exporter's series are not generated: those panels stay
            # empty and are counted as such).
            needed |= R.dashboard_metrics() & known
        stats, windows, _ = build(work / "iq", fleet, MAIN_START, snaps, rules, needed, jobs)
        setup_s = time.monotonic() - t0
        print(
            f"fleet: {len(fleet.osds)} OSDs, {stats['series']} series, {stats['samples']} "
            f"samples; generated, backfilled and compacted ({stats['blocks']} blocks) in "
            f"{setup_s:.0f} s",
            flush=True,
        )
        with R.Prometheus(work / "iq" / "data", binary=binary) as prom:
            main_start, main_end = windows[-1]
            # From minute 15 (rate windows and recorded series settled) to the end.
            first = main_start + 15 * 60
            span = main_end - first
            times = [first + span * i / max(1, args.times - 1) for i in range(args.times)]
            per_group, per_rule, totals = instant_queries(prom, rules, times, args.repeat)
            # The whole main window: a dashboard over the hours of data there are.
            hours = (main_end - main_start) / 3600
            boards = R.dashboard_refresh(prom, fleet, main_end, hours) if args.dashboards else {}
        print(
            f"\n1. Instant queries at {len(fleet.osds)} OSDs: {len(times)} times, min of "
            f"{args.repeat} per time; machine: {machine}, load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        table(per_group, sizes, totals)
        print("\nMost expensive rules (p50 ms):")
        for i in sorted(per_rule, key=lambda i: -statistics.median(per_rule[i]))[:8]:
            print(
                f"  {statistics.median(per_rule[i]) * 1000:7.1f}  {rules[i].group}  {rules[i].name}"
            )
        print(
            f"goal (instant queries, no rule manager): all groups under 200 ms per evaluation: "
            f"{'met' if statistics.median(totals) < 0.2 else 'NOT met'} (p50)",
            flush=True,
        )
        if boards:
            print(
                f"\nDashboard refresh at 630 OSDs (the last {hours * 60:.0f} minutes, 30 s "
                "step; engine time):\n"
                "| dashboard | targets | no data | total ms | costliest panel | its ms |\n"
                "|---|---|---|---|---|---|"
            )
            for name, r in boards.items():
                print(
                    f"| {name} | {r.queried} | {len(r.empty)} | {r.seconds * 1000:.0f} "
                    f"| {r.worst} | {r.worst_seconds * 1000:.0f} |"
                )
            for name, r in boards.items():
                print(f"no data in {name}: " + "; ".join(sorted({t for t, _ in r.empty})))
                if r.errors:
                    print(f"errors in {name}: {r.errors}")
        if args.manager_seconds is not None and args.manager_seconds <= 0:
            return 0
        shutil.rmtree(work / "iq", ignore_errors=True)
        live_tail = args.live_tail or args.head_minutes > 0
        seconds = args.manager_seconds or (180.0 if live_tail else 55.0)
        rounds = args.manager_rounds or (1 if live_tail else 3)
        per_group, per_rule_rm = {}, {}
        overlap: dict[str, tuple[int, int]] = {}
        latest = 0
        for n in range(rounds):
            shutil.rmtree(work / "rm", ignore_errors=True)
            # The main window ends when this build is expected to be done (the first
            # build's time, with a margin); the rule manager starts there.
            data_end = int((time.time() + setup_s * 1.3 + 60) // 60 * 60)
            _, _, tail = build(
                work / "rm",
                fleet,
                data_end - TIMELINE.end * 60,
                snaps,
                rules,
                needed,
                jobs,
                history_only=not args.manager_all_recordings,
                tail_s=int(seconds) + 120 + 2 * args.manager_interval if live_tail else 0,
                head_s=args.head_minutes * 60,
            )
            got, got_rule, unhealthy, p99, late, seen_overlap, span = rule_manager(
                work / "rm",
                rule_files,
                data_end,
                seconds,
                args.manager_interval,
                args.manager_profile if n == 0 else None,
                binary,
                tail,
                catch_up=args.head_minutes > 0,
            )
            latest = max(latest, late)  # the warning below is for any round that overran
            for g, v in got.items():
                per_group.setdefault(g, []).extend(v)
            for key, v in got_rule.items():
                per_rule_rm.setdefault(key, []).extend(v)
            for g, (hit, of) in seen_overlap.items():
                was = overlap.get(g, (0, 0))
                overlap[g] = (was[0] + hit, was[1] + of)
        same = same_times(work / "rm" / "data", rules, span, args.repeat, binary)
    if not per_group:
        print("the rule manager evaluated no group", file=sys.stderr)
        return 1
    if latest > 60 and not live_tail:
        # (With a live tail the samples due meanwhile are scraped: nothing is stale.)
        print(f"warning: a build overran; the data was {latest} s old", file=sys.stderr)
    evals = min(len(v) for v in per_group.values())
    print(
        f"\n2. Rule manager at {len(fleet.osds)} OSDs: {args.manager_interval} s group "
        f"interval, {rounds} x {seconds:.0f} s from at most {latest} s after the data's end, "
        + (
            f"the last {args.head_minutes} min of raw and recorded series scraped into the head, "
            if args.head_minutes
            else ""
        )
        + f"at least {evals} evaluations per group; {p99} per-OSD mean series written by it; "
        f"rules not healthy: {sum(unhealthy.values())}; load average {os.getloadavg()[0]:.1f}"
    )
    # Sum of the groups' medians: the groups run at their own times, not as one round.
    ordered = {g: per_group[g] for g in sizes if g in per_group}
    medians = [statistics.median(v) for v in ordered.values()]
    table(ordered, sizes, [sum(medians)])
    print("(all groups: the sum of the groups' p50; max is the same sum)")
    # The groups run at their own intervals in production: a minute when every group
    # runs (all of the above) and the minutes when only those of 1 minute or less do.
    interval = {r.group: r.interval_s for r in rules}
    every = [g for g in ordered if interval[g] <= 60]
    rarer = [g for g in ordered if interval[g] > 60]
    print(
        f"groups run every minute or more often: "
        f"{sum(statistics.median(ordered[g]) for g in every) * 1000:.1f} ms; "
        + ", ".join(
            f"{g} (every {interval[g] / 60:g} min): {statistics.median(ordered[g]) * 1000:.1f} ms"
            for g in rarer
        )
    )
    every_ms = sum(statistics.median(ordered[g]) for g in every) * 1000
    print(
        "goal: the groups run every minute under 200 ms per evaluation under the rule "
        f"manager: {'met' if every_ms < 200 else 'NOT met'} ({every_ms:.1f} ms)"
    )
    print(
        "evaluations that ran while another group's did: "
        + ", ".join(f"{g} {hit}/{n}" for g, (hit, n) in overlap.items())
    )
    # Per rule: its evaluation under the manager against the same query, instant, at the
    # same times on the same data.
    print(
        "\nPer rule, rule manager p50 (evaluationTime) against the same expression as an "
        "instant query at the manager's times on its data (ms):"
    )
    position: dict[str, int] = {}
    manager_ms, instant_ms = {}, {}
    for i, r in enumerate(rules):
        k = position[r.group] = position.get(r.group, -1) + 1
        manager_ms[i] = statistics.median(per_rule_rm.get((r.group, k), [0.0])) * 1000
        instant_ms[i] = same[i] * 1000
    for i in sorted(manager_ms, key=lambda i: -manager_ms[i])[:12]:
        print(f"  {manager_ms[i]:7.1f} {instant_ms[i]:7.1f}  {rules[i].group}  {rules[i].name}")
    print(
        f"  {sum(manager_ms.values()):7.1f} {sum(instant_ms.values()):7.1f}  all rules "
        "(sum of the rules' p50)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
