"""Figure 10: the OpenAI Agents SDK's session protocol, sessiondb's ``SessionDBSession``
beside the SDK's own ``SQLAlchemySession`` on the same Postgres database, same run.

Here the "floor" is not a bare driver but the store people would otherwise use: the
ratio says how sessiondb's adapter compares with it (below 1: faster). Both sides hold
the same items, in sessions of their own: ``add_items`` of one item, ``get_items()`` of a
long session, and ``get_items(limit=200)`` of it. Needs ``sessiondb[openai-agents]``
and SQLAlchemy's asyncio support (``openai-agents[sqlalchemy]``); without them the
figure is skipped with a line on stderr.
"""

from __future__ import annotations

import itertools
from typing import Any

from sessiondb import SessionStore

from .databases import BenchError, Server
from .figures import Run
from .report import Result
from .sizes import count
from .timing import compare


def available() -> str | None:
    """Why the figure cannot run here, or ``None`` when it can."""
    try:
        import agents.extensions.memory.sqlalchemy_session  # noqa: F401

        import sessiondb.integrations.openai_agents  # noqa: F401
    except ImportError as exc:
        return f"{exc} (pip install 'sessiondb[openai-agents]' 'openai-agents[sqlalchemy]')"
    return None


def turn(i: int) -> list[dict[str, Any]]:
    """Four Responses-API items of a tool-using turn, as the Runner stores them."""
    return [
        {"role": "user", "content": f"question {i}: what does the file say?"},
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "read_file",
            "arguments": f'{{"path": "docs/{i}.md"}}',
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{i}",
            "output": f"file {i}: " + "x" * 200,
        },
        {
            "id": f"msg_{i}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": f"It says {i}.", "annotations": [], "logprobs": []}
            ],
        },
    ]


async def agents_sessions(run: Run, server: Server) -> list[Result]:
    if server.backend != "postgres":
        return []
    why = available()
    if why is not None:
        run.log(f"figure 10 skipped: {why}")
        return []
    from agents.extensions.memory import SQLAlchemySession

    from sessiondb.integrations.openai_agents import SessionDBSession

    s = run.sizes
    size = s.agents_items
    items = [item for i in range(size // 4) for item in turn(i)]
    db = await server.fresh()
    theirs_long = SQLAlchemySession.from_url("long", url=db.url, create_tables=True)
    theirs_add = SQLAlchemySession.from_url("add", url=db.url)
    results: list[Result] = []
    try:
        async with SessionStore.open(db.url) as store:
            ours_long = SessionDBSession("long", store=store)
            ours_add = SessionDBSession("add", store=store)
            for start in range(0, len(items), 1000):
                await ours_long.add_items(items[start : start + 1000])
                await theirs_long.add_items(items[start : start + 1000])
            await server.settle(db)
            if await ours_long.get_items() != await theirs_long.get_items():
                raise BenchError("the two sessions do not hold the same items")

            adds_ours = itertools.cycle(turn(0))
            adds_theirs = itertools.cycle(turn(0))

            async def add_ours() -> None:
                await ours_add.add_items([next(adds_ours)])

            async def add_theirs() -> None:
                await theirs_add.add_items([next(adds_theirs)])

            ours_s, theirs_s = await compare(
                add_ours, add_theirs, reps=s.append_reps, warmup=s.append_warmup
            )
            results.append(
                Result(
                    "10 agents add_items(1 item), floor: SDK SQLAlchemySession",
                    server.backend,
                    ours_s,
                    theirs_s,
                )
            )

            async def get_ours() -> None:
                await ours_long.get_items()

            async def get_theirs() -> None:
                await theirs_long.get_items()

            reps = max(3, s.context_reps // 10)
            ours_s, theirs_s = await compare(get_ours, get_theirs, reps=reps, warmup=1, block=2)
            results.append(
                Result(
                    f"10 agents get_items() of {count(size)} items, floor: SDK SQLAlchemySession",
                    server.backend,
                    ours_s,
                    theirs_s,
                )
            )

            async def tail_ours() -> None:
                await ours_long.get_items(limit=200)

            async def tail_theirs() -> None:
                await theirs_long.get_items(limit=200)

            ours_s, theirs_s = await compare(tail_ours, tail_theirs, reps=s.context_reps, warmup=3)
            results.append(
                Result(
                    f"10 agents get_items(limit=200) of {count(size)} items, "
                    "floor: SDK SQLAlchemySession",
                    server.backend,
                    ours_s,
                    theirs_s,
                )
            )
    finally:
        await theirs_long.engine.dispose()
        await theirs_add.engine.dispose()
        await server.drop(db)
    return results
