"""What a request asks for: the content types, paths and headers of the protocol, and the
scrape options read from them (timeout, ``collect[]``, gzip, OpenMetrics).

Pure functions of the request's text, so that the handler (:mod:`.handler`) only routes.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# prometheus_client.openmetrics.exposition.CONTENT_TYPE_LATEST, the encoder used for it.
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Prometheus' own liveness and readiness paths (prometheus/prometheus web/web.go).
HEALTHY_PATH = "/-/healthy"
READY_PATH = "/-/ready"
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
REALM = "cephnode-exporter"

Render = Callable[[float | None], bytes]


@dataclass(frozen=True)
class ScrapeOptions:
    """What a scrape asked for beyond the plain text of every collector.

    ``collectors``: the ``collect[]`` query parameters, sorted and without repeats
    (node_exporter's NewNodeCollector, collector/collector.go, keeps them in a set: order
    and repeats mean nothing), or None for every enabled collector.
    ``openmetrics``: the client negotiated ``application/openmetrics-text``.
    """

    timeout: float | None
    collectors: tuple[str, ...] | None = None
    openmetrics: bool = False


# Called instead of Render when a scrape has collect[] parameters or wants OpenMetrics;
# the plain scrape keeps the one-argument path and its fast text encoder.
RenderFor = Callable[[ScrapeOptions], bytes]


class FilterError(ValueError):
    """A collect[] parameter names no enabled collector: the client's mistake (400)."""


# A client on a LAN sends its request head, and completes a TLS handshake, within
# milliseconds; a few seconds covers slow links and loaded hosts while keeping a silent
# or trickling peer (slowloris) from holding a connection slot for long.
HEADER_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 5.0
# A slot holder that has sent no complete request for this long is idle: a complete
# request that finds every slot taken closes the longest idle one and takes its slot.
# Keep-alive connections may be closed when idle (RFC 9112, section 9.5), and a new one
# has had ample time to send its request.
IDLE_GRACE = 1.0
# A connection that has sent no byte at all this long after its accept is the cheapest
# to close for a request that needs its place: an HTTP client writes its request, and a
# TLS client its ClientHello, as soon as connect() returns, so the first byte follows the
# handshake's last ACK at once, however long the link (see ExporterServer).
SILENT_GRACE = 0.1
# Writing one response (status line, headers and body) may take this long at most (and no
# longer than the request timeout): a client that does not read must not hold its slot
# for long. A 45 KB scrape takes milliseconds on a LAN.
WRITE_TIMEOUT = 10.0
_LOG_MAX = 300  # characters of client-supplied text in one debug log line
_LOG_USER = 64  # characters of a client-supplied user name in a log line


def _parse_scrape_timeout(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    # Reject nan, inf and non-positive values: they are not usable deadlines.
    if not 0 < seconds < float("inf"):
        return None
    return seconds


def _weighted(values: list[str] | None) -> list[tuple[str, float]]:
    """The items of Accept-style headers, lower-cased, with their q value (RFC 9110
    section 12.4.2: 1 when absent; an unreadable q counts as 0, not acceptable)."""
    out: list[tuple[str, float]] = []
    for value in values or ():
        for item in value.split(","):
            name, _, params = item.partition(";")
            q = 1.0
            for param in params.split(";"):
                k, _, v = param.partition("=")
                if k.strip().lower() == "q":
                    try:
                        q = float(v)
                    except ValueError:
                        q = 0.0
            out.append((name.strip().lower(), q))
    return out


def _accepts_gzip(values: list[str] | None) -> bool:
    return any(name == "gzip" and q > 0 for name, q in _weighted(values))


def _wants_openmetrics(values: list[str] | None) -> bool:
    """Whether the Accept header prefers OpenMetrics to the text format.

    Like prometheus/common's expfmt.Negotiate: the acceptable types in order of their
    q value (the header's order among equals), and the first one known wins; q=0 means
    "not acceptable". Prometheus sends ``application/openmetrics-text;version=1.0.0,
    ...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1``; curl sends ``*/*`` (text).
    """
    if not values:
        return False
    ranked = [(-q, i, media) for i, (media, q) in enumerate(_weighted(values)) if q > 0]
    for _, _, media in sorted(ranked):
        if media == "application/openmetrics-text":
            return True
        if media in ("text/plain", "*/*", "text/*"):
            return False
    return False


def _landing_page(telemetry_path: str) -> bytes:
    path = html.escape(telemetry_path, quote=True)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n'
        '<head><meta charset="utf-8"><title>cephnode-exporter</title></head>\n'
        "<body>\n"
        "<h1>cephnode-exporter</h1>\n"
        "<p>Prometheus exporter for the host side of Ceph storage nodes.</p>\n"
        f'<p><a href="{path}">Metrics</a> ({path})</p>\n'
        "</body>\n"
        "</html>\n"
    ).encode()
