"""Where the interrupts of NVMe controllers and network ports are served.

Sources, all world-readable (no root needed unless procfs is mounted with ``hidepid``
or the exporter runs in a container without the host's ``/proc/irq``):

- ``/sys/bus/pci/devices/<bdf>/msi_irqs/<N>`` (Documentation/ABI/testing/sysfs-bus-pci,
  "msi_irqs"): one entry per MSI/MSI-X vector the driver allocated, named by its Linux
  IRQ number. A device without MSI has none: on legacy INTx, or its listing was not
  seen (hostfs/irqline.py tells which).
- ``/proc/irq/<N>/smp_affinity_list`` and ``effective_affinity_list``
  (Documentation/core-api/irq/irq-affinity.rst, kernel/irq/proc.c): the CPUs the
  interrupt may be sent to, and those it is actually routed to (on x86 one CPU of the
  former, chosen by the vector matrix allocator). ``effective_affinity_list`` exists
  since Linux 4.13 with CONFIG_GENERIC_IRQ_EFFECTIVE_AFF_MASK (x86 has it); without it
  the allowed list stands in.
- ``/proc/irq/<N>`` exists only once a handler was requested (``register_irq_proc()``
  is called from ``__setup_irq()``, kernel/irq/manage.c): a vector allocated but never
  requested has no directory and is not an interrupt the device uses.
- The write bit of ``smp_affinity_list``: register_irq_proc() gives the affinity files
  S_IWUSR only when ``irq_can_set_affinity_usr()`` allows it, which it refuses for
  kernel-managed interrupts (IRQD_AFFINITY_MANAGED). NVMe I/O queue vectors are
  managed: drivers/nvme/host/pci.c allocates them with PCI_IRQ_AFFINITY, so
  kernel/irq/affinity.c spreads them over every CPU, node by node, and blk-mq maps each
  CPU to the queue whose interrupt is on it. Such a vector serving CPUs of another node
  is the design (the CPU that submitted the I/O completes it), not a misplacement.
- ``/sys/bus/pci/devices/<bdf>/numa_node`` (-1: the firmware gives no locality) and
  ``/sys/devices/system/node/node<N>/cpulist`` (hostfs/numa.py).

``/proc/interrupts`` is not read: its names add nothing the device links do not say,
and on a 96-CPU node with a thousand vectors it is over a megabyte of text that the
kernel formats with one column per CPU on every read.

Size: one reader with its memo of devices and vectors between scrapes and the error
paths of each file; split, the memo would be shared across modules.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from cephnode_exporter.hostfs import (
    BATCH_PAGE,
    AttrFiles,
    HostFS,
    ParseError,
    ReadErrors,
    fd_budget,
    list_dir,
    parse_cpulist,
    read_text,
)
from cephnode_exporter.hostfs.irqline import LegacyLine, read_legacy_line
from cephnode_exporter.hostfs.numa import read_node_cpus
from cephnode_exporter.hostfs.pci import parse_numa_node
from cephnode_exporter.hostfs.process import find_process

# PCI function names as drivers/pci/probe.c makes them ("%04x:%02x:%02x.%d").
_BDF_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# Linux IRQ numbers are below IRQ_BITMAP_BITS (NR_IRQS + 8196 with SPARSE_IRQ,
# kernel/irq/internals.h); nine digits bound a garbage entry name. The entries are
# named with "%d" (drivers/pci/msi/sysfs.c): ASCII, no leading zero, so "01080" is
# not a second name of 1080.
_IRQ_RE = re.compile(r"0|[1-9][0-9]{0,8}")
# A device never has more vectors than PCI MSI-X allows (2048 per function, PCI Local
# Bus spec 3.0, MSI-X Table Size is 11 bits): more entries are not a kernel's listing.
MAX_VECTORS = 2048
# irqbalance's process name (comm) and the directory where irqbalance 1.8+ keeps its
# control socket "irqbalance<pid>.sock" (irqbalance/irqbalance.h SOCKET_TMPFS).
IRQBALANCE_COMM = "irqbalance"
IRQBALANCE_RUN_DIR = ("run", "irqbalance")
_SOCK_RE = re.compile(r"irqbalance(\d{1,9})\.sock")


@dataclass(frozen=True)
class IRQ:
    """One interrupt of a device, as ``/proc/irq/<number>`` shows it."""

    number: int
    # smp_affinity_list; None when not read (a vector that is not managed and has an
    # effective list: only where it is served matters).
    allowed: frozenset[int] | None
    effective: frozenset[int]  # effective_affinity_list, or allowed without it
    managed: bool  # affinity not settable from user space (kernel-managed spreading)


@dataclass
class DeviceIRQs:
    """The interrupts of one NVMe controller or network port's PCI function."""

    device: str  # nvme0, ens1f0np0
    kind: str  # "nvme" or "net"
    pci: str  # the PCI function, 0000:41:00.0
    numa_node: int | None  # None: -1 (no locality from the firmware) or unreadable
    irqs: list[IRQ] = field(default_factory=list)
    # IRQs requested by the device whose affinity could not be read: number -> reason.
    unread: dict[int, str] = field(default_factory=dict)
    # The device's numa_node file could not be read (the reason); None when it was.
    numa_error: str | None = None
    # Entries of msi_irqs the kernel never names so (refused, counted as read errors).
    junk: str | None = None
    # Set when msi_irqs listed no vector: its legacy line and what that tells.
    no_msi: LegacyLine | None = None


