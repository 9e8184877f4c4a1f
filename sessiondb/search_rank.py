"""SQLite's search rank: Postgres's ``ts_rank`` over a record's own text, so that a hit's
rank depends on that record and the query alone, as on Postgres.

FTS5's ``bm25`` weighs each word by statistics of the whole table (how many rows hold
it, their average length), which every namespace's writes move: one tenant's rows
changed another's ranks and their order, and counting the rows holding a word cost
every query time that grew with the table. This rank reads nothing but the record's
indexed text, as ``ts_rank`` reads nothing but the record's ``tsvector``.

The SQLite backend registers :func:`rank` as the SQL function :data:`FUNCTION` on each
connection; the search statement calls it with the FTS5 row's ``body`` and ``thinking``
and the query as :func:`rank_query` wrote it. Plain functions over plain values; no I/O.

It follows ``ts_rank`` (PostgreSQL's ``tsrank.c``, normalization 0) with the weights the
Postgres side passes (text 1.0, thinking 0.3):

- a single word, a prefix or an ``OR`` of terms: for each query word, for each distinct
  word of the record it matches, its occurrences in position order ``j = 1, 2, …``
  summed as ``weight / j²`` and divided by ``π²/6``; the sum over words divided by the
  number of distinct query words;
- several groups, an exclusion or a phrase (an ``AND``): every pair of occurrences of
  two distinct query words, ``sqrt(w₁ · w₂ · 1 / (1.005 + 0.05 · exp(d / 1.5 - 2)))``
  for words ``d`` apart (``d`` ≤ 100), combined as ``1 - ∏(1 - x)``; a record with no
  such pair ranks as Postgres ranks it, at about ``1e-15`` (words over 100 apart) or
  ``1e-20`` (one word of the query only: so every hit of a query with an exclusion,
  whose excluded word is a query word no hit holds, ranks ``1e-20`` on both backends).

The record's words are its indexed text split on spaces and lowered, numbered from 1,
the thinking's after the text's; as in a ``tsvector``, a position past 16383 counts as
16383 and a word keeps its first 256 positions. The rank is rounded to a 4-byte float,
as ``ts_rank``'s ``real``. Both backends then give a record the same rank, but where
their tokenizers split a word differently (rare: both see the same runs of letters and
digits, :mod:`sessiondb.search_text`), and for a query that gives one word both whole
and as a prefix (``night night*``: Postgres ranks by one of the two, which one
depending on how its sort of the query's words ran; here the last given).
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left, bisect_right
from functools import lru_cache

from .search_query import Query

#: The SQL function's name on SQLite connections.
FUNCTION = "sessiondb_rank"
#: Its arguments: the FTS5 row's ``body`` and ``thinking``, and :func:`rank_query`'s text.
ARGUMENTS = 3

# ts_rank's weights as the Postgres side passes them: the text (D) 1.0, thinking (A) 0.3.
TEXT_WEIGHT, THINKING_WEIGHT = 1.0, 0.3
# tsvector's limits: the largest position, and the positions one word keeps.
_MAX_POSITION = 16383
_MAX_POSITIONS = 256
# π²/6, the limit of the sum of 1/j², as tsrank.c writes it.
_ZETA_2 = 1.64493406685
# The sums of 1/j² for j = 1..n, n = 0.._MAX_POSITIONS.
_SQUARES = [0.0]
for _j in range(1, _MAX_POSITIONS + 1):
    _SQUARES.append(_SQUARES[-1] + 1.0 / (_j * _j))
# Words further apart than this pair at a weight of 1e-30 (tsrank.c's word_distance).
_NEAR = 100
_FAR = 1e-30
# What ts_rank gives a record that none of the pairs of an AND ranks (res < 0).
_NONE = 1e-20

_FLOAT4 = struct.Struct("f")

# An occurrence: (position, weight).
Positions = list[tuple[int, float]]


def rank_query(query: Query) -> str:
    """The text :func:`rank` is given for ``query``: ``&`` when Postgres ranks its
    ``to_tsquery`` as an AND (several groups, an exclusion, or one phrase alone), ``|``
    otherwise; then the query's distinct words, each with ``*`` when a prefix, one a
    line. Postgres's ``to_tsquery`` text (:func:`search_query.to_tsquery`) has the same
    words and top operator."""
    terms = [*query.terms(), *query.excluded]  # Postgres ranks an excluded word too
    single = len(query.groups) == 1 and not query.excluded
    conjunction = not single or (len(query.groups[0]) == 1 and len(query.groups[0][0].words) > 1)
    # A word given twice is one operand, as Postgres makes it (the last given wins, as
    # its sort of a few operands keeps it, whether a prefix or whole).
    words: dict[str, bool] = {}
    for term in terms:
        last = len(term.words) - 1
        for i, word in enumerate(term.words):
            words[word.lower()] = term.prefix and i == last
    # Sorted as Postgres sorts a query's operands (by the bytes of the word).
    ordered = sorted(words.items(), key=lambda w: _bytes(w[0]))
    lines = [w + ("*" if prefix else "") for w, prefix in ordered]
    return "\n".join(["&" if conjunction else "|", *lines])


@lru_cache(maxsize=256)
def _read(query: str) -> tuple[bool, tuple[tuple[str, bool], ...]]:
    op, *lines = query.split("\n")
    return op == "&", tuple((w[:-1], True) if w.endswith("*") else (w, False) for w in lines)


def _bytes(word: str) -> bytes:
    return word.encode("utf-8", "surrogatepass")


def _float4(value: float) -> float:
    """``value`` as a 4-byte float, ``ts_rank``'s ``real``, read back."""
    converted: float = _FLOAT4.unpack(_FLOAT4.pack(value))[0]
    return converted


