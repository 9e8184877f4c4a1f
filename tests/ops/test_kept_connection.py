"""The Postgres backend keeps the connection its last statement ran on for the next one
(sessiondb.backends.postgres, ``_take``): callers never wait for it, a transaction takes
it, it counts as idle, goes back to the pool when idle, and a store closes at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sessiondb import SessionStore
from sessiondb.backends import postgres

pytestmark = pytest.mark.postgres_only


async def _admin(pg_url: str) -> Any:
    import asyncpg

    url = make_url(pg_url)
    return await asyncpg.connect(
        user=url.username, host=url.host, port=url.port, database="postgres"
    )


async def _store_connections(admin: Any, database: str) -> int:
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
        "AND application_name = 'sessiondb' AND pid <> pg_backend_pid()",
        database,
    )
    return count


async def _mixed(store: SessionStore, sid: str, i: int) -> None:
    """A read, a search, an append (one statement) and a transaction (a fork)."""
    await store.get_session(sid)
    await store.search("kept")
    await store.append(sid, {"role": "user", "content": f"kept {i}"})
    await store.fork(sid)


@pytest.mark.parametrize("size", [1, 2, 3])
async def test_small_pools_serve_concurrent_statements_and_transactions(
    pg_url: str, size: int
) -> None:
    # With the pool's every connection checked out, none is kept (a caller could be
    # waiting for it); with one free, one may be, and a transaction takes it first.
    async with SessionStore.open(pg_url, pool_max_size=size) as store:
        sid = (await store.create_session()).id
        for _ in range(3):
            await asyncio.wait_for(
                asyncio.gather(*(_mixed(store, sid, i) for i in range(8))), timeout=60
            )
            await _mixed(store, sid, 99)  # one after another: on the kept connection
        records = await store.records(sid)
        assert [r.seq for r in records] == list(range(1, 3 * 9 + 1))
        assert len((await store.search("kept", limit=200)).hits) == 3 * 9


async def test_the_kept_connection_counts_as_idle_and_the_store_closes_at_once(
    pg_url: str,
) -> None:
    database = str(make_url(pg_url).database)
    admin = await _admin(pg_url)
    try:
        store = await SessionStore.connect(pg_url, pool_max_size=4)
        try:
            sid = (await store.create_session()).id
            for i in range(20):  # one after another: one connection does it all
                await store.append(sid, {"role": "user", "content": f"kept {i}"})
                await store.search("kept")
            assert await _store_connections(admin, database) == 1
            ((_, used, idle),) = store.core.backend.connection_counts()  # type: ignore[attr-defined]
            assert (used, idle) == (0, 1)
        finally:
            started = time.monotonic()
            await store.close()
        # Not held up by a connection the pool waits for (it would wait 10 s).
        assert time.monotonic() - started < 5
        assert await _store_connections(admin, database) == 0
    finally:
        await admin.close()


async def test_the_kept_connection_goes_back_to_the_pool_when_idle(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "SPARE_IDLE_SECONDS", 0.05)
    async with SessionStore.open(pg_url, pool_max_size=4) as store:
        sid = (await store.create_session()).id
        for i in range(3):
            await store.append(sid, {"role": "user", "content": f"kept {i}"})
            await asyncio.sleep(0.2)  # retired meanwhile: the next call asks the pool
            assert len((await store.search("kept")).hits) == i + 1
            await asyncio.sleep(0.02)  # used again before it is due: kept, timer re-armed
            assert len(await store.records(sid)) == i + 1
        ((_, used, idle),) = store.core.backend.connection_counts()  # type: ignore[attr-defined]
        assert used == 0 and idle >= 1


async def test_a_kept_connection_the_server_closed_is_replaced(pg_url: str) -> None:
    database = str(make_url(pg_url).database)
    admin = await _admin(pg_url)
    try:
        async with SessionStore.open(pg_url, pool_max_size=4) as store:
            sid = (await store.create_session()).id
            for i in range(4):
                await store.append(sid, {"role": "user", "content": f"kept {i}"})
                killed = await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = $1 AND application_name = 'sessiondb' "
                    "AND pid <> pg_backend_pid()",
                    database,
                )
                assert len(killed) >= 1
                # A read first (retried on a new connection), then a write and a transaction.
                assert len(await store.records(sid)) == i + 1
                await store.fork(sid)
            assert len((await store.search("kept")).hits) == 4
    finally:
        await admin.close()
