"""``net.mtu`` on the interface that carries a Ceph address, judged on its path down to the
ports: the smallest MTU from that interface through its ``lower_<name>`` links (VLAN ->
bond -> ports, macvlan/bridge -> ports) caps Ceph's packets, so a VLAN at 1500 over a bond
and ports at 9000 is a warning, not a pass on the ports.

Trees come from the fixture generator (``link`` makes a VLAN's lower_/upper_ links,
``master`` a bond's or bridge's); broken links are made by editing a built tree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.hostfs import ParseError
from cephnode_exporter.hostfs.net import parse_devtype

from tests.conftest import MakeTree, Tree, collect, run_cli, samples, value
from tests.fixtures.sysfsgen import load_node
from tests.test_net import PORTS, only_net, port

PUBLIC = "10.10.0.11"
CLUSTER = "10.20.0.11"
LISTEN = ["0.0.0.0:22", f"{PUBLIC}:6800", f"{PUBLIC}:6801", f"{CLUSTER}:6802"]


def vlan(name: str, link: str, mtu: int, addresses: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "virtual": True,
        "kind": "vlan",
        "link": link,
        "mtu": mtu,
        "addresses": addresses,
    }


def node(interfaces: list[dict[str, Any]]) -> dict[str, Any]:
    """The tuned reference node on 2 CPUs (a small tree) with these interfaces."""
    desc = load_node("epyc9454p-tuned")
    desc = {k: v for k, v in desc.items() if k not in ("cpuidle", "cpufreq")}
    desc["cpus"] = {"cores_per_socket": 2}
    desc["net"] = {"interfaces": interfaces, "listen": LISTEN}
    return desc


def bond_vlans(vlan_mtu: int, bond_mtu: int = 9000, port_mtu: int = 9000) -> dict[str, Any]:
    """The audit's shape: both ports in bond0, the public network on bond0.100 and the
    cluster network on bond0.200."""
    return node(
        [
            port("ens1f0np0", 0, master="bond0", mtu=port_mtu),
            port("ens1f1np1", 1, master="bond0", mtu=port_mtu),
            {"name": "bond0", "virtual": True, "kind": "bond", "mtu": bond_mtu},
            vlan("bond0.100", "bond0", vlan_mtu, [f"{PUBLIC}/24"]),
            vlan("bond0.200", "bond0", vlan_mtu, [f"{CLUSTER}/24"]),
            {"name": "lo", "virtual": True, "kind": "loopback", "mtu": 65536,
             "operstate": "unknown"},
        ]
    )  # fmt: skip


def results(tree: Tree, *extra: str) -> tuple[int, dict[tuple[str, str], dict[str, str]]]:
    proc = run_cli("check", "--format", "json", *tree.flags, *only_net(), *extra)
    assert proc.returncode in (0, 1), proc.stderr
    rows = json.loads(proc.stdout)["results"]
    return proc.returncode, {(r["check"], r["subject"]): r for r in rows}


def mtu_rows(tree: Tree, *extra: str) -> dict[str, tuple[str, str]]:
    _, rows = results(tree, *extra)
    return {s: (r["status"], r["observed"]) for (c, s), r in rows.items() if c == "net.mtu"}


def test_a_vlan_at_1500_over_a_bond_and_ports_at_9000_warns_on_the_vlan(
    make_tree: MakeTree,
) -> None:
    """The audit's case: the ports pass on their own 9000, and the VLANs Ceph uses warn."""
    tree = make_tree(bond_vlans(vlan_mtu=1500))
    _, rows = results(tree)
    path = "over bond0 9000 over ens1f0np0 9000, ens1f1np1 9000"
    pub = rows[("net.mtu", "bond0.100")]
    assert (pub["status"], pub["observed"]) == (
        "warn",
        f"MTU 1500 (link up; bond0.100 1500 {path}; Ceph {PUBLIC})",
    )
    assert pub["hint"].startswith("ip link set dev bond0.100 mtu 9000;")
    clu = rows[("net.mtu", "bond0.200")]
    assert (clu["status"], clu["observed"]) == (
        "warn",
        f"MTU 1500 (link up; bond0.200 1500 {path}; Ceph {CLUSTER})",
    )
    for p in PORTS:  # the ports themselves are at 9000: right, and still said
        status, observed = rows[("net.mtu", p)]["status"], rows[("net.mtu", p)]["observed"]
        assert status == "pass"
        assert observed.endswith(f"Ceph {PUBLIC} on bond0.100, {CLUSTER} on bond0.200)")
    # no series for a path that passes; one for each VLAN that does not
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_tuning_check_warning", check="net.mtu", subject="bond0.100")
    # the bond carries no address: part of the paths, not a subject
    assert ("net.mtu", "bond0") not in rows
    # rings stay on the physical ports
    assert {s for c, s in rows if c == "net.rings"} == set(PORTS)


