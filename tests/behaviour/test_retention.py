"""Retention (``store.expire`` and ``sessiondb expire``, once named ``prune``): idle
sessions go whole, a fork's lineage stays, a dry run writes nothing, the namespace is
honoured, work goes in batches.

Not the prune overlay (``append_prune``, ``tests/behaviour/test_prune.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import sql
from helpers.messages import user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    InvalidInputError,
    RetentionReport,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
)
from sessiondb.cli import main
from sessiondb.retention import parse_age
from sessiondb.tables import RECORDS, SESSIONS

MONTH = timedelta(days=30)


async def backdate(store: SessionStore, session_id: str, days: float) -> None:
    """Make the session look idle for ``days`` (its last message and its creation)."""
    at = datetime.now(UTC) - timedelta(days=days)
    await sql.execute(
        store,
        f"UPDATE {SESSIONS} SET last_message_at = :at, created_at = :at WHERE id = :sid",
        at=at,
        sid=session_id,
    )


async def session(store: SessionStore, *texts: str, days: float | None = None) -> str:
    sid = (await store.create_session()).id
    if texts:
        await store.append(sid, [user(t) for t in texts])
    if days is not None:
        await backdate(store, sid, days)
    return sid


async def counts(store: SessionStore) -> tuple[int, int]:
    return (
        int(await sql.scalar(store, f"SELECT count(*) FROM {SESSIONS}")),
        int(await sql.scalar(store, f"SELECT count(*) FROM {RECORDS}")),
    )


async def exists(store: SessionStore, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except SessionNotFoundError:
        return False
    return True


async def test_idle_sessions_go_whole_and_recent_ones_stay(store: SessionStore) -> None:
    old = await session(store, "a", "b", days=40)
    empty_old = await session(store, days=40)  # no messages: judged by its creation
    recent = await session(store, "c")
    empty_recent = await session(store)
    report = await store.expire(MONTH)
    assert isinstance(report, RetentionReport)
    assert sorted(report.deleted) == sorted([old, empty_old])
    assert report.deleted_count == 2 and report.kept_count == 0
    assert not report.dry_run and report.namespace == "default"
    assert not await exists(store, old) and not await exists(store, empty_old)
    assert await exists(store, recent) and await exists(store, empty_recent)
    assert await counts(store) == (2, 1)  # the old session's records went with it
    # Nothing idle is left: a second run deletes nothing.
    assert (await store.expire(MONTH)).deleted == []


async def test_prune_is_the_deprecated_old_name_of_expire(store: SessionStore) -> None:
    old = await session(store, "a", days=40)
    with pytest.warns(DeprecationWarning, match="SessionStore.expire") as warned:
        report = await store.prune(MONTH, dry_run=True)
    assert warned[0].filename == __file__  # the caller's line, not a wrapper's
    assert report.deleted == [old] and report.dry_run
    with pytest.warns(DeprecationWarning):
        assert (await store.prune(older_than=MONTH)).deleted == [old]
    assert not await exists(store, old)


async def test_an_old_parent_of_an_active_fork_stays_readable(store: SessionStore) -> None:
    root = await session(store, "r1", "r2")
    middle = (await store.fork(root)).id
    await store.append(middle, user("m3"))
    leaf = (await store.fork(middle)).id
    await store.append(leaf, user("l4"))
    for sid in (root, middle):
        await backdate(store, sid, 90)
    # An idle fork of the root that has nothing below it goes.
    idle_fork = (await store.fork(root, at_seq=1)).id
    await backdate(store, idle_fork, 60)

    report = await store.expire(MONTH)
    assert report.deleted == [idle_fork]
    assert sorted(report.kept_for_forks) == sorted([root, middle])
    assert [m.text() for m in await store.context(leaf)] == ["r1", "r2", "m3", "l4"]

    # Once the leaf is idle too, the whole lineage goes, each fork before its parent.
    await backdate(store, leaf, 45)
    report = await store.expire(MONTH)
    assert set(report.deleted) == {root, middle, leaf}
    assert report.deleted.index(leaf) < report.deleted.index(middle) < report.deleted.index(root)
    assert await counts(store) == (0, 0)


async def test_a_dry_run_writes_nothing_and_says_what_would_go(store: SessionStore) -> None:
    old = [await session(store, f"o{i}", days=31 + i) for i in range(3)]
    parent = await session(store, "p", days=50)
    child = (await store.fork(parent)).id
    await store.append(child, user("c"))
    await session(store, "new")
    before = await counts(store)
    dry = await store.expire(MONTH, dry_run=True)
    assert dry.dry_run
    assert await counts(store) == before
    assert sorted(dry.deleted) == sorted(old)
    assert dry.kept_for_forks == [parent]
    real = await store.expire(MONTH)
    assert sorted(real.deleted) == sorted(dry.deleted)
    assert real.kept_for_forks == dry.kept_for_forks


async def test_the_namespace_is_honoured(db_url: str) -> None:
    async with (
        SessionStore.open(db_url) as home,
        SessionStore.open(db_url, namespace="other") as other,
    ):
        mine = await session(home, "m", days=40)
        theirs = await session(other, "t", days=40)
        report = await home.expire(MONTH)
        assert report.deleted == [mine]
        assert await exists(other, theirs)
        # Another namespace is expired by a store of that namespace (the operator's).
        report = await other.expire(MONTH)
        assert report.deleted == [theirs] and report.namespace == "other"
        assert not await exists(other, theirs)


async def test_a_store_cannot_list_or_delete_another_namespaces_sessions(db_url: str) -> None:
    """The hostile case: beta's store, given alpha's name, a dry run and every other
    argument, lists none of alpha's sessions and deletes none; alpha's own store and the
    operator's CLI run on alpha do."""
    async with (
        SessionStore.open(db_url, namespace="alpha") as alpha,
        SessionStore.open(db_url, namespace="beta") as beta,
    ):
        theirs = [await session(alpha, f"a{i}", days=40) for i in range(3)]
        mine = await session(beta, "b", days=40)
        for namespace in ("alpha", "ALPHA", "alpha ", "default", "x" * 255):
            for dry_run in (True, False):
                with pytest.raises(InvalidInputError, match="only its own namespace"):
                    await beta.expire(MONTH, dry_run=dry_run, namespace=namespace)
                with pytest.warns(DeprecationWarning), pytest.raises(InvalidInputError):
                    await beta.prune(MONTH, dry_run=dry_run, namespace=namespace)
        assert all([await exists(alpha, sid) for sid in theirs])
        # Its own name is its own namespace: only beta's session.
        dry = await beta.expire(MONTH, dry_run=True, namespace="beta")
        assert dry.deleted == [mine] and dry.namespace == "beta"
        assert (await beta.expire(MONTH, namespace=None)).deleted == [mine]
        assert all([await exists(alpha, sid) for sid in theirs])

    # The operator's path: the CLI with a store opened on alpha.
    code, out = await asyncio.to_thread(
        cli, "--db", db_url, "--namespace", "alpha", "expire", "--older-than", "30d", "--json"
    )
    assert code == 0, out
    data = json.loads(out)
    assert sorted(data["deleted"]) == sorted(theirs) and data["namespace"] == "alpha"
    async with SessionStore.open(db_url, namespace="alpha") as alpha:
        assert not any([await exists(alpha, sid) for sid in theirs])


