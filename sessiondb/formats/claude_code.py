# Over 700 lines: one format's reader and writer, which are each other's inverse (the
# writer rebuilds every line the reader's conversion took apart, and the splice relies
# on both agreeing on the stored layout); split apart, a change to one would no longer
# sit beside the other.
"""Claude Code transcripts, and cersei's variant of them.

Layout: ``<project>/<sessionId>.jsonl``; a subagent's lines in
``<sessionId>/subagents/agent-*.jsonl``; cersei continues a long session in
``<sessionId>_part2.jsonl``, ``_part3.jsonl``, … and soft-deletes with
``{"type": "tombstone", "deleted_uuid": …}``. Cersei spells the links in snake_case
(``parent_uuid``, ``session_id``); both spellings are read.

What each line becomes (one record per line, in file order):

- ``user`` / ``assistant`` lines whose ``message`` converts: a ``message`` record.
  ``tool_use`` blocks become ``toolCall`` blocks (``input`` → ``arguments``), base64
  images become ``image`` blocks, text and thinking stay as they are, other blocks are
  kept as they came. A user line holding one ``tool_result`` block becomes a
  ``toolResult`` message. The payload keeps the line's ``uuid``/``parentUuid``, the API
  response id as ``responseId`` and, under ``claudeCode``, the line without its
  content (``line``), how the content was written (``content``: ``string``, ``blocks``
  or ``toolResult``, with the ``tool_result`` block's other fields in ``block`` and its
  inner form in ``inner``) and, past the first part file, ``part``. A line whose
  conversion would not give the same line back is kept as an entry instead, so the
  writer reproduces every line exactly.
- An ``isCompactSummary`` user line (after a ``system`` ``compact_boundary``): a
  ``compaction`` whose ``summary`` is the line's text and whose first kept record is
  itself, so everything before it is superseded; ``tokensBefore`` is the boundary's
  ``compactMetadata.preTokens``. The boundary line stays an entry.
- A cersei ``tombstone`` whose target was read: a ``tombstone`` record (in any part,
  for a target in any part); the line under ``claudeCode.line``.
- Every other line (progress, file-history-snapshot, queue-operation, titles, system
  lines, unknown types, JSON that is not an object): an ``entry`` record whose payload
  is ``{"format": "claude-code", "line": …}``; a line that is not JSON keeps its text.

**Split responses.** One API response is written as several lines that share
``message.id``, one per content block, each with a snapshot of the response's usage
taken as it streamed: the counts never fall from one part to the next, and output
tokens usually rise only on the last part (10, 10, 10, 10, 299). Each line stays one
message (the file is reproduced line by line, each line's own usage kept under
``claudeCode.line``) with ``responseId`` set. The reader holds a response's records
(and the tool results and other lines between its parts) until the response ends, at
an assistant line of another response, a message that is neither a part nor a tool
result, the end of the file, or ``HOLD_LIMIT`` records; then the first part carries
the response's usage, the largest count of each field over its parts, and the other
parts carry none, so summing usage over messages counts each response once and in
full. A part whose response already ended (the same id again later) carries no usage.
The store's context shows the parts as one message (:func:`sessiondb.context.response_groups`);
records and export keep them apart.

**Branches.** Lines form a tree by ``parentUuid`` (``logicalParentUuid`` across a
compact boundary; a line with no known parent hangs under the line before it). The
context is the branch of the last line. Progress lines and parallel tool calls make
side branches that are not rewinds: a message off that branch stays in the context
when its nearest message ancestor does and it is a tool result of a call in the
context or a part of a response in the context. Every other message off the branch
(a rewind) is hidden by a tombstone appended after the file's records, marked
``{"claudeCode": {"synthetic": true}}``; the writer leaves those out. No line is
dropped.

**Subagents** are child sessions with ``fork_seq`` 0 (they inherit nothing) and
``metadata.claudeCode`` naming the parent session and the agent file.
"""

from __future__ import annotations

import os
import re
import stat
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .. import jsoncodec
from ..models import SessionInfo, wire_message_error
from .base import FileFormat
from .imported import ImportedRecord, ImportedSession, SessionDetails, SkippedPath
from .lines import (
    RawText,
    dump_stored_line,
    entry_payload,
    file_kind,
    format_time,
    is_regular,
    not_an_object,
    own_entry_line,
    parse_time,
    read_lines,
)
from .paths import id_name, open_output, output_name, safe_name
from .spill import NO_PARENT, PENDING, DiskMap, NodeTree, close_spilled, encodable, spilled
from .splice import entry_line, entry_prefix, spliced_line
from .stored import Row, StoredRecord

NAME = "claude-code"
KEY = "claudeCode"
_PART = re.compile(r"^(?P<stem>.+)_part(?P<n>[0-9]+)$")
# What the text of an entry payload of this format with no extra member starts with
# (``splice.entry_line``).
ENTRY_OPEN = entry_prefix(NAME)
_LINE_TYPES = frozenset(
    (
        "user",
        "assistant",
        "system",
        "progress",
        "file-history-snapshot",
        "queue-operation",
        "summary",
        "tombstone",
        "attachment",
        "custom-title",
        "ai-title",
    )
)
_WIRE_BLOCKS = frozenset(("text", "toolCall", "thinking", "image"))


