"""Pure parsers for the OSD admin socket replies the ``osd`` collector uses.

Each function takes the decoded JSON of one reply (``perf histogram dump``, ``perf dump``,
``dump_ops_in_flight``, ``config show``, ``version``) and returns typed facts in base units
(seconds, bytes), or raises :class:`PerfParseError` when the reply does not have the shape
Ceph gives it (Pacific 16 to Tentacle 20; counter names by release in ceph/counters.py).
Missing optional counters are ``None``, never zero: a
memstore OSD has no ``bluestore`` or ``rocksdb`` section, and an absent series is honest
where a zero would be a lie. No I/O and no Prometheus code here (docs/ceph.md).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cephnode_exporter.ceph import counters

# ----------------------------------------------------------------------------- histograms

# The latency axis of the OSD op histograms is labelled "Latency (usec)" but holds
# NANOSECONDS: PrimaryLogPG::log_op_stats records latency.to_nsec() (ceph/ceph
# src/osd/PrimaryLogPG.cc, `hinc(l_osd_op_w_lat_inb_hist, latency.to_nsec(), inb)`), and
# the axis is declared with "values are in nanoseconds ... Quantization unit is 100usec"
# (src/osd/osd_perf_counters.cc). tests/test_osd_cluster.py checks it against perf dump.
NS_PER_S = 1e9

# op label -> the histogram of perf histogram dump's `osd` section. Each op is counted in
# one 2-D histogram (latency x request size); readwrite ops are counted in both
# op_rw_latency_in_bytes_histogram and ..._out_bytes_histogram, with the same latency,
# so either gives the latency distribution (log_op_stats).
OP_HISTOGRAMS: Mapping[str, str] = {
    "read": "op_r_latency_out_bytes_histogram",
    "write": "op_w_latency_in_bytes_histogram",
    "readwrite": "op_rw_latency_in_bytes_histogram",
}
# ... and the perf dump time average whose `sum` is that histogram's _sum.
OP_LATENCY_AVGS: Mapping[str, str] = {
    "read": "op_r_latency",
    "write": "op_w_latency",
    "readwrite": "op_rw_latency",
}

# Bucket upper edges kept in the exposition, in seconds. The OSD's axis has 30 finite
# edges, 100 us * 2^k for k = 0..29 (up to 53687 s); exporting all of them costs 33
# series per op. Edges above 6.55 s (k = 16) are dropped: a coarser cumulative
# histogram is still exact at the edges it keeps, ops slower than 6.5 s are counted in
# +Inf, and such ops are reported individually by the in-flight and slow-op metrics.
# The 13.1 s edge went to pay for the three p99 gauges (collectors/osd_latency.py), so they
# added no series (a tuned OSD: 117, docs/metrics.md); a p99 above 6.5 s
# reads as 6.5536 either way.
MAX_EDGE_SECONDS = 6.6


class PerfParseError(ValueError):
    """A reply decoded as JSON but does not have the structure Ceph gives it."""


@dataclass(frozen=True)
class LatencyHistogram:
    """One op type's latency distribution, the request-size axis collapsed.

    ``buckets`` are (upper edge in seconds, cumulative count), ascending, ending with
    (+inf, total); ``count`` is the total of the OSD's matrix.
    """

    buckets: tuple[tuple[float, int], ...]
    count: int


# Ceph's perf counters are uint64_t (src/common/perf_counters.h); JSON integers are not
# bounded, and one above 1.8e308 cannot even become a float. A larger value is no
# counter, and refusing it here keeps one OSD's reply from failing the collector.
UINT64_MAX = 2**64 - 1


def _int(value: Any, what: str) -> int:
    # type() first: JSON gives exactly int, and bool (an int subclass) is refused.
    if type(value) is not int or not 0 <= value <= UINT64_MAX:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= UINT64_MAX:
            return int(value)
        raise PerfParseError(
            f"{what}: expected a non-negative integer below 2^64, got {_short(value)}"
        )
    return value


def _num(value: Any, what: str) -> float:
    kind = type(value)
    if kind is float and math.isfinite(value):
        return float(value)
    if kind is int and -UINT64_MAX <= value <= UINT64_MAX:
        return float(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not -UINT64_MAX <= value <= UINT64_MAX
        or not math.isfinite(value)
    ):
        raise PerfParseError(f"{what}: expected a number, got {_short(value)}")
    return float(value)


def _short(value: Any) -> str:
    """A value for an error message, cut short: a hostile reply's 4,000-digit number or
    long string must not become a 4,000-character log line."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 256 else "<huge>"
    return text if len(text) <= 80 else text[:77] + "..."


