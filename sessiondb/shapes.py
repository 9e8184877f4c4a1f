"""Statements by name, for the statements a short process runs first.

Every statement of :mod:`sessiondb.statements` has a name (:data:`SHAPE_NAMES`), and
the SQLite backend finds the precompiled SQL of the common ones by it
(:mod:`sessiondb.backends.sqlite_sql`). A :class:`Shape` is such a statement before it
is built: its name, and the builder that makes it when a backend first needs it. The
builders here return shapes, so that ``sessiondb sessions list`` on SQLite runs its
statements without importing SQLAlchemy (~0.2 s, more than the rest of the command);
Postgres, and a statement the file lacks, build it on first use and compile it once.

Standard library only.
"""

from __future__ import annotations

import importlib
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.sql.base import Executable

POSTGRES = "postgresql"
SQLITE = "sqlite"

#: The name of each statement of :mod:`sessiondb.statements`, by ``id``: its constant's
#: name (``_DATA_KEYS_OF``), or its cached builder's call (``_session_with_turn('sqlite')``).
#: Precompiled SQL is found by it (:mod:`sessiondb.backends.sqlite_sql`); every statement
#: named here is kept alive by its module or by its builder's cache, so no other object
#: can take its ``id``.
SHAPE_NAMES: dict[int, str] = {}


class Shape:
    """A statement of :mod:`sessiondb.statements` by its name in :data:`SHAPE_NAMES`:
    ``attribute`` is the module constant or the cached builder, called with ``args``
    when :attr:`statement` is first read. One object per name (:func:`shape`)."""

    __slots__ = ("_args", "_attribute", "_built", "name")

    def __init__(self, attribute: str, args: tuple[Any, ...] | None) -> None:
        self._attribute = attribute
        self._args = args
        self._built: Executable | None = None
        self.name = attribute if args is None else shape_name(attribute, args)

    @property
    def statement(self) -> Executable:
        """The SQLAlchemy statement (imports :mod:`sessiondb.statements` when first read)."""
        if self._built is None:
            found = getattr(importlib.import_module("sessiondb.statements"), self._attribute)
            self._built = found if self._args is None else found(*self._args)
        return self._built

    def __repr__(self) -> str:
        return f"Shape({self.name})"


#: A statement and its parameters, as every builder returns them.
Bound = tuple["Executable | Shape", dict[str, Any]]


@cache
def shape(attribute: str, *args: Any) -> Shape:
    """The :class:`Shape` of ``statements.<attribute>``: a constant with no ``args``, a
    builder's call with them (``shape("_list_sessions", False, None, ...)``)."""
    return Shape(attribute, args or None)


def shape_name(builder: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> str:
    """The name of a cached builder's statement: its call (``_list_sessions(False, …)``)."""
    call = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in sorted((kwargs or {}).items())]
    return f"{builder}({', '.join(call)})"


def name_of(stmt: Any) -> str:
    """``stmt``'s name: a :class:`Shape`'s own, else its entry in :data:`SHAPE_NAMES`
    (``""`` for a statement not named there)."""
    return stmt.name if type(stmt) is Shape else SHAPE_NAMES.get(id(stmt), "")


def statement_of(stmt: Any) -> Any:
    """``stmt`` built: a :class:`Shape`'s statement, any other statement as it is."""
    return stmt.statement if type(stmt) is Shape else stmt


# -- the builders (their statements are in sessiondb.statements) ------------------------


def list_sessions(
    namespace: str,
    *,
    limit: int,
    after: tuple[datetime, str] | None,
    source: str | None,
    parent_id: str | None,
    flavour: str = POSTGRES,
    with_turns: bool = True,
) -> Bound:
    """A keyset page, newest ``last_message_at`` first; never OFFSET. Each row carries
    its live turn's columns as ``statements.session_with_turn`` does (a primary-key
    probe of the turns table per listed session); ``with_turns=False``: without them."""
    stmt = shape(
        "_list_sessions", after is not None, source, parent_id is not None, flavour, with_turns
    )
    params: dict[str, Any] = {"ns": namespace, "limit": limit}
    if after is not None:
        params["after_at"], params["after_id"] = after
    if parent_id is not None:
        params["parent_id"] = parent_id
    return stmt, params


def data_keys_of(namespace: str) -> Bound:
    """The namespace's data keys, oldest version first (encryption at rest)."""
    return shape("_DATA_KEYS_OF"), {"ns": namespace}
