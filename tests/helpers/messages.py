"""Messages as a caller appends them (wire shape, text in blocks), for the behavioural
tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MISSING_ID = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"  # well formed, never created


def user(text: str, **extra: Any) -> dict[str, Any]:
    """A user message of one text block; ``extra`` fields (``uuid``, ``usage``) after."""
    return {"role": "user", "content": [{"type": "text", "text": text}], **extra}


def assistant(text: str, calls: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """An assistant message with a text block and one toolCall block per call id."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    blocks += [
        {"type": "toolCall", "id": c, "name": "read", "arguments": {"path": c}} for c in calls
    ]
    return {"role": "assistant", "content": blocks, **extra}


def result(call_id: str, text: str | None = None) -> dict[str, Any]:
    """The result of the call ``call_id`` (``result <id>`` unless ``text`` is given)."""
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "read",
        "content": [{"type": "text", "text": text or f"result {call_id}"}],
        "isError": False,
    }


def two_calls() -> list[dict[str, Any]]:
    """A question (seq 1), an assistant calling ``A`` and ``B`` (2) and both results (3, 4):
    the start of the sessions that test how tool pairs hold together."""
    return [user("q"), assistant("call", ["A", "B"]), result("A"), result("B")]
