"""Messages as flat text for the summarizer: one labelled part per line, never JSON
objects, so that the model reads a transcript rather than a conversation to continue."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..models import (
    ImageContent,
    Message,
    OtherContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
)
from .settings import DEFAULT_TOOL_RESULT_MAX_CHARS

USER = "[User]: "
ASSISTANT = "[Assistant]: "
THINKING = "[Assistant thinking]: "
TOOL_CALLS = "[Assistant tool calls]: "
TOOL_RESULT = "[Tool result]: "
# One argument value is cut at this length: a file written whole is not the summary's
# business, its path is.
ARGUMENT_MAX_CHARS = 500


def serialize_messages(
    messages: Iterable[Message], tool_result_max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS
) -> str:
    """The messages as the summarizer sees them::

        [User]: What pods are running?
        [Assistant]: Let me check.
        [Assistant tool calls]: bash(command="kubectl get pods")
        [Tool result]: NAME   READY   STATUS

    A tool result longer than ``tool_result_max_chars`` is cut, saying how much was cut.
    """
    lines: list[str] = []
    for message in messages:
        lines.extend(_message_lines(message, tool_result_max_chars))
    return "\n".join(lines)


def _message_lines(message: Message, max_chars: int) -> list[str]:
    if message.role == "toolResult":
        text = _blocks_text(message)
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n[… {len(text) - max_chars} more characters cut]"
        prefix = TOOL_RESULT + ("(error) " if message.is_error else "")
        return [prefix + text]
    if message.role == "user":
        text = _blocks_text(message)
        return [USER + text] if text else []
    lines: list[str] = []
    texts: list[str] = []
    calls: list[str] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.thinking.strip():
                lines.append(THINKING + block.thinking)
        elif isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ToolCallContent):
            calls.append(_tool_call_text(block))
        else:
            texts.append(_other(block))
    text = "\n".join(t for t in texts if t)
    if text:
        lines.append(ASSISTANT + text)
    if calls:
        lines.append(TOOL_CALLS + "; ".join(calls))
    return lines


def _blocks_text(message: Message) -> str:
    parts = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(block.thinking)
        elif isinstance(block, ToolCallContent):
            parts.append(_tool_call_text(block))
        else:
            parts.append(_other(block))
    return "\n".join(p for p in parts if p)


def _tool_call_text(block: ToolCallContent) -> str:
    args = ", ".join(f"{key}={_value(value)}" for key, value in block.arguments.items())
    return f"{block.name}({args})"


def _value(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > ARGUMENT_MAX_CHARS:
        text = text[:ARGUMENT_MAX_CHARS] + f"…[{len(text) - ARGUMENT_MAX_CHARS} more characters]"
    return text


def _other(block: ImageContent | OtherContent | Any) -> str:
    if isinstance(block, ImageContent):
        return f"[image {block.mime_type}]"
    return f"[{getattr(block, 'type', 'unknown')} block]"
