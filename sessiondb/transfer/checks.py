"""An imported session checked and turned into rows: :class:`SessionRows` builds them
chunk by chunk as the records are read, each record checked as the store checks an
append; a session held whole is a :class:`Prepared`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from .. import jsoncodec
from .. import statements as q
from ..config import DEFAULT_MAX_RECORD_BYTES
from ..errors import ImportFormatError, InvalidInputError, SessionDBError, brief
from ..formats import ImportedRecord, ImportedSession, native
from ..formats.lines import Line, bad_line
from ..formats.splice import splice
from ..models import Compaction, Prune, Tombstone, wire_message, wire_text
from ..naming import title_of
from ..rows import HeadDelta, NewRecord, TokenCounts, head_counters, session_row, usage_cost
from ..validation import check_record_size, column_text, session_fields, to_json, too_deep
from .reports import crash_reason


@dataclass
class Prepared:
    """One session checked and turned into rows, ready to write."""

    key: str
    path: Path
    session_row: tuple[Any, ...]
    record_rows: list[tuple[Any, ...]]
    chars: int
    last_seq: int
    parent_id: str | None


class Refused(Exception):
    """A session fails its checks; the reason is the message."""


class ReaderCrash(Exception):
    """A reader raised something it should not have; the session is not imported."""


class SessionRows:
    """A session's rows, built chunk by chunk as its records are read and checked.

    ``chunk`` returns the next rows (table order); ``session_row`` the session's row as
    far as the records read so far tell it (final once ``done``). Records before the
    first one with a timestamp are dated by the session's ``created_at``, which for a
    session written in chunks is fixed when its first chunk is. Records keep the times
    the file gives; the session row's ``created_at`` and ``last_message_at`` are never
    later than ``stored_at`` (when the import began storing the session), so a file's
    dates cannot keep a session from :meth:`~sessiondb.SessionStore.expire` or pin it to
    the top of listings.
    """

    def __init__(
        self,
        session: ImportedSession,
        session_id: str,
        namespace: str,
        parent_id: str | None,
        inherited: int,
    ) -> None:
        self.session = session
        self.session_id = session_id
        self.namespace = namespace
        self.parent_id = parent_id
        self.inherited = inherited
        self.base = (session.fork_seq or 0) if parent_id is not None else 0
        self.records = enumerate(_guarded(session))
        self.uuids: set[str] = set()
        self.count = 0
        self.chars = 0
        self.done = False
        self.created_at: datetime | None = None
        self.last_message_at: datetime | None = None
        self.stored_at = datetime.now(UTC)
        self.last: datetime | None = None
        self.messages = 0
        self.tokens = TokenCounts()
        self.cost = 0.0
        self.name: str | None = None
        self.named = False
        self.first: list[tuple[Any, ...]] = []  # a streamed session's first chunk
        self.max_bytes = DEFAULT_MAX_RECORD_BYTES  # the store's max_record_bytes
        self.indexed = True  # the store's search_indexing
        self.strict = False  # the import's: a bad line fails the file
        self.bad_line: int | None = None  # the last line reported as bad

    @property
    def last_seq(self) -> int:
        return self.base + self.count

    def chunk(self, max_rows: int, max_chars: int) -> list[tuple[Any, ...]]:
        """Read and check up to ``max_rows`` records or ``max_chars`` of payload.

        Raises:
            Refused: a record or a session field cannot be stored (see
                :meth:`over_limit` for a record over a limit).
            ImportFormatError: with ``strict``, a bad line.
        """
        built: list[tuple[NewRecord, datetime | None]] = []
        chars = 0
        # Uuids repeated within a chunk are named here; across the chunks of a streamed
        # session the table's unique key refuses them (a set of every uuid would grow
        # with the file).
        self.uuids.clear()
        for index, record in self.records:
            seq = self.base + index + 1
            where = f"record {index + 1} (seq {seq})"
            try:
                row = record_row(record, seq, self.base, where)
                check_record_size(row.payload, self.max_bytes, where)
            except InvalidInputError as exc:
                row = self.over_limit(record, where, exc)
            if row.uuid is not None:
                if row.uuid in self.uuids:
                    raise Refused(f"{where}: uuid {row.uuid!r} appears twice in the session")
                self.uuids.add(row.uuid)
            built.append((row, record.created_at))
            chars += len(row.payload)
            if len(built) >= max_rows or chars >= max_chars:
                break
        else:
            self.done = True
        if self.created_at is None:
            first = next((at for _, at in built if at is not None), None)
            self.created_at = self.session.details.created_at or first or self.stored_at
            self.last = self.last_message_at = self.created_at
        last = self.last
        assert last is not None and self.last_message_at is not None
        last_message_at = self.last_message_at
        rows: list[tuple[Any, ...]] = []
        for seq, (row, at) in enumerate(built, start=self.last_seq + 1):
            last = at or last
            if row.kind == "message" and last > last_message_at:
                last_message_at = last
            rows.append(row.values(self.session_id, seq, last, self.indexed))
        self.last, self.last_message_at = last, last_message_at
        news = [row for row, _ in built]
        delta = HeadDelta.of(news, name=False)
        if not self.named:
            # The first user message that holds more than the tools' markup names it.
            users = (r.wire for r in news if r.wire is not None and r.wire["role"] == "user")
            self.name = next(filter(None, (title_of(wire_text(w)) for w in users)), None)
            self.named = self.name is not None
        self.messages += delta.messages
        self.tokens += delta.tokens
        for news_row in news:  # summed in record order, as one HeadDelta over all would
            if news_row.wire is not None and "usage" in news_row.wire:
                self.cost += usage_cost(news_row.wire)
        self.count += len(rows)
        self.chars += chars
        return rows

    def over_limit(self, record: ImportedRecord, where: str, exc: InvalidInputError) -> NewRecord:
        """What is stored for a record the checks refuse (over ``max_record_bytes`` or
        ``MAX_JSON_DEPTH`` as stored, or not storable): where its file's lines stand
        alone, its line is a bad line (``path:line``, reported once however many records
        it made) and the record an ``entry`` that says so, in the record's place, so the
        seqs the reader counted stay right; else the session fails.

        Raises:
            Refused: the file's lines do not stand alone (a native file, a legacy Gemini
                CLI document), or the record is not from a line (a reader's own).
            ImportFormatError: with ``strict``, the bad line.
        """
        session = self.session
        if record.line is None or not session.lines_stand_alone:
            # A record is not always one line: the uuid helps find it.
            known = f" (uuid {brief(record.uuid)})" if record.uuid is not None else ""
            reason = f"{exc}{known}"
            if record.line is not None:
                reason = str(ImportFormatError(str(session.path), record.line, reason))
            raise Refused(reason) from exc
        reason = str(exc).replace(where, "its record", 1)
        if record.line != self.bad_line:
            self.bad_line = record.line
            bad_line(session, Line(record.line, limit=True), reason, self.strict)
        payload = {"format": session.format, "skippedLine": record.line, "error": reason}
        return NewRecord(
            kind="entry",
            payload=jsoncodec.dumps(payload),
            uuid=_column(record.uuid),
            parent_uuid=_column(record.parent_uuid),
        )

    def table_row(self) -> tuple[Any, ...]:
        """The session's row in table order.

        Raises:
            Refused: a session field cannot be stored.
        """
        details = self.session.details
        try:
            if details.source == "interactive" and details.cron_job_id is not None:
                raise InvalidInputError("cron_job_id is only for source='cron'")
            created_at = _no_later(self.created_at, self.stored_at)
            last_message_at = _no_later(self.last_message_at, self.stored_at)
            assert created_at is not None and last_message_at is not None  # set by chunk()
            values = session_row(
                self.session_id,
                self.namespace,
                created_at=created_at,
                last_message_at=last_message_at,
                source=details.source,
                fields=session_fields(
                    details.name,
                    details.model,
                    details.cron_job_id,
                    details.system_prompt_override,
                    details.metadata or None,
                    self.max_bytes,
                ),
                counters=head_counters(
                    self.last_seq, self.inherited + self.messages, self.tokens, self.cost
                ),
                parent_id=self.parent_id,
                fork_seq=self.base if self.parent_id is not None else None,
                # A native file's own id, which its export writes back; other files
                # carry no key (the key addresses a session in one database).
                key=self.session.key if native.id_of_key(self.session.key) else None,
            )
        except InvalidInputError as exc:
            raise Refused(str(exc)) from exc
        values["name"] = values["name"] or self.name
        return tuple(values[c] for c in q.SESSION_COLUMN_NAMES)

    def prepared(self, rows: list[tuple[Any, ...]]) -> Prepared:
        """The whole session (``done``) as one :class:`Prepared`."""
        return Prepared(
            key=self.session.key,
            path=self.session.path,
            session_row=self.table_row(),
            record_rows=rows,
            chars=self.chars,
            last_seq=self.last_seq,
            parent_id=self.parent_id,
        )


def _no_later(at: datetime | None, bound: datetime) -> datetime | None:
    return bound if at is not None and at > bound else at


def _guarded(session: ImportedSession) -> Iterator[ImportedRecord]:
    """``session.records``, with an unexpected exception of the reader as :class:`ReaderCrash`."""
    try:
        yield from session.records
    except (SessionDBError, OSError):
        raise
    except Exception as exc:  # a reader's bug must not stop the other sessions
        raise ReaderCrash(crash_reason(f"the {session.format} reader", exc)) from exc


def record_row(record: ImportedRecord, seq: int, base: int, where: str) -> NewRecord:
    """One record's row, checked as the store checks an append.

    Raises:
        InvalidInputError: the record cannot be stored or would not read back.
    """
    uuid = _column(record.uuid)
    parent_uuid = _column(record.parent_uuid)
    payload = record.payload
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{where}: the payload must be an object")
    if record.kind == "message":
        wire = wire_message(payload, where, checked=record.checked)
        text = splice(wire, record.splice) if record.splice and record.checked else None
        if text is None:
            text = _payload_text(wire, where)
        elif jsoncodec.text_deeper_than(text) and jsoncodec.deeper_than(wire):
            raise InvalidInputError(too_deep(where))
        if jsoncodec.is_exact_path(text) and jsoncodec.has_surrogate_key(wire):
            raise InvalidInputError(
                f"{where}: an object key is not a string or holds a lone surrogate"
            )
        return NewRecord(
            kind="message",
            payload=text,
            role=wire["role"],
            uuid=uuid,
            parent_uuid=parent_uuid,
            tool_call_id=_column(wire.get("toolCallId")),
            wire=wire,
        )
    if record.kind in ("compaction", "tombstone"):
        pointed, text = _pointing(record, payload, base, seq, where)
        compaction = record.kind == "compaction"
        return NewRecord(
            kind=record.kind,
            payload=text,
            uuid=uuid,
            parent_uuid=parent_uuid,
            first_kept_seq=pointed if compaction else None,
            target_seq=None if compaction else pointed,
        )
    if record.kind == "prune":
        text = to_json(payload, where)
        _check(Prune, payload, where)
        if not all(1 <= s < seq for s in payload["seqs"]):
            raise InvalidInputError(f"{where}: a prune names seqs outside 1..{seq - 1}")
        return NewRecord(
            kind="prune",
            payload=text,
            uuid=uuid,
            parent_uuid=parent_uuid,
        )
    if record.kind != "entry":
        raise InvalidInputError(f"{where}: unknown record kind {record.kind!r}")
    return NewRecord(
        kind="entry",
        payload=_payload_text(payload, where),
        uuid=uuid,
        parent_uuid=parent_uuid,
    )


def _pointing(
    record: ImportedRecord, payload: dict[str, Any], base: int, seq: int, where: str
) -> tuple[int, str]:
    """The seq a compaction (its first kept record, in ``1..seq``) or a tombstone (its
    target, in ``1..seq - 1``) points at, past the ``base`` records a fork inherits, and
    the payload's text with that seq in it.

    Raises:
        InvalidInputError: no pointer, a seq out of range, or a payload the model refuses.
    """
    model: type[Compaction] | type[Tombstone]
    if record.kind == "compaction":
        model, index, top, key = Compaction, record.first_kept, seq, "firstKeptSeq"
        missing, label = "a compaction needs its first kept record", "first kept seq"
    else:
        model, index, top, key = Tombstone, record.target, seq - 1, "targetSeq"
        missing, label = "a tombstone needs its target", "target seq"
    if index is None:
        raise InvalidInputError(f"{where}: {missing}")
    pointed = base + index + 1
    if not 1 <= pointed <= top:
        raise InvalidInputError(f"{where}: {label} {pointed} is not in 1..{top}")
    wire = {**payload, key: pointed}
    text = to_json(wire, where)  # first: it refuses a value nested too deep
    _check(model, wire, where)
    return pointed, text


def _payload_text(value: dict[str, Any], where: str) -> str:
    """:func:`to_json` for a value a reader parsed from JSON (a message, an entry's
    line), which holds no NaN or infinity: orjson's text without the walk that looks for
    them (every Claude Code line holds a null, so it ran on every line). Its depth is
    checked as :func:`to_json` checks it: walked only when the text has enough brackets.

    Raises:
        InvalidInputError: the value is nested past ``MAX_JSON_DEPTH`` (a line parsed
            fine, orjson reads 1,024 levels), or cannot be stored.
    """
    try:
        raw = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        # A lone surrogate or a big integer (the exact path), or past 255 levels.
        return to_json(value, where)
    if jsoncodec.text_deeper_than(raw) and jsoncodec.deeper_than(value):
        raise InvalidInputError(too_deep(where))
    return raw.decode()


def _check(
    model: type[Compaction] | type[Tombstone] | type[Prune], wire: dict[str, Any], where: str
) -> None:
    try:
        model.model_validate(wire)
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(f"{where}: {field_name}: {first['msg']}") from exc


def _column(value: Any) -> str | None:
    """``value`` if a text column can hold it, else ``None`` (the payload keeps it)."""
    if value is None or (type(value) is str and value.isascii() and "\x00" not in value):
        return value  # nearly every uuid: no encoding needed to know
    try:
        return column_text(value, "")
    except InvalidInputError:
        return None
