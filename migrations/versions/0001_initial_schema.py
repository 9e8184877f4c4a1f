"""Initial schema: sessions (the head of each stream) and records (append-only).

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Every column the later features need is here (record kinds, fork parent and point,
namespace, metrics, source and cron job id, system prompt override, external uuid and
parent uuid), so compaction, tombstones, forks and import need no schema change.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=26)
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sessiondb_sessions",
        sa.Column("id", ID, nullable=False),
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_message_at", TIMESTAMP, nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("cron_job_id", sa.Text(), nullable=True),
        sa.Column("system_prompt_override", sa.Text(), nullable=True),
        sa.Column("metadata_json", sa.Text(), nullable=True),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("message_count", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_total", sa.Float(), nullable=False),
        sa.Column("parent_id", ID, nullable=True),
        sa.Column("fork_seq", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "source IN ('interactive', 'cron')", name=op.f("ck_sessiondb_sessions_source")
        ),
        sa.CheckConstraint(
            "(parent_id IS NULL) = (fork_seq IS NULL)",
            name=op.f("ck_sessiondb_sessions_fork_point"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["sessiondb_sessions.id"],
            name=op.f("fk_sessiondb_sessions_parent_id_sessiondb_sessions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessiondb_sessions")),
    )
    op.create_index(
        op.f("ix_sessiondb_sessions_namespace_last_message_at_id"),
        "sessiondb_sessions",
        ["namespace", "last_message_at", "id"],
    )
    op.create_index(op.f("ix_sessiondb_sessions_parent_id"), "sessiondb_sessions", ["parent_id"])

    op.create_table(
        "sessiondb_records",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("uuid", sa.Text(), nullable=True),
        sa.Column("parent_uuid", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("target_seq", sa.BigInteger(), nullable=True),
        sa.Column("first_kept_seq", sa.BigInteger(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "kind IN ('message', 'compaction', 'tombstone', 'entry')",
            name=op.f("ck_sessiondb_records_kind"),
        ),
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
    )
    op.create_index(
        op.f("ix_sessiondb_records_session_id_kind_seq"),
        "sessiondb_records",
        ["session_id", "kind", "seq"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_sessiondb_records_session_id_kind_seq"), table_name="sessiondb_records")
    op.drop_table("sessiondb_records")
    op.drop_index(op.f("ix_sessiondb_sessions_parent_id"), table_name="sessiondb_sessions")
    op.drop_index(
        op.f("ix_sessiondb_sessions_namespace_last_message_at_id"),
        table_name="sessiondb_sessions",
    )
    op.drop_table("sessiondb_sessions")
