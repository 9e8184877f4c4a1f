"""The ``sessiondb serve`` command: its options and its handler. The viewer itself is
:mod:`sessiondb.viewer` (the ``serve`` extra), imported by the handler only, so that the
CLI's other commands and ``--help`` never load Starlette or Uvicorn."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

from .env import ENV_VIEWER_TOKEN

if TYPE_CHECKING:
    from .store import SessionStore


def add_command(commands: Any) -> None:
    """Add ``serve`` to the CLI's sub-commands (``commands``: argparse's sub-parsers)."""
    serve = commands.add_parser(
        "serve",
        help="a read-only web viewer: sessions, search, live transcripts",
        description="A read-only web viewer of the database. On 127.0.0.1 it needs no "
        "token; on any other address it needs one, from --token-file, "
        f"${ENV_VIEWER_TOKEN} or --token (16+ characters), which every request must "
        "then carry. Requests made by pages of other origins are refused.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8800, help="port, 0: any free (default: 8800)")
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="a file holding the token (one line; not readable by other users); "
        f"without it or --token, the token in ${ENV_VIEWER_TOKEN}, if set",
    )
    serve.add_argument(
        "--token",
        help="the token itself; every user of this machine can read it in the process "
        "list (/proc/PID/cmdline): prefer --token-file or the variable",
    )
    serve.set_defaults(handler=run)


async def run(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    """Serve the viewer of ``store`` until interrupted (the CLI's handler)."""
    from .viewer import auth, serve  # sessiondb[serve]: loaded here only

    # Before anything else: a clear refusal, naming where the token came from.
    token, source = auth.resolve_token(args.token, args.token_file)
    auth.check_bind(args.host, token, source or "--token")
    await serve(
        store,
        host=args.host,
        port=args.port,
        token=token,
        out=out,
        show_token=source == "--token",  # in argv already; not from a file or the variable
    )
