"""The conformance suite: a reference model of sessiondb's semantics, and a hypothesis
state machine that drives random operations against the model and a store side by side.

For anyone who writes a backend or wraps :class:`~sessiondb.SessionStore`: if the
store agrees with the model after every step, it keeps sessiondb's promises. Needs
``pip install 'sessiondb[testing]'`` (hypothesis).

Run it against a database (each example works in a fresh namespace)::

    from sessiondb.testing import run_conformance

    run_conformance("sqlite:///conformance.sqlite3", steps=200)

or, to choose hypothesis's settings and how stores are made, take the machine class::

    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
    from sessiondb import SessionStore
    from sessiondb.testing import conformance_machine

    async def fresh_store() -> SessionStore:
        store = await SessionStore.connect(":memory:")
        await store.migrate()
        return store

    Machine = conformance_machine(fresh_store)
    run_state_machine_as_test(
        Machine, settings=settings(max_examples=10, stateful_step_count=30, deadline=None)
    )
    print(Machine.steps_run)

:class:`ReferenceModel` is the model alone: plain Python over wire-shape dicts, no
database, no I/O. Its docstrings state the rules it encodes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, TypeVar

from .errors import (
    ConflictError,
    HasChildrenError,
    InvalidInputError,
    MissingDependencyError,
    RecordNotFoundError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
)
from .ids import new_session_id
from .models import Record, SessionInfo
from .naming import derive_name
from .store import SessionStore

try:
    from hypothesis import settings as Settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        initialize,
        invariant,
        precondition,
        rule,
        run_state_machine_as_test,
    )
except ImportError as exc:  # pragma: no cover - exercised by a test that hides hypothesis
    raise MissingDependencyError("hypothesis", "testing") from exc

T = TypeVar("T")

# The spec's markers around a compaction summary (§7.4 step 3a), written out here on
# purpose rather than imported: the model states the rule, the store must follow it.
SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n<summary>\n"
)
SUMMARY_SUFFIX = "\n</summary>"

KINDS = ("message", "compaction", "tombstone", "prune")

# A key's limits (characters, and bytes of UTF-8), written out for the same reason.
MAX_KEY_CHARS = 512
MAX_KEY_BYTES = 1536
# What session_for_key passes on when it creates a session.
CREATE_ARGS = frozenset(
    ("name", "model", "source", "cron_job_id", "system_prompt_override", "metadata")
)


# -- the reference model ----------------------------------------------------------------


@dataclass(frozen=True)
class ModelRecord:
    """One record as the model keeps it: ``payload`` is the wire-shape JSON object
    (a message as stored, a compaction's or a tombstone's fields in camelCase)."""

    session_id: str
    seq: int
    kind: str
    payload: dict[str, Any]
    uuid: str | None = None

    @property
    def role(self) -> str | None:
        return self.payload["role"] if self.kind == "message" else None

    @property
    def call_ids(self) -> set[str]:
        """Ids of the tool calls an assistant message makes."""
        if self.role != "assistant":
            return set()
        return {
            b["id"]
            for b in self.payload["content"]
            if isinstance(b, dict) and b.get("type") == "toolCall"
        }

    def view(self) -> tuple[str, int, str, str | None, dict[str, Any]]:
        """What a store's record must equal: ``(session_id, seq, kind, uuid, payload)``."""
        return (self.session_id, self.seq, self.kind, self.uuid, self.payload)


@dataclass
class ModelSession:
    """A session's row: metadata, head and counters, and its own records."""

    id: str
    name: str | None = None
    model: str | None = None
    source: str = "interactive"
    cron_job_id: str | None = None
    system_prompt_override: str | None = None
    metadata: dict[str, Any] | None = None
    parent_id: str | None = None
    fork_seq: int | None = None
    key: str | None = None
    last_seq: int = 0
    message_count: int = 0
    tokens: tuple[int, int, int, int] = (0, 0, 0, 0)
    cost_total: float = 0.0
    own: list[ModelRecord] = field(default_factory=list)

    def info(self) -> dict[str, Any]:
        """What a store's :class:`SessionInfo` must agree with (timestamps aside, except
        that ``last_message_at`` is set exactly when the session has messages)."""
        return {
            "id": self.id,
            "name": self.name,
            "model": self.model,
            "source": self.source,
            "cron_job_id": self.cron_job_id,
            "system_prompt_override": self.system_prompt_override,
            "metadata": self.metadata,
            "parent_id": self.parent_id,
            "fork_seq": self.fork_seq,
            "key": self.key,
            "last_seq": self.last_seq,
            "message_count": self.message_count,
            "has_last_message_at": self.message_count > 0,
            "metrics": {
                "input_tokens": self.tokens[0],
                "output_tokens": self.tokens[1],
                "cache_read_tokens": self.tokens[2],
                "cache_write_tokens": self.tokens[3],
                "cost_total": self.cost_total,
            },
        }


def info_view(info: SessionInfo) -> dict[str, Any]:
    """A store's session in the shape of :meth:`ModelSession.info`."""
    return {
        "id": info.id,
        "name": info.name,
        "model": info.model,
        "source": info.source,
        "cron_job_id": info.cron_job_id,
        "system_prompt_override": info.system_prompt_override,
        "metadata": info.metadata,
        "parent_id": info.parent_id,
        "fork_seq": info.fork_seq,
        "key": info.key,
        "last_seq": info.last_seq,
        "message_count": info.message_count,
        "has_last_message_at": info.last_message_at is not None,
        "metrics": info.metrics.model_dump(),
    }


def record_view(record: Record) -> tuple[str, int, str, str | None, dict[str, Any]]:
    """A store's record in the shape of :meth:`ModelRecord.view`."""
    typed = record.message or record.compaction or record.tombstone or record.prune
    payload = typed.to_wire() if typed is not None else dict(record.entry or {})
    return (record.session_id, record.seq, record.kind, record.uuid, payload)


