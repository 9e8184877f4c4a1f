"""The session spec's test scenarios S7.1–S7.18 (§7.7), one test each, in the spec's order.

The spec describes JSONL files; each test asserts the database-backed equivalent and says
which it is. Read this file beside the spec: every promise is either kept here, on
SQLite and on Postgres, or marked as a strict xfail naming the issue that will keep it
(a strict xfail fails CI the day the feature lands, so the marker cannot outlive it).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sqlite3
import time
from datetime import datetime
from typing import Any

import pytest
from helpers import sql as sqlh
from helpers.compaction import SECTIONS
from helpers.messages import assistant, result, user
from helpers.overlays import assert_only_grew, raw_records, session_with, texts
from sqlalchemy.engine import make_url

from sessiondb import (
    InvalidInputError,
    InvalidSessionIdError,
    Message,
    SessionStore,
)
from sessiondb.context import summary_text
from sessiondb.tables import RECORDS, SESSIONS

# §7.4 step 3a, copied verbatim from the spec's code block.
SPEC_SUMMARY_WRAPPER = """\
The conversation history before this point was compacted into the following summary:
<summary>
{compaction.summary}
</summary>"""


async def sql(store: SessionStore, statement: str, **params: Any) -> list[Any]:
    return await sqlh.fetch(store, statement, **params)


async def stored_payloads(store: SessionStore, session_id: str) -> list[Any]:
    rows = await sql(
        store,
        f"SELECT payload FROM {RECORDS} WHERE session_id = :sid ORDER BY seq",
        sid=session_id,
    )
    return [json.loads(row.payload) for row in rows]


# -- S7.1 – S7.9 ---------------------------------------------------------------------------


async def test_s7_1_a_new_session_is_a_head_row_and_no_records(store: SessionStore) -> None:
    # Files: a directory with an empty session.jsonl and metadata.json. Here: one row in
    # the sessions table (the metadata and the head of the stream), none in records.
    info = await store.create_session(model="claude-sonnet")

    (head,) = await sql(
        store,
        f"SELECT last_seq, message_count, last_message_at, model FROM {SESSIONS} WHERE id = :sid",
        sid=info.id,
    )
    assert (head.last_seq, head.message_count, head.model) == (0, 0, "claude-sonnet")
    assert await stored_payloads(store, info.id) == []
    assert await store.records(info.id) == []
    assert await store.context(info.id) == []
    assert await store.context_json(info.id) == "[]"
    got = await store.get_session(info.id)
    assert (got.last_seq, got.message_count, got.created_at) == (0, 0, info.created_at)
    assert got.last_message_at is None  # no message yet


async def test_s7_2_appends_only_add_rows(store: SessionStore) -> None:
    # Files: the log is never rewritten. Here: every earlier row stays byte for byte.
    sid = await session_with(store, [user("one"), assistant("two")])
    before = await raw_records(store)

    recs = await store.append(sid, [user("three")])
    after = await raw_records(store)

    assert assert_only_grew(before, after, 1) == [(sid, 3)]
    assert [r.seq for r in recs] == [3]
    assert [r.seq for r in await store.records(sid)] == [1, 2, 3]


async def test_s7_3_loading_rebuilds_the_history_with_overlays(store: SessionStore) -> None:
    sent = [user("q1"), assistant("calling", ["A"]), result("A"), assistant("a1"), user("q2")]
    sid = await session_with(store, sent)
    # Without overlays: the whole history, in order, as it was sent.
    assert [m.to_wire() for m in await store.context(sid)] == sent

    await store.append_compaction(sid, summary="asked q1, read A", first_kept_seq=4)  # seq 6
    await store.append(sid, [assistant("a2")])  # seq 7
    await store.tombstone(sid, 5)

    context = await store.context(sid)
    assert texts(context) == [summary_text("asked q1, read A"), "a1", "a2"]
    # Nothing was lost underneath: every record is still stored.
    everything = await store.records(sid, include_tombstoned=True)
    assert [r.kind for r in everything] == ["message"] * 5 + ["compaction", "message", "tombstone"]


async def test_s7_4_the_head_tracks_last_message_at_and_message_count(
    store: SessionStore,
) -> None:
    info = await store.create_session()
    seen: list[datetime] = []
    for n, batch in enumerate([[user("a")], [assistant("b"), user("c")], [assistant("d")]]):
        recs = await store.append(info.id, batch)
        head = await store.get_session(info.id)
        assert head.message_count == [1, 3, 4][n]
        assert head.last_seq == recs[-1].seq
        assert head.last_message_at == recs[-1].created_at
        seen.append(head.last_message_at)
    assert seen == sorted(seen)
    # Overlays are records but not messages: the count stays.
    await store.append_compaction(info.id, summary="s", first_kept_seq=3)
    head = await store.get_session(info.id)
    assert (head.message_count, head.last_seq) == (4, 5)


async def test_s7_5_listing_is_newest_activity_first(store: SessionStore) -> None:
    ids = [(await store.create_session(name=f"s{i}")).id for i in range(4)]
    for sid in [ids[2], ids[0], ids[3], ids[1], ids[0]]:
        await store.append(sid, [user(f"to {sid}")])
        await asyncio.sleep(0.002)  # distinct timestamps on coarse clocks

    page = await store.list_sessions(limit=2)
    rest = await store.list_sessions(limit=2, cursor=page.next_cursor)
    listed = page.items + rest.items

    assert [s.id for s in listed] == [ids[0], ids[1], ids[3], ids[2]]
    stamps = [s.last_message_at for s in listed]
    assert None not in stamps and stamps == sorted(stamps, reverse=True)  # type: ignore[type-var]


async def test_s7_6_compaction_appends_a_record_and_rewrites_nothing(
    store: SessionStore,
) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 6)])
    before = await raw_records(store)

    rec = await store.append_compaction(sid, summary="first four", first_kept_seq=5)

    after = await raw_records(store)
    assert assert_only_grew(before, after, 1) == [(sid, 6)]
    assert (rec.seq, rec.kind) == (6, "compaction")
    stored = (await stored_payloads(store, sid))[-1]
    assert stored["summary"] == "first four" and stored["firstKeptSeq"] == 5


async def test_s7_7_cron_sessions_carry_source_and_job_id(store: SessionStore) -> None:
    cron = await store.create_session(source="cron", cron_job_id="nightly-report")
    await store.create_session()

    (row,) = await sql(
        store, f"SELECT source, cron_job_id FROM {SESSIONS} WHERE id = :sid", sid=cron.id
    )
    assert (row.source, row.cron_job_id) == ("cron", "nightly-report")
    got = await store.get_session(cron.id)
    assert (got.source, got.cron_job_id) == ("cron", "nightly-report")
    assert got.model_dump(by_alias=True)["cronJobId"] == "nightly-report"
    listed = await store.list_sessions(source="cron")
    assert [s.id for s in listed.items] == [cron.id]


BAD_IDS = [
    "",
    "../../etc/passwd",
    "01j9z3k7q8r2v5x4w6y0a1b2c3",  # lower case
    "01J9Z3K7Q8R2V5X4W6Y0A1B2C",  # 25 characters
    "01J9Z3K7Q8R2V5X4W6Y0A1B2C3D",  # 27 characters
    "01J9Z3K7Q8R2V5X4W6Y0A1B2CI",  # I is not Crockford base32
    "01J9Z3K7Q8R2V5X4W6Y0A1B2CU",  # nor U
    "01J9Z3K7Q8R2V5X4W6Y0A1B2C\x00",
]


async def test_s7_8_session_ids_are_checked_before_any_use(store: SessionStore) -> None:
    # HTTP 400 in the spec; here InvalidSessionIdError (an InvalidInputError, a
    # ValueError) from every method taking an id, before any SQL.
    sid = await session_with(store, [user("kept")])
    before = await raw_records(store)
    calls = {
        "get_session": lambda bad: store.get_session(bad),
        "append": lambda bad: store.append(bad, [user("x")]),
        "context": lambda bad: store.context(bad),
        "context_json": lambda bad: store.context_json(bad),
        "records": lambda bad: store.records(bad),
        "append_compaction": lambda bad: store.append_compaction(
            bad, summary="s", first_kept_seq=1
        ),
        "tombstone": lambda bad: store.tombstone(bad, 1),
        "fork": lambda bad: store.fork(bad, at_seq=1),
        "rename": lambda bad: store.rename(bad, "n"),
        "delete_session": lambda bad: store.delete_session(bad),
    }
    for name, call in calls.items():
        for bad in BAD_IDS:
            with pytest.raises(InvalidSessionIdError) as caught:
                await call(bad)
            assert isinstance(caught.value, InvalidInputError | ValueError), name
    assert await raw_records(store) == before
    assert texts(await store.context(sid)) == ["kept"]


def _crash_worker(url: str, session_id: str, count: int, ready: Any) -> None:
    async def run() -> None:
        batch = [user(f"batch {i} " + "x" * 300) for i in range(count)]
        async with SessionStore.open(url) as store:
            ready.set()
            await store.append(session_id, batch)

    asyncio.run(run())


def _head_is_locked(url: str, session_id: str) -> bool:
    """Whether a writer holds the session's head (Postgres) or the database (SQLite) in an
    open transaction right now."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        conn = sqlite3.connect(parsed.database or url, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()  # rolls back our own probe if it got in
        return False
    return asyncio.run(_pg_row_locked(parsed, session_id))


