"""CPU vulnerability mitigation states and the tuned daemon's active profile.

Vulnerabilities: ``/sys/devices/system/cpu/vulnerabilities/<name>``, one file per hardware
bug the kernel knows (Documentation/ABI/testing/sysfs-devices-system-cpu). Each holds
one line: "Not affected", "Vulnerable" or "Vulnerable: <why>", "Mitigation: <how>", and
on x86 (arch/x86/kernel/cpu/bugs.c) also "Unknown: <why>" (e.g. "Unknown: Dependent on
hypervisor status" in a guest), "Processor vulnerable" (itlb_multihit without KVM) and a
"KVM: " prefix on itlb_multihit ("KVM: Mitigation: Split huge pages"). A suffix such as
"; SMT vulnerable" qualifies a mitigation and does not change its class.

tuned: ``/etc/tuned/active_profile`` holds the profile names tuned-adm selected, joined
by spaces for a merged profile (redhat-performance/tuned, tuned/consts.py
ACTIVE_PROFILE_FILE; tuned/utils/commands.py writes ``name + "\\n"``, and nothing after
``tuned-adm off``). The package ships ``/etc/tuned/tuned-main.conf``, so a missing
``/etc/tuned`` means tuned is not installed; the file records the selection, not proof
that the daemon is running.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from cephnode_exporter.hostfs import (
    HostFS,
    ParseError,
    ReadErrors,
    is_dir,
    list_dir,
    read_text,
)

VULNERABILITIES_DIR = ("devices", "system", "cpu", "vulnerabilities")
TUNED_DIR = ("etc", "tuned")

# File names under vulnerabilities/ are kernel identifiers ("spectre_v2"); anything else
# is not exported as a label.
_VULN_NAME = re.compile(r"[a-z0-9_]{1,64}")
# A profile name is a directory name under /usr/lib/tuned or /etc/tuned; bound the label.
MAX_PROFILE_CHARS = 256


class VulnState(StrEnum):
    """The class of a vulnerability file's text; the values are metric label values."""

    NOT_AFFECTED = "not_affected"
    MITIGATED = "mitigated"
    VULNERABLE = "vulnerable"
    UNKNOWN = "unknown"


def classify_vulnerability(text: str) -> VulnState:
    """Class of one vulnerability file's text, by the kernel's fixed prefixes.

    Text the kernel does not print (a future wording) is UNKNOWN rather than a guess.
    """
    text = text.strip()
    if text.startswith("KVM: "):
        text = text[len("KVM: ") :]
    if text == "Not affected":
        return VulnState.NOT_AFFECTED
    if text.startswith("Mitigation:"):
        return VulnState.MITIGATED
    # "Vulnerable", "Vulnerable: No microcode", "Vulnerable; SMT vulnerable" (mds with
    # mitigation off), but not a longer word.
    if text.startswith("Vulnerable") and not text[len("Vulnerable") :][:1].isalnum():
        return VulnState.VULNERABLE
    if text == "Processor vulnerable":
        return VulnState.VULNERABLE
    return VulnState.UNKNOWN


@dataclass(frozen=True)
class Vulnerability:
    name: str  # the file name, e.g. "spectre_v2"
    state: VulnState
    text: str  # the kernel's line, for the report; never a label


def read_vulnerabilities(fs: HostFS, errors: ReadErrors) -> dict[str, Vulnerability] | None:
    """Every readable vulnerability file; None when the directory does not exist.

    Kernels before 4.15 and architectures without the files have no directory. An
    unreadable or empty file is skipped and counted in ``errors``.
    """
    base = fs.sys(*VULNERABILITIES_DIR)
    if not is_dir(base):
        return None
    result: dict[str, Vulnerability] = {}
    for name in list_dir(base):
        path = f"{base}/{name}"
        try:
            if not _VULN_NAME.fullmatch(name):
                raise ParseError(path, "unexpected file name")
            text = read_text(path)
            if not text:
                raise ParseError(path, "empty")
            if not text.isprintable():
                raise ParseError(path, f"not printable text: {text[:40]!r}")
        except (OSError, ParseError) as exc:
            errors.add(exc)
            continue
        result[name] = Vulnerability(name, classify_vulnerability(text), text)
    return result


@dataclass(frozen=True)
class Tuned:
    """What tuned says is selected.

    ``profile`` is None when there is no active_profile file (tuned not installed, or
    installed and never started) and "" when no profile is active (``tuned-adm off``).
    """

    installed: bool
    profile: str | None

    @property
    def profiles(self) -> list[str]:
        """The names of a merged profile ("throughput-performance my-site")."""
        return (self.profile or "").split()


def parse_active_profile(text: str, path: str = "active_profile") -> str:
    text = text.strip()
    if not text.isprintable():
        raise ParseError(path, f"not one line of printable text: {text[:40]!r}")
    if len(text) > MAX_PROFILE_CHARS:
        raise ParseError(path, f"longer than {MAX_PROFILE_CHARS} characters")
    return " ".join(text.split())


def read_tuned(fs: HostFS) -> Tuned:
    """Read the tuned selection; raises OSError or ParseError when the file is unreadable."""
    installed = is_dir(fs.root(*TUNED_DIR))
    path = fs.root(*TUNED_DIR, "active_profile")
    try:
        text = read_text(path)
    except (FileNotFoundError, NotADirectoryError):
        return Tuned(installed=installed, profile=None)
    return Tuned(installed=True, profile=parse_active_profile(text, path))
