"""Table definitions. The Alembic migrations in ``migrations/`` create exactly these;
``tests/ops/test_migrations.py`` proves it.

A service reads them through its own SQLAlchemy ORM code with :mod:`sessiondb.orm`, which
maps these very ``Table`` objects (read-only).

Both tables lead with the session id and every hot query filters on it, so the schema
can be hash-partitioned or distributed by session id without a redesign.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.types import TypeDecorator

from .kinds import KIND_CHECK

# Prefixed names: sessiondb usually lives in a Postgres that other code shares.
SESSIONS = "sessiondb_sessions"
RECORDS = "sessiondb_records"
TURNS = "sessiondb_turns"
ADK_SESSIONS = "sessiondb_adk_sessions"
ADK_STATE = "sessiondb_adk_state"
DATA_KEYS = "sessiondb_data_keys"
LINEAGE_SEALS = "sessiondb_lineage_seals"
VERSION_TABLE = "sessiondb_alembic_version"
# SQLite: the FTS5 table of the search index (columns body, thinking), and the trigger
# that deletes a record's row from it. Not in ``metadata``: SQLAlchemy cannot describe a
# virtual table; migration 0006 creates both, and ``sessiondb.migrate`` leaves the
# table and FTS5's own tables (``sessiondb_search_*``) out of the comparison.
SEARCH = "sessiondb_search"

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python, on every backend."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; sessiondb stores UTC timestamps")
        value = value.astimezone(UTC)
        # SQLite keeps the text as written; without an offset the text sorts in time order.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SearchVector(TypeDecorator[Any]):
    """The search index's column: ``tsvector`` on Postgres, the FTS5 table's text on
    SQLite (whose column stays empty: sessiondb.search). The Postgres type is looked up
    when a Postgres dialect first uses it, so that a SQLite process never imports
    SQLAlchemy's Postgres dialect (the start-up rule of sessiondb.cli)."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import TSVECTOR

            return dialect.type_descriptor(TSVECTOR())
        return dialect.type_descriptor(Text())


Id = String(26)

