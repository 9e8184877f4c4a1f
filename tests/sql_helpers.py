"""Reading and writing the tables directly in tests, on any backend (``:memory:`` too):
statements go through the store's own backend, so they see the store's database."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.sql.base import Executable

from sessiondb import SessionStore

T = TypeVar("T")


def _statement(stmt: str | Executable) -> Executable:
    return text(stmt) if isinstance(stmt, str) else stmt


def _rows(rows: list[Any]) -> list[Any]:
    if not rows:
        return []
    Row = namedtuple("Row", list(rows[0].keys()), rename=True)  # type: ignore[misc]
    return [Row(*tuple(r)) for r in rows]


async def fetch(store: SessionStore, stmt: str | Executable, **params: Any) -> list[Any]:
    """Rows of a read statement; columns by attribute and by position."""
    return _rows(await store._backend.fetch((_statement(stmt), params)))


async def scalar(store: SessionStore, stmt: str | Executable, **params: Any) -> Any:
    rows = await fetch(store, stmt, **params)
    return rows[0][0] if rows else None


async def execute(store: SessionStore, stmt: str | Executable, **params: Any) -> list[Any]:
    """A write statement in a transaction of its own."""
    return _rows(await store._backend.execute((_statement(stmt), params)))


async def run_sync(store: SessionStore, fn: Callable[[Connection], T]) -> T:
    """``fn`` on a SQLAlchemy connection to the store's database (committed after)."""
    return await store._backend.run_sync(fn)


def literal(value: Any) -> str:
    """A test's parameter written into SQL text (for EXPLAIN of a prepared statement):
    an integer, or a string without quotes."""
    if isinstance(value, int):
        return str(value)
    assert isinstance(value, str) and "'" not in value
    return f"'{value}'"
