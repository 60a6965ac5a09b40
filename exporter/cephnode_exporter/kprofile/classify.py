"""Classify sampled call chains, and count one window's classes and spin-lock callers.

A sample is what ``perf`` recorded when the sampling timer fired on a CPU: the thread it
interrupted and that thread's kernel call chain, leaf (the interrupted function) first.
Every sample gets exactly one class, tried in this order:

``spinlock_iommu``
    The chain contains a queued spin-lock slow path and a function above it (a caller)
    is IOMMU or IOVA code: the reference cluster's 77 %/61 % profile.
``spinlock``
    The chain contains a queued spin-lock slow path (any other lock).
``iommu``
    IOMMU or IOVA code without a contended lock: the translation cost itself.
``idle``
    The idle task (thread id 0) outside interrupt work.
``user``
    No kernel frame: the CPU was running a program's own code.
``kernel``
    Everything else: system calls, interrupts, softirqs, kernel threads.

Spin-lock samples are also attributed to one *caller*: the first function above the
slow path that is not a lock wrapper (``_raw_spin_lock_irqsave`` and friends), so
``native_queued_spin_lock_slowpath <- _raw_spin_lock_irqsave <- alloc_iova`` counts for
``alloc_iova``. Names are matched without compiler clone suffixes (``.isra.0``,
``.constprop.0``, ``.part.0``, ``.cold``) and, for the prefix rules, without leading
underscores (``__iommu_dma_map`` is IOMMU code).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum


class SampleClass(StrEnum):
    IDLE = "idle"
    USER = "user"
    KERNEL = "kernel"
    SPINLOCK = "spinlock"
    SPINLOCK_IOMMU = "spinlock_iommu"
    IOMMU = "iommu"


CLASSES: tuple[SampleClass, ...] = tuple(SampleClass)

# Queued spin-lock slow paths: the generic qspinlock (kernel/locking/qspinlock.c:
# queued_spin_lock_slowpath, renamed native_queued_spin_lock_slowpath on x86 when
# CONFIG_PARAVIRT_SPINLOCKS is set, with __pv_queued_spin_lock_slowpath as the paravirt
# variant under a hypervisor; also arm64, riscv, loongarch), powerpc's own qspinlock
# (arch/powerpc/lib/qspinlock.c: queued_spin_lock_slowpath), powerpc's older simple
# spinlock on shared LPARs (arch/powerpc/lib/locks.c: splpar_spin_yield) and s390's
# (arch/s390/lib/spinlock.c: arch_spin_lock_wait).
SPIN_SLOWPATHS = frozenset(
    {
        "native_queued_spin_lock_slowpath",
        "queued_spin_lock_slowpath",
        "__pv_queued_spin_lock_slowpath",
        "splpar_spin_yield",
        "arch_spin_lock_wait",
    }
)

# IOMMU and IOVA code: alloc_iova*, free_iova*, queue_iova,
# iommu_dma_*, fq_flush_*, iova_*, intel_iommu_*, amd_iommu_*, arm_smmu_* (drivers/iommu/
# iova.c, dma-iommu.c, intel/, amd/, arm/arm-smmu*/). Matched after stripping leading
# underscores, so the internal __iommu_dma_map and __iommu_dma_unmap count too.
IOMMU_PREFIXES = (
    "alloc_iova",
    "free_iova",
    "iommu_dma_",
    "fq_flush_",
    "iova_",
    "intel_iommu_",
    "amd_iommu_",
    "arm_smmu_",
)
IOMMU_NAMES = frozenset({"queue_iova"})

# Lock entry points between a slow path and the code that wanted the lock
# (include/linux/spinlock_api_smp.h, rwlock_api_smp.h, kernel/locking/spinlock.c,
# kernel/sched/core.c raw_spin_rq_lock_nested); skipped when naming the caller.
# Matched after stripping leading underscores (_raw_spin_lock_irqsave).
LOCK_WRAPPER_PREFIXES = (
    "raw_spin_lock",
    "raw_spin_trylock",
    "raw_read_lock",
    "raw_write_lock",
    "raw_spin_rq_lock",
    "do_raw_spin_lock",
    "do_raw_read_lock",
    "do_raw_write_lock",
    "spin_lock",
    "read_lock",
    "write_lock",
    "queued_spin_lock",
    "queued_read_lock",
    "queued_write_lock",
    "arch_spin_lock",
    "pv_queued_spin_lock",
    "native_queued_spin_lock",
)

# Interrupt and softirq entry on the idle task's stack: such a sample is kernel work done
# on an otherwise idle CPU, not idle time (kernel/softirq.c, kernel/irq/handle.c,
# kernel/irq/irqdesc.c, arch/x86/kernel/irq.c and apic vectors, arm64 entry-common.c).
IRQ_NAMES = frozenset(
    {
        "irq_exit_rcu",
        "irq_exit",
        "handle_softirqs",
        "do_softirq",
        "handle_irq_event",
        "handle_irq_event_percpu",
        "generic_handle_domain_irq",
        "common_interrupt",
        "asm_common_interrupt",
        "el1_interrupt",
        "gic_handle_irq",
    }
)
IRQ_PREFIXES = ("sysvec_", "asm_sysvec_")

UNKNOWN_CALLER = "[unknown]"

# Per-window bound on distinct spin-lock callers (memory; the label set exported is the
# top N of these). A real profile has tens; new names beyond this are counted as dropped.
MAX_CALLERS = 1024
# Bound on the symbol -> flags cache; cleared when full (a kernel has ~100k symbols, a
# window touches a few thousand).
MAX_CACHED_SYMBOLS = 32768

_SPIN, _IOMMU, _WRAPPER, _IRQ = 1, 2, 4, 8


def base_name(symbol: str) -> str:
    """The function name without a compiler clone suffix (``foo.isra.0`` -> ``foo``)."""
    return symbol.partition(".")[0]


def _flags(symbol: str) -> int:
    base = base_name(symbol)
    bare = base.lstrip("_")
    flags = 0
    if base in SPIN_SLOWPATHS:
        flags |= _SPIN
    if bare in IOMMU_NAMES or bare.startswith(IOMMU_PREFIXES):
        flags |= _IOMMU
    if bare.startswith(LOCK_WRAPPER_PREFIXES):
        flags |= _WRAPPER
    if bare in IRQ_NAMES or bare.startswith(IRQ_PREFIXES):
        flags |= _IRQ
    return flags


class Classifier:
    """Classifies samples; remembers each symbol's flags (the same few thousand recur)."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def flags(self, symbol: str) -> int:
        flags = self._cache.get(symbol)
        if flags is None:
            if len(self._cache) >= MAX_CACHED_SYMBOLS:
                self._cache.clear()
            flags = self._cache[symbol] = _flags(symbol)
        return flags

    def classify(self, tid: int, frames: Sequence[str | None]) -> tuple[SampleClass, str | None]:
        """The class of one sample and, for spin-lock samples, the caller's name.

        ``frames`` are the sample's kernel frames, leaf first; None is a kernel address
        perf could not name. An empty list is a sample taken in user mode.
        """
        if not frames:
            return (SampleClass.IDLE if tid == 0 else SampleClass.USER), None
        flags = [self.flags(f) if f is not None else 0 for f in frames]
        for i, f in enumerate(flags):
            if f & _SPIN:
                return self._spinlock(frames, flags, i)
        combined = 0
        for f in flags:
            combined |= f
        if combined & _IOMMU:
            return SampleClass.IOMMU, None
        if tid == 0 and not combined & _IRQ:
            return SampleClass.IDLE, None
        return SampleClass.KERNEL, None

    @staticmethod
    def _spinlock(
        frames: Sequence[str | None], flags: list[int], slowpath: int
    ) -> tuple[SampleClass, str]:
        caller = None
        iommu = False
        for frame, f in zip(frames[slowpath + 1 :], flags[slowpath + 1 :], strict=True):
            iommu = iommu or bool(f & _IOMMU)
            if caller is None and not f & (_SPIN | _WRAPPER):
                caller = base_name(frame) if frame is not None else UNKNOWN_CALLER
        cls = SampleClass.SPINLOCK_IOMMU if iommu else SampleClass.SPINLOCK
        return cls, caller or UNKNOWN_CALLER