sessions = Table(
    SESSIONS,
    metadata,
    Column("id", Id, nullable=False),
    Column("namespace", String(255), nullable=False),
    Column("name", Text),
    Column("created_at", UTCDateTime, nullable=False),
    # Set to created_at until the first message, so listings can order by it alone.
    Column("last_message_at", UTCDateTime, nullable=False),
    Column("model", Text),
    Column("source", String(16), nullable=False),
    Column("cron_job_id", Text),
    Column("system_prompt_override", Text),
    Column("metadata_json", Text),
    # The head of the record stream; bumped in the same transaction as every append.
    Column("last_seq", BigInteger, nullable=False),
    Column("message_count", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cache_read_tokens", BigInteger, nullable=False),
    Column("cache_write_tokens", BigInteger, nullable=False),
    Column("cost_total", Float, nullable=False),
    # A fork inherits its parent's records with seq <= fork_seq by reference.
    Column("parent_id", Id, ForeignKey(f"{SESSIONS}.id")),
    Column("fork_seq", BigInteger),
    # The caller's own address for the session (a chat id, ``user:42/thread:7``): unique
    # per namespace, compared exactly (TEXT, no collation: case and trailing spaces
    # count). NULL for sessions without one; a unique index never collides on NULLs.
    Column("key", Text),
    PrimaryKeyConstraint("id"),
    CheckConstraint("source IN ('interactive', 'cron')", name="source"),
    CheckConstraint("(parent_id IS NULL) = (fork_seq IS NULL)", name="fork_point"),
    Index(None, "namespace", "last_message_at", "id"),
    Index(None, "parent_id"),
    Index(None, "namespace", "key", unique=True),
)

records = Table(
    RECORDS,
    metadata,
    Column("session_id", Id, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("role", String(16)),
    Column("created_at", UTCDateTime, nullable=False),
    # External identity (Claude Code uuid, pi entry id): unique per session.
    Column("uuid", Text),
    Column("parent_uuid", Text),
    Column("tool_call_id", Text),
    Column("target_seq", BigInteger),  # tombstone
    Column("first_kept_seq", BigInteger),  # compaction
    Column("size", Integer, nullable=False),  # characters of payload, for estimates
    # The record as JSON text, not jsonb: jsonb refuses \u0000, reorders keys and
    # rewrites numbers, so it cannot give a transcript back as it came.
    Column("payload", Text, nullable=False),
    # Postgres: the search index's words (sessiondb.search_text), written by the insert
    # of the record itself; NULL for a record search does not see. Its GIN index is
    # partial, so those records cost it nothing. SQLite keeps the text in the FTS5 table
    # SEARCH instead (made by the migrations; rowid = the record's rowid), and this
    # column stays NULL there.
    Column("search", SearchVector()),
    PrimaryKeyConstraint("session_id", "seq"),
    ForeignKeyConstraint(["session_id"], [f"{SESSIONS}.id"], ondelete="CASCADE"),
    CheckConstraint(KIND_CHECK, name="kind"),
    CheckConstraint("seq > 0", name="seq_positive"),
    UniqueConstraint("session_id", "uuid"),
    # The latest compaction and the tombstones of a session, found by index; the kept
    # range is a primary-key range. One secondary index keeps appends cheap.
    Index(None, "session_id", "kind", "seq"),
    # and the partial indexes: see with_partial_indexes.
)

#: The partial index of the assistant messages whose stored text names a response
#: (``"responseId"``, the key of a split response's parts: sessiondb.context), by
#: ``(session_id, seq)``. The database fills it from the stored text itself, whoever
#: writes the row, so a context read may trust its absence: a session whose kept
#: messages have no entry in it holds no split response, and its texts need no search
#: (statements.context_texts). Revision 0009.
RESPONSES_INDEX = "ix_sessiondb_records_responses"
#: The text the index's rows hold: the key in quotes, however the JSON around it is
#: spaced (inside a string its quotes would be escaped; a string that is exactly the
#: name has it too, and costs only a search).
RESPONSE_KEY = '"responseId"'


def response_predicate(dialect: str) -> str:
    """The responses index's ``WHERE``, as ``dialect`` spells it; a query must spell its
    condition alike for the planner to use the index (statements.context_texts)."""
    contains = "strpos" if dialect == "postgresql" else "instr"
    # No ``kind = 'message'``: with it, SQLite's planner took the (session_id, kind, seq)
    # index instead and tested each kept message's text. Only messages have a role.
    return f"role = 'assistant' AND {contains}(payload, '{RESPONSE_KEY}') > 0"


def with_partial_indexes() -> MetaData:
    """:data:`metadata` with the records' partial indexes: the search indexes, a GIN index
    on Postgres and a B-tree of the indexed records' ``(created_at, session_id, seq)``
    (both empty on SQLite, which searches its FTS5 table), and the responses index
    (:data:`RESPONSES_INDEX`). Their dialect options make SQLAlchemy import the Postgres
    dialect, so they are added here, by what compares or creates the whole schema (the
    migration environment, the schema page), and not when this module is imported: a
    SQLite process never loads that dialect (the start-up rule of sessiondb.cli).
    Idempotent."""
    if not any(index.columns.keys() == ["search"] for index in records.indexes):
        Index(
            None,
            records.c.search,
            postgresql_using="gin",
            postgresql_where=text("search IS NOT NULL"),
            sqlite_where=text("search IS NOT NULL"),
        )
        # The order of a search's window, newest first (sessiondb.search.WINDOW): the
        # GIN index gives matches in no order. Empty on SQLite (FTS5's rowids order it).
        Index(
            None,
            records.c.created_at,
            records.c.session_id,
            records.c.seq,
            postgresql_where=text("search IS NOT NULL"),
            sqlite_where=text("search IS NOT NULL"),
        )
        Index(
            RESPONSES_INDEX,
            records.c.session_id,
            records.c.seq,
            postgresql_where=text(response_predicate("postgresql")),
            sqlite_where=text(response_predicate("sqlite")),
        )
    return metadata


# Turn leases (``SessionStore.turn``): one row per holder or waiter of a session's turn.
# The holder is the row with the lowest ticket; the others wait behind it in ticket
# order. Times are the database's clock, never a client's. A row whose ``expires_at``
# has passed is dead for good (renewal refuses it) and is deleted by whoever finds it.
turns = Table(
    TURNS,
    metadata,
    Column("session_id", Id, nullable=False),
    # Arrival order within the session: one more than the highest ticket present.
    Column("ticket", BigInteger, nullable=False),
    # Random, per acquisition: fences a write by a holder whose lease was lost even if
    # its ticket number is handed out again later.
    Column("token", String(32), nullable=False),
    Column("holder", Text, nullable=False),  # the caller's label: who is working
    Column("enqueued_at", UTCDateTime, nullable=False),
    Column("acquired_at", UTCDateTime),  # NULL while the row waits
    Column("expires_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("session_id", "ticket"),
    ForeignKeyConstraint(["session_id"], [f"{SESSIONS}.id"], ondelete="CASCADE"),
)

# Google ADK sessions (``sessiondb.integrations.adk``): ADK addresses a session by
# (app_name, user_id, session_id) and keeps state beside it, which no sessiondb column
# holds. One row per ADK session, pointing at the sessiondb session that holds its
# events as records; deleting that session (``delete_session``, retention) deletes the
# row. ``state_json`` is the session-scoped state, written in the transaction of every
# append; ``update_time`` is ADK's last update time (the last event's timestamp), which
# ADK lists by, oldest first. The primary key finds an app's or a user's sessions and the
# listing sorts them: no index holds ``update_time``, so the UPDATE of every append can
# stay a HOT update instead of writing three index entries.
adk_sessions = Table(
    ADK_SESSIONS,
    metadata,
    Column("namespace", String(255), nullable=False),
    Column("app_name", Text, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("adk_id", Text, nullable=False),
    Column("session_id", Id, nullable=False),
    Column("state_json", Text, nullable=False),
    Column("update_time", Float, nullable=False),
    PrimaryKeyConstraint("namespace", "app_name", "user_id", "adk_id"),
    ForeignKeyConstraint(["session_id"], [f"{SESSIONS}.id"], ondelete="CASCADE"),
    UniqueConstraint("session_id"),
)

# ADK's ``app:`` state (scope ``app``, user_id ``''``) and ``user:`` state (scope
# ``user``), shared by every session of the app or of the user; keys without the prefix.
adk_state = Table(
    ADK_STATE,
    metadata,
    Column("namespace", String(255), nullable=False),
    Column("app_name", Text, nullable=False),
    Column("scope", String(8), nullable=False),
    Column("user_id", Text, nullable=False),
    Column("state_json", Text, nullable=False),
    PrimaryKeyConstraint("namespace", "app_name", "scope", "user_id"),
    CheckConstraint("scope IN ('app', 'user')", name="scope"),
)

# Encryption at rest (``sessiondb.crypto``): each encrypted namespace's data keys, wrapped
# by a master key of the store's key provider. ``version`` grows by one for each new data
# key (``rotate_keys(reencrypt=True)``); the highest seals new values, and every sealed
# value names the version that sealed it. ``master_key_id`` names the master key that
# wraps this row, so rotation re-wraps rows one by one, and a key row says which master
# key it still needs. A namespace without rows here is not encrypted.
data_keys = Table(
    DATA_KEYS,
    metadata,
    Column("namespace", String(255), nullable=False),
    Column("version", Integer, nullable=False),
    Column("master_key_id", Text, nullable=False),
    Column("wrapped_key", Text, nullable=False),  # base64 of the provider's bytes
    Column("created_at", UTCDateTime, nullable=False),
    # When every row of the namespace was sealed by this key (at once for the first key;
    # at the end of ``rotate_keys(reencrypt=True)``, which resumes while it is NULL).
    Column("completed_at", UTCDateTime),
    PrimaryKeyConstraint("namespace", "version"),
    CheckConstraint("version > 0", name="version_positive"),
)


# An encrypted namespace's sessions (sessiondb.sealing): one row per session, an AES-GCM
# tag of an empty plaintext whose associated data is the session's parent_id and fork_seq
# (sessiondb.crypto.lineage_context), so that a parent or fork point changed by SQL fails
# to open. Written in the transaction of the session's row, by encrypted stores only, and
# read only by their sealed reads: a plain store's statements never name this table, so
# they run on a schema without it (new code ahead of ``migrate``). Revision 0010.
lineage_seals = Table(
    LINEAGE_SEALS,
    metadata,
    Column("namespace", String(255), nullable=False),
    Column("session_id", Id, nullable=False),
    Column("seal", Text, nullable=False),
    PrimaryKeyConstraint("namespace", "session_id"),
    ForeignKeyConstraint(["session_id"], [f"{SESSIONS}.id"], ondelete="CASCADE"),
)


@cache
def unique_by_columns() -> dict[tuple[str, ...], str]:
    """The names of the unique constraints and indexes by their sorted columns (SQLite
    names the columns of a violated one, not its name)."""
    every = metadata.tables.values()
    return {
        tuple(sorted(c.name for c in constraint.columns)): str(constraint.name)
        for table in every
        for constraint in table.constraints
        if isinstance(constraint, UniqueConstraint)
    } | {
        tuple(sorted(c.name for c in index.columns)): str(index.name)
        for table in every
        for index in table.indexes
        if index.unique
    }
