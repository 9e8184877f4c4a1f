"""Peak memory of one import, measured in a process of its own.

``python helpers/import_memory_probe.py DB PATH LIMIT [FORMAT]`` imports ``PATH`` (as
Claude Code unless ``FORMAT`` names another format) into the SQLite database ``DB`` with
``max_record_bytes=LIMIT`` and prints one JSON object: the process's peak resident set
(``VmHWM``, in kB), the same figure just before the import began (``start_kb``: the
interpreter and sessiondb imported, the store open), and what the report says. The files
are built by :func:`huge_line_file`, :func:`bad_lines_file` and
:func:`huge_gemini_document` in the parent, so building them does not count.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path
from typing import Any

MB = 1024 * 1024


def cc_line(uuid: str, parent: str | None, role: str, text: str) -> bytes:
    """One Claude Code line (with its newline) of a ``role`` message holding ``text``."""
    value = {
        "type": role,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "s",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": role, "content": text},
    }
    return json.dumps(value).encode() + b"\n"


def huge_line_file(path: Path, megabytes: int) -> Path:
    """A Claude Code file: a user line, an assistant line of ``megabytes`` MB (written a
    megabyte at a time), a user line."""
    with path.open("wb") as out:
        out.write(cc_line("u1", None, "user", "hello"))
        head = cc_line("a1", "u1", "assistant", "")
        out.write(head[: head.index(b'"content": ""') + len(b'"content": "')])
        chunk = b"y" * MB
        for _ in range(megabytes):
            out.write(chunk)
        out.write(b'"}}\n')
        out.write(cc_line("u2", "u1", "user", "bye"))
    return path


def huge_gemini_document(path: Path, megabytes: int) -> Path:
    """A legacy Gemini CLI session document (``session-*.json``): its metadata and a
    ``messages`` array of a short user message, a ``megabytes`` MB one (written a megabyte
    at a time) and another short one."""
    session_id = "memo0001-0000-4000-8000-000000000001"
    head = {
        "sessionId": session_id,
        "projectHash": "f" * 64,
        "startTime": "2026-01-01T00:00:00.000Z",
    }

    def message(mid: str, content: str) -> bytes:
        value = {"id": mid, "timestamp": "2026-01-01T00:00:00.000Z", "type": "user"}
        return json.dumps({**value, "content": content}).encode()

    with path.open("wb") as out:
        out.write(json.dumps(head).encode()[:-1] + b', "messages": [')
        out.write(message("m1", "hello") + b", ")
        big = message("m2", "")
        out.write(big[: -len(b'""}')] + b'"')
        chunk = b"y" * MB
        for _ in range(megabytes):
            out.write(chunk)
        out.write(b'"}, ' + message("m3", "bye") + b"]}")
    return path


def bad_lines_file(path: Path, count: int) -> Path:
    """A Claude Code file: a user line, then ``count`` lines that are not JSON (written
    in one go), then a user line."""
    path.write_bytes(
        cc_line("u1", None, "user", "hello")
        + b"{oops\n" * count
        + cc_line("u2", "u1", "user", "bye")
    )
    return path


async def _import(db: str, path: str, limit: int, fmt: str) -> dict[str, Any]:
    from sessiondb import SessionStore

    async with SessionStore.open(db, max_record_bytes=limit) as store:
        await store.migrate()
        start = peak_rss_kb()
        report = await store.import_path(path, format=fmt)
    return {
        "start_kb": start,
        "records": report.records,
        "created": report.created,
        "failures": [str(f)[:300] for f in report.failures],
        "bad_lines_kept": len(report.bad_lines),
        "bad_line_count": getattr(report, "bad_line_count", None),
        "first_bad_line": str(report.bad_lines[0])[:300] if report.bad_lines else None,
    }


def peak_rss_kb() -> int:
    """This process's peak resident set since it started, in kB: ``VmHWM``, which belongs
    to the process's own memory. Linux's ``ru_maxrss`` keeps the peak of the process
    that forked it across ``exec``: under a full test run, the pytest process's."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: best effort


def main(argv: list[str]) -> None:
    db, path, limit, *rest = argv
    result = asyncio.run(_import(db, path, int(limit), rest[0] if rest else "claude-code"))
    result["maxrss_kb"] = peak_rss_kb()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
