"""Failover through a multi-host URL, on real replication (tests/helpers/replication.py):
a primary and a synchronous hot standby, each a throwaway cluster.

- Writers in several OS processes append through ``primary,standby`` while the primary is
  stopped (``immediate``) and the standby promoted: every acknowledged append is stored
  exactly once, seqs are gapless, the writers go on without a restart, and every error
  they saw was a SessionDBError.
- A server that answers a write read-only (a standby, or a primary fenced read-only):
  typed, retryable, retried, and nothing is stored twice.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.processes import SPAWN
from helpers.replication import Replication, free_port, replication

from sessiondb import DatabaseUnavailableError, SessionDBError, SessionStore
from sessiondb.backends.base import RETRY_BUDGET
from sessiondb.cli import main
from sessiondb.config import ENV_URL

pytestmark = pytest.mark.postgres_only

WRITERS = 3
BEFORE = 60  # acknowledged appends before the failover
AFTER = 60  # and after it
TIMEOUT_S = 90.0
SECRET = "S3cr3t"  # trust authentication takes any password: it must never be shown


@pytest.fixture
def pair() -> Iterator[Replication]:
    """A primary and one synchronous hot standby: an acknowledged commit is on both."""
    with replication(1, synchronous=True, prefix="sessiondb_failover") as repl:
        yield repl


# -- writers (module level: spawned processes import them) ------------------------------


async def _write(url: str, session_id: str, proc: int, shared: dict[str, Any]) -> dict[str, Any]:
    """Append until told to stop. Every other message has a uuid and is sent again, same
    uuid, until acknowledged (that is what a uuid is for); one without that fails is
    recorded as failed (retryable: nothing stored) or of unknown outcome."""
    out: dict[str, Any] = {
        "acked": [],
        "acked_after": 0,
        "failed": [],
        "unknown": [],
        "uuid": [],
        "errors": Counter(),
        "untyped": [],
        "leaked": [],
        "not_retryable": [],  # neither retryable nor of unknown outcome: none may be
    }
    async with SessionStore.open(url, connect_timeout=5) as store:
        i = 0
        message: dict[str, Any] | None = None
        while not shared["stop"].is_set():
            if message is None:
                message = {"role": "user", "content": f"p{proc} i{i}"}
                if i % 2:
                    message["uuid"] = str(uuid.uuid4())
                    out["uuid"].append(message["content"])
                i += 1
            text = message["content"]
            try:
                if i % 10 == 0:  # a read now and then: it fails and recovers the same way
                    await store.get_session(session_id)
                await store.append(session_id, message)
            except SessionDBError as exc:
                out["errors"][type(exc).__name__] += 1
                unknown = isinstance(exc, DatabaseUnavailableError) and exc.outcome_unknown
                if not exc.retryable and not unknown:
                    out["not_retryable"].append(f"{type(exc).__name__}: {exc}")
                if SECRET in str(exc):
                    out["leaked"].append(str(exc))
                if "uuid" not in message:
                    out["unknown" if unknown else "failed"].append(text)
                    message = None
                await asyncio.sleep(0.05)
            except Exception as exc:  # counted: the test fails on any
                out["untyped"].append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.05)
            else:
                out["acked"].append(text)
                message = None
                with shared["acked"].get_lock():
                    shared["acked"].value += 1
                if shared["failed_over"].is_set():
                    out["acked_after"] += 1
                    with shared["after"].get_lock():
                        shared["after"].value += 1
    out["errors"] = dict(out["errors"])
    return out


def _writer(url: str, session_id: str, proc: int, shared: dict[str, Any], results: Any) -> None:
    results.put((proc, asyncio.run(_write(url, session_id, proc, shared))))


def _wait(condition: Any, what: str, processes: list[Any]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        dead = [p.name for p in processes if not p.is_alive()]
        assert not dead, f"writer(s) {dead} stopped while waiting until {what}"
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


async def test_writers_follow_a_failover_and_lose_or_duplicate_nothing(
    pair: Replication, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pair.url(userinfo=f"postgres:{SECRET}")
    async with SessionStore.open(url) as store:
        await store.migrate()
        session_id = (await store.create_session()).id
    shared = {
        "stop": SPAWN.Event(),
        "failed_over": SPAWN.Event(),
        "acked": SPAWN.Value("i", 0),
        "after": SPAWN.Value("i", 0),
    }
    results = SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_writer, args=(url, session_id, p, shared, results), name=f"w{p}")
        for p in range(WRITERS)
    ]
    for process in processes:
        process.start()
    outcomes: dict[int, dict[str, Any]] = {}
    try:
        await asyncio.to_thread(
            _wait, lambda: shared["acked"].value >= BEFORE, "appends before", processes
        )
        # The primary goes away mid-load, as in a crash; the standby takes over.
        primary, standby = pair.primary, pair.standbys[0]
        await asyncio.to_thread(primary.stop, "immediate")
        # No primary for longer than a call's retries: the callers see it, typed.
        await asyncio.sleep(RETRY_BUDGET + 1.0)
        await asyncio.to_thread(standby.promote)
        shared["failed_over"].set()
        await asyncio.to_thread(
            _wait, lambda: shared["after"].value >= AFTER, "appends after", processes
        )
        shared["stop"].set()
        for _ in processes:
            proc, outcome = await asyncio.to_thread(results.get, True, TIMEOUT_S)
            outcomes[proc] = outcome
        for process in processes:
            await asyncio.to_thread(process.join, TIMEOUT_S)
            assert process.exitcode == 0, (process.name, process.exitcode)
    finally:
        shared["stop"].set()
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(10)

    # The acknowledgements after the failover came from the promoted standby.
    assert not standby.in_recovery()
    with pytest.raises(RuntimeError):
        primary.sql("SELECT 1")
    async with SessionStore.open(url) as store:
        records = await store.records(session_id)
        info = await store.get_session(session_id)
    assert [r.seq for r in records] == list(range(1, len(records) + 1)), "seqs have a gap"
    assert info.last_seq == info.message_count == len(records)
    stored = Counter(r.message.text() for r in records if r.message is not None)
    acked = [t for o in outcomes.values() for t in o["acked"]]
    with_uuid = {t for o in outcomes.values() for t in o["uuid"]}
    lost = [t for t in acked if t not in stored]
    duplicated = [t for t, n in stored.items() if n > 1]
    failed_but_stored = [
        t for o in outcomes.values() for t in o["failed"] if t in stored and t not in with_uuid
    ]
    errors: Counter[str] = Counter()
    for o in outcomes.values():
        errors.update(o["errors"])
    untyped = [e for o in outcomes.values() for e in o["untyped"]]
    not_retryable = [e for o in outcomes.values() for e in o["not_retryable"]]
    leaked = [e for o in outcomes.values() for e in o["leaked"]]
    after = {p: o["acked_after"] for p, o in outcomes.items()}
    unknown = sum(len(o["unknown"]) for o in outcomes.values())
    print(
        f"failover under load: {len(acked)} acknowledged ({sum(after.values())} after the "
        f"failover), {len(lost)} lost, {len(duplicated)} duplicated, errors seen "
        f"{dict(errors)} ({len(untyped)} untyped), {unknown} without uuid of unknown "
        f"outcome, {len(records)} records stored"
    )
    assert not untyped, f"errors that are not SessionDBError: {untyped[:5]}"
    assert not leaked, f"an error showed the password: {leaked[:1]}"
    assert not lost, f"acknowledged but not stored: {lost[:5]}"
    assert not duplicated, f"stored twice: {duplicated[:5]}"
    assert not failed_but_stored, f"a retryable failure stored its message: {failed_but_stored}"
    assert all(n > 0 for n in after.values()), f"a writer did not go on: {after}"
    assert errors["DatabaseUnavailableError"] >= WRITERS, "no caller saw the primary gone"
    assert not not_retryable, f"errors neither retryable nor of unknown outcome: {not_retryable}"

    # The CLI follows it too, by --db and by SESSIONDB_URL.
    for argv in (["--db", url, "sessions", "list"], ["sessions", "list"]):
        if argv[0] != "--db":
            monkeypatch.setenv(ENV_URL, url)
        out = io.StringIO()
        assert await asyncio.to_thread(main, argv, out) == 0
        assert session_id in out.getvalue()
    assert set(errors) <= {"DatabaseUnavailableError", "BusyError"}, errors


async def test_a_read_only_server_answering_a_write_is_typed_and_retried(
    pair: Replication,
) -> None:
    primary, standby = pair.primary, pair.standbys[0]
    url = pair.url(userinfo=f"postgres:{SECRET}")
    async with SessionStore.open(url) as store:
        await store.migrate()
        session_id = (await store.create_session()).id
        (first,) = await store.append(session_id, {"role": "user", "content": "m0", "uuid": "u0"})
    await asyncio.to_thread(pair.wait_replayed)

    # A store that can only reach the standby: every write is refused read-only.
    only_standby = f"postgresql://postgres:{SECRET}@{standby.address}/postgres"
    async with SessionStore.open(only_standby) as store:
        for message in (
            {"role": "user", "content": "on the standby"},
            {"role": "user", "content": "on the standby", "uuid": "u-standby"},
        ):
            with pytest.raises(DatabaseUnavailableError) as info:
                await store.append(session_id, message)
            assert info.value.retryable and not info.value.outcome_unknown
            assert "read-only" in str(info.value) and standby.address in str(info.value)
            assert SECRET not in str(info.value)
        assert len(await store.records(session_id)) == 1  # reads still work there

    async with SessionStore.open(url, pool_max_size=4) as store:
        # Warm the pool on the primary, then fence it read-only under the pool's feet (as a
        # failover tool does to an old primary): the pooled connections answer 25006.
        await asyncio.gather(*(store.records(session_id) for _ in range(4)))
        await asyncio.to_thread(primary.set, "default_transaction_read_only", "on")
        for message in (
            {"role": "user", "content": "m1", "uuid": "u1"},
            {"role": "user", "content": "m2"},
        ):
            with pytest.raises(DatabaseUnavailableError) as info:
                await store.append(session_id, message)
            error = info.value
            assert error.retryable and not error.outcome_unknown, error
            assert primary.address in str(error) and standby.address in str(error), error
            assert SECRET not in str(error) and SECRET not in repr(error.__cause__)

        # Lifted while an append is being retried: the same call succeeds.
        lift = threading.Timer(0.3, primary.set, ("default_transaction_read_only", None))
        lift.start()
        try:
            (m1,) = await store.append(session_id, {"role": "user", "content": "m1", "uuid": "u1"})
        finally:
            lift.join()
        (again,) = await store.append(session_id, {"role": "user", "content": "m1", "uuid": "u1"})
        assert again.seq == m1.seq

        # The old primary fenced for good and the standby promoted: the pool, full of
        # connections to the old one, leaves them and finds the new primary.
        await asyncio.to_thread(pair.wait_replayed)
        await asyncio.gather(*(store.records(session_id) for _ in range(4)))
        await asyncio.to_thread(primary.set, "default_transaction_read_only", "on")
        await asyncio.to_thread(standby.promote)
        (m3,) = await store.append(session_id, {"role": "user", "content": "m3", "uuid": "u3"})
        assert m3.seq == m1.seq + 1
        records = await store.records(session_id)
    texts = [r.message.text() for r in records if r.message is not None]
    assert texts == ["m0", "m1", "m3"], texts  # m2 failed retryable: not stored; m1 once
    assert [r.seq for r in records] == [first.seq, first.seq + 1, first.seq + 2]
    assert standby.sql("SELECT count(*) FROM sessiondb_records") == "3"


def test_the_cli_names_every_host_it_tried_and_no_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead = [free_port(), free_port()]
    url = f"postgresql://app:{SECRET}@127.0.0.1:{dead[0]},127.0.0.1:{dead[1]}/app"
    assert main(["--db", url, "sessions", "list"]) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{dead[0]}, 127.0.0.1:{dead[1]}" in err, err
    assert SECRET not in err