@dataclass
class IRQFacts:
    devices: list[DeviceIRQs] = field(default_factory=list)
    # node -> its online CPUs; None without NUMA support or when unreadable.
    node_cpus: dict[int, frozenset[int]] | None = None
    irqbalance: bool | None = None  # None: procfs could not be searched
    items_dropped: int = 0
    errors: ReadErrors = field(default_factory=ReadErrors)
    # Why devices of a class may be missing from ``devices``: its class directory is
    # hidden from the exporter (a mask, a partial sysfs), one reason per class.
    hidden: list[str] = field(default_factory=list)


class IRQRootMissingError(FileNotFoundError):
    """``/proc/irq`` itself is absent or hidden (a mask mounted over it): procfs always
    has it (init_irq_proc(), kernel/irq/proc.c), so no device's interrupts can be
    placed, not "none requested"."""


def parse_affinity(text: str, path: str) -> frozenset[int]:
    """A cpulist affinity file; an empty list is possible (a managed interrupt whose
    CPUs are all offline is shut down and lists none in effective_affinity_list)."""
    text = text.strip()
    if text.isdigit() and len(text) < 5:  # the common case: one CPU
        return frozenset((int(text),))
    try:
        return frozenset(parse_cpulist(text))
    except ValueError as exc:
        raise ParseError(path, str(exc)) from None


def format_cpulist(cpus: frozenset[int] | set[int]) -> str:
    """The kernel's cpulist form of a CPU set ("0-23,48-71"), for reports."""
    out: list[str] = []
    ordered = sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def unreadable_reason(exc: BaseException) -> str:
    """A reason an operator can act on: permission problems say they need privileges."""
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return f"{exc.filename}: permission denied (needs root, or procfs without hidepid)"
    return str(exc)


