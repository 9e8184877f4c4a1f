"""Session files in and out of the database: :func:`import_path`, :func:`export_session`
and :func:`export_all`, over the readers and writers of :mod:`sessiondb.formats`.

**Import** reads each file with its format, checks every record of a session (messages
through :func:`sessiondb.models.wire_message`, overlays through their models) before
anything of it is committed, then writes whole sessions in batches of about
``BATCH_RECORDS`` records, one transaction per batch, through the backend's bulk path
(COPY on Postgres); a batch is written while the next files are read. A session of
more than ``STREAM_RECORDS`` records or ``STREAM_CHARS`` of payload is not held
whole: it is written in chunks inside its own transaction as its records are read and
checked, and a record failing late rolls the transaction back. A session that fails its
checks is reported and not written; the other sessions go on. A batch the database
refuses is written again one session per transaction, so one bad session never takes
others with it.

**Export** (:func:`export_all`) reads the namespace's records with one keyset-paginated
statement and hands the writers the stored JSON (:class:`~sessiondb.formats.base.StoredRecord`),
without building models.

**Idempotency** needs no extra column. A session's id is a function of the store's
namespace and the session's external key (``claude-code:<stem>``, ``pi:<id>``,
``native:<id>``, …; see :class:`sessiondb.formats.ImportedSession`): the 128 bits of a
ULID taken from SHA-256 of both. A re-import computes the same id, finds it stored and
skips the session without reading its records. The price: an imported session's id
does not sort by its creation time. A file that grew since it was imported is still
skipped whole; appending the new tail is not done.

**Tenants.** Ids are one space for every namespace, so none is taken from a file as
it stands: a native file's id is hashed with the namespace too, and the same file
imported by two tenants gives two sessions that neither can see, block or learn of.
The file's own id is kept as the session's key (``native:<id>``), and a native export
writes it back (the directory, ``id``, and a fork's ``parentId``), so a round trip gives
the same file. A native file whose id is a session of the importing namespace already
(made there, or imported when native ids were kept as they came) is that session.

**Times.** Records keep the timestamps the file gives them. The session's
``created_at`` and ``last_message_at``, which order listings and decide
:meth:`~sessiondb.SessionStore.expire`, are never later than the moment the session
is stored: a file dated in the future is not kept from retention or pinned to the top
of every listing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from . import jsoncodec
from . import statements as q
from .backends import IntegrityViolation, Transaction
from .config import DEFAULT_MAX_RECORD_BYTES
from .core import Core, HasCore, core_of
from .errors import (
    DatabaseError,
    InvalidInputError,
    SessionDBError,
    brief,
)
from .formats import (
    BAD_LINES_KEPT,
    BadLine,
    Format,
    ImportedRecord,
    ImportedSession,
    SkippedPath,
    candidates,
    detect,
    get_format,
    import_root,
    native,
)
from .formats.base import MAX_LINE_BYTES, export_scope, splice
from .formats.claude_code import listings_kept
from .ids import check_session_id, derived_session_id
from .models import Compaction, Prune, SessionInfo, Tombstone, wire_message
from .rows import (
    HeadDelta,
    NewRecord,
    TokenCounts,
    head_counters,
    session_info,
    session_row,
    usage_cost,
)
from .tables import records, sessions
from .validation import check_record_size, column_text, session_fields, to_json, too_deep

_log = logging.getLogger("sessiondb")
# Files whose sessions are looked up together (one statement instead of one a file).
LOOK_UP_FILES = 64
# Records per write transaction. A batch's COPY runs while the next files are read (the
# server writes on another core), so a batch is small enough that the last one, which
# nothing overlaps, is short (a 20k-line import: 1.2 s in one batch, 1.0 s in four),
# and large enough that a commit per batch costs little (2,000 took 25% longer at 100k).
BATCH_RECORDS = 5_000
BATCH_CHARS = 64 * 1024 * 1024
# A session with more records or payload than this is written in chunks of about this
# size inside its one transaction, so an import's memory stays flat however big the
# file is.
STREAM_RECORDS = 20_000
STREAM_CHARS = 4 * 1024 * 1024

__all__ = [
    "ImportFailure",
    "ImportProgress",
    "ImportReport",
    "SkippedPath",
    "export_all",
    "export_session",
    "import_path",
    "session_id_for",
]


@dataclass(frozen=True, slots=True)
class ImportFailure:
    """A file, or one session of it, that was not imported; nothing of it was written."""

    path: Path
    reason: str
    key: str | None = None

    def __str__(self) -> str:
        # An ImportFormatError's message already starts with ``path:line``.
        text = (
            self.reason
            if self.reason.startswith(f"{self.path}:")
            else f"{self.path}: {self.reason}"
        )
        return text if self.key is None else f"{text} (session {self.key})"


@dataclass
class ImportReport:
    """What :func:`import_path` did.

    Attributes:
        session_ids: every session the path produced or matched, a file's main session
            before its children.
        created: sessions written by this import.
        skipped: sessions already stored (by an earlier import), left as they were.
        records: records written.
        files: session files and directories read.
        bad_lines: the first ``BAD_LINES_KEPT`` (100) lines that could not be read
            (``path:line``), their reasons cut short: kept as raw entries, or, a line
            over the store's ``max_record_bytes``, skipped.
        bad_line_count: every bad line, kept in ``bad_lines`` or not.
        failures: files or sessions not imported, with the reason.
        skipped_paths: paths passed over unopened, with the reason: symbolic links
            (not followed, or leading outside the root), FIFOs, sockets, devices,
            directories reached a second time.
    """

    session_ids: list[str] = field(default_factory=list)
    created: int = 0
    skipped: int = 0
    records: int = 0
    files: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    failures: list[ImportFailure] = field(default_factory=list)
    bad_line_count: int = 0
    skipped_paths: list[SkippedPath] = field(default_factory=list)

    def add_bad_lines(self, session: ImportedSession) -> None:
        """Count ``session``'s bad lines, keeping up to ``BAD_LINES_KEPT`` in all."""
        self.bad_line_count += session.bad_line_count
        room = BAD_LINES_KEPT - len(self.bad_lines)
        if room > 0:
            self.bad_lines.extend(session.bad_lines[:room])

    @property
    def ok(self) -> bool:
        """Whether every file was imported (bad lines kept as entries do not count)."""
        return not self.failures


