"""Export writes only inside its output directory: a file name taken from session
metadata is used only when ``safe_name`` passes it (else the session id), and nothing is
written through a symbolic link, a FIFO or a hard link planted where a file goes."""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.corpus import CLAUDE_FILES, CORPUS, PI_FILES, corpus_present

from sessiondb import SessionStore
from sessiondb.cli import main
from sessiondb.errors import ExportPathError, InvalidInputError
from sessiondb.formats.base import MAX_NAME, safe_name
from sessiondb.transfer import export_all, export_session, import_path

# Stored names export must not take as a path; "ABS" stands for an absolute path inside
# the test's directory (never the real root).
HOSTILE = [
    "../../x",
    "ABS",
    "..",
    ".",
    "...",
    ".hidden",
    "-rf",
    "a/b",
    "a\\b",
    "nul\x00x",
    "new\nline",
    "x" * 10_000,
    "",
    "x" * (MAX_NAME + 1),
    "caf\u00e9",
    "a..b",
]

# (format, metadata of a session with name ``value``): the five names a writer takes.
KEYS: dict[str, tuple[str, Any]] = {
    "claudeCode.file": ("claude-code", lambda v: {"claudeCode": {"file": v}}),
    "claudeCode.parentFile": (
        "claude-code",
        lambda v: {"claudeCode": {"parentFile": v, "agentFile": "agent-a1.jsonl"}},
    ),
    "claudeCode.agentFile": (
        "claude-code",
        lambda v: {"claudeCode": {"parentFile": "p", "agentFile": v}},
    ),
    "pi.file": ("pi", lambda v: {"pi": {"file": v}}),
    "noumen.file": ("noumen", lambda v: {"noumen": {"file": v}}),
}


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (links not followed), relative to it."""
    found = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def area(tmp_path: Path) -> tuple[Path, Path]:
    """A tree to watch and the output directory three levels down in it."""
    watched = tmp_path / "area"
    out = watched / "a" / "b" / "out"
    out.mkdir(parents=True)
    (watched / "abs").mkdir()
    return watched, out


def hostile(value: str, watched: Path) -> str:
    return str(watched / "abs" / "x") if value == "ABS" else value


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


# -- the check ------------------------------------------------------------------------------


def test_real_names_pass() -> None:
    """Every file name in the corpus, and a pi file name of today's form, passes."""
    names = [Path(name).name for name in (*CLAUDE_FILES, *PI_FILES)]
    if corpus_present():
        names += [p.name for p in CORPUS.rglob("*.jsonl")]
        assert len(names) >= 16
    names.append("2025-01-02T10-20-30-123Z_0e3c8f1a-4b2d-4f6e-9a7c-1d2e3f4a5b6c.jsonl")
    for name in names:
        assert safe_name(name, suffix=".jsonl") == name
        stem = name.removesuffix(".jsonl")
        assert safe_name(stem) == stem
    assert safe_name("x" * MAX_NAME) == "x" * MAX_NAME


@pytest.mark.parametrize("value", [*(v for v in HOSTILE if v != "ABS"), "/abs/x", None, 7, ["x"]])
def test_hostile_names_fail(value: Any) -> None:
    assert safe_name(value) is None
    assert safe_name(value, suffix=".jsonl") is None


def test_suffix_is_required_after_a_name() -> None:
    assert safe_name("agent-a1.jsonl", suffix=".jsonl") == "agent-a1.jsonl"
    assert safe_name("agent-a1", suffix=".jsonl") is None
    assert safe_name(".jsonl", suffix=".jsonl") is None
    assert safe_name("x.jsonl.tmp", suffix=".jsonl") is None


# -- names from metadata --------------------------------------------------------------------


