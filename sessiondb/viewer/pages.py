"""The viewer's pages as HTML text: the sessions list, a session's transcript, search
results, errors; and :class:`LiveTranscript`, which turns a session's new records into
changes of the page it shows. No web framework here: plain functions over the models.

A transcript is the HTML export's own rendering (:class:`sessiondb.formats.html.Page`):
tool calls with their results, thinking folded, images inline, compaction, tombstone
and prune marks. Every stored string goes through :func:`sessiondb.formats.html.text`
(escaped, controls and bidi characters made visible); the only URLs written are built
from checked session ids, integers and the viewer's own paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from ..formats.html import Cache, Page, text
from ..formats.stored import StoredRecord
from ..models import SearchHit, SessionInfo, SessionPage
from ..terminal import shown

_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
#: Records per page of a transcript: page ``k`` holds seqs ``(k-1)*200+1 .. k*200``, so
#: the page of a seq is known without reading. 200 records of a chat are ~300 KB of HTML
#: (a whole 500k-record session was 178 MB).
PAGE_RECORDS = 200
#: Records read past a page for the results of its tool calls (shown under the call).
LOOKAHEAD = 200
#: The bytes of HTML a page's items may take together: past it each item gets
#: :data:`sessiondb.formats.html.ITEM_MIN_BYTES`, so that a page of any session stays
#: under 2 MB (200 records near the record limit would be hundreds of MB). A record cut
#: for its page links to its whole text (:func:`whole_href`).
PAGE_BYTES = 768 * 1024
#: The overlays that mark records before them.
OVERLAYS = ("tombstone", "prune", "compaction")
SCRIPT_PATH = "/static/viewer.js"
STYLE_PATH = "/static/viewer.css"


def session_href(session_id: str) -> str:
    """The viewer's address of a session (its id checked: nothing else reaches a URL)."""
    if not _ULID.fullmatch(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return f"/s/{session_id}"


def whole_href(session_id: str, seq: int) -> str:
    """The address of record ``seq``'s whole text (``text/plain``)."""
    return f"{session_href(session_id)}/r/{int(seq)}"


def record_text(record: StoredRecord) -> str:
    """Record ``record`` whole, as plain text: a message's blocks one after another
    (text and thinking as they are, a tool call's arguments and any other block as
    JSON), any other record's data as JSON; controls and bidi characters made visible
    (:func:`sessiondb.terminal.shown`), as everywhere in the viewer."""
    data = record.data
    head = f"#{record.seq} {record.kind}"
    if record.kind != "message":
        body = json.dumps(data, indent=2, ensure_ascii=False, default=str)
        return shown(f"{head}\n\n{body}\n", one_line=False)
    parts = [f"{head} {data.get('role')}"]
    content = data.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            parts.append(f"[thinking]\n{block['thinking']}")
        elif kind == "toolCall":
            args = json.dumps(block.get("arguments"), indent=2, ensure_ascii=False, default=str)
            parts.append(f"[tool call {block.get('name')} {block.get('id')}]\n{args}")
        else:
            dumped = json.dumps(block, indent=2, ensure_ascii=False, default=str)
            parts.append(f"[{kind} block]\n{dumped}")
    return shown("\n\n".join(parts) + "\n", one_line=False)


def window_of(seq: int) -> range:
    """The seqs of the transcript page that holds ``seq`` (0: the first page)."""
    first = (max(int(seq), 1) - 1) // PAGE_RECORDS * PAGE_RECORDS + 1
    return range(first, first + PAGE_RECORDS)


def seq_href(session_id: str, seq: int, window: range | None = None) -> str:
    """The link to record ``seq`` of a session: ``#r<seq>`` on its page (``window``;
    ``None``: the whole session), else the page that holds it, ``/s/<id>?at=<seq>#r<seq>``."""
    n = int(seq)
    if window is None or n in window:
        return f"#r{n}"
    return f"{session_href(session_id)}?at={n}#r{n}"


def pager(info: SessionInfo, window: range) -> str:
    """The links to the transcript's other pages (first, previous, next, last) and the
    seqs this one shows."""
    href = session_href(info.id)
    last = window_of(info.last_seq)
    shown = f"#{window.start}–#{min(window.stop - 1, max(info.last_seq, window.start))}"
    links = []
    if window.start > 1:
        links.append(f'<a href="{href}?at=1">first</a>')
        links.append(f'<a rel="prev" href="{href}?at={window.start - PAGE_RECORDS}">← previous</a>')
    links.append(f"<span>records {shown}</span>")
    if window.start < last.start:
        links.append(f'<a rel="next" href="{href}?at={window.stop}">next →</a>')
        links.append(f'<a href="{href}">last</a>')
    return " · ".join(links)


def _when(at: datetime | None) -> str:
    if at is None:
        return ""
    iso = at.isoformat().replace("+00:00", "Z")
    return f'<time datetime="{text(iso, one_line=True)}">{text(iso[:19].replace("T", " "))}</time>'


def document(title: str, body: str, *, live: bool = False) -> str:
    """A whole page: the viewer's style sheet, and its script where ``live``."""
    script = f'<script src="{SCRIPT_PATH}" defer></script>\n' if live else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{text(title, one_line=True)} · sessiondb</title>\n"
        f'<link rel="stylesheet" href="{STYLE_PATH}">\n<link rel="icon" href="data:,">\n'
        f"{script}</head>\n<body>\n"
        f"{body}</body>\n</html>\n"
    )


