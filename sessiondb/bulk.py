"""Many new sessions with their messages at bulk speed (:meth:`SessionStore.import_sessions`).

COPY on Postgres, one multi-row insert per batch on SQLite. Each session is written
whole or not at all: sessions are grouped into transactions of about ``batch_records``
records, and a batch is checked completely before any of it is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from . import statements as q
from .backends import IntegrityViolation
from .core import KEY_INDEX, now
from .errors import ConflictError, InvalidInputError
from .models import NewSession
from .rows import HeadDelta, NewRecord, head_counters, message_record, new_session_row
from .tables import records, sessions
from .validation import check_record_size, first_error

if TYPE_CHECKING:
    from .backends import Transaction
    from .core import Core

Batch = list[tuple[dict[str, Any], list[NewRecord]]]


async def import_sessions(
    core: Core, items: Iterable[NewSession | Mapping[str, Any]], batch_records: int
) -> list[str]:
    """Write ``items`` in batches; the new sessions' ids, in order."""
    ids: list[str] = []
    batch: Batch = []
    keys: dict[str, int] = {}  # key -> index of the session that has it
    size = 0
    for index, item in enumerate(items):
        values, rows = _prepare(core, item, index)
        key = values["key"]
        if key is not None:
            if key in keys:
                raise InvalidInputError(
                    f"session {index}: key {key!r} is given to session {keys[key]} too"
                )
            keys[key] = index
        batch.append((values, rows))
        ids.append(values["id"])
        size += len(rows) + 1
        if size >= batch_records:
            await _write_batch(core, batch)
            batch, size = [], 0
    if batch:
        await _write_batch(core, batch)
    return ids


def _prepare(
    core: Core, item: NewSession | Mapping[str, Any], index: int
) -> tuple[dict[str, Any], list[NewRecord]]:
    """One session's row and records, checked; errors name the session's index."""
    try:
        new = item if isinstance(item, NewSession) else NewSession.model_validate(item)
    except ValidationError as exc:
        raise InvalidInputError(f"session {index}: {first_error(exc)}") from None
    try:
        # The NewSession validated just now checked its dicts; one handed in may have
        # been changed since it was built.
        checked = new is not item
        rows = [
            message_record(m, i, model=False, checked=checked) for i, m in enumerate(new.messages)
        ]
        for i, row in enumerate(rows):
            check_record_size(row.payload, core.max_record_bytes, f"message {i}")
        uuids = [r.uuid for r in rows if r.uuid is not None]
        if len(set(uuids)) != len(uuids):
            raise InvalidInputError("the same uuid appears twice")
        values = new_session_row(
            core.namespace,
            core.max_record_bytes,
            now(),
            name=new.name,
            model=new.model,
            source=new.source,
            cron_job_id=new.cron_job_id,
            system_prompt_override=new.system_prompt_override,
            metadata=new.metadata,
            key=new.key,
        )
    except InvalidInputError as exc:
        raise InvalidInputError(f"session {index}: {exc}") from None
    delta = HeadDelta.of(rows)
    values.update(head_counters(len(rows), delta.messages, delta.tokens, delta.cost))
    if values["name"] is None:
        values["name"] = delta.name
    return values, rows


async def _write_batch(core: Core, batch: Batch) -> None:
    at = now()
    session_rows = [tuple(v[c] for c in q.SESSION_COLUMN_NAMES) for v, _ in batch]
    record_rows = [
        row.values(values["id"], seq, at, core.search_indexing)
        for values, rows in batch
        for seq, row in enumerate(rows, start=1)
    ]

    async def unit(tx: Transaction) -> None:
        await tx.insert(sessions, session_rows)
        await tx.insert(records, core.indexable(record_rows))

    try:
        await core.transact(unit)
    except IntegrityViolation as exc:
        if exc.constraint != KEY_INDEX:
            raise
        raise ConflictError(
            f"a session's key is taken in namespace {core.namespace!r} already; no "
            f"session of this batch was written ({exc.detail})"
        ) from exc
