"""Database backends: one module per database, behind :class:`base.Backend`."""

from __future__ import annotations

from ..config import Settings
from .base import Backend, IntegrityViolation, Transaction

__all__ = ["Backend", "IntegrityViolation", "Transaction", "open_backend"]


def open_backend(settings: Settings) -> Backend:
    """The backend for ``settings.url``; opens no connection yet (SQLite's ``:memory:``
    aside, whose one connection is the database).

    Raises:
        ConfigurationError: the URL or the options are unusable.
        MissingDependencyError: a Postgres URL without ``sessiondb[postgres]``.
    """
    if settings.is_sqlite:
        from .sqlite import SQLiteBackend

        return SQLiteBackend(settings)
    from .postgres import PostgresBackend

    if settings.replica_urls:
        from .replicas import replica_backend

        return replica_backend(settings, PostgresBackend(settings), PostgresBackend)
    return PostgresBackend(settings)
