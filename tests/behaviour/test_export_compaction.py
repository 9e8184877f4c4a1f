"""A session compacted in the database (a compaction record, then more messages) exports
to every writable file format and imports back with the same context: the summary, the
messages it keeps, the messages after it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.messages import assistant, user

from sessiondb import SessionStore


async def compacted(store: SessionStore) -> str:
    sid = (await store.create_session()).id
    await store.append(sid, [user("first question"), assistant("first answer")])
    await store.append(sid, [user("second question"), assistant("second answer")])
    await store.append_compaction(sid, summary="they asked twice", first_kept_seq=3)
    await store.append(sid, [user("after the compaction"), assistant("still here")])
    return sid


async def round_trip(db_url: str, tmp_path: Path, fmt: str) -> tuple[list[str], list[str]]:
    async with SessionStore.open(db_url) as store:
        sid = await compacted(store)
        expected = [m.text() for m in await store.context(sid)]
        paths = await store.export_session(sid, tmp_path / "out", format=fmt)
        assert paths and all(p.stat().st_size > 0 for p in paths)
        await store.delete_session(sid)  # a native file keeps the session's id
        report = await store.import_path(tmp_path / "out", format=fmt, strict=True)
        assert report.created == 1 and not report.failures and not report.bad_lines, report
        got = [m.text() for m in await store.context(report.session_ids[0])]
    assert "they asked twice" in expected[0] and "they asked twice" in got[0]
    return expected[1:], got[1:]


@pytest.mark.parametrize("fmt", ["native", "pi"])
async def test_a_compacted_session_exports_and_imports_back(
    db_url: str, tmp_path: Path, fmt: str
) -> None:
    expected, got = await round_trip(db_url, tmp_path, fmt)
    assert expected == ["second question", "second answer", "after the compaction", "still here"]
    assert got == expected


async def test_claude_code_keeps_the_summary_and_what_follows_it(
    db_url: str, tmp_path: Path
) -> None:
    # Claude Code's format has no "first kept" message: what comes after its summary line
    # is the context. Messages the compaction kept from before it are in the file, before
    # the boundary, but not in the re-imported context (README, Import and export).
    expected, got = await round_trip(db_url, tmp_path, "claude-code")
    assert got == expected[2:] == ["after the compaction", "still here"]
