"""What every collector is: a name, a default, a read step and a metrics step.

The read step does all I/O through the parsing layer and returns typed facts; the
metrics step turns facts into fresh metric families and does no I/O. The checks read the
same facts, so a metric and the tuning report can never disagree.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from prometheus_client.core import Metric

from cephnode_exporter.hostfs import HostFS

if TYPE_CHECKING:
    from cephnode_exporter.profile import Profile

NAMESPACE = "cephnode"


@dataclass(frozen=True)
class CollectorContext:
    """What a collector is built with: the host roots, the parsed command line and the
    tuning profile (for collectors whose inputs the profile names, such as the sysctls)."""

    fs: HostFS
    options: argparse.Namespace
    profile: Profile | None = None


class Collector(ABC):
    """One collector; subclasses set ``name``, ``default_enabled`` and ``help``."""

    name: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    help: ClassVar[str] = ""

    def __init__(self, ctx: CollectorContext) -> None:
        self.ctx = ctx

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
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
