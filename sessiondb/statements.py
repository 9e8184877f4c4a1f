"""Statement builders: SQLAlchemy Core statements, no I/O.

The store executes these; keeping them apart means every query can be read, compiled
and EXPLAINed on its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    ColumnElement,
    Delete,
    Select,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    null,
    select,
    tuple_,
    union_all,
    update,
)

from .tables import Id, UTCDateTime, records, sessions

RECORD_COLUMNS = (
    records.c.session_id,
    records.c.seq,
    records.c.kind,
    records.c.created_at,
    records.c.uuid,
    records.c.payload,
)


def lineage(session_id: str, namespace: str) -> CTE:
    """The session and its ancestors, each with the highest seq it contributes.

    Columns: ``id``, ``upto`` (the session's own head, or for an ancestor the lowest
    fork point below it), ``parent_id``, ``fork_seq``, ``depth``.
    """
    s = sessions
    base = select(
        s.c.id,
        s.c.last_seq.label("upto"),
        s.c.parent_id,
        s.c.fork_seq,
        literal(0).label("depth"),
    ).where(s.c.id == session_id, s.c.namespace == namespace)
    cte = base.cte("lineage", recursive=True)
    parent = sessions.alias("parent")
    # An ancestor contributes up to the lowest fork point below it: a fork of a fork taken
    # before the first fork point must not see the grandparent's later records.
    upto = case((cte.c.fork_seq < cte.c.upto, cte.c.fork_seq), else_=cte.c.upto)
    return cte.union_all(
        select(
            parent.c.id,
            upto,
            parent.c.parent_id,
            parent.c.fork_seq,
            cte.c.depth + 1,
        ).where(parent.c.id == cte.c.parent_id)
    )


def _in_lineage(lin: CTE) -> ColumnElement[bool]:
    return and_(records.c.session_id == lin.c.id, records.c.seq <= lin.c.upto)


def tombstoned_seqs(lin: CTE) -> Select[Any]:
    """Seqs of the lineage soft-deleted by a tombstone (found by the kind index)."""
    return (
        select(records.c.target_seq)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.kind == "tombstone")
    )


def context(session_id: str, namespace: str) -> Select[Any]:
    """Everything the model should see, in one statement (one snapshot).

    Rows, ordered: one ``part = 0`` row for the session itself (absent when the session
    does not exist in this namespace), the latest live compaction of the lineage as
    ``part = 1`` (if any), then ``part = 2`` for each live message with
    ``seq >= first_kept_seq``, in seq order.
    """
    lin = lineage(session_id, namespace)
    tomb = tombstoned_seqs(lin).cte("tombstoned")
    compaction = (
        select(records.c.seq, records.c.first_kept_seq, records.c.payload)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.kind == "compaction", records.c.seq.not_in(select(tomb.c.target_seq)))
        .order_by(records.c.seq.desc())
        .limit(1)
        .cte("latest_compaction")
    )
    first_kept = func.coalesce(select(compaction.c.first_kept_seq).scalar_subquery(), 0)
    head = select(
        literal(0).label("part"),
        lin.c.upto.label("seq"),
        null().label("payload"),
    ).where(lin.c.depth == 0)
    overlay = select(literal(1), compaction.c.seq, compaction.c.payload)
    messages = (
        select(literal(2), records.c.seq, records.c.payload)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(
            records.c.kind == "message",
            records.c.seq >= first_kept,
            records.c.seq.not_in(select(tomb.c.target_seq)),
        )
    )
    union = union_all(head, overlay, messages).subquery("ctx")
    return select(union.c.part, union.c.seq, union.c.payload).order_by(union.c.part, union.c.seq)


def lineage_records(
    session_id: str,
    namespace: str,
    *,
    include_tombstoned: bool,
    include_superseded: bool,
    kinds: tuple[str, ...] | None = None,
    from_seq: int | None = None,
    to_seq: int | None = None,
    roles: tuple[str, ...] | None = None,
    descending: bool = False,
    limit: int | None = None,
) -> Select[Any]:
    """Stored records along the lineage, in seq order, filtered as asked."""
    lin = lineage(session_id, namespace)
    stmt = select(*RECORD_COLUMNS).select_from(records.join(lin, _in_lineage(lin)))
    tomb = tombstoned_seqs(lin).cte("tombstoned")
    if not include_tombstoned:
        stmt = stmt.where(records.c.seq.not_in(select(tomb.c.target_seq)))
    if not include_superseded:
        compaction = (
            select(records.c.first_kept_seq)
            .select_from(records.join(lin, _in_lineage(lin)))
            .where(
                records.c.kind == "compaction",
                records.c.seq.not_in(select(tomb.c.target_seq)),
            )
            .order_by(records.c.seq.desc())
            .limit(1)
            .scalar_subquery()
        )
        stmt = stmt.where(
            (records.c.kind != "message") | (records.c.seq >= func.coalesce(compaction, 0))
        )
    if kinds is not None:
        stmt = stmt.where(records.c.kind.in_(kinds))
    if roles is not None:
        stmt = stmt.where(records.c.role.in_(roles))
    if from_seq is not None:
        stmt = stmt.where(records.c.seq >= from_seq)
    if to_seq is not None:
        stmt = stmt.where(records.c.seq <= to_seq)
    stmt = stmt.order_by(records.c.seq.desc() if descending else records.c.seq)
    return stmt.limit(limit) if limit is not None else stmt


def lineage_ids(session_id: str, namespace: str) -> Select[Any]:
    """``(id, upto, depth)`` of the session and its ancestors."""
    lin = lineage(session_id, namespace)
    return select(lin.c.id, lin.c.upto, lin.c.depth).order_by(lin.c.depth)


def subtree_ids(session_id: str, namespace: str) -> Select[Any]:
    """The session and all its descendants (forks, forks of forks)."""
    s = sessions
    cte = (
        select(s.c.id, literal(0).label("depth"))
        .where(s.c.id == session_id, s.c.namespace == namespace)
        .cte("subtree", recursive=True)
    )
    child = sessions.alias("child")
    cte = cte.union_all(select(child.c.id, cte.c.depth + 1).where(child.c.parent_id == cte.c.id))
    return select(cte.c.id, cte.c.depth).order_by(cte.c.depth.desc())


def bump_head(
    session_id: str,
    namespace: str,
    *,
    count: int,
    messages: int = 0,
    at: datetime | None = None,
    expected_seq: int | None = None,
    name: str | None = None,
    tokens: tuple[int, int, int, int] = (0, 0, 0, 0),
    cost: float = 0.0,
) -> Update:
    """Allocate ``count`` seqs: ``UPDATE … SET last_seq = last_seq + n … RETURNING last_seq``.

    The row lock this takes serialises writers of one session and nobody else; a
    rollback undoes it with the inserts, so seqs have no gaps.
    """
    s = sessions.c
    values: dict[str, Any] = {"last_seq": s.last_seq + count}
    if messages:
        values["message_count"] = s.message_count + messages
        values["last_message_at"] = func.coalesce(
            bindparam("at", at, type_=UTCDateTime()), s.last_message_at
        )
    if name is not None:
        values["name"] = func.coalesce(s.name, name)
    if any(tokens):
        for column, delta in zip(
            ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"),
            tokens,
            strict=True,
        ):
            values[column] = s[column] + delta
    if cost:
        values["cost_total"] = s.cost_total + cost
    stmt = update(sessions).where(s.id == session_id, s.namespace == namespace)
    if expected_seq is not None:
        stmt = stmt.where(s.last_seq == expected_seq)
    return stmt.values(values).returning(s.last_seq)


def lock_head(session_id: str, namespace: str) -> Update:
    """Take the session's row lock without changing it; returns ``last_seq``."""
    s = sessions.c
    return (
        update(sessions)
        .where(s.id == session_id, s.namespace == namespace)
        .values(last_seq=s.last_seq)
        .returning(s.last_seq)
    )


