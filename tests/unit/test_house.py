"""The package's shape: no import cycle, no module using another's private names, no
module too long to read.

Read with :mod:`ast` from every ``sessiondb/**/*.py``, so the checks see what the
interpreter would not run: imports under ``if TYPE_CHECKING:`` and inside functions
count as edges of the import graph as much as those at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sessiondb

PACKAGE = Path(sessiondb.__file__).parent
ROOT = PACKAGE.parent
# Longest a module may be without a comment at its top that says why (and names this
# number: "Over 700 lines: …").
MAX_LINES = 700
# store.py is the front door, and was 1,635 lines before its core moved out.
MAX_STORE_LINES = 800


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package is its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _package_of(name: str) -> str:
    path = MODULES[name]
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(importer: str, node: ast.ImportFrom) -> list[str]:
    """The package modules one ``from … import …`` names."""
    if node.level:
        base = _package_of(importer)
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        target = f"{base}.{node.module}" if node.module else base
    else:
        target = node.module or ""
    if target not in MODULES:
        return []
    # ``from . import turns`` names a module; ``from .core import Core`` a name in one.
    named = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return named or [target]


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, wherever the import stands."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                edges.update(_resolve(name, node))
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in MODULES)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, and what it assigns,
    as names or as attributes (``self._x = …``)."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    return {n for n in own if _private(n)}


def private_reaches(source: str) -> list[str]:
    """``line: what`` of each use of another module's private name in ``source``."""
    tree = ast.parse(source)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            # A private module (``from . import _provider``) serves its own package.
            found += [
                f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}"
                for a in node.names
                if _private(a.name) and not (node.level == 1 and node.module is None)
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert "sessiondb.store" in graph and "sessiondb.core" in graph["sessiondb.store"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_type_checking_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .store import X\n"
    node = ast.parse(source).body[1].body[0]  # type: ignore[attr-defined]
    assert _resolve("sessiondb.turns", node) == ["sessiondb.store"]


def test_features_take_the_core_not_the_store() -> None:
    graph = import_graph()
    for feature in ("turns", "retention", "transfer", "overlays", "forks", "bulk", "core"):
        assert "sessiondb.store" not in graph[f"sessiondb.{feature}"], feature
    assert "sessiondb.store" not in graph["sessiondb.compaction.engine"]


def test_no_module_uses_another_modules_private_names() -> None:
    reaches = {
        str(path.relative_to(ROOT)): found
        for path in MODULES.values()
        if (found := private_reaches(path.read_text(encoding="utf-8")))
    }
    assert reaches == {}


def test_the_private_name_check_sees_a_reach() -> None:
    source = (
        "from .store import _x\n"
        "class T:\n"
        "    def __init__(self):\n"
        "        self._own = 1\n"
        "    def f(self, store, other):\n"
        "        return store._backend, other._own, self.__dict__\n"
    )
    assert private_reaches(source) == ["1: from .store import _x", "6: store._backend"]


def test_modules_stay_readable() -> None:
    long = {}
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_LINES and f"{MAX_LINES} lines" not in text[:2000]:
            long[name] = lines
    assert long == {}
    store = (PACKAGE / "store.py").read_text(encoding="utf-8").count("\n")
    assert store <= MAX_STORE_LINES
