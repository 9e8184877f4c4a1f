"""Figure 16: full-text search, and what keeping its index costs the writes.

- 16a the same search over a large and a small database: a selective word planted in
  the same number of records of each, so the hits are the same and only the history
  around them grows (the large one is 1M records in full mode, 200k in quick mode);
- 16b ``store.search`` beside a bare hand-written query of the same index on the large
  database (asyncpg / sqlite3: the match, the rank, the page's rows with their payloads;
  no snippets, no tombstone or prune checks);
- 16c append one message with the index beside the same append without it (a database
  whose index was dropped, and a store that computes no text: ``search_indexing`` off);
- 16d bulk import (``import_sessions``) with the index beside the same without it.
"""

from __future__ import annotations

import itertools
import sqlite3
import statistics
from time import perf_counter

import asyncpg

from sessiondb import SessionStore
from sessiondb.search_statements import RECENT_INDEX

from . import data
from .databases import BenchError, Database, Server
from .figures import Run
from .report import Goal, Result
from .sizes import count
from .timing import compare

# A word the generated corpus never makes (its words are made of short syllables).
NEEDLE = "xylophonequartz"
NEEDLE_RECORDS = 12  # records holding it, in each database
PER_SESSION = 100
CHUNK_SESSIONS = 100  # sessions per import_sessions call while building

_BARE_PG = (
    "SELECT session_id, seq, kind, role, created_at, payload, ts_rank(search, q) AS rank "
    "FROM sessiondb_records, to_tsquery('simple', $1) AS q WHERE search @@ q "
    "ORDER BY rank DESC LIMIT 21"
)
_BARE_SQLITE = (
    "SELECT r.session_id, r.seq, r.kind, r.role, r.created_at, r.payload, "
    "bm25(sessiondb_search) AS rank FROM sessiondb_search "
    "JOIN sessiondb_records AS r ON r.rowid = sessiondb_search.rowid "
    "WHERE sessiondb_search MATCH ? ORDER BY rank LIMIT 21"
)


