"""``context(last=N)``, ``pop`` and ``clear``: the context's tail by query, and taking
things out of the context by appending only."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers.messages import assistant, result, user
from helpers.overlays import raw_records, session_with, summary_text

from sessiondb import InvalidInputError, SessionNotFoundError, SessionStore

MISSING = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


def texts(messages: list[object]) -> list[str]:
    return [m.text() for m in messages]  # type: ignore[attr-defined]


async def test_context_last_n(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 11)])
    await store.tombstone(sid, 9)
    full = texts(await store.context(sid))
    assert full == [f"m{i}" for i in (1, 2, 3, 4, 5, 6, 7, 8, 10)]
    for n in (0, 1, 2, 5, 9, 20):
        assert texts(await store.context(sid, last=n)) == full[max(0, len(full) - n) :]
        tail = await store.context_json(sid, last=n)
        assert [m["content"][0]["text"] for m in json.loads(tail)] == full[max(0, len(full) - n) :]
    # A compaction's summary counts as the context's first message.
    await store.append_compaction(sid, summary="S", first_kept_seq=7)
    full = texts(await store.context(sid))
    assert full == [summary_text("S"), "m7", "m8", "m10"]
    for n in (1, 3, 4, 5):
        assert texts(await store.context(sid, last=n)) == full[max(0, len(full) - n) :]
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(InvalidInputError, match="last"):
            await store.context(sid, last=bad)  # type: ignore[arg-type]
    with pytest.raises(SessionNotFoundError):
        await store.context(MISSING, last=3)


async def test_context_last_n_of_a_fork(store: SessionStore) -> None:
    parent = await session_with(store, [user(f"p{i}") for i in range(1, 6)])
    child = await store.fork(parent, at_seq=3)
    await store.append(child.id, [user("c4"), user("c5")])
    await store.append(parent, [user("p6")])
    assert texts(await store.context(child.id, last=4)) == ["p2", "p3", "c4", "c5"]
    assert texts(await store.context(child.id, last=1)) == ["c5"]
    assert texts(await store.context(parent, last=2)) == ["p5", "p6"]


async def test_pop_takes_the_last_message_alone(store: SessionStore) -> None:
    sid = await session_with(
        store, [user("q"), assistant("call", ["c1"]), result("c1"), assistant("a")]
    )
    before = await raw_records(store)
    first = await store.pop(sid, reason="undo")
    assert first is not None and first.seq == 4 and first.message is not None
    assert first.message.text() == "a"
    # A tool result goes alone: its call stays (unlike tombstone's pair cascade).
    second = await store.pop(sid)
    assert second is not None and second.seq == 3
    assert texts(await store.context(sid)) == ["q", "call"]
    after = await raw_records(store)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing rewritten
    tombstones = [r for r in await store.records(sid, kinds=["tombstone"])]
    assert [(t.tombstone.target_seq, t.tombstone.reason) for t in tombstones] == [  # type: ignore[union-attr]
        (4, "undo"),
        (3, None),
    ]
    assert (await store.pop(sid)).seq == 2  # type: ignore[union-attr]
    assert (await store.pop(sid)).seq == 1  # type: ignore[union-attr]
    assert await store.pop(sid) is None
    assert len(await store.records(sid, include_tombstoned=True, kinds=["message"])) == 4
    with pytest.raises(SessionNotFoundError):
        await store.pop(MISSING)


async def test_pop_after_compaction_ends_with_the_summary(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), user("b"), user("c")])
    compaction = await store.append_compaction(sid, summary="S", first_kept_seq=3)
    assert (await store.pop(sid)).seq == 3  # type: ignore[union-attr]
    taken = await store.pop(sid)
    assert taken is not None and taken.seq == compaction.seq and taken.compaction is not None
    assert await store.context(sid) == []
    assert await store.pop(sid) is None


async def test_clear_appends_and_keeps_the_history(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), assistant("call", ["c1"]), result("c1")])
    before = await raw_records(store)
    cleared = await store.clear(sid)
    assert cleared is not None and cleared.compaction is not None
    assert cleared.compaction.summary == "" and cleared.compaction.first_kept_seq == cleared.seq
    assert await store.context(sid) == []
    assert await store.context_json(sid) == "[]"
    assert await store.clear(sid) is None  # empty already: nothing written
    after = await raw_records(store)
    assert len(after) == len(before) + 1
    assert texts([r.message for r in await store.records(sid, kinds=["message"]) if r.message]) == [
        "a",
        "call",
        "result c1",
    ]

    await store.append(sid, [user("again")])
    assert texts(await store.context(sid)) == ["again"]
    assert texts(await store.context(sid, last=5)) == ["again"]
    # Undoing the clear brings the history back.
    await store.tombstone(sid, cleared.seq)
    assert texts(await store.context(sid)) == ["a", "call", "result c1", "again"]


async def test_concurrent_pops_take_each_message_once(db_url: str) -> None:
    async with SessionStore.open(db_url) as one, SessionStore.open(db_url) as two:
        sid = await session_with(one, [user(f"m{i}") for i in range(12)])
        taken = await asyncio.gather(*(s.pop(sid) for _ in range(10) for s in (one, two)))
    seqs = [r.seq for r in taken if r is not None]
    assert sorted(seqs) == list(range(1, 13))
