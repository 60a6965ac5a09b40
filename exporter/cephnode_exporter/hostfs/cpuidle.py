"""CPU idle states (C-states) from sysfs.

ABI: Documentation/ABI/testing/sysfs-devices-system-cpu and drivers/cpuidle/sysfs.c.
``/sys/devices/system/cpu/cpuidle/current_{driver,governor}`` name the driver and
governor; ``cpuN/cpuidle/stateK/`` holds one state of one CPU:

- ``name``, ``desc``: static strings ("C2", "ACPI IOPORT 0x814");
- ``latency`` (exit latency) and ``residency`` (target residency): static, microseconds;
- ``time`` (microseconds), ``usage`` (entries), ``above``/``below`` (entries whose idle
  period was too short/long for the state), ``rejected`` (entries refused by the
  driver): cumulative counters; ``above``/``below`` appeared in 5.6, ``rejected`` in 5.10.
  The kernel keeps them as u64 and prints them with %llu (drivers/cpuidle/sysfs.c), so a
  negative value, one beyond 2^64 or one lower than at the previous scrape (without a
  driver change or a hotplug, which rebuild the device and zero them) is not a value the
  kernel wrote: it is counted as a read error and left out;
- ``disable``: 1 when the state is disabled for this CPU (by the admin, or by default
  when ``default_status`` is "disabled", see drivers/cpuidle/driver.c).
"""

from __future__ import annotations

import errno
import operator
import os
import re
from dataclasses import dataclass, field, replace
from typing import cast

from cephnode_exporter.hostfs import (
    AttrFiles,
    HostFS,
    ParseError,
    ReadErrors,
    fd_budget,
    list_dir,
    read_int,
    read_optional_text,
    read_text,
)
from cephnode_exporter.hostfs.batch import pread_counters
from cephnode_exporter.hostfs.cpu import cpu_dir, online_cpus

CPUIDLE_DIR = ("devices", "system", "cpu", "cpuidle")
# drivers/cpuidle/sysfs.c names a CPU's states "state%d", 0 to the driver's state_count
# - 1: ASCII, no leading zero, no gap ("state02" is not a second name of state2).
_STATE_RE = re.compile(r"state(0|[1-9][0-9]{0,8})")


@dataclass(frozen=True)
class IdleStateInfo:
    """Static attributes of one idle state of one CPU, and the files read every scrape.

    ``files`` lists (sample attribute, path, required); an optional file found absent
    (an older kernel) is dropped from it so it is not looked up again on every scrape.
    """

    index: int
    name: str
    desc: str
    exit_latency_us: int
    target_residency_us: int
    files: tuple[tuple[str, str, bool], ...] = ()


# The counters' type in the kernel (struct cpuidle_state_usage: u64 and unsigned long long).
COUNTER_MAX = 2**64 - 1

# (IdleStateSample attribute, file, required): time and usage exist on every kernel with
# cpuidle; missing means the CPU went offline under us.
_SAMPLE_FILES = (
    ("time_us", "time", True),
    ("usage", "usage", True),
    ("above", "above", False),
    ("below", "below", False),
    ("rejected", "rejected", False),
    ("disabled", "disable", False),
)


@dataclass
class IdleStateSample:
    """One state of one CPU at one scrape. A counter is None when unreadable or absent."""

    info: IdleStateInfo
    time_us: int | None = None
    usage: int | None = None
    above: int | None = None
    below: int | None = None
    rejected: int | None = None
    disabled: bool | None = None


@dataclass
class CPUIdle:
    """The node's idle-state picture at one scrape.

    ``driver`` is None when the kernel has no cpuidle framework (CONFIG_CPU_IDLE=n) and
    "none" when no driver registered; ``cpus`` then is empty. ``unread`` names the online
    CPUs whose idle states could not all be read this time (CPU -> the first error): a
    judgement over ``cpus`` alone would miss what those CPUs hide. ``hidden`` says why
    the cpuidle directory, missing to the exporter, is hidden rather than absent
    (:func:`cpuidle_hidden`): ``driver`` None then does not mean no cpuidle.
    """

    driver: str | None
    governor: str | None
    cpus: dict[int, list[IdleStateSample]] = field(default_factory=dict)
    unread: dict[int, str] = field(default_factory=dict)
    errors: ReadErrors = field(default_factory=ReadErrors)
    hidden: str | None = None


# Per CPU, its states and where each starts in the batched read (CPUIdleReader._plan).
_Plan = list[tuple[int, list[tuple[IdleStateInfo, int]]]]


