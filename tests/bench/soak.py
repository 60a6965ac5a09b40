"""`make soak`: the exporter's memory, descriptors and threads over many scrapes.

A scrape must cost the same at the ten-thousandth time as at the thousandth: the
exporter runs for months under a systemd unit with ``MemoryMax=256M``, and a client that
scrapes back to back (no auth by default) must not grow it. This starts the real
exporter as ``make bench`` does (the reference node's tree, ten admin sockets replaying
the recorded BlueStore OSD: tests/bench/bench.py, tests/bench/osd_replay.py), then:

1. one client scrapes ``/metrics`` back to back: first until the exporter's state that
   fills over time is full (``--warmup-seconds``, by default the OSD latency window of
   300 s plus a minute: the windows keep a read per 10 s of it, the config cache asks
   once a minute) and at least ``--checkpoint`` scrapes were made, which is the
   checkpoint; then ``--scrapes`` more, 9,000 by default;
2. ten clients scrape in parallel, in rounds (3 rounds of 10 x 100 by default).

A checkpoint counted in scrapes alone came before the windows were full once a scrape
took 25 ms instead of 75: the windows' filling then showed as growth.

It samples the process's VmRSS, VmHWM (peak) and Threads from ``/proc/<pid>/status``
and its open descriptors from ``/proc/<pid>/fd`` (proc(5)), prints them, and exits 1
unless every pass criterion holds:

- one client: RSS grew less than ``--max-growth-mb`` from the checkpoint to its last;
- ten clients: RSS grew less than that from their first round's end to the last's.
  Their first round raises RSS once: each connection thread allocates in a glibc
  malloc arena of its own (up to 8 per CPU, malloc(3) M_ARENA_MAX), which keeps freed
  memory; the exporter runs with ``MALLOC_ARENA_MAX=1``, as deploy/cephnode-exporter.service
  sets it, which keeps that rise small;
- overall: RSS grew less than ``--max-growth-mb`` from the checkpoint to the end;
- RSS under ``--max-rss-mb`` at every sample;
- descriptors and threads at the end equal those at the checkpoint;
- every scrape answered 200 with every OSD read.

    python tests/bench/soak.py               # what make soak runs
    python tests/bench/soak.py --warmup-seconds 0 --scrapes 2000 --parallel-scrapes 20
                                             # a quick look, windows not yet full
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cephnode_exporter.facts.osd import DEFAULT_LATENCY_WINDOW  # noqa: E402

from tests.bench.bench import ReplayedOSDs, free_port, wait_ready  # noqa: E402
from tests.fixtures.sysfsgen import build_tree, load_node  # noqa: E402

# A scrape in which the osd collector succeeded carries this line.
OSD_OK = 'cephnode_scrape_collector_success{collector="osd"} 1.0'
# Threads and descriptors are the least of this many reads 50 ms apart: a connection
# thread (one per connection, web.py) may still be closing right after a scrape.
POLLS = 10


@dataclass(frozen=True)
class Sample:
    """The exporter process after ``scrapes`` scrapes."""

    scrapes: int
    seconds: float
    rss_kb: int
    hwm_kb: int
    threads: int
    fds: int

    @property
    def rss_mb(self) -> float:
        return self.rss_kb / 1024

    def row(self, phase: str) -> str:
        return (
            f"| {phase} | {self.scrapes} | {self.seconds:.0f} | {self.rss_mb:.1f} | "
            f"{self.hwm_kb / 1024:.1f} | {self.threads} | {self.fds} |"
        )


def status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) and Threads of /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    return out


def sample(pid: int, scrapes: int, start: float) -> Sample:
    threads = fds = sys.maxsize
    for i in range(POLLS):
        if i:
            time.sleep(0.05)
        s = status(pid)
        threads = min(threads, s["Threads"])
        fds = min(fds, len(os.listdir(f"/proc/{pid}/fd")))
    return Sample(scrapes, time.monotonic() - start, s["VmRSS"], s["VmHWM"], threads, fds)


class Scraper:
    """Scrapes one URL, keeping why an answer was not a full scrape of every OSD."""

    def __init__(self, url: str, osds: int) -> None:
        self.url = url
        self.osds = osds
        self.done = 0
        self.bad: list[str] = []
        self._lock = threading.Lock()

    def once(self) -> None:
        why = None
        try:
            with urllib.request.urlopen(self.url, timeout=30) as r:
                body = r.read().decode()
                if r.status != 200:
                    why = f"HTTP {r.status}"
                elif OSD_OK not in body:
                    why = "the osd collector failed"
                elif body.count("cephnode_osd_scrape_success{") != self.osds:
                    why = "not every OSD was read"
        except OSError as exc:
            why = f"request: {exc}"
        with self._lock:
            self.done += 1
            if why is not None:
                self.bad.append(why)

    def clients(self, clients: int, scrapes: int) -> None:
        """``clients`` threads, each scraping ``scrapes`` times back to back."""

        def run() -> None:
            for _ in range(scrapes):
                self.once()

        threads = [threading.Thread(target=run) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scrapes", type=int, default=9_000, help="one client's scrapes after the checkpoint"
    )
    parser.add_argument(
        "--checkpoint", type=int, default=1_000, help="the least scrapes before the checkpoint"
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=DEFAULT_LATENCY_WINDOW + 60,
        help="the least time before the checkpoint (default: the latency window + 60 s)",
    )
    parser.add_argument("--every", type=int, default=1_000, help="a sample every N scrapes")
    parser.add_argument("--clients", type=int, default=10, help="parallel clients")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of parallel clients")
    parser.add_argument("--parallel-scrapes", type=int, default=100, help="per client, round")
    parser.add_argument("--osds", type=int, default=10, help="replayed OSD sockets")
    parser.add_argument("--node", default="epyc9454p-detuned")
    parser.add_argument("--max-growth-mb", type=float, default=2.0)
    parser.add_argument("--max-rss-mb", type=float, default=60.0)
    args = parser.parse_args()
    if args.checkpoint < 1 or args.scrapes < 1 or args.rounds < 1 or args.warmup_seconds < 0:
        parser.error("need --checkpoint, --scrapes, --rounds >= 1 and --warmup-seconds >= 0")

    tmp = Path(tempfile.mkdtemp(prefix="cephnode-soak-"))
    log = tmp / "exporter.log"
    osds = proc = None
    rows: list[tuple[str, Sample]] = []
    try:
        build_tree(load_node(args.node), tmp)
        osds = ReplayedOSDs(args.osds, "--kind=bluestore", "--debug-zero")
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        cmd = [
            sys.executable, "-m", "cephnode_exporter", "serve",
            f"--path.sysfs={tmp / 'sys'}", f"--path.procfs={tmp / 'proc'}",
            f"--path.rootfs={tmp / 'root'}", f"--ceph.socket-dir={osds.dir}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]  # fmt: skip
        # As deploy/cephnode-exporter.service runs it: one malloc arena.
        env = {**os.environ, "MALLOC_ARENA_MAX": "1"}
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        wait_ready(url, proc)
        scraper = Scraper(url, args.osds)
        start = time.monotonic()

        def record(phase: str) -> Sample:
            assert proc is not None
            s = sample(proc.pid, scraper.done, start)
            rows.append((phase, s))
            print(s.row(phase), file=sys.stderr, flush=True)
            return s

        print("| phase | scrapes | seconds | RSS MB | peak MB | threads | fds |", file=sys.stderr)
        n = 0
        while n < args.checkpoint or time.monotonic() - start < args.warmup_seconds:
            scraper.once()
            n += 1
            if n % args.every == 0:
                record("one client, warming up")
        checkpoint = record("one client, checkpoint")
        for i in range(1, args.scrapes + 1):
            scraper.once()
            if i % args.every == 0 or i == args.scrapes:
                record("one client")
        one_end = rows[-1][1]
        for _ in range(args.rounds):
            scraper.clients(args.clients, args.parallel_scrapes)
            record(f"{args.clients} clients")
        first_round, end = rows[-args.rounds][1], rows[-1][1]
        if proc.poll() is not None:
            raise RuntimeError(f"the exporter exited with {proc.returncode}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        if osds is not None:
            osds.close()
        exporter_log = log.read_text(errors="replace") if log.exists() else ""
        shutil.rmtree(tmp, ignore_errors=True)

    samples = [s for _, s in rows]
    limit = args.max_growth_mb
    criteria = [
        (
            f"RSS growth from scrape {checkpoint.scrapes} to the end ({end.scrapes}) "
            f"under {limit:g} MB",
            f"{end.rss_mb - checkpoint.rss_mb:+.2f} MB",
            end.rss_mb - checkpoint.rss_mb < limit,
        ),
        (
            f"one client: RSS growth from scrape {checkpoint.scrapes} to {one_end.scrapes} "
            f"under {limit:g} MB",
            f"{one_end.rss_mb - checkpoint.rss_mb:+.2f} MB",
            one_end.rss_mb - checkpoint.rss_mb < limit,
        ),
        (
            f"{args.clients} clients: RSS growth from scrape {first_round.scrapes} to "
            f"{end.scrapes} under {limit:g} MB",
            f"{end.rss_mb - first_round.rss_mb:+.2f} MB",
            end.rss_mb - first_round.rss_mb < limit,
        ),
        (
            f"RSS under {args.max_rss_mb:g} MB at every sample",
            f"max {max(s.rss_mb for s in samples):.1f} MB",
            max(s.rss_mb for s in samples) < args.max_rss_mb,
        ),
        (
            f"descriptors flat from scrape {checkpoint.scrapes} to the end",
            f"{checkpoint.fds} -> {end.fds}",
            end.fds == checkpoint.fds,
        ),
        (
            f"threads flat from scrape {checkpoint.scrapes} to the end",
            f"{checkpoint.threads} -> {end.threads}",
            end.threads == checkpoint.threads,
        ),
        (
            "every scrape answered 200 with every OSD read",
            f"{len(scraper.bad)} bad of {scraper.done}",
            not scraper.bad,
        ),
    ]
    print(
        f"Soak of {time.strftime('%Y-%m-%d')}: {args.osds} replayed BlueStore OSDs, node "
        f"{args.node}; one client scraping {checkpoint.seconds:.0f} s ({checkpoint.scrapes} "
        f"scrapes) to the checkpoint, then {args.scrapes} more, then {args.rounds} rounds of "
        f"{args.clients} clients x {args.parallel_scrapes}; "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}\n"
    )
    print("| phase | scrapes | seconds | RSS MB | peak MB | threads | fds |")
    print("|---|---|---|---|---|---|---|")
    for phase, s in rows:
        print(s.row(phase))
    print(
        f"\nRSS at scrape {checkpoint.scrapes}: {checkpoint.rss_mb:.1f} MB; at scrape "
        f"{one_end.scrapes}: {one_end.rss_mb:.1f} MB; at the end ({end.scrapes}): "
        f"{end.rss_mb:.1f} MB ({end.rss_mb - checkpoint.rss_mb:+.2f} MB since scrape "
        f"{checkpoint.scrapes}, the parallel clients' malloc arenas included); peak "
        f"{max(s.hwm_kb for s in samples) / 1024:.1f} MB\n"
    )
    for what, got, ok in criteria:
        print(f"{'PASS' if ok else 'FAIL'}  {what}: {got}")
    if not all(ok for _, _, ok in criteria):
        if scraper.bad:
            print(f"\nfirst bad scrapes: {scraper.bad[:3]}")
        print("\nexporter log (tail):\n" + exporter_log[-3000:])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
