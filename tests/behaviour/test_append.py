"""Appends: seq allocation, the session head, optimistic concurrency, idempotency, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import sql
from helpers.input_tables import not_refused
from helpers.messages import MISSING_ID, assistant, user
from sqlalchemy import func, select

from sessiondb import (
    ConflictError,
    InvalidInputError,
    InvalidSessionIdError,
    Message,
    Metrics,
    SeqConflictError,
    SessionNotFoundError,
    SessionStore,
    TextContent,
    ToolCallContent,
    Usage,
)
from sessiondb.tables import records


def usage(
    inp: int, out: int, cr: int = 0, cw: int = 0, cost: float | None = None
) -> dict[str, Any]:
    u: dict[str, Any] = {"input": inp, "output": out, "cacheRead": cr, "cacheWrite": cw}
    if cost is not None:
        u["cost"] = {"input": cost / 2, "output": cost / 2, "total": cost}
    return u


async def stored_rows(store: SessionStore, session_id: str) -> list[Any]:
    """The raw rows of ``session_id`` in the records table, in seq order."""
    return await sql.fetch(
        store,
        select(records).where(records.c.session_id == session_id).order_by(records.c.seq),
    )


async def total_rows(store: SessionStore) -> int:
    return int(await sql.scalar(store, select(func.count()).select_from(records)))


# -- seq allocation and the head ---------------------------------------------------------


async def test_seqs_are_gapless_across_appends(store: SessionStore) -> None:
    info = await store.create_session()
    first = await store.append(info.id, [user("one")])
    batch = await store.append(info.id, [assistant("two"), user("three"), assistant("four")])
    last = await store.append(info.id, [user("five"), assistant("six")])

    assert [r.seq for r in first] == [1]
    assert [r.seq for r in batch] == [2, 3, 4]
    assert [r.seq for r in last] == [5, 6]

    rows = await stored_rows(store, info.id)
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r.role for r in rows] == ["user", "assistant"] * 3
    assert all(r.kind == "message" for r in rows)

    stored = await store.records(info.id)
    assert [r.seq for r in stored] == [1, 2, 3, 4, 5, 6]
    assert [r.message.text() for r in stored if r.message] == [
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
    ]
    # What append returned is what was stored.
    assert stored == first + batch + last

    head = await store.get_session(info.id)
    assert head.last_seq == 6
    assert head.message_count == 6


async def test_seqs_are_per_session(store: SessionStore) -> None:
    a = await store.create_session()
    b = await store.create_session()
    await store.append(a.id, [user("a1"), user("a2")])
    recs = await store.append(b.id, [user("b1")])
    await store.append(a.id, [user("a3")])
    assert [r.seq for r in recs] == [1]
    assert [r.seq for r in await stored_rows(store, a.id)] == [1, 2, 3]
    assert [r.seq for r in await stored_rows(store, b.id)] == [1]
    assert recs[0].session_id == b.id


async def test_batch_shares_one_timestamp_and_sets_last_message_at(store: SessionStore) -> None:
    info = await store.create_session()
    assert info.last_message_at is None
    recs = await store.append(info.id, [user("q"), assistant("a"), user("q2")])
    assert len({r.created_at for r in recs}) == 1
    head = await store.get_session(info.id)
    assert head.last_message_at == recs[0].created_at
    assert head.last_message_at >= head.created_at

    later = await store.append(info.id, [assistant("a2")])
    head = await store.get_session(info.id)
    assert head.last_message_at == later[0].created_at
    assert later[0].created_at >= recs[0].created_at
    assert head.message_count == 4


async def test_single_message_and_empty_batch(store: SessionStore) -> None:
    info = await store.create_session()
    one = await store.append(info.id, user("just one"))
    assert [r.seq for r in one] == [1]
    assert await store.append(info.id, []) == []
    assert await store.append(info.id, [], expected_seq=99) == []
    head = await store.get_session(info.id)
    assert head.last_seq == 1 and head.message_count == 1
    assert len(await stored_rows(store, info.id)) == 1


async def test_metrics_sum_token_usage(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(
        info.id,
        [
            user("hi"),
            assistant("hello", usage=usage(100, 20, 5, 7, cost=0.25)),
        ],
    )
    await store.append(info.id, [user("more"), assistant("ok", usage=usage(300, 40, 11, 0, 0.5))])
    # A usage without cost or cache fields counts what it has.
    await store.append(info.id, [assistant("partial", usage={"input": 1, "output": 2})])
    head = await store.get_session(info.id)
    assert head.metrics.input_tokens == 401
    assert head.metrics.output_tokens == 62
    assert head.metrics.cache_read_tokens == 16
    assert head.metrics.cache_write_tokens == 7
    assert head.metrics.cost_total == pytest.approx(0.75)
    assert head.message_count == 5


async def test_metrics_from_message_models(store: SessionStore) -> None:
    info = await store.create_session()
    msg = Message(
        role="assistant",
        content=[TextContent(text="done")],
        usage=Usage(input=10, output=3, cache_read=2, cache_write=1, cost={"total": 0.125}),
    )
    await store.append(info.id, [msg])
    head = await store.get_session(info.id)
    assert head.metrics == Metrics(
        input_tokens=10,
        output_tokens=3,
        cache_read_tokens=2,
        cache_write_tokens=1,
        cost_total=0.125,
    )


async def test_append_accepts_models_and_dicts(store: SessionStore) -> None:
    info = await store.create_session()
    call = Message(
        role="assistant",
        content=[
            TextContent(text="reading"),
            ToolCallContent(id="call_1", name="read", arguments={"path": "a.py"}),
        ],
    )
    result = {
        "role": "toolResult",
        "toolCallId": "call_1",
        "toolName": "read",
        "content": [{"type": "text", "text": "print('a')"}],
        "isError": False,
    }
    recs = await store.append(info.id, [Message(role="user", content="read a.py"), call, result])
    assert [r.seq for r in recs] == [1, 2, 3]

    stored = await store.records(info.id)
    first, second, third = (r.message for r in stored)
    assert first is not None and second is not None and third is not None
    assert first.role == "user" and first.text() == "read a.py"
    assert second.tool_calls() == [
        ToolCallContent(id="call_1", name="read", arguments={"path": "a.py"})
    ]
    assert third.role == "toolResult"
    assert third.tool_call_id == "call_1"
    assert third.tool_name == "read"
    assert third.is_error is False

    rows = await stored_rows(store, info.id)
    assert [r.role for r in rows] == ["user", "assistant", "toolResult"]
    assert rows[2].tool_call_id == "call_1"
    assert all(r.size == len(r.payload) for r in rows)


async def test_append_to_unknown_session(store: SessionStore) -> None:
    await store.create_session()
    with pytest.raises(SessionNotFoundError):
        await store.append(MISSING_ID, [user("x")])
    with pytest.raises(SessionNotFoundError):
        await store.append(MISSING_ID, [user("x", uuid="u")], expected_seq=0)
    assert await total_rows(store) == 0


# -- expected_seq ----------------------------------------------------------------------


async def test_expected_seq_matching_succeeds(store: SessionStore) -> None:
    info = await store.create_session()
    a = await store.append(info.id, [user("one")], expected_seq=0)
    b = await store.append(info.id, [assistant("two"), user("three")], expected_seq=1)
    c = await store.append(info.id, [assistant("four")], expected_seq=3)
    assert [r.seq for r in a + b + c] == [1, 2, 3, 4]
    assert (await store.get_session(info.id)).last_seq == 4


async def test_expected_seq_mismatch_writes_nothing(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(info.id, [assistant("one", usage=usage(1, 1, cost=0.1)), assistant("two")])
    before = await store.get_session(info.id)

    for expected in (0, 1, 3, 100):
        with pytest.raises(SeqConflictError) as raised:
            await store.append(
                info.id,
                [user("would name it", uuid="new-1"), assistant("x", usage=usage(5, 5, cost=1.0))],
                expected_seq=expected,
            )
        assert isinstance(raised.value, ConflictError)
        assert raised.value.expected_seq == expected
        assert raised.value.actual_seq == 2
        assert raised.value.session_id == info.id

        # Nothing written: rows, head, counters, metrics and name as before.
        assert [r.seq for r in await stored_rows(store, info.id)] == [1, 2]
        assert await store.get_session(info.id) == before
    assert before.name is None
    # The same batch at the right seq goes through.
    recs = await store.append(info.id, [user("would name it", uuid="new-1")], expected_seq=2)
    assert [r.seq for r in recs] == [3]


async def test_expected_seq_must_be_a_non_negative_int(store: SessionStore) -> None:
    info = await store.create_session()
    cases = {"negative": -1, "str": "2", "float": 1.0, "list": [0]}

    async def call(expected: Any) -> Any:
        return await store.append(info.id, [user("x")], expected_seq=expected)

    assert await not_refused(cases, call, InvalidInputError) == {}
    assert await stored_rows(store, info.id) == []


# -- idempotency by external uuid ------------------------------------------------------


async def test_reappending_a_uuid_returns_the_stored_record(store: SessionStore) -> None:
    info = await store.create_session()
    msg = assistant("answer", uuid="uuid-1", usage=usage(10, 20, cost=0.5))
    first = (await store.append(info.id, [user("q"), msg]))[1]
    assert first.seq == 2 and first.uuid == "uuid-1"

    (again,) = await store.append(info.id, [msg])
    assert again.seq == 2
    assert again == first
    # A retry with different content still gets the stored record, unchanged.
    (changed,) = await store.append(info.id, [assistant("different", uuid="uuid-1")])
    assert changed.seq == 2
    assert changed.message is not None and changed.message.text() == "answer"

    rows = await stored_rows(store, info.id)
    assert [r.seq for r in rows] == [1, 2]
    assert [r.uuid for r in rows] == [None, "uuid-1"]
    head = await store.get_session(info.id)
    assert head.last_seq == 2 and head.message_count == 2
    # Usage is not counted twice.
    assert head.metrics.input_tokens == 10 and head.metrics.output_tokens == 20
    assert head.metrics.cost_total == pytest.approx(0.5)


async def test_retry_with_the_same_expected_seq_is_idempotent(store: SessionStore) -> None:
    # A retry after an ambiguous commit repeats expected_seq; the stored record comes
    # back instead of a conflict.
    info = await store.create_session()
    (rec,) = await store.append(info.id, [user("q", uuid="u-1")], expected_seq=0)
    (again,) = await store.append(info.id, [user("q", uuid="u-1")], expected_seq=0)
    assert again == rec
    assert len(await stored_rows(store, info.id)) == 1


async def test_mixed_batch_stores_only_new_uuids(store: SessionStore) -> None:
    info = await store.create_session()
    known = await store.append(info.id, [user("a", uuid="a"), assistant("b", uuid="b")])
    assert [r.seq for r in known] == [1, 2]

    recs = await store.append(
        info.id,
        [
            user("x", uuid="x"),
            user("a", uuid="a"),
            assistant("no uuid"),
            assistant("b", uuid="b"),
            user("y", uuid="y"),
        ],
    )
    assert [r.seq for r in recs] == [3, 1, 4, 2, 5]
    assert [r.uuid for r in recs] == ["x", "a", None, "b", "y"]
    assert recs[1] == known[0] and recs[3] == known[1]

    rows = await stored_rows(store, info.id)
    assert [(r.seq, r.uuid) for r in rows] == [
        (1, "a"),
        (2, "b"),
        (3, "x"),
        (4, None),
        (5, "y"),
    ]
    head = await store.get_session(info.id)
    assert head.last_seq == 5 and head.message_count == 5


async def test_mixed_batch_with_expected_seq(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(info.id, [user("a", uuid="a")])
    with pytest.raises(SeqConflictError):
        await store.append(info.id, [user("a", uuid="a"), user("n", uuid="n")], expected_seq=0)
    recs = await store.append(info.id, [user("a", uuid="a"), user("n", uuid="n")], expected_seq=1)
    assert [r.seq for r in recs] == [1, 2]
    assert len(await stored_rows(store, info.id)) == 2


async def test_same_uuid_in_other_session_is_independent(store: SessionStore) -> None:
    a = await store.create_session()
    b = await store.create_session()
    await store.append(a.id, [user("x"), user("in a", uuid="shared")])
    (rec,) = await store.append(b.id, [user("in b", uuid="shared")])
    assert rec.seq == 1 and rec.session_id == b.id
    assert rec.message is not None and rec.message.text() == "in b"


async def test_duplicate_uuid_in_one_batch_is_refused(store: SessionStore) -> None:
    info = await store.create_session()
    with pytest.raises(InvalidInputError):
        await store.append(info.id, [user("1", uuid="dup"), user("2"), user("3", uuid="dup")])
    assert await stored_rows(store, info.id) == []
    assert (await store.get_session(info.id)).last_seq == 0


async def test_unstorable_uuid_is_refused(store: SessionStore) -> None:
    info = await store.create_session()
    cases = {"nul": "nul\x00inside", "surrogate": "lone \ud800 surrogate", "int": 7, "list": ["l"]}

    async def call(bad_uuid: Any) -> Any:
        return await store.append(info.id, [user("ok"), user("bad", uuid=bad_uuid)])

    assert await not_refused(cases, call, InvalidInputError) == {}
    assert await stored_rows(store, info.id) == []


# -- bad input -------------------------------------------------------------------------


MALFORMED = {
    "bad-role": {"role": "system", "content": "x"},
    "no-role": {"content": [{"type": "text", "text": "x"}]},
    "no-content": {"role": "user"},
    "content-int": {"role": "user", "content": 5},
    "content-dict": {"role": "user", "content": {"type": "text", "text": "x"}},
    "content-none": {"role": "user", "content": None},
    "block-not-object": {"role": "user", "content": ["plain string block"]},
    "block-no-type": {"role": "user", "content": [{"text": "x"}]},
    "text-block-no-text": {"role": "user", "content": [{"type": "text"}]},
    "tool-call-no-name": {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "c1", "arguments": {}}],
    },
    "is-error-not-bool": {
        "role": "toolResult",
        "toolCallId": "c",
        "content": [],
        "isError": "maybe",
    },
    "usage-not-object": {"role": "assistant", "content": [], "usage": "lots"},
    "tool-result-without-call-id": {
        "role": "toolResult",
        "content": [{"type": "text", "text": "x"}],
    },
    "is-error-on-assistant": {"role": "assistant", "content": [], "isError": True},
    "not-json": {"role": "user", "content": "x", "extra": {1, 2}},
    "not-json-key": {"role": "user", "content": "x", "extra": {("a", "b"): 1}},
}


async def test_malformed_message_writes_nothing(store: SessionStore) -> None:
    info = await store.create_session()

    async def call(bad: Any) -> Any:
        return await store.append(info.id, [user("fine, but in a bad batch"), bad])

    assert await not_refused(MALFORMED, call, InvalidInputError) == {}
    assert await stored_rows(store, info.id) == []
    head = await store.get_session(info.id)
    assert head.last_seq == 0 and head.message_count == 0 and head.name is None


async def test_items_must_be_messages_or_dicts(store: SessionStore) -> None:
    info = await store.create_session()
    cases = {
        "string": "a plain string",
        "int-item": [42],
        "list-item": [["role", "user"]],
        "none-item": [None],
    }

    async def call(items: Any) -> Any:
        return await store.append(info.id, items)

    assert await not_refused(cases, call, InvalidInputError) == {}
    assert await stored_rows(store, info.id) == []


async def test_bad_session_id_is_refused(store: SessionStore) -> None:
    info = await store.create_session()
    with pytest.raises(InvalidSessionIdError):
        await store.append(info.id.lower(), [user("x")])
    assert await stored_rows(store, info.id) == []


async def test_append_refuses_what_is_not_a_list_of_messages(store: SessionStore) -> None:
    info = await store.create_session()
    for bad in (None, "hello", 42):
        with pytest.raises(InvalidInputError, match="messages must be a list"):
            await store.append(info.id, bad)  # type: ignore[arg-type]
    assert (await store.get_session(info.id)).last_seq == 0
