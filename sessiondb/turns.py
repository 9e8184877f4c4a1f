"""Turns: one holder at a time per session, across processes and hosts (spec S7.10).

``async with store.turn(session_id) as turn`` queues a row in ``sessiondb_turns`` and
returns once it holds the session's turn; ``turn.append`` writes only while the turn is
still held. The design, and why:

- **A lease row, not a lock held open.** An agent turn lasts minutes; a session-level
  advisory lock or a ``SELECT … FOR UPDATE`` would pin a pooled connection (and, for the
  row lock, a transaction) for all of it, and PgBouncer in transaction mode cannot keep a
  session lock at all. A row costs one short transaction to take, one statement to
  renew and one to release, works the same on SQLite, and says who holds the turn.
- **A queue by ticket.** Each caller inserts a row with the next ticket of the session;
  the row with the lowest ticket holds the turn and the others wait behind it in
  arrival order. Every row carries a lease (``expires_at``, the database's clock):
  the holder's renews itself in the background while its process lives, a waiter's with
  each poll. A row whose lease ran out is dead for good (renewal refuses it) and is
  deleted by the next caller to look, so a holder that dies frees the session within one
  lease.
- **Fencing.** ``turn.append`` renews the lease inside the append's transaction and
  writes nothing when that finds no live row: a holder that lost its lease (a long pause,
  a partition) can never write between its successor's records. The renewal takes the
  row's lock, and a successor's purge of the expired row waits on it, so a fenced append
  in flight commits before the successor holds the turn, or fails.
- **Polling, with wake-ups.** Waiters poll with backoff (5 ms, growing to 250 ms at
  most); a release in the same store wakes its waiters at once, and on Postgres a
  release in any process does too, through the change feed (:mod:`sessiondb.feed`): a
  waiting store LISTENs on one connection of its own while it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import secrets
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .backends import IntegrityViolation, Transaction
from .core import Core, HasCore, core_of
from .errors import (
    InvalidInputError,
    LeaseLostError,
    SessionDBError,
    SessionNotFoundError,
    StoreClosedError,
    TurnTimeoutError,
)
from .ids import check_session_id
from .lazy import lazy_modules
from .models import Message, Record
from .rows import utc
from .validation import column_text

if TYPE_CHECKING:
    from . import feed
    from . import statements as q
else:  # the change feed: only a turn that waits or releases uses it; the statements:
    # SQLAlchemy's, imported when first used (sessiondb.shapes says why)
    feed, q = lazy_modules("feed statements")

DEFAULT_LEASE = 30.0
MIN_LEASE = 0.1
MAX_LEASE = 86_400.0
MAX_HOLDER_CHARS = 255
# The first wait between polls, and the longest (a release in another process is seen
# within this); each wait is 1.5 times the last, jittered, and at most a third of the
# lease, so that a waiter renews its place in time.
POLL_FIRST = 0.005
POLL_MAX = 0.25
# Attempts at a ticket when other callers take the same one at the same moment.
ENQUEUE_ATTEMPTS = 8


def default_holder() -> str:
    """``host:pid``: who is working, when the caller gives no label."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class TurnArgs:
    """``store.turn``'s arguments, checked."""

    timeout: float | None
    lease: float
    holder: str


def check_args(timeout: object, lease: object, holder: object) -> TurnArgs:
    """Refuse bad arguments before anything is written.

    Raises:
        InvalidInputError: ``timeout`` is not None or a number >= 0, ``lease`` not a
            number of seconds in 0.1..86400, ``holder`` not a non-empty label.
    """
    wait: float | None = None
    if timeout is not None:
        wait = _seconds(timeout)
        if wait is None or not math.isfinite(wait) or wait < 0:
            raise InvalidInputError(
                f"timeout must be None or a number of seconds >= 0, got {timeout!r}"
            )
    seconds = _seconds(lease)
    if seconds is None or not MIN_LEASE <= seconds <= MAX_LEASE:
        raise InvalidInputError(
            f"lease must be a number of seconds in {MIN_LEASE:g}..{MAX_LEASE:g}, got {lease!r}"
        )
    if holder is None:
        label = default_holder()
    else:
        label = column_text(holder, "holder") or ""
        if not label.strip() or len(label) > MAX_HOLDER_CHARS:
            raise InvalidInputError(
                f"holder must be a non-empty label of at most {MAX_HOLDER_CHARS} characters, "
                f"got {holder!r}"
            )
    return TurnArgs(wait, seconds, label)


