"""The Debian package: `make deb`'s build (deploy/build-deb.sh), lintian, and the package
installed with apt into a fresh Debian 12 chroot, where it runs on Debian's own Python
libraries.

The chroot is tests/chroots.py's cached bookworm minbase with systemd (built once per
machine, about a minute); each test gets a throwaway overlay of it (overlayfs), so every
installation starts from the same fresh system and the cache stays untouched. apt finds
the dependencies' archives in the cached tree and installs without the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import chroots
from tests.conftest import GOLDEN, REPO, need, need_root, need_tool, run_cli
from tests.fixtures.sysfsgen import build_tree, load_node
from tests.test_deploy import MAX_EXPOSURE, parse_unit
from tests.test_golden import promtool_check_metrics
from tests.test_packaging import same_exposition

VERSION = re.search(
    r'^__version__ = "(.*)"$',
    (REPO / "exporter/cephnode_exporter/__init__.py").read_text(),
    re.M,
).group(1)  # type: ignore[union-attr]
# Architecture any: the package carries the compiled reader (hostfs/_fastread.c).
ARCH = (
    subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    if shutil.which("dpkg")
    else "unknown"
)
DEB = f"cephnode-exporter_{VERSION}_{ARCH}.deb"
SHARE = "usr/share/cephnode-exporter"
# lintian tags the package keeps, each explained in docs/packaging.md. Errors are never
# kept: deploy/build-deb.sh fails on them.
KEPT_TAGS = {
    # Info: systemd is the package's only init system; the unit's sandbox has no
    # sysvinit equivalent.
    "package-supports-alternative-init-but-no-init.d-script",
}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`make deb`'s script into a temporary directory: the .deb and the build's stderr."""
    for tool, package in (
        ("dpkg-buildpackage", "dpkg-dev"),
        ("dh", "debhelper"),
        ("dh_python3", "dh-python"),
        ("lintian", "lintian"),
    ):
        need_tool(tool, package)
    need(
        Path("/usr/share/dh-python/dhpython/build/plugin_pyproject.py").exists(),
        "pybuild's pyproject plugin missing (Debian package pybuild-plugin-pyproject)",
    )
    out = tmp_path_factory.mktemp("deb")
    proc = subprocess.run(
        [str(REPO / "deploy/build-deb.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return out / DEB, proc.stderr


def deb_file(deb: Path, path: str) -> str:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    proc = subprocess.run(
        ["tar", "-xOf", "-", f"./{path}"], input=tar.stdout, capture_output=True, check=True
    )
    return proc.stdout.decode()


def test_lintian_reports_no_error_and_only_known_tags(build: tuple[Path, str]) -> None:
    _, log = build
    assert "lintian " + DEB in log, "lintian did not run"
    tags = re.findall(r"^([EWIPXO]): cephnode-exporter[^:]*: (\S+)", log, re.M)
    assert [t for t in tags if t[0] == "E"] == []
    unexplained = {tag for _, tag in tags} - KEPT_TAGS
    assert unexplained == set(), f"new lintian tags, fix or explain them: {unexplained}"


def test_package_fields(build: tuple[Path, str]) -> None:
    deb, _ = build
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture", "Depends", "Recommends"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"Version: {VERSION}\n" in fields
    assert f"Architecture: {ARCH}\n" in fields
    depends = re.search(r"^Depends: (.*)$", fields, re.M).group(1)  # type: ignore[union-attr]
    for needed in (
        "python3-prometheus-client (>= 0.16)",
        "python3-pyudev (>= 0.24)",
        "python3:any",
    ):
        assert needed in depends
    # dh_installsysusers: something must provide systemd-sysusers.
    assert "systemd | systemd-standalone-sysusers | systemd-sysusers" in depends
    assert re.search(r"^Recommends: .*\blinux-perf\b", fields, re.M)


def test_package_contents(build: tuple[Path, str]) -> None:
    deb, _ = build
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    paths = {line.split()[-1].removeprefix("./") for line in listing.splitlines()}
    compiled = re.compile(
        r"usr/lib/python3/dist-packages/cephnode_exporter/hostfs/_fastread\.cpython-\S+\.so"
    )
    assert any(compiled.fullmatch(p) for p in paths), "the compiled reader is not packaged"
    for path in (
        "usr/bin/cephnode-exporter",
        "usr/lib/python3/dist-packages/cephnode_exporter/cli.py",
        "usr/lib/python3/dist-packages/cephnode_exporter/profiles/default.yaml",
        "lib/systemd/system/cephnode-exporter.service",
        "lib/systemd/system/cephnode-exporter.socket",
        "usr/lib/sysusers.d/cephnode-exporter.conf",
        "etc/default/cephnode-exporter",
        "usr/share/man/man1/cephnode-exporter.1.gz",
        f"{SHARE}/prometheus/cephnode-rules.yml",
        f"{SHARE}/prometheus/cephnode-alerts.yml",
        f"{SHARE}/prometheus/prometheus.yml",
        f"{SHARE}/alertmanager/alertmanager.yml",
        f"{SHARE}/grafana/dashboards/cephnode-fleet.json",
        f"{SHARE}/grafana/dashboards/cephnode-node.json",
        f"{SHARE}/grafana/provisioning/dashboards/cephnode-exporter.yaml",
        f"{SHARE}/grafana/provisioning/datasources/cephnode-exporter.yaml",
        "usr/share/doc/cephnode-exporter/copyright",
    ):
        assert path in paths, path
    assert not any("__pycache__" in p for p in paths)
    # The same files as deploy/, alerts/ and dashboards/.
    for packaged, source in (
        ("usr/lib/sysusers.d/cephnode-exporter.conf", "deploy/cephnode-exporter.sysusers"),
        ("etc/default/cephnode-exporter", "deploy/cephnode-exporter.default"),
        (f"{SHARE}/prometheus/cephnode-alerts.yml", "alerts/cephnode-alerts.yml"),
        (f"{SHARE}/grafana/dashboards/cephnode-node.json", "dashboards/cephnode-node.json"),
    ):
        assert deb_file(deb, packaged) == (REPO / source).read_text(), packaged


def test_units_are_deploys_with_the_package_paths(build: tuple[Path, str]) -> None:
    """The hardened units of deploy/: only ExecStart= and Documentation= differ."""
    deb, _ = build
    for name in ("cephnode-exporter.service", "cephnode-exporter.socket"):
        packaged = parse_unit(deb_file(deb, f"lib/systemd/system/{name}"))
        source = parse_unit((REPO / "deploy" / name).read_text())
        assert packaged["Unit"].pop("Documentation") == ["man:cephnode-exporter(1)"]
        if name.endswith(".service"):
            assert packaged["Service"]["ExecStart"] == ["/usr/bin/cephnode-exporter serve $ARGS"]
            packaged["Service"]["ExecStart"] = source["Service"]["ExecStart"]
        assert packaged == source, name


def test_grafana_provider_points_at_the_packaged_dashboards(build: tuple[Path, str]) -> None:
    deb, _ = build
    provider = yaml.safe_load(
        deb_file(deb, f"{SHARE}/grafana/provisioning/dashboards/cephnode-exporter.yaml")
    )
    assert provider["apiVersion"] == 1
    [entry] = provider["providers"]
    assert entry["type"] == "file"
    assert entry["options"]["path"] == f"/{SHARE}/grafana/dashboards"
    datasources = yaml.safe_load(
        deb_file(deb, f"{SHARE}/grafana/provisioning/datasources/cephnode-exporter.yaml")
    )
    assert [d["type"] for d in datasources["datasources"]] == ["prometheus"]


# --- installed into a fresh Debian 12 -------------------------------------------------------


class Chroot:
    """A throwaway overlay of the cached bookworm chroot, with /proc mounted."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, *argv: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
        # cwd=/: apt resolves a local .deb's path against the working directory, which
        # must exist inside the chroot.
        return subprocess.run(
            ["chroot", str(self.root), "env", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"]
            + [f"{k}={v}" for k, v in env.items()]
            + list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
        )

    def install(self, deb: Path) -> subprocess.CompletedProcess:
        shutil.copy(deb, self.root / "tmp" / deb.name)
        # apt as a new user types it; Dpkg::Use-Pty=0: there is no /dev/pts here.
        return self.run(
            "apt-get", "install", "-y", "-q", "-o", "Dpkg::Use-Pty=0", f"/tmp/{deb.name}"
        )


def bookworm() -> Path:
    need_root("debootstrap, overlayfs and chroot")
    need_tool("debootstrap", "debootstrap")
    try:
        return chroots.ensure(chroots.BOOKWORM)
    except chroots.ChrootError as exc:
        need(False, f"the bookworm chroot could not be built: {exc}")
        raise


@contextlib.contextmanager
def overlay(tmp: Path) -> Iterator[Chroot]:
    base = bookworm()
    upper, work, merged = (tmp / d for d in ("upper", "work", "merged"))
    for d in (upper, work, merged):
        d.mkdir()
    mounted: list[Path] = []
    try:
        layers = f"lowerdir={base},upperdir={upper},workdir={work}"
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", layers, str(merged)],
            check=True,
            capture_output=True,
        )
        mounted.append(merged)
        subprocess.run(
            ["mount", "-t", "proc", "proc", str(merged / "proc")], check=True, capture_output=True
        )
        mounted.append(merged / "proc")
        yield Chroot(merged)
    finally:
        unmounted = [
            subprocess.run(["umount", str(path)], check=False, capture_output=True).returncode == 0
            for path in reversed(mounted)
        ]
        # The installation (a few hundred MB in the upper layer) is not kept in /tmp.
        if all(unmounted):
            shutil.rmtree(upper, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Chroot]:
    with overlay(tmp_path) as chroot:
        yield chroot


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory: pytest.TempPathFactory, build: tuple[Path, str]
) -> Iterator[Chroot]:
    """One installation shared by the tests that only read it (apt's run, mostly
    python3's byte-compiling, is most of this module's time)."""
    with overlay(tmp_path_factory.mktemp("installed")) as chroot:
        proc = chroot.install(build[0])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield chroot


def test_installs_with_apt_and_runs_on_debians_libraries(installed: Chroot) -> None:
    proc = installed.run("cephnode-exporter", "--version")
    assert (proc.returncode, proc.stdout) == (0, f"cephnode-exporter {VERSION}\n"), proc.stderr
    proc = installed.run("cephnode-exporter", "check", "--help")
    assert proc.returncode == 0 and "--format {text,json}" in proc.stdout, proc.stderr
    # The exporter imports Debian's packages, at Debian 12's versions.
    code = (
        "import importlib.metadata as m, prometheus_client\n"
        "print(prometheus_client.__file__, m.version('prometheus_client'))"
    )
    where, version = installed.run("python3", "-c", code).stdout.split()
    assert where.startswith("/usr/lib/python3/dist-packages/")
    debian = installed.run("dpkg-query", "-W", "-f=${Version}", "python3-prometheus-client")
    assert debian.stdout.startswith(version + "-"), (version, debian.stdout)
    # The hot loops read through the compiled reader the package built, not the fallback.
    code = "from cephnode_exporter.hostfs import batch; print(batch.IMPLEMENTATION)"
    proc = installed.run("python3", "-c", code)
    assert proc.stdout == "compiled\n", proc.stderr


def test_installed_user_directories_and_enablement(installed: Chroot) -> None:
    root = installed.root
    passwd = (root / "etc/passwd").read_text()
    entry = re.search(r"^cephnode-exporter:x:(\d+):(\d+):[^:]*:/:/usr/sbin/nologin$", passwd, re.M)
    assert entry, passwd
    assert 0 < int(entry.group(1)) < 1000, "a system user"
    conf = (root / "etc/cephnode-exporter").stat()
    assert (conf.st_mode & 0o777, conf.st_uid, conf.st_gid) == (0o750, 0, int(entry.group(2)))
    # The service is enabled (started at boot), the socket is not (docs/packaging.md).
    wants = root / "etc/systemd/system"
    assert (wants / "multi-user.target.wants/cephnode-exporter.service").is_symlink()
    assert not (wants / "sockets.target.wants/cephnode-exporter.socket").exists()
    conffiles = installed.run("dpkg-query", "-W", "-f=${Conffiles}", "cephnode-exporter").stdout
    assert "/etc/default/cephnode-exporter" in conffiles


def test_installed_dump_and_check_on_a_fixture_node(installed: Chroot) -> None:
    """Debian's prometheus_client 0.16 gives the golden exposition (by value), and check
    judges the node as the development venv does."""
    build_tree(load_node("epyc9454p-detuned"), installed.root / "tmp/node")
    flags = [
        "--path.sysfs=/tmp/node/sys",
        "--path.procfs=/tmp/node/proc",
        "--path.rootfs=/tmp/node/root",
        "--ceph.socket-dir=/tmp/node/root/var/run/ceph",
    ]
    (installed.root / "tmp/node/root/var/run/ceph").mkdir(parents=True, exist_ok=True)
    dump = installed.run("cephnode-exporter", "dump", *flags)
    assert dump.returncode == 0 and dump.stderr == "", dump.stderr
    same_exposition(dump.stdout, (GOLDEN / "epyc9454p-detuned.prom").read_text())
    promtool_check_metrics(dump.stdout)
    check = installed.run("cephnode-exporter", "check", "--format=json", *flags)
    host_flags = [f.replace("=/tmp/node", f"={installed.root}/tmp/node") for f in flags]
    host = run_cli("check", "--format=json", *host_flags)
    assert check.returncode == host.returncode == 1, check.stderr  # the node is detuned

    def verdicts(out: str) -> dict[tuple[str, str], str]:
        return {(r["check"], r["subject"]): r["status"] for r in json.loads(out)["results"]}

    assert verdicts(check.stdout) == verdicts(host.stdout)
    assert "fail" in verdicts(check.stdout).values()


def test_installed_units_verify(installed: Chroot) -> None:
    units = ("cephnode-exporter.service", "cephnode-exporter.socket")
    # Documentation=man:cephnode-exporter(1) is checked too: verify runs man for it.
    proc = installed.run("systemd-analyze", "verify", *units, SYSTEMD_LOG_COLOR="0")
    ours = [line for line in proc.stderr.splitlines() if "cephnode-exporter" in line]
    assert ours == [] and proc.returncode == 0, proc.stderr
    proc = installed.run(
        "systemd-analyze",
        "security",
        "--offline=yes",
        "--no-pager",
        units[0],
        SYSTEMD_LOG_COLOR="0",
    )
    match = re.search(r"Overall exposure level for \S+: ([\d.]+)", proc.stdout)
    assert match and float(match.group(1)) <= MAX_EXPOSURE, proc.stdout + proc.stderr


def test_installed_rules_pass_promtool(installed: Chroot) -> None:
    """The example prometheus.yml loads the packaged rule files where they are installed."""
    promtool = need_tool("promtool", "prometheus")
    config = installed.root / SHARE / "prometheus/prometheus.yml"
    proc = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cephnode-alerts.yml" in proc.stdout and "cephnode-rules.yml" in proc.stdout


def test_install_joins_an_existing_ceph_group_and_purge_cleans_up(
    fresh: Chroot, build: tuple[Path, str]
) -> None:
    assert fresh.run("groupadd", "--system", "ceph").returncode == 0
    proc = fresh.install(build[0])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    groups = fresh.run("id", "-nG", "cephnode-exporter").stdout.split()
    assert "ceph" in groups, groups
    proc = fresh.run("apt-get", "purge", "-y", "-q", "-o", "Dpkg::Use-Pty=0", "cephnode-exporter")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for gone in (
        "usr/bin/cephnode-exporter",
        "etc/default/cephnode-exporter",
        "etc/cephnode-exporter",
        "etc/systemd/system/multi-user.target.wants/cephnode-exporter.service",
    ):
        assert not os.path.lexists(fresh.root / gone), gone
    # The system user stays, as Debian's packages leave theirs (docs/packaging.md).
    assert "cephnode-exporter:" in (fresh.root / "etc/passwd").read_text()
