"""Full-text search: ``sessiondb_records.search`` (a ``tsvector`` on Postgres, with a
partial GIN index) and, on SQLite, the FTS5 table ``sessiondb_search`` (rowid = the
record's rowid) with a trigger that deletes a record's row from it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

Adding a nullable column is instant on both databases. The existing messages and
compaction summaries are then indexed in batches of ``BATCH`` records in rowid / key
order, their text taken out of the payload by the same Python function every write uses
(:func:`sessiondb.search_text.payload_index_source`), so memory stays bounded however big
the table is. On Postgres the GIN index is built after the fill (one sort instead of
an index insert per row). The downgrade drops the index, the column, the FTS5 table and
the trigger; the records stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from sessiondb.search_text import payload_index_source

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RECORDS = "sessiondb_records"
SEARCH = "sessiondb_search"
TRIGGER = "sessiondb_search_delete"
INDEX = "ix_sessiondb_records_search"
BATCH = 2_000


def _config() -> str:
    """The text search configuration of the fill: the migrating store's (``search_config``),
    ``simple`` by default."""
    found = op.get_context().config
    value = found.attributes.get("search_config") if found is not None else None
    return value if isinstance(value, str) else "simple"


def _batches(conn: sa.Connection, sqlite: bool) -> Any:
    """Batches of ``(key, kind, payload)`` of the searched records, in key order."""
    key = "rowid" if sqlite else "session_id, seq"
    after: tuple[Any, ...] | None = None
    while True:
        if after is None:
            where, params = "", {}
        elif sqlite:
            where, params = "AND rowid > :a", {"a": after[0]}
        else:
            where, params = "AND (session_id, seq) > (:a, :b)", {"a": after[0], "b": after[1]}
        rows = conn.execute(
            sa.text(
                f"SELECT {key}, kind, payload FROM {RECORDS} "
                f"WHERE kind IN ('message', 'compaction') {where} ORDER BY {key} LIMIT {BATCH}"
            ),
            params,
        ).all()
        if not rows:
            return
        yield rows
        after = tuple(rows[-1])[: 1 if sqlite else 2]


def upgrade() -> None:
    conn = op.get_bind()
    sqlite = conn.dialect.name == "sqlite"
    # Offline (``alembic upgrade --sql``) there are no rows to read: the DDL only.
    fill = not op.get_context().as_sql
    op.add_column(
        RECORDS,
        sa.Column("search", postgresql.TSVECTOR().with_variant(sa.Text(), "sqlite")),
    )
    if sqlite:
        op.execute(
            f"CREATE VIRTUAL TABLE {SEARCH} USING fts5(body, thinking, "
            "tokenize = 'unicode61 remove_diacritics 0')"
        )
        op.execute(
            f"CREATE TRIGGER {TRIGGER} AFTER DELETE ON {RECORDS} "
            f"BEGIN DELETE FROM {SEARCH} WHERE rowid = old.rowid; END"
        )
        insert = sa.text(f"INSERT INTO {SEARCH} (rowid, body, thinking) VALUES (:r, :b, :t)")
        for rows in _batches(conn, True) if fill else ():
            values = []
            for rowid, kind, payload in rows:
                source = payload_index_source(kind, payload)
                if source is not None:
                    values.append({"r": rowid, "b": source[0], "t": source[1]})
            if values:
                conn.execute(insert, values)
        op.create_index(
            op.f(INDEX), RECORDS, ["search"], sqlite_where=sa.text("search IS NOT NULL")
        )
        return
    update = sa.text(
        f"UPDATE {RECORDS} AS r SET search = CASE WHEN u.thinking IS NULL "
        "THEN to_tsvector(CAST(:cfg AS regconfig), u.body) "
        "ELSE to_tsvector(CAST(:cfg AS regconfig), u.body) "
        "|| setweight(to_tsvector(CAST(:cfg AS regconfig), u.thinking), 'A') END "
        "FROM unnest(CAST(:sids AS text[]), CAST(:seqs AS bigint[]), CAST(:bodies AS text[]), "
        "CAST(:thinkings AS text[])) AS u(sid, seq, body, thinking) "
        "WHERE r.session_id = u.sid AND r.seq = u.seq"
    )
    cfg = _config()
    for rows in _batches(conn, False) if fill else ():
        sids, seqs, bodies, thinkings = [], [], [], []
        for sid, seq, kind, payload in rows:
            source = payload_index_source(kind, payload)
            if source is not None:
                sids.append(sid)
                seqs.append(seq)
                bodies.append(source[0])
                thinkings.append(source[1])
        if sids:
            conn.execute(
                update,
                {"cfg": cfg, "sids": sids, "seqs": seqs, "bodies": bodies, "thinkings": thinkings},
            )
    op.create_index(
        op.f(INDEX),
        RECORDS,
        ["search"],
        postgresql_using="gin",
        postgresql_where=sa.text("search IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(op.f(INDEX), table_name=RECORDS)
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"DROP TRIGGER {TRIGGER}")
        op.execute(f"DROP TABLE {SEARCH}")
    # A plain ALTER TABLE … DROP COLUMN, as in 0003: a batch rebuild would re-create
    # the records table.
    op.drop_column(RECORDS, "search")
