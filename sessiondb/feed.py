"""The change feed: ``store.watch(session_id)`` and ``store.watch_all()`` (issue 26).

- **A watch re-reads, a wake-up only hurries it.** A watch remembers the last seq it
  delivered, reads the session's records after it (one indexed query), yields them and
  waits to be woken. Whatever wakes it, and however often, each record comes once and in
  seq order; a wake-up that is lost (a reconnect, a bulk import, which sends none) costs
  latency only: every watch re-reads at least every :data:`RESCAN` seconds anyway.
- **One feed per store**, started by its first watch (or waiting turn) and stopped with
  the last, multiplexed over all of them.
- **Postgres: LISTEN/NOTIFY.** Every append's own statement calls ``pg_notify`` (see
  :func:`sessiondb.statements.append_one`), so the notification leaves when the append
  commits and never for one that rolls back; the feed's one connection outside the pool
  LISTENs and wakes the session's watches. When that connection is lost the feed
  reconnects (with backoff) and wakes every watch, which re-reads from its last seq:
  nothing is lost.
- **PgBouncer in transaction mode** cannot deliver notifications (the LISTEN stays on a
  server connection the client no longer holds). The store option ``feed="auto"``
  (the default) sends a probe from a pooled connection after LISTEN and polls instead
  when it does not arrive within :data:`PROBE_SECONDS`; ``feed="poll"`` polls from the start,
  ``feed="listen"`` never falls back.
- **Polling** (SQLite always; Postgres when told or when the probe failed): each tick
  reads SQLite's ``PRAGMA data_version`` and, only when it moved (on Postgres: always),
  the heads of the watched sessions; every :data:`POLL_FIRST` seconds after a change,
  backing off 1.5 times per idle tick to :data:`POLL_MAX`.
- **watch_all** yields ``(session_id, head seq)``: on Postgres straight from the
  notifications; when polling, and after a reconnect, from the namespace's sessions with
  message activity in the last moments (the ``(namespace, last_message_at)`` index).
- **Turns.** A release on Postgres notifies ``t <session> <namespace>`` in its own
  statement (:func:`sessiondb.statements.turn_release`); the feed wakes
  the store's turn waiters (:class:`sessiondb.core.TurnWakeups`), so a waiter in another
  process takes the turn at once instead of at its next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime, timedelta

from . import statements as q
from .backends.base import Listening, Listens, Versioned
from .core import Core, now
from .errors import DatabaseUnavailableError, SessionDBError, StoreClosedError
from .ids import check_session_id
from .models import Record
from .rows import records_from_rows, utc
from .validation import strict_int

#: Records read per query while a watch catches up.
PAGE = 500
#: Polling: the tick after a change, and the longest one while nothing changes.
POLL_FIRST = 0.005
POLL_MAX = 0.1
#: A watch re-reads at least this often, woken or not (bulk imports notify nobody).
RESCAN = 5.0
#: ``feed="auto"``: how long LISTEN's own probe may take before the feed polls instead.
PROBE_SECONDS = 2.0
#: The LISTEN connection is pinged this often when quiet (a dead peer is noticed).
PING_SECONDS = 10.0
#: After a turn waiter's wait, the feed keeps listening this long for the next one (a
#: store that waits for turns often keeps one LISTEN connection, not one per wait).
TURN_LINGER = 30.0
#: A watch whose database stays away this long ends with the error.
UNAVAILABLE_S = 60.0
#: Reconnect waits: from the first to the longest.
RECONNECT_FIRST = 0.05
RECONNECT_MAX = 2.0
#: watch_all when polling: sessions whose last message is this much older than the
#: newest one seen are looked at again (a writer's clock and its commit can lag).
ACTIVITY_SLACK = timedelta(seconds=5)
ACTIVITY_ROWS = 1000


class _Waiter:
    """One watch: woken when its session's head passes the last seq it delivered."""

    def __init__(self, seen: int) -> None:
        self.seen = seen
        self.event = asyncio.Event()

    def wake_past(self, head: int) -> None:
        if head > self.seen:
            self.event.set()


