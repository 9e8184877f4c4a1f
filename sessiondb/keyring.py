"""An encrypted namespace's data keys (:class:`Keyring`): unwrapped by the store's key
provider, loaded on first use and re-read once a minute; the highest version seals. A key
made before records bound their structure opens values bound to their place only, as
:attr:`Keyring.reads_unbound` allows (sessiondb.sealing says how they read).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import crypto, shapes
from .backends.base import Backend, IntegrityViolation
from .errors import (
    ConfigurationError,
    DecryptionError,
    EncryptedNamespaceError,
    EncryptionError,
    SessionDBError,
)
from .lazy import lazy_modules

if TYPE_CHECKING:  # imported when first used: SQLAlchemy's (start-up rule in sessiondb/cli.py)
    from . import statements as q
else:
    (q,) = lazy_modules("statements")

# Seconds between re-reads of the key table: how soon a store sees a data key another
# process added (``rotate_keys(reencrypt=True)``) and seals with it.
KEYRING_REFRESH = 60.0


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
        #: Whether each data key binds its values' structure (wrapped with the bound
        #: context: made by this release or later).
        self.bound: dict[int, bool] = {}
        self._wrapped: dict[int, str] = {}
        self._loaded_at: float | None = None

    async def ready(self, backend: Backend) -> None:
        """Load the keys on first use and once every :data:`KEYRING_REFRESH` seconds;
        make the namespace's first data key if it has none."""
        if self._loaded_at is not None and time.monotonic() - self._loaded_at < KEYRING_REFRESH:
            return
        if self._loaded_at is None:
            await self._check_schema(backend)
        await self.load(backend)
        if not self.ciphers:
            await self._create(backend)

    async def _check_schema(self, backend: Backend) -> None:
        """Refuse a schema without the lineage seals' table (before revision 0010): an
        encrypted store seals every session's lineage there. A plain store does not
        need it, so new code may run ahead of ``migrate``, but not with encryption."""
        try:
            await backend.fetch(q.lineage_seals_table(self.namespace))
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"namespace {self.namespace!r}: an encrypted store needs the schema of "
                "revision 0010 (sessiondb_lineage_seals), which this database has not "
                "reached; run `sessiondb migrate` or `await store.migrate()` first"
            ) from exc

    async def load(self, backend: Backend) -> None:
        rows = await backend.fetch(shapes.data_keys_of(self.namespace))
        for version, master_key_id, wrapped, completed_at in rows:
            if self._wrapped.get(version) != wrapped:
                key, self.bound[version] = await self.unwrap(version, master_key_id, wrapped)
                self.ciphers[version] = crypto.aes_gcm(key)
                self.keys[version] = key
                self._wrapped[version] = wrapped
            self.master_key_ids[version] = master_key_id
            self.completed[version] = completed_at is not None
        self.current = max(self.ciphers, default=0)
        self._loaded_at = time.monotonic()

    async def unwrap(self, version: int, master_key_id: str, wrapped: str) -> tuple[bytes, bool]:
        """The data key of ``version`` and whether it is a bound one (tried first; a key
        made before the structure binding opens with the other context)."""
        try:
            raw = base64.b64decode(wrapped, validate=True)
        except (binascii.Error, ValueError):
            raise DecryptionError(
                f"namespace {self.namespace!r}: data key {version} is not base64 (tampered?)"
            ) from None
        what = f"namespace {self.namespace!r}: unwrapping data key {version}"
        bound = True
        try:
            key = await _provider_call(
                self.provider.unwrap(
                    master_key_id, raw, crypto.wrap_context(self.namespace, version)
                ),
                what,
            )
        except DecryptionError:
            bound = False
            context = crypto.wrap_context(self.namespace, version, bound=False)
            key = await _provider_call(self.provider.unwrap(master_key_id, raw, context), what)
        if not isinstance(key, bytes) or len(key) != crypto.KEY_BYTES:
            raise DecryptionError(
                f"namespace {self.namespace!r}: the key provider gave data key {version} "
                "back with the wrong length"
            )
        return key, bound

    async def wrap(self, version: int, key: bytes) -> tuple[str, str]:
        """``(master key id, wrapped text)`` of ``key`` under the provider's current key."""
        master = self.provider.current_key_id
        context = crypto.wrap_context(self.namespace, version, self.bound.get(version, True))
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

    @property
    def reads_unbound(self) -> bool:
        """Whether a value bound to its place only (sealed before the structure binding)
        still reads: until the namespace has a completed bound data key, that is until
        ``rotate_keys(reencrypt=True)`` has moved every row to the binding."""
        return not any(self.bound[v] and self.completed.get(v) for v in self.bound)

    @property
    def reads_unsealed_sessions(self) -> bool:
        """Whether a session without a lineage seal reads: only in a namespace with no
        bound data key at all (every session this release writes has one)."""
        return not any(self.bound.values())

    def open(self, text: str, context: bytes, unbound: Callable[[], bytes] | None = None) -> str:
        """The plaintext of ``text`` sealed with ``context``; ``unbound``: the associated
        data the value had before the structure binding, tried for a value of an unbound
        data key (see :attr:`reads_unbound`)."""
        version = crypto.envelope_version(text)
        if version is None:
            raise DecryptionError(
                "not sessiondb ciphertext (an unencrypted value in an encrypted namespace?)"
            )
        cipher = self.ciphers.get(version)
        if cipher is None:
            raise UnknownKeyVersion(version)
        try:
            return crypto.unseal(cipher, text, context)
        except DecryptionError:
            if unbound is None or self.bound.get(version, True):
                raise
            plain = crypto.unseal(cipher, text, unbound())  # raises as the first did
            if self.reads_unbound:
                return plain
            raise DecryptionError(
                f"sealed by data key {version} before records bound their structure, in a "
                "namespace whose rows have all moved to the binding (a replayed value?); "
                "run rotate_keys(reencrypt=True) to completion"
            ) from None


async def _provider_call(call: Any, what: str) -> Any:
    """A key provider's coroutine; what it raises becomes an :class:`EncryptionError`."""
    try:
        return await call
    except SessionDBError:
        raise
    except Exception as exc:
        raise EncryptionError(f"{what}: the key provider failed: {exc!r}") from exc
