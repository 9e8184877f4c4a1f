"""Search queries: read once in Python, written out in each backend's own syntax.

The syntax is Postgres's ``websearch_to_tsquery``: words (all must match), ``"a quoted
phrase"``, ``-word`` or ``-"a phrase"`` (must not match), ``a OR b``, and ``word*`` (a
prefix). Reading it here, once, makes the same string mean the same on both backends:
:func:`to_tsquery` writes Postgres's ``to_tsquery`` text, :func:`to_fts5` an FTS5
``MATCH`` expression in which every word is quoted, so that FTS5's own operators in
the user's text (``NEAR(``, ``^``, ``col:``, ``*`` in the middle of a word) are inert.

A word is split into runs of letters and digits as the index splits text
(:mod:`sessiondb.search_text`): ``main.py`` is the phrase ``main py``. Plain functions;
no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import NamedTuple

from .errors import InvalidQueryError, brief

#: The longest query taken, in characters.
MAX_QUERY_CHARS = 1_000
#: The most words a query may hold (phrases count each word).
MAX_QUERY_WORDS = 64
#: Words of a snippet.
SNIPPET_WORDS = 30
# Words shown before the first match in a snippet.
_LEAD_WORDS = 8

_RUNS = re.compile(r"[^\W_]+")
_NONSPACE = re.compile(r"\S")
_WORD_CHAR = r"[^\W_]"


@dataclass(frozen=True, slots=True)
class Term:
    """A word, or a phrase (``words`` in order); ``prefix``: its last word is a prefix."""

    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    """Every group must match (a group matches if one of its terms does), and no term
    of ``excluded`` may."""

    groups: tuple[tuple[Term, ...], ...]
    excluded: tuple[Term, ...] = ()

    def terms(self) -> list[Term]:
        """The terms that must or may match (what a snippet marks)."""
        return [t for group in self.groups for t in group]


def _lex(text: str) -> list[tuple[str, str, bool]]:
    """``(kind, text, negated)`` tokens: ``word``, ``phrase`` or ``or``."""
    tokens: list[tuple[str, str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        negated = False
        if ch == "-" and i + 1 < n and not text[i + 1].isspace():
            negated, i = True, i + 1
            ch = text[i]
        if ch == '"':
            end = text.find('"', i + 1)
            end = n if end < 0 else end  # an unclosed quote runs to the end
            tokens.append(("phrase", text[i + 1 : end], negated))
            i = end + 1
            continue
        start = i
        while i < n and not text[i].isspace() and text[i] != '"':
            i += 1
        word = text[start:i]
        kind = "or" if word == "OR" and not negated else "word"
        tokens.append((kind, word, negated))
    return tokens


def _term(kind: str, text: str) -> Term | None:
    words = tuple(_RUNS.findall(text))
    if not words:
        return None
    return Term(words, prefix=kind == "word" and text.endswith("*"))


def parse(text: object) -> Query:
    """The query ``text`` means.

    ``OR`` (upper case) joins the terms either side of it; anywhere else it is the word
    "or". Punctuation on its own is ignored, as the index ignores it.

    Raises:
        InvalidQueryError: not a string, longer than :data:`MAX_QUERY_CHARS`, more than
            :data:`MAX_QUERY_WORDS` words, no word to look for, or only exclusions.
    """
    if not isinstance(text, str):
        raise InvalidQueryError(f"the query must be a string, got {brief(text)}")
    return _parse(text)


# A service asks the same few queries again and again (the next page, a refresh): read
# once, ~7 µs of a search's Python saved. A query that raises is not cached.
@lru_cache(maxsize=256)
def _parse(text: str) -> Query:
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidQueryError(
            f"the query is {len(text)} characters long; the most is {MAX_QUERY_CHARS}"
        )
    # (term, negated) with OR kept as None between them.
    items: list[tuple[Term, bool] | None] = []
    for kind, value, negated in _lex(text):
        if kind == "or":
            items.append(None)
            continue
        term = _term(kind, value)
        if term is not None:
            items.append((term, negated))
    groups: list[list[Term]] = []
    excluded: list[Term] = []
    joining = False  # the previous item was an OR between two positive terms
    previous_positive = False
    for index, item in enumerate(items):
        if item is None:
            following = items[index + 1] if index + 1 < len(items) else None
            if previous_positive and following is not None and not following[1]:
                joining = True
                continue
            item = (Term(("or",)), False)  # a stray OR is the word "or"
        term, negated = item
        if negated:
            excluded.append(term)
            previous_positive = False
        elif joining:
            groups[-1].append(term)
            previous_positive = True
        else:
            groups.append([term])
            previous_positive = True
        joining = False
    words = sum(len(t.words) for g in groups for t in g) + sum(len(t.words) for t in excluded)
    if words > MAX_QUERY_WORDS:
        raise InvalidQueryError(f"the query has {words} words; the most is {MAX_QUERY_WORDS}")
    if not groups:
        reason = "only words to exclude" if excluded else "no word to look for"
        raise InvalidQueryError(f"the query {brief(text)} has {reason}")
    return Query(tuple(tuple(g) for g in groups), tuple(excluded))


# -- Postgres -------------------------------------------------------------------------------

#: The weight of thinking in the ``tsvector`` (the rest of the text has the default, D):
#: a query that leaves thinking out asks for weight D only.
THINKING_WEIGHT = "A"


def _ts_term(term: Term, thinking: bool) -> str:
    weight = "" if thinking else "D"
    last = len(term.words) - 1
    parts = []
    for i, word in enumerate(term.words):
        label = ("*" if term.prefix and i == last else "") + weight
        parts.append(f"'{word}'" + (f":{label}" if label else ""))
    return parts[0] if len(parts) == 1 else "(" + " <-> ".join(parts) + ")"


def to_tsquery(query: Query, thinking: bool) -> str:
    """``query`` as the text of Postgres's ``to_tsquery``; without ``thinking`` every
    word matches the record's text only (weight D), not its thinking."""
    groups = [
        "(" + " | ".join(_ts_term(t, thinking) for t in group) + ")" for group in query.groups
    ]
    groups += [f"!{_ts_term(t, thinking)}" for t in query.excluded]
    return " & ".join(groups)


