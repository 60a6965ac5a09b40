"""The collectors, one per module; importing this package registers them all."""

from cephnode_exporter.collectors import (  # noqa: F401  (registration)
    cpufreq,
    cpuidle,
    iommu,
    kernel,
    kprofile,
    net,
    nvme,
    osd,
    pgs,
)
from cephnode_exporter.collectors.base import REGISTRY, Collector, CollectorContext

__all__ = ["REGISTRY", "Collector", "CollectorContext"]
