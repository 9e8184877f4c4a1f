"""OpenAI Codex CLI rollout files: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``.

Every line is ``{"timestamp", "type", "payload"}`` (newer versions add members such as
``ordinal``, kept as they are). One record a line, in file order:

- ``session_meta`` (the first line): an ``entry``; the session's key is
  ``codex:<payload.id>`` (the file's stem without one), its metadata ``codex`` holds the
  file name, ``cwd``, ``cliVersion``, ``modelProvider``, ``git`` and ``forkedFromId``.
  A fork names its parent (``parent_key``, ``fork_seq`` 0: the fork's file holds its
  own copy of the history); the link is made when the parent is imported with it.
- ``response_item`` lines hold Responses API items:

  - ``message``: a ``message`` record. ``input_text`` / ``output_text`` parts become
    text blocks, an ``input_image`` holding a base64 ``data:`` URL an image block, any
    other part is kept as it is. ``user``, ``developer`` and ``system`` messages are user
    messages where the model saw them; ``assistant`` ones assistant messages.
  - ``reasoning``: an assistant message of one thinking block (the summary's text) that
    holds the whole item, encrypted content included, under ``responsesItem`` (what
    :func:`~sessiondb.formats.openai_responses.to_openai_responses` sends back).
  - ``function_call``, ``custom_tool_call`` (its ``input`` as ``{"input": …}``) and
    ``local_shell_call`` (its ``action``): an assistant message of one ``toolCall``.
  - ``function_call_output`` / ``custom_tool_call_output`` answering a call read
    before: a ``toolResult`` (a string output one text block; a list of parts blocks;
    an object kept whole under ``codex.output``, its ``content`` text as the block and
    ``success: false`` as ``isError``). An output answering no call in the context (not
    read before, or superseded by a compaction) stays an entry: no orphaned result.
  - ``web_search_call``: an assistant message of one ``responsesItem`` block.
  - anything else (``ghost_snapshot``, unknown items): an ``entry``.

  Each message's payload keeps, under ``codex``, the line without its payload
  (``line``) and the item without what the blocks hold (``item``); a line that would not
  come back the same is kept as an entry instead. Assistant messages say ``api:
  "openai-responses"``.
- ``compacted``: a ``compaction`` whose summary is ``payload.message`` and whose
  ``tokensBefore`` is the last response's token count. Without a
  ``replacement_history`` everything before it is superseded. With one, the first kept
  record is the first earlier message the history keeps, and each message after that
  it does not keep (and each tool result whose call it drops) is hidden by a tombstone
  right after the compaction, marked ``{"codex": {"synthetic": true}}`` (the writer
  leaves those out).
- Every other line (``event_msg``, ``turn_context``, ``world_state``,
  ``token_usage_record``, unknown types, lines that are not objects): an ``entry``
  ``{"format": "codex", "line": …}``.

**Usage** comes from ``event_msg`` ``token_count`` lines (``last_token_usage``; a
line repeating the previous total counts nothing). A response is the assistant
messages from one after a user message or a tool result up to the next such one, and
the tool results between; its usage goes on its first message. Codex 0.40 writes the
count before the response's items, later versions after some of them or after its
tool results: a count that arrives with no response waiting goes to the next one, and
the reader holds a response's records (at most ``HOLD_LIMIT``) until its count comes.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .. import jsoncodec
from ..models import SessionInfo, wire_message_error
from ..naming import title_of
from .base import FileFormat
from .imported import ImportedRecord, ImportedSession
from .lines import entry_payload, format_time, not_an_object, own_entry_line, parse_time, read_lines
from .paths import id_name, output_name, safe_name
from .spill import DiskMap, close_spilled, spilled
from .stored import StoredRecord

NAME = "codex"
KEY = "codex"
API = "openai-responses"  # the api an assistant message came from (openai_responses.API)
ITEM_BLOCK = "responsesItem"  # the block that holds a whole item (openai_responses.ITEM_BLOCK)
_LINE_KEYS = frozenset(("timestamp", "type", "payload"))
_INPUT_ROLES = frozenset(("user", "developer", "system"))
_WIRE_BLOCKS = frozenset(("text", "image", "toolCall", "thinking", ITEM_BLOCK))
_CALLS = frozenset(("function_call", "custom_tool_call", "local_shell_call"))
_OUTPUTS = frozenset(("function_call_output", "custom_tool_call_output"))
_DATA_URL = "data:"
# Records a response may hold back while it waits for its token count.
HOLD_LIMIT = 1000
# Lines between two looks at the size of the call index.
SPILL_CHECK = 1024


class CodexFormat(FileFormat):
    """Codex CLI's ``rollout-<time>-<uuid>.jsonl`` files."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        values = [v for v in self.jsonl_values(path, limit=5) if isinstance(v, dict)]
        if not values:
            return False
        first = values[0]
        if first.get("type") == "session_meta" and isinstance(first.get("payload"), dict):
            return True
        return all(
            v.keys() >= _LINE_KEYS and isinstance(v["type"], str) and "recordType" not in v
            for v in values
        )

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        session = self.session(path.stem, path)
        session.details.metadata = {KEY: {"file": path.name}}
        session.records = _Reader(session, strict).records(path)
        # The key (and a fork's parent) comes from the first line: read it first.
        first = next(session.records, None)
        session.records = _chain(first, session.records)
        yield session

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        meta = (info.metadata or {}).get(KEY)
        named = safe_name(meta.get("file"), suffix=".jsonl") if isinstance(meta, dict) else None
        name = output_name((named,) if named else None, (id_name(info.id),))
        return [self.write_lines(out_dir, name, _lines(info, records, isinstance(meta, dict)))]


