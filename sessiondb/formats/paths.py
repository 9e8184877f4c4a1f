"""Where an export writes, and how its files are opened.

A writer takes file names from session metadata, which a tenant or an imported file
set: a name is used only when :func:`safe_name` passes it, else the session id. Files
are then opened one path component at a time, each relative to its parent directory's
descriptor and never through a symbolic link, so nothing is written outside the
output directory whatever the names or the tree already there hold.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

from ..errors import ExportPathError

# The buffer of an exported file: a session's lines go out in a few writes, not one
# system call per 8 KB (a fifth of the time spent writing a Claude Code export).
WRITE_BUFFER = 1 << 20

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
