"""The search query parser, its two renderings, the text the index takes and the snippets:
pure functions, no database."""

from __future__ import annotations

import pytest
from helpers import snippet_reference
from hypothesis import given
from hypothesis import strategies as st

from sessiondb import InvalidQueryError, SearchHit
from sessiondb.search_query import (
    MAX_QUERY_CHARS,
    Query,
    Term,
    parse,
    snippet,
    to_fts5,
    to_tsquery,
)
from sessiondb.search_text import MAX_INDEXED_CHARS, index_source, index_text, message_text


def test_words_phrases_exclusions_or_and_prefixes() -> None:
    q = parse('deploy "blue green" -staging canary OR shadow roll*')
    assert q == Query(
        groups=(
            (Term(("deploy",)),),
            (Term(("blue", "green")),),
            (Term(("canary",)), Term(("shadow",))),
            (Term(("roll",), prefix=True),),
        ),
        excluded=(Term(("staging",)),),
    )
    assert to_tsquery(q, thinking=True) == (
        "('deploy') & (('blue' <-> 'green')) & ('canary' | 'shadow') & ('roll':*) & !'staging'"
    )
    assert to_tsquery(q, thinking=False) == (
        "('deploy':D) & (('blue':D <-> 'green':D)) & ('canary':D | 'shadow':D) & ('roll':*D) "
        "& !'staging':D"
    )
    assert to_fts5(q, thinking=True) == (
        '(("deploy") AND ("blue green") AND ("canary" OR "shadow") AND ("roll" *)) NOT "staging"'
    )
    assert to_fts5(q, thinking=False).startswith("body : (")


def test_a_word_with_punctuation_is_the_phrase_of_its_parts() -> None:
    assert parse("main.py").groups == ((Term(("main", "py")),),)
    assert parse("foo_bar-baz*").groups == ((Term(("foo", "bar", "baz"), prefix=True),),)
    # The index splits text the same way.
    assert index_text("see main.py, foo_bar\x00baz\ud800!").split() == [
        "see",
        "main",
        "py",
        "foo",
        "bar",
        "baz",
    ]
    assert index_text("see main.py, foo_bar\x00baz!").split() == [
        "see",
        "main",
        "py",
        "foo",
        "bar",
        "baz",
    ]


@pytest.mark.parametrize(
    "hostile",
    [
        'NEAR("a" "b", 3)',
        '"unclosed phrase',
        "a^b ^c",
        "text:foo body:bar {body thinking}:x",
        "a AND b NOT c",
        "\x00nul\x00",
        "émoji 🎉 中文字 ünïcode",
        "'quote' \\back\\slash ;drop table",
        "col:(x OR y)",
    ],
)
def test_hostile_text_is_only_ever_quoted_words(hostile: str) -> None:
    q = parse(hostile)
    fts = to_fts5(q, thinking=True)
    ts = to_tsquery(q, thinking=True)
    for term in [*q.terms(), *q.excluded]:
        for word in term.words:
            assert word.isalnum()
            assert f'"{word}' in fts or f" {word}" in fts
            assert f"'{word}'" in ts
    # Every quote in the FTS5 text is one of the quotes it wrote around words.
    assert fts.count('"') == 2 * len([*q.terms(), *q.excluded])


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "no word"),
        ("   ", "no word"),
        ("!!! ... ---", "no word"),
        ('"', "no word"),
        ("*", "no word"),
        ("\x00", "no word"),
        ("-secret", "only words to exclude"),
        ("-a -b", "only words to exclude"),
        ("x" * (MAX_QUERY_CHARS + 1), "characters long"),
        (" ".join(["w"] * 65), "words"),
        (None, "must be a string"),
        (b"bytes", "must be a string"),
    ],
)
def test_bad_queries_are_refused(query: object, reason: str) -> None:
    with pytest.raises(InvalidQueryError, match=reason):
        parse(query)


def test_a_stray_or_is_a_word() -> None:
    assert parse("OR cats").groups == ((Term(("or",)),), (Term(("cats",)),))
    assert parse("cats OR").groups == ((Term(("cats",)),), (Term(("or",)),))
    assert parse("cats OR -dogs").excluded == (Term(("dogs",)),)
    assert parse("cats or dogs").groups == (
        (Term(("cats",)),),
        (Term(("or",)),),
        (Term(("dogs",)),),
    )


@given(st.text(max_size=200))
def test_any_text_parses_or_is_refused_typed(text: str) -> None:
    try:
        q = parse(text)
    except InvalidQueryError:
        return
    assert q.groups
    to_fts5(q, thinking=False)
    to_tsquery(q, thinking=False)