# The one type a histogram count may have (JSON integers; bool is a subclass, refused).
_INT_ONLY = frozenset({int})


# Axes already checked, with their edges, by (min, quant_size, buckets, rows): every OSD
# of a node prints the same axes in every dump (src/osd/osd_perf_counters.cc declares
# them once), so a scrape compares each axis's ranges with the ones checked before (one
# C-level comparison) instead of checking 32 ranges again. Bounded like the axes a node
# can have: a daemon printing ever new axes empties it.
_EDGES_SEEN: dict[tuple[int, int, int, int], tuple[Any, tuple[float, ...]]] = {}
_EDGES_SEEN_MAX = 16


def _latency_edges(axis: Any, rows: int, what: str) -> tuple[float, ...]:
    """Upper edge in seconds of every latency bucket (+inf for the overflow).

    Ceph's log2 axis (src/common/perf_histogram.h, PerfHistogramCommon::get_bucket_for_axis):
    bucket 0 is the underflow (< min), bucket 1 is [min, min + quant), bucket i >= 2 is
    [min + quant * 2^(i-2), min + quant * 2^(i-1)), the last is the overflow. ``ranges``
    spells these out with an inclusive ``max`` (``{"min": 100000, "max": 199999}``).
    The edges are computed from min/quant_size/buckets and cross-checked with ranges.
    """
    if not isinstance(axis, dict):
        raise PerfParseError(f"{what}: latency axis is not an object")
    lo, quant, n = axis.get("min"), axis.get("quant_size"), axis.get("buckets")
    key = None
    # type() is: JSON gives exactly int; a bool (equal to 0 or 1) takes the full check.
    if type(lo) is int and type(quant) is int and type(n) is int:
        key = (lo, quant, n, rows)
        seen = _EDGES_SEEN.get(key)
        if seen is not None and axis.get("scale_type") == "log2" and axis.get("ranges") == seen[0]:
            return seen[1]
    edges = _check_axis(axis, rows, what)
    if key is not None:
        if len(_EDGES_SEEN) >= _EDGES_SEEN_MAX:
            _EDGES_SEEN.clear()
        _EDGES_SEEN[key] = (axis.get("ranges"), edges)
    return edges


def _check_axis(axis: dict[str, Any], rows: int, what: str) -> tuple[float, ...]:
    """:func:`_latency_edges` for an axis not seen before: every field checked."""
    if axis.get("scale_type") != "log2":
        raise PerfParseError(f"{what}: latency axis scale {axis.get('scale_type')!r}, not log2")
    lo = _int(axis.get("min"), f"{what}: axis min")
    quant = _int(axis.get("quant_size"), f"{what}: axis quant_size")
    n = _int(axis.get("buckets"), f"{what}: axis buckets")
    if quant == 0 or n < 3 or n > 64:
        raise PerfParseError(f"{what}: implausible axis (quant_size {quant}, {n} buckets)")
    if n != rows:
        raise PerfParseError(f"{what}: axis has {n} buckets, values has {rows} rows")
    # Exclusive upper edge of each bucket, in nanoseconds.
    edges_ns = [lo, lo + quant] + [lo + quant * 2 ** (i - 1) for i in range(2, n - 1)]
    ranges = axis.get("ranges")
    if ranges is not None:
        if not isinstance(ranges, list) or len(ranges) != n:
            raise PerfParseError(f"{what}: axis ranges do not match its {n} buckets")
        for i, edge in enumerate(edges_ns):
            r = ranges[i]
            if not isinstance(r, dict) or r.get("max") != edge - 1:
                raise PerfParseError(f"{what}: range {i} is {_short(r)}, expected max {edge - 1}")
    return (*(e / NS_PER_S for e in edges_ns), math.inf)


# The one type a row may have.
_LIST_ONLY = frozenset({list})


