"""The seam between the store and a database: what the store needs, and nothing more.

A backend runs statements built by :mod:`sessiondb.statements` on its own driver
(asyncpg, sqlite3), compiled once per statement to the driver's SQL. It knows its
driver, the schema and the statements; it knows nothing of sessions, context or files.
Driver errors are classified here, at the boundary, into sessiondb's errors.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..errors import SessionDBError
from ..shapes import Bound, Shape, name_of, statement_of

if TYPE_CHECKING:  # SQLAlchemy is imported where a statement is built (sessiondb.shapes)
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Dialect
    from sqlalchemy.sql.base import Executable

T = TypeVar("T")

# A row of a result: columns by name (``row["seq"]``) and by position.
Row = Any


class Transaction(Protocol):
    """One open transaction: every call runs inside it, in order."""

    async def fetch(self, bound: Bound) -> list[Row]:
        """All rows of one statement (none for a statement without RETURNING)."""

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        """Bump the session's head and insert ``rows`` after it; the first new seq.

        ``head`` holds the parameters of :func:`statements.bump_head`; each row holds the
        values of :data:`statements.APPEND_COLUMN_NAMES`. ``None`` when no head matched
        (the session is missing, or its head is not ``head["expected"]``); then nothing
        was written.
        """

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert many rows (every column, in table order) by the fastest path there is."""


class Backend(Protocol):
    """A database, as the store uses it.

    ``fetch`` retries transient failures itself; ``execute`` and ``append`` retry them
    when nothing can have been written (the failure came before the commit, or the
    database reported it rolled back), and otherwise raise a
    :class:`~sessiondb.errors.DatabaseUnavailableError` with ``outcome_unknown``. A
    ``transaction`` block cannot be re-run by the backend: its failures before COMMIT
    are ``retryable`` and the store re-runs the block (:func:`retrying`).
    """

    flavour: str  # "postgresql" or "sqlite": which shape of a few statements to build

    async def fetch(self, bound: Bound, *, plain: bool = False) -> list[Row]:
        """All rows of one read statement, in one snapshot. ``plain``: the caller reads
        columns by position only (on SQLite, plain tuples: a big read's rows cost a
        third less to build)."""

    async def execute(self, bound: Bound) -> list[Row]:
        """One write statement as a transaction of its own; its rows (RETURNING)."""

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        """:meth:`Transaction.append` as a transaction of its own: the hot path."""

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """A write transaction: committed when the block ends, rolled back on an error."""

    async def run_sync(self, fn: Callable[[Connection], T], *, exclusive: bool = False) -> T:
        """Run ``fn`` on a SQLAlchemy connection to the same database, in a transaction
        that commits when ``fn`` returns (Alembic, and tests that inspect the tables).

        ``exclusive``: no other exclusive unit runs on the database at the same time, in
        any process (migrations started by several replicas at once).
        """

    async def close(self) -> None:
        """Release every connection and thread; idempotent."""


class Listening(Protocol):
    """A connection of its own that LISTENs on a channel (:meth:`Listens.listen`)."""

    #: Set once the connection is lost (the server closed it, the network broke).
    lost: asyncio.Event

    async def ping(self) -> None:
        """A round trip; raises a SessionDBError when the connection no longer answers."""

    async def close(self) -> None:
        """Close the connection; idempotent."""


@runtime_checkable
class Listens(Protocol):
    """A backend whose database pushes notifications (Postgres LISTEN/NOTIFY)."""

    async def listen(self, channel: str, on_payload: Callable[[str], None]) -> Listening:
        """Open a connection outside the pool that calls ``on_payload`` with each
        notification's payload on ``channel``."""


@runtime_checkable
class CountsConnections(Protocol):
    """A backend with a connection pool whose state it can tell (Postgres)."""

    def connection_counts(self) -> list[tuple[str, int, int]]:
        """``(pool name, connections in use, idle connections)`` of each open pool; the
        name is the server's address, without a password."""


@dataclass
class CallStats:
    """What the backend did for one public call, for its telemetry
    (:mod:`sessiondb.telemetry` sets :data:`CALL_STATS` around the call)."""

    retries: int = 0
    replica_reads: int = 0


#: The stats of the public call running in this context; ``None`` when nobody listens
#: (no telemetry configured), so that the hot path costs one lookup and no writes.
CALL_STATS: contextvars.ContextVar[CallStats | None] = contextvars.ContextVar(
    "sessiondb_call_stats", default=None
)