async def _pg_row_locked(url: Any, session_id: str) -> bool:
    import asyncpg

    conn = await asyncpg.connect(
        user=url.username, host=url.host, port=url.port or 5432, database=url.database
    )
    try:
        async with conn.transaction():
            await conn.execute(
                f"SELECT 1 FROM {SESSIONS} WHERE id = $1 FOR UPDATE NOWAIT", session_id
            )
    except asyncpg.LockNotAvailableError:
        return True
    finally:
        await conn.close()
    return False


async def test_s7_9_a_crash_mid_append_leaves_nothing_partial(
    store: SessionStore, db_url: str
) -> None:
    # Files: a torn trailing line, ignored on reload. Here the transaction is the line: a
    # writer process SIGKILLed while its append holds the head leaves no row of its batch,
    # no head change and no gap.
    url = db_url if "://" in db_url else f"sqlite:///{db_url}"
    sid = await session_with(store, [user("before the crash")])
    before = await raw_records(store)

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    writer = ctx.Process(target=_crash_worker, args=(url, sid, 40_000, ready))
    writer.start()
    try:
        assert await asyncio.to_thread(ready.wait, 60), "the writer process did not start"
        deadline = time.monotonic() + 60
        caught = False
        while time.monotonic() < deadline and writer.is_alive():
            if await asyncio.to_thread(_head_is_locked, url, sid):
                writer.kill()
                caught = True
                break
    finally:
        writer.kill()
        writer.join(30)
    assert caught, "the writer finished (or never wrote) before it could be killed mid-append"

    after = await raw_records(store)
    assert after == before
    head = await store.get_session(sid)
    assert (head.last_seq, head.message_count) == (1, 1)
    # Reload and carry on: the next append takes seq 2, no gap.
    (rec,) = await store.append(sid, [user("after the crash")])
    assert rec.seq == 2
    assert texts(await store.context(sid)) == ["before the crash", "after the crash"]


