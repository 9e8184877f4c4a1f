"""Combined appends from several OS processes, each with several tasks, on one Postgres
session: each process combines its own tasks' appends, the processes are ordered by the
head's row lock, and no record is lost, duplicated or reordered.

The workers run in processes started with the "spawn" method, as replicas would."""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections import defaultdict
from typing import Any

import pytest
from helpers.processes import SPAWN
from helpers.processes import run_processes as run_workers

from sessiondb import SessionStore

TEXT = re.compile(r"^p(\d+) t(\d+) i(\d+) m(\d+)$")
TIMEOUT_S = 240


def _call(proc: int, task: int, i: int) -> list[dict[str, Any]]:
    """The i-th append of a task: one or two messages; every third with uuids (fixed by
    the name, so that sending it again finds it stored)."""
    count = 1 + (task + i) % 2
    messages: list[dict[str, Any]] = []
    for m in range(count):
        message: dict[str, Any] = {"role": "user", "content": f"p{proc} t{task} i{i} m{m}"}
        if i % 3 == 0:
            message["uuid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"p{proc}/t{task}/i{i}/m{m}"))
        messages.append(message)
    return messages


async def _tasks(url: str, session_id: str, proc: int, tasks: int, per_task: int) -> int:
    async with SessionStore.open(url) as store:

        async def task(t: int) -> None:
            last = 0
            for i in range(per_task):
                messages = _call(proc, t, i)
                records = await store.append(session_id, messages)
                assert [r.message.text() for r in records if r.message] == [
                    m["content"] for m in messages
                ]
                assert records[0].seq > last  # its own calls in its own order
                last = records[-1].seq
                if i % 3 == 0:  # sent again: the stored records come back
                    assert await store.append(session_id, messages) == records

        await asyncio.gather(*(task(t) for t in range(tasks)))
        return store.core.combiner.batches


def _worker(
    url: str, session_id: str, proc: int, tasks: int, per_task: int, start: Any, results: Any
) -> None:
    start.wait()  # every process is up before anyone writes
    results.put((proc, asyncio.run(_tasks(url, session_id, proc, tasks, per_task))))


def _run(url: str, session_id: str, procs: int, tasks: int, per_task: int) -> dict[int, int]:
    start, results = SPAWN.Barrier(procs), SPAWN.Queue()
    run_workers(
        _worker,
        lambda p: (url, session_id, p, tasks, per_task, start, results),
        procs,
        timeout=TIMEOUT_S,
        name="sessiondb-combined",
    )
    out = dict(results.get(timeout=10) for _ in range(procs))
    results.close()
    return out


@pytest.mark.postgres_only
async def test_processes_with_many_tasks_each_combine_and_lose_nothing(pg_url: str) -> None:
    procs, tasks, per_task = 3, 6, 30
    async with SessionStore.open(pg_url) as store:
        sid = (await store.create_session()).id
        batches = await asyncio.to_thread(_run, pg_url, sid, procs, tasks, per_task)
        records = await store.records(sid)
        info = await store.get_session(sid)
    assert all(n > 0 for n in batches.values()), batches  # every process combined
    expected = {
        m["content"]
        for p in range(procs)
        for t in range(tasks)
        for i in range(per_task)
        for m in _call(p, t, i)
    }
    texts = [r.message.text() for r in records if r.message]
    assert len(texts) == len(expected) and set(texts) == expected  # none lost, none twice
    assert [r.seq for r in records] == list(range(1, len(expected) + 1))
    assert info.last_seq == info.message_count == len(expected)
    order: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for text in texts:
        match = TEXT.match(text)
        assert match, text
        p, t, i, m = map(int, match.groups())
        order[(p, t)].append((i, m))
    for key, seen in order.items():
        assert seen == sorted(seen), f"task {key} out of order"
        # A call's messages sit side by side: nothing of another call between them.
    for r, nxt in itertools.pairwise(records):
        a = TEXT.match(r.message.text() if r.message else "")
        b = TEXT.match(nxt.message.text() if nxt.message else "")
        assert a and b
        if b.group(4) == "1":
            assert a.groups()[:3] == b.groups()[:3] and a.group(4) == "0"