class IRQReader:
    """Reads ``/proc/irq/<N>`` affinity files, keeping them open between scrapes.

    A 96-CPU node with ten NVMe drives and two ports has over a thousand vectors, so
    open/read/close of two files each costs tens of milliseconds a scrape. The files are
    procfs seq_files that regenerate on a read from offset 0 (AttrFiles), so they are
    kept open and re-read with pread. Two facts of a vector never change while its
    handler exists and are cached per IRQ number: whether it is kernel-managed (the
    write bit) and, for a managed one, its allowed CPUs (fixed at allocation by
    kernel/irq/affinity.c), and with them, for a managed vector of one CPU (an NVMe
    queue per CPU), where it is served. A vector whose handler went (``/proc/irq/<N>``
    removed) makes a kept descriptor fail; the read is retried once on a fresh open,
    which then says whether the IRQ came back under another device.
    """

    # Share of the descriptor limit (cpuidle keeps 0.5, OSD threads 0.25).
    FD_SHARE = 0.1

    def __init__(self, fs: HostFS) -> None:
        self._fs = fs
        self._files = AttrFiles(fd_budget(self.FD_SHARE))
        self._managed: dict[int, bool] = {}
        self._allowed: dict[int, frozenset[int]] = {}
        self._fixed: dict[int, IRQ] = {}
        # Per IRQ read through prefetch: its effective list's bytes and the IRQ they gave.
        self._last: dict[int, tuple[bytes, IRQ]] = {}
        self._effective: dict[int, str] = {}
        self._seen: frozenset[int] = frozenset()
        # Bumped whenever a vector's cached facts are dropped: a device's list of fixed
        # vectors (``devices``) is only taken again while it is unchanged.
        self.generation = 0
        self._root = fs.proc("irq")
        # Per PCI directory: the msi_irqs listing of the last scrape and its vectors,
        # so an unchanged listing is not sorted and matched again (1,100 names here).
        self.vectors: dict[str, tuple[list[str], tuple[int, ...], str | None]] = {}
        # Per PCI directory: what read_device built for it at the last scrape.
        self.devices: dict[str, _Device] = {}
        # Per class device link: the two symlinks behind it and the PCI function they
        # led to (see pci_devices).
        self.links: dict[str, tuple[tuple[str, str | None], tuple[str, str] | None]] = {}

    @property
    def fs(self) -> HostFS:
        return self._fs

    def _paths(self, number: int) -> tuple[str, str]:
        base = f"{self._root}/{number}"
        return f"{base}/smp_affinity_list", f"{base}/effective_affinity_list"

    def close(self) -> None:
        self._files.close_all()
        self._managed, self._allowed, self._fixed, self._seen = {}, {}, {}, frozenset()
        self._last, self._effective = {}, {}
        self.vectors, self.links, self.devices = {}, {}, {}
        self.generation += 1

    def _read(self, path: str) -> str:
        try:
            data = self._files.read_bytes(path, 4096)
        except FileNotFoundError:
            raise
        except OSError:
            data = self._files.read_bytes(path, 4096)  # a stale descriptor: once afresh
        return data.decode("ascii", "replace")

    def read(self, number: int) -> IRQ | None:
        """``/proc/irq/<number>``; None when the IRQ has no handler (no directory).

        The allowed list of a vector that is not managed is read only where the kernel
        has no effective list: what the checks judge is where it is served."""
        fixed = self._fixed.get(number)
        if fixed is not None:
            return fixed
        allowed_path, effective_path = self._paths(number)
        allowed: frozenset[int] | None = None
        try:
            managed = self._managed.get(number)
            if managed is None:
                managed = not os.stat(allowed_path).st_mode & stat.S_IWUSR
            if managed:  # read once: the kernel fixed it at allocation
                allowed = self._allowed.get(number) or parse_affinity(
                    read_text(allowed_path), allowed_path
                )
            if allowed is not None and len(allowed) == 1:
                # A managed vector never leaves its mask: on CPU hot-unplug the kernel
                # shuts it down instead (kernel/irq/cpuhotplug.c), so with one CPU in
                # the mask that CPU is the one serving it, and nothing is re-read.
                effective = allowed
            else:
                try:
                    effective = parse_affinity(self._read(effective_path), effective_path)
                except FileNotFoundError:
                    if not os.path.isdir(os.path.dirname(effective_path)):
                        raise
                    # Before 4.13, or without an effective mask: the allowed list.
                    if allowed is None:
                        allowed = parse_affinity(self._read(allowed_path), allowed_path)
                    effective = allowed
        except FileNotFoundError:
            self._forget(number)
            if os.path.isdir(f"{self._root}/{number}"):
                raise  # the IRQ has a handler, but its affinity file is missing
            if not os.path.isdir(self._root):
                raise IRQRootMissingError(
                    errno.ENOENT, "missing (procfs without /proc/irq)", self._root
                ) from None
            hidden = self._fs.proc_hidden("irq")  # an empty mask, not no handler
            if hidden is not None:
                raise IRQRootMissingError(errno.ENOENT, hidden) from None
            return None
        except (OSError, ParseError):
            self._forget(number)
            raise
        if not effective and not managed:
            # Only a managed vector whose CPUs are all offline is shut down with an
            # empty mask (kernel/irq/cpuhotplug.c); user space cannot set one
            # (write_irq_affinity() refuses a mask without an online CPU).
            self._forget(number)
            raise ParseError(effective_path, "empty, for an interrupt not kernel-managed")
        self._managed[number] = managed
        irq = IRQ(number, allowed, effective, managed=managed)
        if managed and allowed is not None:
            self._allowed[number] = allowed
            if len(allowed) == 1:
                self._fixed[number] = irq  # nothing of it can change: see above
        return irq

    def prefetch(self, numbers: list[int]) -> dict[int, IRQ]:
        """The vectors of ``numbers`` already read once whose effective list is kept
        open, read in one batched call (AttrFiles.read_many): what :meth:`read` would
        give, the same object when the list reads as last time. A vector left out (no
        kept file, a failed read, a list that does not parse, a managed one without its
        allowed list) is for :meth:`read`, which names any error."""
        managed_of, allowed_of, paths_of = self._managed, self._allowed, self._effective
        todo: list[int] = []
        paths: list[str] = []
        for n in numbers:
            managed = managed_of.get(n)
            if managed is None or (managed and n not in allowed_of):
                continue
            path = paths_of.get(n)
            if path is None:
                path = paths_of[n] = self._paths(n)[1]
            todo.append(n)
            paths.append(path)
        out: dict[int, IRQ] = {}
        if not todo:
            return out
        last_of = self._last
        for n, path, data in zip(
            todo, paths, self._files.read_many(paths, BATCH_PAGE), strict=True
        ):
            if data is None:
                continue
            last = last_of.get(n)
            if last is not None and last[0] == data:
                out[n] = last[1]
                continue
            try:
                effective = parse_affinity(data.decode("ascii", "replace"), path)
            except ParseError:
                continue
            managed = managed_of[n]
            if not effective and not managed:
                continue  # read() names the error
            irq = IRQ(n, allowed_of[n] if managed else None, effective, managed=managed)
            last_of[n] = (data, irq)
            out[n] = irq
        return out

    @property
    def fixed(self) -> dict[int, IRQ]:
        """The vectors whose every fact is known for good (read returns them as is)."""
        return self._fixed

    def _forget(self, number: int) -> None:
        self.generation += 1
        self._last.pop(number, None)
        self._effective.pop(number, None)
        self._fixed.pop(number, None)
        self._managed.pop(number, None)
        self._allowed.pop(number, None)

    def done(self, numbers: set[int]) -> None:
        """After a scrape: drop what belongs to IRQs no longer read (closing their files),
        only when the set changed."""
        current = frozenset(numbers)
        if current == self._seen:
            return
        self._seen = current
        for number in [n for n in (*self._managed, *self._fixed, *self._last) if n not in current]:
            self._forget(number)
        keep = {path for n in current for path in self._paths(n)}
        self._files.close_under(self._root + os.sep, keep)
        # A device removed or given other vectors: its listing is not kept for good.
        self.vectors = {d: v for d, v in self.vectors.items() if current.issuperset(v[1])}
        self.devices = {d: v for d, v in self.devices.items() if current.issuperset(v.vectors)}


