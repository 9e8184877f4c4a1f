"""Concurrent appends to one session, combined: one statement and one commit carry them.

When tasks of one store append to the same session at once, the first one (the leader)
runs its append as it would alone, at the cost it has alone; whoever arrives while an
append of that session is in flight waits in the session's lane. When the append in
flight ends, the waiting calls go out together, in the order they arrived, as one
append (one ``UPDATE … RETURNING`` of the head and one insert of all their rows, one
commit), and whoever arrives meanwhile waits for the next one. No timer: a lone append
never waits for company.

What each caller sees is what it would have seen alone, had the calls run one after
the other in their order of arrival:

- its own records, with consecutive seqs; the batch's seqs are gapless and follow the
  calls' order;
- ``expected_seq`` is checked against the head the calls before it left: a mismatch
  fails that caller alone (:class:`SeqConflictError`), and its rows are not written;
- a uuid already stored (or stored by an earlier call of the same batch) gives back the
  stored record, as alone;
- a batch the database refuses (a constraint, a value) is run again one call at a
  time, in order, so that one call's bad row fails that call only;
- a batch whose commit outcome is unknown (the connection broke during COMMIT) is run
  again for the calls with uuids (idempotent, as alone), and the others get the
  :class:`DatabaseUnavailableError` with ``outcome_unknown``, as alone.

Cancellation: a caller cancelled while it waits for its batch to start is taken out
of it, and nothing of it is written. Once its batch has gone out, the cancel waits for
the batch to end (as a SQLite write unit does): if its records were committed they are
returned, never reported as cancelled; otherwise it raises ``CancelledError`` and none
of its records were written. Either way the other callers' records are unaffected.

Only calls of one store on one event loop are combined; writers in other processes are
ordered by the head's row lock, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .backends import IntegrityViolation, Transaction
from .errors import (
    BusyError,
    DatabaseUnavailableError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
    StoreClosedError,
)
from .models import Record
from .rows import NewRecord

T = TypeVar("T")


class Appender(Protocol):
    """What combining needs of the core (:class:`sessiondb.core.Core` is one)."""

    async def append_alone(
        self,
        session_id: str,
        rows: list[NewRecord],
        expected_seq: int | None,
        uuids: Sequence[str],
    ) -> list[Record]:
        """One call's append, as it runs when nobody else is appending."""

    async def append_plain(self, session_id: str, rows: list[NewRecord]) -> list[Record]:
        """Rows without uuids and without an expected head, in one statement."""

    async def append_transaction(
        self, unit: Callable[[Transaction], Awaitable[T]], *, outcome_unknown_ok: bool
    ) -> T:
        """``unit`` in a retried transaction, again when its uuids collided."""

    async def lock_head(self, tx: Transaction, session_id: str) -> int:
        """Lock the session's head row; its seq."""

    async def stored_uuids(
        self, tx: Transaction, session_id: str, uuids: Sequence[str]
    ) -> dict[str, Record]:
        """The stored records of those of ``uuids`` the session has."""

    async def append_in(
        self,
        tx: Transaction,
        session_id: str,
        rows: list[NewRecord],
        expected_seq: int | None = None,
    ) -> list[Record]:
        """Append ``rows`` inside ``tx``."""

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` after the caller returns (waited for on close)."""


@dataclass(eq=False, slots=True)
class Call:
    """One caller's append, waiting in its session's lane."""

    rows: list[NewRecord]
    expected_seq: int | None
    uuids: Sequence[str]
    wake: asyncio.Future[None]  # done once ``outcome`` is in (the caller awaits it)
    outcome: list[Record] | BaseException | None = None
    taken: bool = False  # its batch has started: a cancel now waits for the batch
    gone: bool = False  # cancelled: not sent (before its batch), not run again alone

    def settle(self, outcome: list[Record] | BaseException) -> None:
        """Hand the caller its outcome (the first one given counts)."""
        if self.outcome is None:
            self.outcome = outcome
            if not self.wake.done():
                self.wake.set_result(None)


@dataclass(eq=False, slots=True)
class _Lane:
    loop: asyncio.AbstractEventLoop
    waiting: list[Call] = field(default_factory=list)


class Combiner:
    """The lanes of one store's sessions: at most one append in flight per session, and
    the calls that arrived meanwhile, which go out together next."""

    def __init__(self, appender: Appender) -> None:
        self._appender = appender
        self._lanes: dict[str, _Lane] = {}
        #: Batches of two calls or more sent, and the calls they carried (for tests and
        #: tuning: calls / batches is the mean batch size).
        self.batches = 0
        self.combined_calls = 0

    async def append(
        self,
        session_id: str,
        rows: list[NewRecord],
        expected_seq: int | None,
        uuids: Sequence[str],
    ) -> list[Record]:
        """Append ``rows`` (checked by the caller), alone or combined with the calls of
        other tasks that append to the session at the same time."""
        lane = self._lanes.get(session_id)
        loop = asyncio.get_running_loop()
        if lane is None:
            lane = self._lanes[session_id] = _Lane(loop)
            try:
                return await self._appender.append_alone(session_id, rows, expected_seq, uuids)
            finally:
                self._hand_over(session_id, lane)
        if lane.loop is not loop:  # a store shared by event loops: no combining across
            return await self._appender.append_alone(session_id, rows, expected_seq, uuids)
        call = Call(rows, expected_seq, uuids, loop.create_future())
        lane.waiting.append(call)
        return await _wait(call, loop)

    def _hand_over(self, session_id: str, lane: _Lane) -> None:
        """After the append in flight: send the calls that came meanwhile, or close the
        lane."""
        if lane.waiting and any(not c.gone for c in lane.waiting):
            self._appender.in_background(self._drain(session_id, lane))
        elif self._lanes.get(session_id) is lane:
            del self._lanes[session_id]

    async def _drain(self, session_id: str, lane: _Lane) -> None:
        """Send the lane's waiting calls as one batch, then the next, until none wait."""
        batch: list[Call] = []
        try:
            while True:
                batch = [c for c in lane.waiting if not c.gone]
                lane.waiting = []
                if not batch:
                    return
                for call in batch:
                    call.taken = True
                await self._run(session_id, batch)
                # One turn of the loop (not a timer): the callers just answered run, and
                # those that append again at once join the next batch instead of each
                # round starting with one of them alone.
                await asyncio.sleep(0)
        finally:
            if self._lanes.get(session_id) is lane:
                del self._lanes[session_id]
            for call in (*batch, *lane.waiting):  # unsettled only if the drain was cancelled
                call.settle(asyncio.CancelledError())

    async def _run(self, session_id: str, batch: list[Call]) -> None:
        """One batch: every call's outcome delivered to it."""
        app = self._appender
        if len(batch) == 1:
            await _deliver(batch[0], app.append_alone(session_id, *_args(batch[0])))
            return
        self.batches += 1
        self.combined_calls += len(batch)
        try:
            if all(c.expected_seq is None and not c.uuids for c in batch):
                records = await app.append_plain(session_id, [r for c in batch for r in c.rows])
                outcomes: list[list[Record] | SessionDBError] = []
                at = 0
                for call in batch:
                    outcomes.append(records[at : at + len(call.rows)])
                    at += len(call.rows)
            else:
                outcomes = await app.append_transaction(
                    lambda tx: _combined_in(app, tx, session_id, batch),
                    outcome_unknown_ok=all(c.uuids for c in batch),
                )
        except (SessionNotFoundError, StoreClosedError, BusyError) as exc:
            _fail_all(batch, exc)  # each alone would have met the same
        except DatabaseUnavailableError as exc:
            if not exc.outcome_unknown:
                _fail_all(batch, exc)  # retried already, as alone
                return
            # Written or not: the calls with uuids find out by running again (as alone);
            # the others cannot, and learn that it is unknown.
            for call in batch:
                if call.uuids:
                    await self._alone(session_id, call)
                else:
                    call.settle(exc)
        except (SessionDBError, IntegrityViolation):
            # Refused by the database as a whole (a constraint, a value): one call at a
            # time, in order, so that the bad one fails alone and the others land.
            for call in batch:
                await self._alone(session_id, call)
        except Exception as exc:  # not the database's answer: each call would meet it
            _fail_all(batch, exc)
        else:
            for call, outcome in zip(batch, outcomes, strict=True):
                call.settle(outcome)

    async def _alone(self, session_id: str, call: Call) -> None:
        if call.gone:
            call.settle(asyncio.CancelledError())  # cancelled; nothing of it was written
        else:
            await _deliver(call, self._appender.append_alone(session_id, *_args(call)))


def _args(call: Call) -> tuple[list[NewRecord], int | None, Sequence[str]]:
    return call.rows, call.expected_seq, call.uuids


async def _deliver(call: Call, work: Awaitable[list[Record]]) -> None:
    try:
        records = await work
    except asyncio.CancelledError:
        call.settle(asyncio.CancelledError())
        raise
    except Exception as exc:
        call.settle(exc)
    else:
        call.settle(records)


def _fail_all(batch: Sequence[Call], exc: BaseException) -> None:
    for call in batch:
        call.settle(exc)


async def _wait(call: Call, loop: asyncio.AbstractEventLoop) -> list[Record]:
    """The caller's wait for its outcome. A cancel before the batch starts takes the call
    out; after, it waits for the batch, and a commit that happened is returned."""
    cancelled = False
    try:
        await call.wake
    except asyncio.CancelledError:
        call.gone = True
        if not call.taken:
            raise
        cancelled = True
        while call.outcome is None:
            call.wake = loop.create_future()
            with contextlib.suppress(asyncio.CancelledError):
                await call.wake
    outcome = call.outcome
    assert outcome is not None
    if isinstance(outcome, BaseException):
        if cancelled:
            raise asyncio.CancelledError() from None
        raise outcome
    return outcome


async def _combined_in(
    app: Appender, tx: Transaction, session_id: str, batch: Sequence[Call]
) -> list[list[Record] | SessionDBError]:
    """The batch inside one transaction, for calls with uuids or an expected head: each
    call's records, or its :class:`SeqConflictError`, as it would have met alone."""
    head = None
    if any(c.expected_seq is not None for c in batch):
        head = await app.lock_head(tx, session_id)
    uuids = [u for c in batch for u in c.uuids]
    stored = await app.stored_uuids(tx, session_id, uuids) if uuids else {}
    base = head
    new_rows: list[NewRecord] = []
    claimed: dict[str, int] = {}  # uuid -> its place among new_rows
    plans: list[list[Record | int] | SessionDBError] = []
    for call in batch:
        picks: list[Record | int | None] = []
        fresh: list[NewRecord] = []
        for row in call.rows:
            uuid = row.uuid
            if uuid is not None and uuid in stored:
                picks.append(stored[uuid])
            elif uuid is not None and uuid in claimed:
                picks.append(claimed[uuid])
            else:
                picks.append(None)
                fresh.append(row)
        if fresh and call.expected_seq is not None and call.expected_seq != head:
            assert head is not None
            plans.append(SeqConflictError(session_id, call.expected_seq, head))
            continue
        plan: list[Record | int] = []
        for pick, row in zip(picks, call.rows, strict=True):
            if pick is None:
                if row.uuid is not None:
                    claimed[row.uuid] = len(new_rows)
                pick = len(new_rows)
                new_rows.append(row)
            plan.append(pick)
        plans.append(plan)
        if head is not None:
            head += len(fresh)
    records = await app.append_in(tx, session_id, new_rows, base) if new_rows else []
    return [
        p if isinstance(p, SessionDBError) else [records[x] if isinstance(x, int) else x for x in p]
        for p in plans
    ]
