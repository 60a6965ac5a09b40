"""The pgs collector: the ``pg ls`` parser on replies recorded from the real test cluster
and on constructed ones, its metrics, the librados loader and client, and the collector's
failures (no Ceph cluster needed; tests/test_pgs_cluster.py runs it against one).

tests/fixtures/ceph/pgs holds ``pg ls laggy wait`` replies of Ceph 16.2.15 recorded by
``python -m tests.test_pgs_cluster record tests/fixtures/ceph/pgs`` (docs/ceph.md):
``healthy.json`` (nothing laggy) and ``laggy.json`` (osd.2 stopped under a size-2 pool's
write load: three PGs with primary osd.3 and replica osd.2). Where the client meets
librados, a stand-in module replays those bytes (:class:`FakeRados`); the real binding is
used for everything that needs no cluster: loading it, and failing to reach a monitor.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.machinery
import json
import logging
import os
import random
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cephnode_exporter.ceph import librados, pgs
from cephnode_exporter.ceph.librados import (
    CephError,
    CephUnavailable,
    ClientSettings,
    MonCommandClient,
    load_rados,
)
from cephnode_exporter.ceph.pgs import (
    COMMAND,
    CRUSH_ITEM_NONE,
    MAX_REPLY_BYTES,
    PGParseError,
    StuckPG,
    parse_pg_ls,
)
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors.pgs import DEFAULT_TIMEOUT, build_metrics, effective_timeout

from tests.conftest import REPO, Tree, collect, need, samples, value

FIXTURES = REPO / "tests" / "fixtures" / "ceph" / "pgs"
ONLY_PGS = ["--collector.pgs", "--no-collector.osd", "--no-collector.cpuidle",
            "--no-collector.cpufreq", "--no-collector.kernel", "--no-collector.nvme",
            "--no-collector.net", "--no-collector.iommu"]  # fmt: skip
# The reference incident (ceph.io, "Ceph: A Journey to 1 TiB/s"): 1,651 of 131,073 PGs
# laggy, 630 OSDs.
REFERENCE_LAGGY, REFERENCE_OSDS = 1651, 630


def recorded(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def laggy_entries() -> list[dict[str, Any]]:
    return json.loads(recorded("laggy.json"))["pg_stats"]


def need_rados() -> None:
    """python3-rados loadable into this interpreter, or skip (fail under CI=true)."""
    try:
        load_rados()
    except CephUnavailable as exc:
        need(False, f"{exc} (Debian package python3-rados)")


def reply(entries: list[dict[str, Any]], pg_ready: bool = True) -> bytes:
    return json.dumps({"pg_ready": pg_ready, "pg_stats": entries}).encode()


def entry(pgid: str, state: str, acting: list[int], primary: int) -> dict[str, Any]:
    """A recorded entry with its identity replaced: the real shape, other numbers."""
    e = copy.deepcopy(laggy_entries()[0])
    e.update(pgid=pgid, state=state, acting=acting, up=acting, acting_primary=primary,
             up_primary=primary)  # fmt: skip
    return e


# ----------------------------------------------------------------------------- recorded


def test_recorded_replies_are_listed() -> None:
    manifest = json.loads(recorded("manifest.json"))
    assert manifest["ceph_version"] == "16.2.15"
    assert manifest["command"] == COMMAND
    files = {p.name for p in FIXTURES.iterdir()} - {"manifest.json"}
    assert files == set(manifest["files"]) == {"healthy.json", "laggy.json"}
    for name, meta in manifest["files"].items():
        assert len(recorded(name)) == meta["bytes"], name


def test_healthy_reply() -> None:
    """A healthy Pacific cluster: the mgr leaves pg_stats out (17 bytes)."""
    payload = recorded("healthy.json")
    assert payload == b'{"pg_ready":true}'
    listing = parse_pg_ls(payload)
    assert listing.pgs == [] and listing.pg_ready is True and listing.reply_bytes == 17
    assert listing.listed() == {"laggy": 0, "wait": 0}
    assert listing.by_osd() == {} and listing.error_count == 0


def test_recorded_laggy_reply() -> None:
    payload = recorded("laggy.json")
    listing = parse_pg_ls(payload)
    assert listing.pg_ready is True and listing.error_count == 0
    assert [(p.pgid, p.states, p.acting, p.acting_primary) for p in listing.pgs] == [
        ("2.3", frozenset({"laggy"}), (3, 2), 3),
        ("2.8", frozenset({"laggy"}), (3, 2), 3),
        ("2.b", frozenset({"laggy"}), (3, 2), 3),
    ]
    # The stopped OSD is the replica of every laggy PG; its peer is the primary.
    stopped = int(json.loads(recorded("manifest.json"))["stalled_replica"].split(".")[1])
    assert listing.by_osd() == {(3, "primary", "laggy"): 3, (stopped, "replica", "laggy"): 3}
    assert listing.listed() == {"laggy": 3, "wait": 0}
    # The size the docs quote: about 2.2 KB per listed PG on Pacific.
    assert 2100 < len(payload) / len(listing.pgs) < 2400


# ----------------------------------------------------------------------------- shapes


def test_bare_array_and_empty_replies_of_old_releases() -> None:
    entries = laggy_entries()
    listing = parse_pg_ls(json.dumps(entries).encode())
    assert listing.pg_ready is None
    assert [p.pgid for p in listing.pgs] == [e["pgid"] for e in entries]
    for empty in (b"", b" \n", b"[]", b"{}", b'{"pg_ready": false, "pg_stats": []}'):
        listing = parse_pg_ls(empty)
        assert listing.pgs == [] and listing.listed() == {"laggy": 0, "wait": 0}, empty
    assert parse_pg_ls(b"{}").pg_ready is None
    assert parse_pg_ls(b'{"pg_stats": [], "pg_ready": false}').pg_ready is False


def test_wait_and_both_states_and_unknown_fields() -> None:
    payload = json.dumps(
        {
            "pg_ready": True,
            "a_later_field": {"nested": [1, 2, {"x": None}]},
            "pg_stats": [
                entry("1.0", "active+wait", [0, 1, 2], 0),
                entry("1.1", "active+clean+laggy+wait", [1, 2, 0], 1),
                entry("1.2", "peering+wait", [2, 0], 2),
            ],
            "another": "x",
        }
    ).encode()
    listing = parse_pg_ls(payload)
    assert listing.listed() == {"laggy": 1, "wait": 3}
    assert listing.by_osd() == {
        (0, "primary", "wait"): 1, (1, "replica", "wait"): 1, (2, "replica", "wait"): 2,
        (1, "primary", "wait"): 1, (1, "primary", "laggy"): 1, (2, "replica", "laggy"): 1,
        (0, "replica", "wait"): 2, (0, "replica", "laggy"): 1, (2, "primary", "wait"): 1,
    }  # fmt: skip


def test_erasure_coded_holes_and_no_primary() -> None:
    """EC acting sets hold CRUSH_ITEM_NONE for a missing shard; a PG may have no primary
    (-1, or CRUSH_ITEM_NONE): its members all count as replicas."""
    payload = reply(
        [
            entry("3.0", "active+undersized+degraded+laggy", [CRUSH_ITEM_NONE, 4, 5, 6], 4),
            entry("3.1", "down+laggy", [7, CRUSH_ITEM_NONE], -1),
            entry("3.2", "incomplete+wait", [CRUSH_ITEM_NONE, 8], CRUSH_ITEM_NONE),
        ]
    )
    listing = parse_pg_ls(payload)
    assert [(p.acting, p.acting_primary) for p in listing.pgs] == [
        ((4, 5, 6), 4), ((7,), None), ((8,), None)
    ]  # fmt: skip
    assert listing.by_osd() == {
        (4, "primary", "laggy"): 1, (5, "replica", "laggy"): 1, (6, "replica", "laggy"): 1,
        (7, "replica", "laggy"): 1, (8, "replica", "wait"): 1,
    }  # fmt: skip


def test_primary_outside_the_acting_set_counts_once_each() -> None:
    pg = StuckPG("1.0", frozenset({"laggy"}), (5, 6, 5), 9)
    assert list(pg.roles()) == [(9, "primary"), (5, "replica"), (6, "replica")]


def _without(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda e: e.pop(key)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda e: e.__setitem__(key, value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_without("pgid"), "without a pgid"),
        (_set("pgid", ""), "without a pgid"),
        (_set("pgid", 7), "without a pgid"),
        (_without("state"), "state None is not a string"),
        (_set("state", ["laggy"]), "is not a string"),
        (_set("state", "active+clean"), "neither laggy nor wait"),
        (_set("state", "active+laggyish"), "neither laggy nor wait"),
        (_without("acting"), "acting None is not a list"),
        (_set("acting", "3,2"), "is not a list"),
        (_set("acting", [3, "2"]), "OSD id '2' is not an integer"),
        (_set("acting", [3, True]), "OSD id True is not an integer"),
        (_set("acting", [3, 2.0]), "OSD id 2.0 is not an integer"),
        (_set("acting", [3, 2**31]), "out of range"),
        (_without("acting_primary"), "no acting_primary"),
        (_set("acting_primary", None), "OSD id None is not an integer"),
    ],
)
def test_malformed_entries_are_skipped_and_counted(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    entries = laggy_entries()
    mutate(entries[1])
    listing = parse_pg_ls(reply(entries))
    assert [p.pgid for p in listing.pgs] == [entries[0]["pgid"], entries[2]["pgid"]]
    assert listing.error_count == 1
    assert message in listing.errors[0], listing.errors


def test_entries_that_are_not_objects_and_many_errors() -> None:
    entries: list[Any] = [None, 3, "2.0", [1], *laggy_entries()]
    entries += [{"pgid": f"9.{i}"} for i in range(20)]
    listing = parse_pg_ls(reply(entries))
    assert len(listing.pgs) == 3
    assert listing.error_count == 24
    assert len(listing.errors) == pgs.MAX_ERROR_MESSAGES  # the first ten are kept
    assert listing.errors[0] == "pg_stats entry is NoneType, not an object"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"not json", "not a JSON object or array"),
        (b"42", "not a JSON object or array"),
        (b'"pg_stats"', "not a JSON object or array"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"pg_ready": tru', "invalid JSON"),
        (b'{"pg_ready": true', "expected '}'"),
        (b'{"pg_ready": true,}', "invalid JSON"),
        (b'{"pg_ready" true}', "expected ':'"),
        (b"{pg_ready: true}", "invalid JSON"),
        (b'{"pg_stats": [{"pgid": "1.0"}', "expected ']'"),
        (b'{"pg_stats": [{"pgid": "1.0"},]}', "invalid JSON"),
        (b'{"pg_stats": [] } trailing', "unexpected data after the listing"),
        (b"[] []", "unexpected data after the listing"),
        (b'{"pg_ready": 1}', "pg_ready is int, not a boolean"),
        (b'{"pg_stats": {}}', "pg_stats is not an array"),
        (b'{"pg_stats": null}', "pg_stats is not an array"),
        (b'{"pg_stats": [], "pg_stats": []}', "pg_stats appears twice"),
        (b'{"pg_ready": true, "pg_ready": false}', "pg_ready appears twice"),
    ],
)
def test_garbage_is_a_parse_error(payload: bytes, message: str) -> None:
    with pytest.raises(PGParseError, match=message):
        parse_pg_ls(payload)


@pytest.mark.parametrize("where", ["field", "entry", "array"])
def test_deeply_nested_json_is_a_parse_error(where: str) -> None:
    """Python's JSON scanner recurses: 100,000 levels raise RecursionError, caught."""
    deep = "[" * 100_000 + "]" * 100_000
    text = {
        "field": '{"pg_ready": true, "later": ' + deep + "}",
        "entry": '{"pg_stats": [{"pgid": "1.0", "x": ' + deep + "}]}",
        "array": "[" + deep + "]",
    }[where]
    with pytest.raises(PGParseError, match="nested too deeply"):
        parse_pg_ls(text.encode())


