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
EXPECTED = {
    (str(n), b) for n in (1, 2, 3, 4, 5, 6, 8, 9, 11, 13) for b in ("postgres", "sqlite")
} | {
    ("7", "postgres"),
    ("14", "sqlite"),  # start-up: sessions list on a SQLite file
    ("14", "-"),  # start-up: --help and import sessiondb, no database
    ("15", "postgres"),  # tasks appending to one session
    ("17", "postgres"),  # encryption at rest
    ("17", "sqlite"),
}
# figure 16 (search) has four rows per backend
EXPECTED |= {(f"16{part}", b) for part in "abcd" for b in ("postgres", "sqlite")}
# figure 12 builds its own primary and standby where it can (pg_createcluster, as root)
if replicas.missing_tools() is None:
    EXPECTED |= {("12", "postgres")}
try:  # figure 10 runs where the OpenAI Agents SDK and its SQLAlchemy session are installed
    import agents.extensions.memory.sqlalchemy_session  # noqa: F401
except ImportError:
    pass
else:
    EXPECTED |= {("10", "postgres")}
# figure 18 runs where at least one peer is installed (sessiondb[bench])
if peers.available():
    EXPECTED |= {("18", "postgres")}


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


def test_bench_scale_tiny_reports_every_figure(postgres, tmp_path: Path) -> None:
    """``python -m bench --scale --tiny --scale-records 3000``: the scale path (bulk load
    of the background, footprints, each figure as a scale / quick ratio) runs on both
    backends, and the background it loads is what it says: the records and sessions in
    the footprint, compactions, tombstones and forks among them."""
    if postgres.admin_url is None:
        message = f"the benchmark needs Postgres: {postgres.reason}"
        if os.environ.get("SESSIONDB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (SESSIONDB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    out = tmp_path / "scale.json"
    env = {
        **os.environ,
        "SESSIONDB_BENCH_DATABASE_URL": postgres.admin_url.render_as_string(hide_password=False),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--scale", "--tiny", "--scale-records", "3000",
         "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    rows = json.loads(out.read_text())
    for row in rows:
        assert set(row) == KEYS, row
        assert row["goal"] == "<= 1.25", row
        assert isinstance(row["ratio"], float) and row["ratio"] > 0, row
        assert row["figure"] in proc.stdout
    assert {(row["figure"].split()[0], row["backend"]) for row in rows} == {
        (f"S{n}", b) for n in (1, 2, 3, 4, 5, 6, "6b") for b in ("postgres", "sqlite")
    }
    assert "scale (tiny figures) mode" in proc.stdout.splitlines()[0]
    footprints = json.loads((tmp_path / "scale.footprint.json").read_text())
    assert {(f["backend"], f["label"]) for f in footprints} == {
        (b, label) for b in ("postgres", "sqlite") for label in ("quick", "scale")
    }
    for f in footprints:
        assert f["records_table"] > 0 and f["records_indexes"] > 0, f
        assert f["analyze_s"] > 0, f
        if f["label"] == "scale":
            # whole turns of four, plus the overlays: about the records asked for
            assert 3000 <= f["records"] < 3600, f
            assert f["sessions"] == 300, f  # one per 10 records at tiny size
    assert "table B/rec" in proc.stdout
    prefix = re.search(r"databases are (sessiondb_bench_\w+)_\*", proc.stderr)
    assert prefix is not None, proc.stderr
    assert prefix.group(1) not in _databases(postgres.admin_url)


def test_background_mix() -> None:
    """The background generator's rows, without a database: every session's records are
    gapless from its fork point on and end at its head; the mix has compactions that
    keep a user message, tombstones of a message, and forks of an earlier session; each
    row carries its search index source, and the needle is in the figure's records."""
    from bench import background, data, search
    from sessiondb.search_text import payload_index_source

    plan = background.Plan(background.Shape(20_000, 200), seed=0)
    pool = background.turn_pool(0, data.Corpus(0))
    clock = background.Clock(len(plan.order))
    ids = background.session_ids(plan, clock)
    heads = {row[0]: row for row in background.session_rows(plan, ids, pool, clock, lambda at: at)}
    seqs: dict[str, list[int]] = {}
    kinds: dict[str, int] = {}
    by_key: dict[tuple[str, int], tuple[object, ...]] = {}
    for row in background.record_rows(plan, ids, pool, clock, lambda at: at):
        seqs.setdefault(row[0], []).append(row[1])
        kinds[row[2]] = kinds.get(row[2], 0) + 1
        by_key[(row[0], row[1])] = row
    assert set(seqs) == set(heads)

    def messages_upto(sid: str, seq: int) -> int:
        """Messages of the session's lineage with seq <= ``seq``."""
        head = heads[sid]
        own = sum(1 for s in seqs[sid] if s <= seq and by_key[(sid, s)][2] == "message")
        return own + (0 if head[-2] is None else messages_upto(head[-2], head[-1]))

    for sid, got in seqs.items():
        head = heads[sid]  # (id, ..., last_seq [8], message_count [9], ..., parent, fork_seq)
        start = (head[-1] or 0) + 1
        assert got == list(range(start, head[8] + 1)), sid  # gapless, in order, to last_seq
        assert head[9] == messages_upto(sid, head[8]), sid
    compactions = [r for r in by_key.values() if r[2] == "compaction"]
    tombstones = [r for r in by_key.values() if r[2] == "tombstone"]
    assert compactions and tombstones, kinds
    for r in compactions:
        kept = by_key[(r[0], r[8])]
        assert (kept[2], kept[3]) == ("message", "user"), r[:4]
    for r in tombstones:
        assert by_key[(r[0], r[7])][2] == "message", r[:4]
    forks = [h for h in heads.values() if h[-2] is not None]
    assert forks
    order = {sid: i for i, sid in enumerate(ids)}
    for child in forks:
        parent = heads[child[-2]]
        assert order[parent[0]] < order[child[0]]
        assert 0 < child[-1] <= parent[8]
    assert 19_000 < sum(kinds.values()) < 23_000
    # Each row ends with what the search index takes of it, as sessiondb's writes make
    # it; the needle is in the same number of user messages, whatever the size.
    for row in by_key.values():
        assert row[background.SOURCE] == payload_index_source(row[2], row[10]), row[:4]
    needles = [r for r in by_key.values() if search.NEEDLE in r[10]]
    assert len(needles) == search.NEEDLE_RECORDS
    assert {(r[2], r[3]) for r in needles} == {("message", "user")}
    assert all(r[9] == len(r[10]) for r in needles)


def test_bench_scale_refuses_a_size_the_disk_cannot_hold(postgres, tmp_path: Path) -> None:
    """A big database that cannot fit is refused before a row is loaded, with the flag
    that scales it down; the run's databases are dropped all the same."""
    if postgres.admin_url is None:
        pytest.skip(f"the benchmark needs Postgres: {postgres.reason}")
    env = {
        **os.environ,
        "SESSIONDB_BENCH_DATABASE_URL": postgres.admin_url.render_as_string(hide_password=False),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--scale", "--tiny", "--scale-records", str(10**13)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "loading" not in proc.stderr
    for backend in ("postgres", "sqlite"):
        assert f"FAILED scale on {backend}: {backend}: 10,000,000,000,400 records need" in (
            proc.stderr
        ), proc.stderr[-3000:]
    assert "pass a smaller --scale-records" in proc.stderr
    prefix = re.search(r"databases are (sessiondb_bench_\w+)_\*", proc.stderr)
    assert prefix is not None, proc.stderr
    assert prefix.group(1) not in _databases(postgres.admin_url)
