"""Context assembly and tool-pair rules: plain functions over plain values."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import jsoncodec
from .lazy import lazy_modules
from .models import Compaction, Message, TextContent

if TYPE_CHECKING:
    from . import decode
    from . import statements as q
else:  # imported when first used: SQLAlchemy's (sessiondb.shapes says why), msgspec
    decode, q = lazy_modules("decode statements")

# The spec's markers around a compaction summary (§7.4 step 3a, byte for byte): the
# marker line, then ``<summary>`` on the very next line.
SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n<summary>\n"
)
SUMMARY_SUFFIX = "\n</summary>"


def summary_text(summary: str) -> str:
    """A compaction summary wrapped in the spec's context markers."""
    return SUMMARY_PREFIX + summary + SUMMARY_SUFFIX


def shows_summary(compaction: Compaction) -> bool:
    """Whether the compaction puts a summary message in the context: a compaction with
    an empty summary (:meth:`SessionStore.clear`) only hides what came before it."""
    return compaction.summary != ""


def summary_message(compaction: Compaction) -> Message:
    """The user message that stands for everything a compaction superseded."""
    return Message(role="user", content=[TextContent(text=summary_text(compaction.summary))])


@dataclass(frozen=True)
class ContextRows:
    """The context statement's rows, split: ``head`` is ``None`` when the session row was
    absent (not found); payloads are the stored JSON texts, not yet parsed. ``seqs`` are
    the messages' seqs, ``prunes`` the payloads of the live prune records. ``responses``:
    a message may name a response (``False``: the responses index says none does, so
    none is a split response's part)."""

    head: int | None
    compaction: str | None
    messages: list[str]
    seqs: list[int] = field(default_factory=list)
    prunes: list[str] = field(default_factory=list)
    responses: bool = True


def split_rows(rows: Iterable[tuple[int, int, str | None]]) -> ContextRows:
    """Split the context statement's ``(part, seq, payload)`` rows, in any order:
    messages and prunes come out in seq order."""
    head: int | None = None
    compaction: str | None = None
    messages: list[str] = []
    seqs: list[int] = []
    prunes: list[tuple[int, str]] = []
    for part, seq, payload in rows:
        if part == 2:  # a message: nearly every row, so tested first
            assert payload is not None
            messages.append(payload)
            seqs.append(seq)
        elif part == 0:
            head = seq
        elif part == 1:
            compaction = payload
        elif part == 3:
            assert payload is not None
            prunes.append((seq, payload))
        # parts 4 and 5 (an encrypted store's read): rows read to be checked, not shown
    # The statement does not sort (see statements.context): its rows come in seq order
    # from the index for one session, not always along a fork's lineage. A C-level check
    # (~8 µs for 200 seqs) is cheaper than the SQL sort it replaces (~25 µs).
    if not all(map(operator.lt, seqs, itertools.islice(seqs, 1, None))):
        ordered = sorted(zip(seqs, messages, strict=True), key=_SEQ)
        seqs = [seq for seq, _ in ordered]
        messages = [payload for _, payload in ordered]
    prunes.sort(key=_SEQ)
    return ContextRows(head, compaction, messages, seqs, [payload for _, payload in prunes])


_SEQ = operator.itemgetter(0)


def to_messages(rows: ContextRows) -> list[Message]:
    """The messages the model should see, as models: pruned tool results show their
    marker, and the parts of a split response are one message (:func:`response_groups`)."""
    # The summary from its cached JSON (:func:`_summary_json`), built when first touched
    # like the messages: ~0.9 µs, against ~7 µs to check the compaction and build it.
    summary = _summary_json(rows.compaction) if rows.compaction is not None else None
    out = [] if summary is None else [decode.message(summary)]
    messages, names_response = decode.context_messages(rows.messages, rows.responses)
    markers = prune_markers(rows.prunes)
    if markers:
        messages = [
            pruned_message(m, markers[seq]) if seq in markers else m
            for seq, m in zip(rows.seqs, messages, strict=True)
        ]
    # Only a message naming a response can be part of one: what the read saw of the
    # texts instead of each message's extra fields. The groups from the texts' two
    # fields, so that only the parts of a split response are built here (a Claude Code
    # session names a response in every assistant message: 1,000 messages of one took
    # ~12 ms, each built to read its fields).
    if names_response:
        if all(p.__class__ is str for p in rows.messages):
            heads = decode.response_heads(rows.messages)
        else:  # a SQLite column changed by hand: the messages' own fields
            heads = [(m.role, _response_of(m)) for m in messages]
        groups = response_groups(heads)
        if len(groups) < len(messages):
            messages = [_merged_message([messages[i] for i in g]) for g in groups]
    out.extend(messages)
    return out


