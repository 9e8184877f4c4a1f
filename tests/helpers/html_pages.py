"""Exported HTML pages for the tests: a session holding everything a page shows (and a
hostile payload in each of its strings), and a parser that tells what a page is made of."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from helpers.messages import result, user
from sessiondb import SessionStore

# Markup a message may hold; a page shows each as text. The script would set
# window.__xss, which the browser test reads.
SCRIPT = "<script>window.__xss = 1; alert('script')</script>"
ONERROR = "<img src=x onerror=\"window.__xss = 2; alert('img')\">"
LINK = '<a href="javascript:window.__xss=3" id="evil">click me</a>'
STYLE = '<style>body{display:none !important}</style><div style="position:fixed">styled</div>'
CLOSE = "</div></pre></details></article></main><script>window.__xss = 4</script>"
PAYLOADS = (SCRIPT, ONERROR, LINK, STYLE, CLOSE)
XSS = "\n".join(PAYLOADS)

# A 1x1 red PNG.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
    )
).decode()

# The tags and attributes a page is built of: nothing stored may add another.
ALLOWED = {
    "html": {"lang"},
    "head": set(),
    "meta": {"charset", "http-equiv", "content", "name"},
    "title": set(),
    "style": set(),
    "body": set(),
    "header": set(),
    "h1": set(),
    "h2": {"class"},
    "dl": set(),
    "dt": set(),
    "dd": set(),
    "main": set(),
    "article": {"class", "id"},
    "section": {"class", "id"},
    "div": {"class", "id"},
    "span": {"class"},
    "details": {"class", "id", "open"},
    "summary": set(),
    "pre": {"class"},
    "code": set(),
    "strong": set(),
    "a": {"href"},
    "time": {"datetime"},
    "img": {"alt", "src"},
}


@dataclass
class PageParts:
    """What a page is made of: its tags with their attributes, and its text."""

    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    style: list[str] = field(default_factory=list)

    @property
    def body_text(self) -> str:
        return "".join(self.text)

    def strange(self) -> list[tuple[str, dict[str, str | None]]]:
        """Tags or attributes a page never writes, and links that leave the page."""
        odd = []
        for tag, attrs in self.tags:
            known = tag in ALLOWED and set(attrs) <= ALLOWED[tag]
            if tag == "a":
                known = known and _own_link(attrs.get("href") or "")
            elif tag == "img":
                known = known and (attrs.get("src") or "").startswith("data:image/")
            if not known:
                odd.append((tag, attrs))
        return odd


def _own_link(href: str) -> bool:
    """A link the page makes: to a record of the page, or to its parent's page."""
    if href.startswith("#r") and href[2:].isdigit():
        return True
    name, _, anchor = href.partition("#")
    return name.endswith(".html") and name[:-5].isalnum() and (not anchor or anchor[1:].isdigit())


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts = PageParts()
        self.in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parts.tags.append((tag, dict(attrs)))
        self.in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self.in_style = False

    def handle_data(self, data: str) -> None:
        (self.parts.style if self.in_style else self.parts.text).append(data)


def parse(page: str) -> PageParts:
    parser = _Parser()
    parser.feed(page)
    parser.close()
    return parser.parts


async def rich_session(store: SessionStore) -> tuple[str, str]:
    """A session with every kind of thing a page shows, and a fork of it: the ids
    ``(parent, fork)``. Every string the caller controls holds :data:`XSS`."""
    sid = (await store.create_session(name=f"hostile {SCRIPT}", model="model <b>x</b>")).id
    await store.append(
        sid,
        [
            user(f"the question {XSS}"),  # 1
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"secret thoughts {XSS}"},
                    {"type": "text", "text": "let me look"},
                    {
                        "type": "toolCall",
                        "id": "call-1",
                        "name": f"read{ONERROR}",
                        "arguments": {"path": LINK},
                    },
                    {"type": "toolCall", "id": "call-2", "name": "grep", "arguments": {}},
                ],
                "usage": {"input": 120, "output": 30},
            },  # 2
            result("call-1", f"file body {SCRIPT}"),  # 3
            result("call-2", "grep output"),  # 4
            user(f"{STYLE} look", uuid="u-5"),  # 5
            {
                "role": "user",
                "content": [
                    {"type": "image", "data": PNG, "mimeType": "image/png"},
                    {"type": "image", "data": PNG, "mimeType": "image/svg+xml"},
                    {"type": "image", "data": 'x" onerror="alert(1)', "mimeType": "image/png"},
                    {"type": "custom_block", "payload": CLOSE},
                ],
            },  # 6
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "call-7", "name": "ls", "arguments": {}}],
            },  # 7
            result("call-7", "a long listing"),  # 8
        ],
    )
    await store.tombstone(sid, 5, reason=f"mistake {SCRIPT}")  # 9
    await store.append_prune(sid, [8], marker=f"[pruned {ONERROR}]")  # 10
    await store.append_compaction(sid, summary=f"they talked {XSS}", first_kept_seq=6)  # 11
    await store.append(sid, [user("after the summary"), {"role": "assistant", "content": "ok"}])
    fork = await store.fork(sid, 4, name="the fork")
    await store.append(fork.id, [user("only in the fork")])
    return sid, fork.id


def page_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def attrs_of(parts: PageParts, tag: str) -> list[dict[str, Any]]:
    return [attrs for t, attrs in parts.tags if t == tag]