def parse_latency_histogram(hist: Any, what: str = "histogram") -> LatencyHistogram:
    """Collapse a 2-D OSD op histogram (``{"axes": [latency, size], "values": [[..]]}``)
    into a cumulative latency histogram in seconds."""
    if not isinstance(hist, dict):
        raise PerfParseError(f"{what}: not an object")
    axes, values = hist.get("axes"), hist.get("values")
    if not isinstance(axes, list) or len(axes) != 2:
        raise PerfParseError(f"{what}: expected two axes (latency, size)")
    if not isinstance(values, list) or not values:
        raise PerfParseError(f"{what}: no values matrix")
    edges = _latency_edges(axes[0], len(values), what)
    # Fast path first: a scrape parses three 32 x 32 matrices per OSD. The whole matrix
    # is checked in three C-level passes (rows are lists, values non-negative JSON
    # integers), then summed row by row in C; anything else takes the row-by-row check,
    # which names the row and the value.
    if _LIST_ONLY.issuperset(map(type, values)) and _INT_ONLY.issuperset(
        map(type, itertools.chain.from_iterable(values))
    ):
        # min and max of an empty matrix (rows of no value) are those of (0,).
        if (
            min(itertools.chain((0,), *values)) >= 0
            and max(itertools.chain((0,), *values)) <= UINT64_MAX
        ):
            per_bucket = list(map(sum, values))
        else:
            per_bucket = _checked_rows(values, what)
    else:
        per_bucket = _checked_rows(values, what)
    buckets: list[tuple[float, int]] = []
    running = 0
    for edge, n in zip(edges, per_bucket, strict=True):
        running += n
        # The underflow bucket (edge = min = 0 s) is merged into the first kept edge.
        if edge == math.inf or (0 < edge <= MAX_EDGE_SECONDS):
            buckets.append((edge, running))
    return LatencyHistogram(tuple(buckets), running)


def _checked_rows(values: list[Any], what: str) -> list[int]:
    """Each row's sum, every value checked: raises on the first row that is not a list
    of non-negative integers, naming it."""
    per_bucket = []
    for i, row in enumerate(values):
        if not isinstance(row, list):
            raise PerfParseError(f"{what}: values row {i} is not a list")
        for v in row:
            _int(v, f"{what}: values[{i}]")
        per_bucket.append(sum(row))
    return per_bucket


def parse_op_histograms(dump: Any) -> dict[str, LatencyHistogram]:
    """The read, write and readwrite latency histograms of a ``perf histogram dump``.

    A missing histogram raises: every OSD since Luminous has all three.
    """
    osd = _section(dump, "osd", "perf histogram dump")
    out = {}
    for op, name in OP_HISTOGRAMS.items():
        if name not in osd:
            raise PerfParseError(f"perf histogram dump: osd.{name} missing")
        out[op] = parse_latency_histogram(osd[name], name)
    return out


def _section(dump: Any, name: str, what: str) -> dict[str, Any]:
    if not isinstance(dump, dict):
        raise PerfParseError(f"{what}: not an object")
    section = dump.get(name)
    if not isinstance(section, dict):
        raise PerfParseError(f"{what}: no {name!r} section")
    return section


# ----------------------------------------------------------------------------- perf dump


@dataclass(frozen=True)
class TimeAvg:
    """A perf dump time average: ``avgcount`` events that took ``sum`` seconds in all."""

    count: int
    sum: float


# A time average (PERFCOUNTER_TIME | PERFCOUNTER_LONGRUNAVG) keeps its sum as uint64
# nanoseconds and prints it as seconds, "%" PRId64 ".%09" PRId64 of sum / 1e9 and
# sum % 1e9 (ceph/ceph src/common/perf_counters.cc, dump_formatted_generic): between 0
# and 2^64 ns. A sum outside is no Ceph counter; a negative one would make the exported
# histogram _sum and the latency means go backwards.
MAX_TIME_SUM_SECONDS = UINT64_MAX / NS_PER_S


def _time_sum(value: Any, what: str) -> float:
    """A time average's sum in seconds: a finite number from 0 to MAX_TIME_SUM_SECONDS."""
    seconds = _num(value, what)  # refuses non-numbers, bool, NaN and infinities
    if not 0 <= seconds <= MAX_TIME_SUM_SECONDS:
        raise PerfParseError(
            f"{what}: expected seconds from 0 to {MAX_TIME_SUM_SECONDS:.0f}, got {_short(value)}"
        )
    return seconds


def _time_avg(section: Mapping[str, Any], name: str, what: str) -> TimeAvg | None:
    value = section.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PerfParseError(f"{what}.{name}: expected {{avgcount, sum}}, got {_short(value)}")
    return TimeAvg(
        _int(value.get("avgcount"), f"{what}.{name}.avgcount"),
        _time_sum(value.get("sum"), f"{what}.{name}.sum"),
    )


