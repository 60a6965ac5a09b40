"""tests/chroots.py: a chroot that cannot be built is an error with the reason, which the
real-cluster fixtures turn into a failure under CI=true (a skip otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import cephcluster, chroots
from tests.conftest import in_ci, need_root, need_tool


def test_unbuildable_chroot_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    need_root("debootstrap and chroot")
    need_tool("debootstrap", "debootstrap")
    # Nothing listens on port 9 (discard) of the loopback: debootstrap fails at once.
    monkeypatch.setattr(chroots, "CACHE", tmp_path)
    monkeypatch.setattr(chroots, "MIRROR", "http://127.0.0.1:9/debian")
    release = chroots.RELEASES["reef"]
    with pytest.raises(chroots.ChrootError, match="debootstrap trixie failed"):
        chroots.ensure_chroot(release)
    assert not chroots.chroot_dir(release).exists()  # nothing half-built is cached
    # Through the session fixture's helper: the release's tests fail under CI=true with
    # the reason, skip without; a later test of the release is told at once.
    monkeypatch.setattr(cephcluster, "_shared", {})
    monkeypatch.setattr(cephcluster, "_shared_error", {})
    expected = pytest.fail.Exception if in_ci() else pytest.skip.Exception
    with pytest.raises(expected, match="trixie chroot for reef could not be built"):
        cephcluster.shared_cluster(request.config, "reef")
    with pytest.raises(cephcluster.ClusterError, match="failed to start earlier"):
        cephcluster.shared_cluster(request.config, "reef")
