"""Findings of the boundary review (issue 8) that the fuzz test does not reach: each is
refused with a sessiondb error naming the argument, and nothing is written."""

from __future__ import annotations

import pytest
from helpers import sql

from sessiondb import ConfigurationError, InvalidInputError, SessionNotFoundError, SessionStore

MISSING = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


async def test_an_empty_append_to_a_missing_session_is_not_found(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.append(MISSING, [])
    sid = (await store.create_session()).id
    assert await store.append(sid, []) == []


async def test_compaction_file_lists_must_be_lists(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    for name, value in (("read_files", "abc"), ("modified_files", b"x"), ("read_files", 0.5)):
        with pytest.raises(InvalidInputError, match=name):
            await store.append_compaction(sid, summary="s", first_kept_seq=2, **{name: value})
    assert await sql.scalar(store, "SELECT count(*) FROM sessiondb_records") == 2
    record = await store.append_compaction(
        sid, summary="s", first_kept_seq=2, read_files=("a.py",), modified_files=["b.py"]
    )
    assert record.compaction is not None and record.compaction.read_files == ["a.py"]


async def test_a_namespace_with_a_lone_surrogate_is_refused_at_open() -> None:
    with pytest.raises(ConfigurationError, match="surrogate"):
        await SessionStore.connect(":memory:", namespace="\ud800")
