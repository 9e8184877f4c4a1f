"""Rows in and out: what the store writes for a record, and the models it reads back.

Plain functions over plain values; no I/O. A read row comes from any backend (asyncpg
records, sqlite3 rows): columns by name, timestamps as datetimes or SQLite's text.
"""

from __future__ import annotations

import gc
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from . import jsoncodec
from .errors import CorruptRecordError, InvalidInputError, brief
from .ids import new_session_id
from .lazy import lazy_modules
from .models import (
    Message,
    Metrics,
    Record,
    SessionInfo,
    SessionPage,
    Source,
    TurnInfo,
    trusted,
    wire_message,
    wire_text,
)
from .naming import derive_name
from .search_text import IndexSource, index_source, payload_index_source
from .validation import (
    check_source,
    column_text,
    first_error,
    session_fields,
    session_key,
    to_json,
)

if TYPE_CHECKING:
    from . import decode
else:  # msgspec's decoders: imported when a record is first read
    (decode,) = lazy_modules("decode")


@dataclass(slots=True)
class NewRecord:
    """One record about to be written. ``wire`` is a message's checked JSON object."""

    kind: str
    payload: str
    role: str | None = None
    uuid: str | None = None
    parent_uuid: str | None = None
    tool_call_id: str | None = None
    target_seq: int | None = None
    first_kept_seq: int | None = None
    wire: dict[str, Any] | None = None
    message: Message | None = None  # the model of ``wire``, validated before the write

    def index_source(self) -> IndexSource:
        """What the search index takes of the record (:mod:`sessiondb.search_text`)."""
        if self.wire is not None:
            return index_source("message", self.wire)
        return payload_index_source(self.kind, self.payload)

    def append_values(self, indexed: bool = True) -> tuple[Any, ...]:
        """The values of :data:`statements.APPEND_COLUMN_NAMES`; ``indexed``: with what
        the search index takes of the record (else None: a store that indexes nothing)."""
        return (
            self.kind,
            self.role,
            self.uuid,
            self.parent_uuid,
            self.tool_call_id,
            self.target_seq,
            self.first_kept_seq,
            len(self.payload),
            self.payload,
            self.index_source() if indexed else None,
        )

    def values(
        self, session_id: str, seq: int, at: datetime, indexed: bool = True
    ) -> tuple[Any, ...]:
        """The row in the records table's column order: the append's values with the
        session, the seq and the time in their places."""
        # Built in one go: an import builds one per record (~0.5 µs less than slicing
        # append_values' tuple).
        return (
            session_id,
            seq,
            self.kind,
            self.role,
            at,
            self.uuid,
            self.parent_uuid,
            self.tool_call_id,
            self.target_seq,
            self.first_kept_seq,
            len(self.payload),
            self.payload,
            self.index_source() if indexed else None,
        )

    def to_record(self, session_id: str, seq: int, at: datetime) -> Record:
        """The record as read back, without reading it back."""
        if self.kind == "message":
            assert self.message is not None
            typed: dict[str, Any] = {"message": self.message}
        else:
            typed = _typed(self.kind, self.payload)
        return Record(
            session_id=session_id, seq=seq, kind=self.kind, created_at=at, uuid=self.uuid, **typed
        )


def message_record(
    item: Message | Mapping[str, Any], index: int, *, model: bool = True, checked: bool = False
) -> NewRecord:
    """A message to append, checked: what cannot be read back is refused here.

    ``model``: also build the :class:`Message` a read will give (the append returns it);
    the bulk path, which returns ids, relies on the wire checks alone (they accept only
    what the model reads back, which ``tests/behaviour/test_read_back.py`` fuzzes).
    """
    # Checked, and a string content made one text block (S7.12); the rest as given.
    wire = wire_message(item, f"message {index}", checked=checked)
    payload = to_json(wire, f"message {index}")
    if jsoncodec.is_exact_path(payload) and jsoncodec.has_surrogate_key(wire):
        # pydantic cannot hold such a key, so the message could never be read back.
        raise InvalidInputError(
            f"message {index}: an object key is not a string or holds a lone surrogate"
        )
    # What a write accepts, every read reads back: the model a read will build, built
    # now from the stored text, before anything is written.
    message = read_back(payload, f"message {index}") if model else None
    return NewRecord(
        kind="message",
        payload=payload,
        role=wire["role"],
        uuid=column_text(wire.get("uuid"), f"message {index}: uuid"),
        parent_uuid=_storable(wire.get("parentUuid")),
        tool_call_id=_storable(wire.get("toolCallId")),
        wire=wire,
        message=message,
    )


