"""`make bench`: scrape cost of the exporter on the EPYC reference node, beside node_exporter.

First, in interleaved rounds (tests/bench/rounds.py), so the machine's drift hits each
alike:

1. **The host scrape against its syscall limit.** The file syscalls of one scrape are
   captured with strace from the serving exporter and replayed by a C program compiled
   here (tests/bench/syscall_limit.py); the exporter's p50 is printed as a multiple of
   the replay's, beside node_exporter with its cpufreq, nvme and netclass collectors on
   the same tree and an HTTP round trip that does no work (``/-/healthy``).
2. **OSDs with a real OSD's /proc shape.** Ten replayed admin sockets whose peer is a
   process named ceph-osd with a real OSD's thread count, its /proc/<pid> linked into
   the fixture's procfs (tests/bench/osd_replay.py ``--threads``), against ten sockets
   without a process (the replay as it was) and no OSD: exporter CPU per scrape.

Then the sequential table (skipped with --quick):

Both exporters are started as real processes pointed at the same generated tree and
scraped over HTTP on loopback, one request at a time (as Prometheus does). Measured per
exporter: latency p50/p95 of a full scrape, CPU seconds per scrape (the process's
utime+stime over the run divided by the scrapes), resident memory after the run, and
series per scrape. Results go to stdout as a Markdown table; record them in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench import syscall_limit  # noqa: E402
from tests.bench.rounds import Contender, interleave, wait_ready  # noqa: E402
from tests.bench.ticker import Ticker  # noqa: E402
from tests.fixtures.sysfsgen import build_tree, load_node  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    name: str
    p50_ms: float
    p95_ms: float
    cpu_ms_per_scrape: float
    rss_mb: float
    series: int
    errors: int
    # Series of one simulated OSD (ceph_daemon="osd.0"), when OSDs are replayed.
    per_osd: int | None = None

    def row(self) -> str:
        return (
            f"| {self.name} | {self.p50_ms:.1f} | {self.p95_ms:.1f} | "
            f"{self.cpu_ms_per_scrape:.1f} | {self.rss_mb:.1f} | {self.series} | {self.errors} |"
        )


# Threads of a real-shaped replayed OSD: the test cluster's ceph-osd processes ran 46 to
# 59 threads; the fixture's OSD directories are ceph-10 to ceph-19.
OSD_THREADS = 55
FIXTURE_OSD_IDS = range(10, 20)
# The goal for ten real-shaped OSDs (docs/performance.md): exporter CPU added per scrape.
OSD_CPU_GOAL_MS = 20.0


class ReplayedOSDs:
    """``count`` OSD admin sockets replaying the recorded BlueStore OSD, one process each
    (tests/bench/osd_replay.py), in a directory short enough for sun_path.

    With ``procfs`` (the fixture's procfs), each replay process runs ``threads`` threads
    under the name ceph-osd, is named after a fixture OSD (ceph-osd.<id>.asok, osd_data
    its directory in the fixture's rootfs) and its /proc/<pid> is linked into the
    fixture's procfs: the exporter, which reads the socket peer's pid from that procfs,
    then reads the live process's stat and thread status files as on a storage node.
    """

    def __init__(
        self, count: int, *flags: str, procfs: Path | None = None, threads: int = OSD_THREADS
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-osd-", dir="/tmp"))
        self.procs: list[subprocess.Popen] = []
        self.links: list[Path] = []
        script = str(Path(__file__).with_name("osd_replay.py"))
        ids = list(FIXTURE_OSD_IDS) if procfs is not None else list(range(count))
        if count > len(ids):
            raise ValueError(f"at most {len(ids)} real-shaped OSDs (the fixture's)")
        try:
            for osd_id in ids[:count]:
                sock = self.dir / f"ceph-osd.{osd_id}.asok"
                cmd = [sys.executable, script, f"--socket={sock}", *flags]
                if procfs is not None:
                    cmd += [f"--threads={threads}", f"--osd-data=/var/lib/ceph/osd/ceph-{osd_id}"]
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
                self.procs.append(proc)
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"replay server for osd.{osd_id} did not start")
                if procfs is not None:
                    link = procfs / str(proc.pid)
                    link.symlink_to(f"/proc/{proc.pid}")  # fails on a fixture pid: loud
                    self.links.append(link)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for link in self.links:
            link.unlink(missing_ok=True)
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def start(cmd: list[str], port: int, warmup: int = 10) -> subprocess.Popen:
    """Start a server, wait until it answers, scrape it ``warmup`` times."""
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        for _ in range(warmup):  # caches, imports, first allocations
            urllib.request.urlopen(url, timeout=30).read()
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def node_exporter_binary() -> str | None:
    return shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def host_vs_limit(
    tmp: Path, ours: list[str], paths: list[str], args: argparse.Namespace, tick: Callable[[], None]
) -> None:
    """Section 1: the exporter's host scrape, node_exporter and the syscall limit."""
    no_ceph = tmp / "no-ceph"
    procs: list[subprocess.Popen] = []
    workdir = Path(tempfile.mkdtemp(prefix="cephnode-limit-"))
    try:
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        exporter = start(
            [*ours, f"--ceph.socket-dir={no_ceph}", f"--web.listen-address=127.0.0.1:{port}"],
            port,
        )
        procs.append(exporter)
        windows = syscall_limit.capture(exporter.pid, url, scrapes=3, workdir=workdir)
        plan = syscall_limit.replay_plan(syscall_limit.typical(windows))
        binary = syscall_limit.compile_c(syscall_limit.generate_c(plan), workdir)
        mismatches = syscall_limit.check_replay(binary)
        # strace slowed the scrapes it watched; these settle the exporter again.
        for _ in range(5):
            urllib.request.urlopen(url, timeout=30).read()
        ours_c = Contender(
            "cephnode-exporter (default collectors, no OSD)", url, exporter.pid, before=tick
        )
        limit = Contender(
            "syscall limit (C replay of one scrape, cc -O2)", binary=binary, before=tick
        )
        healthy = Contender(
            "HTTP round trip, no work (cephnode-exporter /-/healthy)",
            f"http://127.0.0.1:{port}/-/healthy",
        )
        contenders = [limit, ours_c, healthy]
        node_exporter = node_exporter_binary()
        theirs: Contender | None = None
        if node_exporter:
            nport = free_port()
            proc = start(
                [
                    node_exporter,
                    *paths,
                    f"--path.rootfs={tmp / 'root'}",
                    f"--web.listen-address=127.0.0.1:{nport}",
                    "--collector.disable-defaults",
                    "--collector.cpufreq",
                    "--collector.nvme",
                    "--collector.netclass",
                ],
                nport,
            )
            procs.append(proc)
            theirs = Contender(
                "node_exporter (cpufreq, nvme, netclass)",
                f"http://127.0.0.1:{nport}/metrics",
                proc.pid,
                before=tick,
            )
            contenders.insert(2, theirs)
        interleave(contenders, args.rounds, args.per_round)
    finally:
        for proc in procs:
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"### Host scrape against the syscall limit ({args.rounds} rounds x "
        f"{args.per_round} per contender, order rotated each round)\n"
    )
    shapes = ", ".join(str(sum(syscall_limit.replay_plan(w).counts.values())) for w in windows)
    print(
        f"- one scrape (the typical of {len(windows)} captured; file syscalls per window: "
        f"{shapes}): {syscall_limit.describe(plan)}"
    )
    repeated = syscall_limit.repeated_opens(plan)
    if repeated:
        tree = str(tmp)
        shown = ", ".join(f"{path.replace(tree, '')} x{n}" for path, n in repeated[:8])
        more = f" and {len(repeated) - 8} more" if len(repeated) > 8 else ""
        print(f"- opened more than once in the scrape: {shown}{more}")
    print(
        f"- replay check: {mismatches} calls returned other than captured (calls on "
        "/proc/self, the replay's own process, are not compared)\n"
    )
    print("| contender | p50 ms | p95 ms | CPU ms/scrape | series | p50 / limit | CPU / limit |")
    print("|---|---|---|---|---|---|---|")
    limit_cpu = limit.cpu_per_scrape or float("nan")
    for c in contenders:
        cpu, cpu_ratio = "-", "-"
        if c.cpu_per_scrape is not None:
            cpu = f"{c.cpu_per_scrape * 1000:.2f}"
            cpu_ratio = f"{c.cpu_per_scrape / limit_cpu:.2f}x"
        series = str(c.series) if c.series is not None and c.url and c is not healthy else "-"
        print(
            f"| {c.name} | {c.p50 * 1000:.2f} | {c.p95 * 1000:.2f} | {cpu} | {series} | "
            f"{c.p50 / limit.p50:.2f}x | {cpu_ratio} |"
        )
    print()
    ours_cpu = (ours_c.cpu_per_scrape or float("nan")) / limit_cpu
    print(
        f"- cephnode-exporter: **{ours_c.p50 / limit.p50:.2f}x the syscall limit** (p50 of "
        f"the scrape against the replay's wall time; {ours_cpu:.2f}x in CPU per scrape, "
        "which preemption on a loaded machine disturbs less; the exporter's CPU includes "
        "the HTTP exchange)"
    )
    if theirs is not None:
        print(
            f"- cephnode-exporter / node_exporter p50: {ours_c.p50 / theirs.p50:.2f} "
            f"(below 1: faster); failed node_exporter collectors: "
            f"{theirs.failed('node_scrape_collector_success')}"
        )
    else:
        print("- node_exporter not found (Debian prometheus-node-exporter): not compared")
    print()


def osd_shapes(
    tmp: Path, ours: list[str], args: argparse.Namespace, tick: Callable[[], None]
) -> None:
    """Section 2: exporter CPU per scrape with no OSD, replayed sockets, real-shaped OSDs."""
    count = min(args.osds, len(FIXTURE_OSD_IDS))
    no_ceph = tmp / "no-ceph"
    groups: list[ReplayedOSDs] = []
    procs: list[subprocess.Popen] = []
    contenders: list[Contender] = []
    try:
        plain = ReplayedOSDs(count, "--kind=bluestore", "--debug-zero")
        groups.append(plain)
        shaped = ReplayedOSDs(count, "--kind=bluestore", "--debug-zero", procfs=tmp / "proc")
        groups.append(shaped)
        for name, sockets in (
            ("no OSD", no_ceph),
            (f"+ {count} replayed sockets, no process (the replay as it was)", plain.dir),
            (f"+ {count} real-shaped OSDs ({OSD_THREADS} threads each)", shaped.dir),
        ):
            port = free_port()
            proc = start(
                [*ours, f"--ceph.socket-dir={sockets}", f"--web.listen-address=127.0.0.1:{port}"],
                port,
            )
            procs.append(proc)
            contenders.append(
                Contender(name, f"http://127.0.0.1:{port}/metrics", proc.pid, before=tick)
            )
        interleave(contenders, args.rounds, args.osd_per_round)
    finally:
        for proc in procs:
            stop(proc)
        for group in groups:
            group.close()

    base, _plain, shaped_c = contenders
    print(
        f"### OSDs with a real OSD's /proc shape ({args.rounds} rounds x "
        f"{args.osd_per_round} scrapes per exporter, order rotated each round)\n"
    )
    print("| cephnode-exporter | p50 ms | p95 ms | CPU ms/scrape | added CPU ms | per OSD ms |")
    print("|---|---|---|---|---|---|")
    base_cpu = base.cpu_per_scrape or 0.0
    for c in contenders:
        cpu = c.cpu_per_scrape or 0.0
        added = (cpu - base_cpu) * 1000
        per = f"{added / count:.2f}" if c is not base else "-"
        print(
            f"| {c.name} | {c.p50 * 1000:.1f} | {c.p95 * 1000:.1f} | {cpu * 1000:.1f} | "
            f"{added:.1f} | {per} |"
        )
    added = ((shaped_c.cpu_per_scrape or 0.0) - base_cpu) * 1000
    scaled = added * 10 / count
    verdict = "within" if scaled < OSD_CPU_GOAL_MS else "OVER"
    print(
        f"\n- ten real-shaped OSDs add **{scaled:.1f} ms of exporter CPU per scrape** "
        f"(goal: under {OSD_CPU_GOAL_MS:.0f} ms): {verdict}"
    )
    lines = [line for line in shaped_c.body.decode().splitlines() if 'ceph_daemon="osd.10"' in line]
    threads = [line.rsplit(" ", 1)[1] for line in lines if line.startswith("cephnode_osd_threads{")]
    print(
        f"- osd.10 (real-shaped): {len(lines)} series, {threads[0] if threads else 'no'} "
        f"threads as the exporter read them; failed collectors: "
        f"{sum(c.failed('cephnode_scrape_collector_success') for c in contenders)}\n"
    )


def interpreter() -> str:
    """The interpreter the exporter runs under, and whether it loads libpython as a
    shared library. pyenv's default build (--enable-shared, no profile-guided
    optimisation) took 6-10 % more CPU for the host scrape and 20 % more for ten OSDs
    than Debian's python3.11, which has libpython linked into the interpreter
    (docs/performance.md); the Debian package and `make bench` on a fresh Debian
    machine use Debian's."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    shared = "libpython" in maps
    kind = "shared libpython" if shared else "libpython linked in"
    return (
        f"{platform.python_implementation()} {platform.python_version()} "
        f"({os.path.realpath(sys.executable)}, {kind})"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(name: str, cmd: list[str], port: int, scrapes: int, error_metric: str) -> Result:
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        for _ in range(10):  # warm-up: caches, imports, first allocations
            urllib.request.urlopen(url, timeout=10).read()
        cpu0 = cpu_seconds(proc.pid)
        latencies = []
        body = b""
        for _ in range(scrapes):
            start = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as r:
                body = r.read()
            latencies.append(time.perf_counter() - start)
        cpu = cpu_seconds(proc.pid) - cpu0
        rss = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines = body.decode().splitlines()
    series = [line for line in lines if line and not line.startswith("#")]
    errors = sum(1 for line in series if line.startswith(error_metric) and line.endswith(" 0"))
    per_osd = sum(1 for line in series if 'ceph_daemon="osd.0"' in line)
    latencies.sort()
    return Result(
        name,
        p50_ms=statistics.median(latencies) * 1000,
        p95_ms=latencies[int(len(latencies) * 0.95) - 1] * 1000,
        cpu_ms_per_scrape=cpu / scrapes * 1000,
        rss_mb=rss,
        series=len(series),
        errors=errors,
        per_osd=per_osd or None,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--node", default="epyc9454p-detuned")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--osds", type=int, default=10, help="replayed OSD sockets (0: none)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--per-round", type=int, default=30, help="host scrapes per round")
    parser.add_argument("--osd-per-round", type=int, default=20, help="OSD scrapes per round")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 rounds of 10 host and 5 OSD scrapes; no sequential table",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.per_round, args.osd_per_round = 3, 10, 5

    tmp = Path(tempfile.mkdtemp(prefix="cephnode-bench-"))
    try:
        build_tree(load_node(args.node), tmp)
        paths = [f"--path.sysfs={tmp / 'sys'}", f"--path.procfs={tmp / 'proc'}"]
        ours = [sys.executable, "-m", "cephnode_exporter", "serve", *paths]
        ours.append(f"--path.rootfs={tmp / 'root'}")
        no_ceph = tmp / "no-ceph"
        no_ceph.mkdir()
        # With --json the interleaved sections go to stderr: stdout stays one document.
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            print(
                f"Node fixture: {args.node}; {interpreter()}, {os.cpu_count()} CPUs, kernel "
                f"{platform.release()}, load average {os.getloadavg()[0]:.2f} at the start\n"
            )
            ticker = Ticker(tmp)
            print(
                f"Before each timed scrape the bench advances {ticker.files} counter and "
                "frequency files of the tree (untimed; tests/bench/ticker.py), and every "
                "contender is scraped on a kept-alive connection, as Prometheus scrapes.\n"
            )
            try:
                host_vs_limit(tmp, ours, paths, args, ticker.tick)
                if args.osds > 0:
                    osd_shapes(tmp, ours, args, ticker.tick)
            finally:
                ticker.close()
        if args.quick:
            return 0
        runs = []
        port = free_port()
        runs.append(
            measure(
                "cephnode-exporter (default collectors, no OSD)",
                [*ours, f"--ceph.socket-dir={no_ceph}", f"--web.listen-address=127.0.0.1:{port}"],
                port,
                args.scrapes,
                "cephnode_scrape_collector_success",
            )
        )
        # The reference node's ten NVMe OSDs: tuned (debug 0/0, as SUSE's IO500 run) and at Ceph's
        # default debug levels (one more series per non-zero subsystem of the profile).
        for label, flags in (
            (f"+ {args.osds} BlueStore OSDs, debug 0/0", ["--debug-zero"]),
            (f"+ {args.osds} BlueStore OSDs, Ceph default debug levels", []),
        ):
            if args.osds <= 0:
                break
            osds = ReplayedOSDs(args.osds, "--kind=bluestore", *flags)
            try:
                port = free_port()
                runs.append(
                    measure(
                        label,
                        [
                            *ours,
                            f"--ceph.socket-dir={osds.dir}",
                            f"--web.listen-address=127.0.0.1:{port}",
                        ],
                        port,
                        args.scrapes,
                        "cephnode_scrape_collector_success",
                    )
                )
            finally:
                osds.close()
        port = free_port()
        runs.append(
            measure(
                "cephnode-exporter --collector.cpuidle.per-cpu",
                [
                    *ours,
                    f"--ceph.socket-dir={no_ceph}",
                    "--collector.cpuidle.per-cpu",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                port,
                args.scrapes,
                "cephnode_scrape_collector_success",
            )
        )
        node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        if node_exporter:
            for label, extra in (
                (
                    "node_exporter, cpufreq collector only",
                    ["--collector.disable-defaults", "--collector.cpufreq"],
                ),
                ("node_exporter, default collectors", []),
            ):
                port = free_port()
                runs.append(
                    measure(
                        label,
                        [
                            node_exporter,
                            *paths,
                            f"--path.rootfs={tmp / 'root'}",
                            f"--web.listen-address=127.0.0.1:{port}",
                            *extra,
                        ],
                        port,
                        args.scrapes,
                        "node_scrape_collector_success",
                    )
                )
        else:
            print(
                "node_exporter not found (Debian prometheus-node-exporter): not compared",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps([r.__dict__ for r in runs], indent=2))
        return 0
    print(
        f"Node fixture: {args.node}; {args.scrapes} sequential scrapes after 10 warm-up; "
        f"{interpreter()}, {os.cpu_count()} CPUs, kernel {platform.release()}\n"
    )
    print("| exporter | p50 ms | p95 ms | CPU ms/scrape | RSS MB | series | failed collectors |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        print(r.row())
    for r in runs:
        if r.per_osd:
            print(f"\n{r.name}: {r.per_osd} series per OSD")
    return 0


if __name__ == "__main__":
    sys.exit(main())
