"""Gemini CLI chat recordings: detection, what each line becomes, ``$set`` and its
checkpoints, ``$rewindTo``, legacy documents, subagents, and round trips line by line."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.corpus import corpus_file
from helpers.formats import json_lines, stored, to_records
from helpers.gemini import (
    GEMINI_CASES,
    GEMINI_FILES,
    JSON_VALUES,
    LINES,
    MAIN_ID,
    RESUMED_ID,
    SUB_ID,
    GeminiCase,
    gemini,
    gemini_tree,
    header,
    legacy_document,
    legacy_lines,
    same_file,
    user,
    write_document,
    write_lines,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessiondb.errors import ImportFormatError, SessionDBError
from sessiondb.formats import FORMATS, detect, read_path
from sessiondb.formats.anthropic import to_anthropic
from sessiondb.formats.openai_chat import to_openai_chat
from sessiondb.formats.openai_responses import to_openai_responses
from sessiondb.models import Record

GEMINI = FORMATS["gemini"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, GeminiCase]]:
    root = tmp_path_factory.mktemp("gemini")
    made = gemini_tree(root)
    assert tuple(c.case for c in made) == GEMINI_CASES
    return root, {c.case: c for c in made}


def read_case(case: GeminiCase) -> tuple[Any, list[Record]]:
    (session,) = [s for s in read_path(case.source) if s.key == case.key]
    return stored(session)


def live_messages(records: list[Record]) -> list[dict[str, Any]]:
    """The messages a context shows: those no tombstone names, in order."""
    hidden = {r.tombstone.target_seq for r in records if r.tombstone is not None}
    return [r.message.to_wire() for r in records if r.message is not None and r.seq not in hidden]


# -- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("case", GEMINI_CASES)
def test_each_generated_file_round_trips(
    tree: tuple[Path, dict[str, GeminiCase]], case: str, tmp_path: Path
) -> None:
    c = tree[1][case]
    assert detect(c.path) is GEMINI
    info, records = read_case(c)
    written = GEMINI.write(info, records, tmp_path)
    by_name = {str(p.relative_to(tmp_path)): p for p in written}
    assert list(by_name) == [c.relative]
    assert same_file(by_name[c.relative], c.path)


@pytest.mark.parametrize("name", GEMINI_FILES)
def test_each_corpus_file_is_gemini_and_round_trips(name: str, tmp_path: Path) -> None:
    path = corpus_file(Path("gemini") / name)
    assert detect(path) is GEMINI
    assert not FORMATS["claude-code"].sniff(path) and not FORMATS["noumen"].sniff(path)
    (session,) = read_path(path)
    info, records = stored(session)
    assert session.bad_lines == []
    assert sum(r.kind == "message" for r in records) >= 4
    (out,) = GEMINI.write(info, records, tmp_path)
    assert out.name == name.split("__", 1)[1] or out.name == name
    assert same_file(out, path)
    if path.suffix == ".jsonl":
        assert out.read_bytes().endswith(b"\n")
    else:
        assert not out.read_bytes().endswith(b"\n")  # as the CLI writes it


def test_the_tree_reads_each_session_once_a_subagent_under_its_parent(
    tree: tuple[Path, dict[str, GeminiCase]],
) -> None:
    root, _ = tree
    sessions = list(read_path(root))
    assert [(s.key, s.parent_key, s.fork_seq) for s in sessions] == [
        (f"gemini:{MAIN_ID}", None, None),
        (f"gemini:{SUB_ID}", f"gemini:{MAIN_ID}", 0),
        (f"gemini:{RESUMED_ID}", None, None),
        ("gemini:gen0003c-0000-4000-8000-000000000003", None, None),
    ]
    for s in sessions:
        assert sum(1 for _ in s.records) > 0


# -- what the lines become -------------------------------------------------------------


def test_messages_tool_calls_thoughts_usage_and_entries(
    tree: tuple[Path, dict[str, GeminiCase]],
) -> None:
    info, records = read_case(tree[1]["main"])
    assert info.name == "Listing and fixing files" and info.model == "gemini-2.5-pro"
    session = info.metadata["gemini"]["session"]
    assert session["lastUpdated"] == "2026-03-01T10:00:11.000Z"
    assert session["memoryScratchpad"] == {"version": 1}
    assert info.metadata["gemini"]["header"] == header(MAIN_ID)
    by_uuid = {r.uuid: r for r in records if r.uuid}
    g1 = by_uuid["g1"].message
    assert g1 is not None and g1.role == "assistant"
    wire = g1.to_wire()
    assert wire["content"][0] == {
        "type": "thinking",
        "thinking": "I should list them.",
        "subject": "Listing",
        "timestamp": "2026-03-01T10:00:02.000Z",
    }
    assert [(c.id, c.name, c.arguments) for c in g1.tool_calls()] == [
        ("ls-1", "list_directory", {"path": "."}),
        ("edit-1", "replace", {"file_path": "a.py"}),
    ]
    assert wire["usage"] == {
        "input": 60,
        "output": 20,
        "cacheRead": 40,
        "cacheWrite": 0,
        "totalTokens": 120,
    }
    ok, failed = (records[by_uuid["g1"].seq].message, records[by_uuid["g1"].seq + 1].message)
    assert ok is not None and failed is not None
    assert (ok.role, ok.tool_call_id, ok.is_error, ok.text()) == (
        "toolResult",
        "ls-1",
        False,
        "a.py\nb.py",
    )
    assert (failed.tool_call_id, failed.is_error, failed.text()) == (
        "edit-1",
        True,
        "0 occurrences",
    )
    # status and error stay with the call, for the line to come back
    kept = wire["gemini"]["calls"][1]
    assert kept["status"] == "error" and kept["error"] == "0 occurrences (no edits made)"
    assert kept["unknownField"] == {"kept": [1, 2]}
    entries = [r.entry for r in records if r.entry is not None]
    assert [e["line"].get("type") for e in entries if "id" in e["line"]] == ["info", "warning"]
    assert all(e["format"] == "gemini" for e in entries)


def test_a_rewind_and_an_update_hide_messages_with_appended_tombstones(
    tree: tuple[Path, dict[str, GeminiCase]],
) -> None:
    _, records = read_case(tree[1]["main"])
    by_uuid = {r.uuid: r for r in records if r.uuid}
    tombstones = {r.tombstone.target_seq: r for r in records if r.tombstone is not None}
    # g2 was written twice: the first version is hidden by the second
    first_g2 = by_uuid["g2"].seq
    assert records[first_g2].message is not None and records[first_g2].uuid is None
    assert first_g2 in tombstones and tombstones[first_g2].seq > first_g2 + 1
    # $rewindTo u2: u2 and what follows it leave the history, nothing is deleted
    rewind = next(r for r in records if r.entry and "$rewindTo" in r.entry["line"])
    assert {by_uuid["u2"].seq, by_uuid["g3"].seq} <= set(tombstones)
    assert all(tombstones[s].seq > rewind.seq for s in (by_uuid["u2"].seq, by_uuid["g3"].seq))
    assert tombstones[by_uuid["u2"].seq].tombstone.to_wire()["gemini"] == {"synthetic": True}  # type: ignore[union-attr]
    texts = [m["content"][-1].get("text") for m in live_messages(records) if m["role"] == "user"]
    assert texts[0] == "list the files and fix a.py"
    assert "try the edit again" not in texts
    assert len(tombstones) == 3


def test_a_rewind_to_an_unknown_id_clears_the_history(tmp_path: Path) -> None:
    lines = [
        header("r"),
        user("a", 1, "one"),
        gemini("b", 2, "two"),
        {"$rewindTo": "nowhere"},
        user("c", 3, "three"),
    ]
    path = write_lines(tmp_path / "session-2026-01-01T00-00-r.jsonl", lines)
    (session,) = read_path(path)
    info, records = stored(session)
    assert [m["content"][0]["text"] for m in live_messages(records)] == ["three"]
    (out,) = GEMINI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_a_checkpoint_adds_only_what_it_changes(tree: tuple[Path, dict[str, GeminiCase]]) -> None:
    _, records = read_case(tree[1]["resumed"])
    messages = [r for r in records if r.message is not None]
    assert [r.uuid for r in messages] == ["a", "b", "c", "d", "e"]  # each message once
    c = next(r for r in messages if r.uuid == "c")
    assert c.message is not None and c.message.to_wire()["gemini"]["checkpoint"] is True
    # the second checkpoint leaves d out: it leaves the history
    d = next(r for r in messages if r.uuid == "d")
    assert [r.tombstone.target_seq for r in records if r.tombstone] == [d.seq]
    assert [m["content"][-1]["text"] for m in live_messages(records)] == [
        "say hi",
        "Hi.",
        "again",
        "bye",
    ]


def test_a_checkpoint_with_a_changed_message_replaces_it(tmp_path: Path) -> None:
    a, b = user("a", 1, "one"), gemini("b", 2, "two")
    changed = {**b, "content": "two, edited"}
    lines = [header("k"), a, b, {"$set": {"messages": [a, changed]}}]
    path = write_lines(tmp_path / "session-2026-01-01T00-00-k.jsonl", lines)
    (session,) = read_path(path)
    info, records = stored(session)
    assert [m["content"][0]["text"] for m in live_messages(records)] == ["one", "two, edited"]
    (out,) = GEMINI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_a_legacy_document_reads_to_the_records_of_its_jsonl_form(tmp_path: Path) -> None:
    document = write_document(
        tmp_path / "a" / "session-2026-03-03T10-00-gen0003c.json", legacy_document()
    )
    jsonl = write_lines(tmp_path / "b" / "session-2026-03-03T10-00-gen0003c.jsonl", legacy_lines())
    (from_json,) = read_path(document)
    (from_jsonl,) = read_path(jsonl)
    assert from_json.key == from_jsonl.key
    info_json, records_json = stored(from_json)
    info_jsonl, records_jsonl = stored(from_jsonl)
    assert records_json == records_jsonl
    assert (info_json.name, info_json.model, info_json.created_at) == (
        info_jsonl.name,
        info_jsonl.model,
        info_jsonl.created_at,
    )
    meta_json, meta_jsonl = info_json.metadata["gemini"], info_jsonl.metadata["gemini"]
    assert meta_json["form"] == "json" and "form" not in meta_jsonl
    assert meta_json["header"] == meta_jsonl["header"]
    # each exports to its own form
    (out_json,) = GEMINI.write(info_json, records_json, tmp_path / "out")
    (out_jsonl,) = GEMINI.write(info_jsonl, records_jsonl, tmp_path / "out")
    assert json.loads(out_json.read_text()) == legacy_document()
    assert list(json.loads(out_json.read_text())) == list(legacy_document())  # key order
    assert json_lines(out_jsonl) == legacy_lines()


def test_a_document_that_is_not_json_is_a_bad_line_kept_as_text(tmp_path: Path) -> None:
    path = tmp_path / "session-2026-01-01T00-00-x.json"
    path.write_text('{"sessionId": "x", "projectHash": "p", "messages": [')
    assert detect(path) is GEMINI
    (session,) = read_path(path)
    info, records = stored(session)
    assert [r.kind for r in records] == ["entry"] and session.bad_lines[0].line == 1
    (out,) = GEMINI.write(info, records, tmp_path / "out")
    assert out.read_text() == path.read_text()
    (strict,) = read_path(path, strict=True)
    with pytest.raises(ImportFormatError, match=r"session-2026-01-01T00-00-x\.json:1"):
        list(strict.records)


def test_detection(tmp_path: Path) -> None:
    only_header = write_lines(tmp_path / "h.jsonl", [header("h")])
    update_first = write_lines(tmp_path / "u.jsonl", [{"$set": {"lastUpdated": "x"}}])
    no_header = write_lines(tmp_path / "n.jsonl", [user("a", 1, "hi"), gemini("b", 2, "yo")])
    claude = write_lines(
        tmp_path / "c.jsonl",
        [
            {
                "type": "user",
                "uuid": "u",
                "sessionId": "s",
                "message": {"role": "user", "content": "x"},
            }
        ],
    )
    package = tmp_path / "package.json"
    package.write_text(json.dumps({"name": "x", "version": "1.0.0"}))
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**header("big"), "messages": [user("a", 1, "x" * 100_000)]}))
    assert detect(only_header) is GEMINI
    assert detect(update_first) is GEMINI
    assert detect(no_header) is GEMINI
    assert detect(claude) is FORMATS["claude-code"]
    assert detect(package) is None
    assert detect(big) is GEMINI
    # a tree reads .json files no format claims as nothing
    assert [s.key for s in read_path(tmp_path) if s.key.startswith("gemini:big")] == ["gemini:big"]


def test_a_session_stored_elsewhere_exports_as_gemini_lines(tmp_path: Path) -> None:
    call = {"type": "toolCall", "id": "c1", "name": "ls", "arguments": {"d": "."}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "list"}]},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hmm"}, call],
            "usage": {"input": 3, "output": 2, "cacheRead": 1, "cacheWrite": 0},
        },
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "content": [{"type": "text", "text": "denied"}],
            "isError": True,
        },
        {"role": "assistant", "content": [{"type": "text", "text": "It failed."}]},
    ]
    from sessiondb.formats import ImportedRecord

    records = to_records(
        [ImportedRecord("message", m) for m in messages], "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"
    )
    info, _ = stored(next(iter(read_path(write_lines(tmp_path / "h.jsonl", [header("h")])))))
    info = info.model_copy(update={"metadata": None})
    (out,) = GEMINI.write(info, records, tmp_path / "out")
    lines = json_lines(out)
    assert lines[0]["sessionId"] == info.id
    assert [x["type"] for x in lines[1:]] == ["user", "gemini", "gemini"]
    call_line = lines[2]["toolCalls"][0]
    assert call_line["status"] == "error"
    assert call_line["result"][0]["functionResponse"]["response"] == {"error": "denied"}
    assert lines[2]["thoughts"] == [{"description": "hmm"}]
    assert lines[2]["tokens"]["input"] == 4 and lines[2]["tokens"]["cached"] == 1
    (again,) = read_path(out)
    _, back = stored(again)
    assert [m["role"] for m in live_messages(back)] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]
    assert live_messages(back)[2]["isError"] is True


def test_contexts_pair_every_tool_result_with_its_call(
    tree: tuple[Path, dict[str, GeminiCase]],
) -> None:
    for case in tree[1].values():
        _, records = read_case(case)
        context = live_messages(records)
        to_openai_responses(context)
        to_anthropic(context)
        chat = to_openai_chat(context)
        calls = {c["id"] for m in chat for c in m.get("tool_calls") or []}
        assert {m["tool_call_id"] for m in chat if m["role"] == "tool"} <= calls, case.case


# -- fuzz ------------------------------------------------------------------------------

_json, _line = JSON_VALUES, LINES


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_line, max_size=6), tail=st.sampled_from(["", '{"x', "\x00\n"]))
@example(
    lines=[{"id": "a", "type": "gemini", "toolCalls": [{"id": "a", "name": "ls", "args": {}}]}],
    tail="",
)
def test_fuzzed_files_round_trip_or_report(tmp_path: Path, lines: list[Any], tail: str) -> None:
    path = tmp_path / "session-2026-01-01T00-00-fuzz.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [header("fuzz"), *lines]) + tail)
    (session,) = read_path(path, format="gemini")
    info, records = stored(session)
    (out,) = GEMINI.write(info, records, tmp_path / "out")
    assert json_lines(out) == [x for x in json_lines(path) if x != ("not json", b'{"x')]
    hidden = {r.tombstone.target_seq for r in records if r.tombstone is not None}
    assert all(records[s - 1].message is not None for s in hidden)
    assert len(hidden) == sum(r.tombstone is not None for r in records)  # each hidden once
    # a strict read raises only a typed error
    (strict,) = read_path(path, format="gemini", strict=True)
    with contextlib.suppress(SessionDBError):
        list(strict.records)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    document=st.one_of(
        _json,
        st.fixed_dictionaries(
            {"sessionId": st.text(max_size=6), "projectHash": st.text(max_size=6)},
            optional={"messages": st.one_of(st.lists(_line, max_size=4), _json)},
        ),
    )
)
def test_fuzzed_documents_round_trip_or_report(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "session-2026-01-01T00-00-fuzz.json"
    path.write_text(json.dumps(document, indent=2))
    try:
        (session,) = read_path(path, format="gemini")
        info, records = stored(session)
    except SessionDBError:
        return
    (out,) = GEMINI.write(info, records, tmp_path / "out")
    assert json.loads(out.read_text()) == document
