"""``sessiondb import`` and ``sessiondb export``: parsers and handlers (the start-up
rule of :mod:`sessiondb.cli` holds here too: the formats and the store load in the
handlers)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING, Any, TextIO

from .errors import SessionDBError
from .lazy import LazyChoices
from .terminal import shown

if TYPE_CHECKING:
    from . import transfer
    from .store import SessionStore


def add_transfer_commands(commands: Any) -> None:
    imp = commands.add_parser("import", help="import session files (formats detected)")
    imp.add_argument("paths", nargs="+", metavar="PATH", help="files, session directories, trees")
    imp.add_argument(
        "--format",
        default="auto",
        choices=LazyChoices(_import_formats),
        metavar="FORMAT",
        help="a file format: %(choices)s; auto (the default) detects each file's own",
    )
    imp.add_argument(
        "--strict", action="store_true", help="a bad line fails its file (default: keep it)"
    )
    imp.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow symbolic links under PATH, only to targets inside it (default: skip them)",
    )
    imp.set_defaults(handler=_import)

    exp = commands.add_parser("export", help="write sessions as files")
    which = exp.add_mutually_exclusive_group(required=True)
    which.add_argument("ids", nargs="*", default=[], metavar="ID", help="sessions to export")
    which.add_argument("--all", action="store_true", help="every session of the namespace")
    exp.add_argument("--out", required=True, metavar="DIR", help="directory to write into")
    exp.add_argument(
        "--format",
        choices=LazyChoices(_export_formats),
        metavar="FORMAT",
        help="the file format to write: %(choices)s; html is a web page per session "
        # The default named here is formats.DEFAULT_EXPORT_FORMAT (a test holds them
        # equal): the registry is not imported to print the top-level help.
        "(default: native, sessiondb's own lossless format)",
    )
    exp.set_defaults(handler=_export)


def _import_formats() -> list[str]:
    from .formats import FORMATS

    return ["auto", *FORMATS]


def _export_formats() -> list[str]:
    from .formats import EXPORT_ONLY, FORMATS

    return [*FORMATS, *EXPORT_ONLY]


async def _import(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    reports = []
    for path in args.paths:
        with ImportBar(path) as progress:
            report = await store.import_path(
                path,
                format=args.format,
                strict=args.strict,
                progress=progress,
                follow_symlinks=args.follow_symlinks,
            )
        reports.append((path, report))
    rows = [("PATH", "FILES", "CREATED", "SKIPPED", "RECORDS", "BAD LINES", "FAILED")]
    for path, r in reports:
        rows.append(
            (
                shown(path),
                str(r.files),
                str(r.created),
                str(r.skipped),
                str(r.records),
                str(r.bad_line_count),
                str(len(r.failures)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
    # A report keeps its first BAD_LINES_KEPT bad lines; bad_line_count counts them all.
    bad = [b for _, r in reports for b in r.bad_lines]
    bad_count = sum(r.bad_line_count for _, r in reports)
    failures = [f for _, r in reports for f in r.failures]
    for b in bad[:BAD_LINES_SHOWN]:
        # Kept as a raw entry, or skipped when over max_record_bytes (its reason says so).
        print(f"bad line: {shown(str(b))}", file=out)
    if bad_count > min(len(bad), BAD_LINES_SHOWN):
        print(f"… and {bad_count - min(len(bad), BAD_LINES_SHOWN)} more bad lines", file=out)
    for _, r in reports:  # what the walk left alone (symlinks, FIFOs, devices, loops)
        for skipped in r.skipped_paths:
            print(f"skipped: {shown(f'{skipped.path}: {skipped.reason}')}", file=out)
    for f in failures:
        print(f"failed: {shown(str(f))}", file=out)
    total = [r for _, r in reports]
    print(
        f"created {sum(r.created for r in total)}, skipped {sum(r.skipped for r in total)}, "
        f"records {sum(r.records for r in total)}, bad lines {bad_count}, failed {len(failures)}",
        file=out,
    )
    if failures:
        raise SessionDBError(f"{len(failures)} file(s) or session(s) were not imported")


BAD_LINES_SHOWN = 20


class ImportBar:
    """A progress bar on stderr when it is a terminal and rich is installed (the
    ``sessiondb[progress]`` extra), else plain lines on stderr; called by
    ``import_path`` after each file."""

    def __init__(self, path: str) -> None:
        self._path = shown(path)
        self._bar: Any = None
        self._task: Any = None
        if sys.stderr.isatty():
            try:
                # Optional: the bar only where rich is installed; not a dependency.
                rich: Any = importlib.import_module("rich.progress")
                console: Any = importlib.import_module("rich.console")
            except ImportError:
                return
            self._bar = rich.Progress(
                rich.TextColumn("[bold]{task.description}"),
                rich.BarColumn(),
                rich.MofNCompleteColumn(),
                rich.TextColumn("{task.fields[records]} records ({task.fields[rate]}/s)"),
                rich.TimeElapsedColumn(),
                rich.TimeRemainingColumn(),
                console=console.Console(file=sys.stderr),
                transient=True,
            )

    def __enter__(self) -> ImportBar:
        if self._bar is not None:
            self._bar.start()
            # The description is rich markup: a "[" of the path must not style the bar.
            markup: Any = importlib.import_module("rich.markup")
            description = markup.escape(self._path)
            self._task = self._bar.add_task(description, total=None, records=0, rate=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, p: transfer.ImportProgress) -> None:
        if self._bar is None:
            print(
                f"[{p.files_done}/{p.files_total}] {shown(str(p.path))}: {p.records} records, "
                f"{p.created} created, {p.skipped} skipped, {p.failed} failed",
                file=sys.stderr,
            )
            return
        elapsed = self._bar.tasks[0].elapsed or 0.0
        rate = int(p.records / elapsed) if elapsed > 0 else 0
        self._bar.update(
            self._task, completed=p.files_done, total=p.files_total, records=p.records, rate=rate
        )


async def _export(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    from .formats import DEFAULT_EXPORT_FORMAT

    fmt = args.format or DEFAULT_EXPORT_FORMAT
    if args.all:
        written = await store.export_all(args.out, format=fmt)
    else:
        written = {sid: await store.export_session(sid, args.out, format=fmt) for sid in args.ids}
    for sid, paths in written.items():
        for path in paths:
            print(f"{shown(sid)}  {shown(str(path))}", file=out)
    print(f"exported {len(written)} session(s) to {shown(args.out)}", file=out)
