"""The session the README's screenshot of the viewer shows: an ordinary debugging
conversation, with thinking, tool calls and their results, and token usage."""

from __future__ import annotations

from typing import Any

from sessiondb import SessionStore

Call = tuple[str, str, dict[str, Any]]


def _assistant(text: str, call: Call | None = None, thinking: str | None = None,
               tokens: tuple[int, int] = (0, 0)) -> dict[str, Any]:  # fmt: skip
    content: list[dict[str, Any]] = []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking})
    content.append({"type": "text", "text": text})
    if call:
        content.append({"type": "toolCall", "id": call[0], "name": call[1], "arguments": call[2]})
    return {"role": "assistant", "content": content,
            "usage": {"input": tokens[0], "output": tokens[1]}}  # fmt: skip


def _result(call_id: str, name: str, text: str) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name,
            "content": [{"type": "text", "text": text}]}  # fmt: skip


async def readme_session(store: SessionStore) -> str:
    sid = (
        await store.create_session(
            name="Why did the nightly import fail?", model="claude-sonnet-4-5"
        )
    ).id
    await store.append(
        sid,
        [
            {"role": "user", "content": "The nightly import of last night's transcripts "
             "failed again. Can you find out why?"},
            _assistant(
                "Let me look at the import log first.",
                ("c1", "read", {"path": "logs/import-2026-11-24.log"}),
                thinking="The log names the file and line of a bad record; start there.",
                tokens=(2_310, 64),
            ),
            _result("c1", "read",
                    "22:00:01 import started: 1,205 files\n"
                    "22:03:47 sessions/2026-11-24/0193.jsonl:412: Expecting value\n"
                    "22:03:47 import failed: 1 file, strict mode"),
            _assistant(
                "Line 412 of one file does not parse. The file was still being written "
                "when the import ran, so its last line is torn:",
                ("c2", "bash", {"command": "tail -c 120 sessions/2026-11-24/0193.jsonl"}),
                tokens=(2_702, 81),
            ),
            _result("c2", "bash", '…"content":[{"type":"text","text":"Done. The tests pa'),
            _assistant(
                "The job runs with --strict, which fails the whole file on one bad line. "
                "Without it the torn line is reported and everything else is imported.",
                ("c3", "edit", {"path": "deploy/nightly-import.sh",
                                "old": "sessiondb import --strict", "new": "sessiondb import"}),
                tokens=(2_950, 118),
            ),
            _result("c3", "edit", "Applied 1 edit to deploy/nightly-import.sh"),
            {"role": "user", "content": "Good. Run it again for last night."},
        ],
    )  # fmt: skip
    return sid
