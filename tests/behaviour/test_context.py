"""Context by query and compaction overlays, on both backends.

``store.context`` is the latest live compaction's summary plus every live message from its
``first_kept_seq`` on; ``append_compaction`` appends an overlay and rewrites nothing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import pytest
from helpers import sql
from helpers.messages import MISSING_ID, assistant, result, two_calls, user
from helpers.overlays import assert_only_grew, raw_records, session_with, summary_text, texts

from sessiondb import (
    Compaction,
    InvalidInputError,
    SeqConflictError,
    SessionNotFoundError,
    SessionStore,
)
from sessiondb.context import SUMMARY_PREFIX, SUMMARY_SUFFIX

# -- context without overlays -----------------------------------------------------------


async def test_context_of_an_empty_session_is_empty(store: SessionStore) -> None:
    info = await store.create_session()
    assert await store.context(info.id) == []


async def test_context_without_compaction_is_every_message_in_order(store: SessionStore) -> None:
    sent = [user("q1"), assistant("calling", ["A"]), result("A"), assistant("a1"), user("q2")]
    sid = await session_with(store, sent)

    context = await store.context(sid)

    assert [m.to_wire() for m in context] == sent
    assert [m.role for m in context] == ["user", "assistant", "toolResult", "assistant", "user"]
    assert context[2].tool_call_id == "A"


async def test_context_of_a_missing_session_raises(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.context(MISSING_ID)


async def test_context_of_another_namespace_is_not_found(store: SessionStore, db_url: str) -> None:
    sid = await session_with(store, [user("mine")])
    async with SessionStore.open(db_url, namespace="tenant-b") as other:
        with pytest.raises(SessionNotFoundError):
            await other.context(sid)
        with pytest.raises(SessionNotFoundError):
            await other.append_compaction(sid, summary="s", first_kept_seq=1)
    assert texts(await store.context(sid)) == ["mine"]


# -- compaction -------------------------------------------------------------------------


async def test_compaction_context_is_summary_then_kept_messages(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 7)])

    await store.append_compaction(sid, summary="the first five", first_kept_seq=4)
    await store.append(sid, [user("m8")])  # seq 7 is the compaction record

    context = await store.context(sid)
    assert texts(context) == [summary_text("the first five"), "m4", "m5", "m6", "m8"]
    assert context[0].role == "user"
    assert context[0].text() == (
        "The conversation history before this point was compacted into the following "
        "summary:\n<summary>\nthe first five\n</summary>"
    )
    assert context[0].text().startswith(SUMMARY_PREFIX)
    assert context[0].text().endswith(SUMMARY_SUFFIX)


async def test_append_compaction_stores_one_overlay_row(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), assistant("b"), user("c")])
    before = await raw_records(store)

    record = await store.append_compaction(
        sid,
        summary="sum",
        first_kept_seq=3,
        tokens_before=1234,
        read_files=["README.md"],
        modified_files=["src/app.py"],
    )

    assert record.seq == 4
    assert record.kind == "compaction"
    assert record.session_id == sid
    assert record.compaction == Compaction(
        summary="sum",
        first_kept_seq=3,
        tokens_before=1234,
        read_files=["README.md"],
        modified_files=["src/app.py"],
    )
    (key,) = assert_only_grew(before, await raw_records(store), added=1)
    assert key == (sid, 4)
    stored = await store.records(sid, kinds=["compaction"])
    assert [(r.seq, r.compaction) for r in stored] == [(4, record.compaction)]
    info = await store.get_session(sid)
    assert (info.last_seq, info.message_count) == (4, 3)


async def test_compaction_rows_have_the_queried_columns(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), user("b")])
    await store.append_compaction(sid, summary="s", first_kept_seq=2)
    (row,) = await sql.fetch(
        store,
        "SELECT kind, role, first_kept_seq, target_seq, payload FROM sessiondb_records"
        " WHERE session_id = :sid AND seq = 3",
        sid=sid,
    )
    assert (row.kind, row.role, row.first_kept_seq, row.target_seq) == ("compaction", None, 2, None)
    assert '"firstKeptSeq":2' in row.payload.replace(" ", "")


async def test_context_after_two_compactions_uses_only_the_latest(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 6)])
    await store.append_compaction(sid, summary="first", first_kept_seq=3)  # seq 6
    await store.append(sid, [user("m7"), user("m8")])
    before = await raw_records(store)

    await store.append_compaction(sid, summary="second", first_kept_seq=7)  # seq 9

    assert texts(await store.context(sid)) == [summary_text("second"), "m7", "m8"]
    assert_only_grew(before, await raw_records(store), added=1)
    # Both overlays stay stored; the history they superseded does too.
    all_records = await store.records(sid)
    assert [r.seq for r in all_records] == list(range(1, 10))
    assert [r.seq for r in all_records if r.kind == "compaction"] == [6, 9]


async def test_compaction_may_keep_from_the_first_message(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), user("b")])
    await store.append_compaction(sid, summary="nothing dropped", first_kept_seq=1)
    assert texts(await store.context(sid)) == [summary_text("nothing dropped"), "a", "b"]


async def test_compaction_may_cut_before_a_call_or_after_its_results(store: SessionStore) -> None:
    sid = await session_with(
        store,
        [*two_calls(), assistant("done")],
    )
    await store.append_compaction(sid, summary="before call", first_kept_seq=2)
    assert texts(await store.context(sid)) == [
        summary_text("before call"),
        "call",
        "result A",
        "result B",
        "done",
    ]
    await store.append_compaction(sid, summary="after results", first_kept_seq=5)
    assert texts(await store.context(sid)) == [summary_text("after results"), "done"]


async def test_compaction_keeps_messages_appended_after_it(store: SessionStore) -> None:
    """The overlay names only first_kept_seq: what arrives later is simply kept."""
    sid = await session_with(store, [user("old"), user("kept")])
    await store.append_compaction(sid, summary="s", first_kept_seq=2)
    await store.append(sid, [assistant("new1"), user("new2")])
    assert texts(await store.context(sid)) == [summary_text("s"), "kept", "new1", "new2"]


async def test_append_compaction_with_expected_seq(store: SessionStore) -> None:
    sid = await session_with(store, [user("a"), user("b")])
    before = await raw_records(store)
    with pytest.raises(SeqConflictError):
        await store.append_compaction(sid, summary="s", first_kept_seq=2, expected_seq=1)
    assert await raw_records(store) == before
    record = await store.append_compaction(sid, summary="s", first_kept_seq=2, expected_seq=2)
    assert record.seq == 3


@pytest.mark.parametrize("bad", [-1, "2", True, 2.0])
async def test_append_compaction_refuses_a_bad_expected_seq(store: SessionStore, bad: Any) -> None:
    """Refused before SQL, as append refuses it (SQLite took "2", Postgres took True)."""
    sid = await session_with(store, [user("a"), user("b")])
    before = await raw_records(store)
    with pytest.raises(InvalidInputError, match="expected_seq must be a non-negative int"):
        await store.append_compaction(sid, summary="s", first_kept_seq=2, expected_seq=bad)
    assert await raw_records(store) == before


# -- refusals ---------------------------------------------------------------------------


async def _refusal_fixture(store: SessionStore) -> str:
    """1 user, 2 assistant(call A,B), 3 result A, 4 result B, 5 assistant, 6 user,
    7 compaction(first_kept 5), 8 user, 9 tombstone(8), 10 assistant."""
    sid = await session_with(
        store,
        [
            *two_calls(),
            assistant("answer"),
            user("q2"),
        ],
    )
    await store.append_compaction(sid, summary="s", first_kept_seq=5)
    await store.append(sid, [user("oops")])
    await store.tombstone(sid, 8)
    await store.append(sid, [assistant("a2")])
    return sid


@pytest.mark.parametrize(
    ("first_kept_seq", "why"),
    [
        (7, "the compaction record, not a message"),
        (9, "a tombstone record, not a message"),
        (8, "a tombstoned message"),
        (1, "superseded by the current compaction"),
        (3, "superseded, and would also split the pair"),
        (11, "beyond the head"),
        (10_000, "far beyond the head"),
    ],
)
async def test_compaction_refuses_a_first_kept_seq_outside_the_context(
    store: SessionStore, first_kept_seq: int, why: str
) -> None:
    sid = await _refusal_fixture(store)
    before = await raw_records(store)
    with pytest.raises(InvalidInputError, match=f"first_kept_seq {first_kept_seq} "):
        await store.append_compaction(sid, summary=why, first_kept_seq=first_kept_seq)
    assert await raw_records(store) == before
    assert (await store.get_session(sid)).last_seq == 10


@pytest.mark.parametrize("first_kept_seq", [3, 4])
async def test_compaction_refuses_to_split_a_tool_pair(
    store: SessionStore, first_kept_seq: int
) -> None:
    sid = await session_with(
        store,
        [*two_calls(), assistant("done")],
    )
    before = await raw_records(store)
    with pytest.raises(InvalidInputError, match="separate a tool call from its result"):
        await store.append_compaction(sid, summary="s", first_kept_seq=first_kept_seq)
    assert await raw_records(store) == before
    assert texts(await store.context(sid)) == ["q", "call", "result A", "result B", "done"]


@pytest.mark.parametrize("bad", [0, -1, True, "3", 2.0, None])
async def test_compaction_refuses_a_first_kept_seq_that_is_not_a_positive_int(
    store: SessionStore, bad: Any
) -> None:
    sid = await session_with(store, [user("a"), user("b")])
    before = await raw_records(store)
    with pytest.raises(InvalidInputError):
        await store.append_compaction(sid, summary="s", first_kept_seq=bad)
    assert await raw_records(store) == before


async def test_compaction_of_a_missing_session_raises(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.append_compaction(MISSING_ID, summary="s", first_kept_seq=1)


async def test_compaction_refuses_a_bad_summary(store: SessionStore) -> None:
    sid = await session_with(store, [user("a")])
    with pytest.raises(InvalidInputError):
        await store.append_compaction(sid, summary=None, first_kept_seq=1)  # type: ignore[arg-type]
    assert await store.records(sid, kinds=["compaction"]) == []


# -- records() --------------------------------------------------------------------------


async def test_records_filters(store: SessionStore) -> None:
    sid = await _refusal_fixture(store)

    default = await store.records(sid)
    assert [r.seq for r in default] == [1, 2, 3, 4, 5, 6, 7, 9, 10]  # 8 is tombstoned
    everything = await store.records(sid, include_tombstoned=True)
    assert [r.seq for r in everything] == list(range(1, 11))
    assert [r.kind for r in everything] == ["message"] * 6 + ["compaction", "message"] + [
        "tombstone",
        "message",
    ]
    assert everything[7].message is not None and everything[7].message.text() == "oops"
    assert everything[8].tombstone is not None and everything[8].tombstone.target_seq == 8

    # Superseded messages go; overlays stay.
    live = await store.records(sid, include_superseded=False)
    assert [r.seq for r in live] == [5, 6, 7, 9, 10]
    live_all = await store.records(sid, include_superseded=False, include_tombstoned=True)
    assert [r.seq for r in live_all] == [5, 6, 7, 8, 9, 10]

    assert [r.seq for r in await store.records(sid, kinds=["message"])] == [1, 2, 3, 4, 5, 6, 10]
    assert [r.seq for r in await store.records(sid, kinds=["tombstone", "compaction"])] == [7, 9]
    assert [r.seq for r in await store.records(sid, from_seq=4, to_seq=7)] == [4, 5, 6, 7]
    assert await store.records(sid, from_seq=11) == []


async def test_records_of_a_missing_session_raises(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.records(MISSING_ID)


async def test_tombstoning_the_latest_compaction_falls_back_in_records(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 5)])
    await store.append_compaction(sid, summary="c1", first_kept_seq=2)  # 5
    await store.append_compaction(sid, summary="c2", first_kept_seq=4)  # 6
    assert [r.seq for r in await store.records(sid, include_superseded=False)] == [4, 5, 6]
    await store.tombstone(sid, 6)
    assert [r.seq for r in await store.records(sid, include_superseded=False)] == [2, 3, 4, 5, 7]


# -- concurrency ------------------------------------------------------------------------


async def _check_nothing_lost(
    store: SessionStore, sid: str, expected_texts: set[str], snapshots: list[Any]
) -> None:
    """Every message once, seqs gapless, every earlier row unchanged, and the context
    is the latest summary plus every message from its first_kept_seq on."""
    info = await store.get_session(sid)
    stored = await store.records(sid, include_tombstoned=True)
    assert [r.seq for r in stored] == list(range(1, info.last_seq + 1))
    message_texts = [r.message.text() for r in stored if r.message is not None]
    assert sorted(message_texts) == sorted(expected_texts)
    assert info.message_count == len(expected_texts)
    final = await raw_records(store)
    for snapshot in snapshots:
        assert [k for k in snapshot if final.get(k) != snapshot[k]] == []
    compactions = [r for r in stored if r.compaction is not None]
    latest = compactions[-1].compaction
    assert latest is not None
    kept = [
        r.message.text() for r in stored if r.message is not None and r.seq >= latest.first_kept_seq
    ]
    assert texts(await store.context(sid)) == [summary_text(latest.summary), *kept]


async def test_concurrent_appends_while_compacting_lose_nothing(store: SessionStore) -> None:
    sid = await session_with(store, [user("seed")])
    writers, per_writer = 8, 25
    done = asyncio.Event()
    compacted: list[tuple[int, int]] = []  # (compaction seq, head right before)
    snapshots: list[Any] = []

    written = [0] * writers

    async def writer(w: int) -> None:
        # Keep writing until the compactor has run a few times, however fast appends are.
        while written[w] < per_writer or len(compacted) < 3:
            await store.append(sid, user(f"w{w}-{written[w]}"))
            written[w] += 1

    async def compactor() -> None:
        while not done.is_set():
            messages = await store.records(sid, kinds=["message"])
            snapshots.append(await raw_records(store))
            head = (await store.get_session(sid)).last_seq
            record = await store.append_compaction(
                sid, summary=f"up to {messages[-1].seq}", first_kept_seq=messages[-1].seq
            )
            compacted.append((record.seq, head))
            await asyncio.sleep(0.01)

    async def writers_then_stop() -> None:
        await asyncio.gather(*(writer(w) for w in range(writers)))
        done.set()

    await asyncio.gather(writers_then_stop(), compactor())

    assert len(compacted) >= 2
    final_head = (await store.get_session(sid)).last_seq
    assert any(seq < final_head - 1 for seq, _ in compacted)  # writers kept going after one
    expected = {"seed"} | {f"w{w}-{i}" for w in range(writers) for i in range(written[w])}
    await _check_nothing_lost(store, sid, expected, snapshots)


def _append_from_process(url: str, session_id: str, worker: int, count: int) -> None:
    async def run() -> None:
        async with SessionStore.open(url) as store:
            for i in range(count):
                await store.append(session_id, user(f"p{worker}-{i}"))

    asyncio.run(run())


@pytest.mark.postgres_only
async def test_appends_from_processes_while_compacting_lose_nothing(pg_url: str) -> None:
    workers, per_worker = 4, 60
    spawn = multiprocessing.get_context("spawn")
    async with SessionStore.open(pg_url) as store:
        sid = await session_with(store, [user("seed")])
        procs = [
            spawn.Process(target=_append_from_process, args=(pg_url, sid, w, per_worker))
            for w in range(workers)
        ]
        for p in procs:
            p.start()
        try:
            compacted_while_running = 0
            snapshots: list[Any] = []
            while any(p.is_alive() for p in procs):
                messages = await store.records(sid, kinds=["message"])
                if len(messages) > 1:
                    snapshots.append(await raw_records(store))
                    await store.append_compaction(
                        sid, summary=f"up to {messages[-1].seq}", first_kept_seq=messages[-1].seq
                    )
                    if any(p.is_alive() for p in procs):
                        compacted_while_running += 1
                await asyncio.sleep(0.02)
        finally:
            for p in procs:
                p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0] * workers
        assert compacted_while_running >= 1
        messages = await store.records(sid, kinds=["message"])
        await store.append_compaction(sid, summary="final", first_kept_seq=messages[-1].seq)
        expected = {"seed"} | {f"p{w}-{i}" for w in range(workers) for i in range(per_worker)}
        await _check_nothing_lost(store, sid, expected, snapshots)


async def test_context_json_is_the_context_as_wire_json(store: SessionStore) -> None:
    import json

    odd = {
        "role": "toolResult",
        "toolCallId": "c1",
        "content": [{"type": "text", "text": "\u0000 \ud800 😀"}],
        "big": 2**70,
    }
    sid = await session_with(
        store,
        [user("old"), assistant("calling", ["c1"]), odd, user("kept"), assistant("answer")],
    )
    await store.append_compaction(sid, summary="before", first_kept_seq=4)
    await store.tombstone(sid, 5)
    models = await store.context(sid)
    assert texts(models) == [summary_text("before"), "kept"]
    assert json.loads(await store.context_json(sid)) == [m.to_wire() for m in models]

    await store.tombstone(sid, 6)  # the compaction: the whole history is back, odd included
    as_json = json.loads(await store.context_json(sid))
    assert as_json[2] == odd
    assert as_json == [m.to_wire() for m in await store.context(sid)]
    with pytest.raises(SessionNotFoundError):
        await store.context_json("01J9Z3K7Q8R2V5X4W6Y0A1B2C3")
