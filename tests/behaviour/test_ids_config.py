"""Session ids, settings and URLs, and the SQLite set-up (``:memory:``, files, WAL)."""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Awaitable, Callable
from dataclasses import FrozenInstanceError, replace
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url

from sessiondb import (
    ConfigurationError,
    InvalidInputError,
    InvalidSessionIdError,
    SessionDBError,
    SessionNotFoundError,
    SessionStore,
)
from sessiondb.config import (
    DEFAULT_NAMESPACE,
    DEFAULT_SQLITE_FILE,
    ENV_NAMESPACE,
    ENV_URL,
    Settings,
    normalize_url,
)
from sessiondb.ids import check_session_id, new_session_id

VALID_ID = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


# -- ids --------------------------------------------------------------------------------


def test_new_ids_are_valid_unique_and_time_ordered() -> None:
    first = [new_session_id() for _ in range(200)]
    time.sleep(0.003)
    later = new_session_id()
    assert len(set(first)) == 200
    for value in [*first, later]:
        assert len(value) == 26
        assert check_session_id(value) == value
    assert all(later > value for value in first)


BAD_IDS = {
    "lowercase": VALID_ID.lower(),
    "mixed-case": VALID_ID[:10] + VALID_ID[10:].lower(),
    "too-short": VALID_ID[:25],
    "too-long": VALID_ID + "0",
    "empty": "",
    "letter-I": "01J9Z3K7Q8R2V5X4W6Y0A1B2CI",
    "letter-L": "01J9Z3K7Q8R2V5X4W6Y0A1B2CL",
    "letter-O": "01J9Z3K7Q8R2V5X4W6Y0A1B2CO",
    "letter-U": "01J9Z3K7Q8R2V5X4W6Y0A1B2CU",
    "over-128-bits": "8" + VALID_ID[1:],
    "trailing-newline": VALID_ID + "\n",
    "leading-space": " " + VALID_ID[1:],
    "sql": "01J9Z3K7Q8' OR '1'='1'--AB",
    "fullwidth-digits": "０" * 26,
    "nul": VALID_ID[:25] + "\x00",
    "uuid": "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
    "none": None,
    "int": 123,
    "bytes": VALID_ID.encode(),
    "list": [VALID_ID],
}


@pytest.mark.parametrize("value", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_check_session_id_refuses(value: Any) -> None:
    with pytest.raises(InvalidSessionIdError) as raised:
        check_session_id(value)
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, InvalidInputError)
    assert raised.value.value == value


def test_highest_valid_id() -> None:
    assert check_session_id("7ZZZZZZZZZZZZZZZZZZZZZZZZZ") == "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"


def _calls(session_id: Any) -> dict[str, Callable[[SessionStore], Awaitable[Any]]]:
    message = {"role": "user", "content": "x"}
    return {
        "get_session": lambda s: s.get_session(session_id),
        "append": lambda s: s.append(session_id, [message]),
        "append-expected": lambda s: s.append(session_id, [message], expected_seq=0),
        "rename": lambda s: s.rename(session_id, "n"),
        "delete_session": lambda s: s.delete_session(session_id),
        "context": lambda s: s.context(session_id),
        "records": lambda s: s.records(session_id),
        "fork": lambda s: s.fork(session_id),
        "tombstone": lambda s: s.tombstone(session_id, 1),
        "append_compaction": lambda s: s.append_compaction(
            session_id, summary="s", first_kept_seq=1
        ),
        "list_sessions-parent": lambda s: s.list_sessions(parent_id=session_id),
    }


CALLS = list(_calls(None))


@pytest.fixture
def unreachable_urls(postgres: Any, tmp_path: Path) -> list[str]:
    """URLs whose database cannot be opened: any query on them fails."""
    urls = [str(tmp_path / "no" / "such" / "dir" / "x.sqlite3")]
    if postgres.admin_url is not None:
        urls.append(
            postgres.admin_url.set(database="sessiondb_no_such_database").render_as_string(False)
        )
    return urls


