"""Statement builders: SQLAlchemy Core statements, no I/O.

Every statement sessiondb runs is built here, once per shape, and each backend compiles
it once to its driver's SQL. Builders return ``(statement, parameters)``. Building the
context statement costs ~2.5 ms of Python, five times what running it costs, so each
shape is cached.

Two rules keep Postgres's plans reusable:

- Values that never vary (record kinds, roles, the context's part numbers, limits of a
  cached shape) are rendered inline with :func:`const`, not bound. Bound, they hide from
  the planner which index applies: the generic plan of the context statement seq-scanned
  the records table, so Postgres planned every call afresh (0.48 ms of planning against
  0.46 ms of execution).
- Lists are one parameter (a Postgres array, a JSON array on SQLite), never an expanded
  ``IN (…)``, so the statement text does not change with the list's length.

A few shapes differ by database (``flavour``: ``"postgresql"`` or ``"sqlite"``): the
one-statement append and ``LATERAL`` exist on Postgres only, and lists bind differently.

This module is longer than the house's 700 lines, and too long to split on purpose: it
is the catalogue of every SQL statement, read as one when a schema change or an index
is reviewed (which statement uses which index, which shapes are cached, which values
are inline), and its sections (sessions, appends, lineage and context, turns,
retention, import and export) share the private shape builders and constants above them.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from datetime import datetime
from functools import cache, wraps
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from sqlalchemy import (
    CTE,
    BigInteger,
    ColumnElement,
    CompoundSelect,
    Delete,
    Executable,
    Float,
    Insert,
    Integer,
    Interval,
    LargeBinary,
    Select,
    String,
    Text,
    Update,
    and_,
    any_,
    bindparam,
    case,
    cast,
    column,
    delete,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    table,
    text,
    true,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from .kinds import KINDS
from .shapes import POSTGRES as POSTGRES
from .shapes import SHAPE_NAMES as SHAPE_NAMES
from .shapes import SQLITE as SQLITE
from .shapes import Bound as Bound
from .shapes import data_keys_of as data_keys_of  # the builders of a short process's
from .shapes import list_sessions as list_sessions  # statements, which need no SQLAlchemy
from .shapes import shape_name
from .tables import (
    RESPONSE_KEY,
    SEARCH,
    Id,
    UTCDateTime,
    adk_sessions,
    adk_state,
    data_keys,
    lineage_seals,
    records,
    sessions,
    turns,
)

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.dialects.postgresql import ARRAY
    from sqlalchemy.dialects.postgresql.dml import Insert as PostgresInsert
    from sqlalchemy.dialects.sqlite.dml import Insert as SQLiteInsert
    from sqlalchemy.sql.compiler import SQLCompiler

P = ParamSpec("P")
S = TypeVar("S")


def _shape(build: Callable[P, S]) -> Callable[P, S]:
    """``functools.cache`` for a statement builder, which also names each statement it
    builds in :data:`SHAPE_NAMES` (a statement is built once per shape; a call that
    finds it cached costs nothing more)."""

    @wraps(build)
    def named(*args: P.args, **kwargs: P.kwargs) -> S:
        stmt = build(*args, **kwargs)
        SHAPE_NAMES.setdefault(id(stmt), shape_name(build.__name__, args, kwargs))
        return stmt

    return typing.cast("Callable[P, S]", cache(named))  # cache takes hashable arguments


# The records table's columns in table order: the order of every row tuple sessiondb
# inserts (:func:`insert_rows`, COPY). The last, ``search``, holds in a row tuple what
# the search index takes of the record (:data:`sessiondb.search_text.IndexSource`: the
# text and thinking, or None), which each backend indexes its own way.
RECORD_COLUMN_NAMES = tuple(c.name for c in records.c)
assert RECORD_COLUMN_NAMES[-1] == "search"
#: The columns written as given (all but ``search``).
RECORD_DATA_COLUMNS = RECORD_COLUMN_NAMES[:-1]
SESSION_COLUMN_NAMES = tuple(c.name for c in sessions.c)
# What an append supplies per record; the backend adds session_id, seq and created_at.
APPEND_COLUMN_NAMES = (
    "kind",
    "role",
    "uuid",
    "parent_uuid",
    "tool_call_id",
    "target_seq",
    "first_kept_seq",
    "size",
    "payload",
    "search",
)
# What a read of records returns, in this order.
RECORD_READ = (
    records.c.session_id,
    records.c.seq,
    records.c.kind,
    records.c.created_at,
    records.c.uuid,
    records.c.payload,
)

# Every statement about one session takes these two parameters.
SID = bindparam("sid", type_=Id)
NS = bindparam("ns", type_=String(255))


#: The Postgres channel of the change feed (:mod:`sessiondb.feed`).
FEED_CHANNEL = "sessiondb_feed"


def notify(payload: str) -> Bound:
    """Postgres: ``SELECT pg_notify(FEED_CHANNEL, :payload)`` (a turn's release)."""
    return _notify(), {"payload": payload}


@_shape
def _notify() -> Select[Any]:
    return select(
        func.pg_notify(literal_column(f"'{FEED_CHANNEL}'"), bindparam("payload", type_=Text()))
    )


def const(value: str | int) -> ColumnElement[Any]:
    """A constant rendered into the statement text instead of bound (see the module doc).

    Only for sessiondb's own constants: kinds, roles, small integers.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"not a statement constant: {value!r}")
    if isinstance(value, int):
        return literal_column(str(value), type_=BigInteger())
    if not value.isidentifier():
        raise ValueError(f"not a statement constant: {value!r}")
    return literal_column(f"'{value}'", type_=String())


def _scope(session_id: str, namespace: str, **values: Any) -> dict[str, Any]:
    return {"sid": session_id, "ns": namespace, **values}


def _array(of: Any) -> ARRAY[Any]:
    """A Postgres array type. The dialect's package is imported here, by the Postgres
    statements only: SQLite's never load it (~40 ms of imports; sessiondb/cli.py)."""
    from sqlalchemy.dialects.postgresql import ARRAY

    return ARRAY(of)


def _upsert(flavour: str, table: Table) -> PostgresInsert | SQLiteInsert:
    """The dialect's ``INSERT`` that takes ``on_conflict_do_nothing``."""
    if flavour == POSTGRES:
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def _in_list(col: ColumnElement[Any], name: str, flavour: str) -> ColumnElement[bool]:
    """``col`` is one of the list bound as ``name`` (a list of strings)."""
    if flavour == POSTGRES:
        return col == any_(bindparam(name, type_=_array(Text())))
    items = func.json_each(bindparam(name, type_=Text())).table_valued("value")
    return col.in_(select(items.c.value))


def list_param(values: list[str], flavour: str) -> Any:
    """The bound value of a list for :func:`_in_list`."""
    if flavour == POSTGRES:
        return values
    from .jsoncodec import dumps

    return dumps(values)


# -- lineage ------------------------------------------------------------------------------


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
        const(0).label("depth"),
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
            cte.c.depth + const(1),
        ).where(parent.c.id == cte.c.parent_id)
    )


def _in_lineage(lin: CTE) -> ColumnElement[bool]:
    return and_(records.c.session_id == lin.c.id, records.c.seq <= lin.c.upto)


def _tombstoned_seqs(lin: CTE) -> Select[Any]:
    """Seqs of the lineage soft-deleted by a tombstone (found by the kind index)."""
    return (
        select(records.c.target_seq)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.kind == const("tombstone"))
    )


# -- the context --------------------------------------------------------------------------


def context(session_id: str, namespace: str, flavour: str, sealed: bool = False) -> Bound:
    """Everything the model should see, in one statement (one snapshot).

    Rows ``(part, seq, payload)``, in no particular order (``context.split_rows`` sorts
    them): one ``part = 0`` row for the session itself (absent when the session does
    not exist in this namespace), the latest live compaction of the lineage as
    ``part = 1`` (if any), ``part = 2`` for each live message with
    ``seq >= first_kept_seq``, and ``part = 3`` for each live prune record of the
    lineage (the caller applies them to the messages they name).
    """
    return _context(flavour == POSTGRES, sealed=sealed), _scope(session_id, namespace)


def context_tail(
    session_id: str, namespace: str, flavour: str, last: int, sealed: bool = False
) -> Bound:
    """:func:`context` with only the last ``last`` live messages as ``part = 2`` rows:
    read backwards by the primary key, ``last`` rows and the tombstones, however long
    the history."""
    bound = _context(flavour == POSTGRES, tail=True, sealed=sealed)
    return bound, _scope(session_id, namespace, last=last)


#: The first character of :func:`context_texts`'s first row: the session is not a fork
#: and has no live prune record, and the message rows follow (``+``; ``=`` when no kept
#: message names a response, so none is a split response's part); or the caller needs
#: :func:`context` (``-``).
TEXTS_ALONE = "+"
TEXTS_NO_RESPONSES = "="
TEXTS_NEED_CONTEXT = "-"


def context_texts(session_id: str, namespace: str) -> Bound:
    """The context of a session that is no fork and has no live prune record (the common
    case) as texts, in one column: the whole of ``SessionStore.context_json``'s data.

    The first row is :data:`TEXTS_ALONE` (or :data:`TEXTS_NO_RESPONSES`: no message from
    the kept range on is in the responses index, :data:`tables.RESPONSES_INDEX`)
    followed by the payload of the latest live compaction (nothing when there is none);
    the payloads of the live messages from its ``first_kept_seq`` on follow, in seq
    order. For a fork, or a session with a live prune record, the one row is
    :data:`TEXTS_NEED_CONTEXT` and no message follows: the caller runs :func:`context`.
    No row: no such session in this namespace.
    """
    return _context_texts(), _scope(session_id, namespace)


