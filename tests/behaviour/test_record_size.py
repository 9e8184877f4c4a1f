"""``max_record_bytes``: a record over the store's limit is refused with an error naming
its size and the limit (and ``path:line`` on a file import); nothing is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import sql

from sessiondb import ConfigurationError, InvalidInputError, SessionStore

LIMIT = 2000


@pytest.fixture
async def small(store_url: str) -> AsyncIterator[SessionStore]:
    """A store on the test's database that takes records of up to LIMIT bytes."""
    async with sql.store_on(store_url, max_record_bytes=LIMIT) as s:
        yield s


async def _rows(store: SessionStore) -> tuple[Any, ...]:
    return (
        await sql.scalar(store, "SELECT count(*) FROM sessiondb_sessions"),
        await sql.scalar(store, "SELECT count(*) FROM sessiondb_records"),
        await sql.scalar(store, "SELECT coalesce(sum(last_seq), 0) FROM sessiondb_sessions"),
    )


async def test_appends_over_the_limit_are_refused_and_write_nothing(small: SessionStore) -> None:
    sid = (await small.create_session()).id
    await small.append(sid, {"role": "user", "content": "x" * 1800})  # under: stored
    before = await _rows(small)
    too_big = {"role": "user", "content": "x" * 2500}
    for messages in ([too_big], [{"role": "user", "content": "fine"}, too_big]):
        with pytest.raises(InvalidInputError, match=rf"bytes as stored, over .*{LIMIT}") as err:
            await small.append(sid, messages)
        assert f"message {len(messages) - 1} is 25" in str(err.value)
    # Bytes, not characters: 700 three-byte characters are over, 600 are not.
    with pytest.raises(InvalidInputError, match="max_record_bytes"):
        await small.append(sid, {"role": "user", "content": "€" * 700, "uuid": "u-1"})
    assert await _rows(small) == before
    (ok,) = await small.append(sid, {"role": "user", "content": "€" * 600})
    assert ok.seq == 2


async def test_overlays_over_the_limit_are_refused(small: SessionStore) -> None:
    sid = (await small.create_session()).id
    await small.append(sid, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    before = await _rows(small)
    with pytest.raises(InvalidInputError, match=r"compaction is .* bytes"):
        await small.append_compaction(sid, summary="s" * 3000, first_kept_seq=2)
    with pytest.raises(InvalidInputError, match=r"tombstone is .* bytes"):
        await small.tombstone(sid, 1, reason="r" * 3000)
    assert await _rows(small) == before


async def test_import_sessions_over_the_limit_is_refused_whole(small: SessionStore) -> None:
    before = await _rows(small)
    sessions = [
        {"messages": [{"role": "user", "content": "fine"}]},
        {"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 3000}]},
    ]
    with pytest.raises(InvalidInputError, match=rf"session 1: message 1 is \d+ bytes.*{LIMIT}"):
        await small.import_sessions(sessions)
    assert await _rows(small) == before


async def test_import_path_names_the_line_over_the_limit(
    small: SessionStore, store_url: str, tmp_path: Path
) -> None:
    # Written by a store of its own without the small limit, then imported.
    async with SessionStore.open(":memory:") as writer:
        await writer.migrate()
        sid = (await writer.create_session(name="big")).id
        await writer.append(
            sid,
            [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "y" * 5000},
                {"role": "user", "content": "bye"},
            ],
        )
        (session_file, *_) = [
            p for p in await writer.export_session(sid, tmp_path) if p.suffix == ".jsonl"
        ]
    lines = session_file.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if "y" * 5000 in line)
    before = await _rows(small)
    report = await small.import_path(session_file.parent)
    assert not report.ok
    (failure,) = report.failures
    # A native file's seqs leave no room for a hole: the session fails (another
    # format's file skips the line and reports it: tests/behaviour/test_import_hostile.py).
    assert str(failure).startswith(f"{session_file}:{number}: the line is ")
    assert f"over {LIMIT} bytes, the store's max_record_bytes" in str(failure)
    assert await _rows(small) == before
    # Under a limit it fits, the same file imports.
    if store_url != ":memory:":  # another store on ":memory:" is another database
        async with SessionStore.open(store_url, namespace="roomy") as roomy:
            assert (await roomy.import_path(session_file.parent)).ok


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "10", 2**40])
async def test_a_bad_limit_is_a_configuration_error(limit: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_record_bytes"):
        await SessionStore.connect(":memory:", max_record_bytes=limit)
