"""libpq keyword strings (sessiondb.dsn): read as libpq reads them, turned into the
URL a ``postgresql://`` spelling gives, and refused typed, quoting no value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiondb import dsn
from sessiondb.backends.pg_options import connect_kwargs
from sessiondb.config import Settings, normalize_url
from sessiondb.errors import ConfigurationError


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("host=h dbname=d", {"host": "h", "dbname": "d"}),
        ("  host = h\tdbname= d  ", {"host": "h", "dbname": "d"}),
        ("password='a b'", {"password": "a b"}),
        (r"password='it\'s \\ ok'", {"password": "it's \\ ok"}),
        (r"password=a\ b\'c", {"password": "a b'c"}),
        ("password=''", {"password": ""}),
        ("host=a host=b", {"host": "b"}),  # the last one counts, as in libpq
        ("host= port=5", {"host": "port=5"}),  # libpq: the value starts after blanks
        ("password=p=q@r:s/t%u", {"password": "p=q@r:s/t%u"}),
    ],
)
def test_pairs_are_read_as_libpq_reads_them(text: str, pairs: dict[str, str]) -> None:
    assert dsn.parse(text) == pairs


def test_a_keyword_string_becomes_the_url_a_postgres_url_would_be() -> None:
    url = normalize_url("host=db1 port=6432 dbname=app user=me password='p w@x' sslmode=require")
    assert url.drivername == "postgresql+asyncpg"
    assert (url.host, url.port, url.database, url.username, url.password) == (
        "db1",
        6432,
        "app",
        "me",
        "p w@x",
    )
    assert dict(url.query) == {"sslmode": "require"}
    same = normalize_url("postgresql://me:p%20w%40x@db1:6432/app?sslmode=require")
    assert connect_kwargs(Settings(url=url)) == connect_kwargs(Settings(url=same))


def test_host_lists_and_sockets_reach_asyncpg_as_a_url_gives_them() -> None:
    kwargs = connect_kwargs(
        Settings(url=normalize_url("host=/var/run/postgresql,db2,::1 port=5432,5433,5434"))
    )
    assert kwargs["host"] == ["/var/run/postgresql", "db2", "::1"]
    assert kwargs["port"] == [5432, 5433, 5434]
    assert kwargs["target_session_attrs"] == "read-write"  # several hosts: a writer
    one = connect_kwargs(Settings(url=normalize_url("host=/tmp dbname=d")))
    assert (one["host"], one["database"]) == ("/tmp", "d")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("host=h p4ssw0rd", "pair 2 has no = after its keyword"),
        ("host=h password='p4ssw0rd", "value of 'password' has no closing quote"),
        ("host=h service=p4ssw0rd", "keyword 'service' is not one sessiondb takes"),
        ("host=h p4ssw0rd=1", "keyword 2 is not a libpq keyword"),
        ("=p4ssw0rd", "pair 1 has no = after its keyword"),
        ("host=h,,k password=p4ssw0rd", "host list has an empty host"),
        ("port=p4ssw0rd", "is not a port"),
        ("dbname='user=u password=p4ssw0rd'", "dbname holds another connection string"),
        ("host=h password=p4ssw0rd " + "x=1 " * 20_000, "characters long; at most"),
    ],
)
def test_a_malformed_string_is_refused_without_its_values(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        normalize_url(text)
    assert message in str(info.value)
    assert "p4ssw0rd" not in str(info.value)


keywords = st.sampled_from(dsn.KEYWORDS)
values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@given(st.dictionaries(keywords, values, max_size=6), st.sampled_from([" ", "  ", "\t", "\n"]))
def test_any_quoted_values_read_back_whole(pairs: dict[str, str], gap: str) -> None:
    text = gap.join(f"{k}={_quoted(v)}" for k, v in pairs.items())
    assert dsn.parse(text) == pairs


@given(st.text(max_size=80))
def test_any_text_is_a_url_or_a_typed_refusal(text: str) -> None:
    if not dsn.is_keyword_dsn(text):
        return
    try:
        url = normalize_url(text)
    except ConfigurationError:
        return
    assert url.drivername == "postgresql+asyncpg"
