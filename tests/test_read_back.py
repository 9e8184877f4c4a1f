"""What a write accepts, every read reads back: a message that no read could turn back
into a model is refused before anything is written, on the append path and on the bulk
path alike, and the session stays readable."""

from __future__ import annotations

from typing import Any

import pytest
import sql_helpers as sql

from sessiondb import InvalidInputError, Message, SessionStore

POISON: list[Any] = [
    {"role": "user", "content": "hi", "tool_call_id": 1},
    {"role": "user", "content": "x", "usage": {"cache_read": None}},
    {"role": "user", "content": "x", "is_error": "maybe"},
    {"role": "user", "content": "x", "tool_name": 5},
    {"role": "user", "content": "x", "parent_uuid": 5},
    {"role": "user", "content": "x", 1: 2},
    {"role": "user", "content": "x", "usage": {"input": 2**64}},
]


async def _rows(store: SessionStore) -> int:
    return int(await sql.scalar(store, "SELECT count(*) FROM sessiondb_records"))


@pytest.mark.parametrize("bad", POISON, ids=range(len(POISON)))
async def test_a_message_no_read_could_give_back_is_refused_and_nothing_written(
    store: SessionStore, bad: dict[Any, Any]
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, {"role": "user", "content": "before"})
    with pytest.raises(InvalidInputError):
        await store.append(sid, [{"role": "user", "content": "with it"}, bad])
    assert await _rows(store) == 1
    # The session still reads back, and a retry of a good message gets the next seq.
    assert [m.text() for m in await store.context(sid)] == ["before"]
    assert [r.seq for r in await store.records(sid)] == [1]
    (again,) = await store.append(sid, {"role": "user", "content": "after"})
    assert again.seq == 2


@pytest.mark.parametrize("bad", POISON[:6], ids=range(6))
async def test_the_bulk_path_refuses_the_same_and_names_the_session(
    store: SessionStore, bad: dict[Any, Any]
) -> None:
    good = {"messages": [{"role": "user", "content": "fine"}]}
    with pytest.raises(InvalidInputError, match="session 1: message 0"):
        await store.import_sessions([good, {"messages": [bad]}])
    assert await _rows(store) == 0
    assert (await store.list_sessions()).items == []


async def test_a_mutated_message_model_is_checked_as_it_is_now(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    message = Message.model_validate({"role": "user", "content": "hi"})
    message.role = "system"  # type: ignore[assignment]
    with pytest.raises(InvalidInputError):
        await store.append(sid, message)
    assert await _rows(store) == 0
    assert await store.context(sid) == []