def test_too_large_reply_is_refused_before_decoding() -> None:
    payload = recorded("laggy.json")
    assert parse_pg_ls(payload, max_bytes=len(payload)).pgs
    with pytest.raises(PGParseError, match=f"reply of {len(payload)} bytes exceeds the 6000"):
        parse_pg_ls(payload, max_bytes=6000)
    # The default cap holds the reference incident ten times over.
    assert MAX_REPLY_BYTES > 10 * REFERENCE_LAGGY * 2300


def test_too_many_osds_is_refused() -> None:
    entries = [entry(f"1.{i:x}", "active+laggy", [3 * i, 3 * i + 1, 3 * i + 2], 3 * i)
               for i in range(4)]  # fmt: skip
    assert len(parse_pg_ls(reply(entries), max_osds=12).pgs) == 4
    with pytest.raises(PGParseError, match="names 12 OSDs, more than the 11 accepted"):
        parse_pg_ls(reply(entries), max_osds=11)
    assert pgs.MAX_OSDS >= 10 * REFERENCE_OSDS


# ----------------------------------------------------------------------------- scale


def reference_incident(seed: int = 1651) -> tuple[bytes, Counter[tuple[int, str, str]]]:
    """1,651 laggy PGs of a size-3 pool across 630 OSDs, from the recorded entry shape,
    each with one of five slow OSDs as a replica (the kind of listing the reference
    incident produced), and the counts the plan implies."""
    rng = random.Random(seed)
    culprits = rng.sample(range(REFERENCE_OSDS), 5)
    template = laggy_entries()[0]
    plan: Counter[tuple[int, str, str]] = Counter()
    entries = []
    for i in range(REFERENCE_LAGGY):
        slow = culprits[i % len(culprits)]
        a, b = rng.sample([o for o in range(REFERENCE_OSDS) if o != slow], 2)
        acting = [a, slow, b] if i % 2 else [a, b, slow]
        e = copy.deepcopy(template)
        e.update(pgid=f"{1 + i % 3}.{i:x}", acting=acting, up=acting, acting_primary=a,
                 up_primary=a)  # fmt: skip
        entries.append(e)
        plan[(a, "primary", "laggy")] += 1
        for osd in acting[1:]:
            plan[(osd, "replica", "laggy")] += 1
    payload = json.dumps({"pg_ready": True, "pg_stats": entries}, separators=(",", ":"))
    return payload.encode(), plan


