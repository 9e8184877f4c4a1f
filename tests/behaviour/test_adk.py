"""The Google ADK adapter: ``SessionDBSessionService`` keeps what ADK's session service
contract asks of a ``BaseSessionService`` (sessions by app, user and id; app, user,
session and temp state; event filters; de-duplication), on SQLite and Postgres; appends
from several processes are all kept in commit order; and its public methods raise
nothing but ``SessionDBError`` (whose ADK-facing subclasses are also ADK's
``AlreadyExistsError`` and ``SessionNotFoundError``). Needs ``sessiondb[adk]``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from helpers import sql
from helpers.frameworks import need_framework
from helpers.processes import SPAWN, run_processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

need_framework("google.adk", "adk")

from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.errors.session_not_found_error import SessionNotFoundError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions, EventCompaction  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.genai import types  # noqa: E402

from sessiondb import (  # noqa: E402
    ConfigurationError,
    InvalidInputError,
    SessionDBError,
    SessionStore,
)
from sessiondb import statements as q  # noqa: E402
from sessiondb.context import summary_text  # noqa: E402
from sessiondb.integrations.adk import (  # noqa: E402
    ADK_FIELD,
    SessionDBSessionService,
    SessionExistsError,
    UnknownSessionError,
)

TIMEOUT_S = 120
APP, USER = "weather_app", "u-1"


def _event(text: str | None = None, *, author: str = "user", **kwargs: Any) -> Event:
    content = None
    if text is not None:
        role = "user" if author == "user" else "model"
        content = types.Content(role=role, parts=[types.Part(text=text)])
    return Event(
        invocation_id=kwargs.pop("invocation_id", "inv"), author=author, content=content, **kwargs
    )


def _delta(delta: dict[str, Any], **kwargs: Any) -> Event:
    return _event(actions=EventActions(state_delta=delta), **kwargs)


@pytest.fixture
async def service(store: SessionStore) -> SessionDBSessionService:
    return SessionDBSessionService(store)


async def _get(service: SessionDBSessionService, sid: str, **config: Any) -> Session:
    got = await service.get_session(
        app_name=APP,
        user_id=USER,
        session_id=sid,
        config=GetSessionConfig(**config) if config else None,
    )
    assert got is not None
    return got


# -- sessions ------------------------------------------------------------------------------


async def test_sessions_by_app_user_and_id(service: SessionDBSessionService) -> None:
    made = await service.create_session(app_name=APP, user_id=USER, session_id="s1", state={"k": 1})
    assert (made.id, made.app_name, made.user_id, made.state) == ("s1", APP, USER, {"k": 1})
    assert made.last_update_time <= time.time()
    assert await _get(service, "s1") == made
    # The same id under another user or app is another session.
    other = await service.create_session(app_name=APP, user_id="u-2", session_id="s1")
    assert other.state == {}
    assert await service.get_session(app_name="other", user_id=USER, session_id="s1") is None
    # Each is a sessiondb session carrying its ADK address.
    rows = await sql.fetch(
        service.store,
        "SELECT a.user_id, s.metadata_json FROM sessiondb_adk_sessions a "
        "JOIN sessiondb_sessions s ON s.id = a.session_id ORDER BY a.user_id",
    )
    assert [r[0] for r in rows] == [USER, "u-2"]
    assert '"session_id": "s1"' in rows[0][1] or '"session_id":"s1"' in rows[0][1]

    await service.delete_session(app_name=APP, user_id=USER, session_id="s1")
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s1") is None
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_sessions") == 1
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_adk_sessions") == 1
    # Deleting what is not there does nothing.
    await service.delete_session(app_name=APP, user_id=USER, session_id="s1")
    assert (await _get_other(service)).user_id == "u-2"


async def _get_other(service: SessionDBSessionService) -> Session:
    got = await service.get_session(app_name=APP, user_id="u-2", session_id="s1")
    assert got is not None
    return got


async def test_ids_are_generated_and_stripped(service: SessionDBSessionService) -> None:
    generated = await service.create_session(app_name=APP, user_id=USER, session_id="   ")
    assert generated.id.strip() == generated.id and generated.id
    await service.create_session(app_name=APP, user_id=USER, session_id="s", state={"keep": 1})
    with pytest.raises(AlreadyExistsError) as raised:
        await service.create_session(
            app_name=APP, user_id=USER, session_id="  s  ", state={"keep": 2}
        )
    assert isinstance(raised.value, SessionExistsError) and isinstance(raised.value, SessionDBError)
    assert (await _get(service, " s ")).state == {"keep": 1}


async def test_racing_creates_of_one_id_make_one_session(service: SessionDBSessionService) -> None:
    for i in range(5):
        results = await asyncio.gather(
            *(
                service.create_session(app_name=APP, user_id=USER, session_id=f"r{i}")
                for _ in range(3)
            ),
            return_exceptions=True,
        )
        assert sum(isinstance(r, Session) for r in results) == 1, results
        assert all(isinstance(r, Session | AlreadyExistsError) for r in results), results
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_adk_sessions") == 5
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_sessions") == 5


async def test_list_oldest_update_first_without_events(service: SessionDBSessionService) -> None:
    for sid in ("a", "b", "c"):
        await service.create_session(app_name=APP, user_id=USER, session_id=sid, state={"n": sid})
    await service.create_session(app_name=APP, user_id="u-2", session_id="d")
    a = await _get(service, "a")
    await service.append_event(a, _event("hi", timestamp=time.time() + 5))
    mine = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert [s.id for s in mine] == ["b", "c", "a"]
    assert all(s.events == [] for s in mine)
    assert [s.state for s in mine] == [{"n": "b"}, {"n": "c"}, {"n": "a"}]
    every = (await service.list_sessions(app_name=APP)).sessions
    assert sorted(s.id for s in every) == ["a", "b", "c", "d"] and every[-1].id == "a"
    assert (await service.list_sessions(app_name="nobody")).sessions == []


# -- state ---------------------------------------------------------------------------------


async def test_state_scopes(service: SessionDBSessionService) -> None:
    s1 = await service.create_session(
        app_name=APP,
        user_id=USER,
        session_id="s1",
        state={"app:a": 1, "user:u": 1, "k": 1, "temp:t": 1},
    )
    assert s1.state == {"app:a": 1, "user:u": 1, "k": 1}
    event = _delta({"app:b": {"x": 1}, "user:u": None, "k": 2, "temp:t": 2})
    await service.append_event(s1, event)
    # temp: lives in the caller's session object only; the stored event has none of it.
    assert s1.state["temp:t"] == 2 and "temp:t" not in event.actions.state_delta
    got = await _get(service, "s1")
    assert got.state == {"app:a": 1, "app:b": {"x": 1}, "user:u": None, "k": 2}
    assert "temp:t" not in got.events[0].actions.state_delta
    # app: is the app's, user: the user's, the rest the session's.
    s2 = await service.create_session(app_name=APP, user_id="u-2", session_id="s2")
    assert s2.state == {"app:a": 1, "app:b": {"x": 1}}
    s3 = await service.create_session(app_name=APP, user_id=USER, session_id="s3")
    assert s3.state == {"app:a": 1, "app:b": {"x": 1}, "user:u": None}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": None}
    assert await service.get_user_state(app_name=APP, user_id="u-2") == {}
    assert await service.get_user_state(app_name="other", user_id=USER) == {}
    # Stored without prefixes, and nothing of temp: anywhere.
    rows = await sql.fetch(
        service.store, "SELECT scope, user_id, state_json FROM sessiondb_adk_state ORDER BY scope"
    )
    assert [(r[0], r[1]) for r in rows] == [("app", ""), ("user", USER)]
    for table in ("sessiondb_adk_state", "sessiondb_adk_sessions", "sessiondb_records"):
        column = "payload" if table == "sessiondb_records" else "state_json"
        texts = [r[0] for r in await sql.fetch(service.store, f"SELECT {column} FROM {table}")]
        assert not any("temp:" in t for t in texts), table


async def test_values_json_cannot_hold_become_text(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, _delta({"callback": lambda: 1, "ok": 2}))
    got = await _get(service, s.id)
    assert got.state["ok"] == 2 and isinstance(got.state["callback"], str)


# -- events --------------------------------------------------------------------------------


async def test_events_are_message_records(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    blob = types.Part.from_bytes(data=b"\x00png", mime_type="image/png")
    thought = types.Part(text="thinking…", thought=True)
    events = [
        _event("weather in Zürich?"),
        Event(
            invocation_id="inv",
            author="forecaster",
            content=types.Content(role="model", parts=[thought, types.Part(text="sunny"), blob]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=3),
            custom_metadata={"k": [1, "\u0000"]},
        ),
    ]
    for event in events:
        await service.append_event(s, event)
    got = await _get(service, s.id)
    assert got.events == events == s.events
    # sessiondb sees the conversation: a user and an assistant message with their text.
    sid = await sql.scalar(service.store, "SELECT session_id FROM sessiondb_adk_sessions")
    context = await service.store.context(sid)
    assert [(m.role, m.text()) for m in context] == [
        ("user", "weather in Zürich?"),
        ("assistant", "sunny"),
    ]
    records = await service.store.records(sid)
    assert [r.uuid for r in records] == [e.id for e in events]
    assert all(
        r.message is not None and ADK_FIELD in (r.message.model_extra or {}) for r in records
    )


async def test_get_session_config_reads_the_tail(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    base = 1_000.0
    for i in range(600):  # more than one page of the walk back
        await service.append_event(s, _event(f"m{i}", timestamp=base + i))
    assert len((await _get(service, s.id)).events) == 600
    assert (await _get(service, s.id, num_recent_events=0)).events == []
    tail = (await _get(service, s.id, num_recent_events=3)).events
    assert [e.timestamp for e in tail] == [base + 597, base + 598, base + 599]
    after = (await _get(service, s.id, after_timestamp=base + 100)).events
    assert [e.timestamp for e in after] == [base + i for i in range(100, 600)]
    both = (await _get(service, s.id, after_timestamp=base + 598, num_recent_events=5)).events
    assert [e.timestamp for e in both] == [base + 598, base + 599]
    assert (await _get(service, s.id, after_timestamp=base + 10_000)).events == []
    assert (await _get(service, s.id, num_recent_events=10_000)).events[0].timestamp == base


async def test_a_resent_event_is_stored_once(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, session_id="dup")
    event = _delta({"counter": 1, "user:seen": 1})
    for copy in (event, event, event.model_copy(deep=True)):
        await service.append_event(s, copy)
    got = await _get(service, "dup")
    assert [e.id for e in got.events] == [event.id] and got.state["counter"] == 1
    # Another event under a stored id is another event (ADK de-duplicates equal events).
    await service.append_event(s, Event(id=event.id, invocation_id="other", author="agent"))
    got = await _get(service, "dup")
    assert [e.invocation_id for e in got.events] == ["inv", "other"]
    assert len(s.events) == 2


async def test_partial_events_are_not_stored(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, _event("par", partial=True))
    assert s.events == [] and (await _get(service, s.id)).events == []
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_records") == 0


async def test_last_update_time_is_the_last_events(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    later = s.last_update_time + 10
    await service.append_event(s, _event("x", timestamp=later))
    assert s.last_update_time == later == (await _get(service, s.id)).last_update_time


async def test_appends_to_missing_sessions(service: SessionDBSessionService) -> None:
    never = Session(app_name=APP, user_id=USER, id="never")
    with pytest.raises(SessionNotFoundError) as raised:
        await service.append_event(never, _event("x"))
    assert isinstance(raised.value, UnknownSessionError) and isinstance(
        raised.value, SessionDBError
    )
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, _event("x"))  # caches the sessiondb id
    await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(s, _event("y"))
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_records") == 0


async def test_a_stale_session_object_appends_after_the_others(
    service: SessionDBSessionService,
) -> None:
    """ADK's DatabaseSessionService refuses this append (StaleSessionError); the
    contract does not require it, and here nothing is lost or overwritten by it."""
    s = await service.create_session(app_name=APP, user_id=USER)
    stale = s.model_copy(deep=True)
    await service.append_event(s, _delta({"a": 1}, invocation_id="one"))
    await service.append_event(stale, _delta({"b": 2}, invocation_id="two"))
    got = await _get(service, s.id)
    assert [e.invocation_id for e in got.events] == ["one", "two"]
    assert got.state == {"a": 1, "b": 2}


def _compaction(start: float, end: float, text: str, at: float) -> Event:
    summary = types.Content(role="model", parts=[types.Part(text=text)])
    return Event(
        invocation_id=f"c{at}",
        author="user",
        timestamp=at,
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=start, end_timestamp=end, compacted_content=summary
            )
        ),
    )


async def _context(service: SessionDBSessionService, adk_id: str) -> list[str]:
    sid = await sql.scalar(
        service.store, "SELECT session_id FROM sessiondb_adk_sessions WHERE adk_id = :a", a=adk_id
    )
    return [m.text() for m in await service.store.context(sid)]


async def test_compactions_from_the_start_are_sessiondb_compactions(
    service: SessionDBSessionService,
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, session_id="c")
    for i in range(4):
        await service.append_event(s, _event(f"m{i}", invocation_id=f"i{i}", timestamp=10.0 + i))
    # A sliding window (m1..m2) keeps m0 and has no sessiondb equivalent: events only.
    window = _compaction(11.0, 12.0, "summary of m1..m2", at=14.0)
    await service.append_event(s, window)
    assert await _context(service, "c") == ["m0", "m1", "m2", "m3"]
    # From the first event to m2: the summary, then m3 on.
    prefix = _compaction(10.0, 12.0, "summary of m0..m2", at=15.0)
    await service.append_event(s, prefix)
    await service.append_event(s, _event("m5", invocation_id="i5", timestamp=16.0))
    assert await _context(service, "c") == [summary_text("summary of m0..m2"), "m3", "m5"]
    # ADK reads every event back as written: its runner applies the compactions.
    got = await _get(service, "c")
    assert [e.invocation_id for e in got.events] == ["i0", "i1", "i2", "i3", "c14.0", "c15.0", "i5"]
    assert got.events[4:6] == [window, prefix]
    kinds = [
        r[0]
        for r in await sql.fetch(service.store, "SELECT kind FROM sessiondb_records ORDER BY seq")
    ]
    assert kinds == ["message"] * 4 + ["entry", "entry", "compaction", "message"]


async def test_a_compaction_of_everything_keeps_what_comes_next(
    service: SessionDBSessionService,
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, session_id="all")
    for i in range(2):
        await service.append_event(s, _event(f"m{i}", timestamp=10.0 + i))
    await service.append_event(s, _compaction(10.0, 11.0, "all so far", at=12.0))
    assert await _context(service, "all") == [summary_text("all so far")]
    await service.append_event(s, _event("next", timestamp=13.0))
    assert await _context(service, "all") == [summary_text("all so far"), "next"]


async def test_a_rewind_tombstones_what_it_drops(service: SessionDBSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, session_id="r")
    for i, inv in enumerate(["i0", "i1", "i1", "i2"]):
        await service.append_event(s, _event(f"m{i}", invocation_id=inv, timestamp=10.0 + i))
    rewind = Event(
        invocation_id="r",
        author="user",
        timestamp=20.0,
        actions=EventActions(rewind_before_invocation_id="i1"),
    )
    await service.append_event(s, rewind)
    assert await _context(service, "r") == ["m0"]
    await service.append_event(s, _event("again", invocation_id="i3", timestamp=21.0))
    assert await _context(service, "r") == ["m0", "again"]
    got = await _get(service, "r")
    assert len(got.events) == 6 and got.events[4] == rewind  # ADK applies it itself
    sid = await sql.scalar(service.store, "SELECT session_id FROM sessiondb_adk_sessions")
    audit = await service.store.records(sid, include_tombstoned=True, kinds=["message"])
    assert [r.message.text() for r in audit if r.message] == ["m0", "m1", "m2", "m3", "again"]
    # A rewind to an invocation the session does not have changes nothing.
    await service.append_event(
        s,
        Event(
            invocation_id="x",
            author="user",
            actions=EventActions(rewind_before_invocation_id="nope"),
        ),
    )
    assert await _context(service, "r") == ["m0", "again"]


async def test_namespaces_do_not_see_each_other(db_url: str) -> None:
    async with (
        SessionStore.open(db_url, namespace="a") as a,
        SessionStore.open(db_url, namespace="b") as b,
    ):
        sa, sb = SessionDBSessionService(a), SessionDBSessionService(b)
        made = await sa.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"user:x": 1}
        )
        assert await sb.get_session(app_name=APP, user_id=USER, session_id="s") is None
        assert (await sb.list_sessions(app_name=APP)).sessions == []
        assert await sb.get_user_state(app_name=APP, user_id=USER) == {}
        await sb.create_session(app_name=APP, user_id=USER, session_id="s")  # no conflict
        with pytest.raises(SessionNotFoundError):
            await sb.append_event(Session(app_name=APP, user_id=USER, id="nope"), _event("x"))
        await sa.append_event(made, _event("x"))
        got = await sb.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None and got.events == []


async def test_a_url_service_migrates_and_closes(tmp_path: Any) -> None:
    url = str(tmp_path / "adk.sqlite3")
    async with SessionDBSessionService(url, namespace="n", create_tables=True) as service:
        s = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await service.append_event(s, _event("hello"))
        assert service.store.namespace == "n"
    async with SessionDBSessionService(url, namespace="n") as again:
        assert len((await _get(again, "s")).events) == 1


# -- reads by index (Postgres plans) -------------------------------------------------------


async def test_reads_use_indexes(pg_url: str) -> None:
    async with SessionStore.open(pg_url) as store:
        service = SessionDBSessionService(store)
        for batch in range(20):  # 2,000 sessions of 20 apps: a listing reads one app's
            await asyncio.gather(
                *(
                    service.create_session(
                        app_name=APP if batch == 0 else f"app{batch}",
                        user_id=f"u{i % 7}",
                        session_id=f"s{i}",
                    )
                    for i in range(100)
                )
            )
        s = await service.get_session(app_name=APP, user_id="u0", session_id="s0")
        assert s is not None
        for i in range(300):
            await service.append_event(s, _event(f"m{i}"))
        for table in ("sessiondb_records", "sessiondb_sessions", "sessiondb_adk_sessions"):
            await sql.execute(store, f"ANALYZE {table}")
        sid = await sql.scalar(
            store, "SELECT session_id FROM sessiondb_adk_sessions WHERE adk_id = 's0'"
        )
        db = sql.database(pg_url)
        ns = store.namespace
        for bound in (
            q.adk_session(ns, APP, "u0", "s0"),
            q.adk_events(sid, 300, 50),
            q.adk_list(ns, APP, None),
            q.adk_list(ns, APP, "u3"),
        ):
            plan = "\n".join(await db.explain(bound[0], bound[1], generic=True))
            assert "Seq Scan on sessiondb_records" not in plan, plan
            assert "Seq Scan on sessiondb_adk_sessions" not in plan, plan


# -- several processes on one session -------------------------------------------------------


def _append_in_process(url: str, proc: int, count: int, start: Any, results: Any) -> None:
    async def run() -> None:
        async with SessionDBSessionService(url) as service:
            # Each process loads the session once, so its object goes stale at once.
            session = await service.get_session(app_name=APP, user_id=USER, session_id="shared")
            assert session is not None
            start.wait()
            for i in range(count):
                await service.append_event(
                    session,
                    _delta(
                        {f"p{proc}": i, f"user:p{proc}": i, f"app:p{proc}": i},
                        invocation_id=f"p{proc}-{i}",
                    ),
                )

    try:
        asyncio.run(run())
        results.put("ok")
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


async def test_appends_from_several_processes_are_all_kept_in_commit_order(pg_url: str) -> None:
    procs, count = 4, 25
    async with SessionDBSessionService(pg_url) as service:
        await service.create_session(app_name=APP, user_id=USER, session_id="shared")
    start, results = SPAWN.Barrier(procs), SPAWN.Queue()
    await asyncio.to_thread(
        run_processes,
        _append_in_process,
        lambda p: (pg_url, p, count, start, results),
        procs,
        timeout=TIMEOUT_S,
    )
    assert [results.get(timeout=10) for _ in range(procs)] == ["ok"] * procs
    async with SessionDBSessionService(pg_url) as service:
        got = await _get(service, "shared")
        names = [e.invocation_id for e in got.events]
        assert sorted(names) == sorted(f"p{p}-{i}" for p in range(procs) for i in range(count))
        for p in range(procs):  # each process's events in the order it wrote them
            mine = [int(n.split("-")[1]) for n in names if n.startswith(f"p{p}-")]
            assert mine == list(range(count))
        assert {k: v for k, v in got.state.items()} == {
            **{f"p{p}": count - 1 for p in range(procs)},
            **{f"user:p{p}": count - 1 for p in range(procs)},
            **{f"app:p{p}": count - 1 for p in range(procs)},
        }
        # Commit order: the records' seqs, gap-free, in the order get_session returns.
        rows = await sql.fetch(
            service.store, "SELECT seq, payload FROM sessiondb_records ORDER BY seq"
        )
        assert [r[0] for r in rows] == list(range(1, procs * count + 1))
        assert [e.id for e in got.events] == [_event_id(r[1]) for r in rows]


def _event_id(payload: str) -> str:
    return str(json.loads(payload)[ADK_FIELD]["id"])


# -- hostile input ------------------------------------------------------------------------

_text = st.one_of(st.text(max_size=8), st.just("\u0000"), st.just("\ud800"), st.just(" "))
_values = st.one_of(
    _text,
    st.none(),
    st.integers(),
    st.lists(st.integers(), max_size=2),
    st.just(b"x"),
    st.just("é" * 300),  # over the 512-byte bound of a name
)
_state = st.one_of(
    st.none(),
    st.dictionaries(
        st.one_of(_text, st.sampled_from(["app:a", "user:b", "temp:c", "k"])), _values, max_size=3
    ),
    _values,
)
_config = st.one_of(
    st.none(),
    st.builds(
        GetSessionConfig,
        num_recent_events=st.one_of(st.none(), st.integers(0, 5)),
        after_timestamp=st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    ),
    _values,
)
_overlay_actions = st.one_of(
    st.just({}),
    st.builds(lambda inv: {"rewind_before_invocation_id": inv}, st.sampled_from(["f", "g", ""])),
    st.builds(
        lambda start, end, text: {
            "compaction": EventCompaction(
                start_timestamp=start,
                end_timestamp=end,
                compacted_content=types.Content(role="model", parts=[types.Part(text=text)]),
            )
        },
        st.floats(0, 2e9),
        st.floats(0, 2e9),
        _text,
    ),
)
_events = st.builds(
    lambda text, delta, ts, partial, invocation, extra: Event(
        author="user",
        invocation_id=invocation,
        timestamp=ts,
        partial=partial,
        content=types.Content(role="user", parts=[types.Part(text=text)]) if text else None,
        actions=EventActions(state_delta=delta if isinstance(delta, dict) else {}, **extra),
    ),
    st.one_of(st.none(), _text),
    _state,
    st.floats(0, 2e9),
    st.booleans(),
    st.sampled_from(["f", "g"]),
    _overlay_actions,
)
# Names that are mostly valid (two in three), so that calls reach the database.
_app = st.tuples(st.integers(0, 2), _values).map(lambda t: APP if t[0] else t[1])
_user = st.tuples(st.integers(0, 2), _values).map(lambda t: USER if t[0] else t[1])
_others = st.one_of(
    st.tuples(
        st.just("create_session"),
        st.fixed_dictionaries(
            {"app_name": _app, "user_id": _user},
            optional={"session_id": st.one_of(_values, st.just("s")), "state": _state},
        ),
    ),
    st.tuples(
        st.just("get_session"),
        st.fixed_dictionaries(
            {
                "app_name": _app,
                "user_id": _user,
                "session_id": _values,
            },
            optional={"config": _config},
        ),
    ),
    st.tuples(
        st.just("list_sessions"),
        st.fixed_dictionaries({"app_name": _app}, optional={"user_id": _user}),
    ),
    st.tuples(
        st.just("delete_session"),
        st.fixed_dictionaries({"app_name": _app, "user_id": _user, "session_id": _values}),
    ),
    st.tuples(
        st.just("get_user_state"), st.fixed_dictionaries({"app_name": _app, "user_id": _user})
    ),
)
# Half the calls are appends, three in four of them to the known session (one_of would
# flatten the choices and make either rare).
_appends = st.tuples(
    st.just("append_event"),
    st.fixed_dictionaries(
        {
            "event": st.tuples(st.integers(0, 3), _events, _values).map(
                lambda t: t[1] if t[0] else t[2]
            ),
            "session": st.tuples(st.integers(0, 3), _values).map(
                lambda t: "known" if t[0] else t[1]
            ),
        }
    ),
)
_calls = st.booleans().flatmap(lambda append: _appends if append else _others)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_fuzz_public_methods_raise_only_sessiondb_errors(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(SessionStore.connect(db_url))
    service = SessionDBSessionService(store)
    known = loop.run_until_complete(
        service.create_session(app_name=APP, user_id=USER, session_id="s")
    )
    try:
        # 600 examples: at 300, a run drew create_session with valid arguments only once
        # (seen once in a full run), and the check below that the fuzz reaches the
        # database failed by chance.
        @settings(
            max_examples=600,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(call=_calls)
        def check(call: tuple[str, dict[str, Any]]) -> None:
            name, kwargs = call
            if name == "append_event" and kwargs["session"] == "known":
                kwargs = {**kwargs, "session": known}
            outcome = "refused"
            with contextlib.suppress(SessionDBError):
                loop.run_until_complete(getattr(service, name)(**kwargs))
                outcome = "done"
            outcomes[(name, outcome)] = outcomes.get((name, outcome), 0) + 1
            # The known session still reads back whole.
            got = loop.run_until_complete(
                service.get_session(app_name=APP, user_id=USER, session_id="s")
            )
            if got is not None:
                assert len(got.events) == loop.run_until_complete(
                    sql.scalar(
                        store,
                        "SELECT count(*) FROM sessiondb_records r JOIN "
                        "sessiondb_adk_sessions a ON a.session_id = r.session_id "
                        "WHERE a.adk_id = 's' AND a.user_id = :u "
                        "AND r.kind IN ('message', 'entry')",
                        u=USER,
                    )
                )

        outcomes: dict[tuple[str, str], int] = {}
        check()
        # The fuzz reached the database, not only the argument checks.
        assert outcomes.get(("append_event", "done"), 0) >= 30, outcomes
        assert outcomes.get(("create_session", "done"), 0) >= 2, outcomes
    finally:
        loop.run_until_complete(store.close())
        loop.close()


# -- a real Runner -------------------------------------------------------------------------


def _echo_runner(service: SessionDBSessionService) -> Any:
    """ADK's Runner with an agent whose model answers with how many texts the request
    held and the last one."""
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner

    class Echo(BaseLlm):
        model: str = "echo"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            texts = [p.text for c in llm_request.contents for p in c.parts or [] if p.text]
            reply = types.Part(text=f"seen {len(texts)}: {texts[-1]}")
            yield LlmResponse(content=types.Content(role="model", parts=[reply]))

    agent = LlmAgent(name="echo", model=Echo(), instruction="echo", output_key="last")
    return Runner(agent=agent, app_name=APP, session_service=service)


async def test_a_runner_keeps_its_conversation(service: SessionDBSessionService) -> None:
    runner = _echo_runner(service)
    s = await service.create_session(app_name=APP, user_id=USER)
    replies = []
    for question in ("one", "two"):
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for event in runner.run_async(user_id=USER, session_id=s.id, new_message=message):
            if event.content and event.content.parts and event.author == "echo":
                replies.append(event.content.parts[0].text)
    # The second call saw the first turn, read back from the database.
    assert replies == ["seen 1: one", "seen 3: two"]
    got = await _get(service, s.id)
    assert [e.author for e in got.events] == ["user", "echo", "user", "echo"]
    assert got.state == {"last": "seen 3: two"}
    assert await _context(service, s.id) == ["one", "seen 1: one", "two", "seen 3: two"]


async def test_retention_takes_the_adk_session_and_keeps_the_users_state(
    service: SessionDBSessionService,
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, state={"user:k": 1, "n": 2})
    await service.append_event(s, _event("hello"))
    await asyncio.sleep(0.01)
    report = await service.store.expire(timedelta(milliseconds=5))
    assert len(report.deleted) == 1
    assert await service.get_session(app_name=APP, user_id=USER, session_id=s.id) is None
    assert (await service.list_sessions(app_name=APP)).sessions == []
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_adk_sessions") == 0
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"k": 1}


async def test_an_adk_session_exports_with_every_event(
    service: SessionDBSessionService, tmp_path: Any
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    events = [
        _event("hi"),
        _delta({"k": 1}, author="forecaster"),  # no text: an entry
        _event("bye", author="forecaster"),
    ]
    for event in events:
        await service.append_event(s, event)
    sid = await sql.scalar(service.store, "SELECT session_id FROM sessiondb_adk_sessions")
    (path, *_) = await service.store.export_session(sid, tmp_path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    # A message line carries the event beside its text; an entry line in its entry.
    stored = [line.get(ADK_FIELD) or line.get("entry", {}).get(ADK_FIELD) for line in lines]
    assert [Event.model_validate(e) for e in stored] == events


async def test_names_too_long_for_the_key_are_refused(service: SessionDBSessionService) -> None:
    long = "é" * 257  # 514 UTF-8 bytes
    for kwargs in ({"app_name": long}, {"user_id": long}, {"session_id": long}):
        args = {"app_name": APP, "user_id": USER, "session_id": "s", **kwargs}
        with pytest.raises(InvalidInputError, match="512 UTF-8 bytes"):
            await service.create_session(**args)
    assert await sql.scalar(service.store, "SELECT count(*) FROM sessiondb_sessions") == 0
    made = await service.create_session(app_name=APP, user_id=USER, session_id="é" * 256)
    assert await service.get_session(app_name=APP, user_id=USER, session_id=made.id) == made


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_the_sync_runner_calls_from_a_new_loop_each_time(db_url: str) -> None:
    # Built outside any loop: the service keeps a loop thread for its store, and ADK's
    # Runner.run, which runs each call on a loop of its own, reaches it from there.
    service = SessionDBSessionService(db_url)
    runner = _echo_runner(service)
    s = asyncio.run(service.create_session(app_name=APP, user_id=USER))
    replies = []
    for question in ("one", "two"):
        message = types.Content(role="user", parts=[types.Part(text=question)])
        for event in runner.run(user_id=USER, session_id=s.id, new_message=message):
            if event.content and event.content.parts and event.author == "echo":
                replies.append(event.content.parts[0].text)
    assert replies == ["seen 1: one", "seen 3: two"]
    got = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id=s.id))
    assert got is not None and len(got.events) == 4
    asyncio.run(service.close())


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # Postgres's would leak
def test_a_store_whose_loop_has_ended_is_a_typed_error(db_url: str) -> None:
    async def build() -> SessionDBSessionService:
        service = SessionDBSessionService(db_url)  # the running loop becomes its home
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        return service

    service = asyncio.run(build())
    with pytest.raises(ConfigurationError, match="no longer running"):
        asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id="s"))
    asyncio.run(service.store.close())
