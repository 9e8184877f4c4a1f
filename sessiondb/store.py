"""The front door: :class:`SessionStore` validates, plans, makes one backend call and
maps the result to models. Which database is behind it is the backend's business."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from . import context as ctx
from . import cursor as cursors
from . import jsoncodec, retention, transfer, turns
from . import migrate as migrations
from . import statements as q
from .backends import Backend, IntegrityViolation, Transaction, open_backend
from .backends.base import retrying
from .compaction import engine as compaction
from .compaction.engine import (
    AutoCompactOutcome,
    CircuitBreaker,
    CompactionResult,
    EventHook,
)
from .compaction.plan import CompactionPlan
from .compaction.prune import PRUNED_MARKER
from .compaction.settings import CompactionSettings
from .compaction.summarizers import Summarizer
from .compaction.tokens import Tokenizer
from .config import ConnectOptions, Settings
from .errors import (
    ConfigurationError,
    ConflictError,
    DatabaseUnavailableError,
    HasChildrenError,
    InvalidInputError,
    RecordNotFoundError,
    SeqConflictError,
    SessionNotFoundError,
    brief,
)
from .ids import check_session_id, new_session_id
from .models import (
    Compaction,
    Message,
    NewSession,
    Prune,
    Record,
    SessionInfo,
    SessionPage,
    Tombstone,
)
from .rows import (
    HeadDelta,
    NewRecord,
    message_record,
    parse_messages,
    records_from_rows,
    session_info,
    utc,
)
from .tables import records, sessions
from .transfer import ImportProgress, ImportReport
from .turns import Turn
from .validation import (
    MAX_NAME_CHARS,
    bounded_text,
    check_record_size,
    column_text,
    session_fields,
    session_key,
    strict_int,
    to_json,
)

T = TypeVar("T")

MAX_PAGE = 1000
UUID_CONSTRAINT = "uq_sessiondb_records_session_id_uuid"
KEY_INDEX = "ix_sessiondb_sessions_namespace_key"
# What session_for_key passes on to create_session.
_CREATE_ARGS = frozenset(
    ("name", "model", "source", "cron_job_id", "system_prompt_override", "metadata")
)
KINDS = ("message", "compaction", "tombstone", "entry", "prune")
# The largest number of tool results one prune record may name.
MAX_PRUNE_SEQS = 10_000


def _now() -> datetime:
    return datetime.now(UTC)


class _NamedSessions:
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


class _DuplicateUuid(Exception):
    """A concurrent writer stored a record with the same uuid first; retry."""


class SessionStore:
    """Sessions and their records in one database, scoped to one namespace.

    Open it with ``async with SessionStore.open(url) as store``; every method is a
    coroutine and runs in its own short transaction.
    """

    def __init__(
        self, settings: Settings | str | None = None, backend: Backend | None = None
    ) -> None:
        """A store for ``settings`` (or a URL, as :meth:`open` takes it); prefer
        :meth:`open` or :meth:`connect`, which also take the connection options."""
        if not isinstance(settings, Settings):
            if settings is not None and not isinstance(settings, str):
                raise ConfigurationError(
                    f"SessionStore takes a URL or Settings, got {type(settings).__name__}"
                )
            settings = Settings.from_env(settings)
        self.settings = settings
        self.namespace = settings.namespace
        self._backend = backend if backend is not None else open_backend(settings)
        self._flavour = self._backend.flavour
        self._named = _NamedSessions()
        self._compaction_breaker = CircuitBreaker()
        self._turns_table = True
        self._max_record_bytes = settings.max_record_bytes
        # Work a call leaves running after it returns (the ANALYZE after a bulk import).
        self._background: set[asyncio.Task[None]] = set()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        *,
        connect_timeout: float = ConnectOptions.connect_timeout,
        pool_min_size: int = ConnectOptions.pool_min_size,
        pool_max_size: int = ConnectOptions.pool_max_size,
        server_settings: Mapping[str, str] | None = None,
        ssl: Any = None,
        connect_args: Mapping[str, Any] | None = None,
        max_record_bytes: int = Settings.max_record_bytes,
    ) -> AsyncIterator[SessionStore]:
        """Open a store; closes its connections on exit.

        Args:
            url: ``postgresql://…`` (asyncpg), ``sqlite:///x.db`` or a file path (SQLite),
                or ``:memory:``; default ``SESSIONDB_URL``, else ``./sessiondb.sqlite3``.
                Postgres URLs take ``sslmode``, ``application_name``,
                ``connect_timeout`` and ``prepared_statement_cache_size=0`` (for
                PgBouncer in transaction mode).
            namespace: the tenant scope of every query; default ``SESSIONDB_NAMESPACE``,
                else ``"default"``.
            connect_timeout, pool_min_size, pool_max_size, server_settings, ssl,
                connect_args: how connections to Postgres are opened (see
                :class:`sessiondb.config.ConnectOptions`); SQLite ignores them.
            max_record_bytes: the largest record the store writes, in UTF-8 bytes of
                its stored JSON (default 64 MiB); a bigger one is refused with an
                :class:`InvalidInputError` and nothing is written.

        Raises:
            ConfigurationError: the URL, namespace or options are unusable.
            MissingDependencyError: a Postgres URL without ``sessiondb[postgres]``.
        """
        store = await cls.connect(
            url,
            namespace,
            connect_timeout=connect_timeout,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            server_settings=server_settings,
            ssl=ssl,
            connect_args=connect_args,
            max_record_bytes=max_record_bytes,
        )
        try:
            yield store
        finally:
            await store.close()

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        *,
        connect_timeout: float = ConnectOptions.connect_timeout,
        pool_min_size: int = ConnectOptions.pool_min_size,
        pool_max_size: int = ConnectOptions.pool_max_size,
        server_settings: Mapping[str, str] | None = None,
        ssl: Any = None,
        connect_args: Mapping[str, Any] | None = None,
        max_record_bytes: int = Settings.max_record_bytes,
    ) -> SessionStore:
        """A store for a service to keep for its lifetime: ``store = await
        SessionStore.connect(url)`` at start-up, ``await store.close()`` at shut-down.
        Arguments as for :meth:`open`. Connections open on first use.

        Raises:
            ConfigurationError: the URL, namespace or options are unusable.
            MissingDependencyError: a Postgres URL without ``sessiondb[postgres]``.
        """
        # The type, never the value: connect_args carries passwords.
        if server_settings is not None and not isinstance(server_settings, Mapping):
            raise ConfigurationError(
                f"server_settings must be a dict, got {type(server_settings).__name__}"
            )
        if connect_args is not None and not isinstance(connect_args, Mapping):
            raise ConfigurationError(
                f"connect_args must be a dict, got {type(connect_args).__name__}"
            )
        options = ConnectOptions(
            connect_timeout=connect_timeout,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            server_settings=dict(server_settings or {}),
            ssl=ssl,
            connect_args=dict(connect_args or {}),
        )
        return cls(Settings.from_env(url, namespace, options, max_record_bytes))

    def __repr__(self) -> str:
        return f"SessionStore({self.settings!r})"  # Settings masks the secrets

    async def close(self) -> None:
        """Close every connection and thread the store holds; idempotent. Any later call
        raises :class:`StoreClosedError`."""
        await self._settle_background()
        await self._backend.close()

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` after the caller returns; :meth:`close` waits for it."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _settle_background(self) -> None:
        """Wait for the work left running by earlier calls (its errors are its own)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # -- schema ---------------------------------------------------------------------

    async def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema to ``revision`` (default: the newest), as ``sessiondb migrate``."""
        # Exclusive: replicas that start together and all migrate take turns, and all but
        # the first find the schema at head already.
        await self._backend.run_sync(
            lambda conn: migrations.run_sync(conn, "upgrade", revision), exclusive=True
        )
        self._turns_table = True

    # -- sessions -------------------------------------------------------------------

    async def create_session(
        self,
        name: str | None = None,
        model: str | None = None,
        source: Literal["interactive", "cron"] = "interactive",
        cron_job_id: str | None = None,
        system_prompt_override: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> SessionInfo:
        """Create an empty session. Without a name, the first user message names it.

        Args:
            key: the caller's own key for the session, unique in the namespace (see
                :meth:`session_for_key`, which returns the existing session instead).

        Raises:
            InvalidInputError: a bad source or key, or a value a text column cannot hold.
            ConflictError: the namespace has a session with this key already.
        """
        values = self._session_values(
            name, model, source, cron_job_id, system_prompt_override, metadata, _now(), key
        )
        try:
            await self._backend.execute((q.insert_rows(sessions.name), values))
        except IntegrityViolation as exc:
            raise self._key_taken(exc, key) from exc
        return await self.get_session(values["id"])

    async def session_for_key(
        self, key: str, create: bool = True, **create_kwargs: Any
    ) -> SessionInfo:
        """The session whose key is ``key`` in this namespace, created if missing.

        A key is the caller's own address for a conversation: a chat id, a ticket
        number, ``user:42/thread:7``. It is compared exactly (case, spaces and Unicode
        normalisation count) and is unique per namespace: replicas or processes racing
        on one new key all get the one session that the first of them created. Safe to
        call again after any failure.

        Args:
            key: a non-empty string of at most 512 characters, without NUL or lone
                surrogates.
            create: create the session when the key is missing; with ``False`` a missing
                key raises :class:`SessionNotFoundError`.
            create_kwargs: what :meth:`create_session` takes (``name``, ``model``,
                ``source``, ``cron_job_id``, ``system_prompt_override``, ``metadata``),
                used only when the session is created; an existing session is returned
                unchanged.

        Raises:
            InvalidInputError: a bad key or argument.
            SessionNotFoundError: ``create`` is false and no session has this key.
        """
        key = session_key(key)
        _check_bool(create, "create")
        unknown = sorted(set(create_kwargs) - _CREATE_ARGS)
        if unknown:
            raise InvalidInputError(
                f"session_for_key got unknown argument(s) {', '.join(unknown)}; it takes "
                f"{', '.join(sorted(_CREATE_ARGS))}"
            )
        found = await self._backend.fetch(q.session_by_key(key, self.namespace))
        if found:
            return session_info(found[0])
        if not create:
            raise SessionNotFoundError(None, self.namespace, key=key)
        values: dict[str, Any] | None = None
        for _attempt in range(3):
            if values is None:
                values = self._session_values(**create_kwargs, now=_now(), key=key)
            try:
                rows = await self._backend.execute(q.insert_keyed_session(values, self._flavour))
            except DatabaseUnavailableError as exc:
                # The INSERT may or may not have committed; the lookup below tells.
                if not exc.outcome_unknown:
                    raise
                rows = []
            if rows:
                return session_info(rows[0])
            found = await self._backend.fetch(q.session_by_key(key, self.namespace))
            if found:
                return session_info(found[0])
            # The session that held the key was deleted between the two statements.
            values = None
        raise ConflictError(f"key {key!r}: sessions kept being created and deleted meanwhile")

    def _key_taken(self, exc: IntegrityViolation, key: str | None) -> Exception:
        if exc.constraint == KEY_INDEX:
            return ConflictError(
                f"namespace {self.namespace!r} has a session with key {key!r} already"
            )
        return self._integrity(exc)

    def _session_values(
        self,
        name: str | None = None,
        model: str | None = None,
        source: str = "interactive",
        cron_job_id: str | None = None,
        system_prompt_override: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        if source not in ("interactive", "cron"):
            raise InvalidInputError(f"source must be 'interactive' or 'cron', got {brief(source)}")
        if source == "interactive" and cron_job_id is not None:
            raise InvalidInputError("cron_job_id is only for source='cron'")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
        now = now if now is not None else _now()
        return {
            "id": new_session_id(),
            "namespace": self.namespace,
            "created_at": now,
            "last_message_at": now,
            "source": source,
            **session_fields(
                name,
                model,
                cron_job_id,
                system_prompt_override,
                None if metadata is None else dict(metadata),
                self._max_record_bytes,
            ),
            **_ZERO_HEAD,
            "parent_id": None,
            "fork_seq": None,
            "key": session_key(key) if key is not None else None,
        }

    async def import_sessions(
        self,
        items: Iterable[NewSession | Mapping[str, Any]],
        *,
        batch_records: int = 20_000,
    ) -> list[str]:
        """Create many sessions with their messages at bulk speed; returns their ids.

        The fastest path for many records: COPY on Postgres, one multi-row insert per
        batch on SQLite. Each session is written whole or not at all: sessions are
        grouped into transactions of about ``batch_records`` records, and a batch is
        validated completely before any of it is written. A session may carry a ``key``
        (see :meth:`session_for_key`); none has one unless given.

        Raises:
            InvalidInputError: a session or message is malformed, or two of them have one
                key (its batch is not written).
            ConflictError: a key is taken in the namespace (its batch is not written).
        """
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidInputError(
                f"items must be an iterable of sessions (dicts or NewSession), got "
                f"{type(items).__name__}"
            )
        strict_int(batch_records, "batch_records", minimum=1)
        ids: list[str] = []
        batch: list[tuple[dict[str, Any], list[NewRecord]]] = []
        keys: dict[str, int] = {}  # key -> index of the session that has it
        size = 0
        for index, item in enumerate(items):
            try:
                new = item if isinstance(item, NewSession) else NewSession.model_validate(item)
            except ValidationError as exc:
                raise InvalidInputError(f"session {index}: {_first_error(exc)}") from None
            try:
                # The NewSession validated just now checked its dicts; one handed in may
                # have been changed since it was built.
                checked = new is not item
                rows = [
                    message_record(m, i, model=False, checked=checked)
                    for i, m in enumerate(new.messages)
                ]
                for i, row in enumerate(rows):
                    check_record_size(row.payload, self._max_record_bytes, f"message {i}")
            except InvalidInputError as exc:
                raise InvalidInputError(f"session {index}: {exc}") from None
            uuids = [r.uuid for r in rows if r.uuid is not None]
            if len(set(uuids)) != len(uuids):
                raise InvalidInputError(f"session {index}: the same uuid appears twice")
            try:
                values = self._session_values(
                    new.name,
                    new.model,
                    new.source,
                    new.cron_job_id,
                    new.system_prompt_override,
                    new.metadata,
                    _now(),
                    new.key,
                )
            except InvalidInputError as exc:
                raise InvalidInputError(f"session {index}: {exc}") from None
            delta = HeadDelta.of(rows)
            values.update(
                last_seq=len(rows),
                message_count=delta.messages,
                input_tokens=delta.tokens[0],
                output_tokens=delta.tokens[1],
                cache_read_tokens=delta.tokens[2],
                cache_write_tokens=delta.tokens[3],
                cost_total=delta.cost,
            )
            if values["name"] is None:
                values["name"] = delta.name
            if values["key"] is not None:
                if values["key"] in keys:
                    raise InvalidInputError(
                        f"session {index}: key {values['key']!r} is given to session "
                        f"{keys[values['key']]} too"
                    )
                keys[values["key"]] = index
            batch.append((values, rows))
            ids.append(values["id"])
            size += len(rows) + 1
            if size >= batch_records:
                await self._write_sessions(batch)
                batch, size = [], 0
        if batch:
            await self._write_sessions(batch)
        return ids

    async def _write_sessions(self, batch: list[tuple[dict[str, Any], list[NewRecord]]]) -> None:
        at = _now()
        session_rows = [tuple(v[c] for c in q.SESSION_COLUMN_NAMES) for v, _ in batch]
        record_rows = [
            row.values(values["id"], seq, at)
            for values, rows in batch
            for seq, row in enumerate(rows, start=1)
        ]

        async def unit(tx: Transaction) -> None:
            await tx.insert(sessions, session_rows)
            await tx.insert(records, record_rows)

        try:
            await self._transact(unit)
        except IntegrityViolation as exc:
            if exc.constraint != KEY_INDEX:
                raise
            raise ConflictError(
                f"a session's key is taken in namespace {self.namespace!r} already; no "
                f"session of this batch was written ({exc.detail})"
            ) from exc

    async def get_session(self, session_id: str) -> SessionInfo:
        """The session's metadata and head.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a ULID.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        rows = await self._fetch_sessions(
            q.session_with_turn(session_id, self.namespace, self._flavour),
            q.get_session(session_id, self.namespace),
        )
        if not rows:
            raise SessionNotFoundError(session_id, self.namespace)
        return session_info(rows[0])

    async def list_sessions(
        self,
        limit: int = 50,
        cursor: str | None = None,
        *,
        source: Literal["interactive", "cron"] | None = None,
        parent_id: str | None = None,
    ) -> SessionPage:
        """A page of sessions, newest ``last_message_at`` first (keyset, never OFFSET).

        Args:
            limit: page size, 1..1000.
            cursor: ``next_cursor`` of the previous page.
            source: only sessions of this source.
            parent_id: only the direct forks of this session.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise InvalidInputError(
                f"limit must be an integer in 1..{MAX_PAGE}, got {brief(limit)}"
            )
        if source is not None and source not in ("interactive", "cron"):
            raise InvalidInputError(f"source must be 'interactive' or 'cron', got {brief(source)}")
        if parent_id is not None:
            check_session_id(parent_id)
        after = cursors.decode(cursor) if cursor is not None else None

        def page(with_turns: bool) -> q.Bound:
            return q.list_sessions(
                self.namespace,
                limit=limit + 1,
                after=after,
                source=source,
                parent_id=parent_id,
                flavour=self._flavour,
                with_turns=with_turns,
            )

        rows = await self._fetch_sessions(page(True), page(False))
        items = [session_info(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = cursors.encode(utc(last["last_message_at"]), last["id"])
        return SessionPage(items=items, next_cursor=next_cursor)

    async def _fetch_sessions(self, with_turns: q.Bound, without: q.Bound) -> list[Any]:
        """Session rows with their live turns; without them on a schema older than the
        turns table (new code ahead of ``migrate`` in a rolling upgrade)."""
        if not self._turns_table:
            return await self._backend.fetch(without)
        try:
            return await self._backend.fetch(with_turns)
        except ConfigurationError:
            rows = await self._backend.fetch(without)  # raises if sessions are missing too
            self._turns_table = False  # until migrate() or a new store
            return rows

    async def rename(self, session_id: str, name: str) -> SessionInfo:
        """Set the session's name.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        value = bounded_text(name, "name", MAX_NAME_CHARS, optional=False)
        assert value is not None
        if not await self._backend.execute(q.rename(session_id, self.namespace, value)):
            raise SessionNotFoundError(session_id, self.namespace)
        return await self.get_session(session_id)

    async def delete_session(self, session_id: str, *, cascade: bool = False) -> list[str]:
        """Delete the session and its records; returns the ids deleted.

        Args:
            cascade: also delete its forks, their forks, and so on.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            HasChildrenError: the session has forks and ``cascade`` is false.
        """
        check_session_id(session_id)
        _check_bool(cascade, "cascade")

        async def unit(tx: Transaction) -> list[str]:
            rows = await tx.fetch(q.subtree_ids(session_id, self.namespace))
            if not rows:
                raise SessionNotFoundError(session_id, self.namespace)
            ids = [r["id"] for r in rows]
            if len(ids) > 1 and not cascade:
                raise HasChildrenError(session_id, [r["id"] for r in rows if r["depth"] == 1])
            for bound in q.delete_sessions(ids, self._flavour):
                await tx.fetch(bound)
            return ids

        return await self._transact(unit)

    # -- turns and retention (sessiondb.turns, sessiondb.retention do the work) -------

    def turn(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        lease: float = turns.DEFAULT_LEASE,
        holder: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Turn]:
        """Hold the session's turn for an ``async with`` block: one holder at a time per
        session, across processes and hosts; waiters are served in arrival order.

        ``async with store.turn(sid, holder="worker-3") as turn: await turn.append(…)``.
        No transaction or connection stays open while the turn is held: the turn is a
        lease row that renews itself in the background, and ``turn.append`` writes only
        while the lease holds (see :mod:`sessiondb.turns`). Plain :meth:`append` still
        works for writers that take no turns. Not re-entrant: a second ``turn`` on the
        same session inside the block waits for the first like any other caller.

        Args:
            timeout: seconds to wait for the turn; ``None`` waits as long as it takes.
            lease: seconds a holder that stops renewing (a dead process) keeps the turn.
            holder: a label saying who is working (default ``host:pid``), shown by
                :meth:`get_session` and ``sessiondb sessions list``.

        Raises:
            InvalidInputError: a bad argument (raised at once).
            SessionNotFoundError: no such session in this namespace (on entering).
            TurnTimeoutError: the turn stayed taken for ``timeout`` seconds; it names
                the holder.
        """
        check_session_id(session_id)
        args = turns.check_args(timeout, lease, holder)
        return turns.hold(self, session_id, args)

    async def prune(
        self,
        older_than: timedelta,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        batch_size: int = retention.DEFAULT_BATCH,
    ) -> retention.RetentionReport:
        """Retention: delete whole sessions whose last message (without messages: whose
        creation) is older than ``older_than``, with their records.

        Not :meth:`append_prune`, which writes a prune overlay into one live session and
        deletes nothing. A session with an active fork below it (directly or through a
        chain) is kept, so that every fork's lineage stays readable; so is a session whose
        turn is held. Works in batches of ``batch_size`` sessions, each one short
        transaction.

        Args:
            older_than: the idle time after which a session goes.
            dry_run: report what would be deleted; write nothing.
            namespace: the namespace to prune (default the store's).

        Raises:
            InvalidInputError: a bad argument.
        """
        cutoff, dry, ns, batch = retention.check_args(
            older_than, dry_run, namespace, batch_size, self.namespace
        )
        return await retention.prune(self, cutoff, dry_run=dry, namespace=ns, batch_size=batch)

    # -- appends --------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        messages: Sequence[Message | Mapping[str, Any]] | Message | Mapping[str, Any],
        expected_seq: int | None = None,
    ) -> list[Record]:
        """Append messages in one transaction; returns the stored records, with seqs.

        A message whose ``uuid`` is already stored in this session is not stored again:
        its stored record comes back instead (a retry after an ambiguous commit).

        Args:
            messages: ``Message`` models or dicts of the wire shape (kept exactly as given).
            expected_seq: the head seq the caller believes is current; if another writer
                got there first, :class:`SeqConflictError` is raised and nothing is written.

        Raises:
            InvalidInputError: a message is malformed (nothing is written).
            SessionNotFoundError: no such session in this namespace.
            SeqConflictError: ``expected_seq`` is not the head.
        """
        check_session_id(session_id)
        rows = self._message_rows(messages)
        return await self._append(session_id, rows, expected_seq=expected_seq)

    def _message_rows(
        self,
        messages: Sequence[Message | Mapping[str, Any]] | Message | Mapping[str, Any],
    ) -> list[NewRecord]:
        if isinstance(messages, Message | Mapping):
            messages = [messages]
        elif not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise InvalidInputError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        rows = [message_record(m, i) for i, m in enumerate(messages)]
        for i, row in enumerate(rows):
            check_record_size(row.payload, self._max_record_bytes, f"message {i}")
        return rows

    async def _append(
        self,
        session_id: str,
        rows: list[NewRecord],
        *,
        expected_seq: int | None = None,
        fence: Callable[[Transaction], Awaitable[None]] | None = None,
    ) -> list[Record]:
        """``fence``: run first inside the append's transaction (a turn's lease check);
        what it raises aborts the append."""
        _check_expected_seq(expected_seq)
        uuids = [r.uuid for r in rows if r.uuid is not None]
        if len(set(uuids)) != len(uuids):
            raise InvalidInputError("the same uuid appears twice in one append")
        if not rows:
            await self.get_session(session_id)  # raises when the session is missing
            return []
        if not uuids and fence is None:
            at = _now()
            delta = HeadDelta.of(rows, name=session_id not in self._named)
            head = delta.head(session_id, self.namespace, len(rows), at, expected_seq)
            first = await self._backend.append(head, [r.append_values() for r in rows])
            if first is None:
                await self._raise_missing_or_conflict(None, session_id, expected_seq)
                raise AssertionError("unreachable")
            if delta.name is not None:
                self._named.add(session_id)
            return [r.to_record(session_id, first + i, at) for i, r in enumerate(rows)]
        for _attempt in range(3):
            try:
                # Safe to run again whatever happened to an earlier attempt's COMMIT: the
                # uuids it stored come back instead of being stored twice.
                return await self._transact(
                    lambda tx: self._append_in(tx, session_id, rows, expected_seq, uuids, fence),
                    outcome_unknown_ok=bool(uuids),
                )
            except IntegrityViolation as exc:
                if exc.constraint != UUID_CONSTRAINT:
                    raise self._integrity(exc) from exc
        raise ConflictError(f"session {session_id}: uuids kept colliding with concurrent writers")

    async def _transact(
        self, unit: Callable[[Transaction], Awaitable[T]], *, outcome_unknown_ok: bool = False
    ) -> T:
        """``unit`` in one transaction; run again, whole, after a retryable failure (the
        database was busy, or the connection broke before COMMIT: nothing was written).

        ``outcome_unknown_ok``: the unit is idempotent (appends by uuid), so one whose
        COMMIT outcome is unknown may run again too.
        """

        async def once() -> T:
            try:
                async with self._backend.transaction() as tx:
                    return await unit(tx)
            except DatabaseUnavailableError as exc:
                if outcome_unknown_ok and exc.outcome_unknown:
                    exc.retryable = True
                raise

        return await retrying(once)

    @staticmethod
    def _integrity(exc: IntegrityViolation) -> Exception:
        return ConflictError(
            "the session's lineage changed meanwhile (a parent was deleted or a fork "
            f"was added); nothing was written ({exc.detail})"
        )

    async def _append_in(
        self,
        tx: Transaction,
        session_id: str,
        rows: list[NewRecord],
        expected_seq: int | None,
        uuids: list[str],
        fence: Callable[[Transaction], Awaitable[None]] | None = None,
    ) -> list[Record]:
        """Append inside ``tx``; with ``uuids``, the stored records of known ones come back
        in their place."""
        if fence is not None:
            await fence(tx)
        stored: dict[str, Record] = {}
        if uuids:
            found = await tx.fetch(
                q.existing_uuids(session_id, self.namespace, uuids, self._flavour)
            )
            stored = {r.uuid: r for r in records_from_rows(found) if r.uuid is not None}
        new_rows = [r for r in rows if r.uuid is None or r.uuid not in stored]
        if not new_rows:
            return [stored[r.uuid] for r in rows if r.uuid is not None]
        at = _now()
        delta = HeadDelta.of(new_rows)
        head = delta.head(session_id, self.namespace, len(new_rows), at, expected_seq)
        first = await tx.append(head, [r.append_values() for r in new_rows])
        if first is None:
            await self._raise_missing_or_conflict(tx, session_id, expected_seq)
            raise AssertionError("unreachable")
        fresh = iter(r.to_record(session_id, first + i, at) for i, r in enumerate(new_rows))
        return [
            stored[r.uuid] if r.uuid is not None and r.uuid in stored else next(fresh) for r in rows
        ]

    async def _raise_missing_or_conflict(
        self, tx: Transaction | None, session_id: str, expected_seq: int | None
    ) -> None:
        """After an append found no head: say whether the session is missing or moved on."""
        bound = q.get_session(session_id, self.namespace)
        rows = await (tx.fetch(bound) if tx is not None else self._backend.fetch(bound))
        if not rows:
            raise SessionNotFoundError(session_id, self.namespace)
        assert expected_seq is not None
        raise SeqConflictError(session_id, expected_seq, rows[0]["last_seq"])

    async def _lock(self, tx: Transaction, session_id: str) -> int:
        rows = await tx.fetch(q.lock_head(session_id, self.namespace))
        if not rows:
            raise SessionNotFoundError(session_id, self.namespace)
        return int(rows[0][0])

    # -- reading --------------------------------------------------------------------

    async def context(self, session_id: str, *, last: int | None = None) -> list[Message]:
        """What the model should see, computed by one query.

        The latest live compaction along the lineage becomes a summary message, followed
        by every live message from its ``first_kept_seq`` on; tombstoned messages never
        appear. Without a compaction, every live message in order. A compaction with an
        empty summary (:meth:`clear`) adds no summary message.

        Args:
            last: only the last ``last`` messages of that list (the summary counts as its
                first message). Read backwards by index: the cost follows ``last``, not
                the length of the history.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``last`` is not a non-negative int.
        """
        messages = ctx.to_messages(await self._context_rows(session_id, last))
        return messages if last is None else messages[max(0, len(messages) - last) :]

    async def context_json(self, session_id: str, *, last: int | None = None) -> str:
        """The same context as :meth:`context`, as one JSON array of wire-shape messages,
        built from the stored texts without parsing them: for services that hand the
        context straight to a model API. ``last`` as for :meth:`context`.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``last`` is not a non-negative int.
        """
        rows = await self._context_rows(session_id, last)
        if last is not None and rows.compaction is not None and len(rows.messages) >= last:
            # The summary is older than the last ``last`` messages.
            rows = ctx.ContextRows(rows.head, None, rows.messages, rows.seqs, rows.prunes)
        return ctx.to_json(rows)

    async def _context_rows(self, session_id: str, last: int | None = None) -> ctx.ContextRows:
        check_session_id(session_id)
        if last is None:
            bound = q.context(session_id, self.namespace, self._flavour)
        elif isinstance(last, bool) or not isinstance(last, int) or not 0 <= last < 2**63:
            raise InvalidInputError(f"last must be a non-negative int or None, got {brief(last)}")
        else:
            bound = q.context_tail(session_id, self.namespace, self._flavour, last)
        rows = await self._backend.fetch(bound)
        split = ctx.split_rows(rows)
        if split.head is None:
            raise SessionNotFoundError(session_id, self.namespace)
        return split

    async def records(
        self,
        session_id: str,
        *,
        include_tombstoned: bool = False,
        include_superseded: bool = True,
        kinds: Iterable[str] | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
    ) -> list[Record]:
        """Stored records along the lineage (a fork's inherited ones too), in seq order.

        By default every record (messages, compactions, tombstones, imported entries)
        except those a tombstone soft-deleted, which stay stored for audit.

        Args:
            include_tombstoned: keep records that a tombstone soft-deleted.
            include_superseded: keep messages before the latest compaction's
                ``first_kept_seq``.
            kinds: only these kinds (``message``, ``compaction``, ``tombstone``, ``entry``,
                ``prune``).
            from_seq, to_seq: an inclusive seq range.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: an argument is not what it should be.
        """
        check_session_id(session_id)
        kind_filter = _kinds(kinds)
        for name, value in (("from_seq", from_seq), ("to_seq", to_seq)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63
            ):
                raise InvalidInputError(f"{name} must be an int in 0..2**63-1, got {brief(value)}")
        _check_bool(include_tombstoned, "include_tombstoned")
        _check_bool(include_superseded, "include_superseded")
        if kind_filter == ():
            await self.get_session(session_id)  # raises when the session is missing
            return []  # no kinds asked for: no records (and no empty IN list in SQL)
        bound = q.lineage_records(
            session_id,
            self.namespace,
            include_tombstoned=bool(include_tombstoned),
            include_superseded=bool(include_superseded),
            kinds=kind_filter,
            from_seq=from_seq,
            to_seq=to_seq,
        )
        rows = await self._backend.fetch(bound)
        if not rows:
            await self.get_session(session_id)  # raises when the session is missing
        return records_from_rows(rows)

    # -- overlays: compaction, tombstones -------------------------------------------

    async def append_compaction(
        self,
        session_id: str,
        *,
        summary: str,
        first_kept_seq: int,
        tokens_before: int = 0,
        read_files: Sequence[str] = (),
        modified_files: Sequence[str] = (),
        expected_seq: int | None = None,
    ) -> Record:
        """Append a compaction overlay: the context becomes ``summary`` plus every message
        from ``first_kept_seq`` on. Nothing is rewritten; messages appended meanwhile
        (after the caller read the history) are kept.

        Raises:
            InvalidInputError: ``first_kept_seq`` is not a message in the current context,
                or cutting there would separate a tool call from its result.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        if (
            not isinstance(first_kept_seq, int)
            or isinstance(first_kept_seq, bool)
            or not 1 <= first_kept_seq < 2**63
        ):
            raise InvalidInputError(
                f"first_kept_seq must be a positive int, got {brief(first_kept_seq)}"
            )
        _check_expected_seq(expected_seq)
        for name, files in (("read_files", read_files), ("modified_files", modified_files)):
            if isinstance(files, str | bytes) or not isinstance(files, Iterable):
                raise InvalidInputError(f"{name} must be a list of paths, got {brief(files)}")
        try:
            compaction = Compaction(
                summary=summary,
                first_kept_seq=first_kept_seq,
                tokens_before=tokens_before,
                read_files=list(read_files),
                modified_files=list(modified_files),
            )
        except ValidationError as exc:
            raise InvalidInputError(f"compaction: {_first_error(exc)}") from None
        except TypeError as exc:
            raise InvalidInputError(f"compaction: {exc}") from None
        row = NewRecord(
            kind="compaction",
            payload=to_json(compaction.to_wire(), "compaction"),
            first_kept_seq=first_kept_seq,
        )
        check_record_size(row.payload, self._max_record_bytes, "the compaction")

        async def unit(tx: Transaction) -> Record:
            head = await self._lock(tx, session_id)
            live = await self._live_messages(tx, session_id, first_kept_seq, first_kept_seq)
            if not live or live[0][0] != first_kept_seq:
                raise InvalidInputError(
                    f"first_kept_seq {first_kept_seq} is not a message in the context of "
                    f"session {session_id} (head {head})"
                )
            if await self._splits_pair(tx, session_id, first_kept_seq - 1):
                raise InvalidInputError(
                    f"first_kept_seq {first_kept_seq} would separate a tool call from its result"
                )
            (record,) = await self._append_in(tx, session_id, [row], expected_seq, [])
            return record

        return await self._transact(unit)

    # -- overlays: pruning (compaction's cheaper first phase) ------------------------

    async def append_prune(
        self,
        session_id: str,
        seqs: Sequence[int],
        *,
        marker: str = PRUNED_MARKER,
        tokens_freed: int = 0,
        expected_seq: int | None = None,
    ) -> Record:
        """Append a prune overlay: in the context, each tool result in ``seqs`` shows one
        text block holding ``marker`` instead of its content (``toolCallId`` and the other
        fields stay). Nothing is rewritten: :meth:`records` still gives the content, and
        tombstoning the prune record brings it back into the context. Not :meth:`prune`,
        which is retention: it deletes whole idle sessions.

        Args:
            seqs: seqs of tool results in the current context, not pruned already.
            marker: the text that stands for a pruned result.
            tokens_freed: the caller's estimate of what pruning saves, stored as given.
            expected_seq: as for :meth:`append`.

        Raises:
            InvalidInputError: a seq is not a live tool result in the context, or is
                pruned already; bad arguments.
            SessionNotFoundError: no such session in this namespace.
            SeqConflictError: ``expected_seq`` is not the head.
        """
        check_session_id(session_id)
        chosen = _prune_seqs(seqs)
        if not isinstance(marker, str) or not marker.strip():
            raise InvalidInputError(f"marker must be a non-empty string, got {brief(marker)}")
        if (
            isinstance(tokens_freed, bool)
            or not isinstance(tokens_freed, int)
            or not 0 <= tokens_freed < 2**63
        ):
            raise InvalidInputError(
                f"tokens_freed must be a non-negative int, got {brief(tokens_freed)}"
            )
        _check_expected_seq(expected_seq)
        prune = Prune(seqs=chosen, marker=marker, tokens_freed=tokens_freed)
        row = NewRecord(kind="prune", payload=to_json(prune.to_wire(), "prune"))
        check_record_size(row.payload, self._max_record_bytes, "the prune record")

        async def unit(tx: Transaction) -> Record:
            head = await self._lock(tx, session_id)
            results = await tx.fetch(
                q.lineage_records(
                    session_id,
                    self.namespace,
                    include_tombstoned=False,
                    include_superseded=False,
                    kinds=("message",),
                    roles=("toolResult",),
                    from_seq=chosen[0],
                    to_seq=chosen[-1],
                )
            )
            live = {int(r["seq"]) for r in results}
            missing = [seq for seq in chosen if seq not in live]
            if missing:
                raise InvalidInputError(
                    f"not tool results in the context of session {session_id} (head "
                    f"{head}): seqs {_some(missing)}"
                )
            pruned = ctx.prune_markers(
                r["payload"] for r in await self._lineage_rows(tx, session_id, kinds=("prune",))
            )
            again = [seq for seq in chosen if seq in pruned]
            if again:
                raise InvalidInputError(
                    f"already pruned in session {session_id}: seqs {_some(again)}"
                )
            (record,) = await self._append_in(tx, session_id, [row], expected_seq, [])
            return record

        return await self._transact(unit)

    async def tombstone(self, session_id: str, seq: int, reason: str | None = None) -> list[Record]:
        """Soft-delete the record ``seq`` of the session's lineage; returns the tombstones
        written (none when it was already tombstoned).

        The target stays stored (``records(include_tombstoned=True)`` shows it). An
        assistant message takes the results of its tool calls with it and a tool result
        takes its call, so the context never holds half a pair. Tombstoning a compaction
        brings back the history it superseded.

        Raises:
            RecordNotFoundError: no record ``seq`` in this lineage.
            InvalidInputError: the target is itself a tombstone.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        if not isinstance(seq, int) or isinstance(seq, bool) or not -(2**63) <= seq < 2**63:
            raise InvalidInputError(f"seq must be a 64-bit int, got {brief(seq)}")
        reason = column_text(reason, "reason")

        async def unit(tx: Transaction) -> list[Record]:
            await self._lock(tx, session_id)
            target_rows = await self._lineage_rows(
                tx, session_id, from_seq=seq, to_seq=seq, include_tombstoned=True
            )
            if not target_rows:
                raise RecordNotFoundError(session_id, seq)
            target = target_rows[0]
            if target["kind"] == "tombstone":
                raise InvalidInputError(f"record {seq} is a tombstone; it cannot be tombstoned")
            targets = [seq]
            if target["kind"] == "message":
                message = ctx.payload_message(target["payload"])
                if message.role in ("assistant", "toolResult"):
                    window = await self._pair_window(tx, session_id, seq)
                    targets = ctx.pair_members(seq, message, window)
            done = {
                r["target_seq"]
                for r in await self._lineage_rows(tx, session_id, kinds=("tombstone",))
            }
            rows = [
                NewRecord(
                    kind="tombstone",
                    payload=jsoncodec.dumps(Tombstone(target_seq=t, reason=reason).to_wire()),
                    target_seq=t,
                )
                for t in targets
                if t not in done
            ]
            for row in rows:
                check_record_size(row.payload, self._max_record_bytes, "the tombstone")
            if not rows:
                return []
            return await self._append_in(tx, session_id, rows, None, [])

        return await self._transact(unit)

    async def pop(self, session_id: str, reason: str | None = None) -> Record | None:
        """Take the context's last entry out of it and return its record, by appending:
        the last live message gets a tombstone of its own (a tool call or result does
        not take its partner with it, unlike :meth:`tombstone`); when only a compaction
        summary is left, the summary goes by a :meth:`clear` and the compaction's record
        comes back. ``None`` when the context is empty.

        Concurrent pops, in any process, never return the same record: each runs under
        the session's row lock.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        reason = column_text(reason, "reason")

        async def unit(tx: Transaction) -> Record | None:
            await self._lock(tx, session_id)
            tail = ctx.split_rows(
                await tx.fetch(q.context_tail(session_id, self.namespace, self._flavour, 1))
            )
            if tail.messages:
                seq = tail.seqs[-1]
                taken = await self._lineage_rows(tx, session_id, from_seq=seq, to_seq=seq)
                wire = Tombstone(target_seq=seq, reason=reason).to_wire()
                row = NewRecord(kind="tombstone", payload=jsoncodec.dumps(wire), target_seq=seq)
                check_record_size(row.payload, self._max_record_bytes, "the tombstone")
                await self._append_in(tx, session_id, [row], None, [])
            elif tail.compaction is not None and _has_summary(tail.compaction):
                # The live compactions; the last is the one in force.
                taken = (await self._lineage_rows(tx, session_id, kinds=("compaction",)))[-1:]
                await self._append_clear(tx, session_id)
            else:
                return None
            return records_from_rows([tuple(r)[:6] for r in taken])[0]

        return await self._transact(unit)

    async def clear(self, session_id: str) -> Record | None:
        """Empty the context by appending a compaction with no summary whose
        ``first_kept_seq`` is its own seq: everything before it leaves the context, what
        is appended after it is the new context. Nothing is rewritten: :meth:`records`
        still shows the history, and tombstoning the record brings it back. Returns the
        record, or ``None`` when the context was empty already (nothing is written).

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)

        async def unit(tx: Transaction) -> Record | None:
            await self._lock(tx, session_id)
            tail = ctx.split_rows(
                await tx.fetch(q.context_tail(session_id, self.namespace, self._flavour, 1))
            )
            if not tail.messages and (tail.compaction is None or not _has_summary(tail.compaction)):
                return None
            return await self._append_clear(tx, session_id)

        return await self._transact(unit)

    async def _append_clear(self, tx: Transaction, session_id: str) -> Record:
        head = await self._lock(tx, session_id)
        compaction = Compaction(summary="", first_kept_seq=head + 1)
        row = NewRecord(
            kind="compaction",
            payload=jsoncodec.dumps(compaction.to_wire()),
            first_kept_seq=head + 1,
        )
        (record,) = await self._append_in(tx, session_id, [row], None, [])
        return record

    # -- files (sessiondb.transfer and sessiondb.formats do the work) ---------------

    async def import_path(
        self,
        path: str | Path,
        format: str = "auto",
        strict: bool = False,
        progress: Callable[[ImportProgress], None] | None = None,
        *,
        follow_symlinks: bool = False,
    ) -> ImportReport:
        """Import session files (a file or a directory tree) at bulk speed.

        Each session is written whole or not at all; a re-import adds nothing (a
        session's id derives from the namespace and the file's own key). A bad line is
        kept as a raw entry and reported as ``path:line``; ``strict=True`` fails its file
        instead. Only regular files are read, and symbolic links under ``path`` are
        followed only with ``follow_symlinks`` (and never out of ``path``); what is
        passed over is in the report's ``skipped_paths``. See
        :func:`sessiondb.transfer.import_path`.

        Raises:
            InvalidInputError: the path does not exist or is not a regular file or a
                directory, or an unknown format.
        """
        return await transfer.import_path(
            self, path, format, strict, progress, follow_symlinks=follow_symlinks
        )

    async def export_session(
        self, session_id: str, out_dir: str | Path, format: str = "native"
    ) -> list[Path]:
        """Write one session as ``format``'s file(s) under ``out_dir`` (a name of
        :data:`sessiondb.formats.FORMATS`); returns the paths written."""
        return await transfer.export_session(self, session_id, out_dir, format)

    async def export_all(
        self, out_dir: str | Path, format: str = "native"
    ) -> dict[str, list[Path]]:
        """Export every session of the namespace; session id → paths written."""
        return await transfer.export_all(self, out_dir, format)

    # -- compaction (sessiondb.compaction does the work) ---------------------------

    async def compact(
        self,
        session_id: str,
        summarizer: Summarizer,
        settings: CompactionSettings | None = None,
        instructions: str | None = None,
        *,
        tokenizer: Tokenizer | None = None,
        on_event: EventHook | None = None,
    ) -> CompactionResult:
        """Summarise the older part of the context and append a compaction overlay.

        Reads the context, plans the cut (never between a tool call and its result),
        calls ``await summarizer(system, prompt, max_tokens)`` with no transaction open,
        then appends the overlay; messages appended meanwhile are kept. Nothing is written
        when anything fails. See :func:`sessiondb.compaction.engine.compact`.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            SummarizerError: the summarizer raised or returned nothing.
            ConflictError: another compaction or tombstone landed meanwhile.
        """
        return await compaction.compact(
            self,
            session_id,
            summarizer,
            settings,
            instructions,
            tokenizer=tokenizer,
            on_event=on_event,
        )

    async def maybe_compact(
        self,
        session_id: str,
        summarizer: Summarizer,
        settings: CompactionSettings | None = None,
        instructions: str | None = None,
        *,
        tokenizer: Tokenizer | None = None,
        on_event: EventHook | None = None,
    ) -> AutoCompactOutcome:
        """Compact when ``context_tokens > context_window - reserve_tokens``; after three
        failures in a row for a session, stop trying for it and say so (the outcome's
        ``status`` is ``breaker-open``). See :func:`sessiondb.compaction.engine.maybe_compact`.
        """
        return await compaction.maybe_compact(
            self,
            session_id,
            summarizer,
            settings,
            instructions,
            tokenizer=tokenizer,
            on_event=on_event,
            breaker=self._compaction_breaker,
        )

    async def plan_compaction(
        self,
        session_id: str,
        settings: CompactionSettings | None = None,
        *,
        tokenizer: Tokenizer | None = None,
    ) -> CompactionPlan | None:
        """What :meth:`compact` would do now (the dry run), or ``None`` if nothing."""
        return await compaction.plan(self, session_id, settings, tokenizer=tokenizer)

    async def context_tokens(self, session_id: str, *, tokenizer: Tokenizer | None = None) -> int:
        """The context's size in tokens as the compaction trigger sees it: the last
        assistant message's reported usage plus estimates for what came after, else the
        estimate. Reads only the messages after that usage.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        return await compaction.context_tokens(self, session_id, tokenizer=tokenizer)

    # -- forks ------------------------------------------------------------------------

    async def fork(
        self,
        session_id: str,
        at_seq: int | None = None,
        name: str | None = None,
        *,
        detach: bool = False,
    ) -> SessionInfo:
        """A child session holding the parent's records with ``seq <= at_seq``.

        Nothing is copied: the child inherits those records by reference and its own
        continue at ``at_seq + 1``. Compactions and tombstones at or before the fork point
        apply to the child; what either side writes later does not touch the other. The
        child has no key (:meth:`session_for_key`): it is another conversation.

        Args:
            at_seq: the fork point; default the parent's head.
            name: the child's name; default the parent's.
            detach: copy the inherited records instead, so the child stands alone (no
                parent link; the parent can then be deleted freely).

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``at_seq`` is beyond the head or inside a tool call/result pair.
        """
        check_session_id(session_id)
        if at_seq is not None and (not isinstance(at_seq, int) or isinstance(at_seq, bool)):
            raise InvalidInputError(f"at_seq must be an int or None, got {brief(at_seq)}")
        name = bounded_text(name, "name", MAX_NAME_CHARS)
        _check_bool(detach, "detach")
        child_id = new_session_id()
        now = _now()

        async def unit(tx: Transaction) -> None:
            found = await tx.fetch(q.get_session(session_id, self.namespace))
            if not found:
                raise SessionNotFoundError(session_id, self.namespace)
            m = found[0]
            head = int(m["last_seq"])
            point = head if at_seq is None else at_seq
            if not 0 <= point <= head:
                raise InvalidInputError(
                    f"at_seq must be an int in 0..{head} (the head of {session_id}), "
                    f"got {brief(at_seq)}"
                )
            if point < head and await self._splits_pair(tx, session_id, point):
                raise InvalidInputError(
                    f"at_seq {point} is between a tool call and its result; fork before "
                    "the call or after the results"
                )
            at_head = point == head
            values: dict[str, Any] = {
                "id": child_id,
                "namespace": self.namespace,
                "name": name if name is not None else m["name"],
                "created_at": now,
                # Never later than now, even from a row a file once dated ahead.
                "last_message_at": min(utc(m["last_message_at"]), now) if at_head else now,
                "model": m["model"],
                "source": m["source"],
                "cron_job_id": m["cron_job_id"],
                "system_prompt_override": m["system_prompt_override"],
                "metadata_json": m["metadata_json"],
                **_ZERO_HEAD,
                "last_seq": point,
                "parent_id": None if detach else session_id,
                "fork_seq": None if detach else point,
                # A key names one conversation: the fork is another one, without a key.
                "key": None,
            }
            if at_head:
                # O(1): the head's counters are the inherited history's. Mid-stream the
                # message count is counted; token totals start from zero.
                for key in _ZERO_HEAD:
                    values[key] = m[key]
            else:
                values["message_count"] = await self._count_messages(tx, session_id, point)
            await tx.fetch((q.insert_rows(sessions.name), values))
            if detach and point > 0:
                await tx.fetch(q.copy_lineage(session_id, self.namespace, child_id, point))

        try:
            await self._transact(unit)
        except IntegrityViolation as exc:
            raise self._integrity(exc) from exc
        return await self.get_session(child_id)

    async def _count_messages(self, tx: Transaction, session_id: str, upto: int) -> int:
        total = 0
        for lin in await tx.fetch(q.lineage_ids(session_id, self.namespace)):
            limit = min(upto, int(lin["upto"]))
            counted = await tx.fetch(q.count_messages(lin["id"], limit))
            total += int(counted[0]["n"])
        return total

    # -- lineage helpers (inside a transaction) ---------------------------------------

    async def _lineage_rows(
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
        )
        return await tx.fetch(bound)

    async def _live_messages(
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
        )
        rows = await tx.fetch(bound)
        return list(
            zip([r["seq"] for r in rows], parse_messages([r["payload"] for r in rows]), strict=True)
        )

    async def _pair_window(
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
        rows = await self._lineage_rows(
            tx,
            session_id,
            kinds=("message",),
            from_seq=start or 1,
            to_seq=end,
            include_tombstoned=True,
        )
        return list(
            zip([r["seq"] for r in rows], parse_messages([r["payload"] for r in rows]), strict=True)
        )

    async def _splits_pair(self, tx: Transaction, session_id: str, cut_after: int) -> bool:
        if cut_after < 1:
            return False
        window = await self._pair_window(tx, session_id, cut_after)
        return ctx.splits_tool_pair(window, cut_after)


def _has_summary(payload: str) -> bool:
    return ctx.shows_summary(Compaction.model_validate(jsoncodec.loads(payload)))


def _first_error(exc: ValidationError) -> str:
    """A pydantic error as one line: where, then what."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in first["loc"])
    return message if where in ("messages", "") else f"{where}: {message}"