def _seconds(value: object) -> float | None:
    """A number of seconds as a float; None for anything else (a bool, a huge int)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


@dataclass
class Ahead:
    """Who holds the turn a waiter waits for, and since when."""

    holder: str | None = None
    since: datetime | None = None


class Turn:
    """A held turn on one session: write with :meth:`append` while it is held.

    Made by :meth:`SessionStore.turn`; the lease renews itself in the background until
    the ``async with`` block ends, which releases it.
    """

    def __init__(
        self,
        store: HasCore | Core,
        session_id: str,
        *,
        ticket: int,
        token: str,
        holder: str,
        lease: float,
        acquired_at: datetime,
        expires_at: datetime,
    ) -> None:
        # A store hands over its core; the turn never needs more of it.
        self._core = core_of(store)
        self.session_id = session_id
        self.holder = holder
        self.lease = lease
        #: When the turn was taken, and until when its lease runs (database time).
        self.acquired_at = acquired_at
        self.expires_at = expires_at
        self.ticket = ticket
        self.token = token
        self._lost = False
        self._released = False
        self._renewer: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "lost" if self._lost else "released" if self._released else "held"
        return f"<Turn {self.session_id} holder={self.holder!r} {state}>"

    @property
    def lost(self) -> bool:
        """Whether the lease is known to be lost (a renewal or a fenced append found it
        gone). ``False`` is no promise: only :meth:`append` checks atomically."""
        return self._lost

    async def append(
        self,
        messages: Sequence[Message | Mapping[str, Any]] | Message | Mapping[str, Any],
        expected_seq: int | None = None,
    ) -> list[Record]:
        """:meth:`SessionStore.append`, fenced: in the same transaction, the lease is
        checked (and renewed); if it is lost, nothing is written.

        Raises:
            LeaseLostError: the lease expired or another holder took the session.
            and what :meth:`SessionStore.append` raises.
        """
        rows = self._core.message_rows(messages)
        return await self._core.append(
            self.session_id, rows, expected_seq=expected_seq, fence=self._fence
        )

    async def renew(self) -> datetime:
        """Extend the lease now (the background renewal does this every third of the
        lease); returns the new expiry, database time.

        Raises:
            LeaseLostError: the lease had run out already.
        """
        core = self._core
        bound = q.turn_renew(self.session_id, self.ticket, self.token, self.lease, core.flavour)
        return self._renewed(await core.backend.execute(bound))

    async def _fence(self, tx: Transaction) -> None:
        core = self._core
        bound = q.turn_renew(self.session_id, self.ticket, self.token, self.lease, core.flavour)
        self._renewed(await tx.fetch(bound))

    def _renewed(self, rows: list[Any]) -> datetime:
        if not rows:
            self._lost = True
            detail = " (released)" if self._released else ""
            raise LeaseLostError(self.session_id, self.holder, detail)
        self.expires_at = utc(rows[0][0])
        return self.expires_at

    def _start_renewing(self) -> None:
        self._renewer = asyncio.get_running_loop().create_task(
            self._renew_forever(), name=f"sessiondb-turn-renew-{self.session_id}"
        )

    async def _renew_forever(self) -> None:
        # A third of the lease: two renewals can fail (the database restarting) before
        # the lease runs out.
        every = self.lease / 3
        while True:
            await asyncio.sleep(every)
            try:
                await self.renew()
            except (LeaseLostError, StoreClosedError):
                return
            except SessionDBError:
                continue  # the database is away: try again; append is the fence anyway

    async def _stop_renewing(self) -> None:
        task, self._renewer = self._renewer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def release(self) -> None:
        """End the turn: the next waiter may take it. Idempotent. A release that cannot
        reach the database is dropped: the lease then runs out by itself. Only the
        session's own namespace can release it (the token alone is not enough)."""
        await self._stop_renewing()
        if self._released:
            return
        self._released = True
        core = self._core
        notify = feed.notifies(core)
        with contextlib.suppress(SessionDBError):
            await core.backend.execute(
                q.turn_release(self.session_id, core.namespace, self.token, notify=notify)
            )
        core.turn_wakeups.wake(self.session_id)


@contextlib.asynccontextmanager
async def hold(core: Core, session_id: str, args: TurnArgs) -> AsyncIterator[Turn]:
    """Wait for the session's turn, hold it for the block, release it after."""
    turn = await acquire(core, session_id, args)
    try:
        yield turn
    finally:
        await asyncio.shield(turn.release())


