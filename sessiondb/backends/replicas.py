"""Reads spread over read replicas (hot standbys), each read seeing this store's own
earlier writes.

:class:`ReplicaBackend` is a :class:`~sessiondb.backends.base.Backend` in front of a
primary and its replicas. Writes, transactions and migrations go to the primary; a read
outside a transaction (``fetch``) goes to a healthy replica, in turn, if that replica is
known to have this store's writes, and to the primary otherwise.

How a read knows a replica has the store's writes ("read your own writes"):

- Every write through this store returns its *mark* from its own statement: the
  transaction id and the WAL insert position (the append's RETURNING carries them, so
  an append stays one statement). :class:`WriteLog` keeps the marks not yet seen on
  every replica; a write that began after another ended covers it (its commit comes
  later in the WAL, and a standby makes commits visible in WAL order), so only
  overlapping writes are kept side by side.
- A read on a replica that has not yet been seen to have them carries them as a
  one-time filter of the same statement: rows come back only if the replica has replayed
  past the marks' WAL position (``pg_last_wal_replay_lsn()``) and every marked
  transaction is below the xmin of the read's own snapshot (on a standby, a snapshot
  keeps its running transactions where ``pg_current_snapshot()`` does not show them, so
  ``pg_visible_in_snapshot`` would say yes to one still running). The WAL position alone is
  not enough: the append's RETURNING runs before its commit record is written, and the
  replay position is read after the snapshot was taken. A read that returns nothing
  this way is read again on the primary (the replica may only be behind).
- Once a replica returned rows for a check, it is known to have every write up to then
  (replay only moves forward), and later reads go to it with no check: the common read
  costs no extra round trip.
- A write whose outcome is unknown (the connection broke after it was sent) sends every
  read to the primary until a later write covers it.

"Own writes" are those of this store object: another process's or another store's write
is ordered by the database, not by this store.

Health: each replica is probed (``pg_is_in_recovery``, replay position and lag) when
first used, then in the background at most every :data:`PROBE_SECONDS`. One that is not
in recovery, lags more than ``max_replica_lag`` seconds, or fails a read or a probe, is
skipped until a later probe finds it well. A failed read on a replica is not an error:
the read goes to the primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy.engine import Connection

from ..config import Settings, masked_url
from ..errors import BusyError, ConfigurationError, DatabaseUnavailableError
from ..statements import Bound
from .base import CALL_STATS, Row, Transaction

T = TypeVar("T")

# A write's mark: its transaction id (xid8) and WAL insert position, both as text.
Mark = tuple[str, str]

# Seconds between health probes of one replica (each in the background).
PROBE_SECONDS = 1.0
# More overlapping writes than this not yet seen on a replica: reads go to the primary.
MAX_OPEN_MARKS = 256


class PrimaryServer(Protocol):
    """What the router needs of the primary (:class:`~.postgres.PostgresBackend`)."""

    flavour: str

    async def fetch(self, bound: Bound, *, plain: bool = False) -> list[Row]: ...

    async def execute_marked(self, bound: Bound) -> tuple[list[Row], Mark | None]: ...

    async def append_marked(
        self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]
    ) -> tuple[int | None, Mark | None]: ...

    def transaction(self) -> AbstractAsyncContextManager[Transaction]: ...

    async def run_sync(self, fn: Callable[[Connection], T], *, exclusive: bool = False) -> T: ...

    async def close(self) -> None: ...


class ReplicaServer(Protocol):
    """What the router needs of one replica (:class:`~.postgres.PostgresBackend`)."""

    async def fetch_replica(
        self, bound: Bound, marks: Sequence[Mark] | None
    ) -> list[Row] | None: ...

    async def probe(self) -> tuple[bool, str | None, float]: ...

    async def close(self) -> None: ...


def lsn_value(lsn: str) -> int:
    """A ``pg_lsn`` text (``16/B374D848``) as a number."""
    high, _, low = lsn.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


class WriteLog:
    """This store's writes, numbered in the order they ended (generations), with the
    marks of those a replica may still lack.

    ``None`` as a mark: a write whose outcome is unknown; reads avoid replicas until a
    later write covers it.
    """

    def __init__(self) -> None:
        self.generation = 0
        self._open: list[tuple[int, Mark | None]] = []  # (generation, mark)

    def begin(self) -> int:
        """The generation a write starting now follows (pass it to :meth:`record`)."""
        return self.generation

    def record(self, started: int, mark: Mark | None) -> None:
        """A write that began after generation ``started`` has ended with ``mark``."""
        self.generation += 1
        # Writes that ended before this one began committed before it: it covers them.
        self._open = [entry for entry in self._open if entry[0] > started]
        self._open.append((self.generation, mark))

    def since(self, seen: int) -> list[Mark] | None:
        """The marks a replica that has every write up to generation ``seen`` must also
        have; ``None`` when a replica cannot be asked (an unknown outcome, or too many)."""
        marks = []
        for generation, mark in self._open:
            if generation > seen:
                if mark is None:
                    return None
                marks.append(mark)
        return None if len(marks) > MAX_OPEN_MARKS else marks


@dataclass
class Replica:
    """One replica's server and what the store knows of it."""

    server: ReplicaServer
    where: str
    reads: int = 0
    well: bool = False
    probed_at: float | None = None
    replay_lsn: str | None = None
    lag: float = 0.0
    seen: int = 0  # the store's write generation its reads are known to include
    probing: asyncio.Task[None] | None = field(default=None, repr=False)


