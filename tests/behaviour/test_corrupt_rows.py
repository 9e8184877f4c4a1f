"""A row that sessiondb did not write (a payload changed by hand, an old shape, the wrong
types) is refused with :class:`CorruptRecordError`, never returned half-built; a row that
validation still reads (an older shape it coerces) reads as before. The rows are changed
with plain SQL on both backends.

A message's text is checked where the message is first touched, not by the read (the
contract since the check moved there: a read of 200 messages cost twice its SELECT with
the check): ``context()`` and ``records()`` return a corrupt message, and its first touch,
whichever way, raises :class:`CorruptRecordError`, as does every touch after it. Never
pydantic's or json's own error, never a message half-built. Overlays (compactions,
prunes) are still refused by the read."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from helpers import sql

from sessiondb import (
    CorruptRecordError,
    DatabaseError,
    Message,
    SessionDBError,
    SessionStore,
    jsoncodec,
)

BAD_MESSAGES = [
    "not json",
    "",
    '{"role": "user", "content": [',
    "[1, 2]",
    '"a string"',
    '{"content": [{"type": "text", "text": "no role"}]}',
    '{"role": "system", "content": []}',
    '{"role": "user", "content": [{"type": "text", "text": 1}]}',
    '{"role": "user", "content": [{"type": "text"}]}',
    '{"role": "assistant", "content": [{"type": "toolCall", "name": "ls"}]}',
    '{"role": "user", "content": ["a block that is a string"]}',
    '{"role": "user", "content": [{"text": "a block without a type"}]}',
    '{"role": "user", "content": [{"type": ["text"], "text": "a list for a type"}]}',
    '{"role": "user", "content": 5}',
    '{"role": "user", "content": [], "usage": {"input": "many"}}',
    '{"role": "user", "content": [], "usage": 7}',
    '{"role": "user", "content": [], "isError": "maybe"}',
    '{"role": "user", "content": [], "toolCallId": 3}',
]


async def _session(store: SessionStore) -> str:
    sid = (await store.create_session()).id
    await store.append(
        sid,
        [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "second"},
            {"role": "user", "content": "third"},
        ],
    )
    return sid


async def _set_payload(store: SessionStore, sid: str, seq: int, payload: str) -> None:
    await sql.execute(
        store,
        "UPDATE sessiondb_records SET payload = :payload WHERE session_id = :sid AND seq = :seq",
        payload=payload,
        sid=sid,
        seq=seq,
    )


# Every way of first touching a message a read returned.
TOUCHES: dict[str, Callable[[Message], Any]] = {
    "field": lambda m: m.role,
    "content": lambda m: list(m.content),
    "text()": lambda m: m.text(),
    "to_wire": lambda m: m.to_wire(),
    "model_dump": lambda m: m.model_dump(),
    "model_dump_json": lambda m: m.model_dump_json(),
    "model_extra": lambda m: m.model_extra,
    "model_fields_set": lambda m: m.model_fields_set,
    "==": lambda m: m == Message(role="user", content=[]),
    "== from the left": lambda m: Message(role="user", content=[]) == m,
    "repr": repr,
    "iteration": lambda m: list(m),
    "copy": copy.copy,
    "model_copy": lambda m: m.model_copy(),
    "pickle": lambda m: pickle.dumps(m),
    "setattr": lambda m: setattr(m, "uuid", "x"),
}


def _refused(touch: Callable[[], Any]) -> None:
    with pytest.raises(CorruptRecordError) as caught:
        touch()
    assert isinstance(caught.value, DatabaseError)
    assert isinstance(caught.value, SessionDBError)
    assert isinstance(caught.value, ValueError)
    assert "stored message" in str(caught.value)


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=range(len(BAD_MESSAGES)))
async def test_a_corrupt_message_row_is_refused_where_first_touched(
    store: SessionStore, bad: str
) -> None:
    sid = await _session(store)
    await _set_payload(store, sid, 2, bad)
    reads = {
        "context": lambda got: got[1],
        "context last=2": lambda got: got[0],
        "records": lambda got: got[1].message,
        "records 2..2": lambda got: got[0].message,
    }
    for touch in TOUCHES.values():
        for (name, pick), read in zip(
            reads.items(),
            (
                store.context(sid),
                store.context(sid, last=2),
                store.records(sid),
                store.records(sid, kinds=["message"], from_seq=2, to_seq=2),
            ),
            strict=True,
        ):
            got = await read
            message = pick(got)
            _refused(lambda message=message, touch=touch: touch(message))
            # Not built half-way by the touch that failed: every later touch fails too.
            for again in ("field", "to_wire", "model_dump", "repr"):
                _refused(lambda message=message, again=again: TOUCHES[again](message))
            if name.startswith("records"):
                record = got[-1] if name == "records 2..2" else got[1]
                _refused(record.model_dump)
                _refused(record.model_dump_json)
    # The rows around it still read, and nothing else changed.
    assert [r.seq for r in await store.records(sid, from_seq=3)] == [3]
    assert [m.text() for m in await store.context(sid, last=1)] == ["third"]


async def test_context_json_hands_the_stored_text_on_unparsed(store: SessionStore) -> None:
    sid = await _session(store)
    wire = {"role": "user", "content": [{"type": "text", "text": 1}]}
    await _set_payload(store, sid, 2, jsoncodec.dumps(wire))
    # context_json never parses the messages it returns: the text is what is stored.
    assert jsoncodec.loads(await store.context_json(sid))[1] == wire


@pytest.mark.parametrize(
    ("kind", "bad"),
    [
        ("compaction", '{"summary": 5, "firstKeptSeq": 2}'),
        ("compaction", "{"),
        ("compaction", '{"firstKeptSeq": 2}'),
        ("prune", '{"seqs": "all", "marker": "x"}'),
        ("prune", "[]"),
    ],
)
async def test_a_corrupt_overlay_row_is_refused(store: SessionStore, kind: str, bad: str) -> None:
    sid = (await store.create_session()).id
    await store.append(
        sid,
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "c1", "name": "ls", "arguments": {}}],
            },
            {"role": "toolResult", "toolCallId": "c1", "content": "out"},
            {"role": "user", "content": "next"},
        ],
    )
    if kind == "compaction":
        record = await store.append_compaction(sid, summary="s", first_kept_seq=4)
    else:
        record = await store.append_prune(sid, [3])
    await _set_payload(store, sid, record.seq, bad)
    with pytest.raises(CorruptRecordError, match=f"stored {kind}"):
        await store.context(sid)
    with pytest.raises(CorruptRecordError, match=f"stored {kind}"):
        await store.records(sid)
    assert len(await store.records(sid, kinds=["message"])) == 4


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        # An older shape: a string content reads as one text block, as it always did.
        ('{"role": "user", "content": "plain"}', {"role": "user", "content": "plain"}),
        # Values validation coerces read as they always did.
        (
            '{"role": "user", "content": [], "usage": {"input": "3", "output": 2.0}}',
            {"role": "user", "content": [], "usage": {"input": 3, "output": 2}},
        ),
        (
            '{"role": "toolResult", "toolCallId": "c", "content": [], "isError": 1}',
            {"role": "toolResult", "toolCallId": "c", "content": [], "isError": True},
        ),
    ],
)
async def test_an_older_shape_that_validation_reads_reads_as_before(
    store: SessionStore, stored: str, expected: dict[str, Any]
) -> None:
    sid = await _session(store)
    await _set_payload(store, sid, 2, stored)
    want = Message.model_validate(expected)
    assert want == Message.model_validate(jsoncodec.loads(stored))
    assert (await store.context(sid))[1] == want
    assert (await store.records(sid))[1].message == want


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [
        ("metadata_json", "[1, 2]", "metadata"),
        ("metadata_json", "{not json", "stored row"),
        ("metadata_json", '"a string"', "metadata"),
        ("name", None, None),  # a column that may be empty reads as empty
    ],
    ids=repr,
)
async def test_a_corrupt_sessions_row_is_refused_by_every_read_of_it(
    store: SessionStore, column: str, value: str | None, named: str | None
) -> None:
    """A sessions row sessiondb did not write is a :class:`CorruptRecordError` naming the
    session (never pydantic's or json's own error), from a listing and from a read of
    the one session; the other sessions of a listing are not at fault."""
    sid = (await store.create_session(name="kept", metadata={"k": 1})).id
    await sql.execute(
        store, f"UPDATE sessiondb_sessions SET {column} = :v WHERE id = :sid", v=value, sid=sid
    )
    if named is None:
        assert (await store.get_session(sid)).name is None
        return
    for read in (store.list_sessions, lambda: store.get_session(sid)):
        with pytest.raises(CorruptRecordError, match=f"session '{sid}'.*{named}") as raised:
            await read()
        assert isinstance(raised.value, SessionDBError)
