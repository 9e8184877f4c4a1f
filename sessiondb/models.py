"""The values sessiondb takes and returns.

JSON keeps the spec's camelCase wire shape (``toolCallId``, ``isError``); Python
attributes are snake_case. Every model keeps unknown fields as they came, and dumps only
the fields that were set, so a message read from a file is written back unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    field_validator,
    model_serializer,
)
from pydantic.alias_generators import to_camel

from .errors import InvalidInputError, brief
from .kinds import RecordKind as RecordKind

# Every model builds its validator and serializer when first used, not at import: the
# twenty models here cost ~0.1 s to build, and a command uses two or three of them
# (start-up rule in sessiondb/cli.py).
_DEFERRED = ConfigDict(defer_build=True)

_WIRE = ConfigDict(
    defer_build=True,
    extra="allow",
    populate_by_name=True,
    alias_generator=AliasGenerator(alias=to_camel),
    ser_json_inf_nan="constants",
)


class WireModel(BaseModel):
    """A model whose JSON is the spec's wire shape; unknown fields are kept."""

    model_config = _WIRE

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this value: camelCase, only the fields that were set."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Block(WireModel):
    """A content block; its ``type`` is always part of the wire shape."""

    type: str

    @model_serializer(mode="wrap")
    def _with_type(self, handler: SerializerFunctionWrapHandler) -> Any:
        # exclude_unset would drop a ``type`` the caller let default; the wire needs it.
        data = handler(self)
        if isinstance(data, dict) and "type" not in data:
            data = {"type": self.type, **data}
        return data


class TextContent(Block):
    type: Literal["text"] = "text"
    text: str


class ToolCallContent(Block):
    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ThinkingContent(Block):
    type: Literal["thinking"] = "thinking"
    thinking: str


class ImageContent(Block):
    type: Literal["image"] = "image"
    data: str
    mime_type: str


class OtherContent(Block):
    """A content block of a type sessiondb does not model; kept exactly as it came."""

    type: str


_KNOWN_BLOCKS = {"text", "toolCall", "thinking", "image"}


def _block_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    # An unhashable ``type`` (a list) is no known block: OtherContent refuses it, typed.
    return kind if isinstance(kind, str) and kind in _KNOWN_BLOCKS else "other"


ContentBlock = Annotated[
    Annotated[TextContent, Tag("text")]
    | Annotated[ToolCallContent, Tag("toolCall")]
    | Annotated[ThinkingContent, Tag("thinking")]
    | Annotated[ImageContent, Tag("image")]
    | Annotated[OtherContent, Tag("other")],
    Discriminator(_block_tag),
]


class Usage(WireModel):
    """Token usage of one model response (pi's shape; extra fields are kept)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int | None = None
    cost: dict[str, Any] | None = None


Role = Literal["user", "assistant", "toolResult"]


class Message(WireModel):
    """One message of a conversation, in the spec's wire shape.

    ``content`` is always a list of blocks; a plain string is accepted and becomes one
    text block (and is stored so: see :func:`wire_message`).
    """

    role: Role
    content: list[ContentBlock]
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool | None = None
    uuid: str | None = None
    parent_uuid: str | None = None
    usage: Usage | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _content_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [{"type": "text", "text": value}]
        return value

    def text(self) -> str:
        """The message's text blocks joined by newlines."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextContent))

    def tool_calls(self) -> list[ToolCallContent]:
        """The tool calls this message makes (assistant messages only)."""
        return [b for b in self.content if isinstance(b, ToolCallContent)]


class Compaction(WireModel):
    """A compaction overlay: supersedes every message with ``seq < first_kept_seq``."""

    summary: str
    first_kept_seq: int
    tokens_before: int = 0
    read_files: list[str] = Field(default_factory=list)
    modified_files: list[str] = Field(default_factory=list)


class Tombstone(WireModel):
    """Soft-deletes the record ``target_seq`` of the same lineage."""

    target_seq: int
    reason: str | None = None


class Prune(WireModel):
    """A pruning overlay: the tool results ``seqs`` of the same lineage show ``marker``
    instead of their content in the context (their records keep it)."""

    seqs: list[int]
    marker: str
    tokens_freed: int = 0


