"""One huge session neither stalls the viewer nor grows it (issue 40): a transcript is
shown a page at a time, rendered off the event loop, and the live streams of a session
share one watch. The issue's targets, tested as stated: ``GET /`` answers in under 1 s
while a huge session is requested, a page of any session is under 2 MB, 64 streams of a
100k-record session add under 200 MB to the server. Timed and measured on a viewer in a
process of its own (``sessiondb serve``), as an operator runs it.

The suite's huge session has 100,000 records; ``SESSIONDB_VIEWER_HUGE=500000`` runs the
issue's 500k figure by hand (the import alone takes a minute or more)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from helpers.messages import assistant, result, user
from helpers.viewer import client, served

from sessiondb import SessionStore
from sessiondb.terminal import shown
from sessiondb.viewer.auth import CSP
from sessiondb.viewer.pages import PAGE_RECORDS

HUGE = int(os.environ.get("SESSIONDB_VIEWER_HUGE", "100000"))
PAGE_LIMIT = 2 * 1024 * 1024
STREAMS = 64
STREAMS_LIMIT = 200 * 1024 * 1024
LATENCY_LIMIT = 1.0


def _messages(n: int) -> Iterator[dict[str, object]]:
    """``n`` messages of a working session: text, tool calls and their results."""
    for i in range(1, n + 1):
        if i % 3 == 2:
            yield assistant(f"let me look, step {i}", calls=[f"c{i}"])
        elif i % 3 == 0:
            yield result(f"c{i - 1}", f"output of step {i - 1}: " + "a line of output " * 6)
        else:
            yield user(f"message {i}: " + "the quick brown fox jumps over the lazy dog " * 3)


async def _huge(store: SessionStore, n: int) -> str:
    (sid,) = await store.import_sessions(
        [{"name": "huge", "messages": list(_messages(n))}], batch_records=50_000
    )
    return sid


async def test_a_transcript_is_shown_a_page_at_a_time(store: SessionStore) -> None:
    """Each page of a 20,000-record session is under 2 MB (the whole session was ~14 MB
    of HTML); the last page is the default, its neighbours linked; ``?at=N`` serves the
    page holding N; a record's link to another page goes to that page."""
    n = 20_000
    sid = await _huge(store, n)
    await store.tombstone(sid, 4, reason="far away")  # marks page 1 from the last page
    async with client(store) as http:
        last = await http.get(f"/s/{sid}")
        first = await http.get(f"/s/{sid}?at=1")
        middle = await http.get(f"/s/{sid}?at=12345")
        beyond = await http.get(f"/s/{sid}?at=99999999")
        bad = await http.get(f"/s/{sid}?at=x")
    for page in (last, first, middle):
        assert page.status_code == 200
        assert len(page.content) < PAGE_LIMIT, len(page.content)
        assert len(re.findall(r'<div class="item" id="i-r\d+"', page.text)) <= PAGE_RECORDS
    head = n + 1  # the tombstone
    assert f'id="r{head}"' in last.text and 'id="r1"' not in last.text
    assert f'data-seq="{head}"' in last.text
    assert f'href="/s/{sid}?at=1">first</a>' in last.text and "next →" not in last.text
    assert 'id="i-r1"' in first.text and f'id="i-r{PAGE_RECORDS + 1}"' not in first.text
    assert f'href="/s/{sid}?at={PAGE_RECORDS + 1}">next →' in first.text
    # The tombstone at the end marks its target on page 1, and links back to it.
    assert "deleted by" in first.text and f'href="/s/{sid}?at={head}#r{head}"' in first.text
    assert f'href="/s/{sid}?at=4#r4"' in last.text
    window = (12345 - 1) // PAGE_RECORDS * PAGE_RECORDS + 1
    assert f'data-first="{window}"' in middle.text and 'id="r12345"' in middle.text
    assert beyond.status_code == 200 and f'id="r{head}"' in beyond.text
    assert bad.status_code == 400
    # A call at the page's end shows its result from the next page under it.
    edge = next(s for s in range(window + PAGE_RECORDS - 3, window + PAGE_RECORDS) if s % 3 == 2)
    assert f"output of step {edge}" in middle.text


def _rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    (kib,) = re.findall(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(kib) * 1024


def _open_stream(base: str, path: str) -> socket.socket:
    """An event stream, open until its socket is closed: its headers and first event
    have arrived (the server has set it up)."""
    parts = urlsplit(base)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=600)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
    received = b""
    while b"retry:" not in received:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    return sock


