"""Transparent huge pages: the system-wide mode.

ABI: Documentation/admin-guide/mm/transhuge.rst. ``/sys/kernel/mm/transparent_hugepage/
enabled`` prints the choices with the active one in brackets ("always [madvise] never"),
``defrag`` likewise ("always defer defer+madvise [madvise] never"); both are mode 0644.
No directory without CONFIG_TRANSPARENT_HUGEPAGE: not an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cephnode_exporter.hostfs import HostFS, ParseError, ReadErrors, read_optional_text

THP_DIR = ("kernel", "mm", "transparent_hugepage")
# A choice as mm/huge_memory.c prints it: lower-case words joined by "+" or "_".
_CHOICE_RE = re.compile(r"[a-z][a-z_+]{0,31}")


@dataclass
class THPFacts:
    enabled: str | None = None  # None: no THP support (or unreadable: see errors)
    defrag: str | None = None
    errors: ReadErrors = field(default_factory=ReadErrors)


def parse_selected(text: str, path: str) -> str:
    """The bracketed choice of a THP mode file; exactly one must be bracketed."""
    words = text.split()
    selected = [w[1:-1] for w in words if w.startswith("[") and w.endswith("]")]
    if len(selected) != 1 or not _CHOICE_RE.fullmatch(selected[0]):
        raise ParseError(path, f"no single [selected] mode: {text[:60]!r}")
    if not all(_CHOICE_RE.fullmatch(w.strip("[]")) for w in words):
        raise ParseError(path, f"not a list of modes: {text[:60]!r}")
    return selected[0]


def read_thp(fs: HostFS) -> THPFacts:
    facts = THPFacts()
    for name in ("enabled", "defrag"):
        path = fs.sys(*THP_DIR, name)
        try:
            text = read_optional_text(path)
            if text is not None:
                setattr(facts, name, parse_selected(text, path))
        except (OSError, ParseError) as exc:
            facts.errors.add(exc)
    return facts
