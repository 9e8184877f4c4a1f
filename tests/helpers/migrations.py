"""Writing data into a database at an older revision, for the upgrade-with-data tests,
and reading a database's schema state (its tables, its diff against the models, its
version rows) after a migration.

This sessiondb's own session inserts name every column of today's schema, so a session
row of an older revision is written here by SQL; appends, tombstones and overlays go
through the store (they touch only columns every revision has)."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from helpers import sql
from sessiondb import SessionStore
from sessiondb import migrate as migrations
from sessiondb.ids import new_session_id
from sessiondb.migrate import is_search_table
from sessiondb.tables import SESSIONS, VERSION_TABLE, metadata

# The sessions table's columns in revisions 0001 and 0002 (0003 adds ``key``).
COLUMNS_BEFORE_KEY = (
    "id, namespace, name, created_at, last_message_at, model, source, cron_job_id, "
    "system_prompt_override, metadata_json, last_seq, message_count, input_tokens, "
    "output_tokens, cache_read_tokens, cache_write_tokens, cost_total, parent_id, fork_seq"
)


async def insert_old_session(
    store: SessionStore, name: str, parent: str | None = None, head: int = 0
) -> str:
    """A new empty session (or, with ``parent``, a fork of it at ``head``); its id."""
    sid = new_session_id()
    fork = f"'{parent}', {head}" if parent else "NULL, NULL"
    await sql.execute(
        store,
        f"INSERT INTO {SESSIONS} ({COLUMNS_BEFORE_KEY}) VALUES ('{sid}', 'default', '{name}', "
        "'2026-01-01 00:00:00', '2026-01-01 00:00:00', NULL, 'interactive', NULL, NULL, "
        f"NULL, {head}, 0, 0, 0, 0, 0, 0.0, {fork})",
    )
    return sid


async def old_sessions(store: SessionStore) -> dict[str, tuple[object, ...]]:
    """Every session row, by id, in the columns every revision has."""
    rows = await sql.fetch(store, f"SELECT {COLUMNS_BEFORE_KEY} FROM {SESSIONS} ORDER BY id")
    return {r.id: tuple(r) for r in rows}


def head_revision() -> str:
    head = ScriptDirectory.from_config(migrations.alembic_config()).get_current_head()
    assert head is not None
    return head


def _not_search(name: str | None, type_: str, parent_names: Any) -> bool:
    # SQLite's FTS5 table is made by migration 0006 alone; test_search checks it.
    return not (type_ == "table" and is_search_table(name))


def _diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "version_table": VERSION_TABLE,
            "include_name": _not_search,
        },
    )
    return list(compare_metadata(context, metadata))


def _tables(conn: Connection) -> set[str]:
    """The tables, but SQLite's FTS5 search table and its own (see :func:`search_tables`)."""
    return {t for t in inspect(conn).get_table_names() if not is_search_table(t)}


def search_tables(conn: Connection) -> set[str]:
    """SQLite's FTS5 search table and the tables FTS5 keeps for it."""
    return {t for t in inspect(conn).get_table_names() if is_search_table(t)}


async def schema_state(url: str) -> tuple[set[str], list[Any], list[str]]:
    """(tables, the autogenerate diff against the models, version rows)."""

    def state(conn: Connection) -> tuple[set[str], list[Any], list[str]]:
        tables = _tables(conn)
        versions: list[str] = []
        if VERSION_TABLE in tables:
            result = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            versions = [row[0] for row in result]
        return tables, _diff(conn), versions

    async with SessionStore.open(url) as store:
        return await sql.run_sync(store, state)
