"""The Claude Agent SDK adapter: ``SessionDBSessionStore`` passes the SDK's own
conformance suite on SQLite and Postgres, replays real transcripts with the SDK's
``import_session_to_store`` into sessions whose context is the imported file's, and
keeps appends exactly-once and summaries whole across processes. No model is called.
Needs the extra: ``pip install 'sessiondb[claude-agent-sdk]'``."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import uuid as uuids
from pathlib import Path
from typing import Any

import pytest
from helpers import claude_code as cc
from helpers.corpus import CLAUDE_FILES, CORPUS, corpus_present
from helpers.frameworks import need_framework
from helpers.processes import run_processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

need_framework("claude_agent_sdk", "claude-agent-sdk")

from claude_agent_sdk import (  # noqa: E402
    fold_session_summary,
    fork_session_via_store,
    get_session_messages,
    get_session_messages_from_store,
    import_session_to_store,
    list_sessions,
    list_sessions_from_store,
    project_key_for_directory,
)
from claude_agent_sdk.testing import run_session_store_conformance  # noqa: E402

from sessiondb import InvalidInputError, SessionDBError, SessionNotFoundError, SessionStore  # noqa: E402
from sessiondb.integrations.claude_agent_sdk import (  # noqa: E402
    KEY_PREFIX,
    SessionDBSessionStore,
)
from sessiondb.transfer import session_id_for  # noqa: E402

TIMEOUT_S = 120


# -- the SDK's conformance suite ------------------------------------------------------------


async def test_sdk_conformance(db_url: str) -> None:
    """Each contract gets a fresh adapter in a namespace of its own (the suite expects an
    empty store each time)."""
    opened: list[SessionDBSessionStore] = []

    def make() -> SessionDBSessionStore:
        adapter = SessionDBSessionStore(db_url, namespace=f"conformance-{len(opened)}")
        opened.append(adapter)
        return adapter

    try:
        await run_session_store_conformance(make)
    finally:
        for adapter in opened:
            await adapter.close()
    assert len(opened) > 10  # every optional contract ran, each on its own adapter


async def test_sessions_are_real(store: SessionStore, tmp_path: Path) -> None:
    adapter = SessionDBSessionStore(store)
    key = {"project_key": "p", "session_id": "s"}
    entries = [json.loads(x) for x in _generated_lines()]
    await adapter.append(key, entries)  # type: ignore[arg-type]
    sid = await adapter.session_id(key)  # type: ignore[arg-type]
    info = await store.get_session(sid)
    assert info.key == KEY_PREFIX + "p/s"
    kinds = [r.kind for r in await store.records(sid, include_tombstoned=True)]
    assert {"message", "compaction", "entry", "tombstone"} <= set(kinds)
    context = await store.context(sid)
    assert context[0].role == "user" and "summary of the start" in context[0].text()
    assert await adapter.load(key) == entries  # type: ignore[arg-type]
    # Claude Code's own format writes the mirrored lines back, rewind tombstones left out.
    (written,) = await store.export_session(sid, tmp_path, format="claude-code")
    assert written.name == "s.jsonl"
    assert [json.loads(x) for x in written.read_text().splitlines()] == entries
    # A subagent is a child of its main session, listed as a subkey.
    sub = {**key, "subpath": "subagents/agent-1"}
    await adapter.append(sub, [{"type": "agent_metadata", "agentType": "x"}])  # type: ignore[arg-type]
    child = await store.get_session(await adapter.session_id(sub))  # type: ignore[arg-type]
    assert (child.parent_id, child.fork_seq) == (sid, 0)
    assert await adapter.list_subkeys(key) == ["subagents/agent-1"]  # type: ignore[arg-type]
    await adapter.delete(key)  # type: ignore[arg-type]
    assert await adapter.load(sub) is None  # type: ignore[arg-type]
    with pytest.raises(SessionNotFoundError):
        await adapter.session_id(key)  # type: ignore[arg-type]


async def test_create_tables_on_first_use(empty_db_url: str) -> None:
    async with SessionDBSessionStore(empty_db_url, create_tables=True) as adapter:
        key = {"project_key": "p", "session_id": "s"}
        await adapter.append(key, [{"type": "x", "uuid": "1"}, "a damaged line"])  # type: ignore[arg-type,list-item]
        assert await adapter.load(key) == [{"type": "x", "uuid": "1"}, "a damaged line"]  # type: ignore[arg-type]


async def test_awkward_values_round_trip(store: SessionStore) -> None:
    """NUL, lone surrogates (in text and in a key) and integers past 64 bits come back
    from ``load`` as they were appended."""
    adapter = SessionDBSessionStore(store)
    with pytest.raises(InvalidInputError, match="NUL"):  # a key column cannot hold one
        await adapter.append({"project_key": "p\u0000", "session_id": "s"}, [{"type": "x"}])
    key = {"project_key": "p/%2F", "session_id": "\u00e9"}
    entries = [
        json.loads(cc.user("u1", None, "nul \u0000 and \ud800")),
        {"type": "user", "uuid": "u2", "parentUuid": "u1", "\udc00": 2**70,
         "message": {"role": "user", "content": "x"}},
        {"type": "progress", "uuid": "p1", "data": {"n": -(2**65), "f": 1.5}},
    ]  # fmt: skip
    await adapter.append(key, entries)  # type: ignore[arg-type]
    assert await adapter.load(key) == entries  # type: ignore[arg-type]
    sid = await adapter.session_id(key)  # type: ignore[arg-type]
    assert [m.text() for m in await store.context(sid)] == ["nul \u0000 and \ud800"]


async def test_project_keys_are_prefixes_not_patterns(store: SessionStore) -> None:
    """``%``, ``_`` and ``/`` in a project key match only themselves, and case counts."""
    adapter = SessionDBSessionStore(store)
    for project in ("a_b", "a%b", "axb", "A_B", "a/b"):
        await adapter.append({"project_key": project, "session_id": "s/1"}, [{"type": "x"}])
    for project in ("a_b", "a%b", "axb", "A_B", "a/b"):
        listed = await adapter.list_sessions(project)
        assert [s["session_id"] for s in listed] == ["s/1"], project
    assert await adapter.list_sessions("a") == []


# -- real transcripts through the SDK's own import -------------------------------------------


def _generated_lines() -> list[str]:
    """A transcript with a split response and its tool results, a line without uuid, a
    title, a compact boundary and its summary, and a rewind."""
    return [
        cc.user("u1", None, "read two files"),
        cc.assistant("a1", "u1", [cc.text("reading")], "m1", usage={"input_tokens": 5}),
        cc.assistant("a2", "a1", [cc.tool_use("t1")], "m1", usage={"input_tokens": 9}),
        cc.tool_result("r1", "a2", "t1", "one"),
        cc.assistant("a3", "r1", [cc.tool_use("t2", "Write")], "m2"),
        cc.tool_result("r2", "a3", "t2", "two"),
        cc.line(type="custom-title", customTitle="files", sessionId="s"),
        cc.line(
            type="system",
            subtype="compact_boundary",
            uuid="b1",
            parentUuid=None,
            logicalParentUuid="r2",
            compactMetadata={"trigger": "auto", "preTokens": 1234},
        ),
        cc.line(
            type="user",
            uuid="c1",
            parentUuid="b1",
            isCompactSummary=True,
            message={"role": "user", "content": "summary of the start"},
        ),
        cc.user("u2", "c1", "first try"),
        cc.assistant("a4", "u2", [cc.text("wrong")], "m3"),
        cc.user("u3", "c1", "second try"),  # a rewind: u2 and a4 leave the branch
        cc.assistant("a5", "u3", [cc.text("right")], "m4"),
    ]


def _transcripts(tmp_path: Path) -> list[tuple[str, Path]]:
    """``(name, file)``: the generated transcript, and the corpus's Claude Code files
    (main files with their subagents) when the corpus is there."""
    made = tmp_path / "generated.jsonl"
    made.write_text("\n".join(_generated_lines()) + "\n")
    found = [("generated", made)]
    if corpus_present():
        for name in CLAUDE_FILES:
            if "/subagents/" not in name:
                found.append((name, CORPUS / "claude-code" / name))
    return found


def _lay_out(source: Path, projects: Path, project_key: str) -> str:
    """Copy ``source`` (and its subagents) where Claude Code keeps a session; its id."""
    session_id = str(uuids.uuid5(uuids.NAMESPACE_URL, str(source)))
    folder = projects / project_key
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, folder / f"{session_id}.jsonl")
    agents = source.with_suffix("") / "subagents"
    if agents.is_dir():
        shutil.copytree(agents, folder / session_id / "subagents")
    return session_id


@pytest.mark.parametrize("batch_size", [500, 7])
async def test_import_transcripts(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    """``import_session_to_store`` then: ``load`` gives the file's lines, the SDK reads the
    same messages from the store as from the file, and the context is the one
    ``import_path`` gives the file."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    project_key = project_key_for_directory(work)
    projects = tmp_path / "config" / "projects"
    adapter = SessionDBSessionStore(store)
    tried = 0
    for name, source in _transcripts(tmp_path):
        lines = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
        with_uuid = [x["uuid"] for x in lines if isinstance(x, dict) and "uuid" in x]
        if batch_size < len(lines) and len(set(with_uuid)) < len(with_uuid):
            # A uuid repeated in a later append is the SDK's retry of a batch, skipped
            # (two corpus files trimmed their uuids to one text); within one batch it
            # is a line of its own.
            continue
        tried += 1
        session_id = _lay_out(source, projects, project_key)
        file = projects / project_key / f"{session_id}.jsonl"
        await import_session_to_store(
            session_id, adapter, directory=str(work), batch_size=batch_size
        )
        key = {"project_key": project_key, "session_id": session_id}
        assert await adapter.load(key) == lines, name  # type: ignore[arg-type]
        from_file = get_session_messages(session_id, directory=str(work))
        from_store = await get_session_messages_from_store(adapter, session_id, directory=str(work))
        assert from_store == from_file and from_file, name
        # The context of the same file imported by sessiondb.
        report = await store.import_path(file)
        assert not report.failures, report.failures
        imported = session_id_for(store.namespace, f"claude-code:{session_id}")
        mirrored = await adapter.session_id(key)  # type: ignore[arg-type]
        if batch_size == 500:
            assert await store.context(mirrored) == await store.context(imported), name
        else:  # split responses across batches keep their first part's usage only
            assert _without_usage(await store.context(mirrored)) == _without_usage(
                await store.context(imported)
            ), name
        subagents = sorted((file.with_suffix("") / "subagents").glob("*.jsonl"))
        listed = await adapter.list_subkeys(key)  # type: ignore[arg-type]
        assert listed == sorted(f"subagents/{p.stem}" for p in subagents), name
        for path in subagents:
            sub = {**key, "subpath": f"subagents/{path.stem}"}
            loaded = await adapter.load(sub)  # type: ignore[arg-type]
            assert loaded is not None
            agent_lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            assert loaded[: len(agent_lines)] == agent_lines, name
            child = await adapter.session_id(sub)  # type: ignore[arg-type]
            twin = session_id_for(store.namespace, f"claude-code:{session_id}/{path.stem}")
            if batch_size == 500:
                assert await store.context(child) == await store.context(twin), name
            assert (await store.get_session(child)).parent_id == mirrored
    assert len(await adapter.list_sessions(project_key)) == tried
    from_store = await list_sessions_from_store(adapter, directory=str(work))
    from_files = list_sessions(directory=str(work))
    assert sorted(s.session_id for s in from_store) == sorted(s.session_id for s in from_files)
    assert from_store


