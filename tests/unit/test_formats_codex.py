"""Codex CLI rollout files: detection, Responses items as messages, usage, compaction with
a replacement history, the writer, and fuzzed files; generated files and the corpus's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.codex import (
    CASES,
    FORK_ID,
    PARENT_ID,
    codex_tree,
    compaction_lines,
    item,
    line,
    new_lines,
    old_lines,
    token_count,
    write_lines,
)
from helpers.corpus import CODEX_FILES, corpus_file
from helpers.formats import (
    claude_code_lines,
    count_disk_maps,
    json_lines,
    noumen_lines,
    pi_lines,
    stored,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessiondb.errors import ImportFormatError, InvalidInputError
from sessiondb.formats import FORMATS, SkippedPath, codex, detect, read_path
from sessiondb.formats.anthropic import to_anthropic
from sessiondb.formats.openai_chat import to_openai_chat
from sessiondb.formats.openai_responses import to_openai_responses
from sessiondb.models import Record

CODEX = FORMATS["codex"]


def round_trip(path: Path, out: Path) -> tuple[list[Record], Path]:
    (session,) = list(read_path(path))
    info, records = stored(session)
    (written,) = CODEX.write(info, records, out)
    return records, written


def wire(records: list[Record]) -> list[dict[str, Any]]:
    return [r.message.to_wire() for r in records if r.message is not None]


def by_line(records: list[Record], path: Path) -> dict[int, Record]:
    """The record of each line of ``path`` (one record a line, the extra ones last)."""
    return dict(enumerate(records[: len(json_lines(path))]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_generated_rollout_round_trips_line_by_line(tmp_path: Path, case: str) -> None:
    path = codex_tree(tmp_path / "src")[case]
    assert detect(path) is CODEX
    records, out = round_trip(path, tmp_path / "out")
    assert out.name == path.name
    assert json_lines(out) == json_lines(path)
    assert any(r.kind == "message" for r in records)


@pytest.mark.parametrize("name", CODEX_FILES)
def test_each_corpus_rollout_round_trips_and_feeds_every_provider(
    tmp_path: Path, name: str
) -> None:
    path = corpus_file(f"codex/{name}")
    assert detect(path) is CODEX
    (session,) = list(read_path(path))
    info, records = stored(session)
    assert session.bad_lines == []
    (out,) = CODEX.write(info, records, tmp_path)
    assert out.name == name
    assert json_lines(out) == json_lines(path)
    # Every response_item line the reader knows is a message (none fell back to an entry).
    for record in records:
        if record.kind == "entry":
            assert record.entry is not None
            kept = record.entry["line"]
            assert kept.get("type") != "response_item", kept
    messages = wire(records)
    assert messages
    to_openai_responses(messages)
    to_anthropic(messages)
    to_openai_chat(messages)
    # Usage: each response once, so the messages sum to the file's last running total.
    totals = [
        v["payload"]["info"]["total_token_usage"]["output_tokens"]
        for v in json_lines(path)
        if v.get("type") == "event_msg"
        and v["payload"].get("type") == "token_count"
        and v["payload"].get("info")
    ]
    counted = sum(m.get("usage", {}).get("output", 0) for m in messages)
    if name.startswith("kvsankar"):  # one count, of the last response only
        assert counted == 1000
    else:
        assert counted == totals[-1]


def test_items_become_messages_in_the_order_the_model_saw_them(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "new.jsonl", new_lines())
    (session,) = list(read_path(path))
    records = stored(session)[1]
    assert session.key == f"codex:{PARENT_ID}"
    assert session.details.model == "gpt-5.5"
    meta = session.details.metadata["codex"]
    assert meta["cliVersion"] == "0.125.0" and meta["cwd"] == "/repo"
    assert session.parent_key is None
    at = by_line(records, path)
    kinds = [r.kind for r in at.values()]
    assert kinds == [
        "entry", "entry", "message", "message", "entry", "entry", "message", "entry",
        "message", "message", "entry", "message", "message", "message", "entry", "message",
        "entry", "message", "entry", "entry", "entry", "entry", "entry", "entry",
    ]  # fmt: skip
    developer = at[2].message
    assert developer is not None and developer.role == "user"
    assert developer.text().startswith("<permissions>")
    reasoning = at[8].message
    assert reasoning is not None and reasoning.role == "assistant"
    assert reasoning.to_wire()["content"][0]["responsesItem"]["encrypted_content"] == "enc"
    call = at[9].message
    assert call is not None
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls()] == [
        ("call_ls", "exec_command", {"cmd": "ls", "workdir": "/repo"})
    ]
    result = at[11].message
    assert result is not None and (result.role, result.tool_call_id, result.tool_name) == (
        "toolResult",
        "call_ls",
        "exec_command",
    )
    patch = at[12].message
    assert patch is not None
    (custom,) = patch.tool_calls()
    assert custom.name == "apply_patch" and custom.arguments["input"].startswith("*** Begin")
    search = at[13].message
    assert search is not None
    assert search.to_wire()["content"][0]["item"]["type"] == "web_search_call"
    # A result answering no call stays an entry; unknown line types survive as entries.
    assert at[21].entry is not None and at[21].entry["line"]["payload"]["call_id"] == "call_never"
    assert at[23].entry is not None and at[23].entry["line"]["type"] == "future_line_type"


def test_an_image_an_object_output_and_usage_counted_once(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "old.jsonl", old_lines())
    (session,) = list(read_path(path))
    records = stored(session)[1]
    at = by_line(records, path)
    image = at[2].message
    assert image is not None
    block = image.to_wire()["content"][1]
    assert block["type"] == "image" and block["mimeType"] == "image/png"
    failed = at[13].message
    assert failed is not None and failed.is_error is True
    assert failed.text() == "cat: missing: No such file"
    envelope = failed.to_wire()["codex"]
    assert envelope["output"] == {"content": "cat: missing: No such file", "success": False}
    # 0.40 writes the count before its response: each count on its response's first
    # message, the repeated count not at all.
    usages = {i: r.message.usage.output for i, r in at.items() if r.message and r.message.usage}
    assert usages == {7: 50, 12: 30, 16: 20}
    assert sum(usages.values()) == 100


def test_a_count_after_the_tool_results_goes_to_its_response(tmp_path: Path) -> None:
    lines = [
        line(0, "session_meta", {"id": "s"}),
        item(1, {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"}),
        item(2, {"type": "function_call_output", "call_id": "c1", "output": "x"}),
        line(3, "event_msg", token_count(10, 10)),
        item(4, {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c2"}),
        item(5, {"type": "function_call_output", "call_id": "c2", "output": "y"}),
        line(6, "event_msg", token_count(15, 5)),
    ]
    records = stored(next(read_path(write_lines(tmp_path / "r.jsonl", lines))))[1]
    usages = [(r.seq, r.message.usage.output) for r in records if r.message and r.message.usage]
    assert usages == [(2, 10), (5, 5)]
    assert [r.kind for r in records] == ["entry", *["message", "message", "entry"] * 2]


def test_a_compaction_keeps_what_its_replacement_history_keeps(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "c.jsonl", compaction_lines())
    records = stored(next(read_path(path)))[1]
    (compaction,) = [r for r in records if r.kind == "compaction"]
    assert compaction.compaction is not None
    assert compaction.compaction.summary == "Built the API; next: auth."
    assert compaction.compaction.tokens_before == 5060
    # The first message the history keeps: the developer message (seq 2).
    assert compaction.compaction.first_kept_seq == 2
    hidden = [r.tombstone.target_seq for r in records if r.tombstone is not None]
    texts = {r.seq: r.message for r in records if r.message is not None}
    assert [texts[s].text() or texts[s].tool_calls()[0].id for s in hidden] == [
        "first ask",
        "call_a",
        "a",
        "first answer",
        "second answer",
    ]
    # Without a history, everything before the compaction is superseded.
    plain = compaction_lines()
    del plain[11]["payload"]["replacement_history"]
    again = stored(next(read_path(write_lines(tmp_path / "p.jsonl", plain))))[1]
    (only,) = [r for r in again if r.compaction is not None]
    assert only.compaction is not None and only.compaction.first_kept_seq == only.seq
    assert not any(r.kind == "tombstone" for r in again)


def test_a_fork_names_its_parent(tmp_path: Path) -> None:
    path = codex_tree(tmp_path)["fork"]
    (session,) = list(read_path(path))
    assert (session.key, session.parent_key, session.fork_seq, session.parent_optional) == (
        f"codex:{FORK_ID}",
        f"codex:{PARENT_ID}",
        0,
        True,
    )


def test_detection_tells_codex_from_the_other_formats(tmp_path: Path) -> None:
    others = {
        "claude-code": claude_code_lines("s"),
        "pi": pi_lines(3),
        "noumen": noumen_lines(),
    }
    for name, lines in others.items():
        path = write_lines(tmp_path / f"{name}.jsonl", lines)
        assert not CODEX.sniff(path), name
        fmt = detect(path)
        assert fmt is not None and fmt.name == name
    # No session_meta (a file cut at its head): the line shape alone.
    shape = write_lines(tmp_path / "tail.jsonl", new_lines()[1:])
    assert detect(shape) is CODEX
    assert next(read_path(shape)).key == "codex:tail"


def test_a_file_no_format_reads_is_reported_as_skipped(tmp_path: Path) -> None:
    write_lines(tmp_path / "a" / "rollout.jsonl", new_lines())
    odd = write_lines(tmp_path / "a" / "odd.jsonl", [{"hello": "world"}, {"n": 1}])
    skipped: list[SkippedPath] = []
    sessions = list(read_path(tmp_path, skipped=skipped))
    assert [s.format for s in sessions] == ["codex"]
    assert [s.path for s in skipped] == [odd]
    assert "no format recognises it" in skipped[0].reason
    # A format asked for that a file is not: said so too.
    skipped = []
    assert list(read_path(tmp_path, format="pi", skipped=skipped)) == []
    assert sorted(s.path.name for s in skipped) == ["odd.jsonl", "rollout.jsonl"]
    assert all("not a pi file" in s.reason for s in skipped)


def test_a_session_of_another_format_exports_as_a_rollout(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "pi.jsonl", pi_lines(3))
    info, records = stored(next(read_path(source)))
    (out,) = CODEX.write(info, records, tmp_path / "out")
    lines = json_lines(out)
    assert lines[0]["type"] == "session_meta" and lines[0]["payload"]["id"] == info.id
    assert all(set(v) == {"timestamp", "type", "payload"} for v in lines)
    back = stored(next(read_path(out)))[1]

    def blocks(messages: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
        # One item a block: an assistant message of text and a call is two items.
        return [
            (m["role"], b["type"], b.get("text", b.get("id")))
            for m in messages
            for b in m["content"]
            if b["type"] in ("text", "toolCall")
        ]

    assert blocks(wire(back)) == blocks(wire(records))
    assert len(blocks(wire(back))) == 6
    to_openai_responses(wire(back))


def test_the_contexts_feed_every_provider_with_calls_paired(tmp_path: Path) -> None:
    for case, path in codex_tree(tmp_path).items():
        messages = wire(stored(next(read_path(path)))[1])
        request = to_openai_responses(messages)
        items = request.input
        calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
        outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
        assert outputs == calls, case
        if case == "old":
            reasoning = [i for i in items if i.get("type") == "reasoning"]
            assert reasoning[0]["encrypted_content"] == "gAAAAB-secret"
        to_anthropic(messages)
        to_openai_chat(messages)


def test_strict_stops_at_the_first_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(new_lines()[0]) + "\n{oops\n" + json.dumps(new_lines()[1]) + "\n")
    with pytest.raises(ImportFormatError) as caught:
        list(next(read_path(path, strict=True)).records)
    assert "bad.jsonl:2" in str(caught.value)
    (session,) = list(read_path(path))
    records = list(session.records)
    assert len(records) == 3 and session.bad_line_count == 1


# -- fuzzing -----------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_text = st.text(max_size=8)
_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "input_image", "text", "refusal"])},
    optional={"text": st.one_of(_text, _json), "image_url": st.sampled_from(
        ["data:image/png;base64,AAAA", "https://x/y.png", "data:nobase64"])},
)  # fmt: skip
_item = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
             "custom_tool_call_output", "local_shell_call", "web_search_call", "other"]
        )
    },
    optional={
        "role": st.sampled_from(["user", "assistant", "developer", "system", "tool"]),
        "content": st.one_of(_text, st.lists(_part, max_size=2), _json),
        "call_id": st.one_of(st.sampled_from(["c1", "c2"]), _json),
        "name": st.one_of(_text, _json),
        "arguments": st.one_of(st.sampled_from(["{}", '{"a": 1}', "[1]", "x"]), _json),
        "input": _json,
        "output": st.one_of(_text, _json, st.lists(_part, max_size=2)),
        "summary": st.one_of(st.just([{"type": "summary_text", "text": "t"}]), _json),
        "action": _json,
        "codex": _json,
    },
)  # fmt: skip
_line = st.fixed_dictionaries(
    {
        "timestamp": st.one_of(st.just("2026-01-01T00:00:00Z"), _json),
        "type": st.sampled_from(
            ["session_meta", "response_item", "event_msg", "compacted", "turn_context", "x"]
        ),
        "payload": st.one_of(
            _item,
            st.fixed_dictionaries({"type": st.just("token_count"), "info": _json}),
            st.fixed_dictionaries(
                {"message": st.one_of(_text, _json)},
                optional={"replacement_history": st.lists(_item, max_size=2)},
            ),
            st.fixed_dictionaries({}, optional={"id": _json, "forked_from_id": _json}),
            _json,
        ),
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.one_of(_line, _json), max_size=7),
    tail=st.sampled_from(["", '{"x', "\x00\n"]),
    strict=st.booleans(),
)
@example(  # an output answering a call whose arguments were not an object
    lines=[
        {"timestamp": "t", "type": "response_item",
         "payload": {"type": "function_call", "call_id": "c1", "name": "n", "arguments": "[1]"}},
        {"timestamp": "t", "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "c1", "output": [{"type": "x"}]}},
    ],
    tail="",
    strict=False,
)  # fmt: skip
@example(  # a message with no content (was a KeyError)
    lines=[
        {"timestamp": "t", "type": "response_item", "payload": {"type": "message", "role": "user"}}
    ],
    tail="",
    strict=False,
)
def test_fuzzed_files_round_trip_or_raise_a_typed_error(
    tmp_path: Path, lines: list[Any], tail: str, strict: bool
) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    if not CODEX.sniff(path):
        return
    try:
        (session,) = list(CODEX.read(path, strict=strict))
        info, records = stored(session)
    except ImportFormatError:
        assert strict
        return
    (out,) = CODEX.write(info, records, tmp_path / "out")
    assert json_lines(out) == [x for x in json_lines(path) if x != ("not json", b'{"x')]
    messages = wire(records)
    for message in messages:
        assert isinstance(message["content"], list)
    try:
        to_openai_responses(messages)
    except InvalidInputError as exc:  # a fuzzed block no API takes; never an orphan
        assert "answers no tool call" not in str(exc)


def test_a_file_past_the_spill_threshold_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[Any] = [line(0, "session_meta", {"id": "big"})]
    for i in range(300):
        call = {"type": "function_call", "name": "sh", "arguments": "{}", "call_id": f"c{i}"}
        lines.append(item(i, call))
        lines.append(item(i, {"type": "function_call_output", "call_id": f"c{i}", "output": "x"}))
    history = [
        {"type": "function_call", "name": "sh", "arguments": "{}", "call_id": "c250"},
        {"type": "function_call_output", "call_id": "c250", "output": "x"},
    ]
    lines.append(line(9, "compacted", {"message": "s", "replacement_history": history}))
    lines.append(item(9, {"type": "function_call_output", "call_id": "c10", "output": "late"}))
    path = write_lines(tmp_path / "big.jsonl", lines)
    plain = stored(next(read_path(path)))[1]
    made = count_disk_maps(monkeypatch, codex, 50)
    spilled = stored(next(read_path(path)))[1]
    assert len(made) == 2  # the call names and the call ids
    assert spilled == plain
    (compaction,) = [r.compaction for r in plain if r.compaction is not None]
    assert compaction.first_kept_seq == 2 + 2 * 250
    hidden = [r.tombstone.target_seq for r in plain if r.tombstone is not None]
    assert hidden == list(range(2 + 2 * 251, 2 + 2 * 300))
    # A result whose call the compaction superseded stays an entry: no orphan.
    assert plain[-1].entry is not None
    context = [
        r.message.to_wire()
        for r in plain
        if r.message is not None and r.seq >= compaction.first_kept_seq and r.seq not in hidden
    ]
    items = to_openai_responses(context).input  # raises on an orphaned result
    assert [i["type"] for i in items] == ["function_call", "function_call_output"]
