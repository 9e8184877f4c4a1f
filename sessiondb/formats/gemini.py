"""Google Gemini CLI chat recordings: ``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``.

The first line is the session's metadata (``sessionId``, ``projectHash``, ``startTime``,
``kind``, …); it makes no record and is kept whole in ``metadata.gemini.header``. Then
one value a line, read as the Gemini CLI reads them:

- ``{"$rewindTo": id}``: the messages from ``id`` on (``id`` included; all of them when
  ``id`` is not in the history) leave the history. The line is an ``entry``; each
  message record it hides gets a tombstone appended after it, marked
  ``{"gemini": {"synthetic": true}}``. Nothing is deleted.
- a line with a string ``id``: a message. ``user`` and ``gemini`` messages become
  ``message`` records: ``thoughts`` become ``thinking`` blocks (the description, with
  the thought's other fields on the block), ``content`` text blocks (a part that is not
  plain text is kept as a ``geminiPart`` block), ``toolCalls`` ``toolCall`` blocks and
  ``tokens`` the ``usage``; each tool call's ``result`` becomes a ``toolResult`` record
  right after the message (``isError`` when its ``status`` is ``error``). Under
  ``gemini`` the payload keeps what the wire shape does not hold (the line without its
  content, thoughts and tool calls, each call's other fields such as ``status`` and
  ``error``), so the writer gives the same line back; a line that would not come back
  the same is an ``entry``. ``info``, ``error``, ``warning`` and unknown types are
  entries. A message whose ``id`` is already in the history replaces it (the CLI
  appends a message again as it updates it): the earlier records get tombstones.
- ``{"$set": {...}}``: an ``entry``; its fields update ``metadata.gemini.session``
  (``summary`` names the session). ``$set.messages`` is a checkpoint of the whole
  history (written on resume): a message already in the history with the same content
  makes no record; one that is new or changed makes records marked
  ``{"gemini": {"checkpoint": true}}`` (the writer leaves them out: the ``$set`` line
  holds them), and a message the checkpoint leaves out is tombstoned.
- anything else: an ``entry``; a line that is not JSON keeps its text.

**Legacy** sessions are one JSON document (``session-*.json``): the metadata with a
``messages`` array. It reads to the records of its JSONL form (the metadata line, then
a line a message); ``metadata.gemini.form`` is ``json``, and the writer writes the
document back.

**Subagents** live in ``chats/<parentSessionId>/<sessionId>.jsonl``, beside the
parent's ``session-<time>-<id8>.jsonl``: a directory whose name starts with a session
file's ``<id8>`` belongs to that file and is read with it, each of its files a child
session with ``fork_seq`` 0 and ``metadata.gemini.dir`` naming the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jsoncodec
from ..config import DEFAULT_MAX_RECORD_BYTES
from ..errors import ImportFormatError, InvalidInputError
from ..models import SessionInfo
from ..validation import too_deep
from .base import FileFormat
from .gemini_messages import KEY, to_line, to_wire, tokens_of
from .imported import ImportedRecord, ImportedSession
from .lines import (
    MAX_LINE_BYTES,
    Line,
    RawText,
    TooDeep,
    bad_line,
    entry_payload,
    format_time,
    is_gemini_line,
    is_regular,
    not_an_object,
    open_regular,
    own_entry_line,
    parse_json,
    parse_time,
    raw_payload,
    read_lines,
)
from .paths import id_name, open_output, output_name, safe_name
from .spill import encodable
from .stored import StoredRecord

NAME = "gemini"
# session-<YYYY-MM-DDTHH-MM>-<first 8 characters of the session id>.json(l)
_MAIN_FILE = re.compile(r"^session-.+-(?P<short>[A-Za-z0-9_-]{1,8})\.jsonl?$")
# What detection reads of a legacy document at most.
_HEAD_BYTES = 64 * 1024


class GeminiFormat(FileFormat):
    """Gemini CLI's ``session-*.jsonl`` chat recordings (and legacy ``session-*.json``)."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        if path.suffix == ".json":
            return _document_head(path)
        values = [v for v in self.jsonl_values(path, limit=5) if isinstance(v, dict)]
        if not values:
            return False
        if "recordType" in values[0] or values[0].get("type") == "session":
            return False
        return is_gemini_line(values[0]) or any(
            "$set" in v or "$rewindTo" in v or v.get("type") == "gemini" for v in values
        )

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        main = self._session(path, strict, {})
        yield main
        for directory, child in subagent_files(path):
            session = self._session(child, strict, {"dir": directory.name})
            session.parent_key = main.key
            session.fork_seq = 0
            yield session

    def _session(self, path: Path, strict: bool, meta: dict[str, Any]) -> ImportedSession:
        session = self.session(path.stem, path)
        reader = _Reader(session, strict)
        document = reader.open(path)
        session.details.metadata = {KEY: {**meta, **reader.meta}}
        session.records = reader.records(path, document)
        return session

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        meta = (info.metadata or {}).get(KEY)
        meta = meta if isinstance(meta, dict) else {}
        form = "json" if meta.get("form") == "json" else "jsonl"
        suffix = f".{form}"
        file = safe_name(meta.get("file"), suffix=suffix)
        folder = safe_name(meta.get("dir"))
        named = None if file is None else ((folder, file) if folder else (file,))
        fallback = (id_name(info.id).removesuffix(".jsonl") + suffix,)
        parts = output_name(named, fallback)
        header = meta.get("header")
        if not isinstance(header, dict):
            header = _new_header(info) if form == "jsonl" or not meta else None
        writer = _Writer(info)
        lines = writer.lines(records)
        if form == "jsonl":
            return [self.write_lines(out_dir, parts, _with_header(header, lines))]
        return [_write_document(out_dir, parts, header, meta.get("messagesAt"), lines)]


