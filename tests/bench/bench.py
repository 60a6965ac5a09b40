"""`make bench`: scrape cost of the exporter on the EPYC reference node, beside node_exporter.

Both exporters are started as real processes pointed at the same generated tree and
scraped over HTTP on loopback, one request at a time (as Prometheus does). Measured per
exporter: latency p50/p95 of a full scrape, CPU seconds per scrape (the process's
utime+stime over the run divided by the scrapes), resident memory after the run, and
series per scrape. Results go to stdout as a Markdown table; record them in
docs/performance.md.
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

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


class ReplayedOSDs:
    """``count`` OSD admin sockets replaying the recorded BlueStore OSD, one process each
    (tests/bench/osd_replay.py), in a directory short enough for sun_path."""

    def __init__(self, count: int, *flags: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-osd-", dir="/tmp"))
        self.procs: list[subprocess.Popen] = []
        script = str(Path(__file__).with_name("osd_replay.py"))
        try:
            for i in range(count):
                sock = self.dir / f"ceph-osd.{i}.asok"
                cmd = [sys.executable, script, f"--socket={sock}", *flags]
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
                self.procs.append(proc)
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"replay server for osd.{i} did not start")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


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


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                r.read()
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready")


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
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cephnode-bench-"))
    try:
        build_tree(load_node(args.node), tmp)
        paths = [f"--path.sysfs={tmp / 'sys'}", f"--path.procfs={tmp / 'proc'}"]
        ours = [sys.executable, "-m", "cephnode_exporter", "serve", *paths]
        ours.append(f"--path.rootfs={tmp / 'root'}")
        no_ceph = tmp / "no-ceph"
        no_ceph.mkdir()
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
        # The reference node's ten NVMe OSDs: tuned (debug 0/0, seed 004) and at Ceph's
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
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}\n"
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
