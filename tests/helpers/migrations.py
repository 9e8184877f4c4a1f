"""Writing data into a database at an older revision, for the upgrade-with-data tests.

This sessiondb's own session inserts name every column of today's schema, so a session
row of an older revision is written here by SQL; appends, tombstones and overlays go
through the store (they touch only columns every revision has)."""

from __future__ import annotations

from helpers import sql
from sessiondb import SessionStore
from sessiondb.ids import new_session_id
from sessiondb.tables import SESSIONS

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
