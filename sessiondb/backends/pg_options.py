"""What a Postgres connection is opened with: the store's URL and options turned into
``asyncpg.connect`` keyword arguments, checked before any connection is tried."""

from __future__ import annotations

import inspect
import ssl as ssl_module
from collections.abc import Mapping
from typing import Any

from ..config import Settings
from ..errors import ConfigurationError
from ..hosts import DEFAULT_PORT, Host, describe, target_session_attrs, url_hosts

_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# URL query parameters taken, and what they become for asyncpg.connect.
_QUERY_KEYS = (
    "prepared_statement_cache_size",
    "statement_cache_size",
    "sslmode",
    "ssl",
    "application_name",
    "connect_timeout",
    "command_timeout",
    "target_session_attrs",
    "host",
    "port",
)


#: Server settings every connection asks for unless the store's options say otherwise.
DEFAULT_SETTINGS = {"jit": "off"}


class Connector:
    """``asyncpg.connect`` for every connection of a store (pooled, the migration's, the
    feed's). PgBouncer takes only a few startup parameters (unless its
    ``ignore_startup_parameters`` names others) and refuses the connection otherwise:
    when a server refuses a setting of :data:`DEFAULT_SETTINGS` that the caller did not
    ask for, the connection is made again without those, and so are the later ones."""

    def __init__(self, asyncpg: Any, settings: Settings) -> None:
        self._asyncpg = asyncpg
        asked = settings.connect.server_settings
        self._optional = frozenset(k for k in DEFAULT_SETTINGS if k not in asked)
        self._plain = False  # a server refused them: leave them out from now on

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._plain:
            return await self._asyncpg.connect(*args, **self._without(kwargs))
        try:
            return await self._asyncpg.connect(*args, **kwargs)
        except self._asyncpg.ProtocolViolationError as exc:
            # "unsupported startup parameter: jit"
            if not any(f"parameter: {name}" in str(exc) for name in self._optional):
                raise
            self._plain = True
        return await self._asyncpg.connect(*args, **self._without(kwargs))

    def _without(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        settings = kwargs.get("server_settings") or {}
        kept = {k: v for k, v in settings.items() if k not in self._optional}
        return {**kwargs, "server_settings": kept}


def connect_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of ``asyncpg.connect`` for the store's URL and options.

    Raises:
        ConfigurationError: a URL parameter asyncpg cannot take, or a bad value.
    """
    url = settings.url
    opts = settings.connect
    query = {k: (v[-1] if isinstance(v, tuple) else v) for k, v in url.query.items()}
    unknown = sorted(set(query) - set(_QUERY_KEYS))
    if unknown:
        raise ConfigurationError(
            f"unsupported database URL parameter(s) {', '.join(unknown)}; sessiondb takes "
            f"{', '.join(_QUERY_KEYS)} (pass anything else as connect_args)"
        )
    # JIT off unless asked for: the planner's row estimate for a rare search word is a
    # share of the table, so past 1M records a search's cost passed jit_above_cost and
    # each one compiled its expressions first (25 ms of a 26 ms search finding 12
    # records; 0.27 ms without). sessiondb's statements are short index lookups. A
    # server that refuses the parameter (PgBouncer) is connected to without it
    # (:class:`Connector`).
    server_settings = {"application_name": "sessiondb", **DEFAULT_SETTINGS}
    server_settings.update(opts.server_settings)
    if "application_name" in query:
        server_settings["application_name"] = query["application_name"]
    hosts = url_hosts(url)
    kwargs: dict[str, Any] = {
        "user": url.username,
        "password": url.password,
        "database": url.database,
        "timeout": _float_param(query, "connect_timeout", opts.connect_timeout),
        "server_settings": server_settings,
    }
    cache = query.get("prepared_statement_cache_size", query.get("statement_cache_size"))
    if cache is not None:
        kwargs["statement_cache_size"] = _int_param(query, "", None, raw=cache)
    if "command_timeout" in query:
        kwargs["command_timeout"] = _float_param(query, "command_timeout", None)
    if len(hosts) == 1:
        kwargs["host"], kwargs["port"] = hosts[0].name or None, hosts[0].port
    else:  # asyncpg's own multi-host connect: tried in order, by target_session_attrs
        kwargs["host"] = [h.name for h in hosts]
        kwargs["port"] = [h.port or DEFAULT_PORT for h in hosts]
    kwargs["target_session_attrs"] = target_session_attrs(query, hosts)
    ssl: Any = opts.ssl
    mode = query.get("sslmode", query.get("ssl"))
    if mode is not None:
        if mode.lower() in ("true", "1"):
            mode = "require"
        elif mode.lower() in ("false", "0"):
            mode = "disable"
        if mode not in _SSL_MODES:
            raise ConfigurationError(f"sslmode must be one of {', '.join(_SSL_MODES)}")
        ssl = ssl if isinstance(ssl, ssl_module.SSLContext) else mode
    if ssl is not None:
        kwargs["ssl"] = ssl
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    kwargs.update(opts.connect_args)
    return kwargs


def check_connect_args(asyncpg: Any, connect_args: Mapping[str, Any]) -> None:
    """A ``connect_args`` key that ``asyncpg.connect`` does not take is a
    ConfigurationError naming the key now, not a TypeError at the first query."""
    taken = inspect.signature(asyncpg.connect).parameters
    for key in connect_args:
        if key not in taken or key == "loop":
            raise ConfigurationError(
                f"connect_args key {key!r} is not an argument of asyncpg.connect"
            )
    settings = connect_args.get("server_settings")
    if settings is not None and (
        not isinstance(settings, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in settings.items())
    ):
        raise ConfigurationError("connect_args['server_settings'] must be a dict of strings")


# A refused value is not quoted: in a keyword string typed with an empty value
# (``sslmode= password=…``) the next pair is the value, password and all (libpq's syntax).
def _int_param(query: Mapping[str, str], name: str, default: int | None, raw: Any = None) -> Any:
    value = raw if raw is not None else query.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"URL parameter {name or 'cache size'} is not an integer"
        ) from None
    if number < 0:
        raise ConfigurationError(f"URL parameter {name or 'cache size'} is negative")
    return number


def _float_param(query: Mapping[str, str], name: str, default: float | None) -> float | None:
    value = query.get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ConfigurationError(f"URL parameter {name} is not a number") from None
    if not number > 0:
        raise ConfigurationError(f"URL parameter {name} must be positive")
    return number


def servers_of(kwargs: Mapping[str, Any]) -> str:
    """The servers a connection tries, as errors name them (never the password)."""
    host, port = kwargs.get("host"), kwargs.get("port")
    names = list(host) if isinstance(host, list | tuple) else [host or ""]
    ports = list(port) if isinstance(port, list | tuple) else [port] * len(names)
    return describe([Host(str(n), p) for n, p in zip(names, ports, strict=False)])
