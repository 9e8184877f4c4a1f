"""Sessions as web pages: ``export --format html`` writes one self-contained page per
session, ``<session id>.html``.

The page needs nothing but itself: no external asset, no JavaScript (thinking and long
tool results fold with ``<details>``), images inline as ``data:`` URIs. It shows the
messages with each tool call followed by its result, thinking collapsed, compaction
summaries and the messages they summarise, tombstoned and pruned records marked as such,
a fork's parent (linked as the parent's page in the same directory) and the records
inherited from it, the non-context entries by their type, and the token usage.

**Stored text is data, never markup.** Every string of the session goes through
:func:`text`: control, bidi and lone-surrogate characters become visible escapes
(:func:`sessiondb.terminal.shown`), then ``& < > " '`` become character references.
Nothing stored becomes an attribute but image data, which is written only for the
image types a browser cannot run script from (:data:`IMAGE_TYPES`) and only when it is
plain base64. The page carries a Content-Security-Policy that allows no script at all,
images only from ``data:``, and only its own style sheet (by hash): a string that got
through as markup would still run nothing and restyle nothing.

HTML is written, never read: the format is not in :data:`sessiondb.formats.FORMATS`,
so import and detection never meet it (:data:`sessiondb.formats.EXPORT_ONLY`).

The writer holds one session's records while it writes (overlays come after the
records they mark, and a tool call's result after the call): a page is for a person to
read, and a session too large to hold is too large to read as one page.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import CorruptRecordError, InvalidInputError, brief
from ..models import Record, SessionInfo
from ..terminal import shown
from .imported import ImportedSession
from .lines import entry_label
from .paths import open_output
from .stored import Row, StoredRecord, stored_records

NAME = "html"
#: :meth:`Page.items`' cache: item key -> (the record's state, its HTML).
Cache = dict[str, tuple[tuple[Any, ...], str]]
SUFFIX = ".html"

#: Image types shown inline: raster formats only (an SVG may carry script).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_WHITESPACE = re.compile(r"\s+")
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")

# A tool result or an entry longer than this starts folded.
FOLD_CHARS = 2_000
# An entry's JSON is shown up to this many characters (a file-history snapshot can be
# megabytes; the native export keeps it whole).
ENTRY_CHARS = 10_000
#: With a page budget (the viewer's pages, :class:`Page`), what one shown item (a
#: record and the tool results under its calls) may take, in UTF-8 bytes of HTML: it is
#: given the least of :data:`ITEM_BYTES` and what the page has left, and never less
#: than :data:`ITEM_MIN_BYTES`; past it, its text is cut and a note says how much, and
#: where the whole record is. A page holds at most 200 items (:mod:`sessiondb.viewer`),
#: so it is bounded: budget + ITEM_BYTES + 200 x (ITEM_MIN_BYTES + one block's markup).
ITEM_BYTES = 64 * 1024
ITEM_MIN_BYTES = 512
#: Blocks of one record shown, at most, with a page budget (10,000 tiny blocks would be
#: 10,000 pieces of markup).
MAX_BLOCKS = 100
#: Characters of a name, a tool call's id or a file path shown with a page budget.
NAME_CHARS = 200

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem;
color:#1b1b1b;background:#fafafa}
header dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}
header dt{color:#666}header dd{margin:0}
.rec{border:1px solid #ddd;border-radius:6px;margin:.7rem 0;padding:.5rem .8rem;background:#fff}
.user{border-left:4px solid #2b6cb0}.assistant{border-left:4px solid #2f855a}
.toolResult{border-left:4px solid #975a16}
.head{font-size:.85rem;color:#555;display:flex;gap:.6rem;flex-wrap:wrap}
.role{font-weight:600;color:#111}
.text,pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.3rem 0}
pre,code{font:13px/1.4 ui-monospace,monospace}
.tool{border:1px solid #e2e2e2;border-radius:4px;margin:.4rem 0;padding:.3rem .6rem;
background:#f6f6f6}
.result{border-top:1px dashed #ccc;margin-top:.3rem;padding-top:.2rem}
.error .label{color:#c53030;font-weight:600}
details>summary{cursor:pointer;color:#555}
.thinking{color:#555;font-style:italic}
.note{font-size:.85rem;color:#8a4b08;font-weight:600}
.deleted{opacity:.55;background:#fff5f5}.deleted .text{text-decoration:line-through}
.summarised{opacity:.7}
.compaction{border-left:4px solid #6b46c1;background:#faf5ff}
.overlay,.entry{font-size:.85rem;color:#555;margin:.3rem 0}
.divider{margin:1.2rem 0 .4rem;font-weight:600;color:#444;border-bottom:1px solid #ccc}
img{max-width:100%;height:auto;border:1px solid #ddd}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
#: The page's Content-Security-Policy: no script, images from ``data:`` only, no style
#: but the page's own sheet, no base URL, no form target.
CSP = (
    f"default-src 'none'; img-src data:; style-src 'sha256-{_STYLE_HASH}'; "
    "base-uri 'none'; form-action 'none'"
)


def text(value: str, *, one_line: bool = False) -> str:
    """``value`` as HTML text: escaped (see the module docstring); ``one_line`` shows
    line breaks and tabs as escapes too."""
    return html.escape(shown(value, one_line=one_line), quote=True)


def clipped(value: str, limit: int, *, one_line: bool = False) -> tuple[str, int]:
    """``value`` as HTML text (:func:`text`) in at most ``limit`` bytes of UTF-8: the
    longest prefix of it that fits, escaped whole, and how many characters were left out."""
    n = min(len(value), max(limit, 0))
    while True:
        out = text(value[:n], one_line=one_line)
        size = len(out.encode())
        if size <= limit or n == 0:
            return out, len(value) - n
        n = min(n - 1, n * limit // size)  # escaping made it longer: fewer characters


def _json(value: Any, limit: int | None = None) -> str:
    dumped = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if limit is not None and len(dumped) > limit:
        dumped = f"{dumped[:limit]}\n… ({len(dumped) - limit:,} more characters)"
    return text(dumped)


def _time(at: datetime) -> str:
    iso = at.isoformat().replace("+00:00", "Z")
    return f'<time datetime="{text(iso, one_line=True)}">{text(iso[:19].replace("T", " "))}Z</time>'


class HtmlFormat:
    """``html``: a page per session, written only (:class:`~sessiondb.formats.Format`)."""

    name = NAME

    def sniff(self, path: Path) -> bool:
        return False  # never read

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        raise InvalidInputError(f"{path}: format {NAME!r} is written by export only, not read")

    def write(self, info: SessionInfo, records: Iterable[Record], out_dir: Path) -> list[Path]:
        return self.write_stored(info, map(StoredRecord.of, records), out_dir)

    def write_rows(self, info: SessionInfo, rows: Iterable[Row], out_dir: Path) -> list[Path]:
        return self.write_stored(info, stored_records(rows), out_dir)

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        page = Page(info, list(records))
        path, out = open_output(out_dir, f"{info.id}{SUFFIX}")
        with out:
            for chunk in page.chunks():
                out.write(chunk.encode())
        return [path]


class Page:
    """One session's page, written by :meth:`chunks`."""

    def __init__(
        self,
        info: SessionInfo,
        records: list[StoredRecord],
        *,
        session_href: Callable[[str], str] = lambda sid: f"{sid}{SUFFIX}",
        seq_href: Callable[[int], str] = lambda seq: f"#r{seq}",
        window: range | None = None,
        budget: int | None = None,
        whole_href: Callable[[int], str] | None = None,
    ) -> None:
        """``session_href``: the link to another session's page (a fork's parent), by its
        id (a ULID, checked before); the export's pages sit side by side. ``seq_href``:
        the link to a record of this session, by its seq (an ``int``: nothing else
        reaches a link). ``window``: the seqs shown as items (the viewer's page of a
        session); ``records`` may hold more, the overlays and tool results that mark or
        complete the records shown; default all. ``budget``: the bytes of HTML the items
        may take together (:data:`ITEM_BYTES`; ``None``, the export: every record whole);
        ``whole_href``: the link to a record's whole text, by its seq, named where a
        record is cut."""
        self.info = info
        self.records = records
        self.session_href = session_href
        self.seq_href = seq_href
        self.window = window
        self.budget = budget
        self.whole_href = whole_href
        self._left = math.inf  # bytes the item being rendered may still take
        self._cut = 0  # characters of it left out so far
        self.deleted: dict[int, tuple[int, str | None]] = {}  # target -> tombstone, reason
        self.pruned: dict[int, tuple[int, str]] = {}  # result -> prune, marker
        self.compactions: list[tuple[int, int]] = []  # (seq, first kept seq)
        self.results: dict[str, StoredRecord] = {}  # tool call id -> its first result
        self.shown_results: set[int] = set()  # results shown under a call
        # record -> the results shown inside it (under its calls, and theirs): one pass
        # decides, so that a record renders alike whenever it is rendered.
        self.owned: dict[int, list[int]] = {}
        self.pairs: dict[int, tuple[int, str]] = {}  # result -> (the seq, call id) it is under
        self._rendered: set[int] = set()
        for r in records:
            data = r.data
            if r.kind == "tombstone" and isinstance(data.get("targetSeq"), int):
                reason = data.get("reason")
                self.deleted[data["targetSeq"]] = (
                    r.seq,
                    reason if isinstance(reason, str) else None,
                )
            elif r.kind == "prune":
                for seq in data.get("seqs") or ():
                    self.pruned[seq] = (r.seq, str(data.get("marker", "")))
            elif r.kind == "compaction" and isinstance(data.get("firstKeptSeq"), int):
                self.compactions.append((r.seq, data["firstKeptSeq"]))
            elif r.kind == "message" and data.get("role") == "toolResult":
                call_id = data.get("toolCallId")
                if isinstance(call_id, str):
                    self.results.setdefault(call_id, r)
        # A tombstoned compaction summarises nothing.
        self.compactions = [c for c in self.compactions if c[0] not in self.deleted]
        for r in records:
            if r.kind == "message" and r.seq not in self.shown_results:
                self._pair(r.data.get("content"), r.seq, self.owned.setdefault(r.seq, []))

    def _pair(self, content: Any, seq: int, owned: list[int]) -> None:
        """Each tool call of ``content`` (of record ``seq``) with its first result, once."""
        for block in content if isinstance(content, list) else ():
            if not (isinstance(block, dict) and block.get("type") == "toolCall"):
                continue
            call_id = block.get("id")
            result = self.results.get(call_id) if isinstance(call_id, str) else None
            if result is None or result.seq <= seq or result.seq in self.shown_results:
                continue
            self.shown_results.add(result.seq)
            self.pairs[result.seq] = (seq, str(call_id))
            owned.append(result.seq)
            self._pair(result.data.get("content"), result.seq, owned)

    def state(self, r: StoredRecord) -> tuple[Any, ...]:
        """What a record's rendering depends on besides the record itself (its marks,
        the results under its calls and theirs): equal states, equal HTML."""
        if r.kind in ("tombstone", "prune"):
            return ()
        message = r.kind == "message"
        owned = [(seq, self._marks_of(seq, True)) for seq in self.owned.get(r.seq, ())]
        return (self._marks_of(r.seq, message), *owned)

    def _marks_of(self, seq: int, message: bool) -> tuple[Any, ...]:
        summarised = None
        if message:
            summarised = next(
                (c for c, first in reversed(self.compactions) if c > seq and first > seq), None
            )
        return self.deleted.get(seq), self.pruned.get(seq), summarised

    def chunks(self) -> Iterator[str]:
        info = self.info
        title = info.name or "(unnamed session)"
        yield (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            '<meta name="referrer" content="no-referrer">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="generator" content="sessiondb">\n'
            f"<title>{text(title, one_line=True)} · sessiondb</title>\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n"
        )
        yield self.header(title)
        yield "<main>\n"
        for _, chunk in self.items():
            yield chunk
        yield "</main>\n</body>\n</html>\n"

    def items(self, cache: Cache | None = None) -> Iterator[tuple[str, str]]:
        """The page's body, one ``(key, html)`` per shown record (key ``r<seq>``) or
        heading (``inherited``, ``own``), in page order; a tool result shown under its
        call is no item of its own.

        ``cache`` (key -> state and HTML, filled here) spares rendering a record again
        whose :meth:`state` has not changed since: the live viewer keeps one across the
        pages it builds as records arrive, and renders only the new records and those
        they mark."""
        info = self.info
        inherited = False
        used = 0  # bytes of the items so far (with a budget)
        for r in self.records:
            if self.window is not None and r.seq not in self.window:
                continue
            if r.session_id != info.id and not inherited:
                inherited = True
                parent = text(r.session_id, one_line=True)
                heading = f"Inherited from the parent session <code>{parent}</code>"
                yield "inherited", f'<h2 class="divider">{heading}</h2>\n'
            elif r.session_id == info.id and inherited:
                inherited = False
                heading = f"This session, after the fork at #{info.fork_seq}"
                yield "own", f'<h2 class="divider">{heading}</h2>\n'
            if r.seq in self.shown_results:
                continue  # shown under its call
            key = f"r{r.seq}"
            allowed = math.inf
            if self.budget is not None:
                allowed = max(ITEM_MIN_BYTES, min(ITEM_BYTES, self.budget - used))
            if cache is None:
                html = self.record(r, allowed)
            else:
                state = (allowed, *self.state(r))
                cached = cache.get(key)
                if cached is None or cached[0] != state:
                    cached = cache[key] = (state, self.record(r, allowed))
                html = cached[1]
            if self.budget is not None:
                used += len(html.encode())
            yield key, html

    def header(self, title: str) -> str:
        info = self.info
        rows = [("session", f"<code>{text(info.id, one_line=True)}</code>")]
        if info.model:
            rows.append(("model", text(info.model, one_line=True)))
        rows.append(("created", _time(info.created_at)))
        if info.last_message_at is not None:
            rows.append(("last message", _time(info.last_message_at)))
        rows.append(("messages", f"{info.message_count} (head #{info.last_seq})"))
        rows.append(("source", text(info.source, one_line=True)))
        if info.parent_id is not None:
            parent = text(info.parent_id, one_line=True)
            at = f" at #{info.fork_seq}" if info.fork_seq is not None else ""
            if _ULID.fullmatch(info.parent_id):
                anchor = f"#r{int(info.fork_seq)}" if info.fork_seq else ""
                href = text(self.session_href(info.parent_id), one_line=True)
                parent = f'<a href="{href}{anchor}"><code>{parent}</code></a>'
            else:
                parent = f"<code>{parent}</code>"
            rows.append(("fork of", parent + at))
        m = info.metrics
        usage = (
            f"input {m.input_tokens:,} · output {m.output_tokens:,} · "
            f"cache read {m.cache_read_tokens:,} · cache write {m.cache_write_tokens:,}"
        )
        if m.cost_total:
            usage += f" · cost {m.cost_total:.4f}"
        rows.append(("usage", usage))
        cells = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
        return f"<header>\n<h1>{text(title, one_line=True)}</h1>\n<dl>{cells}</dl>\n</header>\n"

    # -- records

    def record(self, r: StoredRecord, allowed: float = math.inf) -> str:
        """Record ``r`` as HTML, in about ``allowed`` bytes (its text cut past them, with
        a note saying how much and where the whole is)."""
        self._rendered.clear()
        self._left = allowed
        self._cut = 0
        html = self._record(r)
        if self._cut and r.kind != "message":  # a message's notes are in its blocks
            html += self.cut_note(r.seq, self._cut, 0)
        return html

    def _text(self, value: str, *, one_line: bool = False, most: float = math.inf) -> str:
        """``value`` as HTML text, cut to what the item has left (and to ``most``
        bytes); what is cut is counted for the item's note. Counts nothing against
        the item: :meth:`blocks` does, by the size of each block."""
        limit = min(self._left, most)
        if limit == math.inf:
            return text(value, one_line=one_line)
        out, left_out = clipped(value, max(int(limit), 0), one_line=one_line)
        if left_out:
            self._cut += left_out
            out += "…"
        return out

    def cut_note(self, seq: int, chars: int, blocks: int) -> str:
        """The note of a record cut for the page: how much is not shown, and the link to
        its whole text."""
        what = []
        if chars:
            what.append(f"{chars:,} characters")
        if blocks:
            what.append(f"{blocks:,} blocks")
        whole = ""
        if self.whole_href is not None:
            href = text(self.whole_href(int(seq)), one_line=True)
            whole = f' · <a href="{href}">the whole record #{int(seq)} as text</a>'
        return (
            f'<div class="note cut">[cut for this page: {" and ".join(what)} of #{int(seq)} '
            f"not shown{whole}]</div>"
        )

    def _record(self, r: StoredRecord) -> str:
        if r.kind == "message":
            if r.seq in self.shown_results:
                return ""  # shown under its call
            return self.message(r)
        data = r.data
        seq = r.seq
        if r.kind == "compaction":
            first = data.get("firstKeptSeq")
            if first == seq:
                what = "context cleared"
            else:
                what = f"history before {self.link(first)} summarised"
            summary = self._text(str(data.get("summary", "")))
            self._left -= len(summary.encode())
            files = ""
            for label, key in (("read", "readFiles"), ("modified", "modifiedFiles")):
                paths = data.get(key) or ()
                for i, path in enumerate(paths):
                    if self._left <= 0:
                        self._cut += sum(len(str(p)) for p in paths[i:])
                        break
                    file = self._text(str(path), one_line=True, most=NAME_CHARS)
                    line = f"<div>{label}: <code>{file}</code></div>"
                    self._left -= len(line)
                    files += line
            return (
                f'<section class="rec compaction{self.marks(seq)[0]}" id="r{seq}">'
                f'<div class="head"><span class="role">compaction</span>{self.anchor(r)}'
                f"<span>{what} ({int(data.get('tokensBefore') or 0):,} tokens before)</span>"
                f"{self.marks(seq)[1]}</div>"
                f'<div class="text">{summary}</div>{files}</section>\n'
            )
        if r.kind == "tombstone":
            target = data.get("targetSeq")
            reason = data.get("reason")
            why = f": {self._text(reason)}" if isinstance(reason, str) and reason else ""
            return (
                f'<div class="overlay" id="r{seq}">#{seq} ── deleted '
                f"{self.link(target)}{why}</div>\n"
            )
        if r.kind == "prune":
            seqs = ", ".join(self.link(s) for s in data.get("seqs") or ())
            return (
                f'<div class="overlay" id="r{seq}">#{seq} ── pruned tool results {seqs} '
                f"(context shows “{self._text(str(data.get('marker', '')))}”; "
                f"{int(data.get('tokensFreed') or 0):,} tokens freed)</div>\n"
            )
        label = self._text(entry_label(data), one_line=True, most=NAME_CHARS)
        classes, note = self.marks(seq)
        if self._left == math.inf:
            shown_data = _json(data, ENTRY_CHARS)
        else:
            dumped = json.dumps(data, indent=2, ensure_ascii=False, default=str)
            shown_data = self._text(dumped)
        return (
            f'<details class="entry{classes}" id="r{seq}"><summary>#{seq} ── {label}{note}'
            f"</summary><pre>{shown_data}</pre></details>\n"
        )

    def anchor(self, r: StoredRecord) -> str:
        return f"{self.link(r.seq)} {_time(r.created_at)}"

    def link(self, seq: Any) -> str:
        """``<a>`` to record ``seq``: an ``int`` (anything else is a row sessiondb did not
        write, refused typed before it reaches a link)."""
        try:
            n = int(seq)
        except (TypeError, ValueError, OverflowError):
            raise CorruptRecordError(
                f"session {self.info.id}: a stored seq is not an integer: {brief(seq)}"
            ) from None
        return f'<a href="{text(self.seq_href(n), one_line=True)}">#{n}</a>'

    def marks(self, seq: int, *, message: bool = False) -> tuple[str, str]:
        """Extra classes and the notes for record ``seq``: deleted, pruned, summarised."""
        classes, notes = [], []
        if seq in self.deleted:
            tomb, _ = self.deleted[seq]
            classes.append("deleted")
            notes.append(f"deleted by {self.link(tomb)}")
        if seq in self.pruned:
            prune, _ = self.pruned[seq]
            notes.append(f"pruned by {self.link(prune)}")
        if message:
            for c_seq, first in reversed(self.compactions):
                if c_seq > seq and first > seq:
                    classes.append("summarised")
                    notes.append(f"summarised by {self.link(c_seq)}")
                    break
        note = "".join(f' <span class="note">[{n}]</span>' for n in notes)
        return "".join(f" {c}" for c in classes), note

    def message(self, r: StoredRecord) -> str:
        data = r.data
        role = str(data.get("role"))
        classes, note = self.marks(r.seq, message=True)
        label = {"user": "user", "assistant": "assistant"}.get(role, "tool result")
        head = f'<span class="role">{label}</span>{self.anchor(r)}'
        if role == "toolResult":
            head += self.result_name(data)
        usage = data.get("usage")
        if isinstance(usage, dict):
            head += f"<span>{_usage(usage)}</span>"
        body = self.blocks(data.get("content"), r.seq)
        return (
            f'<article class="rec {self._text(role, one_line=True, most=NAME_CHARS)}{classes}" '
            f'id="r{r.seq}">'
            f'<div class="head">{head}{note}</div>{body}</article>\n'
        )

    def result_name(self, data: dict[str, Any]) -> str:
        name = data.get("toolName")
        call = data.get("toolCallId")
        short = partial(self._text, one_line=True, most=NAME_CHARS)
        parts = [f"<code>{short(str(name))}</code>" if name else ""]
        parts.append(f"<code>{short(str(call))}</code>")
        if data.get("isError"):
            parts.append('<span class="note">error</span>')
        return "<span>" + " ".join(p for p in parts if p) + "</span>"

    def blocks(self, content: Any, seq: int) -> str:
        """The blocks of record ``seq``'s ``content``; with a budget, as many as the
        item has room for (at most :data:`MAX_BLOCKS`), each cut to what is left, and
        the note of what was cut."""
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = content if isinstance(content, list) else []
        out = []
        cut_before, self._cut = self._cut, 0
        hidden = 0
        for i, block in enumerate(blocks):
            if self._left != math.inf and (self._left <= 0 or i >= MAX_BLOCKS):
                hidden = len(blocks) - i
                break
            left = self._left
            piece = self.block(block, seq)
            self._left = left - len(piece.encode())  # with the results under its calls
            out.append(piece)
        if self._cut or hidden:
            out.append(self.cut_note(seq, self._cut, hidden))
        self._cut = cut_before
        return "".join(out)

    def block(self, block: Any, seq: int) -> str:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            return f'<div class="text">{self._text(block["text"])}</div>'
        if kind == "thinking" and isinstance(block.get("thinking"), str):
            return (
                '<details class="thinking"><summary>thinking</summary>'
                f'<div class="text">{self._text(block["thinking"])}</div></details>'
            )
        if kind == "toolCall" and isinstance(block.get("id"), str):
            return self.tool_call(block, seq)
        if kind == "image":
            data = block.get("data")
            if isinstance(data, str) and len(data) > self._left:
                self._cut += len(data)
                mime, _ = clipped(str(block.get("mimeType")), NAME_CHARS, one_line=True)
                return f'<div class="note">[image of type {mime}, {len(data):,} characters]</div>'
            return _image(block)
        name = self._text(str(kind), one_line=True, most=NAME_CHARS)
        if self._left == math.inf:
            dumped = _json(block)
        else:
            dumped = self._text(json.dumps(block, indent=2, ensure_ascii=False, default=str))
        return f"<details><summary>[{name} block]</summary><pre>{dumped}</pre></details>"

    def tool_call(self, block: dict[str, Any], seq: int) -> str:
        call_id = block["id"]
        args = block.get("arguments")
        name = self._text(str(block.get("name", "")), one_line=True, most=NAME_CHARS)
        head = (
            f'<div class="call">→ <strong>{name}</strong>'
            f" <code>{self._text(call_id, one_line=True, most=NAME_CHARS)}</code></div>"
        )
        if args:
            dumped = json.dumps(args, indent=2, ensure_ascii=False, default=str)
            head += f'<pre class="args">{self._text(dumped)}</pre>'
            self._left -= len(head)
        result = self.results.get(call_id)
        if (
            result is None
            or self.pairs.get(result.seq) != (seq, call_id)
            or (result.seq in self._rendered)
        ):
            return f'<section class="tool">{head}<div class="note">no result stored</div></section>'
        self._rendered.add(result.seq)
        data = result.data
        classes, note = self.marks(result.seq, message=True)
        error = " error" if data.get("isError") else ""
        label = "error" if error else "result"
        content = data.get("content")
        size = sum(
            len(b.get("text", "")) for b in content if isinstance(b, dict)
        ) if isinstance(content, list) else 0  # fmt: skip
        body = self.blocks(content, result.seq)
        opened = " open" if size <= FOLD_CHARS else ""
        return (
            f'<section class="tool">{head}'
            f'<details class="result{error}{classes}" id="r{result.seq}"{opened}><summary>'
            f'<span class="label">{label}</span> {self.anchor(result)}'
            f" ({size:,} characters){note}</summary>{body}</details></section>"
        )


def _usage(usage: dict[str, Any]) -> str:
    parts = []
    for key, label in (("input", "in"), ("output", "out"), ("cacheRead", "cache read")):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value:
            parts.append(f"{label} {value:,}")
    return text(" · ".join(parts), one_line=True)


def _image(block: dict[str, Any]) -> str:
    """An image block as an ``<img>`` with a ``data:`` URI: only for :data:`IMAGE_TYPES`
    and plain base64, else a note saying why it is not shown."""
    mime = block.get("mimeType")
    data = block.get("data")
    if not isinstance(mime, str) or mime.lower() not in IMAGE_TYPES:
        return f'<div class="note">[image of type {text(str(mime), one_line=True)} not shown]</div>'
    if not isinstance(data, str):
        return '<div class="note">[image without data]</div>'
    data = _WHITESPACE.sub("", data)
    if not _BASE64.fullmatch(data) or len(data) % 4:
        return '<div class="note">[image whose data is not base64, not shown]</div>'
    return f'<img alt="image ({mime.lower()})" src="data:{mime.lower()};base64,{data}">'
