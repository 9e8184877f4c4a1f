"""Pure round-trip helpers: neutral records → the Record models the store would return."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessiondb import jsoncodec
from sessiondb.formats import ImportedRecord, ImportedSession, spill
from sessiondb.formats.base import parse_json
from sessiondb.models import Compaction, Message, Metrics, Record, SessionInfo, Tombstone

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


def count_disk_maps(monkeypatch: Any, module: Any, threshold: int) -> list[spill.DiskMap]:
    """Lower the spill threshold of a reader ``module`` (looked at every 16 lines); the
    disk maps made."""
    monkeypatch.setattr(module, "SPILL_CHECK", 16)
    monkeypatch.setattr(spill, "SPILL_ENTRIES", threshold)
    made: list[spill.DiskMap] = []
    real = spill.DiskMap.__init__

    def counting(self: spill.DiskMap, items: dict[str, Any]) -> None:
        made.append(self)
        real(self, items)

    monkeypatch.setattr(spill.DiskMap, "__init__", counting)
    return made


# -- generated files of every format (what the corpus has, made here) -----------------------


@dataclass(frozen=True)
class Generated:
    """One generated session file: ``path`` is read (and imported) through ``source``
    (itself; a subagent's main file; a native file's directory) as ``key`` in ``fmt``;
    exported, it is written at ``relative`` under the export directory."""

    case: str
    path: Path
    fmt: str
    key: str
    relative: str

    @property
    def source(self) -> Path:
        if self.fmt == "native":
            return self.path.parent
        if "subagents" in self.path.parts:
            return self.path.parents[2] / f"{self.path.parents[1].name}.jsonl"
        return self.path


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _cc(kind: str, uuid: str, parent: str | None, session: str, **fields: Any) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": session,
        "type": kind,
        "uuid": uuid,
        "timestamp": f"2026-02-12T20:{len(uuid) % 60:02d}:00.000Z",
        **fields,
    }


def claude_code_lines(session: str, prefix: str = "") -> list[dict[str, Any]]:
    """A Claude Code transcript with what the real ones hold: a snapshot line without a
    uuid, plain and block user text, a response split over lines (thinking, then a tool
    call) with its usage on each part, progress lines, the tool's result, a compact
    boundary and its summary, and a model's closing text."""
    p = prefix

    def usage(output: int) -> dict[str, Any]:
        return {
            "input_tokens": 3,
            "output_tokens": output,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 7,
        }

    def answer(uuid: str, parent: str, msg_id: str, blocks: list[Any], out: int) -> dict[str, Any]:
        message = {
            "model": "claude-opus-4-6",
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "content": blocks,
            "stop_reason": None,
            "usage": usage(out),
        }
        return _cc("assistant", uuid, parent, session, message=message, requestId=f"req-{msg_id}")

    call = {"type": "tool_use", "id": f"{p}toolu_1", "name": "Read", "input": {"path": "a.py"}}
    result = [{"type": "tool_result", "tool_use_id": f"{p}toolu_1", "content": "print(1)\n"}]
    return [
        {"type": "file-history-snapshot", "messageId": f"{p}u1", "snapshot": {"files": {}}},
        _cc("user", f"{p}u1", None, session, message={"role": "user", "content": "fix a.py"}),
        answer(f"{p}a1", f"{p}u1", f"{p}msg_1", [{"type": "thinking", "thinking": "look"}], 10),
        answer(f"{p}a2", f"{p}a1", f"{p}msg_1", [call], 42),
        _cc("progress", f"{p}p1", f"{p}a2", session, data={"type": "hook_progress"}),
        _cc(
            "user",
            f"{p}r1",
            f"{p}p1",
            session,
            message={"role": "user", "content": result},
            toolUseResult={"stdout": "print(1)\n"},
        ),
        _cc(
            "system",
            f"{p}b1",
            None,
            session,
            logicalParentUuid=f"{p}r1",
            subtype="compact_boundary",
            content="Conversation compacted",
            compactMetadata={"trigger": "auto", "preTokens": 1234},
        ),
        _cc(
            "user",
            f"{p}s1",
            f"{p}b1",
            session,
            message={"role": "user", "content": "This session is being continued: a.py."},
            isCompactSummary=True,
        ),
        _cc(
            "user",
            f"{p}u2",
            f"{p}s1",
            session,
            message={"role": "user", "content": [{"type": "text", "text": "and b.py"}]},
        ),
        answer(f"{p}a3", f"{p}u2", f"{p}msg_2", [{"type": "text", "text": "done"}], 5),
    ]


