"""The neutral shape every file format reads into and writes from, and the line reader.

A reader turns a file (or a directory) into :class:`ImportedSession` values, each a
stream of :class:`ImportedRecord` values in file order. The store gives record ``i``
(0-based) the seq ``base + i + 1``, where ``base`` is the session's ``fork_seq`` (``0``
for a root session). ``target`` (a tombstone's) and ``first_kept`` (a compaction's) are
positions on the same scale: ``seq = base + position + 1``, so a negative position names
a record the session inherits from its parent. Payloads of compactions and tombstones
leave out ``firstKeptSeq`` and ``targetSeq``: the store writes them from the positions.

A format keeps what it needs to write its own line back in the payload, under a key
named after the format (``claudeCode``, ``pi``, ``noumen``); a line that is not a
message becomes an ``entry`` record whose payload is :func:`entry_payload` (the line as
parsed) or :func:`raw_payload` (a line that is not JSON, kept as text).

Lines are read as bytes and split on ``\\n`` only: U+2028 and its kind stay inside
the line. A UTF-8 BOM and a ``\\r`` before the ``\\n`` are dropped, a last line without
``\\n`` that does not parse is a torn write and is ignored (spec S7.9).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sqlite3
import stat
import struct
from array import array
from binascii import unhexlify
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, Protocol

import orjson

from .. import jsoncodec
from ..config import DEFAULT_MAX_RECORD_BYTES
from ..errors import ExportPathError, ImportFormatError, InvalidInputError
from ..models import Compaction, Prune, Record, SessionInfo, Tombstone

RecordKind = Literal["message", "compaction", "tombstone", "entry", "prune"]


@dataclass(slots=True)
class ImportedRecord:
    """One record of an imported session, before it has a seq (read-only by convention:
    not frozen, as a frozen dataclass takes three times as long to build, once a line).

    Attributes:
        kind: ``message``, ``compaction``, ``tombstone`` or ``entry``.
        payload: the record's JSON object; for a message, a wire-shape message
            (``role``, ``content`` as a list of blocks, …) that
            :func:`sessiondb.models.wire_message_error` accepts.
        uuid: the record's key, unique within the session (the external uuid where the
            format has one); the store's idempotency key. ``None`` when the line has
            none or repeats an earlier one.
        parent_uuid: the external parent link, if the format has one.
        created_at: when the tool wrote the line; ``None`` when the line says nothing.
        target: a tombstone's target, as a position (see the module docstring).
        first_kept: a compaction's first kept record, as a position.
        checked: a message payload the reader already passed through
            :func:`sessiondb.models.wire_message_error` (every reader does, to decide
            between a message and an entry), so the import does not check it again.
        splice: a checked message to store laid out for :func:`spliced_line`: the key
            of its envelope, ``{"line": …, "content": "blocks" | "string"}`` (see
            :func:`splice`).
    """

    kind: RecordKind
    payload: dict[str, Any]
    uuid: str | None = None
    parent_uuid: str | None = None
    created_at: datetime | None = None
    target: int | None = None
    first_kept: int | None = None
    checked: bool = False
    splice: str | None = None


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that could not be read: kept as a raw ``entry`` record, or skipped when it
    is longer than a record may be. ``reason`` is cut to ``REASON_CHARS`` characters."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True, slots=True)
class SkippedPath:
    """A path an import passed over without opening it, and why (a symbolic link not
    followed, a FIFO, a directory already visited, ...)."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# Bad lines a session (and an import's report) keeps; the rest are only counted, so a
# file of 2,000,000 bad lines costs 100 objects, not 2,000,000 (458 MB).
BAD_LINES_KEPT = 100
# The longest reason a kept bad line holds (an error message may quote the line).
REASON_CHARS = 200


