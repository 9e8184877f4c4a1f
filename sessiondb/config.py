"""Settings: the database URL and the namespace, from arguments or ``SESSIONDB_*``."""

from __future__ import annotations

import math
import os
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypedDict

from . import dsn
from .env import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
from .env import DEFAULT_SQLITE_FILE as DEFAULT_SQLITE_FILE
from .env import ENV_MASTER_KEYS as ENV_MASTER_KEYS
from .env import ENV_MASTER_KEYS_FILE as ENV_MASTER_KEYS_FILE
from .env import ENV_NAMESPACE as ENV_NAMESPACE
from .env import ENV_URL as ENV_URL
from .errors import ConfigurationError
from .hosts import expand_host_list

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# SQLAlchemy is imported where a URL is built, not here: importing it costs ~0.2 s
# (sessiondb/cli.py). The SESSIONDB_* names are sessiondb.env's (the CLI's help reads
# them there), and importable from here too.


DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_POOL_MAX_SIZE = 10
# The largest record a store takes, as UTF-8 bytes of its stored JSON: room for a message
# with a few base64 images; a 300 MiB message took 20 s to refuse at the database.
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
# Both databases refuse a value of 1 GB or more.
MAX_RECORD_BYTES_CEILING = 1_000_000_000

# Read replicas: a replica whose replay lags the primary by more than this many seconds
# is skipped until it catches up.
DEFAULT_MAX_REPLICA_LAG = 10.0
# How reads through replicas see the store's own writes: "session" (a read after a write
# of this store object sees that write) or "eventual" (whatever the replica has).
READ_CONSISTENCIES = ("session", "eventual")
MAX_REPLICAS = 64

