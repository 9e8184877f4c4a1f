"""Responses-API items <-> sessiondb messages: plain functions, no I/O.

Each item is one sessiondb message (see the package's docstring for the mapping) that
keeps the item exactly as added under ``ITEM_FIELD``. Two kinds of message stand for no
item: a usage record (``USAGE_FIELD``, written by ``store_run_usage``), and the summary
of a compaction made from the Responses compaction endpoint's output holds that output's
items, which come back in its place.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ... import jsoncodec
from ...context import SUMMARY_PREFIX, SUMMARY_SUFFIX, summary_text
from ...errors import InvalidInputError
from ...models import Message, Record

#: The wire field of a sessiondb message that holds the Responses-API item as added.
ITEM_FIELD = "responsesItem"
#: The wire field that says where in the item its text goes back (see ``_with_item``).
TEXT_FIELD = "responsesItemText"
#: The wire field of a usage record: an assistant message with no content whose
#: ``usage`` is one model request's, and this field the SDK's details of it.
USAGE_FIELD = "responsesUsage"
#: How a compaction summary holding the Responses compaction endpoint's output starts;
#: the JSON array of its items follows.
RESPONSES_SUMMARY_PREFIX = "openai-responses-compaction-items:"
#: The tombstone reason ``pop_item`` writes.
POP_REASON = "openai-agents pop_item"

_TEXT_PARTS = frozenset(("input_text", "output_text", "text", "summary_text", "reasoning_text"))
# Content block types that sessiondb validates; a part of one of these types that does
# not have their shape is left out of the content (the item keeps it).
_SESSIONDB_BLOCKS = frozenset(("text", "toolCall", "thinking", "image"))


def parse(text: str) -> Any:
    """``jsoncodec.loads`` with the cyclic garbage collector paused.

    A context of 20,000 items parses into ~200,000 containers, and the collector's full
    passes over a big heap took most of the time: 0.40 s against 0.05 s with it paused.
    The parse makes no cycles and holds the GIL throughout, so pausing the collector
    for it alone leaves nothing uncollected; its previous state is restored.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return jsoncodec.loads(text)
    finally:
        if paused:
            gc.enable()


# -- items <-> messages: plain functions ---------------------------------------------------


def item_message(item: Any, index: int = 0) -> dict[str, Any]:
    """The sessiondb wire message that stores one Responses-API item.

    Raises:
        InvalidInputError: ``item`` is not a JSON object (a dict, or a pydantic model of
            the SDK's, which is stored as its ``model_dump``).
    """
    if not isinstance(item, Mapping) and callable(getattr(item, "model_dump", None)):
        item = item.model_dump(mode="json", exclude_unset=True)
    if not isinstance(item, Mapping):
        raise InvalidInputError(
            f"item {index}: a Responses-API item is a dict, got {type(item).__name__}"
        )
    item = item if isinstance(item, dict) else dict(item)
    kind = item.get("type")
    role = item.get("role")
    call_id = item.get("call_id")
    has_call_id = isinstance(call_id, str) and call_id != ""
    if kind in (None, "message") and role in ("user", "system", "developer", "assistant"):
        message: dict[str, Any] = {
            "role": "assistant" if role == "assistant" else "user",
            "content": content_blocks(item.get("content")),
        }
        return _with_item(message, item, "content")
    elif isinstance(kind, str) and kind.endswith("_call_output") and has_call_id:
        message = {
            "role": "toolResult",
            "content": content_blocks(item.get("output")),
            "toolCallId": call_id,
        }
        return _with_item(message, item, "output")
    elif isinstance(kind, str) and kind.endswith("_call") and has_call_id:
        name = item.get("name")
        message = {
            "role": "assistant",
            "content": [
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": name if isinstance(name, str) else kind,
                    "arguments": _arguments(item),
                }
            ],
        }
    elif kind == "reasoning":
        message = {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": _reasoning(item)}],
        }
    else:
        message = {"role": "assistant", "content": []}
    message[ITEM_FIELD] = item
    return message


def _with_item(message: dict[str, Any], item: dict[str, Any], key: str) -> dict[str, Any]:
    """``message`` holding ``item``, whose text under ``key`` the content blocks already
    hold: it is stored once, as the blocks. The item keeps ``null`` in its place (and its
    key order) and ``TEXT_FIELD`` says where the text goes back: ``key`` for a string,
    ``key[]`` for a list of text parts, whose ``text`` fields are nulled. Items are read
    far more often than written, and parsing the text twice made ``get_items`` of a long
    session slower than the SDK's own store."""
    value = item.get(key)
    if isinstance(value, str):
        message[ITEM_FIELD] = {**item, key: None}
        message[TEXT_FIELD] = key
    elif (
        isinstance(value, list)
        and value
        and all(
            isinstance(p, dict) and p.get("type") in _TEXT_PARTS and isinstance(p.get("text"), str)
            for p in value
        )
    ):
        message[ITEM_FIELD] = {**item, key: [{**p, "text": None} for p in value]}
        message[TEXT_FIELD] = key + "[]"
    else:
        message[ITEM_FIELD] = item
    return message


