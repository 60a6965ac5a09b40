"""The ``osd`` collector's admin-socket round: what one OSD is asked each scrape.

Part of the ``osd`` collector (collectors/osd.py), which runs :func:`query_round` for
every OSD at once (ceph/asokloop.py) and then calls :func:`parse_replies`. A round sends
``perf histogram dump``, ``perf dump`` and ``dump_ops_in_flight`` every scrape;
``config show`` and ``version`` only when the OSD's :class:`ConfigCache` is stale, its
pid changed (a restart) or its socket file did; ``dump_osd_network`` likewise only when
its :class:`NetworkCache` is; ``dump_objectstore_kv_stats`` only when config show says
the OSD keeps RocksDB statistics. The round finds the OSD's pid (the socket's peer); its
process is read afterwards (:func:`read_osd_process`), one OSD after the other. Replies
are parsed by ceph/perf.py, ceph/kvstats.py and ceph/network.py; this module only decides
what to ask and where the answers go, and checks that the daemon answering is the OSD
the socket's name says (:func:`check_identity`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cephnode_exporter.ceph import kvstats, perf
from cephnode_exporter.ceph.asok import AdminSocket, AsokError, AsokIdentityError, decode_reply
from cephnode_exporter.ceph.asokloop import PEER, Ask, Round
from cephnode_exporter.ceph.discovery import OSDSocket
from cephnode_exporter.ceph.network import NetworkPings, parse_osd_network
from cephnode_exporter.ceph.perf import OSDConfig, PerfParseError
from cephnode_exporter.facts.osd import OSDFacts
from cephnode_exporter.hostfs import AttrFiles, HostFS, ParseError
from cephnode_exporter.hostfs.process import (
    ProcessGone,
    ProcessSample,
    ProcessState,
    read_process,
)

P = TypeVar("P")


@dataclass
class ConfigCache:
    """One OSD's last ``config show`` and ``version``, reused for ``interval`` seconds.

    The round decides and fetches; :func:`parse_replies` parses a fresh reply and
    stores the result (or clears the cache when it does not parse, so the next scrape
    asks again). Reused only while the socket's peer pid and its file (device and inode
    through a link, ``OSDSocket.file_id``) are those of the fetch: config show's ``name``
    is checked against the socket on every scrape, and a cached name must be the name of
    the daemon answering now. A pid of None (not visible: another pid namespace) relies on
    the file: a daemon binding the path anew, or a link pointed at another socket, is
    another file. A file_id of None (not known) relies on the pid alone.
    """

    pid: int | None = None
    fetched: float = float("-inf")
    socket: tuple[int, int] | None = None  # the socket file's file_id at the fetch
    config: perf.OSDConfig | None = None
    version: str | None = None
    kv_wanted: bool = False
    # The cluster fsid config show reported: tells a second socket of the same daemon
    # from another cluster's OSD with the same id (discovery.choose_sockets), which also
    # prefers a socket whose daemon's name (config show's) is its OSD's.
    fsid: str | None = None
    name: str | None = None

    def fresh(
        self, pid: int | None, now: float, interval: float, socket: tuple[int, int] | None = None
    ) -> bool:
        return (
            self.config is not None
            and self.version is not None
            and pid == self.pid
            and socket == self.socket
            and now - self.fetched < interval
        )


@dataclass
class NetworkCache:
    """One OSD's last ``dump_osd_network`` summary, reused for ``interval`` seconds.

    Why it may be reused: the OSD recomputes a peer's 1-, 5- and 15-minute averages only
    when that peer's one-minute interval closes (ceph/ceph src/osd/OSD.cc
    ``handle_osd_ping``; qa/standalone/misc/network-ping.sh waits a whole cycle for a
    change), so a reply asked for within the minute mostly repeats the last one. Reused
    for at most the interval (a change shows up to that much later, as it would with
    the interval as the scrape interval), and dropped at once when the OSD's pid changed
    (a restarted OSD starts its averages afresh) or its socket file (as
    :class:`ConfigCache`). The round decides and fetches;
    :func:`parse_replies` parses a fetched reply and stores the summary (or leaves the
    cache empty when it does not parse, so the next scrape asks again). A pid of None
    (not visible) relies on the socket file and the interval.
    """

    pid: int | None = None
    fetched: float = float("-inf")
    pings: NetworkPings | None = None
    socket: tuple[int, int] | None = None  # the socket file's file_id at the fetch

    def fresh(
        self, pid: int | None, now: float, interval: float, socket: tuple[int, int] | None = None
    ) -> bool:
        return (
            self.pings is not None
            and pid == self.pid
            and socket == self.socket
            and now - self.fetched < interval
        )


@dataclass
class _Replies:
    """The replies of one OSD, gathered within the deadline. The three asked every
    scrape are kept as bytes and decoded by :func:`parse_replies` once every round has
    ended: decoding takes 0.1-0.3 ms a reply, which within the rounds would keep the
    other OSDs' ready sockets waiting."""

    path: str = ""
    # The daemon the socket's name says ("osd.5"), checked against config show's name
    # (check_identity); "" when the round was not told (not checked).
    expected: str = ""
    histograms: bytes = b""
    perf: bytes = b""
    ops: bytes = b""
    # config show and dump_osd_network, asked once a minute, are parsed within the round
    # into their small summaries (or the parse error, raised by parse_replies): their
    # decoded JSON, up to tens of MB for a reply near its cap, is not kept until every
    # round has ended.
    config: OSDConfig | PerfParseError | None = None
    version: Any = None
    kv_stats: bytes | None = None  # raw: the reply repeats keys and is several objects
    network: NetworkPings | PerfParseError | None = None  # collectors/osd_network.py
    cache: ConfigCache | None = None  # config and version, unless fetched in this scrape
    fetched: bool = True  # config and version are in this reply (then parsed into cache)
    network_cache: NetworkCache | None = None  # the ping summary, unless fetched now
    network_fetched: bool = True  # dump_osd_network is in this reply
    pid: int | None = None
    process: ProcessSample | None = None
    process_note: str | None = None
    process_error: str | None = None


