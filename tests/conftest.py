"""Test databases: the same suite on SQLite and on a real Postgres.

Postgres is found, in order: ``SESSIONDB_TEST_DATABASE_URL``; the local server on
127.0.0.1:5432; the database ``docker compose up -d --wait`` starts (its address from
``sessiondb._compose``); a testcontainers Postgres where a Docker engine answers. Without
one the Postgres tests are skipped with the reason, and ``SESSIONDB_REQUIRE_POSTGRES=1``
turns that skip into a failure (CI sets it). A local server comes before the compose one:
it is already there, and the compose port (5433) cannot be taken by it.

Each run migrates one template database and gives every test a fresh copy, which the
run drops at the end.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.browser import artefacts, browser  # noqa: F401  (fixtures: browser tests)
from helpers.corpus import need_corpus
from helpers.pgbouncer import pgbouncer  # noqa: F401  (a fixture, offered to every test)
from sqlalchemy.engine import URL, make_url

from sessiondb import SessionStore, _compose

#: The compose database's URL, as the tests use it (``tests/ops/test_compose.py``).
COMPOSE_URL = _compose.URL

# The behavioural suite runs on each; a test that opens the database by URL (several
# stores or processes on one database) cannot run on ":memory:", which is one database
# per store, and runs on the other two.
BACKENDS = ["sqlite", "memory", "postgres"]
URL_BACKENDS = ["sqlite", "postgres"]


@dataclass
class Postgres:
    admin_url: URL | None
    reason: str
    template: str | None = None
    container: object | None = None


async def _connect(url: URL, **kwargs: Any) -> Any:
    """An asyncpg connection to ``url`` (its database, else ``postgres``)."""
    import asyncpg

    return await asyncpg.connect(
        user=url.username,
        password=url.password,
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        database=url.database or "postgres",
        **kwargs,
    )


async def _can_connect(url: URL) -> str | None:
    import asyncpg

    try:
        conn = await _connect(url, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return None


def _find_postgres() -> Postgres:
    explicit = os.environ.get("SESSIONDB_TEST_DATABASE_URL")
    if explicit:
        url = make_url(explicit)
        error = asyncio.run(_can_connect(url))
        if error:
            return Postgres(None, f"SESSIONDB_TEST_DATABASE_URL={explicit} unreachable: {error}")
        return Postgres(url, "")
    errors = []
    for user in dict.fromkeys([os.environ.get("PGUSER") or "root", "postgres"]):
        url = make_url(f"postgresql://{user}@127.0.0.1:5432/postgres")
        error = asyncio.run(_can_connect(url))
        if error is None:
            return Postgres(url, "")
        errors.append(f"{user}@127.0.0.1:5432: {error}")
    url = make_url(COMPOSE_URL)
    error = asyncio.run(_can_connect(url))
    if error is None:
        return Postgres(url, "")
    errors.append(f"docker compose ({url.render_as_string(hide_password=True)}): {error}")
    try:
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver=None)
        container.start()
    except Exception as exc:  # no Docker engine: the usual case on CI machines without one
        errors.append(f"testcontainers: {type(exc).__name__}: {exc}")
        return Postgres(None, "no Postgres found (" + "; ".join(errors) + ")")
    return Postgres(make_url(container.get_connection_url()), "", container=container)


async def _admin(url: URL, *statements: str) -> None:

    conn = await _connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _migrate(url: str) -> None:
    async with SessionStore.open(url) as store:
        await store.migrate()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    pg = _find_postgres()
    if pg.admin_url is not None:
        run = uuid.uuid4().hex[:10]
        pg.template = f"sessiondb_test_{run}_template"
        asyncio.run(_admin(pg.admin_url, f'CREATE DATABASE "{pg.template}"'))
        asyncio.run(_migrate(pg.admin_url.set(database=pg.template).render_as_string(False)))
    yield pg
    if pg.admin_url is not None:
        asyncio.run(_drop_run_databases(pg))
    if pg.container is not None:
        pg.container.stop()  # type: ignore[attr-defined]


async def _drop_run_databases(pg: Postgres) -> None:

    assert pg.admin_url is not None and pg.template is not None
    prefix = pg.template.removesuffix("_template")
    url = pg.admin_url
    conn = await _connect(url)
    try:
        names = await conn.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE $1", prefix + "%"
        )
        for row in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}" WITH (FORCE)')
    finally:
        await conn.close()


def _require_postgres(pg: Postgres) -> URL:
    if pg.admin_url is None:
        message = f"Postgres tests need a server: {pg.reason}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    return pg.admin_url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.sqlite3"
    asyncio.run(_migrate(str(path)))
    return path


def new_database_url(
    backend: str, postgres: Postgres, sqlite_template: Path, tmp_path: Path
) -> str:
    """A fresh, migrated database of ``backend`` for one test."""
    if backend == "sqlite":
        path = tmp_path / f"{uuid.uuid4().hex[:8]}.sqlite3"
        shutil.copyfile(sqlite_template, path)
        return str(path)
    admin = _require_postgres(postgres)
    name = f"{postgres.template.removesuffix('_template')}_{uuid.uuid4().hex[:10]}"  # type: ignore[union-attr]
    asyncio.run(_admin(admin, f'CREATE DATABASE "{name}" TEMPLATE "{postgres.template}"'))
    return admin.set(drivername="postgresql+asyncpg", database=name).render_as_string(False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs_corpus`` is skipped (or failed, under
    ``SESSIONDB_REQUIRE_CORPUS=1``) before its fixtures run when the corpus is absent."""
    if item.get_closest_marker("needs_corpus") is not None:
        need_corpus()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    explicit = any(
        "backend" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize")
    )
    if "backend" in metafunc.fixturenames and not explicit:
        names = metafunc.fixturenames
        by_url = "db_url" in names or "empty_db_url" in names
        metafunc.parametrize("backend", URL_BACKENDS if by_url else BACKENDS, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, postgres: Postgres, sqlite_template: Path, tmp_path: Path) -> str:
    """The URL of a fresh migrated database on the test's backend."""
    return new_database_url(backend, postgres, sqlite_template, tmp_path)


@pytest.fixture
def pg_url(postgres: Postgres, sqlite_template: Path, tmp_path: Path) -> str:
    """The URL of a fresh migrated Postgres database (for Postgres-only tests)."""
    return new_database_url("postgres", postgres, sqlite_template, tmp_path)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The database of the ``store`` fixture: ``db_url``'s, so that a test asking for both
    gets one database; ``:memory:`` on the memory backend."""
    if backend == "memory":
        return ":memory:"
    return str(request.getfixturevalue("db_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SessionStore]:
    """A store on a fresh migrated database of the test's backend (built by
    :func:`helpers.sql.open_store`, so that tests can read ``:memory:`` too)."""
    async with sql.store_on(store_url) as s:
        yield s


@pytest.fixture
def empty_db_url(backend: str, postgres: Postgres, tmp_path: Path) -> str:
    """The URL of a fresh database with no tables at all (not from the migrated template)."""
    if backend == "sqlite":
        return str(tmp_path / f"empty_{uuid.uuid4().hex[:8]}.sqlite3")
    admin = _require_postgres(postgres)
    name = f"{postgres.template.removesuffix('_template')}_empty_{uuid.uuid4().hex[:10]}"  # type: ignore[union-attr]
    asyncio.run(_admin(admin, f'CREATE DATABASE "{name}" TEMPLATE template0'))
    return admin.set(drivername="postgresql+asyncpg", database=name).render_as_string(False)
