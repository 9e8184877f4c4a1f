"""A year of a service's records, bulk-loaded as the background of ``--scale``.

The mix: sessions of exponentially distributed length (many short, a few long), written
in turns of four messages (``data.conversation``'s shape, payloads cut from the same
corpus: 0.1-2 KB each); a compaction after every 20th turn of a session longer than 30
turns (keeping the last 10 turns); a tombstone in 2% of the sessions; 3% of the
sessions forks of an earlier one; a key on half of them and external uuids on a third
(imported transcripts). The turns of ``ACTIVE`` sessions at a time interleave, as a
service's appends do, so a session's records are spread over the heap and the indexes
grow by random inserts, not in key order. Timestamps run over the year before now.

The search index is filled as sessiondb's writes fill it: each record's text taken out
of its payload by ``sessiondb.search_text``, and on Postgres its ``search`` column made
by the store's own expression (``statements.search_vector``, the store's default
configuration), on SQLite a row of the FTS5 table with the record's rowid. A word the
corpus never makes (``search.NEEDLE``) is planted in ``NEEDLE_RECORDS`` user messages
spread evenly over the year, whatever the size: the search figure's hits.

The rows go in with the bulk path of each driver: COPY (asyncpg) on Postgres,
``executemany`` in transactions of ``CHUNK`` rows on SQLite, into the migrated schema
with every index in place, so that they grow by random inserts as a service's do. Only
the records' foreign key is dropped for the COPY and added back (validated) after it,
as pg_restore does; the figures then run on exactly the migrated schema.
"""

from __future__ import annotations

import random
import sqlite3
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from time import perf_counter
from typing import Any

import asyncpg
import orjson
from sqlalchemy import Text, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from ulid import ULID

from sessiondb import search_text, statements
from sessiondb.backends.base import Compiler

from . import data
from .databases import Database
from .floors import sqlite_connect
from .search import NEEDLE, NEEDLE_RECORDS

TURN_RECORDS = data.TURN
COMPACT_EVERY = 20  # turns
COMPACT_MIN = 30  # turns a session needs before it is ever compacted
KEEP_TURNS = 10
TOMBSTONE_SHARE = 0.02
FORK_SHARE = 0.03
ACTIVE = 256  # sessions whose turns interleave
POOL_TURNS = 1000  # distinct turns the payloads are cut from
CHUNK = 200_000  # rows per COPY / per SQLite transaction
SQLITE_CACHE_KB = 256_000  # the loading connection's page cache (the default is 2 MB)
PG_FOREIGN_KEYS = """
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
 WHERE conrelid = 'sessiondb_records'::regclass AND contype = 'f'
"""
SPAN = timedelta(days=365)
NAMESPACE = "default"
SEARCH_CONFIG = "simple"  # the store's default (Settings.search_config)

RECORD_COLUMNS = (
    "session_id", "seq", "kind", "role", "created_at", "uuid", "tool_call_id",
    "target_seq", "first_kept_seq", "size", "payload",
)  # fmt: skip
#: A record row is these columns, then what the search index takes of the record
#: (``search_text.IndexSource``), as sessiondb's own rows are.
SOURCE = len(RECORD_COLUMNS)
SESSION_COLUMNS = (
    "id", "namespace", "name", "created_at", "last_message_at", "model", "source", "key",
    "last_seq", "message_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "cost_total", "parent_id", "fork_seq",
)  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """How much background: records (about: whole turns) in sessions."""

    records: int
    sessions: int


@dataclass(frozen=True)
class Loaded:
    """What a load wrote, and how long it took."""

    records: int
    sessions: int
    seconds: float
    middle_id: str  # a session from the middle of the year (the append figure's)


Source = search_text.IndexSource


@dataclass
class _Turn:
    """One pooled turn: its four messages' (role, tool_call_id, size, payload, index
    source) and usage."""

    rows: list[tuple[str, str | None, int, str, Source]]
    tokens: tuple[int, int, int, int, float]
    name: str


def turn_pool(seed: int, corpus: data.Corpus) -> list[_Turn]:
    messages = data.conversation(POOL_TURNS * TURN_RECORDS, seed, "background", corpus)
    pool = []
    for t in range(POOL_TURNS):
        rows = []
        tokens = [0, 0, 0, 0]
        cost = 0.0
        for m in messages[t * TURN_RECORDS : (t + 1) * TURN_RECORDS]:
            payload = orjson.dumps(m).decode()
            source = search_text.payload_index_source("message", payload)
            rows.append((m["role"], m.get("toolCallId"), len(payload), payload, source))
            usage = m.get("usage") or {}
            for i, k in enumerate(("input", "output", "cacheRead", "cacheWrite")):
                tokens[i] += usage.get(k, 0)
            cost += (usage.get("cost") or {}).get("total", 0.0)
        name = messages[t * TURN_RECORDS]["content"][0]["text"][:50]
        pool.append(_Turn(rows, (tokens[0], tokens[1], tokens[2], tokens[3], cost), name))
    return pool


