"""What a session file format is (:class:`Format`), and what the file formats share
(:class:`FileFormat`).

The pieces a format is built from live in modules of their own, one concern each:

- :mod:`~sessiondb.formats.imported`: the neutral shape a reader gives
  (:class:`ImportedSession`, :class:`ImportedRecord`, bad lines);
- :mod:`~sessiondb.formats.stored`: stored records as a writer takes them;
- :mod:`~sessiondb.formats.lines`: the bounded line reader, detection's look at a
  file, bad lines, entry payloads, lines written back and timestamps;
- :mod:`~sessiondb.formats.paths`: safe file names and files opened without following
  a link;
- :mod:`~sessiondb.formats.splice`: export's lines cut out of stored text unparsed;
- :mod:`~sessiondb.formats.spill`: indexes that move to a temporary file as they grow.

Every name those modules give the formats is importable from here as well, as it was
when they all lived in this module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from ..models import Record, SessionInfo
from .imported import (
    BAD_LINES_KEPT,
    REASON_CHARS,
    BadLine,
    ImportedRecord,
    ImportedSession,
    RecordKind,
    SessionDetails,
    SkippedPath,
)
from .lines import (
    MAX_LINE_BYTES,
    SNIFF_LINE_BYTES,
    Line,
    RawText,
    bad_line,
    dump_line,
    dump_stored_line,
    entry_payload,
    file_kind,
    format_time,
    is_gemini_line,
    is_regular,
    open_regular,
    own_entry_line,
    parse_json,
    parse_time,
    raw_payload,
    read_lines,
    sniff_values,
)
from .paths import (
    MAX_NAME,
    WRITE_BUFFER,
    export_scope,
    id_name,
    open_output,
    output_name,
    output_parts,
    replace_output,
    safe_name,
)
from .spill import NO_PARENT, PENDING, SPILL_ENTRIES, DiskMap, NodeTree, UuidKeys, spilled
from .splice import entry_line, splice, spliced_line
from .stored import Row, StoredRecord, stored_records

__all__ = [
    "BAD_LINES_KEPT",
    "MAX_LINE_BYTES",
    "MAX_NAME",
    "NO_PARENT",
    "PENDING",
    "REASON_CHARS",
    "SNIFF_LINE_BYTES",
    "SPILL_ENTRIES",
    "WRITE_BUFFER",
    "BadLine",
    "DiskMap",
    "FileFormat",
    "Format",
    "ImportedRecord",
    "ImportedSession",
    "Line",
    "NodeTree",
    "RawText",
    "RecordKind",
    "Row",
    "SessionDetails",
    "SkippedPath",
    "StoredRecord",
    "UuidKeys",
    "bad_line",
    "dump_line",
    "dump_stored_line",
    "entry_line",
    "entry_payload",
    "export_scope",
    "file_kind",
    "format_time",
    "id_name",
    "is_gemini_line",
    "is_regular",
    "open_output",
    "open_regular",
    "output_name",
    "output_parts",
    "own_entry_line",
    "parse_json",
    "parse_time",
    "raw_payload",
    "read_lines",
    "replace_output",
    "safe_name",
    "sniff_values",
    "spilled",
    "splice",
    "spliced_line",
    "stored_records",
]


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


class FileFormat(ABC):
    """A :class:`Format` of JSONL files: what the file formats share.

    A subclass names itself (``name``) and gives :meth:`sniff`, :meth:`read` and
    :meth:`write_stored`; :meth:`write` and :meth:`write_rows` go through
    :meth:`write_stored` (a format with a faster way over rows overrides
    :meth:`write_rows`). The helpers build a session to read into, look at a file's
    first lines, and write a file of lines.
    """

    name: str

    @abstractmethod
    def sniff(self, path: Path) -> bool:
        """Whether ``path`` (a file or a directory) looks like this format."""

    @abstractmethod
    def read(self, path: Path, *, strict: bool = False) -> Iterator[ImportedSession]:
        """The sessions in ``path``, a parent before its children (see :class:`Format`)."""

    @abstractmethod
    def write_stored(
        self, info: SessionInfo, records: Iterable[StoredRecord], out_dir: Path
    ) -> list[Path]:
        """Write one session's stored records under ``out_dir`` (see :class:`Format`)."""

    def write(self, info: SessionInfo, records: Iterable[Record], out_dir: Path) -> list[Path]:
        return self.write_stored(info, map(StoredRecord.of, records), out_dir)

    def write_rows(self, info: SessionInfo, rows: Iterable[Row], out_dir: Path) -> list[Path]:
        return self.write_stored(info, stored_records(rows), out_dir)

    def session(self, key: str, path: Path) -> ImportedSession:
        """A session of this format read from ``path``, its key ``<name>:<key>``; the
        reader sets its ``records``."""
        return ImportedSession(
            key=f"{self.name}:{key}", format=self.name, path=path, records=iter(())
        )

    @staticmethod
    def jsonl_values(path: Path, limit: int = 25) -> list[Any]:
        """The first values of ``path`` for detection (:func:`sniff_values`); none when
        it is not a ``.jsonl`` file."""
        if not path.is_file() or path.suffix != ".jsonl":
            return []
        return sniff_values(path, limit)

    @classmethod
    def transcript_objects(cls, path: Path) -> list[dict[str, Any]]:
        """The JSON objects among the first values of ``path``, for a format of
        transcript lines to look for its own; none when it is not a ``.jsonl`` file or
        one of them is a native line (``recordType``), a pi session header or a Gemini
        CLI line (:func:`is_gemini_line`): a file of those is theirs."""
        values = [v for v in cls.jsonl_values(path) if isinstance(v, dict)]
        if any(
            "recordType" in v or v.get("type") == "session" or is_gemini_line(v) for v in values
        ):
            return []
        return values

    @staticmethod
    def write_lines(out_dir: Path, parts: tuple[str, ...], lines: Iterable[Any]) -> Path:
        """Write ``lines`` (values, or :class:`RawText`) as the file ``out_dir / parts``,
        opened with :func:`open_output`; its path. A generator of lines is closed when
        the write ends, written out or not, so it can release what it holds."""
        try:
            path, out = open_output(out_dir, *parts)
            with out:
                write = out.write
                for line in lines:
                    write(dump_stored_line(line))
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
        return path
