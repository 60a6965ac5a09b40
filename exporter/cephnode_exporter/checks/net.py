"""Checks ``net.mtu`` and ``net.rings``: jumbo frames and full NIC rings (MTU 9000, and
RX/TX rings raised to the NIC's maximum as ``ethtool -G <dev> rx N tx N`` sets them).

Which interfaces: with the profile's ``interfaces`` empty (the default), the physical
ports that carry Ceph traffic: those under an interface holding an address Ceph's
daemons listen on (the public and cluster networks), followed through VLANs and bonds
to the ports (:mod:`cephnode_exporter.hostfs.inet`). Every other port is reported as
``skip`` with the reason: a 1 GbE management port at MTU 1500 is not a fault. When the
node has no Ceph address (no daemon, or one bound to the wildcard address), or one
that no port read leads to, every port is judged, as the observed text says. When the
address sources are unreadable no port can be judged: every port is ``unknown`` (the
text says the Ceph ports are unknown), never a pass. A port whose link is down carries
no traffic and is ``skip``; a port whose MTU or rings were unreadable is ``unknown``.

``net.mtu`` also judges each virtual interface holding a Ceph address (a VLAN, a bond, a
bridge): Ceph's packets there are capped by the smallest MTU on the path from it down to
the ports (VLAN -> bond -> ports; a VLAN at 1500 over a bond and ports at 9000 sends
1500-byte packets), so that interface is the subject and its path the observed text; the
ports keep their own findings, and rings stay on the ports (a VLAN has none). Each
too-small MTU is one finding, on the interface that has it: a VLAN at 9000 capped only by
ports or bonds that deviate on rows of their own is ``skip`` with the path and the row
that has the fault in its text (never a pass), and that row names it ("limits bond0.100
above it"), so one port at 1500 under N VLANs is one alert, not N + 1. A lower link that
cannot be followed (garbled; missing while the device below has its ``upper_`` twin, or
missing from a VLAN, which always sits on a device; or leading to an interface not read)
makes that subject ``unknown`` and, since which ports carry Ceph is then unknown too,
every port of the default selection.

With a regular expression, the interfaces whose whole name matches, physical or virtual
(``bond0``, ``bond0.100``), whatever their link state or addresses: the profile named
them, so they are judged (a virtual one on its path, as above). Names the collector
excluded (``--collector.net.exclude``) are never seen here.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.net import NetFacts
from cephnode_exporter.hostfs.names import natural_key
from cephnode_exporter.hostfs.net import RINGS_ERROR, RINGS_NOT_READ, RINGS_UNSUPPORTED, Interface

# Ceph addresses named in one observed text at most; the rest are counted.
SHOWN_ADDRESSES = 4

# The rings judged: rx_mini and rx_jumbo (old Broadcom/3Com NICs) are exported but their
# use depends on the MTU, so a jumbo ring at 0 is no fault.
JUDGED_RINGS = ("rx", "tx")


def _validate_interfaces(params: dict[str, Any]) -> None:
    try:
        re.compile(params["interfaces"])
    except re.error as exc:
        raise ValueError(f"interfaces is not a regular expression: {exc}") from None


def _validate_mtu(params: dict[str, Any]) -> None:
    _validate_interfaces(params)
    # 68: the IPv4 minimum (RFC 791); 65535: the largest MTU IP can use.
    if not 68 <= params["mtu"] <= 65535:
        raise ValueError(f"mtu must be between 68 and 65535, not {params['mtu']}")


def _selected(facts: NetFacts, pattern: str) -> tuple[list[Interface], bool]:
    """The interfaces a check judges, and whether the profile named them explicitly."""
    if pattern:
        regex = re.compile(pattern)
        return [i for i in facts.interfaces.values() if regex.fullmatch(i.name)], True
    return facts.physical, False


@dataclass(frozen=True)
class _CephPorts:
    """Which physical ports the default selection judges."""

    # Ceph port -> the Ceph addresses it carries ("10.1.0.11", "10.1.0.11 on bond0.100").
    carried: dict[str, list[str]]
    # Set when every port whose link is up is judged: why.
    everywhere: str = ""
    # Set when no port can be judged: why the Ceph ports are unknown.
    unknown: str = ""
    # Where Ceph listens, for the text of a port left out.
    where: str = ""


@dataclass(frozen=True)
class _Path:
    """An interface and the interfaces below it, through the ``lower_<name>`` links of
    VLANs, macvlans, bonds and bridges down to the physical ports."""

    # Level 0 is the interface itself, level 1 the devices right below it, and so on;
    # each interface once, at the first level it is met.
    levels: tuple[tuple[str, ...], ...]
    # The physical ports reached, sorted.
    ports: tuple[str, ...]
    # Set when a lower link could not be followed or led to an interface that was not
    # read: what lies below is unknown.
    broken: str = ""


def _walk(facts: NetFacts, name: str) -> _Path:
    """The path below ``name`` (an interface the collector read). Interfaces excluded by
    --collector.net.exclude are left out, as everywhere else; one neither read nor
    excluded (left out by --collector.net.max-interfaces, or gone during the read) and
    a garbled link break the path."""
    levels: list[tuple[str, ...]] = []
    ports: list[str] = []
    problems: list[str] = []
    # The kernel makes lower_<b> in a and upper_<a> in b together (net/core/dev.c
    # __netdev_adjacent_dev_insert): an upper_ link without its lower_ twin is a lower
    # link gone missing.
    twins: dict[str, list[str]] = defaultdict(list)
    for other in facts.interfaces.values():
        for up in other.upper:
            twins[up].append(other.name)
    seen = {name}
    level = [name]
    while level:
        levels.append(tuple(level))
        below: list[str] = []
        for current in level:
            iface = facts.interfaces[current]
            if not iface.virtual:
                ports.append(current)
                continue
            if iface.lower_error:
                problems.append(iface.lower_error)
            for lower in twins.get(current, ()):
                if lower not in iface.lower and not iface.lower_error:
                    problems.append(
                        f"lower_{lower} of {current} missing ({lower} has upper_{current})"
                    )
            if not iface.lower and not iface.lower_error and not twins.get(current):
                # Nothing links below, and nothing says why. A VLAN always has a device
                # (net/8021q/vlan.c register_vlan_dev links it as the VLAN's lower
                # device): without the link it sits on a device in another network
                # namespace or the link is gone, and its own MTU is not its path's.
                if iface.devtype == "vlan":
                    problems.append(
                        f"{current} is a VLAN without a lower_ link: its device is in "
                        "another network namespace or the link is missing"
                    )
                elif iface.devtype is None:
                    problems.append(
                        f"uevent of {current} unreadable: whether a device lies below is unknown"
                    )
            for lower in iface.lower:
                if lower in seen:
                    continue
                seen.add(lower)
                if lower in facts.interfaces:
                    below.append(lower)
                elif lower not in facts.excluded:
                    why = f"{lower} below {current} was not read"
                    if facts.items_dropped:
                        why += " (more interfaces than --collector.net.max-interfaces)"
                    problems.append(why)
        level = below
    broken = "; ".join(dict.fromkeys(problems))
    return _Path(tuple(levels), tuple(sorted(ports)), broken)


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN_ADDRESSES])
    more = len(items) - SHOWN_ADDRESSES
    return shown + (f" and {more} more" if more > 0 else "")


def _ceph_ports(facts: NetFacts) -> _CephPorts:
    ceph = facts.ceph
    if ceph.error is not None:
        return _CephPorts({}, unknown=f"Ceph ports unknown ({ceph.error})")
    wildcard = ceph.wildcard
    if wildcard:
        why = f"Ceph listens on every address ({wildcard[0]}): every port judged"
        return _CephPorts({}, everywhere=why)
    if not ceph.interfaces:
        return _CephPorts({}, everywhere="no Ceph address on this node: every port judged")
    carried: dict[str, list[str]] = defaultdict(list)
    where = []
    everywhere = ""
    broken: list[str] = []
    for address, holders in ceph.interfaces.items():
        if not holders:
            everywhere = everywhere or (
                f"Ceph address {address} is on no interface's network: every port judged"
            )
            continue
        for holder in holders:
            path = _walk(facts, holder) if holder in facts.interfaces else None
            if path is not None and path.broken:
                # Some port below may carry Ceph: none is judged on a guess.
                broken.append(path.broken)
                continue
            if path is None or not path.ports:
                everywhere = everywhere or (
                    f"Ceph address {address} is on {holder}, above no port the collector "
                    "read: every port judged"
                )
                continue
            where.append(f"{address} on {holder}")
            for port in path.ports:
                carried[port].append(address if port == holder else f"{address} on {holder}")
    if broken:
        return _CephPorts({}, unknown=f"Ceph ports unknown ({'; '.join(dict.fromkeys(broken))})")
    if everywhere:
        return _CephPorts({}, everywhere=everywhere)
    return _CephPorts(dict(carried), where=_listing(where))


def _ceph_holders(facts: NetFacts) -> dict[str, list[str]]:
    """The virtual interfaces the collector read that hold a Ceph address (a VLAN, a bond,
    a bridge), by name, with their Ceph addresses."""
    if facts.ceph.error is not None:
        return {}
    out: dict[str, list[str]] = defaultdict(list)
    for address, holders in facts.ceph.interfaces.items():
        for holder in holders:
            iface = facts.interfaces.get(holder)
            if iface is not None and iface.virtual:
                out[holder].append(address)
    return {name: out[name] for name in sorted(out, key=natural_key)}


def _scope(sel: _CephPorts, iface: Interface, link: str, what: str, expected: str) -> Finding | str:
    """A finding for a port the default selection leaves out, else the note that ends
    the judged port's parenthesis (the Ceph addresses it carries, or why all are judged)."""
    if sel.unknown:
        observed = f"{what} ({link}): {sel.unknown}: not judged"
        return Finding.cannot_judge(iface.name, observed, expected)
    if sel.everywhere:
        return sel.everywhere
    addresses = sel.carried.get(iface.name)
    if not addresses:
        observed = f"{what} ({link}): no Ceph address on this port (Ceph: {sel.where}): not judged"
        return Finding(iface.name, None, observed, expected)
    return "Ceph " + _listing(addresses)


