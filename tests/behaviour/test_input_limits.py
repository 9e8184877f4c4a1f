"""One nesting limit for every JSON value that enters (``MAX_JSON_DEPTH``), measured
without recursion, and the bounds of a session's fields: over a limit is an
``InvalidInputError`` naming what was over (a failure in the report, on a file import),
never a ``RecursionError``; nothing is written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.formats import claude_code_project

from sessiondb import InvalidInputError, SessionDBError, SessionStore, jsoncodec
from sessiondb.formats.anthropic import from_anthropic, to_anthropic
from sessiondb.formats.openai_chat import from_openai_chat, to_openai_chat
from sessiondb.formats.openai_responses import to_openai_responses
from sessiondb.validation import (
    MAX_CRON_JOB_ID_CHARS,
    MAX_JSON_DEPTH,
    MAX_MODEL_CHARS,
    MAX_NAME_CHARS,
)

SMALL = 1024


def nested(depth: int, leaf: Any = "x") -> Any:
    """A value ``depth`` levels deep, lists and objects in turn (a leaf is 0 deep)."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def call(arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message calling a tool with ``arguments`` (4 levels around them)."""
    block = {"type": "toolCall", "id": "c1", "name": "read", "arguments": arguments}
    return {"role": "assistant", "content": [block]}


async def _rows(store: SessionStore) -> tuple[Any, ...]:
    return (
        await sql.scalar(store, "SELECT count(*) FROM sessiondb_sessions"),
        await sql.scalar(store, "SELECT count(*) FROM sessiondb_records"),
    )


@pytest.fixture
async def small(store_url: str) -> AsyncIterator[SessionStore]:
    """A store on the test's database taking records of up to SMALL bytes."""
    async with sql.store_on(store_url, max_record_bytes=SMALL) as s:
        yield s


# -- the depth walk -------------------------------------------------------------------


def test_depth_is_measured_without_recursion() -> None:
    assert MAX_JSON_DEPTH == 128
    assert not jsoncodec.deeper_than("x")
    assert not jsoncodec.deeper_than({}, 1) and jsoncodec.deeper_than({}, 0)
    assert not jsoncodec.deeper_than(nested(128)) and jsoncodec.deeper_than(nested(129))
    # Far past Python's recursion limit, and past orjson's (1,024) and json's.
    assert jsoncodec.deeper_than(nested(100_000))
    assert not jsoncodec.deeper_than([nested(127)] * 1000 + [{"a": (1, [2])}])
    # The quick bound never says "not deep" of a deep text.
    text = json.dumps(nested(129))
    assert jsoncodec.text_deeper_than(text) and jsoncodec.text_deeper_than(text.encode())
    assert not jsoncodec.text_deeper_than(json.dumps(nested(128)))
    # Text that is not ASCII is counted the other way; the answer is the same.
    wide = json.dumps(nested(129, "é"), ensure_ascii=False)
    assert not wide.isascii() and jsoncodec.text_deeper_than(wide)
    assert jsoncodec.text_deeper_than(wide.encode())
    assert not jsoncodec.text_deeper_than(json.dumps(nested(128, "é"), ensure_ascii=False))
    # Brackets inside strings count too: a bound, then the walk decides.
    assert jsoncodec.text_deeper_than(json.dumps(["[" * 300]))
    assert not jsoncodec.deeper_than(["[" * 300])


def test_the_other_walks_and_the_parser_do_not_recurse() -> None:
    deep = nested(5000)
    assert not jsoncodec.has_surrogate_key(deep)
    assert jsoncodec.has_surrogate_key(nested(5000, {"\ud800": 1}))
    assert jsoncodec.has_surrogate_key(nested(3000, {1: 1}))
    assert not jsoncodec._has_non_finite(deep)
    assert jsoncodec._has_non_finite(nested(5000, float("nan")))
    with pytest.raises(ValueError, match="levels deep"):
        jsoncodec.loads("[" * 5000 + "]" * 5000)
    with pytest.raises(jsoncodec.TooDeepError):
        jsoncodec.dumps(deep, max_depth=MAX_JSON_DEPTH)
    # Without a limit (a value read back, not entering), orjson's 255 levels still work.
    assert jsoncodec.loads(jsoncodec.dumps(nested(200))) == nested(200)


# -- appends and imports of values ----------------------------------------------------


