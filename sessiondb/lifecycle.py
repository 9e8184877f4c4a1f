"""Sessions made and unmade: a new session, the session of a key (made once however
many callers race for it), and a session deleted with its forks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import statements as q
from .backends import IntegrityViolation
from .errors import (
    ConflictError,
    DatabaseUnavailableError,
    HasChildrenError,
    SessionNotFoundError,
)
from .models import SessionInfo
from .rows import session_info
from .tables import sessions

if TYPE_CHECKING:
    from .backends import Transaction
    from .core import Core

# Attempts at a keyed session whose row is deleted between insert and lookup.
KEY_ATTEMPTS = 3


async def create(core: Core, values: dict[str, Any]) -> SessionInfo:
    """Insert the session row ``values``; the session as stored."""
    try:
        await core.backend.execute((q.insert_rows(sessions.name), values))
    except IntegrityViolation as exc:
        raise core.integrity_error(exc, values["key"]) from exc
    return await core.session(values["id"])


async def by_key(core: Core, key: str, new_row: Callable[[], dict[str, Any]] | None) -> SessionInfo:
    """The session with ``key``; made from ``new_row()`` when missing, unless that is
    ``None``. Safe to run again after any failure."""
    found = await core.backend.fetch(q.session_by_key(key, core.namespace))
    if found:
        return session_info(found[0])
    if new_row is None:
        raise SessionNotFoundError(None, core.namespace, key=key)
    for _attempt in range(KEY_ATTEMPTS):
        try:
            rows = await core.backend.execute(q.insert_keyed_session(new_row(), core.flavour))
        except DatabaseUnavailableError as exc:
            # The INSERT may or may not have committed; the lookup below tells.
            if not exc.outcome_unknown:
                raise
            rows = []
        if rows:
            return session_info(rows[0])
        # The key's row was written by another writer: the primary has it.
        found = await core.primary.fetch(q.session_by_key(key, core.namespace))
        if found:
            return session_info(found[0])
        # The session that held the key was deleted between the two statements.
    raise ConflictError(f"key {key!r}: sessions kept being created and deleted meanwhile")


async def delete(core: Core, session_id: str, cascade: bool) -> list[str]:
    """Delete the session (and, with ``cascade``, its forks) in one transaction; the
    ids deleted."""

    async def unit(tx: Transaction) -> list[str]:
        rows = await tx.fetch(q.subtree_ids(session_id, core.namespace))
        if not rows:
            raise SessionNotFoundError(session_id, core.namespace)
        ids = [r["id"] for r in rows]
        if len(ids) > 1 and not cascade:
            raise HasChildrenError(session_id, [r["id"] for r in rows if r["depth"] == 1])
        for bound in q.delete_sessions(ids, core.flavour):
            await tx.fetch(bound)
        return ids

    return await core.transact(unit)