class ReplicaBackend:
    """The primary for writes, the replicas for reads (see the module's doc)."""

    def __init__(
        self, primary: PrimaryServer, replicas: Sequence[Replica], settings: Settings
    ) -> None:
        self.primary = primary
        self.flavour = primary.flavour
        self.replicas = list(replicas)
        self.max_lag = settings.max_replica_lag
        self.session = settings.read_consistency == "session"
        self.log = WriteLog()
        self.primary_reads = 0
        self._turn = itertools.count()

    # -- reads ------------------------------------------------------------------------

    def read_counts(self) -> dict[str, int]:
        """Reads served so far: ``"primary"`` and each replica by its URL (no password)."""
        counts = {"primary": self.primary_reads}
        for replica in self.replicas:
            counts[replica.where] = counts.get(replica.where, 0) + replica.reads
        return counts

    async def fetch(self, bound: Bound, *, plain: bool = False) -> list[Row]:
        replica = await self._pick()
        if replica is not None:
            rows = await self._read_replica(replica, bound)
            if rows is not None:
                return rows
        self.primary_reads += 1
        return await self.primary.fetch(bound, plain=plain)

    async def _pick(self) -> Replica | None:
        """The next well replica in turn (probing those never probed first)."""
        now = time.monotonic()
        for replica in self.replicas:
            if replica.probed_at is None:
                await self._probe(replica)
            elif now - replica.probed_at > PROBE_SECONDS and replica.probing is None:
                replica.probing = asyncio.ensure_future(self._probe(replica))
        well = [r for r in self.replicas if r.well and r.lag <= self.max_lag]
        if not well:
            return None
        return well[next(self._turn) % len(well)]

    async def _read_replica(self, replica: Replica, bound: Bound) -> list[Row] | None:
        """The read on ``replica``, or ``None`` when the primary must answer it."""
        generation = self.log.generation
        marks: list[Mark] | None = []
        if self.session:
            marks = self.log.since(replica.seen)
            if marks is None:
                return None
        try:
            rows = await replica.server.fetch_replica(bound, marks or None)
        except (DatabaseUnavailableError, BusyError, ConfigurationError):
            # Down, a query cancelled by replay (a conflict with recovery), or a schema
            # the replica has not replayed yet: the primary answers (and raises if the
            # fault is its too); the replica waits for a probe to find it well.
            replica.well = False
            return None
        if rows is None:
            return None
        replica.reads += 1
        stats = CALL_STATS.get()
        if stats is not None:
            stats.replica_reads += 1
        replica.seen = max(replica.seen, generation)
        return rows

    async def _probe(self, replica: Replica) -> None:
        try:
            in_recovery, replay_lsn, lag = await replica.server.probe()
        except Exception:  # any failure makes the replica unwell, and no more
            replica.well = False
        else:
            replica.well = in_recovery
            replica.replay_lsn = replay_lsn
            replica.lag = lag
        finally:
            replica.probed_at = time.monotonic()
            replica.probing = None

    # -- writes -----------------------------------------------------------------------

    async def execute(self, bound: Bound) -> list[Row]:
        return await self._logged(lambda: self.primary.execute_marked(bound))

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        return await self._logged(lambda: self.primary.append_marked(head, rows))

    async def _logged(self, write: Callable[[], Awaitable[tuple[T, Mark | None]]]) -> T:
        """Run ``write`` on the primary and log its mark (or, when its outcome is
        unknown, that a replica cannot be trusted until a later write covers it)."""
        started = self.log.begin()
        try:
            result, mark = await write()
        except DatabaseUnavailableError as exc:
            if exc.outcome_unknown:
                self.log.record(started, None)
            raise
        if mark is not None:
            self.log.record(started, mark)
        return result

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        started = self.log.begin()
        try:
            async with self.primary.transaction() as tx:
                yield tx
        except DatabaseUnavailableError as exc:
            if exc.outcome_unknown:
                self.log.record(started, None)
            raise
        mark: Mark | None = getattr(tx, "mark", None)
        if mark is not None:
            self.log.record(started, mark)

    def connection_counts(self) -> list[tuple[str, int, int]]:
        """The pools of the primary and of each replica (see ``CountsConnections``)."""
        counts: list[tuple[str, int, int]] = []
        for server in (self.primary, *(r.server for r in self.replicas)):
            counted = getattr(server, "connection_counts", None)
            if counted is not None:
                counts += counted()
        return counts

    async def run_sync(self, fn: Callable[[Connection], T], *, exclusive: bool = False) -> T:
        # Migrations and table inspection: on the primary. What they wrote carries no
        # mark, so reads stay on the primary until a later write of this store covers it
        # (a replica that has not replayed a migration lacks its tables).
        started = self.log.begin()
        try:
            return await self.primary.run_sync(fn, exclusive=exclusive)
        finally:
            self.log.record(started, None)

    async def close(self) -> None:
        for replica in self.replicas:
            if replica.probing is not None:
                replica.probing.cancel()
                with contextlib.suppress(BaseException):
                    await replica.probing
        await asyncio.gather(
            self.primary.close(),
            *(r.server.close() for r in self.replicas),
            return_exceptions=True,
        )


def replica_backend(
    settings: Settings,
    primary: PrimaryServer,
    open_replica: Callable[[Settings], ReplicaServer],
) -> ReplicaBackend:
    """The router for ``settings.replica_urls``: one server per URL, opened lazily."""
    replicas = []
    for i, url in enumerate(settings.replica_urls):
        try:
            server = open_replica(settings.for_replica(url))
        except ConfigurationError as exc:
            raise ConfigurationError(f"replica_urls[{i}]: {exc}") from None
        replicas.append(Replica(server, masked_url(url)))
    return ReplicaBackend(primary, replicas, settings)
