"""A message read back (``decode.message``) is the message validation builds, however it
is used first, and the Record a read builds of it without validating again
(``decode.message_record``) is the Record validation builds. Each case touches a fresh
message, so each path is the first. A text that is no message is refused with
CorruptRecordError where it is first touched, whichever way, and at every touch after it:
never a pydantic or JSON error, never a message half-built."""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from sessiondb import CorruptRecordError, decode, jsoncodec
from sessiondb.models import Message, Record

_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "on it"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}},
            {"type": "thinking", "thinking": "hm"},
            {"type": "redacted", "data": [1, {"x": None}]},
        ],
        "usage": {"input": 3, "output": 4, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 1}},
        "responseId": "r1",
        "uuid": "u1",
    },
    {"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": [], "isError": True},
    {"role": "user", "content": "a string becomes a block"},
]

_TOUCHES: dict[str, Callable[[Message], Any]] = {
    "model_dump": lambda m: m.model_dump(),
    "model_dump unset": lambda m: m.model_dump(by_alias=True, exclude_unset=True),
    "model_dump_json": lambda m: m.model_dump_json(),
    "to_wire": lambda m: m.to_wire(),
    "field": lambda m: (m.role, m.content, m.usage, m.uuid),
    "extra field": lambda m: m.model_extra,
    "fields set": lambda m: m.model_fields_set,
    "repr": repr,
    "iteration": lambda m: list(m),
    "copy": lambda m: copy.copy(m).model_dump(),
    "deepcopy": lambda m: copy.deepcopy(m).model_dump(),
    "model_copy": lambda m: m.model_copy(update={"uuid": "x"}).model_dump(),
    "pickle": lambda m: pickle.loads(pickle.dumps(m)).model_dump(),
    "text": lambda m: m.text(),
    "in a record's dump": lambda m: _record(m).model_dump(),
    "in a record's json": lambda m: _record(m).model_dump_json(),
}

_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _record(message: Message) -> Record:
    return Record(session_id="s", seq=1, kind="message", created_at=_AT, message=message)


@pytest.mark.parametrize("data", _MESSAGES)
@pytest.mark.parametrize("touch", list(_TOUCHES))
def test_a_read_message_is_the_eager_one_however_first_touched(
    data: dict[str, Any], touch: str
) -> None:
    text = jsoncodec.dumps(data)
    expected = Message.model_validate(data)
    assert _TOUCHES[touch](decode.message(text)) == _TOUCHES[touch](expected)
    assert decode.message(text) == expected
    assert expected == decode.message(text)
    message = decode.message(text)
    message.uuid = "changed"
    expected_changed = expected.model_copy()
    expected_changed.uuid = "changed"
    assert message == expected_changed
    assert message.model_fields_set == expected_changed.model_fields_set


def test_a_message_record_is_the_validated_record() -> None:
    text = jsoncodec.dumps(_MESSAGES[1])
    got = decode.message_record("s", 7, _AT, "u1", text)
    expected = Record(
        session_id="s",
        seq=7,
        kind="message",
        created_at=_AT,
        uuid="u1",
        message=Message.model_validate(_MESSAGES[1]),
    )
    assert got is not None
    assert got == expected
    assert got.model_fields_set == expected.model_fields_set
    assert got.model_dump() == expected.model_dump()
    assert repr(got) == repr(expected)
    # Columns of another type than sessiondb writes are left to Record's validation.
    assert decode.message_record(7, 7, _AT, None, text) is None
    assert decode.message_record("s", "7", _AT, None, text) is None
    assert decode.message_record("s", 7, _AT, 1, text) is None


@pytest.mark.parametrize(
    "data",
    [
        {"role": "user", "content": [{"type": "text", "text": 5}]},
        {"role": "user", "content": [{"type": "toolCall", "id": "c", "name": 1}]},
        {"role": "user", "content": [{"type": "image", "data": "x"}]},
        {"role": "robot", "content": []},
        {"role": "user", "content": [], "usage": {"input": "many"}},
        {"role": "user", "content": [7]},
    ],
)
@pytest.mark.parametrize("touch", [*_TOUCHES, "==", "== from the left", "setattr", "validate"])
def test_a_value_that_is_no_message_is_refused_where_first_touched(
    data: dict[str, Any], touch: str
) -> None:
    # The read checks nothing (the contract since the check moved to the first touch):
    # whichever way a message is first touched, a text that is no message raises
    # CorruptRecordError, and so does every touch after it.
    touches: dict[str, Callable[[Message], Any]] = _TOUCHES | {
        "==": lambda m: m == Message(role="user", content=[]),
        "== from the left": lambda m: Message(role="user", content=[]) == m,
        "setattr": lambda m: setattr(m, "uuid", "x"),
        "validate": lambda m: Message.model_validate(m).role,
    }
    message = decode.message(jsoncodec.dumps(data))
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="stored message"):
            touches[touch](message)
    for other in ("field", "to_wire", "model_dump", "repr"):
        with pytest.raises(CorruptRecordError, match="stored message"):
            touches[other](message)


