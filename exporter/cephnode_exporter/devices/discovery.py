"""Hot-plug: a device snapshot kept current by a uevent monitor thread.

Thread model. One daemon thread per :class:`DeviceDiscovery` waits in ``poll()`` on the
event socket and a wake-up pipe. Events only mark the set dirty; once no event has
arrived for ``debounce`` seconds (or ``max_delay`` after the first one, so a storm cannot
postpone it forever) the thread re-enumerates once and publishes a new immutable
:class:`Snapshot` with a single reference assignment. Scrapes read that reference and
never wait for the thread, a lock it holds, or I/O it does.

Re-enumerating instead of applying events one by one makes the set self-healing: a lost
event (socket overrun, ENOBUFS), a rename (``move``), a spurious or forged event all end
in the same full, fresh listing.

Failure. When the monitor cannot be opened or fails later, the error is logged once, the
thread ends, :meth:`DeviceDiscovery.status` reports ``monitor_ok=False`` and
``discovery_source="rescan"``, and :meth:`DeviceDiscovery.devices` re-enumerates on the
calling (scrape) thread whenever its snapshot is older than ``rescan_interval``.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import math
import os
import select
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from cephnode_exporter.devices.model import DeviceSource, Snapshot
from cephnode_exporter.devices.sysfs import SysfsDevices
from cephnode_exporter.devices.udev import (
    UDEV_CONTROL,
    UdevDevices,
    UdevEvents,
    choose_event_source,
)
from cephnode_exporter.hostfs import HostFS
from cephnode_exporter.logs import kv

log = logging.getLogger(__name__)

RESCAN = "rescan"


class EventStream(Protocol):
    """A source of "something changed" notifications with a pollable descriptor."""

    source: str

    def fileno(self) -> int: ...

    def receive(self) -> int:
        """Consume what is queued without blocking; return the number of events."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DeviceEvent:
    action: str  # add, remove, change, move, bind, unbind
    subsystem: str  # nvme, block, net
    name: str


class FixtureEvents:
    """The adapter's fixture events: tests inject uevents (or a monitor failure) into a
    running :class:`DeviceDiscovery`, which handles them exactly like netlink ones."""

    source = "fixture"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: collections.deque[DeviceEvent] = collections.deque()
        self._failure: BaseException | None = None
        self._r: int | None = None
        self._w: int | None = None
        self.delivered: list[DeviceEvent] = []

    def open(self) -> FixtureEvents:
        with self._lock:
            if self._r is None:
                self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                if self._pending or self._failure is not None:
                    self._kick()
        return self

    def inject(self, action: str, subsystem: str, name: str) -> None:
        with self._lock:
            self._pending.append(DeviceEvent(action, subsystem, name))
            self._kick()

    def fail(self, exc: BaseException) -> None:
        """Make the monitor's next receive raise ``exc``."""
        with self._lock:
            self._failure = exc
            self._kick()

    def _kick(self) -> None:
        if self._w is not None:
            with contextlib.suppress(BlockingIOError):  # pipe full: readable already
                os.write(self._w, b"!")

    def fileno(self) -> int:
        if self._r is None:
            raise ValueError("fixture events not open")
        return self._r

    def receive(self) -> int:
        with self._lock:
            if self._r is not None:
                try:
                    while os.read(self._r, 4096):
                        pass
                except BlockingIOError:
                    pass
            if self._failure is not None:
                exc, self._failure = self._failure, None
                raise exc
            count = len(self._pending)
            self.delivered.extend(self._pending)
            self._pending.clear()
            return count

    def close(self) -> None:
        with self._lock:
            for fd in (self._r, self._w):
                if fd is not None:
                    os.close(fd)
            self._r = self._w = None


@dataclass(frozen=True)
class DiscoveryStatus:
    """What collectors export about discovery itself."""

    backend: str  # "udev" (pyudev on /sys) or "sysfs" (HostFS tree)
    discovery_source: str  # "udev", "kernel", "fixture" (monitor running) or "rescan"
    monitor_ok: bool  # False: the monitor failed; devices are re-read on every scrape
    generation: int
    devices: int
    events: int  # events received since start
    refreshes: int  # enumerations done
    last_error: str | None


