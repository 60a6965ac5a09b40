"""Whether an OSD's block device goes through dm-crypt, from what any user can read.

The device-mapper table (its target types: ``crypt``, ``linear``) is only readable
through the DM_TABLE_STATUS ioctl on /dev/mapper/control, which needs CAP_SYS_ADMIN. What
every user can read is each mapping's ``dm/uuid`` (0444, Documentation/ABI/testing/
sysfs-block-dm: "DM uuid string ... set by the creator"), and the tools that create the
mappings put their name in it:

- cryptsetup (what ceph-volume ``--dmcrypt`` and cephadm run, ``cryptsetup luksOpen``):
  ``CRYPT-<type>-[<uuid without dashes>-]<name>`` (cryptsetup lib/libdevmapper.c
  ``dm_prepare_uuid``), ``<type>`` being the on-disk format: ``LUKS1``, ``LUKS2``,
  ``PLAIN``, ``LOOPAES``, ``TCRYPT``, ``BITLK``, ``FVAULT2`` are dm-crypt mappings;
  ``VERITY``, ``INTEGRITY`` and ``SUBDEV`` (the dm-integrity under LUKS2 authenticated
  encryption) are not encryption themselves; ``TEMP`` is a short-lived helper mapping.
- LVM2: ``LVM-<vg uuid><lv uuid>`` (lib/activate/dev_manager.c, UUID_PREFIX); an LV of
  ceph-volume is dm-linear.
- multipath-tools ``mpath-<wwid>``, kpartx ``part<N>-<parent uuid>``.

A stack is encrypted when any mapping in it is a dm-crypt one (dm-crypt on an LV, the
ceph-volume layout, or an LV on dm-crypt); not encrypted when every mapping is known and
none is, or when there is no mapping at all (a plain partition or namespace); and
``unknown`` when a mapping has no uuid (made with ``dmsetup create`` without ``-u``), an
unknown prefix, or an unreadable one: the reason says which.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from cephnode_exporter.hostfs import ParseError, read_text
from cephnode_exporter.hostfs.blockdev import MAX_DEPTH, lower_devices

# The states of cephnode_osd_encryption_info's `encryption` label.
DM_CRYPT = "dm-crypt"
NONE = "none"
UNKNOWN = "unknown"

# cryptsetup's device types that are dm-crypt targets (lib/libcryptsetup.h CRYPT_LUKS1,
# CRYPT_LUKS2, CRYPT_PLAIN, CRYPT_LOOPAES, CRYPT_TCRYPT, CRYPT_BITLK, CRYPT_FVAULT2).
CRYPT_TYPES = frozenset({"LUKS1", "LUKS2", "PLAIN", "LOOPAES", "TCRYPT", "BITLK", "FVAULT2"})
# cryptsetup's mappings that encrypt nothing themselves (CRYPT_VERITY, CRYPT_INTEGRITY, and
# the SUBDEV integrity device under a LUKS2 crypt mapping, which sits above it).
NOT_CRYPT_TYPES = frozenset({"VERITY", "INTEGRITY", "SUBDEV"})
# Other creators' prefixes: LVM2 (UUID_PREFIX "LVM-"), multipath-tools ("mpath-"),
# kpartx ("part<N>-").
PLAIN_PREFIXES = ("LVM-", "mpath-", "part")


@dataclass(frozen=True)
class Encryption:
    """``state`` is DM_CRYPT, NONE or UNKNOWN; ``format`` the cryptsetup type of the
    dm-crypt mapping (``LUKS2``), empty otherwise; ``reason`` why it is UNKNOWN, and
    ``error`` the read error behind it (a fact such as "no uuid" is no error)."""

    state: str
    format: str = ""
    reason: str = ""
    error: OSError | ParseError | None = None


def classify_uuid(uuid: str) -> tuple[str, str]:
    """(state, format) of one mapping by its ``dm/uuid``: (DM_CRYPT, "LUKS2"),
    (NONE, ""), or (UNKNOWN, "") for an empty or unknown uuid."""
    uuid = uuid.strip()
    if uuid.startswith("CRYPT-"):
        kind = uuid[len("CRYPT-") :].split("-", 1)[0]
        if kind in CRYPT_TYPES:
            return DM_CRYPT, kind
        if kind in NOT_CRYPT_TYPES:
            return NONE, ""
        return UNKNOWN, ""
    if uuid.startswith(PLAIN_PREFIXES):
        return NONE, ""
    return UNKNOWN, ""


def stack_encryption(device_dir: str) -> Encryption:
    """The encryption of the block device whose sysfs directory is ``device_dir`` and
    of everything under it (``slaves/``). Never raises: an unreadable file (or one
    larger than a sysfs page can be) is UNKNOWN with the error as the reason."""
    try:
        found = _walk(device_dir, 0)
    except (OSError, ParseError) as exc:
        return Encryption(UNKNOWN, reason=str(exc), error=exc)
    crypt = [f for f in found if f[1] == DM_CRYPT]
    if crypt:
        return Encryption(DM_CRYPT, crypt[0][2])
    unknown = [f for f in found if f[1] == UNKNOWN]
    if unknown:
        name, _, _, uuid = unknown[0]
        shown = f"uuid {uuid!r} names no known creator" if uuid else "has no uuid"
        return Encryption(UNKNOWN, reason=f"{name}: device-mapper {shown}")
    return Encryption(NONE)


def _walk(path: str, depth: int) -> list[tuple[str, str, str, str]]:
    """(device name, state, format, uuid) of every dm device from ``path`` down."""
    if depth > MAX_DEPTH:
        raise OSError(errno.ELOOP, "device-mapper stack deeper than 8 levels", path)
    out: list[tuple[str, str, str, str]] = []
    if os.path.isdir(os.path.join(path, "dm")):
        uuid = read_text(os.path.join(path, "dm", "uuid")).strip()
        state, fmt = classify_uuid(uuid)
        out.append((os.path.basename(path), state, fmt, uuid))
    for dev in lower_devices(path):
        out.extend(_walk(dev, depth + 1))
    return out


def osd_encryption(sysdir: str | None, note: str | None) -> Encryption:
    """An OSD's encryption from its block device's sysfs directory (``OSDBlock.sysdir``);
    without one, UNKNOWN with ``note`` (no block device: memstore, a BlueStore on a
    file, or the walk's error)."""
    if not sysdir:
        return Encryption(UNKNOWN, reason=note or "no block device")
    return stack_encryption(sysdir)
