"""The migrations create exactly the tables in ``sessiondb.tables``, and undo them.

Every test starts from an EMPTY database (not the migrated template), on both backends.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.migrations import head_revision, schema_state
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from sessiondb import SessionDBError, SessionStore
from sessiondb import migrate as migrations
from sessiondb.config import ENV_URL
from sessiondb.tables import (
    ADK_SESSIONS,
    ADK_STATE,
    DATA_KEYS,
    LINEAGE_SEALS,
    RECORDS,
    SESSIONS,
    TURNS,
    VERSION_TABLE,
)

REPO = Path(__file__).resolve().parents[2]


def _indexes(conn: Connection) -> dict[str, set[str]]:
    found = inspect(conn)
    return {t: {i["name"] for i in found.get_indexes(t)} for t in (SESSIONS, RECORDS)}


async def test_upgrade_matches_the_models_and_downgrade_undoes_it(empty_db_url: str) -> None:
    tables, _, _ = await schema_state(empty_db_url)
    assert tables == set()

    async with SessionStore.open(empty_db_url) as store:
        await store.migrate()
        await store.migrate()  # already at head: nothing to do

    tables, diff, versions = await schema_state(empty_db_url)
    assert tables == {
        SESSIONS,
        RECORDS,
        TURNS,
        ADK_SESSIONS,
        ADK_STATE,
        DATA_KEYS,
        LINEAGE_SEALS,
        VERSION_TABLE,
    }
    assert diff == []
    assert versions == [head_revision()]

    async with SessionStore.open(empty_db_url) as store:
        # Alembic's own check, through the code path the store uses: raises on any diff.
        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "check"))
        indexes = await sql.run_sync(store, _indexes)
        assert indexes[SESSIONS] >= {
            "ix_sessiondb_sessions_namespace_last_message_at_id",
            "ix_sessiondb_sessions_parent_id",
        }
        assert "ix_sessiondb_records_session_id_kind_seq" in indexes[RECORDS]

        await sql.run_sync(store, lambda conn: migrations.run_sync(conn, "downgrade", "base"))

    tables, _, versions = await schema_state(empty_db_url)
    assert tables == {VERSION_TABLE}
    assert versions == []

    # And back up: the downgrade left nothing in the way.
    async with SessionStore.open(empty_db_url) as store:
        await store.migrate()
        info = await store.create_session()
        (rec,) = await store.append(info.id, [{"role": "user", "content": "after migrate"}])
        assert rec.seq == 1
    tables, diff, versions = await schema_state(empty_db_url)
    assert tables == {
        SESSIONS,
        RECORDS,
        TURNS,
        ADK_SESSIONS,
        ADK_STATE,
        DATA_KEYS,
        LINEAGE_SEALS,
        VERSION_TABLE,
    }
    assert diff == []
    assert versions == [head_revision()]


async def test_unmigrated_database_fails_with_a_sessiondb_error(empty_db_url: str) -> None:
    async with SessionStore.open(empty_db_url) as store:
        with pytest.raises(SessionDBError):
            await store.create_session()
        with pytest.raises(SessionDBError):
            await store.list_sessions()


def _alembic(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != ENV_URL}
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def no_default_file() -> Any:
    """Fail if a command fell back to ./sessiondb.sqlite3 in the repository."""
    default = REPO / "sessiondb.sqlite3"
    existed = default.exists()
    yield
    if not existed and default.exists():
        default.unlink()
        pytest.fail("alembic used the default ./sessiondb.sqlite3 instead of the given URL")


@pytest.mark.usefixtures("no_default_file")
async def test_alembic_cli_with_x_url(empty_db_url: str) -> None:
    done = _alembic("-x", f"url={empty_db_url}", "upgrade", "head")
    assert done.returncode == 0, done.stderr
    tables, diff, versions = await schema_state(empty_db_url)
    assert tables == {
        SESSIONS,
        RECORDS,
        TURNS,
        ADK_SESSIONS,
        ADK_STATE,
        DATA_KEYS,
        LINEAGE_SEALS,
        VERSION_TABLE,
    }
    assert diff == []
    assert versions == [head_revision()]

    checked = _alembic("-x", f"url={empty_db_url}", "check")
    assert checked.returncode == 0, checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr


@pytest.mark.usefixtures("no_default_file")
async def test_alembic_cli_with_environment_url(empty_db_url: str) -> None:
    done = _alembic("upgrade", "head", env={ENV_URL: empty_db_url})
    assert done.returncode == 0, done.stderr
    tables, diff, versions = await schema_state(empty_db_url)
    assert tables == {
        SESSIONS,
        RECORDS,
        TURNS,
        ADK_SESSIONS,
        ADK_STATE,
        DATA_KEYS,
        LINEAGE_SEALS,
        VERSION_TABLE,
    }
    assert diff == []
    assert versions == [head_revision()]


@pytest.mark.usefixtures("no_default_file")
async def test_alembic_offline_sql(empty_db_url: str) -> None:
    done = _alembic("-x", f"url={empty_db_url}", "upgrade", "head", "--sql")
    assert done.returncode == 0, done.stderr
    assert f"CREATE TABLE {SESSIONS}" in done.stdout
    assert f"CREATE TABLE {RECORDS}" in done.stdout
    tables, _, _ = await schema_state(empty_db_url)
    assert tables == set()  # offline mode only prints


def _migrate_in_process(url: str, start: Any, errors: Any) -> None:
    async def run() -> None:
        async with SessionStore.open(url) as store:
            await store.migrate()

    start.wait()  # every process starts migrating at the same moment
    try:
        asyncio.run(run())
    except Exception as exc:  # reported to the parent, which fails the test
        errors.put(f"{type(exc).__name__}: {exc}")


async def test_four_processes_migrating_one_fresh_database_at_once(empty_db_url: str) -> None:
    # Replicas of a service that all call migrate() at start-up: one upgrades, the others
    # wait for it (advisory lock on Postgres, the write lock on SQLite) and find head.
    ctx = multiprocessing.get_context("spawn")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_migrate_in_process, args=(empty_db_url, start, errors))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    await asyncio.sleep(1.5)  # let every interpreter import sessiondb
    start.set()
    for p in procs:
        await asyncio.to_thread(p.join, 120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    tables, diff, versions = await schema_state(empty_db_url)
    assert tables == {
        SESSIONS,
        RECORDS,
        TURNS,
        ADK_SESSIONS,
        ADK_STATE,
        DATA_KEYS,
        LINEAGE_SEALS,
        VERSION_TABLE,
    }
    assert diff == []
    assert versions == [head_revision()]
