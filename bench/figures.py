"""Figures 1-6, 8 and 9: sessiondb's public API beside the bare-driver floor, on one backend.

Each figure runs in databases of its own (copies of the migrated template), so the
figures do not see each other's rows. Figures 4 and 6 share the long session, which is
built once per backend.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from sessiondb import SessionStore

from . import data
from .databases import BenchError, Database, Server
from .floors import ParsedFile, open_floor, parse_file, replay_jsonl
from .report import Footprint, Goal, Result
from .sizes import Sizes, count
from .timing import compare

NAMESPACE = "default"


@dataclass
class Run:
    """What every figure needs: the sizes, the seed, a scratch directory, a logger."""

    sizes: Sizes
    seed: int
    workdir: Path
    log: Callable[[str], None]
    _corpus: data.Corpus | None = None
    long_sessions: dict[str, LongSession] = field(default_factory=dict)
    # --scale: the big background's size when given (--scale-records, --scale-sessions),
    # and each database's footprint, printed after the table
    scale_records: int | None = None
    scale_sessions: int | None = None
    footprints: list[Footprint] = field(default_factory=list)

    @property
    def corpus(self) -> data.Corpus:
        if self._corpus is None:
            self._corpus = data.Corpus(self.seed)
        return self._corpus


@dataclass(frozen=True)
class LongSession:
    """A database holding a long and a short session, each compacted to keep the last
    ``keep`` messages, and the long one as a JSONL file."""

    db: Database
    long_id: str
    long_first_kept: int
    short_id: str
    short_first_kept: int
    jsonl: Path


async def compacted(
    store: SessionStore, messages: list[dict[str, Any]], keep: int
) -> tuple[str, int]:
    (session_id,) = await store.import_sessions([{"messages": messages}])
    first_kept = len(messages) - keep + 1
    await store.append_compaction(
        session_id,
        summary=data.COMPACTION_SUMMARY,
        first_kept_seq=first_kept,
        tokens_before=123_456,
    )
    return session_id, first_kept


async def long_session(run: Run, server: Server) -> LongSession:
    """The long session of figures 4 and 6, built once per backend."""
    if server.backend in run.long_sessions:
        return run.long_sessions[server.backend]
    s = run.sizes
    run.log(f"{server.backend}: building a {count(s.long_session)}-record session")
    db = await server.fresh()
    started = perf_counter()
    messages = data.conversation(s.long_session, run.seed, "long", run.corpus)
    async with SessionStore.open(db.url) as store:
        long_id, long_first_kept = await compacted(store, messages, s.keep)
        short = data.conversation(s.short_session, run.seed, "short", run.corpus)
        short_id, short_first_kept = await compacted(store, short, s.keep)
    jsonl = run.workdir / f"long-{server.backend}.jsonl"
    data.write_jsonl(jsonl, messages, long_first_kept)
    await server.settle(db)
    run.log(f"{server.backend}: built in {perf_counter() - started:.1f} s")
    built = LongSession(db, long_id, long_first_kept, short_id, short_first_kept, jsonl)
    run.long_sessions[server.backend] = built
    return built


# -- 1, 2: appends --------------------------------------------------------------------


async def append_one(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    db = await server.fresh()
    messages = data.user_messages(64, run.seed, run.corpus)
    ours_in, bare_in = itertools.cycle(messages), itertools.cycle(messages)
    async with SessionStore.open(db.url) as store:
        ours_id = (await store.create_session()).id
        bare_id = (await store.create_session()).id
        floor = await open_floor(db)
        try:

            async def ours() -> None:
                await store.append(ours_id, next(ours_in))

            async def bare() -> None:
                await floor.append(bare_id, next(bare_in))

            ours_s, bare_s = await compare(ours, bare, reps=s.append_reps, warmup=s.append_warmup)
        finally:
            await floor.close()
        await _same_head(store, ours_id, bare_id)
    await server.drop(db)
    goal = Goal("<=", 1.5 if server.backend == "postgres" else 2)
    return [Result("1 append one message", server.backend, ours_s, bare_s, goal)]


async def append_batch(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    db = await server.fresh()
    pool = data.conversation(s.batch * 8, run.seed, "batch", run.corpus)
    batches = [pool[i : i + s.batch] for i in range(0, len(pool), s.batch)]
    ours_in, bare_in = itertools.cycle(batches), itertools.cycle(batches)
    async with SessionStore.open(db.url) as store:
        ours_id = (await store.create_session()).id
        bare_id = (await store.create_session()).id
        floor = await open_floor(db)
        try:

            async def ours() -> None:
                await store.append(ours_id, next(ours_in))

            async def bare() -> None:
                await floor.append_batch(bare_id, next(bare_in))

            ours_s, bare_s = await compare(ours, bare, reps=s.batch_reps, warmup=3, block=5)
        finally:
            await floor.close()
        await _same_head(store, ours_id, bare_id)
    await server.drop(db)
    return [Result(f"2 append a batch of {s.batch} messages", server.backend, ours_s, bare_s)]


async def _same_head(store: SessionStore, ours_id: str, bare_id: str) -> None:
    """Both sides did the same appends: a cheap check that the floor wrote real rows."""
    ours, bare = await store.get_session(ours_id), await store.get_session(bare_id)
    if (ours.last_seq, ours.message_count) != (bare.last_seq, bare.message_count):
        raise BenchError(f"sessiondb and the floor disagree on the head: {ours} vs {bare}")
    if len(await store.records(bare_id, from_seq=max(1, bare.last_seq - 9))) != min(
        10, bare.last_seq
    ):
        raise BenchError("the floor's records do not read back through sessiondb")


# -- 3: bulk load ---------------------------------------------------------------------


async def bulk_load(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    items = data.sessions(s.bulk_sessions, s.bulk_records, run.seed, run.corpus)
    total = s.bulk_sessions * s.bulk_records
    ours_db, bare_db = await server.fresh(), await server.fresh()
    async with SessionStore.open(ours_db.url) as store:
        floor = await open_floor(bare_db)
        try:
            # Both sides connected before the clock starts; each load into empty tables.
            await store.list_sessions(limit=1)
            await floor.first_page(NAMESPACE, 1)

            async def ours(items: list[dict[str, Any]]) -> float:
                await server.clear(ours_db)
                start = perf_counter()
                ids = await store.import_sessions(items)
                elapsed = perf_counter() - start
                if len(ids) != len(items):
                    raise BenchError(f"import_sessions returned {len(ids)} ids")
                return elapsed

            async def bare(items: list[dict[str, Any]]) -> float:
                await server.clear(bare_db)
                start = perf_counter()
                await floor.bulk_load(items, NAMESPACE)
                return perf_counter() - start

            warm = items[: max(1, len(items) // 50)]
            await ours(warm)
            await bare(warm)
            ours_times, bare_times = [], []
            for _ in range(s.bulk_reps):
                ours_times.append(await ours(items))
                bare_times.append(await bare(items))
        finally:
            await floor.close()
    for db in (ours_db, bare_db):
        await server.drop(db)
    ours_s, bare_s = statistics.median(ours_times), statistics.median(bare_times)
    run.log(
        f"{server.backend}: bulk load {total / ours_s:,.0f} records/s, "
        f"floor {total / bare_s:,.0f} records/s"
    )
    name = f"3 bulk load {count(s.bulk_sessions)} sessions x {s.bulk_records} records"
    return [Result(name, server.backend, ours_s, bare_s, Goal("<=", 2))]


# -- 4: context load ------------------------------------------------------------------


async def context_load(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    built = await long_session(run, server)
    long_n, short_n = count(s.long_session), count(s.short_session)
    async with SessionStore.open(built.db.url) as store:
        for session_id in (built.long_id, built.short_id):
            got = len(await store.context(session_id))
            if got != s.keep + 1:
                raise BenchError(f"context has {got} messages, expected {s.keep} + summary")
        floor = await open_floor(built.db)
        try:

            async def ours_long() -> None:
                await store.context(built.long_id)

            async def bare_long() -> None:
                await floor.kept_messages(built.long_id, built.long_first_kept)

            async def ours_short() -> None:
                await store.context(built.short_id)

            async def bare_short() -> None:
                await floor.kept_messages(built.short_id, built.short_first_kept)

            reps = s.context_reps
            long_s, bare_long_s = await compare(ours_long, bare_long, reps=reps, warmup=5)
            short_s, bare_short_s = await compare(ours_short, bare_short, reps=reps, warmup=5)
            long_again_s, short_again_s = await compare(ours_long, ours_short, reps=reps, warmup=1)

            async def ours_json() -> None:
                await store.context_json(built.long_id)

            json_s, bare_json_s = await compare(ours_json, bare_long, reps=reps, warmup=5)

            async def bare_long_parsed() -> None:
                await floor.kept_parsed(built.long_id, built.long_first_kept)

            parsed_s, bare_parsed_s = await compare(
                ours_long, bare_long_parsed, reps=reps, warmup=5
            )

            async def ours_used() -> None:
                for message in await store.context(built.long_id):
                    message.to_wire()

            used_s, bare_used_s = await compare(ours_used, bare_long_parsed, reps=reps, warmup=5)

            async def ours_history() -> None:
                await store.records(built.short_id)

            async def bare_history() -> None:
                await floor.history_parsed(built.short_id)

            history_s, bare_history_s = await compare(
                ours_history, bare_history, reps=reps, warmup=5
            )

            async def replay() -> None:
                replay_jsonl(built.jsonl)

            if len(replay_jsonl(built.jsonl)) != s.keep + 1:
                raise BenchError("the JSONL replay does not give the same context")
            long_third_s, replay_s = await compare(
                ours_long, replay, reps=s.replay_reps, warmup=1, block=1
            )
        finally:
            await floor.close()
    b = server.backend
    keeps = f"keeps {s.keep}"
    return [
        Result(f"4 context {long_n} records ({keeps}) vs bare SELECT + parse", b, parsed_s,
               bare_parsed_s, Goal("<=", 2)),
        Result(f"4 context {long_n} records ({keeps}) vs bare SELECT", b, long_s, bare_long_s),
        Result(f"4 context {long_n} records ({keeps}), to_wire() of each, vs bare SELECT + parse",
               b, used_s, bare_used_s),
        Result(f"4 context_json {long_n} records ({keeps}) vs bare SELECT", b, json_s,
               bare_json_s, Goal("<=", 1.5)),
        Result(f"4 records() of a {short_n}-record history vs bare SELECT + parse", b,
               history_s, bare_history_s, Goal("<=", 2)),
        Result(f"4 context {long_n} records vs JSONL replay", b, long_third_s, replay_s,
               Goal(">=", 50), speedup=True),
        Result(f"4 context {short_n} records ({keeps}) vs bare SELECT", b, short_s, bare_short_s,
               Goal("<=", 2)),
        Result(f"4 context {long_n} records vs {short_n} records", b, long_again_s,
               short_again_s),
    ]  # fmt: skip


# -- 5: listing -----------------------------------------------------------------------


async def listing(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    if s.list_page * s.page_size >= s.list_sessions:
        raise BenchError("the deep page lies beyond the last session; raise list_sessions")
    db = await server.fresh()
    run.log(f"{server.backend}: importing {count(s.list_sessions)} sessions")
    started = perf_counter()
    async with SessionStore.open(db.url) as store:
        await store.import_sessions(data.many_small_sessions(s.list_sessions, run.seed, run.corpus))
        await server.settle(db)
        run.log(f"{server.backend}: imported in {perf_counter() - started:.1f} s")
        cursor = None
        for _ in range(s.list_page - 1):
            cursor = (await store.list_sessions(limit=s.page_size, cursor=cursor)).next_cursor
        floor = await open_floor(db)
        try:

            async def deep() -> None:
                await store.list_sessions(limit=s.page_size, cursor=cursor)

            async def first() -> None:
                await store.list_sessions(limit=s.page_size)

            async def bare_first() -> None:
                await floor.first_page(NAMESPACE, s.page_size)

            deep_s, first_s = await compare(deep, first, reps=s.list_reps, warmup=5)
            first_again_s, bare_s = await compare(first, bare_first, reps=s.list_reps, warmup=5)
        finally:
            await floor.close()
    await server.drop(db)
    over = f"{count(s.list_sessions)} sessions"
    return [
        Result(f"5 list page {s.list_page} vs first page ({over})", server.backend, deep_s,
               first_s, Goal("<=", 1.5)),
        Result(f"5 list first page of {s.page_size} vs bare SELECT ({over})", server.backend,
               first_again_s, bare_s),
    ]  # fmt: skip


# -- 6: fork --------------------------------------------------------------------------


async def fork(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    built = await long_session(run, server)
    async with SessionStore.open(built.db.url) as store:
        small = data.conversation(s.fork_small, run.seed, "fork-small", run.corpus)
        (small_id,) = await store.import_sessions([{"messages": small}])

        async def fork_long() -> None:
            await store.fork(built.long_id)

        async def fork_small() -> None:
            await store.fork(small_id)

        long_s, small_s = await compare(fork_long, fork_small, reps=s.fork_reps, warmup=3)
    name = f"6 fork {count(s.long_session)}-record vs {s.fork_small}-record session"
    return [Result(name, server.backend, long_s, small_s, Goal("<=", 1.5))]


# -- 8, 9: import and export of a Claude Code directory ----------------------------------


def claude_code_source(run: Run) -> tuple[Path, int]:
    """The generated Claude Code directory of figures 8 and 9 (made once a run), and
    its lines."""
    s = run.sizes
    directory = run.workdir / f"claude-code-{s.import_files}-{s.import_lines}"
    if not directory.exists():
        run.log(f"writing {s.import_files} Claude Code files, {count(s.import_lines)} lines")
        data.claude_code_dir(directory, s.import_files, s.import_lines, run.seed, run.corpus)
    return directory, s.import_lines


def _parse_all(directory: Path) -> list[ParsedFile]:
    return [parse_file(path) for path in sorted(directory.glob("*.jsonl"))]


async def import_files(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    source, total = claude_code_source(run)
    warm = run.workdir / "claude-code-warm"
    if not warm.exists():
        data.claude_code_dir(warm, 2, 20, run.seed, run.corpus)
    ours_db, bare_db = await server.fresh(), await server.fresh()
    async with SessionStore.open(ours_db.url) as store:
        floor = await open_floor(bare_db)
        try:
            await store.list_sessions(limit=1)
            await floor.first_page(NAMESPACE, 1)

            async def ours(path: Path, lines: int) -> float:
                await server.clear(ours_db)
                start = perf_counter()
                report = await store.import_path(path, format="claude-code")
                elapsed = perf_counter() - start
                if report.failures or report.records != lines:
                    raise BenchError(f"import_path: {report.records} records, {report.failures}")
                return elapsed

            async def bare(path: Path, lines: int) -> float:
                await server.clear(bare_db)
                start = perf_counter()
                written = await floor.load_lines(_parse_all(path), NAMESPACE)
                elapsed = perf_counter() - start
                if written != lines:
                    raise BenchError(f"the floor wrote {written} records, not {lines}")
                return elapsed

            await ours(warm, 20)
            await bare(warm, 20)
            ours_times, bare_times = [], []
            for _ in range(s.import_reps):
                ours_times.append(await ours(source, total))
                bare_times.append(await bare(source, total))
            read = await _imported_context(store, ours_db, s.context_reps)
            peaks = [await _import_peak(run, server, ours_db, lines) for lines in _big_sizes(s)]
        finally:
            await floor.close()
    for db in (ours_db, bare_db):
        await server.drop(db)
    ours_s, bare_s = statistics.median(ours_times), statistics.median(bare_times)
    run.log(
        f"{server.backend}: import {total / ours_s:,.0f} records/s, "
        f"floor {total / bare_s:,.0f} records/s"
    )
    run.log(
        f"{server.backend}: peak resident memory importing one file (its own process; "
        "before the import -> after): "
        + ", ".join(f"{mb:.1f} MB file: {pre:.0f} -> {peak:.0f} MB" for mb, pre, peak in peaks)
    )
    name = f"8 import {s.import_files} Claude Code files, {count(total)} lines"
    messages, read_s, bare_read_s = read
    return [
        Result(name, server.backend, ours_s, bare_s, Goal("<=", 2)),
        Result(
            f"8 context() of an imported Claude Code session ({messages} messages) "
            "vs bare SELECT + parse",
            server.backend,
            read_s,
            bare_read_s,
            Goal("<=", 2),
        ),
    ]


async def _imported_context(
    store: SessionStore, db: Database, reps: int
) -> tuple[int, float, float]:
    """(messages, medians) of ``context()`` of the first imported session, beside the bare
    SELECT of its messages' payloads, each parsed: figure 4's read, of a session whose
    every assistant message names its response (``message.id``), as Claude Code writes
    them."""
    session_id = (await store.list_sessions(limit=1)).items[0].id
    floor = await open_floor(db)
    try:
        expected = len(await floor.kept_parsed(session_id, 0))
        if len(await store.context(session_id)) > expected:
            raise BenchError("context() of the imported session has more messages than rows")

        async def ours() -> None:
            await store.context(session_id)

        async def bare() -> None:
            await floor.kept_parsed(session_id, 0)

        ours_s, bare_s = await compare(ours, bare, reps=reps, warmup=5)
    finally:
        await floor.close()
    return expected, ours_s, bare_s


def _big_sizes(s: Sizes) -> list[int]:
    return [s.big_file_lines // 4, s.big_file_lines // 2, s.big_file_lines]


async def _import_peak(
    run: Run, server: Server, db: Database, lines: int
) -> tuple[float, float, float]:
    """(file MB, peak resident MB before the import, peak resident MB after it) of
    importing one ``lines``-line file in a process of its own (``bench.peak``)."""
    path = run.workdir / f"big-{lines}.jsonl"
    if not path.exists():
        data.write_claude_code(path, lines, random.Random(run.seed), run.corpus)
    await server.clear(db)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.peak", db.url, str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    out, err = await process.communicate()
    if process.returncode != 0:
        raise BenchError(f"bench.peak failed: {err.decode()[-2000:]}")
    found = json.loads(out)
    if found["records"] != lines:
        raise BenchError(f"import_path of the big file: {found['records']} records")
    return path.stat().st_size / 1e6, found["before"] / 1e6, found["peak"] / 1e6


def _clean_slate(out: Path) -> None:
    """Remove the last run's files and flush every dirty page first: otherwise a run
    pays for the writeback of the runs before it (the floor's time moved 70-220 ms)."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()


async def export_files(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    source, total = claude_code_source(run)
    ours_db, bare_db = await server.fresh(), await server.fresh()
    out = run.workdir / "export"
    async with SessionStore.open(ours_db.url) as store:
        floor = await open_floor(bare_db)
        try:
            report = await store.import_path(source, format="claude-code")
            await floor.load_lines(_parse_all(source), NAMESPACE)
            await server.settle(ours_db)
            await server.settle(bare_db)

            async def ours() -> float:
                _clean_slate(out)
                start = perf_counter()
                written = await store.export_all(out, format="claude-code")
                elapsed = perf_counter() - start
                if len(written) != len(report.session_ids):
                    raise BenchError(f"export_all wrote {len(written)} sessions")
                return elapsed

            async def bare() -> float:
                _clean_slate(out)
                start = perf_counter()
                lines = await floor.dump(out)
                elapsed = perf_counter() - start
                if lines != total:
                    raise BenchError(f"the floor wrote {lines} lines, not {total}")
                return elapsed

            await ours()
            await bare()
            ours_times, bare_times = [], []
            for _ in range(s.export_reps):
                ours_times.append(await ours())
                bare_times.append(await bare())
        finally:
            await floor.close()
            shutil.rmtree(out, ignore_errors=True)
    for db in (ours_db, bare_db):
        await server.drop(db)
    ours_s, bare_s = statistics.median(ours_times), statistics.median(bare_times)
    run.log(
        f"{server.backend}: export {total / ours_s:,.0f} records/s, "
        f"floor {total / bare_s:,.0f} records/s"
    )
    name = f"9 export {s.import_files} Claude Code files, {count(total)} lines"
    return [Result(name, server.backend, ours_s, bare_s, Goal("<=", 2))]