# -- S7.10 ------------------------------------------------------------------------------------


async def test_s7_10_turns_on_one_session_are_queued_not_interleaved(
    store: SessionStore,
) -> None:
    sid = (await store.create_session()).id

    async def turn(n: int) -> None:
        async with store.turn(sid, timeout=30) as held:
            await held.append([user(f"q{n}")])
            await asyncio.sleep(0.01)
            await held.append([assistant(f"a{n}")])

    await asyncio.gather(*(turn(n) for n in range(4)))
    got = texts(await store.context(sid))
    pairs = [got[i : i + 2] for i in range(0, len(got), 2)]
    assert sorted(pairs) == [[f"q{n}", f"a{n}"] for n in range(4)]


# -- S7.11, S7.12 ---------------------------------------------------------------------------


async def test_s7_11_context_after_compaction_is_summary_then_kept(store: SessionStore) -> None:
    sid = await session_with(store, [user(f"m{i}") for i in range(1, 7)])
    await store.append_compaction(sid, summary="## Goal\nthe first three", first_kept_seq=4)
    await store.append(sid, [user("m8")])  # seq 7 is the compaction record

    context = await store.context(sid)
    wrapped = SPEC_SUMMARY_WRAPPER.replace("{compaction.summary}", "## Goal\nthe first three")
    assert context[0].role == "user"
    assert context[0].text() == wrapped  # byte for byte, the spec's markers
    assert summary_text("## Goal\nthe first three") == wrapped
    assert texts(context[1:]) == ["m4", "m5", "m6", "m8"]
    from_json = json.loads(await store.context_json(sid))
    assert from_json[0] == {"role": "user", "content": [{"type": "text", "text": wrapped}]}
    assert from_json == [m.to_wire() for m in context]


