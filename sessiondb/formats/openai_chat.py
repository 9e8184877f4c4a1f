"""OpenAI's Chat Completions API: a session's context as ``messages``, a completion as
messages to append.

Not a file format (nothing here reads or writes files). :func:`to_openai_chat` gives the
``messages`` list of a request; :func:`from_openai_chat` reads a completion.

Shapes:

- The system prompt is the first message (``role`` ``system``, or ``developer`` for the
  models that want it).
- ``user``: one text block becomes a string ``content``; several blocks, or images, a
  list of ``text`` / ``image_url`` parts (images as base64 ``data:`` URLs).
- ``assistant``: text as ``content`` (``None`` when there is none), refusals as
  ``refusal``, ``toolCall`` blocks as ``tool_calls`` whose ``arguments`` are JSON text.
  Thinking is left out: the API takes none back.
- Each tool result is one ``role: tool`` message right after the assistant message that
  made the call (see :func:`sessiondb.formats._provider.paired`). A tool message holds
  text only, so a result's images follow the results in one user message.
- Usage: ``prompt_tokens`` minus ``prompt_tokens_details.cached_tokens`` → ``input``,
  the cached ones → ``cacheRead``, ``completion_tokens`` → ``output``, ``total_tokens``
  → ``totalTokens``.
- A completion's ``reasoning_content`` (servers that speak this API for reasoning
  models) becomes a thinking block; a tool call's ``arguments`` that are not a JSON
  object, or not in compact form, are also kept as written (``argumentsText``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ..errors import InvalidInputError, brief
from ..models import Message
from . import _provider as p

__all__ = ["API", "from_openai_chat", "to_openai_chat"]

API = p.OPENAI_CHAT_API


def to_openai_chat(
    messages: Iterable[Message | Mapping[str, Any]],
    system_prompt: str | None = None,
    *,
    system_role: Literal["system", "developer"] = "system",
) -> list[dict[str, Any]]:
    """The ``messages`` of a Chat Completions request for ``messages``
    (``store.context()``'s output, a compaction summary at its head included), with the
    system prompt first.

    Raises:
        InvalidInputError: an item is not a message, or a tool result answers no call.
    """
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise InvalidInputError(f"system_prompt must be a string, got {brief(system_prompt)}")
    if system_role not in ("system", "developer"):
        raise InvalidInputError(
            f"system_role must be 'system' or 'developer', got {brief(system_role)}"
        )
    out: list[dict[str, Any]] = []
    if system_prompt is not None:
        out.append({"role": system_role, "content": system_prompt})
    images: list[dict[str, Any]] = []  # of the tool results just written
    for message in p.paired(p.wire_messages(messages)):
        role = message["role"]
        if role != "toolResult" and images:
            out.append(_result_images(images))
            images = []
        if role == "user":
            content = _user_content(p.blocks(message))
            if content:
                out.append({"role": "user", "content": content})
        elif role == "assistant":
            converted = _assistant(message)
            if converted is not None:
                out.append(converted)
        else:
            texts = [b["text"] for b in p.blocks(message) if b.get("type") == "text"]
            images.extend(b for b in p.blocks(message) if b.get("type") == "image")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message["toolCallId"],
                    "content": "\n".join(texts),
                }
            )
    if images:
        out.append(_result_images(images))
    return out


def _user_content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "text" and block["text"]:
            parts.append({"type": "text", "text": block["text"]})
        elif block.get("type") == "image":
            parts.append({"type": "image_url", "image_url": {"url": p.data_url(block)}})
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _result_images(images: list[dict[str, Any]]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Images from the tool results above:"}]
    parts.extend({"type": "image_url", "image_url": {"url": p.data_url(b)}} for b in images)
    return {"role": "user", "content": parts}


def _assistant(message: dict[str, Any]) -> dict[str, Any] | None:
    blocks = p.blocks(message)
    texts = [b["text"] for b in blocks if b.get("type") == "text" and not b.get("refusal")]
    refusals = [b["text"] for b in blocks if b.get("type") == "text" and b.get("refusal")]
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": p.arguments_text(b)},
        }
        for b in blocks
        if b.get("type") == "toolCall"
    ]
    if not (texts or refusals or calls):
        return None
    out: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if refusals:
        out["refusal"] = "\n".join(refusals)
    if calls:
        out["tool_calls"] = calls
    return out


def from_openai_chat(response: Mapping[str, Any], choice: int = 0) -> list[Message]:
    """The message to append for a Chat Completions response (the JSON object the API
    returned, or the SDK's ``completion.model_dump()``): the assistant message of
    choice ``choice``, with ``usage``, ``model``, ``responseId`` and ``stopReason``
    (the ``finish_reason``).

    Raises:
        InvalidInputError: ``response`` is not a chat completion, or has no such choice.
    """
    payload = p.obj(dict(response) if isinstance(response, Mapping) else response, "response")
    if "error" in payload and "choices" not in payload:
        error = payload["error"]
        detail = error.get("message") if isinstance(error, dict) else error
        raise InvalidInputError(f"response is an API error: {brief(detail)}")
    choices = p.array(payload.get("choices"), "response.choices")
    if not 0 <= choice < len(choices):
        raise InvalidInputError(f"response has {len(choices)} choice(s); no choice {choice}")
    where = f"response.choices[{choice}]"
    picked = p.obj(choices[choice], where)
    message = p.obj(picked.get("message"), f"{where}.message")
    where += ".message"
    role = message.get("role", "assistant")
    if role != "assistant":
        raise InvalidInputError(f"{where}.role must be 'assistant', got {brief(role)}")
    content: list[dict[str, Any]] = []
    reasoning = p.optional_text(message.get("reasoning_content"), f"{where}.reasoning_content")
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning})
    content.extend(_texts(message.get("content"), f"{where}.content"))
    refusal = p.optional_text(message.get("refusal"), f"{where}.refusal")
    if refusal:
        content.append({"type": "text", "text": refusal, "refusal": True})
    calls = message.get("tool_calls")
    if calls is not None:
        for i, call in enumerate(p.array(calls, f"{where}.tool_calls")):
            content.append(
                _tool_call(p.obj(call, f"{where}.tool_calls[{i}]"), f"{where}.tool_calls[{i}]")
            )
    return [
        p.assistant_message(
            content,
            api=API,
            payload=payload,
            usage_value=_usage(payload.get("usage")),
            stop_reason=picked.get("finish_reason"),
        )
    ]


def _texts(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    out: list[dict[str, Any]] = []
    for i, part in enumerate(p.array(value, where)):
        part = p.obj(part, f"{where}[{i}]")
        if part.get("type") == "text":
            out.append({"type": "text", "text": p.text(part.get("text"), f"{where}[{i}].text")})
        elif part.get("type") == "refusal":
            refusal = p.text(part.get("refusal"), f"{where}[{i}].refusal")
            out.append({"type": "text", "text": refusal, "refusal": True})
        else:
            raise InvalidInputError(f"{where}[{i}]: unexpected part type {brief(part.get('type'))}")
    return out


def _tool_call(call: dict[str, Any], where: str) -> dict[str, Any]:
    kind = call.get("type", "function")
    if kind != "function":
        raise InvalidInputError(
            f"{where}: only function tool calls are supported, got {brief(kind)}"
        )
    function = p.obj(call.get("function"), f"{where}.function")
    arguments = p.text(function.get("arguments"), f"{where}.function.arguments")
    return p.tool_call(
        p.text(call.get("id"), f"{where}.id"),
        p.text(function.get("name"), f"{where}.function.name"),
        arguments,
    )


def _usage(value: Any) -> dict[str, Any] | None:
    return p.openai_usage(value, "prompt_tokens", "completion_tokens", "prompt_tokens_details")
