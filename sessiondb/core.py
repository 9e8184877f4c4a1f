"""The core that :class:`~sessiondb.store.SessionStore` and the feature modules share.

One :class:`Core` per store holds what every write and read needs: the backend and its
dialect flavour, the namespace and limits, the retrying transaction, the append
primitive (fast path, uuid idempotency, fence), the head lock, lineage reads inside a
transaction, the constraint → error map, background work, and every piece of per-store
state (names known, the compaction breaker, turn wake-ups, whether the turns table is
there).

The store validates arguments, calls the core (directly, or through
:mod:`sessiondb.overlays`, :mod:`sessiondb.turns`, :mod:`sessiondb.retention`,
:mod:`sessiondb.transfer`) and hands back models. Those modules take a ``Core`` and
never a store, so nothing here imports them and the import graph has no cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .backends import Backend, IntegrityViolation, Transaction, open_backend
from .backends.base import retrying
from .combine import Combiner
from .config import Settings
from .context import ContextRows, split_rows, splits_tool_pair, texts_rows
from .crypto import KeyProvider
from .errors import (
    ConfigurationError,
    ConflictError,
    DatabaseUnavailableError,
    InvalidInputError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
)
from .keyring import Keyring
from .lazy import lazy_modules
from .models import Message, Record, SessionInfo
from .rows import (
    HeadDelta,
    NewRecord,
    message_record,
    records_from_rows,
    session_info,
)
from .sealing import PlainGuard, SealedBackend
from .telemetry import StoreTelemetry
from .validation import check_record_size, strict_int

if TYPE_CHECKING:
    from . import decode, tables
    from . import statements as q
    from .compaction.breaker import CircuitBreaker
else:  # SQLAlchemy's: imported when first used (sessiondb.shapes says why)
    decode, q, tables = lazy_modules("decode statements tables")

T = TypeVar("T")

UUID_CONSTRAINT = "uq_sessiondb_records_session_id_uuid"
KEY_INDEX = "ix_sessiondb_sessions_namespace_key"
# Attempts at an append whose uuids collide with a concurrent writer's.
UUID_ATTEMPTS = 3


def now() -> datetime:
    """The time a write stamps on its rows."""
    return datetime.now(UTC)


class NamedSessions:
    """Ids of sessions known to have a name, so appends skip deriving one (~40 µs).

    Bounded; forgetting an id only costs one derivation, which the SQL then ignores.
    """

    LIMIT = 10_000

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._ids

    def add(self, session_id: str) -> None:
        if len(self._ids) >= self.LIMIT:
            self._ids.clear()
        self._ids.add(session_id)


class ContextBySeqs(NamedSessions):
    """Ids of sessions whose ``context_json`` took the context statement (a fork, a
    prune record), which it then runs first: a fork's read cost ~120 µs more on Postgres
    by the one-column statement first. Only which statement runs first depends on it:
    a session that no longer needs seqs is read right all the same."""


class TurnWakeups:
    """Turn waiters of one store, by session: a release wakes them without waiting for
    their next poll."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}  # waiters between their polls and waits

    @contextlib.contextmanager
    def waiting(self, session_id: str) -> Iterator[None]:
        """A waiter's whole wait: a wake-up that comes while it polls is kept for its
        next :meth:`wait`, which then returns at once."""
        self._waiting[session_id] = self._waiting.get(session_id, 0) + 1
        try:
            yield
        finally:
            left = self._waiting.pop(session_id) - 1
            if left:
                self._waiting[session_id] = left
            elif (event := self._events.get(session_id)) is not None and event.is_set():
                del self._events[session_id]

    async def wait(self, session_id: str, seconds: float) -> None:
        event = self._events.setdefault(session_id, asyncio.Event())
        # asyncio.timeout, not wait_for: on 3.11, wait_for wraps the wait in a task of its
        # own, and a cancellation racing its timeout can be lost.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
        if event.is_set() and self._events.get(session_id) is event:
            del self._events[session_id]

    def wake(self, session_id: str) -> None:
        event = self._events.pop(session_id, None)
        if event is None and session_id in self._waiting:
            event = self._events[session_id] = asyncio.Event()  # for the next wait
        if event is not None:
            event.set()


class Stoppable(Protocol):
    """Per-store machinery a feature module attaches to the core (the change feed of
    :mod:`sessiondb.feed`); stopped before the backend closes."""

    async def close(self) -> None: ...


def check_expected_seq(expected_seq: object) -> None:
    """Refused before SQL: the databases compared ``"1"`` or ``True`` differently."""
    if expected_seq is not None:
        strict_int(expected_seq, "expected_seq", minimum=0)