class CPUIdleReader:
    """Reads cpuidle, caching the static state attributes between scrapes.

    The cache is keyed by the driver and the online CPU set: a driver reload or a CPU
    hotplug rebuilds it. A CPU whose static files failed is not cached, so it is retried
    on the next scrape instead of staying missing.
    """

    # Share of the descriptor limit the kept-open counter files may use.
    FD_SHARE = 0.5

    def __init__(self, fs: HostFS) -> None:
        self._fs = fs
        self._key: tuple[str, tuple[int, ...]] | None = None
        self._static: dict[int, list[IdleStateInfo]] = {}
        # CPU -> what is wrong with the layout of its cached states (a name the kernel
        # never writes, a duplicate, a missing state): found when the states are read,
        # reported on every scrape as unread and as a read error.
        self._bad: dict[int, str] = {}
        # CPUs cached so far, and that count when the CPUs' state counts were last
        # compared (_compare_counts).
        self._cached = 0
        self._compared = 0
        # (CPU, state index) -> counter -> the value read at the previous scrape.
        self._last: dict[tuple[int, int], dict[str, int]] = {}
        self._files = AttrFiles(fd_budget(self.FD_SHARE))
        # (CPU, state index) -> the state's kept-open descriptors, for _read_fast.
        self._fast: dict[tuple[int, int], _FastState] = {}
        # Every fast state's descriptors in one list, read with one batched call; None
        # after ``_fast`` changed (each entry's ``start`` is its place in the list).
        self._flat: list[int] | None = None
        # The whole batch at once (_read_whole): per CPU its states and where each
        # starts in the batch, built with ``_flat`` when every state of every CPU is
        # fast with all six files; and the batch of the last scrape read that way.
        self._plan: _Plan | None = None
        self._whole_last: list[int] | None = None

    def close(self) -> None:
        self._files.close_all()
        self._static = {}
        self._bad = {}
        self._cached = self._compared = 0
        self._last = {}
        self._fast = {}
        self._flat = None
        self._plan = None
        self._whole_last = None
        self._key = None

    def read(self) -> CPUIdle:
        fs = self._fs
        # Read first: a sysfs without CPUs is a wrong --path.sysfs, not a node without cpuidle.
        result_errors = ReadErrors()
        cpus = online_cpus(fs, result_errors)
        driver = read_optional_text(fs.sys(*CPUIDLE_DIR, "current_driver"))
        governor = read_optional_text(fs.sys(*CPUIDLE_DIR, "current_governor"))
        if governor is None:
            governor = read_optional_text(fs.sys(*CPUIDLE_DIR, "current_governor_ro"))
        result = CPUIdle(driver=driver, governor=governor, errors=result_errors)
        if driver is None:
            result.hidden = cpuidle_hidden(fs, cpus[0])
        if driver is None or driver == "none":
            return result
        key = (driver, tuple(cpus))
        if key != self._key:
            # A new driver or a hotplug registers the CPUs' cpuidle devices afresh, which
            # zeroes their counters (__cpuidle_device_init): no fall to compare against.
            self._key = key
            self._static = {}
            self._bad = {}
            self._cached = self._compared = 0
            self._last = {}
            self._fast = {}
            self._flat = None
            self._plan = None
            self._whole_last = None
            self._files.close_all()
        fast = self._fast
        values = pread_counters(self._batch(cpus)) if fast else []
        if self._read_whole(cpus, values, result):
            if self._bad:
                self._report_bad(result)
            return result
        self._hand_back()
        for cpu in cpus:
            states = self._static.get(cpu)
            if states is None:
                states = self._read_static(cpu, result, driver)
                if states is None:
                    continue
            samples = []
            for i, info in enumerate(states):
                state_key = (cpu, info.index)
                entry = fast.get(state_key)
                sample = None if entry is None else _read_fast(entry, info, values)
                if sample is None:
                    sample = self._read_slow(state_key, states, i, entry, result.errors)
                samples.append(sample)
            # A CPU that went offline between reading "online" and its files is dropped
            # whole rather than exported half-read.
            if all(s.disabled is None and s.time_us is None for s in samples):
                self._static.pop(cpu, None)
                for state in states:
                    self._last.pop((cpu, state.index), None)
                    self._fast.pop((cpu, state.index), None)
                self._flat = None
                self._files.close_under(cpu_dir(fs, cpu, ""))
                continue
            result.cpus[cpu] = samples
        if self._cached != self._compared:
            self._compare_counts()
        if self._bad:
            self._report_bad(result)
        return result

    def _report_bad(self, result: CPUIdle) -> None:
        """The cached layout problems, on every scrape: the CPUs' states are exported,
        but a check over them cannot rely on them (checks/cpu.py: unknown unless a
        deep state is seen enabled)."""
        for cpu, reason in self._bad.items():
            if cpu in result.cpus:
                result.unread.setdefault(cpu, reason)
                result.errors.items.append(reason)

    def _compare_counts(self) -> None:
        """Once per change of the cached CPUs: with one driver every CPU has its
        state_count states (drivers/cpuidle/sysfs.c); a CPU with fewer lost a state
        directory. Per-CPU drivers (CONFIG_CPU_IDLE_MULTIPLE_DRIVERS) may differ: their
        CPUs have a ``cpuidle/driver`` directory and are not compared."""
        self._compared = self._cached
        if not self._static:
            return
        most = max(map(len, self._static.values()))
        for cpu, states in self._static.items():
            if len(states) < most and cpu not in self._bad:
                base = cpu_dir(self._fs, cpu, "cpuidle")
                if not os.path.isdir(f"{base}/driver"):
                    self._bad[cpu] = f"{base}: {len(states)} idle states, {most} on other CPUs"

    def _batch(self, cpus: list[int]) -> list[int]:
        """The fast states' descriptors in one list, each entry's ``start`` set; the
        whole read's plan for ``cpus`` (the online set of the reader's key) with it."""
        if self._flat is None:
            self._hand_back()  # while each entry's ``start`` is the old one
            flat: list[int] = []
            for entry in self._fast.values():
                entry.start = len(flat)
                flat.extend(entry.fds)
            self._flat = flat
            self._plan = self._make_plan(cpus)
        return self._flat

    def _make_plan(self, cpus: list[int]) -> _Plan | None:
        """Per CPU in ``cpus`` order, its states and their places in the batch; None
        unless every CPU is cached and every state of it fast with all six files."""
        plan = []
        for cpu in cpus:
            states = self._static.get(cpu)
            if states is None:
                return None
            places = []
            for info in states:
                entry = self._fast.get((cpu, info.index))
                if entry is None or entry.attrs != _ALL_ATTRS:
                    return None
                places.append((info, entry.start))
            plan.append((cpu, places))
        return plan

    def _read_whole(self, cpus: list[int], values: list[int | None], result: CPUIdle) -> bool:
        """Every state of every CPU from one batch, checked as a whole: each value read,
        none lower than at the last scrape, every ``disable`` 0 or 1. The usual scrape of
        a node; anything else (a first read, a CPU not cached, a fault, a state enabled
        again, whose flag falls) is False, and the state-by-state read takes over from
        the values of this last scrape, and names what is wrong."""
        plan = self._plan
        last = self._whole_last
        if plan is None or None in values:
            return False
        counts = cast("list[int]", values)  # no None: checked above
        if last is not None:
            # The disable flags too: one enabled again (1 to 0) takes the slow way.
            grew = all(map(operator.le, last, counts))
        else:
            grew = all(
                e.previous is not None
                and all(map(operator.le, e.previous, counts[e.start : e.start + 5]))
                for e in self._fast.values()
            )
        if not grew or not _FLAGS.issuperset(counts[5::6]):
            return False  # _hand_back: the state-by-state read compares with ``last``
        out = result.cpus
        for cpu, places in plan:
            out[cpu] = [
                IdleStateSample(
                    info,
                    counts[i],
                    counts[i + 1],
                    counts[i + 2],
                    counts[i + 3],
                    counts[i + 4],
                    counts[i + 5] == 1,
                )
                for info, i in places
            ]
        self._whole_last = counts
        return True

    def _hand_back(self) -> None:
        """Give each fast state the counters of the last whole read, for the
        state-by-state read to compare with."""
        last = self._whole_last
        if last is None:
            return
        self._whole_last = None
        for entry in self._fast.values():
            start = entry.start
            if start + entry.counters <= len(last):
                entry.previous = tuple(last[start : start + entry.counters])

    def _read_slow(
        self,
        key: tuple[int, int],
        states: list[IdleStateInfo],
        i: int,
        entry: _FastState | None,
        errors: ReadErrors,
    ) -> IdleStateSample:
        """One state read file by file (the first read, or one the fast path refused),
        with every error named; a state read whole and clean gets a fast entry."""
        last = self._last.setdefault(key, {})
        if entry is not None:
            # The fast path kept the previous values in its entry: hand them back.
            del self._fast[key]
            self._flat = None
            if entry.previous is not None:
                last.update(zip(entry.attrs, entry.previous, strict=False))  # no disable
        before = len(errors)
        sample = _read_sample(self._files, states, i, last, errors)
        if len(errors) == before:
            info = states[i]
            fds = [self._files.descriptor(path) for _, path, _ in info.files]
            if None not in fds:
                attrs = tuple(attr for attr, _, _ in info.files)
                counters = len(attrs) - 1 if attrs and attrs[-1] == "disabled" else len(attrs)
                self._fast[key] = _FastState(
                    tuple(fd for fd in fds if fd is not None),
                    attrs,
                    counters,
                    tuple(last[a] for a in attrs[:counters]),
                )
                self._flat = None
        return sample

    def _read_static(self, cpu: int, result: CPUIdle, driver: str) -> list[IdleStateInfo] | None:
        """The CPU's idle states; a state whose static files fail is left out, the CPU
        is noted in ``result.unread`` and not cached, so the next scrape retries it.

        An online CPU without states while a driver is registered is unread too: the
        driver registers a device for each CPU it covers (cpuidle_register()), so its
        states were lost, not absent. Entries the kernel never writes (see _STATE_RE), a
        gap in the indices and a state name seen twice are layout problems (``_bad``):
        such a duplicate is left out, never counted twice."""
        errors = result.errors
        base = cpu_dir(self._fs, cpu, "cpuidle")
        self._bad.pop(cpu, None)
        problems: list[str] = []
        indexed: list[tuple[int, str]] = []
        for n in list_dir(base):
            if _STATE_RE.fullmatch(n):
                indexed.append((int(n[5:]), n))
            elif n.startswith("state"):
                problems.append(f"{base}/{n}: not a state directory name the kernel writes")
        indexed.sort()
        if indexed and indexed[-1][0] != len(indexed) - 1:
            gap = next(i for i, (index, _) in enumerate(indexed) if index != i)
            problems.append(f"{base}/state{gap}: missing (the states are numbered from 0)")
        if not indexed:
            exc = ParseError(base, f"no idle states, though cpuidle driver {driver} is registered")
            errors.add(exc)
            result.unread[cpu] = str(exc)
            return None
        states: list[IdleStateInfo] = []
        seen: set[str] = set()
        complete = True
        for index, entry in indexed:
            path = f"{base}/{entry}"
            try:
                name = _nonempty(f"{path}/name", read_text(f"{path}/name"))
                if name in seen:
                    problems.append(f"{path}: state name {name!r} seen twice, left out")
                    continue
                seen.add(name)
                states.append(
                    IdleStateInfo(
                        index=index,
                        name=name,
                        desc=read_optional_text(f"{path}/desc") or "",
                        exit_latency_us=_nonnegative(
                            f"{path}/latency", read_int(f"{path}/latency")
                        ),
                        target_residency_us=_nonnegative(
                            f"{path}/residency", read_int(f"{path}/residency")
                        ),
                        files=tuple((a, f"{path}/{f}", r) for a, f, r in _SAMPLE_FILES),
                    )
                )
            except (OSError, ParseError) as exc:
                errors.add(exc)
                if complete:
                    result.unread[cpu] = str(exc)
                complete = False
        if not states:
            return None
        if complete:
            if problems:
                self._bad[cpu] = problems[0]
            self._static[cpu] = states
            self._cached += 1
            self._flat = None  # a new plan: this CPU may now be read whole
        else:
            for problem in problems:  # not cached: reported with this scrape's errors
                errors.items.append(problem)
        return states


