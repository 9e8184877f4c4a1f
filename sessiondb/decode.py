"""Stored payload text to models: the read path's decoder.

Functions from a stored payload's text to its model, and nothing else: a layer that
transforms the stored text (decryption) or observes reads goes in front of them.

A message is parsed (orjson, 0.7 µs a message of the bench's shape here) and its value
checked now, by the check it passed when written (0.5 µs for the usual shape), and the
model is built from that value on first use (:func:`~sessiondb.models.stored_message`):
1.8 µs a message in all, against 3.2 µs for pydantic-core's JSON validation
(``Message.model_validate_json``), the fastest eager build measured (``model_construct``
of the nested models: 5.8 µs; a construction planned once per object shape: 6.5 µs; a
read-only validator without the content's Python discriminator and string
conversion: 2.8 µs). A value the check refuses is validated now, as reads did before:
read if validation accepts it, refused with
:class:`~sessiondb.errors.CorruptRecordError` if not, never returned half-built. Text
that took :mod:`jsoncodec`'s exact path (a lone surrogate, an integer over 64 bits) is
read by the exact parser. Overlays (compactions, tombstones, prunes: few a read) are
validated by pydantic-core's JSON validation.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

from orjson import loads as _orjson_loads
from pydantic import BaseModel, ValidationError

from . import jsoncodec
from .errors import CorruptRecordError, brief
from .models import (
    Compaction,
    Message,
    Prune,
    Record,
    Tombstone,
    plain_stored_message,
    stored_message,
    wire_message_error,
)
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
    """The :class:`Message` of a stored message payload, built on first use
    (:func:`~sessiondb.models.stored_message`).

    The text is parsed and its value checked now, by the check every message passed
    when it was written (:func:`~sessiondb.models.wire_message_error`); the model is
    built from that value when first used. A value the check refuses (not written by
    sessiondb, or by a release that stored what it no longer does) is validated now, as
    before: read if validation accepts it, refused if not.

    Raises:
        CorruptRecordError: the text is not JSON, or not a message.
    """
    try:  # jsoncodec.loads, without its calls
        data = _orjson_loads(payload) if payload[:1] not in _EXACT_MARKS else None
    except ValueError:
        data = None
    if data is None:
        data = parse(payload, where)
    if data.__class__ is dict and (
        plain_stored_message(data)
        # a string content is made a block by validation
        or (not wire_message_error(data) and data["content"].__class__ is list)
    ):
        return stored_message(data, where)
    return validated(Message, data, where)


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


_RECORD_SLOTS = (
    BaseModel.__dict__["__dict__"].__set__,
    BaseModel.__dict__["__pydantic_fields_set__"].__set__,
    BaseModel.__dict__["__pydantic_extra__"].__set__,
    BaseModel.__dict__["__pydantic_private__"].__set__,
)
_MESSAGE_RECORD_SET = frozenset(("session_id", "seq", "kind", "created_at", "uuid", "message"))


def _message_record(
    session_id: str, seq: int, created_at: datetime, uuid: str | None, message: Message
) -> Record:
    """The :class:`Record` of a stored message, as ``Record(session_id=…, seq=…,
    kind="message", created_at=…, uuid=…, message=…)`` builds it, without validating
    again what the caller has checked: ``session_id`` a str, ``seq`` an int,
    ``created_at`` an aware datetime, ``uuid`` a str or None. 0.4 µs, against 2.4 µs
    for the validation."""
    record = object.__new__(Record)
    set_dict, set_fields, set_extra, set_private = _RECORD_SLOTS
    set_dict(
        record,
        {
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
        },
    )
    set_fields(record, set(_MESSAGE_RECORD_SET))
    set_extra(record, None)
    set_private(record, None)
    return record


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
