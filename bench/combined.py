"""Figure 15: many tasks of one process appending to one session at once (Postgres).

Each side runs ``tasks`` tasks that each append ``task_appends`` messages, one call at a
time, to one session of its own; a round's wall time runs from the start of the tasks to
the end of the last. The sides, alternated round by round:

- sessiondb: one store; its combined appends send the calls that wait meanwhile as one
  statement (``sessiondb.combine``);
- the bare driver: one asyncpg connection per task, each sending the one-statement
  bump-and-insert (the floor of figures 1 and 7), so the tasks queue on the head's lock;
- langchain-postgres: one ``PostgresChatMessageHistory`` per task on a psycopg async
  connection of its own, all on the same session id, ``aadd_messages`` of one message
  (an INSERT and a COMMIT; no seq, so no lock to wait for). Needs ``langchain-postgres``
  and ``psycopg`` (``pip install 'sessiondb[bench]'``); without them that row is skipped
  with a line on stderr.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from sessiondb import SessionStore

from . import data
from .databases import Database, Server
from .figures import Run
from .floors import PostgresFloor
from .report import Goal, Result

LANGCHAIN_TABLE = "langchain_chat_history"

Side = Callable[[], Awaitable[float]]


def langchain_available() -> str | None:
    """Why the langchain-postgres side cannot run here, or ``None`` when it can."""
    try:
        import langchain_core.messages  # noqa: F401
        import langchain_postgres  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        return f"{exc} (pip install langchain-postgres 'psycopg[binary]')"
    return None


async def _round(tasks: int, task: Callable[[int], Awaitable[None]]) -> float:
    start = perf_counter()
    await asyncio.gather(*(task(t) for t in range(tasks)))
    return perf_counter() - start


async def _langchain(db: Database, tasks: int, appends: int, texts: list[str]) -> tuple[Side, Any]:
    """The langchain-postgres side: a round, and what to close after."""
    import psycopg
    from langchain_core.messages import HumanMessage
    from langchain_postgres import PostgresChatMessageHistory

    conns = [await psycopg.AsyncConnection.connect(db.dsn) for _ in range(tasks)]
    await PostgresChatMessageHistory.acreate_tables(conns[0], LANGCHAIN_TABLE)

    async def side() -> float:
        session = str(uuid.uuid4())
        histories = [
            PostgresChatMessageHistory(LANGCHAIN_TABLE, session, async_connection=c) for c in conns
        ]

        async def task(t: int) -> None:
            for n in range(appends):
                await histories[t].aadd_messages([HumanMessage(content=texts[n % len(texts)])])

        return await _round(tasks, task)

    async def close() -> None:
        for conn in conns:
            await conn.close()

    return side, close


async def combined_appends(run: Run, server: Server) -> list[Result]:
    if server.backend != "postgres":
        return []
    s = run.sizes
    tasks, appends = s.tasks, s.task_appends
    messages = data.user_messages(64, run.seed, run.corpus)
    texts = [m["content"][0]["text"] for m in messages]
    db = await server.fresh()
    floors = [await PostgresFloor.open(db) for _ in range(tasks)]
    why = langchain_available()
    langchain: tuple[Side, Any] | None = None
    if why is None:
        langchain = await _langchain(db, tasks, appends, texts)
    else:
        run.log(f"figure 15: the langchain-postgres row is skipped: {why}")
    try:
        async with SessionStore.open(db.url, pool_max_size=tasks) as store:

            async def ours() -> float:
                sid = (await store.create_session()).id

                async def task(t: int) -> None:
                    for n in range(appends):
                        await store.append(sid, messages[(t + n) % len(messages)])

                return await _round(tasks, task)

            async def bare() -> float:
                (sid,) = await store.import_sessions([{"messages": []}])

                async def task(t: int) -> None:
                    for n in range(appends):
                        await floors[t].append(sid, messages[(t + n) % len(messages)])

                return await _round(tasks, task)

            sides: dict[str, Side] = {"sessiondb": ours, "floor": bare}
            if langchain is not None:
                sides["langchain"] = langchain[0]
            times: dict[str, list[float]] = {name: [] for name in sides}
            for rep in range(s.task_reps + 1):
                for name, side in sides.items():
                    took = await side()
                    if rep:  # the first round warms up connections and caches
                        times[name].append(took)
            batches, calls = store.core.combiner.batches, store.core.combiner.combined_calls
    finally:
        for floor in floors:
            await floor.close()
        if langchain is not None:
            await langchain[1]()
    await server.drop(db)
    if batches:
        run.log(f"postgres: {calls / batches:.1f} calls per combined append on average")
    median = {name: statistics.median(t) for name, t in times.items()}
    shape = f"{tasks} tasks x {appends} appends, 1 session, 1 process"
    ours = median["sessiondb"]
    results = [Result(f"15 {shape}, vs bare driver", "postgres", ours, median["floor"])]
    if "langchain" in median:
        results.append(
            Result(
                f"15 {shape}, vs langchain-postgres",
                "postgres",
                ours,
                median["langchain"],
                Goal("<=", 1.0),
            )
        )
    return results
