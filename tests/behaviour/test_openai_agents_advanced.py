"""``SessionDBSession`` beyond the plain ``Session`` protocol, on SQLite and Postgres:
the compaction-aware protocol (``run_compaction``: a sessiondb compaction overlay from a
summarizer or from the Responses compaction endpoint's output, nothing deleted, items
appended meanwhile kept), branches as forks (like ``AdvancedSQLiteSession``'s), and usage
per turn and per tool from the stored usage."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from helpers.frameworks import need_framework
from helpers.processes import SPAWN, run_processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    CompactionSettings,
    ConfigurationError,
    HasChildrenError,
    InvalidInputError,
    SessionDBError,
    SessionStore,
    SummarizerError,
    offline_summarizer,
)
from sessiondb.context import summary_text

need_framework("agents", "openai-agents")

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.memory import (  # noqa: E402
    OpenAIResponsesCompactionAwareSession,
    is_openai_responses_compaction_aware_session,
)
from agents.testing import (  # noqa: E402
    ModelStep,
    ScriptedModel,
    assistant_message,
    function_call,
)
from agents.usage import (  # noqa: E402
    InputTokensDetails,
    OutputTokensDetails,
    RequestUsage,
    Usage,
)

from sessiondb.integrations.openai_agents import (  # noqa: E402
    SessionDBSession,
    responses_compactor,
)

TIMEOUT_S = 120
# Small enough that a few turns have something to summarise.
SMALL = CompactionSettings(keep_recent_tokens=60)


def _turn(i: int, tool: str = "lookup") -> list[dict[str, Any]]:
    """Four items of a tool-using turn."""
    return [
        {"role": "user", "content": f"question {i}"},
        {
            "type": "function_call",
            "call_id": f"call_{i}",
            "name": tool,
            "arguments": f'{{"q": {i}}}',
        },
        {"type": "function_call_output", "call_id": f"call_{i}", "output": f"result {i}"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"answer {i} " + "y" * 60}],
        },
    ]


def _turns(start: int, stop: int) -> list[dict[str, Any]]:
    return [item for i in range(start, stop) for item in _turn(i)]


async def _sid(store: SessionStore, key: str) -> str:
    return (await store.session_for_key(key, create=False)).id


async def _payloads(store: SessionStore, sid: str) -> list[tuple[int, str, Any]]:
    """Every stored record of the lineage (tombstoned and superseded ones too)."""
    records = await store.records(sid, include_tombstoned=True, include_superseded=True)
    return [(r.seq, r.kind, r.message) for r in records]


# -- compaction ---------------------------------------------------------------------------


async def test_is_compaction_aware(store: SessionStore) -> None:
    session = SessionDBSession("aware", store=store, summarizer=offline_summarizer)
    assert is_openai_responses_compaction_aware_session(session)
    assert isinstance(session, OpenAIResponsesCompactionAwareSession)


async def test_run_compaction_writes_an_overlay_and_deletes_nothing(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession(
            "compact", store=store, summarizer=offline_summarizer, compaction_settings=SMALL
        )
        added = _turns(0, 10)
        await session.add_items(added)
        sid = await _sid(store, "compact")
        before = await _payloads(store, sid)
        await session.run_compaction({"force": True})
        after = await _payloads(store, sid)
        assert after[: len(before)] == before  # every record is still there, unchanged
        new = after[len(before) :]
        assert [kind for _, kind, _ in new] == ["compaction"]
        (compaction,) = await store.records(sid, kinds=("compaction",))
        assert compaction.compaction is not None
        first_kept = compaction.compaction.first_kept_seq
        assert 1 < first_kept <= len(added)
        summary = {"role": "user", "content": summary_text(compaction.compaction.summary)}
        assert "question 0" in compaction.compaction.summary
        assert await session.get_items() == [summary, *added[first_kept - 1 :]]


async def test_run_compaction_unforced_waits_for_the_threshold(store: SessionStore) -> None:
    trigger = CompactionSettings(keep_recent_tokens=60, context_window=900, reserve_tokens=100)
    session = SessionDBSession(
        "threshold", store=store, summarizer=offline_summarizer, compaction_settings=trigger
    )
    await session.add_items(_turns(0, 2))
    sid = await _sid(store, "threshold")
    await session.run_compaction({"force": False, "response_id": "resp_1"})
    await session.run_compaction()
    assert await store.records(sid, kinds=("compaction",)) == []
    await session.add_items(_turns(2, 30))
    assert await session.compact(force=False) is not None
    assert len(await store.records(sid, kinds=("compaction",))) == 1


async def test_the_runner_calls_run_compaction_after_a_turn(db_url: str) -> None:
    trigger = CompactionSettings(keep_recent_tokens=60, context_window=900, reserve_tokens=100)
    model = ScriptedModel([[assistant_message("noted " + "z" * 40, item_id="m1")]])
    agent = Agent(name="a", model=model)
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession(
            "runner", store=store, summarizer=offline_summarizer, compaction_settings=trigger
        )
        await session.add_items(_turns(0, 30))
        sid = await _sid(store, "runner")
        assert await store.records(sid, kinds=("compaction",)) == []
        await Runner.run(
            agent, "one more", session=session, run_config=RunConfig(tracing_disabled=True)
        )
        # The SDK called run_compaction after saving the turn; the context was over the
        # threshold, so a compaction was written and the turn is kept after it.
        assert len(await store.records(sid, kinds=("compaction",))) == 1
        items = await session.get_items()
        assert items[0]["content"].startswith(summary_text("")[:20])
        assert items[-2] == {"role": "user", "content": "one more"}
        assert len(await store.records(sid, kinds=("message",))) == 30 * 4 + 2


async def test_run_compaction_without_a_summarizer(store: SessionStore) -> None:
    session = SessionDBSession("plain", store=store)
    await session.add_items(_turns(0, 10))
    await session.run_compaction({"force": False})  # what the Runner does: nothing
    with pytest.raises(ConfigurationError):
        await session.run_compaction({"force": True})
    assert await store.records(await _sid(store, "plain"), kinds=("compaction",)) == []


class _Gate:
    """A summarizer that waits, once started, until the test lets it finish."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.go = asyncio.Event()

    async def __call__(self, system: str, prompt: str, max_tokens: int) -> str:
        self.started.set()
        await self.go.wait()
        return await offline_summarizer(system, prompt, max_tokens)


