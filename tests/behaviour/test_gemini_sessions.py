"""Gemini CLI chat recordings through the database, on every backend: each corpus file
and each generated file imports and exports back the same (JSON values line by line, or
the same document), a re-import adds nothing, native export and back gives identical
records, contexts pair every tool result with its call, the CLI exports the format,
and a fuzzed file imports whole or not at all."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from helpers.corpus import CORPUS, corpus_file, corpus_present
from helpers.gemini import (
    GEMINI_CASES,
    GEMINI_FILES,
    LINES,
    MAIN_ID,
    SUB_ID,
    GeminiCase,
    gemini_tree,
    header,
    same_file,
)
from helpers.sql import scalar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import SessionStore
from sessiondb.cli import main
from sessiondb.formats import read_path
from sessiondb.formats.anthropic import to_anthropic
from sessiondb.formats.openai_chat import to_openai_chat
from sessiondb.formats.openai_responses import to_openai_responses
from sessiondb.transfer import export_all, export_session, import_path, session_id_for


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, GeminiCase]]:
    """The generated ``chats`` tree, and the corpus's Gemini files beside it when the
    corpus is there."""
    root = tmp_path / "tree"
    cases = {c.case: c for c in gemini_tree(root)}
    if corpus_present():
        shutil.copytree(CORPUS / "gemini", root / "corpus")
    return root, cases


async def counts(store: SessionStore) -> tuple[int, int]:
    sessions = await scalar(store, "SELECT count(*) FROM sessiondb_sessions")
    records = await scalar(store, "SELECT count(*) FROM sessiondb_records")
    return int(sessions), int(records)


@pytest.mark.parametrize("name", GEMINI_FILES)
async def test_each_corpus_file_round_trips_through_the_database(
    store: SessionStore, name: str, tmp_path: Path
) -> None:
    path = corpus_file(Path("gemini") / name)
    report = await import_path(store, path)
    assert report.failures == [] and report.created == 1
    (session,) = read_path(path)
    sid = session_id_for(store.namespace, session.key)
    assert report.session_ids == [sid]
    records = await store.records(sid, include_tombstoned=True)
    assert sum(r.kind == "message" for r in records) >= 4
    (out,) = await export_session(store, sid, tmp_path / "out", format="gemini")
    assert same_file(out, path)


@pytest.mark.parametrize("case", GEMINI_CASES)
async def test_each_generated_file_round_trips_through_the_database(
    store: SessionStore, tree: tuple[Path, dict[str, GeminiCase]], case: str, tmp_path: Path
) -> None:
    c = tree[1][case]
    report = await import_path(store, c.source)
    assert report.failures == []
    sid = session_id_for(store.namespace, c.key)
    assert sid in report.session_ids
    written = await export_session(store, sid, tmp_path / "out", format="gemini")
    by_name = {str(p.relative_to(tmp_path / "out")): p for p in written}
    assert list(by_name) == [c.relative]
    assert same_file(by_name[c.relative], c.path)


async def test_a_subagent_is_a_child_session_and_a_reimport_adds_nothing(
    store: SessionStore, tree: tuple[Path, dict[str, GeminiCase]]
) -> None:
    root, _ = tree
    first = await import_path(store, root)
    assert first.failures == [] and first.bad_lines == []
    assert first.created == 4 + (len(GEMINI_FILES) if corpus_present() else 0)
    parent = session_id_for(store.namespace, f"gemini:{MAIN_ID}")
    child = await store.get_session(session_id_for(store.namespace, f"gemini:{SUB_ID}"))
    assert (child.parent_id, child.fork_seq) == (parent, 0)
    assert child.metadata is not None and child.metadata["gemini"]["dir"] == MAIN_ID
    before = await counts(store)
    again = await import_path(store, root)
    assert again.created == 0 and again.skipped == first.created and again.records == 0
    assert sorted(again.session_ids) == sorted(first.session_ids)
    assert await counts(store) == before


async def test_rewound_and_replaced_messages_leave_the_context(
    store: SessionStore, tree: tuple[Path, dict[str, GeminiCase]]
) -> None:
    _, cases = tree
    await import_path(store, cases["main"].source)
    await import_path(store, cases["resumed"].source)
    main_id = session_id_for(store.namespace, cases["main"].key)
    records = await store.records(main_id, include_tombstoned=True)
    live = await store.records(main_id)
    assert len(records) - len(live) == 3  # the three hidden (their tombstones stay)
    context = await store.context(main_id)
    users = [m.text() for m in context if m.role == "user"]
    assert users == ["list the files and fix a.py", "what is in this picture?"]
    assert [m.text() for m in context if m.role == "assistant"].count(
        "Listed; the edit failed."
    ) == 1
    info = await store.get_session(main_id)
    assert info.name == "Listing and fixing files"
    resumed = session_id_for(store.namespace, cases["resumed"].key)
    texts = [m.text() for m in await store.context(resumed)]
    assert texts == ["say hi", "Hi.", "again", "bye"]  # no checkpoint doubles a message


async def test_contexts_feed_the_provider_formats_with_every_result_paired(
    store: SessionStore, tree: tuple[Path, dict[str, GeminiCase]]
) -> None:
    root, _ = tree
    report = await import_path(store, root)
    assert report.failures == []
    for sid in report.session_ids:
        context = await store.context(sid)
        assert context, sid
        results = [m.tool_call_id for m in context if m.role == "toolResult"]
        calls = [c.id for m in context for c in m.tool_calls()]
        assert set(results) <= set(calls), sid
        to_openai_responses(context)
        request = to_anthropic(context)
        chat = to_openai_chat(context)
        chat_calls = {c["id"] for m in chat for c in m.get("tool_calls") or []}
        assert {m["tool_call_id"] for m in chat if m["role"] == "tool"} <= chat_calls
        assert request.messages
        # Gemini's own parts and unsigned thoughts go to no other API
        sent = [b for m in request.messages if isinstance(m["content"], list) for b in m["content"]]
        assert {b["type"] for b in sent} <= {"text", "image", "tool_use", "tool_result"}


async def test_native_export_then_import_gives_identical_records(
    store: SessionStore, tree: tuple[Path, dict[str, GeminiCase]], tmp_path: Path
) -> None:
    root, _ = tree
    report = await import_path(store, root)
    before = {sid: await store.records(sid, include_tombstoned=True) for sid in report.session_ids}
    infos = {sid: await store.get_session(sid) for sid in report.session_ids}
    written = await export_all(store, tmp_path / "native")
    assert sorted(written) == sorted(report.session_ids)
    for sid in reversed(report.session_ids):  # children first
        await store.delete_session(sid)
    assert await counts(store) == (0, 0)
    again = await import_path(store, tmp_path / "native")
    assert again.failures == [] and again.created == len(report.session_ids)
    for sid in report.session_ids:
        new_id = session_id_for(store.namespace, f"native:{sid}")
        records = await store.records(new_id, include_tombstoned=True)
        assert [r.model_copy(update={"session_id": sid}) for r in records] == before[sid]
        info = await store.get_session(new_id)
        assert (info.metadata, info.name, info.model) == (
            infos[sid].metadata,
            infos[sid].name,
            infos[sid].model,
        )
    # and from the native import, the Gemini files come back the same
    out = tmp_path / "gemini"
    for sid in report.session_ids:
        new_id = session_id_for(store.namespace, f"native:{sid}")
        await export_session(store, new_id, out, format="gemini")
    for _, case in tree[1].items():
        assert same_file(out / case.relative, case.path), case.case


async def test_export_all_writes_every_gemini_session_as_it_was_read(
    store: SessionStore, tree: tuple[Path, dict[str, GeminiCase]], tmp_path: Path
) -> None:
    root, cases = tree
    report = await import_path(store, root)
    written = await export_all(store, tmp_path / "bulk", "gemini")
    assert sorted(written) == sorted(report.session_ids)
    for case in cases.values():
        assert same_file(tmp_path / "bulk" / case.relative, case.path), case.case
    if corpus_present():
        for name in GEMINI_FILES:
            (session,) = read_path(CORPUS / "gemini" / name)
            (path,) = written[session_id_for(store.namespace, session.key)]
            assert same_file(path, CORPUS / "gemini" / name), name


def test_the_cli_exports_the_gemini_format(
    db_url: str, tree: tuple[Path, dict[str, GeminiCase]], tmp_path: Path
) -> None:
    case = tree[1]["main"]
    out = io.StringIO()
    assert main(["--db", db_url, "import", str(case.source)], out=out) == 0
    sid = session_id_for("default", case.key)
    code = main(
        ["--db", db_url, "export", sid, "--out", str(tmp_path / "out"), "--format", "gemini"],
        out=out,
    )
    assert code == 0, out.getvalue()
    assert same_file(tmp_path / "out" / case.relative, case.path)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_fuzzed_file_imports_whole_or_not_at_all(
    db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Whatever the lines, the import raises nothing; a session it writes holds every
    record the reader gives, and one it refuses leaves no row."""
    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, Any]], Any] = loop.run_until_complete
    store = run(SessionStore.connect(db_url))

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(lines=st.lists(LINES, max_size=6), strict=st.booleans())
    def check(lines: list[Any], strict: bool) -> None:
        folder = tmp_path_factory.mktemp("fuzz")
        path = folder / f"session-2026-01-01T00-00-{folder.name[-8:]}.jsonl"
        body = [header(f"fuzz-{folder.name}"), *lines]
        path.write_text("".join(json.dumps(x) + "\n" for x in body) + "not json\n")
        before = run(counts(store))
        report = run(store.import_path(path, strict=strict))
        after = run(counts(store))
        if report.failures:
            assert strict and after == before
            return
        (session,) = read_path(path)
        expected = sum(1 for _ in session.records)
        assert report.created == 1 and after == (before[0] + 1, before[1] + expected)

    try:
        check()
    finally:
        run(store.close())
        loop.close()
