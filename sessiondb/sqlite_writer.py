"""The SQLite append path: a whole append in one hop to one writer thread.

Through aiosqlite every statement is a hop to the driver's thread (BEGIN IMMEDIATE,
UPDATE, INSERT, COMMIT: four), and SQLAlchemy adds its own cost to each; an append took
~20× the bare sqlite3 statements. Here the transaction runs start to finish in one
thread on a plain ``sqlite3`` connection with the same pragmas. SQLite has one writer at a
time anyway, so one thread per store loses nothing.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TypeVar

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


class SQLiteWriter:
    """One thread with one ``sqlite3`` connection to the store's database file."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiondb-sqlite")
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
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
