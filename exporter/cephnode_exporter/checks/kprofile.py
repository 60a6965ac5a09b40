"""Check ``kernel.spinlock_iommu``: CPU time spinning on locks taken by IOMMU code."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.kprofile import KprofileFacts
from cephnode_exporter.kprofile.classify import SampleClass

HINT = (
    "the IOMMU translates every NVMe DMA mapping and its IOVA allocator lock is contended: "
    "boot with iommu=pt (passthrough: host DMA untranslated, the IOMMU stays available to "
    "VFIO and VMs; iommu.passthrough=1 on arm64), or turn translation off with "
    "amd_iommu=off (AMD) or intel_iommu=off (Intel), or switch the IOMMU (AMD-Vi / "
    "Intel VT-d) off in the BIOS if nothing on the node needs it"
)


def _validate(params: dict[str, Any]) -> None:
    if not 0 <= params["max_ratio"] <= 1:
        raise ValueError("max_ratio must be a share between 0 and 1")
    if params["min_samples"] < 1:
        raise ValueError("min_samples must be at least 1")


def _callers(facts: KprofileFacts) -> str:
    w = facts.window
    if not w.top_callers or not w.non_idle:
        return ""
    top = ", ".join(f"{name} {count / w.non_idle:.1%}" for name, count in w.top_callers)
    return f"; top spin-lock callers: {top}"


@check("kernel.spinlock_iommu", "kprofile", validate=_validate, max_ratio=float, min_samples=int)
def spinlock_iommu(facts: KprofileFacts, params: dict[str, Any]) -> list[Finding]:
    """The share of busy CPU time spent spinning on a lock under IOMMU/IOVA code.

    It was 61 % on the reference cluster's detuned nodes; a node
    without IOMMU translation for its NVMe drives has none. Judged on the latest sampling
    window; a nearly idle window (fewer non-idle samples than ``min_samples``) has too
    little to judge and passes, since contention that costs nothing does not matter.
    """
    limit = params["max_ratio"]
    expected = f"spinlock_iommu at most {limit:.1%} of non-idle CPU samples"
    w = facts.window
    busy = w.non_idle
    if busy < params["min_samples"]:
        observed = (
            f"{busy} non-idle of {w.samples} samples in the latest {w.duration:g} s window: "
            f"too few to judge (min_samples {params['min_samples']})"
        )
        return [Finding("", False, observed, expected)]
    share = w.share(SampleClass.SPINLOCK_IOMMU)
    spinning = w.share(SampleClass.SPINLOCK) + share
    observed = (
        f"spinlock_iommu {share:.1%} of {busy} non-idle samples (all spin locks "
        f"{spinning:.1%}) in the latest {w.duration:g} s window{_callers(facts)}"
    )
    deviates = share > limit
    return [Finding("", deviates, observed, expected, HINT if deviates else "")]
