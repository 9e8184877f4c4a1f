"""Codex CLI rollouts through the database, on every backend: round trips of the corpus
and of generated files, re-import, files no format reads, a compaction with a replacement
history, contexts for every provider, native round trips, forks, the CLI, hostile files."""

from __future__ import annotations

import io
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.codex import (
    CASES,
    FORK_ID,
    PARENT_ID,
    codex_tree,
    line,
    meta,
    new_lines,
    rollout_name,
)
from helpers.corpus import CODEX_FILES, CORPUS, need_corpus
from helpers.formats import json_lines
from helpers.sql import scalar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import SessionStore
from sessiondb.cli import main
from sessiondb.context import SUMMARY_PREFIX
from sessiondb.errors import InvalidInputError, SessionDBError
from sessiondb.formats.anthropic import to_anthropic
from sessiondb.formats.openai_chat import to_openai_chat
from sessiondb.formats.openai_responses import to_openai_responses
from sessiondb.transfer import export_all, export_session, import_path, session_id_for


async def counts(store: SessionStore) -> tuple[int, int]:
    sessions = await scalar(store, "SELECT count(*) FROM sessiondb_sessions")
    records = await scalar(store, "SELECT count(*) FROM sessiondb_records")
    return int(sessions), int(records)


def sid(store: SessionStore, session_id: str) -> str:
    return session_id_for(store.namespace, f"codex:{session_id}")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    need_corpus()
    root = tmp_path / "codex"
    shutil.copytree(CORPUS / "codex", root)
    return root


@pytest.mark.parametrize("case", sorted(CASES))
async def test_each_generated_rollout_round_trips_through_the_database(
    store: SessionStore, tmp_path: Path, case: str
) -> None:
    tree = codex_tree(tmp_path / "src")
    path = tree[case]
    if case == "fork":
        await import_path(store, tree["new"])  # its parent first
    report = await import_path(store, path)
    assert report.failures == [] and report.created == 1
    (out,) = await export_session(store, sid(store, CASES[case]), tmp_path / "out", format="codex")
    assert out.name == path.name
    assert json_lines(out) == json_lines(path)


@pytest.mark.parametrize("name", CODEX_FILES)
@pytest.mark.needs_corpus
async def test_each_corpus_rollout_round_trips_through_the_database(
    store: SessionStore, corpus: Path, tmp_path: Path, name: str
) -> None:
    path = corpus / name
    report = await import_path(store, path)
    assert report.failures == [] and report.bad_lines == [] and report.created == 1
    (session_id,) = report.session_ids
    (out,) = await export_session(store, session_id, tmp_path / "out", format="codex")
    assert out.name == name
    assert json_lines(out) == json_lines(path)
    # Its context feeds every provider: each tool result right after its call.
    context = [m.to_wire() for m in await store.context(session_id)]
    request = to_openai_responses(context)
    calls = [i["call_id"] for i in request.input if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in request.input if i.get("type") == "function_call_output"]
    assert outputs == calls and context
    to_anthropic(context)
    to_openai_chat(context)


@pytest.mark.needs_corpus
async def test_a_reimport_of_the_corpus_and_generated_files_adds_zero_rows(
    store: SessionStore, corpus: Path
) -> None:
    codex_tree(corpus / "generated")
    first = await import_path(store, corpus)
    assert first.failures == [] and first.skipped_paths == []
    assert first.created == len(CODEX_FILES) + len(CASES)
    rows = await counts(store)
    assert rows == (first.created, first.records) and first.records > 1100
    second = await import_path(store, corpus)
    assert (second.created, second.skipped, second.records) == (0, first.created, 0)
    assert await counts(store) == rows


