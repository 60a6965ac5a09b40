"""Firmware, CPU microcode and kernel release: what changed under a node between reboots.

The reference cluster's first bottleneck was a BIOS setting (ceph.io, "Ceph: A Journey to
1 TiB/s"); a BIOS update, a microcode update or a new kernel is what an operator wants to
see next to a latency change. Only world-readable files are used:

- DMI, the attributes of ``/sys/class/dmi/id`` (drivers/firmware/dmi-id.c):
  ``bios_vendor``, ``bios_version``, ``bios_date``, ``sys_vendor``, ``product_name``
  are mode 0444. ``product_serial``, ``product_uuid``,
  ``board_serial`` and ``chassis_serial`` are 0400 (root only) and are never read: they
  identify a machine and change nothing about its speed. No DMI directory on machines
  without SMBIOS (most Arm boards, some VMs): not an error.
- Microcode: ``/sys/devices/system/cpu/cpu<N>/microcode/version`` (x86 microcode driver,
  arch/x86/kernel/cpu/microcode/core.c, mode 0444, "0x%x"), one per CPU, so a late load
  that reached only some CPUs shows as two revisions. Without that directory (no
  microcode driver, a VM) the ``microcode`` line of ``/proc/cpuinfo`` for the first CPU
  (arch/x86/kernel/cpu/proc.c). /proc/cpuinfo is read only as far as that line: on
  kernels before 5.18 every read of it samples every CPU's frequency by IPI.
- ``/proc/sys/kernel/osrelease`` (Documentation/admin-guide/sysctl/kernel.rst): the
  running kernel's release, as ``uname -r`` prints it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from cephnode_exporter.hostfs import (
    AttrFiles,
    HostFS,
    ParseError,
    ReadErrors,
    fd_budget,
    open_regular,
    read_optional_text,
    read_text,
)
from cephnode_exporter.hostfs.cpu import cpu_paths, online_cpus

DMI_DIR = ("class", "dmi", "id")
# The world-readable DMI attributes exported (dmi-id.c: DEFINE_DMI_ATTR_WITH_SHOW(.., 0444, ..)).
DMI_FIELDS = ("bios_vendor", "bios_version", "bios_date", "sys_vendor", "product_name")
# DMI strings are at most 255 bytes (SMBIOS 3.x, 6.1.3 "Text strings"); a longer
# attribute is not one the kernel printed.
MAX_DMI_LEN = 255
# "0xa0011d1" as the microcode driver prints it, or "0x1000065" in /proc/cpuinfo.
_REVISION_RE = re.compile(r"0x[0-9a-fA-F]{1,16}")
# cpu0's block of /proc/cpuinfo is about 1.5 KiB; 16 KiB leaves room for long flag lists.
CPUINFO_HEAD_BYTES = 16 * 1024


@dataclass
class FirmwareFacts:
    dmi: dict[str, str] | None = None  # None: no DMI on this machine
    # Distinct microcode revisions of the online CPUs (usually one); None: not exposed.
    microcode: list[str] | None = None
    microcode_source: str = ""  # "sysfs" or "cpuinfo"
    kernel_release: str | None = None
    errors: ReadErrors = field(default_factory=ReadErrors)


def _dmi_value(text: str, path: str) -> str:
    if len(text) > MAX_DMI_LEN or any(ord(c) < 0x20 for c in text):
        raise ParseError(path, f"not a DMI string: {text[:40]!r}")
    return text


def read_dmi(fs: HostFS, errors: ReadErrors) -> dict[str, str] | None:
    """The DMI fields; None without DMI. A field the firmware left out (the kernel then
    has no attribute) or that was unreadable is empty, and unreadable ones are counted."""
    base = fs.sys(*DMI_DIR)
    if not os.path.isdir(base):
        return None
    out: dict[str, str] = {}
    for name in DMI_FIELDS:
        path = os.path.join(base, name)
        try:
            out[name] = _dmi_value(read_optional_text(path) or "", path)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            out[name] = ""
    return out


def parse_revision(text: str, path: str) -> str:
    text = text.strip()
    if not _REVISION_RE.fullmatch(text):
        raise ParseError(path, f"not a microcode revision: {text[:40]!r}")
    return "0x" + text[2:].lower().lstrip("0") if text[2:].strip("0") else "0x0"


def parse_cpuinfo_microcode(head: str, path: str) -> str | None:
    """The first CPU's ``microcode`` line of /proc/cpuinfo; None when it has none (not
    x86, or the line lies beyond the part read)."""
    for line in head.splitlines():
        if not line.strip():
            return None  # the end of the first CPU's block
        key, sep, value = line.partition(":")
        if sep and key.strip() == "microcode":
            return parse_revision(value, path)
    return None


def read_microcode(
    fs: HostFS, errors: ReadErrors, files: AttrFiles | None = None
) -> tuple[list[str] | None, str]:
    """Distinct revisions and where they came from; (None, "") when not exposed.
    ``files`` keeps the per-CPU files open between scrapes."""
    try:
        cpus = online_cpus(fs, errors)
    except (OSError, ParseError) as exc:
        errors.add(exc)
        cpus = []
    revisions: set[str] = set()
    paths = cpu_paths(fs, cpus, "microcode", "version")
    if files is not None and paths:
        # One batched read of the kept files: when every one reads, the distinct texts
        # (one revision on a healthy node) are parsed once; otherwise, or when one does
        # not parse, the loop below reads file by file and names the error.
        batched = files.read_many(paths, same=True)
        texts = {t for t in batched if t is not None}
        if None not in batched:
            try:
                found = {parse_revision(t.decode(), paths[0]) for t in texts}
            except (ParseError, UnicodeDecodeError):
                pass
            else:
                return sorted(found), "sysfs"
    for path in paths:
        try:
            # read_text decodes with "replace": a non-UTF-8 byte is a ParseError of this
            # CPU's file, not a UnicodeDecodeError that fails the collector.
            text = files.read_text(path) if files is not None else read_text(path)
            revisions.add(parse_revision(text, path))
        except FileNotFoundError:
            if revisions:
                errors.add(ParseError(path, "missing while other CPUs have it"))
            break  # no microcode driver: the same for every CPU
        except (OSError, ParseError) as exc:
            errors.add(exc)
            return None, "sysfs"
    if revisions:
        return sorted(revisions), "sysfs"
    path = fs.proc("cpuinfo")
    try:
        fd = open_regular(path)
        try:
            head = os.read(fd, CPUINFO_HEAD_BYTES).decode("utf-8", "replace")
        finally:
            os.close(fd)
        revision = parse_cpuinfo_microcode(head, path)
    except FileNotFoundError:
        return None, ""
    except (OSError, ParseError) as exc:
        errors.add(exc)
        return None, "cpuinfo"
    return ([revision], "cpuinfo") if revision is not None else (None, "")


def read_kernel_release(fs: HostFS, errors: ReadErrors) -> str | None:
    path = fs.proc("sys", "kernel", "osrelease")
    try:
        release = read_text(path)
        if not release or len(release) > 64 or any(c.isspace() for c in release):
            raise ParseError(path, f"not a kernel release: {release[:40]!r}")
        return release
    except (OSError, ParseError) as exc:
        errors.add(exc)
        return None


class FirmwareReader:
    """Reads the firmware facts, the static ones once.

    DMI comes from the SMBIOS tables the kernel copied at boot (drivers/firmware/dmi_scan.c)
    and the kernel release is the running kernel's: neither changes before a reboot,
    which restarts the exporter, so each is read until it was read without error once.
    Microcode can be updated at runtime (late loading) and is read every scrape, from
    files kept open.
    """

    FD_SHARE = 0.02

    def __init__(self, fs: HostFS) -> None:
        self._fs = fs
        self._files = AttrFiles(fd_budget(self.FD_SHARE))
        self._dmi: tuple[dict[str, str] | None] | None = None
        self._release: str | None = None

    def close(self) -> None:
        self._files.close_all()

    def read(self) -> FirmwareFacts:
        facts = FirmwareFacts()
        if self._dmi is None:
            before = len(facts.errors)
            dmi = read_dmi(self._fs, facts.errors)
            if len(facts.errors) == before:
                self._dmi = (dmi,)
            facts.dmi = dmi
        else:
            facts.dmi = self._dmi[0]
        facts.microcode, facts.microcode_source = read_microcode(
            self._fs, facts.errors, self._files
        )
        if self._release is None:
            self._release = read_kernel_release(self._fs, facts.errors)
        facts.kernel_release = self._release
        return facts


def read_firmware(fs: HostFS) -> FirmwareFacts:
    """One read of everything, nothing kept (tests and one-shot use)."""
    reader = FirmwareReader(fs)
    try:
        return reader.read()
    finally:
        reader.close()