def _check_bool(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {brief(value)}")


def _check_expected_seq(expected_seq: object) -> None:
    """Refused before SQL: the databases compared ``"1"`` or ``True`` differently."""
    if expected_seq is not None and (
        isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0
    ):
        raise InvalidInputError(
            f"expected_seq must be a non-negative int, got {brief(expected_seq)}"
        )


def _kinds(kinds: Iterable[str] | None) -> tuple[str, ...] | None:
    """``records(kinds=…)`` checked: an iterable of known kind names, not one string."""
    if kinds is None:
        return None
    if isinstance(kinds, str | bytes) or not isinstance(kinds, Iterable):
        raise InvalidInputError(
            f"kinds must be a list of kind names ({', '.join(KINDS)}), got {brief(kinds)}"
        )
    chosen = []
    for kind in kinds:
        if not isinstance(kind, str) or kind not in KINDS:
            raise InvalidInputError(
                f"unknown record kind {brief(kind)}; kinds are {', '.join(KINDS)}"
            )
        chosen.append(kind)
    # Sorted and unique: one cached statement per set of kinds.
    return tuple(sorted(set(chosen)))


def _prune_seqs(seqs: Sequence[int]) -> list[int]:
    """``append_prune``'s seqs checked: a non-empty list of distinct positive ints, sorted."""
    if isinstance(seqs, str | bytes) or not isinstance(seqs, Sequence):
        raise InvalidInputError(f"seqs must be a list of ints, got {type(seqs).__name__}")
    if not seqs:
        raise InvalidInputError("seqs must name at least one tool result")
    if len(seqs) > MAX_PRUNE_SEQS:
        raise InvalidInputError(f"at most {MAX_PRUNE_SEQS} seqs per prune, got {len(seqs)}")
    for seq in seqs:
        if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < 2**63:
            raise InvalidInputError(f"each seq must be a positive 64-bit int, got {brief(seq)}")
    if len(set(seqs)) != len(seqs):
        raise InvalidInputError("the same seq appears twice in seqs")
    return sorted(seqs)


def _some(seqs: list[int]) -> str:
    shown = ", ".join(str(s) for s in seqs[:10])
    return shown + (f" and {len(seqs) - 10} more" if len(seqs) > 10 else "")


_ZERO_HEAD: dict[str, Any] = {
    "last_seq": 0,
    "message_count": 0,
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "cost_total": 0.0,
}

__all__ = ["SessionStore"]
