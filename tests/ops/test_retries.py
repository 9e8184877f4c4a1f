"""Safe automatic retries: transient failures are retried with bounded backoff, and an
append is never stored twice (a write whose commit outcome is unknown is not retried
blindly)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from helpers import sql
from sqlalchemy import text
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
        async with sql.open_store(pg_url) as store:
            # A read on the store's own backend (built by open_backend), which retries it.
            backend = sql.backend_of(store)
            read = asyncio.create_task(backend.fetch((text("SELECT 7 FROM pg_sleep(0.4)"), {})))
            await asyncio.sleep(0.2)
            assert await _kill_store_backends(admin, database, "query LIKE '%pg_sleep%'") == 1
            assert [tuple(row) for row in await read] == [(7,)]
    finally:
        await admin.close()


class _Proxy:
    """A TCP proxy in front of the server whose connections the test can cut: the client
    then loses its connection without a word from the server, as when a network or a
    server host fails."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._writers: list[asyncio.StreamWriter] = []
        self._frozen: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> _Proxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if dst in self._frozen:
                        continue  # dropped: the peer hears nothing, not even a reset
                    dst.write(data)
                    await dst.drain()
            except (OSError, RuntimeError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def freeze(self) -> None:
        """Drop whatever the open connections carry from now on, both ways, and close
        nothing: connections that died without a word (new ones work)."""
        self._frozen.update(self._writers)

    def cut(self) -> None:
        """Drop every open connection, both ways, at once."""
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()


async def _append_broken_while_waiting(pg_url: str, message: dict[str, Any], *, how: str) -> Any:
    """An append blocked on the session's head row lock, its connection broken meanwhile
    (``how``: ``terminate``, the server terminates its backend; ``cut``, the network
    drops it); the lock is released after. The append's outcome (or error), and the
    texts stored."""
    import asyncpg

    url = make_url(pg_url)
    database = str(url.database)
    admin = await _admin(pg_url)
    async with _Proxy(str(url.host), url.port or 5432) as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        try:
            async with SessionStore.open(through) as store:
                info = await store.create_session()
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
                if how == "terminate":
                    killed = await _kill_store_backends(admin, database, "wait_event_type = 'Lock'")
                    assert killed == 1
                else:
                    proxy.cut()
                await asyncio.sleep(0.05)
                await tx.rollback()
                await locker.close()
                try:
                    result: Any = await append
                except DatabaseUnavailableError as exc:
                    result = exc
                await asyncio.sleep(0.2)  # a backend cut off may still be finishing
                stored = [r.message.text() for r in await store.records(info.id) if r.message]
                return result, stored
        finally:
            await admin.close()


@pytest.mark.postgres_only
async def test_an_append_by_uuid_whose_connection_broke_is_retried_and_stored_once(
    pg_url: str,
) -> None:
    for how in ("terminate", "cut"):
        message = {"role": "user", "content": "once", "uuid": str(uuid.uuid4())}
        result, stored = await _append_broken_while_waiting(pg_url, message, how=how)
        assert not isinstance(result, Exception), (how, result)
        assert stored == ["once"], how
        assert [r.seq for r in result] == [1]


@pytest.mark.postgres_only
async def test_an_append_whose_backend_was_terminated_mid_statement_is_retried(
    pg_url: str,
) -> None:
    # The server said why it closed the connection (57P01) before the append committed:
    # nothing was stored, so running it again is safe.
    message = {"role": "user", "content": "x"}
    result, stored = await _append_broken_while_waiting(pg_url, message, how="terminate")
    assert not isinstance(result, Exception), result
    assert [r.seq for r in result] == [1]
    assert stored == ["x"]


@pytest.mark.postgres_only
async def test_an_append_whose_outcome_is_unknown_is_not_retried_blindly(pg_url: str) -> None:
    # The connection dropped without a word from the server after the append was sent:
    # it may have committed (here it does, once the lock is released).
    message = {"role": "user", "content": "x"}
    result, stored = await _append_broken_while_waiting(pg_url, message, how="cut")
    assert isinstance(result, DatabaseUnavailableError)
    assert result.outcome_unknown and not result.retryable
    assert "unknown" in str(result)
    assert stored in ([], ["x"])


@pytest.mark.postgres_only
async def test_appends_on_pooled_connections_killed_while_idle_are_stored_once(
    pg_url: str,
) -> None:
    """The server terminates the pool's idle backends; the client has not noticed yet.
    The next append without uuids must not fail with outcome unknown: the server's error
    (or asyncpg's refusal to use the broken connection) came before anything ran."""
    database = str(make_url(pg_url).database)
    admin = await _admin(pg_url)
    try:
        async with SessionStore.open(pg_url, pool_min_size=4) as store:
            info = await store.create_session()
            for round_ in range(12):
                # Four connections in the pool, all idle; then their backends go.
                await asyncio.gather(*(store.get_session(info.id) for _ in range(4)))
                killed = await _kill_store_backends(admin, database, "state = 'idle'")
                assert killed >= 1
                (record,) = await store.append(
                    info.id, {"role": "user", "content": f"after kill {round_}"}
                )
                assert record.seq == round_ + 1
            texts = [r.message.text() for r in await store.records(info.id) if r.message]
            assert texts == [f"after kill {i}" for i in range(12)]
    finally:
        await admin.close()


async def test_a_server_that_never_answers_times_out_with_what_was_tried() -> None:
    import socket

    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgresql://nobody@127.0.0.1:{port}/x"
        async with SessionStore.open(url, connect_timeout=0.3) as store:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError) as err:
                await store.append("01J9Z3K7Q8R2V5X4W6Y0A1B2C3", {"role": "user", "content": "x"})
            assert time.monotonic() - started < RETRY_BUDGET + 1
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "connect_timeout 0.3 s" in message, message
    assert err.value.retryable and not err.value.outcome_unknown


