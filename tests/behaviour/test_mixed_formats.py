"""One import of a tree that mixes every file format sessiondb reads: each file is read
as its own format, a file no format recognises is reported as skipped, and each session
exports in its own format to the file it came from. Generated files of all six formats
always; the corpus of real transcripts beside them when it is there."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

from helpers.codex import codex_tree
from helpers.corpus import CORPUS, corpus_present
from helpers.formats import generated_tree, json_lines
from helpers.gemini import gemini_tree

from sessiondb import SessionStore
from sessiondb.formats import FORMATS, read_path
from sessiondb.transfer import export_session, import_path, session_id_for


def same_values(written: Path, original: Path) -> bool:
    if original.suffix == ".json":
        return bool(json.loads(written.read_bytes()) == json.loads(original.read_bytes()))
    return json_lines(written) == json_lines(original)


def mixed_tree(root: Path) -> Path:
    generated_tree(root / "generated")
    codex_tree(root / "codex")
    gemini_tree(root / "gemini")
    if corpus_present():
        shutil.copytree(CORPUS / "claude-code" / "spotter", root / "corpus" / "claude-code")
        for name in ("pi", "codex", "gemini"):
            shutil.copytree(CORPUS / name, root / "corpus" / name)
    (root / "stray" / "notes.jsonl").parent.mkdir()
    (root / "stray" / "notes.jsonl").write_text('{"hello": "world"}\n')
    (root / "stray" / "README.md").write_text("not a session\n")
    (root / "stray" / "package.json").write_text('{"name": "not a session"}\n')
    return root


async def test_one_import_reads_each_file_as_its_own_format(
    store: SessionStore, tmp_path: Path
) -> None:
    root = mixed_tree(tmp_path / "tree")
    sessions = [(s.format, s.key, s.path) for s in read_path(root)]
    formats = Counter(fmt for fmt, _, _ in sessions)
    assert set(formats) == set(FORMATS) == {
        "native", "claude-code", "pi", "noumen", "codex", "gemini",
    }  # fmt: skip
    # Each file lies under a folder named for its format (the native file is generated).
    for fmt, key, path in sessions:
        folder = path.relative_to(root).parts
        assert fmt in folder or (fmt == "native" and folder[0] == "generated"), (fmt, key)

    report = await import_path(store, root)
    assert report.failures == []
    assert len(report.session_ids) == len(sessions) == report.created
    skipped = {p.path.name: p.reason for p in report.skipped_paths}
    assert "notes.jsonl" in skipped and "no format recognises it" in skipped["notes.jsonl"]
    # A JSON file that is no Gemini document is passed over quietly: most JSON files in
    # a tree are not sessions (each native session has its metadata.json).
    assert "package.json" not in skipped and "metadata.json" not in skipped

    again = await import_path(store, root)
    assert (again.created, again.records) == (0, 0)

    # (A native session imports under an id of its own, so its export names that id:
    # tests/behaviour/test_transfer.py compares native records instead.)
    for fmt, key, path in [s for s in sessions if s[0] != "native"]:
        out = tmp_path / "out" / fmt / key.replace("/", "_").replace(":", "_")
        written = await export_session(store, session_id_for(store.namespace, key), out, format=fmt)
        (back,) = [p for p in written if p.name == path.name]
        assert same_values(back, path), (fmt, key)
