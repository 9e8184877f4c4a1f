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
