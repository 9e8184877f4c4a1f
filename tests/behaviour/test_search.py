"""store.search on every backend, over real rows: what is indexed and what is not,
tombstones and prunes, namespaces, a fork's lineage, filters, keyset pages, hostile
queries, bulk import, deletes, and a store that indexes nothing."""

from __future__ import annotations

import asyncio
import base64
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import sql
from helpers.messages import assistant, result, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    ConfigurationError,
    InvalidInputError,
    InvalidQueryError,
    SearchPage,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
    jsoncodec,
)
from sessiondb.search_query import MAX_QUERY_CHARS
from sessiondb.tables import SEARCH


def _seqs(page: SearchPage) -> list[tuple[str, int]]:
    return [(h.session_id, h.seq) for h in page.hits]


async def _session(store: SessionStore, messages: list[dict[str, Any]]) -> str:
    sid = (await store.create_session()).id
    await store.append(sid, messages)
    return sid


async def test_text_tool_calls_results_and_summaries_are_found(store: SessionStore) -> None:
    sid = await _session(
        store,
        [
            user("Please deploy the Kraken service"),
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "the zebra plan"},
                    {"type": "text", "text": "Calling a tool."},
                    {"type": "toolCall", "id": "c1", "name": "grep_logs",
                     "arguments": {"q": "wombat"}},
                ],
            },
            result("c1", "found 3 narwhal lines"),
            assistant("done"),
        ],
    )  # fmt: skip
    await store.append_compaction(sid, summary="Goal: migrate the platypus", first_kept_seq=4)
    page = await store.search("kraken")
    assert _seqs(page) == [(sid, 1)]
    (hit,) = page.hits
    assert hit.kind == "message" and hit.role == "user"
    assert hit.marked() == "Please deploy the [Kraken] service"
    assert hit.timestamp.tzinfo is not None and hit.rank > 0
    assert _seqs(await store.search("grep_logs")) == [(sid, 2)]
    assert _seqs(await store.search("wombat")) == [(sid, 2)]
    assert _seqs(await store.search("narwhal")) == [(sid, 3)]
    (summary,) = (await store.search("platypus")).hits
    assert (summary.seq, summary.kind, summary.role) == (5, "compaction", None)
    # Thinking only when asked for.
    assert (await store.search("zebra")).hits == []
    (thought,) = (await store.search("zebra", thinking=True)).hits
    assert thought.seq == 2 and "[zebra]" in thought.marked()
    # Words of the JSON around the text are not indexed.
    assert (await store.search("toolCall")).hits == []
    assert (await store.search("thinking")).hits == []


async def test_query_syntax_means_the_same_on_every_backend(store: SessionStore) -> None:
    a = await _session(store, [user("red apple pie")])
    b = await _session(store, [user("green apple tart")])
    c = await _session(store, [user("red cherry; see main.py")])
    assert {s for s, _ in _seqs(await store.search("apple"))} == {a, b}
    assert _seqs(await store.search("apple -green")) == [(a, 1)]
    assert _seqs(await store.search('"apple pie"')) == [(a, 1)]
    assert (await store.search('"pie apple"')).hits == []
    assert {s for s, _ in _seqs(await store.search("pie OR tart"))} == {a, b}
    assert {s for s, _ in _seqs(await store.search("red che*"))} == {c}
    assert {s for s, _ in _seqs(await store.search("APPLE"))} == {a, b}
    assert _seqs(await store.search("main.py")) == [(c, 1)]
    assert _seqs(await store.search("main")) == [(c, 1)]


async def test_entries_tombstones_and_prunes_are_not_found_unless_hidden(
    store: SessionStore,
) -> None:
    sid = await _session(
        store,
        [user("alpha question"), assistant("alpha call", ["c1"]), result("c1", "alpha output")],
    )
    await store.append(sid, [user("alpha again")])
    assert {q for _, q in _seqs(await store.search("alpha"))} == {1, 2, 3, 4}
    await store.tombstone(sid, 4, reason="alpha reason")
    await store.append_prune(sid, [3])
    visible = {q for _, q in _seqs(await store.search("alpha"))}
    assert visible == {1, 2}
    everything = {q for _, q in _seqs(await store.search("alpha", hidden=True))}
    assert everything == {1, 2, 3, 4}
    # Neither overlay is itself a hit (the tombstone's reason, the prune's marker).
    assert (await store.search("reason", hidden=True)).hits == []
    # Scoped to the session: the same rules.
    assert {q for _, q in _seqs(await store.search("alpha", session_id=sid))} == {1, 2}