@_shape
def _context_texts() -> CompoundSelect[Any]:
    # One column and no lineage: against :func:`context` (seq and part of every row,
    # the recursive lineage, its joins), the 200 kept rows of a 20k-record session cost
    # 82 µs against 109 µs on SQLite (the bare SELECT of seq and payload: 84 µs), and
    # 228 µs against 262 µs on Postgres (bare: 208 µs). Each further column of 200 rows
    # cost ~10-15 µs of the driver's row building.
    own = records.c.session_id == SID
    tomb = select(records.c.target_seq).where(own, records.c.kind == const("tombstone"))
    tomb_cte = tomb.cte("tombstoned")
    live = records.c.seq.not_in(select(tomb_cte.c.target_seq))
    compaction = (
        select(records.c.first_kept_seq, records.c.payload)
        .where(own, records.c.kind == const("compaction"), live)
        .order_by(records.c.seq.desc())
        .limit(const(1))
        .cte("latest_compaction")
    )
    prunes = exists().where(own, records.c.kind == const("prune"), live)
    flag = (
        select(
            or_(sessions.c.parent_id.is_not(None), prunes).label("elsewhere"),
            sessions.c.last_seq,
        )
        .where(sessions.c.id == SID, sessions.c.namespace == NS)
        .cte("answer")
    )
    summary = func.coalesce(select(compaction.c.payload).scalar_subquery(), _text(""))
    first_kept = func.coalesce(select(compaction.c.first_kept_seq).scalar_subquery(), const(0))
    # The responses index's condition, spelled as the index spells it, so that both
    # planners read the index (a probe; without it, before revision 0009, a read of the
    # kept assistant messages' texts, with the same answer).
    responses = exists().where(own, _names_response(), records.c.seq >= first_kept)
    head = select(
        case(
            (flag.c.elsewhere, _text(TEXTS_NEED_CONTEXT)),
            (responses, _text(TEXTS_ALONE) + summary),
            else_=_text(TEXTS_NO_RESPONSES) + summary,
        )
    ).select_from(flag)
    # The ORDER BY is the index's order (session_id, kind, seq): no sort on either
    # database, and the seq order needs no check in Python (there are no seqs to check).
    kept = (
        select(records.c.payload)
        .where(
            own,
            records.c.kind == const("message"),
            records.c.seq >= first_kept,
            # Redundant (no record of the session is past its head), but without both
            # bounds Postgres's generic plan took a third of the records table to match
            # and seq-scanned it (22 ms for a 20k-record session); two unknown bounds
            # are estimated as a narrow range, and the plan reads the index.
            records.c.seq <= select(flag.c.last_seq).scalar_subquery(),
            # Most sessions have no tombstone: an uncorrelated EXISTS runs once.
            or_(~exists(select(tomb_cte.c.target_seq)), live),
            # Both evaluated once (SQLite's NOT of 0/1 and Postgres's of a boolean); no
            # session row: NULL, and no message row either.
            ~select(flag.c.elsewhere).scalar_subquery(),
        )
        .order_by(records.c.seq)
        .subquery("kept")
    )
    return union_all(head, select(kept.c.payload))


class _Position(FunctionElement[int]):
    """``position(text, needle)``: 1 + where ``needle`` starts in ``text``, 0 when it is
    not there (Postgres ``strpos``, SQLite ``instr``)."""

    type = Integer()
    inherit_cache = True


@compiles(_Position, "postgresql")
def _strpos(element: _Position, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strpos({compiler.process(element.clauses, **kw)})"


@compiles(_Position)
def _instr(element: _Position, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)})"


def _names_response() -> ColumnElement[bool]:
    """The records' row is in the responses index: its condition as
    :func:`tables.response_predicate` spells it, term by term, for the planners to match."""
    key = literal_column(f"'{RESPONSE_KEY}'", type_=Text())
    return and_(records.c.role == const("assistant"), _Position(records.c.payload, key) > const(0))


def _text(value: str) -> ColumnElement[Any]:
    """A constant string of this module (a marker, or empty) rendered into the text."""
    assert "'" not in value
    return literal_column(f"'{value}'", type_=Text())


def _latest_compaction(lin: CTE, tomb: CTE, *columns: Any) -> Select[Any]:
    """``columns`` of the lineage's latest compaction that no tombstone took back."""
    return (
        select(*columns)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(
            records.c.kind == const("compaction"),
            records.c.seq.not_in(select(tomb.c.target_seq)),
        )
        .order_by(records.c.seq.desc())
        .limit(const(1))
    )


#: What a sealed read selects of each record beside its payload: the session that stores
#: it and the columns its payload's associated data binds (sessiondb.sealing).
SEALED_RECORD = (
    records.c.session_id,
    records.c.kind,
    records.c.role,
    records.c.target_seq,
    records.c.first_kept_seq,
)


@_shape
def _context(lateral: bool, tail: bool = False, sealed: bool = False) -> CompoundSelect[Any]:
    # ``sealed``: each row also names the session that stores it (``sealed_sid``) and its
    # structure (``sealed_kind`` …), which an encrypted store needs to open the payload
    # (sessiondb.sealing drops the columns); and the rows whose columns the statement
    # trusts are read too (parts 4 and 5), so that a changed column fails to open.
    own: list[Any] = list(SEALED_RECORD) if sealed else []
    lin = lineage()
    tomb = _tombstoned_seqs(lin).cte("tombstoned")
    compaction = _latest_compaction(
        lin,
        tomb,
        records.c.seq,
        records.c.payload,
        *(own or [records.c.first_kept_seq]),
    ).cte("latest_compaction")
    first_kept = func.coalesce(select(compaction.c.first_kept_seq).scalar_subquery(), const(0))
    head = select(
        const(0).label("part"),
        lin.c.upto.label("seq"),
        null().label("payload"),
        # The union's columns take the first SELECT's names: sessiondb.sealing finds the
        # storing session and the structure by these, and drops them.
        *(
            [
                lin.c.id.label("sealed_sid"),
                # Typed: Postgres resolves a union's NULLs pairwise, two of them as text.
                _null(Text()).label("sealed_kind"),
                _null(Text()).label("sealed_role"),
                _null(BigInteger()).label("sealed_target_seq"),
                _null(BigInteger()).label("sealed_first_kept_seq"),
                _null(Text()).label("sealed_lineage"),
                _null(Text()).label("sealed_parent_id"),
                _null(BigInteger()).label("sealed_fork_seq"),
            ]
            if sealed
            else []
        ),
    ).where(lin.c.depth == const(0))
    overlay = select(
        const(1),
        compaction.c.seq,
        compaction.c.payload,
        *(_own(compaction, sealed)),
    )
    live: ColumnElement[bool] = records.c.seq.not_in(select(tomb.c.target_seq))
    if not lateral:
        # SQLite builds the NOT IN list and probes it for every kept row; most sessions
        # have no tombstone, and an uncorrelated EXISTS runs once: 165 µs against 187 µs
        # of CPU (min of 8) for the 200 kept rows of a 20k-record session.
        live = or_(~exists(select(tomb.c.target_seq)), live)
    kept = (records.c.kind == const("message"), records.c.seq >= first_kept, live)
    if tail:
        # The last N: each lineage member's newest N by a backward index scan, then the
        # newest N of those. Postgres says it with LATERAL; SQLite, which has none, finds
        # each member's N-th newest seq by a correlated LIMIT 1 OFFSET N-1 and reads the
        # range from there (a plain ORDER BY … LIMIT over the join sorted every row).
        n = bindparam("last", type_=BigInteger())
        if lateral:
            member = (
                select(records.c.seq, records.c.payload, *own)
                .where(_in_lineage(lin), *kept)
                .order_by(records.c.seq.desc())
                .limit(n)
                .lateral("kept")
            )
            newest = (
                select(member.c.seq, member.c.payload, *_own(member, sealed))
                .select_from(lin.join(member, true()))
                .order_by(member.c.seq.desc())
                .limit(n)
                .subquery("newest")
            )
        else:
            r = records.alias("r")
            nth = (
                select(r.c.seq)
                .where(
                    r.c.session_id == lin.c.id,
                    r.c.seq <= lin.c.upto,
                    r.c.kind == const("message"),
                    r.c.seq >= first_kept,
                    r.c.seq.not_in(select(tomb.c.target_seq)),
                )
                .order_by(r.c.seq.desc())
                .limit(const(1))
                .offset(n - const(1))
                .scalar_subquery()
            )
            newest = (
                select(records.c.seq, records.c.payload, *own)
                .select_from(lin.join(records, _in_lineage(lin)))
                .where(*kept, records.c.seq >= func.coalesce(nth, const(0)))
                .order_by(records.c.seq.desc())
                .limit(n)
                .subquery("newest")
            )
        messages = select(const(2), newest.c.seq, newest.c.payload, *_own(newest, sealed))
    elif lateral:
        # Postgres estimates the recursive lineage at 11 rows and then prefers a hash join
        # over a seq scan of the records table; LATERAL makes it one index range scan per
        # lineage member. The ORDER BY keeps the planner from flattening it into a join.
        member = (
            select(records.c.seq, records.c.payload, *own)
            .where(_in_lineage(lin), *kept)
            .order_by(records.c.seq)
            .lateral("kept")
        )
        messages = select(
            const(2), member.c.seq, member.c.payload, *_own(member, sealed)
        ).select_from(lin.join(member, true()))
    else:
        # SQLite has no LATERAL and plans the plain join by index.
        messages = (
            select(const(2), records.c.seq, records.c.payload, *own)
            .select_from(records.join(lin, _in_lineage(lin)))
            .where(*kept)
        )
    # Live prune records, found by the (session_id, kind, seq) index like the compaction.
    # One that names only superseded messages is moot; it costs one short row.
    prunes = (
        select(const(3), records.c.seq, records.c.payload, *own)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(
            records.c.kind == const("prune"),
            records.c.seq.not_in(select(tomb.c.target_seq)),
        )
    )
    # No ORDER BY, and so no outer SELECT: the caller sorts the rows
    # (``context.split_rows``). The outer sort made SQLite copy every kept payload into a
    # temporary b-tree (~12% of the statement's time for 200 rows of ~700 bytes), and
    # the outer SELECT ran the union as a co-routine; sorting 200 seqs in Python, or
    # seeing that they are in order, costs ~10 µs.
    if not sealed:
        return union_all(head, overlay, messages, prunes)
    # Part 4: every record the choices above trusted a column of and did not read: each
    # tombstone of the lineage, and each record that is not a message from the kept
    # range on (a compaction, tombstone or message whose kind was changed shows here;
    # one before the kept range changes nothing the context shows). Opened and dropped.
    trusted = (
        select(const(4), records.c.seq, records.c.payload, *own, *_NO_LINEAGE)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(
            # By kind, not ``kind != 'message'``: a probe of the (session_id, kind, seq)
            # index per kind instead of a read of every record of the lineage.
            records.c.kind.in_([const(k) for k in KINDS if k != "message"]),
            or_(records.c.seq >= first_kept, records.c.kind == const("tombstone")),
        )
    )
    # Part 5: each lineage member's seal of its parent and fork point ('' when it has
    # none: a session sealed before the binding).
    seal = lineage_seals.alias("seal")
    lineages = select(
        const(5),
        lin.c.fork_seq,
        null(),
        lin.c.id,
        null(),
        null(),
        null(),
        null(),
        func.coalesce(seal.c.seal, _text("")),
        lin.c.parent_id,
        lin.c.fork_seq,
    ).select_from(lin.outerjoin(seal, _seal_of(seal, lin)))
    return union_all(
        head,
        overlay.add_columns(*_NO_LINEAGE),
        messages.add_columns(*_NO_LINEAGE),
        prunes.add_columns(*_NO_LINEAGE),
        trusted,
        lineages,
    )


