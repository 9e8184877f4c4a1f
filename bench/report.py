"""Results: one row per figure and backend, printed as a table and written as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Goal:
    """A bound on a figure's ratio, or with ``absolute`` on sessiondb's own median in
    seconds (a goal stated in time, as figure 14's start-up goals are)."""

    op: Literal["<=", ">="]
    value: float
    absolute: bool = False

    def met(self, measured: float) -> bool:
        return measured <= self.value if self.op == "<=" else measured >= self.value

    def __str__(self) -> str:
        return f"{self.op} {seconds(self.value)}" if self.absolute else f"{self.op} {self.value:g}"


@dataclass(frozen=True)
class Result:
    """sessiondb's median beside its floor's.

    ``ratio`` is sessiondb / floor (lower is better), except for a ``speedup`` figure,
    where it is floor / sessiondb: how many times faster sessiondb is.
    """

    figure: str
    backend: str
    sessiondb_s: float
    floor_s: float
    goal: Goal | None = None
    speedup: bool = False

    @property
    def ratio(self) -> float:
        if self.speedup:
            return self.floor_s / self.sessiondb_s
        return self.sessiondb_s / self.floor_s

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        return self.goal.met(self.sessiondb_s if self.goal.absolute else self.ratio)

    def to_json(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "backend": self.backend,
            "sessiondb_median_s": self.sessiondb_s,
            "floor_median_s": self.floor_s,
            "ratio": round(self.ratio, 4),
            "goal": None if self.goal is None else str(self.goal),
            "met": self.met,
        }


def seconds(value: float) -> str:
    """A duration with a unit a reader takes in at a glance."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.2f} s"


HEADERS = ("figure", "backend", "sessiondb", "floor", "ratio", "goal", "met")

NOTES = (
    "ratio = sessiondb median / floor median (lower is better), except 'x faster' rows:",
    "  floor / sessiondb, how many times faster sessiondb is than replaying the file.",
    "Figure 3's goal, records/s >= 0.5 x the floor's, is a time ratio <= 2.",
    "Figures 5 and 6 compare sessiondb with itself: the floor is the easy case.",
    "Figure 13's goals are on sessiondb's own time (whole process), not on the ratio.",
)


def table(results: list[Result]) -> str:
    rows = [
        (
            r.figure,
            r.backend,
            seconds(r.sessiondb_s),
            seconds(r.floor_s),
            f"{r.ratio:.1f}x faster" if r.speedup else f"{r.ratio:.2f}",
            "" if r.goal is None else str(r.goal),
            {True: "yes", False: "NO", None: "-"}[r.met],
        )
        for r in results
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(HEADERS, *rows, strict=True)]
    right = {2, 3, 4}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [line(HEADERS), line(tuple("-" * w for w in widths))]
    out += [line(row) for row in rows]
    return "\n".join([*out, "", *NOTES])


@dataclass(frozen=True)
class Footprint:
    """What a ``--scale`` database holds and what it costs on disk; bytes per record
    are the records table's (the sessions table's are over the same record count)."""

    backend: str
    label: str  # "scale" | "quick"
    records: int
    sessions: int
    load_s: float
    records_table: int  # bytes: Postgres heap + TOAST, SQLite the table's pages
    records_indexes: int
    sessions_table: int
    sessions_indexes: int
    analyze_s: float  # ANALYZE of every column of every table
    sessiondb_analyze_s: float  # the ANALYZE sessiondb runs after a bulk import (Postgres)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__}


FOOTPRINT_HEADERS = (
    "backend", "database", "records", "sessions", "load", "records/s", "table B/rec",
    "index B/rec", "sessions B/session", "ANALYZE", "sessiondb ANALYZE",
)  # fmt: skip


def footprint_table(rows: list[Footprint]) -> str:
    cells = [
        (
            f.backend,
            f.label,
            f"{f.records:,}",
            f"{f.sessions:,}",
            seconds(f.load_s),
            f"{f.records / f.load_s:,.0f}",
            f"{f.records_table / f.records:.0f}",
            f"{f.records_indexes / f.records:.0f}",
            f"{(f.sessions_table + f.sessions_indexes) / f.sessions:.0f}",
            seconds(f.analyze_s),
            "-"
            if f.sessiondb_analyze_s != f.sessiondb_analyze_s
            else seconds(f.sessiondb_analyze_s),
        )
        for f in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(FOOTPRINT_HEADERS, *cells, strict=True)]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    out = [line(FOOTPRINT_HEADERS), line(tuple("-" * w for w in widths))]
    return "\n".join([*out, *(line(row) for row in cells), "", *FOOTPRINT_NOTES])


FOOTPRINT_NOTES = (
    "B/rec: bytes per record of the records table (Postgres: heap + TOAST, the search",
    "  column too; SQLite: its pages, dbstat) and of its indexes (pg_indexes_size, the",
    "  search GIN index among them; SQLite: the indexes' pages and the FTS5 tables').",
    "ANALYZE: of every table and column (SQLite: its statistics removed again afterwards,",
    "  as sessiondb's plans run without them); sessiondb ANALYZE: the one an import runs.",
)
