"""Stored payload text to models: the read path's decoder.

Functions from a stored payload's text to its model, and nothing else: a layer that
transforms the stored text (decryption) or observes reads goes in front of them.

A message's text goes straight to pydantic-core's JSON validation
(``Message.model_validate_json``): 3.9 µs a message of the bench's shape here, against
4.5 µs for ``orjson.loads`` then ``model_validate``, and 5.8 µs for
``model_construct`` of the nested models (it walks them in Python; so did a
construction path planned once per object shape, at 6.5 µs). Text that the JSON
validation refuses, or that took :mod:`jsoncodec`'s exact path (a lone surrogate, an
integer over 64 bits), is read as before: the exact parser, then ``model_validate``.
So every payload reads as it read before, and one that no validation accepts (a row
not written by sessiondb, or changed since) is refused with
:class:`~sessiondb.errors.CorruptRecordError`, never returned half-built.

A message built on first use instead (its value parsed and checked now, the model built
when touched) made ``context()`` itself 1.8 times faster, but a caller that then uses
each message (``to_wire()``, ``text()``) 1.3 to 1.4 times slower (200 messages on
SQLite: context plus ``to_wire`` of each 2.17 ms against 1.65 ms), and every dump of a
message 1.3 µs dearer: reads are for using the messages, so they are built now.
A message's :class:`~sessiondb.models.Record` is built without validating it again
(:func:`message_record`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from . import jsoncodec
from .errors import CorruptRecordError, brief
from .models import Compaction, Message, Prune, Record, Tombstone, trusted
from .validation import first_error

M = TypeVar("M", bound=BaseModel)

# How a text that took jsoncodec's exact path begins (``jsoncodec.is_exact_path``).
_EXACT_MARKS = (" ", b" ")


def parse(payload: str | bytes, where: str = "stored record") -> Any:
    """A stored payload's JSON value.

    Raises:
        CorruptRecordError: the text is not JSON.
    """
    try:
        return jsoncodec.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise CorruptRecordError(
            f"{where}: the payload is not JSON ({exc}): {brief(payload)}"
        ) from None


def validated(cls: type[M], data: Any, where: str) -> M:
    """``cls`` of a parsed payload, as ``cls.model_validate`` builds it.

    Raises:
        CorruptRecordError: ``data`` is not a ``cls``.
    """
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise CorruptRecordError(f"{where}: {first_error(exc)}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # pragma: no cover - limits
        raise CorruptRecordError(f"{where}: {exc}") from None


def _decoded(cls: type[M], payload: str | bytes, where: str) -> M:
    if payload[:1] not in _EXACT_MARKS:
        try:
            return cls.model_validate_json(payload)
        except (ValueError, TypeError):  # ValidationError; the exact path says why
            pass
    return validated(cls, parse(payload, where), where)


def message(payload: str | bytes, where: str = "stored message") -> Message:
    """The :class:`Message` of a stored message payload.

    Raises:
        CorruptRecordError: the text is not JSON, or not a message.
    """
    return _decoded(Message, payload, where)


def messages(payloads: Iterable[str]) -> list[Message]:
    """:func:`message` of each payload, in order."""
    return [message(p) for p in payloads]


def message_record(
    session_id: Any, seq: Any, created_at: datetime, uuid: Any, payload: str
) -> Record | None:
    """The :class:`Record` of a stored message row, its message as :func:`message`
    reads it; ``None`` if a column is not of the type sessiondb writes there (a row of
    SQLite, whose columns take any value), which ``Record``'s validation then judges.

    Raises:
        CorruptRecordError: the payload is not JSON, or not a message.
    """
    if (
        session_id.__class__ is not str
        or seq.__class__ is not int
        or (uuid is not None and uuid.__class__ is not str)
    ):
        return None
    return _message_record(session_id, seq, created_at, uuid, message(payload))


_MESSAGE_RECORD_SET = frozenset(("session_id", "seq", "kind", "created_at", "uuid", "message"))


def _message_record(
    session_id: str, seq: int, created_at: datetime, uuid: str | None, message: Message
) -> Record:
    """The :class:`Record` of a stored message, as ``Record(session_id=…, seq=…,
    kind="message", created_at=…, uuid=…, message=…)`` builds it, without validating
    again what the caller has checked: ``session_id`` a str, ``seq`` an int,
    ``created_at`` an aware datetime, ``uuid`` a str or None (:func:`models.trusted`)."""
    values = {
        "session_id": session_id,
        "seq": seq,
        "kind": "message",
        "created_at": created_at,
        "uuid": uuid,
        "message": message,
        "compaction": None,
        "tombstone": None,
        "prune": None,
        "entry": None,
    }
    return trusted(Record, values, _MESSAGE_RECORD_SET)


def compaction(payload: str | bytes, where: str = "stored compaction") -> Compaction:
    """The :class:`Compaction` of a stored compaction payload.

    Raises:
        CorruptRecordError: the text is not JSON, or not a compaction.
    """
    return _decoded(Compaction, payload, where)


def tombstone(payload: str | bytes, where: str = "stored tombstone") -> Tombstone:
    """The :class:`Tombstone` of a stored tombstone payload.

    Raises:
        CorruptRecordError: the text is not JSON, or not a tombstone.
    """
    return _decoded(Tombstone, payload, where)


def prune(payload: str | bytes, where: str = "stored prune") -> Prune:
    """The :class:`Prune` of a stored prune payload.

    Raises:
        CorruptRecordError: the text is not JSON, or not a prune.
    """
    return _decoded(Prune, payload, where)