class ClaudeCodeFormat(FileFormat):
    """Claude Code's ``<sessionId>.jsonl`` files (with subagents and cersei parts)."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        values = self.transcript_objects(path)
        hits = [v for v in values if isinstance(v.get("type"), str) and v["type"] in _LINE_TYPES]
        # noumen's lines say type "message"; Claude Code's never do.
        return bool(hits) and not any(v.get("type") == "message" for v in values)

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        stem, parts = session_parts(path)
        main = _session(f"{NAME}:{stem}", parts, strict, {"file": stem})
        yield main
        if parts:
            agents, _ = subagent_files(parts[0][1].parent, stem)
            for agent in agents:
                meta = {"parentFile": stem, "agentFile": agent.name}
                child = _session(f"{NAME}:{stem}/{agent.stem}", [(1, agent)], strict, meta)
                child.parent_key = main.key
                child.fork_seq = 0
                yield child

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        writer = _Writer.of(info, out_dir)
        try:
            for record in records:
                writer.record(record)
        finally:
            writer.close()
        return writer.paths

    def write_rows(self, info: SessionInfo, rows: Iterable[Row], out_dir: Path) -> list[Path]:
        writer = _Writer.of(info, out_dir)
        try:
            writer.rows(rows)
        finally:
            writer.close()
        return writer.paths


def session_parts(path: Path) -> tuple[str, list[tuple[int, Path]]]:
    """The session stem of a main or part file, and its files as ``(part, path)``: all
    in ``path``'s directory, and, but for ``path`` itself, regular files (no link, FIFO
    or device is opened)."""
    match = _PART.match(path.stem)
    stem = match["stem"] if match else path.stem
    base = path.with_name(f"{stem}.jsonl")
    parts = [(1, base)] if not match or is_regular(base) else []
    parts += [(n, path.parent / name) for n, name in _part_files(path.parent).get(stem, ())]
    parts.sort()
    return stem, parts


def part_name(stem: str) -> str | None:
    """The session stem a part file's stem (``<stem>_part<N>``) belongs to, else ``None``."""
    match = _PART.match(stem)
    return match["stem"] if match else None


def safe_stem(stem: str) -> bool:
    """Whether ``stem`` names one entry of its directory, so ``<stem>/subagents`` is
    inside it: not empty, ``.`` or ``..`` (a file ``...jsonl`` has the stem ``..``),
    no separator, no NUL."""
    return stem not in ("", ".", "..") and "/" not in stem and "\\" not in stem and "\0" not in stem


def subagent_files(directory: Path, stem: str) -> tuple[list[Path], list[SkippedPath]]:
    """The subagent files of the session ``<directory>/<stem>.jsonl``
    (``<stem>/subagents/agent-*.jsonl``, sorted), and those passed over: only regular
    files are read, and no link on the way is followed. A stem that is not one safe
    name (:func:`safe_stem`) has none: its file is read alone."""
    if not safe_stem(stem):
        return [], []
    folder = directory / stem
    agents = folder / "subagents"
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return [], []
        mode = os.lstat(agents).st_mode
    except OSError:
        return [], []
    if not stat.S_ISDIR(mode):
        if stat.S_ISLNK(mode):
            return [], [SkippedPath(agents, "symbolic link (not followed)")]
        return [], []
    found: list[Path] = []
    skipped: list[SkippedPath] = []
    try:
        with os.scandir(agents) as entries:
            for entry in entries:
                name = entry.name
                if not (name.startswith("agent-") and name.endswith(".jsonl")):
                    continue
                try:
                    kind = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISREG(kind):
                    found.append(Path(entry.path))
                elif stat.S_ISLNK(kind):
                    skipped.append(SkippedPath(Path(entry.path), "symbolic link (not followed)"))
                else:
                    skipped.append(SkippedPath(Path(entry.path), file_kind(kind)))
    except OSError as exc:
        return [], [SkippedPath(agents, f"cannot be listed ({exc.strerror})")]
    return sorted(found), sorted(skipped, key=lambda s: s.path)


# The part files of each directory listed so far, while :func:`listings_kept` is on.
_LISTINGS: ContextVar[dict[Path, dict[str, list[tuple[int, str]]]] | None] = ContextVar(
    "_LISTINGS", default=None
)


@contextmanager
def listings_kept() -> Iterator[None]:
    """Inside: a directory's part files are listed once (an import's snapshot), not
    once per file asking (a project of 10,000 files made 10^8 names to test)."""
    token = _LISTINGS.set({})
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def _part_files(directory: Path) -> dict[str, list[tuple[int, str]]]:
    """Session stem -> ``(part, file name)`` of the part files in ``directory`` (regular
    files only)."""
    kept = _LISTINGS.get()
    if kept is not None and directory in kept:
        return kept[directory]
    with os.scandir(directory) as entries:
        names = [e.name for e in entries if e.is_file(follow_symlinks=False)]
    return listed(directory, names)


