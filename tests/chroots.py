"""Debian chroots that hold newer Ceph releases than the host, for the real-cluster tests.

Why chroots: the host is Debian 12 (Ceph 16.2 Pacific); operators run Reef and later,
which renamed counters the exporter reads. Debian 13 (trixie) ships Ceph 18.2 (Reef) and
Debian unstable (sid) Ceph 20.2 (Tentacle); a minbase chroot of each, with the Ceph
daemons installed inside, runs a real cluster of that release whose admin sockets the
host's exporter reads through the chroot's directory. The host's apt sources are never
touched: only the chroot's own apt configuration names the newer suite.

A chroot is built once per machine under :data:`CACHE` (``CEPHNODE_CHROOT_CACHE``
overrides it) and reused: building takes about a minute (debootstrap, then
``apt-get install``) and is done on demand by the first test that needs it, under a lock
so that two pytest processes do not build the same chroot. A build that fails raises
:class:`ChrootError` with the reason (sid is a moving target), which the tests turn into a
failure under ``CI=true`` (tests/conftest.py).

The same machinery caches a plain Debian 12 (bookworm) minbase chroot with systemd, in
which the Debian package is installed (tests/test_deb.py): :data:`BOOKWORM`. Its apt
lists and the archives of the package's dependencies are kept in the cached tree, so
that ``apt-get install ./cephnode-exporter_*.deb`` in a throwaway overlay of it resolves
and installs everything without the network.

From the shell::

    python tests/chroots.py build reef      # or tentacle, or bookworm; prints the path
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("CEPHNODE_CHROOT_CACHE", "/var/cache/cephnode-tests"))
MIRROR = os.environ.get("CEPHNODE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# The packages a test cluster needs inside the chroot (the same set tests/setup-debian.sh
# installs on the host, minus what the host runs itself).
PACKAGES = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-common")
# Bump to rebuild every cached chroot when the recipe below changes.
RECIPE = 1


@dataclass(frozen=True)
class Release:
    """A Ceph release the tests run, and the Debian suite that ships it (None: the host)."""

    name: str
    major: int
    suite: str | None


# Debian package versions: bookworm ceph 16.2.15, trixie 18.2.7, sid 20.2.x
# (https://packages.debian.org/source/sid/ceph).
RELEASES: dict[str, Release] = {
    "pacific": Release("pacific", 16, None),
    "reef": Release("reef", 18, "trixie"),
    "tentacle": Release("tentacle", 20, "sid"),
}


@dataclass(frozen=True)
class Recipe:
    """A cached chroot: ``debootstrap --variant=minbase suite``, then ``install``;
    ``download`` is fetched into apt's archive cache and left uninstalled."""

    name: str  # the directory under CACHE
    suite: str
    install: tuple[str, ...]
    download: tuple[str, ...] = ()
    # Bump to rebuild this chroot when its recipe changes.
    version: int = RECIPE


# Debian 12 as a fresh node has it (systemd and man-db included, which minbase leaves
# out; `systemd-analyze verify` runs man for the units' Documentation=), plus the
# archives of what the Debian package depends on (deploy/debian/control), so the
# package installs offline. No ceph: the package must install without it.
BOOKWORM = Recipe(
    name="bookworm-base",
    suite="bookworm",
    install=("systemd", "man-db"),
    download=(
        "python3",
        "python3-prometheus-client",
        "python3-pyudev",
        "python3-yaml",
        "python3-bcrypt",
    ),
    version=2,
)


class ChrootError(RuntimeError):
    """A chroot could not be built; the message says which step failed and its output."""


def _recipe(release: Release) -> Recipe:
    assert release.suite is not None
    return Recipe(name=f"{release.suite}-ceph", suite=release.suite, install=PACKAGES)


def chroot_dir(release: Release) -> Path:
    return CACHE / _recipe(release).name


def _run(args: list[str], what: str, timeout: float) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise ChrootError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _build(recipe: Recipe, target: Path, timings: dict[str, float]) -> None:
    """debootstrap + apt-get install into ``target`` (a fresh directory)."""
    if shutil.which("debootstrap") is None:
        raise ChrootError("debootstrap is not installed (tests/setup-debian.sh installs it)")
    if os.geteuid() != 0:
        raise ChrootError("building a chroot needs root (debootstrap, chroot)")
    t0 = time.monotonic()
    _run(
        ["debootstrap", "--variant=minbase", recipe.suite, str(target), MIRROR],
        f"debootstrap {recipe.suite}",
        900,
    )
    timings["debootstrap"] = time.monotonic() - t0
    # sid's Release file may be past its Valid-Until when the mirror lags; the chroot is a
    # throwaway test environment, so the check is off there (and only there).
    (target / "etc/apt/apt.conf.d/99cephnode-tests").write_text(
        'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n'
    )
    # Package scripts must not start daemons: the tests run their own.
    policy = target / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    t0 = time.monotonic()
    _apt_install(target, recipe.install, recipe.download)
    timings["install"] = time.monotonic() - t0


