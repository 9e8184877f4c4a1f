"""OpenTelemetry spans and metrics of the store's calls (sessiondb.telemetry), read from
the SDK's in-memory exporter and reader, on every backend: an append, a context load, an
import, failed calls with their typed errors, a turn, a watch, a retry, a write whose
outcome is unknown, and the pool's connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.otel import Listener, listening
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy.engine import make_url

from sessiondb import (
    BusyError,
    ConflictError,
    DatabaseUnavailableError,
    InvalidInputError,
    SessionNotFoundError,
    SessionStore,
)

SECRET_TEXT = "the secret plan is 42"
MISSING = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


@pytest.fixture
def otel() -> Iterator[Listener]:
    yield from listening()


def _expected_db(store: SessionStore, backend: str) -> dict[str, Any]:
    url = store.settings.url
    if backend == "postgres":
        return {
            "db.system": "postgresql",
            "db.namespace": url.database,
            "server.address": url.host,
            "server.port": url.port or 5432,
        }
    return {
        "db.system": "sqlite",
        "db.namespace": ":memory:" if backend == "memory" else url.database,
    }


def _check_call(span: ReadableSpan, store: SessionStore, backend: str, operation: str) -> None:
    assert span.name == f"sessiondb.{operation}"
    assert span.kind is SpanKind.CLIENT
    attributes = dict(span.attributes or {})
    for key, value in _expected_db(store, backend).items():
        assert attributes[key] == value, key
    assert attributes["db.operation.name"] == operation
    assert attributes["sessiondb.namespace"] == store.namespace
    assert attributes["sessiondb.retries"] == 0
    assert attributes["sessiondb.replica"] is False
    if backend != "postgres":
        assert "server.address" not in attributes


def _no_secret(otel: Listener, *secrets: str) -> None:
    """No attribute of any span or event holds a secret (message content, passwords)."""
    for span in otel.finished():
        texts = [str(v) for v in (span.attributes or {}).values()]
        for event in span.events:
            texts += [str(v) for v in (event.attributes or {}).values()]
        for secret in secrets:
            assert not any(secret in t for t in texts), (span.name, secret)


async def test_an_append_is_one_client_span_with_its_records_and_duration(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    sid = (await store.create_session()).id
    created = otel.one("sessiondb.create_session")
    assert created.attributes is not None
    assert created.attributes["sessiondb.session_id"] == sid  # from the result
    otel.clear()
    stored = await store.append(
        sid, [{"role": "user", "content": SECRET_TEXT}, {"role": "assistant", "content": "ok"}]
    )
    assert [r.seq for r in stored] == [1, 2]
    span = otel.one("sessiondb.append")
    _check_call(span, store, backend, "append")
    assert span.attributes is not None
    assert span.attributes["sessiondb.session_id"] == sid
    assert span.attributes["sessiondb.records"] == 2
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is None
    _no_secret(otel, SECRET_TEXT)
    db = _expected_db(store, backend)
    points = otel.points(
        "db.client.operation.duration",
        **{"db.operation.name": "append", "db.namespace": db["db.namespace"]},
    )
    assert len(points) == 1 and points[0].count == 1, points
    assert 0 < points[0].sum < 60
    assert "error.type" not in points[0].attributes
    assert "sessiondb.namespace" not in points[0].attributes  # a metric's attributes stay few


async def test_a_context_load_counts_the_messages_it_returned(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [{"role": "user", "content": f"m{i}"} for i in range(5)])
    otel.clear()
    context = await store.context(sid, last=3)
    assert len(context) == 3
    span = otel.one("sessiondb.context")
    _check_call(span, store, backend, "context")
    assert span.attributes is not None
    assert span.attributes["sessiondb.records"] == 3
    assert span.attributes["sessiondb.session_id"] == sid


async def test_an_import_reports_the_records_it_stored(
    store: SessionStore, backend: str, otel: Listener, tmp_path: Path
) -> None:
    sid = (await store.create_session(name="exported")).id
    await store.append(sid, [{"role": "user", "content": f"m{i}"} for i in range(4)])
    assert await store.export_session(sid, tmp_path / "out")
    await store.delete_session(sid)
    otel.clear()
    report = await store.import_path(tmp_path / "out")
    assert report.created == 1 and report.records == 4
    span = otel.one("sessiondb.import_path")
    _check_call(span, store, backend, "import_path")
    assert span.attributes is not None
    assert span.attributes["sessiondb.records"] == 4
    ids = await store.import_sessions([{"messages": [{"role": "user", "content": "x"}]}])
    assert len(ids) == 1
    _check_call(otel.one("sessiondb.import_sessions"), store, backend, "import_sessions")


async def test_a_failed_call_records_its_typed_error(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.get_session(MISSING)
    span = otel.one("sessiondb.get_session")
    _check_call(span, store, backend, "get_session")
    assert span.attributes is not None
    assert span.attributes["error.type"] == "SessionNotFoundError"
    assert span.attributes["sessiondb.session_id"] == MISSING
    assert span.status.status_code is StatusCode.ERROR
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"].endswith("SessionNotFoundError")
    db = _expected_db(store, backend)
    [point] = otel.points(
        "db.client.operation.duration",
        **{"db.operation.name": "get_session", "db.namespace": db["db.namespace"]},
    )
    assert point.attributes["error.type"] == "SessionNotFoundError"

    # A refused argument: the typed error, and a malformed id is not put on the span.
    otel.clear()
    with pytest.raises(InvalidInputError):
        await store.append("not-an-id" * 1000, {"role": "user", "content": SECRET_TEXT})
    span = otel.one("sessiondb.append")
    assert span.attributes is not None
    assert span.attributes["error.type"] == "InvalidSessionIdError"
    assert "sessiondb.session_id" not in span.attributes
    _no_secret(otel, SECRET_TEXT)


async def test_a_turn_spans_its_block_and_holds_the_calls_made_in_it(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    sid = (await store.create_session()).id
    otel.clear()
    async with store.turn(sid, holder="worker-1"):
        await store.append(sid, {"role": "user", "content": "inside"})
        assert otel.finished("sessiondb.turn") == []  # the span lasts as long as the turn
    turn = otel.one("sessiondb.turn")
    append = otel.one("sessiondb.append")
    _check_call(turn, store, backend, "turn")
    assert append.parent is not None and append.parent.span_id == turn.context.span_id
    assert turn.status.status_code is StatusCode.UNSET
    assert append.parent.trace_id == turn.context.trace_id


async def test_a_watch_spans_its_iteration_and_counts_what_it_yielded(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [{"role": "user", "content": f"m{i}"} for i in range(3)])
    otel.clear()
    watch = store.watch(sid, from_seq=0)
    seqs = [(await anext(watch)).seq for _ in range(3)]
    assert seqs == [1, 2, 3]
    assert otel.finished("sessiondb.watch") == []
    await watch.aclose()
    span = otel.one("sessiondb.watch")
    _check_call(span, store, backend, "watch")
    assert span.attributes is not None
    assert span.attributes["sessiondb.records"] == 3
    assert span.status.status_code is StatusCode.UNSET  # closing a watch is no error


async def test_a_turn_entered_and_left_by_two_tasks_still_ends_its_span(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    sid = (await store.create_session()).id
    otel.clear()
    held = store.turn(sid)
    await asyncio.create_task(held.__aenter__())
    await asyncio.create_task(held.__aexit__(None, None, None))
    turn = otel.one("sessiondb.turn")
    assert turn.status.status_code is StatusCode.UNSET
    await store.append(sid, {"role": "user", "content": "after"})
    append = otel.one("sessiondb.append")
    assert append.parent is None  # this task's context was never the turn's
    async with store.turn(sid, timeout=0):  # the turn was released
        pass


class _BusyOnce:
    """A backend whose first transaction finds the database busy (nothing written)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.busy = 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        if self.busy:
            self.busy -= 1
            raise BusyError()
        async with self.backend.transaction() as tx:
            yield tx


