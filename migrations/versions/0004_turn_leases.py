"""Turn leases: ``sessiondb_turns``, one row per holder or waiter of a session's turn.

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-22

A new table only; the sessions and records tables are untouched, so the upgrade is
instant on a big database. The downgrade drops the table: turns in progress lose their
leases (their next ``turn.append`` fails against the older code's missing table, which
is what an older sessiondb does anyway).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "sessiondb_turns"
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("session_id", sa.String(length=26), nullable=False),
        sa.Column("ticket", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("enqueued_at", TIMESTAMP, nullable=False),
        sa.Column("acquired_at", TIMESTAMP, nullable=True),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessiondb_sessions.id"],
            name=op.f("fk_sessiondb_turns_session_id_sessiondb_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "ticket", name=op.f("pk_sessiondb_turns")),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