def test_a_message_of_the_common_shape_is_built_when_first_used() -> None:
    text = jsoncodec.dumps(_MESSAGES[1] | {"content": _MESSAGES[1]["content"][:3]})
    message = decode.message(text)
    assert type(message) is decode.StoredMessage
    assert isinstance(message, Message)
    assert vars(message) == vars(Message.model_validate_json(text))
    with pytest.raises(TypeError):
        hash(decode.message(text))
    with pytest.raises(AttributeError):
        _ = decode.message(text).no_such_field
    # A Message subclass of the caller's own is not the same message, as in pydantic.
    mine = type("Mine", (Message,), {})
    assert decode.message(text) != mine.model_validate_json(text)


@pytest.mark.parametrize(
    "data",
    [
        # What the validation reads but the shape check leaves to it: an int from a
        # string, a block of a type not modelled, a string content, a Python name the
        # shape does not name.
        {"role": "user", "content": [], "usage": {"input": "5"}},
        {"role": "user", "content": [{"type": "redacted", "data": 1}]},
        {"role": "user", "content": "text"},
        {"role": "user", "content": [{"type": "image", "data": "x", "mime_type": "a/b"}]},
    ],
)
def test_a_message_the_check_leaves_to_the_validation_is_read_as_before(
    data: dict[str, Any],
) -> None:
    text = jsoncodec.dumps(data)
    got = decode.message(text)
    assert isinstance(got, Message)
    assert got == Message.model_validate(data)
    assert got.to_wire() == Message.model_validate(data).to_wire()


def test_a_field_by_its_python_name_is_checked_with_its_type() -> None:
    # The validation reads ``tool_call_id`` as ``toolCallId`` (populate_by_name): the
    # shape check takes it only of the field's type, so what it lets through builds.
    good = jsoncodec.dumps({"role": "user", "content": [], "tool_call_id": "c"})
    assert decode.message(good).tool_call_id == "c"
    assert decode.message(good).to_wire() == {"role": "user", "content": [], "toolCallId": "c"}
    for bad in ({"tool_call_id": 3}, {"is_error": "maybe"}, {"parent_uuid": []}):
        message = decode.message(jsoncodec.dumps({"role": "user", "content": []} | bad))
        with pytest.raises(CorruptRecordError):
            message.to_wire()


@pytest.mark.parametrize("data", _MESSAGES)
def test_the_wire_of_a_message_not_built_yet_is_its_stored_text(data: dict[str, Any]) -> None:
    # What sessiondb stores is the message's to_wire(); read back and not built, the
    # message hands that on (parsed), key for key and in order.
    written = jsoncodec.dumps(Message.model_validate(data).to_wire())
    message = decode.message(written)
    assert type(message) is decode.StoredMessage
    assert jsoncodec.dumps(message.to_wire()) == written
    wire = message.to_wire()
    wire["role"] = "changed"  # the caller's own object
    assert message.to_wire()["role"] == data["role"]
    assert jsoncodec.dumps(message.to_wire()) == jsoncodec.dumps(
        Message.model_validate_json(written).to_wire()
    )


def test_a_read_context_knows_whether_a_message_names_a_response() -> None:
    def texts(*messages: dict[str, Any]) -> list[str]:
        return [jsoncodec.dumps(m) for m in messages]

    plain = {"role": "user", "content": [{"type": "text", "text": 'say "responseId"'}]}
    part = {"role": "assistant", "content": [], "responseId": "r1"}
    odd = {"role": "assistant", "content": [{"type": "redacted"}], "responseId": "r2"}
    assert decode.context_messages(texts(plain, plain)) == ([Message(**plain)] * 2, False)
    messages, names = decode.context_messages(texts(plain, part))
    assert names and messages == [Message(**plain), Message.model_validate(part)]
    messages, names = decode.context_messages(texts(plain, odd))
    assert names and messages == [Message(**plain), Message.model_validate(odd)]
    # A text that is no message is read, and refused where it is first touched.
    messages, names = decode.context_messages([*texts(plain), '{"role": "robot", "content": []}'])
    assert not names and messages[0] == Message(**plain)
    with pytest.raises(CorruptRecordError):
        _ = messages[1].role


def test_records_a_read_builds_share_nothing_a_copy_changes() -> None:
    text = jsoncodec.dumps(_MESSAGES[0])
    first = decode.message_record("s", 1, _AT, None, text)
    second = decode.message_record("s", 2, _AT, None, text)
    assert first is not None and second is not None
    changed = first.model_copy(update={"entry": {"x": 1}})
    assert "entry" in changed.model_fields_set
    assert "entry" not in first.model_fields_set
    assert "entry" not in second.model_fields_set
    with pytest.raises(ValidationError):
        first.seq = 5  # type: ignore[misc]
    assert first.model_fields_set == second.model_fields_set == {
        "session_id", "seq", "kind", "created_at", "uuid", "message"
    }  # fmt: skip


def test_threads_that_first_use_one_message_at_once_see_the_same_message() -> None:
    text = jsoncodec.dumps(_MESSAGES[1] | {"content": _MESSAGES[1]["content"][:3]})
    expected = Message.model_validate_json(text)
    for _ in range(50):
        message = decode.message(text)
        start = threading.Barrier(8)
        seen: list[Any] = []

        def touch(
            message: Message = message,
            start: threading.Barrier = start,
            seen: list[Any] = seen,
        ) -> None:
            start.wait()
            seen.append((message.to_wire(), message.content, message.model_dump()))

        threads = [threading.Thread(target=touch) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(seen) == 8
        for wire, content, dumped in seen:
            assert wire == expected.to_wire()
            assert content == expected.content
            assert dumped == expected.model_dump()
