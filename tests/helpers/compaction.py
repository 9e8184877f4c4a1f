"""Shared by the compaction tests: message builders, a summarizer that records its
calls, and the real pi transcript of the corpus as messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sessiondb import Message
from sessiondb.compaction import offline_summarizer

PI_SESSION = Path("pi") / "pi-mono" / "large-session.jsonl"
CLAUDE_SESSION = Path("claude-code") / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"


def pi_messages(path: Path) -> list[dict[str, Any]]:
    """The messages of a pi session file (version 1) in the wire shape, as stored."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") == "message":
            out.append(entry["message"])
    return out


def msg(data: dict[str, Any]) -> Message:
    return Message.model_validate(data)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(
    text: str = "",
    calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An assistant message: a text block and ``(id, name, arguments)`` tool calls."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "toolCall", "id": i, "name": n, "arguments": a} for i, n, a in calls]
    data: dict[str, Any] = {"role": "assistant", "content": blocks}
    if usage is not None:
        data["usage"] = usage
    return data


def result(call_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": text}],
        "isError": error,
    }


def tool_turn(n: int, size: int = 400, path: str | None = None) -> list[dict[str, Any]]:
    """One user turn: a request, a read call, its result (``size`` characters), an answer."""
    call = f"call_{n}"
    return [
        user(f"request {n}"),
        assistant(f"looking at step {n}", [(call, "read", {"path": path or f"src/f{n}.py"})]),
        result(call, f"content {n} " + "x" * size),
        assistant(f"done with step {n}"),
    ]


class RecordingSummarizer:
    """The offline summarizer, remembering each call's ``(system, prompt, max_tokens)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    async def __call__(self, system: str, prompt: str, max_tokens: int) -> str:
        self.calls.append((system, prompt, max_tokens))
        return await offline_summarizer(system, prompt, max_tokens)


class FailingSummarizer:
    """Raises on every call and counts them."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, system: str, prompt: str, max_tokens: int) -> str:
        self.calls += 1
        raise RuntimeError("model unavailable (HTTP 529)")


def tool_pairs_intact(messages: Sequence[Message]) -> bool:
    """Every tool result has its call earlier in ``messages`` (a cut that separated a
    pair would keep the result and summarise the call)."""
    calls: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            calls.update(call.id for call in m.tool_calls())
        elif m.role == "toolResult" and m.tool_call_id not in calls:
            return False
    return True


#: The headings the spec's summary prompt asks for, in its order.
SECTIONS = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
]
