"""Tuning profiles: expected values and severities for the checks.

The default profile ships inside the package; ``--profile FILE`` is merged over it check
by check, so a site file names only what it changes. Unknown checks, keys and wrongly
typed values (down to the elements of a list) are errors, found when the profile is
loaded at start-up: a typo in a profile must not silently disable a check, nor make it
raise at every scrape and hide the node's real state. The file is read within the
bounds of :mod:`cephnode_exporter.safeio` (a regular file, at most 1 MiB, nested at most
32 levels).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from cephnode_exporter.checks.base import CheckSpec, ParamType, Status, concrete, resolve
from cephnode_exporter.checks.kernel import SYSCTL_FAMILY
from cephnode_exporter.checks.osd import DEBUG_LEVELS
from cephnode_exporter.collectors.base import ProfileReads
from cephnode_exporter.hostfs.sysctl import sysctl_target
from cephnode_exporter.safeio import ConfigFileError, load_yaml, read_config_text

SEVERITIES = {"fail": Status.FAIL, "warn": Status.WARN}


class ProfileError(ValueError):
    """The profile file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class CheckSettings:
    enabled: bool
    severity: Status
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    name: str
    source: str
    checks: dict[str, CheckSettings]
    # The checks this profile makes from families, one per entry ("sysctl.net.core.somaxconn").
    instances: dict[str, CheckSpec] = field(default_factory=dict)

    def members(self, family: str) -> list[str]:
        """The members of a check family the profile enables (the sysctl names to read)."""
        return [
            spec.member
            for name, spec in sorted(self.instances.items())
            if spec.parent == family and self.checks[name].enabled
        ]

    def reads(self) -> ProfileReads:
        """What the collectors must read for this profile's checks: the sysctls its
        ``sysctl.<name>`` entries name (kernel) and the debug subsystems
        ``osd.debug_levels`` judges (osd)."""
        sysctls = self.members(SYSCTL_FAMILY)
        numeric = frozenset(
            name
            for name in sysctls
            if not isinstance(
                sysctl_target(self.checks[f"{SYSCTL_FAMILY}.{name}"].params["value"]), str
            )
        )
        debug = self.checks.get(DEBUG_LEVELS)
        subsystems = debug.params.get("subsystems", ()) if debug is not None else ()
        return ProfileReads(
            sysctls=tuple(sysctls),
            numeric_sysctls=numeric,
            debug_subsystems=frozenset(str(s) for s in subsystems),
        )


def _load_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = load_yaml(text, source)
    except ConfigFileError as exc:
        raise ProfileError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: top level must be a mapping")
    unknown = set(data) - {"name", "checks"}
    if unknown:
        raise ProfileError(f"{source}: unknown keys {sorted(map(str, unknown))}")
    if "name" in data and not (isinstance(data["name"], str) and data["name"].strip()):
        raise ProfileError(f"{source}: name: must be a non-empty string")
    checks = data.get("checks") or {}
    if not isinstance(checks, dict):
        raise ProfileError(f"{source}: 'checks' must be a mapping")
    return data


def _type_name(t: type | types.GenericAlias) -> str:
    return str(t) if isinstance(t, types.GenericAlias) else t.__name__


def _is_a(value: Any, t: type | types.GenericAlias) -> bool:
    """Whether a YAML value is of a parameter type: ``list[str]`` checks the elements
    too, and YAML's true/false (Python bools, which are also ints) is only a bool."""
    if isinstance(t, types.GenericAlias):
        if typing.get_origin(t) is not list or not isinstance(value, list):
            return False
        (element,) = typing.get_args(t)
        return all(_is_a(v, element) for v in value)
    if isinstance(value, bool) and t is not bool:
        return False
    return isinstance(value, t)


def _coerce(value: Any, want: ParamType) -> tuple[bool, Any]:
    """Whether ``value`` fits the parameter type ``want``, and the value to keep (an
    integer where a float is wanted becomes one: ``max_ratio: 1``)."""
    types_ = want if isinstance(want, tuple) else (want,)
    if any(_is_a(value, t) for t in types_):
        return True, value
    if float in types_ and _is_a(value, int):
        return True, float(value)
    return False, value


def _merge_check(
    spec: CheckSpec, base: dict[str, Any], override: Any, source: str
) -> dict[str, Any]:
    if not isinstance(override, dict):
        raise ProfileError(f"{source}: checks.{spec.name} must be a mapping")
    merged = dict(base)
    for key, value in override.items():
        where = f"{source}: checks.{spec.name}.{key}"
        if key == "enabled":
            if not isinstance(value, bool):
                raise ProfileError(f"{where}: must be true or false")
        elif key == "severity":
            if value not in SEVERITIES:
                raise ProfileError(f"{where}: must be one of {sorted(SEVERITIES)}")
        elif key in spec.params:
            want = spec.params[key]
            ok, value = _coerce(value, want)
            if not ok:
                names = " or ".join(
                    _type_name(t) for t in (want if isinstance(want, tuple) else (want,))
                )
                raise ProfileError(f"{where}: must be of type {names}")
        else:
            known = ["enabled", "severity", *sorted(spec.params)]
            raise ProfileError(f"{where}: unknown key (known: {', '.join(known)})")
        merged[key] = value
    return merged


def load_profile(path: str | None, specs: dict[str, CheckSpec]) -> Profile:
    """Load the default profile and merge ``path`` over it."""
    default_text = resources.files("cephnode_exporter").joinpath("profiles/default.yaml")
    layers = [(_load_yaml(default_text.read_text(), "default profile"), "default profile")]
    if path is not None:
        try:
            text = read_config_text(path, "profile")
        except ConfigFileError as exc:
            raise ProfileError(str(exc)) from None
        layers.append((_load_yaml(text, path), path))

    raw: dict[str, dict[str, Any]] = {}
    all_specs = concrete(specs)
    instances: dict[str, CheckSpec] = {}
    name = "default"
    for data, source in layers:
        name = str(data.get("name", name))
        for check_name, override in (data.get("checks") or {}).items():
            check_name = str(check_name)
            try:
                spec = resolve(specs, check_name)
            except ValueError as exc:
                raise ProfileError(f"{source}: checks.{check_name}: {exc}") from None
            if spec is None:
                known = [
                    *sorted(concrete(specs)),
                    *(f"{n}.<name>" for n in specs if specs[n].family),
                ]
                raise ProfileError(
                    f"{source}: unknown check {check_name!r} (known: {', '.join(known)})"
                )
            if spec.parent:
                instances[check_name] = spec
                all_specs[check_name] = spec
            raw[check_name] = _merge_check(spec, raw.get(check_name, {}), override, source)

    checks: dict[str, CheckSettings] = {}
    for check_name, spec in all_specs.items():
        values = raw.get(check_name, {})
        missing = [p for p in spec.params if p not in values and p not in spec.defaults]
        if missing:
            raise ProfileError(f"profile {name}: check {check_name} lacks {', '.join(missing)}")
        params = {p: values[p] if p in values else spec.defaults[p] for p in spec.params}
        if spec.validate is not None:
            try:
                spec.validate(params)
            except (ValueError, TypeError) as exc:
                raise ProfileError(f"profile {name}: checks.{check_name}: {exc}") from None
        checks[check_name] = CheckSettings(
            enabled=values.get("enabled", True),
            severity=SEVERITIES[values.get("severity", "fail")],
            params=params,
        )
    return Profile(name=name, source=path or "default", checks=checks, instances=instances)