def device_vectors(
    pci_dir: str,
    cache: dict[str, tuple[list[str], tuple[int, ...], str | None]] | None = None,
    junk: list[str] | None = None,
) -> tuple[int, ...]:
    """The IRQ numbers of a PCI function's MSI/MSI-X vectors; none without msi_irqs.
    With ``cache`` (IRQReader.vectors) a listing equal to the last one gives the same
    tuple, the very object, without sorting and matching its names again. Entries not
    named as the kernel names them ("01080", "x") are left out, not counted twice, and
    described in ``junk``, on every call (the listing is the same garbage each time)."""
    names = list_dir(os.path.join(pci_dir, "msi_irqs"))
    if len(names) > MAX_VECTORS:
        raise ParseError(pci_dir, f"{len(names)} MSI vectors, more than {MAX_VECTORS}")
    hit = cache.get(pci_dir) if cache is not None else None
    if hit is not None and hit[0] == names:
        vectors, bad = hit[1], hit[2]
    else:
        good = [n for n in names if _IRQ_RE.fullmatch(n)]
        vectors = tuple(sorted(map(int, good)))
        bad = None
        if len(good) != len(names):
            refused = sorted(set(names) - set(good))
            bad = (
                f"{os.path.join(pci_dir, 'msi_irqs')}: {len(refused)} entries not named "
                f"as the kernel names vectors, ignored: {', '.join(map(repr, refused[:3]))}"
            )
        if cache is not None and vectors:
            cache[pci_dir] = (names, vectors, bad)
    if bad is not None and junk is not None:
        junk.append(bad)
    return vectors


def find_pci_function(fs: HostFS, link: str) -> tuple[str, str] | None:
    """(BDF, directory) of the PCI function behind a class device's ``device`` link:
    the link's target or its parent (a virtio device sits below its PCI function).
    None when the device is not on PCI (virtual, fabrics, platform)."""
    try:
        target = os.path.realpath(link, strict=True)
    except OSError:
        return None
    for candidate in (target, os.path.dirname(target)):
        name = os.path.basename(candidate)
        if _BDF_RE.fullmatch(name):
            return name, candidate
    return None