def read_back(payload: str, where: str) -> Message:
    """The message a read of ``payload`` gives.

    Raises:
        InvalidInputError: no read could give one (a field of the wrong type, say
            ``"tool_call_id": 1``, which the wire shape spells ``toolCallId``).
    """
    try:
        return Message.model_validate(jsoncodec.loads(payload))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "message"
        raise InvalidInputError(f"{where}: {field}: {first['msg']}") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{where}: cannot be read back: {exc}") from None


def _storable(value: Any) -> str | None:
    """The value if a text column can hold it, else ``None`` (the payload keeps it)."""
    try:
        return column_text(value, "")
    except InvalidInputError:
        return None


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Token totals, as a message's ``usage`` and a session's head count them."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @classmethod
    def of_usage(cls, usage: Mapping[str, Any]) -> TokenCounts:
        """The counts of a checked message's ``usage`` object."""
        return cls(
            usage.get("input", 0),
            usage.get("output", 0),
            usage.get("cacheRead", 0),
            usage.get("cacheWrite", 0),
        )

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )

    def columns(self) -> dict[str, int]:
        """The session row's token columns."""
        return {
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_tokens": self.cache_read,
            "cache_write_tokens": self.cache_write,
        }


def head_counters(
    last_seq: int = 0,
    message_count: int = 0,
    tokens: TokenCounts = TokenCounts(),  # frozen: one shared zero is fine
    cost_total: float = 0.0,
) -> dict[str, Any]:
    """The session row's head counters: what an append moves forward."""
    return {
        "last_seq": last_seq,
        "message_count": message_count,
        **tokens.columns(),
        "cost_total": cost_total,
    }


#: The head counters' column names, in the order :func:`head_counters` gives them.
HEAD_COUNTERS = tuple(head_counters())


