"""The exceptions sessiondb raises. Every one derives from :class:`SessionDBError`.

A class's docstring is its default message. ``retryable`` says whether the same call,
made again unchanged, may succeed and cannot write anything twice: true only for a
transient state of the database (busy, unreachable), never for a conflict of the
caller's making or for bad input. An instance may override it (an append whose commit
outcome is unknown is a :class:`DatabaseUnavailableError` that is not retryable).
"""

from __future__ import annotations

import reprlib
from datetime import datetime
from typing import Any


def brief(value: Any, chars: int = 80) -> str:
    """``repr`` of ``value`` cut short: an error names a value without copying a huge
    one, or recursing into a deep one (``repr`` of a list 2,000 levels deep raises)."""
    if isinstance(value, str):
        if len(value) <= chars:
            return repr(value)
        return f"{value[:chars]!r}… ({len(value)} characters)"
    return _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 80


class SessionDBError(Exception):
    """A sessiondb operation failed."""

    #: Whether making the same call again may succeed, and cannot store anything twice.
    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__class__.__doc__ or "").strip())


class NotFoundError(SessionDBError, LookupError):
    """The thing asked for does not exist in this namespace."""


class SessionNotFoundError(NotFoundError):
    """No session with this id exists in this namespace."""

    def __init__(
        self, session_id: str | None, namespace: str | None = None, *, key: str | None = None
    ) -> None:
        where = f" in namespace {namespace!r}" if namespace is not None else ""
        what = f"session {session_id}" if key is None else f"no session with key {key!r}"
        super().__init__(f"{what} not found{where}" if key is None else f"{what}{where}")
        self.session_id = session_id
        #: The caller's key that was looked up (``SessionStore.session_for_key``).
        self.key = key


class RecordNotFoundError(NotFoundError):
    """No record with this seq exists in the session's lineage."""

    def __init__(self, session_id: str, seq: int) -> None:
        super().__init__(f"session {session_id} has no record with seq {seq}")
        self.session_id = session_id
        self.seq = seq


class ConflictError(SessionDBError):
    """The operation conflicts with the stored state."""


class BusyError(ConflictError):
    """The database is busy (a lock wait, a serialization failure, a deadlock); the
    operation wrote nothing and can be tried again."""

    retryable = True


class SeqConflictError(ConflictError):
    """The session's head is not at the seq the caller expected; nothing was written."""

    def __init__(self, session_id: str, expected_seq: int, actual_seq: int) -> None:
        super().__init__(
            f"session {session_id}: expected head seq {expected_seq}, found {actual_seq}; "
            "nothing was written"
        )
        self.session_id = session_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class HasChildrenError(ConflictError):
    """The session has forks; delete them first or pass cascade=True."""

    def __init__(self, session_id: str, children: list[str]) -> None:
        shown = ", ".join(children[:5]) + (" …" if len(children) > 5 else "")
        super().__init__(
            f"session {session_id} has {len(children)} fork(s) ({shown}); "
            "delete them first or pass cascade=True"
        )
        self.session_id = session_id
        self.children = children


class TurnTimeoutError(ConflictError):
    """Another holder kept the session's turn past the timeout; nothing was written."""

    def __init__(
        self,
        session_id: str,
        timeout: float,
        holder: str | None,
        since: datetime | None = None,
    ) -> None:
        who = "its holder" if holder is None else f"holder {holder!r}"
        if since is not None:
            who += f" (since {since.isoformat()})"
        super().__init__(
            f"session {session_id}: the turn is held by {who}; gave up after {timeout:g} s"
        )
        self.session_id = session_id
        self.timeout = timeout
        #: The label of the holder (or of the first waiter ahead) when the wait ended.
        self.holder = holder
        self.since = since


class LeaseLostError(ConflictError):
    """The turn's lease expired or was taken over; nothing was written."""

    def __init__(self, session_id: str, holder: str, detail: str = "") -> None:
        super().__init__(
            f"session {session_id}: the turn of {holder!r} lost its lease (it expired, or "
            f"another holder took the session){detail}; nothing was written"
        )
        self.session_id = session_id
        self.holder = holder


class InvalidInputError(SessionDBError, ValueError):
    """The input is not valid; nothing was written."""


class InvalidQueryError(InvalidInputError):
    """The search query cannot be read: empty, too long, or made only of exclusions."""


class InvalidSessionIdError(InvalidInputError):
    """A session id must be a 26-character ULID in Crockford base32."""

    def __init__(self, value: object) -> None:
        super().__init__(
            f"invalid session id {brief(value)}: expected a 26-character ULID "
            "(Crockford base32, e.g. 01J9Z3K7Q8R2V5X4W6Y0A1B2C3)"
        )
        self.value = value


class ExportPathError(InvalidInputError):
    """An export would write where it must not (through a symbolic link, onto something
    that is not a regular file, outside its directory); nothing was written there."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot export to {path!r}: {reason}")
        self.path = path
        self.reason = reason


class ImportFormatError(InvalidInputError):
    """A line of an imported file cannot be read."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class ConfigurationError(SessionDBError):
    """sessiondb is configured wrongly."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is not installed; install it with: pip install 'sessiondb[{extra}]'"
        )
        self.package = package
        self.extra = extra


class StoreClosedError(SessionDBError):
    """The store is closed; open a new one."""


class DatabaseError(SessionDBError):
    """The database refused the operation."""


class CorruptRecordError(DatabaseError, ValueError):
    """A stored record cannot be read: its payload is not what sessiondb writes (not
    JSON, or not the shape of its kind); it was not written through sessiondb, or was
    changed since. Nothing is returned half-built: a message a read returned raises it
    where the message is first touched, an overlay or entry at the read. A
    ``ValueError`` too, as the pydantic and JSON errors that reads raised for such a row
    before were."""


class DatabaseUnavailableError(DatabaseError):
    """The database could not be reached, or the connection to it was lost."""

    retryable = True

    def __init__(self, message: str | None = None, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        #: The connection broke after a write was sent: it may or may not be stored.
        self.outcome_unknown = outcome_unknown
        if outcome_unknown:
            self.retryable = False


class CompactionError(SessionDBError):
    """Compaction failed; the session is unchanged."""


class SummarizerError(CompactionError):
    """The summarizer failed or returned no summary; the session is unchanged."""


class ReadOnlyError(SessionDBError):
    """sessiondb's rows are written only through SessionStore; nothing was flushed."""


class EncryptionError(SessionDBError):
    """Encryption at rest refused the operation (see :mod:`sessiondb.crypto`)."""


class KeyConfigurationError(EncryptionError, ConfigurationError):
    """A master key is missing, malformed or not the provider's: nothing was read or
    written."""


class DecryptionError(EncryptionError):
    """A stored value could not be decrypted: the wrong master key, a tampered or moved
    ciphertext, or a value that is not sessiondb's ciphertext. Nothing of the value is
    returned."""


class EncryptedNamespaceError(EncryptionError):
    """The namespace's encryption does not match the store's: a store without keys
    opened an encrypted namespace, or a store with keys a namespace that already holds
    unencrypted sessions."""
