"""Multi-host Postgres URLs: the servers a URL names, in the order they are tried.

Two spellings name several servers, and both become the second one:

- libpq's host list: ``postgresql://app@db1:5432,db2:5432/app``;
- SQLAlchemy's repeated ``host=``: ``postgresql://app@/app?host=db1:5432&host=db2:5432``
  (a ``host=`` value may itself be a comma-separated list, and ``port=`` one port or one
  per host, as libpq allows).

asyncpg tries the hosts in order and keeps the first whose role matches
``target_session_attrs`` (one of :data:`TARGET_SESSION_ATTRS`). With several hosts and no
``target_session_attrs`` (and no ``PGTARGETSESSIONATTRS``) sessiondb asks for
``read-write``: a store writes, and libpq's default, ``any``, could settle on a standby
where every write fails. Nothing here ever quotes the user information of a URL: an
error names a host spec, never a password.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigurationError, brief

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

#: The values asyncpg (and libpq) take for ``target_session_attrs``.
TARGET_SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")
#: What a URL naming several hosts asks for when it says nothing.
MULTI_HOST_DEFAULT = "read-write"
DEFAULT_PORT = 5432
#: More hosts than this in one URL is a mistake (or an attack on the parser).
MAX_HOSTS = 64

_SCHEME = re.compile(r"[A-Za-z][\w+.-]*://")
# One host of a list: a name or IPv4 address, a bracketed IPv6 address, or a Unix-socket
# directory (an absolute path, percent-encoded in a URL); each with an optional port.
_SPEC = re.compile(
    r"(?:(?P<name>[\w.%-]+)|\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<path>/[^\s,:]*))"
    r"(?::(?P<port>[^,]*))?"
)


@dataclass(frozen=True)
class Host:
    """One server a URL names: a host name, an IP address or a Unix-socket directory,
    and its port (``None``: the default, 5432 or ``PGPORT``)."""

    name: str
    port: int | None = None

    def __str__(self) -> str:
        name = f"[{self.name}]" if ":" in self.name else self.name
        return f"{name}:{self.port or DEFAULT_PORT}"


def expand_host_list(text: str) -> str:
    """A libpq multi-host URL (``scheme://user@h1:p1,h2:p2/db?…``) rewritten to
    SQLAlchemy's repeated ``host=`` form, which :func:`sqlalchemy.engine.make_url` parses;
    any other text unchanged.

    The user information runs to the last ``@`` before the query (a password may hold
    ``@``, ``/`` or ``,``; an ``@`` in it is percent-encoded), and the host list from there
    to the path.

    Raises:
        ConfigurationError: an empty host in the list, or a list beside ``host=``.
    """
    scheme = _SCHEME.match(text)
    if scheme is None or not scheme[0].lower().startswith("postgres"):
        return text
    rest = text[scheme.end() :]
    query_at = rest.find("?")
    if query_at < 0:
        query_at = len(rest)
    hosts_at = rest.rfind("@", 0, query_at) + 1
    path_at = rest.find("/", hosts_at, query_at)
    hosts_end = path_at if path_at >= 0 else query_at
    hostlist = rest[hosts_at:hosts_end]
    if "," not in hostlist:
        return text
    specs = hostlist.split(",")
    if not all(specs):
        # Not quoted: without an "@" the list may hold a password.
        raise ConfigurationError("the database URL's host list has an empty host")
    query = rest[query_at + 1 :]
    if any(p.split("=", 1)[0] == "host" for p in query.split("&")):
        raise ConfigurationError(
            "the URL names hosts both before its path and as host= parameters; use one form"
        )
    params = "&".join(f"host={spec}" for spec in specs)
    # An "@" left in the password would split it for SQLAlchemy's parser.
    userinfo = rest[: hosts_at - 1].replace("@", "%40") + "@" if hosts_at else ""
    return (
        scheme[0]
        + userinfo
        + rest[hosts_end:query_at]
        + "?"
        + params
        + (f"&{query}" if query else "")
    )


def url_hosts(url: URL) -> list[Host]:
    """The servers ``url`` names, in order (one, possibly ``Host("")`` for asyncpg's
    defaults, when it names none).

    Raises:
        ConfigurationError: a malformed host or port, a ``port=`` list that does not match
            the hosts, hosts both in the authority and in ``host=``, too many hosts.
    """
    raw = url.query.get("host")
    values: Sequence[str] = (raw,) if isinstance(raw, str) else tuple(raw or ())
    if values and url.host:
        raise ConfigurationError(
            "the URL names a host before its path and host= parameters too; use one form"
        )
    specs = [s for v in values for s in v.split(",")]
    if len(specs) > MAX_HOSTS:
        raise ConfigurationError(f"the URL names {len(specs)} hosts; at most {MAX_HOSTS}")
    ports = _port_list(url.query.get("port"), url.port)
    if not specs:
        return [Host(url.host or "", ports[0] if ports else None)]
    if len(ports) > 1 and len(ports) != len(specs):
        raise ConfigurationError(
            f"the URL names {len(specs)} hosts and {len(ports)} ports; give one port, "
            "or one per host"
        )
    hosts = []
    for i, spec in enumerate(specs):
        host = _host(spec, i + 1)
        if host.port is None and ports:
            host = Host(host.name, ports[i] if len(ports) > 1 else ports[0])
        hosts.append(host)
    return hosts


# A malformed host or port is not quoted: a URL typed without its "@" puts the password
# where a port belongs.
def _host(spec: str, number: int) -> Host:
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ConfigurationError(
            f"host {number} of the database URL is malformed (expected name[:port], "
            "[IPv6][:port] or a /socket/directory)"
        )
    name = match["name"] or match["v6"] or match["path"]
    port = match["port"]
    if port is None:
        return Host(name)
    return Host(name, parse_port(port, f"the port of host {number} ({brief(name)})"))


def parse_port(text: str, what: str) -> int:
    """``text`` as a port number; the error names ``what``, never the text."""
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigurationError(f"{what} in the database URL is not a port (1..65535)")
    return int(text)


def _port_list(raw: str | Sequence[str] | None, url_port: int | None) -> list[int]:
    if raw is None:
        return [url_port] if url_port else []
    values = [raw] if isinstance(raw, str) else list(raw)
    return [parse_port(p, "the port= parameter") for v in values for p in v.split(",")]


def describe(hosts: Sequence[Host]) -> str:
    """The hosts as an error names them: ``db1:5432, db2:5432``."""
    return ", ".join(str(h) if h.name else f"localhost:{h.port or DEFAULT_PORT}" for h in hosts)


def target_session_attrs(query: Mapping[str, str], hosts: Sequence[Host]) -> str | None:
    """The ``target_session_attrs`` to pass to asyncpg: the URL's (checked); else
    :data:`MULTI_HOST_DEFAULT` for several hosts, unless ``PGTARGETSESSIONATTRS`` is set
    (asyncpg reads it); else ``None`` (asyncpg's default).

    Raises:
        ConfigurationError: a value that is not one of :data:`TARGET_SESSION_ATTRS`.
    """
    value = query.get("target_session_attrs")
    if value is None:
        if len(hosts) > 1 and not os.environ.get("PGTARGETSESSIONATTRS"):
            return MULTI_HOST_DEFAULT
        return None
    if value not in TARGET_SESSION_ATTRS:
        raise ConfigurationError(
            f"target_session_attrs must be one of {', '.join(TARGET_SESSION_ATTRS)} "
            "(the value given is not quoted: it may hold a password)"
        )
    return value
