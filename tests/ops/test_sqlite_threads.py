"""The SQLite hot paths: inline appends that yield, fall back when the lock is taken,
and checkpoint off the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from sessiondb import SessionStore
from sessiondb.backends.sqlite import SQLiteBackend, connect
from sessiondb.config import Settings


async def _store_with_session(path: Path) -> tuple[SessionStore, str]:
    """An open store (the test closes it) and a session in it."""
    store, _ = await _store_and_backend(path)
    return store, (await store.create_session()).id


async def _store_and_backend(path: Path) -> tuple[SessionStore, SQLiteBackend]:
    """A migrated store on ``path`` and its SQLite backend, built by its public
    constructor: these tests check the backend's threads and connections."""
    settings = Settings.from_env(str(path))
    backend = SQLiteBackend(settings)
    store = SessionStore(settings, backend=backend)
    await store.migrate()
    return store, backend


async def test_a_loop_of_appends_lets_other_tasks_run(tmp_path: Path) -> None:
    store, sid = await _store_with_session(tmp_path / "fair.sqlite3")
    try:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        for i in range(200):
            await store.append(sid, {"role": "user", "content": f"m{i}"})
        stop.set()
        await task
        assert ticks >= 100  # the ticker ran between appends, not only at the end
        assert (await store.get_session(sid)).last_seq == 200
    finally:
        await store.close()


async def test_an_append_waits_for_a_lock_held_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "busy.sqlite3"
    store, sid = await _store_with_session(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        started = time.perf_counter()
        pending = asyncio.create_task(store.append(sid, {"role": "user", "content": "late"}))
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting on the writer thread, not failed
        other.execute("COMMIT")
        (record,) = await asyncio.wait_for(pending, 10)
        assert record.seq == 1
        assert time.perf_counter() - started >= 0.3
        assert [m.text() for m in await store.context(sid)] == ["late"]
    finally:
        other.close()
        await store.close()


async def _wal_size_after_appends(path: Path, checkpoint_every: int) -> int:
    store, writer = await _store_and_backend(path)
    sid = (await store.create_session()).id
    try:
        writer.CHECKPOINT_EVERY = checkpoint_every
        for _ in range(80):
            await store.append(sid, {"role": "user", "content": "x" * 20_000})
        await asyncio.sleep(0.3)  # let a last checkpoint finish on the thread
        assert (await store.get_session(sid)).last_seq == 80
        return Path(f"{path}-wal").stat().st_size
    finally:
        await store.close()


async def test_inline_commits_are_checkpointed_by_the_thread(tmp_path: Path) -> None:
    # Inline commits never checkpoint; the thread does every CHECKPOINT_EVERY commits,
    # after which the WAL is written from its start again instead of growing.
    never = await _wal_size_after_appends(tmp_path / "never.sqlite3", 10**9)
    often = await _wal_size_after_appends(tmp_path / "often.sqlite3", 10)
    assert often < never / 2


async def test_big_appends_are_written_on_the_thread(tmp_path: Path) -> None:
    store, writer = await _store_and_backend(tmp_path / "big.sqlite3")
    sid = (await store.create_session()).id
    try:
        before = writer._inline_commits
        await store.append(sid, {"role": "user", "content": "small"})
        inline = writer._inline_commits
        assert inline == before + 1  # the small append ran inline
        big = "y" * 200_000
        big_result = {"role": "toolResult", "toolCallId": "c", "content": big}
        (record,) = await store.append(sid, big_result)
        assert writer._inline_commits == inline  # not inline
        assert record.seq == 2
        assert [m.text() for m in await store.context(sid)] == ["small", big]
    finally:
        await store.close()


async def test_a_transaction_cancelled_during_begin_leaves_no_write_lock(tmp_path: Path) -> None:
    # A task cancelled while its BEGIN IMMEDIATE runs on the writer thread (waiting for
    # another process's write lock): the BEGIN completes there after the cancel, so its
    # rollback must be queued behind it. Found by cancelling a turn waiter
    # (tests/behaviour/test_turns.py): the writer connection was left inside a transaction, holding
    # the database's write lock, and its next unit failed.
    path = tmp_path / "cancel.sqlite3"
    store, backend = await _store_and_backend(path)
    sid = (await store.create_session()).id
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock

        async def transact() -> None:
            async with backend.transaction() as tx:
                await tx.fetch((text("SELECT 1"), {}))

        task = asyncio.create_task(transact())
        await asyncio.sleep(0.3)  # its BEGIN now waits on the writer thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        other.execute("ROLLBACK")  # the BEGIN goes through, after the cancel
        # Whatever the writer thread was given has run.
        await asyncio.wrap_future(backend._thread.submit(lambda: None))
        assert not backend._writer_conn().in_transaction
        (rec,) = await store.append(sid, {"role": "user", "content": "after"})
        assert rec.seq == 1
        other.execute("BEGIN IMMEDIATE")  # the write lock is free
        other.execute("ROLLBACK")
    finally:
        other.close()
        await store.close()


def test_connections_opening_one_new_file_at_once_all_get_wal(tmp_path: Path) -> None:
    # Replicas that start together open one new database file at the same moment. The
    # switch to WAL took its lock without SQLite's busy handler, and about 1 connection in
    # 60 got "database is locked" at once (CI saw a migrate fail so): 200 rounds of 6 saw
    # it every time before connect() tried the switch again.
    errors: list[BaseException] = []
    modes: list[str] = []
    for round_ in range(200):
        path = str(tmp_path / f"new-{round_}.sqlite3")
        barrier = threading.Barrier(6)

        def open_it(path: str = path, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                conn = connect(path)
                modes.append(conn.execute("PRAGMA journal_mode").fetchone()[0])
                conn.close()
            except BaseException as exc:  # reported below, with every other
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert modes == ["wal"] * 1200