# -- SQLite FTS5 ----------------------------------------------------------------------------

#: The FTS5 table's column of a record's text (its thinking is in ``thinking``).
BODY_COLUMN = "body"


def _fts_term(term: Term) -> str:
    return '"' + " ".join(term.words) + '"' + (" *" if term.prefix else "")


def to_fts5(query: Query, thinking: bool) -> str:
    """``query`` as an FTS5 ``MATCH`` expression; every word quoted. Without
    ``thinking`` it matches the text column only."""
    expr = " AND ".join(
        "(" + " OR ".join(_fts_term(t) for t in group) + ")" for group in query.groups
    )
    for term in query.excluded:
        expr = f"({expr}) NOT {_fts_term(term)}"
    return expr if thinking else f"{BODY_COLUMN} : ({expr})"


# -- snippets -------------------------------------------------------------------------------


class _Patterns(NamedTuple):
    """A query's words as patterns: for any text, and, when every word is ASCII, for an
    ASCII text lowered (``None`` otherwise)."""

    any: re.Pattern[str]
    ascii: re.Pattern[str] | None

    def for_text(self, text: str) -> tuple[re.Pattern[str], str]:
        """The pattern to search ``text`` with, and the text to search: the same offsets.

        An IGNORECASE search has no literal prefix to skip to and steps through the text
        a character at a time (~3.4 µs for 300 characters before the match); lowering an
        ASCII text and searching it case-sensitively cost ~0.7 µs. On ASCII text the two
        agree: the non-ASCII letters IGNORECASE also takes for ASCII ones are absent."""
        if self.ascii is not None and text.isascii():
            return self.ascii, text.lower()
        return self.any, text


