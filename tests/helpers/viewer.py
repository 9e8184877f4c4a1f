"""The viewer in the tests: an HTTP client on the ASGI app in the test's own event loop
(the store's), an event-stream reader driving the app by hand (so that the test decides
when the browser goes), and what a viewer page may be made of."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from helpers.html_pages import ALLOWED, PageParts
from sessiondb import SessionStore
from sessiondb.viewer import create_app

ORIGIN = "http://127.0.0.1:8800"


@contextmanager
def served(db_url: str, cwd: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """``sessiondb serve`` in a process of its own, as an operator runs it: the address it
    prints and its process id. On leaving, the process is stopped by SIGTERM (uvicorn
    stops, the store closes) and must not have printed a traceback or an error."""
    command = [sys.executable, "-m", "sessiondb", "--db", db_url, "serve", "--port", "0", *extra]
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("sessiondb viewer"), (line, process.stderr and process.stderr.read())
        yield line.rsplit(" ", 1)[1].strip(), process.pid
    finally:
        process.terminate()
        try:
            _, errors = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors = process.communicate(timeout=10)
    assert "Traceback" not in errors and "ERROR" not in errors, errors


# The tags and attributes the viewer adds to the export's.
VIEWER_ALLOWED = {
    **ALLOWED,
    "link": {"rel", "href"},
    "script": {"src", "defer"},
    "nav": {"class"},
    "form": {"class", "action", "method", "role"},
    "input": {"type", "name", "value", "placeholder", "aria-label", "maxlength", "checked"},
    "label": {"class"},
    "button": {"type"},
    "span": {"class", "id"},
    "div": {"class", "id"},
    "main": {"id", "data-session", "data-seq", "data-size", "data-first", "data-last"},
    "h1": set(),
    "table": {"class"},
    "thead": set(),
    "tbody": {"id"},
    "tr": {"id"},
    "th": set(),
    "td": {"class"},
    "p": {"class", "id"},
    "ol": {"class"},
    "li": {"class"},
    "mark": set(),
    "a": {"href", "rel", "class"},
}
_LINK = re.compile(
    r"/|#r\d+|/s/[0-9A-HJKMNP-TV-Z]{26}(\?at=\d+)?(#r\d+)?|/s/[0-9A-HJKMNP-TV-Z]{26}/r/\d+"
    r"|/\?cursor=[\w%=-]+|/search\?[\w%=&+.-]+"
)


def strange(parts: PageParts) -> list[tuple[str, dict[str, str | None]]]:
    """Tags or attributes a viewer page never writes, links it never makes, scripts
    other than its own."""
    odd = []
    for tag, attrs in parts.tags:
        known = tag in VIEWER_ALLOWED and set(attrs) <= VIEWER_ALLOWED[tag]
        if tag == "a":
            known = known and bool(_LINK.fullmatch(attrs.get("href") or ""))
        elif tag == "img":
            known = known and (attrs.get("src") or "").startswith("data:image/")
        elif tag == "script":
            known = known and attrs.get("src") == "/static/viewer.js"
        elif tag == "link":
            known = known and attrs.get("href") in ("/static/viewer.css", "data:,")
        if not known:
            odd.append((tag, attrs))
    return odd


@asynccontextmanager
async def client(store: SessionStore, token: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(store, token=token))
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
        yield http


class EventStream:
    """``GET path`` on the app, read as server-sent events until :meth:`close` (the
    browser goes: ``http.disconnect``)."""

    def __init__(
        self,
        store: SessionStore,
        path: str,
        headers: dict[str, str] | None = None,
        app: Any = None,
    ):
        self.app = app if app is not None else create_app(store)
        path, _, query = path.partition("?")
        raw = [(b"host", b"127.0.0.1:8800")]
        raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        self.scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": query.encode(), "root_path": "", "headers": raw,
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8800),
        }  # fmt: skip
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.events: list[tuple[str, str | None, Any]] = []
        self.arrived = asyncio.Event()
        self.gone = asyncio.Event()
        self.task = asyncio.ensure_future(self.app(self.scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
            return
        self.body += message.get("body", b"")
        while b"\n\n" in self.body:
            block, _, self.body = self.body.partition(b"\n\n")
            fields: dict[str, str] = {}
            for line in block.decode().split("\n"):
                name, _, value = line.partition(": ")
                fields[name] = value
            if "event" in fields:
                self.events.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
                self.arrived.set()

    async def next_event(self, timeout: float = 30.0) -> tuple[str, str | None, Any]:
        """The next event not yet taken (fails after ``timeout`` seconds)."""
        async with asyncio.timeout(timeout):
            while not self.events:
                self.arrived.clear()
                if self.task.done():
                    raise AssertionError(f"the stream ended: {self.task.result()!r}")
                await self.arrived.wait()
        return self.events.pop(0)

    async def close(self, timeout: float = 10.0) -> None:
        """The browser goes; the app's call must end within ``timeout`` seconds."""
        self.gone.set()
        await asyncio.wait_for(self.task, timeout)


async def feed_connections(store: SessionStore, expect: int | None = None) -> int:
    """The store's LISTEN connections in pg_stat_activity (waits for ``expect``: a
    closed connection leaves the view a moment later)."""
    from sqlalchemy import text

    query = text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'sessiondb-feed'"
    )
    count = -1
    for _ in range(100):
        count = len(await store.core.backend.fetch((query, {})))
        if expect is None or count == expect:
            break
        await asyncio.sleep(0.05)
    return count
