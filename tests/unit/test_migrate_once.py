"""``MigrateOnce``: the adapters' ``create_tables=True`` migrates once, however many
first calls race."""

from __future__ import annotations

import asyncio

from sessiondb.integrations.loops import MigrateOnce


class CountingStore:
    def __init__(self) -> None:
        self.calls = 0

    async def migrate(self) -> None:
        self.calls += 1
        await asyncio.sleep(0.01)  # long enough for every racer to arrive meanwhile


async def test_racing_first_calls_migrate_once() -> None:
    store = CountingStore()
    first = MigrateOnce(store, pending=True)
    await asyncio.gather(*(first() for _ in range(20)))
    await first()
    assert store.calls == 1
    assert first.pending is False


async def test_nothing_pending_runs_nothing() -> None:
    store = CountingStore()
    await MigrateOnce(store, pending=False)()
    assert store.calls == 0
