"""The deployment files: systemd unit, sysusers snippet, /etc/default file, install.sh.

Nothing here touches the real system. install.sh runs with ``--root`` into temporary
trees; ``systemd-analyze verify`` and ``security --offline`` run with ``--root`` on such a
tree, which works without systemd as PID 1; the unit's seccomp policy
(SystemCallFilter=, MemoryDenyWriteExecute=, RestrictAddressFamilies=) is rebuilt with
libseccomp from the unit file itself, and the real CLI runs under it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.conftest import REPO, need, need_root, need_tool

DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "cephnode-exporter.service"
SOCKET = DEPLOY / "cephnode-exporter.socket"
SYSUSERS = DEPLOY / "cephnode-exporter.sysusers"
DEFAULTS = DEPLOY / "cephnode-exporter.default"
INSTALL = DEPLOY / "install.sh"
UNIT_NAME = "cephnode-exporter.service"
SOCKET_NAME = "cephnode-exporter.socket"
USER = "cephnode-exporter"
BINARY = "/opt/cephnode-exporter/venv/bin/cephnode-exporter"
DROPIN = "etc/systemd/system/cephnode-exporter.service.d/10-ceph-group.conf"
SOCKET_DROPIN = "etc/systemd/system/cephnode-exporter.service.d/30-systemd-socket.conf"
# Measured 1.5 ("OK") with systemd 252, with and without the ceph-group drop-in; systemd
# calls everything below 2.0 "OK" (its levels in src/analyze/analyze-security.c).
MAX_EXPOSURE = 2.0

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """Sections -> key -> every value in file order (systemd keys may repeat)."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"key outside a section: {line!r}"
        assert not line.endswith("\\"), "continuation lines are not used in our files"
        key, sep, value = line.partition("=")
        assert sep, f"not key=value: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def last(unit: Unit, key: str, section: str = "Service") -> str | None:
    values = unit.get(section, {}).get(key)
    return values[-1] if values else None


@pytest.fixture(scope="module")
def unit() -> Unit:
    return parse_unit(UNIT.read_text())


# --- install.sh in a temporary root -----------------------------------------------------


