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

    def row(self) -> str:
        return (
            f"| {self.name} | {self.p50_ms:.1f} | {self.p95_ms:.1f} | "
            f"{self.cpu_ms_per_scrape:.1f} | {self.rss_mb:.1f} | {self.series} | {self.errors} |"
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
    latencies.sort()
    return Result(
        name,
        p50_ms=statistics.median(latencies) * 1000,
        p95_ms=latencies[int(len(latencies) * 0.95) - 1] * 1000,
        cpu_ms_per_scrape=cpu / scrapes * 1000,
        rss_mb=rss,
        series=len(series),
        errors=errors,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--node", default="epyc9454p-detuned")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cephnode-bench-"))
    try:
        build_tree(load_node(args.node), tmp)
        paths = [f"--path.sysfs={tmp / 'sys'}", f"--path.procfs={tmp / 'proc'}"]
        ours = [sys.executable, "-m", "cephnode_exporter", "serve", *paths]
        ours.append(f"--path.rootfs={tmp / 'root'}")
        runs = []
        port = free_port()
        runs.append(
            measure(
                "cephnode-exporter (default collectors)",
                [*ours, f"--web.listen-address=127.0.0.1:{port}"],
                port,
                args.scrapes,
                "cephnode_scrape_collector_success",
            )
        )
        port = free_port()
        runs.append(
            measure(
                "cephnode-exporter --collector.cpuidle.per-cpu",
                [*ours, "--collector.cpuidle.per-cpu", f"--web.listen-address=127.0.0.1:{port}"],
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
