"""Sessions by the caller's own key: ``sessiondb_sessions.key`` and a unique index on
``(namespace, key)``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

Both steps are plain DDL on both databases: SQLite adds a nullable column and builds an
index without rebuilding the table, and existing sessions get no key (NULL, which the
unique index never counts as a collision).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "sessiondb_sessions"
INDEX = "ix_sessiondb_sessions_namespace_key"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("key", sa.Text(), nullable=True))
    op.create_index(op.f(INDEX), TABLE, ["namespace", "key"], unique=True)


def downgrade() -> None:
    # The older schema has no place for keys: they are dropped, the sessions stay.
    op.drop_index(op.f(INDEX), table_name=TABLE)
    # A plain ALTER TABLE … DROP COLUMN (SQLite >= 3.35, which sessiondb needs for
    # RETURNING anyway): a batch rebuild would drop and re-create the sessions table,
    # and with foreign keys on, dropping it would cascade to every record.
    op.drop_column(TABLE, "key")