@lru_cache(maxsize=64)
def _pattern(query: Query) -> _Patterns:
    """Every word of the query's terms, as word ends: whole words, or any end after a
    prefix. Where a match starts is checked apart (:func:`_first_start`, :func:`_spans`):
    a look-behind in the pattern made every search three times slower (no literal prefix
    to scan for)."""
    words: list[tuple[str, str]] = []
    for term in query.terms():
        last = len(term.words) - 1
        for i, word in enumerate(term.words):
            tail = _WORD_CHAR + "*" if term.prefix and i == last else f"(?!{_WORD_CHAR})"
            words.append((word, tail))
    # Longest first, so that "abc" wins over its prefix "ab" at the same place.
    words.sort(key=lambda w: len(re.escape(w[0]) + w[1]), reverse=True)
    any_case = re.compile("|".join(re.escape(w) + t for w, t in words), re.IGNORECASE)
    if not all(w.isascii() for w, _ in words):
        return _Patterns(any_case, None)
    return _Patterns(any_case, re.compile("|".join(re.escape(w.lower()) + t for w, t in words)))


def _first_start(patterns: _Patterns, text: str, end: int) -> int | None:
    """Where the first match in ``text[:end]`` that starts a word starts.

    Searched match by match from the end of the last (as ``finditer`` goes), without a
    generator: ~0.6 µs against ~2 µs a snippet. A match's inside is word characters, so
    no match starting a word hides inside one that does not."""
    pattern, haystack = patterns.for_text(text)
    at = 0
    while (m := pattern.search(haystack, at, end)) is not None:
        start = m.start()
        # isalnum() is the pattern's word character: \w but the underscore.
        if start == 0 or not text[start - 1].isalnum():
            return start
        at = m.end()
    return None


def _spans(patterns: _Patterns, text: str, shift: int = 0) -> tuple[tuple[int, int], ...]:
    """``[start, end)`` of every match in ``text`` that starts a word, each moved on by
    ``shift``."""
    pattern, haystack = patterns.for_text(text)
    found = []
    for m in pattern.finditer(haystack):
        start = m.start()
        # isalnum() is the pattern's word character: \w but the underscore.
        if start == 0 or not text[start - 1].isalnum():
            found.append((start + shift, m.end() + shift))
    return tuple(found)


def snippet(
    text: str, query: Query, limit: int = 100_000
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """About :data:`SNIPPET_WORDS` words of ``text`` around the query's first match, with
    whitespace made single spaces and ``…`` where text was left out; and the
    ``[start, end)`` offsets in it of every word the query matches.

    Only the words shown are split off (never the whole text): from the last few hundred
    characters before the match and the first thousand after it.
    """
    return _snippet(_pattern(query), text, limit)


def snippets(query: Query) -> Callable[[str, int], tuple[str, tuple[tuple[int, int], ...]]]:
    """:func:`snippet` for many texts of one search: its pattern looked up once, not for
    each hit."""
    return partial(_snippet, _pattern(query))


def _snippet(pattern: _Patterns, text: str, limit: int) -> tuple[str, tuple[tuple[int, int], ...]]:
    at = _first_start(pattern, text, limit) or 0
    begin = max(0, at - 300)
    # The match may start inside a whitespace-separated word ("(deploy"): glue it back.
    glued = at > 0 and not text[at - 1].isspace()
    # Only the words shown are split off, from the right (the same words as split()'s
    # last ones): splitting all of the few hundred characters before the match made
    # ~50 strings for 8 (~1 µs a hit). More than ``n`` pieces: words were left out.
    n = _LEAD_WORDS + 1 if glued else _LEAD_WORDS
    lead = text[begin:at].rsplit(None, n)
    left_out = len(lead) > n
    if left_out:
        del lead[0]
    joined = lead.pop() if glued else ""
    # As many words after the match as the snippet has room for; one more piece: more.
    room = SNIPPET_WORDS - len(lead)
    end = at + 1_200
    tail = text[at:end].split(None, room)
    more = len(tail) > room
    if more:
        del tail[room]
    elif end < len(text) and _NONSPACE.search(text, end):
        more = True
    if glued:
        tail[0] = joined + tail[0]
    lead += tail
    shown = " ".join(lead)
    # The marks hold no word character: the spans are found in the words alone, which
    # are ASCII when the text is (the fast search of _Patterns.for_text), then shifted.
    if left_out or (begin > 0 and _NONSPACE.search(text, 0, begin)):
        spans = _spans(pattern, shown, len(_LEFT_OUT))
        shown = _LEFT_OUT + shown
    else:
        spans = _spans(pattern, shown)
    if more:
        shown += " …"
    return shown, spans


_LEFT_OUT = "… "
