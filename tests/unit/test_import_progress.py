"""`sessiondb import` reports progress on stderr: a rich bar when stderr is a terminal
(the ``sessiondb[progress]`` extra), plain lines otherwise."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sessiondb import cli_transfer
from sessiondb.transfer import ImportProgress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _steps(total: int) -> list[ImportProgress]:
    return [
        ImportProgress(Path(f"s{i}.jsonl"), i, total, 10 * i, i, 0, 0) for i in range(1, total + 1)
    ]


def test_a_terminal_gets_a_bar_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich.progress", reason="the bar needs sessiondb[progress] (rich)")
    err = _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    with cli_transfer.ImportBar("corpus/") as progress:
        assert progress._bar is not None
        for step in _steps(3):
            progress(step)
        task = progress._bar.tasks[0]
        assert (task.completed, task.total, task.fields["records"]) == (3, 3, 30)
    assert err.getvalue()  # drawn on stderr, not on stdout


def test_without_a_terminal_plain_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with cli_transfer.ImportBar("corpus/") as progress:
        assert progress._bar is None
        for step in _steps(2):
            progress(step)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "[1/2] s1.jsonl: 10 records, 1 created, 0 skipped, 0 failed",
        "[2/2] s2.jsonl: 20 records, 2 created, 0 skipped, 0 failed",
    ]
