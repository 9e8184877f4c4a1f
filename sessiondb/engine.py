"""Engines: connection set-up per backend and the translation of driver errors."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from .config import Settings
from .errors import (
    ConfigurationError,
    ConflictError,
    MissingDependencyError,
    SessionDBError,
)

# Milliseconds a SQLite writer waits for the write lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000

WRITE_OPTION = "sessiondb_write"


class DatabaseError(SessionDBError):
    """The database refused the operation."""


def create_engine(settings: Settings, **engine_kwargs: Any) -> AsyncEngine:
    """An async engine for ``settings.url``, set up for sessiondb's transactions."""
    if settings.is_sqlite:
        return _sqlite_engine(settings, **engine_kwargs)
    try:
        import asyncpg  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("asyncpg", "postgres") from exc
    engine_kwargs.setdefault("pool_size", 10)
    engine_kwargs.setdefault("max_overflow", 10)
    engine_kwargs.setdefault("pool_pre_ping", False)
    return create_async_engine(settings.url, **engine_kwargs)


def _sqlite_engine(settings: Settings, **engine_kwargs: Any) -> AsyncEngine:
    if settings.is_memory:
        # One connection: every connection to :memory: would be a database of its own.
        engine_kwargs.setdefault("poolclass", StaticPool)
    engine = create_async_engine(settings.url, **engine_kwargs)
    memory = settings.is_memory

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over BEGIN from the driver so that writers can say BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if not memory:
            cursor.execute("PRAGMA journal_mode = WAL")
            # With WAL, NORMAL loses no committed transaction on a process crash.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred transaction that later writes fails at once when another writer
        # holds the lock, whatever the busy timeout; IMMEDIATE waits for it instead.
        immediate = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def constraint_name(exc: IntegrityError) -> str:
    """The violated constraint's name, or the driver's message on SQLite."""
    orig = exc.orig
    name = getattr(orig, "constraint_name", None)  # asyncpg, through the adapter
    if name is None:
        cause = getattr(orig, "__cause__", None)
        name = getattr(cause, "constraint_name", None)
    return str(name) if name else str(orig)


def translate(exc: DBAPIError) -> SessionDBError:
    """The domain error for a driver error that escaped the store's own handling."""
    return _classify(exc.orig if exc.orig is not None else exc)


def translate_driver_error(exc: Exception) -> Exception:
    """The same for an exception raised by asyncpg or sqlite3 used directly (the hot
    paths); anything that is not a database error passes through unchanged."""
    if isinstance(exc, OSError):  # could not reach the server
        return DatabaseError(f"cannot reach the database: {type(exc).__name__}: {exc}")
    module = type(exc).__module__
    if module.startswith("asyncpg") or module == "sqlite3":
        return _classify(exc)
    return exc


def _classify(orig: BaseException) -> SessionDBError:
    text = str(orig)
    if ("no such table: sessiondb_" in text) or ('relation "sessiondb_' in text):
        return ConfigurationError(
            "the database has no sessiondb schema (or an old one); run `sessiondb migrate` "
            f"or `await store.migrate()` ({text})"
        )
    if "database is locked" in text or "could not serialize" in text or "deadlock" in text:
        return ConflictError(f"the database is busy; try again ({text})")
    return DatabaseError(f"{type(orig).__name__}: {text}")