class Tally:
    """One window's counts: samples per class, spin-lock callers (bounded), and how many
    kernel samples had no symbol at all (perf could not read the kernel's symbols)."""

    def __init__(self, classifier: Classifier | None = None, max_callers: int = MAX_CALLERS):
        self._classifier = classifier or Classifier()
        self._max_callers = max_callers
        self.counts: dict[SampleClass, int] = dict.fromkeys(CLASSES, 0)
        self.callers: dict[str, int] = {}
        self.callers_dropped = 0
        self.kernel_samples = 0
        self.unresolved_samples = 0

    @property
    def samples(self) -> int:
        return sum(self.counts.values())

    def add(self, tid: int, frames: Sequence[str | None]) -> SampleClass:
        cls, caller = self._classifier.classify(tid, frames)
        self.counts[cls] += 1
        if frames:
            self.kernel_samples += 1
            if all(f is None for f in frames):
                self.unresolved_samples += 1
        if caller is not None:
            if caller in self.callers:
                self.callers[caller] += 1
            elif len(self.callers) < self._max_callers:
                self.callers[caller] = 1
            else:
                self.callers_dropped += 1
        return cls

    def top_callers(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` callers with most spin-lock samples (ties by name, for stable output)."""
        ranked = sorted(self.callers.items(), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:n]
