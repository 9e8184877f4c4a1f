"""The context query's cost does not grow with history length: on Postgres, over a session
of 20,000 records with a compaction and tombstones, the plan that actually runs reaches
the records table by index only (no ``Seq Scan on sessiondb_records``).

The statement is prepared exactly as the store sends it (its SQL, with ``$1``/``$2`` for
the session and namespace), and Postgres is made to use its generic plan, the one it
settles on for a statement it runs again and again. The plan is written to
``/tmp/explain_plan.txt`` for the design notes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.messages import assistant, result, user
from helpers.overlays import summary_text

from sessiondb import SessionStore
from sessiondb import statements as q
from sessiondb.tables import RESPONSES_INDEX

pytestmark = pytest.mark.postgres_only

RECORDS = 20_000
BATCH = 1_000
PLAN_FILE = Path("/tmp/explain_plan.txt")


def _turn(i: int) -> list[dict[str, Any]]:
    """Four records: a question, a tool call, its result, an answer."""
    call = f"call-{i}"
    return [user(f"q{i}"), assistant(f"looking {i}", [call]), result(call), assistant(f"a{i}")]


async def _generic_plan(url: str, bound: q.Bound) -> list[str]:
    """EXPLAIN of the prepared statement the store runs, with the generic plan forced."""
    stmt, params = bound
    return await sql.database(url).explain(stmt, params, generic=True)


async def test_context_query_reads_records_by_index_only(pg_url: str) -> None:
    async with SessionStore.open(pg_url) as store:
        sid = (await store.create_session()).id
        turns = [m for i in range(RECORDS // 4) for m in _turn(i)]
        for start in range(0, RECORDS, BATCH):
            await store.append(sid, turns[start : start + BATCH])
        # Keep the last 250 turns: seq 19,001 is the question of turn 4,750.
        await store.append_compaction(sid, summary="4,750 turns", first_kept_seq=19_001)
        await store.tombstone(sid, 101)  # superseded already
        await store.tombstone(sid, 19_005)  # a kept question
        await store.tombstone(sid, 19_011)  # a kept tool result: takes its call (19,010)
        child = await store.fork(sid)
        await store.append(child.id, [user("child question")])
        await store.tombstone(child.id, 19_009)
        await sql.execute(store, "ANALYZE sessiondb_records")
        await sql.execute(store, "ANALYZE sessiondb_sessions")

        ns = store.namespace
        root_plan = await _generic_plan(pg_url, q.context(sid, ns, q.POSTGRES))
        child_plan = await _generic_plan(pg_url, q.context(child.id, ns, q.POSTGRES))
        texts_plan = await _generic_plan(pg_url, q.context_texts(sid, ns))
        probe_plan = await _generic_plan(
            pg_url,
            q.nearest_message(sid, ns, roles=("assistant",), at_or_before=19_500),
        )

        PLAN_FILE.write_text(
            f"-- context of a {RECORDS:,}-record session (compaction + tombstones)\n"
            + "\n".join(root_plan)
            + "\n\n-- context of a fork of it (lineage of two sessions)\n"
            + "\n".join(child_plan)
            + "\n\n-- context_json's texts of the session (no fork, no prune)\n"
            + "\n".join(texts_plan)
            + "\n\n-- tool-pair window probe (last assistant at or before a seq)\n"
            + "\n".join(probe_plan)
            + "\n"
        )
        print(PLAN_FILE.read_text())

        for plan in (root_plan, child_plan, texts_plan, probe_plan):
            shown = "\n".join(plan)
            assert "Seq Scan on sessiondb_records" not in shown, shown
            assert "Index Scan" in shown and "on sessiondb_records" in shown, shown
        # The kept range is an index range scan bounded by first_kept_seq.
        for plan in (root_plan, texts_plan):
            assert any("seq >= COALESCE" in line for line in plan), "\n".join(plan)
        assert "Sort" not in "\n".join(texts_plan)  # the index's order is the seq order
        # Whether a kept message names a response: a probe of the responses index.
        assert RESPONSES_INDEX in "\n".join(texts_plan)

        # And the query gives the right answer over this history.
        context = await store.context(sid)
        assert context[0].text() == summary_text("4,750 turns")
        assert len(context) == 1 + 1_000 - 3
        assert [m.text() for m in context[1:4]] == ["q4750", "looking 4750", "result call-4750"]
        child_context = await store.context(child.id)
        assert len(child_context) == len(context) - 1 + 1
        assert child_context[-1].text() == "child question"
        for session in (sid, child.id):  # by the texts, and by the context statement
            wire = [m.to_wire() for m in await store.context(session)]
            assert json.loads(await store.context_json(session)) == wire
