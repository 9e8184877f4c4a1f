"""MkDocs hook: the reference pages' generated parts, made from the code at build time
so that they cannot drift from it.

A page asks for one with a line ``<!-- generated: NAME -->``; NAME is ``cli`` (every
command's ``--help``, from the parser the ``sessiondb`` command runs), ``errors`` (the
error classes, their parents, ``retryable`` and default message) or ``schema`` (the
tables, from ``sessiondb.tables``, which the migrations are proven to create).
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

MARK = re.compile(r"^<!-- generated: (\w+) -->$", re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in MAKERS:
            raise ValueError(f"unknown generated part {name!r}")
        return MAKERS[name]()

    return MARK.sub(expand, markdown)


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse keeps its sub-commands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser again
                    seen.add(id(sub))
                    yield name, sub


def _walk(parser: argparse.ArgumentParser, words: list[str]) -> Iterator[tuple[str, str]]:
    yield " ".join(words), parser.format_help()
    for name, sub in _subparsers(parser):
        yield from _walk(sub, [*words, name])


def cli() -> str:
    from sessiondb.cli import build_parser

    parser = build_parser()
    parser.prog = "sessiondb"
    parts = []
    for command, text in _walk(parser, ["sessiondb"]):
        level = "##" if command.count(" ") <= 1 else "###"
        parts.append(f"{level} `{command}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def errors() -> str:
    from sessiondb import errors as module

    classes = [
        c
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, module.SessionDBError)
    ]
    rows = ["| error | is a | retryable | default message |", "| --- | --- | --- | --- |"]
    for cls in classes:
        parents = ", ".join(f"`{b.__name__}`" for b in cls.__bases__)
        doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split()).replace("|", "\\|")
        retry = "yes" if cls.retryable else "no"
        rows.append(f"| `{cls.__name__}` | {parents} | {retry} | {doc} |")
    return "\n".join(rows) + "\n"


def schema() -> str:
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex, CreateTable

    from sessiondb.tables import with_partial_indexes

    metadata = with_partial_indexes()

    dialect = postgresql.dialect()

    def sql(element: Any) -> str:
        text = str(element.compile(dialect=dialect)).strip()
        return "\n".join(line.rstrip() for line in text.splitlines()) + ";"

    parts = []
    for table in metadata.sorted_tables:
        indexes = [sql(CreateIndex(i)) for i in sorted(table.indexes, key=lambda i: str(i.name))]
        body = "\n".join([sql(CreateTable(table)), *indexes])
        parts.append(f"## `{table.name}`\n\n```sql\n{body.strip()}\n```\n")
    return "\n".join(parts)


#: The bounds on what comes from outside: (module, constant, what it bounds).
LIMITS = (
    ("sessiondb.config", "DEFAULT_MAX_RECORD_BYTES", "a record, by default (`max_record_bytes`)"),
    ("sessiondb.config", "MAX_RECORD_BYTES_CEILING", "the highest `max_record_bytes`"),
    ("sessiondb.jsoncodec", "MAX_JSON_DEPTH", "nesting of a payload or a file's line"),
    ("sessiondb.store", "MAX_PAGE", "a page of `list_sessions` (`limit`)"),
    ("sessiondb.search", "MAX_LIMIT", "a page of `search` (`limit`)"),
    (
        "sessiondb.search",
        "WINDOW",
        "the matches one `search` ranks: its newest (every filter applied), the best of "
        "them first; a query with fewer matches ranks them all",
    ),
    ("sessiondb.validation", "MAX_KEY_CHARS", "a session key, in characters"),
    ("sessiondb.validation", "MAX_KEY_BYTES", "a session key, in UTF-8 bytes"),
    ("sessiondb.validation", "MAX_NAME_CHARS", "a session's name"),
    ("sessiondb.validation", "MAX_MODEL_CHARS", "a session's model"),
    ("sessiondb.validation", "MAX_CRON_JOB_ID_CHARS", "a session's cron job id"),
    ("sessiondb.overlays", "MAX_PRUNE_SEQS", "seqs one prune record hides"),
    ("sessiondb.retention", "MAX_BATCH", "`expire`'s `batch_size`"),
    ("sessiondb.turns", "MAX_LEASE", "a turn's lease, in seconds"),
    ("sessiondb.turns", "MAX_HOLDER_CHARS", "a turn holder's label"),
    ("sessiondb.hosts", "MAX_HOSTS", "hosts in one multi-host URL"),
    ("sessiondb.config", "MAX_REPLICAS", "`replica_urls`"),
    ("sessiondb.formats.paths", "MAX_NAME", "an exported file's name, in characters"),
)


def limits() -> str:
    import importlib

    rows = ["| bound | value | where |", "| --- | --- | --- |"]
    for module, name, what in LIMITS:
        value = getattr(importlib.import_module(module), name)
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        rows.append(f"| {what} | {shown} | `{module}.{name}` |")
    return "\n".join(rows) + "\n"


#: The README's links, as the site's home page takes them.
README_LINKS = (
    ("](docs/", "]("),
    ("](SECURITY.md)", "](operations/security.md)"),
    ("](CHANGELOG.md)", "](changelog.md)"),
)


def readme() -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for old, new in README_LINKS:
        text = text.replace(old, new)
    return text


MAKERS: dict[str, Callable[[], str]] = {
    "readme": readme,
    "cli": cli,
    "errors": errors,
    "schema": schema,
    "limits": limits,
}
