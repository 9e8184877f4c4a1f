"""A small asyncpg pool for the Postgres hot paths (append, context).

Checking a connection out of SQLAlchemy's pool and back costs ~200 µs of Python here,
as much as an append's round trip to the server, and SQLAlchemy's result processing
doubles the cost of reading a context; asyncpg's own pool and rows cost a fraction.
Only single autocommit statements run here, so a connection carries no session state
back to the pool and needs no reset query on release. Connections are opened on demand
and count against the server's limit beside the engine's pool (``max_size``, default 10).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

# Options of SQLAlchemy's asyncpg dialect that asyncpg.connect does not take.
_DIALECT_ONLY = {"prepared_statement_cache_size", "prepared_statement_name_func", "async_fallback"}


async def _no_reset(_connection: Any) -> None:
    """Nothing to reset: only single autocommit statements run on these connections."""


class DriverPool:
    """Opened lazily on first use, with the engine's connection arguments."""

    def __init__(self, engine: AsyncEngine, max_size: int = 10) -> None:
        self._engine = engine
        self._max_size = max_size
        self._pool: Any = None
        self._lock = asyncio.Lock()

    async def get(self) -> Any:
        """The ``asyncpg.Pool``, created on the first call."""
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    import asyncpg

                    args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
                    kwargs = {k: v for k, v in kwargs.items() if k not in _DIALECT_ONLY}
                    self._pool = await asyncpg.create_pool(
                        *args, min_size=0, max_size=self._max_size, reset=_no_reset, **kwargs
                    )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