class ReferenceModel:
    """sessiondb's semantics as plain Python: the sessions of one namespace.

    The rules, as the store implements them and DESIGN states them:

    - **Seqs.** Every record of a session takes the next seq (1, 2, 3 … without gaps).
      A fork's own records continue at ``fork_seq + 1``; a seq names one record along
      the lineage (the session, then each ancestor up to the lowest fork point below it).
    - **Appends** take the next seqs together. With ``expected_seq``, a head other than
      it raises :class:`SeqConflictError` and writes nothing. A message whose ``uuid`` is
      already stored along the lineage is not stored again: its stored record comes back
      in its place, and an append whose messages are all known writes nothing and ignores
      ``expected_seq``. The same uuid twice in one append is invalid input. An empty
      append writes nothing and returns ``[]``; a missing session is still refused.
    - **Heads.** ``message_count`` counts the message records of the lineage (tombstoned
      and superseded ones too); token totals add up each new message's usage. A session
      without a name takes one from the first user message of an append
      (:func:`sessiondb.naming.derive_name`).
    - **Tool pairs.** A tool result answers the last assistant message before it, if
      that message made a call with the result's ``toolCallId``; an assistant message's
      results are those answers, all of which come before the next assistant message.
      Tombstoned messages still count. A pair is never split: tombstoning either side
      takes the whole pair (the call and all its results), and a compaction or a fork
      may not cut between a call and one of its results.
    - **Compactions.** The latest compaction that is not tombstoned wins: the context is
      its summary (a user message wrapped in the spec's markers; none when the summary
      is empty) followed by the live messages from its ``firstKeptSeq`` on.
      ``firstKeptSeq`` must name a live message of the current context. Tombstoning the
      compaction brings back what it superseded. ``context(last=N)`` is the context's
      last N messages (the summary counts as its first).
    - **Clear** appends a compaction with an empty summary whose ``firstKeptSeq`` is its
      own seq: the context is empty, the history stays in ``records``, and tombstoning
      the compaction undoes the clear. An empty context is not cleared again (nothing
      is written, ``None`` comes back).
    - **Pop** tombstones the context's last live message alone (no tool-pair cascade:
      its partner stays) and returns its record. When only a summary is left, it clears
      and returns the compaction in force; an empty context writes nothing (``None``).
    - **Prunes** name live tool results of the context not pruned yet; in the context
      each shows one text block holding the prune's marker (every other field kept).
      Tombstoning the prune record brings the content back.
    - **Tombstones** name one record of the lineage (not a tombstone); one already
      tombstoned is not tombstoned again.
    - **Forks** hold the parent's records with ``seq <= at_seq`` by reference (``at_seq``
      defaults to the head and must not cut a tool pair unless it is the head); a fork at
      the head copies the parent's counters, a fork mid-stream counts its messages and
      starts its token totals at zero. ``detach`` copies the records instead (the child
      names itself as their session and has no parent).
    - **Deletes** remove a session with its records; one with forks needs ``cascade``,
      which removes the whole subtree.
    - **Keys.** A session may hold the caller's key: a non-empty string of at most 512
      characters (1,536 bytes of UTF-8), without NUL or lone surrogates, compared
      exactly (case and spaces count) and unique among the namespace's sessions.
      ``create_session`` with a taken key is a :class:`ConflictError`;
      ``session_for_key`` returns the session holding the key unchanged (its create
      arguments unused, not even checked, only their names) or creates one, or with
      ``create=False`` raises :class:`SessionNotFoundError`. A fork, detached or not,
      has no key; a deleted session's key is free again.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, ModelSession] = {}

    # -- sessions -------------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        name: str | None = None,
        model: str | None = None,
        source: str = "interactive",
        cron_job_id: str | None = None,
        system_prompt_override: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> ModelSession:
        """An empty session with the id the store gave it."""
        if source not in ("interactive", "cron"):
            raise InvalidInputError(f"source must be 'interactive' or 'cron', got {source!r}")
        if source == "interactive" and cron_job_id is not None:
            raise InvalidInputError("cron_job_id is only for source='cron'")
        if key is not None:
            _check_key(key)
            if self.session_by_key(key) is not None:
                raise ConflictError(f"a session has the key {key!r} already")
        session = ModelSession(
            id=session_id,
            name=name,
            model=model,
            source=source,
            cron_job_id=cron_job_id,
            system_prompt_override=system_prompt_override,
            metadata=copy.deepcopy(dict(metadata)) if metadata is not None else None,
            key=key,
        )
        self.sessions[session_id] = session
        return session

    def session_by_key(self, key: str) -> ModelSession | None:
        """The session holding ``key`` exactly, if any."""
        return next((s for s in self.sessions.values() if s.key == key), None)

    def session_for_key(
        self, key: str, session_id: str, *, create: bool = True, **create_kwargs: Any
    ) -> ModelSession:
        """The session holding ``key``; else a new one with the id ``session_id`` (the
        store's) made from ``create_kwargs``."""
        _check_key(key)
        unknown = sorted(set(create_kwargs) - CREATE_ARGS)
        if unknown:
            raise InvalidInputError(f"unknown argument(s) {unknown}")
        found = self.session_by_key(key)
        if found is not None:
            return found
        if not create:
            raise SessionNotFoundError(None, key=key)
        return self.create_session(session_id, key=key, **create_kwargs)

    def get_session(self, session_id: str) -> ModelSession:
        """The session; :class:`SessionNotFoundError` if it does not exist (any more)."""
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionNotFoundError(session_id)
        return session

    def rename(self, session_id: str, name: str) -> ModelSession:
        """Set the session's name (a name given later is not replaced by a derived one)."""
        session = self.get_session(session_id)
        session.name = name
        return session

    def delete_session(self, session_id: str, *, cascade: bool = False) -> list[str]:
        """Delete the session (with ``cascade``, its forks too); the ids deleted."""
        self.get_session(session_id)
        subtree = self.subtree(session_id)
        if len(subtree) > 1 and not cascade:
            raise HasChildrenError(session_id, self.children(session_id))
        for sid in subtree:
            del self.sessions[sid]
        return subtree

    def children(self, session_id: str) -> list[str]:
        """Ids of the session's forks (not the detached ones)."""
        return [s.id for s in self.sessions.values() if s.parent_id == session_id]

    def subtree(self, session_id: str) -> list[str]:
        """The session and its forks, their forks, and so on."""
        out = [session_id]
        for sid in out:
            out.extend(self.children(sid))
        return out

    # -- reading --------------------------------------------------------------------

    def lineage(self, session_id: str) -> list[ModelRecord]:
        """Every record the session sees, in seq order: its own, then each ancestor's up
        to the lowest fork point below it."""
        session = self.get_session(session_id)
        seen = list(session.own)
        upto = session.last_seq
        while session.parent_id is not None:
            assert session.fork_seq is not None
            upto = min(upto, session.fork_seq)
            session = self.get_session(session.parent_id)
            seen.extend(r for r in session.own if r.seq <= upto)
        return sorted(seen, key=lambda r: r.seq)

    @staticmethod
    def tombstoned(lineage: Iterable[ModelRecord]) -> set[int]:
        return {r.payload["targetSeq"] for r in lineage if r.kind == "tombstone"}

    @classmethod
    def latest_compaction(cls, lineage: Sequence[ModelRecord]) -> ModelRecord | None:
        """The latest compaction of the lineage that is not tombstoned."""
        dead = cls.tombstoned(lineage)
        live = [r for r in lineage if r.kind == "compaction" and r.seq not in dead]
        return live[-1] if live else None

    @classmethod
    def first_kept(cls, lineage: Sequence[ModelRecord]) -> int:
        compaction = cls.latest_compaction(lineage)
        return 0 if compaction is None else int(compaction.payload["firstKeptSeq"])

    def context(self, session_id: str, last: int | None = None) -> list[dict[str, Any]]:
        """What the model should see, as wire-shape messages; with ``last``, only the
        last ``last`` of them."""
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise InvalidInputError(f"last must be a non-negative int or None, got {last!r}")
        lineage = self.lineage(session_id)
        compaction = self.latest_compaction(lineage)
        out: list[dict[str, Any]] = []
        if compaction is not None and compaction.payload["summary"] != "":
            text = SUMMARY_PREFIX + compaction.payload["summary"] + SUMMARY_SUFFIX
            out.append({"role": "user", "content": [{"type": "text", "text": text}]})
        markers = self.prune_markers(lineage)
        for r in self.kept(lineage):
            if r.seq in markers:
                out.append({**r.payload, "content": [{"type": "text", "text": markers[r.seq]}]})
            else:
                out.append(r.payload)
        return out if last is None else out[max(0, len(out) - last) :]

    @classmethod
    def kept(cls, lineage: Sequence[ModelRecord]) -> list[ModelRecord]:
        """The live messages of the context: from the first kept seq on, not tombstoned."""
        dead = cls.tombstoned(lineage)
        first_kept = cls.first_kept(lineage)
        return [
            r for r in lineage if r.kind == "message" and r.seq >= first_kept and r.seq not in dead
        ]

    @classmethod
    def prune_markers(cls, lineage: Sequence[ModelRecord]) -> dict[int, str]:
        """Seq → marker of every tool result a live prune record names."""
        dead = cls.tombstoned(lineage)
        return {
            seq: r.payload["marker"]
            for r in lineage
            if r.kind == "prune" and r.seq not in dead
            for seq in r.payload["seqs"]
        }

    def records(
        self,
        session_id: str,
        *,
        include_tombstoned: bool = False,
        include_superseded: bool = True,
        kinds: Iterable[str] | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
    ) -> list[ModelRecord]:
        """The lineage's records, filtered as :meth:`SessionStore.records` filters them:
        by default everything but the records a tombstone soft-deleted."""
        lineage = self.lineage(session_id)
        dead = self.tombstoned(lineage)
        first_kept = self.first_kept(lineage)
        chosen = None if kinds is None else set(kinds)
        return [
            r
            for r in lineage
            if (include_tombstoned or r.seq not in dead)
            and (include_superseded or r.kind != "message" or r.seq >= first_kept)
            and (chosen is None or r.kind in chosen)
            and (from_seq is None or r.seq >= from_seq)
            and (to_seq is None or r.seq <= to_seq)
        ]

    # -- tool pairs -----------------------------------------------------------------

    @staticmethod
    def _messages(lineage: Sequence[ModelRecord]) -> list[ModelRecord]:
        return [r for r in lineage if r.kind == "message"]

    @staticmethod
    def _answered_call(messages: Sequence[ModelRecord], index: int) -> int | None:
        """Index of the assistant message the tool result at ``index`` answers."""
        call_id = messages[index].payload.get("toolCallId")
        for i in range(index - 1, -1, -1):
            if messages[i].role == "assistant":
                return i if call_id in messages[i].call_ids else None
        return None

    @staticmethod
    def _pair(messages: Sequence[ModelRecord], index: int) -> list[int]:
        """Seqs of the assistant message at ``index`` and the results of its calls."""
        calls = messages[index].call_ids
        out = [messages[index].seq]
        for m in messages[index + 1 :]:
            if m.role == "assistant":
                break
            if m.role == "toolResult" and m.payload.get("toolCallId") in calls:
                out.append(m.seq)
        return out

    def pair_members(self, lineage: Sequence[ModelRecord], seq: int) -> list[int]:
        """Seqs that leave the context together with the record ``seq``."""
        messages = self._messages(lineage)
        index = next((i for i, m in enumerate(messages) if m.seq == seq), None)
        if index is None:
            return [seq]
        if messages[index].role == "toolResult":
            call = self._answered_call(messages, index)
            return [seq] if call is None else self._pair(messages, call)
        if messages[index].role == "assistant":
            return self._pair(messages, index)
        return [seq]

    def splits_pair(self, lineage: Sequence[ModelRecord], cut_after: int) -> bool:
        """Whether cutting between ``cut_after`` and ``cut_after + 1`` separates a tool
        call from one of its results."""
        messages = self._messages(lineage)
        calls = [i for i, m in enumerate(messages) if m.seq <= cut_after]
        last_assistant = next((i for i in reversed(calls) if messages[i].role == "assistant"), None)
        if last_assistant is None:
            return False
        return any(seq > cut_after for seq in self._pair(messages, last_assistant))

    # -- writing --------------------------------------------------------------------

    def _write(
        self, session: ModelSession, kind: str, payloads: Sequence[dict[str, Any]]
    ) -> list[ModelRecord]:
        """Append records to the session's head and update its counters."""
        written = []
        for payload in payloads:
            session.last_seq += 1
            uuid = payload.get("uuid") if kind == "message" else None
            record = ModelRecord(session.id, session.last_seq, kind, payload, uuid)
            session.own.append(record)
            written.append(record)
        if kind != "message" or not payloads:
            return written
        session.message_count += len(payloads)
        tokens = list(session.tokens)
        for payload in payloads:
            usage = payload.get("usage") or {}
            for i, key in enumerate(("input", "output", "cacheRead", "cacheWrite")):
                tokens[i] += usage.get(key, 0)
            cost = (usage.get("cost") or {}).get("total", 0.0)
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                session.cost_total += float(cost)
        session.tokens = (tokens[0], tokens[1], tokens[2], tokens[3])
        first_user = next((p for p in payloads if p["role"] == "user"), None)
        if session.name is None and first_user is not None:
            text = "\n".join(b["text"] for b in first_user["content"] if b.get("type") == "text")
            session.name = derive_name(text)
        return written

    @staticmethod
    def stored_form(message: Mapping[str, Any]) -> dict[str, Any]:
        """A wire-shape message as it is stored: a string ``content`` becomes one text
        block; everything else as given."""
        stored = copy.deepcopy(dict(message))
        if isinstance(stored.get("content"), str):
            stored["content"] = [{"type": "text", "text": stored["content"]}]
        return stored

    def append(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        expected_seq: int | None = None,
    ) -> list[ModelRecord]:
        """Append wire-shape messages (assumed well formed: the model does not check
        their shape); the records stored, or the stored ones for known uuids."""
        _check_expected(expected_seq)
        stored = [self.stored_form(m) for m in messages]
        uuids = [m["uuid"] for m in stored if m.get("uuid") is not None]
        if len(set(uuids)) != len(uuids):
            raise InvalidInputError("the same uuid appears twice in one append")
        if not stored:
            self.get_session(session_id)  # a missing session is refused even so
            return []
        session = self.get_session(session_id)
        known = {r.uuid: r for r in self.lineage(session_id) if r.uuid is not None}
        new = [m for m in stored if m.get("uuid") is None or m["uuid"] not in known]
        if not new:
            return [known[m["uuid"]] for m in stored]
        _check_head(session, expected_seq)
        fresh = iter(self._write(session, "message", new))
        return [known[m["uuid"]] if m.get("uuid") in known else next(fresh) for m in stored]

    def append_compaction(
        self,
        session_id: str,
        *,
        summary: str,
        first_kept_seq: int,
        tokens_before: int = 0,
        read_files: Sequence[str] = (),
        modified_files: Sequence[str] = (),
        expected_seq: int | None = None,
    ) -> ModelRecord:
        """Append a compaction overlay."""
        if (
            isinstance(first_kept_seq, bool)
            or not isinstance(first_kept_seq, int)
            or first_kept_seq < 1
        ):
            raise InvalidInputError(
                f"first_kept_seq must be a positive int, got {first_kept_seq!r}"
            )
        _check_expected(expected_seq)
        session = self.get_session(session_id)
        lineage = self.lineage(session_id)
        dead = self.tombstoned(lineage)
        live = any(
            r.kind == "message" and r.seq == first_kept_seq and r.seq not in dead for r in lineage
        )
        if not live or first_kept_seq < self.first_kept(lineage):
            raise InvalidInputError(f"first_kept_seq {first_kept_seq} is not in the context")
        if self.splits_pair(lineage, first_kept_seq - 1):
            raise InvalidInputError(f"first_kept_seq {first_kept_seq} splits a tool pair")
        _check_head(session, expected_seq)
        payload = {
            "summary": summary,
            "firstKeptSeq": first_kept_seq,
            "tokensBefore": tokens_before,
            "readFiles": list(read_files),
            "modifiedFiles": list(modified_files),
        }
        (record,) = self._write(session, "compaction", [payload])
        return record

    def append_prune(
        self,
        session_id: str,
        seqs: Sequence[int],
        *,
        marker: str = "[Old tool result content cleared]",
        tokens_freed: int = 0,
        expected_seq: int | None = None,
    ) -> ModelRecord:
        """Append a prune overlay: in the context, each tool result of ``seqs`` (live
        ones of the context, not pruned yet) shows one text block holding ``marker``."""
        if not seqs or any(isinstance(q, bool) or not isinstance(q, int) or q < 1 for q in seqs):
            raise InvalidInputError(f"seqs must be a non-empty list of positive ints: {seqs!r}")
        if len(set(seqs)) != len(seqs):
            raise InvalidInputError("the same seq appears twice in seqs")
        if not isinstance(marker, str) or not marker.strip():
            raise InvalidInputError(f"marker must be a non-empty string, got {marker!r}")
        if isinstance(tokens_freed, bool) or not isinstance(tokens_freed, int) or tokens_freed < 0:
            raise InvalidInputError(f"tokens_freed must be a non-negative int: {tokens_freed!r}")
        _check_expected(expected_seq)
        session = self.get_session(session_id)
        lineage = self.lineage(session_id)
        dead = self.tombstoned(lineage)
        first_kept = self.first_kept(lineage)
        results = {
            r.seq
            for r in lineage
            if r.role == "toolResult" and r.seq >= first_kept and r.seq not in dead
        }
        if any(q not in results for q in seqs):
            raise InvalidInputError(f"not tool results in the context: {seqs!r}")
        if any(q in self.prune_markers(lineage) for q in seqs):
            raise InvalidInputError(f"already pruned: {seqs!r}")
        _check_head(session, expected_seq)
        payload = {"seqs": sorted(seqs), "marker": marker, "tokensFreed": tokens_freed}
        (record,) = self._write(session, "prune", [payload])
        return record

    def tombstone(self, session_id: str, seq: int, reason: str | None = None) -> list[ModelRecord]:
        """Soft-delete the record ``seq`` (and the rest of its tool pair); the tombstones
        written, none when everything was tombstoned already."""
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise InvalidInputError(f"seq must be a 64-bit int, got {seq!r}")
        session = self.get_session(session_id)
        lineage = self.lineage(session_id)
        target = next((r for r in lineage if r.seq == seq), None)
        if target is None:
            raise RecordNotFoundError(session_id, seq)
        if target.kind == "tombstone":
            raise InvalidInputError(f"record {seq} is a tombstone; it cannot be tombstoned")
        targets = self.pair_members(lineage, seq) if target.kind == "message" else [seq]
        done = self.tombstoned(lineage)
        payloads = [{"targetSeq": t, "reason": reason} for t in targets if t not in done]
        return self._write(session, "tombstone", payloads)

    def pop(self, session_id: str, reason: str | None = None) -> ModelRecord | None:
        """Take the context's last entry out: the last live message's record (tombstoned
        alone), else the compaction whose summary is all that is left (cleared), else
        ``None`` (nothing written)."""
        session = self.get_session(session_id)
        lineage = self.lineage(session_id)
        kept = self.kept(lineage)
        if kept:
            self._write(session, "tombstone", [{"targetSeq": kept[-1].seq, "reason": reason}])
            return kept[-1]
        compaction = self.latest_compaction(lineage)
        if compaction is None or compaction.payload["summary"] == "":
            return None
        self.clear(session_id)
        return compaction

    def clear(self, session_id: str) -> ModelRecord | None:
        """Empty the context by a compaction with an empty summary that keeps from its own
        seq on; ``None`` (nothing written) when the context is empty already."""
        session = self.get_session(session_id)
        if not self.context(session_id):
            return None
        payload = {"summary": "", "firstKeptSeq": session.last_seq + 1}
        (record,) = self._write(session, "compaction", [payload])
        return record

    def fork(
        self,
        session_id: str,
        child_id: str,
        at_seq: int | None = None,
        name: str | None = None,
        *,
        detach: bool = False,
    ) -> ModelSession:
        """A child session (with the id the store gave it) holding the records with
        ``seq <= at_seq``."""
        if at_seq is not None and (isinstance(at_seq, bool) or not isinstance(at_seq, int)):
            raise InvalidInputError(f"at_seq must be an int or None, got {at_seq!r}")
        parent = self.get_session(session_id)
        head = parent.last_seq
        point = head if at_seq is None else at_seq
        if not 0 <= point <= head:
            raise InvalidInputError(f"at_seq must be an int in 0..{head}, got {at_seq!r}")
        lineage = self.lineage(session_id)
        if point < head and self.splits_pair(lineage, point):
            raise InvalidInputError(f"at_seq {point} is between a tool call and its result")
        child = ModelSession(
            id=child_id,
            name=name if name is not None else parent.name,
            model=parent.model,
            source=parent.source,
            cron_job_id=parent.cron_job_id,
            system_prompt_override=parent.system_prompt_override,
            metadata=copy.deepcopy(parent.metadata),
            parent_id=None if detach else session_id,
            fork_seq=None if detach else point,
            last_seq=point,
        )
        if point == head:
            child.message_count = parent.message_count
            child.tokens = parent.tokens
            child.cost_total = parent.cost_total
        else:
            child.message_count = sum(1 for r in lineage if r.kind == "message" and r.seq <= point)
        if detach:
            child.own = [replace(r, session_id=child_id) for r in lineage if r.seq <= point]
        self.sessions[child_id] = child
        return child


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidInputError(f"key must be a non-empty string without NUL, got {key!r}")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"key must not contain lone surrogates: {key!r}") from exc
    if len(key) > MAX_KEY_CHARS or size > MAX_KEY_BYTES:
        raise InvalidInputError(f"key is too long: {len(key)} characters, {size} bytes")


