"""What search sees of a record: the one function that takes a record's searchable text
out of its payload, used by every write (append, bulk import, the file importer), by the
migration that fills the index of older databases, and by the snippets of hits.

Plain functions over plain values; no I/O.

Searched: the text blocks of messages, tool calls' names and arguments, tool results'
text and tool name, and compaction summaries; thinking blocks apart (searched only when
the caller asks). Not searched: images, tombstones, prunes, imported entries.

The index gets the text as runs of letters and digits separated by single spaces
(:func:`index_text`): Postgres's parser then sees the same words as SQLite's
``unicode61`` tokenizer (``main.py`` is two words on both; Postgres alone would read it
as one host name), and no NUL or lone surrogate reaches the database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import jsoncodec

#: Characters of a record's text (and of its thinking) that the index takes: the rest
#: is not indexed. Bounds a Postgres ``tsvector`` (at most 1 MB) and the work per write.
MAX_INDEXED_CHARS = 100_000

# Each byte of ASCII text as the index takes it: letters and digits as they are, anything
# else a space.
_ASCII_TABLE = bytes(c if c < 128 and chr(c).isalnum() else 0x20 for c in range(256))
# A separator: anything that is not a letter or a digit (the underscore too, as SQLite's
# unicode61 tokenizer and Postgres's parser both split on it).
_SEPARATORS = re.compile(r"[\W_]+")

#: Kinds whose records are searched.
SEARCHED_KINDS = ("message", "compaction")

#: The text the index takes: ``(body, thinking)``, each as :func:`index_text` made it
#: (thinking ``None`` when there is none); ``None`` for a record not searched.
IndexSource = tuple[str, str | None] | None


def _arguments_text(arguments: Any, out: list[str]) -> None:
    """The keys and scalar values of a tool call's arguments, without recursion."""
    stack = [arguments]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                out.append(str(key))
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(reversed(value))
        elif value is not None and not isinstance(value, bool):
            out.append(str(value))


def message_text(wire: Mapping[str, Any]) -> tuple[str, str]:
    """``(body, thinking)`` of a wire-shape message, as people read them."""
    content = wire.get("content")
    body: list[str] = []
    thinking: list[str] = []
    tool_name = wire.get("toolName")
    if isinstance(tool_name, str):
        body.append(tool_name)
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    for block in content if isinstance(content, list) else ():
        # A dict (what JSON parses to) checked before the ABC, whose check cost
        # ~0.2 µs a block of every search hit's payload.
        if not isinstance(block, (dict, Mapping)):
            continue
        kind = block.get("type")
        if kind == "thinking":
            text = block.get("thinking")
            if isinstance(text, str):
                thinking.append(text)
        elif kind == "toolCall":
            name = block.get("name")
            if isinstance(name, str):
                body.append(name)
            _arguments_text(block.get("arguments"), body)
        elif kind != "image":
            text = block.get("text")  # a text block, or an unknown block with text
            if isinstance(text, str):
                body.append(text)
    return "\n".join(body), "\n".join(thinking)


def record_text(kind: str, data: Any) -> tuple[str, str] | None:
    """``(body, thinking)`` of a record's decoded payload; ``None`` if not searched."""
    if not isinstance(data, (dict, Mapping)):  # as message_text
        return None
    if kind == "message":
        return message_text(data)
    if kind == "compaction":
        summary = data.get("summary")
        return (summary if isinstance(summary, str) else ""), ""
    return None


def payload_text(kind: str, payload: str) -> tuple[str, str] | None:
    """:func:`record_text` of a stored payload."""
    if kind not in SEARCHED_KINDS:
        return None
    return record_text(kind, jsoncodec.loads(payload))


def index_text(text: str) -> str:
    """``text`` as the index takes it: its first :data:`MAX_INDEXED_CHARS` characters,
    letters and digits only, runs separated by spaces."""
    text = text[:MAX_INDEXED_CHARS]
    if text.isascii():
        # A table lookup per byte: 0.5 µs for 370 characters, against 1.4 µs for
        # str.translate and 34 µs for the regular expression (text made of short words
        # has a separator run every few characters, each replaced on its own).
        return text.encode("ascii").translate(_ASCII_TABLE).decode("ascii")
    return _SEPARATORS.sub(" ", text)


def index_source(kind: str, data: Any) -> IndexSource:
    """What the index takes of a record (its decoded payload, or a message's wire dict)."""
    found = record_text(kind, data)
    if found is None:
        return None
    body, thinking = found
    return index_text(body), (index_text(thinking) or None) if thinking else None


def payload_index_source(kind: str, payload: str) -> IndexSource:
    """:func:`index_source` of a stored payload (the migration's backfill)."""
    if kind not in SEARCHED_KINDS:
        return None
    return index_source(kind, jsoncodec.loads(payload))