def test_a_vlan_at_9000_over_ports_at_9000_passes(make_tree: MakeTree) -> None:
    code, rows = results(make_tree(bond_vlans(vlan_mtu=9000)))
    assert code == 0
    mtu = {s: r for (c, s), r in rows.items() if c == "net.mtu"}
    assert {s: r["status"] for s, r in mtu.items()} == dict.fromkeys(
        ["bond0.100", "bond0.200", *PORTS], "pass"
    )
    assert mtu["bond0.100"]["observed"] == (
        f"MTU 9000 (link up; bond0.100 9000 over bond0 9000 over ens1f0np0 9000, "
        f"ens1f1np1 9000; Ceph {PUBLIC})"
    )


def test_the_lower_mtu_wins(make_tree: MakeTree) -> None:
    """A VLAN directly on a port, the port at 1500 under the VLAN at 9000 (the kernel
    refuses it, ERANGE in vlan_dev_change_mtu, but the lower device's MTU is what counts)."""
    interfaces = [
        port("ens1f0np0", 0, addresses=[f"{PUBLIC}/24"]),
        port("ens1f1np1", 1, mtu=1500),
        vlan("ens1f1np1.20", "ens1f1np1", 9000, [f"{CLUSTER}/24"]),
    ]
    tree = make_tree(node(interfaces))
    _, rows = results(tree)
    vl = rows[("net.mtu", "ens1f1np1.20")]
    # the port's own MTU is the fault, on the port's row: the VLAN's says so, not passing
    assert (vl["status"], vl["observed"], vl["hint"]) == (
        "skip",
        f"MTU 1500 at ens1f1np1 (link up; ens1f1np1.20 9000 over ens1f1np1 1500; Ceph {CLUSTER})"
        ": the fault of ens1f1np1, reported on its row",
        "",
    )
    port_row = rows[("net.mtu", "ens1f1np1")]
    assert (port_row["status"], port_row["observed"]) == (
        "warn",
        f"MTU 1500 (link up, 100 Gb/s; Ceph {CLUSTER} on ens1f1np1.20; "
        "limits ens1f1np1.20 above it)",
    )
    assert port_row["hint"].startswith("ip link set dev ens1f1np1 mtu 9000;")
    # the Ceph address on the port itself: judged on the port, no other subject
    assert rows[("net.mtu", "ens1f0np0")]["observed"] == (
        f"MTU 9000 (link up, 100 Gb/s; Ceph {PUBLIC})"
    )
    assert {s for c, s in rows if c == "net.mtu"} == {*PORTS, "ens1f1np1.20"}


def test_a_bond_between_a_vlan_and_its_ports_counts(make_tree: MakeTree) -> None:
    tree = make_tree(bond_vlans(vlan_mtu=1500, bond_mtu=1500))
    rows = mtu_rows(tree)
    assert rows["bond0.100"] == (
        "warn",
        "MTU 1500 at bond0.100, bond0 (link up; bond0.100 1500 over bond0 1500 over "
        f"ens1f0np0 9000, ens1f1np1 9000; Ceph {PUBLIC})",
    )
    _, full = results(tree)
    # the lower device first: a VLAN's MTU cannot exceed its device's
    assert full[("net.mtu", "bond0.100")]["hint"].startswith(
        "ip link set dev bond0 mtu 9000, then ip link set dev bond0.100 mtu 9000;"
    )


@pytest.mark.parametrize(("bridge_mtu", "status"), [(1500, "warn"), (9000, "pass")])
def test_a_ceph_address_on_a_bridge(make_tree: MakeTree, bridge_mtu: int, status: str) -> None:
    interfaces = [
        port("ens1f0np0", 0, master="vmbr0"),
        port("ens1f1np1", 1, addresses=[f"{CLUSTER}/24"]),
        {"name": "vmbr0", "virtual": True, "kind": "bridge", "mtu": bridge_mtu,
         "addresses": [f"{PUBLIC}/24"]},
    ]  # fmt: skip
    rows = mtu_rows(make_tree(node(interfaces)))
    assert rows["vmbr0"] == (
        status,
        f"MTU {bridge_mtu} (link up; vmbr0 {bridge_mtu} over ens1f0np0 9000; Ceph {PUBLIC})",
    )
    assert rows["ens1f0np0"] == ("pass", f"MTU 9000 (link up, 100 Gb/s; Ceph {PUBLIC} on vmbr0)")


