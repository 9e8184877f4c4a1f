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
from dataclasses import replace
from pathlib import Path
from time import perf_counter

from . import (
    agents,
    combined,
    contention,
    encryption,
    figures,
    peers,
    replicas,
    scale,
    search,
    startup,
    telemetry,
    turns,
)
from .databases import BenchError, PostgresServer, Server, SQLiteFiles, find_postgres
from .report import Result, footprint_table, table
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
    13: ("telemetry overhead", telemetry.telemetry_overhead, BOTH),
    14: ("start-up", startup.startup, ("sqlite",)),
    15: ("tasks appending to one session", combined.combined_appends, ("postgres",)),
    16: ("search", search.search_figures, BOTH),
    17: ("encryption at rest", encryption.encryption_overhead, BOTH),
    18: ("reads beside their peers", peers.peer_reads, ("postgres",)),
}

FLOORS = """\
floors (the bare driver on the same tables, same run):
  1  one statement that bumps the head and inserts the row: asyncpg (WITH ... UPDATE ...
     RETURNING, INSERT ... SELECT); sqlite3: BEGIN IMMEDIATE, UPDATE ... RETURNING,
     INSERT, the FTS5 row (INSERT INTO sessiondb_search under the record's lastrowid,
     the text being the message's text blocks joined), COMMIT
  2  the same as one multi-row statement (asyncpg: INSERT ... SELECT FROM unnest(...));
     sqlite3: UPDATE ... RETURNING, then an INSERT per record with its FTS5 row, in one
     transaction
  3  the same rows built from the same dicts, COPY with asyncpg / in sqlite3 executemany
     of the sessions, an INSERT per record with its FTS5 row
  4  SELECT seq, payload of the kept rows (and the same, each payload parsed into
     dicts with orjson: the floor of context(), which returns models); reading,
     parsing (orjson) and replaying the same session as a JSONL file; the short
     session; for records(), SELECT of the short session's rows, payloads parsed
  5  the first page (and the first page as a bare SELECT)
  6  a fork of a 10-record session
  7  the same writers sending the one-statement bump-and-insert through asyncpg
     (Postgres only: SQLite has one writer at a time by design)
  8  parsing the same lines with orjson, then COPY (asyncpg) / executemany (sqlite3) of
     a session row per file and a record per line (the line as payload, its uuids;
     sqlite3: an INSERT per record with the FTS5 row of its message's text blocks);
     for context(), SELECT of one imported session's message payloads, each parsed
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
 13 sessiondb's own store.append of one message without the telemetry wrapper (the
     method as defined, before sessiondb.telemetry wrapped it), no provider configured
 14 not the driver: the bare interpreter, python -c pass, started the same way in turns
     with each command (whole processes, from start to exit; the goals are on
     sessiondb's own time)
 15 8 tasks of one process, each appending one message at a time to one session: the bare
     driver (an asyncpg connection per task, the one-statement bump-and-insert); and not a
     floor but the alternative, langchain-postgres's PostgresChatMessageHistory (a psycopg
     async connection per task, aadd_messages of one message; needs sessiondb[bench],
     skipped without it)
 16 a: the same search over the small database (the same hits); b: a bare query of the
     same index (asyncpg: search @@ to_tsquery, ts_rank, ORDER BY rank LIMIT 21;
     sqlite3: FTS5 MATCH joined to the records, bm25, LIMIT 21), rows with payloads;
     c, d: the same appends / bulk import into a database without the index, by a store
     that computes no text (search_indexing off)
 17 sessiondb itself without keys, in a plain namespace of the same database: append,
     context() of the short session, import_sessions of the bulk batch (needs
     sessiondb[crypto])
 18 not a floor but the peers: reading the whole history of the same conversation from
     the OpenAI Agents SDK's SQLAlchemySession (get_items) and langchain-postgres's
     PostgresChatMessageHistory (aget_messages) on the same database (needs
     sessiondb[bench]; each peer's rows skipped without it)
search index (Postgres): the floors of 1, 2, 3 and 8 (and of 7 and 15, which send 1's
  statement) fill each record's search column as sessiondb does, the text being the
  message's text blocks joined: to_tsvector('simple', text) in the INSERT ... SELECT
  (1, 2); for 3 and 8 COPY of the rows with their text to a temporary table, then one
  INSERT ... SELECT with to_tsvector (COPY cannot call it)"""