async def test_items_added_during_run_compaction_are_kept(db_url: str) -> None:
    gate = _Gate()
    async with SessionStore.open(db_url) as one, SessionStore.open(db_url) as two:
        session = SessionDBSession("race", store=one, summarizer=gate, compaction_settings=SMALL)
        other = SessionDBSession("race", store=two)
        added = _turns(0, 10)
        await session.add_items(added)
        running = asyncio.create_task(session.run_compaction({"force": True}))
        await gate.started.wait()
        raced = _turns(10, 13)
        for i in range(0, len(raced), 4):  # one turn per append, from another store
            await other.add_items(raced[i : i + 4])
        gate.go.set()
        await running
        sid = await _sid(one, "race")
        (compaction,) = await one.records(sid, kinds=("compaction",))
        assert compaction.compaction is not None
        first_kept = compaction.compaction.first_kept_seq
        assert first_kept <= len(added)  # the cut is in what was read, not in the race
        summary = {"role": "user", "content": summary_text(compaction.compaction.summary)}
        assert await other.get_items() == [summary, *added[first_kept - 1 :], *raced]
        messages = await one.records(sid, kinds=("message",))
        assert len(messages) == len(added) + len(raced)


def _append_in_process(url: str, worker: int, turns: int) -> None:
    async def run() -> None:
        session = SessionDBSession.from_url("procs", url=url)
        try:
            for t in range(turns):
                await session.add_items(_turn(1000 * (worker + 1) + t))
        finally:
            await session.close()

    asyncio.run(run())