def _garble(tree: Tree, how: str) -> None:
    link = tree.sys / "class/net/bond0.100/lower_bond0"
    target = Path(os.path.realpath(link))
    link.unlink()
    if how == "dangling":
        link.symlink_to("../../gone/bond0")
    elif how == "file":
        link.write_text("garbage\n")
    elif how == "elsewhere":  # a lower_ link whose target is another device
        link.symlink_to(os.path.relpath(tree.sys / "class/net/ens1f0np0", target.parent))
    elif how == "missing":  # the VLAN's link to its device is gone, upper_ kept
        pass


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("dangling", "lower_bond0 of bond0.100: a link to nothing"),
        ("file", "lower_bond0 of bond0.100: not a link"),
        ("elsewhere", "lower_bond0 of bond0.100: a link to ens1f0np0"),
        ("missing", "lower_bond0 of bond0.100 missing (bond0 has upper_bond0.100)"),
    ],
)
def test_a_broken_lower_link_is_unknown(make_tree: MakeTree, how: str, reason: str) -> None:
    tree = make_tree(bond_vlans(vlan_mtu=9000))
    _garble(tree, how)
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    garbled = value(result, "cephnode_scrape_collector_read_errors", collector="net")
    assert garbled == (0 if how == "missing" else 1)  # a missing link is no read error
    _, rows = results(tree)
    vl = rows[("net.mtu", "bond0.100")]
    assert vl["status"] == "unknown"
    assert reason in vl["observed"]
    # which ports carry the public network is unknown too: no port passes or skips
    for (check, subject), row in rows.items():
        if subject in PORTS:
            assert row["status"] == "unknown", (check, subject, row["observed"])
            assert "Ceph ports unknown (" in row["observed"] and reason in row["observed"]
    # the other VLAN's path is intact
    assert rows[("net.mtu", "bond0.200")]["status"] == "pass"


def test_a_lower_device_left_out_is_unknown(make_tree: MakeTree) -> None:
    """The VLAN's bond left out by --collector.net.max-interfaces: its path is unknown."""
    interfaces = [
        port("ens1f0np0", 0, master="xbond0"),
        port("ens1f1np1", 1, master="xbond0"),
        {"name": "xbond0", "virtual": True, "kind": "bond", "mtu": 9000},
        vlan("vl100", "xbond0", 9000, [f"{PUBLIC}/24", f"{CLUSTER}/24"]),
    ]
    tree = make_tree(node(interfaces))
    assert mtu_rows(tree)["vl100"][0] == "pass"
    # physical ports first, then virtual ones by name: vl100 kept, xbond0 left out
    rows = mtu_rows(tree, "--collector.net.max-interfaces", "3")
    assert rows["vl100"][0] == "unknown"
    assert "xbond0 below vl100 was not read" in rows["vl100"][1]
    assert rows["ens1f0np0"][0] == "unknown"


def test_a_link_down_vlan_is_not_judged(make_tree: MakeTree) -> None:
    desc = bond_vlans(vlan_mtu=1500)
    desc["net"]["interfaces"][3]["operstate"] = "down"
    rows = mtu_rows(make_tree(desc))
    assert rows["bond0.100"] == ("skip", "MTU 1500, link down: not judged")
    assert rows["bond0.200"][0] == "warn"


