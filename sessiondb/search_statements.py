"""The search statement (:mod:`sessiondb.search`): SQLAlchemy Core, built once per shape,
no I/O. Apart from :mod:`sessiondb.statements` only because that catalogue is long
enough already; the appends that fill the index are there.

One statement finds a page of hits with the payloads their snippets are made from:
Postgres matches ``search @@ to_tsquery(…)`` through the GIN index and ranks by
``ts_rank``; SQLite matches the FTS5 table and ranks by the same ``ts_rank`` of the
record's own text (:mod:`sessiondb.search_rank`): a rank depends on the record and the
query alone, never on other rows (bm25's statistics of the whole table, which every
namespace's writes moved). Only a window of the matches is ranked: the newest
``window`` that pass every filter (Postgres: by ``(created_at, session_id, seq)``,
through the partial index of revision 0008; SQLite: by rowid, the order FTS5 keeps its
matches in), or those between the bounds a cursor carries. The page is
keyset-paginated on ``(rank DESC, session_id, seq)`` within that window.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    CompoundSelect,
    Float,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal_column,
    not_,
    null,
    or_,
    select,
    table,
    text,
    tuple_,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, REGCONFIG

from .rows import utc
from .search_rank import FUNCTION as SQLITE_RANK
from .statements import NS, POSTGRES, Bound, const, lineage, list_param
from .tables import SEARCH, Id, UTCDateTime, records, sessions

# The partial B-tree of revision 0008 that orders a common word's window.
RECENT_INDEX = "ix_sessiondb_records_created_at_session_id_seq"
# ts_rank's weights, {D, C, B, A}: the text (D) counts fully, thinking (A) less.
_PG_WEIGHTS = "CAST('{1.0, 0.3, 0.3, 0.3}' AS real[])"


def search(
    flavour: str,
    namespace: str,
    query: str,
    *,
    limit: int,
    window: int,
    search_config: str,
    session_id: str | None = None,
    roles: list[str] | None = None,
    since: datetime | None = None,
    after: tuple[float, str, int] | None = None,
    bounds: Window | None = None,
    hidden: bool = False,
    common: bool = False,
    rank_query: str = "",
) -> Bound:
    """A page of up to ``limit`` hits: rows ``(session_id, seq, kind, role, created_at,
    payload, rank, matches, oldest, newest)``, the last three the window's (see
    :func:`window_of`). On Postgres best first, the window's columns the same on every
    row; on SQLite the hits in no order (their place: ``rank`` descending, then
    ``session_id``, ``seq``) with the window's columns NULL, then one row of the
    window's alone, its first seven columns NULL.

    ``query``: :func:`search_query.to_tsquery` text on Postgres, an FTS5 expression
    (:func:`search_query.to_fts5`) on SQLite. ``window``: how many of the newest matches
    (every filter applied) are ranked. ``session_id``: that session's lineage only (a
    fork's inherited records included), tombstones and prunes along it applied.
    ``after``: the ``(rank, session_id, seq)`` of the last hit of the previous page.
    ``bounds``: only matches between these keys (a cursor's window), both included.
    ``hidden``: tombstoned and pruned records too. ``rank_query`` (SQLite): the query
    as :func:`search_rank.rank_query` writes it, which ranks. ``common`` (Postgres): the query
    matches many records; its window is read newest first from the recency index, each
    record checked against the query, instead of from the GIN index (the same rows).
    """
    postgres = flavour == POSTGRES
    params: dict[str, Any] = {"ns": namespace, "query": query, "limit": limit, "window": window}
    if postgres:
        params["search_config"] = search_config
    else:
        params["rank_query"] = rank_query
    if session_id is not None:
        params["sid"] = session_id
    if roles is not None:
        params["roles"] = list_param(roles, flavour)
    if since is not None:
        params["since"] = since
    if after is not None:
        params["after_rank"], params["after_sid"], params["after_seq"] = after
    if bounds is not None:
        oldest, newest = bounds
        if postgres:
            assert isinstance(oldest, tuple) and isinstance(newest, datetime)
            params["lo_at"], params["lo_sid"], params["lo_seq"] = oldest
            params["hi_at"] = newest
        else:
            params["lo"], params["hi"] = oldest, newest
    shape = (
        postgres,
        session_id is not None,
        roles is not None,
        since is not None,
        after is not None,
        hidden,
        bounds is not None,
        postgres and common,
    )
    return _search(*shape), params


#: A window's oldest and newest key: on Postgres ``((created_at, session_id, seq),
#: created_at)``, on SQLite two rowids.
Window = tuple[Any, Any]


def window_of(flavour: str, row: Sequence[Any], window: int) -> Window | None:
    """The bounds of the window a page's ``row`` came from (on SQLite, the window's
    row), when it was full (held ``window`` matches): ``None`` when it held every
    match."""
    full, *keys = row[7:]  # Postgres: whether the window is full; SQLite: its size
    if full is None or full is False or (type(full) is int and full < window):
        return None
    if flavour == POSTGRES:
        lo_at, lo_sid, lo_seq, hi_at = keys
        return (utc(lo_at), str(lo_sid), int(lo_seq)), utc(hi_at)
    return int(keys[0]), int(keys[1])


def word_statistics() -> Bound:
    """Postgres: what ANALYZE knows of the search index's words, one row: the records
    the table holds (an estimate), the share of them with no ``search`` vector, the
    most common words with the share of vectors holding each (``NULL``s when the table
    was never analyzed), and whether the recency index of revision 0008 is there. Read
    by :mod:`sessiondb.search` to tell a common word from a rare one."""
    return _word_statistics(), {}


@cache
def _word_statistics() -> Any:
    return text(
        "SELECT c.reltuples, s.null_frac, s.most_common_elems::text::text[], "
        f"s.most_common_elem_freqs, to_regclass('{RECENT_INDEX}') IS NOT NULL "
        "FROM pg_class AS c LEFT JOIN pg_stats AS s "
        "ON s.schemaname = current_schema() AND s.tablename = c.relname "
        f"AND s.attname = 'search' WHERE c.oid = to_regclass('{records.name}')"
    )


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
    postgres: bool,
    scoped: bool,
    has_roles: bool,
    has_since: bool,
    has_after: bool,
    hidden: bool,
    bounded: bool,
    common: bool,
) -> Select[Any] | CompoundSelect[Any]:
    r = records.alias("r")
    query = bindparam("query", type_=Text())
    window = bindparam("window", type_=BigInteger())
    if postgres:
        # In the WHERE, not as a function in FROM: joined from there, the planner
        # walked the namespace's sessions and matched every record (97 ms over 20k
        # records) instead of scanning the GIN index. As a scalar subquery, which Postgres
        # runs once (an InitPlan) and the index scan takes as a parameter: to_tsquery
        # is stable, not immutable, so a bare call ran again for every row it matched and
        # every rank (12 hits: 202 µs against 178 µs for the statement).
        def tsq() -> ColumnElement[Any]:
            return select(
                func.to_tsquery(cast(bindparam("search_config", type_=Text()), REGCONFIG), query)
            ).scalar_subquery()

        if common:
            # Not indexable: the window is read from the recency index (newest first,
            # stopping when full) instead of every match from the GIN index. The
            # planner cannot tell a common word from a rare one (the query is an
            # InitPlan, not a constant it sees), so the caller chooses.
            matched: ColumnElement[bool] = and_(
                r.c.search.is_not(None), func.ts_match_vq(r.c.search, tsq(), type_=Boolean())
            )
        else:
            matched = r.c.search.op("@@")(tsq())
        source: Any = r
        key: list[ColumnElement[Any]] = [r.c.created_at, r.c.session_id, r.c.seq]
    else:
        fts = table(SEARCH, column("rowid"), column("body"), column("thinking"))
        sqlite_rank = getattr(func, SQLITE_RANK)(
            fts.c.body, fts.c.thinking, bindparam("rank_query", type_=Text()), type_=Float()
        )
        matched = literal_column(SEARCH).op("MATCH")(query)
        source = fts.join(r, literal_column("r.rowid") == fts.c.rowid)
        key = [fts.c.rowid]
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
    if bounded:
        if postgres:
            lo = tuple_(
                bindparam("lo_at", type_=UTCDateTime()),
                bindparam("lo_sid", type_=Id),
                bindparam("lo_seq", type_=BigInteger()),
            )
            conditions += [
                tuple_(*key) >= lo,
                r.c.created_at <= bindparam("hi_at", type_=UTCDateTime()),
            ]
        else:
            conditions.append(
                key[0].between(
                    bindparam("lo", type_=BigInteger()), bindparam("hi", type_=BigInteger())
                )
            )
    # The window: the newest matches, every filter applied before the cut (a small
    # namespace's matches are not crowded out by another's), ranked after it. Its size
    # and bounds by window functions over the whole window, which arrives in key order
    # (a CTE read again by aggregates and InitPlans cost a rare word's search ~90 µs).
    newest = [k.desc() for k in key]
    if postgres:
        inner: Any = (
            select(
                r.c.session_id,
                r.c.seq,
                r.c.kind,
                r.c.role,
                r.c.created_at,
                r.c.payload,
                # Ranked here, where the vector is read for the match: the window's rows
                # then carry a number, not the vector (~0.7 KB), through its tuplestore.
                func.ts_rank(literal_column(_PG_WEIGHTS), r.c.search, tsq(), type_=Float()).label(
                    "rank"
                ),
            )
            .select_from(source)
            .where(*conditions)
            .order_by(*newest)
            .limit(window)
            .subquery("candidates")
        )
        order = [inner.c.created_at.desc(), inner.c.session_id.desc(), inner.c.seq.desc()]

        def whole(value: Any) -> ColumnElement[Any]:
            # Over the whole window, in key order (as it arrives: no sort).
            over: ColumnElement[Any] = value.over(order_by=order, rows=(None, None))
            return over

        full = whole(func.count()) >= window

        def if_full(value: Any) -> ColumnElement[Any]:
            # NULL unless the window is full: nothing to decode for a rarer word.
            return case((full, whole(value)))

        w: Any = select(
            inner,
            full.label("n"),
            if_full(func.last_value(inner.c.created_at)).label("lo_at"),
            if_full(func.last_value(inner.c.session_id)).label("lo_sid"),
            if_full(func.last_value(inner.c.seq)).label("lo_seq"),
            if_full(func.first_value(inner.c.created_at)).label("hi_at"),
        ).subquery("window")
        rank: ColumnElement[Any] = w.c.rank
        page = select(
            w.c.session_id, w.c.seq, w.c.kind, w.c.role, w.c.created_at, w.c.payload,
            rank, w.c.n, w.c.lo_at, w.c.lo_sid, w.c.lo_seq, w.c.hi_at,
        )  # fmt: skip
        sid, seq = w.c.session_id, w.c.seq
    else:
        # Ranked in the window's own SELECT, for the rows the window keeps only (the
        # text read from the FTS5 row the match is on); the payloads read for the
        # page's rows only.
        inner = (
            select(key[0].label("k"), r.c.session_id, r.c.seq, sqlite_rank.label("rank"))
            .select_from(source)
            .where(*conditions)
            .order_by(*newest)
            .limit(window)
            .cte("candidates")
        )
        w = inner
        rank = w.c.rank
        sid, seq = w.c.session_id, w.c.seq
    where: list[ColumnElement[bool]] = []
    if has_after:
        after_rank: ColumnElement[Any] = bindparam("after_rank", type_=Float())
        after_key = (bindparam("after_sid", type_=Id), bindparam("after_seq", type_=BigInteger()))
        where.append(
            or_(
                rank < after_rank,
                and_(
                    rank == after_rank,
                    tuple_(sid, seq) > tuple_(*after_key),
                ),
            )
        )
    best = [literal_column("rank").desc(), sid, seq]
    limit = bindparam("limit", type_=BigInteger())
    if postgres:
        return page.where(*where).order_by(*best).limit(limit)
    hits = select(w.c.k, rank, sid, seq).where(*where).order_by(*best).limit(limit).subquery("p")
    # The page's rows in no order (sorted by the caller: sorting here copied their
    # payloads into the sorter, ~8 µs at 12 hits), then the window's size and bounds as
    # one more row, its first seven columns NULL. As a row of its own, not a stats
    # subquery joined to every row (~13 µs less at 12 hits); SQLite's window functions,
    # materialising the window again, cost a rare word's search ~190 µs more. The outer
    # join reads ``p`` as a co-routine (an inner join materialised it first).
    page = select(
        hits.c.session_id, hits.c.seq, r.c.kind, r.c.role, r.c.created_at, r.c.payload,
        hits.c.rank, null(), null(), null(),
    ).select_from(hits.outerjoin(r, literal_column("r.rowid") == hits.c.k))  # fmt: skip
    stats = select(*[null()] * 7, func.count(), func.min(w.c.k), func.max(w.c.k)).select_from(w)
    return union_all(page, stats)
