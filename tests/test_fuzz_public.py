"""Fuzzing the public methods with valid, near-valid and hostile arguments: each call
either succeeds (and the session still reads back) or raises a ``SessionDBError`` after
which the stored rows are exactly what they were before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import sql_helpers as sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import SessionDBError, SessionStore

EXAMPLES = 300

# Values no argument should take silently, beside plausible ones.
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, -1, 2**63 - 1, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "\x00", "message", "3", "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"]),
    st.binary(max_size=4),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
ints = st.one_of(st.integers(min_value=-2, max_value=6), hostile)
texts = st.one_of(st.text(max_size=10), hostile)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=10)}
    ),
    st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "tool"]), hostile), "content": hostile}
    ),
    hostile,
)
messages = st.one_of(message, st.lists(message, max_size=3), hostile)
# A session for import_sessions: plausible, with hostile fields, or hostile whole.
new_session = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(message, max_size=3)},
        optional={
            "name": texts,
            "model": texts,
            "source": st.one_of(st.sampled_from(["interactive", "cron"]), hostile),
            "cron_job_id": texts,
            "system_prompt_override": texts,
            "metadata": st.one_of(st.dictionaries(st.text(max_size=3), st.integers()), hostile),
            "bogus": hostile,
        },
    ),
    st.fixed_dictionaries({"messages": hostile}),
    hostile,
)


def _call(name: str) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return st.tuples(st.just(name), st.fixed_dictionaries({}, optional=OPTIONAL[name]))


# Arguments beside the session id, per method; the session id is the session's own, the
# other session's, a missing one or hostile.
OPTIONAL: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "append": {"messages": messages, "expected_seq": ints},
    "records": {
        "kinds": st.one_of(
            st.lists(st.sampled_from(["message", "tombstone", "compaction", "entry", "prune"])),
            st.lists(st.one_of(st.sampled_from(["message", "bogus"]), hostile), max_size=3),
            hostile,
        ),
        "from_seq": ints,
        "to_seq": ints,
        "include_tombstoned": hostile,
        "include_superseded": hostile,
    },
    "append_prune": {
        "seqs": st.one_of(st.lists(ints, max_size=4), hostile),
        "marker": texts,
        "tokens_freed": ints,
        "expected_seq": ints,
    },
    "import_sessions": {
        "items": st.one_of(st.lists(new_session, max_size=3), hostile),
        "batch_records": ints,
    },
    "tombstone": {"seq": ints, "reason": texts},
    "fork": {"at_seq": ints, "name": texts, "detach": hostile},
    "append_compaction": {
        "summary": texts,
        "first_kept_seq": ints,
        "tokens_before": ints,
        "read_files": hostile,
        "modified_files": hostile,
        "expected_seq": ints,
    },
    "rename": {"name": texts},
    "pop": {"reason": texts},
    "clear": {},
    "context": {"last": ints},
    "context_json": {"last": ints},
    "delete_session": {"cascade": hostile},
    "get_session": {},
    "list_sessions": {"limit": ints, "cursor": texts, "source": texts, "parent_id": texts},
    "create_session": {
        "name": texts,
        "model": texts,
        "source": st.one_of(st.sampled_from(["interactive", "cron"]), hostile),
        "cron_job_id": texts,
        "system_prompt_override": texts,
        "metadata": st.one_of(st.dictionaries(st.text(max_size=3), st.integers()), hostile),
    },
}
# Arguments that every call must pass (keyword-only and without defaults).
REQUIRED = {
    "append": ("messages",),
    "tombstone": ("seq",),
    "rename": ("name",),
    "append_prune": ("seqs",),
    "import_sessions": ("items",),
}
NO_SESSION = {"list_sessions", "create_session", "import_sessions"}
calls = st.one_of(*(_call(name) for name in OPTIONAL))
session_ids = st.integers(0, 9).flatmap(
    lambda i: st.just("own") if i < 7 else st.one_of(st.just("missing"), hostile)
)


async def _counts(store: SessionStore) -> tuple[Any, ...]:
    return (
        await sql.scalar(store, "SELECT count(*) FROM sessiondb_sessions"),
        await sql.scalar(store, "SELECT count(*) FROM sessiondb_records"),
        await sql.scalar(
            store,
            "SELECT coalesce(sum(last_seq), 0) + coalesce(sum(message_count), 0) "
            "FROM sessiondb_sessions",
        ),
    )


async def _torn_sessions(store: SessionStore) -> int:
    return int(
        await sql.scalar(
            store,
            "SELECT count(*) FROM sessiondb_sessions s WHERE s.last_seq - coalesce(s.fork_seq, 0)"
            " <> (SELECT count(*) FROM sessiondb_records r WHERE r.session_id = s.id)",
        )
    )


def _batched(name: str, kwargs: dict[str, Any]) -> bool:
    """import_sessions with a valid ``batch_records``: batches written before the failing
    one stay (documented; each session whole, which ``_torn_sessions`` checks)."""
    size = kwargs.get("batch_records")
    return (
        name == "import_sessions"
        and isinstance(size, int)
        and not isinstance(size, bool)
        and 1 <= size < 2**63
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_public_methods_succeed_or_change_nothing(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, Any]], Any] = loop.run_until_complete
    store = run(SessionStore.connect(db_url))
    try:
        own = run(store.create_session(name="fuzz")).id
        run(store.append(own, [{"role": "user", "content": "hi"}] * 3))
        # Tool results at seqs 5 and 6, for append_prune to take.
        call = {"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}
        call2 = {**call, "id": "c2"}
        run(
            store.append(
                own,
                [
                    {"role": "assistant", "content": [call, call2]},
                    {"role": "toolResult", "toolCallId": "c1", "content": "one"},
                    {"role": "toolResult", "toolCallId": "c2", "content": "two"},
                ],
            )
        )

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(call=calls, sid=session_ids)
        def check(call: tuple[str, dict[str, Any]], sid: Any) -> None:
            name, kwargs = call
            if any(k not in kwargs for k in REQUIRED.get(name, ())):
                return
            if name == "append_compaction" and not {"summary", "first_kept_seq"} <= set(kwargs):
                return
            args: tuple[Any, ...] = ()
            if name not in NO_SESSION:
                target = (
                    {"own": own, "missing": "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"}.get(sid, sid)
                    if isinstance(sid, str)
                    else sid
                )
                if name == "delete_session" and target == own:
                    return  # keep the session under test
                args = (target,)
            before = run(_counts(store))
            try:
                run(getattr(store, name)(*args, **kwargs))
            except SessionDBError:
                if not _batched(name, kwargs):
                    assert run(_counts(store)) == before, (name, args, kwargs)
            # Every session whole: its own records are its seqs past the fork point.
            assert run(_torn_sessions(store)) == 0, (name, args, kwargs)
            # Succeeded or not, the session reads back.
            run(store.records(own, include_tombstoned=True))
            run(store.context(own))
            run(store.get_session(own))

        check()
    finally:
        run(store.close())
        loop.close()


async def test_found_by_fuzzing_empty_kinds_and_non_bool_flags(store: SessionStore) -> None:
    from sessiondb import InvalidInputError

    sid = (await store.create_session()).id
    await store.append(sid, {"role": "user", "content": "hi"})
    assert await store.records(sid, kinds=[]) == []
    for kwargs in ({"include_tombstoned": 5}, {"include_superseded": "no"}):
        with pytest.raises(InvalidInputError, match=next(iter(kwargs))):
            await store.records(sid, **kwargs)
    with pytest.raises(InvalidInputError, match="cascade"):
        await store.delete_session(sid, cascade=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="detach"):
        await store.fork(sid, detach="yes")  # type: ignore[arg-type]
    assert len(await store.records(sid)) == 1


async def test_found_by_fuzzing_import_sessions_arguments(store: SessionStore) -> None:
    from sessiondb import InvalidInputError

    before = await _counts(store)
    for items in (0.0, None, "abc", {"messages": []}):
        with pytest.raises(InvalidInputError, match="items must be an iterable"):
            await store.import_sessions(items)  # type: ignore[arg-type]
    for size in ("x", True, 0, 2**63):
        with pytest.raises(InvalidInputError, match="batch_records"):
            await store.import_sessions([{"messages": []}], batch_records=size)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"^session 0: Input should be"):
        await store.import_sessions([5])  # type: ignore[list-item]
    assert await _counts(store) == before
