"""The cheaper first phase (open-harness): which old tool results to replace with a
marker. Planning only; the overlay that applies it needs the context query's support."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..context import PRUNED_MARKER as PRUNED_MARKER
from ..models import Message
from .tokens import Tokenizer, estimate_message_tokens, estimate_text_tokens


@dataclass(frozen=True)
class PrunePlan:
    """The seqs of the tool results to prune and the tokens that frees (estimated)."""

    seqs: tuple[int, ...]
    tokens_freed: int


def plan_pruning(
    entries: Sequence[tuple[int, Message]],
    protect_tokens: int,
    tokenizer: Tokenizer | None = None,
) -> PrunePlan:
    """Tool results outside the newest ``protect_tokens`` tokens whose content is larger
    than the marker that would replace it."""
    marker = estimate_text_tokens(PRUNED_MARKER, tokenizer)
    seen = 0
    seqs: list[int] = []
    freed = 0
    for seq, message in reversed(entries):
        tokens = estimate_message_tokens(message, tokenizer)
        seen += tokens
        if seen <= protect_tokens or message.role != "toolResult" or tokens <= marker:
            continue
        seqs.append(seq)
        freed += tokens - marker
    return PrunePlan(tuple(reversed(seqs)), freed)