# (section, counter) keys of the time averages and of the plain integers (counters and
# gauges) the collector exports: the stable keys of ceph/counters.py, whose table says
# what each is called in the daemon's release.
TIME_AVGS: tuple[tuple[str, str], ...] = tuple(
    (c.section, c.key.split(".", 1)[1]) for c in counters.COUNTERS if c.kind == counters.AVG
)
INTEGERS: tuple[tuple[str, str], ...] = tuple(
    (c.section, c.key.split(".", 1)[1]) for c in counters.COUNTERS if c.kind == counters.INT
)


@dataclass(frozen=True)
class PerfCounters:
    """The counters of a ``perf dump`` the collector exports, keyed by their stable
    ``section.counter`` key (ceph/counters.py), whatever the release calls them.

    A counter the OSD lacks (a memstore OSD has no bluestore or rocksdb section) is
    absent from the dicts; ``sections`` lists the sections present; ``missing`` the keys
    the table expects for the OSD's release and object store that its dump lacks.
    ``mclock`` holds the mClock scheduler's queue lengths by scheduler class, summed over
    the op shards (counters.MCLOCK_QUEUES); empty when the OSD has no shard queue section
    (Pacific, or another op queue).
    """

    avgs: dict[str, TimeAvg] = field(default_factory=dict)
    integers: dict[str, int] = field(default_factory=dict)
    sections: frozenset[str] = frozenset()
    missing: tuple[str, ...] = ()
    mclock: dict[str, int] = field(default_factory=dict)


def parse_perf_dump(
    dump: Any,
    release: int | None = None,
    objectstore: str | None = None,
    op_queue: str | None = None,
) -> PerfCounters:
    """Select the exported counters from a ``perf dump`` (the ``osd`` section is required).

    ``release`` is the daemon's Ceph major version; each counter is read under the name
    that release gives it (None, an unknown release: under whichever of its names the
    dump has, newest first). With ``objectstore`` (``config show``'s osd_objectstore)
    the counters the table expects for that release and store but the dump lacks are
    listed in ``missing``; without it nothing is judged. With ``op_queue`` (config show's
    osd_op_queue) an mClock OSD of Reef or later without any shard queue section is
    reported missing under counters.MCLOCK_KEY.
    """
    _section(dump, "osd", "perf dump")
    avgs: dict[str, TimeAvg] = {}
    integers: dict[str, int] = {}
    missing: list[str] = []
    for counter, section, candidates in _counter_plan(release):
        values = dump.get(section)
        found = [n for n in candidates if isinstance(values, dict) and n in values]
        if not found:
            if objectstore is not None and counter.expected(release, objectstore):
                missing.append(counter.key)
            continue
        assert isinstance(values, dict)
        name = found[0]
        if counter.kind == counters.AVG:
            avg = _time_avg(values, name, section)
            if avg is not None:
                avgs[counter.key] = avg
        else:
            integers[counter.key] = _int(values[name], f"{section}.{name}")
    mclock = _mclock_queues(dump)
    if not mclock and op_queue is not None and counters.mclock_expected(release, op_queue):
        missing.append(counters.MCLOCK_KEY)
    return PerfCounters(
        avgs,
        integers,
        frozenset(k for k, v in dump.items() if isinstance(v, dict)),
        tuple(missing),
        mclock,
    )


@functools.lru_cache(maxsize=16)
def _counter_plan(
    release: int | None,
) -> tuple[tuple[counters.Counter, str, tuple[str, ...]], ...]:
    """Each counter of the table with its section and the names to look for in a
    daemon of ``release``: the same for every OSD of a release and every scrape, so
    worked out once (a node runs one or two releases; the table is fixed)."""
    return tuple((c, c.section, c.candidates(release)) for c in counters.COUNTERS)


def _mclock_queues(dump: Mapping[str, Any]) -> dict[str, int]:
    """Each scheduler class's queue length summed over the ``mclock-shard-queue-<n>``
    sections (one per op shard): the OSD's ops waiting in that class, whichever shard
    holds them. A section that lacks a class's counter adds nothing to it."""
    out: dict[str, int] = {}
    for name, section in dump.items():
        if not name.startswith(counters.MCLOCK_SECTION_PREFIX) or not isinstance(section, dict):
            continue
        if not name[len(counters.MCLOCK_SECTION_PREFIX) :].isdigit():
            continue
        for cls, counter in counters.MCLOCK_QUEUES.items():
            if counter in section:
                out[cls] = out.get(cls, 0) + _int(section[counter], f"{name}.{counter}")
    return out