def _null(type_: Any) -> ColumnElement[Any]:
    return cast(null(), type_)


_NO_LINEAGE = (_null(Text()), _null(Text()), _null(BigInteger()))

#: The structure of a record that :data:`RECORD_READ` lacks, for a sealed read.
SEALED_STRUCTURE = (
    records.c.role.label("sealed_role"),
    records.c.target_seq.label("sealed_target_seq"),
    records.c.first_kept_seq.label("sealed_first_kept_seq"),
)


#: The sealed :func:`lineage_records` statements, by id: whether they filter by a
#: structure column (tombstoned, superseded, kinds, roles).
SEALED_LISTINGS: dict[int, bool] = {}


def lineage_structure(
    session_id: str, namespace: str, *, filtered: bool, from_seq: int | None
) -> Bound:
    """What an encrypted store reads beside a sealed :func:`lineage_records` read, to
    check the columns it trusted: each lineage member's lineage seal ('' when it has
    none) with its parent and fork point; for a ``filtered`` read also every record from
    ``from_seq`` on (a record whose column was changed to leave or enter the filter is
    one of them: a tombstone, a compaction follows what it hides) and every tombstone
    (one may name a later seq). Rows ``(seq, payload, sealed_*)``."""
    if not filtered:
        return _lineage_seals(), _scope(session_id, namespace)
    return _lineage_structure(), _scope(session_id, namespace, from_seq=from_seq or 0)


def _seal_of(seal: Any, lin: CTE) -> ColumnElement[bool]:
    """A lineage member's row of :data:`tables.lineage_seals` (an outer join: a session
    sealed before the binding has none)."""
    return and_(seal.c.session_id == lin.c.id, seal.c.namespace == NS)


def _member_seals(lin: CTE) -> Select[Any]:
    seal = lineage_seals.alias("seal")
    return select(
        lin.c.fork_seq.label("seq"),
        _null(Text()).label("payload"),
        lin.c.id.label("sealed_sid"),
        _null(Text()).label("sealed_kind"),
        _null(Text()).label("sealed_role"),
        _null(BigInteger()).label("sealed_target_seq"),
        _null(BigInteger()).label("sealed_first_kept_seq"),
        func.coalesce(seal.c.seal, _text("")).label("sealed_lineage"),
        lin.c.parent_id.label("sealed_parent_id"),
        lin.c.fork_seq.label("sealed_fork_seq"),
    ).select_from(lin.outerjoin(seal, _seal_of(seal, lin)))


@_shape
def _lineage_seals() -> Select[Any]:
    return _member_seals(lineage())


@_shape
def _lineage_structure() -> CompoundSelect[Any]:
    lin = lineage()
    trusted = (
        select(
            records.c.seq,
            records.c.payload,
            records.c.session_id.label("sealed_sid"),
            records.c.kind.label("sealed_kind"),
            *SEALED_STRUCTURE,
            null().label("sealed_lineage"),
            null().label("sealed_parent_id"),
            null().label("sealed_fork_seq"),
        )
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(
            or_(
                records.c.seq >= bindparam("from_seq", type_=BigInteger()),
                records.c.kind == const("tombstone"),
            )
        )
    )
    return union_all(_member_seals(lin), trusted)


def _own(sub: Any, sealed: bool) -> list[Any]:
    return [sub.c[c.name] for c in SEALED_RECORD] if sealed else []


# -- records along the lineage ------------------------------------------------------------


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
    flavour: str | None = None,
    sealed: bool = False,
) -> Bound:
    """Stored records along the lineage, in seq order, filtered as asked.

    Each row has the columns of :data:`RECORD_READ` plus ``extra_columns`` of the records
    table. ``kinds`` and ``roles`` must be sessiondb's own names (they are rendered
    inline). ``flavour``: the database's (:data:`POSTGRES` reads each lineage member by
    its own index range; any other, or none, by a join that SQLite plans by index).
    ``sealed``: the rows also carry the structure an encrypted store opens the payloads
    with (``sealed_*`` columns, which it drops), and that store checks the records the
    filters trusted by :func:`lineage_structure`.
    """
    build = functools.partial(
        _lineage_records,
        include_tombstoned,
        include_superseded,
        kinds,
        roles,
        from_seq is not None,
        to_seq is not None,
        descending,
        limit,
        extra_columns,
        flavour == POSTGRES,
    )
    if sealed:
        stmt = build(sealed=True)
        filtered = not (include_tombstoned and include_superseded) or bool(kinds or roles)
        SEALED_LISTINGS[id(stmt)] = filtered
    else:
        stmt = build()
    params = _scope(session_id, namespace)
    if from_seq is not None:
        params["from_seq"] = from_seq
    if to_seq is not None:
        params["to_seq"] = to_seq
    return stmt, params


@_shape
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
    lateral: bool = False,
    sealed: bool = False,
) -> Select[Any]:
    lin = lineage()
    columns = [
        *RECORD_READ,
        *(records.c[name] for name in extra_columns),
        *(SEALED_STRUCTURE if sealed else ()),
    ]
    tomb = _tombstoned_seqs(lin).cte("tombstoned")
    where: list[ColumnElement[bool]] = []
    if not include_tombstoned:
        where.append(records.c.seq.not_in(select(tomb.c.target_seq)))
    if not include_superseded:
        compaction = _latest_compaction(lin, tomb, records.c.first_kept_seq).scalar_subquery()
        where.append(
            (records.c.kind != const("message"))
            | (records.c.seq >= func.coalesce(compaction, const(0)))
        )
    if kinds is not None:
        where.append(records.c.kind.in_([const(k) for k in kinds]))
    if roles is not None:
        where.append(records.c.role.in_([const(r) for r in roles]))
    if has_from:
        where.append(records.c.seq >= bindparam("from_seq", type_=BigInteger()))
    if has_to:
        where.append(records.c.seq <= bindparam("to_seq", type_=BigInteger()))
    if not lateral:
        stmt = select(*columns).select_from(records.join(lin, _in_lineage(lin))).where(*where)
        stmt = stmt.order_by(records.c.seq.desc() if descending else records.c.seq)
        return stmt.limit(const(limit)) if limit is not None else stmt
    # Postgres estimates the recursive lineage at ~100 rows and then prefers a hash join
    # over a seq scan of the whole records table (7 ms for the 1,000 records of a session
    # in a 21k-record table, against 2 ms by index); LATERAL reads each member's range by
    # the primary key, as the context statement does. Its ORDER BY (and the LIMIT, each
    # member's first ``limit`` being enough) keeps the planner from flattening it.
    member = (
        select(*columns)
        .where(_in_lineage(lin), *where)
        .order_by(records.c.seq.desc() if descending else records.c.seq)
    )
    if limit is not None:
        member = member.limit(const(limit))
    kept = member.lateral("member")
    stmt = select(*(kept.c[c.name] for c in columns)).select_from(lin.join(kept, true()))
    stmt = stmt.order_by(kept.c.seq.desc() if descending else kept.c.seq)
    return stmt.limit(const(limit)) if limit is not None else stmt


def nearest_message(
    session_id: str,
    namespace: str,
    *,
    roles: tuple[str, ...],
    at_or_before: int | None = None,
    after: int | None = None,
) -> Bound:
    """The seq of the lineage's last message with one of ``roles`` at or before
    ``at_or_before``, or of its first one after ``after`` (tombstoned ones count), as the
    column ``seq``; NULL when there is none.
    """
    backward = at_or_before is not None
    pivot = at_or_before if backward else after
    return _nearest_message(roles, backward), _scope(session_id, namespace, pivot=pivot)


@_shape
def _nearest_message(roles: tuple[str, ...], backward: bool) -> Select[Any]:
    lin = lineage()
    pivot = bindparam("pivot", type_=BigInteger())
    r = records.c
    probe = select(r.seq).where(
        r.session_id == lin.c.id,
        r.seq <= lin.c.upto,
        r.kind == const("message"),
        r.role.in_([const(role) for role in roles]),
    )
    # One LIMIT 1 index probe per lineage member; ORDER BY … LIMIT 1 over the join would
    # read every matching record of the history first.
    if backward:
        last = probe.where(r.seq <= pivot).order_by(r.seq.desc()).limit(const(1))
        return select(func.max(last.scalar_subquery()).label("seq")).select_from(lin)
    first = probe.where(r.seq > pivot).order_by(r.seq).limit(const(1))
    return select(func.min(first.scalar_subquery()).label("seq")).select_from(lin)


def lineage_ids(session_id: str, namespace: str) -> Bound:
    """``(id, upto, depth)`` of the session and its ancestors."""
    return _lineage_ids(), _scope(session_id, namespace)


@_shape
def _lineage_ids() -> Select[Any]:
    lin = lineage()
    return select(lin.c.id, lin.c.upto, lin.c.depth).order_by(lin.c.depth)


def subtree_ids(session_id: str, namespace: str) -> Bound:
    """``(id, depth)`` of the session and all its descendants, deepest first."""
    return _subtree_ids(), _scope(session_id, namespace)


@_shape
def _subtree_ids() -> Select[Any]:
    s = sessions
    cte = (
        select(s.c.id, const(0).label("depth"))
        .where(s.c.id == SID, s.c.namespace == NS)
        .cte("subtree", recursive=True)
    )
    child = sessions.alias("child")
    cte = cte.union_all(
        select(child.c.id, cte.c.depth + const(1)).where(child.c.parent_id == cte.c.id)
    )
    return select(cte.c.id, cte.c.depth).order_by(cte.c.depth.desc())


def existing_uuids(session_id: str, namespace: str, uuids: list[str], flavour: str) -> Bound:
    """Stored records of the session's lineage with these external uuids (a fork's
    inherited ones too); none when the session is not in ``namespace``, so a known uuid
    never hands another tenant the record. Found by the (session_id, uuid) unique index."""
    return _existing_uuids(flavour), _scope(session_id, namespace, uuids=list_param(uuids, flavour))


@_shape
def _existing_uuids(flavour: str) -> Select[Any]:
    lin = lineage()
    return (
        select(*RECORD_READ)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(_in_list(records.c.uuid, "uuids", flavour))
    )


def count_messages(session_id: str, upto: int) -> Bound:
    """``n``: the session's own messages with ``seq <= upto``."""
    return _COUNT_MESSAGES, {"sid": session_id, "upto": upto}


_COUNT_MESSAGES = select(func.count().label("n")).where(
    records.c.session_id == SID,
    records.c.kind == const("message"),
    records.c.seq <= bindparam("upto", type_=BigInteger()),
)


# -- the change feed (sessiondb.feed) ---------------------------------------------------------


