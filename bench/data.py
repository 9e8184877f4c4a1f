"""Deterministic data: agent conversations, sessions to import, and JSONL files.

The same seed gives the same messages byte for byte. A conversation is a run of turns
of four messages: the user asks, the assistant calls a tool, the tool answers, the
assistant replies (with usage on assistant messages, as real transcripts have). A
message at ``seq % 4 == 1`` is therefore a user message, a valid place to cut the
history for a compaction.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

TURN = 4
_SYLLABLES = (
    "ka", "lo", "mi", "ne", "sor", "tan", "vi", "pe", "dra", "qu", "ex", "ly", "mon",
    "zu", "fa", "rit", "gen", "do", "ba", "cel", "ix", "om", "tr", "ul", "wen",
)  # fmt: skip
_TOOLS = ("read", "bash", "edit", "grep")


class Corpus:
    """Pseudo-words to cut message text from; cheap to slice, the same for one seed."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"sessiondb-bench-corpus-{seed}")
        words = [
            "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(3000)
        ]
        self.text = " ".join(rng.choices(words, k=120_000))

    def cut(self, rng: random.Random, low: int, high: int) -> str:
        length = rng.randint(low, high)
        start = rng.randrange(len(self.text) - length)
        return self.text[start : start + length]


def _usage(rng: random.Random) -> dict[str, Any]:
    read, fresh, out = rng.randint(0, 40_000), rng.randint(10, 3000), rng.randint(10, 800)
    return {
        "input": fresh,
        "output": out,
        "cacheRead": read,
        "cacheWrite": 0,
        "totalTokens": read + fresh + out,
        "cost": {"total": round((fresh * 3 + out * 15 + read * 0.3) / 1e6, 6)},
    }


def conversation(n: int, seed: int, name: str, corpus: Corpus) -> list[dict[str, Any]]:
    """``n`` wire-shape messages in turns of four (see the module docstring)."""
    rng = random.Random(f"sessiondb-bench-{seed}-{name}")
    messages: list[dict[str, Any]] = []
    turn = 0
    while len(messages) < n:
        turn += 1
        call_id = f"call_{turn:06d}"
        tool = _TOOLS[turn % len(_TOOLS)]
        messages += [
            {"role": "user", "content": [{"type": "text", "text": corpus.cut(rng, 20, 300)}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": corpus.cut(rng, 20, 200)},
                    {
                        "type": "toolCall",
                        "id": call_id,
                        "name": tool,
                        "arguments": {"path": f"src/{corpus.cut(rng, 4, 12).replace(' ', '_')}.py"},
                    },
                ],
                "usage": _usage(rng),
            },
            {
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": tool,
                "content": [{"type": "text", "text": corpus.cut(rng, 200, 1500)}],
                "isError": False,
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": corpus.cut(rng, 50, 600)}],
                "usage": _usage(rng),
            },
        ]
    return messages[:n]


def user_messages(n: int, seed: int, corpus: Corpus) -> list[dict[str, Any]]:
    """``n`` single-text user messages of 20-300 characters."""
    rng = random.Random(f"sessiondb-bench-{seed}-user")
    return [
        {"role": "user", "content": [{"type": "text", "text": corpus.cut(rng, 20, 300)}]}
        for _ in range(n)
    ]


def sessions(count: int, per_session: int, seed: int, corpus: Corpus) -> list[dict[str, Any]]:
    """``count`` sessions for ``import_sessions``, each a distinct conversation."""
    pool = conversation(count * per_session, seed, f"sessions-{per_session}", corpus)
    return [
        {"messages": pool[i * per_session : (i + 1) * per_session], "model": "bench-model"}
        for i in range(count)
    ]


def many_small_sessions(count: int, seed: int, corpus: Corpus) -> list[dict[str, Any]]:
    """``count`` sessions of one user message and one reply (a listing's data set);
    the contents repeat every 1000 sessions, which a listing does not notice."""
    pool = sessions(min(count, 1000), 2, seed, corpus)
    return [pool[i % len(pool)] for i in range(count)]


COMPACTION_SUMMARY = "## Goal\nBenchmark the context load.\n## Progress\n- Done: everything."


def write_jsonl(path: Path, messages: list[dict[str, Any]], first_kept_seq: int) -> None:
    """The session as a file-based tool keeps it: one line per message, then the
    compaction line that keeps messages from ``first_kept_seq`` on."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with path.open("wb") as f:
        for seq, message in enumerate(messages, start=1):
            at = (start + timedelta(seconds=seq)).isoformat()
            line = {"type": "message", "seq": seq, "timestamp": at, "message": message}
            f.write(orjson.dumps(line) + b"\n")
        seq = len(messages) + 1
        compaction = {
            "type": "compaction",
            "seq": seq,
            "timestamp": (start + timedelta(seconds=seq)).isoformat(),
            "summary": COMPACTION_SUMMARY,
            "firstKeptSeq": first_kept_seq,
            "tokensBefore": 123_456,
        }
        f.write(orjson.dumps(compaction) + b"\n")


def claude_code_dir(directory: Path, files: int, lines: int, seed: int, corpus: Corpus) -> int:
    """A Claude Code project directory: ``files`` transcripts of ``lines`` lines in all
    (user and assistant lines alternating, text blocks of varied length); returns the
    lines written."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"claude-code-{seed}-{files}-{lines}")
    per_file = [lines // files + (1 if i < lines % files else 0) for i in range(files)]
    for index, n in enumerate(per_file):
        write_claude_code(directory / f"session-{index:05d}.jsonl", n, rng, corpus)
    return sum(per_file)


def write_claude_code(path: Path, lines: int, rng: random.Random, corpus: Corpus) -> None:
    """One Claude Code transcript of ``lines`` lines."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    stem = path.stem
    parent: str | None = None
    with path.open("wb") as f:
        for i in range(lines):
            uuid = f"{stem}-{i:07d}"
            role = "user" if i % 2 == 0 else "assistant"
            message: dict[str, Any] = {
                "role": role,
                "content": [{"type": "text", "text": corpus.cut(rng, 40, 1600)}],
            }
            if role == "assistant":
                message = {"id": f"msg-{uuid}", "model": "bench-model", **message}
            line = {
                "type": role,
                "uuid": uuid,
                "parentUuid": parent,
                "sessionId": stem,
                "timestamp": (start + timedelta(seconds=i)).isoformat(),
                "cwd": "/project",
                "message": message,
            }
            f.write(orjson.dumps(line) + b"\n")
            parent = uuid
