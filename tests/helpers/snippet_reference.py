"""The snippet cutter of sessiondb.search_query as it was before it was made faster
(b043f62), kept verbatim as the reference the fast one must agree with, character for
character and span for span (tests/unit/test_search_query.py)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from sessiondb.search_query import Query

SNIPPET_WORDS = 30
_LEAD_WORDS = 8
_NONSPACE = re.compile(r"\S")
_LEFT_OUT = "… "
_WORD_CHAR = r"[^\W_]"


class _Patterns(NamedTuple):
    any: re.Pattern[str]
    ascii: re.Pattern[str] | None

    def for_text(self, text: str) -> tuple[re.Pattern[str], str]:
        if self.ascii is not None and text.isascii():
            return self.ascii, text.lower()
        return self.any, text


@lru_cache(maxsize=64)
def _pattern(query: Query) -> _Patterns:
    words: list[tuple[str, str]] = []
    for term in query.terms():
        last = len(term.words) - 1
        for i, word in enumerate(term.words):
            tail = _WORD_CHAR + "*" if term.prefix and i == last else f"(?!{_WORD_CHAR})"
            words.append((word, tail))
    words.sort(key=lambda w: len(re.escape(w[0]) + w[1]), reverse=True)
    any_case = re.compile("|".join(re.escape(w) + t for w, t in words), re.IGNORECASE)
    if not all(w.isascii() for w, _ in words):
        return _Patterns(any_case, None)
    return _Patterns(any_case, re.compile("|".join(re.escape(w.lower()) + t for w, t in words)))


def _first_start(patterns: _Patterns, text: str, end: int) -> int | None:
    pattern, haystack = patterns.for_text(text)
    at = 0
    while (m := pattern.search(haystack, at, end)) is not None:
        start = m.start()
        if start == 0 or not text[start - 1].isalnum():
            return start
        at = m.end()
    return None


def _spans(patterns: _Patterns, text: str) -> tuple[tuple[int, int], ...]:
    pattern, haystack = patterns.for_text(text)
    return tuple(
        [
            m.span()
            for m in pattern.finditer(haystack)
            if m.start() == 0 or not text[m.start() - 1].isalnum()
        ]
    )


def snippet(
    text: str, query: Query, limit: int = 100_000
) -> tuple[str, tuple[tuple[int, int], ...]]:
    pattern = _pattern(query)
    at = _first_start(pattern, text, limit) or 0
    begin = max(0, at - 300)
    head = text[begin:at].split()
    glued = bool(head) and not text[at - 1].isspace()
    lead = head[-(_LEAD_WORDS + 1) :] if glued else head[-_LEAD_WORDS:]
    end = at + 1_200
    tail = text[at:end].split(None, SNIPPET_WORDS)
    more = len(tail) > SNIPPET_WORDS or (end < len(text) and _NONSPACE.search(text, end))
    tail = tail[:SNIPPET_WORDS]
    if glued and tail and not text[at].isspace():
        tail[0] = lead.pop() + tail[0]
    words = (lead + tail)[:SNIPPET_WORDS]
    if len(lead) + len(tail) > SNIPPET_WORDS:
        more = True
    shown = " ".join(words)
    spans = _spans(pattern, shown)
    if len(head) > len(lead) + glued or (begin > 0 and _NONSPACE.search(text, 0, begin)):
        shown = _LEFT_OUT + shown
        spans = tuple([(a + len(_LEFT_OUT), b + len(_LEFT_OUT)) for a, b in spans])
    if more:
        shown += " …"
    return shown, spans
