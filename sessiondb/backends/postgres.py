"""Postgres on an asyncpg pool: the only pool at run time.

Checking a connection out of SQLAlchemy's pool and back cost ~200 µs of Python, as much
as an append's round trip to the server, and its result processing doubled the cost of
reading a context; asyncpg's own pool and records cost a fraction. Even that fraction
(~40-60 µs a statement) is skipped by a store that runs one statement after another: it
keeps the connection its last statement ran on, checked out of the pool, for the next
(:meth:`PostgresBackend._take`). Every connection, pooled or opened for a migration, is
built from the same :func:`connect_kwargs`.

Behind PgBouncer in transaction mode, ``?prepared_statement_cache_size=0`` (SQLAlchemy's
spelling for asyncpg) turns off named prepared statements, and every statement then runs
inside a transaction of its own, so that its parse and its execution reach the same
server connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import Table
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import URL, Connection

from .. import statements as q
from ..config import Settings
from ..errors import (
    BusyError,
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailableError,
    InvalidInputError,
    MissingDependencyError,
    SessionDBError,
    StoreClosedError,
)
from ..shapes import statement_of
from ..tables import RECORDS
from .base import Compiler, IntegrityViolation, Row, retrying
from .pg_options import Connector, check_connect_args, connect_kwargs, servers_of
from .replicas import Mark, lsn_value

T = TypeVar("T")

# A pooled connection idle longer than this is pinged before a write is sent on it: a
# round trip once per idle spell, against a write whose outcome would be unknown.
IDLE_PING_SECONDS = 10.0
# The connection kept between statements (PostgresBackend._take) goes back to the pool
# once it has lain idle this long, so that the pool's own idle rules apply to it again.
SPARE_IDLE_SECONDS = 10.0


def _import_asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError as exc:
        raise MissingDependencyError("asyncpg", "postgres") from exc
    return asyncpg


# SQLSTATE classes and codes: https://www.postgresql.org/docs/current/errcodes-appendix.html
_UNAVAILABLE_CODES = {"57P01", "57P02", "57P03", "53300", "53400"}
_BUSY_CODES = {"40001", "40P01", "55P03"}
# read_only_sql_transaction: a write reached a standby, or a primary fenced read-only
# while failing over. The server refused it, so nothing was written: another host may
# take it once the pool reconnects (sessiondb.hosts).
READ_ONLY_CODE = "25006"


def translate(exc: BaseException, where: str, timeout: float | None = None) -> BaseException:
    """The sessiondb error for an exception from asyncpg or the network, by SQLSTATE;
    anything else passes through unchanged. ``timeout``: the connect timeout, named when
    a connection timed out."""
    if isinstance(exc, SessionDBError | IntegrityViolation | asyncio.CancelledError):
        return exc
    sqlstate = getattr(exc, "sqlstate", None)
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError) and not str(exc):
        limit = f" (connect_timeout {timeout:g} s)" if timeout is not None else ""
        text = f"TimeoutError: the server did not answer in time{limit}"
    if isinstance(sqlstate, str):
        if sqlstate in ("23505", "23503"):
            return IntegrityViolation(getattr(exc, "constraint_name", None), text)
        if sqlstate == "42P01":
            return ConfigurationError(
                "the database has no sessiondb schema (or an old one); run `sessiondb migrate` "
                f"or `await store.migrate()` ({text})"
            )
        if sqlstate in _BUSY_CODES:
            return BusyError(f"the database is busy; try again ({text})")
        if sqlstate == READ_ONLY_CODE:
            return DatabaseUnavailableError(
                f"a server of {where} is read-only (a standby, or a primary failing over); "
                f"nothing was written, and the write may be tried again ({text})"
            )
        if sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_CODES:
            return DatabaseUnavailableError(f"lost the database at {where}: {text}")
        if sqlstate.startswith("22"):
            return InvalidInputError(f"the database refused a value: {text}")
        return DatabaseError(text)
    if isinstance(exc, OSError | TimeoutError):
        return DatabaseUnavailableError(f"cannot reach the database at {where}: {text}")
    module = type(exc).__module__
    if type(exc).__name__ == "TargetServerAttributeNotMatched":
        return DatabaseUnavailableError(
            f"no server of {where} has the role target_session_attrs asks for (during a "
            f"failover: until a standby is promoted): {text}"
        )
    if module.startswith("asyncpg"):
        # InterfaceError and its kind: the connection was closed or broke underneath.
        return DatabaseUnavailableError(f"lost the database at {where}: {text}")
    if isinstance(exc, OverflowError):
        return InvalidInputError(f"a number does not fit a 64-bit column: {exc}")
    return exc


def _from_server(exc: BaseException | None) -> bool:
    """Whether ``exc`` is an ErrorResponse the server sent (asyncpg fills in its
    severity), not an error asyncpg made up on the client."""
    return getattr(exc, "severity", None) is not None


def _not_run(exc: BaseException, asyncpg: Any) -> bool:
    """Whether a write that failed certainly did not commit.

    - The server answered it with an error: an ErrorResponse ends the statement's
      transaction without a commit (PostgreSQL sends none after a commit: a backend
      terminated then closes the connection without a word).
    - The server sent an error and closed the connection before answering: asyncpg
      keeps that error as the cause. A pooled connection whose backend was terminated
      while idle (``57P01``) fails so on its next statement.
    - asyncpg refused to start the statement (``InternalClientError``: its state checks
      run before anything is sent), for instance on a connection where the server's
      error arrived while it was idle.
    """
    return (
        _from_server(exc)
        or _from_server(exc.__cause__)
        or isinstance(exc, asyncpg.InternalClientError)
    )


async def _no_reset(_connection: Any) -> None:
    """Nothing to reset: transactions end before a connection goes back to the pool."""


class PostgresBackend:
    """The store's Postgres: one asyncpg pool, opened on first use."""

    flavour = q.POSTGRES

    def __init__(self, settings: Settings) -> None:
        self._asyncpg = _import_asyncpg()
        self._settings = settings
        self._kwargs = connect_kwargs(settings)
        self._connect = Connector(self._asyncpg, settings)
        check_connect_args(self._asyncpg, settings.connect.connect_args)
        self._where = servers_of(self._kwargs)
        self._timeout: float | None = self._kwargs.get("timeout")
        # Without named prepared statements (PgBouncer), a lone statement runs in a
        # transaction of its own so that its parse and execution share a server connection.
        self._wrap = self._kwargs.get("statement_cache_size") == 0
        self._compile = Compiler(asyncpg_dialect())  # type: ignore[no-untyped-call]
        self._pool: Any = None
        # One connection kept checked out between statements (see _take), the number
        # this backend has checked out of the pool, the spare's last use, its retirement.
        self._spare: Any = None
        self._held = 0
        self._spare_used = 0.0
        self._expiries = 0  # pool.expire_connections() calls: a connection from before
        self._retiring: asyncio.TimerHandle | None = None
        self._returns: set[asyncio.Task[None]] = set()
        self._last_used: dict[Any, float] = {}  # server pid -> when a statement last ran
        self._lock = asyncio.Lock()
        self._closed = False
        # With read replicas, every write also returns its mark (transaction id and WAL
        # position): see sessiondb.backends.replicas.
        self._track = bool(settings.replica_urls)

    async def _get_pool(self) -> Any:
        if self._closed:
            raise StoreClosedError()
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    opts = self._settings.connect
                    try:
                        self._pool = await self._asyncpg.create_pool(
                            min_size=opts.pool_min_size,
                            max_size=opts.pool_max_size,
                            reset=_no_reset,
                            connect=self._connect,
                            **self._kwargs,
                        )
                    except BaseException as exc:
                        raise translate(exc, self._where, self._timeout) from exc
        return self._pool

    async def fetch(self, bound: q.Bound, *, plain: bool = False) -> list[Row]:
        stmt, params = bound
        raw = self._compile(stmt)
        args = raw.args(params)  # asyncpg's records read by position as cheaply

        async def run(conn: Any) -> list[Row]:
            return list(await conn.fetch(raw.sql, *args))

        return await retrying(lambda: self._once(run, write=False))

    async def execute(self, bound: q.Bound) -> list[Row]:
        stmt, params = bound
        raw = self._compile(stmt)
        args = raw.args(params)

        async def run(conn: Any) -> list[Row]:
            return list(await conn.fetch(raw.sql, *args))

        # One statement in autocommit is a transaction of its own.
        return await retrying(lambda: self._once(run, write=True))

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        return (await self.append_marked(head, rows))[0]

    async def append_marked(
        self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]
    ) -> tuple[int | None, Mark | None]:
        """:meth:`append`, and the write's mark when the store tracks them (replicas)."""
        compile = self._compile
        track = self._track
        cfg = self._settings.search_config
        return await retrying(
            lambda: self._once(
                lambda conn: _append(conn, compile, head, rows, track, cfg), write=True
            )
        )

    async def execute_marked(self, bound: q.Bound) -> tuple[list[Row], Mark | None]:
        """:meth:`execute`, and the write's mark (its transaction id and WAL position)
        read inside its transaction: two more round trips, for stores with replicas."""
        stmt, params = bound
        raw = self._compile(stmt)
        args = raw.args(params)

        async def run(conn: Any) -> tuple[list[Row], Mark | None]:
            async with conn.transaction():
                rows = list(await conn.fetch(raw.sql, *args))
                return rows, await _mark(conn)

        return await retrying(lambda: self._once(run, write=True))

    async def fetch_replica(self, bound: q.Bound, marks: Sequence[Mark] | None) -> list[Row] | None:
        """One attempt at a read on this server (a replica), no retry: the caller reads
        from the primary instead. With ``marks``, the read returns rows only if its own
        snapshot sees every one of those writes (and the server has replayed their WAL);
        ``None`` when it returned none (not seen, or nothing matched: the caller cannot
        tell, and reads the primary)."""
        stmt, params = bound
        raw = self._compile(stmt)
        args = raw.args(params)
        sql = raw.sql
        if marks:
            n = len(args)
            # A one-time filter: evaluated once, in the snapshot the subquery reads. The
            # write must be below the snapshot's xmin, not merely "visible in" it: a
            # standby's snapshot keeps its running xids out of xip (in subxip, which
            # pg_current_snapshot() leaves out), so pg_visible_in_snapshot() said yes to a
            # write still running there whenever a later one had completed (8 tasks of one
            # store: a read missed its own write in 4 runs of 4; 0 of 8 with xmin).
            if len(marks) == 1:  # the common case: one write to look for
                seen = f"${n + 2}::text::xid8 < pg_snapshot_xmin(pg_current_snapshot())"
                xids: Any = marks[0][0]
            else:
                seen = (
                    "(SELECT bool_and(x::xid8 < pg_snapshot_xmin(pg_current_snapshot())) "
                    f"FROM unnest(${n + 2}::text[]) AS x)"
                )
                xids = [m[0] for m in marks]
            sql = (
                f"SELECT * FROM ({sql}) AS sessiondb_read WHERE "
                f"pg_last_wal_replay_lsn() >= ${n + 1}::text::pg_lsn AND {seen}"
            )
            args = [*args, max((m[1] for m in marks), key=lsn_value), xids]

        async def run(conn: Any) -> list[Row]:
            return list(await conn.fetch(sql, *args))

        rows = await self._once(run, write=False)
        return None if marks and not rows else rows

    async def probe(self) -> tuple[bool, str | None, float]:
        """Whether the server is a standby in recovery, its replay position, and its
        replay lag in seconds (0 when it has replayed all it received while streaming)."""

        async def run(conn: Any) -> tuple[bool, str | None, float]:
            row = await conn.fetchrow(_PROBE_SQL, timeout=self._timeout)
            return bool(row[0]), row[1], float(row[2] or 0.0)

        return await self._once(run, write=False)

    async def _once(self, run: Callable[[Any], Awaitable[T]], *, write: bool) -> T:
        """One attempt of one statement on a pooled connection.

        A write whose connection broke after it was sent may have committed: its error is
        not retryable (``outcome_unknown``). Before that (the pool could not connect), or
        when the server answered with an error (it rolled the statement back), nothing
        was written.
        """
        pool = await self._get_pool()
        sent = False
        try:
            conn = await self._take(pool)
            expiries = self._expiries
            done = False
            try:
                if conn.is_closed():  # a pooled connection the server closed meanwhile
                    raise self._asyncpg.ConnectionDoesNotExistError("stale pooled connection")
                if self._idle_too_long(conn) and write:
                    await self._ping(conn)
                sent = True
                try:
                    if self._wrap:
                        async with conn.transaction():
                            result = await run(conn)
                    else:
                        result = await run(conn)
                    done = True
                    return result
                except Exception as exc:
                    if not _from_server(exc):
                        # Broken: the pool opens a new one in its place (asyncpg refuses
                        # once it has noticed the loss itself).
                        with contextlib.suppress(Exception):
                            conn.terminate()
                    await self._drop_pool_if_lost(pool, exc)
                    raise
            finally:
                # Not kept if the pool expired its connections meanwhile (another
                # statement lost its server): the pool closes it as it comes back.
                await self._put(pool, conn, keep=done and self._expiries == expiries)
        except Exception as exc:
            unknown = write and sent and not _not_run(exc, self._asyncpg)
            raise self._translate(exc, unknown=unknown) from exc

    # -- the connection kept between statements --------------------------------------
    #
    # asyncpg's pool costs ~40-60 µs a statement on these machines: its release is
    # shielded (a task, its callback and the waiter's wake-up: three turns of the event
    # loop) and its acquire builds a proxy and a future. A store that runs one statement
    # after another (one task, the common case) takes the connection its last statement
    # ran on instead, without asking the pool (a 12-hit search 418 -> 359 µs). Only one
    # is kept, and only while the pool could still serve another caller at once, so no
    # caller ever waits for a connection that lies idle here.

    async def _take(self, pool: Any) -> Any:
        """A connection for one statement or transaction: the kept one if there is one."""
        conn, self._spare = self._spare, None
        if conn is not None:
            if not conn.is_closed():
                return conn
            await self._release(pool, conn)  # the server closed it: the pool replaces it
        conn = await pool.acquire()
        self._held += 1
        return conn

    async def _put(self, pool: Any, conn: Any, *, keep: bool) -> None:
        """After a statement on ``conn``: keep it for the next one when it ended well, none
        is kept yet, the backend is open on this pool, and fewer than the pool's size are
        checked out (else a caller may be waiting for one); otherwise release it."""
        if (
            keep
            and self._spare is None
            and self._pool is pool
            and not self._closed
            and self._held < pool.get_max_size()
            and not conn.is_closed()
            and not conn.is_in_transaction()
        ):
            self._spare = conn
            self._spare_used = time.monotonic()
            if self._retiring is None:
                self._retiring = asyncio.get_running_loop().call_later(
                    SPARE_IDLE_SECONDS, self._retire
                )
            return
        await self._release(pool, conn)

    async def _release(self, pool: Any, conn: Any) -> None:
        self._held -= 1
        await pool.release(conn)

    def _retire(self) -> None:
        """The timer's check: the kept connection goes back to the pool once idle for
        ``SPARE_IDLE_SECONDS``."""
        self._retiring = None
        conn = self._spare
        if conn is None:
            return
        idle = time.monotonic() - self._spare_used
        loop = asyncio.get_running_loop()
        if idle < SPARE_IDLE_SECONDS:
            self._retiring = loop.call_later(SPARE_IDLE_SECONDS - idle, self._retire)
            return
        self._spare = None
        self._returned(loop.create_task(self._release(self._pool, conn)))

    def _returned(self, task: asyncio.Task[None]) -> None:
        self._returns.add(task)
        task.add_done_callback(self._returns.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _give_up_spare(self, pool: Any) -> None:
        """Release the kept connection now (the pool expires or closes)."""
        if self._retiring is not None:
            self._retiring.cancel()
            self._retiring = None
        conn, self._spare = self._spare, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await self._release(pool, conn)

    async def _drop_pool_if_lost(self, pool: Any, exc: BaseException) -> None:
        """After a lost connection or a read-only answer, every pooled connection is
        replaced when next acquired (or closed when released): the server they lead to
        went away or stopped taking writes, and new connections try the URL's hosts
        again, finding the new primary after a failover."""
        if isinstance(translate(exc, self._where), DatabaseUnavailableError):
            self._expiries += 1
            with contextlib.suppress(Exception):
                await pool.expire_connections()
            await self._give_up_spare(pool)  # released after the expiry: closed

    def _idle_too_long(self, conn: Any) -> bool:
        """Note that ``conn`` is used now; whether it lay idle past ``IDLE_PING_SECONDS``."""
        key = conn.get_server_pid()
        now = time.monotonic()
        last = self._last_used.get(key)
        if len(self._last_used) >= 4 * self._settings.connect.pool_max_size + 64:
            self._last_used.clear()  # forget connections long gone
        self._last_used[key] = now
        return last is not None and now - last > IDLE_PING_SECONDS

    async def _ping(self, conn: Any) -> None:
        """A round trip on a connection that lay idle before a write is sent on it: a
        connection that silently died meanwhile (a NAT or firewall dropped it, and no
        reset came) fails here, where nothing has been sent, instead of leaving the
        write's outcome unknown."""
        try:
            await conn.fetchval("SELECT 1", timeout=self._timeout)
        except Exception as exc:
            with contextlib.suppress(Exception):
                conn.terminate()
            raise DatabaseUnavailableError(
                f"a pooled connection to {self._where} lay idle and no longer answers "
                f"({type(exc).__name__}: {exc}); nothing was sent"
            ) from exc

    def _translate(self, exc: BaseException, *, unknown: bool) -> BaseException:
        translated = translate(exc, self._where, self._timeout)
        if unknown and isinstance(translated, DatabaseUnavailableError):
            return DatabaseUnavailableError(
                f"{translated}; the write was sent, so whether it was stored is unknown "
                "(read the session before writing it again, or give messages a uuid: "
                "then the retry returns the stored record)",
                outcome_unknown=True,
            )
        return translated

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Transaction]:
        pool = await self._get_pool()
        committing = False
        try:
            # The kept connection first: with it checked out, the pool may have no other.
            conn = await self._take(pool)
            try:
                async with conn.transaction():
                    tx = _Transaction(conn, self._compile, self._settings.search_config)
                    yield tx
                    if self._track:
                        tx.mark = await _mark(conn)
                    committing = True
            except Exception as exc:
                await self._drop_pool_if_lost(pool, exc)
                raise
            finally:
                await self._release(pool, conn)
        except Exception as exc:
            # Before COMMIT nothing is stored, and the store re-runs the block on a
            # retryable error; a connection lost during COMMIT leaves the outcome unknown.
            raise self._translate(exc, unknown=committing) from exc

    async def run_sync(self, fn: Callable[[Connection], T], *, exclusive: bool = False) -> T:
        if self._closed:
            raise StoreClosedError()
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import NullPool

        connector = self._connect
        kwargs = self._kwargs

        async def connect() -> Any:
            return await connector(**kwargs)

        url = URL.create("postgresql+asyncpg")
        if self._wrap:
            url = url.set(query={"prepared_statement_cache_size": "0"})
        engine = create_async_engine(url, async_creator=connect, poolclass=NullPool)
        try:
            async with engine.begin() as conn:
                if exclusive:
                    # A transaction-scoped advisory lock: released by the commit.
                    stmt, params = q.exclusive_lock()
                    await conn.execute(statement_of(stmt), params)
                return await conn.run_sync(fn)
        except Exception as exc:
            orig = getattr(exc, "orig", None)
            cause = getattr(orig, "__cause__", None) or orig or exc
            translated = translate(cause, self._where, self._timeout)
            if isinstance(translated, IntegrityViolation) or (
                translated is cause and cause is not exc
            ):
                translated = DatabaseError(f"{type(exc).__name__}: {exc}")
            raise translated from exc
        finally:
            await engine.dispose()

    async def listen(self, channel: str, on_payload: Callable[[str], None]) -> _Listening:
        """A connection outside the pool, LISTENing on ``channel`` (the change feed)."""
        if self._closed:
            raise StoreClosedError()
        kwargs = dict(self._kwargs)
        server_settings = dict(kwargs.get("server_settings") or {})
        # Told apart in pg_stat_activity: ``<application_name>-feed``.
        name = server_settings.get("application_name", "sessiondb")
        server_settings["application_name"] = f"{name}-feed"[:63]
        kwargs["server_settings"] = server_settings
        try:
            conn = await self._connect(**kwargs)
        except BaseException as exc:
            raise translate(exc, self._where, self._timeout) from exc
        listening = _Listening(conn, self._where)
        conn.add_termination_listener(lambda _conn: listening.lost.set())
        try:
            await conn.add_listener(channel, lambda _c, _pid, _ch, payload: on_payload(payload))
        except BaseException as exc:
            conn.terminate()
            raise translate(exc, self._where, self._timeout) from exc
        return listening

    def connection_counts(self) -> list[tuple[str, int, int]]:
        """The pool's connections in use and idle (none before the first use)."""
        pool = self._pool
        if pool is None:
            return []
        idle = pool.get_idle_size() + (self._spare is not None)  # kept, but idle
        return [(self._where, pool.get_size() - idle, idle)]

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await self._give_up_spare(pool)
            if self._returns:
                await asyncio.gather(*self._returns, return_exceptions=True)
            try:
                await asyncio.wait_for(pool.close(), timeout=10)
            except (TimeoutError, OSError, self._asyncpg.PostgresError):
                pool.terminate()