def _occurrences(
    body: str | None, thinking: str | None, items: tuple[tuple[str, bool], ...]
) -> list[list[Positions]]:
    """For each query word of ``items``, the positions of each distinct record word it
    matches (in the order of a tsvector's words: by their bytes)."""
    found: dict[str, Positions] = {}
    exact = {w for w, prefix in items if not prefix}
    prefixes = tuple(w for w, prefix in items if prefix)
    offset = 0
    for text, weight in ((body, TEXT_WEIGHT), (thinking, THINKING_WEIGHT)):
        if not text:
            continue
        tokens = text.lower().split()
        for i, token in enumerate(tokens):
            if token in exact or (prefixes and token.startswith(prefixes)):
                positions = found.setdefault(token, [])
                position = min(offset + i + 1, _MAX_POSITION)
                if len(positions) < _MAX_POSITIONS and (
                    not positions or positions[-1][0] != position
                ):
                    positions.append((position, weight))
        offset = min(offset + len(tokens), _MAX_POSITION)
    result: list[list[Positions]] = []
    for word, prefix in items:
        if prefix:
            matched = sorted((w for w in found if w.startswith(word)), key=_bytes)
            result.append([found[w] for w in matched])
        else:
            result.append([found[word]] if word in found else [])
    return result


def _count(text: str, word: str) -> int:
    """How many words of ``text`` (lowered index text: words between spaces) are
    ``word``. Found with ``str.find`` and checked at the spaces: splitting the text into
    words cost ~4 µs a record of 500 characters, a pattern with look-arounds ~16 µs (no
    literal to skip to), this ~1 µs."""
    found = 0
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        if (at == 0 or text[at - 1] == " ") and (end == len(text) or text[end] == " "):
            found += 1
        at = text.find(word, end)
    return found


def _count_prefixed(text: str, prefix: str, counts: dict[str, list[int]], side: int) -> None:
    """Counts into ``counts[word][side]`` the words of ``text`` that begin with
    ``prefix``, as :func:`_count` finds them."""
    at = text.find(prefix)
    while at >= 0:
        end = text.find(" ", at)
        end = len(text) if end < 0 else end
        if at == 0 or text[at - 1] == " ":
            counts.setdefault(text[at:end], [0, 0])[side] += 1
        at = text.find(prefix, end)


def _occurrence_sum(in_text: int, in_thinking: int) -> float:
    """ts_rank's sum for one record word: ``weight / j²`` for its j-th occurrence, the
    text's first (a tsvector numbers the thinking after the text), 256 at most. The
    first occurrence weighs the most, so tsrank.c's correction for the heaviest one
    cancels."""
    text_part = min(in_text, _MAX_POSITIONS)
    every = min(in_text + in_thinking, _MAX_POSITIONS)
    resj = _SQUARES[text_part] * TEXT_WEIGHT
    resj += (_SQUARES[every] - _SQUARES[text_part]) * THINKING_WEIGHT
    return resj / _ZETA_2