@dataclass
class SessionDetails:
    """The session row's fields, as far as the file tells them."""

    name: str | None = None
    model: str | None = None
    created_at: datetime | None = None
    source: Literal["interactive", "cron"] = "interactive"
    cron_job_id: str | None = None
    system_prompt_override: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class ImportedSession:
    """One session read from a file, with its records as a stream.

    ``records`` is a one-shot iterator that reads the file as it goes. ``details`` and
    ``bad_lines`` fill in while it is consumed and are final once it is exhausted (a
    file's title or model may come on its last line), so write the session row's
    fields after the records, in the same transaction.

    Attributes:
        key: a stable external key (``"claude-code:<sessionId>"``, ``"pi:<id>"``, …):
            the same file gives the same key, so a re-import can find the session.
        format: the format's registry name.
        path: the file or directory the session came from.
        records: the records, in order.
        parent_key: the key of the parent session (a subagent's or a fork's).
        fork_seq: the parent's seq the session forks after; ``0`` for a child that
            inherits nothing (a subagent); ``None`` without a parent.
        bad_lines: the first ``BAD_LINES_KEPT`` bad lines.
        bad_line_count: every bad line, kept or not.
    """

    key: str
    format: str
    path: Path
    records: Iterator[ImportedRecord]
    parent_key: str | None = None
    fork_seq: int | None = None
    details: SessionDetails = field(default_factory=SessionDetails)
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_line_count: int = 0


