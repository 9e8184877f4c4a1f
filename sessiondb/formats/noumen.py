"""noumen session files: ``{sessionId}.jsonl``, one entry a line.

Each line holds ``type``, ``uuid``, ``parentUuid``, ``sessionId`` and ``timestamp``;
``message`` lines and ``summary`` lines carry a chat-shape ``message`` (``content`` a
string or a list of parts, an assistant's ``tool_calls``, ``tool`` role results with
``tool_call_id``). What each line becomes:

- a ``message`` line whose message is a user, assistant or tool message: a ``message``
  record. The payload is the message in sessiondb's wire shape: content always a list
  of blocks (a string becomes one text block; an ``image_url`` part holding a base64
  data URL becomes an image block; other parts are kept as they are), each tool call a
  ``toolCall`` block after the content, ``tool`` becomes ``toolResult`` and
  ``tool_call_id`` becomes ``toolCallId``; other message fields stay as they are.
  Under ``noumen`` it keeps what the wire shape cannot hold: the line without its
  message (``line``), the role, how the content was written (``content``: ``string``,
  ``null`` or ``absent``; a list when not set), whether ``tool_calls`` was there and
  any tool call that is not exactly ``{id, type: "function", function: {name,
  arguments}}`` with compact JSON arguments (``calls``, by index). A line whose
  conversion would not give the same line back is kept as an entry instead.
- a ``summary`` line whose message content is text: a ``compaction`` whose ``summary``
  is that text and whose first kept record is itself (noumen loads only what follows
  the last boundary); ``tokensBefore`` comes from the boundary line before it when that
  line says (``tokensBefore`` or ``preTokens``). The ``compact-boundary`` line stays an
  entry.
- everything else (``system`` messages, ``custom-title``, ``metadata``, unknown types,
  JSON that is not an object): an ``entry`` record, ``{"format": "noumen", "line": …}``;
  a line that is not JSON keeps its text. A ``custom-title`` line names the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jsoncodec
from ..models import Message, SessionInfo, wire_message_error
from . import claude_code, pi
from .base import FileFormat
from .imported import ImportedRecord, ImportedSession
from .lines import (
    entry_payload,
    format_time,
    not_an_object,
    own_entry_line,
    parse_time,
    read_lines,
)
from .paths import id_name, output_name, safe_name
from .spill import UuidKeys
from .stored import StoredRecord

NAME = "noumen"
KEY = "noumen"
_ROLES = {"user": "user", "assistant": "assistant", "tool": "toolResult"}
_CHAT_ROLES = {wire: chat for chat, wire in _ROLES.items()}
_TYPES = frozenset(("message", "compact-boundary", "summary", "custom-title", "metadata"))
_DATA_URL = "data:"
# The names a message payload's keys are read as (fields and their camelCase aliases).
_MESSAGE_FIELDS = frozenset(
    name for field, info in Message.model_fields.items() for name in (field, info.alias) if name
)


class NoumenFormat(FileFormat):
    """noumen's ``{sessionId}.jsonl`` session files."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        values = self.transcript_objects(path)
        # Claude Code's lines never say type "message"; pi's carry id/parentId, not uuid.
        return any(
            v.get("type") in _TYPES and ("uuid" in v or "sessionId" in v) for v in values
        ) and any(v.get("type") in ("message", "compact-boundary", "summary") for v in values)

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        session = self.session(path.stem, path)
        session.details.metadata = {KEY: {"file": path.stem}}
        session.records = _Reader(session, strict).records(path)
        yield session

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        meta = (info.metadata or {}).get(KEY)
        # The file's stem (its lines' sessionId) when safe_name passes it, else the id.
        stem = safe_name(meta.get("file")) if isinstance(meta, dict) else None
        name = output_name((f"{stem}.jsonl",) if stem else None, (id_name(info.id),))
        writer = _Writer(session_id=name[0].removesuffix(".jsonl"))
        lines = (line for record in records for line in writer.lines(record))
        return [self.write_lines(out_dir, name, lines)]


# Lines between two looks at the size of the reader's uuid index.
SPILL_CHECK = 1024


