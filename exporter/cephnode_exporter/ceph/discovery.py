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

One OSD can show up twice: ``cephadm adopt`` starts the daemon in a container, which makes
its socket in ``<fsid>/``, and leaves the package layout's file behind when the old
daemon did not remove it (killed, or stopped by systemd after a crash); a symlink kept
for old tools does the same with a live socket. Two clusters on one node can also each
have an ``osd.0``. :func:`choose_sockets` keeps one socket per daemon and tells the
stale and the duplicate ones apart from a second cluster's OSD, so that no two series
sets claim the same ``ceph_daemon``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from cephnode_exporter.hostfs import ReadErrors

DEFAULT_SOCKET_DIR = "/var/run/ceph"

# <cluster>-osd.<id>.asok; Ceph prints the id with %d (no sign, no leading zeros). No dot
# in the cluster name, so that a client's socket (<cluster>-client.<name>...) never matches.
_OSD_SOCKET = re.compile(r"^(?P<cluster>[^.]+)-osd\.(?P<id>0|[1-9][0-9]{0,8})\.asok$")
# cephadm names each cluster's directory after its fsid, a UUID.
_FSID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


class DiscoveryError(OSError):
    """The socket directory itself cannot be listed (missing, permission, not a dir)."""


class NoSocketDirectory(DiscoveryError):
    """The socket directory does not exist: no Ceph daemon ran on this node (yet)."""


@dataclass(frozen=True, order=True)
class OSDSocket:
    """An OSD admin socket. ``cluster`` is the cluster name (package layout) or the
    fsid (cephadm layout): it tells apart two clusters on one node. ``mtime`` is the
    socket file's (a daemon creates its socket when it starts). ``file_id`` is the socket
    file's (device, inode), through a link: another file (a daemon bound the path anew,
    a link now points elsewhere) is another daemon, or the same one restarted; None when
    not known. ``qualified`` is set by :func:`choose_sockets` when another cluster's OSD
    on this node has the same id."""

    cluster: str
    osd_id: int
    path: str
    layout: str  # "package" or "cephadm"
    mtime: float = field(default=0.0, compare=False)
    qualified: bool = field(default=False, compare=False)
    file_id: tuple[int, int] | None = field(default=None, compare=False)

    @property
    def ceph_daemon(self) -> str:
        """The label Ceph's own exporters use: ``osd.<id>``; ``<cluster>-osd.<id>`` (the
        name Ceph gives the daemon's socket and log, ``$cluster-$name``) when the node
        has OSDs of two clusters with this id."""
        name = f"osd.{self.osd_id}"
        return f"{self.cluster}-{name}" if self.qualified else name


