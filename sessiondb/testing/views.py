"""What the conformance machine compares after every step, in one shape for both sides:
the model's rows (:class:`ModelRecord`, :class:`ModelSession`) and a store's objects
(:func:`record_view`, :func:`info_view`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..models import Record, SessionInfo


class Tokens(NamedTuple):
    """A head's token totals, by the names of a message's ``usage``."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


@dataclass(frozen=True)
class ModelRecord:
    """One record as the model keeps it: ``payload`` is the wire-shape JSON object
    (a message as stored, a compaction's or a tombstone's fields in camelCase)."""

    session_id: str
    seq: int
    kind: str
    payload: dict[str, Any]
    uuid: str | None = None

    @property
    def role(self) -> str | None:
        return self.payload["role"] if self.kind == "message" else None

    @property
    def call_ids(self) -> set[str]:
        """Ids of the tool calls an assistant message makes."""
        if self.role != "assistant":
            return set()
        return {
            b["id"]
            for b in self.payload["content"]
            if isinstance(b, dict) and b.get("type") == "toolCall"
        }

    def view(self) -> tuple[str, int, str, str | None, dict[str, Any]]:
        """What a store's record must equal: ``(session_id, seq, kind, uuid, payload)``."""
        return (self.session_id, self.seq, self.kind, self.uuid, self.payload)


@dataclass
class ModelSession:
    """A session's row: metadata, head and counters, and its own records."""

    id: str
    name: str | None = None
    model: str | None = None
    source: str = "interactive"
    cron_job_id: str | None = None
    system_prompt_override: str | None = None
    metadata: dict[str, Any] | None = None
    parent_id: str | None = None
    fork_seq: int | None = None
    key: str | None = None
    last_seq: int = 0
    message_count: int = 0
    tokens: Tokens = field(default_factory=Tokens)
    cost_total: float = 0.0
    own: list[ModelRecord] = field(default_factory=list)

    def info(self) -> dict[str, Any]:
        """What a store's :class:`SessionInfo` must agree with (timestamps aside, except
        that ``last_message_at`` is set exactly when the session has messages)."""
        return {
            "id": self.id,
            "name": self.name,
            "model": self.model,
            "source": self.source,
            "cron_job_id": self.cron_job_id,
            "system_prompt_override": self.system_prompt_override,
            "metadata": self.metadata,
            "parent_id": self.parent_id,
            "fork_seq": self.fork_seq,
            "key": self.key,
            "last_seq": self.last_seq,
            "message_count": self.message_count,
            "has_last_message_at": self.message_count > 0,
            "metrics": {
                "input_tokens": self.tokens.input,
                "output_tokens": self.tokens.output,
                "cache_read_tokens": self.tokens.cache_read,
                "cache_write_tokens": self.tokens.cache_write,
                "cost_total": self.cost_total,
            },
        }


def info_view(info: SessionInfo) -> dict[str, Any]:
    """A store's session in the shape of :meth:`ModelSession.info`."""
    return {
        "id": info.id,
        "name": info.name,
        "model": info.model,
        "source": info.source,
        "cron_job_id": info.cron_job_id,
        "system_prompt_override": info.system_prompt_override,
        "metadata": info.metadata,
        "parent_id": info.parent_id,
        "fork_seq": info.fork_seq,
        "key": info.key,
        "last_seq": info.last_seq,
        "message_count": info.message_count,
        "has_last_message_at": info.last_message_at is not None,
        "metrics": info.metrics.model_dump(),
    }


def record_view(record: Record) -> tuple[str, int, str, str | None, dict[str, Any]]:
    """A store's record in the shape of :meth:`ModelRecord.view`."""
    typed = record.message or record.compaction or record.tombstone or record.prune
    payload = typed.to_wire() if typed is not None else dict(record.entry or {})
    return (record.session_id, record.seq, record.kind, record.uuid, payload)
