"""sessiondb behind a real PgBouncer in transaction mode, with fewer server connections
than concurrent clients: appends with and without uuids, context, records, listing,
overlays and forks, all through it.

PgBouncer comes from Debian's ``pgbouncer`` package (``.ci/run`` installs it). It will not
run as root, so the test starts it as the ``postgres`` user from a directory of its own.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sessiondb import SessionStore

pytestmark = pytest.mark.postgres_only

SERVER_CONNECTIONS = 2
CLIENTS = 8


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


def _turn(client: int, i: int) -> list[dict[str, Any]]:
    call = f"c{client}-{i}"
    return [
        {"role": "user", "content": [{"type": "text", "text": f"q {client}-{i}"}]},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": call, "name": "read", "arguments": {}}],
        },
        {"role": "toolResult", "toolCallId": call, "content": [{"type": "text", "text": "ok"}]},
    ]


async def _client(url: str, shared: str, client: int, rounds: int) -> None:
    async with SessionStore.open(url, pool_max_size=4) as store:
        own = (await store.create_session(name=f"client {client}")).id
        for i in range(rounds):
            # Plain appends, to the shared session and to its own.
            await store.append(shared, {"role": "user", "content": f"shared {client}-{i}"})
            await store.append(own, _turn(client, i))
            # With uuids: a retry returns the stored record, adds no row.
            uuid = f"u-{client}-{i}"
            first = await store.append(own, {"role": "user", "content": "u", "uuid": uuid})
            again = await store.append(own, {"role": "user", "content": "u", "uuid": uuid})
            assert again[0].seq == first[0].seq
            assert len(await store.context(own)) >= 3
            assert (await store.records(own, kinds=["message"]))[-1].seq == first[0].seq
            await store.list_sessions(limit=5)
        # Overlays and forks on the client's own session.
        head = (await store.get_session(own)).last_seq
        await store.append_compaction(own, summary=f"client {client}", first_kept_seq=head)
        await store.tombstone(own, 1)
        child = await store.fork(own)
        await store.append(child.id, {"role": "user", "content": "in the fork"})
        context = await store.context(child.id)
        assert context[0].text().endswith(f"client {client}\n</summary>")
        assert context[-1].text() == "in the fork"


async def test_everything_works_through_pgbouncer_in_transaction_mode(
    pgbouncer: str, pg_url: str
) -> None:
    rounds = 6
    async with SessionStore.open(pgbouncer) as store:
        shared = (await store.create_session(name="shared")).id
    await asyncio.gather(*(_client(pgbouncer, shared, c, rounds) for c in range(CLIENTS)))

    # Checked directly against Postgres: every append once, gapless, heads that agree.
    async with SessionStore.open(pg_url) as direct:
        records = await direct.records(shared)
        assert [r.seq for r in records] == list(range(1, CLIENTS * rounds + 1))
        texts = sorted(r.message.text() for r in records if r.message is not None)
        assert texts == sorted(f"shared {c}-{i}" for c in range(CLIENTS) for i in range(rounds))
        page = await direct.list_sessions(limit=100)
        assert len(page.items) == 1 + CLIENTS * 2  # shared, each client's own and its fork
        for info in page.items:
            if info.parent_id is None and info.id != shared:
                assert info.last_seq == rounds * 4 + 1 + 1  # 3 + 1 per round, compaction, tombstone
                assert [r.seq for r in await direct.records(info.id, include_tombstoned=True)] == (
                    list(range(1, info.last_seq + 1))
                )