@pytest.mark.parametrize(
    ("bad", "call"),
    [
        (bad, call)
        for bad in ["lowercase", "letter-U", "too-short", "none", "int"]
        for call in CALLS
        if not (bad == "none" and call == "list_sessions-parent")  # None: no filter
    ],
)
async def test_bad_session_id_is_refused_before_any_query(
    unreachable_urls: list[str], call: str, bad: str
) -> None:
    for url in unreachable_urls:
        async with SessionStore.open(url) as store:
            with pytest.raises(InvalidSessionIdError):
                await _calls(BAD_IDS[bad])[call](store)


@pytest.mark.parametrize("call", ["get_session", "append", "records"])
async def test_unreachable_database_fails_with_a_sessiondb_error(
    unreachable_urls: list[str], call: str
) -> None:
    # The control for the test above: with a good id the same store does reach for the
    # database, and fails.
    for url in unreachable_urls:
        async with SessionStore.open(url) as store:
            with pytest.raises(SessionDBError) as raised:
                await _calls(VALID_ID)[call](store)
            assert not isinstance(raised.value, InvalidInputError | SessionNotFoundError)


# -- URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "driver", "database"),
    [
        ("sessions.db", "sqlite", "sessions.db"),
        ("/var/lib/app/sessions.sqlite3", "sqlite", "/var/lib/app/sessions.sqlite3"),
        ("  ./rel/x.db  ", "sqlite", "./rel/x.db"),
        (":memory:", "sqlite", ":memory:"),
        ("sqlite:///x.db", "sqlite", "x.db"),
        ("sqlite:////abs/x.db", "sqlite", "/abs/x.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite", "x.db"),
        ("sqlite+pysqlite:///x.db", "sqlite", "x.db"),
        ("sqlite://", "sqlite", None),
        ("postgresql://u:p@db.example:5433/app", "postgresql+asyncpg", "app"),
        ("postgresql+asyncpg://u@h/app", "postgresql+asyncpg", "app"),
        ("postgresql+psycopg://u@h/app", "postgresql+asyncpg", "app"),
        ("postgresql+psycopg2://u@h/app", "postgresql+asyncpg", "app"),
    ],
)
def test_normalize_url(raw: str, driver: str, database: str | None) -> None:
    url = normalize_url(raw)
    assert isinstance(url, URL)
    assert url.drivername == driver
    assert url.database == database


def test_normalize_url_keeps_credentials_host_port_and_query() -> None:
    url = normalize_url("postgresql://user:s%40cret@db.example:5433/app?ssl=require")
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "user",
        "s@cret",
        "db.example",
        5433,
        "app",
    )
    assert dict(url.query) == {"ssl": "require"}


def test_normalize_url_takes_url_objects() -> None:
    assert normalize_url(make_url("postgresql://u@h/d")).drivername == "postgresql+asyncpg"
    assert normalize_url(URL.create("sqlite", database="a.db")).drivername == "sqlite"


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("mysql://u@h/db", "mysql"),
        ("mongodb://h/db", "mongodb"),
        ("oracle+cx_oracle://u@h/db", "oracle"),
        ("sqlite+pysqlcipher:///x.db", "pysqlcipher"),
        ("postgresql+pg8000://u@h/db", "pg8000"),
    ],
)
def test_unsupported_url_is_a_configuration_error(raw: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        normalize_url(raw)
    assert named in str(raw) and named in str(raised.value)


@pytest.mark.parametrize("raw", ["", "   ", "postgresql://u@h:notaport/db", "://nothing"], ids=repr)
def test_unparsable_url_is_a_configuration_error(raw: str) -> None:
    with pytest.raises(ConfigurationError):
        normalize_url(raw)


def test_error_does_not_show_the_password() -> None:
    with pytest.raises(ConfigurationError) as raised:
        normalize_url("mysql://user:hunter2@h/db")
    assert "hunter2" not in str(raised.value)


# -- settings from arguments and the environment ---------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.delenv(ENV_NAMESPACE, raising=False)
    return monkeypatch


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env()
    assert settings.url.drivername == "sqlite"
    assert settings.url.database == DEFAULT_SQLITE_FILE
    assert settings.namespace == DEFAULT_NAMESPACE == "default"
    assert settings.is_sqlite and not settings.is_memory


def test_environment_is_used(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ENV_URL, "postgresql://u@h/envdb")
    clean_env.setenv(ENV_NAMESPACE, "tenant-7")
    settings = Settings.from_env()
    assert settings.url.drivername == "postgresql+asyncpg"
    assert settings.url.database == "envdb"
    assert settings.namespace == "tenant-7"
    assert not settings.is_sqlite


def test_arguments_win_over_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ENV_URL, "postgresql://u@h/envdb")
    clean_env.setenv(ENV_NAMESPACE, "tenant-7")
    settings = Settings.from_env(":memory:", "mine")
    assert settings.is_memory
    assert settings.namespace == "mine"