def _check_expected(expected_seq: int | None) -> None:
    if expected_seq is not None and (
        isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0
    ):
        raise InvalidInputError(f"expected_seq must be a non-negative int, got {expected_seq!r}")


def _check_head(session: ModelSession, expected_seq: int | None) -> None:
    if expected_seq is not None and expected_seq != session.last_seq:
        raise SeqConflictError(session.id, expected_seq, session.last_seq)


# -- strategies ---------------------------------------------------------------------------

TEXTS = (
    "hello",
    "fix the failing build please",
    "  spaced   out\n words ",
    "",
    "ünïcödé ✓ 日本語",
    "nul \x00 inside",
    "lone \ud800 surrogate",
    "a long request " * 8,
)
CALL_IDS = ("call-1", "call-2", "call-3")
UUIDS = ("u-1", "u-2", "u-3", "u-4", "u-5", "u-6")
NAMES = ("alpha", "beta session", "ünï")
# Keys that differ only in case or spaces are different keys; the longest fits exactly.
GOOD_KEYS = ("chat-1", "Chat-1", "chat-1 ", " chat-1", "user:42/thread:7", "ünï", "😀" * 384)
# Empty, NUL, a lone surrogate, one character or byte too many.
BAD_KEYS = ("", "a\x00b", "lone \ud800", "k" * (MAX_KEY_CHARS + 1), "😀" * 385)
# How an append passes expected_seq: not at all, right, one behind, one ahead.
EXPECTED = ("none", "head", "none", "head", "stale", "ahead")

