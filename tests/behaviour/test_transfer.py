"""Import and export through the database, on every backend: round trips of the corpus,
idempotency, bad lines, atomic sessions, forks, the CLI."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.claude_code import assistant, cersei_parts, line, tool_result, tool_use
from helpers.claude_code import text as text_block
from helpers.claude_code import user as cc_user
from helpers.corpus import CLAUDE_FILES, CORPUS, PI_FILES, need_corpus
from helpers.formats import count_disk_maps, generated_tree, json_lines
from helpers.sql import execute, scalar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from sessiondb import SessionStore, transfer
from sessiondb.cli import main
from sessiondb.context import merge_split_responses
from sessiondb.errors import InvalidInputError, SessionDBError, SessionNotFoundError
from sessiondb.formats import FORMATS
from sessiondb.formats import noumen as formats_noumen
from sessiondb.formats import pi as formats_pi
from sessiondb.tables import sessions
from sessiondb.transfer import (
    ImportProgress,
    export_all,
    export_session,
    import_path,
    session_id_for,
)

CLAUDE = CORPUS / "claude-code"
SPOTTER_DIR = CLAUDE / "spotter"
SPOTTER = SPOTTER_DIR / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"


# The corpus folders of the formats sessiondb reads; codex/ and gemini/ wait for their
# readers (a Gemini CLI JSONL file sniffs as Claude Code lines today).
READ_FORMATS = ("claude-code", "pi")


def corpus_files() -> list[Path]:
    """The corpus files of :data:`READ_FORMATS` (paths only: a test that reads them is
    marked ``needs_corpus``)."""
    return sorted(
        [*(CLAUDE / name for name in CLAUDE_FILES), *(CORPUS / "pi" / name for name in PI_FILES)]
    )


@pytest.mark.needs_corpus
def test_the_corpus_holds_the_files_named_here() -> None:
    files = sorted(p for name in READ_FORMATS for p in (CORPUS / name).rglob("*.jsonl"))
    assert files == corpus_files()
    assert len(files) == 8, files


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree of the corpus folders of :data:`READ_FORMATS`, as one import reads it."""
    need_corpus()
    root = tmp_path_factory.mktemp("corpus")
    for name in READ_FORMATS:
        shutil.copytree(CORPUS / name, root / name)
    return root


@pytest.fixture(scope="module", params=["corpus", "generated"])
def tree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus tree, then a generated tree of every format (``helpers.formats``)."""
    if request.param == "corpus":
        return Path(request.getfixturevalue("corpus"))
    root = tmp_path_factory.mktemp("generated")
    generated_tree(root)
    return root


async def counts(store: SessionStore) -> tuple[int, int]:
    sessions = await scalar(store, "SELECT count(*) FROM sessiondb_sessions")
    records = await scalar(store, "SELECT count(*) FROM sessiondb_records")
    return int(sessions), int(records)


def cc_assistant(uuid: str, parent: str | None, text: str) -> str:
    return assistant(uuid, parent, [text_block(text)], f"m-{uuid}", usage=None)


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
@pytest.mark.needs_corpus
async def test_every_corpus_file_round_trips_through_the_database(
    store: SessionStore, path: Path, tmp_path: Path
) -> None:
    if "pi" in path.parts:
        source, fmt, key = path, "pi", None
    elif "subagents" in path.parts:
        source, fmt = path.parents[2] / f"{path.parents[1].name}.jsonl", "claude-code"
        key = f"claude-code:{source.stem}/{path.stem}"
    else:
        source, fmt, key = path, "claude-code", f"claude-code:{path.stem}"
    report = await import_path(store, source)
    assert report.failures == []
    session_id = report.session_ids[0] if key is None else session_id_for(store.namespace, key)
    assert session_id in report.session_ids
    (out,) = await export_session(store, session_id, tmp_path / "out", format=fmt)
    assert out.name == path.name
    assert json_lines(out) == json_lines(path)


@pytest.mark.parametrize("fmt", ["native", "claude-code", "pi", "noumen"])
async def test_export_all_reads_in_batches_and_writes_what_the_models_give(
    store: SessionStore, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """The bulk path (stored JSON, no models; sessions split over batches of 7 rows)
    writes the same lines as the writer fed the records a read gives."""
    report = await import_path(store, tree)
    assert report.failures == [] and len(report.session_ids) > 3
    empty = await store.create_session(name="nothing yet")
    parent = await store.create_session()
    await store.append(
        parent.id, [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    )
    fork = await store.fork(parent.id, at_seq=1)
    await store.append(fork.id, [{"role": "assistant", "content": "forked"}])
    monkeypatch.setattr(transfer.exporter, "EXPORT_BATCH", 7)
    written = await export_all(store, tmp_path / "bulk", fmt)
    ids = [*report.session_ids, empty.id, parent.id, fork.id]
    assert sorted(written) == sorted(ids)
    for sid in ids:
        info = await store.get_session(sid)
        records = await store.records(sid, include_tombstoned=True)
        expected = FORMATS[fmt].write(info, records, tmp_path / "models")
        got = written[sid]
        assert [p.name for p in got] == [p.name for p in expected]
        for a, b in zip(got, expected, strict=True):
            assert json_lines(a) == json_lines(b), (sid, a)


async def test_a_big_session_is_written_in_chunks_with_the_same_rows(
    store: SessionStore, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions over STREAM_CHARS are written chunk by chunk in one transaction: the
    same records and session rows as when held whole; a bad record late in a streamed
    session leaves nothing of it."""
    whole = await import_path(store, tree)
    expected = {}
    for sid in whole.session_ids:
        info = await store.get_session(sid)
        expected[sid] = (info, await store.records(sid, include_tombstoned=True))
    for sid in reversed(whole.session_ids):
        await store.delete_session(sid, cascade=True)
    assert await counts(store) == (0, 0)
    monkeypatch.setattr(transfer.importer, "STREAM_CHARS", 2_000)
    monkeypatch.setattr(transfer.importer, "STREAM_RECORDS", 5)
    monkeypatch.setattr(transfer.importer, "BATCH_RECORDS", 5)
    streamed = await import_path(store, tree)
    assert streamed.failures == [] and streamed.session_ids == whole.session_ids
    assert streamed.records == whole.records
    for sid, (info, records) in expected.items():
        got = (await store.get_session(sid)).model_dump()
        assert {k: v for k, v in got.items() if v != info.model_dump()[k]} == {}
        assert await store.records(sid, include_tombstoned=True) == records

    bad = tmp_path / "01JBADBADBADBADBADBADBADBA"
    bad.mkdir()
    (bad / "metadata.json").write_text(json.dumps({"id": bad.name}))
    lines = [
        line(recordType="message", seq=i + 1, recordUuid=f"u{i}", role="user", content="x" * 500)
        for i in range(40)
    ]
    lines.append(line(recordType="message", seq=41, recordUuid="u1", role="user", content="y"))
    (bad / "session.jsonl").write_text("\n".join(lines) + "\n")
    before = await counts(store)
    report = await import_path(store, bad, format="native")
    assert report.created == 0 and len(report.failures) == 1
    # Across chunks the table's unique key finds the repeat (no set of every uuid is kept).
    assert "the database refused the session" in str(report.failures[0])
    assert await counts(store) == before


