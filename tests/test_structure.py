"""The package's shape: no import cycle, and no room too big to hold in one's head.

The import graph is read with :mod:`ast` from every module of ``cephnode_exporter``,
with every import form: module level, inside functions, and under ``TYPE_CHECKING``
(a type-only arrow that runs back up is still an arrow a reader has to follow). An edge
``a -> b`` means module ``a`` names module ``b`` in an import: ``import a.b``,
``from a import b`` (``b`` a submodule) or ``from a.b import name``. A package's
``__init__`` that imports its submodules to register them (``collectors``) is an edge
from the package down; the implicit "importing ``p.m`` runs ``p/__init__``" is not an
edge, or every registry package would be a cycle with its members.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "exporter" / "cephnode_exporter"
ROOT = "cephnode_exporter"

# Lines above which a module must say at its top why it is not split.
MAX_LINES = 600
# The marker a module over the limit carries near its top, followed by the reason.
REASON = "Size:"
# How far from the top the reason may be: within the module's docstring, where a
# reader looks first.
REASON_WITHIN = 40


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, by any form anywhere in the file."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if not (target == ROOT or target.startswith(ROOT + ".")):
                continue
            found.add(target)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    found.add(sub)
    # ``import a.b.c`` of a name that is not a module (an attribute) falls back to its module.
    resolved = set()
    for target in found:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target != name:
            resolved.add(target)
    return resolved


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle as a path ``[a, b, ..., a]``, or [] when the graph has none."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == GREY:
                return [*stack[stack.index(nxt) :], nxt]
            if colour.get(nxt) == WHITE:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        colour[node] = BLACK
        return []

    for node in sorted(graph):
        if colour[node] == WHITE:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_graph_sees_every_import_form(tmp_path: Path) -> None:
    """The graph builder itself: function-level and TYPE_CHECKING imports are edges."""
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import cephnode_exporter.logs\n"
        "from cephnode_exporter import safeio\n"
        "from . import scrape\n"
        "if TYPE_CHECKING:\n"
        "    from cephnode_exporter.profile import Profile\n"
        "def f() -> None:\n"
        "    from cephnode_exporter.web.server import make_server\n"
    )
    known = set(modules())
    # ``from package import module`` runs the package's __init__ too: both are edges.
    assert imports(f"{ROOT}.mod", source, known) == {
        ROOT,
        f"{ROOT}.logs",
        f"{ROOT}.safeio",
        f"{ROOT}.scrape",
        f"{ROOT}.profile",
        f"{ROOT}.web.server",
    }
    graph = import_graph()
    # cli imports web inside a function (web and bcrypt only for serve).
    assert "cephnode_exporter.web" in graph["cephnode_exporter.cli"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_checks_read_facts_not_collectors() -> None:
    """Facts are the contract between reading and judging: checks import them from
    ``facts``, never from the collectors that also build metrics; collectors never
    import the profile or the checks."""
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith(f"{ROOT}.checks"):
            bad = {t for t in targets if t.startswith(f"{ROOT}.collectors")}
            assert not bad, f"{name} imports {sorted(bad)}"
        if name.startswith(f"{ROOT}.collectors"):
            bad = {
                t
                for t in targets
                if t.startswith((f"{ROOT}.checks", f"{ROOT}.profile", f"{ROOT}.scrape"))
            }
            assert not bad, f"{name} imports {sorted(bad)}"


# Each lower room and the rooms it may import (besides itself): arrows point down.
BELOW = {
    "hostfs": ("hostfs", "safeio", "logs"),
    "devices": ("devices", "hostfs", "safeio", "logs"),
    "ceph": ("ceph", "hostfs", "safeio", "logs"),
    "kprofile": ("kprofile", "hostfs", "safeio", "logs"),
    "facts": ("facts", "hostfs", "devices", "ceph", "kprofile", "safeio", "logs"),
}


def test_lower_rooms_point_down() -> None:
    """hostfs is the bottom room; devices, ceph and kprofile parse on top of it; facts
    sit on those. None of them imports a room above it."""
    graph = import_graph()
    for name, targets in graph.items():
        room = name.split(".")[1] if "." in name else ""
        if room not in BELOW:
            continue
        allowed = tuple(f"{ROOT}.{r}" for r in BELOW[room])
        bad = {t for t in targets if not t.startswith(allowed)}
        assert not bad, f"{name} imports {sorted(bad)} (above {room})"


def big_modules() -> dict[str, int]:
    over = {}
    for top in (REPO / "exporter", REPO / "dashboards"):
        for path in sorted(top.rglob("*.py")):
            lines = path.read_text().count("\n")
            if lines > MAX_LINES:
                over[str(path.relative_to(REPO))] = lines
    return over


def unexplained(root: Path, over: dict[str, int]) -> list[str]:
    """The modules of ``over`` (paths under ``root``) without a reason near their top."""
    out = []
    for rel, lines in over.items():
        head = "\n".join((root / rel).read_text().splitlines()[:REASON_WITHIN])
        if REASON not in head:
            out.append(f"{rel} ({lines} lines)")
    return out


def test_the_size_check_fails_on_a_big_module_without_a_reason(tmp_path: Path) -> None:
    """The check itself: a module over the limit is refused unless its top says why."""
    body = "x = 1\n" * (MAX_LINES + 1)
    (tmp_path / "big.py").write_text('"""A big module."""\n' + body)
    (tmp_path / "explained.py").write_text(f'"""A big module.\n\n{REASON} one table."""\n' + body)
    late = '"""A big module."""\n' + "y = 2\n" * REASON_WITHIN + f"# {REASON} too late\n"
    (tmp_path / "late.py").write_text(late + body)
    over = {"big.py": MAX_LINES + 2, "explained.py": MAX_LINES + 4, "late.py": 2 * MAX_LINES}
    assert unexplained(tmp_path, over) == [
        f"big.py ({MAX_LINES + 2} lines)",
        f"late.py ({2 * MAX_LINES} lines)",
    ]


def test_no_big_module_without_a_reason() -> None:
    bad = unexplained(REPO, big_modules())
    assert not bad, f"modules over {MAX_LINES} lines without a {REASON!r} line near the top: " + (
        ", ".join(bad)
    )
