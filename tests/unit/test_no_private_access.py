"""The tests use the package's public names only: no ``store._backend``, no
``store._flavour``, no ``from sessiondb… import _name``, nothing ``obj._name`` on an
object that is not the test's own.

Read with :mod:`ast` from every ``.py`` file under ``tests/``, subfolders included.
Flagged:

- an attribute ``X._name`` (one leading underscore or a mangled ``__name``, not a
  ``__dunder__``) unless ``X`` is ``self`` or ``cls`` (a test's own classes);
- an import of a private name, or from a private module of ``sessiondb``
  (``from sessiondb.formats._provider import …``, ``from sessiondb import _compose``);
- ``setattr``/``getattr``/``delattr``/``monkeypatch.setattr``/``monkeypatch.delattr``
  with a private attribute name as a string.

A module's own private names (``_rows(...)``, ``_helper``) are plain names, never
flagged. Whatever the tests still need from inside the package is listed in
:data:`ALLOWED`, each with its reason; an entry that no longer matches fails too, so
the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]

# (file, what) -> why. ``file`` is the file's name (the test below keeps names unique
# under ``tests/``); ``what`` is the access as written (``ast.unparse``), or
# ``import <module>.<name>``.
ALLOWED: dict[tuple[str, str], str] = {
    # White-box tests of the SQLite backend, built by its public constructor: what they
    # check (where a commit ran, what its writer thread and connections hold) has no
    # public view, and should not get one for the tests' sake.
    ("test_sqlite_threads.py", "writer._inline_commits"): "counts the backend's inline commits",
    ("test_sqlite_threads.py", "backend._thread"): "drains the backend's writer thread",
    ("test_sqlite_threads.py", "backend._writer_conn"): "the writer connection's transaction",
    ("test_cancellation.py", "backend._writer"): "no connection left inside a transaction",
    ("test_cancellation.py", "backend._inline"): "no connection left inside a transaction",
    # Fault injection: the process stops renewing its lease, as in a GC pause; a public
    # way would let a caller lose its own lease on purpose.
    ("test_turns.py", "stale._stop_renewing"): "simulates a pause that stops the renewals",
    # A walk the public encoder reaches only below orjson's depth limit; the test checks
    # it does not recurse at 5,000 levels.
    ("test_input_limits.py", "jsoncodec._has_non_finite"): "the non-recursive walk itself",
    # The suite's own harness (conftest finds a Postgres, and the compose file's URL comes
    # from the package's development helper), tested as such.
    ("conftest.py", "import sessiondb._compose"): "the compose database's URL",
    ("test_compose.py", "conftest._find_postgres"): "tests the suite's Postgres discovery",
    ("test_compose.py", "setattr conftest._can_connect"): "tests the suite's Postgres discovery",
    # Unit tests of private helpers, whose public paths reach them only in part.
    ("test_secrets.py", "import sessiondb.cli._without_secrets"): (
        "the CLI's password masking on messages no driver error gives"
    ),
    # Files another change of the same issue is rewriting (the corpus and format tests);
    # left for that change so that the two do not collide.
    ("test_import_progress.py", "progress._bar"): "the progress bar's state (other change)",
}

_SETTERS = {"setattr", "getattr", "delattr", "hasattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_accesses(source: str) -> list[tuple[int, str]]:
    """(line, what) of each private access in a module's source."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            for alias in node.names:
                if _private(alias.name) or (
                    parts[0] == "sessiondb" and any(_private(p) for p in parts)
                ):
                    found.append((node.lineno, f"import {node.module}.{alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "sessiondb" and any(_private(p) for p in parts):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            target, attr = node.args[0], node.args[1]
            if (
                name in _SETTERS
                and isinstance(attr, ast.Constant)
                and isinstance(attr.value, str)
                and _private(attr.value)
                and not (isinstance(target, ast.Name) and target.id in ("self", "cls"))
            ):
                found.append((node.lineno, f"setattr {ast.unparse(target)}.{attr.value}"))
    return sorted(found)


def test_the_checker_flags_what_it_should() -> None:
    source = """
from sessiondb import _compose
from sessiondb.formats._provider import MISSING
from conftest import _connect
import sessiondb._compose
class Own:
    def f(self):
        return self._x, cls._y
store._backend.fetch()
s._flavour
backend._writer_conn().in_transaction
monkeypatch.setattr(store, "_backend", None)
getattr(s, "__dict__"), x.__class__, _own_helper(), q.public
"""
    assert [what for _, what in private_accesses(source)] == [
        "import sessiondb._compose",
        "import sessiondb.formats._provider.MISSING",
        "import conftest._connect",
        "import sessiondb._compose",
        "store._backend",
        "s._flavour",
        "backend._writer_conn",
        "setattr store._backend",
    ]


def _files() -> list[Path]:
    """Every Python file of the tests, in every subfolder."""
    return sorted(TESTS.rglob("*.py"))


def test_tests_use_no_private_names() -> None:
    files = _files()
    # ALLOWED names a file by its name alone, so no two files may share one.
    names = [p.name for p in files if p.name != "__init__.py"]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    seen: set[tuple[str, str]] = set()
    unexpected: list[str] = []
    for path in files:
        for line, what in private_accesses(path.read_text()):
            key = (path.name, what)
            seen.add(key)
            if key not in ALLOWED:
                unexpected.append(f"{path.relative_to(TESTS)}:{line}: {what}")
    assert not unexpected, "private access from tests:\n" + "\n".join(unexpected)
    stale = sorted(set(ALLOWED) - seen)
    assert not stale, f"allowed but no longer used (remove from ALLOWED): {stale}"
