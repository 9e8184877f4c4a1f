"""The change feed across OS processes: three writer processes append to one session
while a fourth process watches it; every record arrives once, in seq order, and each
writer's records in the order it wrote them (Postgres: LISTEN/NOTIFY; SQLite: polling).
A turn released in one process is taken by a waiter in another.

The latency from an append to its delivery is measured and printed (``-s``), never
asserted: ``python -m bench.feed`` gives the figures.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.messages import user
from helpers.processes import SPAWN, run_python

from sessiondb import SessionStore
from sessiondb.feed import Feed

WRITERS = 3
PER_WRITER = 40
TIMEOUT_S = 240
ROOT = Path(__file__).resolve().parents[2]


def _writer(url: str, session_id: str, proc: int, go: Any) -> None:
    async def write() -> None:
        async with SessionStore.open(url) as store:
            go.wait(TIMEOUT_S)
            for i in range(PER_WRITER):
                # When the append starts: its commit is later, so the latency measured
                # from here is an upper bound.
                await store.append(session_id, user(f"w{proc} {i} {time.time()!r}"))
                await asyncio.sleep(0.005 * (proc + 1))

    asyncio.run(write())


def _watcher(url: str, session_id: str, ready: Any, out: Any) -> None:
    async def watch() -> None:
        async with SessionStore.open(url) as store:
            got: list[tuple[int, str, float]] = []
            watch = store.watch(session_id)
            first = asyncio.ensure_future(watch.__anext__())
            while not (isinstance(store.core.feed, Feed) and store.core.feed.mode):
                await asyncio.sleep(0.01)
            ready.set()
            record = await first
            while True:
                got.append((record.seq, record.message.content[0].text, time.time()))  # type: ignore[union-attr]
                if len(got) == WRITERS * PER_WRITER:
                    break
                record = await watch.__anext__()
            mode = store.core.feed.mode
            await watch.aclose()
            out.put((mode, got))

    asyncio.run(watch())


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def test_three_writers_one_watcher_every_record_once_in_order(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        sid = (await store.create_session()).id
    ready, go, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    watcher = SPAWN.Process(target=_watcher, args=(db_url, sid, ready, out))
    writers = [SPAWN.Process(target=_writer, args=(db_url, sid, p, go)) for p in range(WRITERS)]
    processes = [watcher, *writers]
    for process in processes:
        process.start()
    try:
        assert await asyncio.to_thread(ready.wait, TIMEOUT_S), "the watcher did not start"
        go.set()
        mode, got = await asyncio.to_thread(out.get, True, TIMEOUT_S)
        for process in processes:
            await asyncio.to_thread(process.join, TIMEOUT_S)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    assert [p.exitcode for p in processes] == [0] * len(processes)
    # Every record once, in seq order, as stored.
    assert [seq for seq, _, _ in got] == list(range(1, WRITERS * PER_WRITER + 1))
    async with SessionStore.open(db_url) as store:
        stored = await store.records(sid)
    assert [(r.seq, r.message.content[0].text) for r in stored] == [  # type: ignore[union-attr]
        (seq, text) for seq, text, _ in got
    ]
    # Each writer's own records in the order it wrote them.
    for proc in range(WRITERS):
        mine = [int(text.split()[1]) for _, text, _ in got if text.startswith(f"w{proc} ")]
        assert mine == list(range(PER_WRITER))
    latencies = [(at - float(text.split()[2])) * 1000 for _, text, at in got]
    print(
        f"\nwatch latency ({mode}, {len(latencies)} records, 3 writer processes): "
        f"p50 {statistics.median(latencies):.1f} ms, p99 {percentile(latencies, 99):.1f} ms"
    )
    assert mode == ("listen" if db_url.startswith("postgresql") else "poll")


def _holder(url: str, session_id: str, held: Any, release: Any) -> None:
    async def hold() -> None:
        async with SessionStore.open(url) as store, store.turn(session_id, holder="first"):
            held.set()
            release.wait(TIMEOUT_S)

    asyncio.run(hold())


async def test_a_turn_released_in_one_process_is_taken_in_another(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        sid = (await store.create_session()).id
        held, release = SPAWN.Event(), SPAWN.Event()
        holder = SPAWN.Process(target=_holder, args=(db_url, sid, held, release))
        holder.start()
        try:
            assert await asyncio.to_thread(held.wait, TIMEOUT_S)

            async def take() -> str:
                async with store.turn(sid, holder="second", timeout=TIMEOUT_S) as turn:
                    await turn.append(user("second's turn"))
                    return turn.holder

            taking = asyncio.ensure_future(take())
            await asyncio.sleep(0.5)
            assert not taking.done()
            release.set()
            assert await asyncio.wait_for(taking, TIMEOUT_S) == "second"
            await asyncio.to_thread(holder.join, TIMEOUT_S)
        finally:
            if holder.is_alive():
                holder.kill()
        assert holder.exitcode == 0
        assert [r.message.content[0].text for r in await store.records(sid)] == [  # type: ignore[union-attr]
            "second's turn"
        ]


def test_bench_feed_tiny_runs(postgres: Any) -> None:
    """``python -m bench.feed --tiny``: both figures reported."""
    if postgres.admin_url is None:
        message = f"the benchmark needs Postgres: {postgres.reason}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    env = {
        **os.environ,
        "SESSIONDB_BENCH_DATABASE_URL": postgres.admin_url.render_as_string(hide_password=False),
    }
    done = run_python("-m", "bench.feed", "--tiny", cwd=ROOT, env=env, timeout=300)
    assert "postgres (listen): p50" in done.stdout, done.stdout
    assert "sqlite   (poll): p50" in done.stdout, done.stdout
    assert "a LISTEN open" in done.stdout, done.stdout
    assert "take+release" in done.stdout, done.stdout
