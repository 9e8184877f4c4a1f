"""What the store really sends to Postgres is what the Citus plan walks.

The walk of ``tests/helpers/citus_plan.py`` (checked by ``tests/unit/test_citus_plan.py``)
covers the builders of :mod:`sessiondb.statements`. This test runs the store's public
API over a real Postgres and records every statement its connections send (asyncpg's
query logger, installed by a connection class passed as ``connect_args``), then asks
that each one is a shape of the walked catalogue. A statement sent from anywhere else,
or a shape the walk does not make, fails here with its text.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from helpers.citus_plan import PLAN, uncatalogued
from helpers.messages import assistant, result, user
from helpers.sent_sql import recording, sessiondb_statements

from sessiondb import SessionStore, TurnTimeoutError

pytestmark = pytest.mark.postgres_only

SENT: list[str] = []
RECORD = recording(SENT)


async def _tour(store: SessionStore, tmp_path: Path) -> None:
    """Every kind of call a service makes: sessions, appends, reads, forks, overlays,
    turns, retention, import and export."""
    info = await store.create_session(name="tour", metadata={"a": 1})
    sid = info.id
    await store.append(sid, user("hello", uuid="u-1"))
    await store.append(sid, [assistant("call", ["A"]), result("A")], expected_seq=1)
    await store.append(sid, user("hello", uuid="u-1"))  # idempotent by uuid
    await store.append(sid, [user("x", uuid="u-2"), user("y", uuid="u-3")])
    await store.context(sid)
    await store.context(sid, last=2)
    await store.context_json(sid)
    await store.records(sid)
    await store.records(sid, include_tombstoned=True, include_superseded=False)
    await store.records(sid, kinds=["message"], from_seq=2, to_seq=4)
    await store.get_session(sid)
    await store.rename(sid, "renamed")
    keyed = await store.session_for_key("chat-1")
    await store.session_for_key("chat-1")
    await store.append(keyed.id, user("k"))
    page = await store.list_sessions(limit=1)
    await store.list_sessions(limit=1, cursor=page.next_cursor, source="interactive")
    await store.list_sessions(parent_id=sid)
    await store.append_prune(sid, [3])
    await store.append_compaction(sid, summary="so far", first_kept_seq=4)
    await store.tombstone(sid, 5)
    await store.pop(sid)
    child = await store.fork(sid, at_seq=3)
    await store.append(child.id, user("in the fork"))
    await store.context(child.id)
    detached = await store.fork(sid, detach=True)
    await store.context(detached.id)
    await store.clear(child.id)
    found = await store.search("hello OR fork", limit=1, roles=["user"], hidden=True)
    await store.search(
        "hello OR fork", limit=1, roles=["user"], hidden=True, cursor=found.next_cursor
    )
    await store.search("fork -nothing", session_id=child.id, since=info.created_at)
    async with store.turn(sid, holder="worker") as turn:
        await turn.append(user("in a turn"))
        with pytest.raises(TurnTimeoutError):  # a second worker waits in line, gives up
            async with store.turn(sid, holder="second", timeout=0.3):
                pass
    out = tmp_path / "export"
    await store.export_session(sid, out)
    await store.export_all(out)
    await store.import_sessions([{"name": "bulk", "messages": [user("a"), assistant("b")]}])
    async with SessionStore.open(
        store.settings.url.render_as_string(hide_password=False),
        "other",
        connect_args=RECORD,
    ) as other:
        await other.import_path(out)
        await other.import_path(out)  # again: every session is there already
    await store.expire(timedelta(days=1), dry_run=True)
    await store.delete_session(detached.id)
    await store.delete_session(sid, cascade=True)
    await store.expire(timedelta(microseconds=1))


async def test_every_statement_sent_is_in_the_walked_catalogue(pg_url: str, tmp_path: Path) -> None:
    SENT.clear()
    async with SessionStore.open(pg_url, "tenant", connect_args=RECORD) as store:
        await _tour(store, tmp_path)
    sent = sessiondb_statements(SENT)
    unknown, used = uncatalogued(sent)
    assert not unknown, (
        f"{len(unknown)} statement(s) sent that the Citus plan's walk does not make "
        f"(add the builder or shape to tests/helpers/citus_plan.py; see {PLAN}):\n"
        + "\n---\n".join(unknown)
    )
    print(f"{len(sent)} statements sent, from {len(used)} builders: {sorted(used)}")
    # The tour reaches the statements of every part of the plan.
    assert {"append_one", "append_many", "context", "context_tail", "turn_enqueue"} <= used
    assert {"copy_lineage", "expiry_plan", "namespace_records", "existing_sessions"} <= used
    assert {"turn_claim", "turn_ahead", "turn_purge", "turn_renew", "turn_release"} <= used
    assert "search" in used
    # COPY (bulk import) goes by asyncpg's copy protocol, which its query logger does
    # not see; its rows are checked against the plan by tests/unit/test_citus_plan.py.
    assert len(sent) >= 40