@dataclass
class _Reader:
    """Reads one session file; what it keeps per line, the uuids handed out as the
    store's keys, moves to a temporary file when it grows (:class:`UuidKeys`)."""

    session: ImportedSession
    strict: bool
    keys: UuidKeys = field(default_factory=UuidKeys)
    position: int = 0
    tokens_before: int | None = None

    def records(self, path: Path) -> Iterator[ImportedRecord]:
        try:
            for line in read_lines(path, self.session, self.strict):
                record = not_an_object(NAME, self.session, line, self.strict) or self.record(
                    line.value, line.exact
                )
                record.line = line.number
                yield record
                self.position += 1
                if not self.position % SPILL_CHECK:
                    self.keys.spill()
        finally:
            self.keys.close()

    def record(self, value: dict[str, Any], exact: bool) -> ImportedRecord:
        """The record of a line that is a JSON object (``exact``: see :attr:`Line.exact`)."""
        at = parse_time(value.get("timestamp"))
        parent = value.get("parentUuid") if isinstance(value.get("parentUuid"), str) else None
        kind = value.get("type")
        record: ImportedRecord | None = None
        if kind == "message":
            payload = _to_wire(value, exact)
            if payload is not None:
                record = ImportedRecord("message", payload, checked=True)
        elif kind == "summary":
            record = self.summary(value, exact)
        elif kind == "compact-boundary":
            tokens = value.get("tokensBefore", value.get("preTokens"))
            counted = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
            self.tokens_before = tokens if counted else None
        elif kind == "custom-title" and isinstance(value.get("title"), str):
            self.session.details.name = value["title"]
        if kind in ("message", "summary") and self.session.details.created_at is None:
            self.session.details.created_at = at
        if record is None:
            record = ImportedRecord("entry", entry_payload(NAME, value))
        return ImportedRecord(
            record.kind,
            record.payload,
            uuid=self.keys.claim(value.get("uuid")),
            parent_uuid=parent,
            created_at=at,
            first_kept=record.first_kept,
            checked=record.checked,
        )

    def summary(self, value: dict[str, Any], exact: bool) -> ImportedRecord | None:
        message = value.get("message")
        if not isinstance(message, dict):
            return None
        content = message.get("content")
        if isinstance(content, str):
            text, form = content, "string"
        elif (
            isinstance(content, list)
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0] == {"type": "text", "text": content[0].get("text")}
            and isinstance(content[0]["text"], str)
        ):
            text, form = content[0]["text"], "part"
        else:
            return None
        envelope = {
            "line": {k: v for k, v in value.items() if k != "message"},
            "message": {k: v for k, v in message.items() if k != "content"},
            "content": form,
        }
        payload = {"summary": text, "tokensBefore": self.tokens_before or 0, KEY: envelope}
        self.tokens_before = None
        if exact and jsoncodec.has_surrogate_key(payload):
            return None
        return ImportedRecord("compaction", payload, first_kept=self.position)


# -- chat shape <-> wire shape ---------------------------------------------------------


def _to_wire(value: dict[str, Any], exact: bool) -> dict[str, Any] | None:
    """The wire payload of a ``message`` line, or ``None`` when it would not round-trip
    (``exact``: the line may hold lone surrogates, see :attr:`Line.exact`)."""
    message = value.get("message")
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        return None
    envelope: dict[str, Any] = {"line": {k: v for k, v in value.items() if k != "message"}}
    if role == "tool":
        envelope["role"] = role
    content = message.get("content", _ABSENT)
    blocks: list[Any]
    if content is _ABSENT:
        blocks, envelope["content"] = [], "absent"
    elif content is None:
        blocks, envelope["content"] = [], "null"
    elif isinstance(content, str):
        blocks, envelope["content"] = [{"type": "text", "text": content}], "string"
    elif isinstance(content, list):
        blocks = [_part_to_block(part) for part in content]
    else:
        return None
    if "tool_calls" in message:
        calls = message["tool_calls"]
        if role != "assistant" or not isinstance(calls, list):
            return None
        envelope["toolCalls"] = True
        kept: dict[str, Any] = {}
        for i, call in enumerate(calls):
            block = _call_to_block(call)
            if block is None:
                return None
            if _block_to_call(block) != call:
                kept[str(i)] = call
            blocks.append(block)
        if kept:
            envelope["calls"] = kept
    payload: dict[str, Any] = {"role": _ROLES[role], "content": blocks}
    for key, item in message.items():
        if key in ("role", "content", "tool_calls"):
            continue
        if key == "tool_call_id" and role == "tool":
            payload["toolCallId"] = item
        elif key in payload or key == KEY or key in _MESSAGE_FIELDS:
            # A key that names a field of sessiondb's message (``tool_call_id`` on a
            # user message, ``isError``) would be read as that field: keep the line as
            # an entry instead.
            return None
        else:
            payload[key] = item
    payload[KEY] = envelope
    if wire_message_error(payload) is not None or (exact and jsoncodec.has_surrogate_key(payload)):
        return None
    if _to_chat(payload) != message:
        return None
    return payload


_ABSENT = object()


def _part_to_block(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == "image_url" and len(part) == 2:
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) and len(image) == 1 else None
        if isinstance(url, str) and url.startswith(_DATA_URL) and ";base64," in url:
            mime, data = url[len(_DATA_URL) :].split(";base64,", 1)
            return {"type": "image", "data": data, "mimeType": mime}
    return part


def _block_to_part(block: dict[str, Any]) -> Any:
    if block.get("type") == "image" and set(block) == {"type", "data", "mimeType"}:
        url = f"{_DATA_URL}{block['mimeType']};base64,{block['data']}"
        return {"type": "image_url", "image_url": {"url": url}}
    return block


