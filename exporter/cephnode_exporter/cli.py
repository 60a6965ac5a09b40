"""Command line: ``serve`` (the default), ``dump`` and ``check``.

Flag names follow node_exporter (``--web.listen-address``, ``--path.sysfs``,
``--[no-]collector.<name>``) so operators and config management reuse what they know.
Exit codes: 0 success (``check``: nothing failed), 1 a check failed, 2 usage or internal
error (``check``: also when a check raised; the report is printed, that check unknown).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from cephnode_exporter import __version__, logs
from cephnode_exporter.checks import Status, load_all
from cephnode_exporter.collection import Collection
from cephnode_exporter.collectors import REGISTRY, CollectorContext
from cephnode_exporter.collectors.base import DEFAULT_COLLECTOR_TIMEOUT, bounded
from cephnode_exporter.exposition import encode
from cephnode_exporter.hostfs import HostFS, batch, raise_nofile_limit, read_text
from cephnode_exporter.hostfs.mounts import MOUNTINFO, MountTable
from cephnode_exporter.process_metrics import ProcessMetrics
from cephnode_exporter.profile import ProfileError, load_profile
from cephnode_exporter.report import render_json, render_text
from cephnode_exporter.scrape import Scraper

log = logging.getLogger("cephnode_exporter")

COMMANDS = ("serve", "dump", "check")
DEFAULT_LISTEN = ":10060"
# Leave Prometheus this much of its scrape timeout to receive and parse the answer.
SCRAPE_TIMEOUT_OFFSET = 0.5
# At a stop, seconds beyond --scrape.timeout for the last responses to be written.
SHUTDOWN_WRITE_MARGIN = 1.0

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
# Upper bound of --web.max-connections.
MAX_CONNECTIONS_CAP = 4096


def _positive_float(text: str) -> float:
    """Seconds in (0, 3600]; NaN and infinities fail the comparison and are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600]: {text}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    """Flags every command shares: where the host is, what to collect, how to log."""
    paths = parser.add_argument_group("host paths")
    paths.add_argument(
        "--path.procfs",
        dest="path_procfs",
        default="/proc",
        metavar="PATH",
        help="procfs mount point (default: %(default)s)",
    )
    paths.add_argument(
        "--path.sysfs",
        dest="path_sysfs",
        default="/sys",
        metavar="PATH",
        help="sysfs mount point (default: %(default)s)",
    )
    paths.add_argument(
        "--path.rootfs",
        dest="path_rootfs",
        default="/",
        metavar="PATH",
        help="root filesystem, for /etc and /dev (default: %(default)s)",
    )
    paths.add_argument(
        "--path.mountinfo",
        dest="path_mountinfo",
        default=MOUNTINFO,
        metavar="PATH",
        help="the exporter's own mount table, which tells a directory of --path.sysfs "
        "or --path.procfs hidden by a mount (a container's mask) from hardware the node "
        "lacks (default: %(default)s)",
    )
    collectors = parser.add_argument_group("collectors")
    collectors.add_argument(
        "--collector.disable-defaults",
        dest="collector_disable_defaults",
        action="store_true",
        help="set all collectors to disabled by default; enable each wanted one with "
        "--collector.<name> (node_exporter's flag)",
    )
    for name, cls in sorted(REGISTRY.items()):
        state = "enabled" if cls.default_enabled else "disabled"
        collectors.add_argument(
            f"--collector.{name}",
            dest=f"collector_{name}",
            action=argparse.BooleanOptionalAction,
            # None: not given, so the default applies (or --collector.disable-defaults).
            default=None,
            help=f"{cls.help} (default: {state})",
        )
        cls.add_arguments(collectors)
    collectors.add_argument(
        "--collector.timeout",
        dest="collector_timeout",
        type=_positive_float,
        default=DEFAULT_COLLECTOR_TIMEOUT,
        metavar="SECONDS",
        help="time one collector may take before it is reported failed (default: %(default)s)",
    )
    collectors.add_argument(
        "--scrape.timeout",
        dest="scrape_timeout",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="budget of a whole scrape; lowered to Prometheus' own "
        "scrape timeout when it sends one (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="tuning profile merged over the built-in default",
    )
    parser.add_argument(
        "--log.level",
        dest="log_level",
        choices=list(logs.LEVELS),
        default="info",
        help="(default: %(default)s)",
    )
    parser.add_argument(
        "--log.format",
        dest="log_format",
        choices=["logfmt", "json"],
        default="logfmt",
        help="(default: %(default)s)",
    )
    parser.add_argument("--version", action="version", version=f"cephnode-exporter {__version__}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cephnode-exporter",
        description="Prometheus exporter for the host side of Ceph storage nodes, and a "
        "tuning report. Without a command, serves metrics.",
    )
    parser.add_argument("--version", action="version", version=f"cephnode-exporter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{serve,dump,check}")
    serve = sub.add_parser("serve", help="serve /metrics over HTTP (the default)")
    serve.add_argument(
        "--web.listen-address",
        dest="web_listen_address",
        action="append",
        default=None,
        metavar="ADDR",
        help=f"address to listen on; repeat to listen on several (default: {DEFAULT_LISTEN})",
    )
    serve.add_argument(
        "--web.systemd-socket",
        dest="web_systemd_socket",
        action="store_true",
        help="use the sockets systemd passes (socket activation, sd_listen_fds(3)) "
        "instead of --web.listen-address",
    )
    serve.add_argument(
        "--web.telemetry-path",
        dest="web_telemetry_path",
        default="/metrics",
        metavar="PATH",
        help="path of the metrics (default: %(default)s)",
    )
    serve.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        metavar="FILE",
        help="exporter-toolkit web config (TLS, basic auth); see docs/web-config.md",
    )
    serve.add_argument(
        "--web.max-connections",
        dest="web_max_connections",
        # One thread per connection: thousands are memory and descriptors, not service.
        type=bounded(int, 1, MAX_CONNECTIONS_CAP),
        default=64,
        metavar="N",
        help="concurrent connections (default: %(default)s)",
    )
    serve.add_argument(
        "--web.disable-exporter-metrics",
        dest="web_disable_exporter_metrics",
        action="store_true",
        help="leave out the exporter's own process_* metrics (memory, CPU, fds, threads)",
    )
    _common(serve)
    dump = sub.add_parser("dump", help="collect once and print the exposition text")
    _common(dump)
    check = sub.add_parser("check", help="print the node's tuning report")
    check.add_argument(
        "--format", choices=["text", "json"], default="text", help="(default: %(default)s)"
    )
    _common(check)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = build_parser().parse_args(argv)
    for name, cls in REGISTRY.items():
        # node_exporter's collector.go: an explicit --[no-]collector.<name> wins, else the
        # collector's default, which --collector.disable-defaults turns off.
        dest = f"collector_{name}"
        if getattr(args, dest) is None:
            setattr(args, dest, cls.default_enabled and not args.collector_disable_defaults)
    if args.command == "serve" and args.web_listen_address is None:
        args.web_listen_address = [DEFAULT_LISTEN]
    if args.command == "serve":
        from cephnode_exporter.web import telemetry_path_problem  # web only for serve

        problem = telemetry_path_problem(args.web_telemetry_path)
        if problem is not None:
            build_parser().error(f"--web.telemetry-path {problem}")
    if args.command == "serve" and args.web_max_connections < 1:
        build_parser().error("--web.max-connections must be at least 1")
    return args


