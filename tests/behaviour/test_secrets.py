"""No password is ever printed: every error the URL and option validation can raise,
with a secret in the URL's password and in ``connect_args``, reached through
``Settings``, ``SessionStore.connect``/``open``, ``SESSIONDB_URL`` and the CLI, and the
reprs of a store and its settings."""

from __future__ import annotations

import io
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sessiondb import SessionStore
from sessiondb.cli import main
from sessiondb.config import (
    ENV_NAMESPACE,
    ENV_URL,
    ConnectOptions,
    Settings,
    masked_url,
    normalize_url,
    redact,
)
from sessiondb.errors import ConfigurationError, SessionDBError

SECRET = "S3cr3t"
PG = f"postgresql://app:{SECRET}@db.internal:5432/app"

# URLs that do not parse or name an unsupported database or driver (refused by
# Settings, which names SESSIONDB_URL when the URL came from it), and URLs with a
# parameter the Postgres backend refuses; every one holds the secret.
UNUSABLE_URLS = [
    f"postgresql://app:{SECRET}@db.internal:5432x/app",  # the issue's example
    f"postgresql://app:{SECRET}@[::1/app",
    f"pg sql://app:{SECRET}@h/app",
    f"://app:{SECRET}@h/app",
    f"postgresql://app:{SECRET}@x@db.internal:5432x/app",  # "@" in the password
    f"postgresql://app:p@{SECRET}@db.internal:5432x/app",
    f"postgresql://app:{SECRET}:x@db.internal:port/app",
    f"mysql://app:{SECRET}@h/app",
    f"mysql://app:{SECRET}@x@h/app",
    f"mysql://h/app?password={SECRET}",
    f"mongodb://h/app?sslpassword={SECRET}&x=1",
    f"sqlite+pysqlcipher://app:{SECRET}@/x.db",
    f"postgresql+pg8000://app:{SECRET}@h/app",
]
BAD_PARAMETERS = [
    f"{PG}?password={SECRET}",
    f"{PG}?bogus=1",
    f"{PG}?port=x",
    f"{PG}?port=-1",
    f"{PG}?prepared_statement_cache_size=x",
    f"{PG}?statement_cache_size=-1",
    f"{PG}?connect_timeout=x",
    f"{PG}?connect_timeout=0",
    f"{PG}?command_timeout=-5",
    f"{PG}?sslmode=sometimes",
]
BAD_URLS = UNUSABLE_URLS + BAD_PARAMETERS

# Options that fail validation; connect_args always holds the secret too.
BAD_OPTIONS: list[dict[str, Any]] = [
    {"connect_timeout": 0},
    {"connect_timeout": True},
    {"connect_timeout": float("inf")},
    {"connect_timeout": "10"},
    {"pool_min_size": -1},
    {"pool_max_size": 10_001},
    {"pool_max_size": True},
    {"pool_max_size": "3"},
    {"pool_max_size": 0},
    {"pool_min_size": 5, "pool_max_size": 2},
    {"server_settings": [("password", SECRET)]},
    {"server_settings": {1: SECRET}},
    {"server_settings": {"application_name": 5, "search_path": SECRET}},
    {"connect_args": [("password", SECRET)]},
    {"connect_args": {1: SECRET, "password": SECRET}},
    {"connect_args": {"password": SECRET, "bogus": 1}},
    {"connect_args": {"password": SECRET, "loop": None}},
    {"connect_args": {"password": SECRET, "server_settings": {"x": 1}}},
    {"connect_args": {"password": SECRET, "server_settings": "x"}},
]
_OPTION_FIELDS = {"connect_timeout", "pool_min_size", "pool_max_size", "server_settings"}


def with_secret_args(options: dict[str, Any]) -> dict[str, Any]:
    out = dict(options)
    out.setdefault("connect_args", {"password": SECRET, "sslpassword": SECRET})
    return out


def chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def assert_no_secret(exc: BaseException) -> None:
    for e in chain(exc):
        for text in (str(e), repr(e), *map(repr, e.args)):
            assert SECRET not in text, f"{type(e).__name__} shows the secret: {text}"


