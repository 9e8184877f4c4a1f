"""Encryption at rest at the row boundary: a backend that seals what a store writes and
opens what it reads, so that nothing above it (core, features, the decode path) changes.

:class:`SealedBackend` wraps the store's backend when the store has a key provider
(``SessionStore.open(url, encryption=provider)``):

- writes: a record's ``payload`` is sealed with its session id, seq and structure (kind,
  role, ``target_seq``, ``first_kept_seq``: :func:`crypto.record_context`) as associated
  data (an append locks the session's head first, to know the seqs it will get); a
  session's ``name``, ``system_prompt_override`` and ``metadata_json`` with its id and the
  column's name; and a statement that writes a session's parent and fork point is
  followed, in its transaction, by the session's lineage seal (an empty plaintext sealed
  with them, a row of ``tables.lineage_seals``: :func:`statements.seal_lineage`). Every
  statement that writes them is known (:func:`statements.sealed_session_params`, the
  appends, the bulk inserts). A plain store names none of this: its statements run on a
  schema without the seals' table.
- reads: every row of a statement that selects one of those columns comes back with the
  plaintext in its place, found by the statement's column names; a payload is opened
  with the structure columns of its row (a statement that reads payloads without them
  is refused), a lineage seal (``sealed_lineage``) checked against the row's parent and
  fork point.
  Columns named ``sealed_*`` (the row's identity and structure, selected for this only)
  are dropped. The statements that decide what a context or a record listing holds by
  these columns also read every row whose columns they trusted
  (:func:`statements.context` with ``sealed``, :func:`statements.lineage_structure`), so
  that a changed column fails to open rather than changing what is shown.

Values bound before this binding (sealed by a data key whose wrap context is
:data:`crypto.UNBOUND_KEY_CONTEXT`'s, sessions without a lineage seal) read as before,
bound to their place only, until the namespace has a completed data key of the bound kind
(``rotate_keys(reencrypt=True)`` makes one and moves every row to it); from then on, or
from the start for a session without a seal once the namespace has any bound key, they
are refused with a :class:`DecryptionError` that says to run the rotation.

:class:`Keyring` holds the namespace's data keys, unwrapped by the provider;
:func:`rotate` re-wraps them and, asked to, re-encrypts the rows. A store without a
provider gets :class:`PlainGuard`, which refuses an encrypted namespace on first use and
then steps aside.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import crypto, shapes
from .backends.base import Backend, Row, Transaction, retrying
from .errors import (
    ConfigurationError,
    DecryptionError,
    EncryptedNamespaceError,
    EncryptionError,
)
from .keyring import Keyring, UnknownKeyVersion
from .lazy import lazy_modules

if TYPE_CHECKING:  # imported when first used: SQLAlchemy's (start-up rule in sessiondb/cli.py)
    from sqlalchemy import Table

    from . import statements as q
    from . import tables
else:
    q, tables = lazy_modules("statements tables")

T = TypeVar("T")

# Optimistic appends tried before one that locks the head (a busy session's writers).
OPTIMISTIC_TRIES = 3


# -- reading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Shape:
    """Where a statement's rows keep what must be opened."""

    names: tuple[str, ...]
    payload: int | None
    sid: int | None
    seq: int | None
    session: tuple[tuple[int, str], ...]  # (position, column) of sealed session columns
    session_id: int | None
    keep: tuple[int, ...] | None  # positions to keep when some are dropped
    row: type | None
    # Positions of a payload's structure: kind, role, target_seq, first_kept_seq.
    structure: tuple[int, int, int, int] | None = None
    # A lineage seal: (seal, parent_id, fork_seq); NULL in a row that is not a member's.
    lineage: tuple[int, int | None, int | None] | None = None