def _apt_install(target: Path, install: tuple[str, ...], download: tuple[str, ...] = ()) -> None:
    """``apt-get update`` and ``install`` inside the chroot ``target``; ``download`` is
    fetched into apt's archive cache and left uninstalled."""
    env = ["env", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"]
    # Some package scripts (sid's cryptsetup-bin, ceph-base) fail without /proc; it is
    # mounted for the install only, so the cached tree holds no mount.
    proc = target / "proc"
    _run(["mount", "-t", "proc", "proc", str(proc)], "mount /proc in the chroot", 30)
    try:
        _run(["chroot", str(target), *env, "apt-get", "update", "-qq"], "apt-get update", 600)
        _run(
            ["chroot", str(target), *env, "apt-get", "install", "-y", "-qq", *install],
            f"apt-get install {' '.join(install)}",
            1200,
        )
        _run(["chroot", str(target), "apt-get", "clean"], "apt-get clean", 120)
        if download:
            fetch = ["apt-get", "install", "-y", "-qq", "--download-only", *download]
            _run(["chroot", str(target), *env, *fetch], " ".join(fetch), 600)
    finally:
        subprocess.run(["umount", "-l", str(proc)], capture_output=True, check=False)


def ensure_chroot(release: Release) -> Path:
    """The chroot of ``release``, built first when the cache lacks it; raises ChrootError."""
    if release.suite is None:
        raise ValueError(f"{release.name} runs on the host, not in a chroot")
    return ensure(_recipe(release))


def ensure(recipe: Recipe) -> Path:
    """The chroot of ``recipe``, built first when the cache lacks it; raises ChrootError."""
    root = CACHE / recipe.name
    ready = root / f".cephnode-ready-{recipe.version}"
    if ready.exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{recipe.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():  # built by another process while this one waited
            return root
        tmp = CACHE / f"{recipe.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        timings: dict[str, float] = {}
        try:
            _build(recipe, tmp, timings)
        except subprocess.TimeoutExpired as exc:
            raise ChrootError(f"building the {recipe.suite} chroot timed out: {exc}") from exc
        tmp.rename(root)
        ready.write_text("".join(f"{k} {v:.1f}s\n" for k, v in timings.items()))
    return root


def ensure_packages(release: Release, packages: tuple[str, ...]) -> Path:
    """The chroot of ``release`` with ``packages`` installed besides the Ceph daemons.

    Why apart from :data:`PACKAGES`: the rule tests need the suite's ``promtool``
    (Prometheus 2.53 in trixie, 3.x in sid), the Ceph tests do not; installing it into
    a cached chroot leaves the chroot itself, and any cluster running in it, alone.
    Raises ChrootError."""
    root = ensure_chroot(release)
    recipe = _recipe(release)
    ready = root / f".cephnode-extra-{'-'.join(packages)}"
    if ready.exists():
        return root
    with open(CACHE / f".{recipe.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            try:
                _apt_install(root, packages)
            except subprocess.TimeoutExpired as exc:
                raise ChrootError(f"installing {packages} timed out: {exc}") from exc
            ready.touch()
    return root


def run_in(root: Path, binary: str) -> list[str]:
    """The command line that runs the chroot's ``binary`` from the host, with the
    chroot's own loader and libraries (its glibc may be newer than the host's) and the
    host's files, so that paths need no copying into the chroot."""
    return [
        str(root / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        "--library-path",
        str(root / "usr/lib/x86_64-linux-gnu"),
        str(root / binary.lstrip("/")),
    ]


def ceph_version(root: Path) -> str:
    """The ceph version string of the chroot's packages (``ceph --version``)."""
    out = subprocess.run(
        ["chroot", str(root), "ceph", "--version"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


if __name__ == "__main__":
    names = [n for n in RELEASES if n != "pacific"] + ["bookworm"]
    if len(sys.argv) != 3 or sys.argv[1] != "build" or sys.argv[2] not in names:
        sys.exit(f"usage: {sys.argv[0]} build {{{'|'.join(names)}}}")
    start = time.monotonic()
    if sys.argv[2] == "bookworm":
        print(ensure(BOOKWORM), f"{time.monotonic() - start:.1f}s")
    else:
        path = ensure_chroot(RELEASES[sys.argv[2]])
        print(path, f"{time.monotonic() - start:.1f}s", ceph_version(path))
