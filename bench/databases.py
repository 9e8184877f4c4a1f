"""The run's own databases: created from one migrated template, dropped at the end.

Postgres comes from ``SESSIONDB_BENCH_DATABASE_URL`` (any database on the server; it
is only used to create and drop the run's databases), else the local server on
127.0.0.1:5432 as ``$PGUSER``, ``root`` or ``postgres``, else the database
``docker compose up -d --wait`` starts (``sessiondb._compose``). SQLite files live in a
temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import asyncpg
from sqlalchemy.engine import URL, make_url

from sessiondb import SessionStore, _compose
from sessiondb.tables import metadata

#: Every sessiondb table, each before the tables it refers to (what ``clear`` empties).
TABLES = [table.name for table in reversed(metadata.sorted_tables)]

ENV_URL = "SESSIONDB_BENCH_DATABASE_URL"


class BenchError(Exception):
    """The benchmark cannot run as asked (no Postgres, a failed check)."""


@dataclass(frozen=True)
class Database:
    """One database of the run, with what both sides need to reach it."""

    backend: str  # "postgres" | "sqlite"
    name: str
    url: str  # for SessionStore.open
    dsn: str = ""  # for asyncpg.connect (Postgres)
    path: str = ""  # for sqlite3.connect (SQLite)


class Server(Protocol):
    backend: str

    async def setup(self) -> None: ...
    async def fresh(self) -> Database: ...
    async def drop(self, db: Database) -> None: ...
    async def clear(self, db: Database) -> None: ...
    async def cleanup(self) -> None: ...
    async def version(self) -> str: ...
    async def settle(self, db: Database) -> None: ...


async def _migrate(url: str) -> None:
    async with SessionStore.open(url) as store:
        await store.migrate()


def _connect_args(url: URL) -> dict[str, object]:
    return {
        "user": url.username,
        "password": url.password,
        "host": url.host or "127.0.0.1",
        "port": url.port or 5432,
        "database": url.database or "postgres",
    }


async def find_postgres() -> URL:
    """The admin URL of a reachable Postgres server, or :class:`BenchError` with why not."""
    explicit = os.environ.get(ENV_URL)
    candidates = (
        [explicit]
        if explicit
        else [
            *(
                f"postgresql://{user}@127.0.0.1:5432/postgres"
                for user in dict.fromkeys([os.environ.get("PGUSER") or "root", "postgres"])
            ),
            _compose.URL,
        ]
    )
    errors = []
    for candidate in candidates:
        url = make_url(candidate)
        try:
            conn = await asyncpg.connect(timeout=5, **_connect_args(url))
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            errors.append(f"{url.render_as_string(hide_password=True)}: {exc}")
            continue
        await conn.close()
        return url
    source = (
        ENV_URL
        if explicit
        else f"the local server or docker compose (set {ENV_URL} to use another)"
    )
    raise BenchError(
        f"no Postgres reachable from {source}: "
        + "; ".join(errors)
        + " (run with --backend sqlite to skip Postgres)"
    )


class PostgresServer:
    """Creates ``sessiondb_bench_<run>_<n>`` databases and drops them all at the end."""

    backend = "postgres"

    def __init__(self, admin: URL) -> None:
        self.admin = admin
        self.prefix = f"sessiondb_bench_{secrets.token_hex(4)}"
        self.template = f"{self.prefix}_template"
        self._made = 0

    async def _admin(self, *statements: str) -> None:
        conn = await asyncpg.connect(**_connect_args(self.admin))
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    def _database(self, name: str) -> Database:
        url = self.admin.set(database=name)
        return Database(
            backend=self.backend,
            name=name,
            url=url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False),
            dsn=url.set(drivername="postgresql").render_as_string(hide_password=False),
        )

    async def setup(self) -> None:
        await self._admin(f'CREATE DATABASE "{self.template}"')
        await _migrate(self._database(self.template).url)

    async def fresh(self) -> Database:
        self._made += 1
        name = f"{self.prefix}_{self._made}"
        await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return self._database(name)

    async def drop(self, db: Database) -> None:
        await self._admin(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')

    async def clear(self, db: Database) -> None:
        """Empty the tables: cheaper than a new database (a DROP DATABASE waits for a
        checkpoint, seconds when the disk is busy)."""
        conn = await asyncpg.connect(db.dsn)
        try:
            await conn.execute(f"TRUNCATE {', '.join(TABLES)}")
        finally:
            await conn.close()

    async def cleanup(self) -> None:
        conn = await asyncpg.connect(**_connect_args(self.admin))
        try:
            rows = await conn.fetch(
                "SELECT datname FROM pg_database WHERE datname LIKE $1", self.prefix + "%"
            )
            for row in rows:
                await conn.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}" WITH (FORCE)')
        finally:
            await conn.close()

    async def version(self) -> str:
        conn = await asyncpg.connect(**_connect_args(self.admin))
        try:
            return f"PostgreSQL {await conn.fetchval('SHOW server_version')}"
        finally:
            await conn.close()

    async def settle(self, db: Database) -> None:
        """After a load: planner statistics and a vacuumed table, as autovacuum would
        leave them a minute later, and a checkpoint, so that neither lands in the middle
        of a measurement (2 cores: a background worker takes half the machine)."""
        conn = await asyncpg.connect(db.dsn)
        try:
            await conn.execute("VACUUM (ANALYZE)")
            with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
                await conn.execute("CHECKPOINT")
        finally:
            await conn.close()


class SQLiteFiles:
    """SQLite databases as copies of one migrated file in a temporary directory."""

    backend = "sqlite"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.template = directory / "template.sqlite3"
        self._made = 0

    async def setup(self) -> None:
        await _migrate(str(self.template))

    async def fresh(self) -> Database:
        self._made += 1
        path = self.directory / f"bench_{self._made}.sqlite3"
        shutil.copyfile(self.template, path)
        return Database(backend=self.backend, name=path.name, url=str(path), path=str(path))

    async def drop(self, db: Database) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(db.path + suffix).unlink(missing_ok=True)

    async def clear(self, db: Database) -> None:
        """Empty the tables and shrink the file back to an empty database's."""
        conn = sqlite3.connect(db.path, isolation_level=None)
        try:
            for table in TABLES:
                conn.execute(f"DELETE FROM {table}")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    async def cleanup(self) -> None:
        """Nothing: the temporary directory goes with its context manager."""

    async def version(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}"

    async def settle(self, db: Database) -> None:
        """After a load: move the WAL into the database file. No ANALYZE: SQLite keeps
        no statistics unless asked, and sessiondb does not ask."""
        conn = sqlite3.connect(db.path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
