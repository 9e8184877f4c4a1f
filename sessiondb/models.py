"""The values sessiondb takes and returns.

JSON keeps the spec's camelCase wire shape (``toolCallId``, ``isError``); Python
attributes are snake_case. Every model keeps unknown fields as they came, and dumps only
the fields that were set, so a message read from a file is written back unchanged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
)
from pydantic.alias_generators import to_camel

_WIRE = ConfigDict(
    extra="allow",
    populate_by_name=True,
    alias_generator=AliasGenerator(alias=to_camel),
    ser_json_inf_nan="constants",
)


class WireModel(BaseModel):
    """A model whose JSON is the spec's wire shape; unknown fields are kept."""

    model_config = _WIRE

    def model_post_init(self, context: Any, /) -> None:
        # A literal ``type`` is part of the wire shape even when the caller let it default.
        if "type" in type(self).model_fields:
            self.model_fields_set.add("type")

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this value: camelCase, only the fields that were set."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class TextContent(WireModel):
    type: Literal["text"] = "text"
    text: str


class ToolCallContent(WireModel):
    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ThinkingContent(WireModel):
    type: Literal["thinking"] = "thinking"
    thinking: str


class ImageContent(WireModel):
    type: Literal["image"] = "image"
    data: str
    mime_type: str


class OtherContent(WireModel):
    """A content block of a type sessiondb does not model; kept exactly as it came."""

    type: str


_KNOWN_BLOCKS = {"text", "toolCall", "thinking", "image"}


def _block_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _KNOWN_BLOCKS else "other"


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
    text block.
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


RecordKind = Literal["message", "compaction", "tombstone", "entry"]


class Record(BaseModel):
    """One stored row of a session: a message, an overlay, or an imported entry.

    Exactly one of ``message``, ``compaction``, ``tombstone`` and ``entry`` is set,
    according to ``kind``. ``session_id`` is the session that wrote the record, which
    for a fork's inherited records is an ancestor.
    """

    model_config = ConfigDict(frozen=True)

    session_id: str
    seq: int
    kind: RecordKind
    created_at: datetime
    uuid: str | None = None
    message: Message | None = None
    compaction: Compaction | None = None
    tombstone: Tombstone | None = None
    entry: dict[str, Any] | None = None


Source = Literal["interactive", "cron"]


class Metrics(BaseModel):
    """Token usage totals over the session's messages."""

    model_config = ConfigDict(alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_total: float = 0.0


class SessionInfo(BaseModel):
    """A session's metadata and the head of its record stream."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, frozen=True
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


class SessionPage(BaseModel):
    """One page of a session listing; pass ``next_cursor`` back for the next page."""

    items: list[SessionInfo]
    next_cursor: str | None
