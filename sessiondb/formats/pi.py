"""pi session files, versions 1 to 3: a ``session`` header line, then one entry a line.

Version 1 has no ids; version 2 and later link entries into a tree by ``id`` and
``parentId``, and the context is the branch of the last entry. What each line becomes:

- the header: no record; it is kept whole in the session's ``metadata.pi.header``
  (the model comes from its ``modelId``).
- ``message`` entries whose ``message`` is a wire-shape message (pi's shape is the one
  sessiondb's wire format follows): a ``message`` record whose payload is the message
  (a string ``content`` becomes one text block), with the line minus its ``message``
  under ``pi.line`` and ``pi.content: "string"`` when the content was a string.
- ``compaction`` entries: a ``compaction`` whose first kept record is the one named by
  ``firstKeptEntryId`` or, in version 1, by ``firstKeptEntryIndex`` (which counts the
  header line, so index ``k`` is record position ``k - 1``); the line minus its
  ``summary`` under ``pi.line``.
- everything else (model and thinking-level changes, labels, custom entries, messages
  of roles sessiondb does not model, unknown types): an ``entry`` record,
  ``{"format": "pi", "line": …}``.

A message off the last entry's branch (version 2 and later) is hidden by a tombstone
appended after the file's records and marked ``{"pi": {"synthetic": true}}``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jsoncodec
from ..models import SessionInfo, wire_message_error
from .base import FileFormat
from .imported import ImportedRecord, ImportedSession
from .lines import (
    bad_line,
    entry_payload,
    format_time,
    not_an_object,
    own_entry_line,
    parse_time,
    read_lines,
)
from .paths import id_name, output_name, safe_name
from .spill import NO_PARENT, PENDING, DiskMap, NodeTree, close_spilled, encodable, spilled
from .stored import StoredRecord

NAME = "pi"
KEY = "pi"


class PiFormat(FileFormat):
    """pi's ``<timestamp>_<id>.jsonl`` session files."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        values = self.jsonl_values(path, limit=2)
        return (
            bool(values)
            and isinstance(values[0], dict)
            and values[0].get("type") == "session"
            and isinstance(values[0].get("id"), str)
        )

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        session = self.session(path.stem, path)
        session.records = _Reader(session, strict).records(path)
        # The key comes from the header; read it before handing the session out.
        first = next(session.records, None)
        session.records = _chain(first, session.records)
        yield session

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        meta = ((info.metadata or {}).get(KEY) or {}) if info.metadata else {}
        header = meta.get("header") if isinstance(meta, dict) else None
        if not isinstance(header, dict):
            header = {
                "type": "session",
                "version": 3,
                "id": info.id,
                "timestamp": format_time(info.created_at),
            }
        # The file's name when safe_name passes it, else the session id's.
        named = safe_name(meta.get("file"), suffix=".jsonl")
        name = output_name((named,) if named else None, (id_name(info.id),))
        return [self.write_lines(out_dir, name, _lines(header, records))]


def _lines(header: dict[str, Any], records: Iterable[StoredRecord]) -> Iterator[Any]:
    """The file's lines: ``header``, then the line of each record pi has one for."""
    yield header
    last_id: str | None = None
    # str(seq) -> id of its line, for a compaction's first kept (on disk once big).
    ids: dict[str, Any] | DiskMap = {}
    kept = 0
    try:
        for record in records:
            line = _line(record, last_id, ids)
            if line is None:
                continue
            yield line
            if isinstance(line, dict) and isinstance(line.get("id"), str):
                last_id = line["id"]
                ids[str(record.seq)] = last_id
                kept += 1
                if not kept % SPILL_CHECK:
                    ids = spilled(ids)
    finally:
        close_spilled(ids)


def _chain(
    first: ImportedRecord | None, rest: Iterator[ImportedRecord]
) -> Iterator[ImportedRecord]:
    if first is not None:
        yield first
        yield from rest


# Lines between two looks at the size of the reader's indexes.
SPILL_CHECK = 1024
# Flags of an entry in the branch walk.
_MESSAGE = 1
_ON_BRANCH = 2
_NO_PARENT = NO_PARENT
_PENDING = PENDING  # the parent's id was not seen yet: resolved at the end


