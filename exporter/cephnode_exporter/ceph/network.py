"""The heartbeat ping times an OSD measures to its peers (admin command ``dump_osd_network``).

Every OSD pings its heartbeat peers on both of its networks every
``osd_heartbeat_interval`` (6 s, jittered) and keeps, per peer and interface, the mean
round trip over the last 1, 5 and 15 minutes (``OSDService::get_hb_pingtime``; the
windows are ``osd_stat_t::Interfaces::back_pingtime[3]`` and ``front_pingtime[3]`` in
ceph/ceph src/osd/osd_types.h). ``dump_osd_network`` (ceph/ceph src/osd/OSD.cc,
``OSD::asok_command``) lists them; its argument ``value`` is a threshold in ms, and 0
lists every peer. The reply, identical in shape on Pacific 16.2, Reef 18.2 and Tentacle
20.2 (tests/fixtures/ceph/network; the JSON formatter leaves out the name of the outer
section, ``network_ping_times``)::

    {"threshold": 0, "entries": [
        {"last update": "Fri Nov 27 22:21:16 2026", "stale": false,
         "from osd": 0, "to osd": 2, "interface": "back",
         "average": {"1min": 0.843, "5min": 0.843, "15min": 0.843},
         "min": {...}, "max": {...}, "last": 0.436}, ...]}

An OSD lists a peer only once it shares a PG with it and a ping came back: an OSD of a
cluster without pools answers ``{"threshold": 0, "entries": []}``.

Times are milliseconds printed with three decimals (microseconds kept as ``uint32``);
entries come sorted by the largest of the three averages, worst first; a peer's front
entry is missing until a front ping came back (``front_last`` 0). The ``min`` object
holds the maxima (OSD.cc dumps ``max[]`` under both names), so neither is read here.

What is kept: per interface, the worst, the mean and the median of the peers' 1-minute
averages. The median is what tells whose network is slow: an OSD whose own link or
messenger is slow is slow to every peer, so its median rises; one stalled or badly
connected peer raises the worst of every OSD that pings it, and its mean too (a peer
stopped for seconds adds seconds over a few hundred peers), but not its median.
Why the 1-minute window: the alert compares OSDs against the fleet and holds for minutes
itself; the 5- and 15-minute means (and Ceph's own OSD_SLOW_PING_TIME warning, which
takes the largest of the three) keep a 3-second stall visible for a quarter of an hour
after the link recovered. Each peer's averages are computed when its 1-minute interval
closes (OSD.cc ``handle_osd_ping``; ceph/ceph qa/standalone/misc/network-ping.sh waits
for "1 cycle"), so a change shows within a minute or two. Stale peers (no update for
``osd_heartbeat_stale``, 600 s: a peer gone down) are counted and left out: their averages
are as old as their last reply.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from cephnode_exporter.ceph.perf import PerfParseError

# The two heartbeat networks (OSD.cc: "back" the cluster network, "front" the public one).
INTERFACES = ("back", "front")
# The window exported (the "average" object's keys are "1min", "5min", "15min").
WINDOW = "1min"
# Entries read from one reply: two per peer; 8,192 covers 4,096 peers, more than any
# OSD's heartbeat peer set (the OSDs it shares PGs with plus osd_heartbeat_min_peers,
# 10). The rest are counted, not read: the reply's own cap (ceph/asok.py) bounds its size.
MAX_ENTRIES = 8192
# The times are uint32 microseconds (OSD.cc osd_ping_time_t): larger is not Ceph's.
MAX_PING_MS = 2**32 / 1000.0


class NetworkParseError(PerfParseError):
    """A ``dump_osd_network`` reply without the structure OSD.cc gives it."""


@dataclass(frozen=True)
class InterfacePings:
    """One interface's heartbeat peers in one reply."""

    peers: int  # peers with a current average on this interface
    stale: int  # peers listed but not updated for osd_heartbeat_stale: left out
    max_seconds: float | None  # the worst peer's 1-minute average; None without peers
    mean_seconds: float | None  # the mean over the peers of their 1-minute averages
    median_seconds: float | None  # their median (of two middle peers, the mean)


@dataclass(frozen=True)
class NetworkPings:
    """An OSD's heartbeat ping times, per interface (``back``, ``front``)."""

    interfaces: dict[str, InterfacePings]
    entries_dropped: int = 0  # entries beyond MAX_ENTRIES, not read


def _ms(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NetworkParseError(f"dump_osd_network: {where} is {value!r}, not a number")
    # An integer past a float's range (JSON allows 4,300 digits) is as out of range.
    ms = float(value) if not isinstance(value, int) or value <= MAX_PING_MS else math.inf
    if not math.isfinite(ms) or ms < 0 or ms > MAX_PING_MS:
        shown = f"{value!r}" if math.isfinite(ms) else "a number"
        raise NetworkParseError(f"dump_osd_network: {where} is {shown} ms, out of range")
    return ms


def parse_osd_network(reply: Any, max_entries: int = MAX_ENTRIES) -> NetworkPings:
    """The per-interface summary of a decoded ``dump_osd_network`` reply (pure).

    Raises :class:`NetworkParseError` on anything Ceph does not send: another root, an
    entry without its interface or 1-minute average, a time that is no number or out of
    a ``uint32`` of microseconds.
    """
    entries = reply.get("entries") if isinstance(reply, dict) else None
    if not isinstance(entries, list):
        raise NetworkParseError("dump_osd_network: no entries list in the reply")
    times: dict[str, list[float]] = {i: [] for i in INTERFACES}
    stale = dict.fromkeys(INTERFACES, 0)
    for n, entry in enumerate(entries[:max_entries]):
        where = f"entry {n}"
        if not isinstance(entry, dict):
            raise NetworkParseError(f"dump_osd_network: {where} is not an object")
        interface = entry.get("interface")
        if interface not in times:
            raise NetworkParseError(f"dump_osd_network: {where} has interface {interface!r}")
        average = entry.get("average")
        if not isinstance(average, dict) or WINDOW not in average:
            raise NetworkParseError(f"dump_osd_network: {where} has no average.{WINDOW}")
        ms = _ms(average[WINDOW], f"{where} average.{WINDOW}")
        if entry.get("stale") is True:
            stale[interface] += 1
        else:
            times[interface].append(ms)
    out = {}
    for interface, values in times.items():
        out[interface] = InterfacePings(
            peers=len(values),
            stale=stale[interface],
            max_seconds=max(values) / 1000.0 if values else None,
            mean_seconds=math.fsum(values) / len(values) / 1000.0 if values else None,
            median_seconds=statistics.median(values) / 1000.0 if values else None,
        )
    return NetworkPings(out, entries_dropped=max(0, len(entries) - max_entries))
