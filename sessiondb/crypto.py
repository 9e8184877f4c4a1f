"""Encryption at rest: master-key providers and the ciphertext envelope.

Envelope encryption: each namespace has its own 256-bit data key, which seals the
namespace's stored texts with AES-256-GCM; the data key is stored wrapped (encrypted)
by a master key that only the :class:`KeyProvider` holds. Rotating the master key
re-wraps the data keys (a few rows); re-encrypting moves the rows to a new data key.

A sealed value is text (the columns are TEXT)::

    sdb1:<data key version>:<base64(nonce[12] | ciphertext | tag[16])>

``sdb1`` is the format's version. The associated data binds the ciphertext to its place
(:func:`row_context`): the namespace, the session id, the column and, for a record, its
seq; a ciphertext copied into another row, session or namespace fails authentication.

A record's associated data also holds the columns that decide what the session's context
is (:func:`record_context`: kind, role, ``target_seq``, ``first_kept_seq``; a prune's seqs
are in its sealed payload), and each session has a lineage seal (a row of
``tables.lineage_seals``) whose associated data is its parent and fork point
(:func:`lineage_context`): a changed column
fails authentication like a changed ciphertext. Data keys made before this binding (their
wrap context is :data:`UNBOUND_KEY_CONTEXT`'s) may hold values bound to their place only;
``sessiondb.sealing`` says how those read.

``cryptography`` is imported on first use (``pip install 'sessiondb[crypto]'``);
``import sessiondb`` never imports it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .env import ENV_MASTER_KEYS
from .errors import DecryptionError, KeyConfigurationError, MissingDependencyError

#: The envelope's format version, its first field.
ENVELOPE_VERSION = "sdb1"
KEY_BYTES = 32
NONCE_BYTES = 12
_KEY_ID = re.compile(r"[A-Za-z0-9._:/@+-]{1,200}")
# A key file is a few lines; anything bigger is not one.
MAX_KEY_FILE_BYTES = 1 << 20


def aes_gcm(key: bytes) -> Any:
    """An AES-GCM cipher for ``key`` (``cryptography``'s ``AESGCM``).

    Raises:
        MissingDependencyError: ``cryptography`` is not installed (``sessiondb[crypto]``).
    """
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise MissingDependencyError("cryptography", "crypto") from exc
    return AESGCM(key)


def invalid_tag() -> type[Exception]:
    """The exception AES-GCM raises for a ciphertext that fails authentication."""
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def new_data_key() -> bytes:
    """A fresh random 256-bit key."""
    return secrets.token_bytes(KEY_BYTES)


#: The wrap context's tag of a data key whose values bind their structure (made by this
#: release or later), and of one made before (whose values may be bound to their place
#: only). The tag is authenticated with the key: SQL cannot turn one into the other.
BOUND_KEY_CONTEXT = "sessiondb-dek/2"
UNBOUND_KEY_CONTEXT = "sessiondb-dek/1"


def wrap_context(namespace: str, version: int, bound: bool = True) -> bytes:
    """The associated data of a wrapped data key: which namespace's, which version, and
    whether its values bind their structure (``bound``)."""
    tag = BOUND_KEY_CONTEXT if bound else UNBOUND_KEY_CONTEXT
    return f"{tag}|{len(namespace)}:{namespace}|{version}".encode("utf-8", "surrogatepass")


def row_context(namespace: str, session_id: str, column: str, seq: int | None = None) -> bytes:
    """The associated data of a sealed value: where it is stored."""
    where = f"{len(namespace)}:{namespace}|{session_id}|{column}"
    if seq is not None:
        where += f"|{seq}"
    return where.encode("utf-8", "surrogatepass")


def _field(value: object) -> str:
    """One field of an associated data, unambiguous (length-prefixed; ``-`` for NULL)."""
    if value is None:
        return "-"
    text = str(value)
    return f"{len(text)}:{text}"


def record_context(
    namespace: str,
    session_id: str,
    seq: int,
    kind: str,
    role: str | None,
    target_seq: int | None,
    first_kept_seq: int | None,
) -> bytes:
    """The associated data of a record's payload: its place and the columns that decide
    what the context is (a changed ``kind``, ``role``, ``target_seq`` or
    ``first_kept_seq`` fails authentication)."""
    structure = "|".join(
        _field(v)
        for v in (
            kind,
            role,
            None if target_seq is None else int(target_seq),
            None if first_kept_seq is None else int(first_kept_seq),
        )
    )
    return (
        row_context(namespace, session_id, "payload", seq)
        + b"|"
        + structure.encode("utf-8", "surrogatepass")
    )


def lineage_context(
    namespace: str, session_id: str, parent_id: str | None, fork_seq: int | None
) -> bytes:
    """The associated data of a session's lineage seal (an empty plaintext): its
    parent and fork point (``None`` for a session that is no fork)."""
    fork = None if fork_seq is None else int(fork_seq)
    where = f"|{_field(parent_id)}|{_field(fork)}"
    return row_context(namespace, session_id, "lineage") + where.encode("utf-8", "surrogatepass")


def seal(cipher: Any, version: int, plaintext: str, context: bytes) -> str:
    """``plaintext`` sealed by the data key ``cipher`` (of ``version``) as envelope text.
    Any string, lone surrogates and NUL included, round-trips."""
    nonce = os.urandom(NONCE_BYTES)
    sealed = cipher.encrypt(nonce, plaintext.encode("utf-8", "surrogatepass"), context)
    return f"{ENVELOPE_VERSION}:{version}:{base64.b64encode(nonce + sealed).decode('ascii')}"


def envelope_version(text: str) -> int | None:
    """The data key version of an envelope, ``None`` when ``text`` is not one."""
    head, sep, rest = text.partition(":")
    if head != ENVELOPE_VERSION or not sep:
        return None
    version, sep, _ = rest.partition(":")
    if not sep or not version.isdigit() or len(version) > 9:
        return None
    return int(version)


def unseal(cipher: Any, text: str, context: bytes) -> str:
    """The plaintext of an envelope (its version already matched to ``cipher``).

    Raises:
        DecryptionError: the text is not an envelope, or fails authentication.
    """
    _, _, rest = text.partition(":")
    _, _, body = rest.partition(":")
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise DecryptionError("not sessiondb ciphertext (bad base64)") from None
    if len(raw) < NONCE_BYTES + 16:
        raise DecryptionError("not sessiondb ciphertext (too short)")
    try:
        plain = cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context)
    except invalid_tag():
        raise DecryptionError(
            "authentication failed: the ciphertext was altered, moved from another row, "
            "or sealed by another key"
        ) from None
    return bytes(plain).decode("utf-8", "surrogatepass")


@runtime_checkable
class KeyProvider(Protocol):
    """Holds the master keys that wrap the namespaces' data keys.

    A KMS plugs in here: ``current_key_id`` names the KMS key new data keys are wrapped
    by, ``wrap`` is the KMS's encrypt (or ``GenerateDataKey``'s wrapping) with
    ``context`` as its encryption context / associated data, ``unwrap`` its decrypt.
    sessiondb calls them when a store first needs a namespace's keys, once a minute to
    pick up new data keys, and on rotation; never per row. Errors should be
    :class:`~sessiondb.errors.EncryptionError` subclasses; anything else is wrapped in
    one.
    """

    @property
    def current_key_id(self) -> str:
        """The master key that wraps new data keys and that rotation re-wraps under."""
        ...

    async def wrap(self, key_id: str, data_key: bytes, context: bytes) -> bytes:
        """``data_key`` encrypted by the master key ``key_id``, bound to ``context``."""
        ...

    async def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """The data key that :meth:`wrap` wrapped with ``key_id`` and ``context``.

        Raises:
            KeyConfigurationError: the provider has no master key ``key_id``.
            DecryptionError: ``wrapped`` or ``context`` is not what ``wrap`` was given.
        """
        ...


class StaticKeyProvider:
    """Master keys held in memory: 32-byte keys by id, and the id of the current one.

    Build it from bytes, from an environment variable (:meth:`from_env`) or a file
    (:meth:`from_file`). Keep an old key in ``keys`` until ``rotate_keys`` has re-wrapped
    every data key under the current one; then it can go.

    Raises:
        KeyConfigurationError: no keys, a key that is not 32 bytes, a bad id, or
            ``current`` not among them.
    """

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise KeyConfigurationError("StaticKeyProvider needs at least one master key")
        checked: dict[str, bytes] = {}
        for key_id, key in keys.items():
            _check_key_id(key_id)
            if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
                size = len(key) if isinstance(key, bytes | bytearray) else type(key).__name__
                raise KeyConfigurationError(
                    f"master key {key_id!r} must be {KEY_BYTES} bytes, got {size}"
                )
            checked[key_id] = bytes(key)
        if not isinstance(current, str) or current not in checked:
            raise KeyConfigurationError(
                f"the current master key {current!r} is not among the keys given"
            )
        self._keys = checked
        self._current = current
        self._ciphers: dict[str, Any] = {}

    @classmethod
    def from_text(cls, text: str, current: str | None = None) -> StaticKeyProvider:
        """Keys written ``id:base64key[,id:base64key…]``; the first is current unless
        ``current`` names another."""
        if not isinstance(text, str) or not text.strip():
            raise KeyConfigurationError("no master keys given")
        keys: dict[str, bytes] = {}
        for n, item in enumerate(text.split(",")):
            key_id, sep, encoded = item.strip().partition(":")
            if not sep:
                raise KeyConfigurationError(
                    f"master key {n + 1}: expected id:base64key, got no ':'"
                )
            _check_key_id(key_id)
            if key_id in keys:
                raise KeyConfigurationError(f"master key {key_id!r} is given twice")
            keys[key_id] = _decode_key(key_id, encoded)
        return cls(keys, current if current is not None else next(iter(keys)))

    @classmethod
    def from_env(cls, name: str = ENV_MASTER_KEYS, current: str | None = None) -> StaticKeyProvider:
        """Keys from the environment variable ``name`` (default ``SESSIONDB_MASTER_KEYS``),
        written as for :meth:`from_text`."""
        value = os.environ.get(name)
        if not value:
            raise KeyConfigurationError(f"the environment variable {name} is not set")
        try:
            return cls.from_text(value, current)
        except KeyConfigurationError as exc:
            raise KeyConfigurationError(f"{name}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> StaticKeyProvider:
        """Keys from a JSON file ``{"current": "k2", "keys": {"k2": "<base64>", …}}``."""
        where = Path(path)
        try:
            with where.open("rb") as f:
                raw = f.read(MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise KeyConfigurationError(f"{where}: cannot read the key file: {exc}") from None
        if len(raw) > MAX_KEY_FILE_BYTES:
            raise KeyConfigurationError(f"{where}: not a key file (over 1 MiB)")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise KeyConfigurationError(f"{where}: not JSON") from None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("keys"), dict)
            or not isinstance(data.get("current"), str)
        ):
            raise KeyConfigurationError(
                f'{where}: expected {{"current": "<id>", "keys": {{"<id>": "<base64>"}}}}'
            )
        try:
            keys = {}
            for key_id, encoded in data["keys"].items():
                _check_key_id(key_id)
                if not isinstance(encoded, str):
                    raise KeyConfigurationError(f"master key {key_id!r} must be base64 text")
                keys[key_id] = _decode_key(key_id, encoded)
            return cls(keys, data["current"])
        except KeyConfigurationError as exc:
            raise KeyConfigurationError(f"{where}: {exc}") from None

    @property
    def current_key_id(self) -> str:
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the master keys held."""
        return tuple(self._keys)

    def _cipher(self, key_id: str) -> Any:
        if key_id not in self._keys:
            raise KeyConfigurationError(
                f"no master key {key_id!r} (this provider has {', '.join(map(repr, self._keys))})"
            )
        if key_id not in self._ciphers:
            self._ciphers[key_id] = aes_gcm(self._keys[key_id])
        return self._ciphers[key_id]

    async def wrap(self, key_id: str, data_key: bytes, context: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + bytes(self._cipher(key_id).encrypt(nonce, data_key, context))

    async def unwrap(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        cipher = self._cipher(key_id)
        try:
            return bytes(cipher.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], context))
        except (invalid_tag(), ValueError):
            raise DecryptionError(
                f"master key {key_id!r} does not open this data key (a wrong key under the "
                "right id, or a tampered key row)"
            ) from None

    def __repr__(self) -> str:
        return f"StaticKeyProvider(current={self._current!r}, keys={list(self._keys)!r})"


def _check_key_id(key_id: object) -> None:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise KeyConfigurationError(
            f"a master key id must be 1-200 characters of A-Z a-z 0-9 . _ : / @ + -, "
            f"got {str(key_id)[:40]!r}"
        )


def _decode_key(key_id: str, encoded: str) -> bytes:
    try:
        key = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyConfigurationError(f"master key {key_id!r} is not base64") from None
    if len(key) != KEY_BYTES:
        raise KeyConfigurationError(
            f"master key {key_id!r} must be {KEY_BYTES} bytes, got {len(key)}"
        )
    return key
