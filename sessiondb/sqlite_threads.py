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
        """Wait for running reads, then close every connection; idempotent."""
        self._executor.shutdown(wait=True)
        for conn in self._all:
            conn.close()
        self._all.clear()


class SQLiteWriter:
    """Writes to the store's database file: short ones inline, the rest on one thread.

    A short write (one append) runs on the event loop's thread when the write lock is
    free at that instant: a hop to a thread and back costs more than the write itself
    (~75 µs of loop time plus ~150 µs of wake-ups against ~110 µs of SQL here). The
    inline connection never waits: with ``busy_timeout = 0`` a held lock sends the write
    to the thread, whose connection waits for it. It never checkpoints either
    (``wal_autocheckpoint = 0``), so no checkpoint I/O lands on the loop. Instead, every
    ``CHECKPOINT_EVERY`` inline commits the thread checkpoints, and until it is done
    writes queue behind it on the thread: a checkpoint racing a stream of inline commits
    would never catch up, and the WAL would grow without end.
    """

    CHECKPOINT_EVERY = 1000

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessiondb-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        self._inline_commits = 0
        self._checkpointing = False
        self._closed = False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = _connect(self._path)
        return self._conn

    def _inline_connection(self) -> sqlite3.Connection:
        if self._inline is None:
            conn = _connect(self._path)
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._inline = conn
        return self._inline

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, short: bool = False) -> T:
        """Run ``fn(connection)`` in one IMMEDIATE transaction; ``short`` lets it run
        inline when the write lock is free."""
        if short and not self._checkpointing:
            try:
                result = self._try_inline(fn)
            except _Busy:
                pass  # another writer holds the lock: wait for it on the thread
            else:
                # Let other tasks run, as an await of real I/O would: a loop of inline
                # appends must not starve them.
                await asyncio.sleep(0)
                return result

        def unit() -> T:
            return _transaction(self._connection(), fn)

        return await asyncio.get_running_loop().run_in_executor(self._executor, unit)

    def _try_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._inline_connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise _Busy from exc
            raise
        result = _run_open(conn, fn)
        self._inline_commits += 1
        if self._inline_commits % self.CHECKPOINT_EVERY == 0:
            self._checkpoint_later()
        return result

    def _checkpoint_later(self) -> None:
        def checkpoint() -> None:
            self._connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

        def done(future: asyncio.Future[None]) -> None:
            self._checkpointing = False
            future.exception()  # a failed checkpoint is retried by the next one

        self._checkpointing = True
        asyncio.get_running_loop().run_in_executor(self._executor, checkpoint).add_done_callback(
            done
        )

    async def close(self) -> None:
        """Close both connections, each on the thread that uses it; idempotent."""
        if self._inline is not None:
            self._inline.close()
            self._inline = None

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        if not self._closed:
            self._closed = True
            await asyncio.get_running_loop().run_in_executor(self._executor, shut)
            self._executor.shutdown(wait=True)


class _Busy(Exception):
    """The write lock was taken when an inline write tried for it."""


def _transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    return _run_open(conn, fn)


def _run_open(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn`` in the transaction just begun; commit, or roll back on any error."""
    try:
        result = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result
