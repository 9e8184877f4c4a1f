"""Generated Gemini CLI chat recordings: what the corpus's real files hold, and what
none of them does (a ``$rewindTo``, a message written again as it is updated, a
checkpoint that leaves a message out, a subagent directory), so a bare clone tests the
reader and the writer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

MAIN_ID = "gen0001a-0000-4000-8000-000000000001"
RESUMED_ID = "gen0002b-0000-4000-8000-000000000002"
LEGACY_ID = "gen0003c-0000-4000-8000-000000000003"
SUB_ID = "sub00001-0000-4000-8000-000000000009"
PROJECT = "f" * 64
#: The Gemini corpus files, relative to ``CORPUS / "gemini"``.
GEMINI_FILES = (
    "agentsview__tool_calls_with_results.json",
    "codemie__session-2025-12-01T21-45-5b959dae.json",
    "entireio__session-2026-01-10T02-08-faff42ab.json",
    "kvsankar__gemini_with_tool_error.jsonl",
    "oyakata__session-2026-10-08T01-22-9ccfe758.jsonl",
)


@dataclass(frozen=True)
class GeminiCase:
    """One generated file: read through ``source`` as the session ``key``; exported,
    written at ``relative`` under the export directory."""

    case: str
    path: Path
    source: Path
    key: str
    relative: str


def at(n: int) -> str:
    return f"2026-03-01T10:{n // 60:02d}:{n % 60:02d}.000Z"


def header(session_id: str, kind: str = "main") -> dict[str, Any]:
    return {
        "sessionId": session_id,
        "projectHash": PROJECT,
        "startTime": at(0),
        "lastUpdated": at(0),
        "kind": kind,
    }


def user(mid: str, n: int, content: Any) -> dict[str, Any]:
    return {"id": mid, "timestamp": at(n), "type": "user", "content": content}


def tokens(i: int, o: int, cached: int = 0) -> dict[str, Any]:
    return {"input": i, "output": o, "cached": cached, "thoughts": 2, "tool": 0, "total": i + o}


def call(
    cid: str, name: str, args: dict[str, Any], output: str, *, error: bool = False
) -> dict[str, Any]:
    """A tool call with its result as the CLI records it (a failed one names its error)."""
    key = "error" if error else "output"
    made: dict[str, Any] = {
        "id": cid,
        "name": name,
        "args": args,
        "result": [{"functionResponse": {"id": cid, "name": name, "response": {key: output}}}],
        "status": "error" if error else "success",
        "timestamp": at(5),
        "displayName": name.title(),
    }
    if error:
        made["error"] = f"{output} (no edits made)"
    return made


def gemini(mid: str, n: int, content: Any, **fields: Any) -> dict[str, Any]:
    return {
        "id": mid,
        "timestamp": at(n),
        "type": "gemini",
        "content": content,
        "model": "gemini-2.5-pro",
        **fields,
    }


def main_lines() -> list[Any]:
    """A session with every line the format has: thoughts, two tool calls (one failed,
    with a field no version of the CLI wrote), an info line, ``$set`` updates, a
    message written again as it is updated, a ``$rewindTo``, and content as parts (one
    not text) and a tool result that is not a function response."""
    thought = {"subject": "Listing", "description": "I should list them.", "timestamp": at(2)}
    calls = [
        call("ls-1", "list_directory", {"path": "."}, "a.py\nb.py"),
        {**call("edit-1", "replace", {"file_path": "a.py"}, "0 occurrences", error=True),
         "unknownField": {"kept": [1, 2]}},
    ]  # fmt: skip
    image = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
    odd = {**call("read-1", "read_file", {"file_path": "b.py"}, ""), "result": "print(2)"}
    return [
        header(MAIN_ID),
        user("u1", 1, "list the files and fix a.py"),
        gemini("g1", 3, "", thoughts=[thought], tokens=tokens(100, 20, 40), toolCalls=calls),
        {"id": "i1", "timestamp": at(6), "type": "info", "content": "Switched to a new model"},
        {"$set": {"lastUpdated": at(6)}},
        gemini("g2", 7, "Listed; the edit failed.", thoughts=[], tokens=tokens(150, 9)),
        gemini("g2", 7, "Listed; the edit failed.", thoughts=[], tokens=tokens(150, 10)),
        {"$set": {"summary": "Listing and fixing files"}},
        user("u2", 8, "try the edit again"),
        gemini("g3", 9, "Trying again.", tokens=tokens(160, 4)),
        {"id": "w1", "timestamp": at(9), "type": "warning", "content": "Loop detected"},
        {"$rewindTo": "u2"},
        user("u3", 10, [{"text": "what is in this picture?"}, image]),
        gemini("g4", 11, [{"text": "Reading b.py."}], toolCalls=[odd], tokens=tokens(170, 6)),
        {"$set": {"lastUpdated": at(11), "memoryScratchpad": {"version": 1}}},
    ]


def resumed_lines() -> list[Any]:
    """A session resumed twice: each resume writes a ``$set.messages`` checkpoint of the
    whole history (the first with one message's content as parts, the second leaving
    a message out), then the session goes on."""
    a = user("a", 1, "say hi")
    b = gemini("b", 2, "Hi.", thoughts=[], tokens=tokens(5, 1))
    b_parts = {**b, "content": [{"text": "Hi."}]}
    c = user("c", 3, "again")
    return [
        header(RESUMED_ID),
        a,
        b,
        {"$set": {"messages": [a, b_parts, c], "lastUpdated": at(3)}},
        gemini("d", 4, "Hi again.", tokens=tokens(9, 2)),
        {"$set": {"messages": [a, b_parts, c], "lastUpdated": at(5)}},
        user("e", 6, "bye"),
    ]


def legacy_document() -> dict[str, Any]:
    """A legacy session document (``session-*.json``)."""
    return {
        **header(LEGACY_ID),
        "messages": [
            user("l1", 1, "read the plan"),
            gemini(
                "l2",
                2,
                "Reading it.",
                thoughts=[{"subject": "Plan", "description": "Read it.", "timestamp": at(2)}],
                tokens=tokens(30, 4),
                toolCalls=[call("read-9", "read_file", {"file_path": "PLAN.md"}, "# Plan")],
            ),
        ],
        "summary": "Reading the plan",
    }


def legacy_lines() -> list[Any]:
    """:func:`legacy_document` as the CLI migrates it: the metadata line, a line a
    message."""
    document = legacy_document()
    meta = {k: v for k, v in document.items() if k != "messages"}
    return [meta, *document["messages"]]


def subagent_lines() -> list[Any]:
    return [
        header(SUB_ID, kind="subagent"),
        user("s1", 1, "find the config"),
        gemini("s2", 2, "", toolCalls=[call("glob-1", "glob", {"pattern": "*.json"}, "a.json")]),
        gemini("s3", 3, "It is a.json.", tokens=tokens(12, 5)),
    ]


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def write_document(path: Path, document: Any) -> Path:
    """As the CLI wrote it: indented, no newline at the end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))
    return path


