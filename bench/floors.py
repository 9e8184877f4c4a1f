"""The floors: each figure's work done with the bare driver on sessiondb's own tables.

``PostgresFloor`` (asyncpg) and ``SQLiteFloor`` (the standard library's sqlite3, WAL and
``synchronous = NORMAL`` like sessiondb) have the same methods, so a figure runs the
same code on both backends. They write the same rows sessiondb writes (the NOT NULL
columns, the head counters, the payload as JSON text) and nothing more: no validation,
no models, one statement where one will do.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from ulid import ULID

from .databases import Database

RECORD_COLUMNS = (
    "session_id", "seq", "kind", "role", "created_at", "tool_call_id", "size", "payload",
)  # fmt: skip
SESSION_COLUMNS = (
    "id", "namespace", "name", "created_at", "last_message_at", "model", "source",
    "last_seq", "message_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "cost_total",
)  # fmt: skip


def _payload(message: dict[str, Any]) -> str:
    return orjson.dumps(message).decode()


def _usage_totals(messages: Sequence[dict[str, Any]]) -> tuple[int, int, int, int, float]:
    totals = [0, 0, 0, 0]
    cost = 0.0
    for m in messages:
        usage = m.get("usage")
        if usage:
            totals[0] += usage.get("input", 0)
            totals[1] += usage.get("output", 0)
            totals[2] += usage.get("cacheRead", 0)
            totals[3] += usage.get("cacheWrite", 0)
            cost += (usage.get("cost") or {}).get("total", 0.0)
    return totals[0], totals[1], totals[2], totals[3], cost


def _session_row(
    messages: Sequence[dict[str, Any]], model: str | None, namespace: str, at: Any
) -> tuple[Any, ...]:
    first_user = next((m for m in messages if m["role"] == "user"), None)
    name = first_user["content"][0]["text"][:50] if first_user else None
    tokens = _usage_totals(messages)
    count = len(messages)
    return (str(ULID()), namespace, name, at, at, model, "interactive", count, count, *tokens)


def _record_rows(
    session_id: str, messages: Sequence[dict[str, Any]], at: Any
) -> list[tuple[Any, ...]]:
    rows = []
    for seq, m in enumerate(messages, start=1):
        payload = _payload(m)
        rows.append(
            (session_id, seq, "message", m["role"], at, m.get("toolCallId"), len(payload), payload)
        )
    return rows


def _text(message: dict[str, Any]) -> str:
    """What the floors index of a message: its text blocks joined (sessiondb's index
    takes a little more: a tool call's name and arguments, a tool result's tool name)."""
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content if b.get("type") == "text")


# -- Postgres -------------------------------------------------------------------------

PG_APPEND = """
WITH head AS (
    UPDATE sessiondb_sessions
       SET last_seq = last_seq + 1, message_count = message_count + 1, last_message_at = $2
     WHERE id = $1
    RETURNING last_seq
)
INSERT INTO sessiondb_records (session_id, seq, kind, role, created_at, size, payload, search)
SELECT $1, last_seq, 'message', $3, $2, $4, $5, to_tsvector('simple', $6) FROM head
RETURNING seq
"""

PG_APPEND_BATCH = """
WITH head AS (
    UPDATE sessiondb_sessions
       SET last_seq = last_seq + $3::bigint, message_count = message_count + $3::bigint,
           last_message_at = $2, input_tokens = input_tokens + $8,
           output_tokens = output_tokens + $9, cache_read_tokens = cache_read_tokens + $10,
           cache_write_tokens = cache_write_tokens + $11, cost_total = cost_total + $12
     WHERE id = $1
    RETURNING last_seq
)
INSERT INTO sessiondb_records
       (session_id, seq, kind, role, created_at, tool_call_id, size, payload, search)
SELECT $1, head.last_seq - $3::bigint + m.n, 'message', m.role, $2, m.tool_call_id, m.size,
       m.payload, to_tsvector('simple', m.body)
  FROM head,
       unnest($4::text[], $5::text[], $6::int[], $7::text[], $13::text[])
       WITH ORDINALITY AS m(role, tool_call_id, size, payload, body, n)
