"""The read path's model builders give exactly what ``model_validate`` gives, for every
message a write accepts: same classes, fields, fields set, extras and wire form."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb import fastmodels
from sessiondb.models import Block, Message, wire_message

text = st.text(max_size=20)
keys = st.sampled_from(["cacheControl", "citations", "signature", "x_extra", "meta"])
json_leaf = st.none() | st.booleans() | st.integers(-(2**60), 2**60) | text
extra_fields = st.dictionaries(keys, json_leaf, max_size=2)

blocks = st.one_of(
    st.builds(lambda t, e: {"type": "text", "text": t, **e}, text, extra_fields),
    st.builds(
        lambda i, n, a, e: {"type": "toolCall", "id": i, "name": n, **a, **e},
        text,
        text,
        st.one_of(st.just({}), st.builds(lambda v: {"arguments": {"path": v}}, text)),
        extra_fields,
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t}, text),
    st.builds(lambda d, m: {"type": "image", "data": d, "mimeType": m}, text, text),
    st.builds(
        lambda t, e: {"type": t, **e}, st.sampled_from(["audio", "document", "x"]), extra_fields
    ),
)
usage = st.builds(
    lambda i, o, extra: {"input": i, "output": o, **extra},
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.dictionaries(
        st.sampled_from(["cacheRead", "cacheWrite", "totalTokens"]), st.integers(0, 10**6)
    ),
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "toolResult"]))
    content: Any = draw(st.one_of(text, st.lists(blocks, max_size=4)))
    data: dict[str, Any] = {"role": role, "content": content}
    if role == "toolResult":
        data["toolCallId"] = draw(text.filter(bool))
        if draw(st.booleans()):
            data["isError"] = draw(st.booleans())
    if draw(st.booleans()):
        data["usage"] = draw(usage)
    for key in draw(st.lists(st.sampled_from(["uuid", "parentUuid", "toolName"]), max_size=2)):
        data[key] = draw(text)
    data.update(draw(extra_fields))
    return data


def _same(fast: Any, slow: Any) -> None:
    assert type(fast) is type(slow)
    assert fast == slow
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_extra == slow.model_extra


@settings(max_examples=400, deadline=None)
@given(messages())
def test_fast_message_is_model_validate(data: dict[str, Any]) -> None:
    stored = wire_message(data)  # what a write stores
    fast, slow = fastmodels.message(stored), Message.model_validate(stored)
    _same(fast, slow)
    for f, s in zip(fast.content, slow.content, strict=True):
        assert isinstance(f, Block)
        _same(f, s)
    if slow.usage is not None:
        _same(fast.usage, slow.usage)
    assert fast.to_wire() == slow.to_wire()
    assert fast.model_dump_json(by_alias=True) == slow.model_dump_json(by_alias=True)


def test_a_bare_string_content_of_an_old_row_reads_as_one_text_block() -> None:
    data = {"role": "user", "content": "hi"}
    _same(fastmodels.message(data), Message.model_validate(data))


def test_what_it_does_not_expect_goes_through_validation() -> None:
    data = {"role": "user", "content": [{"type": "text"}]}  # no text: refused by validation
    try:
        fastmodels.message(data)
    except Exception as exc:
        assert type(exc).__name__ == "ValidationError"
    else:
        raise AssertionError("a block without its required field must not build")