# Options whose values are never shown (in a repr, an error or the CLI): a key of
# ``connect_args`` or ``server_settings``, or a URL query parameter, is secret when its
# lower-cased name contains one of these. "pass" covers password, passfile, sslpassword
# and passphrase; "key" and "cert" cover sslkey, sslcert and api keys.
SECRET_KEY_PARTS = ("pass", "secret", "token", "key", "cert", "cred", "auth")
MASK = "***"


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
            defaults to ``sessiondb``, ``jit`` to ``off``).
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
        # The values are never shown: connect_args carries passwords.
        for name in ("server_settings", "connect_args"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise ConfigurationError(f"{name} must be a dict, got {type(value).__name__}")
            for key in value:
                if not isinstance(key, str):
                    raise ConfigurationError(
                        f"{name} keys must be strings, got a key of type {type(key).__name__}"
                    )
        for key, value in self.server_settings.items():
            if not isinstance(value, str):
                raise ConfigurationError(
                    f"server_settings[{key!r}] must be a string, got {type(value).__name__}"
                )

    def __repr__(self) -> str:
        return (
            f"ConnectOptions(connect_timeout={self.connect_timeout!r}, "
            f"pool_min_size={self.pool_min_size!r}, pool_max_size={self.pool_max_size!r}, "
            f"server_settings={masked_options(self.server_settings)}, "
            f"ssl={_shown_value(self.ssl)}, connect_args={masked_options(self.connect_args)})"
        )


class StoreOptions(TypedDict, total=False):
    """The keyword options of :meth:`SessionStore.open` and :meth:`SessionStore.connect`.

    Attributes:
        connect_timeout, pool_min_size, pool_max_size, server_settings, ssl, connect_args:
            how connections to Postgres are opened (see
            :class:`sessiondb.config.ConnectOptions`); SQLite ignores them.
        max_record_bytes: the largest record the store writes, in UTF-8 bytes of
            its stored JSON (default 64 MiB); a bigger one is refused with an
            :class:`InvalidInputError` and nothing is written.
        replica_urls: ``postgresql://`` URLs of hot standbys of ``url``: reads outside
            a transaction (``context``, ``records``, ``get_session``,
            ``list_sessions``, …) go to them, in turn; a read after this store's own
            write goes to a replica only if the replica has that write (see
            :mod:`sessiondb.backends.replicas`). Writes, turns and transactions stay
            on the primary. Postgres only.
        max_replica_lag: seconds of replay lag past which a replica is skipped
            (default 10).
        read_consistency: ``"session"`` (default: reads see this store object's own
            earlier writes; other processes' writes are ordered by the database, not
            by the store) or ``"eventual"`` (a replica answers unchecked).
        feed: how the change feed learns of commits (:data:`FEED_MODES`).
        search_config: the Postgres text search configuration of the search index
            (default ``simple``: any language).
    """

    connect_timeout: float
    pool_min_size: int
    pool_max_size: int
    server_settings: Mapping[str, str] | None
    ssl: Any
    connect_args: Mapping[str, Any] | None
    max_record_bytes: int
    replica_urls: Sequence[str] | None
    max_replica_lag: float
    read_consistency: str
    feed: str
    search_config: str


# A regconfig name: an identifier, optionally schema-qualified, at most 63 bytes each.
_REGCONFIG = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")

#: How a Postgres store's change feed learns of commits: ``auto`` LISTENs and falls back
#: to polling when notifications do not arrive (PgBouncer in transaction mode);
#: ``listen`` and ``poll`` say which. SQLite always polls.
FEED_MODES = ("auto", "listen", "poll")


@dataclass(frozen=True)
class _SQLiteFile:
    """A SQLite database named by a plain path, ``:memory:`` or ``sqlite:///path``,
    whose SQLAlchemy URL is not built yet."""

    database: str


class _URLField:
    """:attr:`Settings.url`: a SQLAlchemy ``URL`` whenever it is read, but a SQLite
    file's is built on the first read. Importing SQLAlchemy costs ~0.2 s, more than the
    whole of a short command on SQLite (``sessiondb sessions list``), which reads the
    file from :attr:`Settings.sqlite_database` and never needs the URL."""

    def __get__(self, obj: Settings | None, owner: type | None = None) -> URL:
        if obj is None:
            raise AttributeError("url")  # to dataclasses: the field has no default
        value = obj.__dict__["_url"]
        if isinstance(value, _SQLiteFile):
            from sqlalchemy.engine import URL

            value = URL.create("sqlite", database=value.database)
            obj.__dict__["_url"] = value
        return typing.cast("URL", value)

    def __set__(self, obj: Settings, value: URL | _SQLiteFile) -> None:
        obj.__dict__["_url"] = value  # only __init__ sets it (the dataclass is frozen)


@dataclass(frozen=True)
class Settings:
    """Where the sessions live and whose they are. Validated when built."""

    url: URL = _URLField()  # type: ignore[assignment]  # a descriptor, not a default
    namespace: str = DEFAULT_NAMESPACE
    connect: ConnectOptions = field(default_factory=ConnectOptions)
    #: The largest record the store writes, in UTF-8 bytes of its stored JSON.
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    #: Hot standbys of the Postgres primary that reads go to (Postgres only).
    replica_urls: tuple[URL, ...] = ()
    #: Seconds of replay lag past which a replica is skipped.
    max_replica_lag: float = DEFAULT_MAX_REPLICA_LAG
    #: "session": a read sees this store's own earlier writes; "eventual": it may not.
    read_consistency: str = "session"
    #: One of :data:`FEED_MODES`.
    feed: str = "auto"
    #: The Postgres text search configuration (a ``regconfig``) of the search index:
    #: ``simple`` (every word as it is, lower-cased) unless a language's stemming is
    #: wanted (``english``). One per database: the index holds what the writer made.
    search_config: str = "simple"

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        check_replica_options(self)
        if self.feed not in FEED_MODES:
            raise ConfigurationError(
                f"feed must be one of {', '.join(FEED_MODES)}, got {self.feed!r}"
            )
        if not isinstance(self.search_config, str) or not _REGCONFIG.fullmatch(self.search_config):
            raise ConfigurationError(
                "search_config must name a Postgres text search configuration "
                f"(letters, digits, _; optionally schema.name), got {self.search_config!r}"
            )
        limit = self.max_record_bytes
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_RECORD_BYTES_CEILING
        ):
            raise ConfigurationError(
                f"max_record_bytes must be an int in 1..{MAX_RECORD_BYTES_CEILING}, got {limit!r}"
            )

    def __repr__(self) -> str:
        return (
            f"Settings(url={masked_url(self.url)!r}, namespace={self.namespace!r}, "
            f"connect={self.connect!r}, max_record_bytes={self.max_record_bytes!r}, "
            f"replica_urls={[masked_url(u) for u in self.replica_urls]!r}, "
            f"max_replica_lag={self.max_replica_lag!r}, "
            f"read_consistency={self.read_consistency!r}, feed={self.feed!r}, "
            f"search_config={self.search_config!r})"
        )

    def for_replica(self, url: URL) -> Settings:
        """The settings of one replica's connections: its URL, the same options."""
        return replace(self, url=url, replica_urls=())

    @classmethod
    def from_env(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        connect: ConnectOptions | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> Settings:
        """Arguments first, then ``SESSIONDB_URL`` / ``SESSIONDB_NAMESPACE``, then defaults."""
        return cls._resolved(
            url,
            namespace,
            connect=connect or ConnectOptions(),
            max_record_bytes=max_record_bytes,
        )

    @classmethod
    def _resolved(cls, url: str | None, namespace: str | None, **options: Any) -> Settings:
        # An explicit argument is used as given, even "": an empty namespace must not
        # silently become the default tenant. An empty variable counts as unset.
        url_var = ENV_URL if url is None and os.environ.get(ENV_URL) else None
        raw_url = url if url is not None else os.environ.get(ENV_URL) or DEFAULT_SQLITE_FILE
        ns_var = ENV_NAMESPACE if namespace is None and os.environ.get(ENV_NAMESPACE) else None
        ns = namespace
        if ns is None:
            ns = os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
        try:
            parsed = _sqlite_file(raw_url) or normalize_url(raw_url)
        except ConfigurationError as exc:
            if url_var:
                raise ConfigurationError(f"{url_var}: {exc}") from exc
            raise
        try:
            return cls(url=parsed, namespace=ns, **options)  # type: ignore[arg-type]
        except ConfigurationError as exc:
            if ns_var and str(exc).startswith("namespace"):
                raise ConfigurationError(f"{ns_var}: {exc}") from exc
            raise

    @classmethod
    def from_options(
        cls, url: str | None, namespace: str | None, options: StoreOptions
    ) -> Settings:
        """:meth:`from_env` with the keyword options of :meth:`SessionStore.open`."""
        unknown = sorted(set(options) - set(StoreOptions.__annotations__))
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(unknown)}; the store takes "
                f"{', '.join(StoreOptions.__annotations__)}"
            )
        # The type, never the value: connect_args carries passwords.
        for name in ("server_settings", "connect_args"):
            value = options.get(name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigurationError(f"{name} must be a dict, got {type(value).__name__}")
        # Options not given keep ConnectOptions' and Settings' own defaults.
        passed: dict[str, Any] = dict(options)
        given = {
            k: passed[k]
            for k in ("connect_timeout", "pool_min_size", "pool_max_size", "ssl")
            if k in passed
        }
        connect = ConnectOptions(
            **given,
            server_settings=dict(options.get("server_settings") or {}),
            connect_args=dict(options.get("connect_args") or {}),
        )
        # The URL and the namespace are checked first, as from_env checks them.
        url_first = cls.from_env(url, namespace, connect, DEFAULT_MAX_RECORD_BYTES)
        replicas = parse_replica_urls(options.get("replica_urls"))
        return cls(
            url=url_first.__dict__["_url"],
            namespace=url_first.namespace,
            connect=connect,
            max_record_bytes=passed.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES),
            replica_urls=replicas,
            max_replica_lag=passed.get("max_replica_lag", DEFAULT_MAX_REPLICA_LAG),
            read_consistency=passed.get("read_consistency", "session"),
            feed=passed.get("feed", "auto"),
            search_config=passed.get("search_config", "simple"),
        )

    @property
    def is_sqlite(self) -> bool:
        return self.sqlite_database is not None

    @property
    def is_memory(self) -> bool:
        return self.sqlite_database in ("", ":memory:")

    @property
    def sqlite_database(self) -> str | None:
        """The SQLite database's file as the URL names it (``""`` or ``":memory:"``: in
        memory); None on Postgres. Read without building :attr:`url`."""
        value = self.__dict__["_url"]
        if isinstance(value, _SQLiteFile):
            return value.database
        if value.get_backend_name() != "sqlite":
            return None
        return value.database or ""


