"""Session file formats: one module per format, each a streaming reader and a writer.

``FORMATS`` maps a name to its :class:`Format`; :func:`read_path` reads a file or a
directory tree (formats mixed) into :class:`ImportedSession` values; a format's
``write`` turns a stored session back into its files. Nothing here knows a database:
the store writes what the readers give and hands the writers what it reads.

``anthropic``, ``openai_chat`` and ``openai_responses`` live here too, but are provider
API formats (a context as a request, a response as messages), not file formats: they
are not in ``FORMATS`` and :func:`detect` never picks them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..errors import InvalidInputError
from .base import (
    BadLine,
    Format,
    ImportedRecord,
    ImportedSession,
    SessionDetails,
)
from .claude_code import ClaudeCodeFormat, session_parts
from .native import METADATA_FILE, SESSION_FILE, NativeFormat
from .noumen import NoumenFormat
from .pi import PiFormat

FORMATS: dict[str, Format] = {
    f.name: f for f in (NativeFormat(), ClaudeCodeFormat(), PiFormat(), NoumenFormat())
}

__all__ = [
    "FORMATS",
    "BadLine",
    "Format",
    "ImportedRecord",
    "ImportedSession",
    "SessionDetails",
    "detect",
    "get_format",
    "read_path",
]


def get_format(name: str) -> Format:
    """The format called ``name``.

    Raises:
        InvalidInputError: no such format.
    """
    try:
        return FORMATS[name]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise InvalidInputError(f"unknown format {name!r}; known formats: {known}") from None


def detect(path: Path) -> Format | None:
    """The format of a file or session directory, from its first lines; ``None`` if no
    format claims it."""
    for fmt in FORMATS.values():
        if fmt.sniff(path):
            return fmt
    return None


def read_path(
    path: Path, format: str = "auto", *, strict: bool = False
) -> Iterator[ImportedSession]:
    """The sessions under ``path`` (a file, a session directory, or a tree of both), in a
    stable order, each file's main session before its children.

    With ``format="auto"`` every file is detected on its own; files no format claims are
    skipped. A Claude Code file's part files and subagent files are read with it.

    Raises:
        InvalidInputError: an unknown format name, or ``path`` does not exist.
        ImportFormatError: with ``strict``, the first bad line.
    """
    chosen = None if format == "auto" else get_format(format)
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file or directory")
    for candidate in _candidates(path):
        fmt = chosen if chosen is not None else detect(candidate)
        if fmt is not None and (chosen is None or fmt.sniff(candidate) or candidate == path):
            yield from fmt.read(candidate, strict=strict)


def _candidates(path: Path) -> Iterator[Path]:
    """Session files and directories under ``path``, each session once."""
    if path.is_file():
        yield path
        return
    if (path / SESSION_FILE).is_file() and (path / METADATA_FILE).is_file():
        yield path
        return
    entries = sorted(path.iterdir())
    stems = {p.stem for p in entries if p.is_file() and p.suffix == ".jsonl"}
    for entry in entries:
        if entry.is_dir():
            if entry.name in stems:
                # <sessionId>/subagents/ belongs to <sessionId>.jsonl, read with it.
                continue
            yield from _candidates(entry)
        elif entry.suffix == ".jsonl":
            _, parts = session_parts(entry)
            if parts and parts[0][1] != entry and parts[0][1].exists():
                continue  # a part file, read with its main file
            yield entry
