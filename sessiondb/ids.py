"""Session ids: ULIDs made here and checked before any query."""

from __future__ import annotations

import hashlib
import re

from .errors import InvalidSessionIdError

_ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def new_session_id() -> str:
    """A new ULID: sortable by creation time, 26 characters."""
    # Imported here: python-ulid reads its own version from the installed packages'
    # metadata at import (~30 ms), which reads and lists need not pay (sessiondb/cli.py).
    from ulid import ULID

    return str(ULID())


def check_session_id(value: object) -> str:
    """Return ``value`` if it is a well-formed ULID, else raise :class:`InvalidSessionIdError`."""
    if not isinstance(value, str) or _ULID_RE.fullmatch(value) is None:
        raise InvalidSessionIdError(value)
    # The first character of a 128-bit ULID is at most 7.
    if value[0] > "7":
        raise InvalidSessionIdError(value)
    return value


def derived_session_id(namespace: str, key: str) -> str:
    """The id of the session an import makes in ``namespace`` from a file's external
    ``key``: a ULID whose 128 bits are the first of SHA-256 over both."""
    from ulid import ULID

    digest = hashlib.sha256(f"{namespace}\x00{key}".encode("utf-8", "surrogatepass")).digest()
    return str(ULID.from_bytes(digest[:16]))
