"""Google ADK sessions: ``sessiondb_adk_sessions`` (ADK's address and session state of
a sessiondb session) and ``sessiondb_adk_state`` (ADK's ``app:`` and ``user:`` state).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

New tables only; the sessions and records tables are untouched, so the upgrade is
instant on a big database. The downgrade drops both tables: the ADK sessions' events
stay as sessiondb sessions (their ADK address stays in their metadata), their state goes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SESSIONS = "sessiondb_adk_sessions"
STATE = "sessiondb_adk_state"


def upgrade() -> None:
    op.create_table(
        SESSIONS,
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("app_name", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("adk_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.String(length=26), nullable=False),
        sa.Column("state_json", sa.Text(), nullable=False),
        sa.Column("update_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessiondb_sessions.id"],
            name=op.f("fk_sessiondb_adk_sessions_session_id_sessiondb_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "namespace", "app_name", "user_id", "adk_id", name=op.f("pk_sessiondb_adk_sessions")
        ),
        sa.UniqueConstraint("session_id", name=op.f("uq_sessiondb_adk_sessions_session_id")),
    )
    op.create_table(
        STATE,
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("app_name", sa.Text(), nullable=False),
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("state_json", sa.Text(), nullable=False),
        sa.CheckConstraint("scope IN ('app', 'user')", name=op.f("ck_sessiondb_adk_state_scope")),
        sa.PrimaryKeyConstraint(
            "namespace", "app_name", "scope", "user_id", name=op.f("pk_sessiondb_adk_state")
        ),
    )


def downgrade() -> None:
    op.drop_table(STATE)
    op.drop_table(SESSIONS)
