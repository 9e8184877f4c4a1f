"""The hypothesis strategies the conformance machine draws its operations' arguments
from: wire-shape messages and agent turns, texts, names and keys (good and bad)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from .model import MAX_KEY_CHARS

TEXTS = (
    "hello",
    "fix the failing build please",
    "  spaced   out\n words ",
    "",
    "ünïcödé ✓ 日本語",
    "nul \x00 inside",
    "lone \ud800 surrogate",
    "a long request " * 8,
)
CALL_IDS = ("call-1", "call-2", "call-3")
UUIDS = ("u-1", "u-2", "u-3", "u-4", "u-5", "u-6")
NAMES = ("alpha", "beta session", "ünï")
# Keys that differ only in case or spaces are different keys; the longest fits exactly.
GOOD_KEYS = ("chat-1", "Chat-1", "chat-1 ", " chat-1", "user:42/thread:7", "ünï", "😀" * 384)
# Empty, NUL, a lone surrogate, one character or byte too many.
BAD_KEYS = ("", "a\x00b", "lone \ud800", "k" * (MAX_KEY_CHARS + 1), "😀" * 385)
# How an append passes expected_seq: not at all, right, one behind, one ahead.
EXPECTED = ("none", "head", "none", "head", "stale", "ahead")

_texts = st.sampled_from(TEXTS)
# Mostly good keys, now and then a bad one.
_keys = st.sampled_from(GOOD_KEYS * 3 + BAD_KEYS)


def texts() -> st.SearchStrategy[str]:
    """One of :data:`TEXTS`: empty, spaced, non-ASCII, with NUL or a lone surrogate."""
    return _texts


def keys() -> st.SearchStrategy[str]:
    """Mostly one of :data:`GOOD_KEYS`, now and then one of :data:`BAD_KEYS`."""
    return _keys


def histories() -> st.SearchStrategy[list[dict[str, Any]]]:
    """A session's first history: one to four messages or turns, as one list."""
    return st.lists(wire_messages() | turns(), min_size=1, max_size=4).map(_flatten)


def _flatten(parts: list[dict[str, Any] | list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [m for p in parts for m in (p if isinstance(p, list) else [p])]


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@st.composite
def wire_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A wire-shape message: user, assistant (with tool calls, thinking, usage) or tool
    result, sometimes with a uuid, an unknown field or an unknown block."""
    role = draw(st.sampled_from(("user", "assistant", "toolResult")))
    message: dict[str, Any] = {"role": role}
    if role == "user":
        text = draw(_texts)
        message["content"] = text if draw(st.booleans()) else [_text_block(text)]
    elif role == "assistant":
        message["content"] = _assistant_blocks(draw)
        if draw(st.booleans()):
            message["usage"] = _usage(draw)
    else:
        message.update(_tool_result_fields(draw))
    uuid = draw(st.none() | st.sampled_from(UUIDS))
    if uuid is not None:
        message["uuid"] = uuid
    if draw(st.integers(0, 9)) == 0:
        message["x-trace"] = {"id": draw(st.integers(0, 99)), "tags": ["a", "b"]}
    return message


def _assistant_blocks(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Maybe thinking, a text, up to two tool calls, now and then an unknown block."""
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocks.append({"type": "thinking", "thinking": draw(_texts)})
    blocks.append(_text_block(draw(_texts)))
    for call_id in draw(st.lists(st.sampled_from(CALL_IDS), max_size=2, unique=True)):
        blocks.append(
            {"type": "toolCall", "id": call_id, "name": "read", "arguments": {"path": "a.py"}}
        )
    if draw(st.integers(0, 9)) == 0:
        blocks.append({"type": "custom", "payload": [1, "two", None]})
    return blocks


def _usage(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "input": draw(st.integers(0, 500)),
        "output": draw(st.integers(0, 500)),
        "cacheRead": draw(st.integers(0, 50)),
        "cacheWrite": draw(st.integers(0, 50)),
        # Quarter dollars add up exactly in binary floating point.
        "cost": {"total": draw(st.integers(0, 8)) / 4},
    }


def _tool_result_fields(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "toolCallId": draw(st.sampled_from(CALL_IDS)),
        "toolName": "read",
        "content": [_text_block(draw(_texts))],
    }
    if draw(st.booleans()):
        fields["isError"] = draw(st.booleans())
    return fields


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An agent turn: a user message, an assistant message with tool calls, and results
    for some of the calls in any order, sometimes with a user message among them."""
    calls = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True))
    turn: list[dict[str, Any]] = []
    if draw(st.booleans()):
        turn.append({"role": "user", "content": draw(_texts)})
    turn.append(
        {
            "role": "assistant",
            "content": [
                {"type": "toolCall", "id": c, "name": "read", "arguments": {}} for c in calls
            ],
        }
    )
    answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
    results: list[dict[str, Any]] = [
        {"role": "toolResult", "toolCallId": c, "content": [_text_block(draw(_texts))]}
        for c in answered
    ]
    if results and draw(st.integers(0, 3)) == 0:
        results.insert(draw(st.integers(0, len(results) - 1)), {"role": "user", "content": "wait"})
    return turn + results