class Record(BaseModel):
    """One stored row of a session: a message, an overlay, or an imported entry.

    Exactly one of ``message``, ``compaction``, ``tombstone``, ``prune`` and ``entry`` is set,
    according to ``kind``. ``session_id`` is the session that wrote the record, which
    for a fork's inherited records is an ancestor.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    session_id: str
    seq: int
    kind: RecordKind
    created_at: datetime
    uuid: str | None = None
    message: Message | None = None
    compaction: Compaction | None = None
    tombstone: Tombstone | None = None
    prune: Prune | None = None
    entry: dict[str, Any] | None = None

    def model_dump_json(self, **kwargs: Any) -> str:
        # A message read back is built when first touched, and a corrupt one raises
        # CorruptRecordError then: touched here first, so that pydantic's JSON
        # serializer does not wrap that error in its own.
        if self.message is not None:
            self.message.model_fields_set  # noqa: B018 - builds a read message
        return super().model_dump_json(**kwargs)


Source = Literal["interactive", "cron"]


class Metrics(BaseModel):
    """Token usage totals over the session's messages."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, defer_build=True
    )

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_total: float = 0.0


class TurnInfo(BaseModel):
    """Who holds a session's turn (``SessionStore.turn``), since when, and until when its
    lease runs unless renewed. Times are the database's clock."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        frozen=True,
        defer_build=True,
    )

    holder: str
    acquired_at: datetime
    expires_at: datetime


class SessionInfo(BaseModel):
    """A session's metadata and the head of its record stream."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        frozen=True,
        defer_build=True,
    )

    id: str
    namespace: str
    name: str | None
    created_at: datetime
    last_message_at: datetime | None
    model: str | None
    message_count: int
    last_seq: int
    source: Source
    cron_job_id: str | None
    system_prompt_override: str | None
    metrics: Metrics
    metadata: dict[str, Any] | None
    parent_id: str | None
    fork_seq: int | None
    #: The caller's own key for the session (:meth:`SessionStore.session_for_key`), if any.
    key: str | None = None
    #: The turn held on the session now, if any (who is working).
    turn: TurnInfo | None = None


class SessionPage(BaseModel):
    """One page of a session listing; pass ``next_cursor`` back for the next page."""

    model_config = _DEFERRED

    items: list[SessionInfo]
    next_cursor: str | None


class SearchHit(BaseModel):
    """One record that matched a search (:meth:`SessionStore.search`).

    ``snippet`` is plain text cut from the record, never escaped and with no markup;
    ``spans`` are the ``[start, end)`` offsets in it of the words the query matched.
    ``rank``: higher is better; Postgres's ``ts_rank`` of the record's own text on both
    backends (:mod:`sessiondb.search_rank` on SQLite), so another record never moves it.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    session_id: str
    seq: int
    kind: Literal["message", "compaction"]
    role: str | None  # the message's role; None for a compaction summary
    timestamp: datetime
    snippet: str
    spans: tuple[tuple[int, int], ...]
    rank: float

    def marked(self, open: str = "[", close: str = "]") -> str:
        """The snippet with each matched span between ``open`` and ``close``."""
        parts, at = [], 0
        for start, end in self.spans:
            parts += [self.snippet[at:start], open, self.snippet[start:end], close]
            at = end
        parts.append(self.snippet[at:])
        return "".join(parts)


class SearchPage(BaseModel):
    """One page of search hits, best first; pass ``next_cursor`` back for the next page."""

    model_config = _DEFERRED

    hits: list[SearchHit]
    next_cursor: str | None


class NewSession(BaseModel):
    """A session to create together with its messages (``SessionStore.import_sessions``).

    Unknown keys are refused (a misspelt ``nmae`` would otherwise be dropped in
    silence), and each message is checked here, so an error names the message.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", defer_build=True)

    name: str | None = None
    model: str | None = None
    source: Source = "interactive"
    cron_job_id: str | None = None
    system_prompt_override: str | None = None
    metadata: dict[str, Any] | None = None
    #: The caller's key for the session; unique in the namespace (none by default).
    key: str | None = None
    messages: list[Any] = Field(default_factory=list)

    @field_validator("messages")
    @classmethod
    def _wire_messages(cls, value: list[Any]) -> list[Any]:
        # ~1 µs a message (a dict check, no model), beside ~15 µs to store it.
        for index, message in enumerate(value):
            data = dict(message) if isinstance(message, Mapping) else message
            error = None if isinstance(message, Message) else wire_message_error(data)
            if error is not None:
                raise ValueError(f"message {index}: {error}")
        return value


# -- fast checks of wire-shape dicts --------------------------------------------------
#
# Validating a dict through ``Message`` costs ~10 µs here; a bulk import of 100k
# messages would spend more time in pydantic than in the database. These checks accept
# a subset of what ``Message.model_validate`` accepts (strict types, no coercion), so
# every stored payload still validates when it is read back.

