"""The CLI over stored text written by an attacker: escape sequences, BEL, CR, C1
controls, DEL, bidi overrides and newlines reach the operator's terminal only as visible
escapes, the ``sessions list`` table keeps one row per session, and ``--json`` gives the
exact strings back."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiondb import SessionStore
from sessiondb.cli import main
from sessiondb.terminal import json_for_terminal, shown

# What a terminal acts on or reorders by: written out here, not taken from the module.
DANGEROUS = frozenset(
    [chr(c) for c in range(0x20)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u061c", "\u200e", "\u200f", "\u2028", "\u2029"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)
SURROGATES = frozenset(chr(c) for c in range(0xD800, 0xE000))
# A printed line may end in "\n"; a multi-line body keeps its tabs.
FORBIDDEN_IN_OUTPUT = DANGEROUS - {"\n", "\t"}

TITLE = "\x1b]0;pwned\x07"  # rewrites the window title
CLEAR = "\x1b[2J"  # clears the screen
EVIL = f"{TITLE}{CLEAR}\r\u202e\x9b31m\x7f"


def hostile(label: str) -> str:
    return f"{label}{EVIL}{label}"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def assert_clean(text: str) -> None:
    found = sorted({c for c in text if c in FORBIDDEN_IN_OUTPUT or c in SURROGATES})
    assert not found, f"raw control characters in the output: {found!r}"


# -- the escaping function ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("\x00\x08\x0b\x0c\x1f", "\\x00\\x08\\x0b\\x0c\\x1f"),
        ("a\rb", "a\\rb"),
        ("a\nb\tc", "a\\nb\\tc"),
        ("\x7f", "\\x7f"),
        ("\x80\x85\x9b\x9f", "\\x80\\x85\\x9b\\x9f"),
        ("\u202aa\u202bb\u202cc\u202dd\u202e", "\\u202aa\\u202bb\\u202cc\\u202dd\\u202e"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("\u2028\u2029", "\\u2028\\u2029"),
        ("lone \udc80 \ud800", "lone \\udc80 \\ud800"),
        ("plain text, é 中文 🙂 \\x1b", "plain text, é 中文 🙂 \\x1b"),
        ("\xa0\u00ad\u200b", "\xa0\u00ad\u200b"),  # printable or harmless: left alone
    ],
    ids=repr,
)
def test_shown_escapes_each_class(raw: str, expected: str) -> None:
    assert shown(raw) == expected


def test_a_multi_line_body_keeps_newlines_and_tabs_only() -> None:
    assert shown("a\n\tb\r\nc\x1b", one_line=False) == "a\n\tb\\r\nc\\x1b"
    assert shown("a\u2028b", one_line=False) == "a\\u2028b"


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_shown_output_is_never_dangerous(text: str) -> None:
    for one_line in (True, False):
        out = shown(text, one_line=one_line)
        allowed = set() if one_line else {"\n", "\t"}
        assert not {c for c in out if c in DANGEROUS or c in SURROGATES} - allowed
        out.encode("utf-8")  # printable on any UTF-8 terminal: no lone surrogate left


@given(st.text(alphabet=st.characters(exclude_characters=DANGEROUS | SURROGATES)))
def test_shown_is_the_identity_on_safe_text(text: str) -> None:
    assert shown(text) == text
    assert shown(text, one_line=False) == text


@given(st.recursive(st.text(), lambda v: st.lists(v) | st.dictionaries(st.text(), v)))
def test_json_for_terminal_is_the_same_json_and_prints_nothing_raw(value: Any) -> None:
    text = json_for_terminal(json.dumps(value, indent=2, ensure_ascii=False))
    assert json.loads(text) == value
    assert not {c for c in text if c in DANGEROUS or c in SURROGATES} - {"\n"}


# -- stored hostile strings --------------------------------------------------------------


async def hostile_summarizer(system: str, prompt: str, max_tokens: int) -> str:
    """Loaded by name by the compact test below."""
    return "## Goal\n" + hostile("summary") + "\nline two\u202e"


def seed(url: str) -> dict[str, Any]:
    """Two sessions, one of them full of hostile strings everywhere the CLI prints."""

    async def go() -> dict[str, Any]:
        async with SessionStore.open(url) as store:
            plain = await store.create_session(name="plain")
            info = await store.create_session(
                name="evil\n" + "x" * 26 + "  2026-01-01 00:00:00  9  interactive  -  -  forged"
                f"{EVIL}",
                model=hostile("model"),
                key=hostile("key") + "\nrow",
            )
            messages: list[dict[str, Any]] = []
            for n in range(6):
                call_id = hostile(f"call{n}")
                tool = "read" if n % 2 == 0 else "edit"
                messages += [
                    {"role": "user", "content": hostile(f"user {n}") + "\n\tindented"},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": hostile("thinking")},
                            {"type": "text", "text": hostile("answer")},
                            {
                                "type": "toolCall",
                                "id": call_id,
                                "name": tool,
                                "arguments": {"path": hostile(f"/src/f{n}") + ".py"},
                            },
                            {
                                "type": "toolCall",
                                "id": hostile(f"other{n}"),
                                "name": hostile("tool"),
                                "arguments": {"path": hostile("/etc/x")},
                            },
                        ],
                    },
                    {
                        "role": "toolResult",
                        "toolCallId": call_id,
                        "toolName": tool,
                        "content": [{"type": "text", "text": hostile("result") + "x" * 300}],
                    },
                    {
                        "role": "toolResult",
                        "toolCallId": hostile(f"other{n}"),
                        "toolName": hostile("tool"),
                        "content": [{"type": "text", "text": hostile("result2")}],
                    },
                ]
            await store.append(info.id, messages)
            await store.tombstone(info.id, 1, reason=hostile("reason"))
            return {
                "id": info.id,
                "plain": plain.id,
                "name": info.name,
                "model": info.model,
                "key": info.key,
            }

    return asyncio.run(go())


def test_sessions_list_escapes_and_keeps_one_row_per_session(db_url: str) -> None:
    s = seed(db_url)
    code, out = run("--db", db_url, "sessions", "list")
    assert code == 0
    assert_clean(out)
    lines = out.splitlines()
    assert len(lines) == 1 + 2  # the header and one row per session: no forged row
    (row,) = [line for line in lines if line.startswith(s["id"])]
    assert row.endswith(shown(s["name"]))
    assert "\\x1b]0;pwned\\x07" in row and "\\n" in row and "\\u202e" in row
    # A key is quoted as JSON when odd characters are in it, then escaped as any cell.
    assert f"  {shown(json.dumps(s['key'], ensure_ascii=False))}  " in row

    code, out = run("--db", db_url, "sessions", "list", "--json")
    assert code == 0
    items = {item["id"]: item for item in json.loads(out)["items"]}
    assert items[s["id"]]["name"] == s["name"]
    assert items[s["id"]]["model"] == s["model"]
    assert items[s["id"]]["key"] == s["key"]


def test_sessions_show_escapes_every_stored_string(db_url: str) -> None:
    s = seed(db_url)
    code, out = run("--db", db_url, "sessions", "show", s["id"], "--all")
    assert code == 0
    assert_clean(out)
    for label in ("model", "user 0", "thinking", "answer", "call0", "tool", "result"):
        assert shown(hostile(label)) in out, label
    # Arguments are shown as JSON (which escapes C0 itself), then escaped as any text.
    arguments = json.dumps({"path": hostile("/src/f0") + ".py"}, ensure_ascii=False)
    assert f"    → read({shown(hostile('call0'))}) {shown(arguments)}" in out
    assert shown(hostile("reason")) in out
    assert "    (thinking) thinking\\x1b]0;pwned" in out
    assert "\tindented" in out  # a body keeps its tabs and newlines
    assert out.splitlines()[0] == f"session {s['id']}  {shown(s['name'])}"
    assert f"key {shown(json.dumps(s['key'], ensure_ascii=False))}" in out

    code, out = run("--db", db_url, "sessions", "show", s["id"], "--all", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["session"]["name"] == s["name"]
    assert data["session"]["model"] == s["model"]
    first = data["records"][0]["data"]
    assert first["content"][0]["text"] == hostile("user 0") + "\n\tindented"
    assert data["records"][1]["data"]["content"][0]["thinking"] == hostile("thinking")
    assert data["records"][-1]["data"]["reason"] == hostile("reason")
    # Exact JSON for scripts, and still nothing raw on a terminal: "\u202e" escapes.
    assert_clean(out.replace("\n", ""))
    assert "\\u202e" in out and "\\u001b" in out


def test_compact_dry_run_and_compaction_escape_paths_and_summary(db_url: str) -> None:
    s = seed(db_url)
    args = ("--db", db_url, "compact", s["id"], "--keep-recent-tokens", "100")
    code, out = run(*args, "--dry-run")
    assert code == 0
    assert_clean(out)
    assert f"  read: {shown(hostile('/src/f0') + '.py')}" in out
    assert f"  modified: {shown(hostile('/src/f1') + '.py')}" in out

    code, out = run(*args, "--dry-run", "--json")
    data = json.loads(out)
    assert hostile("/src/f0") + ".py" in data["readFiles"]

    code, out = run(*args, "--summarizer", "test_cli_hostile:hostile_summarizer")
    assert code == 0
    assert_clean(out)
    assert "compacted; kept" in out

    code, out = run("--db", db_url, "sessions", "show", s["id"])
    assert code == 0
    assert_clean(out)
    assert f"    {shown(hostile('summary'))}" in out
    assert "    line two\\u202e" in out
    assert f"    read: {shown(hostile('/src/f0') + '.py')}" in out
    assert f"    modified: {shown(hostile('/src/f1') + '.py')}" in out


def test_prune_and_rm_escape_the_namespace_and_ids(db_url: str) -> None:
    s = seed(db_url)
    namespace = hostile("tenant")
    code, out = run("--db", db_url, "--namespace", namespace, "prune", "--older-than", "1h")
    assert code == 0
    assert_clean(out)
    assert f"in namespace {shown(repr(namespace))}" in out
    code, out = run("--db", db_url, "sessions", "rm", s["id"])
    assert (code, out) == (0, f"deleted {s['id']}\n")


def _cc_line(session: str, uuid: str, text: str) -> str:
    return json.dumps(
        {
            "type": "user",
            "uuid": uuid,
            "parentUuid": None,
            "sessionId": session,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": text},
        }
    )


def test_import_progress_and_report_escape_paths_and_bad_lines(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tmp_path / f"tree{TITLE}"
    tree.mkdir()
    evil_file = tree / f"evil{TITLE}{CLEAR}\r\u202e.jsonl"
    evil_file.write_text(
        _cc_line("s1", "u1", hostile("hello")) + f"\n{{oops {EVIL}\n", encoding="utf-8"
    )
    code, out = run("--db", db_url, "import", str(tree))
    captured = capsys.readouterr()
    assert code == 0
    assert_clean(out)
    assert_clean(captured.err)
    assert "bad line: " in out and f"{shown(str(evil_file))}:2:" in out
    assert f"] {shown(str(evil_file))}: " in captured.err  # the progress line
    assert "created 1" in out

    # --strict: the file fails; its reason is printed escaped.
    again = tmp_path / f"again{CLEAR}"
    again.mkdir()
    failing = again / f"other{TITLE}\u202e.jsonl"  # another file: another session
    failing.write_text(
        _cc_line("s2", "u2", hostile("hello")) + f"\n{{oops {EVIL}\n", encoding="utf-8"
    )
    code, out = run("--db", db_url, "import", str(again), "--strict")
    captured = capsys.readouterr()
    assert code == 1
    assert_clean(out)
    assert_clean(captured.err)
    assert f"failed: {shown(str(failing))}:2: " in out

    # A symlink out of the tree: skipped and reported, its path escaped.
    outside = tmp_path / "outside.jsonl"
    outside.write_text(_cc_line("s3", "u3", "outside") + "\n", encoding="utf-8")
    linked = tmp_path / f"linked{TITLE}"
    linked.mkdir()
    link = linked / f"link{CLEAR}\u202e.jsonl"
    link.symlink_to(outside)
    code, out = run("--db", db_url, "import", str(linked))
    captured = capsys.readouterr()
    assert code == 0
    assert_clean(out)
    assert_clean(captured.err)
    assert f"skipped: {shown(str(link))}: symbolic link (not followed)" in out
    assert "created 0" in out

    # --follow-symlinks follows a link only to a target inside the tree.
    inside = linked / "inside.jsonl"
    inside.write_text(_cc_line("s4", "u4", "inside") + "\n", encoding="utf-8")
    (linked / "again.jsonl").symlink_to(inside)
    code, out = run("--db", db_url, "import", str(linked), "--follow-symlinks")
    capsys.readouterr()
    assert code == 0
    assert f"skipped: {shown(str(link))}: symbolic link to outside the import root" in out
    assert "created 1" in out  # inside.jsonl once: its link names a file already read


def test_a_bad_path_in_an_error_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / f"no{TITLE}such.sqlite3"
    code, _ = run("--db", str(missing), "sessions", "list")
    err = capsys.readouterr().err
    assert code == 1
    assert_clean(err.rstrip("\n"))
    assert "no\\x1b]0;pwned\\x07such.sqlite3" in err
