"""LangChain chat message history on sessiondb (``pip install 'sessiondb[langchain]'``).

:class:`SessionDBChatMessageHistory` is a ``BaseChatMessageHistory`` for one
conversation, addressed by the caller's own key (``SessionStore.session_for_key``):
plug it into ``RunnableWithMessageHistory`` or use it directly.

How LangChain messages are stored: a ``HumanMessage`` (and a ``SystemMessage``, a
``ChatMessage``, any other kind) is a ``user`` message, an ``AIMessage`` an
``assistant`` message whose ``tool_calls`` are ``toolCall`` blocks and whose
``usage_metadata`` is the message's usage, a ``ToolMessage`` a ``toolResult``. So the
session's context works with everything else in sessiondb (compaction, the provider
formats, exports). What sessiondb's shape does not hold (the message's kind and
``id``, ``name``, ``additional_kwargs``, ``response_metadata``, content parts with no
block of their own, …) is kept under the message's ``langchain`` field, only where it
differs from what the blocks give back, and restored when the message is read: every
message reads back equal to the one added. A message appended by other code (or a
compaction summary) reads back as the LangChain message of its role.

``clear`` appends one record (``SessionStore.clear``: a compaction with no summary
that supersedes everything before it), whatever the history's length: the history
reads back empty, and ``store.records(session_id)`` still shows every message for audit.

Sync and async: every call runs on the event loop the store belongs to (asyncpg's
connections are tied to one): for a store passed in, the loop running where the first
history on that store was built or first called, else a loop thread kept for that store,
so that a sync program can share one store (``SessionStore(url)``) between histories;
for a URL, a loop thread of the history's own. The async methods (``aget_messages``,
``aadd_messages``, ``aclear``) await the call there from any loop. The sync ones
(``messages``, ``add_messages``, ``clear``) work from any thread that is not running an
event loop; on a thread that is running one they would block it, so they raise
:class:`SyncCallInLoopError` instead: use the async methods there. Call :meth:`close`
(or :meth:`aclose`) when done with a history built from a URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from .. import jsoncodec
from ..config import Settings
from ..errors import InvalidInputError, MissingDependencyError, SessionDBError, SessionNotFoundError
from ..store import SessionStore
from .loops import LoopThread

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
except ImportError as exc:  # pragma: no cover - the extra is installed where this is tested
    raise MissingDependencyError("langchain-core", "langchain") from exc

__all__ = [
    "LANGCHAIN_FIELD",
    "SessionDBChatMessageHistory",
    "SyncCallInLoopError",
    "message_from_wire",
    "message_to_wire",
]

T = TypeVar("T")

#: The field of a stored message that holds what sessiondb's shape lacks.
LANGCHAIN_FIELD = "langchain"

_ROLE_OF_KIND = {
    "human": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "tool": "toolResult",
    "ToolMessageChunk": "toolResult",
}
_KIND_OF_ROLE = {"user": "human", "assistant": "ai", "toolResult": "tool"}


class SyncCallInLoopError(SessionDBError, RuntimeError):
    """A sync method of the chat history was called on a thread that runs an event loop;
    it would block that loop. Use aget_messages, aadd_messages and aclear there."""


# -- messages ---------------------------------------------------------------------------


def message_to_wire(message: BaseMessage) -> dict[str, Any]:
    """The sessiondb wire-shape message for a LangChain message (see the module's
    docstring); :func:`message_from_wire` gives back an equal message.

    Raises:
        InvalidInputError: ``message`` is not a LangChain message.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidInputError(f"expected a LangChain message, got {type(message).__name__}")
    dumped = message_to_dict(message)
    kind, body = dumped["type"], dumped["data"]
    role = _ROLE_OF_KIND.get(kind, "user")
    wire: dict[str, Any] = {"role": role, "content": _blocks(message.content)}
    if role == "assistant":
        calls = getattr(message, "tool_calls", None) or []
        if all(_plain_call(call) for call in calls):
            wire["content"].extend(
                {"type": "toolCall", "id": c["id"], "name": c["name"], "arguments": c["args"]}
                for c in calls
            )
        usage = _usage(getattr(message, "usage_metadata", None))
        if usage is not None:
            wire["usage"] = usage
    elif role == "toolResult":
        wire["toolCallId"] = getattr(message, "tool_call_id", None)
        if isinstance(message.name, str):
            wire["toolName"] = message.name
        if getattr(message, "status", None) == "error":
            wire["isError"] = True
    derived = _derived(wire)
    fields = type(message).model_fields
    kept: dict[str, Any] = {}
    for name, value in body.items():
        if name in derived:
            if derived[name] == value:
                continue
        elif (
            name in fields
            and not fields[name].is_required()
            and fields[name].get_default(call_default_factory=True) == value
        ):
            continue
        kept[name] = value
    wire[LANGCHAIN_FIELD] = {"type": kind, "data": kept} if kept else {"type": kind}
    return wire


