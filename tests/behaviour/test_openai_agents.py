"""The OpenAI Agents SDK adapter: ``SessionDBSession`` passes what the SDK expects of a
``Session``, on SQLite and Postgres, and a real ``Runner.run`` keeps its conversation
in sessiondb. Needs the extra: ``pip install 'sessiondb[openai-agents]'``."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from helpers import sql
from helpers.processes import SPAWN, run_processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip(
    "agents",
    reason="the OpenAI Agents SDK is not installed: pip install 'sessiondb[openai-agents]'",
)

from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

from sessiondb import (
    InvalidInputError,
    SessionStore,
    offline_summarizer,
)
from sessiondb import statements as q
from sessiondb.context import summary_text
from sessiondb.integrations.openai_agents import ITEM_FIELD, SessionDBSession, message_items

TIMEOUT_S = 120

# One of every kind of Responses-API item a conversation holds, with the awkward values:
# NUL and a lone surrogate, an integer over 64 bits, floats, unicode, nested objects.
ITEMS: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": [{"type": "input_text", "text": "use tools"}]},
    {"role": "user", "content": "what's the weather in Zürich? \u0000 \ud800"},
    {
        "role": "user",
        "type": "message",
        "content": [
            {"type": "input_text", "text": "and this picture"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
                "detail": "auto",
            },
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
            {"type": "input_file", "file_id": "file-1"},
        ],
    },
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "need the weather tool"}],
        "encrypted_content": "gAAAA…",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Zürich", "days": 2}',
        "status": "completed",
    },
    {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_2",
        "name": "clock",
        "arguments": "not json",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21°C"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "12:00"}],
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Sunny, 21°C.", "annotations": [], "logprobs": []},
            {"type": "refusal", "refusal": "no forecast beyond that"},
        ],
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    },
    {"type": "custom_tool_call", "id": "ct_1", "call_id": "call_3", "name": "grep", "input": "x"},
    {"type": "custom_tool_call_output", "call_id": "call_3", "output": "found"},
    {"type": "item_reference", "id": "msg_0"},
    {
        "role": "user",
        "content": "thanks",
        "big": 2**70,
        "ratio": 0.1,
        "nested": {"a": [1, None, True]},
    },
]


def _turn(i: int) -> list[dict[str, Any]]:
    """Four items of a tool-using turn."""
    return [
        {"role": "user", "content": f"question {i}"},
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "lookup",
            "arguments": f'{{"q": {i}}}',
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{i}",
            "output": f"result {i} " + "x" * 40,
        },
        {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"answer {i}", "annotations": []}],
        },
    ]


async def _fill(session: SessionDBSession, items: int, batch: int = 1_000) -> list[dict[str, Any]]:
    added = [item for i in range(items // 4) for item in _turn(i)]
    for start in range(0, len(added), batch):
        await session.add_items(added[start : start + batch])
    return added


async def _sid(store: SessionStore, key: str) -> str:
    return (await store.session_for_key(key, create=False)).id


# -- the protocol -------------------------------------------------------------------------


async def test_is_an_sdk_session(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("chat", store=store)
        assert isinstance(session, Session)
        assert session.session_id == "chat"
        assert isinstance(session.session_settings, SessionSettings)
        with pytest.raises(InvalidInputError):
            SessionDBSession("", store=store)


async def test_items_round_trip_exactly(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("round-trip", store=store)
        added = copy.deepcopy(ITEMS)
        await session.add_items(added)
        assert added == ITEMS  # not changed in place
        assert await session.get_items() == ITEMS
        # Another session object on the same key (a new process, say) reads the same.
        assert await SessionDBSession("round-trip", store=store).get_items() == ITEMS


@pytest.mark.parametrize("text", ["NaN", '{"x": Infinity}', "[-Infinity]"])
async def test_arguments_holding_nan_round_trip_as_their_text(db_url: str, text: str) -> None:
    """Python's json reads NaN and Infinity, which a stored payload cannot hold: a call
    whose arguments hold them keeps its arguments as text (a hypothesis example CI met)."""
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": text}
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("nan", store=store)
        await session.add_items([copy.deepcopy(item)])
        assert await session.get_items() == [item]
        assert await SessionDBSession("nan", store=store).get_items() == [item]


async def test_the_context_is_a_valid_sessiondb_conversation(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("context", store=store)
        await session.add_items(ITEMS)
        messages = await store.context(await _sid(store, "context"))
        assert [m.role for m in messages] == [
            "user",
            "user",
            "user",
            "user",
            "assistant",
            "assistant",
            "assistant",
            "toolResult",
            "toolResult",
            "assistant",
            "assistant",
            "assistant",
            "toolResult",
            "assistant",
            "user",
        ]
        # Tool calls and results pair up by id; every result follows its call.
        calls = {c.id: i for i, m in enumerate(messages) for c in m.tool_calls()}
        results = {m.tool_call_id: i for i, m in enumerate(messages) if m.role == "toolResult"}
        assert set(calls) == set(results) == {"call_1", "call_2", "call_3"}
        assert all(calls[c] < results[c] for c in calls)
        weather = messages[5].tool_calls()[0]
        assert (weather.name, weather.arguments) == ("weather", {"city": "Zürich", "days": 2})
        assert messages[6].tool_calls()[0].arguments == {"arguments": "not json"}
        assert messages[2].text() == "what's the weather in Zürich? \u0000 \ud800"
        assert messages[3].content[1].type == "image"
        assert messages[4].content[0].type == "thinking"
        assert messages[8].text() == "12:00"
        assert messages[9].text() == "Sunny, 21°C.\nno forecast beyond that"
        assert all(ITEM_FIELD in (m.model_extra or {}) for m in messages)


async def test_add_get_pop_clear(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("life", store=store)
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.clear_session()
        # Reading, popping and clearing a key that was never written create nothing.
        assert (await store.list_sessions()).items == []

        await session.add_items([])
        await session.add_items(ITEMS[:3])
        await session.add_items(ITEMS[3:])
        assert await session.get_items() == ITEMS
        assert await session.pop_item() == ITEMS[-1]
        assert await session.get_items() == ITEMS[:-1]

        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.clear_session()  # nothing to clear: nothing written
        await session.add_items([{"role": "user", "content": "again"}])
        assert await session.get_items() == [{"role": "user", "content": "again"}]

        # Appending only: every item added is still stored, with the overlays.
        sid = await _sid(store, "life")
        records = await store.records(sid, include_tombstoned=True, include_superseded=True)
        messages = [r.message for r in records if r.message is not None]
        assert [item for m in messages for item in message_items(m)] == [
            *ITEMS,
            {"role": "user", "content": "again"},
        ]
        kinds = [r.kind for r in records]
        assert kinds.count("tombstone") == 1 and kinds.count("compaction") == 1


async def test_pop_removes_only_the_latest_item(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("pop", store=store)
        turn = _turn(0)
        await session.add_items(turn)
        assert await session.pop_item() == turn[3]
        # A tool result goes alone: its function_call stays (no pair cascade).
        assert await session.pop_item() == turn[2]
        assert await session.get_items() == turn[:2]
        assert await session.pop_item() == turn[1]
        assert await session.pop_item() == turn[0]
        assert await session.pop_item() is None
        assert await session.get_items() == []


async def test_limit(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("limit", store=store)
        await session.add_items(ITEMS)
        for n in (1, 2, 5, len(ITEMS), len(ITEMS) + 3):
            assert await session.get_items(limit=n) == ITEMS[-n:]
        assert await session.get_items(limit=0) == []
        await session.pop_item()
        assert await session.get_items(limit=2) == ITEMS[-3:-1]

        limited = SessionDBSession("limit", store=store, session_settings=SessionSettings(limit=3))
        assert await limited.get_items() == ITEMS[-4:-1]
        assert await limited.get_items(limit=1) == ITEMS[-2:-1]
        as_dict = SessionDBSession("limit", store=store, session_settings={"limit": 2})
        assert await as_dict.get_items() == ITEMS[-3:-1]


async def test_ids_are_isolated_and_case_sensitive(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        keys = ["chat", "Chat", "chat ", "other"]
        for key in keys:
            await SessionDBSession(key, store=store).add_items([{"role": "user", "content": key}])
        for key in keys:
            assert await SessionDBSession(key, store=store).get_items() == [
                {"role": "user", "content": key}
            ]
        await SessionDBSession("Chat", store=store).clear_session()
        assert await SessionDBSession("Chat", store=store).get_items() == []
        assert await SessionDBSession("chat", store=store).pop_item() == {
            "role": "user",
            "content": "chat",
        }
        assert await SessionDBSession("chat ", store=store).get_items() == [
            {"role": "user", "content": "chat "}
        ]


async def test_namespaces_isolate_ids(db_url: str) -> None:
    async with (
        SessionStore.open(db_url, namespace="a") as a,
        SessionStore.open(db_url, namespace="b") as b,
    ):
        await SessionDBSession("chat", store=a).add_items(ITEMS[:2])
        assert await SessionDBSession("chat", store=b).get_items() == []


async def test_concurrent_pops_in_tasks_never_return_an_item_twice(db_url: str) -> None:
    async with SessionStore.open(db_url) as one, SessionStore.open(db_url) as two:
        items = [{"role": "user", "content": f"m{i}", "n": i} for i in range(30)]
        await SessionDBSession("pops", store=one).add_items(items)
        sessions = [SessionDBSession("pops", store=s) for s in (one, two)]
        popped = await asyncio.gather(*(s.pop_item() for _ in range(20) for s in sessions))
        got = [p for p in popped if p is not None]
        assert len(got) == 30 and popped.count(None) == 10
        assert sorted(p["n"] for p in got) == list(range(30))  # type: ignore[index]


def _pop_in_process(url: str, pops: int, start: Any, results: Any) -> None:
    async def run() -> list[int]:
        session = SessionDBSession.from_url("procs", url=url)
        try:
            start.wait()
            got = [await session.pop_item() for _ in range(pops)]
            return [item["n"] for item in got if item is not None]  # type: ignore[index]
        finally:
            await session.close()

    try:
        results.put(asyncio.run(run()))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


async def test_concurrent_pops_in_processes_never_return_an_item_twice(db_url: str) -> None:
    items, procs, pops = 40, 4, 15
    session = SessionDBSession.from_url("procs", url=db_url)
    await session.add_items([{"role": "user", "content": f"m{i}", "n": i} for i in range(items)])
    await session.close()
    start, results = SPAWN.Barrier(procs), SPAWN.Queue()
    await asyncio.to_thread(
        run_processes,
        _pop_in_process,
        lambda _: (db_url, pops, start, results),
        procs,
        timeout=TIMEOUT_S,
    )
    got = [results.get(timeout=10) for _ in range(procs)]
    assert all(isinstance(g, list) for g in got), got
    popped = [n for g in got for n in g]
    assert sorted(popped) == list(range(items))  # each item once, none twice
    session = SessionDBSession.from_url("procs", url=db_url)
    assert await session.get_items() == []
    await session.close()


async def test_from_url_creates_tables(tmp_path: Any) -> None:
    url = str(tmp_path / "agents.sqlite3")
    session = SessionDBSession.from_url("k", url=url, create_tables=True)
    try:
        await session.add_items(ITEMS[:2])
        assert await session.get_items() == ITEMS[:2]
        assert session.store.namespace == "default"
    finally:
        await session.close()
    with pytest.raises(InvalidInputError):
        SessionDBSession.from_url("k", url=url, create_tables="yes")  # type: ignore[arg-type]


async def test_pruned_tool_results_show_the_marker(store: SessionStore) -> None:
    session = SessionDBSession("pruned", store=store)
    turn = _turn(0)
    await session.add_items(turn)
    sid = await _sid(store, "pruned")
    await store.append_prune(sid, [3], marker="[pruned]")
    assert await session.get_items() == [*turn[:2], {**turn[2], "output": "[pruned]"}, turn[3]]


# -- a real Runner.run -------------------------------------------------------------------


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_runner_two_turns_the_second_sees_the_first(db_url: str) -> None:
    model = ScriptedModel(
        [
            [function_call("add", {"a": 2, "b": 3}, call_id="call_add")],
            [assistant_message("2 + 3 = 5, Ada.", item_id="msg_a")],
            [assistant_message("Your name is Ada.", item_id="msg_b")],
        ]
    )
    agent = Agent(name="calc", instructions="Answer briefly.", model=model, tools=[add])
    config = RunConfig(tracing_disabled=True)
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("user:42/thread:7", store=store)
        first = await Runner.run(
            agent, "I am Ada. What is 2 + 3?", session=session, run_config=config
        )
        assert first.final_output == "2 + 3 = 5, Ada."
        second = await Runner.run(agent, "What is my name?", session=session, run_config=config)
        assert second.final_output == "Your name is Ada."
        model.assert_complete()

        # The second turn's model call saw the whole first turn, from sessiondb.
        seen = model.last_call.input  # type: ignore[union-attr]
        assert isinstance(seen, list)
        texts = [str(item) for item in seen]
        assert "I am Ada" in texts[0]
        assert any(item.get("type") == "function_call" for item in seen)
        assert any(
            item.get("type") == "function_call_output" and item.get("output") == "5"
            for item in seen
        )
        assert "2 + 3 = 5, Ada." in texts[-2] and "What is my name?" in texts[-1]

        items = await session.get_items()
        kinds = [item.get("type", item.get("role")) for item in items]
        assert kinds == [
            "user",
            "function_call",
            "function_call_output",
            "message",
            "user",
            "message",
        ]
        messages = await store.context(await _sid(store, "user:42/thread:7"))
        assert [m.role for m in messages] == [
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "user",
            "assistant",
        ]
        assert messages[1].tool_calls()[0].arguments == {"a": 2, "b": 3}
        assert messages[2].tool_call_id == "call_add" and messages[2].text() == "5"


# -- compaction of a 20,000-item session ---------------------------------------------------


async def test_compacted_session_reads_summary_and_kept_items(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("big", store=store)
        added = await _fill(session, 20_000)
        sid = await _sid(store, "big")
        result = await store.compact(sid, offline_summarizer)
        assert result.compacted and result.record is not None
        compaction = result.record.compaction
        assert compaction is not None
        kept = added[compaction.first_kept_seq - 1 :]
        assert 0 < len(kept) < 20_000
        summary = {"role": "user", "content": summary_text(compaction.summary)}
        assert await session.get_items() == [summary, *kept]
        assert await session.get_items(limit=200) == kept[-200:]
        assert await session.get_items(limit=len(kept) + 1) == [summary, *kept]
        # The summary item is the last to go, then the session is empty.
        await session.add_items([{"role": "user", "content": "after"}])
        assert (await session.get_items())[-1] == {"role": "user", "content": "after"}
        assert (await store.context(sid))[0].text() == summary["content"]


async def _records_read_postgres(url: str, bound: q.Bound) -> int:
    """Rows the tail statement reads from the records table (EXPLAIN ANALYZE of the
    generic plan the store's prepared statement settles on)."""
    import json

    stmt, params = bound
    db = sql.database(url)
    await db.execute("ANALYZE")
    (text,) = await db.explain(stmt, params, generic=True, options="ANALYZE, FORMAT JSON")
    plan = json.loads(text)[0]["Plan"]

    def walk(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") == "sessiondb_records":
            assert node["Node Type"] != "Seq Scan", node
            loops = node.get("Actual Loops", 1)
            own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * loops
        return own + sum(walk(child) for child in node.get("Plans", []))

    return walk(plan)


async def test_get_items_with_limit_costs_the_same_at_20k_as_at_1k(db_url: str) -> None:
    costs: dict[int, int] = {}
    async with SessionStore.open(db_url) as store:
        for size in (1_000, 20_000):
            session = SessionDBSession(f"size-{size}", store=store)
            await _fill(session, size)
            sid = await _sid(store, session.session_id)
            await store.compact(sid, offline_summarizer)
            assert len(await session.get_items(limit=200)) == 200
            db = sql.database(db_url)
            bound = q.context_tail(sid, store.namespace, db.flavour, 200)
            if db.flavour == q.SQLITE:
                costs[size] = await db.steps(*bound)
            else:
                costs[size] = await _records_read_postgres(db_url, bound)
    # The same work, give or take the index being one level deeper.
    assert costs[20_000] <= costs[1_000] * 1.1 + 10, costs


async def test_pop_after_a_compaction_ends_with_the_summary_item(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("summary-pop", store=store)
        turns = _turn(0) + _turn(1)
        await session.add_items(turns)
        sid = await _sid(store, "summary-pop")
        await store.append_compaction(sid, summary="the first turn", first_kept_seq=5)
        summary = {"role": "user", "content": summary_text("the first turn")}
        assert await session.get_items() == [summary, *turns[4:]]
        assert await session.get_items(limit=4) == turns[4:]
        assert await session.get_items(limit=5) == [summary, *turns[4:]]
        for expected in reversed(turns[4:]):
            assert await session.pop_item() == expected
        assert await session.pop_item() == summary
        assert await session.get_items() == []
        assert await session.pop_item() is None


# -- fuzz: any JSON item comes back as it went in ------------------------------------------

_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),  # NUL and lone surrogates included
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=12,
)
_parts = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["input_text", "output_text", "text"]), "text": st.text()},
            optional={"annotations": st.just([]), "extra": _json},
        ),
        st.dictionaries(_keys, _json, max_size=3),
        st.fixed_dictionaries({"type": st.sampled_from(["text", "toolCall", "image"])}),
    ),
    max_size=3,
)
_items = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system", "developer"]),
            "content": st.one_of(st.text(), _parts, _json),
        },
        optional={"type": st.just("message"), "id": st.text(max_size=5), "x": _json},
    ),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function_call", "custom_tool_call", "computer_call"]),
            "call_id": st.text(max_size=5),
        },
        optional={"name": _json, "arguments": st.one_of(st.text(), _json), "input": _json},
    ),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function_call_output", "computer_call_output"]),
            "call_id": st.text(max_size=5),
            "output": st.one_of(st.text(), _parts, _json),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("reasoning")}, optional={"summary": _json, "content": _parts}
    ),
    st.dictionaries(_keys, _json, max_size=4),
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_fuzz_items_round_trip(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(SessionStore.connect(db_url))
    session = SessionDBSession("fuzz", store=store)
    try:

        @settings(
            max_examples=250,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(item=_items)
        def check(item: dict[str, Any]) -> None:
            sent = copy.deepcopy(item)
            loop.run_until_complete(session.add_items([item]))
            assert item == sent
            assert loop.run_until_complete(session.get_items(limit=1)) == [sent]
            assert loop.run_until_complete(session.get_items())[-1] == sent
            assert loop.run_until_complete(session.pop_item()) == sent

        check()
    finally:
        loop.run_until_complete(store.close())
        loop.close()


async def test_a_session_deleted_and_made_again_is_found_by_its_key(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        first = SessionDBSession("again", store=store)
        await first.add_items([{"role": "user", "content": "old"}])
        await store.delete_session(await _sid(store, "again"))
        assert await first.get_items() == []
        second = SessionDBSession("again", store=store)
        await second.add_items([{"role": "user", "content": "new"}])
        # first cached the old id: it finds the new session by the key.
        assert await first.get_items() == [{"role": "user", "content": "new"}]
        await store.delete_session(await _sid(store, "again"))
        await first.add_items([{"role": "user", "content": "newest"}])
        assert await second.get_items() == [{"role": "user", "content": "newest"}]
        assert await second.pop_item() == {"role": "user", "content": "newest"}