async def test_namespaces_do_not_see_each_other(store_url: str) -> None:
    if store_url == ":memory:":
        pytest.skip("two stores need one database")
    async with (
        SessionStore.open(store_url, namespace="a") as a,
        SessionStore.open(store_url, namespace="b") as b,
    ):
        sa = await _session(a, [user("shared secretword")])
        sb = await _session(b, [user("shared secretword")])
        assert _seqs(await a.search("secretword")) == [(sa, 1)]
        assert _seqs(await b.search("secretword")) == [(sb, 1)]
        with pytest.raises(SessionNotFoundError):
            await a.search("secretword", session_id=sb)


async def test_ranks_and_order_are_decided_by_the_namespaces_own_rows(store_url: str) -> None:
    # A tenant must not learn what another writes from its own search results: with
    # bm25 over one FTS5 table shared by every namespace, alpha's rows moved beta's
    # ranks (3.476 to 0.000001 for "nightingale") and could reorder beta's hits.
    if store_url == ":memory:":
        pytest.skip("two stores need one database")
    async with (
        SessionStore.open(store_url, namespace="alpha") as alpha,
        SessionStore.open(store_url, namespace="beta") as beta,
    ):
        await _session(beta, [user("project nightingale merger filler")])
        await _session(beta, [user(f"unrelated filler {i}") for i in range(6)])
        await _session(
            beta,
            [
                user("nightingale nightingale, the merger of the nightingale deal"),
                assistant("a long reply " + "word " * 40 + "about the nightingale merger"),
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "nightingale merger in my head"},
                        {"type": "text", "text": "nightingale"},
                    ],
                },
            ],
        )
        queries: list[tuple[str, dict[str, Any]]] = [
            ("nightingale", {}),
            ("nightingale", {"thinking": True}),
            ("nightingale merger", {}),
            ("merger OR deal", {}),
            ('"nightingale merger"', {}),
            ("nighting*", {"limit": 2}),
        ]

        async def ranked() -> list[list[tuple[str, int, float]]]:
            pages = []
            for query, options in queries:
                page = await beta.search(query, **options)
                hits = [(h.session_id, h.seq, h.rank) for h in page.hits]
                while page.next_cursor is not None:
                    page = await beta.search(query, cursor=page.next_cursor, **options)
                    hits += [(h.session_id, h.seq, h.rank) for h in page.hits]
                pages.append(hits)
            return pages

        before = await ranked()
        assert all(before) and all(rank > 0 for hits in before for _, _, rank in hits)
        for i in range(40):
            await _session(alpha, [user(f"the nightingale deal closes {i}")])
        # Long records too: a corpus statistic of length would move with them.
        await _session(alpha, [user("nightingale merger " + "padding " * 500)])
        assert await ranked() == before
        assert len((await alpha.search("nightingale", limit=50)).hits) == 41


async def test_a_fork_finds_its_inherited_records_up_to_the_fork_point(store: SessionStore) -> None:
    parent = await _session(store, [user("lineage one"), assistant("lineage two")])
    child = (await store.fork(parent)).id
    await store.append(parent, [user("lineage three in parent")])
    await store.append(child, [user("lineage three in child")])
    await store.tombstone(child, 1)
    in_child = await store.search("lineage", session_id=child)
    assert sorted(q for _, q in _seqs(in_child)) == [2, 3]
    assert {h.session_id for h in in_child.hits} == {child}
    assert any("child" in h.snippet for h in in_child.hits)
    in_parent = await store.search("lineage", session_id=parent)
    assert sorted(q for _, q in _seqs(in_parent)) == [1, 2, 3]
    # Across the namespace each record is found once, under the session that wrote it.
    everywhere = _seqs(await store.search("lineage"))
    assert sorted(everywhere) == sorted([(parent, 1), (parent, 2), (parent, 3), (child, 3)])
    # A detached fork holds copies, which are found as its own.
    detached = (await store.fork(parent, 2, detach=True)).id
    assert sorted(_seqs(await store.search("lineage", session_id=detached))) == [
        (detached, 1),
        (detached, 2),
    ]


