"""Reading and writing the tables directly in tests, on any backend, without the store's
private members.

:class:`Database` opens connections of its own to a store's database, found by the URL in
the store's public ``settings``: :mod:`sqlite3` for a SQLite file, asyncpg for Postgres.
It runs a statement (``text()`` or a :mod:`sessiondb.statements` statement, compiled for
the database's dialect exactly as the backends compile it), counts rows, and EXPLAINs.

``:memory:`` is one database per connection, so nothing outside the store can open it.
A store opened by :func:`open_store` (the ``store`` fixture's way) is built through the
public constructors, ``SessionStore(settings, backend=open_backend(settings))``, and the
backend is remembered here: on ``:memory:``, :class:`Database` runs its statements on that
backend's public methods (:class:`sessiondb.backends.Backend`). :func:`backend_of` gives
a test that checks the backend itself (its connections, ``fetch(plain=True)``) the same
object.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import weakref
from collections import namedtuple
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import create_engine, text
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.engine import Connection
from sqlalchemy.sql.base import Executable

from sessiondb import SessionStore
from sessiondb import statements as q
from sessiondb.backends import Backend, open_backend
from sessiondb.backends.base import Compiler
from sessiondb.backends.sqlite import timestamp
from sessiondb.config import Settings

T = TypeVar("T")

# Seconds a connection of ours waits for the store's write lock on SQLite.
SQLITE_BUSY_SECONDS = 30.0

_SQLITE = Compiler(sqlite_dialect(paramstyle="qmark"))
_POSTGRES = Compiler(asyncpg_dialect())  # type: ignore[no-untyped-call]

# The backend of each store :func:`open_store` built: how ``:memory:`` is reached.
_backends: weakref.WeakKeyDictionary[SessionStore, Backend] = weakref.WeakKeyDictionary()


def _statement(stmt: str | Executable) -> Executable:
    return text(stmt) if isinstance(stmt, str) else stmt


def _rows(rows: list[Any]) -> list[Any]:
    """Rows with their columns by attribute and by position (from sqlite3 or asyncpg)."""
    if not rows:
        return []
    Row = namedtuple("Row", list(rows[0].keys()), rename=True)  # type: ignore[misc]
    return [Row(*tuple(r)) for r in rows]


def literal(value: Any) -> str:
    """A test's parameter written into SQL text (for EXPLAIN of a prepared statement):
    an integer, or a string without quotes."""
    if isinstance(value, int):
        return str(value)
    assert isinstance(value, str) and "'" not in value
    return f"'{value}'"


@contextlib.asynccontextmanager
async def open_store(
    url: str | Settings,
    namespace: str | None = None,
    *,
    max_record_bytes: int = Settings.max_record_bytes,
    wrap: Callable[[Backend], Any] | None = None,
) -> AsyncIterator[SessionStore]:
    """``SessionStore.open(url, namespace, max_record_bytes=…)`` built from its public
    parts, whose backend :func:`backend_of` gives (and through which :class:`Database`
    reaches ``:memory:``). ``wrap`` turns the backend into the one the store uses (a
    test's fault injection)."""
    if isinstance(url, Settings):
        settings = url
    else:
        settings = Settings.from_env(url, namespace, max_record_bytes=max_record_bytes)
    backend = open_backend(settings)
    store = SessionStore(
        settings, backend=wrap(backend) if wrap else backend, encryption=_test_encryption()
    )
    _backends[store] = backend
    try:
        yield store
    finally:
        await store.close()


def _test_encryption() -> Any:
    """``SESSIONDB_TEST_ENCRYPTION=1``: the ``store`` fixture's stores encrypt (a way to
    run a behaviour file against the encrypting backend; tests that read raw rows then
    see ciphertext, as they should)."""
    if os.environ.get("SESSIONDB_TEST_ENCRYPTION") != "1":
        return None
    from sessiondb.crypto import StaticKeyProvider

    return StaticKeyProvider({"test": bytes(32)}, "test")


@contextlib.asynccontextmanager
async def store_on(store_url: str, **options: Any) -> AsyncIterator[SessionStore]:
    """The ``store`` fixture's store, with ``options`` for :func:`open_store`: a file or
    server database comes migrated (a copy of the template); ``:memory:`` is migrated
    here."""
    async with open_store(store_url, **options) as store:
        if store_url == ":memory:":
            await store.migrate()
        yield store


def backend_of(store: SessionStore) -> Backend:
    """The backend of a store :func:`open_store` built (the unwrapped one)."""
    try:
        return _backends[store]
    except KeyError:
        raise LookupError(
            f"{store!r} was not opened by helpers.sql.open_store: its backend is its own"
        ) from None


@dataclass(frozen=True)
class Database:
    """A store's database, read and written on connections of our own."""

    settings: Settings
    backend: Backend | None = None  # ``:memory:`` only: the store's, by its public methods

    @classmethod
    def of(cls, store_or_url: SessionStore | str) -> Database:
        if isinstance(store_or_url, str):
            return cls(Settings.from_env(store_or_url))
        settings = store_or_url.settings
        if not settings.is_memory:
            return cls(settings)
        try:
            return cls(settings, _backends[store_or_url])
        except KeyError:
            raise LookupError(
                "a :memory: database is the store's one connection: open the store with "
                "helpers.sql.open_store to read it from a test"
            ) from None

    @property
    def flavour(self) -> str:
        """The statements' flavour of the database: ``"sqlite"`` or ``"postgresql"``
        (:data:`sessiondb.statements.SQLITE`, :data:`~sessiondb.statements.POSTGRES`)."""
        return q.SQLITE if self.settings.is_sqlite else q.POSTGRES

    @property
    def path(self) -> str:
        """The SQLite file."""
        assert self.settings.is_sqlite and not self.settings.is_memory, self.settings
        return str(self.settings.url.database)

    def compile(self, stmt: str | Executable, params: dict[str, Any]) -> tuple[str, list[Any]]:
        """The driver's SQL of ``stmt`` (``?`` or ``$n`` placeholders) and its arguments,
        as the store's backend compiles and binds them."""
        compiled = (_SQLITE if self.settings.is_sqlite else _POSTGRES)(_statement(stmt))
        args = compiled.args(params)
        if self.settings.is_sqlite:
            args = [timestamp(v) if isinstance(v, datetime) else v for v in args]
        return compiled.sql, args

    # -- connections of our own ---------------------------------------------------------

    def sqlite_connect(self) -> sqlite3.Connection:
        """A connection to the SQLite file (autocommit; the caller closes it)."""
        conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=SQLITE_BUSY_SECONDS, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    async def pg_connect(self) -> Any:
        """An asyncpg connection to the Postgres database (the caller closes it)."""
        import asyncpg

        url = self.settings.url
        return await asyncpg.connect(
            user=url.username,
            password=url.password,
            host=url.host or "127.0.0.1",
            port=url.port or 5432,
            database=url.database,
        )

    async def _sqlite(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            conn = self.sqlite_connect()
            try:
                return fn(conn)
            finally:
                conn.close()

        return await asyncio.to_thread(run)

    # -- what tests ask ----------------------------------------------------------------

    async def fetch(self, stmt: str | Executable, **params: Any) -> list[Any]:
        """Rows of a read statement; columns by attribute and by position."""
        if self.backend is not None:
            return _rows(await self.backend.fetch((_statement(stmt), params)))
        sql, args = self.compile(stmt, params)
        if self.settings.is_sqlite:
            return _rows(await self._sqlite(lambda c: c.execute(sql, args).fetchall()))
        conn = await self.pg_connect()
        try:
            return _rows(list(await conn.fetch(sql, *args)))
        finally:
            await conn.close()

    async def scalar(self, stmt: str | Executable, **params: Any) -> Any:
        rows = await self.fetch(stmt, **params)
        return rows[0][0] if rows else None

    async def count(self, table: str, where: str = "", **params: Any) -> int:
        """Rows of ``table`` (``where``: a condition of ``text()``, ``:name`` parameters)."""
        condition = f" WHERE {where}" if where else ""
        return int(await self.scalar(f"SELECT count(*) FROM {table}{condition}", **params))

    async def execute(self, stmt: str | Executable, **params: Any) -> list[Any]:
        """A write statement in a transaction of its own; its rows (RETURNING)."""
        if self.backend is not None:
            return _rows(await self.backend.execute((_statement(stmt), params)))
        sql, args = self.compile(stmt, params)
        if self.settings.is_sqlite:

            def write(conn: sqlite3.Connection) -> list[Any]:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = conn.execute(sql, args).fetchall()
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return rows

            return _rows(await self._sqlite(write))
        conn = await self.pg_connect()
        try:
            async with conn.transaction():
                return _rows(list(await conn.fetch(sql, *args)))
        finally:
            await conn.close()

    async def run_sync(self, fn: Callable[[Connection], T]) -> T:
        """``fn`` on a SQLAlchemy connection to the database, committed after."""
        if self.backend is not None:
            return await self.backend.run_sync(fn)
        if self.settings.is_sqlite:

            def run() -> T:
                engine = create_engine(
                    f"sqlite:///{self.path}", connect_args={"timeout": SQLITE_BUSY_SECONDS}
                )
                try:
                    with engine.begin() as conn:
                        return fn(conn)
                finally:
                    engine.dispose()

            return await asyncio.to_thread(run)
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(self.settings.url)
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(fn)
        finally:
            await engine.dispose()

    async def explain(
        self,
        stmt: str | Executable,
        params: dict[str, Any],
        *,
        generic: bool = False,
        options: str = "COSTS OFF",
    ) -> list[str]:
        """The plan of ``stmt`` as the store sends it: SQLite's EXPLAIN QUERY PLAN details;
        on Postgres the lines of ``EXPLAIN (options)`` (one JSON text for ``FORMAT
        JSON``), of the statement with its arguments written in, or with ``generic`` of
        the prepared statement with Postgres made to use its generic plan."""
        sql, args = self.compile(stmt, params)
        if self.settings.is_sqlite:
            rows = await self._sqlite(
                lambda c: c.execute(f"EXPLAIN QUERY PLAN {sql}", args).fetchall()
            )
            return [str(row[3]) for row in rows]
        literals = [literal(v) for v in args]
        conn = await self.pg_connect()
        try:
            if generic:
                await conn.execute("SET plan_cache_mode = force_generic_plan")
                await conn.execute(f"PREPARE explained AS {sql}")
                rows = await conn.fetch(
                    f"EXPLAIN ({options}) EXECUTE explained({', '.join(literals)})"
                )
            else:
                for n in range(len(literals), 0, -1):
                    sql = sql.replace(f"${n}", literals[n - 1])
                rows = await conn.fetch(f"EXPLAIN ({options}) {sql}")
        finally:
            await conn.close()
        return [r[0] for r in rows]

    async def steps(self, stmt: str | Executable, params: dict[str, Any]) -> int:
        """SQLite's virtual-machine steps to run ``stmt`` to its end (a cost that is
        counted, not timed)."""
        sql, args = self.compile(stmt, params)

        def run(conn: sqlite3.Connection) -> int:
            counted = 0

            def tick() -> int:
                nonlocal counted
                counted += 1
                return 0

            conn.set_progress_handler(tick, 1)
            conn.execute(sql, args).fetchall()
            return counted

        return await self._sqlite(run)


def database(store_or_url: SessionStore | str) -> Database:
    """The database of a store (or at a URL), for raw SQL."""
    return Database.of(store_or_url)


def flavour(store: SessionStore) -> str:
    """The statements' flavour of the store's database, from its URL."""
    return q.SQLITE if store.settings.is_sqlite else q.POSTGRES


async def fetch(store: SessionStore, stmt: str | Executable, **params: Any) -> list[Any]:
    """Rows of a read statement; columns by attribute and by position."""
    return await Database.of(store).fetch(stmt, **params)


async def scalar(store: SessionStore, stmt: str | Executable, **params: Any) -> Any:
    return await Database.of(store).scalar(stmt, **params)


async def count(store: SessionStore, table: str, where: str = "", **params: Any) -> int:
    return await Database.of(store).count(table, where, **params)


async def execute(store: SessionStore, stmt: str | Executable, **params: Any) -> list[Any]:
    """A write statement in a transaction of its own."""
    return await Database.of(store).execute(stmt, **params)


async def run_sync(store: SessionStore, fn: Callable[[Connection], T]) -> T:
    """``fn`` on a SQLAlchemy connection to the store's database (committed after)."""
    return await Database.of(store).run_sync(fn)
