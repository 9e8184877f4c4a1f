"""``python -m bench.feed``: the change feed (issue 26), two figures.

- **Watch latency**: a writer process appends one message at a time (a pause between
  appends: the feed is idle when each arrives) and this process watches the session;
  the time from the start of each append (its commit is later: an upper bound) to its
  delivery by ``store.watch``, p50 and p99, on Postgres (LISTEN/NOTIFY) and SQLite
  (polling). Postgres goal: p99 <= 50 ms on an idle machine.
- **Turn handoff**: a holder in another process releases a turn that a waiter here
  queued for 50-200 ms earlier; the time from the release to the waiter holding it,
  with the store option ``feed="poll"`` (the waiter polls, as before the feed) and with
  the feed (the release's NOTIFY wakes the waiter).
- **The NOTIFY in the append**: the append's one statement as sessiondb sends it (with
  ``pg_notify`` in its RETURNING) against the same statement without it, bare asyncpg,
  interleaved, with a LISTEN connection open (as when a watch runs) and without, and
  with ``synchronous_commit = off`` (the CPU cost alone, without the wait for the disk);
  and a turn's take and release, whose release statement notifies (``feed="poll"``:
  it does not).

Needs a Postgres (``SESSIONDB_TEST_DATABASE_URL``, else 127.0.0.1:5432, as
``python -m bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

from sessiondb import SessionStore
from sessiondb import statements as q
from sessiondb.feed import Feed

from .databases import BenchError, Database, PostgresServer, SQLiteFiles, find_postgres
from .timing import compare

SIZES = {"full": (400, 3000), "quick": (150, 1000), "tiny": (10, 30)}  # records, reps
PAUSE_S = 0.02  # between the writer's appends


def _writer(url: str, session_id: str, count: int, go: Any) -> None:
    async def write() -> None:
        async with SessionStore.open(url) as store:
            go.wait(60)
            for i in range(count):
                at = time.time()
                await store.append(session_id, {"role": "user", "content": f"{i} {at!r}"})
                await asyncio.sleep(PAUSE_S)

    asyncio.run(write())


async def watch_latency(db: Database, count: int) -> tuple[str, float, float]:
    """(feed mode, p50 ms, p99 ms) of ``count`` records written by another process."""
    spawn = multiprocessing.get_context("spawn")
    async with SessionStore.open(db.url) as store:
        sid = (await store.create_session()).id
        watch = store.watch(sid)
        first = asyncio.ensure_future(anext(watch))
        while not (isinstance(store.core.feed, Feed) and store.core.feed.mode):
            await asyncio.sleep(0.01)
        mode = store.core.feed.mode
        go = spawn.Event()
        writer = spawn.Process(target=_writer, args=(db.url, sid, count, go))
        writer.start()
        go.set()
        latencies = []
        record = await first
        while True:
            text = record.message.content[0].text  # type: ignore[union-attr]
            sent = float(text.split()[-1])
            latencies.append((time.time() - sent) * 1000)
            if len(latencies) == count:
                break
            record = await anext(watch)
        await watch.aclose()
        await asyncio.to_thread(writer.join, 60)
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return mode, statistics.median(latencies), p99


def _holder(url: str, session_id: str, rounds: int, feed: str, held: Any, release: Any) -> None:
    async def hold() -> None:
        async with SessionStore.open(url, feed=feed) as store:
            for _ in range(rounds):
                async with store.turn(session_id, holder="holder"):
                    held.put(None)
                    release.get(timeout=60)
                    stamp = time.time()
                held.put(stamp)  # released

    asyncio.run(hold())


async def turn_handoff(db: Database, rounds: int, feed: str) -> tuple[float, float]:
    """(p50 ms, p99 ms) from a release in another process to a waiter here holding
    the turn; the waiter queued 50-200 ms before the release (its polls backed off)."""
    spawn = multiprocessing.get_context("spawn")
    held, release = spawn.Queue(), spawn.Queue()
    async with SessionStore.open(db.url, feed=feed) as store:
        sid = (await store.create_session()).id
        holder = spawn.Process(target=_holder, args=(db.url, sid, rounds, feed, held, release))
        holder.start()
        latencies = []
        try:
            for _ in range(rounds):
                await asyncio.to_thread(held.get, True, 60)
                taken: asyncio.Future[float] = asyncio.get_running_loop().create_future()

                async def wait_turn(done: asyncio.Future[float] = taken) -> None:
                    async with store.turn(sid, holder="waiter", timeout=60):
                        done.set_result(time.time())

                waiter = asyncio.ensure_future(wait_turn())
                await asyncio.sleep(random.uniform(0.05, 0.2))
                release.put(None)
                stamp = await asyncio.to_thread(held.get, True, 60)
                latencies.append((await taken - stamp) * 1000)
                await waiter
        finally:
            await asyncio.to_thread(holder.join, 60)
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(latencies), p99


async def notify_cost(db: Database, reps: int) -> list[tuple[str, float, float]]:
    """(case, with NOTIFY s, without s): the append statement, bare asyncpg."""
    import asyncpg

    stmt = q.append_one(False).compile(dialect=asyncpg_dialect())  # type: ignore[no-untyped-call]
    sql = str(stmt)
    start = sql.index(", pg_notify(")
    end = sql.index(" AS notified", start) + len(" AS notified")
    bare = sql[:start] + sql[end:]
    assert "pg_notify" not in bare
    names = list(stmt.positiontup or ())
    async with SessionStore.open(db.url) as store:
        sid = (await store.create_session()).id
    conn = await asyncpg.connect(db.dsn)
    listener = await asyncpg.connect(db.dsn)
    results = []
    try:
        values = {
            "sid": sid,
            "ns": "default",
            "count": 1,
            "messages": 1,
            "at": datetime.now(UTC),
            "name": None,
            "d_input": 0,
            "d_output": 0,
            "d_cache_read": 0,
            "d_cache_write": 0,
            "d_cost": 0.0,
            "kind": "message",
            "role": "user",
            "uuid": None,
            "parent_uuid": None,
            "tool_call_id": None,
            "target_seq": None,
            "first_kept_seq": None,
            "size": 30,
            "payload": '{"role":"user","content":"hello"}',
            # The search index's text (sessiondb.search_text), as an append of "hello".
            "search_body": "hello",
            "search_thinking": None,
            "search_config": "simple",
        }
        args = [values[n] for n in names]

        async def with_notify() -> None:
            await conn.fetchval(sql, *args)

        async def without() -> None:
            await conn.fetchval(bare, *args)

        cases = (
            ("no LISTEN open", False, False),
            ("a LISTEN open", True, False),
            # The commit's wait for the disk, which dwarfs the rest, left out.
            ("LISTEN, no sync", True, True),
        )
        listens = False
        for case, listening, nosync in cases:
            if listening and not listens:
                await listener.add_listener(q.FEED_CHANNEL, lambda *_: None)
                listens = True
            if nosync:
                await conn.execute("SET synchronous_commit = off")
            a, b = await compare(with_notify, without, reps=reps, warmup=reps // 10)
            results.append((case, a, b))
    finally:
        await listener.close()
        await conn.close()
    # A turn's take and release: the release statement with pg_notify, and without.
    async with SessionStore.open(db.url) as ours, SessionStore.open(db.url, feed="poll") as bare:

        async def turn_notify() -> None:
            async with ours.turn(sid):
                pass

        async def turn_bare() -> None:
            async with bare.turn(sid):
                pass

        a, b = await compare(turn_notify, turn_bare, reps=max(reps // 3, 10), warmup=5)
        results.append(("take+release", a, b))
    return results


async def main(mode: str) -> int:
    count, reps = SIZES[mode]
    server = PostgresServer(await find_postgres())
    await server.setup()
    with tempfile.TemporaryDirectory(prefix="sessiondb-bench-feed-") as tmp:
        files = SQLiteFiles(Path(tmp))
        await files.setup()
        try:
            print(f"watch latency, {count} records appended by another process, one at a time:")
            for source in (server, files):
                db = await source.fresh()
                try:
                    feed_mode, p50, p99 = await watch_latency(db, count)
                finally:
                    await source.drop(db)
                print(f"  {db.backend:<8} ({feed_mode}): p50 {p50:6.1f} ms   p99 {p99:6.1f} ms")
            print(f"turn handoff to a waiter in another process, {count // 5} turns:")
            for feed in ("poll", "auto"):
                db = await server.fresh()
                try:
                    p50, p99 = await turn_handoff(db, max(count // 5, 5), feed)
                finally:
                    await server.drop(db)
                how = "polling only" if feed == "poll" else "woken by the feed"
                print(f"  postgres ({how}): p50 {p50:6.1f} ms   p99 {p99:6.1f} ms")
            db = await server.fresh()
            try:
                print("with pg_notify / without: the append statement (bare asyncpg); a turn:")
                for case, a, b in await notify_cost(db, reps):
                    print(f"  {case:<15} {a * 1e6:7.0f} µs / {b * 1e6:7.0f} µs = {a / b:.2f}")
            finally:
                await server.drop(db)
        finally:
            await server.cleanup()
    return 0


def cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.feed", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    opts = parser.parse_args()
    mode = "tiny" if opts.tiny else "quick" if opts.quick else "full"
    try:
        return asyncio.run(main(mode))
    except BenchError as exc:
        print(f"bench.feed: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