async def test_items_added_by_other_processes_during_run_compaction_are_kept(
    pg_url: str,
) -> None:
    procs, turns = 3, 4

    ran: list[bool] = []

    async def summarizer(system: str, prompt: str, max_tokens: int) -> str:
        # While the summary is being written (it may take two calls), other processes
        # append.
        if ran:
            return await offline_summarizer(system, prompt, max_tokens)
        ran.append(True)
        await asyncio.to_thread(
            run_processes,
            _append_in_process,
            lambda p: (pg_url, p, turns),
            procs,
            timeout=TIMEOUT_S,
        )
        return await offline_summarizer(system, prompt, max_tokens)

    async with SessionStore.open(pg_url) as store:
        session = SessionDBSession(
            "procs", store=store, summarizer=summarizer, compaction_settings=SMALL
        )
        added = _turns(0, 10)
        await session.add_items(added)
        await session.run_compaction({"force": True})
        sid = await _sid(store, "procs")
        (compaction,) = await store.records(sid, kinds=("compaction",))
        assert compaction.compaction is not None
        first_kept = compaction.compaction.first_kept_seq
        items = await session.get_items()
        summary = {"role": "user", "content": summary_text(compaction.compaction.summary)}
        assert items[: 1 + len(added) - first_kept + 1] == [summary, *added[first_kept - 1 :]]
        raced = items[1 + len(added) - first_kept + 1 :]
        expected = [_turn(1000 * (w + 1) + t) for w in range(procs) for t in range(turns)]
        assert len(raced) == procs * turns * 4
        # Each process's turns arrive whole and in its order; all of them are there.
        got = [raced[i : i + 4] for i in range(0, len(raced), 4)]
        assert sorted(map(str, got)) == sorted(map(str, expected))
        for w in range(procs):
            mine = [g for g in got if g in [_turn(1000 * (w + 1) + t) for t in range(turns)]]
            assert mine == [_turn(1000 * (w + 1) + t) for t in range(turns)]
        assert len(await store.records(sid, kinds=("message",))) == len(added) + len(raced)


# -- compaction by the Responses endpoint -----------------------------------------------------


async def test_the_compactors_output_becomes_the_compaction(db_url: str) -> None:
    seen: list[list[Any]] = []

    async def compactor(items: list[Any]) -> list[Any]:
        seen.append(items)
        return [
            {"type": "compaction", "id": f"cmp_{len(seen)}", "encrypted_content": "enc…"},
            {"role": "user", "content": [{"type": "input_text", "text": f"kept {len(seen)}"}]},
        ]

    async with SessionStore.open(db_url) as store:
        session = SessionDBSession(
            "endpoint", store=store, compactor=compactor, compaction_settings=SMALL
        )
        added = _turns(0, 10)
        await session.add_items(added)
        sid = await _sid(store, "endpoint")
        before = await _payloads(store, sid)
        await session.run_compaction({"force": True, "response_id": "resp_1"})
        assert (await _payloads(store, sid))[: len(before)] == before
        (record,) = await store.records(sid, kinds=("compaction",))
        assert record.compaction is not None
        first_kept = record.compaction.first_kept_seq
        assert seen == [added[: first_kept - 1]]
        first_output = [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "enc…"},
            {"role": "user", "content": [{"type": "input_text", "text": "kept 1"}]},
        ]
        assert await session.get_items() == [*first_output, *added[first_kept - 1 :]]
        # A second compaction sends the first one's output in front of what it adds.
        more = _turns(10, 20)
        await session.add_items(more)
        await session.run_compaction({"force": True})
        assert seen[1][:2] == first_output
        assert seen[1][2 : 2 + len(added) - first_kept + 1] == added[first_kept - 1 :]
        items = await session.get_items()
        assert items[0]["id"] == "cmp_2" and items[-1] == more[-1]


async def test_items_added_while_the_compactor_runs_are_kept(db_url: str) -> None:
    started, go = asyncio.Event(), asyncio.Event()

    async def compactor(items: list[Any]) -> list[Any]:
        started.set()
        await go.wait()
        return [{"type": "compaction", "id": "cmp", "encrypted_content": "enc"}]

    async with SessionStore.open(db_url) as one, SessionStore.open(db_url) as two:
        session = SessionDBSession(
            "race-endpoint", store=one, compactor=compactor, compaction_settings=SMALL
        )
        added = _turns(0, 10)
        await session.add_items(added)
        running = asyncio.create_task(session.run_compaction({"force": True}))
        await started.wait()
        raced = _turns(10, 12)
        await SessionDBSession("race-endpoint", store=two).add_items(raced)
        go.set()
        await running
        (record,) = await one.records(await _sid(one, "race-endpoint"), kinds=("compaction",))
        assert record.compaction is not None
        first_kept = record.compaction.first_kept_seq
        assert await session.get_items() == [
            {"type": "compaction", "id": "cmp", "encrypted_content": "enc"},
            *added[first_kept - 1 :],
            *raced,
        ]


