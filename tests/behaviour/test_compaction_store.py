"""Compaction against a real store, on SQLite and Postgres: the overlay written, the
context after, file lists carried, the update prompt, failures, races, auto-compaction
and the token figure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers.compaction import (
    CLAUDE_SESSION,
    PI_SESSION,
    FailingSummarizer,
    RecordingSummarizer,
    assistant,
    pi_messages,
    result,
    tool_pairs_intact,
    tool_turn,
    user,
)
from helpers.corpus import corpus_file
from helpers.overlays import assert_only_grew, raw_records, session_with, summary_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    CompactionSettings,
    ConflictError,
    InvalidInputError,
    SessionDBError,
    SessionStore,
    SummarizerError,
    offline_summarizer,
)
from sessiondb.compaction import (
    CircuitBreaker,
    CompactionEvent,
    compact,
    context_tokens,
    estimate_tokens,
    maybe_compact,
    measure_context,
    plan,
)
from sessiondb.compaction.prompts import SPLIT_TURN_HEADING, SYSTEM_PROMPT, UPDATE_PROMPT

SMALL = CompactionSettings(keep_recent_tokens=300, context_window=4_000, reserve_tokens=1_000)


def turns(first: int, count: int, size: int = 400) -> list[dict[str, Any]]:
    return [m for n in range(first, first + count) for m in tool_turn(n, size)]


# -- compact --------------------------------------------------------------------------------


async def test_compact_appends_an_overlay_and_the_context_follows(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 6))
    before = await raw_records(store)
    out = await compact(store, sid, offline_summarizer, SMALL)
    assert out.compacted and out.record is not None
    # S7.6: one row added, nothing rewritten.
    (new,) = assert_only_grew(before, await raw_records(store), 1)
    assert new == (sid, 25)
    stored = out.record.compaction
    assert stored is not None and stored.first_kept_seq == out.first_kept_seq
    # S7.11: the context is the summary plus every message from first_kept_seq on.
    context = await store.context(sid)
    kept = [r.message for r in await store.records(sid, kinds=("message",))][
        stored.first_kept_seq - 1 :
    ]
    assert context[0].text() == summary_text(stored.summary)
    assert context[1:] == kept
    assert out.tokens_after < out.tokens_before
    assert out.tokens_after == estimate_tokens(context)
    assert stored.tokens_before == out.summarized_tokens > 0
    # S7.14: the summary's sections, then the file blocks.
    for section in ("## Goal", "## Progress", "## Key Decisions", "## Next Steps"):
        assert section in stored.summary
    # Turn n is seqs 4n-3..4n, its read call at 4n-2: the summarised calls' files.
    expected = [f"src/f{n}.py" for n in range(1, 7) if 4 * n - 2 < stored.first_kept_seq]
    assert stored.read_files == expected and len(expected) >= 3
    assert stored.summary.endswith("</read-files>")


async def test_nothing_to_compact_writes_nothing(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 2))
    before = await raw_records(store)
    out = await compact(store, sid, FailingSummarizer())
    assert not out.compacted and "nothing to compact" in out.reason
    assert out.tokens_before == out.tokens_after == estimate_tokens(await store.context(sid))
    assert await raw_records(store) == before
    assert await plan(store, sid) is None


async def test_s7_15_s7_17_second_compaction_updates_and_carries_files(
    store: SessionStore,
) -> None:
    sid = await session_with(store, turns(1, 5))
    summarizer = RecordingSummarizer()
    first = await compact(store, sid, summarizer, SMALL)
    assert first.record is not None and first.record.compaction is not None
    assert "<previous-summary>" not in summarizer.calls[0][1]
    await store.append(
        sid,
        [
            user("now edit the config"),
            assistant("editing", [("e1", "edit", {"path": "src/f1.py"})]),
            result("e1", "ok"),
            assistant("edited"),
            *turns(10, 5),
        ],
    )
    calls_before = len(summarizer.calls)
    second = await compact(store, sid, summarizer, SMALL)
    assert second.record is not None and second.record.compaction is not None
    # The history call comes first (a split turn's prefix is summarised after it).
    system, prompt, _ = summarizer.calls[calls_before]
    assert system == SYSTEM_PROMPT
    # S7.17: the update prompt, with the first summary (without its file blocks).
    assert UPDATE_PROMPT in prompt
    previous = first.record.compaction.summary.split("\n\n<read-files>")[0]
    assert f"<previous-summary>\n{previous}\n</previous-summary>" in prompt
    assert "## Goal\nrequest 1\n" in second.record.compaction.summary
    # S7.15 and S7.16: cumulative lists; f1.py, read then edited, is modified only.
    c1, c2 = first.record.compaction, second.record.compaction
    assert set(c1.read_files) - {"src/f1.py"} <= set(c2.read_files)
    assert "src/f1.py" not in c2.read_files and c2.modified_files == ["src/f1.py"]
    assert "<modified-files>\nsrc/f1.py\n</modified-files>" in c2.summary
    assert c2.read_files == sorted(c2.read_files)
    context = await store.context(sid)
    assert context[0].text() == summary_text(c2.summary)


async def test_split_turn_summarises_the_prefix_separately(store: SessionStore) -> None:
    long_turn = [user("refactor everything")]
    for n in range(8):
        long_turn += [
            assistant(f"step {n}", [(f"s{n}", "read", {"path": f"m{n}.py"})]),
            result(f"s{n}", "y" * 800),
        ]
    long_turn.append(assistant("all done"))
    sid = await session_with(store, [*turns(1, 2), *long_turn])
    summarizer = RecordingSummarizer()
    out = await compact(store, sid, summarizer, SMALL)
    assert out.compacted and out.split_turn
    assert len(summarizer.calls) == 2
    assert "beginning of a single turn" in summarizer.calls[1][1]
    assert "[User]: refactor everything" in summarizer.calls[1][1]
    assert "[User]: refactor everything" not in summarizer.calls[0][1]
    assert out.record is not None and out.record.compaction is not None
    summary = out.record.compaction.summary
    assert summary.index("## Goal") < summary.index(SPLIT_TURN_HEADING)
    first_kept = (await store.records(sid, from_seq=out.first_kept_seq, to_seq=out.first_kept_seq))[
        0
    ]
    assert first_kept.message is not None and first_kept.message.role == "assistant"


@pytest.mark.parametrize("answer", ["raise", "", None, 42])
async def test_a_failing_summarizer_leaves_the_session_unchanged(
    store: SessionStore, answer: Any
) -> None:
    sid = await session_with(store, turns(1, 6))
    before = await raw_records(store)
    context = await store.context(sid)

    async def summarizer(system: str, prompt: str, max_tokens: int) -> Any:
        if answer == "raise":
            raise TimeoutError("the model took too long")
        return answer

    with pytest.raises(SummarizerError) as caught:
        await compact(store, sid, summarizer, SMALL)
    if answer == "raise":
        assert isinstance(caught.value.__cause__, TimeoutError)
    assert await raw_records(store) == before
    assert await store.context(sid) == context


async def test_a_compaction_racing_with_appends_loses_nothing(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 6))
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(system: str, prompt: str, max_tokens: int) -> str:
        started.set()
        await release.wait()
        return await offline_summarizer(system, prompt, max_tokens)

    async def writer() -> list[int]:
        await started.wait()
        seqs = []
        for n in range(20, 30):
            records = await store.append(sid, tool_turn(n, 50))
            seqs += [r.seq for r in records]
            await asyncio.sleep(0)
        release.set()
        return seqs

    out, appended = await asyncio.gather(compact(store, sid, slow, SMALL), writer())
    assert out.compacted and out.record is not None
    assert out.record.seq == appended[-1] + 1
    context = await store.context(sid)
    live = await store.records(sid, kinds=("message",), include_superseded=False)
    assert [r.seq for r in live][-len(appended) :] == appended
    assert context[1:] == [r.message for r in live]
    assert context[-1].text() == "done with step 29"
    assert tool_pairs_intact(context[1:])


async def test_a_compaction_written_meanwhile_is_a_conflict(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 6))

    async def interloper(system: str, prompt: str, max_tokens: int) -> str:
        # Called once per summary (twice for a split turn); the other writer writes once.
        if not await store.records(sid, kinds=("compaction",)):
            await store.append_compaction(sid, summary="someone else's", first_kept_seq=21)
        return "mine"

    before_count = len(await store.records(sid))
    with pytest.raises(ConflictError, match="compacted meanwhile"):
        await compact(store, sid, interloper, SMALL)
    after = await store.records(sid)
    assert len(after) == before_count + 1
    assert (await store.context(sid))[0].text() == summary_text("someone else's")


async def test_a_tombstone_at_the_cut_meanwhile_is_a_conflict(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 6))
    the_plan = await plan(store, sid, SMALL)
    assert the_plan is not None

    async def deleter(system: str, prompt: str, max_tokens: int) -> str:
        await store.tombstone(sid, the_plan.first_kept_seq)
        return "summary"

    with pytest.raises(ConflictError, match="changed while"):
        await compact(store, sid, deleter, SMALL)
    assert await store.records(sid, kinds=("compaction",)) == []


async def test_instructions_reach_the_prompt_and_events_fire(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 6))
    summarizer = RecordingSummarizer()
    events: list[CompactionEvent] = []
    out = await compact(
        store, sid, summarizer, SMALL, "keep the schema changes", on_event=events.append
    )
    assert summarizer.calls[0][1].endswith(
        "Additional focus for this summary: keep the schema changes"
    )
    assert [(e.type, e.reason) for e in events] == [
        ("compaction.start", "manual"),
        ("compaction.done", "manual"),
    ]
    assert events[1].tokens_before == out.tokens_before
    assert events[1].tokens_after == out.tokens_after


async def test_bad_arguments_are_refused(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 6))
    with pytest.raises(InvalidInputError):
        await compact(store, sid, offline_summarizer, {"keep_recent_tokens": 5})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await compact(store, sid, offline_summarizer, SMALL, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await compact(store, sid, "gpt", SMALL)  # type: ignore[arg-type]

    def boom(event: CompactionEvent) -> None:
        raise RuntimeError("hook bug")

    with pytest.raises(SessionDBError, match=r"hook raised on compaction\.start"):
        await compact(store, sid, offline_summarizer, SMALL, on_event=boom)
    assert await store.records(sid, kinds=("compaction",)) == []


# -- auto-compaction ------------------------------------------------------------------------


async def test_maybe_compact_applies_the_trigger(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 2))
    out = await maybe_compact(store, sid, FailingSummarizer(), SMALL)
    assert out.status == "not-needed" and out.context_tokens <= SMALL.threshold
    await store.append(sid, turns(3, 30))
    events: list[CompactionEvent] = []
    out = await maybe_compact(store, sid, offline_summarizer, SMALL, on_event=events.append)
    assert out.status == "compacted" and out.context_tokens > SMALL.threshold
    assert [(e.type, e.reason) for e in events] == [
        ("compaction.start", "threshold"),
        ("compaction.done", "threshold"),
    ]
    assert out.result is not None and events[1].tokens_after == out.result.tokens_after
    assert await context_tokens(store, sid) <= SMALL.threshold
    off = CompactionSettings(enabled=False, context_window=10, reserve_tokens=0)
    assert (await maybe_compact(store, sid, offline_summarizer, off)).status == "disabled"


async def test_circuit_breaker_stops_after_three_failures(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 30))
    other = await session_with(store, turns(1, 30))
    failing = FailingSummarizer()
    breaker = CircuitBreaker()
    events: list[CompactionEvent] = []
    outcomes = [
        await maybe_compact(store, sid, failing, SMALL, breaker=breaker, on_event=events.append)
        for _ in range(4)
    ]
    assert [o.status for o in outcomes] == ["failed", "failed", "failed", "breaker-open"]
    assert [o.failures for o in outcomes] == [1, 2, 3, 3]
    assert [o.breaker_open for o in outcomes] == [False, False, True, True]
    assert isinstance(outcomes[0].error, SummarizerError)
    assert "stopped" in outcomes[3].message
    assert failing.calls == 3  # the fourth call did not reach the summarizer
    assert [e.type for e in events if e.type != "compaction.start"] == [
        "compaction.failed",
        "compaction.failed",
        "compaction.failed",
        "compaction.disabled",
    ]
    assert await store.records(sid, kinds=("compaction",)) == []
    # Other sessions are not affected; a reset lets the session try again.
    assert (
        await maybe_compact(store, other, offline_summarizer, SMALL, breaker=breaker)
    ).status == "compacted"
    breaker.reset(sid)
    assert (
        await maybe_compact(store, sid, offline_summarizer, SMALL, breaker=breaker)
    ).status == "compacted"


async def test_a_success_resets_the_failure_count(store: SessionStore) -> None:
    sid = await session_with(store, turns(1, 30))
    breaker = CircuitBreaker()
    for _ in range(2):
        await maybe_compact(store, sid, FailingSummarizer(), SMALL, breaker=breaker)
    assert breaker.failures(sid) == 2
    assert (
        await maybe_compact(store, sid, offline_summarizer, SMALL, breaker=breaker)
    ).status == "compacted"
    assert breaker.failures(sid) == 0


# -- token figure ---------------------------------------------------------------------------


async def test_context_tokens_use_usage_without_reading_the_whole_context(
    store: SessionStore,
) -> None:
    sid = await session_with(store, turns(1, 200))
    await store.append(
        sid,
        [
            user("status?"),
            assistant("fine", usage={"input": 50_000, "output": 100, "cacheRead": 900}),
            user("x" * 400),
        ],
    )
    measured = await measure_context(store, sid)
    assert measured.source == "usage"
    assert measured.tokens == 51_000 + 100 == await context_tokens(store, sid)
    assert measured.records_read <= 32  # one window, not 803 records
    # A tombstone after the usage makes it stale: the estimate of the whole context.
    await store.tombstone(sid, 5)
    measured = await measure_context(store, sid)
    assert measured.source == "estimate"
    assert measured.tokens == estimate_tokens(await store.context(sid))


async def test_context_tokens_after_a_compaction_estimate_the_new_context(
    store: SessionStore,
) -> None:
    data = turns(1, 6)
    data[-1]["usage"] = {"input": 90_000}
    sid = await session_with(store, data)
    assert await context_tokens(store, sid) == 90_000
    await compact(store, sid, offline_summarizer, SMALL)
    measured = await measure_context(store, sid)
    assert measured.source == "estimate"
    assert measured.tokens == estimate_tokens(await store.context(sid))


# -- the real transcripts -----------------------------------------------------------------


async def test_pi_transcript_compacts_without_splitting_a_tool_pair(
    store: SessionStore, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = pi_messages(corpus_file(PI_SESSION))
    sid = await session_with(store, messages)
    out = await compact(store, sid, offline_summarizer)
    assert out.compacted and out.record is not None
    context = await store.context(sid)
    assert tool_pairs_intact(context[1:])
    assert context[1].role in ("user", "assistant")
    kept = estimate_tokens(context[1:])
    assert kept >= CompactionSettings().keep_recent_tokens * 0.9
    with capsys.disabled():
        print(
            f"\npi transcript ({len(messages)} messages): {out.tokens_before} -> "
            f"{out.tokens_after} tokens, first kept #{out.first_kept_seq}, "
            f"{out.total_seconds - out.summarizer_seconds:.3f}s outside the summarizer"
        )


async def test_pi_transcript_compacts_at_every_length(store: SessionStore) -> None:
    messages = pi_messages(corpus_file(PI_SESSION))
    sid = (await store.create_session()).id
    settings = CompactionSettings(keep_recent_tokens=4_000)
    step = 120
    for start in range(0, len(messages), step):
        await store.append(sid, messages[start : start + step])
        out = await compact(store, sid, offline_summarizer, settings)
        context = await store.context(sid)
        assert tool_pairs_intact(context[1:] if out.compacted or start else context)
    compactions = await store.records(sid, kinds=("compaction",))
    assert len(compactions) >= 5
    last = compactions[-1].compaction
    assert last is not None and last.read_files and last.modified_files
    assert not set(last.read_files) & set(last.modified_files)


def test_claude_code_session_is_in_the_corpus() -> None:
    assert corpus_file(CLAUDE_SESSION).stat().st_size > 1_000_000


# -- fuzzing ----------------------------------------------------------------------------------


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    keep=st.integers(-3, 3_000),
    instructions=st.one_of(st.none(), st.text(max_size=50), st.integers()),
    answer=st.one_of(st.text(max_size=30), st.none(), st.integers()),
    session=st.one_of(st.just("real"), st.text(max_size=30)),
)
def test_fuzz_compact_raises_only_sessiondb_errors(
    db_url: str, keep: int, instructions: Any, answer: Any, session: str
) -> None:
    async def body() -> None:
        async with SessionStore.open(db_url) as store:
            sid = await session_with(store, turns(1, 4)) if session == "real" else session

            async def summarizer(system: str, prompt: str, max_tokens: int) -> Any:
                return answer

            try:
                settings = CompactionSettings(keep_recent_tokens=keep)
                out = await compact(store, sid, summarizer, settings, instructions)
            except SessionDBError:
                return
            assert not out.compacted or (isinstance(answer, str) and answer.strip())

    asyncio.run(body())
