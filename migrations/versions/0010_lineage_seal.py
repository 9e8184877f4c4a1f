"""An encrypted session's lineage, sealed: ``sessiondb_sessions.lineage_seal``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

In an encrypted namespace each session holds an AES-GCM tag whose associated data is its
``parent_id`` and ``fork_seq`` (``sessiondb.crypto.lineage_context``), so that pointing a
fork at another parent by SQL fails authentication instead of swapping the history it
inherits. A nullable column, plain DDL on both databases; existing sessions get NULL,
and ``rotate_keys(reencrypt=True)`` seals them (docs/guides/encryption.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "sessiondb_sessions"


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("lineage_seal", sa.Text(), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN, as 0003's downgrade says why (no batch rebuild of sessions).
    op.drop_column(TABLE, "lineage_seal")
