"""sessiondb.orm: a service's own SQLAlchemy code reading sessiondb's tables.

Sessions are written with ``SessionStore`` and read with the ORM: on SQLite through a
plain sync engine (``sqlite3``), on Postgres through an ``AsyncSession`` on asyncpg (both
``run_sync`` and the async API). The service's own models live on their own
``DeclarativeBase``.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic import command
from alembic.config import Config
from helpers import sql as sqlh
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import (
    String,
    Text,
    and_,
    create_engine,
    delete,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    foreign,
    joinedload,
    mapped_column,
    relationship,
    selectinload,
)
from sqlalchemy.orm.exc import DetachedInstanceError

from sessiondb import ReadOnlyError, SessionDBError, SessionStore
from sessiondb.ids import new_session_id
from sessiondb.migrate import is_search_table
from sessiondb.orm import RecordRow, SessionRow, TurnRow, lineage_records
from sessiondb.tables import RECORDS, SESSIONS, TURNS, VERSION_TABLE, metadata

T = TypeVar("T")


# -- the service's own models ---------------------------------------------------------------


class ServiceBase(DeclarativeBase):
    """The service's base, on a MetaData of its own."""


class User(ServiceBase):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    # The key the service gives a user's chat session (SessionStore.session_for_key).
    chat_key: Mapped[str | None] = mapped_column(Text)

    # The user's sessions in the default namespace, by key; sessiondb's rows, read-only.
    sessions: Mapped[list[SessionRow]] = relationship(
        SessionRow,
        primaryjoin=lambda: and_(
            foreign(SessionRow.key) == User.chat_key, SessionRow.namespace == "default"
        ),
        viewonly=True,
        order_by=lambda: SessionRow.id,
    )


# -- running the ORM on either backend ------------------------------------------------------


def is_postgres(db_url: str) -> bool:
    return db_url.startswith("postgresql")


async def with_orm(db_url: str, fn: Callable[[Session], T]) -> T:
    """``fn`` on an ORM session of the database: a sync engine on SQLite, an
    ``AsyncSession`` (its ``run_sync``) on Postgres. ``fn`` commits what it wants kept."""
    if is_postgres(db_url):
        engine = create_async_engine(db_url)
        try:
            async with AsyncSession(engine) as db:
                return await db.run_sync(fn)
        finally:
            await engine.dispose()

    def run() -> T:
        engine = create_engine(f"sqlite:///{db_url}")
        try:
            with Session(engine) as db:
                return fn(db)
        finally:
            engine.dispose()

    return await asyncio.to_thread(run)