# ----------------------------------------------------------------------------- ops in flight

# The flag points an OSD op reports (OpRequest::state_string, ceph/ceph src/osd/OpRequest.h:
# flag_queued_for_pg, flag_reached_pg, flag_delayed, flag_started, flag_sub_op_sent,
# flag_commit_sent, and the default). Since Quincy a delayed op reports its event detail
# ("waiting for readable", ...) instead of "delayed"; such free text is counted as
# "other", which keeps the label set bounded whatever a daemon prints.
FLAG_POINTS: tuple[str, ...] = (
    "no flag points reached",
    "queued for pg",
    "reached pg",
    "delayed",
    "started",
    "waiting for sub ops",
    "commit sent; apply or cleanup",
)
OTHER_FLAG_POINT = "other"


@dataclass(frozen=True)
class OpsInFlight:
    """``dump_ops_in_flight``: how many ops, how old, and where they wait.

    ``slow`` counts ops older than the OSD's ``osd_op_complaint_time`` (what Ceph calls
    slow ops); ``by_flag_point`` uses the bounded :data:`FLAG_POINTS` plus "other", for
    all ops and (``slow_by_flag_point``) for the slow ones.
    """

    num_ops: int
    oldest_age: float
    slow: int
    by_flag_point: dict[str, int]
    slow_by_flag_point: dict[str, int] = field(default_factory=dict)


def parse_ops_in_flight(payload: Any, complaint_time: float) -> OpsInFlight:
    """Summarise ``dump_ops_in_flight``; ``complaint_time`` in seconds."""
    if not isinstance(payload, dict):
        raise PerfParseError("dump_ops_in_flight: not an object")
    ops = payload.get("ops")
    if not isinstance(ops, list):
        raise PerfParseError("dump_ops_in_flight: no ops list")
    num = payload.get("num_ops", len(ops))
    num_ops = _int(num, "dump_ops_in_flight.num_ops")
    oldest = 0.0
    slow = 0
    by_flag: dict[str, int] = {}
    slow_by_flag: dict[str, int] = {}
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PerfParseError(f"dump_ops_in_flight: op {i} is not an object")
        age = _num(op.get("age"), f"dump_ops_in_flight: op {i} age")
        oldest = max(oldest, age)
        type_data = op.get("type_data")
        flag = type_data.get("flag_point") if isinstance(type_data, dict) else None
        key = flag if flag in FLAG_POINTS else OTHER_FLAG_POINT
        by_flag[key] = by_flag.get(key, 0) + 1
        if age > complaint_time:
            slow += 1
            slow_by_flag[key] = slow_by_flag.get(key, 0) + 1
    return OpsInFlight(num_ops, oldest, slow, by_flag, slow_by_flag)


# ----------------------------------------------------------------------------- config

# "<log>/<gather>" or a single "<level>" (both levels). common/config.cc parses
# debug_<subsys> this way (md_config_t::_set_val -> the subsystem map); a single number
# sets both. The gather level decides which messages are formatted into the in-memory
# ring (dout's should_gather() tests against max(log, gather), log/SubsystemMap.h), so it
# is what costs CPU on the I/O path even when nothing reaches the log file.
_DEBUG_LEVEL = re.compile(r"^\s*(\d{1,3})\s*(?:/\s*(\d{1,3})\s*)?$")
# debug_* options of config show that are not subsystem levels yet may hold a number
# (src/common/options: a test knob). Booleans (debug_asok_assert_abort, ...) never parse.
_DEBUG_NOT_LEVELS = frozenset({"debug_heartbeat_testing_span"})

# Numeric options exported as cephnode_osd_config_value{option}. The OSD uses
# osd_op_num_shards / osd_op_num_threads_per_shard when non-zero, else the _hdd or _ssd
# variant chosen by whether its data device is rotational (OSD::get_num_op_shards and
# get_num_op_threads, src/osd/OSD.cc).
CONFIG_OPTIONS: tuple[str, ...] = (
    "osd_op_num_shards",
    "osd_op_num_shards_hdd",
    "osd_op_num_shards_ssd",
    "osd_op_num_threads_per_shard",
    "osd_op_num_threads_per_shard_hdd",
    "osd_op_num_threads_per_shard_ssd",
    "osd_memory_target",
    "osd_op_complaint_time",
)
# The plain shard and thread options mean "not set" at 0, their default: the _hdd or _ssd
# variant applies then, and a series of the 0 would only repeat that (the collector
# exports these two only when set).
UNSET_WHEN_ZERO = frozenset({"osd_op_num_shards", "osd_op_num_threads_per_shard"})
# osd_op_complaint_time's default (src/common/options/global.yaml.in, "30"), used only
# when config show lacks it.
DEFAULT_COMPLAINT_TIME = 30.0


