"""NVMe controllers and the block queues of their namespaces.

Controller attributes (``/sys/class/nvme/nvmeX/``, drivers/nvme/host/core.c, later
sysfs.c): ``model``, ``serial`` and ``firmware_rev`` are printed ``"%.*s\\n"`` with the
full width of the Identify Controller field, so they carry the drive's space padding (40,
20 and 8 characters); ``transport`` is the ops name ("pcie", "tcp", "rdma", "fc", "loop");
``queue_count`` counts the queues the driver set up, the admin queue included;
``numa_node`` is -1 when the platform does not say.

Namespace attributes (Documentation/ABI/stable/sysfs-block, block/blk-sysfs.c,
block/elevator.c, block/genhd.c): ``queue/scheduler`` lists the I/O schedulers with the
active one in brackets ("[none] mq-deadline ", or "mq-deadline kyber [none]" before 5.0),
or just "none" when the queue cannot have one; ``queue/wbt_lat_usec`` fails with EINVAL
when writeback throttling is not set up for the queue and reads 0 when it is disabled;
``inflight`` is "%8u %8u" (reads, writes); ``mq/<N>/`` is one directory per blk-mq
hardware context. A native multipath head has no request queue of its own:
:func:`read_block_queue` reads the request queue's settings from its path disks and the
disk's from the head (REQUEST_COUNTS below).

Temperature: drivers/nvme/host/hwmon.c registers an hwmon device named "nvme" under the
controller (``nvmeX/hwmonN``; the first kernels with it, 5.5 on, registered it under the
PCI function, ``<bdf>/hwmon/hwmonN``; both places are searched). ``temp1_input`` (the
Composite sensor, millidegrees Celsius) is computed from a SMART log page fetched from
the drive on every read, an admin command: the collector reads it only behind a flag.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from cephnode_exporter.hostfs import HostFS, ParseError, list_dir, parse_kernel_int, read_text
from cephnode_exporter.hostfs.names import CONTROLLER_RE, NAMESPACE_RE, PATH_RE
from cephnode_exporter.hostfs.pci import DeviceAttrs, is_gone, parse_numa_node

# Identify Controller strings are at most 40 bytes; bound the label value anyway.
MAX_ID_CHARS = 64
# Scheduler names are elevator_type names ("mq-deadline", "kyber", "bfq", "none").
_ELEVATOR_RE = re.compile(r"[a-z0-9_-]{1,32}")
# hwmon class device names: hwmon%d (drivers/hwmon/hwmon.c).
_HWMON_RE = re.compile(r"hwmon[0-9]+")
HWMON_NAME = "nvme"
# Block queue attribute values of real kernels fit easily; a bigger one is garbage.
MAX_QUEUE_VALUE = 1 << 40


def parse_id_string(text: str, path: str = "id string") -> str:
    """An Identify Controller string without its space padding; must be printable."""
    text = text.strip()
    if len(text) > MAX_ID_CHARS or not text.isprintable():
        raise ParseError(path, f"not an identify string: {text[:40]!r}")
    return text


def parse_count(text: str, path: str = "count") -> int:
    """A non-negative integer attribute (queue_count, nr_requests, read_ahead_kb, ...)."""
    return parse_kernel_int(text, path, 0, MAX_QUEUE_VALUE, "a count")


def parse_scheduler(text: str, path: str = "scheduler") -> str:
    """The active I/O scheduler: the bracketed entry of ``queue/scheduler``.

    "none" alone (no brackets) is what elv_iosched_show() prints for a queue that cannot
    have a scheduler, which is the same as running none.
    """
    tokens = text.split()
    if tokens == ["none"]:
        return "none"
    active = [t[1:-1] for t in tokens if t.startswith("[") and t.endswith("]")]
    names = [t.strip("[]") for t in tokens]
    if len(active) != 1 or not all(_ELEVATOR_RE.fullmatch(n) for n in names):
        raise ParseError(path, f"no single [active] scheduler in {text[:60]!r}")
    return active[0]


def parse_inflight(text: str, path: str = "inflight") -> tuple[int, int]:
    """(reads, writes) in flight, from block/genhd.c ``part_inflight_show``."""
    fields = text.split()
    # "%8u": ASCII digits of an unsigned int (isdigit() alone takes "²" and 5000 digits).
    if len(fields) != 2 or not all(f.isascii() and f.isdigit() and len(f) <= 10 for f in fields):
        raise ParseError(path, f"not two counts: {text[:40]!r}")
    return int(fields[0]), int(fields[1])


def parse_millicelsius(text: str, path: str = "temp1_input") -> float:
    return parse_kernel_int(text, path, what="a temperature") / 1000


@dataclass(frozen=True)
class ControllerIdentity:
    """What does not change while a controller exists: read once per device set.

    A field is None when its file was unreadable or malformed (counted as an error), ""
    when the kernel has no such attribute.
    """

    model: str | None
    serial: str | None
    firmware: str | None
    transport: str | None
    numa_node: int | None

    @property
    def complete(self) -> bool:
        return None not in (self.model, self.serial, self.firmware, self.transport)


def read_identity(attrs: DeviceAttrs) -> ControllerIdentity:
    """The controller's identify strings and NUMA node (``attrs`` is the controller dir)."""
    fields = {}
    for name in ("model", "serial", "firmware_rev", "transport"):
        before = len(attrs.errors)
        value = attrs.get(name, parse_id_string)
        if value is None and len(attrs.errors) == before:
            value = ""  # absent attribute: older kernel
        fields[name] = value
    return ControllerIdentity(
        model=fields["model"],
        serial=fields["serial"],
        firmware=fields["firmware_rev"],
        transport=fields["transport"],
        numa_node=attrs.get("numa_node", parse_numa_node),
    )


