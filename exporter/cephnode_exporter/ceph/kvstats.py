"""Pure parser of ``dump_objectstore_kv_stats``: RocksDB compaction totals of a BlueStore OSD.

What the OSD offers (RocksDBStore::get_statistics, ceph/ceph src/kv/RocksDBStore.cc, measured
on 16.2.15, docs/ceph.md "RocksDB compaction statistics"): nothing at all unless
``rocksdb_perf`` is true, and then one JSON object per enabled option, written back to back
(``{...}{...}``, not one document) with duplicate keys, each value one line of RocksDB text:

- ``rocksdb_collect_compaction_stats``: ``{"rocksdb_compaction_statistics": "", "": line,
  ...}``, the lines of ``GetProperty("rocksdb.stats")``. On Pacific and Reef that
  property describes the *default column family only* (RocksDB's InternalStats of the
  default handle): on an OSD created sharded (Pacific's ``bluestore_rocksdb_cfs``, the
  default since 16.2) the onodes, omap and deferred writes live in other column families
  and are missing. Tentacle (20.2.4, recorded) prints one block per column family, every
  one of them (12 on the test OSD). The
  per-level table's ``Sum`` row holds the totals; the byte columns are printed with one
  decimal of GiB (``%8.1f``), the ``Cumulative compaction`` line of the same block with
  two (used when present), ``Comp(sec)`` with two decimals. RocksDB counts each memtable
  flush as a compaction into L0 in these tables.
- ``rocksdb_collect_extended_stats`` (with ``rocksdb_perf`` true when the OSD started: the
  statistics object is created when the DB opens): ``{"rocksdb_extended_statistics": "",
  ".": line, ...}``, RocksDB's ``Statistics::ToString()`` (monitoring/statistics.cc):
  ``<ticker> COUNT : <n>`` and ``<histogram> P50 : .. P95 : .. P99 : .. P100 : .. COUNT :
  <n> SUM : <n>``. These cover the whole DB, every column family, exactly (bytes and
  microseconds), and keep flushes apart from compactions.

With ``rocksdb_perf`` off, Pacific and Reef answer nothing; Tentacle answers one line of
text instead of JSON, ``error: RocksDB perf is disabled, can't probe for stats.``
(recorded: tests/fixtures/ceph/releases/tentacle/kvstats/off.json): that is
:class:`KVStatsDeclined`, the OSD saying it keeps no statistics, not a garbled reply.

Columns are found by their header names, not positions: the set differs across RocksDB
versions (``Size(MB)`` and ``Stall(cnt)`` in old ones, ``CompMergeCPU(sec)`` in newer ones,
``Rblob(GB)``/``Wblob(GB)`` appended in 7.x). A reply that is not what RocksDB prints raises
:class:`KVStatsParseError`. No I/O here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cephnode_exporter.ceph.perf import PerfParseError

# RocksDB's kGB (db/internal_stats.cc): binary.
GIB = float(1 << 30)
# The largest value of a column: 2^64 bytes in GiB (a uint64_t of bytes).
MAX_GIB = float(1 << 34)
US_PER_S = 1e6

# The options without which the OSD answers nothing (get_statistics returns early
# without rocksdb_perf; each collect option adds its section).
PERF_OPTION = "rocksdb_perf"
SECTION_OPTIONS = ("rocksdb_collect_compaction_stats", "rocksdb_collect_extended_stats")

COMPACTION_SECTION = "rocksdb_compaction_statistics"
EXTENDED_SECTION = "rocksdb_extended_statistics"

# Extended statistics (RocksDB's TickersNameMap / HistogramsNameMap names, stable since 5.x).
READ_TICKER = "rocksdb.compact.read.bytes"
WRITE_TICKER = "rocksdb.compact.write.bytes"
FLUSH_TICKER = "rocksdb.flush.write.bytes"
TIME_HISTOGRAM = "rocksdb.compaction.times.micros"
CPU_HISTOGRAM = "rocksdb.compaction.times.cpu_micros"

# RocksDB's tickers and histogram counts and sums are uint64_t (include/rocksdb/
# statistics.h): at most 20 digits, and a longer number is no statistic of RocksDB.
_TICKER = re.compile(r"^(\S+) COUNT : (\d{1,20})$")
_HISTOGRAM = re.compile(r"^(\S+) P50 : .* COUNT : (\d{1,20}) SUM : (\d{1,20})$")
_CF_HEADER = re.compile(r"^\*\* Compaction Stats \[(.+)\] \*\*$")
_CUMULATIVE = re.compile(
    r"^Cumulative compaction: ([0-9.]+) GB write, [0-9.]+ MB/s write, "
    r"([0-9.]+) GB read, [0-9.]+ MB/s read, [0-9.]+ seconds$"
)
# BytesToHumanString (util/string_util.cc) prints the Size column as "59.91 KB".
_SIZE_UNITS = frozenset({"B", "KB", "MB", "GB", "TB", "PB"})
# The level-table columns the totals come from.
_READ, _WRITE, _SECONDS, _COUNT = "Read(GB)", "Write(GB)", "Comp(sec)", "Comp(cnt)"


class KVStatsParseError(PerfParseError):
    """The reply is not the RocksDB statistics text Ceph dumps."""


class KVStatsDeclined(Exception):
    """The OSD answered with a line of text saying it keeps no RocksDB statistics (Tentacle
    with ``rocksdb_perf`` off). Not a parse error: the OSD is fine, the options changed
    since the exporter read them (the message is the OSD's own, without ``error:``)."""


# Tentacle's refusal: "error: <reason>" on one line (the recorded reply ends in a newline).
_DECLINED = re.compile(r"^error: ([^\n{}]{1,200})$", re.IGNORECASE)


@dataclass(frozen=True)
class DBCompactionStats:
    """Whole-DB compaction totals from RocksDB's statistics (every column family).

    ``seconds`` and ``count`` are the compaction jobs' wall time and number (the
    ``compaction.times.micros`` histogram); flushes are not compactions here, their
    output is ``flush_write_bytes``. None: the RocksDB version has no such statistic.
    """

    read_bytes: int
    write_bytes: int
    seconds: float
    count: int
    cpu_seconds: float | None = None
    flush_write_bytes: int | None = None


@dataclass(frozen=True)
class CFCompactionStats:
    """One column family's totals from the ``rocksdb.stats`` level table (``Sum`` row).

    Flushes count as compactions into L0 here. ``read_bytes``/``write_bytes`` have the
    printed resolution: 0.01 GiB from the ``Cumulative compaction`` line, 0.1 GiB from
    the table when that line is missing.
    """

    read_bytes: float
    write_bytes: float
    seconds: float
    count: int


@dataclass(frozen=True)
class KVStats:
    """What one reply offered: per column family tables and/or the whole-DB statistics."""

    column_families: dict[str, CFCompactionStats]
    db: DBCompactionStats | None = None


def _true(config: Mapping[str, Any], option: str) -> bool:
    return str(config.get(option, "")).strip().lower() == "true"


def wanted(config: Any) -> bool:
    """Whether ``config show`` says the OSD would answer ``dump_objectstore_kv_stats``
    with something: ``rocksdb_perf`` and at least one collect option true. Otherwise
    the command is not sent (the default costs nothing)."""
    if not isinstance(config, dict) or not _true(config, PERF_OPTION):
        return False
    return any(_true(config, option) for option in SECTION_OPTIONS)


# ----------------------------------------------------------------------------- decoding


class _Object(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in order: the keys repeat, so a dict would
    keep only the last line. A type of its own, so that arrays are not taken for one."""


def _documents(text: str) -> list[_Object]:
    """The top-level objects of ``{...}{...}``."""
    decoder = json.JSONDecoder(object_pairs_hook=_Object)
    docs: list[_Object] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return docs
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except RecursionError:
            raise KVStatsParseError("reply JSON is nested too deeply") from None
        except ValueError as exc:
            raise KVStatsParseError(f"reply is not JSON objects: {exc}") from None
        if not isinstance(doc, _Object):
            raise KVStatsParseError(f"reply holds a {type(doc).__name__}, not an object")
        docs.append(doc)


def _sections(pairs: _Object, out: dict[str, list[str]]) -> None:
    """Find the statistics sections: an object whose first key names one; other objects
    (the perf counters, memtable usage) are searched for nested sections and else
    ignored."""
    if pairs and pairs[0][0] in (COMPACTION_SECTION, EXTENDED_SECTION):
        name = pairs[0][0]
        if name in out:
            raise KVStatsParseError(f"{name} appears twice")
        lines = []
        for key, value in pairs[1:]:
            if not isinstance(value, str):
                raise KVStatsParseError(f"{name}: {key!r} is not a line of text")
            lines.append(value)
        out[name] = lines
        return
    for _key, value in pairs:
        if isinstance(value, _Object):
            _sections(value, out)


def parse_kv_stats(payload: bytes | str | None) -> KVStats | None:
    """Compaction totals of a ``dump_objectstore_kv_stats`` reply; None when the reply is
    empty or has neither section (the OSD offers none). Raises :class:`KVStatsDeclined`
    for Tentacle's one-line refusal, :class:`KVStatsParseError` for anything else that is
    not what RocksDB prints."""
    if payload is None:
        return None
    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KVStatsParseError(f"reply is not UTF-8 (byte {exc.start})") from None
    declined = _DECLINED.match(payload.strip())
    if declined:
        raise KVStatsDeclined(declined[1].strip())
    sections: dict[str, list[str]] = {}
    for doc in _documents(payload):
        _sections(doc, sections)
    if not sections:
        return None
    cfs = _column_families(sections.get(COMPACTION_SECTION, []))
    db = _db_statistics(sections[EXTENDED_SECTION]) if EXTENDED_SECTION in sections else None
    if COMPACTION_SECTION in sections and not cfs:
        raise KVStatsParseError(f"{COMPACTION_SECTION}: no Compaction Stats table")
    return KVStats(cfs, db)


# ----------------------------------------------------------------------------- rocksdb.stats


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise KVStatsParseError(f"{what}: {text[:40]!r} is not a number") from None
    # Below 2^64 bytes even once GiB are turned into bytes (the callers' round()).
    if not 0 <= value < MAX_GIB:
        raise KVStatsParseError(f"{what}: {text[:40]!r} is not a non-negative number below 2^34")
    return value


def _row(header: list[str], line: str, cf: str) -> dict[str, str]:
    """A level-table row as {column: text}; the Size column's unit joins its number."""
    tokens: list[str] = []
    for token in line.split():
        if token in _SIZE_UNITS and tokens:
            tokens[-1] += " " + token
        else:
            tokens.append(token)
    if len(tokens) != len(header):
        raise KVStatsParseError(
            f"[{cf}] {tokens[0]} row has {len(tokens)} columns, the header {len(header)}"
        )
    return dict(zip(header, tokens, strict=True))


def _column_families(lines: list[str]) -> dict[str, CFCompactionStats]:
    """Each ``** Compaction Stats [cf] **`` block: its level table's Sum row and the
    ``Cumulative compaction`` line that follows (the second table of a block, by
    ``Priority``, repeats the same totals and is skipped)."""
    sums: dict[str, dict[str, str]] = {}
    cumulative: dict[str, tuple[float, float]] = {}
    order: list[str] = []
    cf: str | None = None
    header: list[str] | None = None
    for raw in lines:
        line = raw.strip()
        m = _CF_HEADER.match(line)
        if m:
            cf, header = m[1], None
            if cf not in order:
                order.append(cf)
            continue
        if cf is None:
            continue
        first = line.split(maxsplit=1)[0] if line else ""
        if first == "Level":
            header = line.split()
            missing = [c for c in (_READ, _WRITE, _SECONDS, _COUNT) if c not in header]
            if missing:
                raise KVStatsParseError(f"[{cf}] level table lacks {', '.join(missing)}")
        elif first == "Priority":
            header = None
        elif first == "Sum" and header is not None and cf not in sums:
            sums[cf] = _row(header, line, cf)
        elif m := _CUMULATIVE.match(line):
            write_gib = _number(m[1], f"[{cf}] cumulative write")
            read_gib = _number(m[2], f"[{cf}] cumulative read")
            cumulative.setdefault(cf, (read_gib, write_gib))
    out = {}
    for name in order:
        row = sums.get(name)
        if row is None:
            raise KVStatsParseError(f"[{name}] Compaction Stats without a Sum row")
        read_gib = _number(row[_READ], f"[{name}] {_READ}")
        write_gib = _number(row[_WRITE], f"[{name}] {_WRITE}")
        if name in cumulative:  # two decimals instead of one
            read_gib, write_gib = cumulative[name]
        count = _number(row[_COUNT], f"[{name}] {_COUNT}")
        if count != int(count):
            raise KVStatsParseError(f"[{name}] {_COUNT}: {row[_COUNT]!r} is not a count")
        out[name] = CFCompactionStats(
            read_bytes=round(read_gib * GIB),
            write_bytes=round(write_gib * GIB),
            seconds=_number(row[_SECONDS], f"[{name}] {_SECONDS}"),
            count=int(count),
        )
    return out


# ----------------------------------------------------------------------------- statistics


def _db_statistics(lines: list[str]) -> DBCompactionStats:
    tickers: dict[str, int] = {}
    histograms: dict[str, tuple[int, int]] = {}
    for raw in lines:
        line = raw.strip()
        if m := _HISTOGRAM.match(line):
            histograms[m[1]] = (int(m[2]), int(m[3]))
        elif m := _TICKER.match(line):
            tickers[m[1]] = int(m[2])
        # Other lines (none in RocksDB up to 9.x) are not ours to judge.
    missing = [t for t in (READ_TICKER, WRITE_TICKER) if t not in tickers]
    missing += [h for h in (TIME_HISTOGRAM,) if h not in histograms]
    if missing:
        raise KVStatsParseError(f"{EXTENDED_SECTION}: no {', '.join(missing)}")
    count, micros = histograms[TIME_HISTOGRAM]
    cpu = histograms.get(CPU_HISTOGRAM)
    return DBCompactionStats(
        read_bytes=tickers[READ_TICKER],
        write_bytes=tickers[WRITE_TICKER],
        seconds=micros / US_PER_S,
        count=count,
        cpu_seconds=cpu[1] / US_PER_S if cpu is not None else None,
        flush_write_bytes=tickers.get(FLUSH_TICKER),
    )