class Feed:
    """The change feed of one store (one per :class:`Core`, made by :func:`feed_of`)."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._waiters: dict[str, set[_Waiter]] = {}
        self._queues: set[asyncio.Queue[tuple[str, int]]] = set()
        self._known: dict[str, int] = {}  # watch_all: the last head reported per session
        self._since: datetime = now() - ACTIVITY_SLACK
        self._users = 0
        self._task: asyncio.Task[None] | None = None
        self._probe: tuple[str, asyncio.Event] | None = None
        self._lingering: asyncio.TimerHandle | None = None
        #: ``listen`` or ``poll`` once the running feed has decided; None while stopped.
        self.mode: str | None = None

    # -- who uses the feed -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, linger: float = 0.0) -> AsyncIterator[None]:
        """The feed runs for the block (shared with every other block); ``linger``: when
        the block was the last, the feed stops that many seconds later (unless another
        block starts meanwhile) instead of at once."""
        self._users += 1
        if self._lingering is not None:
            self._lingering.cancel()
            self._lingering = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sessiondb-feed")
        try:
            yield
        finally:
            self._users -= 1
            if self._users == 0:
                if linger > 0:
                    loop = asyncio.get_running_loop()
                    self._lingering = loop.call_later(linger, self._stop_unused)
                else:
                    await self._stop()

    def _stop_unused(self) -> None:
        self._lingering = None
        if self._users == 0 and self._task is not None:
            self._task.cancel()  # its own ``finally`` closes the LISTEN connection
            self._task = None
            self.mode = None

    async def _stop(self) -> None:
        if self._lingering is not None:
            self._lingering.cancel()
            self._lingering = None
        task, self._task = self._task, None
        self.mode = None
        # Cancelled again until it ends: a cancellation that races a completing wait
        # can be lost on Python 3.11.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if task is not None and not task.cancelled():
            task.exception()  # retrieved: its errors were the feed's own

    async def close(self) -> None:
        """Stop the feed (the store closes); watches still open re-read until they end."""
        await self._stop()

    @contextlib.asynccontextmanager
    async def watching(self, session_id: str, waiter: _Waiter) -> AsyncIterator[None]:
        self._waiters.setdefault(session_id, set()).add(waiter)
        try:
            async with self.running():
                yield
        finally:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[session_id]

    @contextlib.asynccontextmanager
    async def watching_all(self, queue: asyncio.Queue[tuple[str, int]]) -> AsyncIterator[None]:
        if not self._queues:
            self._known.clear()
            self._since = now() - ACTIVITY_SLACK
            await self._scan_activity(report=False)
        self._queues.add(queue)
        try:
            async with self.running():
                yield
        finally:
            self._queues.discard(queue)

    # -- what wakes whom ---------------------------------------------------------------

    def _on_payload(self, payload: str) -> None:
        """A notification: ``r <head> <session> <namespace>``, ``t <session>
        <namespace>`` (a turn released) or ``p <token>`` (the probe)."""
        kind, _, rest = payload.partition(" ")
        if kind == "r":
            head, _, rest = rest.partition(" ")
            session_id, _, namespace = rest.partition(" ")
            if namespace == self._core.namespace and head.isdigit():
                self._advanced(session_id, int(head))
        elif kind == "t":
            session_id, _, namespace = rest.partition(" ")
            if namespace == self._core.namespace:
                self._core.turn_wakeups.wake(session_id)
        elif kind == "p" and self._probe is not None and self._probe[0] == rest:
            self._probe[1].set()

    def _advanced(self, session_id: str, head: int) -> bool:
        """The session's head is ``head``: wake its watches, tell watch_all."""
        for waiter in self._waiters.get(session_id, ()):
            waiter.wake_past(head)
        if self._queues and head > self._known.get(session_id, -1):
            self._known[session_id] = head
            for queue in self._queues:
                queue.put_nowait((session_id, head))
            return True
        return False

    def _wake_everyone(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.event.set()

    # -- the feed's task ---------------------------------------------------------------

    async def _run(self) -> None:
        backend = self._core.backend
        mode = self._core.settings.feed
        try:
            if (
                mode != "poll"
                and isinstance(backend, Listens)
                and await self._listen(backend, probe=mode == "auto")
            ):
                return
            self.mode = "poll"
            self._wake_everyone()
            await self._poll()
        except StoreClosedError:
            return

    async def _listen(self, backend: Listens, *, probe: bool) -> bool:
        """LISTEN, and again after every loss, until cancelled; False when the probe
        found that notifications do not come back (PgBouncer): then the caller polls."""
        delay = RECONNECT_FIRST
        while True:
            try:
                conn = await backend.listen(q.FEED_CHANNEL, self._on_payload)
            except StoreClosedError:
                raise
            except SessionDBError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            try:
                if probe:
                    if not await self._probed():
                        return False
                    probe = False
                self.mode = "listen"
                delay = RECONNECT_FIRST
                # Whatever was committed while nobody listened is read again now.
                self._wake_everyone()
                if self._queues:
                    await self._scan_activity(report=True)
                await self._until_lost(conn)
            except StoreClosedError:
                raise
            except SessionDBError:
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def _probed(self) -> bool:
        token = secrets.token_hex(8)
        arrived = asyncio.Event()
        self._probe = (token, arrived)
        try:
            # From another connection (the pool's), as every real notification comes:
            # behind PgBouncer in transaction mode the LISTEN connection would hear its
            # own, but never another's.
            await self._core.backend.execute(q.notify(f"p {token}"))
            return await _set_within(arrived, PROBE_SECONDS)
        finally:
            self._probe = None

    async def _until_lost(self, conn: Listening) -> None:
        while not conn.lost.is_set():
            if not await _set_within(conn.lost, PING_SECONDS):
                await conn.ping()

    async def _poll(self) -> None:
        backend = self._core.backend
        delay = POLL_FIRST
        version: int | None = None
        while True:
            moved = False
            try:
                changed = True
                if isinstance(backend, Versioned):
                    latest = await backend.data_version()
                    changed = latest is None or latest != version
                    version = latest
                if changed:
                    moved = await self._poll_heads()
                    if self._queues:
                        moved = await self._scan_activity(report=True) or moved
            except StoreClosedError:
                raise
            except SessionDBError:
                version = None  # look again properly once the database answers
            delay = POLL_FIRST if moved else min(delay * 1.5, POLL_MAX)
            await asyncio.sleep(delay)

    async def _poll_heads(self) -> bool:
        if not self._waiters:
            return False
        core = self._core
        ids = sorted(self._waiters)
        rows = await core.backend.fetch(q.session_heads(core.namespace, ids, core.flavour))
        moved = False
        for row in rows:
            head = int(row[1])
            for waiter in self._waiters.get(row[0], ()):
                moved = moved or head > waiter.seen
                waiter.wake_past(head)
        return moved

    async def _scan_activity(self, *, report: bool) -> bool:
        """watch_all without notifications: sessions with recent message activity whose
        head moved. ``report=False`` only learns the heads (a new watch_all)."""
        bound = q.recent_activity(self._core.namespace, self._since, ACTIVITY_ROWS)
        rows = await self._core.backend.fetch(bound)
        moved = False
        for row in rows:
            session_id, head = row[0], int(row[1])
            self._since = max(self._since, utc(row[2]) - ACTIVITY_SLACK)
            if report:
                moved = self._advanced(session_id, head) or moved
            else:
                self._known[session_id] = max(head, self._known.get(session_id, -1))
        return moved


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` is set within ``seconds`` (``asyncio.timeout``: unlike
    ``wait_for`` on Python 3.11, it never swallows a cancellation)."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


def feed_of(core: Core) -> Feed:
    """The store's feed, made on first use."""
    feed = core.feed
    if not isinstance(feed, Feed):
        feed = Feed(core)
        core.feed = feed
    return feed


def check_from_seq(from_seq: object) -> int | None:
    """``from_seq``: None, or an int >= 0.

    Raises:
        InvalidInputError: anything else.
    """
    if from_seq is None:
        return None
    return strict_int(from_seq, "from_seq", minimum=0)


async def watch(core: Core, session_id: str, from_seq: int | None) -> AsyncGenerator[Record, None]:
    """The records committed to the session after ``from_seq`` (default: its head now),
    in seq order, each once, until the caller stops iterating (see the module doc).

    A database that stays away for :data:`UNAVAILABLE_S` ends the watch with its
    DatabaseUnavailableError, and a session deleted meanwhile with SessionNotFoundError
    (noticed within :data:`RESCAN` seconds).
    """
    check_session_id(session_id)
    start = check_from_seq(from_seq)
    head = (await core.session(session_id)).last_seq  # raises when the session is missing
    waiter = _Waiter(head if start is None else start)
    loop = asyncio.get_running_loop()
    async with feed_of(core).watching(session_id, waiter):
        quiet = False  # the last wait ended with no wake-up
        away_since: float | None = None
        while True:
            waiter.event.clear()
            bound = q.lineage_records(
                session_id,
                core.namespace,
                include_tombstoned=True,
                include_superseded=True,
                from_seq=waiter.seen + 1,
                limit=PAGE,
                flavour=core.flavour,
                sealed=core.encrypted,
            )
            try:
                rows = await core.backend.fetch(bound)
                if quiet and not rows:
                    await core.session(session_id)  # raises once the session is deleted
            except DatabaseUnavailableError:
                away_since = loop.time() if away_since is None else away_since
                if loop.time() - away_since > UNAVAILABLE_S:
                    raise
                await asyncio.sleep(RECONNECT_MAX)
                continue
            away_since = None
            for record in records_from_rows(rows):
                if record.seq > waiter.seen:
                    waiter.seen = record.seq
                    yield record
            quiet = False
            if len(rows) < PAGE:
                quiet = not await _set_within(waiter.event, RESCAN)


async def watch_all(core: Core) -> AsyncGenerator[tuple[str, int], None]:
    """``(session_id, head seq)`` each time a session of the namespace moves on, from
    now on (see the module doc)."""
    queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
    async with feed_of(core).watching_all(queue):
        while True:
            yield await queue.get()


@contextlib.asynccontextmanager
async def turn_wakeups(core: Core) -> AsyncIterator[None]:
    """While a turn waiter waits: on Postgres, the feed runs, and a release in any
    process wakes the waiter (elsewhere, and polling, the waiter polls as before)."""
    if not isinstance(core.backend, Listens) or core.settings.feed == "poll":
        yield
        return
    async with feed_of(core).running(linger=TURN_LINGER):
        yield


def notifies(core: Core) -> bool:
    """Whether the store tells other processes of its turn releases (Postgres, unless
    ``feed="poll"``): the release statement then calls ``pg_notify``."""
    return isinstance(core.backend, Listens) and core.settings.feed != "poll"
