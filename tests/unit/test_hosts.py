"""Multi-host URLs: libpq's host list and SQLAlchemy's repeated ``host=`` become the same
host list for asyncpg, with ``target_session_attrs``; hostile URLs are refused with a
ConfigurationError that never shows the password."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb.backends.postgres import connect_kwargs
from sessiondb.config import ENV_URL, Settings, masked_url, normalize_url
from sessiondb.errors import ConfigurationError, SessionDBError
from sessiondb.hosts import (
    MAX_HOSTS,
    TARGET_SESSION_ATTRS,
    Host,
    describe,
    expand_host_list,
    url_hosts,
)

SECRET = "S3cr3t"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in (ENV_URL, "PGTARGETSESSIONATTRS", "PGHOST", "PGPORT"):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def kwargs_of(url: str) -> dict[str, object]:
    return connect_kwargs(Settings.from_env(url))


def where(url: str) -> tuple[object, object, object]:
    kw = kwargs_of(url)
    return kw.get("host"), kw.get("port"), kw.get("target_session_attrs")


def test_both_forms_give_the_same_hosts() -> None:
    libpq = f"postgresql://app:{SECRET}@db1:5432,db2:5433/app?target_session_attrs=primary"
    alchemy = (
        f"postgresql://app:{SECRET}@/app?host=db1:5432&host=db2:5433&target_session_attrs=primary"
    )
    for url in (libpq, alchemy):
        kw = kwargs_of(url)
        assert kw["host"] == ["db1", "db2"]
        assert kw["port"] == [5432, 5433]
        assert kw["target_session_attrs"] == "primary"
        assert kw["database"] == "app" and kw["user"] == "app" and kw["password"] == SECRET
    assert normalize_url(libpq) == normalize_url(alchemy)


def test_the_issue_urls() -> None:
    assert where("postgresql://app@db1:5432,db2:5432/app?target_session_attrs=read-write") == (
        ["db1", "db2"],
        [5432, 5432],
        "read-write",
    )
    # SQLAlchemy's form once went to db2:5432:5432.
    assert where("postgresql://app@/app?host=db1:5432&host=db2:5432") == (
        ["db1", "db2"],
        [5432, 5432],
        "read-write",
    )


@pytest.mark.parametrize("attrs", TARGET_SESSION_ATTRS)
def test_every_target_session_attrs_reaches_asyncpg(attrs: str) -> None:
    assert where(f"postgresql://app@h1,h2/app?target_session_attrs={attrs}")[2] == attrs
    assert where(f"postgresql://app@h1/app?target_session_attrs={attrs}")[2] == attrs


def test_several_hosts_ask_for_read_write_unless_told(clean_env: pytest.MonkeyPatch) -> None:
    assert where("postgresql://app@h1,h2/app")[2] == "read-write"
    assert where("postgresql://app@h1/app")[2] is None  # one host: asyncpg's default
    clean_env.setenv("PGTARGETSESSIONATTRS", "any")
    assert where("postgresql://app@h1,h2/app")[2] is None  # asyncpg reads the variable


def test_ports_default_per_host_and_from_port_lists() -> None:
    assert where("postgresql://app@h1,h2:6000/app")[:2] == (["h1", "h2"], [5432, 6000])
    assert where("postgresql://app@/app?host=h1,h2&port=7000,7001")[:2] == (
        ["h1", "h2"],
        [7000, 7001],
    )
    assert where("postgresql://app@/app?host=h1&host=h2&port=7000")[:2] == (
        ["h1", "h2"],
        [7000, 7000],
    )
    assert where("postgresql://app@[::1]:7,[fe80::2]/app")[:2] == (["::1", "fe80::2"], [7, 5432])
    assert where("postgresql://app@/app?host=%2Fvar%2Frun%2Fpostgresql&host=h2")[:2] == (
        ["/var/run/postgresql", "h2"],
        [5432, 5432],
    )
    # One host stays as before: a name and a port (or none).
    assert where("postgresql://app@db/app")[:2] == ("db", None)
    assert where("postgresql://app@/app?host=%2Ftmp&port=5433")[:2] == ("/tmp", 5433)


def test_a_password_with_separators_stays_whole() -> None:
    for password in ("p,w", "p/w", "p@w", "p:w,x@y/z"):
        kw = kwargs_of(f"postgresql://app:{password}@h1,h2:6000/app")
        assert kw["host"] == ["h1", "h2"], password
        assert kw["password"] == password


def test_the_password_never_shows_in_a_repr() -> None:
    for url in (
        f"postgresql://app:{SECRET}@h1,h2/app?target_session_attrs=read-write",
        f"postgresql://app:{SECRET}@/app?host=h1&host=h2",
        f"postgresql://app:p,{SECRET}@h1,h2/app",
    ):
        settings = Settings.from_env(url)
        assert SECRET not in repr(settings) and SECRET not in masked_url(settings.url)
        assert "h1" in repr(settings) and "h2" in repr(settings)


HOSTILE = [
    f"postgresql://app:{SECRET},h2/db",  # no "@": the password sits where a port goes
    f"postgresql://{SECRET}:{SECRET},,h2/db",
    f"postgresql://app:{SECRET}@h1,,h2/db",
    f"postgresql://app:{SECRET}@h1,/db",
    f"postgresql://app:{SECRET}@h1,h2:99999/db",
    f"postgresql://app:{SECRET}@h1,h2:0/db",
    f"postgresql://app:{SECRET}@h1,h2:x{SECRET}/db",
    f"postgresql://app:{SECRET}@h1,h!2/db",
    f"postgresql://app:{SECRET}@h1,[::1/db",
    f"postgresql://app:{SECRET}@h1,h2/db?host=h3",
    f"postgresql://app:{SECRET}@h1/db?host=h3",
    f"postgresql://app:{SECRET}@/db?host=a,b&port=1,2,3",
    f"postgresql://app:{SECRET}@/db?host=a&port={SECRET}",
    f"postgresql://app:{SECRET}@h1,h2/db?target_session_attrs=master",
    f"postgresql://app:{SECRET}@" + ",".join(f"h{i}" for i in range(MAX_HOSTS + 1)) + "/db",
    f"postgresql://app:{SECRET}@" + "," * 10_000 + "/db",
]


def chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


@pytest.mark.parametrize("url", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_url_is_refused_without_the_password(
    url: str, clean_env: pytest.MonkeyPatch
) -> None:
    for source in ("argument", "environment"):
        with pytest.raises(ConfigurationError) as info:
            if source == "argument":
                kwargs_of(url)
            else:
                clean_env.setenv(ENV_URL, url)
                connect_kwargs(Settings.from_env())
        for exc in chain(info.value):
            assert SECRET not in str(exc) and SECRET not in repr(exc), (source, exc)


def test_errors_name_what_was_wrong() -> None:
    cases = {
        "postgresql://app@h1,h2:99999/db": "the port of host 2 ('h2')",
        "postgresql://app@h1,,h2/db": "empty host",
        "postgresql://app@/db?host=a,b&port=1,2,3": "2 hosts and 3 ports",
        "postgresql://app@h1,h2/db?target_session_attrs=master": "read-write",
        "postgresql://app@h1,h2/db?host=h3": "use one form",
    }
    for url, words in cases.items():
        with pytest.raises(ConfigurationError, match=words.replace("(", r"\(").replace(")", r"\)")):
            kwargs_of(url)


def test_hosts_are_described_as_errors_name_them() -> None:
    assert describe([Host("db1", 5432), Host("::1", None), Host("", 7)]) == (
        "db1:5432, [::1]:5432, localhost:7"
    )
    url = normalize_url("postgresql://u@a:1,b:2/d")
    assert url_hosts(url) == [Host("a", 1), Host("b", 2)]


def test_other_urls_are_left_alone() -> None:
    for text in ("sqlite:///a@b,c/x.db", "postgresql://u@h/db,x", "postgresql://u@h/d?x=a,b"):
        assert expand_host_list(text) == text


@settings(max_examples=300, deadline=None)
@given(
    hosts=st.text(alphabet="ab1:,[]/%@?&=.-_ ", max_size=40),
    query=st.text(alphabet="hostpr=&,:1a?", max_size=30),
)
def test_any_host_list_is_taken_or_refused_typed_without_the_password(
    hosts: str, query: str
) -> None:
    url = f"postgresql://app:{SECRET}@{hosts}/db?{query}"
    try:
        kwargs_of(url)
    except SessionDBError as exc:
        assert isinstance(exc, ConfigurationError)
        for e in chain(exc):
            assert SECRET not in str(e) and SECRET not in repr(e)
