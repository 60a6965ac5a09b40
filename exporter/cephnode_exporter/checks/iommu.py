"""Check ``iommu.nvme``: NVMe DMA must not go through IOMMU translation."""

from __future__ import annotations

from typing import Any

from cephnode_exporter.checks.base import Finding, check
from cephnode_exporter.facts.iommu import NO_GROUP, NO_TYPE_FILE, ControllerIommu, IommuFacts

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


# kstrtobool() (lib/kstrtox.c), which parses iommu.passthrough=: the first character
# decides, "on"/"off" by the second.
_TRUE, _FALSE = ("1", "y", "Y", "on"), ("0", "n", "N", "off")


def cmdline_passthrough(params: dict[str, str]) -> tuple[bool | None, str]:
    """Whether the kernel command line sets the default domain: True for passthrough,
    False for translated, None when it does not say or says both; and the parameters.

    x86 ``iommu=`` is a comma list read left to right (iommu_setup() in
    arch/x86/kernel/pci-dma.c): ``pt`` sets passthrough, ``nopt`` translation, the last
    one wins. ``iommu.passthrough=`` is the generic switch (drivers/iommu/iommu.c,
    iommu_set_def_domain_type()). ``amd_iommu=``/``intel_iommu=`` have no passthrough
    word, and ``=off`` leaves no unit registered, so they never reach this question.
    """
    votes: dict[bool, str] = {}
    words = [w for w in params.get("iommu", "").split(",") if w in ("pt", "nopt")]
    if words:
        votes[words[-1] == "pt"] = f"iommu={params['iommu']}"
    generic = params.get("iommu.passthrough", "")
    if generic.startswith(_TRUE) or generic.startswith(_FALSE):
        passthrough = generic.startswith(_TRUE)
        votes.setdefault(passthrough, f"iommu.passthrough={generic}")
        if len(votes) == 2:
            return None, f"{votes[True]} and {votes[False]} contradict"
    if len(votes) == 1:
        (passthrough, said) = next(iter(votes.items()))
        return passthrough, said
    return None, ""


def _undecided(c: ControllerIommu, facts: IommuFacts, hint: str) -> Finding:
    """A controller whose DMA path sysfs does not show although an IOMMU is active:
    judged from the kernel command line when it is unambiguous, else unknown (the
    default domain then is the kernel's build default, CONFIG_IOMMU_DEFAULT_PASSTHROUGH
    or its DMA/DMA_LAZY siblings, which no file shows)."""
    observed = f"IOMMU group {c.group}: {c.why}" if c.group is not None else c.why
    if facts.params is None:
        return Finding.cannot_judge(c.controller, f"{observed}; /proc/cmdline unreadable", EXPECTED)
    passthrough, said = cmdline_passthrough(facts.params)
    if passthrough is None:
        why = said or (
            "the kernel command line does not say (no iommu=pt, iommu=nopt or "
            "iommu.passthrough=), and the build's default domain is not visible"
        )
        return Finding.cannot_judge(c.controller, f"{observed}; {why}", EXPECTED)
    if passthrough:
        # No group: the IOMMU does not cover the device or passes it through; either way
        # its DMA is not translated.
        return Finding(
            c.controller,
            False,
            f"{observed}; passthrough by the kernel command line ({said})",
            EXPECTED,
        )
    if c.undecided == NO_GROUP:
        why = (
            f"{observed}; the kernel command line says translated ({said}), but a device "
            "without a group may not be behind the IOMMU at all"
        )
        return Finding.cannot_judge(c.controller, why, EXPECTED)
    observed = f"{observed}; translated by the kernel command line ({said})"
    return Finding(c.controller, True, observed, EXPECTED, hint)


@check("iommu.nvme", "iommu")
def nvme_dma(facts: IommuFacts, params: dict[str, Any]) -> list[Finding]:
    """One result per NVMe controller: fails when its IOMMU group translates DMA; unknown
    when its group or the IOMMU state was unreadable; skipped when the kernel's state does
    not tell (a fabrics controller, a domain type such as "blocked"). With an active
    IOMMU whose mode sysfs does not show (no type file before Linux 5.2, no iommu_group
    link), the kernel command line decides when it is unambiguous, else unknown."""
    if not facts.controllers:
        if facts.controllers_hidden is not None:
            return [Finding.cannot_judge("", facts.controllers_hidden, EXPECTED)]
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
        elif c.translated is None and c.undecided in (NO_TYPE_FILE, NO_GROUP):
            out.append(_undecided(c, facts, hint))
        elif c.translated is None:
            out.append(Finding(c.controller, None, observed, EXPECTED))
        else:
            out.append(
                Finding(
                    c.controller, c.translated, observed, EXPECTED, hint if c.translated else ""
                )
            )
    return out
