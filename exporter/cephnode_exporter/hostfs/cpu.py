"""CPU topology basics: which CPUs exist and are online.

Source: Documentation/ABI/testing/sysfs-devices-system-cpu (``online``, ``possible``).
"""

from __future__ import annotations

from cephnode_exporter.hostfs import (
    NR_CPUS_MAX,
    HostFS,
    ParseError,
    ReadErrors,
    parse_cpulist,
)

CPU_DIR = ("devices", "system", "cpu")


def possible_cpus(fs: HostFS, errors: ReadErrors | None = None) -> frozenset[int] | None:
    """CPUs the kernel allocated resources for at boot: every CPU that can ever be
    online, fixed until reboot. None when the file is absent or unusable (counted in
    ``errors`` unless absent); callers then bound CPU numbers by ``NR_CPUS_MAX``."""
    path = fs.sys(*CPU_DIR, "possible")
    try:
        text = fs.shared.text(path)  # one read per scrape for every collector
    except FileNotFoundError:
        return None
    except OSError as exc:
        if errors is not None:
            errors.add(exc)
        return None
    try:
        cpus = parse_cpulist(text)
    except ValueError as exc:
        if errors is not None:
            errors.add(ParseError(path, str(exc)))
        return None
    if not cpus:
        if errors is not None:
            errors.add(ParseError(path, "empty"))
        return None
    return frozenset(cpus)


def online_cpus(fs: HostFS, errors: ReadErrors | None = None) -> list[int]:
    """CPUs the scheduler may run on; offline CPUs have no cpuidle directory.

    Raises ParseError unless the list names at least one CPU (the boot CPU is always
    online, so an empty list is a broken file, never an idle node) and only CPUs of the
    ``possible`` set: a list beyond it was not written by this kernel, and expanding it
    would cost memory without bound. A bad ``possible`` file is counted in ``errors``.
    """
    path = fs.sys(*CPU_DIR, "online")
    text = fs.shared.text(path)  # one read per scrape for every collector
    possible = possible_cpus(fs, errors)
    limit = max(possible) + 1 if possible else NR_CPUS_MAX
    try:
        cpus = parse_cpulist(text, limit)
    except ValueError as exc:
        raise ParseError(path, str(exc)) from None
    if not cpus:
        raise ParseError(path, "empty: no CPU online")
    if possible is not None:
        outside = [c for c in cpus if c not in possible]
        if outside:
            raise ParseError(path, f"CPU {outside[0]} is not in the possible set")
    return cpus


# cpu_dir's paths, built once: several collectors build one per CPU and attribute on
# every scrape (about 600 os.path.join calls on 96 CPUs). Emptied past the bound.
_CPU_DIRS: dict[tuple[str, int, tuple[str, ...]], str] = {}
_CPU_DIRS_MAX = 65536


def cpu_dir(fs: HostFS, cpu: int, *parts: str) -> str:
    key = (fs.sysfs, cpu, parts)
    path = _CPU_DIRS.get(key)
    if path is None:
        if len(_CPU_DIRS) >= _CPU_DIRS_MAX:
            _CPU_DIRS.clear()
        path = _CPU_DIRS[key] = fs.sys(*CPU_DIR, f"cpu{cpu}", *parts)
    return path


# cpu_paths' lists, by tree, online CPUs and attribute. Emptied past the bound.
_CPU_PATHS: dict[tuple[str, tuple[int, ...], tuple[str, ...]], list[str]] = {}
_CPU_PATHS_MAX = 256


def cpu_paths(fs: HostFS, cpus: list[int], *parts: str) -> list[str]:
    """:func:`cpu_dir` of each of ``cpus``: the same list object while the online CPUs
    are the same, so that AttrFiles.read_many finds its descriptors without a lookup
    per path. The caller must not change it."""
    key = (fs.sysfs, tuple(cpus), parts)
    paths = _CPU_PATHS.get(key)
    if paths is None:
        if len(_CPU_PATHS) >= _CPU_PATHS_MAX:
            _CPU_PATHS.clear()
        paths = _CPU_PATHS[key] = [cpu_dir(fs, cpu, *parts) for cpu in cpus]
    return paths
