"""The search statement (:mod:`sessiondb.search`): SQLAlchemy Core, built once per shape,
no I/O. Apart from :mod:`sessiondb.statements` only because that catalogue is long
enough already; the appends that fill the index are there.

One statement finds a page of hits with the payloads their snippets are made from:
Postgres matches ``search @@ to_tsquery(…)`` through the GIN index and ranks by
``ts_rank``; SQLite matches the FTS5 table and ranks by ``bm25`` (negated: higher is
better). The page is keyset-paginated on ``(rank DESC, session_id, seq)``.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    column,
    func,
    literal_column,
    not_,
    or_,
    select,
    table,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, REGCONFIG

from .statements import NS, POSTGRES, Bound, const, lineage, list_param
from .tables import SEARCH, Id, UTCDateTime, records, sessions

# ts_rank's weights, {D, C, B, A}: the text (D) counts fully, thinking (A) less.
_PG_WEIGHTS = "CAST('{1.0, 0.3, 0.3, 0.3}' AS real[])"
# bm25's weights per FTS5 column: body, thinking.
_BM25 = (1.0, 0.3)


def search(
    flavour: str,
    namespace: str,
    query: str,
    *,
    limit: int,
    search_config: str,
    session_id: str | None = None,
    roles: list[str] | None = None,
    since: datetime | None = None,
    after: tuple[float, str, int] | None = None,
    hidden: bool = False,
) -> Bound:
    """A page of up to ``limit`` hits, best first: rows ``(session_id, seq, kind, role,
    created_at, payload, rank)``.

    ``query``: :func:`search_query.to_tsquery` text on Postgres, an FTS5 expression
    (:func:`search_query.to_fts5`) on SQLite. ``session_id``: that session's lineage
    only (a fork's inherited records included), tombstones and prunes along it applied.
    ``after``: the ``(rank, session_id, seq)`` of the last hit of the previous page.
    ``hidden``: tombstoned and pruned records too.
    """
    params: dict[str, Any] = {"ns": namespace, "query": query, "limit": limit}
    if flavour == POSTGRES:
        params["search_config"] = search_config
    if session_id is not None:
        params["sid"] = session_id
    if roles is not None:
        params["roles"] = list_param(roles, flavour)
    if since is not None:
        params["since"] = since
    if after is not None:
        params["after_rank"], params["after_sid"], params["after_seq"] = after
    shape = (
        flavour == POSTGRES,
        session_id is not None,
        roles is not None,
        since is not None,
        after is not None,
        hidden,
    )
    return _search(*shape), params


def _pruned_seqs(source: Any, overlay: Any, postgres: bool) -> Select[Any]:
    """The seqs that the prune records of ``overlay`` (a records alias, in the FROM
    ``source``) name."""
    if postgres:
        seqs = func.json_array_elements_text(
            cast(overlay.c.payload, JSON).op("->")(literal_column("'seqs'"))
        ).column_valued("pruned")
        stmt = select(cast(seqs, BigInteger()))
    else:
        # json_each after the table whose payload it reads (SQLite reads left to right).
        items = func.json_each(overlay.c.payload, literal_column("'$.seqs'")).table_valued("value")
        stmt = select(items.c.value)
    return stmt.select_from(source).where(overlay.c.kind == const("prune"))


@cache
def _search(
    postgres: bool, scoped: bool, has_roles: bool, has_since: bool, has_after: bool, hidden: bool
) -> Select[Any]:
    r = records.alias("r")
    query = bindparam("query", type_=Text())
    if postgres:
        # In the WHERE, not as a function in FROM: joined from there, the planner
        # walked the namespace's sessions and matched every record (97 ms over 20k
        # records) instead of scanning the GIN index. As a scalar subquery, which Postgres
        # runs once (an InitPlan) and the index scan takes as a parameter: to_tsquery
        # is stable, not immutable, so a bare call ran again for every row it matched and
        # every rank (12 hits: 202 µs against 178 µs for the statement).
        tsq: ColumnElement[Any] = select(
            func.to_tsquery(cast(bindparam("search_config", type_=Text()), REGCONFIG), query)
        ).scalar_subquery()
        rank: ColumnElement[Any] = func.ts_rank(
            literal_column(_PG_WEIGHTS), r.c.search, tsq, type_=Float()
        )
        matched: ColumnElement[bool] = r.c.search.op("@@")(tsq)
        source: Any = r
        extra_from: list[Any] = []
    else:
        fts = table(SEARCH, column("rowid"))
        weights: list[ColumnElement[Any]] = [literal_column(repr(w)) for w in _BM25]
        rank = -func.bm25(literal_column(SEARCH), *weights, type_=Float())
        matched = literal_column(SEARCH).op("MATCH")(query)
        source = fts.join(r, literal_column("r.rowid") == fts.c.rowid)
        extra_from = []
    conditions: list[ColumnElement[bool]] = [matched]
    if scoped:
        lin = lineage()
        source = source.join(lin, and_(r.c.session_id == lin.c.id, r.c.seq <= lin.c.upto))
        if not hidden:
            own = records.alias("overlay")
            along = and_(own.c.session_id == lin.c.id, own.c.seq <= lin.c.upto)
            tombstoned = (
                select(own.c.target_seq)
                .select_from(own.join(lin, along))
                .where(own.c.kind == const("tombstone"))
            )
            pruned = _pruned_seqs(own.join(lin, along), own, postgres)
            conditions += [r.c.seq.not_in(tombstoned), r.c.seq.not_in(pruned)]
    else:
        s = sessions
        # Checked per hit by the sessions' primary key, whatever the planner guesses of
        # the match count: joined (or as an EXISTS it turns into a join), it walked the
        # namespace's sessions, probing the index once for each, or hashed all of them
        # (a search over 200k records took 2.3 times one over 20k). OFFSET 0 keeps
        # Postgres from turning the EXISTS into a join.
        conditions.append(
            select(literal_column("1"))
            .where(s.c.id == r.c.session_id, s.c.namespace == NS)
            .offset(literal_column("0"))
            .exists()
        )
        if not hidden:
            t = records.alias("overlay")
            tombstone = (
                select(literal_column("1"))
                .where(
                    t.c.session_id == r.c.session_id,
                    t.c.kind == const("tombstone"),
                    t.c.target_seq == r.c.seq,
                )
                .exists()
            )
            conditions += [
                not_(tombstone),
                or_(
                    r.c.role.is_(None),
                    r.c.role != const("toolResult"),
                    r.c.seq.not_in(
                        _pruned_seqs(t, t, postgres).where(t.c.session_id == r.c.session_id)
                    ),
                ),
            ]
    if has_roles:
        if postgres:
            # The roles as an InitPlan too: given as a parameter, each execution's custom
            # plan, which sees the roles, looked cheaper than the generic one, so
            # Postgres planned the statement afresh on every call (~0.2 ms; a 12-hit
            # search with roles=["user"] took 2.3 times one without).
            roles = select(bindparam("roles", type_=ARRAY(Text()))).scalar_subquery()
            conditions.append(r.c.role == any_(cast(roles, ARRAY(Text()))))
        else:
            items = func.json_each(bindparam("roles", type_=Text())).table_valued("value")
            conditions.append(r.c.role.in_(select(items.c.value)))
    if has_since:
        conditions.append(r.c.created_at >= bindparam("since", type_=UTCDateTime()))
    if has_after:
        after_rank = bindparam("after_rank", type_=Float())
        conditions.append(
            or_(
                rank < after_rank,
                and_(
                    rank == after_rank,
                    tuple_(r.c.session_id, r.c.seq)
                    > tuple_(
                        bindparam("after_sid", type_=Id),
                        bindparam("after_seq", type_=BigInteger()),
                    ),
                ),
            )
        )
    stmt = (
        select(
            r.c.session_id,
            r.c.seq,
            r.c.kind,
            r.c.role,
            r.c.created_at,
            r.c.payload,
            rank.label("rank"),
        )
        .select_from(source, *extra_from)
        .where(*conditions)
        .order_by(literal_column("rank").desc(), r.c.session_id, r.c.seq)
        .limit(bindparam("limit", type_=BigInteger()))
    )
    return stmt
