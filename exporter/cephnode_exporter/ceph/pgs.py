"""Pure parser for ``pg ls`` replies: which OSDs the laggy and waiting PGs involve.

The ``pgs`` collector asks the cluster for the PGs in state ``laggy`` or ``wait`` only
(``{"prefix": "pg ls", "states": ["laggy", "wait"], "format": "json"}``) and counts, per
OSD, in how many of them it is the acting primary and in how many another member of the
acting set. The reply's shape, from Ceph's sources (ceph/ceph) and checked against
Pacific 16.2.15 (tests/fixtures/ceph/pgs/):

- ``pg ls`` is a mgr command (src/mgr/MgrCommands.h, module "pg", perm "r"); the mgr
  wraps the listing as ``{"pg_ready": <bool>, "pg_stats": [...]}`` (DaemonServer.cc opens
  a ``pg_info`` section and dumps ``pg_ready``), and leaves ``pg_stats`` out entirely when
  no PG matches: a healthy cluster answers ``{"pg_ready":true}`` (17 bytes).
  ``pg_ready`` is false after a mgr restart until every up OSD has reported.
  Releases before Nautilus answered a bare array, or nothing when no PG matched; both
  are accepted.
- The states given are OR-ed (``PGMap::get_filtered_pg_stats`` keeps a PG when
  ``state & mask`` is non-zero), so each listed PG carries ``laggy`` or ``wait`` (or both)
  among the ``+``-joined words of its ``state``. ``laggy``: the primary's read lease ran
  out because a replica did not renew it; ``wait``: after re-peering, the PG waits for the
  previous interval's leases to expire. Both block client I/O (PrimaryLogPG::check_laggy,
  ceph/ceph src/osd/PrimaryLogPG.cc; the lease wait in src/osd/PeeringState.cc).
- Each entry is a full ``pg_stat_t`` dump (2,249 bytes of JSON per PG on Pacific 16.2.15,
  measured on the recorded listing; more with snapshots or scrub history), of which
  only ``pgid``, ``state``, ``acting`` and ``acting_primary`` are used. ``acting`` is the
  set serving I/O now (``up`` may differ during backfill); the acting primary holds the
  read lease and waits for the others, so it is the one to call primary here. Erasure-
  coded pools put CRUSH_ITEM_NONE (2147483647) for a missing shard: it is skipped.

Why a streaming parse: 1,651 laggy PGs (the reference incident) are about 3.7 MB, but a
cluster-wide stall can list tens of thousands. ``json.loads`` of the whole reply would
build every entry's ~100 fields at once (measured on the synthesised 1,651-PG listing of
tests/test_pgs.py: a peak of 3.0 bytes per byte of JSON, 2.0 kept); decoding one entry
at a time keeps the peak at the decoded text plus one entry and a small record per
listed PG (1.24 bytes per byte), and the reply itself is capped (:data:`MAX_REPLY_BYTES`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

STATES = ("laggy", "wait")
ROLES = ("primary", "replica")
# The one command the collector sends. Octopus (15.2) introduced both states; older
# mgrs reject them with EINVAL ("'laggy' is not a valid pg state").
COMMAND: dict[str, Any] = {"prefix": "pg ls", "states": list(STATES), "format": "json"}

# Largest reply parsed. About 2.2 KB per listed PG on Pacific (tests/test_pgs.py), so
# 64 MiB is some 29,000 laggy PGs; with the reply and its decoded text in memory that
# stays inside the service's MemoryMax=256M (deploy/cephnode-exporter.service).
MAX_REPLY_BYTES = 64 * 1024 * 1024
# Distinct OSDs one reply may name (each adds up to four series). The largest clusters
# run some ten thousand OSDs; more than this is a broken reply, not a cluster.
MAX_OSDS = 100_000
# An empty slot in an acting set (crush.h CRUSH_ITEM_NONE), and the "no primary" value.
CRUSH_ITEM_NONE = 0x7FFFFFFF
# Malformed entries whose messages are kept (all are counted).
MAX_ERROR_MESSAGES = 10

_WHITESPACE = " \t\n\r"


class PGParseError(ValueError):
    """The reply is not a ``pg ls`` listing (not JSON, wrong shape, too large)."""


@dataclass(frozen=True)
class StuckPG:
    """One listed PG: the states of interest it is in and who serves it."""

    pgid: str
    states: frozenset[str]  # a non-empty subset of STATES
    acting: tuple[int, ...]  # valid OSD ids in acting order, empty slots removed
    acting_primary: int | None  # None when the PG has no acting primary

    def roles(self) -> Iterator[tuple[int, str]]:
        """(osd, role) for every OSD of the acting set; each OSD once."""
        seen: set[int] = set()
        if self.acting_primary is not None:
            seen.add(self.acting_primary)
            yield self.acting_primary, "primary"
        for osd in self.acting:
            if osd not in seen:
                seen.add(osd)
                yield osd, "replica"


@dataclass
class PGListing:
    """One ``pg ls`` reply, parsed. Malformed entries are skipped and counted."""

    pgs: list[StuckPG]
    pg_ready: bool | None  # None when the reply does not say (pre-Nautilus, empty)
    reply_bytes: int
    error_count: int = 0
    errors: list[str] = field(default_factory=list)  # the first MAX_ERROR_MESSAGES

    def listed(self) -> dict[str, int]:
        """PGs per state, every state present (a PG in both counts in both)."""
        counts = dict.fromkeys(STATES, 0)
        for pg in self.pgs:
            for state in pg.states:
                counts[state] += 1
        return counts

    def by_osd(self) -> dict[tuple[int, str, str], int]:
        """(osd, role, state) -> PGs; only non-zero counts."""
        return dict(attribute(self.pgs))

    def _error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERROR_MESSAGES:
            self.errors.append(message)


def attribute(pgs: list[StuckPG]) -> Counter[tuple[int, str, str]]:
    """Count, per OSD, the listed PGs it is primary or replica in, per state."""
    counts: Counter[tuple[int, str, str]] = Counter()
    for pg in pgs:
        for osd, role in pg.roles():
            for state in pg.states:
                counts[(osd, role, state)] += 1
    return counts


def parse_pg_ls(
    payload: bytes, max_bytes: int = MAX_REPLY_BYTES, max_osds: int = MAX_OSDS
) -> PGListing:
    """Parse a ``pg ls`` reply; raises :class:`PGParseError` when it is not one."""
    if len(payload) > max_bytes:
        raise PGParseError(f"reply of {len(payload)} bytes exceeds the {max_bytes} byte cap")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PGParseError(f"reply is not UTF-8: {exc}") from None
    listing = PGListing(pgs=[], pg_ready=None, reply_bytes=len(payload))
    s = _Scanner(text)
    s.skip()
    if s.at_end():
        return listing  # pre-Nautilus: nothing at all when no PG matches

    def entry(obj: Any) -> None:
        try:
            listing.pgs.append(_stuck_pg(obj))
        except _EntryError as exc:
            listing._error(str(exc))

    seen: set[str] = set()

    def member(key: str) -> None:
        if key in seen and key in ("pg_stats", "pg_ready"):
            # Ceph's formatter writes each once; a second one would count PGs twice.
            raise PGParseError(f"{key} appears twice in the reply")
        seen.add(key)
        if key == "pg_stats":
            if s.peek() != "[":
                raise PGParseError(f"pg_stats is not an array (at offset {s.pos})")
            s.array(entry)
        elif key == "pg_ready":
            value = s.value()
            if not isinstance(value, bool):
                raise PGParseError(f"pg_ready is {type(value).__name__}, not a boolean")
            listing.pg_ready = value
        else:
            s.value()  # a field of a later release: ignored

    first = s.peek()
    if first == "{":
        s.object(member)
    elif first == "[":
        s.array(entry)
    else:
        raise PGParseError(f"reply is not a JSON object or array: starts with {text[:20]!r}")
    s.skip()
    if not s.at_end():
        raise PGParseError(f"unexpected data after the listing at offset {s.pos}")
    osds = {osd for pg in listing.pgs for osd, _ in pg.roles()}
    if len(osds) > max_osds:
        raise PGParseError(f"reply names {len(osds)} OSDs, more than the {max_osds} accepted")
    return listing


class _EntryError(ValueError):
    """One entry of pg_stats is malformed; it is skipped."""


def _osd_id(value: Any) -> int | None:
    """A valid OSD id, None for an empty slot; raises for anything else."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _EntryError(f"OSD id {value!r} is not an integer")
    if value == CRUSH_ITEM_NONE or value < 0:
        return None
    if value > CRUSH_ITEM_NONE:
        raise _EntryError(f"OSD id {value} out of range")
    return value


