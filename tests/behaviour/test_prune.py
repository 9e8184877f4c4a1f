"""The pruning overlay (compaction's first phase), on every backend: ``append_prune``,
markers in ``context()`` and ``context_json()``, with compactions, forks and tombstones,
and the pruning phase of ``compact`` / ``maybe_compact``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers.compaction import tool_turn
from helpers.messages import MISSING_ID, assistant, result, user
from helpers.overlays import assert_only_grew, raw_records, session_with, summary_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    CompactionSettings,
    InvalidInputError,
    Message,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
    TextContent,
    offline_summarizer,
)
from sessiondb.compaction import (
    PRUNED_MARKER,
    CompactionEvent,
    compact,
    maybe_compact,
    measure_context,
)

MARK = "[pruned]"


def two_calls() -> list[dict[str, Any]]:
    """Seqs 1..7: a question, a call, its result (3), an answer, a call, its result (6),
    an answer."""
    return [
        user("q"),
        assistant("looking", ["c1"]),
        result("c1", "first result " + "a" * 200),
        assistant("a1"),
        assistant("again", ["c2"]),
        result("c2", "second result " + "b" * 200),
        assistant("a2"),
    ]


async def assert_json_agrees(store: SessionStore, sid: str) -> list[Message]:
    context = await store.context(sid)
    assert json.loads(await store.context_json(sid)) == [m.to_wire() for m in context]
    return context


def is_pruned(message: Message, marker: str = MARK) -> bool:
    return message.content == [TextContent(text=marker)]


async def test_context_shows_the_marker_and_the_records_keep_the_content(
    store: SessionStore,
) -> None:
    sid = await session_with(store, two_calls())
    before = await raw_records(store)
    record = await store.append_prune(sid, [3], marker=MARK, tokens_freed=50)
    (new,) = assert_only_grew(before, await raw_records(store), 1)
    assert new == (sid, 8) and record.seq == 8 and record.kind == "prune"
    assert record.prune is not None
    assert (record.prune.seqs, record.prune.marker, record.prune.tokens_freed) == ([3], MARK, 50)

    context = await assert_json_agrees(store, sid)
    assert len(context) == 7
    pruned = context[2]
    assert is_pruned(pruned)
    # Everything but the content stays: the tool pair is intact for the model API.
    assert (pruned.role, pruned.tool_call_id, pruned.tool_name, pruned.is_error) == (
        "toolResult",
        "c1",
        "read",
        False,
    )
    assert context[5].text().startswith("second result")
    # Nothing rewritten: the stored message still holds its content.
    (stored,) = await store.records(sid, from_seq=3, to_seq=3)
    assert stored.message is not None and stored.message.text().startswith("first result")
    (read_back,) = await store.records(sid, kinds=["prune"])
    assert read_back == record

    # A second prune adds to the first; the default marker is the engine's.
    await store.append_prune(sid, [6])
    context = await assert_json_agrees(store, sid)
    assert is_pruned(context[2]) and is_pruned(context[5], PRUNED_MARKER)


async def test_append_prune_refuses_what_is_not_a_live_tool_result(store: SessionStore) -> None:
    sid = await session_with(store, [*two_calls(), result("c9", "orphan")])
    await store.tombstone(sid, 8)  # the orphan result: tombstoned
    await store.append_prune(sid, [6], marker=MARK)
    before = await raw_records(store)
    bad: list[tuple[Any, dict[str, Any]]] = [
        ([1], {}),  # a user message
        ([2], {}),  # an assistant message
        ([3, 99], {}),  # beyond the head
        ([8], {}),  # tombstoned
        ([9], {}),  # the tombstone itself
        ([6], {}),  # pruned already
        ([10], {}),  # the prune record
        ([], {}),
        ([3, 3], {}),
        ([0], {}),
        ([True], {}),
        (["3"], {}),
        ("3", {}),
        (3, {}),
        ([3], {"marker": ""}),
        ([3], {"marker": 7}),
        ([3], {"tokens_freed": -1}),
        ([3], {"tokens_freed": 1.5}),
        # Refused before SQL, as append refuses them (SQLite took "10" for 10).
        ([3], {"expected_seq": "10"}),
        ([3], {"expected_seq": True}),
        ([3], {"expected_seq": -1}),
    ]
    for seqs, kwargs in bad:
        with pytest.raises(InvalidInputError):
            await store.append_prune(sid, seqs, **kwargs)
    with pytest.raises(SessionNotFoundError):
        await store.append_prune(MISSING_ID, [3])
    assert await raw_records(store) == before


async def test_a_compaction_makes_a_prune_moot_or_keeps_it(store: SessionStore) -> None:
    sid = await session_with(store, two_calls())
    await store.append_prune(sid, [3, 6], marker=MARK)
    # Kept from seq 5: result 3 is superseded, result 6 still shows its marker.
    await store.append_compaction(sid, summary="S", first_kept_seq=5)
    context = await assert_json_agrees(store, sid)
    assert context[0].text() == summary_text("S")
    assert [m.text() for m in context[1:]] == ["again", MARK, "a2"]
    assert is_pruned(context[2])
    # A superseded result cannot be pruned, a kept one pruned already neither.
    with pytest.raises(InvalidInputError):
        await store.append_prune(sid, [3])
    # Tombstoning the compaction brings back the history, still pruned.
    (compaction,) = await store.records(sid, kinds=["compaction"])
    await store.tombstone(sid, compaction.seq)
    context = await assert_json_agrees(store, sid)
    assert len(context) == 7 and is_pruned(context[2]) and is_pruned(context[5])


async def test_a_prune_after_a_compaction_applies_to_kept_results(store: SessionStore) -> None:
    sid = await session_with(store, two_calls())
    await store.append_compaction(sid, summary="S", first_kept_seq=5)
    await store.append_prune(sid, [6], marker=MARK)
    context = await assert_json_agrees(store, sid)
    assert [m.text() for m in context] == [summary_text("S"), "again", MARK, "a2"]


async def test_a_fork_inherits_prunes_at_or_before_its_point(store: SessionStore) -> None:
    sid = await session_with(store, two_calls())
    await store.append_prune(sid, [3], marker=MARK)  # seq 8
    late = await store.fork(sid, at_seq=7)  # before the prune
    child = await store.fork(sid)  # at the head: inherits the prune
    child_context = await assert_json_agrees(store, child.id)
    assert is_pruned(child_context[2])
    late_context = await assert_json_agrees(store, late.id)
    assert late_context[2].text().startswith("first result")
    # The child prunes on its own: the parent does not see it.
    await store.append_prune(child.id, [6], marker=MARK)
    assert is_pruned((await assert_json_agrees(store, child.id))[5])
    assert not is_pruned((await assert_json_agrees(store, sid))[5])
    # And a prune the parent writes after the fork point stays the parent's.
    await store.append_prune(late.id, [3], marker="late")
    assert is_pruned((await assert_json_agrees(store, late.id))[2], "late")
    assert is_pruned((await assert_json_agrees(store, sid))[2])


async def test_tombstoning_a_prune_brings_the_content_back(store: SessionStore) -> None:
    sid = await session_with(store, two_calls())
    prune = await store.append_prune(sid, [3, 6], marker=MARK)
    (tomb,) = await store.tombstone(sid, prune.seq, reason="need the output")
    assert tomb.tombstone is not None and tomb.tombstone.target_seq == prune.seq
    context = await assert_json_agrees(store, sid)
    assert context[2].text().startswith("first result")
    assert context[5].text().startswith("second result")
    # The results can be pruned again, and the tombstoned prune stays stored.
    await store.append_prune(sid, [3], marker="again")
    context = await assert_json_agrees(store, sid)
    assert is_pruned(context[2], "again") and not is_pruned(context[5], "again")
    kinds = [r.kind for r in await store.records(sid, include_tombstoned=True)]
    assert kinds.count("prune") == 2


async def test_tombstoning_a_pruned_result_removes_it(store: SessionStore) -> None:
    sid = await session_with(store, two_calls())
    await store.append_prune(sid, [3], marker=MARK)
    await store.tombstone(sid, 3)  # takes its call (2) with it
    context = await assert_json_agrees(store, sid)
    assert [m.text() for m in context] == ["q", "a1", "again", context[3].text(), "a2"]
    assert context[3].tool_call_id == "c2"


# -- fuzz -----------------------------------------------------------------------------------


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seqs=st.one_of(
        st.lists(st.integers(-2, 12), max_size=5),
        st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=3),
        st.lists(st.one_of(st.booleans(), st.text(max_size=3), st.floats(), st.none())),
        st.text(max_size=4),
        st.integers(),
        st.none(),
    ),
    marker=st.one_of(st.text(max_size=20), st.none(), st.integers(), st.just("\ud800x")),
    tokens_freed=st.one_of(st.integers(min_value=-5, max_value=2**64), st.floats(), st.none()),
)
async def test_fuzz_append_prune(
    store: SessionStore, seqs: Any, marker: Any, tokens_freed: Any
) -> None:
    sid = await session_with(store, two_calls())
    before = await raw_records(store)
    context_before = await store.context(sid)
    try:
        record = await store.append_prune(sid, seqs, marker=marker, tokens_freed=tokens_freed)
    except SessionDBError:
        assert await raw_records(store) == before
        assert await store.context(sid) == context_before
        return
    assert_only_grew(before, await raw_records(store), 1)
    assert record.prune is not None and record.prune.seqs == sorted(seqs)
    context = await assert_json_agrees(store, sid)
    for seq in seqs:
        assert is_pruned(context[seq - 1], marker)


# -- the pruning phase of compact and maybe_compact ----------------------------------------


def big_turns(count: int, size: int = 4_000) -> list[dict[str, Any]]:
    return [m for n in range(1, count + 1) for m in tool_turn(n, size)]


# 10 turns of ~1,000-token results: ~10,400 tokens. Pruning outside the newest 2,500
# tokens leaves ~2,900; the threshold 4,000 is met by pruning alone.
PRUNE_ENOUGH = CompactionSettings(
    context_window=5_000, reserve_tokens=1_000, keep_recent_tokens=1_500, prune_protect_tokens=2_500
)
# The same with a threshold of 2,000: pruning is not enough, a summary follows.
PRUNE_NOT_ENOUGH = CompactionSettings(
    context_window=3_000, reserve_tokens=1_000, keep_recent_tokens=1_500, prune_protect_tokens=2_500
)


async def test_compact_stops_after_pruning_when_that_is_enough(store: SessionStore) -> None:
    sid = await session_with(store, big_turns(10))
    before = await raw_records(store)
    events: list[CompactionEvent] = []
    out = await compact(store, sid, offline_summarizer, PRUNE_ENOUGH, on_event=events.append)
    assert not out.compacted and out.pruned and out.record is None
    assert out.reason.startswith("pruned")
    (new,) = assert_only_grew(before, await raw_records(store), 1)
    assert out.prune_record is not None and out.prune_record.seq == new[1]
    # Every result but the newest ones (seq 4n-1 is turn n's result) is pruned.
    assert out.pruned_seqs == tuple(4 * n - 1 for n in range(1, 9))
    assert out.tokens_before > PRUNE_ENOUGH.threshold >= out.tokens_after
    assert out.pruned_tokens == out.tokens_before - out.tokens_after > 0
    assert [(e.type, e.tokens_before, e.tokens_after) for e in events] == [
        ("compaction.start", out.tokens_before, None),
        ("compaction.pruned", out.tokens_before, out.tokens_after),
        ("compaction.done", out.tokens_before, out.tokens_after),
    ]
    context = await assert_json_agrees(store, sid)
    assert sum(is_pruned(m, PRUNED_MARKER) for m in context) == 8
    assert context[-2].text().startswith("content 10")
    # The context's token figure sees the pruned context.
    measured = await measure_context(store, sid)
    assert measured.tokens == out.tokens_after and measured.source == "estimate"
    # Run again: nothing left to prune, under the threshold, so a manual compaction
    # summarises now.
    again = await compact(store, sid, offline_summarizer, PRUNE_ENOUGH)
    assert again.compacted and not again.pruned


async def test_compact_summarises_when_pruning_is_not_enough(store: SessionStore) -> None:
    sid = await session_with(store, big_turns(10))
    before = await raw_records(store)
    events: list[CompactionEvent] = []
    out = await compact(store, sid, offline_summarizer, PRUNE_NOT_ENOUGH, on_event=events.append)
    assert out.compacted and out.pruned and out.reason == "pruned and compacted"
    prune_seq, compaction_seq = (
        s for _, s in assert_only_grew(before, await raw_records(store), 2)
    )
    assert out.prune_record is not None and out.prune_record.seq == prune_seq
    assert out.record is not None and out.record.seq == compaction_seq
    assert [e.type for e in events] == ["compaction.start", "compaction.pruned", "compaction.done"]
    assert events[-1].tokens_after == out.tokens_after < events[1].tokens_after  # type: ignore[operator]
    context = await assert_json_agrees(store, sid)
    assert context[0].text().startswith(summary_text("")[:40])
    assert out.first_kept_seq is not None


async def test_compact_without_pruning_only_summarises(store: SessionStore) -> None:
    sid = await session_with(store, big_turns(10))
    out = await compact(store, sid, offline_summarizer, PRUNE_ENOUGH, prune=False)
    assert out.compacted and not out.pruned and out.pruned_seqs == ()
    assert await store.records(sid, kinds=["prune"]) == []
    with pytest.raises(InvalidInputError):
        await compact(store, sid, offline_summarizer, PRUNE_ENOUGH, prune="no")  # type: ignore[arg-type]


async def test_maybe_compact_reports_pruning(store: SessionStore) -> None:
    sid = await session_with(store, big_turns(10))
    out = await maybe_compact(store, sid, offline_summarizer, PRUNE_ENOUGH)
    assert out.status == "pruned" and out.result is not None and out.result.pruned
    assert await store.records(sid, kinds=["compaction"]) == []
    # Under the threshold now: nothing more to do.
    assert (await maybe_compact(store, sid, offline_summarizer, PRUNE_ENOUGH)).status == (
        "not-needed"
    )
    sid2 = await session_with(store, big_turns(10))
    out = await maybe_compact(store, sid2, offline_summarizer, PRUNE_NOT_ENOUGH)
    assert out.status == "compacted" and out.result is not None and out.result.pruned
