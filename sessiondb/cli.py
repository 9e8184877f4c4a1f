"""``sessiondb``: migrate and inspect a session database from the shell.

Each subcommand is a small parser set-up and one handler over the public API. Every
stored string printed for people goes through :func:`sessiondb.terminal.shown` (controls
and bidi characters made visible); ``--json`` prints the exact strings.

Start-up rule: a command loads only what it runs
------------------------------------------------
``sessiondb --help`` costs a bare interpreter plus ``argparse``; ``sessions list`` on
SQLite never loads Alembic, a Postgres driver, the file formats or an optional extra
(``python -m bench --only 14``; SQLAlchemy's import alone costs ~0.2 s here). So:

1. At the top of this module, of ``sessiondb/__init__.py`` and of the modules they import
   eagerly (``env``, ``errors``, ``lazy``, ``terminal``): the standard library only, and
   not even ``dataclasses`` (~20 ms with the ``inspect`` it imports). No
   SQLAlchemy, pydantic, Alembic, asyncpg, and no optional extra (rich, a web framework,
   cryptography, OpenTelemetry, …).
2. A handler imports what it uses in its own body (``from .store import SessionStore``);
   a name needed only in an annotation is imported under ``if TYPE_CHECKING:``.
3. A library module imports an optional extra, Alembic or a driver inside the function
   that needs it (as ``SessionStore.migrate`` does with :mod:`sessiondb.migrate`), or
   through :func:`sessiondb.lazy.lazy_function` for a method that is a feature
   module's function (``SessionStore.import_path``), never at its top.
4. Choices that come from a registry are :class:`sessiondb.lazy.LazyChoices`: read when
   a command uses them, not when the parser is built.
5. A new public name of ``sessiondb`` goes in its ``_LAZY`` table (see its ``__init__``).
6. A statement a command runs on SQLite goes in the list of
   :mod:`sessiondb.backends.precompile` (then run it), and its builder in
   :mod:`sessiondb.shapes`, which names it without building it: otherwise the command
   imports SQLAlchemy to build it (~0.2 s) and its SQLite dialect to compile it.
7. The modules a listing imports (the store, ``core``, ``context``, ``sealing``,
   ``turns``, ``retention``, the SQLite backend) take ``statements`` and ``tables``
   through :func:`sessiondb.lazy.lazy_modules`, and SQLAlchemy's names only under
   ``if TYPE_CHECKING:``; ``Settings.url`` of a SQLite file is built when first read.

``tests/ops/test_startup.py`` holds the rule in fresh interpreters and names the module
that broke it and its import chain; a new heavy dependency goes on its lists.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import unquote

from . import serve
from .cli_transfer import add_transfer_commands
from .env import (
    DEFAULT_SQLITE_FILE,
    ENV_MASTER_KEYS,
    ENV_MASTER_KEYS_FILE,
    ENV_NAMESPACE,
    ENV_URL,
)
from .errors import ConfigurationError, EncryptionError, SessionDBError
from .lazy import import_at_start
from .terminal import json_for_terminal, shown

if TYPE_CHECKING:
    from .crypto import StaticKeyProvider
    from .models import Message, Record, SessionInfo
    from .store import SessionStore

    Handler = Callable[[SessionStore, argparse.Namespace, TextIO], Coroutine[Any, Any, None]]

RESULT_PREVIEW = 400


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sessiondb",
        description="AI-agent conversation sessions in Postgres or SQLite.",
    )
    parser.add_argument(
        "--db",
        metavar="URL",
        help=f"database URL or SQLite file (default: ${ENV_URL}, else ./{DEFAULT_SQLITE_FILE})",
    )
    parser.add_argument(
        "--namespace", help=f"tenant namespace (default: ${ENV_NAMESPACE}, else 'default')"
    )
    parser.add_argument(
        "--keys-file",
        metavar="PATH",
        help=f"master keys of an encrypted namespace, JSON (default: ${ENV_MASTER_KEYS_FILE}, "
        f"else ${ENV_MASTER_KEYS} as id:base64,…; neither: no encryption)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    keys = commands.add_parser("keys", help="encryption at rest: the namespace's keys")
    key_verbs = keys.add_subparsers(dest="verb", required=True, metavar="VERB")
    rotate = key_verbs.add_parser(
        "rotate", help="re-wrap the data keys under the current master key"
    )
    rotate.add_argument(
        "--reencrypt", action="store_true", help="also move every row to a new data key"
    )
    rotate.add_argument("--json", action="store_true", help="print JSON for scripts")
    rotate.set_defaults(handler=_rotate)

    migrate = commands.add_parser("migrate", help="upgrade the schema to the newest revision")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    migrate.set_defaults(handler=_migrate)

    sessions = commands.add_parser("sessions", help="list, show and remove sessions")
    verbs = sessions.add_subparsers(dest="verb", required=True, metavar="VERB")

    ls = verbs.add_parser("list", help="sessions, newest activity first")
    ls.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    ls.add_argument("--cursor", help="the next_cursor printed by the previous page")
    ls.add_argument("--source", choices=["interactive", "cron"])
    ls.add_argument("--parent", metavar="ID", help="only forks of this session")
    ls.add_argument("--json", action="store_true", help="print JSON for scripts")
    ls.set_defaults(handler=_list)

    show = verbs.add_parser("show", help="a session's transcript")
    show.add_argument("id")
    show.add_argument(
        "--all", action="store_true", help="include tombstoned records (marked as deleted)"
    )
    show.add_argument("--json", action="store_true", help="print JSON for scripts")
    show.set_defaults(handler=_show)

    rm = verbs.add_parser("rm", help="delete a session and its records")
    rm.add_argument("id")
    rm.add_argument("--cascade", action="store_true", help="also delete its forks")
    rm.set_defaults(handler=_rm)

    find = commands.add_parser("search", help="find messages and summaries by their words")
    find.add_argument(
        "query", help='words; "a phrase", -word, a OR b, word* (see the README\'s Search)'
    )
    find.add_argument("--session", metavar="ID", help="only this session (and what it inherits)")
    find.add_argument("--limit", type=int, default=20, help="hits per page (default 20)")
    find.add_argument("--cursor", help="next page: the cursor the previous page printed")
    find.add_argument("--thinking", action="store_true", help="search thinking blocks too")
    find.add_argument("--all", action="store_true", help="tombstoned and pruned records too")
    find.add_argument("--json", action="store_true", help="the page as JSON")
    find.set_defaults(handler=_search)

    compact = commands.add_parser(
        "compact", help="summarise a session's older messages (offline summarizer by default)"
    )
    compact.add_argument("id")
    compact.add_argument(
        "--summarizer",
        metavar="MODULE:CALLABLE",
        help="an async callable (system, prompt, max_tokens) -> str (default: offline)",
    )
    compact.add_argument("--keep-recent-tokens", type=int, metavar="N")
    compact.add_argument("--instructions", help="extra focus for the summary")
    compact.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    compact.add_argument("--json", action="store_true", help="print JSON for scripts")
    compact.set_defaults(handler=_compact)
    add_transfer_commands(commands)
    serve.add_command(commands)  # sessiondb.viewer, loaded only when it runs

    expire = commands.add_parser(
        "expire",
        aliases=["prune"],  # its name until 0.x; the tool-result prune is another thing
        help="retention: delete sessions idle for longer than an age (forks' lineage kept)",
    )
    expire.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="idle time after which a session goes: 30d, 12h, 90m, 45s, 2w",
    )
    expire.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    expire.add_argument(
        "--batch-size", type=int, default=100, metavar="N", help="sessions per transaction"
    )
    expire.add_argument("--json", action="store_true", help="print JSON for scripts")
    expire.set_defaults(handler=_expire)
    return parser


# Options every command takes, wherever they stand on the command line.
_GLOBAL_OPTIONS = ("--db", "--namespace", "--keys-file")
# Commands that may create a SQLite file; every other one only reads or writes an
# existing database.
_CREATES_DATABASE = {"migrate"}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 error, 2 usage)."""
    args = build_parser().parse_args(_globals_first(list(sys.argv[1:] if argv is None else argv)))
    stream = out or sys.stdout
    # What every command runs on; not for --help, nor for a usage error.
    import_at_start("asyncio", "sessiondb.store", own_process=argv is None)
    import asyncio

    try:
        asyncio.run(_run(args, stream))
    except SessionDBError as exc:
        message = _without_secrets(_one_line(exc), args.db or os.environ.get(ENV_URL) or "")
        print(f"sessiondb: error: {shown(message)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``sessiondb sessions list | head``): no traceback, and
        # none at exit either, when Python flushes what is left for the closed pipe.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    return 0


def _globals_first(argv: list[str]) -> list[str]:
    """``--db`` and ``--namespace`` moved to the front, so they work after the command
    too (``sessiondb migrate --db URL``)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if name in _GLOBAL_OPTIONS:
            if "=" in arg:
                front.append(arg)
            else:
                front.extend(argv[i : i + 2])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


async def _run(args: argparse.Namespace, out: TextIO) -> None:
    from .store import SessionStore

    handler: Handler = args.handler
    store = await SessionStore.connect(args.db, args.namespace, encryption=_key_provider(args))
    try:
        if args.command not in _CREATES_DATABASE:
            _require_existing(store)
        await handler(store, args, out)
    finally:
        await store.close()


def _key_provider(args: argparse.Namespace) -> StaticKeyProvider | None:
    """The master keys given by ``--keys-file`` or the environment, if any."""
    from .crypto import StaticKeyProvider

    path = args.keys_file or os.environ.get(ENV_MASTER_KEYS_FILE)
    if path:
        return StaticKeyProvider.from_file(path)
    if os.environ.get(ENV_MASTER_KEYS):
        return StaticKeyProvider.from_env(ENV_MASTER_KEYS)
    return None


async def _rotate(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    if not store.core.encrypted:
        raise EncryptionError(
            f"no master keys: give --keys-file, ${ENV_MASTER_KEYS_FILE} or ${ENV_MASTER_KEYS}"
        )
    import dataclasses

    report = await store.rotate_keys(reencrypt=args.reencrypt)
    moved = f"; moved {report.records_resealed} records, {report.sessions_resealed} sessions"
    print(
        json.dumps(dataclasses.asdict(report))
        if args.json
        else f"data keys re-wrapped under {shown(report.master_key_id)}: {report.rewrapped}; "
        f"current data key: {report.current_version}{moved if args.reencrypt else ''}",
        file=out,
    )


def _require_existing(store: SessionStore) -> None:
    """A read never creates a database: refuse a SQLite file that does not exist."""
    database = store.settings.sqlite_database
    if database is None or store.settings.is_memory:
        return
    path = Path(database)
    if not path.exists():
        raise ConfigurationError(
            f"no database at {path}; run `sessiondb migrate` (with --db {path}) to create it"
        )


# A password shorter than this is not searched for in error messages: masking every "a"
# of a message would hide the error, and so short a password guards nothing.
_SHORTEST_MASKED_SECRET = 4
_URL_PASSWORD = re.compile(r"://[^:/?#\s]*:([^\n]*)@")
_SECRET_VALUE = re.compile(r"(?i)pass[\w.-]*\s*=\s*([^\s&;]+)")


def _without_secrets(message: str, url: str) -> str:
    """``message`` with URL passwords masked, and also any copy of the password of
    ``url`` (the database URL given), wherever a driver's message may have put it."""
    from .config import MASK, password_forms, redact

    secrets = {
        form
        for match in (*_URL_PASSWORD.finditer(url), *_SECRET_VALUE.finditer(url))
        for form in (match.group(1), unquote(match.group(1)))
    } | password_forms(url)  # the password as read, whatever its quoting
    secrets = {form for form in secrets if len(form) >= _SHORTEST_MASKED_SECRET}
    for secret in sorted(secrets, key=len, reverse=True):
        message = message.replace(secret, MASK)
    return redact(message)


def _one_line(exc: BaseException) -> str:
    """The error and its first cause on one line."""
    text = " ".join((str(exc) or type(exc).__name__).split())
    cause = exc.__cause__
    if cause is not None and not isinstance(cause, SessionDBError):
        first = (str(cause).splitlines() or [""])[0]
        if first not in text:
            text += f" (caused by {type(cause).__name__}: {first})"
    return text


def _timestamp(at: datetime) -> str:
    """The one timestamp format of the CLI's output: ISO 8601 in UTC with a ``Z``,
    as pydantic writes the models' timestamps."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def _migrate(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    from .config import masked_url

    await store.migrate(args.revision)
    url = masked_url(store.settings.url)
    print(f"migrated {shown(url)} to {shown(args.revision)}", file=out)


async def _list(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    page = await store.list_sessions(
        limit=args.limit, cursor=args.cursor, source=args.source, parent_id=args.parent
    )
    if args.json:
        data = {
            "items": [s.model_dump(mode="json", by_alias=True) for s in page.items],
            "nextCursor": page.next_cursor,
        }
        json.dump(data, out, indent=2)
        out.write("\n")
        return
    rows = [("ID", "LAST ACTIVITY", "MSGS", "SOURCE", "KEY", "TURN", "NAME")]
    for s in page.items:
        when = s.last_message_at or s.created_at
        name = shown(s.name or "")
        if s.parent_id:
            name = f"{name} (fork of {shown(s.parent_id)}@{s.fork_seq})"
        turn = (
            "-" if s.turn is None else f"{shown(s.turn.holder)} since {s.turn.acquired_at:%H:%M:%S}"
        )
        rows.append(
            (
                shown(s.id),
                when.strftime("%Y-%m-%d %H:%M:%S"),
                str(s.message_count),
                shown(s.source),
                _shown_key(s.key),
                turn,
                name,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        print(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[6], file=out
        )
    if not page.items:
        print("(no sessions)", file=out)
    if page.next_cursor:
        print(f"more: --cursor {shown(page.next_cursor)}", file=out)


async def _search(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    page = await store.search(
        args.query,
        limit=args.limit,
        cursor=args.cursor,
        session_id=args.session,
        thinking=args.thinking,
        hidden=args.all,
    )
    if args.json:
        data = {
            "hits": [h.model_dump(mode="json") for h in page.hits],
            "nextCursor": page.next_cursor,
        }
        out.write(json_for_terminal(json.dumps(data, indent=2, ensure_ascii=False)) + "\n")
        return
    bold = out.isatty()
    for hit in page.hits:
        what = hit.role or hit.kind
        print(f"{shown(hit.session_id)}  #{hit.seq}  {what}  {_timestamp(hit.timestamp)}", file=out)
        print("    " + _snippet(hit.snippet, hit.spans, bold), file=out)
    if not page.hits:
        print("(no matches)", file=out)
    if page.next_cursor:
        print(f"more: --cursor {shown(page.next_cursor)}", file=out)


def _snippet(text: str, spans: Sequence[tuple[int, int]], bold: bool) -> str:
    """A snippet escaped piece by piece; matched words bold on a terminal, the bold's
    escape codes added only after the text around them was escaped."""
    parts, at = [], 0
    on, off = ("\x1b[1m", "\x1b[0m") if bold else ("", "")
    for start, end in spans:
        parts += [shown(text[at:start]), on, shown(text[start:end]), off]
        at = end
    parts.append(shown(text[at:]))
    return "".join(parts)


def _shown_key(key: str | None) -> str:
    """A key for the table: ``-`` for none; quoted when spaces or odd characters would
    hide what it is (``"k "`` and ``k`` are different keys); escaped as every cell is."""
    if key is None:
        return "-"
    plain = key.isprintable() and not any(c.isspace() for c in key) and key not in ("-", '"')
    return shown(key if plain and not key.startswith('"') else json.dumps(key, ensure_ascii=False))


async def _show(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    info = await store.get_session(args.id)
    recs = await store.records(args.id, include_tombstoned=args.all)
    if args.json:
        data = {
            "session": info.model_dump(mode="json", by_alias=True),
            "records": [_record_json(r) for r in recs],
        }
        out.write(json_for_terminal(json.dumps(data, indent=2, ensure_ascii=False)) + "\n")
        return
    dead = {r.tombstone.target_seq for r in recs if r.tombstone is not None}
    _print_header(info, out)
    for r in recs:
        for line in _record_lines(r, deleted=r.seq in dead):
            print(line, file=out)


def _record_json(r: Record) -> dict[str, Any]:
    body: Any = r.message or r.compaction or r.tombstone or r.entry
    return {
        "seq": r.seq,
        "kind": r.kind,
        "sessionId": r.session_id,
        "createdAt": _timestamp(r.created_at),
        "uuid": r.uuid,
        "data": body.to_wire() if hasattr(body, "to_wire") else body,
    }


def _print_header(info: SessionInfo, out: TextIO) -> None:
    print(f"session {shown(info.id)}  {shown(info.name or '(unnamed)')}", file=out)
    details = [f"{info.message_count} messages", f"head #{info.last_seq}", shown(info.source)]
    if info.key is not None:
        details.append(f"key {_shown_key(info.key)}")
    if info.model:
        details.append(f"model {shown(info.model)}")
    if info.parent_id:
        details.append(f"fork of {shown(info.parent_id)} at #{info.fork_seq}")
    m = info.metrics
    if m.input_tokens or m.output_tokens:
        details.append(f"tokens in {m.input_tokens} / out {m.output_tokens}")
    print("  " + ", ".join(details), file=out)
    print("", file=out)


def _record_lines(r: Record, *, deleted: bool) -> list[str]:
    mark = " [deleted]" if deleted else ""
    if r.message is not None:
        return _message_lines(r.seq, r.message, mark)
    if r.compaction is not None:
        c = r.compaction
        return [
            f"#{r.seq} ── compaction: history before #{c.first_kept_seq} summarised "
            f"({c.tokens_before} tokens){mark}",
            *_indent(c.summary),
            *(f"    read: {shown(path)}" for path in c.read_files),
            *(f"    modified: {shown(path)}" for path in c.modified_files),
        ]
    if r.tombstone is not None:
        reason = f": {shown(r.tombstone.reason)}" if r.tombstone.reason else ""
        return [f"#{r.seq} ── deleted #{r.tombstone.target_seq}{reason}"]
    from .formats.lines import entry_label

    return [f"#{r.seq} ── {shown(entry_label(r.entry))}{mark}"]


def _message_lines(seq: int, m: Message, mark: str) -> list[str]:
    from .models import TextContent, ThinkingContent, ToolCallContent

    label = {"user": "user", "assistant": "assistant", "toolResult": "tool result"}[m.role]
    if m.role == "toolResult":
        label += f" {shown(m.tool_name or '')}({shown(m.tool_call_id or '?')})".replace(" (", "(")
        if m.is_error:
            label += " ERROR"
    lines = [f"#{seq} {label}{mark}"]
    for block in m.content:
        if isinstance(block, TextContent):
            text = block.text
            if m.role == "toolResult" and len(text) > RESULT_PREVIEW:
                text = text[:RESULT_PREVIEW] + f"… ({len(block.text)} characters)"
            lines.extend(_indent(text))
        elif isinstance(block, ToolCallContent):
            args = json.dumps(block.arguments, ensure_ascii=False)
            if len(args) > RESULT_PREVIEW:
                args = args[:RESULT_PREVIEW] + "…"
            lines.append(f"    → {shown(block.name)}({shown(block.id)}) {shown(args)}")
        elif isinstance(block, ThinkingContent):
            lines.extend(_indent(block.thinking, prefix="    (thinking) "))
        else:
            lines.append(f"    [{shown(block.type)}]")
    return lines


def _indent(text: str, prefix: str = "    ") -> list[str]:
    """A stored body, escaped, one printed line per ``\\n`` (every other line break is
    shown as its escape: it is not a line of the text as stored)."""
    lines = shown(text, one_line=False).split("\n")
    if lines[-1] == "":  # as str.splitlines: a final newline ends a line, starts none
        lines.pop()
    return [prefix + line for line in lines] or [prefix.rstrip()]


async def _rm(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    deleted = await store.delete_session(args.id, cascade=args.cascade)
    for session_id in deleted:
        print(f"deleted {shown(session_id)}", file=out)


async def _expire(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    from . import retention

    age = retention.parse_age(args.older_than)
    report = await store.expire(age, dry_run=args.dry_run, batch_size=args.batch_size)
    if args.json:
        data = {
            "namespace": report.namespace,
            "cutoff": _timestamp(report.cutoff),
            "dryRun": report.dry_run,
            "deleted": report.deleted,
            "keptForForks": report.kept_for_forks,
            "keptBusy": report.kept_busy,
            "batches": report.batches,
        }
        json.dump(data, out, indent=2)
        out.write("\n")
        return
    verb = "would delete" if report.dry_run else "deleted"
    for session_id in report.deleted:
        print(f"{verb} {shown(session_id)}", file=out)
    for session_id in report.kept_for_forks:
        print(f"kept {shown(session_id)} (a fork of it is active)", file=out)
    for session_id in report.kept_busy:
        print(f"kept {shown(session_id)} (a turn is held on it)", file=out)
    print(
        f"{verb} {report.deleted_count} session(s) idle since before "
        f"{_timestamp(report.cutoff)} in namespace {shown(repr(report.namespace))}; "
        f"kept {report.kept_count}",
        file=out,
    )


async def _compact(store: SessionStore, args: argparse.Namespace, out: TextIO) -> None:
    from . import compaction

    settings = compaction.CompactionSettings(
        **(
            {}
            if args.keep_recent_tokens is None
            else {"keep_recent_tokens": args.keep_recent_tokens}
        )
    )
    if args.dry_run:
        plan = await compaction.plan(store, args.id, settings)
        data: dict[str, Any] = {"compacted": False, "dryRun": True}
        if plan is not None:
            data |= {
                "firstKeptSeq": plan.first_kept_seq,
                "tokensBefore": plan.tokens_before,
                "summarizedTokens": plan.summarized_tokens,
                "keptTokens": plan.kept_tokens,
                "splitTurn": plan.split_turn,
                "readFiles": list(plan.file_ops.read_files),
                "modifiedFiles": list(plan.file_ops.modified_files),
            }
    else:
        summarizer = _load_summarizer(args.summarizer)
        result = await compaction.compact(store, args.id, summarizer, settings, args.instructions)
        data = {
            "compacted": result.compacted,
            "reason": result.reason,
            "firstKeptSeq": result.first_kept_seq,
            "tokensBefore": result.tokens_before,
            "tokensAfter": result.tokens_after,
            "splitTurn": result.split_turn,
            "readFiles": list(result.read_files),
            "modifiedFiles": list(result.modified_files),
        }
    if args.json:
        json.dump(data, out, indent=2)
        out.write("\n")
    elif "firstKeptSeq" not in data or data["firstKeptSeq"] is None:
        print(f"session {shown(args.id)}: nothing to compact", file=out)
    else:
        verb = "would keep" if args.dry_run else "compacted; kept"
        after = f" -> {data['tokensAfter']}" if "tokensAfter" in data else ""
        print(
            f"session {shown(args.id)}: {verb} messages from #{data['firstKeptSeq']}"
            f"{' (split turn)' if data['splitTurn'] else ''}; tokens {data['tokensBefore']}{after}",
            file=out,
        )
        for key, label in (("readFiles", "read"), ("modifiedFiles", "modified")):
            for path in data[key]:
                print(f"  {label}: {shown(path)}", file=out)


def _load_summarizer(spec: str | None) -> Any:
    if spec is None:
        from .compaction import offline_summarizer

        return offline_summarizer
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"--summarizer {spec}: cannot load it ({exc})") from exc
    if not attr or not callable(target):
        raise ConfigurationError(f"--summarizer {spec}: expected MODULE:CALLABLE")
    return target


# -- import / export ---------------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(main())