@pytest.mark.parametrize("key", list(KEYS))
async def test_hostile_names_fall_back_to_the_session_id(
    key: str, db_url: str, tmp_path: Path
) -> None:
    """For each hostile value of each name a writer takes from metadata, export_session,
    export_all and ``sessiondb export`` write ``<id>.jsonl`` inside the output directory
    and nothing anywhere else."""
    fmt, meta = KEYS[key]
    watched, out = area(tmp_path)
    async with SessionStore.open(db_url) as store:
        ids = {}
        for value in HOSTILE:
            session = await store.create_session(metadata=meta(hostile(value, watched)))
            await store.append(session.id, [{"role": "user", "content": "hi"}])
            ids[value] = session.id
        before = tree(watched)

        for value, sid in ids.items():
            written = await export_session(store, sid, out / "one", format=fmt)
            assert written == [out / "one" / f"{sid}.jsonl"], value
            assert written[0].read_bytes().count(b"\n") >= 1
        assert tree(out / "one") == {f"{sid}.jsonl" for sid in ids.values()}

        every = await export_all(store, out / "all", format=fmt)
        assert every == {sid: [out / "all" / f"{sid}.jsonl"] for sid in ids.values()}

    code, printed = await asyncio.to_thread(
        run, "--db", db_url, "export", "--all", "--out", str(out / "cli"), "--format", fmt
    )
    assert code == 0, printed
    assert tree(out / "cli") == {f"{sid}.jsonl" for sid in ids.values()}
    code, printed = await asyncio.to_thread(
        run, "--db", db_url, "export", *ids.values(), "--out", str(out / "cli-ids"), "--format", fmt
    )
    assert code == 0, printed
    assert tree(out / "cli-ids") == {f"{sid}.jsonl" for sid in ids.values()}

    new = tree(watched) - before
    outside = {p for p in new if not p.startswith(os.path.join("a", "b", "out") + os.sep)}
    assert outside == set()
    assert tree(watched / "abs") == set()


async def test_safe_names_are_kept(db_url: str, tmp_path: Path) -> None:
    """Names that pass the check are the file names, as a round trip needs them."""
    out = tmp_path / "out"
    async with SessionStore.open(db_url) as store:
        cc = await store.create_session(metadata={"claudeCode": {"file": "4d5611e5-241a"}})
        agent = await store.create_session(
            metadata={"claudeCode": {"parentFile": "4d5611e5-241a", "agentFile": "agent-a1.jsonl"}}
        )
        pi = await store.create_session(metadata={"pi": {"file": "2025-01-02T10-20_ab.jsonl"}})
        noumen = await store.create_session(metadata={"noumen": {"file": "n-1"}})
        assert await export_session(store, cc.id, out, "claude-code") == [
            out / "4d5611e5-241a.jsonl"
        ]
        assert await export_session(store, agent.id, out, "claude-code") == [
            out / "4d5611e5-241a" / "subagents" / "agent-a1.jsonl"
        ]
        assert await export_session(store, pi.id, out, "pi") == [out / "2025-01-02T10-20_ab.jsonl"]
        assert await export_session(store, noumen.id, out, "noumen") == [out / "n-1.jsonl"]
        lines = (out / "n-1.jsonl").read_text().splitlines()
        assert all(json.loads(line)["sessionId"] == "n-1" for line in lines)


@pytest.mark.needs_corpus
async def test_a_spotter_round_trip_keeps_its_file_names(db_url: str, tmp_path: Path) -> None:
    spotter = CORPUS / "claude-code" / "spotter"
    async with SessionStore.open(db_url) as store:
        report = await import_path(store, spotter)
        assert report.failures == []
        written = await export_all(store, tmp_path / "cc", "claude-code")
    names = {str(p.relative_to(tmp_path / "cc")) for paths in written.values() for p in paths}
    assert names == {str(p.relative_to(spotter)) for p in spotter.rglob("*.jsonl")}


async def test_a_hostile_native_metadata_file_is_data_not_a_path(
    db_url: str, tmp_path: Path
) -> None:
    """A native session directory whose metadata.json carries hostile names (and a
    hostile id) imports, and every format exports it under its session id."""
    watched, out = area(tmp_path)
    source = tmp_path / "source" / "s1"
    source.mkdir(parents=True)
    meta = {
        "id": "../../evil",
        "metadata": {
            "claudeCode": {
                "file": "../../x",
                "parentFile": str(watched / "abs"),
                "agentFile": "../y.jsonl",
            },
            "pi": {"file": str(watched / "abs" / "x.jsonl")},
            "noumen": {"file": ".."},
        },
    }
    (source / "metadata.json").write_text(json.dumps(meta))
    line = {"recordType": "message", "seq": 1, "role": "user", "content": "hi"}
    (source / "session.jsonl").write_text(json.dumps(line) + "\n")
    async with SessionStore.open(db_url) as store:
        report = await import_path(store, source, format="native")
        assert report.failures == [] and len(report.session_ids) == 1
        (sid,) = report.session_ids
        assert (await store.get_session(sid)).metadata == meta["metadata"]
        before = tree(watched)
        for fmt in ("claude-code", "pi", "noumen"):
            assert await export_session(store, sid, out / fmt, fmt) == [out / fmt / f"{sid}.jsonl"]
            assert await export_all(store, out / f"{fmt}-all", fmt) == {
                sid: [out / f"{fmt}-all" / f"{sid}.jsonl"]
            }
        assert await export_session(store, sid, out / "native", "native") == [
            out / "native" / sid / "session.jsonl",
            out / "native" / sid / "metadata.json",
        ]
    new = tree(watched) - before
    assert all(p.startswith(os.path.join("a", "b", "out")) for p in new)
    assert tree(watched / "abs") == set()


