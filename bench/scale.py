"""``python -m bench --scale``: the figures a service sees after a year, each as a ratio
to the same figure on a small database, measured in the same run.

Two databases per backend, built from the same migrated template: the *scale* one holds
a bulk-loaded background (``background``: 10M records in 100k sessions on Postgres, 2M
on SQLite by default), the *quick* one the same mix at figure 5's quick size (20k
sessions). Both then get the same subjects through the public API (a compacted session
of figure 4's quick length, figure 8's Claude Code directory), and each figure runs on
both, interleaved (``timing.compare``): the ratio is scale / quick, goal <= 1.25.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

import asyncpg

from sessiondb import SessionStore, statements
from sessiondb.tables import SEARCH

from . import background, data
from .databases import BenchError, Database, Server
from .figures import Run, claude_code_source, compacted
from .report import Footprint, Goal, Result
from .search import NEEDLE, NEEDLE_RECORDS
from .sizes import Sizes, count
from .timing import compare

GOAL = Goal("<=", 1.25)
# Disk a loaded record takes, with room to spare: ~1.8 KB of table and indexes with the
# search index (the footprint table shows the measured figure) and the WAL of the load
# until a checkpoint.
BYTES_PER_RECORD = 2500
# Each figure is timed this many times as often as at quick size: the ratio is of two
# sessiondb figures, each as noisy as the other on a shared machine (a first run with
# figure 6's 30 forks read 1.61, repeats of 100 read 0.75-1.03 on the same databases).
REPS = 3
# S6b's word, a tool's name: in the tool call and the tool result of every fourth turn
# (bench.data.conversation). A search ranks the newest sessiondb.search.WINDOW matches
# of it (10,000 of 1.25M over 10M records), each of them checked first: ~0.25 s on the
# Postgres scale database, ~50 ms on SQLite's. Timed 9 times a side: with 3, SQLite's
# ratio read 1.21 to 1.36 on one machine, quiet, the same databases.
COMMON = "bash"
COMMON_REPS = 9


@dataclass(frozen=True)
class Built:
    """One database of the pair, loaded, with its subjects."""

    label: str  # "scale" | "quick"
    db: Database
    loaded: background.Loaded
    long_id: str
    footprint: Footprint


def shapes(
    sizes: Sizes, backend: str, records: int | None, sessions: int | None
) -> tuple[background.Shape, background.Shape]:
    """(the quick background, the scale background) of one backend."""
    small = background.Shape(sizes.scale_small_records, sizes.scale_small_sessions)
    big = records or (
        sizes.scale_records_postgres if backend == "postgres" else sizes.scale_records_sqlite
    )
    big_sessions = sessions or max(big // sizes.scale_records_per_session, small.sessions)
    return small, background.Shape(big, big_sessions)


def about(n: int) -> str:
    """``10_012_345`` -> ``10.0M``, ``107_748`` -> ``108k``: a count in a figure's name."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k" if n >= 10_000 else str(n)


async def scale_figures(run: Run, server: Server) -> list[Result]:
    """Build the pair of databases on ``server``, then run every figure on both."""
    small_shape, big_shape = shapes(
        run.sizes, server.backend, run.scale_records, run.scale_sessions
    )
    await _check_disk(run, server, small_shape.records + big_shape.records)
    pair = []
    for label, shape in (("quick", small_shape), ("scale", big_shape)):
        pair.append(await _build(run, server, label, shape))
        run.footprints.append(pair[-1].footprint)
    # The loads leave gigabytes of dirty pages for the kernel to write back: flushed
    # here, not under the figures' commits (figure 9 found the same, see _clean_slate).
    os.sync()
    quick, big = pair
    tag = f"({about(big.loaded.records)} vs {about(quick.loaded.records)} records)"
    results: list[Result] = []
    try:
        async with (
            SessionStore.open(big.db.url) as big_store,
            SessionStore.open(quick.db.url) as quick_store,
        ):
            stores = (big_store, quick_store)
            for figure in (_append, _context, _deep_page, _fork, _import, _search):
                results += await figure(run, server, (big, quick), stores, tag)
    finally:
        for built in pair:
            await server.drop(built.db)
    return results


