"""Checks of the OSDs on this node: debug levels, PGs per OSD, NUMA placement against
the NVMe, and RocksDB builds without optimisation (all per OSD).

An OSD that did not answer, or whose process or device was unreadable, is ``unknown``
for the checks that need what it did not give; a fact that makes a check not apply
(memstore, no block device, a process in another pid namespace) is ``skip``."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.ceph import perf
from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.osd import OSDCollectorFacts

# The check whose subsystems the osd collector exports the debug levels of (Profile.reads).
DEBUG_LEVELS = "osd.debug_levels"


def _validate(params: dict[str, Any]) -> None:
    subs = params["subsystems"]
    if not subs or not all(isinstance(s, str) and s.strip() for s in subs):
        raise ValueError("subsystems must be a non-empty list of debug subsystem names")
    if params["max_level"] < 0:
        raise ValueError("max_level must be >= 0")


@check(DEBUG_LEVELS, "osd", validate=_validate, subsystems=list[str], max_level=int)
def debug_levels(facts: OSDCollectorFacts, params: dict[str, Any]) -> list[Finding]:
    """Debug logging costs CPU on the I/O path even when nothing reaches the log file:
    every message up to the gather level is formatted into the in-memory ring (dout's
    should_gather, ceph/ceph src/log/SubsystemMap.h); Ceph's defaults are mostly 1/5
    (src/common/subsys.h)."""
    subsystems = [s.removeprefix("debug_") for s in params["subsystems"]]
    limit = params["max_level"]
    expected = f"debug level (log/gather) <= {limit}/{limit} for {', '.join(subsystems)}"
    if not facts.osds:
        return [Finding("", None, "no OSD on this node", expected)]
    out = []
    for osd in facts.osds:
        if osd.config is None:
            why = f"no answer: {osd.reason}"
            out.append(Finding.cannot_judge(osd.ceph_daemon, why, expected))
            continue
        high = {
            sub: level
            for sub in subsystems
            if (level := osd.config.debug.get(sub)) is not None
            and max(level.log, level.gather) > limit
        }
        others = sorted(
            sub
            for sub, level in osd.config.debug.items()
            if sub not in subsystems and max(level.log, level.gather) > limit
        )
        tail = f"; also non-zero, not judged: {len(others)}" if others else ""
        if not high:
            out.append(
                Finding(osd.ceph_daemon, False, f"all listed at most {limit}{tail}", expected)
            )
            continue
        observed = ", ".join(f"debug_{s}={lv.log}/{lv.gather}" for s, lv in sorted(high.items()))
        zero = f"{limit}/{limit}"
        hint = (
            "at runtime for all OSDs: "
            + "; ".join(f"ceph config set osd debug_{s} {zero}" for s in sorted(high))
            + "; or in ceph.conf [osd]: "
            + ", ".join(f"debug_{s} = {zero}" for s in sorted(high))
        )
        out.append(Finding(osd.ceph_daemon, True, observed + tail, expected, hint))
    return out


# ----------------------------------------------------------------------------- osd.pg_count


def _validate_pg_count(params: dict[str, Any]) -> None:
    if not 0 <= params["min_pgs"] <= params["max_pgs"]:
        raise ValueError("need 0 <= min_pgs <= max_pgs")


@check("osd.pg_count", "osd", validate=_validate_pg_count, min_pgs=int, max_pgs=int)
def pg_count(facts: OSDCollectorFacts, params: dict[str, Any]) -> list[Finding]:
    """PGs per OSD (perf dump ``numpg``: primary and replica). Too few spread the data and
    the work unevenly over the OSDs and their shard threads; too many cost memory and
    peering time per OSD. Ceph aims at mon_target_pg_per_osd = 100 and refuses to create
    PGs beyond mon_max_pg_per_osd = 250 (ceph/ceph src/common/options/global.yaml.in)."""
    lo, hi = params["min_pgs"], params["max_pgs"]
    expected = f"{lo}-{hi} PGs per OSD (primary and replica)"
    if not facts.osds:
        return [Finding("", None, "no OSD on this node", expected)]
    out = []
    for osd in facts.osds:
        n = osd.counters.integers.get("osd.numpg") if osd.counters is not None else None
        if n is None:
            why = f"no answer: {osd.reason}" if not osd.ok else "perf dump has no numpg"
            out.append(Finding.cannot_judge(osd.ceph_daemon, why, expected))
            continue
        if n < lo:
            hint = (
                "raise pg_num of the pools that hold the data (ceph osd pool set <pool> "
                "pg_num <n>, a power of two), or let the autoscaler do it (ceph osd pool "
                "set <pool> pg_autoscale_mode on; it aims at mon_target_pg_per_osd, 100)"
            )
        else:
            hint = (
                "lower pg_num of the largest pools or add OSDs; every PG costs the OSD "
                "memory (its log) and peering work (mon_max_pg_per_osd, 250, stops pool "
                "creation beyond it)"
            )
        out.append(Finding(osd.ceph_daemon, not lo <= n <= hi, f"{n} PGs", expected, hint))
    return out


# ----------------------------------------------------------------------------- osd.numa


@check("osd.numa", "osd", allow_spanning=bool)
def numa(facts: OSDCollectorFacts, params: dict[str, Any]) -> list[Finding]:
    """An OSD's threads should run on the NUMA node of its NVMe: every completion then
    wakes a thread on the node whose memory and PCIe root the DMA used, instead of
    crossing the socket interconnect. With ``allow_spanning`` an OSD allowed on several
    nodes passes as long as the NVMe's node is one of them (an unpinned OSD)."""
    spanning = params["allow_spanning"]
    expected = (
        "threads allowed on the NVMe's NUMA node"
        if spanning
        else "threads allowed only on the NVMe's NUMA node"
    )
    if not facts.osds:
        return [Finding("", None, "no OSD on this node", expected)]
    out = []
    for osd in facts.osds:
        d = osd.ceph_daemon
        if not osd.ok:
            out.append(Finding.cannot_judge(d, f"no answer: {osd.reason}", expected))
            continue
        if osd.process is None:
            if osd.process_note is not None:
                out.append(Finding(d, None, f"process not read: {osd.process_note}", expected))
            else:
                why = f"process not read: {osd.process_error or 'unknown'}"
                out.append(Finding.cannot_judge(d, why, expected))
            continue
        if facts.numa_nodes is None:
            out.append(Finding(d, None, "no NUMA topology (a kernel without NUMA)", expected))
            continue
        if osd.block is None:
            if osd.block_error is None:
                why = osd.block_note or "unknown"
                out.append(Finding(d, None, f"no device: {why}", expected))
            else:
                out.append(Finding.cannot_judge(d, f"no device: {osd.block_error}", expected))
            continue
        nvme = [(disk, c, n) for disk in osd.block.disks for c, n in zip(disk.controllers,
                disk.numa_nodes, strict=True)]  # fmt: skip
        if not nvme:
            names = ", ".join(disk.name for disk in osd.block.disks)
            out.append(Finding(d, None, f"not on NVMe ({names})", expected))
            continue
        unread = [c for _, c, n in nvme if n is None]
        if unread:
            why = f"NUMA node of {', '.join(unread)} unreadable"
            out.append(Finding.cannot_judge(d, why, expected))
            continue
        unknown = [c for _, c, n in nvme if n is not None and n < 0]
        if unknown:
            why = f"NUMA node of {', '.join(unknown)} unknown (numa_node -1)"
            out.append(Finding(d, None, why, expected))
            continue
        allowed = osd.allowed_cpus or {}
        if not allowed:
            out.append(Finding(d, None, "no online CPU in the OSD's affinity", expected))
            continue
        drive_nodes = {n for _, _, n in nvme if n is not None}
        where = ", ".join(f"{disk.name} ({c}) on node {n}" for disk, c, n in nvme)
        runs = ", ".join(f"node {node} ({cpus} CPUs)" for node, cpus in sorted(allowed.items()))
        observed = f"allowed on {runs}; {where}"
        if len(facts.numa_nodes) == 1:
            out.append(Finding(d, False, f"{observed} (one NUMA node)", expected))
            continue
        on = set(allowed)
        # spanning: fine while the drive's node is among them; else: only the drive's.
        deviates = not (on & drive_nodes) if spanning else not on <= drive_nodes
        target = ",".join(str(n) for n in sorted(drive_nodes))
        hint = (
            f"pin the OSD to node {target}: ceph config set {d} osd_numa_node {target}, "
            f"then restart it (Ceph sets every thread's affinity at start; "
            f"osd_numa_auto_affinity does it by itself when the OSD's network interface "
            f"is on the same node); or CPUAffinity=/NUMAPolicy= in a systemd drop-in for "
            f"ceph-osd@{osd.socket.osd_id}"
        )
        out.append(Finding(d, deviates, observed, expected, hint))
    return out