@dataclass(frozen=True, slots=True)
class ImportProgress:
    """Where an import stands, after each file. ``records`` and ``created`` count what
    was read and checked; batches are written as they fill, and the last at the end."""

    path: Path
    files_done: int
    files_total: int
    records: int
    created: int
    skipped: int
    failed: int


def session_id_for(namespace: str, key: str) -> str:
    """The id an imported session with external ``key`` gets in ``namespace``: a ULID
    whose 128 bits are the first of SHA-256 over the namespace and the key.

    Native keys (``native:<id>``) too: the file's id is not taken as it stands, so
    the same file gives each namespace its own session. (An import first looks for the
    file's id among the namespace's own sessions.)
    """
    return derived_session_id(namespace, key)


async def import_path(
    store: HasCore | Core,
    path: str | Path,
    format: str = "auto",
    strict: bool = False,
    progress: Callable[[ImportProgress], None] | None = None,
    *,
    follow_symlinks: bool = False,
) -> ImportReport:
    """Import the sessions of a file, a session directory, or a tree mixing formats.

    Each session is written whole or not at all, and a session already imported (by
    its external key) is skipped, so running the import again adds nothing. A bad line
    is kept as a raw entry and reported; a session whose records fail the checks is
    reported in ``failures`` and not written, and the others are imported.

    Args:
        store: the store to write into (its namespace), or its core.
        path: a file, a session directory or a directory tree.
        format: a name of :data:`sessiondb.formats.FORMATS`, or ``"auto"`` to detect each
            file's format (files no format claims are passed over).
        strict: a bad line fails its file: nothing of that file is written.
        progress: called after each file with an :class:`ImportProgress`.
        follow_symlinks: follow symbolic links under ``path``, but only to paths
            inside it, and into each directory once. Without it no link under ``path``
            is followed (``path`` itself is, if it is one). Either way only regular
            files are opened; what is passed over is in ``skipped_paths``.

    Only regular files are read: FIFOs, sockets and devices are passed over unopened.
    A line longer than the store's ``max_record_bytes`` is never held whole: it is
    reported as a bad line and skipped (``strict``: it fails its file).

    Raises:
        InvalidInputError: an unknown format, or ``path`` does not exist or is neither
            a regular file nor a directory.
        DatabaseError: the database failed (sessions already committed stay).
    """
    core = core_of(store)
    chosen = None if format == "auto" else get_format(format)
    root = import_root(Path(path))
    importer = _Importer(core, strict)
    # A line over the limit is skipped as it is read (path:line), never held whole.
    limit = MAX_LINE_BYTES.set(core.max_record_bytes)
    try:
        with listings_kept():
            walked = candidates(
                root, follow_symlinks=follow_symlinks, skipped=importer.report.skipped_paths
            )
            files = list(_files(root, walked, chosen))
            await _import_files(importer, files, progress)
    except BaseException:
        await importer.abandon()
        raise
    finally:
        MAX_LINE_BYTES.reset(limit)
    importer.report.files = len(files)
    if importer.report.records >= ANALYZE_AFTER and core.flavour == q.POSTGRES:
        # The caller need not wait; an export on this store does (and close()).
        core.in_background(_analyze(core, importer.report.records))
    return importer.report


# An import of fewer records leaves the planner's statistics to autovacuum.
ANALYZE_AFTER = 10_000


async def _analyze(core: Core, written: int) -> None:
    """ANALYZE the tables after a bulk import on Postgres, as its docs advise after a
    bulk load, when the import added more than a tenth of the records the planner knew
    of (autovacuum's own rule; it acts up to a minute later). Until then the planner
    takes fresh tables for empty and picks plans that sort every record per export
    batch. A failure is logged, not raised: the import itself has committed. SQLite
    is not asked: sessiondb keeps its plans free of statistics."""
    try:
        known = await core.backend.fetch((q.estimated_records(), {}))
        if known and written <= int(known[0]["n"]) // 10:
            return
        await core.backend.execute((q.analyze(), {}))
    except DatabaseError as exc:
        _log.warning("ANALYZE after the import failed (the import is committed): %s", exc)


async def _import_files(
    importer: _Importer,
    files: list[tuple[Path, Format | Exception]],
    progress: Callable[[ImportProgress], None] | None,
) -> None:
    opened: dict[Path, list[ImportedSession] | None] = {}
    for done, (file, fmt) in enumerate(files, 1):
        if not opened:
            # The next files' sessions are looked up in one statement, not one a file.
            window = files[done - 1 : done - 1 + LOOK_UP_FILES]
            opened = {f: importer.open(f, m) for f, m in window if not isinstance(m, Exception)}
            await importer.look_up_sessions([s for found in opened.values() for s in found or ()])
        if isinstance(fmt, Exception):
            importer.report.failures.append(ImportFailure(file, _crash("detection", fmt)))
        else:
            found = opened.pop(file)
            if found is not None:
                await importer.file(file, found)
        if importer.inflight is not None:
            # Reading a file never waits, so let the batch in flight run: its COPY goes
            # to the server, which writes it on another core while the next file is read.
            await asyncio.sleep(0)
        if progress is not None:
            r = importer.report
            progress(
                ImportProgress(
                    file,
                    done,
                    len(files),
                    importer.checked_records,
                    importer.checked_sessions,
                    r.skipped,
                    len(r.failures),
                )
            )
    await importer.finish()


