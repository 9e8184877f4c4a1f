"""SQLite on plain ``sqlite3`` connections: a writer thread, inline writes, reader threads.

Through aiosqlite every statement was a hop to the driver's thread (an append is four:
BEGIN IMMEDIATE, UPDATE, INSERT, COMMIT), and SQLAlchemy added its own cost to each; an
append took ~20× the bare sqlite3 statements and a context read ~10×. Here:

- A short write (one append) runs on the event loop's thread when the write lock is free
  at that instant: a hop to a thread and back costs more than the write itself (~75 µs
  of loop time plus ~150 µs of wake-ups against ~110 µs of SQL). The inline connection
  never waits (``busy_timeout = 0``): a held lock sends the write to the writer thread,
  whose connection waits for it. It never checkpoints either; every
  ``CHECKPOINT_EVERY`` inline commits the writer thread does, and writes queue behind it
  until it is done, so the WAL stays bounded.
- Every other write (big appends, transactions, bulk inserts, migrations) runs on one
  writer thread, one at a time (``_turn``): SQLite has one writer anyway.
- Reads run on a few reader threads, each with its own connection; WAL lets them read
  beside the writer. A statement whose last run took under a millisecond runs on
  the event loop's thread instead, on a reader connection of its own: the hop to a thread
  and back (~190 µs here) cost more than such a read.

``:memory:`` is one database per connection, so there the backend keeps one connection
and runs everything on the event loop's thread, one unit at a time: an in-memory
database does no I/O to wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import search_rank
from ..config import Settings
from ..errors import (
    BusyError,
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailableError,
    InvalidInputError,
    SessionDBError,
    StoreClosedError,
)
from ..lazy import lazy_modules
from ..shapes import SQLITE
from . import sqlite_sql
from .base import Compiled, Compiler, IntegrityViolation, Row, retrying

if TYPE_CHECKING:  # SQLAlchemy's, imported when first used (sessiondb.shapes says why)
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection

    from .. import statements as q
    from .. import tables
else:
    q, tables = lazy_modules("statements tables")

T = TypeVar("T")

# Milliseconds a writer waits for the write lock before giving up.
BUSY_TIMEOUT_MS = 30_000
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)  # the error codes of a lock held
# A write whose payloads exceed this many characters goes to the writer thread: copying
# it into the database would hold the event loop for milliseconds.
INLINE_WRITE_CHARS = 64_000
# A read whose last run took less than this runs on the event loop's thread next time.
INLINE_READ_SECONDS = 0.001


def timestamp(at: datetime) -> str:
    """The text a UTC time is stored as (what SQLAlchemy's SQLite DateTime writes; it sorts
    in time order). ``isoformat`` costs a fifth of ``strftime``."""
    if at.tzinfo is UTC:  # its isoformat, less the "+00:00" (no copy of the datetime)
        return at.isoformat(" ", "microseconds")[:26]
    at = at.astimezone(UTC)
    return at.replace(tzinfo=None).isoformat(" ", "microseconds")


def _bind(value: Any) -> Any:
    return timestamp(value) if isinstance(value, datetime) else value


def _bind_all(values: Sequence[Any]) -> list[Any]:
    return [timestamp(v) if isinstance(v, datetime) else v for v in values]


def connect(path: str, *, memory: bool = False) -> sqlite3.Connection:
    """A connection with the store's pragmas; ``BEGIN`` is the caller's to say."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row  # columns by name, like asyncpg's records
        # Search's rank: Postgres's ts_rank of a record's own text (not FTS5's bm25,
        # whose statistics of the whole table let one namespace's rows move another's).
        conn.create_function(
            search_rank.FUNCTION, search_rank.ARGUMENTS, search_rank.rank, deterministic=True
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if not memory:
            _use_wal(conn)
            # With WAL, NORMAL loses no committed transaction on a process crash.
            conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:
        raise translate(exc, path) from exc
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """WAL mode (a no-op once in it). Switching a new file takes its lock without the
    busy handler: connections opening one new file at once (replicas migrating at
    start-up) got "database is locked", 1 in 60. A busy switch waits, as a write would."""
    deadline, pause = time.monotonic() + BUSY_TIMEOUT_MS / 1000, 0.001
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").close()
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _rows(conn: sqlite3.Connection, sql: str, args: list[Any], plain: bool) -> list[Any]:
    """All rows of ``sql``: :class:`sqlite3.Row` objects, or tuples if ``plain``."""
    cursor = conn.cursor()
    if plain:
        cursor.row_factory = None
    return cursor.execute(sql, args).fetchall()


def translate(exc: BaseException, path: str) -> BaseException:
    """The sessiondb error for a ``sqlite3`` error, by SQLite's error code; anything
    else passes through unchanged."""
    if isinstance(exc, SessionDBError | IntegrityViolation):
        return exc
    if isinstance(exc, OverflowError):
        return InvalidInputError(f"a number does not fit a 64-bit column: {exc}")
    if not isinstance(exc, sqlite3.Error):
        return exc
    code = getattr(exc, "sqlite_errorcode", None)
    text = f"{type(exc).__name__}: {exc}"
    primary = code & 0xFF if isinstance(code, int) else None
    if isinstance(exc, sqlite3.IntegrityError):
        message = str(exc)
        if message.startswith("UNIQUE constraint failed: "):
            columns = tuple(
                sorted(
                    part.strip().rpartition(".")[2] for part in message.split(":", 1)[1].split(",")
                )
            )
            return IntegrityViolation(tables.unique_by_columns().get(columns), text)
        if "FOREIGN KEY" in message:
            return IntegrityViolation(None, text)
        return DatabaseError(text)
    if primary in _BUSY:
        return BusyError(f"the database is busy; try again ({text})")
    if primary == sqlite3.SQLITE_CANTOPEN:
        return DatabaseUnavailableError(f"cannot open the SQLite database {path!r}: {text}")
    if primary == sqlite3.SQLITE_TOOBIG:
        return InvalidInputError(f"a value is too big for SQLite: {text}")
    # SQLITE_ERROR covers a missing table; SQLite gives it no code of its own.
    if "no such table: sessiondb_" in str(exc):
        return ConfigurationError(
            "the database has no sessiondb schema (or an old one); run `sessiondb migrate` "
            f"or `await store.migrate()` ({text})"
        )
    return DatabaseError(text)


class _Busy(Exception):
    """The write lock was taken when an inline write tried for it."""


class SQLiteBackend:
    """The store's SQLite file, or its ``:memory:`` database."""

    flavour = SQLITE
    CHECKPOINT_EVERY = 1000  # inline commits between checkpoints on the writer thread

    def __init__(self, settings: Settings) -> None:
        self._memory = settings.is_memory
        self._path = ":memory:" if self._memory else str(settings.sqlite_database)
        self._compile = Compiler(sqlite_sql.dialect, sqlite_sql.SQL)
        self._turn = asyncio.Lock()  # the writer connection's: one unit of work at a time
        self._closed = False
        self._writer: sqlite3.Connection | None = None
        self._inline: sqlite3.Connection | None = None
        self._inline_commits = 0
        self._checkpointing = False
        self._thread: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._reader_conns: list[sqlite3.Connection] = []
        self._local = threading.local()
        self._inline_reader: sqlite3.Connection | None = None
        self._short_reads: dict[str, bool] = {}
        # The head bump and the insert of an append, by (expected, lean).
        self._append_sql: dict[tuple[bool, bool], tuple[Compiled, Compiled, str]] = {}
        self._version_conn: sqlite3.Connection | None = None
        if self._memory:
            self._writer = connect(self._path, memory=True)
        else:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="sessiondb-sqlite-write")
            self._readers = ThreadPoolExecutor(2, thread_name_prefix="sessiondb-sqlite-read")

    # -- where work runs --------------------------------------------------------------

    def _writer_conn(self) -> sqlite3.Connection:
        if self._writer is None:
            self._writer = connect(self._path)
        return self._writer

    async def _on_writer(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        abandon: threading.Event | None = None,
        final: bool = False,
    ) -> T:
        """Run ``fn`` on the writer connection (its thread, or inline for ``:memory:``);
        the caller holds ``_turn``.

        A cancel that arrives meanwhile does not stop ``fn``, nor drop it from the
        thread's queue: the caller waits for it to end, so that the connection's state
        is known before the cancel goes on (and ``_turn`` is held until then). Then it
        raises ``CancelledError``, unless ``fn`` is ``final`` (a COMMIT, or a whole unit
        that commits) and succeeded: a commit that happened is returned, never reported
        as cancelled. ``abandon`` is set on a cancel, for ``fn`` to roll back instead of
        committing if it has not committed yet.
        """
        if self._thread is None:
            return fn(self._writer_conn())
        done = asyncio.wrap_future(self._thread.submit(lambda: fn(self._writer_conn())))
        cancelled = False
        while True:
            try:
                result = await asyncio.shield(done)
            except asyncio.CancelledError:
                if done.cancelled():  # the thread's queue was dropped (never done here)
                    raise
                cancelled = True
                if abandon is not None:
                    abandon.set()
                continue
            except BaseException:
                if cancelled:
                    raise asyncio.CancelledError() from None
                raise
            if cancelled and not final:
                raise asyncio.CancelledError()
            return result

    async def _write_unit(self, fn: Callable[[sqlite3.Connection], T], *, short: bool) -> T:
        """Run ``fn`` in one IMMEDIATE transaction; ``short`` lets it run inline when the
        write lock is free.

        Cancel-safe: a cancel arrives before the unit starts (nothing written), or is
        deferred until the unit has committed or rolled back; a unit that committed
        returns its result, so ``CancelledError`` always means nothing was written.
        """
        # Let other tasks run first, as an await of real I/O would (a loop of inline
        # appends must not starve them); after the commit, nothing awaits, so no cancel
        # can arrive between the commit and the return.
        await asyncio.sleep(0)
        if (
            short
            and self._thread is not None
            and not self._turn.locked()
            and not self._checkpointing
        ):
            try:
                return self._try_inline(fn)
            except _Busy:
                pass  # another writer holds the lock: wait for it on the thread
        async with self._turn:
            self._check_open()
            abandon = threading.Event()
            return await self._on_writer(
                lambda conn: _transaction(conn, fn, abandon), abandon=abandon, final=True
            )

    def _try_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._inline is None:
            conn = connect(self._path)
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._inline = conn
        conn = self._inline
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY:
                raise _Busy from exc
            raise
        result = _run_open(conn, fn)
        self._inline_commits += 1
        if self._inline_commits % self.CHECKPOINT_EVERY == 0:
            self._checkpoint_later()
        return result

    def _checkpoint_later(self) -> None:
        assert self._thread is not None

        def checkpoint() -> None:
            self._writer_conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

        def done(future: asyncio.Future[None]) -> None:
            self._checkpointing = False
            future.exception()  # a failed checkpoint is retried by the next one

        self._checkpointing = True
        asyncio.get_running_loop().run_in_executor(self._thread, checkpoint).add_done_callback(done)

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self._path)
            self._reader_conns.append(conn)
        return conn

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    # -- the seam ---------------------------------------------------------------------

    async def fetch(self, bound: q.Bound, *, plain: bool = False) -> list[Row]:
        stmt, params = bound
        raw = self._compile(stmt)
        args = _bind_all(raw.args(params))
        return await retrying(lambda: self._fetch_once(raw, args, plain))

    async def _fetch_once(self, raw: Compiled, args: list[Any], plain: bool = False) -> list[Row]:
        self._check_open()
        try:
            if self._readers is None:
                async with self._turn:
                    rows = _rows(self._writer_conn(), raw.sql, args, plain)
                await asyncio.sleep(0)  # ran inline: let other tasks have a turn
                return rows

            if self._short_reads.get(raw.sql, False):
                return await self._read_inline(raw.sql, args, plain)

            def read() -> list[Row]:
                started = time.perf_counter()
                rows = _rows(self._reader(), raw.sql, args, plain)
                self._short_reads[raw.sql] = time.perf_counter() - started < INLINE_READ_SECONDS
                return rows

            return await asyncio.get_running_loop().run_in_executor(self._readers, read)
        except Exception as exc:
            raise translate(exc, self._path) from exc

    async def _read_inline(self, sql: str, args: list[Any], plain: bool = False) -> list[Row]:
        """A read on the event loop's thread, for a statement whose last run was short:
        the hop to a reader thread and back (~190 µs here) cost more than the read."""
        if self._inline_reader is None:
            self._inline_reader = connect(self._path)
        started = time.perf_counter()
        rows = _rows(self._inline_reader, sql, args, plain)
        self._short_reads[sql] = time.perf_counter() - started < INLINE_READ_SECONDS
        await asyncio.sleep(0)  # let other tasks run, as an await of real I/O would
        return rows

    async def execute(self, bound: q.Bound) -> list[Row]:
        stmt, params = bound
        raw = self._compile(stmt)
        args = _bind_all(raw.args(params))
        return await self._write(lambda conn: conn.execute(raw.sql, args).fetchall(), short=True)

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        self._check_open()
        bump, insert, index = self._append_statements(head)
        short = sum(len(r[-2]) for r in rows) <= INLINE_WRITE_CHARS
        return await self._write(
            lambda conn: _append(conn, bump, insert, index, head, rows), short=short
        )

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, short: bool) -> T:
        """A write unit, retried while the database is busy: SQLite's commit either
        happens or raises, and a unit that raised was rolled back, so a retry cannot
        store anything twice."""

        async def once() -> T:
            self._check_open()
            try:
                return await self._write_unit(fn, short=short)
            except Exception as exc:
                raise translate(exc, self._path) from exc

        return await retrying(once)

    def _append_statements(self, head: Mapping[str, Any]) -> tuple[Compiled, Compiled, str]:
        key = (head.get("expected") is not None, _lean(head))
        found = self._append_sql.get(key)
        if found is None:
            found = self._append_sql[key] = (
                self._compile(q.bump_head(*key)),
                self._compile(q.insert_rows(tables.RECORDS)),
                self._compile(q.INDEX_RECORD_SQLITE).sql,
            )
        return found

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Transaction]:
        # A cancel anywhere in here waits for the writer's statement of the moment (see
        # _on_writer); before COMMIT it rolls back, and a COMMIT that happened wins.
        self._check_open()
        try:
            async with self._turn:
                self._check_open()
                try:
                    await self._on_writer(_begin)
                    yield _Transaction(self)
                except BaseException:
                    await self._on_writer(_rollback)
                    raise
                await self._on_writer(_commit, final=True)
        except Exception as exc:
            raise translate(exc, self._path) from exc

    async def run_sync(self, fn: Callable[[Connection], T], *, exclusive: bool = False) -> T:
        # Every unit here begins with BEGIN IMMEDIATE, which takes the database's one
        # write lock: exclusive across processes already.
        from sqlalchemy import create_engine
        from sqlalchemy.pool import StaticPool

        def unit(conn: sqlite3.Connection) -> T:
            # An engine over our own connection, never disposed (that would close it).
            engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
            with engine.connect() as sa_conn, sa_conn.begin():
                sa_conn.exec_driver_sql("BEGIN IMMEDIATE")
                return fn(sa_conn)

        self._check_open()
        try:
            async with self._turn:
                return await self._on_writer(unit)
        except Exception as exc:
            cause = getattr(exc, "orig", None) or exc
            translated = translate(cause, self._path)
            if isinstance(translated, IntegrityViolation) or (
                translated is cause and cause is not exc
            ):
                translated = DatabaseError(f"{type(exc).__name__}: {exc}")
            raise translated from exc

    async def data_version(self) -> int | None:
        """``PRAGMA data_version`` on a connection kept for it (the value changes when
        another connection commits); None for ``:memory:``, which has one connection."""
        self._check_open()
        if self._memory:
            return None
        if self._version_conn is None:
            self._version_conn = connect(self._path)
        try:
            row = self._version_conn.execute("PRAGMA data_version").fetchone()
        except Exception as exc:
            raise translate(exc, self._path) from exc
        return int(row[0])

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        version, self._version_conn = self._version_conn, None
        if version is not None:
            _close(version, errors)
        async with self._turn:
            inline, self._inline = self._inline, None
            if inline is not None:
                _close(inline, errors)
            if self._thread is not None:
                thread = self._thread
                await asyncio.get_running_loop().run_in_executor(
                    thread, lambda: self._close_writer(errors)
                )
                await asyncio.to_thread(thread.shutdown, True)
            else:
                self._close_writer(errors)
        inline_reader, self._inline_reader = self._inline_reader, None
        if inline_reader is not None:
            _close(inline_reader, errors)
        if self._readers is not None:
            await asyncio.to_thread(self._readers.shutdown, True)
            for conn in self._reader_conns:
                _close(conn, errors)
            self._reader_conns.clear()
        if errors:
            raise translate(errors[0], self._path)

    def _close_writer(self, errors: list[BaseException]) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            _close(conn, errors)


