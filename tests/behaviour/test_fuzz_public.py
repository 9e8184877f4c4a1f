"""Fuzzing the public methods with valid, near-valid and hostile arguments: each call
either succeeds (and the session still reads back) or raises a ``SessionDBError`` after
which the stored rows are exactly what they were before."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import sql
from hypothesis import HealthCheck, example, given, settings
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


# -- deep and huge values --------------------------------------------------------------
#
# Every argument may also be a value nested up to 2,000 levels (lists and objects mixed,
# past the store's limit of 128 and past what Python, orjson and pydantic recurse into),
# a long string, or an object or array with many members. A store with a small
# max_record_bytes refuses the huge ones early, so an example stays cheap.

BIG_EXAMPLES = 60
SMALL_RECORDS = 64 * 1024


@dataclass(frozen=True)
class Big:
    """A deep, long or wide value, drawn as its recipe: Hypothesis prints a failing
    example's arguments with a recursive printer, which a deep value would crash, so the
    test builds the value (:func:`_built`) just before the call."""

    kind: str  # "deep", "text", "dict", "list" or "objects"
    size: int
    kinds: tuple[bool, ...] = (True,)  # deep: per level, a list (True) or an object
    leaf: Any = None

    def build(self) -> Any:
        if self.kind == "text":
            return "€" * self.size
        if self.kind == "dict":
            return {f"k{i}": i for i in range(self.size)}
        if self.kind == "list":
            return list(range(self.size))
        if self.kind == "objects":
            return [{"a": [i]} for i in range(self.size)]
        value = self.leaf
        for level in range(self.size):
            value = [value] if self.kinds[level % len(self.kinds)] else {"k": value}
        return value


def _json_text(big: Big) -> str:
    """The JSON text of ``big``'s value, built without recursion (``json.dumps`` recurses,
    orjson stops at 255 levels)."""
    if big.kind != "deep":
        return json.dumps(big.build())
    opens, closes = [], []
    for level in range(big.size):
        is_list = big.kinds[level % len(big.kinds)]
        opens.append("[" if is_list else '{"k":')
        closes.append("]" if is_list else "}")
    return "".join(reversed(opens)) + json.dumps(big.leaf) + "".join(closes)


def _built(value: Any) -> Any:
    """``value`` with every :class:`Big` in it built (the rest is small and shallow)."""
    if isinstance(value, Big):
        return value.build()
    if isinstance(value, dict):
        return {k: _built(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_built(v) for v in value)
    return value


leaves = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.just({"\ud800": 1}))
deep = st.builds(
    Big,
    st.just("deep"),
    st.one_of(
        st.integers(0, 2000),
        st.integers(120, 135),
        # Past orjson's 255 levels, pydantic's ~250, and Python's recursion limit.
        st.sampled_from([254, 255, 256, 600, 900, 1025, 2000, 5000]),
    ),
    st.lists(st.booleans(), min_size=1, max_size=6).map(tuple),
    leaves,
)
huge_text = st.sampled_from([1024, 1025, 70_000, 2_000_000]).map(lambda n: Big("text", n))
wide = st.one_of(
    st.integers(1, 20_000).map(lambda n: Big("dict", n)),
    st.integers(1, 50_000).map(lambda n: Big("list", n)),
    st.integers(1, 3_000).map(lambda n: Big("objects", n)),
)
big = st.one_of(deep, huge_text, wide)
big_message = st.one_of(
    big.map(
        lambda v: {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": {"a": v}}],
        }
    ),
    big.map(lambda v: {"role": "user", "content": [{"type": "blob", "v": v}]}),
    big.map(lambda v: {"role": "user", "content": v}),
    big.map(lambda v: {"role": "user", "content": "hi", "extra": v}),
    big,
)
big_messages = st.one_of(big_message, st.lists(st.one_of(big_message, message), max_size=3))
big_session = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(st.one_of(big_message, message), max_size=2), big)},
    optional={
        name: big for name in ("name", "model", "cron_job_id", "system_prompt_override", "metadata")
    }
    | {"source": st.just("cron")},
)
BIG_OPTIONAL: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    name: {arg: st.one_of(big, strategy) for arg, strategy in args.items()}
    for name, args in OPTIONAL.items()
}
BIG_OPTIONAL["append"]["messages"] = big_messages
BIG_OPTIONAL["import_sessions"]["items"] = st.one_of(st.lists(big_session, max_size=2), big)
BIG_OPTIONAL["create_session"]["metadata"] = st.one_of(
    big, big.map(lambda v: {"m": v}), st.dictionaries(st.text(max_size=3), big, max_size=2)
)
BIG_OPTIONAL["session_for_key"] = {
    "key": st.one_of(big, st.just("k")),
    **BIG_OPTIONAL["create_session"],
}
BIG_REQUIRED = {**REQUIRED, "session_for_key": ("key",)}
NO_SESSION_BIG = NO_SESSION | {"session_for_key"}
big_calls = st.one_of(
    *(
        st.tuples(st.just(name), st.fixed_dictionaries({}, optional=args))
        for name, args in BIG_OPTIONAL.items()
    )
)


def _deep_message(depth: int) -> dict[str, Any]:
    """A message whose block, of a type sessiondb does not model, holds a value
    ``depth`` deep (the message around it adds 4 levels)."""
    block = {"type": "blob", "v": Big("deep", depth, (False, True))}
    return {"role": "user", "content": [block]}


def _expected_wire(messages: Any) -> list[dict[str, Any]]:
    from sessiondb.models import wire_message

    items = [messages] if isinstance(messages, dict) else list(messages)
    return [wire_message(m) for m in items]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_deep_and_huge_values_give_a_sessiondb_error_or_read_back(db_url: str) -> None:
    """Nothing but a SessionDBError leaves a public method whatever the size or depth of
    its arguments; what a write accepts reads back equal."""
    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, Any]], Any] = loop.run_until_complete
    store = run(SessionStore.connect(db_url, max_record_bytes=SMALL_RECORDS))
    try:
        own = run(store.create_session(name="fuzz")).id
        run(store.append(own, [{"role": "user", "content": "hi"}] * 3))

        @settings(
            max_examples=BIG_EXAMPLES,
            deadline=None,
            suppress_health_check=[
                HealthCheck.function_scoped_fixture,
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
            ],
        )
        @given(call=big_calls, sid=st.one_of(st.just("own"), big))
        # Always tried: a deep message at the limit and past it, a wide object, a long name.
        @example(call=("append", {"messages": _deep_message(124)}), sid="own")
        @example(call=("append", {"messages": _deep_message(5000)}), sid="own")
        @example(call=("create_session", {"metadata": Big("dict", 1000)}), sid="own")
        @example(call=("create_session", {"name": Big("text", 2_000_000)}), sid="own")
        def check(call: tuple[str, dict[str, Any]], sid: Any) -> None:
            name, kwargs = call
            kwargs, sid = _built(kwargs), _built(sid)
            if any(k not in kwargs for k in BIG_REQUIRED.get(name, ())):
                return
            if name == "append_compaction" and not {"summary", "first_kept_seq"} <= set(kwargs):
                return
            args: tuple[Any, ...] = ()
            if name not in NO_SESSION_BIG:
                if name == "delete_session" and sid == "own":
                    return
                args = (own if sid == "own" else sid,)
            before = run(_counts(store))
            try:
                result = run(getattr(store, name)(*args, **kwargs))
            except SessionDBError:
                if not _batched(name, kwargs):
                    assert run(_counts(store)) == before, name
                result = None
                outcomes["refused"] += 1
            else:
                outcomes["written" if run(_counts(store)) != before else "read"] += 1
            if result is not None and name == "append" and result:
                back = run(store.records(own, from_seq=result[0].seq, to_seq=result[-1].seq))
                assert back == result
                wires = [r.message.to_wire() for r in back if r.message is not None]
                assert wires == _expected_wire(kwargs["messages"])
            if result is not None and name in ("create_session", "session_for_key"):
                assert run(store.get_session(result.id)) == result
                if name == "create_session":
                    for field in ("name", "model", "metadata", "system_prompt_override"):
                        if field in kwargs:
                            assert getattr(result, field) == kwargs[field], field
            if result is not None and name == "import_sessions":
                for sid_, item in zip(result, kwargs["items"], strict=True):
                    info = run(store.get_session(sid_))
                    if "metadata" in item:
                        assert info.metadata == item["metadata"]
                    wires = [r.message.to_wire() for r in run(store.records(sid_)) if r.message]
                    assert wires == _expected_wire(item["messages"])
            assert run(_torn_sessions(store)) == 0, name
            run(store.records(own, include_tombstoned=True))
            # The JSON read (its own statement in the common case) is the models' wire.
            wire = [m.to_wire() for m in run(store.context(own))]
            assert json.loads(run(store.context_json(own))) == wire, name
            run(store.get_session(own))
            run(store.list_sessions())

        outcomes: Counter[str] = Counter()
        check()
        # The values reached the checks: some calls refused, some wrote.
        assert outcomes["refused"] and outcomes["written"], outcomes
    finally:
        run(store.close())
        loop.close()


@settings(
    max_examples=BIG_EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.data_too_large]
)
@given(big_value=big, where=st.integers(0, 5))
def test_provider_converters_take_deep_and_huge_values(big_value: Big, where: int) -> None:
    """The provider formats, both ways, raise nothing but SessionDBError."""
    value = big_value.build()
    from sessiondb.formats.anthropic import from_anthropic, to_anthropic
    from sessiondb.formats.openai_chat import from_openai_chat, to_openai_chat
    from sessiondb.formats.openai_responses import from_openai_responses, to_openai_responses

    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c", "name": "n", "arguments": {"a": 1}}],
        },
        {"role": "toolResult", "toolCallId": "c", "content": "ok"},
    ]
    if where < 3:
        messages[where] = {**messages[where], "extra": value}
    elif where == 3:
        messages[1]["content"][0]["arguments"] = {"a": value}
    else:
        messages.append(value)
    for convert in (to_anthropic, to_openai_chat, to_openai_responses):
        with contextlib.suppress(SessionDBError):
            convert(messages)  # type: ignore[operator]
    text = value if isinstance(value, str) else _json_text(big_value) if where % 2 else "{}"
    responses: list[tuple[Callable[[Any], Any], Any]] = [
        (
            from_anthropic,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {"a": value}}],
            },
        ),
        (from_anthropic, {"role": value, "content": value, "usage": value}),
        (from_anthropic, {"type": "error", "error": value}),
        (
            from_openai_chat,
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": value,
                            "tool_calls": [
                                {
                                    "id": "t",
                                    "type": "function",
                                    "function": {"name": "n", "arguments": text},
                                }
                            ],
                        }
                    }
                ]
            },
        ),
        (from_openai_chat, {"choices": [{"message": {"role": value}}], "usage": value}),
        (from_openai_chat, {"error": value}),
        (
            from_openai_responses,
            {
                "output": [
                    {"type": "function_call", "call_id": "t", "name": "n", "arguments": text},
                    {"type": "message", "role": "assistant", "content": value},
                    {"type": value},
                ]
            },
        ),
        (from_openai_responses, {"output": value, "usage": value}),
        (from_openai_responses, {"error": value}),
        (from_openai_responses, {"output": [{"type": "other", "x": value}]}),
    ]
    for convert_back, response in responses:
        with contextlib.suppress(SessionDBError):
            convert_back(response)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_claude_code_tree_with_deep_and_huge_lines_imports_the_rest(
    db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A line holding a deep or huge value anywhere fails its session (or is a bad line);
    import_path raises nothing, and the tree's other file is imported whole."""
    from helpers.formats import claude_code_project

    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, Any]], Any] = loop.run_until_complete
    store = run(SessionStore.connect(db_url, max_record_bytes=SMALL_RECORDS))
    places = ("toolUseResult", "content", "block", "message", "line", "input")

    @settings(
        max_examples=BIG_EXAMPLES // 2,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(value=big, place=st.sampled_from(places))
    @example(value=Big("deep", 600, (False, True)), place="toolUseResult")
    def check(value: Big, place: str) -> None:
        folder = tmp_path_factory.mktemp("cc")
        stem = folder.name  # unique: each example's sessions are new
        tree = claude_code_project(folder / stem, files=2, lines=2)
        built = "@@big@@"  # its text goes in last: json.dumps would recurse into it
        line: Any = {
            "type": "assistant",
            "uuid": "hostile",
            "parentUuid": f"{stem}-001-00001",
            "sessionId": f"{stem}-001",
            "timestamp": "2026-01-01T00:01:00Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
        }
        if place == "toolUseResult":
            line["toolUseResult"] = built
        elif place == "content":
            line["message"]["content"] = built
        elif place == "block":
            line["message"]["content"][0]["extra"] = built
        elif place == "message":
            line["message"] = built
        elif place == "input":
            block = {"type": "tool_use", "id": "t", "name": "n", "input": {"a": built}}
            line["message"]["content"] = [block]
        else:
            line = built
        text = json.dumps(line).replace('"@@big@@"', _json_text(value))
        with (tree / f"{stem}-001.jsonl").open("a") as out:
            out.write(text + "\n")
        before = run(_counts(store))[0]
        report = run(store.import_path(tree))
        assert [f.path.name for f in report.failures] in ([], [f"{stem}-001.jsonl"])
        assert run(_counts(store))[0] - before == report.created >= 1
        for session_id in report.session_ids:
            run(store.records(session_id))
            run(store.context(session_id))

    try:
        check()
    finally:
        run(store.close())
        loop.close()


@given(value=deep.filter(lambda b: b.size <= 200))
def test_the_json_text_of_a_deep_value_is_its_json(value: Big) -> None:
    assert json.loads(_json_text(value)) == value.build()
