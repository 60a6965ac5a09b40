"""One window's ``perf script`` text, parsed and classified as it arrives, and judged
once perf script has exited: a window of samples, or why it is garbage or unusable.
"""

from __future__ import annotations

from cephnode_exporter.kprofile.classify import CLASSES, Tally
from cephnode_exporter.kprofile.perf import (
    Observer,
    Outcome,
    PerfConfig,
    Report,
    Window,
    first_error_line,
)
from cephnode_exporter.kprofile.perfscript import PerfScriptParser

# A window is garbage when more than 1 % of its lines (and more than 10) are not perf's.
MALFORMED_MIN = 10
# Kernel symbols are missing when most kernel samples have no name at all.
UNRESOLVED_MIN_SAMPLES = 10


class Decoder:
    """perf script's text for one window, parsed and classified as it arrives."""

    def __init__(self, config: PerfConfig, observe: Observer | None) -> None:
        self.config = config
        self.tally = Tally(max_callers=config.max_callers)
        self._observe = observe
        self.parser = PerfScriptParser(self._sink)

    def _sink(self, tid: int, frames: list[str | None]) -> None:
        cls = self.tally.add(tid, frames)
        if self._observe is not None:
            self._observe(tid, cls)

    def judge(self, stderr: str, started: float, ended: float) -> Report:
        """The window's report, once perf script has exited 0."""
        parser, tally, config = self.parser, self.tally, self.config
        parser.close()
        if parser.truncated:
            return Report(Outcome.GARBAGE, "perf script output ended inside a sample")
        if parser.malformed > max(MALFORMED_MIN, parser.lines // 100):
            return Report(
                Outcome.GARBAGE,
                f"{parser.malformed} of {parser.lines} lines of perf script output "
                "were not in its format",
            )
        if parser.samples == 0:
            why = "perf script printed no samples"
            if stderr.strip():
                why += f" ({first_error_line(stderr)})"
            return Report(Outcome.GARBAGE, why)
        if (
            tally.kernel_samples >= UNRESOLVED_MIN_SAMPLES
            and tally.unresolved_samples * 2 > tally.kernel_samples
        ):
            return Report(
                Outcome.UNAVAILABLE,
                f"perf could not name kernel functions in {tally.unresolved_samples} of "
                f"{tally.kernel_samples} kernel samples: grant CAP_SYSLOG "
                "(deploy/cephnode-exporter-kprofile.conf) or run as root",
            )
        window = Window(
            started=started,
            ended=ended,
            duration=config.duration,
            counts={str(cls): tally.counts[cls] for cls in CLASSES},
            top_callers=tuple(tally.top_callers(config.top)),
            callers_dropped=tally.callers_dropped,
            malformed_lines=parser.malformed,
        )
        return Report(Outcome.OK, window=window)