def _none_selected(facts: NetFacts, pattern: str, expected: str) -> list[Finding]:
    if pattern:
        observed = f"no interface matches {pattern!r}"
    else:
        observed = "no physical network interface found"
    if facts.excluded:
        observed += f" (excluded by --collector.net.exclude: {', '.join(facts.excluded)})"
    return [Finding("", None, observed, expected)]


def _link(iface: Interface) -> str:
    if iface.link_down:
        return f"link {iface.operstate}"
    if iface.speed_mbps:
        return f"link {iface.operstate or 'unknown'}, {_speed(iface.speed_mbps)}"
    return f"link {iface.operstate or 'unknown'}"


def _speed(mbps: int) -> str:
    return f"{mbps // 1000} Gb/s" if mbps >= 1000 and mbps % 1000 == 0 else f"{mbps} Mb/s"


def _persist_mtu(want: int) -> str:
    return (
        f"to persist it: netplan 'mtu: {want}' on the interface (and its bond and "
        f"VLANs), or MTUBytes={want} in the [Link] section of its systemd-networkd "
        f".network file, or nmcli connection modify <connection> 802-3-ethernet.mtu {want}; "
        "switch ports and every peer on the network need the same MTU"
    )


def _via_master(facts: NetFacts, iface: Interface, want: int) -> bool:
    """Whether to raise ``iface``'s MTU on its bond (or bridge): a bond passes its MTU to
    every slave (drivers/net/bonding/bond_main.c bond_change_mtu), but setting the MTU a
    device already has changes nothing (net/core/dev.c dev_set_mtu_ext returns at once),
    so a slave left below a bond that is right is raised on its own."""
    if not iface.master:
        return False
    master = facts.interfaces.get(iface.master)
    return master is None or master.mtu is None or master.mtu < want