def _row_type(names: Sequence[str]) -> type:
    """Rows with columns by position and by name, as the backends' rows are."""
    index = {n: i for i, n in enumerate(names)}

    class SealedRow(tuple[Any, ...]):
        __slots__ = ()

        def __getitem__(self, key: Any) -> Any:
            if isinstance(key, str):
                return tuple.__getitem__(self, index[key])
            return tuple.__getitem__(self, key)

        def keys(self) -> list[str]:
            return list(names)

        def get(self, key: str, default: Any = None) -> Any:
            return self[key] if key in index else default

    return SealedRow


def _shape(stmt: Any) -> _Shape | None:
    try:
        columns = list(shapes.statement_of(stmt).exported_columns)
    except AttributeError:
        return None  # text(): no sealed column is read by one
    names = tuple(str(c.key) for c in columns)
    session = tuple(
        (i, c.key)
        for i, c in enumerate(columns)
        if c.key in q.SEALED_SESSION_COLUMNS
        and any(p is tables.sessions.c[c.key] for p in c.proxy_set)
    )
    payload = names.index("payload") if "payload" in names else None

    def at(name: str) -> int | None:
        """A column by its ``sealed_`` name (selected for the opener) or its own."""
        for n in (f"sealed_{name}", name):
            if n in names:
                return names.index(n)
        return None

    kind, role, target, first_kept = (at(n) for n in STRUCTURE)
    structure = None
    if kind is not None and role is not None and target is not None and first_kept is not None:
        structure = (kind, role, target, first_kept)
    lineage = None
    if "sealed_lineage" in names:
        lineage = (names.index("sealed_lineage"), at("parent_id"), at("fork_seq"))
    if payload is None and not session and lineage is None:
        return None
    sid = names.index("sealed_sid") if "sealed_sid" in names else None
    if sid is None and "session_id" in names:
        sid = names.index("session_id")
    dropped = [i for i, n in enumerate(names) if n.startswith("sealed_")]
    keep = tuple(i for i in range(len(names)) if i not in dropped) if dropped else None
    kept = names if keep is None else tuple(names[i] for i in keep)
    return _Shape(
        names=names,
        payload=payload,
        sid=sid,
        seq=names.index("seq") if "seq" in names else None,
        session=session,
        session_id=names.index("id") if "id" in names else None,
        keep=keep,
        row=_row_type(kept),
        structure=structure,
        lineage=lineage,
    )


#: The columns of a record that its payload's associated data binds, in that order.
STRUCTURE = ("kind", "role", "target_seq", "first_kept_seq")