def parse_replica_urls(raw: object) -> tuple[URL, ...]:
    """The ``replica_urls`` option as Postgres URLs; errors show no password."""
    if raw is None:
        return ()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise ConfigurationError(
            f"replica_urls must be a list of postgresql:// URLs, got {type(raw).__name__}"
        )
    if len(raw) > MAX_REPLICAS:
        raise ConfigurationError(f"replica_urls takes at most {MAX_REPLICAS} URLs, got {len(raw)}")
    from sqlalchemy.engine import URL

    urls = []
    for i, item in enumerate(raw):
        if not isinstance(item, str | URL):
            raise ConfigurationError(
                f"replica_urls[{i}] must be a URL string, got {type(item).__name__}"
            )
        if isinstance(item, str) and "://" not in item and not dsn.is_keyword_dsn(item):
            raise ConfigurationError(
                f"replica_urls[{i}] {masked_url(item)!r} is not a postgresql:// URL "
                "or a keyword connection string"
            )
        try:
            url = normalize_url(item)
        except ConfigurationError as exc:
            raise ConfigurationError(f"replica_urls[{i}]: {exc}") from None
        if url.get_backend_name() != "postgresql":
            raise ConfigurationError(
                f"replica_urls[{i}] {masked_url(url)!r} is not a postgresql:// URL"
            )
        urls.append(url)
    return tuple(urls)


