"""The models: wire shape, aliases, unknown blocks and fields. Pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from sessiondb import (
    ImageContent,
    Message,
    Metrics,
    OtherContent,
    Record,
    SessionInfo,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    Usage,
)
from sessiondb.models import wire_message_error


def test_string_content_becomes_one_text_block() -> None:
    m = Message(role="user", content="hello")
    assert m.content == [TextContent(text="hello")]
    assert m.to_wire() == {"role": "user", "content": [{"type": "text", "text": "hello"}]}


def test_text_and_tool_calls_helpers() -> None:
    m = Message.model_validate(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "thinking", "thinking": "not text"},
                {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"p": 1}},
                {"type": "text", "text": "two"},
                {"type": "toolCall", "id": "c2", "name": "ls"},
            ],
        }
    )
    assert m.text() == "one\ntwo"
    assert [c.id for c in m.tool_calls()] == ["c1", "c2"]
    assert m.tool_calls()[1].arguments == {}
    assert [type(b) for b in m.content] == [
        TextContent,
        ThinkingContent,
        ToolCallContent,
        TextContent,
        ToolCallContent,
    ]


def test_blocks_write_their_type_even_when_defaulted() -> None:
    assert TextContent(text="x").to_wire() == {"type": "text", "text": "x"}
    assert ThinkingContent(thinking="t").to_wire() == {"type": "thinking", "thinking": "t"}
    assert ImageContent(data="AA==", mime_type="image/png").to_wire() == {
        "type": "image",
        "data": "AA==",
        "mimeType": "image/png",
    }
    assert ToolCallContent(id="c", name="n").to_wire() == {
        "type": "toolCall",
        "id": "c",
        "name": "n",
    }


def test_unknown_block_is_kept_as_it_came() -> None:
    block = {"type": "redacted_thinking", "data": "abc", "signature": {"k": [1, None]}}
    m = Message.model_validate({"role": "assistant", "content": [block]})
    (got,) = m.content
    assert isinstance(got, OtherContent)
    assert got.type == "redacted_thinking"
    assert got.to_wire() == block
    assert m.to_wire()["content"] == [block]


def test_known_block_with_extra_fields_keeps_them() -> None:
    block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    m = Message.model_validate({"role": "user", "content": [block]})
    assert isinstance(m.content[0], TextContent)
    assert m.to_wire()["content"] == [block]


def test_aliases_and_snake_case_names() -> None:
    wire = {
        "role": "toolResult",
        "content": [],
        "toolCallId": "c",
        "toolName": "t",
        "isError": True,
        "parentUuid": "p",
    }
    by_alias = Message.model_validate(dict(wire))
    by_name = Message(
        role="toolResult",
        content=[],
        tool_call_id="c",
        tool_name="t",
        is_error=True,
        parent_uuid="p",
    )
    assert by_alias == by_name
    assert by_alias.tool_call_id == "c" and by_alias.is_error is True
    assert by_name.to_wire() == wire


def test_only_set_fields_are_written_and_an_explicit_null_is_kept() -> None:
    m = Message.model_validate({"role": "user", "content": [], "toolCallId": None})
    assert m.to_wire() == {"role": "user", "content": [], "toolCallId": None}
    assert "usage" not in Message(role="user", content=[]).to_wire()


def test_unknown_message_fields_are_kept() -> None:
    data = {
        "role": "assistant",
        "content": [],
        "stopReason": "stop",
        "timestamp": 1732200000000,
        "provider": {"name": "x", "retries": [1, 2]},
    }
    m = Message.model_validate(data)
    assert m.model_extra == {
        "stopReason": "stop",
        "timestamp": 1732200000000,
        "provider": {"name": "x", "retries": [1, 2]},
    }
    assert m.to_wire() == data


def test_usage_wire_shape() -> None:
    u = Usage.model_validate(
        {
            "input": 1,
            "output": 2,
            "cacheRead": 3,
            "cacheWrite": 4,
            "totalTokens": 10,
            "cost": {"total": 0.5},
            "reasoning": 9,
        }
    )
    assert (u.input, u.output, u.cache_read, u.cache_write, u.total_tokens) == (1, 2, 3, 4, 10)
    assert u.cost == {"total": 0.5}
    assert u.model_extra == {"reasoning": 9}
    assert Usage().to_wire() == {}


@pytest.mark.parametrize(
    "data",
    [
        {"role": "system", "content": []},
        {"role": "user"},
        {"role": "user", "content": 3},
        {"role": "user", "content": [{"type": "text"}]},
        {"role": "user", "content": [{"type": "image", "data": "x"}]},
        {"role": "assistant", "content": [{"type": "toolCall", "id": "c"}]},
    ],
)
def test_invalid_messages_are_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate(data)
    assert wire_message_error(data) is not None


VALID_WIRE = {
    "string-content": {"role": "user", "content": "hi"},
    "all-blocks": {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "t"},
            {"type": "thinking", "thinking": "th", "signature": "s"},
            {"type": "image", "data": "AA==", "mimeType": "image/png"},
            {"type": "toolCall", "id": "c", "name": "n", "arguments": {"a": [1]}},
            {"type": "whatever", "x": {"y": None}},
        ],
        "usage": {"input": 1, "output": 2, "cost": {"total": 0.1}},
        "extra": "kept",
    },
    "tool-result": {
        "role": "toolResult",
        "toolCallId": "c",
        "toolName": "n",
        "isError": False,
        "content": [{"type": "text", "text": "ok"}],
    },
    "nul-and-surrogate-values": {"role": "user", "content": "\x00\ud800", "x": "\udc00"},
}


@pytest.mark.parametrize("data", VALID_WIRE.values(), ids=VALID_WIRE.keys())
def test_what_the_fast_check_accepts_the_model_reads_back(data: dict[str, Any]) -> None:
    # Appends check dicts without pydantic; reads validate through Message. Everything
    # the fast check lets in must read back, with the same wire shape.
    assert wire_message_error(data) is None
    m = Message.model_validate(data)
    wire = m.to_wire()
    if isinstance(data["content"], str):
        data = {**data, "content": [{"type": "text", "text": data["content"]}]}
    assert wire == data


def test_record_is_frozen() -> None:
    rec = Record(
        session_id="01J9Z3K7Q8R2V5X4W6Y0A1B2C3",
        seq=1,
        kind="message",
        created_at=datetime.now(UTC),
        message=Message(role="user", content="x"),
    )
    with pytest.raises(ValidationError):
        rec.seq = 2  # type: ignore[misc]


def test_session_info_camel_case_dump() -> None:
    info = SessionInfo(
        id="01J9Z3K7Q8R2V5X4W6Y0A1B2C3",
        namespace="default",
        name=None,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        last_message_at=None,
        model=None,
        message_count=0,
        last_seq=0,
        source="cron",
        cron_job_id="j",
        system_prompt_override=None,
        metrics=Metrics(),
        metadata=None,
        parent_id=None,
        fork_seq=None,
    )
    dumped = info.model_dump(by_alias=True)
    assert dumped["cronJobId"] == "j"
    assert dumped["lastMessageAt"] is None
    assert dumped["metrics"]["inputTokens"] == 0
    assert SessionInfo.model_validate(dumped) == info
