"""What the provider API formats share: reading payloads, pairing tool calls, usage.

Plain functions over plain values. Messages are handled as wire-shape dicts (camelCase,
only the fields that were set, unknown fields kept), the form the store holds them in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from ..errors import InvalidInputError, brief
from ..models import Message
from ..validation import check_depth

#: The text of the error result that stands in for a tool call with no stored result
#: (the agent stopped between the call and its result): every API refuses a call
#: without one.
MISSING_RESULT = "No result provided"

#: The ``api`` a message converted by each module carries (the names pi gives them).
ANTHROPIC_API = "anthropic-messages"
OPENAI_CHAT_API = "openai-completions"
OPENAI_RESPONSES_API = "openai-responses"


def wire_messages(messages: Iterable[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (models, or wire-shape dicts) as checked wire-shape dicts.

    Raises:
        InvalidInputError: an item is not a message.
    """
    if isinstance(messages, Message | Mapping | str | bytes):
        raise InvalidInputError(
            f"messages must be a list of messages, got {type(messages).__name__}"
        )
    out: list[dict[str, Any]] = []
    for index, item in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(item, Message | Mapping):
            raise InvalidInputError(
                f"{where}: expected a Message or a dict, got {type(item).__name__}"
            )
        try:
            model = item if isinstance(item, Message) else Message.model_validate(dict(item))
            wire = model.to_wire()
        except ValidationError as exc:
            raise InvalidInputError(f"{where}: {exc.errors()[0]['msg']}") from exc
        except ValueError as exc:  # PydanticSerializationError, UnicodeEncodeError, …
            # pydantic serialises about 250 levels, and no key with a lone surrogate.
            check_depth(item if isinstance(item, Mapping) else model.__dict__, where)
            raise InvalidInputError(f"{where}: cannot be serialised: {exc}") from None
        check_depth(wire, where, _text_or_none(wire))
        out.append(wire)
    return out


def _text_or_none(wire: dict[str, Any]) -> bytes | None:
    """orjson's text of ``wire`` (to count its brackets), ``None`` where orjson refuses."""
    try:
        return orjson.dumps(wire)
    except (TypeError, orjson.JSONEncodeError):
        return None


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, dict)]


def foreign(message: dict[str, Any], api: str) -> bool:
    """Whether ``message`` was converted from another API than ``api`` (its provider-only
    blocks and signatures mean nothing to ``api``). A message without ``api`` is not."""
    origin = message.get("api")
    return isinstance(origin, str) and origin != api


def paired(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each assistant message's tool results right after it, in the
    order of its calls, as every provider API demands.

    A result stored later (a user message came in between) moves up; a call with no
    stored result gets an error result saying :data:`MISSING_RESULT`; a second result
    for one call is left out.

    Raises:
        InvalidInputError: a tool result answers no call before it in ``messages``.
    """
    results: dict[str, dict[str, Any]] = {}
    for message in messages:
        call_id = message.get("toolCallId")
        if message["role"] == "toolResult" and isinstance(call_id, str):
            results.setdefault(call_id, message)
    out: list[dict[str, Any]] = []
    answered: set[str] = set()
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "toolResult":
            if message.get("toolCallId") not in answered:
                raise InvalidInputError(
                    f"messages[{index}]: tool result {brief(message.get('toolCallId'))} answers "
                    "no tool call before it"
                )
            continue
        out.append(message)
        if role != "assistant":
            continue
        for block in blocks(message):
            call_id = block.get("id")
            if block.get("type") != "toolCall" or not isinstance(call_id, str):
                continue
            if call_id in answered:
                continue  # the same call id twice: its one result is already placed
            answered.add(call_id)
            out.append(
                results.get(call_id)
                or {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": block.get("name"),
                    "content": [{"type": "text", "text": MISSING_RESULT}],
                    "isError": True,
                }
            )
    return out


# -- tool call arguments ----------------------------------------------------------------


def parse_arguments(text: str) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments from the JSON text a model wrote: ``(arguments, None)``,
    or ``({}, text)`` when the text is not a JSON object (models do write broken JSON;
    the text is kept so the call goes back to the API as it came)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # broken, or too deep to parse
        return {}, text
    if not isinstance(value, dict):
        return {}, text
    if compact_json(value) != text:
        # Keep the model's own spelling, so the request repeats it byte for byte.
        return value, text
    return value, None


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A ``toolCall`` block from a call's id, tool name and the JSON text of its
    arguments (kept as ``argumentsText`` when it is not the arguments' compact JSON,
    see :func:`parse_arguments`)."""
    parsed, written = parse_arguments(arguments)
    block: dict[str, Any] = {"type": "toolCall", "id": call_id, "name": name, "arguments": parsed}
    if written is not None:
        block["argumentsText"] = written
    return block


def arguments_text(block: dict[str, Any]) -> str:
    """The JSON text of a ``toolCall`` block's arguments, as the OpenAI APIs take it."""
    text = block.get("argumentsText")
    if isinstance(text, str):
        return text
    return compact_json(block.get("arguments") or {})


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- images -----------------------------------------------------------------------------

_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)", re.DOTALL)