async def with_connection(db_url: str, fn: Callable[[Connection], T]) -> T:
    """``fn`` on a SQLAlchemy connection of the database, committed after (Alembic)."""
    if is_postgres(db_url):
        engine = create_async_engine(db_url)
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(fn)
        finally:
            await engine.dispose()

    def run() -> T:
        engine = create_engine(f"sqlite:///{db_url}")
        try:
            with engine.begin() as conn:
                return fn(conn)
        finally:
            engine.dispose()

    return await asyncio.to_thread(run)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def snapshot(store: SessionStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of sessiondb's three tables."""
    order = {SESSIONS: "id", RECORDS: "session_id, seq", TURNS: "session_id, ticket"}
    return {
        table: [tuple(r) for r in await sqlh.fetch(store, f"SELECT * FROM {table} ORDER BY {o}")]
        for table, o in order.items()
    }


# -- joins with the service's tables --------------------------------------------------------


async def test_a_service_joins_its_users_to_their_sessions(
    store: SessionStore, db_url: str
) -> None:
    ada = await store.create_session(name="ada's", key="chat-ada", metadata={"user_id": "u1"})
    await store.append(ada.id, [user("hello"), assistant("hi")])
    bob = await store.create_session(name="bob's", key="chat-bob", metadata={"user_id": "u2"})
    await store.create_session(name="nobody's")
    async with SessionStore.open(db_url, "other") as other:
        # Same key and metadata in another namespace: never one of the service's.
        await other.create_session(name="stray", key="chat-ada", metadata={"user_id": "u1"})

    def service(db: Session) -> tuple[Any, ...]:
        ServiceBase.metadata.create_all(db.connection())
        db.add_all(
            [
                User(id="u1", name="Ada", chat_key="chat-ada"),
                User(id="u2", name="Bob", chat_key="chat-bob"),
                User(id="u3", name="Cy", chat_key=None),
            ]
        )
        db.commit()  # the service's own rows flush as usual beside sessiondb.orm
        by_metadata = db.execute(
            select(User.name, SessionRow.name, SessionRow.message_count)
            .join(SessionRow, SessionRow.metadata_field("user_id") == User.id)
            .where(SessionRow.namespace == "default")
            .order_by(User.name)
        ).all()
        by_key = {u.name: [s.id for s in u.sessions] for u in db.scalars(select(User))}
        counts = db.execute(
            select(User.name, func.count(SessionRow.id))
            .outerjoin(
                SessionRow,
                and_(SessionRow.key == User.chat_key, SessionRow.namespace == "default"),
            )
            .group_by(User.name)
            .order_by(User.name)
        ).all()
        return [tuple(r) for r in by_metadata], by_key, [tuple(r) for r in counts]

    by_metadata, by_key, counts = await with_orm(db_url, service)
    assert by_metadata == [("Ada", "ada's", 2), ("Bob", "bob's", 0)]
    assert by_key == {"Ada": [ada.id], "Bob": [bob.id], "Cy": []}
    assert counts == [("Ada", 1), ("Bob", 1), ("Cy", 0)]
    assert await sqlh.count(store, "users") == 3
    assert await sqlh.count(store, SESSIONS) == 4


async def test_a_row_reads_as_the_stores_own_models(store: SessionStore, db_url: str) -> None:
    info = await store.create_session(
        name="n", model="m", key="k", metadata={"user_id": "u1", "tags": ["a"]}
    )
    await store.append(info.id, [user("a"), assistant("b")])
    stored = await store.get_session(info.id)

    def read(db: Session) -> Any:
        row = db.get(SessionRow, info.id)
        assert row is not None
        return row.info(), row.created_at, row.last_seq

    got, created_at, last_seq = await with_orm(db_url, read)
    assert got == stored
    assert created_at.tzinfo is UTC and last_seq == 2


# -- records: lazy and eager, in seq order --------------------------------------------------


async def test_records_load_lazily_and_eagerly_in_seq_order(
    store: SessionStore, db_url: str
) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [user("one"), assistant("two"), user("three")])
    await store.append(sid, [assistant("four")])
    await store.tombstone(sid, 2)  # seq 5, a tombstone; seq 2 stays stored
    await store.append(sid, [user("six")])
    other = (await store.create_session()).id
    await store.append(other, [user("x"), assistant("y")])
    expected = await store.records(sid, include_tombstoned=True)

    def read(db: Session) -> Any:
        row = db.get(SessionRow, sid)
        assert row is not None
        lazy = [(r.seq, r.kind) for r in row.records]
        records = [r.record() for r in row.records]
        db.expunge_all()
        rows = db.scalars(
            select(SessionRow).options(selectinload(SessionRow.records)).order_by(SessionRow.id)
        ).all()
        db.expunge_all()  # detached: only what was loaded eagerly is readable
        eager = {r.id: [(x.seq, x.kind) for x in r.records] for r in rows}
        plain = db.get(SessionRow, sid)
        db.expunge_all()
        with pytest.raises(DetachedInstanceError):
            _ = plain.records  # type: ignore[union-attr]
        return lazy, records, eager

    lazy, records, eager = await with_orm(db_url, read)
    kinds = ["message"] * 4 + ["tombstone", "message"]
    assert lazy == list(zip(range(1, 7), kinds, strict=True))
    assert records == expected
    assert [r.message.text() for r in records if r.message] == [
        "one",
        "two",
        "three",
        "four",
        "six",
    ]
    assert eager == {sid: lazy, other: [(1, "message"), (2, "message")]}


