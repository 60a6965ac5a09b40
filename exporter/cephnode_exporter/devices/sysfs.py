"""Device enumeration from a sysfs tree under the HostFS roots (fixtures, containers).

Layout (Documentation/ABI/testing/sysfs-class-net, sysfs-class-nvme, and
Documentation/admin-guide/sysfs-rules.rst): class directories hold one symlink per
device into /sys/devices, e.g.

    class/nvme/nvme0    -> ../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0
    class/block/nvme0n1 -> ../../devices/pci0000:00/.../nvme/nvme0/nvme0n1
    block/nvme0n1       -> ../devices/pci0000:00/.../nvme/nvme0/nvme0n1
    class/net/eth0      -> ../../devices/pci0000:00/.../0000:41:00.0/net/eth0
    class/net/br0       -> ../../devices/virtual/net/br0

sysfs-rules.rst says class/block holds disks and partitions in one flat list and that
/sys/block is the legacy view, so class/block is read first and /sys/block only when it
is missing. Every entry is resolved once; an entry whose target vanished between the
listing and the resolve (hot-unplug in the middle of a pass) is skipped, not counted;
an entry that cannot be resolved for another reason (EACCES, ELOOP) is counted.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from cephnode_exporter.devices.model import (
    DeviceClass,
    DeviceSource,
    DiscoveryError,
    Enumeration,
    RawEntry,
    RawScan,
    assemble,
    nearest_pci,
)
from cephnode_exporter.hostfs import HostFS, ParseError
from cephnode_exporter.hostfs.names import CONTROLLER_RE, NAMESPACE_RE, PATH_RE, utf8_name


class SysfsDevices(DeviceSource):
    """Enumerate NVMe controllers, NVMe namespaces and network interfaces from
    ``fs.sysfs``; the test and container implementation of the adapter."""

    backend = "sysfs"

    def __init__(self, fs: HostFS) -> None:
        self.fs = fs

    def enumerate(self) -> Enumeration:
        # Resolved once per pass: the root may itself be a symlink (a bind mount path).
        root = os.path.realpath(self.fs.sysfs)
        scan = RawScan()
        walk = _Walk(root, scan.errors)
        scan.controllers = walk.entries(
            os.path.join(root, "class", "nvme"), DeviceClass.NVME, CONTROLLER_RE.match
        )
        block = os.path.join(root, "class", "block")
        if not os.path.isdir(block):
            block = os.path.join(root, "block")
        scan.disks = walk.entries(
            block, DeviceClass.BLOCK, lambda n: NAMESPACE_RE.match(n) or PATH_RE.match(n)
        )
        scan.nets = walk.entries(
            os.path.join(root, "class", "net"), DeviceClass.NET, lambda n: True
        )
        return assemble(scan)


class _Walk:
    """Lists one class directory and resolves its entries, collecting errors."""

    def __init__(self, root: str, errors: list[DiscoveryError]) -> None:
        self.root = root
        self.virtual = os.path.join(root, "devices", "virtual") + os.sep
        self.errors = errors

    def entries(
        self, class_dir: str, kind: DeviceClass, want: Callable[[str], object]
    ) -> list[RawEntry]:
        try:
            names = sorted(os.listdir(class_dir))
        except FileNotFoundError:
            return []  # no such class on this host (no NVMe driver loaded)
        except OSError as exc:
            self._error(kind, exc, class_dir)
            return []
        out = []
        for name in names:
            if not want(name):
                continue
            try:
                utf8_name(name, os.path.join(class_dir, name))
            except ParseError as exc:  # could be no label value: counted, left out
                self.errors.append(DiscoveryError(kind, str(exc)))
                continue
            entry = self._entry(class_dir, kind, name)
            if entry is not None:
                out.append(entry)
        return out

    def _entry(self, class_dir: str, kind: DeviceClass, name: str) -> RawEntry | None:
        link = os.path.join(class_dir, name)
        # One readlink and one stat instead of os.path.realpath's lstat per component
        # (a PCI path is ten deep): class links are relative and point straight into
        # devices/, whose directories are never symlinks themselves.
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            return None  # gone since the listing
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                self._error(kind, exc, link)
                return None
            target = name  # not a symlink: a plain directory (or file) in the class dir
        path = os.path.normpath(os.path.join(class_dir, target))
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None  # dangling: the device went away after the listing
        except OSError as exc:  # ELOOP, EACCES on a component
            self._error(kind, exc, link)
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None  # a class attribute such as class/net/bonding_masters
        rel = os.path.relpath(path, self.root).split(os.sep)
        parent = rel[-2] if len(rel) >= 2 else None
        return RawEntry(
            name=name,
            syspath=path,
            parent=parent,
            pci=nearest_pci(rel[:-1]),
            virtual=(path + os.sep).startswith(self.virtual),
        )

    def _error(self, kind: DeviceClass, exc: OSError, path: str) -> None:
        reason = exc.strerror or type(exc).__name__
        self.errors.append(DiscoveryError(kind, f"{path}: {reason}"))
