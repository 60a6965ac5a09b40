"""Contenders measured in interleaved rounds, so that the machine's drift hits each alike.

A round gives every contender the same number of scrapes (or replay iterations) one
after the other; the order rotates from round to round, so no contender always follows
the same neighbour. On a shared machine (here: 2 cores and other engineers' work) the
load changes by the minute: measured one after the other, two exporters would see
different machines; measured in rounds, the ratio of their medians holds even when the
figures themselves move.
"""

from __future__ import annotations

import http.client
import os
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench.syscall_limit import run_replay

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (proc(5), /proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                r.read()
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready")


@dataclass
class Contender:
    """One thing timed per round: an HTTP endpoint of a running process, or the C replay."""

    name: str
    url: str | None = None
    pid: int | None = None
    binary: Path | None = None
    latencies: list[float] = field(default_factory=list)
    cpu: float = 0.0  # seconds of the process over its own rounds
    body: bytes = b""
    cpu_each: list[float] = field(default_factory=list)  # the replay's, per iteration
    # Called before each scrape, untimed (tests/bench/ticker.py: counters that move).
    before: Callable[[], None] | None = None
    _conn: http.client.HTTPConnection | None = None

    def _get(self) -> bytes:
        """One GET on a kept-alive connection, as Prometheus scrapes (its scrape client
        reuses connections to a target); a fresh connection when the last one closed."""
        assert self.url is not None
        parts = urllib.parse.urlsplit(self.url)
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(parts.netloc, timeout=30)
            try:
                self._conn.request("GET", parts.path or "/")
                with self._conn.getresponse() as r:
                    body = r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{self.url}: HTTP {r.status}")
                    return body
            except (http.client.HTTPException, ConnectionError):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def round(self, n: int) -> None:
        if self.binary is not None:
            if self.before is not None:
                # Each iteration after its own tick, as each scrape is: reading files
                # another process just wrote costs more (their cache lines are on that
                # CPU), and a run of iterations would pay it only in its first.
                for _ in range(n):
                    self.before()
                    wall, cpu = run_replay(self.binary, 1)[0]
                    self.latencies.append(wall)
                    self.cpu_each.append(cpu)
                return
            # One more iteration than kept: the first warms the dentry and page caches.
            for wall, cpu in run_replay(self.binary, n + 1)[1:]:
                self.latencies.append(wall)
                self.cpu_each.append(cpu)
            return
        assert self.url is not None
        cpu0 = cpu_seconds(self.pid) if self.pid else 0.0
        body = b""
        for _ in range(n):
            if self.before is not None:
                self.before()
            start = time.perf_counter()
            body = self._get()
            self.latencies.append(time.perf_counter() - start)
        self.body = body
        if self.pid:
            self.cpu += cpu_seconds(self.pid) - cpu0

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p95(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[max(0, int(len(ordered) * 0.95) - 1)]

    @property
    def cpu_per_scrape(self) -> float | None:
        """The process's CPU over its scrapes / scrapes; the replay's median iteration."""
        if self.cpu_each:
            return statistics.median(self.cpu_each)
        return self.cpu / len(self.latencies) if self.pid and self.latencies else None

    @property
    def series(self) -> int | None:
        if not self.body:
            return None
        lines = self.body.decode(errors="replace").splitlines()
        return sum(1 for line in lines if line and not line.startswith("#"))

    def failed(self, metric: str) -> int:
        lines = self.body.decode(errors="replace").splitlines()
        return sum(1 for line in lines if line.startswith(metric) and line.endswith(" 0"))


def interleave(contenders: list[Contender], rounds: int, per_round: int) -> None:
    for r in range(rounds):
        k = r % len(contenders)
        for c in contenders[k:] + contenders[:k]:
            c.round(per_round)