def _files(
    root: Path, walked: Iterator[Path], chosen: Format | None
) -> Iterator[tuple[Path, Format | Exception]]:
    """The session files ``walked`` under ``root`` with their formats, as ``read_path``
    picks them; the exception instead where detection failed."""
    for candidate in walked:
        try:
            fmt = chosen if chosen is not None else detect(candidate)
            if fmt is not None and (chosen is None or fmt.sniff(candidate) or candidate == root):
                yield candidate, fmt
        except Exception as exc:  # a reader's bug must not stop the other files
            yield candidate, exc


def _crash(what: str, exc: Exception) -> str:
    return f"{what} failed unexpectedly ({type(exc).__name__}: {exc}); please report it"


@dataclass
class _Prepared:
    """One session checked and turned into rows, ready to write."""

    key: str
    path: Path
    session_row: tuple[Any, ...]
    record_rows: list[tuple[Any, ...]]
    chars: int
    last_seq: int
    parent_id: str | None


class _Refused(Exception):
    """A session fails its checks; the reason is the message."""


class _ReaderCrash(Exception):
    """A reader raised something it should not have; the session is not imported."""


class _Deferred(Exception):
    """A session's parent is not stored yet; try again at the end."""


@dataclass
class _Importer:
    core: Core
    strict: bool
    report: ImportReport = field(default_factory=ImportReport)
    # id -> (namespace, last_seq) of sessions known to be stored.
    stored: dict[str, tuple[str, int]] = field(default_factory=dict)
    batch: list[_Prepared] = field(default_factory=list)
    batch_ids: set[str] = field(default_factory=set)
    batch_size: int = 0
    batch_chars: int = 0
    deferred: list[tuple[Path, ImportedSession, str]] = field(default_factory=list)
    checked_sessions: int = 0
    checked_records: int = 0
    absent: set[str] = field(default_factory=set)  # ids looked up and not stored
    # The batch being written while the next files are read, and its sessions' ids.
    inflight: asyncio.Future[None] | None = None
    inflight_ids: set[str] = field(default_factory=set)

    @property
    def namespace(self) -> str:
        return self.core.namespace

    def open(self, path: Path, fmt: Format) -> list[ImportedSession] | None:
        """The sessions of a file, not yet read; ``None`` (and a failure) if it cannot
        be opened."""
        try:
            return list(fmt.read(path, strict=self.strict))
        except (SessionDBError, OSError) as exc:
            self.report.failures.append(ImportFailure(path, str(exc)))
        except Exception as exc:  # a reader's bug must not stop the other files
            self.report.failures.append(ImportFailure(path, _crash(f"the {fmt.name} reader", exc)))
        return None

    async def look_up_sessions(self, found: list[ImportedSession]) -> None:
        keys = [s.key for s in found] + [s.parent_key for s in found if s.parent_key]
        await self._look_up([i for key in keys for i in self._candidates(key)])

    def _candidates(self, key: str) -> list[str]:
        """The ids a session of ``key`` may be stored under (see :meth:`_id_of`)."""
        own = native.id_of_key(key)
        derived = session_id_for(self.namespace, key)
        return [derived] if own is None else [derived, own]

    def _id_of(self, key: str) -> str:
        """The id of the session of ``key`` in this namespace, once its candidates are
        looked up: the native file's own id when this namespace holds a session of that
        id (made here, or imported when native ids were stored as they came, so that
        importing its file again is a skip), else the id derived from the namespace and
        the key. A session of that id in another namespace is not looked at: nothing of
        another namespace decides, or shows in, what this import does."""
        own = native.id_of_key(key)
        if own is not None:
            found = self.stored.get(own)
            if found is not None and found[0] == self.namespace:
                return own
        return session_id_for(self.namespace, key)

    async def file(self, path: Path, found: list[ImportedSession]) -> None:
        await self.look_up_sessions(found)
        ids = [self._id_of(s.key) for s in found]
        ready: list[_Prepared] = []
        matched: list[str] = []
        local: set[str] = set()
        for session, session_id in zip(found, ids, strict=True):
            try:
                prepared = await self._prepare(session, session_id, local)
                if isinstance(prepared, _Rows):
                    for earlier in ready:  # a parent before its children
                        await self._add(earlier)
                    ready = []
                    await self._drain()
                    if not await self._stream(prepared):
                        prepared = None
            except _Deferred:
                self.deferred.append((path, session, session_id))
                continue
            except (_Refused, SessionDBError, OSError, _ReaderCrash) as exc:
                self.report.add_bad_lines(session)
                failure = ImportFailure(session.path, str(exc), session.key)
                if self.strict:
                    # The whole file fails: drop what of it was prepared.
                    self.report.failures.append(ImportFailure(path, str(exc), session.key))
                    return
                self.report.failures.append(failure)
                continue
            self.report.add_bad_lines(session)
            matched.append(session_id)
            if prepared is None:
                self.report.skipped += 1
            elif isinstance(prepared, _Prepared):
                ready.append(prepared)
                local.add(session_id)
        self.report.session_ids.extend(matched)
        for prepared in ready:
            await self._add(prepared)

    async def finish(self) -> None:
        await self._drain()
        while self.deferred:
            waiting, self.deferred = self.deferred, []
            await self._look_up(
                [i for _, s, _ in waiting if s.parent_key for i in self._candidates(s.parent_key)],
                again=True,
            )
            progressed = False
            for path, session, session_id in waiting:
                try:
                    prepared = await self._prepare(session, session_id, set())
                    if isinstance(prepared, _Rows):
                        await self._drain()
                        if not await self._stream(prepared):
                            prepared = None
                except _Deferred:
                    self.deferred.append((path, session, session_id))
                    continue
                except (_Refused, SessionDBError, OSError, _ReaderCrash) as exc:
                    self.report.failures.append(ImportFailure(session.path, str(exc), session.key))
                    progressed = True
                    continue
                progressed = True
                self.report.add_bad_lines(session)
                self.report.session_ids.append(session_id)
                if prepared is None:
                    self.report.skipped += 1
                elif isinstance(prepared, _Prepared):
                    await self._add(prepared)
            await self._drain()
            if not progressed:
                for _, session, _ in self.deferred:
                    parent = self._id_of(session.parent_key or "")
                    reason = f"its parent session {session.parent_key} ({parent}) is not stored"
                    self.report.failures.append(ImportFailure(session.path, reason, session.key))
                self.deferred = []

    # -- checks -----------------------------------------------------------------------

    async def _look_up(self, ids: list[str], *, again: bool = False) -> None:
        """Learn which of ``ids`` are stored; ``again``: ask even for ids found absent
        before (a concurrent import may have written them since)."""
        if again:
            self.absent.difference_update(ids)
        wanted = sorted({i for i in ids if i not in self.stored and i not in self.absent})
        if not wanted:
            return
        self.absent.update(wanted)
        rows = await self.core.backend.fetch(q.existing_sessions(wanted, self.core.flavour))
        for row in rows:
            self.stored[row["id"]] = (row["namespace"], int(row["last_seq"]))

    def _pending(self, session_id: str) -> bool:
        return session_id in self.batch_ids or session_id in self.inflight_ids

    async def _prepare(
        self, session: ImportedSession, session_id: str, local: set[str]
    ) -> _Prepared | _Rows | None:
        """The session's rows, or ``None`` when it is stored already; a :class:`_Rows`
        holding its first chunk when the session is too big to hold whole (write it with
        :meth:`_stream`)."""
        if session_id in local or self._pending(session_id):
            return None
        found = self.stored.get(session_id)
        if found is not None:
            if found[0] != self.namespace:
                # A derived id another namespace holds (only a session stored under a
                # file's raw id, before ids were scoped, can): the message names neither
                # the namespace nor whether that is what happened.
                raise _Refused(f"session id {session_id} cannot be used in this namespace")
            return None
        parent_id = None
        inherited = 0
        if session.parent_key is not None:
            parent_id = self._id_of(session.parent_key)
            fork_seq = session.fork_seq or 0
            if fork_seq == 0 and (parent_id in local or self._pending(parent_id)):
                pass  # written in the same transaction, before the child
            else:
                if self._pending(parent_id):
                    await self._drain()
                parent = self.stored.get(parent_id)
                if parent is None or parent[0] != self.namespace:
                    # Held in another namespace (a derived id stored raw before ids were
                    # scoped): for this namespace it is missing, and said so in the same
                    # words.
                    raise _Deferred
                if fork_seq > parent[1]:
                    raise _Refused(
                        f"fork point {fork_seq} is beyond the head ({parent[1]}) of its parent "
                        f"{parent_id}"
                    )
                if fork_seq:
                    inherited = await self.core.transact(
                        lambda tx: self.core.count_messages(tx, parent_id, fork_seq)
                    )
        rows = _Rows(session, session_id, self.namespace, parent_id, inherited)
        rows.max_bytes = self.core.max_record_bytes
        # Strict holds a session whole: nothing of a file with a bad line may be written.
        limit = (2**62, 2**62) if self.strict else (STREAM_RECORDS, STREAM_CHARS)
        first = rows.chunk(*limit)
        if rows.done:
            return rows.prepared(first)
        rows.first = first
        return rows

    # -- writes -----------------------------------------------------------------------

    async def _add(self, prepared: _Prepared) -> None:
        self.checked_sessions += 1
        self.checked_records += len(prepared.record_rows)
        self.batch.append(prepared)
        self.batch_ids.add(prepared.session_row[0])
        self.batch_size += len(prepared.record_rows) + 1
        self.batch_chars += prepared.chars
        if self.batch_size >= BATCH_RECORDS or self.batch_chars >= BATCH_CHARS:
            await self._flush()

    async def _flush(self) -> None:
        """Start writing the batch; the files after it are read while it is written.
        One batch is in flight at a time: this waits for the one before."""
        batch, self.batch = self.batch, []
        batch_ids, self.batch_ids = self.batch_ids, set()
        self.batch_size = self.batch_chars = 0
        await self._settle()
        if not batch:
            return
        self.inflight_ids = batch_ids
        self.inflight = asyncio.ensure_future(self._commit(batch))

    async def _drain(self) -> None:
        """Write the batch and wait until every batch is written."""
        await self._flush()
        await self._settle()

    async def _settle(self) -> None:
        """Wait for the batch in flight; its failure is raised here."""
        task, self.inflight = self.inflight, None
        if task is not None:
            try:
                await task
            finally:
                self.inflight_ids = set()

    async def abandon(self) -> None:
        """After a failure or a cancellation: stop the batch in flight (its transaction
        rolls back, so none of its sessions is half-written)."""
        task, self.inflight = self.inflight, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _commit(self, batch: list[_Prepared]) -> None:
        try:
            await self._write(batch)
        except (IntegrityViolation, InvalidInputError):
            if len(batch) == 1:
                await self._write_one(batch[0])
                return
            # Another writer got there first, or the database refused a value: one
            # session per transaction, so the others are still written.
            for prepared in batch:
                await self._write_one(prepared)
            return
        for prepared in batch:
            self._written(prepared)

    async def _write(self, batch: list[_Prepared]) -> None:
        """One transaction for the batch, run again after a retryable failure as every
        other write is (the rows are in memory)."""

        async def unit(tx: Transaction) -> None:
            await tx.insert(sessions, [p.session_row for p in batch])
            await tx.insert(records, [row for p in batch for row in p.record_rows])

        await self.core.transact(unit)

    async def _write_one(self, prepared: _Prepared) -> None:
        session_id = prepared.session_row[0]
        try:
            await self._write([prepared])
        except (IntegrityViolation, InvalidInputError) as exc:
            self.stored.pop(session_id, None)
            await self._look_up([session_id], again=True)
            found = self.stored.get(session_id)
            if found is not None and found[0] == self.namespace:
                self.report.skipped += 1  # a concurrent import stored it
                return
            self._unlist(session_id)
            reason = f"the database refused the session: {exc}"
            parent = prepared.parent_id
            if isinstance(exc, IntegrityViolation) and parent and parent not in self.stored:
                reason = f"its parent session {prepared.parent_id} was not stored"
            self.report.failures.append(ImportFailure(prepared.path, reason, prepared.key))
            return
        self._written(prepared)

    async def _stream(self, rows: _Rows) -> bool:
        """Write a big session in chunks in one transaction, each chunk checked as it is
        read; ``False`` when a concurrent import stored it first.

        Raises:
            _Refused: a record fails its checks, or the database refuses the session
                (the transaction is rolled back: nothing of it is written).
        """
        session_id = rows.session_id
        try:
            # One attempt: the chunks are read from the file as they are written, so
            # the transaction cannot run again; a retryable failure reaches the caller.
            async with self.core.backend.transaction() as tx:
                # The records need the session row; its final values come at the end.
                await tx.insert(sessions, [rows.session_row()])
                chunk = rows.first
                while chunk:
                    await tx.insert(records, chunk)
                    chunk = [] if rows.done else rows.chunk(STREAM_RECORDS, STREAM_CHARS)
                final = dict(zip(q.SESSION_COLUMN_NAMES, rows.session_row(), strict=True))
                params = {f"v_{c}": v for c, v in final.items() if c != "id"}
                await tx.fetch((q.update_session_row(), {"id_": session_id, **params}))
        except (IntegrityViolation, InvalidInputError) as exc:
            self.stored.pop(session_id, None)
            await self._look_up([session_id], again=True)
            found = self.stored.get(session_id)
            if found is not None and found[0] == self.namespace:
                return False  # a concurrent import stored it
            reason = f"the database refused the session: {exc}"
            parent = rows.parent_id
            if isinstance(exc, IntegrityViolation) and parent and parent not in self.stored:
                reason = f"its parent session {parent} was not stored"
            raise _Refused(reason) from exc
        self.checked_sessions += 1
        self.checked_records += rows.count
        self.stored[session_id] = (self.namespace, rows.last_seq)
        self.report.created += 1
        self.report.records += rows.count
        return True

    def _written(self, prepared: _Prepared) -> None:
        self.stored[prepared.session_row[0]] = (self.namespace, prepared.last_seq)
        self.report.created += 1
        self.report.records += len(prepared.record_rows)

    def _unlist(self, session_id: str) -> None:
        ids = self.report.session_ids
        if session_id in ids:
            ids.remove(session_id)


