"""Import reads what it was given, and only regular files; its memory is bounded by the
record limit, not by the file.

Every hostile tree is built at run time under ``tmp_path``: links out of the tree and
inside it, link loops, FIFOs (a FIFO opened for reading waits for a writer: a test that
hangs here is a failure, so each such test runs under an alarm), sockets, a link to
``/dev/zero``, a ``...jsonl`` file, a tree 1,100 directories deep, a line over
``max_record_bytes`` and 2,000,000 bad lines. Peak memory is measured in a child
process (``helpers/import_memory_probe.py``), on SQLite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import sql
from helpers.import_memory_probe import (
    bad_lines_file,
    cc_line,
    huge_gemini_document,
    huge_line_file,
)

import sessiondb
from sessiondb import ImportFormatError, InvalidInputError, SessionStore
from sessiondb.config import DEFAULT_MAX_RECORD_BYTES
from sessiondb.formats import BAD_LINES_KEPT, base, read_path
from sessiondb.formats.base import MAX_LINE_BYTES, REASON_CHARS
from sessiondb.transfer import ImportReport, SkippedPath

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
NOT_FOLLOWED = "symbolic link (not followed)"
OUTSIDE = "symbolic link to outside the import root"
LOOP = "directory already visited (link loop)"
AGAIN = "directory already visited"
# Long enough for any of these imports on a loaded machine; it only turns a hang into
# a failure (it asserts nothing about time).
HANG_GUARD_SECONDS = 120


class Hung(Exception):
    pass


@contextmanager
def no_hang() -> Iterator[None]:
    """Raise :class:`Hung` in place of waiting forever (a FIFO's open, a loop)."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hung(f"still running after {HANG_GUARD_SECONDS} s: it hangs")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_GUARD_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def line(uuid: str, parent: str | None, role: str, text: str) -> str:
    return cc_line(uuid, parent, role, text).decode().rstrip("\n")


def session_file(path: Path, *texts: str) -> Path:
    """A Claude Code file of one user line per text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines, parent = [], None
    for i, text in enumerate(texts):
        lines.append(line(f"{path.stem}-{i}", parent, "user", text))
        parent = f"{path.stem}-{i}"
    path.write_text("\n".join(lines) + "\n")
    return path


def skipped(report: ImportReport) -> dict[Path, str]:
    return {s.path: s.reason for s in report.skipped_paths}


async def stored_texts(store: SessionStore) -> str:
    """Every payload stored, as one text to search."""
    rows = await sql.fetch(store, "SELECT payload FROM sessiondb_records")
    return "\n".join(str(r[0]) for r in rows)


# -- links ---------------------------------------------------------------------------------


@sqlite_only
async def test_a_link_to_a_file_outside_the_tree_is_never_read(
    store: SessionStore, tmp_path: Path
) -> None:
    # A file standing in for /etc/passwd, shaped so that a reader would take it.
    secret = session_file(tmp_path / "outside" / "passwd.jsonl", "root:x:0:0:SECRET")
    tree = tmp_path / "tree"
    session_file(tree / "mine.jsonl", "hello")
    (tree / "session.jsonl").symlink_to(secret)
    (tree / "up").symlink_to(secret.parent)  # a directory outside
    (tree / "dangling.jsonl").symlink_to(tree / "nothing.jsonl")

    report = await store.import_path(tree)
    assert report.created == 1 and report.failures == []
    assert skipped(report) == {
        tree / "session.jsonl": NOT_FOLLOWED,
        tree / "up": NOT_FOLLOWED,
        tree / "dangling.jsonl": NOT_FOLLOWED,
    }
    followed = await store.import_path(tree, follow_symlinks=True)
    assert skipped(followed) == {
        tree / "session.jsonl": OUTSIDE,
        tree / "up": OUTSIDE,
        tree / "dangling.jsonl": "symbolic link to nothing (broken, or a loop)",
    }
    assert followed.created == 0 and followed.skipped == 1
    assert "SECRET" not in await stored_texts(store)
    assert "hello" in await stored_texts(store)


@sqlite_only
async def test_a_link_inside_the_tree_is_followed_only_when_asked(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "main.jsonl", "main")
    # main/ belongs to main.jsonl (its subagents), so the walk does not enter it; a
    # file there is reached only through the link.
    extra = session_file(tree / "main" / "extra.jsonl", "EXTRA")
    (tree / "notes").mkdir()
    (tree / "notes" / "extra.jsonl").symlink_to(extra)
    (tree / "alias").symlink_to(tree / "notes")  # a second way into notes/

    report = await store.import_path(tree)
    assert report.created == 1
    assert skipped(report) == {
        tree / "alias": NOT_FOLLOWED,
        tree / "notes" / "extra.jsonl": NOT_FOLLOWED,
    }
    assert "EXTRA" not in await stored_texts(store)

    followed = await store.import_path(tree, follow_symlinks=True)
    assert (followed.created, followed.skipped) == (1, 1)
    assert skipped(followed) == {tree / "alias": AGAIN}
    assert "EXTRA" in await stored_texts(store)


def test_read_path_reports_what_it_passes_over(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "a.jsonl", "a")
    (tree / "b.jsonl").symlink_to(tree / "a.jsonl")
    passed: list[SkippedPath] = []
    sessions = list(read_path(tree, skipped=passed))
    assert [s.path for s in sessions] == [tree / "a.jsonl"]
    assert passed == [SkippedPath(tree / "b.jsonl", NOT_FOLLOWED)]
    assert str(passed[0]) == f"{tree / 'b.jsonl'}: {NOT_FOLLOWED}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        passed[0].reason = "x"  # type: ignore[misc]
    assert sessiondb.SkippedPath is SkippedPath


@sqlite_only
async def test_self_linked_directories_end_and_are_reported(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "s.jsonl", "once")
    (tree / "l1").symlink_to(".")
    (tree / "l2").symlink_to(".")
    with no_hang():
        report = await store.import_path(tree)
        followed = await store.import_path(tree, follow_symlinks=True)
    assert report.created == 1 and report.files == 1
    assert skipped(report) == {tree / "l1": NOT_FOLLOWED, tree / "l2": NOT_FOLLOWED}
    assert followed.files == 1 and followed.skipped == 1
    assert skipped(followed) == {tree / "l1": LOOP, tree / "l2": LOOP}


def test_a_root_that_is_a_link_is_followed(tmp_path: Path) -> None:
    real = session_file(tmp_path / "real" / "a.jsonl", "a")
    (tmp_path / "named").symlink_to(tmp_path / "real")
    (session,) = read_path(tmp_path / "named")
    assert session.path == real
    (tmp_path / "file.jsonl").symlink_to(real)
    (again,) = read_path(tmp_path / "file.jsonl")
    assert again.path == real


# -- FIFOs, sockets, devices -------------------------------------------------------------------


@sqlite_only
async def test_a_fifo_named_like_a_session_is_not_opened(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "a.jsonl", "a")
    os.mkfifo(tree / "session.jsonl")
    native = tree / "native"
    native.mkdir()
    os.mkfifo(native / "session.jsonl")
    (native / "metadata.json").write_text('{"id": "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"}')
    with no_hang():
        report = await store.import_path(tree)
    assert report.created == 1 and report.failures == []
    assert skipped(report) == {tree / "session.jsonl": "FIFO", native / "session.jsonl": "FIFO"}
    with no_hang(), pytest.raises(InvalidInputError, match="FIFO, not a regular file"):
        await store.import_path(tree / "session.jsonl")


@sqlite_only
async def test_a_fifo_part_file_is_not_opened(store: SessionStore, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "abc.jsonl", "one", "two")
    os.mkfifo(tree / "abc_part2.jsonl")
    os.mkfifo(tree / "xyz_part2.jsonl")  # a part file without its main file
    with no_hang():
        report = await store.import_path(tree)
        (session,) = read_path(tree / "abc.jsonl")
        assert len(list(session.records)) == 2
    assert report.created == 1 and report.records == 2 and report.failures == []
    assert skipped(report) == {tree / "abc_part2.jsonl": "FIFO", tree / "xyz_part2.jsonl": "FIFO"}


@sqlite_only
async def test_a_fifo_subagent_file_is_not_opened(store: SessionStore, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "abc.jsonl", "main")
    agents = tree / "abc" / "subagents"
    session_file(agents / "agent-1.jsonl", "agent one")
    os.mkfifo(agents / "agent-2.jsonl")
    (agents / "agent-3.jsonl").symlink_to(tree / "abc.jsonl")
    with no_hang():
        report = await store.import_path(tree)
    assert report.created == 2 and report.failures == []
    assert skipped(report) == {
        agents / "agent-2.jsonl": "FIFO",
        agents / "agent-3.jsonl": NOT_FOLLOWED,
    }


@sqlite_only
async def test_sockets_and_a_link_to_dev_zero_are_passed_over(
    store: SessionStore, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    session_file(tree / "a.jsonl", "a")
    (tree / "zero.jsonl").symlink_to("/dev/zero")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tree / "sock.jsonl"))
        with no_hang():
            report = await store.import_path(tree)
            followed = await store.import_path(tree, follow_symlinks=True)
    finally:
        server.close()
    assert report.created == 1
    assert skipped(report) == {tree / "zero.jsonl": NOT_FOLLOWED, tree / "sock.jsonl": "socket"}
    assert skipped(followed) == {tree / "zero.jsonl": OUTSIDE, tree / "sock.jsonl": "socket"}


@sqlite_only
async def test_a_device_root_is_invalid_input(store: SessionStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="character device, not a regular file or a dir"):
        await store.import_path("/dev/zero")
    with pytest.raises(InvalidInputError, match="character device"):
        list(read_path(Path("/dev/zero")))
    (tmp_path / "zero").symlink_to("/dev/zero")  # a root link is followed, then checked
    with pytest.raises(InvalidInputError, match="character device"):
        await store.import_path(tmp_path / "zero")
    with pytest.raises(InvalidInputError, match="no such file"):
        await store.import_path(tmp_path / "missing")


# -- names -----------------------------------------------------------------------------------


@sqlite_only
async def test_a_dot_dot_stem_reads_nothing_outside_its_directory(
    store: SessionStore, tmp_path: Path
) -> None:
    # parent/subagents/ is where "<tree>/../subagents" would lead for the stem "..".
    session_file(tmp_path / "subagents" / "agent-x.jsonl", "OUTSIDE AGENT")
    tree = tmp_path / "tree"
    dots = session_file(tree / "...jsonl", "dots")
    (session,) = read_path(dots)
    assert session.path == dots and len(list(session.records)) == 1
    report = await store.import_path(tree)
    assert report.created == 1 and len(report.session_ids) == 1
    texts = await stored_texts(store)
    assert "dots" in texts and "OUTSIDE AGENT" not in texts


# -- depth -----------------------------------------------------------------------------------


@sqlite_only
async def test_a_tree_1100_directories_deep_imports(store: SessionStore, tmp_path: Path) -> None:
    deep = tmp_path / "tree"
    deep.mkdir()
    here = os.getcwd()
    os.chdir(deep)  # build it relative: each mkdir is one short path
    try:
        for _ in range(1100):
            os.mkdir("d")
            os.chdir("d")
        Path("bottom.jsonl").write_text(line("u", None, "user", "at the bottom") + "\n")
        os.chdir(here)
        report = await store.import_path(deep)
        assert report.created == 1 and report.failures == []
        assert "at the bottom" in await stored_texts(store)
    finally:
        os.chdir(here)
        remove_chain(deep)


def remove_chain(top: Path) -> None:
    """Remove a chain of ``d`` directories from its bottom up, without recursion:
    pytest's clean-up of old temporary directories recurses, and a tree this deep
    would make it fail (in whichever later test run happens to clean up)."""
    here = os.getcwd()
    os.chdir(top)
    depth = 0
    try:
        while os.path.isdir("d"):
            os.chdir("d")
            depth += 1
        for name in os.listdir("."):
            os.unlink(name)
        for _ in range(depth):
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(here)


# -- lines -----------------------------------------------------------------------------------

LIMIT = 1024 * 1024


@pytest.fixture
async def small(store_url: str) -> AsyncIterator[SessionStore]:
    async with SessionStore.open(store_url, max_record_bytes=LIMIT) as s:
        yield s


@sqlite_only
async def test_a_line_over_the_limit_is_skipped_and_reported(
    small: SessionStore, tmp_path: Path
) -> None:
    path = huge_line_file(tmp_path / "huge.jsonl", 3)
    report = await small.import_path(path)
    assert report.failures == [] and report.created == 1
    assert report.records == 2 and report.bad_line_count == 1
    assert [str(b) for b in report.bad_lines] == [
        f"{path}:2: the line is over {LIMIT} bytes, the store's max_record_bytes"
    ]
    (sid,) = report.session_ids
    texts = [r.message.text() for r in await small.records(sid) if r.message]
    assert texts == ["hello", "bye"]

    strict = tmp_path / "strict.jsonl"
    path.rename(strict)
    refused = await small.import_path(strict, strict=True)
    (failure,) = refused.failures
    assert str(failure).startswith(f"{strict}:2: the line is over {LIMIT} bytes")
    token = MAX_LINE_BYTES.set(LIMIT)  # what an import on this store sets
    try:
        with pytest.raises(ImportFormatError, match=r"strict.jsonl:2: the line is over"):
            for session in read_path(strict, strict=True):
                list(session.records)
    finally:
        MAX_LINE_BYTES.reset(token)


def test_bad_lines_are_counted_and_the_first_100_kept_cut_short(tmp_path: Path) -> None:
    folder = tmp_path / "native"
    folder.mkdir()
    (folder / "metadata.json").write_text('{"id": "01J9Z3K7Q8R2V5X4W6Y0A1B2C3"}')
    # An unknown recordType is quoted in the reason: 10,000 characters of it.
    bad = json.dumps({"recordType": "x" * 10_000}) + "\n"
    (folder / "session.jsonl").write_text(bad * 250)
    (session,) = read_path(folder)
    assert len(list(session.records)) == 250  # kept as raw entries, all of them
    assert session.bad_line_count == 250
    assert len(session.bad_lines) == BAD_LINES_KEPT == 100
    assert [b.line for b in session.bad_lines] == list(range(1, 101))
    assert all(len(b.reason) <= REASON_CHARS for b in session.bad_lines)


def test_detection_passes_a_long_first_line_over_unread(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "long.jsonl"
    with path.open("wb") as out:  # a 32 MB first line, under the default record limit
        out.write(b'{"type": "user", "pad": "')
        for _ in range(32):
            out.write(b"p" * (1024 * 1024))
        out.write(b'"}\n')
        out.write((line("u1", None, "user", "hi") + "\n").encode())
    tracemalloc.start()
    try:
        values = base.sniff_values(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [v["uuid"] for v in values] == ["u1"]  # the long line was not parsed
    # A line is read in pieces of up to SNIFF_LINE_BYTES, joined once: at most twice
    # that is held (8 MB), never the 32 MB line.
    assert peak < 3 * base.SNIFF_LINE_BYTES, peak


def _probe(db: Path, path: Path, limit: int, fmt: str = "claude-code") -> dict[str, Any]:
    """Import ``path`` in a child process; its peak memory and report."""
    script = Path(__file__).parents[1] / "helpers" / "import_memory_probe.py"
    done = subprocess.run(
        [sys.executable, str(script), str(db), str(path), str(limit), fmt],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


# A child process importing a small file peaks at about 60 MB; before the change the
# 200 MB line peaked at 488 MB and the 2,000,000 bad lines at 603 MB.
PEAK_BOUND_KB = 150 * 1024


def test_a_200_mb_line_is_never_held_whole(tmp_path: Path) -> None:
    path = huge_line_file(tmp_path / "huge.jsonl", 200)
    result = _probe(tmp_path / "huge.sqlite3", path, LIMIT)
    assert result["failures"] == [] and result["created"] == 1 and result["records"] == 2
    assert result["bad_line_count"] == 1
    assert result["first_bad_line"] == (
        f"{path}:2: the line is over {LIMIT} bytes, the store's max_record_bytes"
    )
    assert result["maxrss_kb"] < PEAK_BOUND_KB, result


def test_2_000_000_bad_lines_keep_100(tmp_path: Path) -> None:
    path = bad_lines_file(tmp_path / "bad.jsonl", 2_000_000)
    result = _probe(tmp_path / "bad.sqlite3", path, LIMIT)
    assert result["failures"] == [] and result["created"] == 1
    assert result["records"] == 2_000_002  # the bad lines are kept as raw entries
    assert result["bad_line_count"] == 2_000_000
    assert result["bad_lines_kept"] == BAD_LINES_KEPT
    assert result["first_bad_line"].startswith(f"{path}:2: not valid JSON")
    assert result["maxrss_kb"] < PEAK_BOUND_KB, result


# What a line or a document over the limit may cost beyond the child's start (VmHWM just
# before the import): a quarter of the default max_record_bytes, so a test failing here
# means part of the limit was held. A line is measured 1 MB at a time before it is read;
# measured: 8 MB for the 150 MB line (131 MB before), 5 MB for the 300 MB document (259
# MB before, when 4x the limit was read before the size was known).
OVER_LIMIT_COST_KB = DEFAULT_MAX_RECORD_BYTES // 4 // 1024


def test_a_150_mb_line_over_the_default_limit_is_not_held_up_to_the_limit(
    tmp_path: Path,
) -> None:
    path = huge_line_file(tmp_path / "huge.jsonl", 150)
    result = _probe(tmp_path / "huge.sqlite3", path, DEFAULT_MAX_RECORD_BYTES)
    assert result["failures"] == [] and result["created"] == 1 and result["records"] == 2
    assert result["first_bad_line"] == (
        f"{path}:2: the line is over {DEFAULT_MAX_RECORD_BYTES} bytes, the store's max_record_bytes"
    )
    assert result["maxrss_kb"] - result["start_kb"] < OVER_LIMIT_COST_KB, result


def test_a_300_mb_gemini_document_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = huge_gemini_document(tmp_path / "session-2026-01-01T00-00-memo0001.json", 300)
    result = _probe(tmp_path / "doc.sqlite3", path, DEFAULT_MAX_RECORD_BYTES, "gemini")
    # One value read whole: over the limit, the session fails (nothing written).
    assert result["created"] == 0 and result["records"] == 0
    (failure,) = result["failures"]
    assert failure.startswith(
        f"{path}:1: the document is over {DEFAULT_MAX_RECORD_BYTES} bytes, the store's "
        "max_record_bytes"
    )
    assert result["maxrss_kb"] - result["start_kb"] < OVER_LIMIT_COST_KB, result
