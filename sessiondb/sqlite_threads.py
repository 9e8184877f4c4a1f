"""The SQLite hot paths: a whole unit of work in one hop to a thread of ours.

Through aiosqlite every statement is a hop to the driver's thread (an append is four:
BEGIN IMMEDIATE, UPDATE, INSERT, COMMIT), and SQLAlchemy adds its own cost to each; an
append took ~20× the bare sqlite3 statements and a context read ~10×. Here appends run
start to finish on one writer thread and hot reads on a few reader threads, each on a
plain ``sqlite3`` connection with the store's pragmas. SQLite has one writer at a time
anyway, so one writer thread per store loses nothing; WAL lets readers run beside it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Table

from .engine import SQLITE_BUSY_TIMEOUT_MS
from .tables import SESSIONS, records, sessions

T = TypeVar("T")


def _insert(table: Table) -> str:
    """``INSERT INTO table (every column, in order) VALUES (?, …)``."""
    names = ", ".join(c.name for c in table.c)
    return f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(table.c))})"


_SET_HEAD = f"""
UPDATE {SESSIONS}
SET last_seq = last_seq + :count,
    message_count = message_count + :messages,
    last_message_at = CASE WHEN :messages > 0 THEN :at ELSE last_message_at END,
    name = COALESCE(name, :name),
    input_tokens = input_tokens + :d_input,
    output_tokens = output_tokens + :d_output,
    cache_read_tokens = cache_read_tokens + :d_cache_read,
    cache_write_tokens = cache_write_tokens + :d_cache_write,
    cost_total = cost_total + :d_cost
WHERE id = :sid AND namespace = :ns"""
BUMP = _SET_HEAD + " RETURNING last_seq"
BUMP_EXPECTED = _SET_HEAD + " AND last_seq = :expected RETURNING last_seq"
INSERT = _insert(records)
INSERT_SESSION = _insert(sessions)


def sqlite_timestamp(at: datetime) -> str:
    """The text SQLAlchemy's SQLite DateTime writes for a UTC time (sorts in time order)."""
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


class SQLiteReaders:
    """A few threads, each with its own ``sqlite3`` connection, for hot reads."""

    def __init__(self, path: str, threads: int = 2) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="sessiondb-sqlite-read"
        )
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _connect(self._path)
            conn.row_factory = sqlite3.Row  # columns by name, like the other drivers' rows
            self._all.append(conn)
        return conn

    async def fetch(self, sql: str, args: Sequence[Any]) -> list[Any]:
        """All rows of one statement, read in one snapshot."""

        def read() -> list[Any]:
            return self._connection().execute(sql, args).fetchall()

        return await asyncio.get_running_loop().run_in_executor(self._executor, read)

    async def close(self) -> None:
        self._executor.shutdown(wait=True)
        for conn in self._all:
            conn.close()
        self._all.clear()


class SQLiteWriter:
    """One thread with one ``sqlite3`` connection to the store's database file."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiondb-sqlite")
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = _connect(self._path)
        return self._conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` in one IMMEDIATE transaction on the writer thread."""

        def unit() -> T:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return await asyncio.get_running_loop().run_in_executor(self._executor, unit)

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)
