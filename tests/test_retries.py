"""Safe automatic retries: transient failures are retried with bounded backoff, and an
append is never stored twice (a write whose commit outcome is unknown is not retried
blindly)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import sql_helpers as sql
from sqlalchemy.engine import make_url

from sessiondb import BusyError, DatabaseUnavailableError, SeqConflictError, SessionStore
from sessiondb.backends.base import RETRY_BUDGET, retrying


async def test_retrying_retries_retryable_errors_only() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise BusyError()
        return "ok"

    assert await retrying(flaky) == "ok"
    assert calls == 3

    calls = 0

    async def conflict() -> str:
        nonlocal calls
        calls += 1
        raise SeqConflictError("s", 1, 2)

    with pytest.raises(SeqConflictError):
        await retrying(conflict)
    assert calls == 1

    calls = 0

    async def unknown() -> str:
        nonlocal calls
        calls += 1
        raise DatabaseUnavailableError("lost during COMMIT", outcome_unknown=True)

    with pytest.raises(DatabaseUnavailableError):
        await retrying(unknown)
    assert calls == 1


async def test_retrying_is_bounded_in_time_and_attempts() -> None:
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise DatabaseUnavailableError("down")

    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError):
        await retrying(down)
    assert 2 <= calls <= 6
    assert time.monotonic() - started < RETRY_BUDGET + 0.2


async def _admin(pg_url: str) -> Any:
    import asyncpg

    url = make_url(pg_url)
    return await asyncpg.connect(
        user=url.username, host=url.host, port=url.port, database="postgres"
    )


async def _kill_store_backends(admin: Any, database: str, where: str = "true") -> int:
    rows = await admin.fetch(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = $1 AND application_name = 'sessiondb' AND pid <> pg_backend_pid() "
        f"AND {where}",
        database,
    )
    return len(rows)


@pytest.mark.postgres_only
async def test_stale_pooled_connections_are_not_seen_by_callers(pg_url: str) -> None:
    database = str(make_url(pg_url).database)
    admin = await _admin(pg_url)
    try:
        async with SessionStore.open(pg_url, pool_min_size=4) as store:
            info = await store.create_session()
            await store.append(info.id, {"role": "user", "content": "before"})
            for round_ in range(5):
                assert await _kill_store_backends(admin, database) >= 1
                # The first call after the kills: a read, then an append.
                assert len(await store.records(info.id)) == 1 + round_
                await store.append(info.id, {"role": "user", "content": f"after {round_}"})
            texts = [r.message.text() for r in await store.records(info.id) if r.message]
            assert texts == ["before", *(f"after {i}" for i in range(5))]
    finally:
        await admin.close()


@pytest.mark.postgres_only
async def test_a_read_killed_mid_statement_is_retried(pg_url: str) -> None:
    database = str(make_url(pg_url).database)
    admin = await _admin(pg_url)
    try:
        async with SessionStore.open(pg_url) as store:
            read = asyncio.create_task(sql.scalar(store, "SELECT 7 FROM pg_sleep(0.4)"))
            await asyncio.sleep(0.2)
            assert await _kill_store_backends(admin, database, "query LIKE '%pg_sleep%'") == 1
            assert await read == 7
    finally:
        await admin.close()


async def _append_killed_while_waiting(pg_url: str, message: dict[str, Any]) -> Any:
    """An append blocked on the session's head row lock, its backend killed meanwhile;
    the lock is released after the kill. The append's outcome (or error)."""
    database = str(make_url(pg_url).database)
    admin = await _admin(pg_url)
    try:
        async with SessionStore.open(pg_url) as store:
            info = await store.create_session()
            import asyncpg

            url = make_url(pg_url)
            locker = await asyncpg.connect(
                user=url.username, host=url.host, port=url.port, database=database
            )
            tx = locker.transaction()
            await tx.start()
            await locker.execute(
                "SELECT 1 FROM sessiondb_sessions WHERE id = $1 FOR UPDATE", info.id
            )
            append = asyncio.create_task(store.append(info.id, message))
            await asyncio.sleep(0.3)
            killed = await _kill_store_backends(admin, database, "wait_event_type = 'Lock'")
            assert killed == 1
            await asyncio.sleep(0.05)
            await tx.rollback()
            await locker.close()
            try:
                result: Any = await append
            except DatabaseUnavailableError as exc:
                result = exc
            stored = [r.message.text() for r in await store.records(info.id) if r.message]
            return result, stored
    finally:
        await admin.close()


@pytest.mark.postgres_only
async def test_an_append_by_uuid_whose_connection_broke_is_retried_and_stored_once(
    pg_url: str,
) -> None:
    message = {"role": "user", "content": "once", "uuid": str(uuid.uuid4())}
    result, stored = await _append_killed_while_waiting(pg_url, message)
    assert not isinstance(result, Exception), result
    assert [r.seq for r in result] == [1]
    assert stored == ["once"]


@pytest.mark.postgres_only
async def test_an_append_whose_outcome_is_unknown_is_not_retried_blindly(pg_url: str) -> None:
    result, stored = await _append_killed_while_waiting(pg_url, {"role": "user", "content": "x"})
    assert isinstance(result, DatabaseUnavailableError)
    assert result.outcome_unknown and not result.retryable
    assert "unknown" in str(result)
    assert stored == []  # the kill came while it waited for the lock: nothing was stored
