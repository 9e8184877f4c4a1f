"""A project directory is listed once per import, not once per file: with one listing
per file, an import of 10,000 files tested 10^8 names for part files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sessiondb import SessionStore
from sessiondb.formats import claude_code


def _line(stem: str, i: int) -> str:
    role = "user" if i % 2 == 0 else "assistant"
    return json.dumps(
        {
            "type": role,
            "uuid": f"{stem}-{i}",
            "parentUuid": f"{stem}-{i - 1}" if i else None,
            "sessionId": stem,
            "timestamp": "2026-01-01T00:00:00Z",
            "message": {"role": role, "content": [{"type": "text", "text": f"{stem} {i}"}]},
        }
    )


async def test_the_project_directory_is_listed_once(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for f in range(60):
        (project / f"s{f:02d}.jsonl").write_text("\n".join(_line(f"s{f:02d}", i) for i in range(4)))
    # One session continued in part files, which must still be stitched in order.
    (project / "s00_part2.jsonl").write_text(_line("s00", 4) + "\n" + _line("s00", 5))
    (project / "s00_part3.jsonl").write_text(_line("s00", 6))

    listed: list[str] = []
    scandir = os.scandir

    def counting(path: Any = ".") -> Any:
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(claude_code.os, "scandir", counting)
    report = await store.import_path(project)
    assert report.failures == [] and report.created == 60
    assert report.records == 60 * 4 + 3
    assert listed.count(str(project)) == 1, len(listed)
    first = report.session_ids[0]
    texts = [r.message.text() for r in await store.records(first) if r.message]
    assert texts == [f"s00 {i}" for i in range(7)]

    # Outside an import, a lookup lists the directory afresh (no stale snapshot).
    (project / "s01_part2.jsonl").write_text(_line("s01", 4))
    _, parts = claude_code.session_parts(project / "s01.jsonl")
    assert [n for n, _ in parts] == [1, 2]