def _round(
    sock: AdminSocket,
    cache: ConfigCache,
    interval: float,
    network: NetworkCache | None = None,
    network_interval: float = 0.0,
    osd: OSDSocket | None = None,
) -> Round[_Replies]:
    """One OSD's round (ceph/asokloop.py): each request yielded, its payload received.
    ``osd``: the socket as discovered, whose name and file the replies are checked
    against (None: neither is)."""
    path = sock.path
    file_id = osd.file_id if osd is not None else None
    # perf histogram dump just before perf dump: the histogram's _count and perf
    # dump's _sum are then at most a few milliseconds apart (docs/metrics.md).
    r = _Replies(path=path, expected=f"osd.{osd.osd_id}" if osd is not None else "")
    r.histograms = yield Ask("perf histogram dump", {"logger": "osd"})
    # The pid of that connection's peer tells a restarted OSD from the cached one.
    seen = sock.last_peer
    seen_pid = seen[0] if seen is not None else None
    r.perf = yield Ask("perf dump")
    r.ops = yield Ask("dump_ops_in_flight")
    now = time.monotonic()
    r.network_cache = network
    if (
        network is not None
        and seen is not None
        and network.fresh(seen_pid, now, network_interval, file_id)
    ):
        r.network_fetched = False
    else:
        # Heartbeat ping times to every peer (value 0: no threshold): ceph/network.py.
        reply = yield Ask("dump_osd_network", {"value": 0})
        r.network = _parsed(parse_osd_network, decode_reply(reply, path, "dump_osd_network"))
        del reply
        if network is not None:
            network.pings = None  # until the collector parsed the reply
            network.pid, network.fetched, network.socket = seen_pid, now, file_id
    r.cache = cache
    if seen is not None and cache.fresh(seen_pid, now, interval, file_id):
        r.fetched = False
    else:
        config = decode_reply((yield Ask("config show")), path, "config show")
        r.version = decode_reply((yield Ask("version")), path, "version")
        cache.config, cache.version = None, None  # until the collector parsed them
        cache.pid = seen_pid
        cache.fetched = now
        cache.socket = file_id
        cache.kv_wanted = kvstats.wanted(config)
        fsid = config.get("fsid") if isinstance(config, dict) else None
        cache.fsid = fsid if isinstance(fsid, str) else None
        name = config.get("name") if isinstance(config, dict) else None
        cache.name = name if isinstance(name, str) else None
        r.config = _parsed(perf.parse_config, config)
        del config
    if cache.kv_wanted:
        r.kv_stats = yield Ask("dump_objectstore_kv_stats")
    # The pid for the process read (read_osd_process): a failure here must not fail the OSD.
    try:
        r.pid = sock.last_peer[0] if sock.last_peer is not None else (yield PEER)
    except AsokError as exc:
        r.process_error = f"peer pid: {exc}"
        return r
    if r.pid is None:
        r.process_note = (
            "the socket's peer pid is 0: the OSD runs in a pid namespace the exporter cannot see"
        )
    return r


def _parsed(parse: Callable[[Any], P], decoded: Any) -> P | perf.PerfParseError:
    """``parse(decoded)``, or the parse error for :func:`parse_replies` to raise."""
    try:
        return parse(decoded)
    except perf.PerfParseError as exc:
        # Without its traceback: the parser's frame holds the decoded reply.
        return exc.with_traceback(None)