def check_replica_options(settings: Settings) -> None:
    """Refuse replica options that cannot work, naming the option."""
    lag = settings.max_replica_lag
    if (
        isinstance(lag, bool)
        or not isinstance(lag, int | float)
        or not math.isfinite(lag)
        or lag <= 0
    ):
        raise ConfigurationError(
            f"max_replica_lag must be a positive number of seconds, got {lag!r}"
        )
    if settings.read_consistency not in READ_CONSISTENCIES:
        raise ConfigurationError(
            f"read_consistency must be one of {', '.join(READ_CONSISTENCIES)}, "
            f"got {_shown_value(settings.read_consistency)}"
        )
    if settings.replica_urls and settings.is_sqlite:
        raise ConfigurationError(
            "replica_urls needs a postgresql:// primary; SQLite has no replicas"
        )


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


def _sqlite_file(raw: str | URL) -> _SQLiteFile | None:
    """A SQLite database named without anything SQLAlchemy's parser would change (a
    plain path, ``:memory:``, ``sqlite:///path`` with no query or ``%`` escape), so
    that its URL can be built when first read; None for any other URL."""
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if text.startswith("sqlite:///"):
        database = text[len("sqlite:///") :]
        return None if "?" in database or "%" in database else _SQLiteFile(database)
    if not text or "://" in text or dsn.is_keyword_dsn(text):
        return None
    return _SQLiteFile(text)


def normalize_url(raw: str | URL) -> URL:
    """Turn what a user types into a SQLAlchemy URL naming the database.

    A plain path or ``:memory:`` means SQLite (``sqlite://``: sessiondb uses the standard
    library's sqlite3, whatever driver the URL names); ``postgresql://`` becomes
    ``postgresql+asyncpg://``, and so does a libpq keyword string (``host=… dbname=…``:
    any text without ``://`` that holds an ``=``, see :mod:`sessiondb.dsn`), which is
    never a file name.
    """
    from sqlalchemy.engine import URL

    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            raise ConfigurationError("empty database URL")
        if text == ":memory:":
            return URL.create("sqlite", database=":memory:")
        if dsn.is_keyword_dsn(text):
            return dsn.to_url(text)
        if "://" not in text:
            return URL.create("sqlite", database=text)
        url = _parse_url(text)
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
        f"unsupported database {backend!r} in URL {masked_url(url)!r}; "
        "sessiondb supports postgresql:// and sqlite:// (or a file path)"
    )


