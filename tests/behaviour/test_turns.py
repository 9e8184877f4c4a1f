"""Turns (``store.turn``): one holder at a time per session, across stores and OS
processes; queued in arrival order; a timeout names the holder; a dead holder frees the
session within its lease; a holder that lost its lease can never write again.

Timing is never asserted: under load every wait here is generous, and what is checked
is the order of events and the stored rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
from typing import Any

import pytest
from helpers import sql
from helpers.messages import assistant, user
from helpers.processes import SPAWN, run_processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    InvalidInputError,
    InvalidSessionIdError,
    LeaseLostError,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
    Turn,
    TurnTimeoutError,
)
from sessiondb.tables import TURNS

TIMEOUT_S = 240
TURN = re.compile(r"^p(\d+) t(\d+) (q|a)$")


async def turn_rows(store: SessionStore) -> list[Any]:
    return await sql.fetch(
        store, f"SELECT session_id, ticket, holder, acquired_at FROM {TURNS} ORDER BY ticket"
    )


async def texts(store: SessionStore, session_id: str) -> list[str]:
    out = []
    for r in await store.records(session_id):
        assert r.message is not None
        out.append(r.message.text())
    return out


async def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    """Poll an async predicate until it holds (a generous bound, not a timing claim)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await predicate():
        assert loop.time() < end, f"gave up waiting for {what}"
        await asyncio.sleep(0.02)


# -- one process ---------------------------------------------------------------------------