# -- forks ----------------------------------------------------------------------------------


async def test_parent_and_forks(store: SessionStore, db_url: str) -> None:
    root = (await store.create_session(name="root")).id
    await store.append(root, [user("a"), assistant("b"), user("c"), assistant("d")])
    first = (await store.fork(root, at_seq=2)).id
    second = (await store.fork(root, at_seq=4)).id
    await store.append(first, [user("first's own")])
    nested = (await store.fork(first)).id  # at first's head, 3
    await store.append(nested, [assistant("nested's own")])
    expected = await store.records(nested, include_tombstoned=True)

    def read(db: Session) -> Any:
        row = db.get(SessionRow, root)
        child = db.get(SessionRow, nested)
        assert row is not None and child is not None
        lazy = {
            "forks": [(f.id, f.fork_seq) for f in row.forks],
            "root's parent": row.parent,
            "nested's lineage": [child.id, child.parent.id, child.parent.parent.id],  # type: ignore[union-attr]
            "nested's own": [r.seq for r in child.records],
        }
        db.expunge_all()
        eager = db.scalars(
            select(SessionRow)
            .options(selectinload(SessionRow.forks), joinedload(SessionRow.parent))
            .order_by(SessionRow.id)
        ).all()
        db.expunge_all()
        tree = {r.id: ([f.id for f in r.forks], r.parent.id if r.parent else None) for r in eager}
        lineage = [r.record() for r in db.scalars(lineage_records(nested, "default"))]
        elsewhere = db.scalars(lineage_records(nested, "other")).all()
        return lazy, tree, lineage, elsewhere

    lazy, tree, lineage, elsewhere = await with_orm(db_url, read)
    assert lazy == {
        "forks": [(first, 2), (second, 4)],
        "root's parent": None,
        "nested's lineage": [nested, first, root],
        "nested's own": [4],
    }
    assert tree == {
        root: ([first, second], None),
        first: ([nested], root),
        second: ([], root),
        nested: ([], first),
    }
    assert lineage == expected
    assert [(r.session_id, r.seq) for r in lineage] == [
        (root, 1),
        (root, 2),
        (first, 3),
        (nested, 4),
    ]
    assert elsewhere == []


# -- reads only -----------------------------------------------------------------------------


def _new_session() -> SessionRow:
    at = datetime.now(UTC)
    return SessionRow(
        id=new_session_id(), namespace="default", created_at=at, last_message_at=at,
        source="interactive", last_seq=0, message_count=0, input_tokens=0, output_tokens=0,
        cache_read_tokens=0, cache_write_tokens=0, cost_total=0.0,
    )  # fmt: skip


def _new_record(session_id: str, seq: int) -> RecordRow:
    return RecordRow(
        session_id=session_id, seq=seq, kind="message", role="user",
        created_at=datetime.now(UTC), size=2, payload='{"role":"user","content":[]}',
    )  # fmt: skip


Write = Callable[[Session, SessionRow, SessionRow], Any]