def _mtu_hint(facts: NetFacts, iface: Interface, want: int) -> str:
    if not _via_master(facts, iface, want):
        return f"ip link set dev {iface.name} mtu {want}; " + _persist_mtu(want)
    hint = f"ip link set dev {iface.master} mtu {want}"
    hint += f" (set on {iface.master}: a bond passes its MTU to every slave)"
    return hint + "; " + _persist_mtu(want)


def _path_hint(facts: NetFacts, hops: list[Interface], want: int) -> str:
    """Raise every interface of the path below ``want``, the lowest first: the kernel
    refuses a VLAN an MTU above its device's (net/8021q/vlan_dev.c vlan_dev_change_mtu,
    ERANGE), and a bond slave takes its bond's MTU, so the bond is set instead (unless
    the bond is right already: :func:`_via_master`)."""
    names = {h.name for h in hops}
    targets: dict[str, None] = {}
    for hop in reversed(hops):
        if hop.mtu is not None and hop.mtu < want:
            master = hop.master in names and _via_master(facts, hop, want)
            targets[hop.master if master and hop.master else hop.name] = None
    commands = ", then ".join(f"ip link set dev {t} mtu {want}" for t in targets)
    order = "; lower devices first (a VLAN's MTU cannot exceed its device's)"
    return commands + (order if len(targets) > 1 else "") + "; " + _persist_mtu(want)


