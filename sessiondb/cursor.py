"""The listing cursor: an opaque token holding the last row's sort key."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from . import jsoncodec
from .errors import InvalidInputError, brief
from .ids import check_session_id


def encode(at: datetime, session_id: str) -> str:
    raw = jsoncodec.dumps([at.isoformat(), session_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: object) -> tuple[datetime, str]:
    """The ``(last_message_at, id)`` a cursor holds.

    Raises:
        InvalidInputError: not a cursor this store made.
    """
    if not isinstance(cursor, str) or len(cursor) > 200:
        raise InvalidInputError(f"invalid cursor {brief(cursor)}: pass back a next_cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, session_id = jsoncodec.loads(raw)
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:  # the stored timestamps are UTC; a naive one cannot compare
            raise ValueError("cursor timestamp has no UTC offset")
        return when, check_session_id(session_id)
    except (binascii.Error, ValueError, TypeError, RecursionError, OverflowError):
        message = f"invalid cursor {brief(cursor)}: pass back a next_cursor"
        raise InvalidInputError(message) from None
