"""Figure 13: what sessiondb.telemetry costs an application that does not use it.

The floor is the same store's append without the wrapper (the method the class had
before :func:`sessiondb.telemetry.traced` wrapped it), on the same session, interleaved.
The run configures no OpenTelemetry provider, so the wrapped call takes the path every
application without an SDK takes: with the API installed (``sessiondb[otel]``), a
cached check that no provider is set; without it, one attribute test.
"""

from __future__ import annotations

import itertools
from typing import Any

from sessiondb import SessionStore, telemetry

from . import data
from .databases import Server
from .figures import Run
from .report import Goal, Result
from .timing import compare


async def telemetry_overhead(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    db = await server.fresh()
    messages = data.user_messages(64, run.seed, run.corpus)
    wrapped_in, bare_in = itertools.cycle(messages), itertools.cycle(messages)
    unwrapped: Any = SessionStore.append.__wrapped__  # type: ignore[attr-defined]
    async with SessionStore.open(db.url) as store:
        api = store.core.telemetry.active()
        if api is not None:
            raise RuntimeError("figure 13 needs a process with no OpenTelemetry provider set")
        first = (await store.create_session()).id
        second = (await store.create_session()).id
        wrapped_s = bare_s = 0.0
        # Each side appends to each session for half the run: an append to the session
        # with the lower id inserts inside the records' index, not at its right edge, and
        # measured ~5% slower on SQLite, which would otherwise be charged to one side.
        for wrapped_id, bare_id in ((first, second), (second, first)):

            async def wrapped(sid: str = wrapped_id) -> None:
                await store.append(sid, next(wrapped_in))

            async def bare(sid: str = bare_id) -> None:
                await unwrapped(store, sid, next(bare_in))

            # Three times the usual repetitions: the difference sought is a few percent.
            w, b = await compare(wrapped, bare, reps=3 * s.append_reps, warmup=s.append_warmup)
            wrapped_s += w / 2
            bare_s += b / 2
    await server.drop(db)
    installed = "API installed" if telemetry.load_api() is not None else "not installed"
    return [
        Result(
            f"13 append with telemetry off ({installed})",
            server.backend,
            wrapped_s,
            bare_s,
            Goal("<=", 1.03),
        )
    ]
