"""Migration 0008 (the search window's recency index) over a database that already
holds data from 0007, on both backends: search answers the same before and after it,
the index holds the indexed records on Postgres (none on SQLite), the schema equals the
models, and the downgrade drops the index and keeps the records."""

from __future__ import annotations

import time

import pytest
from helpers import sql
from helpers.messages import assistant, user
from helpers.migrations import head_revision, schema_state
from helpers.overlays import raw_records
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from sessiondb import SearchPage, SessionStore
from sessiondb import migrate as migrations
from sessiondb import search as search_module
from sessiondb.search import WordStatistics

INDEX = "ix_sessiondb_records_created_at_session_id_seq"
WINDOW = 5


def _indexes(conn: Connection) -> set[str | None]:
    return {i["name"] for i in inspect(conn).get_indexes("sessiondb_records")}


def _keys(page: SearchPage) -> list[tuple[str, int]]:
    return [(h.session_id, h.seq) for h in page.hits]


async def _walk(store: SessionStore, query: str) -> list[list[tuple[str, int]]]:
    pages = [await store.search(query, limit=2)]
    while pages[-1].next_cursor is not None:
        pages.append(await store.search(query, limit=2, cursor=pages[-1].next_cursor))
    return [_keys(p) for p in pages]


async def test_upgrade_to_0008_over_0007_data(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "WINDOW", WINDOW)
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0007")
        sid = (await store.create_session()).id
        await store.append(sid, [user("often " * (1 + i % 3) + f"n{i}") for i in range(9)])
        await store.append(sid, [assistant("often seldom")])
        await store.tombstone(sid, 9)
        await store.import_sessions([{"messages": [user(f"often bulk {i}")]} for i in range(4)])
        before = await raw_records(store)
        walks = {q: await _walk(store, q) for q in ("often", "seldom")}
        assert len({k for page in walks["often"] for k in page}) == WINDOW

        await store.migrate()
        assert await raw_records(store) == before
        assert INDEX in await sql.run_sync(store, _indexes)
        indexed = await sql.scalar(
            store, "SELECT count(*) FROM sessiondb_records WHERE search IS NOT NULL"
        )
        # The index's rows: every record but the tombstone on Postgres; none on SQLite,
        # whose search column stays NULL (its text is in the FTS5 table).
        assert indexed == (0 if sql.flavour(store) == "sqlite" else len(before) - 1)
        for path in ({}, {"often": 0.5, "seldom": 0.5}):  # GIN, then newest first
            store.core.search_statistics = WordStatistics(
                1e9 if path else 0.0, dict(path), time.monotonic()
            )
            assert {q: await _walk(store, q) for q in walks} == walks

    _, diff, versions = await schema_state(empty_db_url)
    assert diff == [] and versions == [head_revision()]

    async with SessionStore.open(empty_db_url) as store:
        rows = await raw_records(store)
        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "downgrade", "0007"))
        assert await raw_records(store) == rows
        assert INDEX not in await sql.run_sync(store, _indexes)
        assert {q: await _walk(store, q) for q in walks} == walks
        await store.migrate()
