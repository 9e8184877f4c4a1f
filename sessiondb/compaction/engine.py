"""Compaction against a store: read the context, plan, summarise with no transaction
open, append the overlay. Auto-compaction with a circuit breaker, and the context's
token figure."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..context import pruned_message, shows_summary, summary_message
from ..errors import (
    CompactionError,
    ConflictError,
    InvalidInputError,
    SessionDBError,
    SummarizerError,
)
from ..models import Compaction, Message, Prune, Record
from ..validation import check_record_size
from .breaker import CircuitBreaker
from .files import format_file_ops
from .plan import CompactionPlan, plan_compaction
from .prompts import SPLIT_TURN_HEADING, SYSTEM_PROMPT, build_prompt
from .protocol import CompactionStore
from .prune import PRUNED_MARKER, plan_pruning
from .serialize import serialize_messages
from .settings import CompactionSettings, should_compact
from .summarizers import Summarizer
from .tokens import Tokenizer, estimate_message_tokens, estimate_tokens, usage_tokens

EventType = Literal[
    "compaction.start",
    "compaction.pruned",
    "compaction.done",
    "compaction.failed",
    "compaction.disabled",
]


@dataclass(frozen=True)
class CompactionEvent:
    """Emitted before and after a compaction, when one fails, and when auto-compaction
    turns itself off for a session.

    ``reason`` is ``"manual"`` for :func:`compact` and ``"threshold"`` for
    :func:`maybe_compact`; ``tokens_after`` is set on ``compaction.pruned`` (after the
    pruning phase) and ``compaction.done``.
    """

    type: EventType
    session_id: str
    reason: str
    tokens_before: int
    tokens_after: int | None = None
    error: SessionDBError | None = None
    failures: int = 0


EventHook = Callable[[CompactionEvent], Awaitable[None] | None]


@dataclass(frozen=True)
class CompactionResult:
    """What :func:`compact` did.

    ``compacted`` is true when a summary was written; false when pruning alone brought
    the context under the threshold or there was nothing to compact (``reason`` says
    which). ``pruned_seqs`` are the tool results the pruning phase replaced with a
    marker (``prune_record`` the overlay it wrote, ``pruned_tokens`` what it freed).
    Token figures are estimates of the context before and after (``ceil(chars/4)`` or the
    tokenizer), so that they compare; ``summarized_tokens`` is what the record stores
    as ``tokens_before``. ``summarizer_seconds`` is the time spent in the summarizer,
    ``total_seconds`` the whole call.
    """

    compacted: bool
    reason: str
    tokens_before: int
    tokens_after: int
    first_kept_seq: int | None = None
    summarized_tokens: int = 0
    split_turn: bool = False
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    record: Record | None = None
    summarizer_seconds: float = 0.0
    total_seconds: float = 0.0
    pruned_seqs: tuple[int, ...] = ()
    pruned_tokens: int = 0
    prune_record: Record | None = None

    @property
    def pruned(self) -> bool:
        """Whether the pruning phase wrote a prune overlay."""
        return self.prune_record is not None


@dataclass(frozen=True)
class ContextSnapshot:
    """The context as records: the compaction in force and the messages with seqs
    (pruned tool results showing their marker; ``pruned`` holds their seqs)."""

    previous: Record | None
    entries: list[tuple[int, Message]]
    pruned: frozenset[int] = frozenset()

    def with_pruned(self, seqs: tuple[int, ...], marker: str) -> ContextSnapshot:
        """The snapshot after a prune of ``seqs`` (as the context will show it)."""
        chosen = set(seqs)
        entries = [(s, pruned_message(m, marker) if s in chosen else m) for s, m in self.entries]
        return ContextSnapshot(self.previous, entries, self.pruned | chosen)

    @property
    def compaction(self) -> Compaction | None:
        # A cleared context (a compaction without a summary) has no summary to update.
        found = self.previous.compaction if self.previous is not None else None
        return found if found is not None and shows_summary(found) else None

    def messages(self) -> list[Message]:
        """What the model sees: the summary message, then the messages."""
        head = [summary_message(self.compaction)] if self.compaction is not None else []
        return head + [m for _, m in self.entries]


async def read_context(store: CompactionStore, session_id: str) -> ContextSnapshot:
    """The session's context with seqs, in one read.

    Raises:
        SessionNotFoundError: no such session in this namespace.
    """
    records = await store.records(
        session_id, include_superseded=False, kinds=("message", "compaction", "prune")
    )
    previous: Record | None = None
    entries: list[tuple[int, Message]] = []
    prunes: list[Prune] = []
    for record in records:
        if record.compaction is not None:
            previous = record
        elif record.message is not None:
            entries.append((record.seq, record.message))
        elif record.prune is not None:
            prunes.append(record.prune)
    snapshot = ContextSnapshot(previous, entries)
    for prune in prunes:  # in seq order: a later marker wins, as in the context
        snapshot = snapshot.with_pruned(tuple(prune.seqs), prune.marker)
    return snapshot


async def plan(
    store: CompactionStore,
    session_id: str,
    settings: CompactionSettings | None = None,
    *,
    tokenizer: Tokenizer | None = None,
) -> CompactionPlan | None:
    """What :func:`compact` would do now (the dry run), or ``None`` if nothing.

    Raises:
        SessionNotFoundError: no such session in this namespace.
        InvalidInputError: ``settings`` is not a :class:`CompactionSettings`.
    """
    settings = _settings(settings)
    snapshot = await read_context(store, session_id)
    return plan_compaction(snapshot.entries, snapshot.compaction, settings, tokenizer)


async def compact(
    store: CompactionStore,
    session_id: str,
    summarizer: Summarizer,
    settings: CompactionSettings | None = None,
    instructions: str | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    on_event: EventHook | None = None,
    reason: str = "manual",
    prune: bool = True,
) -> CompactionResult:
    """Free context: prune old tool results, then summarise the older part of the
    context unless pruning alone was enough.

    Phase 1 (open-harness's pruning, skipped with ``prune=False``): the tool results
    outside the newest ``settings.prune_protect_tokens`` tokens are replaced in the
    context by a marker, with one prune record (``compaction.pruned`` event). When the
    context was over ``settings.threshold`` (or ``reason`` is ``"threshold"``, as in
    :func:`maybe_compact`) and pruning brings it to the threshold or below, it stops
    there; a manual compaction of a context under the threshold goes on to summarise.

    Phase 2: reads the context, plans the cut, calls the summarizer with no transaction
    open, then appends a compaction record. Messages appended while the summarizer runs
    are kept (they come after the cut). Nothing of phase 2 is written when anything
    fails; a prune written in phase 1 stays (it is an overlay in its own right).

    Args:
        summarizer: ``await summarizer(system, prompt, max_tokens) -> str``.
        settings: default :class:`CompactionSettings()`.
        instructions: extra focus for the summary ("keep the schema changes").
        tokenizer: counts tokens instead of ``ceil(chars / 4)``.
        on_event: called with ``compaction.start``, ``compaction.pruned`` (when phase 1
            pruned something) and ``compaction.done`` events.
        prune: run the pruning phase first (default); ``False`` only summarises.

    Raises:
        SummarizerError: the summarizer raised or returned no text.
        ConflictError: the session changed under the compaction in a way that makes
            the plan invalid (another compaction, a tombstone at the cut).
        SessionNotFoundError: no such session in this namespace.
        InvalidInputError: bad arguments.
    """
    started = time.perf_counter()
    settings = _settings(settings)
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInputError(f"instructions must be a string, got {type(instructions).__name__}")
    if not callable(summarizer):
        raise InvalidInputError(f"summarizer must be an async callable, got {summarizer!r}")
    if not isinstance(prune, bool):
        raise InvalidInputError(f"prune must be a bool, got {prune!r}")
    snapshot = await read_context(store, session_id)
    tokens_before = estimate_tokens(snapshot.messages(), tokenizer)
    pruning = _Pruning()
    if prune:
        pruning = await _prune(
            store, session_id, snapshot, settings, tokenizer, on_event, reason, tokens_before
        )
        snapshot = pruning.snapshot or snapshot
        # Over the threshold (or triggered by it), pruning that gets back under it is
        # enough: open-harness's phase 2 is skipped. A manual compaction of a context
        # under the threshold asked for a summary, so it gets one.
        over = reason == "threshold" or tokens_before > settings.threshold
        if pruning.record is not None and over and pruning.tokens_after <= settings.threshold:
            return await _finish(
                on_event,
                session_id,
                reason,
                CompactionResult(
                    compacted=False,
                    reason=f"pruned: the context is at or under the threshold "
                    f"({settings.threshold} tokens) without a summary",
                    tokens_before=tokens_before,
                    tokens_after=pruning.tokens_after,
                    total_seconds=time.perf_counter() - started,
                    **pruning.fields(),
                ),
            )
    the_plan = plan_compaction(snapshot.entries, snapshot.compaction, settings, tokenizer)
    if the_plan is None:
        tokens = estimate_tokens(snapshot.messages(), tokenizer)
        result = CompactionResult(
            compacted=False,
            reason=f"nothing to compact: the context fits in keep_recent_tokens "
            f"({settings.keep_recent_tokens}) or has no valid cut point",
            tokens_before=tokens_before,
            tokens_after=tokens,
            total_seconds=time.perf_counter() - started,
            **pruning.fields(),
        )
        # A start event was sent when pruning ran: close it.
        return await _finish(on_event, session_id, reason, result) if pruning.record else result
    if pruning.record is None:
        await _emit(
            on_event, CompactionEvent("compaction.start", session_id, reason, tokens_before)
        )
    summary_started = time.perf_counter()
    summary = await _summarise(summarizer, the_plan, settings, instructions)
    summarizer_seconds = time.perf_counter() - summary_started
    files = format_file_ops(the_plan.file_ops)
    if files:
        summary = summary + "\n\n" + files
    _check_summary_size(summary, store.settings.max_record_bytes)
    await _check_no_new_compaction(store, session_id, snapshot)
    try:
        record = await store.append_compaction(
            session_id,
            summary=summary,
            first_kept_seq=the_plan.first_kept_seq,
            tokens_before=the_plan.summarized_tokens,
            read_files=the_plan.file_ops.read_files,
            modified_files=the_plan.file_ops.modified_files,
        )
    except InvalidInputError as exc:
        # The plan was valid when read: the session changed while summarising.
        raise ConflictError(
            f"session {session_id} changed while it was being summarised; nothing was "
            f"written ({exc})"
        ) from exc
    assert record.compaction is not None
    tokens_after = (
        estimate_message_tokens(summary_message(record.compaction), tokenizer)
        + the_plan.kept_tokens
    )
    result = CompactionResult(
        compacted=True,
        reason="pruned and compacted" if pruning.record is not None else "compacted",
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        first_kept_seq=the_plan.first_kept_seq,
        summarized_tokens=the_plan.summarized_tokens,
        split_turn=the_plan.split_turn,
        read_files=the_plan.file_ops.read_files,
        modified_files=the_plan.file_ops.modified_files,
        record=record,
        summarizer_seconds=summarizer_seconds,
        total_seconds=time.perf_counter() - started,
        **pruning.fields(),
    )
    return await _finish(on_event, session_id, reason, result)


@dataclass(frozen=True)
class _Pruning:
    """What the pruning phase did: the record written (``None``: nothing pruned), the
    snapshot as it now reads and the tokens after."""

    record: Record | None = None
    snapshot: ContextSnapshot | None = None
    tokens_before: int = 0
    tokens_after: int = 0

    def fields(self) -> dict[str, Any]:
        if self.record is None or self.record.prune is None:
            return {}
        return {
            "pruned_seqs": tuple(self.record.prune.seqs),
            "pruned_tokens": self.tokens_before - self.tokens_after,
            "prune_record": self.record,
        }


async def _prune(
    store: CompactionStore,
    session_id: str,
    snapshot: ContextSnapshot,
    settings: CompactionSettings,
    tokenizer: Tokenizer | None,
    on_event: EventHook | None,
    reason: str,
    tokens_before: int,
) -> _Pruning:
    """Phase 1: append a prune of the old tool results, if any would free tokens."""
    the_plan = plan_pruning(snapshot.entries, settings.prune_protect_tokens, tokenizer)
    seqs = tuple(s for s in the_plan.seqs if s not in snapshot.pruned)
    if not seqs:
        return _Pruning()
    await _emit(on_event, CompactionEvent("compaction.start", session_id, reason, tokens_before))
    after = snapshot.with_pruned(seqs, PRUNED_MARKER)
    tokens_after = estimate_tokens(after.messages(), tokenizer)
    try:
        record = await store.append_prune(
            session_id, seqs, marker=PRUNED_MARKER, tokens_freed=tokens_before - tokens_after
        )
    except InvalidInputError as exc:
        # The plan was valid when read: the session changed since (a tombstone, a prune).
        raise ConflictError(
            f"session {session_id} changed while pruning was planned; nothing was written ({exc})"
        ) from exc
    await _emit(
        on_event,
        CompactionEvent("compaction.pruned", session_id, reason, tokens_before, tokens_after),
    )
    return _Pruning(record, after, tokens_before, tokens_after)


async def _finish(
    on_event: EventHook | None, session_id: str, reason: str, result: CompactionResult
) -> CompactionResult:
    await _emit(
        on_event,
        CompactionEvent(
            "compaction.done", session_id, reason, result.tokens_before, result.tokens_after
        ),
    )
    return result


# -- auto-compaction ------------------------------------------------------------------


def breaker_for(store: CompactionStore) -> CircuitBreaker:
    """The circuit breaker :func:`maybe_compact` uses for ``store`` by default: the
    store's own, which :meth:`SessionStore.maybe_compact` uses too."""
    return store.compaction_breaker


AutoStatus = Literal[
    "not-needed",
    "disabled",
    "breaker-open",
    "nothing-to-compact",
    "pruned",
    "compacted",
    "failed",
]


@dataclass(frozen=True)
class AutoCompactOutcome:
    """What :func:`maybe_compact` did.

    ``status``: ``not-needed`` (under the threshold), ``disabled`` (settings),
    ``breaker-open`` (stopped after ``max_failures`` failures in a row),
    ``nothing-to-compact``, ``pruned`` (the pruning phase alone was enough),
    ``compacted`` or ``failed`` (``error`` says why; after the
    last allowed failure ``breaker_open`` is true).
    """

    status: AutoStatus
    context_tokens: int
    result: CompactionResult | None = None
    error: SessionDBError | None = None
    failures: int = 0
    breaker_open: bool = False
    message: str = field(default="")


async def maybe_compact(
    store: CompactionStore,
    session_id: str,
    summarizer: Summarizer,
    settings: CompactionSettings | None = None,
    instructions: str | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    on_event: EventHook | None = None,
    breaker: CircuitBreaker | None = None,
) -> AutoCompactOutcome:
    """Compact when the trigger fires: ``context_tokens > context_window - reserve``.

    Cheap when under the threshold (see :func:`context_tokens`). A failed compaction is
    reported in the outcome and a ``compaction.failed`` event, not raised; after
    ``settings.max_failures`` failures in a row for a session it stops trying for that
    session (``compaction.disabled`` event, status ``breaker-open``) until
    ``breaker.reset(session_id)``.

    Raises:
        SessionNotFoundError: no such session in this namespace.
        InvalidInputError: bad arguments.
        CompactionError: an ``on_event`` hook raised.
    """
    settings = _settings(settings)
    breaker = breaker if breaker is not None else breaker_for(store)
    if not settings.enabled:
        return AutoCompactOutcome("disabled", 0, message="auto-compaction is disabled")
    failures = breaker.failures(session_id)
    if failures >= settings.max_failures:
        return AutoCompactOutcome(
            "breaker-open",
            0,
            failures=failures,
            breaker_open=True,
            message=f"auto-compaction stopped for session {session_id} after {failures} "
            "failures in a row",
        )
    tokens = await context_tokens(store, session_id, tokenizer=tokenizer)
    if not should_compact(tokens, settings):
        return AutoCompactOutcome("not-needed", tokens, failures=failures)
    try:
        result = await compact(
            store,
            session_id,
            summarizer,
            settings,
            instructions,
            tokenizer=tokenizer,
            on_event=on_event,
            reason="threshold",
        )
    except (SummarizerError, ConflictError) as exc:
        count = breaker.record_failure(session_id)
        is_open = count >= settings.max_failures
        await _emit(
            on_event,
            CompactionEvent(
                "compaction.failed", session_id, "threshold", tokens, error=exc, failures=count
            ),
        )
        message = f"compaction failed ({count} in a row): {exc}"
        if is_open:
            message += "; auto-compaction stopped for this session"
            await _emit(
                on_event,
                CompactionEvent(
                    "compaction.disabled",
                    session_id,
                    "threshold",
                    tokens,
                    error=exc,
                    failures=count,
                ),
            )
        return AutoCompactOutcome(
            "failed", tokens, error=exc, failures=count, breaker_open=is_open, message=message
        )
    breaker.record_success(session_id)
    if not result.compacted and result.pruned:
        return AutoCompactOutcome("pruned", tokens, result=result, message=result.reason)
    if not result.compacted:
        return AutoCompactOutcome(
            "nothing-to-compact", tokens, result=result, message=result.reason
        )
    return AutoCompactOutcome("compacted", tokens, result=result)


# -- the context's token figure ---------------------------------------------------------


@dataclass(frozen=True)
class ContextTokens:
    """The trigger's figure and how it was found: ``usage`` (the last assistant message's
    reported usage plus estimates after it) or ``estimate`` (every message estimated);
    ``records_read`` counts the records parsed."""

    tokens: int
    source: Literal["usage", "estimate"]
    records_read: int


# Records read in the first window back from the head; each further window is 4× larger.
_FIRST_WINDOW = 32


async def measure_context(
    store: CompactionStore, session_id: str, *, tokenizer: Tokenizer | None = None
) -> ContextTokens:
    """:func:`context_tokens` with how the figure was found.

    Reads back from the head in growing windows until the last assistant message that
    reports usage; only when there is none since the latest overlay (compaction,
    tombstone, prune) (usage before those describes a different context) is the whole context read.
    """
    info = await store.get_session(session_id)
    to_seq = info.last_seq
    window = _FIRST_WINDOW
    after = 0
    read = 0
    while to_seq >= 1:
        from_seq = max(1, to_seq - window + 1)
        records = await store.records(
            session_id,
            include_superseded=False,
            kinds=("message", "compaction", "tombstone", "prune"),
            from_seq=from_seq,
            to_seq=to_seq,
        )
        read += len(records)
        for record in reversed(records):
            message = record.message
            if message is None:  # an overlay: earlier usage is stale
                return await _estimate_all(store, session_id, tokenizer, read)
            if message.role == "assistant":
                reported = usage_tokens(message.usage)
                if reported > 0:
                    return ContextTokens(reported + after, "usage", read)
            after += estimate_message_tokens(message, tokenizer)
        to_seq = from_seq - 1
        window *= 4
    return ContextTokens(after, "estimate", read)


async def context_tokens(
    store: CompactionStore, session_id: str, *, tokenizer: Tokenizer | None = None
) -> int:
    """The context's size in tokens, as the trigger sees it: the last assistant
    message's reported usage plus estimates for the messages after it, else the estimate
    of the whole context. Cheap enough to call before every model call: when the last
    assistant message reports usage, only the messages after it are read.

    Raises:
        SessionNotFoundError: no such session in this namespace.
    """
    return (await measure_context(store, session_id, tokenizer=tokenizer)).tokens


async def _estimate_all(
    store: CompactionStore, session_id: str, tokenizer: Tokenizer | None, read: int
) -> ContextTokens:
    messages = await store.context(session_id)
    return ContextTokens(estimate_tokens(messages, tokenizer), "estimate", read + len(messages))


# -- helpers ------------------------------------------------------------------------------


def _settings(settings: CompactionSettings | None) -> CompactionSettings:
    if settings is None:
        return CompactionSettings()
    if not isinstance(settings, CompactionSettings):
        raise InvalidInputError(
            f"settings must be a CompactionSettings, got {type(settings).__name__}"
        )
    return settings


async def _summarise(
    summarizer: Summarizer,
    the_plan: CompactionPlan,
    settings: CompactionSettings,
    instructions: str | None,
) -> str:
    limit = settings.tool_result_max_chars
    history: str | None = the_plan.previous_summary
    if the_plan.history:
        prompt = build_prompt(
            serialize_messages(the_plan.history, limit),
            instructions,
            the_plan.previous_summary,
        )
        history = await _ask(summarizer, prompt, settings.summary_max_tokens)
    if not the_plan.turn_prefix:
        assert history is not None  # a plan without a split turn has history
        return history
    # The two calls run one after the other: a failing first call spends no second one.
    prompt = build_prompt(
        serialize_messages(the_plan.turn_prefix, limit), instructions, turn_prefix=True
    )
    prefix = await _ask(summarizer, prompt, settings.turn_prefix_max_tokens)
    turn = f"{SPLIT_TURN_HEADING}\n\n{prefix}"
    return turn if history is None else f"{history}\n\n{turn}"


async def _ask(summarizer: Summarizer, prompt: str, max_tokens: int) -> str:
    try:
        text = await summarizer(SYSTEM_PROMPT, prompt, max_tokens)
    except SessionDBError as exc:
        raise SummarizerError(f"the summarizer failed: {exc}") from exc
    except Exception as exc:
        raise SummarizerError(f"the summarizer raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(text, str) or not text.strip():
        raise SummarizerError(f"the summarizer returned no summary ({text!r:.80})")
    return text.strip()


def _check_summary_size(summary: str, limit: int) -> None:
    """A summary the compaction record could not hold is the summarizer's failure, not
    a change of the session (``append_compaction`` would refuse it as bad input)."""
    try:
        check_record_size(summary, limit, "the summary")
    except InvalidInputError as exc:
        raise SummarizerError(f"the summarizer returned too long a summary: {exc}") from None


async def _check_no_new_compaction(
    store: CompactionStore, session_id: str, snapshot: ContextSnapshot
) -> None:
    since = snapshot.previous.seq + 1 if snapshot.previous is not None else 1
    newer = await store.records(session_id, kinds=("compaction",), from_seq=since)
    if newer:
        raise ConflictError(
            f"session {session_id} was compacted meanwhile (record {newer[-1].seq}); "
            "nothing was written"
        )


async def _emit(hook: EventHook | None, event: CompactionEvent) -> None:
    if hook is None:
        return
    try:
        outcome = hook(event)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception as exc:
        raise CompactionError(f"the on_event hook raised on {event.type}: {exc!r}") from exc
