"""Tuning checks: judgements over the facts the collectors read.

A check is a pure function of one collector's facts and its profile settings. It
returns results that say only whether the setting deviates; the profile decides whether a
deviation is a failure or a warning, and whether the check runs at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    SKIP = "skip"


@dataclass(frozen=True)
class Result:
    check: str
    subject: str
    status: Status
    observed: str
    expected: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "check": self.check,
            "subject": self.subject,
            "status": str(self.status),
            "observed": self.observed,
            "expected": self.expected,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Finding:
    """What a check function returns: the facts of one subject and whether they deviate.

    ``deviates`` is None when the check does not apply (it becomes ``skip``).
    """

    subject: str
    deviates: bool | None
    observed: str
    expected: str
    hint: str = ""


CheckFunc = Callable[[Any, dict[str, Any]], list[Finding]]


@dataclass(frozen=True)
class CheckSpec:
    name: str
    collector: str
    func: CheckFunc
    # Parameter name -> type; the values live in the profile.
    params: dict[str, type] = field(default_factory=dict)


CHECKS: dict[str, CheckSpec] = {}


def check(name: str, collector: str, **params: type) -> Callable[[CheckFunc], CheckFunc]:
    """Decorator registering a check that reads the facts of ``collector``."""

    def wrap(func: CheckFunc) -> CheckFunc:
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = CheckSpec(name, collector, func, dict(params))
        return func

    return wrap


def load_all() -> dict[str, CheckSpec]:
    """Import the check modules (registration happens on import)."""
    from cephnode_exporter.checks import cpu  # noqa: F401

    return CHECKS
