"""``python -m bench``: run the figures, print the table, optionally write it as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from time import perf_counter

from . import agents, contention, figures, peers, replicas, turns
from .databases import BenchError, PostgresServer, Server, SQLiteFiles, find_postgres
from .report import Result, table
from .sizes import for_mode

Figure = Callable[[figures.Run, Server], Awaitable[list[Result]]]
BOTH = ("postgres", "sqlite")

FIGURES: dict[int, tuple[str, Figure, tuple[str, ...]]] = {
    1: ("append one message", figures.append_one, BOTH),
    2: ("append a batch", figures.append_batch, BOTH),
    3: ("bulk load", figures.bulk_load, BOTH),
    4: ("context load", figures.context_load, BOTH),
    5: ("list sessions", figures.listing, BOTH),
    6: ("fork", figures.fork, BOTH),
    7: ("contended appends", contention.contended_appends, ("postgres",)),
    8: ("import a Claude Code directory", figures.import_files, BOTH),
    9: ("export it again", figures.export_files, BOTH),
    10: ("OpenAI Agents SDK sessions", agents.agents_sessions, ("postgres",)),
    11: ("turn lease overhead", turns.turn_overhead, BOTH),
    12: ("read replicas", replicas.replica_reads, ("postgres",)),
    13: ("reads beside their peers", peers.peer_reads, ("postgres",)),
}

FLOORS = """\
floors (the bare driver on the same tables, same run):
  1  one statement that bumps the head and inserts the row: asyncpg (WITH ... UPDATE ...
     RETURNING, INSERT ... SELECT); sqlite3: BEGIN IMMEDIATE, UPDATE ... RETURNING,
     INSERT, COMMIT
  2  the same as one multi-row statement (asyncpg: INSERT ... SELECT FROM unnest(...));
     sqlite3: UPDATE ... RETURNING and executemany in one transaction
  3  the same rows built from the same dicts, COPY with asyncpg / executemany in sqlite3
  4  SELECT seq, payload of the kept rows (and the same, each payload parsed into
     dicts with orjson: the floor of context(), which returns models); reading,
     parsing (orjson) and replaying the same session as a JSONL file; the short
     session; for records(), SELECT of the short session's rows, payloads parsed
  5  the first page (and the first page as a bare SELECT)
  6  a fork of a 10-record session
  7  the same writers sending the one-statement bump-and-insert through asyncpg
     (Postgres only: SQLite has one writer at a time by design)
  8  parsing the same lines with orjson, then COPY (asyncpg) / executemany (sqlite3) of
     a session row per file and a record per line (the line as payload, its uuids)
  9  SELECT session_id, payload of every record in order, each payload written as a
     line, a file per session
 10  not a floor but the alternative: the OpenAI Agents SDK's own SQLAlchemySession on
     the same database, holding the same items (needs sessiondb[openai-agents] and
     openai-agents[sqlalchemy]; skipped without them)
 11 sessiondb's own store.append of one message (the issue asks for the lease's
     overhead against one append): taking and releasing an uncontended turn, and one
     fenced turn.append inside a held turn
 12 sessiondb itself on the primary alone: context() of a store without replicas, and
     today's append (the replica's own primary and standby are built for the figure with
     pg_createcluster and pg_basebackup; skipped, and said so, without them or root)
 13 not a floor but the peers: reading the whole history of the same conversation from
     the OpenAI Agents SDK's SQLAlchemySession (get_items) and langchain-postgres's
     PostgresChatMessageHistory (aget_messages) on the same database (needs
     sessiondb[bench]; each peer's rows skipped without it)"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="sessiondb's figures beside their bare-driver floors, in one run.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller data sets (20k instead of 100k); under 2 minutes on 2 cores",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="tiny sizes that only prove every figure runs (the smoke test); not a measurement",
    )
    parser.add_argument("--json", metavar="FILE", type=Path, help="also write the table as JSON")
    parser.add_argument(
        "--only",
        metavar="FIGURE",
        type=int,
        nargs="+",
        choices=sorted(FIGURES),
        help="run only these figures (1-12)",
    )
    parser.add_argument(
        "--backend",
        nargs="+",
        choices=BOTH,
        default=list(BOTH),
        help="run on these backends (default both)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data")
    return parser.parse_args(argv)


def revision() -> str:
    """The checkout's commit, with ``+dirty`` when sessiondb/ has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "sessiondb"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


class Log:
    """Progress lines on stderr, with the time since the start."""

    def __init__(self) -> None:
        self.start = perf_counter()

    def __call__(self, text: str) -> None:
        print(f"[{perf_counter() - self.start:7.1f} s] {text}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace, log: Log) -> tuple[list[Result], list[str]]:
    sizes = for_mode(args.quick, args.tiny)
    numbers = sorted(set(args.only or FIGURES))
    results: list[Result] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sessiondb-bench-") as tmp:
        servers: list[Server] = []
        if "postgres" in args.backend:
            servers.append(PostgresServer(await find_postgres()))
        if "sqlite" in args.backend:
            servers.append(SQLiteFiles(Path(tmp)))
        try:
            versions = []
            for server in servers:
                await server.setup()
                versions.append(await server.version())
                if isinstance(server, PostgresServer):
                    log(f"postgres: this run's databases are {server.prefix}_*")
            print(
                f"sessiondb benchmark ({revision()}): {sizes.mode} mode, {os.cpu_count()} cores, "
                f"Python {platform.python_version()}, {', '.join(versions)}",
                flush=True,
            )
            context = figures.Run(sizes=sizes, seed=args.seed, workdir=Path(tmp), log=log)
            for number in numbers:
                title, figure, backends = FIGURES[number]
                for server in servers:
                    if server.backend not in backends:
                        continue
                    log(f"figure {number} ({title}) on {server.backend}")
                    try:
                        results += await figure(context, server)
                    except Exception as exc:
                        traceback.print_exc()
                        failures.append(f"figure {number} on {server.backend}: {exc}")
        finally:
            for server in servers:
                await server.cleanup()
    return results, failures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = Log()
    try:
        results, failures = asyncio.run(run(args, log))
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print()
    print(table(results))
    print()
    print(FLOORS)
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in results], indent=2) + "\n")
        log(f"wrote {args.json}")
    log(f"done in {perf_counter() - log.start:.1f} s")
    for failure in failures:
        print(f"bench: FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
