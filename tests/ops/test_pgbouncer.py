"""sessiondb behind a real PgBouncer in transaction mode, with fewer server connections
than concurrent clients: appends with and without uuids, context, records, listing,
overlays and forks, all through it.

The ``pgbouncer`` fixture (``helpers.pgbouncer``) starts it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sessiondb import SessionStore

pytestmark = pytest.mark.postgres_only

CLIENTS = 8


def _turn(client: int, i: int) -> list[dict[str, Any]]:
    call = f"c{client}-{i}"
    return [
        {"role": "user", "content": [{"type": "text", "text": f"q {client}-{i}"}]},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": call, "name": "read", "arguments": {}}],
        },
        {"role": "toolResult", "toolCallId": call, "content": [{"type": "text", "text": "ok"}]},
    ]


async def _client(url: str, shared: str, client: int, rounds: int) -> None:
    async with SessionStore.open(url, pool_max_size=4) as store:
        own = (await store.create_session(name=f"client {client}")).id
        for i in range(rounds):
            # Plain appends, to the shared session and to its own.
            await store.append(shared, {"role": "user", "content": f"shared {client}-{i}"})
            await store.append(own, _turn(client, i))
            # With uuids: a retry returns the stored record, adds no row.
            uuid = f"u-{client}-{i}"
            first = await store.append(own, {"role": "user", "content": "u", "uuid": uuid})
            again = await store.append(own, {"role": "user", "content": "u", "uuid": uuid})
            assert again[0].seq == first[0].seq
            assert len(await store.context(own)) >= 3
            assert (await store.records(own, kinds=["message"]))[-1].seq == first[0].seq
            await store.list_sessions(limit=5)
        # Overlays and forks on the client's own session.
        head = (await store.get_session(own)).last_seq
        await store.append_compaction(own, summary=f"client {client}", first_kept_seq=head)
        await store.tombstone(own, 1)
        child = await store.fork(own)
        await store.append(child.id, {"role": "user", "content": "in the fork"})
        context = await store.context(child.id)
        assert context[0].text().endswith(f"client {client}\n</summary>")
        assert context[-1].text() == "in the fork"


async def test_everything_works_through_pgbouncer_in_transaction_mode(
    pgbouncer: str, pg_url: str
) -> None:
    rounds = 6
    async with SessionStore.open(pgbouncer) as store:
        shared = (await store.create_session(name="shared")).id
    await asyncio.gather(*(_client(pgbouncer, shared, c, rounds) for c in range(CLIENTS)))

    # Checked directly against Postgres: every append once, gapless, heads that agree.
    async with SessionStore.open(pg_url) as direct:
        records = await direct.records(shared)
        assert [r.seq for r in records] == list(range(1, CLIENTS * rounds + 1))
        texts = sorted(r.message.text() for r in records if r.message is not None)
        assert texts == sorted(f"shared {c}-{i}" for c in range(CLIENTS) for i in range(rounds))
        page = await direct.list_sessions(limit=100)
        assert len(page.items) == 1 + CLIENTS * 2  # shared, each client's own and its fork
        for info in page.items:
            if info.parent_id is None and info.id != shared:
                assert info.last_seq == rounds * 4 + 1 + 1  # 3 + 1 per round, compaction, tombstone
                assert [r.seq for r in await direct.records(info.id, include_tombstoned=True)] == (
                    list(range(1, info.last_seq + 1))
                )