def raised(call: Callable[[], Any]) -> SessionDBError:
    with pytest.raises(SessionDBError) as info:
        call()
    assert_no_secret(info.value)
    return info.value


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.delenv(ENV_NAMESPACE, raising=False)
    return monkeypatch


# -- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", BAD_URLS, ids=repr)
async def test_a_bad_url_never_shows_the_secret(url: str, clean_env: pytest.MonkeyPatch) -> None:
    error = raised(lambda: SessionStore(Settings.from_env(url)))
    assert isinstance(error, ConfigurationError)
    raised(lambda: SessionStore(url))
    with pytest.raises(ConfigurationError) as info:
        await SessionStore.connect(url, connect_args={"password": SECRET})
    assert_no_secret(info.value)
    with pytest.raises(ConfigurationError) as info:
        async with SessionStore.open(url, connect_args={"password": SECRET}):
            pass
    assert_no_secret(info.value)

    clean_env.setenv(ENV_URL, url)
    error = raised(lambda: SessionStore(Settings.from_env()))
    assert (ENV_URL in str(error)) == (url in UNUSABLE_URLS)
    with pytest.raises(ConfigurationError) as info:
        await SessionStore.connect()
    assert_no_secret(info.value)


def test_the_unparsable_url_of_the_issue_is_shown_masked() -> None:
    with pytest.raises(ConfigurationError) as info:
        normalize_url(f"postgresql://app:{SECRET}@db.internal:5432x/app")
    assert "'postgresql://app:***@db.internal:5432x/app'" in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"postgresql://app:{SECRET}@h:5/db", "postgresql://app:***@h:5/db"),
        (f"postgresql://a@b:{SECRET}@c@h/db", "postgresql://a@b:***@h/db"),
        (f"postgresql://h/db?password={SECRET}&x=1", "postgresql://h/db?password=***&x=1"),
        (f"host=h password={SECRET} user=u", "host=h password=*** user=u"),
        (f"{{'password': '{SECRET}', 'x': 1}}", "{'password': ***, 'x': 1}"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),
        ("/var/lib/sessions.sqlite3", "/var/lib/sessions.sqlite3"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_masked_url_masks_what_sqlalchemy_shows() -> None:
    # SQLAlchemy splits a password holding "@" and shows its tail as the host.
    url = make_url(f"postgresql://app:x@{SECRET}@h/db")
    assert SECRET in url.render_as_string(hide_password=True)
    assert SECRET not in masked_url(url)


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=repr)
async def test_bad_options_never_show_the_secret(
    options: dict[str, Any], clean_env: pytest.MonkeyPatch
) -> None:
    options = with_secret_args(options)
    if set(options) <= _OPTION_FIELDS | {"connect_args"}:
        raised(lambda: SessionStore(Settings.from_env(PG, None, ConnectOptions(**options))))
    for url in (PG, ":memory:"):
        try:
            store = await SessionStore.connect(url, **options)
        except SessionDBError as exc:
            assert isinstance(exc, ConfigurationError)
            assert_no_secret(exc)
        else:  # only SQLite, which takes no connect_args, may accept them
            await store.close()
            assert url == ":memory:"
            assert_no_secret_in_reprs(store)
    clean_env.setenv(ENV_URL, PG)
    with pytest.raises(ConfigurationError) as info:
        async with SessionStore.open(**options):
            pass
    assert_no_secret(info.value)


def test_errors_name_the_bad_key_not_the_dict() -> None:
    with pytest.raises(ConfigurationError) as info:
        ConnectOptions(server_settings={"application_name": 5})  # type: ignore[dict-item]
    assert "server_settings['application_name'] must be a string, got int" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        ConnectOptions(connect_args={b"password": SECRET})  # type: ignore[dict-item]
    assert "connect_args keys must be strings, got a key of type bytes" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        SessionStore(Settings.from_env(PG, None, ConnectOptions(connect_args={"pasword": SECRET})))
    assert "connect_args key 'pasword' is not an argument of asyncpg.connect" in str(info.value)


