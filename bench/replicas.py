"""Figure 12: reads through a read replica, and what tracking writes for them costs.

The figure builds its own throwaway streaming replication on this machine: a primary
cluster and a hot standby made with ``pg_basebackup -R`` (Debian's ``pg_createcluster``;
run as root, as CI does), dropped afterwards. Without those tools it reports nothing and
says why. Rows:

- ``context()`` through the replica with the check a read after the store's own write
  carries (the store is made to forget that the replica has its writes before each
  read, so every timed read carries the check), against ``context()`` of a store on the
  primary alone: goal <= 1.2;
- the same read once the store knows the replica has its writes (no check);
- ``append`` of one message by a store with replicas (the statement also returns the
  write's transaction id and WAL position) against today's append: goal <= 1.05.

Both servers run on this machine, so the replica's read is not slowed by a network.
Commits wait for the standby to apply them (``synchronous_commit=remote_apply``) in the
read rows, so that the standby can answer; the append rows use ``local`` on both sides.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sessiondb import SessionStore
from sessiondb.backends.replicas import ReplicaBackend

from . import data
from .databases import Server
from .figures import Run
from .report import Goal, Result
from .timing import compare

TIMEOUT_S = 120.0


def _run(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip()}")
    return done.stdout


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def missing_tools() -> str | None:
    """Why this machine cannot build a replica, or ``None``."""
    for tool in ("pg_createcluster", "pg_basebackup", "pg_lsclusters"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if os.geteuid() != 0:
        return "pg_createcluster needs root"
    return None


@contextmanager
def primary_and_standby() -> Iterator[tuple[str, str]]:
    """URLs of a throwaway primary and its hot standby."""
    out = _run("pg_lsclusters", "--no-header")
    versions = sorted({line.split()[0] for line in out.splitlines() if line.strip()}, key=float)
    version = versions[-1] if versions else "15"
    name = f"sessiondb_bench_{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    ports: list[int] = []
    try:
        for suffix in ("p", "s"):
            port = _port()
            _run(
                "pg_createcluster", version, f"{name}_{suffix}", "--port", str(port),
                "--pgoption=synchronous_standby_names=*", "--", "--auth=trust",
            )  # fmt: skip
            made.append(f"{name}_{suffix}")
            ports.append(port)
        _run("pg_ctlcluster", version, made[0], "start")
        data_dir = f"/var/lib/postgresql/{version}/{made[1]}"
        for entry in os.scandir(data_dir):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        _run(
            "runuser", "-u", "postgres", "--", "pg_basebackup", "-h", "127.0.0.1",
            "-p", str(ports[0]), "-U", "postgres", "-D", data_dir, "-R", "-X", "stream",
            "-c", "fast",
        )  # fmt: skip
        _run("pg_ctlcluster", version, made[1], "start")
        yield tuple(f"postgresql://postgres@127.0.0.1:{p}/postgres" for p in ports)  # type: ignore[misc]
    finally:
        for cluster in reversed(made):
            subprocess.run(
                ["pg_dropcluster", "--stop", version, cluster],
                capture_output=True,
                timeout=TIMEOUT_S,
            )


def _settings(mode: str) -> dict[str, Any]:
    return {"server_settings": {"synchronous_commit": mode}}


async def replica_reads(run: Run, server: Server) -> list[Result]:
    why = missing_tools()
    if why is not None:
        run.log(f"figure 12 skipped: {why}")
        return []
    s = run.sizes
    with primary_and_standby() as (primary, standby):
        async with SessionStore.open(primary, **_settings("remote_apply")) as direct:
            await direct.migrate()
            sid = (await direct.create_session()).id
            await direct.append(sid, data.user_messages(50, run.seed, run.corpus))
        async with (
            SessionStore.open(primary, **_settings("remote_apply")) as direct,
            SessionStore.open(
                primary, replica_urls=[standby], **_settings("remote_apply")
            ) as routed,
        ):
            router = routed.core.backend
            assert isinstance(router, ReplicaBackend)
            # One write of the routed store, so that its reads must find it on the replica.
            await routed.append(sid, {"role": "user", "content": "the store's own write"})
            replica = router.replicas[0]

            async def checked() -> None:
                replica.seen = 0  # forget: the read carries the check
                await routed.context(sid)

            async def cached() -> None:
                await routed.context(sid)

            async def on_primary() -> None:
                await direct.context(sid)

            reps, warmup = s.context_reps * 5, s.append_warmup
            checked_s, primary_s = await compare(checked, on_primary, reps=reps, warmup=warmup)
            cached_s, primary2_s = await compare(cached, on_primary, reps=reps, warmup=warmup)
            counts = router.read_counts()
            run.log(f"figure 12 reads served: {counts}")
            if counts["primary"] > warmup:
                raise RuntimeError(f"the replica did not serve the timed reads: {counts}")
        messages = itertools.cycle(data.user_messages(64, run.seed, run.corpus))
        async with (
            SessionStore.open(primary, **_settings("local")) as plain,
            SessionStore.open(primary, replica_urls=[standby], **_settings("local")) as tracked,
        ):
            a = (await plain.create_session()).id
            b = (await tracked.create_session()).id

            async def append_tracked() -> None:
                await tracked.append(b, next(messages))

            async def append_plain() -> None:
                await plain.append(a, next(messages))

            tracked_s, plain_s = await compare(
                append_tracked, append_plain, reps=s.append_reps, warmup=s.append_warmup
            )
    return [
        Result(
            "12 context() via a replica, checked (vs the primary)",
            server.backend,
            checked_s,
            primary_s,
            Goal("<=", 1.2),
        ),
        Result(
            "12 context() via a replica, known current (vs the primary)",
            server.backend,
            cached_s,
            primary2_s,
        ),
        Result(
            "12 append, tracked for replicas (vs today's append)",
            server.backend,
            tracked_s,
            plain_s,
            Goal("<=", 1.05),
        ),
    ]