async def acquire(core: Core, session_id: str, args: TurnArgs) -> Turn:
    """Queue for the session's turn and wait until it is ours (see the module doc).

    Raises:
        SessionNotFoundError: no such session in the store's namespace.
        TurnTimeoutError: still not ours after ``args.timeout`` seconds.
    """
    check_session_id(session_id)
    loop = asyncio.get_running_loop()
    deadline = None if args.timeout is None else loop.time() + args.timeout
    board = core.turn_wakeups
    token = secrets.token_hex(16)
    try:
        ticket, claimed, ahead = await _enqueue(core, session_id, token, args)
        if claimed is None:
            with board.waiting(session_id):
                async with feed.turn_wakeups(core):
                    ticket, claimed = await _wait(
                        core, session_id, token, args, deadline, ahead, ticket
                    )
    except BaseException:
        with contextlib.suppress(Exception):
            # By token: the row is found whatever ticket it holds now.
            release = q.turn_release(session_id, core.namespace, token, notify=feed.notifies(core))
            await asyncio.shield(core.backend.execute(release))
        board.wake(session_id)
        raise
    acquired_at, expires_at = claimed
    turn = Turn(
        core,
        session_id,
        ticket=ticket,
        token=token,
        holder=args.holder,
        lease=args.lease,
        acquired_at=acquired_at,
        expires_at=expires_at,
    )
    turn._start_renewing()
    return turn


Claimed = tuple[datetime, datetime] | None


async def _wait(
    core: Core,
    session_id: str,
    token: str,
    args: TurnArgs,
    deadline: float | None,
    ahead: Ahead,
    ticket: int,
) -> tuple[int, tuple[datetime, datetime]]:
    """Poll, with backoff and wake-ups, until the turn is ours: (ticket, claimed)."""
    loop = asyncio.get_running_loop()
    delay = POLL_FIRST
    longest = min(POLL_MAX, args.lease / 3)
    claimed: Claimed = None
    while claimed is None:
        now = loop.time()
        if deadline is not None and now >= deadline:
            assert args.timeout is not None
            raise TurnTimeoutError(session_id, args.timeout, ahead.holder, ahead.since)
        wait = delay * random.uniform(0.5, 1.0)
        if deadline is not None:
            wait = min(wait, deadline - now)
        await core.turn_wakeups.wait(session_id, wait)
        delay = min(delay * 1.5, longest)
        ticket, claimed, ahead = await _poll(core, session_id, ticket, token, args)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # A cancel that came while the poll's COMMIT ran on SQLite's writer was held
            # back until the commit ended and not raised (a commit that happened is
            # returned): raise it here, or this waiter would wait for ever.
            raise asyncio.CancelledError
    return ticket, claimed


async def _enqueue(
    core: Core, session_id: str, token: str, args: TurnArgs
) -> tuple[int, Claimed, Ahead]:
    """Queue a row: ours at once when the session has no other row (one statement);
    else one :func:`_poll` right away, which clears dead rows and says who is ahead."""
    bound = q.turn_enqueue(session_id, core.namespace, token, args.holder, args.lease, core.flavour)
    for attempt in range(ENQUEUE_ATTEMPTS):
        try:
            rows = await core.backend.execute(bound)
            break
        except IntegrityViolation:
            # Another caller took the same ticket first (or the session went away).
            if attempt == ENQUEUE_ATTEMPTS - 1:
                raise
            await asyncio.sleep(POLL_FIRST * random.uniform(0.5, 1.0) * (attempt + 1))
    if not rows:
        raise SessionNotFoundError(session_id, core.namespace)
    ticket, acquired_at, expires_at = rows[0][0], rows[0][1], rows[0][2]
    if acquired_at is not None:
        return int(ticket), (utc(acquired_at), utc(expires_at)), Ahead()
    return await _poll(core, session_id, int(ticket), token, args)


async def _poll(
    core: Core, session_id: str, ticket: int, token: str, args: TurnArgs
) -> tuple[int, Claimed, Ahead]:
    """One look: purge dead rows, renew ours, take the turn if no row is ahead. Returns
    (our ticket, claimed, who is ahead); a row whose lease ran out while we waited (this
    process was paused) is queued again, at the back."""
    flavour = core.flavour

    async def unit(tx: Transaction) -> tuple[Claimed, Ahead | None]:
        await tx.fetch(q.turn_purge(session_id, flavour))
        return await _claim(tx, session_id, ticket, token, args.lease, flavour)

    claimed, ahead = await core.transact(unit)
    if claimed is None and ahead is None:
        return await _enqueue(core, session_id, token, args)
    return ticket, claimed, ahead or Ahead()


async def _claim(
    tx: Transaction, session_id: str, ticket: int, token: str, lease: float, flavour: str
) -> tuple[Claimed, Ahead | None]:
    """(claimed, None) when the turn is ours; (None, who is ahead) while we wait;
    (None, None) when our row is gone."""
    rows = await tx.fetch(q.turn_claim(session_id, ticket, token, lease, flavour))
    if not rows:
        return None, None
    acquired_at, expires_at = rows[0][0], rows[0][1]
    if acquired_at is not None:
        return (utc(acquired_at), utc(expires_at)), None
    first = await tx.fetch(q.turn_ahead(session_id, ticket, flavour))
    if not first:
        return None, Ahead()
    holder, since = first[0][0], first[0][1]
    return None, Ahead(holder, utc(since) if since is not None else None)
