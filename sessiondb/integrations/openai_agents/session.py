""":class:`SessionDBSession`: the SDK's ``Session`` and compaction-aware session protocols,
with branches and usage like ``AdvancedSQLiteSession``'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ...compaction import (
    CompactionSettings,
    Summarizer,
    plan_compaction,
    read_context,
    should_compact,
)
from ...config import Settings
from ...context import shows_summary, summary_message
from ...errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    SessionNotFoundError,
    SummarizerError,
    brief,
)
from ...ids import new_session_id
from ...models import Record, SessionInfo
from ...store import SessionStore
from ...validation import session_key, strict_int
from ..loops import MigrateOnce
from . import branches as br
from . import history
from .items import (
    POP_REASON,
    item_message,
    message_items,
    parse,
    record_item,
    responses_summary,
    stands_for_item,
    usage_messages,
    wire_items,
)

try:
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from ...errors import MissingDependencyError

    raise MissingDependencyError("openai-agents", "openai-agents") from exc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import OpenAIResponsesCompactionArgs

T = TypeVar("T")


class ResponsesCompactor(Protocol):
    """Compacts items as the Responses compaction endpoint does: ``await
    compactor(items)`` returns the items that stand for them (see
    :func:`responses_compactor`)."""

    async def __call__(self, items: list[Any]) -> list[Any]: ...


def responses_compactor(client: Any, model: str = "gpt-4.1") -> ResponsesCompactor:
    """A :class:`ResponsesCompactor` calling ``client.responses.compact`` (an
    ``openai.AsyncOpenAI``) with the items as ``input``."""

    async def compactor(items: list[Any]) -> list[Any]:
        compacted = await client.responses.compact(model=model, input=items)
        return list(getattr(compacted, "output", None) or [])

    return compactor


class SessionDBSession:
    """A conversation of the OpenAI Agents SDK, stored as a sessiondb session.

    Implements the SDK's ``Session`` protocol (``session_id``, ``session_settings``,
    ``get_items``, ``add_items``, ``pop_item``, ``clear_session``) and its
    compaction-aware one (``run_compaction``); pass it to ``Runner.run(...,
    session=...)``. Branches (``create_branch_from_turn``, ``list_branches``,
    ``switch_to_branch``, ``delete_branch``) and usage (``store_run_usage``,
    ``get_turn_usage``, ``get_tool_usage``, ``get_session_usage``) follow
    ``AdvancedSQLiteSession``'s names and shapes.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        store: SessionStore,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        create_kwargs: Mapping[str, Any] | None = None,
        summarizer: Summarizer | None = None,
        compactor: ResponsesCompactor | None = None,
        compaction_settings: CompactionSettings | None = None,
    ) -> None:
        """A session of ``store`` (in the store's namespace) addressed by ``session_id``.

        Args:
            session_id: the conversation's key: any string up to 512 characters,
                compared exactly (see :meth:`SessionStore.session_for_key`).
            store: an open :class:`SessionStore`; the caller closes it.
            session_settings: the SDK's settings (``limit``: the default of ``get_items``).
            create_kwargs: what :meth:`SessionStore.create_session` takes (``name``,
                ``model``, ``metadata``, …), for the session's first ``add_items``.
            summarizer: what :meth:`run_compaction` summarises with (any sessiondb
                :class:`Summarizer`, e.g. ``offline_summarizer``).
            compactor: instead of a summarizer, the Responses compaction endpoint
                (:func:`responses_compactor`): its output items become the compaction.
            compaction_settings: the trigger and what is kept (default
                ``CompactionSettings()``).

        Raises:
            InvalidInputError: ``session_id`` cannot be a key, or a bad argument.
        """
        self.session_id = session_key(session_id)
        if session_settings is None:
            self.session_settings = SessionSettings()
        elif isinstance(session_settings, Mapping):
            self.session_settings = coerce_session_settings(dict(session_settings))
        else:
            self.session_settings = coerce_session_settings(session_settings)
        if summarizer is not None and compactor is not None:
            raise InvalidInputError("give a summarizer or a compactor, not both")
        for name, value in (("summarizer", summarizer), ("compactor", compactor)):
            if value is not None and not callable(value):
                raise InvalidInputError(f"{name} must be an async callable, got {brief(value)}")
        if compaction_settings is not None and not isinstance(
            compaction_settings, CompactionSettings
        ):
            raise InvalidInputError(
                "compaction_settings must be a CompactionSettings, got "
                f"{brief(compaction_settings)}"
            )
        self._store = store
        self._owns_store = False
        self._migrated = MigrateOnce(store, pending=False)
        self._create_kwargs = dict(create_kwargs or {})
        self._summarizer = summarizer
        self._compactor = compactor
        self._compaction_settings = compaction_settings or CompactionSettings()
        self._sid: str | None = None  # sessiondb's id of the keyed session, once known
        self._branch = br.MAIN
        self._branch_sid: str | None = None  # the current branch's session, off main

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        namespace: str | None = None,
        create_tables: bool = False,
        **options: Any,
    ) -> SessionDBSession:
        """A session on a store of its own for ``url`` (``postgresql://…``, a SQLite
        path, …); connections open on first use, :meth:`close` closes them.

        Args:
            create_tables: run sessiondb's migrations before the first operation (for
                development; services run ``sessiondb migrate`` at deploy time).
            namespace: the store's namespace (default ``SESSIONDB_NAMESPACE``, else
                ``"default"``).
            options: what the constructor takes besides ``store``.
        """
        if not isinstance(create_tables, bool):
            raise InvalidInputError(f"create_tables must be True or False, got {create_tables!r}")
        if "store" in options:
            raise InvalidInputError("from_url makes its own store; pass url, not store")
        store = SessionStore(Settings.from_env(url, namespace))
        try:
            session = cls(session_id, store=store, **options)
        except TypeError as exc:
            raise InvalidInputError(f"SessionDBSession.from_url: {exc}") from None
        session._owns_store = True
        session._migrated.pending = create_tables
        return session

    @property
    def store(self) -> SessionStore:
        """The store the session lives in."""
        return self._store

    @property
    def current_branch(self) -> str:
        """The branch this object reads and writes (``"main"`` at first)."""
        return self._branch

    async def close(self) -> None:
        """Close the store if :meth:`from_url` opened it; else nothing."""
        if self._owns_store:
            await self._store.close()

    # -- the Session protocol --------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The current branch's items, oldest first; with ``limit`` (else
        ``session_settings.limit``) only the latest ``limit``, read by a query whose
        cost follows ``limit``, not the length of the history."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        last = limit
        while True:
            # The stored texts joined as one JSON array and parsed once: a model per
            # message would cost three times what the SDK's own store takes.
            text = await self._on_session(partial(self._store.context_json, last=last))
            if text is None:
                return []
            messages = parse(text)
            items: list[Any] = []
            for message in messages:
                items.extend(wire_items(message))
            if limit is None or len(items) >= limit or last is None or len(messages) < last:
                return items if limit is None else items[-limit:]
            # Usage records stand for no item: read further back for the rest.
            last = last + max(limit - len(items), last)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order, in one transaction."""
        if not items:
            return
        messages = [item_message(item, i) for i, item in enumerate(items)]
        await self._on_session(lambda sid: self._store.append(sid, messages), create=True)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (``None`` when there is none), by
        appending a tombstone; concurrent pops never return the same item. A usage
        record after the item goes with it."""
        while True:
            record = await self._on_session(lambda sid: self._store.pop(sid, reason=POP_REASON))
            if record is None:
                return None
            if stands_for_item(record):
                item: TResponseInputItem = record_item(record)
                return item

    async def clear_session(self) -> None:
        """Leave the current branch without items, by appending (the history stays in
        ``records()``)."""
        await self._on_session(self._store.clear)

    # -- compaction --------------------------------------------------------------------------

    async def run_compaction(self, args: OpenAIResponsesCompactionArgs | None = None) -> None:
        """The SDK's compaction hook (the Runner calls it after each turn): compact the
        current branch when ``args["force"]`` is true, else when the context is over
        ``compaction_settings``' threshold. See :meth:`compact`; ``response_id``,
        ``compaction_mode`` and ``store`` are not needed (the history sent is the
        stored one) and are ignored. Without a summarizer or compactor, only a forced
        run does anything: it raises :class:`ConfigurationError`."""
        if args is not None and not isinstance(args, Mapping):
            raise InvalidInputError(f"args must be a dict or None, got {brief(args)}")
        force = (args or {}).get("force", False)
        if not isinstance(force, bool):
            raise InvalidInputError(f"args['force'] must be True or False, got {brief(force)}")
        await self.compact(force=force)

    async def compact(self, *, force: bool = True) -> Record | None:
        """Write a compaction overlay on the current branch: the older part of the
        context becomes one summary, from the summarizer or the compactor; the newest
        ``compaction_settings.keep_recent_tokens`` stay as they are. Nothing is deleted
        (``records()`` keeps every item), and items appended while the summary is
        written are kept after it. With ``force=False`` only when the context is over
        the threshold, and a failed summary is not raised (see
        :meth:`SessionStore.maybe_compact`). The compaction record, or ``None`` when
        nothing was compacted.

        Raises:
            ConfigurationError: ``force`` without a summarizer or compactor.
            SummarizerError: the summarizer or compactor failed (``force`` only).
            ConflictError: the session changed under the compaction in a way that makes
                its plan invalid; nothing was written.
        """
        if not isinstance(force, bool):
            raise InvalidInputError(f"force must be True or False, got {brief(force)}")
        if self._summarizer is None and self._compactor is None:
            if force:
                raise ConfigurationError(
                    "compaction needs a summarizer or a compactor: "
                    "SessionDBSession(..., summarizer=offline_summarizer) or "
                    "compactor=responses_compactor(client)"
                )
            return None
        return await self._on_session(lambda sid: self._compact(sid, force))

    async def _compact(self, sid: str, force: bool) -> Record | None:
        settings = self._compaction_settings
        if self._compactor is not None:
            if not force and not should_compact(await self._store.context_tokens(sid), settings):
                return None
            return await self._compact_by_endpoint(sid, self._compactor)
        assert self._summarizer is not None
        if force:
            result = await self._store.compact(sid, self._summarizer, settings)
            return result.record
        outcome = await self._store.maybe_compact(sid, self._summarizer, settings)
        return outcome.result.record if outcome.result is not None else None

    async def _compact_by_endpoint(self, sid: str, compactor: ResponsesCompactor) -> Record | None:
        """The endpoint's output for the part of the context that sessiondb's plan would
        summarise, stored as the summary of a compaction at the plan's cut."""
        snapshot = await read_context(self._store, sid)
        plan = plan_compaction(snapshot.entries, snapshot.compaction, self._compaction_settings)
        if plan is None:
            return None
        previous = snapshot.compaction
        items: list[Any] = []
        if previous is not None and shows_summary(previous):
            items.extend(message_items(summary_message(previous)))
        for seq, message in snapshot.entries:
            if seq < plan.first_kept_seq:
                items.extend(message_items(message))
        try:
            output = await compactor(items)
        except Exception as exc:
            raise SummarizerError(f"the compactor failed: {exc!r}") from exc
        if not isinstance(output, list) or not output:
            raise SummarizerError(f"the compactor returned no items: {brief(output)}")
        summary = responses_summary(output)
        try:
            return await self._store.append_compaction(
                sid,
                summary=summary,
                first_kept_seq=plan.first_kept_seq,
                tokens_before=plan.summarized_tokens,
            )
        except InvalidInputError as exc:
            raise ConflictError(
                f"session {sid} changed while it was being compacted; nothing was written ({exc})"
            ) from exc

    # -- usage ---------------------------------------------------------------------------------

    async def store_run_usage(self, result: Any) -> None:
        """Store a run's usage (``RunResult.context_wrapper.usage``) on the current
        branch, after its items: one usage record per model request. The records stand
        for no item; the session's token totals, the compaction trigger and the
        ``get_*_usage`` methods read them."""
        usage = getattr(getattr(result, "context_wrapper", None), "usage", None)
        if usage is None:
            raise InvalidInputError(f"result has no context_wrapper.usage: {brief(result)}")
        messages = usage_messages(usage)
        if messages:
            await self._on_session(lambda sid: self._store.append(sid, messages), create=True)

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """Usage per user turn of a branch (default the current one), from the stored
        usage: a list of ``{user_turn_number, requests, input_tokens, output_tokens,
        total_tokens, input_tokens_details, output_tokens_details, cost}``; with
        ``user_turn_number`` that turn's dict (``{}`` when it reports none)."""
        if user_turn_number is not None:
            strict_int(user_turn_number, "user_turn_number", minimum=0)
        sid = await self._branch_sid_of(branch_id)
        rows = history.turn_usage(await self._messages(sid) if sid else [])
        if user_turn_number is None:
            return rows
        return next((r for r in rows if r["user_turn_number"] == user_turn_number), {})

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """``(tool_name, calls, turn)`` per tool and user turn of a branch (default the
        current one), in turn order."""
        sid = await self._branch_sid_of(branch_id)
        return history.tool_usage(await self._messages(sid) if sid else [])

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, Any] | None:
        """Usage totals ``{requests, input_tokens, output_tokens, total_tokens,
        total_turns, cost}`` of one branch (its inherited turns included), or of the
        whole conversation over every branch (each usage record counted once) when
        ``branch_id`` is ``None``; ``None`` when nothing reports usage."""
        if branch_id is not None:
            sid = await self._branch_sid_of(branch_id)
            records = await self._messages(sid) if sid else []
            return history.session_usage(history.turn_usage(records))
        turns: list[dict[str, Any]] = []
        for branch in await self._branches():
            records = await self._messages(branch.session_id)
            turns.extend(history.turn_usage(records, own=branch.session_id))
        return history.session_usage(turns)

    # -- branches ------------------------------------------------------------------------------

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of a branch (default the current one): ``{turn, content,
        full_content, timestamp, can_branch, seq}``, numbered from 1 along its whole
        history (compacted turns included)."""
        sid = await self._branch_sid_of(branch_id)
        if sid is None:
            return []
        return [t.as_dict() for t in history.user_turns(await self._messages(sid))]

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The turns of :meth:`get_conversation_turns` whose text contains
        ``search_term``."""
        if not isinstance(search_term, str):
            raise InvalidInputError(f"search_term must be a string, got {brief(search_term)}")
        turns = await self.get_conversation_turns(branch_id)
        return [t for t in turns if search_term in t["full_content"]]

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Branch off the current branch just before user turn ``turn_number`` (its
        items before that turn, by reference) and switch to the new branch; its id.

        Raises:
            InvalidInputError: no such turn, or a bad or already used ``branch_name``.
        """
        strict_int(turn_number, "turn_number", minimum=1)
        if branch_name is not None:
            branch_name = br.check_branch_id(branch_name, "branch_name")
        sid = await self._on_session(self._current_sid)
        turns = history.user_turns(await self._messages(sid)) if sid else []
        turn = next((t for t in turns if t.number == turn_number), None)
        if sid is None or turn is None:
            raise InvalidInputError(
                f"branch {self._branch!r} has no user turn {turn_number} (it has {len(turns)})"
            )
        name = branch_name or f"branch_from_turn_{turn_number}_{new_session_id()[-8:].lower()}"
        if name == br.MAIN or any(b.branch_id == name for b in await self._branches()):
            raise InvalidInputError(f"branch {name!r} exists already")
        info = await self._store.fork(sid, at_seq=turn.seq - 1, name=br.BRANCH_PREFIX + name)
        self._branch, self._branch_sid = name, info.id
        return name

    async def create_branch_from_content(
        self, search_term: str, branch_name: str | None = None
    ) -> str:
        """:meth:`create_branch_from_turn` at the first turn containing ``search_term``.

        Raises:
            InvalidInputError: no turn contains it.
        """
        turns = await self.find_turns_by_content(search_term)
        if not turns:
            raise InvalidInputError(f"no user turn contains {brief(search_term)}")
        return await self.create_branch_from_turn(turns[0]["turn"], branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Read and write branch ``branch_id`` from now on (this object only).

        Raises:
            InvalidInputError: no such branch.
        """
        branch = await self._require_branch(branch_id)
        self._branch = branch.branch_id
        self._branch_sid = None if branch.branch_id == br.MAIN else branch.session_id

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Delete a branch: its fork and the records it wrote (what it inherits stays
        with its parent). ``main`` cannot be deleted; the current branch only with
        ``force`` (this object then switches to ``main``).

        Raises:
            InvalidInputError: no such branch, ``main``, or the current one without ``force``.
            HasChildrenError: branches were made from it; delete those first.
        """
        if not isinstance(force, bool):
            raise InvalidInputError(f"force must be True or False, got {brief(force)}")
        branch = await self._require_branch(branch_id)
        if branch.branch_id == br.MAIN:
            raise InvalidInputError("the 'main' branch cannot be deleted")
        if branch.branch_id == self._branch and not force:
            raise InvalidInputError(
                f"{branch_id!r} is the current branch: switch first, or pass force=True"
            )
        await self._store.delete_session(branch.session_id)
        if branch.branch_id == self._branch:
            self._branch, self._branch_sid = br.MAIN, None

    async def list_branches(self) -> list[dict[str, Any]]:
        """The conversation's branches, ``main`` first: ``{branch_id, message_count,
        user_turns, is_current, created_at, session_id, parent_branch, fork_seq}``
        (counts over the branch's whole history, inherited items included)."""
        out = []
        for branch in await self._branches():
            records = await self._messages(branch.session_id)
            out.append(
                {
                    "branch_id": branch.branch_id,
                    "message_count": sum(
                        1
                        for r in records
                        if r.message is not None and history.stands_for_items(r.message)
                    ),
                    "user_turns": len(history.user_turns(records)),
                    "is_current": branch.branch_id == self._branch,
                    "created_at": branch.created_at.isoformat(),
                    "session_id": branch.session_id,
                    "parent_branch": branch.parent_branch,
                    "fork_seq": branch.fork_seq,
                }
            )
        return out

    async def _branches(self) -> list[br.Branch]:
        main = await self._main_info()
        return [] if main is None else await br.find_branches(self._store, main)

    async def _branch_sid_of(self, branch_id: str | None) -> str | None:
        """The session of branch ``branch_id`` (default the current one); ``None`` when
        the conversation has no session yet."""
        if branch_id is None:
            return await self._on_session(self._current_sid)
        return (await self._require_branch(branch_id)).session_id

    async def _require_branch(self, branch_id: str) -> br.Branch:
        branch_id = br.check_branch_id(branch_id)
        found = next((b for b in await self._branches() if b.branch_id == branch_id), None)
        if found is None:
            raise InvalidInputError(f"session {self.session_id!r} has no branch {branch_id!r}")
        return found

    async def _messages(self, sid: str) -> list[Record]:
        return await self._store.records(sid, kinds=("message",))

    async def _main_info(self) -> SessionInfo | None:
        await self._migrated()
        try:
            info = await self._store.session_for_key(self.session_id, create=False)
        except SessionNotFoundError:
            return None
        self._sid = info.id
        return info

    # -- helpers ------------------------------------------------------------------------------

    async def _current_sid(self, sid: str) -> str:
        return sid

    async def _on_session(
        self, op: Callable[[str], Awaitable[T]], *, create: bool = False
    ) -> T | None:
        """``op`` on sessiondb's id of the current branch's session; ``None`` when the
        key has no session and ``create`` is false. The id is cached; if its session
        was deleted meanwhile (and perhaps made again under the key by another
        process), the key is looked up once more; a branch deleted meanwhile leaves
        this object on ``main``."""
        for attempt in (1, 2):
            sid = self._branch_sid or await self._session(create=create)
            if sid is None:
                return None
            try:
                return await op(sid)
            except SessionNotFoundError:
                if self._branch_sid is not None:
                    self._branch, self._branch_sid = br.MAIN, None
                else:
                    self._sid = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _session(self, *, create: bool) -> str | None:
        """sessiondb's id of the keyed session; ``None`` when it does not exist and
        ``create`` is false."""
        if self._sid is not None:
            return self._sid
        await self._migrated()
        try:
            info = await self._store.session_for_key(
                self.session_id, create=create, **self._create_kwargs
            )
        except SessionNotFoundError:
            return None
        self._sid = info.id
        return info.id

    def __repr__(self) -> str:
        return (
            f"SessionDBSession({self.session_id!r}, namespace={self._store.namespace!r}, "
            f"branch={self._branch!r})"
        )


__all__ = ["ResponsesCompactor", "SessionDBSession", "responses_compactor"]
