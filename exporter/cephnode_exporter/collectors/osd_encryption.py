"""The OSDs' data-device encryption, for the ``osd`` collector (not a collector itself):
the read is hostfs/dmcrypt.py's, this is the metric.

An encrypted OSD reads about 25 % slower (the reference cluster: 1 TiB/s of 4 MB reads,
about 750 GiB/s with encryption; shared/DOMAIN.md section 1), so the fleet comparisons
of the rules group OSDs by it (alerts/README.md, "Encrypted OSDs") and the node dashboard
shows it beside the OSD latency.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import metric_name
from cephnode_exporter.facts.osd import OSDFacts
from cephnode_exporter.hostfs import ReadErrors
from cephnode_exporter.hostfs.dmcrypt import UNKNOWN, Encryption, osd_encryption
from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

# The reason last logged per OSD socket: an unknown encryption is logged when its reason
# changes, not every scrape (a process-wide memo, as the OSD collector is one per process).
_last_reason: dict[str, str] = {}
_lock = threading.Lock()


def read_encryption(facts: OSDFacts, errors: ReadErrors) -> Encryption:
    """The OSD's encryption from the block device its host facts found; an unreadable
    ``dm/uuid`` is a read error (counted) and ``unknown``. An ``unknown`` with a device
    to judge is logged once per OSD and reason (without a block device of its own the
    osd collector already says so)."""
    sysdir = facts.block.sysdir if facts.block is not None else None
    found = osd_encryption(sysdir, facts.block_error or facts.block_note)
    if found.error is not None:
        errors.add(found.error)
    reason = found.reason if found.state == UNKNOWN and sysdir else ""
    with _lock:
        changed = _last_reason.get(facts.socket.path, "") != reason
        if reason:
            _last_reason[facts.socket.path] = reason
        else:
            _last_reason.pop(facts.socket.path, None)
    if changed and reason:
        log.warning(
            "OSD data device encryption unknown",
            extra=kv(ceph_daemon=facts.ceph_daemon, reason=reason),
        )
    return found


def forget_encryption(present: set[str]) -> None:
    """Drop the memo of sockets gone from the node: a directory whose OSD ids churn must
    not grow it."""
    with _lock:
        for path in set(_last_reason) - present:
            del _last_reason[path]


def encryption_metrics(osds: Iterable[OSDFacts]) -> list[Metric]:
    """``cephnode_osd_encryption_info`` for every OSD that answered; none without OSDs."""
    family = GaugeMetricFamily(
        metric_name("osd", "encryption_info"),
        "Whether the OSD's block device goes through dm-crypt: encryption dm-crypt (format: "
        "the cryptsetup type, LUKS1, LUKS2, PLAIN, ...), none (no dm-crypt mapping under "
        "it), or unknown (no block device of its own, a device-mapper uuid that names no "
        "known creator, or an unreadable one), from /sys/block/dm-N/dm/uuid (read by "
        "any user).",
        labels=["ceph_daemon", "encryption", "format"],
    )
    for o in osds:
        if not o.ok or o.encryption is None:
            continue
        family.add_metric([o.ceph_daemon, o.encryption.state, o.encryption.format], 1.0)
    return [family] if family.samples else []
