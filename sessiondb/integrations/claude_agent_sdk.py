"""The Claude Agent SDK's ``SessionStore`` protocol on sessiondb: :class:`SessionDBSessionStore`.

.. code-block:: python

    from claude_agent_sdk import ClaudeAgentOptions, query
    from sessiondb.integrations.claude_agent_sdk import SessionDBSessionStore

    store = SessionDBSessionStore("postgresql://…", create_tables=True)
    options = ClaudeAgentOptions(session_store=store)
    async for message in query(prompt="hello", options=options): ...

**Keys.** The SDK addresses a transcript by ``project_key``, ``session_id`` and, for a
subagent's transcript, ``subpath``. Each is one sessiondb session in the store's own
namespace, under the session key (:meth:`SessionStore.session_for_key`)
``claude-agent-sdk:<project_key>/<session_id>[/<subpath>]`` (``%`` and ``/`` in the
first two written ``%25`` and ``%2F``): ``project_key`` is a key prefix, not a
namespace, so an adapter never leaves the namespace its store was opened for (a tenant
stays a tenant), and one store serves every project. A subagent's session is a child of
its main session (``parent_id``, ``fork_seq`` 0: it inherits nothing), as an imported
``subagents/agent-*.jsonl`` file is; a subagent appended before its main transcript
gets an empty main session, which ``load`` and the listings treat as never written.
Deleting a main key deletes its subagents with it.

**Real sessions.** Every entry goes through the Claude Code reader
(:class:`sessiondb.formats.claude_code.TranscriptFeed`) into one record: a message, a
compaction (a compact summary), a tombstone (cersei's), or an entry (progress lines,
titles, ``agent_metadata``, lines without a ``uuid``, …). The context, compaction,
forks, export and the CLI see a mirrored session like an imported file: its
:meth:`SessionStore.context` is that of the same lines imported with
:meth:`SessionStore.import_path`. Messages a rewind left off the active branch get the
reader's tombstones after the batch that showed the rewind. ``load`` writes each record
back into its line, so it returns what was appended, value for value, in append order.

**Concurrency.** An append runs in one transaction under the session's row lock
(:meth:`Core.lock_head`): entries whose ``uuid`` is stored already are skipped (the SDK
retries batches), the rest are appended in order, and the SDK's
``fold_session_summary`` of the batch is written to the session's metadata in the same
transaction, so concurrent appends, in any process, are ordered by commit and never
lose a fold. ``mtime`` (listings and summaries alike) is the time of the session's last
append, in epoch milliseconds.

**Cost and limits.** The reader's state after a session's lines is kept between the
adapter's appends to it (for ``MIRRORS_KEPT`` sessions), so an append reads only its own
entries, plus one pass over the session's line tree to find a rewind. When another
writer appended meanwhile (the locked head is not the one the adapter left), the state
is rebuilt from the stored lines, at a cost that grows with the session's length; both
ways store the same records. The parts of one API response that arrive in separate
appends keep the usage of the first part's line (an import of the file takes the
largest over the parts). A rewind that later returns to a branch hidden earlier keeps
that branch hidden.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from .. import jsoncodec, lifecycle
from .. import statements as q
from ..backends import IntegrityViolation
from ..config import Settings
from ..core import now
from ..errors import (
    ConflictError,
    InvalidInputError,
    MissingDependencyError,
    SessionDBError,
    SessionNotFoundError,
    brief,
)
from ..formats.claude_code import TranscriptFeed, stored_line
from ..rows import HeadDelta, NewRecord, new_session_row
from ..store import SessionStore
from ..transfer.checks import record_row
from ..validation import check_record_size, session_key, to_json
from .loops import MigrateOnce

try:
    from claude_agent_sdk import fold_session_summary
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("claude-agent-sdk", "claude-agent-sdk") from exc

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

    from ..backends import Transaction
    from ..core import Core

#: What every session key this adapter writes starts with.
KEY_PREFIX = "claude-agent-sdk:"
#: The member of a session's metadata that holds the adapter's state (``mtime``, ``summary``).
META = "claudeAgentSdk"
_ESCAPED = re.compile("%(25|2F)")
#: Sessions whose reader state an adapter keeps between appends (the most recent).
MIRRORS_KEPT = 64


@dataclass
class _Mirror:
    """The reader's state after a session's stored lines, valid while ``head`` is the
    session's head: ``seqs`` is the seq of each line fed (by position), ``hidden`` the
    seqs tombstoned, ``seen`` the uuids stored."""

    feed: TranscriptFeed
    head: int
    seqs: list[int]
    hidden: set[int]
    seen: set[str]


class SessionDBSessionStore:
    """A Claude Agent SDK ``SessionStore`` (``append``, ``load``, ``list_sessions``,
    ``list_session_summaries``, ``delete``, ``list_subkeys``) on a sessiondb store.

    Pass it as ``ClaudeAgentOptions(session_store=...)``. Every exception its methods
    raise is a :class:`~sessiondb.errors.SessionDBError`.
    """

    def __init__(self, store_or_url: SessionStore | str | None = None, **open_kwargs: Any) -> None:
        """An adapter on ``store_or_url``: an open :class:`SessionStore` (the caller
        closes it), or a URL as :meth:`SessionStore.open` takes it (``None``: its
        default), opened here with ``open_kwargs`` (``namespace``, the connection
        options, and ``create_tables=True`` to run the migrations before the first
        call, for development) and closed by :meth:`close`.

        Raises:
            InvalidInputError: options given with a store, or a bad ``create_tables``.
            ConfigurationError: the URL or options are unusable.
        """
        create_tables = open_kwargs.pop("create_tables", False)
        if not isinstance(create_tables, bool):
            raise InvalidInputError(
                f"create_tables must be True or False, got {brief(create_tables)}"
            )
        if isinstance(store_or_url, SessionStore):
            if open_kwargs:
                raise InvalidInputError(
                    f"options ({', '.join(sorted(open_kwargs))}) are for a URL, not an open store"
                )
            self._store, self._owns_store = store_or_url, False
        elif store_or_url is None or isinstance(store_or_url, str):
            namespace = open_kwargs.pop("namespace", None)
            settings = Settings.from_options(store_or_url, namespace, cast(Any, open_kwargs))
            self._store, self._owns_store = SessionStore(settings), True
        else:
            raise InvalidInputError(
                f"store_or_url must be a SessionStore or a URL, got {type(store_or_url).__name__}"
            )
        self._prepare = MigrateOnce(self._store, pending=create_tables)
        # The reader's state after each session this adapter appended to last.
        self._mirrors: dict[str, _Mirror] = {}

    @property
    def store(self) -> SessionStore:
        """The sessiondb store the transcripts live in."""
        return self._store

    async def close(self) -> None:
        """Close the store if this adapter opened it; else nothing."""
        while self._mirrors:
            self._mirrors.popitem()[1].feed.close()
        if self._owns_store:
            await self._store.close()

    async def __aenter__(self) -> SessionDBSessionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"SessionDBSessionStore(namespace={self._store.namespace!r})"

    # -- the protocol ---------------------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirror a batch of transcript entries, in order, in one transaction; entries
        whose ``uuid`` is stored in the session already are skipped.

        Raises:
            InvalidInputError: a bad key, an entry that is not a JSON object, or a record
                the store refuses (nothing of the batch is written).
        """
        path = _path(key)
        batch = _entries(entries)
        if not batch:
            return
        await self._prepare()
        core = self._store.core
        for attempt in (1, 2):
            sid = await self._session(path, create=True)
            assert sid is not None
            try:
                mirror = await core.transact(
                    self._unit(sid, path, batch),
                    outcome_unknown_ok=all(isinstance(e, dict) and _uuid(e) for e in batch),
                )
                self._keep(sid, mirror)
                return
            except SessionNotFoundError:
                if attempt == 2:  # deleted again between lookup and append
                    raise

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries appended under ``key``, in append order; ``None`` when none were.

        Raises:
            InvalidInputError: a bad key.
        """
        path = _path(key)
        await self._prepare()
        sid = await self._session(path, create=False)
        if sid is None:
            return None
        try:
            lines = await self._lines(sid)
        except SessionNotFoundError:
            return None
        return cast("list[SessionStoreEntry]", lines) if lines else None

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main transcripts of ``project_key`` with their last append's time (epoch ms)."""
        found = await self._mains(project_key)
        return [{"session_id": sid, "mtime": mtime} for sid, mtime, _ in found]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summaries (``fold_session_summary``) of ``project_key``'s main
        transcripts, kept by :meth:`append`."""
        found = await self._mains(project_key)
        return [
            cast("SessionSummaryEntry", {**summary, "session_id": sid, "mtime": mtime})
            for sid, mtime, summary in found
            if summary is not None
        ]

    async def delete(self, key: SessionKey) -> None:
        """Delete the transcript (a main key: with its subagents); nothing if missing."""
        path = _path(key)
        await self._prepare()
        sid = await self._session(path, create=False)
        if sid is None:
            return
        try:
            await self._store.delete_session(sid, cascade=True)
        except SessionNotFoundError:
            return

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths appended under the session (its subagents' transcripts)."""
        path = _path(key, subpath=False)
        prefix = _key(path[:2]) + "/"
        rows = await self._with_prefix(prefix)
        return sorted(r["key"][len(prefix) :] for r in rows if r["last_seq"] > 0)

    # -- sessiondb's view -------------------------------------------------------------------

    async def session_id(self, key: SessionKey) -> str:
        """The id of the sessiondb session that holds ``key``'s transcript, for
        :meth:`SessionStore.context`, ``records``, ``fork``, ``export_session``, ….

        Raises:
            SessionNotFoundError: nothing was appended under ``key``.
        """
        path = _path(key)
        await self._prepare()
        sid = await self._session(path, create=False)
        if sid is None:
            raise SessionNotFoundError(None, self._store.namespace, key=_key(path))
        return sid

    # -- helpers ----------------------------------------------------------------------------

    async def _session(self, path: tuple[str, str, str | None], *, create: bool) -> str | None:
        """The id of the session of ``path``; made (a subagent's under its main
        session) when missing and ``create``, else ``None``."""
        core = self._store.core
        main_key = _key(path[:2])
        if path[2] is None:
            made = _new_row(core, main_key, {"file": path[1]}) if create else None
            try:
                return (await lifecycle.by_key(core, main_key, made)).id
            except SessionNotFoundError:
                return None
        sub_key = _key(path)
        found = await core.backend.fetch(q.session_by_key(sub_key, core.namespace))
        if found:
            return str(found[0]["id"])
        if not create:
            return None
        parent = await lifecycle.by_key(core, main_key, _new_row(core, main_key, {"file": path[1]}))
        agent = path[2].rsplit("/", 1)[-1] + ".jsonl"
        meta = {"parentFile": path[1], "agentFile": agent}

        def child() -> dict[str, Any]:
            row = _new_row(core, sub_key, meta)()
            row.update(parent_id=parent.id, fork_seq=0)
            return row

        try:
            return (await lifecycle.by_key(core, sub_key, child)).id
        except IntegrityViolation as exc:  # the main session was deleted meanwhile
            raise ConflictError(
                f"the main session of {sub_key!r} was deleted while its subagent was made"
            ) from exc

    def _unit(
        self, sid: str, path: tuple[str, str, str | None], batch: list[Any]
    ) -> Callable[[Transaction], Awaitable[_Mirror]]:
        return lambda tx: self._append_in(tx, sid, path, batch)

    def _keep(self, sid: str, mirror: _Mirror) -> None:
        """Keep ``mirror`` for the session's next append (committed, so it is the state
        of the stored lines)."""
        old = self._mirrors.pop(sid, None)
        if old is not None and old is not mirror:
            old.feed.close()
        self._mirrors[sid] = mirror
        while len(self._mirrors) > MIRRORS_KEPT:
            oldest = next(iter(self._mirrors))
            self._mirrors.pop(oldest).feed.close()

    async def _mirror(
        self, tx: Transaction, sid: str, path: tuple[str, str, str | None], head: int
    ) -> _Mirror:
        """The reader's state after the session's stored lines: this adapter's own from
        its last append if nobody appended since (the head it saw is still the head),
        else read back from the rows."""
        mirror = self._mirrors.pop(sid, None)
        if mirror is not None and mirror.head == head:
            return mirror
        if mirror is not None:
            mirror.feed.close()
        rows = await self._store.core.lineage_rows(tx, sid, include_tombstoned=True)
        mirror = _Mirror(TranscriptFeed(_key(path)), head, [], set(), set())
        lines: list[Any] = []
        exact = False
        for row in rows:
            if row["kind"] == "tombstone" and row["target_seq"] is not None:
                mirror.hidden.add(int(row["target_seq"]))
            line = stored_line(row["kind"], jsoncodec.loads(row["payload"]))
            if line is None:
                continue  # a rewind's tombstone, or a record sessiondb itself added
            exact = exact or jsoncodec.is_exact_path(row["payload"])
            lines.append(line)
            mirror.seqs.append(int(row["seq"]))
            if isinstance(line, dict) and _uuid(line) is not None:
                mirror.seen.add(line["uuid"])
        try:
            mirror.feed.feed(lines, exact=exact)
        except BaseException:
            mirror.feed.close()
            raise
        return mirror

    async def _append_in(
        self,
        tx: Transaction,
        sid: str,
        path: tuple[str, str, str | None],
        batch: list[Any],
    ) -> _Mirror:
        """The append's transaction: under the head lock, the reader resumed after the
        stored lines reads the new entries; their records and the tombstones of a
        rewind are appended, and the summary folded. The reader's state after it, for
        the next append."""
        core = self._store.core
        head = await core.lock_head(tx, sid)
        mirror = await self._mirror(tx, sid, path, head)
        try:
            return await self._append_new(tx, sid, path, batch, head, mirror)
        except BaseException:
            mirror.feed.close()  # it read lines that were not stored
            raise

    async def _append_new(
        self,
        tx: Transaction,
        sid: str,
        path: tuple[str, str, str | None],
        batch: list[Any],
        head: int,
        mirror: _Mirror,
    ) -> _Mirror:
        core = self._store.core
        # A uuid stored by an earlier append is a retry; one repeated within the batch is
        # a line of its own (the reader keeps it, as an import of the file does).
        new = [e for e in batch if not (isinstance(e, dict) and _uuid(e) in mirror.seen)]
        if not new:
            return mirror
        exact = jsoncodec.is_exact_path(jsoncodec.dumps(new))
        records = mirror.feed.feed(new, exact=exact)
        old = len(mirror.seqs)
        mirror.seqs.extend(range(head + 1, head + 1 + len(new)))
        built: list[NewRecord] = []
        for index, record in enumerate(records):
            seq = head + 1 + index
            if record.first_kept is not None:
                record.first_kept = mirror.seqs[record.first_kept] - 1
            if record.target is not None:
                record.target = mirror.seqs[record.target] - 1
            built.append(record_row(record, seq, 0, f"entry {index}"))
        assert len(built) == len(new) and len(mirror.seqs) == old + len(new)
        for record in mirror.feed.rewinds():
            assert record.target is not None
            target = mirror.seqs[record.target]
            if target in mirror.hidden:
                continue
            mirror.hidden.add(target)
            record.target = target - 1
            built.append(record_row(record, head + 1 + len(built), 0, "rewind tombstone"))
        for index, made in enumerate(built):
            check_record_size(made.payload, core.max_record_bytes, f"entry {index}")
        at = now()
        head_values = HeadDelta.of(built).head(sid, core.namespace, len(built), at, None)
        first = await tx.append(head_values, [r.append_values(core.indexes) for r in built])
        if first != head + 1:  # the row lock held since lock_head makes this impossible
            raise ConflictError(f"session {sid}: its head moved during a locked append")
        mirror.head = head + len(built)
        mirror.seen.update(u for e in new if isinstance(e, dict) and (u := _uuid(e)) is not None)
        found = await tx.fetch(q.get_session(sid, core.namespace))
        text = found[0]["metadata_json"]
        metadata = jsoncodec.loads(text) if text else {}
        if not isinstance(metadata, dict):
            metadata = {}
        state = metadata.get(META)
        state = dict(state) if isinstance(state, dict) else {}
        if path[2] is None:
            sdk_key = cast("SessionKey", {"project_key": path[0], "session_id": path[1]})
            objects = [e for e in new if isinstance(e, dict)]  # the fold reads objects
            state["summary"] = _fold(state.get("summary"), sdk_key, objects)
        state["mtime"] = _ms(at)
        metadata[META] = state
        await tx.fetch(q.set_metadata(sid, core.namespace, to_json(metadata, "metadata")))
        return mirror

    async def _lines(self, sid: str) -> list[Any]:
        core = self._store.core
        bound = q.lineage_records(
            sid,
            core.namespace,
            include_tombstoned=True,
            include_superseded=True,
            flavour=core.flavour,
            sealed=core.encrypted,
        )
        rows = await core.backend.fetch(bound)
        if not rows:
            await core.session(sid)  # raises when the session is missing
        lines = []
        for row in rows:
            line = stored_line(row["kind"], jsoncodec.loads(row["payload"]))
            if line is not None:
                lines.append(line)
        return lines

    async def _with_prefix(self, prefix: str) -> list[Any]:
        await self._prepare()
        core = self._store.core
        rows = await core.backend.fetch(q.sessions_with_key_prefix(core.namespace, prefix))
        # LIKE ignores ASCII case on SQLite: the prefix is compared again, exactly.
        return [r for r in rows if isinstance(r["key"], str) and r["key"].startswith(prefix)]

    async def _mains(self, project_key: str) -> list[tuple[str, int, dict[str, Any] | None]]:
        """``(session_id, mtime, summary)`` of each main transcript of ``project_key``."""
        if not isinstance(project_key, str):
            raise InvalidInputError(f"project_key must be a string, got {brief(project_key)}")
        prefix = KEY_PREFIX + _escape(project_key) + "/"
        found = []
        for row in await self._with_prefix(prefix):
            rest = row["key"][len(prefix) :]
            if "/" in rest or row["last_seq"] == 0:
                continue  # a subagent, or the empty main session of one
            text = row["metadata_json"]
            metadata = jsoncodec.loads(text) if text else None
            state = metadata.get(META) if isinstance(metadata, dict) else None
            state = state if isinstance(state, dict) else {}
            mtime = state.get("mtime")
            if not isinstance(mtime, int):
                mtime = _ms(_aware(row["created_at"]))
            summary = state.get("summary")
            found.append((_unescape(rest), mtime, summary if isinstance(summary, dict) else None))
        return found


