"""The responses index (revision 0009), on both backends: ``context_json`` searches its
texts for a split response only when a kept assistant message is in the index, and
answers the same as ``context()`` either way; the database fills the index from the
stored text, so rows another writer put there count too; the statement reads the index
on both planners."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers import sql
from helpers.messages import assistant, result, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import InvalidInputError, SessionStore
from sessiondb import statements as q
from sessiondb.context import merge_split_responses
from sessiondb.tables import RESPONSE_KEY, RESPONSES_INDEX


async def _marker(store: SessionStore, sid: str) -> str:
    """The first character of the texts statement's first row."""
    stmt, params = q.context_texts(sid, store.namespace)
    rows = await sql.fetch(store, stmt, **params)
    return str(rows[0][0])[:1]


async def _same_as_context(store: SessionStore, sid: str) -> list[dict[str, Any]]:
    wire = [m.to_wire() for m in await store.context(sid)]
    assert json.loads(await store.context_json(sid)) == wire
    return wire


def _part(text: str, response: str, calls: tuple[str, ...] = ()) -> dict[str, Any]:
    """An assistant message that is a part of the response ``response``."""
    return assistant(text, calls, responseId=response)


async def test_the_search_runs_only_while_a_kept_message_names_a_response(
    store: SessionStore,
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [user("q1"), assistant("call", ["A"]), result("A"), assistant("a1")])
    assert await _marker(store, sid) == q.TEXTS_NO_RESPONSES
    await _same_as_context(store, sid)

    # The name in places that are no response's: a user message's own field, a text
    # (its quotes escaped in the stored JSON), a tool call's arguments (nested: indexed,
    # searched, and found to be no response).
    await store.append(sid, [user("q2", responseId="r0"), user(f"say {RESPONSE_KEY} 1")])
    assert await _marker(store, sid) == q.TEXTS_NO_RESPONSES
    await store.append(sid, [assistant("plain", ["B"])])
    assert await _marker(store, sid) == q.TEXTS_NO_RESPONSES
    nested = assistant("nested")
    nested["content"].append(
        {"type": "toolCall", "id": "N", "name": "read", "arguments": {"responseId": "r9"}}
    )
    await store.append(sid, [result("B"), nested, result("N")])
    assert await _marker(store, sid) == q.TEXTS_ALONE
    before = len(await _same_as_context(store, sid))

    # A response in two parts with a tool result between them: one message in the context.
    await store.append(sid, [user("q3"), _part("one", "r1", ("C",)), result("C")])
    await store.append(sid, [_part("two", "r1", ("D",)), result("D")])
    assert await _marker(store, sid) == q.TEXTS_ALONE
    wire = await _same_as_context(store, sid)
    assert len(wire) == before + 4
    merged = wire[before + 1]
    assert [b.get("text") or b.get("id") for b in merged["content"]] == ["one", "C", "two", "D"]
    assert [m["role"] for m in wire[before + 2 :]] == ["toolResult", "toolResult"]

    # A compaction that keeps the second part only: the search still, nothing to merge.
    head = (await store.get_session(sid)).last_seq
    await store.append(sid, [user("q4"), assistant("a4")])
    await store.append_compaction(sid, summary="earlier", first_kept_seq=head - 1)
    assert await _marker(store, sid) == q.TEXTS_ALONE
    wire = await _same_as_context(store, sid)
    assert [b.get("text") or b.get("id") for b in wire[1]["content"]] == ["two", "D"]
    # One that keeps none of them: no search again.
    await store.append_compaction(sid, summary="later", first_kept_seq=head + 1)
    assert await _marker(store, sid) == q.TEXTS_NO_RESPONSES
    assert len(await _same_as_context(store, sid)) == 3


async def test_a_row_another_writer_stored_is_in_the_index(store: SessionStore) -> None:
    """The database fills the index from the stored text: a row written by other code (an
    older sessiondb in a rolling upgrade) counts as one sessiondb wrote."""
    sid = (await store.create_session()).id
    await store.append(sid, [user("q"), _part("one", "r1", ("C",)), result("C")])
    payload = json.dumps(_part("two", "r1"), separators=(",", ":"))
    await sql.execute(
        store,
        "INSERT INTO sessiondb_records (session_id, seq, kind, role, created_at, size, payload)"
        " VALUES (:sid, 4, 'message', 'assistant', :at, :size, :payload)",
        sid=sid,
        at="2026-11-28 00:00:00.000000" if sql.flavour(store) == "sqlite" else datetime.now(UTC),
        size=len(payload),
        payload=payload,
    )
    await sql.execute(store, "UPDATE sessiondb_sessions SET last_seq = 4 WHERE id = :sid", sid=sid)
    await store.append_compaction(sid, summary="s", first_kept_seq=4)
    assert await _marker(store, sid) == q.TEXTS_ALONE
    await store.append(sid, [user("next")])  # seq 6, after the compaction
    await store.append_compaction(sid, summary="s", first_kept_seq=6)
    assert await _marker(store, sid) == q.TEXTS_NO_RESPONSES


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_texts_statement_probes_the_responses_index(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [user(f"q{i}") for i in range(50)])
    stmt, params = q.context_texts(sid, store.namespace)
    plan = "\n".join(await sql.database(store).explain(stmt, params, generic=True))
    assert RESPONSES_INDEX in plan, plan


# -- the verdict against the texts themselves -------------------------------------------

_message = st.one_of(
    st.builds(lambda t: user(t), st.sampled_from(["q", "hi"])),
    st.builds(
        lambda t, r: assistant(t, (), **({} if r is None else {"responseId": r})),
        st.sampled_from(["a", "b"]),
        st.sampled_from([None, None, "r1", "r2"]),
    ),
    st.builds(lambda r: _part("call", r, ("X",)), st.sampled_from(["r1", "r2"])),
    st.just(result("X")),
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_the_verdict_is_what_the_kept_texts_say(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, Any]], Any] = loop.run_until_complete
    store = run(SessionStore.connect(db_url))
    try:

        @settings(
            max_examples=60,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            messages=st.lists(_message, min_size=1, max_size=12),
            cut=st.none() | st.integers(min_value=1, max_value=12),
            gone=st.none() | st.integers(min_value=1, max_value=12),
        )
        def check(messages: list[dict[str, Any]], cut: int | None, gone: int | None) -> None:
            sid = run(store.create_session()).id
            run(store.append(sid, messages))
            if gone is not None and gone <= len(messages):
                run(store.tombstone(sid, gone))
            if cut is not None and cut <= len(messages):
                # A cut between a tool call and its result is refused.
                with contextlib.suppress(InvalidInputError):
                    run(store.append_compaction(sid, summary="s", first_kept_seq=cut))
            kept = run(store.records(sid, kinds=["message"], include_superseded=False))
            named = any(
                r.message.role == "assistant" and RESPONSE_KEY in json.dumps(r.message.to_wire())
                for r in kept
                if r.seq != gone
            )
            marker = run(_marker(store, sid))
            # The index may say a response is named where a tombstone took the message
            # back (it reads the stored rows); never the other way round.
            assert marker == q.TEXTS_ALONE or not named
            wire = run(_same_as_context(store, sid))
            if gone is None or gone > len(messages):
                assert marker == (q.TEXTS_ALONE if named else q.TEXTS_NO_RESPONSES)
                # The parts of each split response merged as the reference merges them.
                merged = merge_split_responses([r.message.to_wire() for r in kept])
                assert wire[len(wire) - len(merged) :] == merged

        check()
    finally:
        run(store.close())
        loop.close()
