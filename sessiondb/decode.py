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

A message's text is returned unread as a :class:`StoredMessage`, which builds itself
(by the path above) when first touched: a read of 200 messages costs what fetching their
texts costs, and a caller that uses a message pays its validation then. A text that no
validation accepts raises :class:`~sessiondb.errors.CorruptRecordError` at that first
touch, and the message is never seen half-built. (Checking each text's shape at read,
with msgspec's typed decode below, cost ~0.6 µs a message: ~120 µs of a 200-message
read whose SELECT takes ~100 µs on SQLite; a check of the top level alone, the content
left as ``msgspec.Raw``, cost two thirds of that, and one decode of the texts joined into
an array as much as 200 decodes.) The shape
check stays for :meth:`StoredMessage.to_wire`, which hands on the parsed text of a
message not yet built only when its text has the shape sessiondb writes.

A message's :class:`~sessiondb.models.Record` is built without validating it again
(:func:`message_record`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

import msgspec
from pydantic import BaseModel, ValidationError

from . import jsoncodec
from .errors import CorruptRecordError, brief
from .models import (
    INSTANCE_DICT,
    Compaction,
    MadeWhenUsed,
    Message,
    Prune,
    Record,
    Tombstone,
    trusted,
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
    """The :class:`Message` of a stored message payload: a :class:`StoredMessage` built
    when first touched for a text, else (a value of another type, which only a SQLite
    column changed by hand holds) the validated model.

    Raises:
        CorruptRecordError: not a text, and not a message. A text that is not a message
            raises it where the message is first touched.
    """
    if payload.__class__ is str:
        made = _new_stored(StoredMessage)
        _set_payload(made, payload)
        return made
    return _decoded(Message, payload, where)


def context_messages(payloads: Sequence[str], responses: bool = True) -> tuple[list[Message], bool]:
    """:func:`message` of each payload, and whether one may be part of a split response
    (``context.response_groups``): the name ``"responseId"`` anywhere in its text (one
    search of the texts joined: ~8 µs for 200 messages here, against ~25 µs for a
    search of each); none when ``responses`` is false (the responses index has none
    of them: ``ContextRows.responses``).

    Raises:
        CorruptRecordError: a payload is not a text, and not a message. A text that is
            not a message raises it where the message is first touched.
    """
    # The read's hot loop: message() written out, with its names bound once.
    out: list[Message] = []
    append = out.append
    texts = True
    for payload in payloads:
        if payload.__class__ is str:
            made = _new_stored(StoredMessage)
            _set_payload(made, payload)
            append(made)
        else:
            append(_decoded(Message, payload, "stored message"))
            texts = False
    if not responses:
        return out, False
    if not texts:
        payloads = [p for p in payloads if p.__class__ is str]
    return out, _RESPONSE_NAME in "".join(payloads)


_RESPONSE_NAME = '"responseId"'


class _Head(msgspec.Struct, gc=False):
    """The fields of a stored message that place it in a split response (any type: the
    caller decides what a value means, as it did of the parsed object)."""

    role: Any = None
    responseId: Any = None  # the wire's name


_HEAD = msgspec.json.Decoder(_Head)


def response_heads(payloads: Sequence[str]) -> list[tuple[Any, str | None]]:
    """``(role, responseId)`` of each stored message text (the id ``None`` unless a
    string), the two top-level fields read without parsing the rest: ~0.6 µs a 1.2 kB
    Claude Code message here, against ~2 µs to parse it whole. msgspec reads JSON as
    the parsers do (the last of a repeated key counts); a text it refuses is parsed.

    Raises:
        CorruptRecordError: a text is not a JSON object.
    """
    out: list[tuple[Any, str | None]] = []
    append = out.append
    for payload in payloads:
        try:
            head = _HEAD.decode(payload)
            role, response = head.role, head.responseId
        except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
            # the exact path's text, a lone surrogate, too deep for msgspec, no object
            value = parse(payload, "stored message")
            if not isinstance(value, dict):
                raise CorruptRecordError(
                    f"stored message: the payload is not a JSON object: {brief(payload)}"
                ) from None
            role, response = value.get("role"), value.get("responseId")
        append((role, response if response.__class__ is str else None))
    return out


# What the shape check raises for a text it leaves to the validation.
_NOT_SHAPE = (msgspec.DecodeError, RecursionError, ValueError, TypeError)


# -- the shape check -----------------------------------------------------------------
#
# Every message sessiondb writes has this shape; the check accepts a subset of what
# Message's validation accepts (never more), so a text that passes it builds later. Where
# the validation is lax (an int from "5", a block of a type sessiondb does not model, a
# field by its Python name in place of its camelCase one), the check refuses, and the
# validation decides now. A key the shape does not name is skipped (validated as JSON):
# the models keep unknown fields, whatever they hold. A field under its Python name, which
# the validation also reads (``populate_by_name``), is refused (``UnsetType``: no value
# passes): the validation decides. So every message the check takes is under its wire
# (camelCase) names, as sessiondb writes them, and its stored text is its ``to_wire()``,
# which :meth:`StoredMessage.to_wire` hands on.
# The structs live for the check only, and hold no cycle: ``gc=False`` keeps them from
# the collector, whose passes over a read's allocations cost as much as the check.


class _Text(msgspec.Struct, gc=False, tag_field="type", tag="text"):
    text: str


class _ToolCall(msgspec.Struct, gc=False, tag_field="type", tag="toolCall"):
    id: str
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class _Thinking(msgspec.Struct, gc=False, tag_field="type", tag="thinking"):
    thinking: str


class _Image(msgspec.Struct, gc=False, tag_field="type", tag="image"):
    data: str
    mimeType: str
    mime_type: msgspec.UnsetType = msgspec.UNSET


class _Usage(msgspec.Struct, gc=False):
    input: int = 0
    output: int = 0
    cacheRead: int = 0
    cacheWrite: int = 0
    totalTokens: int | None = None
    cost: dict[str, Any] | None = None
    cache_read: msgspec.UnsetType = msgspec.UNSET
    cache_write: msgspec.UnsetType = msgspec.UNSET
    total_tokens: msgspec.UnsetType = msgspec.UNSET


class _Message(msgspec.Struct, gc=False):
    role: Literal["user", "assistant", "toolResult"]
    content: list[_Text | _ToolCall | _Thinking | _Image]
    toolCallId: str | None = None
    toolName: str | None = None
    isError: bool | None = None
    uuid: str | None = None
    parentUuid: str | None = None
    usage: _Usage | None = None
    tool_call_id: msgspec.UnsetType = msgspec.UNSET
    tool_name: msgspec.UnsetType = msgspec.UNSET
    is_error: msgspec.UnsetType = msgspec.UNSET
    parent_uuid: msgspec.UnsetType = msgspec.UNSET


#: The check of a stored message's shape (typed decode; the value is dropped).
_SHAPE = msgspec.json.Decoder(_Message)

# -- the message built when first used -------------------------------------------------

_set = object.__setattr__


class StoredMessage(MadeWhenUsed, Message):
    """A :class:`~sessiondb.models.Message` read from a row, built from its stored text
    when first touched: any field, a method that reads one (``text()``), ``model_dump``,
    ``==``, ``repr``, ``to_wire``, a copy or a pickle builds it (once), as
    ``Message.model_validate_json`` builds it. It is a ``Message`` in every way a caller
    can see, except ``type(m) is Message``; it compares equal to the ``Message`` it
    stands for.

    A text that is not a message (a row sessiondb did not write, or changed since) raises
    :class:`~sessiondb.errors.CorruptRecordError` at that first touch, and at every touch
    after it: the message is never seen half-built.
    """

    __slots__ = ("_sessiondb_source",)

    def _sessiondb_make(self) -> None:
        try:
            payload = _get_payload(self)
        except AttributeError:
            return  # built already
        built = _decoded(Message, payload, "stored message")
        INSTANCE_DICT.__set__(self, built.__dict__)
        _set(self, "__pydantic_fields_set__", built.__pydantic_fields_set__)
        _set(self, "__pydantic_extra__", built.__pydantic_extra__)
        _set(self, "__pydantic_private__", None)
        try:  # noqa: SIM105 - contextlib.suppress costs a build ~0.3 µs more
            _del_payload(self)
        except AttributeError:  # pragma: no cover - another thread built it meanwhile
            pass

    def __eq__(self, other: object) -> bool:
        if type(other) is Message or type(other) is StoredMessage:
            return (
                self.__dict__ == other.__dict__
                and self.__pydantic_extra__ == other.__pydantic_extra__
                and getattr(other, "__pydantic_private__", None) is None
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def model_dump_json(self, **kwargs: Any) -> str:
        # Built first: pydantic's JSON serializer would wrap the CorruptRecordError of a
        # build in its own PydanticSerializationError.
        self._sessiondb_make()
        return super().model_dump_json(**kwargs)

    def __repr_name__(self) -> str:
        return "Message"

    def to_wire(self) -> dict[str, Any]:
        """As :meth:`Message.to_wire`; a message not built yet whose text has the shape
        sessiondb writes (:data:`_SHAPE`, ~0.6 µs) hands on its parsed text, which is
        that object (the check takes it under its wire names only), keys in the stored
        order: ~1.5 µs, against ~7 µs to build the message and dump it. Any other text
        builds the message (or raises :class:`~sessiondb.errors.CorruptRecordError`)."""
        try:
            payload = _get_payload(self)
        except AttributeError:
            return super().to_wire()
        if payload[:1] not in _EXACT_MARKS:
            try:
                _SHAPE.decode(payload)
            except _NOT_SHAPE:
                pass
            else:
                wire: dict[str, Any] = jsoncodec.loads(payload)
                return wire
        return super().to_wire()


_PAYLOAD: Any = StoredMessage.__dict__["_sessiondb_source"]
_get_payload = _PAYLOAD.__get__
_set_payload = _PAYLOAD.__set__
_del_payload = _PAYLOAD.__delete__
_new_stored = object.__new__


def messages(payloads: Iterable[str]) -> list[Message]:
    """:func:`message` of each payload, in order."""
    return [message(p) for p in payloads]


# Shared by every message record a read builds (Record is frozen: models.trusted).
_MESSAGE_RECORD_SET = {"session_id", "seq", "kind", "created_at", "uuid", "message"}


def message_record(
    session_id: Any, seq: Any, created_at: datetime, uuid: Any, payload: str
) -> Record | None:
    """The :class:`Record` of a stored message row, its message as :func:`message`
    reads it; ``None`` if a column is not of the type sessiondb writes there (a row of
    SQLite, whose columns take any value), which ``Record``'s validation then judges.

    The record is built as ``Record(session_id=…, seq=…, kind="message", created_at=…,
    uuid=…, message=…)`` builds it, without validating again what is checked here
    (``created_at`` is the caller's: an aware datetime; :func:`models.trusted`).

    Raises:
        CorruptRecordError: the payload is not JSON, or not a message.
    """
    if (
        session_id.__class__ is not str
        or seq.__class__ is not int
        or (uuid is not None and uuid.__class__ is not str)
    ):
        return None
    # message() written out: one call a record fewer (~0.15 µs of a record's ~2.7).
    if payload.__class__ is str:
        built: Message = _new_stored(StoredMessage)
        _set_payload(built, payload)
    else:
        built = _decoded(Message, payload, "stored message")
    values = {
        "session_id": session_id,
        "seq": seq,
        "kind": "message",
        "created_at": created_at,
        "uuid": uuid,
        "message": built,
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
