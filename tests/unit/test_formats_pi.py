"""pi session files, versions 1 to 3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.corpus import CORPUS
from helpers.formats import count_disk_maps, json_lines, stored
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb.formats import FORMATS, detect, pi, read_path

PI = FORMATS["pi"]
LARGE = CORPUS / "pi" / "pi-mono" / "large-session.jsonl"


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "timestamp": "2025-11-20T23:33:01.550Z",
        "message": {"role": role, "content": text, "timestamp": 1},
        **extra,
    }


@pytest.mark.needs_corpus
def test_the_corpus_session_round_trips(tmp_path: Path) -> None:
    assert detect(LARGE) is PI
    (session,) = read_path(LARGE, strict=True)
    info, records = stored(session)
    assert session.key == "pi:d703a1a9-1b7b-4fb1-b512-c9738b1fe617"
    assert info.model == "claude-sonnet-4-5"
    kinds = [r.kind for r in records]
    assert kinds.count("message") == 453 + 373 + 88 and kinds.count("entry") == 104
    roles = {r.message.role for r in records if r.message is not None}
    assert roles == {"user", "assistant", "toolResult"}
    (out,) = PI.write(info, records, tmp_path)
    assert out.name == LARGE.name
    assert json_lines(out) == json_lines(LARGE)


def test_v1_compaction_by_index_counts_the_header(tmp_path: Path) -> None:
    header = {"type": "session", "id": "s1", "timestamp": "2025-11-20T23:33:50.805Z"}
    path = write(
        tmp_path / "v1.jsonl",
        [
            header,
            msg("user", "one"),  # index 1, position 0
            msg("assistant", "two"),  # index 2, position 1
            msg("user", "three"),  # index 3, position 2
            {
                "type": "compaction",
                "timestamp": "2025-11-20T23:34:00Z",
                "summary": "S",
                "firstKeptEntryIndex": 3,
                "tokensBefore": 42,
            },
            msg("user", "four"),
        ],
    )
    info, records = stored(next(read_path(path, strict=True)))
    compaction = records[3].compaction
    assert compaction is not None and compaction.first_kept_seq == 3
    assert records[2].message is not None and records[2].message.text() == "three"
    assert compaction.tokens_before == 42
    assert records[0].message is not None and records[0].message.content[0].type == "text"
    (out,) = PI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_v3_tree_keeps_the_last_branch_and_compaction_by_id(tmp_path: Path) -> None:
    header = {"type": "session", "version": 3, "id": "s3", "timestamp": "2025-11-20T23:33:50Z"}
    path = write(
        tmp_path / "v3.jsonl",
        [
            header,
            msg("user", "one", id="a", parentId=None),
            msg("assistant", "old", id="b", parentId="a"),
            msg("assistant", "new", id="c", parentId="a"),
            {"type": "label", "id": "l", "parentId": "c", "targetId": "c", "label": "x"},
            {
                "type": "compaction",
                "id": "d",
                "parentId": "l",
                "summary": "S",
                "firstKeptEntryId": "c",
                "tokensBefore": 9,
            },
            msg("user", "after", id="e", parentId="d"),
        ],
    )
    info, records = stored(next(read_path(path, strict=True)))
    assert [r.kind for r in records] == [
        "message",
        "message",
        "message",
        "entry",
        "compaction",
        "message",
        "tombstone",
    ]
    assert [r.uuid for r in records[:6]] == ["a", "b", "c", "l", "d", "e"]
    tombstone = records[6].tombstone
    assert tombstone is not None and tombstone.target_seq == 2  # "old" is off the branch
    compaction = records[4].compaction
    assert compaction is not None and compaction.first_kept_seq == 3
    (out,) = PI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def test_an_unknown_role_is_kept_as_an_entry(tmp_path: Path) -> None:
    header = {"type": "session", "version": 2, "id": "s", "timestamp": "2025-11-20T23:33:50Z"}
    path = write(tmp_path / "x.jsonl", [header, msg("bashExecution", "ls", id="a")])
    info, records = stored(next(read_path(path)))
    assert [r.kind for r in records] == ["entry"]
    (out,) = PI.write(info, records, tmp_path / "out")
    assert json_lines(out) == json_lines(path)


def big_tree(path: Path, count: int) -> Path:
    """A version 3 file of about ``count`` entries, for reading past the spill threshold:
    a chain that rewinds every 40 entries (24 messages leave the branch each time),
    forward links, repeated ids, a self-parent, ids that cannot be keys, compactions
    whose ``firstKeptEntryId`` names an entry read long before (or none), other entries.
    """
    header = {
        "type": "session",
        "version": 3,
        "id": "big",
        "timestamp": "2025-11-20T23:33:50Z",
        "modelId": "m1",
    }
    lines: list[dict[str, Any]] = [header]
    ids: list[str] = []  # of the entries on the chain, in file order

    def add(line: dict[str, Any]) -> None:
        lines.append(line)
        ids.append(line["id"])

    for i in range(count):
        entry_id = f"e{i}"
        last = ids[-1] if ids else None
        parent = ids[-25] if i % 40 == 39 else last  # a rewind
        role = "user" if i % 2 else "assistant"
        if i % 500 == 499:
            add(
                {
                    "type": "compaction",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": "2025-11-20T23:34:00Z",
                    "summary": f"summary {i}",
                    "firstKeptEntryId": ids[-300] if i % 1000 != 999 else "nowhere",
                    "tokensBefore": i,
                }
            )
        elif i % 97 == 50:  # a forward link: the parent comes on the next line
            lines.append(msg(role, f"before its parent {i}", id=entry_id, parentId=f"f{i}"))
            lines.append(msg(role, f"the parent {i}", id=f"f{i}", parentId=parent))
            ids.append(entry_id)
        elif i % 89 == 10 and i > 100:  # an id read before: no key, no node
            lines.append(msg(role, f"again {i}", id=f"e{i - 60}", parentId=parent))
        elif i % 11 == 3:
            add({"type": "model_change", "id": entry_id, "parentId": parent, "modelId": "m2"})
        elif i % 13 == 4:
            lines.append({"type": "label", "timestamp": "2025-11-20T23:34:00Z", "label": "x"})
        else:
            add(msg(role, f"{role} {i}", id=entry_id, parentId=parent))
    lines.insert(10, msg("user", "self", id="self", parentId="self"))
    lines.insert(20, msg("user", "empty id", id="", parentId="e3"))
    lines.insert(30, msg("user", "number id", id=7, parentId="e4"))
    lines.insert(40, msg("user", "surrogate id", id="x\udc80", parentId="e5"))
    lines.append(msg("user", "the end", id="last", parentId=ids[-1]))
    return write(path, lines)


def test_a_file_past_the_spill_threshold_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = big_tree(tmp_path / "big.jsonl", 3_000)

    def read() -> tuple[Any, ...]:
        (session,) = read_path(path, strict=True)
        records = list(session.records)
        return session.key, records, session.details, session.bad_lines

    in_memory = read()
    kinds = [r.kind for r in in_memory[1]]
    assert kinds.count("tombstone") > 1_000 and kinds.count("compaction") == 3
    assert len(kinds) > 3_000
    made = count_disk_maps(monkeypatch, pi, threshold=20)
    assert read() == in_memory
    assert len(made) == 2  # the id index and the forward links moved to disk


# Reads a pi file in a process of its own and prints how far its peak resident set
# (VmHWM, which tracemalloc cannot see past: SQLite's page cache) rose over the read.
_PEAK = """
import sys
from pathlib import Path
from sessiondb.formats import read_path, spill

