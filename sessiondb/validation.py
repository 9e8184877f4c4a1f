"""Checks of values before they reach SQL: plain functions, no I/O."""

from __future__ import annotations

from typing import Any

from . import jsoncodec
from .errors import InvalidInputError


def column_text(value: Any, what: str, *, optional: bool = True) -> str | None:
    """A string for an indexed column: refuse what the databases cannot store."""
    if value is None:
        if optional:
            return None
        raise InvalidInputError(f"{what} is required")
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInputError(f"{what} must not contain NUL characters: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} must not contain lone surrogates: {value!r}") from exc
    return value


# A key is the caller's own address for a session. 512 characters, and at most 1,536
# bytes of UTF-8, so that with a namespace of 255 characters the entry of the unique
# (namespace, key) index stays under Postgres's btree limit of 2,704 bytes.
MAX_KEY_CHARS = 512
MAX_KEY_BYTES = 1536


def session_key(value: Any) -> str:
    """A session key: a non-empty string of at most :data:`MAX_KEY_CHARS` characters that
    a text column holds exactly (no NUL, no lone surrogate). Kept as given: case,
    spaces and Unicode normalisation all count."""
    key = column_text(value, "key", optional=False)
    assert key is not None
    if not key:
        raise InvalidInputError("key must not be empty")
    if len(key) > MAX_KEY_CHARS or len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidInputError(
            f"key must be at most {MAX_KEY_CHARS} characters ({MAX_KEY_BYTES} bytes of "
            f"UTF-8), got {len(key)} characters: {key[:40]!r}…"
        )
    return key


def to_json(value: Any, what: str) -> str:
    """JSON text for a payload; a value JSON cannot hold (a set, a tuple key) is bad input."""
    try:
        return jsoncodec.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} cannot be stored as JSON: {exc}") from exc
    except RecursionError:
        raise InvalidInputError(f"{what} is nested too deeply to store") from None


def strict_int(value: Any, what: str, *, minimum: int | None = None) -> int:
    """An int (not a bool) within 64 bits and at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an int, got {value!r}")
    low = -(2**63) if minimum is None else minimum
    if not low <= value < 2**63:
        bound = f">= {minimum} and " if minimum is not None else ""
        raise InvalidInputError(f"{what} must be {bound}below 2**63, got {value!r}")
    return value


def check_record_size(payload: str, limit: int, what: str) -> None:
    """Refuse a record whose stored JSON is over ``limit`` bytes (UTF-8)."""
    if len(payload) <= limit // 4:  # at most 4 bytes a character: no need to count
        return
    size = len(payload.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidInputError(
            f"{what} is {size} bytes as stored, over the store's max_record_bytes of {limit}"
        )
