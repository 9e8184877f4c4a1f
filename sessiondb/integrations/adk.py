"""Google ADK's ``BaseSessionService`` on sessiondb: :class:`SessionDBSessionService`.

.. code-block:: python

    from google.adk.runners import Runner
    from sessiondb.integrations.adk import SessionDBSessionService

    service = SessionDBSessionService("postgresql://…")
    runner = Runner(agent=agent, app_name="app", session_service=service)

How ADK's sessions are stored:

- An ADK session, addressed by ``(app_name, user_id, session_id)``, is a sessiondb
  session of the store's namespace (its ADK address also in its ``metadata["adk"]``),
  and a row of ``sessiondb_adk_sessions`` that maps the address to it and holds the
  session-scoped state and ADK's last update time. ``app:`` and ``user:`` state live in
  ``sessiondb_adk_state``, one row per app and per (app, user), keys without the prefix.
- Each event is one record: a ``message`` when it has text (a ``user`` message when the
  user wrote it, else an ``assistant`` message, its text parts as text blocks, thoughts
  as thinking blocks), so sessiondb's context, search, export and CLI read an ADK
  conversation like any other; an ``entry`` when it has none (a function call or
  response, a state change, a compaction or rewind event: kept, exported, never in
  sessiondb's context). The event itself is kept whole under the wire field
  ``adkEvent`` and read back from there; the event id is the record's uuid, so a
  re-sent event is stored once (another event that reuses an id is stored too, as
  ADK's in-memory service keeps it).
- ADK's rewinds and its compactions that cover the history from its first event are
  also written as sessiondb overlays (tombstones, a compaction) in the event's own
  transaction, so sessiondb's context agrees with what ADK's model sees
  (:mod:`sessiondb.integrations.adk_overlays`; its docstring says where they differ).
- ``append_event`` writes the record, the session state, the update time and any
  ``app:``/``user:`` state in one transaction, under the session's row lock: appends from
  any number of processes are all kept, in commit order, none twice, and state deltas
  merge key by key (no update is lost). ``temp:`` state stays in the caller's session
  object, never stored (ADK's base class trims it).

What this service does not do that ADK's ``DatabaseSessionService`` does: it never
raises ``StaleSessionError``. ADK's contract allows that error ("when a persistent
implementation detects…"), its shared contract tests do not require it, and
``InMemorySessionService`` never raises it; here an append by a caller whose session
object is older than the stored one is simply added after the others (nothing the
caller did not write is overwritten).

Event loops: a store's connections belong to one loop. A service that opens its store
from a URL outside any running loop (a script that uses ADK's sync ``Runner.run``, which
runs each call on a new loop) keeps a loop thread for it; otherwise the loop running
when it is built (or, for a store passed in, the loop of its first call) is the store's,
and a call from another loop is run there (:mod:`sessiondb.integrations.loops`).

``get_session`` returns every event, compaction and rewind events included and the
events they cover too: ADK's runner applies them when it builds the model's context, as
it does with every session service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Unpack

from pydantic_core import to_jsonable_python

from .. import jsoncodec
from .. import statements as q
from ..backends import IntegrityViolation, Transaction
from ..config import Settings, StoreOptions
from ..core import UUID_CONSTRAINT, Core, now
from ..errors import (
    ConflictError,
    EncryptionError,
    InvalidInputError,
    MissingDependencyError,
    NotFoundError,
    SessionNotFoundError,
)
from ..lifecycle import delete as delete_sessions
from ..rows import NewRecord, message_record, new_session_row
from ..store import SessionStore
from ..tables import sessions
from ..validation import check_record_size, column_text, to_json
from .adk_overlays import has_overlays, overlay_rows
from .loops import MigrateOnce, on_home, on_home_loop, settle_home

try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import (
        SessionNotFoundError as AdkSessionNotFoundError,
    )
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependencyError("google-adk", "adk") from exc

__all__ = [
    "ADK_FIELD",
    "SessionDBSessionService",
    "SessionExistsError",
    "UnknownSessionError",
    "event_message",
    "event_record",
]

#: The wire field of a sessiondb message that holds the ADK event as appended.
ADK_FIELD = "adkEvent"
#: The longest app name, user id or session id, in UTF-8 bytes.
MAX_NAME_BYTES = 512
# Events read per statement while walking back for ``after_timestamp``.
_PAGE = 256
# Attempts at an append whose event id collides with a concurrent writer's.
_ATTEMPTS = 3
_PK = "pk_sessiondb_adk_sessions"


class SessionExistsError(ConflictError, AlreadyExistsError):
    """The app and user have a session with this id already (ADK's
    ``AlreadyExistsError``, and a sessiondb :class:`ConflictError`)."""

    def __init__(self, session_id: str) -> None:
        ConflictError.__init__(self, f"Session with id {session_id} already exists.")
        self.message = str(self)


class UnknownSessionError(NotFoundError, AdkSessionNotFoundError):
    """No ADK session with this app, user and id (ADK's ``SessionNotFoundError``, and a
    sessiondb :class:`NotFoundError`)."""

    def __init__(self, session_id: str) -> None:
        NotFoundError.__init__(self, f"Session {session_id} not found.")


class SessionDBSessionService(BaseSessionService):
    """ADK sessions, their events and their state in a sessiondb store.

    Pass it to ADK's ``Runner(session_service=...)``. Every method is one short
    transaction (``get_session`` and ``list_sessions``: a few reads by index).
    """

    def __init__(
        self,
        store_or_url: SessionStore | str | None = None,
        *,
        namespace: str | None = None,
        create_tables: bool = False,
        **open_kwargs: Unpack[StoreOptions],
    ) -> None:
        """A service on ``store_or_url``: an open :class:`SessionStore` (the caller
        closes it), or a URL as :meth:`SessionStore.open` takes it, with its
        ``namespace`` and connection options (:meth:`close` closes that store).

        Args:
            create_tables: run sessiondb's migrations before the first call (for
                development; services run ``sessiondb migrate`` at deploy time).

        Raises:
            ConfigurationError: the URL, namespace or options are unusable.
            InvalidInputError: a store and store options were both given.
            EncryptionError: the store is encrypted (ADK's state would not be).
        """
        if not isinstance(create_tables, bool):
            raise InvalidInputError(f"create_tables must be True or False, got {create_tables!r}")
        if isinstance(store_or_url, SessionStore):
            if namespace is not None or open_kwargs:
                raise InvalidInputError("pass a namespace and options to the store, not here")
            self._store = store_or_url
            self._owns_store = False
        else:
            if store_or_url is not None and not isinstance(store_or_url, str):
                raise InvalidInputError(
                    f"store_or_url must be a SessionStore or a URL, got "
                    f"{type(store_or_url).__name__}"
                )
            self._store = SessionStore(Settings.from_options(store_or_url, namespace, open_kwargs))
            self._owns_store = True
        self._core: Core = self._store.core
        if self._core.encrypted:
            # The events would be sealed, but ADK's state tables are not (yet): refuse
            # rather than store the state in the clear in an encrypted namespace.
            raise EncryptionError(
                "the ADK session service does not support encrypted stores yet: its "
                "session, app and user state would be stored unencrypted"
            )
        # The loop every call runs on: the running one; for a store the service opens
        # outside any loop, a loop thread of its own (ADK's sync Runner.run calls from
        # a new loop each time); for a store passed in, the loop of its first call.
        self._thread = settle_home(self._core, "sessiondb-adk", thread=self._owns_store)
        self._ready = MigrateOnce(self._store, pending=create_tables)
        # sessiondb ids of ADK sessions seen, by address; bounded (a miss costs a lookup).
        self._ids: dict[tuple[str, str, str], str] = {}

    @property
    def store(self) -> SessionStore:
        """The store the sessions live in."""
        return self._store

    @property
    def core(self) -> Core:
        """The store's core (``store.core``)."""
        return self._core

    async def close(self) -> None:
        """Close the store if the service opened it (and the loop thread it runs on, if
        it made one); else nothing."""
        if not self._owns_store:
            return
        await on_home(self._core, self._store.close())
        if self._thread is not None:
            await asyncio.to_thread(self._thread.stop)
            self._thread = None

    async def __aenter__(self) -> SessionDBSessionService:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- BaseSessionService ------------------------------------------------------------

    @on_home_loop
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create an empty session; ``app:`` and ``user:`` keys of ``state`` go to the
        app's and the user's state.

        Raises:
            SessionExistsError: the user has a session with this id (ADK's
                ``AlreadyExistsError``).
            InvalidInputError: a bad name, id or state.
        """
        app, user = _name(app_name, "app_name"), _name(user_id, "user_id")
        given = _new_session_id(session_id)
        adk_id = given or Event.new_id()
        if state is not None and not isinstance(state, Mapping):
            raise InvalidInputError(f"state must be a dict, got {type(state).__name__}")
        deltas = _deltas(dict(state or {}))
        await self._ready()
        core = self._core
        stamp = time.time()
        row = new_session_row(
            core.namespace,
            core.max_record_bytes,
            now(),
            metadata={"adk": {"app_name": app, "user_id": user, "session_id": adk_id}},
        )
        session_json = _dumps(deltas["session"], core)

        async def unit(tx: Transaction) -> list[Any]:
            if given is not None and await tx.fetch(
                q.adk_session(core.namespace, app, user, adk_id)
            ):
                raise SessionExistsError(adk_id)
            await tx.fetch((q.insert_rows(sessions.name), row))
            values = {
                "namespace": core.namespace,
                "app_name": app,
                "user_id": user,
                "adk_id": adk_id,
                "session_id": row["id"],
                "state_json": session_json,
                "update_time": stamp,
            }
            await tx.fetch(q.adk_insert_session(values))
            await _merge_scoped(tx, core, app, user, deltas)
            return await tx.fetch(q.adk_session(core.namespace, app, user, adk_id))

        try:
            found = await core.transact(unit)
        except IntegrityViolation as exc:
            if exc.constraint == _PK:
                raise SessionExistsError(adk_id) from None
            raise core.integrity_error(exc) from exc
        self._remember((app, user, adk_id), row["id"])
        return Session(
            id=adk_id,
            app_name=app,
            user_id=user,
            state=_merged(found[0]),
            events=[],
            last_update_time=stamp,
        )

    @on_home_loop
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its merged state and its events (``None`` if missing).

        ``config.num_recent_events`` reads only the last so many events, and
        ``config.after_timestamp`` walks back from the newest event to the last one
        older than it (as ``InMemorySessionService`` does): by the records' index, at a
        cost that follows the events returned, not the session's length.
        """
        app, user = _name(app_name, "app_name"), _name(user_id, "user_id")
        adk_id = _session_id(session_id)
        if config is not None and not isinstance(config, GetSessionConfig):
            raise InvalidInputError(
                f"config must be a GetSessionConfig, got {type(config).__name__}"
            )
        await self._ready()
        rows = await self._core.backend.fetch(
            q.adk_session(self._core.namespace, app, user, adk_id)
        )
        if not rows:
            return None
        row = rows[0]
        self._remember((app, user, adk_id), row["session_id"])
        events = await self._events(row["session_id"], int(row["last_seq"]), config)
        return Session(
            id=adk_id,
            app_name=app,
            user_id=user,
            state=_merged(row),
            events=events,
            last_update_time=float(row["update_time"]),
        )

    @on_home_loop
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (one user's, with ``user_id``), oldest update first, with
        their merged state and no events: two reads by index, none per session."""
        app = _name(app_name, "app_name")
        user = None if user_id is None else _name(user_id, "user_id")
        await self._ready()
        backend, ns = self._core.backend, self._core.namespace
        found = await backend.fetch(q.adk_list(ns, app, user))
        app_state: dict[str, Any] = {}
        user_states: dict[str, dict[str, Any]] = {}
        for r in await backend.fetch(q.adk_states(ns, app, user)):
            if r["scope"] == "app":
                app_state = jsoncodec.loads(r["state_json"])
            else:
                user_states[r["user_id"]] = jsoncodec.loads(r["state_json"])
        return ListSessionsResponse(
            sessions=[
                Session(
                    id=r["adk_id"],
                    app_name=app,
                    user_id=r["user_id"],
                    state=_merge(
                        jsoncodec.loads(r["state_json"]),
                        app_state,
                        user_states.get(r["user_id"], {}),
                    ),
                    events=[],
                    last_update_time=float(r["update_time"]),
                )
                for r in found
            ]
        )

    @on_home_loop
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events; nothing when there is none. The app's and
        user's state stay.

        Raises:
            HasChildrenError: the sessiondb session has forks (made through sessiondb).
        """
        app, user = _name(app_name, "app_name"), _name(user_id, "user_id")
        adk_id = _session_id(session_id)
        await self._ready()
        self._ids.pop((app, user, adk_id), None)
        rows = await self._core.backend.fetch(
            q.adk_session(self._core.namespace, app, user, adk_id)
        )
        if not rows:
            return
        try:
            await delete_sessions(self._core, rows[0]["session_id"], False)
        except SessionNotFoundError:
            return  # deleted meanwhile

    @on_home_loop
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state (keys without ``user:``); ``{}`` when none is stored."""
        app, user = _name(app_name, "app_name"), _name(user_id, "user_id")
        await self._ready()
        for r in await self._core.backend.fetch(q.adk_states(self._core.namespace, app, user)):
            if r["scope"] == "user":
                state: dict[str, Any] = jsoncodec.loads(r["state_json"])
                return state
        return {}

    @on_home_loop
    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and its state delta in one transaction, then apply it to
        ``session``. A partial event is neither; an event whose id is stored already is
        returned as it is (a retry).

        Raises:
            UnknownSessionError: the session does not exist (ADK's
                ``SessionNotFoundError``).
            InvalidInputError: ``session`` or ``event`` is not ADK's, or the event is
                bigger than the store's ``max_record_bytes``.
        """
        if not isinstance(session, Session):
            raise InvalidInputError(f"session must be an ADK Session, got {type(session).__name__}")
        if not isinstance(event, Event):
            raise InvalidInputError(f"event must be an ADK Event, got {type(event).__name__}")
        if event.partial:
            return event
        address = (
            _name(session.app_name, "session.app_name"),
            _name(session.user_id, "session.user_id"),
            _session_id(session.id),
        )
        if not event.id:
            event.id = Event.new_id()
        deltas = _deltas(event.actions.state_delta if event.actions else {})
        wire = event_message(event)
        record = event_record(wire)
        check_record_size(record.payload, self._core.max_record_bytes, "event")
        await self._ready()
        core = self._core
        stamp = float(event.timestamp)

        async def unit(tx: Transaction) -> bool:
            stored = await tx.fetch(q.existing_uuids(sid, core.namespace, [event.id], core.flavour))
            row = record
            if stored:
                if jsoncodec.loads(stored[0]["payload"]).get(ADK_FIELD) == wire[ADK_FIELD]:
                    return False  # the same event again: a retry
                # Another event with this id (ADK de-duplicates equal events, not ids):
                # stored too, without the id as its uuid.
                row = event_record({k: v for k, v in wire.items() if k != "uuid"})
            extra: list[NewRecord] = []
            if has_overlays(wire[ADK_FIELD]):
                head = await core.lock_head(tx, sid)
                extra = await overlay_rows(tx, sid, head, wire[ADK_FIELD], row.kind)
            await core.append_in(tx, sid, [row, *extra])  # takes the session's row lock
            if deltas["session"]:
                current = await tx.fetch(q.adk_session_state(sid))
                state = jsoncodec.loads(current[0]["state_json"]) if current else {}
                state.update(deltas["session"])
                await tx.fetch(q.adk_update_session(sid, _dumps(state, core), stamp))
            else:
                await tx.fetch(q.adk_touch_session(sid, stamp))
            await _merge_scoped(tx, core, address[0], address[1], deltas)
            return True

        for attempt in (1, 2):
            sid = await self._sid(address)
            try:
                appended = await self._append(unit)
                break
            except SessionNotFoundError:
                self._ids.pop(address, None)
                if attempt == 2:
                    raise UnknownSessionError(address[2]) from None
        if appended:
            # ADK's own bookkeeping: temp: state into the caller's session only, the
            # event's delta without it, the rest of the delta and the event applied.
            event = await super().append_event(session, event)
            session.last_update_time = stamp
        return event

    # -- helpers ------------------------------------------------------------------------

    async def _append(self, unit: Any) -> bool:
        for _attempt in range(_ATTEMPTS):
            try:
                appended: bool = await self._core.transact(unit, outcome_unknown_ok=True)
                return appended
            except IntegrityViolation as exc:
                # A concurrent writer stored the same event id first: the next attempt
                # finds it and writes nothing.
                if exc.constraint != UUID_CONSTRAINT:
                    raise self._core.integrity_error(exc) from exc
        raise ConflictError("an event id kept colliding with concurrent writers")

    async def _sid(self, address: tuple[str, str, str]) -> str:
        sid = self._ids.get(address)
        if sid is not None:
            return sid
        rows = await self._core.backend.fetch(q.adk_session(self._core.namespace, *address))
        if not rows:
            raise UnknownSessionError(address[2])
        sid = str(rows[0]["session_id"])
        self._remember(address, sid)
        return sid

    def _remember(self, address: tuple[str, str, str], sid: str) -> None:
        if len(self._ids) >= 10_000:
            self._ids.clear()
        self._ids[address] = sid

    async def _events(
        self, sid: str, last_seq: int, config: GetSessionConfig | None
    ) -> list[Event]:
        backend = self._core.backend
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent == 0:
            return []
        if recent is None and after is None:
            rows = await backend.fetch(q.adk_events(sid, last_seq, None))
            return [payload_event(r["payload"]) for r in rows]
        events: list[Event] = []
        to_seq = last_seq
        while True:
            page = recent - len(events) if recent is not None else _PAGE
            rows = await backend.fetch(q.adk_events(sid, to_seq, page))
            for r in rows:
                event = payload_event(r["payload"])
                if after is not None and event.timestamp < after:
                    return events[::-1]
                events.append(event)
            if len(rows) < page or (recent is not None and len(events) >= recent):
                return events[::-1]
            to_seq = int(rows[-1]["seq"]) - 1


# -- events <-> messages, state: plain functions -------------------------------------------


def event_message(event: Event) -> dict[str, Any]:
    """The sessiondb wire message that stores one ADK event: its text as content blocks
    (for sessiondb's context and exports) and the event whole under :data:`ADK_FIELD`."""
    blocks: list[dict[str, Any]] = []
    content = event.content
    for part in (content.parts or []) if content is not None else []:
        if isinstance(part.text, str):
            if part.thought:
                blocks.append({"type": "thinking", "thinking": part.text})
            else:
                blocks.append({"type": "text", "text": part.text})
    return {
        "role": "user" if event.author == "user" else "assistant",
        "content": blocks,
        "uuid": event.id,
        ADK_FIELD: _stored_event(event),
    }


def event_record(wire: dict[str, Any]) -> NewRecord:
    """The record that stores an event's wire message: a ``message`` when the event has
    text, else an ``entry`` (kept and exported, never in sessiondb's context: a
    function call, a state change, a compaction or rewind event, …)."""
    if wire["content"]:
        return message_record(wire, 0)
    payload = to_json({k: v for k, v in wire.items() if k not in ("role", "content")}, "event")
    return NewRecord(kind="entry", payload=payload, uuid=column_text(wire.get("uuid"), "event id"))


def _stored_event(event: Event) -> dict[str, Any]:
    """The event as stored: its JSON form, without ``temp:`` keys in its state delta (ADK
    never stores those)."""
    data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
    delta = data.get("actions", {}).get("state_delta")
    if isinstance(delta, dict):
        data["actions"]["state_delta"] = {
            k: v for k, v in delta.items() if not k.startswith(State.TEMP_PREFIX)
        }
    return data


def payload_event(payload: str) -> Event:
    """The ADK event a stored message holds (a message written by other code becomes an
    event of its text, authored by ``user`` or ``model``)."""
    wire = jsoncodec.loads(payload)
    data = wire.get(ADK_FIELD)
    if isinstance(data, dict):
        return Event.model_validate(data)
    texts = [b.get("text") for b in wire.get("content", []) if isinstance(b, dict)]
    role = "user" if wire.get("role") == "user" else "model"
    return Event.model_validate(
        {
            "author": role,
            "content": {"role": role, "parts": [{"text": t} for t in texts if isinstance(t, str)]},
            **({"id": wire["uuid"]} if isinstance(wire.get("uuid"), str) else {}),
        }
    )


def _name(value: Any, what: str) -> str:
    """An app name, user id or session id: text a key column can hold. Each is at most
    512 UTF-8 bytes, so that the primary key of ``sessiondb_adk_sessions`` (three of them
    and the namespace) stays within Postgres's 2,704-byte index row."""
    text = column_text(value, what, optional=False)
    assert text is not None
    if len(text) > MAX_NAME_BYTES // 4 and len(text.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidInputError(f"{what} is longer than {MAX_NAME_BYTES} UTF-8 bytes")
    return text


def _session_id(value: Any) -> str:
    """An ADK session id, stripped as ADK's in-memory and SQLite services strip it."""
    return _name(value, "session_id").strip()


def _new_session_id(value: Any) -> str | None:
    """A session id given to ``create_session``: ``None`` (or blank) for a new one."""
    return None if value is None else (_session_id(value) or None)


def _deltas(state: Any) -> dict[str, dict[str, Any]]:
    """A state (delta) split as ADK splits it: ``app:`` and ``user:`` keys without their
    prefix, ``temp:`` keys left out, the rest the session's; values made JSON (what JSON
    cannot hold, a callable say, becomes its text, as ADK's database service stores it)."""
    if not isinstance(state, dict):
        raise InvalidInputError(f"a state delta must be a dict, got {type(state).__name__}")
    parts: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for key, value in state.items():
        if not isinstance(key, str):
            raise InvalidInputError(f"state keys must be strings, got {type(key).__name__}")
        if key.startswith(State.APP_PREFIX):
            parts["app"][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            parts["user"][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            parts["session"][key] = value
    try:
        safe: dict[str, dict[str, Any]] = to_jsonable_python(parts, fallback=str)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"state cannot be stored as JSON: {exc}") from None
    return safe


def _dumps(state: dict[str, Any], core: Core) -> str:
    try:
        text = jsoncodec.dumps(state)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"state cannot be stored as JSON: {exc}") from None
    check_record_size(text, core.max_record_bytes, "state")
    return text


async def _merge_scoped(
    tx: Transaction, core: Core, app: str, user: str, deltas: dict[str, dict[str, Any]]
) -> None:
    """Merge the app and user parts of ``deltas`` into their rows, each read under its
    row lock, so concurrent writers of one user's state all keep their keys."""
    for scope, owner in (("app", ""), ("user", user)):
        delta = deltas[scope]
        if not delta:
            continue
        ns = core.namespace
        rows = await tx.fetch(q.adk_lock_state(ns, app, scope, owner))
        if not rows:  # the first state of this app or user: made once, however many race
            await tx.fetch(q.adk_ensure_state(ns, app, scope, owner, core.flavour))
            rows = await tx.fetch(q.adk_lock_state(ns, app, scope, owner))
        state = jsoncodec.loads(rows[0]["state_json"])
        state.update(delta)
        await tx.fetch(q.adk_set_state(ns, app, scope, owner, _dumps(state, core)))


def _merge(
    session_state: dict[str, Any], app_state: dict[str, Any], user_state: dict[str, Any]
) -> dict[str, Any]:
    merged = dict(session_state)
    merged.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
    return merged


def _merged(row: Any) -> dict[str, Any]:
    """The merged state of an :func:`statements.adk_session` row."""
    return _merge(
        jsoncodec.loads(row["state_json"]),
        jsoncodec.loads(row["app_state"]) if row["app_state"] is not None else {},
        jsoncodec.loads(row["user_state"]) if row["user_state"] is not None else {},
    )
