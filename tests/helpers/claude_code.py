"""Claude Code lines for tests that write their own transcript files: one JSON object a
line, as Claude Code writes them (``type``, ``uuid``, ``parentUuid``, then the session
and time stamp, then ``message``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The usage an assistant line carries unless a test gives its own.
USAGE = {"input_tokens": 3, "output_tokens": 5}


def line(**fields: Any) -> str:
    """One line (without its newline) holding ``fields`` in the order given."""
    return json.dumps(fields)


def _stamp(at: str | None) -> dict[str, str]:
    return {} if at is None else {"sessionId": "s", "timestamp": at}


def user(
    uuid: str, parent: str | None, content: Any, *, at: str | None = "2026-01-01T00:00:00.000Z"
) -> str:
    """A user line; ``content`` is a string or a list of blocks. ``at=None`` leaves out
    the session id and the time stamp, which a reader does not need."""
    message = {"role": "user", "content": content}
    return line(type="user", uuid=uuid, parentUuid=parent, **_stamp(at), message=message)


def assistant(
    uuid: str,
    parent: str | None,
    blocks: list[Any],
    msg_id: str = "m",
    *,
    usage: dict[str, int] | None = USAGE,
    at: str = "2026-01-01T00:00:01.000Z",
) -> str:
    """An assistant line of ``blocks``; the lines of one response share ``msg_id``.
    ``usage=None`` leaves the usage out."""
    message: dict[str, Any] = {"id": msg_id, "role": "assistant", "content": blocks}
    if usage is not None:
        message["usage"] = usage
    return line(type="assistant", uuid=uuid, parentUuid=parent, **_stamp(at), message=message)


def tool_result(
    uuid: str, parent: str, call: str, text: str, *, at: str | None = "2026-01-01T00:00:02.000Z"
) -> str:
    """A user line holding the result ``text`` of the tool call ``call``."""
    block = {"type": "tool_result", "tool_use_id": call, "content": text}
    return user(uuid, parent, [block], at=at)


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str = "Read") -> dict[str, Any]:
    """A tool call block whose input names the call."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"p": call_id}}


def cersei(kind: str, uuid: str, parent: str | None, text: str, **extra: Any) -> str:
    """A cersei line (Claude Code's shape with snake_case names) of a ``kind`` message
    holding ``text``; ``extra`` fields (``cwd``) come before the message."""
    return line(
        type=kind,
        uuid=uuid,
        parent_uuid=parent,
        session_id="abc",
        timestamp="2026-04-03T10:00:00Z",
        **extra,
        message={"role": kind, "content": text},
    )


def cersei_parts(folder: Path, **extra: Any) -> None:
    """A cersei session ``abc`` in two part files of ``folder``: a question and its answer,
    then a second question and a tombstone of the answer (four records)."""
    (folder / "abc.jsonl").write_text(
        cersei("user", "a1", None, "fix the tests", **extra)
        + "\n"
        + cersei("assistant", "a2", "a1", "ok", **extra)
    )
    (folder / "abc_part2.jsonl").write_text(
        cersei("user", "a3", "a2", "and the docs", **extra)
        + "\n"
        + line(type="tombstone", deleted_uuid="a2", timestamp="2026-04-03T10:01:00Z")
        + "\n"
    )
