"""Flags and endpoints node_exporter's users type without looking, on the real exporter.

Each behaves as upstream's does: ``/-/healthy`` and ``/-/ready`` as Prometheus' web/web.go,
behind basic auth like every path of prometheus/exporter-toolkit's web handler; repeated
``--web.listen-address`` and ``--web.systemd-socket`` as exporter-toolkit's
web/tls_config.go (``ListenAndServe``); ``--collector.disable-defaults`` and ``collect[]``
as node_exporter's collector/collector.go and node_exporter.go; OpenMetrics negotiated as
prometheus/common's expfmt does; ``process_*`` and ``--web.disable-exporter-metrics`` as
node_exporter.go registers client_golang's process collector.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collectors import REGISTRY
from cephnode_exporter.web import make_server, systemd_listeners
from cephnode_exporter.webconfig import load_web_config
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from tests.conftest import REPO, Tree, need_tool, run_cli
from tests.test_serve import get, start
from tests.test_web import PASSWORD, Render, basic, request, write_config

LISTENING = re.compile(r"msg=listening address=(\S+):(\d+)")
# What Prometheus 2.x sends (scrape/scrape.go, scrapeAcceptHeader).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def success_series(body: str) -> set[str]:
    """The collectors a scrape ran: its cephnode_scrape_collector_success labels."""
    return set(re.findall(r'cephnode_scrape_collector_success\{collector="(\w+)"\}', body))


@pytest.fixture
def detuned(node_trees: dict[str, Tree]) -> list[str]:
    return node_trees["epyc9454p-detuned"].flags


# --- 1. /-/healthy and /-/ready ---------------------------------------------------------


def test_healthy_and_ready_on_the_real_exporter(
    processes: list[subprocess.Popen], detuned: list[str]
) -> None:
    _, base = start(processes, *detuned)
    assert get(base + "/-/healthy")[:2] == (200, "cephnode-exporter is Healthy.\n")
    assert get(base + "/-/ready")[:2] == (200, "cephnode-exporter is Ready.\n")
    head = urllib.request.Request(base + "/-/ready", method="HEAD")
    with urllib.request.urlopen(head, timeout=5) as r:
        assert r.status == 200 and r.read() == b""


def test_ready_only_once_marked_and_not_while_stopping() -> None:
    server = make_server("127.0.0.1:0", "/metrics", Render())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        status, _, body = request(server, "/-/ready")
        assert (status, body) == (503, b"Service Unavailable\n")
        assert request(server, "/-/healthy")[0] == 200  # alive, though not ready
        server.mark_ready()
        assert request(server, "/-/ready")[::2] == (200, b"cephnode-exporter is Ready.\n")
    finally:
        server.shutdown()
        thread.join(5)
    assert not server.ready  # a stop began: a kept-alive probe would get 503 now
    server.server_close()


def test_probes_are_behind_basic_auth_like_every_path(tmp_path: Path) -> None:
    """exporter-toolkit's webHandler checks basic auth before any path is served."""
    import bcrypt

    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  alice: '{hashed}'\n"))
    server = make_server("127.0.0.1:0", "/metrics", Render(), cfg)
    server.mark_ready()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        for path in ("/-/healthy", "/-/ready"):
            assert request(server, path)[0] == 401
            assert request(server, path, headers=basic("alice", PASSWORD))[0] == 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_telemetry_path_cannot_take_a_probe_path() -> None:
    with pytest.raises(ValueError, match="reserved"):
        make_server("127.0.0.1:0", "/-/ready", Render())