_texts = st.sampled_from(TEXTS)
# Mostly good keys, now and then a bad one.
_keys = st.sampled_from(GOOD_KEYS * 3 + BAD_KEYS)


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@st.composite
def wire_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A wire-shape message: user, assistant (with tool calls, thinking, usage) or tool
    result, sometimes with a uuid, an unknown field or an unknown block."""
    role = draw(st.sampled_from(("user", "assistant", "toolResult")))
    message: dict[str, Any] = {"role": role}
    if role == "user":
        text = draw(_texts)
        message["content"] = text if draw(st.booleans()) else [_text_block(text)]
    elif role == "assistant":
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(_texts)})
        blocks.append(_text_block(draw(_texts)))
        for call_id in draw(st.lists(st.sampled_from(CALL_IDS), max_size=2, unique=True)):
            blocks.append(
                {"type": "toolCall", "id": call_id, "name": "read", "arguments": {"path": "a.py"}}
            )
        if draw(st.integers(0, 9)) == 0:
            blocks.append({"type": "custom", "payload": [1, "two", None]})
        message["content"] = blocks
        if draw(st.booleans()):
            message["usage"] = {
                "input": draw(st.integers(0, 500)),
                "output": draw(st.integers(0, 500)),
                "cacheRead": draw(st.integers(0, 50)),
                "cacheWrite": draw(st.integers(0, 50)),
                # Quarter dollars add up exactly in binary floating point.
                "cost": {"total": draw(st.integers(0, 8)) / 4},
            }
    else:
        message["toolCallId"] = draw(st.sampled_from(CALL_IDS))
        message["toolName"] = "read"
        message["content"] = [_text_block(draw(_texts))]
        if draw(st.booleans()):
            message["isError"] = draw(st.booleans())
    uuid = draw(st.none() | st.sampled_from(UUIDS))
    if uuid is not None:
        message["uuid"] = uuid
    if draw(st.integers(0, 9)) == 0:
        message["x-trace"] = {"id": draw(st.integers(0, 99)), "tags": ["a", "b"]}
    return message


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An agent turn: a user message, an assistant message with tool calls, and results
    for some of the calls in any order, sometimes with a user message among them."""
    calls = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True))
    turn: list[dict[str, Any]] = []
    if draw(st.booleans()):
        turn.append({"role": "user", "content": draw(_texts)})
    turn.append(
        {
            "role": "assistant",
            "content": [
                {"type": "toolCall", "id": c, "name": "read", "arguments": {}} for c in calls
            ],
        }
    )
    answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
    results: list[dict[str, Any]] = [
        {"role": "toolResult", "toolCallId": c, "content": [_text_block(draw(_texts))]}
        for c in answered
    ]
    if results and draw(st.integers(0, 3)) == 0:
        results.insert(draw(st.integers(0, len(results) - 1)), {"role": "user", "content": "wait"})
    return turn + results


