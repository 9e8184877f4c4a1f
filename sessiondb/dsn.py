"""libpq keyword/value connection strings: ``host=db1 port=5432 dbname=app user=app
password='a b'``.

libpq and asyncpg both take this spelling, so sessiondb reads it as Postgres, the same
way: any database text without ``://`` that holds an ``=`` is a keyword string (libpq's
rule), never a SQLite file name (a SQLite file whose name holds ``=`` is written
``sqlite:///name``). It becomes the SQLAlchemy URL a ``postgresql://`` URL would be, so
that one path (:mod:`sessiondb.backends.pg_options`) opens every connection.

The syntax is libpq's: ``keyword = value`` pairs separated by whitespace; a value is
either unquoted (up to the next whitespace) or in single quotes (``'a b'``), and a
backslash takes the next character as it is (``\\'``, ``\\\\``). A keyword given twice
counts once, its last value, as in libpq.

Taken: ``host`` (a name, an address, a Unix-socket directory such as
``/var/run/postgresql``, or a comma-separated list of them), ``port`` (one port, or one
per host), ``dbname``, ``user``, ``password``, and the parameters a URL takes
(:data:`QUERY_KEYWORDS`). Any other keyword is refused by a
:class:`~sessiondb.errors.ConfigurationError` naming it when it is one of libpq's (and
saying where it stands otherwise): a keyword sessiondb does not honour (``passfile``,
``sslrootcert``, ``service``) is a setting the user expects to be in force.

No error quotes a value, nor an unknown keyword: a string typed wrongly can put a
password where a keyword belongs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ConfigurationError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

#: Keywords that become URL query parameters, as :mod:`sessiondb.backends.pg_options`
#: takes them from a URL.
QUERY_KEYWORDS = ("sslmode", "application_name", "connect_timeout", "target_session_attrs")
#: Every keyword taken.
KEYWORDS = ("host", "port", "dbname", "user", "password", *QUERY_KEYWORDS)
#: libpq's other keywords (PostgreSQL 16): named in an error, as not taken.
LIBPQ_KEYWORDS = frozenset(
    {
        "hostaddr", "passfile", "require_auth", "channel_binding", "client_encoding",
        "options", "fallback_application_name", "keepalives", "keepalives_idle",
        "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
        "gssencmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword",
        "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
        "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
        "gssdelegation", "service", "load_balance_hosts",
    }
)  # fmt: skip
#: Longer than this is not a connection string (libpq has no limit; a megabyte of
#: ``--db`` is a mistake).
MAX_LENGTH = 64 * 1024


def is_keyword_dsn(text: str) -> bool:
    """Whether ``text`` is a keyword/value connection string (libpq's test: it holds an
    ``=``), not a URL (``scheme://…``) nor a file path."""
    return "=" in text and "://" not in text


def parse(text: str) -> dict[str, str]:
    """The keyword/value pairs of ``text``, values unquoted; a keyword given twice keeps
    its last value.

    Raises:
        ConfigurationError: a pair without ``=``, an unterminated quote, an empty
            keyword; the message says which pair, never what it holds.
    """
    if len(text) > MAX_LENGTH:
        raise ConfigurationError(
            f"the connection string is {len(text)} characters long; at most {MAX_LENGTH}"
        )
    pairs: dict[str, str] = {}
    i, n, number = 0, len(text), 0
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return pairs
        number += 1
        start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        keyword = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if not keyword or i == n or text[i] != "=":
            raise ConfigurationError(
                f"the connection string's pair {number}{_which(keyword)} has no = after its keyword"
            )
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        if i < n and text[i] == "'":
            i += 1
            while True:
                if i == n:
                    raise ConfigurationError(
                        f"the connection string's value of {_named(keyword, number)} has no "
                        "closing quote"
                    )
                char = text[i]
                if char == "\\" and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                elif char == "'":
                    i += 1
                    break
                else:
                    value.append(char)
                    i += 1
        else:
            while i < n and not text[i].isspace():
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
        pairs[keyword] = "".join(value)


def _named(keyword: str, number: int) -> str:
    """A keyword as an error may name it: only one of libpq's (an unknown one may be a
    password typed without its keyword)."""
    return repr(keyword) if keyword in KEYWORDS or keyword in LIBPQ_KEYWORDS else f"pair {number}"


def _which(keyword: str) -> str:
    return f" ({keyword!r})" if keyword in KEYWORDS or keyword in LIBPQ_KEYWORDS else ""


def to_url(text: str) -> URL:
    """The ``postgresql+asyncpg`` URL that the connection string ``text`` names.

    Raises:
        ConfigurationError: a malformed string, a keyword sessiondb does not take, a
            malformed host or port list; the message quotes no value.
    """
    from sqlalchemy.engine import URL

    from .hosts import MAX_HOSTS, parse_port

    pairs = parse(text)
    for number, keyword in enumerate(pairs, start=1):
        if keyword in KEYWORDS:
            continue
        if keyword in LIBPQ_KEYWORDS:
            raise ConfigurationError(
                f"the connection string's keyword {keyword!r} is not one sessiondb takes "
                f"(it takes {', '.join(KEYWORDS)}); pass TLS files as ssl=SSLContext and "
                "other connection settings as connect_args"
            )
        raise ConfigurationError(
            f"the connection string's keyword {number} is not a libpq keyword (sessiondb "
            f"takes {', '.join(KEYWORDS)})"
        )
    database = pairs.get("dbname") or None
    if database is not None and ("=" in database or "://" in database):
        # libpq reads such a dbname as a second connection string; sessiondb does not.
        raise ConfigurationError(
            "the connection string's dbname holds another connection string; give its "
            "keywords directly"
        )
    query: dict[str, str] = {k: pairs[k] for k in QUERY_KEYWORDS if pairs.get(k)}
    host, port = pairs.get("host", ""), pairs.get("port", "")
    specs = host.split(",") if host else []
    if len(specs) > MAX_HOSTS:
        raise ConfigurationError(
            f"the connection string names {len(specs)} hosts; at most {MAX_HOSTS}"
        )
    if specs and not all(specs):
        raise ConfigurationError("the connection string's host list has an empty host")
    for each in port.split(",") if port else ():
        parse_port(each, "a port of the connection string")
    url_host: str | None = None
    url_port: int | None = None
    if len(specs) == 1 and not specs[0].startswith("/") and "," not in port:
        url_host = specs[0]  # one host by name or address: the URL's own
        url_port = int(port) if port else None
    else:
        if specs:  # hosts as host= parameters; an IPv6 address in brackets (hosts.py)
            query["host"] = ",".join(f"[{s}]" if ":" in s else s for s in specs)
        if port:
            query["port"] = port
    return URL.create(
        "postgresql+asyncpg",
        username=pairs.get("user") or None,
        password=pairs.get("password") or None,
        host=url_host,
        port=url_port,
        database=database,
        query=query,
    )
