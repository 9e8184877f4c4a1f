"""``sessiondb compact`` over a real database: dry run, compaction, a summarizer by name."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from helpers.compaction import tool_turn

from sessiondb import SessionStore
from sessiondb.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def seed(url: str, turns: int = 8) -> str:
    async def go() -> str:
        async with SessionStore.open(url) as store:
            info = await store.create_session()
            await store.append(info.id, [m for n in range(turns) for m in tool_turn(n, 400)])
            return info.id

    return asyncio.run(go())


def compactions(url: str, session_id: str) -> int:
    async def go() -> int:
        async with SessionStore.open(url) as store:
            return len(await store.records(session_id, kinds=("compaction",)))

    return asyncio.run(go())


async def shouting(system: str, prompt: str, max_tokens: int) -> str:
    """A summarizer loaded by name in the test below."""
    return "## Goal\nSHOUTED"


def test_dry_run_prints_the_plan_and_writes_nothing(db_url: str) -> None:
    sid = seed(db_url)
    code, out = run("--db", db_url, "compact", sid, "--keep-recent-tokens", "200", "--dry-run")
    assert code == 0
    assert out.startswith(f"session {sid}: would keep messages from #")
    assert "  read: src/f0.py" in out
    code, out = run(
        "--db", db_url, "compact", sid, "--keep-recent-tokens", "200", "--dry-run", "--json"
    )
    data = json.loads(out)
    assert data["dryRun"] and data["firstKeptSeq"] > 1 and data["tokensBefore"] > 0
    assert compactions(db_url, sid) == 0


def test_compact_writes_the_overlay_with_the_named_summarizer(db_url: str) -> None:
    sid = seed(db_url)
    code, out = run(
        "--db", db_url, "compact", sid, "--keep-recent-tokens", "200",
        "--summarizer", "test_compaction_cli:shouting", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["compacted"] and data["tokensAfter"] < data["tokensBefore"]
    assert compactions(db_url, sid) == 1

    async def summary() -> str:
        async with SessionStore.open(db_url) as store:
            return (await store.context(sid))[0].text()

    assert "SHOUTED" in asyncio.run(summary())


def test_nothing_to_compact_and_a_bad_summarizer(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = seed(db_url, turns=1)
    assert run("--db", db_url, "compact", sid) == (0, f"session {sid}: nothing to compact\n")
    code, _ = run("--db", db_url, "compact", sid, "--summarizer", "no_such_module:x")
    assert code == 1
    assert "cannot load it" in capsys.readouterr().err
    assert compactions(db_url, sid) == 0