_ROLES = frozenset(("user", "assistant", "toolResult"))
_BLOCK_FIELDS: dict[str, tuple[tuple[str, type, bool], ...]] = {
    # type -> (field, python type, required)
    "text": (("text", str, True),),
    "toolCall": (("id", str, True), ("name", str, True), ("arguments", dict, False)),
    "thinking": (("thinking", str, True),),
    "image": (("data", str, True), ("mimeType", str, True)),
}
_OPTIONAL_STR = ("toolCallId", "toolName", "uuid", "parentUuid")
_USAGE_INTS = ("input", "output", "cacheRead", "cacheWrite")
# Python names of fields whose wire name differs: a model given a dict reads these too.
_SNAKE_FIELDS = {
    "tool_call_id": "toolCallId",
    "tool_name": "toolName",
    "is_error": "isError",
    "parent_uuid": "parentUuid",
}
_SNAKE_USAGE = {
    "cache_read": "cacheRead",
    "cache_write": "cacheWrite",
    "total_tokens": "totalTokens",
}


def wire_message_error(data: Any) -> str | None:
    """Why ``data`` is not a wire-shape message, or ``None`` if it is."""
    if not isinstance(data, dict):
        return f"expected an object, got {type(data).__name__}"
    role = data.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        return f"role must be one of user, assistant, toolResult; got {brief(role)}"
    content = data.get("content")
    if isinstance(content, list):
        for i, block in enumerate(content):
            error = _block_error(block)
            if error:
                return f"content[{i}]: {error}"
    elif not isinstance(content, str):
        return f"content must be a list of blocks or a string, got {type(content).__name__}"
    for key in _OPTIONAL_STR:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} must be a string, got {type(value).__name__}"
    for key in _SNAKE_FIELDS.keys() & data.keys():
        # The model would read it as its camelCase field, so the message would not come
        # back as it was stored.
        return f"{key} is the field {_SNAKE_FIELDS[key]}: use that name"
    if role == "toolResult" and not data.get("toolCallId"):
        return "a toolResult message needs the toolCallId of the call it answers"
    is_error = data.get("isError")
    if is_error is not None:
        if not isinstance(is_error, bool):
            return f"isError must be a boolean, got {type(is_error).__name__}"
        if role != "toolResult":
            return f"isError belongs to toolResult messages only, not to a {role} message"
    usage = data.get("usage")
    if usage is not None:
        return _usage_error(usage)
    return None


def wire_message(
    item: Message | Mapping[str, Any], where: str = "message", *, checked: bool = False
) -> dict[str, Any]:
    """The stored form of a message: checked, with a string ``content`` made one text block.

    Everything else stays exactly as given: key order, unknown fields, unknown blocks
    (a dict whose content is already a list is returned as it is, not copied).
    Raises :class:`InvalidInputError`, prefixed with ``where``, for anything that is not a
    wire-shape message (spec §7.2). ``checked``: a dict already passed
    :func:`wire_message_error` (``NewSession`` checks its messages), so it is not checked
    twice; a ``Message`` is always checked, as it may have been changed since it was built.
    """
    already = checked and not isinstance(item, Message)
    if item.__class__ is dict:  # the usual case, before the slower checks of ABCs
        wire = item
    elif isinstance(item, Message):
        try:
            wire = item.to_wire()
        except ValueError as exc:
            # PydanticSerializationError; a plain ValueError past pydantic's ~250 levels;
            # UnicodeEncodeError for a key holding a lone surrogate.
            raise InvalidInputError(f"{where}: cannot be stored as JSON: {exc}") from None
    elif isinstance(item, Mapping):
        wire = item if isinstance(item, dict) else dict(item)
    else:
        raise InvalidInputError(f"{where}: expected a Message or a dict, got {type(item).__name__}")
    error = None if already else wire_message_error(wire)
    if error is not None:
        raise InvalidInputError(f"{where}: {error}")
    if isinstance(wire["content"], str):
        # S7.12: content is always ContentBlock[]. A new dict keeps the caller's key order.
        wire = {
            key: [{"type": "text", "text": value}] if key == "content" else value
            for key, value in wire.items()
        }
    return wire


def _block_error(block: Any) -> str | None:
    if not isinstance(block, dict):
        return f"a block must be an object, got {type(block).__name__}"
    kind = block.get("type")
    if not isinstance(kind, str):
        return "a block needs a string 'type'"
    if kind == "image" and "mime_type" in block:
        return "image block: mime_type is the field mimeType: use that name"
    for name, expected, required in _BLOCK_FIELDS.get(kind, ()):
        value = block.get(name)
        if value is None and not required and name not in block:
            continue
        if not isinstance(value, expected):
            return f"{kind} block: {name} must be {expected.__name__}, got {type(value).__name__}"
    return None


