"""Encryption at rest (``SessionStore.open(url, encryption=…)``), on SQLite and Postgres:
no plaintext in any stored row, tampering and wrong keys refused with typed errors,
plain and encrypted namespaces side by side, rotation while appends go on."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.frameworks import need_framework
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import (
    DecryptionError,
    EncryptedNamespaceError,
    EncryptionError,
    KeyConfigurationError,
    SessionDBError,
    SessionStore,
    cli,
    jsoncodec,
)
from sessiondb.crypto import StaticKeyProvider
from sessiondb.tables import metadata

MARKER = "Zebra-Quartz-7731"
K1 = bytes(range(32))
K2 = bytes(range(32, 64))


def provider(**keys: bytes) -> StaticKeyProvider:
    current = next(iter(keys))
    return StaticKeyProvider(keys, current)


async def every_cell(url: str) -> list[str]:
    """Every value of every sessiondb table, as text."""
    db = sql.Database.of(url)
    cells: list[str] = []
    for table in metadata.sorted_tables:
        for row in await db.fetch(f"SELECT * FROM {table.name}"):
            cells += [str(v) for v in row]
    return cells


async def fill(store: SessionStore, marker: str = MARKER) -> str:
    """A session holding ``marker`` in every sealed place, through every write path."""
    info = await store.create_session(
        name=f"name {marker}",
        system_prompt_override=f"prompt {marker}",
        metadata={"note": marker},
    )
    await store.append(info.id, [{"role": "user", "content": f"hello {marker}"}])
    await store.append(
        info.id,
        [
            {"role": "assistant", "content": f"one {marker}", "uuid": "u-1"},
            {"role": "user", "content": f"two {marker}"},
        ],
    )
    await store.append_compaction(info.id, summary=f"summary {marker}", first_kept_seq=2)
    await store.rename(info.id, f"renamed {marker}")
    await store.fork(info.id)
    await store.fork(info.id, at_seq=2, detach=True)
    await store.tombstone(info.id, 3, reason=f"reason {marker}")
    await store.import_sessions(
        [
            {
                "name": f"imported {marker}",
                "metadata": {"m": marker},
                "system_prompt_override": marker,
                "messages": [{"role": "user", "content": f"imported {marker}"}],
            }
        ]
    )
    unnamed = await store.create_session()
    await store.append(unnamed.id, [{"role": "user", "content": f"derived name {marker}"}])
    return info.id


async def test_no_stored_row_holds_plaintext(db_url: str) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        sid = await fill(store)
        context = await store.context(sid)
        assert [m.content[0].text for m in context] == [  # type: ignore[union-attr]
            "The conversation history before this point was compacted into the following "
            f"summary:\n<summary>\nsummary {MARKER}\n</summary>",
            f"one {MARKER}",
        ]
        assert MARKER in await store.context_json(sid)
        info = await store.get_session(sid)
        assert info.name == f"renamed {MARKER}"
        assert info.metadata == {"note": MARKER}
        assert info.system_prompt_override == f"prompt {MARKER}"
        page = await store.list_sessions()
        assert {s.name for s in page.items} >= {
            f"renamed {MARKER}",
            f"imported {MARKER}",
            f"derived name {MARKER}",
        }
        for s in page.items:
            assert all(r.kind for r in await store.records(s.id))
    cells = await every_cell(db_url)
    assert cells, "the tables are empty"
    assert not [c for c in cells if MARKER in c]
    assert any(c.startswith("sdb1:1:") for c in cells)


async def test_export_writes_plaintext(db_url: str, tmp_path: Path) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        sid = await fill(store)
        written = await store.export_session(sid, tmp_path / "one")
        every = await store.export_all(tmp_path / "all")
    assert MARKER in "".join(p.read_text("utf-8") for p in written)
    assert len(every) == 5
    texts = "".join(p.read_text("utf-8") for paths in every.values() for p in paths)
    assert f"imported {MARKER}" in texts
    assert "sdb1:" not in texts
    # ...and the files import into another encrypted namespace, still sealed there.
    async with SessionStore.open(db_url, "other", encryption=provider(k1=K1)) as store:
        report = await store.import_path(tmp_path / "all")
        assert report.created == 5
        ids = [s.id for s in (await store.list_sessions()).items]
        assert len(ids) == 5
    assert not [c for c in await every_cell(db_url) if MARKER in c]


async def test_plain_and_encrypted_namespaces_side_by_side(db_url: str) -> None:
    async with SessionStore.open(db_url, "plain") as plain:
        plain_id = (await plain.create_session(name="visible")).id
        await plain.append(plain_id, [{"role": "user", "content": "in the clear"}])
    async with SessionStore.open(db_url, "secret", encryption=provider(k1=K1)) as secret:
        secret_id = await fill(secret)
    async with SessionStore.open(db_url, "plain") as plain:
        assert (await plain.context(plain_id))[0].content[0].text == "in the clear"  # type: ignore[union-attr]
    async with SessionStore.open(db_url, "secret") as plain:
        with pytest.raises(EncryptedNamespaceError, match="is encrypted"):
            await plain.get_session(secret_id)
    async with SessionStore.open(db_url, "secret") as plain:
        with pytest.raises(EncryptedNamespaceError):
            await plain.context(secret_id)
    async with SessionStore.open(db_url, "plain", encryption=provider(k1=K1)) as sealed:
        with pytest.raises(EncryptedNamespaceError, match="unencrypted sessions"):
            await sealed.context(plain_id)
    cells = await every_cell(db_url)
    assert any("in the clear" in c for c in cells)


async def test_wrong_or_missing_master_key(db_url: str) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        sid = await fill(store)
    async with SessionStore.open(db_url, encryption=provider(k1=K2)) as store:
        with pytest.raises(DecryptionError, match="does not open this data key"):
            await store.context(sid)
    async with SessionStore.open(db_url, encryption=provider(k9=K1)) as store:
        with pytest.raises(KeyConfigurationError, match="no master key 'k1'"):
            await store.get_session(sid)


async def _raw_payloads(url: str) -> list[Any]:
    db = sql.Database.of(url)
    return await db.fetch("SELECT session_id, seq, payload FROM sessiondb_records ORDER BY seq")


async def test_tampered_or_moved_ciphertext_is_refused(db_url: str) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        info = await store.create_session(metadata={"a": 1})
        other = await store.create_session(metadata={"b": 2})
        await store.append(info.id, [{"role": "user", "content": f"m{i}"} for i in range(3)])
    db = sql.Database.of(db_url)
    rows = await _raw_payloads(db_url)
    first, second = rows[0].payload, rows[1].payload
    # One byte of the ciphertext flipped.
    head, body = first.rsplit(":", 1)
    raw = bytearray(base64.b64decode(body))
    raw[20] ^= 1
    flipped = f"{head}:{base64.b64encode(bytes(raw)).decode()}"
    update = "UPDATE sessiondb_records SET payload = :p WHERE session_id = :s AND seq = :q"
    await db.execute(update, p=flipped, s=info.id, q=1)
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        with pytest.raises(DecryptionError, match=f"session {info.id} seq 1"):
            await store.context(info.id)
        with pytest.raises(DecryptionError, match="authentication failed"):
            await store.records(info.id)
        # Swapped rows: each ciphertext is intact but bound to the other seq.
        await db.execute(update, p=second, s=info.id, q=1)
        await db.execute(update, p=first, s=info.id, q=2)
        with pytest.raises(DecryptionError):
            await store.context_json(info.id)
        await db.execute(update, p=first, s=info.id, q=1)
        await db.execute(update, p=second, s=info.id, q=2)
        assert len(await store.context(info.id)) == 3
        # Metadata moved from one session to another.
        meta = (
            await db.fetch(f"SELECT metadata_json FROM sessiondb_sessions WHERE id = '{info.id}'")
        )[0].metadata_json
        await db.execute(
            "UPDATE sessiondb_sessions SET metadata_json = :m WHERE id = :i", m=meta, i=other.id
        )
        with pytest.raises(DecryptionError, match=f"session {other.id}"):
            await store.get_session(other.id)
        # A plaintext value slipped into an encrypted namespace.
        await db.execute(update, p='{"role":"user","content":[]}', s=info.id, q=3)
        with pytest.raises(DecryptionError, match="not sessiondb ciphertext"):
            await store.records(info.id, from_seq=3)


async def test_rotation_rewraps_and_reencrypts(db_url: str) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        sid = await fill(store)
        before = await store.context_json(sid)
        assert (await store.rotate_keys()).rewrapped == 0  # k1 is current already
    rotated = StaticKeyProvider({"k1": K1, "k2": K2}, "k2")
    async with SessionStore.open(db_url, encryption=rotated) as store:
        report = await store.rotate_keys()
        assert (report.rewrapped, report.current_version, report.master_key_id) == (1, 1, "k2")
        assert (await store.rotate_keys()).rewrapped == 0  # idempotent
    async with SessionStore.open(db_url, encryption=provider(k2=K2)) as store:  # k1 gone
        assert await store.context_json(sid) == before
        report = await store.rotate_keys(reencrypt=True)
        assert report.current_version == 2
        assert report.records_resealed == len(await _raw_payloads(db_url))
        assert report.sessions_resealed == 5
        assert await store.context_json(sid) == before
    payloads = [r.payload for r in await _raw_payloads(db_url)]
    assert all(p.startswith("sdb1:2:") for p in payloads)
    async with SessionStore.open(db_url, encryption=provider(k2=K2)) as store:
        again = await store.rotate_keys(reencrypt=True)
        assert again.current_version == 3
        assert again.records_resealed == len(payloads)
        assert await store.context_json(sid) == before
    assert not [c for c in await every_cell(db_url) if MARKER in c]


async def test_rotation_without_keys_is_a_typed_error(db_url: str) -> None:
    async with SessionStore.open(db_url) as store:
        with pytest.raises(EncryptionError, match="encryption="):
            await store.rotate_keys()


async def _appender(url: str, sid: str, n: int, keys: StaticKeyProvider) -> None:
    async with SessionStore.open(url, encryption=keys) as store:
        for i in range(n):
            await store.append(sid, [{"role": "user", "content": f"{MARKER} {i}"}])
            await asyncio.sleep(0)


async def test_reencryption_while_appends_go_on(db_url: str) -> None:
    keys = StaticKeyProvider({"k1": K1, "k2": K2}, "k1")
    async with SessionStore.open(db_url, encryption=keys) as store:
        sids = [(await store.create_session()).id for _ in range(3)]
        for sid in sids:
            await store.append(
                sid, [{"role": "user", "content": f"{MARKER} {i}"} for i in range(300)]
            )
    rotated = StaticKeyProvider({"k1": K1, "k2": K2}, "k2")
    async with SessionStore.open(db_url, encryption=rotated) as store:
        writers = [asyncio.ensure_future(_appender(db_url, sid, 40, keys)) for sid in sids]
        report = await store.rotate_keys(reencrypt=True)
        await asyncio.gather(*writers)
        assert report.current_version == 2 and report.records_resealed > 0
        # Rows appended meanwhile by stores still holding data key 1 stay readable; a
        # second run moves them too.
        await store.rotate_keys(reencrypt=True)
    async with SessionStore.open(db_url, encryption=provider(k2=K2)) as store:
        for sid in sids:
            texts = [m.content[0].text for m in await store.context(sid)]  # type: ignore[union-attr]
            assert texts == [f"{MARKER} {i}" for i in range(300)] + [
                f"{MARKER} {i}" for i in range(40)
            ]
            info = await store.get_session(sid)
            assert info.last_seq == 340
    assert all(r.payload.startswith("sdb1:3:") for r in await _raw_payloads(db_url))


payload_texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "🙂" * 3]),
    st.integers(min_value=100_000, max_value=400_000).map(lambda n: "é" * n),
)


@given(texts=st.lists(payload_texts, min_size=1, max_size=3))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
async def test_payloads_round_trip(db_url: str, texts: list[str]) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        info = await store.create_session(metadata={"t": texts[0]})
        await store.append(info.id, [{"role": "user", "content": t} for t in texts])
        got = await store.context(info.id)
        assert [m.content[0].text for m in got] == texts  # type: ignore[union-attr]
        assert (await store.get_session(info.id)).metadata == {"t": texts[0]}
        wire = jsoncodec.loads(await store.context_json(info.id))
        assert [m["content"][0]["text"] for m in wire] == texts


hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=10),
    st.binary(max_size=40),
    st.dictionaries(st.text(max_size=5), st.one_of(st.binary(max_size=40), st.text())),
    st.lists(st.integers(), max_size=3),
)


@given(keys=hostile, current=hostile, text=hostile)
@settings(max_examples=200, deadline=None)
def test_provider_constructors_raise_only_typed_errors(keys: Any, current: Any, text: Any) -> None:
    for build in (
        lambda: StaticKeyProvider(keys, current),
        lambda: StaticKeyProvider.from_text(text, current),
        lambda: StaticKeyProvider.from_text(text),
    ):
        try:
            made = build()
        except SessionDBError:
            continue
        assert made.current_key_id in made.key_ids


@given(reencrypt=hostile, encryption=hostile)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
async def test_public_methods_raise_only_typed_errors(
    db_url: str, reencrypt: Any, encryption: Any
) -> None:
    async with SessionStore.open(db_url, "fuzz", encryption=provider(k1=K1)) as store:
        try:
            await store.rotate_keys(reencrypt=reencrypt)
        except SessionDBError:
            pass
        else:
            assert isinstance(reencrypt, bool)
    try:
        async with SessionStore.open(db_url, "fuzz2", encryption=encryption) as store:
            await store.list_sessions()
    except SessionDBError:
        pass


def test_key_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys.json"
    encoded = {"k1": base64.b64encode(K1).decode(), "k2": base64.b64encode(K2).decode()}
    path.write_text(json.dumps({"current": "k2", "keys": encoded}))
    made = StaticKeyProvider.from_file(path)
    assert (made.current_key_id, made.key_ids) == ("k2", ("k1", "k2"))
    assert "AAEC" not in repr(made)
    for bad, message in (
        ("[]", "expected"),
        ('{"current": "k3", "keys": {"k1": "AAAA"}}', "must be 32 bytes"),
        ('{"current": "k3", "keys": {"k1": "' + encoded["k1"] + '"}}', "not among"),
        ("{" * 10_000, "not JSON"),
    ):
        path.write_text(bad)
        with pytest.raises(KeyConfigurationError, match=message):
            StaticKeyProvider.from_file(path)
    with pytest.raises(KeyConfigurationError, match="cannot read"):
        StaticKeyProvider.from_file(tmp_path / "missing.json")
    monkeypatch.setenv("SESSIONDB_MASTER_KEYS", f"k2:{encoded['k2']}, k1:{encoded['k1']}")
    assert StaticKeyProvider.from_env().current_key_id == "k2"
    monkeypatch.setenv("SESSIONDB_MASTER_KEYS", "k1:notbase64!")
    with pytest.raises(KeyConfigurationError, match=r"SESSIONDB_MASTER_KEYS: .*not base64"):
        StaticKeyProvider.from_env()
    monkeypatch.delenv("SESSIONDB_MASTER_KEYS")
    with pytest.raises(KeyConfigurationError, match="is not set"):
        StaticKeyProvider.from_env()


def test_import_sessiondb_does_not_import_cryptography() -> None:
    code = (
        "import sys, sessiondb, sessiondb.crypto; "
        "assert 'cryptography' not in sys.modules, 'imported'; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


def test_missing_cryptography_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['cryptography'] = None\n"
        "import asyncio\n"
        "from sessiondb import MissingDependencyError\n"
        "from sessiondb.crypto import StaticKeyProvider\n"
        "p = StaticKeyProvider({'k': bytes(32)}, 'k')\n"
        "try:\n"
        "    asyncio.run(p.wrap('k', bytes(32), b''))\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'sessiondb[crypto]'" in done.stdout, done.stderr


async def test_cli_rotates_keys(db_url: str, tmp_path: Path) -> None:
    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        sid = await fill(store)
    keys = tmp_path / "keys.json"
    encoded = {"k1": base64.b64encode(K1).decode(), "k2": base64.b64encode(K2).decode()}
    keys.write_text(json.dumps({"current": "k2", "keys": encoded}))

    def run(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return cli.main(["--db", db_url, *argv], out=out), out.getvalue()

    status, text = await asyncio.to_thread(run, "keys", "rotate", "--keys-file", str(keys))
    assert (status, text) == (0, "data keys re-wrapped under k2: 1; current data key: 1\n")
    keys.write_text(json.dumps({"current": "k2", "keys": {"k2": encoded["k2"]}}))
    status, text = await asyncio.to_thread(
        run, "keys", "rotate", "--reencrypt", "--json", "--keys-file", str(keys)
    )
    assert status == 0
    assert json.loads(text)["current_version"] == 2
    status, text = await asyncio.to_thread(
        run, "sessions", "show", sid, "--json", "--keys-file", str(keys)
    )
    assert status == 0 and MARKER in text
    assert (await asyncio.to_thread(run, "sessions", "show", sid))[0] == 1  # no keys given
    assert (await asyncio.to_thread(run, "keys", "rotate"))[0] == 1


async def test_adk_service_refuses_an_encrypted_store(db_url: str) -> None:
    need_framework("google.adk", "adk")
    from sessiondb.integrations import adk

    async with SessionStore.open(db_url, encryption=provider(k1=K1)) as store:
        with pytest.raises(EncryptionError, match="ADK"):
            adk.SessionDBSessionService(store)