def test_what_the_index_takes_of_a_message() -> None:
    wire = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "private reasoning"},
            {"type": "text", "text": "Running it."},
            {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"cmd": ["ls", 3]}},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
        ],
    }
    assert message_text(wire) == ("Running it.\nbash\ncmd\nls\n3", "private reasoning")

    def words(source: object) -> object:
        assert isinstance(source, tuple)
        return tuple(None if part is None else part.split() for part in source)

    assert words(index_source("message", wire)) == (
        ["Running", "it", "bash", "cmd", "ls", "3"],
        ["private", "reasoning"],
    )
    assert words(index_source("compaction", {"summary": "Goal: ship"})) == (["Goal", "ship"], None)
    assert index_source("tombstone", {"targetSeq": 1}) is None
    assert index_source("entry", {"type": "progress"}) is None
    result = {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": "ok"}
    assert words(index_source("message", result)) == (["bash", "ok"], None)
    huge = index_source("message", {"role": "user", "content": "word " * MAX_INDEXED_CHARS})
    assert huge is not None and len(huge[0]) <= MAX_INDEXED_CHARS


def test_snippet_marks_whole_words_and_prefixes_case_insensitively() -> None:
    q = parse("Deploy roll*")
    text = (
        "before " * 50 + "We DEPLOYED nothing; deploy the rollout and redeploy.\n" + "after " * 50
    )
    shown, spans = snippet(text, q)
    marked = [shown[a:b] for a, b in spans]
    assert marked == ["deploy", "rollout"]
    assert shown.startswith("… ") and shown.endswith(" …")
    assert len(shown.split()) <= 32
    hit = SearchHit(
        session_id="s", seq=1, kind="message", role="user", timestamp="2026-01-01T00:00:00Z",
        snippet=shown, spans=spans, rank=1.0,
    )  # fmt: skip
    assert "[deploy] the [rollout]" in hit.marked()
    assert "<deploy>" in hit.marked("<", ">")


def test_snippet_of_a_phrase_marks_its_words_and_without_a_match_starts_the_text() -> None:
    shown, spans = snippet("read main.py now", parse('"main py"'))
    assert [shown[a:b] for a, b in spans] == ["main", "py"]
    shown, spans = snippet("nothing here at all", parse("absent"))
    assert shown == "nothing here at all" and spans == ()


def test_snippet_marks_the_same_words_in_ascii_and_other_text() -> None:
    # An ASCII text is searched lowered, any other with IGNORECASE: the same marks.
    for text in ("we DEPLOY now, Deploy again", "we DEPLOY now, Deploy again, café"):
        shown, spans = snippet(text, parse("deploy"))
        assert [shown[a:b] for a, b in spans] == ["DEPLOY", "Deploy"]
    shown, spans = snippet("at the CAFÉ, deploy", parse("café Deploy"))  # a non-ASCII word
    assert [shown[a:b] for a, b in spans] == ["CAFÉ", "deploy"]
    shown, spans = snippet("redeploy deployed", parse("deploy"))
    assert spans == ()  # not word starts, not whole words


# Texts made of few distinct words, so that queries hit them: whitespace of every kind,
# punctuation glued to words, other scripts, and case.
_SNIPPET_WORDS = ["deploy", "Deploy", "DEPLOYED", "roll", "rollout", "café", "CAFÉ", "main",
                  "py", "x", "a1", "ß", "İ", "k", "\u212a", "(deploy", "main.py,", "re_deploy",
                  "…", "\u00a0", "--", "42"]  # fmt: skip
_SPACES = [" ", "  ", "\n", "\t", " \r\n ", "\u2003", "\u00a0", "\x1c"]


@st.composite
def _texts(draw: st.DrawFn) -> str:
    n = draw(st.integers(0, 160))
    parts = []
    for _ in range(n):
        parts.append(draw(st.sampled_from(_SNIPPET_WORDS) | st.text(max_size=6)))
        parts.append(draw(st.sampled_from(_SPACES) | st.just("")))
    return "".join(parts)


@given(
    _texts(),
    st.sampled_from(["deploy", "roll*", "café", '"main py"', "x OR k", "ß", "a1 -roll", "42*"]),
    st.sampled_from([100_000, 5, 40]),
)
def test_snippet_is_the_reference_cut_character_for_character(
    text: str, query: str, limit: int
) -> None:
    # The fast cutter (only the words shown split off the text) against the plain one it
    # replaced, kept in tests/helpers: the same snippet and the same spans.
    q = parse(query)
    assert snippet(text, q, limit) == snippet_reference.snippet(text, q, limit)


@pytest.mark.parametrize("padding", [0, 1, 250, 299, 300, 301, 1_500])
@pytest.mark.parametrize("words_before", [0, 7, 8, 9, 10, 40])
@pytest.mark.parametrize("words_after", [0, 20, 21, 22, 23, 30, 31, 200])
def test_snippet_edges_agree_with_the_reference(
    padding: int, words_before: int, words_after: int
) -> None:
    # Around the edges the fast cutter counts differently: the words kept before the
    # match (8, or 9 with a glued one), the room left after it, the 300 characters
    # looked back and the 1,200 looked ahead.
    for glue in ("", "(", "x."):
        text = (
            " " * padding
            + "w " * words_before
            + glue
            + "deploy"
            + " a" * words_after
            + " " * (padding % 7)
        )
        q = parse("deploy")
        assert snippet(text, q) == snippet_reference.snippet(text, q)
