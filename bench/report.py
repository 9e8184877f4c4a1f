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
