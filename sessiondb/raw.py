"""Core statements compiled once to the driver's own SQL, for the hot paths that run on
the bare driver (asyncpg, sqlite3) instead of through SQLAlchemy's execution."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql.base import Executable


@dataclass(frozen=True)
class RawStatement:
    """SQL text with positional placeholders and the parameter names in their order."""

    sql: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        """The positional arguments for ``params`` (literals of the statement included)."""
        return [params[n] if n in params else self.defaults[n] for n in self.names]


class RawCompiler:
    """Compiles each statement once per dialect; statements are cached singletons."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._cache: dict[int, tuple[Executable, RawStatement]] = {}

    def __call__(self, stmt: Executable) -> RawStatement:
        hit = self._cache.get(id(stmt))
        if hit is not None and hit[0] is stmt:
            return hit[1]
        compiled = stmt.compile(dialect=self._dialect)  # type: ignore[attr-defined]
        raw = RawStatement(str(compiled), tuple(compiled.positiontup), dict(compiled.params))
        self._cache[id(stmt)] = (stmt, raw)
        return raw
