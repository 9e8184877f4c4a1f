"""Migration 0003 (session keys) over a database that already holds data from 0002, on
both backends: every row is kept, old sessions have no key, keys work after; the
downgrade drops the keys and keeps the sessions and their records."""

from __future__ import annotations

import pytest
from helpers import sql
from helpers.messages import assistant, result, user
from helpers.migrations import head_revision, insert_old_session, old_sessions, schema_state
from helpers.overlays import raw_records, session_with

from sessiondb import SessionDBError, SessionNotFoundError, SessionStore
from sessiondb import migrate as migrations
from sessiondb.compaction.prune import PRUNED_MARKER
from sessiondb.tables import SESSIONS


async def test_upgrade_from_0002_keeps_the_data_and_adds_keys(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0002")
        sid = await insert_old_session(store, "parent")
        await store.append(sid, [user("q"), assistant("call", ["c1"]), result("c1", "x" * 300)])
        await store.append(sid, [{"role": "user", "content": "\u0000 and \ud800", "uuid": "u-1"}])
        await store.append_prune(sid, [3])
        await store.tombstone(sid, 4)
        child = await insert_old_session(store, "child", parent=sid, head=6)
        await store.append(child, [assistant("in the fork")])
        other = await insert_old_session(store, "other")
        sessions_before = await old_sessions(store)
        records_before = await raw_records(store)
        context_before = await store.context(child)
        # 0002 has no key column.
        with pytest.raises(SessionDBError):
            await store.session_for_key("k")

        await store.migrate()
        assert await old_sessions(store) == sessions_before
        assert await raw_records(store) == records_before
        assert await store.context(child) == context_before
        assert [m.text() for m in context_before] == ["q", "call", PRUNED_MARKER, "in the fork"]
        infos = [await store.get_session(i) for i in (sid, child, other)]
        assert [i.key for i in infos] == [None, None, None]
        assert [i.name for i in infos] == ["parent", "child", "other"]

        keyed = await store.session_for_key("Chat 1")
        assert (await store.session_for_key("Chat 1")).id == keyed.id
        assert (await store.session_for_key("chat 1")).id != keyed.id
        assert len(await old_sessions(store)) == len(sessions_before) + 2

    _, diff, versions = await schema_state(empty_db_url)
    assert diff == [] and versions == [head_revision()]


async def test_downgrade_to_0002_drops_keys_only(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate()
        keyed = await store.session_for_key("k")
        await store.append(keyed.id, [user("q"), assistant("a")])
        plain = await session_with(store, [user("p")])
        sessions_before = await old_sessions(store)
        records_before = await raw_records(store)

        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "downgrade", "0002"))
        assert await old_sessions(store) == sessions_before
        assert await raw_records(store) == records_before
        assert {r.id for r in await sql.fetch(store, f"SELECT id FROM {SESSIONS}")} == {
            keyed.id,
            plain,
        }
    _, _, versions = await schema_state(empty_db_url)
    assert versions == ["0002"]

    # And up again: the sessions are there, without their keys.
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate()
        assert (await store.get_session(keyed.id)).key is None
        with pytest.raises(SessionNotFoundError):
            await store.session_for_key("k", create=False)