def find_hwmon(ctrl_dir: str, pci_dir: str | None) -> str | None:
    """The controller's NVMe hwmon directory, under the controller (current kernels) or
    under its PCI function (older ones); None without one (CONFIG_NVME_HWMON off, or the
    first SMART log read failed)."""
    candidates = [ctrl_dir]
    if pci_dir is not None:
        candidates.append(os.path.join(pci_dir, "hwmon"))
    for base in candidates:
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            if not _HWMON_RE.fullmatch(name):
                continue
            path = os.path.join(base, name)
            try:
                if read_text(os.path.join(path, "name")) == HWMON_NAME:
                    return path
            except (OSError, ParseError):  # unreadable, or larger than any hwmon name
                continue
    return None


@dataclass(frozen=True)
class BlockQueue:
    """A namespace's block queue settings and in-flight requests; None fields were not
    readable (counted) or do not exist on this kernel."""

    scheduler: str | None = None
    nr_requests: int | None = None
    rq_affinity: int | None = None
    nomerges: int | None = None
    io_poll: int | None = None
    wbt_lat_usec: int | None = None
    read_ahead_kb: int | None = None
    max_sectors_kb: int | None = None
    hw_queues: int | None = None
    inflight_reads: int | None = None
    inflight_writes: int | None = None


# queue/<attribute> read as a count, in BlockQueue field order, by the queue they belong
# to. Under native NVMe multipath the visible head is a bio-based disk (drivers/nvme/host/
# multipath.c nvme_mpath_alloc_disk: blk_alloc_disk, ->submit_bio) and the hidden path
# disks hold the blk-mq request queues:
#   - the request queue's settings: block/blk-sysfs.c groups queue/nr_requests, scheduler,
#     rq_affinity, io_timeout and wbt_lat_usec as "request-based queue attributes that
#     are not relevant for bio-based queues" (blk_mq_queue_attrs; since 6.11 a bio-based
#     queue does not show them, before it printed "none" and defaults); merging (nomerges),
#     polling (io_poll, the poll hardware contexts) and mq/<N> also happen only there;
#   - the disk's: read_ahead_kb is the backing_dev_info's ra_pages, and only the visible
#     disk has a registered bdi that page cache reads go through (block/genhd.c registers
#     none for GENHD_FL_HIDDEN disks); max_sectors_kb of the head is stacked from its
#     paths' limits and splits the bios first; inflight counts the I/O accounted on the
#     head (nvme_mpath_start_request), what node_exporter's diskstats of nvmeXnY shows.
REQUEST_COUNTS = ("nr_requests", "rq_affinity", "nomerges", "io_poll")
DISK_COUNTS = ("read_ahead_kb", "max_sectors_kb")
QUEUE_COUNTS = (*REQUEST_COUNTS, *DISK_COUNTS)


def read_wbt_lat_usec(attrs: DeviceAttrs) -> int | None:
    """``queue/wbt_lat_usec``; None when the queue has no writeback throttling (the
    kernel answers EINVAL, block/blk-sysfs.c ``queue_wb_lat_show``), not an error."""
    path = attrs.path("queue/wbt_lat_usec")
    try:
        text = read_text(path)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        if is_gone(exc):
            attrs.missing = True
        else:
            attrs.errors.add(exc)
        return None
    except ParseError as exc:  # larger than MAX_READ_BYTES: not an attribute the kernel wrote
        attrs.errors.add(exc)
        return None
    try:
        value = parse_kernel_int(text, path, what="a latency")
    except ParseError as exc:
        attrs.errors.add(exc)
        return None
    # Reads never print a negative value today; -1 is what one writes to restore the
    # default. Treat a negative read like "no throttling" rather than a latency.
    return value if value >= 0 else None


def count_hw_queues(attrs: DeviceAttrs) -> int | None:
    """Directories ``mq/0``, ``mq/1``, ...: the blk-mq hardware contexts.

    ``mq/`` holds only those directories (block/blk-mq-sysfs.c), and sysfs gives a
    directory two links plus one per subdirectory (fs/kernfs/inode.c,
    ``kernfs_refresh_inode``), as ext4 and tmpfs do: one ``stat`` instead of a listing
    every scrape. A link count below two (a file system that does not count them) or
    anything but a directory goes to the listing, which names the error.
    """
    path = attrs.path("mq")
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_nlink >= 2:
            return st.st_nlink - 2
        names = os.listdir(path)
    except OSError as exc:
        if is_gone(exc):
            attrs.missing = True
        else:
            attrs.errors.add(OSError(exc.errno, exc.strerror, path))
        return None
    return sum(1 for n in names if n.isascii() and n.isdigit())