# ----------------------------------------------------------------------------- rocksdb build

# Ceph's Debian packaging (debian/rules via debhelper) configures with
# CMAKE_BUILD_TYPE=None and puts -O2 only in CXXFLAGS; the bundled RocksDB, built as a
# CMake external project, was handed the build type but not those flags, so it was
# compiled without optimisation. Found by Mark Nelson on the 17.2.7 Focal packages
# (ceph/ceph PR #54891: 4K random writes doubled, compaction 2-3x faster once rebuilt;
# Canonical hit the same in 2020, Launchpad bug 1894453). Fixed by ceph/ceph PR #54918
# ("cmake/modules/BuildRocksDB.cmake: inherit parent's CMAKE_CXX_FLAGS", merged Dec 2023),
# backported as PR #55500 (Pacific), #55501 (Quincy), #55502 (Reef). The release notes
# list them in v16.2.15, v17.2.8 and v18.2.4 (doc/releases/pacific.rst, quincy.rst and
# the v18.2.4 announcement); Squid (19.x) branched after the merge. Luminous to Octopus
# ended before the fix. RPM builds leave CMAKE_BUILD_TYPE unset, so Ceph's default
# RelWithDebInfo reached RocksDB (Kefu Chai in PR #22286): RPMs and the container images
# built from them (cephadm, Rook) were not affected.
ROCKSDB_FIXED: dict[int, tuple[int, int, int]] = {16: (16, 2, 15), 17: (17, 2, 8), 18: (18, 2, 4)}
ROCKSDB_FIX_PRS = {16: "#55500", 17: "#55501", 18: "#55502"}
FIRST_JUDGED_MAJOR = 12  # Luminous: BlueStore (and its RocksDB) the default
FIRST_FIXED_MAJOR = 19  # Squid
# Never released by Ceph: Debian packaged an early build of v18.2.4 as 18.2.3 (v18.2.4
# announcement); whether that build had PR #55502 cannot be told from the version.
UNCLEAR_VERSIONS = frozenset({(18, 2, 3)})
# Object stores without RocksDB: memstore keeps everything in RAM.
NO_ROCKSDB = frozenset({"memstore"})