@pytest.mark.parametrize(
    ("namespace", "max_record_bytes"), [("", 1024), ("x" * 256, 1024), ("ok", 0), ("ok", True)]
)
def test_settings_errors_never_show_the_secret(namespace: str, max_record_bytes: int) -> None:
    raised(
        lambda: Settings.from_env(
            PG,
            namespace,
            ConnectOptions(connect_args={"password": SECRET}),
            max_record_bytes,
        )
    )


# -- reprs -----------------------------------------------------------------------------------


def assert_no_secret_in_reprs(store: SessionStore) -> None:
    for text in (repr(store), repr(store.settings), str(store.settings), repr(store.settings.url)):
        assert SECRET not in text, text
    assert "***" in repr(store) or ":memory:" in repr(store)


async def test_reprs_mask_password_like_options() -> None:
    context = ssl.create_default_context()
    store = await SessionStore.connect(
        f"{PG}?sslmode=require",
        server_settings={"application_name": "billing", "x_token": SECRET},
        ssl=context,
        connect_args={
            "password": SECRET,
            "passfile": SECRET,
            "dsn": f"postgresql://other:{SECRET}@h/db",
            "command_timeout": 5.0,
            "server_settings": {"search_path": "app"},
        },
    )
    try:
        assert_no_secret_in_reprs(store)
        text = repr(store)
        assert "connect_args={'password': ***, 'passfile': ***" in text
        assert "'dsn': 'postgresql://other:***@h/db'" in text
        assert "'command_timeout': 5.0" in text  # what is not secret stays readable
        assert "'application_name': 'billing', 'x_token': ***" in text
        assert "ssl=<SSLContext>" in text
        assert "url='postgresql+asyncpg://app:***@db.internal:5432/app?sslmode=require'" in text
        assert "'server_settings': <dict>" in text  # nested values: only their type
    finally:
        await store.close()


# -- the CLI ---------------------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.mark.parametrize("url", BAD_URLS, ids=repr)
def test_the_cli_never_prints_the_secret(
    url: str, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli("--db", url, "sessions", "list")
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("sessiondb: error: ")
    assert SECRET not in out + err

    clean_env.setenv(ENV_URL, url)
    code, out = cli("migrate")
    err = capsys.readouterr().err
    assert code == 1 and (ENV_URL in err) == (url in UNUSABLE_URLS)
    assert SECRET not in out + err


def with_password(url: str) -> str:
    """``url`` with the secret as its password (the test server trusts any password)."""
    return make_url(url).set(password=SECRET).render_as_string(hide_password=False)


def test_the_cli_on_a_real_server_never_prints_the_secret(
    pg_url: str, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = with_password(pg_url)
    code, out = cli("--db", url, "migrate")
    assert code == 0 and "migrated postgresql+asyncpg://" in out and ":***@" in out
    assert SECRET not in out + capsys.readouterr().err

    missing = make_url(url).set(database="sessiondb_no_such_database")
    unreachable = make_url(url).set(host="127.0.0.1", port=1)
    for bad in (missing, unreachable):
        text = bad.render_as_string(hide_password=False)
        for argv, env in ((("--db", text), None), ((), text)):
            if env is not None:
                clean_env.setenv(ENV_URL, env)
            code, out = cli(*argv, "sessions", "list")
            err = capsys.readouterr().err
            assert code == 1 and err.startswith("sessiondb: error: ")
            assert SECRET not in out + err


def test_the_cli_masks_the_given_password_wherever_a_message_repeats_it() -> None:
    from sessiondb.cli import _without_secrets

    url = f"postgresql://app:{SECRET}%40x@h/db"
    message = f"driver said: bad password {SECRET}@x for app; also {SECRET}%40x"
    shown = _without_secrets(message, url)
    assert SECRET not in shown and shown.count("***") == 2
    # A password shorter than four characters is not searched for: it would mask words.
    assert _without_secrets("a bad day", "postgresql://u:a@h/db") == "a bad day"
