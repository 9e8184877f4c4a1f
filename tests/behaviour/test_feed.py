"""The change feed (``store.watch``, ``store.watch_all``): records committed by another
store arrive in seq order, each once; ``from_seq`` replays; a killed LISTEN connection
loses nothing; a cancelled watch leaves no task or connection behind; PgBouncer falls
back to polling. Several OS processes: tests/ops/test_feed_processes.py.

No timing is asserted: every wait is generous and what is checked is what arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest
from helpers.messages import MISSING_ID, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    InvalidInputError,
    Record,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
)
from sessiondb import feed as feed_module
from sessiondb.feed import Feed

T = TypeVar("T")
WAIT_S = 60.0


async def take(items: AsyncIterator[T], n: int) -> list[T]:
    """The next ``n`` items (fails the test after WAIT_S seconds)."""

    async def collect() -> list[T]:
        got: list[T] = []
        async for item in items:
            got.append(item)
            if len(got) == n:
                break
        return got

    return await asyncio.wait_for(collect(), WAIT_S)


def texts(records: list[Record]) -> list[str]:
    return [str(r.message.content[0].text) for r in records if r.message is not None]  # type: ignore[union-attr]


async def feed_mode(store: SessionStore) -> str | None:
    """The running feed's mode, once it has decided."""
    for _ in range(int(WAIT_S * 20)):
        feed = store.core.feed
        if isinstance(feed, Feed) and feed.mode is not None:
            return feed.mode
        await asyncio.sleep(0.05)
    return None


async def test_a_watch_gets_another_stores_appends_in_order_once(
    store: SessionStore, db_url: str
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, user("before the watch"))
    watch = store.watch(sid)
    async with SessionStore.open(db_url) as writer:
        first = asyncio.ensure_future(take(watch, 1))
        # The watch reads the head, then starts the feed: appends after this are new.
        assert await feed_mode(store) in ("listen", "poll")
        await writer.append(sid, [user("one"), user("two")])
        got = await first
        await writer.append(sid, user("three"))
        await writer.append(sid, user("four"))
        got += await take(watch, 3)
    await watch.aclose()
    assert [r.seq for r in got] == [2, 3, 4, 5]
    assert texts(got) == ["one", "two", "three", "four"]
    assert [r.seq for r in got] == [r.seq for r in await store.records(sid, from_seq=2)]


async def test_from_seq_replays_what_is_stored_after_it(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [user(f"m{i}") for i in range(1, 6)])
    watch = store.watch(sid, from_seq=2)
    got = await take(watch, 3)
    assert [r.seq for r in got] == [3, 4, 5]
    await store.append(sid, user("m6"))
    got += await take(watch, 1)
    await watch.aclose()
    assert texts(got) == ["m3", "m4", "m5", "m6"]
    # from_seq=0: everything, overlays too (a tombstone is a record)
    await store.tombstone(sid, 1)
    everything = await take(store.watch(sid, from_seq=0), 7)
    assert [r.seq for r in everything] == list(range(1, 8))
    assert everything[-1].kind == "tombstone"


async def test_a_watch_catches_up_past_one_page(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [user(f"m{i}") for i in range(1, 1201)])
    got = await take(store.watch(sid, from_seq=0), 1200)
    assert [r.seq for r in got] == list(range(1, 1201))


async def test_watch_all_reports_sessions_that_move(store: SessionStore, db_url: str) -> None:
    a = (await store.create_session()).id
    b = (await store.create_session()).id
    await store.append(a, user("old activity is not reported"))
    events = store.watch_all()
    first = asyncio.ensure_future(take(events, 1))
    assert await feed_mode(store) in ("listen", "poll")
    await asyncio.sleep(0.2)  # watch_all has learned the heads
    async with SessionStore.open(db_url) as writer:
        await writer.append(b, user("b1"))
        assert await first == [(b, 1)]
        await writer.append(a, user("a2"))
        assert await take(events, 1) == [(a, 2)]
    await events.aclose()