def content_blocks(content: Any) -> list[dict[str, Any]]:
    """Content blocks for a Responses-API ``content`` or ``output``: text parts as text
    blocks, a data-URL ``input_image`` as an image block, any other part as it is."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts = content if isinstance(content, list) else [content] if isinstance(content, dict) else []
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        text = part.get("text") if kind != "refusal" else part.get("refusal")
        if kind in _TEXT_PARTS or kind == "refusal":
            if isinstance(text, str):
                blocks.append({"type": "text", "text": text})
        elif kind == "input_image" and _data_url(part.get("image_url")) is not None:
            mime, data = _data_url(part.get("image_url")) or ("", "")
            blocks.append({"type": "image", "data": data, "mimeType": mime})
        elif isinstance(kind, str) and kind not in _SESSIONDB_BLOCKS:
            blocks.append(part)
    return blocks


def _data_url(url: Any) -> tuple[str, str] | None:
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    mime, _, encoding = head.partition(";")
    return (mime, data) if sep and encoding == "base64" and mime else None


def _arguments(item: dict[str, Any]) -> dict[str, Any]:
    raw = item.get("arguments")
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # broken, too deep, or NaN / Infinity
            return {"arguments": raw}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {k: item[k] for k in ("input", "action", "arguments") if k in item}


def _no_constant(name: str) -> Any:
    """Python's json reads ``NaN`` and ``Infinity``, which no stored payload may hold (strict
    JSON has no such values): such arguments stay the text they came as."""
    raise ValueError(f"{name} is not JSON")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _reasoning(item: dict[str, Any]) -> str:
    texts = [
        part["text"]
        for key in ("summary", "content")
        for part in _list(item.get(key))
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def wire_items(wire: dict[str, Any]) -> list[Any]:
    """The Responses-API items a context message (in its wire shape, as
    ``context_json`` gives it) stands for: the stored item (with a pruned tool result's
    marker as its output), else items made from the message (a compaction's summary is
    one user message item)."""
    item = wire.get(ITEM_FIELD)
    if USAGE_FIELD in wire:
        return []
    if isinstance(item, dict):
        content = wire.get("content")
        text_at = wire.get(TEXT_FIELD)
        if isinstance(text_at, str) and isinstance(content, list):
            return [_text_back(item, text_at, content)]
        if (
            wire.get("role") == "toolResult"
            and "output" in item
            and isinstance(content, list)
            and len(content) == 1
            and content[0].get("type") == "text"
            and content != content_blocks(item["output"])
        ):
            # Pruned (compaction's first phase): the context shows the marker instead.
            return [{**item, "output": content[0].get("text")}]
        return [item]
    return message_items(Message.model_validate(wire))


def _text_back(item: dict[str, Any], text_at: str, content: list[Any]) -> dict[str, Any]:
    """The item with its text put back from the content blocks (see :func:`_with_item`).
    A tool result pruned by compaction's first phase holds one text block, the marker:
    its output becomes the marker."""
    key = text_at.removesuffix("[]")
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    value = item.get(key)
    if text_at.endswith("[]") and isinstance(value, list) and len(texts) == len(value):
        return {**item, key: [{**p, "text": t} for p, t in zip(value, texts, strict=True)]}
    return {**item, key: "\n".join(t for t in texts if isinstance(t, str))}


def message_items(message: Message) -> list[Any]:
    """:func:`wire_items` of a message model."""
    extra = message.model_extra or {}
    if isinstance(extra.get(ITEM_FIELD), dict):
        return wire_items(
            {
                "role": message.role,
                "content": _wire_content(message),
                ITEM_FIELD: extra[ITEM_FIELD],
                TEXT_FIELD: extra.get(TEXT_FIELD),
            }
        )
    if extra.get(USAGE_FIELD) is not None:
        return []
    if message.role == "user":
        text = message.text()
        if text.startswith(SUMMARY_PREFIX + RESPONSES_SUMMARY_PREFIX) and text.endswith(
            SUMMARY_SUFFIX
        ):
            found = summary_items(text[len(SUMMARY_PREFIX) : len(text) - len(SUMMARY_SUFFIX)])
            if found is not None:
                return found
        return [{"role": "user", "content": text}]
    if message.role == "toolResult":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.text(),
            }
        ]
    items: list[Any] = []
    if message.text():
        items.append({"role": "assistant", "content": message.text()})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments, ensure_ascii=False),
        }
        for call in message.tool_calls()
    )
    return items


def _wire_content(message: Message) -> list[dict[str, Any]]:
    return [block.to_wire() for block in message.content]


def record_item(record: Record) -> Any:
    """The item a record popped by :meth:`SessionStore.pop` stands for."""
    if record.message is not None:
        return message_items(record.message)[-1]
    assert record.compaction is not None
    found = summary_items(record.compaction.summary)
    if found:
        return found[-1]
    return {"role": "user", "content": summary_text(record.compaction.summary)}


def stands_for_item(record: Record) -> bool:
    """Whether a popped record stood for an item (a usage record does not)."""
    if record.message is None:
        return True
    return not isinstance((record.message.model_extra or {}).get(USAGE_FIELD), dict)


# -- compaction by the Responses endpoint ----------------------------------------------------


def responses_summary(items: Sequence[Any]) -> str:
    """The compaction summary that holds the Responses compaction endpoint's output.

    Raises:
        InvalidInputError: an item is not a JSON object.
    """
    stored = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) and callable(getattr(item, "model_dump", None)):
            item = item.model_dump(mode="json", exclude_unset=True, warnings=False)
        if not isinstance(item, Mapping):
            raise InvalidInputError(
                f"compacted item {index}: a Responses-API item is a dict, got {type(item).__name__}"
            )
        stored.append(dict(item))
    return RESPONSES_SUMMARY_PREFIX + jsoncodec.dumps(stored)


def summary_items(summary: str) -> list[Any] | None:
    """The items a :func:`responses_summary` holds; ``None`` for any other summary."""
    if not summary.startswith(RESPONSES_SUMMARY_PREFIX):
        return None
    try:
        value = jsoncodec.loads(summary[len(RESPONSES_SUMMARY_PREFIX) :])
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        return None
    return value


# -- usage -------------------------------------------------------------------------------------


def usage_messages(usage: Any) -> list[dict[str, Any]]:
    """Usage records for an SDK ``Usage`` (``RunResult.context_wrapper.usage``): one per
    model request it lists, else one with its totals (none when it lists no request and
    counts no tokens).

    The record's ``usage`` is sessiondb's (``input`` without the cached tokens, which are
    ``cacheRead``), so the session's token totals and the compaction trigger see it; the
    SDK's figures stay under ``USAGE_FIELD``.
    """
    entries = list(getattr(usage, "request_usage_entries", None) or [])
    requests = [(e, 1) for e in entries] or [(usage, _whole(getattr(usage, "requests", 0)))]
    messages = []
    for entry, count in requests:
        input_tokens = _whole(getattr(entry, "input_tokens", 0))
        output_tokens = _whole(getattr(entry, "output_tokens", 0))
        total = _whole(getattr(entry, "total_tokens", 0)) or input_tokens + output_tokens
        if total == 0 and count == 0:
            continue
        input_details = _details(getattr(entry, "input_tokens_details", None))
        output_details = _details(getattr(entry, "output_tokens_details", None))
        cached = min(_whole(input_details.get("cached_tokens", 0)), input_tokens)
        written = min(_whole(input_details.get("cache_write_tokens", 0)), input_tokens - cached)
        sdk = {
            "requests": count,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": total,
            "input_tokens_details": input_details,
            "output_tokens_details": output_details,
        }
        messages.append(
            {
                "role": "assistant",
                "content": [],
                "usage": {
                    "input": input_tokens - cached - written,
                    "output": output_tokens,
                    "cacheRead": cached,
                    "cacheWrite": written,
                    "totalTokens": total,
                },
                USAGE_FIELD: sdk,
            }
        )
    return messages


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _details(value: Any) -> dict[str, int]:
    if value is not None and not isinstance(value, Mapping):
        dump = getattr(value, "model_dump", None)
        value = dump() if callable(dump) else None
    if not isinstance(value, Mapping):
        return {}
    # Counts only: a nested breakdown (or its ``None``) is left out.
    return {
        str(k): _whole(v)
        for k, v in value.items()
        if isinstance(v, int) and not isinstance(v, bool)
    }


__all__ = [
    "ITEM_FIELD",
    "RESPONSES_SUMMARY_PREFIX",
    "TEXT_FIELD",
    "USAGE_FIELD",
    "item_message",
    "message_items",
    "record_item",
    "responses_summary",
    "summary_items",
    "usage_messages",
    "wire_items",
]