# What a service might try, the attributes the error names, and the method it points to.
WRITES: list[tuple[str, Write, str, str]] = [
    ("add a session", lambda db, s, f: db.add(_new_session()), "add", "create_session"),
    (
        "add a record through records",
        lambda db, s, f: s.records.append(_new_record(s.id, 9)),
        "add",
        "SessionStore.append",
    ),
    (
        "add a turn",
        lambda db, s, f: db.add(
            TurnRow(
                session_id=s.id,
                ticket=1,
                token="t" * 32,
                holder="me",
                enqueued_at=datetime.now(UTC),
                expires_at=datetime.now(UTC),
            )
        ),
        "add",
        "SessionStore.turn",
    ),
    ("rename", lambda db, s, f: setattr(s, "name", "renamed"), "change name of", "rename"),
    (
        "bump the head",
        lambda db, s, f: setattr(s, "last_seq", s.last_seq + 1),
        "change last_seq of",
        "append",
    ),
    (
        "edit a record",
        lambda db, s, f: setattr(s.records[0], "payload", "{}"),
        "change payload of",
        "records are never updated",
    ),
    ("detach a fork", lambda db, s, f: setattr(f, "parent", None), "change parent of", "fork"),
    # The fork's parent changes with the collection (a backref): either is named.
    ("drop the forks", lambda db, s, f: s.forks.clear(), "change", "fork"),
    ("delete a session", lambda db, s, f: db.delete(f), "delete", "delete_session"),
    (
        "delete a record",
        lambda db, s, f: db.delete(s.records[-1]),
        "delete",
        "SessionStore.tombstone",
    ),
    (
        "ORM insert",
        lambda db, s, f: db.execute(insert(SessionRow).values(id=new_session_id())),
        "add",
        "create_session",
    ),
    (
        "ORM update",
        lambda db, s, f: db.execute(update(SessionRow).values(name="x")),
        "change",
        "rename",
    ),
    (
        "ORM delete",
        lambda db, s, f: db.execute(delete(RecordRow).where(RecordRow.session_id == s.id)),
        "delete",
        "delete_session",
    ),
]


async def test_a_flush_that_would_write_is_refused(store: SessionStore, db_url: str) -> None:
    sid = (await store.create_session(name="kept")).id
    await store.append(sid, [user("a"), assistant("b")])
    fork = (await store.fork(sid, at_seq=1)).id
    before = await snapshot(store)

    def attempt(db: Session) -> list[tuple[str, str]]:
        refused = []
        for how, (label, write, _, _) in enumerate(WRITES):
            row, child = db.get(SessionRow, sid), db.get(SessionRow, fork)
            assert row is not None and child is not None
            with pytest.raises(ReadOnlyError) as caught:
                write(db, row, child)
                # The flush comes by commit, by flush, or by a query's autoflush.
                [db.commit, db.flush, lambda: db.scalars(select(SessionRow)).all()][how % 3]()
            refused.append((label, str(caught.value)))
            db.rollback()
            # The session is usable again, and reads what the database holds.
            again = db.get(SessionRow, sid)
            assert again is not None and again.name == "kept" and len(again.records) == 2
        return refused

    refused = dict(await with_orm(db_url, attempt))
    for label, _, action, method in WRITES:
        message = refused[label]
        assert message.startswith(f"sessiondb.orm is read-only: cannot {action} "), label
        assert method in message, (label, message)
        assert "Nothing was written" in message, label
    assert isinstance(ReadOnlyError(), SessionDBError)
    assert await snapshot(store) == before


async def test_unchanged_rows_and_the_services_own_writes_flush(
    store: SessionStore, db_url: str
) -> None:
    sid = (await store.create_session(name="kept", key="chat-1")).id
    before = await snapshot(store)

    def service(db: Session) -> list[tuple[str, list[str]]]:
        ServiceBase.metadata.create_all(db.connection())
        row = db.get(SessionRow, sid)
        assert row is not None
        row.name = "kept"  # set to what it was: no change to write
        _ = row.records, row.forks, row.parent  # loaded, not changed
        db.add_all([User(id="u1", name="Ada", chat_key=row.key), User(id="u2", name="Bob")])
        db.commit()
        # The service's own ORM statements may read sessiondb's rows.
        db.execute(
            update(User)
            .where(User.chat_key.in_(select(SessionRow.key).where(SessionRow.key.is_not(None))))
            .values(name="Ada (has a chat)")
        )
        db.commit()
        users = db.scalars(select(User).order_by(User.id)).all()
        return [(u.name, [s.id for s in u.sessions]) for u in users]

    assert await with_orm(db_url, service) == [("Ada (has a chat)", [sid]), ("Bob", [])]
    assert await snapshot(store) == before
    assert await sqlh.count(store, "users") == 2