@pytest.mark.needs_corpus
async def test_native_export_then_import_gives_identical_records(
    store: SessionStore, tmp_path: Path
) -> None:
    report = await import_path(store, SPOTTER_DIR)
    assert report.created == 5 and report.failures == []
    before = {sid: await store.records(sid, include_tombstoned=True) for sid in report.session_ids}
    infos = {sid: await store.get_session(sid) for sid in report.session_ids}
    written = await export_all(store, tmp_path / "native")
    assert sorted(written) == sorted(report.session_ids)

    # Children first: a subagent holds a reference to its parent.
    for sid in reversed(report.session_ids):
        await store.delete_session(sid)
    assert await counts(store) == (0, 0)

    again = await import_path(store, tmp_path / "native")
    assert again.failures == [] and again.bad_lines == []
    # A native file's id is hashed with the namespace (as every format's key is): the
    # sessions come back under new ids, keyed by their files' ids.
    new_id = {sid: session_id_for(store.namespace, f"native:{sid}") for sid in report.session_ids}
    assert sorted(again.session_ids) == sorted(new_id.values())
    assert again.created == 5
    for sid in report.session_ids:
        records = await store.records(new_id[sid], include_tombstoned=True)
        assert [r.model_copy(update={"session_id": sid}) for r in records] == before[sid]
        info = await store.get_session(new_id[sid])
        old = infos[sid]
        assert info.key == f"native:{sid}"
        assert (info.parent_id, info.fork_seq, info.metadata, info.name, info.model) == (
            new_id.get(old.parent_id or ""),
            old.fork_seq,
            old.metadata,
            old.name,
            old.model,
        )
        assert info.message_count == old.message_count
        assert info.metrics == old.metrics
    # Exported again, they are the same files, named by the files' ids.
    second = await export_all(store, tmp_path / "second")
    assert sorted(second) == sorted(new_id.values())
    for sid, paths in written.items():
        assert [p.relative_to(tmp_path / "native") for p in paths] == [
            p.relative_to(tmp_path / "second") for p in second[new_id[sid]]
        ]
        for a, b in zip(paths, second[new_id[sid]], strict=True):
            assert a.read_bytes() == b.read_bytes(), a