async def test_an_append_nested_900_deep_is_invalid_input(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    before = await _rows(store)
    for depth in (MAX_JSON_DEPTH - 3, 300, 900, 5000):  # 4 levels around the arguments
        with pytest.raises(InvalidInputError, match=r"message 0 is nested more than 128"):
            await store.append(sid, call({"a": nested(depth)}))
    deep_content = {"role": "user", "content": [{"type": "blob", "v": nested(900)}]}
    with pytest.raises(InvalidInputError, match="nested more than 128"):
        await store.append(sid, [{"role": "user", "content": "ok"}, deep_content])
    assert await _rows(store) == before
    # At the limit exactly: stored, and read back equal.
    (record,) = await store.append(sid, call({"a": nested(MAX_JSON_DEPTH - 4)}))
    assert record.message is not None
    (back,) = await store.records(sid)
    assert back.message is not None
    assert back.message.to_wire() == call({"a": nested(MAX_JSON_DEPTH - 4)})


async def test_deep_values_are_refused_on_every_way_in(store: SessionStore) -> None:
    before = await _rows(store)
    with pytest.raises(InvalidInputError, match=r"^session 1: message 0 is nested more"):
        await store.import_sessions([{"messages": []}, {"messages": [call({"a": nested(600)})]}])
    with pytest.raises(InvalidInputError, match="metadata is nested more than 128"):
        await store.create_session(metadata={"a": nested(900)})
    with pytest.raises(InvalidInputError, match="metadata is nested more than 128"):
        await store.import_sessions([{"metadata": {"a": nested(200)}}])
    with pytest.raises(InvalidInputError, match="metadata is nested more than 128"):
        await store.session_for_key("k", metadata={"a": nested(2000)})
    assert await _rows(store) == before
    info = await store.create_session(metadata={"a": nested(MAX_JSON_DEPTH - 1)})
    assert (await store.get_session(info.id)).metadata == {"a": nested(MAX_JSON_DEPTH - 1)}


def test_provider_converters_refuse_deep_messages() -> None:
    deep = call({"a": nested(900)})
    answer = {"role": "toolResult", "toolCallId": "c1", "content": "ok"}
    for convert in (to_anthropic, to_openai_chat, to_openai_responses):
        with pytest.raises(InvalidInputError, match=r"messages\[0\].*nested more than 128"):
            convert([deep, answer])  # type: ignore[operator]
    ok = call({"a": nested(MAX_JSON_DEPTH - 4)})
    request = to_anthropic([ok, answer])
    assert request.messages[0]["content"][0]["input"] == {"a": nested(MAX_JSON_DEPTH - 4)}
    response = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n"}]}
    response["content"][0]["input"] = {"a": nested(2000)}
    with pytest.raises(InvalidInputError, match=r"^response is nested more than 128"):
        from_anthropic(response)
    # A model's arguments text too deep to parse is kept as text, as broken JSON is.
    chat = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "t",
                            "type": "function",
                            "function": {"name": "n", "arguments": "[" * 5000 + "]" * 5000},
                        }
                    ],
                }
            }
        ]
    }
    (message,) = from_openai_chat(chat)
    assert message.tool_calls()[0].arguments == {}


# -- file imports ---------------------------------------------------------------------


def _deep_line(stem: str, depth: int) -> str:
    line = {
        "type": "user",
        "uuid": f"{stem}-deep",
        "parentUuid": None,
        "sessionId": stem,
        "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "deep"}]},
        "toolUseResult": nested(depth),
    }
    return json.dumps(line)


@pytest.mark.parametrize("depth", [200, 600])
async def test_a_deep_claude_code_line_is_a_bad_line_and_its_session_imports(
    store: SessionStore, tmp_path: Path, depth: int
) -> None:
    # 200: orjson writes it (under 255), the bracket count finds it; 600: orjson refuses.
    # A Claude Code line stands alone: over the depth limit it is a bad line, as a line
    # over max_record_bytes is, and the session's other lines are imported.
    tree = claude_code_project(tmp_path / "proj", files=2, lines=4)
    deep_file = tree / "proj-001.jsonl"
    with deep_file.open("a") as out:
        out.write(_deep_line("proj-001", depth) + "\n")
    report = await store.import_path(tree)
    assert report.failures == [] and report.created == 2
    assert report.bad_line_count == 1
    assert [str(b) for b in report.bad_lines] == [
        f"{deep_file}:5: its record is nested more than 128 levels deep (arrays and objects)"
    ]
    assert await _rows(store) == (2, 9)
    deep_id = report.session_ids[1]
    records = await store.records(deep_id)
    assert [r.message.text() for r in records if r.message] == ["0", "1", "2", "3"]
    assert records[-1].kind == "entry"  # in the line's place: the seqs stay as counted
    assert records[-1].model_dump()["entry"]["skippedLine"] == 5


