"""Key rotation of an encrypted namespace (``SessionStore.rotate_keys``): re-wrap its data
keys under the provider's current master key and, asked to, move every row to a new data
key, bound to its structure (sessiondb.crypto)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from . import crypto
from .backends.base import Backend, retrying
from .errors import EncryptionError
from .lazy import lazy_modules
from .sealing import STRUCTURE, SealedBackend

if TYPE_CHECKING:  # imported when first used: SQLAlchemy's (start-up rule in sessiondb/cli.py)
    from . import statements as q
else:
    (q,) = lazy_modules("statements")


@dataclass(frozen=True)
class RotationReport:
    """What :func:`rotate` did."""

    #: Data keys now wrapped by the provider's current master key that were not before.
    rewrapped: int
    #: The data key that seals new values.
    current_version: int
    #: The master key every data key of the namespace is wrapped by now.
    master_key_id: str
    #: Records and sessions moved to the current data key by this run.
    records_resealed: int = 0
    sessions_resealed: int = 0


async def rotate(backend: Backend, *, reencrypt: bool, batch: int = 500) -> RotationReport:
    """Re-wrap the namespace's data keys under the provider's current master key; with
    ``reencrypt``, also move every record and session to a new data key, ``batch`` rows
    per short transaction (appends go on meanwhile; new ones are sealed by the new key
    once their store has loaded it). An interrupted re-encryption resumes where the
    data key it was moving rows to is not yet complete, instead of making another."""
    if not isinstance(backend, SealedBackend):
        raise EncryptionError("rotating keys needs a store opened with encryption=")
    keyring, raw = backend.keyring, backend.primary_inner
    await keyring.ready(raw)
    await keyring.load(raw)
    rewrapped = 0
    target = keyring.provider.current_key_id
    for version in sorted(keyring.keys):
        if keyring.master_key_ids[version] == target:
            continue
        master, wrapped = await keyring.wrap(version, keyring.keys[version])
        done = await raw.execute(
            q.rewrap_data_key(keyring.namespace, version, master, wrapped, keyring.wrapped(version))
        )
        rewrapped += bool(done)
    await keyring.load(raw)
    report = RotationReport(rewrapped, keyring.current, target)
    if not reencrypt:
        return report
    # A new key, unless an interrupted run left a bound one to finish (one made before
    # the structure binding is not resumed: its rows may be bound to their place only).
    if keyring.completed.get(keyring.current, True) or not keyring.bound[keyring.current]:
        await keyring.add_key(raw, keyring.current + 1)
    version = keyring.current
    # Sessions first: their lineage seals are what a read of an upgraded namespace
    # refuses to go without (Keyring.reads_unsealed_sessions).
    sessions_done = await _reseal_sessions(backend, version, batch)
    records_done = await _reseal_records(backend, version, batch)
    await raw.execute(q.complete_data_key(keyring.namespace, version, datetime.now(UTC)))
    return RotationReport(
        rewrapped, version, target, records_resealed=records_done, sessions_resealed=sessions_done
    )


async def _reseal_records(backend: SealedBackend, version: int, batch: int) -> int:
    keyring, raw, ns = backend.keyring, backend.primary_inner, backend.keyring.namespace
    after: tuple[str, int] | None = None
    moved = 0
    while True:
        rows = await raw.fetch(q.namespace_records(ns, after=after, limit=batch, sealed=True))
        if not rows:
            return moved
        after = (rows[-1]["session_id"], int(rows[-1]["seq"]))
        changes = []
        for r in rows:
            old = r["payload"]
            if crypto.envelope_version(old) == version:  # a bound key: bound already
                continue
            sid, seq = r["session_id"], int(r["seq"])
            context = crypto.record_context(
                ns, sid, seq, r["kind"], *(r[f"sealed_{n}"] for n in STRUCTURE[1:])
            )
            plain = backend.opener.open_text(
                old,
                context,
                sid,
                seq,
                functools.partial(crypto.row_context, ns, sid, "payload", seq),
            )
            new = crypto.seal(keyring.ciphers[version], version, plain, context)
            changes.append([q.reseal_record(sid, seq, new, old)])
        if changes:
            moved += await _apply(raw, changes)


async def _reseal_sessions(backend: SealedBackend, version: int, batch: int) -> int:
    keyring, raw, ns = backend.keyring, backend.primary_inner, backend.keyring.namespace
    after: str | None = None
    moved = 0
    while True:
        rows = await raw.fetch(q.session_texts(ns, after, batch))
        if not rows:
            return moved
        after = rows[-1]["id"]
        changes = []
        for r in rows:
            sid = r["id"]
            old = {n: r[n] for n in q.SEALED_SESSION_COLUMNS}
            new = dict(old)
            for column in q.SEALED_SESSION_COLUMNS:
                text = old[column]
                if text is not None and crypto.envelope_version(text) != version:
                    context = crypto.row_context(ns, sid, column)
                    plain = backend.opener.open_text(text, context, sid, None)
                    new[column] = crypto.seal(keyring.ciphers[version], version, plain, context)
            session = [q.reseal_session(sid, ns, new, old)] if new != old else []
            seal = r["lineage_seal"]
            if seal is None or crypto.envelope_version(seal) != version:
                # An unsealed lineage (written before the binding) is sealed as it stands.
                context = crypto.lineage_context(ns, sid, r["parent_id"], r["fork_seq"])
                if seal is not None:
                    backend.opener.open_text(seal, context, sid, None)
                resealed = crypto.seal(keyring.ciphers[version], version, "", context)
                session.append(q.seal_lineage(sid, ns, resealed, raw.flavour, old=seal))
            if session:
                changes.append(session)
        if changes:
            moved += await _apply(raw, changes)


async def _apply(raw: Backend, changes: list[list[q.Bound]]) -> int:
    """Run the compare-and-set updates in one short transaction, each row's (a record's,
    or a session's and its lineage seal's) together; how many rows they all matched for
    (a value changed meanwhile is left for the next run)."""

    async def once() -> int:
        done = 0
        async with raw.transaction() as tx:
            for bounds in changes:
                matched = [bool(await tx.fetch(bound)) for bound in bounds]
                done += all(matched)
        return done

    return await retrying(once)