def _links(path: str) -> tuple[str, str | None] | None:
    """The targets of a class device's symlink and of its ``device`` link (None
    without one: a virtual device such as ``lo`` has no parent, drivers/base/core.c
    get_device_parent), or None when the class entry is no symlink."""
    try:
        target = os.readlink(path)
    except OSError:
        return None
    try:
        return target, os.readlink(os.path.join(path, "device"))
    except OSError:
        return target, None


def pci_devices(
    fs: HostFS,
    cache: dict[str, tuple[tuple[str, str | None], tuple[str, str] | None]] | None = None,
) -> list[tuple[str, str, str, str]]:
    """(name, kind, BDF, PCI directory) of every NVMe controller and network port on
    PCI, NVMe first, each PCI function once (the first netdev by name when several
    share one, as switchdev representors or multi-port functions do).

    With ``cache`` (IRQReader.links) a device whose class link and ``device`` link
    (or its absence, as on a virtual device) read as at the last scrape is taken to
    lead where it led then: two readlinks instead of resolving the whole path (a dozen
    lstats each)."""
    out: list[tuple[str, str, str, str]] = []
    seen: set[str] = set()
    for kind, cls in (("nvme", "nvme"), ("net", "net")):
        for name in list_dir(fs.sys("class", cls)):
            path = fs.sys("class", cls, name)
            links = _links(path) if cache is not None else None
            hit = cache.get(path) if cache is not None else None
            if hit is not None and links is not None and hit[0] == links:
                found = hit[1]
            else:
                found = find_pci_function(fs, os.path.join(path, "device"))
                if cache is not None and links is not None:
                    cache[path] = (links, found)
            if found is None or found[0] in seen:
                continue
            seen.add(found[0])
            out.append((name, kind, found[0], found[1]))
    return out


def read_device(
    reader: IRQReader, name: str, kind: str, bdf: str, pci_dir: str, seen: set[int]
) -> DeviceIRQs:
    """One device's NUMA node and interrupts; per-item errors are kept on the result.
    The IRQ numbers read are added to ``seen``."""
    dev = DeviceIRQs(name, kind, bdf, None)
    numa_path = os.path.join(pci_dir, "numa_node")
    try:
        node = parse_numa_node(read_text(numa_path), numa_path)
        dev.numa_node = node if node >= 0 else None
    except FileNotFoundError:
        pass  # CONFIG_NUMA off: no numa_node attribute
    except (OSError, ParseError) as exc:
        dev.numa_error = unreadable_reason(exc)
    junk: list[str] = []
    try:
        vectors = device_vectors(pci_dir, reader.vectors, junk)
    except (OSError, ParseError) as exc:
        dev.unread[-1] = unreadable_reason(exc)
        return dev
    if junk:
        dev.junk = junk[0]
    if not vectors:
        # Legacy INTx, a device that is down, or a listing not seen (irqline.py).
        try:
            dev.no_msi = read_legacy_line(reader.fs, name, kind, bdf, pci_dir)
        except (OSError, ParseError) as exc:
            why = unreadable_reason(exc)
            dev.unread[-1] = f"msi_irqs lists no vector and the legacy line is unreadable: {why}"
            return dev
        unknown = dev.no_msi.unknown(name)
        if unknown is not None:
            dev.unread[-1] = unknown
        if not dev.no_msi.legacy:
            return dev
        vectors = (dev.no_msi.line,)
    seen.update(vectors)
    memo = reader.devices.get(pci_dir)
    if memo is not None and memo.vectors is vectors and memo.generation == reader.generation:
        # The same listing and nothing forgotten since: the fixed vectors are as they
        # were, and only the others (an NVMe admin queue, a port's queues) are read.
        irqs = memo.irqs
        loose = memo.loose
        if not loose:
            dev.irqs = irqs
            return dev
        fetched = reader.prefetch(memo.numbers)
        if all(fetched.get(irqs[i].number) is irqs[i] for i in loose):
            dev.irqs = irqs  # each read as last time (prefetch gave the same object)
            return dev
    fixed = reader.fixed
    # Most vectors are fixed (IRQReader.read: nothing of them can change); the others
    # are read in one batch, and what the batch leaves out one by one.
    got: list[IRQ | None] = [fixed.get(n) for n in vectors]
    missing = [n for n, irq in zip(vectors, got, strict=True) if irq is None]
    if missing:
        fetched = reader.prefetch(missing)
        for i, number in enumerate(vectors):
            if got[i] is not None:
                continue
            irq = fetched.get(number)
            if irq is None:
                try:
                    irq = reader.read(number)
                except IRQRootMissingError as exc:
                    # One reason for the device, not one per vector.
                    dev.irqs, dev.unread = [], {-1: unreadable_reason(exc)}
                    reader.devices.pop(pci_dir, None)
                    return dev
                except (OSError, ParseError) as exc:
                    dev.unread[number] = unreadable_reason(exc)
                    continue
            got[i] = irq
    dev.irqs = [irq for irq in got if irq is not None]
    if dev.unread or len(dev.irqs) != len(vectors):
        # A vector without a handler may get one, a failed one is read again: each
        # scrape reads them.
        reader.devices.pop(pci_dir, None)
    else:
        loose = tuple(i for i, irq in enumerate(dev.irqs) if irq.number not in fixed)
        reader.devices[pci_dir] = _Device(
            vectors, reader.generation, dev.irqs, loose, [dev.irqs[i].number for i in loose]
        )
    return dev