def session_row(
    session_id: str,
    namespace: str,
    *,
    created_at: datetime,
    last_message_at: datetime,
    source: str,
    fields: Mapping[str, Any],
    counters: Mapping[str, Any] | None = None,
    parent_id: str | None = None,
    fork_seq: int | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """A session row, every column named: the one place that spells it out.

    ``fields`` are the caller's checked fields (:func:`validation.session_fields`);
    ``counters`` the head (:func:`head_counters`), zero when not given.
    """
    return {
        "id": session_id,
        "namespace": namespace,
        "created_at": created_at,
        "last_message_at": last_message_at,
        "source": source,
        **fields,
        **(counters if counters is not None else head_counters()),
        "parent_id": parent_id,
        "fork_seq": fork_seq,
        "key": key,
    }


def new_session_row(
    namespace: str,
    max_bytes: int,
    now: datetime,
    *,
    name: str | None = None,
    model: str | None = None,
    source: str = "interactive",
    cron_job_id: str | None = None,
    system_prompt_override: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """The row of a new, empty session with a new id, its caller's fields checked."""
    check_source(source, cron_job_id)
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
    fields = session_fields(
        name,
        model,
        cron_job_id,
        system_prompt_override,
        None if metadata is None else dict(metadata),
        max_bytes,
    )
    return session_row(
        new_session_id(),
        namespace,
        created_at=now,
        last_message_at=now,
        source=source,
        fields=fields,
        key=session_key(key) if key is not None else None,
    )


@dataclass(frozen=True)
class HeadDelta:
    """What appending some records adds to the session's head."""

    messages: int
    tokens: TokenCounts
    cost: float
    name: str | None

    @classmethod
    def of(cls, rows: Sequence[NewRecord], *, name: bool = True) -> HeadDelta:
        """The delta of ``rows``; ``name=False`` skips deriving a name (the session has one)."""
        messages = [r.wire for r in rows if r.wire is not None]
        tokens = TokenCounts()
        cost = 0.0
        for m in messages:
            if "usage" in m:
                tokens += TokenCounts.of_usage(m["usage"] or {})
                cost += usage_cost(m)
        first_user = next((m for m in messages if m["role"] == "user"), None) if name else None
        derived = derive_name(wire_text(first_user)) if first_user is not None else None
        return cls(len(messages), tokens, cost, derived)

    def head(
        self, session_id: str, namespace: str, count: int, at: datetime, expected_seq: int | None
    ) -> dict[str, Any]:
        """The parameters of the head bump (:func:`statements.bump_head`)."""
        return {
            "sid": session_id,
            "ns": namespace,
            "count": count,
            "messages": self.messages,
            "at": at,
            "name": self.name,
            "d_input": self.tokens.input,
            "d_output": self.tokens.output,
            "d_cache_read": self.tokens.cache_read,
            "d_cache_write": self.tokens.cache_write,
            "d_cost": self.cost,
            "expected": expected_seq,
        }


def usage_cost(data: dict[str, Any]) -> float:
    """The ``usage.cost.total`` of a checked message, 0.0 when it has none."""
    usage = data.get("usage")
    if not usage:
        return 0.0
    cost = (usage.get("cost") or {}).get("total", 0.0)
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else 0.0


# -- reading ------------------------------------------------------------------------------


def utc(value: datetime | str) -> datetime:
    """A timestamp column's value as aware UTC, from any backend (SQLite gives text)."""
    if isinstance(value, datetime) and value.tzinfo is UTC:  # asyncpg's timestamptz
        return value
    if isinstance(value, str):
        if len(value) == 26 and value[19] == "." and value[20:].isdigit():
            # What the SQLite backend writes (naive UTC to the microsecond), read with its
            # zone: 0.2 µs, against 0.9 µs parsed naive and then replace()d.
            return datetime.fromisoformat(value + "+00:00")
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def records_from_rows(rows: Sequence[Any]) -> list[Record]:
    """Rows of :data:`statements.RECORD_READ` as records: messages parsed in one pass,
    the models built without validating again what the write validated.

    The garbage collector is paused meanwhile (when it was running): a record is three
    new objects the collector tracks (the record, its dict, its message), none garbage
    while the read builds them, and its passes over them cost ~6% of building 1,000
    records here (``python -m bench --only 18``). It is enabled again however the read
    ends, and left alone when the caller had disabled it.
    """
    if not gc.isenabled():
        return _records(rows)
    gc.disable()
    try:
        return _records(rows)
    finally:
        gc.enable()


def _records(rows: Sequence[Any]) -> list[Record]:
    out = []
    message = decode.message
    message_record = decode.message_record
    # SQLite gives timestamps as text, the same text for every record of one append:
    # parsed once (0.4 µs a record here), not once a record.
    text: Any = None
    at: Any = None
    for session_id, seq, kind, created_at, uuid, payload in rows:
        if created_at != text:
            text, at = created_at, utc(created_at)
        if kind == "message":
            record = message_record(session_id, seq, at, uuid, payload)
            if record is not None:
                out.append(record)
                continue
        values = {
            "session_id": session_id,
            "seq": seq,
            "kind": kind,
            "created_at": at,
            "uuid": uuid,
        }
        if kind == "message":
            values["message"] = message(payload)
        else:
            values.update(_typed(kind, payload))
        # Validating a Record whose message is already a model costs ~2.4 µs here,
        # model_construct ~6 µs; a message's record is built unvalidated (0.4 µs).
        out.append(Record(**values))
    return out


def _typed(kind: str, payload: str) -> dict[str, Any]:
    if kind == "compaction":
        return {"compaction": decode.compaction(payload)}
    if kind == "tombstone":
        return {"tombstone": decode.tombstone(payload)}
    if kind == "prune":
        return {"prune": decode.prune(payload)}
    return {"entry": decode.parse(payload, "stored entry")}


_OPTIONAL_TEXT = ("name", "model", "cron_job_id", "system_prompt_override", "parent_id", "key")
_COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_SOURCES = frozenset(typing.get_args(Source))
_SESSION_FIELDS = frozenset(SessionInfo.model_fields)
_METRIC_FIELDS = frozenset(Metrics.model_fields)
_TURN_FIELDS = frozenset(TurnInfo.model_fields)
_PAGE_FIELDS = frozenset(SessionPage.model_fields)


def session_info(m: Any) -> SessionInfo:
    """A sessions row as a model: built as it is when every column holds exactly its
    field's type (what sessiondb writes), else validated, so that a row of another type
    is converted as validation converts it. A listing so builds no validator: in a CLI
    listing, building them and pydantic's look-up of its plugins cost ~25 ms.

    Raises:
        CorruptRecordError: a column holds what no model can (the row was not written
            by sessiondb, or was changed since).
    """
    try:
        return _session_info(m)
    except (ValidationError, ValueError, TypeError, AttributeError) as exc:
        why = first_error(exc) if isinstance(exc, ValidationError) else brief(str(exc))
        raise CorruptRecordError(f"session {brief(m['id'])}: its stored row: {why}") from None


def _session_info(m: Any) -> SessionInfo:
    count = m["message_count"]
    metrics = {n: m[n] for n in Metrics.model_fields}  # in the fields' order, as validated
    f = {
        "id": m["id"],
        "namespace": m["namespace"],
        "name": m["name"],
        "created_at": utc(m["created_at"]),
        "last_message_at": utc(m["last_message_at"]) if count else None,
        "model": m["model"],
        "message_count": count,
        "last_seq": m["last_seq"],
        "source": m["source"],
        "cron_job_id": m["cron_job_id"],
        "system_prompt_override": m["system_prompt_override"],
        "metrics": metrics,
        "metadata": jsoncodec.loads(m["metadata_json"]) if m["metadata_json"] else None,
        "parent_id": m["parent_id"],
        "fork_seq": m["fork_seq"],
        "key": m["key"],
        "turn": _turn_info(m),
    }
    exact = (
        type(f["id"]) is str
        and type(f["namespace"]) is str
        and all(f[n] is None or type(f[n]) is str for n in _OPTIONAL_TEXT)
        and type(count) is int
        and type(f["last_seq"]) is int
        and (f["fork_seq"] is None or type(f["fork_seq"]) is int)
        and type(f["source"]) is str
        and f["source"] in _SOURCES
        and (f["metadata"] is None or type(f["metadata"]) is dict)
        and all(type(metrics[n]) is int for n in _COUNTERS)
        and type(metrics["cost_total"]) is float
    )
    if not exact:
        return SessionInfo(**f)
    f["metrics"] = trusted(Metrics, metrics, _METRIC_FIELDS)
    return trusted(SessionInfo, f, _SESSION_FIELDS)


def session_page(items: list[SessionInfo], next_cursor: str | None) -> SessionPage:
    """A page of :func:`session_info` models, as it is (see there)."""
    return trusted(SessionPage, {"items": items, "next_cursor": next_cursor}, _PAGE_FIELDS)


def _turn_info(m: Any) -> TurnInfo | None:
    """The live turn of a row from a statement that joins it (``turn_*`` columns)."""
    try:
        holder = m["turn_holder"]
    except (KeyError, IndexError):  # asyncpg, sqlite3: a row without the columns
        return None
    if holder is None:
        return None
    f = {
        "holder": holder,
        "acquired_at": utc(m["turn_acquired_at"]),
        "expires_at": utc(m["turn_expires_at"]),
    }
    return trusted(TurnInfo, f, _TURN_FIELDS) if type(holder) is str else TurnInfo(**f)
