"""Detection and directory walking over a tree that mixes formats."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.corpus import CORPUS
from helpers.formats import SESSION_ID, stored

from sessiondb.formats import FORMATS, read_path


@pytest.mark.needs_corpus
def test_a_tree_mixing_formats_gives_each_session_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(CORPUS / "claude-code" / "spotter", tree / "claude")
    shutil.copytree(CORPUS / "pi", tree / "pi")
    info, records = stored(next(read_path(CORPUS / "claude-code" / "spotter" / "short.jsonl")))
    FORMATS["native"].write(info, records, tree / "native")
    (tree / "notes.jsonl").write_text('{"hello": "world"}\n')
    (tree / "README.md").write_text("not a session\n")

    sessions = list(read_path(tree))
    got = [(s.format, s.key) for s in sessions]
    main = "claude-code:4d5611e5-241a-462a-8d15-5122611a9569"
    assert got == [
        ("claude-code", main),
        ("claude-code", f"{main}/agent-a2898e3"),
        ("claude-code", f"{main}/agent-acompact-e1f845"),
        ("claude-code", "claude-code:short"),
        ("claude-code", "claude-code:tool_heavy"),
        ("native", f"native:{SESSION_ID}"),
        ("pi", "pi:d703a1a9-1b7b-4fb1-b512-c9738b1fe617"),
    ]
    for s in sessions:
        assert sum(1 for _ in s.records) > 0
        assert s.bad_lines == []
