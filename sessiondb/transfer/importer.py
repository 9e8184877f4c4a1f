"""Import: :func:`import_path` reads files with their formats, checks each session
(:mod:`.checks`) and writes whole sessions in batches, a big one in chunks; how and
why is told in :mod:`sessiondb.transfer`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import statements as q
from ..backends import IntegrityViolation, Transaction
from ..core import Core, HasCore, core_of
from ..errors import DatabaseError, InvalidInputError, SessionDBError
from ..formats import (
    Format,
    ImportedSession,
    SkippedPath,
    candidates,
    chosen_format,
    get_format,
    import_root,
    native,
)
from ..formats.claude_code import listings_kept
from ..formats.lines import MAX_LINE_BYTES
from ..ids import derived_session_id
from ..tables import records, sessions
from .checks import Prepared, ReaderCrash, Refused, SessionRows
from .reports import ImportFailure, ImportProgress, ImportReport, crash_reason

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
            file's format (files no format claims are passed over, and listed in
            ``skipped_paths`` with the reason).
        strict: a bad line fails its file: nothing of that file is written.
        progress: called after each file with an :class:`ImportProgress`.
        follow_symlinks: follow symbolic links under ``path``, but only to paths
            inside it, and into each directory once. Without it no link under ``path``
            is followed (``path`` itself is, if it is one). Either way only regular
            files are opened; what is passed over is in ``skipped_paths``.

    Only regular files are read: FIFOs, sockets and devices are passed over unopened.
    A line longer than the store's ``max_record_bytes`` is never held whole. A line over
    any limit (its size, its depth, its record's size or depth as stored) is a bad line
    naming the limit where the format's lines stand alone, and fails its session in a
    native file or a legacy Gemini CLI document (see
    :attr:`~sessiondb.formats.ImportedSession.lines_stand_alone`); ``strict``: it fails
    its file.

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
            files = list(_files(root, walked, chosen, importer.report.skipped_paths))
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
            importer.report.failures.append(ImportFailure(file, crash_reason("detection", fmt)))
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
    root: Path, walked: Iterator[Path], chosen: Format | None, skipped: list[SkippedPath]
) -> Iterator[tuple[Path, Format | Exception]]:
    """The session files ``walked`` under ``root`` with their formats, as ``read_path``
    picks them; the exception instead where detection failed. A file no format reads
    goes to ``skipped`` with the reason."""
    for candidate in walked:
        try:
            fmt = chosen_format(candidate, root, chosen, skipped)
            if fmt is not None:
                yield candidate, fmt
        except Exception as exc:  # a reader's bug must not stop the other files
            yield candidate, exc


class _Deferred(Exception):
    """A session's parent is not stored yet; try again at the end."""