# -- the state machine ----------------------------------------------------------------------

StoreFactory = Callable[[], Awaitable[SessionStore]]


class ConformanceMachine(RuleBasedStateMachine):
    """The base of the classes :func:`conformance_machine` makes: counts over all the
    examples a class ran."""

    steps_run: ClassVar[int] = 0
    examples_run: ClassVar[int] = 0


def conformance_machine(
    store_factory: StoreFactory, *, max_sessions: int = 6, clean_up: bool = False
) -> type[ConformanceMachine]:
    """A hypothesis state machine that runs random operations on a store and on a
    :class:`ReferenceModel` side by side.

    Each example awaits ``store_factory()`` once, on an event loop of its own, for a
    store that sees no other sessions (a fresh database or a fresh namespace), and closes
    the store when the example ends. Operations: create (with a key, sometimes taken or
    bad), ``session_for_key`` (found, created, missing with ``create=False``), append
    (with and without ``expected_seq``, with uuids), compaction, prune, tombstone (of a
    clear too), pop, clear, fork (at a seq, detached), rename, delete (with and without
    cascade), records with filters. After every step, ``get_session``, ``context``,
    ``context_json`` (also with ``last=N`` for two N), ``records`` and ``list_sessions``
    agree with the model, and an operation the model refuses fails in the store with the
    same :class:`SessionDBError` subclass.

    Args:
        store_factory: an async callable returning an open, migrated store (or a wrapper
            with the same methods).
        max_sessions: no more sessions are created while this many exist.
        clean_up: delete the example's sessions before closing the store (for a
            database that outlives the run).

    The class counts the rules it runs in ``steps_run`` (over all its examples).

    >>> Machine = conformance_machine(my_store_factory)  # doctest: +SKIP
    >>> Machine.TestCase.settings = settings(max_examples=10, deadline=None)  # doctest: +SKIP
    >>> TestConformance = Machine.TestCase  # doctest: +SKIP
    """

    class SessionDBConformance(ConformanceMachine):
        def __init__(self) -> None:
            super().__init__()
            self.runner = asyncio.Runner()
            try:
                self.store: SessionStore = self.run(store_factory())
            except BaseException:
                self.runner.close()
                raise
            self.model = ReferenceModel()
            self.known: list[str] = []  # every id the example created, deleted ones too
            self.ghost = new_session_id()  # never created
            type(self).examples_run += 1

        def teardown(self) -> None:
            try:
                if clean_up:
                    roots = [s.id for s in self.model.sessions.values() if s.parent_id is None]
                    for sid in roots:
                        self.run(self.store.delete_session(sid, cascade=True))
                self.run(self.store.close())
            finally:
                self.runner.close()

        # -- helpers ----------------------------------------------------------------

        def run(self, awaitable: Awaitable[T]) -> T:
            async def wrapped() -> T:
                return await awaitable

            return self.runner.run(wrapped())

        def pick(self, index: int) -> str:
            """Mostly a live session; now and then a deleted one or one never created."""
            live = sorted(self.model.sessions)
            gone = [sid for sid in self.known if sid not in self.model.sessions]
            if live and index % 8 != 7:
                return live[index % len(live)]
            others = [*gone, self.ghost]
            return others[index % len(others)]

        def head(self, session_id: str) -> int:
            session = self.model.sessions.get(session_id)
            return session.last_seq if session is not None else 0

        def expected(self, session_id: str, mode: str) -> int | None:
            head = self.head(session_id)
            return {"none": None, "head": head, "stale": max(head - 1, 0), "ahead": head + 1}[mode]

        def both(
            self, model_call: Callable[[], T], got: Any, error: SessionDBError | None
        ) -> T | None:
            """The model's result of the call the store just made (``got`` or ``error``);
            ``None`` when both failed alike."""
            try:
                expected = model_call()
            except SessionDBError as exc:
                if error is None:
                    raise AssertionError(
                        f"the model raised {exc!r} but the store returned {got!r}"
                    ) from exc
                if type(error) is not type(exc):
                    raise AssertionError(
                        f"the store raised {error!r}, the model {exc!r}"
                    ) from error
                self.compare_errors(error, exc)
                return None
            if error is not None:
                raise AssertionError(
                    f"the store raised {error!r}, the model expected {expected!r}"
                ) from error
            return expected

        @staticmethod
        def compare_errors(got: SessionDBError, expected: SessionDBError) -> None:
            if isinstance(expected, SeqConflictError):
                assert isinstance(got, SeqConflictError)
                assert (got.expected_seq, got.actual_seq) == (
                    expected.expected_seq,
                    expected.actual_seq,
                ), f"{got!r} against {expected!r}"
            if isinstance(expected, HasChildrenError):
                assert isinstance(got, HasChildrenError)
                assert sorted(got.children) == sorted(expected.children), (
                    f"{got!r} against {expected!r}"
                )

        def call(self, awaitable: Awaitable[T]) -> tuple[T | None, SessionDBError | None]:
            try:
                return self.run(awaitable), None
            except SessionDBError as exc:
                return None, exc

        def step(self) -> None:
            type(self).steps_run += 1

        def new_id(self, got: SessionInfo | None) -> str:
            """The id for a session the model creates: the one the store returned, unless
            the model holds that id already (then the store returned an existing session
            where the model makes a new one, and their infos will differ)."""
            if got is not None and got.id not in self.model.sessions:
                return got.id
            return new_session_id()

        # -- rules ------------------------------------------------------------------

        @initialize(
            name=st.none() | st.sampled_from(NAMES),
            key=st.none() | st.sampled_from(GOOD_KEYS),
            messages=st.lists(wire_messages() | turns(), min_size=1, max_size=4).map(
                lambda parts: [m for p in parts for m in (p if isinstance(p, list) else [p])]
            ),
        )
        def first_session(
            self, name: str | None, key: str | None, messages: list[dict[str, Any]]
        ) -> None:
            """Every example starts with a session, often with some history."""
            self.create_session(name, None, False, None, None, key)
            self.append(0, messages, "none")

        @precondition(lambda self: len(self.model.sessions) < max_sessions)
        @rule(
            name=st.none() | st.sampled_from(NAMES),
            model=st.none() | st.just("model-x"),
            cron=st.booleans(),
            prompt=st.none() | st.just("be brief"),
            metadata=st.none() | st.just({"team": "infra", "n": [1, 2]}),
            key=st.none() | _keys,
        )
        def create_session(
            self,
            name: str | None,
            model: str | None,
            cron: bool,
            prompt: str | None,
            metadata: dict[str, Any] | None,
            key: str | None,
        ) -> None:
            self.step()
            source: Literal["interactive", "cron"] = "cron" if cron else "interactive"
            job = "job-7" if cron else None
            got, error = self.call(
                self.store.create_session(
                    name=name,
                    model=model,
                    source=source,
                    cron_job_id=job,
                    system_prompt_override=prompt,
                    metadata=metadata,
                    key=key,
                )
            )
            want = self.both(
                lambda: self.model.create_session(
                    self.new_id(got),
                    name=name,
                    model=model,
                    source=source,
                    cron_job_id=job,
                    system_prompt_override=prompt,
                    metadata=metadata,
                    key=key,
                ),
                got,
                error,
            )
            if want is not None:
                assert got is not None
                assert info_view(got) == want.info(), "create_session: returned info"
                self.known.append(got.id)

        @rule(
            key=_keys,
            create=st.sampled_from((True, True, False)),
            name=st.none() | st.sampled_from(NAMES),
            extra=st.sampled_from(("none", "cron", "cron", "job-without-cron", "typo")),
        )
        def session_for_key(self, key: str, create: bool, name: str | None, extra: str) -> None:
            self.step()
            # No new session beyond max_sessions; a lookup of a missing key then fails.
            create = create and len(self.model.sessions) < max_sessions
            # Arguments for creating: good ones, ones create_session refuses (unused,
            # so unchecked, when the key is found), or a misspelt name (always refused).
            kwargs: dict[str, Any] = {"name": name}
            if extra in ("cron", "job-without-cron"):
                kwargs["cron_job_id"] = "job-9"
                kwargs["source"] = "cron" if extra == "cron" else "interactive"
            elif extra == "typo":
                kwargs["nmae"] = name
            got, error = self.call(self.store.session_for_key(key, create, **kwargs))
            want = self.both(
                lambda: self.model.session_for_key(key, self.new_id(got), create=create, **kwargs),
                got,
                error,
            )
            if want is not None:
                assert got is not None
                assert info_view(got) == want.info(), f"session_for_key({key!r}): returned info"
                if got.id not in self.known:
                    self.known.append(got.id)

        @rule(
            index=st.integers(0, 63),
            messages=st.lists(wire_messages(), min_size=1, max_size=3) | turns() | st.just([]),
            mode=st.sampled_from(EXPECTED),
        )
        def append(self, index: int, messages: list[dict[str, Any]], mode: str) -> None:
            self.step()
            sid = self.pick(index)
            expected_seq = self.expected(sid, mode)
            sent = copy.deepcopy(messages)
            got, error = self.call(self.store.append(sid, sent, expected_seq=expected_seq))
            assert sent == messages, "append changed the messages it was given"
            want = self.both(lambda: self.model.append(sid, messages, expected_seq), got, error)
            if want is not None:
                assert got is not None
                assert [record_view(r) for r in got] == [r.view() for r in want], (
                    f"append({sid}): returned records"
                )

        @rule(
            index=st.integers(0, 63),
            choice=st.integers(0, 63),
            summary=_texts,
            mode=st.sampled_from(EXPECTED),
        )
        def append_compaction(self, index: int, choice: int, summary: str, mode: str) -> None:
            self.step()
            sid = self.pick(index)
            # Mostly a user message of the context (where compaction cuts), else any seq.
            seqs = []
            if sid in self.model.sessions:
                lineage = self.model.lineage(sid)
                messages = [r for r in lineage if r.kind == "message"]
                dead = self.model.tombstoned(lineage)
                first = self.model.first_kept(lineage)
                kept = [r for r in messages if r.seq >= first and r.seq not in dead]
                seqs += [r.seq for r in kept if r.role == "user"] * 4
                seqs += [r.seq for r in messages]
            seqs += [0, self.head(sid) + 1]
            first_kept = seqs[choice % len(seqs)]
            expected_seq = self.expected(sid, mode)
            files = (["a.py"], ["b.py"])
            got, error = self.call(
                self.store.append_compaction(
                    sid,
                    summary=summary,
                    first_kept_seq=first_kept,
                    tokens_before=1234,
                    read_files=files[0],
                    modified_files=files[1],
                    expected_seq=expected_seq,
                )
            )
            want = self.both(
                lambda: self.model.append_compaction(
                    sid,
                    summary=summary,
                    first_kept_seq=first_kept,
                    tokens_before=1234,
                    read_files=files[0],
                    modified_files=files[1],
                    expected_seq=expected_seq,
                ),
                got,
                error,
            )
            if want is not None:
                assert got is not None
                assert record_view(got) == want.view(), f"append_compaction({sid}): returned record"

        @rule(
            index=st.integers(0, 63),
            choice=st.integers(0, 255),
            reason=st.none() | st.just("wrong answer"),
        )
        def tombstone(self, index: int, choice: int, reason: str | None) -> None:
            self.step()
            sid = self.pick(index)
            # Mostly a record of the lineage, the latest first; else 0 or past the head.
            head = self.head(sid)
            compaction = None
            if sid in self.model.sessions:
                compaction = self.model.latest_compaction(self.model.lineage(sid))
            if compaction is not None and choice % 16 in (13, 14):
                seq = compaction.seq  # often a clear: undo it
            elif head and choice % 16 != 15:
                seq = head - choice % head
            else:
                seq = 0 if choice % 2 else head + 1
            got, error = self.call(self.store.tombstone(sid, seq, reason))
            want = self.both(lambda: self.model.tombstone(sid, seq, reason), got, error)
            if want is not None:
                assert got is not None
                assert [record_view(r) for r in got] == [r.view() for r in want], (
                    f"tombstone({sid}, {seq}): returned tombstones"
                )

        # One rule for pop and clear: a rule of its own with one argument would be drawn
        # far more often than the others (hypothesis favours the first rules, which it
        # sorts by their number of arguments).
        @rule(
            index=st.integers(0, 63),
            how=st.sampled_from(("pop", "pop", "pop with a reason", "clear", "clear and undo")),
            times=st.integers(1, 3),
        )
        def take_out(self, index: int, how: str, times: int) -> None:
            """Pop a few times (down through a summary, sometimes); or clear (a second
            time writes nothing), and maybe undo it by tombstoning the clear."""
            self.step()
            sid = self.pick(index)
            reason = "undo" if how == "pop with a reason" else None
            clearing = how.startswith("clear")
            for _ in range(min(times, 2) if clearing else times):
                if clearing:
                    got, error = self.call(self.store.clear(sid))
                    want = self.both(lambda: self.model.clear(sid), got, error)
                else:
                    got, error = self.call(self.store.pop(sid, reason))
                    want = self.both(lambda: self.model.pop(sid, reason), got, error)
                if error is not None:
                    return
                assert (None if got is None else record_view(got)) == (
                    None if want is None else want.view()
                ), f"{how}({sid}): returned record"
                if how == "clear and undo" and got is not None:
                    self.undo(sid, got.seq)

        def undo(self, sid: str, seq: int) -> None:
            """Tombstone the record ``seq`` (a clear), which must succeed."""
            undone, error = self.call(self.store.tombstone(sid, seq))
            tombstones = self.both(lambda: self.model.tombstone(sid, seq), undone, error)
            assert tombstones is not None and undone is not None
            assert [record_view(r) for r in undone] == [r.view() for r in tombstones], (
                f"tombstone({sid}, {seq}): returned tombstones"
            )

        @precondition(lambda self: len(self.model.sessions) < max_sessions)
        @rule(
            index=st.integers(0, 63),
            back=st.none() | st.integers(-1, 12),
            name=st.none() | st.just("fork"),
            detach=st.booleans(),
        )
        def fork(self, index: int, back: int | None, name: str | None, detach: bool) -> None:
            self.step()
            sid = self.pick(index)
            at_seq = None if back is None else self.head(sid) - back
            got, error = self.call(self.store.fork(sid, at_seq, name, detach=detach))
            child_id = got.id if got is not None else new_session_id()
            want = self.both(
                lambda: self.model.fork(sid, child_id, at_seq, name, detach=detach), got, error
            )
            if want is not None:
                assert got is not None
                assert info_view(got) == want.info(), f"fork({sid}, {at_seq}): returned info"
                self.known.append(got.id)

        @rule(
            index=st.integers(0, 63),
            choices=st.lists(st.integers(0, 63), min_size=1, max_size=2),
            marker=st.sampled_from(
                ("[pruned]", "[Old tool result content cleared]", "[pruned]", " ")
            ),
            mode=st.sampled_from(EXPECTED),
        )
        def append_prune(self, index: int, choices: list[int], marker: str, mode: str) -> None:
            self.step()
            sid = self.pick(index)
            # Mostly tool results of the context not pruned yet; else any message or
            # one past the head.
            seqs = []
            if sid in self.model.sessions:
                lineage = self.model.lineage(sid)
                dead = self.model.tombstoned(lineage)
                first, pruned = self.model.first_kept(lineage), self.model.prune_markers(lineage)
                seqs += [
                    r.seq
                    for r in lineage
                    if r.role == "toolResult"
                    and r.seq >= first
                    and r.seq not in dead
                    and r.seq not in pruned
                ] * 4
                seqs += [r.seq for r in lineage if r.kind == "message"]
            seqs.append(self.head(sid) + 1)
            chosen = [seqs[c % len(seqs)] for c in choices]
            expected_seq = self.expected(sid, mode)
            got, error = self.call(
                self.store.append_prune(
                    sid, chosen, marker=marker, tokens_freed=42, expected_seq=expected_seq
                )
            )
            want = self.both(
                lambda: self.model.append_prune(
                    sid, chosen, marker=marker, tokens_freed=42, expected_seq=expected_seq
                ),
                got,
                error,
            )
            if want is not None:
                assert got is not None
                assert record_view(got) == want.view(), f"append_prune({sid}): returned record"

        @rule(index=st.integers(0, 63), name=st.sampled_from(NAMES))
        def rename(self, index: int, name: str) -> None:
            self.step()
            sid = self.pick(index)
            got, error = self.call(self.store.rename(sid, name))
            want = self.both(lambda: self.model.rename(sid, name), got, error)
            if want is not None:
                assert got is not None
                assert info_view(got) == want.info(), f"rename({sid}): returned info"

        # Deletes empty the example quickly: only while two sessions or more exist.
        @precondition(lambda self: len(self.model.sessions) >= 2)
        @rule(index=st.integers(0, 63), cascade=st.booleans())
        def delete_session(self, index: int, cascade: bool) -> None:
            self.step()
            sid = self.pick(index)
            got, error = self.call(self.store.delete_session(sid, cascade=cascade))
            want = self.both(lambda: self.model.delete_session(sid, cascade=cascade), got, error)
            if want is not None:
                assert got is not None
                assert sorted(got) == sorted(want), f"delete_session({sid}): returned ids"

        @rule(
            index=st.integers(0, 63),
            include_tombstoned=st.booleans(),
            include_superseded=st.booleans(),
            kinds=st.none() | st.lists(st.sampled_from(KINDS), unique=True),
            from_seq=st.none() | st.integers(0, 12),
            to_seq=st.none() | st.integers(0, 24),
        )
        def read_records(
            self,
            index: int,
            include_tombstoned: bool,
            include_superseded: bool,
            kinds: list[str] | None,
            from_seq: int | None,
            to_seq: int | None,
        ) -> None:
            self.step()
            sid = self.pick(index)
            options: dict[str, Any] = {
                "include_tombstoned": include_tombstoned,
                "include_superseded": include_superseded,
                "kinds": kinds,
                "from_seq": from_seq,
                "to_seq": to_seq,
            }
            got, error = self.call(self.store.records(sid, **options))
            want = self.both(lambda: self.model.records(sid, **options), got, error)
            if want is not None:
                assert got is not None
                assert [record_view(r) for r in got] == [r.view() for r in want], (
                    f"records({sid}, {options}): returned records"
                )

        # -- after every step -------------------------------------------------------

        @invariant()
        def store_agrees_with_model(self) -> None:
            for sid, session in self.model.sessions.items():
                info = self.run(self.store.get_session(sid))
                assert info_view(info) == session.info(), f"get_session({sid})"
                assert info.namespace == self.store.namespace
                want = self.model.context(sid)
                context = [m.to_wire() for m in self.run(self.store.context(sid))]
                assert context == want, f"context({sid})"
                assert json.loads(self.run(self.store.context_json(sid))) == want, (
                    f"context_json({sid})"
                )
                for last in self.tails(len(want)):
                    tail = want[max(0, len(want) - last) :]
                    context = [m.to_wire() for m in self.run(self.store.context(sid, last=last))]
                    assert context == tail, f"context({sid}, last={last})"
                    got_json = self.run(self.store.context_json(sid, last=last))
                    assert json.loads(got_json) == tail, f"context_json({sid}, last={last})"
                records = [record_view(r) for r in self.run(self.store.records(sid))]
                assert records == [r.view() for r in self.model.records(sid)], f"records({sid})"
            for sid in [*self.known, self.ghost]:
                if sid not in self.model.sessions:
                    _, error = self.call(self.store.get_session(sid))
                    assert isinstance(error, SessionNotFoundError), f"get_session({sid})"
            page = self.run(self.store.list_sessions(limit=1000))
            listed = {s.id for s in page.items} & {*self.known, self.ghost}
            assert listed == set(self.model.sessions), "list_sessions"
            for info in page.items:
                if info.id in self.model.sessions:
                    want_info = self.model.sessions[info.id].info()
                    assert info_view(info) == want_info, f"list_sessions: {info.id}"

        def tails(self, length: int) -> tuple[int, int]:
            """Two ``last`` values to check this step: one of 0..2, and one at the
            length of the context (one less drops a summary, one more is everything)."""
            step = type(self).steps_run
            return step % 3, max(0, length + step % 3 - 1)

    return SessionDBConformance


