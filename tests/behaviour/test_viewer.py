"""``sessiondb serve`` over HTTP, in-process (httpx on the ASGI app, in the store's own
event loop): the sessions list in keyset pages, a transcript, search, the event stream
of a transcript's changes, the token rule, typed errors, and every stored string as text
under a Content-Security-Policy. The browser: tests/behaviour/test_viewer_browser.py."""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
from collections.abc import Callable, Coroutine
from contextlib import redirect_stderr
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from helpers.html_pages import PAYLOADS, SCRIPT, XSS, parse, rich_session
from helpers.messages import MISSING_ID, result, user
from helpers.processes import run_python
from helpers.viewer import ORIGIN, EventStream, client, feed_connections, strange
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessiondb import SessionStore, cli
from sessiondb.errors import ConfigurationError
from sessiondb.feed import Feed
from sessiondb.formats.html import Page
from sessiondb.formats.stored import StoredRecord
from sessiondb.terminal import shown
from sessiondb.viewer import create_app
from sessiondb.viewer.auth import CSP, check_bind, cookie_name, is_loopback
from sessiondb.viewer.pages import LiveTranscript

TOKEN = "tok-0123456789abcdef"


def _csp_and_friends(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


async def test_the_list_pages_by_keyset_and_links_each_session(store: SessionStore) -> None:
    ids = [(await store.create_session(name=f"s{i}")).id for i in range(53)]
    for sid in ids:  # distinct activity times: newest first is the reverse order
        await store.append(sid, user("hi"))
    async with client(store) as http:
        first = await http.get("/")
        assert first.status_code == 200
        _csp_and_friends(first)
        parts = parse(first.text)
        assert strange(parts) == []
        shown_ids = re.findall(r'href="/s/([0-9A-Z]{26})"', first.text)
        assert shown_ids == ids[::-1][:50]
        (cursor,) = re.findall(r'href="/\?cursor=([^"]+)"', first.text)
        second = await http.get(f"/?cursor={cursor}")
        assert second.status_code == 200
        assert re.findall(r'href="/s/([0-9A-Z]{26})"', second.text) == ids[::-1][50:]
        assert "cursor=" not in second.text  # the last page has no next link
        assert 'href="/">first page</a>' in second.text


async def test_a_transcript_shows_everything_as_text(store: SessionStore) -> None:
    sid, fork = await rich_session(store)
    async with client(store) as http:
        page = await http.get(f"/s/{sid}")
        fork_page = await http.get(f"/s/{fork}")
        listing = await http.get("/")
    assert page.status_code == 200 and fork_page.status_code == 200
    _csp_and_friends(page)
    for response in (page, fork_page, listing):
        parts = parse(response.text)
        assert strange(parts) == [], response.url
        assert not re.search(r"<img src=x|<a href=\"javascript|<div style", response.text)
        # One script, the viewer's own file; no inline script, no style element.
        scripts = [a for t, a in parts.tags if t == "script"]
        assert scripts in ([], [{"src": "/static/viewer.js", "defer": None}])
        assert parts.style == []
    text = parse(page.text).body_text
    for payload in PAYLOADS:
        assert shown(payload, one_line=False) in text, payload
    # The export's rendering: calls with results, thinking folded, marks of the overlays.
    assert text.index("call-1") < text.index("file body") < text.index("call-2")
    assert '<details class="thinking"><summary>' in page.text
    assert "deleted by" in text and "pruned by" in text and "summarised by" in text
    assert 'src="data:image/png;base64,' in page.text
    # The live script starts from the last seq shown; the fork links to its parent here.
    records = await store.records(sid, include_tombstoned=True)
    assert f'data-seq="{records[-1].seq}"' in page.text
    assert f'href="/s/{sid}#r4"' in fork_page.text
    assert f"hostile {SCRIPT}" in parse(listing.text).body_text


async def test_bad_ids_cursors_and_params_are_typed_errors(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with client(store) as http:
        cases = {
            "/s/not-an-id": 400,
            f"/s/{MISSING_ID}": 404,
            f"/s/{MISSING_ID}/events?from_seq=0": 404,
            f"/s/{sid}/events": 400,  # no from_seq
            f"/s/{sid}/events?from_seq=-1": 400,
            f"/s/{sid}/events?from_seq=1e3": 400,
            f"/s/{sid}/events?from_seq=0&from_seq=1": 400,
            "/?cursor=nope": 400,
            "/?cursor=" + "A" * 5000: 400,
            f"/search?q=x&session={MISSING_ID[:-1]}": 400,
            "/search?q=" + "x" * 5000: 400,
            "/no/such/page": 404,
        }
        for path, status in cases.items():
            response = await http.get(path)
            assert response.status_code == status, (path, response.text)
            assert "Traceback" not in response.text
            _csp_and_friends(response)
        # Read-only: nothing answers a write.
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert (await http.request(method, f"/s/{sid}")).status_code == 405
    assert (await store.get_session(sid)).last_seq == 0


async def test_the_static_files_are_the_packages_own(store: SessionStore) -> None:
    async with client(store) as http:
        script = await http.get("/static/viewer.js")
        style = await http.get("/static/viewer.css")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert "EventSource" in script.text and "innerHTML" not in script.text
    assert "eval(" not in script.text and "textContent" in script.text
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    _csp_and_friends(script)


async def test_the_token_is_required_when_set(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    async with client(store, token=TOKEN) as http:
        assert (await http.get("/")).status_code == 401
        assert (await http.get(f"/s/{sid}/events?from_seq=0")).status_code == 401
        assert (await http.get("/static/viewer.js")).status_code == 401
        wrong = {"Authorization": f"Bearer {TOKEN[:-1]}x"}
        assert (await http.get("/", headers=wrong)).status_code == 401
        assert (await http.get(f"/?token={TOKEN}x")).status_code == 401
        cookie = {"Cookie": f"{cookie_name(TOKEN)}={TOKEN}"}  # the token is not the cookie
        assert (await http.get("/", headers=cookie)).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        ok = await http.get(f"/s/{sid}", headers=right)
        assert ok.status_code == 200 and sid in ok.text
        _csp_and_friends(ok)
        # The first page load by ?token=: a cookie, and the same page without the token.
        first = await http.get(f"/s/{sid}?token={TOKEN}&x=1")
        assert first.status_code == 303
        assert first.headers["location"] == f"/s/{sid}?x=1"
        assert "HttpOnly" in first.headers["set-cookie"]
        assert TOKEN not in first.headers["set-cookie"]
        follow = await http.get(first.headers["location"])  # the client keeps the cookie
        assert follow.status_code == 200 and sid in follow.text
        assert first.headers["set-cookie"].startswith(f"{cookie_name(TOKEN)}=")
        # A path that would leave the site stays on it.
        odd = await http.get(f"http://127.0.0.1:8800//evil.example/?token={TOKEN}")
        assert odd.status_code == 303 and odd.headers["location"].startswith("/evil.example")


async def test_two_viewers_on_one_host_keep_their_own_cookies(store: SessionStore) -> None:
    """A browser sends a host's cookies to all its ports: the viewer on one port must
    not overwrite, or be let in by, the cookie of the viewer on another."""
    other_token = "another-viewer-token-0123456789"
    assert cookie_name(TOKEN) != cookie_name(other_token)
    async with client(store, token=TOKEN) as one, client(store, token=other_token) as two:
        first = await one.get(f"/?token={TOKEN}")
        second = await two.get(f"/?token={other_token}")
        assert first.status_code == second.status_code == 303
        # One jar, as the browser keeps it for the host: both cookies side by side.
        jar = "; ".join(r.headers["set-cookie"].split(";")[0] for r in (first, second))
        assert (await one.get("/", headers={"Cookie": jar})).status_code == 200
        assert (await two.get("/", headers={"Cookie": jar})).status_code == 200
        # Each cookie opens its own viewer only.
        only_second = {"Cookie": second.headers["set-cookie"].split(";")[0]}
        assert (await one.get("/", headers=only_second)).status_code == 401


async def test_without_a_token_only_loopback_host_names_are_answered(
    store: SessionStore,
) -> None:
    async with client(store) as http:
        for host in ("127.0.0.1:8800", "localhost", "[::1]:80", "127.0.0.2"):
            assert (await http.get("/", headers={"Host": host})).status_code == 200, host
        for host in ("evil.example", "evil.example:8800", "10.0.0.1", "::1"):
            assert (await http.get("/", headers={"Host": host})).status_code == 403, host


def test_a_non_loopback_address_needs_a_token() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"):
        assert is_loopback(host)
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.org", ""):
        assert not is_loopback(host)
        with pytest.raises(ConfigurationError, match="without --token"):
            check_bind(host, None)
        check_bind(host, TOKEN)
    for weak in ("short", "x" * 600, "a token with spaces!!", "tök-0123456789abcdef"):
        with pytest.raises(ConfigurationError, match="--token"):
            check_bind("0.0.0.0", weak)


def test_the_cli_refuses_to_serve_off_localhost_without_a_token(tmp_path: Path) -> None:
    db = f"{tmp_path}/v.sqlite3"
    assert cli.main(["--db", db, "migrate"], out=io.StringIO()) == 0
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["--db", db, "serve", "--host", "0.0.0.0", "--port", "0"])
    assert code == 1
    assert "refusing to serve on '0.0.0.0' without --token" in err.getvalue()


async def test_the_event_stream_follows_another_stores_appends(
    store: SessionStore, db_url: str, backend: str
) -> None:
    sid = (await store.create_session(name="live")).id
    await store.append(sid, user("before"))
    stream = EventStream(store, f"/s/{sid}/events?from_seq=1")
    async with SessionStore.open(db_url) as writer:
        await _feed_running(store)
        await writer.append(sid, user(f"hello {XSS}"))
        kind, seq, ops = await stream.next_event()
        assert (kind, seq) == ("change", "2")
        (put,) = [op for op in ops if op["op"] == "put"]
        assert put["key"] == "r2" and put["after"] == "r1"
        assert shown(f"hello {XSS}", one_line=False) in unescape(put["html"])
        assert "<script" not in put["html"] and "<img src=x" not in put["html"]
        assert any(op["op"] == "head" for op in ops)  # the message count moved on
        # A tool call, then its result: the result lands under the call (the call's
        # item is replaced), not as an item of its own.
        call = {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c1", "name": "ls", "arguments": {}}],
        }
        await writer.append(sid, call)
        _, seq, ops = await stream.next_event()
        assert seq == "3" and [op["key"] for op in ops if op["op"] == "put"] == ["r3"]
        await writer.append(sid, result("c1", "listing"))
        _, seq, ops = await stream.next_event()
        assert seq == "4"
        (put,) = [op for op in ops if op["op"] == "put"]
        assert put["key"] == "r3" and "listing" in put["html"]
        # A tombstone strikes its target and adds its own line.
        await writer.tombstone(sid, 2, reason="oops")
        _, _, ops = await stream.next_event()
        keys = {op["key"]: op["html"] for op in ops if op["op"] == "put"}
        assert "deleted by" in keys["r2"] and "r5" in keys
    await stream.close()
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["content-security-policy"] == CSP
    await _feed_stopped(store, backend)


async def test_the_first_page_follows_the_namespaces_activity(
    store: SessionStore, db_url: str, backend: str
) -> None:
    quiet = (await store.create_session(name="quiet")).id
    busy = (await store.create_session(name=f"busy {XSS}")).id
    async with client(store) as http:
        first = await http.get("/")
        assert 'id="sessions"' in first.text and "/static/viewer.js" in first.text
        later = await http.get(
            "/?cursor=" + quote((await store.list_sessions(limit=1)).next_cursor or "")
        )
        assert 'id="sessions"' not in later.text  # a later page is a fixed keyset page
    stream = EventStream(store, "/events")
    async with SessionStore.open(db_url) as writer:
        await _feed_running(store)
        await writer.append(busy, user("news"))
        kind, _, ops = await stream.next_event()
        assert kind == "rows" and [(op["op"], op["key"]) for op in ops] == [("put", busy)]
        (put,) = ops
        assert put["html"].startswith(f'<tr id="row-{busy}">')
        assert "<script" not in put["html"] and "<img src=x" not in put["html"]
        assert '<td class="num">1</td>' in put["html"]  # the count moved on
        await writer.delete_session(busy)
        await writer.append(quiet, user("still here"))
        seen: dict[str, str] = {}
        while seen.get(quiet) != "put":
            _, _, ops = await stream.next_event()
            seen.update({op["key"]: op["op"] for op in ops})
    await stream.close()
    assert stream.headers["content-type"].startswith("text/event-stream")
    await _feed_stopped(store, backend)


async def test_a_reconnect_resumes_from_last_event_id(store: SessionStore) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [user("one"), user("two"), user("three")])
    # The browser had the page up to #1 and says so: #2 and #3 come at once.
    stream = EventStream(store, f"/s/{sid}/events?from_seq=0", {"Last-Event-ID": "1"})
    _, seq, ops = await stream.next_event()
    assert seq == "3"
    assert [op["key"] for op in ops if op["op"] == "put"] == ["r2", "r3"]
    await stream.close()


async def test_a_deleted_session_ends_its_stream(store: SessionStore, backend: str) -> None:
    sid = (await store.create_session()).id
    stream = EventStream(store, f"/s/{sid}/events?from_seq=0")
    await _feed_running(store)
    await store.delete_session(sid)
    kind, _, data = await stream.next_event(timeout=60)  # noticed within the rescan
    assert kind == "gone" and sid in data["message"]
    await asyncio.wait_for(stream.task, 10)  # the stream ended on its own
    await stream.close()
    await _feed_stopped(store, backend)


async def test_closing_streams_closes_their_watches(store: SessionStore, backend: str) -> None:
    sid = (await store.create_session()).id
    streams = [EventStream(store, f"/s/{sid}/events?from_seq=0") for _ in range(3)]
    await _feed_running(store)
    for stream in streams:
        await stream.close()
    await _feed_stopped(store, backend)


async def test_live_streams_are_capped_and_slots_come_back(
    store: SessionStore, backend: str
) -> None:
    sid = (await store.create_session()).id
    app = create_app(store, max_streams=2)
    path = f"/s/{sid}/events?from_seq=0"
    streams = [EventStream(store, path, app=app) for _ in range(2)]
    await _feed_running(store)
    third = EventStream(store, path, app=app)
    await asyncio.wait_for(third.task, 10)  # refused at once, nothing held
    assert third.status == 503 and third.headers["retry-after"] == "30"
    assert b"2 live streams" in third.body
    await streams[0].close()
    fourth = EventStream(store, path, app=app)  # the closed stream's slot is free again
    await store.append(sid, user("after the cap"))
    kind, _, _ = await fourth.next_event()
    assert kind == "change" and fourth.status == 200
    for stream in (streams[1], fourth):
        await stream.close()
    await _feed_stopped(store, backend)
    # A stream whose session is not found gives its slot back too.
    missing = EventStream(store, f"/s/{MISSING_ID}/events?from_seq=0", app=app)
    await asyncio.wait_for(missing.task, 10)
    assert missing.status == 404
    again = [EventStream(store, path, app=app) for _ in range(2)]
    await _feed_running(store)
    assert all(s.status == 200 for s in again)
    for stream in again:
        await stream.close()


async def test_search_shows_marked_escaped_snippets(store: SessionStore) -> None:
    sid = (await store.create_session(name="searched")).id
    other = (await store.create_session(name="other")).id
    await store.append(sid, [user(f"the zebra said {SCRIPT}"), user("nothing here")])
    await store.append(other, user("a zebra too"))
    async with client(store) as http:
        found = await http.get("/search", params={"q": "zebra"})
        scoped = await http.get("/search", params={"q": "zebra", "session": sid})
        bad = await http.get("/search", params={"q": '"unclosed'})
    assert found.status_code == 200
    parts = parse(found.text)
    assert strange(parts) == []
    assert f'href="/s/{sid}?at=1#r1"' in found.text and f'href="/s/{other}?at=1#r1"' in found.text
    assert "<mark>zebra</mark>" in found.text
    assert "<script>window" not in found.text and "&lt;script&gt;" in found.text
    assert f'href="/s/{other}?at=1#r1"' not in scoped.text
    assert f'href="/s/{sid}?at=1#r1"' in scoped.text
    assert bad.status_code in (200, 400)  # a bad query is a typed answer, never a 500
    empty = await _search_status(store, "-zebra")  # exclusions only: InvalidQueryError
    assert empty == 400


async def _search_status(store: SessionStore, query: str) -> int:
    async with client(store) as http:
        response = await http.get("/search", params={"q": query})
    assert "Traceback" not in response.text
    return response.status_code


async def _feed_running(store: SessionStore) -> None:
    for _ in range(600):
        feed = store.core.feed
        if isinstance(feed, Feed) and feed.mode is not None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the feed did not start")


async def _feed_stopped(store: SessionStore, backend: str) -> None:
    feed = store.core.feed
    assert isinstance(feed, Feed) and feed.mode is None
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "sessiondb-feed"]
    if backend == "postgres":
        assert await feed_connections(store, expect=0) == 0


