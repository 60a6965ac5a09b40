"""The collectors, one per module; importing this package registers them all.

The ``osd`` collector's parts that are not a collector of their own live beside it as
``osd_*.py`` (collectors/osd.py says which does what).
"""

from cephnode_exporter.collectors import (  # noqa: F401  (registration)
    cpufreq,
    cpuhw,
    cpuidle,
    firmware,
    iommu,
    irq,
    kernel,
    kprofile,
    net,
    nvme,
    osd,
    pgs,
    thp,
)
from cephnode_exporter.collectors.base import REGISTRY, Collector, CollectorContext

__all__ = ["REGISTRY", "Collector", "CollectorContext"]
