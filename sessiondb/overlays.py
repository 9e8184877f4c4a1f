"""Overlays: records that change what the context shows without rewriting a row.

A compaction (a summary stands for the messages before ``first_kept_seq``), a prune
(tool results show a marker instead of their content), a tombstone (a record leaves the
context), and the two built from them: pop (the last entry leaves) and clear (an empty
compaction at the head). Each runs in one transaction under the session's row lock, so
that what it checks (the target is live, no tool pair is cut) still holds when it
appends. :class:`~sessiondb.store.SessionStore` checks the arguments and calls these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import context as ctx
from . import jsoncodec
from . import statements as q
from .errors import InvalidInputError, RecordNotFoundError
from .models import Compaction, Prune, Record, Tombstone
from .rows import NewRecord, records_from_rows
from .validation import check_record_size, to_json

if TYPE_CHECKING:
    from .backends import Transaction
    from .core import Core

# The largest number of tool results one prune record may name.
MAX_PRUNE_SEQS = 10_000


async def append_compaction(
    core: Core, session_id: str, compaction: Compaction, expected_seq: int | None
) -> Record:
    """Append ``compaction`` if its ``first_kept_seq`` is a live message that does not
    separate a tool call from its result."""
    first_kept_seq = compaction.first_kept_seq
    row = NewRecord(
        kind="compaction",
        payload=to_json(compaction.to_wire(), "compaction"),
        first_kept_seq=first_kept_seq,
    )
    check_record_size(row.payload, core.max_record_bytes, "the compaction")

    async def unit(tx: Transaction) -> Record:
        head = await core.lock_head(tx, session_id)
        live = await core.live_messages(tx, session_id, first_kept_seq, first_kept_seq)
        if not live or live[0][0] != first_kept_seq:
            raise InvalidInputError(
                f"first_kept_seq {first_kept_seq} is not a message in the context of "
                f"session {session_id} (head {head})"
            )
        if await core.splits_pair(tx, session_id, first_kept_seq - 1):
            raise InvalidInputError(
                f"first_kept_seq {first_kept_seq} would separate a tool call from its result"
            )
        (record,) = await core.append_in(tx, session_id, [row], expected_seq)
        return record

    return await core.transact(unit)


async def append_prune(
    core: Core, session_id: str, prune: Prune, expected_seq: int | None
) -> Record:
    """Append ``prune`` if each of its seqs (sorted, distinct) is a live tool result in
    the context, not pruned already."""
    chosen = prune.seqs
    row = NewRecord(kind="prune", payload=to_json(prune.to_wire(), "prune"))
    check_record_size(row.payload, core.max_record_bytes, "the prune record")

    async def unit(tx: Transaction) -> Record:
        head = await core.lock_head(tx, session_id)
        results = await tx.fetch(
            q.lineage_records(
                session_id,
                core.namespace,
                include_tombstoned=False,
                include_superseded=False,
                kinds=("message",),
                roles=("toolResult",),
                from_seq=chosen[0],
                to_seq=chosen[-1],
                flavour=core.flavour,
                sealed=core.encrypted,
            )
        )
        live = {int(r["seq"]) for r in results}
        missing = [seq for seq in chosen if seq not in live]
        if missing:
            raise InvalidInputError(
                f"not tool results in the context of session {session_id} (head "
                f"{head}): seqs {_some(missing)}"
            )
        pruned = ctx.prune_markers(
            r["payload"] for r in await core.lineage_rows(tx, session_id, kinds=("prune",))
        )
        again = [seq for seq in chosen if seq in pruned]
        if again:
            raise InvalidInputError(f"already pruned in session {session_id}: seqs {_some(again)}")
        (record,) = await core.append_in(tx, session_id, [row], expected_seq)
        return record

    return await core.transact(unit)


def _tombstone_row(core: Core, seq: int, reason: str | None) -> NewRecord:
    wire = Tombstone(target_seq=seq, reason=reason).to_wire()
    row = NewRecord(kind="tombstone", payload=jsoncodec.dumps(wire), target_seq=seq)
    check_record_size(row.payload, core.max_record_bytes, "the tombstone")
    return row


async def tombstone(core: Core, session_id: str, seq: int, reason: str | None) -> list[Record]:
    """Tombstone record ``seq`` and, for a tool call or result, its partners; the
    tombstones written (none when all were tombstoned already)."""

    async def unit(tx: Transaction) -> list[Record]:
        await core.lock_head(tx, session_id)
        target_rows = await core.lineage_rows(
            tx, session_id, from_seq=seq, to_seq=seq, include_tombstoned=True
        )
        if not target_rows:
            raise RecordNotFoundError(session_id, seq)
        target = target_rows[0]
        if target["kind"] == "tombstone":
            raise InvalidInputError(f"record {seq} is a tombstone; it cannot be tombstoned")
        targets = [seq]
        if target["kind"] == "message":
            message = ctx.payload_message(target["payload"])
            if message.role in ("assistant", "toolResult"):
                window = await core.pair_window(tx, session_id, seq)
                targets = ctx.pair_members(seq, message, window)
        done = {
            r["target_seq"] for r in await core.lineage_rows(tx, session_id, kinds=("tombstone",))
        }
        rows = [_tombstone_row(core, t, reason) for t in targets if t not in done]
        if not rows:
            return []
        return await core.append_in(tx, session_id, rows)

    return await core.transact(unit)


async def pop(core: Core, session_id: str, reason: str | None) -> Record | None:
    """Take the context's last entry out of it; its record, or ``None`` when empty."""

    async def unit(tx: Transaction) -> Record | None:
        await core.lock_head(tx, session_id)
        tail = await _tail(core, tx, session_id)
        if tail.messages:
            seq = tail.seqs[-1]
            taken = await core.lineage_rows(tx, session_id, from_seq=seq, to_seq=seq)
            await core.append_in(tx, session_id, [_tombstone_row(core, seq, reason)])
        elif tail.compaction is not None and _has_summary(tail.compaction):
            # The live compactions; the last is the one in force.
            taken = (await core.lineage_rows(tx, session_id, kinds=("compaction",)))[-1:]
            await _append_clear(core, tx, session_id)
        else:
            return None
        return records_from_rows([tuple(r)[:6] for r in taken])[0]

    return await core.transact(unit)