def _document_head(path: Path) -> bool:
    """Whether ``path`` starts like a legacy session document: an object naming a
    ``sessionId`` and a ``projectHash`` or ``messages`` (a small file that parses is
    looked at whole, another by the names in its first 64 kB)."""
    if not is_regular(path):
        return False
    try:
        with open_regular(path) as stream:
            head = stream.read(_HEAD_BYTES + 1)
    except (OSError, InvalidInputError):
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not head.startswith(b"{"):
        return False
    if len(head) <= _HEAD_BYTES:
        try:
            value = parse_json(head)
        except (ValueError, UnicodeDecodeError):
            value = None  # torn, or not JSON: its text says (a bad line when read)
        else:
            return (
                isinstance(value, dict)
                and isinstance(value.get("sessionId"), str)
                and (isinstance(value.get("messages"), list) or "projectHash" in value)
            )
    return b'"sessionId"' in head and (b'"projectHash"' in head or b'"messages"' in head)


def main_ids(names: Iterable[str]) -> frozenset[str]:
    """The short ids (``<id8>``) of the Gemini main session files among ``names``."""
    found = (_MAIN_FILE.match(name) for name in names if name.startswith("session-"))
    return frozenset(match["short"] for match in found if match is not None)


def owns_directory(name: str, short_ids: frozenset[str]) -> bool:
    """Whether the directory ``name`` holds the subagents of a Gemini session file
    beside it (``short_ids``: :func:`main_ids` of the files beside it): its name is
    longer than 8 characters and starts with the file's short id."""
    return len(name) > 8 and any(name.startswith(short) for short in short_ids)


def _owner(directory: str, file: str) -> bool:
    match = _MAIN_FILE.match(file)
    return match is not None and owns_directory(directory, frozenset((match["short"],)))


def subagent_files(path: Path) -> Iterator[tuple[Path, Path]]:
    """``(directory, file)`` of each subagent file of the main file ``path``: the
    regular ``*.jsonl`` files of the directories beside it that :func:`owns_directory`
    gives it, sorted; no link is followed."""
    if _MAIN_FILE.match(path.name) is None:
        return
    try:
        with os.scandir(path.parent) as entries:
            folders = sorted(
                Path(e.path)
                for e in entries
                if e.is_dir(follow_symlinks=False) and _owner(e.name, path.name)
            )
    except OSError:
        return
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                files = sorted(
                    Path(e.path)
                    for e in entries
                    if e.name.endswith(".jsonl")
                    and stat.S_ISREG(e.stat(follow_symlinks=False).st_mode)
                )
        except OSError:
            continue
        for file in files:
            yield folder, file


# -- reading ---------------------------------------------------------------------------