async def _session(store: SessionStore, text: str = "exported", **metadata: Any) -> str:
    session = await store.create_session(metadata=metadata or None)
    await store.append(session.id, [{"role": "user", "content": text}])
    return session.id


# -- two sessions, one name -----------------------------------------------------------------

NAMED = {
    "claude-code": lambda n: {"claudeCode": {"file": n}},
    "pi": lambda n: {"pi": {"file": f"{n}.jsonl"}},
    "noumen": lambda n: {"noumen": {"file": n}},
}


@pytest.mark.parametrize("fmt", list(NAMED))
async def test_a_name_goes_to_one_session_of_an_export(
    fmt: str, db_url: str, tmp_path: Path
) -> None:
    """Two sessions named alike: the first in id order keeps the name, the other is
    written under its id. A name that is another session's id (or differs from it only
    in case) never takes that session's file."""
    async with SessionStore.open(db_url) as store:
        texts = {}

        async def session(metadata: dict[str, Any] | None, text: str) -> str:
            sid = await _session(store, text=text, **(metadata or {}))
            texts[sid] = text
            return sid

        one = await session(NAMED[fmt]("same"), "first same")
        two = await session(NAMED[fmt]("SAME"), "second same")
        victim = await session(None, "the victim")
        thief = await session(NAMED[fmt](victim), "the thief")
        lower = await session(NAMED[fmt](victim.lower()), "the thief in lower case")
        written = await export_all(store, tmp_path / "all", fmt)
    low, high = sorted([one, two])
    assert written[low] == [tmp_path / "all" / ("same.jsonl" if low == one else "SAME.jsonl")]
    assert written[high] == [tmp_path / "all" / f"{high}.jsonl"]
    assert written[victim] == [tmp_path / "all" / f"{victim}.jsonl"]
    assert written[thief] == [tmp_path / "all" / f"{thief}.jsonl"]
    assert written[lower] == [tmp_path / "all" / f"{lower}.jsonl"]
    assert len(tree(tmp_path / "all")) == 5
    for sid, (path,) in written.items():
        assert texts[sid] in path.read_text(), sid


async def test_claude_code_names_a_file_of_another_session_cannot_take(
    db_url: str, tmp_path: Path
) -> None:
    """A stem that names a part file, or a parent directory named like a file, is not
    used: another session's file would be written over it or blocked by it."""
    async with SessionStore.open(db_url) as store:
        part = await _session(store, claudeCode={"file": "abc_part2"})
        parent = await _session(
            store, claudeCode={"parentFile": "abc.jsonl", "agentFile": "agent-a1.jsonl"}
        )
        written = await export_all(store, tmp_path, "claude-code")
    assert written == {
        part: [tmp_path / f"{part}.jsonl"],
        parent: [tmp_path / f"{parent}.jsonl"],
    }


