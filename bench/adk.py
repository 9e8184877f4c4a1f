"""``python -m bench.adk``: Google ADK's session service, sessiondb's
``SessionDBSessionService`` beside ADK's own ``DatabaseSessionService`` on the same
Postgres database (asyncpg for both), same run.

As in figure 10, the "floor" is not a bare driver but the store people would otherwise
use: the ratio is sessiondb / ADK (below 1: sessiondb is faster). Four figures:

- ``append_event`` of one event with a state delta, to a session of its own;
- ``get_session`` of a session of 3,000 events (every event read and parsed);
- ``get_session(GetSessionConfig(num_recent_events=50))`` of a session of 20,000 events;
- ``list_sessions`` of an app with 10,000 sessions (of 100 users), and of one user.

Both sides hold the same events. The long sessions are loaded in batches straight into
each side's tables (sessiondb: the store's core append of the service's own records;
ADK: its ORM rows, ``StorageEvent.from_event``), since loading 23,000 events one
``append_event`` at a time measures nothing the first figure does not. Needs
``sessiondb[adk]`` (google-adk, with SQLAlchemy's asyncio support) and a Postgres
(``SESSIONDB_TEST_DATABASE_URL``, else 127.0.0.1:5432, as ``python -m bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from typing import Any

from . import __main__ as bench_main
from .databases import BenchError, PostgresServer, find_postgres
from .report import Result, table
from .timing import compare

APP = "bench_app"
SIZES = {
    # mode: (events of the full read, events of the tail read, sessions listed, reps)
    "full": (3_000, 20_000, 10_000, 200),
    "quick": (3_000, 20_000, 10_000, 60),
    "tiny": (30, 200, 100, 5),
}


def _event(i: int, delta: bool = False) -> Any:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    author = "user" if i % 2 == 0 else "forecaster"
    text = f"message {i}: " + "the forecast says sunny with a light breeze " * 4
    return Event(
        id=f"event-{i}",
        invocation_id=f"inv-{i // 2}",
        author=author,
        timestamp=1_700_000_000.0 + i,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
        actions=EventActions(state_delta={"turn": i, "user:last": i} if delta else {}),
    )


async def _load_ours(service: Any, session: Any, count: int) -> None:
    from sessiondb.integrations.adk import event_message
    from sessiondb.rows import message_record

    rows = await service.store.core.backend.fetch(
        _adk_session(service, session.user_id, session.id)
    )
    sid = rows[0]["session_id"]
    for start in range(0, count, 1000):
        batch = [
            message_record(event_message(_event(i)), i)
            for i in range(start, min(count, start + 1000))
        ]
        await service.store.core.append(sid, batch)


def _adk_session(service: Any, user: str, adk_id: str) -> Any:
    from sessiondb import statements as q

    return q.adk_session(service.store.namespace, APP, user, adk_id)


async def _load_theirs(service: Any, session: Any, count: int) -> None:
    from google.adk.sessions.schemas.v1 import StorageEvent

    for start in range(0, count, 1000):
        async with service.database_session_factory() as sql:
            sql.add_all(
                [
                    StorageEvent.from_event(session, _event(i))
                    for i in range(start, min(count, start + 1000))
                ]
            )
            await sql.commit()


async def _sessions(service: Any, count: int) -> None:
    for start in range(0, count, 50):
        await asyncio.gather(
            *(
                service.create_session(
                    app_name=APP, user_id=f"user-{i % 100}", session_id=f"s{i}", state={"n": i}
                )
                for i in range(start, min(count, start + 50))
            )
        )


async def run(mode: str, log: bench_main.Log) -> list[Result]:
    try:
        from google.adk.sessions import DatabaseSessionService
        from google.adk.sessions.base_session_service import GetSessionConfig

        from sessiondb.integrations.adk import SessionDBSessionService
    except ImportError as exc:
        raise BenchError(f"{exc} (pip install 'sessiondb[adk]')") from exc
    full_n, tail_n, listed_n, reps = SIZES[mode]
    server = PostgresServer(await find_postgres())
    await server.setup()
    results: list[Result] = []
    try:
        print(
            f"ADK session services ({bench_main.revision()}): {mode} mode, "
            f"{await server.version()}",
            flush=True,
        )
        db = await server.fresh()
        theirs = DatabaseSessionService(db.url)
        ours = SessionDBSessionService(db.url)
        try:
            await theirs.prepare_tables()
            log("loading the long sessions")
            long_sessions: dict[str, tuple[Any, Any]] = {}
            for name, n in (("full", full_n), ("tail", tail_n)):
                mine = await ours.create_session(app_name=APP, user_id="reader", session_id=name)
                other = await theirs.create_session(app_name=APP, user_id="reader", session_id=name)
                await _load_ours(ours, mine, n)
                await _load_theirs(theirs, other, n)
                long_sessions[name] = (mine, other)
            log(f"creating {listed_n:,} sessions on each side")
            await _sessions(ours, listed_n)
            await _sessions(theirs, listed_n)
            await server.settle(db)
            check = [
                await s.get_session(app_name=APP, user_id="reader", session_id="full")
                for s in (ours, theirs)
            ]
            if [e.model_dump() for e in check[0].events] != [  # type: ignore[union-attr]
                e.model_dump()
                for e in check[1].events  # type: ignore[union-attr]
            ]:
                raise BenchError("the two services do not hold the same events")

            log("append_event")
            mine_add = await ours.create_session(app_name=APP, user_id="writer", session_id="add")
            other_add = await theirs.create_session(
                app_name=APP, user_id="writer", session_id="add"
            )
            counter = itertools.count()

            def new_event() -> Any:
                event = _event(next(counter), delta=True)
                event.timestamp = time.time()
                return event

            async def add_ours() -> None:
                await ours.append_event(mine_add, new_event())

            async def add_theirs() -> None:
                await theirs.append_event(other_add, new_event())

            a, b = await compare(add_ours, add_theirs, reps=reps, warmup=5)
            results.append(Result("append_event (1 event, state delta)", "postgres", a, b))

            log("get_session")

            def getter(service: Any, name: str, config: Any = None) -> Any:
                async def get() -> None:
                    await service.get_session(
                        app_name=APP, user_id="reader", session_id=name, config=config
                    )

                return get

            a, b = await compare(
                getter(ours, "full"), getter(theirs, "full"), reps=max(5, reps // 10), warmup=1
            )
            results.append(Result(f"get_session, {full_n:,} events", "postgres", a, b))
            recent = GetSessionConfig(num_recent_events=50)
            a, b = await compare(
                getter(ours, "tail", recent), getter(theirs, "tail", recent), reps=reps, warmup=3
            )
            results.append(
                Result(f"get_session(num_recent_events=50), {tail_n:,} events", "postgres", a, b)
            )

            log("list_sessions")

            def lister(service: Any, user: str | None) -> Any:
                async def listing() -> None:
                    await service.list_sessions(app_name=APP, user_id=user)

                return listing

            a, b = await compare(
                lister(ours, None), lister(theirs, None), reps=max(5, reps // 10), warmup=1
            )
            results.append(
                Result(f"list_sessions of an app, {listed_n:,} sessions", "postgres", a, b)
            )
            a, b = await compare(
                lister(ours, "user-7"), lister(theirs, "user-7"), reps=reps, warmup=3
            )
            results.append(
                Result(
                    f"list_sessions of a user ({listed_n // 100} of {listed_n:,})", "postgres", a, b
                )
            )
        finally:
            await ours.close()
            await theirs.close()
            await server.drop(db)
    finally:
        await server.cleanup()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.adk",
        description="SessionDBSessionService beside ADK's DatabaseSessionService, one Postgres.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, same sizes")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: proves it runs")
    args = parser.parse_args(argv)
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    log = bench_main.Log()
    try:
        results = asyncio.run(run(mode, log))
    except BenchError as exc:
        print(f"bench.adk: {exc}", file=sys.stderr)
        return 2
    print()
    print(table(results).split("\n\n")[0])  # its notes are about python -m bench
    print("\nfloor: ADK's DatabaseSessionService on the same database (not a bare driver);")
    print("ratio = sessiondb median / ADK median (lower is better)")
    log(f"done in {time.perf_counter() - log.start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