def status(field):
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

spill.SPILL_ENTRIES = 2_000
before = status("VmRSS")
(session,) = read_path(Path(sys.argv[1]), format="pi")
count = sum(1 for _ in session.records)
print(count, status("VmHWM") - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's VmHWM")
def test_a_big_file_reads_in_flat_resident_memory(tmp_path: Path) -> None:
    """Four times the lines past the spill threshold raise the peak by the arrays only
    (17 bytes a line, 1 MB here); the dicts they replace took ~430 bytes a line (26 MB)."""

    def growth(count: int) -> int:
        path = tmp_path / f"big-{count}.jsonl"
        header = {"type": "session", "version": 3, "id": "s", "timestamp": "2025-11-20T23:33:50Z"}
        with path.open("w") as out:
            out.write(json.dumps(header) + "\n")
            for i in range(count):
                line = msg("user", f"m{i}", id=f"e{i:08d}", parentId=f"e{i - 1:08d}" if i else None)
                out.write(json.dumps(line) + "\n")
        run = subprocess.run(
            [sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, check=True
        )
        read, peak = map(int, run.stdout.split())
        assert read == count
        return peak

    small, big = growth(20_000), growth(80_000)
    assert big - small < 8_000_000, (small, big)


_IDS = st.sampled_from(["a", "b", "c", "d", "a", "b", "", "x\udc80", None, 0])
_TREE_LINE = st.builds(
    lambda kind, entry_id, parent: (
        msg(kind, f"{kind} text", id=entry_id, parentId=parent)
        if kind in ("user", "assistant")
        else {"type": kind, "id": entry_id, "parentId": parent}
    ),
    st.sampled_from(["user", "assistant", "label"]),
    _IDS,
    _IDS,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_TREE_LINE, max_size=12))
def test_fuzzed_trees_hide_what_is_off_the_branch_spilled_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[dict[str, Any]]
) -> None:
    """Repeated ids, forward links, cycles, self-parents, ids that are not text: the
    messages hidden are those the ids say are off the last id's branch, and a read
    with its indexes on disk from the first entry gives the same records."""
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "2025-11-20T23:33:50Z"}
    path = write(tmp_path / "tree.jsonl", [header, *lines])
    (session,) = read_path(path)
    records = list(session.records)
    body, tombstones = records[: len(lines)], records[len(lines) :]
    # The branch as the ids tell it: the first line of an id is the one it names.
    first: dict[str, int] = {}
    parents: dict[str, Any] = {}
    for position, line in enumerate(lines):
        if isinstance(line["id"], str) and line["id"] not in first:
            first[line["id"]] = position
            parents[line["id"]] = line["parentId"]
    branch: set[str] = set()
    cursor = next(reversed(first), None)
    while isinstance(cursor, str) and cursor not in branch:
        branch.add(cursor)
        cursor = parents.get(cursor)
    hidden = [p for i, p in first.items() if body[p].kind == "message" and i not in branch]
    assert [t.target for t in tombstones] == hidden
    with monkeypatch.context() as spill:
        count_disk_maps(spill, pi, threshold=1)
        spill.setattr(pi, "SPILL_CHECK", 1)
        (again,) = read_path(path)
        assert list(again.records) == records
