"""Export reads a namespace's records in keyset batches whose cost does not grow with the
position of the batch, right after a bulk import too.

- On SQLite the batch query is a range search on the records' primary key from the
  keyset on. Written as ``session_id IN (SELECT …)`` it walked every earlier session of
  the namespace for each batch (a plan of ``session_id=?``), so an export took time
  quadratic in its records.
- On Postgres ``import_path`` refreshes the planner's statistics after a bulk import.
  Before, until autovacuum came (up to a minute), the planner took the tables for empty
  and sorted every record of the namespace for each batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.formats import claude_code_project

from sessiondb import SessionStore, transfer
from sessiondb import statements as q


@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
@pytest.mark.parametrize("every", [False, True], ids=["checked", "alone"])
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_reads_each_batch_by_a_range_of_the_primary_key(
    store: SessionStore, every: bool, as_bytes: bool
) -> None:
    db = sql.database(store)
    flavour = db.flavour if as_bytes else None
    stmt, params = q.namespace_records(
        store.namespace, after=("s", 1), limit=10, every=every, flavour=flavour
    )
    details = " | ".join(await db.explain(stmt, params))
    assert "(session_id,seq)>(?,?)" in details, details
    assert "(session_id=?)" not in details, details


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_export_batches_cost_the_same_early_and_late(
    store: SessionStore, tmp_path: Path
) -> None:
    """Counted in SQLite's own steps, not timed: the virtual machine steps of the batch
    query are about the same for the first batch and the last."""
    report = await store.import_path(
        claude_code_project(tmp_path / "p", 40, 50), format="claude-code"
    )
    assert report.records == 2_000
    db = sql.database(store)

    async def steps(after: tuple[str, int]) -> int:
        stmt, params = q.namespace_records(store.namespace, after=after, limit=100)
        assert len(await db.fetch(stmt, **params)) == 100
        return await db.steps(stmt, params)

    ids = sorted(s.id for s in (await store.list_sessions(limit=100)).items)
    first, late = await steps((ids[0], 0)), await steps((ids[-3], 0))
    assert late <= first * 2, (first, late)


async def test_a_bulk_import_refreshes_the_planner_statistics(pg_url: str, tmp_path: Path) -> None:
    assert transfer.ANALYZE_AFTER == 10_000
    async with SessionStore.open(pg_url) as store:
        # Under the threshold: no ANALYZE of ours (autovacuum's is counted apart).
        small = await store.import_path(
            claude_code_project(tmp_path / "small", 2, 10), format="claude-code"
        )
        assert small.records == 20
        assert await _manual_analyses(pg_url) == 0
        report = await store.import_path(
            claude_code_project(tmp_path / "big", 100, 200, padding=1_000), format="claude-code"
        )
        assert report.records == 20_000
        # The ANALYZE runs after import_path returns; an export waits for it.
        written = await store.export_all(tmp_path / "out", format="claude-code")
        assert len(written) == 102
        assert await _manual_analyses(pg_url) == 1

        # The plans the export runs, for its first batch and one from the middle: the
        # records' primary key in order, nothing sorted.
        middle = sorted(report.session_ids)[50]
        for after in (None, (middle, 0)):
            plan = await _plan(pg_url, store, after)
            assert "Sort" not in plan, plan
            assert "pk_sessiondb_records" in plan, plan

        # An import of a tenth or less of what the planner knows of leaves it to
        # autovacuum, as autovacuum's own threshold would (the estimate set by hand).
        await sql.database(pg_url).execute(
            "UPDATE pg_class SET reltuples = 1e6 WHERE oid = 'sessiondb_records'::regclass"
        )
        more = await store.import_path(
            claude_code_project(tmp_path / "more", 50, 200), format="claude-code"
        )
        assert more.records == 10_000
        await store.close()  # waits for what the import left running
        assert await _manual_analyses(pg_url) == 1


async def _plan(url: str, store: SessionStore, after: tuple[str, int] | None) -> str:
    # A batch a fortieth of the rows, as an export of 200,000 records reads them (the
    # payload as bytes, as export reads it).
    db = sql.database(url)
    stmt, params = q.namespace_records(store.namespace, after=after, limit=500, flavour=db.flavour)
    return "\n".join(await db.explain(stmt, params))


async def _manual_analyses(url: str) -> int:
    return int(
        await sql.database(url).scalar(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'sessiondb_records'"
        )
    )


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_finds_another_namespace_by_two_index_probes(store: SessionStore) -> None:
    """Export asks whether another namespace exists before reading without the
    namespace check: a search of the namespace index each side, not a scan."""
    stmt, params = q.other_namespace(store.namespace)
    details = await sql.database(store).explain(stmt, params)
    searches = [d for d in details if d.startswith("SEARCH") and "(namespace<?)" in d]
    searches += [d for d in details if d.startswith("SEARCH") and "(namespace>?)" in d]
    assert len(searches) == 2, details
    assert not any(d.startswith("SCAN sessiondb") for d in details), details


async def _other_namespace(store: SessionStore) -> list[Any]:
    stmt, params = q.other_namespace(store.namespace)
    return await sql.fetch(store, stmt, **params)


async def test_another_namespace_is_seen(store: SessionStore, db_url: str) -> None:
    (row,) = await _other_namespace(store)
    assert not row.other
    await store.create_session()
    (row,) = await _other_namespace(store)
    assert not row.other
    for name in ("a-first", "zz-last"):  # before and after "default"
        async with SessionStore.open(db_url, namespace=name) as other:
            sid = (await other.create_session()).id
            (row,) = await _other_namespace(store)
            assert row.other
            await other.delete_session(sid)