_PROBE_SQL = (
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, "
    "CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() "
    "AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming') THEN 0 "
    "ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END"
)


async def _mark(conn: Any) -> Mark | None:
    """The open transaction's mark; ``None`` when it wrote nothing (no transaction id)."""
    row = await conn.fetchrow(
        "SELECT pg_current_xact_id_if_assigned()::text, pg_current_wal_insert_lsn()::text"
    )
    return None if row[0] is None else (row[0], row[1])


class _Listening:
    """One LISTENing connection (:meth:`PostgresBackend.listen`)."""

    def __init__(self, conn: Any, where: str) -> None:
        self._conn = conn
        self._where = where
        self.lost = asyncio.Event()

    async def ping(self) -> None:
        await self._call(self._conn.fetchval("SELECT 1"))

    async def _call(self, work: Awaitable[Any]) -> None:
        try:
            await asyncio.wait_for(work, timeout=10)
        except BaseException as exc:
            self.lost.set()
            self._conn.terminate()
            raise translate(exc, self._where) from exc

    async def close(self) -> None:
        self.lost.set()
        if not self._conn.is_closed():
            try:
                await asyncio.wait_for(self._conn.close(), timeout=5)
            except BaseException:
                self._conn.terminate()
                raise


class _Transaction:
    def __init__(self, conn: Any, compile: Compiler, search_config: str) -> None:
        self._conn = conn
        self._compile = compile
        self._search_config = search_config
        self.mark: Mark | None = None

    async def fetch(self, bound: q.Bound) -> list[Row]:
        stmt, params = bound
        raw = self._compile(stmt)
        return list(await self._conn.fetch(raw.sql, *raw.args(params)))

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        return (await _append(self._conn, self._compile, head, rows, False, self._search_config))[0]

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        if table.name != RECORDS:
            await self._conn.copy_records_to_table(
                table.name, records=rows, columns=[c.name for c in table.c]
            )
            return
        if all(r[-1] is None for r in rows):  # nothing to index: COPY, the fastest path
            await self._conn.copy_records_to_table(
                table.name, records=[r[:-1] for r in rows], columns=q.RECORD_DATA_COLUMNS
            )
            return
        # The index's tsvector is made by the server (to_tsvector), which COPY cannot
        # call: one INSERT … SELECT FROM unnest of one array per column. That costs what
        # COPY does (20k bench records without their text: 0.28 s, COPY 0.29 s), and
        # COPY to a temporary table then INSERT … SELECT no less (1.38 s against 1.41 s
        # with the text); the rest is the index's own work on the server: to_tsvector
        # ~0.5 s, the GIN index ~0.45 s (a larger gin_pending_list_limit only leaves the
        # merge to a later write).
        raw = self._compile(q.insert_records_indexed())
        params: dict[str, Any] = {"search_config": self._search_config}
        for i, name in enumerate(q.RECORD_DATA_COLUMNS):
            params[name] = [r[i] for r in rows]
        params["search_body"] = [None if r[-1] is None else r[-1][0] for r in rows]
        params["search_thinking"] = [None if r[-1] is None else r[-1][1] for r in rows]
        await self._conn.execute(raw.sql, *raw.args(params))


