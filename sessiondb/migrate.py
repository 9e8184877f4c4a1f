"""Alembic, run from code: the same revisions as ``alembic upgrade head`` in the repo."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .tables import VERSION_TABLE

__all__ = ["VERSION_TABLE", "alembic_config", "run", "run_sync"]


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


def run_sync(conn: Connection, action: str = "upgrade", revision: str = "head") -> None:
    """Run an Alembic command (``upgrade``/``downgrade``/``check``) on ``conn``."""
    cfg = alembic_config(conn)
    fn: Any = getattr(command, action)
    if action == "check":
        fn(cfg)
    else:
        fn(cfg, revision)


async def run(conn: AsyncConnection, action: str = "upgrade", revision: str = "head") -> None:
    """:func:`run_sync` on an async SQLAlchemy connection."""
    await conn.run_sync(lambda sync_conn: run_sync(sync_conn, action, revision))
