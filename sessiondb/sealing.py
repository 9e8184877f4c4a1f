"""Encryption at rest at the row boundary: a backend that seals what a store writes and
opens what it reads, so that nothing above it (core, features, the decode path) changes.

:class:`SealedBackend` wraps the store's backend when the store has a key provider
(``SessionStore.open(url, encryption=provider)``):

- writes: a record's ``payload`` is sealed with its session id and seq as associated
  data (an append locks the session's head first, to know the seqs it will get); a
  session's ``name``, ``system_prompt_override`` and ``metadata_json`` with its id and the
  column's name. Every statement that writes them is known
  (:func:`statements.sealed_session_params`, the appends, the bulk inserts).
- reads: every row of a statement that selects one of those columns comes back with the
  plaintext in its place, found by the statement's column names; columns named
  ``sealed_*`` (the row's identity, selected for this only) are dropped.

:class:`Keyring` holds the namespace's data keys, unwrapped by the provider;
:func:`rotate` re-wraps them and, asked to, re-encrypts the rows. A store without a
provider gets :class:`PlainGuard`, which refuses an encrypted namespace on first use and
then steps aside.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from . import crypto, shapes
from .backends.base import Backend, IntegrityViolation, Row, Transaction, retrying
from .errors import (
    ConfigurationError,
    DecryptionError,
    EncryptedNamespaceError,
    EncryptionError,
    SessionDBError,
)
from .lazy import lazy_modules

if TYPE_CHECKING:  # imported when first used: SQLAlchemy's (start-up rule in sessiondb/cli.py)
    from sqlalchemy import Table

    from . import statements as q
    from . import tables
else:
    q, tables = lazy_modules("statements tables")

T = TypeVar("T")

# Seconds between re-reads of the key table: how soon a store sees a data key another
# process added (``rotate_keys(reencrypt=True)``) and seals with it.
KEYRING_REFRESH = 60.0
# Optimistic appends tried before one that locks the head (a busy session's writers).
OPTIMISTIC_TRIES = 3


class UnknownKeyVersion(Exception):
    """A value sealed by a data key version the keyring has not loaded (yet)."""


class Keyring:
    """One namespace's data keys, unwrapped, by version; the highest seals."""

    def __init__(self, provider: crypto.KeyProvider, namespace: str) -> None:
        if not isinstance(provider, crypto.KeyProvider):
            raise ConfigurationError(
                "encryption must be a sessiondb.crypto.KeyProvider (wrap, unwrap, "
                f"current_key_id), got {type(provider).__name__}"
            )
        self.provider = provider
        self.namespace = namespace
        self.ciphers: dict[int, Any] = {}
        self.current = 0
        self.keys: dict[int, bytes] = {}
        self.completed: dict[int, bool] = {}
        self.master_key_ids: dict[int, str] = {}
        self._wrapped: dict[int, str] = {}
        self._loaded_at: float | None = None

    async def ready(self, backend: Backend) -> None:
        """Load the keys on first use and once every :data:`KEYRING_REFRESH` seconds;
        make the namespace's first data key if it has none."""
        if self._loaded_at is not None and time.monotonic() - self._loaded_at < KEYRING_REFRESH:
            return
        await self.load(backend)
        if not self.ciphers:
            await self._create(backend)

    async def load(self, backend: Backend) -> None:
        rows = await backend.fetch(shapes.data_keys_of(self.namespace))
        for version, master_key_id, wrapped, completed_at in rows:
            if self._wrapped.get(version) != wrapped:
                key = await self.unwrap(version, master_key_id, wrapped)
                self.ciphers[version] = crypto.aes_gcm(key)
                self.keys[version] = key
                self._wrapped[version] = wrapped
            self.master_key_ids[version] = master_key_id
            self.completed[version] = completed_at is not None
        self.current = max(self.ciphers, default=0)
        self._loaded_at = time.monotonic()

    async def unwrap(self, version: int, master_key_id: str, wrapped: str) -> bytes:
        try:
            raw = base64.b64decode(wrapped, validate=True)
        except (binascii.Error, ValueError):
            raise DecryptionError(
                f"namespace {self.namespace!r}: data key {version} is not base64 (tampered?)"
            ) from None
        context = crypto.wrap_context(self.namespace, version)
        key = await _provider_call(
            self.provider.unwrap(master_key_id, raw, context),
            f"namespace {self.namespace!r}: unwrapping data key {version}",
        )
        if not isinstance(key, bytes) or len(key) != crypto.KEY_BYTES:
            raise DecryptionError(
                f"namespace {self.namespace!r}: the key provider gave data key {version} "
                "back with the wrong length"
            )
        return key

    async def wrap(self, version: int, key: bytes) -> tuple[str, str]:
        """``(master key id, wrapped text)`` of ``key`` under the provider's current key."""
        master = self.provider.current_key_id
        context = crypto.wrap_context(self.namespace, version)
        wrapped = await _provider_call(
            self.provider.wrap(master, key, context),
            f"namespace {self.namespace!r}: wrapping data key {version}",
        )
        return master, base64.b64encode(wrapped).decode("ascii")

    async def _create(self, backend: Backend) -> None:
        if await backend.fetch(q.any_session(self.namespace)):
            raise EncryptedNamespaceError(
                f"namespace {self.namespace!r} holds unencrypted sessions; encryption is "
                "set per namespace when it is empty: export the sessions and import them "
                "into a store opened with encryption="
            )
        await self.add_key(backend, 1, completed=True)

    def wrapped(self, version: int) -> str:
        return self._wrapped[version]

    async def add_key(self, backend: Backend, version: int, *, completed: bool = False) -> None:
        """Store a new data key of ``version`` (a racing store's key wins), then reload."""
        key = crypto.new_data_key()
        master, wrapped = await self.wrap(version, key)
        at = datetime.now(UTC)
        # Another store that made this version first wins: its key is used.
        with contextlib.suppress(IntegrityViolation):
            await backend.execute(
                q.insert_data_key(self.namespace, version, master, wrapped, at, completed)
            )
        await self.load(backend)

    def seal(self, text: str, context: bytes) -> str:
        return crypto.seal(self.ciphers[self.current], self.current, text, context)

    def open(self, text: str, context: bytes) -> str:
        version = crypto.envelope_version(text)
        if version is None:
            raise DecryptionError(
                "not sessiondb ciphertext (an unencrypted value in an encrypted namespace?)"
            )
        cipher = self.ciphers.get(version)
        if cipher is None:
            raise UnknownKeyVersion(version)
        return crypto.unseal(cipher, text, context)