def nav(query: str = "", session_id: str | None = None, *, live: bool = False) -> str:
    """The bar at the top: back to the list, the search box (scoped to ``session_id``
    when one is given), and the live status of a transcript."""
    scope = ""
    if session_id is not None:
        scope = (
            f'<label class="scope"><input type="checkbox" name="session" '
            f'value="{text(session_id, one_line=True)}" checked> this session</label>'
        )
    status = '<span id="live" class="live">connecting…</span>' if live else ""
    return (
        '<nav class="bar"><a class="home" href="/">sessions</a>'
        '<form class="search" action="/search" method="get" role="search">'
        f'<input type="search" name="q" value="{text(query, one_line=True)}" '
        'placeholder="search messages" aria-label="search" maxlength="1000">'
        f'{scope}<button type="submit">search</button></form>{status}</nav>\n'
    )


def session_row(s: SessionInfo) -> str:
    """One session's row of the list (keyed by its id: what the live list replaces)."""
    name = text(s.name, one_line=True) if s.name else '<span class="dim">(unnamed)</span>'
    fork = ""
    if s.parent_id is not None and _ULID.fullmatch(s.parent_id):
        fork = (
            f' <span class="dim">fork of <a href="{session_href(s.parent_id)}">'
            f"{text(s.parent_id[-8:], one_line=True)}</a> at #{s.fork_seq}</span>"
        )
    return (
        f'<tr id="row-{text(s.id, one_line=True)}"><td><a href="{session_href(s.id)}">'
        f"{name}</a>{fork}</td>"
        f"<td>{_when(s.last_message_at or s.created_at)}</td>"
        f'<td class="num">{s.message_count}</td>'
        f"<td>{text(s.model or '', one_line=True)}</td>"
        f"<td>{text(s.source, one_line=True)}</td>"
        f"<td><code>{text(s.id, one_line=True)}</code></td></tr>\n"
    )


def sessions_page(page: SessionPage, *, first: bool, size: int = 50) -> str:
    """One page of the sessions list, newest activity first, with the next page's link.
    The first page is live: its script moves a session with new activity to the top
    (and keeps ``size`` rows); later pages are a fixed keyset page."""
    rows = [session_row(s) for s in page.items]
    table = (
        '<table class="sessions"><thead><tr><th>session</th><th>last activity</th>'
        "<th>messages</th><th>model</th><th>source</th><th>id</th></tr></thead>\n"
        f'<tbody id="session-rows">\n{"".join(rows)}</tbody></table>\n'
    )
    empty = "" if rows else '<p class="dim" id="no-sessions">No sessions.</p>\n'
    links = []
    if not first:
        links.append('<a href="/">first page</a>')
    if page.next_cursor is not None:
        href = text(f"/?{urlencode({'cursor': page.next_cursor})}")
        links.append(f'<a rel="next" href="{href}">next →</a>')
    more = f'<p class="pages">{" · ".join(links)}</p>\n' if links else ""
    live = f' id="sessions" data-size="{int(size)}"' if first else ""
    return document(
        "sessions",
        f"{nav(live=first)}<main{live}>\n<h1>Sessions</h1>\n{empty}{table}{more}</main>\n",
        live=first,
    )