# -- rows ---------------------------------------------------------------------------------


class _Rows:
    """A session's rows, built chunk by chunk as its records are read and checked.

    ``chunk`` returns the next rows (table order); ``session_row`` the session's row as
    far as the records read so far tell it (final once ``done``). Records before the
    first one with a timestamp are dated by the session's ``created_at``, which for a
    session written in chunks is fixed when its first chunk is. Records keep the times
    the file gives; the session row's ``created_at`` and ``last_message_at`` are never
    later than ``stored_at`` (when the import began storing the session), so a file's
    dates cannot keep a session from :meth:`~sessiondb.SessionStore.expire` or pin it to
    the top of listings.
    """

    def __init__(
        self,
        session: ImportedSession,
        session_id: str,
        namespace: str,
        parent_id: str | None,
        inherited: int,
    ) -> None:
        self.session = session
        self.session_id = session_id
        self.namespace = namespace
        self.parent_id = parent_id
        self.inherited = inherited
        self.base = (session.fork_seq or 0) if parent_id is not None else 0
        self.records = enumerate(_guarded(session))
        self.uuids: set[str] = set()
        self.count = 0
        self.chars = 0
        self.done = False
        self.created_at: datetime | None = None
        self.last_message_at: datetime | None = None
        self.stored_at = datetime.now(UTC)
        self.last: datetime | None = None
        self.messages = 0
        self.tokens = TokenCounts()
        self.cost = 0.0
        self.name: str | None = None
        self.named = False
        self.first: list[tuple[Any, ...]] = []  # a streamed session's first chunk
        self.max_bytes = DEFAULT_MAX_RECORD_BYTES  # the store's max_record_bytes

    @property
    def last_seq(self) -> int:
        return self.base + self.count

    def chunk(self, max_rows: int, max_chars: int) -> list[tuple[Any, ...]]:
        """Read and check up to ``max_rows`` records or ``max_chars`` of payload.

        Raises:
            _Refused: a record or a session field cannot be stored.
            ImportFormatError: with ``strict``, a bad line.
        """
        built: list[tuple[NewRecord, datetime | None]] = []
        chars = 0
        # Uuids repeated within a chunk are named here; across the chunks of a streamed
        # session the table's unique key refuses them (a set of every uuid would grow
        # with the file).
        self.uuids.clear()
        for index, record in self.records:
            seq = self.base + index + 1
            where = f"record {index + 1} (seq {seq})"
            try:
                row = _record(record, seq, self.base, where)
                check_record_size(row.payload, self.max_bytes, where)
            except InvalidInputError as exc:
                # The uuid finds the line in the file (a record is not always one line).
                known = f" (uuid {brief(record.uuid)})" if record.uuid is not None else ""
                raise _Refused(f"{exc}{known}") from exc
            if row.uuid is not None:
                if row.uuid in self.uuids:
                    raise _Refused(f"{where}: uuid {row.uuid!r} appears twice in the session")
                self.uuids.add(row.uuid)
            built.append((row, record.created_at))
            chars += len(row.payload)
            if len(built) >= max_rows or chars >= max_chars:
                break
        else:
            self.done = True
        if self.created_at is None:
            first = next((at for _, at in built if at is not None), None)
            self.created_at = self.session.details.created_at or first or self.stored_at
            self.last = self.last_message_at = self.created_at
        last = self.last
        assert last is not None and self.last_message_at is not None
        last_message_at = self.last_message_at
        rows: list[tuple[Any, ...]] = []
        for seq, (row, at) in enumerate(built, start=self.last_seq + 1):
            last = at or last
            if row.kind == "message" and last > last_message_at:
                last_message_at = last
            rows.append(row.values(self.session_id, seq, last))
        self.last, self.last_message_at = last, last_message_at
        news = [row for row, _ in built]
        delta = HeadDelta.of(news, name=not self.named)
        if not self.named and any(r.wire is not None and r.wire["role"] == "user" for r in news):
            self.named, self.name = True, delta.name
        self.messages += delta.messages
        self.tokens += delta.tokens
        for news_row in news:  # summed in record order, as one HeadDelta over all would
            if news_row.wire is not None and "usage" in news_row.wire:
                self.cost += usage_cost(news_row.wire)
        self.count += len(rows)
        self.chars += chars
        return rows

    def session_row(self) -> tuple[Any, ...]:
        """The session's row in table order.

        Raises:
            _Refused: a session field cannot be stored.
        """
        details = self.session.details
        try:
            if details.source == "interactive" and details.cron_job_id is not None:
                raise InvalidInputError("cron_job_id is only for source='cron'")
            created_at = _no_later(self.created_at, self.stored_at)
            last_message_at = _no_later(self.last_message_at, self.stored_at)
            assert created_at is not None and last_message_at is not None  # set by chunk()
            values = session_row(
                self.session_id,
                self.namespace,
                created_at=created_at,
                last_message_at=last_message_at,
                source=details.source,
                fields=session_fields(
                    details.name,
                    details.model,
                    details.cron_job_id,
                    details.system_prompt_override,
                    details.metadata or None,
                    self.max_bytes,
                ),
                counters=head_counters(
                    self.last_seq, self.inherited + self.messages, self.tokens, self.cost
                ),
                parent_id=self.parent_id,
                fork_seq=self.base if self.parent_id is not None else None,
                # A native file's own id, which its export writes back; other files
                # carry no key (the key addresses a session in one database).
                key=self.session.key if native.id_of_key(self.session.key) else None,
            )
        except InvalidInputError as exc:
            raise _Refused(str(exc)) from exc
        values["name"] = values["name"] or self.name
        return tuple(values[c] for c in q.SESSION_COLUMN_NAMES)

    def prepared(self, rows: list[tuple[Any, ...]]) -> _Prepared:
        """The whole session (``done``) as one :class:`_Prepared`."""
        return _Prepared(
            key=self.session.key,
            path=self.session.path,
            session_row=self.session_row(),
            record_rows=rows,
            chars=self.chars,
            last_seq=self.last_seq,
            parent_id=self.parent_id,
        )


