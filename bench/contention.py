"""Figure 7: many writers appending at once, from several OS processes (Postgres only).

Worker processes (spawned, not forked) stay up for the whole figure and run one job per
round: connect, report ready, wait for the start signal, run their writers, report.
The wall time of a round runs from the start signal to the last worker's report, so
process start-up and connecting are outside it. sessiondb's writers call
``store.append``; the floor's send the one-statement bump-and-insert through asyncpg.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any

import asyncpg

from sessiondb import SessionStore

from . import data
from .databases import BenchError, Database, Server
from .figures import Run
from .floors import PostgresFloor
from .report import Result
from .sizes import count

REPLY_TIMEOUT_S = 600


@dataclass(frozen=True)
class Job:
    side: str  # "sessiondb" | "floor"
    url: str
    dsn: str
    session_ids: tuple[str, ...]
    writers: int
    appends: int
    first_writer: int  # the global number of this process's first writer
    messages: tuple[dict[str, Any], ...]

    def target(self, writer: int, n: int) -> str:
        """The session of writer ``writer``'s ``n``-th append: the one session, or the
        writers' appends dealt round the spread sessions."""
        ids = self.session_ids
        return ids[((self.first_writer + writer) * self.appends + n) % len(ids)]

    def message(self, n: int) -> dict[str, Any]:
        return self.messages[n % len(self.messages)]


Writer = Callable[[int], Awaitable[None]]


async def _start_together(pipe: Connection, writer: Writer, writers: int) -> None:
    pipe.send(("ready", 0.0))
    if pipe.recv() != "go":
        raise BenchError("expected the start signal")
    start = perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    pipe.send(("done", perf_counter() - start))


async def _sessiondb_job(job: Job, pipe: Connection) -> None:
    async with SessionStore.open(job.url) as store:
        # One pooled connection per writer, opened before the clock starts.
        await asyncio.gather(*(store.get_session(job.session_ids[0]) for _ in range(job.writers)))

        async def writer(w: int) -> None:
            for n in range(job.appends):
                await store.append(job.target(w, n), job.message(n))

        await _start_together(pipe, writer, job.writers)


async def _floor_job(job: Job, pipe: Connection) -> None:
    floors = [PostgresFloor(await asyncpg.connect(job.dsn)) for _ in range(job.writers)]
    try:

        async def writer(w: int) -> None:
            for n in range(job.appends):
                await floors[w].append(job.target(w, n), job.message(n))

        await _start_together(pipe, writer, job.writers)
    finally:
        for floor in floors:
            await floor.close()


def worker(pipe: Connection) -> None:
    """A worker process's loop: one job per message, until ``None``."""
    while (job := pipe.recv()) is not None:
        try:
            asyncio.run(
                _sessiondb_job(job, pipe) if job.side == "sessiondb" else _floor_job(job, pipe)
            )
        except Exception as exc:
            pipe.send(("error", f"{type(exc).__name__}: {exc}"))


def _reply(pipe: Connection, expected: str) -> float:
    if not pipe.poll(REPLY_TIMEOUT_S):
        raise BenchError(f"a worker sent no {expected!r} within {REPLY_TIMEOUT_S} s")
    kind, value = pipe.recv()
    if kind != expected:
        raise BenchError(f"a worker failed: {value}")
    return float(value)


class Workers:
    """``processes`` spawned workers, each running one job per round."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(processes):
            ours, theirs = context.Pipe()
            proc = context.Process(target=worker, args=(theirs,), daemon=True)
            proc.start()
            theirs.close()
            self.pipes.append(ours)
            self.procs.append(proc)

    def round(self, jobs: list[Job]) -> float:
        """Run one job per worker, started together; the wall time from start to end."""
        for pipe, job in zip(self.pipes, jobs, strict=True):
            pipe.send(job)
        for pipe in self.pipes:
            _reply(pipe, "ready")
        start = perf_counter()
        for pipe in self.pipes:
            pipe.send("go")
        for pipe in self.pipes:
            _reply(pipe, "done")
        return perf_counter() - start

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):  # the worker is gone already
                pipe.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()


async def _check(db: Database, ids: list[str], expected: int) -> None:
    """Every append landed exactly once: heads and row counts add up."""
    conn = await asyncpg.connect(db.dsn)
    try:
        heads = await conn.fetchval(
            "SELECT sum(last_seq) FROM sessiondb_sessions WHERE id = any($1::text[])", ids
        )
        rows = await conn.fetchval(
            "SELECT count(*) FROM sessiondb_records WHERE session_id = any($1::text[])", ids
        )
    finally:
        await conn.close()
    if heads != expected or rows != expected:
        raise BenchError(f"expected {expected} appends, found heads {heads} and {rows} rows")


async def contended_appends(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    if server.backend != "postgres":
        raise BenchError("figure 7 runs on Postgres only")
    db = await server.fresh()
    messages = tuple(data.user_messages(64, run.seed, run.corpus))
    async with SessionStore.open(db.url) as store:
        empty: list[dict[str, Any]] = [{"messages": []}]
        sets = {
            (layout, side): await store.import_sessions(empty * n)
            for layout, n in (("one", 1), ("spread", s.contended_sessions))
            for side in ("sessiondb", "floor")
        }
    run.log(f"postgres: starting {s.processes} worker processes")
    workers = Workers(s.processes)
    warm = max(1, s.contended_appends // 5)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in sets}
    try:

        def jobs(key: tuple[str, str], appends: int) -> list[Job]:
            return [
                Job(key[1], db.url, db.dsn, tuple(sets[key]), s.writers, appends,
                    p * s.writers, messages)
                for p in range(s.processes)
            ]  # fmt: skip

        for key in sets:
            workers.round(jobs(key, warm))
        for _ in range(s.contended_reps):
            for key in sets:
                times[key].append(workers.round(jobs(key, s.contended_appends)))
    finally:
        workers.close()
    writers = s.processes * s.writers
    for key, ids in sets.items():
        await _check(db, ids, writers * (warm + s.contended_appends * s.contended_reps))
        rate = writers * s.contended_appends / statistics.median(times[key])
        run.log(f"postgres: {key[0]} session(s), {key[1]}: {rate:,.0f} appends/s")
    await server.drop(db)
    shape = f"{s.processes}x{s.writers} writers x {s.contended_appends} appends"
    return [
        Result(
            f"7 contended appends, {shape}, {where}",
            "postgres",
            statistics.median(times[(layout, "sessiondb")]),
            statistics.median(times[(layout, "floor")]),
        )
        for layout, where in (
            ("one", "1 session"),
            ("spread", f"{count(s.contended_sessions)} sessions"),
        )
    ]