def gemini_tree(root: Path) -> list[GeminiCase]:
    """A ``chats`` directory: a session with a subagent, a resumed session and a legacy
    document."""
    chats = root / "chats"
    main = write_lines(chats / "session-2026-03-01T10-00-gen0001a.jsonl", main_lines())
    sub = write_lines(chats / MAIN_ID / f"{SUB_ID}.jsonl", subagent_lines())
    resumed = write_lines(chats / "session-2026-03-02T10-00-gen0002b.jsonl", resumed_lines())
    legacy = write_document(chats / "session-2026-03-03T10-00-gen0003c.json", legacy_document())
    return [
        GeminiCase("main", main, main, f"gemini:{MAIN_ID}", main.name),
        GeminiCase("subagent", sub, main, f"gemini:{SUB_ID}", f"{MAIN_ID}/{sub.name}"),
        GeminiCase("resumed", resumed, resumed, f"gemini:{RESUMED_ID}", resumed.name),
        GeminiCase("legacy", legacy, legacy, f"gemini:{LEGACY_ID}", legacy.name),
    ]


GEMINI_CASES = ("main", "subagent", "resumed", "legacy")


def same_file(written: Path, original: Path) -> bool:
    """Whether ``written`` holds what ``original`` does: the same JSON document for a
    legacy ``.json`` file, the same JSON values line by line for a ``.jsonl`` one."""
    from helpers.formats import json_lines

    if original.suffix == ".json":
        return bool(json.loads(written.read_text()) == json.loads(original.read_text()))
    return json_lines(written) == json_lines(original)


# -- fuzzing: lines of the shapes the reader tells apart, and any JSON -------------------

_text = st.text(max_size=6)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_ids = st.sampled_from(["a", "b", "c", ""])
_call = st.fixed_dictionaries(
    {"id": _ids, "name": st.sampled_from(["ls", "read"]), "args": st.just({"p": 1})},
    optional={
        "result": st.one_of(
            JSON_VALUES,
            st.just([{"functionResponse": {"id": "a", "name": "ls", "response": {"output": "x"}}}]),
        ),
        "status": st.sampled_from(["success", "error", "cancelled"]),
        "error": JSON_VALUES,
    },
)
_message = st.fixed_dictionaries(
    {"id": _ids, "type": st.sampled_from(["user", "gemini", "info", "error", "x"])},
    optional={
        "content": st.one_of(
            _text, st.lists(st.fixed_dictionaries({"text": _text}), max_size=2), JSON_VALUES
        ),
        "thoughts": st.one_of(
            st.lists(st.fixed_dictionaries({"subject": _text, "description": _text}), max_size=2),
            JSON_VALUES,
        ),
        "toolCalls": st.one_of(st.lists(_call, max_size=2), JSON_VALUES),
        "tokens": st.one_of(
            st.just({"input": 3, "output": 1, "cached": 5, "total": 4}), JSON_VALUES
        ),
        "timestamp": st.one_of(_text, st.just("2026-01-01T00:00:00Z")),
    },
)
LINES = st.one_of(
    _message,
    st.fixed_dictionaries({"$rewindTo": st.one_of(_ids, JSON_VALUES)}),
    st.fixed_dictionaries(
        {
            "$set": st.one_of(
                JSON_VALUES, st.fixed_dictionaries({"messages": st.lists(_message, max_size=3)})
            )
        }
    ),
    JSON_VALUES,
)
