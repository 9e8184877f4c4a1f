"""store.search's window on every backend: a query with more matches than
``sessiondb.search.WINDOW`` ranks only its newest ``WINDOW`` (every filter applied
before the cut), a walk's pages keep to the window of its first page while records
arrive, and a query with fewer matches is answered as before windows. A small window
(set on the module, as a service would never) stands in for the 10,000 of a real one.

On Postgres a common word's window is read newest first from the recency index and a
rare one's from the GIN index; each test runs both paths (the store's word statistics
set to say the word is common, or that it is rare) and gets the same pages from both."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
from helpers.messages import assistant, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import InvalidInputError, SearchPage, SessionDBError, SessionStore, jsoncodec
from sessiondb import search as search_module
from sessiondb.search import WordStatistics

WINDOW = 6


@pytest.fixture(params=["gin", "newest-first"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The window's size for the test, and the Postgres path its searches take."""
    monkeypatch.setattr(search_module, "WINDOW", WINDOW)
    return str(request.param)


def _steer(store: SessionStore, path: str, *words: str) -> None:
    """Postgres: make ``words`` common (the recency index's path) or rare (the GIN
    index's) for the store's next searches; SQLite has one path."""
    shares = {w: 0.5 for w in words} if path == "newest-first" else {}
    store.core.search_statistics = WordStatistics(1e9 if shares else 0.0, shares, time.monotonic())


def _keys(page: SearchPage) -> list[tuple[str, int]]:
    return [(h.session_id, h.seq) for h in page.hits]


async def _walk(store: SessionStore, query: str, limit: int, **kwargs: Any) -> list[SearchPage]:
    pages = [await store.search(query, limit=limit, **kwargs)]
    while pages[-1].next_cursor is not None:
        pages.append(await store.search(query, limit=limit, cursor=pages[-1].next_cursor, **kwargs))
    return pages


async def test_more_matches_than_the_window_rank_the_newest(store: SessionStore, path: str) -> None:
    _steer(store, path, "common")
    sid = (await store.create_session()).id
    # The oldest match is the best ranked (the word five times); ten newer ones follow.
    await store.append(sid, [user("common " * 5 + "old best")])
    for i in range(10):
        await store.append(sid, [user(f"common filler {i} " + "hay " * i)])
    page = await store.search("common", limit=20)
    newest = {(sid, seq) for seq in range(11 - WINDOW + 1, 12)}
    assert set(_keys(page)) == newest and page.next_cursor is None
    assert [h.rank for h in page.hits] == sorted((h.rank for h in page.hits), reverse=True)
    # A newer best-ranked match is in the window, and first.
    await store.append(sid, [user("common " * 5 + "new best")])
    best = (await store.search("common", limit=1)).hits[0]
    assert best.seq == 12 and "new best" in best.snippet


async def test_fewer_matches_than_the_window_are_answered_as_before(
    store: SessionStore, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _steer(store, path, "rare")
    sids = [(await store.create_session()).id for _ in range(3)]
    for i, sid in enumerate(sids):  # WINDOW - 1 matches
        await store.append(sid, [user("rare " * (1 + i % 2) + "hay"), assistant("rare too")])
    await store.tombstone(sids[0], 2)
    small = await _walk(store, "rare", 2)
    # The first page's cursor is the keyset alone, as before windows: four fields.
    raw = small[0].next_cursor
    assert raw is not None
    assert len(jsoncodec.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))) == 4
    monkeypatch.setattr(search_module, "WINDOW", 10_000)
    large = await _walk(store, "rare", 2)
    assert len(small) == 3
    assert [_keys(p) for p in small] == [_keys(p) for p in large]
    assert [[h.rank for h in p.hits] for p in small] == [[h.rank for h in p.hits] for p in large]
    assert [[h.snippet for h in p.hits] for p in small] == [
        [h.snippet for h in p.hits] for p in large
    ]
    assert [p.next_cursor for p in small] == [p.next_cursor for p in large]


async def test_a_walk_keeps_its_window_while_records_arrive(store: SessionStore, path: str) -> None:
    _steer(store, path, "walk")
    sid = (await store.create_session()).id
    for i in range(10):
        await store.append(sid, [user("walk " * (1 + i % 3) + f"step {i}")])
    first = await store.search("walk", limit=2)
    window = {(sid, seq) for seq in range(10 - WINDOW + 1, 11)}
    seen = _keys(first)
    cursor = first.next_cursor
    writer = (await store.create_session()).id
    while cursor is not None:
        # Another writer appends matches between every two pages, the best ranked ones.
        await store.append(writer, [user("walk " * 8) for _ in range(3)])
        page = await store.search("walk", limit=2, cursor=cursor)
        seen += _keys(page)
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == WINDOW
    assert set(seen) == window
    # A new walk's window is the newest again: the writer's records.
    assert {s for s, _ in _keys(await store.search("walk", limit=WINDOW))} == {writer}


