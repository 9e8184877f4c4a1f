"""Session file formats: one module per format, each a streaming reader and a writer.

``FORMATS`` maps a name to its :class:`Format`; :func:`read_path` reads a file or a
directory tree (formats mixed) into :class:`ImportedSession` values; a format's
``write`` turns a stored session back into its files. Nothing here knows a database:
the store writes what the readers give and hands the writers what it reads.

``anthropic``, ``openai_chat`` and ``openai_responses`` live here too, but are provider
API formats (a context as a request, a response as messages), not file formats: they
are not in ``FORMATS`` and :func:`detect` never picks them. What they share with each
other is :data:`MISSING_RESULT`, the text of the error result that stands in for a tool
call whose result was never stored.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

from ..errors import InvalidInputError
from ._provider import MISSING_RESULT
from .base import FileFormat, Format
from .claude_code import ClaudeCodeFormat, listed, part_name, subagent_files
from .codex import CodexFormat
from .gemini import GeminiFormat, main_ids, owns_directory
from .html import HtmlFormat
from .imported import (
    BAD_LINES_KEPT,
    BadLine,
    ImportedRecord,
    ImportedSession,
    SessionDetails,
    SkippedPath,
)
from .lines import file_kind
from .native import METADATA_FILE, SESSION_FILE, NativeFormat
from .noumen import NoumenFormat
from .pi import PiFormat

# The one list of file formats: detection tries them in this order, and the CLI's
# choices and the error for an unknown name come from it.
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        NativeFormat(),
        ClaudeCodeFormat(),
        PiFormat(),
        NoumenFormat(),
        CodexFormat(),
        GeminiFormat(),
    )
}
#: The format export writes when none is named: the spec's own, lossless.
DEFAULT_EXPORT_FORMAT = NativeFormat.name
#: Formats export writes and import never reads (detection never sees them): web pages.
EXPORT_ONLY: dict[str, Format] = {HtmlFormat.name: HtmlFormat()}

__all__ = [
    "BAD_LINES_KEPT",
    "DEFAULT_EXPORT_FORMAT",
    "EXPORT_ONLY",
    "FORMATS",
    "MISSING_RESULT",
    "BadLine",
    "FileFormat",
    "Format",
    "ImportedRecord",
    "ImportedSession",
    "SessionDetails",
    "SkippedPath",
    "candidates",
    "chosen_format",
    "detect",
    "export_format",
    "get_format",
    "import_root",
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
        if name in EXPORT_ONLY:
            raise InvalidInputError(
                f"format {name!r} is written by export only, not read"
            ) from None
        known = ", ".join(sorted(FORMATS))
        raise InvalidInputError(f"unknown format {name!r}; known formats: {known}") from None


def export_format(name: str) -> Format:
    """The format export writes as ``name``: a file format, or an export-only one.

    Raises:
        InvalidInputError: no such format.
    """
    fmt = FORMATS.get(name) or EXPORT_ONLY.get(name)
    if fmt is None:
        known = ", ".join(sorted([*FORMATS, *EXPORT_ONLY]))
        raise InvalidInputError(f"unknown format {name!r}; known formats: {known}")
    return fmt


def detect(path: Path) -> Format | None:
    """The format of a file or session directory, from its first lines; ``None`` if no
    format claims it."""
    for fmt in FORMATS.values():
        if fmt.sniff(path):
            return fmt
    return None


def read_path(
    path: Path,
    format: str = "auto",
    *,
    strict: bool = False,
    follow_symlinks: bool = False,
    skipped: list[SkippedPath] | None = None,
) -> Iterator[ImportedSession]:
    """The sessions under ``path`` (a file, a session directory, or a tree of both), in a
    stable order, each file's main session before its children.

    With ``format="auto"`` every file is detected on its own; files no format claims are
    skipped (see :func:`chosen_format`). A Claude Code file's part files and subagent
    files, and a Gemini CLI file's subagent directory, are read with it. Only regular
    files are read; see :func:`candidates` for what is passed over. What is skipped is
    added to ``skipped`` when given, with the reason.

    Raises:
        InvalidInputError: an unknown format name, or ``path`` does not exist or is
            neither a regular file nor a directory.
        ImportFormatError: with ``strict``, the first bad line.
    """
    chosen = None if format == "auto" else get_format(format)
    root = import_root(path)
    for candidate in candidates(root, follow_symlinks=follow_symlinks, skipped=skipped):
        fmt = chosen_format(candidate, root, chosen, skipped)
        if fmt is not None:
            yield from fmt.read(candidate, strict=strict)


def chosen_format(
    candidate: Path, root: Path, chosen: Format | None, skipped: list[SkippedPath] | None
) -> Format | None:
    """The format ``candidate`` (a file or directory :func:`candidates` gave under
    ``root``) is read in: ``chosen`` if given (a file under ``root`` it does not claim
    is passed over), else the one :func:`detect` picks. ``None`` for a file read in no
    format; it goes to ``skipped`` with the reason, so nothing is passed over silently,
    except a ``.json`` file found in a tree: most JSON files are not sessions (a native
    session's ``metadata.json``, a project's ``package.json``), and only a legacy Gemini
    CLI document is read."""
    fmt = chosen if chosen is not None else detect(candidate)
    if fmt is not None and (chosen is None or candidate == root or fmt.sniff(candidate)):
        return fmt
    if skipped is not None and (candidate == root or candidate.suffix != ".json"):
        if chosen is None:
            known = ", ".join(FORMATS)
            reason = f"no format recognises it (its first lines are none of {known})"
        else:
            reason = f"not a {chosen.name} file (format {chosen.name} was asked for)"
        skipped.append(SkippedPath(candidate, reason))
    return None


def import_root(path: Path) -> Path:
    """``path`` as an import reads it: a regular file or a directory. A symbolic link
    given as the root is followed (the caller named it); the real path is returned.

    Raises:
        InvalidInputError: ``path`` does not exist, or is a FIFO, a device, a socket.
    """
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            path = Path(os.path.realpath(path))
            mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file or directory") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInputError(f"{path}: cannot be read ({why})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InvalidInputError(f"{path}: {file_kind(mode)}, not a regular file or a directory")
    return path


_NOT_FOLLOWED = "symbolic link (not followed)"


@dataclass(slots=True)
class _Walk:
    """The state of one :func:`candidates` walk."""

    root: Path  # its real path, to check where links lead
    follow: bool
    skipped: list[SkippedPath]
    # (st_dev, st_ino) of every directory entered and every session file seen.
    directories: set[tuple[int, int]] = field(default_factory=set)
    files: set[tuple[int, int]] = field(default_factory=set)
    links: deque[Path] = field(default_factory=deque)

    def skip(self, path: Path, reason: str) -> None:
        self.skipped.append(SkippedPath(path, reason))

    def listing(self, directory: Path) -> Iterator[Path | tuple[Path]]:
        """What to do with ``directory``'s entries, in name order: a ``Path`` is a
        session file or a native session directory to yield, a ``(path,)`` a directory
        to enter. Everything else is passed over here (and reported if it is not just
        a file of another kind)."""
        try:
            with os.scandir(directory) as scan:
                entries = sorted(((e.name, e, _lstat(e)) for e in scan), key=itemgetter(0))
        except OSError as exc:
            self.skip(directory, f"cannot be listed ({exc.strerror or exc})")
            return
        regular = {name: st for name, _, st in entries if st and stat.S_ISREG(st.st_mode)}
        if SESSION_FILE in regular and METADATA_FILE in regular:
            session = regular[SESSION_FILE]
            self.files.add((session.st_dev, session.st_ino))
            yield directory  # a native session directory
            return
        stems = {name[: -len(".jsonl")] for name in regular if name.endswith(".jsonl")}
        gemini_ids = main_ids(regular)
        listed(directory, regular)  # the part files, for the reader
        for name, entry, st in entries:
            path = Path(entry.path)
            if st is None:
                continue  # gone since it was listed
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                if self.follow:
                    self.links.append(path)
                else:
                    self.skip(path, _NOT_FOLLOWED)
            elif stat.S_ISDIR(mode):
                if name in stems:
                    # <stem>/subagents/ belongs to <stem>.jsonl, read with it.
                    self.subagents(directory, name, st)
                elif owns_directory(name, gemini_ids):
                    # chats/<sessionId>/ belongs to session-<time>-<id8>.jsonl (Gemini).
                    self.directories.add((st.st_dev, st.st_ino))
                elif self.enter(path, st):
                    yield (path,)
            elif stat.S_ISREG(mode):
                if not _session_file(name):
                    continue
                self.files.add((st.st_dev, st.st_ino))
                if part_name(name[: -len(".jsonl")]) in stems:
                    continue  # a part file, read with its main file
                yield path
            else:
                self.skip(path, file_kind(mode))

    def subagents(self, directory: Path, stem: str, st: os.stat_result) -> None:
        """Report what of ``<stem>/subagents/`` the reader passes over; mark what it
        reads as seen, so no link leads to it again."""
        agents, passed = subagent_files(directory, stem)
        self.skipped.extend(passed)
        if self.follow:
            self.directories.add((st.st_dev, st.st_ino))
            for path in (directory / stem / "subagents", *agents):
                try:
                    seen = os.lstat(path)
                except OSError:
                    continue
                group = self.directories if stat.S_ISDIR(seen.st_mode) else self.files
                group.add((seen.st_dev, seen.st_ino))

    def enter(self, path: Path, st: os.stat_result) -> bool:
        """Whether the directory ``path`` (``st``) is entered: each one once."""
        key = (st.st_dev, st.st_ino)
        if key in self.directories:
            # A loop: the link leads to a directory it is inside of.
            target, inside = Path(os.path.realpath(path)), Path(os.path.realpath(path.parent))
            loop = path.is_symlink() and (target == inside or target in inside.parents)
            self.skip(path, "directory already visited" + (" (link loop)" if loop else ""))
            return False
        self.directories.add(key)
        return True

    def follow_link(self, link: Path) -> Path | tuple[Path] | None:
        """Where the link ``link`` leads, if it is followed: a session file to yield,
        a ``(directory,)`` to enter, else ``None`` (and the reason reported)."""
        try:
            target = Path(os.path.realpath(link, strict=True))
            st = os.lstat(target)
        except (OSError, ValueError):
            self.skip(link, "symbolic link to nothing (broken, or a loop)")
            return None
        if target != self.root and self.root not in target.parents:
            self.skip(link, "symbolic link to outside the import root")
            return None
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            return (target,) if self.enter(link, st) else None
        if stat.S_ISREG(mode):
            if not _session_file(target.name):
                return None
            key = (st.st_dev, st.st_ino)
            if key in self.files:
                self.skip(link, f"symbolic link to a file already read ({target})")
                return None
            self.files.add(key)
            return target
        self.skip(link, f"symbolic link to a {file_kind(mode)}")
        return None


def _session_file(name: str) -> bool:
    """Whether a file called ``name`` may hold sessions: ``.jsonl``, or ``.json`` (a
    legacy Gemini CLI session document; detection looks inside)."""
    return name.endswith((".jsonl", ".json"))


def _lstat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except OSError:
        return None


def candidates(
    root: Path, *, follow_symlinks: bool = False, skipped: list[SkippedPath] | None = None
) -> Iterator[Path]:
    """Session files and directories under ``root`` (see :func:`import_root`), each
    session once, in name order (depth first).

    The walk reads only what it was given. Without ``follow_symlinks`` no symbolic link
    under ``root`` is followed; with it, a link is followed (after every real entry)
    only to a path inside ``root``'s real path, and a directory reached twice (a link
    loop, or a second link to it) is entered once, a file read once. FIFOs, sockets
    and devices are never opened. Each such path goes to ``skipped`` with the reason.
    The walk keeps a stack, not Python recursion: any depth the system allows works.

    Raises:
        InvalidInputError: ``root`` is neither a regular file nor a directory.
    """
    root = import_root(root)
    if not stat.S_ISDIR(os.stat(root).st_mode):
        yield root
        return
    walk = _Walk(Path(os.path.realpath(root)), follow_symlinks, [] if skipped is None else skipped)
    st = os.stat(root)
    walk.directories.add((st.st_dev, st.st_ino))
    stack = [walk.listing(root)]
    while stack or walk.links:
        if not stack:
            found = walk.follow_link(walk.links.popleft())
            if isinstance(found, tuple):
                stack.append(walk.listing(found[0]))
            elif found is not None:
                yield found
            continue
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif isinstance(item, tuple):
            stack.append(walk.listing(item[0]))
        else:
            yield item
