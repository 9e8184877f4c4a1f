"""The spec's own format (§7.1–§7.3): ``{id}/session.jsonl`` and ``{id}/metadata.json``.

Lossless for everything sessiondb stores. Each line carries ``recordType``,
``schemaVersion`` (1), ``seq`` and ``timestamp``:

- ``message``: the message's wire object, flattened into the line as in §7.2
  (``role``, ``content`` as blocks, ``toolCallId``, …, and every extra key).
- ``compaction``: ``summary``, ``firstKeptSeq``, ``tokensBefore``, ``readFiles``,
  ``modifiedFiles`` and extras, flattened.
- ``tombstone`` (not in the spec): ``targetSeq``, ``reason`` and extras, flattened.
- ``entry`` (not in the spec): a non-context record; its object under ``entry``.
- ``prune`` (not in the spec): ``seqs``, ``marker`` and ``tokensFreed``, flattened; its
  seqs name records of the lineage, numbered as stored.

A payload holding one of the line's own keys is written nested instead, under the
record type's name (``{"recordType": "message", …, "message": {…}}``). The record's
key is ``recordUuid`` when it differs from a message's own ``uuid`` (always, for the
other kinds). ``metadata.json`` holds the §7.3 fields plus ``namespace``, ``metadata``,
and for a fork ``parentId`` and ``forkSeq``. A fork's file holds its own records only;
its inherited ones live in its parent's.

The file's ``id`` is not the id an import stores the session under (that is hashed
with the importing namespace and the key ``native:<id>``): the session keeps the key
(:func:`key_of`), and export writes the file's id back (:func:`file_id`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..config import DEFAULT_MAX_RECORD_BYTES
from ..errors import ImportFormatError, InvalidSessionIdError
from ..ids import check_session_id, derived_session_id
from ..kinds import KINDS
from ..models import SessionInfo, wire_message_error
from .base import FileFormat
from .imported import ImportedRecord, ImportedSession, SessionDetails
from .lines import (
    MAX_LINE_BYTES,
    Line,
    RawText,
    bad_line,
    dump_line,
    format_time,
    is_regular,
    json_kind,
    open_regular,
    own_entry_line,
    parse_time,
    raw_payload,
    read_lines,
    sniff_values,
)
from .paths import replace_output
from .stored import StoredRecord

NAME = "native"
SESSION_FILE = "session.jsonl"
METADATA_FILE = "metadata.json"
SCHEMA_VERSION = 1
_ENVELOPE = ("recordType", "schemaVersion", "seq", "timestamp", "recordUuid")
_RESERVED = frozenset(_ENVELOPE + KINDS)


class NativeFormat(FileFormat):
    """The spec's session directory."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        if path.is_dir():
            return is_regular(path / SESSION_FILE) and is_regular(path / METADATA_FILE)
        if path.name != SESSION_FILE:
            return False
        values = sniff_values(path, limit=3)
        return bool(values) and all(isinstance(v, dict) and "recordType" in v for v in values)

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        folder = path if path.is_dir() else path.parent
        yield _read_session(folder, strict)

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        # The folder is the file's id or the session's, a checked ULID either way.
        folder = file_id(info)
        session_path = self.write_lines(out_dir, (folder, SESSION_FILE), _lines(info, records))
        data = dump_line(metadata(info))
        metadata_path = replace_output(out_dir, folder, METADATA_FILE, data=data)
        return [session_path, metadata_path]


def _lines(info: SessionInfo, records: Iterable[StoredRecord]) -> Iterator[Any]:
    """The ``session.jsonl`` lines of the session's own records."""
    for record in records:
        if record.session_id != info.id:
            continue
        own, raw = own_entry_line(NAME, record.data if record.kind == "entry" else None)
        # A line that was not JSON goes back as it came, so it stays a bad line.
        yield raw if own and isinstance(raw, RawText) else record_line(record)