async def test_a_line_at_the_limit_imports_and_reads_back(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = claude_code_project(tmp_path / "proj", files=1, lines=2)
    with (tree / "proj-000.jsonl").open("a") as out:
        # The limit counts the value as stored: the message, its envelope, the line.
        out.write(_deep_line("proj-000", MAX_JSON_DEPTH - 3) + "\n")
    report = await store.import_path(tree)
    assert report.failures == [] and report.records == 3
    last = (await store.records(report.session_ids[0]))[-1].message
    assert last is not None and last.text() == "deep"
    wire = last.to_wire()
    assert jsoncodec.deeper_than(wire, MAX_JSON_DEPTH - 1)
    assert not jsoncodec.deeper_than(wire, MAX_JSON_DEPTH)


# -- session fields -------------------------------------------------------------------


async def test_huge_session_fields_are_refused_under_a_small_record_limit(
    small: SessionStore,
) -> None:
    huge = "n" * 80_000_000
    before = await _rows(small)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": huge}, f"name must be at most {MAX_NAME_CHARS} characters, got 80000000"),
        ({"model": huge}, f"model must be at most {MAX_MODEL_CHARS} characters"),
        (
            {"source": "cron", "cron_job_id": huge},
            f"cron_job_id must be at most {MAX_CRON_JOB_ID_CHARS} characters",
        ),
        (
            {"system_prompt_override": huge},
            f"system_prompt_override is 80000000 bytes as stored, over .* {SMALL}",
        ),
        ({"metadata": {"m": huge}}, f"metadata is 80000008 bytes as stored, over .* {SMALL}"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidInputError, match=message) as err:
            await small.create_session(**kwargs)
        assert len(str(err.value)) < 300  # the value is not copied into the message
        with pytest.raises(InvalidInputError, match=message):
            await small.session_for_key("k", **kwargs)
        with pytest.raises(InvalidInputError, match=f"^session 0: {message}"):
            await small.import_sessions([kwargs])
    assert await _rows(small) == before
    sid = (await small.create_session(name="ok")).id
    for rename in (small.rename(sid, "r" * (MAX_NAME_CHARS + 1)), small.fork(sid, name=huge)):
        with pytest.raises(InvalidInputError, match="name must be at most 1024 characters"):
            await rename
    assert (await small.get_session(sid)).name == "ok"
    await small.append(sid, {"role": "user", "content": "hi"})
    with pytest.raises(InvalidInputError, match=r"the tombstone is \d+ bytes as stored"):
        await small.pop(sid, reason="r" * SMALL)  # pop checked no size before
    assert len(await small.context(sid)) == 1
    # At the bounds: stored as given.
    info = await small.create_session(
        name="€" * MAX_NAME_CHARS,
        model="m" * MAX_MODEL_CHARS,
        source="cron",
        cron_job_id="c" * MAX_CRON_JOB_ID_CHARS,
        system_prompt_override="€" * (SMALL // 3),
    )
    assert await small.get_session(info.id) == info
    assert info.name == "€" * MAX_NAME_CHARS and info.model == "m" * MAX_MODEL_CHARS
    assert (await small.rename(sid, "r" * MAX_NAME_CHARS)).name == "r" * MAX_NAME_CHARS


async def test_metadata_just_under_and_just_over_the_limit(small: SessionStore) -> None:
    # {"m":"…"} is 8 bytes around the text.
    under = {"m": "x" * (SMALL - 8)}
    assert len(jsoncodec.dumps(under)) == SMALL
    info = await small.create_session(metadata=under)
    assert (await small.get_session(info.id)).metadata == under
    (sid,) = await small.import_sessions([{"metadata": under}])
    assert (await small.get_session(sid)).metadata == under
    over = {"m": "x" * (SMALL - 7)}
    before = await _rows(small)
    with pytest.raises(InvalidInputError, match=f"metadata is {SMALL + 1} bytes as stored"):
        await small.create_session(metadata=over)
    with pytest.raises(InvalidInputError, match=f"metadata is {SMALL + 1} bytes as stored"):
        await small.import_sessions([{"metadata": over}])
    assert await _rows(small) == before


async def test_an_imported_session_with_a_field_over_its_bound_is_a_failure(
    store: SessionStore, tmp_path: Path
) -> None:
    sid = (await store.create_session(name="fine")).id
    await store.append(sid, {"role": "user", "content": "hi"})
    other = (await store.create_session(name="other")).id
    await store.append(other, {"role": "user", "content": "there"})
    out = tmp_path / "out"
    (folder,) = {p.parent for p in await store.export_session(sid, out)}
    (kept,) = {p.parent for p in await store.export_session(other, out)}
    await store.delete_session(sid)
    await store.delete_session(other)
    meta_path = folder / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["name"] = "n" * (MAX_NAME_CHARS + 1)
    meta_path.write_text(json.dumps(meta))
    report = await store.import_path(out)
    (failure,) = report.failures
    assert failure.path == folder / "session.jsonl"
    assert f"name must be at most {MAX_NAME_CHARS} characters" in failure.reason
    assert report.created == 1
    (info,) = (await store.list_sessions()).items
    assert info.name == "other" and kept.exists()


# Each method and argument of SessionStore that takes a value from the caller.
ARGUMENTS: list[tuple[str, str, dict[str, Any]]] = [
    ("get_session", "session_id", {}),
    ("records", "session_id", {}),
    ("records", "kinds", {}),
    ("records", "from_seq", {}),
    ("context", "last", {}),
    ("context_json", "last", {}),
    ("append", "session_id", {"messages": []}),
    ("append", "messages", {}),
    ("append", "expected_seq", {"messages": []}),
    ("append_compaction", "first_kept_seq", {"summary": "s"}),
    ("append_compaction", "summary", {"first_kept_seq": 1}),
    ("append_compaction", "read_files", {"summary": "s", "first_kept_seq": 1}),
    ("append_prune", "seqs", {}),
    ("append_prune", "marker", {"seqs": [1]}),
    ("tombstone", "seq", {}),
    ("tombstone", "reason", {"seq": 1}),
    ("pop", "reason", {}),
    ("rename", "name", {}),
    ("fork", "at_seq", {}),
    ("fork", "name", {}),
    ("fork", "detach", {}),
    ("delete_session", "cascade", {}),
    ("list_sessions", "limit", {}),
    ("list_sessions", "cursor", {}),
    ("list_sessions", "source", {}),
    ("list_sessions", "parent_id", {}),
    ("create_session", "name", {}),
    ("create_session", "source", {}),
    ("create_session", "metadata", {}),
    ("session_for_key", "key", {}),
    ("import_sessions", "items", {}),
    ("import_sessions", "batch_records", {"items": []}),
]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("method", "argument", "others"), ARGUMENTS)
async def test_every_argument_may_be_deep_or_huge(
    small: SessionStore, method: str, argument: str, others: dict[str, Any]
) -> None:
    """A value 5,000 levels deep (``repr`` of it raises RecursionError) or of 10 MB is
    refused with a SessionDBError whose message stays short."""
    sid = (await small.create_session()).id
    await small.append(sid, {"role": "user", "content": "hi"})
    before = await _rows(small)
    for value in (nested(5000), [nested(5000)], "€" * 10_000_000, list(range(1_000_000))):
        kwargs = {**others, argument: value}
        args = () if method in ("list_sessions", "create_session", "import_sessions") else (sid,)
        if argument == "session_id":
            args, kwargs = (value,), others
        elif method == "session_for_key":
            args, kwargs = (value,), {}
        with pytest.raises(SessionDBError) as err:
            await getattr(small, method)(*args, **kwargs)
        assert len(str(err.value)) < 1000, (method, argument)
    assert await _rows(small) == before


async def test_a_summary_over_the_record_limit_is_the_summarizers_failure(
    small: SessionStore,
) -> None:
    from helpers.compaction import tool_turn
    from helpers.overlays import raw_records, session_with

    from sessiondb import CompactionSettings, SummarizerError
    from sessiondb.compaction import compact

    sid = await session_with(small, [m for n in range(1, 7) for m in tool_turn(n, 200)])
    before = await raw_records(small)

    async def wordy(system: str, prompt: str, max_tokens: int) -> str:
        return "word " * SMALL

    settings = CompactionSettings(
        keep_recent_tokens=300, context_window=4_000, reserve_tokens=1_000
    )
    # Not a ConflictError ("the session changed"): the summary is what was too big.
    with pytest.raises(SummarizerError, match=rf"too long a summary: .* over .* {SMALL}"):
        await compact(small, sid, wordy, settings)
    assert await raw_records(small) == before


async def test_deep_native_metadata_fails_its_session_and_the_rest_imports(
    store: SessionStore, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    folders = []
    for name in ("deep metadata", "unreadable metadata", "fine"):
        sid = (await store.create_session(name=name)).id
        await store.append(sid, {"role": "user", "content": name})
        (folder,) = {p.parent for p in await store.export_session(sid, out)}
        folders.append(folder)
        await store.delete_session(sid)
    meta = json.loads((folders[0] / "metadata.json").read_text())
    meta["metadata"] = {"a": nested(200)}
    (folders[0] / "metadata.json").write_text(json.dumps(meta))
    (folders[1] / "metadata.json").write_text("[" * 5000 + "]" * 5000)
    report = await store.import_path(out)
    failures = {f.path.parent if f.path.is_file() else f.path: f.reason for f in report.failures}
    assert set(failures) == {folders[0], folders[1]}, failures
    assert "metadata is nested more than 128 levels deep" in failures[folders[0]]
    assert failures[folders[1]].endswith("metadata.json:1: cannot read metadata: nested too deeply")
    assert report.created == 1
    (info,) = (await store.list_sessions()).items
    assert info.name == "fine"


def test_a_deep_signature_text_is_not_parsed_into_a_recursion_error() -> None:
    thinking = {"type": "thinking", "thinking": "t", "thinkingSignature": "{" * 5000}
    request = to_openai_responses(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [thinking]}]
    )
    assert request.input[0]["role"] == "user"