@dataclass
class _Reader(NodeTree):
    """Reads one session file; keeps per line with an id (a *node*, numbered in file
    order) only what the branch walk and ``firstKeptEntryId`` need: its parent node and
    its record position in arrays and whether it is a message in flags (17 bytes a
    node), and in indexes that move to a temporary file when they grow
    (:func:`~sessiondb.formats.spill.spilled`) the id -> node map and the parent ids
    not yet seen (forward links).
    """

    session: ImportedSession
    strict: bool
    version: int = 1
    index: dict[str, Any] | DiskMap = field(default_factory=dict)  # id -> node
    parents: array[int] = field(default_factory=lambda: array("q"))
    positions: array[int] = field(default_factory=lambda: array("q"))
    flags: bytearray = field(default_factory=bytearray)
    # node -> its parent's id, while that id is not yet seen (a forward link)
    pending: dict[str, Any] | DiskMap = field(default_factory=dict)
    position: int = 0

    def records(self, path: Path) -> Iterator[ImportedRecord]:
        try:
            header_seen = False
            for line in read_lines(path, self.session, self.strict):
                if not header_seen:
                    header_seen = True
                    if isinstance(line.value, dict) and line.value.get("type") == "session":
                        self.header(line.value)
                        continue
                    reason = "the first line is not a session header"
                    bad_line(self.session, line, reason, self.strict)
                record = not_an_object(NAME, self.session, line, self.strict) or self.record(
                    line.value, line.exact
                )
                record.line = line.number
                yield record
                self.position += 1
                if not self.position % SPILL_CHECK:
                    self.index, self.pending = spilled(self.index), spilled(self.pending)
            yield from self.off_branch()
        finally:
            close_spilled(self.index, self.pending)

    def header(self, value: dict[str, Any]) -> None:
        version = value.get("version", 1)
        self.version = version if isinstance(version, int) else 1
        if isinstance(value.get("id"), str):
            self.session.key = f"{NAME}:{value['id']}"
        details = self.session.details
        details.created_at = parse_time(value.get("timestamp"))
        details.model = value.get("modelId") if isinstance(value.get("modelId"), str) else None
        details.metadata = {KEY: {"header": value, "file": self.session.path.name}}

    def record(self, value: dict[str, Any], exact: bool) -> ImportedRecord:
        """The record of a line that is a JSON object (``exact``: see :attr:`Line.exact`)."""
        at = parse_time(value.get("timestamp"))
        entry_id = value.get("id") if isinstance(value.get("id"), str) else None
        parent = value.get("parentId") if isinstance(value.get("parentId"), str) else None
        record: ImportedRecord | None = None
        if value.get("type") == "message":
            record = self.message(value, at, exact)
        elif value.get("type") == "compaction":
            record = self.compaction(value, at)
        elif value.get("type") == "session_info" and isinstance(value.get("name"), str):
            self.session.details.name = value["name"]
        if value.get("type") == "model_change" and isinstance(value.get("modelId"), str):
            self.session.details.model = self.session.details.model or value["modelId"]
        if record is None:
            record = ImportedRecord("entry", entry_payload(NAME, value), created_at=at)
        # The store's key: an id not seen before (an id seen before is in the index).
        known = entry_id is not None and entry_id in self.index
        uuid = entry_id if entry_id and not known and encodable(entry_id) else None
        record = ImportedRecord(
            record.kind,
            record.payload,
            uuid=uuid,
            parent_uuid=parent,
            created_at=at,
            first_kept=record.first_kept,
            checked=record.checked,
        )
        if entry_id is not None and not known:
            self.remember(entry_id, parent, record.kind == "message")
        return record

    def remember(self, entry_id: str, parent: str | None, message: bool) -> None:
        """A new node for the first line with ``entry_id``."""
        self.add_node(entry_id, parent, _MESSAGE if message else 0)

    def message(self, value: dict[str, Any], at: Any, exact: bool) -> ImportedRecord | None:
        message = value.get("message")
        if not isinstance(message, dict) or KEY in message:
            return None
        payload = dict(message)
        envelope: dict[str, Any] = {"line": {k: v for k, v in value.items() if k != "message"}}
        if isinstance(payload.get("content"), str):
            payload["content"] = [{"type": "text", "text": payload["content"]}]
            envelope["content"] = "string"
        payload[KEY] = envelope
        if wire_message_error(payload) is not None or (
            exact and jsoncodec.has_surrogate_key(payload)
        ):
            return None
        if _message_line(payload) != value:
            return None
        return ImportedRecord("message", payload, created_at=at, checked=True)

    def compaction(self, value: dict[str, Any], at: Any) -> ImportedRecord | None:
        summary = value.get("summary")
        if not isinstance(summary, str):
            return None
        first: int | None = None
        if isinstance(value.get("firstKeptEntryId"), str):
            node = self.index.get(value["firstKeptEntryId"])
            first = None if node is None else self.positions[node]
        elif isinstance(value.get("firstKeptEntryIndex"), int):
            index = value["firstKeptEntryIndex"]
            first = index - 1 if 1 <= index <= self.position + 1 else None
        if first is None:
            return None
        tokens = value.get("tokensBefore")
        counted = isinstance(tokens, int) and not isinstance(tokens, bool)
        payload = {
            "summary": summary,
            "tokensBefore": tokens if counted else 0,
            KEY: {"line": {k: v for k, v in value.items() if k != "summary"}},
        }
        return ImportedRecord("compaction", payload, created_at=at, first_kept=first)

    def off_branch(self) -> Iterator[ImportedRecord]:
        """Tombstones for the messages off the branch of the last line with an id."""
        count = len(self.positions)
        if self.version < 2 or not count:
            return
        parents, flags = self.parents, self.flags
        for node in range(count):
            if parents[node] == _PENDING:
                found = self.index.get(self.pending[str(node)])
                parents[node] = _NO_PARENT if found is None else found
        # From the last node up its parents; a cycle ends where it meets the branch.
        cursor = count - 1
        while cursor >= 0 and not flags[cursor] & _ON_BRANCH:
            flags[cursor] |= _ON_BRANCH
            cursor = parents[cursor]
        for node in range(count):
            if flags[node] == _MESSAGE:  # a message, not on the branch
                yield ImportedRecord(
                    "tombstone",
                    {"reason": "off the active branch", KEY: {"synthetic": True}},
                    target=self.positions[node],
                )


