"""Imported sessions are named after the file's own title where it has one, else after
the first user message that holds more than the tools' markup; ``sessions show`` names
each non-context line by its type."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from helpers import claude_code as cc
from helpers.codex import item, line, message, meta

from sessiondb import SessionStore, cli

IDE = "# Context from my IDE setup:\n\n## My request for Codex:\n"
COMMAND = (
    "<command-message>init is analyzing your codebase…</command-message>\n"
    "<command-name>/init</command-name>"
)


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def claude_files(folder: Path) -> dict[str, Path]:
    folder.mkdir()
    talk = [
        cc.user("u1", None, COMMAND),
        cc.user("u2", "u1", "<system-reminder>a hook said so</system-reminder>"),
        cc.user("u3", "u2", "Please write the CLAUDE.md for this repository"),
        cc.assistant("a1", "u3", [cc.text("done")]),
        cc.line(type="progress", uuid="p1", parentUuid="a1", data={"step": 1}),
        cc.line(type="file-history-snapshot", messageId="a1", snapshot={}),
    ]
    summary = cc.line(type="summary", summary="Writing the CLAUDE.md", leafUuid="a1")
    custom = cc.line(type="custom-title", sessionId="s", customTitle="my own title")
    return {
        "markup": _write(folder / "markup.jsonl", talk),
        "summary": _write(folder / "summary.jsonl", [summary, *talk]),
        "custom": _write(folder / "custom.jsonl", [custom, summary, *talk]),
    }


def codex_file(folder: Path) -> Path:
    folder.mkdir()
    sid = "0199bbbb-0000-7000-8000-000000000009"
    return _write(
        folder / f"rollout-2026-05-11T11-00-00-{sid}.jsonl",
        [
            line(0, "session_meta", meta(sid, "0.125.0")),
            item(
                1, message("user", "<environment_context>\n<cwd>/x</cwd>\n</environment_context>")
            ),
            line(2, "turn_context", {"model": "gpt-5", "cwd": "/x"}),
            item(
                3,
                message(
                    "user", "# Context from my IDE setup:\n\n## My request for Codex:\nlist it"
                ),
            ),
            line(
                4,
                "event_msg",
                {
                    "type": "user_message",
                    "message": f"{IDE}list the files",
                },
            ),
            item(5, message("assistant", "here they are")),
        ],
    )


async def _names(store: SessionStore, paths: dict[str, Path]) -> dict[str, str | None]:
    names = {}
    for label, path in paths.items():
        report = await store.import_path(path, strict=True)
        assert report.created == 1 and not report.failures, report
        names[label] = (await store.get_session(report.session_ids[0])).name
    return names


async def test_imported_sessions_take_the_files_titles(db_url: str, tmp_path: Path) -> None:
    paths = {**claude_files(tmp_path / "cc"), "codex": codex_file(tmp_path / "codex")}
    async with SessionStore.open(db_url) as store:
        names = await _names(store, paths)
    assert names == {
        "markup": "Please write the CLAUDE.md for this repository",
        "summary": "Writing the CLAUDE.md",
        "custom": "my own title",
        "codex": "list the files",
    }


def test_show_names_each_entry_by_its_type(db_url: str, tmp_path: Path) -> None:
    path = claude_files(tmp_path / "cc")["markup"]

    async def setup() -> str:
        async with SessionStore.open(db_url) as store:
            return (await store.import_path(path, strict=True)).session_ids[0]

    sid = asyncio.run(setup())
    out = io.StringIO()
    assert cli.main(["--db", db_url, "sessions", "show", sid], out) == 0
    shown = out.getvalue()
    assert "── progress" in shown and "── file-history-snapshot" in shown
    assert "── entry" not in shown
    assert "Please write the CLAUDE.md for this repository" in shown.splitlines()[0]
