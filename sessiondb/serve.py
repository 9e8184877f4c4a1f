"""The ``sessiondb serve`` command: its options and its handler. The viewer itself is
:mod:`sessiondb.viewer` (the ``serve`` extra), imported by the handler only, so that the
CLI's other commands and ``--help`` never load Starlette or Uvicorn."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from .store import SessionStore


def add_command(commands: Any) -> None:
    """Add ``serve`` to the CLI's sub-commands (``commands``: argparse's sub-parsers)."""
    serve = commands.add_parser(
        "serve", help="a read-only web viewer: sessions, search, live transcripts"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8800, help="port, 0: any free (default: 8800)")
    serve.add_argument(
        "--token", help="required off localhost: every request must carry it (16+ characters)"
    )
    serve.set_defaults(handler=run)


async def run(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    """Serve the viewer of ``store`` until interrupted (the CLI's handler)."""
    from .viewer import auth, serve  # sessiondb[serve]: loaded here only

    auth.check_bind(args.host, args.token)  # before anything else: a clear refusal
    await serve(store, host=args.host, port=args.port, token=args.token, out=out)