def _usage_error(usage: Any) -> str | None:
    if not isinstance(usage, dict):
        return f"usage must be an object, got {type(usage).__name__}"
    for key in _SNAKE_USAGE.keys() & usage.keys():
        return f"usage.{key} is the field usage.{_SNAKE_USAGE[key]}: use that name"
    for key in _USAGE_INTS:
        value = usage.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            return f"usage.{key} must be an integer, got {brief(value)}"
    total = usage.get("totalTokens")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
        return f"usage.totalTokens must be an integer, got {brief(total)}"
    cost = usage.get("cost")
    if cost is not None and not isinstance(cost, dict):
        return f"usage.cost must be an object, got {type(cost).__name__}"
    return None


def wire_text(data: dict[str, Any]) -> str:
    """The text blocks of a checked wire-shape message, joined by newlines."""
    content = data["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content if b.get("type") == "text")


M = TypeVar("M", bound=BaseModel)

# The slots a pydantic model keeps its state in; should a pydantic release change them,
# :func:`trusted` falls back to ``model_construct``.
_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_SAME_SLOTS = tuple(BaseModel.__slots__) == _SLOTS
# The slots' own descriptors: setting through them skips object.__setattr__'s lookup of
# the name on the class (0.37 µs a model against 0.61 µs).
_SETTERS: list[Any] = [BaseModel.__dict__[name].__set__ for name in _SLOTS] if _SAME_SLOTS else []
_DICT, _FIELDS_SET, _EXTRA, _PRIVATE = _SETTERS or [None] * 4
_new = object.__new__


def trusted(cls: type[M], values: dict[str, Any], fields_set: frozenset[str] | set[str]) -> M:
    """``cls`` holding ``values`` (every field, each of its type already: the caller
    checked them) as given, without validation; ``fields_set`` as the fields the caller
    set. ~0.4 µs, against ~2.4 µs for validation and ~4 µs for ``model_construct`` (its
    loop over the fields, for defaults and aliases). A read builds its records and
    search hits so.

    A ``frozenset`` is copied; a ``set`` is taken as it is, to be shared by every
    model built with it, which only a frozen model may do (pydantic changes the set of
    a model being assigned to; ``model_copy`` changes a copy of it): one object fewer a
    record for the collector, whose passes over a read's records cost as much as
    building them."""
    if not _SETTERS:
        return cls.model_construct(_fields_set=set(fields_set), **values)
    made = _new(cls)
    _DICT(made, values)
    _FIELDS_SET(made, fields_set if fields_set.__class__ is set else set(fields_set))
    _EXTRA(made, None)
    _PRIVATE(made, None)
    return made


# The instance dict's own descriptor (BaseModel's ``__slots__`` holds ``__dict__``): a
# model made when first used puts a property in front of it, and reaches it through this.
INSTANCE_DICT: Any = BaseModel.__dict__["__dict__"]


class MadeWhenUsed:
    """What a pydantic model whose fields are made from a stored value when first used
    needs (a message read from a row, a search hit). A subclass lists it before its model,
    keeps the stored value in a slot named ``_sessiondb_source`` and defines
    :meth:`_sessiondb_make`, which sets the fields from it (through
    :data:`INSTANCE_DICT`) and deletes the slot. Every way to the fields makes them
    first: an attribute, pydantic's own reads of ``__dict__``, a copy, a pickle."""

    __slots__ = ()

    def _sessiondb_make(self) -> None:
        """Make the fields from ``_sessiondb_source`` and delete it; nothing once made."""
        raise NotImplementedError

    def _sessiondb_dict(self) -> dict[str, Any]:
        self._sessiondb_make()
        d: dict[str, Any] = INSTANCE_DICT.__get__(self)
        return d

    def _sessiondb_set_dict(self, value: dict[str, Any]) -> None:
        # A copy, a pickle or pydantic itself sets the whole dict: it is made then.
        with contextlib.suppress(AttributeError):
            object.__delattr__(self, "_sessiondb_source")
        INSTANCE_DICT.__set__(self, value)

    # Pydantic's Python code and pydantic-core both read a model's fields through
    # ``__dict__``: this property makes them before either reads it.
    __dict__ = property(_sessiondb_dict, _sessiondb_set_dict)

    def __getattr__(self, name: str) -> Any:
        # Reached only when plain lookup fails: a field (or pydantic's own slots) of a
        # model not made yet, or a name the model does not have.
        try:
            object.__getattribute__(self, "_sessiondb_source")
        except AttributeError:
            return super().__getattr__(name)  # type: ignore[misc]
        self._sessiondb_make()
        return getattr(self, name)
