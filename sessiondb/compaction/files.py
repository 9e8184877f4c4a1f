"""File operations seen in tool calls, carried from one compaction to the next."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..models import Message

# Tool names compared case-insensitively, so Claude Code's ``Read``/``Write``/``Edit``
# count too. The spec's aliases: read_file is read, write_file is write.
READ_TOOLS = frozenset({"read", "read_file"})
MODIFY_TOOLS = frozenset({"write", "write_file", "edit", "edit_file", "multiedit"})
PATH_ARGUMENTS = ("path", "file_path", "filePath")


@dataclass(frozen=True)
class FileOps:
    """Files read and files modified, sorted; a file both read and modified is listed as
    modified only."""

    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()


def extract_file_ops(messages: Iterable[Message]) -> tuple[set[str], set[str]]:
    """The paths read and the paths written or edited by the tool calls in ``messages``."""
    read: set[str] = set()
    modified: set[str] = set()
    for message in messages:
        if message.role != "assistant":
            continue
        for call in message.tool_calls():
            name = call.name.lower()
            if name not in READ_TOOLS and name not in MODIFY_TOOLS:
                continue
            path = next(
                (
                    value
                    for key in PATH_ARGUMENTS
                    if isinstance(value := call.arguments.get(key), str) and value
                ),
                None,
            )
            if path is None:
                continue
            (read if name in READ_TOOLS else modified).add(path)
    return read, modified


def merge_file_ops(
    read: Iterable[str],
    modified: Iterable[str],
    previous_read: Sequence[str] = (),
    previous_modified: Sequence[str] = (),
) -> FileOps:
    """Cumulative lists: this compaction's files plus the previous compaction's."""
    all_modified = set(modified) | set(previous_modified)
    all_read = (set(read) | set(previous_read)) - all_modified
    return FileOps(tuple(sorted(all_read)), tuple(sorted(all_modified)))


def format_file_ops(ops: FileOps) -> str:
    """The ``<read-files>`` / ``<modified-files>`` blocks appended to a summary ("" when
    both lists are empty)."""
    blocks = []
    if ops.read_files:
        blocks.append("<read-files>\n" + "\n".join(ops.read_files) + "\n</read-files>")
    if ops.modified_files:
        blocks.append("<modified-files>\n" + "\n".join(ops.modified_files) + "\n</modified-files>")
    return "\n\n".join(blocks)


_FILE_BLOCKS = re.compile(r"\n*<(read-files|modified-files)>.*?</\1>\n*", re.DOTALL)


def strip_file_ops(summary: str) -> str:
    """A summary without its file blocks (they are rebuilt from the stored lists)."""
    return _FILE_BLOCKS.sub("\n\n", summary).strip()
