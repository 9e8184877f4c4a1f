"""pi session files, versions 1 to 3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from formats_helpers import CORPUS, json_lines, stored

from sessiondb.formats import FORMATS, detect, read_path

PI = FORMATS["pi"]
LARGE = CORPUS / "pi" / "pi-mono" / "large-session.jsonl"


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "timestamp": "2025-11-20T23:33:01.550Z",
        "message": {"role": role, "content": text, "timestamp": 1},
        **extra,
    }


def test_the_corpus_session_round_trips(tmp_path: Path) -> None:
    assert detect(LARGE) is PI
    (session,) = read_path(LARGE, strict=True)
    info, records = stored(session)
    assert session.key == "pi:d703a1a9-1b7b-4fb1-b512-c9738b1fe617"
    assert info.model == "claude-sonnet-4-5"
    kinds = [r.kind for r in records]
    assert kinds.count("message") == 453 + 373 + 88 and kinds.count("entry") == 104
    roles = {r.message.role for r in records if r.message is not None}
    assert roles == {"user", "assistant", "toolResult"}
    (out,) = PI.write(info, records, tmp_path)
    assert out.name == LARGE.name
    assert json_lines(out) == json_lines(LARGE)


def test_v1_compaction_by_index_counts_the_header(tmp_path: Path) -> None:
    header = {"type": "session", "id": "s1", "timestamp": "2025-11-20T23:33:50.805Z"}
    path = write(
        tmp_path / "v1.jsonl",
        [
            header,
            msg("user", "one"),  # index 1, position 0
            msg("assistant", "two"),  # index 2, position 1
            msg("user", "three"),  # index 3, position 2
            {
                "type": "compaction",
                "timestamp": "2025-11-20T23:34:00Z",
                "summary": "S",
                "firstKeptEntryIndex": 3,
                "tokensBefore": 42,
            },
            msg("user", "four"),
        ],
    )
    info, records = stored(next(read_path(path, strict=True)))
    compaction = records[3].compaction
    assert compaction is not None and compaction.first_kept_seq == 3
    assert records[2].message is not None and records[2].message.text() == "three"
    assert compaction.tokens_before == 42
    assert records[0].message is not None and records[0].message.content[0].type == "text"
    (out,) = PI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_v3_tree_keeps_the_last_branch_and_compaction_by_id(tmp_path: Path) -> None:
    header = {"type": "session", "version": 3, "id": "s3", "timestamp": "2025-11-20T23:33:50Z"}
    path = write(
        tmp_path / "v3.jsonl",
        [
            header,
            msg("user", "one", id="a", parentId=None),
            msg("assistant", "old", id="b", parentId="a"),
            msg("assistant", "new", id="c", parentId="a"),
            {"type": "label", "id": "l", "parentId": "c", "targetId": "c", "label": "x"},
            {
                "type": "compaction",
                "id": "d",
                "parentId": "l",
                "summary": "S",
                "firstKeptEntryId": "c",
                "tokensBefore": 9,
            },
            msg("user", "after", id="e", parentId="d"),
        ],
    )
    info, records = stored(next(read_path(path, strict=True)))
    assert [r.kind for r in records] == [
        "message",
        "message",
        "message",
        "entry",
        "compaction",
        "message",
        "tombstone",
    ]
    assert [r.uuid for r in records[:6]] == ["a", "b", "c", "l", "d", "e"]
    tombstone = records[6].tombstone
    assert tombstone is not None and tombstone.target_seq == 2  # "old" is off the branch
    compaction = records[4].compaction
    assert compaction is not None and compaction.first_kept_seq == 3
    (out,) = PI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_an_unknown_role_is_kept_as_an_entry(tmp_path: Path) -> None:
    header = {"type": "session", "version": 2, "id": "s", "timestamp": "2025-11-20T23:33:50Z"}
    path = write(tmp_path / "x.jsonl", [header, msg("bashExecution", "ls", id="a")])
    info, records = stored(next(read_path(path)))
    assert [r.kind for r in records] == ["entry"]
    (out,) = PI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)
