"""Collector ``firmware``: BIOS, system product, CPU microcode and kernel release.

Tuning facts that change only with an update or a reboot: a BIOS update can re-enable
deep C-states (the reference cluster's first bottleneck), a microcode update changes
mitigations and boost behaviour. Each is its own ``_info`` family so that the change
tracking (``cephnode_tuning_fact_hash``, CephNodeTuningChanged) names which one changed.
node_exporter's ``node_dmi_info`` and ``node_uname_info`` carry some of the same labels,
but the exporter can hash only what it exports itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from cephnode_exporter.collectors.base import (
    Collector,
    CollectorContext,
    metric_name,
    register,
)
from cephnode_exporter.hostfs.firmware import FirmwareFacts, FirmwareReader


def _info(name: str, doc: str, labels: dict[str, str]) -> Metric:
    family = GaugeMetricFamily(metric_name(name), doc, labels=list(labels))
    family.add_metric(list(labels.values()), 1.0)
    return family


@register
class FirmwareCollector(Collector):
    name = "firmware"
    help = "BIOS vendor/version/date, system product, CPU microcode revision, kernel release"
    reuse_unchanged = True

    def __init__(self, ctx: CollectorContext) -> None:
        super().__init__(ctx)
        self._reader = FirmwareReader(ctx.fs)

    def close(self) -> None:
        self._reader.close()

    def read(self) -> FirmwareFacts:
        return self._reader.read()

    def metrics(self, facts: FirmwareFacts) -> Iterable[Metric]:
        if facts.dmi is not None:
            yield _info(
                "bios_info",
                "The BIOS (DMI bios_vendor, bios_version, bios_date); empty when the "
                "firmware leaves a field out.",
                {
                    "vendor": facts.dmi["bios_vendor"],
                    "version": facts.dmi["bios_version"],
                    "date": facts.dmi["bios_date"],
                },
            )
            yield _info(
                "system_info",
                "The system (DMI sys_vendor, product_name).",
                {"vendor": facts.dmi["sys_vendor"], "product": facts.dmi["product_name"]},
            )
        if facts.microcode is not None:
            yield _info(
                "cpu_microcode_info",
                "CPU microcode revision of the online CPUs (several, comma-separated, when "
                "they differ); source sysfs (cpuN/microcode/version) or cpuinfo (the first "
                "CPU's /proc/cpuinfo line).",
                {"revision": ",".join(facts.microcode), "source": facts.microcode_source},
            )
        if facts.kernel_release is not None:
            yield _info(
                "kernel_release_info",
                "The running kernel's release (/proc/sys/kernel/osrelease, uname -r).",
                {"release": facts.kernel_release},
            )
