"""JSON text for payloads, exact for every string a transcript can hold.

orjson is fast but refuses lone surrogates (``"\\ud800"``) and integers over 64 bits,
both of which occur in real transcripts; for those values we fall back to the standard
library, escaping to ASCII so the stored text is valid UTF-8. ``\\u0000`` is always
written as an escape, so Postgres ``text`` can hold it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> str:
    """Serialise ``value`` to compact JSON text that Postgres and SQLite can store."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def loads(text: str | bytes) -> Any:
    """Parse JSON text written by :func:`dumps` (or any valid JSON)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