@runtime_checkable
class Versioned(Protocol):
    """A backend that can say cheaply whether anything was committed (SQLite's
    ``PRAGMA data_version``)."""

    async def data_version(self) -> int | None:
        """A number that changes when any connection commits; None when unknown."""


class IntegrityViolation(Exception):
    """A constraint refused a write; the store decides what it means. ``constraint`` is
    the constraint's name where the database gives one (SQLite gives columns; the
    backend maps them back to the name)."""

    def __init__(self, constraint: str | None, detail: str) -> None:
        super().__init__(detail)
        self.constraint = constraint
        self.detail = detail


# Waits between attempts of a retried unit: up to 6 attempts, 1.55 s of waiting at most
# (each wait jittered down to half, so that writers knocked over together spread out).
# A server restart takes longer: then the caller gets the DatabaseUnavailableError.
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8)
# No new attempt starts this long after the first began (a connect that hangs until its
# timeout is not tried again).
RETRY_BUDGET = 2.0


async def retrying(attempt: Callable[[], Awaitable[T]]) -> T:
    """Run ``attempt`` until it succeeds or fails with an error that is not
    ``retryable``, with exponential backoff, within :data:`RETRY_BUDGET`.

    ``attempt`` must be a whole unit that either committed or wrote nothing when it
    raises a retryable error; a unit whose commit outcome is unknown raises an error
    that is not retryable (see :class:`sessiondb.errors.DatabaseUnavailableError`).
    """
    started = time.monotonic()
    for delay in RETRY_DELAYS:
        try:
            return await attempt()
        except SessionDBError as exc:
            wait = delay * random.uniform(0.5, 1.0)
            if not exc.retryable or time.monotonic() - started + wait > RETRY_BUDGET:
                raise
        stats = CALL_STATS.get()
        if stats is not None:
            stats.retries += 1
        await asyncio.sleep(wait)
    return await attempt()


@dataclass(frozen=True)
class Compiled:
    """SQL text with positional placeholders and the parameter names in their order."""

    sql: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        """The positional arguments for ``params`` (literals of the statement included)."""
        return [params[n] if n in params else self.defaults[n] for n in self.names]


class Compiler:
    """Compiles each statement once for one dialect.

    Statements are module-level singletons or cached per shape, so the cache stays
    small; should statements built per call (a test's ``text()``) fill it, it starts
    over, and each hot statement is compiled once more.

    ``precompiled``: SQL already compiled for this dialect, by the statement's name in
    :data:`sessiondb.shapes.SHAPE_NAMES` (``(sql, parameter names, defaults)``); a
    statement found there is not compiled, and ``dialect`` (a function that makes it)
    is called only for the first statement that is not.
    """

    LIMIT = 512

    def __init__(
        self,
        dialect: Dialect | Callable[[], Dialect],
        precompiled: Mapping[str, tuple[str, tuple[str, ...], Mapping[str, Any]]] | None = None,
    ) -> None:
        # A function makes the dialect when the first statement is compiled (a dialect
        # itself is not callable).
        self._dialect: Dialect | None = None if callable(dialect) else dialect
        self._make_dialect = dialect
        self._precompiled = precompiled or {}
        self._cache: dict[int, tuple[Executable | Shape, Compiled]] = {}

    def __call__(self, stmt: Executable | Shape) -> Compiled:
        hit = self._cache.get(id(stmt))
        if hit is not None and hit[0] is stmt:
            return hit[1]
        ready = self._precompiled.get(name_of(stmt))
        if ready is not None:
            sql, names, defaults = ready
            result = Compiled(sql, names, dict(defaults))
        else:
            result = self.compile(stmt)
        if len(self._cache) >= self.LIMIT:
            self._cache.clear()
        self._cache[id(stmt)] = (stmt, result)
        return result

    def compile(self, stmt: Executable | Shape) -> Compiled:
        """``stmt`` compiled by SQLAlchemy for the dialect, never from ``precompiled``."""
        stmt = statement_of(stmt)
        if self._dialect is None:
            self._dialect = self._make_dialect()  # type: ignore[operator]
        compiled = stmt.compile(dialect=self._dialect)  # type: ignore[union-attr]
        names = tuple(compiled.positiontup or ())
        return Compiled(str(compiled), names, dict(compiled.params))
