"""The conformance state machine: random operations on a store and on a
:class:`~sessiondb.testing.ReferenceModel` side by side.

:class:`ConformanceMachine` holds every rule and the invariant; a subclass names the
store to test through class attributes::

    class MyStoreConformance(ConformanceMachine):
        store_factory = staticmethod(fresh_store)  # async () -> an open, migrated store
        clean_up = True  # the database outlives the run

    TestMyStore = MyStoreConformance.TestCase

:func:`conformance_machine` makes such a subclass from a factory. Each rule makes one
call on the store and the same call on the model, then checks that both failed with the
same error or returned the same thing (the ``agree_*`` functions); after every step
:meth:`ConformanceMachine.store_agrees_with_model` compares everything the store shows.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ..errors import (
    ConfigurationError,
    HasChildrenError,
    SeqConflictError,
    SessionDBError,
    SessionNotFoundError,
)
from ..ids import new_session_id
from ..models import Record, SessionInfo
from ..store import SessionStore
from .model import KINDS, ReferenceModel
from .strategies import EXPECTED, GOOD_KEYS, NAMES, histories, keys, texts, turns, wire_messages
from .views import ModelRecord, ModelSession, info_view, record_view

T = TypeVar("T")

StoreFactory = Callable[[], Awaitable[SessionStore]]
# What pop or clear gave on both sides: the store's record or error, the model's record.
TakenOut = tuple[Record | None, SessionDBError | None, ModelRecord | None]


# -- what "agree" means -------------------------------------------------------------------


def agree_errors(got: SessionDBError, expected: SessionDBError) -> None:
    """A store's error against the model's, of the same class: the fields that matter."""
    if isinstance(expected, SeqConflictError):
        assert isinstance(got, SeqConflictError)
        assert (got.expected_seq, got.actual_seq) == (
            expected.expected_seq,
            expected.actual_seq,
        ), f"{got!r} against {expected!r}"
    if isinstance(expected, HasChildrenError):
        assert isinstance(got, HasChildrenError)
        assert sorted(got.children) == sorted(expected.children), f"{got!r} against {expected!r}"


def agree_info(got: SessionInfo | None, want: ModelSession, what: str) -> None:
    assert got is not None
    assert info_view(got) == want.info(), what


def agree_record(got: Record | None, want: ModelRecord, what: str) -> None:
    assert got is not None
    assert record_view(got) == want.view(), what


def agree_records(got: Sequence[Record] | None, want: Sequence[ModelRecord], what: str) -> None:
    assert got is not None
    assert [record_view(r) for r in got] == [r.view() for r in want], what


# -- how a rule picks its target ----------------------------------------------------------


def compaction_cuts(model: ReferenceModel, sid: str, head: int) -> list[int]:
    """Candidates for ``first_kept_seq``: mostly a user message of the context (where
    compaction cuts), else any message's seq, 0 or one past the head."""
    seqs = []
    if sid in model.sessions:
        lineage = model.lineage(sid)
        messages = [r for r in lineage if r.kind == "message"]
        dead = model.tombstoned(lineage)
        first = model.first_kept(lineage)
        kept = [r for r in messages if r.seq >= first and r.seq not in dead]
        seqs += [r.seq for r in kept if r.role == "user"] * 4
        seqs += [r.seq for r in messages]
    seqs += [0, head + 1]
    return seqs


def tombstone_target(model: ReferenceModel, sid: str, head: int, choice: int) -> int:
    """Mostly a record of the lineage, the latest first; often the compaction in force
    (a clear: undo it); else 0 or past the head."""
    compaction = None
    if sid in model.sessions:
        compaction = model.latest_compaction(model.lineage(sid))
    if compaction is not None and choice % 16 in (13, 14):
        return compaction.seq
    if head and choice % 16 != 15:
        return head - choice % head
    return 0 if choice % 2 else head + 1


def prune_candidates(model: ReferenceModel, sid: str, head: int) -> list[int]:
    """Mostly tool results of the context not pruned yet; else any message or one past
    the head."""
    seqs = []
    if sid in model.sessions:
        lineage = model.lineage(sid)
        dead = model.tombstoned(lineage)
        first, pruned = model.first_kept(lineage), model.prune_markers(lineage)
        seqs += [
            r.seq
            for r in lineage
            if r.role == "toolResult"
            and r.seq >= first
            and r.seq not in dead
            and r.seq not in pruned
        ] * 4
        seqs += [r.seq for r in lineage if r.kind == "message"]
    seqs.append(head + 1)
    return seqs