async def test_tied_hits_across_pages_survive_writes(store: SessionStore, path: str) -> None:
    # bm25 weighs words by the whole table, which every write changes: a later page
    # compares with the last hit's rank as it is now, so that ties stay tied.
    _steer(store, path, "tie")
    sid = (await store.create_session()).id
    for i in range(12):
        await store.append(sid, [user(f"tie word{i % 2} filler")])  # one length: ties
    page = await store.search("tie", limit=3)
    seen = _keys(page)
    other = (await store.create_session()).id
    while page.next_cursor is not None:
        await store.append(other, [user("tie " + "long " * 50), user("short")])
        page = await store.search("tie", limit=3, cursor=page.next_cursor)
        seen += _keys(page)
    assert len(seen) == len(set(seen)) == WINDOW
    assert set(seen) == {(sid, seq) for seq in range(12 - WINDOW + 1, 13)}


async def test_a_window_holds_only_what_its_filters_let_through(
    store: SessionStore, path: str
) -> None:
    _steer(store, path, "filtered")
    sid = (await store.create_session()).id
    await store.append(sid, [user(f"filtered old {i}") for i in range(4)])
    await store.append(sid, [assistant(f"filtered new {i}") for i in range(8)])
    # Tombstoned records do not take a place in the window: the next older ones do.
    for seq in (12, 11):
        await store.tombstone(sid, seq)
    shown = await store.search("filtered", limit=20)
    assert sorted(q for _, q in _keys(shown)) == list(range(10 - WINDOW + 1, 11))
    hidden = await store.search("filtered", limit=20, hidden=True)
    assert sorted(q for _, q in _keys(hidden)) == list(range(12 - WINDOW + 1, 13))
    # Roles and since filter before the cut too: the four user messages, oldest of all.
    users = await store.search("filtered", limit=20, roles=["user"])
    assert sorted(q for _, q in _keys(users)) == [1, 2, 3, 4]


async def test_a_small_namespace_is_not_crowded_out(store_url: str, path: str) -> None:
    if store_url == ":memory:":
        pytest.skip("two stores need one database")
    async with (
        SessionStore.open(store_url, namespace="small") as small,
        SessionStore.open(store_url, namespace="big") as big,
    ):
        _steer(small, path, "crowd")
        _steer(big, path, "crowd")
        mine = (await small.create_session()).id
        await small.append(mine, [user(f"crowd mine {i}") for i in range(3)])
        theirs = (await big.create_session()).id
        for _ in range(3):
            await big.append(theirs, [user("crowd theirs") for _ in range(WINDOW)])
        found = await _walk(small, "crowd", 2)
        assert sorted(k for p in found for k in _keys(p)) == [(mine, 1), (mine, 2), (mine, 3)]
        assert {s for p in await _walk(big, "crowd", 4) for s, _ in _keys(p)} == {theirs}


async def test_a_window_cursor_is_checked(store: SessionStore, path: str) -> None:
    _steer(store, path, "check")
    sid = (await store.create_session()).id
    await store.append(sid, [user("check " * (1 + i % 3)) for i in range(10)])
    first = await store.search("check", limit=2)
    cursor = first.next_cursor
    assert cursor is not None
    value = jsoncodec.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    assert len(value) == 6  # the keyset, the fingerprint, the window's oldest and newest key

    def encode(v: list[Any]) -> str:
        return base64.urlsafe_b64encode(jsoncodec.dumps(v).encode()).decode().rstrip("=")

    assert (await store.search("check", limit=2, cursor=encode(value))).hits
    for bad in (
        [*value[:4], value[4]],  # one key only
        [*value[:4], "x", value[5]],
        [*value[:4], value[4], 2**64],
        [*value[:4], [1, "not an id", 1], value[5]],
        [*value[:4], [2**70, value[0], 1], value[5]],
        [*value[:4], value[4], value[5], 3],
    ):
        with pytest.raises(InvalidInputError):
            await store.search("check", limit=2, cursor=encode(bad))


keys = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.lists(st.one_of(st.integers(), st.text(max_size=27), st.none()), max_size=4),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(oldest=keys, newest=keys, seq=st.one_of(st.integers(), st.text(max_size=3)))
def test_fuzz_window_cursors_raise_only_sessiondb_errors(
    store: SessionStore, oldest: Any, newest: Any, seq: Any
) -> None:
    async def run() -> None:
        page = await store.search("fuzzword", limit=2)
        made = page.next_cursor
        if made is None:
            sid = (await store.create_session()).id
            await store.append(sid, [user("fuzzword") for _ in range(4)])
            made = (await store.search("fuzzword", limit=2)).next_cursor
        assert made is not None
        value = jsoncodec.loads(base64.urlsafe_b64decode(made + "=" * (-len(made) % 4)))
        forged = [value[0], value[1], seq, value[3], oldest, newest]
        # The stdlib's JSON: it writes any int, and infinities as the words JSON has none of.
        raw = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
        try:
            result = await store.search("fuzzword", limit=2, cursor=raw)
        except SessionDBError:
            return
        assert isinstance(result, SearchPage)

    asyncio.get_event_loop().run_until_complete(run())