def test_reference_incident_is_attributed_and_bounded() -> None:
    payload, plan = reference_incident()
    assert 3_500_000 < len(payload) < 4_000_000  # about 2.2 KB per PG, as recorded
    tracemalloc.start()
    try:
        listing = parse_pg_ls(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert listing.listed() == {"laggy": REFERENCE_LAGGY, "wait": 0}
    assert listing.by_osd() == dict(plan)
    # The slow replicas stand out: each is a replica in a fifth of the laggy PGs.
    top = sorted(
        ((n, osd) for (osd, role, _), n in plan.items() if role == "replica"), reverse=True
    )
    slow = {osd for n, osd in top[:5]}
    assert all(listing.by_osd()[(osd, "replica", "laggy")] >= 330 for osd in slow)
    assert top[5][0] < 20
    # Streaming: the decoded text (1 byte per byte) plus one entry and a small record per
    # PG; json.loads of the same reply peaks at about 3 bytes per byte.
    assert peak < 1.5 * len(payload), peak / len(payload)
    # Series: at most four per OSD named, whatever the number of PGs.
    families = build_metrics(listing)
    per_osd = next(f for f in families if f.name == "cephnode_osd_laggy_pgs")
    assert len(per_osd.samples) == len(plan) <= 2 * REFERENCE_OSDS


# ----------------------------------------------------------------------------- metrics


def series(families: list[Any]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for f in families for s in f.samples}


def test_metrics_of_the_recorded_laggy_reply() -> None:
    payload = recorded("laggy.json")
    got = series(build_metrics(parse_pg_ls(payload)))

    def k(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
        return (name, frozenset(labels.items()))

    assert got == {
        k("cephnode_osd_laggy_pgs", ceph_daemon="osd.3", role="primary", state="laggy"): 3.0,
        k("cephnode_osd_laggy_pgs", ceph_daemon="osd.2", role="replica", state="laggy"): 3.0,
        k("cephnode_pgs_listed", state="laggy"): 3.0,
        k("cephnode_pgs_listed", state="wait"): 0.0,
        k("cephnode_pgs_reply_bytes"): float(len(payload)),
        k("cephnode_pgs_pgmap_ready"): 1.0,
    }


def test_metrics_of_a_healthy_cluster_and_of_an_old_release() -> None:
    healthy = series(build_metrics(parse_pg_ls(recorded("healthy.json"))))
    assert healthy == {
        ("cephnode_pgs_listed", frozenset({("state", "laggy")})): 0.0,
        ("cephnode_pgs_listed", frozenset({("state", "wait")})): 0.0,
        ("cephnode_pgs_reply_bytes", frozenset()): 17.0,
        ("cephnode_pgs_pgmap_ready", frozenset()): 1.0,
    }
    # No pg_ready in the reply: no pgmap_ready series rather than a guess.
    old = series(build_metrics(parse_pg_ls(b"")))
    assert {name for name, _ in old} == {"cephnode_pgs_listed", "cephnode_pgs_reply_bytes"}
    not_ready = series(build_metrics(parse_pg_ls(b'{"pg_ready":false}')))
    assert not_ready[("cephnode_pgs_pgmap_ready", frozenset())] == 0.0


# ----------------------------------------------------------------------------- loader


@pytest.fixture
def no_rados(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if nothing had loaded the binding, and ``import rados`` fails (None in
    sys.modules blocks the import); restored afterwards."""
    monkeypatch.setitem(sys.modules, "rados", None)


def test_binding_missing_names_the_package(no_rados: None, tmp_path: Path) -> None:
    with pytest.raises(CephUnavailable) as err:
        load_rados([str(tmp_path / "a"), str(tmp_path / "b")])
    assert str(err.value) == (
        f"librados Python binding not found (searched {tmp_path}/a, {tmp_path}/b): install "
        "python3-rados (Debian/Ubuntu: apt-get install python3-rados)"
    )


def test_binding_for_another_python(no_rados: None, tmp_path: Path) -> None:
    (tmp_path / "rados.cpython-39-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    with pytest.raises(CephUnavailable, match="is not built for this Python"):
        load_rados([str(tmp_path)])


def test_broken_binding(no_rados: None, tmp_path: Path) -> None:
    """Not an ELF file: dlopen fails inside module_from_spec (not exec_module)."""
    path = tmp_path / ("rados" + importlib.machinery.EXTENSION_SUFFIXES[0])
    path.write_bytes(b"not a shared object")
    with pytest.raises(CephUnavailable, match=f"cannot load {path}: .*reinstall python3-rados"):
        load_rados([str(tmp_path)])
    assert sys.modules["rados"] is None  # nothing half-loaded was registered


def test_debian_binding_loads_into_the_venv(no_rados: None) -> None:
    """The venv does not see /usr/lib/python3/dist-packages; the loader takes exactly
    the one extension from there."""
    need_rados_file = Path(librados.DIST_DIRS[0]) / (
        "rados" + importlib.machinery.EXTENSION_SUFFIXES[0]
    )
    need(need_rados_file.is_file(), f"{need_rados_file} (Debian package python3-rados)")
    assert librados.DIST_DIRS[0] not in sys.path
    rados = load_rados()
    assert rados.__file__ == str(need_rados_file)
    assert issubclass(rados.Error, Exception) and hasattr(rados, "Rados")
    assert load_rados() is rados  # registered once


# ----------------------------------------------------------------------------- client


class FakeRados:
    """Stands in for python3-rados' module: replays replies, records what it was asked.
    ``replies`` items are ``(ret, out, outs)`` tuples or an exception to raise."""

    class Error(Exception):
        def __init__(self, message: str, errno: int | None = None) -> None:
            super().__init__(message)
            self.errno = errno

    def __init__(self, replies: list[Any], connect_error: Exception | None = None) -> None:
        self.replies = list(replies)
        self.connect_error = connect_error
        self.handles: list[FakeHandle] = []

    def Rados(self, conffile: str, name: str, conf: dict[str, str]) -> FakeHandle:
        """The binding's class, as a factory (its name is the binding's)."""
        handle = FakeHandle(self, conffile, name, conf)
        self.handles.append(handle)
        return handle

    @property
    def commands(self) -> list[dict[str, Any]]:
        return [json.loads(c) for h in self.handles for c in h.commands]


class FakeHandle:
    def __init__(self, module: FakeRados, conffile: str, name: str, conf: dict[str, str]):
        self.module, self.conffile, self.name, self.conf = module, conffile, name, conf
        self.commands: list[str] = []
        self.connected = self.shut = False

    def connect(self) -> None:
        if self.module.connect_error is not None:
            raise self.module.connect_error
        self.connected = True

    def conf_get(self, option: str) -> str:
        return {"keyring": "/etc/ceph/x.client.y.keyring,/etc/ceph/keyring,"}[option]

    def mon_command(self, cmd: str, inbuf: bytes) -> tuple[int, bytes, str]:
        assert self.connected and not self.shut and inbuf == b""
        self.commands.append(cmd)
        item = self.module.replies.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def shutdown(self) -> None:
        self.shut = True


@contextlib.contextmanager
def fake_rados(replies: list[Any], **kwargs: Any) -> Iterator[FakeRados]:
    """Put a :class:`FakeRados` where load_rados finds the binding (sys.modules)."""
    fake = FakeRados(replies, **kwargs)
    saved = sys.modules.get("rados")
    sys.modules["rados"] = fake  # type: ignore[assignment]
    try:
        yield fake
    finally:
        if saved is None:
            sys.modules.pop("rados", None)
        else:
            sys.modules["rados"] = saved


def settings(tmp_path: Path, **kwargs: Any) -> ClientSettings:
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\nmon_host = 127.0.0.1\n")
    values = {"conffile": str(conf), "name": "client.cephnode-exporter", "keyring": None,
              "timeout": 2} | kwargs  # fmt: skip
    return ClientSettings(**values)


def test_client_sends_one_read_only_command_on_one_connection(tmp_path: Path) -> None:
    healthy = recorded("healthy.json")
    with fake_rados([(0, healthy, "")] * 3) as fake:
        client = MonCommandClient(settings(tmp_path, keyring=str(tmp_path / "ceph.conf")))
        assert [client.command(COMMAND) for _ in range(3)] == [healthy] * 3
        assert client.connects == 1 and len(fake.handles) == 1
        assert fake.commands == [
            {"prefix": "pg ls", "states": ["laggy", "wait"], "format": "json"}
        ] * 3  # fmt: skip
        handle = fake.handles[0]
        assert handle.name == "client.cephnode-exporter"
        assert handle.conf == {
            "client_mount_timeout": "2", "rados_mon_op_timeout": "2",
            "rados_osd_op_timeout": "2", "admin_socket": "", "log_file": "",
            "keyring": str(tmp_path / "ceph.conf"),
        }  # fmt: skip
        client.close()
        assert handle.shut


@pytest.mark.parametrize(
    ("reply_", "message", "reconnects"),
    [
        ((-110, b"", "timed out"), "`pg ls` not answered within 2 s (is a mgr active?", True),
        ((-13, b"", "access denied"), "may not run `pg ls` (the key needs mon 'allow r')", False),
        ((-22, b"", "'laggy' is not a valid pg state"), "exist since Ceph 15.2 Octopus", False),
        ((-5, b"", ""), "`pg ls` failed with EIO", True),
        (FakeRados.Error("[errno 108] broken"), "`pg ls` failed: [errno 108] broken", True),
    ],
)
def test_client_errors(tmp_path: Path, reply_: Any, message: str, reconnects: bool) -> None:
    """A timeout or a broken session drops the connection (the next call reconnects);
    a refusal of the command itself keeps it."""
    with fake_rados([reply_, (0, b"[]", "")]) as fake:
        client = MonCommandClient(settings(tmp_path))
        with pytest.raises(CephError) as err:
            client.command(COMMAND)
        assert message in str(err.value)
        assert client.command(COMMAND) == b"[]"
        assert client.connects == (2 if reconnects else 1)
        assert fake.handles[0].shut is reconnects


@pytest.mark.parametrize(
    ("errno_", "message"),
    [
        (2, "no key for client.cephnode-exporter in /etc/ceph/x.client.y.keyring, "
            "/etc/ceph/keyring (create it with `ceph auth get-or-create "
            "client.cephnode-exporter mon 'allow r'`"),
        (13, "the monitors refused client.cephnode-exporter: a wrong key, a key without "
             "mon caps (it needs mon 'allow r')"),
        (110, "no monitor answered within 2 s (mon_host of "),
        (103, "connecting to Ceph as client.cephnode-exporter failed: "),
    ],
)  # fmt: skip
def test_connect_errors(tmp_path: Path, errno_: int, message: str) -> None:
    error = FakeRados.Error(f"[errno {errno_}] error connecting to the cluster", errno_)
    with fake_rados([], connect_error=error) as fake:
        client = MonCommandClient(settings(tmp_path))
        for _ in range(2):  # no handle is kept: each call tries afresh
            with pytest.raises(CephError) as err:
                client.command(COMMAND)
            assert message in str(err.value)
        assert client.connects == 0 and all(h.shut for h in fake.handles)
        assert len(fake.handles) == 2


def test_unreadable_files_fail_before_librados(tmp_path: Path) -> None:
    with fake_rados([]) as fake:
        missing = settings(tmp_path, conffile=str(tmp_path / "nope.conf"))
        with pytest.raises(CephError, match=r"cannot read Ceph configuration .*nope.conf: No"):
            MonCommandClient(missing).command(COMMAND)
        no_key = settings(tmp_path, keyring=str(tmp_path / "k"))
        with pytest.raises(CephError, match=r"cannot read keyring .*/k: No such file"):
            MonCommandClient(no_key).command(COMMAND)
        # A FIFO (no writer) or a directory given by mistake: refused at once, where a
        # plain open() of the FIFO would block the collector's thread for good.
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        for kind, bad in (("FIFO", fifo), ("directory", tmp_path)):
            for field, what in (("conffile", "Ceph configuration"), ("keyring", "keyring")):
                client = MonCommandClient(settings(tmp_path, **{field: str(bad)}))
                started = time.monotonic()
                with pytest.raises(
                    CephError, match=rf"cannot read {what} .*not a regular file \({kind}\)"
                ):
                    client.command(COMMAND)
                assert time.monotonic() - started < 1
        assert fake.handles == []


# ----------------------------------------------------------------------------- collector


def pgs_collection(tree: Tree, payload: bytes | None = None) -> Collection:
    """One collection with the pgs collector on, its binding replaying a recorded reply
    (tests/test_metrics_doc.py: every pgs metric)."""
    conf = tree.root / "ceph.conf"
    conf.write_text("[global]\nmon_host = 127.0.0.1\n")
    reply_ = recorded("laggy.json") if payload is None else payload
    with fake_rados([(0, reply_, "")]):
        return collect([*tree.flags, "--collector.pgs", f"--collector.pgs.conf={conf}"])


def test_collector_on_the_recorded_reply(node_trees: dict[str, Tree]) -> None:
    c = pgs_collection(node_trees["epyc9454p-tuned"])
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 1
    assert value(c, "cephnode_osd_laggy_pgs", ceph_daemon="osd.2", role="replica",
                 state="laggy") == 3  # fmt: skip
    assert value(c, "cephnode_osd_laggy_pgs", ceph_daemon="osd.3", role="primary",
                 state="laggy") == 3  # fmt: skip
    assert value(c, "cephnode_pgs_listed", state="laggy") == 3
    assert value(c, "cephnode_scrape_collector_read_errors", collector="pgs") == 0
    # Every other default collector ran beside it.
    assert value(c, "cephnode_scrape_collector_success", collector="cpuidle") == 1


def test_malformed_entries_count_as_read_errors(
    node_trees: dict[str, Tree], caplog: pytest.LogCaptureFixture
) -> None:
    entries = laggy_entries()
    del entries[0]["acting"]
    caplog.set_level(logging.INFO, logger="cephnode_exporter.scrape")
    c = pgs_collection(node_trees["epyc9454p-tuned"], reply(entries))
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 1
    assert value(c, "cephnode_scrape_collector_read_errors", collector="pgs") == 1
    assert value(c, "cephnode_pgs_listed", state="laggy") == 2
    [warning] = [
        r for r in caplog.records if r.getMessage() == "collector skipped unreadable items"
    ]
    assert warning.kv["first"] == ["pg 2.3: acting None is not a list"]  # type: ignore[attr-defined]


def test_garbage_reply_fails_the_collector(node_trees: dict[str, Tree]) -> None:
    c = pgs_collection(node_trees["epyc9454p-tuned"], b'{"pg_stats": {}}')
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
    # The pgs collector's families: cephnode_pgs_* and cephnode_osd_laggy_pgs.
    ours = ("cephnode_pgs_", "cephnode_osd_laggy_pgs")
    assert not [k for k in samples(c) if k[0].startswith(ours)]
    error = next(o.error for o in c.outcomes if o.name == "pgs")
    assert error == "PGParseError: pg_stats is not an array (at offset 13)"


def failure(c: Collection) -> str | None:
    return next(o.error for o in c.outcomes if o.name == "pgs")


def test_binding_missing_fails_only_the_collector(
    node_trees: dict[str, Tree], no_rados: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(librados, "DIST_DIRS", (str(tmp_path),))
    tree = node_trees["epyc9454p-tuned"]
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\nmon_host = 127.0.0.1\n")
    c = collect([*tree.flags, "--collector.pgs", f"--collector.pgs.conf={conf}"])
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
    assert failure(c) == (
        f"CephUnavailable: librados Python binding not found (searched {tmp_path}): install "
        "python3-rados (Debian/Ubuntu: apt-get install python3-rados)"
    )
    others = [o for o in c.outcomes if o.name != "pgs"]
    assert others and all(o.success for o in others)


def test_wrong_conf_path_fails_cleanly(node_trees: dict[str, Tree], tmp_path: Path) -> None:
    need_rados()
    tree = node_trees["epyc9454p-tuned"]
    c = collect([*tree.flags, "--collector.pgs", f"--collector.pgs.conf={tmp_path}/no.conf"])
    assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
    assert failure(c) == (
        f"CephError: cannot read Ceph configuration {tmp_path}/no.conf: No such file or directory"
    )
    assert all(o.success for o in c.outcomes if o.name != "pgs")


def test_unreachable_monitor_fails_within_the_timeout(
    node_trees: dict[str, Tree], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The real binding, a mon_host where nothing listens, --collector.pgs.timeout=1: the
    collector fails on librados' own timeout (not the scraper's deadline), says so once
    in the log, and the other collectors' results stand. Twice: no call is left stuck."""
    need_rados()
    from tests.cephcluster import free_port

    conf = tmp_path / "ceph.conf"
    conf.write_text(f"[global]\nmon_host = [v2:127.0.0.1:{free_port()}]\n")
    tree = node_trees["epyc9454p-tuned"]
    flags = [*tree.flags, "--collector.pgs", f"--collector.pgs.conf={conf}",
             "--collector.pgs.timeout=1", "--collector.timeout=5"]  # fmt: skip
    caplog.set_level(logging.INFO, logger="cephnode_exporter.scrape")
    scraper = build_scraper(parse_args(["dump", *flags]))
    try:
        for _ in range(2):
            start = time.monotonic()
            c = scraper.collect(10.0)
            took = time.monotonic() - start
            assert value(c, "cephnode_scrape_collector_success", collector="pgs") == 0
            assert failure(c) == (
                f"CephError: no monitor answered within 1 s (mon_host of {conf}): [errno 110] "
                "RADOS timed out (error connecting to the cluster)"
            )
            pgs_took = value(c, "cephnode_scrape_collector_duration_seconds", collector="pgs")
            assert pgs_took is not None and 1.0 <= pgs_took < 5.0, pgs_took
            assert took < 10.0
            others = [o for o in c.outcomes if o.name != "pgs"]
            assert len(others) >= 6 and all(o.success for o in others)
            assert value(c, "cephnode_cpu_scaling_governor_cpus", governor="performance") == 96
    finally:
        scraper.close()
    failed = [r for r in caplog.records if r.getMessage() == "collector failed"]
    assert [r.kv["collector"] for r in failed] == ["pgs"]  # type: ignore[attr-defined]  # logged once


# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--collector.pgs.timeout=0", "must be in [1, 60]: 0"),
        ("--collector.pgs.timeout=61", "must be in [1, 60]: 61"),
        ("--collector.pgs.timeout=1.5", "not a whole number of seconds: '1.5'"),
        ("--collector.pgs.timeout=x", "not a whole number of seconds: 'x'"),
        ("--collector.pgs.name=", "invalid Ceph client name ''"),
        ("--collector.pgs.name=a b", "invalid Ceph client name 'a b'"),
    ],
)
def test_flag_validation(flag: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["dump", "--collector.pgs", flag])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_flag_defaults_and_names() -> None:
    args = parse_args(["dump"])
    assert args.collector_pgs is False  # off by default: a cluster view
    assert args.collector_pgs_conf == "/etc/ceph/ceph.conf"
    assert args.collector_pgs_name == "client.cephnode-exporter"
    assert args.collector_pgs_keyring is None
    assert args.collector_pgs_timeout == DEFAULT_TIMEOUT == 2
    assert parse_args(["dump", "--collector.pgs.name=ro"]).collector_pgs_name == "client.ro"
    named = parse_args(["dump", "--collector.pgs.name=client.x"])
    assert named.collector_pgs_name == "client.x"