async def _provider_call(call: Any, what: str) -> Any:
    """A key provider's coroutine; what it raises becomes an :class:`EncryptionError`."""
    try:
        return await call
    except SessionDBError:
        raise
    except Exception as exc:
        raise EncryptionError(f"{what}: the key provider failed: {exc!r}") from exc


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
    if payload is None and not session:
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
    )


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
            seq = int(values[shape.seq])
            raw = values[shape.payload]
            as_bytes = isinstance(raw, bytes | bytearray | memoryview)
            text = bytes(raw).decode("ascii", "replace") if as_bytes else raw
            plain = self._open(text, crypto.row_context(ns, sid, "payload", seq), sid, seq)
            values[shape.payload] = plain.encode("utf-8", "surrogatepass") if as_bytes else plain
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

    def open_text(self, text: str, context: bytes, sid: str, seq: int | None) -> str:
        """One sealed value's plaintext; a version the keyring lacks is a
        :class:`DecryptionError` here."""
        try:
            return self._open(text, context, sid, seq)
        except UnknownKeyVersion as exc:
            raise DecryptionError(
                f"session {sid}: sealed by data key {exc.args[0]}, which the namespace "
                "does not have"
            ) from None

    def _open(self, text: str, context: bytes, sid: str, seq: int | None) -> str:
        try:
            return self.keyring.open(text, context)
        except DecryptionError as exc:
            where = f"session {sid}" + ("" if seq is None else f" seq {seq}")
            raise DecryptionError(f"{where}: cannot decrypt: {exc}") from None