@dataclass
class _Reader:
    """Reads one session file. It keeps the history as the CLI does, message id ->
    the positions of that message's records, in order."""

    session: ImportedSession
    strict: bool
    meta: dict[str, Any] = field(default_factory=dict)
    live: dict[str, list[int]] = field(default_factory=dict)
    # message id -> the content of its records (for a checkpoint to compare)
    digests: dict[str, str] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    position: int = 0
    number: int = 1  # the line being read (a legacy document is line 1)

    def open(self, path: Path) -> Any:
        """Read what the session's key and metadata need before its records: the first
        line, or the whole legacy document (returned)."""
        if path.suffix == ".json":
            self.session.lines_stand_alone = False  # one value, read whole
            self.meta["form"] = "json"
            self.meta["file"] = path.name
            document = self.document(path)
            if isinstance(document, dict):
                listed = isinstance(document.get("messages"), list)
                self.header({k: v for k, v in document.items() if k != "messages" or not listed})
                if listed:
                    self.meta["messagesAt"] = list(document).index("messages")
            return document
        self.meta["file"] = path.name
        try:
            lines = read_lines(path, limit=MAX_LINE_BYTES.get())
            try:
                first = next(lines, None)
            finally:
                lines.close()  # type: ignore[attr-defined]
        except (OSError, InvalidInputError):
            first = None
        if first is not None and _is_header(first.value):
            self.header(first.value)
        return None

    def document(self, path: Path) -> Any:
        """The legacy document parsed, or a :class:`Line` saying why it is not: not
        JSON, or over a limit (``limit`` set). The document is one value, read whole, so
        it is held to ``max_record_bytes`` like a line: one over it is refused by its
        size before any of it is read."""
        limit = MAX_LINE_BYTES.get() or DEFAULT_MAX_RECORD_BYTES
        over = f"the document is over {limit} bytes, the store's max_record_bytes"
        try:
            with open_regular(path) as stream:
                if os.fstat(stream.fileno()).st_size > limit:
                    return Line(1, error=over, limit=True)
                data = stream.read(limit + 1)  # the file may have grown since
        except OSError as exc:
            raise InvalidInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if len(data) > limit:
            return Line(1, error=over, limit=True)
        data = data.removeprefix(b"\xef\xbb\xbf")
        try:
            return parse_json(data)
        except (ValueError, UnicodeDecodeError) as exc:
            if isinstance(exc, TooDeep):
                return Line(1, error=too_deep("the document"), limit=True)
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raw = data.decode("utf-8", "surrogateescape")
            return Line(1, raw=raw, error=f"not valid JSON ({text})")

    def header(self, value: dict[str, Any]) -> None:
        self.meta["header"] = value
        self.meta["session"] = dict(value)
        details = self.session.details
        if isinstance(value.get("sessionId"), str) and value["sessionId"]:
            self.session.key = f"{NAME}:{value['sessionId']}"
        details.created_at = parse_time(value.get("startTime"))
        if isinstance(value.get("summary"), str):
            details.name = value["summary"]

    def records(self, path: Path, document: Any) -> Iterator[ImportedRecord]:
        if self.meta.get("form") == "json":
            yield from self.document_records(document)
            return
        skip = "header" in self.meta  # the first line, read already
        for line in read_lines(path, self.session, self.strict):
            if skip:
                skip = False
                continue
            self.number = line.number
            yield from self.line(line)

    def document_records(self, document: Any) -> Iterator[ImportedRecord]:
        """The records of a legacy document. It is one value: a limit it breaks (its
        size, its depth, or a message's, see :attr:`ImportedSession.lines_stand_alone`)
        fails the session.

        Raises:
            ImportFormatError: the document is over a limit.
        """
        if isinstance(document, Line) and document.limit:
            raise ImportFormatError(str(self.session.path), 1, document.error or "")
        if isinstance(document, Line):
            bad_line(self.session, document, document.error or "", self.strict)
            if document.raw is not None:
                self.position += 1
                yield ImportedRecord("entry", raw_payload(NAME, document))
            return
        if not isinstance(document, dict):
            line = Line(1, value=document)
            record = not_an_object(NAME, self.session, line, self.strict)
            if record is not None:
                self.position += 1
                yield record
            return
        messages = document.get("messages")
        for item in messages if isinstance(messages, list) else ():
            yield from self.line(Line(1, value=item, exact=True))

    def line(self, line: Line) -> Iterator[ImportedRecord]:
        odd = not_an_object(NAME, self.session, line, self.strict)
        if odd is not None:
            yield from self.emit([odd])
            return
        value: dict[str, Any] = line.value
        at = parse_time(value.get("timestamp"))
        if isinstance(value.get("$rewindTo"), str):
            yield from self.emit([ImportedRecord("entry", entry_payload(NAME, value))])
            yield from self.rewind(value["$rewindTo"])
        elif isinstance(value.get("id"), str):
            yield from self.message(value, at, line.exact, None)
        elif isinstance(value.get("$set"), dict):
            yield from self.emit([ImportedRecord("entry", entry_payload(NAME, value))])
            yield from self.update(value["$set"], line.exact)
        else:
            yield from self.emit([ImportedRecord("entry", entry_payload(NAME, value))])

    def emit(self, records: list[ImportedRecord]) -> Iterator[ImportedRecord]:
        self.position += len(records)
        for record in records:
            record.line = self.number
        yield from records

    def message(
        self, value: dict[str, Any], at: Any, exact: bool, checkpoint: bool | None
    ) -> Iterator[ImportedRecord]:
        """The records of a message; it replaces a message of its id in the history."""
        message_id = value["id"]
        payloads = to_wire(value, exact, checkpoint)
        start = self.position
        if payloads is None:
            if checkpoint:
                records = []
            else:
                records = [ImportedRecord("entry", entry_payload(NAME, value), created_at=at)]
        else:
            uuid = self.claim(message_id)
            records = [
                ImportedRecord(
                    "message", p, uuid=uuid if i == 0 else None, created_at=at, checked=True
                )
                for i, p in enumerate(payloads)
            ]
            if self.session.details.model is None and isinstance(value.get("model"), str):
                self.session.details.model = value["model"]
        yield from self.emit(records)
        mine = list(range(start, self.position)) if payloads else []
        yield from self.hide(self.live.pop(message_id, []), "replaced by a later version")
        self.live[message_id] = mine
        self.digests[message_id] = _digest(payloads)

    def claim(self, message_id: str) -> str | None:
        if not message_id or message_id in self.claimed or not encodable(message_id):
            return None
        self.claimed.add(message_id)
        return message_id

    def hide(self, positions: list[int], reason: str) -> Iterator[ImportedRecord]:
        payload = {"reason": reason, KEY: {"synthetic": True}}
        yield from self.emit(
            [ImportedRecord("tombstone", dict(payload), target=p) for p in positions]
        )

    def rewind(self, target: str) -> Iterator[ImportedRecord]:
        ids = list(self.live)
        cut = ids.index(target) if target in self.live else 0
        for message_id in ids[cut:]:
            self.digests.pop(message_id, None)
            yield from self.hide(self.live.pop(message_id), "rewound ($rewindTo)")

    def update(self, changes: dict[str, Any], exact: bool) -> Iterator[ImportedRecord]:
        session = self.meta.setdefault("session", {})
        session.update((k, v) for k, v in changes.items() if k != "messages")
        if isinstance(changes.get("summary"), str):
            self.session.details.name = changes["summary"]
        messages = changes.get("messages")
        if not isinstance(messages, list):
            return
        before, self.live, digests = self.live, {}, self.digests
        self.digests = {}
        for item in messages:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            message_id = item["id"]
            digest = _digest(to_wire(item, exact, True))
            if message_id in before and digests.get(message_id) == digest:
                self.live[message_id] = before.pop(message_id)
                self.digests[message_id] = digest
                continue
            self.live[message_id] = before.pop(message_id, [])
            at = parse_time(item.get("timestamp"))
            yield from self.message(item, at, exact, True)
        for positions in before.values():
            yield from self.hide(positions, "left out of a checkpoint ($set.messages)")