def cpuidle_hidden(fs: HostFS, cpu: int) -> str | None:
    """Why ``devices/system/cpu/cpuidle``, missing to the exporter, is hidden rather than
    absent: a mount over it (hostfs/mounts.py), or a CPU's own ``cpuidle`` directory,
    which exists only while a driver is registered for it (cpuidle_add_sysfs() from
    cpuidle_register_device(), drivers/cpuidle/cpuidle.c), whereas the kernel creates
    the shared directory at boot whenever it has cpuidle (cpuidle_add_interface()).
    None when cpuidle is truly absent (CONFIG_CPU_IDLE=n: a VM, ``cpuidle.off=1``).
    Asked only when the directory is missing: one stat beside the mount table."""
    why = fs.sys_hidden(*CPUIDLE_DIR)
    if why is not None:
        return why
    own = cpu_dir(fs, cpu, "cpuidle")
    if os.path.isdir(own):
        return (
            f"{fs.sys(*CPUIDLE_DIR)} is hidden: missing, but {own} exists "
            "(a mask or a partial sysfs, not a kernel without cpuidle)"
        )
    return None


# The sample attributes in IdleStateSample's field order, as _SAMPLE_FILES lists them:
# a state with all of them is built with positional arguments.
_ALL_ATTRS = tuple(attr for attr, _, _ in _SAMPLE_FILES)
# What a ``disable`` file may hold.
_FLAGS = frozenset({0, 1})