async def test_work_goes_in_batches(store: SessionStore) -> None:
    ids = [await session(store, f"s{i}", days=40 + i) for i in range(7)]
    keep = await session(store, "recent")
    dry = await store.expire(MONTH, dry_run=True, batch_size=2)
    assert dry.batches == 4
    report = await store.expire(MONTH, batch_size=2)
    assert report.batches == 4
    assert sorted(report.deleted) == sorted(ids)
    assert await counts(store) == (1, 1)
    assert await exists(store, keep)


async def test_a_fork_tree_larger_than_a_batch_goes_whole(store: SessionStore) -> None:
    root = await session(store, "r")
    forks = [(await store.fork(root)).id for _ in range(5)]
    for sid in [root, *forks]:
        await backdate(store, sid, 40)
    report = await store.expire(MONTH, batch_size=1)
    # The root is the oldest: its batch takes its forks with it, before it.
    assert set(report.deleted[:-1]) == set(forks) and report.deleted[-1] == root
    assert await counts(store) == (0, 0)


async def test_a_session_whose_turn_is_held_stays(store: SessionStore) -> None:
    busy = await session(store, "b", days=40)
    async with store.turn(busy, holder="worker"):
        report = await store.expire(MONTH)
        assert report.deleted == [] and report.kept_busy == [busy]
    assert (await store.expire(MONTH)).deleted == [busy]


