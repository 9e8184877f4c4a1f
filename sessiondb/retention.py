"""Retention: delete whole sessions that have been idle longer than a cut-off.

Not to be confused with the *prune overlay* (``SessionStore.append_prune``, record kind
``prune``), which hides old tool outputs inside a live session and deletes nothing.

A session goes when its last message (or, without messages, its creation) is older than
the cut-off, unless a fork below it, directly or through a chain, is still active: a
fork reads its ancestors' records, so its lineage stays. A session whose turn is held or
waited for stays too. Work goes in keyset batches of candidates, each batch one short
transaction that re-checks, under lock on Postgres, what it deletes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .backends import IntegrityViolation, Transaction
from .config import check_namespace
from .errors import ConfigurationError, ConflictError, InvalidInputError
from .lazy import lazy_modules
from .rows import utc
from .validation import column_text

if TYPE_CHECKING:
    from . import statements as q
    from .core import Core
else:  # SQLAlchemy's: imported when first used (sessiondb.shapes says why)
    (q,) = lazy_modules("statements")

DEFAULT_BATCH = 100
MAX_BATCH = 10_000
# A batch whose delete collided with a concurrent fork is planned again this many times.
ATTEMPTS = 3

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_age(text: object) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or ``1d12h``) as a timedelta.

    Raises:
        InvalidInputError: anything else, or not a positive age.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"an age must be a string like 30d, got {text!r}")
    spec = text.strip().lower()
    parts = _AGE.findall(spec)
    if not spec or "".join(n + u for n, u in parts) != spec:
        raise InvalidInputError(
            f"cannot read the age {text!r}: use a number and a unit, e.g. 30d, 12h, 90m, 45s, 2w"
        )
    try:
        age = sum((timedelta(**{_UNITS[u]: float(n)}) for n, u in parts), timedelta())
    except OverflowError:
        raise InvalidInputError(f"the age {text!r} is too long") from None
    if age <= timedelta(0):
        raise InvalidInputError(f"the age must be more than zero, got {text!r}")
    return age


@dataclass
class RetentionReport:
    """What :meth:`SessionStore.expire` deleted (or, in a dry run, would delete)."""

    namespace: str
    cutoff: datetime
    dry_run: bool
    #: Sessions deleted (would be, in a dry run), each fork before its parent.
    deleted: list[str] = field(default_factory=list)
    #: Idle sessions kept because a fork below them is still active.
    kept_for_forks: list[str] = field(default_factory=list)
    #: Idle sessions kept because a turn is held or awaited on them or on a fork below.
    kept_busy: list[str] = field(default_factory=list)
    #: Transactions that deleted (or, in a dry run, reads that planned) a batch.
    batches: int = 0

    @property
    def deleted_count(self) -> int:
        return len(self.deleted)

    @property
    def kept_count(self) -> int:
        return len(self.kept_for_forks) + len(self.kept_busy)


def check_args(
    older_than: object, dry_run: object, namespace: object, batch_size: object, own: str
) -> tuple[datetime, bool, int]:
    """(cutoff, dry_run, batch_size), checked; ``namespace`` may only be ``None`` or the
    store's own (``own``).

    Raises:
        InvalidInputError: a bad argument, or another namespace than the store's.
    """
    if not isinstance(older_than, timedelta):
        raise InvalidInputError(
            f"older_than must be a datetime.timedelta, got {type(older_than).__name__}"
        )
    if older_than <= timedelta(0):
        raise InvalidInputError(f"older_than must be more than zero, got {older_than}")
    try:
        cutoff = datetime.now(UTC) - older_than
    except OverflowError:
        raise InvalidInputError(f"older_than reaches before year 1: {older_than}") from None
    if not isinstance(dry_run, bool):
        raise InvalidInputError(f"dry_run must be True or False, got {dry_run!r}")
    if namespace is not None:
        try:
            ns = check_namespace(namespace)
        except ConfigurationError as exc:
            raise InvalidInputError(str(exc)) from None
        column_text(ns, "namespace")  # no lone surrogates either
        if ns != own:
            # SECURITY.md: a store acts only inside its namespace. Another tenant's
            # retention is an operator's act, with a store of that namespace.
            raise InvalidInputError(
                f"a store expires only its own namespace ({own!r}); to expire another, "
                "open a store on it (sessiondb --namespace NAME expire …)"
            )
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= MAX_BATCH
    ):
        raise InvalidInputError(f"batch_size must be an int in 1..{MAX_BATCH}, got {batch_size!r}")
    return cutoff, dry_run, batch_size


@dataclass
class _Plan:
    delete: list[str] = field(default_factory=list)
    for_forks: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)


def _plan(rows: list[Any], skip: set[str]) -> _Plan:
    """Decide per root from :func:`statements.expiry_plan`'s rows (ordered by root, then
    deepest first)."""
    trees: dict[str, list[Any]] = {}
    for r in rows:
        trees.setdefault(r["root"], []).append(r)
    plan = _Plan()
    for root, members in trees.items():
        if root in skip:
            continue
        me = next(m for m in members if m["depth"] == 0)
        if me["live"]:
            continue  # written to since it was listed: no longer idle
        if any(m["live"] for m in members):
            plan.for_forks.append(root)
        elif any(m["busy"] for m in members):
            plan.busy.append(root)
        else:
            plan.delete.extend(m["id"] for m in members if m["id"] not in skip)
    # A session can be in two deleted trees of one batch (a root and its fork, both
    # idle): once is enough, at its first (deepest) place.
    plan.delete = list(dict.fromkeys(plan.delete))
    return plan


async def expire(
    core: Core,
    cutoff: datetime,
    *,
    dry_run: bool,
    batch_size: int,
) -> RetentionReport:
    """See :meth:`SessionStore.expire`: in the core's namespace, the only one it acts in."""
    namespace = core.namespace
    report = RetentionReport(namespace=namespace, cutoff=cutoff, dry_run=dry_run)
    backend, flavour = core.primary, core.flavour  # what is there now, not a replica's view
    done: set[str] = set()  # deleted, or would be: not planned twice
    after: tuple[datetime, str] | None = None
    while True:
        bound = q.expiry_candidates(namespace, cutoff, after=after, limit=batch_size)
        found = await backend.fetch(bound)
        if not found:
            break
        after = (utc(found[-1]["last_message_at"]), found[-1]["id"])
        ids = [r["id"] for r in found if r["id"] not in done]
        if not ids:
            continue
        if dry_run:
            look = q.expiry_plan(ids, namespace, cutoff, flavour, lock=False)
            plan = _plan(await backend.fetch(look), done)
        else:
            look = q.expiry_plan(ids, namespace, cutoff, flavour, lock=True)
            plan = await _delete_batch(core, look, done)
        report.batches += 1
        report.deleted.extend(plan.delete)
        report.kept_for_forks.extend(plan.for_forks)
        report.kept_busy.extend(plan.busy)
        done.update(plan.delete)
    return report


async def _delete_batch(core: Core, plan_bound: q.Bound, done: set[str]) -> _Plan:
    flavour = core.flavour

    async def unit(tx: Transaction) -> _Plan:
        plan = _plan(await tx.fetch(plan_bound), done)
        if plan.delete:
            for bound in q.delete_sessions(plan.delete, flavour):
                await tx.fetch(bound)
        return plan

    for _attempt in range(ATTEMPTS):
        try:
            return await core.transact(unit)
        except IntegrityViolation:
            continue  # a fork was created under a session meanwhile: plan again
    raise ConflictError("retention: sessions kept being forked while being deleted; try again")
