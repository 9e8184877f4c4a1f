"""Fault injection: backends killed under load (Postgres), writer processes SIGKILLed
(SQLite). Every acknowledged append is stored exactly once, none is stored twice, the
seqs stay gapless and the head agrees with the records.

Writers run in processes started with "spawn" (each its own interpreter and pool, as a
service's replicas); every test is bounded in time.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from sqlalchemy.engine import make_url

from sessiondb import DatabaseUnavailableError, SessionDBError, SessionStore

TIMEOUT_S = 120


# -- workers (module level: spawned processes import them) ------------------------------


async def _write(url: str, session_id: str, proc: int, count: int) -> dict[str, list[str]]:
    """Append ``count`` messages, every other one with a uuid; sort the texts by outcome."""
    outcome: dict[str, list[str]] = {"acked": [], "unknown": [], "failed": [], "uuid": []}
    async with SessionStore.open(url) as store:
        for i in range(count):
            text = f"p{proc} i{i}"
            message: dict[str, Any] = {"role": "user", "content": text}
            if i % 2:
                message["uuid"] = str(uuid.uuid4())
                outcome["uuid"].append(text)
            try:
                (record,) = await store.append(session_id, message)
                assert record.seq >= 1
                outcome["acked"].append(text)
            except DatabaseUnavailableError as exc:
                outcome["unknown" if exc.outcome_unknown else "failed"].append(text)
            except SessionDBError:
                outcome["failed"].append(text)
    return outcome


def _pg_worker(url: str, session_id: str, proc: int, count: int) -> dict[str, list[str]]:
    return asyncio.run(_write(url, session_id, proc, count))


def _check_outcomes(outcomes: list[dict[str, list[str]]], stored: list[str]) -> None:
    times = Counter(stored)
    assert max(times.values(), default=1) == 1, [t for t, n in times.items() if n > 1]
    with_uuid = {t for o in outcomes for t in o["uuid"]}
    for o in outcomes:
        missing = [t for t in o["acked"] if t not in times]
        assert not missing, f"acknowledged but not stored: {missing[:5]}"
        # A retryable failure of an append without uuids wrote nothing.
        written = [t for t in o["failed"] if t in times and t not in with_uuid]
        assert not written, f"failed but stored: {written[:5]}"


async def _check_session(store: SessionStore, session_id: str) -> list[str]:
    recs = await store.records(session_id)
    assert [r.seq for r in recs] == list(range(1, len(recs) + 1))
    info = await store.get_session(session_id)
    assert info.last_seq == len(recs)
    assert info.message_count == len(recs)
    return [r.message.text() for r in recs if r.message is not None]


# -- Postgres: pg_terminate_backend under load -----------------------------------------


@pytest.mark.postgres_only
async def test_backends_killed_under_load_lose_and_duplicate_nothing(pg_url: str) -> None:
    import asyncpg

    url = make_url(pg_url)
    database = str(url.database)
    async with SessionStore.open(pg_url) as store:
        session_id = (await store.create_session()).id
    ctx = multiprocessing.get_context("spawn")
    admin = await asyncpg.connect(user=url.username, host=url.host, port=url.port)
    loop = asyncio.get_running_loop()
    with ctx.Pool(4) as pool:
        pending = pool.starmap_async(_pg_worker, [(pg_url, session_id, p, 300) for p in range(4)])
        kills = rounds = 0
        deadline = time.monotonic() + TIMEOUT_S
        while not pending.ready() and time.monotonic() < deadline:
            await asyncio.sleep(0.03)
            rows = await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 "
                "AND application_name = 'sessiondb' AND pid <> pg_backend_pid()",
                database,
            )
            kills += len(rows)
            rounds += 1
        outcomes = await loop.run_in_executor(None, pending.get, 30)
    await admin.close()
    acked = sum(len(o["acked"]) for o in outcomes)
    assert kills >= 20, f"only {kills} backends killed in {rounds} rounds"
    assert acked >= 100, outcomes
    async with SessionStore.open(pg_url) as store:
        stored = await _check_session(store, session_id)
        _check_outcomes(outcomes, stored)
        # The first call after the kills succeeds.
        (record,) = await store.append(session_id, {"role": "user", "content": "after"})
        assert record.seq == len(stored) + 1
    print(f"killed {kills} backends in {rounds} rounds; {acked} of 1200 appends acknowledged")


# -- SQLite: writer processes SIGKILLed mid-load ---------------------------------------

_SQLITE_WRITER = """
import asyncio, sys
from sessiondb import SessionStore

async def main(url, session_id, log):
    async with SessionStore.open(url) as store:
        with open(log, "a") as out:
            i = 0
            while True:
                text = f"{sys.argv[4]} i{i}"
                await store.append(session_id, {"role": "user", "content": text})
                out.write(text + "\\n")
                out.flush()
                i += 1

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


async def test_sqlite_writers_killed_mid_load_leave_a_consistent_database(
    tmp_path: Path, sqlite_template: Path
) -> None:
    import shutil

    path = tmp_path / "faults.sqlite3"
    shutil.copyfile(sqlite_template, path)
    async with SessionStore.open(str(path)) as store:
        session_id = (await store.create_session()).id
    log = tmp_path / "acked.log"
    script = tmp_path / "writer.py"
    script.write_text(_SQLITE_WRITER)
    kills = 0
    for round_ in range(6):
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), str(path), session_id, str(log), f"r{round_}p{p}"],
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            for p in range(2)
        ]
        # Kill mid-load: once both writers have acknowledged appends (their start-up
        # takes seconds on a loaded machine), then a little later.
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not all(
            f"r{round_}p{p} " in (log.read_text() if log.exists() else "") for p in range(2)
        ):
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2 + 0.1 * round_)
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            assert proc.returncode == -signal.SIGKILL
            kills += 1
    acked = log.read_text().split()
    acked = [" ".join(acked[i : i + 2]) for i in range(0, len(acked), 2)]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    async with SessionStore.open(str(path)) as store:
        stored = await _check_session(store, session_id)
        assert max(Counter(stored).values()) == 1
        assert len(acked) >= 50, "the writers hardly wrote"
        missing = set(acked) - set(stored)
        assert not missing, f"acknowledged but not stored: {sorted(missing)[:5]}"
        # At most one append per killed process was in flight, unacknowledged.
        assert len(stored) - len(acked) <= kills
        count = await sql.scalar(store, "SELECT count(*) FROM sessiondb_records")
        assert count == len(stored)
    print(f"SIGKILLed {kills} SQLite writers; {len(acked)} acknowledged, {len(stored)} stored")
