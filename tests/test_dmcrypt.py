"""dm-crypt under an OSD's block device (hostfs/dmcrypt.py) and its metric
(``cephnode_osd_encryption_info``, collectors/osd_encryption.py).

The uuids are the creators' formats: cryptsetup lib/libdevmapper.c ``dm_prepare_uuid``
(``CRYPT-<type>-[<uuid without dashes>-]<name>``), lvm2 ``LVM-<vg uuid><lv uuid>``,
multipath-tools ``mpath-<wwid>``, kpartx ``part<N>-<parent uuid>``; the tree is the
generator's ceph-volume ``--dmcrypt`` layout (tests/fixtures/sysfsgen.py, docs/fixtures.md).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from cephnode_exporter.hostfs import HostFS, ReadErrors, blockdev, dmcrypt

from tests.conftest import Tree, collect, samples, value
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_osd import ONLY_OSD, FakeNode, impersonate, recorded_node

LUKS2 = "CRYPT-LUKS2-5b2a4c1e8f0d4e3a9c7b6a5d4e3f2a1b-3f0e2c4a-1b2c-4d5e-8f90-a1b2c3d4e5f6"


@pytest.mark.parametrize(
    ("uuid", "expected"),
    [
        (LUKS2, ("dm-crypt", "LUKS2")),
        ("CRYPT-LUKS1-00000000000000000000000000000000-osd", ("dm-crypt", "LUKS1")),
        ("CRYPT-PLAIN-osd-block-1", ("dm-crypt", "PLAIN")),
        ("CRYPT-BITLK-name", ("dm-crypt", "BITLK")),
        ("CRYPT-SUBDEV-5b2a4c1e8f0d4e3a9c7b6a5d4e3f2a1b-osd_dif", ("none", "")),
        ("CRYPT-VERITY-abc-root", ("none", "")),
        ("CRYPT-TEMP-osd", ("unknown", "")),  # a helper mapping: neither
        ("LVM-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ("none", "")),
        ("mpath-3600508b1001c5e8d", ("none", "")),
        ("part2-mpath-3600508b1001c5e8d", ("none", "")),
        ("", ("unknown", "")),
        ("stratis-1-private-abc", ("unknown", "")),
        ("\x00\xff garbage", ("unknown", "")),
    ],
)
def test_classify_uuid(uuid: str, expected: tuple[str, str]) -> None:
    assert dmcrypt.classify_uuid(uuid + "\n") == expected


@pytest.fixture(scope="module")
def crypt_tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """The tuned reference node with osd.0-osd.2 on dm-crypt (ceph-volume --dmcrypt)."""
    node = copy.deepcopy(load_node("epyc9454p-tuned"))
    for entry in node["osds"]["daemons"][:3]:
        entry["encrypted"] = True
    dest = tmp_path_factory.mktemp("crypt-tree")
    build_tree(node, dest)
    return Tree(dest)


def _fs(tree: Tree) -> HostFS:
    return HostFS(str(tree.proc), str(tree.sys), str(tree.rootfs))


def test_encrypted_and_plain_osds_of_the_fixture(crypt_tree: Tree) -> None:
    fs = _fs(crypt_tree)
    for k in range(10):
        block = blockdev.find_osd_block(fs, f"/var/lib/ceph/osd/ceph-{k}")
        # The disks under the crypt mapping are still found through the LV.
        assert block.disks == (blockdev.Disk(f"nvme{k}n1", (f"nvme{k}",), (0,)),)
        found = dmcrypt.osd_encryption(block.sysdir, None)
        if k < 3:
            # block -> /dev/mapper/<LV uuid> -> ../dm-<11..13>, after the ten LVs.
            assert block.target == f"/dev/dm-{10 + k + 1}"
            assert os.path.basename(block.sysdir) == f"dm-{10 + k + 1}"
            assert found == dmcrypt.Encryption("dm-crypt", "LUKS2")
        else:
            assert block.target == f"/dev/dm-{k + 1}"
            assert found == dmcrypt.Encryption("none")


def _dm(root: Path, name: str, uuid: str | None, slaves: tuple[str, ...] = ()) -> Path:
    d = root / "sys/devices/virtual/block" / name
    (d / "dm").mkdir(parents=True)
    if uuid is not None:
        (d / "dm/uuid").write_text(uuid)
    (d / "slaves").mkdir()
    for s in slaves:
        (d / "slaves" / s).symlink_to(f"../../{s}")
    return d


def test_unknown_with_the_reason(tmp_path: Path) -> None:
    # No uuid (dmsetup create without -u), over an LV.
    _dm(tmp_path, "dm-1", "LVM-" + "a" * 64)
    top = _dm(tmp_path, "dm-2", "\n", ("dm-1",))
    found = dmcrypt.stack_encryption(str(top))
    assert found.state == "unknown"
    assert found.reason == "dm-2: device-mapper has no uuid"
    assert found.error is None
    # An unknown creator.
    other = _dm(tmp_path, "dm-3", "stratis-1-abc", ("dm-1",))
    assert dmcrypt.stack_encryption(str(other)).reason == (
        "dm-3: device-mapper uuid 'stratis-1-abc' names no known creator"
    )
    # A crypt mapping anywhere in the stack decides, even beside an unknown one.
    _dm(tmp_path, "dm-4", "CRYPT-PLAIN-x")
    mixed = _dm(tmp_path, "dm-5", "", ("dm-3", "dm-4"))
    assert dmcrypt.stack_encryption(str(mixed)) == dmcrypt.Encryption("dm-crypt", "PLAIN")
    # No block device of its own.
    assert dmcrypt.osd_encryption("", "no /osd/block") == dmcrypt.Encryption(
        "unknown", reason="no /osd/block"
    )


def test_unreadable_or_looping_stack_is_unknown_and_an_error(tmp_path: Path) -> None:
    # dm/uuid missing: an unreadable attribute.
    missing = _dm(tmp_path, "dm-1", None)
    found = dmcrypt.stack_encryption(str(missing))
    assert found.state == "unknown" and isinstance(found.error, FileNotFoundError)
    assert "dm-1/dm/uuid" in found.reason
    # dm/uuid a FIFO (a broken copy of sysfs): refused before a read that would hang.
    fifo = _dm(tmp_path, "dm-2", None)
    os.mkfifo(fifo / "dm/uuid")
    found = dmcrypt.stack_encryption(str(fifo))
    assert found.state == "unknown" and "not a regular file" in found.reason
    # A slave loop: bounded.
    loop = _dm(tmp_path, "dm-3", "LVM-" + "b" * 64)
    (loop / "slaves" / "dm-3").symlink_to("../../dm-3")
    found = dmcrypt.stack_encryption(str(loop))
    assert found.state == "unknown" and "deeper than 8" in found.reason
    # A uuid far beyond DM_UUID_LEN (129) and a sysfs page: refused at the read bound.
    huge = _dm(tmp_path, "dm-4", "CRYPT-LUKS2-" + "x" * 200_000)
    found = dmcrypt.stack_encryption(str(huge))
    assert found.state == "unknown" and found.error is not None
    assert found.reason.endswith("dm-4/dm/uuid: larger than 65536 bytes")


def test_collector_exports_the_encryption(crypt_tree: Tree) -> None:
    """osd.3 of the recorded sockets stands for the tree's first OSD (encrypted), osd.0
    (memstore) has no block device: unknown."""
    impersonate(crypt_tree)
    node = recorded_node(FakeNode(), crypt_tree)
    try:
        c = collect([*crypt_tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD])
    finally:
        node.close()
    assert value(c, "cephnode_scrape_collector_read_errors", collector="osd") == 0.0
    name = "cephnode_osd_encryption_info"
    assert value(c, name, ceph_daemon="osd.3", encryption="dm-crypt", format="LUKS2") == 1.0
    assert value(c, name, ceph_daemon="osd.0", encryption="unknown", format="") == 1.0
    assert sorted(dict(lb)["ceph_daemon"] for n, lb in samples(c) if n == name) == [
        "osd.0",
        "osd.3",
    ]


def test_read_error_is_counted_and_unknown_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from cephnode_exporter.collectors.osd_encryption import read_encryption
    from cephnode_exporter.facts.osd import OSDFacts

    def facts(sysdir: str) -> OSDFacts:
        f = OSDFacts.__new__(OSDFacts)
        f.socket = SimpleNamespace(path=str(tmp_path / "ceph-osd.9.asok"), ceph_daemon="osd.9")  # type: ignore[assignment]
        f.block = blockdev.OSDBlock("/dev/dm-9", (), sysdir)
        f.block_error = None
        f.block_note = None
        return f

    # A plain disk (no dm/ directory, no slaves): none, no error, nothing logged.
    errors = ReadErrors()
    assert read_encryption(facts(str(tmp_path / "nvme0n1")), errors).state == "none"
    assert len(errors) == 0
    # A mapping without a uuid: unknown, logged once, not an error.
    nouuid = _dm(tmp_path, "dm-9", "")
    with caplog.at_level("WARNING", logger="cephnode_exporter.collectors.osd_encryption"):
        for _ in range(3):
            assert read_encryption(facts(str(nouuid)), errors).state == "unknown"
    assert len(errors) == 0
    logged = [r for r in caplog.records if "encryption unknown" in r.getMessage()]
    assert len(logged) == 1
    # Its uuid file gone: a read error, counted each scrape, logged once more.
    (nouuid / "dm/uuid").unlink()
    with caplog.at_level("WARNING", logger="cephnode_exporter.collectors.osd_encryption"):
        for _ in range(2):
            assert read_encryption(facts(str(nouuid)), errors).state == "unknown"
    assert len(errors) == 2
    logged = [r for r in caplog.records if "encryption unknown" in r.getMessage()]
    assert len(logged) == 2


def test_the_encryption_is_read_once_per_osd_process(crypt_tree: Tree) -> None:
    """The walk is kept per OSD process, as the disk kind is: a uuid rewritten under a
    running OSD's device (which its creator never does) shows only once the process
    changed (a restart resets what is kept of it)."""
    from cephnode_exporter.cli import build_scraper, parse_args

    impersonate(crypt_tree)
    node = recorded_node(FakeNode(), crypt_tree)
    uuids = [
        p
        for p in crypt_tree.sys.glob("devices/virtual/block/dm-*/dm/uuid")
        if p.read_text().startswith("CRYPT-")
    ]
    assert uuids
    before = {p: p.read_text() for p in uuids}
    flags = [*crypt_tree.flags, f"--ceph.socket-dir={node.dir}", *ONLY_OSD]
    scraper = build_scraper(parse_args(["dump", *flags]))
    name = "cephnode_osd_encryption_info"
    crypt = {"ceph_daemon": "osd.3", "encryption": "dm-crypt", "format": "LUKS2"}
    plain = {"ceph_daemon": "osd.3", "encryption": "none", "format": ""}
    try:
        assert value(scraper.collect(10.0), name, **crypt) == 1.0
        for p in uuids:
            p.write_text("LVM-" + "x" * 64)
        c = scraper.collect(10.0)
        assert value(c, name, **crypt) == 1.0 and value(c, name, **plain) is None
        osd = next(c for c in scraper._collectors if c.name == "osd")
        for state in osd._proc_states.values():  # type: ignore[attr-defined]
            state.reset((0, 0))  # as a new process of the OSD would
        c = scraper.collect(10.0)
        assert value(c, name, **plain) == 1.0 and value(c, name, **crypt) is None
    finally:
        scraper.close()
        node.close()
        for p, text in before.items():
            p.write_text(text)
