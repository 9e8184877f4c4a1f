"""Session names from the first user message: no database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiondb.naming import NAME_LENGTH, derive_name, title_of


def test_short_text_is_the_name() -> None:
    assert derive_name("Fix the login bug") == "Fix the login bug"


def test_whitespace_is_collapsed_and_trimmed() -> None:
    assert derive_name("  Fix\n\tthe   login\r\nbug  ") == "Fix the login bug"


@pytest.mark.parametrize("text", ["", "   ", "\n\t\r\n", "\x00\x01\x1b"])
def test_empty_text_gives_no_name(text: str) -> None:
    assert derive_name(text) is None


def test_exactly_the_limit_is_kept_whole() -> None:
    assert derive_name("a" * NAME_LENGTH) == "a" * NAME_LENGTH


def test_long_text_is_cut_at_a_word_boundary() -> None:
    text = "Please refactor the session store so that appends never block readers at all"
    name = derive_name(text)
    assert name == "Please refactor the session store so that appends…"
    assert len(name) <= NAME_LENGTH + 1
    assert text.startswith(name.removesuffix("…"))


def test_a_long_word_is_cut_hard() -> None:
    assert derive_name("x" * 80) == "x" * NAME_LENGTH + "…"


def test_a_boundary_too_early_is_ignored() -> None:
    # The only space is in the first half: cutting there would lose too much.
    assert derive_name("ab " + "c" * 80) == ("ab " + "c" * 80)[:NAME_LENGTH] + "…"


def test_trailing_punctuation_is_dropped_before_the_ellipsis() -> None:
    assert derive_name("Fix the bug, please. " * 5) == (
        "Fix the bug, please. Fix the bug, please. Fix the…"
    )
    assert derive_name("word, " * 20) == "word, word, word, word, word, word, word, word…"


def test_custom_limit() -> None:
    assert derive_name("hello world foo", limit=8) == "hello…"
    assert derive_name("hello world foo", limit=100) == "hello world foo"


def test_control_characters_are_dropped() -> None:
    assert derive_name("nul\x00here and\x07 bell") == "nulhere and bell"
    assert derive_name("\x1b[31mred\x1b[0m") == "[31mred[0m"


def test_lone_surrogates_are_dropped_and_the_name_is_storable() -> None:
    name = derive_name("lone \ud800 surrogate \udfff here")
    assert name == "lone surrogate here"
    name.encode("utf-8")  # would raise on a lone surrogate


def test_non_ascii_text_is_kept() -> None:
    assert derive_name("Résumé für Jürgen — 日本語のテスト") == "Résumé für Jürgen — 日本語のテスト"


def test_leading_blank_lines_do_not_hide_the_text() -> None:
    assert derive_name("\n" * 300 + "The actual question") == "The actual question"


# -- titles of imported sessions (title_of) ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Fix the login bug", "Fix the login bug"),
        (
            "<command-message>init is analyzing your codebase…</command-message>\n"
            "<command-name>/init</command-name>\n<command-args></command-args>",
            None,
        ),
        (
            "<command-name>/review</command-name>\nreview the parser please",
            "review the parser please",
        ),
        ("<system-reminder>\nhook output\n</system-reminder>\nstart phoenix", "start phoenix"),
        ("<permissions instructions>\nsandbox…\n</permissions instructions>", None),
        ("<environment_context>\n  <cwd>/x</cwd>\n</environment_context>", None),
        ("<skills_instructions>\n## Skills\nA skill is cut short…", None),  # never closed
        (
            "# Context from my IDE setup:\n\n## Open tabs:\n- a.md\n\n"
            "## My request for Codex:\nmigrate the app to prisma",
            "migrate the app to prisma",
        ),
        ("use a <b>bold</b> word", "use a word"),
        ("if a < b and c > d", "if a < b and c > d"),
    ],
)
def test_a_title_leaves_out_the_tools_markup(text: str, title: str | None) -> None:
    assert title_of(text) == title


@given(st.text())
def test_a_title_is_a_name_or_none(text: str) -> None:
    title = title_of(text)
    assert title is None or (title.isprintable() and 0 < len(title) <= NAME_LENGTH + 1)