def _is_header(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("sessionId"), str)
        and isinstance(value.get("projectHash"), str)
        and not isinstance(value.get("id"), str)
        and "$set" not in value
        and "$rewindTo" not in value
        and "messages" not in value
    )


def _digest(payloads: list[dict[str, Any]] | None) -> str:
    """What a checkpoint compares: a hash of the records' wire content without the
    envelope (the history keeps 32 characters a message, not its text)."""
    if payloads is None:
        return ""
    bare = [{k: v for k, v in p.items() if k != KEY} for p in payloads]
    text = jsoncodec.dumps(bare).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).hexdigest()


# -- writing ---------------------------------------------------------------------------


def _new_header(info: SessionInfo) -> dict[str, Any]:
    return {
        "sessionId": info.id,
        "projectHash": "",
        "startTime": format_time(info.created_at),
        "lastUpdated": format_time(info.last_message_at or info.created_at),
        "kind": "subagent" if info.parent_id else "main",
    }


def _with_header(header: dict[str, Any] | None, lines: Iterator[Any]) -> Iterator[Any]:
    try:
        if header is not None:
            yield header
        yield from lines
    finally:
        lines.close()  # type: ignore[attr-defined]


def _write_document(
    out_dir: Path,
    parts: tuple[str, ...],
    header: dict[str, Any] | None,
    messages_at: Any,
    lines: Iterator[Any],
) -> Path:
    """The legacy document: ``header`` with the message lines as its ``messages``, at
    the key position it had; a document that was not JSON is written back as it was."""
    try:
        items = list(lines)
    finally:
        lines.close()  # type: ignore[attr-defined]
    raw = [x for x in items if isinstance(x, RawText)]
    if header is None:
        # Not an object: the text that was not JSON, or the one value it was.
        text = raw[0].text if raw else _pretty(items[0] if items else None)
    else:
        keys = list((header or {}).items())
        messages = [x for x in items if not isinstance(x, RawText)]
        at = messages_at if isinstance(messages_at, int) and 0 <= messages_at <= len(keys) else None
        if at is None and messages:
            at = len(keys)
        if at is not None:
            keys.insert(at, ("messages", messages))
        text = _pretty(dict(keys))
    path, out = open_output(out_dir, *parts)
    with out:
        out.write(text.encode("utf-8", "surrogateescape"))
    return path


