"""The text of every statement a store sends to Postgres, recorded by asyncpg's query
logger: pass ``connect_args=recording(sent)`` to ``SessionStore.open``."""

from __future__ import annotations

from typing import Any

import asyncpg

# Sent outside sessiondb.statements on purpose: the idle ping, transaction control, and
# the change feed's LISTEN (a connection's own command, on the coordinator under Citus).
NOT_CATALOGUED = {"SELECT 1", "BEGIN;", "COMMIT;", "ROLLBACK;", 'LISTEN "sessiondb_feed"'}


def recording(sent: list[str]) -> dict[str, Any]:
    """``connect_args`` whose connections append each statement's text to ``sent``."""

    class RecordingConnection(asyncpg.Connection):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.add_query_logger(lambda logged: sent.append(logged.query))

    return {"connection_class": RecordingConnection}


def _asyncpg_own(sql: str) -> bool:
    """asyncpg's own introspection of a type it has not seen (an array parameter), with
    JIT turned off around it: no sessiondb table in it."""
    return "sessiondb_" not in sql and ("pg_catalog" in sql or "set_config('jit'" in sql)


def sessiondb_statements(sent: list[str]) -> set[str]:
    """The distinct statements of ``sent`` that sessiondb itself built."""
    return {s.strip() for s in sent if not _asyncpg_own(s)} - NOT_CATALOGUED
