"""Find the admin sockets of the OSDs running on this node.

Two layouts exist under the socket directory (``--ceph.socket-dir``, /var/run/ceph):

- packages (Debian/Ubuntu/RPM, ceph-ansible, Rook's host mounts): the daemon's
  ``admin_socket`` default ``$run_dir/$cluster-$name.asok`` gives
  ``<dir>/<cluster>-osd.<id>.asok`` (``ceph config help admin_socket`` on Pacific:
  "Default (daemon): $run_dir/$cluster-$name.asok");
- cephadm: each cluster gets ``/var/run/ceph/<fsid>`` (mode 0770, ``make_var_run``),
  bind-mounted as the container's ``/var/run/ceph`` (``get_container_mounts``), where the
  daemons (cluster name always ``ceph``) create ``ceph-osd.<id>.asok`` (ceph/ceph
  src/cephadm/cephadm in Pacific, src/cephadm/cephadmlib/ later).

Sockets come and go with the OSDs, so discovery is cheap (one ``scandir`` per directory)
and runs on every scrape. A socket file left behind by a dead daemon still looks like a
socket; the client reports it as "connection refused".
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from cephnode_exporter.hostfs import ReadErrors

DEFAULT_SOCKET_DIR = "/var/run/ceph"

# <cluster>-osd.<id>.asok; Ceph prints the id with %d (no sign, no leading zeros). No dot
# in the cluster name, so that a client's socket (<cluster>-client.<name>...) never matches.
_OSD_SOCKET = re.compile(r"^(?P<cluster>[^.]+)-osd\.(?P<id>0|[1-9][0-9]{0,8})\.asok$")
# cephadm names each cluster's directory after its fsid, a UUID.
_FSID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


class DiscoveryError(OSError):
    """The socket directory itself cannot be listed (missing, permission, not a dir)."""


@dataclass(frozen=True, order=True)
class OSDSocket:
    """An OSD admin socket. ``cluster`` is the cluster name (package layout) or the
    fsid (cephadm layout): it tells apart two clusters on one node."""

    cluster: str
    osd_id: int
    path: str
    layout: str  # "package" or "cephadm"

    @property
    def ceph_daemon(self) -> str:
        """The label Ceph's own exporters use: ``osd.<id>``."""
        return f"osd.{self.osd_id}"


def _scan(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as it:
        return list(it)


def _is_socket(entry: os.DirEntry[str]) -> bool:
    try:
        return stat.S_ISSOCK(entry.stat(follow_symlinks=True).st_mode)
    except OSError:
        return False  # vanished between scandir and stat, or a dangling link


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _osd_sockets(
    directory: str, entries: list[os.DirEntry[str]], cluster: str | None, layout: str
) -> list[OSDSocket]:
    found = []
    for entry in entries:
        m = _OSD_SOCKET.match(entry.name)
        if m is None or not _is_socket(entry):
            continue
        found.append(
            OSDSocket(
                cluster=cluster if cluster is not None else m["cluster"],
                osd_id=int(m["id"]),
                path=os.path.join(directory, entry.name),
                layout=layout,
            )
        )
    return found


def discover_osd_sockets(
    socket_dir: str = DEFAULT_SOCKET_DIR, errors: ReadErrors | None = None
) -> list[OSDSocket]:
    """Every OSD socket under ``socket_dir`` in both layouts, sorted by cluster and id.

    Raises :class:`DiscoveryError` when ``socket_dir`` cannot be listed. A cephadm
    cluster directory that cannot be listed is skipped and recorded in ``errors``. Not
    OSD sockets (mon, mgr, mds, rgw, ``client.*``), files that are not sockets and other
    directories are ignored.
    """
    try:
        entries = _scan(socket_dir)
    except FileNotFoundError:
        raise DiscoveryError(f"{socket_dir}: no such directory (--ceph.socket-dir)") from None
    except PermissionError:
        raise DiscoveryError(
            f"{socket_dir}: permission denied (the exporter's user must be in group ceph)"
        ) from None
    except NotADirectoryError:
        raise DiscoveryError(f"{socket_dir}: not a directory (--ceph.socket-dir)") from None
    except OSError as exc:
        raise DiscoveryError(f"{socket_dir}: {exc.strerror or exc}") from None

    found = _osd_sockets(socket_dir, entries, None, "package")
    for entry in entries:
        if not _FSID.match(entry.name) or not _is_dir(entry):
            continue
        sub = os.path.join(socket_dir, entry.name)
        try:
            sub_entries = _scan(sub)
        except FileNotFoundError:
            continue  # the cluster's directory went away since the first listing
        except OSError as exc:
            if errors is not None:
                errors.add(OSError(exc.errno, exc.strerror, sub))
            continue
        found.extend(_osd_sockets(sub, sub_entries, entry.name.lower(), "cephadm"))
    return sorted(found)
