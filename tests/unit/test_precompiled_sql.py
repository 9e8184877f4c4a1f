"""The SQLite SQL compiled ahead (sessiondb/backends/sqlite_sql.py) is what SQLAlchemy
compiles today, and the SQLite backend runs it without compiling."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from sessiondb import statements as q
from sessiondb.backends import precompile, sqlite_sql
from sessiondb.backends.base import Compiler
from sessiondb.shapes import Shape


def test_the_precompiled_sql_is_what_sqlalchemy_compiles_now() -> None:
    """Fails when a statement, its builder or SQLAlchemy changed and the file was not
    written again: run ``python -m sessiondb.backends.precompile``."""
    assert precompile.table() == sqlite_sql.SQL, (
        "sessiondb/backends/sqlite_sql.py is stale: run python -m sessiondb.backends.precompile"
    )


def test_the_file_is_what_the_generator_writes() -> None:
    """Its layout aside (the formatter's), the module is the generator's text."""
    namespace: dict[str, Any] = {}
    exec(compile(precompile.source(precompile.table()), "<generated>", "exec"), namespace)
    assert namespace["SQL"] == sqlite_sql.SQL
    assert len(sqlite_sql.SQL) >= 30


def test_a_precompiled_statement_is_not_compiled() -> None:
    """The backend's compiler takes a precompiled statement from the table (the dialect
    is never made), and compiles any other one with the dialect."""
    made: list[int] = []

    def dialect() -> Any:
        made.append(1)
        return sqlite_sql.dialect()

    compiler = Compiler(dialect, sqlite_sql.SQL)
    stmt, _ = q.list_sessions(
        "ns", limit=5, after=None, source="cron", parent_id=None, flavour=q.SQLITE
    )
    assert isinstance(stmt, Shape)
    sql, names, defaults = sqlite_sql.SQL[stmt.name]
    compiled = compiler(stmt)
    assert (compiled.sql, compiled.names, compiled.defaults) == (sql, names, defaults)
    assert compiler(stmt) is compiled
    assert made == []
    other = text("SELECT :x")
    assert compiler(other).sql == "SELECT ?"
    assert made == [1]
    assert compiler(other).names == ("x",)


def test_a_shape_the_file_lacks_is_built_and_compiled() -> None:
    """A named statement that is not precompiled (a source no list names) is built
    from its builder and compiled as the statement itself would be."""
    compiler = Compiler(sqlite_sql.dialect, sqlite_sql.SQL)
    stmt, _ = q.list_sessions(
        "ns", limit=5, after=None, source="webhook", parent_id=None, flavour=q.SQLITE
    )
    assert isinstance(stmt, Shape) and stmt.name not in sqlite_sql.SQL
    compiled = compiler(stmt)
    assert compiled == Compiler(sqlite_sql.dialect).compile(stmt.statement)
    assert "'webhook'" in compiled.sql and compiled.names[:2] == ("ns", "limit")


@pytest.mark.parametrize("flavour", [q.POSTGRES, q.SQLITE])
def test_cached_statements_are_named_by_their_shape(flavour: str) -> None:
    """Each shape of a builder has its own name; a constant has its own name."""
    with_turns, _ = q.list_sessions(
        "ns", limit=1, after=None, source=None, parent_id=None, flavour=flavour
    )
    without, _ = q.list_sessions(
        "ns", limit=1, after=None, source=None, parent_id=None, flavour=flavour, with_turns=False
    )
    assert isinstance(with_turns, Shape) and isinstance(without, Shape)
    assert with_turns.name == f"_list_sessions(False, None, False, {flavour!r}, True)"
    assert without.name != with_turns.name
    keys, _ = q.data_keys_of("ns")
    assert isinstance(keys, Shape) and keys.name == "_DATA_KEYS_OF"
    # A shape is named as its statement is, once built.
    for shape in (with_turns, without, keys):
        assert q.SHAPE_NAMES[id(shape.statement)] == shape.name
