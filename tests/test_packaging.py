"""The Python packaging: PEP 621 metadata in pyproject.toml, minimum versions that are
tested, and the Debian packaging's agreement with both (docs/packaging.md).

The minimum versions are run for real: a throwaway venv (no system site packages) gets
exactly the declared minimums from the package index, and the exporter installed there
must produce the golden exposition (the same samples and values; see
:func:`same_exposition`), pass ``promtool check metrics``, and serve a scrape in both
formats behind basic auth (bcrypt at its minimum).
"""

from __future__ import annotations

import ast
import base64
import math
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import GOLDEN, REPO, Tree, need
from tests.test_deploy import free_port
from tests.test_golden import normalise, promtool_check_metrics

PYPROJECT = REPO / "pyproject.toml"
DEBIAN = REPO / "deploy" / "debian"
MANPAGE = REPO / "deploy" / "cephnode-exporter.1"
# The Debian package of each PEP 621 dependency (deploy/debian/control).
DEBIAN_NAMES = {
    "prometheus_client": "python3-prometheus-client",
    "pyudev": "python3-pyudev",
    "PyYAML": "python3-yaml",
    "bcrypt": "python3-bcrypt",
}


def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def minimums() -> dict[str, str]:
    """Dependency -> its declared minimum; every dependency must have exactly one."""
    out = {}
    for spec in project()["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)", spec)
        assert match, f"{spec!r}: give every runtime dependency a minimum (name>=version)"
        out[match.group(1)] = match.group(2)
    return out


# --- exposition text compared by value ---------------------------------------------------


def exposition_values(text: str) -> list[tuple[str, str | float]]:
    """Each line as (line, None-like marker) for comments, (series, value) for samples.

    prometheus_client before 0.26 writes large numbers with a zero-padded exponent
    (``1.43969983499e+011``) where Go's strconv and later releases write ``e+11``; both
    are the same float to every Prometheus parser, so samples compare as floats. Series,
    HELP and TYPE lines compare as text.
    """
    out: list[tuple[str, str | float]] = []
    for line in normalise(text).splitlines():
        if not line or line.startswith("#"):
            out.append((line, ""))
            continue
        series, _, raw = line.rpartition(" ")
        try:
            value = float(raw)
        except ValueError:  # normalise()'s placeholders
            out.append((series, raw))
            continue
        out.append((series, "NaN" if math.isnan(value) else value))
    return out


def same_exposition(actual: str, expected: str) -> None:
    got, want = exposition_values(actual), exposition_values(expected)
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g == w, f"line {i + 1}: {g!r} != {w!r}"
    assert len(got) == len(want), f"{len(got)} lines, the golden file has {len(want)}"


def test_same_exposition_tells_values_apart() -> None:
    golden = (GOLDEN / "epyc9454p-detuned.prom").read_text()
    same_exposition(golden.replace("e+11\n", "e+011\n"), golden)
    changed = re.sub(r"(?m)^(cephnode_cpu_idle_state_entries_total\S*) (\S+)$", r"\1 7", golden)
    assert changed != golden
    with pytest.raises(AssertionError, match="cephnode_cpu_idle_state_entries_total"):
        same_exposition(changed, golden)


# --- metadata ------------------------------------------------------------------------------


