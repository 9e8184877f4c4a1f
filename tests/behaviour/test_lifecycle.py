"""A store a service keeps for its lifetime: connect, use, close; nothing works after."""

from __future__ import annotations

from typing import Any

import pytest

from sessiondb import SessionStore, StoreClosedError
from sessiondb.errors import ConfigurationError


async def test_connect_use_close_then_every_call_is_refused(db_url: str) -> None:
    store = await SessionStore.connect(db_url)
    sid = (await store.create_session()).id
    await store.append(sid, {"role": "user", "content": "hi"})
    await store.close()
    await store.close()  # idempotent
    calls: list[Any] = [
        store.create_session(),
        store.append(sid, {"role": "user", "content": "late"}),
        store.get_session(sid),
        store.list_sessions(),
        store.context(sid),
        store.context_json(sid),
        store.records(sid),
        store.tombstone(sid, 1),
        store.fork(sid),
        store.delete_session(sid),
        store.migrate(),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            await call
    # Nothing was written after the close.
    async with SessionStore.open(db_url) as again:
        assert [m.text() for m in await again.context(sid)] == ["hi"]


async def test_a_store_from_a_url() -> None:
    store = SessionStore(":memory:")
    try:
        await store.migrate()
        assert (await store.create_session()).last_seq == 0
    finally:
        await store.close()
    with pytest.raises(ConfigurationError):
        SessionStore(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"connect_timeout": 0},
        {"connect_timeout": True},
        {"pool_max_size": 0},
        {"pool_min_size": 5, "pool_max_size": 2},
        {"server_settings": "x"},
        {"connect_args": ["x"]},
    ],
)
async def test_bad_connection_options_are_configuration_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        await SessionStore.connect(":memory:", **options)


def _kwargs(url: str, **options: Any) -> dict[str, Any]:
    from sessiondb.backends.postgres import connect_kwargs
    from sessiondb.config import ConnectOptions, Settings

    return connect_kwargs(Settings.from_env(url, None, ConnectOptions(**options)))


def test_every_postgres_connection_is_built_from_one_url_and_options() -> None:
    kw = _kwargs(
        "postgresql://app:pw@db.example:6432/sessions?sslmode=require&prepared_statement_cache_size=0",
        connect_timeout=3,
        server_settings={"search_path": "app"},
        connect_args={"max_cached_statement_lifetime": 0},
    )
    assert kw["user"] == "app" and kw["password"] == "pw"
    assert (kw["host"], kw["port"], kw["database"]) == ("db.example", 6432, "sessions")
    assert kw["ssl"] == "require"
    assert kw["statement_cache_size"] == 0
    assert kw["timeout"] == 3
    assert kw["server_settings"] == {
        "application_name": "sessiondb",
        "jit": "off",
        "search_path": "app",
    }
    assert (
        _kwargs("postgresql://h/db", server_settings={"jit": "on"})["server_settings"]["jit"]
        == "on"
    )
    assert kw["max_cached_statement_lifetime"] == 0
    named = _kwargs("postgresql://h/db?application_name=billing&connect_timeout=7")
    assert named["server_settings"]["application_name"] == "billing"
    assert named["timeout"] == 7


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("foo=1", "foo"),
        ("sslmode=sometimes", "sslmode"),
        ("connect_timeout=soon", "connect_timeout"),
        ("prepared_statement_cache_size=-1", "cache size"),
    ],
)
def test_a_url_parameter_asyncpg_cannot_take_is_a_configuration_error(
    query: str, named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        _kwargs(f"postgresql://h/db?{query}")