async def test_responses_compactor_calls_the_endpoint(store: SessionStore) -> None:
    calls: list[dict[str, Any]] = []

    class Responses:  # the stand-in for openai.AsyncOpenAI().responses: no network
        async def compact(self, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return type("Compacted", (), {"output": [{"type": "compaction", "id": "c"}]})()

    client = type("Client", (), {"responses": Responses()})()
    session = SessionDBSession(
        "client",
        store=store,
        compactor=responses_compactor(client, "gpt-4.1-mini"),
        compaction_settings=SMALL,
    )
    await session.add_items(_turns(0, 10))
    await session.run_compaction({"force": True})
    assert calls and calls[0]["model"] == "gpt-4.1-mini"
    assert calls[0]["input"][0] == {"role": "user", "content": "question 0"}
    assert (await session.get_items())[0] == {"type": "compaction", "id": "c"}


async def test_a_failing_compactor_writes_nothing(store: SessionStore) -> None:
    async def broken(items: list[Any]) -> list[Any]:
        raise RuntimeError("endpoint down")

    session = SessionDBSession("down", store=store, compactor=broken, compaction_settings=SMALL)
    await session.add_items(_turns(0, 10))
    with pytest.raises(SummarizerError):
        await session.run_compaction({"force": True})
    assert await store.records(await _sid(store, "down"), kinds=("compaction",)) == []


# -- branches ---------------------------------------------------------------------------------


async def test_branches_create_list_switch_delete(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("branches", store=store)
        main_items = _turns(0, 3)
        await session.add_items(main_items)
        turns = await session.get_conversation_turns()
        assert [t["turn"] for t in turns] == [1, 2, 3]
        assert turns[1]["full_content"] == "question 1"

        assert await session.create_branch_from_turn(2, "alt") == "alt"
        assert session.current_branch == "alt"
        assert await session.get_items() == main_items[:4]  # what came before turn 2
        alt_items = _turns(10, 11)
        await session.add_items(alt_items)
        assert await session.get_items() == [*main_items[:4], *alt_items]

        branches = {b["branch_id"]: b for b in await session.list_branches()}
        assert list(branches) == ["main", "alt"]
        assert branches["alt"]["is_current"] and not branches["main"]["is_current"]
        assert branches["alt"]["message_count"] == 8 and branches["alt"]["user_turns"] == 2
        assert branches["main"]["message_count"] == 12 and branches["main"]["user_turns"] == 3
        # By reference: the branch's session stores only what it wrote.
        alt_sid = branches["alt"]["session_id"]
        own = [r for r in await store.records(alt_sid) if r.session_id == alt_sid]
        assert len(own) == len(alt_items)

        await session.switch_to_branch("main")
        assert await session.get_items() == main_items
        # Another object on the same key finds the branch.
        other = SessionDBSession("branches", store=store)
        await other.switch_to_branch("alt")
        assert await other.get_items() == [*main_items[:4], *alt_items]

        with pytest.raises(InvalidInputError):
            await other.delete_branch("alt")  # its current branch
        with pytest.raises(InvalidInputError):
            await session.delete_branch("main")
        with pytest.raises(InvalidInputError):
            await session.create_branch_from_turn(1, "alt")  # the name is taken
        with pytest.raises(InvalidInputError):
            await session.create_branch_from_turn(9)
        await session.delete_branch("alt")
        assert [b["branch_id"] for b in await session.list_branches()] == ["main"]
        with pytest.raises(InvalidInputError):
            await session.switch_to_branch("alt")
        # The object whose branch went away is back on main.
        assert await other.get_items() == main_items
        assert other.current_branch == "main"
        assert await session.get_items() == main_items


def _branch_in_process(url: str, worker: int, start: Any) -> None:
    async def run() -> None:
        session = SessionDBSession.from_url("proc-branches", url=url)
        try:
            start.wait()
            await session.create_branch_from_turn(worker % 3 + 1, f"p{worker}")
            await session.add_items(_turn(100 + worker))
        finally:
            await session.close()

    asyncio.run(run())


async def test_branches_made_by_several_processes(pg_url: str) -> None:
    procs = 4
    async with SessionStore.open(pg_url) as store:
        session = SessionDBSession("proc-branches", store=store)
        main_items = _turns(0, 3)
        await session.add_items(main_items)
        start = SPAWN.Barrier(procs)
        await asyncio.to_thread(
            run_processes,
            _branch_in_process,
            lambda p: (pg_url, p, start),
            procs,
            timeout=TIMEOUT_S,
        )
        listed = {b["branch_id"]: b for b in await session.list_branches()}
        assert sorted(listed) == ["main", *(f"p{w}" for w in range(procs))]
        for w in range(procs):
            await session.switch_to_branch(f"p{w}")
            before = main_items[: 4 * (w % 3)]
            assert await session.get_items() == [*before, *_turn(100 + w)]
        await session.switch_to_branch("main")
        assert await session.get_items() == main_items


async def test_branch_of_a_branch_and_delete_with_force(store: SessionStore) -> None:
    session = SessionDBSession("nested", store=store)
    await session.add_items(_turns(0, 3))
    name = await session.create_branch_from_content("question 2")
    assert name.startswith("branch_from_turn_3_")
    await session.add_items(_turns(20, 22))
    assert await session.create_branch_from_turn(4, "deeper") == "deeper"
    assert await session.get_items() == [*_turns(0, 2), *_turns(20, 21)]
    listed = {b["branch_id"]: b for b in await session.list_branches()}
    assert listed["deeper"]["parent_branch"] == name
    with pytest.raises(HasChildrenError):
        await session.delete_branch(name)
    await session.delete_branch("deeper", force=True)
    assert session.current_branch == "main"
    assert await session.get_items() == _turns(0, 3)
    await session.delete_branch(name)
    assert [b["branch_id"] for b in await session.list_branches()] == ["main"]


async def test_branch_after_a_compaction_keeps_turn_numbers(store: SessionStore) -> None:
    session = SessionDBSession(
        "compacted-branch", store=store, summarizer=offline_summarizer, compaction_settings=SMALL
    )
    await session.add_items(_turns(0, 10))
    await session.run_compaction({"force": True})
    assert [t["turn"] for t in await session.get_conversation_turns()] == list(range(1, 11))
    compacted = await session.get_items()
    await session.create_branch_from_turn(10, "late")
    # The compaction was written after the fork point: the branch does not inherit it.
    assert await session.get_items() == _turns(0, 9)
    await session.switch_to_branch("main")
    assert await session.get_items() == compacted


# -- usage ------------------------------------------------------------------------------------


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _usage(inp: int, out: int, cached: int = 0) -> Usage:
    request = RequestUsage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=inp + out,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=1),
    )
    return Usage(
        requests=1,
        input_tokens=inp,
        output_tokens=out,
        total_tokens=inp + out,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=1),
        request_usage_entries=[request],
    )