class StoredRecord:
    """A stored record as the writers need it: its wire object, no models.

    ``data`` is what the record's model would give with ``to_wire()`` (the message, the
    compaction, …, or the entry's object). Built from a row, a message is its stored
    JSON as parsed: the wire checks made it a value the model reads back unchanged
    (``tests/test_read_back.py``), so export skips the model (about half its time).
    A row's payload is parsed, and its timestamp converted, only when a writer asks.
    """

    __slots__ = ("_at", "_data", "_text", "kind", "seq", "session_id", "uuid")

    def __init__(
        self, session_id: str, seq: int, kind: str, created_at: datetime | str,
        uuid: str | None, data: dict[str, Any] | None = None, text: str | bytes | None = None,
    ) -> None:  # fmt: skip
        self.session_id, self.seq, self.kind, self.uuid = session_id, seq, kind, uuid
        self._at, self._data, self._text = created_at, data, text

    @property
    def created_at(self) -> datetime:
        at = self._at
        if not isinstance(at, datetime) or at.tzinfo is not UTC:
            at = self._at = _utc(at)
        return at

    @property
    def text(self) -> str | bytes | None:
        """The row's payload text as stored, or its UTF-8 bytes as export reads it
        (``None`` for a record built from a model)."""
        return self._text

    @property
    def data(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            text = self._text
            assert text is not None
            if self.kind == "message":
                parsed: dict[str, Any] = jsoncodec.loads(text)
                self._data = parsed
                return parsed
            data = jsoncodec.loads(text)
            model = _OVERLAYS.get(self.kind)
            if model is not None:
                # Overlays are few; their model says what a read gives (defaults, coercions).
                data = model.model_validate(data).to_wire()
            self._data = data
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredRecord):
            return NotImplemented
        mine = (self.session_id, self.seq, self.kind, self.created_at, self.uuid, self.data)
        return mine == (
            other.session_id, other.seq, other.kind, other.created_at, other.uuid, other.data
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoredRecord({self.session_id!r}, {self.seq}, {self.kind!r})"

    @classmethod
    def of(cls, record: Record) -> StoredRecord:
        """The stored form of a :class:`~sessiondb.models.Record`."""
        typed = record.message or record.compaction or record.tombstone or record.prune
        data = typed.to_wire() if typed is not None else (record.entry or {})
        return cls(record.session_id, record.seq, record.kind, record.created_at, record.uuid, data)

    @classmethod
    def from_row(
        cls, session_id: str, seq: int, kind: str, created_at: datetime | str, uuid: str | None,
        payload: str,
    ) -> StoredRecord:  # fmt: skip
        """A row of the records table (``created_at`` as the driver gives it)."""
        return cls(session_id, seq, kind, created_at, uuid, None, payload)


def _utc(value: datetime | str) -> datetime:
    """A timestamp column's value as aware UTC (SQLite gives text; see ``rows.utc``)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_OVERLAYS: dict[str, type[Compaction] | type[Tombstone] | type[Prune]] = {
    "compaction": Compaction,
    "tombstone": Tombstone,
    "prune": Prune,
}


class Format(Protocol):
    """A session file format: a streaming reader and a writer."""

    name: str

    def sniff(self, path: Path) -> bool:
        """Whether ``path`` (a file or a directory) looks like this format."""
        ...

    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        """The sessions in ``path``, a parent before its children.

        Raises:
            ImportFormatError: with ``strict``, the first bad line.
        """
        ...

    def write(self, info: SessionInfo, records: Iterable[Record], out_dir: Path) -> list[Path]:
        """Write one session as this format's file(s) under ``out_dir``; the paths written.

        ``records`` are what ``store.records(id, include_tombstoned=True)`` returns. A
        file is named from the session id, or from a name in its metadata that
        :func:`safe_name` passes (:func:`output_name`), and opened with
        :func:`open_output`: nothing is written outside ``out_dir`` or through a link.

        Raises:
            ExportPathError: a link, a FIFO, a directory or a hard-linked file where a
                file or a directory of the export goes.
        """
        ...

    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        """:meth:`write` over :class:`StoredRecord` values."""
        ...

    def write_rows(self, info: SessionInfo, rows: Iterable[Row], out_dir: Path) -> list[Path]:
        """:meth:`write` over rows of the records table as export reads them (its bulk
        path): ``(session_id, seq, kind, created_at, uuid, payload)``, the payload as
        text or as its UTF-8 bytes; a format
        with no faster way passes them to :meth:`write_stored` (:func:`stored_records`)."""
        ...


# A row of the records table as export reads it (``statements.RECORD_READ``).
Row = tuple[str, int, str, datetime | str, str | None, str | bytes]


def stored_records(rows: Iterable[Row]) -> Iterator[StoredRecord]:
    """Export's rows as :class:`StoredRecord` values."""
    for session_id, seq, kind, created_at, uuid, text in rows:
        yield StoredRecord(session_id, seq, kind, created_at, uuid, None, text)


# -- reading lines ---------------------------------------------------------------------

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
    (read-only by convention, not frozen: see :class:`ImportedRecord`).

    ``exact``: parsed by the standard library (orjson refused the line), the only way a
    value holds a lone surrogate: a reader checks keys for them on such lines only.
    """

    number: int
    value: Any = None
    raw: str | None = None
    error: str | None = None
    exact: bool = False


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
        raise ValueError("nested too deeply") from exc
    # The standard library takes NaN, Infinity and 1e400; no store can hold them.
    jsoncodec.dumps(value)
    return value, True


# The longest line an import reads, in bytes: the importing store's max_record_bytes
# (``transfer.import_path`` sets it); a longer line could only make a record over it.
# Unset, a reader takes ``DEFAULT_MAX_RECORD_BYTES``.
MAX_LINE_BYTES: ContextVar[int | None] = ContextVar("MAX_LINE_BYTES", default=None)
# What is read of a line over the limit at a time while it is passed over.
_SKIP_CHUNK = 1 << 20
# The longest line detection looks at: a longer one is passed over, so sniffing a file
# whose first line is 200 MB reads it in 1 MB steps and keeps none of it.
SNIFF_LINE_BYTES = 4 * 1024 * 1024


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("FIFO", "socket", ...)."""
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISDIR(mode):
        return "directory"
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
        while True:
            data = readline(most)
            if not data:
                return
            number += 1
            complete = data.endswith(b"\n")
            if not complete and len(data) == most:
                while True:  # pass the rest of the line over
                    rest = readline(_SKIP_CHUNK)
                    if not rest or rest.endswith(b"\n"):
                        break
                if session is not None:
                    reason = f"the line is over {limit} bytes, the store's max_record_bytes"
                    bad_line(session, Line(number), reason, strict)
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
                yield Line(number, raw=data.decode("utf-8", "surrogateescape"), error=_why(exc))
                continue
            yield Line(number, value=value, exact=exact)


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


# -- payload helpers -------------------------------------------------------------------


def entry_payload(fmt: str, value: Any, **extra: Any) -> dict[str, Any]:
    """The payload of a line kept as a non-context entry: the line as parsed, last (see
    :func:`entry_line`)."""
    return {"format": fmt, **extra, "line": value}


def raw_payload(fmt: str, line: Line, **extra: Any) -> dict[str, Any]:
    """The payload of a line that is not JSON: its text (undecodable bytes escaped)."""
    return {"format": fmt, "rawLine": line.raw, "error": line.error, **extra}


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


# The buffer of an exported file: a session's lines go out in a few writes, not one
# system call per 8 KB (a fifth of the time spent writing a Claude Code export).
WRITE_BUFFER = 1 << 20


# -- export paths -------------------------------------------------------------------------
#
# A writer takes file names from session metadata, which a tenant or an imported file
# set: a name is used only when :func:`safe_name` passes it, else the session id. Files
# are then opened one path component at a time, each relative to its parent directory's
# descriptor and never through a symbolic link, so nothing is written outside the
# output directory whatever the names or the tree already there hold.

# The longest stored name export takes as a file name: a Claude Code stem is 36
# characters, a pi file name about 70; with "_part<n>.jsonl" added it stays far under
# the 255 bytes a file system allows in one name.
MAX_NAME = 200
# One path component of safe characters (ASCII letters, digits, ".", "_", "-"), not
# starting with a dot or a dash.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def safe_name(value: Any, *, suffix: str | None = None) -> str | None:
    """``value`` if it may name a file of an export, else ``None`` (use the session id).

    A name passes when it is a string of at most :data:`MAX_NAME` ASCII letters, digits,
    ``.``, ``_`` and ``-``, does not start with a dot or a dash, holds no ``..``, and
    ends with ``suffix`` (after at least one character) when one is given: one path
    component that is neither hidden nor taken for an option, with no separator or NUL.
    """
    if (
        not isinstance(value, str)
        or len(value) > MAX_NAME
        or _SAFE_NAME.fullmatch(value) is None
        or ".." in value
    ):
        return None
    if suffix is not None and (len(value) <= len(suffix) or not value.endswith(suffix)):
        return None
    return value


# The file paths (as parts, lower case: a file system may ignore case) the sessions of
# the export in progress were given, while :func:`export_scope` is on.
_TAKEN: ContextVar[set[tuple[str, ...]] | None] = ContextVar("_TAKEN", default=None)


def id_name(session_id: str) -> str:
    """The file name of a session that has no name of its own (or may not use it)."""
    return f"{session_id}.jsonl"


@contextmanager
def export_scope(session_ids: Iterable[str]) -> Iterator[None]:
    """Inside (and in the threads it starts): a file name taken from metadata goes to
    one session only, and never is the :func:`id_name` of one of ``session_ids``, the
    sessions to export (:func:`output_name`). Nested scopes share the outer one."""
    if _TAKEN.get() is not None:
        yield
        return
    token = _TAKEN.set({(id_name(i).lower(),) for i in session_ids})
    try:
        yield
    finally:
        _TAKEN.reset(token)


def output_name(named: tuple[str, ...] | None, fallback: tuple[str, ...]) -> tuple[str, ...]:
    """The path (as parts under the output directory) a session's first file goes to:
    ``named`` (built from names :func:`safe_name` passed) unless it is ``None`` or
    another session of the export took it already, else ``fallback`` (built from the
    session id, which is the session's own and always used)."""
    taken = _TAKEN.get()
    if named is not None:
        if taken is None:
            return named
        key = tuple(part.lower() for part in named)
        if key not in taken:
            taken.add(key)
            return named
    if taken is not None:
        taken.add(tuple(part.lower() for part in fallback))
    return fallback


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# No O_TRUNC: a file is truncated only once it is known to be a regular file with no
# other link. O_NONBLOCK: a FIFO planted at the path fails (ENXIO) instead of blocking.
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_MODE = 0o644
# What opening a component that is a symbolic link, a FIFO or a directory gives.
_REFUSED = {
    errno.ELOOP: "it is a symbolic link (export never writes through one)",
    errno.ENOTDIR: "it is not a directory",
    errno.ENXIO: "it is not a regular file",
    errno.EISDIR: "it is a directory",
}


def output_parts(parts: tuple[str, ...]) -> tuple[str, ...]:
    """``parts`` if each is one path component a file or directory may be named,
    else :class:`~sessiondb.errors.ExportPathError`."""
    if not parts:
        raise ExportPathError("", "no file name")
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part or os.sep in part:
            raise ExportPathError(part, "a file name must be one path component")
    return parts


def open_output(out_dir: Path, *parts: str) -> tuple[Path, IO[bytes]]:
    """``out_dir / parts`` opened for writing an export (truncated, large buffer); the
    path and the stream.

    ``out_dir`` is the caller's (made if missing; it may itself be a symbolic link).
    Below it, every part is one path component (:func:`output_parts`); directories are
    made as needed; nothing is followed: a symbolic link, a FIFO, a device, a directory
    or a file with another hard link where a part should be is refused.

    Raises:
        ExportPathError: a part is refused (the path and the reason named).
        OSError: the file system refused otherwise (no space, no permission).
    """
    path = out_dir.joinpath(*output_parts(parts))
    folder = _open_dirs(out_dir, parts[:-1])
    try:
        fd = _open_at(path, parts[-1], _FILE_FLAGS, folder)
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ExportPathError(str(path), "it is not a regular file")
        if st.st_nlink > 1:
            raise ExportPathError(str(path), "it has another hard link")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        return path, os.fdopen(fd, "wb", buffering=WRITE_BUFFER)
    except BaseException:
        os.close(fd)
        raise


def replace_output(out_dir: Path, *parts: str, data: bytes) -> Path:
    """Write ``data`` as ``out_dir / parts`` at once (a temporary file beside it, then a
    rename), as :func:`open_output` would: the path.

    Raises:
        ExportPathError: as :func:`open_output`; a symbolic link at the path is refused,
            not replaced.
        OSError: the file system refused otherwise.
    """
    path = out_dir.joinpath(*output_parts(parts))
    name = parts[-1]
    temp = f"{name}.tmp"
    folder = _open_dirs(out_dir, parts[:-1])
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=folder)  # a leftover (or a link planted) goes, unread
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = _open_at(path, temp, flags, folder)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                os.unlink(temp, dir_fd=folder)
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise ExportPathError(str(path), f"it is {what}")
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)
    return path


