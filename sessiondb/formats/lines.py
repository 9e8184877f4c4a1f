"""JSONL lines: the bounded line reader, detection's look at a file's first lines, bad
lines, the payload of a line kept as an ``entry`` record, and lines written back.

Lines are read as bytes and split on ``\\n`` only: U+2028 and its kind stay inside
the line. A UTF-8 BOM and a ``\\r`` before the ``\\n`` are dropped, a last line without
``\\n`` that does not parse is a torn write and is ignored (spec S7.9).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .. import jsoncodec
from ..config import DEFAULT_MAX_RECORD_BYTES
from ..errors import ImportFormatError, InvalidInputError
from ..validation import too_deep
from .imported import BAD_LINES_KEPT, REASON_CHARS, BadLine, ImportedRecord, ImportedSession

_BOM = b"\xef\xbb\xbf"
# orjson reads integers past 64 bits as floats; a run of 19 digits sends the line to
# the standard library, which keeps them exact (a false alarm inside a string only
# costs the slower parse). The run is found by mapping every digit to "0" and every
# other byte to " ", then a substring search: 0.03 s for 20,000 lines of 1.2 kB, where
# the regular expression [0-9]{19} took 0.34 s, twice orjson's parse.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


@dataclass(slots=True)
class Line:
    """A non-blank line: ``value`` when it parsed, else ``raw`` text and ``error``
    (read-only by convention, not frozen: see
    :class:`~sessiondb.formats.imported.ImportedRecord`).

    ``exact``: parsed by the standard library (orjson refused the line), the only way a
    value holds a lone surrogate: a reader checks keys for them on such lines only.

    ``limit``: the line is over one of the store's limits (longer than
    ``max_record_bytes``, or nested past ``MAX_JSON_DEPTH`` so deep that no parser reads
    it); ``error`` names the limit. A format whose lines stand alone skips it as a bad
    line; one where a skipped line would shift the seqs (native) fails the session.
    """

    number: int
    value: Any = None
    raw: str | None = None
    error: str | None = None
    exact: bool = False
    limit: bool = False


class TooDeep(ValueError):
    """A JSON text nested too deeply for the parser; the message names the limit."""


def parse_json(data: bytes) -> Any:
    """Parse one line exactly: integers past 64 bits, ``\\u0000`` and lone surrogates.

    Raises:
        ValueError: not JSON, not UTF-8, NaN or an infinity, or nested too deep.
    """
    return _parse(data)[0]


def _parse(data: bytes) -> tuple[Any, bool]:
    """``(value, exact)``: see :func:`parse_json` and :attr:`Line.exact`."""
    if _LONG_RUN not in data.translate(_DIGITS):
        try:
            return orjson.loads(data), False
        except orjson.JSONDecodeError:
            pass
    try:
        value = json.loads(data)
    except RecursionError as exc:
        raise TooDeep(too_deep("the line")) from exc
    # The standard library takes NaN, Infinity and 1e400; no store can hold them.
    jsoncodec.dumps(value)
    return value, True


# The longest line an import reads, in bytes: the importing store's max_record_bytes
# (``transfer.import_path`` sets it); a longer line could only make a record over it.
# Unset, a reader takes ``DEFAULT_MAX_RECORD_BYTES``.
MAX_LINE_BYTES: ContextVar[int | None] = ContextVar("MAX_LINE_BYTES", default=None)
# What is read of a line at a time: a longer line is measured a piece at a time before
# it is read whole, so one over the limit costs this much memory, never the limit.
_PIECE = 1 << 20
# The longest line detection looks at: a longer one is passed over, so sniffing a file
# whose first line is 200 MB reads it in 1 MB steps and keeps none of it.
SNIFF_LINE_BYTES = 4 * 1024 * 1024


_FILE_KINDS = (
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISDIR, "directory"),
)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("FIFO", "socket", ...)."""
    for test, kind in _FILE_KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself (not what a link names) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file and not a symbolic link.

    The check is made on the open file (``fstat``), so a file swapped for a FIFO or a
    link after the walk looked at it is refused, not read: ``O_NONBLOCK`` keeps the open
    of a FIFO from waiting for a writer, ``O_NOFOLLOW`` refuses a link.

    Raises:
        InvalidInputError: ``path`` is a symbolic link, a FIFO, a device, ...
        OSError: it cannot be opened (missing, no permission).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidInputError(f"{path}: a symbolic link (not followed)") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InvalidInputError(f"{path}: {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_lines(
    path: Path,
    session: ImportedSession | None = None,
    strict: bool = False,
    *,
    limit: int | None = None,
) -> Iterator[Line]:
    """The non-blank lines of ``path``, streamed, numbered from 1.

    A torn last line (no ``\\n`` and not JSON) is dropped. A line longer than ``limit``
    bytes (default :data:`MAX_LINE_BYTES`) is never held whole: it is recognised while
    it is read, the rest of it passed over in steps of 1 MB, and it is reported on
    ``session`` as a bad line (see :func:`bad_line`) and not yielded.

    Raises:
        InvalidInputError: ``path`` is not a regular file (or is a symbolic link).
        ImportFormatError: with ``strict``, a line over the limit.
    """
    if limit is None:
        limit = MAX_LINE_BYTES.get() or DEFAULT_MAX_RECORD_BYTES
    most = limit + 2  # the line, then "\r\n"
    with open_regular(path) as stream:
        readline = stream.readline
        number = 0
        piece = min(most, _PIECE)
        while True:
            data: bytes | None = readline(piece)
            if not data:
                return
            number += 1
            complete = data.endswith(b"\n")
            if not complete and len(data) == piece:
                # A long line: measured first, a piece at a time, then read whole only
                # if it is within the limit; a longer one is never held.
                data, complete = _long_line(stream, data, most)
            if data is None:
                if session is not None:
                    reason = f"the line is over {limit} bytes, the store's max_record_bytes"
                    bad_line(session, Line(number, limit=True), reason, strict)
                continue
            if number == 1 and data.startswith(_BOM):
                data = data[len(_BOM) :]
            data = data.rstrip(b"\n")
            if data.endswith(b"\r"):
                data = data[:-1]
            if not data or data.isspace():  # blank (isspace: not a copy, as strip was)
                continue
            try:
                value, exact = _parse(data)
            except (ValueError, UnicodeDecodeError) as exc:
                if not complete:
                    return
                raw = data.decode("utf-8", "surrogateescape")
                if isinstance(exc, TooDeep):
                    yield Line(number, raw=raw, error=str(exc), limit=True)
                else:
                    yield Line(number, raw=raw, error=_why(exc))
                continue
            yield Line(number, value=value, exact=exact)


