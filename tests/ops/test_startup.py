"""The start-up rule (sessiondb/cli.py's docstring) holds: each command loads only what it
runs, whatever code is added later.

Each check runs in a fresh interpreter with an import hook that records, for every
module on the forbidden list, the chain of calls that first imported it; a failure names
the module and that chain. Speed itself is measured by ``python -m bench --only 14``,
never here: these tests count modules, not milliseconds.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import run_python

import sessiondb
from sessiondb import SessionStore

# Modules that ``import sessiondb`` and ``sessiondb --help`` must not load. A name stands
# for the module and its submodules.
HEAVY = (
    # The database stack: SQLAlchemy (~0.2 s on its own), its ORM and asyncio layers,
    # Alembic, the drivers.
    "sqlalchemy",
    "alembic",
    "mako",
    "asyncpg",
    "aiosqlite",
    "sqlite3",
    "pydantic",
    "pydantic_core",
    "orjson",
    "ulid",
    "asyncio",
    # The standard library's slow ones: dataclasses imports inspect (~20 ms together).
    "dataclasses",
    "inspect",
    # sessiondb's own heavy parts.
    "sessiondb.config",  # its dataclasses; the help reads the SESSIONDB_* names in env
    "sessiondb.store",
    "sessiondb.models",
    "sessiondb.formats",
    "sessiondb.transfer",
    "sessiondb.compaction",
    "sessiondb.statements",
    "sessiondb.tables",
    "sessiondb.decode",  # and msgspec: a listing reads no record
    "msgspec",
    # A listing builds no validator (rows.session_info), so pydantic never looks up its
    # plugins (every installed package's entry points).
    "pydantic.plugin._loader",
    "sessiondb.backends",
    "sessiondb.migrate",
    "sessiondb.orm",
    "sessiondb.integrations",
    "sessiondb.testing",
    # Optional extras: each only where its feature runs.
    "rich",
    "starlette",
    "uvicorn",
    "fastapi",
    "jinja2",
    "cryptography",
    "opentelemetry",
    "hypothesis",
    "langchain_core",
    "agents",
    "claude_agent_sdk",
    "google",
)

# What ``sessiondb sessions list`` on a SQLite file must not load: it needs pydantic and
# sqlite3, and nothing below. Its statements are named (sessiondb/shapes.py) and their SQL
# precompiled (sessiondb/backends/sqlite_sql.py), so not even SQLAlchemy: neither its
# statements, its schema nor its URL (``Settings.url`` is built when first read).
NOT_FOR_SQLITE_LIST = (
    "alembic",
    "sqlalchemy",
    "sessiondb.statements",
    "sessiondb.tables",
    "sessiondb.decode",  # and msgspec: a listing reads no record
    "msgspec",
    # A listing builds no validator (rows.session_info), so pydantic never looks up its
    # plugins (every installed package's entry points).
    "pydantic.plugin._loader",
    "sessiondb.backends.precompile",
    "mako",
    "asyncpg",
    "aiosqlite",
    "sessiondb.backends.postgres",
    "sessiondb.backends.replicas",
    "sessiondb.compaction",
    "sessiondb.migrate",
    # The store's feature modules that a listing does not call (imported by first use).
    "sessiondb.bulk",
    "sessiondb.feed",
    "sessiondb.forks",
    "sessiondb.lifecycle",
    "sessiondb.overlays",
    "ulid",  # reads the installed packages' metadata at import: only where an id is made
    "sessiondb.orm",
    "sessiondb.formats",
    "sessiondb.transfer",
    "sessiondb.integrations",
    "sessiondb.testing",
    "rich",
    "starlette",
    "uvicorn",
    "fastapi",
    "jinja2",
    "cryptography",
    "opentelemetry",
    "hypothesis",
    "langchain_core",
    "agents",
    "claude_agent_sdk",
    "google",
)

# Runs in the child: records the first import of each watched module (with the frames
# that led to it, outside importlib), runs the code, writes what was loaded as JSON.
PROBE = r"""
import json, sys, traceback