class _Transaction:
    def __init__(self, backend: SQLiteBackend) -> None:
        self._backend = backend

    async def fetch(self, bound: q.Bound) -> list[Row]:
        stmt, params = bound
        raw = self._backend._compile(stmt)
        args = _bind_all(raw.args(params))
        return await self._backend._on_writer(lambda conn: conn.execute(raw.sql, args).fetchall())

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        bump, insert, index = self._backend._append_statements(head)
        return await self._backend._on_writer(
            lambda conn: _append(conn, bump, insert, index, head, rows)
        )

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        raw = self._backend._compile(q.insert_rows(table.name))
        is_records = table.name == tables.RECORDS
        times = [i for i, c in enumerate(table.c) if isinstance(rows[0][i], datetime)]
        # A record row's last value is what the search index takes of it, not a column.
        params = _bound_rows(rows, times, -1 if is_records else None)
        if not is_records:
            await self._backend._on_writer(lambda conn: _insert_many(conn, raw.sql, params))
            return
        index = self._backend._compile(q.INDEX_RECORD_SQLITE).sql
        await self._backend._on_writer(
            lambda conn: _insert_records(conn, raw.sql, params, index, [r[-1] for r in rows])
        )


def _bound_rows(
    rows: Sequence[tuple[Any, ...]], times: list[int], end: int | None
) -> Iterator[tuple[Any, ...]]:
    """Each row's values as bound (its times formatted, ``end`` the end of its columns),
    made as the writer takes them: a list of them, alive until the insert ended, kept
    the garbage collector busier (an import of 20k records: 99 young collections
    against 75)."""
    if len(times) == 1:
        # The records' one time column. Consecutive rows often share a time (the very
        # object: a line without a time of its own takes the one before, an import of
        # sessions one time for all): formatted once for the run. A dict of formatted
        # times cost more than it saved: an aware datetime's hash is slow, and in a file
        # most times differ.
        (i,) = times
        last: Any = None
        text: Any = None
        for r in rows:
            value = r[i]
            if value is not last:
                last = value
                text = timestamp(value) if isinstance(value, datetime) else value
            yield (*r[:i], text, *r[i + 1 : end])
    elif times:
        for r in rows:
            yield tuple(_bind(v) for v in r[:end])
    else:
        for r in rows:
            yield r[:end]


