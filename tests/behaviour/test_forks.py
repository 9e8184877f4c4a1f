"""Forks, on both backends: a child inherits its parent's records with seq <= fork_seq by
reference (no row copied) and continues the numbering; the lineage's overlays at or before
the fork point apply to it, later ones on either side do not."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.messages import MISSING_ID, assistant, result, two_calls, user
from helpers.overlays import (
    assert_only_grew,
    raw_records,
    rows_per_session,
    session_count,
    summary_text,
    texts,
)

from sessiondb import (
    HasChildrenError,
    InvalidInputError,
    RecordNotFoundError,
    SessionNotFoundError,
    SessionStore,
)


async def _session_with(
    store: SessionStore, messages: list[dict[str, Any]], name: str | None = None
) -> str:
    info = await store.create_session(name=name)
    await store.append(info.id, messages)
    return info.id


def _numbered(count: int, prefix: str = "m") -> list[dict[str, Any]]:
    return [user(f"{prefix}{i}") for i in range(1, count + 1)]


async def test_fork_at_head(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(4), name="parent")
    parent = await store.get_session(pid)
    before = await raw_records(store)

    child = await store.fork(pid)

    assert child.id != pid
    assert (child.parent_id, child.fork_seq, child.last_seq) == (pid, 4, 4)
    assert child.message_count == parent.message_count == 4
    assert child.name == "parent"
    assert child.namespace == parent.namespace
    assert child.last_message_at == parent.last_message_at
    assert await raw_records(store) == before  # nothing copied, nothing rewritten
    assert await rows_per_session(store) == {pid: 4}
    assert texts(await store.context(child.id)) == ["m1", "m2", "m3", "m4"]
    inherited = await store.records(child.id)
    assert [(r.session_id, r.seq) for r in inherited] == [(pid, s) for s in range(1, 5)]
    assert await store.get_session(pid) == parent

    (own,) = await store.append(child.id, [user("c5")])
    assert (own.session_id, own.seq) == (child.id, 5)
    assert texts(await store.context(child.id)) == ["m1", "m2", "m3", "m4", "c5"]
    assert texts(await store.context(pid)) == ["m1", "m2", "m3", "m4"]
    assert await rows_per_session(store) == {pid: 4, child.id: 1}


async def test_fork_in_the_middle(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(6))
    before = await raw_records(store)

    child = await store.fork(pid, at_seq=3, name="branch")

    assert (child.parent_id, child.fork_seq, child.last_seq) == (pid, 3, 3)
    assert (child.message_count, child.name) == (3, "branch")
    assert await raw_records(store) == before
    assert texts(await store.context(child.id)) == ["m1", "m2", "m3"]

    records = await store.append(child.id, [user("c4"), user("c5")])
    assert [r.seq for r in records] == [4, 5]  # the parent also has 4 and 5: its own
    assert texts(await store.context(child.id)) == ["m1", "m2", "m3", "c4", "c5"]
    assert texts(await store.context(pid)) == [f"m{i}" for i in range(1, 7)]
    assert [(r.session_id, r.seq) for r in await store.records(child.id)] == [
        (pid, 1),
        (pid, 2),
        (pid, 3),
        (child.id, 4),
        (child.id, 5),
    ]
    assert (await store.get_session(child.id)).message_count == 5
    assert await rows_per_session(store) == {pid: 6, child.id: 2}
    assert_only_grew(before, await raw_records(store), added=2)


async def test_fork_at_zero_inherits_nothing(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(2))
    child = await store.fork(pid, at_seq=0)
    assert (child.parent_id, child.fork_seq, child.last_seq, child.message_count) == (
        pid,
        0,
        0,
        0,
    )
    assert await store.context(child.id) == []
    await store.append(child.id, [user("fresh")])
    assert [r.seq for r in await store.records(child.id)] == [1]
    assert texts(await store.context(child.id)) == ["fresh"]


async def test_parent_appends_after_the_fork_are_invisible_to_the_child(
    store: SessionStore,
) -> None:
    pid = await _session_with(store, _numbered(3))
    child = await store.fork(pid)
    await store.append(pid, [user("p4"), user("p5")])
    await store.append(child.id, [user("c4")])

    assert texts(await store.context(child.id)) == ["m1", "m2", "m3", "c4"]
    assert texts(await store.context(pid)) == ["m1", "m2", "m3", "p4", "p5"]
    assert (await store.get_session(child.id)).last_seq == 4
    assert (await store.get_session(pid)).last_seq == 5


async def test_fork_of_a_fork(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(4))
    child = await store.fork(pid, at_seq=3)
    await store.append(child.id, [user("c4"), user("c5")])
    before = await raw_records(store)

    grandchild = await store.fork(child.id)

    assert (grandchild.parent_id, grandchild.fork_seq, grandchild.last_seq) == (child.id, 5, 5)
    assert grandchild.message_count == 5
    assert await raw_records(store) == before
    await store.append(grandchild.id, [user("g6")])
    assert texts(await store.context(grandchild.id)) == ["m1", "m2", "m3", "c4", "c5", "g6"]
    assert [(r.session_id, r.seq) for r in await store.records(grandchild.id)] == [
        (pid, 1),
        (pid, 2),
        (pid, 3),
        (child.id, 4),
        (child.id, 5),
        (grandchild.id, 6),
    ]
    assert texts(await store.context(child.id)) == ["m1", "m2", "m3", "c4", "c5"]
    assert texts(await store.context(pid)) == ["m1", "m2", "m3", "m4"]
    assert await rows_per_session(store) == {pid: 4, child.id: 2, grandchild.id: 1}


async def test_fork_of_a_fork_before_the_first_fork_point(store: SessionStore) -> None:
    """The grandparent contributes only up to the lowest fork point below it."""
    pid = await _session_with(store, _numbered(10))
    child = await store.fork(pid, at_seq=5)
    await store.append(child.id, [user("c6")])

    grandchild = await store.fork(child.id, at_seq=3)

    assert (grandchild.fork_seq, grandchild.last_seq, grandchild.message_count) == (3, 3, 3)
    assert texts(await store.context(grandchild.id)) == ["m1", "m2", "m3"]
    await store.append(grandchild.id, [user("g4")])
    assert texts(await store.context(grandchild.id)) == ["m1", "m2", "m3", "g4"]
    assert [r.seq for r in await store.records(grandchild.id, include_tombstoned=True)] == [
        1,
        2,
        3,
        4,
    ]
    # Counting the messages of a mid-stream fork of it walks the same lineage.
    great = await store.fork(grandchild.id, at_seq=4)
    assert great.message_count == 4
    assert texts(await store.context(great.id)) == ["m1", "m2", "m3", "g4"]


async def test_fork_of_a_compacted_session(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(4))
    await store.append_compaction(pid, summary="before fork", first_kept_seq=3)  # 5
    await store.append(pid, [user("m6")])

    child = await store.fork(pid)
    middle = await store.fork(pid, at_seq=4)  # before the compaction record

    assert texts(await store.context(child.id)) == [summary_text("before fork"), "m3", "m4", "m6"]
    assert texts(await store.context(middle.id)) == ["m1", "m2", "m3", "m4"]

    # A compaction the parent writes after the fork point does not reach the child...
    await store.append_compaction(pid, summary="parent later", first_kept_seq=6)
    assert texts(await store.context(pid)) == [summary_text("parent later"), "m6"]
    assert texts(await store.context(child.id)) == [summary_text("before fork"), "m3", "m4", "m6"]
    # ...and the child's own compaction does not reach the parent.
    await store.append(child.id, [user("c8")])
    await store.append_compaction(child.id, summary="child later", first_kept_seq=4)
    assert texts(await store.context(child.id)) == [summary_text("child later"), "m4", "m6", "c8"]
    assert texts(await store.context(pid)) == [summary_text("parent later"), "m6"]


async def test_child_compaction_validates_against_the_lineage(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(4))
    child = await store.fork(pid, at_seq=2)
    await store.append(child.id, [user("c3")])
    # Seq 4 is the parent's own record, after the fork point: not in the child's lineage.
    with pytest.raises(InvalidInputError, match="first_kept_seq 4 "):
        await store.append_compaction(child.id, summary="s", first_kept_seq=4)
    await store.append_compaction(child.id, summary="s", first_kept_seq=2)
    assert texts(await store.context(child.id)) == [summary_text("s"), "m2", "c3"]


async def test_tombstones_along_the_lineage(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(4))
    await store.tombstone(pid, 1)  # 5: at or before the fork point, so inherited
    child = await store.fork(pid)
    assert texts(await store.context(child.id)) == ["m2", "m3", "m4"]

    await store.tombstone(pid, 2)  # after the fork point: the parent's alone
    assert texts(await store.context(pid)) == ["m3", "m4"]
    assert texts(await store.context(child.id)) == ["m2", "m3", "m4"]

    before = await raw_records(store)
    (tomb,) = await store.tombstone(child.id, 3)  # an inherited message, from the child
    assert (tomb.session_id, tomb.seq) == (child.id, 6)
    assert_only_grew(before, await raw_records(store), added=1)
    assert texts(await store.context(child.id)) == ["m2", "m4"]
    assert texts(await store.context(pid)) == ["m3", "m4"]

    # The child may tombstone what the parent tombstoned after the fork; the parent's
    # tombstone of seq 1 is inherited, so that one is a no-op.
    assert [t.tombstone.target_seq for t in await store.tombstone(child.id, 2)] == [2]
    assert await store.tombstone(child.id, 1) == []
    assert texts(await store.context(child.id)) == ["m4"]


async def test_child_tombstone_of_an_inherited_compaction(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(3))
    await store.append_compaction(pid, summary="s", first_kept_seq=3)  # 4
    child = await store.fork(pid)
    await store.tombstone(child.id, 4)
    assert texts(await store.context(child.id)) == ["m1", "m2", "m3"]
    assert texts(await store.context(pid)) == [summary_text("s"), "m3"]


async def test_tombstone_seqs_are_resolved_in_the_lineage(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(5))
    child = await store.fork(pid, at_seq=2)
    # Seq 4 exists in the parent, but not in the child's lineage.
    with pytest.raises(RecordNotFoundError):
        await store.tombstone(child.id, 4)
    await store.append(child.id, [user("c3"), user("c4")])
    await store.tombstone(child.id, 4)
    assert texts(await store.context(child.id)) == ["m1", "m2", "c3"]
    assert texts(await store.context(pid)) == [f"m{i}" for i in range(1, 6)]


async def test_tool_pair_cascade_crosses_the_fork_point(store: SessionStore) -> None:
    pid = await _session_with(store, [user("q"), assistant("call", ["A"])])
    child = await store.fork(pid)  # at the head: the result is still to come
    await store.append(child.id, [result("A"), user("next")])

    written = await store.tombstone(child.id, 3)

    assert [t.tombstone.target_seq for t in written] == [2, 3]
    assert texts(await store.context(child.id)) == ["q", "next"]
    assert texts(await store.context(pid)) == ["q", "call"]


async def test_list_sessions_by_parent(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(3))
    other = await _session_with(store, _numbered(1))
    a = await store.fork(pid)
    b = await store.fork(pid, at_seq=1)
    grandchild = await store.fork(a.id)
    await store.fork(other)

    children = await store.list_sessions(parent_id=pid)
    assert sorted(s.id for s in children.items) == sorted([a.id, b.id])
    assert [s.id for s in (await store.list_sessions(parent_id=a.id)).items] == [grandchild.id]
    assert (await store.list_sessions(parent_id=b.id)).items == []
    assert len((await store.list_sessions()).items) == 6


# -- delete -----------------------------------------------------------------------------


async def test_delete_a_session_with_children_needs_cascade(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(3))
    a = await store.fork(pid)
    b = await store.fork(pid, at_seq=2)
    await store.append(a.id, [user("a4")])
    grandchild = await store.fork(a.id)
    await store.append(grandchild.id, [user("g5")])
    bystander = await _session_with(store, _numbered(2))
    before = await raw_records(store)
    sessions_before = await session_count(store)

    with pytest.raises(HasChildrenError) as refused:
        await store.delete_session(pid)
    assert sorted(refused.value.children) == sorted([a.id, b.id])
    with pytest.raises(HasChildrenError) as refused_middle:
        await store.delete_session(a.id)
    assert refused_middle.value.children == [grandchild.id]
    assert await raw_records(store) == before
    assert await session_count(store) == sessions_before

    deleted = await store.delete_session(pid, cascade=True)

    assert sorted(deleted) == sorted([pid, a.id, b.id, grandchild.id])
    assert await rows_per_session(store) == {bystander: 2}
    assert await session_count(store) == 1
    for gone in deleted:
        with pytest.raises(SessionNotFoundError):
            await store.get_session(gone)
    assert texts(await store.context(bystander)) == ["m1", "m2"]


async def test_delete_leaves_then_the_parent(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(2))
    child = await store.fork(pid)
    await store.append(child.id, [user("c3")])

    assert await store.delete_session(child.id) == [child.id]
    assert await rows_per_session(store) == {pid: 2}
    assert texts(await store.context(pid)) == ["m1", "m2"]
    assert await store.delete_session(pid) == [pid]
    assert await rows_per_session(store) == {}


async def test_delete_a_middle_session_with_cascade_keeps_its_ancestors(
    store: SessionStore,
) -> None:
    pid = await _session_with(store, _numbered(2))
    child = await store.fork(pid)
    await store.append(child.id, [user("c3")])
    grandchild = await store.fork(child.id)
    await store.append(grandchild.id, [user("g4")])

    deleted = await store.delete_session(child.id, cascade=True)

    assert sorted(deleted) == sorted([child.id, grandchild.id])
    assert await rows_per_session(store) == {pid: 2}
    assert (await store.list_sessions(parent_id=pid)).items == []


# -- detach -----------------------------------------------------------------------------


async def test_detached_fork_copies_and_stands_alone(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(5))
    await store.append_compaction(pid, summary="s", first_kept_seq=3)  # 6
    await store.tombstone(pid, 4)  # 7
    await store.append(pid, [user("m8"), user("m9")])
    before = await raw_records(store)
    parent_context = texts(await store.context(pid))

    copy = await store.fork(pid, at_seq=8, detach=True)

    assert (copy.parent_id, copy.fork_seq, copy.last_seq, copy.message_count) == (
        None,
        None,
        8,
        6,
    )
    new = assert_only_grew(before, await raw_records(store), added=8)
    assert new == [(copy.id, s) for s in range(1, 9)]
    after = await raw_records(store)
    # The copies are the parent's rows under the new session id.
    for seq in range(1, 9):
        assert after[(copy.id, seq)][1:] == before[(pid, seq)][1:]
    assert texts(await store.context(copy.id)) == [summary_text("s"), "m3", "m5", "m8"]
    assert (await store.list_sessions(parent_id=pid)).items == []

    # The parent can go without cascade; the copy keeps everything.
    assert await store.delete_session(pid) == [pid]
    assert texts(await store.context(copy.id)) == [summary_text("s"), "m3", "m5", "m8"]
    await store.append(copy.id, [user("c9")])
    assert texts(await store.context(copy.id))[-1] == "c9"
    assert parent_context[:-1] == texts(await store.context(copy.id))[:-1]


async def test_detached_fork_of_a_fork(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(6))
    child = await store.fork(pid, at_seq=4)
    await store.append(child.id, [user("c5")])
    grandchild = await store.fork(child.id, at_seq=2)
    await store.append(grandchild.id, [user("g3")])

    copy = await store.fork(grandchild.id, detach=True)

    assert (copy.parent_id, copy.last_seq, copy.message_count) == (None, 3, 3)
    assert (await rows_per_session(store))[copy.id] == 3
    assert texts(await store.context(copy.id)) == ["m1", "m2", "g3"]
    await store.delete_session(pid, cascade=True)
    assert texts(await store.context(copy.id)) == ["m1", "m2", "g3"]


async def test_detached_fork_at_zero_copies_nothing(store: SessionStore) -> None:
    pid = await _session_with(store, _numbered(2))
    copy = await store.fork(pid, at_seq=0, detach=True)
    assert (copy.parent_id, copy.last_seq) == (None, 0)
    assert copy.id not in await rows_per_session(store)


# -- refusals ---------------------------------------------------------------------------


async def _pair_session(store: SessionStore) -> str:
    """1 user, 2 assistant(call A,B), 3 result A, 4 result B, 5 assistant, 6 user."""
    return await _session_with(
        store,
        [
            *two_calls(),
            assistant("done"),
            user("q2"),
        ],
    )


@pytest.mark.parametrize("at_seq", [2, 3])
async def test_fork_inside_a_tool_pair_is_refused(store: SessionStore, at_seq: int) -> None:
    pid = await _pair_session(store)
    sessions_before = await session_count(store)
    with pytest.raises(InvalidInputError, match="between a tool call and its result"):
        await store.fork(pid, at_seq=at_seq)
    assert await session_count(store) == sessions_before


@pytest.mark.parametrize("at_seq", [1, 4, 5, 6])
async def test_fork_outside_tool_pairs_is_allowed(store: SessionStore, at_seq: int) -> None:
    pid = await _pair_session(store)
    child = await store.fork(pid, at_seq=at_seq)
    assert child.fork_seq == at_seq
    assert len(await store.context(child.id)) == at_seq


@pytest.mark.parametrize("at_seq", [7, 100, -1])
async def test_fork_beyond_the_head_is_refused(store: SessionStore, at_seq: int) -> None:
    pid = await _pair_session(store)
    with pytest.raises(InvalidInputError, match="at_seq"):
        await store.fork(pid, at_seq=at_seq)
    assert await session_count(store) == 1


@pytest.mark.parametrize("at_seq", [True, "3", 2.0])
async def test_fork_refuses_an_at_seq_that_is_not_an_int(store: SessionStore, at_seq: Any) -> None:
    pid = await _pair_session(store)
    with pytest.raises(InvalidInputError, match="at_seq"):
        await store.fork(pid, at_seq=at_seq)
    assert await session_count(store) == 1


async def test_fork_of_a_missing_session_raises(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.fork(MISSING_ID)
    assert await session_count(store) == 0


async def test_fork_in_another_namespace_is_not_found(store: SessionStore, db_url: str) -> None:
    pid = await _session_with(store, _numbered(1))
    async with SessionStore.open(db_url, namespace="tenant-b") as other:
        with pytest.raises(SessionNotFoundError):
            await other.fork(pid)
    assert await session_count(store) == 1


async def test_a_fork_resending_an_inherited_uuid_gets_the_inherited_record(
    store: SessionStore,
) -> None:
    parent = await store.create_session()
    (sent,) = await store.append(parent.id, [{"role": "user", "content": "hi", "uuid": "u-1"}])
    child = await store.fork(parent.id)
    (again,) = await store.append(child.id, [{"role": "user", "content": "hi", "uuid": "u-1"}])
    assert (again.session_id, again.seq) == (parent.id, sent.seq)
    assert (await store.get_session(child.id)).last_seq == 1
    detached = await store.fork(child.id, detach=True)
    assert [r.uuid for r in await store.records(detached.id)] == ["u-1"]
