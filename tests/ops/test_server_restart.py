"""A Postgres server restarted under a write load: the test makes its own throwaway
cluster (Debian's ``pg_createcluster``, as on CI, which runs as root), stops it while
four writers on two stores append, starts it again, and checks that every acknowledged
append is stored exactly once, that failures while it was down were typed, that seqs are
gapless and the head agrees, and that the first call after it is back succeeds."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers.replication import Server
from helpers.replication import cluster as own_cluster

from sessiondb import BusyError, DatabaseUnavailableError, SessionDBError, SessionStore

pytestmark = pytest.mark.postgres_only

#: Seconds the writers may take to see the server back.
RECOVERY_TIMEOUT_S = 120.0


@pytest.fixture
def cluster() -> Iterator[Server]:
    """A fresh server on a free port with trust authentication, dropped afterwards."""
    with own_cluster("sessiondb_restart") as server:
        yield server


@dataclass
class Outcomes:
    acked: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # outcome_unknown: may be stored
    failed: list[str] = field(default_factory=list)  # retryable: nothing was stored
    with_uuid: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)


async def _writer(
    store: SessionStore,
    session_id: str,
    name: str,
    out: Outcomes,
    go: asyncio.Event,
    stop: asyncio.Event,
) -> None:
    """Append until ``stop``, every other message with a uuid; wait while ``go`` is clear."""
    i = 0
    while not stop.is_set():
        await go.wait()
        text = f"{name} i{i}"
        message: dict[str, Any] = {"role": "user", "content": text}
        if i % 2:
            message["uuid"] = str(uuid.uuid4())
            out.with_uuid.add(text)
        i += 1
        try:
            await store.append(session_id, message)
        except (DatabaseUnavailableError, BusyError) as exc:
            out.errors[type(exc).__name__] += 1
            if isinstance(exc, DatabaseUnavailableError) and exc.outcome_unknown:
                out.unknown.append(text)
            else:
                assert exc.retryable, exc
                out.failed.append(text)
            await asyncio.sleep(0.05)
        except SessionDBError as exc:  # any other typed error is a failure of the test
            raise AssertionError(f"{name}: unexpected {type(exc).__name__}: {exc}") from exc
        else:
            out.acked.append(text)


async def _until(condition: Any, what: str, writers: list[asyncio.Task[None]]) -> None:
    """Wait for ``condition``; a writer that died (an untyped error) fails the test."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while not condition():
        for task in writers:
            if task.done():
                task.result()  # raises what killed it
                raise AssertionError("a writer stopped early")
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def test_a_server_restarted_under_load_loses_and_duplicates_nothing(
    cluster: Server,
) -> None:
    stores = [await SessionStore.connect(cluster.url(), connect_timeout=5) for _ in range(2)]
    out = Outcomes()
    go, stop = asyncio.Event(), asyncio.Event()
    go.set()
    writers: list[asyncio.Task[None]] = []
    try:
        await stores[0].migrate()
        session_id = (await stores[0].create_session()).id
        writers = [
            asyncio.create_task(_writer(stores[w % 2], session_id, f"w{w}", out, go, stop))
            for w in range(4)
        ]
        await _until(lambda: len(out.acked) >= 100, "100 appends before the restart", writers)

        # Down, mid-load: the writers' appends fail, typed, while it stays down.
        failed_before = len(out.failed) + len(out.unknown)
        await asyncio.to_thread(cluster.stop)
        await _until(
            lambda: (
                out.errors["DatabaseUnavailableError"] >= 4
                and len(out.failed) + len(out.unknown) > failed_before
            ),
            "appends failed while the server was down",
            writers,
        )
        go.clear()  # the writers finish the append in hand, then wait
        await asyncio.sleep(2.5)  # longer than one append's retries
        await asyncio.to_thread(cluster.start)

        # The first call after it is back succeeds, on a pool of dead connections.
        (first,) = await stores[1].append(session_id, {"role": "user", "content": "first back"})
        assert first.seq >= 1
        acked_at_restart = len(out.acked)
        go.set()
        await _until(
            lambda: len(out.acked) >= acked_at_restart + 100, "100 appends after it", writers
        )
        stop.set()
        await asyncio.gather(*writers)

        records = await stores[0].records(session_id)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        info = await stores[0].get_session(session_id)
        assert info.last_seq == info.message_count == len(records)
        stored = Counter(r.message.text() for r in records if r.message is not None)
        assert stored["first back"] == 1
        twice = [t for t, n in stored.items() if n > 1]
        assert not twice, f"stored twice: {twice[:5]}"
        missing = [t for t in out.acked if t not in stored]
        assert not missing, f"acknowledged but not stored: {missing[:5]}"
        written = [t for t in out.failed if t in stored and t not in out.with_uuid]
        assert not written, f"a retryable failure stored its message: {written[:5]}"
        print(
            f"restart under load: {len(out.acked)} acknowledged, {len(out.failed)} failed "
            f"(nothing stored), {len(out.unknown)} of unknown outcome, errors {dict(out.errors)}"
        )
    finally:
        stop.set()
        go.set()
        for task in writers:
            task.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        for store in stores:
            await store.close()