async def test_native_forks_import_after_their_parents(store: SessionStore, tmp_path: Path) -> None:
    parent = await store.create_session(name="parent")
    await store.append(
        parent.id,
        [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
    )
    child = await store.fork(parent.id, at_seq=1)
    await store.append(child.id, [{"role": "assistant", "content": "other two"}])
    await store.append(parent.id, [{"role": "user", "content": "three"}])
    await store.tombstone(child.id, 1)
    before = {s: await store.records(s, include_tombstoned=True) for s in (parent.id, child.id)}
    context = await store.context(child.id)
    await export_all(store, tmp_path / "out")
    await store.delete_session(parent.id, cascade=True)

    # Import the fork alone first: its parent is missing, so it is reported, not written.
    lone = await import_path(store, tmp_path / "out" / child.id)
    assert lone.created == 0 and len(lone.failures) == 1
    assert "parent" in str(lone.failures[0])
    assert await counts(store) == (0, 0)

    report = await import_path(store, tmp_path / "out")
    assert report.failures == [] and report.created == 2
    # Stored under ids hashed with the namespace; the child's parent is mapped the same way.
    new_id = {s: session_id_for(store.namespace, f"native:{s}") for s in (parent.id, child.id)}
    for sid, records in before.items():
        # A fork's records carry the id of the session of their lineage that holds them.
        got = await store.records(new_id[sid], include_tombstoned=True)
        back = {v: k for k, v in new_id.items()}
        assert [r.model_copy(update={"session_id": back[r.session_id]}) for r in got] == records
    info = await store.get_session(new_id[child.id])
    assert (info.parent_id, info.fork_seq, info.message_count) == (new_id[parent.id], 1, 2)
    assert await store.context(new_id[child.id]) == context


@pytest.mark.needs_corpus
async def test_a_reimport_adds_zero_rows(store: SessionStore, corpus: Path) -> None:
    first = await import_path(store, corpus)
    assert first.created == 8 and first.skipped == 0 and first.records > 2000
    assert first.failures == []
    rows = await counts(store)
    assert rows == (8, first.records)
    second = await import_path(store, corpus)
    assert (second.created, second.skipped, second.records) == (0, 8, 0)
    assert second.session_ids == first.session_ids
    assert await counts(store) == rows


@pytest.mark.needs_corpus
async def test_ids_are_stable_per_namespace_and_key(store: SessionStore) -> None:
    one = session_id_for("default", "claude-code:abc")
    assert one == session_id_for("default", "claude-code:abc")
    assert one != session_id_for("other", "claude-code:abc")
    assert one != session_id_for("default", "claude-code:abd")
    report = await import_path(store, SPOTTER_DIR / "short.jsonl")
    assert report.session_ids == [session_id_for(store.namespace, "claude-code:short")]
    assert (await store.get_session(report.session_ids[0])).id == report.session_ids[0]


# -- bad input -------------------------------------------------------------------------------


async def test_a_torn_last_line_is_ignored(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_text(cc_user("u1", None, "hi") + "\n" + cc_assistant("a1", "u1", "yo")[:40])
    report = await import_path(store, path)
    assert report.bad_lines == [] and report.failures == []
    assert report.records == 1
    (sid,) = report.session_ids
    records = await store.records(sid)
    assert [r.uuid for r in records] == ["u1"]


async def test_a_garbage_line_is_kept_and_reported_with_its_line_number(
    store: SessionStore, tmp_path: Path
) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_text(
        cc_user("u1", None, "hi") + "\n{not json at all\n" + cc_assistant("a1", "u1", "yo") + "\n"
    )
    report = await import_path(store, path)
    assert report.failures == []
    (bad,) = report.bad_lines
    assert bad.line == 2 and str(bad).startswith(f"{path}:2: ")
    (sid,) = report.session_ids
    records = await store.records(sid)
    assert [r.kind for r in records] == ["message", "entry", "message"]
    assert records[1].entry is not None and records[1].entry["rawLine"] == "{not json at all"
    (out,) = await export_session(store, sid, tmp_path / "out", "claude-code")
    assert json_lines(out) == json_lines(path)
    assert out.read_text().splitlines()[1] == "{not json at all"


async def test_strict_fails_the_file_and_imports_the_others(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "bad.jsonl").write_text(cc_user("u1", None, "hi") + "\n{oops\n")
    (tree / "good.jsonl").write_text(cc_user("u1", None, "hi") + "\n")
    report = await import_path(store, tree, strict=True)
    (failure,) = report.failures
    assert f"{tree / 'bad.jsonl'}:2:" in str(failure)
    assert report.session_ids == [session_id_for(store.namespace, "claude-code:good")]
    assert await counts(store) == (1, 1)


async def test_nul_and_lone_surrogates_survive(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"type":"user","uuid":"u\\u0000","parentUuid":null,"message":{"role":"user",'
        '"content":"a\\u0000b\\ud800c\\udfff"},"extra":"\\udc80"}\n'
    )
    report = await import_path(store, path, strict=True)
    (sid,) = report.session_ids
    (record,) = await store.records(sid)
    assert record.message is not None and record.message.text() == "a\x00b\ud800c\udfff"
    (out,) = await export_session(store, sid, tmp_path / "out", "claude-code")
    assert json_lines(out) == json_lines(path)


async def test_an_empty_file(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    detected = await import_path(store, path)
    assert (detected.files, detected.created, detected.session_ids) == (0, 0, [])
    report = await import_path(store, path, format="claude-code")
    assert (report.files, report.created, report.records) == (1, 1, 0)
    info = await store.get_session(report.session_ids[0])
    assert (info.last_seq, info.message_count) == (0, 0)
    (out,) = await export_session(store, info.id, tmp_path / "out", "claude-code")
    assert out.read_bytes() == b""


async def test_a_failing_session_leaves_nothing_partial(
    store: SessionStore, tmp_path: Path
) -> None:
    good = await store.create_session(name="good")
    await store.append(good.id, [{"role": "user", "content": "fine"}])
    bad = await store.create_session(name="bad")
    await store.append(bad.id, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    await export_all(store, tmp_path / "out")
    await store.delete_session(good.id)
    await store.delete_session(bad.id)
    # The reader takes a tombstone whose reason is a number; the store refuses it.
    with (tmp_path / "out" / bad.id / "session.jsonl").open("a") as f:
        f.write(
            line(
                recordType="tombstone",
                schemaVersion=1,
                seq=3,
                timestamp="2026-01-01T00:00:00Z",
                targetSeq=1,
                reason=5,
            )
            + "\n"
        )
    report = await import_path(store, tmp_path / "out")
    (failure,) = report.failures
    assert failure.key == f"native:{bad.id}" and "record 3 (seq 3)" in str(failure)
    assert str(tmp_path / "out" / bad.id) in str(failure)
    # Re-imported under ids hashed with the namespace and the files' ids.
    good_id = session_id_for(store.namespace, f"native:{good.id}")
    bad_id = session_id_for(store.namespace, f"native:{bad.id}")
    assert report.session_ids == [good_id] and report.created == 1
    for sid in (bad.id, bad_id):
        with pytest.raises(SessionNotFoundError):
            await store.get_session(sid)
        rows = await scalar(
            store, "SELECT count(*) FROM sessiondb_records WHERE session_id = :sid", sid=sid
        )
        assert rows == 0
    assert [r.message.text() for r in await store.records(good_id) if r.message] == ["fine"]


async def test_a_duplicate_record_uuid_refuses_the_session(
    store: SessionStore, tmp_path: Path
) -> None:
    info = await store.create_session()
    await store.append(info.id, [{"role": "user", "content": "a", "uuid": "x"}])
    (session_file, _) = await export_session(store, info.id, tmp_path)
    await store.delete_session(info.id)
    text = session_file.read_text()
    session_file.write_text(text + text.replace('"seq":1', '"seq":2'))
    report = await import_path(store, session_file.parent)
    assert "appears twice" in str(report.failures[0])
    assert await counts(store) == (0, 0)


async def test_unknown_format_and_missing_path_raise(store: SessionStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="unknown format"):
        await import_path(store, SPOTTER, format="nope")
    with pytest.raises(InvalidInputError, match="no such file"):
        await import_path(store, tmp_path / "missing.jsonl")
    with pytest.raises(InvalidInputError, match="unknown format"):
        await export_session(store, session_id_for("default", "x"), tmp_path, format="nope")


# -- formats through the database ----------------------------------------------------------


@pytest.mark.needs_corpus
async def test_a_directory_tree_mixing_formats(store: SessionStore, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(SPOTTER_DIR, tree / "claude")
    shutil.copytree(CORPUS / "pi", tree / "pi")
    native = await store.create_session(name="native one")
    await store.append(native.id, [{"role": "user", "content": "hello"}])
    await export_session(store, native.id, tree / "native")
    (tree / "notes.jsonl").write_text('{"hello": "world"}\n')
    (tree / "README.md").write_text("not a session\n")
    seen: list[ImportProgress] = []

    report = await import_path(store, tree, progress=seen.append)
    assert report.failures == []
    main_id = session_id_for(store.namespace, "claude-code:4d5611e5-241a-462a-8d15-5122611a9569")
    assert report.session_ids[0] == main_id
    assert len(report.session_ids) == 7
    assert native.id in report.session_ids
    assert (report.created, report.skipped) == (6, 1)  # the native session is this one
    assert report.files == 5
    assert [p.files_done for p in seen] == [1, 2, 3, 4, 5]
    assert seen[-1].records == report.records
    children = await store.list_sessions(parent_id=main_id)
    assert len(children.items) == 2
    assert {c.fork_seq for c in children.items} == {0}


async def test_cersei_parts_with_a_cross_part_tombstone(
    store: SessionStore, tmp_path: Path
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    cersei_parts(folder)
    report = await import_path(store, folder)
    (sid,) = report.session_ids
    assert report.records == 4
    live = await store.records(sid)
    assert [r.uuid for r in live if r.kind == "message"] == ["a1", "a3"]
    context = await store.context(sid)
    assert [m.text() for m in context] == ["fix the tests", "and the docs"]
    written = await export_session(store, sid, tmp_path / "out", "claude-code")
    assert sorted(p.name for p in written) == ["abc.jsonl", "abc_part2.jsonl"]
    for path in written:
        assert json_lines(path) == json_lines(folder / path.name)


async def test_pi_v1_compaction_by_first_kept_entry_index(
    store: SessionStore, tmp_path: Path
) -> None:
    def msg(role: str, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "timestamp": "2025-11-20T23:33:51Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        }

    lines = [
        {"type": "session", "id": "s1", "timestamp": "2025-11-20T23:33:50.805Z"},
        msg("user", "one"),
        msg("assistant", "two"),
        msg("user", "three"),
        {
            "type": "compaction",
            "timestamp": "2025-11-20T23:34:00Z",
            "summary": "S",
            "firstKeptEntryIndex": 3,
            "tokensBefore": 42,
        },
        msg("assistant", "four"),
    ]
    path = tmp_path / "v1.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines))
    report = await import_path(store, path, strict=True)
    (sid,) = report.session_ids
    records = await store.records(sid)
    compaction = records[3].compaction
    assert compaction is not None and compaction.first_kept_seq == 3
    context = await store.context(sid)
    assert [m.role for m in context] == ["user", "user", "assistant"]
    assert "S" in context[0].text()
    assert [m.text() for m in context[1:]] == ["three", "four"]
    (out,) = await export_session(store, sid, tmp_path / "out", "pi")
    assert json_lines(out) == json_lines(path)


@pytest.mark.needs_corpus
async def test_the_real_claude_code_session_context(store: SessionStore, tmp_path: Path) -> None:
    report = await import_path(store, SPOTTER)
    main_id = report.session_ids[0]
    info = await store.get_session(main_id)
    assert info.model is not None and info.model.startswith("claude")
    assert info.metrics.output_tokens > 0
    compactions = [r for r in await store.records(main_id) if r.compaction is not None]
    assert len(compactions) == 1
    context = await store.context(main_id)
    # The compaction is applied: its summary opens the context, nothing before it follows.
    assert "This session is being continued" in context[0].text()
    kept = compactions[0].compaction
    assert kept is not None
    live = [
        r
        for r in await store.records(main_id, include_superseded=False, kinds=["message"])
        if r.seq >= kept.first_kept_seq
    ]
    # The parts of a split response are one message in the context.
    assert len(live) + 1 > len(context) > len(live) // 2
    assert merge_split_responses([m.to_wire() for m in context]) == [m.to_wire() for m in context]
    responses = [(m.model_extra or {}).get("responseId") for m in context if m.role == "assistant"]
    assert len(responses) == len(set(responses))
    calls: set[str] = set()
    for i, message in enumerate(context):
        calls.update(call.id for call in message.tool_calls())
        if message.role == "toolResult":
            assert message.tool_call_id in calls
        if message.role == "assistant" and message.tool_calls():
            # Every call of the response is answered right after it, in order.
            ids = [call.id for call in message.tool_calls()]
            following = [m.tool_call_id for m in context[i + 1 : i + 1 + len(ids)]]
            assert following == ids
    assert json.loads(await store.context_json(main_id)) == [m.to_wire() for m in context]
    # Export is untouched by the merge: the file comes back line for line.
    (out,) = await export_session(store, main_id, tmp_path / "out", "claude-code")
    assert json_lines(out) == json_lines(SPOTTER)


def out_result(uuid: str, parent: str, call: str) -> str:
    """The result ``out <call>`` of the tool call ``call``."""
    return tool_result(uuid, parent, call, f"out {call}")


def split_response_file(path: Path) -> Path:
    """A response written as three lines sharing message.id, its tool results between."""

    def part(uuid: str, parent: str, block: dict[str, Any]) -> str:
        return assistant(
            uuid, parent, [block], "msg-1", usage={"input_tokens": 7, "output_tokens": 11}
        )

    lines = [
        cc_user("u1", None, "go"),
        part("a1", "u1", {"type": "text", "text": "looking"}),
        part("a2", "a1", tool_use("t1")),
        line(type="progress", uuid="p1", parentUuid="a2", data={}),
        out_result("r1", "a2", "t1"),
        part("a3", "r1", tool_use("t2")),
        out_result("r2", "a3", "t2"),
        cc_assistant("a4", "r2", "done"),
        cc_user("u2", "a4", "thanks"),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


#: The context of the split-response files: one assistant message for the three lines.
MERGED_SHAPE = [
    ("user", ["go"]),
    ("assistant", ["looking", "t1", "t2"]),
    ("toolResult", ["out t1"]),
    ("toolResult", ["out t2"]),
    ("assistant", ["done"]),
]


def shape(context: list[Any]) -> list[tuple[str, list[str]]]:
    """Each message as (role, [block text or call id]) for comparisons."""
    return [
        (
            m.role,
            [getattr(b, "text", None) or getattr(b, "id", None) for b in m.content],
        )
        for m in context
    ]


async def test_a_split_response_is_one_message_in_the_context(
    store: SessionStore, tmp_path: Path
) -> None:
    path = split_response_file(tmp_path / "split.jsonl")
    report = await import_path(store, path)
    (sid,) = report.session_ids
    messages = await store.records(sid, kinds=["message"])
    assert len(messages) == 8  # each line stays one record: nothing merged in storage
    context = await store.context(sid)
    assert shape(context) == [*MERGED_SHAPE, ("user", ["thanks"])]
    merged = context[1]
    assert merged.uuid == "a1" and (merged.model_extra or {}).get("responseId") == "msg-1"
    assert merged.usage is not None and (merged.usage.input, merged.usage.output) == (7, 11)
    info = await store.get_session(sid)
    assert (info.metrics.input_tokens, info.metrics.output_tokens) == (7, 11)  # counted once
    as_json = json.loads(await store.context_json(sid))
    assert as_json == [m.to_wire() for m in context]
    assert [b["id"] for b in as_json[1]["content"][1:]] == ["t1", "t2"]
    (out,) = await export_session(store, sid, tmp_path / "out", "claude-code")
    assert json_lines(out) == json_lines(path)


def rising_usage_file(path: Path) -> Path:
    """One response of text and two tool calls over three lines whose output count rises
    (4, 4, 90), its tool results between the parts, then a one-line response."""

    def part(uuid: str, parent: str, block: dict[str, Any], output: int, msg: str) -> str:
        usage = {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": output}
        return assistant(uuid, parent, [block], msg, usage=usage)

    lines = [
        cc_user("u1", None, "go"),
        part("a1", "u1", {"type": "text", "text": "looking"}, 4, "msg-1"),
        part("a2", "a1", tool_use("t1"), 4, "msg-1"),
        out_result("r1", "a2", "t1"),
        part("a3", "r1", tool_use("t2"), 90, "msg-1"),
        out_result("r2", "a3", "t2"),
        part("a4", "r2", {"type": "text", "text": "done"}, 7, "msg-2"),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_a_split_response_counts_its_last_usage_once(
    store: SessionStore, tmp_path: Path
) -> None:
    path = rising_usage_file(tmp_path / "rising.jsonl")
    (sid,) = (await import_path(store, path)).session_ids
    context = await store.context(sid)
    assert shape(context) == MERGED_SHAPE
    merged = context[1]
    assert merged.usage is not None
    assert (merged.usage.input, merged.usage.output, merged.usage.cache_read) == (5, 90, 100)
    as_json = json.loads(await store.context_json(sid))
    assert as_json == [m.to_wire() for m in context]
    assert as_json[1]["usage"] == {"input": 5, "output": 90, "cacheRead": 100, "cacheWrite": 0}
    # Totals: the sum over responses of their counted usage (90 + 7, not 4 + 7).
    metrics = (await store.get_session(sid)).metrics
    assert (metrics.input_tokens, metrics.output_tokens, metrics.cache_read_tokens) == (
        10,
        97,
        200,
    )
    (out,) = await export_session(store, sid, tmp_path / "out", "claude-code")
    assert json_lines(out) == json_lines(path)  # each line's own usage comes back


@pytest.mark.needs_corpus
async def test_a_real_split_response_session_totals_its_largest_usages(
    store: SessionStore, tmp_path: Path
) -> None:
    path = SPOTTER_DIR / "tool_heavy.jsonl"
    (sid,) = (await import_path(store, path)).session_ids
    totals = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0}
    largest: dict[str, dict[str, int]] = {}
    for value in json_lines(path):
        if value.get("type") == "assistant":
            usage = largest.setdefault(value["message"]["id"], dict.fromkeys(totals, 0))
            for name in totals:
                usage[name] = max(usage[name], value["message"]["usage"].get(name, 0))
    for usage in largest.values():
        for name in totals:
            totals[name] += usage[name]
    # msg_019BN3FRqb7NU4DgBN5jdsym's two parts report 25 then 173 output tokens.
    assert largest["msg_019BN3FRqb7NU4DgBN5jdsym"]["output_tokens"] == 173
    metrics = (await store.get_session(sid)).metrics
    assert (metrics.input_tokens, metrics.output_tokens, metrics.cache_read_tokens) == (
        totals["input_tokens"],
        totals["output_tokens"],
        totals["cache_read_input_tokens"],
    )
    context = await store.context(sid)
    responses = [m for m in context if m.role == "assistant"]
    assert [m.usage.output if m.usage else None for m in responses] == [
        largest[(m.model_extra or {})["responseId"]]["output_tokens"] for m in responses
    ]
    assert json.loads(await store.context_json(sid)) == [m.to_wire() for m in context]
    (out,) = await export_session(store, sid, tmp_path / "out", "claude-code")
    assert json_lines(out) == json_lines(path)


async def test_a_tombstoned_part_leaves_the_merged_response(
    store: SessionStore, tmp_path: Path
) -> None:
    path = split_response_file(tmp_path / "split.jsonl")
    (sid,) = (await import_path(store, path)).session_ids
    seqs = {r.uuid: r.seq for r in await store.records(sid)}
    # The part holding call t2 takes its result with it; the other parts still merge.
    written = await store.tombstone(sid, seqs["a3"])
    assert len(written) == 2
    context = await store.context(sid)
    assert shape(context) == [
        ("user", ["go"]),
        ("assistant", ["looking", "t1"]),
        ("toolResult", ["out t1"]),
        ("assistant", ["done"]),
        ("user", ["thanks"]),
    ]
    assert json.loads(await store.context_json(sid)) == [m.to_wire() for m in context]
    # Tombstoning the first part (which carries the usage) merges the rest.
    await store.tombstone(sid, seqs["a1"])
    context = await store.context(sid)
    assert shape(context)[1:3] == [("assistant", ["t1"]), ("toolResult", ["out t1"])]
    assert json.loads(await store.context_json(sid)) == [m.to_wire() for m in context]
    # Records and export keep every part.
    assert len(await store.records(sid, include_tombstoned=True, kinds=["message"])) == 8
    (out,) = await export_session(store, sid, tmp_path / "out", "claude-code")
    lines = json_lines(path)
    exported = json_lines(out)
    assert exported[: len(lines)] == lines  # then the tombstones, as cersei writes them
    assert [t["deleted_uuid"] for t in exported[len(lines) :]] == ["a3", "r2", "a1"]


async def test_a_pruned_result_inside_a_split_response(store: SessionStore, tmp_path: Path) -> None:
    path = split_response_file(tmp_path / "split.jsonl")
    (sid,) = (await import_path(store, path)).session_ids
    seqs = {r.uuid: r.seq for r in await store.records(sid)}
    await store.append_prune(sid, [seqs["r1"]], marker="[pruned]")
    context = await store.context(sid)
    assert shape(context)[1:4] == [
        ("assistant", ["looking", "t1", "t2"]),
        ("toolResult", ["[pruned]"]),
        ("toolResult", ["out t2"]),
    ]
    assert json.loads(await store.context_json(sid)) == [m.to_wire() for m in context]


# -- hostile input ---------------------------------------------------------------------------

_names = itertools.count()
_line = st.one_of(
    st.binary(max_size=60),
    st.builds(
        lambda v: json.dumps(v).encode(),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(
                        ["type", "uuid", "parentUuid", "message", "role", "content", "id", "x"]
                    ),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=8,
        ),
    ),
    st.sampled_from(
        [
            cc_user("u1", None, "hi").encode(),
            cc_assistant("a1", "u1", "yo").encode(),
            b'{"type":"session","version":1,"id":"p"}',
            b'{"recordType":"message","schemaVersion":1,"seq":1,"role":"user","content":[]}',
            b'{"type":"tombstone","deleted_uuid":"u1"}',
            b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result"}]}}',
        ]
    ),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(_line, max_size=6), strict=st.booleans())
async def test_hostile_files_give_a_report_or_an_error_and_no_partial_rows(
    store: SessionStore, tmp_path: Path, lines: list[bytes], strict: bool
) -> None:
    path = tmp_path / f"f{next(_names)}.jsonl"
    path.write_bytes(b"\n".join(lines))
    before = await counts(store)
    try:
        report = await import_path(store, path, strict=strict)
    except SessionDBError:
        assert await counts(store) == before
        return
    after = await counts(store)
    assert after == (before[0] + report.created, before[1] + report.records)
    for sid in report.session_ids:
        await store.context(sid)  # everything written reads back
        await store.records(sid, include_tombstoned=True)


# -- CLI -------------------------------------------------------------------------------------


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.mark.needs_corpus
def test_cli_import_and_export(db_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(SPOTTER_DIR, tree)
    (tree / "broken.jsonl").write_text(cc_user("u1", None, "hi") + "\n{oops\n")

    code, out = run("--db", db_url, "import", str(tree), "--strict")
    assert code == 1
    assert "broken.jsonl:2:" in out
    assert "created 5" in out

    code, out = run("--db", db_url, "import", str(tree))
    assert code == 0
    assert "created 1" in out and "skipped 5" in out

    main_id = session_id_for("default", "claude-code:short")
    code, out = run(
        "--db", db_url, "export", main_id, "--out", str(tmp_path / "cc"), "--format", "claude-code"
    )
    assert code == 0
    assert json_lines(tmp_path / "cc" / "short.jsonl") == json_lines(tree / "short.jsonl")

    code, out = run("--db", db_url, "export", "--all", "--out", str(tmp_path / "native"))
    assert code == 0
    assert len(list((tmp_path / "native").glob("*/session.jsonl"))) == 6

    with pytest.raises(SystemExit) as usage:
        run("--db", db_url, "export", "--out", str(tmp_path / "none"))
    assert usage.value.code == 2


# -- noumen ----------------------------------------------------------------------------------


async def test_noumen_round_trips_through_the_database(store: SessionStore, tmp_path: Path) -> None:
    from unit.test_formats_noumen import SID, sample

    source = tmp_path / "in" / f"{SID}.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps(x) + "\n" for x in sample()))
    report = await import_path(store, source)
    assert report.failures == [] and report.created == 1 and report.records == 14
    assert [str(b) for b in report.bad_lines] == [f"{source}:14: expected a JSON object, got list"]
    (sid,) = report.session_ids
    assert sid == session_id_for(store.namespace, f"noumen:{SID}")
    info = await store.get_session(sid)
    assert info.name == "Schema work"
    # The compaction is applied: the summary, then what follows the boundary.
    context = await store.context(sid)
    assert "We listed two files." in context[0].text()
    assert [m.role for m in context] == ["user", "user", "assistant"]
    (out,) = await export_session(store, sid, tmp_path / "out", format="noumen")
    assert out.name == source.name
    assert json_lines(out) == json_lines(source)
    again = await import_path(store, source)
    assert (again.created, again.skipped, again.records) == (0, 1, 0)


# -- a big file --------------------------------------------------------------------------------


async def test_a_20000_line_file_is_imported_without_loading_it_whole(
    store: SessionStore, tmp_path: Path
) -> None:
    big = conversation(tmp_path / "big.jsonl", 10_000, padding=400)
    small = conversation(tmp_path / "small.jsonl", 10_000, padding=0)
    size = big.stat().st_size
    assert size > 10_000_000

    # The pure read streams. A reader keeps a few dozen bytes a line (the uuid tree a
    # rewind needs), but no line's content: 8 MB more text in the same number of lines
    # must not raise the peak by more than a tenth of that (a whole read: 8 MB more).
    base, read_small = read_peak(small)
    peak, read = read_peak(big)
    assert read == read_small == 20_000
    assert peak - base < (size - small.stat().st_size) / 10, (peak, base, size)

    report = await import_path(store, big)
    assert report.failures == [] and report.bad_lines == []
    assert report.records == 20_000
    (sid,) = report.session_ids
    assert await scalar(store, "SELECT count(*) FROM sessiondb_records") == 20_000
    assert (await store.get_session(sid)).last_seq == 20_000


def conversation(path: Path, turns: int, padding: int) -> Path:
    """A Claude Code file of ``2 * turns`` lines, each with ``padding`` more characters."""
    fill = "x" * padding
    with path.open("w") as out:
        parent = None
        for i in range(turns):
            out.write(cc_user(f"u{i}", parent, f"question {i} {fill}") + "\n")
            out.write(cc_assistant(f"a{i}", f"u{i}", f"answer {i} {fill}") + "\n")
            parent = f"a{i}"
    return path


def read_peak(path: Path) -> tuple[int, int]:
    """The tracemalloc peak of reading every record of ``path``, and the records read."""
    import tracemalloc

    from sessiondb.formats import read_path

    tracemalloc.start()
    try:
        read = 0
        for session in read_path(path):
            for _ in session.records:
                read += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, read


async def test_a_prune_record_survives_the_native_round_trip(
    store: SessionStore, tmp_path: Path
) -> None:
    sid = (await store.create_session()).id
    await store.append(
        sid,
        [
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}],
            },
            {"role": "toolResult", "toolCallId": "c1", "content": [{"type": "text", "text": "x"}]},
            {"role": "assistant", "content": "done"},
        ],
    )
    await store.append_prune(sid, [3], marker="[pruned]")
    before = await store.records(sid, include_tombstoned=True)
    context = await store.context(sid)
    await export_session(store, sid, tmp_path, "native")
    await store.delete_session(sid)
    report = await import_path(store, tmp_path)
    new_id = session_id_for(store.namespace, f"native:{sid}")  # hashed with the namespace
    assert report.failures == [] and report.session_ids == [new_id]
    got = await store.records(new_id, include_tombstoned=True)
    assert [r.model_copy(update={"session_id": sid}) for r in got] == before
    assert await store.context(new_id) == context
    assert context[2].text() == "[pruned]"


# -- readers past their spill threshold ---------------------------------------------------------


@pytest.mark.parametrize("fmt", ["pi", "noumen"])
async def test_a_file_past_the_spill_threshold_imports_as_in_memory(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Read with its indexes moved to disk, a big file gives the session it gives read
    in memory (records, context, session row) and exports line for line."""
    if fmt == "pi":
        from unit.test_formats_pi import big_tree as generate

        reader: Any = formats_pi
    else:
        from unit.test_formats_noumen import SID
        from unit.test_formats_noumen import big_session as generate

        reader = formats_noumen
    (tmp_path / "in").mkdir()
    source = generate(tmp_path / "in" / ("big.jsonl" if fmt == "pi" else f"{SID}.jsonl"), 3_000)

    async def imported() -> tuple[Any, ...]:
        report = await store.import_path(source, format=fmt, strict=True)
        assert report.failures == [] and report.created == 1
        (sid,) = report.session_ids
        records = await store.records(sid, include_tombstoned=True)
        return sid, records, await store.context(sid), await store.get_session(sid)

    with monkeypatch.context() as spill:
        made = count_disk_maps(spill, reader, threshold=20)
        spilled = await imported()
        assert made  # the reader's indexes did move to disk
    sid, records, context, _ = spilled
    assert len(records) > 3_000 and len(context) > 100
    assert any(r.compaction is not None for r in records)
    if fmt == "pi":
        assert sum(r.tombstone is not None for r in records) > 1_000
    (out,) = await store.export_session(sid, tmp_path / "out", format=fmt)
    assert out.name == source.name
    assert json_lines(out) == json_lines(source)
    await store.delete_session(sid)
    assert await imported() == spilled


# -- tenants: native ids are scoped to the importing namespace ----------------------------------

# Names no path or id of a test holds, so a report naming one is seen.
ORIGIN, TENANT_A, TENANT_B = "origin-ns-5d2e", "alpha-ns-7f3a", "beta-ns-91c4"


async def native_pair(store: SessionStore, out: Path) -> tuple[str, str]:
    """A session and a fork of it past seq 1, written as native directories under ``out``;
    ``(parent id, fork id)``."""
    parent = await store.create_session(name="shared", metadata={"team": "x"})
    await store.append(
        parent.id,
        [
            {"role": "user", "content": "one", "uuid": "u1"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
        ],
    )
    fork = await store.fork(parent.id, at_seq=2, name="fork")
    await store.append(fork.id, [{"role": "user", "content": "other three"}])
    await store.tombstone(fork.id, 1)
    written = await export_all(store, out)
    assert sorted(written) == sorted([parent.id, fork.id])
    return parent.id, fork.id


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path; ``metadata.json`` without its
    ``namespace`` (which names the exporting store's)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "metadata.json":
                meta = json.loads(data)
                meta.pop("namespace")
                data = json.dumps(meta, sort_keys=True).encode()
            out[str(path.relative_to(root))] = data
    return out


def texts_of(*things: Any) -> str:
    return "\n".join(repr(t) + "\n" + str(t) for t in things)


async def test_one_native_file_imports_into_two_namespaces(db_url: str, tmp_path: Path) -> None:
    """The same native directories (a session and its fork) imported by two tenants, on
    a database where a third already holds their ids: each tenant gets its own sessions
    under its own ids, exports the files back as they were, re-imports them as a skip,
    and never sees another namespace's name."""
    src = tmp_path / "src"
    async with SessionStore.open(db_url, namespace=ORIGIN) as origin:
        parent_id, fork_id = await native_pair(origin, src)
        origin_context = await origin.context(fork_id)
        origin_records = {
            s: await origin.records(s, include_tombstoned=True) for s in (parent_id, fork_id)
        }
    files = tree_bytes(src)
    assert sorted(files) == sorted(
        f"{s}/{f}" for s in (parent_id, fork_id) for f in ("metadata.json", "session.jsonl")
    )
    stored: dict[str, dict[str, str]] = {}
    for ns, other in ((TENANT_A, TENANT_B), (TENANT_B, TENANT_A)):
        async with SessionStore.open(db_url, namespace=ns) as store:
            report = await import_path(store, src)
            assert report.failures == [] and (report.created, report.skipped) == (2, 0)
            ids = {s: session_id_for(ns, f"native:{s}") for s in (parent_id, fork_id)}
            assert sorted(report.session_ids) == sorted(ids.values())
            stored[ns] = ids
            fork = await store.get_session(ids[fork_id])
            assert (fork.parent_id, fork.fork_seq, fork.key) == (
                ids[parent_id],
                2,
                f"native:{fork_id}",
            )
            assert (await store.get_session(ids[parent_id])).key == f"native:{parent_id}"
            assert await store.context(ids[fork_id]) == origin_context
            for s, records in origin_records.items():
                got = await store.records(ids[s], include_tombstoned=True)
                back = {v: k for k, v in ids.items()}
                assert [
                    r.model_copy(update={"session_id": back[r.session_id]}) for r in got
                ] == records
            listed = await store.list_sessions()
            assert sorted(i.id for i in listed.items) == sorted(ids.values())
            # Exported, the files are the ones imported: the files' ids, same bytes.
            await export_all(store, tmp_path / f"out-{ns}")
            assert tree_bytes(tmp_path / f"out-{ns}") == files
            one = await export_session(store, ids[fork_id], tmp_path / f"one-{ns}")
            assert [p.parent.name for p in one] == [fork_id, fork_id]
            assert json.loads(one[1].read_text())["parentId"] == parent_id
            # Importing again is a skip, whether from the source or from the export.
            again = await import_path(store, src)
            assert (again.created, again.skipped, again.failures) == (0, 2, [])
            assert again.session_ids == report.session_ids
            back_in = await import_path(store, tmp_path / f"out-{ns}")
            assert (back_in.created, back_in.skipped, back_in.failures) == (0, 2, [])
            for text in (
                texts_of(report, again, back_in),
                json.dumps(tree_bytes(tmp_path / f"out-{ns}"), default=str),
            ):
                assert ORIGIN not in text and other not in text
    assert set(stored[TENANT_A].values()).isdisjoint(stored[TENANT_B].values())
    assert {parent_id, fork_id}.isdisjoint(stored[TENANT_A].values())
    async with SessionStore.open(db_url, namespace=ORIGIN) as origin:
        # The first owner of the ids is untouched and sees nothing of the tenants.
        listed = await origin.list_sessions()
        assert sorted(i.id for i in listed.items) == sorted([parent_id, fork_id])
        assert await origin.context(fork_id) == origin_context
        # Its own files back: the sessions it holds under those ids (a skip).
        report = await import_path(origin, src)
        assert (report.created, report.skipped, report.failures) == (0, 2, [])
        assert sorted(report.session_ids) == sorted([parent_id, fork_id])
    assert await counts_of(db_url) == 6


async def counts_of(db_url: str) -> int:
    async with SessionStore.open(db_url) as store:
        return int(await scalar(store, "SELECT count(*) FROM sessiondb_sessions"))


async def test_a_fork_file_imported_before_its_parent_in_two_namespaces(
    db_url: str, tmp_path: Path
) -> None:
    """A fork's directory alone waits for its parent in each namespace: the parent held
    by another namespace under the fork's ``parentId`` does not count (nor is named)."""
    src = tmp_path / "src"
    async with SessionStore.open(db_url, namespace=ORIGIN) as origin:
        parent_id, fork_id = await native_pair(origin, src)
    for ns in (TENANT_A, TENANT_B):
        async with SessionStore.open(db_url, namespace=ns) as store:
            lone = await import_path(store, src / fork_id)
            (failure,) = lone.failures
            assert lone.created == 0 and "parent" in str(failure)
            assert ORIGIN not in texts_of(lone, failure)
            await import_path(store, src / parent_id)
            report = await import_path(store, src / fork_id)
            assert report.failures == [] and report.created == 1
            fork = await store.get_session(session_id_for(ns, f"native:{fork_id}"))
            assert fork.parent_id == session_id_for(ns, f"native:{parent_id}")


async def test_an_id_another_namespace_holds_is_refused_without_naming_it(
    db_url: str, tmp_path: Path
) -> None:
    """A derived id another namespace holds (a session stored under a file's raw id
    before ids were scoped; made here by renaming a row) fails that one session with a
    message that names no namespace; the others are imported."""
    src = tmp_path / "src"
    async with SessionStore.open(db_url, namespace=ORIGIN) as origin:
        parent_id, fork_id = await native_pair(origin, src)
    taken = session_id_for(TENANT_A, f"native:{fork_id}")
    async with SessionStore.open(db_url, namespace=TENANT_B) as b:
        squatter = await b.create_session(name="old raw import")
        await execute(
            b, "UPDATE sessiondb_sessions SET id = :new WHERE id = :old", new=taken, old=squatter.id
        )
    async with SessionStore.open(db_url, namespace=TENANT_A) as a:
        report = await import_path(a, src)
        (failure,) = report.failures
        assert failure.key == f"native:{fork_id}" and "cannot be used" in str(failure)
        assert report.created == 1
        assert report.session_ids == [session_id_for(TENANT_A, f"native:{parent_id}")]
        assert TENANT_B not in texts_of(report, failure) and ORIGIN not in texts_of(report)


# -- times from files do not steer listing or retention ---------------------------------------

FAR = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


async def clock_past(at: datetime) -> None:
    """Wait until the clock reads later than ``at`` (no time is asserted)."""
    while datetime.now(UTC) <= at:
        await asyncio.sleep(0.001)


def far_native(folder: Path, sid: str) -> Path:
    """A native directory whose metadata and records are dated 9999-12-31."""
    folder.mkdir(parents=True)
    stamp = "9999-12-31T23:59:59.000Z"  # the form the native writer gives
    (folder / "metadata.json").write_text(json.dumps({"id": sid, "createdAt": stamp}))
    lines = [
        line(recordType="message", schemaVersion=1, seq=1, timestamp=stamp, role="user",
             content=[{"type": "text", "text": "hi"}]),
        line(recordType="message", schemaVersion=1, seq=2, timestamp=stamp, role="assistant",
             content=[{"type": "text", "text": "hello"}]),
    ]  # fmt: skip
    (folder / "session.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("fmt", ["claude-code", "native"])
async def test_a_file_dated_in_the_future_does_not_steer_listing_or_retention(
    store: SessionStore, tmp_path: Path, fmt: str
) -> None:
    """Sessions dated 9999-12-31 by their file: active as of when they were stored, for
    the listing and for prune; their records keep the file's times, and export writes
    them back as they were."""
    if fmt == "claude-code":
        source = tmp_path / "src" / "future.jsonl"
        source.parent.mkdir()
        stamp = '"timestamp": "9999-12-31T23:59:59Z"'
        text = cc_user("a", None, "hi") + "\n" + cc_assistant("b", "a", "hello") + "\n"
        source.write_text(text.replace('"timestamp": "2026-01-01T00:00:00.000Z"', stamp)
                          .replace('"timestamp": "2026-01-01T00:00:01.000Z"', stamp))  # fmt: skip
        assert source.read_text().count("9999-12-31T23:59:59Z") == 2
    else:
        source = far_native(
            tmp_path / "src" / "01JFAR0000000000000000000A", "01JFAR0000000000000000000A"
        )
    before = datetime.now(UTC)
    report = await import_path(store, source)
    after = datetime.now(UTC)
    assert report.failures == [] and report.created == 1
    (sid,) = report.session_ids
    info = await store.get_session(sid)
    assert info.last_message_at is not None and info.message_count == 2
    assert before <= info.created_at <= info.last_message_at <= after
    # The records keep the file's times, exactly.
    assert [r.created_at for r in await store.records(sid)] == [FAR, FAR]
    (out, *_) = await export_session(store, sid, tmp_path / "out", format=fmt)
    assert json_lines(out) == json_lines(
        source if fmt == "claude-code" else source / "session.jsonl"
    )

    # Listing: a session made after the import comes first (by last_message_at).
    await clock_past(info.last_message_at)
    newer = await store.create_session(name="newer")
    listed = await store.list_sessions()
    assert [i.id for i in listed.items] == [newer.id, sid]
    # Retention: idle since it was stored, it goes like any other.
    kept = await store.expire(older_than=timedelta(days=1))
    assert kept.deleted == []
    await clock_past(newer.created_at + timedelta(microseconds=1))
    gone = await store.expire(older_than=timedelta(microseconds=1))
    assert sorted(gone.deleted) == sorted([sid, newer.id])
    with pytest.raises(SessionNotFoundError):
        await store.get_session(sid)


async def test_a_fork_of_a_row_dated_ahead_is_dated_now(store: SessionStore) -> None:
    """A row dated ahead (as imports stored a file's dates before they were bounded):
    a fork at its head does not inherit the date."""
    parent = await store.create_session()
    await store.append(parent.id, [{"role": "user", "content": "hi"}])
    await execute(
        store, update(sessions).where(sessions.c.id == parent.id).values(last_message_at=FAR)
    )
    assert (await store.get_session(parent.id)).last_message_at == FAR
    before = datetime.now(UTC)
    child = await store.fork(parent.id)
    assert child.last_message_at is not None
    assert before <= child.last_message_at <= datetime.now(UTC)
