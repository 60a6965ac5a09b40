"""Collector ``osd``: what every OSD on this node experiences, from its admin socket.

Ceph's own ceph-exporter exports no histograms, no RocksDB or sub-op counters and
nothing about the host; this collector exports the op latency as real Prometheus
histograms (so ``histogram_quantile`` gives a true p99 per OSD, host or fleet), the
BlueStore/RocksDB stage latencies, the ops in flight and the configuration that detunes
an OSD, all labelled ``ceph_daemon="osd.N"`` so they join with the host facts.

Why this shape:

- Sockets are discovered on every scrape (one ``scandir``): OSDs come, go and restart.
- All OSDs are queried at once, in this thread, on non-blocking sockets
  (ceph/asokloop.py) within one budget (``--collector.osd.timeout``, kept below
  ``--collector.timeout``), so a stopped OSD (which accepts connections and never
  answers) costs the scrape at most the budget and is reported as itself:
  ``cephnode_osd_scrape_success{ceph_daemon} 0``.
- A failing OSD is logged when its failure starts or changes and when it recovers, not on
  every scrape (like the scraper's own collector log).
- A node without OSDs (no socket directory, or no OSD sockets) is a success with no OSD
  series: the collector is on by default and the exporter also runs on other nodes.
- Host facts per OSD: its pid comes from the admin socket's peer credentials
  (``SO_PEERCRED`` of the round's connections); its process is read from
  ``--path.procfs`` after the round, one OSD after the other (hostfs/process.py says
  why not psutil). The ``block`` link of its data directory is
  followed to its disks in the same thread (sysfs is read serially, as node_exporter
  learned to). A pid we cannot see (the OSD in another pid
  namespace), an OSD without a block device (memstore, a file-backed BlueStore) or an
  unreadable file leaves those series out with a logged reason; the OSD's own series and
  ``scrape_success`` do not depend on them.
- RocksDB compaction totals (``dump_objectstore_kv_stats``) only from an OSD whose
  ``config show`` says it keeps them (``rocksdb_perf`` and a ``rocksdb_collect_*`` option,
  all off by default): at Ceph's defaults the command is never sent.
- Latency computed here rather than in Prometheus (ceph/latency.py): each OSD's p99 over
  a sliding window of its own reads, and one histogram per op type and media pooling the
  node's OSDs. At 630 OSDs the rules that computed both from the 36,000 bucket series
  dominated Prometheus' evaluation (docs/performance.md); the exporter has the histograms
  in hand every scrape. The same for the means the rules took as ``rate(x_sum) /
  rate(x_count)`` of two raw counters per OSD (BlueStore commit, RocksDB stages, CPU per
  op): each OSD's over the same window, and the node's CPU per op. The state lives
  between scrapes under a lock, never held across socket I/O. The per-OSD histograms and
  counters stay exported, except the RocksDB stage summaries, whose series pay for the
  means.

This module is the orchestration (discovery, the parallel round, host facts, logging);
the collector's other parts are beside it: collectors/osd_query.py (what one OSD is
asked, and the config cache), collectors/osd_latency.py (the latency windows and pools),
collectors/osd_metrics.py (the metric families) and collectors/osd_catalogue.py (the
counters exported one to one).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from cephnode_exporter.ceph import perf
from cephnode_exporter.ceph.asok import AdminSocket, AsokError, AsokStale
from cephnode_exporter.ceph.asokloop import run_rounds
from cephnode_exporter.ceph.discovery import (
    DEFAULT_SOCKET_DIR,
    Answer,
    Dropped,
    NoSocketDirectory,
    OSDSocket,
    choose_sockets,
    discover_osd_sockets,
    limit_sockets,
)
from cephnode_exporter.ceph.network import MAX_ENTRIES
from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    ItemLimit,
    bounded,
    register,
)
from cephnode_exporter.collectors.osd_encryption import (
    encryption_metrics,
    forget_encryption,
    read_encryption,
)
from cephnode_exporter.collectors.osd_latency import OSDLatency
from cephnode_exporter.collectors.osd_metrics import build_metrics, dropped_metrics
from cephnode_exporter.collectors.osd_query import (
    ConfigCache,
    NetworkCache,
    parse_replies,
    query_round,
    read_osd_process,
)
from cephnode_exporter.facts.osd import (
    DEFAULT_LATENCY_WINDOW,
    HostHistograms,
    OSDCollectorFacts,
    OSDFacts,
)
from cephnode_exporter.hostfs import AttrFiles, ParseError, ReadErrors, fd_budget
from cephnode_exporter.hostfs.blockdev import NoDevice, block_media, find_osd_block
from cephnode_exporter.hostfs.dmcrypt import Encryption
from cephnode_exporter.hostfs.numa import cpus_per_node, read_node_cpus
from cephnode_exporter.hostfs.process import THREAD_FD_SHARE, ProcessState
from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

# Seconds all OSDs together may take. Healthy OSDs answer the five commands in about
# 5 ms (docs/ceph.md); the budget only matters for a stopped or overloaded OSD.
DEFAULT_TIMEOUT = 2.0
# Seconds a config show and version reply is reused (0: fetched every scrape). They change
# on `ceph config set` and restarts, and config show is the largest JSON of a scrape
# (68 KB, 0.7 ms to decode and parse per OSD): refetched at once when the OSD's pid
# changes (a restart), so a new version or object store is never stale.
DEFAULT_CONFIG_INTERVAL = 60.0
# Seconds a dump_osd_network summary is reused (0: asked every scrape). Each peer's
# averages change only when its one-minute interval closes (collectors/osd_query.py
# NetworkCache); refetched at once when the OSD's pid changes.
DEFAULT_NETWORK_INTERVAL = 60.0
# Share of --collector.timeout, and of the time the scrape's budget leaves the call,
# that the OSD queries may use, leaving time to parse and build metrics before the
# scraper abandons the collector.
TIMEOUT_SHARE = 0.8
# Share of the time left to the call by which every reply must have been parsed; the
# rest is for building the families and the collectors after this one.
PARSE_SHARE = 0.9
# OSD sockets queried per scrape: a dense node runs 24 to 36 OSDs (a few dozen more with
# several OSDs per NVMe); about 120 series each.
DEFAULT_MAX_SOCKETS = 128
# Where cephadm keeps an OSD's data directory on the host (cephadm's get_data_dir():
# <data_dir>/<fsid>/<type>.<id>, data_dir /var/lib/ceph); inside the container, where
# config show's osd_data points, it is mounted as /var/lib/ceph/osd/ceph-<id>.
CEPHADM_DATA_DIR = "/var/lib/ceph/{fsid}/osd.{id}"


def _shape(error: str | None) -> str | None:
    """An error without its numbers, so "after 1.95 s" repeats as the same error."""
    return None if error is None else re.sub(r"[0-9.]+", "#", error)


@register
class OSDCollector(Collector):
    name = "osd"
    help = (
        "Ceph OSDs of this node via their admin sockets: op latency histograms, "
        "BlueStore/RocksDB latencies, ops in flight, debug levels"
    )

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        opts = ctx.options
        self._socket_dir = str(opts.ceph_socket_dir)
        limit = ctx.collector_timeout * TIMEOUT_SHARE
        self._timeout = min(float(opts.collector_osd_timeout), limit)
        self._last_error: dict[str, str | None] = {}
        self._last_host: dict[str, tuple[str | None, str | None]] = {}
        self._proc_states: dict[str, ProcessState] = {}
        # The OSD processes' thread status files, kept open between scrapes (one
        # descriptor per thread, a quarter of the descriptor limit at most).
        self._thread_files = AttrFiles(fd_budget(THREAD_FD_SHARE), recheck=True)
        self._config_caches: dict[str, ConfigCache] = {}
        self._config_interval = float(opts.collector_osd_config_interval)
        self._network_caches: dict[str, NetworkCache] = {}
        self._network_interval = float(opts.collector_osd_network_interval)
        # Socket path -> the heartbeat entries beyond the cap last logged (0: none).
        self._network_dropped: dict[str, int] = {}
        # Per-subsystem debug series: the profile's list by default (Pacific leaves 62 of 64
        # subsystems at non-zero defaults such as 1/5: all of them would be ~60 series per
        # OSD of noise); every non-zero one with --collector.osd.all-debug-levels.
        self._debug_subsystems: frozenset[str] | None = None
        if not opts.collector_osd_all_debug_levels:
            self._debug_subsystems = ctx.reads.debug_subsystems
        self._dir_missing_logged = False
        self._socket_limit = ItemLimit(
            self.name,
            "OSD sockets",
            "--collector.osd.max-sockets",
            int(opts.collector_osd_max_sockets),
        )
        self._dropped_logged: set[tuple[str, str]] = set()
        # Socket path -> the counters already logged as missing (ceph/counters.py).
        self._missing_logged: dict[str, frozenset[str]] = {}
        # Socket path -> the OSD's last refusal of dump_objectstore_kv_stats (None: none).
        self._kv_notes: dict[str, str | None] = {}
        self._latency_window = float(opts.collector_osd_latency_window)
        # The time of a read for the latency windows; tests replace it to step minutes.
        self.clock: Callable[[], float] = time.monotonic
        # The latency windows and pools, which outlive a scrape (collectors/osd_latency.py).
        self._windows = OSDLatency(self._latency_window)

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--ceph.socket-dir",
            dest="ceph_socket_dir",
            default=DEFAULT_SOCKET_DIR,
            metavar="PATH",
            help="directory of the Ceph admin sockets, package (<cluster>-osd.<id>.asok) "
            "or cephadm (<fsid>/ceph-osd.<id>.asok) layout (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.timeout",
            dest="collector_osd_timeout",
            type=bounded(float, 0.01, 3600, "seconds"),
            default=DEFAULT_TIMEOUT,
            metavar="SECONDS",
            help="time all OSDs together may take to answer; an OSD that does not answer "
            f"in time reports scrape_success 0 (capped at {TIMEOUT_SHARE:g} x "
            "--collector.timeout, and at that share of the time a scrape has left; "
            "default: %(default)s)",
        )

        parser.add_argument(
            "--collector.osd.config-interval",
            dest="collector_osd_config_interval",
            type=bounded(float, 0, 3600, "seconds"),
            default=DEFAULT_CONFIG_INTERVAL,
            metavar="SECONDS",
            help="reuse each OSD's config show and version replies this long (debug "
            "levels and options show changes after at most this; a restarted OSD is "
            "asked at once; 0: every scrape; default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.network-interval",
            dest="collector_osd_network_interval",
            type=bounded(float, 0, 3600, "seconds"),
            default=DEFAULT_NETWORK_INTERVAL,
            metavar="SECONDS",
            help="reuse each OSD's dump_osd_network summary this long (its peers' "
            "1-minute averages change once a minute; a restarted OSD is asked at once; "
            "0: every scrape; default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.latency-window",
            dest="collector_osd_latency_window",
            type=bounded(float, 60, 3600, "seconds"),
            default=DEFAULT_LATENCY_WINDOW,
            metavar="SECONDS",
            help="the exported op latency quantiles (each OSD's p99, the node's pooled p50 "
            "and p99) and means (BlueStore commit, RocksDB stages, CPU per op) cover the "
            "reads of this many seconds, like rate() over this range (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.osd.max-sockets",
            dest="collector_osd_max_sockets",
            type=bounded(int, 1, 65536),
            default=DEFAULT_MAX_SOCKETS,
            metavar="N",
            help="query at most this many OSD admin sockets, the first by OSD id; the "
            "others are counted in cephnode_scrape_collector_items_dropped (default: "
            "%(default)s)",
        )
        parser.add_argument(
            "--collector.osd.all-debug-levels",
            dest="collector_osd_all_debug_levels",
            action="store_true",
            help="export every non-zero debug subsystem, not only the profile's "
            "osd.debug_levels list (about 60 more series per OSD at Ceph's defaults)",
        )

    def close(self) -> None:
        self._thread_files.close_all()

    def read(self) -> OSDCollectorFacts:
        errors = ReadErrors()
        try:
            sockets = discover_osd_sockets(self._socket_dir, errors)
        except NoSocketDirectory:
            # No Ceph on this node (or not yet): a success; its only OSD series is sockets 0.
            if not self._dir_missing_logged:
                log.info("no Ceph socket directory", extra=kv(path=self._socket_dir))
                self._dir_missing_logged = True
            sockets = []
        else:
            self._dir_missing_logged = False
        if not sockets:
            self._socket_limit.note(0, 0)
            self._note_dropped([])
            self._forget(set())
            host = self._windows.pooled()
            return OSDCollectorFacts(self._socket_dir, [], errors, None, host, self._latency_window)
        limited = limit_sockets(sockets, self._socket_limit.limit)
        self._socket_limit.note(len(limited.dropped), len(sockets))
        sockets = limited.kept
        # The rounds get at most TIMEOUT_SHARE of the time the scrape leaves this call,
        # and parsing stops at PARSE_SHARE: with a short Prometheus scrape_timeout one
        # stopped OSD must cost its own series, not every OSD's and the next collectors'.
        start = time.monotonic()
        left = max(0.0, self.deadline - start)
        timeout = min(self._timeout, TIMEOUT_SHARE * left)
        parse_until = start + PARSE_SHARE * left
        # Keyed by path: two clusters on one node may both have an osd.0.
        rounds = {}
        for s in sockets:
            sock = AdminSocket(s.path, timeout=timeout, connect_timeout=timeout)
            state = self._proc_states.setdefault(s.path, ProcessState())
            cache = self._config_caches.setdefault(s.path, ConfigCache())
            network = self._network_caches.setdefault(s.path, NetworkCache())
            rounds[s.path] = query_round(
                sock, cache, self._config_interval, network, self._network_interval, s
            )
        results = run_rounds(rounds, timeout)
        # One socket per daemon: a stale or second socket of an OSD is left out here.
        choice = choose_sockets(sockets, self._answers(sockets, results))
        self._note_dropped(choice.dropped)
        now = self.clock()
        numa_nodes = self._numa_nodes(errors)
        osds = []
        for s in choice.kept:
            result = results[s.path]
            facts = OSDFacts(s, result.seconds)
            if result.error is not None:
                facts.error = str(result.error)
                facts.reason = getattr(result.error, "reason", type(result.error).__name__)
            elif result.value is None:
                facts.error = f"{s.path}: no reply"
                facts.reason = "no_reply"
            elif time.monotonic() > parse_until:
                # Many OSDs' large replies (80,000 ops in flight each) parse for seconds.
                facts.error = f"{s.path}: the scrape's time ran out before its replies were parsed"
                facts.reason = "timeout"
            else:
                state = self._proc_states[s.path]
                read_osd_process(result.value, self.ctx.fs, state, self._thread_files)
                try:
                    parse_replies(facts, result.value)
                except perf.PerfParseError as exc:
                    facts.error = f"{s.path}: {exc}"
                    facts.reason = "parse"
                except AsokError as exc:  # a reply that is no JSON, decoded here
                    facts.error, facts.reason = str(exc), exc.reason
                except Exception as exc:  # as in the rounds: even a bug stays this OSD's
                    facts.error = f"{s.path}: {type(exc).__name__}: {exc}"
                    facts.reason = "parse"
                else:
                    self._host_facts(facts, numa_nodes, errors)
            self._note(facts)
            osds.append(facts)
        self._forget({s.path for s in sockets})
        host, host_cpu_per_op = self._update_latency(osds, now)
        return OSDCollectorFacts(
            self._socket_dir,
            osds,
            errors,
            numa_nodes,
            host,
            self._latency_window,
            host_cpu_per_op,
            dropped=[*choice.dropped, *limited.dropped],
        )

    def _answers(self, sockets: list[OSDSocket], results: dict[str, Any]) -> dict[str, Answer]:
        """What choose_sockets needs of each query: refused, and the fsid reported."""
        out = {}
        for s in sockets:
            cache = self._config_caches.get(s.path)
            refused = isinstance(results[s.path].error, AsokStale)
            known = (cache.fsid, cache.name) if cache is not None else (None, None)
            out[s.path] = Answer(refused, *known)
        return out

    def _note_dropped(self, dropped: list[Dropped]) -> None:
        """Log each stale or duplicate socket once, when it starts being left out."""
        now = {(d.socket.path, d.reason) for d in dropped}
        for d in dropped:
            if (d.socket.path, d.reason) not in self._dropped_logged:
                log.warning(
                    "OSD admin socket left out: another socket serves the same OSD",
                    extra=kv(
                        ceph_daemon=d.socket.ceph_daemon,
                        reason=d.reason,
                        path=d.socket.path,
                        instead=d.instead,
                    ),
                )
        self._dropped_logged = now

    def _update_latency(
        self, osds: list[OSDFacts], now: float
    ) -> tuple[HostHistograms, float | None]:
        """Feed this scrape's facts to the latency windows (collectors/osd_latency.py);
        sets each OSD's quantiles and means, and returns the pooled histograms and the
        node's CPU seconds per op."""
        return self._windows.update(osds, now)

    def _numa_nodes(self, errors: ReadErrors) -> dict[int, frozenset[int]] | None:
        try:
            return read_node_cpus(self.ctx.fs)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            return None

    def _host_facts(
        self,
        facts: OSDFacts,
        numa_nodes: dict[int, frozenset[int]] | None,
        errors: ReadErrors,
    ) -> None:
        """The OSD's NUMA spread and its disks (sysfs, this thread)."""
        if facts.process_error is not None:
            errors.add(Exception(facts.process_error))
        if facts.process is not None and numa_nodes is not None:
            facts.allowed_cpus = cpus_per_node(facts.process.cpus_allowed, numa_nodes)
        assert facts.config is not None
        data_dirs = []
        if facts.socket.layout == "cephadm":
            data_dirs.append(
                CEPHADM_DATA_DIR.format(fsid=facts.socket.cluster, id=facts.socket.osd_id)
            )
        if facts.config.osd_data:
            data_dirs.append(facts.config.osd_data)
        if not data_dirs:
            facts.block_note = "config show has no osd_data"
        else:
            self._find_block(facts, data_dirs, errors)
        facts.media = self._media(facts, errors)
        # dm-crypt under the block device: collectors/osd_encryption.py.
        facts.encryption = self._encryption(facts, errors)

    def _encryption(self, facts: OSDFacts, errors: ReadErrors) -> Encryption:
        """The dm-crypt walk under the OSD's block device, once per OSD process like
        _media (kept in its ProcessState unless the walk met a read error or the block
        device was not found cleanly)."""
        state = self._proc_states.get(facts.socket.path) if facts.process is not None else None
        if state is not None and state.encryption is not None and state.block is not None:
            return state.encryption
        found = read_encryption(facts, errors)
        if state is not None and found.error is None and state.block is not None:
            state.encryption = found
        return found

    def _find_block(self, facts: OSDFacts, data_dirs: list[str], errors: ReadErrors) -> None:
        # Read once per OSD process, as _media: kept in its ProcessState unless it failed.
        state = self._proc_states.get(facts.socket.path) if facts.process is not None else None
        if state is not None and state.block is not None and state.block[0] == tuple(data_dirs):
            _, facts.block, facts.block_note = state.block
            return
        self._find_block_now(facts, data_dirs, errors)
        if state is not None and facts.block_error is None:
            state.block = (tuple(data_dirs), facts.block, facts.block_note)

    def _find_block_now(self, facts: OSDFacts, data_dirs: list[str], errors: ReadErrors) -> None:
        for data_dir in data_dirs:
            try:
                facts.block = find_osd_block(self.ctx.fs, data_dir)
            except NoDevice as exc:
                facts.block_note = str(exc)
                continue
            except (OSError, ParseError) as exc:
                facts.block_error = str(exc)
                errors.add(exc)
            facts.block_note = None
            return

    def _media(self, facts: OSDFacts, errors: ReadErrors) -> str:
        """The data disk's kind, read once per OSD process (kept in its ProcessState,
        which a new pid resets); read every scrape while the process is not visible,
        and not kept after a read error, so the next scrape asks again."""
        state = self._proc_states.get(facts.socket.path) if facts.process is not None else None
        if state is not None:
            with state.lock:
                if state.media is not None:
                    return state.media
        if facts.block_error is not None:
            return "unknown"
        try:
            media = block_media(self.ctx.fs, facts.block)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            return "unknown"
        if state is not None:
            with state.lock:
                state.media = media
        return media

    def _note(self, facts: OSDFacts) -> None:
        """Log an OSD's failure when it starts or changes, and its recovery."""
        path = facts.socket.path
        previous = self._last_error.get(path)
        self._last_error[path] = facts.error
        if facts.error is not None and _shape(facts.error) != _shape(previous):
            log.warning(
                "OSD admin socket query failed",
                extra=kv(ceph_daemon=facts.ceph_daemon, reason=facts.reason, err=facts.error),
            )
        elif facts.error is None and previous is not None:
            log.info("OSD answers again", extra=kv(ceph_daemon=facts.ceph_daemon))

        self._note_host(facts)
        self._note_missing(facts)
        self._note_kv(facts)
        self._note_network(facts)

    def _note_network(self, facts: OSDFacts) -> None:
        """Log that an OSD's heartbeat reply has more entries than are read
        (ceph/network.py MAX_ENTRIES): once per OSD while it stays above, again when the
        count grew past twice the count logged, or after it went back under."""
        if facts.network is None:
            return
        path = facts.socket.path
        dropped = facts.network.entries_dropped
        logged = self._network_dropped.get(path, 0)
        if dropped and (not logged or dropped > 2 * logged):
            log.warning(
                "OSD lists more heartbeat entries than are read; the ping series cover "
                "the first ones (the worst peers come first)",
                extra=kv(ceph_daemon=facts.ceph_daemon, read=MAX_ENTRIES, dropped=dropped),
            )
            self._network_dropped[path] = dropped
        elif not dropped:
            self._network_dropped.pop(path, None)

    def _note_kv(self, facts: OSDFacts) -> None:
        """Log once per change that an OSD declined its RocksDB statistics."""
        if not facts.ok:
            return
        path = facts.socket.path
        previous = self._kv_notes.get(path)
        self._kv_notes[path] = facts.kv_note
        if facts.kv_note is not None and facts.kv_note != previous:
            log.info(
                "OSD declined dump_objectstore_kv_stats; its RocksDB statistics series are "
                "absent until config show says they are on",
                extra=kv(ceph_daemon=facts.ceph_daemon, reason=facts.kv_note),
            )

    def _note_missing(self, facts: OSDFacts) -> None:
        """Log each counter the OSD's release and object store should have but its perf
        dump lacks, once per daemon and counter (again only after it came back)."""
        if facts.counters is None:
            return
        path = facts.socket.path
        missing = frozenset(facts.counters.missing)
        for key in sorted(missing - self._missing_logged.get(path, frozenset())):
            log.warning(
                "OSD lacks a perf counter its release should have; its series are absent",
                extra=kv(ceph_daemon=facts.ceph_daemon, counter=key, version=facts.version),
            )
        self._missing_logged[path] = missing

    def _note_host(self, facts: OSDFacts) -> None:
        """Log why an answering OSD lacks process or device series, once per change."""
        if not facts.ok:
            return
        path = facts.socket.path
        process = facts.process_error or facts.process_note
        device = facts.block_error or facts.block_note
        old_process, old_device = self._last_host.get(path, (None, None))
        self._last_host[path] = (process, device)
        d = facts.ceph_daemon
        if process is not None and _shape(process) != _shape(old_process):
            level = logging.WARNING if facts.process_error else logging.INFO
            log.log(level, "OSD process not read", extra=kv(ceph_daemon=d, reason=process))
        if device is not None and _shape(device) != _shape(old_device):
            level = logging.WARNING if facts.block_error else logging.INFO
            log.log(level, "OSD has no device series", extra=kv(ceph_daemon=d, reason=device))

    def _forget(self, present: set[str]) -> None:
        for path in set(self._last_error) - present:
            del self._last_error[path]
        for path in set(self._proc_states) - present:
            key = self._proc_states[path].key
            if key is not None:  # the gone OSD's kept thread status files
                self._thread_files.close_under(self.ctx.fs.proc(str(key[0])) + os.sep)
        for cache in (
            self._last_host,
            self._proc_states,
            self._config_caches,
            self._network_caches,
            self._network_dropped,
            self._missing_logged,
            self._kv_notes,
        ):
            for path in set(cache) - present:
                del cache[path]
        self._windows.forget(present)
        forget_encryption(present)

    def read_errors(self, facts: OSDCollectorFacts) -> int:
        """Unreadable cephadm directories and OSDs that did not answer."""
        return len(facts.errors) + sum(1 for o in facts.osds if not o.ok)

    def first_errors(self, facts: OSDCollectorFacts, limit: int = 3) -> list[str]:
        items = list(facts.errors.items) + [o.error for o in facts.osds if o.error]
        return items[:limit]

    def metrics(self, facts: OSDCollectorFacts) -> Iterable[Metric]:
        families = build_metrics(
            facts.osds,
            self._debug_subsystems,
            facts.host_histograms,
            facts.latency_window,
            facts.host_cpu_per_op,
        )
        return [*families, *dropped_metrics(facts), *encryption_metrics(facts.osds)]