class DeviceDiscovery:
    """The device set of one host, kept current by hot-plug events when possible.

    ``events``: "auto" (``udev`` when udevd runs, else ``kernel``), "udev", "kernel", a
    :class:`FixtureEvents`, or None for no monitor (re-enumerate on every scrape).
    """

    def __init__(
        self,
        source: DeviceSource,
        events: str | FixtureEvents | None = "auto",
        *,
        debounce: float = 0.2,
        max_delay: float = 2.0,
        rescan_interval: float = 1.0,
        udev_control: str = UDEV_CONTROL,
    ) -> None:
        self.source = source
        self.events = events
        self.debounce = debounce
        self.max_delay = max(max_delay, debounce)
        # Collectors of one scrape share a fallback enumeration instead of each doing one.
        self.rescan_interval = rescan_interval
        self.udev_control = udev_control
        self._snapshot = Snapshot(0, (), (), -math.inf)
        self._enum_lock = threading.Lock()  # one enumeration at a time, publish in order
        self._state_lock = threading.Lock()  # start/stop
        self._thread: threading.Thread | None = None
        self._wake_w: int | None = None
        self._stopping = threading.Event()
        self._source_label = RESCAN
        self._monitor_ok = True
        self._stale = True
        self._last_error: str | None = None
        self._events = 0
        self._refreshes = 0

    # --- reading (scrape side) -------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current snapshot, without any I/O (never blocks)."""
        return self._snapshot

    def devices(self) -> Snapshot:
        """The snapshot for a scrape: the monitor's while it runs; otherwise re-enumerated
        here when older than ``rescan_interval`` (this is the only I/O on this path)."""
        snap = self._snapshot
        if self.monitoring():
            return snap
        if self._stale or time.monotonic() - snap.taken_at >= self.rescan_interval:
            return self.refresh()
        return snap

    def refresh(self) -> Snapshot:
        """Enumerate now and publish the result; the generation grows if the set changed."""
        with self._enum_lock:
            result = self.source.enumerate()
            prev = self._snapshot
            changed = prev.generation == 0 or result.devices != prev.devices
            snap = Snapshot(
                prev.generation + 1 if changed else prev.generation,
                result.devices,
                result.errors,
                time.monotonic(),
            )
            self._snapshot = snap
            self._refreshes += 1
            self._stale = False
        return snap

    def monitoring(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and self._monitor_ok

    def status(self) -> DiscoveryStatus:
        snap = self._snapshot
        return DiscoveryStatus(
            backend=self.source.backend,
            discovery_source=self._source_label if self.monitoring() else RESCAN,
            monitor_ok=self._monitor_ok,
            generation=snap.generation,
            devices=len(snap.devices),
            events=self._events,
            refreshes=self._refreshes,
            last_error=self._last_error,
        )

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Subscribe to events, enumerate once, start the monitor thread (idempotent).

        The subscription comes first: a device added between the initial listing and the
        subscription would otherwise be missed until the next event.
        """
        with self._state_lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._reap()
            stream = self._open()
            try:
                self.refresh()
            except BaseException:
                if stream is not None:
                    stream.close()
                raise
            if stream is None:
                return
            wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            # Per thread: a thread left behind by a timed-out stop() must stay stopped.
            self._stopping = threading.Event()
            self._monitor_ok = True
            self._source_label = stream.source
            self._wake_w = wake_w
            self._thread = threading.Thread(
                target=self._run,
                args=(stream, wake_r, self._stopping),
                name=f"cephnode-devices-{stream.source}",
                daemon=True,
            )
            self._thread.start()
            log.debug("device monitor started", extra=kv(source=stream.source))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the monitor thread (idempotent). A thread stuck in an enumeration is left
        behind as a daemon; it exits when the enumeration returns."""
        with self._state_lock:
            thread = self._thread
            if thread is None:
                return
            self._stopping.set()
            if self._wake_w is not None:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")
            thread.join(timeout)
            if thread.is_alive():
                log.warning("device monitor did not stop in time", extra=kv(timeout=timeout))
            self._reap()

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> DeviceDiscovery:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _reap(self) -> None:
        # Closing the write end also wakes a thread that outlived stop() (POLLHUP).
        if self._wake_w is not None:
            os.close(self._wake_w)
            self._wake_w = None
        self._thread = None

    def _open(self) -> EventStream | None:
        events = self.events
        if events is None:
            return None
        if isinstance(events, FixtureEvents):
            return events.open()
        label = choose_event_source(self.udev_control) if events == "auto" else events
        try:
            return UdevEvents(label)
        except Exception as exc:  # EAFNOSUPPORT under a seccomp filter, no libudev, ...
            self._fail(label, exc)
            return None

    def _fail(self, source: str, exc: BaseException) -> None:
        self._monitor_ok = False
        self._stale = True
        self._last_error = f"{type(exc).__name__}: {exc}"
        log.warning(
            "device monitor failed: hot-plug is off, devices are re-read on every scrape",
            extra=kv(source=source, err=self._last_error),
        )

    # --- the monitor thread ------------------------------------------------------------

    def _run(self, stream: EventStream, wake_r: int, stopping: threading.Event) -> None:
        try:
            self._loop(stream, wake_r, stopping)
        except Exception as exc:
            if not stopping.is_set():  # a stopped thread's error concerns nobody
                self._fail(stream.source, exc)
        finally:
            try:
                stream.close()
            finally:
                os.close(wake_r)

    def _loop(self, stream: EventStream, wake_r: int, stopping: threading.Event) -> None:
        events_fd = stream.fileno()
        poller = select.poll()
        poller.register(events_fd, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        first: float | None = None  # first and last event of the pending burst
        last = 0.0
        while not stopping.is_set():
            timeout_ms: int | None = None
            if first is not None:
                due = min(last + self.debounce, first + self.max_delay)
                timeout_ms = max(0, math.ceil((due - time.monotonic()) * 1000))
            for fd, mask in poller.poll(timeout_ms):
                if fd == wake_r:
                    return  # stop() wrote to, or closed, the pipe
                if mask & select.POLLNVAL:
                    raise OSError(errno.EBADF, "event socket closed under the monitor")
                count = stream.receive()
                if count == 0 and mask & select.POLLHUP:
                    raise OSError(errno.EPIPE, "event source hung up")
                if count:
                    self._events += count
                    last = time.monotonic()
                    if first is None:
                        first = last
            if first is not None and time.monotonic() >= min(
                last + self.debounce, first + self.max_delay
            ):
                first = None
                if not stopping.is_set():
                    self.refresh()


# --- one shared discovery per host tree ---------------------------------------------


@dataclass
class _Shared:
    discovery: DeviceDiscovery
    users: int = 0


_shared: dict[HostFS, _Shared] = {}
_shared_lock = threading.Lock()


def default_discovery(fs: HostFS) -> DeviceDiscovery:
    """pyudev with a monitor for the real /sys; the sysfs reader, re-enumerating every
    scrape, for any other root or without libudev. A container's /host/sys gets no monitor:
    lib/kobject_uevent.c sends a NIC's uevents only into the network namespace owning it
    (uevent_net_broadcast_tagged), so the container's socket would miss them."""
    if os.path.realpath(fs.sysfs) == "/sys":
        try:
            return DeviceDiscovery(UdevDevices(), events="auto")
        except (ImportError, OSError) as exc:
            log.warning(
                "libudev unavailable: reading sysfs directly, without hot-plug events",
                extra=kv(err=str(exc)),
            )
    return DeviceDiscovery(SysfsDevices(fs), events=None)


def acquire(fs: HostFS) -> DeviceDiscovery:
    """The started, shared discovery of ``fs``; collectors pair it with :func:`release`."""
    with _shared_lock:
        entry = _shared.get(fs)
        if entry is None:
            discovery = default_discovery(fs)
            discovery.start()
            entry = _shared[fs] = _Shared(discovery)
        entry.users += 1
        return entry.discovery


def release(discovery: DeviceDiscovery) -> None:
    """Drop one user; the last one stops the monitor thread."""
    with _shared_lock:
        for fs, entry in list(_shared.items()):
            if entry.discovery is discovery:
                entry.users -= 1
                if entry.users <= 0:
                    del _shared[fs]
                    discovery.stop()
                return
