"""Streaming parser of ``perf script -F comm,tid,cpu,ip,sym,dso`` output.

The text is fed in chunks as it comes out of the pipe and is never held whole: a window
on a 96-thread node is about 24,000 samples and 400,000 lines. What perf prints with
these fields (tools/perf/builtin-script.c: process_event, perf_sample__fprintf_callchain
in util/evsel_fprintf.c), one sample per block::

    swapper     0 [000]
    \tffffffff821f4dab pv_native_safe_halt ([kernel.kallsyms])
    \tffffffff821f68b5 default_idle ([kernel.kallsyms])
    <blank line>

A header (command, thread id, ``[cpu]``), then one indented line per call-chain frame,
leaf first: address in hex, symbol (``[unknown]`` when perf cannot name it), and the
DSO in parentheses (``[kernel.kallsyms]``, a module such as ``[nvme]``, or a program's
path). A sample taken in user mode with ``--kernel-callchains`` has no frame lines.

Only kernel frames are kept: user frames carry nothing the classes need. Everything is
bounded: a line longer than ``max_line`` is dropped as malformed, frames past
``max_frames`` are ignored, and the caller decides what share of malformed lines makes
a window worthless.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable

# Longest line kept: a kernel symbol is at most KSYM_NAME_LEN (512 since 6.1) characters.
MAX_LINE = 4096
# perf's default callchain limit is kernel.perf_event_max_stack, 127.
MAX_FRAMES = 256

_HEADER = re.compile(r"^(?P<comm>.*?)\s+(?P<tid>-?\d+)\s+\[(?P<cpu>\d+)\]\s*$")
_KALLSYMS = " ([kernel.kallsyms])"
# Bracketed DSOs of user space (util/map.c: is_anon_memory, is_no_dso_memory; vdso.c).
_USER_BRACKETS = frozenset(
    {"[vdso]", "[vdso32]", "[vdsox32]", "[vsyscall]", "[heap]", "[stack]", "[uprobes]"}
)
# Kernel addresses occupy the upper half of the address space on x86_64, arm64, ppc64
# and riscv64; used only for frames perf left without a DSO.
_KERNEL_HALF = 1 << 63
_UNKNOWN = "[unknown]"

SampleSink = Callable[[int, list[str | None]], object]


class PerfScriptParser:
    """Feed bytes with :meth:`feed`, then :meth:`close`; every complete sample goes to
    ``sink(tid, kernel_frames)`` (frames leaf first, None for an unnamed kernel address).
    """

    def __init__(
        self, sink: SampleSink, max_line: int = MAX_LINE, max_frames: int = MAX_FRAMES
    ) -> None:
        self._sink = sink
        self._max_line = max_line
        self._max_frames = max_frames
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._overlong = False  # dropping the rest of an overlong line
        self._tid: int | None = None  # the sample being read, if any
        self._frames: list[str | None] = []
        self._frame_lines = 0
        self._skipping = False  # the rest of an abandoned sample
        self.lines = 0
        self.samples = 0
        self.malformed = 0
        self.truncated = False  # the stream ended inside a sample or a line

    def feed(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if not text:
            return
        parts = text.split("\n")
        tail = parts.pop()
        if parts:
            first = parts[0]
            if self._overlong:
                self._overlong = False
                parts = parts[1:]
            elif self._partial:
                parts[0] = self._partial + first
            self._partial = ""
            for line in parts:
                self._line(line)
        if self._overlong:
            return
        if len(self._partial) + len(tail) > self._max_line:
            self._partial = ""
            self._overlong = True
            self.malformed += 1
            self._abandon()
        else:
            self._partial += tail

    def close(self) -> None:
        """End of stream: a partial line or an unterminated sample means truncation."""
        rest = self._decoder.decode(b"", final=True)
        if rest or self._partial or self._overlong:
            self.truncated = True
        if self._tid is not None:
            self.truncated = True
        self._partial = ""
        self._tid = None
        self._frames = []

    # --- one line -----------------------------------------------------------------------

    def _line(self, line: str) -> None:
        self.lines += 1
        if len(line) > self._max_line:
            self.malformed += 1
            self._abandon()
            return
        if not line or line.isspace():
            self._finish()
            self._skipping = False
            return
        if line[0] in "\t ":
            self._frame(line)
            return
        self._finish()
        self._skipping = False
        match = _HEADER.match(line)
        if match is None:
            self.malformed += 1
            return
        self._tid = int(match["tid"])
        self._frames = []
        self._frame_lines = 0

    def _frame(self, line: str) -> None:
        if self._tid is None:
            if not self._skipping:
                self.malformed += 1  # a frame outside any sample
            return
        self._frame_lines += 1
        if self._frame_lines > self._max_frames:
            return
        text = line.strip()
        address, _, rest = text.partition(" ")
        if text.endswith(_KALLSYMS):  # fast path: the vast majority of frames
            symbol = rest[: -len(_KALLSYMS)]
            kernel = True
        else:
            try:
                addr = int(address, 16)
            except ValueError:
                self.malformed += 1
                return
            symbol, dso = rest, ""
            if rest.endswith(")"):
                cut = rest.rfind(" (")
                if cut >= 0:
                    symbol, dso = rest[:cut], rest[cut + 2 : -1]
                elif rest.startswith("("):
                    symbol, dso = "", rest[1:-1]
            if dso in ("", _UNKNOWN):
                kernel = addr >= _KERNEL_HALF
            elif dso.startswith("["):
                kernel = dso not in _USER_BRACKETS and not dso.startswith("[anon")
            else:
                kernel = False
        if not kernel:
            return
        # With symoff perf prints "name+0x1f"; names never contain "+".
        symbol = symbol.partition("+0x")[0]
        self._frames.append(None if symbol in ("", _UNKNOWN) else symbol)

    def _finish(self) -> None:
        if self._tid is None:
            return
        tid, frames = self._tid, self._frames
        self._tid = None
        self._frames = []
        self.samples += 1
        self._sink(tid, frames)

    def _abandon(self) -> None:
        """Drop the sample being read: one of its lines was unusable."""
        if self._tid is not None:
            self._skipping = True
        self._tid = None
        self._frames = []
