"""Anthropic's Messages API: a session's context as a request, a response as messages.

Not a file format (nothing here reads or writes files): :func:`to_anthropic` turns
``store.context()`` into the ``system`` and ``messages`` of a request, and
:func:`from_anthropic` turns a response into the message to append.

Shapes (sessiondb block → Anthropic block):

- ``text`` → ``text`` (its ``citations`` and ``cache_control`` kept); ``image`` →
  ``image`` with a base64 ``source``; ``toolCall`` → ``tool_use`` (``arguments`` →
  ``input``).
- ``thinking`` → ``thinking`` with its ``signature``. The API refuses a thinking block
  it did not sign, so one without a ``signature`` (or from another provider) is left
  out. Messages imported from pi files spell it ``thinkingSignature`` (a ``redacted``
  one becomes ``redacted_thinking``); both are read. ``redacted_thinking``, server tool
  blocks and any other block sessiondb does not model are stored as they came and sent
  back as they are, except in a message that came from another API.
- A ``toolResult`` message → a ``tool_result`` block (``is_error`` kept) in a user
  message; consecutive results, and a user message right after them, share one user
  message, as the API demands. Two user (or two assistant) messages in a row become
  one; a message left with no blocks is left out.
- The system prompt is a separate value: :class:`AnthropicRequest` ``.system``.
- Usage: ``input_tokens`` → ``input``, ``output_tokens`` → ``output``,
  ``cache_read_input_tokens`` → ``cacheRead``, ``cache_creation_input_tokens`` →
  ``cacheWrite``; ``totalTokens`` is their sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError, brief
from ..models import Message
from . import _provider as p

__all__ = ["API", "AnthropicRequest", "from_anthropic", "to_anthropic"]

API = p.ANTHROPIC_API

# Fields of our blocks that the API also takes; anything else (other formats' fields)
# would make it refuse the request.
_TEXT_FIELDS = ("citations", "cache_control")


@dataclass(frozen=True)
class AnthropicRequest:
    """The parts of a Messages API request that come from a session.

    ``system`` is the system prompt (``None``: none); ``messages`` the conversation.
    Pass both with ``client.messages.create(model=…, max_tokens=…, **request.kwargs())``.
    """

    system: str | None
    messages: list[dict[str, Any]]

    def kwargs(self) -> dict[str, Any]:
        """``{"messages": …}``, with ``"system"`` when there is a system prompt."""
        out: dict[str, Any] = {"messages": self.messages}
        if self.system is not None:
            out["system"] = self.system
        return out


def to_anthropic(
    messages: Iterable[Message | Mapping[str, Any]], system_prompt: str | None = None
) -> AnthropicRequest:
    """The Messages API request for ``messages`` (``store.context()``'s output, a
    compaction summary at its head included) and the session's system prompt.

    Raises:
        InvalidInputError: an item is not a message, or a tool result answers no call.
    """
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise InvalidInputError(f"system_prompt must be a string, got {brief(system_prompt)}")
    out: list[dict[str, Any]] = []
    for message in p.paired(p.wire_messages(messages)):
        role = "assistant" if message["role"] == "assistant" else "user"
        content = (
            [_tool_result(message)]
            if message["role"] == "toolResult"
            else _blocks(message, assistant=role == "assistant")
        )
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    return AnthropicRequest(system=system_prompt, messages=out)


def _blocks(message: dict[str, Any], *, assistant: bool) -> list[dict[str, Any]]:
    foreign = p.foreign(message, API)
    out: list[dict[str, Any]] = []
    for block in p.blocks(message):
        kind = block.get("type")
        if kind == "text":
            if block["text"]:
                out.append(_text(block))
        elif kind == "image":
            out.append(_image(block))
        elif kind == "toolCall" and assistant:
            out.append(
                {
                    "type": "tool_use",
                    "id": block["id"],
                    "name": block["name"],
                    "input": block.get("arguments") or {},
                }
            )
        elif kind == "thinking":
            if assistant and not foreign:
                out.extend(_thinking(block, message))
        elif kind not in ("toolCall", "thinking") and not foreign:
            out.append(block)
    return out


def _thinking(block: dict[str, Any], message: dict[str, Any]) -> list[dict[str, Any]]:
    """The thinking block to send back: only one Anthropic signed."""
    signature = block.get("signature")
    if signature is None and message.get("api") == API:
        # pi's spelling (sessions imported from pi files): ``thinkingSignature``, and a
        # redacted block as a thinking block marked ``redacted`` holding the data.
        signature = block.get("thinkingSignature")
        if block.get("redacted") is True and isinstance(signature, str) and signature:
            return [{"type": "redacted_thinking", "data": signature}]
    if not isinstance(signature, str) or not signature:
        return []
    return [{"type": "thinking", "thinking": block["thinking"], "signature": signature}]


def _text(block: dict[str, Any]) -> dict[str, Any]:
    out = {"type": "text", "text": block["text"]}
    out.update((k, block[k]) for k in _TEXT_FIELDS if k in block)
    return out


def _image(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block["mimeType"], "data": block["data"]},
    }


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    content = [
        _text(b) if b["type"] == "text" else _image(b)
        for b in p.blocks(message)
        if (b.get("type") == "text" and b["text"]) or b.get("type") == "image"
    ]
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["toolCallId"]}
    if content:
        out["content"] = content
    if message.get("isError"):
        out["is_error"] = True
    return out


def from_anthropic(response: Mapping[str, Any]) -> list[Message]:
    """The message to append for a Messages API response (the JSON object the API
    returned, or the SDK's ``message.model_dump()``): one assistant message with the
    response's blocks, ``usage``, ``model``, ``responseId`` and ``stopReason``.

    Raises:
        InvalidInputError: ``response`` is not a Messages API response, or is an error.
    """
    payload = p.obj(dict(response) if isinstance(response, Mapping) else response, "response")
    if payload.get("type") == "error":
        error = payload.get("error")
        detail = error.get("message") if isinstance(error, dict) else None
        raise InvalidInputError(f"response is an API error: {brief(detail or error)}")
    role = payload.get("role", "assistant")
    if role != "assistant":
        raise InvalidInputError(f"response.role must be 'assistant', got {brief(role)}")
    content = [
        _from_block(p.obj(block, f"response.content[{i}]"), f"response.content[{i}]")
        for i, block in enumerate(p.array(payload.get("content"), "response.content"))
    ]
    raw = payload.get("usage")
    usage = None
    if raw is not None:
        raw = p.obj(raw, "response.usage")
        counts = [
            p.count(raw.get(name), f"response.usage.{name}")
            for name in (
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            )
        ]
        usage = p.usage(
            input=counts[0],
            output=counts[1],
            cache_read=counts[2],
            cache_write=counts[3],
            total=sum(counts),
        )
    return [
        p.assistant_message(
            content,
            api=API,
            payload=payload,
            usage_value=usage,
            stop_reason=payload.get("stop_reason"),
        )
    ]


def _from_block(block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = p.text(block.get("type"), f"{where}.type")
    if kind == "text":
        p.text(block.get("text"), f"{where}.text")
        return _text(block)
    if kind == "thinking":
        out = {"type": "thinking", "thinking": p.text(block.get("thinking"), f"{where}.thinking")}
        signature = p.optional_text(block.get("signature"), f"{where}.signature")
        if signature is not None:
            out["signature"] = signature
        return out
    if kind == "tool_use":
        return {
            "type": "toolCall",
            "id": p.text(block.get("id"), f"{where}.id"),
            "name": p.text(block.get("name"), f"{where}.name"),
            "arguments": p.obj(block.get("input", {}), f"{where}.input"),
        }
    if kind == "image":
        source = p.obj(block.get("source"), f"{where}.source")
        if source.get("type") == "base64":
            return {
                "type": "image",
                "data": p.text(source.get("data"), f"{where}.source.data"),
                "mimeType": p.text(source.get("media_type"), f"{where}.source.media_type"),
            }
        raise InvalidInputError(f"{where}: only base64 images can be stored")
    if kind in ("toolCall", "toolResult"):
        raise InvalidInputError(f"{where}: {brief(kind)} is not an Anthropic block type")
    # redacted_thinking, server_tool_use, web_search_tool_result, …: kept as they came.
    return block
