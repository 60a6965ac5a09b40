"""From an OSD's data directory to the disks under it: ``block`` link, device-mapper,
partitions, down to the NVMe namespace and its controller.

The path, for an OSD that ceph-volume made (``ceph-volume lvm prepare``, the default since
Luminous, and what cephadm runs):

1. ``<osd_data>/block`` is a symlink to the logical volume, ``/dev/ceph-<vg uuid>/
   osd-block-<osd fsid>`` (ceph-volume names the VG ``ceph-<uuid>`` and the LV
   ``osd-block-<osd fsid>``). A BlueStore OSD made with ``bluestore_block_path`` (the test
   cluster's) links to a plain file instead: it has no disk of its own, which is no error.
2. udev links ``/dev/<vg>/<lv>`` and ``/dev/mapper/<vg>-<lv>`` (dashes doubled) to
   ``../dm-<minor>``; the node ``/dev/dm-<minor>`` is a block device whose ``st_rdev``
   names ``/sys/dev/block/<major>:<minor>`` (Documentation/ABI/testing/sysfs-dev).
3. A device-mapper device lists what it is built on in ``slaves/`` (dm-crypt on LVM is
   dm on dm); a partition has a ``partition`` file and sits in its disk's directory
   (Documentation/ABI/stable/sysfs-block).
4. An NVMe namespace ``nvmeXnY`` sits in its controller's directory ``.../nvme/nvmeX``;
   with native multipath the visible disk sits under ``nvme-subsystem/nvme-subsysN``, and
   the subsystem directory links every controller that reaches it (drivers/nvme/host/
   core.c ``nvme_init_subsystem``).

Symlinks are resolved as if chrooted at ``--path.rootfs``: ``/dev/...`` targets stay in
the host's tree when the exporter runs in a container or against a fixture. When the
resolved path does not exist there (a fixture cannot make device nodes: mknod needs
CAP_MKNOD) a path ``/dev/<name>`` is mapped by name, as devtmpfs names every node after
the kernel's device (``/dev/dm-3`` is ``/sys/class/block/dm-3``).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

from cephnode_exporter.hostfs import HostFS, ParseError, read_int, read_text
from cephnode_exporter.hostfs.names import CONTROLLER_RE, natural_key
from cephnode_exporter.hostfs.pci import parse_numa_node

# The kernel gives up after 40 links in one lookup (MAXSYMLINKS, include/linux/namei.h).
MAX_LINKS = 40
# dm on dm on partition: three levels are common (dm-crypt on LVM on a partition); eight
# bounds a loop that sysfs should never show.
MAX_DEPTH = 8


class NoDevice(Exception):
    """The OSD has no block device of its own (no ``block`` link, or a link to a file):
    a fact, not an error."""


@dataclass(frozen=True)
class Disk:
    """A whole disk under an OSD: ``name`` as the kernel (and node_exporter's
    ``device`` label) names it, its NVMe controllers and their NUMA nodes (-1: the
    firmware does not say; None: unreadable)."""

    name: str
    controllers: tuple[str, ...] = ()
    numa_nodes: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class OSDBlock:
    """The ``block`` link's target (in the host's tree), the disks below it, and the
    target's own sysfs directory (what hostfs/dmcrypt.py walks)."""

    target: str
    disks: tuple[Disk, ...]
    sysdir: str = field(default="", compare=False)


def resolve_in_root(root: str, path: str) -> str:
    """``path`` with every symlink followed, absolute link targets taken relative to
    ``root`` (like a lookup inside ``chroot(root)``); returns the path under ``root``.

    A component that does not exist ends the resolution (the rest is appended as is);
    more than :data:`MAX_LINKS` links raise ``OSError(ELOOP)``.
    """
    pending = [p for p in path.split("/") if p]
    pending.reverse()
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        try:
            target = os.readlink(here)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # not a symlink
                done.append(part)
                continue
            if exc.errno == errno.ENOENT:
                done.append(part)
                done.extend(reversed([p for p in pending if p not in (".", "")]))
                break
            raise OSError(exc.errno, exc.strerror, here) from None
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
        if target.startswith("/"):
            done = []
        pending.extend(reversed([p for p in target.split("/") if p]))
    return os.path.join(root, *done)


