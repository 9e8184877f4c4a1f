"""An import reads the next files while a batch is written; files from several importers
land once each; a cancelled import leaves whole sessions or none.

- Overlap, on Postgres: another transaction locks the records table, so the first batch
  cannot be written. Files after it are still read and checked (the progress callback
  says so) until the next batch must wait. Then the lock goes and everything lands.
- Two OS processes import the same tree at once: every session is stored once, whole,
  and the two reports account for every file's session once (created or skipped).
- A cancelled import, on every backend: each stored session has all its records, and
  running the import again completes the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.formats import claude_code_project

from sessiondb import ImportProgress, SessionStore, transfer

TIMEOUT_S = 60


async def _counts(store: SessionStore) -> dict[str, int]:
    """Records per stored session."""
    rows = await sql.fetch(
        store,
        "SELECT s.id, count(r.seq) AS n FROM sessiondb_sessions s "
        "LEFT JOIN sessiondb_records r ON r.session_id = s.id GROUP BY s.id",
    )
    return {row.id: int(row.n) for row in rows}


async def test_files_are_read_while_a_batch_waits_to_be_written(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer.importer, "BATCH_RECORDS", 20)  # a batch every two files
    source = claude_code_project(tmp_path / "p", 8, 10)
    seen: list[int] = []

    def progress(p: ImportProgress) -> None:
        seen.append(p.files_done)

    locker = await sql.database(pg_url).pg_connect()
    async with SessionStore.open(pg_url) as store:
        try:
            await locker.execute("BEGIN")
            await locker.execute("LOCK TABLE sessiondb_records IN SHARE ROW EXCLUSIVE MODE")
            task = asyncio.ensure_future(store.import_path(source, progress=progress))
            for _ in range(200):  # up to 10 s
                if seen and seen[-1] >= 3:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # time to go further, if it (wrongly) could
            held = list(seen)
            assert await locker.fetchval("SELECT count(*) FROM sessiondb_records") == 0
        finally:
            await locker.execute("COMMIT")
            await locker.close()
        # The first batch (files 1-2) waits for the lock; files 3 and 4 were read and
        # checked meanwhile, and the second batch's turn waits for the first.
        assert held and held[-1] >= 3, held
        assert held[-1] < 8, held
        report = await asyncio.wait_for(task, TIMEOUT_S)
        assert report.records == 80 and report.created == 8 and report.failures == []
        assert sorted((await _counts(store)).values()) == [10] * 8


def _import_worker(url: str, source: str, out: Any, start: Any) -> None:
    async def run() -> tuple[int, int, int]:
        async with SessionStore.open(url) as store:
            report = await store.import_path(source)
            return report.created, report.skipped, len(report.failures)

    start.wait()
    out.put(asyncio.run(run()))


async def test_two_processes_import_the_same_tree_once(db_url: str, tmp_path: Path) -> None:
    files = 40
    source = claude_code_project(tmp_path / "tree", files, 30)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    processes = [
        ctx.Process(target=_import_worker, args=(db_url, str(source), out, start)) for _ in range(2)
    ]
    for process in processes:
        process.start()
    try:
        results = [out.get(timeout=TIMEOUT_S) for _ in processes]
        for process in processes:
            process.join(TIMEOUT_S)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(10)
    assert all(p.exitcode == 0 for p in processes), [p.exitcode for p in processes]
    assert all(failed == 0 for _, _, failed in results), results
    assert sum(created for created, _, _ in results) == files, results
    assert sum(created + skipped for created, skipped, _ in results) == 2 * files, results
    async with SessionStore.open(db_url) as store:
        assert sorted((await _counts(store)).values()) == [30] * files


async def test_a_cancelled_import_leaves_whole_sessions(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer.importer, "BATCH_RECORDS", 30)
    source = claude_code_project(tmp_path / "c", 30, 12)
    for stop_after in (1, 4, 9, 17):
        ready = asyncio.Event()

        def progress(p: ImportProgress, stop_after: int = stop_after, ready: Any = ready) -> None:
            if p.files_done >= stop_after:
                ready.set()

        task = asyncio.ensure_future(store.import_path(source, progress=progress))
        await ready.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        counts = await _counts(store)
        assert set(counts.values()) <= {12}, counts  # whole sessions or none
    report = await store.import_path(source)
    assert report.failures == []
    assert report.created + report.skipped == 30
    assert sorted((await _counts(store)).values()) == [12] * 30
