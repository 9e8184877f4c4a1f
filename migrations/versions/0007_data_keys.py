"""Encryption at rest: ``sessiondb_data_keys``, each encrypted namespace's data keys
wrapped by a master key.

Revision ID: 0007
Revises: 0005
Create Date: 2026-11-25

A new table only: existing rows are untouched and stay unencrypted (a namespace without
data keys is a plain one). The downgrade drops the table, and with it the only way to
read what encrypted namespaces hold: export them first.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "sessiondb_data_keys"
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("master_key_id", sa.Text(), nullable=False),
        sa.Column("wrapped_key", sa.Text(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("completed_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint("version > 0", name=op.f("ck_sessiondb_data_keys_version_positive")),
        sa.PrimaryKeyConstraint("namespace", "version", name=op.f("pk_sessiondb_data_keys")),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
