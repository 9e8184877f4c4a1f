"""Concurrent appends of one store to one session go out combined (sessiondb.combine):
each caller gets exactly its own records, seqs stay gapless in the calls' order, and
expected_seq, uuids, a refused row and a cancel keep the meaning they have alone."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from typing import Any

import pytest
from helpers import sql

from sessiondb import DatabaseError, Record, SeqConflictError, SessionStore


def _texts(records: list[Record]) -> list[str]:
    return [r.message.text() for r in records if r.message is not None]


def _messages(*texts: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": t, **extra} for t in texts]


async def test_many_tasks_get_their_own_records_gapless_in_call_order(
    store: SessionStore,
) -> None:
    sid = (await store.create_session()).id
    tasks, calls = 8, 25
    got: dict[int, list[list[Record]]] = defaultdict(list)

    async def task(t: int) -> None:
        for i in range(calls):
            # One, two or three messages per call.
            texts = [f"t{t} c{i} m{m}" for m in range(1 + (t + i) % 3)]
            records = await store.append(sid, _messages(*texts))
            assert _texts(records) == texts  # exactly its own, in its order
            seqs = [r.seq for r in records]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # consecutive
            got[t].append(records)

    await asyncio.gather(*(task(t) for t in range(tasks)))

    stored = await store.records(sid)
    total = sum(1 + (t + i) % 3 for t in range(tasks) for i in range(calls))
    assert [r.seq for r in stored] == list(range(1, total + 1))
    by_seq = {r.seq: r for r in stored}
    for results in got.values():
        for records in results:  # what each caller got is what is stored at its seqs
            assert _texts([by_seq[r.seq] for r in records]) == _texts(records)
        seqs = [r.seq for records in results for r in records]
        assert seqs == sorted(seqs)  # each task's calls in its own order
    info = await store.get_session(sid)
    assert info.last_seq == info.message_count == total
    # They were combined: a batch shares one commit, and so one timestamp.
    combiner = store.core.combiner
    assert combiner.batches > 0 and combiner.combined_calls > combiner.batches
    assert len({r.created_at for r in stored}) < tasks * calls


async def test_a_lone_append_is_not_combined(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    for i in range(5):
        (record,) = await store.append(sid, _messages(f"alone {i}"))
        assert record.seq == i + 1
    assert store.core.combiner.batches == 0


async def test_a_row_the_database_refuses_fails_only_its_call(store: SessionStore) -> None:
    # A trigger refuses rows holding "poison": the batch that carries one is refused as a
    # whole, and is run again call by call.
    if sql.flavour(store) == "sqlite":
        await sql.execute(
            store,
            "CREATE TRIGGER poison BEFORE INSERT ON sessiondb_records "
            "WHEN NEW.payload LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'poison'); END",
        )
    else:
        await sql.execute(
            store,
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.payload LIKE '%poison%' THEN "
            "RAISE EXCEPTION 'poison' USING ERRCODE = 'check_violation'; END IF; "
            "RETURN NEW; END $$",
        )
        await sql.execute(
            store,
            "CREATE TRIGGER poison BEFORE INSERT ON sessiondb_records "
            "FOR EACH ROW EXECUTE FUNCTION poison()",
        )
    sid = (await store.create_session()).id
    texts = ["first", "a", "b", "poison c", "d", "e"]
    results = await asyncio.gather(
        *(store.append(sid, _messages(t)) for t in texts), return_exceptions=True
    )
    assert isinstance(results[3], DatabaseError), results[3]
    good = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(r, list) for r in good), good
    assert [_texts(r) for r in good if isinstance(r, list)] == [[t] for t in texts if t[0] != "p"]
    stored = await store.records(sid)
    assert _texts(stored) == ["first", "a", "b", "d", "e"]
    assert [r.seq for r in stored] == [1, 2, 3, 4, 5]
    assert store.core.combiner.batches == 1  # a, b, poison c, d, e went out together


async def test_expected_seq_is_checked_in_arrival_order_inside_a_batch(
    store: SessionStore,
) -> None:
    sid = (await store.create_session()).id
    # The first runs alone (head 0 -> 1); the rest wait for it and go out as one batch,
    # each checked against the head the calls before it left.
    calls: list[tuple[str, int | None]] = [
        ("lead", 0),
        ("a", 1),  # head 1: ok -> 2
        ("b", 1),  # head 2: conflict
        ("c", None),  # -> 3
        ("d", 3),  # ok -> 4
        ("e", 9),  # conflict
        ("f", 4),  # ok -> 5
    ]
    results = await asyncio.gather(
        *(store.append(sid, _messages(t), expected_seq=e) for t, e in calls),
        return_exceptions=True,
    )
    outcomes = [
        (r.expected_seq, r.actual_seq) if isinstance(r, SeqConflictError) else _texts(r)  # type: ignore[arg-type]
        for r in results
    ]
    assert outcomes == [["lead"], ["a"], (1, 2), ["c"], ["d"], (9, 4), ["f"]]
    stored = await store.records(sid)
    assert [(r.seq, *_texts([r])) for r in stored] == [
        (1, "lead"),
        (2, "a"),
        (3, "c"),
        (4, "d"),
        (5, "f"),
    ]
    assert store.core.combiner.batches == 1


async def test_uuids_inside_a_batch_are_stored_once(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    known, shared = str(uuid.uuid4()), str(uuid.uuid4())
    (first,) = await store.append(sid, _messages("known", uuid=known))
    results = await asyncio.gather(
        store.append(sid, _messages("lead")),
        store.append(sid, _messages("known again", uuid=known)),  # stored already
        store.append(sid, _messages("shared", uuid=shared)),
        store.append(sid, [*_messages("plain"), *_messages("shared twice", uuid=shared)]),
        store.append(sid, _messages("last")),
    )
    lead, again, shared_first, mixed, last = results
    assert again == [first]  # the stored record, not a new one
    assert mixed[1] == shared_first[0]  # the batch's own earlier record
    assert _texts(mixed) == ["plain", "shared"]
    stored = await store.records(sid)
    assert _texts(stored) == ["known", "lead", "shared", "plain", "last"]
    assert [r.seq for r in stored] == [1, 2, 3, 4, 5]
    assert [r.seq for r in (*lead, *shared_first, mixed[0], *last)] == [2, 3, 4, 5]


async def test_a_cancelled_caller_leaves_the_others_records(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    lead = asyncio.create_task(store.append(sid, _messages("lead")))
    await asyncio.sleep(0)  # the lead is in flight; the rest wait for it
    waiting = {t: asyncio.create_task(store.append(sid, _messages(t))) for t in "abcde"}
    await asyncio.sleep(0)
    waiting["b"].cancel()  # before its batch starts: taken out, nothing written
    await lead
    for _ in range(3):  # the batch starts (and, on Postgres, is in flight)
        await asyncio.sleep(0)
    waiting["d"].cancel()  # once its batch started: its commit, if any, is returned
    outcome: dict[str, list[Record] | None] = {}
    for t, task in waiting.items():
        try:
            outcome[t] = await task
        except asyncio.CancelledError:
            outcome[t] = None
    assert outcome["b"] is None
    for t in "ace":
        assert _texts(outcome[t] or []) == [t]
    stored = _texts(await store.records(sid))
    expected = ["lead", "a", "c", "d", "e"] if outcome["d"] is not None else ["lead", "a", "c", "e"]
    assert stored == expected  # "d": stored exactly when it was returned
    assert [r.seq for r in await store.records(sid)] == list(range(1, len(expected) + 1))
    # The store goes on as before.
    (after,) = await store.append(sid, _messages("after"))
    assert after.seq == len(expected) + 1


@pytest.mark.parametrize("cancel_at", range(8))
async def test_cancels_at_every_point_write_exactly_what_they_return(
    store: SessionStore, cancel_at: int
) -> None:
    sid = (await store.create_session()).id
    tasks = [asyncio.create_task(store.append(sid, _messages(f"m{i}"))) for i in range(6)]
    for _ in range(cancel_at):
        await asyncio.sleep(0)
    for task in tasks[1::2]:
        task.cancel()
    returned = []
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            returned.extend(_texts(await task))
    stored = await store.records(sid)
    assert _texts(stored) == returned
    assert [r.seq for r in stored] == list(range(1, len(stored) + 1))
    assert [_texts(await t) for t in tasks[0::2]] == [["m0"], ["m2"], ["m4"]]
