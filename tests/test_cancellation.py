"""Cancelling appends at random points on SQLite: before the write, while it waits for
the writer thread or the lock, during and right after the commit. A cancelled append
wrote nothing; one that returned is stored exactly once; no connection is left inside a
transaction and nobody keeps the write lock."""

from __future__ import annotations

import asyncio
import random
import shutil
import sqlite3
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import sql_helpers as sql

from sessiondb import SessionStore

ATTEMPTS = 400


def _message(i: int, rng: random.Random) -> list[dict[str, Any]]:
    """The i-th append: small (inline), big (the writer thread), with a uuid (a
    transaction), or two messages; its texts all start with ``a{i} ``."""
    kind = i % 4
    if kind == 0:
        return [{"role": "user", "content": f"a{i} small"}]
    if kind == 1:
        return [{"role": "user", "content": f"a{i} big " + "x" * 70_000}]
    if kind == 2:
        return [{"role": "user", "content": f"a{i} uuid", "uuid": str(uuid.uuid4())}]
    return [{"role": "user", "content": f"a{i} one"}, {"role": "assistant", "content": f"a{i} two"}]


async def _attempt(store: SessionStore, sid: str, i: int, rng: random.Random) -> str:
    """One append, cancelled at a random point (or not at all); ``acked`` or ``cancelled``."""
    messages = _message(i, rng)
    how = rng.random()
    try:
        if how < 0.4:
            await asyncio.wait_for(store.append(sid, messages), rng.uniform(0, 0.003))
        else:
            task = asyncio.create_task(store.append(sid, messages))
            if how < 0.7:
                await asyncio.sleep(rng.uniform(0, 0.004))
            else:
                # A given number of turns of the loop: hits each await of the append in
                # turn, the one right after an inline commit too.
                for _ in range(rng.randrange(6)):
                    await asyncio.sleep(0)
            task.cancel()
            await task
    except (asyncio.CancelledError, TimeoutError):
        return "cancelled"
    return "acked"


def _hold_lock_now_and_then(path: Path, stop: threading.Event) -> None:
    """Another writer of the file: takes the write lock for a moment, again and again, so
    that appends fall back to the writer thread and wait there."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        while not stop.is_set():
            conn.execute("BEGIN IMMEDIATE")
            stop.wait(0.002)
            conn.execute("COMMIT")
            stop.wait(0.003)
    finally:
        conn.close()


async def test_cancelled_appends_write_nothing_and_leave_no_transaction_open(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "cancel.sqlite3"
    shutil.copyfile(sqlite_template, path)
    rng = random.Random(8)
    stop = threading.Event()
    other = threading.Thread(target=_hold_lock_now_and_then, args=(path, stop))
    store = await SessionStore.connect(str(path))
    try:
        sid = (await store.create_session()).id
        other.start()
        outcomes: dict[int, str] = {}
        start = 0
        while start < ATTEMPTS:
            # One to four at a time: alone, an append commits inline; together, one holds
            # the writer and the others queue behind it.
            batch = list(range(start, start + rng.randint(1, 4)))
            results = await asyncio.gather(*(_attempt(store, sid, i, rng) for i in batch))
            outcomes.update(zip(batch, results, strict=True))
            start = batch[-1] + 1
        stop.set()
        await asyncio.to_thread(other.join)

        backend: Any = store._backend
        for conn in (backend._writer, backend._inline):
            assert conn is None or not conn.in_transaction
        # Another connection takes the write lock at once: nobody holds it.
        probe = sqlite3.connect(path, isolation_level=None, timeout=0.5)
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        probe.close()

        records = await store.records(sid)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        info = await store.get_session(sid)
        assert info.last_seq == info.message_count == len(records)
        assert await sql.scalar(store, "SELECT count(*) FROM sessiondb_records") == len(records)
        stored = Counter(r.message.text().split(" ")[0] for r in records if r.message)
        for i, outcome in outcomes.items():
            expected = len(_message(i, rng)) if outcome == "acked" else 0
            assert stored[f"a{i}"] == expected, (i, outcome, stored[f"a{i}"])
        counts = Counter(outcomes.values())
        assert counts["acked"] >= 20 and counts["cancelled"] >= 20, counts

        # The store still works, and so does a second store on the same file.
        (after,) = await store.append(sid, {"role": "user", "content": "after"})
        assert after.seq == len(records) + 1
        async with SessionStore.open(str(path)) as second:
            (again,) = await second.append(sid, {"role": "user", "content": "second"})
            assert again.seq == len(records) + 2
        check = sqlite3.connect(path)
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        check.close()
        print(f"cancellation outcomes: {dict(counts)}")
    finally:
        stop.set()
        if other.is_alive():
            await asyncio.to_thread(other.join)
        await store.close()
