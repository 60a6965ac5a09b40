"""Collector ``kernel``: boot flags, CPU vulnerability mitigations, tuned and sysctls.

The node-wide kernel settings between an OSD and its network: the performance-relevant
kernel command line, how many CPU vulnerabilities are mitigated (each mitigation costs
some syscall or context-switch time), the tuned profile, and the sysctls the tuning
profile names (the network buffers and backlogs by default). The sysctl list comes from the
profile (``sysctl.<name>`` checks) so the values exported are exactly those judged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import Collector, CollectorContext, metric_name, register
from cephnode_exporter.facts.kernel import KernelFacts, SysctlReading
from cephnode_exporter.hostfs import ParseError, ReadErrors
from cephnode_exporter.hostfs.cmdline import read_cmdline
from cephnode_exporter.hostfs.kernel import (
    Tuned,
    VulnState,
    read_tuned,
    read_vulnerabilities,
)
from cephnode_exporter.hostfs.process import find_process, read_pid_file
from cephnode_exporter.hostfs.sysctl import read_sysctl

# Kernel parameters exported as labels of cephnode_kernel_cmdline_info, from
# Documentation/admin-guide/kernel-parameters.txt. Chosen: what changes how fast an OSD's
# threads run and are woken. Left out because another collector exports them:
# idle=, processor.max_cstate=, intel_idle.max_cstate=, cpuidle.off= (cpuidle's
# cephnode_cpu_idle_kernel_params_info) and iommu=, iommu.passthrough=, iommu.strict=,
# amd_iommu=, intel_iommu= (the iommu collector). Per-bug switches
# (spectre_v2=, pti=, ...) are left out: the vulnerability files show their effect.
CMDLINE_PARAMS = (
    "mitigations",  # off | auto | auto,nosmt: all CPU vulnerability mitigations at once
    "nosmt",  # SMT off at boot: half the hardware threads
    "isolcpus",  # CPUs taken out of scheduler load balancing
    "nohz_full",  # CPUs without the periodic tick while running one task
    "nohz",  # on | off: the tick on idle CPUs
    "rcu_nocbs",  # CPUs whose RCU callbacks run elsewhere
    "irqaffinity",  # CPUs that take interrupts by default
    "preempt",  # none | voluntary | full (kernels with PREEMPT_DYNAMIC, 5.12+)
    "pcie_aspm",  # off | force: PCIe link power states, whose exit latency hits NVMe I/O
)
# Label value of a parameter given without "=value" ("nosmt"); empty means not given.
FLAG_PRESENT = "1"
# tuned's daemon: /usr/sbin/tuned is a Python script, so its comm is the script's name;
# it writes its pid to /run/tuned/tuned.pid (redhat-performance/tuned, tuned/consts.py
# PID_FILE). /etc/tuned/active_profile outlives the daemon (systemctl stop tuned rolls
# the settings back and leaves the file), so the selection alone proves nothing.
TUNED_COMM = "tuned"
TUNED_PID_FILE = ("run", "tuned", "tuned.pid")
# Seconds between two scans of every process's comm while tuned is not found, as the irq
# collector does for irqbalance: the pid seen last and the pid file are tried on every
# scrape, a node without tuned running does not read hundreds of comm files each time.
TUNED_RESCAN_SECONDS = 60.0


@register
class KernelCollector(Collector):
    name = "kernel"
    help = "Kernel command line flags, CPU vulnerability mitigations, tuned profile, sysctls"
    reuse_unchanged = True

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._sysctls = ctx.reads.sysctls
        # The sysctls the profile compares as integers: for them a value that is not
        # decimal integers is a read error, not a string to export nothing for.
        self._numeric = ctx.reads.numeric_sysctls
        self._tuned_pid: int | None = None
        self._scanned_at: float | None = None  # the last /proc scan that found no tuned

    def read(self) -> KernelFacts:
        fs = self.ctx.fs
        errors = ReadErrors()
        cmdline: dict[str, str] | None = None
        try:
            cmdline = read_cmdline(fs)
        except (OSError, ParseError) as exc:
            errors.add(exc)
        before = len(errors)
        vulnerabilities = read_vulnerabilities(fs, errors)
        vulnerability_errors = errors.items[before:]
        tuned: Tuned | None = None
        tuned_error: str | None = None
        try:
            tuned = read_tuned(fs)
        except (OSError, ParseError) as exc:
            errors.add(exc)
            tuned_error = str(exc)
        facts = KernelFacts(
            cmdline,
            vulnerabilities,
            tuned,
            tuned_error,
            errors=errors,
            vulnerability_errors=vulnerability_errors,
        )
        if tuned is not None and tuned.installed:
            self._read_tuned_running(facts)
        for name in self._sysctls:
            try:
                # None: no such file. Not a read error: the check says unknown with the
                # likely causes, or skips a sysctl the profile marks optional.
                value = read_sysctl(fs, name, numeric=name in self._numeric)
                facts.sysctls[name] = SysctlReading(value=value)
            except (OSError, ValueError) as exc:  # ParseError is a ValueError
                errors.add(exc)
                facts.sysctls[name] = SysctlReading(error=str(exc))
        return facts

    def _read_tuned_running(self, facts: KernelFacts) -> None:
        """Whether tuned's daemon runs: the pid seen last, then the pid file, then (at
        most once a minute while none is found) a scan of /proc."""
        fs = self.ctx.fs
        now = time.monotonic()
        scan = self._scanned_at is None or now - self._scanned_at >= TUNED_RESCAN_SECONDS
        candidates = [self._tuned_pid, read_pid_file(fs.root(*TUNED_PID_FILE))]
        try:
            self._tuned_pid = find_process(fs, TUNED_COMM, candidates, scan)
        except OSError as exc:
            facts.errors.add(exc)
            facts.tuned_running_error = str(exc)
            self._tuned_pid = None
            return
        facts.tuned_running = self._tuned_pid is not None
        if facts.tuned_running:
            self._scanned_at = None
        elif scan:
            self._scanned_at = now

    def metrics(self, facts: KernelFacts) -> Iterable[Metric]:
        if facts.cmdline is not None:
            labels = {p: _param(facts.cmdline, p) for p in CMDLINE_PARAMS}
            yield _single(
                metric_name("kernel_cmdline_info"),
                "Performance-relevant kernel parameters from /proc/cmdline (empty when not "
                f"given, {FLAG_PRESENT} when given without a value).",
                labels,
            )
        if facts.vulnerabilities is not None:
            counts = GaugeMetricFamily(
                metric_name("kernel_cpu_vulnerabilities"),
                "CPU vulnerabilities the kernel reports, by state: not_affected, mitigated "
                "(a mitigation is in effect), vulnerable, unknown.",
                labels=["state"],
            )
            per = GaugeMetricFamily(
                metric_name("kernel_cpu_vulnerability_info"),
                "One series per CPU vulnerability file with its state class.",
                labels=["vulnerability", "state"],
            )
            states = [v.state for v in facts.vulnerabilities.values()]
            for state in VulnState:
                counts.add_metric([str(state)], float(states.count(state)))
            for v in facts.vulnerabilities.values():
                per.add_metric([v.name, str(v.state)], 1.0)
            yield counts
            yield per
        if facts.tuned is not None:
            yield _single(
                metric_name("tuned_installed"),
                "1 when tuned is installed (/etc/tuned exists), else 0.",
                {},
                1.0 if facts.tuned.installed else 0.0,
            )
            yield _single(
                metric_name("tuned_profile_info"),
                "The tuned profile selected in /etc/tuned/active_profile; empty when none is "
                "(tuned not installed, never started, or tuned-adm off).",
                {"profile": facts.tuned.profile or ""},
            )
        if facts.tuned_running is not None:
            yield _single(
                metric_name("tuned_running"),
                "1 when a process named tuned runs (the daemon that applies the profile), "
                "else 0; absent when tuned is not installed or /proc cannot be listed.",
                {},
                1.0 if facts.tuned_running else 0.0,
            )
        values = GaugeMetricFamily(
            metric_name("sysctl_value"),
            "Integer sysctls named in the tuning profile; multi-valued ones (tcp_rmem) have "
            "an index label. Absent for a sysctl not found in /proc/sys or not a number.",
        )
        for name, reading in facts.sysctls.items():
            ints = reading.value.ints if reading.value is not None else None
            if ints is None:
                continue
            if len(ints) == 1:
                values.add_sample(values.name, {"name": name}, float(ints[0]))
            else:
                for i, number in enumerate(ints):
                    values.add_sample(values.name, {"name": name, "index": str(i)}, float(number))
        yield values


def _param(cmdline: dict[str, str], name: str) -> str:
    if name not in cmdline:
        return ""
    return cmdline[name] or FLAG_PRESENT


def _single(name: str, doc: str, labels: dict[str, str], value: float = 1.0) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
