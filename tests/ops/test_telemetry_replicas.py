"""Telemetry with read replicas, on real streaming replication (a throwaway primary and
hot standby, tests/helpers/replication.py): a read the standby served says so on its span
(``sessiondb.replica``), a write never does, and the pool gauge shows both pools."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from helpers.otel import Listener, listening
from helpers.replication import Replication, replication

from sessiondb import SessionStore
from sessiondb.backends.replicas import ReplicaBackend

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def otel() -> Iterator[Listener]:
    yield from listening()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Replication]:
    with replication(1) as made:
        asyncio.run(_migrate(made.primary.url()))
        made.wait_replayed()
        yield made


async def _migrate(url: str) -> None:
    async with SessionStore.open(url) as store:
        await store.migrate()


async def test_a_read_served_by_a_replica_says_so(cluster: Replication, otel: Listener) -> None:
    standby = cluster.standbys[0]
    async with SessionStore.open(
        cluster.primary.url(),
        replica_urls=[standby.url()],
        server_settings={"synchronous_commit": "on"},
    ) as store:
        sid = (await store.create_session()).id
        await store.append(sid, {"role": "user", "content": "x"})
        served = None
        for _ in range(100):  # until the standby has replayed the append
            otel.clear()
            assert len(await store.context(sid)) == 1
            span = otel.one("sessiondb.context")
            assert span.attributes is not None
            if span.attributes["sessiondb.replica"]:
                served = span
                break
            await asyncio.sleep(0.05)
        assert served is not None, "the standby never served the read"
        assert served.attributes is not None
        assert served.attributes["db.system"] == "postgresql"
        router = store.core.backend
        assert isinstance(router, ReplicaBackend)
        counts = router.read_counts()
        assert sum(n for where, n in counts.items() if where != "primary") >= 1, counts

        otel.clear()
        await store.append(sid, {"role": "user", "content": "y"})
        append = otel.one("sessiondb.append")
        assert append.attributes is not None
        assert append.attributes["sessiondb.replica"] is False

        points = otel.points("db.client.connection.count", **{"db.namespace": "postgres"})
        pools = {p.attributes["db.client.connection.pool.name"] for p in points}
        assert any(str(cluster.primary.port) in p for p in pools), pools
        assert any(str(standby.port) in p for p in pools), pools
