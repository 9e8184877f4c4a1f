"""What writes a summary: any async callable; and an offline one that needs no model."""

from __future__ import annotations

import re
from collections import Counter
from typing import Protocol

from .prompts import TURN_PREFIX_PROMPT
from .serialize import ASSISTANT, THINKING, TOOL_CALLS, TOOL_RESULT, USER


class Summarizer(Protocol):
    """Writes a summary with a language model: ``await summarizer(system, prompt,
    max_tokens)`` returns the summary text.

    ``system`` is the system prompt, ``prompt`` the user prompt (the serialised
    transcript and the task), ``max_tokens`` the answer's budget. Any LLM client fits in
    a few lines; see the README.
    """

    async def __call__(self, system: str, prompt: str, max_tokens: int) -> str: ...


_LABELS = (USER, THINKING, TOOL_CALLS, TOOL_RESULT, ASSISTANT)
_LINE_MAX = 300
_PATH = re.compile(r'\b(?:path|file_path|filePath)="((?:[^"\\]|\\.)*)"')
_TOOL = re.compile(r"(?:^|; )([\w.-]+)\(")


async def offline_summarizer(system: str, prompt: str, max_tokens: int) -> str:
    """An offline stand-in for a model, for tests, demos and the quickstart.

    It calls nothing: it fills the summary's sections from the transcript itself (the
    first user request as the goal, the tools used, the files touched, the last
    messages) and carries a previous summary's items forward. Its summaries are
    mechanical; use a real model for real work.
    """
    conversation = _between(prompt, "<conversation>\n", "\n</conversation>") or ""
    previous = _between(prompt, "<previous-summary>\n", "\n</previous-summary>")
    parts = _parts(conversation)
    users = [text for label, text in parts if label == USER]
    assistants = [text for label, text in parts if label == ASSISTANT]
    calls = [text for label, text in parts if label == TOOL_CALLS]
    errors = [text for label, text in parts if label == TOOL_RESULT and text.startswith("(error)")]
    tools = Counter(name for line in calls for name in _TOOL.findall(line))
    paths = sorted({p for line in calls for p in _PATH.findall(line)})

    if TURN_PREFIX_PROMPT in prompt:
        text = "\n".join(
            [
                "## Original Request",
                _line(users[0]) if users else "(no user message in this part)",
                "",
                "## Early Progress",
                *(_bullets([f"used {n}× {t}" for t, n in sorted(tools.items())]) or ["- (none)"]),
                "",
                "## Context for the Rest of the Turn",
                f"- last step: {_line(assistants[-1])}" if assistants else "- (none)",
            ]
        )
        return _fit(text, max_tokens)

    old = _sections(previous or "")
    goal = old.get("## Goal", []) + ([_line(users[0])] if users else [])
    done = old.get("### Done", []) + [
        "- [x] " + item.removeprefix("- [ ] ") for item in old.get("### In Progress", [])
    ]
    if tools:
        used = ", ".join(f"{t} ×{n}" for t, n in sorted(tools.items()))
        done.append(f"- [x] Tool calls made: {used}")
    in_progress = [f"- [ ] {_line(users[-1])}"] if users else []
    blocked = [f"- {_line(e.removeprefix('(error) '))}" for e in errors[-3:]]
    context = [
        item
        for item in old.get("## Critical Context", [])
        if not item.startswith(("- Last assistant message:", "- Files touched:"))
    ]
    if paths:
        context.append("- Files touched: " + ", ".join(paths))
    if assistants:
        context.append(f"- Last assistant message: {_line(assistants[-1])}")
    sections = [
        ("## Goal", _dedupe(goal) or ["(not stated)"]),
        ("## Constraints & Preferences", old.get("## Constraints & Preferences") or ["- (none)"]),
        ("## Progress", []),
        ("### Done", _dedupe(done) or ["- (nothing yet)"]),
        ("### In Progress", in_progress or ["- (nothing)"]),
        ("### Blocked", blocked or ["- (none)"]),
        ("## Key Decisions", old.get("## Key Decisions") or ["- (none recorded)"]),
        ("## Next Steps", [f"1. Continue: {_line(users[-1])}"] if users else ["1. (none)"]),
        ("## Critical Context", _dedupe(context) or ["- (none)"]),
    ]
    out: list[str] = []
    for heading, items in sections:
        if out and out[-1] != "## Progress":
            out.append("")
        out.append(heading)
        out.extend(items)
    return _fit("\n".join(out), max_tokens)


def _between(text: str, start: str, end: str) -> str | None:
    i = text.find(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    return text[i + len(start) : j if j >= 0 else None]


def _parts(conversation: str) -> list[tuple[str, str]]:
    parts: list[tuple[str, str]] = []
    for line in conversation.split("\n"):
        label = next((lab for lab in _LABELS if line.startswith(lab)), None)
        if label is not None:
            parts.append((label, line[len(label) :]))
        elif parts:
            parts[-1] = (parts[-1][0], parts[-1][1] + "\n" + line)
    return parts


def _sections(summary: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in summary.splitlines():
        if line.startswith("#"):
            current = out.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("(no"):
            current.append(line.rstrip())
    return {k: [i for i in v if "(none" not in i and "(nothing" not in i] for k, v in out.items()}


def _line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _LINE_MAX else flat[: _LINE_MAX - 1] + "…"


def _bullets(items: list[str]) -> list[str]:
    return [f"- {item}" for item in items]


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _fit(text: str, max_tokens: int) -> str:
    limit = max(max_tokens, 1) * 4
    return text if len(text) <= limit else text[: limit - 1] + "…"