def build_scraper(args: argparse.Namespace) -> Scraper:
    """The collectors the flags enable, the profile, and the checks, wired together."""
    raise_nofile_limit()  # collectors keep sysfs attribute files open between scrapes
    specs = load_all()
    profile = load_profile(args.profile, specs)
    fs = HostFS(
        procfs=args.path_procfs,
        sysfs=args.path_sysfs,
        rootfs=args.path_rootfs,
        mounts=MountTable(args.path_mountinfo),
    )
    ctx = CollectorContext(
        fs=fs, options=args, collector_timeout=args.collector_timeout, reads=profile.reads()
    )
    enabled = [name for name in sorted(REGISTRY) if getattr(args, f"collector_{name}")]
    disabled = [name for name in sorted(REGISTRY) if name not in enabled]
    for path in (fs.procfs, fs.sysfs, fs.rootfs):
        if not os.path.isdir(path):
            log.warning("host path is not a directory", extra=logs.kv(path=path))
    collectors = [REGISTRY[name](ctx) for name in enabled]
    return Scraper(collectors, disabled, profile, specs, collector_timeout=ctx.collector_timeout)


def exposition(collection: Collection) -> bytes:
    return encode(collection.families())


class _Families:
    """Families in the shape prometheus_client's encoders take a registry (``collect()``)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def openmetrics(families: list[Metric]) -> bytes:
    """OpenMetrics 1.0 text, by prometheus_client's own encoder (ends with ``# EOF``).

    Only for clients that ask for it: the text format keeps our faster encoder
    (exposition.py), which Prometheus gets unless it negotiates OpenMetrics.
    """
    text: bytes = openmetrics_latest(_Families(families))  # type: ignore[no-untyped-call]
    return text


def collector_filter(names: Sequence[str], scraper: Scraper) -> frozenset[str]:
    """The collectors a scrape's ``collect[]`` names; FilterError for any it cannot run.

    node_exporter's NewNodeCollector (collector/collector.go) refuses a name no collector
    has ("missing collector") and one that is not enabled ("disabled collector"); its
    handler answers 400 with the reason.
    """
    from cephnode_exporter.web import FilterError  # web (and bcrypt) only for serve

    enabled = set(scraper.collector_names)
    for name in names:
        if name not in REGISTRY:
            raise FilterError(f"couldn't create collector: missing collector: {name}")
        if name not in enabled:
            raise FilterError(f"couldn't create collector: disabled collector: {name}")
    return frozenset(names)


def _budget(args: argparse.Namespace, header_timeout: float | None) -> float:
    budget = float(args.scrape_timeout)
    if header_timeout is not None and header_timeout > 0:
        budget = min(budget, max(0.1, header_timeout - SCRAPE_TIMEOUT_OFFSET))
    return budget


def cmd_serve(args: argparse.Namespace, scraper: Scraper) -> int:
    from cephnode_exporter.web import (
        ScrapeOptions,
        format_address,
        make_server,
        systemd_listeners,
    )
    from cephnode_exporter.webconfig import WebConfigError, load_web_config

    web_config = None
    if args.web_config_file:
        try:
            web_config = load_web_config(args.web_config_file)
        except WebConfigError as exc:
            log.error("invalid web config", extra=logs.kv(err=str(exc)))
            return EXIT_ERROR
    listeners = None
    if args.web_systemd_socket:
        # exporter-toolkit's ListenAndServe: the activated sockets replace the addresses.
        try:
            listeners = systemd_listeners()
        except (OSError, ValueError) as exc:
            log.error("cannot listen", extra=logs.kv(systemd_socket=True, err=str(exc)))
            return EXIT_ERROR
        if not listeners:
            log.error(
                "cannot listen",
                extra=logs.kv(
                    systemd_socket=True, err="no socket activation file descriptors found"
                ),
            )
            return EXIT_ERROR
    process = None if args.web_disable_exporter_metrics else ProcessMetrics()

    def families(collection: Collection) -> list[Metric]:
        out = collection.families()
        return out + process.families() if process is not None else out

    def render(header_timeout: float | None) -> bytes:
        return encode(families(scraper.collect(_budget(args, header_timeout))))

    def render_for(options: ScrapeOptions) -> bytes:
        only = None
        if options.collectors is not None:
            only = collector_filter(options.collectors, scraper)
        out = families(scraper.collect(_budget(args, options.timeout), only))
        return openmetrics(out) if options.openmetrics else encode(out)

    try:
        server = make_server(
            args.web_listen_address,
            args.web_telemetry_path,
            render,
            web_config=web_config,
            max_connections=args.web_max_connections,
            render_for=render_for,
            listeners=listeners,
        )
    except (OSError, ValueError) as exc:
        address = ",".join(args.web_listen_address)
        log.error("cannot listen", extra=logs.kv(address=address, err=str(exc)))
        if listeners:
            for sock in listeners:
                sock.close()
        return EXIT_ERROR

    # Requests in progress at a stop get the scrape budget, plus a moment to be written.
    grace = args.scrape_timeout + SHUTDOWN_WRITE_MARGIN
    stopping: list[str] = []

    def stop(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stopping:
            log.warning("second signal, stopping now", extra=logs.kv(signal=name))
            server.abort_drain()
            return
        stopping.append(name)
        log.info("shutting down", extra=logs.kv(signal=name, grace_seconds=grace))
        # shutdown() waits for serve_forever(), which this (main) thread is running.
        threading.Thread(target=server.shutdown, daemon=True).start()

    def ignore(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            log.warning("reload is not supported; restart the service", extra=logs.kv(signal=name))
        else:
            log.warning("signal ignored: it has no meaning here", extra=logs.kv(signal=name))

    # Every signal whose default action ends the process quietly is handled: a stop gets
    # a log line and a clean exit, a reload request or stray user signal a log line.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, stop)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, ignore)
    batch.log_implementation()
    # What start-up built (modules, the collectors, the profile) lives as long as the
    # process: out of the collector's reach, each full collection no longer walks it
    # (gc.freeze, Python's gc module documentation).
    gc.collect()
    gc.freeze()
    for bound in server.server_addresses:
        log.info(
            "listening",
            extra=logs.kv(
                address=format_address(bound),
                tls=web_config is not None and web_config.ssl_context is not None,
                systemd_socket=bool(args.web_systemd_socket),
                collectors=",".join(scraper.collector_names),
                profile=scraper.profile.name,
                version=__version__,
            ),
        )
    # The scraper is built and every socket listens: /-/ready may say so.
    server.mark_ready()
    try:
        server.serve_forever()
        cut = server.drain(grace)
        log.info("stopped", extra=logs.kv(signal=",".join(stopping) or "none", requests_cut=cut))
    finally:
        server.server_close()
    return EXIT_OK


def cmd_dump(args: argparse.Namespace, scraper: Scraper) -> int:
    sys.stdout.buffer.write(exposition(scraper.collect(args.scrape_timeout)))
    sys.stdout.flush()
    return EXIT_OK


def node_name(rootfs: str) -> str:
    """The node the report is about: the host's name, also when run from a container."""
    if os.path.normpath(rootfs) != "/":
        try:
            name = read_text(os.path.join(rootfs, "etc", "hostname"))
            if name:
                return name
        except (OSError, ValueError):
            pass
    return socket.gethostname()