def session_heads(namespace: str, ids: list[str], flavour: str) -> Bound:
    """``id``, ``last_seq`` of these sessions of the namespace (the feed's poll)."""
    return _session_heads(flavour), {"ns": namespace, "ids": list_param(ids, flavour)}


@_shape
def _session_heads(flavour: str) -> Select[Any]:
    s = sessions.c
    return select(s.id, s.last_seq).where(s.namespace == NS, _in_list(s.id, "ids", flavour))


def recent_activity(namespace: str, since: datetime, limit: int) -> Bound:
    """``id``, ``last_seq``, ``last_message_at`` of the namespace's sessions with a
    message since ``since``, oldest first (the ``(namespace, last_message_at)`` index)."""
    return _RECENT_ACTIVITY, {"ns": namespace, "since": since, "limit": limit}


_RECENT_ACTIVITY = (
    select(sessions.c.id, sessions.c.last_seq, sessions.c.last_message_at)
    .where(
        sessions.c.namespace == NS,
        sessions.c.last_message_at >= bindparam("since", type_=UTCDateTime()),
    )
    .order_by(sessions.c.last_message_at)
    .limit(bindparam("limit", type_=BigInteger()))
)


# -- sessions -------------------------------------------------------------------------------


def get_session(session_id: str, namespace: str) -> Bound:
    return _GET_SESSION, _scope(session_id, namespace)


_GET_SESSION = select(sessions).where(sessions.c.id == SID, sessions.c.namespace == NS)


def session_by_key(key: str, namespace: str) -> Bound:
    """The session whose key is ``key`` in ``namespace`` (by the unique index), if any."""
    return _SESSION_BY_KEY, {"key": key, "ns": namespace}


_SESSION_BY_KEY = select(sessions).where(
    sessions.c.namespace == NS, sessions.c.key == bindparam("key", type_=Text())
)


def insert_keyed_session(values: dict[str, Any], flavour: str) -> Bound:
    """``INSERT … ON CONFLICT (namespace, key) DO NOTHING RETURNING *``: the new session's
    row, or no row when the namespace has a session with this key already (a racing
    writer's INSERT waits for the first one's transaction, so only one of them wins)."""
    return _insert_keyed_session(flavour), values


@_shape
def _insert_keyed_session(flavour: str) -> Executable:
    stmt = _upsert(flavour, sessions).values(
        {c.name: bindparam(c.name, type_=c.type) for c in sessions.c}
    )
    return stmt.on_conflict_do_nothing(index_elements=["namespace", "key"]).returning(*sessions.c)


def existing_sessions(ids: list[str], flavour: str) -> Bound:
    """``(id, namespace, last_seq)`` of the sessions among ``ids``, in any namespace (an
    import checks which of its derived ids exist)."""
    return _existing_sessions(flavour), {"ids": list_param(ids, flavour)}


@_shape
def _existing_sessions(flavour: str) -> Select[Any]:
    s = sessions.c
    return select(s.id, s.namespace, s.last_seq).where(_in_list(s.id, "ids", flavour))


@_shape
def _list_sessions(
    has_after: bool, source: str | None, has_parent: bool, flavour: str, with_turns: bool
) -> Select[Any]:
    s = sessions.c
    stmt = select(sessions).where(s.namespace == NS)
    if with_turns:
        stmt = (
            select(sessions, *_TURN_COLUMNS)
            .select_from(sessions.outerjoin(turns, _live_turn(flavour)))
            .where(s.namespace == NS)
        )
    if source is not None:
        stmt = stmt.where(s.source == const(source))
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


def rename(session_id: str, namespace: str, name: str) -> Bound:
    """Set the name; returns ``id`` when the session exists."""
    return _RENAME, _scope(session_id, namespace, name=name)


_RENAME = (
    update(sessions)
    .where(sessions.c.id == SID, sessions.c.namespace == NS)
    .values(name=bindparam("name", type_=Text()))
    .returning(sessions.c.id)
)


def set_metadata(session_id: str, namespace: str, metadata_json: str | None) -> Bound:
    """Set the session's metadata (JSON text); returns ``id`` when the session exists."""
    return _SET_METADATA, _scope(session_id, namespace, meta=metadata_json)


_SET_METADATA = (
    update(sessions)
    .where(sessions.c.id == SID, sessions.c.namespace == NS)
    .values(metadata_json=bindparam("meta", type_=Text()))
    .returning(sessions.c.id)
)


def sessions_with_key_prefix(namespace: str, prefix: str) -> Bound:
    """Sessions of ``namespace`` whose key starts with ``prefix`` (``%`` and ``_`` in it
    match themselves), without their turns: the sessions one integration keeps under
    one scope of its own (the Claude Agent SDK's ``project_key``)."""
    escaped = prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return _SESSIONS_WITH_KEY_PREFIX, {"ns": namespace, "pattern": escaped + "%"}


_SESSIONS_WITH_KEY_PREFIX = select(sessions).where(
    sessions.c.namespace == NS,
    sessions.c.key.like(bindparam("pattern", type_=Text()), escape="!"),
)


def delete_sessions(ids: list[str], flavour: str) -> tuple[Bound, Bound]:
    """Delete the records, then the sessions (children before parents, one statement)."""
    value = {"ids": list_param(ids, flavour)}
    return (_delete_records(flavour), value), (_delete_sessions(flavour), value)


@_shape
def _delete_records(flavour: str) -> Delete:
    return delete(records).where(_in_list(records.c.session_id, "ids", flavour))


@_shape
def _delete_sessions(flavour: str) -> Delete:
    return delete(sessions).where(_in_list(sessions.c.id, "ids", flavour))


def copy_lineage(source_id: str, namespace: str, target_id: str, upto: int) -> Bound:
    """``INSERT … SELECT`` of the lineage's records with ``seq <= upto`` into ``target_id``."""
    return _copy_lineage(), _scope(source_id, namespace, target=target_id, upto=upto)


@_shape
def _copy_lineage() -> Executable:
    lin = lineage()
    cols = [c for c in records.c if c.name != "session_id"]
    query = (
        select(bindparam("target", type_=Id), *cols)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.seq <= bindparam("upto", type_=BigInteger()))
    )
    return records.insert().from_select(["session_id", *[c.name for c in cols]], query)


# The key of the advisory lock that serialises exclusive units (migrations) on Postgres:
# the first 8 bytes of sha256("sessiondb"), as a signed 64-bit integer.
EXCLUSIVE_LOCK_KEY = 0x5BE14FAA44F9E1AC


def exclusive_lock() -> Bound:
    """Postgres: wait for, then hold until the transaction ends, sessiondb's advisory lock."""
    return _EXCLUSIVE_LOCK, {}


_EXCLUSIVE_LOCK = select(func.pg_advisory_xact_lock(const(EXCLUSIVE_LOCK_KEY)))


def lock_head(session_id: str, namespace: str) -> Bound:
    """Take the session's row lock without changing it; returns ``last_seq``."""
    return _LOCK_HEAD, _scope(session_id, namespace)


_LOCK_HEAD = (
    update(sessions)
    .where(sessions.c.id == SID, sessions.c.namespace == NS)
    .values(last_seq=sessions.c.last_seq)
    .returning(sessions.c.last_seq)
)


# -- inserts ----------------------------------------------------------------------------------


@_shape
def insert_rows(table_name: str) -> Insert:
    """``INSERT`` of one row of the table, every column bound by name in table order
    (for records, every column but ``search``)."""
    table = records if table_name == records.name else sessions
    return insert(table).values(
        {c.name: bindparam(c.name, type_=c.type) for c in table.c if c.name != "search"}
    )


# -- the search index -------------------------------------------------------------------------
#
# Postgres: ``search`` is ``to_tsvector(:search_config, text)``, thinking added with weight
# A (search_query.THINKING_WEIGHT), made by the statement that inserts the record; the
# text comes from Python (sessiondb.search_text), never from walking the JSON in SQL.


def search_vector(body: ColumnElement[Any], thinking: ColumnElement[Any]) -> ColumnElement[Any]:
    """Postgres: the ``tsvector`` of a record's text ``body`` and ``thinking`` (NULL when
    ``body`` is NULL: a record search does not see)."""
    from sqlalchemy.dialects.postgresql import REGCONFIG, TSVECTOR  # Postgres only

    cfg = cast(bindparam("search_config", type_=Text()), REGCONFIG)
    text_vector = func.to_tsvector(cfg, body, type_=TSVECTOR)
    with_thinking = text_vector.op("||")(
        func.setweight(func.to_tsvector(cfg, thinking), literal_column("'A'"))
    )
    return case((thinking.is_(None), text_vector), else_=with_thinking)


#: SQLite: index one record in the FTS5 table, under the record's rowid (the insert's
#: own ``lastrowid``). Parameters in this order: ``rowid``, ``body``, ``thinking``.
#: Found by ``INSERT … SELECT rowid … WHERE session_id = … AND seq = …`` instead, the
#: bulk load of 20k records took 950 ms against 320 ms: a statement that may write
#: several rows opens a savepoint, and FTS5 flushes its pending terms at each one (a
#: new segment per record, and the merges that follow).
INDEX_RECORD_SQLITE = text(
    f"INSERT INTO {SEARCH} (rowid, body, thinking) VALUES (:rowid, :body, :thinking)"
)


def copy_search_sqlite(source_id: str, namespace: str, target_id: str, upto: int) -> Bound:
    """SQLite: after :func:`copy_lineage`, the FTS5 rows of the records it copied (read
    from the FTS5 table's own copy of the text)."""
    return _copy_search_sqlite(), _scope(source_id, namespace, target=target_id, upto=upto)


@_shape
def _copy_search_sqlite() -> Executable:
    lin = lineage()
    old, new = records.alias("old"), records.alias("new")
    fts = table(SEARCH, column("rowid"), column("body"), column("thinking"))
    query = (
        select(new.c.seq.label("_"))  # replaced below: rowid is not a Core column
        .select_from(
            old.join(lin, and_(old.c.session_id == lin.c.id, old.c.seq <= lin.c.upto))
            .join(fts, fts.c.rowid == literal_column("old.rowid"))
            .join(
                new,
                and_(new.c.session_id == bindparam("target", type_=Id), new.c.seq == old.c.seq),
            )
        )
        .where(old.c.seq <= bindparam("upto", type_=BigInteger()))
        .with_only_columns(literal_column("new.rowid"), fts.c.body, fts.c.thinking)
    )
    return insert(fts).from_select(["rowid", "body", "thinking"], query)