async def _check_disk(run: Run, server: Server, records: int) -> None:
    """Refuse, before loading, a size the disk cannot hold (Postgres: when its data
    directory is on this machine; SQLite: the run's directory)."""
    where: Path | None = run.workdir
    if server.backend == "postgres":
        where = None
        db = await server.fresh()
        try:
            conn = await asyncpg.connect(db.dsn)
            try:
                where = Path(await conn.fetchval("SHOW data_directory"))
            except asyncpg.InsufficientPrivilegeError:
                pass
            finally:
                await conn.close()
        finally:
            await server.drop(db)
    if where is None or not where.exists():
        run.log(f"{server.backend}: cannot see the database's disk; not checking its space")
        return
    need, free = records * BYTES_PER_RECORD, shutil.disk_usage(where).free
    run.log(f"{server.backend}: about {need / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free")
    if need > free:
        raise BenchError(
            f"{server.backend}: {records:,} records need about {need / 1e9:.1f} GB, "
            f"{where} has {free / 1e9:.1f} GB free: pass a smaller --scale-records"
        )


async def _build(run: Run, server: Server, label: str, shape: background.Shape) -> Built:
    db = await server.fresh()
    b = server.backend
    run.log(f"{b}: loading the {label} background: {shape.records:,} records, "
            f"{shape.sessions:,} sessions")  # fmt: skip
    loaded = await background.load(db, shape, run.seed, run.corpus, run.log)
    run.log(f"{b}: loaded {loaded.records:,} records in {loaded.seconds:.1f} s "
            f"({loaded.records / loaded.seconds:,.0f} records/s)")  # fmt: skip
    analyze_s, ours_s = await _vacuum_and_analyze(run, db)
    footprint = await _footprint(db, label, loaded, analyze_s, ours_s)
    async with SessionStore.open(db.url) as store:
        s = run.sizes
        messages = data.conversation(s.long_session, run.seed, "long", run.corpus)
        long_id, _ = await compacted(store, messages, s.keep)
    await server.settle(db)
    return Built(label, db, loaded, long_id, footprint)


async def _vacuum_and_analyze(run: Run, db: Database) -> tuple[float, float]:
    """After the load: VACUUM (Postgres), then the timed ANALYZE of every column, then
    the timed ANALYZE sessiondb itself runs after an import (``statements.analyze``).
    SQLite: the timed ANALYZE, after which its statistics are removed again, as
    sessiondb keeps its plans free of them (a user's file has none)."""
    if db.backend == "postgres":
        conn = await asyncpg.connect(db.dsn)
        try:
            started = perf_counter()
            await conn.execute("VACUUM")
            run.log(f"postgres: VACUUM in {perf_counter() - started:.1f} s")
            started = perf_counter()
            await conn.execute("ANALYZE")
            analyze_s = perf_counter() - started
            started = perf_counter()
            await conn.execute(str(statements.analyze()))
            return analyze_s, perf_counter() - started
        finally:
            await conn.close()
    conn3 = sqlite3.connect(db.path, isolation_level=None)
    try:
        started = perf_counter()
        conn3.execute("ANALYZE")
        analyze_s = perf_counter() - started
        conn3.execute("DELETE FROM sqlite_stat1")
        conn3.execute("ANALYZE sqlite_schema")
        return analyze_s, float("nan")
    finally:
        conn3.close()


PG_SIZES = """
SELECT c.relname AS name,
       pg_relation_size(c.oid) + COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0)
           AS heap,
       pg_indexes_size(c.oid) AS indexes
  FROM pg_class c
 WHERE c.relname IN ('sessiondb_records', 'sessiondb_sessions')
"""


