"""``sessiondb search``: hits printed with the terminal escaping, matched words bold on a
terminal only after the text around them was escaped, ``--json`` for scripts, paging,
``--session``, and a bad query as an error on one line."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from sessiondb import SessionStore
from sessiondb.cli import main

EVIL = "\x1b]0;pwned\x07\x1b[2J\r\u202e"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(*argv: str, tty: bool = False) -> tuple[int, str]:
    out = Tty() if tty else io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def seed(url: str) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        async with SessionStore.open(url) as store:
            a = (await store.create_session()).id
            b = (await store.create_session()).id
            await store.append(a, [{"role": "user", "content": f"find the{EVIL}beacon now"}])
            await store.append(b, [{"role": "user", "content": "another beacon"}])
            return a, b

    return asyncio.run(go())


def test_search_prints_escaped_snippets_and_bolds_only_on_a_terminal(db_url: str) -> None:
    a, b = seed(db_url)
    code, out = run("--db", db_url, "search", "beacon")
    assert code == 0
    assert a in out and b in out and "#1" in out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned\\x07" in out
    code, tty = run("--db", db_url, "search", "beacon", tty=True)
    assert code == 0
    # The only escape codes are the bold's own, around the matched word.
    assert tty.count("\x1b[1mbeacon\x1b[0m") == 2
    assert tty.replace("\x1b[1m", "").replace("\x1b[0m", "").count("\x1b") == 0


def test_search_json_session_and_pages(db_url: str) -> None:
    a, b = seed(db_url)
    code, out = run("--db", db_url, "search", "beacon", "--json", "--limit", "1")
    assert code == 0
    assert "\x1b" not in out
    page = json.loads(out)
    assert len(page["hits"]) == 1 and page["nextCursor"]
    hit = page["hits"][0]
    assert hit["snippet"][hit["spans"][0][0] : hit["spans"][0][1]] == "beacon"
    code, out = run(
        "--db", db_url, "search", "beacon", "--json", "--limit", "1", "--cursor", page["nextCursor"]
    )
    second = json.loads(out)
    assert {second["hits"][0]["session_id"], hit["session_id"]} == {a, b}
    assert second["nextCursor"] is None
    code, out = run("--db", db_url, "search", "beacon", "--session", b, "--json")
    assert [h["session_id"] for h in json.loads(out)["hits"]] == [b]
    code, out = run("--db", db_url, "search", "nothing-like-it")
    assert code == 0 and "(no matches)" in out


def test_a_bad_query_is_an_error_on_one_line(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(db_url)
    code, out = run("--db", db_url, "search", "--", "-only")
    assert code != 0 and out == ""
    err = capsys.readouterr().err
    assert "only words to exclude" in err and len(err.strip().splitlines()) == 1
