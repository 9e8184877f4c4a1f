"""noumen session files: chat-shape messages, tool calls, compaction boundaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.formats import count_disk_maps, json_lines, stored
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessiondb.errors import ImportFormatError
from sessiondb.formats import FORMATS, detect, noumen, read_path
from sessiondb.models import Record

NOUMEN = FORMATS["noumen"]
SID = "my-session"
PNG = "iVBORw0KGgo="


def entry(kind: str, uuid: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SID,
        "timestamp": f"2026-03-01T10:00:{int(uuid[1:]):02d}.000Z",
        **fields,
    }


def sample() -> list[Any]:
    """A session as the seed describes it: every line type, every message shape."""
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    spaced = {
        "id": "call_2",
        "type": "function",
        "function": {"name": "read", "arguments": '{"path": "a.txt"}'},
    }
    return [
        entry("custom-title", "u1", None, title="Schema work"),
        entry("metadata", "u2", "u1", metadata={"project": "x", "n": 3}),
        entry("message", "u3", "u2", message={"role": "system", "content": "Be brief."}),
        entry("message", "u4", "u3", message={"role": "user", "content": "list files"}),
        entry(
            "message",
            "u5",
            "u4",
            message={"role": "assistant", "content": None, "tool_calls": [call, spaced]},
        ),
        entry(
            "message",
            "u6",
            "u5",
            message={"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
        ),
        entry(
            "message",
            "u7",
            "u6",
            message={"role": "tool", "tool_call_id": "call_2", "content": "hello"},
        ),
        entry(
            "message",
            "u8",
            "u7",
            message={"role": "assistant", "content": "Two files.", "tool_calls": []},
        ),
        entry("compact-boundary", "u9", "u8", tokensBefore=1234),
        entry(
            "summary",
            "u10",
            "u9",
            message={"role": "user", "content": "We listed two files."},
        ),
        entry(
            "message",
            "u11",
            "u10",
            message={
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                ],
            },
        ),
        entry(
            "message",
            "u12",
            "u11",
            message={"role": "assistant", "content": [{"type": "text", "text": "A logo."}]},
            extra={"kept": True},
        ),
        entry("future-type", "u13", "u12", anything=[1, 2]),
        ["not", "an", "object"],
    ]


def write(path: Path, lines: list[Any], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    return path


def round_trip(path: Path, out_dir: Path) -> tuple[list[Record], Path]:
    (session,) = read_path(path, format="noumen")
    info, records = stored(session)
    (out,) = NOUMEN.write(info, records, out_dir)
    return records, out


def test_the_sample_round_trips_line_by_line(tmp_path: Path) -> None:
    path = write(tmp_path / f"{SID}.jsonl", sample())
    assert detect(path) is NOUMEN
    (session,) = read_path(path)
    info, records = stored(session)
    assert session.key == f"noumen:{SID}" and info.name == "Schema work"
    assert [r.kind for r in records] == [
        *["entry"] * 3,
        *["message"] * 5,
        "entry",
        "compaction",
        "message",
        "message",
        "entry",
        "entry",
    ]
    assert session.bad_lines[0].line == 14
    (out,) = NOUMEN.write(info, records, tmp_path / "out")
    assert out.name == f"{SID}.jsonl"
    assert json_lines(out) == json_lines(path)


def test_messages_are_wire_shape_with_block_content(tmp_path: Path) -> None:
    records, _ = round_trip(write(tmp_path / "s.jsonl", sample()), tmp_path / "out")
    by_uuid = {r.uuid: r for r in records}
    user = by_uuid["u4"].message
    assert user is not None and user.to_wire()["content"] == [
        {"type": "text", "text": "list files"}
    ]
    calls = by_uuid["u5"].message
    assert calls is not None and calls.role == "assistant"
    assert [(c.id, c.name, c.arguments) for c in calls.tool_calls()] == [
        ("call_1", "bash", {}),
        ("call_2", "read", {"path": "a.txt"}),
    ]
    result = by_uuid["u6"].message
    assert result is not None and result.role == "toolResult" and result.tool_call_id == "call_1"
    image = by_uuid["u11"].message
    assert image is not None
    blocks = image.to_wire()["content"]
    assert blocks[1] == {"type": "image", "data": PNG, "mimeType": "image/png"}
    assert blocks[2]["type"] == "image_url"  # not a data URL: kept as it came
    compaction = by_uuid["u10"].compaction
    assert compaction is not None
    assert compaction.summary == "We listed two files." and compaction.tokens_before == 1234
    assert compaction.first_kept_seq == by_uuid["u10"].seq
    for record in records:
        if record.message is not None:
            assert isinstance(record.message.to_wire()["content"], list)


def test_detection_tells_noumen_from_claude_code_and_pi(tmp_path: Path) -> None:
    noumen = write(tmp_path / "n.jsonl", sample()[3:5])
    claude = write(
        tmp_path / "c.jsonl",
        [{**entry("user", "u1", None), "message": {"role": "user", "content": "hi"}}],
    )
    pi = write(
        tmp_path / "p.jsonl",
        [
            {"type": "session", "id": "p", "timestamp": "2026-01-01T00:00:00Z"},
            {"type": "message", "id": "a", "message": {"role": "user", "content": "hi"}},
        ],
    )
    assert detect(noumen) is NOUMEN
    assert detect(claude) is FORMATS["claude-code"]
    assert detect(pi) is FORMATS["pi"]


def test_a_line_that_would_not_round_trip_is_kept_as_an_entry(tmp_path: Path) -> None:
    odd = [
        # a content shape sessiondb cannot hold, a tool call without a function
        entry("message", "u1", None, message={"role": "user", "content": 7}),
        entry("message", "u2", "u1", message={"role": "assistant", "tool_calls": [{"id": "x"}]}),
        # a wire key that would clash with the converted one
        entry("message", "u3", "u2", message={"role": "user", "content": "a", "noumen": 1}),
        # a part list holding a block that reads as a tool call
        entry(
            "message",
            "u4",
            "u3",
            message={"role": "user", "content": [{"type": "toolCall", "id": "i", "name": "n"}]},
        ),
        # arguments that are not compact JSON: kept whole, still a message
        entry(
            "message",
            "u5",
            "u4",
            message={
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "n", "arguments": "[1]"}}
                ],
            },
        ),
    ]
    path = write(tmp_path / "odd.jsonl", odd)
    records, out = round_trip(path, tmp_path / "out")
    assert [r.kind for r in records] == ["entry", "entry", "entry", "entry", "message"]
    assert json_lines(out) == json_lines(path)


def test_torn_last_line_bom_crlf_and_strict(tmp_path: Path) -> None:
    body = "".join(json.dumps(x) + "\r\n" for x in sample()[3:6])
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode() + b'{"type": "mess')
    records, out = round_trip(path, tmp_path / "out")
    assert [r.kind for r in records] == ["message", "message", "message"]
    assert json_lines(out) == json_lines(path)[:3]
    bad = write(tmp_path / "bad.jsonl", sample()[3:5], tail="garbage\n")
    (session,) = read_path(bad, format="noumen", strict=True)
    with pytest.raises(ImportFormatError, match=r"bad\.jsonl:3"):
        list(session.records)


def test_a_session_written_elsewhere_exports_as_chat_shape(tmp_path: Path) -> None:
    (session,) = read_path(write(tmp_path / "s.jsonl", sample()), format="noumen")
    info, records = stored(session)
    # Drop the envelopes: as if the session had been appended through the API.
    bare = []
    for r in records:
        if r.message is not None:
            wire = {k: v for k, v in r.message.to_wire().items() if k != "noumen"}
            bare.append(r.model_copy(update={"message": type(r.message).model_validate(wire)}))
        elif r.compaction is not None:
            wire = {k: v for k, v in r.compaction.to_wire().items() if k != "noumen"}
            bare.append(
                r.model_copy(update={"compaction": type(r.compaction).model_validate(wire)})
            )
    (out,) = NOUMEN.write(info.model_copy(update={"metadata": None}), bare, tmp_path / "out")
    lines = json_lines(out)
    assert [x["type"] for x in lines] == [
        *["message"] * 5,
        "compact-boundary",
        "summary",
        *["message"] * 2,
    ]
    assert lines[0]["message"] == {"role": "user", "content": "list files"}
    assert lines[1]["message"]["content"] is None
    assert lines[1]["message"]["tool_calls"][1]["function"] == {
        "name": "read",
        "arguments": '{"path":"a.txt"}',
    }
    assert lines[2]["message"] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "a.txt\nb.txt",
    }
    assert lines[1]["parentUuid"] == lines[0]["uuid"]
    assert {x["sessionId"] for x in lines} == {info.id}
    # and that file reads back as the same conversation
    (again,) = read_path(out)
    _, back = stored(again)
    # a compaction is written as its boundary line (an entry) and its summary
    expected = [r.kind for r in bare]
    expected.insert(expected.index("compaction"), "entry")
    assert [r.kind for r in back] == expected


# -- fuzz ------------------------------------------------------------------------------

_text = st.text(max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": _text})}
    ),
    st.dictionaries(st.sampled_from(["type", "text", "id", "name", "data"]), _json, max_size=3),
)
_call = st.one_of(
    st.fixed_dictionaries(
        {
            "id": _text,
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": _text, "arguments": st.one_of(_text, st.just('{"a": 1}'), st.just("{}"))}
            ),
        }
    ),
    st.dictionaries(st.sampled_from(["id", "type", "function"]), _json, max_size=3),
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "other"])},
    optional={
        "content": st.one_of(st.none(), _text, st.lists(_part, max_size=3), _json),
        "tool_calls": st.lists(_call, max_size=2),
        "tool_call_id": st.one_of(_text, _json),
        "name": _json,
        "noumen": _json,
    },
)
_line = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["message", "summary", "compact-boundary", "custom-title", "x"]),
        "uuid": st.one_of(st.sampled_from(["a", "b", "c"]), _json),
        "sessionId": st.just(SID),
    },
    optional={
        "message": _message,
        "parentUuid": _json,
        "timestamp": st.one_of(_text, st.just("2026-01-01T00:00:00Z"), st.integers()),
        "tokensBefore": _json,
        "title": _json,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.one_of(_line, _json), max_size=6), tail=st.sampled_from(["", '{"x', "\x00\n"])
)
@example(  # a summary whose one content part is not an object (was an AttributeError)
    lines=[{"type": "summary", "uuid": "a", "sessionId": SID, "message": {"content": [None]}}],
    tail="",
)
def test_fuzzed_files_round_trip_or_report(tmp_path: Path, lines: list[Any], tail: str) -> None:
    path = write(tmp_path / "fuzz.jsonl", lines, tail)
    records, out = round_trip(path, tmp_path / "out")
    assert len(records) == len(json_lines(path)) - (1 if tail == '{"x' else 0)
    assert json_lines(out) == [x for x in json_lines(path) if x != ("not json", b'{"x')]
    for record in records:
        if record.message is not None:
            assert isinstance(record.message.to_wire()["content"], list)


def big_session(path: Path, count: int) -> Path:
    """About ``count`` lines, for reading past the spill threshold: tool calls and their
    results, a compaction (boundary and summary) every 500 lines, uuids repeated long
    after they were first read, lines with no uuid or one that cannot be a key."""
    lines: list[Any] = []
    last: str | None = None

    def line(kind: str, uuid: Any, i: int, **fields: Any) -> dict[str, Any]:
        at = f"2026-03-01T{10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z"
        return {
            "type": kind,
            "uuid": uuid,
            "parentUuid": last,
            "sessionId": SID,
            "timestamp": at,
            **fields,
        }

    for i in range(count):
        uuid = f"u{i}"
        if i % 89 == 10 and i > 100:
            uuid = f"u{i - 60}"  # read before: no key
        if i % 500 == 250:
            lines.append(line("compact-boundary", uuid, i, tokensBefore=i))
            last = uuid
            summary = {"role": "user", "content": f"summary {i}"}
            lines.append(line("summary", f"s{i}", i, message=summary))
            last = f"s{i}"
            continue
        if i % 3 == 1:
            call = {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "bash", "arguments": "{}"},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif i % 3 == 2:
            message = {"role": "tool", "tool_call_id": f"call_{i - 1}", "content": f"out {i}"}
        else:
            message = {"role": "user", "content": f"user {i}"}
        lines.append(line("message", uuid, i, message=message))
        last = uuid
    lines.insert(10, line("message", "", 10, message={"role": "user", "content": "no key"}))
    lines.insert(20, {"type": "metadata", "sessionId": SID, "metadata": {"n": 1}})
    lines.insert(30, line("custom-title", "x\udc80", 30, title="Big"))
    return write(path, lines)


def test_a_file_past_the_spill_threshold_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = big_session(tmp_path / f"{SID}.jsonl", 3_000)

    def read() -> tuple[Any, ...]:
        (session,) = read_path(path, format="noumen", strict=True)
        records = list(session.records)
        return session.key, records, session.details, session.bad_lines

    in_memory = read()
    records = in_memory[1]
    assert [r.kind for r in records].count("compaction") == 6
    assert sum(r.uuid is None for r in records) > 30  # the repeated and odd uuids
    made = count_disk_maps(monkeypatch, noumen, threshold=100)
    assert read() == in_memory
    assert len(made) == 1  # the uuids handed out moved to disk