def _without_usage(messages: list[Any]) -> list[Any]:
    """Roles and content: a response split over two appends differs in its first part's
    usage (and the line that part's envelope keeps), nothing the model is sent."""
    return [(m.role, m.content, m.tool_call_id) for m in messages]


async def test_a_writer_that_reads_back_stores_what_one_that_remembers_does(
    store: SessionStore, tmp_path: Path
) -> None:
    """One adapter keeps the reader's state between its appends; two taking turns each
    find the head moved and read the stored lines back. Both store the same records."""
    sources = [source for _, source in _transcripts(tmp_path)]
    one = SessionDBSessionStore(store)
    turns = [SessionDBSessionStore(store), SessionDBSessionStore(store)]
    for number, source in enumerate(sources):
        lines = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
        kept = {"project_key": "kept", "session_id": str(number)}
        read = {"project_key": "read", "session_id": str(number)}
        for n, start in enumerate(range(0, len(lines), 7)):
            await one.append(kept, lines[start : start + 7])  # type: ignore[arg-type]
            await turns[n % 2].append(read, lines[start : start + 7])  # type: ignore[arg-type]
        records = []
        for key in (kept, read):
            sid = await one.session_id(key)  # type: ignore[arg-type]
            stored = await store.records(sid, include_tombstoned=True)
            records.append([r.model_dump(exclude={"session_id", "created_at"}) for r in stored])
        assert records[0] == records[1], source.name
        assert records[0], source.name