async def _fill(run: Run, store: SessionStore, records: int, name: str) -> None:
    """``records`` records in sessions of :data:`PER_SESSION`, the needle in
    :data:`NEEDLE_RECORDS` user messages spread evenly over them."""
    sessions = max(1, records // PER_SESSION)
    total = sessions * PER_SESSION
    # Every fourth message starts a turn with a user message (bench.data.conversation).
    targets = {(i * total // NEEDLE_RECORDS) // 4 * 4 for i in range(NEEDLE_RECORDS)}
    planted = 0
    for start in range(0, sessions, CHUNK_SESSIONS):
        n = min(CHUNK_SESSIONS, sessions - start)
        pool = data.conversation(n * PER_SESSION, run.seed, f"{name}-{start}", run.corpus)
        for j, message in enumerate(pool):
            if start * PER_SESSION + j in targets:
                text = message["content"][0]["text"]
                pool[j] = {"role": "user", "content": f"{text} {NEEDLE} {text}"}
                planted += 1
        items = [
            {"messages": pool[i * PER_SESSION : (i + 1) * PER_SESSION], "model": "bench-model"}
            for i in range(n)
        ]
        await store.import_sessions(items)
    if planted != NEEDLE_RECORDS:
        raise BenchError(f"planted the needle in {planted} records, not {NEEDLE_RECORDS}")


async def _without_index(db: Database) -> None:
    """Drop the search index from ``db``: the 'before' side of 16c and 16d (on Postgres
    the GIN index and the recency index that orders a common word's window)."""
    if db.backend == "postgres":
        conn = await asyncpg.connect(db.dsn)
        try:
            await conn.execute("DROP INDEX ix_sessiondb_records_search")
            await conn.execute(f"DROP INDEX {RECENT_INDEX}")
        finally:
            await conn.close()
        return
    conn3 = sqlite3.connect(db.path, isolation_level=None)
    try:
        conn3.execute("DROP TRIGGER sessiondb_search_delete")
        conn3.execute("DROP TABLE sessiondb_search")
    finally:
        conn3.close()


async def search_figures(run: Run, server: Server) -> list[Result]:
    return [*await _searches(run, server), *await _writes(run, server)]


async def _searches(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    small_db, large_db = await server.fresh(), await server.fresh()
    started = perf_counter()
    async with SessionStore.open(small_db.url) as small, SessionStore.open(large_db.url) as large:
        await _fill(run, small, s.search_small, "search-small")
        run.log(f"{server.backend}: building {count(s.search_large)} records to search")
        await _fill(run, large, s.search_large, "search-large")
        run.log(f"{server.backend}: built in {perf_counter() - started:.1f} s")
        for db in (small_db, large_db):
            await server.settle(db)
        for store in (small, large):
            got = len((await store.search(NEEDLE)).hits)
            if got != NEEDLE_RECORDS:
                raise BenchError(f"search found {got} records, not {NEEDLE_RECORDS}")

        async def ours_small() -> None:
            await small.search(NEEDLE)

        async def ours_large() -> None:
            await large.search(NEEDLE)

        large_s, small_s = await compare(ours_large, ours_small, reps=s.search_reps, warmup=5)
        beside_s, bare_s = await _bare(large_db, large, s.search_reps)
    for db in (small_db, large_db):
        await server.drop(db)
    big, little = count(s.search_large), count(s.search_small)
    return [
        Result(
            f"16a search {big} records vs {little} ({NEEDLE_RECORDS} hits)",
            server.backend,
            large_s,
            small_s,
            Goal("<=", 1.5),
        ),
        Result(
            f"16b search {big} records vs a bare query of the index",
            server.backend,
            beside_s,
            bare_s,
            Goal("<=", 1.5),
        ),
    ]


async def _bare(db: Database, store: SessionStore, reps: int) -> tuple[float, float]:
    """The medians of the store's search and of the bare query, timed in turns in one
    phase (16a's timing of the same search comes from another phase, and a busy moment
    of the machine fell on one side of the ratio only: it moved by about ±0.3)."""

    async def ours() -> None:
        await store.search(NEEDLE)

    if db.backend == "postgres":
        conn = await asyncpg.connect(db.dsn)
        try:

            async def bare_pg() -> None:
                rows = await conn.fetch(_BARE_PG, NEEDLE)
                if len(rows) != NEEDLE_RECORDS:
                    raise BenchError(f"the bare query found {len(rows)} rows")

            ours_s, bare_s = await compare(ours, bare_pg, reps=reps, warmup=5)
        finally:
            await conn.close()
        return ours_s, bare_s
    conn3 = sqlite3.connect(db.path)

    async def bare_sqlite() -> None:
        rows = conn3.execute(_BARE_SQLITE, (f'"{NEEDLE}"',)).fetchall()
        if len(rows) != NEEDLE_RECORDS:
            raise BenchError(f"the bare query found {len(rows)} rows")

    try:
        ours_s, bare_s = await compare(ours, bare_sqlite, reps=reps, warmup=5)
    finally:
        conn3.close()
    return ours_s, bare_s


async def _writes(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    with_db, without_db = await server.fresh(), await server.fresh()
    await _without_index(without_db)
    messages = data.user_messages(64, run.seed, run.corpus)
    with_in, without_in = itertools.cycle(messages), itertools.cycle(messages)
    async with (
        SessionStore.open(with_db.url) as indexed,
        SessionStore.open(without_db.url) as plain,
    ):
        plain.core.search_indexing = False
        with_id = (await indexed.create_session()).id
        without_id = (await plain.create_session()).id

        async def append_with() -> None:
            await indexed.append(with_id, next(with_in))

        async def append_without() -> None:
            await plain.append(without_id, next(without_in))

        append_s, plain_append_s = await compare(
            append_with, append_without, reps=s.append_reps, warmup=s.append_warmup
        )
        if not (await indexed.search(messages[0]["content"][0]["text"].split()[0])).hits:
            raise BenchError("the indexed appends are not found")

        items = data.sessions(s.bulk_sessions, s.bulk_records, run.seed, run.corpus)
        total = s.bulk_sessions * s.bulk_records

        async def load(store: SessionStore, db: Database) -> float:
            await server.clear(db)
            start = perf_counter()
            await store.import_sessions(items)
            return perf_counter() - start

        warm = items[: max(1, len(items) // 50)]
        await indexed.import_sessions(warm)
        await plain.import_sessions(warm)
        bulk_times: list[float] = []
        plain_times: list[float] = []
        for _ in range(s.bulk_reps):
            bulk_times.append(await load(indexed, with_db))
            plain_times.append(await load(plain, without_db))
    for db in (with_db, without_db):
        await server.drop(db)
    bulk_s, plain_bulk_s = statistics.median(bulk_times), statistics.median(plain_times)
    run.log(
        f"{server.backend}: bulk import with the index {total / bulk_s:,.0f} records/s, "
        f"without {total / plain_bulk_s:,.0f} records/s"
    )
    append_goal = 1.15 if server.backend == "postgres" else 1.25
    return [
        Result(
            "16c append one message, with the search index vs without",
            server.backend,
            append_s,
            plain_append_s,
            Goal("<=", append_goal),
        ),
        Result(
            f"16d bulk import {count(s.bulk_sessions)} x {s.bulk_records}, index vs without",
            server.backend,
            bulk_s,
            plain_bulk_s,
            Goal("<=", 1.3),
        ),
    ]