@pytest.mark.postgres_only
async def test_async_session_on_postgres(pg_url: str) -> None:
    async with SessionStore.open(pg_url) as store:
        sid = (await store.create_session(name="async")).id
        await store.append(sid, [user("a"), assistant("b"), user("c")])
        fork = (await store.fork(sid, at_seq=2)).id
        expected = await store.records(sid)
        before = await snapshot(store)
    engine = create_async_engine(pg_url)
    try:
        async with AsyncSession(engine) as db:
            row = await db.get(SessionRow, sid)
            assert row is not None
            records = await row.awaitable_attrs.records
            assert [r.record() for r in records] == expected
            assert [f.id for f in await row.awaitable_attrs.forks] == [fork]
            eager = (
                await db.scalars(
                    select(SessionRow)
                    .where(SessionRow.id == fork)
                    .options(selectinload(SessionRow.records), joinedload(SessionRow.parent))
                )
            ).one()
            assert eager.records == [] and eager.parent is row
            lineage = (await db.scalars(lineage_records(fork, "default"))).all()
            assert [(r.session_id, r.seq) for r in lineage] == [(sid, 1), (sid, 2)]
            row.name = "changed"
            with pytest.raises(ReadOnlyError, match="rename"):
                await db.commit()
            await db.rollback()
            with pytest.raises(ReadOnlyError, match="delete_session"):
                await db.execute(delete(SessionRow))
    finally:
        await engine.dispose()
    async with SessionStore.open(pg_url) as store:
        assert await snapshot(store) == before


# -- metadata fields ------------------------------------------------------------------------

# Keys and values the JSON of both databases reads back exactly (Postgres's json refuses to
# decode \u0000, and lone surrogates are not text).
json_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)