async def test_a_retried_transaction_counts_its_retries(
    store_url: str, backend: str, otel: Listener
) -> None:
    async with sql.store_on(store_url, wrap=_BusyOnce) as store:
        sid = (await store.create_session()).id
        otel.clear()
        stored = await store.append(sid, {"role": "user", "content": "x", "uuid": "u-1"})
        assert [r.seq for r in stored] == [1]
        span = otel.one("sessiondb.append")
        assert span.attributes is not None
        assert span.attributes["sessiondb.retries"] == 1
        assert span.status.status_code is StatusCode.UNSET
        namespace = _expected_db(store, backend)["db.namespace"]
        [point] = otel.points(
            "sessiondb.retries", **{"db.operation.name": "append", "db.namespace": namespace}
        )
        assert point.value == 1
        assert len(await store.records(sid)) == 1


class _LostCommit:
    """A backend whose appends lose their connection at COMMIT (outcome unknown)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def append(self, head: Any, rows: Any) -> Any:
        raise DatabaseUnavailableError("lost during COMMIT", outcome_unknown=True)


async def test_a_write_of_unknown_outcome_is_counted(
    store_url: str, backend: str, otel: Listener
) -> None:
    async with sql.store_on(store_url, wrap=_LostCommit) as store:
        sid = (await store.create_session()).id
        for _ in range(2):
            with pytest.raises(DatabaseUnavailableError):
                await store.append(sid, {"role": "user", "content": "x"})
        spans = otel.finished("sessiondb.append")
        assert len(spans) == 2
        assert all(
            s.attributes is not None and s.attributes["error.type"] == "DatabaseUnavailableError"
            for s in spans
        )
        namespace = _expected_db(store, backend)["db.namespace"]
        [point] = otel.points(
            "sessiondb.writes.outcome_unknown",
            **{"db.operation.name": "append", "db.namespace": namespace},
        )
        assert point.value == 2


@pytest.mark.postgres_only
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_the_pool_reports_its_connections_and_no_password(
    db_url: str, otel: Listener
) -> None:
    url = make_url(db_url).set(password="s3cret-pw")  # trust auth: the password is unused
    async with SessionStore.open(
        url.render_as_string(hide_password=False), pool_min_size=2, pool_max_size=4
    ) as store:
        sid = (await store.create_session()).id
        await store.append(sid, {"role": "user", "content": "x"})
        points = otel.points("db.client.connection.count", **{"db.namespace": url.database})
        by_state = {p.attributes["db.client.connection.state"]: p.value for p in points}
        assert set(by_state) == {"used", "idle"}, points
        assert by_state["used"] == 0 and by_state["idle"] >= 2
        assert all("s3cret-pw" not in str(p.attributes) for p in points)
        assert "127.0.0.1" in points[0].attributes["db.client.connection.pool.name"]
        _no_secret(otel, "s3cret-pw")
    # A closed store's pool is no longer observed.
    assert otel.points("db.client.connection.count", **{"db.namespace": url.database}) == []


# A session key and a name as a caller writes them: an address and a person's name.
SECRET_KEY = "user:alice@example.com/ticket-9917"
SECRET_NAME = "Alice Quartermain's divorce"


def _span_texts(otel: Listener) -> list[str]:
    """Every attribute and event attribute of every finished span, as text."""
    texts: list[str] = []
    for span in otel.finished():
        texts += [str(v) for v in (span.attributes or {}).values()]
        for event in span.events:
            texts += [str(v) for v in (event.attributes or {}).values()]
    return texts


async def test_an_error_quoting_a_key_or_stored_text_puts_none_of_it_on_a_span(
    store: SessionStore, backend: str, otel: Listener
) -> None:
    """The hostile case: a ConflictError's message holds the full key (and, on Postgres,
    its cause the unique violation's detail); the exception event holds the class and its
    fixed message only, for every error that quotes the caller's data."""
    await store.create_session(name=SECRET_NAME, key=SECRET_KEY)
    otel.clear()
    with pytest.raises(ConflictError) as conflict:
        await store.create_session(key=SECRET_KEY)
    assert SECRET_KEY in str(conflict.value)  # the caller still gets the whole story
    with pytest.raises(ConflictError) as batch:
        await store.import_sessions(
            [{"key": SECRET_KEY, "messages": [{"role": "user", "content": SECRET_TEXT}]}]
        )
    with pytest.raises(SessionNotFoundError) as missing:
        await store.session_for_key(SECRET_KEY + "-gone", create=False)
    assert SECRET_KEY in str(missing.value)
    sid = (await store.session_for_key(SECRET_KEY)).id
    with pytest.raises(InvalidInputError) as refused:
        await store.append(sid, {"role": SECRET_NAME, "content": SECRET_TEXT})
    assert SECRET_NAME in str(refused.value)
    spans = otel.finished()
    failed = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    assert [s.name for s in failed] == [
        "sessiondb.create_session",
        "sessiondb.import_sessions",
        "sessiondb.session_for_key",
        "sessiondb.append",
    ]
    for span, error in zip(
        failed, (conflict.value, batch.value, missing.value, refused.value), strict=True
    ):
        [event] = span.events
        assert event.name == "exception"
        assert event.attributes is not None
        kind = type(error)
        assert event.attributes["exception.type"] == f"{kind.__module__}.{kind.__qualname__}"
        # The class's fixed default message (its docstring), never the instance's text.
        assert event.attributes["exception.message"] == " ".join(
            (kind.__doc__ or "").strip().split("\n\n")[0].split()
        )
        assert "store.py" in str(event.attributes["exception.stacktrace"])  # frames kept
    texts = _span_texts(otel)
    for secret in (SECRET_KEY, SECRET_NAME, SECRET_TEXT, "alice", "Quartermain"):
        assert not any(secret in t for t in texts), (secret, backend)
