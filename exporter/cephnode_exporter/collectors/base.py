"""What every collector is: a name, a default, a read step and a metrics step.

The read step does all I/O through the parsing layer and returns typed facts; the
metrics step turns facts into fresh metric families and does no I/O. The checks read the
same facts, so a metric and the tuning report can never disagree.
"""

from __future__ import annotations

import argparse
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from prometheus_client.core import Metric

from cephnode_exporter.hostfs import HostFS
from cephnode_exporter.hostfs.names import natural_key
from cephnode_exporter.logs import kv

NAMESPACE = "cephnode"

log = logging.getLogger(__name__)
T = TypeVar("T")


# Seconds one collector's read may take before the scraper gives up on it
# (--collector.timeout's default).
DEFAULT_COLLECTOR_TIMEOUT = 5.0


@dataclass(frozen=True)
class ProfileReads:
    """What the tuning profile asks the collectors to read, so that the values exported
    are exactly those judged. Made from the profile by the caller (cli.py,
    :meth:`cephnode_exporter.profile.Profile.reads`): no collector reads the profile or
    a check's parameters."""

    # Sysctl names to read (kernel), in order, and those the profile compares as integers:
    # for them a value that is not decimal integers is a read error.
    sysctls: tuple[str, ...] = ()
    numeric_sysctls: frozenset[str] = frozenset()
    # OSD debug subsystems the profile judges: their levels are exported per OSD (osd).
    debug_subsystems: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CollectorContext:
    """What a collector is built with: the host roots, the parsed command line (its own
    ``--collector.<name>.*`` flags, read as attributes: a misspelt one is an
    AttributeError at start-up), the scraper's time budget per collector, and what the
    profile asks it to read."""

    fs: HostFS
    options: argparse.Namespace
    # --collector.timeout: the scraper abandons a collector's read after this many seconds;
    # collectors that wait on others (osd, pgs) keep their own timeouts below it.
    collector_timeout: float = DEFAULT_COLLECTOR_TIMEOUT
    reads: ProfileReads = ProfileReads()


class Collector(ABC):
    """One collector; subclasses set ``name``, ``default_enabled`` and ``help``."""

    name: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    help: ClassVar[str] = ""
    # True when read() returns facts that compare equal (==) exactly when nothing the
    # metrics and checks use changed: the scraper then hands the last scrape's facts and
    # families on instead of building them again (scrape.py). Host settings rarely
    # change; an OSD's counters change every scrape, and comparing them would only cost.
    reuse_unchanged: ClassVar[bool] = False

    def __init__(self, ctx: CollectorContext) -> None:
        self.ctx = ctx
        # When the running call must have returned (time.monotonic()): the scraper sets
        # it before each call to the earlier of --collector.timeout from the call's
        # start and the scrape's budget. Collectors that wait on daemons (osd) fit their
        # waiting into it; unbounded outside a scrape.
        self.deadline = math.inf

    @classmethod
    def add_arguments(cls, parser: argparse._ActionsContainer) -> None:
        """Register collector-specific flags (named ``--collector.<name>.<flag>``)."""
        return None  # most collectors have none

    def close(self) -> None:
        """Release resources kept between scrapes (open files); the default has none."""
        return None

    @abstractmethod
    def read(self) -> Any:
        """Read the host and return this collector's facts (all I/O happens here)."""

    @abstractmethod
    def metrics(self, facts: Any) -> Iterable[Metric]:
        """Build metric families from facts; pure, no I/O."""

    def read_errors(self, facts: Any) -> int:
        """Items skipped in this collection because a file was unreadable or malformed."""
        errors = getattr(facts, "errors", None)
        return len(errors) if errors is not None else 0

    def first_errors(self, facts: Any, limit: int = 3) -> list[str]:
        errors = getattr(facts, "errors", None)
        return list(errors.items[:limit]) if errors is not None else []

    def items_dropped(self, facts: Any) -> int:
        """Items left out of this collection by a cardinality limit (:class:`ItemLimit`);
        facts that have such a limit carry the count as ``items_dropped``."""
        return int(getattr(facts, "items_dropped", 0))


REGISTRY: dict[str, type[Collector]] = {}


def bounded(kind: type, lo: float, hi: float, unit: str = "") -> Any:
    """An argparse type: a number of ``kind`` (int or float) within [lo, hi], so a flag's
    bad value is a usage error (exit 2) naming the range, never a late surprise."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            of = f" of {unit}" if unit else ""
            raise argparse.ArgumentTypeError(f"not {what}{of}: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo:g}, {hi:g}]: {text}")
        return value

    return parse


def register(cls: type[Collector]) -> type[Collector]:
    """Class decorator: make a collector known to the command line and the scraper."""
    if cls.name in REGISTRY:
        raise ValueError(f"collector {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def metric_name(*parts: str) -> str:
    return "_".join((NAMESPACE, *parts))


# ----------------------------------------------------------------------------- cardinality


class ItemLimit:
    """At most ``limit`` items of one kind per scrape for one collector.

    Why: a node is not expected to have thousands of NVMe controllers, interfaces or OSD
    sockets, but a fault (a VF storm, a runaway container runtime, a directory of leftover
    sockets) can make one, and each item is several series for Prometheus to keep. The
    same items are kept on every scrape (the first ``limit`` by ``key``, by default the
    natural order of their name), so the series set stays stable. The count left out is
    exported as ``cephnode_scrape_collector_items_dropped{collector}`` (the facts'
    ``items_dropped``, scrape.py), and this logs once when it starts cutting or the count
    changes and once when it no longer cuts, never on every scrape.
    """

    def __init__(self, collector: str, items: str, flag: str, limit: int) -> None:
        self.collector = collector
        self.items = items
        self.flag = flag
        self.limit = limit
        self._last = 0

    def keep(
        self, items: Sequence[T], key: Callable[[T], Any] | None = None
    ) -> tuple[list[T], int]:
        """The first ``limit`` items in ``key`` order, returned in their given order
        (so that a node under the limit exports exactly as before), and how many were
        left out (logged on change)."""
        if len(items) <= self.limit:
            self.note(0, len(items))
            return list(items), 0
        by = key or (lambda item: natural_key(item.name))  # type: ignore[attr-defined]
        chosen = set(sorted(range(len(items)), key=lambda i: by(items[i]))[: self.limit])
        kept = [item for i, item in enumerate(items) if i in chosen]
        self.note(len(items) - len(kept), len(items))
        return kept, len(items) - len(kept)

    def note(self, dropped: int, total: int) -> None:
        """Log a change in the count left out (for a caller that chose the items itself)."""
        previous, self._last = self._last, dropped
        if dropped == previous:
            return
        if dropped:
            log.warning(
                "too many items: only the first ones are exported",
                extra=kv(
                    collector=self.collector,
                    items=self.items,
                    found=total,
                    kept=total - dropped,
                    dropped=dropped,
                    flag=f"{self.flag}={self.limit}",
                ),
            )
        else:
            log.info(
                "item count back under the limit",
                extra=kv(collector=self.collector, items=self.items, found=total),
            )