@_shape
def insert_records_indexed() -> Insert:
    """Postgres: many records in one statement, bound as one array per column
    (``search_body``, ``search_thinking`` for the index), each record's ``search`` made
    from its text. The bulk paths' COPY cannot call ``to_tsvector``."""
    types = {c.name: c.type for c in records.c}
    names = (*RECORD_DATA_COLUMNS, "search_body", "search_thinking")
    arrays = [
        bindparam(
            n,
            type_=_array(
                Text()
                if n.startswith("search_")
                else (UTCDateTime().impl if n == "created_at" else types[n])
            ),
        )
        for n in names
    ]
    rows = func.unnest(*arrays).table_valued(*names).render_derived(name="r")
    c = rows.c
    row = select(
        *[c[n] for n in RECORD_DATA_COLUMNS], search_vector(c.search_body, c.search_thinking)
    )
    return insert(records).from_select(list(RECORD_COLUMN_NAMES), row)


# -- appends ----------------------------------------------------------------------------------
#
# Parameters of every append: ``sid``, ``ns``, ``count`` (rows), ``messages`` (of them
# messages), ``at``, ``name`` (derived, or NULL), ``d_input``, ``d_output``,
# ``d_cache_read``, ``d_cache_write``, ``d_cost`` and, when expected, ``expected``.


def _bump_head(expected: bool, notify: bool = False, lean: bool = False) -> Update:
    s = sessions.c
    messages = bindparam("messages", type_=BigInteger())
    values: dict[str, Any] = {
        "last_seq": s.last_seq + bindparam("count", type_=BigInteger()),
        "message_count": s.message_count + messages,
        "last_message_at": case(
            (messages > const(0), bindparam("at", type_=UTCDateTime())),
            else_=s.last_message_at,
        ),
    }
    if not lean:
        values.update(
            name=func.coalesce(s.name, bindparam("name", type_=Text())),
            input_tokens=s.input_tokens + bindparam("d_input", type_=BigInteger()),
            output_tokens=s.output_tokens + bindparam("d_output", type_=BigInteger()),
            cache_read_tokens=s.cache_read_tokens + bindparam("d_cache_read", type_=BigInteger()),
            cache_write_tokens=s.cache_write_tokens
            + bindparam("d_cache_write", type_=BigInteger()),
            cost_total=s.cost_total + bindparam("d_cost", type_=Float()),
        )
    stmt = (
        update(sessions)
        .where(s.id == SID, s.namespace == NS)
        .values(**values)
        .returning(s.last_seq)
    )
    if notify:
        # Postgres: the change feed's NOTIFY, sent by the append's own statement and so
        # delivered when (and only if) it commits. Payload: ``r <head seq> <id> <namespace>``.
        payload = func.concat(
            literal_column("'r '"),
            s.last_seq,
            literal_column("' '"),
            s.id,
            literal_column("' '"),
            s.namespace,
        )
        stmt = stmt.returning(
            func.pg_notify(literal_column(f"'{FEED_CHANNEL}'"), payload).label("notified")
        )
    if expected:
        stmt = stmt.where(s.last_seq == bindparam("expected", type_=BigInteger()))
    return stmt


@_shape
def bump_head(expected: bool, lean: bool = False) -> Update:
    """Allocate ``count`` seqs: ``UPDATE … SET last_seq = last_seq + :count … RETURNING
    last_seq``, also adding the message count, activity time, name and token totals.

    The row lock this takes serialises writers of one session and nobody else; a
    rollback undoes it with the inserts, so seqs have no gaps. No row comes back when the
    session is missing or its head is not ``expected``.

    ``lean``: the append adds no tokens, no cost and no name (a user message or a tool
    result, to a session that has its name), so only the seq, the message count and
    the activity time are set: ~5 µs less of a SQLite append's ~60 µs of SQL.
    """
    return _bump_head(expected, lean=lean)


_APPEND_TYPES: dict[str, Any] = {
    "kind": String(),
    "role": String(),
    "uuid": Text(),
    "parent_uuid": Text(),
    "tool_call_id": Text(),
    "target_seq": BigInteger(),
    "first_kept_seq": BigInteger(),
    "size": Integer(),
    "payload": Text(),
    "search_body": Text(),
    "search_thinking": Text(),
}
# Parameters of an append per record: the columns given, then the search index's text.
APPEND_PARAM_NAMES = (*APPEND_COLUMN_NAMES[:-1], "search_body", "search_thinking")


@_shape
def append_one(expected: bool, tracked: bool = False, indexed: bool = True) -> Insert:
    """Postgres: the head bump and the insert of one row as one statement.

    ``WITH head AS (UPDATE … RETURNING last_seq) INSERT … SELECT … FROM head``: one round
    trip in autocommit against four through a transaction (BEGIN, UPDATE, INSERT,
    COMMIT); a statement is atomic, so seqs stay gapless. Parameters: the append's, plus
    one per column of :data:`APPEND_COLUMN_NAMES`. One row binds scalars: ``unnest``
    costs ~60 µs more per statement. ``tracked``: each row also returns the write's
    :data:`WRITE_MARK` (a store with read replicas). ``indexed``: the row's ``search``
    is made from ``search_body`` and ``search_thinking``; without, the insert leaves the
    column out (a record search does not see, or a store that indexes nothing: then
    appends work on a schema from before the search index, too).
    """
    head = _bump_head(expected, notify=True).cte("head")
    values = {name: bindparam(name, type_=t) for name, t in _APPEND_TYPES.items()}
    row = select(
        SID,
        head.c.last_seq,
        *[values[n] for n in APPEND_COLUMN_NAMES[:2]],
        bindparam("at", type_=UTCDateTime()),
        *[values[n] for n in APPEND_COLUMN_NAMES[2:-1]],
        *([search_vector(values["search_body"], values["search_thinking"])] if indexed else []),
    )
    return _insert_from(row, head, tracked, indexed)


@_shape
def append_many(expected: bool, tracked: bool = False, indexed: bool = True) -> Insert:
    """Postgres: the head bump and the insert of many rows as one statement, the rows
    bound as one array per column (``unnest … WITH ORDINALITY``); parameter names are the
    columns' names."""
    head = _bump_head(expected, notify=True).cte("head")
    # Typed array parameters: the driver renders their casts (``$13::VARCHAR[]``).
    arrays = [bindparam(name, type_=_array(t)) for name, t in _APPEND_TYPES.items()]
    rows = (
        func.unnest(*arrays)
        .table_valued(*APPEND_PARAM_NAMES, with_ordinality="ord")
        .render_derived(name="r")
    )
    c = rows.c
    row = select(
        SID,
        head.c.last_seq - bindparam("count", type_=BigInteger()) + c.ord,
        c.kind,
        c.role,
        bindparam("at", type_=UTCDateTime()),
        *[c[n] for n in APPEND_COLUMN_NAMES[2:-1]],
        *([search_vector(c.search_body, c.search_thinking)] if indexed else []),
    ).select_from(head, rows)
    return _insert_from(row, head, tracked, indexed)


# Postgres: what a write returns so that a store can tell whether a replica has it: the
# transaction id (``xid8``, as text) and the WAL insert position (``pg_lsn``, as text).
WRITE_MARK_SQL = "pg_current_xact_id()::text, pg_current_wal_insert_lsn()::text"


def _write_mark() -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    return (
        cast(func.pg_current_xact_id(), Text()).label("mark_xid"),
        cast(func.pg_current_wal_insert_lsn(), Text()).label("mark_lsn"),
    )


def _insert_from(
    row: Select[Any], head: CTE, tracked: bool = False, indexed: bool = True
) -> Insert:
    order = ("session_id", "seq", "kind", "role", "created_at", *APPEND_COLUMN_NAMES[2:])
    assert order == RECORD_COLUMN_NAMES, "append columns out of step with the table"
    columns = list(order if indexed else order[:-1])
    # The data-modifying CTE must sit at the top of the statement (add_cte), not inside
    # the SELECT, where Postgres refuses it.
    stmt = insert(records).from_select(columns, row).add_cte(head)
    if tracked:
        return stmt.returning(records.c.seq, *_write_mark())
    return stmt.returning(records.c.seq)


# -- export: every session of a namespace, in keyset batches ------------------------------


def sessions_by_id(namespace: str, *, after: str | None, limit: int) -> Bound:
    """A keyset page of the namespace's sessions in id order (export reads them all)."""
    params: dict[str, Any] = {"ns": namespace, "limit": limit}
    if after is not None:
        params["after_id"] = after
    return _sessions_by_id(after is not None), params


@_shape
def _sessions_by_id(has_after: bool) -> Select[Any]:
    s = sessions.c
    stmt = select(sessions).where(s.namespace == NS)
    if has_after:
        stmt = stmt.where(s.id > bindparam("after_id", type_=Id))
    return stmt.order_by(s.id).limit(bindparam("limit", type_=BigInteger()))


def namespace_records(
    namespace: str,
    *,
    after: tuple[str, int] | None,
    limit: int,
    every: bool = False,
    flavour: str | None = None,
    sealed: bool = False,
) -> Bound:
    """A keyset batch of the namespace's own records (not a fork's inherited ones), in
    ``(session_id, seq)`` order, with the columns of :data:`RECORD_READ`; pass the last
    row's ``(session_id, seq)`` as ``after`` for the next batch.

    ``flavour``: the payload comes as its UTF-8 bytes, not as text (export writes bytes:
    the driver's decode and the writer's encode of every payload cost a tenth of a
    SQLite export).

    ``every``: the namespace holds every session of the database (:func:`other_namespace`),
    so the batch reads the table in key order with no check of each row's namespace (a
    sixth of a SQLite export's reading). A caller that cannot rule out a session of
    another namespace made since must pass over rows of sessions it does not know.

    ``sealed``: the rows also carry the structure the payloads are sealed with
    (:data:`SEALED_STRUCTURE`).
    """
    params: dict[str, Any] = {"limit": limit}
    if not every:
        params["ns"] = namespace
    if after is not None:
        params["after_sid"], params["after_seq"] = after
    if sealed:
        return _namespace_records(after is not None, every, flavour, sealed=True), params
    return _namespace_records(after is not None, every, flavour), params


def other_namespace(namespace: str) -> Bound:
    """Whether the database holds a session of another namespace: one row, ``other``.
    Two probes of the namespace index (a name before, a name after), however many
    sessions there are."""
    return _OTHER_NAMESPACE, {"ns": namespace}


_OTHER_NAMESPACE = select(
    or_(
        select(literal_column("1")).where(sessions.c.namespace < NS).exists(),
        select(literal_column("1")).where(sessions.c.namespace > NS).exists(),
    ).label("other")
)


def payload_bytes(flavour: str) -> ColumnElement[Any]:
    """The records' payload as its UTF-8 bytes: SQLite's CAST of a UTF-8 database's text
    is its bytes as they are; Postgres's CAST to bytea would read backslashes as escapes,
    ``convert_to`` does not."""
    if flavour == POSTGRES:
        converted: ColumnElement[Any] = func.convert_to(
            records.c.payload, literal_column("'UTF8'"), type_=LargeBinary()
        )
    else:
        converted = cast(records.c.payload, LargeBinary())
    return converted.label("payload")


