"""Payloads come back exactly as they went in, on both backends.

The store keeps each record as JSON text (not jsonb), so ``\\u0000``, lone surrogates,
key order, big numbers, unknown blocks and unknown fields must all survive the trip.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from helpers import sql
from sqlalchemy import select

from sessiondb import (
    ImageContent,
    InvalidInputError,
    Message,
    OtherContent,
    SessionStore,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    Usage,
    jsoncodec,
)
from sessiondb.tables import records

TRICKY = {
    "nul": "\x00",
    "nul-inside": "before\x00after",
    "lone-high-surrogate": "\ud800",
    "lone-low-surrogate-inside": "x\udfffy",
    "emoji": "crab 🦀 family 👩\u200d👩\u200d👧 café",
    "everything": "\x00\ud800🦀\udbff\x00",
    "line-separators": "a\u2028b\u2029c",
    "controls": "\x01\x1f\x7f\t\r\n",
    "quotes": 'quote " backslash \\ slash /',
    "bom": "\ufeffstart",
    "noncharacter": "\uffff\ufffe",
}


def pairs(value: Any) -> Any:
    """A JSON value with every object as its list of (key, value) pairs: order matters."""
    if isinstance(value, dict):
        return [(k, pairs(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [pairs(v) for v in value]
    return value


def parse_pairs(text: str) -> Any:
    return json.loads(text, object_pairs_hook=lambda kv: [(k, v) for k, v in kv])


def normalised(message: dict[str, Any]) -> dict[str, Any]:
    """The wire dict a Message model gives back: a string content becomes one text block."""
    content = message["content"]
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    return message


async def raw_payloads(store: SessionStore, session_id: str) -> list[str]:
    rows = await sql.fetch(
        store,
        select(records.c.payload).where(records.c.session_id == session_id).order_by(records.c.seq),
    )
    return [row.payload for row in rows]


async def raw_rows(store: SessionStore, session_id: str) -> list[Any]:
    return await sql.fetch(
        store,
        select(records).where(records.c.session_id == session_id).order_by(records.c.seq),
    )


# -- dicts are stored exactly ----------------------------------------------------------


async def test_dict_payload_is_stored_exactly(store: SessionStore) -> None:
    message = {
        "zFirst": "unknown fields before the known ones",
        "content": "a plain string content becomes one text block, in its place",
        "role": "user",
        "timestamp": 1732200000123,
        "meta": {"b": 2, "a": 1, "list": [3, 1, 2], "none": None, "t": True},
        "float": 1.0,
        "small": 1e-300,
        "negative": -12,
    }
    info = await store.create_session()
    await store.append(info.id, [message])

    (raw,) = await raw_payloads(store, info.id)
    # Same keys in the same order, same values, same number types; only the string
    # content is stored as the one text block it stands for (S7.12).
    assert parse_pairs(raw) == pairs(normalised(message))
    assert raw == json.dumps(normalised(message), ensure_ascii=False, separators=(",", ":"))
    parsed = json.loads(raw)
    assert parsed["content"] == [
        {"type": "text", "text": "a plain string content becomes one text block, in its place"}
    ]
    assert isinstance(parsed["float"], float) and isinstance(parsed["negative"], int)

    (rec,) = await store.records(info.id)
    assert rec.message is not None
    assert rec.message.role == "user"
    assert rec.message.text() == "a plain string content becomes one text block, in its place"
    assert rec.message.model_extra == {
        "zFirst": "unknown fields before the known ones",
        "timestamp": 1732200000123,
        "meta": {"b": 2, "a": 1, "list": [3, 1, 2], "none": None, "t": True},
        "float": 1.0,
        "small": 1e-300,
        "negative": -12,
    }
    assert rec.message.to_wire() == normalised(message)
    (ctx_message,) = await store.context(info.id)
    assert ctx_message.to_wire() == normalised(message)


async def test_numbers_are_not_rewritten(store: SessionStore) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "n"}],
        "big": 2**70,
        "negativeBig": -(2**80) - 1,
        "max64": 2**63 - 1,
        "float": 0.1,
        "exp": 1.5e300,
        "zeroFloat": 0.0,
        "negZero": -0.0,
    }
    info = await store.create_session()
    await store.append(info.id, [message])
    (raw,) = await raw_payloads(store, info.id)
    parsed = json.loads(raw)
    assert parsed == message
    for key, value in message.items():
        assert type(parsed[key]) is type(value), key
    assert math.copysign(1.0, parsed["negZero"]) == -1.0
    assert list(parsed) == list(message)
    (rec,) = await store.records(info.id)
    assert rec.message is not None and rec.message.model_extra is not None
    extra = rec.message.model_extra
    for key in ("max64", "float", "exp", "zeroFloat"):
        assert extra[key] == message[key] and type(extra[key]) is type(message[key]), key


async def test_big_integers_come_back_as_integers(store: SessionStore) -> None:
    big = -(2**80) - 1
    info = await store.create_session()
    await store.append(info.id, [{"role": "user", "content": "n", "big": big, "u64": 2**64 + 1}])
    (rec,) = await store.records(info.id)
    assert rec.message is not None and rec.message.model_extra is not None
    assert rec.message.model_extra == {"big": big, "u64": 2**64 + 1}
    (message,) = await store.context(info.id)
    assert message.model_extra == {"big": big, "u64": 2**64 + 1}


async def test_message_model_payload_is_its_wire_shape(store: SessionStore) -> None:
    model = Message(
        role="assistant",
        content=[
            ThinkingContent(thinking="hmm"),
            TextContent(text="reading"),
            ToolCallContent(id="call_1", name="read", arguments={"path": "a.py"}),
        ],
        usage=Usage(input=1, output=2),
    )
    info = await store.create_session()
    (rec,) = await store.append(info.id, [model])
    (raw,) = await raw_payloads(store, info.id)
    wire = json.loads(raw)
    assert wire == model.to_wire()
    assert [b["type"] for b in wire["content"]] == ["thinking", "text", "toolCall"]
    assert wire["usage"] == {"input": 1, "output": 2}
    assert "toolCallId" not in wire  # unset fields are not written
    (stored,) = await store.records(info.id)
    assert stored.message == model
    assert rec.message == model


# -- tricky strings, both backends -------------------------------------------------------


def messages_holding(text: str) -> list[dict[str, Any]]:
    """Messages with ``text`` in every place a string goes: blocks, ids, fields."""
    return [
        {"role": "user", "content": [{"type": "text", "text": text}], "note": text},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": text},
                {"type": "toolCall", "id": text, "name": "echo", "arguments": {"a": [text]}},
            ],
            "parentUuid": text,
        },
        {
            "role": "toolResult",
            "toolCallId": text,
            "toolName": "echo",
            "content": [{"type": "text", "text": text * 3}],
            "isError": False,
        },
        {"role": "user", "content": text, "extra": {"nested": text}},
        {"role": "user", "content": [{"type": "futureBlock", "value": text}]},
    ]


async def test_strings_round_trip_exactly(store: SessionStore) -> None:
    # One session per string, in one database (cheaper than a database per string).
    sessions = {}
    for name, text in TRICKY.items():
        info = await store.create_session()
        await store.append(info.id, messages_holding(text))
        sessions[name] = info.id

    for name, text in TRICKY.items():
        session_id = sessions[name]
        messages = messages_holding(text)
        expected = [normalised(m) for m in messages]
        context = [m.to_wire() for m in await store.context(session_id)]
        assert context == expected, name
        recs = await store.records(session_id)
        assert [r.message.to_wire() for r in recs if r.message is not None] == expected, name
        assert recs[0].message is not None and recs[0].message.text() == text, name
        assert recs[1].message is not None and recs[1].message.parent_uuid == text, name
        raw = [json.loads(p) for p in await raw_payloads(store, session_id)]
        assert raw == expected, name


async def test_nul_and_emoji_in_object_keys_round_trip(store: SessionStore) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": {"\x00k": 1}}],
        "🦀": {"\x00": "nul key", "é": [1]},
    }
    info = await store.create_session()
    await store.append(info.id, [message])
    (got,) = await store.context(info.id)
    assert got.to_wire() == message
    (rec,) = await store.records(info.id)
    assert rec.message is not None and rec.message.to_wire() == message


async def test_lone_surrogate_in_object_keys(store: SessionStore) -> None:
    key = "k\ud800"
    cases: dict[str, dict[str, Any]] = {
        "top-level": {"role": "assistant", "content": [], key: 1},
        "arguments": {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": {key: 1}}],
        },
        "nested-extra": {"role": "assistant", "content": [], "extra": {key: 1}},
    }
    wrong = {}
    for where, message in cases.items():
        info = await store.create_session()
        try:
            await store.append(info.id, [message])
        except InvalidInputError:
            assert await raw_payloads(store, info.id) == []
            continue  # refusing it up front is fine
        try:
            (got,) = await store.context(info.id)
            (rec,) = await store.records(info.id)
        except Exception as exc:
            wrong[where] = f"cannot be read back: {type(exc).__name__}"
            continue
        if got.to_wire() != message or rec.message is None or rec.message.to_wire() != message:
            wrong[where] = "comes back changed"
    assert wrong == {}


async def test_unstorable_side_columns_stay_in_the_payload(store: SessionStore) -> None:
    # toolCallId and parentUuid are copied into indexed columns; a value a text column
    # cannot hold leaves the column empty but stays in the payload.
    for value in ["id\x00with nul", "id \ud800 surrogate"]:
        messages = [
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": value, "name": "t", "arguments": {}}],
            },
            {
                "role": "toolResult",
                "toolCallId": value,
                "parentUuid": value,
                "content": [{"type": "text", "text": "ok"}],
            },
        ]
        info = await store.create_session()
        await store.append(info.id, messages)
        rows = await raw_rows(store, info.id)
        assert rows[1].tool_call_id is None and rows[1].parent_uuid is None
        (_, result) = await store.context(info.id)
        assert result.tool_call_id == value
        assert result.parent_uuid == value
        assert [json.loads(r.payload) for r in rows] == messages


async def test_plain_side_columns_are_filled(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(
        info.id,
        [
            {
                "role": "toolResult",
                "toolCallId": "call_9",
                "uuid": "u-9",
                "parentUuid": "u-8",
                "content": [],
            }
        ],
    )
    (row,) = await raw_rows(store, info.id)
    assert (row.role, row.tool_call_id, row.uuid, row.parent_uuid) == (
        "toolResult",
        "call_9",
        "u-9",
        "u-8",
    )
    assert row.size == len(row.payload)


async def test_five_megabyte_tool_result(store: SessionStore) -> None:
    chunk = "line of tool output: ünïcödé 🦀 \t tabs and \\ backslashes\n"
    big = (chunk * (5 * 1024 * 1024 // len(chunk) + 1))[: 5 * 1024 * 1024]
    big = "\x00" + big + "\ud800"  # forces the slow, exact encoder path on 5 MB
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c", "name": "cat", "arguments": {}}],
        },
        {"role": "toolResult", "toolCallId": "c", "content": [{"type": "text", "text": big}]},
        {"role": "assistant", "content": [{"type": "text", "text": "that was long"}]},
    ]
    info = await store.create_session()
    await store.append(info.id, messages[:1])
    await store.append(info.id, messages[1:])

    context = await store.context(info.id)
    assert len(context) == 3
    block = context[1].content[0]
    assert isinstance(block, TextContent)
    assert len(block.text) == len(big)
    assert block.text == big
    recs = await store.records(info.id)
    assert recs[1].message is not None and recs[1].message.to_wire() == messages[1]
    rows = await raw_rows(store, info.id)
    assert rows[1].size == len(rows[1].payload) > 5 * 1024 * 1024


# -- unknown blocks and fields are kept -------------------------------------------------


async def test_unknown_blocks_and_fields_are_kept(store: SessionStore) -> None:
    redacted = {
        "type": "redacted_thinking",
        "data": "EqQBCkgIARABGAIiQL",
        "extra": [1, {"x": None}],
    }
    server_tool = {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": {"query": "sessiondb"},
    }
    no_fields = {"type": "divider"}
    text_with_extras = {
        "type": "text",
        "text": "cached",
        "cache_control": {"type": "ephemeral"},
        "citations": None,
    }
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "source": "clip"}
    call = {
        "type": "toolCall",
        "id": "call_1",
        "name": "edit",
        "arguments": {"path": "x", "edits": [{"old": "a", "new": "b"}]},
        "partialJson": '{"path":"x"',
        "thoughtSignature": "sig",
    }
    message = {
        "role": "assistant",
        "content": [redacted, server_tool, no_fields, text_with_extras, image, call],
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-x",
        "stopReason": "toolUse",
        "timestamp": 1732200000000,
        "usage": {
            "input": 1,
            "output": 2,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 3,
            "cost": {"input": 0.1, "output": 0.2, "total": 0.3},
            "reasoning": 7,
        },
        "someFutureField": {"nested": ["kept", 1, 2.5, False]},
    }
    info = await store.create_session()
    await store.append(info.id, [message])

    (raw,) = await raw_payloads(store, info.id)
    assert parse_pairs(raw) == pairs(message)

    (ctx_message,) = await store.context(info.id)
    (rec,) = await store.records(info.id)
    for got in (ctx_message, rec.message):
        assert got is not None
        assert got.to_wire() == message
        kinds = [type(b) for b in got.content]
        assert kinds == [
            OtherContent,
            OtherContent,
            OtherContent,
            TextContent,
            ImageContent,
            ToolCallContent,
        ]
        assert [b.to_wire() for b in got.content] == message["content"]
        assert got.model_extra is not None
        assert got.model_extra["someFutureField"] == {"nested": ["kept", 1, 2.5, False]}
        assert got.model_extra["stopReason"] == "toolUse"
        assert got.usage is not None and got.usage.model_extra == {"reasoning": 7}
    info = await store.get_session(info.id)
    assert info.metrics.input_tokens == 1 and info.metrics.cost_total == pytest.approx(0.3)


# -- the codec on its own ---------------------------------------------------------------


@pytest.mark.parametrize("text", TRICKY.values(), ids=TRICKY.keys())
def test_codec_round_trips_and_writes_storable_text(text: str) -> None:
    value = {"s": text, text: [text], "n": 2**70}
    encoded = jsoncodec.dumps(value)
    assert "\x00" not in encoded  # Postgres text cannot hold NUL
    encoded.encode("utf-8")  # valid UTF-8: no lone surrogate in the text itself
    assert jsoncodec.loads(encoded) == value
    assert jsoncodec.loads(encoded.encode()) == value


def test_codec_keeps_key_order() -> None:
    value = {"z": 1, "a": {"y": 2, "b": 3}, "m": [{"k2": 1, "k1": 2}]}
    assert parse_pairs(jsoncodec.dumps(value)) == pairs(value)
    assert parse_pairs(jsoncodec.dumps({**value, "s": "\ud800"})) == pairs({**value, "s": "\ud800"})


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_codec_does_not_turn_non_finite_floats_into_null(number: float) -> None:
    try:
        encoded = jsoncodec.dumps({"x": number})
    except ValueError:
        return  # refusing is fine
    decoded = jsoncodec.loads(encoded)["x"]
    assert decoded is not None
    assert decoded == number or (math.isnan(number) and math.isnan(decoded))
