"""Sessions: create, get, rename, delete, naming, listing and namespaces, on both backends."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import sql
from helpers.input_tables import not_refused
from helpers.messages import MISSING_ID, assistant, user
from sqlalchemy import bindparam, func, select, update

from sessiondb import (
    HasChildrenError,
    InvalidInputError,
    InvalidSessionIdError,
    Metrics,
    SessionInfo,
    SessionNotFoundError,
    SessionStore,
)
from sessiondb.naming import derive_name
from sessiondb.tables import UTCDateTime, records, sessions


async def count_rows(store: SessionStore, table: Any, **where: str) -> int:
    stmt = select(func.count()).select_from(table)
    for column, value in where.items():
        stmt = stmt.where(table.c[column] == value)
    return int(await sql.scalar(store, stmt))


# -- create / get -----------------------------------------------------------------------


async def test_create_session_stores_every_field(store: SessionStore) -> None:
    before = datetime.now(UTC)
    info = await store.create_session(
        name="Nightly dependency audit",
        model="claude-sonnet-4",
        source="cron",
        cron_job_id="job-42",
        system_prompt_override="You are terse.",
        metadata={"team": "infra", "tags": ["a", "b"], "nested": {"n": 1, "none": None}},
    )
    after = datetime.now(UTC)

    assert info.namespace == "default"
    assert info.name == "Nightly dependency audit"
    assert info.model == "claude-sonnet-4"
    assert info.source == "cron"
    assert info.cron_job_id == "job-42"
    assert info.system_prompt_override == "You are terse."
    assert info.metadata == {"team": "infra", "tags": ["a", "b"], "nested": {"n": 1, "none": None}}
    assert info.message_count == 0
    assert info.last_seq == 0
    assert info.last_message_at is None
    assert info.metrics == Metrics()
    assert info.parent_id is None and info.fork_seq is None
    assert info.created_at.tzinfo is not None
    assert before - timedelta(seconds=1) <= info.created_at <= after + timedelta(seconds=1)

    assert await store.get_session(info.id) == info
    # One row, in this namespace.
    (row,) = await sql.fetch(store, select(sessions).where(sessions.c.id == info.id))
    assert row.namespace == "default"
    assert row.source == "cron" and row.cron_job_id == "job-42"


async def test_create_session_defaults(store: SessionStore) -> None:
    info = await store.create_session()
    assert info.name is None
    assert info.model is None
    assert info.source == "interactive"
    assert info.cron_job_id is None
    assert info.system_prompt_override is None
    assert info.metadata is None
    assert len(info.id) == 26
    assert await store.get_session(info.id) == info


async def test_created_sessions_get_distinct_ids(store: SessionStore) -> None:
    ids = {(await store.create_session()).id for _ in range(20)}
    assert len(ids) == 20
    assert await count_rows(store, sessions) == 20


async def test_create_session_rejects_bad_input(store: SessionStore) -> None:
    cases = {
        "source": {"source": "web"},
        "cron-id-interactive": {"source": "interactive", "cron_job_id": "job-1"},
        "metadata-list": {"metadata": ["not", "a", "dict"]},
        "nul-name": {"name": "bad\x00name"},
        "nul-model": {"model": "m\x00"},
        "surrogate-prompt": {"system_prompt_override": "lone \ud800 surrogate"},
        "int-name": {"name": 42},
        "metadata-set": {"metadata": {"not json": {1, 2}}},
    }

    async def call(kwargs: dict[str, Any]) -> Any:
        return await store.create_session(**kwargs)

    assert await not_refused(cases, call, InvalidInputError) == {}
    assert await count_rows(store, sessions) == 0


async def test_get_unknown_session_is_not_found(store: SessionStore) -> None:
    await store.create_session()
    with pytest.raises(SessionNotFoundError) as info:
        await store.get_session(MISSING_ID)
    assert info.value.session_id == MISSING_ID
    assert MISSING_ID in str(info.value)


# -- rename / delete ---------------------------------------------------------------------


async def test_rename(store: SessionStore) -> None:
    info = await store.create_session(name="old")
    other = await store.create_session(name="untouched")
    renamed = await store.rename(info.id, "new name ✨")
    assert renamed.name == "new name ✨"
    assert renamed.id == info.id
    assert (await store.get_session(info.id)).name == "new name ✨"
    assert (await store.get_session(other.id)).name == "untouched"


async def test_rename_errors(store: SessionStore) -> None:
    info = await store.create_session(name="keep")
    with pytest.raises(SessionNotFoundError):
        await store.rename(MISSING_ID, "x")
    with pytest.raises(InvalidInputError):
        await store.rename(info.id, "nul\x00")
    with pytest.raises(InvalidInputError):
        await store.rename(info.id, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionIdError):
        await store.rename("not-an-id", "x")
    assert (await store.get_session(info.id)).name == "keep"


async def test_renamed_session_keeps_name_on_next_user_message(store: SessionStore) -> None:
    info = await store.create_session()
    await store.rename(info.id, "chosen")
    await store.append(info.id, [user("this would otherwise name the session")])
    assert (await store.get_session(info.id)).name == "chosen"


async def test_delete_session_removes_it_and_its_records(store: SessionStore) -> None:
    doomed = await store.create_session()
    kept = await store.create_session()
    await store.append(doomed.id, [user("a"), assistant("b")])
    await store.append(kept.id, [user("c")])

    assert await store.delete_session(doomed.id) == [doomed.id]

    with pytest.raises(SessionNotFoundError):
        await store.get_session(doomed.id)
    with pytest.raises(SessionNotFoundError):
        await store.records(doomed.id)
    assert await count_rows(store, records, session_id=doomed.id) == 0
    assert await count_rows(store, sessions, id=doomed.id) == 0
    # The other session is untouched.
    assert await count_rows(store, records, session_id=kept.id) == 1
    assert (await store.get_session(kept.id)).message_count == 1
    # Deleting twice: not found.
    with pytest.raises(SessionNotFoundError):
        await store.delete_session(doomed.id)


async def test_delete_parent_with_fork_needs_cascade(store: SessionStore) -> None:
    parent = await store.create_session()
    await store.append(parent.id, [user("a")])
    child = await store.fork(parent.id)
    with pytest.raises(HasChildrenError) as info:
        await store.delete_session(parent.id)
    assert info.value.children == [child.id]
    assert await count_rows(store, sessions) == 2
    deleted = await store.delete_session(parent.id, cascade=True)
    assert sorted(deleted) == sorted([parent.id, child.id])
    assert await count_rows(store, sessions) == 0
    assert await count_rows(store, records) == 0


# -- the name derived from the first user message ----------------------------------------


LONG = "Please help me refactor the payment module so that refunds and retries are handled"


async def test_name_derived_from_first_user_message(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(info.id, [user(LONG), assistant("Sure.")])
    name = (await store.get_session(info.id)).name
    assert name is not None
    assert name.endswith("…")
    head = name[:-1]
    assert 25 <= len(head) <= 50
    assert LONG.startswith(head)
    # Cut at a word boundary: the next character of the message is a space.
    assert LONG[len(head)] == " "
    assert name == derive_name(LONG)


async def test_short_first_message_is_the_name(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(info.id, [user("  Fix the\n\nflaky   test  ")])
    assert (await store.get_session(info.id)).name == "Fix the flaky test"


async def test_later_user_messages_do_not_rename(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(info.id, [user("first question")])
    await store.append(info.id, [assistant("answer"), user("second question")])
    assert (await store.get_session(info.id)).name == "first question"


async def test_given_name_is_not_overwritten(store: SessionStore) -> None:
    info = await store.create_session(name="Given")
    await store.append(info.id, [user("something else entirely")])
    assert (await store.get_session(info.id)).name == "Given"


async def test_name_waits_for_a_user_message_with_text(store: SessionStore) -> None:
    info = await store.create_session()
    await store.append(info.id, [assistant("I start the conversation")])
    assert (await store.get_session(info.id)).name is None
    image_only = {
        "role": "user",
        "content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}],
    }
    await store.append(info.id, [image_only])
    assert (await store.get_session(info.id)).name is None
    await store.append(info.id, [user("now with words")])
    assert (await store.get_session(info.id)).name == "now with words"


async def test_name_drops_nul_and_lone_surrogates(store: SessionStore) -> None:
    # Postgres text cannot hold NUL; the name must still be storable on both backends.
    info = await store.create_session()
    await store.append(info.id, [user("\x00Fix \ud800the bug")])
    assert (await store.get_session(info.id)).name == "Fix the bug"


def test_derive_name_pure() -> None:
    assert derive_name("") is None
    assert derive_name(" \n\t ") is None
    assert derive_name("hello") == "hello"
    exact = "x" * 50
    assert derive_name(exact) == exact
    # No space in the first half: cut hard at the limit.
    assert derive_name("y" * 80) == "y" * 50 + "…"
    # Trailing punctuation before the cut goes.
    cut = derive_name("a" * 40 + ", " + "b" * 30)
    assert cut == "a" * 40 + "…"


# -- listing ----------------------------------------------------------------------------


async def all_pages(store: SessionStore, limit: int, **filters: Any) -> list[list[SessionInfo]]:
    pages: list[list[SessionInfo]] = []
    cursor = None
    while True:
        page = await store.list_sessions(limit, cursor, **filters)
        pages.append(page.items)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor
        assert len(pages) < 100, "pagination does not end"


async def test_list_newest_message_first(store: SessionStore) -> None:
    a = await store.create_session(name="a")
    b = await store.create_session(name="b")
    c = await store.create_session(name="c")
    await store.append(c.id, [user("1")])
    await store.append(a.id, [user("2")])
    await store.append(b.id, [user("3")])
    page = await store.list_sessions()
    assert [s.id for s in page.items] == [b.id, a.id, c.id]
    assert page.next_cursor is None
    stamps = [s.last_message_at for s in page.items]
    assert all(t is not None for t in stamps)
    assert stamps == sorted(stamps, reverse=True)  # type: ignore[type-var]

    # A session with no message yet sorts by its creation time.
    d = await store.create_session(name="d")
    assert [s.id for s in (await store.list_sessions()).items] == [d.id, b.id, a.id, c.id]


async def test_keyset_pagination_visits_every_session_once(store: SessionStore) -> None:
    created = [await store.create_session() for _ in range(120)]
    # Put 60 of them on the same timestamp so that ties straddle page boundaries and
    # only the id breaks them.
    tie = datetime(2030, 1, 1, tzinfo=UTC)
    tied = {s.id for s in created[20:80]}
    for session_id in tied:
        await sql.execute(
            store,
            update(sessions)
            .where(sessions.c.id == bindparam("sid"))
            .values(last_message_at=bindparam("at", type_=UTCDateTime())),
            sid=session_id,
            at=tie,
        )
    pages = await all_pages(store, 50)
    assert [len(p) for p in pages] == [50, 50, 20]
    listed = [s.id for p in pages for s in p]
    assert len(set(listed)) == 120
    assert set(listed) == {s.id for s in created}

    def key(s: SessionInfo) -> tuple[datetime, str]:
        return (tie if s.id in tied else s.created_at, s.id)

    expected = [s.id for s in sorted(created, key=key, reverse=True)]
    assert listed == expected


async def test_list_single_page_has_no_cursor(store: SessionStore) -> None:
    for _ in range(3):
        await store.create_session()
    page = await store.list_sessions(limit=3)
    assert len(page.items) == 3
    assert page.next_cursor is None
    assert len((await store.list_sessions(limit=1000)).items) == 3


async def test_list_filter_by_source(store: SessionStore) -> None:
    inter = [await store.create_session() for _ in range(3)]
    cron = [await store.create_session(source="cron", cron_job_id=f"j{i}") for i in range(2)]
    got = (await store.list_sessions(source="cron")).items
    assert {s.id for s in got} == {s.id for s in cron}
    assert all(s.source == "cron" for s in got)
    got = (await store.list_sessions(source="interactive")).items
    assert {s.id for s in got} == {s.id for s in inter}
    # Paging with a filter keeps the filter.
    pages = await all_pages(store, 1, source="cron")
    assert [s.id for p in pages for s in p] == [s.id for s in reversed(cron)]


async def test_list_filter_by_parent(store: SessionStore) -> None:
    parent = await store.create_session()
    other = await store.create_session()
    await store.append(parent.id, [user("hi"), assistant("hello")])
    fork1 = await store.fork(parent.id)
    fork2 = await store.fork(parent.id, at_seq=1)
    grandchild = await store.fork(fork1.id)
    got = (await store.list_sessions(parent_id=parent.id)).items
    assert {s.id for s in got} == {fork1.id, fork2.id}
    assert all(s.parent_id == parent.id for s in got)
    assert {s.id for s in (await store.list_sessions(parent_id=fork1.id)).items} == {grandchild.id}
    assert (await store.list_sessions(parent_id=other.id)).items == []
    everything = (await store.list_sessions()).items
    assert len(everything) == 5


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


async def test_list_bad_cursor(store: SessionStore) -> None:
    await store.create_session()
    cases = {
        "garbage": "not a cursor!",
        "object": _cursor(b"{}"),
        "bad-id": _cursor(b'["2024-01-01T00:00:00+00:00", "lowercase-id"]'),
        "bad-time": _cursor(b'["yesterday", "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"]'),
        "triple": _cursor(b"[1, 2, 3]"),
        "null-time": _cursor(b'[null, "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"]'),
        # A timestamp without an offset cannot be compared with the stored UTC ones.
        "naive-time": _cursor(b'["2024-01-01T00:00:00", "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"]'),
    }

    async def call(cursor: str) -> Any:
        return await store.list_sessions(cursor=cursor)

    assert await not_refused(cases, call, InvalidInputError) == {}


async def test_list_limit_out_of_range(store: SessionStore) -> None:
    cases = {"zero": 0, "negative": -1, "too-big": 1001, "str": "10", "float": 2.5, "none": None}

    async def call(limit: Any) -> Any:
        return await store.list_sessions(limit=limit)

    assert await not_refused(cases, call, InvalidInputError) == {}


async def test_list_bad_filters(store: SessionStore) -> None:
    with pytest.raises(InvalidInputError):
        await store.list_sessions(source="web")  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionIdError):
        await store.list_sessions(parent_id="nope")


# -- namespaces -------------------------------------------------------------------------


async def test_namespaces_do_not_see_each_other(store: SessionStore, db_url: str) -> None:
    mine = await store.create_session(name="mine")
    await store.append(mine.id, [user("hello", uuid="u-1"), assistant("hi")])
    before = await store.get_session(mine.id)

    async with SessionStore.open(db_url, namespace="other") as other:
        assert other.namespace == "other"
        with pytest.raises(SessionNotFoundError):
            await other.get_session(mine.id)
        with pytest.raises(SessionNotFoundError):
            await other.append(mine.id, [user("intruder")])
        with pytest.raises(SessionNotFoundError):
            await other.append(mine.id, [user("intruder")], expected_seq=2)
        with pytest.raises(SessionNotFoundError):
            await other.rename(mine.id, "stolen")
        with pytest.raises(SessionNotFoundError):
            await other.delete_session(mine.id)
        with pytest.raises(SessionNotFoundError):
            await other.delete_session(mine.id, cascade=True)
        with pytest.raises(SessionNotFoundError):
            await other.context(mine.id)
        with pytest.raises(SessionNotFoundError):
            await other.records(mine.id)
        with pytest.raises(SessionNotFoundError):
            await other.fork(mine.id)
        assert (await other.list_sessions()).items == []
        assert (await other.list_sessions(parent_id=mine.id)).items == []

        theirs = await other.create_session(name="theirs")
        assert theirs.namespace == "other"
        assert [s.id for s in (await other.list_sessions()).items] == [theirs.id]

    # Nothing of "default" changed, and "other"'s session is invisible here.
    assert await store.get_session(mine.id) == before
    assert len(await store.records(mine.id)) == 2
    assert await count_rows(store, records, session_id=mine.id) == 2
    assert [s.id for s in (await store.list_sessions()).items] == [mine.id]
    with pytest.raises(SessionNotFoundError):
        await store.get_session(theirs.id)


async def test_other_namespace_cannot_replay_a_known_uuid(store: SessionStore, db_url: str) -> None:
    # The idempotency look-up must be scoped too: a known uuid must not hand another
    # namespace the stored record.
    mine = await store.create_session()
    await store.append(mine.id, [user("secret", uuid="u-1")])
    async with SessionStore.open(db_url, namespace="other") as other:
        with pytest.raises(SessionNotFoundError):
            await other.append(mine.id, [user("probe", uuid="u-1")])
    assert await count_rows(store, records, session_id=mine.id) == 1