# --- 2. repeated --web.listen-address ---------------------------------------------------


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def test_listens_on_every_listen_address(
    processes: list[subprocess.Popen], detuned: list[str]
) -> None:
    ports = [free_port("127.0.0.1"), free_port("127.0.0.1")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cephnode_exporter",
            "serve",
            *(f"--web.listen-address=127.0.0.1:{p}" for p in ports),
            *detuned,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    processes.append(proc)
    assert proc.stderr is not None
    seen: list[int] = []
    while len(seen) < 2:
        line = proc.stderr.readline()
        assert line, f"exporter exited: {proc.poll()}"
        if match := LISTENING.search(line):
            seen.append(int(match.group(2)))
    assert seen == ports  # one "listening" line per address, in the order given
    for port in ports:
        status, body, _ = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and 'collector="cpuidle"} 1.0' in body


def test_one_bad_listen_address_starts_nothing() -> None:
    port = free_port("127.0.0.1")
    proc = run_cli(
        "serve", f"--web.listen-address=127.0.0.1:{port}", "--web.listen-address=nonsense"
    )
    assert proc.returncode == 2 and "cannot listen" in proc.stderr
    # The first address was never bound (addresses are checked first), nor left bound.
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_listen_addresses_share_one_server() -> None:
    server = make_server(["127.0.0.1:0", "127.0.0.1:0"], "/metrics", Render())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        assert len(server.server_addresses) == 2
        for host, port in server.server_addresses:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as r:
                assert r.status == 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- 3. --collector.disable-defaults ----------------------------------------------------


def test_disable_defaults_parses_as_node_exporter() -> None:
    default_on = {name for name, cls in REGISTRY.items() if cls.default_enabled}
    args = parse_args(["dump"])
    assert {n for n in REGISTRY if getattr(args, f"collector_{n}")} == default_on
    args = parse_args(["dump", "--collector.disable-defaults", "--collector.cpufreq"])
    assert {n for n in REGISTRY if getattr(args, f"collector_{n}")} == {"cpufreq"}
    # An explicit flag wins either way, whatever its place on the line.
    args = parse_args(["dump", "--collector.kprofile", "--collector.disable-defaults"])
    assert {n for n in REGISTRY if getattr(args, f"collector_{n}")} == {"kprofile"}
    args = parse_args(["dump", "--no-collector.cpufreq"])
    assert not args.collector_cpufreq and args.collector_cpuidle


def test_disable_defaults_on_the_real_exporter(
    processes: list[subprocess.Popen], detuned: list[str]
) -> None:
    _, base = start(processes, *detuned, "--collector.disable-defaults", "--collector.cpufreq")
    status, body, _ = get(base + "/metrics")
    assert status == 200
    assert success_series(body) == {"cpufreq"}
    assert "cephnode_cpu_scaling_driver_cpus{" in body and "cephnode_cpu_idle_" not in body


# --- 4. collect[] -----------------------------------------------------------------------


def test_collect_filter_scrapes_a_subset(
    processes: list[subprocess.Popen], detuned: list[str]
) -> None:
    _, base = start(processes, *detuned)
    assert success_series(get(base + "/metrics")[1]) == {
        n for n, cls in REGISTRY.items() if cls.default_enabled
    }
    status, body, _ = get(base + "/metrics?collect[]=cpufreq&collect[]=kernel")
    assert status == 200 and success_series(body) == {"cpufreq", "kernel"}
    assert "cephnode_cpu_idle_" not in body
    # Repeats are one name; the brackets may come percent-encoded, as clients send them.
    status, body, _ = get(base + "/metrics?collect%5B%5D=cpufreq&collect[]=cpufreq")
    assert status == 200 and success_series(body) == {"cpufreq"}
    # Other parameters are not filters (node_exporter reads collect[] only).
    assert success_series(get(base + "/metrics?x=1")[1]) == success_series(
        get(base + "/metrics")[1]
    )


def test_collect_filter_refuses_unknown_and_disabled_collectors(
    processes: list[subprocess.Popen], detuned: list[str]
) -> None:
    _, base = start(processes, *detuned)
    status, body, headers = get(base + "/metrics?collect[]=cpufreq&collect[]=bogus")
    assert status == 400
    assert body == (
        "Couldn't create filtered metrics handler: couldn't create collector: "
        "missing collector: bogus\n"
    )
    assert headers["Content-Type"].startswith("text/plain")
    status, body, _ = get(base + "/metrics?collect[]=kprofile")  # off by default
    assert status == 400 and body.endswith("disabled collector: kprofile\n")


def test_filtered_and_plain_scrapes_at_once_each_get_their_collectors(
    detuned: list[str],
) -> None:
    """A filtered scrape shares a collection only with scrapes of the same subset."""
    scraper = build_scraper(parse_args(["serve", *detuned]))
    everything = set(scraper.collector_names)
    wanted = {
        None: everything,
        frozenset({"cpufreq"}): {"cpufreq"},
        frozenset({"kernel", "cpufreq"}): {"kernel", "cpufreq"},
        frozenset(everything): everything,  # all of them named: the plain round
    }
    try:
        with ThreadPoolExecutor(12) as pool:
            jobs = [(only, pool.submit(scraper.collect, 10.0, only)) for only in 3 * list(wanted)]
            for only, job in jobs:
                outcomes = job.result().outcomes
                assert {o.name for o in outcomes} == wanted[only]
                assert all(o.success for o in outcomes)
    finally:
        scraper.close()


# --- 5. OpenMetrics ---------------------------------------------------------------------


def test_openmetrics_is_negotiated(processes: list[subprocess.Popen], detuned: list[str]) -> None:
    _, base = start(processes, *detuned)
    _, text, headers = get(base + "/metrics")
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    status, om, headers = get(base + "/metrics", {"Accept": PROMETHEUS_ACCEPT})
    assert status == 200
    assert headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert "Accept" in headers["Vary"]
    assert om.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(om)}  # strict parser
    classic = {f.name: f for f in text_families(text)}
    # The same families, the same series (values of counters and gauges that do not move).
    assert set(families) == set(classic)
    name = "cephnode_cpu_idle_state_enabled_cpus"
    assert {(tuple(sorted(s.labels.items())), s.value) for s in families[name].samples} == {
        (tuple(sorted(s.labels.items())), s.value) for s in classic[name].samples
    }
    # Text preferred, or nothing said: the classic format.
    for accept in ("text/plain;version=0.0.4", "*/*", "application/openmetrics-text;q=0,*/*"):
        assert get(base + "/metrics", {"Accept": accept})[2]["Content-Type"].startswith(
            "text/plain"
        )
    # With a filter and gzip as well.
    req = urllib.request.Request(
        base + "/metrics?collect[]=cpufreq",
        headers={"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip"},
    )
    with urllib.request.urlopen(req, timeout=15) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        body = gzip.decompress(r.read()).decode()
    assert body.endswith("# EOF\n") and success_series(body) == {"cpufreq"}
    list(text_string_to_metric_families(body))


