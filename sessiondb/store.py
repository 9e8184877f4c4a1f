# Over 700 lines (at most 800, tests/unit/test_house.py): one short call per method, and
# each public method's docstring, the API reference that help() and the docs show.
"""The front door: :class:`SessionStore` validates, plans, makes one backend call and
maps the result to models. Which database is behind it is the backend's business."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Unpack

from pydantic import ValidationError

from . import context as ctx
from . import cursor as cursors
from . import retention, shapes, telemetry, turns
from .backends import Backend
from .config import Settings, StoreOptions
from .core import Core, check_expected_seq, now
from .crypto import KeyProvider
from .errors import ConfigurationError, InvalidInputError, SessionNotFoundError, brief
from .feature_functions import FeatureFunctions
from .ids import check_session_id
from .kinds import KINDS
from .lazy import lazy_modules
from .models import (
    Compaction,
    Message,
    NewSession,
    Prune,
    Record,
    SearchPage,
    SessionInfo,
    SessionPage,
)
from .rotation import RotationReport, rotate
from .rows import new_session_row, records_from_rows, session_info, session_page, utc
from .validation import (
    MAX_NAME_CHARS,
    bounded_text,
    check_bool,
    check_list,
    check_source,
    column_text,
    first_error,
    prune_seqs,
    record_kinds,
    session_key,
    strict_int,
)

if TYPE_CHECKING:  # imported when first used (start-up rule in sessiondb/cli.py)
    from . import bulk, feed, forks, lifecycle, overlays
    from . import statements as q
    from .compaction.breaker import CircuitBreaker
    from .turns import Turn
else:  # what only some calls use
    bulk, feed, forks, lifecycle, overlays, q = lazy_modules(
        "bulk feed forks lifecycle overlays statements"
    )

MAX_PAGE = 1000
# What session_for_key passes on to create_session.
_CREATE_ARGS = frozenset(
    ("name", "model", "source", "cron_job_id", "system_prompt_override", "metadata")
)


@telemetry.traced
class SessionStore(FeatureFunctions):
    """Sessions and their records in one database, scoped to one namespace: open it with
    ``async with SessionStore.open(url) as store``; every method is a coroutine and runs
    in its own short transaction."""

    def __init__(
        self,
        settings: Settings | str | None = None,
        backend: Backend | None = None,
        *,
        encryption: KeyProvider | None = None,
    ) -> None:
        """A store for ``settings`` (or a URL, as :meth:`open` takes it); prefer
        :meth:`open` or :meth:`connect`, which also take the connection options.
        ``encryption`` as for :meth:`open`."""
        if not isinstance(settings, Settings):
            if settings is not None and not isinstance(settings, str):
                raise ConfigurationError(
                    f"SessionStore takes a URL or Settings, got {type(settings).__name__}"
                )
            settings = Settings.from_env(settings)
        self.settings = settings
        self.namespace = settings.namespace
        self._core = Core(settings, backend, encryption)

    @property
    def core(self) -> Core:
        """The store's core (:mod:`sessiondb.core`): its backend, the retrying
        transaction and the append primitive, shared with sessiondb's feature modules
        (turns, retention, import and export). For code that builds on sessiondb the way
        those modules do; an application needs only the store's methods."""
        return self._core

    @property
    def compaction_breaker(self) -> CircuitBreaker:
        """The store's auto-compaction circuit breaker: failures in a row, by session,
        counted by :meth:`maybe_compact` (and :func:`sessiondb.compaction.maybe_compact`
        with this store); ``reset`` lets it try again."""
        return self._core.compaction_breaker

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        *,
        encryption: KeyProvider | None = None,
        **options: Unpack[StoreOptions],
    ) -> AsyncIterator[SessionStore]:
        """Open a store; closes its connections on exit.

        Args:
            url: ``postgresql://…`` (asyncpg), ``sqlite:///x.db`` or a file path (SQLite),
                or ``:memory:``; default ``SESSIONDB_URL``, else ``./sessiondb.sqlite3``.
                Postgres URLs take ``sslmode``, ``application_name``,
                ``connect_timeout`` and ``prepared_statement_cache_size=0`` (for
                PgBouncer in transaction mode).
            namespace: the tenant scope of every query; default ``SESSIONDB_NAMESPACE``,
                else ``"default"``.
            options: the keyword options of :class:`sessiondb.config.StoreOptions`
                (connections, limits, replicas, the change feed, search).

        Raises:
            ConfigurationError: the URL, namespace or options are unusable.
            MissingDependencyError: a Postgres URL without ``sessiondb[postgres]``.
            EncryptedNamespaceError (on first use): the namespace's encryption is not
                the store's.
        """
        store = await cls.connect(url, namespace, encryption=encryption, **options)
        try:
            yield store
        finally:
            await store.close()

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        namespace: str | None = None,
        *,
        encryption: KeyProvider | None = None,
        **options: Unpack[StoreOptions],
    ) -> SessionStore:
        """A store for a service to keep for its lifetime: ``store = await
        SessionStore.connect(url)`` at start-up, ``await store.close()`` at shut-down.
        Arguments as for :meth:`open`. Connections open on first use.

        Raises:
            ConfigurationError: the URL, namespace or options are unusable.
            MissingDependencyError: a Postgres URL without ``sessiondb[postgres]``.
        """
        return cls(Settings.from_options(url, namespace, options), encryption=encryption)

    def __repr__(self) -> str:
        return f"SessionStore({self.settings!r})"  # Settings masks the secrets

    async def close(self) -> None:
        """Close every connection and thread the store holds; idempotent. Any later call
        raises :class:`StoreClosedError`."""
        await self._core.close()

    # -- schema ---------------------------------------------------------------------

    async def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema to ``revision`` (default: the newest), as ``sessiondb migrate``."""
        # Exclusive: replicas that start together and all migrate take turns, and all but
        # the first find the schema at head already.
        from . import migrate as migrations  # Alembic: ~0.1 s of imports, for this only

        cfg = self._core.settings.search_config
        await self._core.backend.run_sync(
            lambda conn: migrations.run_sync(conn, "upgrade", revision, cfg), exclusive=True
        )
        self._core.schema_migrated()

    async def rotate_keys(self, *, reencrypt: bool = False) -> RotationReport:
        """Re-wrap the namespace's data keys under the key provider's current master key
        (older master keys are no longer needed); ``reencrypt``: also move every record
        and session to a new data key, in short batches while appends go on (a run cut
        short resumes when called again). Raises :class:`EncryptionError`."""
        check_bool(reencrypt, "reencrypt")
        return await rotate(self._core.backend, reencrypt=bool(reencrypt))

    # -- sessions -------------------------------------------------------------------

    async def create_session(
        self,
        name: str | None = None,
        model: str | None = None,
        source: Literal["interactive", "cron"] = "interactive",
        cron_job_id: str | None = None,
        system_prompt_override: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> SessionInfo:
        """Create an empty session. Without a name, the first user message names it.

        Args:
            key: the caller's own key for the session, unique in the namespace (see
                :meth:`session_for_key`, which returns the existing session instead).

        Raises:
            InvalidInputError: a bad source or key, or a value a text column cannot hold.
            ConflictError: the namespace has a session with this key already.
        """
        values = new_session_row(
            self.namespace,
            self._core.max_record_bytes,
            now(),
            name=name,
            model=model,
            source=source,
            cron_job_id=cron_job_id,
            system_prompt_override=system_prompt_override,
            metadata=metadata,
            key=key,
        )
        return await lifecycle.create(self._core, values)

    async def session_for_key(
        self, key: str, create: bool = True, **create_kwargs: Any
    ) -> SessionInfo:
        """The session whose key is ``key`` in this namespace, created if missing.

        A key is the caller's own address for a conversation: a chat id, a ticket
        number, ``user:42/thread:7``. It is compared exactly (case, spaces and Unicode
        normalisation count) and is unique per namespace: replicas or processes racing
        on one new key all get the one session that the first of them created. Safe to
        call again after any failure.

        Args:
            key: a non-empty string of at most 512 characters, without NUL or lone
                surrogates.
            create: create the session when the key is missing; with ``False`` a missing
                key raises :class:`SessionNotFoundError`.
            create_kwargs: what :meth:`create_session` takes (``name``, ``model``,
                ``source``, ``cron_job_id``, ``system_prompt_override``, ``metadata``),
                used only when the session is created; an existing session is returned
                unchanged.

        Raises:
            InvalidInputError: a bad key or argument.
            SessionNotFoundError: ``create`` is false and no session has this key.
        """
        key = session_key(key)
        check_bool(create, "create")
        unknown = sorted(set(create_kwargs) - _CREATE_ARGS)
        if unknown:
            raise InvalidInputError(
                f"session_for_key got unknown argument(s) {', '.join(unknown)}; it takes "
                f"{', '.join(sorted(_CREATE_ARGS))}"
            )
        core = self._core

        def new_row() -> dict[str, Any]:
            return new_session_row(
                self.namespace, core.max_record_bytes, now(), **create_kwargs, key=key
            )

        return await lifecycle.by_key(core, key, new_row if create else None)

    async def import_sessions(
        self,
        items: Iterable[NewSession | Mapping[str, Any]],
        *,
        batch_records: int = 20_000,
    ) -> list[str]:
        """Create many sessions with their messages at bulk speed; returns their ids.

        The fastest path for many records: COPY on Postgres, one multi-row insert per
        batch on SQLite. Each session is written whole or not at all: sessions are
        grouped into transactions of about ``batch_records`` records, and a batch is
        validated completely before any of it is written. A session may carry a ``key``
        (see :meth:`session_for_key`); none has one unless given.

        Raises:
            InvalidInputError: a session or message is malformed, or two of them have one
                key (its batch is not written).
            ConflictError: a key is taken in the namespace (its batch is not written).
        """
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidInputError(
                f"items must be an iterable of sessions (dicts or NewSession), got "
                f"{type(items).__name__}"
            )
        strict_int(batch_records, "batch_records", minimum=1)
        return await bulk.import_sessions(self._core, items, batch_records)

    async def get_session(self, session_id: str) -> SessionInfo:
        """The session's metadata and head.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a ULID.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        return await self._core.session(session_id)

    async def search(
        self,
        query: str,
        *,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
        roles: Sequence[str] | None = None,
        since: datetime | None = None,
        thinking: bool = False,
        hidden: bool = False,
    ) -> SearchPage:
        """Messages and compaction summaries of the namespace that match ``query``, best
        first among its newest 10,000 matches (syntax, filters, the window and errors:
        :func:`sessiondb.search.search`)."""
        from . import search as found  # Postgres types in its statements: for this only

        return await found.search(
            self._core, query, limit=limit, cursor=cursor, session_id=session_id,
            roles=roles, since=since, thinking=thinking, hidden=hidden,
        )  # fmt: skip

    async def list_sessions(
        self,
        limit: int = 50,
        cursor: str | None = None,
        *,
        source: Literal["interactive", "cron"] | None = None,
        parent_id: str | None = None,
    ) -> SessionPage:
        """A page of sessions, newest ``last_message_at`` first (keyset, never OFFSET).

        Args:
            limit: page size, 1..1000.
            cursor: ``next_cursor`` of the previous page.
            source: only sessions of this source.
            parent_id: only the direct forks of this session.
        """
        strict_int(limit, "limit", minimum=1, maximum=MAX_PAGE)
        if source is not None:
            check_source(source, None)
        if parent_id is not None:
            check_session_id(parent_id)
        after = cursors.decode(cursor) if cursor is not None else None

        def page(with_turns: bool) -> shapes.Bound:
            return shapes.list_sessions(
                self.namespace,
                limit=limit + 1,
                after=after,
                source=source,
                parent_id=parent_id,
                flavour=self._core.flavour,
                with_turns=with_turns,
            )

        rows = await self._core.fetch_sessions(page(True), page(False))
        items = [session_info(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = cursors.encode(utc(last["last_message_at"]), last["id"])
        return session_page(items, next_cursor)

    async def rename(self, session_id: str, name: str) -> SessionInfo:
        """Set the session's name.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        value = bounded_text(name, "name", MAX_NAME_CHARS, optional=False)
        assert value is not None
        if not await self._core.backend.execute(q.rename(session_id, self.namespace, value)):
            raise SessionNotFoundError(session_id, self.namespace)
        return await self._core.session(session_id)

    async def delete_session(self, session_id: str, *, cascade: bool = False) -> list[str]:
        """Delete the session and its records; returns the ids deleted.

        Args:
            cascade: also delete its forks, their forks, and so on.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            HasChildrenError: the session has forks and ``cascade`` is false.
        """
        check_session_id(session_id)
        check_bool(cascade, "cascade")
        return await lifecycle.delete(self._core, session_id, cascade)

    # -- turns and retention (sessiondb.turns, sessiondb.retention do the work) -------

    def turn(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        lease: float = turns.DEFAULT_LEASE,
        holder: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Turn]:
        """Hold the session's turn for an ``async with`` block: one holder at a time per
        session, across processes and hosts; waiters are served in arrival order.

        ``async with store.turn(sid, holder="worker-3") as turn: await turn.append(…)``.
        No transaction or connection stays open while the turn is held: the turn is a
        lease row that renews itself in the background, and ``turn.append`` writes only
        while the lease holds (see :mod:`sessiondb.turns`). Plain :meth:`append` still
        works for writers that take no turns. Not re-entrant: a second ``turn`` on the
        same session inside the block waits for the first like any other caller.

        Args:
            timeout: seconds to wait for the turn; ``None`` waits as long as it takes.
            lease: seconds a holder that stops renewing (a dead process) keeps the turn.
            holder: a label saying who is working (default ``host:pid``), shown by
                :meth:`get_session` and ``sessiondb sessions list``.

        Raises:
            InvalidInputError: a bad argument (raised at once).
            SessionNotFoundError: no such session in this namespace (on entering).
            TurnTimeoutError: the turn stayed taken for ``timeout`` seconds; it names
                the holder.
        """
        check_session_id(session_id)
        args = turns.check_args(timeout, lease, holder)
        return turns.hold(self._core, session_id, args)

    async def expire(
        self,
        older_than: timedelta,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        batch_size: int = retention.DEFAULT_BATCH,
    ) -> retention.RetentionReport:
        """Retention: delete whole sessions whose last message (without messages: whose
        creation) is older than ``older_than``, with their records.

        Not :meth:`append_prune`, which writes a prune overlay into one live session and
        deletes nothing. (``prune`` is this method's old name, kept as a deprecated
        alias.) A session with an active fork below it (directly or through a
        chain) is kept, so that every fork's lineage stays readable; so is a session whose
        turn is held. Works in batches of ``batch_size`` sessions, each one short
        transaction.

        A store expires its own namespace only, as it does everything else: expiring
        another tenant's sessions is an operator's act, done with a store opened on that
        namespace (``sessiondb --namespace alpha expire --older-than 30d``; see the
        retention guide).

        Args:
            older_than: the idle time after which a session goes.
            dry_run: report what would be deleted; write nothing.
            namespace: only the store's own (the default); any other is refused.

        Raises:
            InvalidInputError: a bad argument, or another namespace than the store's.
        """
        cutoff, dry, batch = retention.check_args(
            older_than, dry_run, namespace, batch_size, self.namespace
        )
        return await retention.expire(self._core, cutoff, dry_run=dry, batch_size=batch)

    async def prune(self, older_than: timedelta, **options: Any) -> retention.RetentionReport:
        """Deprecated: the old name of :meth:`expire` (retention), which it calls with the
        same arguments. It named two things, retention and the tool-result overlay
        (:meth:`append_prune`)."""
        warnings.warn(
            "SessionStore.prune is now SessionStore.expire (retention); prune will go",
            DeprecationWarning,
            stacklevel=3,  # the caller's line: past this method and telemetry's wrapper
        )
        return await self.expire(older_than, **options)

    # -- appends --------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        messages: Sequence[Message | Mapping[str, Any]] | Message | Mapping[str, Any],
        expected_seq: int | None = None,
    ) -> list[Record]:
        """Append messages in one transaction; returns the stored records, with seqs.

        A message whose ``uuid`` is already stored in this session is not stored again:
        its stored record comes back instead (a retry after an ambiguous commit).

        Args:
            messages: ``Message`` models or dicts of the wire shape (kept exactly as given).
            expected_seq: the head seq the caller believes is current; if another writer
                got there first, :class:`SeqConflictError` is raised and nothing is written.

        Raises:
            InvalidInputError: a message is malformed (nothing is written).
            SessionNotFoundError: no such session in this namespace.
            SeqConflictError: ``expected_seq`` is not the head.
        """
        check_session_id(session_id)
        rows = self._core.message_rows(messages)
        return await self._core.append(session_id, rows, expected_seq=expected_seq)

    # -- reading --------------------------------------------------------------------

    async def context(self, session_id: str, *, last: int | None = None) -> list[Message]:
        """What the model should see, computed by one query.

        The latest live compaction along the lineage becomes a summary message, followed
        by every live message from its ``first_kept_seq`` on; tombstoned messages never
        appear. Without a compaction, every live message in order. A compaction with an
        empty summary (:meth:`clear`) adds no summary message.

        Each message is built from its stored text when first touched
        (:class:`~sessiondb.decode.StoredMessage`): the read costs about its SELECT. A
        message whose stored text is not one sessiondb wrote raises
        :class:`~sessiondb.errors.CorruptRecordError` at that first touch (a field,
        ``to_wire()``, a dump, ``==``, ``repr``, a copy), and at every touch after it.

        Args:
            last: only the last ``last`` messages of that list (the summary counts as its
                first message). Read backwards by index: the cost follows ``last``, not
                the length of the history.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``last`` is not a non-negative int.
            CorruptRecordError: a stored compaction or prune is not one sessiondb wrote
                (a message: where it is first touched).
        """
        messages = ctx.to_messages(
            await self._core.context_rows(check_session_id(session_id), last)
        )
        return messages if last is None else messages[max(0, len(messages) - last) :]

    async def context_json(self, session_id: str, *, last: int | None = None) -> str:
        """The same context as :meth:`context`, as one JSON array of wire-shape messages,
        built from the stored texts without parsing them: for services that hand the
        context straight to a model API. ``last`` as for :meth:`context`.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``last`` is not a non-negative int.
        """
        rows = await self._core.context_rows(check_session_id(session_id), last)
        return ctx.json_array(rows, last)

    async def records(
        self,
        session_id: str,
        *,
        include_tombstoned: bool = False,
        include_superseded: bool = True,
        kinds: Iterable[str] | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
    ) -> list[Record]:
        """Stored records along the lineage (a fork's inherited ones too), in seq order.

        By default every record (messages, compactions, tombstones, imported entries)
        except those a tombstone soft-deleted, which stay stored for audit. A record's
        message is built when first touched, as :meth:`context`'s are.

        Args:
            include_tombstoned: keep records that a tombstone soft-deleted.
            include_superseded: keep messages before the latest compaction's
                ``first_kept_seq``.
            kinds: only these kinds (``message``, ``compaction``, ``tombstone``, ``entry``,
                ``prune``).
            from_seq, to_seq: an inclusive seq range.

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: an argument is not what it should be.
            CorruptRecordError: a stored row other than a message is not one sessiondb
                wrote (a message: where it is first touched).
        """
        check_session_id(session_id)
        kind_filter = record_kinds(kinds, KINDS)
        for name, value in (("from_seq", from_seq), ("to_seq", to_seq)):
            if value is not None:
                strict_int(value, name, minimum=0)
        check_bool(include_tombstoned, "include_tombstoned")
        check_bool(include_superseded, "include_superseded")
        if kind_filter == ():
            await self._core.session(session_id)  # raises when the session is missing
            return []  # no kinds asked for: no records (and no empty IN list in SQL)
        bound = q.lineage_records(
            session_id,
            self.namespace,
            include_tombstoned=bool(include_tombstoned),
            include_superseded=bool(include_superseded),
            kinds=kind_filter,
            from_seq=from_seq,
            to_seq=to_seq,
            flavour=self._core.flavour,
            sealed=self._core.encrypted,
        )
        rows = await self._core.backend.fetch(bound)
        if not rows:
            await self._core.session(session_id)  # raises when the session is missing
        return records_from_rows(rows)

    # -- overlays: compaction, tombstones -------------------------------------------

    async def append_compaction(
        self,
        session_id: str,
        *,
        summary: str,
        first_kept_seq: int,
        tokens_before: int = 0,
        read_files: Sequence[str] = (),
        modified_files: Sequence[str] = (),
        expected_seq: int | None = None,
    ) -> Record:
        """Append a compaction overlay: the context becomes ``summary`` plus every message
        from ``first_kept_seq`` on. Nothing is rewritten; messages appended meanwhile
        (after the caller read the history) are kept.

        Raises:
            InvalidInputError: ``first_kept_seq`` is not a message in the current context,
                or cutting there would separate a tool call from its result.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        strict_int(first_kept_seq, "first_kept_seq", minimum=1)
        check_expected_seq(expected_seq)
        check_list(read_files, "read_files", "paths")
        check_list(modified_files, "modified_files", "paths")
        try:
            compaction = Compaction(
                summary=summary,
                first_kept_seq=first_kept_seq,
                tokens_before=tokens_before,
                read_files=list(read_files),
                modified_files=list(modified_files),
            )
        except ValidationError as exc:
            raise InvalidInputError(f"compaction: {first_error(exc)}") from None
        except TypeError as exc:
            raise InvalidInputError(f"compaction: {exc}") from None
        return await overlays.append_compaction(self._core, session_id, compaction, expected_seq)

    # -- overlays: pruning (compaction's cheaper first phase) ------------------------

    async def append_prune(
        self,
        session_id: str,
        seqs: Sequence[int],
        *,
        marker: str = ctx.PRUNED_MARKER,
        tokens_freed: int = 0,
        expected_seq: int | None = None,
    ) -> Record:
        """Append a prune overlay: in the context, each tool result in ``seqs`` shows one
        text block holding ``marker`` instead of its content (``toolCallId`` and the other
        fields stay). Nothing is rewritten: :meth:`records` still gives the content, and
        tombstoning the prune record brings it back into the context. Not :meth:`prune`,
        which is retention: it deletes whole idle sessions.

        Args:
            seqs: seqs of tool results in the current context, not pruned already.
            marker: the text that stands for a pruned result.
            tokens_freed: the caller's estimate of what pruning saves, stored as given.
            expected_seq: as for :meth:`append`.

        Raises:
            InvalidInputError: a seq is not a live tool result in the context, or is
                pruned already; bad arguments.
            SessionNotFoundError: no such session in this namespace.
            SeqConflictError: ``expected_seq`` is not the head.
        """
        check_session_id(session_id)
        chosen = prune_seqs(seqs, overlays.MAX_PRUNE_SEQS)
        if not isinstance(marker, str) or not marker.strip():
            raise InvalidInputError(f"marker must be a non-empty string, got {brief(marker)}")
        strict_int(tokens_freed, "tokens_freed", minimum=0)
        check_expected_seq(expected_seq)
        prune = Prune(seqs=chosen, marker=marker, tokens_freed=tokens_freed)
        return await overlays.append_prune(self._core, session_id, prune, expected_seq)

    async def tombstone(self, session_id: str, seq: int, reason: str | None = None) -> list[Record]:
        """Soft-delete the record ``seq`` of the session's lineage; returns the tombstones
        written (none when it was already tombstoned).

        The target stays stored (``records(include_tombstoned=True)`` shows it). An
        assistant message takes the results of its tool calls with it and a tool result
        takes its call, so the context never holds half a pair. Tombstoning a compaction
        brings back the history it superseded.

        Raises:
            RecordNotFoundError: no record ``seq`` in this lineage.
            InvalidInputError: the target is itself a tombstone.
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        strict_int(seq, "seq")
        reason = column_text(reason, "reason")
        return await overlays.tombstone(self._core, session_id, seq, reason)

    async def pop(self, session_id: str, reason: str | None = None) -> Record | None:
        """Take the context's last entry out of it and return its record, by appending:
        the last live message gets a tombstone of its own (a tool call or result does
        not take its partner with it, unlike :meth:`tombstone`); when only a compaction
        summary is left, the summary goes by a :meth:`clear` and the compaction's record
        comes back. ``None`` when the context is empty.

        Concurrent pops, in any process, never return the same record: each runs under
        the session's row lock.

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        reason = column_text(reason, "reason")
        return await overlays.pop(self._core, session_id, reason)

    async def clear(self, session_id: str) -> Record | None:
        """Empty the context by appending a compaction with no summary whose
        ``first_kept_seq`` is its own seq: everything before it leaves the context, what
        is appended after it is the new context. Nothing is rewritten: :meth:`records`
        still shows the history, and tombstoning the record brings it back. Returns the
        record, or ``None`` when the context was empty already (nothing is written).

        Raises:
            SessionNotFoundError: no such session in this namespace.
        """
        check_session_id(session_id)
        return await overlays.clear(self._core, session_id)

    # -- the change feed (sessiondb.feed does the work) -------------------------------

    def watch(
        self, session_id: str, *, from_seq: int | None = None
    ) -> AsyncGenerator[Record, None]:
        """The records committed to the session, from any process, as they come: an
        async iterator, in seq order, each record once (its lineage's, tombstoned ones
        too). Starts after ``from_seq`` (default: the head now), replaying what is stored
        after it. Ends when the caller stops iterating; the store's one LISTEN
        connection (Postgres) or poll (SQLite) is shared by every watch (store option
        ``feed``: ``auto``, ``listen`` or ``poll``).

        Raises (on the first iteration):
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``from_seq`` is not an int >= 0.
        """
        return feed.watch(self._core, session_id, from_seq)

    def watch_all(self) -> AsyncGenerator[tuple[str, int], None]:
        """``(session_id, head seq)`` each time a session of the namespace moves on,
        from now on: an async iterator (see :mod:`sessiondb.feed`)."""
        return feed.watch_all(self._core)

    # -- forks ------------------------------------------------------------------------

    async def fork(
        self,
        session_id: str,
        at_seq: int | None = None,
        name: str | None = None,
        *,
        detach: bool = False,
    ) -> SessionInfo:
        """A child session holding the parent's records with ``seq <= at_seq``.

        Nothing is copied: the child inherits those records by reference and its own
        continue at ``at_seq + 1``. Compactions and tombstones at or before the fork point
        apply to the child; what either side writes later does not touch the other. The
        child has no key (:meth:`session_for_key`): it is another conversation.

        Args:
            at_seq: the fork point; default the parent's head.
            name: the child's name; default the parent's.
            detach: copy the inherited records instead, so the child stands alone (no
                parent link; the parent can then be deleted freely).

        Raises:
            SessionNotFoundError: no such session in this namespace.
            InvalidInputError: ``at_seq`` is beyond the head or inside a tool call/result pair.
        """
        check_session_id(session_id)
        if at_seq is not None:
            strict_int(at_seq, "at_seq")
        name = bounded_text(name, "name", MAX_NAME_CHARS)
        check_bool(detach, "detach")
        child_id = await forks.fork(self._core, session_id, at_seq, name, detach)
        return await self._core.session(child_id)


__all__ = ["SessionStore"]
