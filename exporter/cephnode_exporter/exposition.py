"""The Prometheus text format (0.0.4) of one collection, written for speed.

prometheus_client's ``generate_latest`` re-validates and re-escapes every metric and
label name and sorts every sample's labels on each call; on a node with ten OSDs that
was 7 ms of a scrape for 1,200 OSD samples. Our names are fixed at build time and valid,
so this encoder only escapes label values and HELP text, formats values with
prometheus_client's own Go-style formatter, and memoises label strings, which repeat
across families (``ceph_daemon="osd.3"`` appears in every OSD family) and from scrape to
scrape. ``tests/test_exposition.py`` proves the output byte-identical to
``generate_latest`` on every collection the tests build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

# Go's strconv formatting of a sample value; prometheus_client leaves it unannotated. An
# alias, not a wrapper: it runs once per sample on the scrape's hot path.
format_value: Callable[[float], str] = floatToGoString

# prometheus_client's metric types, as the text format names them, and the suffix the
# family name gains there (counters are named without _total inside client_python).
_TYPES = {
    "counter": ("counter", "_total"),
    "info": ("gauge", "_info"),
    "stateset": ("gauge", ""),
    "gaugehistogram": ("histogram", ""),
    "unknown": ("untyped", ""),
}
# Samples that only OpenMetrics knows, moved to a gauge family after their own.
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")


def _escape_label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


# ``{k="v",...}`` strings by a sample's label items in the order they were added:
# families add their labels in the same order on every scrape, so one lookup finds the
# text a previous scrape built, without sorting. Shared by every encoding (dict reads
# and writes are atomic under the GIL) and emptied when it grows past the bound, so a
# node whose label values churn cannot grow it without limit.
_LABEL_TEXT: dict[tuple[tuple[str, str], ...], str] = {}
_LABEL_TEXT_MAX = 16384


# Go-style text of sample values, by value: most gauges (counts, flags, settings, 1.0
# of every _info) repeat from scrape to scrape, and a lookup costs a tenth of the
# formatting. Zero is left out (0.0 and -0.0 are equal keys but print apart), and NaN
# (never equal to itself). Emptied past the bound, like the label texts. The bound is
# small because counters, durations and quantiles add values that never repeat (25 to
# 45 a scrape with ten OSDs, against some 150 that do): at 16,384 entries the table
# held 2.5 MB and grew `make soak`'s RSS by that much; 2,048 hold the repeating ones.
_VALUE_TEXT: dict[float, str] = {}
_VALUE_TEXT_MAX = 2048


def _label_text(key: tuple[tuple[str, str], ...]) -> str:
    inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(key))
    return "{" + inner + "}"


# The text of each family of the last encoding, by the family object: a collector
# whose facts did not change hands the same family objects on (scrape.py), and their
# text is the same. Each entry keeps its family alive, so an id is never reused while
# it is here; only the families of the last encoding are kept.
_FAMILY_TEXT: dict[int, tuple[Metric, str]] = {}


def encode(families: Iterable[Metric]) -> bytes:
    """The text exposition of ``families``."""
    global _FAMILY_TEXT
    cache = _LABEL_TEXT
    if len(cache) > _LABEL_TEXT_MAX:
        cache.clear()
    values = _VALUE_TEXT
    if len(values) > _VALUE_TEXT_MAX:
        values.clear()
    previous = _FAMILY_TEXT
    texts: dict[int, tuple[Metric, str]] = {}
    out: list[str] = []
    for metric in families:
        key = id(metric)
        known = previous.get(key)
        if known is None or known[0] is not metric:
            known = (metric, _family_text(metric, cache, values))
        texts[key] = known
        out.append(known[1])
    _FAMILY_TEXT = texts
    # backslashreplace: a label with a surrogate escape (a name that was not UTF-8; hostfs
    # refuses those at the source) is written "\\udcff" rather than failing the scrape.
    return "".join(out).encode("utf-8", "backslashreplace")


def _family_text(
    metric: Metric,
    cache: dict[tuple[tuple[str, str], ...], str],
    values: dict[float, str],
) -> str:
    """One family's HELP, TYPE and sample lines."""
    fmt = format_value
    out: list[str] = []
    append = out.append
    mtype, suffix = _TYPES.get(metric.type, (metric.type, ""))
    name = metric.name + suffix
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    append(f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n")
    late: dict[str, list[str]] | None = None
    for s in metric.samples:
        v = s.value
        shown = values.get(v)
        if shown is None:
            shown = fmt(v)
            if v and v == v:
                values[v] = shown
        if s.labels:
            key = tuple(s.labels.items())
            text = cache.get(key)
            if text is None:
                text = cache[key] = _label_text(key)
            line = f"{s.name}{text} {shown}"
        else:
            line = f"{s.name} {shown}"
        if s.timestamp is not None:
            line += f" {int(float(s.timestamp) * 1000):d}"
        if (
            s.name.endswith(_OM_SUFFIXES)
            and s.name.startswith(metric.name)
            and s.name[len(metric.name) :] in _OM_SUFFIXES
        ):
            if late is None:
                late = {}
            late.setdefault(s.name[len(metric.name) :], []).append(line + "\n")
        else:
            append(line + "\n")
    if late:
        for om, lines in sorted(late.items()):
            append(f"# HELP {metric.name}{om} {doc}\n# TYPE {metric.name}{om} gauge\n")
            out.extend(lines)
    return "".join(out)
