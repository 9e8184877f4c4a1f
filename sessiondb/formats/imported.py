"""The neutral shape every file format reads into: an :class:`ImportedSession` and its
:class:`ImportedRecord` stream, with the lines it could not read.

A reader turns a file (or a directory) into :class:`ImportedSession` values, each a
stream of :class:`ImportedRecord` values in file order. The store gives record ``i``
(0-based) the seq ``base + i + 1``, where ``base`` is the session's ``fork_seq`` (``0``
for a root session). ``target`` (a tombstone's) and ``first_kept`` (a compaction's) are
positions on the same scale: ``seq = base + position + 1``, so a negative position names
a record the session inherits from its parent. Payloads of compactions and tombstones
leave out ``firstKeptSeq`` and ``targetSeq``: the store writes them from the positions.

A format keeps what it needs to write its own line back in the payload, under a key
named after the format (``claudeCode``, ``pi``, ``noumen``); a line that is not a
message becomes an ``entry`` record whose payload is
:func:`~sessiondb.formats.lines.entry_payload` (the line as parsed) or
:func:`~sessiondb.formats.lines.raw_payload` (a line that is not JSON, kept as text).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from ..kinds import RecordKind as RecordKind


@dataclass(slots=True)
class ImportedRecord:
    """One record of an imported session, before it has a seq (read-only by convention:
    not frozen, as a frozen dataclass takes three times as long to build, once a line).

    Attributes:
        kind: ``message``, ``compaction``, ``tombstone`` or ``entry``.
        payload: the record's JSON object; for a message, a wire-shape message
            (``role``, ``content`` as a list of blocks, …) that
            :func:`sessiondb.models.wire_message_error` accepts.
        uuid: the record's key, unique within the session (the external uuid where the
            format has one); the store's idempotency key. ``None`` when the line has
            none or repeats an earlier one.
        parent_uuid: the external parent link, if the format has one.
        created_at: when the tool wrote the line; ``None`` when the line says nothing.
        target: a tombstone's target, as a position (see the module docstring).
        first_kept: a compaction's first kept record, as a position.
        checked: a message payload the reader already passed through
            :func:`sessiondb.models.wire_message_error` (every reader does, to decide
            between a message and an entry), so the import does not check it again.
        splice: a checked message to store laid out for
            :func:`~sessiondb.formats.splice.spliced_line`: the key of its envelope,
            ``{"line": …, "content": "blocks" | "string"}`` (see
            :func:`~sessiondb.formats.splice.splice`).
        line: the number of the line of ``session.path`` the record was read from, so
            that a record over a limit is reported as ``path:line``; ``None`` for a
            record the reader made (a tombstone for a rewind).
    """

    kind: RecordKind
    payload: dict[str, Any]
    uuid: str | None = None
    parent_uuid: str | None = None
    created_at: datetime | None = None
    target: int | None = None
    first_kept: int | None = None
    checked: bool = False
    splice: str | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that could not be read: kept as a raw ``entry`` record; skipped when it
    is longer than a record may be; stored as an ``entry`` naming the limit when it is
    over another (see :attr:`ImportedSession.lines_stand_alone`). ``reason`` is cut to
    ``REASON_CHARS`` characters."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True, slots=True)
class SkippedPath:
    """A path an import passed over, and why: without opening it (a symbolic link not
    followed, a FIFO, a directory already visited, ...), or a file no format recognises
    from its first lines."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# Bad lines a session (and an import's report) keeps; the rest are only counted, so a
# file of 2,000,000 bad lines costs 100 objects, not 2,000,000 (458 MB).
BAD_LINES_KEPT = 100
# The longest reason a kept bad line holds (an error message may quote the line).
REASON_CHARS = 200


@dataclass
class SessionDetails:
    """The session row's fields, as far as the file tells them."""

    name: str | None = None
    model: str | None = None
    created_at: datetime | None = None
    source: Literal["interactive", "cron"] = "interactive"
    cron_job_id: str | None = None
    system_prompt_override: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class ImportedSession:
    """One session read from a file, with its records as a stream.

    ``records`` is a one-shot iterator that reads the file as it goes. ``details`` and
    ``bad_lines`` fill in while it is consumed and are final once it is exhausted (a
    file's title or model may come on its last line), so write the session row's
    fields after the records, in the same transaction.

    Attributes:
        key: a stable external key (``"claude-code:<sessionId>"``, ``"pi:<id>"``, …):
            the same file gives the same key, so a re-import can find the session.
        format: the format's registry name.
        path: the file or directory the session came from.
        records: the records, in order.
        parent_key: the key of the parent session (a subagent's or a fork's).
        fork_seq: the parent's seq the session forks after; ``0`` for a child that
            inherits nothing (a subagent); ``None`` without a parent.
        parent_optional: the parent link holds only when the parent is stored (or
            imported with it); else the session is stored without a parent (a Codex
            fork, whose file holds its own copy of the history).
        bad_lines: the first ``BAD_LINES_KEPT`` bad lines.
        bad_line_count: every bad line, kept or not.
        lines_stand_alone: a line of the file is one record or a few, and nothing in
            the file counts records: a line over a limit (its size, its depth, its
            record's size or depth as stored) is a bad line, its records stored as one
            ``entry`` that says so (the seqs the reader counted stay as they are). When
            ``False`` (a native file, whose lines carry their seqs, and a Gemini CLI
            legacy document, one value read whole) such a line fails the session.
    """

    key: str
    format: str
    path: Path
    records: Iterator[ImportedRecord]
    parent_key: str | None = None
    fork_seq: int | None = None
    parent_optional: bool = False
    details: SessionDetails = field(default_factory=SessionDetails)
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_line_count: int = 0
    lines_stand_alone: bool = True
