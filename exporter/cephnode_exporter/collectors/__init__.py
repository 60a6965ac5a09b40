"""The collectors, one per module; importing this package registers them all."""

from cephnode_exporter.collectors import cpufreq, cpuidle, iommu, kernel, kprofile, net, nvme, osd  # noqa: F401  (registration)
from cephnode_exporter.collectors.base import REGISTRY, Collector, CollectorContext

__all__ = ["REGISTRY", "Collector", "CollectorContext"]
