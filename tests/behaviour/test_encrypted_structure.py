"""An encrypted namespace authenticates its structure, on SQLite and Postgres: a record's
kind, role, ``target_seq`` and ``first_kept_seq``, a prune's seqs and a fork's parent and
fork point, changed by SQL, make every read that builds a context or lists records
raise :class:`DecryptionError`, never show a different context. Rows sealed before the
binding read until ``rotate_keys(reencrypt=True)`` moves them to it."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import ConfigurationError, DecryptionError, SessionStore, crypto
from sessiondb.crypto import StaticKeyProvider

K1 = bytes(range(32))


def keys() -> StaticKeyProvider:
    return StaticKeyProvider({"k1": K1}, "k1")


@dataclass
class Sessions:
    main: str  # messages 1-8, compaction 9 (first kept 3), tombstone 10 (of 4), prune 11 (of 7)
    other: str  # six user messages
    fork: str  # a fork of main at 8, with no records of its own


async def build(store: SessionStore) -> Sessions:
    main = (await store.create_session()).id
    await store.append(
        main,
        [
            {"role": "user", "content": "m1"},
            {"role": "assistant", "content": "m2"},
            {"role": "user", "content": "m3"},
            {"role": "assistant", "content": "m4"},
            {"role": "user", "content": "m5"},
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}],
            },
            {"role": "toolResult", "toolCallId": "c1", "content": "r7"},
            {"role": "user", "content": "m8"},
        ],
    )
    await store.append_compaction(main, summary="s", first_kept_seq=3)
    await store.tombstone(main, 4)
    await store.append_prune(main, [7])
    other = (await store.create_session()).id
    await store.append(other, [{"role": "user", "content": f"o{i}"} for i in range(1, 7)])
    fork = (await store.fork(main, at_seq=8)).id
    return Sessions(main, other, fork)


R = "UPDATE sessiondb_records SET "
S = "UPDATE sessiondb_sessions SET "
# (name, the SQL, the session whose reads must fail); :main, :other, :fork are the ids.
TAMPERING = [
    ("tombstone retargeted", R + "target_seq = 5 WHERE kind = 'tombstone'", "main"),
    ("compaction keeps less", R + "first_kept_seq = 6 WHERE kind = 'compaction'", "main"),
    ("tombstone undone", R + "kind = 'entry' WHERE kind = 'tombstone'", "main"),
    ("compaction undone", R + "kind = 'entry' WHERE kind = 'compaction'", "main"),
    ("prune undone", R + "kind = 'entry' WHERE kind = 'prune'", "main"),
    ("message hidden", R + "kind = 'entry' WHERE session_id = :main AND seq = 5", "main"),
    ("role changed", R + "role = 'assistant' WHERE session_id = :main AND seq = 8", "main"),
    (
        "message made a tombstone",
        R + "kind = 'tombstone', target_seq = 5, role = NULL WHERE session_id = :main AND seq = 8",
        "main",
    ),
    (
        "message made a compaction",
        R + "kind = 'compaction', first_kept_seq = 8, role = NULL "
        "WHERE session_id = :main AND seq = 5",
        "main",
    ),
    ("fork's parent swapped", S + "parent_id = :other WHERE id = :fork", "fork"),
    ("fork point moved", S + "fork_seq = 3 WHERE id = :fork", "fork"),
    ("session made a fork", S + "parent_id = :main, fork_seq = 2 WHERE id = :other", "other"),
]


async def tamper(db_url: str, statement: str, ids: Sessions) -> None:
    names = {"main": ids.main, "other": ids.other, "fork": ids.fork}
    params = {k: v for k, v in names.items() if f":{k}" in statement}
    await sql.Database.of(db_url).execute(statement, **params)


async def assert_every_read_refuses(store: SessionStore, sid: str, tmp_path: Path) -> None:
    reads: dict[str, Any] = {
        "context": lambda: store.context(sid),
        "context last": lambda: store.context(sid, last=2),
        "context_json": lambda: store.context_json(sid),
        "records": lambda: store.records(sid),
        "records, all": lambda: store.records(
            sid, include_tombstoned=True, include_superseded=True
        ),
        "messages": lambda: store.records(sid, kinds=["message"]),
        "export": lambda: store.export_session(sid, tmp_path / "out"),
    }
    for name, read in reads.items():
        with pytest.raises(DecryptionError):
            got = await read()
            pytest.fail(f"{name} read a tampered session: {got!r}")


@pytest.mark.parametrize(
    ("statement", "whose"), [(s, w) for _, s, w in TAMPERING], ids=[n for n, _, _ in TAMPERING]
)
async def test_changed_structure_is_refused(
    db_url: str, tmp_path: Path, statement: str, whose: str
) -> None:
    async with SessionStore.open(db_url, encryption=keys()) as store:
        ids = await build(store)
        before = await store.context_json(getattr(ids, whose))
        await tamper(db_url, statement, ids)
        await assert_every_read_refuses(store, getattr(ids, whose), tmp_path)
    # A store opened afresh refuses it the same.
    async with SessionStore.open(db_url, encryption=keys()) as store:
        with pytest.raises(DecryptionError):
            after = await store.context_json(getattr(ids, whose))
            assert after == before, "the context changed without an error"
            pytest.fail("a changed structure read as before")


async def test_untampered_reads_agree(db_url: str) -> None:
    """The scenario the tampering starts from reads as it should (so that the errors
    above come from the tampering)."""
    async with SessionStore.open(db_url, encryption=keys()) as store:
        ids = await build(store)
        texts = [getattr(m.content[0], "text", None) for m in await store.context(ids.main)]
        assert texts[1:] == ["m3", "m5", None, "[tool result pruned to save context]", "m8"]
        fork = [getattr(m.content[0], "text", None) for m in await store.context(ids.fork)]
        assert fork == ["m1", "m2", "m3", "m4", "m5", None, "r7", "m8"]
        assert len(await store.records(ids.fork)) == 8


# -- the upgrade from values bound to their place only ------------------------------------


async def seal_the_old_way(db_url: str, namespace: str = "default") -> None:
    """Rewrite the namespace's sealed rows as the release before the binding wrote them:
    the data key wrapped with the old context, payloads bound to their place only, no
    lineage seals."""
    db = sql.Database.of(db_url)
    provider = keys()
    (key_row,) = await db.fetch(
        "SELECT version, wrapped_key FROM sessiondb_data_keys WHERE namespace = :ns", ns=namespace
    )
    version = int(key_row.version)
    key = await provider.unwrap(
        "k1", base64.b64decode(key_row.wrapped_key), crypto.wrap_context(namespace, version)
    )
    old_wrap = await provider.wrap("k1", key, crypto.wrap_context(namespace, version, False))
    await db.execute(
        "UPDATE sessiondb_data_keys SET wrapped_key = :w WHERE namespace = :ns",
        w=base64.b64encode(old_wrap).decode(),
        ns=namespace,
    )
    cipher = crypto.aes_gcm(key)
    rows = await db.fetch(
        "SELECT session_id, seq, kind, role, target_seq, first_kept_seq, payload "
        "FROM sessiondb_records"
    )
    for r in rows:
        bound = crypto.record_context(
            namespace, r.session_id, int(r.seq), r.kind, r.role, r.target_seq, r.first_kept_seq
        )
        plain = crypto.unseal(cipher, r.payload, bound)
        where = crypto.row_context(namespace, r.session_id, "payload", int(r.seq))
        await db.execute(
            "UPDATE sessiondb_records SET payload = :p WHERE session_id = :s AND seq = :q",
            p=crypto.seal(cipher, version, plain, where),
            s=r.session_id,
            q=r.seq,
        )
    await db.execute("DELETE FROM sessiondb_lineage_seals")


async def test_old_rows_read_until_rotated_then_tampering_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    async with SessionStore.open(db_url, encryption=keys()) as store:
        ids = await build(store)
        before = {s: await store.context_json(s) for s in (ids.main, ids.fork, ids.other)}
    await seal_the_old_way(db_url)
    async with SessionStore.open(db_url, encryption=keys()) as store:
        # Read as before the binding: bound to their place, not yet to their structure.
        assert {s: await store.context_json(s) for s in before} == before
        records = await store.records(ids.main, include_tombstoned=True)
        assert len(records) == 11
        # New rows are bound from the start, beside the old ones.
        await store.append(ids.other, [{"role": "user", "content": "o7"}])
        report = await store.rotate_keys(reencrypt=True)
        assert report.records_resealed == 18 and report.sessions_resealed == 3
        before[ids.other] = await store.context_json(ids.other)
    async with SessionStore.open(db_url, encryption=keys()) as store:
        assert {s: await store.context_json(s) for s in before} == before
    # After the rotation, each tampering is refused.
    await tamper(db_url, TAMPERING[0][1], ids)
    await tamper(db_url, TAMPERING[9][1], ids)
    async with SessionStore.open(db_url, encryption=keys()) as store:
        await assert_every_read_refuses(store, ids.main, tmp_path)
        await assert_every_read_refuses(store, ids.fork, tmp_path)


async def test_a_removed_lineage_seal_is_refused_after_rotation(db_url: str) -> None:
    """Once a namespace has moved to the binding, a session without its seal is not read
    as an old one: the seal cannot be dropped to swap a fork's parent."""
    async with SessionStore.open(db_url, encryption=keys()) as store:
        ids = await build(store)
    db = sql.Database.of(db_url)
    await db.execute("DELETE FROM sessiondb_lineage_seals WHERE session_id = :f", f=ids.fork)
    await tamper(db_url, TAMPERING[9][1], ids)
    async with SessionStore.open(db_url, encryption=keys()) as store:
        with pytest.raises(DecryptionError, match="lineage is not sealed"):
            await store.context(ids.fork)
        with pytest.raises(DecryptionError, match="lineage is not sealed"):
            await store.records(ids.fork)