def pi_lines(version: int) -> list[dict[str, Any]]:
    """A pi session of ``version`` 1 (entries by index), 2 or 3 (entries by id, a tree):
    a model change, messages of each role with blocks, a tool call and its result, a
    compaction and a label."""
    header: dict[str, Any] = {
        "type": "session",
        "id": f"pi-v{version}",
        "timestamp": "2025-11-20T23:33:50.805Z",
        "cwd": "/work",
    }
    if version > 1:
        header["version"] = version
    at = "2025-11-20T23:34:00.000Z"
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    entries: list[dict[str, Any]] = [
        {"type": "model_change", "timestamp": at, "provider": "anthropic", "modelId": "m-1"},
        {"type": "message", "timestamp": at, "message": {"role": "user", "content": "list"}},
        {
            "type": "message",
            "timestamp": at,
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "listing"}, call],
                "provider": "anthropic",
                "model": "m-1",
                "usage": {"input": 3, "output": 9, "cacheRead": 0, "cacheWrite": 0},
                "stopReason": "toolUse",
                "timestamp": 2,
            },
        },
        {
            "type": "message",
            "timestamp": at,
            "message": {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "bash",
                "content": [{"type": "text", "text": "a.py"}],
                "isError": False,
                "timestamp": 3,
            },
        },
        {"type": "message", "timestamp": at, "message": {"role": "user", "content": "thanks"}},
    ]
    compaction: dict[str, Any] = {
        "type": "compaction",
        "timestamp": at,
        "summary": "listed the files",
        "tokensBefore": 321,
    }
    if version == 1:
        compaction["firstKeptEntryIndex"] = 4  # the header counts
        entries.append(compaction)
    else:
        for i, entry in enumerate(entries):
            entry["id"] = f"e{i}"
            entry["parentId"] = f"e{i - 1}" if i else None
        compaction |= {"id": "k", "parentId": f"e{len(entries) - 1}", "firstKeptEntryId": "e3"}
        entries.append(compaction)
        if version == 3:
            entries.append(
                {"type": "label", "id": "l", "parentId": "k", "targetId": "e1", "label": "start"}
            )
    last = entries[-1].get("id")
    closing: dict[str, Any] = {"type": "message", "timestamp": at}
    closing["message"] = {"role": "user", "content": "bye"}
    if version > 1:
        closing |= {"id": "z", "parentId": last}
    return [header, *entries, closing]