RETURNING seq
"""

# The search index's column, filled the way a bare-driver user who loads with COPY
# would: COPY cannot call to_tsvector, so the rows and their text go to a staging table
# of the transaction, then one INSERT ... SELECT makes each row's tsvector. (One INSERT
# ... SELECT FROM unnest of arrays costs the same: 1.41 s against 1.38 s for 20k records.)
PG_STAGE = """
CREATE TEMP TABLE floor_stage (LIKE sessiondb_records) ON COMMIT DROP;
ALTER TABLE floor_stage DROP COLUMN search, ADD COLUMN body text
"""


def _pg_stage_insert(columns: Sequence[str]) -> str:
    names = ", ".join(columns)
    return (
        f"INSERT INTO sessiondb_records ({names}, search) "
        f"SELECT {names}, to_tsvector('simple', body) FROM floor_stage"
    )


PG_KEPT = """
SELECT seq, payload FROM sessiondb_records
 WHERE session_id = $1 AND kind = 'message' AND seq >= $2
 ORDER BY seq
"""

PG_HISTORY = """
SELECT session_id, seq, kind, created_at, uuid, payload FROM sessiondb_records
 WHERE session_id = $1
 ORDER BY seq
"""

PG_FIRST_PAGE = """
SELECT * FROM sessiondb_sessions WHERE namespace = $1
 ORDER BY last_message_at DESC, id DESC LIMIT $2
"""


# -- importing and exporting transcripts (figures 8 and 9) ------------------------------

LINE_COLUMNS = (*RECORD_COLUMNS, "uuid", "parent_uuid")
PG_DUMP = "SELECT session_id, payload FROM sessiondb_records ORDER BY session_id, seq"
SQLITE_INSERT_LINE = (
    f"INSERT INTO sessiondb_records ({', '.join(LINE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(LINE_COLUMNS))})"
)

ParsedFile = list[dict[str, Any]]


def parse_file(path: Path) -> ParsedFile:
    """Every line of a transcript parsed with orjson, the codec sessiondb reads with."""
    with path.open("rb") as f:
        return [orjson.loads(line) for line in f if line.strip()]


def _file_rows(
    files: Sequence[ParsedFile], namespace: str, at: Any
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A session row per file and a record per line: the whole line as the payload
    (sessiondb keeps as much: the message and the line around it), its uuids."""
    session_rows = []
    record_rows: list[tuple[Any, ...]] = []
    for lines in files:
        messages = [line["message"] for line in lines]
        row = _session_row(messages, None, namespace, at)
        session_rows.append(row)
        for seq, line in enumerate(lines, start=1):
            payload = orjson.dumps(line).decode()
            role = line["message"]["role"]
            record_rows.append(
                (row[0], seq, "message", role, at, None, len(payload), payload,
                 line["uuid"], line["parentUuid"])
            )  # fmt: skip
    return session_rows, record_rows


def _write_lines(out_dir: Path, rows: Any) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for session_id, group in itertools.groupby(rows, key=lambda r: r[0]):
        with (out_dir / f"{session_id}.jsonl").open("w") as out:
            for _, payload in group:
                out.write(payload)
                out.write("\n")
                written += 1
    return written