def cmd_check(args: argparse.Namespace, scraper: Scraper) -> int:
    collection = scraper.collect(args.scrape_timeout)
    node = node_name(args.path_rootfs)
    if args.format == "json":
        out = json.dumps(render_json(node, scraper.profile, collection.results), indent=2)
    else:
        out = render_text(node, scraper.profile, collection.results)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    if any(r.check_error for r in collection.results):
        # A check raised: an internal error (logged with its traceback by evaluate). The
        # report is printed, but it is incomplete, so neither 0 nor 1 would be true.
        return EXIT_ERROR
    failed = any(r.status == Status.FAIL for r in collection.results)
    return EXIT_FAILED if failed else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logs.setup(args.log_level, args.log_format)
    try:
        scraper = build_scraper(args)
    except ProfileError as exc:
        log.error("invalid profile", extra=logs.kv(err=str(exc)))
        return EXIT_ERROR
    except Exception as exc:  # start-up must end in one line and exit 2, never a traceback
        log.error("cannot start", extra=logs.kv(err=f"{type(exc).__name__}: {exc}"))
        return EXIT_ERROR
    command = {"serve": cmd_serve, "dump": cmd_dump, "check": cmd_check}[args.command]
    try:
        return command(args, scraper)
    except BrokenPipeError:
        return EXIT_OK  # `cephnode-exporter dump | head` is not an error
    except Exception:
        log.exception("internal error")
        return EXIT_ERROR
    finally:
        scraper.close()