def _rank_or_counted(body: str, thinking: str, items: tuple[tuple[str, bool], ...]) -> float:
    """:func:`_rank_or` from counts alone, for a record short enough that no position
    reaches 16383."""
    res = 0.0
    for word, prefix in items:
        if not prefix:
            in_text, in_thinking = _count(body, word), _count(thinking, word) if thinking else 0
            if in_text or in_thinking:
                res += _occurrence_sum(in_text, in_thinking)
            continue
        counts: dict[str, list[int]] = {}
        _count_prefixed(body, word, counts, 0)
        if thinking:
            _count_prefixed(thinking, word, counts, 1)
        for in_text, in_thinking in counts.values():
            res += _occurrence_sum(in_text, in_thinking)
    return res / len(items) if items else 0.0


def _rank_or(entries: list[list[Positions]]) -> float:
    res = 0.0
    for item in entries:
        for positions in item:
            resj, wjm, jm = 0.0, -1.0, 0
            for j, (_, weight) in enumerate(positions):
                resj += weight / ((j + 1) * (j + 1))
                if weight > wjm:
                    wjm, jm = weight, j
            res += (wjm + resj - wjm / ((jm + 1) * (jm + 1))) / _ZETA_2
    return res / len(entries) if entries else 0.0


def _closeness(dist: int) -> float:
    """tsrank.c's ``word_distance``."""
    return _FAR if dist > _NEAR else 1.0 / (1.005 + 0.05 * math.exp(dist / 1.5 - 2))


def _first_pair(positions: Positions, other: Positions) -> float | None:
    """What the first pair ts_rank meets between two words' occurrences weighs."""
    for position, weight in positions:
        for p, w in other:
            if position != p:
                return math.sqrt(weight * w * _closeness(abs(position - p)))
    return None


def _rank_and(entries: list[list[Positions]]) -> float:
    res = -1.0
    first: float | None = None
    seen: list[Positions | None] = [None] * len(entries)
    for i, item in enumerate(entries):
        for positions in item:
            seen[i] = positions
            for k in range(i):
                other = seen[k]
                if other is None:
                    continue
                if first is None:
                    first = _first_pair(positions, other)
                # Only the pairs at most _NEAR apart: one further apart weighs
                # sqrt(w1 * w2 * 1e-30), below what a 4-byte float adds to a rank; it
                # counts alone only as the first pair of a record that has no other.
                at = [p for p, _ in other]
                for position, weight in positions:
                    lo = bisect_left(at, position - _NEAR)
                    hi = bisect_right(at, position + _NEAR)
                    for p, w in other[lo:hi]:
                        if p != position:
                            cur = math.sqrt(weight * w * _closeness(abs(position - p)))
                            res = cur if res < 0 else 1.0 - (1.0 - res) * (1.0 - cur)
    if res < 0 and first is not None:
        res = first
    return res


def rank(body: str | None, thinking: str | None, query: str) -> float:
    """``ts_rank`` of a record whose indexed text is ``body`` and ``thinking`` for the
    query :func:`rank_query` wrote (see the module's description)."""
    conjunction, items = _read(query)
    # Text, as sessiondb writes the index; anything else (a row written by SQL) as none.
    body = body if type(body) is str else None
    thinking = thinking if type(thinking) is str else None
    if not body and not thinking:
        return 0.0
    or_ranked = not conjunction or len(items) < 2
    if or_ranked and len(body or "") + len(thinking or "") <= _MAX_POSITION:
        # Fewer words than positions: counts suffice (most records, most queries).
        return _float4(_rank_or_counted((body or "").lower(), (thinking or "").lower(), items))
    entries = _occurrences(body, thinking, items)
    # An AND of one distinct word is ranked as an OR (as tsrank.c does).
    res = _rank_or(entries) if or_ranked else _rank_and(entries)
    return _float4(res if res >= 0 else _NONE)