def _append(
    conn: sqlite3.Connection,
    bump: Compiled,
    insert: Compiled,
    index: str,
    head: Mapping[str, Any],
    rows: Sequence[tuple[Any, ...]],
) -> int | None:
    """Bump the head and insert the rows, and index them for search (each row's last
    value: its text and thinking, or None), inside the caller's transaction."""
    at = _bind(head["at"])  # formatted once, for the head and the rows
    found = conn.execute(bump.sql, bump.args({**head, "at": at})).fetchone()
    if found is None:
        return None
    first = int(found[0]) - len(rows) + 1
    sid = head["sid"]
    if len(rows) == 1:  # execute costs ~1 µs less than executemany of one row
        r = rows[0]
        rowid = conn.execute(insert.sql, (sid, first, r[0], r[1], at, *r[2:-1])).lastrowid
        if r[-1] is not None:
            conn.execute(index, (rowid, *r[-1]))
        return first
    _insert_records(
        conn,
        insert.sql,
        [(sid, first + i, r[0], r[1], at, *r[2:-1]) for i, r in enumerate(rows)],
        index,
        [r[-1] for r in rows],
    )
    return first


def _lean(head: Mapping[str, Any]) -> bool:
    """Whether an append moves only the seq, the message count and the activity time
    (:func:`statements.bump_head`'s ``lean``)."""
    return (
        head["name"] is None
        and not head["d_cost"]
        and not (head["d_input"] or head["d_output"] or head["d_cache_read"])
        and not head["d_cache_write"]
    )


