"""The exporter's own ``process_*`` metrics, read from its /proc/self at each scrape."""

from __future__ import annotations

import os
import resource

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class ProcessMetrics:
    """The exporter's own ``process_*`` metrics: RSS, CPU, open and maximum fds, start time.

    node_exporter registers client_golang's process collector beside its own
    (node_exporter.go, turned off by ``--web.disable-exporter-metrics``); these are the
    series of prometheus_client's ProcessCollector, same names, help and order, plus
    ``process_threads``, which client_python does not export (Go exporters export it as
    ``go_threads``), because the exporter's threads are what ``--web.max-connections``
    and the unit's TasksMax bound. Always the exporter's own /proc/self, never
    ``--path.procfs``: in a container that option names the host's procfs, where "self"
    is not this process.

    Written here rather than taken from ProcessCollector for the descriptor count: it
    lists ``/proc/self/fd``, 1,700 entries on a 96-CPU node (the kept-open sysfs
    attributes), about a millisecond a scrape. Since Linux 6.2 a ``stat()`` of that
    directory gives the count as its size (fs/proc/fd.c, ``proc_fd_getattr``), as
    prometheus/procfs's ``FileDescriptorsLen`` uses; older kernels report 0 there and
    the directory is listed. The threads come from the same ``stat`` line (proc(5),
    field 20, ``num_threads``) instead of a listing of ``task/``.
    """

    def __init__(self, proc: str = "/proc") -> None:
        self._self = os.path.join(proc, "self")
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._pagesize = float(os.sysconf("SC_PAGESIZE"))
        self._btime: float | None = None
        try:
            with open(os.path.join(proc, "stat"), "rb") as f:
                for line in f:
                    if line.startswith(b"btime "):
                        self._btime = float(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            self._btime = None

    def families(self) -> list[Metric]:
        """Fresh values; an unreadable /proc gives fewer families, never an error."""
        if self._btime is None:
            return []
        out: list[Metric] = []
        threads: float | None = None
        try:
            fd = os.open(os.path.join(self._self, "stat"), os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = os.read(fd, 4096)
            finally:
                os.close(fd)
            # After the command name, which may hold spaces and parentheses (proc(5)).
            parts = data.rpartition(b")")[2].split()
            out.append(
                GaugeMetricFamily(
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    value=float(parts[20]),
                )
            )
            out.append(
                GaugeMetricFamily(
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    value=float(parts[21]) * self._pagesize,
                )
            )
            out.append(
                GaugeMetricFamily(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    value=float(parts[19]) / self._ticks + self._btime,
                )
            )
            out.append(
                CounterMetricFamily(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    value=(float(parts[11]) + float(parts[12])) / self._ticks,
                )
            )
            threads = float(parts[17])
        except (OSError, ValueError, IndexError):
            out = []
        try:
            open_fds = self._open_fds()
            max_fds = float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        except (OSError, ValueError):
            pass
        else:
            out.append(
                GaugeMetricFamily(
                    "process_open_fds", "Number of open file descriptors.", value=open_fds
                )
            )
            out.append(
                GaugeMetricFamily(
                    "process_max_fds", "Maximum number of open file descriptors.", value=max_fds
                )
            )
        if threads is not None:
            out.append(
                GaugeMetricFamily(
                    "process_threads", "Number of OS threads in the process.", value=threads
                )
            )
        return out

    def _open_fds(self) -> float:
        path = os.path.join(self._self, "fd")
        count = os.stat(path).st_size
        if count > 0:
            # The listing this replaces counted the descriptor it held open to list the
            # directory; one more keeps the series continuous with it.
            return float(count + 1)
        return float(len(os.listdir(path)))
