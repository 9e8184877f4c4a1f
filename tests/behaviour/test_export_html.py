"""``export_session(..., format="html")`` and ``sessiondb export --format html``: one
self-contained page per session showing what the session holds, every stored string as
text, never as markup."""

from __future__ import annotations

import asyncio
import io
import re
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from helpers import sql
from helpers.html_pages import (
    CLOSE,
    LINK,
    ONERROR,
    PAYLOADS,
    PNG,
    SCRIPT,
    STYLE,
    attrs_of,
    page_of,
    parse,
    rich_session,
)

from sessiondb import SessionStore, cli
from sessiondb.errors import CorruptRecordError, InvalidInputError
from sessiondb.formats.html import CSP
from sessiondb.terminal import shown


async def test_a_page_shows_the_session_and_runs_nothing(db_url: str, tmp_path: Path) -> None:
    async with SessionStore.open(db_url) as store:
        sid, _ = await rich_session(store)
        (path,) = await store.export_session(sid, tmp_path / "out", format="html")
    assert path == tmp_path / "out" / f"{sid}.html"
    page = page_of(path)
    parts = parse(page)
    # Nothing but the page's own tags and attributes: no script, no handler, no
    # stylesheet or link of the session's, however the strings tried.
    assert parts.strange() == []
    assert not re.search(
        r"<script|<style>body|<img src=x|<a href=\"javascript|<div style", page, re.I
    )
    (csp,) = [a for a in attrs_of(parts, "meta") if a.get("http-equiv")]
    assert csp["content"] == CSP and "script-src" not in CSP and "default-src 'none'" in CSP
    assert len(parts.style) == 1  # the page's own sheet, nothing else
    # Every payload is there as text, whole.
    text = parts.body_text
    for payload in PAYLOADS:
        assert shown(payload, one_line=False) in text, payload
    assert f"hostile {SCRIPT}" in text and "model <b>x</b>" in text
    assert f"read{ONERROR}" in text and LINK.replace('"', '\\"') in text
    # Thinking is folded; each tool call is followed by its result, which is not shown
    # again on its own.
    thinking = [a for a in attrs_of(parts, "details") if a.get("class") == "thinking"]
    assert thinking == [{"class": "thinking"}]  # no "open"
    assert text.index("call-1") < text.index("file body") < text.index("call-2")
    assert text.index("call-2") < text.index("grep output") < text.index("the question") + 10**9
    assert text.count("file body") == 1 and text.count("grep output") == 1
    ids = [a["id"] for _, a in parts.tags if "id" in a]
    assert len(ids) == len(set(ids)) and {"r3", "r4", "r8"} <= set(ids)
    # Images: the PNG inline, the SVG and the bad data not.
    srcs = [a["src"] for a in attrs_of(parts, "img")]
    assert srcs == [f"data:image/png;base64,{PNG}"]
    assert "[image of type image/svg+xml not shown]" in text
    assert "[image whose data is not base64, not shown]" in text
    assert "[custom_block block]" in text and shown(CLOSE) in text.replace("\n", "")
    # Overlays: the tombstone and its target, the prune and its result, the compaction
    # and the messages it summarises.
    assert "deleted by #9" in text and f"mistake {SCRIPT}" in text
    assert "pruned by #10" in text and f"[pruned {ONERROR}]" in text
    assert "summarised by #11" in text and "history before #6 summarised" in text
    marked = {a["id"]: a.get("class", "") for _, a in parts.tags if "id" in a}
    assert "deleted" in marked["r5"] and "summarised" in marked["r1"]
    assert "summarised" not in marked["r12"]
    assert f"{STYLE} look"[:20] in text
    # Usage: the session's totals and the message's own.
    assert "input 120 · output 30" in text and "in 120 · out 30" in text


async def test_a_fork_names_its_parent_and_marks_what_it_inherits(
    db_url: str, tmp_path: Path
) -> None:
    async with SessionStore.open(db_url) as store:
        sid, fork = await rich_session(store)
        written = await store.export_all(tmp_path / "all", format="html")
    assert set(written) == {sid, fork}
    parts = parse(page_of(written[fork][0]))
    assert parts.strange() == []
    assert {"href": f"{sid}.html#r4"} in attrs_of(parts, "a")
    text = parts.body_text
    assert f"Inherited from the parent session {sid}" in text
    assert "This session, after the fork at #4" in text
    assert (
        text.index("the question") < text.index("after the fork") < text.index("only in the fork")
    )
    assert "after the summary" not in text  # the parent's, after the fork point
    # The parent's page is the one the link names.
    assert written[sid] == [tmp_path / "all" / f"{sid}.html"]


async def test_import_refuses_html(db_url: str, tmp_path: Path) -> None:
    async with SessionStore.open(db_url) as store:
        with pytest.raises(InvalidInputError, match="export only"):
            await store.import_path(tmp_path, format="html")
        assert (await store.list_sessions()).items == []


def test_the_cli_exports_html(db_url: str, tmp_path: Path) -> None:
    async def setup() -> str:
        async with SessionStore.open(db_url) as store:
            return (await rich_session(store))[0]

    sid = asyncio.run(setup())
    out = io.StringIO()
    argv = ["--db", db_url, "export", sid, "--format", "html", "--out", str(tmp_path / "c")]
    assert cli.main(argv, out) == 0, out.getvalue()
    assert f"{sid}.html" in out.getvalue()
    assert parse(page_of(tmp_path / "c" / f"{sid}.html")).strange() == []
    # Import offers no such format.
    with pytest.raises(SystemExit):
        cli.main(["--db", db_url, "import", str(tmp_path), "--format", "html"], io.StringIO())


@pytest.mark.parametrize("target", ["2.5", '"two"', "[2]", "null"])
def test_a_tombstone_whose_target_is_no_integer_is_reported_typed(
    db_url: str, tmp_path: Path, target: str
) -> None:
    """A tombstone row changed by SQL (or written by an older version) with a targetSeq
    that is no integer: the HTML export names the row in a CorruptRecordError, as
    ``sessions show`` does; never pydantic's traceback, never a link built from it."""

    async def setup() -> str:
        async with SessionStore.open(db_url) as store:
            sid = (await store.create_session()).id
            await store.append(
                sid, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
            )
            (tomb,) = await store.tombstone(sid, 1)
            await sql.execute(
                store,
                "UPDATE sessiondb_records SET payload = :payload"
                " WHERE session_id = :sid AND seq = :seq",
                payload=f'{{"targetSeq": {target}}}',
                sid=sid,
                seq=tomb.seq,
            )
            with pytest.raises(CorruptRecordError, match=rf"#{tomb.seq} \(tombstone\)"):
                await store.export_session(sid, tmp_path / "api", format="html")
            return sid

    sid = asyncio.run(setup())
    argv = ["--db", db_url, "export", sid, "--format", "html", "--out", str(tmp_path / "cli")]
    errors = io.StringIO()
    with redirect_stderr(errors):
        assert cli.main(argv, io.StringIO()) == 1
    assert "sessiondb: error:" in errors.getvalue() and "tombstone" in errors.getvalue()
    assert "Traceback" not in errors.getvalue() and "pydantic" not in errors.getvalue()
    assert not list((tmp_path / "cli").glob("*.html"))
