"""Settings: the database URL and the namespace, from arguments or ``SESSIONDB_*``."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import ConfigurationError

ENV_URL = "SESSIONDB_URL"
ENV_NAMESPACE = "SESSIONDB_NAMESPACE"

DEFAULT_SQLITE_FILE = "sessiondb.sqlite3"
DEFAULT_NAMESPACE = "default"


DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_POOL_MAX_SIZE = 10
# The largest record a store takes, as UTF-8 bytes of its stored JSON: room for a message
# with a few base64 images; a 300 MiB message took 20 s to refuse at the database.
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
# Both databases refuse a value of 1 GB or more.
MAX_RECORD_BYTES_CEILING = 1_000_000_000


@dataclass(frozen=True)
class ConnectOptions:
    """How every connection to a server is opened: the same for the pool and for
    migrations. Postgres uses all of them; SQLite has no server and ignores them.

    Attributes:
        connect_timeout: seconds to connect (and finish the start-up handshake).
        pool_min_size, pool_max_size: connections the store keeps open at least and at
            most; the store never opens more than ``pool_max_size`` at once, plus one
            while it migrates.
        server_settings: run-time parameters for every connection (``application_name``
            defaults to ``sessiondb``).
        ssl: what asyncpg's ``ssl`` takes (an ``ssl.SSLContext``, ``True``, or a libpq
            mode such as ``"require"``); ``sslmode`` in the URL does the same.
        connect_args: further keyword arguments for ``asyncpg.connect``.
    """

    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    pool_min_size: int = 0
    pool_max_size: int = DEFAULT_POOL_MAX_SIZE
    server_settings: Mapping[str, str] = field(default_factory=dict)
    ssl: Any = None
    connect_args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        timeout = self.connect_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigurationError(
                f"connect_timeout must be a positive number of seconds, got {timeout!r}"
            )
        for name in ("pool_min_size", "pool_max_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
                raise ConfigurationError(f"{name} must be an int in 0..10000, got {value!r}")
        if self.pool_max_size < 1 or self.pool_min_size > self.pool_max_size:
            raise ConfigurationError(
                f"need 1 <= pool_max_size and pool_min_size <= pool_max_size, got "
                f"{self.pool_min_size} and {self.pool_max_size}"
            )
        for name in ("server_settings", "connect_args"):
            value = getattr(self, name)
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise ConfigurationError(f"{name} must be a dict with string keys, got {value!r}")


@dataclass(frozen=True)
class Settings:
    """Where the sessions live and whose they are. Validated when built."""

    url: URL
    namespace: str = DEFAULT_NAMESPACE
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    #: The largest record the store writes, in UTF-8 bytes of its stored JSON.
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        limit = self.max_record_bytes
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_RECORD_BYTES_CEILING
        ):
            raise ConfigurationError(
                f"max_record_bytes must be an int in 1..{MAX_RECORD_BYTES_CEILING}, got {limit!r}"
            )

    @classmethod
    def from_env(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        connect: ConnectOptions | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> Settings:
        """Arguments first, then ``SESSIONDB_URL`` / ``SESSIONDB_NAMESPACE``, then defaults."""
        # An explicit argument is used as given, even "": an empty namespace must not
        # silently become the default tenant. An empty variable counts as unset.
        url_var = ENV_URL if url is None and os.environ.get(ENV_URL) else None
        raw_url = url if url is not None else os.environ.get(ENV_URL) or DEFAULT_SQLITE_FILE
        ns_var = ENV_NAMESPACE if namespace is None and os.environ.get(ENV_NAMESPACE) else None
        ns = namespace
        if ns is None:
            ns = os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
        try:
            parsed = normalize_url(raw_url)
        except ConfigurationError as exc:
            if url_var:
                raise ConfigurationError(f"{url_var}: {exc}") from exc
            raise
        try:
            return cls(
                url=parsed,
                namespace=ns,
                connect=connect or ConnectOptions(),
                max_record_bytes=max_record_bytes,
            )
        except ConfigurationError as exc:
            if ns_var and str(exc).startswith("namespace"):
                raise ConfigurationError(f"{ns_var}: {exc}") from exc
            raise

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @property
    def is_memory(self) -> bool:
        return self.is_sqlite and self.url.database in (None, "", ":memory:")


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not namespace or len(namespace) > 255:
        raise ConfigurationError(
            f"namespace must be a non-empty string of at most 255 characters, got {namespace!r}"
        )
    if "\x00" in namespace:
        raise ConfigurationError("namespace must not contain NUL characters")
    try:
        namespace.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"namespace must not contain lone surrogates, got {namespace!r}"
        ) from None
    return namespace


def normalize_url(raw: str | URL) -> URL:
    """Turn what a user types into a SQLAlchemy URL naming the database.

    A plain path or ``:memory:`` means SQLite (``sqlite://``: sessiondb uses the standard
    library's sqlite3, whatever driver the URL names); ``postgresql://`` becomes
    ``postgresql+asyncpg://``.
    """
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            raise ConfigurationError("empty database URL")
        if text == ":memory:":
            return URL.create("sqlite", database=":memory:")
        if "://" not in text:
            return URL.create("sqlite", database=text)
        try:
            url = make_url(text)
        except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
            raise ConfigurationError(f"cannot parse database URL {text!r}") from exc
    else:
        url = raw
    if url.drivername.partition("+")[0] == "postgres":  # the spelling Heroku and libpq allow
        url = url.set(drivername="postgresql" + url.drivername[len("postgres") :])
    backend = url.get_backend_name()
    driver = url.drivername.partition("+")[2]  # empty when the URL names no driver
    if backend == "sqlite":
        if driver not in ("", "pysqlite", "aiosqlite"):
            raise ConfigurationError(f"unsupported SQLite driver {driver!r}; use sqlite://")
        return url.set(drivername="sqlite")
    if backend == "postgresql":
        if driver not in ("", "psycopg", "psycopg2", "asyncpg"):
            raise ConfigurationError(
                f"unsupported Postgres driver {driver!r}; use postgresql+asyncpg://"
            )
        return url.set(drivername="postgresql+asyncpg")
    raise ConfigurationError(
        f"unsupported database {backend!r} in URL {url.render_as_string(hide_password=True)!r}; "
        "sessiondb supports postgresql:// and sqlite:// (or a file path)"
    )