def _parse_url(text: str) -> URL:
    # The parser's own errors quote the whole URL, password and all: neither its message
    # nor the exception itself (as a cause) may reach the caller.
    # libpq's host list (h1:p1,h2:p2) becomes SQLAlchemy's repeated host= (sessiondb.hosts).
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(expand_host_list(text))
    except ArgumentError:
        problem = "not of the form scheme://user:password@host:port/database"
    except ValueError:  # int() of the port
        problem = "a malformed host or port"
    raise ConfigurationError(f"cannot parse database URL {masked_url(text)!r}: {problem}")


# ``scheme://user:PASSWORD@``: the password runs to the last "@" of the line (an
# unencoded "@" in a password is common, and SQLAlchemy's parser then splits it), so
# that a URL that does not parse is masked too. A user name has no ":" or "/".
_USERINFO = re.compile(r"://[^:/?#\s]*+:")
# ``password=S3cr3t`` in a query string or a libpq DSN (``password%3DS3cr3t`` where a
# URL's path percent-encoded it), and ``'password': 'S3cr3t'``;
# whether the name is secret is decided after the match. Possessive quantifiers and a
# name that starts a token keep the scan linear: a 10 kB error message took 7 s with
# backtracking.
_PAIR = re.compile(
    r"(?<![\w.-])(?P<name>[\w.-]++)(?P<eq>\s*+(?:=|%3[Dd])\s*+)"
    r"(?:'[^']*+'|\"[^\"]*+\"|[^\s&;,'\")]*+)"
    r"|(?P<quote>['\"])(?P<qname>[\w.-]++)(?P=quote)(?P<colon>\s*+:\s*+)"
    r"(?:'[^']*+'|\"[^\"]*+\"|[^,}\s]*+)"
)


def redact(text: str) -> str:
    """``text`` with the passwords of URLs in it and the values of secret-named
    parameters (``password=…``, see :data:`SECRET_KEY_PARTS`) replaced by ``***``;
    for a URL that may not parse, or an error message that may quote one."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        last_at = line.rfind("@")
        userinfo = _USERINFO.search(line, 0, last_at) if last_at > 0 else None
        if userinfo is not None:  # everything up to the last "@" may be the password
            lines[i] = line[: userinfo.end()] + MASK + line[last_at:]
    return _PAIR.sub(_mask_pair, "\n".join(lines))


def _mask_pair(match: re.Match[str]) -> str:
    if match["name"] is not None:
        return match["name"] + match["eq"] + MASK if is_secret_key(match["name"]) else match[0]
    if is_secret_key(match["qname"]):
        return match["quote"] + match["qname"] + match["quote"] + match["colon"] + MASK
    return match[0]


def masked_url(url: URL | str) -> str:
    """A URL as it may be shown: its password and secret parameters masked."""
    if not isinstance(url, str):  # a URL; its class is not imported for this test
        url = url.render_as_string(hide_password=True)
    return redact(url)


def password_forms(raw: str) -> set[str]:
    """The password of the database URL or keyword string ``raw`` as it may appear in a
    message: as given, decoded, and percent-encoded (``%40``, and ``+`` for a space);
    empty when ``raw`` names none or cannot be read."""
    from urllib.parse import quote, quote_plus

    try:
        url = normalize_url(raw)
    except (ConfigurationError, ValueError):
        return set()
    password = url.password
    if not password:
        return set()
    return {password, quote(password, safe=""), quote_plus(password, safe=""), quote(password)}


def is_secret_key(key: object) -> bool:
    """Whether an option named ``key`` holds a secret (see :data:`SECRET_KEY_PARTS`)."""
    return isinstance(key, str) and any(part in key.lower() for part in SECRET_KEY_PARTS)


def masked_options(options: Mapping[str, Any]) -> str:
    """``connect_args`` or ``server_settings`` as a repr that shows no secret."""
    items = (
        f"{key!r}: {MASK if is_secret_key(key) else _shown_value(value)}"
        for key, value in options.items()
    )
    return "{" + ", ".join(items) + "}"


def _shown_value(value: object) -> str:
    """A plain value's repr (strings redacted); only the type of anything else, whose
    repr may hold a key or a password (an SSL context, a password callable)."""
    if isinstance(value, str):
        return repr(redact(value))
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return f"<{type(value).__name__}>"