async def test_watch_refuses_what_is_not_there(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await take(store.watch(MISSING_ID), 1)
    sid = (await store.create_session()).id
    for bad in (-1, "1", True, 1.5):
        with pytest.raises(InvalidInputError, match="from_seq"):
            await take(store.watch(sid, from_seq=bad), 1)  # type: ignore[arg-type]


async def test_a_watch_of_a_deleted_session_ends(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "RESCAN", 0.2)  # how soon a quiet watch looks again
    sid = (await store.create_session()).id
    await store.append(sid, user("m1"))
    watch = store.watch(sid, from_seq=0)
    assert [r.seq for r in await take(watch, 1)] == [1]
    await store.delete_session(sid)
    with pytest.raises(SessionNotFoundError):
        await take(watch, 1)


async def test_cancelling_watches_stops_the_feed_and_its_connection(
    store: SessionStore, backend: str
) -> None:
    sid = (await store.create_session()).id
    tasks = [asyncio.ensure_future(take(store.watch(sid), 1)) for _ in range(3)]
    watch_all = asyncio.ensure_future(take(store.watch_all(), 1))
    assert await feed_mode(store) in ("listen", "poll")
    if backend == "postgres":
        assert await feed_connections(store) == 1  # one LISTEN connection for all four
    for task in [*tasks, watch_all]:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    feed = store.core.feed
    assert isinstance(feed, Feed)
    assert feed.mode is None
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "sessiondb-feed"]
    if backend == "postgres":
        assert await feed_connections(store, expect=0) == 0


async def feed_connections(store: SessionStore, expect: int | None = None) -> int:
    """The store's LISTEN connections in pg_stat_activity (waits for ``expect``: a
    closed connection leaves the view a moment later)."""
    count = -1
    for _ in range(100):
        rows = await store.core.backend.fetch(_feed_backends())
        count = len(rows)
        if expect is None or count == expect:
            break
        await asyncio.sleep(0.05)
    return count


def _feed_backends() -> Any:
    from sqlalchemy import text

    return (
        text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'sessiondb-feed'"
        ),
        {},
    )


def _terminate(pid: int) -> Any:
    from sqlalchemy import bindparam, text

    return text("SELECT pg_terminate_backend(:pid)").bindparams(bindparam("pid")), {"pid": pid}


async def test_a_watch_survives_its_listen_connection_killed(pg_url: str) -> None:
    async with SessionStore.open(pg_url) as store, SessionStore.open(pg_url) as writer:
        sid = (await store.create_session()).id
        watch = store.watch(sid)
        first = asyncio.ensure_future(take(watch, 1))
        assert await feed_mode(store) == "listen"
        await writer.append(sid, user("m1"))
        got = await first
        for round_ in range(3):
            (pid,) = [r[0] for r in await writer.core.backend.fetch(_feed_backends())]
            killed = await writer.core.backend.fetch(_terminate(pid))
            assert killed[0][0] is True
            # Committed while nobody listens: found by the re-read after the reconnect.
            await writer.append(sid, [user(f"r{round_}a"), user(f"r{round_}b")])
            got += await take(watch, 2)
            assert await feed_connections(store, expect=1) == 1
        await writer.append(sid, user("last"))
        got += await take(watch, 1)
        await watch.aclose()
    assert [r.seq for r in got] == list(range(1, 9))
    assert texts(got) == ["m1", "r0a", "r0b", "r1a", "r1b", "r2a", "r2b", "last"]


async def test_behind_pgbouncer_the_feed_polls(pgbouncer: str) -> None:
    async with SessionStore.open(pgbouncer) as store, SessionStore.open(pgbouncer) as writer:
        await store.migrate()
        sid = (await store.create_session()).id
        watch = store.watch(sid)
        first = asyncio.ensure_future(take(watch, 2))
        assert await feed_mode(store) == "poll"  # the probe never came back
        await writer.append(sid, [user("a"), user("b")])
        got = await first
        await watch.aclose()
    assert texts(got) == ["a", "b"]
    # Told so: polls from the start, with no probe.
    async with (
        SessionStore.open(pgbouncer, feed="poll") as store,
        SessionStore.open(pgbouncer) as writer,
    ):
        watch = store.watch(sid, from_seq=2)
        first = asyncio.ensure_future(take(watch, 1))
        assert await feed_mode(store) == "poll"
        await writer.append(sid, user("c"))
        assert texts(await first) == ["c"]
        await watch.aclose()