async def clear(core: Core, session_id: str) -> Record | None:
    """Append an empty compaction at the head; ``None`` when the context was empty."""

    async def unit(tx: Transaction) -> Record | None:
        await core.lock_head(tx, session_id)
        tail = await _tail(core, tx, session_id)
        if not tail.messages and (tail.compaction is None or not _has_summary(tail.compaction)):
            return None
        return await _append_clear(core, tx, session_id)

    return await core.transact(unit)


async def _tail(core: Core, tx: Transaction, session_id: str) -> ctx.ContextRows:
    """The context's last message, or its compaction when it has no message."""
    return ctx.split_rows(
        await tx.fetch(q.context_tail(session_id, core.namespace, core.flavour, 1, core.encrypted))
    )


async def _append_clear(core: Core, tx: Transaction, session_id: str) -> Record:
    head = await core.lock_head(tx, session_id)
    compaction = Compaction(summary="", first_kept_seq=head + 1)
    row = NewRecord(
        kind="compaction",
        payload=jsoncodec.dumps(compaction.to_wire()),
        first_kept_seq=head + 1,
    )
    (record,) = await core.append_in(tx, session_id, [row])
    return record


def _has_summary(payload: str) -> bool:
    return ctx.shows_summary(Compaction.model_validate(jsoncodec.loads(payload)))


def _some(seqs: list[int]) -> str:
    shown = ", ".join(str(s) for s in seqs[:10])
    return shown + (f" and {len(seqs) - 10} more" if len(seqs) > 10 else "")