def listed(directory: Path, names: Iterable[str]) -> dict[str, list[tuple[int, str]]]:
    """The part files among ``names``, the regular files of ``directory``; kept as its
    listing while :func:`listings_kept` is on (an import's walk lists each directory
    once, and hands the names here)."""
    found: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        if "_part" in name and name.endswith(".jsonl"):
            match = _PART.match(name[: -len(".jsonl")])
            if match:
                found.setdefault(match["stem"], []).append((int(match["n"]), name))
    kept = _LISTINGS.get()
    if kept is not None:
        kept[directory] = found
    return found


# -- reading ---------------------------------------------------------------------------


# Lines between two looks at the size of the reader's indexes.
SPILL_CHECK = 1024
# Flags of a line in the branch walk.
_MESSAGE = 1
_ACTIVE = 2
_ON_BRANCH = 4
_NO_PARENT = NO_PARENT
_PENDING = PENDING  # the parent's uuid was not seen yet: resolved at the end


# Most records held for one split response (the corpus's longest holds 71: a response,
# its tool results and their progress lines); past it the response ends early, and a
# later part of it counts no usage, so memory stays flat on any file.
HOLD_LIMIT = 1_000


@dataclass
class _Reader(NodeTree):
    """Reads one session's files; keeps per line with a uuid (a *node*, numbered in file
    order) only what the branch walk needs: its parent node, its record position and
    flags in arrays (~13 bytes a node), and in indexes that move to a temporary file
    when they grow (:func:`~sessiondb.formats.spill.spilled`) the uuid -> node map, the
    tool names, the response ids and the tool calls, results and response of each message.
    """

    session: ImportedSession
    strict: bool
    index: dict[str, Any] | DiskMap = field(default_factory=dict)  # uuid -> node
    parents: array[int] = field(default_factory=lambda: array("q"))
    positions: array[int] = field(default_factory=lambda: array("q"))
    flags: bytearray = field(default_factory=bytearray)
    # node -> its parent's uuid, while that uuid is not yet seen (a forward link)
    pending: dict[str, Any] | DiskMap = field(default_factory=dict)
    # node -> [toolCallId, [tool call ids], responseId] of a message that has any
    links: dict[str, Any] | DiskMap = field(default_factory=dict)
    responses: dict[str, Any] | DiskMap = field(default_factory=dict)
    tool_names: dict[str, Any] | DiskMap = field(default_factory=dict)
    pre_tokens: int | None = None
    position: int = 0
    title_rank: int = 3  # of the title the name came from (see details); 3: none yet
    # The split response being read: its records and those between its parts, its id,
    # and its usage so far (the largest count of each field over its parts).
    held: list[ImportedRecord] = field(default_factory=list)
    held_response: str | None = None
    held_usage: dict[str, Any] | None = None

    def records(self, parts: list[tuple[int, Path]]) -> Iterator[ImportedRecord]:
        try:
            for part, path in parts:
                self.session.path = path
                extra = {"part": part} if part > 1 else {}
                for line in read_lines(path, self.session, self.strict):
                    record = not_an_object(
                        NAME, self.session, line, self.strict, **extra
                    ) or self.record(line.value, line.exact, extra)
                    record.line = line.number
                    self.position += 1
                    if not self.position % SPILL_CHECK:
                        self.spill()
                    yield from self.hold(record)
            yield from self.release()
            self.session.path = parts[0][1] if parts else self.session.path
            yield from self.off_branch()
        finally:
            close_spilled(self.index, self.pending, self.links, self.responses, self.tool_names)

    def feed(self, values: Iterable[Any], exact: bool) -> list[ImportedRecord]:
        """The records of lines parsed already, continuing the lines read so far (a value
        that is not an object is kept as an entry, unreported); ``exact`` as
        :attr:`Line.exact`. A response split over the last lines is released."""
        records: list[ImportedRecord] = []
        for value in values:
            if isinstance(value, dict):
                record = self.record(value, exact, {})
            else:
                record = ImportedRecord("entry", entry_payload(NAME, value))
            self.position += 1
            if not self.position % SPILL_CHECK:
                self.spill()
            records.extend(self.hold(record))
        records.extend(self.release())
        return records

    def close(self) -> None:
        close_spilled(self.index, self.pending, self.links, self.responses, self.tool_names)

    def hold(self, record: ImportedRecord) -> Iterator[ImportedRecord]:
        """``record`` in file order, once the split response it may belong to has ended
        (see the module's notes on split responses)."""
        payload = record.payload if record.kind == "message" else {}
        role, response = payload.get("role"), payload.get("responseId")
        if len(self.held) >= HOLD_LIMIT:
            yield from self.release()
        if self.held:
            if role == "assistant" and response == self.held_response:
                self.held_usage = _larger_usage(self.held_usage, payload.pop("usage", None))
                self.held.append(record)
                return
            if record.kind == "entry" or role == "toolResult":
                self.held.append(record)
                return
            yield from self.release()
        if role == "assistant" and isinstance(response, str):
            if response in self.responses:
                payload.pop("usage", None)  # its response was counted where it ended
            else:
                self.responses[response] = 1
                self.held, self.held_response = [record], response
                self.held_usage = payload.get("usage")
                return
        yield record

    def release(self) -> Iterator[ImportedRecord]:
        """The held response's records, its usage on the first part."""
        held, self.held, self.held_response = self.held, [], None
        if held and self.held_usage is not None:
            held[0].payload["usage"] = self.held_usage
        self.held_usage = None
        yield from held

    def spill(self) -> None:
        self.index = spilled(self.index)
        self.pending = spilled(self.pending)
        self.links = spilled(self.links)
        self.responses = spilled(self.responses)
        self.tool_names = spilled(self.tool_names)

    def claim(self, value: Any) -> str | None:
        """``value`` as the record's uuid (the store's key): a text not seen before."""
        if not isinstance(value, str) or not value or value in self.index:
            return None
        return value if encodable(value) else None

    def record(self, value: dict[str, Any], exact: bool, extra: dict[str, Any]) -> ImportedRecord:
        """The record of a line that is a JSON object (``exact``: see :attr:`Line.exact`;
        ``extra``: its part number past the first part file)."""
        at = parse_time(value.get("timestamp"))
        if at is not None and self.session.details.created_at is None:
            self.session.details.created_at = at
        self.details(value)
        kind = value.get("type")
        raw_uuid = value.get("uuid")
        parent = _parent(value)
        record: ImportedRecord | None = None
        if kind in ("user", "assistant"):
            record = self.message(value, at, extra, exact)
        elif kind == "tombstone":
            deleted = value.get("deleted_uuid")
            node = self.index.get(deleted) if isinstance(deleted, str) else None
            if node is not None:
                target = self.positions[node]
                payload = {KEY: {"line": value, **extra}}
                record = ImportedRecord("tombstone", payload, created_at=at, target=target)
        elif kind == "system" and value.get("subtype") == "compact_boundary":
            meta = value.get("compactMetadata")
            pre = meta.get("preTokens") if isinstance(meta, dict) else None
            self.pre_tokens = pre if isinstance(pre, int) and not isinstance(pre, bool) else 0
        if record is None:
            uuid = self.claim(raw_uuid)
            record = ImportedRecord(
                "entry",
                entry_payload(NAME, value, **extra),
                uuid=uuid,
                parent_uuid=parent,
                created_at=at,
            )
        self.remember(raw_uuid, parent, record)
        return record

    def details(self, value: dict[str, Any]) -> None:
        details = self.session.details
        meta = details.metadata.setdefault(KEY, {})
        session_id = value.get("sessionId", value.get("session_id"))
        if isinstance(session_id, str) and "sessionId" not in meta:
            meta["sessionId"] = session_id
        kind = value.get("type")
        # The file's own titles, the user's first: custom-title, ai-title, then the
        # summary Claude Code wrote of the conversation (its session picker's order).
        title = {"custom-title": "customTitle", "ai-title": "aiTitle", "summary": "summary"}
        field = title.get(kind) if isinstance(kind, str) else None
        if field is not None and isinstance(value.get(field), str) and value[field].strip():
            rank = list(title.values()).index(field)
            if rank < self.title_rank or kind == "custom-title":  # the last custom-title
                details.name, self.title_rank = value[field], rank
        elif kind == "assistant" and details.model is None:
            message = value.get("message")
            model = message.get("model") if isinstance(message, dict) else None
            if isinstance(model, str) and not model.startswith("<"):
                details.model = model

    def message(
        self, value: dict[str, Any], at: Any, extra: dict[str, Any], exact: bool
    ) -> ImportedRecord | None:
        converted = wire_of_line(value, self.tool_names)
        if converted is None:
            return None
        payload, envelope, verbatim = converted
        envelope.update(extra)
        uuid = self.claim(value.get("uuid"))
        parent = _parent(value)
        if value.get("isCompactSummary") is True and envelope["content"] == "string":
            compaction = {
                "summary": payload["content"][0]["text"],
                "tokensBefore": self.pre_tokens or 0,
                KEY: envelope,
            }
            self.pre_tokens = None
            return ImportedRecord(
                "compaction",
                compaction,
                uuid=uuid,
                parent_uuid=parent,
                created_at=at,
                first_kept=self.position,
            )
        payload[KEY] = envelope
        if wire_message_error(payload) is not None or (
            exact and jsoncodec.has_surrogate_key(payload)
        ):
            return None
        return ImportedRecord(
            "message", payload, uuid=uuid, parent_uuid=parent, created_at=at, checked=True,
            splice=KEY if spliceable(envelope, verbatim, uuid) else None,
        )  # fmt: skip

    def remember(self, raw_uuid: Any, parent: str | None, record: ImportedRecord) -> None:
        if not isinstance(raw_uuid, str) or raw_uuid in self.index:
            return
        message = record.kind == "message"
        node = self.add_node(raw_uuid, parent, _MESSAGE if message else 0)
        if not message:
            return
        payload = record.payload
        calls = []
        for block in payload["content"]:
            if block.get("type") == "toolCall":
                calls.append(block["id"])
                self.tool_names[block["id"]] = block["name"]
        result, response = payload.get("toolCallId"), payload.get("responseId")
        if calls or result is not None or response is not None:
            self.links[str(node)] = [result, calls, response]

    def off_branch(self, again: bool = False) -> Iterator[ImportedRecord]:
        """Tombstones for the messages a rewind left off the last line's branch.
        ``again``: more lines may follow (:class:`TranscriptFeed`), so the walk works on
        copies of the arrays, and a forward link stays open for a later line."""
        count = len(self.positions)
        if not count:
            return
        parents, flags = self.parents, self.flags
        if again:
            parents, flags = array("q", parents), bytearray(flags)
        # A parent that is no line of the file (or the line itself): the line before.
        for node in range(count):
            parent = parents[node]
            if parent == _PENDING:
                found = self.index.get(self.pending[str(node)])
                parent = found if found is not None else _NO_PARENT
            if parent < 0 or parent == node:
                parent = node - 1
            parents[node] = parent
        cursor = count - 1
        while cursor >= 0 and not flags[cursor] & _ON_BRANCH:
            flags[cursor] |= _ON_BRANCH
            cursor = parents[cursor]
        if all(f & _ON_BRANCH for f in flags if f & _MESSAGE):
            return
        # A rewind: keep off the branch only the tool results and response parts of
        # messages on it (side branches of progress lines and parallel calls).
        calls: dict[str, Any] | DiskMap = {}
        responses: dict[str, Any] | DiskMap = {}
        for node in range(count):
            if flags[node] & _MESSAGE and flags[node] & _ON_BRANCH:
                flags[node] |= _ACTIVE
                _, node_calls, response = self.links_of(node)
                for call in node_calls:
                    calls[call] = 1
                if response is not None:
                    responses[response] = 1
                if not node % SPILL_CHECK:
                    calls, responses = spilled(calls), spilled(responses)
        nearest = array("q", [_NO_PARENT]) * count  # the nearest message ancestor
        for node in range(count):
            parent = parents[node]
            if parent >= 0:
                nearest[node] = parent if flags[parent] & _MESSAGE else nearest[parent]
        hidden: list[int] = []
        for node in range(count):
            if not flags[node] & _MESSAGE or flags[node] & _ACTIVE:
                continue
            result, node_calls, response = self.links_of(node)
            anchor = nearest[node]
            answers = result is not None and result in calls
            continues = response is not None and response in responses
            if anchor >= 0 and flags[anchor] & _ACTIVE and (answers or continues):
                flags[node] |= _ACTIVE
                for call in node_calls:
                    calls[call] = 1
            else:
                hidden.append(self.positions[node])
        close_spilled(calls, responses)
        for position in hidden:
            yield ImportedRecord(
                "tombstone",
                {"reason": "off the active branch (rewind)", KEY: {"synthetic": True}},
                target=position,
            )

    def links_of(self, node: int) -> tuple[str | None, list[str], str | None]:
        links = self.links.get(str(node))
        if links is None:
            return None, [], None
        result, calls, response = links
        return result, calls, response


