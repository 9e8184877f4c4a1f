"""Figure 11: what a turn lease costs (``store.turn``), beside one plain append.

The issue asks for the lease's overhead against one append, so the floor here is
sessiondb's own ``store.append`` of one message on the same database, not a bare
driver statement. Two rows per backend:

- taking and releasing an uncontended turn (``async with store.turn(sid): pass``);
- one ``turn.append`` (the lease checked and renewed in the append's transaction)
  inside a held turn.
"""

from __future__ import annotations

import itertools

from sessiondb import SessionStore

from . import data
from .databases import Server
from .figures import Run
from .report import Result
from .timing import compare


async def turn_overhead(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    db = await server.fresh()
    messages = data.user_messages(64, run.seed, run.corpus)
    plain_in, fenced_in = itertools.cycle(messages), itertools.cycle(messages)
    async with SessionStore.open(db.url) as store:
        turn_id = (await store.create_session()).id
        plain_id = (await store.create_session()).id
        fenced_id = (await store.create_session()).id

        async def take_and_release() -> None:
            async with store.turn(turn_id):
                pass

        async def plain() -> None:
            await store.append(plain_id, next(plain_in))

        turn_s, append_s = await compare(
            take_and_release, plain, reps=s.append_reps, warmup=s.append_warmup
        )
        async with store.turn(fenced_id) as turn:

            async def fenced() -> None:
                await turn.append(next(fenced_in))

            fenced_s, plain_s = await compare(
                fenced, plain, reps=s.append_reps, warmup=s.append_warmup
            )
    await server.drop(db)
    return [
        Result("11 take+release a turn (vs one append)", server.backend, turn_s, append_s),
        Result("11 turn.append (vs store.append)", server.backend, fenced_s, plain_s),
    ]