def _no_later(at: datetime | None, bound: datetime) -> datetime | None:
    return bound if at is not None and at > bound else at


def _guarded(session: ImportedSession) -> Iterator[ImportedRecord]:
    """``session.records``, with an unexpected exception of the reader as :class:`_ReaderCrash`."""
    try:
        yield from session.records
    except (SessionDBError, OSError):
        raise
    except Exception as exc:  # a reader's bug must not stop the other sessions
        raise _ReaderCrash(_crash(f"the {session.format} reader", exc)) from exc


def _record(record: ImportedRecord, seq: int, base: int, where: str) -> NewRecord:
    """One record's row, checked as the store checks an append.

    Raises:
        InvalidInputError: the record cannot be stored or would not read back.
    """
    uuid = _column(record.uuid)
    payload = record.payload
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{where}: the payload must be an object")
    if record.kind == "message":
        wire = wire_message(payload, where, checked=record.checked)
        text = splice(wire, record.splice) if record.splice and record.checked else None
        if text is None:
            text = _payload_text(wire, where)
        elif jsoncodec.text_deeper_than(text) and jsoncodec.deeper_than(wire):
            raise InvalidInputError(too_deep(where))
        if jsoncodec.is_exact_path(text) and jsoncodec.has_surrogate_key(wire):
            raise InvalidInputError(
                f"{where}: an object key is not a string or holds a lone surrogate"
            )
        return NewRecord(
            kind="message",
            payload=text,
            role=wire["role"],
            uuid=uuid,
            parent_uuid=_column(record.parent_uuid),
            tool_call_id=_column(wire.get("toolCallId")),
            wire=wire,
        )
    if record.kind == "compaction":
        if record.first_kept is None:
            raise InvalidInputError(f"{where}: a compaction needs its first kept record")
        first_kept = base + record.first_kept + 1
        if not 1 <= first_kept <= seq:
            raise InvalidInputError(f"{where}: first kept seq {first_kept} is not in 1..{seq}")
        wire = {**payload, "firstKeptSeq": first_kept}
        text = to_json(wire, where)  # first: it refuses a value nested too deep
        _check(Compaction, wire, where)
        return NewRecord(
            kind="compaction",
            payload=text,
            uuid=uuid,
            parent_uuid=_column(record.parent_uuid),
            first_kept_seq=first_kept,
        )
    if record.kind == "tombstone":
        if record.target is None:
            raise InvalidInputError(f"{where}: a tombstone needs its target")
        target = base + record.target + 1
        if not 1 <= target < seq:
            raise InvalidInputError(f"{where}: target seq {target} is not in 1..{seq - 1}")
        wire = {**payload, "targetSeq": target}
        text = to_json(wire, where)
        _check(Tombstone, wire, where)
        return NewRecord(
            kind="tombstone",
            payload=text,
            uuid=uuid,
            parent_uuid=_column(record.parent_uuid),
            target_seq=target,
        )
    if record.kind == "prune":
        text = to_json(payload, where)
        _check(Prune, payload, where)
        if not all(1 <= s < seq for s in payload["seqs"]):
            raise InvalidInputError(f"{where}: a prune names seqs outside 1..{seq - 1}")
        return NewRecord(
            kind="prune",
            payload=text,
            uuid=uuid,
            parent_uuid=_column(record.parent_uuid),
        )
    if record.kind != "entry":
        raise InvalidInputError(f"{where}: unknown record kind {record.kind!r}")
    return NewRecord(
        kind="entry",
        payload=_payload_text(payload, where),
        uuid=uuid,
        parent_uuid=_column(record.parent_uuid),
    )