def _stuck_pg(obj: Any) -> StuckPG:
    if not isinstance(obj, dict):
        raise _EntryError(f"pg_stats entry is {type(obj).__name__}, not an object")
    pgid = obj.get("pgid")
    if not isinstance(pgid, str) or not pgid:
        raise _EntryError(f"pg_stats entry without a pgid: {str(obj)[:80]}")
    state = obj.get("state")
    if not isinstance(state, str):
        raise _EntryError(f"pg {pgid}: state {state!r} is not a string")
    words = set(state.split("+"))
    states = frozenset(s for s in STATES if s in words)
    if not states:
        # The mgr filters on the state bits, so this is a reply we do not understand.
        raise _EntryError(f"pg {pgid} listed in state {state!r}, neither laggy nor wait")
    acting_raw = obj.get("acting")
    if not isinstance(acting_raw, list):
        raise _EntryError(f"pg {pgid}: acting {acting_raw!r} is not a list")
    acting = tuple(osd for osd in map(_osd_id, acting_raw) if osd is not None)
    if "acting_primary" not in obj:
        raise _EntryError(f"pg {pgid}: no acting_primary")
    primary = _osd_id(obj["acting_primary"])
    return StuckPG(pgid=pgid, states=states, acting=acting, acting_primary=primary)


class _Scanner:
    """Walks the top level of a JSON text; values below it are decoded one at a time."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._decoder = json.JSONDecoder()

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        self.skip()
        if self.peek() != char:
            found = self.peek() or "end of reply"
            raise PGParseError(f"expected {char!r} at offset {self.pos}, found {found!r}")
        self.pos += 1

    def value(self) -> Any:
        self.skip()
        try:
            value, self.pos = self._decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise PGParseError(f"invalid JSON: {exc}") from None
        except RecursionError:
            raise PGParseError(f"JSON nested too deeply at offset {self.pos}") from None
        return value

    def object(self, member: Callable[[str], None]) -> None:
        """``member(key)`` is called with the scanner at each value and must consume it."""
        self.expect("{")
        self.skip()
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise PGParseError(f"object key {key!r} is not a string")
            self.expect(":")
            self.skip()
            member(key)
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return

    def array(self, item: Callable[[Any], None]) -> None:
        """``item(value)`` is called with each element, decoded on its own."""
        self.expect("[")
        self.skip()
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            item(self.value())
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return