@dataclass
class _Importer:
    core: Core
    strict: bool
    report: ImportReport = field(default_factory=ImportReport)
    # id -> (namespace, last_seq) of sessions known to be stored.
    stored: dict[str, tuple[str, int]] = field(default_factory=dict)
    batch: list[Prepared] = field(default_factory=list)
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
            self.report.failures.append(
                ImportFailure(path, crash_reason(f"the {fmt.name} reader", exc))
            )
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
        ready: list[Prepared] = []
        matched: list[str] = []
        local: set[str] = set()
        for session, session_id in zip(found, ids, strict=True):
            try:
                prepared = await self._take(session, session_id, local, ready)
            except _Deferred:
                self.deferred.append((path, session, session_id))
                continue
            except (Refused, SessionDBError, OSError, ReaderCrash) as exc:
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
            elif isinstance(prepared, Prepared):
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
                    prepared = await self._take(session, session_id, set(), [])
                except _Deferred:
                    self.deferred.append((path, session, session_id))
                    continue
                except (Refused, SessionDBError, OSError, ReaderCrash) as exc:
                    self.report.failures.append(ImportFailure(session.path, str(exc), session.key))
                    progressed = True
                    continue
                progressed = True
                self.report.add_bad_lines(session)
                self.report.session_ids.append(session_id)
                if prepared is None:
                    self.report.skipped += 1
                elif isinstance(prepared, Prepared):
                    await self._add(prepared)
            await self._drain()
            if not progressed:
                # A link the file may name without the parent at hand (a Codex fork holds
                # its own copy of the history): the session is stored without it.
                unlinked = [d for d in self.deferred if d[1].parent_optional]
                for _, session, _ in unlinked:
                    session.parent_key = session.fork_seq = None
                for _, session, _ in self.deferred:
                    if session.parent_key is None:
                        continue
                    parent = self._id_of(session.parent_key)
                    reason = f"its parent session {session.parent_key} ({parent}) is not stored"
                    self.report.failures.append(ImportFailure(session.path, reason, session.key))
                self.deferred = unlinked

    async def _take(
        self, session: ImportedSession, session_id: str, local: set[str], ready: list[Prepared]
    ) -> Prepared | SessionRows | None:
        """:meth:`_prepare`, and a session too big to hold whole written at once, after
        the batch and ``ready`` (added to it first: a parent before its children): its
        rows once written; ``None`` when it is stored already."""
        prepared = await self._prepare(session, session_id, local)
        if isinstance(prepared, SessionRows):
            for earlier in ready:
                await self._add(earlier)
            ready.clear()
            await self._drain()
            if not await self._stream(prepared):
                return None
        return prepared

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
        rows = await self.core.primary.fetch(q.existing_sessions(wanted, self.core.flavour))
        for row in rows:
            self.stored[row["id"]] = (row["namespace"], int(row["last_seq"]))

    def _pending(self, session_id: str) -> bool:
        return session_id in self.batch_ids or session_id in self.inflight_ids

    async def _prepare(
        self, session: ImportedSession, session_id: str, local: set[str]
    ) -> Prepared | SessionRows | None:
        """The session's rows, or ``None`` when it is stored already; a :class:`SessionRows`
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
                raise Refused(f"session id {session_id} cannot be used in this namespace")
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
                    raise Refused(
                        f"fork point {fork_seq} is beyond the head ({parent[1]}) of its parent "
                        f"{parent_id}"
                    )
                if fork_seq:
                    inherited = await self.core.transact(
                        lambda tx: self.core.count_messages(tx, parent_id, fork_seq)
                    )
        rows = SessionRows(session, session_id, self.namespace, parent_id, inherited)
        rows.max_bytes = self.core.max_record_bytes
        rows.indexed = self.core.search_indexing
        rows.strict = self.strict
        # Strict holds a session whole: nothing of a file with a bad line may be written.
        limit = (2**62, 2**62) if self.strict else (STREAM_RECORDS, STREAM_CHARS)
        first = rows.chunk(*limit)
        if rows.done:
            return rows.prepared(first)
        rows.first = first
        return rows

    # -- writes -----------------------------------------------------------------------

    async def _add(self, prepared: Prepared) -> None:
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

    async def _commit(self, batch: list[Prepared]) -> None:
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

    async def _write(self, batch: list[Prepared]) -> None:
        """One transaction for the batch, run again after a retryable failure as every
        other write is (the rows are in memory)."""

        async def unit(tx: Transaction) -> None:
            await tx.insert(sessions, [p.session_row for p in batch])
            rows = [row for p in batch for row in p.record_rows]
            await tx.insert(records, self.core.indexable(rows))

        await self.core.transact(unit)

    async def _write_one(self, prepared: Prepared) -> None:
        session_id = prepared.session_row[0]
        try:
            await self._write([prepared])
        except (IntegrityViolation, InvalidInputError) as exc:
            reason = await self._refusal(session_id, prepared.parent_id, exc)
            if reason is None:
                self.report.skipped += 1  # a concurrent import stored it
                return
            self._unlist(session_id)
            self.report.failures.append(ImportFailure(prepared.path, reason, prepared.key))
            return
        self._written(prepared)

    async def _stream(self, rows: SessionRows) -> bool:
        """Write a big session in chunks in one transaction, each chunk checked as it is
        read; ``False`` when a concurrent import stored it first.

        Raises:
            Refused: a record fails its checks, or the database refuses the session
                (the transaction is rolled back: nothing of it is written).
        """
        session_id = rows.session_id
        try:
            # One attempt: the chunks are read from the file as they are written, so
            # the transaction cannot run again; a retryable failure reaches the caller.
            async with self.core.backend.transaction() as tx:
                # The records need the session row; its final values come at the end.
                await tx.insert(sessions, [rows.table_row()])
                chunk = rows.first
                while chunk:
                    await tx.insert(records, self.core.indexable(chunk))
                    chunk = [] if rows.done else rows.chunk(STREAM_RECORDS, STREAM_CHARS)
                final = dict(zip(q.SESSION_COLUMN_NAMES, rows.table_row(), strict=True))
                params = {f"v_{c}": v for c, v in final.items() if c != "id"}
                await tx.fetch((q.update_session_row(), {"id_": session_id, **params}))
        except (IntegrityViolation, InvalidInputError) as exc:
            reason = await self._refusal(session_id, rows.parent_id, exc)
            if reason is None:
                return False  # a concurrent import stored it
            raise Refused(reason) from exc
        self.checked_sessions += 1
        self.checked_records += rows.count
        self.stored[session_id] = (self.namespace, rows.last_seq)
        self.report.created += 1
        self.report.records += rows.count
        return True

    async def _refusal(
        self, session_id: str, parent_id: str | None, exc: IntegrityViolation | InvalidInputError
    ) -> str | None:
        """Why the database refused to write a session; ``None`` when the session is
        stored in this namespace after all (a concurrent import wrote it first)."""
        self.stored.pop(session_id, None)
        await self._look_up([session_id], again=True)
        found = self.stored.get(session_id)
        if found is not None and found[0] == self.namespace:
            return None
        if isinstance(exc, IntegrityViolation) and parent_id and parent_id not in self.stored:
            return f"its parent session {parent_id} was not stored"
        return f"the database refused the session: {exc}"

    def _written(self, prepared: Prepared) -> None:
        self.stored[prepared.session_row[0]] = (self.namespace, prepared.last_seq)
        self.report.created += 1
        self.report.records += len(prepared.record_rows)

    def _unlist(self, session_id: str) -> None:
        ids = self.report.session_ids
        if session_id in ids:
            ids.remove(session_id)
