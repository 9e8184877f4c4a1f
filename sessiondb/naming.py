"""Session names derived from the first user message."""

from __future__ import annotations

import re

NAME_LENGTH = 50
_SPACE = re.compile(r"\s+")


def derive_name(text: str, limit: int = NAME_LENGTH) -> str | None:
    """About ``limit`` characters of ``text``, cut at a word boundary; ``None`` if empty.

    Control characters and lone surrogates are dropped, so the name is always storable.
    """
    # Only the start matters, and this runs on every append that carries a user message:
    # clean a slice, and a longer one only if cleaning left too little.
    text = text.lstrip()
    size = limit * 4
    while True:
        cleaned = _SPACE.sub(" ", text[:size]).strip()
        if not cleaned.isprintable():
            cleaned = _SPACE.sub(" ", "".join(ch for ch in cleaned if ch.isprintable())).strip()
        if len(cleaned) > limit or size >= len(text):
            break
        size *= 4
    if not cleaned:
        return None
    if len(cleaned) <= limit:
        return cleaned
    cut = cleaned.rfind(" ", 0, limit + 1)
    head = cleaned[:cut] if cut >= limit // 2 else cleaned[:limit]
    return (head.rstrip(" ,.;:-") or head) + "…"


# An element of the markup agent tools wrap around what they add to a user message
# (<command-message>…</command-message>, <system-reminder>, <environment_context>,
# <permissions instructions>): a tag name of words, and the same name closing it.
_ELEMENT = re.compile(r"<([A-Za-z][\w.:-]*(?: [A-Za-z][\w.:-]*)*)>.*?</\1\s*>", re.DOTALL)
# An opening tag at the start of what is left, never closed (a message cut short).
_UNCLOSED = re.compile(r"\s*<[A-Za-z][\w.:-]*(?: [A-Za-z][\w.:-]*)*>")
# What Codex's IDE extension puts before the user's own words.
_IDE_REQUEST = "## My request for Codex:"
# Markup is looked for in the first characters only: a title needs no more.
_TITLE_SCAN = 20_000


def title_of(text: str, limit: int = NAME_LENGTH) -> str | None:
    """A session title from the text of a user message: :func:`derive_name` of what is
    left once the tools' markup elements are removed (``<command-message>…
    </command-message>``, ``<system-reminder>…</system-reminder>``, an unclosed one to
    the end), and the context Codex's IDE extension puts before the user's request;
    ``None`` when nothing is left, so that the next user message can name the session."""
    text = text[:_TITLE_SCAN]
    request = text.find(_IDE_REQUEST)
    if request >= 0:
        text = text[request + len(_IDE_REQUEST) :]
    text = _ELEMENT.sub(" ", text)
    if _UNCLOSED.match(text):
        return None
    return derive_name(text, limit)
