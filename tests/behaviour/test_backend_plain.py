"""``Backend.fetch(plain=True)``: the same rows, read by position (plain tuples on
SQLite), on every path a SQLite read takes (reader thread, inline, ``:memory:``)."""

from __future__ import annotations

from helpers import sql

from sessiondb import SessionStore
from sessiondb import statements as q


async def test_plain_rows_hold_the_same_values(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [{"role": "user", "content": f"m{i}"} for i in range(30)])
    bound = q.namespace_records(store.namespace, after=None, limit=100)
    backend = sql.backend_of(store)  # the fixture built it with open_backend(settings)
    for _ in range(3):  # the first read goes to a thread; a short one then runs inline
        rows = await backend.fetch(bound)
        plain = await backend.fetch(bound, plain=True)
        assert [tuple(r) for r in rows] == [tuple(r) for r in plain]
        assert len(plain) == 30 and plain[0][1] == 1
        if store.settings.url.get_backend_name() == "sqlite":
            assert all(type(r) is tuple for r in plain)
