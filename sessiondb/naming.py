"""Session names derived from the first user message."""

from __future__ import annotations

import re

NAME_LENGTH = 50
_SPACE = re.compile(r"\s+")


def derive_name(text: str, limit: int = NAME_LENGTH) -> str | None:
    """About ``limit`` characters of ``text``, cut at a word boundary; ``None`` if empty.

    Control characters and lone surrogates are dropped, so the name is always storable.
    """
    cleaned = (
        "".join(ch for ch in text if ch.isprintable() or ch.isspace())
        .encode("utf-8", "ignore" if _has_surrogate(text) else "strict")
        .decode("utf-8")
    )
    cleaned = _SPACE.sub(" ", cleaned).strip()
    if not cleaned:
        return None
    if len(cleaned) <= limit:
        return cleaned
    cut = cleaned.rfind(" ", 0, limit + 1)
    head = cleaned[:cut] if cut >= limit // 2 else cleaned[:limit]
    return head.rstrip(" ,.;:-") + "…"


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)
