"""The built wheel carries the migrations, so an installed package can migrate."""

from __future__ import annotations

import os
import sqlite3
import zipfile
from pathlib import Path

from helpers.processes import run_python

REPO = Path(__file__).resolve().parents[2]

MIGRATE = """
import asyncio, sys
import sessiondb
from sessiondb import SessionStore

async def main():
    async with SessionStore.open(sys.argv[1]) as store:
        await store.migrate()
    print(sessiondb.__file__)

asyncio.run(main())
"""


def test_wheel_ships_migrations_and_migrates_without_the_repo(tmp_path: Path) -> None:
    run_python("-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO), timeout=300)
    (wheel,) = tmp_path.glob("sessiondb-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "sessiondb/_migrations/env.py" in names
    assert "sessiondb/_migrations/script.py.mako" in names
    assert "sessiondb/_migrations/versions/0001_initial_schema.py" in names
    assert "sessiondb/py.typed" in names
    # Every subpackage (the editable install in the test's environment would hide a
    # missing one from the import below).
    for package in ("compaction", "formats", "integrations", "backends", "testing", "viewer"):
        assert f"sessiondb/{package}/__init__.py" in names, package
    assert "sessiondb/viewer/viewer.js" in names  # sessiondb serve's script

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    db = elsewhere / "wheel.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = run_python("-c", MIGRATE, str(db), cwd=elsewhere, env=env)
    assert done.stdout.strip().startswith(str(site))  # the wheel's copy, not the checkout
    tables = {
        row[0]
        for row in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert {"sessiondb_sessions", "sessiondb_records", "sessiondb_alembic_version"} <= tables
