"""Plumbing of the end-to-end alerting test (tests/test_alerts_e2e.py).

Three things live here, so that the test itself reads as the scenario:

- The mechanical transforms that turn the production files of ``alerts/`` into test
  files (:func:`speed_up_rules`, :func:`alertmanager_for_test`,
  :func:`prometheus_for_test`); each returns a copy and changes only the keys its
  docstring names, which :func:`without` lets the test prove.
- The real processes (:class:`Daemon`): started with their output in a log file, killed
  when pytest dies (``PR_SET_PDEATHSIG``), and stopped by the test in ``finally``.
- The webhook receiver (:class:`Webhook`): an HTTP server in a thread of the test that
  records every notification Alertmanager POSTs, with the time it arrived.
"""

from __future__ import annotations

import copy
import ctypes
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

# ----------------------------------------------------------------------------- durations

# Prometheus and Alertmanager durations: one or more <number><unit>, largest unit first.
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
    "y": 31_536_000_000,
}


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a Prometheus duration such as ``15m`` or ``1h30m``."""
    text = str(text).strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)


def format_duration_ms(ms: int) -> str:
    """The shortest exact spelling Prometheus accepts: whole seconds as ``Ns``."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


# ----------------------------------------------------------------------------- transforms

# Rule time runs this many times faster in the test: a `for: 15m` becomes 15 s.
TIME_SCALE = 60
# Every rule group is evaluated this often in the test (production: 1m).
RULE_INTERVAL = "1s"
# Alertmanager's timers in the test, for every route that sets them (production: 30s to
# 10m of group_wait, 5m to 6h of group_interval). repeat_interval stays longer than the
# test, so each alert is announced once while firing and once when resolved.
ALERTMANAGER_TIMERS = {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"}
# Scrape interval and timeout of both jobs in the test (production: 30s, 20s/25s).
SCRAPE_INTERVAL = "2s"


def without(doc: Any, keys: Iterable[str]) -> Any:
    """``doc`` with every mapping key in ``keys`` removed, at any depth: what must be
    equal between a production file and its test copy."""
    drop = set(keys)
    if isinstance(doc, dict):
        return {k: without(v, drop) for k, v in doc.items() if k not in drop}
    if isinstance(doc, list):
        return [without(v, drop) for v in doc]
    return doc


def speed_up_rules(doc: dict[str, Any]) -> dict[str, Any]:
    """A rule file for the test: every group's ``interval`` becomes :data:`RULE_INTERVAL`
    and every ``for`` is divided by :data:`TIME_SCALE`, and so is the window of every
    ``max_over_time``/``last_over_time``/``min_over_time``/``count_over_time`` (at least
    four test scrapes); nothing else changes."""
    out = copy.deepcopy(doc)
    for group in out["groups"]:
        if "interval" in group:
            group["interval"] = RULE_INTERVAL
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = format_duration_ms(parse_duration_ms(rule["for"]) // TIME_SCALE)
            # Windows that only carry a state over missed scrapes or its aftermath
            # (max_over_time, last_over_time), or count evaluations or scrapes in a
            # row (the laggy-PG page's min_over_time and count_over_time), shrink too, to
            # four test scrapes at least.
            rule["expr"] = _OVER_TIME.sub(_faster_window, rule["expr"])
    return out


_OVER_TIME = re.compile(r"((?:max|last|min|count)_over_time\([^\[]*)\[(\d+[smhd])\]")


def _faster_window(m: re.Match[str]) -> str:
    ms = max(parse_duration_ms(m.group(2)) // TIME_SCALE, 4 * parse_duration_ms(SCRAPE_INTERVAL))
    return f"{m.group(1)}[{format_duration_ms(ms)}]"


def alertmanager_for_test(doc: dict[str, Any], webhook_url: str) -> dict[str, Any]:
    """An Alertmanager configuration for the test: the route timers of
    :data:`ALERTMANAGER_TIMERS`, and every receiver that notifies anything replaced by one
    webhook to ``<webhook_url>/<receiver name>`` (resolved notifications on); receivers
    without notifiers (the blackhole) stay as they are. Routes and inhibitions unchanged."""
    out = copy.deepcopy(doc)

    def retime(route: dict[str, Any]) -> None:
        for key, value in ALERTMANAGER_TIMERS.items():
            if key in route:
                route[key] = value
        for child in route.get("routes", []):
            retime(child)

    retime(out["route"])
    for receiver in out["receivers"]:
        notifiers = [k for k in receiver if k.endswith("_configs")]
        if not notifiers:
            continue
        for key in notifiers:
            del receiver[key]
        receiver["webhook_configs"] = [
            {"url": f"{webhook_url}/{receiver['name']}", "send_resolved": True}
        ]
    return out


def prometheus_for_test(
    doc: dict[str, Any],
    *,
    cluster: str,
    targets: dict[str, str],
    alertmanager: str,
) -> dict[str, Any]:
    """A Prometheus configuration for the test: each job of ``doc`` scrapes the one
    target ``targets[job_name]`` with the job's own target labels (``cluster`` set to the
    test cluster's name), every :data:`SCRAPE_INTERVAL`; rules every
    :data:`RULE_INTERVAL`; alerts to ``alertmanager``. Job names, ``honor_labels``, the
    rule files and everything else stay as in ``doc``."""
    out = copy.deepcopy(doc)
    jobs = {job["job_name"] for job in out["scrape_configs"]}
    if jobs != set(targets):
        raise ValueError(f"jobs {sorted(jobs)} but targets for {sorted(targets)}")
    out["global"] = {
        **out.get("global", {}),
        "scrape_interval": SCRAPE_INTERVAL,
        "evaluation_interval": RULE_INTERVAL,
    }
    out["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    for job in out["scrape_configs"]:
        job["scrape_interval"] = SCRAPE_INTERVAL
        job["scrape_timeout"] = SCRAPE_INTERVAL
        labels = dict(job["static_configs"][0].get("labels", {}))
        labels["cluster"] = cluster
        job["static_configs"] = [{"labels": labels, "targets": [targets[job["job_name"]]]}]
    return out


# ----------------------------------------------------------------------------- processes

_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child must not dlopen
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the forking thread dies."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


@dataclass
class Daemon:
    """A process of the test, its stdout and stderr in ``log``."""

    name: str
    proc: subprocess.Popen
    log: Path

    def tail(self, lines: int = 25) -> str:
        state = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return f"--- {self.name} ({state}), last {lines} lines of {self.log}\n" + _tail(
            self.log, lines
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; always reaps."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(timeout=10)


def spawn(name: str, argv: list[str], log_dir: Path) -> Daemon:
    log = log_dir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            cwd=log_dir,
        )
    return Daemon(name, proc, log)


# ----------------------------------------------------------------------------- webhook


@dataclass
class Notification:
    """One POST from Alertmanager: the path (``/<receiver>``), the JSON body and the
    monotonic time it arrived."""

    path: str
    body: dict[str, Any]
    at: float

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return self.body.get("alerts", [])

    def brief(self) -> str:
        names = sorted({a["labels"].get("alertname", "?") for a in self.alerts})
        return f"{self.path} {self.body.get('status')} {names} ({len(self.alerts)} alerts)"


@dataclass
class Webhook:
    """The receiver: an HTTP server on a free loopback port, in a daemon thread."""

    notifications: list[Notification] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                with hook._lock:
                    hook.notifications.append(Notification(self.path, body, time.monotonic()))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test reports what it received itself

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)

    def summary(self) -> str:
        return "\n".join(n.brief() for n in self.received()) or "(none)"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


# ----------------------------------------------------------------------------- HTTP APIs


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def prom_api(base: str, path: str, **params: str) -> Any:
    """``data`` of a Prometheus HTTP API answer; raises on an error status."""
    url = f"{base}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    status, text = http_get(url)
    body = json.loads(text)
    if status != 200 or body.get("status") != "success":
        raise AssertionError(f"GET {url}: {status} {text[:500]}")
    return body["data"]


def prom_query(base: str, expr: str) -> list[dict[str, Any]]:
    """An instant query's vector: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
    return prom_api(base, "/api/v1/query", query=expr)["result"]


def prom_alerts(base: str) -> str:
    """Prometheus' pending and firing alerts, one line each, for failure messages."""
    try:
        alerts = prom_api(base, "/api/v1/alerts")["alerts"]
    except (OSError, ValueError, AssertionError) as exc:
        return f"(Prometheus alerts unavailable: {exc})"
    lines = []
    for a in alerts:
        labels = {k: v for k, v in a["labels"].items() if k not in ("alertname", "cluster")}
        lines.append(
            f"{a['state']:8} {a['labels'].get('alertname')} {labels} since {a['activeAt']}"
        )
    return "\n".join(sorted(lines)) or "(no pending or firing alerts)"


# ----------------------------------------------------------------------------- waiting

T = TypeVar("T")


def wait_until(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    describe: Callable[[], str],
    interval: float = 0.5,
) -> T:
    """Poll ``check`` until it returns something truthy, which is returned; after
    ``timeout`` seconds fail with ``what`` and ``describe()`` (the state of everything)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except (OSError, ValueError) as exc:  # a daemon not answering yet
            last_error = exc
        if time.monotonic() > deadline:
            note = f" (last error: {last_error})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f} s: {what}{note}\n{describe()}")
        time.sleep(interval)