def _chain(
    first: ImportedRecord | None, rest: Iterator[ImportedRecord]
) -> Iterator[ImportedRecord]:
    if first is not None:
        yield first
        yield from rest


# -- reading ---------------------------------------------------------------------------


@dataclass
class _Reader:
    """Reads one rollout file. Per message it keeps a fingerprint and its position (16
    bytes, to match a compaction's replacement history); per call its name and per call
    and result its call id, in indexes that move to a temporary file as they grow."""

    session: ImportedSession
    strict: bool
    position: int = 0
    number: int = 0  # the line being read
    calls: dict[str, Any] | DiskMap = field(default_factory=dict)  # call_id -> [name, position]
    # Messages in file order: their positions and fingerprints (hashes).
    positions: array[int] = field(default_factory=lambda: array("q"))
    prints: array[int] = field(default_factory=lambda: array("q"))
    call_ids: dict[str, Any] | DiskMap = field(default_factory=dict)  # str(position) -> id
    held: list[ImportedRecord] = field(default_factory=list)
    open: bool = False  # a response is under way
    counted: bool = False  # ... and has its usage
    answered: bool = False  # ... and a tool result came after it
    pending: dict[str, Any] | None = None  # a count that came before its response
    last_total: Any = None
    last_tokens: int = 0
    meta_seen: bool = False
    # The context since the last compaction: from this position, less these calls.
    live_from: int = 0
    dropped: set[str] = field(default_factory=set)

    def records(self, path: Path) -> Iterator[ImportedRecord]:
        try:
            for line in read_lines(path, self.session, self.strict):
                self.number = line.number
                bad = not_an_object(NAME, self.session, line, self.strict)
                if bad is not None:
                    yield from self.emit(bad)
                else:
                    yield from self.line(line.value, line.exact)
                if not line.number % SPILL_CHECK:
                    self.calls, self.call_ids = spilled(self.calls), spilled(self.call_ids)
            yield from self.flush()
        finally:
            close_spilled(self.calls, self.call_ids)

    def emit(self, record: ImportedRecord) -> Iterator[ImportedRecord]:
        self.position += 1
        record.line = self.number
        if self.held:
            self.held.append(record)
            if len(self.held) >= HOLD_LIMIT:
                self.counted = True  # too long to wait: this response counts nothing
                yield from self.flush()
        else:
            yield record

    def flush(self) -> Iterator[ImportedRecord]:
        held, self.held = self.held, []
        yield from held

    def line(self, value: dict[str, Any], exact: bool) -> Iterator[ImportedRecord]:
        at = parse_time(value.get("timestamp"))
        kind, payload = value.get("type"), value.get("payload")
        if not isinstance(payload, dict):
            yield from self.emit(_entry(value, at))
            return
        if kind == "session_meta" and not self.meta_seen:
            self.meta(payload, at)
        elif kind == "turn_context" and isinstance(payload.get("model"), str):
            self.session.details.model = self.session.details.model or payload["model"]
        elif kind == "event_msg" and payload.get("type") == "user_message":  # the user's words
            details = self.session.details
            details.name = details.name or title_of(str(payload.get("message") or ""))
        elif kind == "event_msg" and payload.get("type") == "token_count":
            yield from self.token_count(payload)
        elif kind == "response_item":
            record = self.item(value, payload, exact, at)
            if record is not None:
                yield from self.message(record)
                return
        elif kind == "compacted" and isinstance(payload.get("message"), str):
            yield from self.compacted(value, payload, at)
            return
        yield from self.emit(_entry(value, at))

    def meta(self, payload: dict[str, Any], at: Any) -> None:
        self.meta_seen = True
        details = self.session.details
        details.created_at = parse_time(payload.get("timestamp")) or at
        if isinstance(payload.get("id"), str) and payload["id"]:
            self.session.key = f"{NAME}:{payload['id']}"
        meta: dict[str, Any] = {"file": self.session.path.name}
        for raw, name in _META_FIELDS:
            if payload.get(raw) is not None:
                meta[name] = payload[raw]
        details.metadata = {KEY: meta}
        parent = payload.get("forked_from_id")
        if isinstance(parent, str) and parent and f"{NAME}:{parent}" != self.session.key:
            self.session.parent_key = f"{NAME}:{parent}"
            self.session.fork_seq = 0
            self.session.parent_optional = True

    # -- messages and usage

    def item(
        self, value: dict[str, Any], item: dict[str, Any], exact: bool, at: Any
    ) -> ImportedRecord | None:
        payload = _to_wire(item, self.live_call)
        if payload is None:
            return None
        payload[KEY]["line"] = {k: v for k, v in value.items() if k != "payload"}
        if wire_message_error(payload) is not None or (
            exact and jsoncodec.has_surrogate_key(payload)
        ):
            return None
        if _line_of(payload) != value:
            return None
        kind = item["type"]
        if kind in _CALLS:
            self.calls[item["call_id"]] = [payload["content"][0]["name"], self.position]
        self.remember(item)
        return ImportedRecord("message", payload, created_at=at, checked=True, line=self.number)

    def live_call(self, call_id: Any) -> str | None:
        """The name of call ``call_id`` if it is in the context (read before, and not
        superseded by a compaction since), else ``None``."""
        found = self.calls.get(call_id) if isinstance(call_id, str) else None
        if found is None or found[1] < self.live_from or call_id in self.dropped:
            return None
        name: str = found[0]
        return name

    def remember(self, item: dict[str, Any]) -> None:
        """The fingerprint of the message at this position, for a later compaction."""
        self.positions.append(self.position)
        self.prints.append(hash(_fingerprint(item)))
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            self.call_ids[str(self.position)] = call_id

    def message(self, record: ImportedRecord) -> Iterator[ImportedRecord]:
        role = record.payload["role"]
        if role == "user":
            yield from self.close()
        if role != "assistant":
            self.answered = self.open
            yield from self.emit(record)
            return
        if self.answered:  # the response after a tool result: the one before ends
            yield from self.close()
        if not self.open:
            self.open, self.counted = True, False
        if not self.counted:
            if self.pending is not None:
                record.payload["usage"], self.pending = self.pending, None
                self.counted = True
            elif not self.held:
                self.position += 1
                self.held.append(record)
                return
        yield from self.emit(record)

    def close(self) -> Iterator[ImportedRecord]:
        """The response under way ends: a user message, or the next response, follows."""
        self.open = self.counted = self.answered = False
        yield from self.flush()

    def token_count(self, payload: dict[str, Any]) -> Iterator[ImportedRecord]:
        info = payload.get("info")
        total = info.get("total_token_usage") if isinstance(info, dict) else None
        usage = _usage(info.get("last_token_usage")) if isinstance(info, dict) else None
        if usage is None or (total is not None and total == self.last_total):
            return
        self.last_total = total
        self.last_tokens = usage.get("totalTokens", 0)
        if self.open and not self.counted and self.held:
            self.held[0].payload["usage"] = usage
            self.counted = True
            yield from self.flush()
        else:
            self.pending = usage

    # -- compaction

    def compacted(
        self, value: dict[str, Any], payload: dict[str, Any], at: Any
    ) -> Iterator[ImportedRecord]:
        yield from self.close()
        envelope = {
            "line": {k: v for k, v in value.items() if k != "payload"},
            "item": {k: v for k, v in payload.items() if k != "message"},
        }
        here = self.position
        kept, hidden = self.kept(payload.get("replacement_history"))
        self.live_from = here if kept is None else kept
        self.dropped = {c for c in (self.call_ids.get(str(p)) for p in hidden) if c is not None}
        data = {"summary": payload["message"], "tokensBefore": self.last_tokens, KEY: envelope}
        yield from self.emit(
            ImportedRecord(
                "compaction", data, created_at=at, first_kept=here if kept is None else kept
            )
        )
        for target in hidden:
            marker = {"reason": "not kept by the compaction", KEY: {"synthetic": True}}
            yield from self.emit(ImportedRecord("tombstone", marker, target=target))

    def kept(self, history: Any) -> tuple[int | None, list[int]]:
        """The first earlier message a replacement history keeps (``None``: none), and
        the messages after it that it does not keep."""
        if not isinstance(history, list):
            return None, []
        wanted = {hash(_fingerprint(i)) for i in history if isinstance(i, dict)}
        matched = [p for p, f in zip(self.positions, self.prints, strict=True) if f in wanted]
        if not matched:
            return None, []
        first = matched[0]
        keep = set(matched)
        calls = {self.call_ids.get(str(p)) for p in keep} - {None}
        hidden = []
        for p in self.positions:
            if p < first:
                continue
            call = self.call_ids.get(str(p))
            if p not in keep or (call is not None and call not in calls):
                hidden.append(p)
        return first, hidden