def _sys_device(fs: HostFS, target: str) -> str | None:
    """The sysfs directory of the block device at ``target`` (a path under the rootfs)."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, target) from None
    if st is not None:
        if not stat.S_ISBLK(st.st_mode):
            return None
        link = fs.sys("dev", "block", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
        return os.path.realpath(link) if os.path.exists(link) else None
    # No such node in this tree: map /dev/<name> by the devtmpfs naming rule.
    dev_dir = os.path.join(fs.rootfs, "dev")
    if os.path.dirname(target) != os.path.normpath(dev_dir):
        return None
    candidate = fs.sys("class", "block", os.path.basename(target))
    return os.path.realpath(candidate) if os.path.exists(candidate) else None


def lower_devices(path: str) -> list[str]:
    """The sysfs directories of the devices a block device is stacked on (its ``slaves``,
    Documentation/ABI/stable/sysfs-block), in natural order; none for a plain disk."""
    slaves = os.path.join(path, "slaves")
    try:
        names = sorted(os.listdir(slaves), key=natural_key)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, slaves) from None
    return [os.path.realpath(os.path.join(slaves, name)) for name in names]


def _leaves(path: str, depth: int = 0) -> list[str]:
    """The whole disks a block device is built on (itself if it is one)."""
    if depth > MAX_DEPTH:
        raise OSError(errno.ELOOP, "device-mapper stack deeper than 8 levels", path)
    lower = lower_devices(path)
    if lower:
        out: list[str] = []
        for dev in lower:
            for leaf in _leaves(dev, depth + 1):
                if leaf not in out:
                    out.append(leaf)
        return out
    if os.path.exists(os.path.join(path, "partition")):
        return [os.path.dirname(path)]
    return [path]


def _controllers(disk_dir: str) -> tuple[str, ...]:
    """NVMe controllers of a namespace directory; () for other disks."""
    parent = os.path.dirname(disk_dir)
    name = os.path.basename(parent)
    if CONTROLLER_RE.match(name):
        return (name,)
    if name.startswith("nvme-subsys"):
        try:
            entries = os.listdir(parent)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, parent) from None
        return tuple(sorted((e for e in entries if CONTROLLER_RE.match(e)), key=natural_key))
    return ()


def _numa_node(fs: HostFS, controller: str) -> int | None:
    path = fs.sys("class", "nvme", controller, "numa_node")
    try:
        return parse_numa_node(read_text(path), path)
    except (OSError, ParseError):
        return None


def find_osd_block(fs: HostFS, osd_data: str) -> OSDBlock:
    """The disks under ``<osd_data>/block`` (``osd_data`` as the OSD reports it, an
    absolute path in the host's tree). Raises :class:`NoDevice` for an OSD without a
    block device of its own, OSError/ParseError when a file is unreadable."""
    if not osd_data.startswith("/"):
        raise NoDevice(f"osd_data {osd_data!r} is not an absolute path")
    link = os.path.join(osd_data, "block")
    if not os.path.lexists(os.path.join(resolve_in_root(fs.rootfs, osd_data), "block")):
        raise NoDevice(f"no {link} (not a BlueStore OSD, or its data directory is elsewhere)")
    target = resolve_in_root(fs.rootfs, link)
    shown = "/" + os.path.relpath(target, fs.rootfs)
    device = _sys_device(fs, target)
    if device is None:
        raise NoDevice(f"{link} -> {shown} is not a block device")
    disks = []
    for leaf in _leaves(device):
        controllers = _controllers(leaf)
        disks.append(
            Disk(
                os.path.basename(leaf),
                controllers,
                tuple(_numa_node(fs, c) for c in controllers),
            )
        )
    return OSDBlock(shown, tuple(disks), device)


# The kinds of an OSD's main data device, as Ceph's own default CRUSH device class names
# them: BlueStore::get_default_device_class() answers the block device's
# bluestore_bdev_type, which KernelDevice::collect_metadata (ceph/ceph
# src/blk/kernel/KernelDevice.cc) sets to "hdd" or "ssd" by the device's rotational flag
# and then to "nvme" when the disk has an NVMe controller (its device/device/vendor).
MEDIA = ("nvme", "hdd", "ssd", "unknown")


def block_media(fs: HostFS, block: OSDBlock | None) -> str:
    """``nvme`` when a disk under the OSD's block device has an NVMe controller, ``hdd``
    when a disk's ``/sys/block/<disk>/queue/rotational`` is 1, else ``ssd``; ``unknown``
    without a disk (memstore, a BlueStore on a file). Raises OSError/ParseError when a
    rotational flag is unreadable."""
    if block is None or not block.disks:
        return "unknown"
    if any(d.controllers for d in block.disks):
        return "nvme"
    for disk in block.disks:
        path = fs.sys("block", disk.name, "queue", "rotational")
        value = read_int(path)
        if value not in (0, 1):
            raise ParseError(path, f"rotational is {value}, not 0 or 1")
        if value == 1:
            return "hdd"  # the slowest disk decides (dm over mixed disks is rare)
    return "ssd"
