"""SQLite's writer thread hands back values, never a cursor.

A ``sqlite3`` cursor freed on another thread resets its statement there, and Python
3.11's ``sqlite3`` can then skip the reset of the cached statement that the writer is
running at that moment: its next bind fails with "bad parameter or other API misuse".
Which thread drops the last reference to a result handed back through a future is not
fixed, and a cursor among the results made a 2,000,002-record streamed import fail in
3 runs of 6 beside other work (none in 6 once no cursor was handed back). This test
watches what the store's threads hand back.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from helpers.import_memory_probe import cc_line

from sessiondb import SessionStore, transfer


@pytest.fixture
def handed_back() -> Iterator[list[str]]:
    """The names of the functions whose value a pool thread handed back as a cursor
    (threads started while the fixture is active are watched)."""
    found: list[str] = []

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        caller = frame.f_back
        if (
            event == "return"
            and isinstance(arg, sqlite3.Cursor)
            and caller is not None
            and caller.f_code.co_name == "run"
            and caller.f_code.co_filename.endswith("thread.py")
        ):
            found.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")

    threading.setprofile(watch)
    try:
        yield found
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]


async def test_no_cursor_leaves_a_pool_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handed_back: list[str]
) -> None:
    monkeypatch.setattr(transfer.importer, "STREAM_RECORDS", 5)
    monkeypatch.setattr(transfer.importer, "STREAM_CHARS", 1_000)
    path = tmp_path / "s.jsonl"
    lines = [cc_line("u0", None, "user", "hello")]
    lines += [cc_line(f"u{i}", f"u{i - 1}", "user", "x" * 100) for i in range(1, 60)]
    path.write_bytes(b"".join(lines))
    async with SessionStore.open(str(tmp_path / "db.sqlite3")) as store:
        await store.migrate()
        report = await store.import_path(path, format="claude-code")
        assert report.failures == [] and report.records == 60
        sid = report.session_ids[0]
        await store.append(sid, [{"role": "user", "content": "y" * 100_000}])
        assert len(await store.records(sid)) == 61
    assert handed_back == []
