"""Run the checks of a profile over the facts of one collection."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cephnode_exporter.checks.base import CheckSpec, Result, Status, concrete
from cephnode_exporter.profile import Profile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorFacts:
    """A collector's state as the checks see it."""

    enabled: bool
    facts: Any = None
    error: str | None = None  # set when the collector failed this time
    # The collector hands the same facts object on while nothing changed
    # (Collector.reuse_unchanged): its checks' results may be kept for it.
    stable: bool = False


def evaluate(
    profile: Profile,
    specs: Mapping[str, CheckSpec],
    collectors: Mapping[str, CollectorFacts],
    memo: dict[str, tuple[Any, list[Result]]] | None = None,
) -> list[Result]:
    """One result per check and subject, sorted; never raises for a check's fault.

    The checks are the registered ones plus those the profile made from families (one
    ``sysctl.<name>`` per profile entry); a family itself has no result.

    ``memo`` (kept by the caller from one evaluation to the next, with the same profile)
    gives a check of a ``stable`` collector its last results back when the facts are the
    very object it judged last time: a check is a function of its facts and parameters,
    and such a collector hands the same object on while nothing changed (scrape.py).
    Other collectors' facts are new every scrape and are not kept here.
    """
    checks = concrete(specs)
    checks.update(profile.instances)
    results: list[Result] = []
    for name in sorted(checks):
        spec = checks[name]
        settings = profile.checks[name]
        state = collectors.get(spec.collector, CollectorFacts(enabled=False))
        if not settings.enabled:
            results.append(Result(name, "", Status.SKIP, "disabled in the profile", ""))
            continue
        if not state.enabled:
            why = f"collector {spec.collector} is disabled"
            results.append(Result(name, "", Status.SKIP, why, ""))
            continue
        if state.error is not None or state.facts is None:
            why = f"collector {spec.collector} failed: {state.error}"
            results.append(Result(name, "", Status.UNKNOWN, why, ""))
            continue
        keep = memo is not None and state.stable
        known = memo.get(name) if memo is not None and keep else None
        if known is not None and known[0] is state.facts:
            results.extend(known[1])
            continue
        start = len(results)
        try:
            findings = spec.func(state.facts, settings.params)
        except Exception as exc:  # a check bug must not take the report down
            log.exception("check %s raised", name)
            why = f"check error: {exc!r}"
            results.append(Result(name, "", Status.UNKNOWN, why, "", check_error=True))
            continue
        for f in findings:
            if f.unknown:
                status = Status.UNKNOWN
            elif f.deviates is None:
                status = Status.SKIP
            elif f.deviates:
                status = settings.severity
            else:
                status = Status.PASS
            hint = f.hint if status in (Status.FAIL, Status.WARN) else ""
            results.append(Result(name, f.subject, status, f.observed, f.expected, hint))
        if memo is not None and keep:
            memo[name] = (state.facts, results[start:])
    results.sort(key=lambda r: (r.check, r.subject))
    return results
