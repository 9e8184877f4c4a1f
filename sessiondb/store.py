"""The front door: :class:`SessionStore` owns the engine and every transaction."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import Row, insert
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import context as ctx
from . import jsoncodec, sqlite_threads
from . import migrate as migrations
from . import statements as q
from .config import Settings
from .engine import (
    WRITE_OPTION,
    constraint_name,
    create_engine,
    translate,
    translate_driver_error,
)
from .errors import (
    ConflictError,
    HasChildrenError,
    InvalidInputError,
    RecordNotFoundError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
)
from .ids import check_session_id, new_session_id
from .models import (
    Compaction,
    Message,
    Metrics,
    NewSession,
    Record,
    SessionInfo,
    SessionPage,
    Tombstone,
    wire_message,
    wire_text,
    wire_usage,
)
from .naming import derive_name
from .pg_driver import DriverPool
from .raw import RawCompiler
from .sqlite_threads import SQLiteReaders, SQLiteWriter, sqlite_timestamp
from .tables import records, sessions

MAX_PAGE = 1000
INLINE_WRITE_CHARS = 64_000
UUID_CONSTRAINT = "uq_sessiondb_records_session_id_uuid"
PARENT_CONSTRAINT = "fk_sessiondb_sessions_parent_id_sessiondb_sessions"


def _now() -> datetime:
    return datetime.now(UTC)


def _column_text(value: Any, what: str, *, optional: bool = True) -> str | None:
    """A string for an indexed column: refuse what the databases cannot store."""
    if value is None:
        if optional:
            return None
        raise InvalidInputError(f"{what} is required")
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInputError(f"{what} must not contain NUL characters: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} must not contain lone surrogates: {value!r}") from exc
    return value


def _json(value: Any, what: str) -> str:
    """JSON text for a payload; a value JSON cannot hold (a set, a tuple key) is bad input."""
    try:
        return jsoncodec.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} cannot be stored as JSON: {exc}") from exc


def _storable(value: Any) -> str | None:
    """The value if a text column can hold it, else ``None`` (the payload keeps it)."""
    try:
        return _column_text(value, "")
    except InvalidInputError:
        return None


@dataclass
class _Row:
    """One record about to be inserted. ``wire`` is a message's checked JSON object."""

    kind: str
    payload: str
    role: str | None = None
    uuid: str | None = None
    parent_uuid: str | None = None
    tool_call_id: str | None = None
    target_seq: int | None = None
    first_kept_seq: int | None = None
    wire: dict[str, Any] | None = None

    def values(self, session_id: str, seq: int, at: datetime | str) -> tuple[Any, ...]:
        """The row in the records table's column order (:data:`RECORD_COLUMN_NAMES`)."""
        return (
            session_id,
            seq,
            self.kind,
            self.role,
            at,
            self.uuid,
            self.parent_uuid,
            self.tool_call_id,
            self.target_seq,
            self.first_kept_seq,
            len(self.payload),
            self.payload,
        )

    def params(self, session_id: str, seq: int, at: datetime) -> dict[str, Any]:
        return dict(zip(RECORD_COLUMN_NAMES, self.values(session_id, seq, at), strict=True))


RECORD_COLUMN_NAMES = tuple(c.name for c in records.c)
SESSION_COLUMN_NAMES = tuple(c.name for c in sessions.c)


def _message_row(item: Message | Mapping[str, Any], index: int) -> _Row:
    # Stored as given (key order, numbers, unknown fields) but for a string content,
    # which becomes one text block (S7.12).
    wire = wire_message(item, f"message {index}")
    payload = _json(wire, f"message {index}")
    if jsoncodec.is_exact_path(payload) and jsoncodec.has_surrogate_key(wire):
        # pydantic cannot hold such a key, so the message could never be read back.
        raise InvalidInputError(f"message {index}: an object key holds a lone surrogate")
    return _Row(
        kind="message",
        payload=payload,
        role=wire["role"],
        uuid=_column_text(wire.get("uuid"), f"message {index}: uuid"),
        parent_uuid=_storable(wire.get("parentUuid")),
        tool_call_id=_storable(wire.get("toolCallId")),
        wire=wire,
    )


def _record(row: Row[Any]) -> Record:
    return _record_from_values(
        row.session_id, row.seq, row.kind, row.created_at, row.uuid, row.payload
    )


def _record_from_values(
    session_id: str,
    seq: int,
    kind: str,
    created_at: datetime | str,
    uuid: str | None,
    payload: str,
) -> Record:
    if isinstance(created_at, str):  # straight from sqlite3
        created_at = datetime.fromisoformat(created_at).replace(tzinfo=UTC)
    data = jsoncodec.loads(payload)
    fields: dict[str, Any] = {}
    if kind == "message":
        fields["message"] = Message.model_validate(data)
    elif kind == "compaction":
        fields["compaction"] = Compaction.model_validate(data)
    elif kind == "tombstone":
        fields["tombstone"] = Tombstone.model_validate(data)
    else:
        fields["entry"] = data
    return Record(
        session_id=session_id,
        seq=seq,
        kind=kind,
        created_at=created_at,
        uuid=uuid,
        **fields,
    )


