"""Models built from stored payloads without validating them again.

A payload was checked in full when it was written (``models.wire_message``), so reading
it back needs no second validation: pydantic's costs ~12 µs a message here, three times
what parsing the JSON costs, and made ``context()`` and ``records()`` several times
slower than the rows they read. These builders fill the models' fields the way
``model_validate`` would (aliases and field names, defaults, unknown fields kept as
extras, the set of fields given), which ``tests/test_fastmodels.py`` checks against
``model_validate`` on generated messages. Anything they do not expect falls back to
``model_validate``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .models import (
    ImageContent,
    Message,
    OtherContent,
    Record,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    Usage,
)

M = TypeVar("M", bound=BaseModel)


class _Builder:
    """Builds one model class from a dict of its wire shape."""

    def __init__(self, cls: type[BaseModel]) -> None:
        self.cls = cls
        self.keys: dict[str, str] = {}
        # Every field in declaration order (the serializer writes __dict__ in its order).
        self.template: dict[str, Any] = {}
        self.factories: list[tuple[str, Callable[[], Any]]] = []
        self.required: list[str] = []
        for name, field in cls.model_fields.items():
            self.keys[name] = name
            if field.alias:
                self.keys[field.alias] = name
            self.template[name] = field.default
            if field.default_factory is not None:
                self.factories.append((name, field.default_factory))  # type: ignore[arg-type]
            elif field.default is PydanticUndefined:
                self.required.append(name)

    def __call__(self, data: dict[str, Any]) -> Any:
        values = dict(self.template)
        for name, factory in self.factories:
            values[name] = factory()
        given: set[str] = set()
        extra: dict[str, Any] = {}
        keys = self.keys
        for key, value in data.items():
            field = keys.get(key)
            if field is None:
                extra[key] = value
                given.add(key)
            else:
                values[field] = value
                given.add(field)
        for name in self.required:
            if values[name] is PydanticUndefined:
                raise KeyError(name)
        model = object.__new__(self.cls)
        object.__setattr__(model, "__dict__", values)
        object.__setattr__(model, "__pydantic_fields_set__", given)
        object.__setattr__(model, "__pydantic_extra__", extra)
        object.__setattr__(model, "__pydantic_private__", None)
        return model


_BLOCKS = {
    "text": _Builder(TextContent),
    "toolCall": _Builder(ToolCallContent),
    "thinking": _Builder(ThinkingContent),
    "image": _Builder(ImageContent),
}
_OTHER = _Builder(OtherContent)
_MESSAGE = _Builder(Message)
_USAGE = _Builder(Usage)


def message(data: Any) -> Message:
    """A stored message payload (parsed JSON) as a :class:`Message`."""
    try:
        return _message(data)
    except (KeyError, TypeError, AttributeError):
        return Message.model_validate(data)


def _message(data: dict[str, Any]) -> Message:
    built: Message = _MESSAGE(data)
    values = built.__dict__
    content = values["content"]
    if isinstance(content, str):
        values["content"] = [_BLOCKS["text"]({"type": "text", "text": content})]
    else:
        values["content"] = [_BLOCKS.get(b["type"], _OTHER)(b) for b in content]
    usage = values["usage"]
    if usage is not None:
        values["usage"] = _USAGE(usage)
    return built


_RECORD_FIELDS = tuple(Record.model_fields)


def record(values: dict[str, Any]) -> Record:
    """A :class:`Record` from its fields (``session_id``, ``seq``, ``kind``,
    ``created_at``, ``uuid`` and the one typed field its kind has), all already models."""
    full = dict.fromkeys(_RECORD_FIELDS)
    full.update(values)
    model = object.__new__(Record)
    object.__setattr__(model, "__dict__", full)
    object.__setattr__(model, "__pydantic_fields_set__", set(values))
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    return model
