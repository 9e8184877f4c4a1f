"""Smoke test of the benchmark: ``python -m bench --quick --tiny`` still runs every figure.

Not a measurement (the sizes are tiny); it keeps ``bench/`` from rotting as the package
changes. It runs against the same Postgres server as the rest of the suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import URL

from bench import peers, replicas

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"figure", "backend", "sessiondb_median_s", "floor_median_s", "ratio", "goal", "met"}
EXPECTED = {(str(n), b) for n in (1, 2, 3, 4, 5, 6, 8, 9, 11) for b in ("postgres", "sqlite")} | {
    ("7", "postgres")
}
# figure 12 builds its own primary and standby where it can (pg_createcluster, as root)
if replicas.missing_tools() is None:
    EXPECTED |= {("12", "postgres")}
try:  # figure 10 runs where the OpenAI Agents SDK and its SQLAlchemy session are installed
    import agents.extensions.memory.sqlalchemy_session  # noqa: F401
except ImportError:
    pass
else:
    EXPECTED |= {("10", "postgres")}
# figure 13 runs where at least one peer is installed (sessiondb[bench])
if peers.available():
    EXPECTED |= {("13", "postgres")}


def test_bench_quick_tiny_reports_every_figure(postgres, tmp_path: Path) -> None:
    if postgres.admin_url is None:
        message = f"the benchmark needs Postgres: {postgres.reason}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    out = tmp_path / "bench.json"
    env = {
        **os.environ,
        "SESSIONDB_BENCH_DATABASE_URL": postgres.admin_url.render_as_string(hide_password=False),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--tiny", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    rows = json.loads(out.read_text())
    assert isinstance(rows, list)
    for row in rows:
        assert set(row) == KEYS, row
        for key in ("sessiondb_median_s", "floor_median_s", "ratio"):
            assert isinstance(row[key], float) and row[key] > 0, row
        assert row["goal"] is None or isinstance(row["goal"], str), row
        assert row["met"] is None if row["goal"] is None else isinstance(row["met"], bool), row
        assert row["figure"] in proc.stdout
    assert {(row["figure"].split()[0], row["backend"]) for row in rows} == EXPECTED
    assert "tiny mode" in proc.stdout.splitlines()[0]
    # The run dropped the databases it made.
    prefix = re.search(r"databases are (sessiondb_bench_\w+)_\*", proc.stderr)
    assert prefix is not None, proc.stderr
    assert prefix.group(1) not in _databases(postgres.admin_url)


def _databases(admin_url: URL) -> str:
    async def names() -> str:
        conn = await asyncpg.connect(
            user=admin_url.username,
            password=admin_url.password,
            host=admin_url.host,
            port=admin_url.port or 5432,
            database=admin_url.database or "postgres",
        )
        try:
            return " ".join(
                r["datname"] for r in await conn.fetch("SELECT datname FROM pg_database")
            )
        finally:
            await conn.close()

    return asyncio.run(names())


def test_bench_adk_tiny_runs(postgres, tmp_path: Path) -> None:
    """``python -m bench.adk --tiny``: sessiondb's ADK service beside ADK's own, each
    figure reported (needs the ``adk`` extra)."""
    from helpers.frameworks import need_framework

    need_framework("google.adk", "adk")
    if postgres.admin_url is None:
        message = f"the benchmark needs Postgres: {postgres.reason}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    env = {
        **os.environ,
        "SESSIONDB_BENCH_DATABASE_URL": postgres.admin_url.render_as_string(hide_password=False),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench.adk", "--tiny"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    for figure in ("append_event", "get_session", "num_recent_events", "list_sessions"):
        assert figure in proc.stdout, proc.stdout
    assert "DatabaseSessionService" in proc.stdout
