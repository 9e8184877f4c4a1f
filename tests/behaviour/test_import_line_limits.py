"""One rule for every limit a line of an imported file meets, in every format.

The limits: a line longer than ``max_record_bytes``; a line nested past
``MAX_JSON_DEPTH`` (128), parsed (200 levels) or so deep no parser reads it (5,000); a
line within the size limit whose record is over it as stored (the envelope a format
adds). Where a format's lines stand alone (Claude Code, Codex, pi, noumen, Gemini CLI
JSONL), such a line is a bad line, ``path:line`` and the limit named, and the file's
other lines are imported with the seqs the reader gave them: the messages and the
context are those of the same file without the line. Where they do not (a native file,
whose lines carry their seqs; a legacy Gemini CLI document, one value read whole), the
session fails with ``path:line`` and the limit, and nothing of it is written.

Each case is imported next to the same file without the hostile line (namespace
``clean``), on SQLite and on Postgres.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import codex, gemini, sql
from helpers.formats import noumen_lines, pi_lines

from sessiondb import SessionStore

LIMIT = 64 * 1024
DEEP = 200  # parsed, then refused: its record is nested past 128 levels
UNPARSABLE = 5_000  # past every parser's own limit

both = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def hostile_line(limit: str) -> str:
    """A line of no format's own type (every reader keeps it as an ``entry``) over
    ``limit``."""
    if limit == "line bytes":
        return compact({"type": "hostile", "pad": "x" * (LIMIT + 10)})
    if limit == "depth":
        value: Any = "x"
        for level in range(DEEP):
            value = [value] if level % 2 else {"k": value}
        return compact({"type": "hostile", "pad": value})
    if limit == "parser depth":
        return '{"type":"hostile","pad":' + "[" * UNPARSABLE + "]" * UNPARSABLE + "}"
    assert limit == "record bytes"
    # The line is within the limit; its entry ({"format": …, "line": …}) is not.
    bare = compact({"type": "hostile", "pad": ""})
    return compact({"type": "hostile", "pad": "x" * (LIMIT - 8 - len(bare))})


# The reason each limit gives, as a pattern.
REASONS = {
    "line bytes": re.escape(f"the line is over {LIMIT} bytes, the store's max_record_bytes"),
    "depth": re.escape("its record is nested more than 128 levels deep (arrays and objects)"),
    "parser depth": re.escape("the line is nested more than 128 levels deep (arrays and objects)"),
    # Its size as stored: the line and the envelope its format adds.
    "record bytes": rf"its record is \d+ bytes as stored, over the store's max_record_bytes "
    f"of {LIMIT}",
}
LIMITS = tuple(REASONS)


# -- formats whose lines stand alone -----------------------------------------------------


def claude_code_lines() -> list[Any]:
    lines, parent = [], None
    for i, role in enumerate(["user", "assistant", "user", "assistant"]):
        uuid = f"cc-{i}"
        lines.append(
            {
                "type": role,
                "uuid": uuid,
                "parentUuid": parent,
                "sessionId": "cc",
                "timestamp": f"2026-01-01T00:00:0{i}Z",
                "message": {"role": role, "content": [{"type": "text", "text": f"t{i}"}]},
            }
        )
        parent = uuid
    return lines


@dataclass(frozen=True)
class LineFormat:
    name: str
    file: str
    lines: Callable[[], list[Any]]


LINE_FORMATS = [
    LineFormat("claude-code", "cc.jsonl", claude_code_lines),
    LineFormat("codex", codex.rollout_name(codex.PARENT_ID), codex.new_lines),
    LineFormat("pi", "pi.jsonl", lambda: pi_lines(3)),
    LineFormat("noumen", "noumen.jsonl", noumen_lines),
    LineFormat("gemini", "session-2026-03-01T10-00-gen0001a.jsonl", gemini.main_lines),
]
AT = 3  # the hostile line goes after this many lines: it is line AT + 1


def write(path: Path, lines: list[Any], hostile: str | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    texts = [compact(v) for v in lines]
    if hostile is not None:
        texts.insert(AT, hostile)
    path.write_text("\n".join(texts) + "\n")
    return path


def texts(records: list[Any]) -> list[tuple[str, str]]:
    return [(m.role, m.text()) for m in records if m is not None]


async def content(store: SessionStore, session_id: str) -> tuple[Any, ...]:
    records = await store.records(session_id, include_tombstoned=True)
    context = await store.context(session_id)
    return texts([r.message for r in records]), texts(context), records


@both
@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("fmt", LINE_FORMATS, ids=lambda f: f.name)
async def test_a_line_over_a_limit_is_a_bad_line_and_the_rest_imports(
    db_url: str, tmp_path: Path, fmt: LineFormat, limit: str
) -> None:
    clean = write(tmp_path / "clean" / fmt.file, fmt.lines(), None)
    path = write(tmp_path / "hostile" / fmt.file, fmt.lines(), hostile_line(limit))
    async with (
        sql.store_on(db_url, namespace="clean", max_record_bytes=LIMIT) as plain,
        sql.store_on(db_url, namespace="hostile", max_record_bytes=LIMIT) as store,
    ):
        expected = await plain.import_path(clean, format=fmt.name)
        assert expected.failures == [] and expected.bad_lines == []
        report = await store.import_path(path, format=fmt.name)
        assert report.failures == [], report.failures
        assert report.created == 1 and report.bad_line_count == 1
        (bad,) = report.bad_lines
        assert (bad.path, bad.line) == (path, AT + 1)
        assert re.fullmatch(REASONS[limit], bad.reason), bad.reason
        assert str(bad) == f"{path}:{AT + 1}: {bad.reason}"
        (want,) = expected.session_ids
        (got,) = report.session_ids
        messages, context, records = await content(store, got)
        clean_messages, clean_context, clean_records = await content(plain, want)
        # Every other line imported, and the seqs the reader counted held: the
        # tombstones and compactions after the line hide and keep what they did.
        assert messages == clean_messages and context == clean_context
        kept = len(records) - len(clean_records)
        if limit == "line bytes":
            assert kept == 0  # never read whole, so nothing of it is kept
        else:
            assert kept == 1
            # "depth", "record bytes": an entry naming the line and the limit;
            # "parser depth": the line's text, as any line that is not JSON.
            mark = "rawLine" if limit == "parser depth" else "skippedLine"
            (entry,) = [r.entry for r in records if r.entry and mark in r.entry]
            assert entry["error"] == bad.reason
            assert entry.get("skippedLine", AT + 1) == AT + 1
    # Strict: the bad line fails the file, and nothing of it is written.
    async with sql.store_on(db_url, namespace="strict", max_record_bytes=LIMIT) as store:
        strict = await store.import_path(path, format=fmt.name, strict=True)
        (failure,) = strict.failures
        assert str(failure).startswith(f"{path}:{AT + 1}: {bad.reason}"), failure
        assert strict.created == 0 and (await store.list_sessions()).items == []


# -- formats whose lines do not stand alone ----------------------------------------------

NATIVE_ID = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


def native_folder(folder: Path, limit: str | None) -> Path:
    """A native session: two messages, the hostile line (an ``entry`` at seq 3), then a
    message."""
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({"id": NATIVE_ID}))

    def line(seq: int, kind: str, **fields: Any) -> str:
        at = f"2026-01-01T00:00:0{seq}.000Z"
        return compact({"recordType": kind, "schemaVersion": 1, "seq": seq, "timestamp": at,
                        **fields})  # fmt: skip

    lines = [
        line(1, "message", role="user", content=[{"type": "text", "text": "one"}]),
        line(2, "message", role="assistant", content=[{"type": "text", "text": "two"}]),
    ]
    if limit is not None:
        envelope = '{"recordType":"entry","schemaVersion":1,"seq":3,"entry":'
        lines.append(envelope + hostile_line(limit) + "}")
    seq = len(lines) + 1
    lines.append(line(seq, "message", role="user", content=[{"type": "text", "text": "end"}]))
    (folder / "session.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def gemini_document(path: Path, limit: str) -> Path:
    """A legacy Gemini CLI document with a message over ``limit``."""
    document = gemini.legacy_document()
    if limit == "parser depth":
        text = compact(document)
        text = text[:-1] + ',"pad":' + "[" * UNPARSABLE + "]" * UNPARSABLE + "}"
    else:
        item = json.loads(hostile_line("depth")) if limit == "depth" else None
        if limit == "line bytes":  # the document is over the limit
            item = {"type": "hostile", "pad": "x" * LIMIT}
        document["messages"].insert(1, item)
        text = compact(document)
    path.write_text(text)
    return path


NATIVE_REASONS = {
    "line bytes": f"the line is over {LIMIT} bytes, the store's max_record_bytes",
    "depth": "record 3 (seq 3) is nested more than 128 levels deep (arrays and objects)",
    "parser depth": "the line is nested more than 128 levels deep (arrays and objects)",
}
DOCUMENT_REASONS = {
    "line bytes": f"the document is over {LIMIT} bytes, the store's max_record_bytes",
    "depth": "record 2 (seq 2) is nested more than 128 levels deep (arrays and objects)",
    "parser depth": "the document is nested more than 128 levels deep (arrays and objects)",
}


@both
@pytest.mark.parametrize("limit", list(NATIVE_REASONS))
@pytest.mark.parametrize("fmt", ["native", "gemini document"])
async def test_a_line_over_a_limit_fails_a_session_whose_lines_do_not_stand_alone(
    db_url: str, tmp_path: Path, fmt: str, limit: str
) -> None:
    # "record bytes" has no case here: a native entry is stored smaller than its line,
    # and a document within the limit holds no record over it.
    if fmt == "native":
        clean = native_folder(tmp_path / "clean" / NATIVE_ID, None)
        path = native_folder(tmp_path / "hostile" / NATIVE_ID, limit)
        name, where, reason = "native", f"{path / 'session.jsonl'}:3", NATIVE_REASONS[limit]
    else:
        clean = gemini.write_document(
            tmp_path / "clean" / "session-2026-03-01T10-00-gen0003c.json",
            gemini.legacy_document(),
        )
        path = gemini_document(tmp_path / "session-2026-03-01T10-00-gen0003c.json", limit)
        name, where, reason = "gemini", f"{path}:1", DOCUMENT_REASONS[limit]
    async with (
        sql.store_on(db_url, namespace="clean", max_record_bytes=LIMIT) as plain,
        sql.store_on(db_url, namespace="hostile", max_record_bytes=LIMIT) as store,
    ):
        expected = await plain.import_path(clean, format=name)
        assert expected.failures == [] and expected.created == 1
        before = await sql.scalar(store, "SELECT count(*) FROM sessiondb_records")
        report = await store.import_path(path, format=name)
        (failure,) = report.failures
        assert str(failure).startswith(f"{where}: {reason}"), failure
        assert report.created == 0 and report.records == 0 and report.session_ids == []
        assert (await store.list_sessions()).items == []
        assert await sql.scalar(store, "SELECT count(*) FROM sessiondb_records") == before
