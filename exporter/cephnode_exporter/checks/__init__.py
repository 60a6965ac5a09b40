"""Tuning checks: judgements over the facts the collectors read, one module per collector.

A check is a pure function of one collector's facts (:mod:`cephnode_exporter.facts`) and
its profile settings; :mod:`.base` says what a check, a result and a finding are.
Importing this package registers every check, as importing ``collectors`` registers
every collector: a new check module is added to the import below.
"""

from cephnode_exporter.checks import (  # noqa: F401  (registration)
    cpu,
    iommu,
    irq,
    kernel,
    kprofile,
    net,
    nvme,
    osd,
)
from cephnode_exporter.checks.base import (
    CHECKS,
    CheckSpec,
    Finding,
    ParamType,
    Result,
    Status,
    concrete,
    resolve,
)

__all__ = [
    "CHECKS",
    "CheckSpec",
    "Finding",
    "ParamType",
    "Result",
    "Status",
    "concrete",
    "load_all",
    "resolve",
]


def load_all() -> dict[str, CheckSpec]:
    """Every registered check by name (registration happened when this package was imported)."""
    return CHECKS
