"""Migration 0002 (record kind ``prune``) over a database that already holds data from
0001, on both backends (written as 0001 holds it: see ``helpers.migrations``): the rows
are kept, the new kind is accepted after, other kinds are still refused, and the
downgrade drops the prune records only."""

from __future__ import annotations

import pytest
from helpers import sql
from helpers.messages import assistant, result, user
from helpers.migrations import head_revision, insert_old_session, schema_state
from helpers.overlays import raw_records, session_with

from sessiondb import SessionDBError, SessionStore
from sessiondb import migrate as migrations
from sessiondb.tables import RECORDS, SESSIONS


async def test_upgrade_from_0001_keeps_the_data_and_accepts_prune(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0001")
        sid = await insert_old_session(store, "parent")
        await store.append(
            sid, [user("q"), assistant("call", ["c1"]), result("c1", "x" * 300), assistant("a")]
        )
        await store.append(sid, [{"role": "user", "content": "\u0000 and \ud800", "uuid": "u-1"}])
        await store.tombstone(sid, 5)
        await store.append_compaction(sid, summary="S", first_kept_seq=2)
        child = await insert_old_session(store, "child", parent=sid, head=7)
        before = await raw_records(store)
        context_before = await store.context(child)
        # 0001 refuses the kind.
        with pytest.raises(SessionDBError):
            await store.append_prune(sid, [3])
        assert await raw_records(store) == before

        await store.migrate("0002")
        assert await raw_records(store) == before
        assert await store.context(child) == context_before
        head = await sql.fetch(
            store, f"SELECT last_seq, message_count FROM {SESSIONS} WHERE id = '{sid}'"
        )
        assert tuple(head[0]) == (7, 5)

        prune = await store.append_prune(child, [3], marker="[gone]")
        assert [m.text() for m in await store.context(child)][2] == "[gone]"
        # The constraint still refuses unknown kinds, the key and the uuid index hold.
        with pytest.raises(Exception, match=r"(?i)check|constraint"):
            await sql.execute(
                store,
                f"INSERT INTO {RECORDS} (session_id, seq, kind, created_at, size, payload) "
                f"VALUES ('{sid}', 99, 'bogus', '2026-01-01T00:00:00', 2, '{{}}')",
            )
        with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
            await sql.execute(
                store,
                f"INSERT INTO {RECORDS} (session_id, seq, kind, created_at, size, payload, uuid) "
                f"VALUES ('{sid}', 98, 'entry', '2026-01-01T00:00:00', 2, '{{}}', 'u-1')",
            )
        # Deleting a session still cascades to its records (the foreign key survived).
        await store.delete_session(child)
        assert {s for s, _ in await raw_records(store)} == {sid}
        assert prune.seq not in {q for _, q in await raw_records(store)}
        await store.migrate()  # on to head, for the comparison with today's tables

    _, diff, versions = await schema_state(empty_db_url)
    assert diff == [] and versions == [head_revision()]


async def test_downgrade_to_0001_drops_prune_records_only(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate()
        sid = await session_with(store, [user("q"), assistant("c", ["c1"]), result("c1")])
        await store.append_prune(sid, [3])
        before = await raw_records(store)
        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "downgrade", "0001"))
        after = await raw_records(store)
        assert after == {k: v for k, v in before.items() if k != (sid, 4)}
        assert [m.text() for m in await store.context(sid)][2] == "result c1"
    _, _, versions = await schema_state(empty_db_url)
    assert versions == ["0001"]