def test_bad_environment_url_names_the_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ENV_URL, "mysql://u@h/db")
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env()
    assert ENV_URL in str(raised.value)
    assert "mysql" in str(raised.value)


def test_bad_argument_url_does_not_blame_the_variable(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env("mysql://u@h/db")
    assert ENV_URL not in str(raised.value)


def test_bad_environment_namespace_names_its_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv(ENV_URL, "sessions.db")
    clean_env.setenv(ENV_NAMESPACE, "n" * 256)
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env()
    assert ENV_NAMESPACE in str(raised.value)
    assert f"{ENV_URL}:" not in str(raised.value)


def test_bad_argument_namespace_does_not_blame_the_url_variable(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv(ENV_URL, "sessions.db")
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env(namespace="x" * 256)
    assert ENV_URL not in str(raised.value)
    assert "namespace" in str(raised.value)


@pytest.mark.parametrize("namespace", ["", "x" * 256, "nul\x00", 5], ids=repr)
def test_bad_namespace_argument(clean_env: pytest.MonkeyPatch, namespace: Any) -> None:
    # An explicit empty namespace must not silently become "default" (another tenant).
    with pytest.raises(ConfigurationError):
        Settings.from_env(":memory:", namespace)


def test_explicit_empty_url_is_refused(clean_env: pytest.MonkeyPatch) -> None:
    # "" is a mistake (an unset variable interpolated), not a request for the default file.
    with pytest.raises(ConfigurationError):
        Settings.from_env("")


def test_settings_validate_the_namespace_when_built() -> None:
    with pytest.raises(ConfigurationError):
        Settings(url=normalize_url(":memory:"), namespace="")
    assert Settings(url=normalize_url(":memory:")).namespace == "default"


async def test_open_uses_the_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "from-env.sqlite3"
    clean_env.setenv(ENV_URL, str(path))
    clean_env.setenv(ENV_NAMESPACE, "env-tenant")
    async with SessionStore.open() as store:
        assert store.settings.url.database == str(path)
        assert store.namespace == "env-tenant"
        await store.migrate()
        info = await store.create_session()
        assert info.namespace == "env-tenant"
    assert path.exists()
    async with SessionStore.open(str(path), namespace="env-tenant") as again:
        assert (await again.get_session(info.id)).id == info.id


async def test_open_refuses_a_bad_url(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError):
        async with SessionStore.open("mysql://u@h/db"):
            pass


# -- SQLite: :memory: and files ---------------------------------------------------------


async def test_sqlite_memory(clean_env: pytest.MonkeyPatch) -> None:
    async with sql.open_store(":memory:") as store:
        await store.migrate()
        info = await store.create_session()
        await store.append(info.id, [{"role": "user", "content": "in memory"}])
        # Concurrent tasks take turns on the one shared connection.
        results = await asyncio.gather(
            *(store.append(info.id, [{"role": "user", "content": f"t{i}"}]) for i in range(20))
        )
        assert sorted(r[0].seq for r in results) == list(range(2, 22))
        recs = await store.records(info.id)
        assert [r.seq for r in recs] == list(range(1, 22))
        assert (await store.get_session(info.id)).name == "in memory"
        assert [s.id for s in (await store.list_sessions()).items] == [info.id]
        assert await sql.scalar(store, "PRAGMA journal_mode") == "memory"
    # Each :memory: store is a database of its own.
    async with SessionStore.open(":memory:") as other:
        await other.migrate()
        with pytest.raises(SessionNotFoundError):
            await other.get_session(info.id)


async def test_sqlite_file_uses_wal_and_persists(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "sessions.sqlite3"
    async with sql.open_store(str(path)) as store:
        await store.migrate()
        info = await store.create_session(name="kept")
        await store.append(info.id, [{"role": "user", "content": "persisted"}])
        # Every connection of the store has the same pragmas: readers, and the writer
        # (asked through the store's own backend, which open_store built).
        backend = sql.backend_of(store)

        async def pragma(name: str) -> Any:
            (row,) = await backend.fetch((text(f"PRAGMA {name}"), {}))
            return row[0]

        assert await pragma("journal_mode") == "wal"
        assert await pragma("busy_timeout") >= 1000
        assert await pragma("foreign_keys") == 1
        writer = await backend.run_sync(
            lambda conn: [
                conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys")
            ],
        )
        assert writer[0] == "wal" and writer[1] >= 1000 and writer[2] == 1
    async with SessionStore.open(f"sqlite:///{path}") as reopened:
        got = await reopened.get_session(info.id)
        assert got.name == "kept" and got.message_count == 1
        (message,) = await reopened.context(info.id)
        assert message.text() == "persisted"


def test_postgres_scheme_spelling_is_accepted() -> None:
    from sessiondb.config import normalize_url

    assert normalize_url("postgres://u@h/db").drivername == "postgresql+asyncpg"
    assert normalize_url("postgres+asyncpg://u@h/db").drivername == "postgresql+asyncpg"


# -- a SQLite file's URL is built when first read ------------------------------------------
# (``sessiondb sessions list`` on SQLite never imports SQLAlchemy: tests/ops/test_startup.py)


@pytest.mark.parametrize(
    "raw",
    ["sessions.db", "  ./rel/x.db  ", ":memory:", "sqlite:///x.db", "sqlite:////abs/x.db",
     "sqlite:///", "sqlite:///a@b:c", "sqlite:///a#b", "sqlite:///%41.db", "sqlite:///x?mode=ro",
     "sqlite+pysqlite:///x.db", "sqlite://"],
)  # fmt: skip
def test_settings_read_a_sqlite_url_as_normalize_url_makes_it(raw: str) -> None:
    settings = Settings.from_env(raw, "ns")
    expected = normalize_url(raw)
    assert settings.is_sqlite
    assert settings.sqlite_database == (expected.database or "")
    assert settings.is_memory == (expected.database in (None, "", ":memory:"))
    url = settings.url
    assert isinstance(url, URL) and url == expected
    assert settings.url is url  # built once


@given(
    tail=st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    scheme=st.sampled_from(["sqlite:///", "", " sqlite:///", "sqlite:////"]),
)
def test_any_sqlite_text_reads_as_sqlalchemy_parses_it(tail: str, scheme: str) -> None:
    """The settings' own reading of a SQLite URL never differs from SQLAlchemy's, and
    refuses what it refuses."""
    raw = scheme + tail
    try:
        expected = normalize_url(raw)
    except ConfigurationError:
        with pytest.raises(ConfigurationError):
            Settings.from_env(raw, "ns")
        return
    settings = Settings.from_env(raw, "ns")
    assert settings.sqlite_database == (
        None if expected.get_backend_name() != "sqlite" else expected.database or ""
    )
    assert settings.url == expected


def test_settings_not_yet_built_compare_copy_and_pickle() -> None:
    a, b = Settings.from_env("x.db", "ns"), Settings.from_env("sqlite:///x.db", "ns")
    assert a == b
    assert Settings(url=normalize_url("x.db"), namespace="ns") == Settings.from_env("x.db", "ns")
    assert pickle.loads(pickle.dumps(Settings.from_env("x.db", "ns"))) == a
    assert replace(Settings.from_env("x.db", "ns"), namespace="other").url == a.url
    assert "sqlite:///x.db" in repr(Settings.from_env("x.db", "ns"))
    with pytest.raises(FrozenInstanceError):
        a.url = normalize_url("y.db")  # type: ignore[misc]


def test_a_postgres_url_has_no_sqlite_database() -> None:
    settings = Settings.from_env("postgresql://u@h/app", "ns")
    assert settings.sqlite_database is None and not settings.is_sqlite and not settings.is_memory
    assert settings.url.drivername == "postgresql+asyncpg"
