"""The exporter's HTTP(S) server: landing page, telemetry endpoint, basic auth and TLS.

Built on http.server/socketserver so the exporter needs no web framework. What those modules
lack for a daemon reachable from a storage network is added here: a cap on concurrent
connections (with a quick 503 beyond it), short deadlines for the TLS handshake and the
request head so slow or silent clients cannot pin threads, idle connections that give way
to a complete request when every slot is taken, TLS handshakes done in each connection's
own thread (never in the accept loop), basic auth that a flood of wrong passwords cannot
turn into a denial of service, a graceful stop, and logging through :mod:`logging`
instead of stderr.

Beyond the telemetry path it behaves as node_exporter does with prometheus/exporter-toolkit
(web/tls_config.go: ``ListenAndServe``, ``ServeMultiple``): it listens on every address
given, or on the sockets systemd passes (socket activation), answers ``/-/healthy`` and
``/-/ready`` as Prometheus' own web/web.go does, and applies basic auth to every path,
as exporter-toolkit's ``webHandler`` does.

The rooms: :mod:`.request` (what a request asks for), :mod:`.auth` (basic auth),
:mod:`.listen` (the listening sockets), :mod:`.handler` (one connection's requests) and
:mod:`.server` (connections, slots, TLS, stop).
"""

from cephnode_exporter.web.handler import ConnectionServer
from cephnode_exporter.web.listen import format_address, parse_listen_address, systemd_listeners
from cephnode_exporter.web.request import (
    CONTENT_TYPE,
    HANDSHAKE_TIMEOUT,
    HEADER_TIMEOUT,
    IDLE_GRACE,
    OPENMETRICS_CONTENT_TYPE,
    SCRAPE_TIMEOUT_HEADER,
    FilterError,
    Render,
    RenderFor,
    ScrapeOptions,
)
from cephnode_exporter.web.server import ExporterServer, make_server, telemetry_path_problem

__all__ = [
    "CONTENT_TYPE",
    "HANDSHAKE_TIMEOUT",
    "HEADER_TIMEOUT",
    "IDLE_GRACE",
    "OPENMETRICS_CONTENT_TYPE",
    "SCRAPE_TIMEOUT_HEADER",
    "ConnectionServer",
    "ExporterServer",
    "FilterError",
    "Render",
    "RenderFor",
    "ScrapeOptions",
    "format_address",
    "make_server",
    "parse_listen_address",
    "systemd_listeners",
    "telemetry_path_problem",
]