# -- writing ------------------------------------------------------------------------------


def seal_params(keyring: Keyring, bound: q.Bound) -> q.Bound:
    """The bound with the session columns it writes sealed (others unchanged)."""
    stmt, params = bound
    spec = q.sealed_session_params(shapes.statement_of(stmt))
    if spec is None:
        return bound
    id_param, columns = spec
    sid = params[id_param]
    sealed = dict(params)
    for param, column in columns.items():
        value = params.get(param)
        if value is not None:
            context = crypto.row_context(keyring.namespace, sid, column)
            sealed[param] = keyring.seal(value, context)
    return stmt, sealed


def seal_table_rows(
    keyring: Keyring, table: Table, rows: Sequence[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Rows of ``table`` (every column, in table order) with their sealed columns sealed."""
    ns = keyring.namespace
    if table is tables.records:
        sid_i, seq_i, pay_i = map(q.RECORD_COLUMN_NAMES.index, ("session_id", "seq", "payload"))
        out = []
        for r in rows:
            values = list(r)
            context = crypto.row_context(ns, values[sid_i], "payload", int(values[seq_i]))
            values[pay_i] = keyring.seal(values[pay_i], context)
            out.append(tuple(values))
        return out
    if table is tables.sessions:
        id_i = q.SESSION_COLUMN_NAMES.index("id")
        at = [(q.SESSION_COLUMN_NAMES.index(n), n) for n in q.SEALED_SESSION_COLUMNS]
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
    for i, r in enumerate(sealed):
        r[at] = keyring.seal(r[at], crypto.row_context(ns, sid, "payload", first + i))
    return sealed_head, [tuple(r) for r in sealed]


class SealedTransaction:
    """A transaction of :class:`SealedBackend`: seals what it writes, opens what it reads."""

    def __init__(self, inner: Transaction, keyring: Keyring, opener: Opener) -> None:
        self._inner = inner
        self._keyring = keyring
        self._opener = opener

    async def fetch(self, bound: q.Bound) -> list[Row]:
        bound = seal_params(self._keyring, bound)
        rows = await self._inner.fetch(bound)
        return self._opener.rows(bound, rows)

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

    async def _opened(self, bound: q.Bound, read: Callable[[], Any]) -> list[Row]:
        rows = await read()
        try:
            return self.opener.rows(bound, rows)
        except UnknownKeyVersion:
            await self.keyring.load(self.primary_inner)  # a key newer than ours
            try:
                return self.opener.rows(bound, rows)
            except UnknownKeyVersion as exc:
                raise DecryptionError(
                    f"namespace {self.keyring.namespace!r}: a value is sealed by data key "
                    f"{exc.args[0]}, which the namespace does not have"
                ) from None

    async def fetch(self, bound: q.Bound, *, plain: bool = False) -> list[Row]:
        await self._ready()
        return await self._opened(bound, lambda: self.inner.fetch(bound, plain=plain))

    async def execute(self, bound: q.Bound) -> list[Row]:
        await self._ready()
        sealed = seal_params(self.keyring, bound)
        return await self._opened(sealed, lambda: self.inner.execute(sealed))

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
        super().__init__(inner, backend.keyring, backend.opener)
        self._backend = backend

    async def fetch(self, bound: q.Bound) -> list[Row]:
        sealed = seal_params(self._keyring, bound)
        return await self._backend._opened(sealed, lambda: self._inner.fetch(sealed))


# -- rotation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RotationReport:
    """What :func:`rotate` did."""

    #: Data keys now wrapped by the provider's current master key that were not before.
    rewrapped: int
    #: The data key that seals new values.
    current_version: int
    #: The master key every data key of the namespace is wrapped by now.
    master_key_id: str
    #: Records and sessions moved to the current data key by this run.
    records_resealed: int = 0
    sessions_resealed: int = 0


async def rotate(backend: Backend, *, reencrypt: bool, batch: int = 500) -> RotationReport:
    """Re-wrap the namespace's data keys under the provider's current master key; with
    ``reencrypt``, also move every record and session to a new data key, ``batch`` rows
    per short transaction (appends go on meanwhile; new ones are sealed by the new key
    once their store has loaded it). An interrupted re-encryption resumes where the
    data key it was moving rows to is not yet complete, instead of making another."""
    if not isinstance(backend, SealedBackend):
        raise EncryptionError("rotating keys needs a store opened with encryption=")
    keyring, raw = backend.keyring, backend.primary_inner
    await keyring.ready(raw)
    await keyring.load(raw)
    rewrapped = 0
    target = keyring.provider.current_key_id
    for version in sorted(keyring.keys):
        if keyring.master_key_ids[version] == target:
            continue
        master, wrapped = await keyring.wrap(version, keyring.keys[version])
        done = await raw.execute(
            q.rewrap_data_key(keyring.namespace, version, master, wrapped, keyring.wrapped(version))
        )
        rewrapped += bool(done)
    await keyring.load(raw)
    report = RotationReport(rewrapped, keyring.current, target)
    if not reencrypt:
        return report
    if keyring.completed.get(keyring.current, True):
        await keyring.add_key(raw, keyring.current + 1)
    version = keyring.current
    records_done = await _reseal_records(backend, version, batch)
    sessions_done = await _reseal_sessions(backend, version, batch)
    await raw.execute(q.complete_data_key(keyring.namespace, version, datetime.now(UTC)))
    return RotationReport(
        rewrapped, version, target, records_resealed=records_done, sessions_resealed=sessions_done
    )


async def _reseal_records(backend: SealedBackend, version: int, batch: int) -> int:
    keyring, raw, ns = backend.keyring, backend.primary_inner, backend.keyring.namespace
    after: tuple[str, int] | None = None
    moved = 0
    while True:
        rows = await raw.fetch(q.namespace_records(ns, after=after, limit=batch))
        if not rows:
            return moved
        after = (rows[-1]["session_id"], int(rows[-1]["seq"]))
        changes = []
        for r in rows:
            old = r["payload"]
            if crypto.envelope_version(old) == version:
                continue
            sid, seq = r["session_id"], int(r["seq"])
            context = crypto.row_context(ns, sid, "payload", seq)
            plain = backend.opener.open_text(old, context, sid, seq)
            new = crypto.seal(keyring.ciphers[version], version, plain, context)
            changes.append(q.reseal_record(sid, seq, new, old))
        if changes:
            moved += await _apply(raw, changes)


async def _reseal_sessions(backend: SealedBackend, version: int, batch: int) -> int:
    keyring, raw, ns = backend.keyring, backend.primary_inner, backend.keyring.namespace
    after: str | None = None
    moved = 0
    while True:
        rows = await raw.fetch(q.session_texts(ns, after, batch))
        if not rows:
            return moved
        after = rows[-1]["id"]
        changes = []
        for r in rows:
            sid = r["id"]
            old = {n: r[n] for n in q.SEALED_SESSION_COLUMNS}
            new = dict(old)
            for column, text in old.items():
                if text is not None and crypto.envelope_version(text) != version:
                    context = crypto.row_context(ns, sid, column)
                    plain = backend.opener.open_text(text, context, sid, None)
                    new[column] = crypto.seal(keyring.ciphers[version], version, plain, context)
            if new != old:
                changes.append(q.reseal_session(sid, ns, new, old))
        if changes:
            moved += await _apply(raw, changes)


async def _apply(raw: Backend, changes: list[q.Bound]) -> int:
    """Run the compare-and-set updates in one short transaction; how many matched (a
    value changed meanwhile is left for the next run)."""

    async def once() -> int:
        done = 0
        async with raw.transaction() as tx:
            for bound in changes:
                done += bool(await tx.fetch(bound))
        return done

    return await retrying(once)


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
