"""Collector ``pgs``: which OSDs the laggy and waiting PGs involve, cluster-wide.

A PG goes ``laggy`` when its primary's read lease runs out because a replica did not
renew it, and ``wait`` when, after re-peering, it must wait for the old leases to expire;
both block client I/O (PrimaryLogPG::check_laggy, ceph/ceph src/osd/PrimaryLogPG.cc).
The mgr counts them only per pool (``ceph_pg_laggy{pool_id}``), which does not say which
host to look at. This collector
lists just those PGs (``pg ls laggy wait``: 17 bytes when the cluster is healthy, about
3.7 MB for the reference incident's 1,651 laggy PGs) and exports, per OSD, how many of them
it is the acting primary of and how many it is another member of the acting set in:
``cephnode_osd_laggy_pgs{ceph_daemon,role,state}``. The stalled OSD shows as the replica
common to the laggy PGs; its primaries show as primary.

It is a cluster view, so it is **off by default** and enabled on one or a few nodes that
hold a read-only key (``ceph auth get-or-create client.cephnode-exporter mon 'allow r'``,
docs/ceph.md). Scraping it from several nodes gives the same numbers with a different
``instance``. Connecting and the command are bounded by Ceph's own timeouts
(``--collector.pgs.timeout``, see ceph/librados.py); the connection is kept between
scrapes and re-established after any failure. Without librados' Python binding, the
key, or a reachable monitor, the collector fails with the reason and nothing else is
affected.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.ceph.librados import ClientSettings, MonCommandClient, client_name
from cephnode_exporter.ceph.pgs import COMMAND, STATES, PGListing, parse_pg_ls
from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    bounded,
    metric_name,
    register,
)

DEFAULT_CONF = "/etc/ceph/ceph.conf"
DEFAULT_NAME = "client.cephnode-exporter"
# Seconds for connecting, and again for the command. On the test cluster both take a few
# milliseconds; a busy mgr of a large cluster needs more (the reply is built in C++, but
# the mgr's command thread is shared).
DEFAULT_TIMEOUT = 2
# Connecting and the command must both fit in --collector.timeout, with room to parse.
TIMEOUT_SHARE = 0.4


@dataclass(frozen=True)
class PGsFacts:
    listing: PGListing


def _name(text: str) -> str:
    try:
        return client_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def effective_timeout(requested: int, collector_timeout: float) -> int:
    """The timeout in whole seconds (librados takes no fractions), at least 1."""
    return max(1, min(requested, int(collector_timeout * TIMEOUT_SHARE)))


@register
class PGsCollector(Collector):
    name = "pgs"
    default_enabled = False
    help = (
        "Cluster-wide: PGs in laggy or wait state per OSD and role, via librados "
        "(python3-rados) and a read-only key; enable on one or a few nodes"
    )

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        o = ctx.options
        timeout = effective_timeout(int(o.collector_pgs_timeout), ctx.collector_timeout)
        self.settings = ClientSettings(
            conffile=str(o.collector_pgs_conf),
            name=str(o.collector_pgs_name),
            keyring=o.collector_pgs_keyring,
            timeout=timeout,
        )
        self.client = MonCommandClient(self.settings)

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(
            "--collector.pgs.conf",
            dest="collector_pgs_conf",
            default=DEFAULT_CONF,
            metavar="PATH",
            help="ceph.conf of the cluster to query (mon_host) (default: %(default)s)",
        )
        parser.add_argument(
            "--collector.pgs.name",
            dest="collector_pgs_name",
            type=_name,
            default=DEFAULT_NAME,
            metavar="NAME",
            help="Ceph client to authenticate as, with a key holding mon 'allow r' "
            "(default: %(default)s)",
        )
        parser.add_argument(
            "--collector.pgs.keyring",
            dest="collector_pgs_keyring",
            default=None,
            metavar="PATH",
            help="keyring with the client's key (default: Ceph's search, first "
            "/etc/ceph/ceph.<name>.keyring)",
        )
        parser.add_argument(
            "--collector.pgs.timeout",
            dest="collector_pgs_timeout",
            type=bounded(int, 1, 60, "seconds"),
            default=DEFAULT_TIMEOUT,
            metavar="SECONDS",
            help="whole seconds for connecting to the mons, and again for the query "
            f"(capped at {TIMEOUT_SHARE:g} x --collector.timeout; default: %(default)s)",
        )

    def close(self) -> None:
        self.client.close()

    def read(self) -> PGsFacts:
        return PGsFacts(parse_pg_ls(self.client.command(COMMAND)))

    def read_errors(self, facts: PGsFacts) -> int:
        """Malformed entries of the listing, skipped."""
        return facts.listing.error_count

    def first_errors(self, facts: PGsFacts, limit: int = 3) -> list[str]:
        return facts.listing.errors[:limit]

    def metrics(self, facts: PGsFacts) -> Iterable[Metric]:
        return build_metrics(facts.listing)


def build_metrics(listing: PGListing) -> list[Metric]:
    """Metric families of one listing (pure)."""
    by_osd = GaugeMetricFamily(
        metric_name("osd", "laggy_pgs"),
        "PGs in the state (laggy: read lease expired; wait: waiting for old leases "
        "after peering) in which the OSD is the acting primary (role=primary) or another "
        "member of the acting set (role=replica), cluster-wide from `pg ls`; only "
        "non-zero counts are exported.",
        labels=["ceph_daemon", "role", "state"],
    )
    for (osd, role, state), n in sorted(listing.by_osd().items()):
        by_osd.add_metric([f"osd.{osd}", role, state], float(n))
    listed = GaugeMetricFamily(
        metric_name("pgs", "listed"),
        "PGs of the whole cluster in the state, as listed by `pg ls` in this scrape "
        "(a PG in both states counts in both).",
        labels=["state"],
    )
    counts = listing.listed()
    for state in STATES:
        listed.add_metric([state], float(counts[state]))
    reply = GaugeMetricFamily(
        metric_name("pgs", "reply_bytes"),
        "Size of the `pg ls` reply in this scrape (about 2.2 KB per listed PG).",
    )
    reply.add_metric([], float(listing.reply_bytes))
    families: list[Metric] = [by_osd, listed, reply]
    if listing.pg_ready is not None:
        ready = GaugeMetricFamily(
            metric_name("pgs", "pgmap_ready"),
            "0 while the mgr has not heard from every up OSD since it started (its PG "
            "states, and so these counts, may be incomplete), else 1.",
        )
        ready.add_metric([], 1.0 if listing.pg_ready else 0.0)
        families.append(ready)
    return families