# -- what is in the way ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["claude-code", "pi", "noumen", "native"])
async def test_a_symlink_at_the_output_path_is_refused(
    fmt: str, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    async with SessionStore.open(db_url) as store:
        sid = await _session(store)
        target = out / sid / "session.jsonl" if fmt == "native" else out / f"{sid}.jsonl"
        target.parent.mkdir(parents=True)
        target.symlink_to(victim)
        with pytest.raises(ExportPathError) as refused:
            await export_session(store, sid, out, fmt)
        assert refused.value.path == str(target)
        assert "symbolic link" in str(refused.value)
        with pytest.raises(ExportPathError):
            await export_all(store, out, fmt)
    code, printed = await asyncio.to_thread(
        run, "--db", db_url, "export", sid, "--out", str(out), "--format", fmt
    )
    assert code != 0 and printed == ""
    assert f"cannot export to {str(target)!r}: it is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    assert target.is_symlink()


async def test_a_symlinked_session_folder_or_metadata_file_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("{}\n")
    async with SessionStore.open(db_url) as store:
        sid = await _session(store)
        linked = tmp_path / "linked"
        linked.mkdir()
        (linked / sid).symlink_to(victim_dir, target_is_directory=True)
        with pytest.raises(ExportPathError, match="symbolic link"):
            await export_session(store, sid, linked)
        assert tree(victim_dir) == set()

        meta = tmp_path / "meta" / sid / "metadata.json"
        meta.parent.mkdir(parents=True)
        meta.symlink_to(victim)
        with pytest.raises(ExportPathError, match="symbolic link"):
            await export_session(store, sid, tmp_path / "meta")
        assert victim.read_text() == "{}\n" and meta.is_symlink()
        # The temporary file of the metadata's atomic write cannot be steered either.
        meta.unlink()
        temp = meta.with_name("metadata.json.tmp")
        temp.symlink_to(victim)
        written = await export_session(store, sid, tmp_path / "meta")
        assert written[1] == meta and json.loads(meta.read_text())["id"] == sid
        assert victim.read_text() == "{}\n" and not temp.exists() and not temp.is_symlink()


@pytest.mark.parametrize("linked", ["subagents", "parent"])
async def test_a_symlinked_subagent_directory_is_refused(
    linked: str, db_url: str, tmp_path: Path
) -> None:
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    out = tmp_path / "out"
    async with SessionStore.open(db_url) as store:
        sid = await _session(store, claudeCode={"parentFile": "p", "agentFile": "agent-a1.jsonl"})
        if linked == "subagents":
            (out / "p").mkdir(parents=True)
            (out / "p" / "subagents").symlink_to(victim_dir, target_is_directory=True)
        else:
            out.mkdir()
            (out / "p").symlink_to(victim_dir, target_is_directory=True)
        with pytest.raises(ExportPathError, match="symbolic link"):
            await export_session(store, sid, out, "claude-code")
        with pytest.raises(ExportPathError):
            await export_all(store, out, "claude-code")
    assert tree(victim_dir) == set()


async def test_a_fifo_or_a_hard_link_at_the_output_path_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    """A FIFO fails at once (it would block a plain open); a second link to a file would
    truncate that file: both are refused before anything is written."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    async with SessionStore.open(db_url) as store:
        sid = await _session(store)
        fifo = tmp_path / "fifo" / f"{sid}.jsonl"
        fifo.parent.mkdir()
        os.mkfifo(fifo)
        with pytest.raises(ExportPathError, match="not a regular file"):
            await export_session(store, sid, fifo.parent, "claude-code")
        hard = tmp_path / "hard" / f"{sid}.jsonl"
        hard.parent.mkdir()
        os.link(victim, hard)
        with pytest.raises(ExportPathError, match="hard link"):
            await export_session(store, sid, hard.parent, "claude-code")
        a_dir = tmp_path / "dir" / f"{sid}.jsonl"
        a_dir.mkdir(parents=True)
        with pytest.raises(ExportPathError, match="directory"):
            await export_session(store, sid, a_dir.parent, "claude-code")
    assert victim.read_text() == "precious\n"


async def test_an_existing_regular_file_is_overwritten(db_url: str, tmp_path: Path) -> None:
    """Exporting again into the same directory replaces what the last export wrote."""
    async with SessionStore.open(db_url) as store:
        sid = await _session(store)
        (tmp_path / f"{sid}.jsonl").write_text("old\n" * 1000)
        (path,) = await export_session(store, sid, tmp_path, "claude-code")
        again = await export_session(store, sid, tmp_path, "native")
    assert b"old" not in path.read_bytes() and b"exported" in path.read_bytes()
    assert again == [tmp_path / sid / "session.jsonl", tmp_path / sid / "metadata.json"]


def test_the_error_is_invalid_input() -> None:
    assert issubclass(ExportPathError, InvalidInputError)


async def test_an_output_directory_given_as_a_link_is_used(db_url: str, tmp_path: Path) -> None:
    """The directory the caller names may itself be a link (the caller's choice); only
    what lies below it is never followed."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real, target_is_directory=True)
    async with SessionStore.open(db_url) as store:
        sid = await _session(store)
        written = await export_session(store, sid, tmp_path / "via" / "deeper", "native")
    assert written[0] == tmp_path / "via" / "deeper" / sid / "session.jsonl"
    assert (real / "deeper" / sid / "session.jsonl").read_text().count("exported") == 1
