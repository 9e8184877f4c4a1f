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
    Float,
    Select,
    Text,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    null,
    select,
    true,
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


def context(session_id: str, namespace: str, *, lateral: bool = False) -> Select[Any]:
    """Everything the model should see, in one statement (one snapshot).

    Rows, ordered: one ``part = 0`` row for the session itself (absent when the session
    does not exist in this namespace), the latest live compaction of the lineage as
    ``part = 1`` (if any), then ``part = 2`` for each live message with
    ``seq >= first_kept_seq``, in seq order.

    Args:
        lateral: read the kept range of each lineage member with a ``LATERAL`` subquery
            (Postgres). SQLite has no ``LATERAL`` and plans the plain join by index.
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
    kept = (
        records.c.kind == "message",
        records.c.seq >= first_kept,
        records.c.seq.not_in(select(tomb.c.target_seq)),
    )
    if lateral:
        # Postgres estimates the recursive lineage at 11 rows and then prefers a hash join
        # over a seq scan of the records table; LATERAL makes it one index range scan per
        # lineage member. The ORDER BY keeps the planner from flattening it into a join.
        member = (
            select(records.c.seq, records.c.payload)
            .where(_in_lineage(lin), *kept)
            .order_by(records.c.seq)
            .lateral("kept")
        )
        messages = select(literal(2), member.c.seq, member.c.payload).select_from(
            lin.join(member, true())
        )
    else:
        messages = (
            select(literal(2), records.c.seq, records.c.payload)
            .select_from(records.join(lin, _in_lineage(lin)))
            .where(*kept)
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


def nearest_message(
    session_id: str,
    namespace: str,
    *,
    roles: tuple[str, ...],
    at_or_before: int | None = None,
    after: int | None = None,
) -> Select[Any]:
    """The seq of the lineage's last message with one of ``roles`` at or before
    ``at_or_before``, or of its first one after ``after`` (tombstoned ones count); NULL
    when there is none.
    """
    lin = lineage(session_id, namespace)
    r = records.c
    probe = select(r.seq).where(
        r.session_id == lin.c.id, r.seq <= lin.c.upto, r.kind == "message", r.role.in_(roles)
    )
    # One LIMIT 1 index probe per lineage member; ORDER BY … LIMIT 1 over the join would
    # read every matching record of the history first.
    if at_or_before is not None:
        last = probe.where(r.seq <= at_or_before).order_by(r.seq.desc()).limit(1)
        return select(func.max(last.scalar_subquery())).select_from(lin)
    first = probe.where(r.seq > after).order_by(r.seq).limit(1)
    return select(func.min(first.scalar_subquery())).select_from(lin)


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


def _bump_head(expected: bool) -> Update:
    s = sessions.c
    messages = bindparam("messages", type_=BigInteger())
    stmt = (
        update(sessions)
        .where(s.id == bindparam("sid", type_=Id), s.namespace == bindparam("ns"))
        .values(
            last_seq=s.last_seq + bindparam("count", type_=BigInteger()),
            message_count=s.message_count + messages,
            last_message_at=case(
                (messages > 0, bindparam("at", type_=UTCDateTime())), else_=s.last_message_at
            ),
            name=func.coalesce(s.name, bindparam("name", type_=Text())),
            input_tokens=s.input_tokens + bindparam("d_input", type_=BigInteger()),
            output_tokens=s.output_tokens + bindparam("d_output", type_=BigInteger()),
            cache_read_tokens=s.cache_read_tokens + bindparam("d_cache_read", type_=BigInteger()),
            cache_write_tokens=s.cache_write_tokens
            + bindparam("d_cache_write", type_=BigInteger()),
            cost_total=s.cost_total + bindparam("d_cost", type_=Float()),
        )
        .returning(s.last_seq)
    )
    if expected:
        stmt = stmt.where(s.last_seq == bindparam("expected", type_=BigInteger()))
    return stmt


# Built once: the append path runs these thousands of times a second, and building a
# statement costs more than executing it (~0.8 ms against ~0.3 ms here).
BUMP_HEAD = _bump_head(expected=False)
BUMP_HEAD_EXPECTED = _bump_head(expected=True)


def bump_head(expected_seq: int | None) -> Update:
    """Allocate ``count`` seqs: ``UPDATE … SET last_seq = last_seq + :count … RETURNING
    last_seq``, also adding the message count, activity time, name and token totals.

    The row lock this takes serialises writers of one session and nobody else; a
    rollback undoes it with the inserts, so seqs have no gaps. Parameters: ``sid``,
    ``ns``, ``count``, ``messages``, ``at``, ``name``, ``d_input``, ``d_output``,
    ``d_cache_read``, ``d_cache_write``, ``d_cost`` and, with ``expected_seq``,
    ``expected``.
    """
    return BUMP_HEAD if expected_seq is None else BUMP_HEAD_EXPECTED


# The same append as one statement for asyncpg: bump the head and insert the rows. One
# round trip in autocommit, against four (BEGIN, UPDATE, INSERT, COMMIT) through a
# transaction; a statement is atomic, so seqs stay gapless. $1 session id, $2 namespace,
# $3 row count, $4 message count, $5 time, $6 derived name, $7-$10 token deltas, $11
# cost delta, $12 expected head or NULL; then the rows' columns.
_PG_HEAD = f"""
WITH head AS (
    UPDATE {sessions.name}
    SET last_seq = last_seq + $3,
        message_count = message_count + $4,
        last_message_at = CASE WHEN $4 > 0 THEN $5 ELSE last_message_at END,
        name = COALESCE(name, $6),
        input_tokens = input_tokens + $7,
        output_tokens = output_tokens + $8,
        cache_read_tokens = cache_read_tokens + $9,
        cache_write_tokens = cache_write_tokens + $10,
        cost_total = cost_total + $11
    WHERE id = $1 AND namespace = $2 AND ($12::bigint IS NULL OR last_seq = $12::bigint)
    RETURNING last_seq
)
INSERT INTO {records.name} (session_id, seq, kind, role, created_at, uuid, parent_uuid,
                            tool_call_id, target_seq, first_kept_seq, size, payload)
