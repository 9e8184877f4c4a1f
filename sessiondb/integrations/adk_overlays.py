"""ADK's compaction and rewind events as sessiondb overlays, where they mean the same.

Plain functions over stored ADK events (their JSON form, as ``adkEvent`` keeps it) and
one read helper per question, run inside the append's transaction: the overlays are
written with the event that causes them, or not at all. ADK reads its events whatever
the overlays say (its runner applies compaction and rewind itself); the overlays make
sessiondb's own context, search and exports agree with what ADK's model sees.

- A **rewind** (``rewind_before_invocation_id = X``) drops, for ADK's model, every event
  from the first event of invocation X to the rewind event itself. Those records get
  tombstones: they leave sessiondb's context and stay stored. The same thing.
- A **compaction** (``EventCompaction(start_timestamp, end_timestamp, compacted_content)``)
  replaces the events in its time range with its summary. When the range starts at or
  before the session's first event, the summary stands for the whole history up to
  ``end_timestamp``: a sessiondb compaction whose ``first_kept_seq`` is the first
  message after the range. ADK's sliding-window compactions, which summarise a middle
  range and keep earlier summaries beside it, have no sessiondb equivalent (a sessiondb
  compaction supersedes everything before its cut and keeps one summary); they stay
  events only.
"""

from __future__ import annotations

from typing import Any

from .. import jsoncodec
from .. import statements as q
from ..backends import Transaction
from ..models import Compaction, Tombstone
from ..rows import NewRecord
from ..validation import to_json

#: The wire field of a stored ADK event (``sessiondb.integrations.adk.ADK_FIELD``).
ADK_FIELD = "adkEvent"
#: The reason a rewind's tombstones carry.
REWIND_REASON = "adk rewind"
_PAGE = 256


def _data(payload: str) -> dict[str, Any]:
    data = jsoncodec.loads(payload).get(ADK_FIELD)
    return data if isinstance(data, dict) else {}


def _timestamp(data: dict[str, Any]) -> float | None:
    value = data.get("timestamp")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _actions(data: dict[str, Any]) -> dict[str, Any]:
    actions = data.get("actions")
    return actions if isinstance(actions, dict) else {}


def summary_of(compaction: dict[str, Any]) -> str:
    """The text of a compaction's ``compacted_content`` (its text parts, joined)."""
    content = compaction.get("compacted_content")
    parts = content.get("parts") if isinstance(content, dict) else None
    texts = [
        p["text"]
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts)


def has_overlays(event: dict[str, Any]) -> bool:
    """Whether the stored event ``event`` is a rewind or a compaction."""
    actions = _actions(event)
    return bool(actions.get("rewind_before_invocation_id")) or isinstance(
        actions.get("compaction"), dict
    )


async def overlay_rows(
    tx: Transaction, session_id: str, head: int, event: dict[str, Any], kind: str
) -> list[NewRecord]:
    """The overlay records to append after the event ``event`` (stored as a ``kind``
    record at ``head + 1``; the session's row is locked by the caller)."""
    actions = _actions(event)
    rows: list[NewRecord] = []
    target = actions.get("rewind_before_invocation_id")
    if isinstance(target, str) and target:
        rows += await _rewind(tx, session_id, head, target, event_is_message=kind == "message")
    compaction = actions.get("compaction")
    if isinstance(compaction, dict):
        row = await _compaction(tx, session_id, head, compaction, kind, len(rows))
        if row is not None:
            rows.append(row)
    return rows


async def _rewind(
    tx: Transaction, session_id: str, head: int, invocation: str, *, event_is_message: bool
) -> list[NewRecord]:
    """Tombstones for the messages from the first event of ``invocation`` to the rewind
    event. Finding the first event reads the session's events (ADK's own rule scans its
    whole history too); rewinds are rare."""
    rows = await tx.fetch(q.adk_events(session_id, head, None))
    first = next(
        (r["seq"] for r in rows if _data(r["payload"]).get("invocation_id") == invocation), None
    )
    if first is None:
        return []  # ADK ignores a rewind to an invocation it does not have
    seqs = [int(r["seq"]) for r in rows if r["seq"] >= first and r["kind"] == "message"]
    if event_is_message:
        seqs.append(head + 1)
    return [
        NewRecord(
            kind="tombstone",
            payload=to_json(Tombstone(target_seq=s, reason=REWIND_REASON).to_wire(), "tombstone"),
            target_seq=s,
        )
        for s in seqs
    ]


async def _compaction(
    tx: Transaction,
    session_id: str,
    head: int,
    compaction: dict[str, Any],
    kind: str,
    before: int,
) -> NewRecord | None:
    """A sessiondb compaction for an ADK compaction that covers the session's history
    from its first event; ``None`` for one that does not (a sliding window)."""
    start, end = compaction.get("start_timestamp"), compaction.get("end_timestamp")
    if not isinstance(start, int | float) or not isinstance(end, int | float):
        return None
    first = await tx.fetch(q.adk_first_event(session_id))
    first_ts = _timestamp(_data(first[0]["payload"])) if first else None
    if first_ts is not None and start > first_ts:
        return None
    kept = await _first_message_after(tx, session_id, head, float(end))
    own_seq = head + 1 + before + 1  # the compaction record's own seq
    if kept is None:
        # Nothing stored after the range: the event itself if it is a message, else
        # whatever comes next (a compaction may name its own seq, as clear() does).
        kept = head + 1 if kind == "message" else own_seq
    wire = Compaction(summary=summary_of(compaction), first_kept_seq=kept).to_wire()
    return NewRecord(kind="compaction", payload=to_json(wire, "compaction"), first_kept_seq=kept)


async def _first_message_after(
    tx: Transaction, session_id: str, head: int, end: float
) -> int | None:
    """The seq of the first message after the last event at or before ``end``, walking
    back from the head (the cost follows the events after the range)."""
    to_seq, after = head, None
    while to_seq > 0:
        rows = await tx.fetch(q.adk_events(session_id, to_seq, _PAGE))
        for r in rows:
            stamp = _timestamp(_data(r["payload"]))
            if stamp is not None and stamp <= end:
                return after
            if r["kind"] == "message":
                after = int(r["seq"])
        if len(rows) < _PAGE:
            return after
        to_seq = int(rows[-1]["seq"]) - 1
    return after
