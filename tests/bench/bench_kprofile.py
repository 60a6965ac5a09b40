"""`make bench`: CPU cost of the kprofile sampler (perf + our parsing) over its duty cycle.

Measured with the real perf on this machine (needs root and linux-perf), in the mode the
exporter uses (one perf record kept running with its events off between windows, a
perf script per window; kprofile/recorder.py):

1. **Per window**, windows back to back: CPU of perf record (from /proc/<pid>/stat: it
   keeps running), of perf script (getrusage of the reaped child) and of our side (the
   thread's CPU time: pumping the pipes, parsing, classifying). Scenarios: the defaults
   (49 Hz x 2 s) on an idle machine and with a system-call loop on every CPU (deeper
   kernel stacks, more text); a 0.1 s window for the fixed cost per window; 997 Hz with
   the loop for the cost per sample, which extrapolates to the 96-thread reference node;
   the one-shot mode (perf started for each window, the fallback) for comparison.
2. **One full duty cycle, unshortened**: the sampler thread as the exporter runs it, over
   exactly one interval (60 s: a 2 s window, then 58 s asleep) after a first window has
   started perf record, as the CPU time of this whole process, its reaped children and
   perf record. perf record's start-up, paid once per exporter start, is reported apart.
   Skipped with ``--quick``.

The output spells out the arithmetic to the 96-CPU reference node: the cost per sample,
per CPU and window at the defaults, and the fixed cost per window, with the verdict
against the budget there (printed; the exit status stays this machine's).

The budget is 0.5 % of one core averaged over the cycle; the exit status is 1 when the
full cycle (with --quick: the per-window figure divided by the interval) exceeds it.
Results go to stdout as Markdown; record them in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cephnode_exporter.kprofile.perf import Outcome, PerfConfig
from cephnode_exporter.kprofile.runner import run_window
from cephnode_exporter.kprofile.sampler import Sampler

BUDGET = 0.005  # of one core, averaged over the duty cycle
REFERENCE_CPUS = 96  # the reference node: EPYC 9454P, 48 cores / 96 threads
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class WindowCost:
    record_s: float  # perf record
    script_s: float  # perf script (and in one-shot mode perf record too)
    python_s: float  # our thread
    samples: int

    @property
    def total_s(self) -> float:
        return self.record_s + self.script_s + self.python_s


def perf_version() -> str:
    out = subprocess.run(["perf", "version"], capture_output=True, text=True, check=False)
    return out.stdout.split()[-1] if out.stdout.split() else "?"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pid_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def recorded_window(sampler: Sampler) -> WindowCost:
    pid = sampler._recorder.pid
    rec0, child0, py0 = pid_cpu(pid), children_cpu(), time.thread_time()
    report = sampler.run_once()
    rec1, child1, py1 = pid_cpu(pid), children_cpu(), time.thread_time()
    if report.outcome != Outcome.OK or report.window is None or sampler._recorder.pid != pid:
        raise SystemExit(f"window failed: {report.outcome}: {report.reason}")
    return WindowCost(rec1 - rec0, child1 - child0, py1 - py0, report.window.samples)


def one_shot_window(config: PerfConfig) -> WindowCost:
    child0, py0 = children_cpu(), time.thread_time()
    report = run_window(config)
    child1, py1 = children_cpu(), time.thread_time()
    if report.outcome != Outcome.OK or report.window is None:
        raise SystemExit(f"window failed: {report.outcome}: {report.reason}")
    return WindowCost(0.0, child1 - child0, py1 - py0, report.window.samples)


def windows(config: PerfConfig, n: int) -> list[WindowCost]:
    sampler = Sampler(config, 60)
    try:
        sampler.run_once()  # starts perf record, warms caches
        return [recorded_window(sampler) for _ in range(n)]
    finally:
        sampler.close()


def load(cpus: int) -> list[subprocess.Popen]:
    """One one-byte read/write loop per CPU: every sample is a system call."""
    dd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=100000000000"]
    return [subprocess.Popen(dd, stderr=subprocess.DEVNULL) for _ in range(cpus)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def full_cycle(config: PerfConfig, interval: float) -> tuple[float, float, float]:
    """(CPU s of the first window, perf record's start included; CPU s and wall s from
    the end of the first window to the end of the second)."""
    sampler = Sampler(config, interval)
    cpu0 = self_cpu() + children_cpu()
    sampler.start()
    deadline = time.monotonic() + config.duration + config.grace
    while sampler.snapshot().windows.get("ok", 0) < 1:
        if time.monotonic() > deadline:
            raise SystemExit(f"full cycle: no first window: {sampler.snapshot().last_report}")
        time.sleep(0.05)
    # From the end of the first window to the end of the second: one interval, one
    # window, one idle gap.
    pid = sampler._recorder.pid
    first = self_cpu() + children_cpu() + pid_cpu(pid) - cpu0
    start = time.monotonic()
    cpu1 = self_cpu() + children_cpu() + pid_cpu(pid)
    deadline = start + interval + config.duration + config.grace
    # Sleep through the idle part in one call: polling would cost CPU of its own.
    time.sleep(max(0.0, interval - config.duration - 1.0))
    while sampler.snapshot().windows.get("ok", 0) < 2:
        if time.monotonic() > deadline:
            raise SystemExit(f"full cycle: no second window: {sampler.snapshot().last_report}")
        time.sleep(0.05)
    cpu2 = self_cpu() + children_cpu() + pid_cpu(pid)
    wall = time.monotonic() - start
    state = sampler.snapshot()
    sampler.close()
    if state.windows.get("ok", 0) != 2 or sampler._recorder.starts != 1:
        raise SystemExit(f"full cycle: expected two windows, one start: {dict(state.windows)}")
    return first, cpu2 - cpu1, wall


def row(name: str, costs: list[WindowCost]) -> str:
    def med(attr: str) -> float:
        return statistics.median(getattr(c, attr) for c in costs)

    return (
        f"| {name} | {med('samples'):.0f} | {med('record_s') * 1000:.0f} | "
        f"{med('script_s') * 1000:.0f} | {med('python_s') * 1000:.0f} | "
        f"{med('total_s') * 1000:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=3, help="windows per scenario")
    # The exporter's defaults (--collector.kprofile.frequency and .duration).
    parser.add_argument("--duration", type=float, default=PerfConfig().duration)
    parser.add_argument("--frequency", type=int, default=PerfConfig().frequency)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="skip the full duty cycle")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("perf") is None:
        print("bench_kprofile: needs root and perf (linux-perf): skipped", file=sys.stderr)
        return 0

    cpus = os.cpu_count() or 1
    config = PerfConfig(frequency=args.frequency, duration=args.duration)
    fast = PerfConfig(frequency=997, duration=args.duration)
    fixed = windows(PerfConfig(frequency=args.frequency, duration=0.1), args.windows)
    idle = windows(config, args.windows)
    procs = load(cpus)
    try:
        busy = windows(config, args.windows)
        dense = windows(fast, args.windows)
    finally:
        stop(procs)
    one_shot = [one_shot_window(config) for _ in range(args.windows)]

    fixed_s = statistics.median(c.total_s for c in fixed)
    worst = max(statistics.median(c.total_s for c in s) for s in (idle, busy))
    per_sample = statistics.median((c.total_s - fixed_s) / c.samples for c in dense)
    ref_samples = REFERENCE_CPUS * args.frequency * args.duration
    ref_window = fixed_s + per_sample * ref_samples

    print(
        f"kprofile sampler: {args.frequency} Hz, {args.duration:g} s windows every "
        f"{args.interval:g} s; {cpus} CPUs, kernel {platform.release()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"perf {perf_version()}\n"
    )
    print("| window | samples | perf record ms | perf script ms | Python ms | total CPU ms |")
    print("|---|---|---|---|---|---|")
    print(row("0.1 s (fixed cost)", fixed))
    print(row(f"{args.duration:g} s, idle machine", idle))
    print(row(f"{args.duration:g} s, syscall loop on every CPU", busy))
    print(row(f"{args.duration:g} s at 997 Hz, syscall loop (cost per sample)", dense))
    print(row(f"{args.duration:g} s, one-shot mode (fallback), idle", one_shot))
    print()
    # The arithmetic to the reference node, spelled out: perf takes `frequency` samples
    # a second on every CPU (perf-record(1) -F, system-wide -a), so a window costs the
    # fixed part plus CPUs x frequency x duration samples.
    per_window_samples = args.frequency * args.duration
    per_cpu = per_sample * per_window_samples
    dense_samples = statistics.median(c.samples for c in dense)
    print(
        f"- cost per sample: {per_sample * 1e6:.1f} us (the 997 Hz window with a system-call "
        f"loop on every CPU: {dense_samples:.0f} samples, its total minus the fixed cost, "
        "divided by its samples)"
    )
    print(
        f"- fixed cost per window: {fixed_s * 1000:.1f} ms (the 0.1 s window), measured on "
        f"{cpus} CPUs; it holds a per-CPU part too (perf opens one event per CPU and "
        "enables and disables each per window), so it grows on a larger node"
    )
    print(
        f"- per CPU at {args.frequency} Hz x {args.duration:g} s: {per_window_samples:.0f} "
        f"samples a window x {per_sample * 1e6:.1f} us = {per_cpu * 1000:.2f} ms per CPU "
        f"per window, {per_cpu / args.interval:.4%} of one core per CPU"
    )
    print(
        f"- per window over the interval here (worst scenario, {worst * 1000:.0f} ms): "
        f"{worst / args.interval:.3%} of one core"
    )
    ref_share = ref_window / args.interval
    print(
        f"- {REFERENCE_CPUS} CPUs: {fixed_s * 1000:.1f} ms + {REFERENCE_CPUS} x "
        f"{per_cpu * 1000:.2f} ms = {ref_window * 1000:.0f} ms per window "
        f"({ref_samples:.0f} samples); / {args.interval:g} s = **{ref_share:.3%} of one "
        f"core** on a {REFERENCE_CPUS}-CPU node (budget {BUDGET:.1%}: "
        f"{'within' if ref_share < BUDGET else 'OVER'}); the budget allows "
        f"{(BUDGET * args.interval - fixed_s) / per_cpu:.0f} CPUs at these defaults"
    )
    share = worst / args.interval
    if not args.quick:
        first, cpu, wall = full_cycle(config, args.interval)
        share = cpu / wall
        print(
            f"- one full cycle measured ({wall:.1f} s, one window, perf record already "
            f"running): {cpu * 1000:.0f} ms CPU, {share:.3%} of one core; the first window "
            f"with perf record's start-up: {first * 1000:.0f} ms"
        )
    verdict = "within" if share < BUDGET else "OVER"
    print(f"- budget {BUDGET:.1%} of one core, here on {cpus} CPUs: {verdict}")
    return 0 if share < BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