# The kept attributes read_block_queue reads, in one batch, by part.
_REQUEST_BATCH = (*(f"queue/{name}" for name in REQUEST_COUNTS), "queue/scheduler")
_DISK_BATCH = (*(f"queue/{name}" for name in DISK_COUNTS), "inflight")


def read_block_queue(attrs: DeviceAttrs, *, request: bool = True, disk: bool = True) -> BlockQueue:
    """The queue settings of one disk (``attrs`` is the disk's directory): the request
    queue's (``request``: scheduler, nr_requests, rq_affinity, nomerges, io_poll,
    wbt_lat_usec, mq/) and the disk's (``disk``: read_ahead_kb, max_sectors_kb,
    inflight). A plain namespace has both; a multipath head only the disk's, each of
    its paths only the request queue's (see REQUEST_COUNTS). What is not read is None."""
    attrs.prefetch((*(_REQUEST_BATCH if request else ()), *(_DISK_BATCH if disk else ())))
    names = (*(REQUEST_COUNTS if request else ()), *(DISK_COUNTS if disk else ()))
    counts = {name: attrs.get(f"queue/{name}", parse_count) for name in names}
    inflight = attrs.get("inflight", parse_inflight) if disk else None
    return BlockQueue(
        scheduler=attrs.get("queue/scheduler", parse_scheduler) if request else None,
        wbt_lat_usec=read_wbt_lat_usec(attrs) if request else None,
        hw_queues=count_hw_queues(attrs) if request else None,
        inflight_reads=inflight[0] if inflight else None,
        inflight_writes=inflight[1] if inflight else None,
        **counts,
    )


# ----------------------------------------------------------------------------- hidden
# A node whose NVMe the exporter cannot see must not read as a node without NVMe. These
# are asked only when discovery found no controller (no namespace): never per device.

NVME_CLASS = ("class", "nvme")


def _some(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def block_dir(fs: HostFS) -> tuple[str, ...]:
    """The block class directory discovery lists: ``class/block``, or the legacy
    ``block`` without it (Documentation/admin-guide/sysfs-rules.rst; devices/sysfs.py)."""
    return ("class", "block") if os.path.isdir(fs.sys("class", "block")) else ("block",)


def nvme_disks(fs: HostFS) -> list[str]:
    """The NVMe disks (namespaces and multipath path disks) the block class lists."""
    names = _listing(fs.sys(*block_dir(fs)))
    return [n for n in names if NAMESPACE_RE.match(n) or PATH_RE.match(n)]


def _listing(path: str) -> list[str]:
    """A directory's entries; [] when absent or unreadable (the caller's discovery
    counted that error: here it only cannot corroborate)."""
    try:
        return list_dir(path)
    except OSError:
        return []


def controllers_hidden(fs: HostFS, disks: Sequence[str] | None = None) -> str | None:
    """Why ``class/nvme`` shows no controller although the node may have some: a mount
    over it (hostfs/mounts.py), or NVMe disks in the block class (``disks``, else listed
    here), which exist only below a controller (drivers/nvme/host/core.c nvme_alloc_ns
    adds each namespace's disk under ``ctrl->device``). None when ``class/nvme`` lists a
    controller (fabrics ones too) or nothing says the node has NVMe."""
    why = fs.sys_hidden(*NVME_CLASS)
    if why is not None:
        return why
    path = fs.sys(*NVME_CLASS)
    try:
        if any(CONTROLLER_RE.match(n) for n in list_dir(path)):
            return None
    except OSError as exc:
        return f"{path} is unreadable: {exc.strerror or exc}"
    found = list(disks) if disks is not None else nvme_disks(fs)
    if not found:
        return None
    return (
        f"{fs.sys(*NVME_CLASS)} is hidden: it lists no controller, but NVMe disks exist "
        f"({_some(found)}); a mask or a partial sysfs, not a node without NVMe"
    )


def namespaces_hidden(fs: HostFS, controller_dirs: Sequence[str]) -> str | None:
    """Why the block class shows no NVMe namespace although there may be some: a mount
    over it, or a namespace (or multipath path) directory below a controller, where the
    driver adds them (nvme_alloc_ns). A controller without a namespace (none created
    yet, or detached) is no evidence: None then."""
    where = block_dir(fs)
    why = fs.sys_hidden(*where)
    if why is not None:
        return why
    try:
        list_dir(fs.sys(*where))
    except OSError as exc:
        return f"{fs.sys(*where)} is unreadable: {exc.strerror or exc}"
    for ctrl in controller_dirs:
        below = [n for n in _listing(ctrl) if NAMESPACE_RE.match(n) or PATH_RE.match(n)]
        if below:
            return (
                f"{fs.sys(*where)} is hidden: it lists no NVMe disk, but "
                f"{ctrl} has {_some(below)}; a mask or a partial sysfs"
            )
    return None
