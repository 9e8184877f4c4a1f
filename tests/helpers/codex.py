"""Generated Codex CLI rollout files: what the corpus's real ones hold, made here, so a
clone with nothing beside it tests the codex reader and writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PARENT_ID = "0199aaaa-0000-7000-8000-000000000001"
FORK_ID = "0199aaaa-0000-7000-8000-000000000002"
OLD_ID = "01997ea4-0000-7000-8000-000000000003"
COMPACT_ID = "0199cccc-0000-7000-8000-000000000004"
# A 1x1 PNG, as Codex writes an attached image.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg=="
)


def _at(n: int) -> str:
    return f"2026-05-11T11:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z"


def line(n: int, kind: str, payload: Any, **extra: Any) -> dict[str, Any]:
    return {"timestamp": _at(n), "type": kind, "payload": payload, **extra}


def item(n: int, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return line(n, "response_item", payload, **extra)


def message(role: str, *texts: str, **fields: Any) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    parts = [{"type": kind, "text": t} for t in texts]
    return {"type": "message", "role": role, "content": parts, **fields}


def token_count(total_out: int, last_out: int, last_in: int = 100) -> dict[str, Any]:
    def usage(i: int, o: int) -> dict[str, Any]:
        return {
            "input_tokens": i,
            "cached_input_tokens": i // 2,
            "output_tokens": o,
            "reasoning_output_tokens": 0,
            "total_tokens": i + o,
        }

    info = {
        "total_token_usage": usage(last_in * 10, total_out),
        "last_token_usage": usage(last_in, last_out),
        "model_context_window": 272000,
    }
    return {"type": "token_count", "info": info, "rate_limits": {"primary_used_percent": 1.0}}


def meta(session_id: str, version: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": session_id,
        "timestamp": _at(0),
        "cwd": "/repo",
        "originator": "codex_cli_rs",
        "cli_version": version,
        "model_provider": "openai",
        "git": {"commit_hash": "abc123", "branch": "main"},
        **fields,
    }


def old_lines() -> list[dict[str, Any]]:
    """A Codex 0.40 rollout: instructions in the meta, the token count before its
    response's items, an attached image, reasoning with encrypted content, update_plan
    and a failing shell call, a count repeated, an agent_reasoning event."""
    user = {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is in this picture?"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
        ],
    }
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "**Looking** at the image"}],
        "content": None,
        "encrypted_content": "gAAAAB-secret",
    }
    plan = {"plan": [{"step": "look", "status": "in_progress"}]}
    return [
        line(0, "session_meta", meta(OLD_ID, "0.40.0", instructions="Use pytest.")),
        item(1, message("user", "<user_instructions>Use pytest.</user_instructions>")),
        item(2, user),
        line(3, "event_msg", {"type": "user_message", "message": "what is in this picture?"}),
        line(4, "turn_context", {"cwd": "/repo", "model": "gpt-5-codex", "effort": "medium"}),
        line(5, "event_msg", {"type": "agent_reasoning", "text": "**Looking** at the image"}),
        line(6, "event_msg", token_count(50, 50)),
        item(7, reasoning),
        item(8, {"type": "function_call", "name": "update_plan", "arguments": json.dumps(plan),
                 "call_id": "call_plan"}),
        item(9, {"type": "function_call_output", "call_id": "call_plan", "output": "Plan updated"}),
        line(10, "event_msg", token_count(80, 30)),
        line(11, "event_msg", token_count(80, 30)),  # repeated: counts nothing
        item(12, {"type": "function_call", "name": "shell",
                  "arguments": "{\"command\": [\"cat\", \"missing\"]}", "call_id": "call_cat"}),
        item(13, {"type": "function_call_output", "call_id": "call_cat",
                  "output": {"content": "cat: missing: No such file", "success": False}}),
        line(14, "event_msg", {"type": "exec_command_end", "call_id": "call_cat", "exit_code": 1}),
        line(15, "event_msg", token_count(100, 20)),
        item(16, message("assistant", "A red pixel; the file is missing.")),
        line(17, "event_msg", {"type": "agent_message", "message": "A red pixel."}),
    ]  # fmt: skip


def new_lines(session_id: str = PARENT_ID, **meta_fields: Any) -> list[dict[str, Any]]:
    """A Codex 0.125 rollout: a developer message, the token count after its response's
    items, exec_command and apply_patch (a custom tool call), a web search, ordinal and
    metadata members on lines, a ghost snapshot, a world_state, a token_usage_record, a
    turn_aborted event and a line type no version writes."""
    patch = "*** Begin Patch\n*** Add File: a.py\n+print(1)\n*** End Patch\n"
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "codex rollout"}}  # fmt: skip
    return [
        line(0, "session_meta", meta(session_id, "0.125.0", **meta_fields), ordinal=0),
        line(1, "event_msg", {"type": "task_started", "turn_id": "t1"}),
        item(2, message("developer", "<permissions>read-only</permissions>")),
        item(3, message("user", "<environment_context>/repo</environment_context>")),
        line(4, "turn_context", {"turn_id": "t1", "cwd": "/repo", "model": "gpt-5.5"}),
        line(5, "world_state", {"full": True, "state": {}}),
        item(6, message("user", "add a.py"), metadata={"retained_source": {"turn_id": "t1"}}),
        line(7, "event_msg", {"type": "user_message", "message": "add a.py", "images": []}),
        item(8, {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "enc"}),
        item(9, {"type": "function_call", "name": "exec_command",
                 "arguments": "{\"cmd\":\"ls\",\"workdir\":\"/repo\"}", "call_id": "call_ls"}),
        line(10, "event_msg", token_count(40, 40)),
        item(11, {"type": "function_call_output", "call_id": "call_ls",
                  "output": "Chunk ID: 1\nProcess exited with code 0\nOutput:\nREADME.md\n"}),
        item(12, {"type": "custom_tool_call", "status": "completed", "call_id": "call_patch",
                  "name": "apply_patch", "input": patch}),
        item(13, search),
        line(14, "event_msg", token_count(70, 30)),
        item(15, {"type": "custom_tool_call_output", "call_id": "call_patch",
                  "output": json.dumps({"output": "Success. A a.py", "metadata": {"code": 0}})}),
        item(16, {"type": "ghost_snapshot", "ghost_commit": {"id": "g1", "parent": None}}),
        item(17, message("assistant", "Added a.py.", phase="final_answer"), ordinal=17),
        line(18, "event_msg", token_count(90, 20)),
        line(19, "token_usage_record", {"turn_id": "t1", "usage": {"input_tokens": 1}}),
        line(20, "event_msg", {"type": "task_complete", "turn_id": "t1"}),
        item(21, {"type": "function_call_output", "call_id": "call_never", "output": "stray"}),
        line(22, "event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
        line(23, "future_line_type", {"anything": [1, 2, {"x": None}]}),
    ]  # fmt: skip


def compaction_lines() -> list[dict[str, Any]]:
    """A rollout compacted with a replacement history (the seqs its records get are in
    the comments): the history keeps the developer message, the second user message and
    a call with its result; it drops the first user message, the first call and its
    result, and the answers."""
    summary = "Built the API; next: auth."
    history = [
        message("developer", "be careful"),
        message("user", "second ask"),
        {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "call_b"},
        {"type": "function_call_output", "call_id": "call_b", "output": "b"},
        message("user", f"Another language model started to solve this problem: {summary}"),
    ]
    return [
        line(0, "session_meta", meta(COMPACT_ID, "0.77.0")),
        item(1, message("developer", "be careful")),  # seq 2
        item(2, message("user", "first ask")),  # seq 3
        item(3, {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "call_a"}),
        item(4, {"type": "function_call_output", "call_id": "call_a", "output": "a"}),  # seq 5
        item(5, message("assistant", "first answer")),  # seq 6
        item(6, message("user", "second ask")),  # seq 7
        item(7, {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "call_b"}),
        item(8, {"type": "function_call_output", "call_id": "call_b", "output": "b"}),  # seq 9
        item(9, message("assistant", "second answer")),  # seq 10
        line(10, "event_msg", token_count(60, 60, 5000)),  # seq 11
        line(11, "compacted", {"message": summary, "replacement_history": history}),  # seq 12
        item(12, message("user", "third ask")),  # seq 18, after 5 tombstones
        item(13, message("assistant", "third answer")),
    ]  # fmt: skip


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def rollout_name(session_id: str) -> str:
    return f"rollout-2026-05-11T11-00-00-{session_id}.jsonl"


def codex_tree(root: Path) -> dict[str, Path]:
    """``root/YYYY/MM/DD/`` rollout files as Codex lays them out: an old and a new
    session, a fork of the new one, a compacted one. Their paths by case."""
    day = root / "2026" / "05" / "11"
    return {
        "old": write_lines(day / rollout_name(OLD_ID), old_lines()),
        "new": write_lines(day / rollout_name(PARENT_ID), new_lines()),
        "fork": write_lines(
            day / rollout_name(FORK_ID), new_lines(FORK_ID, forked_from_id=PARENT_ID)
        ),
        "compacted": write_lines(day / rollout_name(COMPACT_ID), compaction_lines()),
    }


#: The cases :func:`codex_tree` gives, and each one's session id.
CASES = {"old": OLD_ID, "new": PARENT_ID, "fork": FORK_ID, "compacted": COMPACT_ID}