"""
# One row, as scalars: unnest costs ~60 µs more per statement here.
PG_APPEND_ONE = (
    _PG_HEAD
    + """SELECT $1, head.last_seq, $13, $14, $5, $15, $16, $17, $18, $19, $20, $21 FROM head
RETURNING seq"""
)
# Many rows, as one array per column.
PG_APPEND_MANY = (
    _PG_HEAD
    + """SELECT $1, head.last_seq - $3 + r.ord, r.kind, r.role, $5, r.uuid, r.parent_uuid,
       r.tool_call_id, r.target_seq, r.first_kept_seq, r.size, r.payload
FROM head,
     unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::text[],
            $18::bigint[], $19::bigint[], $20::int[], $21::text[])
         WITH ORDINALITY AS r(kind, role, uuid, parent_uuid, tool_call_id,
                              target_seq, first_kept_seq, size, payload, ord)
RETURNING seq"""
)


def lock_head(session_id: str, namespace: str) -> Update:
    """Take the session's row lock without changing it; returns ``last_seq``."""
    s = sessions.c
    return (
        update(sessions)
        .where(s.id == session_id, s.namespace == namespace)
        .values(last_seq=s.last_seq)
        .returning(s.last_seq)
    )


def existing_uuids(session_id: str, namespace: str, uuids: list[str]) -> Select[Any]:
    """Stored records of the session's lineage with these external uuids (a fork's
    inherited ones too); none when the session is not in ``namespace``, so a known uuid
    never hands another tenant the record. Found by the (session_id, uuid) unique index."""
    lin = lineage(session_id, namespace)
    return (
        select(*RECORD_COLUMNS)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.uuid.in_(uuids))
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