class _FastState:
    """A state whose files are all kept open and read cleanly last time: its
    descriptors in file order, the attribute each holds, how many of them are counters
    (all but a trailing ``disabled``), the counters' values at the previous scrape, and
    where its descriptors start in the reader's batched list."""

    __slots__ = ("attrs", "counters", "fds", "previous", "start")

    def __init__(
        self,
        fds: tuple[int, ...],
        attrs: tuple[str, ...],
        counters: int,
        previous: tuple[int, ...] | None,
    ) -> None:
        self.fds = fds
        self.attrs = attrs
        self.counters = counters
        self.previous = previous
        self.start = 0


def _read_fast(
    entry: _FastState, info: IdleStateInfo, batch: list[int | None]
) -> IdleStateSample | None:
    """One state's counters from the scrape's batched read of every fast state (1,728
    reads on a 96-CPU node with three states, one call: batch.py). None when anything is
    not as the last clean read (a failed read, a value that is no plain integer, out of
    range or lower than before, a ``disable`` that is not 0 or 1): the caller then reads
    the state file by file, which names the error.
    """
    start = entry.start
    got = batch[start : start + len(entry.fds)]
    if None in got or len(got) != len(entry.fds):
        return None
    values = cast("list[int]", got)  # no None: checked above
    n = entry.counters
    # Within 0 and COUNTER_MAX: pread_counters gives None for anything else.
    counters = values[:n] if n < len(values) else values
    previous = entry.previous
    if previous is not None and not all(map(operator.le, previous, counters)):
        return None
    disabled: bool | None = None
    if n < len(values):
        flag = values[n]
        if flag != 0 and flag != 1:
            return None
        disabled = flag == 1
    entry.previous = tuple(counters)
    if entry.attrs == _ALL_ATTRS:
        time_us, usage, above, below, rejected = counters
        return IdleStateSample(info, time_us, usage, above, below, rejected, disabled)
    kwargs = dict(zip(entry.attrs, counters, strict=False))  # disable apart
    return IdleStateSample(info=info, disabled=disabled, **kwargs)


