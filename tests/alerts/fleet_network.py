"""The fleet's OSD heartbeat pings (tests/alerts/fleet.py): the ``osd`` collector's
``cephnode_osd_heartbeat_*`` series (docs/metrics.md), modelled, and the network faults.

Model (magnitudes chosen, order of the seeds' 100GbE all-NVMe cluster; shapes from the
recorded replies in tests/fixtures/ceph/network): an OSD's median peer ping is 0.25 ms on
the cluster network (``back``) and 0.8 of that on the public one (``front``), times a
static per-host (8 %) and per-OSD (15 %) log-normal factor, an AR(1) wander (5 % a
minute) and up to 1.3x with the load swing (busier NICs and messengers). The mean is a
little above the median, the worst peer 2.5-4 times it. A slow host or OSD would also
raise the worst (and a little the mean) of the OSDs that ping it, which this model
leaves out: the rules read the medians only, which a few slow peers do not move.

Faults and episodes:

- ``network_host``: the host's cluster-network link slow (packet loss and retransmits:
  25 ms median) from ``Timeline.network``'s first minute to its second; the first scrape
  after the onset sees half of it (the peers' 1-minute intervals close over that minute).
- ``network_osd``: one OSD of another host whose pings are slow on both networks (its
  messenger starved: 15 ms), over the same minutes.
- The laggy episode's host (``Faults.laggy``): its network stalls, so its OSDs' cluster
  pings take 1.5 s while it lasts and 0.5 s for the minute after; CephNodeLaggyPGs and its
  attribution name it, and the heartbeat alert must not name it a second time.
- The stalled replica (``Faults.stalled_osd``): it answers nothing while stopped (no
  series), then its own pings, answered while it was stopped, average 2 s for a minute.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.alerts.fleet import Expect, Fleet, Generator, Host, Writer

BACK_MEDIAN_S = 0.00025
FRONT_SHARE = 0.8
SWING_PING = 0.3  # the median's rise at the swing's peak
HOST_SLOW_S = 0.025
OSD_SLOW_S = 0.015
LAGGY_STALL_S = 1.5
LAGGY_AFTER_S = 0.5
STALLED_AFTER_S = 2.0

MAX = "cephnode_osd_heartbeat_ping_max_seconds"
MEAN = "cephnode_osd_heartbeat_ping_mean_seconds"
MEDIAN = "cephnode_osd_heartbeat_ping_median_seconds"
HOST_MEDIAN = "cephnode_osd_host_heartbeat_ping_median_seconds"
NAMES = frozenset({MAX, MEAN, MEDIAN, HOST_MEDIAN})
ALERT = "CephNodeHeartbeatPingOutlier"


def write_heartbeats(gen: Generator, w: Writer, host: Host) -> None:
    """Write the heartbeat series of every OSD of ``host``."""
    if not any(gen.want(n) for n in NAMES):
        return
    from tests.alerts.fleet import _rng

    fleet, sc = gen.fleet, gen.sc
    f, tl = fleet.faults, fleet.timeline
    n = len(gen.times)
    seed = fleet.seed
    host_factor = math.exp(_rng(seed, "ping-host", host.name).gauss(0, 0.08))
    slow_window = gen._during(*tl.network)
    onset = [m and (i == 0 or not slow_window[i - 1]) for i, m in enumerate(slow_window)]
    laggy = [sc.in_laggy(t, wk) for t, wk in zip(gen.times, gen.weeks, strict=True)]
    stall = gen._during(*tl.stalled)
    # Per scrape, each OSD's larger median of its two networks: the exporter's host median.
    larger: list[list[float]] = [[] for _ in range(n)]
    for osd in host.osds:
        srng = _rng(seed, "ping-osd-static", osd.id)
        static = host_factor * math.exp(srng.gauss(0, 0.15))
        rng = _rng(seed, "ping-osd", osd.id)
        tgt = {"ceph_daemon": osd.ceph_daemon, **gen.target(host)}
        wander = 0.0
        values: dict[str, dict[str, list[float | None]]] = {
            name: {"back": [], "front": []} for name in (MAX, MEAN, MEDIAN)
        }
        for i in range(n):
            wander = 0.8 * wander + rng.gauss(0, 0.05)
            swing = sc.swing(gen.times[i], gen.weeks[i])
            base = BACK_MEDIAN_S * static * (1 + SWING_PING * swing) * math.exp(wander)
            back, front = base, base * FRONT_SHARE
            share = 0.5 if onset[i] else 1.0
            if slow_window[i] and host.name == f.network_host:
                back = max(back, HOST_SLOW_S * share)
            if slow_window[i] and osd.id == f.network_osd:
                back = max(back, OSD_SLOW_S * share)
                front = max(front, OSD_SLOW_S * share)
            if host.name == f.laggy:
                if laggy[i]:
                    back = LAGGY_STALL_S
                elif i > 0 and laggy[i - 1]:
                    back = LAGGY_AFTER_S
            stalled = osd.id == f.stalled_osd
            for iface, median in (("back", back), ("front", front)):
                if stalled and stall[i]:
                    value: tuple[float | None, ...] = (None, None, None)
                elif stalled and i > 0 and stall[i - 1]:
                    value = (STALLED_AFTER_S * 1.5, STALLED_AFTER_S, STALLED_AFTER_S)
                else:
                    worst = median * rng.uniform(2.5, 4.0)
                    value = (worst, median * rng.uniform(1.05, 1.2), median)
                for name, v in zip((MAX, MEAN, MEDIAN), value, strict=True):
                    values[name][iface].append(v)
            medians = [values[MEDIAN][x][-1] for x in ("back", "front")]
            running = gen.osd_running[osd.id][i]
            if running and medians[0] is not None and medians[1] is not None:
                larger[i].append(max(medians[0], medians[1]))
        for name, per_iface in values.items():
            if gen.want(name):
                for iface, vals in per_iface.items():
                    w.write(name, {**tgt, "interface": iface}, vals)
    if gen.want(HOST_MEDIAN) and host.osds:
        host_values = [statistics.median(x) if x else None for x in larger]
        w.write(HOST_MEDIAN, gen.target(host), host_values)


def expected(fleet: Fleet, event: object) -> list[Expect]:
    """The heartbeat alert of each network fault: the slow host by itself (its OSDs are
    not named), the slow OSD with its host; ``event`` is expected_alerts' helper."""
    f, tl = fleet.faults, fleet.timeline
    a, b = tl.network
    out = []
    if f.network_host:
        labels = (("instance", f"{f.network_host}:10060"), ("ceph_daemon", None))
        out.append(event(ALERT, labels, a, b))  # type: ignore[operator]
    if f.network_osd >= 0:
        osd = fleet.osd(f.network_osd)
        labels = (("instance", f"{osd.host}:10060"), ("ceph_daemon", osd.ceph_daemon))
        out.append(event(ALERT, labels, a, b))  # type: ignore[operator]
    return out