class PostgresFloor:
    """One asyncpg connection; statements are prepared once and cached by asyncpg."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, db: Database) -> PostgresFloor:
        return cls(await asyncpg.connect(db.dsn))

    async def close(self) -> None:
        await self.conn.close()

    async def append(self, session_id: str, message: dict[str, Any]) -> int:
        payload = _payload(message)
        at = datetime.now(UTC)
        seq = await self.conn.fetchval(
            PG_APPEND, session_id, at, message["role"], len(payload), payload, _text(message)
        )
        return int(seq)

    async def append_batch(self, session_id: str, messages: Sequence[dict[str, Any]]) -> int:
        payloads = [_payload(m) for m in messages]
        rows = await self.conn.fetch(
            PG_APPEND_BATCH,
            session_id,
            datetime.now(UTC),
            len(messages),
            [m["role"] for m in messages],
            [m.get("toolCallId") for m in messages],
            [len(p) for p in payloads],
            payloads,
            *_usage_totals(messages),
            [_text(m) for m in messages],
        )
        return int(rows[-1]["seq"])

    async def bulk_load(self, items: Sequence[dict[str, Any]], namespace: str) -> int:
        """COPY the sessions and their records (with their text, through the staging
        table) in one transaction; returns the records."""
        at = datetime.now(UTC)
        session_rows = []
        record_rows: list[tuple[Any, ...]] = []
        for item in items:
            row = _session_row(item["messages"], item.get("model"), namespace, at)
            session_rows.append(row)
            rows = _record_rows(row[0], item["messages"], at)
            record_rows += [(*r, _text(m)) for r, m in zip(rows, item["messages"], strict=True)]
        await self._load(session_rows, record_rows, RECORD_COLUMNS)
        return len(record_rows)

    async def load_lines(self, files: Sequence[ParsedFile], namespace: str) -> int:
        """COPY the sessions and records of parsed transcripts (with each line's message
        text, through the staging table) in one transaction."""
        session_rows, record_rows = _file_rows(files, namespace, datetime.now(UTC))
        texts = (_text(line["message"]) for lines in files for line in lines)
        rows = [(*r, t) for r, t in zip(record_rows, texts, strict=True)]
        await self._load(session_rows, rows, LINE_COLUMNS)
        return len(record_rows)

    async def _load(
        self,
        session_rows: list[tuple[Any, ...]],
        record_rows: list[tuple[Any, ...]],
        columns: Sequence[str],
    ) -> None:
        """COPY the sessions, and the records with their text last to the staging table,
        then insert them from there with their tsvector."""
        async with self.conn.transaction():
            await self.conn.copy_records_to_table(
                "sessiondb_sessions", records=session_rows, columns=SESSION_COLUMNS
            )
            await self.conn.execute(PG_STAGE)
            await self.conn.copy_records_to_table(
                "floor_stage", records=record_rows, columns=[*columns, "body"]
            )
            await self.conn.execute(_pg_stage_insert(columns))

    async def dump(self, out_dir: Path) -> int:
        """SELECT every record in order and write each payload as a line, a file per
        session; returns the lines written."""
        rows = await self.conn.fetch(PG_DUMP)
        return _write_lines(out_dir, ((r[0], r[1]) for r in rows))

    async def kept_messages(self, session_id: str, first_kept_seq: int) -> list[Any]:
        return list(await self.conn.fetch(PG_KEPT, session_id, first_kept_seq))

    async def kept_parsed(self, session_id: str, first_kept_seq: int) -> list[Any]:
        rows = await self.conn.fetch(PG_KEPT, session_id, first_kept_seq)
        return [orjson.loads(r[1]) for r in rows]

    async def history_parsed(self, session_id: str) -> list[Any]:
        rows = await self.conn.fetch(PG_HISTORY, session_id)
        return [(*r[:5], orjson.loads(r[5])) for r in rows]

    async def first_page(self, namespace: str, limit: int) -> list[Any]:
        return list(await self.conn.fetch(PG_FIRST_PAGE, namespace, limit + 1))


# -- SQLite ---------------------------------------------------------------------------

SQLITE_BUMP = """
UPDATE sessiondb_sessions
   SET last_seq = last_seq + ?, message_count = message_count + ?, last_message_at = ?,
       input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
       cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?,
       cost_total = cost_total + ?
 WHERE id = ?
RETURNING last_seq
"""

SQLITE_BUMP_ONE = """
UPDATE sessiondb_sessions
   SET last_seq = last_seq + 1, message_count = message_count + 1, last_message_at = ?
 WHERE id = ?
RETURNING last_seq
"""

SQLITE_INSERT = (
    f"INSERT INTO sessiondb_records ({', '.join(RECORD_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(RECORD_COLUMNS))})"
)
SQLITE_INSERT_SESSION = (
    f"INSERT INTO sessiondb_sessions ({', '.join(SESSION_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(SESSION_COLUMNS))})"
)
# The search index: the FTS5 row of a record, under the rowid its insert gave.
SQLITE_INDEX = "INSERT INTO sessiondb_search (rowid, body, thinking) VALUES (?, ?, NULL)"
SQLITE_KEPT = PG_KEPT.replace("$1", "?").replace("$2", "?")
SQLITE_HISTORY = PG_HISTORY.replace("$1", "?")
SQLITE_FIRST_PAGE = PG_FIRST_PAGE.replace("$1", "?").replace("$2", "?")


def _sqlite_now() -> str:
    # The text SQLAlchemy writes for a UTC timestamp on SQLite (sessiondb stores UTC).
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def sqlite_connect(path: str | Path) -> sqlite3.Connection:
    """A connection set up as sessiondb sets up its own (engine.py)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _insert_indexed(
    conn: sqlite3.Connection, insert: str, rows: Sequence[tuple[Any, ...]], texts: Sequence[str]
) -> None:
    """Insert the record rows one by one, each's lastrowid kept, then their FTS5 rows."""
    execute = conn.execute
    rowids = [execute(insert, row).lastrowid for row in rows]
    conn.executemany(SQLITE_INDEX, zip(rowids, texts, strict=True))