def _read_sample(
    files: AttrFiles,
    states: list[IdleStateInfo],
    i: int,
    last: dict[str, int],
    errors: ReadErrors,
) -> IdleStateSample:
    """Read one state's counters: the collector's hot loop, one pread per file.

    ``last`` holds this state's counters of the previous scrape and is updated; a counter
    below it, negative or beyond u64 is an error for this scrape and left out.
    """
    info = states[i]
    values: dict[str, int] = {}
    absent: list[str] = []
    vanished = False
    for attr, path, required in info.files:
        try:
            value = files.read_int(path)
        except FileNotFoundError:
            if required:
                vanished = True
                errors.add(FileNotFoundError(errno.ENOENT, "vanished", path))
            else:
                absent.append(attr)
            continue
        except (OSError, ParseError) as exc:
            errors.add(exc)
            continue
        if attr != "disabled":
            if not 0 <= value <= COUNTER_MAX:
                errors.add(ParseError(path, f"counter out of the u64 range: {value}"))
                continue
            previous = last.get(attr)
            last[attr] = value
            if previous is not None and value < previous:
                errors.add(ParseError(path, f"counter fell from {previous} to {value}"))
                continue
        values[attr] = value
    if absent and not vanished:
        states[i] = replace(info, files=tuple(f for f in info.files if f[0] not in absent))
    disabled = values.pop("disabled", None)
    if disabled not in (None, 0, 1):
        path = next(p for attr, p, _ in info.files if attr == "disabled")
        errors.add(ParseError(path, f"expected 0 or 1, got {disabled}"))
        disabled = None
    return IdleStateSample(
        info=info, disabled=None if disabled is None else disabled == 1, **values
    )


def _nonempty(path: str, text: str) -> str:
    if not text:
        raise ParseError(path, "empty")
    return text


def _nonnegative(path: str, value: int) -> int:
    if value < 0:
        raise ParseError(path, f"negative: {value}")
    return value
