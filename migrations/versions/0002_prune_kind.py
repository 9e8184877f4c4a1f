"""Record kind ``prune``: the pruning overlay of compaction's first phase.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28

Only the check constraint on ``kind`` changes. SQLite cannot alter a constraint, so
batch mode rebuilds the records table (copying its rows, keys and index); Postgres
drops and re-adds the constraint in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "sessiondb_records"
CONSTRAINT = "ck_sessiondb_records_kind"
OLD_KINDS = "kind IN ('message', 'compaction', 'tombstone', 'entry')"
NEW_KINDS = "kind IN ('message', 'compaction', 'tombstone', 'entry', 'prune')"


def _records(kinds: str) -> sa.Table:
    """The records table as 0001 made it, with the check on ``kind`` given: batch mode
    copies this instead of reflecting the table, so ``--sql`` works on SQLite too."""
    return sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("session_id", sa.String(length=26), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("uuid", sa.Text(), nullable=True),
        sa.Column("parent_uuid", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("target_seq", sa.BigInteger(), nullable=True),
        sa.Column("first_kept_seq", sa.BigInteger(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.CheckConstraint(kinds, name=op.f(CONSTRAINT)),
        sa.CheckConstraint("seq > 0", name=op.f("ck_sessiondb_records_seq_positive")),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessiondb_sessions.id"],
            name=op.f("fk_sessiondb_records_session_id_sessiondb_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f("pk_sessiondb_records")),
        sa.UniqueConstraint(
            "session_id", "uuid", name=op.f("uq_sessiondb_records_session_id_uuid")
        ),
        sa.Index(op.f("ix_sessiondb_records_session_id_kind_seq"), "session_id", "kind", "seq"),
    )


def _replace_kind_check(old: str, new: str) -> None:
    with op.batch_alter_table(TABLE, copy_from=_records(old)) as batch:
        batch.drop_constraint(op.f(CONSTRAINT), type_="check")
        batch.create_check_constraint(op.f(CONSTRAINT), new)


def upgrade() -> None:
    _replace_kind_check(OLD_KINDS, NEW_KINDS)


def downgrade() -> None:
    # The older schema cannot hold prune records; without them the context shows the
    # tool results in full again, which is what an older sessiondb would show anyway.
    records = sa.table(TABLE, sa.column("kind", sa.String()))
    op.execute(records.delete().where(records.c.kind == "prune"))
    _replace_kind_check(NEW_KINDS, OLD_KINDS)
