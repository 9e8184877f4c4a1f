"""Every format sessiondb reads and writes, from generated files: what the corpus of real
transcripts tests, made here, so that a clone with nothing beside it still round-trips
each reader and writer (Claude Code with subagents and cersei parts, pi versions 1 to 3,
noumen, native), as files and through the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.formats import GENERATED, NATIVE_ID, Generated, generated_tree, json_lines, stored

from sessiondb import SessionStore
from sessiondb.formats import FORMATS, ImportedSession, detect, read_path
from sessiondb.transfer import export_session, import_path, session_id_for


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Generated]]:
    root = tmp_path_factory.mktemp("generated")
    made = generated_tree(root)
    assert tuple(g.case for g in made) == GENERATED
    return root, {g.case: g for g in made}


def test_the_tree_reads_as_one_session_per_key_in_its_format(
    tree: tuple[Path, dict[str, Generated]],
) -> None:
    root, cases = tree
    for g in cases.values():
        fmt = detect(g.source)
        assert fmt is not None and fmt.name == g.fmt, g.case
    sessions = list(read_path(root))
    expected = sorted({(g.fmt, g.key) for g in cases.values()})
    assert sorted((s.format, s.key) for s in sessions) == expected
    for s in sessions:
        assert sum(1 for _ in s.records) > 0, s.key
        assert s.bad_lines == [], s.key
    kinds = {r.kind for s in read_path(root) for r in s.records}
    assert {"message", "entry", "compaction"} <= kinds


def _session(g: Generated) -> ImportedSession:
    (session,) = [s for s in read_path(g.source) if s.key == g.key]
    return session


@pytest.mark.parametrize("case", GENERATED)
def test_each_generated_file_round_trips_line_by_line(
    tree: tuple[Path, dict[str, Generated]], case: str, tmp_path: Path
) -> None:
    g = tree[1][case]
    info, records = stored(_session(g), NATIVE_ID)
    assert any(r.kind == "message" for r in records)
    written = FORMATS[g.fmt].write(info, records, tmp_path)
    by_name = {str(p.relative_to(tmp_path)): p for p in written}
    assert g.relative in by_name, sorted(by_name)
    assert json_lines(by_name[g.relative]) == json_lines(g.path)


@pytest.mark.parametrize("case", GENERATED)
async def test_each_generated_file_round_trips_through_the_database(
    store: SessionStore, tree: tuple[Path, dict[str, Generated]], case: str, tmp_path: Path
) -> None:
    g = tree[1][case]
    report = await import_path(store, g.source)
    assert report.failures == []
    sid = session_id_for(store.namespace, g.key)
    assert sid in report.session_ids
    written = await export_session(store, sid, tmp_path / "out", format=g.fmt)
    by_name = {str(p.relative_to(tmp_path / "out")): p for p in written}
    assert g.relative in by_name, sorted(by_name)
    assert json_lines(by_name[g.relative]) == json_lines(g.path)