async def test_feed_option_is_checked(db_url: str) -> None:
    with pytest.raises(SessionDBError, match="feed must be one of"):
        async with SessionStore.open(db_url, feed="push"):
            pass


async def test_a_turn_waiter_listens_while_it_waits(pg_url: str) -> None:
    async with SessionStore.open(pg_url) as a, SessionStore.open(pg_url) as b:
        sid = (await a.create_session()).id
        async with a.turn(sid, holder="a"):
            waiting = asyncio.ensure_future(_take_turn(b, sid))
            assert await feed_mode(b) == "listen"
        assert await asyncio.wait_for(waiting, WAIT_S) == "b"
        feed = b.core.feed
        assert isinstance(feed, Feed) and feed.mode == "listen"  # lingers for the next wait
        assert await feed_connections(b) == 1
    async with SessionStore.open(pg_url) as c:
        assert await feed_connections(c, expect=0) == 0  # closed with its store


async def _take_turn(store: SessionStore, sid: str) -> str:
    async with store.turn(sid, holder="b", timeout=WAIT_S) as turn:
        await turn.append(user("b's turn"))
        return turn.holder


_FUZZ = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.booleans(),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=2),
)


def test_watch_arguments_fuzzed_raise_only_sessiondb_errors(db_url: str) -> None:
    async def setup() -> str:
        async with SessionStore.open(db_url) as store:
            sid = (await store.create_session()).id
            await store.append(sid, user("only"))
            return sid

    sid = asyncio.run(setup())

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        session_id=st.one_of(st.just(sid), st.just(MISSING_ID), _FUZZ),
        from_seq=_FUZZ,
    )
    def check(session_id: Any, from_seq: Any) -> None:
        async def attempt() -> None:
            async with SessionStore.open(db_url) as store:
                watch = store.watch(session_id, from_seq=from_seq)
                try:
                    got = await asyncio.wait_for(take(watch, 1), 0.5)
                except TimeoutError:
                    return  # a valid watch with nothing new: waits, as it should
                except SessionDBError:
                    return
                finally:
                    await watch.aclose()
                # Only a watch of the session from 0 has anything to deliver.
                assert session_id == sid and type(from_seq) is int and from_seq == 0
                assert got[0].seq == 1

        asyncio.run(attempt())

    check()


async def test_a_namespace_sees_only_its_own_activity(db_url: str) -> None:
    async with (
        SessionStore.open(db_url, namespace="tenant-a") as a,
        SessionStore.open(db_url, namespace="tenant-b") as b,
    ):
        mine = (await a.create_session()).id
        theirs = (await b.create_session()).id
        events = a.watch_all()
        first = asyncio.ensure_future(take(events, 1))
        assert await feed_mode(a) in ("listen", "poll")
        await asyncio.sleep(0.2)
        await b.append(theirs, user("not for tenant-a"))
        await asyncio.sleep(0.3)
        await a.append(mine, user("for tenant-a"))
        assert await first == [(mine, 1)]
        await events.aclose()
        with pytest.raises(SessionNotFoundError):
            await take(a.watch(theirs), 1)


async def test_an_in_memory_store_watches_itself() -> None:
    async with SessionStore.open(":memory:") as store:
        await store.migrate()
        sid = (await store.create_session()).id
        watch = store.watch(sid)
        first = asyncio.ensure_future(take(watch, 2))
        assert await feed_mode(store) == "poll"
        await store.append(sid, [user("x"), user("y")])
        assert texts(await first) == ["x", "y"]
        await watch.aclose()