def _scan(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as it:
        return list(it)


def _socket_stat(entry: os.DirEntry[str]) -> os.stat_result | None:
    """The status of a socket (through a symlink), None for anything else."""
    try:
        st = entry.stat(follow_symlinks=True)
    except OSError:
        return None  # vanished between scandir and stat, or a dangling link
    return st if stat.S_ISSOCK(st.st_mode) else None


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
        if m is None:
            continue
        st = _socket_stat(entry)
        if st is None:
            continue
        found.append(
            OSDSocket(
                cluster=cluster if cluster is not None else m["cluster"],
                osd_id=int(m["id"]),
                path=os.path.join(directory, entry.name),
                layout=layout,
                mtime=st.st_mtime,
                file_id=(st.st_dev, st.st_ino),
            )
        )
    return found


def discover_osd_sockets(
    socket_dir: str = DEFAULT_SOCKET_DIR, errors: ReadErrors | None = None
) -> list[OSDSocket]:
    """Every OSD socket under ``socket_dir`` in both layouts, sorted by cluster and id.

    Raises :class:`DiscoveryError` when ``socket_dir`` cannot be listed
    (:class:`NoSocketDirectory` when it does not exist). A cephadm
    cluster directory that cannot be listed is skipped and recorded in ``errors``. Not
    OSD sockets (mon, mgr, mds, rgw, ``client.*``), files that are not sockets and other
    directories are ignored.
    """
    try:
        entries = _scan(socket_dir)
    except FileNotFoundError:
        raise NoSocketDirectory(f"{socket_dir}: no such directory (--ceph.socket-dir)") from None
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


# ----------------------------------------------------------------------------- choosing

STALE = "stale"
DUPLICATE = "duplicate"
LIMIT = "limit"
# Why a socket found is not reported: stale and duplicate ones count in
# cephnode_osd_sockets_ignored, those beyond --collector.osd.max-sockets (limit) in
# cephnode_scrape_collector_items_dropped.
DROP_REASONS = (STALE, DUPLICATE, LIMIT)


@dataclass(frozen=True)
class Answer:
    """What querying a socket told about it: ``refused`` when connecting failed with
    ECONNREFUSED (nobody listens: a stale file), and the cluster fsid and the name
    (``osd.3``) its daemon reported in ``config show`` (this scrape's or an earlier
    one's), None when unknown."""

    refused: bool = False
    fsid: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Dropped:
    """A socket found but not scraped, why (one of DROP_REASONS), and the path of the
    socket that serves the same OSD instead ("" for the limit)."""

    socket: OSDSocket
    reason: str
    instead: str = ""


@dataclass
class Choice:
    """The sockets to report, one per daemon, and those left out."""

    kept: list[OSDSocket]
    dropped: list[Dropped]


def _osd_order(s: OSDSocket) -> tuple[int, str, str]:
    return (s.osd_id, s.cluster, s.path)


def limit_sockets(sockets: Iterable[OSDSocket], limit: int) -> Choice:
    """The first ``limit`` sockets by OSD id (then cluster and path), so that the same
    sockets are kept on every scrape and a stale twin stays next to its live one."""
    ordered = sorted(sockets, key=_osd_order)
    return Choice(ordered[:limit], [Dropped(s, LIMIT) for s in ordered[limit:]])


def _identity(s: OSDSocket, answer: Answer) -> str:
    """The cluster a socket's daemon belongs to: the fsid it reported, else the fsid of
    its cephadm directory, else (package layout, never answered) its cluster name."""
    return (answer.fsid or s.cluster).lower()


def _preference(s: OSDSocket, answer: Answer) -> tuple[bool, bool, float, str]:
    """Sort key, best first: a socket whose daemon did not name another OSD (a link to
    another OSD's socket fails as that OSD's, collectors/osd_query.py check_identity, and
    must not hide the real one), then one in the cephadm directory of the fsid its daemon
    reported, then the newest file (the daemon started last made it), then the path."""
    other = bool(answer.name) and answer.name != f"osd.{s.osd_id}"
    at_home = s.layout == "cephadm" and answer.fsid is not None and answer.fsid.lower() == s.cluster
    return (other, not at_home, -s.mtime, s.path)


def choose_sockets(sockets: Iterable[OSDSocket], answers: Mapping[str, Answer]) -> Choice:
    """One socket per OSD daemon, from the sockets found and what querying them said
    (``answers`` by path; a socket without one counts as not refused, fsid unknown).

    Sockets are compared only with others of the same OSD id:

    - one socket: kept, whatever it answered (a lone socket nobody listens on is a dead
      OSD: it must be reported as failed, not hidden);
    - a socket nobody listens on (ECONNREFUSED) beside one that does is ``stale``; when
      none listens, the preferred one is kept to report the OSD and the others are stale;
    - of the listening ones, those whose daemons belong to the same cluster (fsid) are
      ``duplicate`` but the preferred one (:func:`_preference`);
    - listening ones of different clusters are all kept and ``qualified``: their
      ``ceph_daemon`` names the cluster, so the series sets stay apart.

    Pure: the caller queries, this decides. The result is sorted like discovery's.
    """
    by_id: dict[int, list[OSDSocket]] = {}
    for s in sockets:
        by_id.setdefault(s.osd_id, []).append(s)
    kept: list[OSDSocket] = []
    dropped: list[Dropped] = []
    none = Answer()
    for group in by_id.values():
        if len(group) == 1:
            kept.extend(group)
            continue

        def pref(s: OSDSocket) -> tuple[bool, bool, float, str]:
            return _preference(s, answers.get(s.path, none))

        live = sorted((s for s in group if not answers.get(s.path, none).refused), key=pref)
        refused = sorted((s for s in group if answers.get(s.path, none).refused), key=pref)
        if not live:
            live, refused = refused[:1], refused[1:]
        clusters: dict[str, OSDSocket] = {}
        for s in live:  # best first: the first of each cluster is its daemon's socket
            key = _identity(s, answers.get(s.path, none))
            best = clusters.get(key)
            if best is None:
                clusters[key] = s
            else:
                dropped.append(Dropped(s, DUPLICATE, best.path))
        chosen = list(clusters.values())
        if len(chosen) > 1:
            chosen = [replace(s, qualified=True) for s in chosen]
        kept.extend(chosen)
        dropped.extend(Dropped(s, STALE, live[0].path) for s in refused)
    kept.sort()
    dropped.sort(key=lambda d: (DROP_REASONS.index(d.reason), d.socket))
    return Choice(kept, dropped)
