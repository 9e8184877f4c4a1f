"""An encrypted session's lineage, sealed: ``sessiondb_lineage_seals``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

In an encrypted namespace each session has a row here holding an AES-GCM tag whose
associated data is its ``parent_id`` and ``fork_seq`` (``sessiondb.crypto.lineage_context``),
so that pointing a fork at another parent by SQL fails authentication instead of swapping
the history it inherits. A table of its own, not a column of ``sessiondb_sessions``: only
encrypted stores write and read it, so a plain store's statements are those of the
release before and run on a schema this revision has not reached yet (new code ahead of
``migrate`` in a rolling upgrade). A new table only, instant on a big database; existing
encrypted sessions have no row until ``rotate_keys(reencrypt=True)`` seals them
(docs/guides/encryption.md). The downgrade drops the table (an encrypted store of this
release then refuses the schema and says to migrate).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "sessiondb_lineage_seals"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("namespace", sa.String(length=255), nullable=False),
        sa.Column("session_id", sa.String(length=26), nullable=False),
        sa.Column("seal", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessiondb_sessions.id"],
            name=op.f("fk_sessiondb_lineage_seals_session_id_sessiondb_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("namespace", "session_id", name=op.f("pk_sessiondb_lineage_seals")),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
