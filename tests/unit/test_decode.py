"""The read path's decoder gives exactly what ``Message.model_validate`` of the parsed
text gives (equal models, the same fields set, the same extra fields in the same order,
the same wire output), and refuses with :class:`CorruptRecordError` exactly the texts
that validation refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from sessiondb import CorruptRecordError, SessionDBError, decode, jsoncodec
from sessiondb.models import Compaction, Message, Prune, Tombstone

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "3", "true", "", "text"])
)
_json = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_block_keys = st.sampled_from(
    ["type", "text", "id", "name", "arguments", "thinking", "data", "mimeType", "mime_type", "x"]
)
_block_types = st.sampled_from(["text", "toolCall", "thinking", "image", "other", "", 5, None])


@st.composite
def _blocks(draw: st.DrawFn) -> Any:
    block: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        block["type"] = draw(_block_types)
    for key in draw(st.lists(_block_keys, max_size=4)):
        block[key] = draw(st.text(max_size=6) | _json)
    return block if draw(st.integers(0, 19)) else draw(_json)


_message_keys = st.sampled_from(
    [
        "toolCallId",
        "toolName",
        "isError",
        "uuid",
        "parentUuid",
        "usage",
        "tool_call_id",
        "responseId",
        "extra",
        "_private",
    ]
)
_usage_keys = st.sampled_from(
    ["input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost", "cache_read", "more"]
)


@st.composite
def _usages(draw: st.DrawFn) -> Any:
    usage = {
        key: draw(st.integers(0, 10**6) | _json)
        for key in draw(st.lists(_usage_keys, max_size=5, unique=True))
    }
    return usage if draw(st.integers(0, 9)) else draw(_json)


@st.composite
def _messages(draw: st.DrawFn) -> Any:
    message: dict[str, Any] = {}
    if draw(st.integers(0, 19)):
        message["role"] = draw(st.sampled_from(["user", "assistant", "toolResult", "system", 1]))
    if draw(st.integers(0, 19)):
        message["content"] = draw(st.lists(_blocks(), max_size=3) | st.text(max_size=5) | _json)
    for key in draw(st.lists(_message_keys, max_size=4, unique=True)):
        if key == "usage":
            message[key] = draw(_usages() | st.none())
        else:
            message[key] = draw(st.text(max_size=5) | st.booleans() | st.none() | _json)
    # Key order is part of the wire shape: shuffle it.
    keys = draw(st.permutations(list(message)))
    return {k: message[k] for k in keys}


def _same(got: BaseModel, expected: BaseModel) -> None:
    assert got == expected
    assert expected == got
    # A message of the common shape reads as a StoredMessage: a Message built when
    # first used (decode's docstring); every other model is of the validated type.
    assert type(got) is type(expected) or (
        type(got) is decode.StoredMessage and type(expected) is Message
    )
    assert got.model_fields_set == expected.model_fields_set
    assert list((got.model_extra or {}).items()) == list((expected.model_extra or {}).items())
    assert repr(got) == repr(expected)
    assert got.model_dump(by_alias=True, exclude_unset=True) == expected.model_dump(
        by_alias=True, exclude_unset=True
    )
    assert _dumped(got) == _dumped(expected)


def _dumped(model: BaseModel) -> str:
    """The model's JSON, or the name of the error that refuses it (a lone surrogate)."""
    try:
        return model.model_dump_json(by_alias=True)
    except ValueError as exc:  # PydanticSerializationError
        return type(exc).__name__


def _expected(cls: type[BaseModel], text: str) -> BaseModel | None:
    try:
        return cls.model_validate(jsoncodec.loads(text))
    except ValidationError:
        return None