def wrapped(key: str, html: str) -> str:
    """One transcript item in its keyed wrapper (what the live updates replace)."""
    return f'<div class="item" id="i-{key}">{html}</div>\n'


def session_page(
    info: SessionInfo, records: list[StoredRecord], window: range | None = None
) -> str:
    """A session's transcript, or its page ``window`` (``records`` then hold the page's
    records and those after it that mark or complete them); its script follows the
    session live from the last seq."""
    return transcript_page(LiveTranscript(info, records, window))


def transcript_page(transcript: LiveTranscript) -> str:
    """The page of ``transcript`` (its window's items, the pager where it has one)."""
    info = transcript.info
    body = "".join(wrapped(k, html) for k, html in transcript.items.items())
    title = info.name or "(unnamed session)"
    window = transcript.window
    top = bottom = span = ""
    if window is not None:
        links = pager(info, window)
        top = f'<p class="pages" id="pager-top">{links}</p>\n'
        bottom = f'<p class="pages" id="pager-bottom">{links}</p>\n'
        span = f' data-first="{window.start}" data-last="{window.stop - 1}"'
    return document(
        title,
        f"{nav(session_id=info.id, live=True)}"
        f'<div id="session-head">{transcript.head}</div>\n{top}'
        f'<main id="records" data-session="{text(info.id, one_line=True)}" '
        f'data-seq="{transcript.seq}"{span}>\n{body}</main>\n{bottom}',
        live=True,
    )


def marked(snippet: str, spans: Iterable[Sequence[int]]) -> str:
    """``snippet`` escaped piece by piece, the ``spans`` (``[start, end)`` offsets) in
    ``<mark>``: spans out of range are clipped, overlapping ones merged; nothing of the
    snippet is markup."""
    clean: list[list[int]] = []
    for span in sorted((max(0, int(a)), min(len(snippet), int(b))) for a, b in spans):
        start, end = span
        if start >= end:
            continue
        if clean and start <= clean[-1][1]:
            clean[-1][1] = max(clean[-1][1], end)
        else:
            clean.append([start, end])
    out, at = [], 0
    for start, end in clean:
        out.append(text(snippet[at:start]))
        out.append(f"<mark>{text(snippet[start:end])}</mark>")
        at = end
    out.append(text(snippet[at:]))
    return "".join(out)


def search_page(
    query: str,
    session_id: str | None,
    hits: Sequence[SearchHit],
    next_cursor: str | None,
    names: dict[str, str | None],
    error: str | None = None,
) -> str:
    """Search results: each hit's session, record, role, time and marked snippet."""
    items = []
    for hit in hits:
        if not _ULID.fullmatch(hit.session_id):
            continue
        name = names.get(hit.session_id) or hit.session_id
        who = hit.role if hit.kind == "message" else "compaction summary"
        href = seq_href(hit.session_id, hit.seq, range(0))  # the page holding it
        items.append(
            f'<li class="hit"><div class="head"><a href="{href}">'
            f"{text(name, one_line=True)} #{int(hit.seq)}</a>"
            f'<span class="role">{text(str(who), one_line=True)}</span>{_when(hit.timestamp)}</div>'
            f'<div class="snippet">{marked(hit.snippet, hit.spans)}</div></li>\n'
        )
    if error is not None:
        body = f'<p class="error">{text(error)}</p>\n'
    elif not query:
        body = '<p class="dim">Type words to search for.</p>\n'
    elif items:
        body = f'<ol class="hits">\n{"".join(items)}</ol>\n'
    else:
        body = '<p class="dim">No matches.</p>\n'
    if next_cursor is not None:
        params = {"q": query, "cursor": next_cursor}
        if session_id is not None:
            params["session"] = session_id
        body += (
            f'<p class="pages"><a rel="next" href="/search?{urlencode(params)}">next →</a></p>\n'
        )
    heading = f"Search: {text(query, one_line=True)}" if query else "Search"
    title = f"search {query}" if query else "search"
    return document(title, f"{nav(query, session_id)}<main>\n<h1>{heading}</h1>\n{body}</main>\n")


