"""Shared test plumbing: fixture trees, CLI runners, and the no-skip rule for CI.

A test that needs root, a Debian package or a tool calls :func:`need`; on a developer's
laptop that is a skip with the reason, under ``CI=true`` it is a failure, because CI
must prove everything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cephnode_exporter.cli import build_scraper, parse_args
from cephnode_exporter.collection import Collection
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest

from tests.fixtures.sysfsgen import build_tree, load_node

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
NODES = ("epyc9454p-tuned", "epyc9454p-detuned")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite golden files from the current output instead of comparing",
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Where the tests' temporary directories are, and the room there: the fixture node
    trees take 67 MB each (Makefile, TEST_BASETEMP)."""
    where = Path(config.option.basetemp or tempfile.gettempdir())
    probe = where if where.exists() else where.parent
    free = shutil.disk_usage(probe).free if probe.exists() else 0
    return [f"temporary directories: {where} ({free / 2**30:.1f} GiB free)"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove a --basetemp (make test's tmpfs) after a session that passed, as pytest does
    its own numbered directory under the "failed" retention policy (pyproject.toml): the
    session-wide trees left there otherwise hold 1.3 GB of memory until the next run."""
    basetemp = session.config.option.basetemp
    if basetemp and exitstatus == 0:
        shutil.rmtree(basetemp, ignore_errors=True)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def need(ok: bool, reason: str) -> None:
    """Skip when ``ok`` is false, except in CI, where a missing prerequisite fails."""
    if ok:
        return
    if in_ci():
        pytest.fail(f"CI=true and a prerequisite is missing: {reason}")
    pytest.skip(reason)


def need_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    need(path is not None, f"{name} not found (Debian package {package}; `make deps` installs it)")
    assert path is not None
    return path


def need_root(why: str) -> None:
    need(os.geteuid() == 0, f"needs root: {why}")


class Tree:
    """A generated host tree and the flags that point the exporter at it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sys = root / "sys"
        self.proc = root / "proc"
        self.rootfs = root / "root"
        # No Ceph in fixture trees: an empty socket directory, never the machine's.
        self.ceph_sockets = self.rootfs / "var" / "run" / "ceph"
        self.ceph_sockets.mkdir(parents=True, exist_ok=True)

    @property
    def flags(self) -> list[str]:
        return [
            f"--path.sysfs={self.sys}",
            f"--path.procfs={self.proc}",
            f"--path.rootfs={self.rootfs}",
            f"--ceph.socket-dir={self.ceph_sockets}",
        ]


MakeTree = Callable[..., Tree]


@pytest.fixture
def make_tree(tmp_path: Path) -> MakeTree:
    """Build a node tree, optionally with faults: ``make_tree("epyc9454p-detuned", faults=...)``."""
    counter = iter(range(1000))

    def make(node: str | dict, **kwargs: object) -> Tree:
        desc = load_node(node) if isinstance(node, str) else node
        dest = tmp_path / f"tree{next(counter)}"
        build_tree(desc, dest, **kwargs)  # type: ignore[arg-type]
        return Tree(dest)

    return make


@pytest.fixture(scope="session")
def node_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tree]:
    """The reference nodes, built once per session (read-only for tests)."""
    trees = {}
    for node in NODES:
        dest = tmp_path_factory.mktemp(node)
        build_tree(load_node(node), dest)
        trees[node] = Tree(dest)
    return trees


def collect(flags: list[str], command: str = "dump") -> Collection:
    """One in-process collection with exactly the CLI's wiring."""
    scraper = build_scraper(parse_args([command, *flags]))
    try:
        return scraper.collect(10.0)
    finally:
        scraper.close()


class _Families:
    """Families in the shape generate_latest takes a registry (``collect()``)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def collector_exposition(collection: Collection, collector: str, *, clean: bool = True) -> str:
    """One collector's families that have samples, in prometheus_client's text format: what
    the golden files hold. The collector must have succeeded and, with ``clean``, read no
    bad file."""
    (outcome,) = [o for o in collection.outcomes if o.name == collector]
    assert outcome.success, outcome.error
    if clean:
        assert outcome.read_errors == 0
    families = [f for f in outcome.families if f.samples]
    return generate_latest(_Families(families)).decode()  # type: ignore[arg-type]


def samples(collection: Collection) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a collection, keyed by name and label set."""
    out = {}
    for family in collection.families():
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(collection: Collection, name: str, **labels: str) -> float | None:
    return samples(collection).get((name, frozenset(labels.items())))


def run_cli(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess:
    """Run the real entry point (``python -m cephnode_exporter``) as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "cephnode_exporter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def compare_golden(request: pytest.FixtureRequest, path: Path, actual: str) -> None:
    """Compare with a golden file, or rewrite it under ``--update-golden``."""
    if request.config.getoption("--update-golden"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"{path} missing: run `make generate` and review the diff"
    expected = path.read_text()
    assert actual == expected, (
        f"{path.name} differs from the golden file (`make generate` rewrites it)"
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; all are killed and reaped at the end."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