@pytest.mark.parametrize(
    ("requested", "collector_timeout", "effective"),
    [(2, 5.0, 2), (5, 5.0, 2), (10, 30.0, 10), (10, 10.0, 4), (3, 2.0, 1), (1, 0.5, 1)],
)
def test_effective_timeout(requested: int, collector_timeout: float, effective: int) -> None:
    """Connecting and the command each get the timeout: together at most 0.8 x
    --collector.timeout, and never below librados' one second."""
    assert effective_timeout(requested, collector_timeout) == effective


def test_collector_passes_its_flags_to_librados(
    node_trees: dict[str, Tree], tmp_path: Path
) -> None:
    keyring = tmp_path / "ro.keyring"
    keyring.write_text("[client.ro]\n\tkey = x\n")
    conf = tmp_path / "site.conf"
    conf.write_text("[global]\nmon_host = 127.0.0.1\n")
    tree = node_trees["epyc9454p-tuned"]
    with fake_rados([(0, b"[]", "")]) as fake:
        collect([*tree.flags, *ONLY_PGS, f"--collector.pgs.conf={conf}",
                 "--collector.pgs.name=ro", f"--collector.pgs.keyring={keyring}",
                 "--collector.pgs.timeout=9", "--collector.timeout=20"])  # fmt: skip
    [handle] = fake.handles
    assert (handle.conffile, handle.name) == (str(conf), "client.ro")
    assert handle.conf["keyring"] == str(keyring)
    assert handle.conf["client_mount_timeout"] == handle.conf["rados_mon_op_timeout"] == "8"
    assert handle.shut  # the scraper closes the collector, which disconnects
