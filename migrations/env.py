"""Alembic environment for sessiondb.

The database is, in order: a connection handed over by ``sessiondb.migrate`` (the store
and the CLI), ``-x url=…`` on the alembic command line, ``SESSIONDB_URL``, the default
SQLite file in the current directory.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from sessiondb.backends import open_backend
from sessiondb.config import Settings
from sessiondb.migrate import is_search_table, is_sessiondb_table
from sessiondb.tables import VERSION_TABLE, with_partial_indexes

config = context.config
if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _own_tables_only(name: str | None, type_: str, parent_names: object) -> bool:
    # The database is often shared with a service's own tables: never propose dropping them.
    # SQLite's FTS5 search table is made by its migration alone (sessiondb.migrate).
    return type_ != "table" or (is_sessiondb_table(name) and not is_search_table(name))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=with_partial_indexes(),
        version_table=VERSION_TABLE,
        include_name=_own_tables_only,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=True,
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_url(url: str | None) -> None:
    # The same connection set-up as the store's: one backend, one connection.
    backend = open_backend(Settings.from_env(url))
    try:
        await backend.run_sync(_run_sync, exclusive=True)
    finally:
        await backend.close()


def run_offline() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url")
    settings = Settings.from_env(url)
    context.configure(
        url=settings.url,
        target_metadata=with_partial_indexes(),
        version_table=VERSION_TABLE,
        literal_binds=True,
        render_as_batch=settings.is_sqlite,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
        return
    asyncio.run(_run_with_url(context.get_x_argument(as_dictionary=True).get("url")))


if context.is_offline_mode():
    run_offline()
else:
    run_online()
