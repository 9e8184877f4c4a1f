"""Reads through read replicas on real streaming replication: a throwaway primary and a
hot standby made with ``pg_basebackup -R`` (tests/helpers/replication.py). Each read after
the store's own write sees that write; the standby serves most reads (counted by the
store and on the standby itself); a standby stopped mid-run sends reads back to the
primary with no error; ``read_consistency="eventual"`` reads the standby unchecked; a
standby lagging beyond ``max_replica_lag`` is skipped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.replication import Replication, free_port, replication

from sessiondb import Message, SessionStore
from sessiondb.backends.replicas import PROBE_SECONDS, ReplicaBackend

pytestmark = pytest.mark.postgres_only

PAIRS = 300


@pytest.fixture(scope="module")
def cluster() -> Iterator[Replication]:
    # Commits wait for the standby only where a store asks (synchronous_commit).
    with replication(1, settings=["synchronous_standby_names=*"]) as made:
        asyncio.run(_migrate(made.primary.url()))
        made.wait_replayed()
        yield made


async def _migrate(url: str) -> None:
    async with SessionStore.open(url) as store:
        await store.migrate()


def _router(store: SessionStore) -> ReplicaBackend:
    backend = store.core.backend
    assert isinstance(backend, ReplicaBackend)
    return backend


def _standby_reads(cluster: Replication) -> int:
    """Transactions the standby committed: each read it served is one."""
    return int(
        cluster.standbys[0].sql(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'"
        )
    )


def _texts(messages: list[Message]) -> list[str]:
    return [m.content if isinstance(m.content, str) else m.content[0].text for m in messages]


def _commit(mode: str) -> dict[str, Any]:
    return {"server_settings": {"synchronous_commit": mode}}


async def _pairs(store: SessionStore, session_id: str, start: int, count: int) -> None:
    """Append-then-read pairs; each read must see the append before it."""
    for i in range(start, start + count):
        await store.append(session_id, {"role": "user", "content": f"m{i}"})
        context = await store.context(session_id)
        assert _texts(context)[-1] == f"m{i}", f"pair {i} missed its write"
        assert len(context) == i + 1


async def test_each_read_sees_its_own_write_and_the_standby_serves_most(
    cluster: Replication,
) -> None:
    before = _standby_reads(cluster)
    # remote_apply: a commit returns once the standby has applied it, so the standby can
    # answer every read after it; the check is what lets the store know.
    async with SessionStore.open(
        cluster.primary.url(), replica_urls=[cluster.standbys[0].url()], **_commit("remote_apply")
    ) as store:
        info = await store.create_session(name="replica reads")
        await _pairs(store, info.id, 0, PAIRS)
        got = await store.get_session(info.id)
        assert got.last_seq == PAIRS
        records = await store.records(info.id)
        assert [r.seq for r in records] == list(range(1, PAIRS + 1))
        assert info.id in [s.id for s in (await store.list_sessions()).items]
        counts = _router(store).read_counts()
    served = counts[next(k for k in counts if k != "primary")]
    total = sum(counts.values())
    assert served >= 0.9 * total, counts
    # On the standby's own count (flushed when the store's connections closed).
    deadline = time.monotonic() + 10
    while _standby_reads(cluster) - before < served and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert _standby_reads(cluster) - before >= served, (counts, before)
    print(f"replica reads: {counts}")


async def test_asynchronous_replication_still_reads_own_writes(cluster: Replication) -> None:
    """Commits that do not wait for the standby: a read the standby cannot yet answer
    goes to the primary; none misses its write."""
    async with SessionStore.open(
        cluster.primary.url(), replica_urls=[cluster.standbys[0].url()], **_commit("local")
    ) as store:
        info = await store.create_session()
        await _pairs(store, info.id, 0, PAIRS)
        counts = _router(store).read_counts()
    assert sum(counts.values()) == PAIRS + 1  # create_session reads the session back
    print(f"asynchronous replica reads: {counts}")


async def test_concurrent_tasks_of_one_store_each_read_their_own_writes(
    cluster: Replication,
) -> None:
    """Overlapping writes of one store: a read must find every write that ended before
    it began, whichever order their commits reached the standby in."""
    async with SessionStore.open(
        cluster.primary.url(), replica_urls=[cluster.standbys[0].url()], **_commit("local")
    ) as store:
        ids = [(await store.create_session()).id for _ in range(8)]
        await asyncio.gather(*(_pairs(store, sid, 0, 30) for sid in ids))
        for sid in ids:
            assert len(await store.records(sid)) == 30
        counts = _router(store).read_counts()
    assert sum(counts.values()) == 8 + 8 * 30 + 8, counts
    print(f"concurrent replica reads: {counts}")


async def test_a_read_after_overlapping_writes_checks_for_each(cluster: Replication) -> None:
    async with SessionStore.open(
        cluster.primary.url(), replica_urls=[cluster.standbys[0].url()], **_commit("local")
    ) as store:
        router = _router(store)
        a, b = [(await store.create_session()).id for _ in range(2)]
        cluster.wait_replayed()
        await store.get_session(a)  # the replica is seen to have both sessions
        assert router.log.since(router.replicas[0].seen) == []
        await asyncio.gather(
            store.append(a, {"role": "user", "content": "a1"}),
            store.append(b, {"role": "user", "content": "b1"}),
        )
        replica = router.replicas[0]
        assert len(router.log.since(replica.seen) or []) == 2  # neither covers the other
        cluster.wait_replayed()
        served = router.read_counts()[replica.where]
        assert _texts(await store.context(a)) == ["a1"]
        assert _texts(await store.context(b)) == ["b1"]
        assert router.read_counts()[replica.where] == served + 2
        assert router.log.since(replica.seen) == []


async def test_a_standby_stopped_mid_run_sends_reads_to_the_primary(cluster: Replication) -> None:
    standby = cluster.standbys[0]
    async with SessionStore.open(
        cluster.primary.url(), replica_urls=[standby.url()], **_commit("local")
    ) as store:
        router = _router(store)
        info = await store.create_session()
        await _pairs(store, info.id, 0, 50)
        on_standby = router.read_counts()[router.replicas[0].where]
        assert on_standby > 0
        standby.stop("immediate")
        try:
            await _pairs(store, info.id, 50, 100)  # no error, every write seen
            assert router.read_counts()[router.replicas[0].where] == on_standby
            assert not router.replicas[0].well
        finally:
            standby.start()
        cluster.wait_replayed()
        # Found well again by a probe, it serves reads again.
        deadline = time.monotonic() + 30
        while router.read_counts()[router.replicas[0].where] == on_standby:
            assert time.monotonic() < deadline, "the restarted standby never served again"
            await asyncio.sleep(PROBE_SECONDS / 2)
            assert len(await store.context(info.id)) == 150


async def test_an_unreachable_replica_is_skipped_without_an_error(cluster: Replication) -> None:
    nowhere = f"postgresql://app:S3cr3tPw@127.0.0.1:{free_port()}/postgres"
    async with SessionStore.open(
        cluster.primary.url(),
        replica_urls=[nowhere, cluster.standbys[0].url()],
        connect_timeout=2,
        **_commit("remote_apply"),
    ) as store:
        router = _router(store)
        info = await store.create_session()
        await _pairs(store, info.id, 0, 20)
        counts = router.read_counts()
        assert counts[router.replicas[0].where] == 0
        assert "S3cr3tPw" not in router.replicas[0].where
        assert counts[router.replicas[1].where] >= 18, counts
        assert not router.replicas[0].well


def _apply_delay(cluster: Replication, delay: str) -> None:
    standby = cluster.standbys[0]
    standby.sql(f"ALTER SYSTEM SET recovery_min_apply_delay = '{delay}'")
    standby.sql("SELECT pg_reload_conf()")


async def test_eventual_reads_skip_the_check_and_lag_beyond_the_limit_skips(
    cluster: Replication,
) -> None:
    standby = cluster.standbys[0]
    async with SessionStore.open(cluster.primary.url()) as writer:
        info = await writer.create_session()
    cluster.wait_replayed()
    _apply_delay(cluster, "4s")
    try:
        common = {"replica_urls": [standby.url()], **_commit("local")}
        async with (
            SessionStore.open(cluster.primary.url(), read_consistency="eventual", **common) as ev,
            SessionStore.open(cluster.primary.url(), max_replica_lag=3600, **common) as checked,
        ):
            assert await ev.context(info.id) == []  # the standby answers
            await checked.append(info.id, {"role": "user", "content": "fresh"})
            # Eventual: the standby, 4 s behind, does not have it yet.
            assert await ev.context(info.id) == []
            assert _router(ev).read_counts()[_router(ev).replicas[0].where] == 2
            # Session consistency: the store's own write, so the primary answers.
            assert _texts(await checked.context(info.id)) == ["fresh"]
        # A limit below the lag: the standby is skipped, even by eventual reads.
        async with SessionStore.open(
            cluster.primary.url(), read_consistency="eventual", max_replica_lag=1, **common
        ) as strict:
            router = _router(strict)
            for i in range(3):
                await strict.append(info.id, {"role": "user", "content": f"x{i}"})
                await asyncio.sleep(PROBE_SECONDS)
            await strict.get_session(info.id)  # starts a probe; the next read sees it
            await asyncio.sleep(PROBE_SECONDS / 2)
            assert router.replicas[0].lag > 1, router.replicas[0]
            context = await strict.context(info.id)
            assert _texts(context)[-1] == "x2"
            assert router.read_counts()[router.replicas[0].where] == 0
    finally:
        _apply_delay(cluster, "0")
    cluster.wait_replayed()