@_shape
def _namespace_records(
    has_after: bool, every: bool = False, flavour: str | None = None, sealed: bool = False
) -> Select[Any]:
    r, s = records.c, sessions.c
    # Driven by the records' primary key from the keyset on, the namespace checked per
    # row with EXISTS. As ``session_id IN (SELECT …)``, SQLite walked the list of the
    # namespace's sessions and tested the keyset on every row of the earlier ones, so
    # each batch cost more than the last (100,000 rows: 0.66 s in batches of 1,000,
    # 0.21 s this way); joined, it sorted every row of the namespace for each batch.
    in_namespace = (
        select(literal_column("1")).where(s.id == r.session_id, s.namespace == NS).exists()
    )
    columns = RECORD_READ if flavour is None else (*RECORD_READ[:-1], payload_bytes(flavour))
    stmt = select(*columns, *(SEALED_STRUCTURE if sealed else ()))
    if not every:
        stmt = stmt.where(in_namespace)
    if has_after:
        stmt = stmt.where(
            tuple_(r.session_id, r.seq)
            > tuple_(bindparam("after_sid", type_=Id), bindparam("after_seq", type_=BigInteger()))
        )
    return stmt.order_by(r.session_id, r.seq).limit(bindparam("limit", type_=BigInteger()))


def estimated_records() -> Executable:
    """The planner's estimate of the records table's rows (Postgres only; -1 or 0 when
    the table was never analyzed): one row, ``n``."""
    return _ESTIMATED_RECORDS


_ESTIMATED_RECORDS = text(
    f"SELECT reltuples::BIGINT AS n FROM pg_class WHERE oid = '{records.name}'::regclass"
)


def analyze() -> Executable:
    """Fresh planner statistics for the columns that steer the plans of record reads
    (Postgres only).

    Run after a bulk import: until autovacuum gets to the tables (up to a minute later),
    the planner takes them for nearly empty and sorts a namespace's every record for
    each export batch (100,000 records: 0.4-0.6 s a batch instead of 5 ms). The
    payload's statistics, useless to any plan, are left to autovacuum: with them the
    ANALYZE of 100,000 records took 0.40 s, without them 0.14 s.
    """
    return _ANALYZE


_ANALYZE = text(
    f"ANALYZE {sessions.name} (id, namespace, last_message_at),"
    f" {records.name} (session_id, seq, kind, uuid, target_seq)"
)


def update_session_row() -> Executable:
    """Set every column of the session ``:id`` to the parameters ``v_<column>``: an
    import streaming a big session writes its row first (its records need it) and its
    final values after the last record."""
    return _UPDATE_SESSION_ROW


_UPDATE_SESSION_ROW = (
    update(sessions)
    .where(sessions.c.id == bindparam("id_", type_=Id))
    .values({c.name: bindparam(f"v_{c.name}", type_=c.type) for c in sessions.c if c.name != "id"})
)


# -- turn leases (sessiondb.turns) ------------------------------------------------------------
#
# Times are the database's clock: ``clock_timestamp()`` on Postgres (not ``now()``, which
# stands still for a transaction that may have waited on a lock), ``'now'`` on SQLite,
# as the same text SQLite stores every timestamp as (it sorts in time order). Parameters:
# ``sid``, ``ticket``, ``token`` name one row; ``lease`` is seconds.

TICKET = bindparam("ticket", type_=BigInteger())
TOKEN = bindparam("token", type_=String(32))
LEASE = bindparam("lease", type_=Float())
_SQLITE_TIME: ColumnElement[str] = literal_column("'%Y-%m-%d %H:%M:%f'")


def db_now(flavour: str) -> ColumnElement[Any]:
    """The database's time now."""
    if flavour == POSTGRES:
        return func.clock_timestamp()
    return func.strftime(_SQLITE_TIME, literal_column("'now'"))


def _db_later(flavour: str) -> ColumnElement[Any]:
    """The database's time ``:lease`` seconds from now."""
    if flavour == POSTGRES:
        return func.clock_timestamp() + LEASE * literal_column("interval '1 second'", Interval())
    # A Julian day number is a time value strftime takes; a double holds it to ~10 µs.
    return func.strftime(_SQLITE_TIME, func.julianday(literal_column("'now'")) + LEASE / 86400.0)


def _this_turn() -> ColumnElement[bool]:
    return and_(turns.c.session_id == SID, turns.c.ticket == TICKET, turns.c.token == TOKEN)


def turn_enqueue(
    session_id: str, namespace: str, token: str, holder: str, lease: float, flavour: str
) -> Bound:
    """Queue a turn: a row with the next ticket of the session, marked the holder at once
    when the session has no other row (the uncontended turn: one statement). Returns
    ``ticket``, ``acquired_at`` (NULL: wait) and ``expires_at``, or no row when the
    session is not in the namespace. Two at once may pick the same ticket: the primary
    key refuses the second, which tries again."""
    params = _scope(session_id, namespace, token=token, holder=holder, lease=lease)
    return _turn_enqueue(flavour), params


@_shape
def _turn_enqueue(flavour: str) -> Insert:
    t = turns.c
    mine = select(t.ticket).where(t.session_id == SID)
    following = select(func.coalesce(func.max(t.ticket), const(0)) + const(1)).where(
        t.session_id == SID
    )
    row = select(
        sessions.c.id,
        following.scalar_subquery(),
        TOKEN,
        bindparam("holder", type_=Text()),
        db_now(flavour),
        case((~mine.exists(), db_now(flavour)), else_=null()),
        _db_later(flavour),
    ).where(sessions.c.id == SID, sessions.c.namespace == NS)
    names = ["session_id", "ticket", "token", "holder", "enqueued_at", "acquired_at", "expires_at"]
    return insert(turns).from_select(names, row).returning(t.ticket, t.acquired_at, t.expires_at)


def turn_purge(session_id: str, flavour: str) -> Bound:
    """Delete the session's rows whose lease has run out: dead for good (renewal refuses
    them), so whoever finds them may remove them. On Postgres the delete waits for a
    renewal in flight and then sees the renewed row, which it keeps."""
    return _turn_purge(flavour), {"sid": session_id}


@_shape
def _turn_purge(flavour: str) -> Delete:
    return delete(turns).where(turns.c.session_id == SID, turns.c.expires_at <= db_now(flavour))


def turn_claim(session_id: str, ticket: int, token: str, lease: float, flavour: str) -> Bound:
    """Renew the row's lease and, when no row of the session has a lower ticket, mark it
    the holder; returns ``acquired_at`` (NULL while it waits) and ``expires_at``, or no
    row when the row's lease ran out (its place in the queue is gone)."""
    params = {"sid": session_id, "ticket": ticket, "token": token, "lease": lease}
    return _turn_claim(flavour), params


@_shape
def _turn_claim(flavour: str) -> Update:
    t = turns.c
    ahead = turns.alias("ahead")
    first = (
        ~select(ahead.c.ticket).where(ahead.c.session_id == SID, ahead.c.ticket < TICKET).exists()
    )
    return (
        update(turns)
        .where(_this_turn(), t.expires_at > db_now(flavour))
        .values(
            expires_at=_db_later(flavour),
            acquired_at=case(
                (first, func.coalesce(t.acquired_at, db_now(flavour))), else_=t.acquired_at
            ),
        )
        .returning(t.acquired_at, t.expires_at)
    )


def turn_ahead(session_id: str, ticket: int, flavour: str) -> Bound:
    """``holder``, ``acquired_at``, ``expires_at`` of the first live row ahead of
    ``ticket``: the holder, or the waiter next in line."""
    return _turn_ahead(flavour), {"sid": session_id, "ticket": ticket}


@_shape
def _turn_ahead(flavour: str) -> Select[Any]:
    t = turns.c
    return (
        select(t.holder, t.acquired_at, t.expires_at)
        .where(t.session_id == SID, t.ticket < TICKET, t.expires_at > db_now(flavour))
        .order_by(t.ticket)
        .limit(const(1))
    )


def turn_renew(session_id: str, ticket: int, token: str, lease: float, flavour: str) -> Bound:
    """Extend the holder's lease to ``:lease`` seconds from now, unless it has run out
    already; returns ``expires_at``, or no row when the lease is lost. Run inside an
    append's transaction it is the fence: the row lock it takes makes a successor's
    purge wait until the append is committed."""
    params = {"sid": session_id, "ticket": ticket, "token": token, "lease": lease}
    return _turn_renew(flavour), params


@_shape
def _turn_renew(flavour: str) -> Update:
    t = turns.c
    return (
        update(turns)
        .where(_this_turn(), t.acquired_at.is_not(None), t.expires_at > db_now(flavour))
        .values(expires_at=_db_later(flavour))
        .returning(t.expires_at)
    )


def turn_release(session_id: str, namespace: str, token: str, *, notify: bool = False) -> Bound:
    """Delete the row of ``token`` (whatever its ticket) when the session is in the
    namespace: the turn is over, or the wait given up. ``notify`` (Postgres): the same
    statement tells the change feed (``t <session> <namespace>``) when it deleted a row,
    so that waiters in other processes wake at once."""
    stmt = _TURN_RELEASE_NOTIFY if notify else _TURN_RELEASE
    return stmt, _scope(session_id, namespace, token=token)


_TURN_RELEASE = delete(turns).where(
    turns.c.session_id == SID,
    turns.c.token == TOKEN,
    select(sessions.c.id).where(sessions.c.id == SID, sessions.c.namespace == NS).exists(),
)
_TURN_RELEASE_NOTIFY = _TURN_RELEASE.returning(
    func.pg_notify(
        literal_column(f"'{FEED_CHANNEL}'"),
        func.concat(literal_column("'t '"), turns.c.session_id, literal_column("' '"), NS),
    ).label("notified")
)


def _live_turn(flavour: str) -> ColumnElement[bool]:
    t = turns.c
    return and_(
        t.session_id == sessions.c.id,
        t.acquired_at.is_not(None),
        t.expires_at > db_now(flavour),
    )


_TURN_COLUMNS = (
    turns.c.holder.label("turn_holder"),
    turns.c.acquired_at.label("turn_acquired_at"),
    turns.c.expires_at.label("turn_expires_at"),
)


def session_with_turn(session_id: str, namespace: str, flavour: str) -> Bound:
    """The session's row and its live turn's ``turn_holder``, ``turn_acquired_at``,
    ``turn_expires_at`` (NULL when no turn is held). At most one row of a session is a
    live acquired one: a row is marked acquired only with no row ahead of it, and later
    rows queue behind it."""
    return _session_with_turn(flavour), _scope(session_id, namespace)


