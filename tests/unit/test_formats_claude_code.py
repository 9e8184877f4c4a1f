"""Claude Code (and cersei) files: pure reads and writes, no database."""

from __future__ import annotations

import inspect
import json
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from helpers.claude_code import assistant, cersei_parts, line, tool_result, user
from helpers.claude_code import cersei as cersei_line
from helpers.corpus import CLAUDE_FILES, CORPUS, corpus_present
from helpers.formats import generated_tree, json_lines, stored
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb.context import merge_split_responses
from sessiondb.errors import ImportFormatError
from sessiondb.formats import FORMATS, claude_code, detect, read_path, spill
from sessiondb.formats.base import read_lines
from sessiondb.formats.claude_code import ClaudeCodeFormat
from sessiondb.models import Record

CLAUDE = CORPUS / "claude-code"
SPOTTER = CLAUDE / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
FMT = FORMATS["claude-code"]
#: The generated Claude Code sessions (``helpers.formats.generated_tree``): a main file
#: with two subagents, and a cersei session in two parts.
CC_CASES = ("claude-code", "cersei-parts")


def corpus_files() -> list[Path]:
    """The corpus's Claude Code files (paths only: a test that reads them is marked
    ``needs_corpus``)."""
    return [CLAUDE / name for name in CLAUDE_FILES]


@pytest.mark.needs_corpus
def test_the_corpus_holds_the_files_named_here() -> None:
    assert sorted(CLAUDE.rglob("*.jsonl")) == corpus_files()


def export(path: Path, out: Path) -> dict[str, list[Path]]:
    """Read ``path`` and write every session it gives into ``out``: key -> files."""
    written: dict[str, list[Path]] = {}
    for session in read_path(path):
        info, records = stored(session)
        written[session.key] = FMT.write(info, records, out)
    return written


def result(uuid: str, parent: str, call: str, text: str) -> str:
    return tool_result(uuid, parent, call, text, at=None)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
@pytest.mark.needs_corpus
def test_every_corpus_file_round_trips_line_by_line(path: Path, tmp_path: Path) -> None:
    if "subagents" in path.parts:
        main = path.parents[2] / f"{path.parents[1].name}.jsonl"
        written = export(main, tmp_path)
        key = f"claude-code:{main.stem}/{path.stem}"
    else:
        written = export(path, tmp_path)
        key = f"claude-code:{path.stem}"
    (out,) = written[key]
    assert out.relative_to(tmp_path).parts[-1] == path.name
    assert json_lines(out) == json_lines(path)


@pytest.mark.needs_corpus
def test_the_corpus_is_detected_as_claude_code() -> None:
    for path in corpus_files():
        fmt = detect(path)
        assert fmt is not None and fmt.name == "claude-code", path


@pytest.mark.needs_corpus
def test_real_session_context_applies_its_compaction_and_orphans_no_tool_result() -> None:
    session = next(read_path(SPOTTER))
    info, records = stored(session)
    assert session.bad_lines == []
    compactions = [r for r in records if r.kind == "compaction"]
    assert len(compactions) == 1
    compaction = compactions[0].compaction
    assert compaction is not None
    assert compaction.summary.startswith("This session is being continued")
    assert compaction.tokens_before == 170251
    assert compaction.first_kept_seq == compactions[0].seq

    hidden = {r.tombstone.target_seq for r in records if r.tombstone is not None}
    assert hidden == set()  # no rewinds in this session: progress side branches are not
    context = [
        r.message.to_wire()
        for r in records
        if r.message is not None and r.seq >= compaction.first_kept_seq and r.seq not in hidden
    ]
    merged = merge_split_responses(context)
    assert 0 < len(merged) < len(context)
    calls: set[str] = set()
    for message in merged:
        calls.update(b["id"] for b in message["content"] if b["type"] == "toolCall")
        if message["role"] == "toolResult":
            assert message["toolCallId"] in calls
    # The merged assistant message of a split response carries all its calls at once.
    for i, message in enumerate(merged):
        if message["role"] == "assistant":
            ids = [b["id"] for b in message["content"] if b["type"] == "toolCall"]
            following = [m["toolCallId"] for m in merged[i + 1 : i + 1 + len(ids)]]
            assert following == ids
    assert info.model is not None and info.model.startswith("claude")