def key_of(session_id: str) -> str:
    """The external key of the session a native file with this ``id`` holds."""
    return f"{NAME}:{session_id}"


def id_of_key(key: str | None) -> str | None:
    """The session id a native key (``native:<id>``) names, when it is a well-formed
    one; ``None`` for any other key."""
    if key is None or not key.startswith(f"{NAME}:"):
        return None
    try:
        return check_session_id(key.removeprefix(f"{NAME}:"))
    except InvalidSessionIdError:
        return None


def file_id(info: SessionInfo) -> str:
    """The id the session's native file carries: the id of the file it was imported
    from, else its own. A session was imported from the file its key names when its id
    is the one an import derives from that key in its namespace; a key a caller gave
    (``native:<another session's id>``) names no file."""
    own = id_of_key(info.key)
    if own is None or derived_session_id(info.namespace, key_of(own)) != info.id:
        return info.id
    return own


def record_line(record: StoredRecord) -> dict[str, Any]:
    """The ``session.jsonl`` line of one stored record."""
    line: dict[str, Any] = {
        "recordType": record.kind,
        "schemaVersion": SCHEMA_VERSION,
        "seq": record.seq,
        "timestamp": format_time(record.created_at),
    }
    payload = record.data
    if record.kind == "message":
        if record.uuid != payload.get("uuid"):
            line["recordUuid"] = record.uuid
    else:
        if record.uuid is not None:
            line["recordUuid"] = record.uuid
        if record.kind == "entry":
            line["entry"] = payload
            return line
    if _RESERVED.isdisjoint(payload):
        line.update(payload)
    else:
        line[record.kind] = payload
    return line


def metadata(info: SessionInfo) -> dict[str, Any]:
    """The ``metadata.json`` object of a session (§7.3 plus sessiondb's fields)."""
    data: dict[str, Any] = {
        "id": file_id(info),
        "namespace": info.namespace,
        "createdAt": format_time(info.created_at),
        "lastMessageAt": format_time(info.last_message_at) if info.last_message_at else None,
        "model": info.model,
        "messageCount": info.message_count,
        "source": info.source,
        "metrics": info.metrics.model_dump(mode="json", by_alias=True),
    }
    optional = {
        "name": info.name,
        "cronJobId": info.cron_job_id,
        "systemPromptOverride": info.system_prompt_override,
        "metadata": info.metadata,
        "parentId": info.parent_id,
        "forkSeq": info.fork_seq,
    }
    data.update({k: v for k, v in optional.items() if v is not None})
    return data


def _read_session(folder: Path, strict: bool) -> ImportedSession:
    meta_path = folder / METADATA_FILE
    limit = MAX_LINE_BYTES.get() or DEFAULT_MAX_RECORD_BYTES
    try:
        with open_regular(meta_path) as stream:
            data = stream.read(limit + 1)  # never more than a record may hold
        if len(data) > limit:
            raise ValueError(f"over {limit} bytes, the store's max_record_bytes")
        meta = json.loads(data)
    except RecursionError:
        raise ImportFormatError(
            str(meta_path), 1, "cannot read metadata: nested too deeply"
        ) from None
    except (OSError, ValueError) as exc:
        raise ImportFormatError(str(meta_path), 1, f"cannot read metadata: {exc}") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("id"), str):
        raise ImportFormatError(str(meta_path), 1, "metadata needs a string 'id'")
    parent = meta.get("parentId")
    fork_seq = meta.get("forkSeq") if isinstance(parent, str) else None
    if fork_seq is not None and (not isinstance(fork_seq, int) or fork_seq < 0):
        raise ImportFormatError(str(meta_path), 1, "forkSeq must be a non-negative integer")
    source = meta.get("source")
    session = ImportedSession(
        key=key_of(meta["id"]),
        format=NAME,
        path=folder,
        records=iter(()),
        parent_key=key_of(parent) if isinstance(parent, str) else None,
        fork_seq=fork_seq,
        details=SessionDetails(
            name=_str(meta.get("name")),
            model=_str(meta.get("model")),
            created_at=parse_time(meta.get("createdAt")),
            source="cron" if source == "cron" else "interactive",
            cron_job_id=_str(meta.get("cronJobId")),
            system_prompt_override=_str(meta.get("systemPromptOverride")),
            metadata=meta["metadata"] if isinstance(meta.get("metadata"), dict) else {},
        ),
    )
    session.records = _records(session, folder / SESSION_FILE, fork_seq or 0, strict)
    return session


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _records(
    session: ImportedSession, path: Path, base: int, strict: bool
) -> Iterator[ImportedRecord]:
    session.path = path
    # A line over a limit fails the session even when not strict: skipped, it would
    # leave a hole in the seqs the file's later lines, tombstones and forks name (a
    # record over a limit as stored fails it too: lines_stand_alone is False).
    session.lines_stand_alone = False
    for position, line in enumerate(read_lines(path, session, strict=True)):
        if line.limit:
            raise ImportFormatError(str(path), line.number, line.error or "")
        record = _record(line, base, position)
        if isinstance(record, str):
            bad_line(session, line, record, strict)
            record = ImportedRecord("entry", raw_payload(NAME, line), created_at=None)
        record.line = line.number
        yield record