def data_url(block: dict[str, Any]) -> str:
    """An ``image`` block as a ``data:`` URL."""
    return f"data:{block['mimeType']};base64,{block['data']}"


def image_from_url(url: str) -> dict[str, Any] | None:
    """An ``image`` block from a base64 ``data:`` URL; ``None`` for any other URL."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return None
    return {"type": "image", "data": match.group(2), "mimeType": match.group(1)}


# -- reading response payloads ----------------------------------------------------------


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where} must be an object, got {_kind(value)}")
    return value


def array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInputError(f"{where} must be an array, got {_kind(value)}")
    return value


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{where} must be a string, got {_kind(value)}")
    return value


def optional_text(value: Any, where: str) -> str | None:
    return None if value is None else text(value, where)


def count(value: Any, where: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError(f"{where} must be a non-negative integer, got {brief(value)}")
    return value


def usage(
    *, input: int, output: int, cache_read: int = 0, cache_write: int = 0, total: int
) -> dict[str, Any]:
    """sessiondb's usage: ``input`` counts the prompt tokens that were neither read from
    nor written to the cache, so ``input + cacheRead + cacheWrite`` is the whole prompt
    whichever provider reported it."""
    return {
        "input": input,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": total,
    }


def openai_usage(
    value: Any, prompt_field: str, output_field: str, details_field: str
) -> dict[str, Any] | None:
    """An OpenAI ``usage`` object (Chat Completions and Responses name the same counts
    differently); cached prompt tokens are not counted again as input."""
    if value is None:
        return None
    raw = obj(value, "response.usage")
    prompt = count(raw.get(prompt_field), f"response.usage.{prompt_field}")
    output = count(raw.get(output_field), f"response.usage.{output_field}")
    cached = 0
    details = raw.get(details_field)
    if details is not None:
        details = obj(details, f"response.usage.{details_field}")
        where = f"response.usage.{details_field}.cached_tokens"
        cached = count(details.get("cached_tokens"), where)
    total = raw.get("total_tokens")
    return usage(
        input=max(prompt - cached, 0),
        output=output,
        cache_read=cached,
        total=prompt + output if total is None else count(total, "response.usage.total_tokens"),
    )


def assistant_message(
    content: list[dict[str, Any]],
    *,
    api: str,
    payload: dict[str, Any],
    usage_value: dict[str, Any] | None,
    stop_reason: Any,
) -> Message:
    """The assistant message of a response: its blocks, usage and where it came from
    (``api``, ``model``, ``responseId``, the provider's own ``stopReason``)."""
    wire: dict[str, Any] = {"role": "assistant", "content": content, "api": api}
    model = payload.get("model")
    if isinstance(model, str):
        wire["model"] = model
    response_id = payload.get("id")
    if isinstance(response_id, str):
        wire["responseId"] = response_id
    if isinstance(stop_reason, str):
        wire["stopReason"] = stop_reason
    if usage_value is not None:
        wire["usage"] = usage_value
    # A response is JSON entering the store: the same nesting limit as an append.
    check_depth(wire, "response", _text_or_none(wire))
    try:
        return Message.model_validate(wire)
    except ValidationError as exc:  # pragma: no cover - the readers build valid blocks
        raise InvalidInputError(f"response: {exc.errors()[0]['msg']}") from exc


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
