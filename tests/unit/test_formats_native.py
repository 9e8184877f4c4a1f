"""The spec's own format: export then import gives identical records back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.corpus import CORPUS
from helpers.formats import SESSION_ID, info_of, json_lines, stored, to_records

from sessiondb.errors import ImportFormatError
from sessiondb.formats import FORMATS, detect, read_path
from sessiondb.models import Record
from sessiondb.transfer import session_id_for

NATIVE = FORMATS["native"]


def native_round_trip(records: list[Record], info_path: Path, tmp_path: Path) -> list[Record]:
    session = next(read_path(info_path))
    info = info_of(session)
    NATIVE.write(info, records, tmp_path)
    folder = tmp_path / SESSION_ID
    assert detect(folder) is NATIVE
    (again,) = read_path(folder, strict=True)
    return to_records(again.records, SESSION_ID, again.fork_seq or 0)


@pytest.mark.parametrize(
    "path",
    [
        CORPUS / "claude-code" / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
        CORPUS / "claude-code" / "claude-code-log" / "edge_cases.jsonl",
        CORPUS / "claude-code" / "agent-sessions" / "small.jsonl",
    ],
    ids=lambda p: p.name,
)
@pytest.mark.needs_corpus
def test_native_export_then_import_gives_identical_records(path: Path, tmp_path: Path) -> None:
    _, records = stored(next(read_path(path)))
    kinds = {r.kind for r in records}
    assert {"message", "entry"} <= kinds
    again = native_round_trip(records, path, tmp_path)
    assert [r.model_dump() for r in again] == [r.model_dump() for r in records]
    # The file round-trips too, line by line.
    out = tmp_path / "second"
    first_file = tmp_path / SESSION_ID / "session.jsonl"
    NATIVE.write(info_of(next(read_path(path))), again, out)
    assert json_lines(out / SESSION_ID / "session.jsonl") == json_lines(first_file)


@pytest.mark.needs_corpus
def test_lines_follow_the_spec(tmp_path: Path) -> None:
    path = CORPUS / "claude-code" / "spotter" / "short.jsonl"
    info, records = stored(next(read_path(path)))
    NATIVE.write(info, records, tmp_path)
    lines = json_lines(tmp_path / SESSION_ID / "session.jsonl")
    assert [x["seq"] for x in lines] == list(range(1, len(records) + 1))
    assert all(x["schemaVersion"] == 1 and x["timestamp"].endswith("Z") for x in lines)
    message = next(x for x in lines if x["recordType"] == "message")
    assert isinstance(message["content"], list) and message["role"] in ("user", "assistant")
    meta = json.loads((tmp_path / SESSION_ID / "metadata.json").read_text())
    assert meta["id"] == SESSION_ID and meta["source"] == "interactive"


def test_fork_point_and_parent_travel_in_metadata(tmp_path: Path) -> None:
    folder = tmp_path / "01J9Z3K7Q8R2V5X4W6Y0A1B2C4"
    folder.mkdir()
    (folder / "metadata.json").write_text(
        json.dumps({"id": folder.name, "parentId": SESSION_ID, "forkSeq": 3, "name": "f"})
    )
    (folder / "session.jsonl").write_text(
        json.dumps(
            {
                "recordType": "message",
                "schemaVersion": 1,
                "seq": 4,
                "timestamp": "2025-02-11T10:00:00Z",
                "role": "user",
                "content": [{"type": "text", "text": "hi"}],
            }
        )
        + "\n"
        + json.dumps(
            {
                "recordType": "tombstone",
                "schemaVersion": 1,
                "seq": 5,
                "timestamp": "2025-02-11T10:00:01Z",
                "targetSeq": 2,
            }
        )
        + "\n"
    )
    (session,) = read_path(tmp_path)
    records = list(session.records)
    assert session.parent_key == f"native:{SESSION_ID}" and session.fork_seq == 3
    assert session.details.name == "f"
    # Position -1 is seq 3 + (-2) + 1 = 2: a record the fork inherits.
    assert [r.kind for r in records] == ["message", "tombstone"] and records[1].target == -2


def test_a_seq_out_of_order_is_a_bad_line(tmp_path: Path) -> None:
    folder = tmp_path / SESSION_ID
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"id": SESSION_ID}))
    line = {"recordType": "entry", "schemaVersion": 1, "seq": 7, "timestamp": "x", "entry": {}}
    (folder / "session.jsonl").write_text(json.dumps(line) + "\n")
    (session,) = read_path(folder)
    assert [r.kind for r in session.records] == ["entry"]
    assert [b.line for b in session.bad_lines] == [1]
    assert "seq 7 out of order" in session.bad_lines[0].reason
    with pytest.raises(ImportFormatError):
        list(next(read_path(folder, strict=True)).records)


@pytest.mark.needs_corpus
def test_a_session_imported_from_a_native_file_writes_the_files_id(tmp_path: Path) -> None:
    """A session imported from a native file is stored under the id derived from its
    namespace and its key ``native:<file id>``: its file is written under that file id
    (directory and ``id``). A key that is not what its id was derived from (a caller's
    own, another namespace's, a bad id), or none, leaves the session's own id."""
    path = CORPUS / "claude-code" / "spotter" / "short.jsonl"
    key = f"native:{SESSION_ID}"
    derived = session_id_for("default", key)
    info, records = stored(next(read_path(path)), derived)
    keyed = info.model_copy(update={"key": key})
    paths = NATIVE.write(keyed, records, tmp_path / "keyed")
    assert [p.parent.name for p in paths] == [SESSION_ID, SESSION_ID]
    meta = json.loads(paths[1].read_text())
    assert meta["id"] == SESSION_ID and "key" not in meta
    assert len(json_lines(paths[0])) == len(records)  # the stored id's records, all of them
    (again,) = read_path(paths[0].parent)
    assert again.key == key
    cases = {
        "none": keyed.model_copy(update={"key": None}),
        "caller": keyed.model_copy(update={"key": "chat-42"}),
        "other-ns": keyed.model_copy(update={"namespace": "other"}),
        "other-file": keyed.model_copy(update={"key": "native:01J9Z3K7Q8R2V5X4W6Y0A1B2C4"}),
        "bad-id": keyed.model_copy(update={"key": "native:../../etc"}),
    }
    for name, other in cases.items():
        (session_path, _) = NATIVE.write(other, records, tmp_path / name)
        assert session_path.parent == tmp_path / name / derived, name