def _open_dirs(out_dir: Path, dirs: tuple[str, ...]) -> int:
    """A descriptor of ``out_dir / dirs``, each of ``dirs`` made if missing and opened
    without following a link."""
    try:
        fd = os.open(out_dir, _DIR_FLAGS)
    except FileNotFoundError:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir, _DIR_FLAGS)
    where = out_dir
    try:
        for name in dirs:
            where = where / name
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=fd)
            child = _open_at(where, name, _DIR_FLAGS | os.O_NOFOLLOW, fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_at(path: Path, name: str, flags: int, folder: int) -> int:
    """``name`` opened in directory ``folder``; a refusal (a link, a FIFO, …) is an
    :class:`ExportPathError` naming ``path``."""
    try:
        return os.open(name, flags, _FILE_MODE, dir_fd=folder)
    except OSError as exc:
        reason = _REFUSED.get(exc.errno or 0)
        if reason is None:
            raise
        if exc.errno == errno.ENOTDIR:  # what O_DIRECTORY | O_NOFOLLOW gives on a link too
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                    reason = _REFUSED[errno.ELOOP]
        raise ExportPathError(str(path), reason) from exc


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


# -- spliced lines ----------------------------------------------------------------------
#
# Export writes a format's line back as its envelope's line with the message content put
# in again. Parsing a 1 kB payload for that costs about 2 us, and most of it goes to the
# envelope's dozen small strings, not to the content. So a reader may store a message
# laid out for splicing, and a writer then cuts the line out of the stored text with no
# parse:
#
#     {"role": ..., ..., "content": [...],
#      KEY: {"content": form, "line": {..., "message": {...}}, "splice": hex}}
#
# The content comes just before the envelope, the envelope last, the message last in
# its line, and ``splice`` (32 hex digits) holds where the content is as the line holds
# it (the payload's content list, or the text of its one text block), where the line
# starts and where its message ends. The writer checks the text is still laid out so:
# the first ``"content":`` in it is the content's key (none of the reader's members
# before it holds an object; a ``Message`` model, or a sorted dump, writes ``content``
# second or first, so a payload serialised again is caught), the envelope opens where
# the content ends, and the line and its message start and end where the offsets say.
# A text that fails any of these is parsed instead.

_SPLICE_AT = ',"splice":"'
_SPLICE_AT_BYTES = _SPLICE_AT.encode()
_SPLICE_TAIL = len(_SPLICE_AT) + 32 + 3  # the hex, then '"}}'
_SPLICE_FIELDS = struct.Struct(">4I")
# The envelope's opening text by (key, form), and the forms a splice knows.
_OPENERS: dict[tuple[str, str], bytes] = {}
_FORMS = frozenset(("blocks", "string"))
# The text block a one-string content is stored as (``wire_message``'s form).
_TEXT_BLOCK = b'[{"type":"text","text":'


def splice(payload: dict[str, Any], key: str) -> str | None:
    """The text of message ``payload`` laid out for :func:`spliced_line`, its envelope
    under ``key`` given the ``splice`` member the text ends with.

    The payload must be in the stored order already (the reader builds it so): its
    members, none an object with a ``content`` key; then ``content``; then the envelope
    ``{"content": form, "line": line}``, where ``line`` is the message's line less its
    message's ``content``, with ``message`` last. ``form`` is ``"blocks"`` (the line's
    content is the payload's content list as it is) or ``"string"`` (its one text
    block's text). ``None`` when it is not, or orjson refuses a value: store it the
    usual way.
    """
    envelope = payload[key]
    form, line = envelope["content"], envelope["line"]
    if (
        len(envelope) != 2
        or next(iter(envelope)) != "content"
        or form not in _FORMS
        or next(reversed(line), None) != "message"
        or next(reversed(payload)) != key
    ):
        return None
    try:
        whole = orjson.dumps(payload)
    except (TypeError, orjson.JSONEncodeError):
        return None
    begin = whole.find(b'"content":') + 10
    opener = _OPENERS.get((key, form))
    if opener is None:
        opener = _OPENERS[key, form] = b',"%s":{"content":"%s","line":{' % (
            key.encode(),
            form.encode(),
        )
    stop = whole.find(opener, begin)
    brace = len(whole) - 4  # the message's "}", then the line's, the envelope's, the payload's
    if (
        begin < 10
        or stop < 0
        or whole.count(opener, stop + 1)  # the envelope opens once, after the content
        or whole[-4:] != b"}}}}"
        or brace > 0xFFFFFFFF
    ):
        return None
    line_at = stop + len(opener) - 1
    if form == "string":
        if (
            whole[begin : begin + len(_TEXT_BLOCK)] != _TEXT_BLOCK
            or whole[stop - 2 : stop] != b"}]"
        ):
            return None
        begin, stop = begin + len(_TEXT_BLOCK), stop - 2
    offsets = _SPLICE_FIELDS.pack(begin, stop, line_at, brace).hex()
    envelope["splice"] = offsets
    return f'{whole[:-2].decode()}{_SPLICE_AT}{offsets}"}}}}'


def spliced_line(text: str | bytes) -> bytes | None:
    """The line a :func:`splice` payload's text (or its UTF-8 bytes, as export reads it)
    holds, with its newline; ``None`` for any other text (the writer then parses the
    payload)."""
    data = text if text.__class__ is bytes else str(text).encode("utf-8", "surrogatepass")
    assert isinstance(data, bytes)
    end = len(data) - _SPLICE_TAIL
    if end < 10 or data[end : end + 11] != _SPLICE_AT_BYTES or data[-3:] != b'"}}':
        return None
    try:
        begin, stop, line_at, brace = _SPLICE_FIELDS.unpack(unhexlify(data[end + 11 : -3]))
    except ValueError:  # not hex (binascii.Error)
        return None
    if not 10 <= begin <= stop < line_at < brace < end:
        return None
    if data[begin] == 0x5B:  # "[": the content list itself
        key_at, opens_at = begin - 10, stop
    else:  # the text of its one text block
        key_at, opens_at = begin - len(_TEXT_BLOCK) - 10, stop + 2
        if data[key_at + 10 : begin] != _TEXT_BLOCK or data[stop:opens_at] != b"}]":
            return None
    if (
        data.find(b'"content":') != key_at
        or data[opens_at] != 0x2C  # ",": the envelope follows the content
        or data[line_at - 7 : line_at + 1] != b'"line":{'
        or data[brace] != 0x7D  # "}"
    ):
        return None
    comma = b"" if data[brace - 1] == 0x7B else b","  # 0x7B: "{", an empty message
    return b"".join(
        (data[line_at:brace], comma, b'"content":', data[begin:stop], data[brace:end], b"\n")
    )


def entry_line(text: str | bytes, prefix: bytes) -> bytes | None:
    """The line an :func:`entry_payload` text (or its UTF-8 bytes) with no extra members
    holds (``prefix``: ``{"format":"<name>","line":{``), with its newline; ``None`` for
    any other text.

    The line is the object after the prefix up to the payload's closing brace: the
    payload has no member after it (an extra member comes before the line, and a part
    number written after it by an older import ends the text with a digit, not ``}}``).
    """
    data = text if text.__class__ is bytes else str(text).encode("utf-8", "surrogatepass")
    assert isinstance(data, bytes)
    if data.startswith(prefix) and data.endswith(b"}}"):
        return data[len(prefix) - 1 : -1] + b"\n"
    return None


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


class UuidKeys:
    """Hands out each external uuid once per session (the store's key is unique).

    The uuids handed out stay a dict until :meth:`spill` finds ``SPILL_ENTRIES`` of
    them, then move to a :class:`DiskMap`; :meth:`close` drops that file.
    """

    def __init__(self) -> None:
        self._seen: dict[str, Any] | DiskMap = {}

    def claim(self, value: Any) -> str | None:
        if not isinstance(value, str) or not value or value in self._seen:
            return None
        if not _encodable(value):
            return None
        self._seen[value] = 1
        return value

    def spill(self) -> None:
        self._seen = spilled(self._seen)

    def close(self) -> None:
        if isinstance(self._seen, DiskMap):
            self._seen.close()


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


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


# -- bounded memory for a reader's indexes ---------------------------------------------

# A reader's index (uuid -> line, tool id -> name, …) stays a dict up to this many
# entries, then moves to a temporary SQLite file: a dict costs ~0.2-0.4 kB an entry
# (key, value and slot), so without this a reader's memory grows with its file.
SPILL_ENTRIES = 20_000
_FLUSH = 2_048


class DiskMap:
    """A ``str -> JSON value`` mapping in a private temporary SQLite file, for an index
    too big to keep in memory. Writes wait in a small dict and go in batches; reads see
    them. Keys and strings may hold lone surrogates."""

    def __init__(self, items: dict[str, Any]) -> None:
        # "" is SQLite's private temporary database, deleted when the connection closes;
        # its page cache (2 MB here) bounds what it keeps in memory.
        self._db = sqlite3.connect("", check_same_thread=False)
        self._db.execute("PRAGMA cache_size = -2000")
        self._db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        self._pending: dict[str, Any] = {}
        for key, value in items.items():
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        self._pending[key] = value
        if len(self._pending) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        rows = [(_blob(k), json.dumps(v).encode()) for k, v in self._pending.items()]
        self._db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", rows)
        self._pending.clear()

    def get(self, key: Any, default: Any = None) -> Any:
        if not isinstance(key, str):
            return default
        if key in self._pending:
            return self._pending[key]
        row = self._db.execute("SELECT v FROM kv WHERE k = ?", (_blob(key),)).fetchone()
        return default if row is None else json.loads(row[0])

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def close(self) -> None:
        self._db.close()


_MISSING = object()


def _blob(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


# A node's parent in a :class:`NodeTree`: none, or an id not seen yet (resolved later).
NO_PARENT = -1
PENDING = -2


class NodeTree:
    """What a reader of lines linked by id into a tree keeps per line (a *node*,
    numbered in file order): its parent node, its record position and flags in compact
    arrays, and the id -> node map and the forward links in indexes that may move to
    disk (:func:`spilled`). The reader declares these as its fields."""

    index: dict[str, Any] | DiskMap
    pending: dict[str, Any] | DiskMap  # str(node) -> its parent's id, not seen yet
    parents: array[int]
    positions: array[int]
    flags: bytearray
    position: int

    def add_node(self, key: str, parent: str | None, flags: int) -> int:
        """A new node for the first line with id ``key``; its number."""
        node = len(self.positions)
        parent_node = NO_PARENT
        if parent is not None:
            found = self.index.get(parent)
            if found is None:
                parent_node = PENDING
                self.pending[str(node)] = parent
            else:
                parent_node = found
        self.index[key] = node
        self.parents.append(parent_node)
        self.positions.append(self.position)
        self.flags.append(flags)
        return node


def spilled(index: dict[str, Any] | DiskMap) -> dict[str, Any] | DiskMap:
    """``index`` itself, or as a :class:`DiskMap` once it holds ``SPILL_ENTRIES``."""
    if isinstance(index, dict) and len(index) >= SPILL_ENTRIES:
        return DiskMap(index)
    return index