def _call_to_block(call: Any) -> dict[str, Any] | None:
    if not isinstance(call, dict):
        return None
    function = call.get("function")
    call_id = call.get("id")
    if not isinstance(function, dict) or not isinstance(call_id, str):
        return None
    name = function.get("name")
    if not isinstance(name, str):
        return None
    arguments: Any = function.get("arguments")
    parsed: Any = None
    if isinstance(arguments, str):
        try:
            parsed = jsoncodec.loads(arguments)
        except ValueError:
            parsed = None
    elif isinstance(arguments, dict):
        parsed = arguments
    return {
        "type": "toolCall",
        "id": call_id,
        "name": name,
        "arguments": parsed if isinstance(parsed, dict) else {},
    }


def _block_to_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = block.get("arguments")
    return {
        "id": block["id"],
        "type": "function",
        "function": {
            "name": block["name"],
            "arguments": jsoncodec.dumps(arguments if isinstance(arguments, dict) else {}),
        },
    }


def _to_chat(payload: dict[str, Any]) -> dict[str, Any]:
    """The chat-shape message of a wire payload (the reader's envelope when it has one)."""
    envelope = payload.get(KEY)
    envelope = envelope if isinstance(envelope, dict) else {}
    role = envelope.get("role") or _CHAT_ROLES.get(payload.get("role", ""), "user")
    blocks = [b for b in payload.get("content") or [] if isinstance(b, dict)]
    calls = [b for b in blocks if b.get("type") == "toolCall"]
    rest = [b for b in blocks if b.get("type") != "toolCall"]
    message: dict[str, Any] = {"role": role}
    form = envelope.get("content")
    if form == "string":
        message["content"] = rest[0].get("text", "") if rest else ""
    elif form == "null":
        message["content"] = None
    elif form != "absent":
        if KEY not in payload and rest and all(b.get("type") == "text" for b in rest):
            # Written by another tool: chat clients expect a string here.
            message["content"] = "\n".join(str(b.get("text", "")) for b in rest)
        elif KEY not in payload and not rest and calls:
            message["content"] = None
        else:
            message["content"] = [_block_to_part(b) for b in rest]
    if calls or envelope.get("toolCalls"):
        kept: dict[str, Any] = envelope["calls"] if isinstance(envelope.get("calls"), dict) else {}
        message["tool_calls"] = [
            kept.get(str(i)) or _block_to_call(block) for i, block in enumerate(calls)
        ]
    for key, item in payload.items():
        if key in ("role", "content", KEY):
            continue
        if key == "toolCallId" and role == "tool":
            message["tool_call_id"] = item
        else:
            message[key] = item
    return message


# -- writing ---------------------------------------------------------------------------


@dataclass
class _Writer:
    session_id: str
    last_uuid: str | None = None

    def lines(self, record: StoredRecord) -> Iterator[Any]:
        if record.kind == "message":
            payload = dict(record.data)
            envelope = payload.get(KEY)
            if isinstance(envelope, dict) and isinstance(envelope.get("line"), dict):
                yield self.seen({**envelope["line"], "message": _to_chat(payload)})
                return
            # What other formats keep in a message, and noumen's lines do not hold.
            for key in ("uuid", "parentUuid", "responseId", claude_code.KEY, pi.KEY):
                payload.pop(key, None)
            yield self.seen(self.envelope(record, "message", message=_to_chat(payload)))
        elif record.kind == "compaction":
            wire = record.data
            summary = wire["summary"]
            envelope = wire.get(KEY)
            if isinstance(envelope, dict) and isinstance(envelope.get("line"), dict):
                text: Any = summary
                if envelope.get("content") == "part":
                    text = [{"type": "text", "text": summary}]
                message = {**(envelope.get("message") or {}), "content": text}
                yield self.seen({**envelope["line"], "message": message})
                return
            boundary = self.envelope(record, "compact-boundary", uuid_suffix="-boundary")
            boundary["tokensBefore"] = wire.get("tokensBefore", 0)
            yield self.seen(boundary)
            message = {"role": "user", "content": summary}
            yield self.seen(self.envelope(record, "summary", message=message))
        elif record.kind == "entry":
            own, line = own_entry_line(NAME, record.data)
            if own:
                yield self.seen(line)

    def envelope(
        self, record: StoredRecord, kind: str, uuid_suffix: str = "", **fields: Any
    ) -> dict[str, Any]:
        uuid = (record.uuid or f"{record.session_id}-{record.seq}") + uuid_suffix
        return {
            "type": kind,
            "uuid": uuid,
            "parentUuid": self.last_uuid,
            "sessionId": self.session_id,
            "timestamp": format_time(record.created_at),
            **fields,
        }

    def seen(self, line: Any) -> Any:
        if isinstance(line, dict) and isinstance(line.get("uuid"), str):
            self.last_uuid = line["uuid"]
        return line
