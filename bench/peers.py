"""Figure 18: reading a whole history beside the stores people would otherwise use, on
the same Postgres database, same run: the OpenAI Agents SDK's ``SQLAlchemySession``
and langchain-postgres's ``PostgresChatMessageHistory``.

Here the "floor" is the peer, not a bare driver: a ratio below 1 means sessiondb is
faster. Each side holds the same conversation in its own shape: sessiondb the wire-shape
messages of the bench's turns (and, through its adapters, the SDK's items and
LangChain's messages), the SDK the Responses-API items of the same number of turns,
langchain-postgres the LangChain messages of sessiondb's messages. sessiondb's rows:
``context()`` and ``records()`` (models), ``SessionDBSession.get_items()`` and
``SessionDBChatMessageHistory.aget_messages()`` (each framework's own objects). Needs
``pip install 'sessiondb[bench]'``; without a peer its rows are skipped with a line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sessiondb import SessionStore

from . import data
from .agents import turn
from .databases import BenchError, Server
from .figures import Run
from .report import Goal, Result
from .sizes import count
from .timing import compare

Call = Callable[[], Awaitable[Any]]


_AGENTS = ("agents.extensions.memory.sqlalchemy_session",)
_LANGCHAIN = ("langchain_postgres", "psycopg", "langchain_core")


def available() -> bool:
    """Whether at least one peer is installed (the figure has rows to show)."""
    return _missing(*_AGENTS) is None or _missing(*_LANGCHAIN) is None


def _missing(*modules: str) -> str | None:
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{exc} (pip install 'sessiondb[bench]')"
    return None


async def peer_reads(run: Run, server: Server) -> list[Result]:
    if server.backend != "postgres":
        return []
    s = run.sizes
    n = s.short_session
    db = await server.fresh()
    results: list[Result] = []
    reps = max(5, s.context_reps // 4)
    try:
        async with SessionStore.open(db.url) as store:
            messages = data.conversation(n, run.seed, "peers", run.corpus)
            (sid,) = await store.import_sessions([{"messages": messages}])
            what = f"{count(n)} messages"

            async def context() -> None:
                await store.context(sid)

            async def records() -> None:
                await store.records(sid)

            why = _missing(*_AGENTS)
            if why is None:
                results += await _agents(run, server, db.url, store, n, context, records)
            else:
                run.log(f"figure 18: the OpenAI Agents SDK rows skipped: {why}")
            why = _missing(*_LANGCHAIN)
            if why is None:
                results += await _langchain(server, db.dsn, store, messages, context, reps)
            else:
                run.log(f"figure 18: the langchain-postgres rows skipped: {why}")
            if not results:
                run.log(f"figure 18 ({what}) had no peer to compare with")
    finally:
        await server.drop(db)
    return results


async def _agents(
    run: Run, server: Server, url: str, store: SessionStore, n: int, context: Call, records: Call
) -> list[Result]:
    from agents.extensions.memory import SQLAlchemySession

    from sessiondb.integrations.openai_agents import SessionDBSession

    s = run.sizes
    items = [item for i in range(n // 4) for item in turn(i)]
    theirs = SQLAlchemySession.from_url("peers", url=url, create_tables=True)
    ours = SessionDBSession("peers", store=store)
    results: list[Result] = []
    try:
        await theirs.add_items(items)
        await ours.add_items(items)
        if await ours.get_items() != await theirs.get_items():
            raise BenchError("the two sessions do not hold the same items")
        reps = max(5, s.context_reps // 4)
        peer = f"SDK SQLAlchemySession.get_items() of {count(len(items))} items"

        async def get_theirs() -> None:
            await theirs.get_items()

        async def get_ours() -> None:
            await ours.get_items()

        for name, call in (
            (f"18 context() of {count(n)} messages vs {peer}", context),
            (f"18 records() of {count(n)} messages vs {peer}", records),
            (f"18 SessionDBSession.get_items() vs {peer}", get_ours),
        ):
            ours_s, theirs_s = await compare(call, get_theirs, reps=reps, warmup=3, block=2)
            results.append(Result(name, server.backend, ours_s, theirs_s, Goal("<=", 1)))
    finally:
        await theirs.engine.dispose()
    return results


async def _langchain(
    server: Server,
    dsn: str,
    store: SessionStore,
    messages: list[dict[str, Any]],
    context: Call,
    reps: int,
) -> list[Result]:
    import uuid

    import psycopg
    from langchain_postgres import PostgresChatMessageHistory

    from sessiondb.integrations.langchain import SessionDBChatMessageHistory, message_from_wire

    chat = [message_from_wire(m) for m in messages]
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    results: list[Result] = []
    try:
        await PostgresChatMessageHistory.acreate_tables(conn, "peer_chat")
        theirs = PostgresChatMessageHistory("peer_chat", str(uuid.uuid4()), async_connection=conn)
        await theirs.aadd_messages(chat)
        ours = SessionDBChatMessageHistory("peers-langchain", store)
        await ours.aadd_messages(chat)
        if await ours.aget_messages() != await theirs.aget_messages():
            raise BenchError("the two chat histories do not hold the same messages")
        peer = f"langchain-postgres aget_messages() of {count(len(chat))} messages"

        async def get_theirs() -> None:
            await theirs.aget_messages()

        async def get_ours() -> None:
            await ours.aget_messages()

        for name, call in (
            (f"18 context() of {count(len(chat))} messages vs {peer}", context),
            (f"18 SessionDBChatMessageHistory.aget_messages() vs {peer}", get_ours),
        ):
            ours_s, theirs_s = await compare(call, get_theirs, reps=reps, warmup=3, block=2)
            results.append(Result(name, server.backend, ours_s, theirs_s, Goal("<=", 1)))
    finally:
        await conn.close()
    return results