# -- keys and entries: plain functions ------------------------------------------------------


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str) -> str:
    return _ESCAPED.sub(lambda m: "%" if m[1] == "25" else "/", part)


def _path(key: Any, *, subpath: bool = True) -> tuple[str, str, str | None]:
    """``(project_key, session_id, subpath)`` of an SDK key.

    Raises:
        InvalidInputError: not a key of strings, or an empty ``subpath``.
    """
    if not isinstance(key, Mapping):
        raise InvalidInputError(f"a session key is a dict, got {type(key).__name__}")
    project, session = key.get("project_key"), key.get("session_id")
    if not isinstance(project, str) or not isinstance(session, str):
        raise InvalidInputError(
            f"a session key needs project_key and session_id strings, got {brief(dict(key))}"
        )
    sub = key.get("subpath") if subpath else None
    if sub is not None and (not isinstance(sub, str) or not sub):
        raise InvalidInputError(f"subpath must be a non-empty string, got {brief(sub)}")
    path = (project, session, sub)
    session_key(_key(path))  # raises for a key too long or unstorable
    return path


def _key(path: tuple[str, ...] | tuple[str, str, str | None]) -> str:
    """The sessiondb session key of ``(project_key, session_id[, subpath])``."""
    key = KEY_PREFIX + _escape(path[0]) + "/" + _escape(path[1])
    if len(path) > 2 and path[2] is not None:
        key += "/" + path[2]
    return key


