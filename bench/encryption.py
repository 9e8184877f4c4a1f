"""Figure 17: what encryption at rest costs (``SessionStore.open(url, encryption=…)``).

The floor is sessiondb itself without keys, on the same database in the same run (a
plain namespace beside the encrypted one), so the ratio is the price of sealing:

- one append (an encrypted append also locks the session's head first: the seq is in
  the ciphertext's associated data);
- the context of the short session (``short_session`` messages, no compaction);
- ``import_sessions`` of ``bulk_sessions`` x ``bulk_records`` messages.
"""

from __future__ import annotations

import itertools

from sessiondb import SessionStore
from sessiondb.crypto import StaticKeyProvider

from . import data
from .databases import Server
from .figures import Run
from .report import Result
from .timing import compare

KEYS = StaticKeyProvider({"bench": bytes(range(32))}, "bench")


async def encryption_overhead(run: Run, server: Server) -> list[Result]:
    s = run.sizes
    db = await server.fresh()
    messages = data.user_messages(64, run.seed, run.corpus)
    long = data.conversation(s.short_session, run.seed, "encryption", run.corpus)
    batch = data.sessions(s.bulk_sessions, s.bulk_records, run.seed, run.corpus)
    results = []
    async with (
        SessionStore.open(db.url, "plain") as plain,
        SessionStore.open(db.url, "sealed", encryption=KEYS) as sealed,
    ):
        stores = (sealed, plain)
        ids = [(await store.create_session()).id for store in stores]
        cycles = [itertools.cycle(messages) for _ in stores]

        async def append_sealed() -> None:
            await sealed.append(ids[0], next(cycles[0]))

        async def append_plain() -> None:
            await plain.append(ids[1], next(cycles[1]))

        a, b = await compare(
            append_sealed, append_plain, reps=s.append_reps, warmup=s.append_warmup
        )
        results.append(Result("17 append one message, encrypted (vs plain)", server.backend, a, b))

        (long_sealed,) = await sealed.import_sessions([{"messages": long}])
        (long_plain,) = await plain.import_sessions([{"messages": long}])

        async def context_sealed() -> None:
            await sealed.context(long_sealed)

        async def context_plain() -> None:
            await plain.context(long_plain)

        a, b = await compare(context_sealed, context_plain, reps=s.context_reps, warmup=2)
        results.append(
            Result(
                f"17 context of {s.short_session} messages, encrypted (vs plain)",
                server.backend,
                a,
                b,
            )
        )

        async def import_sealed() -> None:
            await sealed.import_sessions(batch)

        async def import_plain() -> None:
            await plain.import_sessions(batch)

        a, b = await compare(import_sealed, import_plain, reps=s.bulk_reps, warmup=1, block=1)
        results.append(
            Result(
                f"17 import {s.bulk_sessions}x{s.bulk_records} messages, encrypted (vs plain)",
                server.backend,
                a,
                b,
            )
        )
    await server.drop(db)
    return results