class Opener:
    """Opens the sealed columns of rows, by statement (each statement's shape once)."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self._shapes: dict[int, tuple[Any, _Shape | None]] = {}

    def shape(self, stmt: Any) -> _Shape | None:
        hit = self._shapes.get(id(stmt))
        if hit is not None and hit[0] is stmt:
            return hit[1]
        found = _shape(stmt)
        if len(self._shapes) > 512:
            self._shapes.clear()
        self._shapes[id(stmt)] = (stmt, found)
        return found

    def rows(self, bound: q.Bound, rows: list[Row]) -> list[Row]:
        if not rows:
            return rows
        stmt, params = bound
        shape = self.shape(stmt)
        if shape is None:
            return rows
        return [self._row(shape, params, r) for r in rows]

    def _row(self, shape: _Shape, params: Mapping[str, Any], row: Row) -> Row:
        values = list(row)
        ns = self.keyring.namespace
        if shape.payload is not None and values[shape.payload] is not None:
            sid = values[shape.sid] if shape.sid is not None else params.get("sid")
            if sid is None or shape.seq is None:
                raise EncryptionError(
                    "a statement reads sealed payloads without their session id and seq"
                )
            if shape.structure is None:
                raise EncryptionError(
                    "a statement reads sealed payloads without their structure "
                    f"({', '.join(STRUCTURE)})"
                )
            seq = int(values[shape.seq])
            raw = values[shape.payload]
            as_bytes = isinstance(raw, bytes | bytearray | memoryview)
            text = bytes(raw).decode("ascii", "replace") if as_bytes else raw
            kind, role, target, first_kept = (values[i] for i in shape.structure)
            context = crypto.record_context(ns, sid, seq, kind, role, target, first_kept)
            plain = self._open(
                text,
                context,
                sid,
                seq,
                functools.partial(crypto.row_context, ns, sid, "payload", seq),
            )
            values[shape.payload] = plain.encode("utf-8", "surrogatepass") if as_bytes else plain
        if shape.lineage is not None:
            self._check_lineage(shape, params, values)
        for i, column in shape.session:
            if values[i] is not None:
                if shape.session_id is None:
                    raise EncryptionError(f"a statement reads sealed {column} without the id")
                sid = values[shape.session_id]
                values[i] = self._open(values[i], crypto.row_context(ns, sid, column), sid, None)
        if shape.keep is not None:
            values = [values[i] for i in shape.keep]
        assert shape.row is not None
        return shape.row(values)

    def _check_lineage(self, shape: _Shape, params: Mapping[str, Any], values: list[Any]) -> None:
        """A row's lineage seal against its parent and fork point: a session whose
        parent or fork point was changed fails to open."""
        assert shape.lineage is not None
        seal_at, parent_at, fork_at = shape.lineage
        seal = values[seal_at]
        if seal is None:
            return  # not a lineage row of the statement
        sid = values[shape.sid] if shape.sid is not None else None
        if sid is None or parent_at is None or fork_at is None:
            raise EncryptionError("a statement reads lineage seals without id, parent and fork")
        if not seal:
            if self.keyring.reads_unsealed_sessions:
                return  # a session sealed before the binding: read as before
            raise DecryptionError(
                f"session {sid}: cannot decrypt: its lineage is not sealed (written before "
                "the structure binding, or the seal was removed); if this namespace was "
                "written by an older sessiondb, run rotate_keys(reencrypt=True) to completion"
            )
        context = crypto.lineage_context(
            self.keyring.namespace, sid, values[parent_at], values[fork_at]
        )
        self._open(seal, context, sid, None)

    def open_text(
        self,
        text: str,
        context: bytes,
        sid: str,
        seq: int | None,
        unbound: Callable[[], bytes] | None = None,
    ) -> str:
        """One sealed value's plaintext; a version the keyring lacks is a
        :class:`DecryptionError` here."""
        try:
            return self._open(text, context, sid, seq, unbound)
        except UnknownKeyVersion as exc:
            raise DecryptionError(
                f"session {sid}: sealed by data key {exc.args[0]}, which the namespace "
                "does not have"
            ) from None

    def _open(
        self,
        text: str,
        context: bytes,
        sid: str,
        seq: int | None,
        unbound: Callable[[], bytes] | None = None,
    ) -> str:
        try:
            return self.keyring.open(text, context, unbound)
        except DecryptionError as exc:
            where = f"session {sid}" + ("" if seq is None else f" seq {seq}")
            raise DecryptionError(f"{where}: cannot decrypt: {exc}") from None


# -- writing ------------------------------------------------------------------------------


def structure_check(bound: q.Bound) -> q.Bound | None:
    """The read that checks what a sealed :func:`statements.lineage_records` read trusted
    (:func:`statements.lineage_structure`), or ``None`` for any other statement."""
    stmt, params = bound
    filtered = q.SEALED_LISTINGS.get(id(stmt))
    if filtered is None:
        return None
    return q.lineage_structure(
        params["sid"], params["ns"], filtered=filtered, from_seq=params.get("from_seq")
    )


def seal_params(keyring: Keyring, bound: q.Bound, flavour: str) -> tuple[q.Bound, q.Bound | None]:
    """The bound with the session columns it writes sealed (others unchanged), and the
    write of the session's lineage seal to run after it in its transaction (``None``
    for a statement that writes no parent and fork point)."""
    stmt, params = bound
    spec = q.sealed_session_params(shapes.statement_of(stmt))
    if spec is None:
        return bound, None
    id_param, columns, lineage = spec
    sid = params[id_param]
    sealed = dict(params)
    for param, column in columns.items():
        value = params.get(param)
        if value is not None:
            context = crypto.row_context(keyring.namespace, sid, column)
            sealed[param] = keyring.seal(value, context)
    seal = None
    if lineage is not None:
        seal = write_seal(
            keyring, sid, params[f"{lineage}parent_id"], params[f"{lineage}fork_seq"], flavour
        )
    return (stmt, sealed), seal


def lineage_seal(keyring: Keyring, sid: str, parent_id: str | None, fork_seq: int | None) -> str:
    """A session's lineage seal: an empty plaintext bound to its parent and fork point."""
    return keyring.seal("", crypto.lineage_context(keyring.namespace, sid, parent_id, fork_seq))


