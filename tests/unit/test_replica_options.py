"""The read-replica options (replica_urls, max_replica_lag, read_consistency) and the
write log that decides which writes a replica read must check for."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiondb import ConfigurationError, SessionStore
from sessiondb.backends.replicas import WriteLog, lsn_value
from sessiondb.config import Settings

PRIMARY = "postgresql://app:pw@db1:5432/app"
SECRET = "S3cr3tPw"


def _settings(url: str = PRIMARY, **options: Any) -> Settings:
    return Settings.from_options(url, None, options)  # type: ignore[arg-type]


def test_replica_urls_become_postgres_urls() -> None:
    s = _settings(replica_urls=["postgresql://app:pw@db2/app", "postgres://app@db3:6432/app"])
    assert [u.host for u in s.replica_urls] == ["db2", "db3"]
    assert all(u.drivername == "postgresql+asyncpg" for u in s.replica_urls)
    assert s.read_consistency == "session"
    assert s.max_replica_lag == 10.0
    replica = s.for_replica(s.replica_urls[0])
    assert replica.url.host == "db2" and replica.replica_urls == ()


def test_sqlite_refuses_replicas(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="replica_urls needs a postgresql"):
        _settings(str(tmp_path / "x.db"), replica_urls=["postgresql://db2/app"])
    with pytest.raises(ConfigurationError, match="replica_urls needs a postgresql"):
        _settings(":memory:", replica_urls=["postgresql://db2/app"])


async def test_open_refuses_replicas_on_sqlite(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="SQLite has no replicas"):
        async with SessionStore.open(str(tmp_path / "x.db"), replica_urls=["postgresql://h/d"]):
            pass


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"replica_urls": "postgresql://db2/app"}, "must be a list"),
        ({"replica_urls": [3]}, r"replica_urls\[0\] must be a URL string"),
        ({"replica_urls": ["replica.sqlite3"]}, "is not a postgresql:// URL"),
        ({"replica_urls": ["sqlite:///x.db"]}, "is not a postgresql:// URL"),
        ({"replica_urls": ["mysql://h/d"]}, r"replica_urls\[0\]: unsupported database"),
        ({"replica_urls": ["postgresql://h" + ":x" * 3]}, r"replica_urls\[0\]"),
        ({"replica_urls": ["postgresql://h/d"] * 65}, "at most 64"),
        ({"max_replica_lag": 0}, "max_replica_lag must be a positive"),
        ({"max_replica_lag": float("nan")}, "max_replica_lag"),
        ({"max_replica_lag": True}, "max_replica_lag"),
        ({"max_replica_lag": "5"}, "max_replica_lag"),
        ({"read_consistency": "strong"}, "read_consistency must be one of session, eventual"),
        ({"read_consistency": None}, "read_consistency"),
        ({"replica_url": ["postgresql://h/d"]}, "unknown option"),
    ],
)
def test_bad_replica_options_are_named(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        _settings(**options)


async def test_a_replica_url_parameter_asyncpg_cannot_take_is_named() -> None:
    with pytest.raises(ConfigurationError, match=r"replica_urls\[1\]: unsupported .* foo") as got:
        await SessionStore.connect(
            PRIMARY, replica_urls=["postgresql://h/d", f"postgresql://u:{SECRET}@h/d?foo=1"]
        )
    assert SECRET not in str(got.value)


def test_passwords_of_replicas_are_never_shown() -> None:
    s = _settings(replica_urls=[f"postgresql://app:{SECRET}@db2/app"])
    assert SECRET not in repr(s)
    for bad in (
        f"postgresql://app:{SECRET}@db2:notaport/app",
        f"mysql://app:{SECRET}@db2/app",
        f"sqlite://app:{SECRET}@/x",
    ):
        with pytest.raises(ConfigurationError) as caught:
            _settings(replica_urls=["postgresql://ok/app", bad])
        assert SECRET not in str(caught.value)
        assert caught.value.__cause__ is None or SECRET not in str(caught.value.__cause__)


@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(
        st.none(),
        st.text(max_size=40),
        st.lists(
            st.one_of(
                st.text(max_size=60),
                st.builds(lambda t: f"postgresql://u:{SECRET}@{t}", st.text(max_size=30)),
                st.integers(),
                st.none(),
            ),
            max_size=4,
        ),
        st.integers(),
    ),
    lag=st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3)),
    consistency=st.one_of(st.sampled_from(["session", "eventual"]), st.text(max_size=10)),
)
def test_any_replica_options_give_settings_or_a_configuration_error(
    raw: Any, lag: Any, consistency: Any
) -> None:
    try:
        s = _settings(replica_urls=raw, max_replica_lag=lag, read_consistency=consistency)
    except ConfigurationError as exc:
        assert SECRET not in str(exc)
        return
    assert all(u.get_backend_name() == "postgresql" for u in s.replica_urls)
    assert SECRET not in repr(s)


def _mark(n: int) -> tuple[str, str]:
    return (str(1000 + n), f"0/{n * 16:X}")


def test_a_write_that_began_after_another_ended_covers_it() -> None:
    log = WriteLog()
    for n in range(5):
        log.record(log.begin(), _mark(n))
    assert log.since(0) == [_mark(4)]  # the last write's commit follows the others
    assert log.since(5) == []
    assert log.generation == 5


def test_overlapping_writes_are_all_checked() -> None:
    log = WriteLog()
    a, b = log.begin(), log.begin()  # two writes in flight together
    log.record(a, _mark(1))
    log.record(b, _mark(2))
    assert log.since(0) == [_mark(1), _mark(2)]
    assert log.since(1) == [_mark(2)]
    log.record(log.begin(), _mark(3))  # began after both ended
    assert log.since(0) == [_mark(3)]


def test_an_unknown_outcome_keeps_reads_on_the_primary_until_covered() -> None:
    log = WriteLog()
    log.record(log.begin(), _mark(1))
    log.record(log.begin(), None)
    assert log.since(0) is None
    assert log.since(2) == []
    log.record(log.begin(), _mark(3))
    assert log.since(0) == [_mark(3)]


def test_lsn_values_order_like_postgres() -> None:
    assert lsn_value("0/16B3748") < lsn_value("0/16B3750") < lsn_value("1/0")
    assert lsn_value("16/B374D848") == (0x16 << 32) | 0xB374D848
