"""The Citus plan of docs/scaling.md as data, and the walk of sessiondb's statement
catalogue that holds statements to it (``tests/unit/test_citus_plan.py``,
``tests/ops/test_citus_statements.py``).

The plan distributes every sessiondb table by ``namespace``. A statement Citus can send
to one shard names the shard's key: each reference to a distributed table is filtered
on ``namespace = :ns`` (or, for an insert, supplies the namespace). The walk takes every
public builder of :mod:`sessiondb.statements`, in each of its shapes, compiled for
Postgres exactly as the backend compiles it, and finds what keeps each statement from
being a single-shard query:

- **keyed**: it binds the store's namespace (``:ns``, or ``:namespace`` for an insert of
  a row), so the store can hand Citus the shard key without a lookup;
- **pinned**: every reference to a table that has the ``namespace`` column (today the
  sessions and the two ADK tables; the records and turns tables once the migration of
  docs/scaling.md adds it) carries ``namespace = :ns`` among its conjuncts (WHERE or
  JOIN … ON), aliases and subqueries included;
- **no VOLATILE function in a modification**, which Citus refuses.

A statement that fails is named in one of two reviewed lists, each entry with its
reason: :data:`CROSS_SHARD` (multi-shard on purpose, and staying so) and
:data:`BEFORE_MIGRATION` (router-ready only once the migration has added the column and
the filter).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from itertools import product
from typing import Any, NamedTuple

import pytest
from sqlalchemy import Delete, Insert, Select, Table, Update
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, BindParameter, BooleanClauseList
from sqlalchemy.sql.selectable import Alias, FromClause, Join

from sessiondb import search_statements as sq
from sessiondb import shapes as named
from sessiondb import statements as q
from sessiondb import tables

PLAN = "docs/scaling.md"
# The planned distribution column, and the parameter every statement binds it as.
COLUMN = "namespace"
KEY_PARAMS = {"ns", "namespace"}
DISTRIBUTED = {t.name for t in tables.metadata.sorted_tables}

NO_NS = "binds no :ns"
CLOCK = "calls VOLATILE clock_timestamp() in a modification"


def loose(table: str, alias: str | None = None) -> str:
    """The problem of a reference to ``table`` (as ``alias``) that is not pinned."""
    return f"{table}{f' AS {alias}' if alias else ''} not filtered on {COLUMN} = :ns"


S, ADK_S, ADK_ST = tables.SESSIONS, tables.ADK_SESSIONS, tables.ADK_STATE


class Gap(NamedTuple):
    """Why a listed statement is not (yet) a router query, and exactly the problems the
    walk finds in it: a new problem in a listed statement fails as much as in another."""

    reason: str
    problems: frozenset[str]


def gap(reason: str, *problems: str) -> Gap:
    return Gap(reason, frozenset(problems))


# Statements that stay multi-shard under the plan, on purpose.
CROSS_SHARD: dict[str, Gap] = {
    "exclusive_lock": gap("an advisory lock, no table: taken on the coordinator", NO_NS),
    "notify": gap(
        "pg_notify for the change feed (a turn's release), no table: sent by the coordinator, "
        "where the feed's LISTEN connection is",
        NO_NS,
    ),
    "estimated_records": gap(
        "reads pg_class for the planner's row estimate (import progress); on Citus the "
        "coordinator's shell table says 0, a harmless under-estimate",
        NO_NS,
    ),
    "analyze": gap("ANALYZE after a bulk import: Citus runs it on every shard", NO_NS),
    "word_statistics": gap(
        "reads pg_class and pg_stats for search's common words; on Citus the coordinator's "
        "shell table has none, and search reads every window through the GIN index",
        NO_NS,
    ),
    "other_namespace": gap(
        "whether any other namespace exists (export's fast path): a probe of every shard "
        "by its nature, once per export",
        loose(S),
    ),
    "existing_sessions": gap(
        "an import asks which of its derived ids exist in any namespace, once per batch, "
        "to refuse an id another namespace holds",
        NO_NS,
        loose(S),
    ),
    "namespace_records": gap(
        "only the every=True shape, which reads the whole table in key order when the "
        "store's namespace holds every session; the default shape is keyed",
        NO_NS,
    ),
}

# Statements that are router queries only after the migration of docs/scaling.md, and
# what it changes in each. Emptied as the migration lands.
_LINEAGE = "lineage's recursive term joins the parent by id alone: add parent.namespace = :ns"
BEFORE_MIGRATION: dict[str, Gap] = {
    "context": gap(_LINEAGE, loose(S, "parent")),
    "context_tail": gap(_LINEAGE, loose(S, "parent")),
    "lineage_records": gap(_LINEAGE, loose(S, "parent")),
    "nearest_message": gap(_LINEAGE, loose(S, "parent")),
    "lineage_ids": gap(_LINEAGE, loose(S, "parent")),
    "existing_uuids": gap(_LINEAGE, loose(S, "parent")),
    "copy_lineage": gap(_LINEAGE, loose(S, "parent")),
    "lineage_record_rows": gap(_LINEAGE, loose(S, "parent")),
    "lineage_structure": gap(_LINEAGE, loose(S, "parent")),
    "reseal_record": gap("keyed by session id alone: takes ns (records gain it)", NO_NS),
    "subtree_ids": gap(
        "the recursive term joins children by parent_id alone: add child.namespace = :ns",
        loose(S, "child"),
    ),
    "expiry_plan": gap(
        "the recursive term (child) and the member join: add namespace = :ns",
        loose(S, "child"),
        loose(S, "member"),
    ),
    "count_messages": gap("keyed by session id alone: takes ns (records gain it)", NO_NS),
    "delete_sessions": gap(
        "by a list of ids alone: both deletes take namespace = :ns", NO_NS, loose(S)
    ),
    "update_session_row": gap("by id alone (import): takes namespace = :ns", NO_NS, loose(S)),
    "insert_rows": gap("records rows gain the namespace column (sessions rows have it)", NO_NS),
    "insert_records_indexed": gap(
        "bulk records with their search text (as insert_rows): the rows gain the namespace column",
        NO_NS,
    ),
    "search": gap(
        "only the session_id= shape, whose lineage is as context's; the namespace-wide "
        "search is pinned by its join to the sessions",
        loose(S, "parent"),
    ),
    "copy_search_sqlite": gap(
        "SQLite only (a detached fork's FTS5 rows), never run on Postgres; as copy_lineage",
        loose(S, "parent"),
    ),
    "turn_purge": gap(
        "keyed by session id alone, and clock_timestamp() in its WHERE: takes ns; the "
        "clock is the open question of docs/scaling.md section 4",
        NO_NS,
        CLOCK,
    ),
    "turn_claim": gap("as turn_purge (clock_timestamp() in SET and WHERE)", NO_NS, CLOCK),
    "turn_renew": gap("as turn_purge", NO_NS, CLOCK),
    "turn_ahead": gap("keyed by session id alone: takes ns (turns gain it)", NO_NS),
    "turn_enqueue": gap("clock_timestamp() in an INSERT … SELECT: as turn_purge", CLOCK),
    "adk_session": gap(
        "the joins to sessions and to both state rows are on other columns: each takes "
        "namespace = :ns",
        loose(S),
        loose(ADK_ST, "app_state"),
        loose(ADK_ST, "user_state"),
    ),
    "adk_events": gap("keyed by session id alone: takes ns (records gain it)", NO_NS),
    "adk_first_event": gap("as adk_events", NO_NS),
    "adk_update_session": gap("by session_id alone: takes namespace = :ns", NO_NS, loose(ADK_S)),
    "adk_touch_session": gap("as adk_update_session", NO_NS, loose(ADK_S)),
    "adk_session_state": gap("as adk_update_session", NO_NS, loose(ADK_S)),
}

# Rows written by COPY (bulk import, sessiondb.bulk): each table's columns in table
# order. A table here is copied without the column until the migration adds it.
COPY_BEFORE_MIGRATION: dict[str, str] = {
    tables.RECORDS: "records gain the namespace column; COPY then carries it per row",
}
COPIED = {tables.SESSIONS: q.SESSION_COLUMN_NAMES, tables.RECORDS: q.RECORD_COLUMN_NAMES}

# Functions Postgres marks VOLATILE that a statement might call.
VOLATILE = ("clock_timestamp", "random", "gen_random_uuid", "nextval", "timeofday")

# Public callables of the module that make parts of statements, not statements.
NOT_STATEMENTS = {
    "const",
    "list_param",
    "lineage",
    "db_now",
    "payload_bytes",
    "search_vector",
    # Which parameters of a statement the encrypting backend seals: a lookup, no statement.
    "sealed_session_params",
    # The bounds of a search's window read from its first row: no statement.
    "window_of",
    # A named statement's shape, its name, and a shape's statement: no statements of
    # their own.
    "shape",
    "shape_name",
    "name_of",
    "statement_of",
}

_ID = "01J00000000000000000000000"
_AT = datetime(2026, 1, 1, tzinfo=UTC)
# Values per parameter: the first is the base shape; each other one makes another shape.
SAMPLES: dict[str, tuple[Any, ...]] = {
    "session_id": (_ID,),
    "source_id": (_ID,),
    "target_id": (_ID,),
    "namespace": ("tenant",),
    "flavour": (q.POSTGRES,),
    "last": (5,),
    "upto": (5,),
    "ticket": (1,),
    "to_seq": (5, None),
    "from_seq": (None, 2),
    "include_tombstoned": (False, True),
    "include_superseded": (False, True),
    "descending": (False, True),
    "every": (False, True),
    "lock": (False, True),
    "with_turns": (True, False),
    "expected": (False, True),
    "lean": (False, True),
    "tracked": (False, True),
    "indexed": (True, False),
    "payload": ("r 1 01J00000000000000000000000 tenant",),
    "since": (_AT,),
    "notify": (False, True),
    "kinds": (None, ("message", "compaction")),
    "roles": (("user",), None),
    "extra_columns": ((), ("target_seq",)),
    "at_or_before": (None, 3),
    "uuids": (["u1"],),
    "ids": ([_ID],),
    "key": ("chat-1",),
    "prefix": ("project/",),
    "name": ("a name",),
    "metadata_json": (None, "{}"),
    "values": ({},),
    "source": (None, "cron"),
    "parent_id": (None, _ID),
    "cutoff": (_AT,),
    "token": ("t" * 32,),
    "holder": ("worker",),
    "lease": (30.0,),
    "app": ("app",),
    "user": ("user", None),
    "adk_id": ("adk-1",),
    "scope": ("user", "app"),
    "state_json": ("{}",),
    "update_time": (1.0,),
    "table_name": (tables.RECORDS, tables.SESSIONS),
    # Encryption at rest (sessiondb.sealing).
    "sealed": (False, True),
    "version": (1,),
    "master_key_id": ("k1",),
    "wrapped_key": ("d3JhcHBlZA==",),
    "old_wrapped_key": ("b2xk",),
    "completed": (True, False),
    "at": (_AT,),
    "seq": (3,),
    "old": ("sdb1:1:b2xk",),
    "new": ({n: None for n in q.SEALED_SESSION_COLUMNS},),
    "filtered": (False, True),
}
# Parameters whose values differ by builder.
SAMPLES_OF: dict[tuple[str, str], tuple[Any, ...]] = {
    ("list_sessions", "after"): (None, (_AT, _ID)),
    ("expiry_candidates", "after"): (None, (_AT, _ID)),
    ("sessions_by_id", "after"): (None, _ID),
    ("namespace_records", "after"): (None, (_ID, 3)),
    ("namespace_records", "flavour"): (None, q.POSTGRES),
    ("nearest_message", "after"): (None, 3),
    ("nearest_message", "roles"): (("user",), ("user", "assistant")),
    ("lineage_records", "limit"): (None, 10),
    ("adk_events", "limit"): (None, 10),
    ("list_sessions", "limit"): (50,),
    ("expiry_candidates", "limit"): (50,),
    ("sessions_by_id", "limit"): (50,),
    ("namespace_records", "limit"): (50,),
    ("session_texts", "after"): (None, _ID),
    ("session_texts", "limit"): (50,),
    ("reseal_record", "payload"): ("sdb1:2:bmV3",),
    ("reseal_session", "old"): ({n: "sdb1:1:b2xk" for n in q.SEALED_SESSION_COLUMNS},),
    ("seal_lineage", "seal"): ("sdb1:2:bmV3",),
    ("seal_lineage", "old"): (None, "sdb1:1:b2xk"),
    ("recent_activity", "limit"): (1000,),
    ("search", "query"): ("'word'",),
    ("search", "rank_query"): ("", "word"),
    ("search", "limit"): (21,),
    ("search", "search_config"): ("simple",),
    ("search", "session_id"): (None, _ID),
    ("search", "roles"): (None, ["user"]),
    ("search", "since"): (None, _AT),
    ("search", "after"): (None, (0.5, _ID, 3)),
    ("search", "hidden"): (False, True),
    ("search", "window"): (10_000,),
    ("search", "bounds"): (None, ((_AT, _ID, 3), _AT)),
    ("search", "common"): (False, True),
}


def builders() -> dict[str, Callable[..., Any]]:
    """Every public statement builder of :mod:`sessiondb.statements`, of
    :mod:`sessiondb.shapes` (a short process's, named before they are built) and of
    :mod:`sessiondb.search_statements` (the search)."""
    found = {}
    for module in (q, named, sq):
        for name, value in vars(module).items():
            if name.startswith("_") or name in NOT_STATEMENTS or not callable(value):
                continue
            if inspect.isclass(value) or getattr(value, "__module__", None) != module.__name__:
                continue
            found[name] = value
    return found


def _values(builder: str, param: str) -> tuple[Any, ...]:
    if (builder, param) in SAMPLES_OF:
        return SAMPLES_OF[builder, param]
    if param not in SAMPLES:
        pytest.fail(
            f"statements.{builder}: no sample value for its parameter {param!r}; add one "
            f"to SAMPLES in tests/helpers/citus_plan.py so that the Citus plan ({PLAN}) "
            "checks the new statement"
        )
    return SAMPLES[param]


def shapes(name: str, builder: Callable[..., Any], *, every: bool = False) -> Iterator[Any]:
    """The statements ``builder`` makes: the base shape, each varying parameter set to
    each of its other values alone, and all of them varied at once; ``every``: each
    combination of the sample values."""
    params = list(inspect.signature(builder).parameters.values())
    choices = {p.name: _values(name, p.name) for p in params}
    base = {k: v[0] for k, v in choices.items()}
    if every:
        calls = [dict(zip(choices, combo, strict=True)) for combo in product(*choices.values())]
    else:
        calls = [base]
        for k, v in choices.items():
            calls += [{**base, k: other} for other in v[1:]]
        calls.append({k: v[-1] for k, v in choices.items()})
    for kwargs in calls:
        built = builder(**kwargs)
        pairs = built if isinstance(built, tuple) and isinstance(built[0], tuple) else (built,)
        for item in pairs:
            yield named.statement_of(item[0] if isinstance(item, tuple) else item)


def _bind_names(stmt: Any) -> set[str]:
    return set(stmt.compile(dialect=asyncpg_dialect()).params)


def _conjuncts(clause: Any) -> Iterator[Any]:
    if clause is None:
        return
    if isinstance(clause, BooleanClauseList) and clause.operator is operators.and_:
        for c in clause.clauses:
            yield from _conjuncts(c)
    else:
        yield clause


def _pins(clause: Any, ref: FromClause) -> bool:
    """Whether one of ``clause``'s conjuncts is ``ref.namespace = :ns``."""
    for c in _conjuncts(clause):
        if not isinstance(c, BinaryExpression) or c.operator is not operators.eq:
            continue
        for col, other in ((c.left, c.right), (c.right, c.left)):
            if (
                getattr(col, "table", None) is ref
                and getattr(col, "name", None) == COLUMN
                and isinstance(other, BindParameter)
                and other.key in KEY_PARAMS
            ):
                return True
    return False


def _leaves(from_: FromClause, onclauses: list[Any]) -> Iterator[FromClause]:
    if isinstance(from_, Join):
        onclauses.append(from_.onclause)
        yield from _leaves(from_.left, onclauses)
        yield from _leaves(from_.right, onclauses)
    else:
        yield from_


def _table_of(ref: FromClause) -> Table | None:
    if isinstance(ref, Table):
        return ref
    if isinstance(ref, Alias) and isinstance(ref.element, Table):
        return ref.element
    return None


def unpinned(stmt: Any) -> list[str]:
    """References to a table with the distribution column that no conjunct of their
    query pins to ``:ns``, as ``table AS alias``."""
    found = []
    for element in visitors.iterate(stmt):
        clauses: list[Any]
        if isinstance(element, Select):
            clauses = [element.whereclause]
            refs = [leaf for f in element.get_final_froms() for leaf in _leaves(f, clauses)]
        elif isinstance(element, Update | Delete):
            clauses, refs = [element.whereclause], [element.table]
        else:
            continue
        for ref in refs:
            table = _table_of(ref)
            if table is None or table.name not in DISTRIBUTED or COLUMN not in table.c:
                continue
            if not any(_pins(c, ref) for c in clauses):
                alias = getattr(ref, "name", table.name)
                found.append(table.name if alias == table.name else f"{table.name} AS {alias}")
    return found


def volatile_calls(stmt: Any) -> list[str]:
    """VOLATILE functions a modification calls: Citus refuses them in UPDATE's SET and in
    the WHERE of UPDATE and DELETE, and will not push them down in INSERT … SELECT."""
    if not isinstance(stmt, Insert | Update | Delete):
        return []
    sql = str(stmt.compile(dialect=asyncpg_dialect()))
    return [f for f in VOLATILE if f"{f}(" in sql]


def problems(name: str, builder: Callable[..., Any]) -> list[str]:
    """What keeps ``name`` from being a single-shard statement under the plan."""
    found: list[str] = []
    for stmt in shapes(name, builder):
        if not _bind_names(stmt) & KEY_PARAMS:
            found.append(NO_NS)
        found += [f"{ref} not filtered on {COLUMN} = :ns" for ref in unpinned(stmt)]
        found += [f"calls VOLATILE {f}() in a modification" for f in volatile_calls(stmt)]
    return sorted(set(found))


def compiled_sql(stmt: Any) -> str:
    """The SQL text the Postgres backend sends for ``stmt`` (its compiler's)."""
    return str(stmt.compile(dialect=asyncpg_dialect()))


def skeleton(sql: str) -> str:
    """``sql`` without the values a caller picks that are rendered inline (string and
    number constants, the items of an inline ``IN`` list) and with spaces collapsed: the
    same builder's shape whatever kinds, roles or batch size it was asked for."""
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    sql = re.sub(r"(?<![$\w])\d+", "#", sql)
    sql = re.sub(r"IN \(\?(?:, \?)*\)", "IN (?)", sql)
    return " ".join(sql.split())


def catalogue() -> dict[str, str]:
    """The :func:`skeleton` of every shape the walk makes (every combination of the
    samples) -> the builder's name."""
    found: dict[str, str] = {}
    for name, builder in builders().items():
        for stmt in shapes(name, builder, every=True):
            found.setdefault(skeleton(compiled_sql(stmt)), name)
    return found


def uncatalogued(sent: set[str]) -> tuple[list[str], set[str]]:
    """The statements of ``sent`` that are no shape of the walk, and the names of the
    builders the others came from."""
    known = catalogue()
    unknown = sorted(s for s in sent if skeleton(s) not in known)
    used = {known[skeleton(s)] for s in sent if skeleton(s) in known}
    return unknown, used
