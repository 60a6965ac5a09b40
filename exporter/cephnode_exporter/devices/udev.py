"""The production implementation: pyudev enumeration and a netlink uevent monitor.

pyudev (through libudev) always reads the real /sys, which is why it sits behind the
adapter and tests use :class:`~cephnode_exporter.devices.sysfs.SysfsDevices`.

Event sources (NETLINK_KOBJECT_UEVENT multicast groups, systemd
src/libsystemd/sd-device/device-monitor-private.h): group 1 "kernel" carries the raw
kernel uevents, group 2 "udev" the events udevd re-broadcasts once its rules ran (NIC
renames done, udev database written). libudev joins group 2 only when udevd looks alive
(src/libsystemd/sd-device/device-monitor.c, device_monitor_new_full: /run/udev/control
exists, or /dev is a devtmpfs); on a host with a devtmpfs but no udevd it joins and then
hears nothing. :func:`choose_event_source` therefore takes "udev" only when
/run/udev/control exists and falls back to "kernel" otherwise.

Both groups can be joined without privileges: lib/kobject_uevent.c creates the kernel
socket with NL_CFG_F_NONROOT_RECV, which net/netlink/af_netlink.c (netlink_bind) checks
for the whole protocol. Sending to the groups needs CAP_NET_ADMIN, and libudev drops
messages whose sender is not uid 0, so an unprivileged process cannot fake an event; a
forged one would cost a re-enumeration anyway, nothing more.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

import pyudev

from cephnode_exporter.devices.model import (
    DeviceClass,
    DeviceSource,
    DiscoveryError,
    Enumeration,
    RawEntry,
    RawScan,
    assemble,
)
from cephnode_exporter.hostfs.names import CONTROLLER_RE, NAMESPACE_RE, PATH_RE

UDEV_CONTROL = "/run/udev/control"

# (subsystem, devtype) pairs the monitor listens to: NVMe controllers, whole disks (the
# namespaces; partitions are DEVTYPE=partition) and network interfaces.
MONITOR_FILTERS: tuple[tuple[str, str | None], ...] = (
    ("nvme", None),
    ("block", "disk"),
    ("net", None),
)


def choose_event_source(udev_control: str = UDEV_CONTROL) -> str:
    """``udev`` when udevd runs (its control socket exists), else ``kernel``."""
    return "udev" if os.path.exists(udev_control) else "kernel"


class UdevDevices(DeviceSource):
    """Enumerate the real /sys through pyudev (libudev's sd-device enumerator)."""

    backend = "udev"

    def __init__(self, context: pyudev.Context | None = None) -> None:
        self._context = context if context is not None else pyudev.Context()
        # libudev objects are not thread-safe; the monitor thread and a scrape may both
        # enumerate (fallback mode), so one pass at a time.
        self._lock = threading.Lock()

    def enumerate(self) -> Enumeration:
        with self._lock:
            scan = RawScan()
            self._collect(scan, scan.controllers, "nvme", None, CONTROLLER_RE.match)
            self._collect(
                scan,
                scan.disks,
                "block",
                "disk",
                lambda n: NAMESPACE_RE.match(n) or PATH_RE.match(n),
            )
            self._collect(scan, scan.nets, "net", None, lambda n: True)
            return assemble(scan)

    def _collect(
        self,
        scan: RawScan,
        out: list[RawEntry],
        subsystem: str,
        devtype: str | None,
        want: Callable[[str], object],
    ) -> None:
        matches = {"subsystem": subsystem}
        if devtype is not None:
            matches["DEVTYPE"] = devtype
        try:
            devices = list(self._context.list_devices(**matches))
        except (OSError, pyudev.DeviceNotFoundError) as exc:
            scan.errors.append(
                DiscoveryError(DeviceClass(subsystem), f"udev enumeration of {subsystem}: {exc}")
            )
            return
        for device in devices:
            try:
                name = device.sys_name
                if not want(name):
                    continue
                parent = device.parent
                pci = device.find_parent("pci")
                out.append(
                    RawEntry(
                        name=name,
                        syspath=device.sys_path,
                        parent=parent.sys_name if parent is not None else None,
                        pci=pci.sys_name if pci is not None else None,
                        virtual=device.device_path.startswith("/devices/virtual/"),
                    )
                )
            except pyudev.DeviceNotFoundError:
                continue  # removed while we looked at it
            except UnicodeDecodeError:
                # pyudev decodes names strictly; a name that is not UTF-8 could be no
                # label value (hostfs.names.utf8_name): counted, left out.
                scan.errors.append(
                    DiscoveryError(
                        DeviceClass(subsystem), f"{subsystem}: a device name is not valid UTF-8"
                    )
                )
            except OSError as exc:
                where = getattr(device, "sys_path", subsystem)
                scan.errors.append(DiscoveryError(DeviceClass(subsystem), f"{where}: {exc}"))


class UdevEvents:
    """A started pyudev netlink monitor, as an event stream for the discovery thread."""

    def __init__(self, source: str, context: pyudev.Context | None = None) -> None:
        if source not in ("udev", "kernel"):
            raise ValueError(f"unknown event source {source!r}")
        self.source = source
        context = context if context is not None else pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(context, source=source)
        for subsystem, devtype in MONITOR_FILTERS:
            monitor.filter_by(subsystem, device_type=devtype)
        monitor.start()  # binds the socket; events from here on are queued for us
        self._monitor: pyudev.Monitor | None = monitor

    def fileno(self) -> int:
        if self._monitor is None:
            raise ValueError("event stream closed")
        return int(self._monitor.fileno())

    def receive(self) -> int:
        """Drain queued events without blocking; return how many matched the filters.

        ENOBUFS means the socket buffer overflowed and events were dropped
        (netlink_overrun): reported as one event, because the answer to any number of
        lost events is the same re-enumeration.
        """
        if self._monitor is None:
            raise ValueError("event stream closed")
        count = 0
        while True:
            try:
                device = self._monitor.poll(timeout=0)
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    return count + 1
                raise
            if device is None:
                return count
            count += 1

    def close(self) -> None:
        # pyudev has no close(): libudev closes the socket when the last reference goes
        # (Monitor.__del__ -> udev_monitor_unref). Closing the fd here would let libudev
        # close a reused descriptor number later.
        self._monitor = None