def _fmt(version: tuple[int, int, int]) -> str:
    return ".".join(str(v) for v in version)


@check("osd.rocksdb_build", "osd")
def rocksdb_build(facts: OSDCollectorFacts, params: dict[str, Any]) -> list[Finding]:
    """Ceph releases whose Debian/Ubuntu packages built the bundled RocksDB without
    optimisation (bottleneck 3 of the reference cluster, Quincy 17.2.7 on Ubuntu 20.04).
    The version does not tell how a package was built: an OSD in the cephadm layout runs
    in a container (RPM build, not affected) and passes; any other OSD of an affected
    release fails with that caveat in the result."""
    expected = (
        "a release with ceph PR #54918 (16.2.15, 17.2.8, 18.2.4, 19.x or later), or a "
        "build that is not Ceph's Debian packaging"
    )
    if not facts.osds:
        return [Finding("", None, "no OSD on this node", expected)]
    out = []
    for osd in facts.osds:
        d = osd.ceph_daemon
        if not osd.ok or osd.version is None or osd.config is None:
            out.append(Finding.cannot_judge(d, f"no answer: {osd.reason}", expected))
            continue
        if osd.config.objectstore in NO_ROCKSDB:
            why = f"{osd.version}, {osd.config.objectstore}: no RocksDB"
            out.append(Finding(d, None, why, expected))
            continue
        version = perf.version_tuple(osd.version)
        if version is None:
            why = f"version {osd.version!r} not understood"
            out.append(Finding.cannot_judge(d, why, expected))
            continue
        major = version[0]
        if major < FIRST_JUDGED_MAJOR:
            why = f"{osd.version}: older than Luminous, not judged"
            out.append(Finding(d, None, why, expected))
            continue
        if version in UNCLEAR_VERSIONS:
            why = (
                f"{osd.version}: never released by Ceph (Debian packaged an early v18.2.4 "
                "build); whether it has the fix cannot be told from the version"
            )
            out.append(Finding(d, None, why, expected))
            continue
        fixed = ROCKSDB_FIXED.get(major)
        if major >= FIRST_FIXED_MAJOR or (fixed is not None and version >= fixed):
            pr = ROCKSDB_FIX_PRS.get(major, "#54918")
            out.append(Finding(d, False, f"{osd.version}: has the fix (PR {pr})", expected))
            continue
        if osd.socket.layout == "cephadm":
            why = (
                f"{osd.version}, an affected release, but run by cephadm: its container "
                "image is an RPM build, which optimised RocksDB"
            )
            out.append(Finding(d, False, why, expected))
            continue
        upgrade = f"{_fmt(fixed)} or later" if fixed is not None else "Pacific 16.2.15 or later"
        observed = (
            f"{osd.version}: a release whose Debian/Ubuntu packages built RocksDB without "
            "optimisation; the version cannot tell the packaging: affected if built by "
            "Ceph's debian/rules (download.ceph.com, Proxmox), not if from RPMs"
        )
        hint = (
            "see which build runs: dpkg-query -W ceph-osd (download.ceph.com versions look "
            f"like 17.2.7-1focal); upgrade to {upgrade}, or rebuild with "
            "'extraopts += -DCMAKE_BUILD_TYPE=RelWithDebInfo' in debian/rules; an RPM or "
            "container build is not affected: then set osd.rocksdb_build: "
            "{enabled: false} in the site profile"
        )
        out.append(Finding(d, True, observed, expected, hint))
    return out