# --- 6. process_* and --web.disable-exporter-metrics -----------------------------------


def _soft_nofile(pid: int) -> float:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return float(line.split()[3])
    raise AssertionError("no open files limit")


def test_process_metrics_of_the_exporter(
    processes: list[subprocess.Popen], detuned: list[str]
) -> None:
    proc, base = start(processes, *detuned)
    _, body, _ = get(base + "/metrics")
    values = {
        f.name: f.samples[0].value for f in text_families(body) if f.name.startswith("process_")
    }
    assert set(values) == {
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_cpu_seconds",  # the parser names a counter without _total
        "process_open_fds",
        "process_max_fds",
        "process_threads",
    }
    assert values["process_resident_memory_bytes"] > 5e6
    assert 0 < values["process_cpu_seconds"] < 600
    assert abs(values["process_start_time_seconds"] - time.time()) < 120
    # Read in the exporter's own /proc/self, not the fixture tree's --path.procfs.
    assert values["process_max_fds"] == _soft_nofile(proc.pid)
    assert values["process_open_fds"] >= 4  # stdio and the listener at least
    assert values["process_threads"] >= 2  # the accept loop and this connection
    # `dump` is not the daemon: its exposition (and the golden files) have none.
    assert "process_" not in run_cli("dump", *detuned).stdout


