"""Pure round-trip helpers: neutral records → the Record models the store would return."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessiondb import jsoncodec
from sessiondb.formats import ImportedRecord, ImportedSession, base
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


def claude_code_project(folder: Path, files: int, lines: int, padding: int = 0) -> Path:
    """A Claude Code project directory of ``files`` transcripts of ``lines`` lines each
    (user and assistant alternating, each a chain on the one before), each line
    ``padding`` characters longer; file stems start with the folder's name."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        stem = f"{folder.name}-{f:03d}"
        with (folder / f"{stem}.jsonl").open("w") as out:
            parent = None
            for i in range(lines):
                role = "user" if i % 2 == 0 else "assistant"
                uuid = f"{stem}-{i:05d}"
                text = f"{i} {'x' * padding}" if padding else f"{i}"
                line = {
                    "type": role,
                    "uuid": uuid,
                    "parentUuid": parent,
                    "sessionId": stem,
                    "timestamp": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
                    "message": {"role": role, "content": [{"type": "text", "text": text}]},
                }
                out.write(json.dumps(line) + "\n")
                parent = uuid
    return folder


def count_disk_maps(monkeypatch: Any, module: Any, threshold: int) -> list[base.DiskMap]:
    """Lower the spill threshold of a reader ``module`` (looked at every 16 lines); the
    disk maps made."""
    monkeypatch.setattr(module, "SPILL_CHECK", 16)
    monkeypatch.setattr(base, "SPILL_ENTRIES", threshold)
    made: list[base.DiskMap] = []
    real = base.DiskMap.__init__

    def counting(self: base.DiskMap, items: dict[str, Any]) -> None:
        made.append(self)
        real(self, items)

    monkeypatch.setattr(base.DiskMap, "__init__", counting)
    return made
