"""Pure round-trip helpers: neutral records → the Record models the store would return."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessiondb import jsoncodec
from sessiondb.formats import ImportedRecord, ImportedSession
from sessiondb.formats.base import parse_json
from sessiondb.models import Compaction, Message, Metrics, Record, SessionInfo, Tombstone

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
SESSION_ID = "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"


def stored(
    session: ImportedSession, session_id: str = SESSION_ID
) -> tuple[SessionInfo, list[Record]]:
    """Consume ``session`` and build what the store would return for it (seq = base+i+1)."""
    records = list(session.records)
    return info_of(session, session_id), to_records(records, session_id, session.fork_seq or 0)


def to_records(records: Iterable[ImportedRecord], session_id: str, base: int = 0) -> list[Record]:
    out: list[Record] = []
    last = EPOCH
    for i, r in enumerate(records):
        # The store keeps payloads as JSON text; go through it as the store would.
        payload = jsoncodec.loads(jsoncodec.dumps(r.payload))
        last = r.created_at or last
        fields: dict[str, Any] = {}
        if r.kind == "message":
            fields["message"] = Message.model_validate(payload)
        elif r.kind == "compaction":
            assert r.first_kept is not None
            payload["firstKeptSeq"] = base + r.first_kept + 1
            fields["compaction"] = Compaction.model_validate(payload)
        elif r.kind == "tombstone":
            assert r.target is not None
            payload["targetSeq"] = base + r.target + 1
            fields["tombstone"] = Tombstone.model_validate(payload)
        else:
            fields["entry"] = payload
        out.append(
            Record(
                session_id=session_id,
                seq=base + i + 1,
                kind=r.kind,
                created_at=last,
                uuid=r.uuid,
                **fields,
            )
        )
    return out


def info_of(session: ImportedSession, session_id: str = SESSION_ID) -> SessionInfo:
    d = session.details
    return SessionInfo(
        id=session_id,
        namespace="default",
        name=d.name,
        created_at=d.created_at or EPOCH,
        last_message_at=None,
        model=d.model,
        message_count=0,
        last_seq=0,
        source=d.source,
        cron_job_id=d.cron_job_id,
        system_prompt_override=d.system_prompt_override,
        metrics=Metrics(),
        metadata=d.metadata or None,
        parent_id=None,
        fork_seq=session.fork_seq,
    )


def json_lines(path: Path) -> list[Any]:
    """The JSON values of a file's non-blank lines (text for lines that are not JSON)."""
    out: list[Any] = []
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    for raw in data.split(b"\n"):
        raw = raw.removesuffix(b"\r")
        if not raw.strip():
            continue
        try:
            out.append(parse_json(raw))
        except (ValueError, UnicodeDecodeError):
            out.append(("not json", raw))
    return out
