"""The real daemon: `python -m cephnode_exporter serve` over HTTP, start to shutdown."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import MakeTree, Tree, run_cli

LISTENING = re.compile(r"msg=listening address=(\S+):(\d+)")


def start(processes: list[subprocess.Popen], *args: str) -> tuple[subprocess.Popen, str]:
    """Start the daemon on an ephemeral loopback port; return it and its base URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cephnode_exporter",
            "serve",
            "--web.listen-address=127.0.0.1:0",
            *args,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    processes.append(proc)
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = LISTENING.search(line)
        if match:
            return proc, f"http://127.0.0.1:{match.group(2)}"
    raise AssertionError(f"daemon did not start: exit {proc.poll()}")


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=15) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def test_serves_fixture_metrics_landing_page_and_404(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree]
) -> None:
    _, base = start(processes, *node_trees["epyc9454p-detuned"].flags)
    status, body, headers = get(base + "/")
    assert status == 200 and 'href="/metrics"' in body
    status, body, headers = get(base + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'cephnode_cpu_idle_state_enabled_cpus{state="C2"} 96.0' in body
    assert 'cephnode_tuning_check_failed{check="cpu.cstates",subject=""} 1.0' in body
    assert get(base + "/nothing")[0] == 404
    assert get(base + "/metrics/../etc/passwd")[0] == 404


def test_serves_this_machine(processes: list[subprocess.Popen]) -> None:
    """What `make run` does: real metrics of the machine the test runs on."""
    _, base = start(processes)
    _, body, _ = get(base + "/metrics")
    assert 'cephnode_scrape_collector_success{collector="cpuidle"} 1.0' in body
    assert 'cephnode_scrape_collector_success{collector="cpufreq"} 1.0' in body
    # A VM whose hypervisor exposes no idle states has current_driver "none" and no
    # per-CPU state directories: then there is nothing to export, and that is a success.
    if Path("/sys/devices/system/cpu/cpu0/cpuidle/state0").exists():
        assert "cephnode_cpu_idle_state_time_seconds_total{" in body
    else:
        assert "cephnode_cpu_idle_state_time_seconds_total{" not in body


def test_twenty_parallel_scrapes(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree]
) -> None:
    _, base = start(processes, *node_trees["epyc9454p-detuned"].flags)
    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda _: get(base + "/metrics"), range(20)))
    assert all(status == 200 for status, _, _ in results)
    assert all('collector="cpuidle"} 1.0' in body for _, body, _ in results)


def test_prometheus_scrape_timeout_header_bounds_a_hung_collector(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree], tmp_path: Path
) -> None:
    # An OSD admin socket that accepts and never answers (a SIGSTOPped OSD), with
    # timeouts far beyond the scrape's: Prometheus' header bounds the scrape.
    directory = tempfile.mkdtemp(prefix="osd-", dir="/tmp")  # AF_UNIX paths: 107 bytes
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(os.path.join(directory, "ceph-osd.0.asok"))
        listener.listen(8)
        try:
            _, base = start(
                processes,
                *node_trees["epyc9454p-detuned"].flags,
                f"--ceph.socket-dir={directory}",
                "--collector.osd.timeout=5",
                "--collector.timeout=5",
                "--scrape.timeout=6",
            )
            start_time = time.monotonic()
            status, body, _ = get(base + "/metrics", {"X-Prometheus-Scrape-Timeout-Seconds": "1.5"})
            assert time.monotonic() - start_time < 1.5
        finally:
            shutil.rmtree(directory)
    assert status == 200
    # The OSD is reported as not answering, or the osd collector as failed: never a
    # scrape that waits for it.
    assert (
        'cephnode_osd_scrape_success{ceph_daemon="osd.0"} 0.0' in body
        or 'cephnode_scrape_collector_success{collector="osd"} 0.0' in body
    ), body[-2000:]
    assert 'cephnode_scrape_collector_success{collector="cpuidle"} 1.0' in body
    assert 'cephnode_scrape_collector_success{collector="cpufreq"} 1.0' in body


def test_sigterm_stops_cleanly(
    processes: list[subprocess.Popen], node_trees: dict[str, Tree]
) -> None:
    proc, base = start(processes, *node_trees["epyc9454p-tuned"].flags)
    assert get(base + "/metrics")[0] == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_json_logs(make_tree: MakeTree) -> None:
    tree = make_tree("epyc9454p-tuned", faults={"sys/devices/system/cpu/online": "eio"})
    proc = run_cli("dump", *tree.flags, "--log.format=json")
    assert proc.returncode == 0
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    failed = [r for r in records if r["msg"] == "collector failed"]
    assert {r["collector"] for r in failed} == {"cpuidle", "cpufreq"}
    assert all(r["level"] == "error" and "Input/output error" in r["err"] for r in failed)


def test_bad_web_config_is_a_clear_startup_error(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(
        "tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n"
    )
    proc = run_cli("serve", "--web.listen-address=127.0.0.1:0", f"--web.config.file={config}")
    assert proc.returncode == 2
    assert "invalid web config" in proc.stderr and "nonexistent.crt" in proc.stderr


def test_port_in_use_is_a_clear_startup_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_cli("serve", f"--web.listen-address=127.0.0.1:{port}")
    assert proc.returncode == 2
    assert "cannot listen" in proc.stderr


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", "[::1"])
def test_bad_listen_address(address: str) -> None:
    proc = run_cli("serve", f"--web.listen-address={address}")
    assert proc.returncode == 2
    assert "cannot listen" in proc.stderr