@dataclass(frozen=True)
class _PathFinding:
    """The finding of an interface judged on its path, and the interfaces on the path
    whose own MTU is below the profile's (the interface itself included): those to raise."""

    finding: Finding
    low: tuple[str, ...] = ()


def _judge_path(
    facts: NetFacts, iface: Interface, want: int, expected: str, note: str, *, named: bool
) -> _PathFinding:
    """``net.mtu`` of a virtual interface (a VLAN, bond or bridge holding a Ceph address,
    or named by the profile): the smallest MTU on its path down to the ports caps its
    packets, whichever interface sets it. Interfaces below whose link is down carry
    nothing and are left out of the smallest; the interface's own link down is ``skip``
    unless the profile named it."""
    own = "unreadable" if iface.mtu is None else str(iface.mtu)
    link = _link(iface)
    if iface.link_down and not named:
        return _PathFinding(Finding(iface.name, None, f"MTU {own}, {link}: not judged", expected))
    tail = f"; {note}" if note else ""
    path = _walk(facts, iface.name)
    if path.broken:
        observed = f"MTU {own} ({link}; the devices below unknown: {path.broken}{tail})"
        return _PathFinding(Finding.cannot_judge(iface.name, observed, expected))
    hops = [facts.interfaces[n] for level in path.levels for n in level]
    counted = [h for h in hops if h is iface or not h.link_down]

    def hop(h: Interface) -> str:
        mtu = "MTU unreadable" if h.mtu is None else str(h.mtu)
        return f"{h.name} {mtu}" + (" (link down)" if h is not iface and h.link_down else "")

    chain = " over ".join(
        ", ".join(hop(facts.interfaces[n]) for n in level) for level in path.levels
    )
    if len(path.levels) == 1:
        chain += ", nothing below"
    unreadable = [h.name for h in counted if h.mtu is None]
    if unreadable:
        observed = f"MTU of {', '.join(unreadable)} unreadable ({link}; {chain}{tail})"
        return _PathFinding(Finding.cannot_judge(iface.name, observed, expected))
    smallest = min(h.mtu for h in counted if h.mtu is not None)
    at = [h.name for h in counted if h.mtu == smallest]
    # Which interfaces set it, unless it is the interface's own (every one that needs
    # raising when it is too small).
    own_sets_it = at == [iface.name] or (smallest >= want and iface.name in at)
    where = "" if own_sets_it else f" at {', '.join(at)}"
    observed = f"MTU {smallest}{where} ({link}; {chain}{tail})"
    if smallest < want:
        low = tuple(h.name for h in counted if h.mtu is not None and h.mtu < want)
        hint = _path_hint(facts, counted, want)
        return _PathFinding(Finding(iface.name, True, observed, expected, hint), low)
    return _PathFinding(Finding(iface.name, False, observed, expected))