def read_osd_process(
    replies: _Replies, fs: HostFS, state: ProcessState, files: AttrFiles | None = None
) -> None:
    """Read the process of the OSD whose pid the round found, after every round has
    ended (its 50-100 thread statuses read within the rounds would keep the other OSDs'
    ready sockets waiting). A failure is the OSD's process note or error, never the
    OSD's.
    """
    if replies.pid is None or replies.process_error is not None:
        return
    try:
        replies.process = read_process(fs, replies.pid, state, files=files)
    except ProcessGone as exc:
        replies.process_note = str(exc)
    except (OSError, ParseError) as exc:
        replies.process_error = str(exc)
    except Exception as exc:  # as in the rounds: even a bug stays this OSD's
        replies.process_error = f"reading pid {replies.pid}: {type(exc).__name__}: {exc}"


def parse_replies(facts: OSDFacts, replies: _Replies) -> None:
    """Fill ``facts`` from the replies; raises :class:`perf.PerfParseError`, or
    :class:`AsokError` (``AsokDecodeError`` for a reply that is no JSON,
    ``AsokIdentityError`` for a daemon that is not the socket's OSD)."""
    path = replies.path
    cache = replies.cache
    if not replies.fetched and cache is not None:
        facts.config, facts.version = cache.config, cache.version
    else:
        facts.config = _raised(replies.config)
        facts.version = perf.parse_version(replies.version)
    assert facts.config is not None
    # Before anything else is read: nothing of another daemon becomes this OSD's facts.
    check_identity(replies, facts.config)
    histograms = decode_reply(replies.histograms, path, "perf histogram dump")
    perf_dump = decode_reply(replies.perf, path, "perf dump")
    ops = decode_reply(replies.ops, path, "dump_ops_in_flight")
    facts.histograms = perf.parse_op_histograms(histograms)
    # Counter names by the OSD's release, and what its release and object store should
    # have, from the table in ceph/counters.py.
    release = perf.version_tuple(facts.version) if facts.version else None
    facts.counters = perf.parse_perf_dump(
        perf_dump,
        release[0] if release is not None else None,
        facts.config.objectstore,
        facts.config.op_queue,
    )
    facts.ops = perf.parse_ops_in_flight(ops, facts.config.complaint_time)
    network = replies.network_cache
    if not replies.network_fetched and network is not None and network.pings is not None:
        facts.network = network.pings
    else:
        facts.network = _raised(replies.network)
        if network is not None:
            network.pings = facts.network
    if replies.fetched and cache is not None:
        # Kept only once everything parsed: a bad reply is asked for again next scrape.
        cache.config, cache.version = facts.config, facts.version
    try:
        facts.kv = kvstats.parse_kv_stats(replies.kv_stats)
    except kvstats.KVStatsDeclined as exc:
        # The cached config show said the statistics were on, the OSD says they are off:
        # no series (as Pacific's and Reef's empty reply), and the command is not sent
        # again until config show is read anew and says they are on.
        facts.kv, facts.kv_note = None, str(exc)
        if cache is not None:
            cache.kv_wanted = False
    facts.pid = replies.pid
    facts.process = replies.process
    facts.process_note = replies.process_note
    facts.process_error = replies.process_error


def check_identity(replies: _Replies, config: perf.OSDConfig) -> None:
    """Raise :class:`AsokIdentityError` when the daemon's own name (config show, this
    scrape's or the cached one, which ConfigCache keeps only for the same pid and socket
    file) is not the OSD the socket's name says: a link ``ceph-osd.5.asok`` to osd.0's
    socket, or a socket file another daemon now binds, would otherwise report osd.0's
    data as osd.5's.

    A config show without ``name`` (or with one that is no string) is not a mismatch:
    every Ceph release prints it (a core option of every daemon), so only a daemon that
    is no Ceph, or a hostile one, leaves it out, and such a daemon could as well print
    the expected name; refusing it would buy no safety, only lose an OSD's series should
    a release ever drop the option.
    """
    if replies.expected and config.name and config.name != replies.expected:
        shown = config.name if len(config.name) <= 64 else config.name[:61] + "..."
        raise AsokIdentityError(
            replies.path,
            "config show",
            f"the daemon's name is {shown!r}, the socket's name says {replies.expected}",
        )


def _raised(parsed: P | perf.PerfParseError | None) -> P:
    """A summary the round parsed; its parse error raised (None: not in the reply)."""
    if isinstance(parsed, perf.PerfParseError):
        raise parsed
    if parsed is None:
        raise perf.PerfParseError("no reply parsed")
    return parsed


def query_round(
    sock: AdminSocket,
    cache: ConfigCache,
    interval: float,
    network: NetworkCache | None = None,
    network_interval: float = 0.0,
    osd: OSDSocket | None = None,
) -> tuple[AdminSocket, Round[_Replies]]:
    """One OSD's round as :func:`~cephnode_exporter.ceph.asokloop.run_rounds` runs it."""
    return sock, _round(sock, cache, interval, network, network_interval, osd)