@pytest.mark.needs_corpus
def test_a_split_response_counts_its_usage_once() -> None:
    _, records = stored(next(read_path(SPOTTER)))
    messages = [r.message.to_wire() for r in records if r.message is not None]
    responses = [m["responseId"] for m in messages if "responseId" in m]
    assert len(responses) > len(set(responses))  # the file does split responses
    with_usage = [m["responseId"] for m in messages if "usage" in m]
    assert sorted(with_usage) == sorted(set(responses))


USAGE_FIELDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cacheRead": "cache_read_input_tokens",
    "cacheWrite": "cache_creation_input_tokens",
}


def response_usage(path: Path) -> dict[str, dict[str, int]]:
    """Each response id of a Claude Code file -> the largest count of each usage field
    over its lines, read straight from the file."""
    out: dict[str, dict[str, int]] = {}
    for value in json_lines(path):
        message = value.get("message") if isinstance(value, dict) else None
        if value.get("type") != "assistant" or not isinstance(message, dict):
            continue
        usage = message.get("usage") or {}
        seen = out.setdefault(message["id"], dict.fromkeys(USAGE_FIELDS, 0))
        for wire, cc in USAGE_FIELDS.items():
            seen[wire] = max(seen[wire], usage.get(cc, 0))
    return out


@pytest.mark.needs_corpus
def test_a_split_response_counts_its_largest_usage_on_its_first_part() -> None:
    _, records = stored(next(read_path(SPOTTER)))
    messages = [r.message.to_wire() for r in records if r.message is not None]
    # A response of five parts whose output count rises only on its last: 10, …, 299.
    parts = [m for m in messages if m.get("responseId") == "msg_01Aci2WjhVxhEoZK5GJvwVrD"]
    assert [p[claude_code.KEY]["line"]["message"]["usage"]["output_tokens"] for p in parts] == [
        10,
        10,
        10,
        10,
        299,
    ]
    assert parts[0]["usage"] == {"input": 1, "output": 299, "cacheRead": 29509, "cacheWrite": 5601}
    assert all("usage" not in p for p in parts[1:])
    # Every response is counted once, with its largest snapshot.
    expected = response_usage(SPOTTER)
    counted = {m["responseId"]: m["usage"] for m in messages if "usage" in m}
    assert counted == expected


def test_a_long_held_response_ends_early_and_still_counts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claude_code, "HOLD_LIMIT", 3)
    call = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    path = tmp_path / "s.jsonl"
    progress = [line(type="progress", uuid=f"p{i}", parentUuid="a1", data={}) for i in range(4)]
    lines = [user("u1", None, "go"), assistant("a1", "u1", [call], "m1"), *progress]
    lines += [assistant("a2", "p3", [{"type": "text", "text": "more"}], "m1")]
    path.write_text("\n".join(lines) + "\n")
    _, records = stored(next(read_path(path)))
    assert [r.uuid for r in records] == ["u1", "a1", "p0", "p1", "p2", "p3", "a2"]
    usages = [r.message.usage for r in records if r.message is not None]
    assert [u.output if u else None for u in usages] == [None, 5, None]


@pytest.mark.needs_corpus
def test_subagents_are_child_sessions_that_inherit_nothing() -> None:
    sessions = list(read_path(SPOTTER))
    for s in sessions:
        list(s.records)
    main, *children = sessions
    assert main.key == f"claude-code:{SPOTTER.stem}" and main.parent_key is None
    assert [c.key.rsplit("/", 1)[1] for c in children] == ["agent-a2898e3", "agent-acompact-e1f845"]
    assert all(c.parent_key == main.key and c.fork_seq == 0 for c in children)