def generated_tree(root: Path) -> list[Generated]:
    """A directory of generated session files, one or more per format and form sessiondb
    reads: Claude Code with two subagents and a cersei session in two parts, pi versions
    1 to 3, noumen, native (a Claude Code session written by the native writer)."""
    from sessiondb.formats import FORMATS, read_path

    cc = root / "claude-code"
    main = "0a1b2c3d-0000-4000-8000-000000000001"
    _write_lines(cc / f"{main}.jsonl", claude_code_lines(main))
    for agent in ("agent-a1", "agent-a2"):
        _write_lines(
            cc / main / "subagents" / f"{agent}.jsonl", claude_code_lines(main, f"{agent}-")
        )
    cersei: list[dict[str, Any]] = [
        {"type": "user", "uuid": "c1", "parentUuid": None, "sessionId": "cersei-1",
         "timestamp": "2026-04-03T10:00:00Z", "message": {"role": "user", "content": "go"}},
        {"type": "assistant", "uuid": "c2", "parentUuid": "c1", "sessionId": "cersei-1",
         "timestamp": "2026-04-03T10:00:01Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}},
    ]  # fmt: skip
    _write_lines(cc / "cersei-1.jsonl", cersei[:1])
    _write_lines(cc / "cersei-1_part2.jsonl", cersei[1:])
    for version in (1, 2, 3):
        _write_lines(root / "pi" / f"v{version}.jsonl", pi_lines(version))
    _write_lines(root / "noumen" / f"{NOUMEN_ID}.jsonl", noumen_lines())
    # The native file holds a Claude Code session of its own (two sessions naming one
    # file would have one exported under its id).
    source = _write_lines(root / "native-source" / "native-src.jsonl", claude_code_lines("n"))
    info, records = stored(next(read_path(source)), NATIVE_ID)
    FORMATS["native"].write(info, records, root / "native")
    shutil.rmtree(source.parent)

    agents = f"{main}/subagents"
    return [
        Generated("claude-code", cc / f"{main}.jsonl", "claude-code", f"claude-code:{main}",
                  f"{main}.jsonl"),
        *(Generated(f"claude-code-{a}", cc / agents / f"{a}.jsonl", "claude-code",
                    f"claude-code:{main}/{a}", f"{agents}/{a}.jsonl")
          for a in ("agent-a1", "agent-a2")),
        Generated("cersei-parts", cc / "cersei-1.jsonl", "claude-code", "claude-code:cersei-1",
                  "cersei-1.jsonl"),
        Generated("cersei-part2", cc / "cersei-1_part2.jsonl", "claude-code",
                  "claude-code:cersei-1", "cersei-1_part2.jsonl"),
        *(Generated(f"pi-v{v}", root / "pi" / f"v{v}.jsonl", "pi", f"pi:pi-v{v}", f"v{v}.jsonl")
          for v in (1, 2, 3)),
        Generated("noumen", root / "noumen" / f"{NOUMEN_ID}.jsonl", "noumen",
                  f"noumen:{NOUMEN_ID}", f"{NOUMEN_ID}.jsonl"),
        Generated("native", root / "native" / NATIVE_ID / "session.jsonl", "native",
                  f"native:{NATIVE_ID}", f"{NATIVE_ID}/session.jsonl"),
    ]  # fmt: skip


def noumen_lines() -> list[dict[str, Any]]:
    """A noumen session: a title, a system prompt, a tool call and its result, a compact
    boundary and its summary, a closing answer."""

    def entry(kind: str, n: int, **fields: Any) -> dict[str, Any]:
        return {
            "type": kind,
            "uuid": f"n{n}",
            "parentUuid": f"n{n - 1}" if n > 1 else None,
            "sessionId": NOUMEN_ID,
            "timestamp": f"2026-03-01T10:00:{n:02d}.000Z",
            **fields,
        }

    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        entry("custom-title", 1, title="Generated"),
        entry("message", 2, message={"role": "system", "content": "Be brief."}),
        entry("message", 3, message={"role": "user", "content": "list files"}),
        entry("message", 4, message={"role": "assistant", "content": None, "tool_calls": [call]}),
        entry("message", 5, message={"role": "tool", "tool_call_id": "call_1", "content": "a"}),
        entry("compact-boundary", 6, tokensBefore=99),
        entry("summary", 7, message={"role": "user", "content": "We listed a file."}),
        entry("message", 8, message={"role": "assistant", "content": "One file."}),
    ]


#: The cases :func:`generated_tree` gives, in its order.
GENERATED = (
    "claude-code",
    "claude-code-agent-a1",
    "claude-code-agent-a2",
    "cersei-parts",
    "cersei-part2",
    "pi-v1",
    "pi-v2",
    "pi-v3",
    "noumen",
    "native",
)
NOUMEN_ID = "noumen-gen-1"
NATIVE_ID = "01J9Z3K7Q8R2V5X4W6Y0A1N4T1"