def _one_row_per_fault(findings: list[Finding], paths: dict[int, _PathFinding]) -> list[Finding]:
    """Name each too-small MTU once, on the interface that has it.

    A port at 1500 under VLANs at 9000 deviates on its own row, and every VLAN above it
    would deviate again on its path: N alerts for one setting. An interface judged on its
    path whose own MTU is right and whose every too-small interface below deviates on a
    row of its own is therefore ``skip``, its text naming the path and whose row has the
    fault (never a pass: the path is capped), and each of those rows names it in turn
    ("limits bond0.100 above it"). An interface too small itself keeps its row (a second
    setting to raise), as does one capped by an interface without a row of its own (a
    bond holding no address, a port the profile did not name): nothing else names that.
    """
    at_fault = {f.subject for f in findings if f.deviates}
    limits: dict[str, list[str]] = defaultdict(list)
    out = list(findings)
    for index, judged in paths.items():
        f = judged.finding
        low = set(judged.low)
        if not f.deviates or not low or f.subject in low or not low <= at_fault:
            continue
        rows = sorted(judged.low, key=natural_key)
        if len(rows) == 1:
            whose = f"{rows[0]}, reported on its row"
        else:
            whose = f"{', '.join(rows[:-1])} and {rows[-1]}, reported on their rows"
        out[index] = Finding(f.subject, None, f"{f.observed}: the fault of {whose}", f.expected)
        for row in rows:
            limits[row].append(f.subject)
    for index, f in enumerate(out):
        uppers = limits.get(f.subject)
        if uppers and f.deviates:
            # Every deviating row's text ends with its parenthesis: the note goes inside.
            note = f"; limits {', '.join(uppers)} above it"
            text = f.observed[:-1] + note + ")" if f.observed.endswith(")") else f.observed + note
            out[index] = replace(f, observed=text)
    return out


@check(
    "net.mtu",
    "net",
    validate=_validate_mtu,
    mtu=int,
    interfaces=str,
)
def mtu(facts: NetFacts, params: dict[str, Any]) -> list[Finding]:
    """An MTU below the profile's (9000) splits every 4 MB object into six times as many
    packets, each with its own interrupt and protocol overhead, on the public and the
    cluster network; a larger MTU passes."""
    want = int(params["mtu"])
    pattern = str(params["interfaces"])
    expected = f"MTU at least {want}"
    selected, named = _selected(facts, pattern)
    if not selected:
        return _none_selected(facts, pattern, expected)
    sel = _ceph_ports(facts)
    findings: list[Finding] = []
    # The findings judged on a path, by their index in ``findings``.
    paths: dict[int, _PathFinding] = {}
    for iface in selected:
        if named and iface.virtual:
            paths[len(findings)] = judged = _judge_path(
                facts, iface, want, expected, "", named=True
            )
            findings.append(judged.finding)
            continue
        link = _link(iface)
        if iface.mtu is None:
            # Unknown where the port would be judged; a port left out anyway stays so.
            if not named and iface.link_down:
                observed = f"MTU unreadable, {link}: not judged"
                findings.append(Finding(iface.name, None, observed, expected))
            elif not named and isinstance(
                left_out := _scope(sel, iface, link, "MTU unreadable", expected), Finding
            ):
                findings.append(left_out)
            else:
                why = f"MTU unreadable ({link})"
                findings.append(Finding.cannot_judge(iface.name, why, expected))
            continue
        if named:
            note = link
        elif iface.link_down:
            observed = f"MTU {iface.mtu}, {link}: not judged"
            findings.append(Finding(iface.name, None, observed, expected))
            continue
        else:
            scope = _scope(sel, iface, link, f"MTU {iface.mtu}", expected)
            if isinstance(scope, Finding):
                findings.append(scope)
                continue
            note = f"{link}; {scope}"
        observed = f"MTU {iface.mtu} ({note})"
        if iface.mtu < want:
            hint = _mtu_hint(facts, iface, want)
            findings.append(Finding(iface.name, True, observed, expected, hint))
        else:
            findings.append(Finding(iface.name, False, observed, expected))
    if not named:
        # The interfaces Ceph's addresses are on, when they are not the ports: their
        # path, not the ports' own MTU, is what caps Ceph's packets.
        for name, addresses in _ceph_holders(facts).items():
            note = "Ceph " + _listing(addresses)
            holder = facts.interfaces[name]
            paths[len(findings)] = judged = _judge_path(
                facts, holder, want, expected, note, named=False
            )
            findings.append(judged.finding)
    return _one_row_per_fault(findings, paths)


