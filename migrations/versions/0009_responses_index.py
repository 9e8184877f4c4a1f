"""The responses index: a partial index of the assistant messages whose stored text names
a response (``"responseId"``), by ``(session_id, seq)``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28

A context read joins the kept messages' stored texts (``SessionStore.context_json``)
and must merge the parts of a split response, which share a ``responseId``; it searched
every kept text for the key, which cost about a fifth of a 200-message read. The
database now fills this index from each row's own text, whoever writes it (an older
version of sessiondb in a rolling upgrade too), so a session with no entry from its
kept range on holds no split response there, and the read skips the search. The
records a session appends without the key cost the index nothing but the test of
their text.

Built by a plain ``CREATE INDEX`` in the migration's transaction, which holds off writes
to the records while it reads them; on a large service build it ahead with
``CREATE INDEX CONCURRENTLY`` under the same name and definition, and this migration
finds it made. Before it runs, reads answer the same, by reading the kept messages'
texts for the key. The downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RECORDS = "sessiondb_records"
INDEX = "ix_sessiondb_records_responses"
# As sessiondb.tables.response_predicate spells it (a migration keeps its own copy: the
# package's may change in a later revision).
KEY = '"responseId"'


def _where(contains: str) -> sa.TextClause:
    return sa.text(f"role = 'assistant' AND {contains}(payload, '{KEY}') > 0")


def upgrade() -> None:
    op.create_index(
        op.f(INDEX),
        RECORDS,
        ["session_id", "seq"],
        postgresql_where=_where("strpos"),
        sqlite_where=_where("instr"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index(op.f(INDEX), table_name=RECORDS)