def write_seal(
    keyring: Keyring, sid: str, parent_id: str | None, fork_seq: int | None, flavour: str
) -> q.Bound:
    """The write of a session's lineage seal (:func:`statements.seal_lineage`)."""
    seal = lineage_seal(keyring, sid, parent_id, fork_seq)
    return q.seal_lineage(sid, keyring.namespace, seal, flavour)


def table_seals(
    keyring: Keyring, table: Table, rows: Sequence[tuple[Any, ...]], flavour: str
) -> list[q.Bound]:
    """The lineage seals of bulk-inserted rows of ``table`` (of sessions: one each)."""
    if table is not tables.sessions:
        return []
    id_i, parent_i, fork_i = map(q.SESSION_COLUMN_NAMES.index, ("id", "parent_id", "fork_seq"))
    return [write_seal(keyring, r[id_i], r[parent_i], r[fork_i], flavour) for r in rows]


def seal_table_rows(
    keyring: Keyring, table: Table, rows: Sequence[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Rows of ``table`` (every column, in table order) with their sealed columns sealed."""
    ns = keyring.namespace
    if table is tables.records:
        sid_i, seq_i, pay_i = map(q.RECORD_COLUMN_NAMES.index, ("session_id", "seq", "payload"))
        structure = [q.RECORD_COLUMN_NAMES.index(n) for n in STRUCTURE]
        out = []
        for r in rows:
            values = list(r)
            kind, role, target, first_kept = (values[i] for i in structure)
            context = crypto.record_context(
                ns, values[sid_i], int(values[seq_i]), kind, role, target, first_kept
            )
            values[pay_i] = keyring.seal(values[pay_i], context)
            out.append(tuple(values))
        return out
    if table is tables.sessions:
        names = q.SESSION_COLUMN_NAMES
        id_i = names.index("id")
        at = [(names.index(n), n) for n in q.SEALED_SESSION_COLUMNS]
        out = []
        for r in rows:
            values = list(r)
            for i, column in at:
                if values[i] is not None:
                    context = crypto.row_context(ns, values[id_i], column)
                    values[i] = keyring.seal(values[i], context)
            out.append(tuple(values))
        return out
    return list(rows)


def seal_append(
    keyring: Keyring, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]], first: int
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """An append's head and rows sealed, the rows to get seqs from ``first`` on."""
    ns, sid = keyring.namespace, head["sid"]
    sealed_head = dict(head)
    if head.get("name") is not None:
        sealed_head["name"] = keyring.seal(head["name"], crypto.row_context(ns, sid, "name"))
    at, sealed = q.APPEND_COLUMN_NAMES.index("payload"), [list(r) for r in rows]
    structure = [q.APPEND_COLUMN_NAMES.index(n) for n in STRUCTURE]
    for i, r in enumerate(sealed):
        kind, role, target, first_kept = (r[j] for j in structure)
        context = crypto.record_context(ns, sid, first + i, kind, role, target, first_kept)
        r[at] = keyring.seal(r[at], context)
    return sealed_head, [tuple(r) for r in sealed]


class SealedTransaction:
    """A transaction of :class:`SealedBackend`: seals what it writes, opens what it reads."""

    def __init__(self, inner: Transaction, keyring: Keyring, opener: Opener, flavour: str) -> None:
        self._inner = inner
        self._keyring = keyring
        self._opener = opener
        self._flavour = flavour

    async def fetch(self, bound: q.Bound) -> list[Row]:
        bound, seal = seal_params(self._keyring, bound, self._flavour)
        rows = await self._inner.fetch(bound)
        if seal is not None:
            await self._inner.fetch(seal)
        opened = self._opener.rows(bound, rows)
        check = structure_check(bound)
        if check is not None:
            self._opener.rows(check, await self._inner.fetch(check))
        return opened

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        # The seqs the rows get are in their associated data: lock the head to know them.
        found = await self._inner.fetch(q.lock_head(head["sid"], head["ns"]))
        if not found:
            return None
        last = int(found[0][0])
        expected = head.get("expected")
        if expected is not None and expected != last:
            return None
        sealed_head, sealed = seal_append(self._keyring, head, rows, last + 1)
        first = await self._inner.append(sealed_head, sealed)
        if first is not None and first != last + 1:  # the head is locked: cannot happen
            raise EncryptionError(f"the head moved under its lock ({first} != {last + 1})")
        return first

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
        await self._inner.insert(table, seal_table_rows(self._keyring, table, rows))
        for seal in table_seals(self._keyring, table, rows, self._flavour):
            await self._inner.fetch(seal)


class SealedBackend:
    """A backend that seals and opens (see the module's docstring); everything else is
    the wrapped backend's."""

    def __init__(self, inner: Backend, keyring: Keyring) -> None:
        self.inner = inner
        self.keyring = keyring
        self.flavour = inner.flavour
        self.opener = Opener(keyring)
        inner_primary = getattr(inner, "primary", inner)
        self.primary: Backend = (
            self if inner_primary is inner else SealedBackend(inner_primary, keyring)
        )

    def __getattr__(self, name: str) -> Any:
        # listen, data_version, probes: what the wrapped backend has beyond Backend.
        return getattr(self.inner, name)

    async def _ready(self) -> None:
        await self.keyring.ready(self.primary_inner)

    @property
    def primary_inner(self) -> Backend:
        """The wrapped primary: key rows are read and written there."""
        return getattr(self.inner, "primary", self.inner)

    async def _opened(
        self, bound: q.Bound, read: Callable[[q.Bound], Any], *, checked: bool = True
    ) -> list[Row]:
        rows = await read(bound)
        try:
            opened = self.opener.rows(bound, rows)
        except UnknownKeyVersion:
            await self.keyring.load(self.primary_inner)  # a key newer than ours
            try:
                opened = self.opener.rows(bound, rows)
            except UnknownKeyVersion as exc:
                raise DecryptionError(
                    f"namespace {self.keyring.namespace!r}: a value is sealed by data key "
                    f"{exc.args[0]}, which the namespace does not have"
                ) from None
        check = structure_check(bound) if checked else None
        if check is not None:  # opened to be checked, then dropped
            await self._opened(check, read, checked=False)
        return opened

    async def fetch(self, bound: q.Bound, *, plain: bool = False) -> list[Row]:
        await self._ready()
        return await self._opened(bound, lambda b: self.inner.fetch(b, plain=plain))

    async def execute(self, bound: q.Bound) -> list[Row]:
        await self._ready()
        sealed, seal = seal_params(self.keyring, bound, self.flavour)
        if seal is None:
            return await self._opened(sealed, self.inner.execute)

        async def with_seal(stmt: q.Bound) -> list[Row]:
            async def once() -> list[Row]:
                async with self.inner.transaction() as tx:
                    rows = await tx.fetch(stmt)
                    await tx.fetch(seal)
                    return rows

            return await retrying(once)

        return await self._opened(sealed, with_seal)

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        """Optimistic: read the head, seal for the seqs after it, append expecting it (two
        round trips, no lock held between); a writer that moved the head meanwhile costs
        one more try, and after :data:`OPTIMISTIC_TRIES` the head is locked instead."""
        await self._ready()
        if head.get("expected") is not None:
            sealed_head, sealed = seal_append(self.keyring, head, rows, head["expected"] + 1)
            return await self.inner.append(sealed_head, sealed)
        heads = q.session_heads(head["ns"], [head["sid"]], self.flavour)
        for _ in range(OPTIMISTIC_TRIES):
            found = await self.primary_inner.fetch(heads)
            if not found:
                return None  # no such session: the caller says so
            last = int(found[0]["last_seq"])
            sealed_head, sealed = seal_append(
                self.keyring, {**head, "expected": last}, rows, last + 1
            )
            first = await self.inner.append(sealed_head, sealed)
            if first is not None:
                return first

        async def locked() -> int | None:
            async with self.transaction() as tx:
                return await tx.append(head, rows)

        return await retrying(locked)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SealedTransaction]:
        await self._ready()
        async with self.inner.transaction() as tx:
            yield _Opening(tx, self)

    async def run_sync(self, fn: Any, *, exclusive: bool = False) -> Any:
        return await self.inner.run_sync(fn, exclusive=exclusive)

    async def close(self) -> None:
        await self.inner.close()


class _Opening(SealedTransaction):
    """A transaction that reloads the keyring for a key newer than its own."""

    def __init__(self, inner: Transaction, backend: SealedBackend) -> None:
        super().__init__(inner, backend.keyring, backend.opener, backend.flavour)
        self._backend = backend

    async def fetch(self, bound: q.Bound) -> list[Row]:
        sealed, seal = seal_params(self._keyring, bound, self._flavour)
        rows = await self._backend._opened(sealed, self._inner.fetch)
        if seal is not None:
            await self._inner.fetch(seal)
        return rows


# -- a store without keys -----------------------------------------------------------------


class PlainGuard:
    """Checks, on a store's first call, that its namespace is not encrypted.

    The backend stays the store's backend (``core.backend`` is still a
    ``PostgresBackend``, a ``ReplicaBackend``…): until the check has passed, its
    ``fetch``, ``execute``, ``append`` and ``transaction`` are shadowed on the instance by
    checking ones; once it has, the shadows are removed, and later calls cost nothing.
    """

    METHODS = ("fetch", "execute", "append", "transaction")

    def __init__(self, backend: Backend, namespace: str) -> None:
        self._backend = backend
        self._namespace = namespace
        # The methods as they were (the class's, or a wrapper's delegation), for the calls.
        self._fetch, self._execute = backend.fetch, backend.execute
        self._append, self._transaction = backend.append, backend.transaction
        for name in self.METHODS:
            setattr(backend, name, getattr(self, name))

    async def check(self) -> None:
        if self._backend.__dict__.get("fetch") is None:
            return  # a concurrent first call has checked
        # On the primary itself: the key table is read once, not as one of the reads a
        # replica router spreads.
        primary = getattr(self._backend, "primary", self._backend)
        check = primary.fetch if primary is not self._backend else self._unshadowed_fetch
        try:
            keys = await check(shapes.data_keys_of(self._namespace))
        except ConfigurationError:
            keys = []  # no key table (a schema older than encryption): not encrypted
        if keys:
            raise EncryptedNamespaceError(
                f"namespace {self._namespace!r} is encrypted; open the store with "
                "encryption=<a sessiondb.crypto.KeyProvider>"
            )
        for name in self.METHODS:
            self._backend.__dict__.pop(name, None)

    async def _unshadowed_fetch(self, bound: q.Bound) -> list[Row]:
        return await self._fetch(bound)

    async def fetch(self, bound: q.Bound, *, plain: bool = False) -> list[Row]:
        await self.check()
        return await self._fetch(bound, plain=plain)

    async def execute(self, bound: q.Bound) -> list[Row]:
        await self.check()
        return await self._execute(bound)

    async def append(self, head: Mapping[str, Any], rows: Sequence[tuple[Any, ...]]) -> int | None:
        await self.check()
        return await self._append(head, rows)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        await self.check()
        async with self._transaction() as tx:
            yield tx