def error_page(status: int, message: str) -> str:
    return document(
        f"error {status}",
        f'{nav()}<main>\n<h1>{status}</h1>\n<p class="error">{text(message)}</p>\n</main>\n',
    )


def keeps(window: range | None, r: StoredRecord) -> bool:
    """Whether ``r`` changes what the page ``window`` shows (``None``: the whole
    session): a record of it, an overlay aimed at it, a tool result within
    :data:`LOOKAHEAD` after it."""
    if window is None or r.seq in window:
        return True
    if r.seq < window.start:
        return False
    if r.kind == "tombstone":
        target = r.data.get("targetSeq")
        return isinstance(target, int) and target in window
    if r.kind == "prune":
        return any(isinstance(s, int) and s in window for s in r.data.get("seqs") or ())
    if r.kind == "compaction":
        first = r.data.get("firstKeptSeq")
        return isinstance(first, int) and first > window.start
    return (
        r.kind == "message"
        and r.seq < window.stop + LOOKAHEAD
        and r.data.get("role") == "toolResult"
    )


class LiveTranscript:
    """The transcript a browser shows, kept in step with the session: :meth:`advance`
    adds records and returns the changes to make to the page (as items keyed like
    :meth:`Page.items`), so that a tool result lands under its call, a tombstone strikes
    its target, a compaction marks what it summarised. Each change builds the page
    again from its records and compares the items; only records whose state changed
    (:meth:`Page.state`) are rendered again.

    With a ``window`` (a page of the session, :func:`window_of`) it shows only those
    seqs and keeps, of the records after them, only those that mark or complete them
    (overlays aimed at them, tool results within :data:`LOOKAHEAD`): what it holds is
    bounded by the page, not by the session."""

    def __init__(
        self, info: SessionInfo, records: list[StoredRecord], window: range | None = None
    ) -> None:
        self.info = info
        self.window = window
        self.last = max((r.seq for r in records), default=0)
        self.records = [r for r in records if self._keeps(r)]
        self.cache: Cache = {}
        self.items, self.head = self._render()
        self.pager = pager(info, window) if window is not None else ""

    @property
    def seq(self) -> int:
        """The last seq the transcript has seen (the live feed's starting point)."""
        return self.last

    def _keeps(self, r: StoredRecord) -> bool:
        return keeps(self.window, r)

    def _render(self) -> tuple[dict[str, str], str]:
        window = self.window
        page = Page(
            self.info,
            self.records,
            session_href=session_href,
            seq_href=lambda seq: seq_href(self.info.id, seq, window),
            window=window,
            budget=None if window is None else PAGE_BYTES,
            whole_href=lambda seq: whole_href(self.info.id, seq),
        )
        items = dict(page.items(self.cache))
        for key in self.cache.keys() - items.keys():
            del self.cache[key]  # now shown under a call
        return items, page.header(self.info.name or "(unnamed session)")

    def advance(self, info: SessionInfo, new: Iterable[StoredRecord]) -> list[dict[str, Any]]:
        """Add ``new`` records (and the session's new head); the changes, in order:
        ``{"op": "remove", "key"}``, ``{"op": "put", "key", "after", "html"}`` (replace
        the item, or insert it after the item ``after``, or first when ``None``),
        ``{"op": "head", "html"}`` and ``{"op": "pager", "html"}`` (the page's links)."""
        known = {r.seq for r in self.records}
        for r in new:
            self.last = max(self.last, r.seq)
            if r.seq not in known and self._keeps(r):
                known.add(r.seq)
                self.records.append(r)
        self.records.sort(key=lambda r: r.seq)
        self.info = info
        items, head = self._render()
        ops: list[dict[str, Any]] = [
            {"op": "remove", "key": key} for key in self.items if key not in items
        ]
        after: str | None = None
        for key, html in items.items():
            if self.items.get(key) != html:
                ops.append({"op": "put", "key": key, "after": after, "html": html})
            after = key
        if head != self.head:
            ops.append({"op": "head", "html": head})
        if self.window is not None and (links := pager(info, self.window)) != self.pager:
            ops.append({"op": "pager", "html": links})
            self.pager = links
        self.items, self.head = items, head
        return ops