class _Device(NamedTuple):
    """What read_device built for a device at the last scrape (IRQReader.devices)."""

    vectors: tuple[int, ...]  # the object device_vectors gave
    generation: int  # IRQReader.generation then
    irqs: list[IRQ]
    loose: tuple[int, ...]  # places in ``irqs`` of the vectors not fixed
    numbers: list[int]  # their IRQ numbers, for prefetch


def remote_irqs(dev: DeviceIRQs, node_cpus: dict[int, frozenset[int]] | None) -> int | None:
    """Interrupts of the device not managed by the kernel whose effective CPUs are all
    outside the device's NUMA node; None when that cannot be told (node unknown, no
    NUMA topology, or a node without CPUs). Managed ones are spread on purpose."""
    if dev.numa_node is None or not node_cpus:
        return None
    local = node_cpus.get(dev.numa_node)
    if not local:
        return None
    return sum(
        1 for irq in dev.irqs if not irq.managed and irq.effective and not irq.effective & local
    )


def effective_cpus(dev: DeviceIRQs) -> frozenset[int]:
    """Every CPU that serves at least one of the device's interrupts. The collector and
    its check both ask, every scrape, of lists that are mostly the same IRQ objects as
    last time (IRQReader keeps them): an equal list gives the set built for it."""
    hit = _SERVING.get(dev.device)
    if hit is not None and hit[0] == dev.irqs:
        return hit[1]
    cpus: frozenset[int] = frozenset().union(*[irq.effective for irq in dev.irqs])
    if len(_SERVING) >= _SERVING_MAX:
        _SERVING.clear()
    _SERVING[dev.device] = (list(dev.irqs), cpus)
    return cpus


# effective_cpus by device name: the interrupt list it was built from, and the set.
_SERVING: dict[str, tuple[list[IRQ], frozenset[int]]] = {}
_SERVING_MAX = 4096


def irqbalance_running(
    fs: HostFS, hint: int | None = None, scan: bool = True
) -> tuple[bool, int | None]:
    """Whether a process named irqbalance runs, and its pid.

    Tries ``hint`` (the pid found last time) first, then the pid in irqbalance's socket
    name under ``/run/irqbalance``, then, with ``scan``, every process's ``comm``
    (Documentation/filesystems/proc.rst): one read when nothing changed, a scan of
    /proc only when irqbalance is not running or was restarted. Without ``scan`` a
    process found neither way counts as not running.
    Raises OSError when /proc cannot be listed.
    """
    candidates: list[int | None] = [hint]
    for entry in list_dir(fs.root(*IRQBALANCE_RUN_DIR)):
        m = _SOCK_RE.fullmatch(entry)
        if m is not None:
            candidates.append(int(m.group(1)))
    pid = find_process(fs, IRQBALANCE_COMM, candidates, scan)
    return pid is not None, pid


def read_node_cpus_safe(fs: HostFS, errors: ReadErrors) -> dict[int, frozenset[int]] | None:
    """The NUMA nodes' CPUs; None without NUMA or when unreadable (counted)."""
    try:
        return read_node_cpus(fs)
    except (OSError, ParseError) as exc:
        errors.add(exc)
        return None