SCALE_NOTES = """\
--scale: each figure on the big database beside the same figure on the quick-size one
(the "floor" column), interleaved in one run; goal: scale / quick <= 1.25.
  S1 store.append of one message to a session from the middle of the year
  S2 store.context of a compacted session (the same one, imported into both)
  S3 a deep page of list_sessions (keyset; page 200 of 50 unless the quick one is smaller)
  S4 store.fork of that compacted session
  S5 store.import_path of figure 8's Claude Code directory (deleted again after each run)
  S6 store.search of a word planted in the same 12 records of both databases (page of 20)
  S6b store.search of a word in every eighth record (its hits grow with the database)"""


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
        help=f"run only these figures (1-{max(FIGURES)})",
    )
    parser.add_argument(
        "--backend",
        nargs="+",
        choices=BOTH,
        default=list(BOTH),
        help="run on these backends (default both)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="instead of figures 1-12: append, context, a deep page, a fork and an import "
        "on a database a year old (10M records on Postgres, 2M on SQLite), each as a ratio "
        "to the same figure on a quick-size database in the same run; and the bytes per "
        "record and ANALYZE time of both (--tiny: a tiny size that only proves it runs)",
    )
    parser.add_argument(
        "--scale-records",
        metavar="N",
        type=_positive,
        help="--scale: records of the big database on each backend (default 10M / 2M)",
    )
    parser.add_argument(
        "--scale-sessions",
        metavar="N",
        type=_positive,
        help="--scale: sessions of the big database (default: one per 100 records)",
    )
    args = parser.parse_args(argv)
    if (args.scale_records or args.scale_sessions) and not args.scale:
        parser.error("--scale-records and --scale-sessions go with --scale")
    if args.scale and args.only:
        parser.error(f"--scale runs its own figures; --only is for figures 1-{max(FIGURES)}")
    return args


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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


async def run(
    args: argparse.Namespace, log: Log
) -> tuple[list[Result], list[str], figures.Run | None]:
    # --scale measures its figures at figure 4-8's quick sizes on both databases.
    sizes = for_mode(args.quick or args.scale, args.tiny)
    if args.scale:
        sizes = replace(sizes, mode=f"scale ({sizes.mode} figures)")
    numbers = [] if args.scale else sorted(set(args.only or FIGURES))
    context: figures.Run | None = None
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
            context = figures.Run(
                sizes=sizes,
                seed=args.seed,
                workdir=Path(tmp),
                log=log,
                scale_records=args.scale_records,
                scale_sessions=args.scale_sessions,
            )
            if args.scale:
                for server in servers:
                    log(f"scale on {server.backend}")
                    try:
                        results += await scale.scale_figures(context, server)
                    except Exception as exc:
                        traceback.print_exc()
                        failures.append(f"scale on {server.backend}: {exc}")
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
    return results, failures, context


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = Log()
    try:
        results, failures, context = asyncio.run(run(args, log))
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print()
    print(table(results))
    print()
    footprints = [] if context is None else context.footprints
    if args.scale:
        print(SCALE_NOTES)
        print()
        print(footprint_table(footprints))
    else:
        print(FLOORS)
    if args.json is not None:
        rows = [r.to_json() for r in results]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
        log(f"wrote {args.json}")
        if footprints:
            sizes_json = args.json.with_name(args.json.stem + ".footprint.json")
            sizes_json.write_text(json.dumps([f.to_json() for f in footprints], indent=2) + "\n")
            log(f"wrote {sizes_json}")
    log(f"done in {perf_counter() - log.start:.1f} s")
    for failure in failures:
        print(f"bench: FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