class _Abandoned(Exception):
    """The caller was cancelled before the unit committed: it rolled back instead."""


# Every function run on the writer thread returns values, never a cursor: a cursor freed
# on another thread resets its statement there, and Python 3.11's sqlite3 can then skip
# the reset of the statement cache's copy that the writer is running at that moment (its
# next bind fails with "bad parameter or other API misuse"). Which thread drops the last
# reference to a result is not fixed: with `insert` handing back executemany's cursor, a
# 2,000,002-record streamed import failed so in 3 runs of 6 on a loaded machine.


def _begin(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE").close()


def _insert_many(conn: sqlite3.Connection, sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
    conn.executemany(sql, rows).close()


def _insert_records(
    conn: sqlite3.Connection,
    sql: str,
    rows: Iterable[tuple[Any, ...]],
    index: str,
    sources: Sequence[tuple[str, str | None] | None],
) -> None:
    """Insert record rows, and index each row whose source (its search text and
    thinking) is not None, under the rowid its insert gave."""
    if all(source is None for source in sources):
        conn.executemany(sql, rows).close()
        return
    # One execute per row, for its lastrowid: as fast as executemany here (20k records
    # with their index rows: 323 ms against 325 ms), and no guess at the rowids. Each
    # index row written at once, not gathered for an executemany: 20k tuples kept alive
    # cost 30 more collections on this thread.
    execute = conn.execute
    for row, source in zip(rows, sources, strict=True):
        rowid = execute(sql, row).lastrowid
        if source is not None:
            execute(index, (rowid, *source))


def _transaction(
    conn: sqlite3.Connection,
    fn: Callable[[sqlite3.Connection], T],
    abandon: threading.Event | None = None,
) -> T:
    _begin(conn)
    return _run_open(conn, fn, abandon)


def _run_open(
    conn: sqlite3.Connection,
    fn: Callable[[sqlite3.Connection], T],
    abandon: threading.Event | None = None,
) -> T:
    """Run ``fn`` in the transaction just begun; commit, or roll back on any error (or
    when ``abandon`` was set meanwhile)."""
    try:
        result = fn(conn)
        if abandon is not None and abandon.is_set():
            raise _Abandoned()
        conn.execute("COMMIT")  # a COMMIT that fails (busy) leaves the transaction open
    except BaseException:
        _rollback(conn)
        raise
    return result


def _commit(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)  # a COMMIT that failed leaves the transaction open
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _close(conn: sqlite3.Connection, errors: list[BaseException]) -> None:
    try:
        conn.close()
    except sqlite3.Error as exc:
        errors.append(exc)