# Paths and parameters a browser (or anyone on localhost) may send.
_segments = st.one_of(
    st.sampled_from(["s", "search", "static", "events", "viewer.js", "", "..", "%2e%2e"]),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=40),
)
_values = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["0", "-1", "1e3", "99999999999999999999", "A" * 300, MISSING_ID]),
)
_params = st.lists(
    st.tuples(st.sampled_from(["q", "cursor", "session", "from_seq", "token", "x"]), _values),
    max_size=4,
)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_any_request_gets_a_typed_answer_never_a_500(db_url: str) -> None:
    loop = asyncio.new_event_loop()
    run: Callable[[Coroutine[Any, Any, Any]], Any] = loop.run_until_complete
    store = run(SessionStore.connect(db_url))
    try:
        sid, _ = run(rich_session(store))

        @settings(
            max_examples=60,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(
            path=st.one_of(
                st.lists(_segments, max_size=4).map(lambda parts: "/".join(parts)),
                st.sampled_from([f"s/{sid}", f"s/{sid}/events", "s/" + "Z" * 26, f"s/{sid}/r/1"]),
            ),
            params=_params,
            last_event_id=st.one_of(st.none(), _values),
        )
        # Paths that reach a stream only once the client has resolved them.
        @example(path="/s/events", params=[], last_event_id=None)
        @example(path="../events", params=[], last_event_id=None)
        @example(path="%2e%2e/events", params=[], last_event_id=None)
        @example(path="s/../events", params=[], last_event_id=None)
        @example(path="%65vents", params=[], last_event_id=None)
        @example(path=f"s/{sid}/x/../events", params=[("from_seq", "1")], last_event_id="2")
        # A record's whole text: a seq, a seq past the head, not a seq, another session.
        @example(path=f"s/{sid}/r/2", params=[], last_event_id=None)
        @example(path=f"s/{sid}/r/99999999", params=[], last_event_id=None)
        @example(path=f"s/{sid}/r/-1", params=[], last_event_id=None)
        @example(path=f"s/{sid}/r/1e3", params=[], last_event_id=None)
        @example(path="s/" + "Z" * 26 + "/r/1", params=[], last_event_id=None)
        def check(path: str, params: list[tuple[str, str]], last_event_id: str | None) -> None:
            async def get() -> httpx.Response | None:
                headers: dict[str, bytes] = {}
                if last_event_id is not None:  # any bytes; the app reads them as latin-1
                    headers["Last-Event-ID"] = last_event_id.encode("utf-8", "replace")
                async with client(store) as http:
                    url = httpx.URL("/" + quote(path, safe="/%")).copy_with(
                        params=[(k, v.encode("utf-8", "replace").decode()) for k, v in params]
                    )
                    request = http.build_request("GET", url, headers=headers)
                    # Route by what the app will see, not by the generated text: the client
                    # resolves "..", "%2e%2e" and "//host" before the app gets a path.
                    if request.url.host != httpx.URL(ORIGIN).host:
                        return None  # "//s/events": a request to another host
                    seen = request.url.path  # decoded, as the ASGI scope carries it
                    if seen == "/events":
                        return None  # the sessions list's stream: for ever (tests of its own)
                    if re.fullmatch(r"/s/[^/]+/events", seen):
                        # A valid seq would stream for ever: the stream has tests of its own.
                        items = request.url.params.multi_items()
                        kept = [(k, v) for k, v in items if k != "from_seq"]
                        if re.fullmatch(r"[0-9]{1,18}", last_event_id or ""):
                            headers = {}
                        request = http.build_request(
                            "GET", request.url.copy_with(params=kept), headers=headers
                        )
                    return await http.send(request)

            try:
                response = run(asyncio.wait_for(get(), 60))
            except httpx.InvalidURL:
                return  # the client will not send it
            if response is None:
                return
            assert response.status_code in (200, 303, 400, 401, 404, 405), (
                path,
                params,
                response.status_code,
                response.text[:300],
            )
            assert response.headers["content-security-policy"] == CSP
            assert "Traceback" not in response.text

        check()
    finally:
        run(store.close())
        loop.close()


def test_import_sessiondb_and_the_cli_do_not_load_the_web_stack() -> None:
    probe = (
        "import sys, sessiondb, sessiondb.cli\n"
        "sessiondb.cli.build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'httpx', 'anyio', 'sessiondb.viewer')"
        " or m.startswith('sessiondb.viewer')))\n"
    )
    assert run_python("-c", probe).stdout.strip() == "[]"
    assert "serve" in run_python("-m", "sessiondb", "--help").stdout


def test_without_the_extra_serve_names_it(tmp_path: Path) -> None:
    db = tmp_path / "v.sqlite3"
    assert cli.main(["--db", str(db), "migrate"], out=io.StringIO()) == 0
    probe = (
        "import sys\n"
        "sys.modules['uvicorn'] = None  # as if sessiondb[serve] were not installed\n"
        "from sessiondb import cli\n"
        f"sys.exit(cli.main(['--db', {str(db)!r}, 'serve', '--port', '0']))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip install 'sessiondb[serve]'" in done.stderr


async def test_following_record_by_record_gives_the_whole_page(store: SessionStore) -> None:
    """The live transcript, fed one record (or a few) at a time from every starting
    point, ends each step with the items a fresh page renders: calls with their
    results, tombstones, prunes and the compaction's marks, the fork's headings."""
    sid, fork = await rich_session(store)
    # A result whose call has several results, a duplicate call id, a late compaction.
    await store.append(
        sid,
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": "d", "name": "a", "arguments": {}},
                    {"type": "toolCall", "id": "d", "name": "b", "arguments": {}},
                ],
            },
            result("d", "first"),
            result("d", "second"),
        ],
    )
    await store.append_compaction(sid, summary="again", first_kept_seq=14)
    for session_id in (sid, fork):
        info = await store.get_session(session_id)
        records = [
            StoredRecord.of(r) for r in await store.records(session_id, include_tombstoned=True)
        ]
        for start in range(len(records)):
            for step in (1, 3):
                live = LiveTranscript(info, records[:start])
                shown_items = dict(live.items)
                for at in range(start, len(records), step):
                    for op in live.advance(info, records[at : at + step]):
                        if op["op"] == "remove":
                            del shown_items[op["key"]]
                        elif op["op"] == "put":
                            shown_items[op["key"]] = op["html"]
                    fresh = dict(Page(info, records[: at + step]).items())
                    assert live.items == fresh, (session_id, start, step, at)
                    # What the browser holds after the ops (order aside) is the page.
                    assert shown_items == fresh, (session_id, start, step, at)
        if session_id == sid:  # results under their calls are no items of their own
            assert {"r3", "r4", "r8", "r15", "r16"} & live.items.keys() == {"r16"}  # 2nd result
