"""Planning a compaction: a pure function from the context's messages to what is
summarised, what is kept and which files are carried."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..context import summary_message
from ..models import Compaction, Message
from .cut import find_cut_point
from .files import FileOps, extract_file_ops, merge_file_ops, strip_file_ops
from .settings import CompactionSettings
from .tokens import Tokenizer, estimate_message_tokens, estimate_tokens


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will do.

    Attributes:
        first_kept_seq: the first message kept as it is.
        history: the messages summarised as history (before the split turn, if any).
        turn_prefix: the first part of a split turn, summarised on its own; empty when
            the cut falls at a user message.
        previous_summary: the previous compaction's summary without its file blocks;
            ``None`` when there is none (then the initial prompt is used).
        file_ops: cumulative files read and modified, to append and store.
        tokens_before: estimated tokens of the context now (summary included).
        summarized_tokens: estimated tokens of the messages being summarised.
        kept_tokens: estimated tokens of the messages kept.
    """

    first_kept_seq: int
    history: tuple[Message, ...]
    turn_prefix: tuple[Message, ...]
    previous_summary: str | None
    file_ops: FileOps
    tokens_before: int
    summarized_tokens: int
    kept_tokens: int

    @property
    def split_turn(self) -> bool:
        return bool(self.turn_prefix)


def plan_compaction(
    entries: Sequence[tuple[int, Message]],
    previous: Compaction | None,
    settings: CompactionSettings,
    tokenizer: Tokenizer | None = None,
) -> CompactionPlan | None:
    """Plan a compaction of a context, or ``None`` when nothing can be summarised (it
    all fits in ``keep_recent_tokens``, or no valid cut frees anything).

    Args:
        entries: the context's messages with their seqs, in order (the messages from
            the previous compaction's ``first_kept_seq`` on, without its summary).
        previous: the latest compaction in force, if any.
    """
    messages = [m for _, m in entries]
    cut = find_cut_point(messages, settings.keep_recent_tokens, tokenizer)
    if cut.first_kept_index == 0:
        return None
    history = tuple(messages[: cut.history_end])
    prefix = tuple(messages[cut.history_end : cut.first_kept_index])
    summarised = messages[: cut.first_kept_index]
    read, modified = extract_file_ops(summarised)
    ops = merge_file_ops(
        read,
        modified,
        previous.read_files if previous else (),
        previous.modified_files if previous else (),
    )
    summary_tokens = (
        estimate_message_tokens(summary_message(previous), tokenizer) if previous else 0
    )
    summarized = estimate_tokens(summarised, tokenizer)
    kept = estimate_tokens(messages[cut.first_kept_index :], tokenizer)
    return CompactionPlan(
        first_kept_seq=entries[cut.first_kept_index][0],
        history=history,
        turn_prefix=prefix,
        previous_summary=strip_file_ops(previous.summary) if previous else None,
        file_ops=ops,
        tokens_before=summary_tokens + summarized + kept,
        summarized_tokens=summarized,
        kept_tokens=kept,
    )