async def test_a_turn_shows_who_is_working_and_releases(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    other = (await store.create_session()).id
    assert (await store.get_session(sid)).turn is None
    async with store.turn(sid, holder="alice") as turn:
        assert isinstance(turn, Turn)
        info = await store.get_session(sid)
        assert info.turn is not None
        assert info.turn.holder == "alice"
        assert info.turn.acquired_at <= info.turn.expires_at
        listed = {s.id: s.turn for s in (await store.list_sessions()).items}
        assert listed[sid] is not None and listed[sid].holder == "alice"
        assert listed[other] is None
        dumped = info.model_dump(mode="json", by_alias=True)
        assert dumped["turn"]["holder"] == "alice" and "acquiredAt" in dumped["turn"]
        recs = await turn.append([user("q"), assistant("a")])
        assert [r.seq for r in recs] == [1, 2]
    assert (await store.get_session(sid)).turn is None
    assert await turn_rows(store) == []
    assert await texts(store, sid) == ["q", "a"]
    # Plain appends need no turn, turn or not.
    await store.append(sid, user("plain"))
    assert (await store.get_session(sid)).last_seq == 3


async def test_default_holder_is_host_and_pid(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid):
        info = await store.get_session(sid)
        assert info.turn is not None and info.turn.holder.endswith(f":{os.getpid()}")


async def test_a_turn_that_waits_past_its_timeout_names_the_holder(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid, holder="alice"):
        with pytest.raises(TurnTimeoutError, match="alice") as caught:
            async with store.turn(sid, timeout=0.2, holder="bob"):
                pytest.fail("bob got the turn while alice held it")
        assert caught.value.holder == "alice"
        assert caught.value.session_id == sid
        assert caught.value.since is not None
        assert isinstance(caught.value, SessionDBError)
        # Bob's place in the queue is gone with him.
        assert [r.holder for r in await turn_rows(store)] == ["alice"]
        # timeout=0: one look, no wait.
        with pytest.raises(TurnTimeoutError):
            async with store.turn(sid, timeout=0, holder="carol"):
                pass
    async with store.turn(sid, timeout=0, holder="dave"):
        pass


async def test_waiters_are_served_in_arrival_order(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    order: list[str] = []

    async def take(name: str) -> None:
        async with store.turn(sid, holder=name, timeout=120) as turn:
            order.append(name)
            await turn.append(user(name))

    async def queued(n: int) -> bool:
        return len(await turn_rows(store)) == n

    first = store.turn(sid, holder="first")
    held = await first.__aenter__()
    tasks = []
    for n, name in enumerate(["second", "third", "fourth"], start=2):
        tasks.append(asyncio.create_task(take(name)))
        await wait_for(lambda n=n: queued(n), f"{name} to queue")  # type: ignore[misc]
    await held.append(user("first"))
    await first.__aexit__(None, None, None)
    await asyncio.gather(*tasks)
    assert order == ["second", "third", "fourth"]
    assert await texts(store, sid) == ["first", "second", "third", "fourth"]


async def test_turns_of_two_stores_on_one_database_exclude_each_other(db_url: str) -> None:
    # Two stores: no in-process wake-up between them, only the database.
    async with SessionStore.open(db_url) as a, SessionStore.open(db_url) as b:
        sid = (await a.create_session()).id
        inside = 0
        overlaps = 0

        async def worker(store: SessionStore, name: str) -> None:
            nonlocal inside, overlaps
            for i in range(5):
                async with store.turn(sid, holder=name, timeout=120) as turn:
                    inside += 1
                    overlaps += inside > 1
                    await turn.append(user(f"{name} {i} q"))
                    await asyncio.sleep(random.uniform(0, 0.02))
                    await turn.append(assistant(f"{name} {i} a"))
                    inside -= 1

        await asyncio.gather(worker(a, "a"), worker(b, "b"))
        assert overlaps == 0
        got = await texts(a, sid)
        assert len(got) == 20
        for q, a_ in zip(got[::2], got[1::2], strict=True):
            assert q.removesuffix(" q") == a_.removesuffix(" a")


async def test_a_release_from_a_store_of_another_namespace_releases_nothing(
    db_url: str,
) -> None:
    """The holder's token is not enough: a release is scoped by namespace like every other
    statement, so one through another namespace's store finds no row. A release returns
    nothing either way (it is idempotent and drops what it cannot do)."""
    async with (
        SessionStore.open(db_url, namespace="tenant-a") as a,
        SessionStore.open(db_url, namespace="tenant-b") as b,
    ):
        sid = (await a.create_session()).id
        async with a.turn(sid, holder="alice") as held:
            forged = Turn(
                b,
                sid,
                ticket=held.ticket,
                token=held.token,
                holder="mallory",
                lease=held.lease,
                acquired_at=held.acquired_at,
                expires_at=held.expires_at,
            )
            assert await forged.release() is None
            rows = await turn_rows(a)
            assert [(r.session_id, r.ticket, r.holder) for r in rows] == [
                (sid, held.ticket, "alice")
            ]
            info = await a.get_session(sid)
            assert info.turn is not None and info.turn.holder == "alice"
            # Still held: its fenced append writes, and another caller cannot get in.
            await held.append(user("still mine"))
            with pytest.raises(TurnTimeoutError, match="alice"):
                async with a.turn(sid, timeout=0, holder="bob"):
                    pass
        assert await turn_rows(a) == []
        assert await texts(a, sid) == ["still mine"]


async def test_turn_on_a_missing_session_or_bad_arguments(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        async with store.turn("01J9Z3K7Q8R2V5X4W6Y0A1B2C3"):
            pass
    with pytest.raises(InvalidSessionIdError):
        store.turn("nope")
    sid = (await store.create_session()).id
    for kwargs in (
        {"timeout": -1},
        {"timeout": float("nan")},
        {"timeout": "1"},
        {"lease": 0},
        {"lease": 10**9},
        {"lease": True},
        {"holder": ""},
        {"holder": "x" * 300},
        {"holder": "a\x00b"},
        {"holder": 5},
    ):
        with pytest.raises(InvalidInputError):
            store.turn(sid, **kwargs)  # type: ignore[arg-type]
    assert await turn_rows(store) == []


async def test_the_lease_renews_itself_while_the_holder_lives(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid, holder="alice", lease=1.0) as turn:
        first_expiry = turn.expires_at
        await asyncio.sleep(3.5)  # several leases: only renewal keeps it
        with pytest.raises(TurnTimeoutError, match="alice"):
            async with store.turn(sid, timeout=0.1, holder="bob"):
                pass
        assert turn.expires_at > first_expiry
        (rec,) = await turn.append(user("still mine"))
        assert rec.seq == 1
        assert not turn.lost


async def test_a_lease_lost_in_a_long_pause_refuses_the_stale_append(
    store: SessionStore,
) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid, holder="paused", lease=0.5) as stale:
        await stale.append(user("before the pause"))
        # The process stops renewing (a GC pause, a frozen VM): the lease runs out and
        # someone else takes the session.
        await stale._stop_renewing()
        async with store.turn(sid, holder="next", timeout=120) as fresh:
            await fresh.append(user("next q"))
            with pytest.raises(LeaseLostError, match="paused"):
                await stale.append(user("stale, mid-turn of next"))
            assert stale.lost
            await fresh.append(assistant("next a"))
            info = await store.get_session(sid)
            assert info.turn is not None and info.turn.holder == "next"
        with pytest.raises(LeaseLostError):
            await stale.append(user("stale, after next"))
        with pytest.raises(LeaseLostError):
            await stale.renew()
    assert await texts(store, sid) == ["before the pause", "next q", "next a"]


async def test_a_released_turn_cannot_write(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid) as turn:
        pass
    with pytest.raises(LeaseLostError, match="released"):
        await turn.append(user("late"))
    assert await texts(store, sid) == []


async def test_a_turn_append_keeps_appends_semantics(store: SessionStore) -> None:
    from sessiondb import SeqConflictError

    sid = (await store.create_session()).id
    async with store.turn(sid) as turn:
        (a,) = await turn.append({"role": "user", "content": "x", "uuid": "u-1"})
        (again,) = await turn.append({"role": "user", "content": "x", "uuid": "u-1"})
        assert again.seq == a.seq == 1
        with pytest.raises(SeqConflictError):
            await turn.append(user("y"), expected_seq=0)
        with pytest.raises(InvalidInputError):
            await turn.append("not a message")  # type: ignore[arg-type]
        assert await turn.append([]) == []
    assert await texts(store, sid) == ["x"]


async def test_deleting_the_session_ends_its_turn(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid) as turn:
        await store.delete_session(sid)
        with pytest.raises(LeaseLostError):
            await turn.append(user("gone"))
    assert await turn_rows(store) == []


async def test_cancelling_a_waiter_leaves_no_row(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with store.turn(sid, holder="alice"):

        async def waiter() -> None:
            async with store.turn(sid, holder="bob"):
                pytest.fail("bob got the turn")

        task = asyncio.create_task(waiter())

        async def queued() -> bool:
            return len(await turn_rows(store)) == 2

        await wait_for(queued, "bob to queue")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [r.holder for r in await turn_rows(store)] == ["alice"]


async def test_a_waiter_whose_cancel_was_held_back_still_ends(store: SessionStore) -> None:
    # On SQLite a cancel that lands while a poll's COMMIT runs is held back until the
    # commit ends and then not raised (a commit that happened is returned); the waiter
    # must still end, not wait for ever. Modelled here deterministically: the task is
    # asked to cancel and swallows the CancelledError, as that commit does, before it
    # waits for a turn someone else holds.
    sid = (await store.create_session()).id
    async with store.turn(sid, holder="alice"):

        async def waiter() -> None:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(1)  # the cancel lands here and is swallowed
            async with store.turn(sid, holder="bob"):
                pytest.fail("bob got the turn")

        task = asyncio.create_task(waiter())
        done, _ = await asyncio.wait([task], timeout=20)
        if not done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert done, "the waiter went on waiting after its cancel"
        assert task.cancelled()
        assert [r.holder for r in await turn_rows(store)] == ["alice"]


async def test_turns_through_pgbouncer_pin_no_server_connection(
    pgbouncer: str,
) -> None:
    # 8 stores, 2 server connections: waiting for a turn, or holding one, keeps none.
    async with SessionStore.open(pgbouncer) as first:
        sid = (await first.create_session()).id

    async def client(c: int) -> None:
        async with SessionStore.open(pgbouncer, pool_max_size=2) as store:
            for t in range(3):
                async with store.turn(sid, holder=f"c{c}", timeout=TIMEOUT_S) as turn:
                    await turn.append(user(f"p{c} t{t} q"))
                    await asyncio.sleep(random.uniform(0, 0.02))
                    await turn.append(assistant(f"p{c} t{t} a"))

    await asyncio.gather(*(client(c) for c in range(8)))
    async with SessionStore.open(pgbouncer) as store:
        got = await texts(store, sid)
        assert len(got) == 48
        for q, a in zip(got[::2], got[1::2], strict=True):
            assert q.removesuffix(" q") == a.removesuffix(" a")


# -- several OS processes -------------------------------------------------------------------


async def _turns_in_process(url: str, session_id: str, proc: int, turns: int) -> None:
    async with SessionStore.open(url) as store:
        for t in range(turns):
            async with store.turn(session_id, holder=f"p{proc}", timeout=TIMEOUT_S) as turn:
                await turn.append(user(f"p{proc} t{t} q"))
                await asyncio.sleep(random.uniform(0, 0.05))
                await turn.append(assistant(f"p{proc} t{t} a"))


def _turn_worker(url: str, session_id: str, proc: int, turns: int, start: Any) -> None:
    start.wait()
    asyncio.run(_turns_in_process(url, session_id, proc, turns))


def _run_processes(target: Any, args_for: Any, count: int) -> None:
    start = SPAWN.Barrier(count)
    run_processes(
        target, lambda p: (*args_for(p), start), count, timeout=TIMEOUT_S, name="sessiondb-turns"
    )


async def test_three_processes_twenty_turns_each_never_interleave(db_url: str) -> None:
    procs, turns = 3, 20
    async with SessionStore.open(db_url) as store:
        sid = (await store.create_session()).id
    await asyncio.to_thread(_run_processes, _turn_worker, lambda p: (db_url, sid, p, turns), procs)
    async with SessionStore.open(db_url) as store:
        recs = await store.records(sid)
        assert [r.seq for r in recs] == list(range(1, 2 * procs * turns + 1))
        parsed = []
        for r in recs:
            assert r.message is not None
            match = TURN.match(r.message.text())
            assert match, r.message.text()
            parsed.append((int(match[1]), int(match[2]), match[3], r.message.role))
        # Whole turns: each question is followed at once by its own answer.
        for (p, t, kind, role), (p2, t2, kind2, role2) in zip(
            parsed[::2], parsed[1::2], strict=True
        ):
            assert (kind, role, kind2, role2) == ("q", "user", "a", "assistant")
            assert (p, t) == (p2, t2)
        # Every turn once, each process's in its own order.
        for p in range(procs):
            assert [t for q, t, k, _ in parsed if q == p and k == "q"] == list(range(turns))
        assert await turn_rows(store) == []
        assert (await store.get_session(sid)).turn is None


def _victim(url: str, session_id: str, lease: float, report: Any) -> None:
    async def hold() -> None:
        async with (
            SessionStore.open(url) as store,
            store.turn(session_id, holder="victim", lease=lease) as turn,
        ):
            await turn.append(user("victim q"))
            report.put((turn.ticket, turn.token))
            await asyncio.sleep(3600)  # killed here, mid-turn

    asyncio.run(hold())


async def test_a_holder_killed_mid_turn_releases_within_its_lease(db_url: str) -> None:
    lease = 3.0
    async with SessionStore.open(db_url) as store:
        sid = (await store.create_session()).id
        report = SPAWN.Queue()
        victim = SPAWN.Process(target=_victim, args=(db_url, sid, lease, report))
        victim.start()
        try:
            ticket, token = await asyncio.to_thread(report.get, True, TIMEOUT_S)
            info = await store.get_session(sid)
            assert info.turn is not None and info.turn.holder == "victim"
            os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
            await asyncio.to_thread(victim.join, 60)
            assert victim.exitcode == -signal.SIGKILL
        finally:
            if victim.is_alive():
                victim.kill()
                victim.join(10)
            report.close()
        # Nobody releases the turn: its lease runs out and the next holder proceeds.
        async with store.turn(sid, holder="next", timeout=TIMEOUT_S) as turn:
            info = await store.get_session(sid)
            assert info.turn is not None and info.turn.holder == "next"
            await turn.append(user("next q"))
            # The killed holder's lease, had it survived (its ticket and token): refused.
            ghost = Turn(
                store,
                sid,
                ticket=ticket,
                token=token,
                holder="victim",
                lease=lease,
                acquired_at=info.turn.acquired_at,
                expires_at=info.turn.expires_at,
            )
            with pytest.raises(LeaseLostError, match="victim"):
                await ghost.append(user("ghost"))
            await turn.append(assistant("next a"))
        with pytest.raises(LeaseLostError):
            await ghost.append(user("ghost after"))
        assert await texts(store, sid) == ["victim q", "next q", "next a"]


def _paused(url: str, session_id: str, events: Any, go: Any) -> None:
    async def hold() -> None:
        async with (
            SessionStore.open(url) as store,
            store.turn(session_id, holder="paused", lease=1.0) as turn,
        ):
            await turn.append(user("paused q"))
            events.put("held")
            await asyncio.to_thread(go.wait, TIMEOUT_S)  # SIGSTOPped in here
            try:
                await turn.append(assistant("paused a, after the pause"))
            except LeaseLostError:
                events.put("refused")
            else:
                events.put("written")

    asyncio.run(hold())


async def test_a_holder_stopped_past_its_lease_cannot_write_when_it_wakes(db_url: str) -> None:
    # A real pause (SIGSTOP: a frozen VM, a stop-the-world GC): the whole process stops,
    # its renewal with it; on waking it carries on as if it still held the turn.
    async with SessionStore.open(db_url) as store:
        sid = (await store.create_session()).id
        events, go = SPAWN.Queue(), SPAWN.Event()
        paused = SPAWN.Process(target=_paused, args=(db_url, sid, events, go))
        paused.start()
        try:
            assert await asyncio.to_thread(events.get, True, TIMEOUT_S) == "held"
            os.kill(paused.pid, signal.SIGSTOP)  # type: ignore[arg-type]
            async with store.turn(sid, holder="next", timeout=TIMEOUT_S) as turn:
                await turn.append(user("next q"))
                os.kill(paused.pid, signal.SIGCONT)  # type: ignore[arg-type]
                go.set()
                assert await asyncio.to_thread(events.get, True, TIMEOUT_S) == "refused"
                await turn.append(assistant("next a"))
            await asyncio.to_thread(paused.join, 60)
            assert paused.exitcode == 0
        finally:
            if paused.is_alive():
                os.kill(paused.pid, signal.SIGCONT)  # type: ignore[arg-type]
                paused.kill()
                paused.join(10)
            events.close()
        assert await texts(store, sid) == ["paused q", "next q", "next a"]
        assert await turn_rows(store) == []


# -- fuzzing the arguments -------------------------------------------------------------------

hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.sampled_from(["\ud800", "\x00", "01J9Z3K7Q8R2V5X4W6Y0A1B2C3", "0.5"]),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
)
seconds = st.one_of(st.floats(min_value=0, max_value=0.05), st.sampled_from([0, 0.01]), hostile)
leases = st.one_of(st.floats(min_value=0.05, max_value=5), st.sampled_from([0.1, 30]), hostile)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_turn_arguments_fuzzed_raise_only_sessiondb_errors(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    store = run(SessionStore.connect(db_url))
    try:
        own = run(store.create_session()).id
        blocked = run(store.create_session()).id
        blocking = store.turn(blocked, holder="blocker")  # kept: its end releases the turn
        run(blocking.__aenter__())

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            target=st.one_of(st.sampled_from(["own", "blocked", "missing"]), hostile),
            kwargs=st.fixed_dictionaries(
                {},
                optional={
                    "timeout": seconds,
                    "lease": leases,
                    "holder": st.one_of(st.text(max_size=5), hostile),
                },
            ),
        )
        def check(target: Any, kwargs: dict[str, Any]) -> None:
            sid = (
                {"own": own, "blocked": blocked, "missing": "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"}.get(
                    target, target
                )
                if isinstance(target, str)
                else target
            )
            timeout = kwargs.get("timeout")
            number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
            waits = timeout is None or (number and timeout > 0.05)
            if sid in (blocked, own) and waits:
                kwargs["timeout"] = 0  # a valid wait on the blocked session would hang

            async def attempt() -> None:
                async with store.turn(sid, **kwargs) as turn:
                    await turn.append(user("fuzz"))

            with contextlib.suppress(SessionDBError):
                run(attempt())
            # Whatever happened, only the blocker's row is left.
            rows = run(turn_rows(store))
            assert [r.holder for r in rows] == ["blocker"], (target, kwargs)

        check()
        run(blocking.__aexit__(None, None, None))
    finally:
        run(store.close())
        loop.close()


async def test_sessions_read_on_a_schema_without_turns_until_migrated(empty_db_url: str) -> None:
    # New code ahead of `migrate` in a rolling upgrade: sessions still list and read.
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0003")
        sid = (await store.create_session()).id
        assert (await store.get_session(sid)).turn is None
        assert [s.id for s in (await store.list_sessions()).items] == [sid]
        await store.migrate()
        async with store.turn(sid, holder="after"):
            info = await store.get_session(sid)
            assert info.turn is not None and info.turn.holder == "after"
