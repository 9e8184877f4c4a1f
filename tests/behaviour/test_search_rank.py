"""SQLite's search rank (sessiondb.search_rank) is Postgres's ts_rank of the record's own
text: the same records searched on both backends get the same ranks, and the function
agrees with Postgres's own ts_rank over generated texts and queries."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.messages import assistant, user
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from sessiondb import InvalidQueryError, SessionStore
from sessiondb.search_query import parse, to_tsquery
from sessiondb.search_rank import rank, rank_query

# ts_rank as the Postgres side calls it (search_statements), over a record's text and
# thinking made into its search vector (statements.search_vector).
PG_RANK = """
SELECT ts_rank(CAST('{1.0, 0.3, 0.3, 0.3}' AS real[]),
               CASE WHEN CAST(:t AS text) IS NULL THEN to_tsvector('simple', CAST(:b AS text))
                    ELSE to_tsvector('simple', CAST(:b AS text))
                         || setweight(to_tsvector('simple', CAST(:t AS text)), 'A') END,
               to_tsquery('simple', CAST(:q AS text)))
"""

MESSAGES: list[dict[str, Any]] = [
    user("project nightingale merger filler"),
    user("nightingale nightingale, the merger of the nightingale deal"),
    assistant("a long reply " + "word " * 120 + "about the nightingale merger"),
    assistant("merger first, then " + "word " * 150 + "nightingale far away"),
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "nightingale merger in my head nightingale"},
            {"type": "text", "text": "nightingale nights and a nightly deal"},
        ],
    },
    user("the Night-ingale? no: night, nights, nightly, NIGHTINGALE"),
]
QUERIES = [
    "nightingale",
    "nightingale merger",
    '"nightingale merger"',
    "merger OR deal",
    "night*",
    "night* deal",
    "nightingale -filler",
    "nightingale OR night* merger",
]


async def _ranks(url: str, thinking: bool) -> dict[str, dict[int, float]]:
    async with SessionStore.open(url) as store:
        sid = (await store.create_session()).id
        await store.append(sid, MESSAGES)
        found = {}
        for query in QUERIES:
            page = await store.search(query, limit=50, thinking=thinking)
            assert page.next_cursor is None
            found[query] = {h.seq: h.rank for h in page.hits}
        return found


@pytest.mark.parametrize("thinking", [False, True])
async def test_both_backends_give_a_record_the_same_rank(
    pg_url: str, sqlite_template: Path, tmp_path: Path, thinking: bool
) -> None:
    path = tmp_path / "ranks.sqlite3"
    shutil.copyfile(sqlite_template, path)
    on_sqlite = await _ranks(str(path), thinking)
    on_postgres = await _ranks(pg_url, thinking)
    assert all(on_postgres.values())
    for query in QUERIES:
        assert on_sqlite[query] == pytest.approx(on_postgres[query], rel=1e-5), query
    # Not one rank for everything: the more often and nearer the words, the better.
    nightingale = on_sqlite["nightingale"]
    assert nightingale[2] > nightingale[1]
    both = on_sqlite["nightingale merger"]
    assert both[1] > both[4] > 0  # adjacent, and 150 words apart


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[SessionStore]:
    async with SessionStore.open(pg_url) as store:
        yield store


WORDS = ["deal", "merger", "nightingale", "night", "nights", "nightly", "alpha"]
_texts = st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join)
_terms = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(["nigh*", "night*", "de*", "x*"]),
    st.lists(st.sampled_from(WORDS), min_size=2, max_size=3).map(lambda w: '"' + " ".join(w) + '"'),
    st.sampled_from(WORDS).map(lambda w: "-" + w),
    st.just("OR"),
)
_queries = st.lists(_terms, min_size=1, max_size=5).map(" ".join)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_texts, thinking=st.one_of(st.none(), _texts), query=_queries)
# Long texts: a word's first 256 positions only, positions past 16383 as 16383.
@example(
    body="nightingale " * 300 + "word " * 17000 + "merger nightingale deal",
    thinking="nightingale merger deal",
    query="nightingale",
)
@example(
    body="nightingale " * 300 + "word " * 17000 + "merger nightingale deal",
    thinking="nightingale merger deal",
    query="nightingale merger OR deal",
)
@example(body="merger " + "word " * 16500, thinking="nightingale", query="merger nightingale")
def test_fuzz_the_rank_is_postgres_ts_rank(
    pg_store: SessionStore, body: str, thinking: str | None, query: str
) -> None:
    try:
        parsed = parse(query)
    except InvalidQueryError:
        return
    words = [(w, t.prefix and i == len(t.words) - 1) for t in [*parsed.terms(), *parsed.excluded]
             for i, w in enumerate(t.words)]  # fmt: skip
    # A word both whole and as a prefix in one query: Postgres keeps one of the two
    # operands, which one depending on how its sort ran (sessiondb.search_rank).
    assume(len({w for w, _ in words}) == len(set(words)))
    thinking = thinking or None
    ours = rank(body, thinking, rank_query(parsed))

    async def theirs() -> float:
        rows = await sql.fetch(pg_store, PG_RANK, b=body, t=thinking, q=to_tsquery(parsed, False))
        return float(rows[0][0])

    expected = asyncio.get_event_loop().run_until_complete(theirs())
    assert ours == pytest.approx(expected, rel=1e-5), (body, thinking, query)
