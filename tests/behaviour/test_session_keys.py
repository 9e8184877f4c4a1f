"""Sessions by the caller's own key: ``session_for_key`` finds or creates atomically, keys
compare exactly, namespaces isolate, bad keys are refused before SQL."""

from __future__ import annotations

import asyncio
import unicodedata
from typing import Any

import pytest
from helpers import sql
from helpers.processes import SPAWN, run_processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    ConflictError,
    InvalidInputError,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
)
from sessiondb.validation import MAX_KEY_CHARS

TIMEOUT_S = 120


async def _count_sessions(store: SessionStore) -> int:
    return int(await sql.scalar(store, "SELECT count(*) FROM sessiondb_sessions"))


async def test_finds_or_creates_and_shows_the_key(store: SessionStore) -> None:
    first = await store.session_for_key("user:42/thread:7", name="support", model="m1")
    assert first.key == "user:42/thread:7"
    assert (first.name, first.model, first.message_count, first.last_seq) == ("support", "m1", 0, 0)
    await store.append(first.id, {"role": "user", "content": "hello"})

    again = await store.session_for_key("user:42/thread:7", name="ignored", model="m2")
    assert again.id == first.id
    assert (again.name, again.model, again.message_count) == ("support", "m1", 1)
    assert (await store.get_session(first.id)).key == "user:42/thread:7"

    plain = await store.create_session(name="no key")
    assert plain.key is None
    listed = {s.id: s.key for s in (await store.list_sessions()).items}
    assert listed == {first.id: "user:42/thread:7", plain.id: None}
    assert await _count_sessions(store) == 2


async def test_keys_compare_exactly(store: SessionStore) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    keys = ["A", "a", "k", "k ", " k", "k\t", nfc, nfd, "ß", "SS", "İ", "i̇"]
    ids = [(await store.session_for_key(k)).id for k in keys]
    assert len(set(ids)) == len(keys)
    for key, sid in zip(keys, ids, strict=True):
        found = await store.session_for_key(key, create=False)
        assert (found.id, found.key) == (sid, key)
    assert await _count_sessions(store) == len(keys)


async def test_missing_key_without_create(store: SessionStore) -> None:
    await store.session_for_key("k")
    with pytest.raises(SessionNotFoundError, match="'K'") as caught:
        await store.session_for_key("K", create=False)
    assert caught.value.key == "K" and caught.value.session_id is None
    assert await _count_sessions(store) == 1


async def test_namespaces_isolate_keys(db_url: str) -> None:
    async with (
        SessionStore.open(db_url, namespace="tenant-a") as a,
        SessionStore.open(db_url, namespace="tenant-b") as b,
    ):
        in_a = await a.session_for_key("chat-1")
        with pytest.raises(SessionNotFoundError):
            await b.session_for_key("chat-1", create=False)
        in_b = await b.session_for_key("chat-1")
        assert in_a.id != in_b.id
        assert (in_a.namespace, in_b.namespace) == ("tenant-a", "tenant-b")
        assert (await a.session_for_key("chat-1")).id == in_a.id
        with pytest.raises(SessionNotFoundError):
            await b.get_session(in_a.id)


@pytest.mark.parametrize(
    "key",
    [
        None,
        "",
        5,
        b"k",
        ["k"],
        "a\x00b",
        "lone \ud800",
        "x" * (MAX_KEY_CHARS + 1),
        "😀" * 385,  # 385 characters, 1,540 bytes of UTF-8
    ],
)
async def test_bad_keys_are_refused(store: SessionStore, key: Any) -> None:
    with pytest.raises(InvalidInputError, match="key"):
        await store.session_for_key(key)
    if key is not None:  # create_session(key=None) is a session without a key
        with pytest.raises(InvalidInputError, match="key"):
            await store.create_session(key=key)
    assert await _count_sessions(store) == 0