@dataclass(frozen=True)
class DebugLevel:
    log: int
    gather: int


@dataclass(frozen=True)
class OSDConfig:
    """What ``config show`` tells about tuning: debug levels, shard options, objectstore."""

    debug: dict[str, DebugLevel]  # subsystem (without debug_) -> levels, all subsystems
    options: dict[str, float]  # CONFIG_OPTIONS present and numeric
    objectstore: str
    complaint_time: float
    osd_data: str = ""  # the data directory (osd_data), "" when config show lacks it
    # The op scheduler (osd_op_queue: "wpq", "mclock_scheduler") and, under mClock only,
    # its profile (osd_mclock_profile: "balanced", "high_client_ops", "custom", ...);
    # "" when config show lacks them or (the profile) the scheduler is not mClock, where
    # the option is set but means nothing.
    op_queue: str = ""
    mclock_profile: str = ""
    # The daemon's own name (Ceph's option `name`, "osd.3"), checked against its socket's
    # name (collectors/osd_query.py); "" when config show lacks it or it is no string.
    name: str = ""


def parse_debug_level(text: str) -> DebugLevel | None:
    """``"1/5"`` -> log 1, gather 5; ``"0"`` -> 0/0; None when not a level."""
    m = _DEBUG_LEVEL.match(text)
    if m is None:
        return None
    log = int(m[1])
    return DebugLevel(log, int(m[2]) if m[2] is not None else log)


def parse_config(config: Any) -> OSDConfig:
    """Select the tuning facts from a ``config show`` (all values are strings)."""
    if not isinstance(config, dict):
        raise PerfParseError("config show: not an object")
    debug: dict[str, DebugLevel] = {}
    for key, value in config.items():
        if not key.startswith("debug_") or not isinstance(value, str):
            continue
        if key in _DEBUG_NOT_LEVELS:
            continue
        level = parse_debug_level(value)
        if level is not None:
            debug[key[len("debug_") :]] = level
    options: dict[str, float] = {}
    for name in CONFIG_OPTIONS:
        try:
            number = float(config[name])
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(number):
            options[name] = number
    objectstore = config.get("osd_objectstore")
    osd_data = config.get("osd_data")
    op_queue = config.get("osd_op_queue")
    op_queue = op_queue if isinstance(op_queue, str) else ""
    profile = config.get("osd_mclock_profile")
    if not isinstance(profile, str) or op_queue != counters.MCLOCK_SCHEDULER:
        profile = ""
    own_name = config.get("name")
    return OSDConfig(
        debug=debug,
        options=options,
        objectstore=objectstore if isinstance(objectstore, str) else "",
        complaint_time=options.get("osd_op_complaint_time", DEFAULT_COMPLAINT_TIME),
        osd_data=osd_data if isinstance(osd_data, str) else "",
        op_queue=op_queue,
        mclock_profile=profile,
        name=own_name if isinstance(own_name, str) else "",
    )


def parse_version(payload: Any) -> str:
    """``{"version": "16.2.15", ...}`` -> ``"16.2.15"``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("version"), str):
        raise PerfParseError("version: no version string")
    version: str = payload["version"]
    # It becomes a label value: Ceph's are 6-40 characters (a development build's
    # "18.2.4-123-gabcdef12"); a 64 KiB one would be copied into every scrape.
    if len(version) > MAX_VERSION_CHARS:
        raise PerfParseError(f"version: {len(version)} characters, more than {MAX_VERSION_CHARS}")
    return version


MAX_VERSION_CHARS = 128


# "16.2.15", or a development build's "18.2.4-123-gabcdef12" (git describe): the release
# is the first three numbers.
_VERSION_RE = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,4})(?:[-+~].*)?")


def version_tuple(version: str) -> tuple[int, int, int] | None:
    """``"17.2.7"`` -> (17, 2, 7); None for a string Ceph would not print."""
    m = _VERSION_RE.fullmatch(version.strip())
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))
