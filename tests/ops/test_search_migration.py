"""Migration 0006 (the search index) over a database that already holds data from 0005,
on both backends: the records written before it are found after it (more of them than
one batch of the fill), tombstones and thinking behave as for new records, the schema
equals the models, and the downgrade removes the index and keeps the records."""

from __future__ import annotations

import pytest
from helpers import sql
from helpers.messages import assistant, result, user
from helpers.migrations import head_revision, schema_state, search_tables
from helpers.overlays import raw_records

from sessiondb import ConfigurationError, SessionStore
from sessiondb import migrate as migrations
from sessiondb.tables import SEARCH

FILL_BATCH = 2_000  # migrations/versions/0006_search.py BATCH


async def test_upgrade_to_0006_indexes_what_0005_holds(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0005")
        # Today's code ahead of the migration (a rolling upgrade): writes go on without
        # the index, and search says what to do.
        sid = (await store.create_session()).id
        thought = {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hidden quokka"},
                {"type": "toolCall", "id": "c1", "name": "fetch_axolotl", "arguments": {}},
            ],
        }
        await store.append(sid, [user("old ocelot"), thought, result("c1", "old output")])
        await store.append(sid, [user("old gone"), assistant("kept")])
        await store.tombstone(sid, 4)
        await store.append_compaction(sid, summary="summary of the ibis", first_kept_seq=5)
        many = [
            {"messages": [user(f"bulk lemur {i}"), assistant(f"reply {i}")]}
            for i in range(FILL_BATCH // 2 + 50)
        ]
        await store.import_sessions(many)
        child = (await store.fork(sid, 3)).id
        with pytest.raises(ConfigurationError, match="migrate"):
            await store.search("ocelot")
        before = await raw_records(store)

        await store.migrate()
        assert await raw_records(store) == before
        assert [(h.session_id, h.seq) for h in (await store.search("ocelot")).hits] == [(sid, 1)]
        assert [h.seq for h in (await store.search("axolotl")).hits] == [2]
        assert (await store.search("quokka")).hits == []
        assert [h.seq for h in (await store.search("quokka", thinking=True)).hits] == [2]
        assert (await store.search("gone")).hits == []
        assert [h.seq for h in (await store.search("gone", hidden=True)).hits] == [4]
        (summary,) = (await store.search("ibis")).hits
        assert summary.kind == "compaction"
        lemurs, cursor, pages = 0, None, 0
        while True:
            page = await store.search("lemur", limit=200, cursor=cursor)
            lemurs, cursor, pages = lemurs + len(page.hits), page.next_cursor, pages + 1
            if cursor is None:
                break
        assert lemurs == len(many) and pages == 6
        assert [h.seq for h in (await store.search("ocelot", session_id=child)).hits] == [1]
        # New writes are indexed by the write itself, beside the filled ones.
        await store.append(sid, [user("new ocelot")])
        assert {h.seq for h in (await store.search("ocelot")).hits} == {1, 8}
        if sql.flavour(store) == "sqlite":
            assert await sql.run_sync(store, search_tables) >= {SEARCH}
            indexed = await sql.scalar(store, f"SELECT count(*) FROM {SEARCH}")
        else:
            indexed = await sql.scalar(
                store, "SELECT count(*) FROM sessiondb_records WHERE search IS NOT NULL"
            )
        # Messages and the summary: every record but the tombstone.
        assert indexed == len(before) - 1 + 1

    _, diff, versions = await schema_state(empty_db_url)
    assert diff == [] and versions == [head_revision()]

    async with SessionStore.open(empty_db_url) as store:
        rows = await raw_records(store)
        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "downgrade", "0005"))
        assert await raw_records(store) == rows
        assert await sql.run_sync(store, search_tables) == set()
        await store.migrate()
        assert {h.seq for h in (await store.search("ocelot")).hits} == {1, 8}