@pytest.mark.needs_corpus
def test_a_garbage_line_is_kept_and_reported_with_its_line_number(tmp_path: Path) -> None:
    lines = (CLAUDE / "spotter" / "short.jsonl").read_bytes().split(b"\n")
    lines.insert(5, b'{"type": "user", "broken')
    path = tmp_path / "short.jsonl"
    path.write_bytes(b"\n".join(lines))
    session = next(read_path(path))
    info, records = stored(session)
    assert [str(b).split(": ", 1)[0] for b in session.bad_lines] == [f"{path}:6"]
    assert (
        records[5].entry is not None and records[5].entry["rawLine"] == '{"type": "user", "broken'
    )
    (out,) = FMT.write(info, records, tmp_path / "out")
    assert out.read_bytes().split(b"\n")[5] == b'{"type": "user", "broken'
    assert json_lines(out) == json_lines(path)

    with pytest.raises(ImportFormatError) as caught:
        list(next(read_path(path, strict=True)).records)
    assert (caught.value.path, caught.value.line) == (str(path), 6)
    assert str(caught.value).startswith(f"{path}:6: not valid JSON")


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(user("u1", None, "hi") + "\n" + user("u2", "u1", "there")[:-7])
    session = next(read_path(path, strict=True))
    records = list(session.records)
    assert [r.uuid for r in records] == ["u1"] and session.bad_lines == []


def test_bom_crlf_and_line_separators_inside_a_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    text = "one\u2028two\u2029three\x85four"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + user("u1", None, text).encode()
        + b"\r\n"
        + user("u2", "u1", "b").encode()
        + b"\r\n"
    )
    assert detect(path) is FMT
    session = next(read_path(path, strict=True))
    info, records = stored(session)
    assert [r.uuid for r in records] == ["u1", "u2"]
    assert records[0].message is not None and records[0].message.text() == text
    (out,) = FMT.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_nul_and_lone_surrogates_survive(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user",'
        '"content":"a\\u0000b\\ud800c\\udfff"},"extra":"\\udc80"}\n'
    )
    info, records = stored(next(read_path(path, strict=True)))
    assert records[0].message is not None
    assert records[0].message.text() == "a\x00b\ud800c\udfff"
    (out,) = FMT.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)
    assert json_lines(out)[0]["extra"] == "\udc80"


def test_an_empty_file_gives_an_empty_session(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    sessions = list(FMT.read(path))
    info, records = stored(sessions[0])
    assert len(sessions) == 1 and records == []
    (out,) = FMT.write(info, records, tmp_path / "out")
    assert out.read_bytes() == b""


def test_a_rewind_keeps_the_last_branch_and_drops_no_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        "\n".join(
            [
                user("u1", None, "first"),
                assistant("a1", "u1", [{"type": "text", "text": "old answer"}], "m1"),
                user("u2", "a1", "old follow-up"),
                # rewind: a new answer to u1
                assistant("a2", "u1", [{"type": "text", "text": "new answer"}], "m2"),
                user("u3", "a2", "new follow-up"),
            ]
        )
        + "\n"
    )
    info, records = stored(next(read_path(path)))
    assert [r.kind for r in records] == ["message"] * 5 + ["tombstone"] * 2
    hidden = {r.tombstone.target_seq for r in records if r.tombstone is not None}
    assert {records[s - 1].uuid for s in hidden} == {"a1", "u2"}
    (out,) = FMT.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_parallel_tool_results_on_side_branches_stay_in_the_context(tmp_path: Path) -> None:
    call = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    call2 = {"type": "tool_use", "id": "t2", "name": "Read", "input": {}}
    path = tmp_path / "s.jsonl"
    path.write_text(
        "\n".join(
            [
                user("u1", None, "go"),
                assistant("a1", "u1", [call], "m1"),
                line(type="progress", uuid="p1", parentUuid="a1", data={}),
                assistant("a2", "p1", [call2], "m1"),
                result("r1", "a1", "t1", "one"),
                result("r2", "a2", "t2", "two"),
            ]
        )
        + "\n"
    )
    _, records = stored(next(read_path(path)))
    assert [r.kind for r in records].count("tombstone") == 0
    messages = [r.message.to_wire() for r in records if r.message is not None]
    merged = merge_split_responses(messages)
    assert [m["role"] for m in merged] == ["user", "assistant", "toolResult", "toolResult"]
    assert [b["id"] for b in merged[1]["content"]] == ["t1", "t2"]
    assert merged[2]["toolName"] == "Read"