def _message_line(payload: dict[str, Any]) -> dict[str, Any]:
    envelope = payload[KEY]
    message = {k: v for k, v in payload.items() if k != KEY}
    if envelope.get("content") == "string":
        content = message.get("content") or []
        message["content"] = content[0]["text"] if content else ""
    return {**envelope["line"], "message": message}


def _line(record: StoredRecord, last_id: str | None, ids: dict[str, Any] | DiskMap) -> Any:
    """The pi line of one stored record, or ``None`` for what pi has no line for."""
    payload = record.data
    if record.kind == "message":
        if isinstance(payload.get(KEY), dict) and "line" in payload[KEY]:
            return _message_line(payload)
        return {
            "type": "message",
            "id": record.uuid or f"{record.session_id}-{record.seq}",
            "parentId": last_id,
            "timestamp": format_time(record.created_at),
            "message": payload,
        }
    if record.kind == "compaction":
        if isinstance(payload.get(KEY), dict) and "line" in payload[KEY]:
            return {**payload[KEY]["line"], "summary": payload["summary"]}
        return {
            "type": "compaction",
            "id": record.uuid or f"{record.session_id}-{record.seq}",
            "parentId": last_id,
            "timestamp": format_time(record.created_at),
            "summary": payload["summary"],
            "firstKeptEntryId": ids.get(str(payload.get("firstKeptSeq", -1))),
            "tokensBefore": payload.get("tokensBefore", 0),
        }
    if record.kind == "entry":
        own, line = own_entry_line(NAME, payload)
        return line if own else None
    return None
