"""export_all streams: a session's rows go to its file as they are read, so memory
holds a few batches however long the session is, and a failed read stops the export
with the error instead of writing a short file as if it were whole."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from helpers import sql

from sessiondb import DatabaseUnavailableError, SessionStore, transfer
from sessiondb import statements as q
from sessiondb.formats import claude_code, pi, spill

RECORDS = 2_000
TEXT = 2_000  # characters a message: the session holds about 4 MB of text


async def _long_session(store: SessionStore) -> str:
    sid = (await store.create_session()).id
    for start in range(0, RECORDS, 500):
        await store.append(
            sid,
            [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i:05d} " + "x" * TEXT}
                for i in range(start, start + 500)
            ],
        )
    return sid


@pytest.mark.parametrize("fmt", ["native", "claude-code"])
@pytest.mark.parametrize("how", ["export_all", "export_session", "a fork"])
async def test_a_long_session_is_exported_in_flat_memory(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, how: str
) -> None:
    sid = await _long_session(store)
    if how == "a fork":  # its lineage: the parent's rows, then its own
        sid = (await store.fork(sid, at_seq=RECORDS - 1)).id
        await store.append(sid, [{"role": "assistant", "content": "forked " + "x" * TEXT}])
    monkeypatch.setattr(transfer.exporter, "EXPORT_BATCH", 50)
    tracemalloc.start()
    try:
        if how == "export_all":
            paths = (await store.export_all(tmp_path / "out", format=fmt))[sid]
        else:
            paths = await store.export_session(sid, tmp_path / "out", format=fmt)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Held whole, the session took 6 MB; streamed, a few batches of 50 and the file's
    # 1 MB buffer.
    assert peak < 3_000_000, peak
    lines = [json.loads(line) for line in paths[0].read_text().splitlines()]
    texts = json.dumps(lines)
    if how == "a fork" and fmt == "native":
        assert len(lines) == 1 and "forked x" in texts  # the parent's rows go with it
        return
    last = "forked x" if how == "a fork" else f"{RECORDS - 1:05d} x"
    assert len(lines) == RECORDS
    assert all(text in texts for text in ("00000 x", "00999 x", last))


class _FailingReads:
    """A backend whose fifth read of a batch of the namespace's records raises what a
    backend raises when the server goes away mid-export; the rest it passes on."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.flavour = backend.flavour
        self.reads = 0
        self.batches = [
            q.namespace_records("x", after=after, limit=1, every=every, flavour=flavour)[0]
            for after in (None, ("", 0))
            for every in (False, True)
            for flavour in (None, backend.flavour)
        ]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def fetch(self, bound: Any, **options: Any) -> Any:
        if bound[0] in self.batches:  # a batch of the namespace's records
            self.reads += 1
            if self.reads == 5:
                raise DatabaseUnavailableError("the server went away")
        return await self.backend.fetch(bound, **options)


async def test_a_failed_read_stops_the_export_with_its_error(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer.exporter, "EXPORT_BATCH", 100)
    backends: list[_FailingReads] = []

    def failing(backend: Any) -> _FailingReads:
        backends.append(_FailingReads(backend))
        return backends[-1]

    async with sql.store_on(store_url, wrap=failing) as store:
        sid = await _long_session(store)
        with pytest.raises(DatabaseUnavailableError, match="the server went away"):
            await store.export_all(tmp_path / "out", format="native")
        assert backends[0].reads == 5
        # Nothing was committed or changed in the database by the failed export.
        assert (
            await sql.scalar(
                store, f"SELECT count(*) FROM sessiondb_records WHERE session_id = '{sid}'"
            )
            == RECORDS
        )


@pytest.mark.parametrize("fmt", ["claude-code", "pi"])
async def test_the_writers_indexes_on_disk_give_the_same_files(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """The writers' seq -> uuid/id maps (for a tombstone or a compaction made in the
    database, which name their target by seq) move to disk on long sessions."""
    sid = (await store.create_session()).id
    await store.append(
        sid,
        [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}", "uuid": f"u-{i}"}
            for i in range(1, 301)
        ],
    )
    await store.tombstone(sid, 5)
    await store.tombstone(sid, 250)
    await store.append_compaction(sid, summary="so far", first_kept_seq=201)
    in_memory = await store.export_session(sid, tmp_path / "memory", format=fmt)
    monkeypatch.setattr(spill, "SPILL_ENTRIES", 2)
    monkeypatch.setattr(claude_code, "SPILL_CHECK", 1)
    monkeypatch.setattr(pi, "SPILL_CHECK", 1)
    on_disk = await store.export_session(sid, tmp_path / "disk", format=fmt)
    lines = [json.loads(x) for x in on_disk[0].read_text().splitlines()]
    assert lines == [json.loads(x) for x in in_memory[0].read_text().splitlines()]
    if fmt == "claude-code":
        deleted = [x["deleted_uuid"] for x in lines if x.get("type") == "tombstone"]
        assert deleted == ["u-5", "u-250"]
    else:
        (compaction,) = [x for x in lines if x.get("type") == "compaction"]
        (kept,) = [x for x in lines if '"m201"' in json.dumps(x.get("message"))]
        assert compaction["firstKeptEntryId"] == kept["id"]
