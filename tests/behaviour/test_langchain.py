"""The LangChain chat message history: every message kind round-trips, clear appends
tombstones, the sync methods work off the loop, and RunnableWithMessageHistory works."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip(
    "langchain_core", reason="langchain-core is not installed: pip install 'sessiondb[langchain]'"
)

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from sessiondb import InvalidInputError, SessionStore, jsoncodec
from sessiondb.formats.openai_chat import to_openai_chat
from sessiondb.integrations.langchain import (
    SessionDBChatMessageHistory,
    SyncCallInLoopError,
    home_of,
    message_from_wire,
    message_to_wire,
)
from sessiondb.models import wire_message_error

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"


def every_kind() -> list[BaseMessage]:
    return [
        SystemMessage("You are a weather bot.", id="sys-1"),
        HumanMessage("Weather in Paris and Rome?", id="h-1", name="alice"),
        AIMessage(
            "Let me look.",
            id="run-1",
            tool_calls=[
                {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"},
                {"name": "get_weather", "args": {"city": "Rome"}, "id": "call_2"},
            ],
            usage_metadata={
                "input_tokens": 120,
                "output_tokens": 30,
                "total_tokens": 150,
                "input_token_details": {"cache_read": 100, "cache_creation": 0},
            },
            response_metadata={"model_name": "gpt-4o", "finish_reason": "tool_calls"},
        ),
        ToolMessage("15 °C", tool_call_id="call_1", name="get_weather", id="t-1"),
        ToolMessage(
            "upstream timeout",
            tool_call_id="call_2",
            status="error",
            artifact={"http_status": 504},
            id="t-2",
        ),
        AIMessage(
            [
                {"type": "text", "text": "Paris is mild;"},
                {"type": "text", "text": "Rome timed out."},
            ],
            id="run-2",
            additional_kwargs={"refusal": None},
        ),
        HumanMessage(
            [
                {"type": "text", "text": "And this picture?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
            id="h-2",
        ),
        AIMessage(
            [{"type": "tool_use", "id": "toolu_1", "name": "zoom", "input": {"x": 1}}],
            id="run-3",
            tool_calls=[{"name": "zoom", "args": {"x": 1}, "id": "toolu_1"}],
        ),
        ToolMessage([{"type": "text", "text": "zoomed"}], tool_call_id="toolu_1"),
        ChatMessage("Looks good.", role="critic", id="c-1"),
        AIMessage(""),
    ]


def test_every_message_kind_round_trips_through_the_wire_shape() -> None:
    for message in every_kind():
        wire = message_to_wire(message)
        assert wire_message_error(wire) is None, message
        stored = jsoncodec.loads(jsoncodec.dumps(wire))
        assert message_from_wire(stored) == message
        assert type(message_from_wire(stored)) is type(message)


def test_the_wire_shape_is_sessiondbs_own() -> None:
    system, human, ai, tool, failed, *_ = (message_to_wire(m) for m in every_kind())
    assert system["role"] == human["role"] == "user"
    assert human["content"] == [{"type": "text", "text": "Weather in Paris and Rome?"}]
    assert human["langchain"] == {"type": "human", "data": {"id": "h-1", "name": "alice"}}
    assert ai["role"] == "assistant"
    assert ai["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "toolCall", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"type": "toolCall", "id": "call_2", "name": "get_weather", "arguments": {"city": "Rome"}},
    ]
    assert ai["usage"] == {
        "input": 20,
        "output": 30,
        "cacheRead": 100,
        "cacheWrite": 0,
        "totalTokens": 150,
    }
    assert (tool["role"], tool["toolCallId"], tool["toolName"]) == (
        "toolResult",
        "call_1",
        "get_weather",
    )
    assert failed["isError"] is True
    assert failed["langchain"]["data"]["artifact"] == {"http_status": 504}


def test_what_is_not_a_message_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="LangChain message"):
        message_to_wire({"role": "user", "content": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="key"):
        SessionDBChatMessageHistory("", "x.db")


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[SessionStore]:
    async with SessionStore.open(db_url) as s:
        yield s


async def test_history_round_trips_every_kind(store: SessionStore) -> None:
    history = SessionDBChatMessageHistory("user:42/thread:7", store)
    assert await history.aget_messages() == []
    assert history.session_id is None  # reading does not create the session
    messages = every_kind()
    await history.aadd_messages(messages[:3])
    await history.aadd_messages(messages[3:])
    assert await history.aget_messages() == messages

    # A second history on the same key sees the same session; keys are exact.
    again = SessionDBChatMessageHistory("user:42/thread:7", store)
    assert await again.aget_messages() == messages
    other = SessionDBChatMessageHistory("USER:42/thread:7", store)
    assert await other.aget_messages() == []
    assert history.session_id is not None
    info = await store.get_session(history.session_id)
    assert info.key == "user:42/thread:7"
    assert info.message_count == len(messages)
    # The session is sessiondb's like any other: its context feeds a provider format.
    chat = to_openai_chat(await store.context(history.session_id))
    assert [m["role"] for m in chat][:6] == [
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]


async def test_aclear_appends_and_keeps_the_history_auditable(store: SessionStore) -> None:
    history = SessionDBChatMessageHistory("chat-1", store, create_kwargs={"name": "Chat 1"})
    await history.aadd_messages(every_kind()[:5])
    session_id = history.session_id
    assert session_id is not None
    first = (await store.records(session_id))[0].seq
    await store.append_compaction(
        session_id, summary="talked about weather", first_kept_seq=first + 2
    )
    before = await store.records(session_id, include_tombstoned=True)
    await history.aclear()
    assert await history.aget_messages() == []
    assert await store.context(session_id) == []
    after = await store.records(session_id, include_tombstoned=True)
    # One record appended, whatever the length; nothing rewritten or removed.
    assert after[: len(before)] == before
    assert [r.kind for r in after[len(before) :]] == ["compaction"]
    assert [r.kind for r in after].count("message") == 5
    await history.aclear()  # already empty: nothing more is written
    assert len(await store.records(session_id, include_tombstoned=True)) == len(after)
    # The conversation goes on in the same session.
    await history.aadd_messages([HumanMessage("hello again")])
    assert await history.aget_messages() == [HumanMessage("hello again")]
    assert (await store.get_session(session_id)).name == "Chat 1"
    # A history that never had a message clears without creating a session.
    empty = SessionDBChatMessageHistory("never-used", store)
    await empty.aclear()
    assert empty.session_id is None


async def test_sync_methods_run_from_a_thread_and_refuse_inside_the_loop(
    store: SessionStore,
) -> None:
    history = SessionDBChatMessageHistory("sync-from-thread", store)
    await asyncio.to_thread(history.add_messages, [HumanMessage("hi"), AIMessage("hello")])
    assert await asyncio.to_thread(lambda: history.messages) == [
        HumanMessage("hi"),
        AIMessage("hello"),
    ]
    assert await history.aget_messages() == [HumanMessage("hi"), AIMessage("hello")]
    with pytest.raises(SyncCallInLoopError, match="aget_messages"):
        history.messages  # noqa: B018
    with pytest.raises(SyncCallInLoopError):
        history.add_messages([HumanMessage("x")])
    await asyncio.to_thread(history.clear)
    assert await history.aget_messages() == []


def test_sync_history_from_a_url(db_url: str) -> None:
    def loop_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "sessiondb-langchain"}

    before = loop_threads()
    with SessionDBChatMessageHistory(
        "from-url", db_url, create_kwargs={"model": "fake"}
    ) as history:
        assert history.messages == []
        history.add_user_message("hi")
        history.add_ai_message("hello")
        assert history.messages == [HumanMessage("hi"), AIMessage("hello")]
        # The async methods of a URL history hop to its loop thread.
        assert asyncio.run(history.aget_messages()) == [HumanMessage("hi"), AIMessage("hello")]
        history.clear()
        assert history.messages == []
    history.close()  # idempotent
    assert loop_threads() == before  # its loop thread ended


async def test_async_history_from_a_url(db_url: str) -> None:
    async with SessionDBChatMessageHistory("from-url", db_url) as history:
        await history.aadd_messages([HumanMessage("hi")])
        assert await history.aget_messages() == [HumanMessage("hi")]
        with pytest.raises(SyncCallInLoopError):
            history.close()


def _chain(seen: list[list[BaseMessage]], answers: list[str]) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You answer briefly."), MessagesPlaceholder("history"), ("human", "{question}")]
    )

    def record(value: Any) -> Any:
        seen.append(value.to_messages())
        return value

    model = GenericFakeChatModel(messages=iter(AIMessage(a) for a in answers))
    return prompt | RunnableLambda(record) | model


# langchain-core 1.x deprecates RunnableWithMessageHistory (for LangGraph); it still
# ships it, and the issue asks that the history work under it.
RUNNABLE_DEPRECATED = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")


@RUNNABLE_DEPRECATED
async def test_runnable_with_message_history_second_turn_sees_the_first(
    store: SessionStore,
) -> None:
    seen: list[list[BaseMessage]] = []
    chain = RunnableWithMessageHistory(
        _chain(seen, ["Paris.", "About 2.1 million."]),
        lambda session_id: SessionDBChatMessageHistory(session_id, store),
        input_messages_key="question",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": "conversation-1"}}
    first = await chain.ainvoke({"question": "Capital of France?"}, config)
    second = await chain.ainvoke({"question": "Its population?"}, config)
    assert (first.content, second.content) == ("Paris.", "About 2.1 million.")
    assert [m.content for m in seen[1]] == [
        "You answer briefly.",
        "Capital of France?",
        "Paris.",
        "Its population?",
    ]
    history = await SessionDBChatMessageHistory("conversation-1", store).aget_messages()
    assert [(type(m), m.content) for m in history] == [
        (HumanMessage, "Capital of France?"),
        (AIMessage, "Paris."),
        (HumanMessage, "Its population?"),
        (AIMessage, "About 2.1 million."),
    ]


@RUNNABLE_DEPRECATED
def test_runnable_with_message_history_sync(db_url: str) -> None:
    seen: list[list[BaseMessage]] = []
    histories: list[SessionDBChatMessageHistory] = []

    def history(session_id: str) -> SessionDBChatMessageHistory:
        histories.append(SessionDBChatMessageHistory(session_id, db_url))
        return histories[-1]

    chain = RunnableWithMessageHistory(
        _chain(seen, ["Hi Bob.", "You are Bob."]),
        history,
        input_messages_key="question",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": "bob"}}
    try:
        chain.invoke({"question": "I am Bob."}, config)
        answer = chain.invoke({"question": "Who am I?"}, config)
    finally:
        for h in histories:
            h.close()
    assert answer.content == "You are Bob."
    assert [m.content for m in seen[1]][1:] == ["I am Bob.", "Hi Bob.", "Who am I?"]


def test_without_langchain_core_the_import_names_the_extra() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "try:\n"
        "    import sessiondb.integrations.langchain\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "MissingDependencyError langchain-core is not installed; "
        "install it with: pip install 'sessiondb[langchain]'"
    )


async def test_a_compacted_history_starts_with_the_summary(store: SessionStore) -> None:
    history = SessionDBChatMessageHistory("compacted", store)
    await history.aadd_messages([HumanMessage("one"), AIMessage("1"), HumanMessage("two")])
    assert history.session_id is not None
    records = await store.records(history.session_id)
    await store.append_compaction(
        history.session_id, summary="counted to one", first_kept_seq=records[2].seq
    )
    summary, kept = await history.aget_messages()
    assert isinstance(summary, HumanMessage)
    assert "counted to one" in str(summary.content)
    assert kept == HumanMessage("two")


async def test_what_json_cannot_hold_is_refused_and_nothing_is_written(
    store: SessionStore,
) -> None:
    history = SessionDBChatMessageHistory("bad", store)
    await history.aadd_messages([HumanMessage("kept")])
    bad = ToolMessage("x", tool_call_id="c", artifact=object())
    with pytest.raises(InvalidInputError, match="JSON"):
        await history.aadd_messages([HumanMessage("not kept"), bad])
    assert await history.aget_messages() == [HumanMessage("kept")]


def test_a_sync_program_shares_one_store_between_histories(db_url: str) -> None:
    """Built outside any loop, the store gets a loop thread of its own, and every history
    on it runs there (asyncpg's pool is tied to the loop that opened it)."""
    store = SessionStore(db_url)
    first = SessionDBChatMessageHistory("a", store)
    second = SessionDBChatMessageHistory("b", store)
    try:
        first.add_messages([HumanMessage("to a")])
        second.add_messages([HumanMessage("to b")])
        first.add_messages([AIMessage("from a")])
        assert first.messages == [HumanMessage("to a"), AIMessage("from a")]
        assert SessionDBChatMessageHistory("b", store).messages == [HumanMessage("to b")]
        assert asyncio.run(second.aget_messages()) == [HumanMessage("to b")]
    finally:
        home = home_of(store, None)
        asyncio.run_coroutine_threadsafe(store.close(), home).result()
