"""What one collection produced, and the exporter's own families that describe it.

A :class:`Collection` holds each collector's outcome and the check results; its
``families()`` add the scrape's own series (collector success and duration, failing,
warning and unknown check results) and one hash per tuning fact and per judged check, which the
change-tracking rules watch instead of every series behind them (alerts/,
CephNodeTuningChanged).
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cephnode_exporter import __version__
from cephnode_exporter.checks.base import Result, Status
from cephnode_exporter.collectors.base import metric_name
from cephnode_exporter.logs import dropped_messages

# The _info families whose label sets are tuning facts: a changed kernel parameter,
# driver, firmware, tuned or checks profile, or Ceph version is what a rule watching for
# changes (alerts/, CephNodeTuningChanged) reports beside changed check results.
TUNING_FACTS = (
    "cpu_idle_driver_info",
    "cpu_idle_kernel_params_info",
    "cpu_amd_pstate_info",
    "cpu_intel_pstate_info",
    "kernel_cmdline_info",
    "iommu_kernel_params_info",
    "iommu_group_info",
    "tuned_profile_info",
    "tuning_profile_info",
    "nvme_controller_info",
    "osd_info",
    "bios_info",
    "cpu_microcode_info",
    "kernel_release_info",
    "transparent_hugepage_info",
)
# Families whose empty label values mean "not read this scrape" (an OSD's version before
# it answered, its allocator while its process was unreadable): such a series counts as
# missing from the set, not as a changed fact.
UNREAD_IS_EMPTY = frozenset({"osd_info"})
_WANTED_FACTS = {metric_name(f): f for f in TUNING_FACTS}
# The hash of each tuning-fact family of the last collection, by the family object: a
# collector whose facts did not change hands its families on (reuse_unchanged), and an
# entry keeps its family alive so that its id is not reused while it is here.
_FACT_HASHES: dict[int, tuple[Metric, float]] = {}


def state_hash(items: Iterable[tuple[str, ...]]) -> float:
    """A 48-bit hash of a set of string tuples, as a float that holds it exactly.

    The same set gives the same value in every process, order and Python version (no
    ``hash()``), so the value changes only when the set does: one series a rule can watch
    with ``changes()`` instead of reading every series behind it.
    """
    h = hashlib.blake2b(digest_size=6)
    for item in sorted(set(items)):
        # backslashreplace: an odd label (a surrogate escape) must not fail the collection.
        h.update("\x1f".join(item).encode("utf-8", "backslashreplace") + b"\x1e")
    return float(int.from_bytes(h.digest(), "big"))


@dataclass
class Outcome:
    """What one collector produced in one collection."""

    name: str
    success: bool
    duration: float
    facts: Any = None
    families: list[Metric] = field(default_factory=list)
    read_errors: int = 0
    items_dropped: int = 0
    error: str | None = None


@dataclass
class Collection:
    """The result of one collection: per-collector outcomes and the check results."""

    outcomes: list[Outcome]
    results: list[Result]
    profile_name: str

    def families(self) -> list[Metric]:
        """Every metric family of this collection, the exporter's own included."""
        out: list[Metric] = []
        for o in self.outcomes:
            out.extend(o.families)
        out.extend(self._meta())
        out = [f for f in out if f.samples]
        facts = self._fact_hashes(out)
        return [*out, facts] if facts.samples else out

    @staticmethod
    def _fact_hashes(families: list[Metric]) -> Metric:
        """One hash per TUNING_FACTS family present. ``ceph_daemon`` is left out: the
        OSDs' facts count as a set (a new version on one OSD shows, an OSD that missed a
        scrape or was added does not), and an OSD with a value not read in this scrape
        (UNREAD_IS_EMPTY) counts as missing. A family absent in this scrape (its collector
        failed, or the node has no such fact) has no hash, so a failed read is no change."""
        facts = GaugeMetricFamily(
            metric_name("tuning_fact_hash"),
            "A hash of the label sets of the tuning fact's _info series (ceph_daemon left "
            "out); it changes when the fact does.",
            labels=["fact"],
        )
        global _FACT_HASHES
        previous = _FACT_HASHES
        hashes: dict[int, tuple[Metric, float]] = {}
        for family in families:
            fact = _WANTED_FACTS.get(family.name)
            if fact is None:
                continue
            known = previous.get(id(family))
            if known is None or known[0] is not family:
                partial = fact in UNREAD_IS_EMPTY
                items = (
                    tuple(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "ceph_daemon")
                    for s in family.samples
                    if not (partial and "" in s.labels.values())
                )
                known = (family, state_hash(items))
            hashes[id(family)] = known
            facts.add_metric([fact], known[1])
        _FACT_HASHES = hashes
        return facts

    def _meta(self) -> Iterable[Metric]:
        build = GaugeMetricFamily(
            metric_name("exporter_build_info"),
            "The exporter's version and the Python running it.",
            labels=["version", "python_version"],
        )
        build.add_metric([__version__, platform.python_version()], 1.0)
        yield build
        # Process-wide, like build_info: logging never blocks serving (cephnode_exporter.logs).
        yield CounterMetricFamily(
            metric_name("exporter_log_messages_dropped"),
            "Log lines dropped because stderr could not take them without blocking.",
            value=float(dropped_messages()),
        )
        success = GaugeMetricFamily(
            metric_name("scrape_collector_success"),
            "1 when the collector succeeded in this scrape, 0 when it failed or timed out.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            metric_name("scrape_collector_duration_seconds"),
            "Time the collector took in this scrape.",
            labels=["collector"],
        )
        errors = GaugeMetricFamily(
            metric_name("scrape_collector_read_errors"),
            "Items the collector skipped in this scrape because a file was unreadable or "
            "malformed (the log names them).",
            labels=["collector"],
        )
        dropped = GaugeMetricFamily(
            metric_name("scrape_collector_items_dropped"),
            "Items (devices, interfaces, OSD sockets) the collector left out of this scrape "
            "because the node has more than its --collector.<name>.max-* flag allows.",
            labels=["collector"],
        )
        for o in self.outcomes:
            success.add_metric([o.name], 1.0 if o.success else 0.0)
            duration.add_metric([o.name], o.duration)
            errors.add_metric([o.name], float(o.read_errors))
            dropped.add_metric([o.name], float(o.items_dropped))
        yield from (success, duration, errors, dropped)
        profile = GaugeMetricFamily(
            metric_name("tuning_profile_info"),
            "The tuning profile the checks are evaluated against.",
            labels=["profile"],
        )
        profile.add_metric([self.profile_name], 1.0)
        yield profile
        # Only the subjects that fail, warn or cannot be judged have a series (value 1), as
        # ALERTS has only firing alerts: at 630 OSDs the passing ones were 11,000 series
        # of zeros that every detuned-node alert read each minute (docs/performance.md).
        # Which checks were judged, passing ones included, is in the hash below.
        failed = GaugeMetricFamily(
            metric_name("tuning_check_failed"),
            "1 when the tuning check fails for the subject (see `cephnode-exporter check`); "
            "no series when it does not.",
            labels=["check", "subject"],
        )
        warning = GaugeMetricFamily(
            metric_name("tuning_check_warning"),
            "1 when the tuning check warns for the subject; no series when it does not.",
            labels=["check", "subject"],
        )
        # Without it a check that cannot judge (an unreadable or nonsensical input that
        # its collector does not count as an error) would look like a pass. The reason
        # stays out of the labels (free text, unbounded): `cephnode-exporter check` says it.
        unknown = GaugeMetricFamily(
            metric_name("tuning_check_unknown"),
            "1 when the tuning check cannot judge the subject (its input unreadable or "
            "nonsensical, or its collector failed; `cephnode-exporter check` says why); "
            "no series otherwise.",
            labels=["check", "subject"],
        )
        # Per judged check, a hash of its failing and warning subjects: one series per
        # check that changes whenever one of those results does, so that a rule watching
        # for changes (alerts/, CephNodeTuningChanged) need not read every result for an
        # hour. Passing and unknown subjects are left out: one that turns unknown (its OSD
        # missed a scrape) is no change; tuning_check_unknown shows it instead.
        hashes = GaugeMetricFamily(
            metric_name("tuning_check_hash"),
            "A hash of the tuning check's failing and warning subjects and their status, "
            "one series per check judged in this scrape; it changes when they do.",
            labels=["check"],
        )
        deviating: dict[str, list[tuple[str, str]]] = {}
        for r in self.results:
            if r.status == Status.UNKNOWN:
                unknown.add_metric([r.check, r.subject], 1.0)
                continue
            if r.status == Status.SKIP:  # not a result: the check does not apply
                continue
            subjects = deviating.setdefault(r.check, [])
            if r.status == Status.FAIL:
                failed.add_metric([r.check, r.subject], 1.0)
            elif r.status == Status.WARN:
                warning.add_metric([r.check, r.subject], 1.0)
            else:
                continue
            subjects.append((r.subject, r.status.value))
        for check, subjects in deviating.items():
            hashes.add_metric([check], state_hash(subjects))
        yield from (failed, warning, unknown, hashes)
