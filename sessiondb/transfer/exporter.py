"""Export: :func:`export_session` and :func:`export_all` read the stored records in
keyset batches while a thread writes them as a format's files."""

from __future__ import annotations

import asyncio
import itertools
import queue
from collections.abc import Awaitable, Callable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

from .. import statements as q
from ..core import Core, HasCore, core_of
from ..errors import InvalidInputError
from ..formats import Format, export_format, native
from ..formats.paths import export_scope
from ..ids import check_session_id
from ..models import SessionInfo
from ..rows import session_info


async def export_session(
    store: HasCore | Core, session_id: str, out_dir: str | Path, format: str = "native"
) -> list[Path]:
    """Write one session as ``format``'s file(s) under ``out_dir``; the paths written.

    Every record is written, tombstoned ones too (the formats keep them). A fork's
    native file holds its own records; its parent's are exported with the parent.
    ``format="html"`` writes one web page, ``<id>.html`` (:mod:`sessiondb.formats.html`).

    Raises:
        InvalidInputError: an unknown format.
        SessionNotFoundError: no such session in this namespace.
    """
    core = core_of(store)
    fmt = export_format(format)
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
                flavour=core.flavour,
                sealed=core.encrypted,
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
    fmt = export_format(format)
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
                sealed=core.encrypted,
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