def _entries(entries: Any) -> list[Any]:
    """The batch as plain JSON values (a copy, as JSON would give them back). An entry is
    an object as the SDK writes them; another value (a damaged line of a transcript the
    SDK imports) is kept too, as the reader keeps it from a file.

    Raises:
        InvalidInputError: not a list, or a value JSON cannot hold.
    """
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise InvalidInputError(f"entries must be a list, got {type(entries).__name__}")
    try:
        copied = jsoncodec.loads(jsoncodec.dumps(list(entries), max_depth=jsoncodec.MAX_JSON_DEPTH))
    except SessionDBError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidInputError(f"entries are not JSON: {exc}") from None
    return cast("list[Any]", copied)


def _uuid(entry: dict[str, Any]) -> str | None:
    uuid = entry.get("uuid")
    return uuid if isinstance(uuid, str) else None


def _fold(prev: Any, key: SessionKey, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The SDK's summary folded over ``entries`` (``prev`` as stored, or none).

    Raises:
        InvalidInputError: the SDK could not fold the entries.
    """
    previous = cast("SessionSummaryEntry", prev) if isinstance(prev, dict) else None
    try:
        folded = fold_session_summary(previous, key, cast("list[SessionStoreEntry]", entries))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidInputError(f"the SDK could not summarise the entries: {exc}") from exc
    return dict(folded)


def _new_row(core: Core, key: str, claude_code: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """The row maker of a new session with ``key``; its metadata names its file as an
    imported session's does, so an export writes it where Claude Code would."""

    def row() -> dict[str, Any]:
        metadata = {"claudeCode": dict(claude_code)}
        return new_session_row(
            core.namespace, core.max_record_bytes, now(), metadata=metadata, key=key
        )

    return row


def _aware(at: datetime | str) -> datetime:
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


__all__ = ["KEY_PREFIX", "META", "SessionDBSessionStore"]
