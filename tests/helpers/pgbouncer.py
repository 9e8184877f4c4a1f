"""A real PgBouncer in transaction mode in front of the test's Postgres database, for the
tests that run sessiondb through one (the ``pgbouncer`` fixture; ``conftest`` offers it to
every test).

PgBouncer comes from Debian's ``pgbouncer`` package (``.ci/run`` installs it). It will not
run as root, so the fixture starts it as the ``postgres`` user from a directory of its own.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

SERVER_CONNECTIONS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pgbouncer(pg_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test's database; yields the URL
    of the database through it, with named prepared statements turned off."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.fail("pgbouncer is not installed (apt-get install -y pgbouncer)")
    url = make_url(pg_url)
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="sessiondb-pgbouncer-"))
    user = url.username or "root"
    (workdir / "userlist.txt").write_text(f'"{user}" ""\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={url.host or '127.0.0.1'} port={url.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'userlist.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {SERVER_CONNECTIONS}\n"
        "max_client_conn = 200\n"
        f"logfile = {workdir / 'pgbouncer.log'}\npidfile = {workdir / 'pgbouncer.pid'}\n"
    )
    owner = pwd.getpwnam("postgres")
    os.chmod(workdir, 0o755)
    for path in (workdir, *workdir.iterdir()):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    process = subprocess.Popen(
        ["runuser", "-u", "postgres", "--", binary, str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (workdir / "pgbouncer.log").read_text(errors="replace")
                    pytest.fail(f"pgbouncer did not start: {log[-2000:]}")
                time.sleep(0.1)
        through = url.set(host="127.0.0.1", port=port, query={"prepared_statement_cache_size": "0"})
        yield through.render_as_string(hide_password=False)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(workdir, ignore_errors=True)