async def _footprint(
    db: Database, label: str, loaded: background.Loaded, analyze_s: float, ours_s: float
) -> Footprint:
    """Table and index bytes per record (Postgres: the heap with its TOAST, the search
    index's ``search`` column included, and every index of the table; SQLite: dbstat's
    pages of the table and of its indexes, the FTS5 tables of the search index among
    them, its copy of the text included)."""
    sizes: dict[str, tuple[int, int]] = {}
    if db.backend == "postgres":
        conn = await asyncpg.connect(db.dsn)
        try:
            for row in await conn.fetch(PG_SIZES):
                sizes[row["name"]] = (int(row["heap"]), int(row["indexes"]))
        finally:
            await conn.close()
    else:
        conn3 = sqlite3.connect(db.path)
        try:
            pages = dict(conn3.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
            for table in ("sessiondb_records", "sessiondb_sessions"):
                indexes = [r[1] for r in conn3.execute(f"PRAGMA index_list({table})")]
                if table == "sessiondb_records":  # and the search index: FTS5's tables
                    indexes += [name for name in pages if name.startswith(f"{SEARCH}_")]
                sizes[table] = (int(pages[table]), sum(int(pages.get(i, 0)) for i in indexes))
        finally:
            conn3.close()
    return Footprint(
        backend=db.backend,
        label=label,
        records=loaded.records,
        sessions=loaded.sessions,
        load_s=loaded.seconds,
        records_table=sizes["sessiondb_records"][0],
        records_indexes=sizes["sessiondb_records"][1],
        sessions_table=sizes["sessiondb_sessions"][0],
        sessions_indexes=sizes["sessiondb_sessions"][1],
        analyze_s=analyze_s,
        sessiondb_analyze_s=ours_s,
    )


Pair = tuple[Built, Built]
Stores = tuple[SessionStore, SessionStore]
Call = Callable[[], Awaitable[Any]]


# -- the figures: scale first, quick second ------------------------------------------


async def _append(run: Run, server: Server, pair: Pair, stores: Stores, tag: str) -> list[Result]:
    """store.append of one message to a session from the middle of the year."""
    s = run.sizes
    messages = data.user_messages(64, run.seed, run.corpus)
    calls = []
    for built, store in zip(pair, stores, strict=True):
        feed = itertools.cycle(messages)
        calls.append(_bind(store.append, built.loaded.middle_id, feed))
    big_s, quick_s = await compare(*calls, reps=REPS * s.append_reps, warmup=s.append_warmup)
    return [Result(f"S1 append one message {tag}", server.backend, big_s, quick_s, GOAL)]


def _bind(append: Callable[..., Awaitable[Any]], session_id: str, feed: Any) -> Call:
    async def call() -> None:
        await append(session_id, next(feed))

    return call


async def _context(run: Run, server: Server, pair: Pair, stores: Stores, tag: str) -> list[Result]:
    s = run.sizes
    big_call, quick_call = (
        _call(store.context, built.long_id) for built, store in zip(pair, stores, strict=True)
    )
    for built, store in zip(pair, stores, strict=True):
        got = len(await store.context(built.long_id))
        if got != s.keep + 1:
            raise BenchError(f"{built.label}: context has {got} messages, not {s.keep} + summary")
    big_s, quick_s = await compare(big_call, quick_call, reps=REPS * s.context_reps, warmup=5)
    name = f"S2 context {count(s.long_session)} records (keeps {s.keep}) {tag}"
    return [Result(name, server.backend, big_s, quick_s, GOAL)]


def _call(method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Call:
    async def call() -> None:
        await method(*args, **kwargs)

    return call


def deep_page_number(s: Sizes) -> int:
    """Figure 5's deep page, or the deepest full page the quick database has."""
    return max(2, min(s.list_page, s.scale_small_sessions // s.page_size))


async def _deep_page(
    run: Run, server: Server, pair: Pair, stores: Stores, tag: str
) -> list[Result]:
    s = run.sizes
    page = deep_page_number(s)
    calls = []
    for built, store in zip(pair, stores, strict=True):
        cursor = None
        for _ in range(page - 1):
            cursor = (await store.list_sessions(limit=s.page_size, cursor=cursor)).next_cursor
        if (
            cursor is None
            or len((await store.list_sessions(limit=s.page_size, cursor=cursor)).items)
            < s.page_size
        ):
            raise BenchError(f"{built.label}: page {page} of {s.page_size} is not full")
        calls.append(_call(store.list_sessions, limit=s.page_size, cursor=cursor))
    big_s, quick_s = await compare(*calls, reps=REPS * s.list_reps, warmup=5)
    name = f"S3 list page {page} of {s.page_size} {tag}"
    return [Result(name, server.backend, big_s, quick_s, GOAL)]


async def _fork(run: Run, server: Server, pair: Pair, stores: Stores, tag: str) -> list[Result]:
    s = run.sizes
    big_call, quick_call = (
        _call(store.fork, built.long_id) for built, store in zip(pair, stores, strict=True)
    )
    big_s, quick_s = await compare(big_call, quick_call, reps=REPS * s.fork_reps, warmup=3)
    name = f"S4 fork a {count(s.long_session)}-record session {tag}"
    return [Result(name, server.backend, big_s, quick_s, GOAL)]


async def _import(run: Run, server: Server, pair: Pair, stores: Stores, tag: str) -> list[Result]:
    """import_path of figure 8's directory; each run's sessions deleted again (and, on
    Postgres, vacuumed away) before the next."""
    s = run.sizes
    source, total = claude_code_source(run)

    async def once(built: Built, store: SessionStore) -> float:
        started = perf_counter()
        report = await store.import_path(source, format="claude-code")
        elapsed = perf_counter() - started
        if report.failures or report.records != total:
            raise BenchError(f"import_path: {report.records} records, {report.failures}")
        for session_id in report.session_ids:
            await store.delete_session(session_id)
        await _vacuum(built.db)
        return elapsed

    for side in (0, 1):  # warm-up: the files in the page cache, each store's statements
        await once(pair[side], stores[side])
    times: tuple[list[float], list[float]] = ([], [])
    for rep in range(REPS * s.import_reps):
        for side in (0, 1) if rep % 2 == 0 else (1, 0):
            times[side].append(await once(pair[side], stores[side]))
    big_s, quick_s = statistics.median(times[0]), statistics.median(times[1])
    name = f"S5 import {s.import_files} Claude Code files, {count(total)} lines {tag}"
    return [Result(name, server.backend, big_s, quick_s, GOAL)]


async def _vacuum(db: Database) -> None:
    if db.backend != "postgres":
        return
    conn = await asyncpg.connect(db.dsn)
    try:
        await conn.execute("VACUUM sessiondb_records, sessiondb_sessions")
    finally:
        await conn.close()


# -- S6: search ------------------------------------------------------------------------


async def _search(run: Run, server: Server, pair: Pair, stores: Stores, tag: str) -> list[Result]:
    """store.search of a word planted in the same :data:`NEEDLE_RECORDS` records of both
    backgrounds (the hits are the same, only the history around them grows), and of a
    common word: :data:`COMMON` is in every eighth record, so its hits grow with the
    database."""
    s = run.sizes
    for built, store in zip(pair, stores, strict=True):
        got = len((await store.search(NEEDLE, limit=20)).hits)
        if got != NEEDLE_RECORDS:
            raise BenchError(f"{built.label}: search found {got} records, not {NEEDLE_RECORDS}")
    big_call, quick_call = (_call(store.search, NEEDLE, limit=20) for store in stores)
    big_s, quick_s = await compare(big_call, quick_call, reps=REPS * s.search_reps, warmup=5)
    name = f"S6 search, {NEEDLE_RECORDS} hits, page of 20 {tag}"
    results = [Result(name, server.backend, big_s, quick_s, GOAL)]
    big_call, quick_call = (_full_page(store, COMMON) for store in stores)
    big_s, quick_s = await compare(big_call, quick_call, reps=COMMON_REPS, warmup=1, block=1)
    name = f"S6b search a word of 1 record in 8, page of 20 {tag}"
    return [*results, Result(name, server.backend, big_s, quick_s, GOAL)]


def _full_page(store: SessionStore, word: str) -> Call:
    async def call() -> None:
        if len((await store.search(word, limit=20)).hits) != 20:
            raise BenchError(f"search found fewer than 20 records of {word!r}")

    return call