_META_FIELDS = (
    ("cwd", "cwd"),
    ("cli_version", "cliVersion"),
    ("model_provider", "modelProvider"),
    ("git", "git"),
    ("forked_from_id", "forkedFromId"),
)


def _entry(value: Any, at: Any) -> ImportedRecord:
    return ImportedRecord("entry", entry_payload(NAME, value), created_at=at)


def _fingerprint(item: dict[str, Any]) -> bytes:
    """What a replacement history's item and the earlier item it keeps share: a
    message's role and texts (Codex rebuilds the messages it keeps), a call's or
    result's kind and call id, any other item whole."""
    kind = item.get("type")
    if kind == "message":
        content = item.get("content")
        texts = (
            [p.get("text") for p in content if isinstance(p, dict)]
            if isinstance(content, list)
            else [content]
        )
        key: Any = ["message", item.get("role"), texts]
    elif kind in _CALLS or kind in _OUTPUTS:
        key = [kind, item.get("call_id")]
    else:
        key = ["other", item]
    try:
        return orjson.dumps(key)
    except (TypeError, orjson.JSONEncodeError):  # a lone surrogate, a big integer
        return jsoncodec.dumps(key).encode("utf-8", "surrogatepass")


def _usage(value: Any) -> dict[str, Any] | None:
    """A ``last_token_usage`` in the wire's shape; cached input is not counted again."""
    if not isinstance(value, dict):
        return None
    counts = {}
    for name in ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens"):
        count = value.get(name, 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return None
        counts[name] = count
    cached = counts["cached_input_tokens"]
    usage = {
        "input": max(counts["input_tokens"] - cached, 0),
        "output": counts["output_tokens"],
        "cacheRead": cached,
        "cacheWrite": 0,
        "totalTokens": counts["total_tokens"],
    }
    write = value.get("cache_write_input_tokens")
    if isinstance(write, int) and not isinstance(write, bool) and write >= 0:
        usage["cacheWrite"] = write
    return usage


# -- items <-> wire messages -------------------------------------------------------------


def _to_wire(item: dict[str, Any], live_call: Callable[[Any], str | None]) -> dict[str, Any] | None:
    """The wire payload of a Responses item (its envelope without ``line``), or ``None``
    for an item kept as an entry (``live_call``: the name of a call in the context)."""
    kind = item.get("type")
    rest = dict(item)
    if kind == "message":
        role = item.get("role")
        if (role not in _INPUT_ROLES and role != "assistant") or "content" not in item:
            return None
        del rest["content"]
        envelope: dict[str, Any] = {"item": rest}
        content = item.get("content")
        if isinstance(content, str):
            blocks: list[Any] | None = [{"type": "text", "text": content}]
            envelope["content"] = "string"
        else:
            blocks = _parts_to_blocks(content, role == "assistant", envelope)
        if blocks is None:
            return None
        wire_role = "assistant" if role == "assistant" else "user"
        return _assistant(blocks, envelope) if wire_role == "assistant" else {
            "role": "user", "content": blocks, KEY: envelope
        }  # fmt: skip
    if kind == "reasoning":
        summary = item.get("summary")
        texts = [
            s["text"]
            for s in (summary if isinstance(summary, list) else ())
            if isinstance(s, dict) and isinstance(s.get("text"), str)
        ]
        block = {"type": "thinking", "thinking": "\n\n".join(texts), ITEM_BLOCK: item}
        return _assistant([block], {})
    if kind == "web_search_call":
        return _assistant([{"type": ITEM_BLOCK, "item": item}], {})
    if kind in _CALLS:
        return _call(item, rest)
    if kind in _OUTPUTS:
        return _output(item, rest, live_call)
    return None


def _assistant(blocks: list[Any], envelope: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": blocks, "api": API, KEY: envelope}


def _call(item: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any] | None:
    kind, call_id, name = item["type"], item.get("call_id"), item.get("name", "local_shell")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        return None
    envelope: dict[str, Any] = {"item": rest}
    for key in ("call_id", "name"):
        rest.pop(key, None)
    if kind == "function_call":
        raw = rest.pop("arguments", None)
        if not isinstance(raw, str):
            return None
        try:
            arguments = jsoncodec.loads(raw)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments = {}
        if jsoncodec.dumps(arguments) != raw:
            envelope["arguments"] = raw
    elif kind == "custom_tool_call":
        if not isinstance(item.get("input"), str):
            return None
        arguments = {"input": rest.pop("input")}
    else:  # local_shell_call
        if "name" in item or not isinstance(item.get("action"), dict):
            return None
        arguments = rest.pop("action")
    block = {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}
    return _assistant([block], envelope)


def _output(
    item: dict[str, Any], rest: dict[str, Any], live_call: Callable[[Any], str | None]
) -> dict[str, Any] | None:
    call_id = item.get("call_id")
    name = live_call(call_id)
    if name is None or "output" not in item:
        return None
    output = rest.pop("output")
    del rest["call_id"]
    envelope: dict[str, Any] = {"item": rest}
    payload: dict[str, Any] = {"role": "toolResult", "toolCallId": call_id}
    payload["toolName"] = name
    blocks: list[Any] | None
    if isinstance(output, str):
        blocks = [{"type": "text", "text": output}]
    elif isinstance(output, list):
        envelope["content"] = "parts"
        blocks = _parts_to_blocks(output, False, envelope)
    elif isinstance(output, dict):
        envelope["output"] = output  # kept whole
        text = output.get("content")
        blocks = [
            {"type": "text", "text": text if isinstance(text, str) else jsoncodec.dumps(output)}
        ]
        if isinstance(output.get("success"), bool):
            payload["isError"] = not output["success"]
    else:
        return None
    if blocks is None:
        return None
    payload["content"] = blocks
    payload[KEY] = envelope
    return payload


def _parts_to_blocks(
    parts: Any, assistant: bool, envelope: dict[str, Any]
) -> list[dict[str, Any]] | None:
    """A message's (or an output's) parts as blocks; a part whose type is not the usual
    one for its side is noted in ``envelope["types"]``."""
    if not isinstance(parts, list):
        return None
    usual = "output_text" if assistant else "input_text"
    blocks: list[dict[str, Any]] = []
    unusual: dict[str, str] = {}
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            return None
        kind = part.get("type")
        if kind in _WIRE_BLOCKS:
            return None  # it would be read as a block of that type
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            if kind != usual:
                unusual[str(i)] = kind
            blocks.append({**part, "type": "text"})
            continue
        url = part.get("image_url")
        if kind == "input_image" and isinstance(url, str) and url.startswith(_DATA_URL):
            mime, sep, data = url[len(_DATA_URL) :].partition(";base64,")
            if sep and "data" not in part and "mimeType" not in part:
                rest = {k: v for k, v in part.items() if k not in ("type", "image_url")}
                blocks.append({"type": "image", "data": data, "mimeType": mime, **rest})
                continue
        blocks.append(part)
    if unusual:
        envelope["types"] = unusual
    return blocks


def _blocks_to_parts(
    blocks: list[dict[str, Any]], assistant: bool, types: dict[str, Any]
) -> list[Any]:
    usual = "output_text" if assistant else "input_text"
    parts: list[Any] = []
    for i, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            parts.append({**block, "type": types.get(str(i), usual)})
        elif kind == "image" and isinstance(block.get("data"), str):
            rest = {k: v for k, v in block.items() if k not in ("type", "data", "mimeType")}
            url = f"{_DATA_URL}{block.get('mimeType')};base64,{block['data']}"
            parts.append({"type": "input_image", "image_url": url, **rest})
        else:
            parts.append(block)
    return parts


def _item_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The Responses item a message read by :func:`_to_wire` came from."""
    envelope = payload[KEY]
    blocks = payload.get("content") or []
    item = dict(envelope.get("item") or {})
    kind = item.get("type")
    if kind == "message":
        if envelope.get("content") == "string":
            item["content"] = blocks[0]["text"] if blocks else ""
        else:
            assistant = item.get("role") == "assistant"
            item["content"] = _blocks_to_parts(blocks, assistant, envelope.get("types") or {})
        return item
    if kind in _CALLS:
        block = blocks[0]
        item["call_id"] = block["id"]
        if kind == "function_call":
            item["name"] = block["name"]
            item["arguments"] = envelope.get("arguments", jsoncodec.dumps(block["arguments"]))
        elif kind == "custom_tool_call":
            item["name"] = block["name"]
            item["input"] = block["arguments"].get("input")
        else:
            item["action"] = block["arguments"]
        return item
    if kind in _OUTPUTS:
        item["call_id"] = payload["toolCallId"]
        if "output" in envelope:
            item["output"] = envelope["output"]
        elif envelope.get("content") == "parts":
            item["output"] = _blocks_to_parts(blocks, False, envelope.get("types") or {})
        else:
            item["output"] = blocks[0]["text"] if blocks else ""
        return item
    # reasoning and web_search_call: the block holds the item whole
    block = blocks[0] if blocks else {}
    whole = block.get(ITEM_BLOCK) if block.get("type") == "thinking" else block.get("item")
    return whole if isinstance(whole, dict) else {}


def _line_of(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload[KEY]["line"], "payload": _item_of(payload)}


# -- writing ---------------------------------------------------------------------------


def _lines(info: SessionInfo, records: Iterable[StoredRecord], own: bool) -> Iterator[Any]:
    """The file's lines: a ``session_meta`` for a session not read from a rollout, then
    the line of each record Codex has one for."""
    if not own:
        at = format_time(info.created_at)
        meta = {"id": info.id, "timestamp": at, "originator": "sessiondb"}
        yield {"timestamp": at, "type": "session_meta", "payload": meta}
    for record in records:
        data = record.data
        envelope = data.get(KEY)
        if record.kind == "message":
            if isinstance(envelope, dict) and isinstance(envelope.get("line"), dict):
                yield _line_of(data)
            else:
                at = format_time(record.created_at)
                for item in _items(data):
                    yield {"timestamp": at, "type": "response_item", "payload": item}
        elif record.kind == "compaction":
            if isinstance(envelope, dict) and isinstance(envelope.get("line"), dict):
                item = {**(envelope.get("item") or {}), "message": data["summary"]}
                yield {**envelope["line"], "payload": item}
            else:
                at = format_time(record.created_at)
                yield {
                    "timestamp": at,
                    "type": "compacted",
                    "payload": {"message": data["summary"]},
                }
        elif record.kind == "entry":
            mine, line = own_entry_line(NAME, data)
            if mine:
                yield line


def _items(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Responses items of a message written by another tool."""
    role = message.get("role")
    blocks = [b for b in message.get("content") or () if isinstance(b, dict)]
    if role == "toolResult":
        text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        call_id = message.get("toolCallId")
        yield {"type": "function_call_output", "call_id": call_id, "output": text}
        return
    assistant = role == "assistant"
    parts: list[Any] = []
    for block in blocks:
        kind = block.get("type")
        if kind in ("text", "image"):
            parts.extend(_blocks_to_parts([block], assistant, {}))
            continue
        if parts:
            yield {"type": "message", "role": role, "content": parts}
            parts = []
        if kind == "toolCall":
            arguments = block.get("arguments")
            yield {
                "type": "function_call",
                "name": block.get("name"),
                "arguments": jsoncodec.dumps(arguments if isinstance(arguments, dict) else {}),
                "call_id": block.get("id"),
            }
        elif kind == "thinking" and isinstance(block.get(ITEM_BLOCK), dict):
            yield block[ITEM_BLOCK]
        elif kind == ITEM_BLOCK and isinstance(block.get("item"), dict):
            yield block["item"]
    if parts:
        yield {"type": "message", "role": role, "content": parts}
