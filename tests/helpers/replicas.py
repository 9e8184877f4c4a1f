"""Throwaway streaming replication for tests: a primary cluster and hot standbys made
with ``pg_basebackup -R``, built with Debian's ``pg_createcluster`` (as on CI, which
runs as root) on free ports, and dropped afterwards.

Without the tools the test fails under ``SESSIONDB_REQUIRE_POSTGRES=1`` (CI) and skips
elsewhere.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

TIMEOUT_S = 120.0


@dataclass
class Node:
    """One cluster of a replication set."""

    version: str
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> str:
        return f"/var/lib/postgresql/{self.version}/{self.name}"

    def ctl(self, action: str, mode: str = "fast") -> None:
        _run("pg_ctlcluster", "-m", mode, self.version, self.name, action)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """One statement's output, unaligned and without headers."""
        argv = ["psql", "-X", "-qAt", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        out = subprocess.run(
            [*argv, "-d", database, "-c", sql],
            check=True,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        return out.stdout.strip()


@dataclass
class ReplicaSet:
    primary: Node
    standbys: list[Node] = field(default_factory=list)

    def wait_caught_up(self, database: str = "postgres", timeout: float = 30.0) -> None:
        """Until every standby has replayed the primary's current WAL position."""
        target = self.primary.psql("SELECT pg_current_wal_lsn()", database)
        deadline = time.monotonic() + timeout
        for node in self.standbys:
            while True:
                done = node.psql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
                if done == "t":
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"standby {node.name} did not catch up with {target}")
                time.sleep(0.05)


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pg_version() -> str:
    """The PostgreSQL major version whose clusters the tools manage (the newest)."""
    out = subprocess.run(
        ["pg_lsclusters", "--no-header"], check=True, capture_output=True, text=True
    ).stdout
    versions = sorted({line.split()[0] for line in out.splitlines() if line.strip()}, key=float)
    return versions[-1] if versions else "15"


def need_cluster_tools() -> None:
    """Skip (fail on CI) without ``pg_createcluster`` and ``pg_basebackup``."""
    missing = [t for t in ("pg_createcluster", "pg_basebackup") if shutil.which(t) is None]
    if not missing and os.geteuid() != 0:
        missing = ["root (to run pg_createcluster)"]
    if missing:
        message = f"replication tests need {', '.join(missing)}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)


def _create(version: str, name: str, port: int, *settings: str) -> Node:
    options = [f"--pgoption={s}" for s in settings]
    _run("pg_createcluster", version, name, "--port", str(port), *options, "--", "--auth=trust")
    return Node(version, name, port)


def _drop(node: Node) -> None:
    subprocess.run(
        ["pg_dropcluster", "--stop", node.version, node.name],
        capture_output=True,
        timeout=TIMEOUT_S,
    )


def add_standby(primary: Node, *settings: str) -> Node:
    """A hot standby of ``primary``: a cluster whose data directory is replaced by a
    ``pg_basebackup -R`` of the primary (streaming, with its own WAL sender)."""
    name = f"{primary.name}_s{uuid.uuid4().hex[:4]}"
    node = _create(primary.version, name, free_port(), *settings)
    try:
        for entry in os.scandir(node.data_dir):  # keep the directory: its parent is root's
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        _run(
            "runuser", "-u", "postgres", "--",
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", node.data_dir, "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        node.ctl("start")
    except BaseException:
        _drop(node)  # not yet the caller's to drop
        raise
    return node


@contextmanager
def replica_set(standbys: int = 1, *settings: str) -> Iterator[ReplicaSet]:
    """A primary and ``standbys`` hot standbys, all dropped on exit. ``settings``:
    ``name=value`` server settings for every node."""
    need_cluster_tools()
    version = pg_version()
    made: list[Node] = []
    try:
        primary = _create(version, f"sessiondb_repl_{uuid.uuid4().hex[:8]}", free_port(), *settings)
        made.append(primary)
        primary.ctl("start")
        result = ReplicaSet(primary)
        for _ in range(standbys):
            node = add_standby(primary, *settings)
            made.append(node)
            result.standbys.append(node)
        result.wait_caught_up()
        yield result
    finally:
        for node in reversed(made):
            _drop(node)