async def _append(
    conn: Any,
    compile: Compiler,
    head: Mapping[str, Any],
    rows: Sequence[tuple[Any, ...]],
    tracked: bool,
    search_config: str,
) -> tuple[int | None, Mark | None]:
    """The append as one statement (:func:`statements.append_one` / ``append_many``);
    ``tracked``: the statement also returns the write's mark. Each row's last value is
    what the search index takes of it (text, thinking), or None."""
    expected = head.get("expected") is not None
    params = dict(head)
    params["search_config"] = search_config
    indexed = any(r[-1] is not None for r in rows)
    if len(rows) == 1:
        raw = compile(q.append_one(expected, tracked, indexed))
        *values, source = rows[0]
        params.update(zip(q.APPEND_COLUMN_NAMES[:-1], values, strict=True))
        params["search_body"], params["search_thinking"] = source or (None, None)
        if not tracked:
            seq = await conn.fetchval(raw.sql, *raw.args(params))
            return (None if seq is None else int(seq)), None
        row = await conn.fetchrow(raw.sql, *raw.args(params))
        return (None, None) if row is None else (int(row[0]), (row[1], row[2]))
    raw = compile(q.append_many(expected, tracked, indexed))
    for i, name in enumerate(q.APPEND_COLUMN_NAMES[:-1]):
        params[name] = [r[i] for r in rows]
    params["search_body"] = [None if r[-1] is None else r[-1][0] for r in rows]
    params["search_thinking"] = [None if r[-1] is None else r[-1][1] for r in rows]
    inserted = await conn.fetch(raw.sql, *raw.args(params))
    if not inserted:
        return None, None
    return min(r[0] for r in inserted), ((inserted[0][1], inserted[0][2]) if tracked else None)