async def test_fork_via_store(
    store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    adapter = SessionDBSessionStore(store)
    made = tmp_path / "generated.jsonl"
    made.write_text("\n".join(_generated_lines()) + "\n")
    project_key = project_key_for_directory(work)
    session_id = _lay_out(made, tmp_path / "config" / "projects", project_key)
    await import_session_to_store(session_id, adapter, directory=str(work))
    result = await fork_session_via_store(adapter, session_id, directory=str(work), title="fork")
    fork_key = {"project_key": project_key, "session_id": result.session_id}
    original = await get_session_messages_from_store(adapter, session_id, directory=str(work))
    forked = await get_session_messages_from_store(adapter, result.session_id, directory=str(work))
    assert [m.type for m in forked] == [m.type for m in original]
    assert [m.message for m in forked] == [m.message for m in original]
    fork_sid = await adapter.session_id(fork_key)  # type: ignore[arg-type]
    assert fork_sid != await adapter.session_id(  # type: ignore[arg-type]
        {"project_key": project_key, "session_id": session_id}
    )
    texts = [m.text() for m in await store.context(fork_sid)]
    assert texts[-1] == "right"


async def test_retried_batches_are_stored_once(store: SessionStore) -> None:
    adapter = SessionDBSessionStore(store)
    key = {"project_key": "p", "session_id": "retry"}
    entries = [json.loads(x) for x in _generated_lines()]
    await adapter.append(key, entries[:5])  # type: ignore[arg-type]
    await adapter.append(key, entries[:5])  # type: ignore[arg-type]  # the SDK's retry
    await adapter.append(key, entries[3:])  # type: ignore[arg-type]  # overlapping
    assert await adapter.load(key) == entries  # type: ignore[arg-type]
    sid = await adapter.session_id(key)  # type: ignore[arg-type]
    stored = await store.records(sid, include_tombstoned=True)
    assert len([r for r in stored if r.kind != "tombstone"]) == len(entries)
    summaries = await adapter.list_session_summaries("p")
    expected = fold_session_summary(None, key, entries)  # type: ignore[arg-type]
    assert summaries[0]["data"] == expected["data"]


# -- several processes against Postgres -------------------------------------------------------

PROCS = 4
BATCHES = 6
PER_BATCH = 5


def _append_in_process(url: str, worker: int) -> None:
    async def run() -> None:
        async with SessionDBSessionStore(url) as adapter:
            key = {"project_key": "p", "session_id": "shared"}
            for b in range(BATCHES):
                batch = [
                    {
                        "type": "user",
                        "uuid": f"w{worker}-b{b}-{i}",
                        "timestamp": f"2026-01-01T00:00:{b:02d}.000Z",
                        "message": {"role": "user", "content": f"{worker} {b} {i}"},
                    }
                    for i in range(PER_BATCH)
                ]
                batch.append({"type": "x", "worker": worker, "batch": b})  # no uuid
                await adapter.append(key, batch)  # type: ignore[arg-type]
                if b % 2:
                    await adapter.append(key, batch[:-1])  # type: ignore[arg-type]  # a retry

    asyncio.run(run())


async def test_processes_append_concurrently(pg_url: str) -> None:
    await asyncio.to_thread(
        run_processes, _append_in_process, lambda p: (pg_url, p), PROCS, timeout=TIMEOUT_S
    )
    async with SessionDBSessionStore(pg_url) as adapter:
        key = {"project_key": "p", "session_id": "shared"}
        loaded = await adapter.load(key)  # type: ignore[arg-type]
        assert loaded is not None
        with_uuid = [e["uuid"] for e in loaded if "uuid" in e]
        assert len(with_uuid) == len(set(with_uuid)) == PROCS * BATCHES * PER_BATCH
        markers = [(e["worker"], e["batch"]) for e in loaded if "worker" in e]
        assert sorted(markers) == [(w, b) for w in range(PROCS) for b in range(BATCHES)]
        for worker in range(PROCS):  # each process's entries in its own order
            mine = [u for u in with_uuid if u.startswith(f"w{worker}-")]
            expected = [f"w{worker}-b{b}-{i}" for b in range(BATCHES) for i in range(PER_BATCH)]
            assert mine == expected
        # Every fold kept: the summary is the fold of what was stored, in its order.
        summary = (await adapter.list_session_summaries("p"))[0]
        assert summary["data"] == fold_session_summary(None, key, loaded)["data"]  # type: ignore[arg-type]
        sid = await adapter.session_id(key)  # type: ignore[arg-type]
        info = await adapter.store.get_session(sid)
        assert info.message_count == PROCS * BATCHES * PER_BATCH


# -- fuzz: only SessionDBError ----------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_keys = st.one_of(
    st.fixed_dictionaries(
        {"project_key": st.text(max_size=6), "session_id": st.text(max_size=6)},
        optional={"subpath": st.text(max_size=6)},
    ),
    _json,
)
_entries = st.one_of(
    st.lists(st.dictionaries(st.sampled_from(["type", "uuid", "message", "x"]), _json), max_size=4),
    _json,
)


