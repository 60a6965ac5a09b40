"""Network interfaces: the sysfs attributes of /sys/class/net/<name> and the ring sizes.

Formats (torvalds/linux net/core/net-sysfs.c, Documentation/ABI/testing/sysfs-class-net):
  - ``mtu``: "%d\\n" of dev->mtu.
  - ``speed``: "%d\\n" of the link speed in Mb/s. SPEED_UNKNOWN (u32 -1, link down on
    most drivers) prints as -1; reading fails with EINVAL when the interface is not
    running or its driver has no link settings (lo, bridges): both mean "unknown".
  - ``operstate``: one of the RFC 2863 names in ``operstates[]``.
  - ``device``: link to the parent device (the PCI function of a PCI NIC; virtioN of a
    virtio NIC), absent for virtual interfaces; ``device/driver`` names the driver.
  - ``master``: link to the bond or bridge the interface is enslaved to, if any.
  - ``lower_<name>``: a link per lower device of a bond (its slaves), bridge (its ports),
    VLAN or macvlan (the device it sits on) (net/core/dev.c netdev_adjacent_sysfs_add,
    "lower_%s" to the lower device's own directory, made only when both are in the same
    network namespace; renamed with the device, netdev_adjacent_rename_links); read for
    virtual interfaces, to find the ports under a Ceph address and the MTUs on the way.
    An entry that is not a link, leads nowhere or to a device of another name is no link
    the kernel makes: the interface's ``lower_error`` says so and the checks judge nothing
    below it.
  - ``uevent``: ``DEVTYPE=<name>`` of the device type (drivers/base/core.c dev_uevent,
    before the class's INTERFACE= and IFINDEX= lines), "vlan" for every 802.1Q VLAN
    (net/8021q/vlan_dev.c vlan_setup: SET_NETDEV_DEVTYPE(dev, &vlan_type)), "bond" and
    "bridge" for those. Read only of a virtual interface without any ``lower_`` link: a
    VLAN always sits on a device, so one without the link (its device in another network
    namespace, or the link gone) has a path below that cannot be followed.
  - ``numa_node`` of the PCI function (drivers/pci/pci-sysfs.c): -1 when the firmware
    gives no proximity for it.

As every device reader of hostfs, :func:`read_interface` takes the interface's resolved
sysfs directory; its name, PCI function and kind come from device discovery
(:mod:`cephnode_exporter.devices`). An interface that disappears while it is being read
(hot-unplug, rename) is skipped without counting an error, like discovery does.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cephnode_exporter.hostfs import ParseError, ReadErrors, parse_kernel_int, read_text
from cephnode_exporter.hostfs.ethtool import RingParam, RingReader
from cephnode_exporter.hostfs.names import utf8_name
from cephnode_exporter.hostfs.pci import parse_numa_node, pci_function_dir

# net/core/net-sysfs.c operstates[] (IF_OPER_* of include/uapi/linux/if.h).
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
# The states in which no frame can pass; "unknown" is what lo and many virtual drivers
# report while working, so it does not count as down.
LINK_DOWN = frozenset({"notpresent", "down", "lowerlayerdown"})

RINGS_OK = "ok"
RINGS_UNSUPPORTED = "unsupported"  # EOPNOTSUPP: the driver has no get_ringparam
RINGS_ERROR = "error"
RINGS_NOT_READ = "not_read"  # virtual interfaces: rings are a property of the port

T = TypeVar("T")

INT_MAX = 2**31 - 1


class Vanished(Exception):
    """The interface went away while it was read; skip it silently."""


@dataclass(frozen=True)
class Interface:
    """What the net collector knows about one interface after one read."""

    name: str
    virtual: bool
    pci: str | None
    mtu: int | None  # bytes; None: unreadable
    operstate: str | None
    speed_mbps: int | None  # None: unknown (link down, no link settings) or not read
    numa_node: int | None  # -1: no NUMA affinity known; None: not read or no PCI function
    driver: str | None
    master: str | None  # bond or bridge this interface is enslaved to
    rings: RingParam | None = None
    rings_state: str = RINGS_NOT_READ
    rings_error: str | None = None
    # Virtual interfaces only: the devices right below (bond slaves, a VLAN's device).
    lower: tuple[str, ...] = ()
    # Virtual interfaces only: why a lower_<name> entry could not be followed (the
    # devices below are then unknown); None when every entry was a good link.
    lower_error: str | None = None
    # The devices right above (a port's bond, a bond's VLANs), from upper_<name>: the
    # kernel makes each upper_ link with its lower_ twin, so one without the other
    # means a lower link is missing.
    upper: tuple[str, ...] = ()
    # Virtual interfaces without any lower_ link only: the DEVTYPE of their uevent
    # ("vlan": a device below is expected; "" when there is none, or not read); None
    # when uevent was unreadable (whether a device lies below is then unknown).
    devtype: str | None = ""

    @property
    def link_down(self) -> bool:
        return self.operstate in LINK_DOWN


def parse_mtu(text: str, path: str = "mtu") -> int:
    """dev->mtu, an unsigned int that dev_validate_mtu() keeps within 0..INT_MAX
    (net/core/dev.c), printed "%d"."""
    return parse_kernel_int(text, path, 0, INT_MAX, "an MTU")


def parse_speed(text: str, path: str = "speed") -> int | None:
    """Link speed in Mb/s; None for SPEED_UNKNOWN (-1). The u32 is printed "%d"."""
    speed = parse_kernel_int(text, path, -1, INT_MAX, "a speed")
    return None if speed == -1 else speed


# Device type names are short kernel identifiers ("vlan", "bond", "bridge", "wlan").
_DEVTYPE_RE = re.compile(r"[a-z0-9_-]{1,32}")


def parse_devtype(text: str, path: str = "uevent") -> str:
    """The ``DEVTYPE`` of a uevent file, "" when it has none (KEY=value lines,
    drivers/base/core.c dev_uevent; lib/kobject_uevent.c add_uevent_var)."""
    devtype = ""
    lines = text.splitlines()
    if not lines:
        raise ParseError(path, "empty: every device's uevent names at least its interface")
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise ParseError(path, f"not KEY=value: {line[:40]!r}")
        if key == "DEVTYPE":
            if not _DEVTYPE_RE.fullmatch(value):
                raise ParseError(path, f"not a device type: {value[:40]!r}")
            devtype = value
    return devtype


def parse_operstate(text: str, path: str = "operstate") -> str:
    state = text.strip()
    if state not in OPERSTATES:
        raise ParseError(path, f"unknown operstate {state[:40]!r}")
    return state


class _Reader:
    """Reads one interface's attributes; errors go to ``errors`` unless it vanished."""

    def __init__(self, syspath: str, name: str, errors: ReadErrors) -> None:
        self.syspath = syspath
        self.name = name
        self.errors = errors

    def gone(self) -> bool:
        return not os.path.isdir(self.syspath)

    def attr(
        self,
        path: str,
        parse: Callable[[str, str], T],
        *,
        einval_unknown: bool = False,
        optional: bool = False,
    ) -> T | None:
        try:
            return parse(read_text(path), path)
        except FileNotFoundError as exc:
            if self.gone():
                raise Vanished from None
            if not optional:
                self.errors.add(exc)
        except OSError as exc:
            if exc.errno == errno.ENODEV and self.gone():
                raise Vanished from None
            if not (einval_unknown and exc.errno == errno.EINVAL):
                self.errors.add(exc)
        except ParseError as exc:
            self.errors.add(exc)
        return None

    def link_name(self, rel: str) -> str | None:
        """Basename of a symlink's target (driver, master); None when there is none."""
        path = os.path.join(self.syspath, rel)
        try:
            return utf8_name(os.path.basename(os.readlink(path)), path)
        except ParseError as exc:
            self.errors.add(exc)
            return None
        except FileNotFoundError:
            if self.gone():
                raise Vanished from None
            return None
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # not a symlink
                return None
            self.errors.add(exc)
            return None

    def adjacent(self) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
        """Names of the ``lower_<name>`` links and of the ``upper_<name>`` ones, sorted,
        and why a lower link could not be followed (None when all could); each bad
        entry is also a read error."""
        try:
            names = sorted(os.listdir(self.syspath))
        except FileNotFoundError:
            raise Vanished from None
        except OSError as exc:
            err = OSError(exc.errno, exc.strerror, self.syspath)
            self.errors.add(err)
            return (), (), f"{self.syspath}: {exc.strerror}"
        upper = []
        for n in names:
            if n.startswith("upper_"):
                try:
                    path = os.path.join(self.syspath, n)
                    upper.append(utf8_name(n[len("upper_") :], path))
                except ParseError as exc:
                    self.errors.add(exc)
        lower = []
        problems = []
        for n in names:
            if not n.startswith("lower_"):
                continue
            path = os.path.join(self.syspath, n)
            try:
                name = utf8_name(n[len("lower_") :], path)
            except ParseError as exc:
                self.errors.add(exc)
                problems.append(str(exc))
                continue
            why = self._bad_lower(path, name)
            if why is not None:
                self.errors.add(ParseError(path, why))
                problems.append(f"{n} of {self.name}: {why}")
                continue
            lower.append(name)
        return tuple(lower), tuple(upper), "; ".join(problems) or None

    def _bad_lower(self, path: str, name: str) -> str | None:
        """Why ``lower_<name>`` is not the kernel's link to device ``name``, or None."""
        try:
            target = os.readlink(path)
        except FileNotFoundError:
            if self.gone():
                raise Vanished from None
            return "gone while read"
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return "not a link"
            return exc.strerror or str(exc)
        base = os.path.basename(os.path.normpath(target))
        if base != name:
            return f"a link to {base[:40]}, not to {name}"
        if not os.path.isdir(path):
            if self.gone():
                raise Vanished from None
            return "a link to nothing"
        return None