def _long_line(stream: BinaryIO, first: bytes, most: int) -> tuple[bytes | None, bool]:
    """The line whose first piece is ``first``: ``(line, complete)``
    when the whole line is at most ``most`` bytes, read again from where it starts;
    ``(None, True)`` when it is longer (the stream is then past it). Only a piece of the
    line is held at a time while it is measured."""
    start = stream.tell() - len(first)
    size = len(first)
    complete = False
    while size <= most:
        piece = stream.readline(_PIECE)
        if not piece:
            break
        size += len(piece)
        if piece.endswith(b"\n"):
            complete = True
            break
    if size > most:
        while not complete:  # pass the rest of the line over
            piece = stream.readline(_PIECE)
            complete = not piece or piece.endswith(b"\n")
        return None, True
    end = stream.tell()
    stream.seek(start)
    data = stream.read(size)
    if len(data) != size or stream.tell() != end:
        # The file changed under the reader: take what was read as a torn line.
        stream.seek(end)
        return data, False
    return data, complete


def _why(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"not valid JSON ({text})"


def bad_line(session: ImportedSession, line: Line, reason: str, strict: bool) -> None:
    """Report ``line`` on ``session``, or raise when ``strict``. The session counts
    every bad line and keeps the first ``BAD_LINES_KEPT``, their reasons cut short."""
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 1] + "…"
    if strict:
        raise ImportFormatError(str(session.path), line.number, reason)
    session.bad_line_count += 1
    if len(session.bad_lines) < BAD_LINES_KEPT:
        session.bad_lines.append(BadLine(session.path, line.number, reason))


def not_an_object(
    fmt: str, session: ImportedSession, line: Line, strict: bool, **extra: Any
) -> ImportedRecord | None:
    """The ``entry`` record of a line that is not a JSON object (not JSON: its text, see
    :func:`raw_payload`; another JSON value: the value), reported as a bad line on
    ``session`` (see :func:`bad_line`); ``None`` for a line that is an object."""
    if line.error is not None:
        bad_line(session, line, line.error, strict)
        return ImportedRecord("entry", raw_payload(fmt, line, **extra))
    value = line.value
    if isinstance(value, dict):
        return None
    bad_line(session, line, f"expected a JSON object, got {json_kind(value)}", strict)
    return ImportedRecord("entry", entry_payload(fmt, value, **extra))


def is_gemini_line(value: dict[str, Any]) -> bool:
    """Whether a transcript's line is Gemini CLI's own: its metadata line (a string
    ``sessionId`` and ``projectHash``), an update line (``$set``, ``$rewindTo``) or a
    ``gemini`` message. Detection of the other transcript formats passes such files
    over."""
    return (
        "$set" in value
        or "$rewindTo" in value
        or (isinstance(value.get("sessionId"), str) and isinstance(value.get("projectHash"), str))
        or (value.get("type") == "gemini" and "uuid" not in value)
    )