@_shape
def _session_with_turn(flavour: str) -> Select[Any]:
    return (
        select(sessions, *_TURN_COLUMNS)
        .select_from(sessions.outerjoin(turns, _live_turn(flavour)))
        .where(sessions.c.id == SID, sessions.c.namespace == NS)
    )


# -- retention (sessiondb.retention) ----------------------------------------------------------


def expiry_candidates(
    namespace: str, cutoff: datetime, *, after: tuple[datetime, str] | None, limit: int
) -> Bound:
    """``(id, last_message_at)`` of the namespace's sessions last active before
    ``cutoff``, oldest first, a keyset batch after ``after`` (by the listing's index)."""
    params: dict[str, Any] = {"ns": namespace, "cutoff": cutoff, "limit": limit}
    if after is not None:
        params["after_at"], params["after_id"] = after
    return _expiry_candidates(after is not None), params


@_shape
def _expiry_candidates(has_after: bool) -> Select[Any]:
    s = sessions.c
    stmt = select(s.id, s.last_message_at).where(
        s.namespace == NS, s.last_message_at < bindparam("cutoff", type_=UTCDateTime())
    )
    if has_after:
        stmt = stmt.where(
            tuple_(s.last_message_at, s.id)
            > tuple_(
                bindparam("after_at", type_=UTCDateTime()),
                bindparam("after_id", type_=Id),
            )
        )
    return stmt.order_by(s.last_message_at, s.id).limit(bindparam("limit", type_=BigInteger()))


def expiry_plan(
    ids: list[str], namespace: str, cutoff: datetime, flavour: str, *, lock: bool
) -> Bound:
    """For each of ``ids`` in the namespace (a ``root``), it and every session forked from
    it, directly or through a chain: ``root``, ``id``, ``depth``, ``live`` (active since
    ``cutoff``, or in another namespace: it must stay, and its lineage with it) and
    ``busy`` (a turn row is live on it). ``lock``: on Postgres, lock the rows, so that no
    append or fork slips in between this look and the delete."""
    params = {"ids": list_param(ids, flavour), "ns": namespace, "cutoff": cutoff}
    return _expiry_plan(flavour, lock), params


@_shape
def _expiry_plan(flavour: str, lock: bool) -> Select[Any]:
    s = sessions.c
    base = (
        select(s.id.label("root"), s.id, const(0).label("depth"))
        .where(_in_list(s.id, "ids", flavour), s.namespace == NS)
        .cte("subtree", recursive=True)
    )
    child = sessions.alias("child")
    tree = base.union_all(
        select(base.c.root, child.c.id, base.c.depth + const(1)).where(
            child.c.parent_id == base.c.id
        )
    )
    member = sessions.alias("member")
    live = (member.c.namespace != NS) | (
        member.c.last_message_at >= bindparam("cutoff", type_=UTCDateTime())
    )
    busy = (
        select(turns.c.ticket)
        .where(turns.c.session_id == member.c.id, turns.c.expires_at > db_now(flavour))
        .exists()
    )
    stmt = (
        select(
            tree.c.root,
            tree.c.id,
            tree.c.depth,
            case((live, const(1)), else_=const(0)).label("live"),
            case((busy, const(1)), else_=const(0)).label("busy"),
        )
        .select_from(tree.join(member, member.c.id == tree.c.id))
        .order_by(tree.c.root, tree.c.depth.desc(), tree.c.id)
    )
    if lock and flavour == POSTGRES:
        stmt = stmt.with_for_update(of=member)
    return stmt


# -- Google ADK sessions (sessiondb.integrations.adk) ------------------------------------------
#
# An ADK session is addressed by ``(ns, app, user, adk_id)``: the primary key of
# ``sessiondb_adk_sessions``. Its events are the ``message`` records of the sessiondb
# session ``session_id``, read by the records' primary key.

_APP = bindparam("app", type_=Text())
_USER = bindparam("user", type_=Text())


def _adk_state_of(alias: Any, scope: str, user: ColumnElement[Any]) -> ColumnElement[bool]:
    a = adk_sessions.c
    return and_(
        alias.c.namespace == a.namespace,
        alias.c.app_name == a.app_name,
        alias.c.scope == const(scope),
        alias.c.user_id == user,
    )


def adk_session(namespace: str, app: str, user: str, adk_id: str) -> Bound:
    """The ADK session's row, its head (``last_seq``) and its app and user state
    (``app_state``, ``user_state``: NULL when none is stored), in one statement: the
    session state and the head change in the same transaction, so they agree."""
    return _ADK_SESSION, {"ns": namespace, "app": app, "user": user, "adk_id": adk_id}


def _adk_session() -> Select[Any]:
    a = adk_sessions.c
    app_state = adk_state.alias("app_state")
    user_state = adk_state.alias("user_state")
    joined = (
        adk_sessions.join(sessions, sessions.c.id == a.session_id)
        .outerjoin(app_state, _adk_state_of(app_state, "app", literal_column("''")))
        .outerjoin(user_state, _adk_state_of(user_state, "user", a.user_id))
    )
    return (
        select(
            a.session_id,
            a.state_json,
            a.update_time,
            sessions.c.last_seq,
            app_state.c.state_json.label("app_state"),
            user_state.c.state_json.label("user_state"),
        )
        .select_from(joined)
        .where(
            a.namespace == NS,
            a.app_name == _APP,
            a.user_id == _USER,
            a.adk_id == bindparam("adk_id", type_=Text()),
        )
    )


_ADK_SESSION = _adk_session()


def adk_events(session_id: str, to_seq: int, limit: int | None) -> Bound:
    """``(seq, kind, payload)`` of the session's events (its ``message`` and ``entry``
    records) with ``seq <= to_seq``: all of them in seq order, or the last ``limit``
    newest first (by the records' primary key)."""
    if limit is None:
        return _ADK_EVENTS_ALL, {"sid": session_id, "to_seq": to_seq}
    return _ADK_EVENTS_TAIL, {"sid": session_id, "to_seq": to_seq, "limit": limit}


def _adk_events() -> Select[Any]:
    r = records.c
    return select(r.seq, r.kind, r.payload).where(
        r.session_id == SID,
        r.kind.in_([const("message"), const("entry")]),
        r.seq <= bindparam("to_seq", type_=BigInteger()),
    )


_ADK_EVENTS_ALL = _adk_events().order_by(records.c.seq)
_ADK_EVENTS_TAIL = (
    _adk_events().order_by(records.c.seq.desc()).limit(bindparam("limit", type_=BigInteger()))
)


def adk_first_event(session_id: str) -> Bound:
    """``(seq, kind, payload)`` of the session's first event, if any."""
    return _ADK_FIRST_EVENT, {"sid": session_id, "to_seq": 2**62}


_ADK_FIRST_EVENT = _adk_events().order_by(records.c.seq).limit(const(1))


def adk_list(namespace: str, app: str, user: str | None) -> Bound:
    """The ADK sessions of an app (of one user, with ``user``), oldest ``update_time``
    first, by the index on that order; no events."""
    params: dict[str, Any] = {"ns": namespace, "app": app}
    if user is None:
        return _ADK_LIST_APP, params
    return _ADK_LIST_USER, {**params, "user": user}


def _adk_list(by_user: bool) -> Select[Any]:
    a = adk_sessions.c
    stmt = select(a.user_id, a.adk_id, a.state_json, a.update_time).where(
        a.namespace == NS, a.app_name == _APP
    )
    if by_user:
        stmt = stmt.where(a.user_id == _USER)
    return stmt.order_by(a.update_time, a.user_id, a.adk_id)


_ADK_LIST_APP = _adk_list(False)
_ADK_LIST_USER = _adk_list(True)


def adk_states(namespace: str, app: str, user: str | None) -> Bound:
    """``(scope, user_id, state_json)`` of the app's state and of its users' (one
    user's, with ``user``)."""
    params: dict[str, Any] = {"ns": namespace, "app": app}
    if user is None:
        return _ADK_STATES_APP, params
    return _ADK_STATES_USER, {**params, "user": user}


def _adk_states(by_user: bool) -> Select[Any]:
    t = adk_state.c
    stmt = select(t.scope, t.user_id, t.state_json).where(t.namespace == NS, t.app_name == _APP)
    if by_user:
        stmt = stmt.where(
            ((t.scope == const("app")) & (t.user_id == literal_column("''")))
            | ((t.scope == const("user")) & (t.user_id == _USER))
        )
    return stmt


_ADK_STATES_APP = _adk_states(False)
_ADK_STATES_USER = _adk_states(True)


def adk_insert_session(values: dict[str, Any]) -> Bound:
    """Insert an ADK session's row (every column, by name)."""
    return _ADK_INSERT_SESSION, values


_ADK_INSERT_SESSION = insert(adk_sessions).values(
    {c.name: bindparam(c.name, type_=c.type) for c in adk_sessions.c}
)


def adk_update_session(session_id: str, state_json: str, update_time: float) -> Bound:
    """Set an ADK session's state and update time (inside its append's transaction)."""
    return _ADK_UPDATE_SESSION, {"sid": session_id, "state": state_json, "at": update_time}


_ADK_UPDATE_SESSION = (
    update(adk_sessions)
    .where(adk_sessions.c.session_id == SID)
    .values(
        state_json=bindparam("state", type_=Text()),
        update_time=bindparam("at", type_=Float()),
    )
)


def adk_touch_session(session_id: str, update_time: float) -> Bound:
    """Set an ADK session's update time only (an append with no session state delta)."""
    return _ADK_TOUCH_SESSION, {"sid": session_id, "at": update_time}


_ADK_TOUCH_SESSION = (
    update(adk_sessions)
    .where(adk_sessions.c.session_id == SID)
    .values(update_time=bindparam("at", type_=Float()))
)


def adk_session_state(session_id: str) -> Bound:
    """The ADK session's stored state (read under the head lock its append holds)."""
    return _ADK_SESSION_STATE, {"sid": session_id}


_ADK_SESSION_STATE = select(adk_sessions.c.state_json).where(adk_sessions.c.session_id == SID)


def _state_key(namespace: str, app: str, scope: str, user: str) -> dict[str, Any]:
    return {"ns": namespace, "app": app, "scope": scope, "user": user}


_SCOPE = bindparam("scope", type_=String(8))


def adk_ensure_state(namespace: str, app: str, scope: str, user: str, flavour: str) -> Bound:
    """Make the app's or user's state row (``{}``) unless it exists."""
    return _adk_ensure_state(flavour), _state_key(namespace, app, scope, user)