def read_interface(
    syspath: str,
    name: str,
    rings: RingReader | None,
    errors: ReadErrors,
    *,
    pci: str | None = None,
    virtual: bool = False,
) -> Interface | None:
    """Read interface ``name`` from its resolved sysfs directory ``syspath``; ``pci`` is
    its nearest PCI function, ``virtual`` whether it has no device (both from discovery).
    ``rings`` None means a light read (MTU, operstate, master, upper devices and, of a
    virtual interface, its lower devices: what the checks need of a bond or VLAN); with a reader,
    also speed, NUMA node, driver and ring sizes. None when the interface vanished
    during the read."""
    r = _Reader(syspath, name, errors)
    base = syspath
    try:
        mtu = r.attr(os.path.join(base, "mtu"), parse_mtu)
        operstate = r.attr(os.path.join(base, "operstate"), parse_operstate)
        master = r.link_name("master")
        if rings is None:
            lower, upper, lower_error = r.adjacent()
            devtype: str | None = ""
            if not virtual:
                lower, lower_error = (), None
            elif not lower and lower_error is None:
                devtype = r.attr(os.path.join(base, "uevent"), parse_devtype)
            return Interface(
                name,
                virtual,
                pci,
                mtu,
                operstate,
                None,
                None,
                None,
                master,
                lower=lower,
                lower_error=lower_error,
                upper=upper,
                devtype=devtype,
            )
        speed = r.attr(os.path.join(base, "speed"), parse_speed, einval_unknown=True)
        numa: int | None = None
        pci_dir = None if pci is None else pci_function_dir(syspath, pci)
        if pci_dir is not None:
            # Absent without CONFIG_NUMA: not an error.
            numa = r.attr(os.path.join(pci_dir, "numa_node"), parse_numa_node, optional=True)
        driver = r.link_name(os.path.join("device", "driver"))
        ring_param, state, why = _read_rings(r, rings)
        _, upper, _ = r.adjacent()
    except Vanished:
        return None
    return Interface(
        name,
        virtual,
        pci,
        mtu,
        operstate,
        speed,
        numa,
        driver,
        master,
        ring_param,
        state,
        why,
        upper=upper,
    )


def _read_rings(r: _Reader, rings: RingReader) -> tuple[RingParam | None, str, str | None]:
    name = r.name
    try:
        param = rings.read(name)
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            if r.gone():
                raise Vanished from None
            # In sysfs but unknown to the ioctl: the exporter runs in another network
            # namespace than the one the sysfs tree shows (a container without the
            # host network), or a rename raced with this read.
            exc = OSError(
                errno.ENODEV,
                "no such interface in the exporter's network namespace "
                "(run it in the host network namespace)",
                f"SIOCETHTOOL {name}",
            )
        r.errors.add(exc)
        return None, RINGS_ERROR, exc.strerror or str(exc)
    except (ParseError, ValueError) as exc:
        r.errors.add(exc)
        return None, RINGS_ERROR, str(exc)
    if param is None:
        return None, RINGS_UNSUPPORTED, None
    return param, RINGS_OK, None
