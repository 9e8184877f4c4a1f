"""Stored records as the writers take them: :class:`StoredRecord`, built from a record
model or from a row of the records table as export reads it (:data:`Row`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from .. import jsoncodec
from ..decode import parse, validated
from ..models import Compaction, Prune, Record, Tombstone


class StoredRecord:
    """A stored record as the writers need it: its wire object, no models.

    ``data`` is what the record's model would give with ``to_wire()`` (the message, the
    compaction, …, or the entry's object). Built from a row, a message is its stored
    JSON as parsed: the wire checks made it a value the model reads back unchanged
    (``tests/behaviour/test_read_back.py``), so export skips the model (about half its time).
    A row's payload is parsed, and its timestamp converted, only when a writer asks.
    """

    __slots__ = ("_at", "_data", "_text", "kind", "seq", "session_id", "uuid")

    def __init__(
        self, session_id: str, seq: int, kind: str, created_at: datetime | str,
        uuid: str | None, data: dict[str, Any] | None = None, text: str | bytes | None = None,
    ) -> None:  # fmt: skip
        self.session_id, self.seq, self.kind, self.uuid = session_id, seq, kind, uuid
        self._at, self._data, self._text = created_at, data, text

    @property
    def created_at(self) -> datetime:
        at = self._at
        if not isinstance(at, datetime) or at.tzinfo is not UTC:
            at = self._at = _utc(at)
        return at

    @property
    def text(self) -> str | bytes | None:
        """The row's payload text as stored, or its UTF-8 bytes as export reads it
        (``None`` for a record built from a model)."""
        return self._text

    @property
    def data(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            text = self._text
            assert text is not None
            if self.kind == "message":
                parsed: dict[str, Any] = jsoncodec.loads(text)
                self._data = parsed
                return parsed
            where = f"session {self.session_id} record #{self.seq} ({self.kind})"
            data = parse(text, where)
            model = _OVERLAYS.get(self.kind)
            if model is not None:
                # Overlays are few; their model says what a read gives (defaults, coercions):
                # a row that is not one (a targetSeq of 2.5, written by SQL) is refused typed.
                data = validated(model, data, where).to_wire()
            self._data = data
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredRecord):
            return NotImplemented
        mine = (self.session_id, self.seq, self.kind, self.created_at, self.uuid, self.data)
        return mine == (
            other.session_id, other.seq, other.kind, other.created_at, other.uuid, other.data
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoredRecord({self.session_id!r}, {self.seq}, {self.kind!r})"

    @classmethod
    def of(cls, record: Record) -> StoredRecord:
        """The stored form of a :class:`~sessiondb.models.Record`."""
        typed = record.message or record.compaction or record.tombstone or record.prune
        data = typed.to_wire() if typed is not None else (record.entry or {})
        return cls(record.session_id, record.seq, record.kind, record.created_at, record.uuid, data)

    @classmethod
    def from_row(
        cls, session_id: str, seq: int, kind: str, created_at: datetime | str, uuid: str | None,
        payload: str,
    ) -> StoredRecord:  # fmt: skip
        """A row of the records table (``created_at`` as the driver gives it)."""
        return cls(session_id, seq, kind, created_at, uuid, None, payload)


def _utc(value: datetime | str) -> datetime:
    """A timestamp column's value as aware UTC (SQLite gives text; see ``rows.utc``)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_OVERLAYS: dict[str, type[Compaction] | type[Tombstone] | type[Prune]] = {
    "compaction": Compaction,
    "tombstone": Tombstone,
    "prune": Prune,
}


# A row of the records table as export reads it (``statements.RECORD_READ``).
Row = tuple[str, int, str, datetime | str, str | None, str | bytes]


def stored_records(rows: Iterable[Row]) -> Iterator[StoredRecord]:
    """Export's rows as :class:`StoredRecord` values."""
    for session_id, seq, kind, created_at, uuid, text in rows:
        yield StoredRecord(session_id, seq, kind, created_at, uuid, None, text)
