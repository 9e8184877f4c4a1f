"""Bounded memory for a reader's and a writer's indexes: a dict that moves to a private
temporary SQLite file once it grows (:class:`DiskMap`, :func:`spilled`), and the
indexes built on it (:class:`NodeTree`, :class:`UuidKeys`)."""

from __future__ import annotations

import json
import sqlite3
from array import array
from typing import Any

# A reader's index (uuid -> line, tool id -> name, …) stays a dict up to this many
# entries, then moves to a temporary SQLite file: a dict costs ~0.2-0.4 kB an entry
# (key, value and slot), so without this a reader's memory grows with its file.
SPILL_ENTRIES = 20_000
_FLUSH = 2_048


class DiskMap:
    """A ``str -> JSON value`` mapping in a private temporary SQLite file, for an index
    too big to keep in memory. Writes wait in a small dict and go in batches; reads see
    them. Keys and strings may hold lone surrogates."""

    def __init__(self, items: dict[str, Any]) -> None:
        # "" is SQLite's private temporary database, deleted when the connection closes;
        # its page cache (2 MB here) bounds what it keeps in memory.
        self._db = sqlite3.connect("", check_same_thread=False)
        self._db.execute("PRAGMA cache_size = -2000")
        self._db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        self._pending: dict[str, Any] = {}
        for key, value in items.items():
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        self._pending[key] = value
        if len(self._pending) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        rows = [(_blob(k), json.dumps(v).encode()) for k, v in self._pending.items()]
        self._db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", rows)
        self._pending.clear()

    def get(self, key: Any, default: Any = None) -> Any:
        if not isinstance(key, str):
            return default
        if key in self._pending:
            return self._pending[key]
        row = self._db.execute("SELECT v FROM kv WHERE k = ?", (_blob(key),)).fetchone()
        return default if row is None else json.loads(row[0])

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def close(self) -> None:
        self._db.close()


_MISSING = object()


def _blob(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


# A node's parent in a :class:`NodeTree`: none, or an id not seen yet (resolved later).
NO_PARENT = -1
PENDING = -2


class NodeTree:
    """What a reader of lines linked by id into a tree keeps per line (a *node*,
    numbered in file order): its parent node, its record position and flags in compact
    arrays, and the id -> node map and the forward links in indexes that may move to
    disk (:func:`spilled`). The reader declares these as its fields."""

    index: dict[str, Any] | DiskMap
    pending: dict[str, Any] | DiskMap  # str(node) -> its parent's id, not seen yet
    parents: array[int]
    positions: array[int]
    flags: bytearray
    position: int

    def add_node(self, key: str, parent: str | None, flags: int) -> int:
        """A new node for the first line with id ``key``; its number."""
        node = len(self.positions)
        parent_node = NO_PARENT
        if parent is not None:
            found = self.index.get(parent)
            if found is None:
                parent_node = PENDING
                self.pending[str(node)] = parent
            else:
                parent_node = found
        self.index[key] = node
        self.parents.append(parent_node)
        self.positions.append(self.position)
        self.flags.append(flags)
        return node


def spilled(index: dict[str, Any] | DiskMap) -> dict[str, Any] | DiskMap:
    """``index`` itself, or as a :class:`DiskMap` once it holds ``SPILL_ENTRIES``."""
    if isinstance(index, dict) and len(index) >= SPILL_ENTRIES:
        return DiskMap(index)
    return index


def close_spilled(*indexes: dict[str, Any] | DiskMap) -> None:
    """Drop the temporary file of each of ``indexes`` that :func:`spilled` moved to one."""
    for index in indexes:
        if isinstance(index, DiskMap):
            index.close()


class UuidKeys:
    """Hands out each external uuid once per session (the store's key is unique).

    The uuids handed out stay a dict until :meth:`spill` finds ``SPILL_ENTRIES`` of
    them, then move to a :class:`DiskMap`; :meth:`close` drops that file.
    """

    def __init__(self) -> None:
        self._seen: dict[str, Any] | DiskMap = {}

    def claim(self, value: Any) -> str | None:
        if not isinstance(value, str) or not value or value in self._seen:
            return None
        if not encodable(value):
            return None
        self._seen[value] = 1
        return value

    def spill(self) -> None:
        self._seen = spilled(self._seen)

    def close(self) -> None:
        close_spilled(self._seen)


def encodable(text: str) -> bool:
    """Whether ``text`` can be stored as a key: UTF-8 holds it (no lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
