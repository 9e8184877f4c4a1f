"""Running the viewer: :func:`serve` binds the address, prints where to open it and
serves until interrupted (Uvicorn, in the caller's event loop).

Bounded before any request is read, so that clients which open connections and never
finish a request cannot use up the server's open files (300 such connections made the
viewer unreachable under a low open-file limit):

- a request's head (its line and headers) must arrive within :data:`HEADER_TIMEOUT_S`
  of the connection's opening or of the end of its last response, else the connection
  is closed. Uvicorn has no such timeout: its keep-alive timer starts only after a first
  response and stops at the first byte of the next request, so a client that sends a
  byte now and then, or nothing after a partial head, was kept for ever;
- an idle keep-alive connection is closed after :data:`KEEP_ALIVE_S` (uvicorn's
  ``timeout_keep_alive``);
- at most :func:`connection_limit` connections are open; one more closes the connection
  that has waited longest for a request's head (a browser sends its head at once, a
  client holding connections open does not), or, when every connection is busy with a
  request, the new one. Uvicorn's ``limit_concurrency`` is not used: it counts only once
  a request's head has arrived, so it cannot see these connections;
- a request's head is at most :data:`MAX_HEAD_BYTES` (h11's
  ``max_incomplete_event_size``; more is a 400).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from typing import Any, TextIO
from urllib.parse import quote

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ConfigurationError
from ..store import SessionStore
from .app import create_app
from .auth import check_bind

#: Seconds a client has to send a request's head (a browser takes milliseconds).
HEADER_TIMEOUT_S = 10.0
#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_S = 5
#: Connections open at once, at most (64 live streams, a browser's 6 per host, room).
MAX_CONNECTIONS = 128
#: Bytes of a request's head, at most (a URL of the viewer is under 4 KB; cookies).
MAX_HEAD_BYTES = 16 * 1024


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port`` 0: a free one).

    Raises:
        ConfigurationError: the address cannot be bound (in use, not this machine's).
    """
    if not 0 <= port <= 65535:
        raise ConfigurationError(f"--port must be 0..65535, not {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def address(sock: socket.socket, token: str | None) -> str:
    """The address to open: ``http://host:port/``, with ``?token=`` when there is one."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = socket.gethostname()
    url = f"http://{shown}:{port}/"
    return url + (f"?token={quote(token, safe='')}" if token is not None else "")


def connection_limit(limit: int = MAX_CONNECTIONS) -> int:
    """``limit``, or half the process's open-file limit if that is lower: the store's
    pool, the Python runtime and the listening socket need files too."""
    if sys.platform == "win32":
        return limit
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft // 2))


class _Config(uvicorn.Config):
    """Uvicorn's configuration and the two bounds :class:`_GuardedH11` reads."""

    def __init__(
        self, app: Any, *, header_timeout: float, max_connections: int, **options: Any
    ) -> None:
        super().__init__(app, **options)
        self.header_timeout = header_timeout
        self.max_connections = max_connections


class _GuardedH11(H11Protocol):
    """Uvicorn's HTTP/1.1 protocol with a deadline for each request's head and a cap
    on open connections (see the module's note)."""

    waiting_since = 0.0
    head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()
        config: _Config = self.config  # type: ignore[assignment]
        open_now = [c for c in self.connections if not c.transport.is_closing()]
        if len(open_now) <= config.max_connections:
            return
        waiting = [c for c in open_now if isinstance(c, _GuardedH11) and c.waiting()]
        waiting.remove(self)
        if waiting:
            min(waiting, key=lambda c: c.waiting_since).transport.close()
        else:
            transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        super().connection_lost(exc)

    def waiting(self) -> bool:
        """Whether no request is being answered: the connection waits for a head."""
        return self.cycle is None or self.cycle.response_complete

    def _await_head(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        self.waiting_since = time.monotonic()
        config: _Config = self.config  # type: ignore[assignment]
        self.head_timer = self.loop.call_later(config.header_timeout, self._head_too_late)

    def _head_too_late(self) -> None:
        if self.waiting() and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    """Uvicorn's server, which ends the viewer's event streams when it shuts down
    (they would keep it waiting for them)."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


async def serve(
    store: SessionStore,
    *,
    host: str = "127.0.0.1",
    port: int = 8800,
    token: str | None = None,
    out: TextIO | None = None,
    show_token: bool = False,
) -> None:
    """Serve the viewer of ``store`` on ``host:port`` until cancelled or interrupted.

    Prints the address to open on ``out`` (if given): with ``?token=`` only when
    ``show_token`` (the CLI's ``--token``, which argv shows anyway); else it says how
    to give the token, without it: ``out`` may be a service's log.

    Raises:
        ConfigurationError: a non-loopback ``host`` without ``token``, a weak token, an
            address that cannot be bound.
    """
    check_bind(host, token)
    sock = bind(host, port)
    stopping = asyncio.Event()
    limit = connection_limit()
    config = _Config(
        create_app(store, token=token, stopping=stopping),
        header_timeout=HEADER_TIMEOUT_S,
        max_connections=limit,
        http=_GuardedH11,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        # Also what one wake-up of the loop accepts, at most: more could run out of files
        # before the connections over the cap are closed. A flood beyond it waits for
        # the kernel's retry (300 partial heads: a normal request answered in 1.05 s).
        backlog=limit,
        log_level="warning",
        access_log=False,  # an access log would hold the ?token= of the first request
        lifespan="off",
        server_header=False,
        # A stream still open then is cancelled (its watch with it).
        timeout_graceful_shutdown=5,
    )
    server = _Server(config, stopping)
    if out is not None:
        shown = address(sock, token if show_token else None)
        print(f"sessiondb viewer (read-only): {shown}", file=out, flush=True)
        if token is not None and not show_token:
            print(
                "open it once with ?token=<the token> (not printed here), "
                "or send Authorization: Bearer <the token>",
                file=out,
                flush=True,
            )
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
