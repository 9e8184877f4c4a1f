"""What a write accepts, every read reads back: a message that no read could turn back
into a model is refused before anything is written, on the append path and on the bulk
path alike, and the session stays readable."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import sql
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb import InvalidInputError, Message, SessionStore, jsoncodec
from sessiondb.models import wire_message

POISON: list[Any] = [
    {"role": "user", "content": "hi", "tool_call_id": 1},
    {"role": "user", "content": "x", "usage": {"cache_read": None}},
    {"role": "user", "content": "x", "is_error": "maybe"},
    {"role": "user", "content": "x", "tool_name": 5},
    {"role": "user", "content": "x", "parent_uuid": 5},
    {"role": "user", "content": "x", 1: 2},
    {"role": "user", "content": "x", "usage": {"input": 2**64}},
]


async def _rows(store: SessionStore) -> int:
    return int(await sql.scalar(store, "SELECT count(*) FROM sessiondb_records"))


@pytest.mark.parametrize("bad", POISON, ids=range(len(POISON)))
async def test_a_message_no_read_could_give_back_is_refused_and_nothing_written(
    store: SessionStore, bad: dict[Any, Any]
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, {"role": "user", "content": "before"})
    with pytest.raises(InvalidInputError):
        await store.append(sid, [{"role": "user", "content": "with it"}, bad])
    assert await _rows(store) == 1
    # The session still reads back, and a retry of a good message gets the next seq.
    assert [m.text() for m in await store.context(sid)] == ["before"]
    assert [r.seq for r in await store.records(sid)] == [1]
    (again,) = await store.append(sid, {"role": "user", "content": "after"})
    assert again.seq == 2


@pytest.mark.parametrize("bad", POISON[:6], ids=range(6))
async def test_the_bulk_path_refuses_the_same_and_names_the_session(
    store: SessionStore, bad: dict[Any, Any]
) -> None:
    good = {"messages": [{"role": "user", "content": "fine"}]}
    with pytest.raises(InvalidInputError, match="session 1: message 0"):
        await store.import_sessions([good, {"messages": [bad]}])
    assert await _rows(store) == 0
    assert (await store.list_sessions()).items == []


async def test_a_mutated_message_model_is_checked_as_it_is_now(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    message = Message.model_validate({"role": "user", "content": "hi"})
    message.role = "system"  # type: ignore[assignment]
    with pytest.raises(InvalidInputError):
        await store.append(sid, message)
    assert await _rows(store) == 0
    assert await store.context(sid) == []


# -- the wire checks accept only what the model reads back ------------------------------

_NAMES = [
    "role", "content", "toolCallId", "tool_call_id", "toolName", "tool_name", "isError",
    "is_error", "uuid", "parentUuid", "parent_uuid", "usage", "extra",
]  # fmt: skip
_USAGE_NAMES = ["input", "output", "cacheRead", "cache_read", "cacheWrite", "totalTokens",
                "total_tokens", "cost", "other"]  # fmt: skip
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.sampled_from(["user", "assistant", "toolResult", "system"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_blocks = st.one_of(
    _values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "toolCall", "thinking", "image", "audio", 3])},
        optional={
            "text": _values,
            "id": _values,
            "name": _values,
            "arguments": _values,
            "thinking": _values,
            "data": _values,
            "mimeType": _values,
            "mime_type": _values,
        },
    ),
)
_good_blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5)),
    st.builds(
        lambda i, a: {"type": "toolCall", "id": i, "name": "read", "arguments": a},
        st.text(max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    ),
    st.builds(lambda d, m: {"type": "image", "data": d, "mimeType": m}, st.text(), st.text()),
)
# Near-valid messages: a good role and content, then any of the fields (and their
# Python names) with values of any type.
_messages = st.builds(
    lambda base, extra: {**base, **extra},
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "toolResult"]),
            "content": st.one_of(st.text(max_size=5), st.lists(_good_blocks, max_size=3)),
        },
        optional={"toolCallId": st.text(min_size=1, max_size=3)},
    ),
    st.dictionaries(
        st.sampled_from(_NAMES[2:]),
        st.one_of(
            _values,
            st.lists(_blocks, max_size=3),
            st.dictionaries(st.sampled_from(_USAGE_NAMES), _values, max_size=4),
        ),
        max_size=3,
    ),
) | st.dictionaries(
    st.sampled_from(_NAMES),
    st.one_of(_values, st.lists(_blocks, max_size=3)),
    max_size=6,
)


@settings(max_examples=1500, deadline=None)
@given(_messages)
def test_what_the_wire_checks_accept_every_read_reads_back(data: dict[str, Any]) -> None:
    try:
        wire = wire_message(data)
        text = jsoncodec.dumps(wire)
    except (InvalidInputError, ValueError):
        return
    message = Message.model_validate(jsoncodec.loads(text))  # must not raise
    assert message.to_wire() == {
        **jsoncodec.loads(text),
        **({"content": message.to_wire()["content"]}),
    }


async def test_a_new_session_changed_after_it_was_built_is_checked_again(
    store: SessionStore,
) -> None:
    from sessiondb import NewSession

    new = NewSession(messages=[{"role": "user", "content": "fine"}])
    new.messages.append({"role": "user", "content": "x", "tool_call_id": 1})
    with pytest.raises(InvalidInputError, match="session 0: message 1"):
        await store.import_sessions([new])
    assert await _rows(store) == 0
