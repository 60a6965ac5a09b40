"""A read-only cluster client on librados for the ``pgs`` collector.

Three decisions, each verified on Debian 12's Ceph 16.2.15 (docs/ceph.md, "The pgs
collector"):

- **Where the binding comes from.** librados' Python binding is Debian's
  ``python3-rados``, a compiled module in ``/usr/lib/python3/dist-packages`` that pip
  cannot install. The exporter's venv does not see system packages, and making it do so
  (``--system-site-packages``) would mix every Debian Python package into the exporter's
  dependencies. Instead :func:`load_rados` imports ``rados`` normally when it is
  importable, and otherwise loads exactly that one extension module from the
  distribution's directories, if it was built for this interpreter's ABI (the venv runs
  on the system python3, so it is). Anything else is a clear error naming the package.
- **Commands go through the monitor, not the mgr.** ``pg ls`` is a mgr command, and the
  mons proxy mgr commands to the active mgr (so a key with only ``mon 'allow r'`` may
  run it: tested with cephx in tests/test_pgs_cephx.py; the ``ceph`` CLI, which sends it
  to the mgr directly, is refused without mgr caps). The difference that matters is the
  timeout: ``rados_mon_op_timeout`` makes a mon command fail cleanly with ETIMEDOUT (the
  MonClient cancels it), while the same timeout on ``mgr_command`` returns early but
  leaves the command registered with pointers into the returned stack frame: when the
  mgr answers late the process aborts ("double free or corruption", reproduced with a
  SIGSTOPped mgr; ceph tracker #65985).
- **Every call is bounded by Ceph's own timeouts**: ``client_mount_timeout`` for
  connecting (authentication with the mons) and ``rados_mon_op_timeout`` for the
  command, both whole seconds. One connection is kept across scrapes and dropped after
  any failure, so the next scrape reconnects (a mon that moved, a restarted cluster).
  The scraper's own per-collector deadline remains the backstop for what Ceph does not
  bound (a DNS lookup of ``mon_host`` names, for example).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from glob import glob
from types import ModuleType
from typing import Any

from cephnode_exporter.hostfs import open_regular

# Where distributions install the compiled binding: Debian/Ubuntu (python3-rados), then
# RHEL/Fedora (python3-rados, lib64 and lib).
_MINOR = f"python3.{sys.version_info.minor}"
DIST_DIRS: tuple[str, ...] = (
    "/usr/lib/python3/dist-packages",
    f"/usr/lib64/{_MINOR}/site-packages",
    f"/usr/lib/{_MINOR}/site-packages",
)
# Ceph's keyring search path when none is configured (src/common/options: "keyring").
DEFAULT_KEYRINGS = (
    "/etc/ceph/$cluster.$name.keyring",
    "/etc/ceph/$cluster.keyring",
    "/etc/ceph/keyring",
    "/etc/ceph/keyring.bin",
)
# The key the documentation creates (docs/ceph.md).
CAPS_HINT = "mon 'allow r'"


class CephUnavailable(RuntimeError):
    """librados' Python binding cannot be loaded; the message says what to install."""


class CephError(RuntimeError):
    """Connecting or a command failed; the message says why and what to check."""


def load_rados(dirs: Sequence[str] | None = None) -> ModuleType:
    """The ``rados`` module: importable as is, or the distribution's build for this ABI
    from ``dirs`` (default :data:`DIST_DIRS`, read at call time)."""
    if dirs is None:
        dirs = DIST_DIRS
    loaded = sys.modules.get("rados")
    if loaded is not None:
        return loaded
    try:
        # importlib rather than `import rados`: the module has no stubs, and is found
        # at run time (a venv that can see it) or not at all.
        return importlib.import_module("rados")
    except ImportError:
        pass
    for directory in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(directory, "rados" + suffix)
            if os.path.isfile(path):
                return _load_extension(path)
    others = sorted(p for d in dirs for p in glob(os.path.join(d, "rados.cpython-*.so")))
    if others:
        raise CephUnavailable(
            f"librados binding {others[0]} is not built for this Python "
            f"({sys.version.split()[0]}): create the exporter's venv with the system's "
            "python3, the one python3-rados is built for (docs/ceph.md)"
        )
    raise CephUnavailable(
        "librados Python binding not found (searched " + ", ".join(dirs) + "): install "
        "python3-rados (Debian/Ubuntu: apt-get install python3-rados)"
    )


def _load_extension(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("rados", path)
    if spec is None or spec.loader is None:
        raise CephUnavailable(f"cannot load {path}")
    try:
        # An extension module is dlopen()ed by module_from_spec (the loader's
        # create_module), not by exec_module: both must be inside the try.
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as exc:  # e.g. librados.so.2 missing, not an ELF file, another ABI
        raise CephUnavailable(f"cannot load {path}: {exc} (reinstall python3-rados)") from None
    sys.modules["rados"] = module
    return module


def client_name(text: str) -> str:
    """A Ceph entity name: ``client.x`` as given, or ``x`` made ``client.x``."""
    name = text.strip()
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"invalid Ceph client name {text!r}")
    return name if "." in name else f"client.{name}"


@dataclass(frozen=True)
class ClientSettings:
    conffile: str  # ceph.conf: mon_host and anything else the client needs
    name: str  # entity name, e.g. client.cephnode-exporter
    keyring: str | None  # None: ceph.conf's keyring, else Ceph's search (DEFAULT_KEYRINGS)
    timeout: int  # whole seconds, for connecting and for each command