def key_create_args(extra: str, name: str | None) -> dict[str, Any]:
    """Arguments for ``session_for_key`` to create with: good ones, ones create_session
    refuses (unused, so unchecked, when the key is found), or a misspelt name (always
    refused)."""
    kwargs: dict[str, Any] = {"name": name}
    if extra in ("cron", "job-without-cron"):
        kwargs["cron_job_id"] = "job-9"
        kwargs["source"] = "cron" if extra == "cron" else "interactive"
    elif extra == "typo":
        kwargs["nmae"] = name
    return kwargs


# -- the machine ----------------------------------------------------------------------------


class ConformanceMachine(RuleBasedStateMachine):
    """Random operations on a store and on a :class:`ReferenceModel` side by side.

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

    A subclass sets:

    - ``store_factory``: an async callable returning an open, migrated store (or a
      wrapper with the same methods); wrap a function in ``staticmethod``.
    - ``max_sessions``: no more sessions are created while this many exist (6).
    - ``clean_up``: delete the example's sessions before closing the store, for a
      database that outlives the run (False).

    A class counts the rules it runs in ``steps_run`` and its examples in
    ``examples_run`` (over all its examples).
    """

    store_factory: ClassVar[StoreFactory | None] = None
    max_sessions: ClassVar[int] = 6
    clean_up: ClassVar[bool] = False
    steps_run: ClassVar[int] = 0
    examples_run: ClassVar[int] = 0

    def __init__(self) -> None:
        factory = type(self).store_factory
        if factory is None:
            raise ConfigurationError(
                f"{type(self).__name__} has no store_factory: subclass ConformanceMachine "
                "and set it, or call conformance_machine(store_factory)"
            )
        super().__init__()
        self.runner = asyncio.Runner()
        try:
            self.store: SessionStore = self.run(factory())
        except BaseException:
            self.runner.close()
            raise
        self.model = ReferenceModel()
        self.known: list[str] = []  # every id the example created, deleted ones too
        self.ghost = new_session_id()  # never created
        type(self).examples_run += 1

    def teardown(self) -> None:
        try:
            if self.clean_up:
                roots = [s.id for s in self.model.sessions.values() if s.parent_id is None]
                for sid in roots:
                    self.run(self.store.delete_session(sid, cascade=True))
            self.run(self.store.close())
        finally:
            self.runner.close()

    # -- helpers --------------------------------------------------------------------

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

    def both(self, model_call: Callable[[], T], got: Any, error: SessionDBError | None) -> T | None:
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
                raise AssertionError(f"the store raised {error!r}, the model {exc!r}") from error
            agree_errors(error, exc)
            return None
        if error is not None:
            raise AssertionError(
                f"the store raised {error!r}, the model expected {expected!r}"
            ) from error
        return expected

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

    def room(self) -> bool:
        """Whether another session may be created."""
        return len(self.model.sessions) < self.max_sessions

    # -- rules ----------------------------------------------------------------------

    @initialize(
        name=st.none() | st.sampled_from(NAMES),
        key=st.none() | st.sampled_from(GOOD_KEYS),
        messages=histories(),
    )
    def first_session(
        self, name: str | None, key: str | None, messages: list[dict[str, Any]]
    ) -> None:
        """Every example starts with a session, often with some history."""
        self.create_session(name, None, False, None, None, key)
        self.append(0, messages, "none")

    @precondition(lambda self: self.room())
    @rule(
        name=st.none() | st.sampled_from(NAMES),
        model=st.none() | st.just("model-x"),
        cron=st.booleans(),
        prompt=st.none() | st.just("be brief"),
        metadata=st.none() | st.just({"team": "infra", "n": [1, 2]}),
        key=st.none() | keys(),
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
        source = "cron" if cron else "interactive"
        job = "job-7" if cron else None
        fields: dict[str, Any] = {
            "name": name,
            "model": model,
            "source": source,
            "cron_job_id": job,
            "system_prompt_override": prompt,
            "metadata": metadata,
            "key": key,
        }
        got, error = self.call(self.store.create_session(**fields))
        want = self.both(lambda: self.model.create_session(self.new_id(got), **fields), got, error)
        if want is not None:
            agree_info(got, want, "create_session: returned info")
            assert got is not None
            self.known.append(got.id)

    @rule(
        key=keys(),
        create=st.sampled_from((True, True, False)),
        name=st.none() | st.sampled_from(NAMES),
        extra=st.sampled_from(("none", "cron", "cron", "job-without-cron", "typo")),
    )
    def session_for_key(self, key: str, create: bool, name: str | None, extra: str) -> None:
        self.step()
        # No new session beyond max_sessions; a lookup of a missing key then fails.
        create = create and self.room()
        kwargs = key_create_args(extra, name)
        got, error = self.call(self.store.session_for_key(key, create, **kwargs))
        want = self.both(
            lambda: self.model.session_for_key(key, self.new_id(got), create=create, **kwargs),
            got,
            error,
        )
        if want is not None:
            agree_info(got, want, f"session_for_key({key!r}): returned info")
            assert got is not None
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
            agree_records(got, want, f"append({sid}): returned records")

    @rule(
        index=st.integers(0, 63),
        choice=st.integers(0, 63),
        summary=texts(),
        mode=st.sampled_from(EXPECTED),
    )
    def append_compaction(self, index: int, choice: int, summary: str, mode: str) -> None:
        self.step()
        sid = self.pick(index)
        seqs = compaction_cuts(self.model, sid, self.head(sid))
        first_kept = seqs[choice % len(seqs)]
        expected_seq = self.expected(sid, mode)
        fields: dict[str, Any] = {
            "summary": summary,
            "first_kept_seq": first_kept,
            "tokens_before": 1234,
            "read_files": ["a.py"],
            "modified_files": ["b.py"],
            "expected_seq": expected_seq,
        }
        got, error = self.call(self.store.append_compaction(sid, **fields))
        want = self.both(lambda: self.model.append_compaction(sid, **fields), got, error)
        if want is not None:
            agree_record(got, want, f"append_compaction({sid}): returned record")

    @rule(
        index=st.integers(0, 63),
        choice=st.integers(0, 255),
        reason=st.none() | st.just("wrong answer"),
    )
    def tombstone(self, index: int, choice: int, reason: str | None) -> None:
        self.step()
        sid = self.pick(index)
        seq = tombstone_target(self.model, sid, self.head(sid), choice)
        got, error = self.call(self.store.tombstone(sid, seq, reason))
        want = self.both(lambda: self.model.tombstone(sid, seq, reason), got, error)
        if want is not None:
            agree_records(got, want, f"tombstone({sid}, {seq}): returned tombstones")

    # One rule for pop and clear: a rule of its own with one argument would be drawn far
    # more often than the others (hypothesis favours the first rules, which it sorts by
    # their number of arguments).
    @rule(
        index=st.integers(0, 63),
        how=st.sampled_from(("pop", "pop", "pop with a reason", "clear", "clear and undo")),
        times=st.integers(1, 3),
    )
    def take_out(self, index: int, how: str, times: int) -> None:
        """Pop a few times (down through a summary, sometimes); or clear (a second time
        writes nothing), and maybe undo it by tombstoning the clear."""
        self.step()
        sid = self.pick(index)
        clearing = how.startswith("clear")
        for _ in range(min(times, 2) if clearing else times):
            got, error, want = self.clear_both(sid) if clearing else self.pop_both(sid, how)
            if error is not None:
                return
            assert (None if got is None else record_view(got)) == (
                None if want is None else want.view()
            ), f"{how}({sid}): returned record"
            if how == "clear and undo" and got is not None:
                self.undo(sid, got.seq)

    def pop_both(self, sid: str, how: str) -> TakenOut:
        """Pop on both sides (with a reason when ``how`` says so)."""
        reason = "undo" if how == "pop with a reason" else None
        got, error = self.call(self.store.pop(sid, reason))
        return got, error, self.both(lambda: self.model.pop(sid, reason), got, error)

    def clear_both(self, sid: str) -> TakenOut:
        """Clear on both sides."""
        got, error = self.call(self.store.clear(sid))
        return got, error, self.both(lambda: self.model.clear(sid), got, error)

    def undo(self, sid: str, seq: int) -> None:
        """Tombstone the record ``seq`` (a clear), which must succeed."""
        undone, error = self.call(self.store.tombstone(sid, seq))
        tombstones = self.both(lambda: self.model.tombstone(sid, seq), undone, error)
        assert tombstones is not None
        agree_records(undone, tombstones, f"tombstone({sid}, {seq}): returned tombstones")

    @precondition(lambda self: self.room())
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
            agree_info(got, want, f"fork({sid}, {at_seq}): returned info")
            assert got is not None
            self.known.append(got.id)

    @rule(
        index=st.integers(0, 63),
        choices=st.lists(st.integers(0, 63), min_size=1, max_size=2),
        marker=st.sampled_from(("[pruned]", "[Old tool result content cleared]", "[pruned]", " ")),
        mode=st.sampled_from(EXPECTED),
    )
    def append_prune(self, index: int, choices: list[int], marker: str, mode: str) -> None:
        self.step()
        sid = self.pick(index)
        seqs = prune_candidates(self.model, sid, self.head(sid))
        chosen = [seqs[c % len(seqs)] for c in choices]
        expected_seq = self.expected(sid, mode)
        fields: dict[str, Any] = {
            "marker": marker,
            "tokens_freed": 42,
            "expected_seq": expected_seq,
        }
        got, error = self.call(self.store.append_prune(sid, chosen, **fields))
        want = self.both(lambda: self.model.append_prune(sid, chosen, **fields), got, error)
        if want is not None:
            agree_record(got, want, f"append_prune({sid}): returned record")

    @rule(index=st.integers(0, 63), name=st.sampled_from(NAMES))
    def rename(self, index: int, name: str) -> None:
        self.step()
        sid = self.pick(index)
        got, error = self.call(self.store.rename(sid, name))
        want = self.both(lambda: self.model.rename(sid, name), got, error)
        if want is not None:
            agree_info(got, want, f"rename({sid}): returned info")

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
            agree_records(got, want, f"records({sid}, {options}): returned records")

    # -- after every step -----------------------------------------------------------

    @invariant()
    def store_agrees_with_model(self) -> None:
        for sid, session in self.model.sessions.items():
            self.check_session(sid, session)
        self.check_gone()
        self.check_listing()

    def check_session(self, sid: str, session: ModelSession) -> None:
        """``get_session``, ``context``, ``context_json`` (whole and two tails) and
        ``records`` of one live session."""
        info = self.run(self.store.get_session(sid))
        assert info_view(info) == session.info(), f"get_session({sid})"
        assert info.namespace == self.store.namespace
        want = self.model.context(sid)
        context = [m.to_wire() for m in self.run(self.store.context(sid))]
        assert context == want, f"context({sid})"
        assert json.loads(self.run(self.store.context_json(sid))) == want, f"context_json({sid})"
        for last in self.tails(len(want)):
            self.check_tail(sid, last, want[max(0, len(want) - last) :])
        records = [record_view(r) for r in self.run(self.store.records(sid))]
        assert records == [r.view() for r in self.model.records(sid)], f"records({sid})"

    def check_tail(self, sid: str, last: int, tail: list[dict[str, Any]]) -> None:
        context = [m.to_wire() for m in self.run(self.store.context(sid, last=last))]
        assert context == tail, f"context({sid}, last={last})"
        got_json = self.run(self.store.context_json(sid, last=last))
        assert json.loads(got_json) == tail, f"context_json({sid}, last={last})"

    def check_gone(self) -> None:
        """Every deleted session, and one never created, is not found."""
        for sid in [*self.known, self.ghost]:
            if sid not in self.model.sessions:
                _, error = self.call(self.store.get_session(sid))
                assert isinstance(error, SessionNotFoundError), f"get_session({sid})"

    def check_listing(self) -> None:
        """``list_sessions`` lists the live sessions, as ``get_session`` shows them."""
        page = self.run(self.store.list_sessions(limit=1000))
        listed = {s.id for s in page.items} & {*self.known, self.ghost}
        assert listed == set(self.model.sessions), "list_sessions"
        for info in page.items:
            if info.id in self.model.sessions:
                want_info = self.model.sessions[info.id].info()
                assert info_view(info) == want_info, f"list_sessions: {info.id}"

    def tails(self, length: int) -> tuple[int, int]:
        """Two ``last`` values to check this step: one of 0..2, and one at the length of
        the context (one less drops a summary, one more is everything)."""
        step = type(self).steps_run
        return step % 3, max(0, length + step % 3 - 1)


def conformance_machine(
    store_factory: StoreFactory, *, max_sessions: int = 6, clean_up: bool = False
) -> type[ConformanceMachine]:
    """A subclass of :class:`ConformanceMachine` (see there for what it runs and checks)
    for the stores ``store_factory`` makes.

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
    attributes = {
        "store_factory": staticmethod(store_factory),
        "max_sessions": max_sessions,
        "clean_up": clean_up,
        "__module__": __name__,
    }
    return type("SessionDBConformance", (ConformanceMachine,), attributes)
