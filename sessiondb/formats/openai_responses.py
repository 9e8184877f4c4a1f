"""OpenAI's Responses API: a session's context as ``input`` items, a response as messages.

Not a file format (nothing here reads or writes files). :func:`to_openai_responses`
gives the ``instructions`` and ``input`` of a request; :func:`from_openai_responses`
reads a response's ``output``.

Shapes (one sessiondb message can be several items):

- The system prompt is ``instructions`` by default, or a ``developer`` / ``system``
  message at the head of ``input`` (``system_as``).
- ``user`` → a ``message`` item of ``input_text`` / ``input_image`` parts (images as
  base64 ``data:`` URLs).
- ``assistant``: text blocks → a ``message`` item of ``output_text`` parts (refusals as
  ``refusal`` parts); text blocks that came from one output item (``itemId``) make one
  item again, with its id. ``toolCall`` → a ``function_call`` item (``call_id``,
  ``arguments`` as JSON text). A thinking block that holds the ``reasoning`` item it came
  from (``responsesItem``; in a message imported from a pi file, the JSON text in
  ``thinkingSignature``) → that item, so the model gets its encrypted reasoning back;
  a thinking block without one (another provider's) is left out, as the API cannot
  take it. Output items sessiondb does not model (web search calls, …) are kept as
  ``{"type": "responsesItem", "item": …}`` blocks and sent back as they came. An
  assistant message the OpenAI Agents adapter stored with its whole item (reasoning, a
  call, a hosted tool's item: the message's ``responsesItem``) gives that item back.
- ``toolResult`` → a ``function_call_output`` item right after its call's message
  (``output`` text, or ``input_text`` / ``input_image`` parts when it holds images).
- Usage: ``input_tokens`` minus ``input_tokens_details.cached_tokens`` → ``input``, the
  cached ones → ``cacheRead``, ``output_tokens`` → ``output``, ``total_tokens`` →
  ``totalTokens``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidInputError, brief
from ..models import Message
from . import _provider as p

__all__ = ["API", "ITEM_BLOCK", "ResponsesRequest", "from_openai_responses", "to_openai_responses"]

API = p.OPENAI_RESPONSES_API
#: The block type that holds a Responses output item sessiondb does not model.
ITEM_BLOCK = "responsesItem"
# The message fields of sessiondb.integrations.openai_agents: the item as added, and
# (for an item whose text the blocks hold) where that text was taken out.
AGENTS_ITEM = "responsesItem"
AGENTS_ITEM_TEXT = "responsesItemText"


@dataclass(frozen=True)
class ResponsesRequest:
    """The parts of a Responses API request that come from a session.

    ``instructions`` is the system prompt (``None``: none, or it is in ``input``);
    ``input`` the items. Pass both with
    ``client.responses.create(model=…, **request.kwargs())``.
    """

    instructions: str | None
    input: list[dict[str, Any]]

    def kwargs(self) -> dict[str, Any]:
        """``{"input": …}``, with ``"instructions"`` when there are some."""
        out: dict[str, Any] = {"input": self.input}
        if self.instructions is not None:
            out["instructions"] = self.instructions
        return out


def to_openai_responses(
    messages: Iterable[Message | Mapping[str, Any]],
    system_prompt: str | None = None,
    *,
    system_as: Literal["instructions", "developer", "system"] = "instructions",
) -> ResponsesRequest:
    """The Responses API request for ``messages`` (``store.context()``'s output, a
    compaction summary at its head included) and the session's system prompt.

    Raises:
        InvalidInputError: an item is not a message, or a tool result answers no call.
    """
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise InvalidInputError(f"system_prompt must be a string, got {brief(system_prompt)}")
    if system_as not in ("instructions", "developer", "system"):
        raise InvalidInputError(
            f"system_as must be 'instructions', 'developer' or 'system', got {brief(system_as)}"
        )
    items: list[dict[str, Any]] = []
    instructions = system_prompt if system_as == "instructions" else None
    if system_prompt is not None and system_as != "instructions":
        items.append({"type": "message", "role": system_as, "content": system_prompt})
    for message in p.paired(p.wire_messages(messages)):
        role = message["role"]
        if role == "user":
            parts = [_input_part(b) for b in p.blocks(message) if _is_input(b)]
            if parts:
                items.append({"type": "message", "role": "user", "content": parts})
        elif role == "assistant":
            items.extend(_assistant_items(message))
        else:
            items.append(_call_output(message))
    return ResponsesRequest(instructions=instructions, input=items)


def _is_input(block: dict[str, Any]) -> bool:
    return (block.get("type") == "text" and bool(block["text"])) or block.get("type") == "image"


def _input_part(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"type": "input_text", "text": block["text"]}
    return {"type": "input_image", "image_url": p.data_url(block), "detail": "auto"}


def _assistant_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    foreign = p.foreign(message, API)
    stored = message.get(AGENTS_ITEM)
    if (
        isinstance(stored, dict)
        and not foreign
        and AGENTS_ITEM_TEXT not in message
        and stored.get("type") not in (None, "message")
    ):
        # Stored whole by the OpenAI Agents adapter: reasoning, a call, a hosted tool's item.
        return [stored]
    items: list[dict[str, Any]] = []
    text_item: dict[str, Any] | None = None  # the message item text blocks go into
    for block in p.blocks(message):
        kind = block.get("type")
        if kind == "text":
            item_id = block.get("itemId") if not foreign else None
            if text_item is None or text_item.get("id") != item_id:
                text_item = {"type": "message", "role": "assistant", "content": []}
                if isinstance(item_id, str):
                    text_item.update(id=item_id, status="completed")
                items.append(text_item)
            if block.get("refusal"):
                text_item["content"].append({"type": "refusal", "refusal": block["text"]})
            else:
                text_item["content"].append(
                    {
                        "type": "output_text",
                        "text": block["text"],
                        "annotations": block.get("annotations", []),
                    }
                )
            continue
        text_item = None
        if kind == "toolCall":
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": block["id"],
                "name": block["name"],
                "arguments": p.arguments_text(block),
            }
            if isinstance(block.get("itemId"), str) and not foreign:
                call.update(id=block["itemId"], status="completed")
            items.append(call)
        elif kind == "thinking" and not foreign:
            item = block.get(ITEM_BLOCK)
            if item is None and message.get("api") == API:
                item = _pi_reasoning(block.get("thinkingSignature"))
            if isinstance(item, dict) and item.get("type") == "reasoning":
                items.append(item)
        elif kind == ITEM_BLOCK and isinstance(block.get("item"), dict) and not foreign:
            items.append(block["item"])
    return [i for i in items if i.get("type") != "message" or i["content"]]


def _pi_reasoning(signature: Any) -> Any:
    """The reasoning item a pi session file keeps as JSON text in ``thinkingSignature``."""
    if not isinstance(signature, str) or not signature.startswith("{"):
        return None
    try:
        return json.loads(signature)
    except (ValueError, RecursionError):  # broken, or too deep to parse
        return None


def _call_output(message: dict[str, Any]) -> dict[str, Any]:
    blocks = [b for b in p.blocks(message) if _is_input(b)]
    output: str | list[dict[str, Any]]
    if any(b["type"] == "image" for b in blocks):
        output = [_input_part(b) for b in blocks]
    else:
        output = "\n".join(b["text"] for b in blocks)
    return {"type": "function_call_output", "call_id": message["toolCallId"], "output": output}


def from_openai_responses(response: Mapping[str, Any]) -> list[Message]:
    """The message to append for a Responses API response (the JSON object the API
    returned, or the SDK's ``response.model_dump()``): one assistant message holding
    every output item, with ``usage``, ``model``, ``responseId`` and ``stopReason``
    (the response's ``status``).

    Raises:
        InvalidInputError: ``response`` is not a Responses API response, or it failed.
    """
    payload = p.obj(dict(response) if isinstance(response, Mapping) else response, "response")
    error = payload.get("error")
    if error is not None or payload.get("status") == "failed":
        detail = error.get("message") if isinstance(error, dict) else error
        raise InvalidInputError(f"response failed: {brief(detail)}")
    content: list[dict[str, Any]] = []
    for i, item in enumerate(p.array(payload.get("output"), "response.output")):
        content.extend(_from_item(p.obj(item, f"response.output[{i}]"), f"response.output[{i}]"))
    return [
        p.assistant_message(
            content,
            api=API,
            payload=payload,
            usage_value=_usage(payload.get("usage")),
            stop_reason=payload.get("status"),
        )
    ]


def _from_item(item: dict[str, Any], where: str) -> list[dict[str, Any]]:
    kind = item.get("type")
    if kind == "message":
        role = item.get("role")
        if role != "assistant":
            raise InvalidInputError(f"{where}.role must be 'assistant', got {brief(role)}")
        item_id = p.optional_text(item.get("id"), f"{where}.id")
        out = []
        for j, part in enumerate(p.array(item.get("content"), f"{where}.content")):
            at = f"{where}.content[{j}]"
            part = p.obj(part, at)
            if part.get("type") == "output_text":
                block: dict[str, Any] = {
                    "type": "text",
                    "text": p.text(part.get("text"), f"{at}.text"),
                }
                annotations = part.get("annotations")
                if annotations:
                    block["annotations"] = p.array(annotations, f"{at}.annotations")
            elif part.get("type") == "refusal":
                block = {"type": "text", "text": p.text(part.get("refusal"), f"{at}.refusal")}
                block["refusal"] = True
            else:
                raise InvalidInputError(f"{at}: unexpected part type {brief(part.get('type'))}")
            if item_id is not None:
                block["itemId"] = item_id
            out.append(block)
        return out
    if kind == "reasoning":
        summary = p.array(item.get("summary", []), f"{where}.summary")
        texts = [
            p.text(p.obj(s, f"{where}.summary[{j}]").get("text"), f"{where}.summary[{j}].text")
            for j, s in enumerate(summary)
        ]
        return [{"type": "thinking", "thinking": "\n\n".join(texts), ITEM_BLOCK: item}]
    if kind == "function_call":
        arguments = p.text(item.get("arguments"), f"{where}.arguments")
        call = p.tool_call(
            p.text(item.get("call_id"), f"{where}.call_id"),
            p.text(item.get("name"), f"{where}.name"),
            arguments,
        )
        item_id = p.optional_text(item.get("id"), f"{where}.id")
        if item_id is not None:
            call["itemId"] = item_id
        return [call]
    p.text(kind, f"{where}.type")
    return [{"type": ITEM_BLOCK, "item": item}]


def _usage(value: Any) -> dict[str, Any] | None:
    return p.openai_usage(value, "input_tokens", "output_tokens", "input_tokens_details")