def _session(
    key: str, parts: list[tuple[int, Path]], strict: bool, meta: dict[str, Any]
) -> ImportedSession:
    session = ImportedSession(
        key=key,
        format=NAME,
        path=parts[0][1],
        records=iter(()),
        details=SessionDetails(metadata={KEY: dict(meta)}),
    )
    session.records = _Reader(session, strict).records(parts)
    return session


class TranscriptFeed:
    """The reader kept between batches of one transcript's lines, parsed already (the
    Claude Agent SDK mirrors a transcript a batch at a time): each batch's records are
    those :meth:`ClaudeCodeFormat.read` makes of a file of every line fed so far, but
    that a response split across two batches keeps its first part's usage. Call
    :meth:`close` when done (the reader's indexes may be on disk)."""

    def __init__(self, key: str) -> None:
        session = ImportedSession(
            key=key, format=NAME, path=Path(), records=iter(()), details=SessionDetails()
        )
        self._reader = _Reader(session, False)

    def feed(self, values: Iterable[Any], *, exact: bool = True) -> list[ImportedRecord]:
        """The records of ``values``, one a line in order; ``target`` and ``first_kept``
        count every line fed so far. ``exact=False``: the values hold no lone surrogate
        (orjson wrote or read them), so their keys need no look for one."""
        return self._reader.feed(values, exact)

    def rewinds(self) -> list[ImportedRecord]:
        """A tombstone for each message off the last line's branch (a rewind), over
        every line fed, whether an earlier call named it or not."""
        return list(self._reader.off_branch(again=True))

    def close(self) -> None:
        self._reader.close()