class Plan:
    """Every session's length, fork point and tombstone, and the interleaved order of
    all turns: decided before a row is written (the session rows go in first, as the
    records refer to them)."""

    def __init__(self, shape: Shape, seed: int) -> None:
        rng = random.Random(f"sessiondb-bench-background-{seed}")
        n = shape.sessions
        mean = max(1.0, shape.records / n / TURN_RECORDS)
        self.turns = array("i", (max(1, round(rng.expovariate(1 / mean))) for _ in range(n)))
        self.parent = array("i", [-1] * n)
        self.fork_seq = array("q", [0] * n)
        self.fork_messages = array("q", [0] * n)  # messages inherited at the fork point
        self.tomb_turn = array("i", [0] * n)
        for i in range(n):
            if i > 0 and rng.random() < FORK_SHARE:
                p = rng.randrange(max(0, i - 5000), i)
                turn = rng.randint(1, self.turns[p])
                self.parent[i] = p
                self.fork_seq[i] = self.seq_after(p, turn)
                self.fork_messages[i] = self.fork_messages[p] + TURN_RECORDS * turn
            if rng.random() < TOMBSTONE_SHARE:
                self.tomb_turn[i] = rng.randint(1, self.turns[i])
        # The interleaved order: each step, one turn of a random active session.
        self.order = array("i")
        active = list(range(min(ACTIVE, n)))
        left = [self.turns[i] for i in active]
        following = len(active)
        while active:
            slot = rng.randrange(len(active))
            self.order.append(active[slot])
            left[slot] -= 1
            if left[slot] == 0:
                if following < n:
                    active[slot], left[slot] = following, self.turns[following]
                    following += 1
                else:
                    active.pop(slot)
                    left.pop(slot)
        self.first_step = array("q", [-1] * n)
        self.last_step = array("q", [0] * n)
        for step, i in enumerate(self.order):
            if self.first_step[i] < 0:
                self.first_step[i] = step
            self.last_step[i] = step
        self.pool_offset = array("i", (rng.randrange(POOL_TURNS) for _ in range(n)))
        # The steps whose user message holds the needle: evenly spread over the year.
        steps = len(self.order)
        self.needle_steps = frozenset(
            (k * steps + steps // 2) // NEEDLE_RECORDS for k in range(NEEDLE_RECORDS)
        )

    def compacts(self, i: int) -> bool:
        return self.turns[i] > COMPACT_MIN

    def seq_after(self, i: int, turn: int) -> int:
        """The seq of session ``i``'s last record of its ``turn``-th own turn."""
        extra = turn // COMPACT_EVERY if self.compacts(i) else 0
        extra += 1 if 0 < self.tomb_turn[i] <= turn else 0
        return int(self.fork_seq[i]) + TURN_RECORDS * turn + extra


class Clock:
    """Step number -> time, spread evenly over the year before now."""

    def __init__(self, steps: int) -> None:
        self.start = datetime.now(UTC) - SPAN
        self.tick = SPAN / max(1, steps)

    def at(self, step: int) -> datetime:
        return self.start + self.tick * step


def _sqlite_text(at: datetime) -> str:
    # The text sessiondb writes for a UTC timestamp on SQLite.
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")


def session_ids(plan: Plan, clock: Clock) -> list[str]:
    return [
        str(ULID.from_datetime(clock.at(int(plan.first_step[i])))) for i in range(len(plan.turns))
    ]


def session_rows(
    plan: Plan, ids: list[str], pool: list[_Turn], clock: Clock, stamp: Callable[[datetime], Any]
) -> Iterator[tuple[Any, ...]]:
    for i in range(len(plan.turns)):
        turns = plan.turns[i]
        totals = [0, 0, 0, 0, 0.0]
        for u in range(1, turns + 1):
            for k, v in enumerate(pool[(plan.pool_offset[i] + u) % POOL_TURNS].tokens):
                totals[k] += v
        parent = plan.parent[i]
        yield (
            ids[i], NAMESPACE, pool[(plan.pool_offset[i] + 1) % POOL_TURNS].name,
            stamp(clock.at(int(plan.first_step[i]))), stamp(clock.at(int(plan.last_step[i]))),
            "bench-model", "interactive", f"user:{i}/thread:1" if i % 2 == 0 else None,
            plan.seq_after(i, turns), plan.fork_messages[i] + TURN_RECORDS * turns, *totals,
            ids[parent] if parent >= 0 else None, plan.fork_seq[i] if parent >= 0 else None,
        )  # fmt: skip


def _compaction_payload(first_kept: int) -> str:
    return orjson.dumps(
        {
            "summary": data.COMPACTION_SUMMARY,
            "firstKeptSeq": first_kept,
            "tokensBefore": 123_456,
            "readFiles": [],
            "modifiedFiles": [],
        }
    ).decode()


def _with_needle(
    row: tuple[str, str | None, int, str, Source],
) -> tuple[str, str | None, int, str, Source]:
    """A pooled user message with :data:`NEEDLE` in the middle of its text."""
    message = orjson.loads(row[3])
    text = message["content"][0]["text"]
    message["content"][0]["text"] = f"{text} {NEEDLE} {text}"
    payload = orjson.dumps(message).decode()
    source = search_text.payload_index_source("message", payload)
    return row[0], row[1], len(payload), payload, source


def record_rows(
    plan: Plan, ids: list[str], pool: list[_Turn], clock: Clock, stamp: Callable[[datetime], Any]
) -> Iterator[tuple[Any, ...]]:
    """Every record, in the interleaved order of the turns: its columns
    (:data:`RECORD_COLUMNS`), then its index source."""
    done = array("i", [0] * len(plan.turns))
    summary = search_text.index_source("compaction", {"summary": data.COMPACTION_SUMMARY})
    for step, i in enumerate(plan.order):
        u = done[i] + 1
        done[i] = u
        sid = ids[i]
        at = stamp(clock.at(step))
        seq = plan.seq_after(i, u - 1)
        with_uuid = i % 3 == 0
        rows = pool[(plan.pool_offset[i] + u) % POOL_TURNS].rows
        if step in plan.needle_steps:
            rows = [_with_needle(rows[0]), *rows[1:]]
        for role, tool_call_id, size, payload, source in rows:
            seq += 1
            uuid = f"{i:08x}-{seq:04x}-4000-8000-{step:012x}" if with_uuid else None
            yield (
                sid, seq, "message", role, at, uuid, tool_call_id, None, None, size, payload,
                source,
            )  # fmt: skip
        if plan.compacts(i) and u % COMPACT_EVERY == 0:
            # Keep the last KEEP_TURNS turns: from the user message that opened the first.
            first_kept = plan.seq_after(i, u - KEEP_TURNS) + 1
            payload = _compaction_payload(first_kept)
            seq += 1
            yield (
                sid, seq, "compaction", None, at, None, None, None, first_kept, len(payload),
                payload, summary,
            )  # fmt: skip
        if plan.tomb_turn[i] == u:
            payload = orjson.dumps({"targetSeq": seq, "reason": None}).decode()
            target = seq
            seq += 1
            yield (
                sid, seq, "tombstone", None, at, None, None, target, None, len(payload), payload,
                None,
            )  # fmt: skip


def _chunks(rows: Iterator[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def load(
    db: Database, shape: Shape, seed: int, corpus: data.Corpus, log: Callable[[str], None]
) -> Loaded:
    """Bulk-load ``shape`` into ``db`` (migrated, empty or not); what was written."""
    started = perf_counter()
    plan = Plan(shape, seed)
    pool = turn_pool(seed, corpus)
    clock = Clock(len(plan.order))
    ids = session_ids(plan, clock)
    log(f"{db.backend}: planned {len(ids):,} sessions in {perf_counter() - started:.1f} s")
    written = 0
    if db.backend == "postgres":
        conn = await asyncpg.connect(db.dsn)
        try:
            await conn.copy_records_to_table(
                "sessiondb_sessions",
                records=list(session_rows(plan, ids, pool, clock, lambda at: at)),
                columns=SESSION_COLUMNS,
            )
            # As pg_restore does: the records' foreign key is checked once at the end
            # (one join) instead of per row (a trigger and a row lock each: a third of
            # the load's time); the indexes stay, so they grow as a service's do.
            foreign_keys = await conn.fetch(PG_FOREIGN_KEYS)
            for fk in foreign_keys:
                await conn.execute(f'ALTER TABLE sessiondb_records DROP CONSTRAINT "{fk[0]}"')
            # The index's vectors travel in COPY's binary form, made by the server with
            # the store's expression once per distinct text (the pool's turns repeat).
            await conn.set_type_codec(
                "tsvector", schema="pg_catalog", encoder=_same, decoder=_same, format="binary"
            )
            vectors: dict[Source, bytes] = {}
            for chunk in _chunks(record_rows(plan, ids, pool, clock, lambda at: at), CHUNK):
                await _add_vectors(conn, vectors, chunk)
                await conn.copy_records_to_table(
                    "sessiondb_records",
                    records=[
                        (*r[:SOURCE], None if r[SOURCE] is None else vectors[r[SOURCE]])
                        for r in chunk
                    ],
                    columns=(*RECORD_COLUMNS, "search"),
                )
                written += len(chunk)
                if written % (CHUNK * 10) == 0:
                    log(f"postgres: {written:,} records ({perf_counter() - started:.0f} s)")
            for fk in foreign_keys:
                await conn.execute(
                    f'ALTER TABLE sessiondb_records ADD CONSTRAINT "{fk[0]}" {fk[1]}'
                )
        finally:
            await conn.close()
    else:
        conn3 = sqlite_connect(db.path)
        conn3.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KB}")
        try:
            insert = _sqlite_insert("sessiondb_records", RECORD_COLUMNS)
            _sqlite_batch(
                conn3,
                _sqlite_insert("sessiondb_sessions", SESSION_COLUMNS),
                list(session_rows(plan, ids, pool, clock, _sqlite_text)),
            )
            index = _sqlite_index()
            for chunk in _chunks(record_rows(plan, ids, pool, clock, _sqlite_text), CHUNK):
                _sqlite_records(conn3, insert, index, chunk)
                written += len(chunk)
                if written % (CHUNK * 10) == 0:
                    log(f"sqlite: {written:,} records ({perf_counter() - started:.0f} s)")
        finally:
            conn3.close()
    middle = len(ids) // 2
    while plan.parent[middle] >= 0 and middle + 1 < len(ids):
        middle += 1
    return Loaded(written, len(ids), perf_counter() - started, ids[middle])


def _same(value: bytes) -> bytes:
    return value


@cache
def _vectors_statement() -> tuple[str, tuple[str, ...]]:
    """Postgres: the search vectors of arrays of texts (``body``, ``thinking``), in
    their order, made by the expression the store's inserts use."""
    texts = (
        func.unnest(
            bindparam("body", type_=ARRAY(Text())), bindparam("thinking", type_=ARRAY(Text()))
        )
        .table_valued("body", "thinking", with_ordinality="i")
        .render_derived(name="texts")
    )
    stmt = select(statements.search_vector(texts.c.body, texts.c.thinking)).order_by(texts.c.i)
    compiled = Compiler(asyncpg_dialect())(stmt)  # type: ignore[no-untyped-call]
    return compiled.sql, compiled.names


async def _add_vectors(
    conn: asyncpg.Connection, vectors: dict[Source, bytes], chunk: list[tuple[Any, ...]]
) -> None:
    """Put the vector of every index source of ``chunk`` into ``vectors``."""
    new = list({r[SOURCE] for r in chunk if r[SOURCE] is not None} - vectors.keys())
    if not new:
        return
    sql, names = _vectors_statement()
    params = {
        "body": [s[0] for s in new],
        "thinking": [s[1] for s in new],
        "search_config": SEARCH_CONFIG,
    }
    made = await conn.fetch(sql, *(params[n] for n in names))
    vectors.update(zip(new, (row[0] for row in made), strict=True))


def _sqlite_index() -> str:
    """SQLite: the store's statement that indexes one record in the FTS5 table."""
    compiled = Compiler(sqlite_dialect(paramstyle="qmark"))(statements.INDEX_RECORD_SQLITE)
    if compiled.names != ("rowid", "body", "thinking"):
        raise AssertionError(f"the index statement's parameters changed: {compiled.names}")
    return compiled.sql


def _sqlite_records(
    conn: sqlite3.Connection, insert: str, index: str, rows: list[tuple[Any, ...]]
) -> None:
    """One transaction: each record, and its row of the FTS5 table under the rowid its
    insert gave (as the store writes them)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for r in rows:
            rowid = conn.execute(insert, r[:SOURCE]).lastrowid
            if r[SOURCE] is not None:
                conn.execute(index, (rowid, *r[SOURCE]))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _sqlite_insert(table: str, columns: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


def _sqlite_batch(conn: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(sql, rows)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