def _payload_text(value: dict[str, Any], where: str) -> str:
    """:func:`to_json` for a value a reader parsed from JSON (a message, an entry's
    line), which holds no NaN or infinity: orjson's text without the walk that looks for
    them (every Claude Code line holds a null, so it ran on every line). Its depth is
    checked as :func:`to_json` checks it: walked only when the text has enough brackets.

    Raises:
        InvalidInputError: the value is nested past ``MAX_JSON_DEPTH`` (a line parsed
            fine, orjson reads 1,024 levels), or cannot be stored.
    """
    try:
        raw = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        # A lone surrogate or a big integer (the exact path), or past 255 levels.
        return to_json(value, where)
    if jsoncodec.text_deeper_than(raw) and jsoncodec.deeper_than(value):
        raise InvalidInputError(too_deep(where))
    return raw.decode()


def _check(
    model: type[Compaction] | type[Tombstone] | type[Prune], wire: dict[str, Any], where: str
) -> None:
    try:
        model.model_validate(wire)
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(f"{where}: {field_name}: {first['msg']}") from exc


def _column(value: Any) -> str | None:
    """``value`` if a text column can hold it, else ``None`` (the payload keeps it)."""
    if value is None or (type(value) is str and value.isascii() and "\x00" not in value):
        return value  # nearly every uuid: no encoding needed to know
    try:
        return column_text(value, "")
    except InvalidInputError:
        return None


