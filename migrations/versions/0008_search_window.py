"""The search window's order: a partial index of the indexed records on
``(created_at, session_id, seq)``, the newest first when read backwards.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

A search ranks only the newest matches of a query (``sessiondb.search.WINDOW``). On
Postgres the GIN index finds matches in no order, so a common word's window is read
from this index instead, newest first, each record checked against the query: the work
grows with the window, not with the table. Partial (``search IS NOT NULL``), like the
GIN index: the records search never sees cost it nothing. On SQLite, whose ``search``
column stays NULL (its index is the FTS5 table, whose rowids give the order), the index
is made too and stays empty. The downgrade drops it.

Built by a plain ``CREATE INDEX`` in the migration's transaction, which holds off writes
to the records while it runs (about 10 s per million indexed records, measured on 2M);
on a large service build it ahead with ``CREATE INDEX CONCURRENTLY`` under the same name
and definition, and this migration finds it made.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RECORDS = "sessiondb_records"
INDEX = "ix_sessiondb_records_created_at_session_id_seq"


def upgrade() -> None:
    op.create_index(
        op.f(INDEX),
        RECORDS,
        ["created_at", "session_id", "seq"],
        postgresql_where=sa.text("search IS NOT NULL"),
        sqlite_where=sa.text("search IS NOT NULL"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index(op.f(INDEX), table_name=RECORDS)
