"""Token counts: the ``ceil(chars / 4)`` estimate, a pluggable tokenizer, and the
context figure the trigger compares (reported usage where there is one)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Protocol

from ..errors import CompactionError
from ..models import (
    ImageContent,
    Message,
    OtherContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    Usage,
)

# An image costs about 1,200 tokens on the common APIs whatever its byte size; counting
# its base64 characters would overstate it a hundredfold.
IMAGE_TOKENS = 1_200


class Tokenizer(Protocol):
    """Counts the tokens of a text (e.g. a wrapper around tiktoken or a model's API)."""

    def __call__(self, text: str) -> int: ...


def estimate_text_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    """Tokens in ``text``: ``ceil(len / 4)``, or the tokenizer's count."""
    if tokenizer is None:
        return math.ceil(len(text) / 4)
    try:
        count = tokenizer(text)
    except Exception as exc:
        raise CompactionError(f"the tokenizer failed: {exc!r}") from exc
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise CompactionError(f"the tokenizer returned {count!r}, not a count of tokens")
    return count


def message_text_parts(message: Message) -> tuple[list[str], int]:
    """The texts of a message that count towards its tokens (text, thinking, tool names,
    JSON of tool arguments), and the number of images in it."""
    parts: list[str] = []
    images = 0
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(block.thinking)
        elif isinstance(block, ToolCallContent):
            parts.append(block.name)
            parts.append(_arguments_json(block.arguments))
        elif isinstance(block, ImageContent):
            images += 1
        elif isinstance(block, OtherContent):
            extra = block.model_extra or {}
            parts.append(_arguments_json(extra))
    return parts, images


def estimate_message_tokens(message: Message, tokenizer: Tokenizer | None = None) -> int:
    """The estimated tokens of one message."""
    parts, images = message_text_parts(message)
    return estimate_text_tokens("".join(parts), tokenizer) + images * IMAGE_TOKENS


def estimate_tokens(messages: Sequence[Message], tokenizer: Tokenizer | None = None) -> int:
    """The estimated tokens of several messages."""
    return sum(estimate_message_tokens(m, tokenizer) for m in messages)


def usage_tokens(usage: Usage | None) -> int:
    """The context size a model response reports: its total, else the sum of its parts
    (0 when there is no usage, e.g. an aborted response)."""
    if usage is None:
        return 0
    if usage.total_tokens:
        return int(usage.total_tokens)
    return usage.input + usage.output + usage.cache_read + usage.cache_write


def context_tokens_of(messages: Sequence[Message], tokenizer: Tokenizer | None = None) -> int:
    """The trigger's figure for a context: the last assistant message's reported usage
    plus estimates for what came after it; the estimate of everything when no assistant
    message reports usage.

    ``messages`` must be the context as the model sees it (after any compaction); usage
    reported before a compaction describes a context that no longer exists.
    """
    after = 0
    for message in reversed(messages):
        if message.role == "assistant":
            reported = usage_tokens(message.usage)
            if reported > 0:
                return reported + after
        after += estimate_message_tokens(message, tokenizer)
    return after


def _arguments_json(arguments: object) -> str:
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular or otherwise unencodable: count its repr
        return repr(arguments)