def stored_line(kind: str, payload: dict[str, Any]) -> Any | None:
    """The transcript line a record of this format's reader holds (the inverse of the
    reader's conversion, as the writer does it); ``None`` for what no line was read into
    (a tombstone the reader made for a rewind) or a record of another format."""
    envelope = payload.get(KEY)
    if kind == "message" and isinstance(envelope, dict) and "line" in envelope:
        return line_of(payload, envelope)
    if kind == "compaction" and isinstance(envelope, dict) and "line" in envelope:
        return line_of({"content": [{"type": "text", "text": payload["summary"]}]}, envelope)
    if kind == "tombstone" and isinstance(envelope, dict) and "line" in envelope:
        return envelope["line"]
    if kind == "entry":
        own, line = own_entry_line(NAME, payload)
        return line if own and not isinstance(line, RawText) else None
    return None


def _parent(value: dict[str, Any]) -> str | None:
    parent = value.get("parentUuid", value.get("parent_uuid"))
    if parent is None:
        parent = value.get("logicalParentUuid")
    return parent if isinstance(parent, str) else None


# -- content conversion ----------------------------------------------------------------


def wire_of_line(
    value: dict[str, Any], tool_names: dict[str, Any] | DiskMap
) -> tuple[dict[str, Any], dict[str, Any], bool] | None:
    """``(payload, envelope, verbatim)`` of a user/assistant line, or ``None`` if it
    cannot be turned into a message that writes the same line back. ``verbatim``: the
    line's content is the payload's as it is, or its one text (no block converted)."""
    message = value.get("message")
    role = value.get("type")
    if not isinstance(message, dict) or message.get("role") != role or "content" not in message:
        return None
    content = message["content"]
    # Laid out as splice.splice needs: the envelope's form before its line, the message
    # last in the line (a line written back keeps its values, not its key order).
    line, bare = dict(value), dict(message)  # copies in C, then a member moved or dropped
    del line["message"], bare["content"]
    line["message"] = bare
    envelope: dict[str, Any] = {"content": None, "line": line}
    payload: dict[str, Any] = {"role": role}
    if isinstance(content, str):
        envelope["content"] = "string"
        verbatim = True
        payload["content"] = [{"type": "text", "text": content}]
    elif not isinstance(content, list):
        return None
    elif (
        role == "user"
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("type") == "tool_result"
        and isinstance(content[0].get("tool_use_id"), str)
    ):
        block = content[0]
        inner = block.get("content")
        envelope["content"] = "toolResult"
        verbatim = False
        envelope["block"] = {k: v for k, v in block.items() if k != "content"}
        payload["role"] = "toolResult"
        payload["toolCallId"] = block["tool_use_id"]
        if block["tool_use_id"] in tool_names:
            payload["toolName"] = tool_names[block["tool_use_id"]]
        if isinstance(block.get("is_error"), bool):
            payload["isError"] = block["is_error"]
        if "content" not in block:
            envelope["inner"] = "absent"
            payload["content"] = []
        elif isinstance(inner, str):
            envelope["inner"] = "string"
            payload["content"] = [{"type": "text", "text": inner}]
        elif isinstance(inner, list):
            blocks = _blocks_to_wire(inner)
            if blocks is None:
                return None
            envelope["inner"] = "blocks"
            payload["content"] = blocks
        else:
            return None
    else:
        blocks = _blocks_to_wire(content)
        if blocks is None:
            return None
        envelope["content"] = "blocks"
        payload["content"] = blocks
        # Only blocks _blocks_to_wire converted have these types (it refuses them as given).
        verbatim = not any(block.get("type") in _CONVERTED for block in blocks)
    for name in ("uuid", "parentUuid"):
        link = value.get(name, value.get("parent_uuid") if name == "parentUuid" else None)
        if isinstance(link, str):
            payload[name] = link
    if role == "assistant":
        if isinstance(message.get("id"), str):
            payload["responseId"] = message["id"]
        usage = _usage(message.get("usage"))
        if usage is not None:
            payload["usage"] = usage
    payload["content"] = payload.pop("content")  # last: the reader adds the envelope after it
    # A verbatim content gives the line back by construction; a converted one is checked.
    if not verbatim and line_of(payload, envelope) != value:
        return None
    return payload, envelope, verbatim