def make_root(path: Path, groups: tuple[str, ...] = ()) -> Path:
    """A tree with the bare /etc/passwd and /etc/group install.sh and sysusers work on."""
    (path / "etc").mkdir(parents=True, exist_ok=True)
    (path / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    lines = ["root:x:0:"] + [f"{g}:x:{64045 + i}:" for i, g in enumerate(groups)]
    (path / "etc" / "group").write_text("\n".join(lines) + "\n")
    return path


def fake_systemctl(tmp: Path) -> tuple[dict[str, str], Path]:
    """An environment whose systemctl only records that it was called."""
    bindir = tmp / "fakebin"
    bindir.mkdir(exist_ok=True)
    log = tmp / "systemctl.log"
    script = bindir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    script.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return env, log


def run_install(
    root: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["bash", str(INSTALL), "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def need_sysusers() -> str:
    # systemd-sysusers --root keeps /etc/passwd and friends owned by root: it needs root.
    need_root("systemd-sysusers edits passwd/group files under --root")
    return need_tool("systemd-sysusers", "systemd")


def need_python_venv() -> None:
    python3 = need_tool("python3", "python3")
    venv_ok = subprocess.run([python3, "-c", "import ensurepip, venv"], capture_output=True)
    need(venv_ok.returncode == 0, "python3 cannot create venvs (Debian package python3-venv)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full install (venv built from this checkout) into a root where group ceph exists."""
    need_sysusers()
    need_python_venv()
    base = tmp_path_factory.mktemp("installed")
    root = make_root(base / "root", groups=("ceph",))
    env, log = fake_systemctl(base)
    run_install(root, "--source", str(REPO), env=env)
    assert not log.exists(), "install.sh called systemctl although --root was given"
    return root


def test_install_layout(installed: Path) -> None:
    unit = installed / "etc/systemd/system" / UNIT_NAME
    assert unit.read_text() == UNIT.read_text()
    socket_unit = installed / "etc/systemd/system" / SOCKET_NAME
    assert socket_unit.read_text() == SOCKET.read_text()
    assert socket_unit.stat().st_mode & 0o777 == 0o644
    # Installed, not used: without --socket the service binds its own address.
    assert not (installed / SOCKET_DROPIN).exists()
    assert (installed / "etc/sysusers.d/cephnode-exporter.conf").read_text() == SYSUSERS.read_text()
    assert (installed / "etc/default/cephnode-exporter").read_text() == DEFAULTS.read_text()
    for path in (unit, installed / DROPIN, installed / "etc/default/cephnode-exporter"):
        assert path.stat().st_mode & 0o777 == 0o644, path
    conf = installed / "etc/cephnode-exporter"
    assert conf.is_dir() and conf.stat().st_mode & 0o777 == 0o750
    binary = installed / BINARY.lstrip("/")
    assert os.access(binary, os.X_OK)
    # The venv must be readable by the service user whatever the installer's umask.
    assert (binary.parent.parent / "pyvenv.cfg").stat().st_mode & 0o004
    passwd = (installed / "etc/passwd").read_text().splitlines()
    entry = [line for line in passwd if line.startswith(f"{USER}:")]
    assert len(entry) == 1
    fields = entry[0].split(":")
    assert fields[2] != "0" and fields[6] == "/usr/sbin/nologin"
    dropin = parse_unit((installed / DROPIN).read_text())
    assert last(dropin, "SupplementaryGroups") == "ceph"


def test_installed_exporter_runs(installed: Path) -> None:
    binary = installed / BINARY.lstrip("/")
    proc = subprocess.run(
        [str(binary), "dump"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "cephnode_exporter_build_info" in proc.stdout


def test_install_is_idempotent_and_keeps_config(tmp_path: Path) -> None:
    need_sysusers()
    root = make_root(tmp_path / "root")
    run_install(root, "--skip-venv")
    default = root / "etc/default/cephnode-exporter"
    default.write_text('ARGS="--log.level=debug"\n')
    unit_before = (root / "etc/systemd/system" / UNIT_NAME).read_text()
    proc = run_install(root, "--skip-venv")
    assert default.read_text() == 'ARGS="--log.level=debug"\n'
    assert "keeping" in proc.stderr
    assert (root / "etc/systemd/system" / UNIT_NAME).read_text() == unit_before
    passwd = (root / "etc/passwd").read_text()
    assert passwd.count(f"\n{USER}:") == 1


def test_install_socket_option(installed: Path, tmp_path: Path) -> None:
    """--socket: the service takes the socket unit's socket (--web.systemd-socket) and
    requires the socket; the choice stays on later runs until --no-socket; both units
    pass systemd-analyze verify. On a copy of the full install, so the binary exists."""
    root = tmp_path / "root"
    shutil.copytree(installed, root, symlinks=True)
    run_install(root, "--skip-venv", "--socket")
    dropin = parse_unit((root / SOCKET_DROPIN).read_text())
    assert dropin["Unit"] == {"Requires": [SOCKET_NAME], "After": [SOCKET_NAME]}
    # The empty ExecStart= first: a drop-in's ExecStart= is added to the unit's otherwise.
    assert dropin["Service"]["ExecStart"] == ["", f"{BINARY} serve --web.systemd-socket $ARGS"]
    assert (root / SOCKET_DROPIN).stat().st_mode & 0o777 == 0o644
    tool = need_tool("systemd-analyze", "systemd")
    proc = subprocess.run(
        [tool, "verify", f"--root={analyze_root(root)}", UNIT_NAME, SOCKET_NAME],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER=""),
    )
    assert about_our_unit(proc.stderr) == [] and proc.returncode == 0, proc.stderr
    # The ceph-group drop-in is independent of it.
    assert last(parse_unit((root / DROPIN).read_text()), "SupplementaryGroups") == "ceph"
    run_install(root, "--skip-venv")
    assert (root / SOCKET_DROPIN).exists(), "a later run without --no-socket keeps it"
    run_install(root, "--skip-venv", "--no-socket")
    assert not (root / SOCKET_DROPIN).exists()
    assert (root / "etc/systemd/system" / SOCKET_NAME).exists()
    assert (root / DROPIN).exists()


def test_install_socket_follows_the_prefix(tmp_path: Path) -> None:
    need_sysusers()
    root = make_root(tmp_path / "root")
    run_install(root, "--skip-venv", "--socket", "--prefix", "/srv/cephnode")
    dropin = parse_unit((root / SOCKET_DROPIN).read_text())
    binary = "/srv/cephnode/venv/bin/cephnode-exporter"
    assert dropin["Service"]["ExecStart"] == ["", f"{binary} serve --web.systemd-socket $ARGS"]


def test_install_writes_ceph_group_dropin_only_while_the_group_exists(tmp_path: Path) -> None:
    need_sysusers()
    root = make_root(tmp_path / "root")
    proc = run_install(root, "--skip-venv")
    assert not (root / DROPIN).exists()
    assert "no group ceph" in proc.stderr
    group = root / "etc/group"
    group.write_text(group.read_text() + "ceph:x:64045:\n")
    run_install(root, "--skip-venv")
    assert last(parse_unit((root / DROPIN).read_text()), "SupplementaryGroups") == "ceph"
    # Ceph removed: a drop-in naming a missing group would make every start fail.
    group.write_text("".join(g for g in group.read_text().splitlines(True) if "ceph:" not in g))
    run_install(root, "--skip-venv")
    assert not (root / DROPIN).exists()
    # cephadm-style hosts: another group name.
    group.write_text(group.read_text() + "cephsock:x:167:\n")
    run_install(root, "--skip-venv", "--ceph-group", "cephsock")
    assert last(parse_unit((root / DROPIN).read_text()), "SupplementaryGroups") == "cephsock"


def test_install_prefix_rewrites_execstart(tmp_path: Path) -> None:
    need_sysusers()
    root = make_root(tmp_path / "root")
    proc = run_install(root, "--skip-venv", "--prefix", "/srv/cne")
    assert "does not exist" in proc.stderr  # the warning about the missing venv
    unit = parse_unit((root / "etc/systemd/system" / UNIT_NAME).read_text())
    assert last(unit, "ExecStart") == "/srv/cne/venv/bin/cephnode-exporter serve $ARGS"


def test_install_starts_nothing_and_refuses_bad_combinations(tmp_path: Path) -> None:
    need_sysusers()
    root = make_root(tmp_path / "root")
    env, log = fake_systemctl(tmp_path)
    run_install(root, "--skip-venv", env=env)
    run_install(root, "--uninstall", env=env)
    assert not log.exists()
    for args in (("--start",), ("--purge",), ("--prefix", "relative"), ("--bogus",)):
        proc = run_install(root, "--skip-venv", *args, env=env, check=False)
        assert proc.returncode != 0, args
    assert not log.exists()


def test_install_refuses_a_prefix_it_did_not_create(tmp_path: Path) -> None:
    need_python_venv()
    root = make_root(tmp_path / "root")
    (root / "usr/local/bin").mkdir(parents=True)
    proc = run_install(root, "--prefix", "/usr/local", check=False)
    assert proc.returncode != 0
    assert "holds more than a venv" in proc.stderr, proc.stderr
    assert not (root / "usr/local/.installed-by-install.sh").exists()
    assert "cephnode-exporter" not in (root / "etc/passwd").read_text()


def test_uninstall(tmp_path: Path) -> None:
    need_sysusers()
    root = make_root(tmp_path / "root", groups=("ceph",))
    run_install(root, "--skip-venv", "--socket")
    assert (root / SOCKET_DROPIN).exists()
    prefix = root / "opt/cephnode-exporter"
    # Without install.sh's marker the prefix is not removed (it could be anything).
    (prefix / "venv").mkdir(parents=True)
    proc = run_install(root, "--uninstall")
    assert prefix.exists() and "not removing" in proc.stderr
    (prefix / ".installed-by-install.sh").touch()
    run_install(root, "--uninstall")
    assert not prefix.exists()
    for gone in (
        f"etc/systemd/system/{UNIT_NAME}",
        f"etc/systemd/system/{SOCKET_NAME}",
        DROPIN,
        SOCKET_DROPIN,
        "etc/sysusers.d/cephnode-exporter.conf",
    ):
        assert not (root / gone).exists(), gone
    assert not (root / "etc/systemd/system" / f"{UNIT_NAME}.d").exists()
    # Configuration and user stay unless --purge.
    assert (root / "etc/default/cephnode-exporter").exists()
    assert f"\n{USER}:" in (root / "etc/passwd").read_text()
    run_install(root, "--uninstall", "--purge")
    assert not (root / "etc/default/cephnode-exporter").exists()
    assert not (root / "etc/cephnode-exporter").exists()
    assert f"\n{USER}:" not in (root / "etc/passwd").read_text()


def test_install_sh_syntax() -> None:
    subprocess.run(["bash", "-n", str(INSTALL)], check=True)
    assert INSTALL.stat().st_mode & 0o111, "install.sh must be executable"
    assert "set -euo pipefail" in INSTALL.read_text()


def test_install_sh_shellcheck() -> None:
    shellcheck = need_tool("shellcheck", "shellcheck")
    proc = subprocess.run([shellcheck, str(INSTALL)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


# --- the unit file ---------------------------------------------------------------------


def test_unit_runs_as_unprivileged_user(unit: Unit) -> None:
    assert last(unit, "User") == USER
    assert last(unit, "Group") == USER
    assert last(unit, "DynamicUser") is None
    # Empty assignments: no capabilities at all, not even in the bounding set.
    assert last(unit, "CapabilityBoundingSet") == ""
    assert last(unit, "AmbientCapabilities") == ""
    assert last(unit, "NoNewPrivileges") == "yes"
    # Group ceph comes from install.sh's drop-in (tested above), never from the unit,
    # where a missing group would fail every start.
    assert last(unit, "SupplementaryGroups") is None


def test_unit_hardening(unit: Unit) -> None:
    expected = {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "ProtectClock": "yes",
        "ProtectHostname": "yes",
        # Ceph OSD processes belong to another user: "invisible" would hide them.
        "ProtectProc": "default",
        "ProcSubset": "all",
        "RestrictNamespaces": "yes",
        "RestrictRealtime": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "MemoryDenyWriteExecute": "yes",
        "SystemCallArchitectures": "native",
        "UMask": "0077",
    }
    for key, value in expected.items():
        assert last(unit, key) == value, key
    assert unit["Service"]["SystemCallFilter"][0] == "@system-service"
    families = set((last(unit, "RestrictAddressFamilies") or "").split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    assert last(unit, "ReadWritePaths") is None


def test_unit_service_settings(unit: Unit) -> None:
    assert last(unit, "Type") in ("exec", "simple")
    assert last(unit, "ExecStart") == f"{BINARY} serve $ARGS"
    assert last(unit, "EnvironmentFile") == "-/etc/default/cephnode-exporter"
    assert last(unit, "Restart") == "on-failure"
    assert last(unit, "RestartSec") == "5s"
    assert last(unit, "MemoryMax") == "256M"
    # A hard CPU quota would stretch a scrape burst past the scrape timeout.
    assert last(unit, "CPUQuota") is None
    assert last(unit, "WantedBy", "Install") == "multi-user.target"


def test_default_file_sets_empty_args() -> None:
    assignments = [
        line
        for line in DEFAULTS.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert assignments == ['ARGS=""']
    proc = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; printf %s "${ARGS-unset}"', "-", str(DEFAULTS)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout == ""


def test_sysusers_creates_only_our_user(tmp_path: Path) -> None:
    sysusers = need_sysusers()
    root = make_root(tmp_path / "root")
    subprocess.run([sysusers, f"--root={root}", str(SYSUSERS)], check=True, capture_output=True)
    passwd = (root / "etc/passwd").read_text()
    group = (root / "etc/group").read_text()
    assert re.search(rf"^{USER}:x:\d+:\d+:[^:]*:/:/usr/sbin/nologin$", passwd, re.M)
    assert re.search(rf"^{USER}:x:\d+:$", group, re.M)
    assert "ceph:" not in group, "sysusers must not create group ceph"


# --- systemd-analyze ---------------------------------------------------------------------


def analyze_root(root: Path) -> Path:
    """Give ``root`` the distribution's units (targets, slices) the unit depends on."""
    src = Path("/usr/lib/systemd/system")
    need(src.is_dir(), f"{src} missing (Debian package systemd)")
    dst = root / "usr/lib/systemd/system"
    if not dst.exists():
        shutil.copytree(src, dst, symlinks=True)
    return root


def analyze(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tool = need_tool("systemd-analyze", "systemd")
    # --root loads units from the tree only, so no running systemd is involved.
    return subprocess.run(
        [tool, *args, f"--root={root}", UNIT_NAME],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER=""),
    )


def about_our_unit(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "cephnode-exporter" in line]


def test_systemd_analyze_verify(installed: Path) -> None:
    need_tool("systemd-analyze", "systemd")
    proc = analyze(analyze_root(installed), "verify")
    assert about_our_unit(proc.stderr) == [], proc.stderr
    assert proc.returncode == 0, proc.stderr


def test_systemd_analyze_verify_notices_problems(tmp_path: Path) -> None:
    """The check above is live: verify does see a missing binary and a bad directive."""
    need_tool("systemd-analyze", "systemd")
    root = analyze_root(make_root(tmp_path / "root"))
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    (units / UNIT_NAME).write_text(UNIT.read_text().replace("ProtectProc=default", "ProtectProc=x"))
    complaints = about_our_unit(analyze(root, "verify").stderr)
    assert any("not executable" in line for line in complaints), complaints
    assert any("ProtectProc" in line or "protection mode" in line for line in complaints)


def test_systemd_analyze_security_exposure(installed: Path) -> None:
    need_tool("systemd-analyze", "systemd")
    proc = analyze(analyze_root(installed), "security", "--offline=yes", "--no-pager")
    assert proc.returncode == 0, proc.stderr
    match = re.search(rf"Overall exposure level for {re.escape(UNIT_NAME)}: ([\d.]+)", proc.stdout)
    assert match, proc.stdout
    assert float(match.group(1)) <= MAX_EXPOSURE, proc.stdout
    # The two deliberate exceptions stay what the unit's comments say.
    assert re.search(r"✗ ProtectProc=", proc.stdout)
    assert re.search(r"✓ PrivateDevices=", proc.stdout)


# --- the CLI under the unit's seccomp policy ------------------------------------------------
#
# PID 1 is not systemd on the development machines, so systemd-run cannot apply the unit.
# Instead the three seccomp filters systemd 252 derives from the unit (src/shared/seccomp-util.c:
# the SystemCallFilter= allow list, MemoryDenyWriteExecute=, RestrictAddressFamilies=) are
# rebuilt with libseccomp, loaded, and the real CLI is exec'd under them.

PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ, SCMP_CMP_GE, SCMP_CMP_MASKED_EQ = 4, 5, 7
AF_MAX = 46  # AF_* values are below this on Linux 6.x (include/linux/socket.h)
PR_SET_NO_NEW_PRIVS = 38


def scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def syscall_groups() -> dict[str, list[str]]:
    """``systemd-analyze syscall-filter``: group -> members (syscalls and @groups)."""
    tool = need_tool("systemd-analyze", "systemd")
    out = subprocess.run([tool, "syscall-filter"], capture_output=True, text=True, check=True)
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif not line.strip() or not line.startswith(" "):
            current = None
        elif current is not None and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def expand(groups: dict[str, list[str]], item: str) -> set[str]:
    if not item.startswith("@"):
        return {item}
    out: set[str] = set()
    for member in groups[item]:
        out |= expand(groups, member)
    return out


def seccomp_policy(unit: Unit) -> dict[str, object]:
    """What the unit asks for, as plain data for the launcher process."""
    groups = syscall_groups()
    allowed: set[str] = set()
    for i, entry in enumerate(unit["Service"].get("SystemCallFilter", [])):
        deny = entry.startswith("~")
        items = entry.lstrip("~").split()
        assert i > 0 or not deny, "the first SystemCallFilter= must be the allow list"
        for item in items:
            allowed = allowed - expand(groups, item) if deny else allowed | expand(groups, item)
    assert allowed, "no SystemCallFilter= allow list in the unit"
    errno_name = last(unit, "SystemCallErrorNumber") or "EPERM"
    families = (last(unit, "RestrictAddressFamilies") or "").split()
    return {
        "allowed": sorted(allowed),
        "errno": getattr(errno, errno_name),
        "mdwe": last(unit, "MemoryDenyWriteExecute") == "yes",
        "families": [int(getattr(socket, f)) for f in families],
    }


def seccomp_exec() -> None:
    """Launcher: ``python -c ... POLICY_JSON ARGV...``; loads the filters, execs ARGV."""
    policy = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"), use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]

    def rule(ctx: int, action: int, name: str, *cmps: tuple[int, int, int, int]) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:  # not a syscall on this architecture
            return
        array = (ArgCmp * len(cmps))(*(ArgCmp(*c) for c in cmps)) if cmps else None
        assert lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array) == 0, name

    deny = scmp_errno(policy["errno"])
    filters = []
    if policy["mdwe"]:
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        wx = PROT_WRITE | PROT_EXEC
        rule(ctx, scmp_errno(errno.EPERM), "mmap", (2, SCMP_CMP_MASKED_EQ, wx, wx))
        for name in ("mprotect", "pkey_mprotect"):
            rule(ctx, scmp_errno(errno.EPERM), name, (2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC))
        rule(ctx, scmp_errno(errno.EPERM), "shmat", (2, SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC))
        filters.append(ctx)
    if policy["families"]:
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        no_af = scmp_errno(errno.EAFNOSUPPORT)
        for family in range(AF_MAX):
            if family not in policy["families"]:
                rule(ctx, no_af, "socket", (0, SCMP_CMP_EQ, family, 0))
        rule(ctx, no_af, "socket", (0, SCMP_CMP_GE, AF_MAX, 0))
        filters.append(ctx)
    # The allow list last: it does not allow seccomp() itself, as under systemd.
    ctx = lib.seccomp_init(deny)
    for name in policy["allowed"]:
        rule(ctx, SCMP_ACT_ALLOW, name)
    filters.append(ctx)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    for ctx in filters:
        assert lib.seccomp_load(ctx) == 0, "seccomp_load failed"
    os.execv(argv[0], argv)


def confined(policy: dict[str, object], *argv: str) -> list[str]:
    code = "from tests.test_deploy import seccomp_exec; seccomp_exec()"
    return [sys.executable, "-c", code, json.dumps(policy), *argv]


@pytest.fixture(scope="module")
def policy(unit: Unit) -> dict[str, object]:
    need(ctypes.util.find_library("seccomp") is not None, "libseccomp2 not installed")
    return seccomp_policy(unit)


def cli() -> str:
    path = Path(sys.executable).parent / "cephnode-exporter"
    assert path.exists(), f"{path} missing: the package is not installed in this venv"
    return str(path)


PROBE = """
import ctypes, errno, mmap, os, socket
def denied(fn, code):
    try:
        fn()
    except OSError as e:
        return e.errno == code
    return False
print(denied(lambda: mmap.mmap(-1, 4096, prot=7), errno.EPERM))
print(denied(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW), errno.EAFNOSUPPORT))
print(denied(lambda: os.setpriority(os.PRIO_PROCESS, 0, 5), errno.EPERM))
print(ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)(41) == 42)
import bcrypt, pyudev
print(bcrypt.checkpw(b"pw", bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))))
print(pyudev.Monitor.from_netlink(pyudev.Context()) is not None)
"""


def test_policy_is_active(policy: dict[str, object]) -> None:
    """The rebuilt filters bite (W+X memory, AF_PACKET, @resources), while ctypes
    callbacks, bcrypt (web config) and a udev netlink monitor still work."""
    proc = subprocess.run(
        confined(policy, sys.executable, "-c", PROBE),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"] * 6, proc.stdout


@pytest.mark.parametrize("command", ["dump", "check"])
def test_cli_runs_under_unit_policy(policy: dict[str, object], command: str) -> None:
    free = subprocess.run([cli(), command], capture_output=True, text=True, timeout=120)
    proc = subprocess.run(
        confined(policy, cli(), command), capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == free.returncode, proc.stderr
    assert "Operation not permitted" not in proc.stderr, proc.stderr
    if command == "dump":
        assert "cephnode_exporter_build_info" in proc.stdout
        assert names(proc.stdout) == names(free.stdout)
        # A read the filter broke would show up as a failed collector or a read error.
        assert health(proc.stdout) == health(free.stdout)


def names(exposition: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in exposition.splitlines()}


def health(exposition: str) -> list[str]:
    keep = ("cephnode_scrape_collector_success", "cephnode_scrape_collector_read_errors")
    return sorted(line for line in exposition.splitlines() if line.startswith(keep))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def confined_server(policy: dict[str, object], tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if find_spec("cephnode_exporter.web") is None:
        pytest.skip("cephnode_exporter.web (the serve command) is not there yet")
    port = free_port()
    argv = confined(policy, cli(), "serve", f"--web.listen-address=127.0.0.1:{port}")
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=out)
    try:
        yield f"http://127.0.0.1:{port}/metrics", log
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_serve_under_unit_policy(confined_server: tuple[str, Path]) -> None:
    url, log = confined_server
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read().decode()
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer from {url}: {e}\n{log.read_text()}") from e
            time.sleep(0.2)
    assert "cephnode_exporter_build_info" in body
    assert "Operation not permitted" not in log.read_text()