@settings(max_examples=400, deadline=None)
@given(_messages())
def test_a_message_decodes_as_validation_reads_it(value: Any) -> None:
    try:
        text = jsoncodec.dumps(value)
    except ValueError:
        return  # no JSON form (a key that is not a string): nothing could store it
    expected = _expected(Message, text)
    if expected is None:
        # Refused where first touched: to_wire() (which hands on the text the shape
        # check takes, so the check must take no text the validation refuses), a field.
        with pytest.raises(CorruptRecordError):
            decode.message(text).to_wire()
        with pytest.raises(CorruptRecordError):
            _ = decode.message(text).role
        return
    got = decode.message(text)
    _same(got, expected)
    # Each way in builds a message not built yet: a dump, a field, a copy, repr.
    assert _dumped(decode.message(text)) == _dumped(expected)
    assert decode.message(text).to_wire() == expected.to_wire()
    assert decode.message(text).content == expected.content
    assert decode.message(text).model_fields_set == expected.model_fields_set
    assert decode.message(text).model_copy() == expected
    assert repr(decode.message(text)) == repr(expected)
    assert expected == decode.message(text)
    for block, expected_block in zip(got.content, expected.content, strict=True):
        _same(block, expected_block)
    if expected.usage is not None:
        assert got.usage is not None
        _same(got.usage, expected.usage)
    assert decode.messages([text, text]) == [expected, expected]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([Compaction, Tombstone, Prune]),
    st.dictionaries(
        st.sampled_from(
            [
                "summary",
                "firstKeptSeq",
                "first_kept_seq",
                "tokensBefore",
                "readFiles",
                "modifiedFiles",
                "targetSeq",
                "reason",
                "seqs",
                "marker",
                "tokensFreed",
                "other",
            ]
        ),
        st.integers(0, 99) | st.lists(st.integers(0, 9), max_size=2) | _json,
        max_size=6,
    ),
)
def test_an_overlay_decodes_as_validation_reads_it(cls: type[BaseModel], value: Any) -> None:
    text = jsoncodec.dumps(value)
    expected = _expected(cls, text)
    by_kind = {Compaction: decode.compaction, Tombstone: decode.tombstone, Prune: decode.prune}
    if expected is None:
        with pytest.raises(CorruptRecordError):
            by_kind[cls](text)
        return
    _same(by_kind[cls](text), expected)


@pytest.mark.parametrize(
    "text",
    ["", "not json", "{", '{"role": "user", "content": [', "\ud800", " {", "[1, 2]", "null"],
)
def test_text_that_is_no_message_is_refused_typed(text: str) -> None:
    with pytest.raises(CorruptRecordError) as caught:
        decode.message(text).to_wire()
    assert isinstance(caught.value, SessionDBError)
    assert isinstance(caught.value, ValueError)  # as the untyped errors of before were
    assert str(caught.value).startswith("stored message")


def test_a_deep_payload_is_refused_typed_not_by_recursion() -> None:
    deep = '{"role": "user", "content": [{"type": "x", "v": ' + "[" * 5000 + "]" * 5000 + "}]}"
    with pytest.raises(CorruptRecordError):
        decode.message(deep).to_wire()
    huge = '{"role": "user", "content": [{"type": "x", "v": ' + "[" * 600 + "]" * 600 + "}]}"
    assert decode.message(huge).content[0].type == "x"  # what validation reads, it reads


def test_the_exact_path_reads_what_orjson_cannot() -> None:
    value = {"role": "user", "content": [{"type": "text", "text": "a\ud800"}], "n": 2**70}
    text = jsoncodec.dumps(value)
    assert jsoncodec.is_exact_path(text)
    message = decode.message(text)
    assert message.text() == "a\ud800"
    assert message.model_extra == {"n": 2**70}


# -- a split response's fields, read without parsing the rest --------------------------

_head_keys = st.sampled_from(["role", "responseId", "content", "x", "responseid", "role "])


@st.composite
def _objects(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A stored message's text, sometimes with a key repeated (as a hand-written text may
    have it; the parsers keep the last), and the object the parsers read from it."""
    pairs = draw(st.lists(st.tuples(_head_keys, _json), max_size=6))
    text = "{" + ",".join(f"{jsoncodec.dumps(k)}:{jsoncodec.dumps(v)}" for k, v in pairs) + "}"
    if any(jsoncodec.is_exact_path(jsoncodec.dumps(v)) for _, v in pairs):
        text = " " + text  # the exact path's mark, as dumps writes it
    return text, jsoncodec.loads(text)


@settings(max_examples=800)
@given(st.lists(_objects(), max_size=4))
def test_response_heads_are_what_the_parsed_objects_hold(
    objects: list[tuple[str, dict[str, Any]]],
) -> None:
    texts = [t for t, _ in objects]
    expected = [
        (v.get("role"), r if isinstance(r := v.get("responseId"), str) else None)
        for _, v in objects
    ]
    assert decode.response_heads(texts) == expected


def test_response_heads_of_texts_msgspec_reads_or_leaves_to_the_parsers() -> None:
    deep = '{"role":"assistant","x":' + "[" * 900 + "]" * 900 + ',"responseId":"r"}'
    texts = ['{"role":"\ud800","responseId":"r"}', deep, ' {"role":"a","n":1e999}']
    assert decode.response_heads(texts) == [("\ud800", "r"), ("assistant", "r"), ("a", None)]


_TOO_DEEP = '{"role":"a","x":' + "[" * 5_000 + "]" * 5_000 + "}"


@pytest.mark.parametrize("text", ["[1]", '"text"', "5", "null", "{", "", "[" * 100_000, _TOO_DEEP])
def test_response_heads_refuse_a_text_that_is_no_object_typed(text: str) -> None:
    with pytest.raises(CorruptRecordError):
        decode.response_heads(['{"role":"user"}', text])
