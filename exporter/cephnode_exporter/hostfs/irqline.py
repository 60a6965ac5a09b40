"""A PCI function that lists no MSI vector: on its legacy INTx line, or unreadable.

``<function>/msi_irqs/`` (Documentation/ABI/testing/sysfs-bus-pci) exists while the
driver has MSI or MSI-X enabled, one entry per vector. A device without it either runs
on its legacy INTx line (one level-triggered interrupt, often shared, for all its
queues: a finding in itself on an NVMe drive or a 100GbE port), or its listing was not
seen (a masked or partial sysfs, a read error): both look alike, and neither may pass.
What tells them apart, read only for such a device (none on a tuned node):

- ``<function>/irq`` (drivers/pci/pci-sysfs.c irq_show()): the first vector while MSI
  (not MSI-X) is enabled, else the INTx line the firmware routed; 0 for none.
- ``/sys/kernel/irq/<N>/actions`` and ``chip_name`` (Documentation/ABI/testing/
  sysfs-kernel-irq; kernel/irq/irqdesc.c, CONFIG_SPARSE_IRQ): the handlers requested on
  the interrupt, comma-separated, and its controller: "IO-APIC" or "IR-IO-APIC" for a
  legacy line on x86, a name with "MSI" for a message-signalled vector ("PCI-MSI",
  "IR-PCI-MSI", "PCI-MSIX-0000:41:00.0" with the per-device MSI domains of 6.2+).
  Without ``/sys/kernel/irq``, the handler directories ``/proc/irq/<N>/<name>``
  (register_handler_proc(), kernel/irq/proc.c) give the handlers, and the controller
  stays unknown.
- A handler names its device: the NVMe driver's are "nvme<ctrl>q<queue>"
  (drivers/nvme/host/pci.c queue_request_irq()); network drivers use the interface
  name ("eth0", "eth0-TxRx-0"), the PCI function ("mlx5_comp0@pci:0000:41:00.0") or
  the driver's name.
- Whether the device is up (an NVMe controller's ``state`` is "live", a port's
  ``operstate`` not down): a controller being reset or a port whose link is down may
  have requested no interrupt at all, which is not a finding.

``/proc/interrupts`` would say the same and more, but it is read whole (hostfs/irq.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from cephnode_exporter.hostfs import HostFS, ParseError, list_dir, parse_kernel_int, read_text
from cephnode_exporter.hostfs.net import LINK_DOWN

# /sys/kernel/irq/<N> (kernel/irq/irqdesc.c irq_sysfs_add()).
KERNEL_IRQ_DIR = ("kernel", "irq")
# States of a device that need not have requested interrupts: an NVMe controller that
# is not "live" (nvme_sysfs_show_state(), drivers/nvme/host/core.c) and a port whose
# link is down (net-sysfs.c operstates[]). The two sets of names do not overlap.
NOT_UP = LINK_DOWN | {"new", "resetting", "connecting", "deleting", "deleting (no IO)", "dead"}
# Linux IRQ numbers fit in an unsigned int; irq_show() prints "%u".
_IRQ_MAX = 2**32 - 1


@dataclass(frozen=True)
class LegacyLine:
    """What a PCI function without MSI vectors shows (DeviceIRQs.no_msi)."""

    listing: str  # the msi_irqs directory: "missing" or "empty"
    line: int  # the irq attribute: its INTx line, 0 for none
    handlers: tuple[str, ...]  # the handlers requested on that line
    chip: str | None  # the line's interrupt controller; None: not shown
    own: bool  # one of the handlers names the device (or its driver)
    state: str | None = None  # "live", "up", "down", ...; read only when ``own`` is False
    driver: str | None = None  # the PCI function's driver

    @property
    def msi(self) -> bool:
        return self.chip is not None and "MSI" in self.chip

    @property
    def legacy(self) -> bool:
        """The device's handler on a line whose controller is no MSI one: INTx in use."""
        return self.own and self.chip is not None and not self.msi

    @property
    def down(self) -> bool:
        """No handler of the device, and it is not up: nothing to place, not a finding."""
        return not self.own and self.state is not None and not _is_up(self.state)

    def unknown(self, device: str) -> str | None:
        """Why this cannot be judged, or None (legacy INTx, or a device that is down)."""
        if self.legacy or self.down:
            return None
        where = f"msi_irqs {self.listing}"
        if self.own and self.msi:
            return (
                f"{where}, but IRQ {self.line} with {device}'s handler is an MSI vector "
                f"(chip {self.chip}): the vector listing is hidden or incomplete"
            )
        if self.own:
            return (
                f"{where}; IRQ {self.line} has {device}'s handler but its controller is not "
                "shown (no /sys/kernel/irq): legacy INTx cannot be told from a hidden MSI "
                "listing"
            )
        line = "no legacy line (irq 0)" if not self.line else f"no handler of it on IRQ {self.line}"
        return (
            f"{device} is {self.state} with {where} and {line}: its interrupts are not "
            "visible (masked or partial sysfs?)"
        )


def _is_up(state: str) -> bool:
    return state not in NOT_UP


def names_device(handler: str, device: str, kind: str, bdf: str, driver: str | None) -> bool:
    """Whether an interrupt handler's name says it belongs to the device."""
    if bdf in handler:
        return True
    if kind == "nvme":
        return re.fullmatch(re.escape(device) + r"q[0-9]+", handler) is not None
    return handler in (device, driver) or handler.startswith(device + "-")


def read_legacy_line(fs: HostFS, device: str, kind: str, bdf: str, pci_dir: str) -> LegacyLine:
    """The facts of a device whose ``msi_irqs`` listed nothing. Raises OSError or
    ParseError when a file needed to tell legacy INTx from an unseen listing is
    unreadable (the ``irq`` attribute, the line's handlers or controller, the state)."""
    listing = "empty" if os.path.isdir(os.path.join(pci_dir, "msi_irqs")) else "missing"
    irq_path = os.path.join(pci_dir, "irq")
    line = parse_kernel_int(read_text(irq_path), irq_path, 0, _IRQ_MAX, "an IRQ number")
    try:
        driver: str | None = os.path.basename(os.readlink(os.path.join(pci_dir, "driver")))
    except OSError:
        driver = None
    handlers: tuple[str, ...] = ()
    chip: str | None = None
    if line:
        handlers, chip = _line_handlers(fs, line)
    own = any(names_device(h, device, kind, bdf, driver) for h in handlers)
    state = None
    if not own:
        attr = "state" if kind == "nvme" else "operstate"
        path = fs.sys("class", kind, device, attr)
        state = read_text(path)
        if not state:
            raise ParseError(path, "empty")
    return LegacyLine(listing, line, handlers, chip, own, state, driver)


def _line_handlers(fs: HostFS, line: int) -> tuple[tuple[str, ...], str | None]:
    """The handler names on IRQ ``line`` and its controller's name (None: not shown)."""
    root = fs.sys(*KERNEL_IRQ_DIR)
    base = os.path.join(root, str(line))
    if os.path.isdir(base):
        actions = read_text(os.path.join(base, "actions"))
        chip = read_text(os.path.join(base, "chip_name")) or None
        return tuple(a for a in actions.split(",") if a), chip
    if os.path.isdir(root):
        return (), None  # no descriptor for the line: nothing requested on it
    # A kernel without CONFIG_SPARSE_IRQ: the handler directories under /proc/irq/<N>.
    proc = fs.proc("irq", str(line))
    return tuple(n for n in list_dir(proc) if os.path.isdir(os.path.join(proc, n))), None
