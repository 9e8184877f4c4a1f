"""JSON text for payloads, exact for every value a transcript can hold.

orjson is fast but refuses lone surrogates (``"\\ud800"``) and integers over 64 bits,
both of which occur in real transcripts, and when parsing it turns such integers into
floats. Values orjson refuses are written by the standard library instead, escaped to
ASCII so the text is valid UTF-8, and marked with one leading space (still valid JSON,
and never orjson's output) so that reading them back takes the exact path too.
``\\u0000`` is always written as an escape, so Postgres ``text`` can hold it.
NaN and infinities have no JSON form and are refused.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

_EXACT_MARK = " "


def dumps(value: Any) -> str:
    """Serialise ``value`` to compact JSON text that Postgres and SQLite can store.

    Raises:
        ValueError: ``value`` holds NaN or an infinity, or something JSON cannot express.
    """
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        try:
            return _EXACT_MARK + json.dumps(
                value, ensure_ascii=True, separators=(",", ":"), allow_nan=False
            )
        except TypeError as exc:
            raise ValueError(str(exc)) from exc
    # orjson writes NaN and infinities as null; only then is a walk needed.
    if "null" in text and _has_non_finite(value):
        raise ValueError("NaN and infinities cannot be stored as JSON")
    return text


def loads(text: str | bytes) -> Any:
    """Parse JSON text written by :func:`dumps` (or any valid JSON)."""
    if text[:1] in (_EXACT_MARK, _EXACT_MARK.encode()):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def is_exact_path(text: str) -> bool:
    """Whether ``text`` was written by the standard library (a value orjson refused)."""
    return text[:1] == _EXACT_MARK


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False


def has_surrogate_key(value: Any) -> bool:
    """Whether an object key anywhere in ``value`` holds a lone surrogate, or is not a
    string at all (the text would hold ``"1"`` where the value held ``1``)."""
    if isinstance(value, dict):
        return any(
            not isinstance(k, str) or not _encodable(k) or has_surrogate_key(v)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return any(has_surrogate_key(v) for v in value)
    return False


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
