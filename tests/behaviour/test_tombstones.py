"""Tombstones, on both backends: a tombstone record soft-deletes one earlier record; the
target stays stored, tool call/result pairs leave together, and a tombstoned compaction
gives back the history it superseded."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import sql
from helpers.messages import MISSING_ID, assistant, result, two_calls, user
from helpers.overlays import assert_only_grew, raw_records, session_with, summary_text, texts

from sessiondb import (
    InvalidInputError,
    RecordNotFoundError,
    SessionNotFoundError,
    SessionStore,
    Tombstone,
)


def _targets(tombstones: list[Any]) -> list[int]:
    return [t.tombstone.target_seq for t in tombstones]


async def test_tombstone_hides_the_message_and_keeps_the_row(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), assistant("b"), user("c")])
    before = await raw_records(store)

    written = await store.tombstone(sid, 2, reason="wrong answer")

    assert len(written) == 1
    (tomb,) = written
    assert (tomb.seq, tomb.kind, tomb.session_id) == (4, "tombstone", sid)
    assert tomb.tombstone == Tombstone(target_seq=2, reason="wrong answer")
    (key,) = assert_only_grew(before, await raw_records(store), added=1)
    assert key == (sid, 4)
    assert texts(await store.context(sid)) == ["a", "c"]
    assert [r.seq for r in await store.records(sid)] == [1, 3, 4]
    audit = await store.records(sid, include_tombstoned=True)
    assert [r.seq for r in audit] == [1, 2, 3, 4]
    assert audit[1].message is not None and audit[1].message.text() == "b"
    (row,) = await sql.fetch(
        store,
        "SELECT kind, target_seq, first_kept_seq FROM sessiondb_records"
        " WHERE session_id = :sid AND seq = 4",
        sid=sid,
    )
    assert tuple(row) == ("tombstone", 2, None)
    assert (await store.get_session(sid)).last_seq == 4


async def test_tombstone_without_reason(store: SessionStore) -> None:
    sid = await session_with(store, [user("a")])
    (tomb,) = await store.tombstone(sid, 1)
    assert tomb.tombstone == Tombstone(target_seq=1)
    assert tomb.tombstone.reason is None
    assert await store.context(sid) == []


async def test_tombstone_after_first_kept_seq_leaves_the_context(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 6)])
    await store.append_compaction(sid, summary="s", first_kept_seq=3)  # 6
    await store.tombstone(sid, 4)
    assert texts(await store.context(sid)) == [summary_text("s"), "m3", "m5"]
    # The first kept message itself can go too; the cut stays where it was.
    await store.tombstone(sid, 3)
    assert texts(await store.context(sid)) == [summary_text("s"), "m5"]


async def test_tombstone_before_first_kept_seq(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 6)])
    await store.append_compaction(sid, summary="s", first_kept_seq=4)  # 6
    before = await raw_records(store)

    await store.tombstone(sid, 2)  # superseded already: the context does not change

    assert_only_grew(before, await raw_records(store), added=1)
    assert texts(await store.context(sid)) == [summary_text("s"), "m4", "m5"]
    # ...but once the compaction goes, the history comes back without m2.
    await store.tombstone(sid, 6)
    assert texts(await store.context(sid)) == ["m1", "m3", "m4", "m5"]


async def test_tombstoning_an_assistant_takes_its_tool_results(store: SessionStore) -> None:
    sid = await session_with(
        store,
        [
            *two_calls(),
            assistant("again", ["C"]),
            result("C"),
            assistant("done"),
        ],
    )
    before = await raw_records(store)

    written = await store.tombstone(sid, 2, reason="bad call")

    assert _targets(written) == [2, 3, 4]
    assert [t.seq for t in written] == [8, 9, 10]
    assert {t.tombstone.reason for t in written} == {"bad call"}
    assert_only_grew(before, await raw_records(store), added=3)
    assert texts(await store.context(sid)) == ["q", "again", "result C", "done"]


@pytest.mark.parametrize("target", [3, 4])
async def test_tombstoning_a_tool_result_takes_its_call_and_siblings(
    store: SessionStore, target: int
) -> None:
    sid = await session_with(
        store,
        [
            *two_calls(),
            assistant("again", ["C"]),
            result("C"),
        ],
    )
    written = await store.tombstone(sid, target)
    assert sorted(_targets(written)) == [2, 3, 4]
    assert texts(await store.context(sid)) == ["q", "again", "result C"]


async def test_tombstoning_a_later_tool_result_leaves_earlier_pairs(store: SessionStore) -> None:
    sid = await session_with(
        store,
        [user("q"), assistant("c1", ["A"]), result("A"), assistant("c2", ["B"]), result("B")],
    )
    assert _targets(await store.tombstone(sid, 5)) == [4, 5]
    assert texts(await store.context(sid)) == ["q", "c1", "result A"]


async def test_tombstoning_an_assistant_without_calls_takes_only_itself(
    store: SessionStore,
) -> None:
    sid = await session_with(
        store, [user("q"), assistant("plain"), assistant("call", ["A"]), result("A")]
    )
    assert _targets(await store.tombstone(sid, 2)) == [2]
    assert texts(await store.context(sid)) == ["q", "call", "result A"]


async def test_tombstoning_a_user_message_takes_only_itself(store: SessionStore) -> None:
    sid = await session_with(store, [user("q"), assistant("call", ["A"]), result("A")])
    assert _targets(await store.tombstone(sid, 1)) == [1]
    assert texts(await store.context(sid)) == ["call", "result A"]


async def test_tombstoning_a_compaction_restores_the_history(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 5)])
    await store.append_compaction(sid, summary="s", first_kept_seq=3)  # 5
    await store.append(sid, [user("m6")])
    before = await raw_records(store)

    written = await store.tombstone(sid, 5)

    assert _targets(written) == [5]
    assert_only_grew(before, await raw_records(store), added=1)
    assert texts(await store.context(sid)) == ["m1", "m2", "m3", "m4", "m6"]
    assert [r.seq for r in await store.records(sid, kinds=["compaction"])] == []
    assert [
        r.seq for r in await store.records(sid, kinds=["compaction"], include_tombstoned=True)
    ] == [5]


async def test_tombstoning_the_latest_compaction_falls_back_to_the_previous(
    store: SessionStore,
) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 5)])
    await store.append_compaction(sid, summary="first", first_kept_seq=2)  # 5
    await store.append_compaction(sid, summary="second", first_kept_seq=4)  # 6
    assert texts(await store.context(sid)) == [summary_text("second"), "m4"]

    await store.tombstone(sid, 6)

    assert texts(await store.context(sid)) == [summary_text("first"), "m2", "m3", "m4"]
    # With the fallback in place, a new compaction may again cut anywhere it keeps.
    await store.append_compaction(sid, summary="third", first_kept_seq=3)
    assert texts(await store.context(sid)) == [summary_text("third"), "m3", "m4"]


async def test_a_second_tombstone_of_the_same_target_is_a_no_op(store: SessionStore) -> None:
    sid = await session_with(
        store, [user("q"), assistant("call", ["A"]), result("A"), user("more")]
    )
    assert _targets(await store.tombstone(sid, 1)) == [1]
    assert _targets(await store.tombstone(sid, 2)) == [2, 3]
    before = await raw_records(store)
    head = (await store.get_session(sid)).last_seq

    assert await store.tombstone(sid, 1) == []
    assert await store.tombstone(sid, 2) == []
    assert await store.tombstone(sid, 3) == []  # went with its call

    assert await raw_records(store) == before
    assert (await store.get_session(sid)).last_seq == head
    assert texts(await store.context(sid)) == ["more"]


async def test_cascade_skips_members_already_tombstoned(store: SessionStore) -> None:
    sid = await session_with(store, [user("q"), assistant("call", ["A", "B"]), result("A")])
    assert _targets(await store.tombstone(sid, 3)) == [2, 3]  # 4, 5
    await store.append(sid, [result("B")])  # 6: arrives after its call was tombstoned
    assert texts(await store.context(sid)) == ["q", "result B"]

    written = await store.tombstone(sid, 6)

    assert _targets(written) == [6]  # 2 and 3 are tombstoned already
    assert texts(await store.context(sid)) == ["q"]


@pytest.mark.parametrize("seq", [0, -1, 4, 1_000_000])
async def test_tombstone_of_a_missing_seq_raises(store: SessionStore, seq: int) -> None:
    sid = await session_with(store, [user("a"), user("b"), user("c")])
    before = await raw_records(store)
    with pytest.raises(RecordNotFoundError) as info:
        await store.tombstone(sid, seq)
    assert (info.value.session_id, info.value.seq) == (sid, seq)
    assert await raw_records(store) == before


async def test_tombstone_of_a_tombstone_is_refused(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), user("b")])
    await store.tombstone(sid, 1)  # seq 3
    before = await raw_records(store)
    with pytest.raises(InvalidInputError, match="is a tombstone"):
        await store.tombstone(sid, 3)
    assert await raw_records(store) == before
    assert texts(await store.context(sid)) == ["b"]


@pytest.mark.parametrize("bad", ["1", True, 1.0, None])
async def test_tombstone_refuses_a_seq_that_is_not_an_int(store: SessionStore, bad: Any) -> None:
    sid = await session_with(store, [user("a")])
    before = await raw_records(store)
    with pytest.raises(InvalidInputError):
        await store.tombstone(sid, bad)
    assert await raw_records(store) == before


async def test_tombstone_refuses_an_unstorable_reason(store: SessionStore) -> None:
    sid = await session_with(store, [user("a")])
    with pytest.raises(InvalidInputError):
        await store.tombstone(sid, 1, reason="nul\x00byte")
    assert texts(await store.context(sid)) == ["a"]


async def test_tombstone_in_a_missing_session_raises(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.tombstone(MISSING_ID, 1)


async def test_compaction_refuses_a_tombstoned_first_kept_seq(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), user("b"), user("c")])
    await store.tombstone(sid, 2)
    with pytest.raises(InvalidInputError, match="first_kept_seq 2 "):
        await store.append_compaction(sid, summary="s", first_kept_seq=2)
    await store.append_compaction(sid, summary="s", first_kept_seq=3)
    assert texts(await store.context(sid)) == [summary_text("s"), "c"]


# A user message between a tool call and its result (the conformance machine found that
# the pair was kept together from the result's side only).
INTERRUPTED_PAIR = [user("q"), assistant("call", ["A"]), user("wait"), result("A"), user("next")]


@pytest.mark.parametrize("target", [2, 4])
async def test_a_pair_with_a_user_message_between_leaves_together(
    store: SessionStore, target: int
) -> None:
    sid = await session_with(store, INTERRUPTED_PAIR)
    assert _targets(await store.tombstone(sid, target)) == [2, 4]
    assert texts(await store.context(sid)) == ["q", "wait", "next"]


@pytest.mark.parametrize("cut_after", [2, 3])
async def test_no_cut_between_a_call_and_a_result_after_a_user_message(
    store: SessionStore, cut_after: int
) -> None:
    sid = await session_with(store, INTERRUPTED_PAIR)
    with pytest.raises(InvalidInputError, match="separate a tool call"):
        await store.append_compaction(sid, summary="s", first_kept_seq=cut_after + 1)
    with pytest.raises(InvalidInputError, match="between a tool call and its result"):
        await store.fork(sid, cut_after)
    await store.append_compaction(sid, summary="s", first_kept_seq=5)
    assert (await store.fork(sid, 4)).fork_seq == 4
