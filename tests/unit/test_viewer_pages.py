"""The viewer's pages without a server: search snippets marked and escaped, whatever the
spans say; session links only from checked ids."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiondb.terminal import shown
from sessiondb.viewer.pages import marked, session_href


class _Marks(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []
        self.marked: list[str] = []
        self.inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag if not attrs else f"{tag} {attrs}")
        self.inside = tag == "mark"

    def handle_endtag(self, tag: str) -> None:
        self.tags.append(f"/{tag}")
        self.inside = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.inside:
            self.marked.append(data)


def _parse(html: str) -> _Marks:
    parser = _Marks()
    parser.feed(html)
    parser.close()
    return parser


def test_spans_are_marked_and_the_rest_escaped() -> None:
    snippet = "say <script>alert(1)</script> & zebra <b>zebra</b>"
    start = snippet.index("zebra")
    html = marked(snippet, [(start, start + 5), (4, 12)])
    assert html.startswith("say <mark>&lt;script&gt;</mark>alert(1)")
    assert "<mark>zebra</mark> &lt;b&gt;zebra&lt;/b&gt;" in html
    parts = _parse(html)
    assert parts.tags == ["mark", "/mark", "mark", "/mark"]
    assert "".join(parts.text) == snippet


def test_bad_spans_are_clipped_merged_or_dropped() -> None:
    assert marked("abcdef", [(-5, 2), (1, 3), (5, 99), (4, 4), (3, 1)]) == (
        "<mark>abc</mark>de<mark>f</mark>"
    )
    assert marked("", [(0, 10)]) == ""
    assert marked("a\x1b[31mb\u202e", [(0, 1)]) == "<mark>a</mark>\\x1b[31mb\\u202e"


@given(
    snippet=st.text(max_size=80),
    spans=st.lists(st.tuples(st.integers(-100, 100), st.integers(-100, 100)), max_size=6),
)
def test_any_snippet_and_spans_give_text_and_marks_only(
    snippet: str, spans: list[tuple[int, int]]
) -> None:
    parts = _parse(marked(snippet, spans))
    assert set(parts.tags) <= {"mark", "/mark"}
    assert "".join(parts.text) == shown(snippet, one_line=False)


def test_only_session_ids_become_links() -> None:
    assert session_href("01J9Z3K7Q8R2V5X4W6Y0A1B2C3") == "/s/01J9Z3K7Q8R2V5X4W6Y0A1B2C3"
    for bad in ("javascript:alert(1)", "//evil.example", "01J9Z3K7Q8R2V5X4W6Y0A1B2C", ""):
        with pytest.raises(ValueError):
            session_href(bad)
