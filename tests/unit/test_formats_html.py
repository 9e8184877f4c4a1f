"""The HTML writer without a database: any stored text comes out as text (fuzzed), the
page is built only of its own tags, images only of safe types, and the format is one
export writes and import never reads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers.html_pages import PNG, attrs_of, parse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb.errors import InvalidInputError
from sessiondb.formats import EXPORT_ONLY, FORMATS, detect, export_format, get_format
from sessiondb.formats.html import CSP, HtmlFormat, clipped, text
from sessiondb.formats.lines import entry_label
from sessiondb.formats.stored import StoredRecord
from sessiondb.models import Metrics, SessionInfo
from sessiondb.terminal import shown

SID = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def info(name: str | None = "a session", **fields: Any) -> SessionInfo:
    values: dict[str, Any] = {
        "id": SID,
        "namespace": "default",
        "name": name,
        "created_at": AT,
        "last_message_at": AT,
        "model": None,
        "message_count": 0,
        "last_seq": 0,
        "source": "interactive",
        "cron_job_id": None,
        "system_prompt_override": None,
        "metrics": Metrics(),
        "metadata": None,
        "parent_id": None,
        "fork_seq": None,
    }
    values.update(fields)
    return SessionInfo(**values)


def record(seq: int, kind: str, data: dict[str, Any]) -> StoredRecord:
    return StoredRecord(SID, seq, kind, AT, None, data)


def page(tmp_path: Path, records: list[StoredRecord], **fields: Any) -> str:
    (path,) = HtmlFormat().write_stored(info(**fields), records, tmp_path)
    return path.read_text(encoding="utf-8")


# Text a browser would parse as markup if it were written raw, and everything else.
hostile = st.text(alphabet=st.sampled_from("<>&\"'/=:; scriptimgonerrorjavascript\n\t\x00\u202e"))
any_text = st.one_of(hostile, st.text())


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=any_text, name=any_text, tool=any_text, extra=any_text)
def test_stored_text_comes_out_as_text(
    tmp_path: Path, body: str, name: str, tool: str, extra: str
) -> None:
    records = [
        record(1, "message", {"role": "user", "content": [{"type": "text", "text": body}]}),
        record(
            2,
            "message",
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": body},
                    {"type": "toolCall", "id": tool, "name": tool, "arguments": {extra: body}},
                    {"type": extra or "x", "value": body},
                ],
            },
        ),
        record(
            3,
            "message",
            {
                "role": "toolResult",
                "toolCallId": tool,
                "content": [{"type": "text", "text": extra}],
            },
        ),
        record(4, "entry", {"line": {"type": extra, body: name}}),
        record(5, "compaction", {"summary": body, "firstKeptSeq": 2, "readFiles": [extra]}),
        record(6, "tombstone", {"targetSeq": 4, "reason": name}),
    ]
    html_page = page(tmp_path, records, name=name, model=extra)
    parts = parse(html_page)
    assert parts.strange() == []
    assert len(parts.style) == 1 and len([t for t, _ in parts.tags if t == "style"]) == 1
    csp = [a["content"] for a in attrs_of(parts, "meta") if a.get("http-equiv")]
    assert csp == [CSP]
    # Each string is in the page's text exactly as shown() makes it visible.
    for value in (body, extra):
        assert shown(value, one_line=False) in parts.body_text
    assert shown(name) in parts.body_text
    # Every < and & of the page's text came from an escape: the raw page has none but
    # the page's own.
    assert (
        html_page.count("<")
        == len(parts.tags) + sum(1 for t, _ in parts.tags if t not in ("meta", "img")) + 1
    )  # the doctype


def test_text_escapes_markup_and_makes_controls_visible() -> None:
    assert text("<b>&'\"") == "&lt;b&gt;&amp;&#x27;&quot;"
    assert text("a\x1b[2J\u202eb\ud800") == "a\\x1b[2J\\u202eb\\ud800"
    assert text("line\nnext") == "line\nnext" and text("x\ny", one_line=True) == "x\\ny"


@pytest.mark.parametrize(
    ("mime", "data", "shown_inline"),
    [
        ("image/png", PNG, True),
        ("image/jpeg", PNG, True),
        ("IMAGE/PNG", PNG, True),
        ("image/svg+xml", PNG, False),
        ("text/html", PNG, False),
        ("image/png", 'x" onerror="alert(1)', False),
        ("image/png", "abc", False),  # not a whole number of base64 quads
    ],
)
def test_images_are_inline_only_when_safe(
    tmp_path: Path, mime: str, data: str, shown_inline: bool
) -> None:
    block = {"type": "image", "data": data, "mimeType": mime}
    parts = parse(page(tmp_path, [record(1, "message", {"role": "user", "content": [block]})]))
    srcs = [a["src"] for a in attrs_of(parts, "img")]
    assert srcs == ([f"data:{mime.lower()};base64,{data}"] if shown_inline else [])
    assert parts.strange() == []


def test_html_is_written_never_read(tmp_path: Path) -> None:
    assert "html" in EXPORT_ONLY and "html" not in FORMATS
    assert export_format("html") is EXPORT_ONLY["html"] and export_format("native").name == "native"
    with pytest.raises(InvalidInputError, match="export only"):
        get_format("html")
    with pytest.raises(InvalidInputError, match=r"known formats: .*html"):
        export_format("pdf")
    written = HtmlFormat().write_stored(info(), [], tmp_path)
    assert detect(written[0]) is None
    with pytest.raises(InvalidInputError, match="export only"):
        list(HtmlFormat().read(written[0]))


@pytest.mark.parametrize(
    ("entry", "label"),
    [
        ({"format": "claude-code", "line": {"type": "progress"}}, "progress"),
        (
            {"format": "claude-code", "line": {"type": "file-history-snapshot"}},
            "file-history-snapshot",
        ),
        (
            {"format": "claude-code", "line": {"type": "system", "subtype": "compact_boundary"}},
            "system: compact_boundary",
        ),
        ({"format": "codex", "line": {"type": "turn_context", "payload": {}}}, "turn_context"),
        (
            {"format": "codex", "line": {"type": "event_msg", "payload": {"type": "token_count"}}},
            "event_msg: token_count",
        ),
        ({"format": "gemini", "line": {"$set": {"summary": "x"}}}, "$set"),
        ({"format": "gemini", "line": {"sessionId": "s", "startTime": "t"}}, "session metadata"),
        ({"format": "pi", "rawLine": "{not json", "error": "bad"}, "unreadable line"),
        ({"type": "model_change"}, "model_change"),
        ({"something": 1}, "entry"),
        ({"line": [1, 2]}, "entry"),
        (None, "entry"),
    ],
)
def test_entries_are_named_by_their_type(entry: Any, label: str) -> None:
    assert entry_label(entry) == label


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(name=st.text())
def test_export_format_gives_a_format_or_a_typed_error(name: str) -> None:
    try:
        fmt = export_format(name)
    except InvalidInputError as exc:
        assert repr(name) in str(exc)
    else:
        assert fmt.name == name


@given(entry=json_values)
def test_any_entry_has_a_label(entry: Any) -> None:
    label = entry_label(entry)
    assert isinstance(label, str) and label


@given(value=any_text, limit=st.integers(min_value=0, max_value=400), one_line=st.booleans())
def test_a_clipped_text_fits_its_bytes_and_is_a_whole_escaped_prefix(
    value: str, limit: int, one_line: bool
) -> None:
    """What a page cuts (:func:`clipped`): at most ``limit`` bytes of UTF-8, the escape
    of a prefix of the text (never half a character reference), and the count of what
    was left out; the whole text when it fits."""
    out, left_out = clipped(value, limit, one_line=one_line)
    assert len(out.encode()) <= limit
    kept = value[: len(value) - left_out]
    assert out == text(kept, one_line=one_line)
    if len(text(value, one_line=one_line).encode()) <= limit:
        assert left_out == 0
