"""Counters that move between scrapes, as on a storage node.

The fixture tree is regular files that nobody writes: every scrape of it reads the
values of the last one. On a node the cpuidle counters of every CPU and state move
between two scrapes, the achieved frequency of every CPU is a new estimate, and the
NVMe namespaces' in-flight counts change. An exporter that reuses work when its inputs
did not change would be measured on its best case; the bench advances these files
before each scrape (untimed), so it is measured on a node's ordinary case.

Files kept open and rewritten with ``pwrite`` at offset 0: a counter only grows, so the
new text is never shorter than the old. Each written file then gets an access time in
the future: under ``relatime`` (mount(8)) the first read after a write would otherwise
update the inode's access time, which on ext4 doubled the cost of reading the 1,440
cpuidle files; sysfs has no such cost, and the C replay, reading after the exporter,
would not pay it either.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# Documentation/ABI/testing/sysfs-devices-system-cpu (cpuidle counters); the rest of a
# state's files (name, latency, disable, ...) are settings, not counters.
CPUIDLE_COUNTERS = ("usage", "time", "above", "below", "rejected")
# An access time after any write (2100-01-01): relatime then never updates it.
FUTURE_NS = 4_102_444_800 * 1_000_000_000
FREQ_FILES = ("cpuinfo_avg_freq", "scaling_cur_freq")


class Ticker:
    """Advances the tree's moving files by one step per :meth:`tick`."""

    def __init__(self, tree: Path) -> None:
        cpu = tree / "sys" / "devices" / "system" / "cpu"
        self._counters: list[tuple[int, int, int]] = []  # (fd, value, step)
        for path in sorted(cpu.glob("cpu[0-9]*/cpuidle/state[0-9]*/*")):
            if path.name in CPUIDLE_COUNTERS:
                # usage and time grow fastest; above/below/rejected slower, some never.
                step = {"usage": 997, "time": 29_989, "above": 3, "below": 11}.get(path.name, 0)
                self._add(path, step)
        self._freqs: list[tuple[int, int]] = []  # (fd, base kHz)
        for name in FREQ_FILES:
            for path in sorted(cpu.glob(f"cpu[0-9]*/cpufreq/{name}")):
                fd = os.open(path, os.O_RDWR)
                self._freqs.append((fd, int(os.pread(fd, 64, 0).split()[0])))
        self._inflight = [
            os.open(p, os.O_RDWR) for p in sorted((tree / "sys").glob("block/nvme*/inflight"))
        ]
        self.ticks = 0

    def _add(self, path: Path, step: int) -> None:
        fd = os.open(path, os.O_RDWR)
        self._counters.append((fd, int(os.pread(fd, 64, 0)), step))

    @property
    def files(self) -> int:
        return len(self._counters) + len(self._freqs) + len(self._inflight)

    def tick(self) -> None:
        self.ticks += 1
        t = self.ticks
        now = time.time_ns()
        counters = self._counters
        for i, (fd, value, step) in enumerate(counters):
            if step:
                value += step + (i * 7 + t) % 13
                counters[i] = (fd, value, step)
                os.pwrite(fd, b"%d\n" % value, 0)
                os.utime(fd, ns=(FUTURE_NS, now))
        for i, (fd, base) in enumerate(self._freqs):
            # Within 1 % of the file's first value, different each time.
            text = b"%d\n" % (base - base // 100 + (i * 31 + t * 17) % (base // 50 + 1))
            os.pwrite(fd, text, 0)
            os.ftruncate(fd, len(text))
            os.utime(fd, ns=(FUTURE_NS, now))
        for i, fd in enumerate(self._inflight):
            os.pwrite(fd, b"%8u %8u\n" % ((i + t) % 7, (i * 3 + t) % 5), 0)
            os.utime(fd, ns=(FUTURE_NS, now))

    def close(self) -> None:
        for fd, _, _ in self._counters:
            os.close(fd)
        for fd, _ in self._freqs:
            os.close(fd)
        for fd in self._inflight:
            os.close(fd)
        self._counters, self._freqs, self._inflight = [], [], []