def test_metadata_is_pep_621_only() -> None:
    assert not (REPO / "setup.cfg").exists(), "the metadata lives in pyproject.toml"
    # setup.py only declares the C extension (hostfs/_fastread.c): Debian 12's
    # setuptools 66 reads no ext-modules from pyproject.toml (setuptools 74.1, experimental).
    tree = ast.parse((REPO / "setup.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == "setup"]
    assert len(calls) == 1 and not calls[0].args, "one setup() call, keywords only"
    assert [k.arg for k in calls[0].keywords] == ["ext_modules"], "metadata belongs in pyproject"
    meta = project()
    assert meta["name"] == "cephnode-exporter"
    assert meta["dynamic"] == ["version"]
    assert meta["scripts"] == {"cephnode-exporter": "cephnode_exporter.cli:main"}
    assert "psutil" not in " ".join(meta["dependencies"]), "psutil is for the tests only"
    assert any(s.startswith("psutil") for s in meta["optional-dependencies"]["test"])
    assert set(minimums()) == set(DEBIAN_NAMES)


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def control_depends() -> dict[str, str]:
    text = (DEBIAN / "control").read_text()
    binary = text.split("\nPackage: cephnode-exporter\n", 1)[1]
    match = re.search(r"^Depends:(.*?)^\S", binary, re.M | re.S)
    assert match, "no Depends: in the binary package's stanza"
    found = re.findall(r"([a-z0-9.+-]+)\s*\(>=\s*([^)\s]+)\)", match.group(1))
    return dict(found)


def test_debian_depends_carry_the_declared_minimums() -> None:
    depends = control_depends()
    for name, version in minimums().items():
        assert depends.get(DEBIAN_NAMES[name]) == version, (
            f"deploy/debian/control: {DEBIAN_NAMES[name]} (>= {version}) expected"
        )


def test_changelog_version_is_the_package_version() -> None:
    from cephnode_exporter import __version__

    first = (DEBIAN / "changelog").read_text().splitlines()[0]
    match = re.fullmatch(r"cephnode-exporter \(([^)]+)\) \S+; urgency=\w+", first)
    assert match, first
    assert match.group(1) == __version__, "add a deploy/debian/changelog entry"


def test_man_page_is_current() -> None:
    sys.path.insert(0, str(REPO / "deploy"))
    try:
        import manpage  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert MANPAGE.read_text() == manpage.render(), "stale: `make man` rewrites it"


def test_man_page_documents_every_flag_and_renders_cleanly() -> None:
    from cephnode_exporter.cli import build_parser

    text = MANPAGE.read_text().replace("\\-", "-")
    for sub in ("serve", "dump", "check"):
        proc = subprocess.run(
            [sys.executable, "-m", "cephnode_exporter", sub, "--help"],
            capture_output=True,
            text=True,
            check=True,
        )
        for flag in set(re.findall(r"--[a-z][\w.-]*[a-z]", proc.stdout)):
            assert flag in text, f"{flag} ({sub}) missing from the man page"
    assert build_parser().prog == "cephnode-exporter"
    for section in ("OPTIONS", "ENDPOINTS", "EXIT STATUS", "FILES"):
        assert f".SH {section}" in text
    man = shutil.which("man")
    need(man is not None, "man not found (Debian package man-db)")
    proc = subprocess.run(
        [str(man), "--warnings", "-l", "-Tutf8", str(MANPAGE)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "MANWIDTH": "80"},
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


# --- the minimum versions, installed and run ------------------------------------------------


@pytest.fixture(scope="module")
def minimum_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with exactly the declared minimums and the exporter (from a copy of the
    checkout, so no build directory is left in it)."""
    base = tmp_path_factory.mktemp("minimums")
    src = base / "src"
    src.mkdir()
    shutil.copy(PYPROJECT, src)
    shutil.copy(REPO / "README.md", src)
    shutil.copytree(
        REPO / "exporter",
        src / "exporter",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
    venv = base / "venv"
    # --without-pip + the suite's pip would tie the test to this venv; a real one instead.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pins = [f"{name}=={version}" for name, version in minimums().items()]
    pip = [str(venv / "bin/python"), "-m", "pip", "--disable-pip-version-check"]
    proc = subprocess.run(
        [*pip, "install", "--quiet", str(src), *pins],
        capture_output=True,
        text=True,
        timeout=600,
    )
    need(proc.returncode == 0, f"pip could not install {' '.join(pins)}: {proc.stderr[-2000:]}")
    return venv


def installed_versions(venv: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, sys\n"
        "for name in sys.argv[1:]: print(name, m.version(name))\n"
    )
    proc = subprocess.run(
        [str(venv / "bin/python"), "-c", code, *minimums()],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split() for line in proc.stdout.splitlines())


def test_minimum_versions_give_the_golden_exposition(
    minimum_venv: Path, node_trees: dict[str, Tree]
) -> None:
    for name, version in installed_versions(minimum_venv).items():
        # 0.16 is installed as 0.16.0: the same version to PEP 440.
        assert version.split(".")[:2] == minimums()[name].split(".")[:2], (name, version)
    proc = subprocess.run(
        [
            str(minimum_venv / "bin/cephnode-exporter"),
            "dump",
            *node_trees["epyc9454p-detuned"].flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    same_exposition(proc.stdout, (GOLDEN / "epyc9454p-detuned.prom").read_text())
    promtool_check_metrics(proc.stdout)


def fetch(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_minimum_versions_serve_both_formats_behind_basic_auth(
    minimum_venv: Path, node_trees: dict[str, Tree], tmp_path: Path
) -> None:
    python = str(minimum_venv / "bin/python")
    hashed = subprocess.run(
        [
            python,
            "-c",
            "import bcrypt; print(bcrypt.hashpw(b's3cret', bcrypt.gensalt(4)).decode())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    config = tmp_path / "web-config.yml"
    config.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                str(minimum_venv / "bin/cephnode-exporter"),
                "serve",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--web.config.file={config}",
                *node_trees["epyc9454p-detuned"].flags,
            ],
            stdout=out,
            stderr=out,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _, _ = fetch(f"{base}/-/healthy")
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert status == 401
        auth = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
        status, headers, body = fetch(f"{base}/metrics", Authorization=auth)
        assert status == 200, body
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = body.decode()
        assert "cephnode_exporter_build_info{" in text
        assert re.search(r"^process_resident_memory_bytes \S+$", text, re.M)
        status, headers, body = fetch(
            f"{base}/metrics", Authorization=auth, Accept="application/openmetrics-text"
        )
        assert status == 200
        assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        assert body.endswith(b"# EOF\n")
        status, _, _ = fetch(f"{base}/metrics", Authorization="Basic " + "eDp5")
        assert status == 401
    finally:
        server.terminate()
        server.wait(timeout=30)
