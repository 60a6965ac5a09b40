"""Tuning profiles: expected values and severities for the checks.

The default profile ships inside the package; ``--profile FILE`` is merged over it check
by check, so a site file names only what it changes. Unknown checks, keys and wrongly
typed values are errors: a typo in a profile must not silently disable a check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from cephnode_exporter.checks import CheckSpec, Status

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


def _load_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: top level must be a mapping")
    unknown = set(data) - {"name", "checks"}
    if unknown:
        raise ProfileError(f"{source}: unknown keys {sorted(unknown)}")
    checks = data.get("checks") or {}
    if not isinstance(checks, dict):
        raise ProfileError(f"{source}: 'checks' must be a mapping")
    return data


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
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                ok, value = True, float(value)
            if not ok:
                raise ProfileError(f"{where}: must be of type {want.__name__}")
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
            with open(path, encoding="utf-8") as f:
                text = f.read(1 << 20)
        except OSError as exc:
            raise ProfileError(f"{path}: {exc.strerror}") from None
        layers.append((_load_yaml(text, path), path))

    raw: dict[str, dict[str, Any]] = {}
    name = "default"
    for data, source in layers:
        name = str(data.get("name", name))
        for check_name, override in (data.get("checks") or {}).items():
            spec = specs.get(check_name)
            if spec is None:
                raise ProfileError(
                    f"{source}: unknown check {check_name!r} (known: {', '.join(sorted(specs))})"
                )
            raw[check_name] = _merge_check(spec, raw.get(check_name, {}), override, source)

    checks: dict[str, CheckSettings] = {}
    for check_name, spec in specs.items():
        values = raw.get(check_name, {})
        missing = [p for p in spec.params if p not in values]
        if missing:
            raise ProfileError(f"profile {name}: check {check_name} lacks {', '.join(missing)}")
        checks[check_name] = CheckSettings(
            enabled=values.get("enabled", True),
            severity=SEVERITIES[values.get("severity", "fail")],
            params={p: values[p] for p in spec.params},
        )
    return Profile(name=name, source=path or "default", checks=checks)
