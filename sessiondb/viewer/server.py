"""Running the viewer: :func:`serve` binds the address, prints where to open it and
serves until interrupted (Uvicorn, in the caller's event loop)."""

from __future__ import annotations

import asyncio
import socket
from typing import TextIO
from urllib.parse import quote

import uvicorn

from ..errors import ConfigurationError
from ..store import SessionStore
from .app import create_app
from .auth import check_bind


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
) -> None:
    """Serve the viewer of ``store`` on ``host:port`` until cancelled or interrupted.

    Raises:
        ConfigurationError: a non-loopback ``host`` without ``token``, a weak token, an
            address that cannot be bound.
    """
    check_bind(host, token)
    sock = bind(host, port)
    stopping = asyncio.Event()
    config = uvicorn.Config(
        create_app(store, token=token, stopping=stopping),
        log_level="warning",
        access_log=False,  # an access log would hold the ?token= of the first request
        lifespan="off",
        server_header=False,
        # A stream still open then is cancelled (its watch with it).
        timeout_graceful_shutdown=5,
    )
    server = _Server(config, stopping)
    if out is not None:
        print(f"sessiondb viewer (read-only): {address(sock, token)}", file=out, flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
