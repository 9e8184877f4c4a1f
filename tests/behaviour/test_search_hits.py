"""A search hit's snippet, spans and timestamp are made when first used: whatever a
caller does first with a hit (a field, a dump, ``==``, ``hash``, ``repr``, ``marked``,
a copy, a pickle), it sees the hit that a search building each one whole would return.
A payload that cannot be read raises ``CorruptRecordError`` where the hit is first
used, never a JSON or pydantic error, and never a hit half-made."""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import sql

from sessiondb import CorruptRecordError, SearchHit, SessionStore

WORD = "quasar"


def _whole(hit: SearchHit) -> SearchHit:
    """The hit validated whole from its fields, as a SearchHit built at once."""
    return SearchHit.model_validate({name: getattr(hit, name) for name in SearchHit.model_fields})


async def _hits(store: SessionStore) -> tuple[str, list[SearchHit]]:
    sid = (await store.create_session()).id
    await store.append(
        sid,
        [
            {"role": "user", "content": f"tell me about the {WORD} at the edge"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"a {WORD} is bright"},
                    {"type": "text", "text": f"A {WORD} is a very bright nucleus. " * 30},
                ],
            },
            {"role": "user", "content": f"and a <b>{WORD}</b> & its jets?"},
        ],
    )
    page = await store.search(WORD, session_id=sid)
    assert len(page.hits) == 3
    return sid, list(page.hits)


TOUCHES: dict[str, Callable[[SearchHit], Any]] = {
    "snippet": lambda h: h.snippet,
    "spans": lambda h: h.spans,
    "timestamp": lambda h: h.timestamp,
    "seq then snippet": lambda h: (h.seq, h.snippet),
    "model_dump": lambda h: h.model_dump(),
    "model_dump_json": lambda h: h.model_dump_json(),
    "==": lambda h: h == _whole(h),
    "hash": hash,
    "repr": repr,
    "marked": lambda h: h.marked(),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "model_copy": lambda h: h.model_copy(),
    "pickle": lambda h: pickle.loads(pickle.dumps(h)),
    "iter": lambda h: dict(h),
}


@pytest.mark.parametrize("touch", list(TOUCHES), ids=list(TOUCHES))
async def test_whatever_touches_a_hit_first_it_is_the_whole_hit(
    store: SessionStore, touch: str
) -> None:
    sid, hits = await _hits(store)
    reference = (await store.search(WORD, session_id=sid)).hits  # made afresh
    for hit, ref in zip(hits, reference, strict=True):
        TOUCHES[touch](hit)
        assert isinstance(hit, SearchHit)
        whole = _whole(ref)
        assert hit == whole and whole == hit
        assert hash(hit) == hash(whole)
        assert hit.model_dump() == whole.model_dump()
        assert hit.model_dump_json() == whole.model_dump_json()
        assert repr(hit) == repr(whole)
        assert list(hit.model_dump()) == list(SearchHit.model_fields)
        assert hit.marked() == whole.marked()
        assert pickle.loads(pickle.dumps(hit)) == whole
        assert hit.timestamp.utcoffset() is not None


async def test_a_hit_is_what_the_search_found(store: SessionStore) -> None:
    sid, hits = await _hits(store)
    assert {h.seq for h in hits} == {1, 2, 3}
    by_seq = {h.seq: h for h in hits}
    assert by_seq[3].snippet == f"and a <b>{WORD}</b> & its jets?"  # text, not markup
    assert by_seq[3].marked() == f"and a <b>[{WORD}]</b> & its jets?"
    assert all(h.session_id == sid and h.kind == "message" for h in hits)
    assert by_seq[2].role == "assistant" and by_seq[1].role == "user"
    for hit in hits:
        for start, end in hit.spans:
            assert hit.snippet[start:end].lower() == WORD
    with pytest.raises(AttributeError):
        hits[0].no_such_field  # noqa: B018 - the lookup is the test
    with pytest.raises(Exception, match="frozen"):
        hits[0].seq = 9  # type: ignore[misc]


async def test_threads_that_first_use_one_hit_at_once_see_the_same_hit(
    store: SessionStore,
) -> None:
    for _ in range(5):
        _, hits = await _hits(store)
        start = threading.Barrier(8)
        seen: list[Any] = []

        def touch(
            hit: SearchHit = hits[1], start: threading.Barrier = start, seen: list[Any] = seen
        ) -> None:
            start.wait()
            seen.append((hit.snippet, hit.spans, hit.timestamp, hit.model_dump()))

        threads = [threading.Thread(target=touch) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(seen) == 8 and all(s == seen[0] for s in seen)
        assert hits[1] == _whole(hits[1])


@pytest.mark.parametrize(
    "bad", ["not json", '{"role": "user", "content": [', "", "[1, 2]"], ids=range(4)
)
async def test_a_hit_whose_payload_cannot_be_read_raises_corrupt_where_first_used(
    store: SessionStore, bad: str
) -> None:
    sid, _ = await _hits(store)
    await sql.execute(
        store,
        "UPDATE sessiondb_records SET payload = :payload WHERE session_id = :sid AND seq = 3",
        payload=bad,
        sid=sid,
    )
    page = await store.search(WORD)  # the index still holds the record's words
    assert len(page.hits) == 3
    hit = next(h for h in page.hits if h.seq == 3)
    assert hit.session_id == sid and hit.kind == "message"
    if bad.startswith("["):
        # JSON, but not an object: no text to cut a snippet from, as for any record
        # whose payload has none.
        assert hit.snippet == "" and hit.spans == ()
        return
    for touch in (lambda: hit.snippet, hit.model_dump, lambda: hit == hit, lambda: repr(hit)):
        with pytest.raises(CorruptRecordError, match="seq 3"):
            touch()
    others = [h for h in page.hits if h.seq != 3]
    assert all(WORD in h.snippet.lower() for h in others)