async def test_a_file_no_format_reads_is_reported_not_passed_over(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = codex_tree(tmp_path / "sessions")
    odd = tree["new"].parent / "notes.jsonl"
    odd.write_text('{"hello": "world"}\n{"n": 1}\n')
    report = await import_path(store, tmp_path / "sessions")
    assert report.created == len(CASES) and report.failures == []
    assert [(p.path, "no format recognises it" in p.reason) for p in report.skipped_paths] == [
        (odd, True)
    ]
    # Given alone, the file is reported as well; nothing is written.
    before = await counts(store)
    alone = await import_path(store, odd)
    assert (alone.files, alone.created, [p.path for p in alone.skipped_paths]) == (0, 0, [odd])
    assert await counts(store) == before


async def test_a_compaction_with_a_replacement_history_gives_its_context(
    store: SessionStore, tmp_path: Path
) -> None:
    path = codex_tree(tmp_path)["compacted"]
    report = await import_path(store, path)
    (session_id,) = report.session_ids
    records = await store.records(session_id, include_tombstoned=True)
    (compaction,) = [r.compaction for r in records if r.compaction is not None]
    kept = next(r for r in records if r.seq == compaction.first_kept_seq)
    assert kept.message is not None and kept.message.text() == "be careful"
    context = await store.context(session_id)
    shown = [m.text() or ",".join(c.id for c in m.tool_calls()) for m in context]
    assert shown[0].startswith(SUMMARY_PREFIX) and "next: auth" in shown[0]
    assert shown[1:] == [
        "be careful",
        "second ask",
        "call_b",
        "b",
        "third ask",
        "third answer",
    ]
    to_openai_responses([m.to_wire() for m in context])
    # The tombstones are the reader's: the export leaves them out, line for line.
    (out,) = await export_session(store, session_id, tmp_path / "out", format="codex")
    assert json_lines(out) == json_lines(path)


async def test_native_export_and_import_give_identical_records(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = codex_tree(tmp_path / "src")
    report = await import_path(store, tmp_path / "src")
    assert report.created == len(CASES)
    before = {s: await store.records(s, include_tombstoned=True) for s in report.session_ids}
    contexts = {s: await store.context(s) for s in report.session_ids}
    await export_all(store, tmp_path / "native")
    for session_id in reversed(report.session_ids):
        await store.delete_session(session_id, cascade=True)
    again = await import_path(store, tmp_path / "native")
    assert again.failures == [] and again.created == len(CASES)
    for old, records in before.items():
        new = session_id_for(store.namespace, f"native:{old}")
        got = await store.records(new, include_tombstoned=True)
        assert [r.model_copy(update={"session_id": old}) for r in got] == records
        assert await store.context(new) == contexts[old]
    # And from native back to Codex: the same rollout.
    new = session_id_for(store.namespace, f"native:{sid(store, CASES['old'])}")
    (out,) = await export_session(store, new, tmp_path / "codex", format="codex")
    assert json_lines(out) == json_lines(tree["old"])


async def test_a_fork_links_to_its_parent_when_both_are_imported(
    store: SessionStore, tmp_path: Path
) -> None:
    day = tmp_path / "a"
    # The fork's file comes first in name order: it waits for its parent.
    fork = day / f"a-{rollout_name(FORK_ID)}"
    day.mkdir()
    fork.write_text(
        "".join(json.dumps(x) + "\n" for x in new_lines(FORK_ID, forked_from_id=PARENT_ID))
    )
    (day / f"b-{rollout_name(PARENT_ID)}").write_text(
        "".join(json.dumps(x) + "\n" for x in new_lines())
    )
    report = await import_path(store, day)
    assert report.failures == [] and report.created == 2
    info = await store.get_session(sid(store, FORK_ID))
    assert (info.parent_id, info.fork_seq) == (sid(store, PARENT_ID), 0)
    assert info.metadata is not None and info.metadata["codex"]["forkedFromId"] == PARENT_ID
    # Alone (its parent never imported), a fork is stored without the link.
    other = tmp_path / "b"
    other.mkdir()
    alone = other / rollout_name("0199ffff-0000-7000-8000-00000000000f")
    lines = new_lines("0199ffff-0000-7000-8000-00000000000f", forked_from_id="missing")
    alone.write_text("".join(json.dumps(x) + "\n" for x in lines))
    lone = await import_path(store, alone)
    assert lone.failures == [] and lone.created == 1
    info = await store.get_session(lone.session_ids[0])
    assert (info.parent_id, info.fork_seq) == (None, None)
    assert len(await store.records(info.id)) == len(lines)


def test_cli_export_format_codex(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = codex_tree(tmp_path / "src")
    odd = tmp_path / "src" / "notes.jsonl"
    odd.write_text('{"hello": "world"}\n')
    out = io.StringIO()
    assert main(["--db", db_url, "import", str(tmp_path / "src")], out=out) == 0
    assert f"created {len(CASES)}" in out.getvalue()
    assert f"skipped: {odd}: no format recognises it" in out.getvalue()
    session_id = session_id_for("default", f"codex:{CASES['new']}")
    code = main(
        ["--db", db_url, "export", session_id, "--out", str(tmp_path / "out"), "--format", "codex"],
        out=io.StringIO(),
    )
    assert code == 0
    assert json_lines(tmp_path / "out" / tree["new"].name) == json_lines(tree["new"])
    # The choices come from the registry.
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert "codex" in capsys.readouterr().out


# -- hostile files -------------------------------------------------------------------------

_names = itertools.count()
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "role", "content", "call_id", "output", "message", "id", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=8,
)
_line = st.one_of(
    st.binary(max_size=12),
    st.builds(
        lambda kind, payload: json.dumps(
            {"timestamp": "t", "type": kind, "payload": payload}
        ).encode(),
        st.sampled_from(["session_meta", "response_item", "event_msg", "compacted", "y"]),
        _json,
    ),
    st.sampled_from([json.dumps(x).encode() for x in new_lines()]),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(_line, max_size=6), strict=st.booleans())
async def test_hostile_rollouts_give_a_report_or_an_error_and_no_partial_rows(
    store: SessionStore, tmp_path: Path, lines: list[bytes], strict: bool
) -> None:
    n = next(_names)
    path = tmp_path / f"rollout-{n}.jsonl"
    head = line(0, "session_meta", meta(f"hostile-{n}", "0.125.0"))
    path.write_bytes(b"\n".join([json.dumps(head).encode(), *lines]))
    before = await counts(store)
    try:
        report = await import_path(store, path, format="codex", strict=strict)
    except SessionDBError:
        assert await counts(store) == before
        return
    after = await counts(store)
    assert after == (before[0] + report.created, before[1] + report.records)
    if report.failures:
        assert after == before
    for session_id in report.session_ids:
        context: list[Any] = [m.to_wire() for m in await store.context(session_id)]
        await store.records(session_id, include_tombstoned=True)
        try:
            to_openai_responses(context)
        except InvalidInputError as exc:  # a fuzzed block no API takes; never an orphan
            assert "answers no tool call" not in str(exc)
