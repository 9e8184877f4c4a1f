"""The OpenAI Agents SDK's ``Session`` protocol on sessiondb: :class:`SessionDBSession`.

.. code-block:: python

    from agents import Agent, Runner
    from sessiondb.integrations.openai_agents import SessionDBSession

    session = SessionDBSession.from_url("user:42/thread:7", url="postgresql://…")
    await Runner.run(agent, "hello", session=session)

The SDK's session id is the caller's key of a sessiondb session
(:meth:`SessionStore.session_for_key`), created on the first ``add_items``. Each
Responses-API item is one sessiondb message, so the context, compaction, forks, export
and the CLI see an SDK conversation like any other:

- a user, system or developer message is a ``user`` message, an assistant message an
  ``assistant`` message, with their text (and other parts) as content blocks;
- a ``function_call`` (and every other ``*_call`` item with a ``call_id``) is an
  ``assistant`` message with one ``toolCall`` block, its ``*_call_output`` a
  ``toolResult`` with that ``toolCallId``;
- ``reasoning`` is an ``assistant`` message with a ``thinking`` block of its summary;
  any other item type an ``assistant`` message with no content.

Every message also keeps the item exactly as it was added, under the wire field
``responsesItem``, and ``get_items`` gives that back: items round-trip value for value
whatever their type. Two things change what comes back, both on purpose: a compaction
(``SessionStore.compact``) shows as one user message item holding the summary, in front
of the items it kept; and a tool result pruned by compaction's first phase comes back
with the prune marker as its ``output``.

Nothing is ever deleted: ``pop_item`` appends a tombstone for the last item (only that
item: popping a tool result leaves its call), ``clear_session`` a compaction without a
summary (:meth:`SessionStore.clear`); ``records()`` keeps the whole history.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .. import jsoncodec
from ..config import Settings
from ..context import summary_text
from ..errors import InvalidInputError, MissingDependencyError, SessionNotFoundError
from ..models import Message, Record
from ..store import SessionStore
from ..validation import session_key

try:
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("openai-agents", "openai-agents") from exc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

T = TypeVar("T")

#: The wire field of a sessiondb message that holds the Responses-API item as added.
ITEM_FIELD = "responsesItem"
#: The wire field that says where in the item its text goes back (see ``_with_item``).
TEXT_FIELD = "responsesItemText"
#: The tombstone reason ``pop_item`` writes.
POP_REASON = "openai-agents pop_item"

_TEXT_PARTS = frozenset(("input_text", "output_text", "text", "summary_text", "reasoning_text"))
# Content block types that sessiondb validates; a part of one of these types that does
# not have their shape is left out of the content (the item keeps it).
_SESSIONDB_BLOCKS = frozenset(("text", "toolCall", "thinking", "image"))


class SessionDBSession:
    """A conversation of the OpenAI Agents SDK, stored as a sessiondb session.

    Implements the SDK's ``Session`` protocol (``session_id``, ``session_settings``,
    ``get_items``, ``add_items``, ``pop_item``, ``clear_session``); pass it to
    ``Runner.run(..., session=...)``.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        store: SessionStore,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        create_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """A session of ``store`` (in the store's namespace) addressed by ``session_id``.

        Args:
            session_id: the conversation's key: any string up to 512 characters,
                compared exactly (see :meth:`SessionStore.session_for_key`).
            store: an open :class:`SessionStore`; the caller closes it.
            session_settings: the SDK's settings (``limit``: the default of ``get_items``).
            create_kwargs: what :meth:`SessionStore.create_session` takes (``name``,
                ``model``, ``metadata``, …), for the session's first ``add_items``.

        Raises:
            InvalidInputError: ``session_id`` cannot be a key.
        """
        self.session_id = session_key(session_id)
        if session_settings is None:
            self.session_settings = SessionSettings()
        elif isinstance(session_settings, Mapping):
            self.session_settings = coerce_session_settings(dict(session_settings))
        else:
            self.session_settings = coerce_session_settings(session_settings)
        self._store = store
        self._owns_store = False
        self._migrate_first = False
        self._create_kwargs = dict(create_kwargs or {})
        self._sid: str | None = None  # sessiondb's id of the session, once known
        self._ready: asyncio.Lock | None = None

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        namespace: str | None = None,
        create_tables: bool = False,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        create_kwargs: Mapping[str, Any] | None = None,
    ) -> SessionDBSession:
        """A session on a store of its own for ``url`` (``postgresql://…``, a SQLite
        path, …); connections open on first use, :meth:`close` closes them.

        Args:
            create_tables: run sessiondb's migrations before the first operation (for
                development; services run ``sessiondb migrate`` at deploy time).
            namespace: the store's namespace (default ``SESSIONDB_NAMESPACE``, else
                ``"default"``).
        """
        if not isinstance(create_tables, bool):
            raise InvalidInputError(f"create_tables must be True or False, got {create_tables!r}")
        store = SessionStore(Settings.from_env(url, namespace))
        session = cls(
            session_id,
            store=store,
            session_settings=session_settings,
            create_kwargs=create_kwargs,
        )
        session._owns_store = True
        session._migrate_first = create_tables
        return session

    @property
    def store(self) -> SessionStore:
        """The store the session lives in."""
        return self._store

    async def close(self) -> None:
        """Close the store if :meth:`from_url` opened it; else nothing."""
        if self._owns_store:
            await self._store.close()

    # -- the protocol ---------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation's items, oldest first; with ``limit`` (else
        ``session_settings.limit``) only the latest ``limit``, read by a query whose
        cost follows ``limit``, not the length of the history."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        # The stored texts joined as one JSON array and parsed once: a model per message
        # would cost three times what the SDK's own store takes.
        text = await self._on_session(lambda sid: self._store.context_json(sid, last=limit))
        if text is None:
            return []
        items: list[Any] = []
        for message in _parse(text):
            items.extend(wire_items(message))
        return items if limit is None else items[-limit:]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order, in one transaction."""
        if not items:
            return
        messages = [item_message(item, i) for i, item in enumerate(items)]
        await self._on_session(lambda sid: self._store.append(sid, messages), create=True)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (``None`` when there is none), by
        appending a tombstone; concurrent pops never return the same item."""
        record = await self._on_session(lambda sid: self._store.pop(sid, reason=POP_REASON))
        return record_item(record) if record is not None else None

    async def clear_session(self) -> None:
        """Leave the conversation without items, by appending (the history stays in
        ``records()``)."""
        await self._on_session(self._store.clear)

    # -- helpers ------------------------------------------------------------------------------

    async def _on_session(
        self, op: Callable[[str], Awaitable[T]], *, create: bool = False
    ) -> T | None:
        """``op`` on sessiondb's id of the session; ``None`` when the key has no session
        and ``create`` is false. The id is cached; if its session was deleted meanwhile
        (and perhaps made again under the key by another process), the key is looked
        up once more."""
        for attempt in (1, 2):
            sid = await self._session(create=create)
            if sid is None:
                return None
            try:
                return await op(sid)
            except SessionNotFoundError:
                self._sid = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _session(self, *, create: bool) -> str | None:
        """sessiondb's id of the session; ``None`` when it does not exist and ``create``
        is false."""
        if self._sid is not None:
            return self._sid
        if self._migrate_first:
            if self._ready is None:
                self._ready = asyncio.Lock()
            async with self._ready:
                if self._migrate_first:
                    await self._store.migrate()
                    self._migrate_first = False
        try:
            info = await self._store.session_for_key(
                self.session_id, create=create, **self._create_kwargs
            )
        except SessionNotFoundError:
            return None
        self._sid = info.id
        return info.id

    def __repr__(self) -> str:
        return f"SessionDBSession({self.session_id!r}, namespace={self._store.namespace!r})"