def cersei(kind: str, uuid: str, parent: str | None, text: str) -> str:
    return cersei_line(kind, uuid, parent, text, cwd="/project")


def test_cersei_parts_are_stitched_and_a_tombstone_hides_across_parts(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    cersei_parts(folder, cwd="/project")
    (folder / "abc_part3.jsonl").write_text(
        line(type="summary", uuid="e5", summary="User asked…", messages_compacted=2) + "\n"
    )
    sessions = list(read_path(folder))
    assert [s.key for s in sessions] == ["claude-code:abc"]
    info, records = stored(sessions[0])
    assert [r.kind for r in records] == ["message", "message", "message", "tombstone", "entry"]
    assert records[3].tombstone is not None and records[3].tombstone.target_seq == 2
    assert [r.uuid for r in records[:3]] == ["a1", "a2", "a3"]
    assert records[2].message is not None and records[2].message.parent_uuid == "a2"

    out = tmp_path / "out"
    written = FMT.write(info, records, out)
    assert sorted(p.name for p in written) == ["abc.jsonl", "abc_part2.jsonl", "abc_part3.jsonl"]
    for path in written:
        assert json_lines(path) == json_lines(folder / path.name)


def test_a_part_file_alone_reads_the_whole_session(tmp_path: Path) -> None:
    (tmp_path / "abc.jsonl").write_text(cersei("user", "a1", None, "hi") + "\n")
    (tmp_path / "abc_part2.jsonl").write_text(cersei("assistant", "a2", "a1", "yo") + "\n")
    (session,) = read_path(tmp_path / "abc_part2.jsonl")
    assert [r.uuid for r in session.records] == ["a1", "a2"]


def test_a_native_session_exports_as_claude_code(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    call = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": 1}}
    path.write_text(
        user("u1", None, "go")
        + "\n"
        + assistant("a1", "u1", [call])
        + "\n"
        + result("r1", "a1", "t1", "x")
        + "\n"
    )
    info, records = stored(next(read_path(path)))
    bare = [
        Record(
            **{
                **r.model_dump(),
                "message": r.message.model_copy(update={"claudeCode": None}),
            }
        )
        if r.message is not None
        else r
        for r in records
    ]
    for r in bare:
        assert r.message is not None
        assert r.message.to_wire().get("claudeCode") is None
    (out,) = FMT.write(info, bare, tmp_path / "out")
    lines = json_lines(out)
    assert [x["type"] for x in lines] == ["user", "assistant", "user"]
    assert lines[1]["message"]["content"] == [call]
    assert lines[2]["message"]["content"][0]["tool_use_id"] == "t1"


def test_reading_is_streamed_with_flat_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    filler = "x" * 2000
    with path.open("w") as out:
        parent = None
        for i in range(20_000):
            uuid = f"u{i}"
            out.write(user(uuid, parent, f"{i} {filler}") + "\n")
            parent = uuid
    assert path.stat().st_size > 40_000_000
    session = next(FMT.read(path))
    assert inspect.isgenerator(session.records)
    tracemalloc.start()
    try:
        count = 0
        for record in session.records:
            count += record.kind == "message"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    # The file is 40 MB; what stays is the branch index (~a few hundred bytes a line).
    assert peak < 12_000_000, peak


def branchy_files(folder: Path) -> list[Path]:
    """Files whose reading needs the branch index: a rewind, parallel calls on side
    branches, a forward link, a split response, cersei parts with a tombstone."""
    folder.mkdir()
    call = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    call2 = {"type": "tool_use", "id": "t2", "name": "Read", "input": {}}
    rewind = [
        user("u1", None, "first"),
        assistant("a1", "u1", [call], "m1"),
        line(type="progress", uuid="p1", parentUuid="a1", data={}),
        assistant("a2", "p1", [call2], "m1"),
        result("r1", "a1", "t1", "one"),
        result("r2", "a2", "t2", "two"),
        user("u2", "r2", "old follow-up"),
        assistant("a3", "u1", [{"type": "text", "text": "new answer"}], "m2"),  # rewind
        user("u4", "zz", "forward link"),
        user("zz", "a3", "linked later"),
        user("u3", "u4", "new follow-up"),
    ]
    (folder / "rewind.jsonl").write_text("\n".join(rewind) + "\n")
    (folder / "abc.jsonl").write_text(
        cersei("user", "c1", None, "fix the tests") + "\n" + cersei("assistant", "c2", "c1", "ok")
    )
    (folder / "abc_part2.jsonl").write_text(
        line(type="tombstone", deleted_uuid="c2", timestamp="2026-04-03T10:01:00Z") + "\n"
    )
    generated = [g.source for g in generated_tree(folder / "generated") if g.case in CC_CASES]
    real = corpus_files() if corpus_present() else []
    return [folder / "rewind.jsonl", folder / "abc.jsonl", *generated, *real]


def test_the_branch_index_moved_to_disk_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = branchy_files(tmp_path / "in")

    def read_all() -> list[list[Any]]:
        return [list(s.records) for path in files for s in read_path(path)]

    in_memory = read_all()
    assert any(r.kind == "tombstone" for records in in_memory for r in records)
    monkeypatch.setattr(claude_code, "SPILL_CHECK", 1)
    monkeypatch.setattr(spill, "SPILL_ENTRIES", 2)
    spilled: list[spill.DiskMap] = []
    real = spill.DiskMap.__init__

    def counting(self: spill.DiskMap, items: dict[str, Any]) -> None:
        spilled.append(self)
        real(self, items)

    monkeypatch.setattr(spill.DiskMap, "__init__", counting)
    assert read_all() == in_memory
    assert len(spilled) > 10  # the indexes did move to disk


def test_a_big_file_reads_in_flat_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SPILL_ENTRIES lines the indexes live in a temporary file: the peak of reading
    40,000 lines is the peak of reading 10,000 (tracemalloc sees Python's allocations;
    SQLite's page cache, 2 MB per index at most, is outside it)."""
    monkeypatch.setattr(spill, "SPILL_ENTRIES", 2_000)

    def peak(lines: int) -> int:
        path = tmp_path / f"big-{lines}.jsonl"
        with path.open("w") as out:
            for i in range(lines):
                if i % 2:
                    call = {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {}}
                    out.write(assistant(f"a{i}", f"u{i - 1}", [call], f"m{i}") + "\n")
                else:
                    out.write(user(f"u{i}", f"a{i - 1}" if i else None, f"{i} " + "x" * 500))
                    out.write("\n")
        session = next(FMT.read(path))
        tracemalloc.start()
        try:
            count = sum(1 for _ in session.records)
            _, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert count == lines
        return top

    small, big = peak(10_000), peak(40_000)
    # What still grows: 17 bytes a line of arrays (parent, position, flags).
    assert big - small < 30_000 * 17 + 400_000, (small, big)


def test_the_line_reader_is_lazy(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(user("u1", None, "a") + "\n")
    assert inspect.isgenerator(read_lines(path))


def test_an_unknown_format_is_refused() -> None:
    from sessiondb.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="unknown format 'nope'"):
        list(read_path(CLAUDE, format="nope"))


HOSTILE = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "type",
                        "uuid",
                        "parentUuid",
                        "message",
                        "role",
                        "content",
                        "id",
                        "input",
                        "tool_use_id",
                        "source",
                        "deleted_uuid",
                        "isCompactSummary",
                        "text",
                        "x",
                    ]
                ),
                inner,
                max_size=5,
            )
        ),
        max_leaves=20,
    ).map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(HOSTILE, max_size=8))
def test_hostile_lines_become_entries_or_import_errors(lines: list[bytes]) -> None:
    folder = Path(__file__).parent / ".hypothesis-tmp"
    folder.mkdir(exist_ok=True)
    try:
        path = folder / "h.jsonl"
        data = b"\n".join(lines) + b"\n"
        path.write_bytes(data)
        session = next(ClaudeCodeFormat().read(path))
        info, records = stored(session)
        FMT.write(info, records, folder / "out")
        with pytest.raises(ImportFormatError) if session.bad_lines else _nothing():
            list(next(ClaudeCodeFormat().read(path, strict=True)).records)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