def json_array(rows: ContextRows, last: int | None = None) -> str:
    """The messages the model should see, as one JSON array of wire-shape objects, built
    from the stored texts; only pruned messages and split responses are parsed.
    ``last``: the rows hold the last ``last`` messages (the summary is left out when
    it is older than they are).

    When a stored text took :mod:`jsoncodec`'s exact path (a lone surrogate, an integer
    over 64 bits), the array carries the exact path's leading mark too, so that
    ``jsoncodec.loads`` reads all of it exactly."""
    compaction = rows.compaction
    if last is not None and len(rows.messages) >= last:
        compaction = None  # older than the last ``last`` messages
    markers = prune_markers(rows.prunes)
    texts = rows.messages
    if markers:
        texts = [
            _pruned_json(payload, markers[seq]) if seq in markers else payload
            for seq, payload in zip(rows.seqs, rows.messages, strict=True)
        ]
    return _array(compaction, texts, rows.responses)


def texts_rows(rows: Sequence[Sequence[str]]) -> ContextRows | None:
    """The rows of :func:`statements.context_texts` (at least one) as the context
    statement's: the compaction's text and the messages' texts, in seq order; ``None``
    when they do not hold the context alone (a fork, a prune record: the caller reads it
    by :func:`statements.context`). There are no seqs: with no prune record, neither
    :func:`to_messages` nor :func:`json_array` needs them."""
    first = rows[0][0]
    # The marker row comes first (the union's first part); should a database ever send
    # it elsewhere, the first row is a message's text, and the caller reads the context
    # by the other statement.
    marker = first[:1]
    if marker != q.TEXTS_ALONE and marker != q.TEXTS_NO_RESPONSES:
        return None
    texts = list(map(_FIRST, itertools.islice(rows, 1, None)))
    # ``head`` is the session's being there (the statement gave rows), not its seq.
    return ContextRows(0, first[1:] or None, texts, responses=marker == q.TEXTS_ALONE)


_FIRST = operator.itemgetter(0)


def _array(compaction: str | None, texts: list[str], responses: bool = True) -> str:
    summary = _summary_json(compaction) if compaction is not None else None
    parts = [] if summary is None else [summary]
    array = _joined(parts, texts)
    # One search of the joined text, not one a message (~100 µs for 200 messages here);
    # the summary may hold the key too, which costs that context a parse, nothing more.
    # No search when the responses index holds no kept message (~30 µs of 200 messages'
    # 110 kB here: a fifth of the read).
    if responses and _RESPONSE_KEY in array:
        # Only a split response's parts are parsed (to be merged); the others' role and
        # response id are read without parsing them (decode.response_heads).
        groups = response_groups(decode.response_heads(texts))
        if len(groups) < len(texts):
            texts = [
                texts[g[0]]
                if len(g) == 1
                else jsoncodec.dumps(merge_wire([jsoncodec.loads(texts[i]) for i in g]))
                for g in groups
            ]
            array = _joined(parts, texts)
    return array


def _joined(parts: list[str], texts: list[str]) -> str:
    """``parts`` then ``texts`` as one JSON array, with the exact path's mark if one of
    them took it. One join, the brackets put on the first and the last item: against
    joining the items and then adding the brackets, which copied the whole array twice
    more, ~40 µs less for 200 messages of ~550 characters here (context_json's floor,
    the bare SELECT: ~210 µs)."""
    exact = any(map(_EXACT_START, parts)) or _any_exact(texts)
    items = [*parts, *texts]
    if not items:
        return "[]"
    items[0] = (" [" if exact else "[") + items[0]
    items[-1] += "]"
    return ",".join(items)


def _any_exact(texts: list[str]) -> bool:
    """Whether a text took the exact path (starts with its mark, a space). A stored
    text starts with ``{`` or the mark, and the mark sorts first: the least text tells,
    by C-level comparisons (~2 µs for 200 texts against ~13 µs for a test of each)."""
    least = min(texts, default="{")[:1]
    if least in ("{", " "):
        return least == " "
    return any(map(_EXACT_START, texts))  # a text of another shape: test each


@functools.lru_cache(maxsize=64)
def _summary_json(payload: str) -> str | None:
    """The summary message of a stored compaction, as JSON text (``None``: an empty
    summary shows none). Every read of a context after a compaction has the same one:
    cached by the stored text, it costs a look-up instead of a parse and a dump
    (~15 µs)."""
    summary = _summary_of(payload)
    return None if summary is None else jsoncodec.dumps(summary.to_wire())


_EXACT_START = operator.methodcaller("startswith", " ")


# -- split responses ----------------------------------------------------------------------

# How a stored payload names its response: the texts are compact JSON (``jsoncodec``),
# so a payload without this substring is not a part of a split response; one that has
# it (perhaps inside a text) is parsed to find out.
_RESPONSE_KEY = '"responseId":'


def response_groups(messages: Sequence[tuple[str | None, str | None]]) -> list[list[int]]:
    """The context's messages as the model should see them: lists of indexes into
    ``messages`` (each ``(role, responseId)``), a split response's parts as one list.

    One API response may be stored as several assistant messages sharing ``responseId``
    (Claude Code writes a line per content block), with the results of its early tool
    calls between them. The model must see one assistant message followed by all its
    results, so every later part joins the group of the first, and the results that came
    between the parts follow it in their order. A response ends at any message that is
    neither one of its parts nor a tool result.
    """
    groups: list[list[int]] = []
    current: str | None = None
    open_group = -1
    for index, (role, response) in enumerate(messages):
        if role == "assistant":
            if response is not None and response == current:
                groups[open_group].append(index)
                continue
            current, open_group = response, len(groups)
        elif role != "toolResult":
            current = None
        groups.append([index])
    return groups


