"""The Citus plan (docs/scaling.md) held against every statement builder of
sessiondb.statements (the walk and the reviewed lists: ``tests/helpers/citus_plan.py``).

A statement that would be multi-shard under the plan, a new builder included, fails
with its name, unless a reviewed list names it with its reason; an entry that no longer
fails, or names no builder, fails too, so the lists stay exact.
"""

from __future__ import annotations

import pytest
from helpers.citus_plan import (
    BEFORE_MIGRATION,
    COLUMN,
    COPIED,
    COPY_BEFORE_MIGRATION,
    CROSS_SHARD,
    PLAN,
    builders,
    problems,
    shapes,
    unpinned,
)
from sqlalchemy import Select

from sessiondb import statements as q
from sessiondb import tables

LISTS = "tests/helpers/citus_plan.py"

BUILDERS = builders()


def test_the_catalogue_is_walked() -> None:
    """The walk reaches the statements it is about (a broken enumeration is no pass)."""
    assert {"context", "append_one", "turn_enqueue", "adk_session", "expiry_plan"} <= set(BUILDERS)
    assert len(BUILDERS) >= 50
    assert sum(1 for _ in shapes("lineage_records", BUILDERS["lineage_records"])) >= 10


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_statement_follows_the_citus_plan(name: str) -> None:
    found = set(problems(name, BUILDERS[name]))
    for listed, entries in (("CROSS_SHARD", CROSS_SHARD), ("BEFORE_MIGRATION", BEFORE_MIGRATION)):
        if name not in entries:
            continue
        expected = entries[name].problems
        assert found, (
            f"statements.{name} is a single-shard statement now: remove it from {listed} "
            f"in {LISTS} and from {PLAN}"
        )
        assert found == expected, (
            f"statements.{name} ({listed} in {LISTS}) changed: new problems "
            f"{sorted(found - expected)}, gone {sorted(expected - found)}; fix the statement "
            f"or review the entry and {PLAN}"
        )
        return
    assert not found, (
        f"statements.{name} would be a multi-shard query on Citus: "
        + "; ".join(sorted(found))
        + f". The plan ({PLAN}) distributes every table by {COLUMN}: filter each table "
        f"on {COLUMN} = :ns, or, if it must fan out, list it in CROSS_SHARD in "
        f"{LISTS} with the reason, and in {PLAN}"
    )


def test_the_lists_name_statements() -> None:
    stale = sorted((set(CROSS_SHARD) | set(BEFORE_MIGRATION)) - set(BUILDERS))
    assert not stale, f"listed, but statements.py has no such builder: {stale}"
    both = sorted(set(CROSS_SHARD) & set(BEFORE_MIGRATION))
    assert not both, f"in both lists: {both}"


def test_the_checks_see_a_missing_pin() -> None:
    """The detector itself: an alias joined by id alone is reported, the same alias
    pinned is not."""
    parent = tables.sessions.alias("parent")
    s = tables.sessions
    loose = (
        Select(parent.c.id)
        .select_from(s.join(parent, parent.c.id == s.c.parent_id))
        .where(s.c.id == q.SID, s.c.namespace == q.NS)
    )
    assert unpinned(loose) == [f"{tables.SESSIONS} AS parent"]
    pinned = loose.where(parent.c.namespace == q.NS)
    assert unpinned(pinned) == []
    either = loose.where((parent.c.namespace == q.NS) | (parent.c.id == q.SID))
    assert unpinned(either) == [f"{tables.SESSIONS} AS parent"]


@pytest.mark.parametrize("table", sorted(COPIED))
def test_copy_rows_carry_the_column(table: str) -> None:
    """COPY (bulk import) routes each row by its own value of the column: a row without
    it cannot be placed."""
    has = COLUMN in COPIED[table]
    if table in COPY_BEFORE_MIGRATION:
        assert not has, f"COPY into {table} carries {COLUMN} now: remove it from " + (
            f"COPY_BEFORE_MIGRATION in {LISTS} and from {PLAN}"
        )
    else:
        assert has, f"COPY into {table} has no {COLUMN} column: see {PLAN}"


def test_every_shape_is_distinct_enough() -> None:
    """The shapes of a builder with varying parameters are not all one statement."""
    texts = {str(s) for s in shapes("list_sessions", BUILDERS["list_sessions"])}
    assert len(texts) >= 4