def test_disable_exporter_metrics(processes: list[subprocess.Popen], detuned: list[str]) -> None:
    _, base = start(processes, *detuned, "--web.disable-exporter-metrics")
    _, body, _ = get(base + "/metrics")
    assert "process_" not in body and "cephnode_exporter_build_info" in body


# --- 7. --web.systemd-socket ------------------------------------------------------------

# What systemd does before exec (sd_listen_fds(3)): the socket at fd 3, LISTEN_FDS, and
# LISTEN_PID set to the pid of the process that is exec'ed (exec keeps the pid).
LAUNCHER = """
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDNAMES"] = "cephnode-exporter.socket"
os.execv(sys.executable, [sys.executable, "-m", "cephnode_exporter", *sys.argv[2:]])
"""


def test_systemd_socket_activation(processes: list[subprocess.Popen], detuned: list[str]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    with listener:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-c", LAUNCHER, str(listener.fileno()), "serve"),
                *("--web.systemd-socket", "--web.listen-address=127.0.0.1:1", *detuned),
            ],
            pass_fds=(listener.fileno(),),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
    processes.append(proc)
    assert proc.stderr is not None
    line = ""
    while "msg=listening" not in line:
        line = proc.stderr.readline()
        assert line, f"exporter exited: {proc.poll()}"
    # The passed socket, not --web.listen-address (ignored, as exporter-toolkit does).
    assert f"address=127.0.0.1:{port}" in line and "systemd_socket=True" in line, line
    # Our copy is closed: the exporter alone holds the socket systemd would have made.
    status, body, _ = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and 'collector="cpuidle"} 1.0' in body
    assert get(f"http://127.0.0.1:{port}/-/ready")[0] == 200


def test_systemd_socket_without_sockets_is_a_startup_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    proc = run_cli("serve", "--web.systemd-socket", env=env)
    assert proc.returncode == 2
    assert "no socket activation file descriptors found" in proc.stderr


def test_systemd_listeners_follow_sd_listen_fds() -> None:
    # For another process: ignored, and the variables removed all the same.
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "x"}
    assert systemd_listeners(env) == [] and env == {}
    assert systemd_listeners({}) == []
    with pytest.raises(ValueError, match="not numbers"):
        systemd_listeners({"LISTEN_PID": "me", "LISTEN_FDS": "1"})


def test_systemd_socket_refuses_a_socket_that_does_not_listen(
    processes: list[subprocess.Popen],
) -> None:
    unbound = socket.socket()
    with unbound:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                LAUNCHER,
                str(unbound.fileno()),
                "serve",
                "--web.systemd-socket",
            ],
            pass_fds=(unbound.fileno(),),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
    processes.append(proc)
    assert proc.wait(timeout=30) == 2
    assert proc.stderr is not None and "not a listening stream socket" in proc.stderr.read()


def test_socket_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = need_tool("systemd-analyze", "systemd")
    root = tmp_path / "root"
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    dist = Path("/usr/lib/systemd/system")
    if dist.is_dir():
        shutil.copytree(dist, root / "usr/lib/systemd/system", symlinks=True)
    binary = root / "opt/cephnode-exporter/venv/bin/cephnode-exporter"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    for name in ("cephnode-exporter.socket", "cephnode-exporter.service"):
        shutil.copy(REPO / "deploy" / name, units / name)
    proc = subprocess.run(
        [tool, "verify", f"--root={root}", "cephnode-exporter.socket"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER=""),
    )
    complaints = [line for line in proc.stderr.splitlines() if "cephnode-exporter" in line]
    assert complaints == [] and proc.returncode == 0, proc.stderr
    text = (REPO / "deploy/cephnode-exporter.socket").read_text()
    assert "ListenStream=10060" in text and "Accept=no" in text
    assert "--web.systemd-socket" in (REPO / "deploy/cephnode-exporter.service").read_text()
