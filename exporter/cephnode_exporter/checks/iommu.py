"""Check ``iommu.nvme``: NVMe DMA must not go through IOMMU translation."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.iommu import IommuFacts

EXPECTED = "DMA not translated (group type identity, or no IOMMU)"

# What the reference cluster measured, for the hint.
EVIDENCE = (
    "Translated NVMe DMA cost the reference cluster 77 % of CPU samples in "
    "native_queued_spin_lock_slowpath under alloc_iova."
)


def _hint(vendor: str) -> str:
    off = {"amd": "amd_iommu=off", "intel": "intel_iommu=off"}.get(
        vendor, "amd_iommu=off / intel_iommu=off"
    )
    return (
        f"boot with iommu=pt (passthrough; or {off}, or the IOMMU disabled in the BIOS): "
        f"add it to GRUB_CMDLINE_LINUX_DEFAULT, run update-grub, reboot. {EVIDENCE}"
    )


def _vendor(units: list[str] | None) -> str:
    """AMD units are named ivhd<N>, Intel ones dmar<N> (drivers/iommu/amd/init.c,
    drivers/iommu/intel/dmar.c)."""
    names = units or []
    if any(u.startswith("ivhd") for u in names):
        return "amd"
    if any(u.startswith("dmar") for u in names):
        return "intel"
    return ""


@check("iommu.nvme", "iommu")
def nvme_dma(facts: IommuFacts, params: dict[str, Any]) -> list[Finding]:
    """One result per NVMe controller: fails when its IOMMU group translates DMA; unknown
    when its group or the IOMMU state was unreadable; skipped when the kernel's state does
    not tell (a fabrics controller, a domain type such as "blocked")."""
    if not facts.controllers:
        active = {None: "unknown", True: "active", False: "not active"}[facts.active]
        observed = f"no NVMe controllers on this node (IOMMU {active})"
        return [Finding("", None, observed, EXPECTED)]
    hint = _hint(_vendor(facts.units))
    out = []
    for c in facts.controllers:
        if c.group is not None and c.domain_type is not None:
            observed = f"IOMMU group {c.group}, default domain {c.domain_type} ({c.why})"
        else:
            observed = c.why
        if c.unreadable:
            out.append(Finding.cannot_judge(c.controller, observed, EXPECTED))
        elif c.translated is None:
            out.append(Finding(c.controller, None, observed, EXPECTED))
        else:
            out.append(
                Finding(
                    c.controller, c.translated, observed, EXPECTED, hint if c.translated else ""
                )
            )
    return out