async def test_s7_12_content_is_always_blocks(store: SessionStore) -> None:
    sent: list[Any] = [
        {"zFirst": 1, "role": "user", "content": "hello", "timestamp": "2025-02-11T10:00:00Z"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "toolCall", "id": "tc_1", "name": "bash", "arguments": {"c": "ls"}},
                {"type": "futureBlock", "payload": {"b": 2, "a": 1}},
            ],
            "stopReason": "toolUse",
        },
        {"role": "toolResult", "content": "two files", "toolCallId": "tc_1", "isError": False},
        Message(role="assistant", content="done"),
    ]
    sid = await session_with(store, sent)
    (imported,) = await store.import_sessions([{"messages": [user("x"), sent[0]]}])

    as_blocks = [
        {
            "zFirst": 1,
            "role": "user",
            "content": [{"type": "text", "text": "hello"}],
            "timestamp": "2025-02-11T10:00:00Z",
        },
        sent[1],
        {
            "role": "toolResult",
            "content": [{"type": "text", "text": "two files"}],
            "toolCallId": "tc_1",
            "isError": False,
        },
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]
    # What is stored: blocks, never a bare string; everything else as given, in order.
    rows = await sql(
        store, f"SELECT payload FROM {RECORDS} WHERE session_id = :sid ORDER BY seq", sid=sid
    )
    assert [json.loads(r.payload) for r in rows] == as_blocks
    assert [list(json.loads(r.payload)) for r in rows] == [list(m) for m in as_blocks]
    assert (await stored_payloads(store, imported))[1] == as_blocks[0]
    # The three views agree with the stored rows.
    assert [m.to_wire() for m in await store.context(sid)] == as_blocks
    assert json.loads(await store.context_json(sid)) == as_blocks
    records = await store.records(sid)
    assert [r.message.to_wire() for r in records if r.message is not None] == as_blocks


async def test_s7_12_a_tool_result_names_its_call(store: SessionStore) -> None:
    # §7.2: toolCallId (and isError) are a tool result's, and isError is a boolean.
    sid = await session_with(store, [assistant("calling", ["A"])])
    for bad in (
        {"role": "toolResult", "content": "no call id"},
        {"role": "toolResult", "toolCallId": "A", "content": "x", "isError": "no"},
        {"role": "user", "content": "x", "isError": True},
    ):
        with pytest.raises(InvalidInputError):
            await store.append(sid, [result("A"), bad])
    assert [r.seq for r in await store.records(sid)] == [1]


# -- S7.13 – S7.18: the compaction engine -----------------------------------------------------


class RecordingSummarizer:
    """A summarizer (``(system, prompt, max_tokens) -> str``) that keeps its prompts."""

    def __init__(self) -> None:
        self.prompts: list[tuple[str, str]] = []

    async def __call__(self, system: str, prompt: str, max_tokens: int) -> str:
        self.prompts.append((system, prompt))
        n = len(self.prompts)
        return (
            f"## Goal\ngoal {n}\n\n## Constraints & Preferences\n- none\n\n## Progress\n"
            "### Done\n- [x] read\n\n### In Progress\n- [ ] edit\n\n### Blocked\n- none\n\n"
            f"## Key Decisions\n- **d{n}**: because\n\n## Next Steps\n1. next\n\n"
            f"## Critical Context\n- summary {n}"
        )


def file_tool(call_id: str, name: str, path: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "text", "text": f"{name} {path} " + "w" * 400},
            {"type": "toolCall", "id": call_id, "name": name, "arguments": {"path": path}},
        ],
    }


def long_tool_session(tag: str = "c") -> list[dict[str, Any]]:
    """Turns of a user request, a file tool call and its (long) result; call ids are
    ``{tag}{i}``, so a second batch needs its own tag."""
    out: list[dict[str, Any]] = []
    for i, (tool, path) in enumerate(
        [("read", "a.py"), ("read", "b.py"), ("edit", "b.py"), ("write", "c.py")] * 3
    ):
        out.append(user(f"step {i} " + "u" * 400))
        out.append(file_tool(f"{tag}{i}", tool, path))
        out.append(result(f"{tag}{i}", "r" * 2000))
    return out


