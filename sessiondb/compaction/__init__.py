"""Compaction: turn a long session into a summary plus its recent messages.

The planning (token estimates, cut point, file lists, prompts, serialisation) is plain
functions over plain values; :mod:`.engine` runs it against a store.
"""

from .breaker import CircuitBreaker
from .cut import CutPoint, find_cut_point, valid_cut_indexes
from .engine import (
    AutoCompactOutcome,
    CompactionEvent,
    CompactionResult,
    ContextSnapshot,
    ContextTokens,
    breaker_for,
    compact,
    context_tokens,
    maybe_compact,
    measure_context,
    plan,
    read_context,
)
from .files import FileOps, extract_file_ops, format_file_ops, merge_file_ops
from .plan import CompactionPlan, plan_compaction
from .prompts import SYSTEM_PROMPT, build_prompt
from .protocol import CompactionStore
from .prune import PRUNED_MARKER, PrunePlan, plan_pruning
from .serialize import serialize_messages
from .settings import CompactionSettings, should_compact
from .summarizers import Summarizer, offline_summarizer
from .tokens import (
    Tokenizer,
    context_tokens_of,
    estimate_message_tokens,
    estimate_tokens,
    usage_tokens,
)

__all__ = [
    "PRUNED_MARKER",
    "SYSTEM_PROMPT",
    "AutoCompactOutcome",
    "CircuitBreaker",
    "CompactionEvent",
    "CompactionPlan",
    "CompactionResult",
    "CompactionSettings",
    "CompactionStore",
    "ContextSnapshot",
    "ContextTokens",
    "CutPoint",
    "FileOps",
    "PrunePlan",
    "Summarizer",
    "Tokenizer",
    "breaker_for",
    "build_prompt",
    "compact",
    "context_tokens",
    "context_tokens_of",
    "estimate_message_tokens",
    "estimate_tokens",
    "extract_file_ops",
    "find_cut_point",
    "format_file_ops",
    "maybe_compact",
    "measure_context",
    "merge_file_ops",
    "offline_summarizer",
    "plan",
    "plan_compaction",
    "plan_pruning",
    "read_context",
    "serialize_messages",
    "should_compact",
    "usage_tokens",
    "valid_cut_indexes",
]