def _parse(text: str) -> Any:
    """``jsoncodec.loads`` with the cyclic garbage collector paused.

    A context of 20,000 items parses into ~200,000 containers, and the collector's full
    passes over a big heap took most of the time: 0.40 s against 0.05 s with it paused.
    The parse makes no cycles and holds the GIL throughout, so pausing the collector
    for it alone leaves nothing uncollected; its previous state is restored.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return jsoncodec.loads(text)
    finally:
        if paused:
            gc.enable()


# -- items <-> messages: plain functions ---------------------------------------------------


def item_message(item: Any, index: int = 0) -> dict[str, Any]:
    """The sessiondb wire message that stores one Responses-API item.

    Raises:
        InvalidInputError: ``item`` is not a JSON object (a dict, or a pydantic model of
            the SDK's, which is stored as its ``model_dump``).
    """
    if not isinstance(item, Mapping) and callable(getattr(item, "model_dump", None)):
        item = item.model_dump(mode="json", exclude_unset=True)
    if not isinstance(item, Mapping):
        raise InvalidInputError(
            f"item {index}: a Responses-API item is a dict, got {type(item).__name__}"
        )
    item = item if isinstance(item, dict) else dict(item)
    kind = item.get("type")
    role = item.get("role")
    call_id = item.get("call_id")
    has_call_id = isinstance(call_id, str) and call_id != ""
    if kind in (None, "message") and role in ("user", "system", "developer", "assistant"):
        message: dict[str, Any] = {
            "role": "assistant" if role == "assistant" else "user",
            "content": content_blocks(item.get("content")),
        }
        return _with_item(message, item, "content")
    elif isinstance(kind, str) and kind.endswith("_call_output") and has_call_id:
        message = {
            "role": "toolResult",
            "content": content_blocks(item.get("output")),
            "toolCallId": call_id,
        }
        return _with_item(message, item, "output")
    elif isinstance(kind, str) and kind.endswith("_call") and has_call_id:
        name = item.get("name")
        message = {
            "role": "assistant",
            "content": [
                {
                    "type": "toolCall",
                    "id": call_id,
                    "name": name if isinstance(name, str) else kind,
                    "arguments": _arguments(item),
                }
            ],
        }
    elif kind == "reasoning":
        message = {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": _reasoning(item)}],
        }
    else:
        message = {"role": "assistant", "content": []}
    message[ITEM_FIELD] = item
    return message


def _with_item(message: dict[str, Any], item: dict[str, Any], key: str) -> dict[str, Any]:
    """``message`` holding ``item``, whose text under ``key`` the content blocks already
    hold: it is stored once, as the blocks. The item keeps ``null`` in its place (and its
    key order) and ``TEXT_FIELD`` says where the text goes back: ``key`` for a string,
    ``key[]`` for a list of text parts, whose ``text`` fields are nulled. Items are read
    far more often than written, and parsing the text twice made ``get_items`` of a long
    session slower than the SDK's own store."""
    value = item.get(key)
    if isinstance(value, str):
        message[ITEM_FIELD] = {**item, key: None}
        message[TEXT_FIELD] = key
    elif (
        isinstance(value, list)
        and value
        and all(
            isinstance(p, dict) and p.get("type") in _TEXT_PARTS and isinstance(p.get("text"), str)
            for p in value
        )
    ):
        message[ITEM_FIELD] = {**item, key: [{**p, "text": None} for p in value]}
        message[TEXT_FIELD] = key + "[]"
    else:
        message[ITEM_FIELD] = item
    return message


def content_blocks(content: Any) -> list[dict[str, Any]]:
    """Content blocks for a Responses-API ``content`` or ``output``: text parts as text
    blocks, a data-URL ``input_image`` as an image block, any other part as it is."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts = content if isinstance(content, list) else [content] if isinstance(content, dict) else []
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        text = part.get("text") if kind != "refusal" else part.get("refusal")
        if kind in _TEXT_PARTS or kind == "refusal":
            if isinstance(text, str):
                blocks.append({"type": "text", "text": text})
        elif kind == "input_image" and _data_url(part.get("image_url")) is not None:
            mime, data = _data_url(part.get("image_url")) or ("", "")
            blocks.append({"type": "image", "data": data, "mimeType": mime})
        elif isinstance(kind, str) and kind not in _SESSIONDB_BLOCKS:
            blocks.append(part)
    return blocks


def _data_url(url: Any) -> tuple[str, str] | None:
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    mime, _, encoding = head.partition(";")
    return (mime, data) if sep and encoding == "base64" and mime else None


def _arguments(item: dict[str, Any]) -> dict[str, Any]:
    raw = item.get("arguments")
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):  # broken, or too deep to parse
            return {"arguments": raw}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {k: item[k] for k in ("input", "action", "arguments") if k in item}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _reasoning(item: dict[str, Any]) -> str:
    texts = [
        part["text"]
        for key in ("summary", "content")
        for part in _list(item.get(key))
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def wire_items(wire: dict[str, Any]) -> list[Any]:
    """The Responses-API items a context message (in its wire shape, as
    ``context_json`` gives it) stands for: the stored item (with a pruned tool result's
    marker as its output), else items made from the message (a compaction's summary is
    one user message item)."""
    item = wire.get(ITEM_FIELD)
    if isinstance(item, dict):
        content = wire.get("content")
        text_at = wire.get(TEXT_FIELD)
        if isinstance(text_at, str) and isinstance(content, list):
            return [_text_back(item, text_at, content)]
        if (
            wire.get("role") == "toolResult"
            and "output" in item
            and isinstance(content, list)
            and len(content) == 1
            and content[0].get("type") == "text"
            and content != content_blocks(item["output"])
        ):
            # Pruned (compaction's first phase): the context shows the marker instead.
            return [{**item, "output": content[0].get("text")}]
        return [item]
    return message_items(Message.model_validate(wire))


def _text_back(item: dict[str, Any], text_at: str, content: list[Any]) -> dict[str, Any]:
    """The item with its text put back from the content blocks (see :func:`_with_item`).
    A tool result pruned by compaction's first phase holds one text block, the marker:
    its output becomes the marker."""
    key = text_at.removesuffix("[]")
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    value = item.get(key)
    if text_at.endswith("[]") and isinstance(value, list) and len(texts) == len(value):
        return {**item, key: [{**p, "text": t} for p, t in zip(value, texts, strict=True)]}
    return {**item, key: "\n".join(t for t in texts if isinstance(t, str))}


def message_items(message: Message) -> list[Any]:
    """:func:`wire_items` of a message model."""
    extra = message.model_extra or {}
    if isinstance(extra.get(ITEM_FIELD), dict):
        return wire_items(
            {
                "role": message.role,
                "content": _wire_content(message),
                ITEM_FIELD: extra[ITEM_FIELD],
                TEXT_FIELD: extra.get(TEXT_FIELD),
            }
        )
    if message.role == "user":
        return [{"role": "user", "content": message.text()}]
    if message.role == "toolResult":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.text(),
            }
        ]
    items: list[Any] = []
    if message.text():
        items.append({"role": "assistant", "content": message.text()})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments, ensure_ascii=False),
        }
        for call in message.tool_calls()
    )
    return items


def _wire_content(message: Message) -> list[dict[str, Any]]:
    return [block.to_wire() for block in message.content]


def record_item(record: Record) -> Any:
    """The item a record popped by :meth:`SessionStore.pop` stands for."""
    if record.message is not None:
        return message_items(record.message)[-1]
    assert record.compaction is not None
    return {"role": "user", "content": summary_text(record.compaction.summary)}


__all__ = ["ITEM_FIELD", "SessionDBSession", "item_message", "message_items", "wire_items"]