async def test_bad_arguments_are_refused(store: SessionStore) -> None:
    sid = await session(store, "x", days=40)
    for args, kwargs in (
        ((30,), {}),
        (("30d",), {}),
        ((timedelta(0),), {}),
        ((-MONTH,), {}),
        ((timedelta.max,), {}),
        ((MONTH,), {"dry_run": "yes"}),
        ((MONTH,), {"namespace": ""}),
        ((MONTH,), {"namespace": 5}),
        ((MONTH,), {"batch_size": 0}),
        ((MONTH,), {"batch_size": True}),
    ):
        with pytest.raises(InvalidInputError):
            await store.expire(*args, **kwargs)
    assert await exists(store, sid)


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        (" 1.5D ", timedelta(days=1.5)),
    ],
)
def test_ages_parse(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-1d", "0d", "1d 2h", "9" * 400 + "w", 30])
def test_bad_ages_are_refused(text: Any) -> None:
    with pytest.raises(InvalidInputError):
        parse_age(text)


@given(
    st.one_of(
        st.text(max_size=8),
        st.from_regex(r"\A[0-9]{1,12}(\.[0-9]{1,3})?[smhdwSMHDW]\Z"),
        st.none(),
        st.integers(),
    )
)
def test_fuzzed_ages_parse_or_raise_invalid_input(text: Any) -> None:
    with contextlib.suppress(InvalidInputError):
        assert parse_age(text) > timedelta(0)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_prune_arguments_fuzzed_raise_only_sessiondb_errors(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    store = run(SessionStore.connect(db_url))
    hostile = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True),
        st.text(max_size=5),
        st.sampled_from(["\ud800", "\x00", "30d"]),
        st.lists(st.integers(), max_size=2),
    )
    try:
        run(session(store, "recent"))

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            older_than=st.one_of(st.timedeltas(), hostile),
            kwargs=st.fixed_dictionaries(
                {},
                optional={
                    "dry_run": st.one_of(st.booleans(), hostile),
                    "namespace": st.one_of(st.sampled_from(["default", "x"]), hostile),
                    "batch_size": st.one_of(st.integers(-2, 20_000), hostile),
                },
            ),
        )
        def check(older_than: Any, kwargs: dict[str, Any]) -> None:
            try:
                report = run(store.expire(older_than, **kwargs))
            except SessionDBError:
                return
            assert report.deleted_count >= 0

        check()
    finally:
        run(store.close())
        loop.close()


# -- the CLI ------------------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


async def test_cli_expire_and_its_old_name_prune(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        old = await session(store, "o", days=40)
        parent = await session(store, "p", days=40)
        child = (await store.fork(parent)).id
        await store.append(child, user("c"))

    code, out = await asyncio.to_thread(
        cli, "--db", db_url, "prune", "--older-than", "30d", "--dry-run"
    )
    assert code == 0, out
    assert f"would delete {old}" in out
    assert f"kept {parent} (a fork of it is active)" in out
    async with SessionStore.open(db_url) as store:
        assert await exists(store, old)

    code, out = await asyncio.to_thread(
        cli, "expire", "--older-than", "720h", "--json", "--db", db_url
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["deleted"] == [old] and data["keptForForks"] == [parent]
    assert data["dryRun"] is False and data["namespace"] == "default"
    async with SessionStore.open(db_url) as store:
        assert not await exists(store, old)
        assert await exists(store, parent)


async def test_cli_prune_refuses_a_bad_age(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = await asyncio.to_thread(cli, "--db", db_url, "expire", "--older-than", "30x")
    assert code == 1
    assert "30x" in capsys.readouterr().err


async def test_cli_sessions_list_shows_who_is_working(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        busy = await session(store, "b")
        idle = await session(store, "i")
        async with store.turn(busy, holder="worker-7"):
            code, out = await asyncio.to_thread(cli, "--db", db_url, "sessions", "list")
            assert code == 0
            lines = {line.split()[0]: line for line in out.splitlines()}
            assert "TURN" in lines["ID"]
            assert "worker-7 since" in lines[busy]
            assert "worker-7" not in lines[idle]
            code, out = await asyncio.to_thread(cli, "--db", db_url, "sessions", "list", "--json")
            items = {i["id"]: i for i in json.loads(out)["items"]}
            assert items[busy]["turn"]["holder"] == "worker-7"
            assert items[idle]["turn"] is None
