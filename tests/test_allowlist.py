"""The admin-socket allowlist (ceph/asok.py ALLOWED_COMMANDS) holds exactly the reviewed
read-only commands, each of which every release's OSD offers with exactly the allowed
arguments, and the state-changing commands those OSDs offer are refused before any I/O.

The OSDs' own command tables (``get_command_descriptions``) were recorded from the real
Pacific 16.2.15, Reef 18.2.7 and Tentacle 20.2.4 daemons (``slow/`` of each release's
fixtures, provenance in tests/fixtures/ceph/releases/README.md). The tables carry no
read/write flag for admin-socket commands, so "read-only" is the review below, one
reason per command, and adding a command to the allowlist fails here until it is
reviewed. tests/test_cephcluster.py checks the same against the live Pacific cluster.
"""

from __future__ import annotations

import pytest
from cephnode_exporter.ceph import asok

from tests.test_osd_releases import RELEASES, command_table

# Each allowlisted command and why it changes nothing in the daemon (ceph/ceph sources).
READ_ONLY: dict[str, str] = {
    "perf dump": "formats the perf counters (src/common/ceph_context.cc, perf dump)",
    "perf schema": "formats the counters' descriptions (ceph_context.cc)",
    "perf histogram dump": "formats the histograms (ceph_context.cc)",
    "perf histogram schema": "formats the histograms' axes (ceph_context.cc)",
    "dump_ops_in_flight": "walks the op tracker's list under its lock (src/osd/OSD.cc)",
    "dump_historic_slow_ops": "formats the kept slow ops (src/common/TrackedOp.cc)",
    "config show": "formats the configuration (ceph_context.cc)",
    "config get": "formats one option (ceph_context.cc)",
    "status": "formats the OSD's state (src/osd/OSD.cc asok_command)",
    "version": "formats the version (src/common/admin_socket.cc VersionHook)",
    "dump_objectstore_kv_stats": "RocksDBStore::get_statistics reads properties",
    "bluefs stats": "formats BlueFS's space use (src/os/bluestore/BlueFS.cc SocketHook)",
    "dump_osd_network": "copies the heartbeat ping times and formats them; its value "
    "argument is only the listing threshold (src/osd/OSD.cc asok_command)",
}
# Commands every release's OSD offers that change its state or put work on its devices:
# never sendable.
MUTATING = (
    "config set",
    "config unset",
    "injectargs",
    "perf reset",
    "compact",
    "bench",
    "cache drop",
    "heap",
    "flush_store_cache",
    "log flush",
    "log reopen",
    "scrub_purged_snaps",
    "smart",  # runs smartctl on the OSD's devices
)
# Read-only commands evaluated for the newer releases and left out (docs/ceph.md, "Newer
# releases' signals"): not sent, so not allowlisted.
EVALUATED_NOT_USED = ("dump_blocked_ops_count", "counter dump", "dump_osd_pg_stats")


def test_the_allowlist_is_exactly_the_reviewed_read_only_commands() -> None:
    assert set(asok.ALLOWED_COMMANDS) == set(READ_ONLY)
    assert not set(asok.ALLOWED_COMMANDS) & set(MUTATING + EVALUATED_NOT_USED)
    # Only the commands the OSDs answer in text are read as text.
    assert {p for p, spec in asok.ALLOWED_COMMANDS.items() if spec.text} == {"bluefs stats"}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("kind", ["memstore", "bluestore"])
def test_every_allowlisted_command_is_the_releases_own(release: str, kind: str) -> None:
    """Each allowlisted command is in the release's command table with exactly the
    allowed arguments (the daemon ignores unknown arguments, so the client is the only
    check); BlueFS's only on the BlueStore OSD."""
    table = command_table(release, kind)
    for prefix, spec in asok.ALLOWED_COMMANDS.items():
        if prefix == "bluefs stats" and kind == "memstore":
            assert prefix not in table
            continue
        assert table.get(prefix) == spec.args, (release, kind, prefix, table.get(prefix))


@pytest.mark.parametrize("release", RELEASES)
def test_state_changing_commands_are_offered_and_refused(release: str) -> None:
    """The mutating commands exist on the release's OSDs (so refusing them is real) and
    the client refuses each before opening a connection, as it does the evaluated ones."""
    table = command_table(release, "bluestore")
    for prefix in MUTATING:
        assert prefix in table, (release, prefix)
    for prefix in (*MUTATING, *EVALUATED_NOT_USED):
        with pytest.raises(asok.AsokRefused, match="not an allowlisted"):
            asok.encode_request(prefix, {})
    # An allowlisted command with an argument it does not have (newer releases honour
    # output-file for every command, which writes a file) is refused too.
    with pytest.raises(asok.AsokRefused, match="not allowed"):
        asok.encode_request("perf dump", {"output-file": "/tmp/x"})