def existing_uuids(session_id: str, uuids: list[str]) -> Select[Any]:
    return select(*RECORD_COLUMNS).where(
        records.c.session_id == session_id, records.c.uuid.in_(uuids)
    )


def list_sessions(
    namespace: str,
    *,
    limit: int,
    after: tuple[datetime, str] | None,
    source: str | None,
    parent_id: str | None,
) -> Select[Any]:
    """A keyset page, newest ``last_message_at`` first; never OFFSET."""
    s = sessions.c
    stmt = select(sessions).where(s.namespace == namespace)
    if source is not None:
        stmt = stmt.where(s.source == source)
    if parent_id is not None:
        stmt = stmt.where(s.parent_id == parent_id)
    if after is not None:
        stmt = stmt.where(
            tuple_(s.last_message_at, s.id)
            < tuple_(
                bindparam("after_at", after[0], type_=UTCDateTime()),
                bindparam("after_id", after[1], type_=Id),
            )
        )
    return stmt.order_by(s.last_message_at.desc(), s.id.desc()).limit(limit)


def get_session(session_id: str, namespace: str) -> Select[Any]:
    return select(sessions).where(sessions.c.id == session_id, sessions.c.namespace == namespace)


def delete_sessions(ids: list[str]) -> tuple[Delete, Delete]:
    """Delete the records, then the sessions (children before parents, one statement)."""
    return (
        delete(records).where(records.c.session_id.in_(ids)),
        delete(sessions).where(sessions.c.id.in_(ids)),
    )


def count_messages(session_id: str, upto: int) -> Select[Any]:
    return select(func.count()).where(
        records.c.session_id == session_id,
        records.c.kind == "message",
        records.c.seq <= upto,
    )


def copy_lineage(source_id: str, namespace: str, target_id: str, upto: int) -> Any:
    """``INSERT … SELECT`` of the lineage's records with ``seq <= upto`` into ``target_id``."""
    lin = lineage(source_id, namespace)
    cols = [c for c in records.c if c.name != "session_id"]
    query = (
        select(bindparam("target", target_id, type_=Id), *cols)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.seq <= bindparam("upto", upto, type_=BigInteger()))
    )
    return records.insert().from_select(["session_id", *[c.name for c in cols]], query)
