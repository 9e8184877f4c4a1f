"""Alembic, run from code: the same revisions as ``alembic upgrade head`` in the repo.

Also the filters a service's own Alembic ``env.py`` passes to ``context.configure`` so that
its autogenerate leaves sessiondb's tables alone (:func:`include_name`,
:func:`include_object`).
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .tables import SEARCH, VERSION_TABLE

__all__ = [
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "alembic_config",
    "include_name",
    "include_object",
    "is_search_table",
    "is_sessiondb_table",
    "run",
    "run_sync",
]

# Every table sessiondb creates, now or in a later revision, and its version table start
# with this; a prefix rather than a list, so that a service whose sessiondb is older
# than the database's schema still leaves the newer tables alone.
TABLE_PREFIX = "sessiondb_"


def is_sessiondb_table(name: object) -> bool:
    """Whether ``name`` is one of sessiondb's tables (its version table included)."""
    return isinstance(name, str) and name.startswith(TABLE_PREFIX)


def is_search_table(name: object) -> bool:
    """Whether ``name`` is SQLite's FTS5 search table or one of the tables FTS5 keeps for
    it (``sessiondb_search_data``, …): made by migration 0006, not described by
    :mod:`sessiondb.tables` (SQLAlchemy has no virtual tables), so never compared."""
    return isinstance(name, str) and (name == SEARCH or name.startswith(SEARCH + "_"))


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """An Alembic ``include_name`` filter for a service's ``env.py``: autogenerate skips
    sessiondb's tables (and so their columns, indexes and constraints) and its version
    table ``sessiondb_alembic_version``; everything else is included.

    ``context.configure(..., include_name=sessiondb.migrate.include_name)``
    """
    return not (type_ == "table" and is_sessiondb_table(name))


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """An Alembic ``include_object`` filter with the same rule as :func:`include_name`,
    applied to objects on both sides (needed when the service's own metadata holds
    sessiondb's tables, e.g. to declare a foreign key to ``sessiondb_sessions``, or when
    its ``target_metadata`` lists :mod:`sessiondb.orm`'s)."""
    if type_ == "table":
        return not is_sessiondb_table(name)
    table = getattr(obj, "table", None)
    return not is_sessiondb_table(getattr(table, "name", None))


def migrations_dir() -> Path:
    """Where the revisions are: ``migrations/`` in a checkout, ``sessiondb/_migrations``
    in an installed wheel (the same files)."""
    resource = files("sessiondb._migrations")
    with as_file(resource) as path:
        return Path(path)


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at sessiondb's revisions; with ``connection``, the
    revisions run on it instead of opening their own."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def run_sync(
    conn: Connection,
    action: str = "upgrade",
    revision: str = "head",
    search_config: str | None = None,
) -> None:
    """Run an Alembic command (``upgrade``/``downgrade``/``check``) on ``conn``;
    ``search_config``: the store's, for the search index the upgrade fills (Postgres)."""
    cfg = alembic_config(conn)
    if search_config is not None:
        cfg.attributes["search_config"] = search_config
    fn: Any = getattr(command, action)
    if action == "check":
        fn(cfg)
    else:
        fn(cfg, revision)


async def run(conn: AsyncConnection, action: str = "upgrade", revision: str = "head") -> None:
    """:func:`run_sync` on an async SQLAlchemy connection."""
    await conn.run_sync(lambda sync_conn: run_sync(sync_conn, action, revision))
