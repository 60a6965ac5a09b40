"""Batched reads of kept-open attribute files: one call for a list of descriptors.

The scrape's hot loops re-read the same sysfs attributes through descriptors kept open
between scrapes (the cpuidle counters: 1,728 files on a 96-CPU node). From Python each
``os.pread`` and ``int()`` costs more than the read itself, so the compiled
``_fastread`` (built from ``_fastread.c`` with the package) preads the whole list with
the GIL released and parses the values in C.

Both functions promise the same thing, compiled or not: an entry is ``None`` where the
descriptor is -1 (none kept), the read failed or the text is not a plain decimal integer
(for :func:`pread_ints`); the caller reads that file the ordinary way, which names the
error. The compiled path may give ``None`` where the Python one gives a value (``int()``
also takes ``1_000``); never a value where Python would fail.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Sequence

from cephnode_exporter.logs import kv

log = logging.getLogger("cephnode_exporter")

# The first bytes read of a counter: a u64 in decimal with its newline is 21.
COUNTER_BYTES = 64
# The kernel's counters are u64 (printed with %llu).
COUNTER_MAX = 2**64 - 1


def _unlinked(fd: int) -> bool:
    """recheck: the file is gone from the tree (or its descriptor is no good)."""
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError:
        return True


def pread_bytes_python(fds: Sequence[int], size: int, recheck: bool = False) -> list[bytes | None]:
    """The pure-Python :func:`pread_bytes`."""
    pread = os.pread
    out: list[bytes | None] = []
    append = out.append
    for fd in fds:
        try:
            if recheck and _unlinked(fd):
                append(None)
                continue
            append(pread(fd, size, 0))
        except OSError:
            append(None)
    return out


def kernel_int_bytes(data: bytes) -> int | None:
    """hostfs.kernel_int of raw bytes (bytes.strip and isdigit are ASCII-only): at most 20
    digits after a sign, as _fastread.c parse_int takes them; None for anything else."""
    t = data.strip()
    body = t[1:] if t[:1] in (b"-", b"+") else t
    if len(body) > 20 or not body.isdigit():
        return None
    return int(t)


def _int_or_none(text: bytes | None) -> int | None:
    return None if text is None else kernel_int_bytes(text)


def pread_ints_python(
    fds: Sequence[int], size: int = COUNTER_BYTES, recheck: bool = False
) -> list[int | None]:
    """The pure-Python :func:`pread_ints`: :func:`pread_bytes_python`, parsed."""
    return [_int_or_none(text) for text in pread_bytes_python(fds, size, recheck)]


def pread_counters_python(
    fds: Sequence[int], size: int = COUNTER_BYTES, recheck: bool = False
) -> list[int | None]:
    """The pure-Python :func:`pread_counters`."""
    return [
        None if v is None or not 0 <= v <= COUNTER_MAX else v
        for v in pread_ints_python(fds, size, recheck)
    ]


Ints = Callable[[Sequence[int], int, bool], list[int | None]]


def _load() -> tuple[
    Ints, Ints, Callable[[Sequence[int], int, bool], list[bytes | None]], str | None
]:
    """The compiled functions, or the Python ones and why the compiled are missing."""
    try:
        _fastread = importlib.import_module("cephnode_exporter.hostfs._fastread")
    except ImportError as exc:
        return pread_ints_python, pread_counters_python, pread_bytes_python, str(exc)
    return _fastread.pread_ints, _fastread.pread_counters, _fastread.pread_bytes, None


_ints, _counters, _bytes, UNAVAILABLE = _load()
# Which implementation serves the reads: "compiled" or "python".
IMPLEMENTATION = "python" if UNAVAILABLE else "compiled"


def pread_ints(
    fds: Sequence[int], size: int = COUNTER_BYTES, recheck: bool = False
) -> list[int | None]:
    """Each descriptor's first ``size`` bytes at offset 0 as a decimal integer, in order;
    None where the read failed or the text is no plain integer, and with ``recheck``
    where the file was unlinked (AttrFiles' recheck: the caller reopens it)."""
    return _ints(fds, size, recheck)


def pread_counters(
    fds: Sequence[int], size: int = COUNTER_BYTES, recheck: bool = False
) -> list[int | None]:
    """:func:`pread_ints` of u64 counters: None also for a value below 0 (above
    2**64 - 1 is None in both), so every value given is within the kernel's range."""
    return _counters(fds, size, recheck)


def pread_bytes(fds: Sequence[int], size: int, recheck: bool = False) -> list[bytes | None]:
    """Each descriptor's first ``size`` bytes at offset 0, in order; None where the read
    failed, and with ``recheck`` where the file was unlinked."""
    return _bytes(fds, size, recheck)


def log_implementation() -> None:
    """Say at start which reader serves the hot loops (the exporter is slower without
    the compiled one, not wrong)."""
    if UNAVAILABLE:
        log.warning(
            "compiled reader unavailable, using the pure-Python reads",
            extra=kv(err=UNAVAILABLE),
        )
    else:
        log.debug("compiled reader loaded", extra=kv(module="_fastread"))
