"""Settings: the database URL and the namespace, from arguments or ``SESSIONDB_*``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import ConfigurationError

ENV_URL = "SESSIONDB_URL"
ENV_NAMESPACE = "SESSIONDB_NAMESPACE"

DEFAULT_SQLITE_FILE = "sessiondb.sqlite3"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Settings:
    """Where the sessions live and whose they are. Validated when built."""

    url: URL
    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    @classmethod
    def from_env(cls, url: str | None = None, namespace: str | None = None) -> Settings:
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
            return cls(url=parsed, namespace=ns)
        except ConfigurationError as exc:
            if ns_var:
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
    return namespace


def normalize_url(raw: str | URL) -> URL:
    """Turn what a user types into an async SQLAlchemy URL.

    A plain path or ``:memory:`` means SQLite; ``sqlite://`` and ``postgresql://`` get
    their async drivers (aiosqlite, asyncpg).
    """
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            raise ConfigurationError("empty database URL")
        if text == ":memory:":
            return URL.create("sqlite+aiosqlite", database=":memory:")
        if "://" not in text:
            return URL.create("sqlite+aiosqlite", database=text)
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
            raise ConfigurationError(
                f"unsupported SQLite driver {driver!r}; use sqlite+aiosqlite://"
            )
        return url.set(drivername="sqlite+aiosqlite")
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