_METHODS = ["append", "load", "list", "summaries", "delete", "sub"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_fuzz_public_methods(store: SessionStore, data: st.DataObject) -> None:
    adapter = SessionDBSessionStore(store)
    for _ in range(4):
        method = data.draw(
            st.sampled_from(["append", "load", "list", "summaries", "delete", "sub"])
        )
        key = data.draw(_keys)
        try:
            if method == "append":
                await adapter.append(key, data.draw(_entries))
            elif method == "load":
                await adapter.load(key)
            elif method == "list":
                await adapter.list_sessions(data.draw(st.text(max_size=4) | _json))
            elif method == "summaries":
                await adapter.list_session_summaries(data.draw(st.text(max_size=4) | _json))
            elif method == "delete":
                await adapter.delete(key)
            else:
                await adapter.list_subkeys(key)
        except SessionDBError:
            pass


def test_without_the_sdk_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['claude_agent_sdk'] = None\n"
        "try:\n"
        "    import sessiondb.integrations.claude_agent_sdk\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "MissingDependencyError claude-agent-sdk is not installed; "
        "install it with: pip install 'sessiondb[claude-agent-sdk]'"
    )


async def test_a_subagent_before_its_main_transcript(store: SessionStore) -> None:
    """The main session made for it holds nothing: not loaded, not listed, and its
    first own append fills it."""
    adapter = SessionDBSessionStore(store)
    main = {"project_key": "p", "session_id": "s"}
    sub = {**main, "subpath": "subagents/agent-1"}
    await adapter.append(sub, [{"type": "user", "uuid": "x"}])  # type: ignore[arg-type]
    assert await adapter.load(main) is None  # type: ignore[arg-type]
    assert await adapter.list_sessions("p") == []
    assert await adapter.list_session_summaries("p") == []
    assert await adapter.list_subkeys(main) == ["subagents/agent-1"]  # type: ignore[arg-type]
    await adapter.append(main, [{"type": "user", "uuid": "x"}])  # type: ignore[arg-type]
    assert await adapter.load(main) == [{"type": "user", "uuid": "x"}]  # type: ignore[arg-type]
    assert [s["session_id"] for s in await adapter.list_sessions("p")] == ["s"]
    sid = await adapter.session_id(main)  # type: ignore[arg-type]
    child = await store.get_session(await adapter.session_id(sub))  # type: ignore[arg-type]
    assert child.parent_id == sid


async def test_options_go_with_a_url_only(store: SessionStore) -> None:
    with pytest.raises(InvalidInputError, match="options"):
        SessionDBSessionStore(store, namespace="other")
    with pytest.raises(InvalidInputError):
        SessionDBSessionStore(42)  # type: ignore[arg-type]
    with pytest.raises(SessionDBError):
        SessionDBSessionStore("sqlite:///x.db", no_such_option=1)