async def test_usage_per_turn_and_tool_from_runner_runs(db_url: str) -> None:
    model = ScriptedModel(
        [
            ModelStep(
                output=[function_call("add", {"a": 2, "b": 3}, call_id="c1")],
                usage=_usage(100, 10, cached=40),
            ),
            ModelStep(output=[assistant_message("5", item_id="m1")], usage=_usage(120, 5)),
            ModelStep(output=[assistant_message("Ada", item_id="m2")], usage=_usage(150, 7)),
        ]
    )
    agent = Agent(name="calc", model=model, tools=[add])
    config = RunConfig(tracing_disabled=True)
    async with SessionStore.open(db_url) as store:
        session = SessionDBSession("usage", store=store)
        first = await Runner.run(agent, "2 + 3?", session=session, run_config=config)
        await session.store_run_usage(first)
        second = await Runner.run(agent, "my name?", session=session, run_config=config)
        await session.store_run_usage(second)

        items = await session.get_items()
        kinds = [i.get("type", i.get("role")) for i in items]
        assert kinds == ["user", "function_call", "function_call_output", "message"] * 1 + [
            "user",
            "message",
        ]
        assert await session.get_items(limit=2) == items[-2:]
        # Across the usage records after turn 1: read further back for the whole limit.
        assert await session.get_items(limit=3) == items[-3:]
        assert await session.get_items(limit=50) == items

        turns = await session.get_turn_usage()
        assert isinstance(turns, list)
        assert [(t["user_turn_number"], t["requests"]) for t in turns] == [(1, 2), (2, 1)]
        assert turns[0]["input_tokens"] == 220 and turns[0]["output_tokens"] == 15
        assert turns[0]["total_tokens"] == 235
        assert turns[0]["input_tokens_details"] == {"cached_tokens": 40, "cache_write_tokens": 0}
        assert turns[0]["output_tokens_details"] == {"reasoning_tokens": 2}
        assert await session.get_turn_usage(2) == turns[1]
        assert await session.get_turn_usage(7) == {}
        assert await session.get_tool_usage() == [("add", 1, 1)]
        totals = await session.get_session_usage()
        assert totals is not None
        assert (totals["requests"], totals["input_tokens"], totals["total_turns"]) == (3, 370, 2)
        # The session's token totals count it too (cached tokens as cache reads).
        info = await store.get_session(await _sid(store, "usage"))
        assert info.metrics.input_tokens == 330 and info.metrics.cache_read_tokens == 40

        # A usage record is no item: popping takes the last item (and the record).
        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]