async def test_longest_keys_fit_the_index_beside_the_longest_namespace(db_url: str) -> None:
    # Four-byte characters everywhere: the index entry is as big as a key can make it.
    async with SessionStore.open(db_url, namespace="🗝" * 255) as store:
        for key in ("x" * MAX_KEY_CHARS, "語" * MAX_KEY_CHARS, "😀" * 384):
            info = await store.session_for_key(key)
            assert (await store.session_for_key(key, create=False)).id == info.id
            assert info.key == key


async def test_arguments_are_checked(store: SessionStore) -> None:
    with pytest.raises(InvalidInputError, match="nmae"):
        await store.session_for_key("k", nmae="typo")
    with pytest.raises(InvalidInputError, match="create"):
        await store.session_for_key("k", create="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="source"):
        await store.session_for_key("k", source="batch")
    with pytest.raises(InvalidInputError, match="name"):
        await store.session_for_key("k", name="\x00")
    assert await _count_sessions(store) == 0
    info = await store.session_for_key("k", source="cron", cron_job_id="job-1", metadata={"a": 1})
    assert (info.source, info.cron_job_id, info.metadata) == ("cron", "job-1", {"a": 1})


async def test_create_session_with_a_taken_key_conflicts(store: SessionStore) -> None:
    made = await store.create_session(key="ticket-7", name="first")
    assert made.key == "ticket-7"
    with pytest.raises(ConflictError, match="ticket-7"):
        await store.create_session(key="ticket-7")
    assert (await store.session_for_key("ticket-7")).id == made.id
    assert await _count_sessions(store) == 1


async def test_forks_have_no_key_and_a_deleted_key_is_free_again(store: SessionStore) -> None:
    parent = await store.session_for_key("conv")
    await store.append(parent.id, {"role": "user", "content": "hi"})
    child = await store.fork(parent.id)
    detached = await store.fork(parent.id, detach=True)
    assert child.key is None and detached.key is None
    assert (await store.session_for_key("conv")).id == parent.id

    await store.delete_session(parent.id, cascade=True)
    with pytest.raises(SessionNotFoundError):
        await store.session_for_key("conv", create=False)
    fresh = await store.session_for_key("conv")
    assert fresh.id != parent.id and fresh.message_count == 0


async def test_import_sessions_takes_keys(store: SessionStore) -> None:
    hello = [{"role": "user", "content": "hi"}]
    ids = await store.import_sessions([{"key": "imp-1", "messages": hello}, {"messages": hello}])
    assert [(await store.get_session(i)).key for i in ids] == ["imp-1", None]
    assert (await store.session_for_key("imp-1")).id == ids[0]

    before = await _count_sessions(store)
    with pytest.raises(InvalidInputError, match="imp-2"):
        await store.import_sessions([{"key": "imp-2"}, {"key": "imp-2"}])
    with pytest.raises(ConflictError, match="key"):
        await store.import_sessions([{"key": "imp-3"}, {"key": "imp-1", "messages": hello}])
    with pytest.raises(InvalidInputError, match="key"):
        await store.import_sessions([{"key": ""}])
    assert await _count_sessions(store) == before
    with pytest.raises(SessionNotFoundError):
        await store.session_for_key("imp-3", create=False)


async def test_concurrent_tasks_on_one_new_key(db_url: str) -> None:
    async with SessionStore.open(db_url) as one, SessionStore.open(db_url) as two:
        got = await asyncio.gather(
            *(s.session_for_key("shared") for _ in range(10) for s in (one, two))
        )
        assert len({info.id for info in got}) == 1
        assert await _count_sessions(one) == 1


# -- several OS processes racing on one new key ---------------------------------------------


def _race(url: str, key: str, start: Any, results: Any) -> None:
    async def run() -> list[str]:
        async with SessionStore.open(url) as store:
            start.wait()
            got = await asyncio.gather(*(store.session_for_key(key) for _ in range(4)))
            return [info.id for info in got]

    try:
        results.put((key, asyncio.run(run())))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


async def test_processes_racing_on_one_new_key_get_one_session(db_url: str) -> None:
    procs = 4
    start, results = SPAWN.Barrier(procs), SPAWN.Queue()
    await asyncio.to_thread(
        run_processes,
        _race,
        lambda i: (db_url, f"race:{i % 2}", start, results),
        procs,
        timeout=TIMEOUT_S,
    )
    got = [results.get(timeout=10) for _ in range(procs)]
    assert all(isinstance(ids, tuple) for ids in got), got
    async with SessionStore.open(db_url) as store:
        by_key = {
            k: (await store.session_for_key(k, create=False)).id for k in ("race:0", "race:1")
        }
        assert await _count_sessions(store) == 2
    # Every caller of one key got that key's one session.
    for key, ids in got:
        assert ids == [by_key[key]] * 4


# -- fuzz: every failure is a SessionDBError and writes nothing --------------------------

hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
    st.lists(st.text(max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
keys = st.one_of(
    st.text(max_size=12),
    st.text(min_size=MAX_KEY_CHARS - 2, max_size=MAX_KEY_CHARS + 2),
    st.sampled_from(["\x00", "\ud800", "k", "k ", "K", " "]),
    hostile,
)
create_kwargs = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.text(max_size=5), hostile),
        "model": st.one_of(st.text(max_size=5), hostile),
        "source": st.one_of(st.sampled_from(["interactive", "cron"]), hostile),
        "cron_job_id": st.one_of(st.text(max_size=5), hostile),
        "metadata": st.one_of(st.dictionaries(st.text(max_size=3), st.integers()), hostile),
        "bogus": hostile,
    },
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_fuzz_session_for_key(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(SessionStore.connect(db_url))
    made: dict[str, str] = {}
    try:

        @settings(
            max_examples=200,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(key=keys, create=st.one_of(st.booleans(), hostile), kwargs=create_kwargs)
        def check(key: Any, create: Any, kwargs: dict[str, Any]) -> None:
            before = loop.run_until_complete(_count_sessions(store))
            try:
                info = loop.run_until_complete(store.session_for_key(key, create, **kwargs))
            except SessionDBError:
                assert loop.run_until_complete(_count_sessions(store)) == before
                return
            assert info.key == key
            assert made.setdefault(key, info.id) == info.id
            assert loop.run_until_complete(_count_sessions(store)) == len(made)

        check()
    finally:
        loop.run_until_complete(store.close())
        loop.close()


def test_cli_lists_and_shows_keys(db_url: str) -> None:
    import io
    import json

    from sessiondb.cli import main

    async def seed() -> tuple[str, str, str]:
        async with SessionStore.open(db_url) as store:
            plain = await store.session_for_key("chat-9", name="plain key")
            spaced = await store.session_for_key("k ", name="spaced key")
            none = await store.create_session(name="no key")
            return plain.id, spaced.id, none.id

    plain, spaced, none = asyncio.run(seed())

    def run(*argv: str) -> str:
        out = io.StringIO()
        assert main(["--db", db_url, *argv], out=out) == 0
        return out.getvalue()

    lines = run("sessions", "list").splitlines()
    assert lines[0].split() == ["ID", "LAST", "ACTIVITY", "MSGS", "SOURCE", "KEY", "TURN", "NAME"]
    row = {line.split()[0]: line.split() for line in lines[1:]}
    assert row[plain][5:] == ["chat-9", "-", "plain", "key"]
    assert row[spaced][5:] == ['"k', '"', "-", "spaced", "key"]  # quoted: the space shows
    assert row[none][5:] == ["-", "-", "no", "key"]
    listed = json.loads(run("sessions", "list", "--json"))["items"]
    assert {s["id"]: s["key"] for s in listed} == {plain: "chat-9", spaced: "k ", none: None}
    assert "key chat-9" in run("sessions", "show", plain)