def _errno(exc: BaseException) -> int | None:
    value = getattr(exc, "errno", None)
    return abs(value) if isinstance(value, int) else None


def _readable(path: str, what: str) -> None:
    """A regular file we may open; librados reads it itself. Opened with O_NONBLOCK: a
    FIFO given by mistake would otherwise block the collector's thread for good."""
    try:
        os.close(open_regular(path))
    except IsADirectoryError:  # open_regular's own kind for a directory; same words
        raise CephError(f"cannot read {what} {path}: not a regular file (directory)") from None
    except OSError as exc:
        raise CephError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


class MonCommandClient:
    """Sends read-only commands through the mons, on one connection kept between calls.

    Not for concurrent use: the scraper calls a collector once at a time, and never
    again while a call is stuck; the lock only keeps :meth:`close` from tearing the
    connection down under a running command.
    """

    def __init__(
        self, settings: ClientSettings, loader: Callable[[], ModuleType] = load_rados
    ) -> None:
        self.settings = settings
        self._loader = loader
        self._handle: Any = None
        self._lock = threading.Lock()
        self.connects = 0  # connections made (tests: reuse and reconnection)

    def command(self, cmd: Mapping[str, Any]) -> bytes:
        """The reply's data for ``cmd``; raises :class:`CephError` or :class:`CephUnavailable`."""
        with self._lock:
            rados = self._loader()
            if self._handle is None:
                self._handle = self._connect(rados)
            prefix = cmd.get("prefix", "?")
            try:
                ret, out, outs = self._handle.mon_command(json.dumps(cmd), b"")
            except rados.Error as exc:
                self._drop()
                raise CephError(f"`{prefix}` failed: {exc}") from None
            if ret < 0:
                code = -ret
                if code not in (errno.EACCES, errno.EINVAL, errno.ENOENT):
                    self._drop()  # a timeout or a broken session: start afresh next time
                raise CephError(self._describe(prefix, code, outs))
            return bytes(out)

    def close(self) -> None:
        """Disconnect, unless a command is still running (then the process is exiting)."""
        if self._lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._lock.release()

    # ------------------------------------------------------------------ internals

    def _connect(self, rados: ModuleType) -> Any:
        s = self.settings
        _readable(s.conffile, "Ceph configuration")
        if s.keyring is not None:
            _readable(s.keyring, "keyring")
        t = str(max(1, int(s.timeout)))
        conf = {
            "client_mount_timeout": t,
            "rados_mon_op_timeout": t,
            "rados_osd_op_timeout": t,
            # No admin socket and no log file of our own, whatever ceph.conf's [client]
            # section says: the service's file system is read-only (docs/install.md).
            "admin_socket": "",
            "log_file": "",
        }
        if s.keyring is not None:
            conf["keyring"] = s.keyring
        try:
            handle = rados.Rados(conffile=s.conffile, name=s.name, conf=conf)
        except rados.Error as exc:
            raise CephError(f"cannot set up a Ceph client from {s.conffile}: {exc}") from None
        try:
            handle.connect()
        except rados.Error as exc:
            keyrings = _keyrings(handle)
            _shutdown(handle)
            raise CephError(self._connect_error(exc, keyrings)) from None
        self.connects += 1
        return handle

    def _connect_error(self, exc: BaseException, keyrings: Sequence[str]) -> str:
        s = self.settings
        code = _errno(exc)
        if code == errno.ENOENT:
            where = ", ".join(keyrings) or s.keyring or "the keyring"
            return (
                f"no key for {s.name} in {where} (create it with `ceph auth "
                f"get-or-create {s.name} {CAPS_HINT}`, or name the file with "
                f"--collector.pgs.keyring): {exc}"
            )
        if code in (errno.EACCES, errno.EPERM):
            return (
                f"the monitors refused {s.name}: a wrong key, a key without mon caps "
                f"(it needs {CAPS_HINT}), or no auth method in common (the conf's "
                f"auth_client_required against the cluster's): {exc}"
            )
        if code == errno.ETIMEDOUT:
            return f"no monitor answered within {s.timeout} s (mon_host of {s.conffile}): {exc}"
        return f"connecting to Ceph as {s.name} failed: {exc}"

    def _describe(self, prefix: str, code: int, outs: str) -> str:
        s = self.settings
        detail = f": {outs.strip()}" if outs and outs.strip() else ""
        if code == errno.EACCES:
            return f"{s.name} may not run `{prefix}` (the key needs {CAPS_HINT}){detail}"
        if code == errno.ETIMEDOUT:
            return (
                f"`{prefix}` not answered within {s.timeout} s (is a mgr active? the mons "
                f"forward it to the mgr){detail}"
            )
        name = errno.errorcode.get(code, str(code))
        if code == errno.EINVAL and "not a valid pg state" in outs:
            detail += " (the laggy and wait states exist since Ceph 15.2 Octopus)"
        return f"`{prefix}` failed with {name}{detail}"

    def _drop(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            _shutdown(handle)


def _keyrings(handle: Any) -> list[str]:
    """The keyring files librados searched, expanded as it expanded them: ``$cluster`` is
    the conf file's name without ``.conf`` (measured: ``x.conf`` searches
    ``/etc/ceph/x.client.y.keyring``), so the message names the real paths."""
    try:
        value = handle.conf_get("keyring")
    except Exception:  # only for a message: never hide the real error
        return []
    return [p for p in str(value or "").split(",") if p.strip()]


def _shutdown(handle: Any) -> None:
    # A handle that never connected, or one already shut down, may raise: nothing to do.
    with contextlib.suppress(Exception):
        handle.shutdown()
