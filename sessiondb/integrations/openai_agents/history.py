"""A conversation's user turns, usage and tool calls, from its stored records: plain
functions, no I/O.

A *turn* starts at a user item (not a system or developer one) and runs to the next;
turns are numbered from 1 along the branch's whole lineage, compacted records included,
so a number stays the same after a compaction. Usage comes from the records' stored
``usage``: the usage records ``store_run_usage`` writes (the SDK's figures) and any
message that reports usage (an imported transcript's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...models import Message, Record
from ...rows import usage_cost
from .items import ITEM_FIELD, USAGE_FIELD

#: How much of a turn's text ``content`` shows (``full_content`` has all of it).
PREVIEW_CHARS = 100


@dataclass(frozen=True)
class UserTurn:
    """A user turn: its number, the seq and time of its user message, and its text."""

    number: int
    seq: int
    created_at: datetime
    text: str

    def as_dict(self) -> dict[str, Any]:
        """The shape of ``AdvancedSQLiteSession.get_conversation_turns``."""
        preview = (
            self.text if len(self.text) <= PREVIEW_CHARS else self.text[:PREVIEW_CHARS] + "..."
        )
        return {
            "turn": self.number,
            "content": preview,
            "full_content": self.text,
            "timestamp": self.created_at.isoformat(),
            "can_branch": True,
            "seq": self.seq,
        }


def is_user_turn(message: Message) -> bool:
    """Whether a message starts a turn: a user item, or a user message not added as an
    item (imported); not a system or developer item."""
    if message.role != "user":
        return False
    item = (message.model_extra or {}).get(ITEM_FIELD)
    return not isinstance(item, dict) or item.get("role", "user") == "user"


def stands_for_items(message: Message) -> bool:
    """Whether a message is an item's (not a usage record)."""
    return not isinstance((message.model_extra or {}).get(USAGE_FIELD), dict)


def numbered(records: Iterable[Record]) -> list[tuple[int, Record]]:
    """The message records with the number of the turn each belongs to (0 before the
    first turn)."""
    turn = 0
    out: list[tuple[int, Record]] = []
    for record in records:
        if record.message is None:
            continue
        if is_user_turn(record.message):
            turn += 1
        out.append((turn, record))
    return out


def user_turns(records: Iterable[Record]) -> list[UserTurn]:
    """The user turns of a branch's message records, in order."""
    return [
        UserTurn(turn, r.seq, r.created_at, r.message.text())
        for turn, r in numbered(records)
        if r.message is not None and is_user_turn(r.message)
    ]


def _request_usage(message: Message) -> dict[str, Any] | None:
    """One message's usage in the SDK's terms; ``None`` when it reports none."""
    sdk = (message.model_extra or {}).get(USAGE_FIELD)
    if isinstance(sdk, dict):
        return sdk
    usage = message.usage
    if usage is None:
        return None
    input_tokens = usage.input + usage.cache_read + usage.cache_write
    total = usage.total_tokens or input_tokens + usage.output
    return {
        "requests": 1,
        "input_tokens": input_tokens,
        "output_tokens": usage.output,
        "total_tokens": total,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens_details": {},
    }


def _empty_usage(turn: int) -> dict[str, Any]:
    return {
        "user_turn_number": turn,
        "requests": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_tokens_details": {},
        "output_tokens_details": {},
        "cost": 0.0,
    }


def turn_usage(records: Sequence[Record], *, own: str | None = None) -> list[dict[str, Any]]:
    """Usage per turn, in turn order, for the turns that report any (the shape of
    ``AdvancedSQLiteSession.get_turn_usage``, plus ``cost``: the stored
    ``usage.cost.total``). With ``own``, only the usage that session wrote counts (a
    branch's own, not what it inherits)."""
    turns: dict[int, dict[str, Any]] = {}
    for turn, record in numbered(records):
        message = record.message
        assert message is not None
        if own is not None and record.session_id != own:
            continue
        request = _request_usage(message)
        if request is None:
            continue
        total = turns.setdefault(turn, _empty_usage(turn))
        for key in ("requests", "input_tokens", "output_tokens", "total_tokens"):
            value = request.get(key, 0)
            total[key] += value if isinstance(value, int) else 0
        for key in ("input_tokens_details", "output_tokens_details"):
            details = request.get(key)
            for name, value in (details if isinstance(details, dict) else {}).items():
                if isinstance(value, int):
                    total[key][name] = total[key].get(name, 0) + value
        total["cost"] += usage_cost(message.model_dump(mode="json", by_alias=True))
    return [turns[t] for t in sorted(turns)]


def session_usage(turns: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The totals of :func:`turn_usage` rows (the shape of
    ``AdvancedSQLiteSession.get_session_usage``); ``None`` when there are none."""
    if not turns:
        return None
    totals: dict[str, Any] = {
        key: sum(t[key] for t in turns)
        for key in ("requests", "input_tokens", "output_tokens", "total_tokens")
    }
    totals["total_turns"] = len(turns)
    totals["cost"] = sum(t["cost"] for t in turns)
    return totals


def tool_usage(records: Sequence[Record]) -> list[tuple[str, int, int]]:
    """``(tool_name, calls, turn)`` per tool and turn, in turn order (the shape of
    ``AdvancedSQLiteSession.get_tool_usage``); a hosted tool's name is its item type
    (``web_search_call``, …)."""
    counts: dict[tuple[int, str], int] = {}
    for turn, record in numbered(records):
        assert record.message is not None
        for call in record.message.tool_calls():
            counts[(turn, call.name)] = counts.get((turn, call.name), 0) + 1
    return [(name, calls, turn) for (turn, name), calls in counts.items()]


__all__ = [
    "UserTurn",
    "is_user_turn",
    "numbered",
    "session_usage",
    "stands_for_items",
    "tool_usage",
    "turn_usage",
    "user_turns",
]
