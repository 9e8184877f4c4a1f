"""Many writers on one session, from several OS processes: no record lost, duplicated or
reordered, seqs 1..n without gaps; and optimistic concurrency without lost updates.

The workers run in processes started with the "spawn" method, so each has its own
interpreter, event loop, engine and connection pool, as replicas of a service would.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from typing import Any

import pytest
from helpers import sql
from helpers.processes import SPAWN
from helpers.processes import run_processes as run_workers
from sqlalchemy import func, select

from sessiondb import SeqConflictError, SessionStore
from sessiondb.tables import records

TEXT = re.compile(r"^p(\d+) w(\d+) i(\d+)(?: read (\d+))?$")
TIMEOUT_S = 240


# -- workers (module level: the spawned processes import them) --------------------------


async def _append_one_at_a_time(
    url: str, session_id: str, proc: int, writers: int, per_writer: int
) -> None:
    async with SessionStore.open(url) as store:

        async def writer(w: int) -> None:
            for i in range(per_writer):
                message = {
                    "role": "user",
                    "content": [{"type": "text", "text": f"p{proc} w{w} i{i}"}],
                }
                (rec,) = await store.append(session_id, [message])
                assert rec.seq >= 1

        await asyncio.gather(*(writer(w) for w in range(writers)))


async def _append_expecting_head(
    url: str, session_id: str, proc: int, writers: int, per_writer: int
) -> int:
    """Read the head, append expecting it, retry on conflict. Returns the conflicts seen."""
    conflicts = 0
    async with SessionStore.open(url) as store:

        async def writer(w: int) -> None:
            nonlocal conflicts
            i = 0
            while i < per_writer:
                head = (await store.get_session(session_id)).last_seq
                text = f"p{proc} w{w} i{i} read {head}"
                try:
                    await store.append(
                        session_id, [{"role": "user", "content": text}], expected_seq=head
                    )
                except SeqConflictError as exc:
                    assert exc.actual_seq > head
                    conflicts += 1
                    continue
                i += 1

        await asyncio.gather(*(writer(w) for w in range(writers)))
    return conflicts


def _worker(
    mode: str,
    url: str,
    session_id: str,
    proc: int,
    writers: int,
    per_writer: int,
    start: Any,
    results: Any,
) -> None:
    start.wait()  # every process is up and imported before anyone writes
    if mode == "plain":
        asyncio.run(_append_one_at_a_time(url, session_id, proc, writers, per_writer))
        results.put((proc, 0))
    else:
        results.put(
            (proc, asyncio.run(_append_expecting_head(url, session_id, proc, writers, per_writer)))
        )


def run_processes(
    mode: str, url: str, session_id: str, procs: int, writers: int, per_writer: int
) -> dict[int, int]:
    start, results = SPAWN.Barrier(procs), SPAWN.Queue()
    run_workers(
        _worker,
        lambda p: (mode, url, session_id, p, writers, per_writer, start, results),
        procs,
        timeout=TIMEOUT_S,
        name="sessiondb-writer",
    )
    out = dict(results.get(timeout=10) for _ in range(procs))
    results.close()
    return out


# -- checks -------------------------------------------------------------------------------


async def check_stream(
    store: SessionStore, session_id: str, procs: int, writers: int, per_writer: int
) -> list[tuple[int, int, int, int | None]]:
    """Every writer's messages exactly once, seqs 1..n, each writer's in its own order."""
    total = procs * writers * per_writer
    recs = await store.records(session_id)
    assert [r.seq for r in recs] == list(range(1, total + 1))

    parsed: list[tuple[int, int, int, int | None]] = []
    for r in recs:
        assert r.message is not None
        match = TEXT.match(r.message.text())
        assert match, r.message.text()
        p, w, i, read = match.groups()
        parsed.append((int(p), int(w), int(i), int(read) if read is not None else None))

    seen = {(p, w, i) for p, w, i, _ in parsed}
    assert len(seen) == total  # none duplicated
    assert seen == {
        (p, w, i) for p in range(procs) for w in range(writers) for i in range(per_writer)
    }  # none lost
    by_writer: dict[tuple[int, int], list[int]] = defaultdict(list)
    for p, w, i, _ in parsed:
        by_writer[(p, w)].append(i)
    for writer, order in by_writer.items():
        assert order == list(range(per_writer)), f"writer {writer} out of order"

    head = await store.get_session(session_id)
    assert head.last_seq == total
    assert head.message_count == total
    (stored,) = await sql.fetch(
        store,
        select(func.count(), func.min(records.c.seq), func.max(records.c.seq)).where(
            records.c.session_id == session_id
        ),
    )
    assert tuple(stored) == (total, 1, total)
    return parsed


# -- tests ------------------------------------------------------------------------------


@pytest.mark.postgres_only
async def test_postgres_many_processes_many_writers_one_session(pg_url: str) -> None:
    procs, writers, per_writer = 4, 8, 100
    async with SessionStore.open(pg_url) as store:
        info = await store.create_session()
        # A second session written meanwhile must not be disturbed.
        other = await store.create_session()
        await store.append(other.id, [{"role": "user", "content": "bystander"}])

        await asyncio.to_thread(run_processes, "plain", pg_url, info.id, procs, writers, per_writer)

        await check_stream(store, info.id, procs, writers, per_writer)
        assert [r.seq for r in await store.records(other.id)] == [1]


@pytest.mark.postgres_only
async def test_postgres_expected_seq_retries_lose_no_update(pg_url: str) -> None:
    procs, writers, per_writer = 2, 3, 25
    async with SessionStore.open(pg_url) as store:
        info = await store.create_session()
        conflicts = await asyncio.to_thread(
            run_processes, "expected", pg_url, info.id, procs, writers, per_writer
        )
        parsed = await check_stream(store, info.id, procs, writers, per_writer)
    # The writers did race (or this test proves nothing), and lost every race cleanly.
    assert sum(conflicts.values()) > 0
    # Every append was made against the head it read: the record's seq is that head + 1,
    # so no writer ever overwrote or skipped over another's update.
    for seq, (_, _, _, read) in enumerate(parsed, start=1):
        assert read == seq - 1


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_sqlite_processes_and_writers_on_one_file(db_url: str) -> None:
    # SQLite: BEGIN IMMEDIATE and a busy timeout make writers of several processes wait
    # for the write lock instead of failing.
    procs, writers, per_writer = 2, 4, 25
    async with SessionStore.open(db_url) as store:
        info = await store.create_session()
        await asyncio.to_thread(run_processes, "plain", db_url, info.id, procs, writers, per_writer)
        await check_stream(store, info.id, procs, writers, per_writer)


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_sqlite_expected_seq_retries_lose_no_update(db_url: str) -> None:
    procs, writers, per_writer = 2, 2, 15
    async with SessionStore.open(db_url) as store:
        info = await store.create_session()
        conflicts = await asyncio.to_thread(
            run_processes, "expected", db_url, info.id, procs, writers, per_writer
        )
        parsed = await check_stream(store, info.id, procs, writers, per_writer)
    assert sum(conflicts.values()) > 0
    assert [read for *_, read in parsed] == list(range(len(parsed)))


async def test_concurrent_tasks_in_one_process(store: SessionStore) -> None:
    # The same guarantees from tasks of one event loop sharing one store.
    info = await store.create_session()
    writers, per_writer = 6, 15

    async def writer(w: int) -> None:
        for i in range(per_writer):
            await store.append(info.id, [{"role": "user", "content": f"p0 w{w} i{i}"}])

    await asyncio.gather(*(writer(w) for w in range(writers)))
    await check_stream(store, info.id, 1, writers, per_writer)
