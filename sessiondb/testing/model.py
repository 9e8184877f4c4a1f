"""The reference model: sessiondb's semantics as plain Python over wire-shape dicts, no
database, no I/O. :class:`ReferenceModel`'s docstrings state the rules it encodes; a
store must hold what the model holds after every operation."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import (
    ConflictError,
    HasChildrenError,
    InvalidInputError,
    RecordNotFoundError,
    SeqConflictError,
    SessionNotFoundError,
)
from ..kinds import WRITTEN_KINDS
from ..naming import derive_name
from .views import ModelRecord, ModelSession, Tokens

# The spec's markers around a compaction summary (§7.4 step 3a), written out here on
# purpose rather than imported: the model states the rule, the store must follow it.
SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n<summary>\n"
)
SUMMARY_SUFFIX = "\n</summary>"

KINDS = WRITTEN_KINDS

# A key's limits (characters, and bytes of UTF-8), written out for the same reason.
MAX_KEY_CHARS = 512
MAX_KEY_BYTES = 1536
# What session_for_key passes on when it creates a session.
CREATE_ARGS = frozenset(
    ("name", "model", "source", "cron_job_id", "system_prompt_override", "metadata")
)


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
        if kind == "message" and payloads:
            self._count_messages(session, payloads)
        return written

    @staticmethod
    def _count_messages(session: ModelSession, payloads: Sequence[dict[str, Any]]) -> None:
        """Add new messages to the head's counters; name the session after the first user
        message if it has no name."""
        session.message_count += len(payloads)
        for payload in payloads:
            usage = payload.get("usage") or {}
            t = session.tokens
            session.tokens = Tokens(
                t.input + usage.get("input", 0),
                t.output + usage.get("output", 0),
                t.cache_read + usage.get("cacheRead", 0),
                t.cache_write + usage.get("cacheWrite", 0),
            )
            cost = (usage.get("cost") or {}).get("total", 0.0)
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                session.cost_total += float(cost)
        first_user = next((p for p in payloads if p["role"] == "user"), None)
        if session.name is None and first_user is not None:
            text = "\n".join(b["text"] for b in first_user["content"] if b.get("type") == "text")
            session.name = derive_name(text)

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
        _check_prune_args(seqs, marker, tokens_freed)
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


def _check_prune_args(seqs: Sequence[int], marker: str, tokens_freed: int) -> None:
    if not seqs or any(isinstance(q, bool) or not isinstance(q, int) or q < 1 for q in seqs):
        raise InvalidInputError(f"seqs must be a non-empty list of positive ints: {seqs!r}")
    if len(set(seqs)) != len(seqs):
        raise InvalidInputError("the same seq appears twice in seqs")
    if not isinstance(marker, str) or not marker.strip():
        raise InvalidInputError(f"marker must be a non-empty string, got {marker!r}")
    if isinstance(tokens_freed, bool) or not isinstance(tokens_freed, int) or tokens_freed < 0:
        raise InvalidInputError(f"tokens_freed must be a non-negative int: {tokens_freed!r}")


def _check_head(session: ModelSession, expected_seq: int | None) -> None:
    if expected_seq is not None and expected_seq != session.last_seq:
        raise SeqConflictError(session.id, expected_seq, session.last_seq)
