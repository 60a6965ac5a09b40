"""What a check is: a pure function of one collector's facts and its profile settings.

A check is a pure function of one collector's facts and its profile settings. It
returns results that say only whether the setting deviates; the profile decides whether a
deviation is a failure or a warning, and whether the check runs at all.

A check fails closed: when the facts it needs were unreadable or make no sense, its
finding is :meth:`Finding.cannot_judge` (status ``unknown`` with the reason), never a
pass and never a ``skip``, which is kept for what does not apply to the node (no NVMe,
no OSD, a link that is down), or to the subject on its own: a fault that another
subject's deviating row already names, said in the text (``net.mtu``: a VLAN capped only
by a port at 1500 names the port, whose row is the one finding). A detuned node must
never look clean.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    SKIP = "skip"


@dataclass(frozen=True)
class Result:
    check: str
    subject: str
    status: Status
    observed: str
    expected: str
    hint: str = ""
    # The check raised (a bug): its result is unknown, and `check` exits 2 (internal
    # error) rather than claim that nothing failed. Not in the report's JSON: the
    # observed text carries the exception.
    check_error: bool = False

    def as_dict(self) -> dict[str, str]:
        return {
            "check": self.check,
            "subject": self.subject,
            "status": str(self.status),
            "observed": self.observed,
            "expected": self.expected,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Finding:
    """What a check function returns: the facts of one subject and whether they deviate.

    ``deviates`` is None when the check does not apply (it becomes ``skip``). ``unknown``
    is set by :meth:`cannot_judge` when the facts were unreadable or nonsensical (it
    becomes ``unknown``, and ``observed`` says why).
    """

    subject: str
    deviates: bool | None
    observed: str
    expected: str
    hint: str = ""
    unknown: bool = False

    def __post_init__(self) -> None:
        if self.unknown and self.deviates is not None:
            raise ValueError("an unknown finding cannot also say whether it deviates")

    @classmethod
    def cannot_judge(cls, subject: str, reason: str, expected: str) -> Finding:
        """The check applies but its input was unreadable or makes no sense: ``unknown``
        with the reason, so a node whose facts cannot be read never looks clean."""
        return cls(subject, None, reason, expected, unknown=True)


CheckFunc = Callable[[Any, dict[str, Any]], list[Finding]]
# A family's function also gets the member its instance checks ("net.core.somaxconn").
FamilyFunc = Callable[[Any, dict[str, Any], str], list[Finding]]
# A parameter's type: a type, a list of one element type (``list[str]``: the profile's
# list must hold only such elements), or a tuple of accepted ones (a sysctl value: int,
# str or list[int]).
ParamType = type | types.GenericAlias | tuple[type | types.GenericAlias, ...]


@dataclass(frozen=True)
class CheckSpec:
    """A registered check, a check family, or one instance of a family.

    A family (``family=True``, e.g. ``sysctl``) has no result of its own: every profile
    entry named ``<family>.<member>`` is a check of its own, with its own severity,
    parameters and result (``sysctl.net.core.somaxconn``), made by :meth:`instance`.
    """

    name: str
    collector: str
    func: Callable[..., list[Finding]]
    # Parameter name -> type; the values live in the profile.
    params: dict[str, ParamType] = field(default_factory=dict)
    # Values of the parameters a profile entry may leave out (``optional`` of a sysctl:
    # a site profile written before the parameter existed stays valid).
    defaults: dict[str, Any] = field(default_factory=dict)
    # Checks parameter values beyond their types (an unknown keyword): raises ValueError.
    validate: Callable[[dict[str, Any]], None] | None = None
    family: bool = False
    # Family only: raises ValueError when a member name is malformed.
    validate_member: Callable[[str], None] | None = None
    # Instance only: the family it belongs to and the member it checks.
    parent: str = ""
    member: str = ""

    def instance(self, member: str) -> CheckSpec:
        """The check of one member of this family; ValueError when the name is malformed."""
        if self.validate_member is not None:
            self.validate_member(member)
        return replace(
            self,
            name=f"{self.name}.{member}",
            func=functools.partial(self.func, member=member),
            family=False,
            validate_member=None,
            parent=self.name,
            member=member,
        )


CHECKS: dict[str, CheckSpec] = {}


def check(
    name: str,
    collector: str,
    *,
    validate: Callable[[dict[str, Any]], None] | None = None,
    **params: ParamType,
) -> Callable[[CheckFunc], CheckFunc]:
    """Decorator registering a check that reads the facts of ``collector``."""

    def wrap(func: CheckFunc) -> CheckFunc:
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = CheckSpec(name, collector, func, dict(params), validate=validate)
        return func

    return wrap


def check_family(
    name: str,
    collector: str,
    *,
    validate_member: Callable[[str], None],
    validate: Callable[[dict[str, Any]], None] | None = None,
    defaults: dict[str, Any] | None = None,
    **params: ParamType,
) -> Callable[[FamilyFunc], FamilyFunc]:
    """Decorator registering a check family: one check per profile entry ``<name>.<member>``.

    The function is called as ``func(facts, params, member=...)``. ``defaults`` gives the
    value of each parameter an entry may leave out.
    """
    unknown = set(defaults or {}) - set(params)
    if unknown:
        raise ValueError(f"check {name!r}: defaults for no parameter: {sorted(unknown)}")

    def wrap(func: FamilyFunc) -> FamilyFunc:
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = CheckSpec(
            name,
            collector,
            func,
            dict(params),
            defaults=dict(defaults or {}),
            validate=validate,
            family=True,
            validate_member=validate_member,
        )
        return func

    return wrap


def resolve(specs: Mapping[str, CheckSpec], name: str) -> CheckSpec | None:
    """The check a profile entry names: a registered check or an instance of a family.

    None when nothing matches; ValueError when a family matches but the member is malformed.
    """
    spec = specs.get(name)
    if spec is not None:
        return None if spec.family else spec
    for family in specs.values():
        if family.family and name.startswith(family.name + "."):
            return family.instance(name[len(family.name) + 1 :])
    return None


def concrete(specs: Mapping[str, CheckSpec]) -> dict[str, CheckSpec]:
    """The registered checks that produce results by themselves (families excluded)."""
    return {name: spec for name, spec in specs.items() if not spec.family}