def spliceable(envelope: dict[str, Any], verbatim: bool, uuid: str | None) -> bool:
    """Whether a message's line can be cut out of its stored text (``splice.splice``): its
    content goes back as it is stored or as its one text, it is in the main file (no
    part, no tool result block in the envelope), and its uuid is the record's (the
    writer takes the last uuid from the record)."""
    raw = envelope["line"].get("uuid")
    return verbatim and len(envelope) == 2 and uuid == (raw if raw.__class__ is str else None)


# Blocks _blocks_from_wire changes (an image only with its data; kept out all the same).
_CONVERTED = frozenset(("toolCall", "image"))


def _blocks_to_wire(blocks: list[Any]) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, dict):
            return None
        kind = block.get("type")
        if kind == "tool_use":
            if (
                isinstance(block.get("id"), str)
                and isinstance(block.get("name"), str)
                and isinstance(block.get("input"), dict)
                and "arguments" not in block
            ):
                rest = {k: v for k, v in block.items() if k not in ("type", "input")}
                out.append({"type": "toolCall", **rest, "arguments": block["input"]})
                continue
            return None
        if kind == "image":
            source = block.get("source")
            if (
                isinstance(source, dict)
                and set(source) == {"type", "media_type", "data"}
                and source["type"] == "base64"
                and isinstance(source["media_type"], str)
                and isinstance(source["data"], str)
                and "data" not in block
                and "mimeType" not in block
            ):
                rest = {k: v for k, v in block.items() if k != "source"}
                out.append({**rest, "data": source["data"], "mimeType": source["media_type"]})
                continue
            return None
        if kind in _WIRE_BLOCKS and kind not in ("text", "thinking"):
            return None
        out.append(block)
    return out


