"""Shared by the compaction, tombstone, fork and EXPLAIN tests: sessions holding messages
(:mod:`helpers.messages` builds them), and a raw view of ``sessiondb_records`` that
proves the table only grows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers import sql
from sessiondb import Message, SessionStore
from sessiondb.context import SUMMARY_PREFIX, SUMMARY_SUFFIX
from sessiondb.statements import RECORD_DATA_COLUMNS

RawRows = dict[tuple[str, int], tuple[Any, ...]]


async def session_with(store: SessionStore, messages: list[dict[str, Any]]) -> str:
    """A new session holding ``messages``; its id."""
    info = await store.create_session()
    await store.append(info.id, messages)
    return info.id


def summary_text(summary: str) -> str:
    return SUMMARY_PREFIX + summary + SUMMARY_SUFFIX


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


async def raw_records(store: SessionStore) -> RawRows:
    """Every row of ``sessiondb_records`` as the driver returns it (no type processing),
    in the columns every revision has: not ``search``, the index made from them (0006)."""
    columns = ", ".join(RECORD_DATA_COLUMNS)
    rows = await sql.fetch(
        store, f"SELECT {columns} FROM sessiondb_records ORDER BY session_id, seq"
    )
    return {(r.session_id, r.seq): tuple(r) for r in rows}


def assert_only_grew(before: RawRows, after: RawRows, added: int) -> list[tuple[str, int]]:
    """Every earlier row is still there, unchanged, and exactly ``added`` rows are new;
    returns the new rows' keys in order."""
    assert sorted(before.keys() - after.keys()) == []
    assert [k for k in before if before[k] != after[k]] == []
    new = sorted(after.keys() - before.keys())
    assert len(new) == added
    return new


async def rows_per_session(store: SessionStore) -> dict[str, int]:
    rows = await sql.fetch(
        store, "SELECT session_id, count(*) AS n FROM sessiondb_records GROUP BY session_id"
    )
    return {r.session_id: int(r.n) for r in rows}


async def session_count(store: SessionStore) -> int:
    return int(await sql.scalar(store, "SELECT count(*) FROM sessiondb_sessions"))