async def compact(store: SessionStore, sid: str, summarizer: RecordingSummarizer) -> Any:
    from sessiondb import CompactionSettings

    settings = CompactionSettings(keep_recent_tokens=1500)
    return await store.compact(sid, summarizer, settings)


async def test_s7_13_compaction_never_cuts_between_a_tool_call_and_its_result(
    store: SessionStore,
) -> None:
    sid = await session_with(store, long_tool_session())
    await compact(store, sid, RecordingSummarizer())

    (overlay,) = await store.records(sid, kinds=["compaction"])
    assert overlay.compaction is not None
    kept_from = overlay.compaction.first_kept_seq
    (first_kept,) = await store.records(sid, from_seq=kept_from, to_seq=kept_from)
    assert first_kept.message is not None and first_kept.message.role in ("user", "assistant")
    context = await store.context(sid)
    calls = {c.id for m in context for c in m.tool_calls()}
    assert all(m.tool_call_id in calls for m in context if m.role == "toolResult")


async def test_s7_14_the_summary_is_structured(store: SessionStore) -> None:
    summarizer = RecordingSummarizer()
    sid = await session_with(store, long_tool_session())
    await compact(store, sid, summarizer)

    ((system, prompt),) = summarizer.prompts
    assert "Do NOT continue the conversation" in system or "not continue" in system.lower()
    for section in SECTIONS:
        assert section in prompt, section
    (overlay,) = await store.records(sid, kinds=["compaction"])
    assert overlay.compaction is not None
    assert overlay.compaction.summary.startswith("## Goal\ngoal 1")


async def test_s7_15_file_lists_are_cumulative(store: SessionStore) -> None:
    sid = await session_with(store, long_tool_session()[:6])  # reads a.py, b.py
    await store.append(sid, [user("pad " + "p" * 8000)] * 2)
    await compact(store, sid, RecordingSummarizer())
    await store.append(sid, long_tool_session()[9:] + [user("pad " + "p" * 8000)] * 2)
    await compact(store, sid, RecordingSummarizer())

    first, second = await store.records(sid, kinds=["compaction"])
    assert first.compaction is not None and second.compaction is not None
    assert set(first.compaction.read_files) <= set(second.compaction.read_files) | set(
        second.compaction.modified_files
    )
    assert "a.py" in second.compaction.read_files


async def test_s7_16_a_file_read_and_modified_is_listed_as_modified(
    store: SessionStore,
) -> None:
    sid = await session_with(store, long_tool_session())
    await compact(store, sid, RecordingSummarizer())

    (overlay,) = await store.records(sid, kinds=["compaction"])
    assert overlay.compaction is not None
    assert "b.py" in overlay.compaction.modified_files
    assert "b.py" not in overlay.compaction.read_files
    assert "<modified-files>" in overlay.compaction.summary


async def test_s7_17_a_second_compaction_uses_the_update_prompt(store: SessionStore) -> None:
    summarizer = RecordingSummarizer()
    sid = await session_with(store, long_tool_session())
    await compact(store, sid, summarizer)
    await store.append(sid, long_tool_session("d"))
    await compact(store, sid, summarizer)

    # A cut inside a turn adds a call for the turn's prefix; the history calls are the rest.
    history = [p for _, p in summarizer.prompts if "Rest of the Turn" not in p]
    first_prompt, second_prompt = history
    assert "<previous-summary>" not in first_prompt
    assert "<previous-summary>" in second_prompt
    assert "summary 1" in second_prompt  # the first summary is handed back to be kept


async def test_s7_18_the_summarizer_sees_flat_text_not_json(store: SessionStore) -> None:
    summarizer = RecordingSummarizer()
    sid = await session_with(store, long_tool_session())
    await compact(store, sid, summarizer)

    ((_, prompt),) = summarizer.prompts
    assert "[User]: step 0" in prompt
    assert "[Assistant]: read a.py" in prompt
    assert '[Assistant tool calls]: read(path="a.py")' in prompt
    assert "[Tool result]: rrr" in prompt
    assert '"role"' not in prompt and '"toolCall"' not in prompt