def _utc(value: datetime | str) -> datetime:
    """A timestamp column's value as aware UTC, from any driver (sqlite3 gives text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _session_info(m: Any) -> SessionInfo:
    """A sessions row (SQLAlchemy mapping, asyncpg record or sqlite3 row) as a model."""
    return SessionInfo(
        id=m["id"],
        namespace=m["namespace"],
        name=m["name"],
        created_at=_utc(m["created_at"]),
        last_message_at=_utc(m["last_message_at"]) if m["message_count"] else None,
        model=m["model"],
        message_count=m["message_count"],
        last_seq=m["last_seq"],
        source=m["source"],
        cron_job_id=m["cron_job_id"],
        system_prompt_override=m["system_prompt_override"],
        metrics=Metrics(
            input_tokens=m["input_tokens"],
            output_tokens=m["output_tokens"],
            cache_read_tokens=m["cache_read_tokens"],
            cache_write_tokens=m["cache_write_tokens"],
            cost_total=m["cost_total"],
        ),
        metadata=jsoncodec.loads(m["metadata_json"]) if m["metadata_json"] else None,
        parent_id=m["parent_id"],
        fork_seq=m["fork_seq"],
    )


def _encode_cursor(at: datetime, session_id: str) -> str:
    raw = jsoncodec.dumps([at.isoformat(), session_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, session_id = jsoncodec.loads(raw)
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:  # the stored timestamps are UTC; a naive one cannot compare
            raise ValueError("cursor timestamp has no UTC offset")
        return when, check_session_id(session_id)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidInputError(f"invalid cursor {cursor!r}: pass back a next_cursor") from exc


@dataclass(frozen=True)
class _HeadDelta:
    """What appending some rows adds to the session's head."""

    messages: int
    tokens: tuple[int, int, int, int]
    cost: float
    name: str | None

    @classmethod
    def of(cls, rows: Sequence[_Row], *, name: bool = True) -> _HeadDelta:
        """The delta of ``rows``; ``name=False`` skips deriving a name (the session has one)."""
        messages = [r.wire for r in rows if r.wire is not None]
        tokens = [0, 0, 0, 0]
        cost = 0.0
        for m in messages:
            if "usage" in m:
                t, c = wire_usage(m)
                tokens = [a + b for a, b in zip(tokens, t, strict=True)]
                cost += c
        first_user = next((m for m in messages if m["role"] == "user"), None) if name else None
        derived = derive_name(wire_text(first_user)) if first_user is not None else None
        return cls(len(messages), (tokens[0], tokens[1], tokens[2], tokens[3]), cost, derived)

    def bind(
        self, session_id: str, namespace: str, count: int, at: Any, expected_seq: int | None
    ) -> dict[str, Any]:
        """Parameters of the head bump (:func:`statements.bump_head`, SQLite's ``BUMP``)."""
        return {
            "sid": session_id,
            "ns": namespace,
            "count": count,
            "messages": self.messages,
            "at": at,
            "name": self.name,
            "d_input": self.tokens[0],
            "d_output": self.tokens[1],
            "d_cache_read": self.tokens[2],
            "d_cache_write": self.tokens[3],
            "d_cost": self.cost,
            "expected": expected_seq,
        }


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

    def __init__(self, settings: Settings, engine: AsyncEngine | None = None) -> None:
        self.settings = settings
        self.namespace = settings.namespace
        self.engine = engine or create_engine(settings)
        self._is_sqlite = settings.is_sqlite
        # One shared connection for :memory:; transactions must take turns on it.
        self._serial: asyncio.Lock | None = asyncio.Lock() if settings.is_memory else None
        # Hot paths on the bare driver (see pg_driver and sqlite_threads); :memory: has
        # only the engine's one connection and keeps everything on it.
        self._raw = RawCompiler(self.engine.dialect)
        self._named = _NamedSessions()
        self._pg_pool = DriverPool(self.engine)
        self._sqlite_writer: SQLiteWriter | None = None
        self._sqlite_readers: SQLiteReaders | None = None
        if self._is_sqlite and not settings.is_memory:
            self._sqlite_writer = SQLiteWriter(str(settings.url.database))
            self._sqlite_readers = SQLiteReaders(str(settings.url.database))

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, url: str | None = None, namespace: str | None = None, **engine_kwargs: Any
    ) -> AsyncIterator[SessionStore]:
        """Open a store; closes the engine's connections on exit.

        Args:
            url: a SQLAlchemy URL (``postgresql://…``, ``sqlite:///x.db``), a file path
                (SQLite) or ``:memory:``; default ``SESSIONDB_URL``, else
                ``./sessiondb.sqlite3``.
            namespace: the tenant scope of every query; default ``SESSIONDB_NAMESPACE``,
                else ``"default"``.
            engine_kwargs: passed to SQLAlchemy's ``create_async_engine``.

        Raises:
            ConfigurationError: the URL or namespace is unusable.
            MissingDependencyError: a Postgres URL without ``sessiondb[postgres]``.
        """
        settings = Settings.from_env(url, namespace)
        store = cls(settings, create_engine(settings, **engine_kwargs))
        try:
            yield store
        finally:
            await store.close()

    async def close(self) -> None:
        """Close every pooled connection."""
        if self._sqlite_writer is not None:
            await self._sqlite_writer.close()
        if self._sqlite_readers is not None:
            await self._sqlite_readers.close()
        await self._pg_pool.close()
        await self.engine.dispose()

    # -- units of work --------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _unit(self, write: bool) -> AsyncIterator[AsyncConnection]:
        async with contextlib.AsyncExitStack() as stack:
            if self._serial is not None:
                await stack.enter_async_context(self._serial)
            try:
                conn = await stack.enter_async_context(self.engine.connect())
                if write and self._is_sqlite:
                    await conn.execution_options(**{WRITE_OPTION: True})
                async with conn.begin():
                    yield conn
            except IntegrityError as exc:
                raise self._integrity(exc) from exc
            except DBAPIError as exc:
                raise translate(exc) from exc

    def _integrity(self, exc: IntegrityError) -> Exception:
        name = constraint_name(exc)
        if UUID_CONSTRAINT in name or "records.session_id, sessiondb_records.uuid" in name:
            return _DuplicateUuid()
        if PARENT_CONSTRAINT in name or "FOREIGN KEY" in name:
            return ConflictError(
                "the session's lineage changed meanwhile (a parent was deleted or a fork "
                f"was added); nothing was written ({exc.orig})"
            )
        return translate(exc)

    def _read(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        return self._unit(write=False)

    def _write(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        return self._unit(write=True)

    # -- schema ---------------------------------------------------------------------

    async def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema to ``revision`` (default: the newest), as ``sessiondb migrate``."""
        async with self._write() as conn:
            await migrations.run(conn, "upgrade", revision)

    # -- sessions -------------------------------------------------------------------

    async def create_session(
        self,
        name: str | None = None,
        model: str | None = None,
        source: Literal["interactive", "cron"] = "interactive",
        cron_job_id: str | None = None,
        system_prompt_override: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Create an empty session. Without a name, the first user message names it.

        Raises:
            InvalidInputError: a bad source, or a value a text column cannot hold.
        """
        values = self._session_values(
            name, model, source, cron_job_id, system_prompt_override, metadata, _now()
        )
        async with self._write() as conn:
            await conn.execute(insert(sessions).values(values))
        return await self.get_session(values["id"])

    def _session_values(
        self,
        name: str | None,
        model: str | None,
        source: str,
        cron_job_id: str | None,
        system_prompt_override: str | None,
        metadata: Mapping[str, Any] | None,
        now: datetime,
    ) -> dict[str, Any]:
        if source not in ("interactive", "cron"):
            raise InvalidInputError(f"source must be 'interactive' or 'cron', got {source!r}")
        if source == "interactive" and cron_job_id is not None:
            raise InvalidInputError("cron_job_id is only for source='cron'")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
        return {
            "id": new_session_id(),
            "namespace": self.namespace,
            "name": _column_text(name, "name"),
            "created_at": now,
            "last_message_at": now,
            "model": _column_text(model, "model"),
            "source": source,
            "cron_job_id": _column_text(cron_job_id, "cron_job_id"),
            "system_prompt_override": _column_text(
                system_prompt_override, "system_prompt_override"
            ),
            "metadata_json": _json(dict(metadata), "metadata") if metadata is not None else None,
            **_ZERO_HEAD,
            "parent_id": None,
            "fork_seq": None,
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
        validated completely before any of it is written.

        Raises:
            InvalidInputError: a session or message is malformed (its batch is not written).
        """
        ids: list[str] = []
        batch: list[tuple[dict[str, Any], list[_Row]]] = []
        size = 0
        for index, item in enumerate(items):
            try:
                new = item if isinstance(item, NewSession) else NewSession.model_validate(item)
            except ValidationError as exc:
                raise InvalidInputError(f"session {index}: {exc}") from exc
            rows = [_message_row(m, i) for i, m in enumerate(new.messages)]
            uuids = [r.uuid for r in rows if r.uuid is not None]
            if len(set(uuids)) != len(uuids):
                raise InvalidInputError(f"session {index}: the same uuid appears twice")
            values = self._session_values(
                new.name,
                new.model,
                new.source,
                new.cron_job_id,
                new.system_prompt_override,
                new.metadata,
                _now(),
            )
            delta = _HeadDelta.of(rows)
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
            batch.append((values, rows))
            ids.append(values["id"])
            size += len(rows) + 1
            if size >= batch_records:
                await self._write_sessions(batch)
                batch, size = [], 0
        if batch:
            await self._write_sessions(batch)
        return ids

    async def _write_sessions(self, batch: list[tuple[dict[str, Any], list[_Row]]]) -> None:
        at = _now()
        if self._sqlite_writer is not None:
            await self._write_sessions_sqlite(self._sqlite_writer, batch, at)
            return
        if self._is_sqlite:  # :memory: has only the engine's one connection
            async with self._write() as conn:
                await conn.execute(insert(sessions), [values for values, _ in batch])
                record_params = [
                    row.params(values["id"], seq, at)
                    for values, rows in batch
                    for seq, row in enumerate(rows, start=1)
                ]
                if record_params:
                    await conn.execute(insert(records), record_params)
            return
        session_rows = [tuple(v[c] for c in SESSION_COLUMN_NAMES) for v, _ in batch]
        record_rows = [
            row.values(values["id"], seq, at)
            for values, rows in batch
            for seq, row in enumerate(rows, start=1)
        ]
        async with self._write() as conn:
            # COPY through the pooled asyncpg connection, inside this transaction.
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            for table, columns, rows_ in (
                (sessions, SESSION_COLUMN_NAMES, session_rows),
                (records, RECORD_COLUMN_NAMES, record_rows),
            ):
                if rows_:
                    await driver.copy_records_to_table(
                        table.name, records=rows_, columns=list(columns)
                    )

    async def _write_sessions_sqlite(
        self,
        writer: SQLiteWriter,
        batch: list[tuple[dict[str, Any], list[_Row]]],
        at: datetime,
    ) -> None:
        stamp = sqlite_timestamp(at)
        session_rows = [
            tuple(
                sqlite_timestamp(v) if isinstance(v, datetime) else v
                for v in (values[c] for c in SESSION_COLUMN_NAMES)
            )
            for values, _ in batch
        ]
        record_rows = [
            row.values(values["id"], seq, stamp)
            for values, rows in batch
            for seq, row in enumerate(rows, start=1)
        ]

        def unit(conn: sqlite3.Connection) -> None:
            conn.executemany(sqlite_threads.INSERT_SESSION, session_rows)
            conn.executemany(sqlite_threads.INSERT, record_rows)

        try:
            await writer.run(unit)
        except sqlite3.Error as exc:
            raise translate_driver_error(exc) from exc

    async def get_session(self, session_id: str) -> SessionInfo:
        """The session's metadata and head.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a ULID.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        rows = await self._fetch_hot(q.get_session(session_id, self.namespace))
        if not rows:
            raise SessionNotFoundError(session_id, self.namespace)
        return _session_info(rows[0])

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
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise InvalidInputError(f"limit must be an integer in 1..{MAX_PAGE}, got {limit!r}")
        if source is not None and source not in ("interactive", "cron"):
            raise InvalidInputError(f"source must be 'interactive' or 'cron', got {source!r}")
        if parent_id is not None:
            check_session_id(parent_id)
        after = _decode_cursor(cursor) if cursor else None
        bound = q.list_sessions(
            self.namespace, limit=limit + 1, after=after, source=source, parent_id=parent_id
        )
        rows = await self._fetch_hot(bound)
        items = [_session_info(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = _encode_cursor(_utc(last["last_message_at"]), last["id"])
        return SessionPage(items=items, next_cursor=next_cursor)

    async def rename(self, session_id: str, name: str) -> SessionInfo:
        """Set the session's name.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        value = _column_text(name, "name", optional=False)
        async with self._write() as conn:
            result = await conn.execute(
                sessions.update()
                .where(sessions.c.id == session_id, sessions.c.namespace == self.namespace)
                .values(name=value)
                .returning(sessions.c.id)
            )
            if result.first() is None:
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
        async with self._write() as conn:
            rows = (await conn.execute(*q.subtree_ids(session_id, self.namespace))).all()
            if not rows:
                raise SessionNotFoundError(session_id, self.namespace)
            ids = [r.id for r in rows]
            if len(ids) > 1 and not cascade:
                raise HasChildrenError(session_id, [r.id for r in rows if r.depth == 1])
            delete_records, delete_sessions = q.delete_sessions(ids)
            await conn.execute(delete_records)
            await conn.execute(delete_sessions)
        return ids

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
        if isinstance(messages, Message | Mapping):
            messages = [messages]
        elif not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise InvalidInputError(
                f"messages must be a list of messages, got {type(messages).__name__}"
            )
        rows = [_message_row(m, i) for i, m in enumerate(messages)]
        return await self._append(session_id, rows, expected_seq=expected_seq)

    async def _append(
        self, session_id: str, rows: list[_Row], *, expected_seq: int | None = None
    ) -> list[Record]:
        if expected_seq is not None and (not isinstance(expected_seq, int) or expected_seq < 0):
            raise InvalidInputError(
                f"expected_seq must be a non-negative int, got {expected_seq!r}"
            )
        uuids = [r.uuid for r in rows if r.uuid is not None]
        if len(set(uuids)) != len(uuids):
            raise InvalidInputError("the same uuid appears twice in one append")
        if not rows:
            return []
        for attempt in range(3):
            try:
                # With uuids to look up along the lineage, the general path below.
                if self._sqlite_writer is not None and not uuids:
                    return await self._append_sqlite(
                        self._sqlite_writer, session_id, rows, expected_seq
                    )
                if self._is_sqlite:
                    async with self._write() as conn:
                        return await self._append_in(conn, session_id, rows, expected_seq, uuids)
                return await self._append_pg(session_id, rows, expected_seq, uuids)
            except _DuplicateUuid:
                if attempt == 2:
                    raise ConflictError(
                        f"session {session_id}: uuids kept colliding with concurrent writers"
                    ) from None
        raise AssertionError("unreachable")

    async def _append_pg(
        self, session_id: str, rows: list[_Row], expected_seq: int | None, uuids: list[str]
    ) -> list[Record]:
        """The append as one statement: in autocommit on the driver pool, or, with uuids to
        look up first, inside a transaction with the lookup."""
        stored: dict[str, Record] = {}
        new_rows = rows
        if not uuids:
            try:
                pool = await self._pg_pool.get()
                async with pool.acquire() as driver:
                    inserted, at = await self._pg_insert(driver, session_id, rows, expected_seq)
            except (_DuplicateUuid, SessionDBError):
                raise
            except Exception as exc:  # opening or reaching a pooled connection
                raise translate_driver_error(exc) from exc
        else:
            async with self._write() as conn:
                result = await conn.execute(*q.existing_uuids(session_id, self.namespace, uuids))
                stored = {r.uuid: _record(r) for r in result}
                new_rows = [r for r in rows if r.uuid is None or r.uuid not in stored]
                if not new_rows:
                    return [stored[r.uuid] for r in rows if r.uuid is not None]
                raw = await conn.get_raw_connection()
                inserted, at = await self._pg_insert(
                    raw.driver_connection, session_id, new_rows, expected_seq
                )
        if not inserted:  # the head did not match: no session, or not the expected seq
            async with self._read() as check:
                await self._raise_missing_or_conflict(check, session_id, expected_seq)
        first = min(r[0] for r in inserted)
        return self._merge_stored(session_id, rows, new_rows, stored, first, at)

    async def _pg_insert(
        self, driver: Any, session_id: str, rows: list[_Row], expected_seq: int | None
    ) -> tuple[list[Any], datetime]:
        """Run the one-statement append on an asyncpg connection; the inserted seqs."""
        delta = _HeadDelta.of(rows, name=session_id not in self._named)
        at = _now()
        columns: list[list[Any]] = [
            [r.kind for r in rows],
            [r.role for r in rows],
            [r.uuid for r in rows],
            [r.parent_uuid for r in rows],
            [r.tool_call_id for r in rows],
            [r.target_seq for r in rows],
            [r.first_kept_seq for r in rows],
            [len(r.payload) for r in rows],
            [r.payload for r in rows],
        ]
        one = len(rows) == 1
        try:
            inserted = await driver.fetch(
                q.PG_APPEND_ONE if one else q.PG_APPEND_MANY,
                session_id,
                self.namespace,
                len(rows),
                delta.messages,
                at,
                delta.name,
                *delta.tokens,
                delta.cost,
                expected_seq,
                *([c[0] for c in columns] if one else columns),
            )
        except Exception as exc:  # asyncpg's own errors: this bypasses SQLAlchemy
            if getattr(exc, "constraint_name", None) == UUID_CONSTRAINT:
                raise _DuplicateUuid() from exc
            raise translate_driver_error(exc) from exc
        if inserted and delta.name is not None:
            self._named.add(session_id)
        return list(inserted), at

    async def _append_sqlite(
        self, writer: SQLiteWriter, session_id: str, rows: list[_Row], expected_seq: int | None
    ) -> list[Record]:
        """The append (of rows without uuids) as one transaction on the writer thread."""
        at = _now()
        stamp = sqlite_timestamp(at)
        delta = _HeadDelta.of(rows, name=session_id not in self._named)
        params = delta.bind(session_id, self.namespace, len(rows), stamp, expected_seq)
        bump = sqlite_threads.BUMP if expected_seq is None else sqlite_threads.BUMP_EXPECTED

        def unit(conn: sqlite3.Connection) -> int | None:
            head = conn.execute(bump, params).fetchone()
            if head is None:
                return None
            first = int(head[0]) - len(rows) + 1
            conn.executemany(
                sqlite_threads.INSERT,
                [r.values(session_id, first + i, stamp) for i, r in enumerate(rows)],
            )
            return first

        try:
            # A big payload (a long tool result) is written on the thread: copying it
            # into the database would hold the event loop for milliseconds.
            short = sum(len(r.payload) for r in rows) <= INLINE_WRITE_CHARS
            first = await writer.run(unit, short=short)
        except sqlite3.Error as exc:
            raise translate_driver_error(exc) from exc
        if first is None:
            async with self._read() as check:
                await self._raise_missing_or_conflict(check, session_id, expected_seq)
            raise AssertionError("unreachable")
        if delta.name is not None:
            self._named.add(session_id)
        return self._merge_stored(session_id, rows, rows, {}, first, at)

    def _merge_stored(
        self,
        session_id: str,
        rows: list[_Row],
        new_rows: list[_Row],
        stored: dict[str, Record],
        first: int,
        at: datetime,
    ) -> list[Record]:
        """The records for ``rows``, in order: the stored ones for known uuids, the new
        ones numbered from ``first``."""
        fresh = iter(
            Record(
                session_id=session_id,
                seq=first + i,
                kind=r.kind,
                created_at=at,
                uuid=r.uuid,
                **_typed(r),
            )
            for i, r in enumerate(new_rows)
        )
        return [
            stored[r.uuid] if r.uuid is not None and r.uuid in stored else next(fresh) for r in rows
        ]

    async def _append_in(
        self,
        conn: AsyncConnection,
        session_id: str,
        rows: list[_Row],
        expected_seq: int | None,
        uuids: list[str],
    ) -> list[Record]:
        stored: dict[str, Record] = {}
        if uuids:
            result = await conn.execute(*q.existing_uuids(session_id, self.namespace, uuids))
            stored = {r.uuid: _record(r) for r in result}
        new_rows = [r for r in rows if r.uuid is None or r.uuid not in stored]
        if not new_rows:
            return [stored[r.uuid] for r in rows if r.uuid is not None]
        at = _now()
        head = await self._bump(conn, session_id, new_rows, at, expected_seq)
        first = head - len(new_rows) + 1
        params = [r.params(session_id, first + i, at) for i, r in enumerate(new_rows)]
        await conn.execute(insert(records), params)
        return self._merge_stored(session_id, rows, new_rows, stored, first, at)

    async def _bump(
        self,
        conn: AsyncConnection,
        session_id: str,
        rows: list[_Row],
        at: datetime,
        expected_seq: int | None,
    ) -> int:
        delta = _HeadDelta.of(rows)
        params = delta.bind(session_id, self.namespace, len(rows), at, expected_seq)
        head = (await conn.execute(q.bump_head(expected_seq), params)).scalar()
        if head is None:
            await self._raise_missing_or_conflict(conn, session_id, expected_seq)
        assert head is not None
        return int(head)

    async def _raise_missing_or_conflict(
        self, conn: AsyncConnection, session_id: str, expected_seq: int | None
    ) -> None:
        row = (await conn.execute(*q.get_session(session_id, self.namespace))).first()
        if row is None:
            raise SessionNotFoundError(session_id, self.namespace)
        assert expected_seq is not None
        raise SeqConflictError(session_id, expected_seq, row.last_seq)

    async def _lock(self, conn: AsyncConnection, session_id: str) -> int:
        head = (await conn.execute(*q.lock_head(session_id, self.namespace))).scalar()
        if head is None:
            raise SessionNotFoundError(session_id, self.namespace)
        return int(head)

    # -- reading --------------------------------------------------------------------

    async def context(self, session_id: str) -> list[Message]:
        """What the model should see, computed by one query.

        The latest live compaction along the lineage becomes a summary message, followed
        by every live message from its ``first_kept_seq`` on; tombstoned messages never
        appear. Without a compaction, every live message in order.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        return ctx.to_messages(await self._context_rows(session_id))

    async def context_json(self, session_id: str) -> str:
        """The same context as :meth:`context`, as one JSON array of wire-shape messages,
        built from the stored texts without parsing them: for services that hand the
        context straight to a model API.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        return ctx.to_json(await self._context_rows(session_id))

    async def _context_rows(self, session_id: str) -> ctx.ContextRows:
        check_session_id(session_id)
        bound = q.context(session_id, self.namespace, lateral=not self._is_sqlite)
        rows = await self._fetch_hot(bound)
        split = ctx.split_rows((r["part"], r["seq"], r["payload"]) for r in rows)
        if split.head is None:
            raise SessionNotFoundError(session_id, self.namespace)
        return split

    async def _fetch_hot(self, bound: q.Bound) -> list[Any]:
        """All rows of one read-only statement, on the bare driver where there is one.

        Rows are read by column name (asyncpg records, sqlite3 rows, SQLAlchemy mappings).
        """
        stmt, params = bound
        try:
            if self._sqlite_readers is not None:
                raw = self._raw(stmt)
                # What UTCDateTime would bind: the text SQLite stores and sorts by.
                args = [
                    sqlite_timestamp(v.astimezone(UTC)) if isinstance(v, datetime) else v
                    for v in raw.args(params)
                ]
                return await self._sqlite_readers.fetch(raw.sql, args)
            if not self._is_sqlite:
                raw = self._raw(stmt)
                pool = await self._pg_pool.get()
                async with pool.acquire() as driver:
                    return list(await driver.fetch(raw.sql, *raw.args(params)))
        except Exception as exc:
            raise translate_driver_error(exc) from exc
        async with self._read() as conn:
            return [row._mapping for row in await conn.execute(stmt, params)]

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
            kinds: only these kinds (``message``, ``compaction``, ``tombstone``, ``entry``).
            from_seq, to_seq: an inclusive seq range.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        kind_filter = tuple(kinds) if kinds is not None else None
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    *q.lineage_records(
                        session_id,
                        self.namespace,
                        include_tombstoned=include_tombstoned,
                        include_superseded=include_superseded,
                        kinds=kind_filter,
                        from_seq=from_seq,
                        to_seq=to_seq,
                    )
                )
            ).all()
            if not rows:
                await self._check_exists(conn, session_id)
        return [_record(r) for r in rows]

    async def _check_exists(self, conn: AsyncConnection, session_id: str) -> None:
        if (await conn.execute(*q.get_session(session_id, self.namespace))).first() is None:
            raise SessionNotFoundError(session_id, self.namespace)

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
            or first_kept_seq < 1
        ):
            raise InvalidInputError(
                f"first_kept_seq must be a positive int, got {first_kept_seq!r}"
            )
        try:
            compaction = Compaction(
                summary=summary,
                first_kept_seq=first_kept_seq,
                tokens_before=tokens_before,
                read_files=list(read_files),
                modified_files=list(modified_files),
            )
        except ValidationError as exc:
            raise InvalidInputError(f"compaction: {exc}") from exc
        row = _Row(
            kind="compaction",
            payload=jsoncodec.dumps(compaction.to_wire()),
            first_kept_seq=first_kept_seq,
        )
        async with self._write() as conn:
            head = await self._lock(conn, session_id)
            live = await self._live_messages(conn, session_id, first_kept_seq, first_kept_seq)
            if not live or live[0][0] != first_kept_seq:
                raise InvalidInputError(
                    f"first_kept_seq {first_kept_seq} is not a message in the context of "
                    f"session {session_id} (head {head})"
                )
            if await self._splits_pair(conn, session_id, first_kept_seq - 1):
                raise InvalidInputError(
                    f"first_kept_seq {first_kept_seq} would separate a tool call from its result"
                )
            (record,) = await self._append_in(conn, session_id, [row], expected_seq, [])
        return record

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
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInputError(f"seq must be an int, got {seq!r}")
        reason = _column_text(reason, "reason")
        async with self._write() as conn:
            await self._lock(conn, session_id)
            target_rows = await self._lineage_rows(
                conn, session_id, from_seq=seq, to_seq=seq, include_tombstoned=True
            )
            if not target_rows:
                raise RecordNotFoundError(session_id, seq)
            target = target_rows[0]
            if target.kind == "tombstone":
                raise InvalidInputError(f"record {seq} is a tombstone; it cannot be tombstoned")
            targets = [seq]
            if target.kind == "message":
                message = ctx.payload_message(target.payload)
                if message.role in ("assistant", "toolResult"):
                    window = await self._pair_window(conn, session_id, seq)
                    targets = ctx.pair_members(seq, message, window)
            done = {
                r.target_seq
                for r in await self._lineage_rows(conn, session_id, kinds=("tombstone",))
            }
            rows = [
                _Row(
                    kind="tombstone",
                    payload=jsoncodec.dumps(Tombstone(target_seq=t, reason=reason).to_wire()),
                    target_seq=t,
                )
                for t in targets
                if t not in done
            ]
            if not rows:
                return []
            return await self._append_in(conn, session_id, rows, None, [])

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
        apply to the child; what either side writes later does not touch the other.

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
            raise InvalidInputError(f"at_seq must be an int or None, got {at_seq!r}")
        name = _column_text(name, "name")
        child_id = new_session_id()
        now = _now()
        async with self._write() as conn:
            row = (await conn.execute(*q.get_session(session_id, self.namespace))).first()
            if row is None:
                raise SessionNotFoundError(session_id, self.namespace)
            head = int(row.last_seq)
            point = head if at_seq is None else at_seq
            if not 0 <= point <= head:
                raise InvalidInputError(
                    f"at_seq must be an int in 0..{head} (the head of {session_id}), got {at_seq!r}"
                )
            if point < head and await self._splits_pair(conn, session_id, point):
                raise InvalidInputError(
                    f"at_seq {point} is between a tool call and its result; fork before the "
                    "call or after the results"
                )
            at_head = point == head
            m = row._mapping
            values: dict[str, Any] = {
                "id": child_id,
                "namespace": self.namespace,
                "name": name if name is not None else m["name"],
                "created_at": now,
                "last_message_at": m["last_message_at"] if at_head else now,
                "model": m["model"],
                "source": m["source"],
                "cron_job_id": m["cron_job_id"],
                "system_prompt_override": m["system_prompt_override"],
                "metadata_json": m["metadata_json"],
                **_ZERO_HEAD,
                "last_seq": point,
                "parent_id": None if detach else session_id,
                "fork_seq": None if detach else point,
            }
            if at_head:
                # O(1): the head's counters are the inherited history's. Mid-stream the
                # message count is counted; token totals start from zero.
                for key in _ZERO_HEAD:
                    values[key] = m[key]
            else:
                values["message_count"] = await self._count_messages(conn, session_id, point)
            await conn.execute(insert(sessions).values(values))
            if detach and point > 0:
                await conn.execute(*q.copy_lineage(session_id, self.namespace, child_id, point))
        return await self.get_session(child_id)

    async def _count_messages(self, conn: AsyncConnection, session_id: str, upto: int) -> int:
        total = 0
        for lin in (await conn.execute(*q.lineage_ids(session_id, self.namespace))).all():
            limit = min(upto, lin.upto)
            total += int((await conn.execute(q.count_messages(lin.id, limit))).scalar() or 0)
        return total

    # -- lineage helpers (inside a unit of work) --------------------------------------

    async def _lineage_rows(
        self,
        conn: AsyncConnection,
        session_id: str,
        *,
        include_tombstoned: bool = False,
        kinds: tuple[str, ...] | None = None,
        roles: tuple[str, ...] | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
        descending: bool = False,
        limit: int | None = None,
    ) -> list[Row[Any]]:
        bound = q.lineage_records(
            session_id,
            self.namespace,
            include_tombstoned=include_tombstoned,
            include_superseded=True,
            kinds=kinds,
            roles=roles,
            from_seq=from_seq,
            to_seq=to_seq,
            descending=descending,
            limit=limit,
            extra_columns=("target_seq",),
        )
        return list((await conn.execute(*bound)).all())

    async def _live_messages(
        self, conn: AsyncConnection, session_id: str, from_seq: int, to_seq: int
    ) -> list[tuple[int, Message]]:
        """Messages in the current context with seqs in the range."""
        rows = (
            await conn.execute(
                *q.lineage_records(
                    session_id,
                    self.namespace,
                    include_tombstoned=False,
                    include_superseded=False,
                    kinds=("message",),
                    from_seq=from_seq,
                    to_seq=to_seq,
                )
            )
        ).all()
        return [(r.seq, ctx.payload_message(r.payload)) for r in rows]

    async def _pair_window(
        self, conn: AsyncConnection, session_id: str, seq: int
    ) -> list[tuple[int, Message]]:
        """The messages around ``seq`` that a tool call and its results can span: from the
        last assistant message before it to the first message after it that is not a
        tool result."""
        start = await conn.scalar(
            *q.nearest_message(session_id, self.namespace, roles=("assistant",), at_or_before=seq)
        )
        after = await conn.scalar(
            *q.nearest_message(session_id, self.namespace, roles=("user", "assistant"), after=seq)
        )
        end = after - 1 if after is not None else None
        rows = await self._lineage_rows(
            conn,
            session_id,
            kinds=("message",),
            from_seq=start or 1,
            to_seq=end,
            include_tombstoned=True,
        )
        return [(r.seq, ctx.payload_message(r.payload)) for r in rows]

    async def _splits_pair(self, conn: AsyncConnection, session_id: str, cut_after: int) -> bool:
        if cut_after < 1:
            return False
        window = await self._pair_window(conn, session_id, cut_after)
        return ctx.splits_tool_pair(window, cut_after)


def _typed(row: _Row) -> dict[str, Any]:
    if row.kind == "message":
        assert row.wire is not None
        return {"message": Message.model_validate(row.wire)}
    data = jsoncodec.loads(row.payload)
    if row.kind == "compaction":
        return {"compaction": Compaction.model_validate(data)}
    if row.kind == "tombstone":
        return {"tombstone": Tombstone.model_validate(data)}
    return {"entry": data}


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
