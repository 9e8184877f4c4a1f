"""Which path a Postgres search's window takes (sessiondb.search): the share of records
a query matches, estimated from ANALYZE's most common words, and the cost model that
picks the recency index (newest first) over the GIN index. Pure logic: the same rows
come back either way (tests/behaviour/test_search_window.py runs both)."""

from __future__ import annotations

import pytest

from sessiondb.search import WINDOW, WordStatistics, newest_first
from sessiondb.search_query import parse

SHARES = {"bash": 0.125, "run": 0.05, "running": 0.01, "the": 0.4, "grep": 0.02}


def _stats(indexed: float) -> WordStatistics:
    return WordStatistics(indexed, dict(SHARES), 0.0)


@pytest.mark.parametrize(
    ("query", "share"),
    [
        ("bash", 0.125),
        ("BASH", 0.125),
        ("xylophonequartz", 0.0),  # not listed: rarer than any listed word
        ("bash the", 0.125),  # both must match: no commoner than the rarer
        ("bash xylophonequartz", 0.0),
        ("bash OR grep", 0.145),  # either: the sum
        ('"the bash"', 0.125),  # a phrase: its rarest word
        ("run*", 0.06),  # a prefix: the listed words it begins
        ("bash -the", 0.125),  # exclusions do not narrow the estimate
        ("the OR bash OR run", 0.575),
        ("the OR the OR the OR bash", 1.0),  # never more than every record
    ],
)
def test_the_share_a_query_matches(query: str, share: float) -> None:
    assert _stats(1e6).share(parse(query)) == pytest.approx(share)


def test_the_window_is_read_newest_first_only_for_a_common_word_in_a_large_table() -> None:
    bash = parse("bash")
    # Among 10M or 2M records, 1 in 8: newest first (80k records read, not 1.25M matches).
    assert newest_first(_stats(10e6), bash) and newest_first(_stats(2e6), bash)
    # Among 100k it has 12.5k matches: all of them through GIN cost less than 80k reads.
    assert not newest_first(_stats(100e3), bash)
    # Fewer matches than the window: GIN, whatever the table.
    assert not newest_first(_stats(WINDOW * 4), bash)
    # A rare word, a word ANALYZE does not list, or no statistics at all: GIN.
    assert not newest_first(_stats(10e6), parse("xylophonequartz"))
    assert not newest_first(_stats(10e6), parse("bash xylophonequartz"))
    assert not newest_first(WordStatistics(0.0, {}, 0.0), bash)
    # 1 in 100 among 2M: 20k matches through GIN beat 1M reads newest first.
    assert not newest_first(_stats(2e6), parse("running"))
    # The same word among 100M records: 1M matches, newest first.
    assert newest_first(_stats(100e6), parse("running"))
