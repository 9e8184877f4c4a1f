"""Gemini CLI messages and sessiondb's wire shape, both ways: what
:mod:`~sessiondb.formats.gemini` reads a ``user`` or ``gemini`` message line into and
writes it back from (see that module for what becomes what)."""

from __future__ import annotations

from typing import Any

from .. import jsoncodec
from ..models import wire_message_error

KEY = "gemini"
#: The ``api`` of the messages read from Gemini CLI files (pi's name for it).
API = "google-gemini-cli"
_CHAT_TYPES = {"user": "user", "gemini": "assistant"}
_ABSENT: Any = object()


def to_wire(
    value: dict[str, Any], exact: bool, checkpoint: bool | None
) -> list[dict[str, Any]] | None:
    """The payloads of a ``user`` or ``gemini`` message line (the message, then one
    ``toolResult`` for each call with a result), or ``None`` when the line is not one
    or would not be written back the same."""
    kind = value.get("type")
    role = _CHAT_TYPES.get(kind) if isinstance(kind, str) else None
    if role is None:
        return None
    line = dict(value)
    envelope: dict[str, Any] = {}
    blocks: list[Any] = []
    thoughts = line.pop("thoughts", _ABSENT)
    if thoughts is not _ABSENT:
        if role != "assistant" or not isinstance(thoughts, list):
            return None
        envelope["thoughts"] = True
        blocks.extend(_thought_block(t) for t in thoughts)
    content = line.pop("content", _ABSENT)
    if content is _ABSENT:
        envelope["content"] = "absent"
    elif content is None:
        envelope["content"] = "null"
    elif isinstance(content, str):
        envelope["content"] = "string"
        if content:
            blocks.append({"type": "text", "text": content})
    elif isinstance(content, dict):
        envelope["content"] = "part"
        blocks.append(_part_block(content))
    elif isinstance(content, list):
        blocks.extend(_part_block(p) for p in content)
    else:
        return None
    results: list[dict[str, Any]] = []
    calls = line.pop("toolCalls", _ABSENT)
    if calls is not _ABSENT:
        if role != "assistant" or not isinstance(calls, list):
            return None
        kept: list[Any] = []
        for index, call in enumerate(calls):
            if not _plain_call(call):
                return None
            blocks.append(
                {
                    "type": "toolCall",
                    "id": call["id"],
                    "name": call["name"],
                    "arguments": call["args"],
                }
            )
            kept.append(
                {k: v for k, v in call.items() if k not in ("id", "name", "args", "result")}
            )
            if "result" in call:
                results.append(_result_payload(call, index, checkpoint))
        envelope["calls"] = kept
    envelope["line"] = line
    if checkpoint:
        envelope["checkpoint"] = True
    # The API the message came from: the provider formats send none of its own blocks
    # (Gemini's parts, unsigned thoughts) to another API.
    payload: dict[str, Any] = {"role": role, "content": blocks, "api": API}
    usage = usage_of(line.get("tokens"))
    if usage is not None and role == "assistant":
        payload["usage"] = usage
    payload[KEY] = envelope
    payloads = [payload, *results]
    for p in payloads:
        if wire_message_error(p) is not None or (exact and jsoncodec.has_surrogate_key(p)):
            return None
    if to_line(payload, results) != value:
        return None
    return payloads


def _plain_call(call: Any) -> bool:
    return (
        isinstance(call, dict)
        and isinstance(call.get("id"), str)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("args"), dict)
    )


def _thought_block(thought: Any) -> dict[str, Any]:
    if (
        isinstance(thought, dict)
        and isinstance(thought.get("description"), str)
        and "type" not in thought
        and "thinking" not in thought
    ):
        rest = {k: v for k, v in thought.items() if k != "description"}
        return {"type": "thinking", "thinking": thought["description"], **rest}
    return {"type": "geminiThought", "thought": thought}


def _part_block(part: Any) -> dict[str, Any]:
    if isinstance(part, dict) and len(part) == 1 and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    return {"type": "geminiPart", "part": part}


def _result_payload(call: dict[str, Any], index: int, checkpoint: bool | None) -> dict[str, Any]:
    """The ``toolResult`` payload of a call's ``result``."""
    result = call["result"]
    envelope: dict[str, Any] = {"call": index}
    key = _response_key(result, call)
    if key is not None:
        text = result[0]["functionResponse"]["response"][key]
        envelope["result"] = key
    elif isinstance(result, str):
        text = result
        envelope["result"] = "string"
    else:
        text = _result_text(result)
        envelope["raw"] = result
    if checkpoint:
        envelope["checkpoint"] = True
    return {
        "role": "toolResult",
        "toolCallId": call["id"],
        "toolName": call["name"],
        "content": [{"type": "text", "text": text}],
        "isError": call.get("status") == "error",
        KEY: envelope,
    }