def test_fuzz_metadata_field_finds_the_session_by_any_key(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, T]], T] = loop.run_until_complete
    store = run(SessionStore.connect(db_url))
    try:

        @settings(
            max_examples=40,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(key=json_text, value=json_text, other=json_text)
        def check(key: str, value: str, other: str) -> None:
            # The fixed keys below would overwrite a generated key of the same name.
            assume(key not in ("n", "flag"))
            metadata: dict[str, Any] = {key: value, "n": 7, "flag": None}
            sid = run(store.create_session(metadata=metadata)).id
            if other != key:
                run(store.create_session(metadata={other: value}))

            def query(db: Session) -> tuple[list[str], Any, Any]:
                found = db.scalars(
                    select(SessionRow.id).where(SessionRow.metadata_field(key) == value)
                ).all()
                fields = (
                    SessionRow.metadata_field("n"),
                    SessionRow.metadata_field("flag"),
                    SessionRow.metadata_field(key + "\x01missing"),
                )
                number = db.execute(select(*fields).where(SessionRow.id == sid)).one()
                return list(found), tuple(number), None

            found, number, _ = run(with_orm(db_url, query))
            assert sid in found
            assert all((run(store.get_session(s)).metadata or {}).get(key) == value for s in found)
            assert number == ("7", None, None)

        check()
        with pytest.raises(SessionDBError):
            SessionRow.metadata_field(7)  # type: ignore[arg-type]
        with pytest.raises(SessionDBError):
            lineage_records(None, "default")  # type: ignore[arg-type]
    finally:
        run(store.close())
        loop.close()


# -- a service's Alembic autogenerate -------------------------------------------------------

SERVICE_ENV = """
from alembic import context
from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import sessiondb.migrate
import sessiondb.orm


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    chat_key: Mapped[str | None] = mapped_column(String(200))
    last_session_id: Mapped[str | None] = mapped_column(
        ForeignKey(sessiondb.orm.SessionRow.id)
    )


kwargs = {}
if context.config.attributes["with_filter"]:
    kwargs["include_name"] = sessiondb.migrate.include_name
    kwargs["include_object"] = sessiondb.migrate.include_object
connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    # The service lists the metadata of every model it imports, sessiondb's among them.
    target_metadata=[Base.metadata, sessiondb.orm.Base.metadata],
    render_as_batch=connection.dialect.name == "sqlite",
    **kwargs,
)
with context.begin_transaction():
    context.run_migrations()
"""

SCRIPT_MAKO = '''"""${message}"""
revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None

from alembic import op
import sqlalchemy as sa


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
'''


def service_env(root: Path) -> Path:
    (root / "versions").mkdir(parents=True)
    (root / "env.py").write_text(textwrap.dedent(SERVICE_ENV))
    (root / "script.py.mako").write_text(SCRIPT_MAKO)
    return root


def autogenerate(root: Path, conn: Connection, rev_id: str, with_filter: bool) -> list[str]:
    """The operation lines of the revision autogenerate writes (upgrade, then downgrade)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(root))
    cfg.attributes.update(connection=conn, with_filter=with_filter)
    revision = command.revision(cfg, message=rev_id, autogenerate=True, rev_id=rev_id)
    assert revision is not None and not isinstance(revision, list)
    text = Path(revision.path).read_text()
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith(("op.", "batch_op.", "with op."))
    ]


def upgrade_and_check(root: Path, conn: Connection) -> set[str]:
    """Upgrade the service to head, check nothing is left to generate; the tables."""
    cfg = Config()
    cfg.set_main_option("script_location", str(root))
    cfg.attributes.update(connection=conn, with_filter=True)
    command.upgrade(cfg, "head")
    command.check(cfg)  # raises if autogenerate still finds anything to do
    return set(inspect(conn).get_table_names())


ONLY_USERS = ["op.create_table('users',", "op.drop_table('users')"]


async def test_a_services_autogenerate_leaves_sessiondb_alone(
    db_url: str, empty_db_url: str, tmp_path: Path
) -> None:
    # On a database sessiondb has migrated: the revision creates the service's table only.
    migrated = service_env(tmp_path / "migrated")
    ops = await with_connection(db_url, lambda c: autogenerate(migrated, c, "m1", True))
    assert ops == ONLY_USERS
    tables = await with_connection(db_url, lambda c: upgrade_and_check(migrated, c))
    assert {SESSIONS, RECORDS, TURNS} <= set(metadata.tables)
    # Beside them on SQLite: the FTS5 search table and its shadow tables (migration 0006),
    # which no Table describes; sessiondb's filter leaves them alone too (ops above).
    search_tables = {t for t in tables if is_search_table(t)}
    assert tables - search_tables == {*metadata.tables, VERSION_TABLE, "users", "alembic_version"}
    # The control: unfiltered, the same service would drop sessiondb's version table.
    unfiltered = await with_connection(db_url, lambda c: autogenerate(migrated, c, "x1", False))
    assert f"op.drop_table('{VERSION_TABLE}')" in unfiltered

    # On a database sessiondb has not migrated yet: nothing of sessiondb's is created
    # either; without the filter the service would create sessiondb's tables itself.
    fresh = service_env(tmp_path / "fresh")
    ops = await with_connection(empty_db_url, lambda c: autogenerate(fresh, c, "f1", True))
    assert ops == ONLY_USERS
    control = service_env(tmp_path / "fresh-control")
    unfiltered = await with_connection(
        empty_db_url, lambda c: autogenerate(control, c, "c1", False)
    )
    created = {line.split("'")[1] for line in unfiltered if line.startswith("op.create_table(")}
    assert created == {*metadata.tables, "users"}
    assert VERSION_TABLE not in " ".join(ops)