@_shape
def _adk_ensure_state(flavour: str) -> Executable:
    stmt = _upsert(flavour, adk_state).values(
        namespace=NS, app_name=_APP, scope=_SCOPE, user_id=_USER, state_json=literal_column("'{}'")
    )
    return stmt.on_conflict_do_nothing(index_elements=["namespace", "app_name", "scope", "user_id"])


def adk_lock_state(namespace: str, app: str, scope: str, user: str) -> Bound:
    """The app's or user's state, its row locked until the transaction ends (SQLite's
    write transaction holds the whole database already)."""
    return _ADK_LOCK_STATE, _state_key(namespace, app, scope, user)


def _adk_state_row() -> ColumnElement[bool]:
    t = adk_state.c
    return and_(t.namespace == NS, t.app_name == _APP, t.scope == _SCOPE, t.user_id == _USER)


_ADK_LOCK_STATE = select(adk_state.c.state_json).where(_adk_state_row()).with_for_update()


def adk_set_state(namespace: str, app: str, scope: str, user: str, state_json: str) -> Bound:
    """Replace the app's or user's state."""
    return _ADK_SET_STATE, {**_state_key(namespace, app, scope, user), "state": state_json}


_ADK_SET_STATE = (
    update(adk_state).where(_adk_state_row()).values(state_json=bindparam("state", type_=Text()))
)


# -- encryption at rest (sessiondb.sealing) ----------------------------------------------------


_DATA_KEYS_OF = (
    select(
        data_keys.c.version,
        data_keys.c.master_key_id,
        data_keys.c.wrapped_key,
        data_keys.c.completed_at,
    )
    .where(data_keys.c.namespace == NS)
    .order_by(data_keys.c.version)
)


def insert_data_key(
    namespace: str,
    version: int,
    master_key_id: str,
    wrapped_key: str,
    at: datetime,
    completed: bool,
) -> Bound:
    """Store a new data key; the primary key refuses a version a racing store added.
    ``completed``: no row needs moving to it (the namespace's first key)."""
    values = {
        "namespace": namespace,
        "version": version,
        "master_key_id": master_key_id,
        "wrapped_key": wrapped_key,
        "created_at": at,
        "completed_at": at if completed else None,
    }
    return _INSERT_DATA_KEY, values


_INSERT_DATA_KEY = insert(data_keys).values(
    {c.name: bindparam(c.name, type_=c.type) for c in data_keys.c}
)


def rewrap_data_key(
    namespace: str, version: int, master_key_id: str, wrapped_key: str, old_wrapped_key: str
) -> Bound:
    """Replace a data key's wrapping, if it is still ``old_wrapped_key``; returns
    ``version`` when it was."""
    params = {
        "ns": namespace,
        "version": version,
        "master_key_id": master_key_id,
        "wrapped_key": wrapped_key,
        "old": old_wrapped_key,
    }
    return _REWRAP_DATA_KEY, params


_REWRAP_DATA_KEY = (
    update(data_keys)
    .where(
        data_keys.c.namespace == NS,
        data_keys.c.version == bindparam("version", type_=Integer()),
        data_keys.c.wrapped_key == bindparam("old", type_=Text()),
    )
    .values(
        master_key_id=bindparam("master_key_id", type_=Text()),
        wrapped_key=bindparam("wrapped_key", type_=Text()),
    )
    .returning(data_keys.c.version)
)


def complete_data_key(namespace: str, version: int, at: datetime) -> Bound:
    """Note that every row of the namespace is sealed by data key ``version``."""
    return _COMPLETE_DATA_KEY, {"ns": namespace, "version": version, "at": at}


_COMPLETE_DATA_KEY = (
    update(data_keys)
    .where(
        data_keys.c.namespace == NS,
        data_keys.c.version == bindparam("version", type_=Integer()),
    )
    .values(completed_at=bindparam("at", type_=UTCDateTime()))
)


def any_session(namespace: str) -> Bound:
    """The id of one session of the namespace, if it has any."""
    return _ANY_SESSION, {"ns": namespace}


_ANY_SESSION = select(sessions.c.id).where(sessions.c.namespace == NS).limit(const(1))


def lineage_record_rows(session_id: str, namespace: str, upto: int) -> Bound:
    """Every column of the lineage's records with ``seq <= upto``, in table order (the
    copy of a detached fork, made in Python when the payloads are sealed to their row)."""
    return _lineage_record_rows(), _scope(session_id, namespace, upto=upto)


@_shape
def _lineage_record_rows() -> Select[Any]:
    lin = lineage()
    return (
        select(*records.c)
        .select_from(records.join(lin, _in_lineage(lin)))
        .where(records.c.seq <= bindparam("upto", type_=BigInteger()))
        .order_by(records.c.seq)
    )


def reseal_record(session_id: str, seq: int, payload: str, old: str) -> Bound:
    """Replace a record's sealed payload if it is still ``old`` (re-encryption under a
    new data key: the one UPDATE of a record); returns ``seq`` when it was."""
    return _RESEAL_RECORD, {"sid": session_id, "seq": seq, "payload": payload, "old": old}


_RESEAL_RECORD = (
    update(records)
    .where(
        records.c.session_id == SID,
        records.c.seq == bindparam("seq", type_=BigInteger()),
        records.c.payload == bindparam("old", type_=Text()),
    )
    .values(payload=bindparam("payload", type_=Text()))
    .returning(records.c.seq)
)

#: The session columns an encrypted store seals, each bound to its row by the id.
SEALED_SESSION_COLUMNS = ("name", "system_prompt_override", "metadata_json")


def session_texts(namespace: str, after: str | None, limit: int) -> Bound:
    """A keyset batch of ``id``, the sealed columns, ``parent_id``, ``fork_seq`` and the
    lineage seal (``lineage_seal``, NULL when it has none) of the namespace's sessions, by
    id: what re-encryption reads (an encrypted namespace's only)."""
    params: dict[str, Any] = {"ns": namespace, "limit": limit, "after": after or ""}
    return _SESSION_TEXTS, params


_SESSION_TEXT_SEAL = lineage_seals.alias("seal")
_SESSION_TEXTS = (
    select(
        sessions.c.id,
        *[sessions.c[n] for n in SEALED_SESSION_COLUMNS],
        sessions.c.parent_id,
        sessions.c.fork_seq,
        _SESSION_TEXT_SEAL.c.seal.label("lineage_seal"),
    )
    .select_from(
        sessions.outerjoin(
            _SESSION_TEXT_SEAL,
            and_(
                _SESSION_TEXT_SEAL.c.session_id == sessions.c.id,
                _SESSION_TEXT_SEAL.c.namespace == NS,
            ),
        )
    )
    .where(sessions.c.namespace == NS, sessions.c.id > bindparam("after", type_=Id))
    .order_by(sessions.c.id)
    .limit(bindparam("limit", type_=BigInteger()))
)


def reseal_session(
    session_id: str, namespace: str, new: dict[str, str | None], old: dict[str, str | None]
) -> Bound:
    """Replace the sealed columns of a session if they are still ``old``; returns ``id``
    when they were."""
    params = _scope(session_id, namespace)
    for n in SEALED_SESSION_COLUMNS:
        params[f"new_{n}"] = new[n]
        params[f"old_{n}"] = old[n]
    return _RESEAL_SESSION, params


_RESEAL_SESSION = (
    update(sessions)
    .where(
        sessions.c.id == SID,
        sessions.c.namespace == NS,
        *[
            sessions.c[n].is_not_distinct_from(bindparam(f"old_{n}", type_=Text()))
            for n in SEALED_SESSION_COLUMNS
        ],
    )
    .values({n: bindparam(f"new_{n}", type_=Text()) for n in SEALED_SESSION_COLUMNS})
    .returning(sessions.c.id)
)


def lineage_seals_table(namespace: str) -> Bound:
    """A read of no rows of :data:`tables.lineage_seals`: it fails on a schema without
    the table (before revision 0010), which an encrypted store needs."""
    return _LINEAGE_SEALS_TABLE, {"ns": namespace}


_LINEAGE_SEALS_TABLE = (
    select(lineage_seals.c.session_id).where(lineage_seals.c.namespace == NS).limit(0)
)


def seal_lineage(
    session_id: str, namespace: str, seal: str, flavour: str, *, old: str | None = None
) -> Bound:
    """Write the lineage seal of the session ``session_id`` of ``namespace`` (an encrypted
    store's, in the transaction that writes the session's row): inserted, or replacing the
    one it has. With ``old`` (re-encryption's compare-and-set), a seal it has is replaced
    only if it is still ``old``; returns ``session_id`` when written. Nothing is written
    for a session that is not there (an ``INSERT … ON CONFLICT DO NOTHING`` that lost)."""
    params = _scope(session_id, namespace, seal=seal)
    if old is None:
        return _seal_lineage(flavour, False), params
    return _seal_lineage(flavour, True), {**params, "old": old}


@_shape
def _seal_lineage(flavour: str, compare: bool) -> Executable:
    s, t = sessions.c, lineage_seals.c
    # INSERT … SELECT from the session's row: ON CONFLICT takes it on SQLite only with a
    # WHERE, which the session's id and namespace give.
    stmt = _upsert(flavour, lineage_seals).from_select(
        ["namespace", "session_id", "seal"],
        select(s.namespace, s.id, bindparam("seal", type_=Text())).where(
            s.id == SID, s.namespace == NS
        ),
    )
    same = t.seal == bindparam("old", type_=Text()) if compare else None
    return stmt.on_conflict_do_update(
        index_elements=["namespace", "session_id"],
        set_={"seal": stmt.excluded.seal},
        where=same,
    ).returning(t.session_id)


def sealed_session_params(stmt: Any) -> tuple[str, dict[str, str], str | None] | None:
    """For a statement that writes sealed session columns: the parameter holding the
    session's id, ``{parameter: column}`` of those columns, and the prefix of the
    parameters ``parent_id`` and ``fork_seq`` when it writes the lineage (then the
    encrypted store writes its seal, :func:`seal_lineage`; ``None`` when not); ``None``
    for any other statement.
    (The appends' head bump is the encrypting backend's own business: ``name``.)"""
    by_name = {n: n for n in SEALED_SESSION_COLUMNS}
    if stmt is insert_rows(sessions.name) or any(
        stmt is _insert_keyed_session(f) for f in (POSTGRES, SQLITE)
    ):
        return "id", by_name, ""
    if stmt is _RENAME:
        return "sid", {"name": "name"}, None
    if stmt is _SET_METADATA:
        return "sid", {"meta": "metadata_json"}, None
    if stmt is _UPDATE_SESSION_ROW:
        return "id_", {f"v_{n}": n for n in SEALED_SESSION_COLUMNS}, "v_"
    return None


SHAPE_NAMES.update(
    (id(value), name)
    for name, value in list(globals().items())
    if isinstance(value, Executable) and id(value) not in SHAPE_NAMES
)