def _record(line: Line, base: int, position: int) -> ImportedRecord | str:
    """The record of one line, or why the line is bad."""
    if line.error is not None:
        return line.error
    value = line.value
    if not isinstance(value, dict):
        return f"expected a JSON object, got {json_kind(value)}"
    kind = value.get("recordType")
    if kind not in KINDS:
        return f"unknown recordType {kind!r}"
    if value.get("seq") != base + position + 1:
        return f"seq {value.get('seq')!r} out of order (expected {base + position + 1})"
    at = parse_time(value.get("timestamp"))
    if kind == "entry":
        payload = value.get("entry")
    elif isinstance(value.get(kind), dict):
        payload = value[kind]
    else:
        payload = {k: v for k, v in value.items() if k not in _ENVELOPE}
    if not isinstance(payload, dict):
        return f"{kind} record needs an object"
    record_uuid = value.get("recordUuid", payload.get("uuid") if kind == "message" else None)
    if record_uuid is not None and not isinstance(record_uuid, str):
        return "recordUuid must be a string"
    if kind == "message":
        error = wire_message_error(payload)
        if error is not None:
            return error
        parent = payload.get("parentUuid")
        return ImportedRecord(
            "message",
            payload,
            uuid=record_uuid,
            parent_uuid=parent if isinstance(parent, str) else None,
            created_at=at,
            checked=True,
        )
    if kind == "compaction":
        first = payload.pop("firstKeptSeq", None)
        if not isinstance(first, int) or isinstance(first, bool):
            return "compaction needs an integer firstKeptSeq"
        if not isinstance(payload.get("summary"), str):
            return "compaction needs a string summary"
        return ImportedRecord(
            "compaction", payload, uuid=record_uuid, created_at=at, first_kept=first - base - 1
        )
    if kind == "tombstone":
        target = payload.pop("targetSeq", None)
        if not isinstance(target, int) or isinstance(target, bool) or target > base + position:
            return "tombstone needs an integer targetSeq before it"
        return ImportedRecord(
            "tombstone", payload, uuid=record_uuid, created_at=at, target=target - base - 1
        )
    if kind == "prune":
        # Its seqs name records of the lineage, which a native import numbers as stored.
        seqs = payload.get("seqs")
        if not isinstance(seqs, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 < s <= base + position
            for s in seqs
        ):
            return "prune needs a list of seqs before it"
        return ImportedRecord("prune", payload, uuid=record_uuid, created_at=at)
    return ImportedRecord("entry", payload, uuid=record_uuid, created_at=at)
