"""Statement builders: SQLAlchemy Core statements, no I/O.

The store executes these; keeping them apart means every query can be read, compiled
and EXPLAINed on its own.

Each builder returns ``(statement, parameters)``: the statement is built once per shape
and cached, with the values as named bind parameters. Building the context statement
costs ~2.5 ms of Python here, five times what running it costs, so it must not happen
per call.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    ColumnElement,
    Delete,
    Executable,
    Float,
    Select,
    String,
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


Bound = tuple[Executable, dict[str, Any]]

# Every statement about one session takes these two parameters.
SID = bindparam("sid", type_=Id)
NS = bindparam("ns", type_=String(255))


def _scope(session_id: str, namespace: str, **values: Any) -> dict[str, Any]:
    return {"sid": session_id, "ns": namespace, **values}


def lineage() -> CTE:
    """The session ``:sid`` of namespace ``:ns`` and its ancestors, each with the highest
    seq it contributes.

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
    ).where(s.c.id == SID, s.c.namespace == NS)
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


def context(session_id: str, namespace: str, *, lateral: bool = False) -> Bound:
    """Everything the model should see, in one statement (one snapshot).

    Rows, ordered: one ``part = 0`` row for the session itself (absent when the session
    does not exist in this namespace), the latest live compaction of the lineage as
    ``part = 1`` (if any), then ``part = 2`` for each live message with
    ``seq >= first_kept_seq``, in seq order.

    Args:
        lateral: read the kept range of each lineage member with a ``LATERAL`` subquery
            (Postgres). SQLite has no ``LATERAL`` and plans the plain join by index.
    """
    return _context(lateral), _scope(session_id, namespace)


@cache
def _context(lateral: bool) -> Select[Any]:
    lin = lineage()
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
    extra_columns: tuple[str, ...] = (),
) -> Bound:
    """Stored records along the lineage, in seq order, filtered as asked; each row has
    :data:`RECORD_COLUMNS` plus ``extra_columns`` of the records table."""
    stmt = _lineage_records(
        include_tombstoned,
        include_superseded,
        kinds,
        roles,
        from_seq is not None,
        to_seq is not None,
        descending,
        limit,
        extra_columns,
    )
    return stmt, _scope(session_id, namespace, from_seq=from_seq, to_seq=to_seq)


@cache
def _lineage_records(
    include_tombstoned: bool,
    include_superseded: bool,
    kinds: tuple[str, ...] | None,
    roles: tuple[str, ...] | None,
    has_from: bool,
    has_to: bool,
    descending: bool,
    limit: int | None,
    extra_columns: tuple[str, ...],
) -> Select[Any]:
    lin = lineage()
    extra = [records.c[name] for name in extra_columns]
    stmt = select(*RECORD_COLUMNS, *extra).select_from(records.join(lin, _in_lineage(lin)))
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
    if has_from:
        stmt = stmt.where(records.c.seq >= bindparam("from_seq", type_=BigInteger()))
    if has_to:
        stmt = stmt.where(records.c.seq <= bindparam("to_seq", type_=BigInteger()))
    stmt = stmt.order_by(records.c.seq.desc() if descending else records.c.seq)
    return stmt.limit(limit) if limit is not None else stmt


def nearest_message(
    session_id: str,
    namespace: str,
    *,
    roles: tuple[str, ...],
    at_or_before: int | None = None,
    after: int | None = None,
) -> Bound:
    """The seq of the lineage's last message with one of ``roles`` at or before
    ``at_or_before``, or of its first one after ``after`` (tombstoned ones count); NULL
    when there is none.
    """
    backward = at_or_before is not None
    pivot = at_or_before if backward else after
    return _nearest_message(roles, backward), _scope(session_id, namespace, pivot=pivot)


@cache
def _nearest_message(roles: tuple[str, ...], backward: bool) -> Select[Any]:
    lin = lineage()
    pivot = bindparam("pivot", type_=BigInteger())
    r = records.c
    probe = select(r.seq).where(
        r.session_id == lin.c.id, r.seq <= lin.c.upto, r.kind == "message", r.role.in_(roles)
    )
    # One LIMIT 1 index probe per lineage member; ORDER BY … LIMIT 1 over the join would
    # read every matching record of the history first.
    if backward:
        last = probe.where(r.seq <= pivot).order_by(r.seq.desc()).limit(1)
        return select(func.max(last.scalar_subquery())).select_from(lin)
    first = probe.where(r.seq > pivot).order_by(r.seq).limit(1)
    return select(func.min(first.scalar_subquery())).select_from(lin)


