"""Forks: a child session that inherits its parent's records up to a seq by reference
(:meth:`SessionStore.fork`), or holds a copy of them (``detach``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import statements as q
from .backends import IntegrityViolation
from .core import now
from .errors import InvalidInputError, SessionNotFoundError, brief
from .ids import new_session_id
from .rows import HEAD_COUNTERS, head_counters, session_row, utc
from .tables import records, sessions
from .validation import SESSION_FIELD_COLUMNS

if TYPE_CHECKING:
    from .backends import Transaction
    from .core import Core


async def fork(
    core: Core, session_id: str, at_seq: int | None, name: str | None, detach: bool
) -> str:
    """Create the child in one transaction; its id."""
    child_id = new_session_id()
    at = now()

    async def unit(tx: Transaction) -> None:
        found = await tx.fetch(q.get_session(session_id, core.namespace))
        if not found:
            raise SessionNotFoundError(session_id, core.namespace)
        parent = found[0]
        head = int(parent["last_seq"])
        point = head if at_seq is None else at_seq
        if not 0 <= point <= head:
            raise InvalidInputError(
                f"at_seq must be an int in 0..{head} (the head of {session_id}), "
                f"got {brief(at_seq)}"
            )
        if point < head and await core.splits_pair(tx, session_id, point):
            raise InvalidInputError(
                f"at_seq {point} is between a tool call and its result; fork before "
                "the call or after the results"
            )
        if point == head:
            # O(1): the head's counters are the inherited history's.
            counters = {c: parent[c] for c in HEAD_COUNTERS}
        else:
            # Mid-stream the message count is counted; token totals start from zero.
            messages = await core.count_messages(tx, session_id, point)
            counters = head_counters(point, messages)
        values = _child_row(core, child_id, parent, name, at, point == head, counters)
        if not detach:
            values.update(parent_id=session_id, fork_seq=point)
        await tx.fetch((q.insert_rows(sessions.name), values))
        if detach and point > 0:
            await _copy(core, tx, session_id, child_id, point)

    try:
        await core.transact(unit)
    except IntegrityViolation as exc:
        raise core.integrity_error(exc) from exc
    return child_id


async def _copy(core: Core, tx: Transaction, session_id: str, child_id: str, upto: int) -> None:
    """The lineage's records up to ``upto`` copied into the detached child: by one
    ``INSERT … SELECT``, or, when payloads are sealed to their row, read and written
    again (sealed anew for the child's rows)."""
    if not core.encrypted:
        await tx.fetch(q.copy_lineage(session_id, core.namespace, child_id, upto))
        if core.flavour == q.SQLITE:  # Postgres copied the records' search column
            await tx.fetch(q.copy_search_sqlite(session_id, core.namespace, child_id, upto))
        return
    rows = await tx.fetch(q.lineage_record_rows(session_id, core.namespace, upto))
    await tx.insert(records, [(child_id, *tuple(r)[1:]) for r in rows])


def _child_row(
    core: Core,
    child_id: str,
    parent: Any,
    name: str | None,
    at: Any,
    at_head: bool,
    counters: dict[str, Any],
) -> dict[str, Any]:
    """The child's row: the parent's fields, no key (a key names one conversation, and
    the fork is another one), no parent link until the caller adds it."""
    return session_row(
        child_id,
        core.namespace,
        created_at=at,
        # Never later than now, even from a row a file once dated ahead.
        last_message_at=min(utc(parent["last_message_at"]), at) if at_head else at,
        source=parent["source"],
        fields={
            **{column: parent[column] for column in SESSION_FIELD_COLUMNS},
            **({"name": name} if name is not None else {}),
        },
        counters=counters,
    )
