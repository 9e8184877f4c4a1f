"""Every spelling of a Postgres database a user may type — URLs (``postgresql://``,
``postgres://``, ``postgresql+asyncpg://``), libpq keyword strings (``host=… dbname=…``),
several hosts, Unix sockets, ``%``-escapes in the user and the password — reaches the
real server through every CLI command that takes ``--db`` and through the library, with
a password holding ``@ : / % =``, a space, a quote and a backslash; and the password,
as typed or percent-encoded, shows in no output, error, repr or span.

The hostile case is the keyword string: before, ``--db "host=… password=…"`` was a
SQLite file named after it (created by ``migrate``, used by every later command), and
its masking missed the password because the file name's ``=`` was percent-encoded.

The server trusts 127.0.0.1 and its socket, so the password is never checked; it is a
real role's password all the same (``CREATE ROLE … PASSWORD``), the role that owns the
test's database.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from helpers.otel import Listener, listening
from sqlalchemy.engine import make_url

from sessiondb import SessionStore
from sessiondb.cli import main
from sessiondb.config import ENV_NAMESPACE, ENV_URL, ConnectOptions, Settings
from sessiondb.errors import ConfigurationError, SessionDBError, SessionNotFoundError

on_postgres = [
    pytest.mark.postgres_only,
    pytest.mark.parametrize("backend", ["postgres"], indirect=True),
]


def postgres_only(test: Callable[..., object]) -> Callable[..., object]:
    for mark in reversed(on_postgres):
        test = mark(test)
    return test


MARK = "Durian9pw"
# Every character that a URL or a keyword string treats specially.
PASSWORD = MARK + "@:/%= x'\\#?&,;+"
SOCKET_DIR = "/var/run/postgresql"
MISSING = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


def password_forms(password: str = PASSWORD) -> set[str]:
    """The password as typed and as a URL or a form encodes it; and its plain part, which
    every rendering of it holds."""
    return {password, quote(password, safe=""), quote_plus(password, safe=""), MARK}


def assert_hidden(text: str, where: str) -> None:
    for form in password_forms():
        assert form not in text, f"{where} shows the password ({form!r}): {text}"


def dsn_quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def dsn_escaped(value: str) -> str:
    """An unquoted keyword-string value: each space, quote and backslash escaped."""
    return "".join("\\" + c if c in " '\\" else c for c in value)


def shapes(user: str, database: str, port: int = 5432) -> dict[str, str]:
    """Each spelling of the same database, named."""
    pw = quote(PASSWORD, safe="")
    escaped_user = f"%{ord(user[0]):02X}{user[1:]}"  # %-escaped, as a URL may spell it
    host = f"127.0.0.1:{port}"
    return {
        "url": f"postgresql://{user}:{pw}@{host}/{database}",
        "postgres-scheme": f"postgres://{user}:{pw}@{host}/{database}",
        "asyncpg": f"postgresql+asyncpg://{user}:{pw}@{host}/{database}",
        "url-escaped-user": f"postgresql://{escaped_user}:{pw}@{host}/{database}",
        "url-host-list": f"postgresql://{user}:{pw}@{host},localhost:{port}/{database}",
        "url-host-params": (
            f"postgresql://{user}:{pw}@/{database}?host=127.0.0.1,localhost&port={port}"
        ),
        "url-socket": (
            f"postgresql://{user}:{pw}@/{database}?host={quote(SOCKET_DIR, safe='')}&port={port}"
        ),
        "url-options": (
            f"postgresql://{user}:{pw}@{host}/{database}"
            "?sslmode=disable&application_name=urls&connect_timeout=5"
        ),
        "dsn": (
            f"host=127.0.0.1 port={port} dbname={database} user={user} "
            f"password={dsn_quoted(PASSWORD)}"
        ),
        "dsn-spaced": (
            f"  host = 127.0.0.1   port = {port} dbname = {database}  user = {user} "
            f"password = {dsn_quoted(PASSWORD)}  "
        ),
        "dsn-escaped-password": (
            f"password={dsn_escaped(PASSWORD)} host=127.0.0.1 port={port} "
            f"dbname={database} user={user}"
        ),
        "dsn-host-list": (
            f"host=127.0.0.1,localhost port={port},{port} dbname={database} user={user} "
            f"password={dsn_quoted(PASSWORD)}"
        ),
        "dsn-socket": (
            f"host={SOCKET_DIR} port={port} dbname={database} user={user} "
            f"password={dsn_quoted(PASSWORD)}"
        ),
        "dsn-socket-then-tcp": (
            f"host={SOCKET_DIR},127.0.0.1 port={port} dbname={database} user={user} "
            f"password={dsn_quoted(PASSWORD)}"
        ),
        "dsn-options": (
            f"host=127.0.0.1 port={port} dbname={database} user={user} "
            f"password={dsn_quoted(PASSWORD)} sslmode=disable "
            "application_name='sessiondb urls' connect_timeout=5 "
            "target_session_attrs=read-write"
        ),
    }


SHAPES = list(shapes("u", "d"))


async def _admin(url: str, *statements: str) -> None:
    import asyncpg

    u = make_url(url)
    conn = await asyncpg.connect(
        user=u.username, host=u.host, port=u.port or 5432, database="postgres"
    )
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture
def role_url(db_url: str) -> Iterator[tuple[str, str]]:
    """(role, database): a role with a password that owns the test's database (its
    tables through membership of their owner)."""
    role = f"sessiondb_pw_{uuid.uuid4().hex[:8]}"
    url = make_url(db_url)
    literal = PASSWORD.replace("'", "''")
    asyncio.run(
        _admin(
            db_url,
            f"CREATE ROLE {role} LOGIN PASSWORD '{literal}'",
            f'GRANT "{url.username}" TO {role}',
        )
    )
    try:
        yield role, str(url.database)
    finally:
        asyncio.run(_admin(db_url, f"DROP ROLE IF EXISTS {role}"))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No SESSIONDB_* variable; a fresh working directory, where a SQLite file would
    land."""
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.delenv(ENV_NAMESPACE, raising=False)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    captured = capsys.readouterr()
    text = out.getvalue() + captured.out
    for where, shown in (("stdout", text), ("stderr", captured.err)):
        assert_hidden(shown, f"{' '.join(argv[2:4])} {where}")
    return code, text, captured.err


