"""Export cuts a Claude Code line out of its stored text when the import laid the
payload out for it (``base.splice``), and cuts an entry's line out of its payload: the
files are the same bytes as when every payload is parsed, and a text laid out any other
way is parsed, never cut wrong."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.corpus import CORPUS, corpus_present
from helpers.formats import claude_code_project
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import literal, select

from sessiondb import SessionStore, jsoncodec
from sessiondb import statements as q
from sessiondb.formats import base, claude_code
from sessiondb.models import Message, wire_message

KEY = claude_code.KEY
CLAUDE = CORPUS / "claude-code"
# A line of another tool's envelope inside a Claude Code line: what a naive search for
# the envelope or the content would find first.
DECOY = {"claudeCode": {"content": "blocks", "line": {"message": {"content": []}}}}


def _payloads(path: Path) -> list[dict[str, Any]]:
    """The message payloads of a file the reader marks for splicing, as it yields them."""
    out = []
    for session in claude_code.ClaudeCodeFormat().read(path):
        out += [r.payload for r in session.records if r.splice is not None]
    return out


def _line_of(payload: dict[str, Any]) -> Any:
    """The line writing the payload parsed gives."""
    return claude_code.line_of(payload, payload[KEY])


def _cut(payload: dict[str, Any]) -> tuple[str, bytes]:
    text = base.splice(payload, KEY)
    assert text is not None
    assert orjson.loads(text) == payload  # the payload now holds its splice too
    line = base.spliced_line(text)
    assert line is not None and line.endswith(b"\n")
    assert base.spliced_line(text.encode()) == line  # the payload as export reads it
    return text, line


def test_every_line_the_corpus_splices_is_its_line(tmp_path: Path) -> None:
    files = sorted(CLAUDE.rglob("*.jsonl")) if corpus_present() else []
    project = claude_code_project(tmp_path / "p", files=3, lines=80, padding=300)
    cut = {"corpus": 0, "project": 0}
    for name, paths in (("corpus", files), ("project", sorted(project.glob("*.jsonl")))):
        for path in paths:
            for payload in _payloads(path):
                _, line = _cut(payload)
                assert orjson.loads(line) == _line_of(payload)
                cut[name] += 1
    # Every line of the project; the corpus's text and thinking messages.
    assert cut["project"] == 240, cut
    assert cut["corpus"] > (120 if files else -1), cut


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ['"content":', ',"claudeCode":{"content":"blocks","line":{', '"message":{}}}}', "\\", '"']
)
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _lines(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant"]))
    if draw(st.booleans()):
        content: Any = draw(_TEXT)
    else:
        block = st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "thinking", "other"]), "text": _TEXT},
            optional={"signature": _TEXT, "extra": _VALUE},
        )
        content = draw(st.lists(block, max_size=3))
    message: dict[str, Any] = draw(st.dictionaries(_TEXT, _VALUE, max_size=3))
    message.update(role=role, content=content)
    if draw(st.booleans()):
        message = {"content": message.pop("content"), **message}  # content first
    line: dict[str, Any] = draw(st.dictionaries(_TEXT, _VALUE, max_size=4))
    line.update(type=role, uuid="u-1", message=message)
    if draw(st.booleans()):
        line["toolUseResult"] = DECOY
    return line


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=_lines())
def test_a_spliced_line_is_the_line_parsing_writes(line: dict[str, Any]) -> None:
    """Whatever a line holds (decoys of the envelope in its fields, quotes, escapes), a
    payload the reader lays out is either cut to the very line or not laid out at all."""
    converted = claude_code.wire_of_line(copy.deepcopy(line), {})
    if converted is None:
        return
    payload, envelope, verbatim = converted
    payload[KEY] = envelope
    assert _line_of(payload) == line  # the conversion itself gives the line back
    if not claude_code.spliceable(envelope, verbatim, "u-1"):
        return
    text = base.splice(payload, KEY)
    if text is None:
        return
    cut = base.spliced_line(text)
    assert cut is not None
    assert orjson.loads(cut) == line


def _spliced(tmp_path: Path, which: int = 1) -> tuple[dict[str, Any], str]:
    """A payload laid out for splicing and its text: ``which`` 0 and 2 are user lines
    (2 with a string content), 1 and 3 assistant lines with usage."""
    project = tmp_path / "p"
    project.mkdir()
    lines = [
        {
            "type": "user",
            "uuid": "a",
            "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        },
        {
            "type": "assistant",
            "uuid": "b",
            "parentUuid": "a",
            "message": {
                "id": "m1",
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "text", "text": "yo"},
                ],
                "usage": {"input_tokens": 3, "output_tokens": 4},
            },
        },
        {
            "type": "user",
            "uuid": "c",
            "parentUuid": "b",
            "cwd": "/x",
            "message": {"role": "user", "content": "a string"},
        },
        {
            "type": "assistant",
            "uuid": "d",
            "parentUuid": "c",
            "message": {
                "id": "m2",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "text", "text": "ok"}],
                "usage": {"input_tokens": 1},
            },
        },
    ]
    (project / "s.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    payload = _payloads(project / "s.jsonl")[which]
    return payload, _cut(payload)[0]


def test_a_payload_serialised_again_in_another_order_is_parsed(tmp_path: Path) -> None:
    """A message model writes role, content, uuid, …: the same length, so the envelope
    is where it was, but the content is not, and its key is not where the splice says."""
    _, text = _spliced(tmp_path)
    again = jsoncodec.dumps(wire_message(Message.model_validate(orjson.loads(text))))
    assert again != text and len(again) == len(text)
    assert orjson.loads(again) == orjson.loads(text)
    assert base.spliced_line(again) is None


def _shuffled(value: Any, draw: st.DrawFn) -> Any:
    """``value`` with the members of every object in an order drawn."""
    if isinstance(value, dict):
        keys = draw(st.permutations(list(value)))
        return {k: _shuffled(value[k], draw) for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, draw) for v in value]
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(0, 3))
def test_any_order_of_the_same_payload_cuts_to_its_line_or_is_parsed(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, which: int
) -> None:
    """However the payload's value is written again (members of any object in any
    order, as a model or a sorted dump would), the cut is the line or nothing."""
    payload, text = _spliced(tmp_path_factory.mktemp("p"), which)
    want = _line_of(payload)
    again = jsoncodec.dumps(_shuffled(orjson.loads(text), data.draw))
    cut = base.spliced_line(again)
    assert cut is None or orjson.loads(cut) == want
    if again == text:
        assert cut is not None


def test_a_text_that_is_not_laid_out_so_is_parsed(tmp_path: Path) -> None:
    _, text = _spliced(tmp_path)
    assert base.spliced_line(text[:-1]) is None
    assert base.spliced_line(text[:-10] + "zz" + text[-8:]) is None  # not hex
    assert base.spliced_line(" " + text) is None  # the exact path's mark
    sorted_text = json.dumps(orjson.loads(text), sort_keys=True, separators=(",", ":"))
    assert base.spliced_line(sorted_text) is None
    for bad in (text[:-1], " " + text, sorted_text, text[-60:]):
        assert base.spliced_line(bad.encode()) is None


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=120), tail=st.sampled_from(['"}}', "", '0"}}']))
def test_any_text_cuts_to_a_line_or_to_none(text: str, tail: str) -> None:
    """Never an exception, whatever a row holds (the writer calls these on every row)."""
    for candidate in (text + tail, text + ',"splice":"' + "0" * 40 + tail):
        data = candidate.encode("utf-8", "surrogatepass")  # as export reads a payload
        for payload in (candidate, data):
            assert base.spliced_line(payload) is None  # no offsets of nothing fit
            line = base.entry_line(payload, claude_code.ENTRY_OPEN)
            assert line is None or data.startswith(claude_code.ENTRY_OPEN)
            assert line == base.entry_line(data, claude_code.ENTRY_OPEN)


@settings(max_examples=300, deadline=None)
@given(
    head=st.binary(max_size=60),
    marker=st.sampled_from([b',"splice":"', b',"splice":"0']),
    digits=st.text("0123456789abcdefxyz", max_size=40).map(str.encode),
    tail=st.sampled_from([b'"}}', b"", b'0"}}', b"}"]),
)
def test_any_bytes_cut_to_a_line_or_to_none(
    head: bytes, marker: bytes, digits: bytes, tail: bytes
) -> None:
    """Export reads payloads as bytes: a short or odd tail (too few hex digits, not hex,
    a payload shorter than the tail) is ``None``, never an exception."""
    for data in (head + marker + digits + tail, marker + digits + tail, head + tail):
        line = base.spliced_line(data)
        assert line is None or line.endswith(b"\n")


def test_an_entry_is_cut_only_when_its_line_is_its_last_member() -> None:
    line = {"type": "progress", "data": {"a": [1, "}}"]}}
    prefix = claude_code.ENTRY_OPEN
    plain = jsoncodec.dumps(base.entry_payload(claude_code.NAME, line))
    assert base.entry_line(plain, prefix) == orjson.dumps(line) + b"\n"
    with_part = jsoncodec.dumps(base.entry_payload(claude_code.NAME, line, part=2))
    assert base.entry_line(with_part, prefix) is None  # the part comes first
    older = jsoncodec.dumps({"format": claude_code.NAME, "line": line, "part": 2})
    assert base.entry_line(older, prefix) is None  # an older import's order
    assert base.entry_line(jsoncodec.dumps({"format": "pi", "line": line}), prefix) is None


# -- through the store, on every backend ----------------------------------------------


async def _export(store: SessionStore, out: Path) -> dict[str, bytes]:
    written = await store.export_all(out, format="claude-code")
    return {
        str(path.relative_to(out)): path.read_bytes()
        for paths in written.values()
        for path in paths
    }


async def test_cut_and_parsed_exports_are_the_same_bytes(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus and a generated project, plus what the database adds to an imported
    session (a message, a tombstone of a cut line, a compaction) and an entry whose
    uuid repeats (its record has none): exported with lines cut and with every payload
    parsed, the files are byte for byte the same."""
    project = claude_code_project(tmp_path / "p", files=4, lines=30, padding=100)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "repeat.jsonl").write_text(
        "\n".join(
            json.dumps(line)
            for line in [
                {"type": "user", "uuid": "r-1", "message": {"role": "user", "content": "hi"}},
                {"type": "progress", "uuid": "r-1", "data": {}},  # a repeated uuid
                {"type": "file-history-snapshot", "messageId": "m"},  # no uuid at all
            ]
        )
        + "\n"
    )
    if corpus_present():
        report = await store.import_path(CLAUDE)
        assert report.ok, report.failures
    mine = await store.import_path(project)
    repeat = await store.import_path(tmp_path / "r")
    assert mine.ok and repeat.ok, (mine.failures, repeat.failures)
    for sid in (mine.session_ids[0], repeat.session_ids[0]):
        await store.append(sid, [{"role": "user", "content": "made in the database"}])
    first = mine.session_ids[0]
    await store.tombstone(first, 2)
    await store.append_compaction(first, summary="so far", first_kept_seq=4)
    calls: list[int] = []
    real = claude_code.spliced_line

    def counted(text: str) -> bytes | None:
        line = real(text)
        calls.append(line is not None)
        return line

    monkeypatch.setattr(claude_code, "spliced_line", counted)
    cut = await _export(store, tmp_path / "cut")
    assert sum(calls) > 100
    monkeypatch.setattr(claude_code, "spliced_line", lambda text: None)
    monkeypatch.setattr(claude_code, "entry_line", lambda text, prefix: None)
    parsed = await _export(store, tmp_path / "parsed")
    assert cut.keys() == parsed.keys()
    for name in cut:
        assert cut[name] == parsed[name], name


