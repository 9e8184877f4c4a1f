"""The CLI over a real database: migrate, sessions list/show/rm, errors."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import run_python

from sessiondb import SessionStore
from sessiondb.cli import build_parser, main
from sessiondb.formats import EXPORT_ONLY, FORMATS

REPO = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def seed(url: str) -> tuple[str, str]:
    """A session with a tool-using conversation, and a fork of it."""

    async def go() -> tuple[str, str]:
        async with SessionStore.open(url) as store:
            info = await store.create_session(name="cli demo", model="m-1")
            await store.append(
                info.id,
                [
                    {"role": "user", "content": "list the files"},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "toolCall", "id": "c1", "name": "ls", "arguments": {"d": "."}}
                        ],
                    },
                    {
                        "role": "toolResult",
                        "toolCallId": "c1",
                        "toolName": "ls",
                        "content": [{"type": "text", "text": "a.txt\nb.txt"}],
                    },
                    {"role": "assistant", "content": "two files"},
                ],
            )
            child = await store.fork(info.id, name="cli fork")
            return info.id, child.id

    return asyncio.run(go())


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "fresh.sqlite3"
    code, out = run("--db", str(db), "migrate")
    assert code == 0
    assert "migrated" in out and "head" in out
    code, out = run("--db", str(db), "sessions", "list", "--json")
    assert code == 0
    assert json.loads(out) == {"items": [], "nextCursor": None}


def test_list_show_rm(db_url: str) -> None:
    parent, child = seed(db_url)

    code, out = run("--db", db_url, "sessions", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "LAST", "ACTIVITY"]
    assert any(parent in line and "cli demo" in line for line in lines)
    assert any(child in line and f"fork of {parent}@4" in line for line in lines)

    code, out = run("--db", db_url, "sessions", "list", "--json", "--parent", parent)
    assert code == 0
    listed = json.loads(out)
    assert [s["id"] for s in listed["items"]] == [child]
    assert listed["items"][0]["messageCount"] == 4

    code, out = run("--db", db_url, "sessions", "show", parent)
    assert code == 0
    assert "#1 user" in out and "list the files" in out
    assert '→ ls(c1) {"d": "."}' in out
    assert "#3 tool result ls(c1)" in out and "b.txt" in out

    code, out = run("--db", db_url, "sessions", "show", child, "--json")
    data = json.loads(out)
    assert data["session"]["parentId"] == parent
    assert [r["seq"] for r in data["records"]] == [1, 2, 3, 4]
    assert data["records"][2]["data"]["toolCallId"] == "c1"

    code, _ = run("--db", db_url, "sessions", "rm", parent)
    assert code == 1  # has a fork
    code, out = run("--db", db_url, "sessions", "rm", parent, "--cascade")
    assert code == 0
    assert set(out.split()) == {"deleted", parent, child}
    code, out = run("--db", db_url, "sessions", "list", "--json")
    assert json.loads(out)["items"] == []


def test_show_marks_tombstoned_records_with_all(db_url: str) -> None:
    parent, _ = seed(db_url)

    async def tombstone() -> None:
        async with SessionStore.open(db_url) as store:
            await store.tombstone(parent, 4, reason="wrong")

    asyncio.run(tombstone())
    _, out = run("--db", db_url, "sessions", "show", parent)
    assert "two files" not in out
    assert "deleted #4: wrong" in out
    _, out = run("--db", db_url, "sessions", "show", parent, "--all")
    assert "#4 assistant [deleted]" in out and "two files" in out


def test_errors_exit_non_zero_with_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.sqlite3"
    assert run("--db", str(db), "sessions", "list")[0] == 1
    assert "run `sessiondb migrate`" in capsys.readouterr().err
    assert not db.exists()  # a read never creates a database
    run("sessions", "list", "--db", str(db))  # --db after the command works too
    assert "run `sessiondb migrate`" in capsys.readouterr().err
    run("migrate", "--db", str(db))
    assert db.exists()
    assert run("--db", str(db), "sessions", "show", "not-an-id")[0] == 1
    assert "invalid session id 'not-an-id'" in capsys.readouterr().err
    assert run("--db", str(db), "sessions", "rm", "01J9Z3K7Q8R2V5X4W6Y0A1B2C3")[0] == 1
    assert "not found" in capsys.readouterr().err
    assert run("--db", "mysql://x/y", "sessions", "list")[0] == 1
    err = capsys.readouterr().err
    assert "unsupported database 'mysql'" in err
    assert len(err.strip().splitlines()) == 1  # one line, no traceback


def test_python_dash_m_uses_sessiondb_url(tmp_path: Path) -> None:
    db = tmp_path / "env.sqlite3"
    env = {**os.environ, "SESSIONDB_URL": str(db)}
    run_python("-m", "sessiondb", "migrate", env=env, cwd=tmp_path)
    assert db.exists()
    done = run_python("-m", "sessiondb", "sessions", "list", "--json", env=env, cwd=tmp_path)
    assert json.loads(done.stdout)["items"] == []


def test_a_reader_that_goes_away_ends_the_listing_without_a_traceback(tmp_path: Path) -> None:
    """``sessiondb sessions list | head -1``: the pipe's reader is gone before the
    listing writes (its end closed first), and the command exits as a shell reports a
    command SIGPIPE killed, saying nothing."""
    db = tmp_path / "piped.sqlite3"
    env = {**os.environ, "SESSIONDB_URL": str(db)}
    run_python("-m", "sessiondb", "migrate", env=env, cwd=tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sessiondb", "sessions", "list"],
            env=env,
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


def test_quickstart_runs_on_the_default_sqlite_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SESSIONDB_URL"}
    done = run_python("-m", "sessiondb.quickstart", env=env, cwd=tmp_path)
    assert (tmp_path / "sessiondb.sqlite3").exists()
    assert "toolResult: Buy milk. / Call Ada about the demo." in done.stdout
    assert "read({'path': 'notes.txt'})" in done.stdout


@pytest.mark.parametrize("command", ["import", "export"])
def test_format_choices_come_from_the_registry(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI offers exactly the registered file formats (and auto, to import; the
    export-only formats, to export)."""
    argv = [command, "--format", "nope", "x"] + (["--out", "o"] if command == "export" else [])
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    choices = ["auto", *FORMATS] if command == "import" else [*FORMATS, *EXPORT_ONLY]
    expected = ", ".join(repr(name) for name in choices)
    assert f"invalid choice: 'nope' (choose from {expected})" in capsys.readouterr().err
