"""SQLite's FTS5 rows, read back: every write indexes each record under the record's own
rowid (the one its insert gave), with the text :mod:`sessiondb.search_text` takes of
its payload, and nothing else; also when a delete lets SQLite give a rowid again."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import sql
from helpers.messages import assistant, result, user

from sessiondb import SessionStore
from sessiondb.search_text import payload_index_source
from sessiondb.tables import SEARCH

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "memory"], indirect=True)


async def _index_matches_records(store: SessionStore) -> int:
    """Assert that the FTS5 table holds exactly one row per searched record, under its
    rowid, with its text; return how many."""
    records = await sql.fetch(store, "SELECT rowid, kind, payload FROM sessiondb_records")
    expected: dict[int, tuple[str, str | None]] = {}
    for rowid, kind, payload in records:
        source = payload_index_source(kind, payload)
        if source is not None:
            expected[rowid] = source
    found = {
        rowid: (body, thinking)
        for rowid, body, thinking in await sql.fetch(
            store, f"SELECT rowid, body, thinking FROM {SEARCH}"
        )
    }
    assert found == expected
    return len(found)


def _turn(word: str) -> list[dict[str, Any]]:
    return [
        user(f"{word} question"),
        assistant(f"{word} answer", calls=["c1"]),
        result("c1", f"{word} output"),
        assistant(f"{word} done"),
    ]


async def test_every_write_indexes_each_record_under_its_own_rowid(store: SessionStore) -> None:
    first = (await store.create_session()).id
    await store.append(first, [user("single walrus")])  # one record: the inline path
    await store.append(first, _turn("batch"))  # several records in one append
    ids = await store.import_sessions([{"messages": _turn(f"bulk{i}")} for i in range(5)])
    await store.fork(ids[2], at_seq=3, detach=True)  # the records copied, with their rows
    assert await _index_matches_records(store) == 1 + 4 + 5 * 4 + 3


async def test_a_rowid_given_again_after_a_delete_indexes_the_new_record(
    store: SessionStore,
) -> None:
    older = (await store.create_session()).id
    await store.append(older, [user("older lemur")])
    newest = (await store.create_session()).id
    await store.append(newest, _turn("doomed"))
    before = await sql.scalar(store, "SELECT max(rowid) FROM sessiondb_records")
    # The newest records go, so the next inserts take their rowids again.
    await store.delete_session(newest)
    again = (await store.create_session()).id
    await store.append(again, _turn("reborn"))
    ids = await store.import_sessions([{"messages": [user("imported ocelot")]}])
    assert await sql.scalar(store, "SELECT max(rowid) FROM sessiondb_records") <= before + 1
    assert await _index_matches_records(store) == 1 + 4 + 1
    assert [h.session_id for h in (await store.search("doomed")).hits] == []
    assert {h.session_id for h in (await store.search("reborn")).hits} == {again}
    assert [h.session_id for h in (await store.search("ocelot")).hits] == [ids[0]]


async def test_an_index_row_of_no_text_ranks_nothing_and_fails_no_search(
    store: SessionStore,
) -> None:
    # The rank is computed in Python over the FTS5 row's text: a row changed by SQL to
    # hold a blob or a number must not turn a search into a driver error.
    sid = (await store.create_session()).id
    await store.append(sid, [user("blobword one"), user("blobword two")])
    rowids = [r[0] for r in await sql.fetch(store, f"SELECT rowid FROM {SEARCH} ORDER BY rowid")]
    await sql.execute(
        store, f"UPDATE {SEARCH} SET thinking = x'626c6f62776f7264' WHERE rowid = :r", r=rowids[0]
    )
    await sql.execute(store, f"UPDATE {SEARCH} SET thinking = 7 WHERE rowid = :r", r=rowids[1])
    page = await store.search("blobword", thinking=True)
    assert sorted(h.seq for h in page.hits) == [1, 2]
    assert [h.rank for h in page.hits] == [pytest.approx(1 / 1.64493406685)] * 2