async def test_usage_on_branches_counts_each_record_once(store: SessionStore) -> None:
    session = SessionDBSession("usage-branches", store=store)
    result = type("Result", (), {"context_wrapper": type("W", (), {"usage": _usage(10, 1)})()})
    for i in range(2):
        await session.add_items(_turn(i, tool="search"))
        await session.store_run_usage(result)
    await session.create_branch_from_turn(2, "b")
    await session.add_items(_turn(5, tool="fetch"))
    await session.store_run_usage(result)
    assert await session.get_tool_usage() == [("search", 1, 1), ("fetch", 1, 2)]
    assert await session.get_tool_usage("main") == [("search", 1, 1), ("search", 1, 2)]
    branch = await session.get_session_usage("b")
    assert branch is not None and branch["requests"] == 2  # turn 1 inherited, turn 2 its own
    whole = await session.get_session_usage()
    assert whole is not None and whole["requests"] == 3 and whole["input_tokens"] == 30
    with pytest.raises(InvalidInputError):
        await session.store_run_usage("not a result")


# -- fuzz: the new public methods raise only SessionDBError ------------------------------------

_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["main", "alt", "", " ", "\x00", "\ud800", "x" * 2000]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.one_of(st.booleans(), st.integers()), max_size=3),
)

_CALLS = st.one_of(
    st.tuples(st.just("run_compaction"), st.tuples(_junk)),
    st.tuples(st.just("compact"), st.tuples()),
    st.tuples(st.just("create_branch_from_turn"), st.tuples(_junk, _junk)),
    st.tuples(st.just("create_branch_from_content"), st.tuples(_junk, _junk)),
    st.tuples(st.just("switch_to_branch"), st.tuples(_junk)),
    st.tuples(st.just("delete_branch"), st.tuples(_junk, _junk)),
    st.tuples(st.just("list_branches"), st.tuples()),
    st.tuples(st.just("get_conversation_turns"), st.tuples(_junk)),
    st.tuples(st.just("find_turns_by_content"), st.tuples(_junk, _junk)),
    st.tuples(st.just("get_turn_usage"), st.tuples(_junk, _junk)),
    st.tuples(st.just("get_tool_usage"), st.tuples(_junk)),
    st.tuples(st.just("get_session_usage"), st.tuples(_junk)),
    st.tuples(st.just("store_run_usage"), st.tuples(_junk)),
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_fuzz_new_methods_raise_only_sessiondb_errors(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(SessionStore.connect(db_url))
    session = SessionDBSession(
        "fuzz", store=store, summarizer=offline_summarizer, compaction_settings=SMALL
    )
    loop.run_until_complete(session.add_items(_turns(0, 4)))
    try:

        @settings(
            max_examples=300,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(call=_CALLS)
        def check(call: tuple[str, tuple[Any, ...]]) -> None:
            name, args = call
            with contextlib.suppress(SessionDBError):
                loop.run_until_complete(getattr(session, name)(*args))
            # Whatever happened, the conversation still reads.
            loop.run_until_complete(session.get_items())

        check()
    finally:
        loop.run_until_complete(store.close())
        loop.close()