def merge_wire(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Wire-shape parts of one response as one message: the first part's fields, every
    part's content in order, and the response's usage once (the first part's that has
    it; a Claude Code import puts the whole response's usage on its first part)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    merged = {**first, "content": [b for p in parts for b in p.get("content") or []]}
    if "usage" not in first:
        usage = next((p["usage"] for p in parts if "usage" in p), None)
        if usage is not None:
            merged["usage"] = usage
    return merged


def merge_split_responses(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wire-shape messages in context order with each split response made one message
    (see :func:`response_groups`)."""
    groups = response_groups([(m.get("role"), _response_id(m)) for m in messages])
    return [merge_wire([messages[i] for i in g]) for g in groups]


def _response_id(message: dict[str, Any]) -> str | None:
    response = message.get("responseId")
    return response if isinstance(response, str) else None


def _response_of(message: Message) -> str | None:
    extra = message.model_extra
    response = extra.get("responseId") if extra else None
    return response if isinstance(response, str) else None


def _merged_message(parts: list[Message]) -> Message:
    first = parts[0]
    if len(parts) == 1:
        return first
    update: dict[str, Any] = {"content": [b for p in parts for b in p.content]}
    usage = next((p.usage for p in parts if p.usage is not None), None)
    if first.usage is None and usage is not None:
        update["usage"] = usage
    return first.model_copy(update=update)


def prune_markers(payloads: Iterable[str]) -> dict[int, str]:
    """Pruned seq → the marker that replaces its content, from prune payloads in seq
    order (a later prune of the same seq wins)."""
    markers: dict[int, str] = {}
    for payload in payloads:
        prune = decode.prune(payload)
        for seq in prune.seqs:
            markers[seq] = prune.marker
    return markers


#: What a pruned tool result reads by default (``SessionStore.prune_tool_results``,
#: :mod:`sessiondb.compaction.prune`). Here rather than in the compaction package, so
#: that the store has it without loading that package (start-up: sessiondb/cli.py).
PRUNED_MARKER = "[tool result pruned to save context]"


def pruned_content(marker: str) -> list[TextContent]:
    """What a pruned tool result holds in the context: one text block, the marker."""
    return [TextContent(text=marker)]


def pruned_message(message: Message, marker: str) -> Message:
    """``message`` with its content replaced by the marker; every other field kept."""
    return message.model_copy(update={"content": pruned_content(marker)})


def _pruned_json(payload: str, marker: str) -> str:
    data = jsoncodec.loads(payload)
    data["content"] = [block.to_wire() for block in pruned_content(marker)]
    return jsoncodec.dumps(data)


def _summary_of(payload: str) -> Message | None:
    compaction = decode.compaction(payload)
    return summary_message(compaction) if shows_summary(compaction) else None


def tool_call_ids(message: Message) -> list[str]:
    return [call.id for call in message.tool_calls()] if message.role == "assistant" else []


def splits_tool_pair(window: Sequence[tuple[int, Message]], cut_after: int) -> bool:
    """Whether cutting the history between ``cut_after`` and ``cut_after + 1`` separates
    a tool call from its result.

    ``window`` holds the messages around the cut, in seq order: from the last assistant
    message at or before the cut to the next assistant message after it.
    """
    calls_before: set[str] = set()
    results_after: set[str] = set()
    for seq, message in window:
        if seq <= cut_after:
            calls_before.update(tool_call_ids(message))
        elif message.role == "toolResult" and message.tool_call_id is not None:
            results_after.add(message.tool_call_id)
    return bool(calls_before & results_after)


def pair_members(
    target_seq: int, target: Message, neighbours: Sequence[tuple[int, Message]]
) -> list[int]:
    """Seqs that must leave the context together with ``target``.

    An assistant message takes the results of its tool calls with it; a tool result
    takes its call (and so the call's other results). ``neighbours`` are the messages
    around the target, in seq order.
    """
    call_seq: int | None = None
    call_ids: set[str] = set()
    if target.role == "assistant":
        call_seq, call_ids = target_seq, set(tool_call_ids(target))
    elif target.role == "toolResult" and target.tool_call_id is not None:
        for seq, message in reversed(neighbours):
            if seq < target_seq and target.tool_call_id in tool_call_ids(message):
                call_seq, call_ids = seq, set(tool_call_ids(message))
                break
    if call_seq is None or not call_ids:
        return [target_seq]
    members = {target_seq, call_seq}
    for seq, message in neighbours:
        if seq > call_seq and message.role == "toolResult" and message.tool_call_id in call_ids:
            members.add(seq)
    return sorted(members)


def payload_message(payload: str) -> Message:
    return decode.message(payload)