def _response_key(result: Any, call: dict[str, Any]) -> str | None:
    """``output`` or ``error`` when ``result`` is the one ``functionResponse`` of
    ``call`` holding only that text, the usual form."""
    if not (isinstance(result, list) and len(result) == 1 and isinstance(result[0], dict)):
        return None
    part = result[0]
    response = part.get("functionResponse")
    if len(part) != 1 or not isinstance(response, dict):
        return None
    if response.keys() != {"id", "name", "response"}:
        return None
    if response["id"] != call["id"] or response["name"] != call["name"]:
        return None
    inner = response["response"]
    if not isinstance(inner, dict) or len(inner) != 1:
        return None
    (key,) = inner
    return key if key in ("output", "error") and isinstance(inner[key], str) else None


def _result_text(result: Any) -> str:
    """The text a tool result shows a model: its responses' outputs and errors, else
    its JSON."""
    texts: list[str] = []
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        inner = response.get("response") if isinstance(response, dict) else None
        if isinstance(inner, dict):
            texts.extend(
                v for k, v in inner.items() if k in ("output", "error") and isinstance(v, str)
            )
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    if texts:
        return "\n".join(texts)
    try:
        return jsoncodec.dumps(result)
    except (ValueError, TypeError):
        return ""


def usage_of(tokens: Any) -> dict[str, Any] | None:
    """The wire usage of Gemini's ``tokens`` (its ``input`` counts the cached tokens,
    the wire's ``input`` does not), or ``None`` when they are not counts."""
    if not isinstance(tokens, dict):
        return None
    counts = {}
    for key in ("input", "output", "cached", "total"):
        value = tokens.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        counts[key] = value
    cached = min(max(counts["cached"], 0), max(counts["input"], 0))
    return {
        "input": counts["input"] - cached,
        "output": counts["output"],
        "cacheRead": cached,
        "cacheWrite": 0,
        "totalTokens": counts["total"],
    }


def to_line(payload: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The Gemini message line of a payload this reader made and the ``toolResult``
    payloads of its calls."""
    envelope = payload[KEY]
    line = dict(envelope["line"])
    blocks = [b for b in payload["content"] if isinstance(b, dict)]
    thoughts = [_thought(b) for b in blocks if b.get("type") in ("thinking", "geminiThought")]
    calls = [b for b in blocks if b.get("type") == "toolCall"]
    parts = [
        {"text": b.get("text")} if b.get("type") == "text" else b.get("part")
        for b in blocks
        if b.get("type") in ("text", "geminiPart")
    ]
    form = envelope.get("content")
    if form == "string":
        line["content"] = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
    elif form == "null":
        line["content"] = None
    elif form == "part":
        line["content"] = parts[0] if parts else {}
    elif form != "absent":
        line["content"] = parts
    if envelope.get("thoughts"):
        line["thoughts"] = thoughts
    if "calls" in envelope:
        kept = envelope["calls"]
        by_index = {r[KEY].get("call"): r for r in results if isinstance(r.get(KEY), dict)}
        line["toolCalls"] = [
            _call(block, kept[i] if i < len(kept) else {}, by_index.get(i))
            for i, block in enumerate(calls)
        ]
    return line


def _thought(block: dict[str, Any]) -> Any:
    if block.get("type") == "geminiThought":
        return block.get("thought")
    rest = {k: v for k, v in block.items() if k not in ("type", "thinking")}
    return {**rest, "description": block.get("thinking", "")}


def _call(block: dict[str, Any], kept: Any, result: dict[str, Any] | None) -> dict[str, Any]:
    call = {"id": block.get("id"), "name": block.get("name"), "args": block.get("arguments", {})}
    if isinstance(kept, dict):
        call.update(kept)
    if result is not None:
        call["result"] = _result(result, call)
    return call


def _result(payload: dict[str, Any], call: dict[str, Any]) -> Any:
    envelope = payload.get(KEY)
    envelope = envelope if isinstance(envelope, dict) else {}
    text = "\n".join(
        str(b.get("text", ""))
        for b in payload.get("content") or []
        if isinstance(b, dict) and b.get("type") == "text"
    )
    if "raw" in envelope:
        return envelope["raw"]
    if envelope.get("result") == "string":
        return text
    key = envelope.get("result")
    if key not in ("output", "error"):
        key = "error" if payload.get("isError") else "output"
    response = {"id": call["id"], "name": call["name"], "response": {key: text}}
    return [{"functionResponse": response}]


def tokens_of(usage: dict[str, Any]) -> dict[str, Any]:
    def count(key: str) -> int:
        value = usage.get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cached = count("cacheRead")
    total = usage.get("totalTokens")
    counted = isinstance(total, int) and not isinstance(total, bool)
    return {
        "input": count("input") + cached,
        "output": count("output"),
        "cached": cached,
        "total": total if counted else count("input") + cached + count("output"),
    }