def _pretty(value: Any) -> str:
    """``value`` as the CLI writes it: indented by two spaces, no newline at the end."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False)
        text.encode()
        return text
    except UnicodeEncodeError:
        return json.dumps(value, indent=2)


@dataclass
class _Writer:
    """Turns stored records back into lines: a message waits for the tool results that
    follow it, as its line holds them."""

    info: SessionInfo
    pending: dict[str, Any] | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    def lines(self, records: Iterable[StoredRecord]) -> Iterator[Any]:
        for record in records:
            if record.kind == "message":
                yield from self.message(record)
            elif record.kind == "entry":
                own, line = own_entry_line(NAME, record.data)
                if own:
                    yield from self.flush()
                    yield line
        yield from self.flush()

    def message(self, record: StoredRecord) -> Iterator[Any]:
        payload = record.data
        envelope = payload.get(KEY)
        envelope = envelope if isinstance(envelope, dict) else {}
        if payload.get("role") == "toolResult":
            if self.pending is not None:
                self.results.append(self.adopted(payload, envelope))
            return
        yield from self.flush()
        if envelope.get("checkpoint"):
            return
        if isinstance(envelope.get("line"), dict):
            self.pending = payload
        else:
            self.pending = self.foreign(record)

    def adopted(self, payload: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
        """A tool result for the message waiting: by its ``call`` index when the reader
        made it, else by the call its ``toolCallId`` names."""
        if "call" in envelope:
            return payload
        assert self.pending is not None
        calls = [b for b in self.pending["content"] if b.get("type") == "toolCall"]
        index = next(
            (i for i, b in enumerate(calls) if b.get("id") == payload.get("toolCallId")), -1
        )
        return {**payload, KEY: {**envelope, "call": index}}

    def foreign(self, record: StoredRecord) -> dict[str, Any]:
        """A message stored without a Gemini line: one made for it."""
        payload = record.data
        role = payload.get("role")
        blocks = [b for b in payload.get("content") or [] if isinstance(b, dict)]
        calls = [b for b in blocks if b.get("type") == "toolCall"]
        line: dict[str, Any] = {
            "id": record.uuid or f"{record.session_id}-{record.seq}",
            "timestamp": format_time(record.created_at),
            "type": "gemini" if role == "assistant" else "user",
        }
        envelope: dict[str, Any] = {"line": line, "foreign": True}
        if role == "assistant":
            thoughts = [b for b in blocks if b.get("type") == "thinking"]
            blocks = [b for b in blocks if b.get("type") != "thinking"]
            blocks = [{"type": "thinking", "thinking": b.get("thinking", "")} for b in thoughts] + [
                b for b in blocks if b.get("type") in ("text", "toolCall")
            ]
            envelope["content"] = "string"
            envelope["thoughts"] = True
            if calls:
                envelope["calls"] = [
                    {"status": "success", "timestamp": line["timestamp"]} for _ in calls
                ]
            usage = payload.get("usage")
            if isinstance(usage, dict):
                line["tokens"] = tokens_of(usage)
            if isinstance(payload.get("model"), str):
                line["model"] = payload["model"]
        else:
            blocks = [b for b in blocks if b.get("type") == "text"]
        return {"role": role, "content": blocks, KEY: envelope}

    def flush(self) -> Iterator[Any]:
        pending, results = self.pending, self.results
        self.pending, self.results = None, []
        if pending is None:
            return
        envelope = pending[KEY]
        if envelope.get("foreign"):
            # A call's status, from its result (the made envelope is this writer's own).
            for result in results:
                index = result[KEY].get("call")
                if isinstance(index, int) and 0 <= index < len(envelope.get("calls", ())):
                    status = "error" if result.get("isError") else "success"
                    envelope["calls"][index]["status"] = status
        yield to_line(pending, results)