async def test_a_message_appended_from_an_imported_one_exports_its_line(
    store: SessionStore, tmp_path: Path
) -> None:
    """Its envelope (splice included) comes along, in a model's key order: the export
    parses it and writes the line it holds."""
    project = claude_code_project(tmp_path / "p", files=1, lines=4, padding=20)
    report = await store.import_path(project)
    original = [json.loads(x) for x in next(project.glob("*.jsonl")).read_text().splitlines()]
    records = await store.records(report.session_ids[0])
    assert records[1].message is not None and "splice" in records[1].message.to_wire()[KEY]
    copy_id = (await store.create_session()).id
    await store.append(copy_id, [records[1].message])
    (path,) = await store.export_session(copy_id, tmp_path / "out", format="claude-code")
    assert [json.loads(x) for x in path.read_text().splitlines()] == [original[1]]


async def test_a_namespace_alone_in_its_database_is_read_without_the_check(
    store: SessionStore, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alone, the export reads the table with no namespace check; with another
    namespace it checks, and even told it is alone, it writes only its own sessions."""
    project = claude_code_project(tmp_path / "p", files=2, lines=4)
    await store.import_path(project)
    alone: list[bool] = []
    real = q.namespace_records

    def seen(*args: Any, **kwargs: Any) -> Any:
        alone.append(kwargs.get("every", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(q, "namespace_records", seen)
    assert len(await store.export_all(tmp_path / "a", format="claude-code")) == 2
    assert alone and all(alone)
    async with SessionStore.open(db_url, namespace="tenant-b") as other:
        await other.import_path(claude_code_project(tmp_path / "q", files=3, lines=4))
    alone.clear()
    assert len(await store.export_all(tmp_path / "b", format="claude-code")) == 2
    assert alone and not any(alone)
    # As if the other tenant's sessions were made between the check and the reads.
    monkeypatch.setattr(
        q, "other_namespace", lambda ns: (select(literal(False).label("other")), {})
    )
    alone.clear()
    written = await store.export_all(tmp_path / "c", format="claude-code")
    assert alone and all(alone)
    assert sorted(p.name for paths in written.values() for p in paths) == sorted(
        p.name for p in project.glob("*.jsonl")
    )
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(
        p.name for p in project.glob("*.jsonl")
    )


def test_a_payload_not_laid_out_as_the_reader_does_is_stored_the_usual_way(
    tmp_path: Path,
) -> None:
    """``splice`` refuses what it cannot cut right: a message that is not last in its
    line (its brace would be another object's), a form it does not know, an envelope
    with more members (a part), an envelope that is not the payload's last member."""
    payload, _ = _spliced(tmp_path)
    payload[KEY].pop("splice")
    line = payload[KEY]["line"]
    assert base.splice(copy.deepcopy(payload), KEY) is not None
    moved = copy.deepcopy(payload)
    moved[KEY]["line"] = {
        "message": line["message"],
        **{k: v for k, v in line.items() if k != "message"},
        "after": {},
    }
    assert base.splice(moved, KEY) is None
    other = copy.deepcopy(payload)
    other[KEY]["content"] = "toolResult"
    assert base.splice(other, KEY) is None
    part = copy.deepcopy(payload)
    part[KEY]["part"] = 2
    assert base.splice(part, KEY) is None
    first = {KEY: payload[KEY], **{k: v for k, v in payload.items() if k != KEY}}
    assert base.splice(copy.deepcopy(first), KEY) is None
    after = {**copy.deepcopy(payload), "later": {"a": {"b": {}}}}  # ends "}}}}" too
    assert base.splice(after, KEY) is None
