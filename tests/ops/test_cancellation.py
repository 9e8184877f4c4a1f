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

import pytest
from helpers import sql

from sessiondb import SessionStore
from sessiondb.backends.sqlite import SQLiteBackend
from sessiondb.config import Settings

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
    return await _attempt_messages(store, sid, _message(i, rng), rng)


async def _attempt_messages(
    store: SessionStore,
    sid: str,
    messages: list[dict[str, Any]],
    rng: random.Random,
    scale: float = 1.0,
) -> str:
    """``scale``: how much longer than on SQLite an append takes."""
    how = rng.random()
    try:
        if how >= 0.92:  # not cancelled: some appends are acknowledged whatever the load
            await store.append(sid, messages)
        elif how < 0.4:
            await asyncio.wait_for(store.append(sid, messages), rng.uniform(0, 0.003) * scale)
        else:
            task = asyncio.create_task(store.append(sid, messages))
            if how < 0.7:
                await asyncio.sleep(rng.uniform(0, 0.004) * scale)
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
    # The backend built by its public constructor: the test checks its connections.
    settings = Settings.from_env(str(path))
    backend = SQLiteBackend(settings)
    store = SessionStore(settings, backend=backend)
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
        assert counts["acked"] >= 10 and counts["cancelled"] >= 10, counts

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


@pytest.mark.postgres_only
async def test_cancelled_appends_on_postgres_leave_a_working_store(pg_url: str) -> None:
    """On Postgres a cancel can land after the server committed: a cancelled append may be
    stored. Appends with uuids, sent again, are then stored exactly once; the seqs stay
    gapless, no connection is left idle in a transaction, and the store keeps working."""
    import asyncpg
    from sqlalchemy.engine import make_url

    rng = random.Random(8)
    store = await SessionStore.connect(pg_url, pool_max_size=4)
    try:
        sid = (await store.create_session()).id
        outcomes: dict[int, str] = {}
        messages: dict[int, list[dict[str, Any]]] = {}
        start = 0
        while start < 200:
            batch = list(range(start, start + rng.randint(1, 4)))
            for i in batch:
                messages[i] = _message(i, rng)
            results = await asyncio.gather(
                *(_attempt_messages(store, sid, messages[i], rng, 5.0) for i in batch)
            )
            outcomes.update(zip(batch, results, strict=True))
            start = batch[-1] + 1
        url = make_url(pg_url)
        admin = await asyncpg.connect(
            user=url.username, host=url.host, port=url.port, database="postgres"
        )
        try:
            stuck = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                "AND state LIKE 'idle in transaction%'",
                url.database,
            )
        finally:
            await admin.close()
        assert stuck == 0
        # A cancelled append with uuids, sent again, is stored once whatever happened.
        for i, outcome in outcomes.items():
            if outcome == "cancelled" and "uuid" in messages[i][0]:
                await store.append(sid, messages[i])
        records = await store.records(sid)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        info = await store.get_session(sid)
        assert info.last_seq == info.message_count == len(records)
        stored = Counter(r.message.text().split(" ")[0] for r in records if r.message)
        for i, outcome in outcomes.items():
            if outcome == "acked" or "uuid" in messages[i][0]:
                assert stored[f"a{i}"] == len(messages[i]), (i, outcome)
            else:
                assert stored[f"a{i}"] in (0, len(messages[i])), (i, outcome)
        counts = Counter(outcomes.values())
        assert counts["acked"] >= 5 and counts["cancelled"] >= 5, counts
        (after,) = await store.append(sid, {"role": "user", "content": "after"})
        assert after.seq == len(records) + 1
        print(f"postgres cancellation outcomes: {dict(counts)}")
    finally:
        await store.close()
