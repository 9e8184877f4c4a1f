"""The viewer's ASGI application (Starlette): four pages, two static files, two event
streams, all ``GET``; nothing writes.

=========================  ==========================================================
``/``                      the sessions, newest activity first (``?cursor=`` pages on)
``/events``                server-sent events: the first page's changes (``watch_all``)
``/s/<id>``                a session's transcript, its last page (``?at=N``: the page
                           holding seq N), followed live by its script
``/s/<id>/events``         server-sent events: the page's changes (``from_seq``, ``at``)
``/s/<id>/r/<seq>``        one record whole, as plain text (a page cuts a record past
                           its share of the page's bytes, and links here)
``/search?q=``             search (``cursor``, ``session``): ``store.search``
``/static/viewer.js|css``  the script and the style sheet, from the package
=========================  ==========================================================

A transcript is paged (:data:`pages.PAGE_RECORDS` records a page): a page reads its
records, and those after it that mark them, never the whole session, and is rendered
in a worker thread, so that one huge session holds neither the event loop nor the
memory. The event streams of one session share one watch (:class:`_Tail`); each holds
its page and at most :data:`MAX_QUEUED` records waiting to be sent.

A bad session id, cursor or query is a 400 page, a session not found a 404 page, each
saying why; an unexpected error a bare 500 (never a traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, Callable
from functools import partial
from importlib import resources
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .. import errors
from ..errors import InvalidInputError, InvalidQueryError, NotFoundError, SessionDBError, brief
from ..formats.html import STYLE
from ..formats.stored import StoredRecord
from ..ids import check_session_id
from ..models import Record, SessionInfo
from ..store import SessionStore
from . import pages
from .auth import ASGIApp, Gate, Receive, Scope, Send

#: Sessions per page of the list, search hits per page.
PAGE_SIZE = 50
SEARCH_SIZE = 20
MAX_QUERY_CHARS = 1_000
#: An idle event stream sends a comment this often (a closed connection is noticed).
KEEPALIVE_S = 15.0
#: Event streams open at once; one more is a 503 (each holds a watch and a task, and a
#: page left open in many tabs, or a client that opens and never reads, must not grow
#: the server without bound).
MAX_STREAMS = 64
#: Records a stream may have waiting to be sent; a stream further behind ends, and the
#: browser reconnects from the last seq it has (``Last-Event-ID``), read from the store.
MAX_QUEUED = 1_000
#: Records read per query while a stream catches up with its session.
CATCH_UP = 500
#: Seqs read per query for the overlays after a page that may mark it. One query read
#: every overlay of the rest of the session, and the store makes its rows into records
#: on the event loop's thread: 10,000 tombstones took 0.31 s on SQLite, all of it held
#: in memory. In pieces, the loop is free between them (a piece of nothing but
#: overlays is ~0.15 s), and only the overlays that mark the page are kept.
OVERLAY_SEQS = 5_000
_SEQ = re.compile(r"[0-9]{1,18}")
T = TypeVar("T")

_VIEWER_STYLE = """
.bar{display:flex;gap:1rem;align-items:center;flex-wrap:wrap;padding:.4rem 0 .8rem;
border-bottom:1px solid #ddd;margin-bottom:.6rem}
.bar .home{font-weight:600;text-decoration:none}
.search{display:flex;gap:.4rem;align-items:center;flex:1}
.search input[type=search]{flex:1;min-width:10rem;padding:.3rem .5rem;font:inherit}
.scope{font-size:.85rem;color:#555}
.live{font-size:.8rem;padding:.1rem .5rem;border-radius:1rem;background:#eee;color:#555}
.live.on{background:#e6f4ea;color:#1e6b34}.live.off{background:#fdecea;color:#9b1c1c}
table.sessions{border-collapse:collapse;width:100%;font-size:.92rem}
.sessions th,.sessions td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #e5e5e5;
vertical-align:top}
.sessions td.num{text-align:right}
.sessions code{font-size:.78rem;color:#666}
.dim{color:#777}.error{color:#9b1c1c}
.hits{padding-left:1.4rem}.hit{margin:.6rem 0}
.hit .head{display:flex;gap:.6rem;font-size:.85rem;color:#555}
.snippet{white-space:pre-wrap;overflow-wrap:anywhere}
mark{background:#fff3a3;padding:0 .1rem}
.item.fresh>*,tr.fresh>td{animation:fresh 1.5s ease-out}
@keyframes fresh{from{background:#fffbd6}}
"""


def create_app(
    store: SessionStore,
    *,
    token: str | None = None,
    stopping: asyncio.Event | None = None,
    max_streams: int = MAX_STREAMS,
) -> ASGIApp:
    """The viewer over ``store`` (which the caller opens and closes): an ASGI app,
    behind the token gate (:mod:`sessiondb.viewer.auth`). Setting ``stopping`` ends the
    open event streams (the server is going down: they would hold it up). At most
    ``max_streams`` event streams are open at once; another gets a 503 and the page
    says it is not live."""
    viewer = _Viewer(store, stopping or asyncio.Event(), max_streams)
    routes = [
        Route("/", viewer.sessions),
        Route("/events", viewer.list_events),
        Route("/s/{session_id}", viewer.session),
        Route("/s/{session_id}/events", viewer.events),
        Route("/s/{session_id}/r/{seq}", viewer.record_text),
        Route("/search", viewer.search),
        Route("/static/viewer.js", _script),
        Route("/static/viewer.css", _style),
    ]
    handlers: Any = {SessionDBError: _error_page}
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.router.redirect_slashes = False  # one address per page; "/s/x/" is a 404
    return Gate(app, token)


async def _error_page(request: Request, exc: Exception) -> Response:
    if isinstance(exc, NotFoundError):
        status = 404
    elif isinstance(exc, InvalidInputError):
        status = 400
    else:
        status = 503 if isinstance(exc, errors.DatabaseUnavailableError) else 500
    return HTMLResponse(pages.error_page(status, str(exc)), status_code=status)


def _script(request: Request) -> Response:
    body = resources.files(__package__).joinpath("viewer.js").read_bytes()
    return Response(body, media_type="text/javascript; charset=utf-8")


def _style(request: Request) -> Response:
    return Response(STYLE + _VIEWER_STYLE, media_type="text/css; charset=utf-8")


def _seq(request: Request, name: str) -> int | None:
    """The query parameter ``name`` as a seq (an integer >= 0), or None."""
    value = _one(request, name, 20)
    if value is None:
        return None
    if not _SEQ.fullmatch(value):
        raise InvalidInputError(f"{name} must be a seq, an integer >= 0: {brief(value)}")
    return int(value)


def _one(request: Request, name: str, limit: int = MAX_QUERY_CHARS) -> str | None:
    """The query parameter ``name``, once, at most ``limit`` characters."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise InvalidInputError(f"{name} is given {len(values)} times")
    if values and len(values[0]) > limit:
        raise InvalidInputError(f"{name} is longer than {limit} characters")
    return values[0] if values else None


class _Viewer:
    def __init__(self, store: SessionStore, stopping: asyncio.Event, max_streams: int) -> None:
        self.store = store
        self.stopping = stopping
        self.max_streams = max_streams
        self.streams = 0  # open, or being opened
        self.tails: dict[str, _Tail] = {}  # session id -> the watch its streams share

    async def sessions(self, request: Request) -> Response:
        cursor = _one(request, "cursor")
        page = await self.store.list_sessions(limit=PAGE_SIZE, cursor=cursor or None)
        return HTMLResponse(pages.sessions_page(page, first=not cursor, size=PAGE_SIZE))

    async def _page(
        self, info: SessionInfo, window: range, seen: int | None = None
    ) -> list[StoredRecord]:
        """The records of the page ``window`` (up to ``seen``, else the session's head):
        its own, the next :data:`pages.LOOKAHEAD` (tool results of its calls), and the
        overlays after those that mark it (read :data:`OVERLAY_SEQS` seqs at a time)."""
        read = partial(self.store.records, info.id, include_tombstoned=True)
        head = info.last_seq if seen is None else seen
        upto = min(window.stop - 1 + pages.LOOKAHEAD, head)
        records = [StoredRecord.of(r) for r in await read(from_seq=window.start, to_seq=upto)]
        for start in range(upto + 1, head + 1, OVERLAY_SEQS):
            found = await read(
                kinds=pages.OVERLAYS, from_seq=start, to_seq=min(start + OVERLAY_SEQS - 1, head)
            )
            records += [r for r in map(StoredRecord.of, found) if pages.keeps(window, r)]
        return records

    async def session(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        check_session_id(session_id)
        at = _seq(request, "at")
        info = await self.store.get_session(session_id)
        window = pages.window_of(info.last_seq if at is None else min(at, info.last_seq))
        records = await self._page(info, window)

        def render() -> str:  # seconds of CPU for a big page: not on the event loop
            transcript = pages.LiveTranscript(info, records, window)
            transcript.last = max(transcript.last, info.last_seq)
            return pages.transcript_page(transcript)

        return HTMLResponse(await asyncio.to_thread(render))

    async def record_text(self, request: Request) -> Response:
        """One record whole, as ``text/plain`` (what a page cut shows in full): bounded
        by the store's record limit, not by the page."""
        session_id = request.path_params["session_id"]
        check_session_id(session_id)
        seq_text = request.path_params["seq"]
        if not _SEQ.fullmatch(seq_text):
            raise InvalidInputError(f"a record's seq is an integer >= 0: {brief(seq_text)}")
        seq = int(seq_text)
        await self.store.get_session(session_id)  # a missing session is a 404
        found = await self.store.records(
            session_id, include_tombstoned=True, from_seq=seq, to_seq=seq
        )
        if not found:
            raise NotFoundError(f"session {session_id} has no record #{seq}")
        body = await asyncio.to_thread(pages.record_text, StoredRecord.of(found[0]))
        return Response(body, media_type="text/plain; charset=utf-8")

    async def events(self, request: Request) -> Response:
        """The transcript's changes after ``from_seq`` (or the ``Last-Event-ID`` a
        reconnecting browser sends), as server-sent events."""
        session_id = request.path_params["session_id"]
        last = request.headers.get("last-event-id") or _one(request, "from_seq", 20)
        if last is None:
            raise InvalidInputError("from_seq is missing: the seq the page shows")
        if not _SEQ.fullmatch(last):
            raise InvalidInputError(f"from_seq must be a seq, an integer >= 0: {brief(last)}")
        seen = int(last)
        at = _seq(request, "at")
        check_session_id(session_id)
        if (full := self._full()) is not None:
            return full
        self.streams += 1  # taken before the first await: the count cannot overshoot
        try:
            info = await self.store.get_session(session_id)
            window = pages.window_of(seen if at is None else at)
            records = await self._page(info, window, seen)
            transcript = await asyncio.to_thread(pages.LiveTranscript, info, records, window)
            transcript.last = seen
        except BaseException:
            self.streams -= 1
            raise
        head = max(info.last_seq, seen)
        return _EventStream(
            self.store, transcript, partial(self._tail, info.id, head), self.stopping, self._closed
        )

    def _tail(self, session_id: str, head: int) -> _Tail:
        """The session's shared watch, started at ``head`` if there is none."""
        tail = self.tails.get(session_id)
        if tail is None:
            tail = self.tails[session_id] = _Tail(self.store, session_id, head, self.tails)
        return tail

    async def list_events(self, request: Request) -> Response:
        """The first page's changes: the namespace's activity, as server-sent events."""
        if (full := self._full()) is not None:
            return full
        self.streams += 1
        return _ListStream(self.store, self.stopping, self._closed)

    def _full(self) -> Response | None:
        """The 503 when :data:`MAX_STREAMS` streams are open, else None."""
        if self.streams < self.max_streams:
            return None
        text = f"503: {self.max_streams} live streams are open already; try again later\n"
        return Response(text, 503, {"retry-after": "30"}, "text/plain; charset=utf-8")

    def _closed(self) -> None:
        self.streams -= 1

    async def search(self, request: Request) -> Response:
        query = (_one(request, "q") or "").strip()
        cursor = _one(request, "cursor")
        session_id = _one(request, "session", 26) or None
        if session_id is not None:
            check_session_id(session_id)
        if not query:
            return HTMLResponse(pages.search_page("", session_id, [], None, {}))
        try:
            found = await self.store.search(
                query, limit=SEARCH_SIZE, cursor=cursor, session_id=session_id
            )
        except InvalidQueryError as exc:
            page = pages.search_page(query, session_id, [], None, {}, error=str(exc))
            return HTMLResponse(page, status_code=400)
        names: dict[str, str | None] = {}
        for hit in found.hits:
            if hit.session_id not in names:
                with contextlib.suppress(SessionDBError):
                    names[hit.session_id] = (await self.store.get_session(hit.session_id)).name
        page = pages.search_page(query, session_id, found.hits, found.next_cursor, names)
        return HTMLResponse(page)


class _Stream(Response):
    """``text/event-stream``: what :meth:`_pump` sends, until the browser goes
    (``http.disconnect``) or the server stops; then the pump is cancelled, its watch
    closed, and ``closed`` called (the stream's slot given back): nothing stays behind."""

    media_type = "text/event-stream"

    def __init__(
        self, store: SessionStore, stopping: asyncio.Event, closed: Callable[[], None]
    ) -> None:
        # Not Response.__init__: it would declare the length of an empty body.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"x-accel-buffering", b"no"),
        ]
        self.store = store
        self.stopping = stopping
        self.closed = closed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._stream(receive, send)
        finally:
            self.closed()

    async def _stream(self, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        pump = asyncio.ensure_future(self._pump(send))
        gone = asyncio.ensure_future(_disconnected(receive))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({pump, gone, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, gone, stop):
                task.cancel()
            # Each task's cancellation runs its own clean-up (the watch's, the feed's).
            await asyncio.gather(pump, gone, stop, return_exceptions=True)
        # The end of the body (the server drops it when the browser has gone).
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, send: Send) -> None:
        raise NotImplementedError

    async def _batches(self, watch: AsyncGenerator[T, None]) -> AsyncGenerator[list[T], None]:
        """What ``watch`` yields, in batches (all that arrived while the last was sent),
        and a keep-alive comment after :data:`KEEPALIVE_S` idle; a :class:`SessionDBError`
        of the watch is raised after the batch before it."""
        queue: asyncio.Queue[T | SessionDBError] = asyncio.Queue()

        async def produce() -> None:
            try:
                async for item in watch:
                    queue.put_nowait(item)
            except SessionDBError as exc:
                queue.put_nowait(exc)
            finally:
                await watch.aclose()

        producer = asyncio.ensure_future(produce())
        try:
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_S):
                        first = await queue.get()
                except TimeoutError:
                    yield []
                    continue
                batch = [first]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                items = [i for i in batch if not isinstance(i, SessionDBError)]
                if items:
                    yield items
                failure = next((e for e in batch if isinstance(e, SessionDBError)), None)
                if failure is not None:
                    raise failure
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)


class _ListStream(_Stream):
    """The first page of the sessions list, live: one ``rows`` event (JSON: ``put`` a
    session's row at the top, or ``remove`` it) per batch of the namespace's activity
    (:meth:`SessionStore.watch_all`)."""

    async def _pump(self, send: Send) -> None:
        await send(_chunk(b"retry: 1000\n\n"))
        batches = self._batches(self.store.watch_all())
        try:
            async for batch in batches:
                if not batch:
                    await send(_chunk(b": idle\n\n"))
                    continue
                ops: list[dict[str, Any]] = []
                for session_id in dict.fromkeys(sid for sid, _ in batch):  # each once
                    try:
                        info = await self.store.get_session(session_id)
                    except NotFoundError:
                        ops.append({"op": "remove", "key": session_id})
                        continue
                    ops.append({"op": "put", "key": session_id, "html": pages.session_row(info)})
                await send(_event("rows", ops, None))
        except SessionDBError as exc:
            await send(_event("failed", {"message": str(exc)}, None, more=False))
        finally:
            await batches.aclose()


class _Tail:
    """One watch of a session, shared by every event stream open on it: it reads each
    new record once and hands it to each stream's queue (a page of 64 tabs reads the
    session once, not 64 times). Started by the first stream at the session's head,
    stopped with the last; a stream that joins later reads what it missed from the
    store itself (:meth:`_EventStream._catch_up`)."""

    def __init__(self, store: SessionStore, session_id: str, head: int, tails: dict[str, _Tail]):
        self.session_id = session_id
        self.seen = head  # the last seq handed on
        self.queues: set[asyncio.Queue[Record | SessionDBError | None]] = set()
        self.tails = tails
        self.task = asyncio.ensure_future(self._run(store.watch(session_id, from_seq=head)))

    def join(self) -> asyncio.Queue[Record | SessionDBError | None]:
        """A queue of the records after :attr:`seen` (read it first: nothing is missed),
        then an error, or ``None`` when the stream fell :data:`MAX_QUEUED` behind."""
        queue: asyncio.Queue[Record | SessionDBError | None] = asyncio.Queue(MAX_QUEUED + 1)
        self.queues.add(queue)
        return queue

    async def leave(self, queue: asyncio.Queue[Record | SessionDBError | None]) -> None:
        """``queue``'s stream has ended; the last one's leaving stops the watch."""
        self.queues.discard(queue)
        if self.queues:
            return
        if self.tails.get(self.session_id) is self:
            del self.tails[self.session_id]
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)  # the watch is closed

    def _put(self, queue: asyncio.Queue[Record | SessionDBError | None], item: Any) -> None:
        if queue.qsize() >= MAX_QUEUED:
            self.queues.discard(queue)  # too far behind: it ends, and reads from the store
            item = None
        queue.put_nowait(item)

    async def _run(self, watch: AsyncGenerator[Record, None]) -> None:
        try:
            async for record in watch:
                self.seen = record.seq
                for queue in list(self.queues):
                    self._put(queue, record)
        except SessionDBError as exc:
            if self.tails.get(self.session_id) is self:
                del self.tails[self.session_id]  # a stream opened now starts a new one
            for queue in list(self.queues):
                self._put(queue, exc)
        finally:
            await watch.aclose()


class _EventStream(_Stream):
    """A page's changes: one ``change`` event (JSON: the ops of
    :meth:`LiveTranscript.advance`) per batch of records, its ``id`` the last seq; a
    ``gone`` event when the session is deleted. The records come from the session's
    :class:`_Tail`; the stream holds its page and what waits in its queue, nothing that
    grows with the session."""

    def __init__(
        self,
        store: SessionStore,
        transcript: pages.LiveTranscript,
        tail: Callable[[], _Tail],
        stopping: asyncio.Event,
        closed: Callable[[], None],
    ) -> None:
        super().__init__(store, stopping, closed)
        self.transcript = transcript
        self.tail_of = tail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Joined with no await between: what comes after ``since`` is in the queue, what
        # came before it is read from the store (_catch_up).
        tail = self.tail_of()
        self.since = tail.seen
        self.queue = tail.join()
        try:
            await super().__call__(scope, receive, send)
        finally:
            await tail.leave(self.queue)

    async def _pump(self, send: Send) -> None:
        await send(_chunk(b"retry: 1000\n\n"))
        try:
            await self._catch_up(send)
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_S):
                        first = await self.queue.get()
                except TimeoutError:
                    await send(_chunk(b": idle\n\n"))
                    continue
                batch = [first]
                while not self.queue.empty():
                    batch.append(self.queue.get_nowait())
                records = [r for r in batch if isinstance(r, Record)]
                records = [r for r in records if r.seq > self.transcript.seq]
                if records:
                    await self._send_changes(send, records)
                failure = next((e for e in batch if not isinstance(e, Record)), False)
                if isinstance(failure, SessionDBError):
                    raise failure
                if failure is None:
                    return  # fell behind: the browser reconnects from its last seq
        except SessionDBError as exc:
            kind = "gone" if isinstance(exc, NotFoundError) else "failed"
            await send(_event(kind, {"message": str(exc)}, None, more=False))

    async def _catch_up(self, send: Send) -> None:
        """What was stored after the browser's seq, up to where the tail took over,
        read from the store :data:`CATCH_UP` seqs at a time."""
        seen = self.transcript.seq
        while seen < self.since:
            upto = min(seen + CATCH_UP, self.since)
            records = await self.store.records(
                self.transcript.info.id, include_tombstoned=True, from_seq=seen + 1, to_seq=upto
            )
            if records:
                await self._send_changes(send, records)
            seen = upto

    async def _send_changes(self, send: Send, records: list[Record]) -> None:
        info: SessionInfo = self.transcript.info
        with contextlib.suppress(SessionDBError):  # gone meanwhile: the watch will say so
            info = await self.store.get_session(info.id)
        stored = [StoredRecord.of(r) for r in records]
        ops = await asyncio.to_thread(self.transcript.advance, info, stored)
        await send(_event("change", ops, self.transcript.seq))


def _chunk(body: bytes, *, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": body, "more_body": more}


def _event(kind: str, data: Any, seq: int | None, *, more: bool = True) -> dict[str, Any]:
    # JSON holds no raw newline, so the data is one "data:" line.
    lines = f"event: {kind}\n" + (f"id: {seq}\n" if seq is not None else "")
    return _chunk(f"{lines}data: {json.dumps(data)}\n\n".encode(), more=more)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