watched, out_path, code = sys.argv[1:4]
watched = tuple(json.loads(watched))
chains = {}


def matches(name):
    return next((w for w in watched if name == w or name.startswith(w + ".")), None)


class Watch:
    def find_spec(self, name, path=None, target=None):
        hit = matches(name)
        if hit is not None and hit not in chains:
            frames = traceback.extract_stack()[:-1]
            chains[hit] = [
                f"{f.filename}:{f.lineno} ({f.name}: {(f.line or '').strip()})"
                for f in reversed(frames)
                if "importlib" not in f.filename and f.filename != "<string>"
            ][:8]
        return None


sys.meta_path.insert(0, Watch())
sys.argv = ["sessiondb", *sys.argv[4:]]
try:
    exec(compile(code, "<probe>", "exec"), {"__name__": "probe"})
except SystemExit as exc:
    if exc.code not in (0, None):
        raise
loaded = {w: chains.get(w, ["(imported before the probe started)"])
          for w in watched if any(m == w or m.startswith(w + ".") for m in sys.modules)}
with open(out_path, "w") as f:
    json.dump(loaded, f)
"""

IMPORT = "import sessiondb"
HELP = "import runpy\nrunpy.run_module('sessiondb', run_name='__main__', alter_sys=True)"
LIST = "from sessiondb.cli import main\nraise SystemExit(main())"


def loaded_by(code: str, watched: tuple[str, ...], tmp: Path, *argv: str) -> dict[str, Any]:
    """The watched modules that ``code`` loaded in a fresh interpreter, each with the
    chain of calls that first imported it (innermost first)."""
    out = tmp / "loaded.json"
    run_python("-c", PROBE, json.dumps(watched), str(out), code, *argv)
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def explain(what: str, loaded: dict[str, Any]) -> str:
    lines = [f"{what} loaded modules the start-up rule keeps out (see sessiondb/cli.py):"]
    for module, chain in loaded.items():
        lines.append(f"- {module}, first imported by:")
        lines += [f"    {frame}" for frame in chain]
    lines.append("Import it inside the function that needs it (TYPE_CHECKING for annotations).")
    return "\n".join(lines)


def test_import_sessiondb_loads_no_heavy_module(tmp_path: Path) -> None:
    loaded = loaded_by(IMPORT, HEAVY, tmp_path)
    assert not loaded, explain("`import sessiondb`", loaded)


def test_help_loads_no_heavy_module(tmp_path: Path) -> None:
    loaded = loaded_by(HELP, HEAVY, tmp_path, "--help")
    assert not loaded, explain("`python -m sessiondb --help`", loaded)


@pytest.mark.parametrize("command", ["sessions", "import", "export", "migrate", "compact"])
def test_a_command_help_loads_no_database_stack(tmp_path: Path, command: str) -> None:
    """``sessiondb import --help`` reads the format registry for its choices, and
    nothing of the database."""
    database = ("sqlalchemy", "alembic", "asyncpg", "sessiondb.store", "asyncio")
    loaded = loaded_by(HELP, database, tmp_path, command, "--help")
    assert not loaded, explain(f"`python -m sessiondb {command} --help`", loaded)


async def test_sessions_list_on_sqlite_loads_no_postgres_alembic_or_formats(
    tmp_path: Path,
) -> None:
    db = tmp_path / "small.db"
    async with SessionStore.open(str(db)) as store:
        await store.migrate()
        await store.create_session(name="one")
    loaded = loaded_by(LIST, NOT_FOR_SQLITE_LIST, tmp_path, "--db", str(db), "sessions", "list")
    assert not loaded, explain("`sessiondb sessions list` on SQLite", loaded)


def test_export_help_names_the_registry_default(capsys: pytest.CaptureFixture[str]) -> None:
    """The export help names its default without importing the registry; it is the
    registry's."""
    from sessiondb.cli import main
    from sessiondb.formats import DEFAULT_EXPORT_FORMAT

    with pytest.raises(SystemExit):
        main(["export", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default: {DEFAULT_EXPORT_FORMAT}," in help_text


async def test_the_collector_is_back_on_after_start_up(tmp_path: Path) -> None:
    """A command in its own process freezes what its imports built and turns the
    garbage collector back on; called from Python with ``argv``, it leaves the caller's
    collector alone."""
    db = tmp_path / "small.db"
    async with SessionStore.open(str(db)) as store:
        await store.migrate()
    code = (
        "import gc, io, sys\n"
        "from sessiondb.cli import main\n"
        f"assert main(['--db', {str(db)!r}, 'sessions', 'list'], out=io.StringIO()) == 0\n"
        "called = (gc.isenabled(), gc.get_freeze_count())\n"
        f"sys.argv = ['sessiondb', '--db', {str(db)!r}, 'sessions', 'list']\n"
        "assert main(out=io.StringIO()) == 0\n"
        "print(*called, gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    assert run_python("-c", code).stdout.split() == ["True", "0", "True", "True"]


def test_the_probe_names_what_it_finds(tmp_path: Path) -> None:
    """The guard can fail: a module that is loaded is reported with its importer."""
    loaded = loaded_by("import sessiondb.statements", ("alembic", "sqlalchemy"), tmp_path)
    assert list(loaded) == ["sqlalchemy"]
    assert any("sessiondb/" in frame for frame in loaded["sqlalchemy"]), loaded


# -- the public names stay importable -----------------------------------------------------

INIT = Path(sessiondb.__file__)


def _imported_names(tree: ast.Module) -> set[str]:
    """Names imported by ``from .x import …`` at the top of ``__init__.py`` or in its
    ``if TYPE_CHECKING:`` block."""
    names: set[str] = set()
    for node in tree.body:
        body = node.body if isinstance(node, ast.If) else [node]
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 1:
                names.update(a.asname or a.name for a in stmt.names)
    return names


def test_every_public_name_is_declared_for_type_checkers_and_resolves() -> None:
    """``__all__`` is what ``__init__.py`` imports (eagerly or for type checkers), and
    every name of it resolves at run time to the object its module defines."""
    declared = _imported_names(ast.parse(INIT.read_text(encoding="utf-8")))
    assert set(sessiondb.__all__) == declared
    code = (
        "import sessiondb, json, sys\n"
        "bad = [n for n in sessiondb.__all__ if getattr(sessiondb, n, None) is None]\n"
        "missing = sorted(set(sessiondb.__all__) - set(dir(sessiondb)))\n"
        "print(json.dumps([bad, missing]))\n"
    )
    bad, missing = json.loads(run_python("-c", code).stdout)
    assert bad == [] and missing == []
    # ``from sessiondb import *`` gives every public name.
    namespace: dict[str, Any] = {}
    exec("from sessiondb import *", namespace)
    assert set(sessiondb.__all__) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        sessiondb.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from sessiondb import no_such_name", {})


def test_the_lazy_names_are_the_modules_own_objects() -> None:
    from sessiondb.models import Message
    from sessiondb.store import SessionStore as Store

    assert sessiondb.SessionStore is Store
    assert sessiondb.Message is Message


def test_a_lazy_module_is_the_module_once_used() -> None:
    """The store's feature modules are bound lazily: the first attribute read imports
    the module, and every attribute is the module's own object."""
    code = (
        "import sys\n"
        "from sessiondb.lazy import lazy_modules\n"
        "(forks,) = lazy_modules('forks')\n"
        "before = 'sessiondb.forks' in sys.modules\n"
        "import sessiondb.forks as real\n"
        "print(before, forks.fork is real.fork, 'sessiondb.forks' in repr(forks))\n"
    )
    assert run_python("-c", code).stdout.split() == ["False", "True", "True"]
