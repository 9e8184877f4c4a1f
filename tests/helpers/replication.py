"""Throwaway Postgres servers for tests: one server (:func:`cluster`), or a primary and
hot standbys (:func:`replication`), on free ports.

Every server is a cluster of its own, made with Debian's ``pg_createcluster`` (as on CI,
which runs as root); a standby is the primary's ``pg_basebackup -R`` (streaming, hot).
``synchronous=True`` makes the primary wait for a standby's flush before a commit is
acknowledged (``synchronous_standby_names = '*'``, set after the base backup so that a
promoted standby does not wait for a standby of its own): an acknowledged commit then
survives the primary's loss. Everything is dropped when the context ends.

    with replication(standbys=1, synchronous=True) as repl:
        url = repl.url()  # postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres
        repl.primary.stop("immediate")
        repl.standbys[0].promote()

Without the tools the test is skipped, or fails under ``SESSIONDB_REQUIRE_POSTGRES=1``
(CI): a replication test must never skip there.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Seconds any one cluster command may take.
COMMAND_TIMEOUT = 60.0
#: Settings of every throwaway server: small, and quick to write (durability against an
#: operating-system crash is not what the tests are about; a stopped server keeps its WAL).
SERVER_SETTINGS = (
    "shared_buffers=16MB",
    "max_connections=60",
    "fsync=off",
    "full_page_writes=off",
    "wal_sender_timeout=10s",
    "wal_receiver_status_interval=1s",
)


def need_cluster_tools() -> None:
    """Skip (fail under ``SESSIONDB_REQUIRE_POSTGRES=1``) without Debian's cluster tools
    or root."""
    missing = [t for t in ("pg_createcluster", "pg_ctlcluster", "psql") if not shutil.which(t)]
    problem = ""
    if missing:
        problem = f"needs {', '.join(missing)} (postgresql-common)"
    elif os.geteuid() != 0:
        problem = "needs root to make throwaway clusters with pg_createcluster"
    if problem:
        message = f"tests with servers of their own {problem}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(*args: str) -> str:
    done = subprocess.run(
        list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def newest_version() -> str:
    """The newest PostgreSQL major version whose clusters the tools manage."""
    out = _run("pg_lsclusters", "--no-header")
    versions = {line.split()[0] for line in out.splitlines() if line.strip()}
    installed = {p.name for p in Path("/usr/lib/postgresql").glob("*") if p.name[0].isdigit()}
    found = sorted(versions | installed, key=float)
    return found[-1] if found else "15"


@dataclass
class Server:
    """One throwaway cluster, reached as ``postgres`` with trust authentication."""

    version: str
    name: str
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, database: str = "postgres", **query: str) -> str:
        tail = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://postgres@{self.address}/{database}" + (f"?{tail}" if tail else "")

    @property
    def data_directory(self) -> Path:
        return Path("/var/lib/postgresql") / self.version / self.name

    def ctl(self, action: str, mode: str = "fast") -> None:
        _run("pg_ctlcluster", "-m", mode, self.version, self.name, action)

    def start(self) -> None:
        self.ctl("start")

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``fast`` (clean), or ``immediate`` (as a crash: no shutdown checkpoint,
        sessions cut off)."""
        self.ctl("stop", mode)

    def promote(self) -> None:
        """Make this standby a primary; returns once it takes writes."""
        self.ctl("promote")
        self.wait_until(lambda: self.sql("SELECT pg_is_in_recovery()") == "f", "promoted")

    def sql(self, statement: str, database: str = "postgres") -> str:
        """One statement through ``psql``; its output, unaligned (``t``/``f`` for booleans)."""
        return _run(
            "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
            "-c", statement,
        ).strip()  # fmt: skip

    def in_recovery(self) -> bool:
        return self.sql("SELECT pg_is_in_recovery()") == "t"

    def set(self, name: str, value: str | None) -> None:
        """``ALTER SYSTEM SET name = value`` (``None``: ``RESET``) and a reload; returns
        once a new session sees it."""
        quoted = "DEFAULT" if value is None else "'" + value.replace("'", "''") + "'"
        self.sql(f"ALTER SYSTEM SET {name} = {quoted}")
        self.sql("SELECT pg_reload_conf()")
        want = value if value is not None else None
        if want is not None:
            self.wait_until(lambda: self.sql(f"SHOW {name}") == want, f"{name} = {want}")

    def wait_until(self, condition: object, what: str, timeout: float = COMMAND_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if callable(condition) and condition():
                    return
            except RuntimeError:  # not answering yet
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: not {what} after {timeout:g} s")
            time.sleep(0.1)


@dataclass
class Replication:
    primary: Server
    standbys: list[Server] = field(default_factory=list)

    @property
    def servers(self) -> list[Server]:
        return [self.primary, *self.standbys]

    def url(
        self,
        database: str = "postgres",
        servers: Sequence[Server] | None = None,
        userinfo: str = "postgres",
        **query: str,
    ) -> str:
        """A libpq multi-host URL naming ``servers`` (all, the primary first)."""
        hosts = ",".join(s.address for s in servers or self.servers)
        tail = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://{userinfo}@{hosts}/{database}" + (f"?{tail}" if tail else "")

    def wait_streaming(self, synchronous: bool = False) -> None:
        """Until every standby streams from the primary (synchronously, if asked)."""
        state = "sync" if synchronous else "streaming"
        column = "sync_state" if synchronous else "state"
        count = len(self.standbys)
        self.primary.wait_until(
            lambda: (
                self.primary.sql(f"SELECT count(*) FROM pg_stat_replication WHERE {column} IN "
                                 f"('{state}', 'quorum')")
                == str(count)
            ),
            f"streaming to {count} standby(s)",
        )  # fmt: skip

    def wait_replayed(self, timeout: float = COMMAND_TIMEOUT) -> None:
        """Until every standby has replayed all the primary has written so far."""
        lsn = self.primary.sql("SELECT pg_current_wal_lsn()")
        for standby in self.standbys:
            standby.wait_until(
                lambda s=standby: (
                    s.sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") == "t"
                ),
                f"replayed up to {lsn}",
                timeout,
            )


def _create(version: str, name: str, port: int, settings: Sequence[str] = ()) -> Server:
    options = [a for s in (*SERVER_SETTINGS, *settings) for a in ("-o", s)]
    _run("pg_createcluster", version, name, "--port", str(port), *options, "--", "--auth=trust")
    return Server(version, name, port)


def _make_standby(primary: Server, name: str, settings: Sequence[str]) -> Server:
    standby = _create(primary.version, name, free_port(), settings)
    data = standby.data_directory
    shutil.rmtree(data)
    binary = Path("/usr/lib/postgresql") / primary.version / "bin" / "pg_basebackup"
    _run(
        str(binary), "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
        "-D", str(data), "-R", "-X", "stream", "--checkpoint=fast",
    )  # fmt: skip
    _run("chown", "-R", "postgres:postgres", str(data))
    data.chmod(0o700)
    standby.start()
    return standby


@contextmanager
def replication(
    standbys: int = 1,
    *,
    synchronous: bool = False,
    settings: Sequence[str] = (),
    prefix: str = "sessiondb_replication",
) -> Iterator[Replication]:
    """A running primary with ``standbys`` hot standbys streaming from it; every cluster
    is stopped and dropped afterwards, whatever happened to it. ``settings``:
    ``name=value`` server settings for every server, beside :data:`SERVER_SETTINGS`."""
    need_cluster_tools()
    version = newest_version()
    run = uuid.uuid4().hex[:8]
    made: list[Server] = []
    try:
        primary = _create(version, f"{prefix}_{run}_p", free_port(), settings)
        made.append(primary)
        primary.start()
        repl = Replication(primary)
        for i in range(standbys):
            standby = _make_standby(primary, f"{prefix}_{run}_s{i}", settings)
            made.append(standby)
            repl.standbys.append(standby)
        repl.wait_streaming()
        if synchronous and standbys:
            primary.set("synchronous_standby_names", "*")
            repl.wait_streaming(synchronous=True)
        yield repl
    finally:
        for server in made:
            _drop(server)


@contextmanager
def cluster(prefix: str = "sessiondb_cluster") -> Iterator[Server]:
    """One running server of its own, stopped and dropped afterwards."""
    need_cluster_tools()
    server = _create(newest_version(), f"{prefix}_{uuid.uuid4().hex[:8]}", free_port())
    try:
        server.start()
        yield server
    finally:
        _drop(server)


def _drop(server: Server) -> None:
    subprocess.run(
        ["pg_dropcluster", "--stop", server.version, server.name],
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