# -- any structural column of any record ---------------------------------------------------

COLUMNS = {
    "kind": st.sampled_from(["message", "compaction", "tombstone", "entry", "prune"]),
    "role": st.sampled_from([None, "user", "assistant", "toolResult"]),
    "target_seq": st.one_of(st.none(), st.integers(0, 12)),
    "first_kept_seq": st.one_of(st.none(), st.integers(0, 12)),
}


@given(
    seq=st.integers(1, 11),
    change=st.sampled_from(sorted(COLUMNS)).flatmap(lambda c: st.tuples(st.just(c), COLUMNS[c])),
)
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
async def test_any_changed_column_is_refused(
    db_url: str, seq: int, change: tuple[str, Any]
) -> None:
    column, value = change
    async with SessionStore.open(db_url, encryption=keys()) as store:
        ids = await build(store)
        before = await store.context_json(ids.main)
        db = sql.Database.of(db_url)
        (row,) = await db.fetch(
            f"SELECT {column} AS v FROM sessiondb_records WHERE session_id = :s AND seq = :q",
            s=ids.main,
            q=seq,
        )
        if row.v == value:
            return  # not a change
        await db.execute(
            f"UPDATE sessiondb_records SET {column} = :v WHERE session_id = :s AND seq = :q",
            v=value,
            s=ids.main,
            q=seq,
        )
        # Every record listing reads the row: always refused.
        with pytest.raises(DecryptionError):
            await store.records(ids.main, include_tombstoned=True, include_superseded=True)
        # The context either refuses or is the same (a change before the kept range).
        try:
            after = await store.context_json(ids.main)
        except DecryptionError:
            return
        assert after == before


# -- the schema ---------------------------------------------------------------------------


async def test_an_encrypted_store_on_a_schema_before_the_seals_is_refused(
    empty_db_url: str,
) -> None:
    """A plain store runs ahead of ``migrate`` (tests/behaviour/test_turns.py); an
    encrypted one needs the lineage seals' table, and says to migrate, before it writes
    a session whose lineage it could not seal."""
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate("0009")
    async with SessionStore.open(empty_db_url, encryption=keys()) as store:
        with pytest.raises(ConfigurationError, match=r"revision 0010.*sessiondb migrate"):
            await store.create_session()
        with pytest.raises(ConfigurationError, match="sessiondb migrate"):
            await store.list_sessions()
        await store.migrate()
        sid = (await store.create_session()).id
        assert [s.id for s in (await store.list_sessions()).items] == [sid]
    assert await sql.Database.of(empty_db_url).fetch("SELECT seal FROM sessiondb_lineage_seals")