def message_from_wire(wire: Mapping[str, Any]) -> BaseMessage:
    """The LangChain message for a stored wire-shape message: the one that was added,
    or, for a message stored by other code, the message of its role."""
    stored = wire.get(LANGCHAIN_FIELD)
    data = _derived(wire)
    kind = _KIND_OF_ROLE[wire["role"]]
    if isinstance(stored, dict) and isinstance(stored.get("type"), str):
        kind = stored["type"]
        data.update(stored.get("data") or {})
    return messages_from_dict([{"type": kind, "data": data}])[0]


def _plain_call(call: Any) -> bool:
    return (
        isinstance(call, dict)
        and isinstance(call.get("id"), str)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("args"), dict)
    )


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Text and image blocks for LangChain content; parts of other kinds have no block
    (the content is then kept whole under the ``langchain`` field)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, str):
            out.append({"type": "text", "text": part})
        elif (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            out.append({"type": "text", "text": part["text"]})
        elif isinstance(part, dict) and part.get("type") == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
                mime, data = url[5:].split(";base64,", 1)
                out.append({"type": "image", "data": data, "mimeType": mime})
    return out


def _content(blocks: list[dict[str, Any]]) -> str | list[Any]:
    """LangChain content for text and image blocks: the inverse of :func:`_blocks`."""
    shown = [b for b in blocks if b.get("type") in ("text", "image")]
    if not shown:
        return ""
    if len(shown) == 1 and shown[0]["type"] == "text":
        return str(shown[0]["text"])
    return [
        {"type": "text", "text": b["text"]}
        if b["type"] == "text"
        else {"type": "image_url", "image_url": {"url": f"data:{b['mimeType']};base64,{b['data']}"}}
        for b in shown
    ]


def _derived(wire: Mapping[str, Any]) -> dict[str, Any]:
    """The LangChain fields a stored message's own shape gives."""
    blocks = wire["content"]
    if isinstance(blocks, str):
        blocks = [{"type": "text", "text": blocks}]
    data: dict[str, Any] = {"content": _content(blocks)}
    role = wire["role"]
    if role == "assistant":
        data["tool_calls"] = [
            {"name": b["name"], "args": b.get("arguments", {}), "id": b["id"], "type": "tool_call"}
            for b in blocks
            if b.get("type") == "toolCall"
        ]
        data["usage_metadata"] = _usage_metadata(wire.get("usage"))
    elif role == "toolResult":
        data["tool_call_id"] = wire["toolCallId"]
        data["name"] = wire.get("toolName")
        data["status"] = "error" if wire.get("isError") else "success"
    return data


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _usage(metadata: Any) -> dict[str, Any] | None:
    """sessiondb usage for LangChain ``usage_metadata`` (whose ``input_tokens`` counts
    cached tokens too; sessiondb's ``input`` does not)."""
    if not isinstance(metadata, dict):
        return None
    prompt = _count(metadata.get("input_tokens"))
    output = _count(metadata.get("output_tokens"))
    total = _count(metadata.get("total_tokens"))
    details = metadata.get("input_token_details") or {}
    read = _count(details.get("cache_read", 0)) if isinstance(details, dict) else None
    write = _count(details.get("cache_creation", 0)) if isinstance(details, dict) else None
    if prompt is None or output is None or total is None or read is None or write is None:
        return None
    return {
        "input": max(prompt - read - write, 0),
        "output": output,
        "cacheRead": read,
        "cacheWrite": write,
        "totalTokens": total,
    }


def _usage_metadata(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    read, write = usage.get("cacheRead", 0), usage.get("cacheWrite", 0)
    prompt = usage.get("input", 0) + read + write
    out: dict[str, Any] = {
        "input_tokens": prompt,
        "output_tokens": usage.get("output", 0),
        "total_tokens": usage.get("totalTokens", prompt + usage.get("output", 0)),
    }
    if read or write:
        out["input_token_details"] = {"cache_read": read, "cache_creation": write}
    return out


# -- the history ------------------------------------------------------------------------


class SessionDBChatMessageHistory(BaseChatMessageHistory):
    """The messages of one conversation, kept in a sessiondb session.

    Args:
        key: the caller's own key for the conversation (a chat id, ``user:42/thread:7``);
            the session is found by it in the store's namespace, and created with
            ``create_kwargs`` the first time a message is added.
        store: an open :class:`~sessiondb.SessionStore` (the caller closes it), or a
            database URL (the history opens a store and :meth:`close` closes it).
        namespace: the namespace, for a URL (a store has its own).
        create_kwargs: what ``SessionStore.create_session`` takes (``name``, ``model``,
            ``system_prompt_override``, ``metadata``, …) for a new session.

    Raises:
        InvalidInputError: ``key`` is not a non-empty string, or ``store`` neither a
            store nor a URL.
    """

    def __init__(
        self,
        key: str,
        store: SessionStore | str,
        *,
        namespace: str | None = None,
        create_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"key must be a non-empty string, got {key!r}")
        if not isinstance(store, SessionStore | str):
            raise InvalidInputError(
                f"store must be a SessionStore or a database URL, got {type(store).__name__}"
            )
        if isinstance(store, SessionStore) and namespace is not None:
            raise InvalidInputError("namespace goes with a URL; a store has its own")
        self.key = key
        self._url = store if isinstance(store, str) else None
        self._namespace = namespace
        self._store = store if isinstance(store, SessionStore) else None
        self._create_kwargs = dict(create_kwargs or {})
        self._session_id: str | None = None
        # A history built from a URL owns its store and the loop thread it runs on.
        self._runner: LoopThread | None = None
        self._lock = threading.Lock()
        if self._store is not None:
            with contextlib.suppress(RuntimeError):
                home_of(self._store, asyncio.get_running_loop())

    @property
    def session_id(self) -> str | None:
        """The id of the conversation's session, once it has been looked up."""
        return self._session_id

    # -- the LangChain interface ----------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The conversation's messages (its context: a compaction summary first, if the
        session was compacted; tombstoned messages left out).

        Raises:
            SyncCallInLoopError: called on a thread that runs an event loop.
        """
        return self._call(self._get)

    async def aget_messages(self) -> list[BaseMessage]:
        """The conversation's messages, as :attr:`messages`."""
        return await self._acall(self._get)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one transaction, creating the session if needed.

        Raises:
            InvalidInputError: an item is not a LangChain message, or holds a value that
                JSON cannot (nothing is written).
            SyncCallInLoopError: called on a thread that runs an event loop.
        """
        wires = [message_to_wire(m) for m in messages]
        self._call(lambda store: self._add(store, wires))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one transaction, as :meth:`add_messages`."""
        wires = [message_to_wire(m) for m in messages]
        await self._acall(lambda store: self._add(store, wires))

    def clear(self) -> None:
        """Empty the conversation by appending (``SessionStore.clear``); its records stay
        for audit.

        Raises:
            SyncCallInLoopError: called on a thread that runs an event loop.
        """
        self._call(self._clear)

    async def aclear(self) -> None:
        """Empty the conversation by appending, as :meth:`clear`."""
        await self._acall(self._clear)

    def close(self) -> None:
        """Close the store the history opened from a URL and stop its loop thread (a
        later call opens them again); a store the caller passed stays open. Idempotent.
        ``with`` / ``async with`` a history closes it at the end.

        Raises:
            SyncCallInLoopError: called on a thread that runs an event loop.
        """
        if self._url is None:
            return
        _in_loop_check()
        with self._lock:
            runner, self._runner = self._runner, None
            store, self._store = self._store, None
        if runner is None:
            return
        if store is not None:
            asyncio.run_coroutine_threadsafe(store.close(), runner.loop).result()
        runner.stop()

    async def aclose(self) -> None:
        """:meth:`close`, from async code."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> SessionDBChatMessageHistory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> SessionDBChatMessageHistory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- operations -----------------------------------------------------------------

    async def _get(self, store: SessionStore) -> list[BaseMessage]:
        session_id = await self._find(store, create=False)
        if session_id is None:
            return []
        try:
            text = await store.context_json(session_id)
        except SessionNotFoundError:
            self._session_id = None  # deleted meanwhile
            return []
        return [message_from_wire(m) for m in jsoncodec.loads(text)]

    async def _add(self, store: SessionStore, wires: list[dict[str, Any]]) -> None:
        if not wires:
            return
        session_id = await self._find(store, create=True)
        assert session_id is not None
        try:
            await store.append(session_id, wires)
        except SessionNotFoundError:
            self._session_id = None  # deleted meanwhile: the key gets a new session
            session_id = await self._find(store, create=True)
            assert session_id is not None
            await store.append(session_id, wires)

    async def _clear(self, store: SessionStore) -> None:
        session_id = await self._find(store, create=False)
        if session_id is not None:
            await store.clear(session_id)

    async def _find(self, store: SessionStore, *, create: bool) -> str | None:
        if self._session_id is not None:
            return self._session_id
        try:
            info = await store.session_for_key(self.key, create=create, **self._create_kwargs)
        except SessionNotFoundError:
            if create:
                raise
            return None
        self._session_id = info.id
        return info.id

    # -- where the operations run ---------------------------------------------------

    def _home_loop(self, current: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
        """The loop the store belongs to (see :func:`home_of`); for a URL, the history's
        own loop thread, with the store opened on it."""
        if self._url is None:
            assert self._store is not None
            return home_of(self._store, current)
        with self._lock:
            if self._runner is None:
                self._runner = LoopThread("sessiondb-langchain")
                self._store = SessionStore(Settings.from_env(self._url, self._namespace))
            return self._runner.loop

    async def _acall(self, operation: Callable[[SessionStore], Awaitable[T]]) -> T:
        current = asyncio.get_running_loop()
        home = self._home_loop(current)
        if home is current:
            return await self._on_home(operation)
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._on_home(operation), home)
        )

    def _call(self, operation: Callable[[SessionStore], Awaitable[T]]) -> T:
        _in_loop_check()
        home = self._home_loop(None)
        if not home.is_running():
            raise SessionDBError(
                "the event loop this history's store belongs to is not running; call the "
                "async methods from it, or use the store from sync code only"
            )
        return asyncio.run_coroutine_threadsafe(self._on_home(operation), home).result()

    async def _on_home(self, operation: Callable[[SessionStore], Awaitable[T]]) -> T:
        store = self._store
        if store is None:
            raise SessionDBError("the history is closed")
        return await operation(store)


def home_of(
    store: SessionStore, current: asyncio.AbstractEventLoop | None
) -> asyncio.AbstractEventLoop:
    """The loop ``store`` belongs to, deciding it on first use: ``current`` if a loop is
    running, else a new loop thread.

    A store's connections belong to the event loop they were opened on (asyncpg's pool
    does), so every history on one store runs its calls on one loop: the running loop
    the first history was built in or first called from, else a loop thread kept for
    the store (an idle daemon thread; it ends with the process). The choice is the
    store's own state (``store.core.home_loop``).
    """
    core = store.core
    with core.home_lock:
        home = core.home_loop
        if home is None or home.is_closed():
            home = current if current is not None else LoopThread("sessiondb-langchain").loop
            core.home_loop = home
        return home


def _in_loop_check() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise SyncCallInLoopError()