@postgres_only
@pytest.mark.parametrize("shape", SHAPES)
def test_every_command_reaches_postgres_and_shows_no_password(
    shape: str,
    db_url: str,
    role_url: tuple[str, str],
    clean_env: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    role, database = role_url
    db = shapes(role, database)[shape]

    async def seed() -> str:
        async with SessionStore.open(db_url) as store:
            sid = (await store.create_session(name="seeded")).id
            await store.append(sid, {"role": "user", "content": "a nightjar at dusk"})
            return sid

    sid = asyncio.run(seed())

    def run(*argv: str, code: int = 0) -> tuple[str, str]:
        got, out, err = cli(capsys, "--db", db, *argv)
        assert got == code, (shape, argv, out, err)
        return out, err

    out, _ = run("migrate")
    assert out.startswith("migrated postgresql+asyncpg://") and "***" in out, out
    out, _ = run("sessions", "list", "--json")
    assert [s["id"] for s in json.loads(out)["items"]] == [sid]  # the server's session
    out, _ = run("sessions", "show", sid)
    assert "a nightjar at dusk" in out
    out, _ = run("search", "nightjar", "--json")
    assert [h["session_id"] for h in json.loads(out)["hits"]] == [sid]
    exported = tmp_path / "exported"
    run("export", sid, "--out", str(exported))
    run("sessions", "rm", sid)
    run("import", str(exported))
    out, _ = run("sessions", "list", "--json")
    [imported] = json.loads(out)["items"]
    sid = imported["id"]
    out, _ = run("expire", "--older-than", "1d", "--dry-run", "--json")
    assert json.loads(out)["deleted"] == []
    out, _ = run("compact", sid, "--dry-run", "--json")
    _, err = run("serve", "--host", "0.0.0.0", code=1)
    assert "without --token" in err
    _, err = run("keys", "rotate", code=1)
    assert "no master keys" in err

    # Error paths: a database that does not exist, a server that does not answer.
    for bad in (
        shapes(role, database + "_missing")[shape],
        shapes(role, database, port=1)[shape],
    ):
        code, out, err = cli(capsys, "--db", bad, "sessions", "list")
        assert code == 1 and err.startswith("sessiondb: error: "), (shape, out, err)
        os.environ[ENV_URL] = bad
        try:
            code, out, err = cli(capsys, "migrate")
        finally:
            del os.environ[ENV_URL]
        assert code == 1 and err.startswith("sessiondb: error: "), (shape, out, err)

    assert sorted(p.name for p in clean_env.iterdir()) == []  # no SQLite file, of any name


def _chain_text(exc: BaseException) -> str:
    texts, seen = [], set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        texts += [str(e), repr(e)]
        todo += [e.__cause__, e.__context__]
    return "\n".join(texts)


@pytest.fixture
def otel() -> Iterator[Listener]:
    yield from listening()


def _span_texts(otel: Listener) -> str:
    texts = []
    for span in otel.finished():
        texts += [span.name, *map(str, (span.attributes or {}).values())]
        for event in span.events:
            texts += [str(v) for v in (event.attributes or {}).values()]
    return "\n".join(texts)


@postgres_only
@pytest.mark.parametrize("shape", SHAPES)
async def test_reprs_errors_and_spans_show_no_password(
    shape: str, db_url: str, role_url: tuple[str, str], otel: Listener
) -> None:
    role, database = role_url
    db = shapes(role, database)[shape]
    settings = Settings.from_env(db)
    assert settings.url.drivername == "postgresql+asyncpg"
    assert settings.url.password == PASSWORD  # read whole, whatever its quoting
    assert settings.url.username == role and settings.url.database == database
    options = {
        "connect_args": {"password": PASSWORD, "command_timeout": 30.0},
        "server_settings": {"application_name": "urls"},
        "ssl": None,
    }
    connect = ConnectOptions(**options)  # type: ignore[arg-type]
    async with SessionStore.open(db, **options) as store:  # type: ignore[arg-type]
        for text in (repr(settings), str(settings), repr(connect), str(connect)):
            assert_hidden(text, "a repr")
        for text in (repr(store), str(store), repr(store.settings), str(store.settings)):
            assert_hidden(text, "the store's repr")
        sid = (await store.create_session(name="spanned")).id
        await store.append(sid, {"role": "user", "content": "hello"})
        assert [m.text() for m in await store.context(sid)] == ["hello"]
        with pytest.raises(SessionNotFoundError):
            await store.get_session(MISSING)
    assert otel.finished("sessiondb.append"), "the calls were traced"

    # A database that does not exist, a server that does not answer: the error and
    # the failed call's span.
    for bad in (
        shapes(role, database + "_missing")[shape],
        shapes(role, database, port=1)[shape],
    ):
        async with SessionStore.open(bad, connect_timeout=5) as broken:
            assert_hidden(repr(broken), "a broken store's repr")
            with pytest.raises(SessionDBError) as info:
                await broken.list_sessions()
            assert_hidden(_chain_text(info.value), "an error")
    failed = otel.finished("sessiondb.list_sessions")
    assert len(failed) == 2 and all(s.events for s in failed)
    spans = _span_texts(otel)
    assert_hidden(spans, "a span")
    assert database in spans  # db.namespace: the spans are these calls' own


# -- keyword strings that are refused, and what is never a SQLite file --------------------

REFUSED: dict[str, str] = {
    f"host=h user=u {MARK} dbname=d": "pair 3 has no = after its keyword",
    f"host=h password='{MARK} dbname=d": "value of 'password' has no closing quote",
    f"host=h passfile={MARK}": "keyword 'passfile' is not one sessiondb takes",
    f"host=h sslrootcert=/x password={MARK}": "keyword 'sslrootcert' is not one",
    f"host=h {MARK}=x password={MARK}": "keyword 2 is not a libpq keyword",
    f"host=h port={MARK} password={MARK}": "is not a port",
    f"host=h,,k password={MARK}": "host list has an empty host",
    f"host=h,k port=1,2,3 password={MARK}": "2 hosts and 3 ports",
    f"dbname='host=x password={MARK}' password={MARK}": "dbname holds another connection",
    f"host=h sslmode={MARK}x password={MARK}": "sslmode must be one of",
    f"host=h target_session_attrs=any{MARK} password={MARK}": "target_session_attrs",
    f"host=h connect_timeout=x password={MARK}": "connect_timeout",
}


@pytest.mark.parametrize("text", list(REFUSED), ids=list(REFUSED.values()))
def test_a_malformed_keyword_string_is_refused_typed_without_the_password(
    text: str, clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def use() -> None:
        async with SessionStore.open(text) as store:
            await store.list_sessions()

    with pytest.raises(ConfigurationError) as info:
        asyncio.run(use())
    assert REFUSED[text] in str(info.value), str(info.value)
    assert MARK not in _chain_text(info.value)
    for argv in (("--db", text, "migrate"), ("--db", text, "sessions", "list")):
        code, _out, err = cli(capsys, *argv)
        assert code == 1 and REFUSED[text] in err, err
    assert list(clean_env.iterdir()) == []


def test_a_database_text_holding_an_equals_sign_is_never_a_sqlite_file(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A keyword string: Postgres, or refused when its keywords are not libpq's.
    for text in (f"password={MARK}", f"dbname=x password={MARK}", f"user=u password={MARK}"):
        settings = Settings.from_env(text)
        assert not settings.is_sqlite and settings.url.get_backend_name() == "postgresql"
        assert_hidden(repr(settings), "a repr")
    for text in ("a=b", "./sessions=old.db", "x =y", f"{MARK}=1"):
        with pytest.raises(ConfigurationError, match="is not a libpq keyword") as info:
            Settings.from_env(text)
        assert MARK not in str(info.value)
        code, _out, err = cli(capsys, "--db", text, "migrate")
        assert code == 1 and "is not a libpq keyword" in err
    assert list(clean_env.iterdir()) == []
    # A SQLite file whose name holds "=" is named by a sqlite:/// URL.
    named = Settings.from_env("sqlite:///sessions=old.db")
    assert named.sqlite_database == "sessions=old.db"
    code, _out, err = cli(capsys, "--db", "sqlite:///sessions=old.db", "migrate")
    assert code == 0, err
    assert [p.name for p in clean_env.iterdir()] == ["sessions=old.db"]
    # And its repr masks a secret-looking name, though percent-encoded.
    assert_hidden(repr(Settings.from_env(f"sqlite:///x password={MARK}.db")), "a repr")