def _blocks_from_wire(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "toolCall":
            rest = {k: v for k, v in block.items() if k not in ("type", "arguments")}
            out.append({"type": "tool_use", **rest, "input": block.get("arguments", {})})
        elif kind == "image" and "data" in block and "mimeType" in block:
            rest = {k: v for k, v in block.items() if k not in ("data", "mimeType")}
            source = {"type": "base64", "media_type": block["mimeType"], "data": block["data"]}
            out.append({**rest, "source": source})
        else:
            out.append(block)
    return out


def _usage(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    names = {
        "input": "input_tokens",
        "output": "output_tokens",
        "cacheRead": "cache_read_input_tokens",
        "cacheWrite": "cache_creation_input_tokens",
    }
    usage: dict[str, Any] = {}
    for wire, cc in names.items():
        count = value.get(cc, 0)
        if not isinstance(count, int) or isinstance(count, bool):
            return None
        usage[wire] = count
    return usage


def _larger_usage(
    usage: dict[str, Any] | None, other: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Two usage snapshots of one response as one: the larger count of each field (the
    snapshots are cumulative, so this is the latest one's)."""
    if usage is None or other is None:
        return other if usage is None else usage
    return {name: max(usage.get(name, 0), other.get(name, 0)) for name in {**usage, **other}}


def line_of(payload: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    """The Claude Code line a converted message came from."""
    line = dict(envelope["line"])
    message = dict(line.get("message") or {})
    content = payload.get("content") or []
    form = envelope.get("content")
    if form == "string":
        message["content"] = content[0]["text"] if content else ""
    elif form == "toolResult":
        block = dict(envelope.get("block") or {})
        inner = envelope.get("inner")
        if inner == "string":
            block["content"] = content[0]["text"] if content else ""
        elif inner == "blocks":
            block["content"] = _blocks_from_wire(content)
        message["content"] = [block]
    else:
        message["content"] = _blocks_from_wire(content)
    line["message"] = message
    return line


# -- writing ---------------------------------------------------------------------------


class _Writer:
    """Writes records into the main file and its part files, opened as needed."""

    @classmethod
    def of(cls, info: SessionInfo, out_dir: Path) -> _Writer:
        """The writer of session ``info``'s file(s) under ``out_dir``."""
        cc = (info.metadata or {}).get(KEY)
        if not isinstance(cc, dict):
            cc = {}
        # Names from metadata only when safe_name passes them, else the session id. A
        # stem may not name a part file (another session's part would overwrite it), nor
        # a parent directory a file (another session's main file would be in the way).
        stem = safe_name(cc.get("file"))
        if stem is not None and _PART.match(stem):
            stem = None
        parent = safe_name(cc.get("parentFile"))
        if parent is not None and parent.lower().endswith(".jsonl"):
            parent = None
        agent = safe_name(cc.get("agentFile"), suffix=".jsonl")
        named: tuple[str, ...] | None = None
        if parent is not None and agent is not None:
            named = (parent, "subagents", agent)
        elif stem is not None:
            named = (f"{stem}.jsonl",)
        first = output_name(named, (id_name(info.id),))
        if first != named or stem is None:
            stem = info.id
        return cls(out_dir, first, stem, info)

    def __init__(self, out_dir: Path, first: tuple[str, ...], stem: str, info: SessionInfo) -> None:
        self.out_dir = out_dir
        self.first = first  # the first file's path under out_dir, as its parts
        self.stem = stem
        self.info = info
        self.files: dict[int, IO[bytes]] = {}
        self.paths: list[Path] = []
        # str(seq) -> uuid, for a tombstone made in the database (it names its target
        # by seq); on disk once it is big, so a long session exports in flat memory.
        self.uuids: dict[str, Any] | DiskMap = {}
        self.kept = 0  # uuids kept so far
        self.last_uuid: str | None = None
        self.main: IO[bytes] | None = None  # the first file, once open

    def out(self, part: Any) -> IO[bytes]:
        number = part if isinstance(part, int) and part > 1 else 1
        if number not in self.files:
            parts = self.first
            if number > 1:
                parts = (*parts[:-1], f"{self.stem}_part{number}.jsonl")
            path, self.files[number] = open_output(self.out_dir, *parts)
            self.paths.append(path)
            if number == 1:
                self.main = self.files[1]
        return self.files[number]

    def close(self) -> None:
        if not self.files:
            self.out(1)  # an empty session is an empty file
        for stream in self.files.values():
            stream.close()
        close_spilled(self.uuids)

    def emit(self, line: Any, part: Any = 1) -> None:
        self.out(part).write(dump_stored_line(line))
        if isinstance(line, dict) and isinstance(line.get("uuid"), str):
            self.last_uuid = line["uuid"]

    def keep(self, seq: int, uuid: str) -> None:
        self.uuids[str(seq)] = uuid
        self.kept += 1
        if not self.kept % SPILL_CHECK:
            self.uuids = spilled(self.uuids)

    def rows(self, rows: Iterable[Row]) -> None:
        """Write export's rows: a line cut out of its stored text where it can be (a
        spliced message, an entry of the main file), else through :meth:`record`.

        A line cut out keeps ``last_uuid`` as writing it parsed would: a spliced message's
        uuid is its record's (``spliceable``), and so is an entry's when it has one (the
        reader claims a line's uuid unless it is not new); an entry whose record has none
        is only cut out when its text holds no ``"uuid":`` at all.
        """
        main = self.main
        uuids, kept = self.uuids, self.kept  # keep(), inline
        for row in rows:
            session_id, seq, kind, at, uuid, text = row
            if uuid is not None:
                uuids[str(seq)] = uuid
                kept += 1
                if not kept % SPILL_CHECK:
                    self.uuids = uuids = spilled(uuids)
            line = None
            if kind == "message":
                line = spliced_line(text)
            elif kind == "entry":
                line = entry_line(text, ENTRY_OPEN)
                if line is not None and uuid is None and b'"uuid":' in line:
                    line = None
            if line is None:
                self.record(StoredRecord(session_id, seq, kind, at, uuid, None, text), kept=True)
            else:
                if main is None:
                    main = self.out(1)
                main.write(line)
                if uuid is not None:
                    self.last_uuid = uuid
        self.kept = kept

    def record(self, record: StoredRecord, *, kept: bool = False) -> None:
        """Write one record (``kept``: its uuid is kept already)."""
        if record.uuid is not None and not kept:
            self.keep(record.seq, record.uuid)
        kind = record.kind
        payload = record.data
        if kind == "message":
            envelope = payload.get(KEY)
            if envelope.__class__ is dict and "line" in envelope:
                line = line_of(payload, envelope)
                part = envelope.get("part")
                main = self.main if part is None or part == 1 else None
                out = main if main is not None else self.out(part)
                out.write(dump_stored_line(line))
                uuid = line.get("uuid")
                if uuid.__class__ is str:
                    self.last_uuid = uuid
            else:
                self.emit(self.synthesized(record, payload))
        elif kind == "compaction":
            envelope = payload.get(KEY)
            if isinstance(envelope, dict) and "line" in envelope:
                text = {"content": [{"type": "text", "text": payload["summary"]}]}
                self.emit(line_of(text, envelope), envelope.get("part"))
            else:
                self.compaction(record)
        elif record.kind == "tombstone":
            envelope = payload.get(KEY)
            if isinstance(envelope, dict):
                if "line" in envelope:
                    self.emit(envelope["line"], envelope.get("part"))
            elif (target := self.uuids.get(str(payload["targetSeq"]))) is not None:
                at = format_time(record.created_at)
                self.emit({"type": "tombstone", "deleted_uuid": target, "timestamp": at})
        elif record.kind == "entry":
            own, line = own_entry_line(NAME, payload)
            if own:
                self.emit(line, payload.get("part"))

    def base(self, record: StoredRecord, kind: str, uuid: str | None) -> dict[str, Any]:
        line = {
            "parentUuid": self.last_uuid,
            "isSidechain": False,
            "type": kind,
            "sessionId": self.stem,
            "timestamp": format_time(record.created_at),
            "uuid": uuid or record.uuid or f"{self.info.id}-{record.seq}",
        }
        return line

    def synthesized(self, record: StoredRecord, payload: dict[str, Any]) -> dict[str, Any]:
        """A Claude Code line for a message that did not come from Claude Code."""
        role = payload["role"]
        blocks = _blocks_from_wire(payload.get("content") or [])
        kind = "assistant" if role == "assistant" else "user"
        line = self.base(record, kind, payload.get("uuid"))
        if role == "toolResult":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": payload.get("toolCallId"),
                "content": blocks,
            }
            if payload.get("isError") is not None:
                result["is_error"] = payload["isError"]
            line["message"] = {"role": "user", "content": [result]}
        else:
            line["message"] = {"role": role, "content": blocks}
        return line

    def compaction(self, record: StoredRecord) -> None:
        text, tokens = record.data["summary"], record.data.get("tokensBefore", 0)
        boundary = self.base(record, "system", f"{self.info.id}-{record.seq}-boundary")
        boundary.update(
            subtype="compact_boundary",
            content="Conversation compacted",
            compactMetadata={"trigger": "auto", "preTokens": tokens},
        )
        boundary["logicalParentUuid"], boundary["parentUuid"] = boundary["parentUuid"], None
        self.emit(boundary)
        summary = self.base(record, "user", None)
        summary["isCompactSummary"] = True
        summary["message"] = {"role": "user", "content": text}
        self.emit(summary)
