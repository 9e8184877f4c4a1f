"""``import_sessions`` refuses what it would drop, and names the item that failed."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from helpers.sql import scalar

from sessiondb import NewSession, SessionStore
from sessiondb.errors import InvalidInputError

GOOD = {"name": "ok", "messages": [{"role": "user", "content": "hi"}]}


async def rows(store: SessionStore) -> tuple[int, int]:
    sessions = await scalar(store, "SELECT count(*) FROM sessiondb_sessions")
    records = await scalar(store, "SELECT count(*) FROM sessiondb_records")
    return int(sessions), int(records)


async def test_an_unknown_key_is_refused_and_the_item_named(store: SessionStore) -> None:
    with pytest.raises(InvalidInputError, match=r"(?s)^session 1: .*nmae.*Extra inputs"):
        await store.import_sessions([GOOD, {"nmae": "typo", "messages": []}])
    assert await rows(store) == (0, 0)


async def test_a_bad_message_names_its_session_and_its_index(store: SessionStore) -> None:
    bad = {"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}
    with pytest.raises(InvalidInputError, match=r"(?s)^session 2: .*message 1: role must be"):
        await store.import_sessions([GOOD, GOOD, bad])
    assert await rows(store) == (0, 0)


async def test_known_keys_mappings_and_models_still_import(store: SessionStore) -> None:
    mapping = MappingProxyType({"role": "assistant", "content": [{"type": "text", "text": "y"}]})
    ids = await store.import_sessions(
        [
            {**GOOD, "model": "m", "source": "cron", "metadata": {"k": 1}},
            NewSession(messages=[{"role": "user", "content": "x"}, mapping]),
        ]
    )
    assert len(ids) == 2
    first = await store.get_session(ids[0])
    assert (first.name, first.model, first.source, first.metadata) == ("ok", "m", "cron", {"k": 1})
    assert [m.text() for m in await store.context(ids[1])] == ["x", "y"]


def test_new_session_forbids_extra_keys() -> None:
    with pytest.raises(ValueError, match="nmae"):
        NewSession.model_validate({"nmae": "x"})
    with pytest.raises(ValueError, match="message 0: expected an object"):
        NewSession(messages=[3])