def run_conformance(
    url: str,
    *,
    steps: int = 200,
    steps_per_example: int = 25,
    migrate: bool = True,
    namespace_prefix: str = "sessiondb-conformance",
    clean_up: bool = True,
) -> int:
    """Run the conformance machine against the database at ``url`` until at least
    ``steps`` operations have run; returns how many ran. Each example works in a fresh
    namespace (``:memory:`` gives each example a fresh database).

    Args:
        url: as :meth:`SessionStore.open` takes it.
        steps: the fewest operations to run, over all examples.
        steps_per_example: the most operations in one example.
        migrate: upgrade the schema to head first (every store, for ``:memory:``).
        namespace_prefix: examples use namespaces ``{prefix}-{random hex}``.
        clean_up: delete each example's sessions when it ends.

    Raises:
        AssertionError: the store disagreed with the model; hypothesis prints the
            shortest sequence of operations it found that shows it.

    >>> run_conformance(":memory:", steps=50)  # doctest: +SKIP
    50
    """
    memory = url == ":memory:" or url.rstrip("/") in ("sqlite:", "sqlite:///:memory:")
    if migrate and not memory:

        async def upgrade() -> None:
            async with SessionStore.open(url) as store:
                await store.migrate()

        asyncio.run(upgrade())

    async def fresh_store() -> SessionStore:
        namespace = f"{namespace_prefix}-{uuidlib.uuid4().hex[:12]}"
        store = await SessionStore.connect(url, namespace)
        if memory and migrate:
            await store.migrate()
        return store

    machine = conformance_machine(fresh_store, clean_up=clean_up)
    while machine.steps_run < steps:
        missing = steps - machine.steps_run
        # An example runs up to steps_per_example steps (most run about that many).
        examples = max(1, -(-missing // max(1, steps_per_example)))
        run_state_machine_as_test(
            machine,
            settings=Settings(
                max_examples=examples,
                stateful_step_count=steps_per_example,
                deadline=None,
                database=None,
            ),
        )
    return machine.steps_run


__all__ = [
    "SUMMARY_PREFIX",
    "SUMMARY_SUFFIX",
    "ConformanceMachine",
    "ModelRecord",
    "ModelSession",
    "ReferenceModel",
    "StoreFactory",
    "conformance_machine",
    "info_view",
    "record_view",
    "run_conformance",
    "turns",
    "wire_messages",
]