# -- export -------------------------------------------------------------------------------


async def export_session(
    store: HasCore | Core, session_id: str, out_dir: str | Path, format: str = "native"
) -> list[Path]:
    """Write one session as ``format``'s file(s) under ``out_dir``; the paths written.

    Every record is written, tombstoned ones too (the formats keep them). A fork's
    native file holds its own records; its parent's are exported with the parent.

    Raises:
        InvalidInputError: an unknown format.
        SessionNotFoundError: no such session in this namespace.
    """
    core = core_of(store)
    fmt = get_format(format)
    await core.settle_background()  # the statistics of an import just made
    check_session_id(session_id)
    info = await core.session(session_id)
    if fmt.name == native.NAME and info.parent_id is not None:
        parent = await core.backend.fetch(q.get_session(info.parent_id, core.namespace))
        if parent:
            info = _native_view(info, session_info(parent[0]))

    async def read(after: Any) -> list[Any]:
        return await core.backend.fetch(
            q.lineage_records(
                session_id,
                core.namespace,
                include_tombstoned=True,
                include_superseded=True,
                from_seq=None if after is None else after + 1,
                limit=EXPORT_BATCH,
            ),
            plain=True,
        )

    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with export_scope([info.id]):
            written = await _export_rows(fmt, read, _seq_of, folder, {info.id: info}, whole=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot write session {session_id} to {folder}: {exc}") from exc
    return written[info.id]


# Rows per read of export_all: ~5,000 keep a batch a few MB and its round trip ~1% of
# the time spent writing its lines.
EXPORT_BATCH = 5_000
_SESSION_PAGE = 1_000


async def export_all(
    store: HasCore | Core, out_dir: str | Path, format: str = "native"
) -> dict[str, list[Path]]:
    """Export every session of the store's namespace under ``out_dir``: id -> paths.

    Reads the namespace's records with one keyset-paginated statement in
    ``(session_id, seq)`` order while a thread writes them, each session's file(s) as
    its rows stream by: memory holds a few batches, however long a session is. A fork
    that inherits records reads its lineage on its own, as :func:`export_session` does.

    Raises:
        InvalidInputError: an unknown format, or ``out_dir`` cannot be written.
    """
    core = core_of(store)
    fmt = get_format(format)
    await core.settle_background()  # the statistics of an import just made
    backend = core.backend
    folder = Path(out_dir)
    infos: dict[str, SessionInfo] = {}
    after_id: str | None = None
    while True:
        page = await backend.fetch(
            q.sessions_by_id(core.namespace, after=after_id, limit=_SESSION_PAGE)
        )
        infos.update((row["id"], session_info(row)) for row in page)
        if len(page) < _SESSION_PAGE:
            break
        after_id = page[-1]["id"]
    # A namespace that holds every session reads the records with no namespace check;
    # the writer passes over a session made in another namespace since (not in infos).
    every = not (await backend.fetch(q.other_namespace(core.namespace)))[0]["other"]
    if fmt.name == native.NAME:
        for i, info in infos.items():
            if info.parent_id is not None and info.parent_id in infos:
                infos[i] = _native_view(info, infos[info.parent_id])
    # A fork past seq 0 exports its parent's records too (in the formats that need them).
    forks = [i for i, info in infos.items() if info.parent_id is not None and info.fork_seq]
    bulk = {i: info for i, info in infos.items() if not (info.parent_id and info.fork_seq)}

    async def read(after: Any) -> list[Any]:
        return await backend.fetch(
            q.namespace_records(
                core.namespace,
                after=after,
                limit=EXPORT_BATCH,
                every=every,
                flavour=core.flavour,
            ),
            plain=True,
        )

    # In one scope, a file name from metadata goes to one session and is never another
    # session's id name: a second session with the name is written under its id.
    with export_scope(infos):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            written = await _export_rows(fmt, read, _key_of, folder, bulk, whole=False)
            # Sessions without records are an empty file each.
            empty: list[tuple[SessionInfo, list[Any]]] = [
                (info, []) for i, info in bulk.items() if i not in written
            ]
            written.update(await asyncio.to_thread(_write_files, fmt, empty, folder))
        except OSError as exc:
            raise InvalidInputError(f"cannot export to {folder}: {exc}") from exc
        for session_id in forks:
            written[session_id] = await export_session(core, session_id, folder, format)
    return {i: written[i] for i in infos if i in written}


def _native_view(info: SessionInfo, parent: SessionInfo) -> SessionInfo:
    """``info`` as its native file names its parent: by the id of the parent's file
    (:func:`sessiondb.formats.native.file_id`), which an import maps back as it maps
    the parent's own."""
    parent_file = native.file_id(parent)
    if parent_file == info.parent_id:
        return info
    return info.model_copy(update={"parent_id": parent_file})


# Batches read ahead of the export's writer (each EXPORT_BATCH rows).
EXPORT_AHEAD = 2


def _key_of(row: Any) -> tuple[str, int]:
    return (row[0], int(row[1]))


def _seq_of(row: Any) -> int:
    return int(row[1])


async def _export_rows(
    fmt: Format,
    read: Callable[[Any], Awaitable[list[Any]]],
    key: Callable[[Any], Any],
    folder: Path,
    infos: dict[str, SessionInfo],
    *,
    whole: bool,
) -> dict[str, list[Path]]:
    """Read rows in keyset batches (``read(None)``, then ``read(key(last row))``) while a
    thread writes them (:func:`_write_stream`); memory holds a few batches. ``whole``:
    every row belongs to the one session in ``infos`` (a lineage: ancestors' rows too)."""
    batches: queue.Queue[list[Any] | None] = queue.Queue(maxsize=EXPORT_AHEAD)
    writing = asyncio.ensure_future(
        asyncio.to_thread(_write_stream, fmt, infos, batches, folder, whole)
    )
    try:
        after: Any = None
        while not writing.done():
            rows = await read(after)
            if rows:
                await _hand_over(batches, rows, writing)
            if len(rows) < EXPORT_BATCH:
                break
            after = key(rows[-1])
    except BaseException:
        # The writer stops at once (the file it was writing stays short), then this
        # failure goes on.
        await _hand_over(batches, _ABORT, writing)
        await asyncio.gather(writing, return_exceptions=True)
        raise
    await _hand_over(batches, None, writing)
    return await writing


# Put in the writer's queue when the reading failed: the writer stops where it is.
_ABORT: list[Any] = []


class _Aborted(Exception):
    pass


async def _hand_over(
    batches: queue.Queue[list[Any] | None], rows: list[Any] | None, writing: asyncio.Future[Any]
) -> None:
    """Put ``rows`` in the writer's queue without blocking the event loop; give up if
    the writer has stopped (its error is raised when it is awaited)."""
    while not writing.done():
        try:
            batches.put_nowait(rows)
            return
        except queue.Full:
            await asyncio.sleep(0.002)


def _write_stream(
    fmt: Format,
    infos: dict[str, SessionInfo],
    batches: queue.Queue[list[Any] | None],
    folder: Path,
    whole: bool,
) -> dict[str, list[Path]]:
    """Write the sessions of the rows in ``batches`` (in ``(session_id, seq)`` order,
    ``None`` after the last) as they come; rows of a session not in ``infos`` are
    passed over. ``whole``: the rows are the one session of ``infos``, in seq order."""
    rows = itertools.chain.from_iterable(_batches_of(batches))
    written: dict[str, list[Path]] = {}
    if whole:
        (one,) = infos.values()
        written[one.id] = fmt.write_rows(one, rows, folder)
        for _ in rows:  # what the writer left
            pass
        return written
    # groupby passes over what a writer leaves of its session's rows.
    for session_id, group in itertools.groupby(rows, key=itemgetter(0)):
        info = infos.get(session_id)
        if info is not None:
            written[session_id] = fmt.write_rows(info, group, folder)
    return written


def _batches_of(batches: queue.Queue[list[Any] | None]) -> Iterator[list[Any]]:
    while (batch := batches.get()) is not None:
        if batch is _ABORT:
            raise _Aborted
        yield batch


def _write_files(
    fmt: Format, sessions: list[tuple[SessionInfo, list[Any]]], folder: Path
) -> dict[str, list[Path]]:
    return {info.id: _write_session(fmt, info, rows, folder) for info, rows in sessions}


def _write_session(fmt: Format, info: SessionInfo, rows: list[Any], folder: Path) -> list[Path]:
    """Rows of :data:`statements.RECORD_READ` written as ``fmt``'s file(s)."""
    return fmt.write_rows(info, rows, folder)