class Core:
    """The backend, the namespace and the per-store state, with the primitives every
    write and read is built from. Made by :class:`SessionStore`; one per store."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend | None = None,
        encryption: KeyProvider | None = None,
    ) -> None:
        self.settings = settings
        self.namespace = settings.namespace
        self.max_record_bytes = settings.max_record_bytes
        inner = backend if backend is not None else open_backend(settings)
        self.flavour = inner.flavour
        # Encryption at rest (sessiondb.sealing): with keys, the backend seals what it
        # writes and opens what it reads, so nothing above it sees ciphertext; without,
        # its first call checks that the namespace is not an encrypted one.
        #: The namespace's texts are encrypted: full-text indexing must stay off.
        self.encrypted = encryption is not None
        self.backend: Backend
        if encryption is not None:
            sealed = SealedBackend(inner, Keyring(encryption, self.namespace))
            self.backend, self.primary = sealed, sealed.primary
        else:
            PlainGuard(inner, self.namespace)
            self.backend = inner
            # Where reads that must see other writers' latest rows go (a read after a
            # conflict): the primary when reads go to replicas, else the backend itself.
            self.primary = getattr(inner, "primary", inner)
        self.named = NamedSessions()
        self.context_by_seqs = ContextBySeqs()
        self.turn_wakeups = TurnWakeups()
        # Concurrent appends to one session, sent as one (sessiondb.combine).
        self.combiner = Combiner(self)
        # The change feed (sessiondb.feed), made by the first watch.
        self.feed: Stoppable | None = None
        # False once a read found no turns table (code ahead of ``migrate`` in a rolling
        # upgrade), until the next migrate.
        self.turns_table = True
        # The event loop the store's connections belong to (asyncpg's pool is tied to
        # one), once an adapter that is called from other threads has decided it.
        self.home_loop: asyncio.AbstractEventLoop | None = None
        self.home_lock = threading.Lock()
        # Whether writes index the text of records for search (sessiondb.search). Off
        # for a store that must not keep plaintext beside its records (an encrypted
        # namespace), and for the benchmark's side without the index; search then
        # refuses to run.
        self.search_indexing = not self.encrypted
        # False once a write found no search index in the schema (new code ahead of
        # ``migrate`` in a rolling upgrade): writes go on without it, until the next
        # migrate, whose revision 0006 indexes what they wrote.
        self.search_schema = True
        # Postgres: what ANALYZE knew of the search index's words, when search last
        # read it (sessiondb.search.WordStatistics).
        self.search_statistics: Any = None
        # Work a call leaves running after it returns (the ANALYZE after a bulk import).
        self._background: set[asyncio.Task[None]] = set()
        # Spans and metrics of the store's calls (sessiondb.telemetry); imports
        # OpenTelemetry's API here, the first time, when it is installed.
        self.telemetry = StoreTelemetry(settings, self.backend)

    @functools.cached_property
    def compaction_breaker(self) -> CircuitBreaker:
        """Auto-compaction's failures in a row, by session; made on first use, so that
        a store that never compacts loads no compaction code (sessiondb/cli.py)."""
        from .compaction.breaker import CircuitBreaker

        return CircuitBreaker()

    # -- life -------------------------------------------------------------------------

    async def close(self) -> None:
        self.telemetry.forget()
        await self.settle_background()
        if self.feed is not None:
            await self.feed.close()
        await self.backend.close()

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` after the caller returns; :meth:`close` waits for it."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def settle_background(self) -> None:
        """Wait for the work left running by earlier calls (its errors are its own)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # -- transactions and errors ------------------------------------------------------

    async def transact(
        self, unit: Callable[[Transaction], Awaitable[T]], *, outcome_unknown_ok: bool = False
    ) -> T:
        """``unit`` in one transaction; run again, whole, after a retryable failure (the
        database was busy, or the connection broke before COMMIT: nothing was written).

        ``outcome_unknown_ok``: the unit is idempotent (appends by uuid), so one whose
        COMMIT outcome is unknown may run again too.
        """

        async def once() -> T:
            try:
                async with self.backend.transaction() as tx:
                    return await unit(tx)
            except DatabaseUnavailableError as exc:
                if outcome_unknown_ok and exc.outcome_unknown:
                    exc.retryable = True
                raise
            except SessionDBError as exc:
                if not self.search_missing(exc):
                    raise
            # Rolled back: again, writing no search index (see search_missing).
            async with self.backend.transaction() as tx:
                return await unit(tx)

        return await retrying(once)

    # -- the search index ---------------------------------------------------------------

    @property
    def indexes(self) -> bool:
        """Whether writes index the text of records for search now."""
        return self.search_indexing and self.search_schema

    def search_missing(self, exc: SessionDBError) -> bool:
        """Whether a write failed because the schema has no search index yet (the
        records' ``search`` column on Postgres, the FTS5 table on SQLite: revision 0006
        not run); if so, writes go on without it until :meth:`schema_migrated`."""
        text = str(exc)
        if self.search_schema and (
            'column "search"' in text or f"no such table: {tables.SEARCH}" in text
        ):
            self.search_schema = False
            return True
        return False

    def schema_migrated(self) -> None:
        """After a migrate: the tables are today's again."""
        self.turns_table = True
        self.search_schema = True

    def indexable(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Record rows as :meth:`indexes` allows: without their search values when
        writes index nothing now."""
        if self.indexes:
            return rows
        return [r if r[-1] is None else (*r[:-1], None) for r in rows]

    def integrity_error(self, exc: IntegrityViolation, key: str | None = None) -> Exception:
        """The typed error for a constraint a write broke."""
        if exc.constraint == KEY_INDEX:
            return ConflictError(
                f"namespace {self.namespace!r} has a session with key {key!r} already"
            )
        return ConflictError(
            "the session's lineage changed meanwhile (a parent was deleted or a fork "
            f"was added); nothing was written ({exc.detail})"
        )

    # -- sessions -----------------------------------------------------------------------

    async def fetch_sessions(self, with_turns: q.Bound, without: q.Bound) -> list[Any]:
        """Session rows with their live turns; without them on a schema older than the
        turns table (new code ahead of ``migrate`` in a rolling upgrade)."""
        if not self.turns_table:
            return await self.backend.fetch(without)
        try:
            return await self.backend.fetch(with_turns)
        except ConfigurationError:
            rows = await self.backend.fetch(without)  # raises if sessions are missing too
            self.turns_table = False  # until migrate() or a new store
            return rows

    async def session(self, session_id: str) -> SessionInfo:
        """The session's metadata and head (``session_id`` checked by the caller)."""
        rows = await self.fetch_sessions(
            q.session_with_turn(session_id, self.namespace, self.flavour),
            q.get_session(session_id, self.namespace),
        )
        if not rows:
            raise SessionNotFoundError(session_id, self.namespace)
        return session_info(rows[0])

    async def context_rows(self, session_id: str, last: int | None) -> ContextRows:
        """The rows of ``SessionStore.context`` (``session_id`` checked by the caller):
        the common case by :meth:`_context_alone`, the rest and ``last`` by the context
        statement.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``last`` is not a non-negative int.
        """
        if last is None:
            alone = await self._context_alone(session_id)
            if alone is not None:
                return alone
            bound = q.context(session_id, self.namespace, self.flavour, self.encrypted)
        else:
            strict_int(last, "last", minimum=0)
            bound = q.context_tail(session_id, self.namespace, self.flavour, last, self.encrypted)
        split = split_rows(await self.backend.fetch(bound))
        if split.head is None:
            raise SessionNotFoundError(session_id, self.namespace)
        return split

    async def _context_alone(self, session_id: str) -> ContextRows | None:
        """The context's rows in the common case, by the one-column statement
        (:func:`statements.context_texts`); ``None`` when it takes the context statement:
        a fork or a prune record (they need seqs), sealed payloads (opened by their
        row's seq), or no such session (the other path says so). A session found to
        need the other statement goes straight to it next time (``context_by_seqs``)."""
        if self.encrypted or session_id in self.context_by_seqs:
            return None
        bound = q.context_texts(session_id, self.namespace)
        rows = await self.backend.fetch(bound, plain=True)
        alone = texts_rows(rows) if rows else None
        if rows and alone is None:
            self.context_by_seqs.add(session_id)
        return alone

    # -- appends ------------------------------------------------------------------------

    def message_rows(
        self,
        messages: Sequence[Message | Mapping[str, Any]] | Message | Mapping[str, Any],
    ) -> list[NewRecord]:
        """Messages as checked records to write, each within the store's size limit."""
        if isinstance(messages, Message | Mapping):
            messages = [messages]
        elif not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise InvalidInputError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        rows = [message_record(m, i) for i, m in enumerate(messages)]
        for i, row in enumerate(rows):
            check_record_size(row.payload, self.max_record_bytes, f"message {i}")
        return rows

    async def append(
        self,
        session_id: str,
        rows: list[NewRecord],
        *,
        expected_seq: int | None = None,
        fence: Callable[[Transaction], Awaitable[None]] | None = None,
    ) -> list[Record]:
        """Append ``rows``; the stored records of uuids stored already come back in their
        place. ``fence``: run first inside the append's transaction (a turn's lease
        check); what it raises aborts the append.

        Without a fence, appends of other tasks to the same session at the same moment
        are combined with this one (:mod:`sessiondb.combine`)."""
        check_expected_seq(expected_seq)
        uuids = [r.uuid for r in rows if r.uuid is not None]
        if len(set(uuids)) != len(uuids):
            raise InvalidInputError("the same uuid appears twice in one append")
        if not rows:
            await self.session(session_id)  # raises when the session is missing
            return []
        if fence is not None:
            return await self.append_transaction(
                lambda tx: self.append_in(tx, session_id, rows, expected_seq, uuids, fence),
                outcome_unknown_ok=bool(uuids),
            )
        return await self.combiner.append(session_id, rows, expected_seq, uuids)

    async def append_alone(
        self,
        session_id: str,
        rows: list[NewRecord],
        expected_seq: int | None,
        uuids: Sequence[str],
    ) -> list[Record]:
        """One call's append (checked), not combined with any other."""
        if not uuids:
            return await self._append_fast(session_id, rows, expected_seq)
        # Safe to run again whatever happened to an earlier attempt's COMMIT: the uuids
        # it stored come back instead of being stored twice.
        return await self.append_transaction(
            lambda tx: self.append_in(tx, session_id, rows, expected_seq, uuids),
            outcome_unknown_ok=True,
        )

    async def append_plain(self, session_id: str, rows: list[NewRecord]) -> list[Record]:
        """Rows without uuids, with no expected head: one backend call."""
        return await self._append_fast(session_id, rows, None)

    async def append_transaction(
        self, unit: Callable[[Transaction], Awaitable[T]], *, outcome_unknown_ok: bool
    ) -> T:
        """``unit`` (an append) in a retried transaction; run again when its uuids
        collided with a concurrent writer's (the retry finds them stored)."""
        for _attempt in range(UUID_ATTEMPTS):
            try:
                return await self.transact(unit, outcome_unknown_ok=outcome_unknown_ok)
            except IntegrityViolation as exc:
                if exc.constraint != UUID_CONSTRAINT:
                    raise self.integrity_error(exc) from exc
        raise ConflictError("the session's uuids kept colliding with concurrent writers")

    async def _append_fast(
        self, session_id: str, rows: list[NewRecord], expected_seq: int | None
    ) -> list[Record]:
        """No uuids, no fence: one backend call, which the backend may batch."""
        at = now()
        delta = HeadDelta.of(rows, name=session_id not in self.named)
        head = delta.head(session_id, self.namespace, len(rows), at, expected_seq)
        try:
            first = await self.backend.append(head, [r.append_values(self.indexes) for r in rows])
        except SessionDBError as exc:
            if not self.search_missing(exc):
                raise
            first = await self.backend.append(head, [r.append_values(False) for r in rows])
        if first is None:
            raise await self._missing_or_conflict(None, session_id, expected_seq)
        if delta.name is not None:
            self.named.add(session_id)
        return [r.to_record(session_id, first + i, at) for i, r in enumerate(rows)]

    async def append_in(
        self,
        tx: Transaction,
        session_id: str,
        rows: list[NewRecord],
        expected_seq: int | None = None,
        uuids: Sequence[str] = (),
        fence: Callable[[Transaction], Awaitable[None]] | None = None,
    ) -> list[Record]:
        """Append inside ``tx``; with ``uuids``, the stored records of known ones come back
        in their place."""
        if fence is not None:
            await fence(tx)
        stored = await self.stored_uuids(tx, session_id, uuids) if uuids else {}
        new_rows = [r for r in rows if r.uuid is None or r.uuid not in stored]
        if not new_rows:
            return [stored[r.uuid] for r in rows if r.uuid is not None]
        at = now()
        delta = HeadDelta.of(new_rows)
        head = delta.head(session_id, self.namespace, len(new_rows), at, expected_seq)
        first = await tx.append(head, [r.append_values(self.indexes) for r in new_rows])
        if first is None:
            raise await self._missing_or_conflict(tx, session_id, expected_seq)
        fresh = iter(r.to_record(session_id, first + i, at) for i, r in enumerate(new_rows))
        return [
            stored[r.uuid] if r.uuid is not None and r.uuid in stored else next(fresh) for r in rows
        ]

    async def stored_uuids(
        self, tx: Transaction, session_id: str, uuids: Sequence[str]
    ) -> dict[str, Record]:
        """The session's stored records of those of ``uuids`` it has, by uuid."""
        found = await tx.fetch(
            q.existing_uuids(session_id, self.namespace, list(uuids), self.flavour)
        )
        return {r.uuid: r for r in records_from_rows(found) if r.uuid is not None}

    async def _missing_or_conflict(
        self, tx: Transaction | None, session_id: str, expected_seq: int | None
    ) -> Exception:
        """After an append found no head: whether the session is missing or moved on."""
        bound = q.get_session(session_id, self.namespace)
        rows = await (tx.fetch(bound) if tx is not None else self.primary.fetch(bound))
        if not rows:
            return SessionNotFoundError(session_id, self.namespace)
        assert expected_seq is not None
        return SeqConflictError(session_id, expected_seq, rows[0]["last_seq"])

    async def lock_head(self, tx: Transaction, session_id: str) -> int:
        """Lock the session's row for ``tx``; its head seq."""
        rows = await tx.fetch(q.lock_head(session_id, self.namespace))
        if not rows:
            raise SessionNotFoundError(session_id, self.namespace)
        return int(rows[0][0])

    # -- lineage reads inside a transaction ----------------------------------------------

    async def lineage_rows(
        self,
        tx: Transaction,
        session_id: str,
        *,
        include_tombstoned: bool = False,
        kinds: tuple[str, ...] | None = None,
        roles: tuple[str, ...] | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
    ) -> list[Any]:
        """Rows of the lineage's records, superseded ones included, with ``target_seq``."""
        bound = q.lineage_records(
            session_id,
            self.namespace,
            include_tombstoned=include_tombstoned,
            include_superseded=True,
            kinds=kinds,
            roles=roles,
            from_seq=from_seq,
            to_seq=to_seq,
            extra_columns=("target_seq",),
            flavour=self.flavour,
            sealed=self.encrypted,
        )
        return await tx.fetch(bound)

    async def live_messages(
        self, tx: Transaction, session_id: str, from_seq: int, to_seq: int
    ) -> list[tuple[int, Message]]:
        """Messages in the current context with seqs in the range."""
        bound = q.lineage_records(
            session_id,
            self.namespace,
            include_tombstoned=False,
            include_superseded=False,
            kinds=("message",),
            from_seq=from_seq,
            to_seq=to_seq,
            flavour=self.flavour,
            sealed=self.encrypted,
        )
        return _seq_messages(await tx.fetch(bound))

    async def pair_window(
        self, tx: Transaction, session_id: str, seq: int
    ) -> list[tuple[int, Message]]:
        """The messages around ``seq`` that a tool call and its results can span: from the
        last assistant message at or before it to the next assistant message after it.

        A user message between a call and its result does not end the window: a result
        answers the last assistant message before it (``pair_members``), so the call must
        see that result too, or tombstoning the call would leave the result behind.
        """
        start = (
            await tx.fetch(
                q.nearest_message(
                    session_id, self.namespace, roles=("assistant",), at_or_before=seq
                )
            )
        )[0]["seq"]
        after = (
            await tx.fetch(
                q.nearest_message(session_id, self.namespace, roles=("assistant",), after=seq)
            )
        )[0]["seq"]
        end = after - 1 if after is not None else None
        rows = await self.lineage_rows(
            tx,
            session_id,
            kinds=("message",),
            from_seq=start or 1,
            to_seq=end,
            include_tombstoned=True,
        )
        return _seq_messages(rows)

    async def splits_pair(self, tx: Transaction, session_id: str, cut_after: int) -> bool:
        """Whether cutting the lineage after ``cut_after`` separates a tool call from its
        result."""
        if cut_after < 1:
            return False
        window = await self.pair_window(tx, session_id, cut_after)
        return splits_tool_pair(window, cut_after)

    async def count_messages(self, tx: Transaction, session_id: str, upto: int) -> int:
        """Messages along the lineage with seqs up to ``upto``."""
        total = 0
        for lin in await tx.fetch(q.lineage_ids(session_id, self.namespace)):
            limit = min(upto, int(lin["upto"]))
            counted = await tx.fetch(q.count_messages(lin["id"], limit))
            total += int(counted[0]["n"])
        return total


def _seq_messages(rows: list[Any]) -> list[tuple[int, Message]]:
    return list(
        zip([r["seq"] for r in rows], decode.messages([r["payload"] for r in rows]), strict=True)
    )


class HasCore(Protocol):
    """What owns a core: :class:`sessiondb.SessionStore` is one."""

    @property
    def core(self) -> Core: ...


def core_of(owner: HasCore | Core) -> Core:
    """The core of a store, or the core itself: the feature modules' entry points take
    either."""
    return owner if isinstance(owner, Core) else owner.core