def test_a_huge_session_neither_stalls_nor_grows_the_viewer(db_url: str, tmp_path: Path) -> None:
    async def setup() -> tuple[str, int]:
        async with SessionStore.open(db_url) as store:
            sid = await _huge(store, HUGE)
            return sid, (await store.get_session(sid)).last_seq

    sid, head = asyncio.run(setup())
    last_page = (head - 1) // PAGE_RECORDS * PAGE_RECORDS + 1
    with served(db_url, tmp_path) as (address, pid):
        base = address.rstrip("/")
        with httpx.Client(base_url=base, timeout=600) as http:
            assert http.get("/").status_code == 200
            # `GET /` while the huge session is requested: its last page, as it opens, then
            # its first. The first page's reads after it (overlays that may mark it) have the
            # last page's statements, whose last run was short: on SQLite such a read runs on
            # the event loop's thread, so none may scan the rest of the session at once.
            for path in (f"/s/{sid}", f"/s/{sid}?at=1"):
                sizes: list[int] = []

                def fetch(path: str = path, sizes: list[int] = sizes) -> None:
                    with httpx.Client(base_url=base, timeout=600) as other:
                        sizes.append(len(other.get(path).content))

                fetching = threading.Thread(target=fetch)
                fetching.start()
                latencies = []
                try:
                    while fetching.is_alive() or not latencies:  # all the time it is served
                        started = time.perf_counter()
                        assert http.get("/").status_code == 200
                        latencies.append(time.perf_counter() - started)
                        time.sleep(0.02)
                finally:
                    fetching.join()
                assert max(latencies) < LATENCY_LIMIT, (path, latencies)
                assert sizes and sizes[0] < PAGE_LIMIT, (path, sizes)
                print(f"\n{path}: / at most {max(latencies):.3f} s, page {sizes[0]:,} bytes")
            # 64 live streams of the session, as its last page opens them.
            events = f"/s/{sid}/events?from_seq={head}&at={last_page}"
            _open_stream(base, events).close()  # the first stream's one-time costs
            time.sleep(0.5)
            before = _rss(pid)
            streams = [_open_stream(base, events) for _ in range(STREAMS)]
            try:
                time.sleep(0.5)
                grown = _rss(pid) - before
            finally:
                for stream in streams:
                    stream.close()
            assert grown < STREAMS_LIMIT, f"{STREAMS} streams added {grown / 2**20:.0f} MB"
            print(f"\n{HUGE} records: / {max(latencies):.3f} s, streams +{grown / 2**20:.0f} MB")


async def test_a_page_is_bounded_by_bytes_not_only_by_records(store: SessionStore) -> None:
    """200 records is no bound when each is large: records of 128 KB of text that
    escaping makes longer (``<&"`` and CJK), three of 4 MB (a text, a tool result read
    ahead for the page's last call, an image), one of 10,000 tiny blocks. Every page is
    under 2 MB (b30e1fd's first page was ~100 MB); a record cut for its page says how
    much is cut and links to its whole text, served as escaped-nothing ``text/plain``
    under the viewer's headers."""
    big = "<b>&\"'漢字\u202e " * (128 * 1024 // 12)
    huge = "the whole of it <&> " * (4 * 1024 * 1024 // 20)
    image = {"type": "image", "mimeType": "image/png", "data": "iVBORw0K" * (3 * 1024 * 1024 // 8)}
    messages: list[dict[str, object]] = [
        {"role": "user", "content": [{"type": "text", "text": f"b{i}"} for i in range(10_000)]},
        user(huge),
        {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
    ]
    messages += [user(f"big {i} {big}") for i in range(4, PAGE_RECORDS)]
    messages += [assistant("read it", calls=["c-last"]), result("c-last", huge)]  # 200, 201
    messages += [user(f"late {i} {big}") for i in range(10)]
    (sid,) = await store.import_sessions([{"name": "large", "messages": messages}])
    async with client(store) as http:
        pages = {at: await http.get(f"/s/{sid}?at={at}") for at in (1, 150, PAGE_RECORDS + 1)}
        for at, page in pages.items():
            assert page.status_code == 200, at
            assert len(page.content) < PAGE_LIMIT, (at, len(page.content))
            assert 'class="note cut"' in page.text, at
        first = pages[1].text
        # The cut notes: escaped text, how much is left out, the link to the whole.
        for seq in (1, 2, 3, 201):
            assert f'href="/s/{sid}/r/{seq}">the whole record #{seq} as text</a>' in first, seq
        assert "9,900 blocks of #1 not shown" in first
        assert 'id="r201"' in first and "c-last" in first  # the result under its call
        assert "<b>" not in first and "&lt;b&gt;" in first
        whole = await http.get(f"/s/{sid}/r/2")
        assert whole.status_code == 200
        assert whole.headers["content-type"] == "text/plain; charset=utf-8"
        assert whole.headers["x-content-type-options"] == "nosniff"
        assert whole.headers["content-security-policy"] == CSP
        assert huge in whole.text
        bidi = await http.get(f"/s/{sid}/r/5")
        assert "\u202e" not in bidi.text and shown(big, one_line=False) in bidi.text
        blocks = await http.get(f"/s/{sid}/r/1")
        assert "b9999" in blocks.text
        assert (await http.get(f"/s/{sid}/r/99999")).status_code == 404
        assert (await http.get(f"/s/{sid}/r/x")).status_code == 400