class SQLiteFloor:
    """One sqlite3 connection; every write is ``BEGIN IMMEDIATE`` … ``COMMIT``, and
    every record written gets its FTS5 row in the same transaction, as sessiondb's do.

    The methods are coroutines only to share the figures' code with Postgres; they
    block, as a bare sqlite3 caller does.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, db: Database) -> SQLiteFloor:
        return cls(sqlite_connect(db.path))

    async def close(self) -> None:
        self.conn.close()

    async def append(self, session_id: str, message: dict[str, Any]) -> int:
        payload = _payload(message)
        at = _sqlite_now()
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            (seq,) = conn.execute(SQLITE_BUMP_ONE, (at, session_id)).fetchone()
            rowid = conn.execute(
                SQLITE_INSERT,
                (session_id, seq, "message", message["role"], at, None, len(payload), payload),
            ).lastrowid
            conn.execute(SQLITE_INDEX, (rowid, _text(message)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return int(seq)

    async def append_batch(self, session_id: str, messages: Sequence[dict[str, Any]]) -> int:
        payloads = [_payload(m) for m in messages]
        at = _sqlite_now()
        n = len(messages)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            (head,) = conn.execute(
                SQLITE_BUMP, (n, n, at, *_usage_totals(messages), session_id)
            ).fetchone()
            first = head - n + 1
            _insert_indexed(
                conn,
                SQLITE_INSERT,
                [
                    (session_id, first + i, "message", m["role"], at, m.get("toolCallId"),
                     len(p), p)
                    for i, (m, p) in enumerate(zip(messages, payloads, strict=True))
                ],
                [_text(m) for m in messages],
            )  # fmt: skip
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return int(head)

    async def bulk_load(self, items: Sequence[dict[str, Any]], namespace: str) -> int:
        """Insert the sessions and their records, with their FTS5 rows, in one
        transaction; returns the records."""
        at = _sqlite_now()
        session_rows = []
        record_rows: list[tuple[Any, ...]] = []
        texts: list[str] = []
        for item in items:
            row = _session_row(item["messages"], item.get("model"), namespace, at)
            session_rows.append(row)
            record_rows += _record_rows(row[0], item["messages"], at)
            texts += [_text(m) for m in item["messages"]]
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(SQLITE_INSERT_SESSION, session_rows)
            _insert_indexed(conn, SQLITE_INSERT, record_rows, texts)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return len(record_rows)

    async def load_lines(self, files: Sequence[ParsedFile], namespace: str) -> int:
        """Insert the sessions and records of parsed transcripts, with the records' FTS5
        rows (each line's message text), in one transaction."""
        session_rows, record_rows = _file_rows(files, namespace, _sqlite_now())
        texts = [_text(line["message"]) for lines in files for line in lines]
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(SQLITE_INSERT_SESSION, session_rows)
            _insert_indexed(conn, SQLITE_INSERT_LINE, record_rows, texts)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return len(record_rows)

    async def dump(self, out_dir: Path) -> int:
        """SELECT every record in order and write each payload as a line, a file per
        session; returns the lines written."""
        return _write_lines(out_dir, self.conn.execute(PG_DUMP))

    async def kept_messages(self, session_id: str, first_kept_seq: int) -> list[Any]:
        return self.conn.execute(SQLITE_KEPT, (session_id, first_kept_seq)).fetchall()

    async def kept_parsed(self, session_id: str, first_kept_seq: int) -> list[Any]:
        rows = self.conn.execute(SQLITE_KEPT, (session_id, first_kept_seq)).fetchall()
        return [orjson.loads(r[1]) for r in rows]

    async def history_parsed(self, session_id: str) -> list[Any]:
        rows = self.conn.execute(SQLITE_HISTORY, (session_id,)).fetchall()
        return [(*r[:5], orjson.loads(r[5])) for r in rows]

    async def first_page(self, namespace: str, limit: int) -> list[Any]:
        return self.conn.execute(SQLITE_FIRST_PAGE, (namespace, limit + 1)).fetchall()


Floor = PostgresFloor | SQLiteFloor


async def open_floor(db: Database) -> Floor:
    if db.backend == "postgres":
        return await PostgresFloor.open(db)
    return await SQLiteFloor.open(db)


# -- a file-based tool ----------------------------------------------------------------


def replay_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rebuild the context from a session file as a file-based tool must: read and parse
    every line, find the latest compaction, keep the messages from its firstKeptSeq.

    Parsed with orjson, the decoder sessiondb itself uses, so the floor is not slowed by
    a slower parser.
    """
    with path.open("rb") as f:
        entries = [orjson.loads(line) for line in f]
    compaction = next((e for e in reversed(entries) if e["type"] == "compaction"), None)
    context: list[dict[str, Any]] = []
    first_kept = 0
    if compaction is not None:
        first_kept = compaction["firstKeptSeq"]
        context.append(
            {"role": "user", "content": [{"type": "text", "text": compaction["summary"]}]}
        )
    context += [e["message"] for e in entries if e["type"] == "message" and e["seq"] >= first_kept]
    return context
