"""The system-wide PM QoS CPU latency limit.

``/dev/cpu_dma_latency`` (Documentation/power/pm_qos_interface.rst) returns the current
aggregate limit as a native-endian s32 in microseconds; the cpuidle governors never pick
a state whose exit latency exceeds it. The device is root-only (mode 0600), so an
unprivileged exporter cannot read it and reports nothing rather than a guess. Opening it
registers a request at the default value, which constrains nothing; it is closed at once.
"""

from __future__ import annotations

import struct

from cephnode_exporter.hostfs import HostFS, ParseError, read_bytes


def read_cpu_latency_limit_us(fs: HostFS) -> int | None:
    """The limit in microseconds, or None when the device is absent or not readable."""
    path = fs.root("dev", "cpu_dma_latency")
    try:
        data = read_bytes(path, char_device=True)  # a misc character device
    except (FileNotFoundError, PermissionError):
        return None
    if len(data) != 4:
        raise ParseError(path, f"expected 4 bytes, got {len(data)}")
    return int(struct.unpack("=i", data)[0])
