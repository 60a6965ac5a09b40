"""The reference fleet's tuning facts over six hours, for the fleet-drift rules.

Why a scenario of its own: CephNodeFactDrift names a host only after the number of hosts
with its value has stood still for an hour and then for an hour's hold, longer than the
latency scenario of fleet.py (65 minutes, 630 OSDs' histograms every minute). The drift
rules read only the hosts' facts, so this writes only those, for the same 68 OSD hosts
(630 OSDs) and 3 MON hosts, every 60 s, from the real exporter's expositions of each host
kind (fleet.collect_snapshots: the tuned node, and the node rebooted without ``iommu=pt``,
with one namespace back on mq-deadline, ...):

- the series the drift rules and ``instance:cephnode_osd_sockets:max1h`` read (the
  names come from the rules, ``replay.needed_metrics``), with each host's kind over time;
- ``cephnode_osd_sockets`` (the host's OSDs, 0 on the MON hosts) and one
  ``cephnode_osd_info`` per OSD (version 17.2.8), which the snapshots have no sockets for.

What happens (``Drift``): from ``fault_at`` one host runs without ``iommu=pt`` (its
kernel command line, IOMMU parameters and group types differ from every other host's)
and another has one namespace on mq-deadline; from ``upgrade_at`` every OSD host in turn,
one every ``upgrade_step_s``, reboots (two scrapes missed) into a new kernel release with
a new BIOS version, as an operator's rolling update does. Which facts each faulty host
then differs in is computed here from the snapshots (``host_facts``), independently of
the rules' PromQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.alerts import fleet as F

Labels = dict[str, str]
# The new kernel and BIOS of the rolling update.
NEW_RELEASE = "5.15.0-94-generic"
NEW_BIOS = "1.7.1"
# Scrapes missed while a host reboots during the update.
REBOOT_SCRAPES = 2
# tuning_fact_hash facts the rules leave out (config.libsonnet driftHashExcluded).
HASH_EXCLUDED = frozenset(
    {
        "nvme_controller_info",
        "bios_info",
        "cpu_microcode_info",
        "kernel_release_info",
        "tuned_profile_info",
        "osd_info",
    }
)


@dataclass(frozen=True)
class Drift:
    """Minutes from the start; empty host names: not injected."""

    end: int = 300
    iommu_host: str = "ceph-osd-r6615-23"
    scheduler_host: str = "ceph-osd-r6615-64"
    fault_at: int = 10
    upgrade_at: int = 30  # -1: no rolling update
    upgrade_step_s: int = 180

    @classmethod
    def uniform(cls) -> Drift:
        return cls(iommu_host="", scheduler_host="", upgrade_at=-1)


def kind_of(host: F.Host, drift: Drift, minute: float) -> str:
    if host.kind == "mon":
        return "mon"
    if minute >= drift.fault_at and host.name == drift.iommu_host:
        return "iommu"
    if minute >= drift.fault_at and host.name == drift.scheduler_host:
        return "scheduler"
    return "healthy"


def upgraded_at(fleet: F.Fleet, drift: Drift) -> dict[str, float]:
    """Minute each OSD host comes back from its reboot into the new kernel and BIOS."""
    if drift.upgrade_at < 0:
        return {}
    hosts = [h for h in fleet.hosts if h.kind != "mon"]
    return {
        h.name: drift.upgrade_at + (i * drift.upgrade_step_s) / 60 + REBOOT_SCRAPES
        for i, h in enumerate(hosts)
    }


def _upgraded(name: str, labels: Labels) -> Labels:
    if name == "cephnode_kernel_release_info":
        return {**labels, "release": NEW_RELEASE}
    if name == "cephnode_bios_info":
        return {**labels, "version": NEW_BIOS}
    return labels


def host_facts(snapshot: F.Snapshot) -> dict[str, set[str]]:
    """fact -> values of a host of this kind, as the drift rules define them
    (alerts/mixin/rules/drift.libsonnet), computed from the exposition in Python."""
    out: dict[str, set[str]] = {}
    readable = {
        "cephnode_bios_info": ("bios_version", "version"),
        "cephnode_cpu_microcode_info": ("cpu_microcode", "revision"),
        "cephnode_kernel_release_info": ("kernel_release", "release"),
        "cephnode_tuned_profile_info": ("tuned_profile", "profile"),
    }
    for name, labels, value in snapshot.samples:
        if name in readable:
            fact, key = readable[name]
            out.setdefault(fact, set()).add(labels.get(key, ""))
        elif name == "cephnode_nvme_scheduler_info":
            out.setdefault(f"nvme_scheduler:{labels['device']}", set()).add(labels["scheduler"])
        elif name == "cephnode_sysctl_value":
            index = labels.get("index", "")
            fact = f"sysctl:{labels['name']}" + (f"[{index}]" if index else "")
            # As count_values writes it (Go strconv.FormatFloat(v, 'f', -1, 64)).
            out.setdefault(fact, set()).add(str(int(value)) if value.is_integer() else repr(value))
        elif name == "cephnode_tuning_fact_hash" and labels["fact"] not in HASH_EXCLUDED:
            out.setdefault(labels["fact"], set()).add(f"{int(value)}")
    return out


def drifted_facts(snapshots: dict[str, F.Snapshot], kind: str) -> set[str]:
    """Facts in which a host of ``kind`` differs from a healthy one."""
    mine, theirs = host_facts(snapshots[kind]), host_facts(snapshots["healthy"])
    return {f for f in mine.keys() | theirs.keys() if mine.get(f) != theirs.get(f)}


def generate(
    fleet: F.Fleet,
    drift: Drift,
    start: int,
    snapshots: dict[str, F.Snapshot],
    needed: set[str],
    outdir: Path,
) -> list[Path]:
    """OpenMetrics files of every host's fact series, every 60 s from ``start``."""
    times = [start + 60 * i for i in range(drift.end + 1)]
    writer = F.Writer(outdir, times)
    upgrades = upgraded_at(fleet, drift)
    for host in fleet.hosts:
        target = {
            "job": F.EXPORTER_JOB,
            "cluster": F.CLUSTER,
            "instance": host.instance,
        }
        up_at = upgrades.get(host.name)
        down = (up_at - REBOOT_SCRAPES, up_at) if up_at is not None else (float("inf"),) * 2
        series: dict[tuple[str, tuple[tuple[str, str], ...]], list[float | None]] = {}
        for i in range(len(times)):
            minute = float(i)
            if down[0] <= minute < down[1]:
                continue  # rebooting: no scrape
            kind = kind_of(host, drift, minute)
            upgraded = up_at is not None and minute >= up_at
            for name, labels, value in snapshots[kind].samples:
                if name not in needed or name in ("cephnode_osd_sockets", "cephnode_osd_info"):
                    continue
                lb = _upgraded(name, labels) if upgraded else labels
                key = (name, tuple(sorted({**lb, **target}.items())))
                series.setdefault(key, [None] * len(times))[i] = value
            key = ("cephnode_osd_sockets", tuple(sorted(target.items())))
            series.setdefault(key, [None] * len(times))[i] = float(len(host.osds))
            for osd in host.osds:
                lb = {
                    **target,
                    "ceph_daemon": osd.ceph_daemon,
                    "version": F.CEPH_VERSION,
                    "objectstore": "bluestore",
                    "allocator": "tcmalloc",
                }
                key = ("cephnode_osd_info", tuple(sorted(lb.items())))
                series.setdefault(key, [None] * len(times))[i] = 1.0
        for (name, labels), values in series.items():
            writer.write(name, dict(labels), values)
    return writer.close()
