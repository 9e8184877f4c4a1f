"""What an import reports: :class:`ImportReport` at the end, :class:`ImportProgress`
after each file, and :class:`ImportFailure` for a file or session not imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..formats import BAD_LINES_KEPT, BadLine, ImportedSession, SkippedPath


@dataclass(frozen=True, slots=True)
class ImportFailure:
    """A file, or one session of it, that was not imported; nothing of it was written."""

    path: Path
    reason: str
    key: str | None = None

    def __str__(self) -> str:
        # An ImportFormatError's message already starts with ``path:line``.
        text = (
            self.reason
            if self.reason.startswith(f"{self.path}:")
            else f"{self.path}: {self.reason}"
        )
        return text if self.key is None else f"{text} (session {self.key})"


@dataclass
class ImportReport:
    """What :func:`import_path` did.

    Attributes:
        session_ids: every session the path produced or matched, a file's main session
            before its children.
        created: sessions written by this import.
        skipped: sessions already stored (by an earlier import), left as they were.
        records: records written.
        files: session files and directories read.
        bad_lines: the first ``BAD_LINES_KEPT`` (100) lines that could not be read
            (``path:line``), their reasons cut short: kept as raw entries; a line
            over the store's ``max_record_bytes``, skipped; a line whose record is over
            a limit as stored, an entry naming the line and the limit.
        bad_line_count: every bad line, kept in ``bad_lines`` or not.
        failures: files or sessions not imported, with the reason.
        skipped_paths: paths passed over, with the reason: symbolic links (not
            followed, or leading outside the root), FIFOs, sockets, devices,
            directories reached a second time (none of them opened), and ``.jsonl``
            files no format recognises (or not of the format asked for).
    """

    session_ids: list[str] = field(default_factory=list)
    created: int = 0
    skipped: int = 0
    records: int = 0
    files: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    failures: list[ImportFailure] = field(default_factory=list)
    bad_line_count: int = 0
    skipped_paths: list[SkippedPath] = field(default_factory=list)

    def add_bad_lines(self, session: ImportedSession) -> None:
        """Count ``session``'s bad lines, keeping up to ``BAD_LINES_KEPT`` in all."""
        self.bad_line_count += session.bad_line_count
        room = BAD_LINES_KEPT - len(self.bad_lines)
        if room > 0:
            self.bad_lines.extend(session.bad_lines[:room])

    @property
    def ok(self) -> bool:
        """Whether every file was imported (bad lines kept as entries do not count)."""
        return not self.failures


@dataclass(frozen=True, slots=True)
class ImportProgress:
    """Where an import stands, after each file. ``records`` and ``created`` count what
    was read and checked; batches are written as they fill, and the last at the end."""

    path: Path
    files_done: int
    files_total: int
    records: int
    created: int
    skipped: int
    failed: int


def crash_reason(what: str, exc: Exception) -> str:
    """The reason an :class:`ImportFailure` gives when ``what`` (a reader, detection)
    raised something it should not have."""
    return f"{what} failed unexpectedly ({type(exc).__name__}: {exc}); please report it"
