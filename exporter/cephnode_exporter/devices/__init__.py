"""Device discovery: NVMe controllers, NVMe namespaces and network interfaces, with hot-plug.

The nvme, iommu and net collectors ask one shared :class:`DeviceDiscovery` for the current
:class:`Snapshot` instead of listing sysfs themselves, so a drive or NIC that comes or goes
shows up in the next scrape without a restart. Two enumerators return the same records:
:class:`UdevDevices` (pyudev on the real /sys, production) and :class:`SysfsDevices` (any
HostFS tree: fixtures, containers). See docs/devices.md.

    discovery = devices.acquire(ctx.fs)         # in the collector's __init__
    snap = discovery.devices()                  # in read(): never waits for the monitor
    for ns in snap.nvme_namespaces: ...
    devices.release(discovery)                  # in close()
"""

from cephnode_exporter.devices.discovery import (
    DeviceDiscovery,
    DeviceEvent,
    DiscoveryStatus,
    EventStream,
    FixtureEvents,
    acquire,
    default_discovery,
    release,
)
from cephnode_exporter.devices.model import (
    NET,
    NVME_CONTROLLER,
    NVME_NAMESPACE,
    Device,
    DeviceClass,
    DeviceSource,
    DiscoveryError,
    Enumeration,
    NetInterface,
    NvmeController,
    NvmeNamespace,
    NvmePath,
    Snapshot,
)
from cephnode_exporter.devices.sysfs import SysfsDevices
from cephnode_exporter.devices.udev import UdevDevices, UdevEvents, choose_event_source

__all__ = [
    "NET",
    "NVME_CONTROLLER",
    "NVME_NAMESPACE",
    "Device",
    "DeviceClass",
    "DeviceDiscovery",
    "DeviceEvent",
    "DeviceSource",
    "DiscoveryError",
    "DiscoveryStatus",
    "Enumeration",
    "EventStream",
    "FixtureEvents",
    "NetInterface",
    "NvmeController",
    "NvmeNamespace",
    "NvmePath",
    "Snapshot",
    "SysfsDevices",
    "UdevDevices",
    "UdevEvents",
    "acquire",
    "choose_event_source",
    "default_discovery",
    "release",
]