def _rings_hint(name: str, targets: dict[str, int]) -> str:
    sizes = " ".join(f"{ring} {size}" for ring, size in targets.items())
    rx = targets.get("rx")
    tx = targets.get("tx")
    link_file = " / ".join(
        [*([f"RxBufferSize={rx}"] if rx else []), *([f"TxBufferSize={tx}"] if tx else [])]
    )
    nm = " ".join(
        [*([f"ethtool.ring-rx {rx}"] if rx else []), *([f"ethtool.ring-tx {tx}"] if tx else [])]
    )
    return (
        f"ethtool -G {name} {sizes}; to persist it: a udev rule in "
        f'/etc/udev/rules.d/ (ACTION=="add", SUBSYSTEM=="net", KERNEL=="{name}", '
        f'RUN+="/usr/sbin/ethtool -G {name} {sizes}"), or {link_file} in the [Link] '
        f"section of the interface's systemd .link file (systemd.link(5)), or "
        f"nmcli connection modify <connection> {nm}"
    )


@check("net.rings", "net", validate=_validate_interfaces, interfaces=str)
def rings(facts: NetFacts, params: dict[str, Any]) -> list[Finding]:
    """RX and TX rings below the driver's maximum drop packets in bursts (rx_missed,
    rx_out_of_buffer) that a 100 GbE port of an OSD host sees on every recovery or
    large read; the mlx5 default is 1024 descriptors of a possible 8192. Larger rings
    cost memory and can add queueing latency, hence a warning rather than a failure."""
    pattern = str(params["interfaces"])
    expected = "rx and tx rings at the driver's maximum"
    selected, named = _selected(facts, pattern)
    if not selected:
        return _none_selected(facts, pattern, expected)
    sel = _ceph_ports(facts)
    findings = []
    for iface in selected:
        link = _link(iface)
        if iface.rings_state == RINGS_NOT_READ:
            why = "virtual interface: rings belong to its physical ports"
            findings.append(Finding(iface.name, None, why, expected))
            continue
        if iface.rings_state == RINGS_UNSUPPORTED:
            why = f"the driver ({iface.driver or 'unknown'}) reports no ring sizes"
            findings.append(Finding(iface.name, None, why, expected))
            continue
        if iface.rings_state == RINGS_ERROR or iface.rings is None:
            # Unknown where the port would be judged; a port left out anyway stays so.
            why = f"rings unreadable: {iface.rings_error}"
            if not named and iface.link_down:
                findings.append(Finding(iface.name, None, f"{why} ({link}): not judged", expected))
            elif not named and isinstance(
                left_out := _scope(sel, iface, link, why, expected), Finding
            ):
                findings.append(left_out)
            else:
                findings.append(Finding.cannot_judge(iface.name, why, expected))
            continue
        judged = [r for r in iface.rings.rings() if r.name in JUDGED_RINGS and r.maximum]
        if not judged:
            why = "the driver reports no ring maximum"
            findings.append(Finding(iface.name, None, why, expected))
            continue
        sizes = ", ".join(f"{r.name} {r.current}/{r.maximum}" for r in judged)
        if named:
            note = link
        elif iface.link_down:
            findings.append(Finding(iface.name, None, f"{sizes} ({link}): not judged", expected))
            continue
        else:
            scope = _scope(sel, iface, link, sizes, expected)
            if isinstance(scope, Finding):
                findings.append(scope)
                continue
            note = f"{link}; {scope}"
        observed = f"{sizes} ({note})"
        low = {r.name: r.maximum for r in judged if r.current < r.maximum}
        if low:
            hint = _rings_hint(iface.name, low)
            findings.append(Finding(iface.name, True, observed, expected, hint))
        else:
            findings.append(Finding(iface.name, False, observed, expected))
    return findings