def lineage_ids(session_id: str, namespace: str) -> Bound:
    """``(id, upto, depth)`` of the session and its ancestors."""
    return _lineage_ids(), _scope(session_id, namespace)


@cache
def _lineage_ids() -> Select[Any]:
    lin = lineage()
    return select(lin.c.id, lin.c.upto, lin.c.depth).order_by(lin.c.depth)


def subtree_ids(session_id: str, namespace: str) -> Bound:
    """The session and all its descendants (forks, forks of forks), deepest first."""
    return _subtree_ids(), _scope(session_id, namespace)


@cache
def _subtree_ids() -> Select[Any]:
    s = sessions
    cte = (
        select(s.c.id, literal(0).label("depth"))
        .where(s.c.id == SID, s.c.namespace == NS)
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


def lock_head(session_id: str, namespace: str) -> Bound:
    """Take the session's row lock without changing it; returns ``last_seq``."""
    return _LOCK_HEAD, _scope(session_id, namespace)


_LOCK_HEAD = (
    update(sessions)
    .where(sessions.c.id == SID, sessions.c.namespace == NS)
    .values(last_seq=sessions.c.last_seq)
    .returning(sessions.c.last_seq)
)


def existing_uuids(session_id: str, namespace: str, uuids: list[str]) -> Bound:
    """Stored records of the session's lineage with these external uuids (a fork's
    inherited ones too); none when the session is not in ``namespace``, so a known uuid
    never hands another tenant the record. Found by the (session_id, uuid) unique index."""
    return _existing_uuids(), _scope(session_id, namespace, uuids=uuids)


@cache
def _existing_uuids() -> Select[Any]:
    lin = lineage()
    return (
        select(*RECORD_COLUMNS)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.uuid.in_(bindparam("uuids", expanding=True)))
    )


def list_sessions(
    namespace: str,
    *,
    limit: int,
    after: tuple[datetime, str] | None,
    source: str | None,
    parent_id: str | None,
) -> Bound:
    """A keyset page, newest ``last_message_at`` first; never OFFSET."""
    stmt = _list_sessions(after is not None, source is not None, parent_id is not None)
    after_at, after_id = after if after is not None else (None, None)
    return stmt, {
        "ns": namespace,
        "limit": limit,
        "after_at": after_at,
        "after_id": after_id,
        "source": source,
        "parent_id": parent_id,
    }


@cache
def _list_sessions(has_after: bool, has_source: bool, has_parent: bool) -> Select[Any]:
    s = sessions.c
    stmt = select(sessions).where(s.namespace == NS)
    if has_source:
        stmt = stmt.where(s.source == bindparam("source", type_=String(16)))
    if has_parent:
        stmt = stmt.where(s.parent_id == bindparam("parent_id", type_=Id))
    if has_after:
        stmt = stmt.where(
            tuple_(s.last_message_at, s.id)
            < tuple_(
                bindparam("after_at", type_=UTCDateTime()),
                bindparam("after_id", type_=Id),
            )
        )
    return stmt.order_by(s.last_message_at.desc(), s.id.desc()).limit(
        bindparam("limit", type_=BigInteger())
    )


def get_session(session_id: str, namespace: str) -> Bound:
    return _GET_SESSION, _scope(session_id, namespace)


_GET_SESSION = select(sessions).where(sessions.c.id == SID, sessions.c.namespace == NS)


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


def copy_lineage(source_id: str, namespace: str, target_id: str, upto: int) -> Bound:
    """``INSERT … SELECT`` of the lineage's records with ``seq <= upto`` into ``target_id``."""
    return _copy_lineage(), _scope(source_id, namespace, target=target_id, upto=upto)


@cache
def _copy_lineage() -> Executable:
    lin = lineage()
    cols = [c for c in records.c if c.name != "session_id"]
    query = (
        select(bindparam("target", type_=Id), *cols)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.seq <= bindparam("upto", type_=BigInteger()))
    )
    return records.insert().from_select(["session_id", *[c.name for c in cols]], query)
