"""Migration 0009 (the responses index) over a database that already holds data from
0008, on both backends: today's code ahead of it answers the same (it reads the kept
texts instead of the index), the index holds the assistant messages that name a
response after it, the schema equals the models, and the downgrade drops the index and
keeps the records."""

from __future__ import annotations

import json

from helpers import sql
from helpers.messages import assistant, result, user
from helpers.migrations import head_revision, schema_state
from helpers.overlays import raw_records
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from sessiondb import SessionStore
from sessiondb import migrate as migrations
from sessiondb import statements as q
from sessiondb.tables import RESPONSES_INDEX


def _indexes(conn: Connection) -> set[str | None]:
    return {i["name"] for i in inspect(conn).get_indexes("sessiondb_records")}


async def _reads(store: SessionStore, sids: list[str]) -> list[tuple[str, list[object]]]:
    """Each session's texts marker and its context_json, which equals its context()."""
    out = []
    for sid in sids:
        stmt, params = q.context_texts(sid, store.namespace)
        marker = str((await sql.fetch(store, stmt, **params))[0][0])[:1]
        array = json.loads(await store.context_json(sid))
        assert array == [m.to_wire() for m in await store.context(sid)]
        out.append((marker, array))
    return out


async def test_upgrade_to_0009_over_0008_data(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0008")
        plain = (await store.create_session()).id
        await store.append(plain, [user("q"), assistant("call", ["A"]), result("A")])
        split = (await store.create_session()).id
        await store.append(
            split,
            [
                user("q"),
                assistant("one", ["A"], responseId="r1"),
                result("A"),
                assistant("two", responseId="r1"),
            ],
        )
        (imported,) = await store.import_sessions(
            [{"messages": [user("q"), assistant("a", responseId="r2"), user("again")]}]
        )
        sids = [plain, split, imported]
        before = await raw_records(store)
        reads = await _reads(store, sids)
        assert [m for m, _ in reads] == [q.TEXTS_NO_RESPONSES, q.TEXTS_ALONE, q.TEXTS_ALONE]
        assert len(reads[1][1]) == 3  # the two parts are one message

        await store.migrate()
        assert await raw_records(store) == before
        assert RESPONSES_INDEX in await sql.run_sync(store, _indexes)
        assert await _reads(store, sids) == reads
        if sql.flavour(store) == "sqlite":  # Postgres reads a table this small whole
            stmt, params = q.context_texts(split, store.namespace)
            plan = "\n".join(await sql.database(store).explain(stmt, params))
            assert RESPONSES_INDEX in plan

    _, diff, versions = await schema_state(empty_db_url)
    assert diff == [] and versions == [head_revision()]

    async with SessionStore.open(empty_db_url) as store:
        rows = await raw_records(store)
        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "downgrade", "0008"))
        assert await raw_records(store) == rows
        assert RESPONSES_INDEX not in await sql.run_sync(store, _indexes)
        assert await _reads(store, sids) == reads
        await store.migrate()
        assert await _reads(store, sids) == reads
