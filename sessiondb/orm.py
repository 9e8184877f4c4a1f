"""sessiondb's tables as SQLAlchemy ORM classes, for a service's own queries: a user's
sessions beside the service's tables, an admin page, a report.

``SessionRow``, ``RecordRow`` and ``TurnRow`` map the very ``Table`` objects of
:mod:`sessiondb.tables` (on its ``MetaData``; nothing is declared twice), so a service's
Alembic ``env.py`` with :func:`sessiondb.migrate.include_object` neither creates nor drops
them. They work with a plain ``Session`` and with ``AsyncSession`` (lazy loads there go
through ``await row.awaitable_attrs.records``, or load eagerly with ``selectinload``).

They are for reading. sessiondb keeps invariants the ORM cannot see (a session's head and
counters move with every append, records are never updated, forks share their parent's
rows), so a flush that would add, change or delete one of them raises
:class:`~sessiondb.errors.ReadOnlyError` naming the :class:`~sessiondb.SessionStore`
method to use, before any SQL is sent; so does an ORM ``insert``/``update``/``delete``
statement aimed at them. Importing this module installs that guard (two
``sqlalchemy.orm.Session`` events, which look only at these classes). SQLAlchemy's legacy
``Session.bulk_*_mappings``/``bulk_save_objects`` fire no events and Core statements on
:mod:`sessiondb.tables` are not the ORM's: neither is guarded, so do not write with them.

Rows are raw: ``records`` holds every stored row of the session (tombstones, tombstoned
messages, compactions and what they supersede), and a fork's inherited records belong to
its ancestors (:func:`lineage_records` reads them). For what the model sees, use
``SessionStore.context``. :meth:`SessionRow.info` and :meth:`RecordRow.record` give the
store's own models.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import String, event, inspect, select
from sqlalchemy.ext.asyncio import AsyncAttrs
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    ORMExecuteState,
    Session,
    UOWTransaction,
    relationship,
)
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from . import rows, statements, tables
from .errors import ConfigurationError, InvalidInputError, ReadOnlyError, brief
from .models import Record, SessionInfo

__all__ = [
    "Base",
    "ReadOnlyError",
    "RecordRow",
    "SessionRow",
    "TurnRow",
    "lineage_records",
]


class Base(AsyncAttrs, DeclarativeBase):
    """The declarative base of sessiondb's mapped classes, on sessiondb's own ``MetaData``
    (:data:`sessiondb.tables.metadata`). A service keeps its own base for its own
    tables; queries and joins across the two work as usual."""

    metadata = tables.metadata


class SessionRow(Base):
    """A row of ``sessiondb_sessions``: one session, and the head of its record stream.

    Filter on ``namespace`` (the store's namespace) as sessiondb does: ids are unique
    across namespaces, keys only within one.
    """

    __table__ = tables.sessions

    id: Mapped[str]
    namespace: Mapped[str]
    name: Mapped[str | None]
    created_at: Mapped[datetime]
    #: ``created_at`` until the first message (so listings can order by it alone).
    last_message_at: Mapped[datetime]
    model: Mapped[str | None]
    source: Mapped[str]
    cron_job_id: Mapped[str | None]
    system_prompt_override: Mapped[str | None]
    #: The session's metadata as JSON text (see :meth:`metadata_field`, :meth:`info`).
    metadata_json: Mapped[str | None]
    last_seq: Mapped[int]
    message_count: Mapped[int]
    input_tokens: Mapped[int]
    output_tokens: Mapped[int]
    cache_read_tokens: Mapped[int]
    cache_write_tokens: Mapped[int]
    cost_total: Mapped[float]
    parent_id: Mapped[str | None]
    fork_seq: Mapped[int | None]
    #: The caller's own key (``SessionStore.session_for_key``), unique per namespace.
    key: Mapped[str | None]

    #: The rows stored under this session, in seq order. A fork's inherited records
    #: (``seq <= fork_seq``) are its ancestors' rows: see :func:`lineage_records`.
    records: Mapped[list[RecordRow]] = relationship(
        back_populates="session", order_by=lambda: RecordRow.seq, passive_deletes=True
    )
    #: The session this one was forked from (``None`` for a root).
    parent: Mapped[SessionRow | None] = relationship(
        back_populates="forks", remote_side=lambda: SessionRow.id
    )
    #: The sessions forked from this one, oldest first (ids are ULIDs: time-ordered).
    forks: Mapped[list[SessionRow]] = relationship(
        back_populates="parent", order_by=lambda: SessionRow.id
    )
    #: The turn lease rows (holder first, then waiters in arrival order).
    turns: Mapped[list[TurnRow]] = relationship(
        back_populates="session", order_by=lambda: TurnRow.ticket, passive_deletes=True
    )

    @classmethod
    def metadata_field(cls, name: str) -> ColumnElement[str]:
        """A SQL expression for one top-level field of the session's metadata, as text
        (``json_each`` on SQLite, ``->>`` on Postgres), to filter or join on:
        ``select(User).join(SessionRow, SessionRow.metadata_field("user_id") == User.id)``.
        ``NULL`` where the field is missing or JSON ``null``. Strings compare exactly;
        numbers come back as text (``"7"``), booleans as each database writes them
        (``1`` on SQLite, ``true`` on Postgres). Works on an ``aliased(SessionRow)`` too.

        Raises:
            InvalidInputError: ``name`` is not a string, or holds NUL or a lone surrogate
                (neither database can compare it).
        """
        if not isinstance(name, str):
            raise InvalidInputError(f"metadata_field: name must be a string, not {brief(name)}")
        if "\x00" in name or any("\ud800" <= c <= "\udfff" for c in name):
            raise InvalidInputError(
                f"metadata_field: name {brief(name)} holds NUL or a lone surrogate"
            )
        return MetadataField(cls.metadata_json, name)

    def info(self) -> SessionInfo:
        """The row as the :class:`~sessiondb.SessionInfo` that ``SessionStore.get_session``
        returns (metadata decoded, ``last_message_at`` ``None`` before any message;
        ``turn`` is not read here)."""
        values = {c.key: getattr(self, c.key) for c in tables.sessions.columns}
        return rows.session_info(values)

    def __repr__(self) -> str:
        return f"SessionRow(id={self.id!r}, namespace={self.namespace!r}, name={brief(self.name)})"


class RecordRow(Base):
    """A row of ``sessiondb_records``: one stored record of a session (a message, an
    overlay such as a compaction or tombstone, or an imported entry). Never updated."""

    __table__ = tables.records

    session_id: Mapped[str]
    seq: Mapped[int]
    kind: Mapped[str]
    role: Mapped[str | None]
    created_at: Mapped[datetime]
    uuid: Mapped[str | None]
    parent_uuid: Mapped[str | None]
    tool_call_id: Mapped[str | None]
    #: The record a tombstone takes back.
    target_seq: Mapped[int | None]
    #: A compaction's first kept seq.
    first_kept_seq: Mapped[int | None]
    #: Characters of payload.
    size: Mapped[int]
    #: The record as JSON text, exactly as stored (see :meth:`record`).
    payload: Mapped[str]

    #: The session that stored the row.
    session: Mapped[SessionRow] = relationship(back_populates="records")

    def record(self) -> Record:
        """The row as the :class:`~sessiondb.Record` that ``SessionStore.records``
        returns (the payload parsed into a message, compaction, tombstone, … model)."""
        row = (self.session_id, self.seq, self.kind, self.created_at, self.uuid, self.payload)
        return rows.records_from_rows([row])[0]

    def __repr__(self) -> str:
        return f"RecordRow(session_id={self.session_id!r}, seq={self.seq}, kind={self.kind!r})"


class TurnRow(Base):
    """A row of ``sessiondb_turns``: a holder of, or a waiter for, a session's turn
    (``SessionStore.turn``). Times are the database's clock."""

    __table__ = tables.turns

    session_id: Mapped[str]
    ticket: Mapped[int]
    token: Mapped[str]
    holder: Mapped[str]
    enqueued_at: Mapped[datetime]
    acquired_at: Mapped[datetime | None]
    expires_at: Mapped[datetime]

    session: Mapped[SessionRow] = relationship(back_populates="turns")

    def __repr__(self) -> str:
        return (
            f"TurnRow(session_id={self.session_id!r}, ticket={self.ticket}, holder={self.holder!r})"
        )


def lineage_records(session_id: str, namespace: str) -> Select[RecordRow]:
    """A query for every stored record along the session's lineage in seq order: a fork's
    inherited rows (its ancestors', up to each fork point) and its own. Raw rows, as
    :attr:`SessionRow.records` (tombstoned and superseded ones included).

    ``session.scalars(lineage_records(sid, "default")).all()``
    """
    for argument, value in (("session_id", session_id), ("namespace", namespace)):
        if not isinstance(value, str):
            raise InvalidInputError(
                f"lineage_records: {argument} must be a string, not {brief(value)}"
            )
    lin = statements.lineage()
    on = (RecordRow.session_id == lin.c.id) & (RecordRow.seq <= lin.c.upto)
    stmt = select(RecordRow).join(lin, on).order_by(RecordRow.seq)
    return stmt.params(sid=session_id, ns=namespace)


# -- metadata fields ----------------------------------------------------------------------


class MetadataField(FunctionElement[str]):
    """``MetadataField(column, name)``: one top-level field of a JSON text column, as text
    (compiled per dialect; ``name`` is bound, never written into the SQL)."""

    type = String()
    inherit_cache = True
    name = "metadata_field"


@compiles(MetadataField, "sqlite")
def _sqlite_field(element: MetadataField, compiler: SQLCompiler, **kw: Any) -> str:
    column, field = element.clauses
    # json_each, not a json_extract path: a path cannot spell every key (SQLite reads a
    # quoted label up to the next '"'). CAST: json_each gives a number as a number.
    return (
        "(SELECT CAST(sessiondb_field.value AS TEXT) "
        f"FROM json_each({compiler.process(column, **kw)}) AS sessiondb_field "
        f"WHERE sessiondb_field.key = {compiler.process(field, **kw)})"
    )


@compiles(MetadataField, "postgresql")
def _postgres_field(element: MetadataField, compiler: SQLCompiler, **kw: Any) -> str:
    column, field = element.clauses
    return f"(CAST({compiler.process(column, **kw)} AS JSON) ->> {compiler.process(field, **kw)})"


@compiles(MetadataField)
def _other_field(element: MetadataField, compiler: SQLCompiler, **kw: Any) -> str:
    raise ConfigurationError(
        f"SessionRow.metadata_field works on SQLite and Postgres, not {compiler.dialect.name}"
    )


# -- the read-only guard ------------------------------------------------------------------

# What to call instead, by class and by what the flush would do.
_INSTEAD = {
    (SessionRow, "add"): "SessionStore.create_session (or session_for_key, fork, import_sessions)",
    (SessionRow, "change"): "SessionStore.rename for the name; append, tombstone and "
    "the other writes move the head and counters; fork makes a child",
    (SessionRow, "delete"): "SessionStore.delete_session (cascade=True for its forks), "
    "or expire for retention",
    (RecordRow, "add"): "SessionStore.append (append_compaction, append_prune, "
    "tombstone for overlays)",
    (RecordRow, "change"): "records are never updated: SessionStore.tombstone takes one "
    "back, append adds its replacement",
    (RecordRow, "delete"): "SessionStore.tombstone (pop, clear) hides records; "
    "delete_session removes the whole session",
    (TurnRow, "add"): "SessionStore.turn",
    (TurnRow, "change"): "SessionStore.turn",
    (TurnRow, "delete"): "SessionStore.turn",
}
_MAPPED = (SessionRow, RecordRow, TurnRow)
# sessiondb's own relationships: a change to one of them writes sessiondb's rows. A
# relationship a service adds to these classes (a backref) is the service's business.
_OWN_RELATIONSHIPS = frozenset(("records", "parent", "forks", "turns", "session"))


def _refusal(
    cls: type[Base], action: str, row: object = None, changed: Iterable[str] = ()
) -> ReadOnlyError:
    """The error for ``action`` (``add``, ``change`` or ``delete``) on a row of ``cls``:
    of ``row`` in a flush, else by an ORM statement; ``changed`` names the attributes."""
    what = f" {', '.join(sorted(changed))} of" if changed else ""
    target = _describe(row) if isinstance(row, Base) else cls.__name__
    how = "flushing a SQLAlchemy session" if row is not None else "an ORM statement"
    return ReadOnlyError(
        f"sessiondb.orm is read-only: cannot {action}{what} {target} by {how}; "
        f"use {_INSTEAD[cls, action]}. Nothing was written; expunge the object or roll the "
        "session back."
    )


def _describe(row: Base) -> str:
    """``SessionRow(id='…')``: the row's primary key, read without loading anything (an
    expired row's from its identity)."""
    state = inspect(row)
    keys = [state.mapper.get_property_by_column(c).key for c in state.mapper.primary_key]
    values = state.identity or tuple(state.dict.get(k) for k in keys)
    shown = ", ".join(f"{k}={brief(v)}" for k, v in zip(keys, values, strict=True))
    return f"{type(row).__name__}({shown})"


def _changed_attributes(row: Base) -> list[str]:
    """The attributes of ``row`` whose change a flush would write to sessiondb's tables:
    its columns and sessiondb's own relationships (a relationship a service added to the
    class is left to the service). Nothing is loaded to find out."""
    state = inspect(row)
    columns = state.mapper.column_attrs
    return [
        attr.key
        for attr in state.attrs
        if (attr.key in columns or attr.key in _OWN_RELATIONSHIPS) and attr.history.has_changes()
    ]


def _mapped(objects: Iterable[object]) -> list[Base]:
    return [o for o in objects if isinstance(o, _MAPPED)]


@event.listens_for(Session, "before_flush")
def _refuse_flush(session: Session, flush_context: UOWTransaction, instances: object) -> None:
    for obj in _mapped(session.new):
        raise _refusal(type(obj), "add", obj)
    for obj in _mapped(session.deleted):
        raise _refusal(type(obj), "delete", obj)
    for obj in _mapped(session.dirty):
        changed = _changed_attributes(obj)
        if changed:
            raise _refusal(type(obj), "change", obj, changed)


@event.listens_for(Session, "do_orm_execute")
def _refuse_statement(state: ORMExecuteState) -> None:
    if not (state.is_insert or state.is_update or state.is_delete):
        return
    for mapper in state.all_mappers:
        if mapper.class_ in _MAPPED:
            action = "add" if state.is_insert else "change" if state.is_update else "delete"
            raise _refusal(mapper.class_, action)