def test_a_named_vlan_is_judged_on_its_path(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(bond_vlans(vlan_mtu=9000, port_mtu=1500))
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  net.mtu: {interfaces: 'bond0\\.100'}\n")
    rows = mtu_rows(tree, "--profile", str(profile))
    assert rows == {
        "bond0.100": (
            "warn",
            "MTU 1500 at ens1f0np0, ens1f1np1 (link up; bond0.100 9000 over bond0 9000 over "
            "ens1f0np0 1500, ens1f1np1 1500)",
        )
    }


# --- one fault, one row -------------------------------------------------------------------


def detuned_rows(tree: Tree, *extra: str) -> set[str]:
    """The subjects of net.mtu's warning or failing series."""
    result = collect([*tree.flags, *only_net(), *extra])
    return {
        dict(labels)["subject"]
        for name, labels in samples(result)
        if name in ("cephnode_tuning_check_warning", "cephnode_tuning_check_failed")
        and ("check", "net.mtu") in labels
    }


def test_one_port_at_1500_under_vlans_at_9000_is_one_finding(make_tree: MakeTree) -> None:
    """The port left at 1500 is the finding; the VLANs above it, right themselves, say
    that their path is capped and where, and are no second and third alert."""
    desc = bond_vlans(vlan_mtu=9000)
    desc["net"]["interfaces"][0]["mtu"] = 1500
    tree = make_tree(desc)
    _, rows = results(tree)
    bad = rows[("net.mtu", "ens1f0np0")]
    assert (bad["status"], bad["observed"]) == (
        "warn",
        f"MTU 1500 (link up, 100 Gb/s; Ceph {PUBLIC} on bond0.100, {CLUSTER} on bond0.200; "
        "limits bond0.100, bond0.200 above it)",
    )
    # bond0 is at 9000 already: setting it again would change nothing (dev_set_mtu_ext)
    assert bad["hint"].startswith("ip link set dev ens1f0np0 mtu 9000; to persist it:")
    assert rows[("net.mtu", "ens1f1np1")]["status"] == "pass"
    path = "over bond0 9000 over ens1f0np0 1500, ens1f1np1 9000"
    for vlan_name, address in (("bond0.100", PUBLIC), ("bond0.200", CLUSTER)):
        row = rows[("net.mtu", vlan_name)]
        assert (row["status"], row["observed"], row["hint"]) == (
            "skip",  # never a pass: the text says the path is capped, and by whom
            f"MTU 1500 at ens1f0np0 (link up; {vlan_name} 9000 {path}; Ceph {address}): "
            "the fault of ens1f0np0, reported on its row",
            "",
        )
    # one series, named by the interface whose MTU is wrong
    assert detuned_rows(tree) == {"ens1f0np0"}


def test_a_vlan_too_small_itself_keeps_its_row(make_tree: MakeTree) -> None:
    """Two settings to raise, two findings: the VLAN's own MTU and the ports'."""
    tree = make_tree(bond_vlans(vlan_mtu=1500, port_mtu=1500))
    rows = mtu_rows(tree)
    assert rows["bond0.100"] == (
        "warn",
        "MTU 1500 at bond0.100, ens1f0np0, ens1f1np1 (link up; bond0.100 1500 over bond0 "
        f"9000 over ens1f0np0 1500, ens1f1np1 1500; Ceph {PUBLIC})",
    )
    assert rows["ens1f0np0"][0] == "warn"
    assert "limits" not in rows["ens1f0np0"][1]
    assert detuned_rows(tree) == {"bond0.100", "bond0.200", *PORTS}


def test_a_cap_without_a_row_of_its_own_stays_on_the_vlan(make_tree: MakeTree) -> None:
    """The bond at 1500 holds no address and has no row: only the VLAN's row names it."""
    tree = make_tree(bond_vlans(vlan_mtu=9000, bond_mtu=1500, port_mtu=1500))
    rows = mtu_rows(tree)
    assert rows["bond0.100"] == (
        "warn",
        "MTU 1500 at bond0, ens1f0np0, ens1f1np1 (link up; bond0.100 9000 over bond0 1500 "
        f"over ens1f0np0 1500, ens1f1np1 1500; Ceph {PUBLIC})",
    )
    assert "limits" not in rows["ens1f0np0"][1]


def test_a_bond_holding_an_address_is_a_row_the_vlans_fold_into(make_tree: MakeTree) -> None:
    desc = bond_vlans(vlan_mtu=9000, bond_mtu=1500, port_mtu=1500)
    desc["net"]["interfaces"][2]["addresses"] = ["10.30.0.11/24"]
    desc["net"]["listen"] = [*LISTEN, "10.30.0.11:6803"]
    tree = make_tree(desc)
    rows = mtu_rows(tree)
    assert rows["bond0"][0] == "warn"
    assert rows["bond0"][1].endswith("limits bond0.100, bond0.200 above it)")
    assert rows["bond0.100"] == (
        "skip",
        "MTU 1500 at bond0, ens1f0np0, ens1f1np1 (link up; bond0.100 9000 over bond0 1500 "
        f"over ens1f0np0 1500, ens1f1np1 1500; Ceph {PUBLIC}): the fault of bond0, "
        "ens1f0np0 and ens1f1np1, reported on their rows",
    )
    assert detuned_rows(tree) == {"bond0", *PORTS}


def test_named_vlan_and_ports_name_the_fault_once(make_tree: MakeTree, tmp_path: Path) -> None:
    tree = make_tree(bond_vlans(vlan_mtu=9000, port_mtu=1500))
    profile = tmp_path / "p.yaml"
    profile.write_text("checks:\n  net.mtu: {interfaces: 'bond0\\.100|ens1f.*'}\n")
    rows = mtu_rows(tree, "--profile", str(profile))
    assert rows["bond0.100"][0] == "skip"
    assert rows["bond0.100"][1].endswith(
        "the fault of ens1f0np0 and ens1f1np1, reported on their rows"
    )
    for p in PORTS:
        assert rows[p] == ("warn", "MTU 1500 (link up, 100 Gb/s; limits bond0.100 above it)")


# --- a VLAN whose device cannot be found ------------------------------------------------


def test_a_vlan_without_any_lower_link_is_unknown(make_tree: MakeTree) -> None:
    """Its device in another network namespace (or both links gone): the path below is
    unknown, so its own 9000 is no pass, and which ports carry it is unknown too."""
    interfaces = [
        port("ens1f0np0", 0, mtu=1500),
        port("ens1f1np1", 1, addresses=[f"{CLUSTER}/24"]),
        {"name": "vl100", "virtual": True, "kind": "vlan", "mtu": 9000,
         "addresses": [f"{PUBLIC}/24"]},
    ]  # fmt: skip
    tree = make_tree(node(interfaces))
    assert (tree.sys / "class/net/vl100/uevent").read_text().startswith("DEVTYPE=vlan\n")
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 0
    rows = mtu_rows(tree)
    status, observed = rows["vl100"]
    assert status == "unknown"
    assert observed == (
        "MTU 9000 (link up; the devices below unknown: vl100 is a VLAN without a lower_ "
        f"link: its device is in another network namespace or the link is missing; Ceph {PUBLIC})"
    )
    for p in PORTS:
        assert rows[p][0] == "unknown" and "Ceph ports unknown (vl100 is a VLAN" in rows[p][1]


def test_both_links_of_a_vlan_gone_is_unknown(make_tree: MakeTree) -> None:
    tree = make_tree(bond_vlans(vlan_mtu=9000))
    (tree.sys / "class/net/bond0.100/lower_bond0").unlink()
    (tree.sys / "class/net/bond0/upper_bond0.100").unlink()
    rows = mtu_rows(tree)
    assert rows["bond0.100"][0] == "unknown"
    assert "bond0.100 is a VLAN without a lower_ link" in rows["bond0.100"][1]
    assert rows["bond0.200"][0] == "pass"


@pytest.mark.parametrize("fault", ["eio", "empty", "garbage"])
def test_an_unreadable_uevent_below_nothing_is_unknown(make_tree: MakeTree, fault: str) -> None:
    interfaces = [
        port("ens1f0np0", 0),
        port("ens1f1np1", 1, addresses=[f"{CLUSTER}/24"]),
        {"name": "vl100", "virtual": True, "kind": "vlan", "mtu": 9000,
         "addresses": [f"{PUBLIC}/24"]},
    ]  # fmt: skip
    tree = make_tree(node(interfaces), faults={"sys/devices/virtual/net/vl100/uevent": fault})
    result = collect([*tree.flags, *only_net()])
    assert value(result, "cephnode_scrape_collector_success", collector="net") == 1
    assert value(result, "cephnode_scrape_collector_read_errors", collector="net") == 1
    status, observed = mtu_rows(tree)["vl100"]
    assert status == "unknown"
    assert "uevent of vl100 unreadable: whether a device lies below is unknown" in observed


def test_a_bond_without_slaves_is_judged_on_its_own(make_tree: MakeTree) -> None:
    """No DEVTYPE=vlan: nothing is expected below (a bond whose slaves are all gone)."""
    interfaces = [
        port("ens1f0np0", 0, addresses=[f"{CLUSTER}/24"]),
        port("ens1f1np1", 1),
        {"name": "bond1", "virtual": True, "kind": "bond", "mtu": 9000,
         "addresses": [f"{PUBLIC}/24"]},
    ]  # fmt: skip
    rows = mtu_rows(make_tree(node(interfaces)))
    assert rows["bond1"][0] == "pass"
    assert rows["bond1"][1].startswith("MTU 9000 (link up; bond1 9000, nothing below;")


@pytest.mark.parametrize(
    ("text", "devtype"),
    [
        ("DEVTYPE=vlan\nINTERFACE=bond0.100\nIFINDEX=5\n", "vlan"),
        ("INTERFACE=bond0\nIFINDEX=4\n", ""),
    ],
)
def test_parse_devtype(text: str, devtype: str) -> None:
    assert parse_devtype(text) == devtype


@pytest.mark.parametrize("text", ["", "?garbage@value!", "DEVTYPE=\n", "DEVTYPE=VLAN X\n"])
def test_parse_devtype_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_devtype(text)