async def test_roles_and_since_filter(store: SessionStore) -> None:
    sid = await _session(store, [user("filter me"), assistant("filter me too")])
    assert _seqs(await store.search("filter", roles=["assistant"])) == [(sid, 2)]
    assert len((await store.search("filter", roles=["user", "assistant"])).hits) == 2
    later = datetime.now(UTC) + timedelta(hours=1)
    assert (await store.search("filter", since=later)).hits == []
    assert len((await store.search("filter", since=later - timedelta(days=1))).hits) == 2
    for bad in (["tool"], "user", [], [1]):
        with pytest.raises(InvalidInputError):
            await store.search("filter", roles=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await store.search("filter", since=datetime(2026, 1, 1))  # naive


async def test_keyset_pages_cover_every_hit_once_best_first(store: SessionStore) -> None:
    sids = []
    for i in range(5):
        # More mentions, a better rank: ranks differ, and some tie.
        sids.append(await _session(store, [user("needle " * (1 + i % 3) + "hay"), user("needle")]))
    seen: list[tuple[str, int]] = []
    ranks: list[float] = []
    page = await store.search("needle", limit=3)
    pages = 1
    while True:
        seen += _seqs(page)
        ranks += [h.rank for h in page.hits]
        if page.next_cursor is None:
            break
        page = await store.search("needle", limit=3, cursor=page.next_cursor)
        pages += 1
    assert pages == 4
    assert sorted(seen) == sorted((s, q) for s in sids for q in (1, 2))
    assert ranks == sorted(ranks, reverse=True)
    first = await store.search("needle", limit=3)
    assert first.next_cursor is not None
    with pytest.raises(InvalidInputError):  # a cursor of another search
        await store.search("hay", limit=3, cursor=first.next_cursor)
    for bad in ("garbage", "x" * 400, 5):
        with pytest.raises(InvalidInputError):
            await store.search("needle", cursor=bad)  # type: ignore[arg-type]
    for limit in (0, -1, 201, True, "3"):
        with pytest.raises(InvalidInputError):
            await store.search("needle", limit=limit)  # type: ignore[arg-type]


async def test_a_cursor_is_the_fingerprinted_keyset_of_its_search(store: SessionStore) -> None:
    # The cursor's format is what it was (cursors handed out before an upgrade still
    # work): its last hit's keyset and a CRC-32 of the search's arguments as JSON. A
    # query with a lone surrogate takes the other way to the same JSON text.
    for i in range(4):
        await _session(store, [user("needle " * (1 + i % 2) + "hay")])
    for query in ("needle", "needle \ud800"):
        page = await store.search(query, limit=3)
        last = page.hits[-1]
        text = jsoncodec.dumps([query, None, None, None, False, False])
        mark = zlib.crc32(text.encode("utf-8", "surrogatepass"))
        raw = jsoncodec.dumps([last.rank, last.session_id, last.seq, mark]).encode()
        assert page.next_cursor == base64.urlsafe_b64encode(raw).decode().rstrip("=")
        rest = await store.search(query, limit=3, cursor=page.next_cursor)
        assert len(rest.hits) == 1 and rest.next_cursor is None
    with pytest.raises(InvalidInputError):  # the surrogate makes it another search
        await store.search("needle", limit=3, cursor=page.next_cursor)


HOSTILE = [
    'NEAR("needle" "hay", 1)',
    'needle"',
    "needle*",
    "^needle",
    "body:needle",
    "thinking:needle",
    "{body thinking}: needle",
    "needle\x00",
    "needle " + "🎉" * 900,
    "'needle' OR 1=1; --",
    "needle AND NOT hay",
]


async def test_hostile_queries_match_words_only(store: SessionStore) -> None:
    sid = await _session(store, [user("needle hay stack")])
    for query in HOSTILE:
        page = await store.search(query)
        assert _seqs(page) in ([(sid, 1)], []), query
    with pytest.raises(InvalidQueryError):
        await store.search("x" * 100_000)
    with pytest.raises(InvalidQueryError):
        await store.search("x" * (MAX_QUERY_CHARS + 1))
    for empty in ("", '"', "*", "\x00", "-needle"):
        with pytest.raises(InvalidQueryError):
            await store.search(empty)


async def test_unicode_and_stored_oddities(store: SessionStore) -> None:
    sid = await _session(
        store,
        [user("Ünïcode café 中文字 naïve"), user("nul \u0000 inside \ud800 lone surrogate")],
    )
    assert _seqs(await store.search("café")) == [(sid, 1)]
    assert _seqs(await store.search("ÜNÏCODE")) == [(sid, 1)]
    assert _seqs(await store.search("中文字")) == [(sid, 1)]
    (hit,) = (await store.search("surrogate")).hits
    assert hit.seq == 2 and "\ud800" in hit.snippet


async def test_bulk_import_is_indexed_and_deletes_leave_no_index_behind(
    store: SessionStore,
) -> None:
    ids = await store.import_sessions(
        [{"messages": [user(f"bulk marmot {i}"), assistant("bulk answer")]} for i in range(30)]
    )
    assert len((await store.search("marmot", limit=50)).hits) == 30
    await store.delete_session(ids[0])
    assert len((await store.search("marmot", limit=50)).hits) == 29
    if sql.flavour(store) == "sqlite":
        count = await sql.scalar(store, f"SELECT count(*) FROM {SEARCH}")
        assert count == 29 * 2


async def test_a_store_that_does_not_index_writes_no_text_and_refuses_search(
    store: SessionStore,
) -> None:
    store.core.search_indexing = False
    sid = await _session(store, [user("plaintext secret")])
    await store.import_sessions([{"messages": [user("plaintext secret too")]}])
    with pytest.raises(ConfigurationError, match="search is off"):
        await store.search("secret")
    if sql.flavour(store) == "sqlite":
        assert await sql.scalar(store, f"SELECT count(*) FROM {SEARCH}") == 0
    else:
        assert (
            await sql.scalar(
                store, "SELECT count(*) FROM sessiondb_records WHERE search IS NOT NULL"
            )
            == 0
        )
    store.core.search_indexing = True
    assert (await store.search("secret")).hits == []  # what was written then stays unindexed
    await store.append(sid, [user("indexed secret")])
    assert _seqs(await store.search("secret")) == [(sid, 2)]


async def test_a_search_sees_an_append_as_soon_as_it_commits(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    for i in range(5):
        await store.append(sid, [user(f"instant{i}")])
        assert _seqs(await store.search(f"instant{i}")) == [(sid, i + 1)]
    many = [user(f"batch{i} common") for i in range(40)]
    await store.append(sid, many)
    assert len((await store.search("common", limit=100)).hits) == 40


queries = st.one_of(
    st.text(max_size=30),
    st.sampled_from([*HOSTILE, "", "-x", "OR", '"a b', "a OR", "x" * 2000]),
    st.none(),
    st.integers(),
    st.binary(max_size=5),
)
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=5),
    st.lists(st.text(max_size=3), max_size=2),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=queries,
    limit=st.one_of(st.integers(min_value=-1, max_value=300), anything),
    cursor=st.one_of(st.none(), anything),
    session_id=st.one_of(st.none(), anything, st.just("01J9Z3K7Q8R2V5X4W6Y0A1B2C3")),
    roles=st.one_of(
        st.none(),
        anything,
        st.lists(st.sampled_from(["user", "assistant", "toolResult", "x"]), max_size=3),
    ),
    since=st.one_of(st.none(), anything, st.datetimes(timezones=st.just(UTC))),
    flags=st.tuples(st.one_of(st.booleans(), anything), st.one_of(st.booleans(), anything)),
)
def test_fuzz_search_raises_only_sessiondb_errors(
    store: SessionStore, query: Any, limit: Any, cursor: Any, session_id: Any, roles: Any,
    since: Any, flags: Any,
) -> None:  # fmt: skip
    async def run() -> None:
        try:
            page = await store.search(
                query, limit=limit, cursor=cursor, session_id=session_id, roles=roles,
                since=since, thinking=flags[0], hidden=flags[1],
            )  # fmt: skip
        except SessionDBError:
            return
        assert isinstance(page, SearchPage)

    asyncio.get_event_loop().run_until_complete(run())