def json_kind(value: Any) -> str:
    """What kind of JSON value ``value`` is, in Python's words (``null`` for ``None``)."""
    return "null" if value is None else type(value).__name__


def sniff_values(path: Path, limit: int = 25) -> list[Any]:
    """Up to ``limit`` parsed values from the start of a file, for detection; lines
    longer than ``SNIFF_LINE_BYTES`` (or the store's limit) are passed over unread."""
    out: list[Any] = []
    most = min(MAX_LINE_BYTES.get() or DEFAULT_MAX_RECORD_BYTES, SNIFF_LINE_BYTES)
    try:
        for line in read_lines(path, limit=most):
            if line.error is None:
                out.append(line.value)
            if line.number >= limit * 4 or len(out) >= limit:
                break
    except (OSError, InvalidInputError):
        return []
    return out


# -- lines kept as entries -------------------------------------------------------------


def entry_payload(fmt: str, value: Any, **extra: Any) -> dict[str, Any]:
    """The payload of a line kept as a non-context entry: the line as parsed, last (see
    :func:`~sessiondb.formats.splice.entry_line`)."""
    return {"format": fmt, **extra, "line": value}


def raw_payload(fmt: str, line: Line, **extra: Any) -> dict[str, Any]:
    """The payload of a line that is not JSON: its text (undecodable bytes escaped)."""
    return {"format": fmt, "rawLine": line.raw, "error": line.error, **extra}


def entry_label(entry: Any) -> str:
    """What a non-context entry is, for a person: the type of the line it keeps
    (``progress``, ``file-history-snapshot``, ``turn_context``), with the subtype where
    the line has one (``system: compact_boundary``, Codex's ``event_msg: token_count``);
    a Gemini CLI update line by its operation (``$set``); ``unreadable line`` for a line
    that was not JSON; ``entry`` when nothing tells."""
    if not isinstance(entry, dict):
        return "entry"
    if "line" not in entry and isinstance(entry.get("rawLine"), str):
        return "unreadable line"
    line = entry.get("line", entry)
    if not isinstance(line, dict):
        return "entry"
    kind = line.get("type")
    if isinstance(kind, str) and kind:
        payload = line.get("payload")
        sub = payload.get("type") if isinstance(payload, dict) else line.get("subtype")
        return f"{kind}: {sub}" if isinstance(sub, str) and sub else kind
    operation = next((k for k in line if isinstance(k, str) and k.startswith("$")), None)
    if operation is not None:
        return operation
    if "sessionId" in line and "startTime" in line:
        return "session metadata"
    return "entry"


def own_entry_line(fmt: str, entry: dict[str, Any] | None) -> tuple[bool, Any]:
    """``(True, line)`` for an entry this format wrote; the line as a value, or as
    :class:`RawText` for a line that was not JSON."""
    if not entry or entry.get("format") != fmt:
        return False, None
    if "line" in entry:
        return True, entry["line"]
    if isinstance(entry.get("rawLine"), str):
        return True, RawText(entry["rawLine"])
    return False, None


@dataclass(frozen=True, slots=True)
class RawText:
    """A line to write back as it was read, not as JSON."""

    text: str


def dump_line(value: Any) -> bytes:
    """One JSONL line for ``value`` (or the text of a :class:`RawText`), with ``\\n``."""
    if isinstance(value, RawText):
        return value.text.encode("utf-8", "surrogateescape") + b"\n"
    text = jsoncodec.dumps(value)
    if jsoncodec.is_exact_path(text):
        text = text[1:]
    return text.encode() + b"\n"


def dump_stored_line(value: Any) -> bytes:
    """:func:`dump_line` for a line built from stored values, which came from JSON text
    and so hold no NaN or infinity: orjson's bytes as they are, without the walk that
    looks for them (a third of an export's time, as nearly every line holds a null)."""
    if not isinstance(value, RawText):
        try:
            return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)
        except (TypeError, orjson.JSONEncodeError):
            pass  # a lone surrogate or a big integer: the exact path
    return dump_line(value)


# -- timestamps ------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 string or epoch milliseconds as aware UTC; ``None`` if neither."""
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            return None
        if at.tzinfo is UTC:  # a "Z" or "+00:00": nearly every transcript's
            return at
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def format_time(at: datetime) -> str:
    """``at`` as ISO 8601 UTC with a ``Z``: milliseconds, or microseconds when set."""
    at = at.astimezone(UTC)
    spec = "milliseconds" if at.microsecond % 1000 == 0 else "microseconds"
    return at.isoformat(timespec=spec).replace("+00:00", "Z")
