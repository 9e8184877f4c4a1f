"""``wire_message``: the check and normalisation every appended message goes through.

Pure, no database; the stored side is in ``test_spec_scenarios.py`` (S7.12).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb import InvalidInputError, Message
from sessiondb.models import wire_message

FUZZ = settings(database=None, deadline=None, max_examples=300)


def test_string_content_becomes_one_text_block_in_place() -> None:
    data = {"zFirst": 1, "content": "hello", "role": "user", "meta": {"b": 2, "a": 1}}
    wire = wire_message(data)
    assert wire == {
        "zFirst": 1,
        "content": [{"type": "text", "text": "hello"}],
        "role": "user",
        "meta": {"b": 2, "a": 1},
    }
    assert list(wire) == ["zFirst", "content", "role", "meta"]
    assert wire["meta"] is data["meta"]
    assert data["content"] == "hello"  # the caller's dict is not changed


def test_list_content_is_returned_as_given() -> None:
    data = {"role": "assistant", "content": [{"type": "future", "x": [1]}], "extra": None}
    assert wire_message(data) is data


def test_any_mapping_is_accepted() -> None:
    wire = wire_message(MappingProxyType({"role": "user", "content": "hi"}))
    assert wire == {"role": "user", "content": [{"type": "text", "text": "hi"}]}


def test_a_message_model_gives_its_wire_shape() -> None:
    message = Message(role="toolResult", content="ok", tool_call_id="c1", is_error=False)
    assert wire_message(message) == {
        "role": "toolResult",
        "content": [{"type": "text", "text": "ok"}],
        "toolCallId": "c1",
        "isError": False,
    }


REFUSED: dict[str, tuple[Any, str]] = {
    "tool-result-without-call-id": (
        {"role": "toolResult", "content": [{"type": "text", "text": "ok"}]},
        "toolCallId",
    ),
    "tool-result-null-call-id": (
        {"role": "toolResult", "content": [], "toolCallId": None},
        "toolCallId",
    ),
    "tool-result-empty-call-id": (
        {"role": "toolResult", "content": [], "toolCallId": ""},
        "toolCallId",
    ),
    "tool-result-int-call-id": (
        {"role": "toolResult", "content": [], "toolCallId": 7},
        "toolCallId",
    ),
    "is-error-string": (
        {"role": "toolResult", "toolCallId": "c", "content": [], "isError": "false"},
        "isError must be a boolean",
    ),
    "is-error-int": (
        {"role": "toolResult", "toolCallId": "c", "content": [], "isError": 0},
        "isError must be a boolean",
    ),
    "is-error-on-user": (
        {"role": "user", "content": [], "isError": False},
        "toolResult messages only",
    ),
    "is-error-on-assistant": (
        {"role": "assistant", "content": [], "isError": True},
        "toolResult messages only",
    ),
    "model-tool-result-without-call-id": (Message(role="toolResult", content="x"), "toolCallId"),
    "model-is-error-on-user": (Message(role="user", content="x", is_error=True), "toolResult"),
    "not-a-message": (["role", "user"], "expected a Message or a dict"),
}


@pytest.mark.parametrize(("data", "reason"), REFUSED.values(), ids=REFUSED.keys())
def test_what_the_spec_forbids_is_refused(data: Any, reason: str) -> None:
    with pytest.raises(InvalidInputError, match=reason) as caught:
        wire_message(data, "message 3")
    assert str(caught.value).startswith("message 3: ")


def test_a_null_is_error_means_absent_on_any_role() -> None:
    # A model with is_error=None dumps "isError": null; it must stay appendable.
    for data in (
        {"role": "user", "content": [], "isError": None},
        {"role": "toolResult", "toolCallId": "c", "content": [], "isError": None},
    ):
        assert wire_message(data) is data


# -- fuzzing ------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}),
    st.fixed_dictionaries(
        {"type": st.just("toolCall"), "id": st.text(), "name": st.text()},
        optional={"arguments": st.dictionaries(st.text(), json_values, max_size=3)},
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["future", "thinking", "image"])}),
    json_values,
)
# Extra keys that are not a field's Python name (pydantic would read those as the field).
extra_keys = st.sampled_from(["timestamp", "meta", "stopReason", "x", "🦀", "api"])
messages = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "toolResult", "system"]),
        "content": st.text() | st.lists(blocks, max_size=4) | json_values,
    },
    optional={
        "toolCallId": st.none() | st.text(max_size=5) | st.integers(),
        "isError": st.none() | st.booleans() | st.integers(0, 1) | st.text(max_size=3),
        "uuid": st.none() | st.text(max_size=5),
    },
).flatmap(
    lambda base: st.dictionaries(extra_keys, json_values, max_size=3).map(
        lambda extra: {**base, **extra}
    )
)


@FUZZ
@given(messages)
def test_fuzz_wire_message_keeps_everything_but_a_string_content(data: dict[str, Any]) -> None:
    try:
        wire = wire_message(data)
    except InvalidInputError:
        return
    assert list(wire) == list(data)
    for key, value in data.items():
        if key != "content":
            assert wire[key] is value
    if isinstance(data["content"], str):
        assert wire["content"] == [{"type": "text", "text": data["content"]}]
    else:
        assert wire["content"] is data["content"]
    # What the check lets in reads back as a model with the same wire shape.
    assert Message.model_validate(wire).to_wire() == wire
    assert data["role"] != "toolResult" or isinstance(data.get("toolCallId"), str)
    assert data.get("isError") is None or data["role"] == "toolResult"


@FUZZ
@given(st.one_of(json_values, messages, st.builds(object), st.binary()))
def test_fuzz_wire_message_refuses_only_with_invalid_input(data: Any) -> None:
    try:
        wire = wire_message(data)
    except InvalidInputError as exc:
        assert str(exc).startswith("message: ")
    else:
        assert isinstance(wire["content"], list)