@pytest.mark.postgres_only
async def test_a_pooled_connection_that_died_silently_is_pinged_before_a_write(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessiondb.backends import postgres

    url = make_url(pg_url)
    async with _Proxy(str(url.host), url.port or 5432) as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        async with SessionStore.open(through, connect_timeout=0.5) as store:
            info = await store.create_session()
            await store.append(info.id, {"role": "user", "content": "before"})
            monkeypatch.setattr(postgres, "IDLE_PING_SECONDS", 0.05)
            proxy.freeze()  # the pool's one connection: half-open, as after a NAT expiry
            await asyncio.sleep(0.1)
            append = asyncio.create_task(store.append(info.id, {"role": "user", "content": "x"}))
            done, _ = await asyncio.wait({append}, timeout=10)
            if not done:
                proxy.cut()  # lets the append fail, and the store close
                await asyncio.gather(append, return_exceptions=True)
                pytest.fail("the append was sent on a dead connection and never answered")
            (record,) = append.result()
            assert record.seq == 2
            texts = [r.message.text() for r in await store.records(info.id) if r.message]
            assert texts == ["before", "x"]


async def _combined_batch_cut(
    pg_url: str, calls: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """``calls`` combined into one batch (sessiondb.combine) that loses its connection
    without a word while it waits for the head's lock (so does the lead before it); the
    lock is released after. Each call's outcome (or error), and the texts stored."""
    import asyncpg

    url = make_url(pg_url)
    async with _Proxy(str(url.host), url.port or 5432) as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        async with SessionStore.open(through) as store:
            sid = (await store.create_session()).id
            locker = await asyncpg.connect(
                user=url.username, host=url.host, port=url.port, database=str(url.database)
            )
            tx = locker.transaction()
            await tx.start()
            await locker.execute("SELECT 1 FROM sessiondb_sessions WHERE id = $1 FOR UPDATE", sid)
            lead = asyncio.create_task(store.append(sid, {"role": "user", "content": "lead"}))
            await asyncio.sleep(0.2)  # the lead waits for the lock; the calls wait for it
            tasks = {k: asyncio.create_task(store.append(sid, m)) for k, m in calls.items()}
            await asyncio.sleep(0.05)
            proxy.cut()  # the lead's connection
            with pytest.raises(DatabaseUnavailableError):
                await lead
            await asyncio.sleep(0.3)  # the batch waits for the lock in its turn
            assert store.core.combiner.batches == 1
            proxy.cut()  # the batch's connection
            await asyncio.sleep(0.3)
            await tx.rollback()
            await locker.close()
            done = await asyncio.gather(*tasks.values(), return_exceptions=True)
            results = dict(zip(tasks, done, strict=True))
            await asyncio.sleep(0.2)  # a backend cut off may still be finishing
            records = await store.records(sid)
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            return results, [r.message.text() for r in records if r.message]


@pytest.mark.postgres_only
async def test_a_combined_append_whose_outcome_is_unknown_is_not_retried_blindly(
    pg_url: str,
) -> None:
    # One statement in autocommit, sent: every call learns the outcome is unknown, and
    # the batch is stored whole or not at all.
    calls = {k: {"role": "user", "content": k} for k in "abc"}
    results, stored = await _combined_batch_cut(pg_url, calls)
    for key, result in results.items():
        assert isinstance(result, DatabaseUnavailableError), (key, result)
        assert result.outcome_unknown and not result.retryable
    assert [t for t in stored if t != "lead"] in ([], ["a", "b", "c"])


@pytest.mark.postgres_only
async def test_a_combined_append_in_a_transaction_cut_before_commit_is_run_again(
    pg_url: str,
) -> None:
    # Calls with uuids go in a transaction: cut before its COMMIT, nothing was written,
    # and the whole batch runs again; each call gets its own records, stored once.
    calls = {
        "a": {"role": "user", "content": "a", "uuid": str(uuid.uuid4())},
        "b": {"role": "user", "content": "b"},
        "c": {"role": "user", "content": "c", "uuid": str(uuid.uuid4())},
    }
    results, stored = await _combined_batch_cut(pg_url, calls)
    for key, result in results.items():
        assert not isinstance(result, BaseException), (key, result)
        (record,) = result
        assert record.message is not None and record.message.text() == key
        assert stored.count(key) == 1
    assert [t for t in stored if t != "lead"] == ["a", "b", "c"]
