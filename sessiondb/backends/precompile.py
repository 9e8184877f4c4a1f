"""Writes :mod:`sessiondb.backends.sqlite_sql`: the SQLite SQL of the statements a short
process runs first (each CLI command's reads, the store's common reads), compiled ahead.

A command found there neither imports SQLAlchemy's SQLite dialect nor compiles its
statements: ~15 ms of the ~0.3 s of ``sessiondb sessions list`` here (``python -m bench
--only 14``). Any other statement is compiled when first run, as before.

After changing a statement below (or :mod:`sessiondb.statements`' shapes, or SQLAlchemy):
``python -m sessiondb.backends.precompile``. tests/unit/test_precompiled_sql.py fails
until the file holds what SQLAlchemy compiles now, so it cannot drift.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import statements as q
from ..shapes import name_of
from ..transfer.exporter import EXPORT_BATCH
from .base import Compiler
from .sqlite_sql import dialect

TARGET = Path(__file__).with_name("sqlite_sql.py")
WIDTH = 72  # characters of SQL a line of the file holds

HEADER = '''"""SQLite's SQL for sessiondb's statements: its dialect, and the statements a short
process runs first, compiled ahead (by their names in ``shapes.SHAPE_NAMES``).

Written by ``python -m sessiondb.backends.precompile`` (which says why); do not edit.
Longer than the house's 700 lines: it is data, read by a program, not by people.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Dialect


def dialect() -> Dialect:
    """SQLAlchemy's SQLite dialect with ``?`` placeholders, for statements not below
    (its imports cost ~10 ms, paid by the first such statement)."""
    from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

    return sqlite_dialect(paramstyle="qmark")


'''


def bounds() -> Iterator[q.Bound]:
    """The statements precompiled, as their builders make them for SQLite."""
    ns, sid, at = "default", "s", datetime(2000, 1, 1, tzinfo=UTC)
    # ``sessions list`` with each of its options, and the store's listing without turns.
    for after, source, parent, with_turns in itertools.product(
        (None, (at, sid)), (None, "interactive", "cron"), (None, sid), (True, False)
    ):
        yield q.list_sessions(
            ns,
            limit=1,
            after=after,
            source=source,
            parent_id=parent,
            flavour=q.SQLITE,
            with_turns=with_turns,
        )
    yield q.data_keys_of(ns)  # every store's first read: is the namespace encrypted?
    yield q.get_session(sid, ns)
    yield q.session_with_turn(sid, ns, q.SQLITE)
    # ``sessions show`` (with --all or not), ``export``, ``SessionStore.records``.
    for tombstoned, limit in itertools.product((False, True), (None, EXPORT_BATCH)):
        yield q.lineage_records(
            sid,
            ns,
            include_tombstoned=tombstoned,
            include_superseded=True,
            limit=limit,
            flavour=q.SQLITE,
        )
    yield q.context_texts(sid, ns)
    for sealed in (False, True):
        yield q.context(sid, ns, q.SQLITE, sealed=sealed)
    for after in (None, (at, sid)):  # ``expire``
        yield q.expiry_candidates(ns, at, after=after, limit=1)


def table() -> dict[str, tuple[str, tuple[str, ...], dict[str, Any]]]:
    """``{statement name: (sql, parameter names, defaults)}`` as SQLAlchemy compiles
    them now for the SQLite backend."""
    compiler = Compiler(dialect)
    out = {}
    for stmt, _ in bounds():
        compiled = compiler.compile(stmt)
        name = name_of(stmt)
        assert name, f"a precompiled statement has no name: {stmt}"
        out[name] = (compiled.sql, compiled.names, dict(compiled.defaults))
    return dict(sorted(out.items()))


def _literal(text: str, indent: str) -> str:
    """``text`` as adjacent string literals, one or more per line of the SQL, each
    broken after a space and short enough for the line length."""
    pieces: list[str] = []
    for line in text.splitlines(keepends=True):
        piece = ""
        for word in re.split(r"(?<= )", line):
            if piece and len(piece) + len(word) > WIDTH:
                pieces.append(piece)
                piece = ""
            piece += word
        pieces.append(piece)
    assert "".join(pieces) == text
    return "\n".join(f"{indent}{piece!r}" for piece in pieces or [""])


def source(entries: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]]) -> str:
    """The module's text for ``entries``."""
    lines = [HEADER, "SQL: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = {"]
    for name, (sql, names, defaults) in entries.items():
        lines += [f"    {name!r}: (", "        (", _literal(sql, " " * 12), "        ),"]
        lines += [f"        {names!r},", f"        {defaults!r},", "    ),"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    TARGET.write_text(source(table()), encoding="utf-8")
    # Laid out as the house's formatter would; the test compares values, not text.
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(TARGET)], check=False)
    print(f"wrote {len(table())} statements to {TARGET.name}")


if __name__ == "__main__":
    main()
