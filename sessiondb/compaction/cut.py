"""Where to cut a context: a pure function over its messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..models import Message
from .tokens import Tokenizer, estimate_message_tokens


@dataclass(frozen=True)
class CutPoint:
    """Where a context is cut, as indexes into the messages given.

    ``first_kept_index`` is the first message kept; 0 means there is nothing to
    summarise. When the cut falls inside a turn, ``turn_start_index`` is the index of the
    turn's user message: messages before it are the history to summarise, and the turn's
    prefix ``[turn_start_index, first_kept_index)`` is summarised on its own.
    """

    first_kept_index: int
    turn_start_index: int | None = None

    @property
    def split_turn(self) -> bool:
        return self.turn_start_index is not None

    @property
    def history_end(self) -> int:
        """End (exclusive) of the messages summarised as history."""
        return self.first_kept_index if self.turn_start_index is None else self.turn_start_index


def valid_cut_indexes(messages: Sequence[Message]) -> list[int]:
    """Indexes ``i`` at which the context may be cut (``messages[i:]`` kept): user and
    assistant messages, and never where a tool call before ``i`` has its result at or
    after ``i``. Index 0 is always valid (nothing cut)."""
    n = len(messages)
    call_index: dict[str, int] = {}
    # blocked[i] > 0: some tool call before i has a result at or after i.
    delta = [0] * (n + 1)
    for i, message in enumerate(messages):
        if message.role == "assistant":
            for call in message.tool_calls():
                call_index.setdefault(call.id, i)
        elif message.role == "toolResult" and message.tool_call_id is not None:
            start = call_index.get(message.tool_call_id)
            if start is not None and start < i:
                delta[start + 1] += 1
                delta[i + 1] -= 1
    out = [0]
    blocked = 0
    for i in range(n):
        blocked += delta[i]
        if i > 0 and blocked == 0 and messages[i].role in ("user", "assistant"):
            out.append(i)
    return out


def find_cut_point(
    messages: Sequence[Message],
    keep_recent_tokens: int,
    tokenizer: Tokenizer | None = None,
) -> CutPoint:
    """Walk back from the newest message, adding up estimated tokens, until
    ``keep_recent_tokens`` are kept; cut at the nearest valid boundary at or after that
    message (else the nearest one before it).

    A cut at an assistant message falls inside a turn: the turn's start (its user
    message) is reported so that its prefix can be summarised separately.
    """
    n = len(messages)
    target: int | None = None
    kept = 0
    for i in range(n - 1, -1, -1):
        kept += estimate_message_tokens(messages[i], tokenizer)
        if kept >= keep_recent_tokens:
            target = i
            break
    if target is None:
        return CutPoint(0)
    valid = valid_cut_indexes(messages)
    at_or_after = [i for i in valid if i >= target]
    # Only tool results after the target (one call with many large results): cutting at
    # the call keeps more than asked but still frees the history before it.
    cut = at_or_after[0] if at_or_after else valid[-1]
    if cut == 0 or messages[cut].role == "user":
        return CutPoint(cut)
    for j in range(cut - 1, -1, -1):
        if messages[j].role == "user":
            return CutPoint(cut, turn_start_index=j)
    return CutPoint(cut)
